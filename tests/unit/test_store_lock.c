/*
 * test_store_lock.c - the store's write lock seen from an event loop: nowait BEGINs, the
 * waiter thread, the queue of read-only calls' rows, and the refusal to write into a DB
 * file that was deleted or replaced.
 *
 * Another connection (a plain sqlite3 handle, as a sqlite3 shell or another drun would
 * be) holds the write lock with BEGIN IMMEDIATE; the waiter's notify writes to a pipe
 * the test reads, so nothing waits on a sleep.
 */
#include "test.h"
#include "test_db.h"

#include <sqlite3.h>
#include <time.h>

#include "store/store.h"
#include "store/store_int.h"
#include "util/mem.h"
#include "util/timeutil.h"

static int notify_pipe[2];

static void
notify(void *arg)
{
    (void)arg;
    CHECK(write(notify_pipe[1], "n", 1) == 1);
}

static void
wait_notify(void)
{
    char c;
    CHECK(read(notify_pipe[0], &c, 1) == 1);
}

/* A plain connection holding the write lock of path. */
static sqlite3 *
hold_lock(const char *path)
{
    sqlite3 *db = NULL;

    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
    return db;
}

static void
release_lock(sqlite3 *db)
{
    CHECK(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
}

static void
audit_row(struct store_audit *row, const char *tool)
{
    memset(row, 0, sizeof(*row));
    row->pid = getpid();
    row->kind = "call";
    row->tool = tool;
    row->summary = tool;
    row->outcome = "ok";
    row->checkpoint_id = -1;
    row->args = "{\"path\":\"a.txt\"}";
    row->args_len = strlen(row->args);
}

TEST(nowait_begin_fails_at_once_and_the_waiter_sees_the_lock_go)
{
    const char *path = test_path("lock.db");
    struct store_opts opts = {0};
    struct store *st;
    struct err err;
    sqlite3 *holder;
    uint8_t h[HASH_LEN];

    opts.busy_timeout_ms = 600000; /* a blocking BEGIN would hang the test */
    st = tdb_open(path, &opts);
    CHECK(pipe(notify_pipe) == 0);
    CHECK_OK(store_lock_start(st, notify, NULL, &err), &err);
    holder = hold_lock(path);

    store_set_nowait(st, 1);
    CHECK(store_blob_put(st, "x", 1, h, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    CHECK(store_would_block(st));
    CHECK_MSG(strstr(err.msg, "write lock") != NULL, "%s", err.msg);
    store_clear_would_block(st);

    /* An attempt that ends while the lock is still held says so. */
    CHECK_EQ_INT(store_lock_result(st), -1);
    store_lock_request(st, 50);
    wait_notify();
    CHECK_EQ_INT(store_lock_result(st), 0);

    /* A long attempt is woken by the release. */
    store_lock_request(st, 600000);
    release_lock(holder);
    wait_notify();
    CHECK_EQ_INT(store_lock_result(st), 1);
    CHECK_OK(store_blob_put(st, "x", 1, h, &err), &err);
    CHECK(!store_would_block(st));
    store_close(st); /* stops the thread */
}

TEST(rows_of_read_only_calls_queue_under_the_lock_and_chain_in_order)
{
    const char *path = test_path("queue.db");
    struct store *st = tdb_open(path, NULL);
    struct store *other = tdb_open(path, NULL);
    struct store_audit row;
    struct err err;
    sqlite3 *holder;
    int ok = 0;
    int64_t bad = 0, rows = 0;
    char tool[32];
    struct store_session sess;
    struct store_session_new req = {0};
    uint8_t empty[HASH_LEN];

    CHECK_OK(store_blob_put(st, "", 0, empty, &err), &err);
    req.parent_checkpoint = -1;
    req.manifest_hash = empty;
    req.owner_pid = getpid();
    req.client = "test-client";
    req.tool = "session_create";
    CHECK_OK(store_session_create(st, &req, &sess, &err), &err);

    audit_row(&row, "first");
    CHECK_OK(store_audit_append_soon(st, &row, &err), &err);
    CHECK_EQ_INT((int)store_queue_len(st), 0); /* the lock was free: written at once */

    holder = hold_lock(path);
    for (int i = 0; i < 3; i++) {
        snprintf(tool, sizeof(tool), "queued%d", i);
        audit_row(&row, tool);
        CHECK_OK(store_audit_append_soon(st, &row, &err), &err);
    }
    CHECK_OK(store_step_append_soon(st, sess.id, 0, "session_read_file", "d", &err), &err);
    /* A row the store will refuse (no such session) must not cost the others. */
    CHECK_OK(store_step_append_soon(st, "abcdef01", 0, "session_read_file", "d", &err), &err);
    CHECK_EQ_INT((int)store_queue_len(st), 5);
    CHECK(!store_would_block(st)); /* a queued row is not a failed call */
    release_lock(holder);

    /* Another process writes its row first; the queue follows it in the chain. */
    audit_row(&row, "other");
    CHECK_OK(store_audit_append(other, &row, &err), &err);
    store_set_nowait(st, 1);
    CHECK(store_queue_flush(st, &err) < 0);
    CHECK_MSG(strstr(err.msg, "1 queued rows could not be written") != NULL, "%s", err.msg);
    CHECK_EQ_INT((int)store_queue_len(st), 0);
    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK_MSG(ok && rows == 5, "verify ok %d rows %lld bad %lld", ok, (long long)rows,
              (long long)bad);
    CHECK(tdb_int(path, "SELECT count(*) FROM audit WHERE tool LIKE 'queued%'") == 3);
    CHECK(tdb_int(path, "SELECT count(*) FROM checkpoint_steps") == 1);
    store_session_release(&sess);
    store_close(other);
    store_close(st);
}

TEST(the_queue_is_bounded_and_store_close_writes_what_is_left)
{
    const char *path = test_path("cap.db");
    struct store *st = tdb_open(path, NULL);
    struct store_audit row;
    struct err err;
    sqlite3 *holder = hold_lock(path);

    audit_row(&row, "read");
    for (int i = 0; i < STORE_QUEUE_ROWS_MAX; i++) {
        CHECK_OK(store_audit_append_soon(st, &row, &err), &err);
    }
    CHECK(store_queue_full(st));
    CHECK(store_audit_append_soon(st, &row, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    CHECK_MSG(strstr(err.msg, "not recorded") != NULL, "%s", err.msg);
    release_lock(holder);
    store_close(st);
    CHECK(tdb_int(path, "SELECT count(*) FROM audit") == STORE_QUEUE_ROWS_MAX);
}

static void
check_stale(struct store *st, const char *want)
{
    uint8_t h[HASH_LEN];
    struct err err;
    const char *why = NULL;

    for (int i = 0; i < 2; i++) { /* every write, not only the first */
        CHECK(store_blob_put(st, "after", 5, h, &err) < 0);
        CHECK_EQ_INT(err.code, ERR_STALE);
        CHECK_MSG(strstr(err.msg, want) != NULL && strstr(err.msg, "restart") != NULL, "%s",
                  err.msg);
    }
    CHECK(store_begin(st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_STALE);
    CHECK(store_is_stale(st, &why) && why != NULL);
}

TEST(a_deleted_db_refuses_every_write)
{
    const char *path = test_path("gone.db");
    struct store *st = tdb_open(path, NULL);
    uint8_t h[HASH_LEN];
    struct err err;

    CHECK_OK(store_blob_put(st, "before", 6, h, &err), &err);
    CHECK(unlink(path) == 0);
    check_stale(st, "deleted");
    store_close(st);
}

TEST(a_replaced_db_refuses_every_write)
{
    const char *path = test_path("main.db");
    char other[4200];
    struct store *st = tdb_open(path, NULL);
    struct store *o;
    uint8_t h[HASH_LEN];
    struct err err;

    snprintf(other, sizeof(other), "%s/other.db", test_tmpdir());
    o = tdb_open(other, NULL);
    store_close(o);
    CHECK_OK(store_blob_put(st, "before", 6, h, &err), &err);
    CHECK(rename(other, path) == 0);
    check_stale(st, "replaced");
    store_close(st);
}

TEST(a_deleted_wal_refuses_every_write)
{
    const char *path = test_path("wal.db");
    char wal[4200];
    struct store *st = tdb_open(path, NULL);
    uint8_t h[HASH_LEN];
    struct err err;

    CHECK_OK(store_blob_put(st, "before", 6, h, &err), &err);
    CHECK_FMT(wal, sizeof(wal), "%s-wal", path);
    CHECK(unlink(wal) == 0);
    check_stale(st, "-wal");
    store_close(st);
}

TEST(a_relative_path_survives_a_change_of_directory)
{
    struct store *st;
    uint8_t h[HASH_LEN];
    struct err err;

    CHECK(chdir(test_tmpdir()) == 0);
    st = tdb_open("rel.db", NULL);
    CHECK(chdir("/") == 0);
    CHECK_OK(store_blob_put(st, "still the same file", 19, h, &err), &err);
    store_close(st);
}

/* Not an assertion: prints what the identity check costs per write transaction. */
TEST(identity_check_cost)
{
    const char *path = test_path("cost.db");
    struct store *st = tdb_open(path, NULL);
    struct err err;
    int64_t t0, t1;
    int n = 20000;

    t0 = time_mono_us();
    for (int i = 0; i < n; i++) {
        CHECK_OK(store_ident_check(st, &err), &err);
    }
    t1 = time_mono_us();
    fprintf(stderr, "    identity check: %.2f us each (%d checks)\n", (double)(t1 - t0) / n, n);
    store_close(st);
}

TESTS(nowait_begin_fails_at_once_and_the_waiter_sees_the_lock_go,
      rows_of_read_only_calls_queue_under_the_lock_and_chain_in_order,
      the_queue_is_bounded_and_store_close_writes_what_is_left, a_deleted_db_refuses_every_write,
      a_replaced_db_refuses_every_write, a_deleted_wal_refuses_every_write,
      a_relative_path_survives_a_change_of_directory, identity_check_cost)
