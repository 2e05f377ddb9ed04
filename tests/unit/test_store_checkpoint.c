/*
 * test_store_checkpoint.c - the WAL checkpointer thread (store_opts.wal_thread): it
 * checkpoints off the committing call, the cap brings the commit's own checkpoint back
 * when a reader pins the WAL, close leaves a truncated WAL and an intact file, SIGKILL
 * mid-checkpoint loses nothing committed, and failed allocations in either connection
 * are clean errors.
 *
 * "Off the committing call" is counted, never timed: the store's wal hook counts the
 * commits it saw, the signals it sent and the checkpoints it ran inline; the thread
 * counts its own. store_wal_wait() makes the thread's work visible without sleeping.
 */
#include "test.h"
#include "test_db.h"

#include <sqlite3.h>
#include <sys/resource.h>

#include "store/store.h"
#include "util/mem.h"

/* ---- helpers ------------------------------------------------------------------------ */

static struct store *
open_ckpt(const char *path, int threshold, int64_t cap)
{
    struct store_opts opts = {0};
    struct store *st = NULL;
    struct err err;

    opts.wal_thread = 1;
    opts.wal_threshold_frames = threshold;
    opts.wal_cap_bytes = cap;
    CHECK_OK(store_open(path, &opts, &st, &err), &err);
    return st;
}

/* Fills p with n bytes that zstd cannot shrink, the same for the same seed. */
/* Stores blob number i (n bytes); its hash goes to hash. */
static void
put_blob(struct store *st, uint32_t i, size_t n, uint8_t hash[HASH_LEN])
{
    static uint8_t data[9 << 20];
    struct err err;

    CHECK(n <= sizeof(data));
    tdb_fill_random(data, n, i);
    CHECK_OK(store_blob_put(st, data, n, hash, &err), &err);
}

static int64_t
file_size(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static const char *
wal_path(const char *path)
{
    static char p[8192];

    CHECK_FMT(p, sizeof(p), "%s-wal", path);
    return p;
}

static void
check_integrity(const char *path, int64_t blobs)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;

    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK_MSG(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL) == SQLITE_OK,
              "integrity_check: %s", sqlite3_errmsg(db));
    CHECK(sqlite3_step(s) == SQLITE_ROW);
    CHECK_EQ_STR((const char *)sqlite3_column_text(s, 0), "ok");
    sqlite3_finalize(s);
    if (blobs >= 0) {
        CHECK(sqlite3_prepare_v2(db, "SELECT count(*) FROM blobs", -1, &s, NULL) == SQLITE_OK);
        CHECK(sqlite3_step(s) == SQLITE_ROW);
        CHECK_EQ_INT(sqlite3_column_int64(s, 0), blobs);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
}

/* ---- tests -------------------------------------------------------------------------- */

TEST(thread_checkpoints_off_the_commit)
{
    const char *path = test_path("t.db");
    struct store *st = open_ckpt(path, 64, 0);
    struct store_wal_stats ws;
    uint8_t h[HASH_LEN];
    int64_t db_before;
    int restarted = 0, prev = 0;

    store_wal_stats(st, &ws);
    CHECK_EQ_INT(ws.thread, 1);
    db_before = file_size(path);
    /* One 1 MiB commit: ~256 frames, past the threshold of 64. */
    put_blob(st, 1, 1 << 20, h);
    store_wal_wait(st);
    store_wal_stats(st, &ws);
    CHECK_EQ_INT(ws.commits, 1);
    CHECK_EQ_INT(ws.signals, 1);
    CHECK_EQ_INT(ws.inline_checkpoints, 0);
    CHECK(ws.thread_checkpoints >= 1);
    CHECK_EQ_INT(ws.thread_errors, 0);
    CHECK(ws.last_frames >= 256);
    /* The thread copied every frame into the database file. */
    CHECK(ws.last_log > 0);
    CHECK_EQ_INT(ws.last_checkpointed, ws.last_log);
    CHECK(file_size(path) >= db_before + (1 << 20));

    /* Small commits after it: the WAL restarts from its start (the frame count drops),
     * which SQLite only does once every frame was checkpointed. */
    for (uint32_t i = 2; i < 40; i++) {
        put_blob(st, i, 16384, h);
        store_wal_wait(st);
        store_wal_stats(st, &ws);
        if (ws.last_frames < prev) {
            restarted++;
        }
        prev = ws.last_frames;
    }
    CHECK(restarted >= 1);
    CHECK_EQ_INT(ws.inline_checkpoints, 0);
    CHECK(ws.thread_checkpoints >= 2);
    CHECK_EQ_INT(ws.commits, 39);
    store_close(st);
    check_integrity(path, 39);
}

TEST(thread_off_keeps_sqlite_autocheckpoint)
{
    const char *path = test_path("off.db");
    struct store *st = NULL;
    struct store_wal_stats ws;
    struct err err;
    uint8_t h[HASH_LEN];
    int64_t db_before;

    CHECK_OK(store_open(path, NULL, &st, &err), &err);
    store_wal_stats(st, &ws);
    CHECK_EQ_INT(ws.thread, 0);
    db_before = file_size(path);
    put_blob(st, 1, 8 << 20, h); /* 2048+ frames: SQLite checkpoints inside this commit */
    CHECK(file_size(path) >= db_before + (8 << 20));
    store_wal_wait(st); /* a no-op when off */
    store_close(st);
    check_integrity(path, 1);
}

TEST(cap_falls_back_to_the_committing_call_and_logs_once)
{
    char path[4096], logp[4096];
    struct store *st;
    struct store_wal_stats ws;
    sqlite3 *reader = NULL;
    sqlite3_stmt *s = NULL;
    uint8_t h[HASH_LEN];
    char text[8192];
    int saved, fd, lines = 0, first_over = 0;

    CHECK_FMT(path, sizeof(path), "%s", test_path("cap.db"));
    CHECK_FMT(logp, sizeof(logp), "%s", test_path("stderr.log"));
    st = open_ckpt(path, 16, 256 << 10);
    int64_t inl;
    ssize_t n;

    put_blob(st, 0, 4096, h);
    store_wal_wait(st);
    /* A reader that keeps its snapshot open pins the WAL: PASSIVE cannot copy past it. */
    CHECK(sqlite3_open(path, &reader) == SQLITE_OK);
    CHECK(sqlite3_exec(reader, "BEGIN", NULL, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_prepare_v2(reader, "SELECT count(*) FROM blobs", -1, &s, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(s) == SQLITE_ROW);
    CHECK_EQ_INT(sqlite3_column_int64(s, 0), 1);
    sqlite3_finalize(s);

    fflush(stderr);
    saved = dup(2);
    fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
    close(fd);
    /* 64 KiB a commit (~18 frames). The commit that first passes the cap leaves it to
     * the thread; each one after finds the WAL already past it and grown, the thread
     * idle: the commit checkpoints itself. */
    for (uint32_t i = 1; i <= 12; i++) {
        put_blob(st, i, 65536, h);
        store_wal_wait(st);
        store_wal_stats(st, &ws);
        if (first_over == 0 && (int64_t)ws.last_frames * 4120 > (256 << 10)) {
            first_over = (int)i;
        }
        CHECK_MSG(ws.inline_checkpoints == (first_over ? (int)i - first_over : 0),
                  "commit %u: %lld inline checkpoints, first over the cap at %d", i,
                  (long long)ws.inline_checkpoints, first_over);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK(first_over >= 2 && first_over <= 8);
    CHECK_EQ_INT(ws.cap_warned, 1);
    CHECK(ws.thread_checkpoints >= first_over);
    fd = open(logp, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    CHECK(n > 0);
    text[n] = '\0';
    for (const char *p = text; (p = strstr(p, "past its cap")) != NULL; p++) {
        lines++;
    }
    CHECK_MSG(lines == 1, "the cap warning was logged %d times: %s", lines, text);

    /* The reader lets go: the thread catches up and the WAL restarts. */
    sqlite3_exec(reader, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(reader);
    inl = ws.inline_checkpoints;
    put_blob(st, 13, 4096, h);
    store_wal_wait(st);
    put_blob(st, 14, 4096, h);
    store_wal_wait(st);
    store_wal_stats(st, &ws);
    CHECK_MSG(ws.last_frames < 16, "the WAL did not restart: %d frames", ws.last_frames);
    CHECK_EQ_INT(ws.inline_checkpoints, inl + 1); /* 13: still over and grown; 14: restarted */
    store_close(st);
    check_integrity(path, 15);
}

TEST(close_with_thread_running_truncates_the_wal)
{
    const char *path = test_path("close.db");
    struct store *st = open_ckpt(path, 8, 0);
    sqlite3 *other = NULL;
    uint8_t h[HASH_LEN];

    /* Another connection stays open, so SQLite's own last-close checkpoint does not
     * run: what empties the WAL is store_close's. */
    CHECK(sqlite3_open(path, &other) == SQLITE_OK);
    CHECK(sqlite3_exec(other, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) == SQLITE_OK);
    for (uint32_t i = 0; i < 30; i++) {
        put_blob(st, i, 65536, h); /* the thread is signalled on every commit */
    }
    store_close(st); /* no wait: the thread may be mid-checkpoint */
    CHECK_EQ_INT(file_size(wal_path(path)), 0);
    sqlite3_close(other);
    check_integrity(path, 30);

    /* Alone, the file closes as before: the WAL is gone. */
    st = open_ckpt(path, 8, 0);
    put_blob(st, 100, 65536, h);
    store_close(st);
    CHECK(file_size(wal_path(path)) <= 0);
    check_integrity(path, 31);
}

TEST(sigkill_mid_checkpoint_loses_nothing_committed)
{
    const char *path = test_path("kill.db");
    int total = 0;

    store_close(open_ckpt(path, 8, 0));
    for (int round = 0; round < 10; round++) {
        int fds[2], status;
        int want = 3 + round * 5; /* kill after this many reported commits */
        uint32_t base = (uint32_t)round * 100000u;
        uint32_t ids[4096];
        size_t n_ids = 0;
        pid_t child;
        struct store *st;

        CHECK(pipe(fds) == 0);
        child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            struct store_opts opts = {0};
            struct store *cs = NULL;
            struct err err;
            close(fds[0]);
            opts.wal_thread = 1;
            opts.wal_threshold_frames = 8;
            if (store_open(path, &opts, &cs, &err) < 0) {
                dprintf(2, "child: %s\n", err.msg);
                _exit(1);
            }
            for (uint32_t i = base;; i++) {
                uint8_t h[HASH_LEN];
                put_blob(cs, i, 32768 + (i % 7) * 4096, h);
                if (write(fds[1], &i, sizeof(i)) != sizeof(i)) {
                    _exit(1);
                }
            }
        }
        close(fds[1]);
        while ((int)n_ids < want) {
            CHECK(read(fds[0], &ids[n_ids], sizeof(uint32_t)) == sizeof(uint32_t));
            n_ids++;
        }
        kill(child, SIGKILL);
        CHECK(waitpid(child, &status, 0) == child);
        CHECK(WIFSIGNALED(status));
        while (n_ids < 4096 && read(fds[0], &ids[n_ids], sizeof(uint32_t)) == sizeof(uint32_t)) {
            n_ids++;
        }
        close(fds[0]);
        total += (int)n_ids;
        check_integrity(path, -1);
        st = open_ckpt(path, 8, 0);
        for (size_t k = 0; k < n_ids; k++) {
            static uint8_t data[1 << 16];
            uint8_t h[HASH_LEN];
            struct buf out;
            struct err err;
            size_t n = 32768 + (ids[k] % 7) * 4096;
            tdb_fill_random(data, n, ids[k]);
            hash_sha256(data, n, h);
            buf_init(&out, 1 << 20);
            CHECK_OK(store_blob_get(st, h, &out, &err), &err);
            CHECK(out.len == n && memcmp(out.data, data, n) == 0);
            buf_release(&out);
        }
        store_close(st);
    }
    fprintf(stderr, "    %d committed blobs reported over 10 kills, all present\n", total);
}

TEST(disk_full_with_thread_is_a_clear_error_and_keeps_commits)
{
    const char *path = test_path("full.db");
    int fds[2], status, got = 0;
    char msg[512] = {0};
    uint32_t id;
    pid_t child;
    ssize_t n;

    store_close(open_ckpt(path, 8, 0));
    CHECK(pipe(fds) == 0);
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        struct rlimit rl = {256 * 1024, 256 * 1024};
        struct store *st = NULL;
        struct store_opts opts = {0};
        struct err err;
        uint8_t h[HASH_LEN];
        uint32_t i;

        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN); /* the thread blocks it; a blocked SIGXFSZ stays pending */
        CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
        opts.wal_thread = 1;
        opts.wal_threshold_frames = 8;
        if (store_open(path, &opts, &st, &err) < 0) {
            dprintf(fds[1], "open %d %s", err.code, err.msg);
            _exit(0);
        }
        for (i = 0; i < 1000; i++) {
            static uint8_t data[16384];
            tdb_fill_random(data, sizeof(data), i);
            if (store_blob_put(st, data, sizeof(data), h, &err) < 0) {
                dprintf(fds[1], "put %d %s", err.code, err.msg);
                break;
            }
            CHECK(write(fds[1], &i, sizeof(i)) == sizeof(i));
        }
        store_close(st);
        _exit(i < 1000 ? 0 : 2);
    }
    close(fds[1]);
    while ((n = read(fds[0], &id, sizeof(id))) == sizeof(id) && (int)id == got) {
        got++;
    }
    CHECK(n > 0);
    memcpy(msg, &id, (size_t)n);
    n += read(fds[0], msg + n, sizeof(msg) - 1 - (size_t)n);
    msg[n] = '\0';
    CHECK(waitpid(child, &status, 0) == child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    fprintf(stderr, "    disk full after %d commits: %s\n", got, msg);
    CHECK(got > 0);
    CHECK_MSG(strncmp(msg, "put 9 ", 6) == 0 || strncmp(msg, "put 6 ", 6) == 0, "%s", msg);
    CHECK_MSG(strstr(msg, "full.db") != NULL, "%s", msg);
    check_integrity(path, got);
}

/* ---- allocation failures -------------------------------------------------------------- */

/* SQLite's allocator routed through mem_alloc, so mem_fail_after reaches both
 * connections: the main one and the checkpointer's. */
/* Open with the thread, two commits each waking it (the main thread waits while the
 * thread checkpoints, so the allocation count stays in one thread at a time), close. */
static int
scenario(const char *path, struct err *err)
{
    static uint8_t data[16384];
    struct store_opts opts = {0};
    struct store *st = NULL;
    uint8_t h[HASH_LEN];
    int rc = -1;

    opts.wal_thread = 1;
    opts.wal_threshold_frames = 2;
    opts.synchronous_normal = 1;
    if (store_open(path, &opts, &st, err) < 0) {
        goto out;
    }
    tdb_fill_random(data, sizeof(data), 1);
    if (store_blob_put(st, data, sizeof(data), h, err) < 0) {
        goto out;
    }
    store_wal_wait(st);
    tdb_fill_random(data, sizeof(data), 2);
    if (store_blob_put(st, data, sizeof(data), h, err) < 0) {
        goto out;
    }
    store_wal_wait(st);
    rc = 0;
out:
    store_close(st);
    return rc;
}

/* Copies a file (the migrated template) so each step starts from the same bytes. */
static void
copy_file(const char *from, const char *to)
{
    char b[65536];
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ssize_t n;

    CHECK(in >= 0 && out >= 0);
    while ((n = read(in, b, sizeof(b))) > 0) {
        CHECK(write(out, b, (size_t)n) == n);
    }
    CHECK(n == 0);
    close(in);
    close(out);
}

struct sweep {
    char template[8192], path[8192];
};

static int
sweep_run(void *ctx, struct err *err)
{
    return scenario(((struct sweep *)ctx)->path, err);
}

static void
sweep_reset(void *ctx)
{
    struct sweep *sw = ctx;

    test_rm_db(sw->path);
    copy_file(sw->template, sw->path);
}

static void
sweep_after(void *ctx, long n)
{
    struct sweep *sw = ctx;
    struct store *st = NULL;
    struct err err;

    if (access(sw->path, F_OK) == 0 && store_open(sw->path, NULL, &st, &err) == 0) {
        int ok = 0;
        CHECK_OK(store_check(st, &ok, &err), &err);
        CHECK_MSG(ok, "after failure %ld: %s", n, err.msg);
        store_close(st);
    }
}

TEST(allocation_failure_sweep_with_thread)
{
    static struct sweep s;
    struct test_sweep sw = {sweep_run, sweep_reset, sweep_after, &s, 300, 3, 20000, 51};
    long clean_at = -1;
    int failures;

    CHECK_FMT(s.template, sizeof(s.template), "%s", test_path("template.db"));
    CHECK_FMT(s.path, sizeof(s.path), "%s", test_path("oom.db"));
    tdb_route_sqlite_alloc();
    /* The schema is made once: the sweep is about the thread's connection and the
     * commits and close around it, not the migrations test_store already sweeps. */
    store_close(open_ckpt(s.template, 0, 0));
    failures = test_alloc_sweep(&sw, &clean_at);
    fprintf(stderr, "    %d injected failures, all ERR_NOMEM; clean from step %ld\n", failures,
            clean_at);
}

TESTS(thread_checkpoints_off_the_commit, thread_off_keeps_sqlite_autocheckpoint,
      cap_falls_back_to_the_committing_call_and_logs_once,
      close_with_thread_running_truncates_the_wal, sigkill_mid_checkpoint_loses_nothing_committed,
      disk_full_with_thread_is_a_clear_error_and_keeps_commits,
      allocation_failure_sweep_with_thread)
