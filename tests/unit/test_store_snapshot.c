/*
 * test_store_snapshot.c - snapshots: create, restore, export, import, and refusals.
 *
 * A session is built through the store API with manifests in the workspace format,
 * stored as deltas of their parents (so export must carry base chains), with labels,
 * outputs, steps, a chat log, an overlay and a rolled-back (discarded) checkpoint.
 */
#include "test.h"
#include "test_db.h"

#include <sqlite3.h>

#include "store/store.h"
#include "util/mem.h"
#include "workspace/workspace.h"

static struct store *
open_db(const char *name)
{
    struct store *st = NULL;
    struct err err;

    CHECK_OK(store_open(test_path(name), NULL, &st, &err), &err);
    return st;
}

static void
put_manifest(struct store *st, struct ws_manifest *m, const uint8_t *base,
             struct store_checkpoint *cp)
{
    struct buf b;
    struct err err;

    buf_init(&b, 1 << 24);
    CHECK_OK(ws_manifest_encode(m, &b, &err), &err);
    if (base != NULL) {
        CHECK_OK(store_blob_put_delta(st, b.data, b.len, base, cp->manifest_hash, &err), &err);
    } else {
        CHECK_OK(store_blob_put(st, b.data, b.len, cp->manifest_hash, &err), &err);
    }
    cp->file_count = (int64_t)ws_manifest_files(m);
    cp->logical_bytes = (int64_t)ws_manifest_bytes(m);
    buf_release(&b);
}

/*
 * Builds a session of `n` checkpoints over `files` files each (every checkpoint
 * rewrites a few), with outputs, labels, steps, chat and an overlay. With `rollback`,
 * the last checkpoint is rolled back over and a new one discards it.
 */
static void
build_session(struct store *st, int n, int files, int rollback, char id[9])
{
    struct ws_manifest *m = NULL;
    struct store_session s;
    struct store_session_new req = {0};
    struct store_checkpoint cp;
    uint8_t prev[HASH_LEN], h[HASH_LEN];
    char path[64], text[128];
    struct err err;

    CHECK_OK(ws_manifest_new(&m, &err), &err);
    for (int f = 0; f < files; f++) {
        snprintf(path, sizeof(path), "src/f%04d.txt", f);
        snprintf(text, sizeof(text), "file %d version 0\n", f);
        CHECK_OK(store_blob_put(st, text, strlen(text), h, &err), &err);
        CHECK_OK(ws_manifest_set(m, path, f % 7 == 0 ? WS_EXEC : WS_FILE, strlen(text), h, &err),
                 &err);
    }
    memset(&cp, 0, sizeof(cp));
    put_manifest(st, m, NULL, &cp);
    memcpy(prev, cp.manifest_hash, HASH_LEN);
    req.label = "demo";
    req.parent_checkpoint = -1;
    req.manifest_hash = cp.manifest_hash;
    req.file_count = cp.file_count;
    req.logical_bytes = cp.logical_bytes;
    req.client = "test-client";
    req.tool = "session_create";
    CHECK_OK(store_session_create(st, &req, &s, &err), &err);
    snprintf(id, 9, "%s", s.id);
    store_session_release(&s);
    CHECK_OK(store_chat_append(st, id, "what is 2+2", "4", &err), &err);
    CHECK_OK(store_overlay_set(st, id, "data", "/srv/data", &err), &err);
    for (int i = 1; i < n; i++) {
        char cmd[64], out[64];
        struct store_change ch[3];
        size_t nch = 0;

        CHECK_OK(store_begin(st, &err), &err);
        memset(&cp, 0, sizeof(cp));
        snprintf(cp.session_id, sizeof(cp.session_id), "%s", id);
        for (int k = 0; k < 3 && k < files; k++) {
            int f = (i * 3 + k) % files;
            snprintf(path, sizeof(path), "src/f%04d.txt", f);
            snprintf(text, sizeof(text), "file %d version %d\n", f, i);
            CHECK_OK(store_blob_put(st, text, strlen(text), h, &err), &err);
            CHECK_OK(ws_manifest_set(m, path, WS_FILE, strlen(text), h, &err), &err);
        }
        snprintf(path, sizeof(path), "src/f%04d.txt", (i * 3) % files);
        ch[nch].path = mem_strdup(path);
        ch[nch++].kind = STORE_MODIFIED;
        put_manifest(st, m, prev, &cp);
        memcpy(prev, cp.manifest_hash, HASH_LEN);
        snprintf(cmd, sizeof(cmd), "make step%d", i);
        snprintf(out, sizeof(out), "built step %d\n", i);
        cp.tool = "session_bash";
        cp.command = cmd;
        cp.has_exit_code = 1;
        cp.exit_code = i % 5 == 0 ? 2 : 0;
        cp.label = i % 4 == 0 ? cmd + 5 : NULL;
        CHECK_OK(store_blob_put(st, out, strlen(out), cp.stdout_hash, &err), &err);
        cp.stdout_bytes = (int64_t)strlen(out);
        if (i % 3 == 0) {
            CHECK_OK(store_blob_put(st, "warn\n", 5, cp.stderr_hash, &err), &err);
            cp.stderr_bytes = 5;
        }
        cp.modified = 1;
        CHECK_OK(store_checkpoint_append(st, &cp, ch, nch, &err), &err);
        CHECK_OK(store_step_append(st, id, cp.id, "session_read_file", "look", &err), &err);
        CHECK_OK(store_commit(st, &err), &err);
        for (size_t k = 0; k < nch; k++) {
            mem_free((char *)ch[k].path);
        }
    }
    if (rollback && n > 2) {
        CHECK_OK(store_session_set_head(st, id, n - 2, &err), &err);
        memset(&cp, 0, sizeof(cp));
        snprintf(cp.session_id, sizeof(cp.session_id), "%s", id);
        put_manifest(st, m, prev, &cp);
        cp.tool = "session_write_files";
        CHECK_OK(store_checkpoint_append(st, &cp, NULL, 0, &err), &err);
    }
    ws_manifest_free(m);
}

static void
blob_text(struct store *st, const uint8_t *hash, int64_t len, struct buf *out)
{
    struct err err;

    buf_reset(out);
    if (len > 0) {
        CHECK_OK(store_blob_get(st, hash, out, &err), &err);
    }
}

/* Asserts that session/snapshot checkpoint lists a and b are the same history. */
static void
same_history(struct store *sa, const struct store_checkpoint *a, size_t na, struct store *sb,
             const struct store_checkpoint *b, size_t nb)
{
    struct buf x, y;

    buf_init(&x, 1 << 24);
    buf_init(&y, 1 << 24);
    CHECK_EQ_INT(na, nb);
    for (size_t i = 0; i < na; i++) {
        CHECK_EQ_INT(a[i].id, b[i].id);
        CHECK_EQ_INT(a[i].parent, b[i].parent);
        CHECK_EQ_INT(a[i].status, b[i].status);
        CHECK(memcmp(a[i].manifest_hash, b[i].manifest_hash, HASH_LEN) == 0);
        CHECK_EQ_STR(a[i].label ? a[i].label : "", b[i].label ? b[i].label : "");
        CHECK_EQ_STR(a[i].command ? a[i].command : "", b[i].command ? b[i].command : "");
        CHECK_EQ_INT(a[i].has_exit_code, b[i].has_exit_code);
        CHECK_EQ_INT(a[i].exit_code, b[i].exit_code);
        CHECK_EQ_INT(a[i].file_count, b[i].file_count);
        blob_text(sa, a[i].stdout_hash, a[i].stdout_bytes, &x);
        blob_text(sb, b[i].stdout_hash, b[i].stdout_bytes, &y);
        CHECK_EQ_STR(buf_cstr(&x), buf_cstr(&y));
        blob_text(sa, a[i].stderr_hash, a[i].stderr_bytes, &x);
        blob_text(sb, b[i].stderr_hash, b[i].stderr_bytes, &y);
        CHECK_EQ_STR(buf_cstr(&x), buf_cstr(&y));
        /* The manifest, and every file it lists, reads back (hash-checked) in b. */
        blob_text(sb, b[i].manifest_hash, 1, &y);
        {
            struct ws_manifest *m = NULL;
            struct err err;
            CHECK_OK(ws_manifest_decode(y.data, y.len, &m, &err), &err);
            for (size_t k = 0; k < ws_manifest_count(m); k++) {
                const struct ws_entry *e = ws_manifest_at(m, k);
                blob_text(sb, e->hash, 1, &x);
                CHECK_EQ_INT(x.len, e->size);
            }
            ws_manifest_free(m);
        }
    }
    buf_release(&x);
    buf_release(&y);
}

TEST(snapshot_create_list_get_delete)
{
    struct store *st = open_db("a.db");
    struct store_snapshot snap, *list = NULL;
    size_t n = 0;
    char id[9];
    struct err err;

    build_session(st, 5, 10, 0, id);
    CHECK_OK(store_snapshot_create(st, id, "first", "before the refactor", &snap, &err), &err);
    CHECK_EQ_STR(snap.name, "first");
    CHECK_EQ_STR(snap.session_id, id);
    CHECK_EQ_STR(snap.description, "before the refactor");
    CHECK_EQ_STR(snap.label, "demo");
    CHECK_EQ_INT(snap.checkpoints, 5);
    CHECK_EQ_INT(snap.head, 4);
    store_snapshot_release(&snap);
    /* a default name: session id and time */
    CHECK_OK(store_snapshot_create(st, id, NULL, NULL, &snap, &err), &err);
    CHECK(strncmp(snap.name, id, 8) == 0 && snap.name[8] == '-');
    CHECK_OK(store_snapshot_name_check(snap.name, &err), &err);
    store_snapshot_release(&snap);
    CHECK_OK(store_snapshot_list(st, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(list[0].name, "first");
    store_snapshot_list_free(list, n);

    CHECK(store_snapshot_create(st, id, "first", NULL, NULL, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_EXISTS);
    CHECK(strstr(err.msg, "'first'") != NULL);
    CHECK(store_snapshot_create(st, "00000000", "x", NULL, NULL, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(store_snapshot_create(st, id, "../etc", NULL, NULL, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(store_snapshot_create(st, id, "-x", NULL, NULL, &err) < 0);
    {
        char name[STORE_SNAPSHOT_NAME_MAX + 2];
        memset(name, 'a', sizeof(name));
        name[STORE_SNAPSHOT_NAME_MAX] = '\0';
        CHECK_OK(store_snapshot_name_check(name, &err), &err); /* at the cap */
        name[STORE_SNAPSHOT_NAME_MAX] = 'a';
        name[STORE_SNAPSHOT_NAME_MAX + 1] = '\0';
        CHECK(store_snapshot_name_check(name, &err) < 0); /* past it */
        CHECK_EQ_INT(err.code, ERR_INVAL);
    }
    CHECK_OK(store_snapshot_delete(st, "first", &err), &err);
    CHECK(store_snapshot_get(st, "first", &snap, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(store_snapshot_delete(st, "first", &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    store_close(st);
}

TEST(snapshot_restore_round_trip)
{
    struct store *st = open_db("a.db");
    struct store_snapshot snap;
    struct store_session rs;
    struct store_checkpoint *a = NULL, *b = NULL;
    size_t na, nb;
    struct store_step *steps = NULL;
    size_t nsteps = 0;
    struct store_overlay *ov = NULL;
    size_t nov = 0;
    char id[9];
    struct err err;

    build_session(st, 12, 40, 1, id);
    CHECK_OK(store_snapshot_create(st, id, "snap", NULL, &snap, &err), &err);
    CHECK_EQ_INT(snap.checkpoints_all, 13);
    CHECK_EQ_INT(snap.checkpoints, 12); /* one discarded */
    /* The original moves on; the snapshot must not. */
    CHECK_OK(store_checkpoint_set_label(st, id, 1, "changed-later", &err), &err);
    CHECK_OK(store_snapshot_restore(st, "snap", -1, 0, 0, &rs, &err), &err);
    CHECK(strcmp(rs.id, id) != 0);
    CHECK_EQ_INT(rs.head, snap.head);
    CHECK_EQ_STR(rs.label, "demo");
    CHECK_EQ_STR(rs.client, "test-client");
    CHECK_EQ_INT(rs.state, STORE_SESSION_OPEN);
    CHECK_EQ_INT(rs.owner_pid, 0);
    CHECK_OK(store_snapshot_checkpoints(st, "snap", &a, &na, &err), &err);
    CHECK_OK(store_checkpoint_list(st, rs.id, 1, &b, &nb, &err), &err);
    same_history(st, a, na, st, b, nb);
    CHECK(a[1].label == NULL); /* the later label did not leak in */
    CHECK_EQ_STR(b[4].label, "step4");
    store_checkpoint_list_free(a, na);
    store_checkpoint_list_free(b, nb);
    CHECK_OK(store_step_list(st, rs.id, 3, &steps, &nsteps, &err), &err);
    CHECK_EQ_INT(nsteps, 1);
    CHECK_EQ_STR(steps[0].tool, "session_read_file");
    store_step_list_free(steps, nsteps);
    CHECK_OK(store_overlay_list(st, rs.id, &ov, &nov, &err), &err);
    CHECK_EQ_INT(nov, 1);
    CHECK_EQ_STR(ov[0].host_path, "/srv/data");
    store_overlay_list_free(ov, nov);
    {
        sqlite3_stmt *s = NULL;
        CHECK(sqlite3_prepare_v2(store_db(st),
                                 "SELECT prompt, response FROM session_chat WHERE session_id = ?1",
                                 -1, &s, NULL) == SQLITE_OK);
        sqlite3_bind_text(s, 1, rs.id, -1, SQLITE_STATIC);
        CHECK(sqlite3_step(s) == SQLITE_ROW);
        CHECK_EQ_STR((const char *)sqlite3_column_text(s, 0), "what is 2+2");
        sqlite3_finalize(s);
    }
    store_session_release(&rs);
    /* at a chosen checkpoint; a discarded one is refused */
    CHECK_OK(store_snapshot_restore(st, "snap", 3, 0, 0, &rs, &err), &err);
    CHECK_EQ_INT(rs.head, 3);
    store_session_release(&rs);
    CHECK(store_snapshot_restore(st, "snap", 11, 0, 0, &rs, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(strstr(err.msg, "no live checkpoint 11") != NULL);
    CHECK(store_snapshot_restore(st, "nope", -1, 0, 0, &rs, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    store_snapshot_release(&snap);
    store_close(st);
}

static int64_t
count_rows(struct store *st, const char *sql)
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

TEST(snapshot_export_import_identical)
{
    struct store *st = open_db("a.db"), *dst = open_db("b.db");
    struct store_snapshot snap, imp;
    struct store_checkpoint *a = NULL, *b = NULL;
    size_t na, nb;
    uint8_t orphan[HASH_LEN];
    char id[9];
    struct err err;
    const char *file = test_path("snap.drundb");
    char copy[4096];

    build_session(st, 30, 50, 1, id);
    CHECK_OK(store_blob_put(st, "not in the snapshot", 19, orphan, &err), &err);
    CHECK_OK(store_snapshot_create(st, id, "exp", "exported", &snap, &err), &err);
    CHECK_OK(store_snapshot_export(st, "exp", file, ws_manifest_refs, NULL, &err), &err);
    /* never overwrites */
    CHECK(store_snapshot_export(st, "exp", file, ws_manifest_refs, NULL, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_EXISTS);
    CHECK_FMT(copy, sizeof(copy), "%s", file);

    CHECK(count_rows(st, "SELECT count(*) FROM blobs WHERE codec = 2") > 0);
    CHECK_OK(store_snapshot_import(dst, copy, NULL, ws_manifest_refs, NULL, &imp, &err), &err);
    CHECK_EQ_STR(imp.name, "exp");
    CHECK_EQ_STR(imp.description, "exported");
    CHECK_EQ_INT(imp.head, snap.head);
    CHECK_EQ_INT(imp.checkpoints_all, snap.checkpoints_all);
    CHECK_OK(store_snapshot_checkpoints(st, "exp", &a, &na, &err), &err);
    CHECK_OK(store_snapshot_checkpoints(dst, "exp", &b, &nb, &err), &err);
    same_history(st, a, na, dst, b, nb);
    store_checkpoint_list_free(a, na);
    store_checkpoint_list_free(b, nb);
    /* only its blobs: the orphan did not travel; the deltas did, with their bases */
    {
        int exists = 1;
        CHECK_OK(store_blob_has(dst, orphan, &exists, NULL, &err), &err);
        CHECK(!exists);
        CHECK(count_rows(dst, "SELECT count(*) FROM blobs WHERE codec = 2") > 0);
        CHECK_EQ_INT(count_rows(dst, "SELECT count(*) FROM blobs b WHERE base IS NOT NULL AND "
                                     "base NOT IN (SELECT hash FROM blobs)"),
                     0);
    }
    /* importing again needs another name; with one it works and adds no blobs */
    {
        int64_t before = count_rows(dst, "SELECT count(*) FROM blobs");
        CHECK(store_snapshot_import(dst, copy, NULL, ws_manifest_refs, NULL, NULL, &err) < 0);
        CHECK_EQ_INT(err.code, ERR_EXISTS);
        CHECK_OK(store_snapshot_import(dst, copy, "exp2", ws_manifest_refs, NULL, NULL, &err),
                 &err);
        CHECK_EQ_INT(count_rows(dst, "SELECT count(*) FROM blobs"), before);
    }
    /* and the imported snapshot restores */
    {
        struct store_session rs;
        CHECK_OK(store_snapshot_restore(dst, "exp2", -1, 0, 0, &rs, &err), &err);
        CHECK_EQ_INT(rs.head, snap.head);
        store_session_release(&rs);
    }
    store_snapshot_release(&snap);
    store_snapshot_release(&imp);
    store_close(st);
    store_close(dst);
}

static void
copy_file(const char *from, const char *to)
{
    char buf[65536];
    ssize_t n;
    int in = open(from, O_RDONLY | O_CLOEXEC), out;

    CHECK(in >= 0);
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(out >= 0);
    while ((n = read(in, buf, sizeof(buf))) > 0) {
        CHECK(write(out, buf, (size_t)n) == n);
    }
    close(in);
    close(out);
}

TEST(snapshot_import_refuses_damage_and_keeps_nothing)
{
    struct store *st = open_db("a.db"), *dst = open_db("b.db");
    char id[9], good[4096], bad[4096];
    struct err err;
    int64_t blobs, snaps;
    struct {
        const char *sql;
        int code;
        const char *says;
    } cases[] = {
        /* a file blob's bytes no longer match its hash */
        {"UPDATE blobs SET data = CAST('file 3 version 9' || char(10) AS BLOB) WHERE codec = 0 "
         "AND size = 17 AND id = (SELECT min(id) FROM blobs WHERE codec = 0 AND size = 17)",
         ERR_CORRUPT, "hash"},
        /* a blob a manifest lists is missing */
        {"DELETE FROM blobs WHERE id = (SELECT min(id) FROM blobs WHERE codec = 0 AND size = 17)",
         ERR_CORRUPT, "missing"},
        /* a delta's base is missing */
        {"PRAGMA foreign_keys = OFF; DELETE FROM blobs WHERE hash = (SELECT base FROM blobs "
         "WHERE codec = 2 LIMIT 1)",
         ERR_CORRUPT, "base"},
        /* a stored size lies */
        {"UPDATE blobs SET size = size + 1 WHERE codec = 2", ERR_CORRUPT, "snapshot file"},
        /* two snapshots in one file */
        {"INSERT INTO snapshots (name, created_ms, source_session_id, head, session_created_ms) "
         "VALUES ('other', 0, 'x', 0, 0)",
         ERR_CORRUPT, "exactly one"},
        /* the head is not a live checkpoint */
        {"UPDATE snapshots SET head = 999", ERR_CORRUPT, "head"},
        /* not a drun file */
        {"PRAGMA application_id = 7", ERR_CORRUPT, "not a drun snapshot file"},
        /* from another schema version */
        {"PRAGMA user_version = 99", ERR_VERSION, "version 99"},
    };

    build_session(st, 8, 20, 0, id);
    CHECK_OK(store_snapshot_create(st, id, "s", NULL, NULL, &err), &err);
    CHECK_FMT(good, sizeof(good), "%s", test_path("good.db"));
    CHECK_OK(store_snapshot_export(st, "s", good, ws_manifest_refs, NULL, &err), &err);
    blobs = count_rows(dst, "SELECT count(*) FROM blobs");
    snaps = count_rows(dst, "SELECT count(*) FROM snapshots");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_FMT(bad, sizeof(bad), "%s/bad%zu.db", test_tmpdir(), i);
        copy_file(good, bad);
        tdb_exec(bad, cases[i].sql);
        CHECK_MSG(store_snapshot_import(dst, bad, NULL, ws_manifest_refs, NULL, NULL, &err) < 0,
                  "case %zu was imported", i);
        CHECK_MSG(err.code == cases[i].code, "case %zu: code %d: %s", i, err.code, err.msg);
        CHECK_MSG(strstr(err.msg, cases[i].says) != NULL, "case %zu: %s", i, err.msg);
        CHECK_EQ_INT(count_rows(dst, "SELECT count(*) FROM blobs"), blobs);
        CHECK_EQ_INT(count_rows(dst, "SELECT count(*) FROM snapshots"), snaps);
        CHECK_EQ_INT(count_rows(dst, "SELECT count(*) FROM snapshot_checkpoints"), 0);
    }
    /* a missing file is not created by trying */
    CHECK(store_snapshot_import(dst, test_path("absent.db"), NULL, ws_manifest_refs, NULL, NULL,
                                &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(access(test_path("absent.db"), F_OK) < 0);
    /* the good one still imports after all that */
    CHECK_OK(store_snapshot_import(dst, good, NULL, ws_manifest_refs, NULL, NULL, &err), &err);
    store_close(st);
    store_close(dst);
}

TEST(blob_get_conn_reads_deltas)
{
    struct store *st = open_db("a.db");
    struct store_checkpoint *cps = NULL;
    size_t n = 0;
    char id[9];
    struct buf a, b;
    struct err err;

    build_session(st, 6, 30, 0, id);
    CHECK_OK(store_checkpoint_list(st, id, 1, &cps, &n, &err), &err);
    buf_init(&a, 1 << 24);
    buf_init(&b, 1 << 24);
    CHECK_OK(store_blob_get(st, cps[n - 1].manifest_hash, &a, &err), &err);
    CHECK_OK(store_blob_get_conn(store_db(st), cps[n - 1].manifest_hash, &b, &err), &err);
    CHECK_EQ_INT(a.len, b.len);
    CHECK(memcmp(a.data, b.data, a.len) == 0);
    {
        uint8_t none[HASH_LEN] = {1};
        CHECK(store_blob_get_conn(store_db(st), none, &b, &err) < 0);
        CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    }
    buf_release(&a);
    buf_release(&b);
    store_checkpoint_list_free(cps, n);
    store_close(st);
}

TEST(drun_unpack_refuses_bad_files)
{
    struct buf out;
    struct err err;

    buf_init(&out, 1 << 20);
    CHECK(store_drun_unpack("XRUN\x28\xb5\x2f\xfd", 8, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    CHECK(strstr(err.msg, "missing magic") != NULL);
    CHECK(store_drun_unpack("DRUN", 4, &out, &err) < 0);
    CHECK(store_drun_unpack("DRUN\x28\xb5\x2f\xfd\x00", 9, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    CHECK_EQ_INT(out.len, 0);
    buf_release(&out);
}

TESTS(snapshot_create_list_get_delete, snapshot_restore_round_trip,
      snapshot_export_import_identical, snapshot_import_refuses_damage_and_keeps_nothing,
      blob_get_conn_reads_deltas, drun_unpack_refuses_bad_files)
