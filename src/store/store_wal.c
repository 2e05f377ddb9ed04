/*
 * store_wal.c - checkpointing the WAL on a background thread instead of on commits.
 *
 * Why. SQLite's automatic checkpoint runs inside the call that commits once the WAL
 * holds 1000 frames: a 100 MiB fetch paid ~350 ms of its ~650 ms commit copying pages
 * back into the database file, and every write_files or session_bash commit paid the
 * same in smaller amounts. With the thread on (store_opts.wal_thread, drun-mcp only)
 * the main connection's automatic checkpoint is off and a wal hook watches the frame
 * count after each commit; past the threshold it sets a flag and signals a condition
 * variable. A thread with its own connection to the same file (SQLite connections are
 * never shared between threads here) wakes and runs a PASSIVE checkpoint, which copies
 * what it can without waiting for readers or writers, so the committing call only pays
 * a mutex lock and a signal.
 *
 * The cap. PASSIVE cannot copy past the snapshot of a reader that is still open, so a
 * long reader (another drun-mcp, a sqlite3 shell) can keep the WAL growing. When a
 * commit finds the WAL past the cap (64 MiB by default), already past it at the
 * previous commit, grown since (so it never restarted), and the thread idle, the
 * committing call runs the checkpoint itself as SQLite would have, and the first time
 * says so in the log. One big commit alone (a 100 MiB fetch) never triggers it: that
 * is what the thread is for.
 *
 * Invariants: the thread only ever touches its own connection and the counters under
 * `mu`; the hook runs on the thread that owns the main connection and never waits for
 * the checkpoint. The thread is created with every signal blocked, so signals still go
 * to the loop thread, and it holds no lock a forked child could need: bwrap's child
 * runs only async-signal-safe calls before exec. store_close stops and joins the
 * thread before its final checkpoint, so exactly one connection checkpoints at close.
 */
#include "store/store_int.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/mem.h"

#define WAL_THRESHOLD_DEFAULT 1000 /* frames: SQLite's own autocheckpoint default */
#define WAL_FRAME_HEADER      24

struct store_wal {
    sqlite3 *db; /* the checkpointer's own connection */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work; /* the thread waits here for pending or stop */
    pthread_cond_t idle; /* store_wal_wait waits here for !pending && !running */
    pid_t owner;         /* the process that started the thread */
    int sync_ready;      /* mu and the conds are initialised */
    int started;         /* the thread is running */
    /* under mu */
    int pending, running, stop;
    int64_t thread_runs, thread_busy, thread_errors;
    int last_log, last_ckpt;
    /* main thread only */
    int threshold;
    int64_t cap_bytes;
    int64_t frame_bytes;
    int last_frames;
    int warned;
    int64_t commits, signals, inline_runs;
};

static void *
checkpointer(void *arg)
{
    struct store_wal *w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        int rc, nlog = -1, nckpt = -1;

        while (!w->pending && !w->stop) {
            pthread_cond_wait(&w->work, &w->mu);
        }
        if (w->stop) {
            break; /* store_close checkpoints once more itself */
        }
        w->pending = 0;
        w->running = 1;
        pthread_mutex_unlock(&w->mu);
        rc = sqlite3_wal_checkpoint_v2(w->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &nlog, &nckpt);
        pthread_mutex_lock(&w->mu);
        w->running = 0;
        w->thread_runs++;
        if ((rc & 0xff) == SQLITE_BUSY) {
            w->thread_busy++; /* another checkpointer holds the lock: it does the work */
        } else if (rc != SQLITE_OK) {
            w->thread_errors++; /* the next commit signals again; the cap backs it up */
        }
        w->last_log = nlog;
        w->last_ckpt = nckpt;
        if (!w->pending) {
            pthread_cond_broadcast(&w->idle);
        }
    }
    w->running = 0;
    pthread_cond_broadcast(&w->idle);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Runs on the committing call, after the write lock is released. */
static int
on_commit(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct store_wal *w = arg;
    int prev = w->last_frames;
    int busy;

    w->last_frames = frames;
    w->commits++;
    if (frames < w->threshold) {
        return SQLITE_OK;
    }
    pthread_mutex_lock(&w->mu);
    busy = w->pending || w->running;
    if (!busy && (int64_t)frames * w->frame_bytes > w->cap_bytes &&
        (int64_t)prev * w->frame_bytes > w->cap_bytes && frames > prev) {
        pthread_mutex_unlock(&w->mu);
        /* The thread had its chance since the last commit and the WAL still grew: a
         * reader pins it, or the thread keeps failing. Do what SQLite would have. */
        if (!w->warned) {
            w->warned = 1;
            log_warn("the WAL of '%s' is %.1f MiB, past its cap of %.1f MiB: a reader may "
                     "hold an old snapshot; checkpointing on the committing call until it ends",
                     sqlite3_db_filename(db, name),
                     (double)frames * (double)w->frame_bytes / (1 << 20),
                     (double)w->cap_bytes / (1 << 20));
        }
        w->inline_runs++;
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        return SQLITE_OK;
    }
    w->pending = 1;
    w->signals++;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    return SQLITE_OK;
}

int
store_wal_start(struct store *st, const struct store_opts *opts, struct err *err)
{
    struct store_wal *w;
    sigset_t all, old;
    int64_t page = 0;
    int rc;

    if (st->read_only || !opts->wal_thread) {
        return 0;
    }
    if (opts->wal_threshold_frames < 0 || opts->wal_cap_bytes < 0) {
        return err_set(err, ERR_INVAL, "the WAL threshold and cap must not be negative");
    }
    if (!sqlite3_threadsafe()) {
        return 0; /* a single-threaded SQLite: keep the automatic checkpoint */
    }
    w = mem_calloc(1, sizeof(*w));
    if (w == NULL) {
        return err_set(err, ERR_NOMEM, "cannot start the checkpointer: out of memory");
    }
    st->wal = w;
    w->owner = getpid();
    w->threshold =
        opts->wal_threshold_frames > 0 ? opts->wal_threshold_frames : WAL_THRESHOLD_DEFAULT;
    w->cap_bytes = opts->wal_cap_bytes > 0 ? opts->wal_cap_bytes : STORE_WAL_CAP_DEFAULT;
    {
        sqlite3_stmt *s = NULL;
        rc = sqlite3_prepare_v2(st->db, "PRAGMA page_size", -1, &s, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
            page = sqlite3_column_int64(s, 0);
            rc = SQLITE_OK;
        }
        sqlite3_finalize(s);
        if (rc != SQLITE_OK) {
            return store_sqlerr(st, rc, "read the page size", err);
        }
    }
    w->frame_bytes = (page > 0 ? page : 4096) + WAL_FRAME_HEADER;

    rc = sqlite3_open_v2(st->path, &w->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_extended_result_codes(w->db, 1);
        sqlite3_busy_timeout(w->db, st->busy_timeout_ms);
        /* The checkpoint syncs as the main connection would; a first read opens the WAL
         * index, so the first checkpoint is not a no-op. */
        rc = sqlite3_exec(w->db,
                          opts->synchronous_normal
                              ? "PRAGMA synchronous = NORMAL; SELECT count(*) FROM sqlite_master"
                              : "PRAGMA synchronous = FULL; SELECT count(*) FROM sqlite_master",
                          NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        const char *msg = w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc);
        if (w->db == NULL || (rc & 0xff) == SQLITE_NOMEM || rc == SQLITE_IOERR_NOMEM) {
            return err_set(err, ERR_NOMEM,
                           "cannot open the checkpointer's connection: out of memory");
        }
        return err_set(err, ERR_DB, "cannot open the checkpointer's connection to '%s': %s",
                       st->path, msg);
    }
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        return err_set(err, ERR_NOMEM, "cannot start the checkpointer: out of memory");
    }
    if (pthread_cond_init(&w->work, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        return err_set(err, ERR_NOMEM, "cannot start the checkpointer: out of memory");
    }
    if (pthread_cond_init(&w->idle, NULL) != 0) {
        pthread_cond_destroy(&w->work);
        pthread_mutex_destroy(&w->mu);
        return err_set(err, ERR_NOMEM, "cannot start the checkpointer: out of memory");
    }
    w->sync_ready = 1;
    /* The thread inherits this mask: every signal stays with the loop thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, checkpointer, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        return err_set(err, ERR_IO, "cannot start the checkpointer thread: %s", strerror(rc));
    }
    w->started = 1;
    sqlite3_wal_autocheckpoint(st->db, 0);
    sqlite3_wal_hook(st->db, on_commit, w);
    return 0;
}

void
store_wal_stop(struct store *st)
{
    struct store_wal *w = st->wal;
    int nlog = -1, nckpt = -1;

    if (w == NULL) {
        return;
    }
    st->wal = NULL;
    if (st->db != NULL) {
        sqlite3_wal_hook(st->db, NULL, NULL);
    }
    if (w->owner != getpid()) {
        /* A forked child: the thread does not exist here and its lock may be held
         * forever. Leave everything as it is; the parent owns it. */
        return;
    }
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->work);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    if (w->sync_ready) {
        pthread_cond_destroy(&w->idle);
        pthread_cond_destroy(&w->work);
        pthread_mutex_destroy(&w->mu);
    }
    sqlite3_close(w->db);
    /* The final checkpoint, on the closing thread. TRUNCATE only when PASSIVE copied
     * everything, and without waiting: another process may be writing, and then its
     * own close checkpoints. */
    if (w->started && st->db != NULL &&
        sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &nlog, &nckpt) ==
            SQLITE_OK &&
        nlog >= 0 && nlog == nckpt) {
        sqlite3_busy_timeout(st->db, 0);
        sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    }
    mem_free(w);
}

void
store_wal_wait(struct store *st)
{
    struct store_wal *w = st->wal;

    if (w == NULL || !w->started) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    while (w->pending || w->running) {
        pthread_cond_wait(&w->idle, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

void
store_wal_stats(struct store *st, struct store_wal_stats *out)
{
    struct store_wal *w = st->wal;

    memset(out, 0, sizeof(*out));
    if (w == NULL || !w->started) {
        return;
    }
    out->thread = 1;
    out->commits = w->commits;
    out->signals = w->signals;
    out->inline_checkpoints = w->inline_runs;
    out->last_frames = w->last_frames;
    out->cap_warned = w->warned;
    pthread_mutex_lock(&w->mu);
    out->thread_checkpoints = w->thread_runs;
    out->thread_busy = w->thread_busy;
    out->thread_errors = w->thread_errors;
    out->last_log = w->last_log;
    out->last_checkpointed = w->last_ckpt;
    pthread_mutex_unlock(&w->mu);
}
