/*
 * test_snapfile.c - snapshot files without drun-mcp: importing the original drun's .drun
 * files (reference §6.1), the snapshots_dir path rule, writing, listing and restoring.
 *
 * The generator writes files as the original does: "DRUN" + one zstd frame (level 3)
 * of JSON whose blobs are arrays of byte values and whose checkpoints name files by
 * blob index. Malformed files must be refused with a clear error and leave nothing.
 */
#include "test.h"

#include <sqlite3.h>
#include <zstd.h>

#include "policy/policy.h"
#include "store/store.h"
#include "snapfile/snapfile.h"
#include "util/mem.h"
#include "workspace/workspace.h"

static const char GOOD_JSON[] =
    "{\"checkpoint_idx\":2,\"parent\":{\"session_id\":\"a1b2c\",\"checkpoint_id\":1},"
    "\"label\":\"legacy\",\"overlays\":{\"data\":\"/srv/data\"},"
    "\"blobs\":[[104,105,10],[98,121,101,10],[]],"
    "\"checkpoints\":["
    "{\"id\":0,\"stdout\":\"\",\"stderr\":\"\",\"steps\":[],\"files\":{}},"
    "{\"id\":1,\"stdout\":\"\",\"stderr\":\"\",\"tool\":\"session_write_files\","
    "\"description\":\"add\",\"label\":\"start\",\"steps\":[{\"tool\":\"session_write_files\","
    "\"description\":\"add\"},{\"tool\":\"session_read_file\",\"description\":\"look\"}],"
    "\"files\":{\"a.txt\":0,\"dir/b.txt\":1,\"empty\":2}},"
    "{\"id\":2,\"stdout\":\"out\\n\",\"stderr\":\"oops\\n\",\"command\":\"rm a.txt\","
    "\"exit_code\":1,\"tool\":\"session_bash\",\"files\":{\"dir/b.txt\":0,\"empty\":2}}],"
    "\"chat_log\":[{\"prompt\":\"hello\",\"response\":\"hi\"}]}";

/* Packs JSON as the original does; `cut` bytes are dropped from the end. */
static void
pack(const char *json, size_t cut, struct buf *out)
{
    size_t bound = ZSTD_compressBound(strlen(json));
    char *z = mem_alloc(bound);
    size_t n;

    CHECK(z != NULL);
    n = ZSTD_compress(z, bound, json, strlen(json), 3);
    CHECK(!ZSTD_isError(n));
    buf_reset(out);
    buf_append(out, "DRUN", 4);
    buf_append(out, z, n - (cut < n ? cut : 0));
    mem_free(z);
}

static int64_t
count(struct store *st, const char *sql)
{
    sqlite3_stmt *s = NULL;
    int64_t v = -1;

    CHECK(sqlite3_prepare_v2(store_db(st), sql, -1, &s, NULL) == SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW) {
        v = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    return v;
}

TEST(drun_file_imports)
{
    struct store *st = NULL;
    struct store_snapshot snap;
    struct store_session rs;
    struct store_checkpoint *cps = NULL;
    size_t n = 0;
    struct buf file, bytes;
    struct ws_manifest *m = NULL;
    struct store_step *steps = NULL;
    size_t nsteps = 0;
    struct err err;

    buf_init(&file, 1 << 20);
    buf_init(&bytes, 1 << 20);
    pack(GOOD_JSON, 0, &file);
    CHECK_OK(store_open(test_path("d.db"), NULL, &st, &err), &err);
    CHECK(snapfile_is_drun(file.data, file.len));
    CHECK_OK(snapfile_import(st, file.data, file.len, "legacy", "a1b2c", NULL, &snap, &err), &err);
    CHECK_EQ_INT(snap.head, 2);
    CHECK_EQ_INT(snap.checkpoints, 3);
    CHECK_EQ_STR(snap.label, "legacy");
    CHECK_OK(store_snapshot_restore(st, "legacy", -1, 0, 0, &rs, &err), &err);
    CHECK_EQ_INT(rs.head, 2);
    CHECK_EQ_STR(rs.label, "legacy");
    CHECK_OK(store_checkpoint_list(st, rs.id, 1, &cps, &n, &err), &err);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_STR(cps[1].label, "start");
    CHECK_EQ_STR(cps[2].command, "rm a.txt");
    CHECK(cps[2].has_exit_code && cps[2].exit_code == 1);
    CHECK_EQ_INT(cps[2].removed, 1);
    CHECK_EQ_INT(cps[2].modified, 1);
    CHECK_OK(store_blob_get(st, cps[2].stderr_hash, &bytes, &err), &err);
    CHECK_EQ_STR(buf_cstr(&bytes), "oops\n");
    buf_reset(&bytes);
    CHECK_OK(store_blob_get(st, cps[2].manifest_hash, &bytes, &err), &err);
    CHECK_OK(ws_manifest_decode(bytes.data, bytes.len, &m, &err), &err);
    CHECK_EQ_INT(ws_manifest_count(m), 2);
    {
        const struct ws_entry *e = ws_manifest_get(m, "dir/b.txt");
        CHECK(e != NULL && e->size == 3); /* now blob 0, "hi\n" */
        buf_reset(&bytes);
        CHECK_OK(store_blob_get(st, e->hash, &bytes, &err), &err);
        CHECK_EQ_STR(buf_cstr(&bytes), "hi\n");
        CHECK(ws_manifest_get(m, "empty") != NULL);
    }
    CHECK_OK(store_step_list(st, rs.id, 1, &steps, &nsteps, &err), &err);
    CHECK_EQ_INT(nsteps, 2);
    CHECK_EQ_STR(steps[1].tool, "session_read_file");
    store_step_list_free(steps, nsteps);
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM session_chat WHERE prompt = 'hello'"), 1);
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM session_overlays WHERE key = 'data'"), 1);
    ws_manifest_free(m);
    store_checkpoint_list_free(cps, n);
    store_session_release(&rs);
    store_snapshot_release(&snap);
    buf_release(&file);
    buf_release(&bytes);
    store_close(st);
}

/* Replaces the first occurrence of `from` in GOOD_JSON by `to`. */
static char *
edit(const char *from, const char *to)
{
    const char *at = strstr(GOOD_JSON, from);
    struct buf b;

    CHECK(at != NULL);
    buf_init(&b, 1 << 20);
    buf_append(&b, GOOD_JSON, (size_t)(at - GOOD_JSON));
    buf_puts(&b, to);
    buf_puts(&b, at + strlen(from));
    return buf_detach(&b, NULL);
}

TEST(drun_file_malformed_refused)
{
    struct store *st = NULL;
    struct buf file;
    struct err err;
    struct {
        const char *from, *to;
        size_t cut;
        int bad_magic;
        const char *says;
    } cases[] = {
        {"", "", 0, 1, "missing magic"},
        {"", "", 7, 0, "zstd"},
        {"\"chat_log\":[{\"prompt\":\"hello\",\"response\":\"hi\"}]", "\"x\":1", 0, 0,
         "no 'chat_log'"},
        {"\"checkpoint_idx\":2,", "", 0, 0, "no 'checkpoint_idx'"},
        {"{\"id\":2,\"stdout\":\"out\\n\",", "{\"id\":2,", 0, 0, "no 'stdout'"},
        {"\"dir/b.txt\":0,\"empty\":2}}]", "\"dir/b.txt\":3,\"empty\":2}}]", 0, 0,
         "names blob 3, but there are 3 blobs"},
        {"[104,105,10]", "[104,256,10]", 0, 0, "not a byte"},
        {"\"a.txt\":0", "\"../a.txt\":0", 0, 0, "checkpoint 1"},
        {"\"checkpoint_idx\":2", "\"checkpoint_idx\":3", 0, 0, "past its 3 checkpoints"},
        {"\"checkpoint_idx\":2", "\"checkpoint_idx\":\"2\"", 0, 0, "must be arrays"},
        {"{\"checkpoint_idx\"", "[{\"checkpoint_idx\"", 0, 0, "does not parse"},
    };

    CHECK_OK(store_open(test_path("d.db"), NULL, &st, &err), &err);
    buf_init(&file, 1 << 20);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *json = edit(cases[i].from, cases[i].to);
        pack(json, cases[i].cut, &file);
        if (cases[i].bad_magic) {
            file.data[0] = 'X';
        }
        CHECK_MSG(snapfile_import(st, file.data, file.len, "bad", "x", NULL, NULL, &err) < 0,
                  "case %zu was imported", i);
        CHECK_MSG(err.code == ERR_CORRUPT || err.code == ERR_INVAL, "case %zu: code %d", i,
                  err.code);
        CHECK_MSG(strstr(err.msg, cases[i].says) != NULL, "case %zu: '%s'", i, err.msg);
        CHECK_EQ_INT(count(st, "SELECT count(*) FROM snapshots"), 0);
        CHECK_EQ_INT(count(st, "SELECT count(*) FROM snapshot_checkpoints"), 0);
        CHECK_EQ_INT(count(st, "SELECT count(*) FROM blobs"), 0);
        mem_free(json);
    }
    /* the unedited file still imports */
    pack(GOOD_JSON, 0, &file);
    CHECK_OK(snapfile_import(st, file.data, file.len, "good", "x", NULL, NULL, &err), &err);
    CHECK(snapfile_import(st, file.data, file.len, "good", "x", NULL, NULL, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_EXISTS);
    buf_release(&file);
    store_close(st);
}

/* A .drun JSON with n checkpoints, n_ov overlays on "/" and an extra member nested
 * `depth` arrays deep. */
static void
gen(struct buf *json, size_t n, size_t n_ov, size_t depth)
{
    buf_reset(json);
    buf_puts(json, "{\"checkpoint_idx\":0,\"blobs\":[],\"chat_log\":[],\"x\":");
    for (size_t i = 0; i < depth; i++) {
        buf_putc(json, '[');
    }
    for (size_t i = 0; i < depth; i++) {
        buf_putc(json, ']');
    }
    buf_puts(json, depth ? ",\"overlays\":{" : "0,\"overlays\":{");
    for (size_t i = 0; i < n_ov; i++) {
        buf_printf(json, "%s\"k%zu\":\"/\"", i ? "," : "", i);
    }
    buf_puts(json, "},\"checkpoints\":[");
    for (size_t i = 0; i < n; i++) {
        buf_printf(json, "%s{\"id\":%zu,\"stdout\":\"\",\"stderr\":\"\",\"files\":{}}",
                   i ? "," : "", i);
    }
    buf_puts(json, "]}");
    CHECK(!buf_failed(json));
}

TEST(drun_file_limits_at_and_past_the_edge)
{
    struct store *st = NULL;
    struct buf json, file;
    struct snapfile_vet vet;
    struct policy *p = policy_defaults();
    struct err err;

    CHECK(p != NULL);
    CHECK_OK(store_open(test_path("d.db"), NULL, &st, &err), &err);
    buf_init(&json, 64 << 20);
    buf_init(&file, 64 << 20);
    /* nesting: the root object is level 1, so 15 arrays inside it reach the cap of 16 */
    gen(&json, 1, 0, SNAPFILE_DEPTH_MAX - 1);
    pack(json.data, 0, &file);
    CHECK_OK(snapfile_import(st, file.data, file.len, "deep-ok", "x", NULL, NULL, &err), &err);
    gen(&json, 1, 0, SNAPFILE_DEPTH_MAX);
    pack(json.data, 0, &file);
    CHECK(snapfile_import(st, file.data, file.len, "deep", "x", NULL, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "nests deeper than 16 levels") != NULL, "'%s'", err.msg);
    /* checkpoints */
    gen(&json, SNAPFILE_CHECKPOINTS_MAX, 0, 0);
    pack(json.data, 0, &file);
    CHECK_OK(snapfile_import(st, file.data, file.len, "cps-ok", "x", NULL, NULL, &err), &err);
    gen(&json, SNAPFILE_CHECKPOINTS_MAX + 1, 0, 0);
    pack(json.data, 0, &file);
    CHECK(snapfile_import(st, file.data, file.len, "cps", "x", NULL, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "10001 checkpoints, more than the 10000") != NULL, "'%s'", err.msg);
    /* overlays: every one on "/" is dropped, the first 64 listed, all counted */
    snapfile_vet_init(&vet, p);
    gen(&json, 1, SNAPFILE_OVERLAYS_MAX, 0);
    pack(json.data, 0, &file);
    CHECK_OK(snapfile_import(st, file.data, file.len, "ovs-ok", "x", &vet, NULL, &err), &err);
    CHECK_EQ_INT(vet.total, SNAPFILE_OVERLAYS_MAX);
    CHECK_EQ_INT(vet.n_dropped, SNAPFILE_DROPPED_MAX);
    CHECK_EQ_STR(vet.dropped[0].host_path, "/");
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM snapshot_overlays"), 0);
    gen(&json, 1, SNAPFILE_OVERLAYS_MAX + 1, 0);
    pack(json.data, 0, &file);
    CHECK(snapfile_import(st, file.data, file.len, "ovs", "x", &vet, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "10001 overlays, more than the 10000") != NULL, "'%s'", err.msg);
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM snapshots"), 3);
    snapfile_vet_release(&vet);
    policy_unref(p);
    buf_release(&json);
    buf_release(&file);
    store_close(st);
}

/* ---- snapshots_dir ------------------------------------------------------------------- */

TEST(rel_follows_the_reference_rule)
{
    char rel[SNAPFILE_PATH_MAX], longp[SNAPFILE_PATH_MAX + 8];
    struct err err;

    CHECK_OK(snapfile_rel("/srv/snaps", "/srv/snaps/a/./b.db", rel, sizeof(rel), &err), &err);
    CHECK_EQ_STR(rel, "a/b.db");
    CHECK_OK(snapfile_rel("/srv/snaps/", "//srv//snaps//x", rel, sizeof(rel), &err), &err);
    CHECK_EQ_STR(rel, "x");
    CHECK(snapfile_rel("/srv/snaps", "/srv/snaps/../etc/passwd", rel, sizeof(rel), &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(strstr(err.msg, "'..'") != NULL);
    CHECK(snapfile_rel("/srv/snaps", "/srv/snapsx/a", rel, sizeof(rel), &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(snapfile_rel("/srv/snaps", "srv/snaps/a", rel, sizeof(rel), &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(snapfile_rel("/srv/snaps", "/srv/snaps/.", rel, sizeof(rel), &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    /* the length cap: at the edge (4095 bytes) the rule applies; past it, refused */
    memset(longp, 'a', sizeof(longp));
    memcpy(longp, "/srv/snaps/", 11);
    longp[SNAPFILE_PATH_MAX - 1] = '\0';
    CHECK_OK(snapfile_rel("/srv/snaps", longp, rel, sizeof(rel), &err), &err);
    CHECK_EQ_INT(strlen(rel), SNAPFILE_PATH_MAX - 1 - 11);
    CHECK(snapfile_rel("/srv/snaps", longp, rel, 100, &err) < 0); /* rel's room is checked */
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "too long") != NULL);
    longp[SNAPFILE_PATH_MAX - 1] = 'a';
    longp[SNAPFILE_PATH_MAX] = '\0';
    CHECK(snapfile_rel("/srv/snaps", longp, rel, sizeof(rel), &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "longer than 4095 bytes") != NULL);
}

/* A DB with the GOOD_JSON .drun imported as snapshot "legacy". */
static struct store *
legacy_store(void)
{
    struct store *st = NULL;
    struct buf file;
    struct err err;

    buf_init(&file, 1 << 20);
    pack(GOOD_JSON, 0, &file);
    CHECK_OK(store_open(test_path("d.db"), NULL, &st, &err), &err);
    CHECK_OK(snapfile_import(st, file.data, file.len, "legacy", "a1b2c", NULL, NULL, &err), &err);
    buf_release(&file);
    return st;
}

static void
write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    CHECK(fd >= 0);
    CHECK(write(fd, data, len) == (ssize_t)len);
    close(fd);
}

TEST(write_list_and_import_round_trip)
{
    struct store *st = legacy_store();
    struct snapfile_entry *list = NULL;
    struct snapfile_vet vet;
    struct store_snapshot snap;
    struct policy *p = policy_defaults();
    char root[4096], meta[] = "{\"label\":\"old\",\"checkpoint_count\":7}";
    struct buf drun;
    size_t n = 0;
    int64_t bytes = 0;
    int fd;
    struct err err;

    CHECK(p != NULL);
    CHECK_FMT(root, sizeof(root), "%s", test_path("snaps/deeper"));
    /* the root and the directories under it are made; the file is told by its bytes */
    CHECK_OK(snapfile_write(st, "legacy", root, "sub/one.db", &bytes, &err), &err);
    CHECK(bytes > 0);
    buf_init(&drun, 1 << 20);
    pack(GOOD_JSON, 0, &drun);
    write_file(test_path("snaps/deeper/two.bin"), drun.data, drun.len);
    write_file(test_path("snaps/deeper/two.bin.meta"), meta, strlen(meta));
    write_file(test_path("snaps/deeper/notes.txt"), "DRU", 3);
    write_file(test_path("snaps/deeper/.hidden"), drun.data, drun.len);
    CHECK(mkfifo(test_path("snaps/deeper/fifo"), 0600) == 0); /* never opened: no hang */
    CHECK(symlink("two.bin", test_path("snaps/deeper/link")) == 0);
    CHECK_OK(snapfile_write(st, "legacy", root, "three.db", &bytes, &err), &err);
    CHECK_OK(snapfile_list(root, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 2); /* sub/ is not walked; notes, .hidden, fifo and link are not files */
    CHECK(strstr(list[0].path, "/deeper/three.db") != NULL);
    CHECK_EQ_STR(list[0].kind, "export");
    CHECK_EQ_INT(list[0].size, bytes);
    CHECK(list[0].label == NULL && list[0].checkpoint_count == -1);
    CHECK_EQ_STR(list[1].kind, "drun");
    CHECK_EQ_STR(list[1].label, "old");
    CHECK_EQ_INT(list[1].checkpoint_count, 7);
    snapfile_list_free(list, n);
    /* a missing directory lists nothing */
    CHECK_OK(snapfile_list(test_path("nowhere"), &list, &n, &err), &err);
    CHECK_EQ_INT(n, 0);
    snapfile_list_free(list, n);
    /* an existing target is replaced; a directory in the way is refused, nothing left */
    CHECK_OK(snapfile_write(st, "legacy", root, "three.db", &bytes, &err), &err);
    CHECK(snapfile_write(st, "legacy", root, "sub", &bytes, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_EXISTS);
    /* a link planted inside snapshots_dir does not redirect the write */
    CHECK(symlink(test_tmpdir(), test_path("snaps/deeper/out")) == 0);
    CHECK(snapfile_write(st, "legacy", root, "out/x.db", &bytes, &err) < 0);
    CHECK(access(test_path("x.db"), F_OK) < 0);
    /* import back: an export keeps its name unless taken, then gets "<stem>-<time>" */
    snapfile_vet_init(&vet, p);
    fd = snapfile_open(test_path("snaps/deeper/three.db"), &err);
    CHECK_OK(fd < 0 ? -1 : 0, &err);
    CHECK_OK(snapfile_import_fd(st, fd, "three.db", NULL, &vet, &snap, &err), &err);
    CHECK(strncmp(snap.name, "three-", 6) == 0);
    CHECK_EQ_INT(snap.checkpoints, 3);
    CHECK_EQ_INT(vet.total, 1); /* the overlay on /srv/data: not in mount_overlay_paths */
    CHECK_EQ_STR(vet.dropped[0].key, "data");
    store_snapshot_release(&snap);
    close(fd);
    /* the .drun through the same call, under a name given */
    fd = snapfile_open(test_path("snaps/deeper/two.bin"), &err);
    CHECK_OK(fd < 0 ? -1 : 0, &err);
    CHECK_OK(snapfile_import_fd(st, fd, "two.bin", "two", &vet, &snap, &err), &err);
    CHECK_EQ_STR(snap.name, "two");
    store_snapshot_release(&snap);
    close(fd);
    /* a FIFO is refused by the open, without blocking */
    CHECK(snapfile_open(test_path("snaps/deeper/fifo"), &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    snapfile_vet_release(&vet);
    buf_release(&drun);
    policy_unref(p);
    store_close(st);
}

TEST(restore_counts_sessions_and_names_what_is_missing)
{
    struct store *st = legacy_store();
    struct store_session s1, s2;
    struct snapfile_vet vet;
    struct policy *p = policy_defaults();
    char name[64];
    struct err err;

    CHECK(p != NULL);
    snapfile_vet_init(&vet, p);
    CHECK_OK(snapfile_restore(st, "legacy", 2, getpid(), 0, &vet, &s1, &err), &err);
    CHECK_EQ_INT(s1.head, 2);
    CHECK_EQ_INT(vet.total, 1); /* its overlay is judged again under the policy */
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM session_overlays"), 0);
    CHECK_OK(snapfile_restore(st, "legacy", 2, getpid(), 0, &vet, &s2, &err), &err);
    /* at the limit: refused, nothing made */
    CHECK(snapfile_restore(st, "legacy", 2, getpid(), 0, &vet, &s2, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    CHECK(strstr(err.msg, "session limit of 2 reached") != NULL);
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM sessions"), 2);
    CHECK(snapfile_restore(st, "nope", 5, getpid(), 0, &vet, &s2, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(strstr(err.msg, "no snapshot named 'nope'") != NULL);
    snapfile_close_name("abcd1234", name, sizeof(name));
    CHECK(strncmp(name, "abcd1234-close-", 15) == 0);
    CHECK_OK(store_snapshot_name_check(name, &err), &err);
    store_session_release(&s1);
    store_session_release(&s2);
    snapfile_vet_release(&vet);
    policy_unref(p);
    store_close(st);
}

TESTS(drun_file_imports, drun_file_malformed_refused, drun_file_limits_at_and_past_the_edge,
      rel_follows_the_reference_rule, write_list_and_import_round_trip,
      restore_counts_sessions_and_names_what_is_missing)
