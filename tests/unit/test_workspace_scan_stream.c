/*
 * test_workspace_scan_stream.c - the rescan's streaming path: regular files of
 * WS_STREAM_MIN bytes or more go through ws_blobs.put_fd (wired by session_mgr to the
 * store's streaming writer) instead of being read whole, and give the same manifest
 * (sizes, modes, hashes) and the same stored bytes as the put path; the workspace byte
 * limit and the store's blob cap give the same errors both ways and store nothing; a file
 * that grows while it is read is recorded with the hash and size of the bytes stored.
 */
#include "test.h"
#include "test_db.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "session/session.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/mem.h"
#include "workspace/workspace.h"

/* Counts the calls going through to the session manager's real callbacks. */
struct counting {
    const struct ws_blobs *real;
    int puts, put_fds;
    const char *grow; /* if set: append to this file before each put_fd reads it */
};

static int
c_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    struct counting *c = ctx;

    return c->real->get(c->real->ctx, hash, out, err);
}

static int
c_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    struct counting *c = ctx;

    c->puts++;
    return c->real->put(c->real->ctx, data, len, hash, err);
}

static int
c_put_fd(void *ctx, int fd, uint64_t max, uint8_t hash[HASH_LEN], uint64_t *size, struct err *err)
{
    struct counting *c = ctx;

    c->put_fds++;
    if (c->grow != NULL) {
        /* the command is still writing: the file grows after the scan stat'ed it */
        int w = open(c->grow, O_WRONLY | O_APPEND | O_CLOEXEC);
        CHECK(w >= 0 && write(w, "grown\n", 6) == 6);
        close(w);
    }
    return c->real->put_fd(c->real->ctx, fd, max, hash, size, err);
}

static void
put_file(const char *dir, const char *name, const void *data, size_t len, mode_t mode)
{
    char path[4200];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    CHECK_MSG(fd >= 0, "cannot create %s", path);
    CHECK(write(fd, data, len) == (ssize_t)len);
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

/* A workspace directory `name` holding the given files (the same in every call). */
static struct ws_dir *
make_dir(const char *name, const uint8_t *data, size_t big, int all)
{
    struct ws_dir *d = NULL;
    struct err err;
    char path[4096];

    CHECK_FMT(path, sizeof(path), "%s", test_path(name));
    CHECK_OK(ws_dir_open(path, &d, &err), &err);
    put_file(path, "big.bin", data, big, 0644);
    if (all) {
        put_file(path, "edge.sh", data + 1, WS_STREAM_MIN, 0755);
        put_file(path, "under.txt", data + 2, WS_STREAM_MIN - 1, 0644);
        put_file(path, "small", "tiny\n", 5, 0644);
    }
    return d;
}

struct fixture {
    struct store *st;
    struct session_mgr *mgr;
    struct counting cs, cw;
    struct ws_blobs streaming, whole;
};

static void
fixture_open(struct fixture *f, size_t blob_max)
{
    struct store_opts o = {0};
    struct err err;

    memset(f, 0, sizeof(*f));
    o.blob_max = blob_max;
    CHECK_OK(store_open(test_path("t.db"), &o, &f->st, &err), &err);
    mkdir(test_path("run"), 0700);
    CHECK_OK(session_mgr_new(f->st, test_path("run"), &f->mgr, &err), &err);
    f->cs.real = f->cw.real = session_mgr_blobs(f->mgr);
    CHECK(f->cs.real->put_fd != NULL);
    f->streaming = (struct ws_blobs){.ctx = &f->cs, .get = c_get, .put = c_put, .put_fd = c_put_fd};
    f->whole = (struct ws_blobs){.ctx = &f->cw, .get = c_get, .put = c_put}; /* no put_fd */
}

static void
fixture_close(struct fixture *f)
{
    session_mgr_free(f->mgr);
    store_close(f->st);
}

static int
stored(struct store *st, const uint8_t hash[HASH_LEN])
{
    int exists = 0;
    struct err err;

    CHECK_OK(store_blob_has(st, hash, &exists, NULL, &err), &err);
    return exists;
}

TEST(rescan_streams_big_files_with_the_same_manifest_and_bytes)
{
    const size_t big = WS_STREAM_MIN * 3 + 12345;
    uint8_t *data = mem_alloc(big), h[HASH_LEN];
    struct fixture f;
    struct ws_dir *a, *b;
    const struct ws_manifest *ma, *mb;
    struct ws_scan_report ra, rb;
    struct buf got;
    struct err err;

    CHECK(data != NULL);
    tdb_fill_random(data, big, 11);
    fixture_open(&f, 0);
    a = make_dir("a", data, big, 1);
    b = make_dir("b", data, big, 1);
    CHECK_OK(ws_dir_rescan(a, NULL, &f.streaming, &ra, &err), &err);
    CHECK_OK(ws_dir_rescan(b, NULL, &f.whole, &rb, &err), &err);
    /* big.bin and edge.sh (exactly the threshold) streamed; under.txt and small did not */
    CHECK_MSG(f.cs.put_fds == 2 && f.cs.puts == 2, "streamed %d, put %d", f.cs.put_fds, f.cs.puts);
    CHECK(f.cw.put_fds == 0 && f.cw.puts == 4);
    CHECK(ra.files_read == 4 && rb.files_read == 4);
    ma = ws_dir_manifest(a);
    mb = ws_dir_manifest(b);
    CHECK_EQ_INT((long long)ws_manifest_count(ma), 4);
    CHECK_EQ_INT((long long)ws_manifest_count(mb), 4);
    for (size_t i = 0; i < 4; i++) {
        const struct ws_entry *x = ws_manifest_at(ma, i), *y = ws_manifest_at(mb, i);
        CHECK_EQ_STR(x->path, y->path);
        CHECK_MSG(x->type == y->type && x->size == y->size &&
                      memcmp(x->hash, y->hash, HASH_LEN) == 0,
                  "'%s' differs: type %d/%d size %llu/%llu", x->path, x->type, y->type,
                  (unsigned long long)x->size, (unsigned long long)y->size);
    }
    CHECK_EQ_INT(ws_manifest_get(ma, "edge.sh")->type, WS_EXEC);
    /* the hash is the file's SHA-256, and the store gives back exactly its bytes */
    hash_sha256(data, big, h);
    CHECK(ws_manifest_get(ma, "big.bin")->size == big);
    CHECK(memcmp(ws_manifest_get(ma, "big.bin")->hash, h, HASH_LEN) == 0);
    buf_init(&got, big);
    CHECK_OK(store_blob_get(f.st, h, &got, &err), &err);
    CHECK(got.len == big && memcmp(got.data, data, big) == 0);
    buf_release(&got);
    /* an unchanged file is taken from the stat cache: no second put_fd */
    f.cs.put_fds = 0;
    CHECK_OK(ws_dir_rescan(a, NULL, &f.streaming, &ra, &err), &err);
    CHECK_EQ_INT(f.cs.put_fds, 0);
    ws_scan_report_release(&ra);
    ws_scan_report_release(&rb);
    ws_dir_close(a);
    ws_dir_close(b);
    fixture_close(&f);
    mem_free(data);
}

TEST(rescan_stream_limits_match_the_put_path_and_store_nothing)
{
    const size_t big = WS_STREAM_MIN * 2;
    uint8_t *data = mem_alloc(big), h[HASH_LEN];
    struct fixture f;
    struct ws_limits lim = {0, 0};
    struct ws_dir *a, *b;
    struct err err, ea, eb;

    CHECK(data != NULL);
    tdb_fill_random(data, big, 5);
    hash_sha256(data, big, h);
    fixture_open(&f, 0);
    a = make_dir("a", data, big, 0);
    b = make_dir("b", data, big, 0);

    /* one byte over max_bytes: refused by its stat, the same error both ways */
    lim.max_bytes = big - 1;
    CHECK(ws_dir_rescan(a, &lim, &f.streaming, NULL, &ea) == -1);
    CHECK(ws_dir_rescan(b, &lim, &f.whole, NULL, &eb) == -1);
    CHECK_MSG(ea.code == ERR_TOOBIG && eb.code == ERR_TOOBIG, "%d %d", ea.code, eb.code);
    CHECK_EQ_STR(ea.msg, eb.msg);
    CHECK(strstr(ea.msg, "max_bytes") != NULL && strstr(ea.msg, "'big.bin'") != NULL);
    CHECK(!stored(f.st, h));
    CHECK_EQ_INT((long long)ws_manifest_count(ws_dir_manifest(a)), 0);

    /* under the limit by its stat, over it by what put_fd reads (the file grew): put_fd's
     * own bound stops it, with the same error, and nothing is stored */
    {
        char path[4200];
        uint8_t hg[HASH_LEN];
        struct buf grown;

        CHECK_FMT(path, sizeof(path), "%s/big.bin", test_path("a"));
        f.cs.grow = path;
        lim.max_bytes = big + 5;
        CHECK(ws_dir_rescan(a, &lim, &f.streaming, NULL, &err) == -1);
        f.cs.grow = NULL;
        CHECK_EQ_INT(f.cs.put_fds, 1);
        CHECK_MSG(err.code == ERR_TOOBIG, "%d %s", err.code, err.msg);
        CHECK_EQ_STR(err.msg, "workspace is larger than 2097157 bytes (the max_bytes limit) at "
                              "'big.bin'; delete files or raise the limit");
        buf_init(&grown, big + 6);
        CHECK(buf_append(&grown, data, big) == 0 && buf_append(&grown, "grown\n", 6) == 0);
        hash_sha256(grown.data, grown.len, hg);
        buf_release(&grown);
        CHECK(!stored(f.st, h) && !stored(f.st, hg));
        CHECK_EQ_INT((long long)ws_manifest_count(ws_dir_manifest(a)), 0);
        put_file(test_path("a"), "big.bin", data, big, 0644); /* back to its old bytes */
    }

    /* exactly at max_bytes: fine */
    lim.max_bytes = big;
    CHECK_OK(ws_dir_rescan(a, &lim, &f.streaming, NULL, &err), &err);
    CHECK(stored(f.st, h));
    CHECK(memcmp(ws_manifest_get(ws_dir_manifest(a), "big.bin")->hash, h, HASH_LEN) == 0);
    ws_dir_close(a);
    ws_dir_close(b);
    fixture_close(&f);

    /* the store's blob cap, one byte under the file: ERR_TOOBIG both ways, nothing stored */
    CHECK(unlink(test_path("t.db")) == 0);
    unlink(test_path("t.db-wal"));
    unlink(test_path("t.db-shm"));
    fixture_open(&f, big - 1);
    a = make_dir("c", data, big, 0);
    b = make_dir("d", data, big, 0);
    CHECK(ws_dir_rescan(a, NULL, &f.streaming, NULL, &ea) == -1);
    CHECK(ws_dir_rescan(b, NULL, &f.whole, NULL, &eb) == -1);
    fprintf(stderr, "    streamed: %s\n    whole: %s\n", ea.msg, eb.msg);
    CHECK_MSG(ea.code == ERR_TOOBIG && eb.code == ERR_TOOBIG, "%d %d", ea.code, eb.code);
    CHECK(strstr(ea.msg, "cannot store 'big.bin'") != NULL &&
          strstr(eb.msg, "cannot store 'big.bin'") != NULL);
    CHECK(strstr(ea.msg, "store smaller files") != NULL);
    CHECK(!stored(f.st, h));
    ws_dir_close(a);
    ws_dir_close(b);
    fixture_close(&f);
    mem_free(data);
}

TEST(a_file_growing_during_the_read_gets_the_hash_of_the_stored_bytes)
{
    const size_t big = WS_STREAM_MIN + 100;
    uint8_t *data = mem_alloc(big + 6), h[HASH_LEN];
    struct fixture f;
    struct ws_dir *a;
    const struct ws_entry *e;
    struct ws_scan_report r;
    struct buf got;
    struct err err;
    char path[4200];

    CHECK(data != NULL);
    tdb_fill_random(data, big, 3);
    memcpy(data + big, "grown\n", 6);
    fixture_open(&f, 0);
    a = make_dir("a", data, big, 0);
    CHECK_FMT(path, sizeof(path), "%s/big.bin", test_path("a"));
    f.cs.grow = path;
    CHECK_OK(ws_dir_rescan(a, NULL, &f.streaming, NULL, &err), &err);
    e = ws_manifest_get(ws_dir_manifest(a), "big.bin");
    CHECK(e != NULL);
    /* recorded: what was stored (the grown file), not the size the stat saw */
    CHECK_MSG(e->size == big + 6, "size %llu", (unsigned long long)e->size);
    hash_sha256(data, big + 6, h);
    CHECK(memcmp(e->hash, h, HASH_LEN) == 0);
    buf_init(&got, big + 6);
    CHECK_OK(store_blob_get(f.st, e->hash, &got, &err), &err);
    CHECK(got.len == big + 6 && memcmp(got.data, data, big + 6) == 0);
    buf_release(&got);
    /* the cache holds the stat from before the read, so a later rescan that looks at
     * the directory (a new file beside it) reads it again instead of trusting the cache */
    f.cs.grow = NULL;
    f.cs.put_fds = 0;
    put_file(test_path("a"), "other", "x", 1, 0644);
    CHECK_OK(ws_dir_rescan(a, NULL, &f.streaming, &r, &err), &err);
    CHECK_MSG(f.cs.put_fds == 1 && r.files_read == 2, "put_fd %d, read %zu", f.cs.put_fds,
              r.files_read);
    e = ws_manifest_get(ws_dir_manifest(a), "big.bin");
    CHECK(e->size == big + 6 && memcmp(e->hash, h, HASH_LEN) == 0);
    ws_scan_report_release(&r);
    ws_dir_close(a);
    fixture_close(&f);
    mem_free(data);
}

TESTS(rescan_streams_big_files_with_the_same_manifest_and_bytes,
      rescan_stream_limits_match_the_put_path_and_store_nothing,
      a_file_growing_during_the_read_gets_the_hash_of_the_stored_bytes)
