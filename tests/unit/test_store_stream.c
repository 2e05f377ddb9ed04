/*
 * test_store_stream.c - the streaming blob writer (store_blob_writer_*): round trips
 * at the chunk edges, the same hash as store_blob_put, dedupe, abort, the blob cap and
 * a full disk mid-stream.
 */
#include "test.h"
#include "test_db.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include <sys/resource.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader */
#include <zstd.h>

#include "store/store.h"
#include "util/hash.h"
#include "util/mem.h"

#define C STORE_BLOB_CHUNK

/* Half pseudo-random bytes, half text-like lines: both zstd paths get exercised. */
static void
fill_mixed(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;

    for (size_t i = 0; i < n; i++) {
        if ((i / 4096) % 2 == 0) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            p[i] = (uint8_t)x;
        } else {
            p[i] = (uint8_t)("lorem ipsum dolor sit amet\n"[(i * 7 + seed) % 27]);
        }
    }
}

/* Streams data in pieces of `piece` bytes; returns the finished hash. */
static void
stream(struct store *st, const uint8_t *data, size_t len, size_t piece, uint8_t hash[HASH_LEN])
{
    struct store_blob_writer *w = NULL;
    struct err err;
    int64_t size = -1;

    CHECK_OK(store_blob_writer_open(st, &w, &err), &err);
    for (size_t off = 0; off < len; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        CHECK_OK(store_blob_writer_write(w, data + off, n, &err), &err);
    }
    CHECK(store_blob_writer_size(w) == len);
    CHECK_OK(store_blob_writer_finish(w, hash, &size, &err), &err);
    CHECK(size == (int64_t)len);
}

TEST(round_trip_at_chunk_edges)
{
    const char *path = test_path("s.db");
    struct store *st = tdb_open(path, NULL);
    const size_t sizes[] = {0,     1,     STORE_BLOB_HEAD - 1, STORE_BLOB_HEAD, STORE_BLOB_HEAD + 1,
                            C - 1, C + 1, 5 * C + 12345};
    const size_t pieces[] = {16384, 1000003};
    uint8_t *data = mem_alloc(5 * C + 12345);
    struct err err;

    CHECK(data != NULL);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t j = 0; j < 2; j++) {
            uint8_t h[HASH_LEN], want[HASH_LEN], put[HASH_LEN];
            struct buf out;
            int exists = 0;
            int64_t size = -1;

            fill_mixed(data, sizes[i], (uint32_t)(i * 2 + j + 1));
            hash_sha256(data, sizes[i], want);
            stream(st, data, sizes[i], pieces[j], h);
            CHECK_MSG(memcmp(h, want, HASH_LEN) == 0, "hash differs at size %zu", sizes[i]);
            CHECK_OK(store_blob_has(st, h, &exists, &size, &err), &err);
            CHECK(exists && size == (int64_t)sizes[i]);
            buf_init(&out, sizes[i]);
            CHECK_OK(store_blob_get(st, h, &out, &err), &err);
            CHECK_MSG(out.len == sizes[i] &&
                          (sizes[i] == 0 || memcmp(out.data, data, out.len) == 0),
                      "bytes differ at size %zu", sizes[i]);
            buf_release(&out);
            /* store_blob_put names the same bytes the same way (and stores nothing new) */
            CHECK_OK(store_blob_put(st, data, sizes[i], put, &err), &err);
            CHECK(memcmp(put, h, HASH_LEN) == 0);
        }
    }
    store_close(st);
    /* a big one is one zstd row; the DB passes its own checks */
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs WHERE size > 1048576 AND codec = 1") == 4);
    {
        struct store *s2 = tdb_open(path, NULL);
        int ok = 0;
        CHECK_OK(store_check(s2, &ok, &err), &err);
        CHECK_MSG(ok, "integrity: %s", err.msg);
        store_close(s2);
    }
    mem_free(data);
}

/* Reads blob h through store_blob_write_fd into a file; returns its bytes (caller frees). */
static uint8_t *
read_via_fd(struct store *st, const uint8_t h[HASH_LEN], size_t *len, struct err *err, int *rc)
{
    const char *path = test_path("out.bin");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    struct stat sb;
    uint8_t *p;

    CHECK(fd >= 0);
    *rc = store_blob_write_fd(st, h, fd, err);
    CHECK(fstat(fd, &sb) == 0);
    *len = (size_t)sb.st_size;
    p = mem_alloc(*len + 1);
    CHECK(p != NULL);
    CHECK(pread(fd, p, *len, 0) == (ssize_t)*len);
    close(fd);
    return p;
}

TEST(write_fd_streams_every_codec)
{
    char path[4096];
    struct store *st;
    size_t big = 4 * C + 777, len;
    uint8_t *data = mem_alloc(big), *got;
    uint8_t hs[HASH_LEN], hp[HASH_LEN], hr[HASH_LEN], hd[HASH_LEN], he[HASH_LEN];
    struct err err;
    int rc;

    CHECK_FMT(path, sizeof(path), "%s", test_path("r.db")); /* test_path reuses its buffer */
    st = tdb_open(path, NULL);
    CHECK(data != NULL);
    fill_mixed(data, big, 21);
    stream(st, data, big, 300000, hs);                               /* codec 1, streamed */
    CHECK_OK(store_blob_put(st, data + 1, big - 1, hp, &err), &err); /* codec 1, one shot */
    CHECK_OK(store_blob_put(st, data, 4096, hr, &err), &err);        /* random: codec 0 */
    CHECK_OK(store_blob_put_delta(st, data + 2, big - 2, hp, hd, &err), &err); /* maybe 2 */
    CHECK_OK(store_blob_put(st, "", 0, he, &err), &err);
    got = read_via_fd(st, hs, &len, &err, &rc);
    CHECK_OK(rc, &err);
    CHECK(len == big && memcmp(got, data, big) == 0);
    mem_free(got);
    got = read_via_fd(st, hp, &len, &err, &rc);
    CHECK_OK(rc, &err);
    CHECK(len == big - 1 && memcmp(got, data + 1, big - 1) == 0);
    mem_free(got);
    got = read_via_fd(st, hr, &len, &err, &rc);
    CHECK_OK(rc, &err);
    CHECK(len == 4096 && memcmp(got, data, 4096) == 0);
    mem_free(got);
    got = read_via_fd(st, hd, &len, &err, &rc);
    CHECK_OK(rc, &err);
    CHECK(len == big - 2 && memcmp(got, data + 2, big - 2) == 0);
    mem_free(got);
    got = read_via_fd(st, he, &len, &err, &rc);
    CHECK_OK(rc, &err);
    CHECK(len == 0);
    mem_free(got);
    store_close(st);
    CHECK(tdb_int(path, "SELECT count(DISTINCT codec) FROM blobs") >= 2);

    /* a damaged byte in the middle of the streamed frame: ERR_CORRUPT, never silence */
    {
        sqlite3 *db = NULL;
        char sql[256], hex[HASH_HEX_LEN + 1];
        hex_encode(hs, HASH_LEN, hex);
        snprintf(sql, sizeof(sql),
                 "UPDATE blobs SET data = substr(data, 1, 100000) || x'00' || "
                 "substr(data, 100002) WHERE hex(hash) = upper('%s')",
                 hex);
        CHECK(sqlite3_open(path, &db) == SQLITE_OK);
        CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);
    }
    st = tdb_open(path, NULL);
    got = read_via_fd(st, hs, &len, &err, &rc);
    CHECK(rc < 0);
    CHECK_MSG(err.code == ERR_CORRUPT && strstr(err.msg, "restore the database"), "%s", err.msg);
    mem_free(got);
    /* a missing blob */
    memset(hs, 7, HASH_LEN);
    got = read_via_fd(st, hs, &len, &err, &rc);
    CHECK(rc < 0 && err.code == ERR_NOTFOUND && len == 0);
    mem_free(got);
    store_close(st);
    mem_free(data);
}

TEST(stream_after_put_and_twice_dedupes)
{
    const char *path = test_path("d.db");
    struct store *st = tdb_open(path, NULL);
    size_t len = 3 * C + 7;
    uint8_t *data = mem_alloc(len);
    uint8_t h1[HASH_LEN], h2[HASH_LEN], h3[HASH_LEN];
    struct err err;

    CHECK(data != NULL);
    fill_mixed(data, len, 9);
    stream(st, data, len, 65536, h1);
    stream(st, data, len, 4096, h2);
    CHECK_OK(store_blob_put(st, data, len, h3, &err), &err);
    CHECK(memcmp(h1, h2, HASH_LEN) == 0 && memcmp(h1, h3, HASH_LEN) == 0);
    store_close(st);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 1);
    mem_free(data);
}

TEST(abort_leaves_no_row_and_no_file)
{
    const char *path = test_path("a.db");
    struct store *st = tdb_open(path, NULL);
    struct store_blob_writer *w = NULL;
    size_t len = 4 * C;
    uint8_t *data = mem_alloc(len);
    int fds, files;
    struct err err;

    CHECK(data != NULL);
    fill_mixed(data, len, 3);
    fds = tdb_count_fds();
    files = tdb_count_dir(test_tmpdir());
    CHECK_OK(store_blob_writer_open(st, &w, &err), &err);
    CHECK_OK(store_blob_writer_write(w, data, len, &err), &err);
    CHECK(tdb_count_fds() == fds + 1);            /* the temporary file is open ... */
    CHECK(tdb_count_dir(test_tmpdir()) == files); /* ... and has no name */
    store_blob_writer_abort(w);
    store_blob_writer_abort(NULL);
    CHECK(tdb_count_fds() == fds);
    CHECK(tdb_count_dir(test_tmpdir()) == files);
    store_close(st);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 0);
    mem_free(data);
}

TEST(blob_cap_is_enforced_while_streaming)
{
    const char *path = test_path("c.db");
    struct store_opts opts;
    struct store *st;
    struct store_blob_writer *w = NULL;
    size_t cap = 2 * C;
    uint8_t *data = mem_alloc(cap + 1);
    uint8_t h[HASH_LEN];
    struct err err;

    CHECK(data != NULL);
    memset(&opts, 0, sizeof(opts));
    opts.blob_max = cap;
    st = tdb_open(path, &opts);
    fill_mixed(data, cap + 1, 5);
    /* exactly at the cap: stored */
    stream(st, data, cap, 100000, h);
    /* one past: refused at the write that passes it, then finish stores nothing */
    CHECK_OK(store_blob_writer_open(st, &w, &err), &err);
    CHECK_OK(store_blob_writer_write(w, data, cap, &err), &err);
    CHECK(store_blob_writer_write(w, data + cap, 1, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "over the limit") != NULL);
    CHECK(store_blob_writer_write(w, data, 1, &err) < 0);
    CHECK(store_blob_writer_finish(w, h, NULL, &err) < 0);
    store_close(st);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 1);
    mem_free(data);
}

TEST(disk_full_mid_stream_is_a_clear_error)
{
    const char *path = test_path("full.db");
    int fds[2];
    pid_t child;
    char msg[512] = {0};
    ssize_t n;
    int status;

    store_close(tdb_open(path, NULL));
    CHECK(pipe(fds) == 0);
    child = fork();
    if (child == 0) {
        struct rlimit rl = {512 * 1024, 512 * 1024};
        struct store *st = NULL;
        struct store_blob_writer *w = NULL;
        static uint8_t data[8 << 20];
        uint8_t h[HASH_LEN];
        struct err err;
        size_t off;

        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0 || store_open(path, NULL, &st, &err) < 0 ||
            store_blob_writer_open(st, &w, &err) < 0) {
            _exit(3);
        }
        fill_mixed(data, sizeof(data), 11);
        /* pseudo-random throughout, so the compressed stream passes the limit */
        for (size_t i = 0; i < sizeof(data); i += 8192) {
            fill_mixed(data + i, 4096, (uint32_t)i);
            memcpy(data + i + 4096, data + i, 4096);
            data[i + 4096] ^= 1;
        }
        for (off = 0; off < sizeof(data); off += 65536) {
            if (store_blob_writer_write(w, data + off, 65536, &err) < 0) {
                break;
            }
        }
        if (off < sizeof(data)) {
            dprintf(fds[1], "write %d %s", err.code, err.msg);
            store_blob_writer_abort(w);
        } else if (store_blob_writer_finish(w, h, NULL, &err) < 0) {
            dprintf(fds[1], "finish %d %s", err.code, err.msg);
        } else {
            dprintf(fds[1], "stored");
        }
        store_close(st);
        _exit(0);
    }
    close(fds[1]);
    n = read(fds[0], msg, sizeof(msg) - 1);
    CHECK(waitpid(child, &status, 0) == child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    CHECK(n > 0);
    msg[n] = '\0';
    fprintf(stderr, "    disk full: %s\n", msg);
    CHECK_MSG(strncmp(msg, "write 9 ", 8) == 0, "%s", msg);
    CHECK_MSG(strstr(msg, "free disk space") && strstr(msg, "File too large"), "%s", msg);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 0);
    {
        struct store *st = tdb_open(path, NULL);
        struct err err;
        int ok = 0;
        CHECK_OK(store_check(st, &ok, &err), &err);
        CHECK_MSG(ok, "integrity: %s", err.msg);
        store_close(st);
    }
}

/*
 * A stream of many chunks (repeats further apart than the window, so a wrong window
 * would show) round-trips through store_blob_get and store_blob_write_fd, and its frame
 * asks a reader for no more than a 512 KiB window.
 */
TEST(many_chunks_round_trip_with_a_small_window)
{
    char path[4096];
    struct store *st;
    size_t big = 12 * C + 4321, len;
    uint8_t *data = mem_alloc(big), *got, h[HASH_LEN];
    struct buf out;
    struct err err;
    int rc;

    CHECK_FMT(path, sizeof(path), "%s", test_path("w.db"));
    st = tdb_open(path, NULL);
    CHECK(data != NULL);
    fill_mixed(data, 3 * C, 5);
    for (size_t off = 3 * C; off < big; off += 3 * C) { /* repeats 3 MiB apart */
        memcpy(data + off, data, big - off < 3 * C ? big - off : 3 * C);
    }
    stream(st, data, big, 65536 + 7, h);
    buf_init(&out, big);
    CHECK_OK(store_blob_get(st, h, &out, &err), &err);
    CHECK(out.len == big && memcmp(out.data, data, big) == 0);
    buf_release(&out);
    got = read_via_fd(st, h, &len, &err, &rc);
    CHECK_OK(rc, &err);
    CHECK(len == big && memcmp(got, data, big) == 0);
    mem_free(got);
    /* with the size the caller expects: the right one streams, a wrong one writes nothing */
    {
        int fd = open(test_path("sized.bin"), O_RDWR | O_CREAT | O_TRUNC, 0600);
        struct stat sb;

        CHECK(fd >= 0);
        CHECK_OK(store_blob_write_fd_size(st, h, big, fd, &err), &err);
        CHECK(fstat(fd, &sb) == 0 && (size_t)sb.st_size == big);
        CHECK(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
        CHECK(store_blob_write_fd_size(st, h, big - 1, fd, &err) == -1);
        CHECK_MSG(err.code == ERR_CORRUPT && strstr(err.msg, "where"), "%s", err.msg);
        CHECK(fstat(fd, &sb) == 0 && sb.st_size == 0);
        close(fd);
    }
    store_close(st);
    {
        sqlite3 *db = NULL;
        sqlite3_stmt *s = NULL;
        ZSTD_frameHeader fh;

        CHECK(sqlite3_open(path, &db) == SQLITE_OK);
        CHECK(sqlite3_prepare_v2(db, "SELECT codec, data FROM blobs WHERE size = ?1", -1, &s,
                                 NULL) == SQLITE_OK);
        sqlite3_bind_int64(s, 1, (sqlite3_int64)big);
        CHECK(sqlite3_step(s) == SQLITE_ROW);
        CHECK(sqlite3_column_int(s, 0) == 1);
        CHECK(ZSTD_getFrameHeader(&fh, sqlite3_column_blob(s, 1),
                                  (size_t)sqlite3_column_bytes(s, 1)) == 0);
        CHECK_MSG(fh.windowSize <= ((unsigned long long)1 << 19), "window %llu",
                  (unsigned long long)fh.windowSize);
        CHECK(fh.frameContentSize == big);
        sqlite3_finalize(s);
        sqlite3_close(db);
    }
    mem_free(data);
}

/* Random bytes past the head are stored raw (codec 0), text is compressed (codec 1), and
 * both read back whole and through the fd reader. */
TEST(incompressible_stream_is_stored_raw)
{
    char path[4096];
    struct store *st;
    const size_t n = 3 * C + 777;
    uint8_t *rnd = mem_alloc(n), *txt = mem_alloc(n);
    uint8_t hr[HASH_LEN], ht[HASH_LEN], want[HASH_LEN];
    uint32_t x = 12345;
    struct buf out;
    struct err err;

    CHECK_FMT(path, sizeof(path), "%s", test_path("raw.db")); /* test_path's buffer is reused */
    st = tdb_open(path, NULL);
    CHECK(rnd != NULL && txt != NULL);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        rnd[i] = (uint8_t)x;
        txt[i] = (uint8_t)("lorem ipsum dolor sit amet\n"[(i * 7) % 27]);
    }
    stream(st, rnd, n, 65536, hr);
    stream(st, txt, n, 65536, ht);
    hash_sha256(rnd, n, want);
    CHECK(memcmp(hr, want, HASH_LEN) == 0);
    buf_init(&out, n);
    CHECK_OK(store_blob_get(st, hr, &out, &err), &err);
    CHECK(out.len == n && memcmp(out.data, rnd, n) == 0);
    buf_release(&out);
    {
        size_t got = 0;
        int rc = 0;
        uint8_t *back = read_via_fd(st, hr, &got, &err, &rc);
        CHECK_OK(rc, &err);
        CHECK(back != NULL && got == n && memcmp(back, rnd, n) == 0);
        mem_free(back);
    }
    store_close(st);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs WHERE size > 3145728 AND codec = 0 AND "
                        "length(data) = size") == 1);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs WHERE size > 3145728 AND codec = 1") == 1);
    mem_free(rnd);
    mem_free(txt);
}

/* The writer's notify function: one byte down a pipe per call. */
static void
notify_pipe(void *ud)
{
    int fd = *(int *)ud;
    ssize_t k = write(fd, "n", 1);

    (void)k;
}

static void
wait_pipe(int fd)
{
    char c;

    CHECK(read(fd, &c, 1) == 1);
}

/* Streams with try_write (waiting on the pipe when it says 1), then store_bg. */
static struct store_blob_writer *
stream_bg(struct store *st, const uint8_t *data, size_t len, int *fds, int *pauses)
{
    struct store_blob_writer *w = NULL;
    struct err err;

    CHECK_OK(store_blob_writer_open(st, &w, &err), &err);
    store_blob_writer_set_notify(w, notify_pipe, &fds[1]);
    for (size_t off = 0; off < len;) {
        size_t n = len - off < 16384 ? len - off : 16384;
        int rc = store_blob_writer_try_write(w, data + off, n, &err);

        CHECK(rc >= 0);
        if (rc == 1) {
            (*pauses)++;
            wait_pipe(fds[0]); /* a slot freed (or an earlier wake-up: try again) */
            continue;
        }
        off += n;
    }
    CHECK_OK(store_blob_writer_store_bg(w, &err), &err);
    while (store_blob_writer_busy(w)) {
        wait_pipe(fds[0]);
    }
    CHECK(!store_blob_writer_bg_busy(w));
    return w;
}

TEST(try_write_pauses_and_store_bg_stores_the_row_ahead)
{
    char path[4096];
    struct store *st;
    const size_t n = 4 * C + 333;
    uint8_t *data = mem_alloc(n);
    uint8_t want[HASH_LEN], got[HASH_LEN];
    struct store_blob_writer *w;
    struct buf out;
    struct err err;
    int fds[2], pauses = 0;
    char sql[200];

    CHECK(data != NULL && pipe(fds) == 0);
    CHECK_FMT(path, sizeof(path), "%s", test_path("bg.db"));
    st = tdb_open(path, NULL);
    fill_mixed(data, n, 7);
    hash_sha256(data, n, want);

    /* Stored ahead, on the writer's thread: the row is there before finish. */
    w = stream_bg(st, data, n, fds, &pauses);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 1);
    CHECK_OK(store_blob_writer_finish(w, got, NULL, &err), &err);
    CHECK(memcmp(got, want, HASH_LEN) == 0);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 1);

    /* gc takes the row between the writer's transaction and finish's: finish copies it
     * again from the temporary file. */
    tdb_exec(path, "DELETE FROM blobs");
    w = stream_bg(st, data, n, fds, &pauses);
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 1);
    tdb_exec(path, "DELETE FROM blobs");
    CHECK(tdb_int(path, "SELECT count(*) FROM blobs") == 0);
    CHECK_OK(store_blob_writer_finish(w, got, NULL, &err), &err);
    CHECK(memcmp(got, want, HASH_LEN) == 0);
    buf_init(&out, n);
    CHECK_OK(store_blob_get(st, want, &out, &err), &err);
    CHECK(out.len == n && memcmp(out.data, data, n) == 0);
    buf_release(&out);
    store_close(st);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM blobs WHERE size = %zu", n);
    CHECK(tdb_int(path, sql) == 1);
    printf("# %d pauses\n", pauses);
    close(fds[0]);
    close(fds[1]);
    mem_free(data);
}

TESTS(try_write_pauses_and_store_bg_stores_the_row_ahead, round_trip_at_chunk_edges,
      many_chunks_round_trip_with_a_small_window, write_fd_streams_every_codec,
      stream_after_put_and_twice_dedupes, abort_leaves_no_row_and_no_file,
      blob_cap_is_enforced_while_streaming, disk_full_mid_stream_is_a_clear_error,
      incompressible_stream_is_stored_raw)
