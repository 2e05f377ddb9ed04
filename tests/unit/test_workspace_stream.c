/*
 * test_workspace_stream.c - the workspace sync's streaming path: files of
 * WS_STREAM_MIN bytes or more go through ws_blobs.write_fd (wired by session_mgr to
 * store_blob_write_fd) instead of being read whole, with the same bytes, modes and
 * errors as the get path; a full re-sync hashes big files in pieces; a damaged blob or
 * a size that disagrees with the manifest leaves nothing at the name.
 */
#include "test.h"
#include "test_db.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "session/session.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/mem.h"
#include "workspace/workspace.h"

static char db_path[4096];

/* Counts the calls going through to the session manager's real callbacks. */
struct counting {
    const struct ws_blobs *real;
    int gets, writes;
};

static int
c_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    struct counting *c = ctx;

    c->gets++;
    return c->real->get(c->real->ctx, hash, out, err);
}

static int
c_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    struct counting *c = ctx;

    return c->real->put(c->real->ctx, data, len, hash, err);
}

static int
c_write_fd(void *ctx, const uint8_t hash[HASH_LEN], uint64_t size, int fd, struct err *err)
{
    struct counting *c = ctx;

    c->writes++;
    return c->real->write_fd(c->real->ctx, hash, size, fd, err);
}

static void
fill_text(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)("lorem ipsum dolor sit amet\n"[i % 27]);
    }
}

/* Reads a whole file; returns its bytes (caller frees) and fills *len and *mode. */
static uint8_t *
slurp(const char *dir, const char *name, size_t *len, unsigned *mode)
{
    char path[4200];
    struct stat sb;
    uint8_t *p;
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_RDONLY | O_NOFOLLOW);
    CHECK_MSG(fd >= 0, "cannot open %s", path);
    CHECK(fstat(fd, &sb) == 0);
    *len = (size_t)sb.st_size;
    *mode = (unsigned)(sb.st_mode & 07777);
    p = mem_alloc(*len + 1);
    CHECK(p != NULL);
    CHECK(pread(fd, p, *len, 0) == (ssize_t)*len);
    close(fd);
    return p;
}

static int
exists_in(const char *dir, const char *name)
{
    char path[4200];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &sb) == 0;
}

static struct ws_dir *
open_dir(const char *name, char path[4096])
{
    struct ws_dir *d = NULL;
    struct err err;

    CHECK_FMT(path, 4096, "%s", test_path(name));
    CHECK_OK(ws_dir_open(path, &d, &err), &err);
    return d;
}

TEST(big_files_stream_with_the_same_bytes_modes_and_errors)
{
    const size_t big = WS_STREAM_MIN + 12345, edge = WS_STREAM_MIN, under = WS_STREAM_MIN - 1;
    uint8_t *data = mem_alloc(big), hb[HASH_LEN], he[HASH_LEN], hu[HASH_LEN], hs[HASH_LEN];
    struct store *st = NULL;
    struct session_mgr *mgr = NULL;
    struct store_blob_writer *w = NULL;
    struct ws_manifest *m = NULL, *liar = NULL;
    struct counting cs = {0}, cg = {0};
    struct ws_blobs streaming, whole;
    struct ws_dir *a, *b;
    char pa[4096], pb[4096];
    const char *names[] = {"big.bin", "bin/tool", "under.txt", "small"};
    struct err err, ea, eb;

    CHECK(data != NULL);
    CHECK_FMT(db_path, sizeof(db_path), "%s", test_path("t.db"));
    CHECK_OK(store_open(db_path, NULL, &st, &err), &err);
    mkdir(test_path("run"), 0700);
    CHECK_OK(session_mgr_new(st, test_path("run"), &mgr, &err), &err);
    cs.real = cg.real = session_mgr_blobs(mgr);
    CHECK(cs.real->write_fd != NULL);
    streaming = (struct ws_blobs){.ctx = &cs, .get = c_get, .put = c_put, .write_fd = c_write_fd};
    whole = (struct ws_blobs){.ctx = &cg, .get = c_get, .put = c_put}; /* no write_fd */

    /* big.bin: random bytes through the streaming writer (a zstd frame of raw blocks) */
    tdb_fill_random(data, big, 7);
    CHECK_OK(store_blob_writer_open(st, &w, &err), &err);
    for (size_t off = 0; off < big; off += 100000) {
        CHECK_OK(
            store_blob_writer_write(w, data + off, big - off < 100000 ? big - off : 100000, &err),
            &err);
    }
    CHECK_OK(store_blob_writer_finish(w, hb, NULL, &err), &err);
    /* bin/tool: exactly the threshold, text, stored in one shot; under.txt: one byte less */
    {
        uint8_t *t = mem_alloc(edge);
        CHECK(t != NULL);
        fill_text(t, edge);
        CHECK_OK(store_blob_put(st, t, edge, he, &err), &err);
        CHECK_OK(store_blob_put(st, t + 1, under, hu, &err), &err);
        mem_free(t);
    }
    CHECK_OK(store_blob_put(st, "tiny\n", 5, hs, &err), &err);
    CHECK_OK(ws_manifest_new(&m, &err), &err);
    CHECK_OK(ws_manifest_set(m, "big.bin", WS_FILE, big, hb, &err), &err);
    CHECK_OK(ws_manifest_set(m, "bin/tool", WS_EXEC, edge, he, &err), &err);
    CHECK_OK(ws_manifest_set(m, "under.txt", WS_FILE, under, hu, &err), &err);
    CHECK_OK(ws_manifest_set(m, "small", WS_FILE, 5, hs, &err), &err);

    a = open_dir("a", pa);
    b = open_dir("b", pb);
    CHECK_OK(ws_dir_sync(a, m, &streaming, &err), &err);
    CHECK_OK(ws_dir_sync(b, m, &whole, &err), &err);
    /* the two files at or over the threshold streamed, the rest went through get */
    CHECK_MSG(cs.writes == 2 && cs.gets == 2, "streamed %d, read whole %d", cs.writes, cs.gets);
    CHECK(cg.writes == 0 && cg.gets == 4);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t la, lb;
        unsigned ma, mb;
        uint8_t *fa = slurp(pa, names[i], &la, &ma), *fb = slurp(pb, names[i], &lb, &mb);
        CHECK_MSG(la == lb && memcmp(fa, fb, la) == 0, "'%s' differs", names[i]);
        CHECK_MSG(ma == mb && ma == (i == 1 ? 0755u : 0644u), "'%s' mode %o/%o", names[i], ma, mb);
        if (i == 0) {
            CHECK(la == big && memcmp(fa, data, big) == 0);
        }
        mem_free(fa);
        mem_free(fb);
    }
    ws_dir_close(a);
    ws_dir_close(b);

    /* a full re-sync over that directory: an intact big file is hashed in pieces and kept,
     * one changed in place (same size) is written again through write_fd */
    {
        struct ws_dir_stats ds;
        char p2[4200];
        int fd;
        size_t la;
        unsigned ma;
        uint8_t *fa;

        CHECK_OK(ws_dir_open(pa, &a, &err), &err);
        cs.writes = cs.gets = 0;
        CHECK_OK(ws_dir_resync(a, m, &streaming, &err), &err);
        ws_dir_stats(a, &ds);
        CHECK_MSG(ds.files_written == 0 && ds.files_read == 4 && cs.writes == 0,
                  "written %llu read %llu streamed %d", (unsigned long long)ds.files_written,
                  (unsigned long long)ds.files_read, cs.writes);
        ws_dir_close(a);
        snprintf(p2, sizeof(p2), "%s/big.bin", pa);
        fd = open(p2, O_WRONLY);
        CHECK(fd >= 0 && pwrite(fd, "X", 1, big - 10) == 1);
        close(fd);
        CHECK_OK(ws_dir_open(pa, &a, &err), &err);
        CHECK_OK(ws_dir_resync(a, m, &streaming, &err), &err);
        ws_dir_stats(a, &ds);
        CHECK(ds.files_written == 1 && cs.writes == 1);
        fa = slurp(pa, "big.bin", &la, &ma);
        CHECK(la == big && memcmp(fa, data, big) == 0 && ma == 0644);
        mem_free(fa);
        ws_dir_close(a);
    }

    /* a manifest size that disagrees with the blob: refused before a byte is written */
    CHECK_OK(ws_manifest_new(&liar, &err), &err);
    CHECK_OK(ws_manifest_set(liar, "liar.bin", WS_FILE, big + 1, hb, &err), &err);
    a = open_dir("a2", pa);
    CHECK(ws_dir_sync(a, liar, &streaming, &ea) == -1);
    CHECK_MSG(ea.code == ERR_CORRUPT && strstr(ea.msg, "'liar.bin'") != NULL, "%s", ea.msg);
    CHECK(!exists_in(pa, "liar.bin"));
    ws_dir_close(a);

    /* one damaged byte inside a raw block of big.bin's frame: the same error both ways,
     * and nothing left at the name (the streaming path removes its partial file) */
    store_close(st);
    {
        sqlite3 *db = NULL;
        char sql[256], hex[HASH_HEX_LEN + 1];
        hex_encode(hb, HASH_LEN, hex);
        snprintf(sql, sizeof(sql),
                 "UPDATE blobs SET data = substr(data, 1, 499999) || "
                 "(CASE WHEN substr(data, 500000, 1) = x'00' THEN x'01' ELSE x'00' END) || "
                 "substr(data, 500001) WHERE hex(hash) = upper('%s')",
                 hex);
        CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
        CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
        CHECK(sqlite3_changes(db) == 1);
        sqlite3_close(db);
    }
    CHECK_OK(store_open(db_path, NULL, &st, &err), &err);
    session_mgr_free(mgr);
    CHECK_OK(session_mgr_new(st, test_path("run"), &mgr, &err), &err);
    cs.real = cg.real = session_mgr_blobs(mgr);
    cs.writes = cg.gets = 0;
    a = open_dir("a3", pa);
    b = open_dir("b3", pb);
    CHECK(ws_dir_sync(a, m, &streaming, &ea) == -1);
    CHECK(ws_dir_sync(b, m, &whole, &eb) == -1);
    CHECK(cs.writes == 1); /* big.bin, the first entry, fails */
    fprintf(stderr, "    damaged: %s\n", ea.msg);
    CHECK_MSG(ea.code == ERR_CORRUPT && eb.code == ERR_CORRUPT, "%d %d", ea.code, eb.code);
    CHECK_MSG(strcmp(ea.msg, eb.msg) == 0, "streamed: %s\nwhole: %s", ea.msg, eb.msg);
    CHECK(strstr(ea.msg, "'big.bin'") && strstr(ea.msg, "restore the database from a backup"));
    CHECK(!exists_in(pa, "big.bin") && !exists_in(pb, "big.bin"));
    ws_dir_close(a);
    ws_dir_close(b);

    ws_manifest_free(m);
    ws_manifest_free(liar);
    session_mgr_free(mgr);
    store_close(st);
    mem_free(data);
}

TESTS(big_files_stream_with_the_same_bytes_modes_and_errors)
