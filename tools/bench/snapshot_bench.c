/*
 * snapshot_bench.c - the cost of a snapshot: a session of 200 checkpoints x 1,000 files
 * against one of 20 checkpoints x 1,000 files. Prints the time and the DB growth of
 * store_snapshot_create for each and their ratios: growth should follow rows (10x the
 * checkpoints, 10x the rows), never blob bytes (the snapshot adds none).
 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

#define FILES 1000

/* Payload bytes of the snapshot tables and their indexes, plus stored blob bytes:
 * unlike the file size, this does not hide growth in free pages. */
static int64_t
db_bytes(struct store *st)
{
    sqlite3_stmt *q = NULL;
    int64_t v = -1;

    if (sqlite3_prepare_v2(store_db(st),
                           "SELECT (SELECT coalesce(sum(payload), 0) FROM dbstat WHERE name LIKE "
                           "'snapshot%' OR name LIKE 'sqlite_autoindex_snapshot%') + (SELECT "
                           "sum(length(data)) FROM blobs)",
                           -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        v = sqlite3_column_int64(q, 0);
    } else {
        fprintf(stderr, "snapshot_bench: %s\n", sqlite3_errmsg(store_db(st)));
    }
    sqlite3_finalize(q);
    return v;
}

static int
build(struct store *st, int cps, char id[9], struct err *err)
{
    struct ws_manifest *m = NULL;
    struct store_session s;
    struct store_session_new req = {0};
    struct store_checkpoint cp;
    uint8_t h[HASH_LEN], prev[HASH_LEN];
    char path[64], text[96];
    struct buf b;

    buf_init(&b, 1 << 26);
    if (ws_manifest_new(&m, err) < 0) {
        return -1;
    }
    for (int f = 0; f < FILES; f++) {
        snprintf(path, sizeof(path), "src/dir%02d/file%04d.c", f % 40, f);
        snprintf(text, sizeof(text), "/* file %d */ int f%d(void) { return %d; }\n", f, f, f);
        if (store_blob_put(st, text, strlen(text), h, err) < 0 ||
            ws_manifest_set(m, path, WS_FILE, strlen(text), h, err) < 0) {
            return -1;
        }
    }
    memset(&cp, 0, sizeof(cp));
    if (ws_manifest_encode(m, &b, err) < 0 ||
        store_blob_put(st, b.data, b.len, cp.manifest_hash, err) < 0) {
        return -1;
    }
    memcpy(prev, cp.manifest_hash, HASH_LEN);
    req.parent_checkpoint = -1;
    req.manifest_hash = cp.manifest_hash;
    req.file_count = FILES;
    req.tool = "session_create";
    if (store_session_create(st, &req, &s, err) < 0) {
        return -1;
    }
    snprintf(id, 9, "%s", s.id);
    store_session_release(&s);
    for (int i = 1; i < cps; i++) {
        memset(&cp, 0, sizeof(cp));
        snprintf(cp.session_id, sizeof(cp.session_id), "%s", id);
        snprintf(path, sizeof(path), "src/dir%02d/file%04d.c", i % 40, i % FILES);
        snprintf(text, sizeof(text), "/* edit %d */\n", i);
        buf_reset(&b);
        if (store_begin(st, err) < 0 || store_blob_put(st, text, strlen(text), h, err) < 0 ||
            ws_manifest_set(m, path, WS_FILE, strlen(text), h, err) < 0 ||
            ws_manifest_encode(m, &b, err) < 0 ||
            store_blob_put_delta(st, b.data, b.len, prev, cp.manifest_hash, err) < 0) {
            return -1;
        }
        memcpy(prev, cp.manifest_hash, HASH_LEN);
        cp.tool = "session_bash";
        cp.command = "make";
        cp.file_count = FILES;
        cp.modified = 1;
        {
            struct store_change ch = {path, STORE_MODIFIED};
            if (store_checkpoint_append(st, &cp, &ch, 1, err) < 0 || store_commit(st, err) < 0) {
                return -1;
            }
        }
    }
    ws_manifest_free(m);
    buf_release(&b);
    return 0;
}

static int
measure(const char *dir, int cps, double *ms, int64_t *growth)
{
    char path[4096], id[9];
    struct store *st = NULL;
    struct err err;
    int64_t before, t0;

    snprintf(path, sizeof(path), "%s/snap%d.db", dir, cps);
    if (store_open(path, NULL, &st, &err) < 0 || build(st, cps, id, &err) < 0) {
        fprintf(stderr, "snapshot_bench: %s\n", err.msg);
        return -1;
    }
    before = db_bytes(st);
    t0 = time_mono_us();
    if (store_snapshot_create(st, id, "bench", NULL, NULL, &err) < 0) {
        fprintf(stderr, "snapshot_bench: %s\n", err.msg);
        return -1;
    }
    *ms = (double)(time_mono_us() - t0) / 1000.0;
    *growth = db_bytes(st) - before;
    printf("%4d checkpoints x %d files: snapshot %.2f ms, growth %lld bytes (snapshot rows' "
           "payload + blob bytes)\n",
           cps, FILES, *ms, (long long)*growth);
    store_close(st);
    return 0;
}

int
main(int argc, char **argv)
{
    double t20, t200;
    int64_t g20, g200;

    if (argc < 2 || measure(argv[1], 20, &t20, &g20) < 0 ||
        measure(argv[1], 200, &t200, &g200) < 0) {
        return 1;
    }
    printf("ratio 200/20: time %.1fx, growth %.1fx (rows: 10x; blob bytes added: 0)\n",
           t200 / (t20 > 0 ? t20 : 1), (double)g200 / (double)(g20 > 0 ? g20 : 1));
    return 0;
}
