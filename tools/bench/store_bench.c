/*
 * store_bench.c - the store's size and speed against their floors (not a test).
 *
 * 1. Space: 100 checkpoints of a 1,000-file tree (every tenth file 64 KiB, the rest
 *    1 KiB, generated text), each checkpoint changing one file, manifests in the
 *    workspace format. Prints DB bytes / (zstd-3 size of each file of the first tree +
 *    of each changed file), the target being <= 1.2, and the same without the
 *    manifest blobs to show what the manifests cost.
 * 2. Speed: store_blob_put of the same 2,000 blobs / raw INSERTs of those bytes into a
 *    plain table in the same run (both in one transaction, synchronous=FULL).
 *
 * Usage: store_bench DIR   (DIR is a scratch directory)
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "store/store.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

#define FILES       1000
#define CHECKPOINTS 100

static unsigned rng = 12345;

static unsigned
next(void)
{
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

static void
gen_text(char *p, size_t n)
{
    static const char *w[] = {"the ",    "value ",    "return ", "if (x) ", "{\n",   "}\n",
                              "int ",    "buffer",    "_len ",   "= 0;\n",  "count", "++;\n",
                              "static ", "// note: ", "struct ", "size_t "};
    size_t i = 0;

    while (i < n) {
        const char *s = w[next() % 16];
        for (; *s && i < n; s++) {
            p[i++] = *s;
        }
        if (next() % 7 == 0 && i + 8 < n) {
            i += (size_t)snprintf(p + i, 9, "%07u ", next() % 9999999);
        }
    }
}

static size_t
zsize(const void *p, size_t n)
{
    size_t cap = ZSTD_compressBound(n), r;
    void *out = malloc(cap);

    r = ZSTD_compress(out, cap, p, n, 3);
    free(out);
    return ZSTD_isError(r) ? n : (r < n ? r : n);
}

static void
die(const char *what, const struct err *err)
{
    fprintf(stderr, "store_bench: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

int
main(int argc, char **argv)
{
    static char *files[FILES];
    static size_t sizes[FILES];
    char path[4096];
    struct store *st = NULL;
    struct ws_manifest *m = NULL;
    struct store_session s;
    struct store_session_new req = {0};
    struct err err;
    struct buf mb;
    size_t floor_bytes = 0, manifest_stored = 0;
    uint8_t mh[HASH_LEN], prev[HASH_LEN];
    struct stat sb;

    if (argc != 2) {
        fprintf(stderr, "usage: store_bench DIR\n");
        return 2;
    }
    snprintf(path, sizeof(path), "%s/bench.db", argv[1]);
    unlink(path);
    if (store_open(path, NULL, &st, &err) < 0 || ws_manifest_new(&m, &err) < 0) {
        die("open", &err);
    }
    buf_init(&mb, 64 << 20);
    if (store_begin(st, &err) < 0) {
        die("begin", &err);
    }
    for (int i = 0; i < FILES; i++) {
        char name[64];
        uint8_t h[HASH_LEN];
        sizes[i] = i % 10 == 0 ? 65536 : 1024;
        files[i] = malloc(sizes[i]);
        gen_text(files[i], sizes[i]);
        floor_bytes += zsize(files[i], sizes[i]);
        snprintf(name, sizeof(name), "src/dir%02d/file%04d.c", i % 37, i);
        if (store_blob_put(st, files[i], sizes[i], h, &err) < 0 ||
            ws_manifest_set(m, name, WS_FILE, sizes[i], h, &err) < 0) {
            die("put", &err);
        }
    }
    buf_reset(&mb);
    if (ws_manifest_encode(m, &mb, &err) < 0) {
        die("encode", &err);
    }
    manifest_stored += zsize(mb.data, mb.len);
    {
        if (store_blob_put(st, mb.data, mb.len, mh, &err) < 0) {
            die("manifest", &err);
        }
        req.parent_checkpoint = -1;
        req.manifest_hash = mh;
        req.file_count = FILES;
        if (store_session_create(st, &req, &s, &err) < 0 || store_commit(st, &err) < 0) {
            die("session", &err);
        }
    }
    memcpy(prev, mh, HASH_LEN);
    for (int c = 0; c < CHECKPOINTS; c++) {
        struct store_checkpoint cp = {0};
        int i = (int)(next() % FILES);
        char name[64];
        uint8_t h[HASH_LEN];
        size_t at = next() % (sizes[i] - 32);
        struct store_change ch;

        snprintf(files[i] + at, 24, "changed %d %u", c, next());
        files[i][at + strlen(files[i] + at)] = ' ';
        floor_bytes += zsize(files[i], sizes[i]);
        snprintf(name, sizeof(name), "src/dir%02d/file%04d.c", i % 37, i);
        snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
        cp.tool = "session_bash";
        cp.command = "edit";
        cp.modified = 1;
        ch.path = name;
        ch.kind = STORE_MODIFIED;
        buf_reset(&mb);
        if (store_begin(st, &err) < 0 || store_blob_put(st, files[i], sizes[i], h, &err) < 0 ||
            ws_manifest_set(m, name, WS_FILE, sizes[i], h, &err) < 0 ||
            ws_manifest_encode(m, &mb, &err) < 0 ||
            store_blob_put_delta(st, mb.data, mb.len, prev, cp.manifest_hash, &err) < 0 ||
            store_checkpoint_append(st, &cp, &ch, 1, &err) < 0 || store_commit(st, &err) < 0) {
            die("checkpoint", &err);
        }
        manifest_stored += zsize(mb.data, mb.len);
        memcpy(prev, cp.manifest_hash, HASH_LEN);
    }
    store_close(st);
    stat(path, &sb);
    printf("store space: %d files, %d checkpoints\n", FILES, CHECKPOINTS);
    printf("  db bytes                         %lld\n", (long long)sb.st_size);
    printf("  zstd floor (tree + changed)      %zu\n", floor_bytes);
    printf("  manifests if stored whole, zstd  %zu (stored as deltas of the parent's)\n",
           manifest_stored);
    printf("  ratio db / floor                 %.3f   (target <= 1.2)\n",
           (double)sb.st_size / (double)floor_bytes);

    /* 2. put throughput vs raw INSERT of the same bytes */
    {
        sqlite3 *db = NULL;
        sqlite3_stmt *ins = NULL;
        int64_t t0, t_put, t_raw;
        char rpath[4096];

        snprintf(path, sizeof(path), "%s/put.db", argv[1]);
        snprintf(rpath, sizeof(rpath), "%s/raw.db", argv[1]);
        unlink(path);
        unlink(rpath);
        for (int i = 0; i < FILES; i++) {
            gen_text(files[i], sizes[i]); /* fresh content: nothing deduplicates */
        }
        sqlite3_open(rpath, &db);
        sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t (k "
                     "INTEGER PRIMARY KEY, v BLOB)",
                     NULL, NULL, NULL);
        sqlite3_prepare_v2(db, "INSERT INTO t (v) VALUES (?1)", -1, &ins, NULL);
        t0 = time_mono_us();
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < FILES; i++) {
                sqlite3_bind_blob(ins, 1, files[i], (int)sizes[i], SQLITE_STATIC);
                sqlite3_step(ins);
                sqlite3_reset(ins);
            }
        }
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        t_raw = time_mono_us() - t0;
        sqlite3_finalize(ins);
        sqlite3_close(db);
        if (store_open(path, NULL, &st, &err) < 0) {
            die("open", &err);
        }
        t0 = time_mono_us();
        if (store_begin(st, &err) < 0) {
            die("begin", &err);
        }
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < FILES; i++) {
                uint8_t h[HASH_LEN];
                files[i][0] = (char)('a' + r); /* second round differs: no dedup */
                if (store_blob_put(st, files[i], sizes[i], h, &err) < 0) {
                    die("put", &err);
                }
            }
        }
        if (store_commit(st, &err) < 0) {
            die("commit", &err);
        }
        t_put = time_mono_us() - t0;
        store_close(st);
        printf("blob put: %d blobs, %zu KiB each round\n", 2 * FILES, floor_bytes / 1024);
        printf("  store_blob_put time / raw INSERT time   %.2f\n",
               (double)t_put / (double)(t_raw > 0 ? t_raw : 1));
        printf("  (i.e. put throughput / raw throughput     %.2f)\n",
               (double)t_raw / (double)(t_put > 0 ? t_put : 1));
    }
    return 0;
}
