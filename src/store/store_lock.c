/*
 * store_lock.c - waiting for the write lock off the caller's thread, and checking that
 * the file written is still the one that was opened.
 *
 * The waiter. drun-mcp runs every tool call on one event-loop thread. SQLite waits for a
 * lock another process holds by sleeping in its busy handler, on the calling thread: with
 * `sqlite3 drun.db 'BEGIN EXCLUSIVE;' ...` running, that froze every session of the
 * daemon, pings included, for the whole busy timeout. So the loop's connection runs its
 * BEGINs in nowait mode (busy timeout 0 for that one statement): a BEGIN that would wait
 * fails at once and sets would_block. The caller then asks this file's thread, which has
 * its own connection to the same file (SQLite connections are used by one thread each;
 * this one is never touched by the loop), to wait: it runs BEGIN IMMEDIATE with the busy
 * timeout in slices of at most 100 ms (so store_lock_stop is prompt), and ROLLBACK at once
 * when it got the lock. Either way it records the outcome and calls the notify function
 * (the layer above turns it into a uv_async wake-up); the loop then tries its call again
 * from the start. Another writer may take the lock between the thread's ROLLBACK and the
 * loop's retry: the retry then would block again and waits again, against the same
 * deadline, so a call still fails only once, after the busy timeout.
 *
 * The identity. A daemon keeps its connection for days; if someone deletes or replaces
 * the DB file (or its -wal) meanwhile, SQLite keeps writing into the unlinked inode and
 * every acknowledged checkpoint is lost when the process ends. store_ident_init records
 * the device and inode of both files at open and keeps its own read-only fd of the DB;
 * store_ident_check (run before every BEGIN and COMMIT) compares fstat of that fd (link
 * count, identity) with stat of the two paths. About 3 us per check (three syscalls);
 * see docs/architecture.md. The fd is closed only after the connection (closing any fd of
 * a file drops the process's POSIX locks on it).
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "util/mem.h"

#define SLICE_MS 100 /* the longest the thread sleeps in SQLite before checking stop */

struct store_lockwait {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;
    sqlite3 *db;
    pid_t owner;
    store_lock_notify_fn notify;
    void *notify_arg;
    int started;
    int stop;
    int want;       /* an attempt was asked for and has not ended */
    int timeout_ms; /* of that attempt */
    int result;     /* -1 none, 0 held, 1 free */
};

/* ---- nowait ------------------------------------------------------------------------ */

int
store_set_nowait(struct store *st, int on)
{
    int was = st->nowait;

    st->nowait = on != 0;
    return was;
}

int
store_would_block(const struct store *st)
{
    return st->would_block;
}

void
store_clear_would_block(struct store *st)
{
    st->would_block = 0;
}

int
store_busy_timeout_ms(const struct store *st)
{
    return st->busy_timeout_ms;
}

/* ---- the waiter thread ------------------------------------------------------------- */

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One attempt: 1 when the lock was free within timeout_ms, 0 when not (or stop). */
static int
attempt(struct store_lockwait *w, int timeout_ms)
{
    int64_t end = mono_ms() + timeout_ms;

    for (;;) {
        int64_t left = end - mono_ms();
        int rc, stop;

        pthread_mutex_lock(&w->mu);
        stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop) {
            return 0;
        }
        sqlite3_busy_timeout(w->db, left <= 0 ? 0 : left > SLICE_MS ? SLICE_MS : (int)left);
        rc = sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
            return 1;
        }
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) {
            /* Not a lock: let the caller's own BEGIN meet the error and report it. */
            return 1;
        }
        if (left <= 0) {
            return 0;
        }
    }
}

static void *
waiter(void *arg)
{
    struct store_lockwait *w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        int timeout, got;

        while (!w->stop && !w->want) {
            pthread_cond_wait(&w->work, &w->mu);
        }
        if (w->stop) {
            break;
        }
        timeout = w->timeout_ms;
        pthread_mutex_unlock(&w->mu);
        got = attempt(w, timeout);
        pthread_mutex_lock(&w->mu);
        if (w->stop) {
            break;
        }
        w->want = 0;
        w->result = got;
        w->notify(w->notify_arg);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int
store_lock_start(struct store *st, store_lock_notify_fn notify, void *arg, struct err *err)
{
    struct store_lockwait *w;
    sigset_t all, old;
    int rc;

    if (st->lw != NULL) {
        return 0;
    }
    if (st->read_only) {
        return err_set(err, ERR_DENIED, "database '%s' is open read-only", st->path);
    }
    w = mem_calloc(1, sizeof(*w));
    if (w == NULL) {
        return err_set(err, ERR_NOMEM, "cannot start the lock waiter: out of memory");
    }
    w->owner = getpid();
    w->notify = notify;
    w->notify_arg = arg;
    w->result = -1;
    rc = sqlite3_open_v2(st->path, &w->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK) {
        err_set(err, ERR_DB, "cannot open the lock waiter's connection to '%s': %s", st->path,
                w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc));
        sqlite3_close(w->db);
        mem_free(w);
        return -1;
    }
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        sqlite3_close(w->db);
        mem_free(w);
        return err_set(err, ERR_NOMEM, "cannot start the lock waiter: out of memory");
    }
    if (pthread_cond_init(&w->work, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        sqlite3_close(w->db);
        mem_free(w);
        return err_set(err, ERR_NOMEM, "cannot start the lock waiter: out of memory");
    }
    /* The thread inherits this mask: every signal stays with the loop thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, waiter, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&w->work);
        pthread_mutex_destroy(&w->mu);
        sqlite3_close(w->db);
        mem_free(w);
        return err_set(err, ERR_IO, "cannot start the lock waiter thread: %s", strerror(rc));
    }
    w->started = 1;
    st->lw = w;
    return 0;
}

void
store_lock_request(struct store *st, int timeout_ms)
{
    struct store_lockwait *w = st->lw;

    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    if (!w->want) {
        w->want = 1;
        w->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
        pthread_cond_signal(&w->work);
    }
    pthread_mutex_unlock(&w->mu);
}

int
store_lock_result(struct store *st)
{
    struct store_lockwait *w = st->lw;
    int r;

    if (w == NULL) {
        return -1;
    }
    pthread_mutex_lock(&w->mu);
    r = w->result;
    w->result = -1;
    pthread_mutex_unlock(&w->mu);
    return r;
}

void
store_lock_stop(struct store *st)
{
    struct store_lockwait *w = st != NULL ? st->lw : NULL;

    if (w == NULL) {
        return;
    }
    st->lw = NULL;
    if (w->owner != getpid()) {
        return; /* a forked child: the thread is the parent's */
    }
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->mu);
    sqlite3_close(w->db);
    mem_free(w);
}

/* ---- the file's identity ------------------------------------------------------------ */

/* The DB's path as SQLite resolved it at open (absolute), so a relative --db still
 * names the same file if the working directory changes; st->path otherwise. */
static const char *
db_path(const struct store *st)
{
    const char *p = st->db != NULL ? sqlite3_db_filename(st->db, "main") : NULL;

    return p != NULL && *p != '\0' ? p : st->path;
}

static void
wal_path(const struct store *st, char *out, size_t size)
{
    snprintf(out, size, "%s-wal", db_path(st));
}

void
store_ident_init(struct store *st)
{
    struct stat sb;
    char wal[4200];

    st->ident_fd = -1;
    if (st->read_only) {
        return;
    }
    st->ident_fd = open(db_path(st), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (st->ident_fd < 0 || fstat(st->ident_fd, &sb) < 0) {
        if (st->ident_fd >= 0) {
            close(st->ident_fd);
        }
        st->ident_fd = -1;
        return;
    }
    st->db_dev = sb.st_dev;
    st->db_ino = sb.st_ino;
    wal_path(st, wal, sizeof(wal));
    if (stat(wal, &sb) == 0) {
        st->wal_dev = sb.st_dev;
        st->wal_ino = sb.st_ino;
        st->wal_known = 1;
    }
}

static int
go_stale(struct store *st, struct err *err, const char *why)
{
    snprintf(st->stale_msg, sizeof(st->stale_msg), "%s", why);
    st->stale = 1;
    log_error("database '%s': %s; every write is refused from now on so that no work is "
              "acknowledged into a file no one will open again; restart drun-mcp",
              st->path, st->stale_msg);
    return err_set(err, ERR_STALE,
                   "database '%s': %s; nothing was written; restart drun-mcp on the right "
                   "file (or put the file back) and retry",
                   st->path, st->stale_msg);
}

int
store_ident_check(struct store *st, struct err *err)
{
    struct stat fd_sb, path_sb;
    char wal[4200];

    if (st->stale) {
        return err_set(err, ERR_STALE,
                       "database '%s': %s; nothing was written; restart drun-mcp on the right "
                       "file (or put the file back) and retry",
                       st->path, st->stale_msg);
    }
    if (st->ident_fd < 0) {
        return 0;
    }
    if (fstat(st->ident_fd, &fd_sb) < 0) {
        return 0; /* cannot tell: let SQLite's own checks speak */
    }
    /* The path first, so the message says which of the two happened. */
    if (stat(db_path(st), &path_sb) < 0) {
        return go_stale(st, err,
                        errno == ENOENT ? "the file was deleted (removed from its path)"
                                        : "the file's path cannot be checked");
    }
    if (path_sb.st_dev != st->db_dev || path_sb.st_ino != st->db_ino) {
        return go_stale(st, err,
                        "the file at the path was replaced by another file (a different device "
                        "or inode)");
    }
    if (fd_sb.st_nlink == 0 || fd_sb.st_dev != st->db_dev || fd_sb.st_ino != st->db_ino) {
        return go_stale(st, err, "the open file was deleted (its link count is 0)");
    }
    wal_path(st, wal, sizeof(wal));
    if (stat(wal, &path_sb) == 0) {
        if (!st->wal_known) {
            st->wal_dev = path_sb.st_dev;
            st->wal_ino = path_sb.st_ino;
            st->wal_known = 1;
        } else if (path_sb.st_dev != st->wal_dev || path_sb.st_ino != st->wal_ino) {
            return go_stale(st, err, "its -wal file was replaced by another file");
        }
    } else if (st->wal_known && errno == ENOENT) {
        return go_stale(st, err, "its -wal file was deleted");
    }
    return 0;
}

int
store_is_stale(const struct store *st, const char **why)
{
    if (why != NULL) {
        *why = st->stale ? st->stale_msg : NULL;
    }
    return st->stale;
}

void
store_lock_close(struct store *st)
{
    store_lock_stop(st);
}
