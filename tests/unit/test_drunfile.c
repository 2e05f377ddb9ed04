/*
 * test_drunfile.c - importing the original drun's .drun files (reference §6.1).
 *
 * The generator writes files as the original does: "DRUN" + one zstd frame (level 3)
 * of JSON whose blobs are arrays of byte values and whose checkpoints name files by
 * blob index. Malformed files must be refused with a clear error and leave nothing.
 */
#include "test.h"

#include <sqlite3.h>
#include <zstd.h>

#include <cJSON.h>

#include "policy/policy.h"
#include "store/store.h"
#include "tools/drunfile.h"
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
    CHECK(drunfile_is_drun(file.data, file.len));
    CHECK_OK(drunfile_import(st, file.data, file.len, "legacy", "a1b2c", NULL, &snap, &err), &err);
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
        CHECK_MSG(drunfile_import(st, file.data, file.len, "bad", "x", NULL, NULL, &err) < 0,
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
    CHECK_OK(drunfile_import(st, file.data, file.len, "good", "x", NULL, NULL, &err), &err);
    CHECK(drunfile_import(st, file.data, file.len, "good", "x", NULL, NULL, &err) < 0);
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
    struct drunfile_vet vet;
    struct policy *p = policy_defaults();
    struct err err;

    CHECK(p != NULL);
    CHECK_OK(store_open(test_path("d.db"), NULL, &st, &err), &err);
    buf_init(&json, 64 << 20);
    buf_init(&file, 64 << 20);
    /* nesting: the root object is level 1, so 15 arrays inside it reach the cap of 16 */
    gen(&json, 1, 0, DRUNFILE_DEPTH_MAX - 1);
    pack(json.data, 0, &file);
    CHECK_OK(drunfile_import(st, file.data, file.len, "deep-ok", "x", NULL, NULL, &err), &err);
    gen(&json, 1, 0, DRUNFILE_DEPTH_MAX);
    pack(json.data, 0, &file);
    CHECK(drunfile_import(st, file.data, file.len, "deep", "x", NULL, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "nests deeper than 16 levels") != NULL, "'%s'", err.msg);
    /* checkpoints */
    gen(&json, DRUNFILE_CHECKPOINTS_MAX, 0, 0);
    pack(json.data, 0, &file);
    CHECK_OK(drunfile_import(st, file.data, file.len, "cps-ok", "x", NULL, NULL, &err), &err);
    gen(&json, DRUNFILE_CHECKPOINTS_MAX + 1, 0, 0);
    pack(json.data, 0, &file);
    CHECK(drunfile_import(st, file.data, file.len, "cps", "x", NULL, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "10001 checkpoints, more than the 10000") != NULL, "'%s'", err.msg);
    /* overlays: every one on "/" is dropped, the first 64 listed, all counted */
    memset(&vet, 0, sizeof(vet));
    vet.p = p;
    vet.dropped = cJSON_CreateArray();
    gen(&json, 1, DRUNFILE_OVERLAYS_MAX, 0);
    pack(json.data, 0, &file);
    CHECK_OK(drunfile_import(st, file.data, file.len, "ovs-ok", "x", &vet, NULL, &err), &err);
    CHECK_EQ_INT(vet.total, DRUNFILE_OVERLAYS_MAX);
    CHECK_EQ_INT(cJSON_GetArraySize(vet.dropped), DRUNFILE_DROPPED_MAX);
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM snapshot_overlays"), 0);
    gen(&json, 1, DRUNFILE_OVERLAYS_MAX + 1, 0);
    pack(json.data, 0, &file);
    CHECK(drunfile_import(st, file.data, file.len, "ovs", "x", &vet, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "10001 overlays, more than the 10000") != NULL, "'%s'", err.msg);
    CHECK_EQ_INT(count(st, "SELECT count(*) FROM snapshots"), 3);
    cJSON_Delete(vet.dropped);
    policy_unref(p);
    buf_release(&json);
    buf_release(&file);
    store_close(st);
}

TESTS(drun_file_imports, drun_file_malformed_refused, drun_file_limits_at_and_past_the_edge)
