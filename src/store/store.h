/*
 * store.h - everything drun keeps across processes, in one SQLite file.
 *
 * The store holds content-addressed blobs (SHA-256 named, zstd-compressed when that
 * saves space), sessions, their checkpoints and per-checkpoint change rows, steps and
 * chat records, snapshots, and the audit log with its hash chain. It knows nothing of
 * MCP, JSON-RPC, libuv, sandboxes or HTTP: callers above hand it plain values.
 *
 * Transactions. Every write runs inside a `BEGIN IMMEDIATE` transaction so that two
 * drun-mcp processes on one file never interleave half a checkpoint. A caller that
 * needs several writes to commit together (blobs + checkpoint + changes + audit row)
 * brackets them with store_begin()/store_commit(); a write function called outside
 * such a bracket opens and commits its own. On any error inside a bracket the caller
 * calls store_rollback() and nothing of it is kept.
 *
 * Threads. A `struct store` is one SQLite connection and is used from one thread at a
 * time. Open one per thread that needs one (they share the file safely). The store's
 * own threads (the WAL checkpointer, the lock waiter) each open their own connection.
 *
 * Ids. Session ids are 8 lower-case hex characters. Checkpoint ids are per session,
 * assigned in creation order (0, 1, 2, ...), and never reused or renumbered: squash
 * and drop mark rows instead of moving ids.
 *
 * Errors. Functions return 0 or -1 and fill `struct err`. ERR_BUSY means another
 * connection held the database past the busy timeout; ERR_CORRUPT means stored bytes
 * are damaged; ERR_NOTFOUND names what is missing; ERR_STALE means the DB file was
 * deleted or replaced under the open connection (store_is_stale). SQLite and zstd codes
 * never leak.
 */
#ifndef DRUN_STORE_H
#define DRUN_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"

struct store;
struct sqlite3;

#define STORE_SESSION_ID_LEN   8
#define STORE_BLOB_MAX_DEFAULT ((size_t)1 << 30) /* 1 GiB: the largest single blob */

/* Caps on caller strings; past one the call fails with ERR_TOOBIG and writes nothing. */
#define STORE_LABEL_MAX      256               /* session and checkpoint labels */
#define STORE_PATH_MAX       4096              /* change paths, overlay keys, host paths */
#define STORE_TEXT_MAX       ((size_t)1 << 20) /* commands, descriptions, chat, summaries */
#define STORE_AUDIT_TAIL_MAX 100000            /* rows store_audit_tail returns at most */

/* ---- opening ------------------------------------------------------------------ */

struct store_opts {
    int synchronous_normal;   /* 0: synchronous=FULL (default); 1: NORMAL */
    int busy_timeout_ms;      /* 0: the default, 5000 */
    int read_only;            /* 1: open without creating or migrating (drun-admin reads) */
    int no_migrate;           /* 1: refuse an out-of-date schema instead of migrating */
    int zstd_level;           /* 0: the default, 3 */
    size_t blob_max;          /* 0: STORE_BLOB_MAX_DEFAULT */
    int wal_thread;           /* 1: checkpoint on a background thread (drun-mcp), not on commits */
    int wal_threshold_frames; /* 0: 1000, SQLite's default; frames before the thread is woken */
    int64_t wal_cap_bytes;    /* 0: STORE_WAL_CAP_DEFAULT; past it commits checkpoint again */
};

/* Past this much WAL, still growing, a commit checkpoints itself again (see store_wal.c). */
#define STORE_WAL_CAP_DEFAULT ((int64_t)64 << 20)

/*
 * Opens (creating 0600 if absent) the drun DB at `path`, sets WAL mode, checks
 * application_id (a non-drun SQLite file is refused by name), refuses a DB from a
 * newer drun (naming both versions), and applies pending migrations, each in one
 * transaction. A damaged file is reported as ERR_CORRUPT, never repaired silently.
 * opts may be NULL for the defaults. On success *out is the caller's; free with
 * store_close().
 */
int store_open(const char *path, const struct store_opts *opts, struct store **out,
               struct err *err);

/* Closes the connection; NULL is a no-op. An open transaction is rolled back. With the
 * WAL thread on, stops it first, then checkpoints (TRUNCATE when nothing is pinned). */
void store_close(struct store *st);

/* What the WAL checkpointer has done; all zero when it is off (store_opts.wal_thread). */
struct store_wal_stats {
    int thread;                      /* 1: the background checkpointer runs */
    int64_t commits;                 /* commits the wal hook saw */
    int64_t signals;                 /* times a commit woke the thread */
    int64_t thread_checkpoints;      /* checkpoints the thread ran */
    int64_t thread_busy;             /* of those, how many found another checkpointer busy */
    int64_t thread_errors;           /* of those, how many failed otherwise */
    int64_t inline_checkpoints;      /* checkpoints run on a committing call (past the cap) */
    int last_frames;                 /* WAL frames after the last commit */
    int last_log, last_checkpointed; /* the thread's last checkpoint: frames, copied */
    int cap_warned;                  /* the cap warning was logged */
};

/* Fills *out; never fails. */
void store_wal_stats(struct store *st, struct store_wal_stats *out);

/* Waits until the checkpointer has nothing pending or running (for tests and benches);
 * returns at once when it is off. */
void store_wal_wait(struct store *st);

/* Returns the schema version this binary writes (the highest migration number). */
int store_schema_version(void);

/* Returns the path the store was opened with; borrowed. */
const char *store_path(const struct store *st);

/* Returns the schema version the file had when opened, before any migration (0: new). */
int store_version_at_open(const struct store *st);

/* ---- transactions --------------------------------------------------------------- */

/* BEGIN IMMEDIATE; ERR_BUSY after the busy timeout. Brackets do not nest. */
int store_begin(struct store *st, struct err *err);
int store_commit(struct store *st, struct err *err);
/* Rolls back the open bracket, if any. Never fails. */
void store_rollback(struct store *st);

/* ---- the write lock, off the caller's thread (store_lock.c) ------------------------ */

/*
 * An event loop must not sleep in SQLite's busy handler while another process holds the
 * write lock. With nowait on, a BEGIN that would have to wait fails at once with
 * ERR_BUSY and store_would_block() turns 1; the caller then asks the waiter thread
 * (which has its own connection) to wait for the lock, and tries again when told it
 * was free. Off (the default) a BEGIN waits up to the busy timeout as SQLite does.
 */
int store_set_nowait(struct store *st, int on); /* returns the previous setting */
/* 1 if a nowait BEGIN found the lock held since the last store_clear_would_block. */
int store_would_block(const struct store *st);
void store_clear_would_block(struct store *st);
/* The busy timeout in ms (store_opts.busy_timeout_ms or the default). */
int store_busy_timeout_ms(const struct store *st);

/* Called on the waiter thread when an attempt ends: keep it short and thread-safe
 * (uv_async_send). */
typedef void (*store_lock_notify_fn)(void *arg);
/*
 * Starts the waiter thread (its own connection to the same file) once; later calls are
 * no-ops. notify is called after every attempt store_lock_request asked for, until
 * store_lock_stop. Returns 0, or -1 (ERR_NOMEM, ERR_DB, ERR_IO).
 */
int store_lock_start(struct store *st, store_lock_notify_fn notify, void *arg, struct err *err);
/* Asks for one attempt: wait up to timeout_ms for the write lock to be free (the thread
 * takes it and lets it go at once). Ignored while an attempt is outstanding. */
void store_lock_request(struct store *st, int timeout_ms);
/* The last attempt's outcome, consumed: 1 the lock was free, 0 still held at its end,
 * -1 no outcome yet. */
int store_lock_result(struct store *st);
/* Stops and joins the thread; notify is never called afterwards. NULL-safe. */
void store_lock_stop(struct store *st);

/*
 * The file's identity. store_open records the device and inode of the DB and its -wal;
 * every BEGIN and COMMIT compares them (and the open file's link count) with the paths,
 * and once the DB was unlinked or replaced, or its -wal was, every write fails with
 * ERR_STALE: a commit into a file no one will open again would be acknowledged work
 * that is lost. Returns 1 once that happened; the message says what was seen.
 */
int store_is_stale(const struct store *st, const char **why);

/* ---- rows of read-only calls (store_queue.c) --------------------------------------- */

/*
 * A read-only call's audit row and history step need no write lock to answer. These
 * write the row now if the lock is free (first any rows still queued, in order, in one
 * transaction), else copy it into the queue that store_queue_flush writes later. Inside
 * a bracket they write into it. ERR_BUSY when the queue is full (STORE_QUEUE_ROWS_MAX
 * rows or STORE_QUEUE_BYTES_MAX bytes): the row is not kept.
 */
#define STORE_QUEUE_ROWS_MAX  1000
#define STORE_QUEUE_BYTES_MAX ((size_t)16 << 20)
struct store_audit;
int store_audit_append_soon(struct store *st, struct store_audit *row, struct err *err);
int store_step_append_soon(struct store *st, const char *session, int64_t checkpoint,
                           const char *tool, const char *description, struct err *err);
/* Rows waiting in the queue. */
size_t store_queue_len(const struct store *st);
/* 1 when the queue cannot take another row. */
int store_queue_full(const struct store *st);
/* Writes the queued rows in one transaction (honouring nowait: ERR_BUSY and
 * store_would_block when the lock is held); 0 when empty. */
int store_queue_flush(struct store *st, struct err *err);

/* ---- blobs ---------------------------------------------------------------------- */

/*
 * Stores `len` bytes and writes their SHA-256 into hash. Content already present is
 * not stored again. Compressed with zstd only when that makes it smaller. Past the
 * blob cap: ERR_TOOBIG.
 */
int store_blob_put(struct store *st, const void *data, size_t len, uint8_t hash[HASH_LEN],
                   struct err *err);

/*
 * Like store_blob_put, but when `base` names a stored blob with similar bytes (the
 * parent checkpoint's manifest) the new blob may be stored as a zstd delta against it,
 * which costs only what differs. Reads are unchanged. Chains are capped in depth.
 */
#define STORE_DELTA_DEPTH_MAX 16 /* the longest chain of deltas before a full copy */
int store_blob_put_delta(struct store *st, const void *data, size_t len,
                         const uint8_t base[HASH_LEN], uint8_t hash[HASH_LEN], struct err *err);

/*
 * Appends the blob's bytes to `out` (so the caller's buf max bounds it), after
 * checking the stored size and the SHA-256. A blob whose bytes do not match its hash
 * or size, or whose decompression would pass the stored size: ERR_CORRUPT. Missing:
 * ERR_NOTFOUND.
 */
int store_blob_get(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out,
                   struct err *err);

/* Sets *exists to 1 if the blob is stored (and *size, if non-NULL, to its size). */
int store_blob_has(struct store *st, const uint8_t hash[HASH_LEN], int *exists, int64_t *size,
                   struct err *err);

/*
 * Streaming blob writer, for content too big to hold in memory (session_fetch bodies):
 * open -> write* -> finish (or abort). Past STORE_BLOB_HEAD the bytes go to the writer's
 * own thread, which hashes them and zstd-compresses them (or, when a sample shows they do
 * not compress, keeps them raw) into an unlinked temporary file beside the database;
 * write copies into a bounded queue and waits only when it is full. finish inserts the row
 * (unless the hash is already stored, e.g. by store_bg below) and copies the frame in
 * with sqlite3_blob_write, in pieces. Memory stays near the compressor's (512 KiB window) whatever
 * the size. Content that fits in STORE_BLOB_HEAD is stored exactly as store_blob_put would. A
 * streamed blob is one zstd frame (codec 1) that declares its size, or raw bytes (codec
 * 0), so store_blob_get reads and verifies it as any other. Past the blob cap: ERR_TOOBIG;
 * a full disk: ERR_IO naming the temporary file (or the database error), with nothing stored.
 * finish and abort free the writer in every case.
 */
#define STORE_BLOB_CHUNK ((size_t)1 << 20)
/* Content up to this size is buffered and stored as store_blob_put would (raw when zstd
 * does not help); anything longer streams through a compressor with a 512 KiB window.
 * Peak memory of one writer: about 1.3 MiB (see docs/fetch.md). */
#define STORE_BLOB_HEAD ((size_t)128 << 10)
struct store_blob_writer;
int store_blob_writer_open(struct store *st, struct store_blob_writer **out, struct err *err);
int store_blob_writer_write(struct store_blob_writer *w, const void *data, size_t len,
                            struct err *err);
/* No more writes: ends the zstd frame, frees the compressor (the bytes stay in the
 * temporary file) and fixes the hash. Optional before finish; lets a caller learn the
 * hash (store_blob_writer_hash) and keep finished writers open cheaply until it stores
 * them inside its own transaction. */
int store_blob_writer_end(struct store_blob_writer *w, struct err *err);
/* The SHA-256 of an ended writer's bytes; ERR_INVAL before end. */
int store_blob_writer_hash(const struct store_blob_writer *w, uint8_t hash[HASH_LEN],
                           struct err *err);
/* Stores the blob; fills hash and (if non-NULL) *size. Frees w. */
int store_blob_writer_finish(struct store_blob_writer *w, uint8_t hash[HASH_LEN], int64_t *size,
                             struct err *err);
/* Drops everything written: no row, no temporary file. NULL is a no-op. */
void store_blob_writer_abort(struct store_blob_writer *w);

/*
 * For a caller on an event loop that must never wait for the writer's thread.
 * try_write is write, except that when the writer's slots cannot take all `len` bytes
 * now it takes none and returns 1 (0 when written, -1 on error): the caller pauses its
 * source and resumes when the notify function runs. set_notify names that function; it
 * is called on the writer's thread (under the writer's lock, so it must only signal,
 * e.g. uv_async_send) when a slot frees after a try_write returned 1, when the thread
 * fails, and when it is done (after store_bg); set_notify(w, NULL, NULL) returns only
 * once no call is under way, so the caller may then free what ud points at.
 */
int store_blob_writer_try_write(struct store_blob_writer *w, const void *data, size_t len,
                                struct err *err);
void store_blob_writer_set_notify(struct store_blob_writer *w, void (*fn)(void *ud), void *ud);
/*
 * No more writes, and store the blob's row now, on the writer's thread with a connection
 * of its own, in a short transaction of its own (content-addressed, so a row stored
 * ahead of the checkpoint that names it is harmless; gc removes it if none ever does).
 * Returns at once; store_blob_writer_busy says when the thread is done, and notify is
 * called then. end and finish still follow: finish, inside the checkpoint's transaction,
 * finds the row and copies nothing, or (gc removed it meanwhile, or the thread could not
 * store it) copies it from the temporary file as before. A blob of at most
 * STORE_BLOB_HEAD is not streamed: nothing happens here and busy is 0.
 */
int store_blob_writer_store_bg(struct store_blob_writer *w, struct err *err);
/* 1 while the writer's thread still works (draining, or storing after store_bg). */
int store_blob_writer_busy(struct store_blob_writer *w);
/* 1 if store_bg gave up because another connection held the write lock for the whole
 * busy timeout (the caller then reports the lock rather than waiting a second time). */
int store_blob_writer_bg_busy(struct store_blob_writer *w);
/* Bytes written so far. */
uint64_t store_blob_writer_size(const struct store_blob_writer *w);

/*
 * Streaming reader: writes blob `hash`'s bytes to fd (at its current offset) in
 * 256 KiB pieces, decompressing as it goes, with the checks of store_blob_get
 * (declared size, SHA-256 of everything written). Delta blobs (manifests) are read
 * whole. On ERR_CORRUPT some bytes may already be in fd: the caller discards the file.
 */
int store_blob_write_fd(struct store *st, const uint8_t hash[HASH_LEN], int fd, struct err *err);
/* The same, but first checks that the blob holds exactly `size` bytes (ERR_CORRUPT
 * otherwise, before anything is written): the workspace sync's ws_blobs.write_fd. */
int store_blob_write_fd_size(struct store *st, const uint8_t hash[HASH_LEN], uint64_t size, int fd,
                             struct err *err);

/* ---- sessions ------------------------------------------------------------------- */

enum store_session_state { STORE_SESSION_OPEN = 0, STORE_SESSION_CLOSED = 1 };

struct store_session {
    char id[STORE_SESSION_ID_LEN + 1];
    char *label;                              /* NULL if none */
    char parent_id[STORE_SESSION_ID_LEN + 1]; /* "" if none */
    int64_t parent_checkpoint;                /* -1 if none */
    int64_t created_ms;
    int64_t closed_ms; /* 0 while open */
    int64_t last_active_ms;
    int64_t head;        /* checkpoint id of the head */
    int state;           /* enum store_session_state */
    pid_t owner_pid;     /* 0 if no process holds it */
    int64_t owner_start; /* proc_start_time() of the owner */
    int64_t heartbeat_ms;
    char *client; /* client name that created it, NULL if unknown */
};

/* Frees the strings inside s (not s itself); safe on a zeroed struct. */
void store_session_release(struct store_session *s);

/*
 * Creates an open session with a fresh unique id and checkpoint 0 (given manifest
 * hash and file count; parent may be NULL/-1), claimed by (owner_pid, owner_start).
 * Fills *out (caller releases with store_session_release).
 */
struct store_session_new {
    const char *label;            /* may be NULL */
    const char *parent_id;        /* may be NULL */
    int64_t parent_checkpoint;    /* -1 if no parent */
    const uint8_t *manifest_hash; /* checkpoint 0's manifest (HASH_LEN bytes) */
    int64_t file_count;           /* checkpoint 0's file count */
    int64_t logical_bytes;        /* checkpoint 0's total file bytes */
    pid_t owner_pid;
    int64_t owner_start;
    const char *client; /* may be NULL */
    const char *tool;   /* the tool that made it, for checkpoint 0 */
};
int store_session_create(struct store *st, const struct store_session_new *req,
                         struct store_session *out, struct err *err);

/* Loads one session (open or closed). ERR_NOTFOUND if there is none with that id. */
int store_session_get(struct store *st, const char *id, struct store_session *out, struct err *err);

/*
 * Lists sessions (open only unless include_closed), oldest first. *out is an array of
 * *n sessions; free with store_session_list_free().
 */
int store_session_list(struct store *st, int include_closed, struct store_session **out, size_t *n,
                       struct err *err);
void store_session_list_free(struct store_session *list, size_t n);

/* Counts open sessions (for max_sessions). */
int store_session_count_open(struct store *st, int64_t *count, struct err *err);

/*
 * Claims the session for (pid, start). Succeeds if it is unowned, already ours, or its
 * owner is no longer alive (proc_alive). If a live other process holds it: ERR_BUSY
 * with a message naming the holder's pid, and *holder_pid (if non-NULL) set.
 * A closed session: ERR_INVAL.
 */
int store_session_claim(struct store *st, const char *id, pid_t pid, int64_t start,
                        pid_t *holder_pid, struct err *err);

/* Releases our claim (no-op if another process holds it). */
int store_session_release_claim(struct store *st, const char *id, pid_t pid, int64_t start,
                                struct err *err);

/* Refreshes heartbeat_ms for every open session this process holds; *held (may be
 * NULL) gets how many that is. */
int store_session_heartbeat(struct store *st, pid_t pid, int64_t start, int *held, struct err *err);

/* Records when a session we hold was last in use (the end of its last call), so that
 * another process can tell its idleness once we are gone. */
int store_session_set_active(struct store *st, const char *id, pid_t pid, int64_t start,
                             int64_t active_ms, struct err *err);

/* An open session whose stored activity is older than a cut-off (the idle reaper). */
struct store_idle {
    char id[STORE_SESSION_ID_LEN + 1];
    pid_t owner_pid; /* 0 if none */
    int64_t owner_start;
    int64_t heartbeat_ms;
    int64_t last_active_ms;
};
/* Open sessions with last_active_ms < before_ms, oldest first; free *out with mem_free. */
int store_session_idle_list(struct store *st, int64_t before_ms, struct store_idle **out, size_t *n,
                            struct err *err);

/*
 * Closes an idle session in one conditional UPDATE, so that of several processes
 * sharing the DB exactly one wins (*won = 1). It closes when the session is open and
 * either (owner_pid, owner_start) holds it (owner_pid 0: no such clause; pass our own
 * identity for a session we hold, or a holder found dead), or its last_active_ms is
 * before idle_before_ms and no process holds it with a heartbeat at or after
 * stale_before_ms. The winner then takes the snapshot (when named) and writes the
 * audit row (when given) in the same transaction; if either fails, the session stays
 * open and nothing is written.
 */
struct store_reap {
    const char *id;
    int64_t idle_before_ms;
    int64_t stale_before_ms;
    pid_t owner_pid;
    int64_t owner_start;
    const char *snapshot;    /* NULL: no snapshot; else the snapshot's name */
    struct store_audit *row; /* the `reap` row; may be NULL */
};
int store_session_reap(struct store *st, const struct store_reap *r, int *won, struct err *err);

int store_session_set_label(struct store *st, const char *id, const char *label, struct err *err);
int store_session_set_head(struct store *st, const char *id, int64_t head, struct err *err);
int store_session_touch(struct store *st, const char *id, struct err *err);
/* Marks closed (closed_ms = now) and drops the claim. */
int store_session_close(struct store *st, const char *id, struct err *err);

/* Overlays: workspace key -> host directory, session-wide (not per checkpoint). */
int store_overlay_set(struct store *st, const char *session, const char *key, const char *host_path,
                      struct err *err);
struct store_overlay {
    char *key;
    char *host_path;
};
int store_overlay_list(struct store *st, const char *session, struct store_overlay **out, size_t *n,
                       struct err *err);
void store_overlay_list_free(struct store_overlay *list, size_t n);

/* Chat log (session_chat_record). */
int store_chat_append(struct store *st, const char *session, const char *prompt,
                      const char *response, struct err *err);

/* ---- checkpoints ---------------------------------------------------------------- */

enum store_cp_status {
    STORE_CP_LIVE = 0,      /* visible to tools */
    STORE_CP_DISCARDED = 1, /* after a rollback, the next mutation discards the rest */
    STORE_CP_DROPPED = 2,   /* removed by session_checkpoint_drop */
    STORE_CP_SQUASHED = 3,  /* folded into a later checkpoint by squash */
};

struct store_checkpoint {
    char session_id[STORE_SESSION_ID_LEN + 1];
    int64_t id;
    int64_t parent;    /* previous live checkpoint id, -1 for checkpoint 0 */
    char *tool;        /* NULL if none */
    char *command;     /* NULL if none */
    char *description; /* NULL if none */
    char *label;       /* NULL if none */
    int has_exit_code;
    int exit_code;
    int64_t duration_ms;
    int64_t created_ms;
    uint8_t stdout_hash[HASH_LEN]; /* valid when stdout_bytes > 0 */
    uint8_t stderr_hash[HASH_LEN]; /* valid when stderr_bytes > 0 */
    int64_t stdout_bytes;
    int64_t stderr_bytes;
    uint8_t manifest_hash[HASH_LEN];
    int64_t file_count;
    int64_t added, modified, removed; /* vs parent */
    int64_t logical_bytes;            /* sum of file sizes */
    int status;                       /* enum store_cp_status */
};

void store_checkpoint_release(struct store_checkpoint *cp);

enum store_change_kind { STORE_ADDED = 'A', STORE_MODIFIED = 'M', STORE_REMOVED = 'D' };

struct store_change {
    const char *path;
    int kind; /* enum store_change_kind */
};

/*
 * Appends a checkpoint to `cp->session_id` with the next id (max id + 1 over all rows
 * of the session, whatever their status), writes its change rows, and moves the
 * session head to it. Live checkpoints after the old head are marked DISCARDED first.
 * cp->id and cp->created_ms are filled in. The caller has already stored the blobs
 * that the manifest, stdout and stderr hashes name (normally in the same bracket).
 */
int store_checkpoint_append(struct store *st, struct store_checkpoint *cp,
                            const struct store_change *changes, size_t n_changes, struct err *err);

/* Loads one checkpoint (any status). ERR_NOTFOUND if absent. */
int store_checkpoint_get(struct store *st, const char *session, int64_t id,
                         struct store_checkpoint *out, struct err *err);

/*
 * Lists a session's checkpoints in id order: live ones only, or every row with
 * include_hidden. Free with store_checkpoint_list_free().
 */
int store_checkpoint_list(struct store *st, const char *session, int include_hidden,
                          struct store_checkpoint **out, size_t *n, struct err *err);
void store_checkpoint_list_free(struct store_checkpoint *list, size_t n);

/* Finds the lowest live checkpoint id with this label. ERR_NOTFOUND if none. */
int store_checkpoint_find_label(struct store *st, const char *session, const char *label,
                                int64_t *id, struct err *err);

/* Sets or clears (label NULL or "") a checkpoint's label. */
int store_checkpoint_set_label(struct store *st, const char *session, int64_t id, const char *label,
                               struct err *err);

/* Marks the live checkpoints with from <= id <= to as `status` (DROPPED or SQUASHED). */
int store_checkpoint_set_status(struct store *st, const char *session, int64_t from, int64_t to,
                                int status, struct err *err);

/*
 * Rewrites the mutable fields of an existing checkpoint (parent, tool, command,
 * description, label, exit code, stdout/stderr refs and sizes, counts) from `cp`,
 * and replaces its change rows. Used by squash and by drop (to re-parent the next one).
 */
int store_checkpoint_rewrite(struct store *st, const struct store_checkpoint *cp,
                             const struct store_change *changes, size_t n_changes, struct err *err);

/* Lists the change rows of one checkpoint. Free with store_change_list_free(). */
struct store_change_row {
    char *path;
    int kind;
};
int store_change_list(struct store *st, const char *session, int64_t id,
                      struct store_change_row **out, size_t *n, struct err *err);
void store_change_list_free(struct store_change_row *list, size_t n);

/* Steps: the record of read-only calls made at a checkpoint ({tool, description}). */
int store_step_append(struct store *st, const char *session, int64_t checkpoint, const char *tool,
                      const char *description, struct err *err);
struct store_step {
    char *tool;
    char *description;
};
int store_step_list(struct store *st, const char *session, int64_t checkpoint,
                    struct store_step **out, size_t *n, struct err *err);
void store_step_list_free(struct store_step *list, size_t n);

/* ---- audit ---------------------------------------------------------------------- */

struct store_audit {
    int64_t id;      /* filled by append */
    int64_t time_ms; /* 0: now */
    pid_t pid;
    const char *kind;           /* "call" or "event" */
    const char *client_name;    /* may be NULL */
    const char *client_version; /* may be NULL */
    const char *session_id;     /* may be NULL */
    const char *tool;           /* tool name, or the event name */
    const char *summary;        /* one line */
    const char *outcome;        /* "ok", "error", "denied", "cancelled" */
    const char *error_code;     /* may be NULL */
    int64_t duration_ms;
    int64_t checkpoint_id; /* -1 if none */
    const char *args;      /* full arguments as JSON text; may be NULL */
    size_t args_len;
    /* The blobs args references (see below): stored in the row's transaction and
     * listed in audit_refs, so gc keeps them. */
    const struct store_audit_part *parts;
    size_t nparts;
};

/*
 * Audit arguments keep large string values out of the row. The caller (tools/) writes
 * each string value longer than STORE_AUDIT_REF_MIN bytes as the object
 * {"$blob":"<64 hex digits>","bytes":N} (compact, exactly those two keys in that
 * order; N is the string's length in bytes, the hex its SHA-256) and passes the bytes
 * as a part, in the order the references appear; an agent's own object key made only of
 * one or more '$' then "blob" gets one more '$' in front ("$blob" -> "$$blob"), so a
 * reference can never be an agent's value and expansion restores the original exactly.
 * store_audit_append keeps a reference (and stores the blob) for every part over
 * STORE_AUDIT_INLINE_MAX bytes, and for a smaller one only when that blob is already
 * stored (a file's content the call wrote: then it costs nothing); other small parts go
 * back inline, as the caller printed them.
 */
#define STORE_AUDIT_REF_MIN    128
#define STORE_AUDIT_INLINE_MAX 1024
struct store_audit_part {
    const void *data; /* the string's bytes (NUL-free) */
    size_t len;
    uint8_t hash[HASH_LEN]; /* SHA-256 of the bytes, as written in args */
};
#define STORE_AUDIT_EXPANDED_MAX ((size_t)256 << 20) /* expanded args, at most */

/*
 * Writes `args` (stored audit args text) to out with every reference replaced by its
 * blob's bytes as a JSON string (escaped as cJSON prints strings) and every escaped
 * key given back its original name: the arguments exactly as the call printed them.
 * A missing or damaged blob, a size that does not match, or a malformed reference:
 * ERR_NOTFOUND/ERR_CORRUPT naming the hash. `db` is the store's (store_db) or another
 * connection (the sqlite extension's).
 */
int store_audit_args_expand(struct sqlite3 *db, const char *args, size_t len, struct buf *out,
                            struct err *err);
/* The same for the audit.args column as stored, zstd-compressed (args_codec 1) or not:
 * a value starting with the zstd frame magic is decompressed first (JSON text never
 * starts with it). For the sqlite extension's drun_audit_args(). */
int store_audit_args_read(struct sqlite3 *db, const void *args, size_t len, struct buf *out,
                          struct err *err);

/*
 * Appends one audit row, chaining its hash to the previous row's (read inside the
 * same write transaction, so concurrent processes keep one chain). Large args are
 * stored compressed.
 */
int store_audit_append(struct store *st, struct store_audit *row, struct err *err);

/*
 * Walks the chain from the first row. *ok is 1 if every row's hash matches its
 * content and the previous hash; otherwise 0 with *bad_id the first row that does
 * not (an edited, deleted or reordered row) and a message in err->msg describing it.
 * *rows gets the number of rows checked.
 */
int store_audit_verify(struct store *st, int *ok, int64_t *bad_id, int64_t *rows, struct err *err);

/* One stored audit row as read back; strings are the caller's (freed by the list free). */
struct store_audit_entry {
    int64_t id;
    int64_t time_ms;
    int64_t pid;
    char *kind, *client_name, *client_version, *session_id, *tool, *summary, *outcome,
        *error_code; /* NULL where the column is NULL */
    int64_t duration_ms;
    int64_t checkpoint_id; /* -1 if none */
    char *args; /* JSON text, NUL-terminated, references expanded (unless raw); NULL if none */
    size_t args_len;
    uint8_t hash[HASH_LEN];
};

/*
 * Reads the newest `n` audit rows (1 <= n <= STORE_AUDIT_TAIL_MAX), oldest first.
 * Free with store_audit_entry_list_free().
 */
int store_audit_tail(struct store *st, int64_t n, struct store_audit_entry **out, size_t *count,
                     struct err *err);
void store_audit_entry_list_free(struct store_audit_entry *list, size_t n);

/* Which audit rows store_audit_query returns: the newest `limit` (1..
 * STORE_AUDIT_TAIL_MAX) that match every given filter, oldest first. */
struct store_audit_filter {
    int64_t limit;
    const char *session_id; /* NULL: any */
    const char *tool;       /* NULL: any */
    int errors_only;        /* 1: outcome is not "ok" */
    int64_t after_id;       /* only rows with a larger id (0: all) */
    int64_t id;             /* > 0: only this row */
    int raw;                /* 1: args as stored (references not expanded) */
};
int store_audit_query(struct store *st, const struct store_audit_filter *f,
                      struct store_audit_entry **out, size_t *count, struct err *err);

/* ---- maintenance ------------------------------------------------------------------ */

struct store_stats {
    int64_t file_bytes; /* size of the DB file (plus WAL) */
    int64_t sessions_open, sessions_closed;
    int64_t checkpoints, checkpoints_hidden;
    int64_t blobs, blob_bytes_logical, blob_bytes_stored;
    int64_t audit_rows;
    int64_t snapshots;
    int schema_version;
};
int store_stats(struct store *st, struct store_stats *out, struct err *err);

/* Runs PRAGMA integrity_check and foreign_key_check; *ok = 1 if both are clean. The
 * first problem is described in err->msg when *ok is 0. */
int store_check(struct store *st, int *ok, struct err *err);

/* Rewrites the file compactly (VACUUM, then a WAL checkpoint); *before and *after get
 * the file size. Outside a bracket; ERR_BUSY if other connections hold the file. */
int store_vacuum(struct store *st, int64_t *before, int64_t *after, struct err *err);

struct store_gc_opts {
    int dry_run;
    int64_t discarded_older_than_ms; /* delete hidden checkpoints older than this age; <0: keep */
    int64_t closed_older_than_ms;    /* delete closed sessions older than this age; <0: keep */
};
struct store_gc_result {
    int64_t checkpoints_deleted;
    int64_t sessions_deleted;
    int64_t blobs_deleted;
    int64_t bytes_freed; /* stored bytes of the deleted blobs */
};
/*
 * Mark and sweep: deletes hidden checkpoints and closed sessions past their age (when
 * asked), then every blob no live row references (manifests, the blobs those
 * manifests list, stdout/stderr, snapshots, audit args). With dry_run nothing changes
 * and the result says what would go. The manifest format is read through the
 * callback below so the store does not depend on the workspace module.
 */
typedef int (*store_manifest_refs_fn)(void *ctx, const void *manifest, size_t len,
                                      void (*ref)(void *refctx, const uint8_t hash[HASH_LEN]),
                                      void *refctx, struct err *err);
int store_gc(struct store *st, const struct store_gc_opts *opts, store_manifest_refs_fn refs,
             void *refs_ctx, struct store_gc_result *out, struct err *err);

/* ---- snapshots ------------------------------------------------------------------- */

/*
 * A snapshot is a named, immutable copy of one session's rows (session, every
 * checkpoint whatever its status, change rows, steps, chat log, overlays) pointing at
 * the same blobs, so taking one costs rows, not bytes. Restore makes a new session
 * from it; export writes a standalone drun SQLite file holding that one snapshot and
 * only the blobs it needs (delta bases included); import reads such a file back,
 * checking every new blob's hash, all in one transaction.
 */
#define STORE_SNAPSHOT_NAME_MAX 128

struct store_snapshot {
    int64_t id;
    char name[STORE_SNAPSHOT_NAME_MAX + 1];
    char *description; /* NULL if none */
    int64_t created_ms;
    char session_id[STORE_SESSION_ID_LEN + 1]; /* the session it was taken from ("" if none) */
    char *label;                               /* the session's label, NULL if none */
    char *client;                              /* NULL if unknown */
    char parent_id[STORE_SESSION_ID_LEN + 1];  /* "" if none */
    int64_t parent_checkpoint;                 /* -1 if none */
    int64_t session_created_ms;
    int64_t head;
    int64_t checkpoints;     /* live checkpoints */
    int64_t checkpoints_all; /* every checkpoint row, hidden ones included */
    int64_t head_bytes;      /* logical bytes of the head's tree */
};

/* Frees the strings inside s (not s); safe on a zeroed struct. */
void store_snapshot_release(struct store_snapshot *s);

/* Checks a snapshot name: 1..STORE_SNAPSHOT_NAME_MAX of [A-Za-z0-9._-], not starting
 * with '.' or '-' (so it is also a safe file name). ERR_INVAL saying what is wrong. */
int store_snapshot_name_check(const char *name, struct err *err);

/*
 * Snapshots session `session` under `name` (NULL: "<session>-<UTC time>"), with an
 * optional description. ERR_EXISTS if the name is taken, ERR_NOTFOUND if the session
 * is. Fills *out (may be NULL; caller releases).
 */
int store_snapshot_create(struct store *st, const char *session, const char *name,
                          const char *description, struct store_snapshot *out, struct err *err);

/* Loads one snapshot by name. ERR_NOTFOUND if there is none. */
int store_snapshot_get(struct store *st, const char *name, struct store_snapshot *out,
                       struct err *err);

/* Lists snapshots, oldest first. Free with store_snapshot_list_free(). */
int store_snapshot_list(struct store *st, struct store_snapshot **out, size_t *n, struct err *err);
void store_snapshot_list_free(struct store_snapshot *list, size_t n);

/* Lists a snapshot's checkpoints (every status) in id order. Free with
 * store_checkpoint_list_free(); session_id in each is the snapshot's source session. */
int store_snapshot_checkpoints(struct store *st, const char *name, struct store_checkpoint **out,
                               size_t *n, struct err *err);

/* Deletes a snapshot's rows (its blobs go at the next gc). ERR_NOTFOUND if absent. */
int store_snapshot_delete(struct store *st, const char *name, struct err *err);

/*
 * Makes a new open session (fresh id) holding the snapshot's full history, labels,
 * steps, chat log and overlays, with head = `head` (-1: the snapshot's head; else a
 * live checkpoint id, ERR_NOTFOUND otherwise), claimed by (owner_pid, owner_start)
 * (0: unclaimed, so any drun-mcp on the DB can switch to it). Fills *out.
 */
int store_snapshot_restore(struct store *st, const char *name, int64_t head, pid_t owner_pid,
                           int64_t owner_start, struct store_session *out, struct err *err);

/*
 * Judges one overlay (workspace key -> host directory) a snapshot brings in: 1 keeps it,
 * 0 drops it. The store knows no policy; the caller's function does.
 */
typedef int (*store_overlay_keep_fn)(void *ctx, const char *key, const char *host_path);

/*
 * Runs every overlay of snapshot `name` (or of session `session_id`) through keep and
 * deletes those it drops, in one transaction (or the caller's bracket). Memory does not
 * grow with the number of overlays: the dropped keys wait in a temp table.
 */
int store_snapshot_overlays_filter(struct store *st, const char *name, store_overlay_keep_fn keep,
                                   void *ctx, struct err *err);
int store_session_overlays_filter(struct store *st, const char *session_id,
                                  store_overlay_keep_fn keep, void *ctx, struct err *err);

/*
 * Writes snapshot `name` to a new standalone drun database at `path` (which must not
 * exist: ERR_EXISTS), with only the blobs it refers to: manifests, outputs, every
 * blob the manifests list (read through `refs`, as store_gc does) and the base chain
 * of every delta. The file is written beside `path` and renamed into place, so a
 * failure leaves nothing at `path`. Must be called outside a bracket.
 */
int store_snapshot_export(struct store *st, const char *name, const char *path,
                          store_manifest_refs_fn refs, void *refs_ctx, struct err *err);

/*
 * Imports the one snapshot of the drun export file at `path` under `name` (NULL: the
 * name it was exported with). Every blob the DB lacks is copied and read back
 * through the hash check; every blob the snapshot needs must be present. One
 * transaction: on any error nothing is kept. ERR_EXISTS if the name is taken,
 * ERR_CORRUPT / ERR_VERSION for a bad file. Must be called outside a bracket.
 */
int store_snapshot_import(struct store *st, const char *path, const char *name,
                          store_manifest_refs_fn refs, void *refs_ctx, struct store_snapshot *out,
                          struct err *err);
/* The same, opening `path` (e.g. /proc/self/fd/N of a file already open) while messages
 * name `shown`, the path the user gave. */
int store_snapshot_import_as(struct store *st, const char *path, const char *shown,
                             const char *name, store_manifest_refs_fn refs, void *refs_ctx,
                             struct store_snapshot *out, struct err *err);

/*
 * Snapshots built from plain values (the original drun's .drun files, decoded above
 * this layer). Blobs named by the hashes must already be stored, normally in the same
 * bracket as this call.
 */
struct store_chat_entry {
    const char *prompt;
    const char *response;
};
struct store_snapshot_cp {
    int64_t id;
    int64_t parent;                                   /* -1 for none */
    const char *tool, *command, *description, *label; /* may be NULL */
    int has_exit_code;
    int exit_code;
    int64_t created_ms;
    const uint8_t *manifest_hash; /* HASH_LEN bytes, required */
    const uint8_t *stdout_hash;   /* NULL when empty */
    int64_t stdout_bytes;
    const uint8_t *stderr_hash; /* NULL when empty */
    int64_t stderr_bytes;
    int64_t file_count, added, modified, removed, logical_bytes;
    const struct store_step *steps;
    size_t n_steps;
    const struct store_change *changes;
    size_t n_changes;
};
struct store_snapshot_new {
    const char *name;        /* required */
    const char *description; /* may be NULL */
    const char *source;      /* where it came from (session id or file stem); required */
    const char *label, *client, *parent_id; /* may be NULL */
    int64_t parent_checkpoint;              /* -1 for none */
    int64_t head;                           /* must name one of cps */
    int64_t session_created_ms;
    const struct store_snapshot_cp *cps;
    size_t n_cps;
    const struct store_chat_entry *chat;
    size_t n_chat;
    const struct store_overlay *overlays;
    size_t n_overlays;
};
int store_snapshot_insert(struct store *st, const struct store_snapshot_new *req,
                          struct store_snapshot *out, struct err *err);

/*
 * Unpacks an original-drun .drun file: checks the "DRUN" magic and decompresses the
 * zstd frame that follows into `json` (whose max bounds it). A missing magic, a
 * truncated or damaged frame: ERR_CORRUPT with a message saying so.
 */
int store_drun_unpack(const void *data, size_t len, struct buf *json, struct err *err);

/*
 * Reads blob `hash` through another SQLite connection (the sqlite3 CLI's, for the
 * loadable extension): same checks as store_blob_get, deltas included. `db` is
 * borrowed and left open; the blob cap is STORE_BLOB_MAX_DEFAULT and out's max.
 */
int store_blob_get_conn(struct sqlite3 *db, const uint8_t hash[HASH_LEN], struct buf *out,
                        struct err *err);

/* ---- escape hatch for modules in this layer only ------------------------------------ */

/* The SQLite handle, for store_*.c files and the sqlite extension; others must not use it. */
struct sqlite3 *store_db(struct store *st);

#endif
