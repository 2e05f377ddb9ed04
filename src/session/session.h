/*
 * session.h - live sessions: the head of each attached session, its limits, and every
 * operation that reads or rewrites a session's history.
 *
 * A session lives in the store (sessions, checkpoints, blobs). This process "attaches"
 * the sessions it works on: it claims them in the DB (so no other drun-mcp writes them)
 * and keeps, per attached session, only what a call needs quickly: the head checkpoint
 * id, the head manifest (never file contents), the ids of the live checkpoints, a busy
 * flag and a readers count, the time of the last activity and, once a command needs it,
 * the workspace directory. Everything else is read from the store when asked.
 *
 * The layer is synchronous and runs on the loop thread: every function here returns
 * when its work is done and its transaction committed. A command (session_bash) is the
 * one asynchronous user: it marks the session busy with session_enter(SESSION_WRITE),
 * prepares the directory, runs the sandbox, then commits with session_commit_scan() (or
 * resets with session_workspace_reset()) and calls session_leave().
 *
 * Mutations. A change is built on a copy of the head manifest (struct session_edit),
 * normalized and conflict-checked key by key, size-checked, then committed in ONE
 * store transaction: forward history after a rolled-back head is discarded, the
 * checkpoint limit is checked on what remains, blobs and the manifest blob are put,
 * the checkpoint and its change rows are appended, and the caller's audit row is
 * written. Only after the commit does the in-memory head move, so a failure at any
 * step leaves the session exactly as it was, in memory and on disk.
 *
 * Ids. Checkpoint ids are stable: squash keeps the id of the last checkpoint of the
 * range (which holds that checkpoint's files) and marks the others squashed; drop
 * marks its range dropped and re-parents the next live checkpoint. Nothing is ever
 * renumbered, so labels and fork parents stay valid.
 *
 * Idleness counts from the end of the session's last call: a mutation on a session idle
 * longer than limits.idle_secs fails with SESSION_E_IDLE; reads, fork, switch, close,
 * list and tree keep working (reference section 14 item 8, the documented intent).
 * session_reattach() (used by session_switch) restarts the idle clock. The idle reaper
 * (tools layer, on a timer) closes idle sessions: session_mgr_heartbeat() keeps the DB's
 * heartbeat and last_active_ms of the sessions held here current, session_idle_ms()
 * says which attached sessions are idle, and session_forget() drops one it closed.
 *
 * Views. A session another live process holds cannot be attached, but it can be read:
 * session_view() builds a read-only view from the DB (head from the sessions row, its
 * manifest and live ids), without claiming it and without a workspace.
 *
 * Errors. Functions fill a struct session_err: `kind` says which drun error it is (the
 * tools layer maps kinds to the reference's error codes), `base` holds the generic code
 * and the message, d1/d2 the numbers the error's detail names.
 */
#ifndef DRUN_SESSION_H
#define DRUN_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/err.h"
#include "workspace/workspace.h"

struct session_mgr;
struct session;

/* ---- limits and errors ------------------------------------------------------------ */

struct session_limits {
    int64_t max_sessions;     /* open sessions in the DB (all processes) */
    int64_t max_checkpoints;  /* live checkpoints up to and including the head */
    int64_t max_workspace_mb; /* logical bytes of one checkpoint's files, in MiB */
    int64_t idle_secs;        /* a session idle longer than this refuses mutations; 0: never */
    uint32_t sandbox_uid;     /* host user a root daemon's commands run as; 0: the default */
    uint32_t sandbox_gid;
};

/* The reference's defaults (section 7.2). */
#define SESSION_LIMITS_DEFAULT ((struct session_limits){50, 200, 512, 3600, 0, 0})

/* The largest result a read builds (raw bytes before JSON/base64 encoding). */
#define SESSION_READ_MAX ((size_t)8 << 20)

enum session_errc {
    SESSION_E_OTHER = 0,      /* see base.code: internal or generic */
    SESSION_E_NOT_FOUND,      /* session_not_found */
    SESSION_E_BUSY,           /* session_busy */
    SESSION_E_IDLE,           /* session_idle: d1 idle_secs, d2 limit_secs */
    SESSION_E_LIMIT,          /* session_limit_reached: d1 limit */
    SESSION_E_CP_NOT_FOUND,   /* checkpoint_not_found */
    SESSION_E_CP_LIMIT,       /* checkpoint_limit_reached: d1 limit */
    SESSION_E_FILE_NOT_FOUND, /* file_not_found */
    SESSION_E_BAD_PATH,       /* invalid_workspace_path */
    SESSION_E_SIZE,           /* workspace_size_exceeded: d1 actual_bytes, d2 limit_bytes */
    SESSION_E_PATTERN,        /* invalid_pattern */
    SESSION_E_BINARY,         /* binary_content */
    SESSION_E_TOO_LARGE,      /* result_too_large: d1 total_bytes, d2 limit_bytes */
    SESSION_E_ARGS,           /* invalid_arguments (an argument's value is out of range) */
    SESSION_E_UNSUPPORTED,    /* unsupported_extraction_format */
    SESSION_E_EXTRACT,        /* extraction_failed */
};

struct session_err {
    int kind; /* enum session_errc */
    int64_t d1, d2;
    struct err base;
};

/* Sets e (kind, generic code, message) and returns -1. */
int session_fail(struct session_err *e, int kind, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Copies a generic error into e as kind SESSION_E_OTHER (or `kind`) and returns -1. */
int session_fail_err(struct session_err *e, int kind, const struct err *err);

/* ---- the manager ------------------------------------------------------------------ */

/*
 * Makes the process's manager over an open store. runtime_dir may be NULL (the
 * default private runtime root, made on first use). Records our (pid, start time) for
 * claims. The limits start at SESSION_LIMITS_DEFAULT. Free with session_mgr_free().
 */
int session_mgr_new(struct store *st, const char *runtime_dir, struct session_mgr **out,
                    struct err *err);

/* Detaches every session (releasing claims, closing directories) and frees m. */
void session_mgr_free(struct session_mgr *m);

/* Replaces the limits (the tools layer fills them from policy before each call). */
void session_mgr_set_limits(struct session_mgr *m, const struct session_limits *l);

/*
 * Makes this process's runtime directory and removes what dead drun processes left:
 * their runtime directories (with the workspaces in them) and their sandboxes' pids
 * cgroups, never those of a live process. Returns 0, or -1 with err when the runtime
 * directory cannot be made (the first command would then fail the same way).
 */
int session_mgr_sweep(struct session_mgr *m, struct err *err);

/* The runtime root this process's workspaces live under, once made (else NULL). */
const char *session_mgr_runtime_root(const struct session_mgr *m);
const struct session_limits *session_mgr_limits(const struct session_mgr *m);

struct store *session_mgr_store(const struct session_mgr *m);

/* The ws_blobs wired to store_blob_get/put on this manager's store; borrowed. */
const struct ws_blobs *session_mgr_blobs(const struct session_mgr *m);

/* Our claim identity. */
pid_t session_mgr_pid(const struct session_mgr *m);

/* The attached session with this id, or NULL; borrowed until it is detached. */
struct session *session_mgr_find(const struct session_mgr *m, const char *id);

/* Number of sessions attached here. */
size_t session_mgr_attached(const struct session_mgr *m);

/* Bytes of heap the attached sessions hold (manifests, id lists), an estimate. */
size_t session_mgr_mem(const struct session_mgr *m);

/* ---- attaching, creating, closing --------------------------------------------------- */

/*
 * Creates a new open session with an empty checkpoint 0, claimed and attached here.
 * SESSION_E_LIMIT if limits.max_sessions open sessions exist (checked inside the
 * creating transaction). client may be NULL. *out is borrowed from m.
 */
int session_create(struct session_mgr *m, const char *client, struct session **out,
                   struct session_err *e);

/*
 * Returns the attached session `id`, attaching it first if needed: claims it
 * (SESSION_E_BUSY naming the holder's pid if another live process holds it; a dead
 * holder is taken over) and loads its head manifest. SESSION_E_NOT_FOUND for an
 * unknown or closed session.
 */
int session_attach(struct session_mgr *m, const char *id, struct session **out,
                   struct session_err *e);

/* session_attach(), and restarts the session's idle clock (session_switch). */
int session_reattach(struct session_mgr *m, const char *id, struct session **out,
                     struct session_err *e);

/*
 * Forks `src` at live checkpoint `cp` into a new attached session whose checkpoint 0
 * holds that checkpoint's files, parent set, overlays inherited. SESSION_E_LIMIT as
 * session_create, SESSION_E_CP_NOT_FOUND for a checkpoint that is not live.
 */
int session_fork(struct session_mgr *m, struct session *src, int64_t cp, const char *client,
                 struct session **out, struct session_err *e);

/*
 * Closes s in the DB (state closed, claim dropped) and detaches it; s is freed. A busy
 * session cannot be closed (SESSION_E_BUSY). The workspace directory is removed.
 */
int session_close(struct session_mgr *m, struct session *s, struct session_err *e);

/* Releases the claim and frees s (the session stays open in the DB). */
void session_detach(struct session_mgr *m, struct session *s);

/*
 * A read-only view of open session `id` as the DB has it (head, head manifest, live
 * ids), for reading a session another process holds: not claimed, no workspace, never
 * a sandbox. Enter it with SESSION_READ only. Each call reloads it (unless a read is in
 * flight on it); it is borrowed until the next session_view of the same id or
 * session_mgr_free. SESSION_E_NOT_FOUND as session_attach.
 */
int session_view(struct session_mgr *m, const char *id, struct session **out,
                 struct session_err *e);

/* 1 for a view made by session_view. */
int session_is_view(const struct session *s);

/* ---- the idle reaper's helpers ------------------------------------------------------- */

/* Our claim's start time (with session_mgr_pid, the owner the DB records). */
int64_t session_mgr_start(const struct session_mgr *m);

/* Attached sessions, in no particular order: first, then next (NULL at the end). */
struct session *session_mgr_first(const struct session_mgr *m);
struct session *session_next(const struct session *s);

/*
 * Refreshes the heartbeat of every session held here, and writes each one's last
 * activity (the end of its last call, or now while a call is in flight) to
 * last_active_ms when it changed, so another process can reap it once we are gone.
 * Attached sessions the DB no longer gives to us (closed or taken by another process)
 * are dropped. Honours the store's nowait mode (ERR_BUSY: try again later).
 */
int session_mgr_heartbeat(struct session_mgr *m, struct err *err);

/*
 * Calls fn(arg) on the loop after first_ms, then again after as many milliseconds as
 * fn returns (<= 0: no more). The timer never keeps the loop alive by itself. One per
 * manager; session_timer_stop() stops it (before the loop's handles are closed).
 */
typedef int64_t (*session_tick_fn)(void *arg);
int session_timer_start(struct session_mgr *m, void *loop, int64_t first_ms, session_tick_fn fn,
                        void *arg);
void session_timer_stop(struct session_mgr *m);

/* Milliseconds since s's last call ended, or -1 while it is in use (a call in flight). */
int64_t session_idle_ms(const struct session *s);

/* Drops s without touching the DB (the reaper closed it there): its workspace directory
 * and any prepared sandbox are freed. */
void session_forget(struct session_mgr *m, struct session *s);

/* ---- the attached session ------------------------------------------------------------ */

const char *session_id(const struct session *s);
/* The manager s is attached to. */
struct session_mgr *session_owner(const struct session *s);
int64_t session_head(const struct session *s);
/* The head manifest; borrowed until the head next moves. */
const struct ws_manifest *session_manifest(const struct session *s);
/* Live checkpoint ids in order (all of them, including any after a rolled-back head). */
const int64_t *session_live_ids(const struct session *s, size_t *n);
/* 1 if `cp` is a live checkpoint of s. */
int session_cp_live(const struct session *s, int64_t cp);
/* 1 while a mutating call is in flight. */
int session_busy(const struct session *s);
/* Seconds since the last activity. */
int64_t session_idle_secs(const struct session *s);

enum session_mode {
    SESSION_READ = 1,  /* reads: refused while busy; allowed on an idle session */
    SESSION_WRITE = 2, /* mutations: refused while busy or read, and when idle */
};

/*
 * Starts a call on s: SESSION_E_BUSY if a mutating call is in flight (or, for a write,
 * a read is), SESSION_E_IDLE for a write on an idle session. On success marks the
 * session (busy or one more reader) and, unless it is idle, refreshes its activity.
 * Every successful enter is paired with session_leave() with the same mode.
 */
int session_enter(struct session *s, int mode, struct session_err *e);
void session_leave(struct session *s, int mode);

/* Appends a step {tool, description} to checkpoint cp (the head if cp < 0). */
int session_step(struct session *s, int64_t cp, const char *tool, const char *description,
                 struct session_err *e);

/* ---- reading checkpoints --------------------------------------------------------------- */

/*
 * Resolves a checkpoint named by label (wins if non-NULL) or id (if >= 0), else the
 * default `dflt`. SESSION_E_CP_NOT_FOUND: "no checkpoint with label 'x'" or
 * "checkpoint N does not exist" (hidden checkpoints do not exist for the tools).
 */
int session_resolve(struct session *s, const char *label, int64_t id, int64_t dflt, int64_t *out,
                    struct session_err *e);

/* Loads the manifest of checkpoint cp of session `id` (any status); caller frees. */
int session_load_manifest(struct session_mgr *m, const char *id, int64_t cp,
                          struct ws_manifest **out, struct session_err *e);

/*
 * Appends the content of `entry` (a file's bytes or a link's target) to out, whose max
 * bounds it (past it: SESSION_E_TOO_LARGE naming the size and SESSION_READ_MAX).
 */
int session_read_entry(struct session_mgr *m, const struct ws_entry *entry, struct buf *out,
                       struct session_err *e);

/*
 * Finds `key` (normalized first) in manifest m: SESSION_E_BAD_PATH for an invalid key,
 * SESSION_E_FILE_NOT_FOUND "'k' not found in current checkpoint" (or the message
 * `where` names) for a missing one or an empty directory.
 */
int session_lookup(const struct ws_manifest *m, const char *key, const char *where,
                   const struct ws_entry **out, struct session_err *e);

/* ---- mutations ------------------------------------------------------------------------ */

struct session_edit;

/* What the new checkpoint records besides its files. Strings may be NULL. */
struct session_commit_meta {
    const char *tool;
    const char *command;
    const char *description;
    int has_exit_code;
    int exit_code;
    const void *stdout_data; /* captured output, stored as blobs; may be NULL */
    size_t stdout_len;
    const void *stderr_data;
    size_t stderr_len;
    int64_t duration_ms;
    int disk_full; /* the command ran out of space in its bounded workspace (ENOSPC) */
};

/* What a commit did: the new checkpoint and its changes against the old head. */
struct session_delta {
    int64_t checkpoint_id;
    size_t added, modified, removed;
    int64_t removed_unstorable; /* rollback: entries no checkpoint can hold, removed from disk */
};

/* Starts a change on a copy of s's head manifest. The caller has entered SESSION_WRITE. */
int session_edit_begin(struct session *s, struct session_edit **out, struct session_err *e);

/*
 * Stages a regular file at `key` (normalized; SESSION_E_BAD_PATH naming the key for an
 * invalid one or one that conflicts with another file, "a" beside "a/b"). A later write
 * of the same key replaces an earlier one. `data` is borrowed until commit or abort.
 */
int session_edit_write(struct session_edit *ed, const char *key, const void *data, size_t len,
                       int exec, struct session_err *e);

/* Stages an entry whose blob is already stored (merge), at its own path. */
int session_edit_put(struct session_edit *ed, const struct ws_entry *entry, struct session_err *e);

/*
 * Stages a regular file at `key` whose content is in a store blob writer (session_fetch
 * streams bodies into one). The writer is ended here (its hash and size go into the
 * manifest) and the edit owns it from this call on, failure included: the commit
 * stores it inside its own transaction (so a concurrent gc cannot take the row before
 * the checkpoint refers to it), an abort drops it.
 */
int session_edit_put_writer(struct session_edit *ed, const char *key, struct store_blob_writer *w,
                            int exec, struct session_err *e);

/* Stages the removal of `key`: SESSION_E_FILE_NOT_FOUND "'k' not in current checkpoint". */
int session_edit_remove(struct session_edit *ed, const char *key, struct session_err *e);

/*
 * Commits the change as one new checkpoint (see the file comment for the order of
 * checks). `audit` (may be NULL) is appended in the same transaction, with its
 * session_id and checkpoint_id filled in here. Frees ed whatever the outcome.
 */
int session_edit_commit(struct session_edit *ed, const struct session_commit_meta *meta,
                        struct store_audit *audit, struct session_delta *delta,
                        struct session_err *e);

/*
 * session_edit_commit for a caller that must not wait for the DB's write lock: when the
 * store is in nowait mode and another connection holds the lock, returns -1 with
 * store_would_block set and ed kept as it was (the caller parks, then calls this again
 * or session_edit_abort). Otherwise as session_edit_commit: frees ed. in_tx (may be
 * NULL) runs inside the transaction before the checkpoint is written, so rows the caller
 * appends there (store_audit_append_soon) commit with it, in one fsync; they are lost
 * with it if the commit fails.
 */
int session_edit_try_commit(struct session_edit *ed, const struct session_commit_meta *meta,
                            struct store_audit *audit, void (*in_tx)(void *ud), void *ud,
                            struct session_delta *delta, struct session_err *e);

/* Drops a change that will not be committed. NULL is a no-op. */
void session_edit_abort(struct session_edit *ed);
/* 1 if `more` bytes added to the head's files stay within the workspace size limit (a
 * hint before storing big blobs ahead of a commit; the commit checks exactly). */
int session_fits(const struct session *s, uint64_t more);

/* ---- commands: the workspace directory -------------------------------------------------- */

/*
 * Makes the workspace directory equal to the head: opens it on first use (under the
 * runtime root, ws-<id>) and fully re-syncs it then, or after anything that made the
 * cache untrustworthy; otherwise syncs incrementally. *dir is borrowed from s. Call it
 * between session_enter(SESSION_WRITE) and the command.
 */
int session_workspace_prepare(struct session *s, struct ws_dir **dir, struct session_err *e);

/*
 * After a command that finished: rescans the directory (within the size limit) and
 * commits what it holds as a new checkpoint with meta (command, exit code, output),
 * exactly as session_edit_commit would. skipped (may be NULL) receives the entries the
 * scan skipped (FIFOs, sockets, devices); release with ws_scan_report_release().
 * meta->disk_full fails it with SESSION_E_SIZE without scanning. On every failure the
 * directory is back at the head (session_workspace_reset) before this returns.
 */
int session_commit_scan(struct session *s, const struct session_commit_meta *meta,
                        struct store_audit *audit, struct session_delta *delta,
                        struct ws_scan_report *skipped, struct session_err *e);

/*
 * After a failed, cancelled or timed-out command: puts the directory back exactly to
 * the head (full re-sync), so nothing the command left behind leaks into the next one,
 * including entries the scan could not store (names that are not valid keys, FIFOs,
 * sockets, devices); *removed_unstorable (may be NULL) receives how many of those went.
 */
int session_workspace_reset(struct session *s, int64_t *removed_unstorable, struct session_err *e);

/* 1 if the last scan of s's directory left entries on disk that it could not store. */
int session_workspace_has_unstorable(const struct session *s);

/* ---- text extraction (session_extract.c) ------------------------------------------------ */

struct session_extract_opts {
    const char *path;        /* the workspace key of the PDF */
    const char *save_to;     /* where the text goes; NULL: "<path>.txt" */
    const char *description; /* recorded in the checkpoint; may be NULL */
    int64_t first_page;      /* 0: from the first page */
    int64_t last_page;       /* 0: to the last page */
    int layout;              /* keep the physical layout (pdftotext -layout) */
    int64_t timeout_ms;      /* wall clock (extract_timeout_ms) */
    uint64_t max_text_bytes; /* text kept; past it the rest is cut (extract_max_mb) */
    uint64_t memory_bytes;   /* address space of the parser (sandbox_memory_mb) */
    uint64_t cpu_secs;       /* CPU time of the parser (sandbox_cpu_secs) */
};

struct session_extract_result {
    int64_t checkpoint_id;
    char *saved_to;       /* the normal-form key written; freed by the release below */
    int64_t pages;        /* pages whose text was kept (pdftotext ends each with a form feed) */
    int64_t chars;        /* code points of the text written */
    int truncated;        /* 1 if the text was cut at limits.max_output_bytes */
    uint64_t total_bytes; /* bytes pdftotext wrote, kept or not */
};

struct session_extract; /* one extraction in flight */

/*
 * Extracts the text of the PDF at o->path of the head (caller has entered SESSION_WRITE)
 * with Poppler's pdftotext in a sandbox of its own that sees only a read-only copy of the
 * file. Checks first: SESSION_E_FILE_NOT_FOUND for a missing path, SESSION_E_UNSUPPORTED
 * for an extension other than "pdf", SESSION_E_BAD_PATH for a bad save_to,
 * SESSION_E_EXTRACT for an input over max_workspace_mb; then starts the parser on `loop`
 * (a uv_loop_t). On 0, done(ud) comes exactly once on the loop (also after a cancel);
 * the caller then calls session_extract_finish(). On -1 nothing runs and nothing is left.
 */
int session_extract_start(void *loop, struct session *s, const struct session_extract_opts *o,
                          void (*done)(void *ud), void *ud, struct session_extract **out,
                          struct session_err *e);

/* Kills the parser; done still comes, and finish reports ERR_CANCELLED. */
void session_extract_cancel(struct session_extract *x);

/*
 * After done: commits the text at save_to as one new checkpoint (audit appended as in
 * session_edit_commit), or fails with SESSION_E_EXTRACT when the parser failed or hit a
 * limit (the message names which), writing nothing. Frees x in every case. Release *out
 * with session_extract_result_release().
 */
int session_extract_finish(struct session_extract *x, struct store_audit *audit,
                           struct session_extract_result *out, struct session_err *e);

/* start, a private loop, finish: the synchronous form (tests). */
int session_extract_text(struct session *s, const struct session_extract_opts *o,
                         struct store_audit *audit, struct session_extract_result *out,
                         struct session_err *e);
void session_extract_result_release(struct session_extract_result *r);

/* ---- history operations (session_history.c) ---------------------------------------------- */

/*
 * Moves the head to live checkpoint cp (forward history stays live until the next
 * mutation discards it). delta gets the changes from the old head to the new one.
 */
int session_rollback(struct session *s, int64_t cp, struct session_delta *delta,
                     struct session_err *e);

/* Sets (or clears, with NULL or "") the label of live checkpoint cp. */
int session_cp_label(struct session *s, int64_t cp, const char *label, struct session_err *e);

/*
 * Folds live checkpoints from..to into `to` (which keeps its id and files; the others
 * become squashed). from must be > 0 and <= to, both live. A head inside the range
 * moves to `to`. Output, commands and exit code are combined as the reference does.
 */
int session_squash(struct session *s, int64_t from, int64_t to, const char *label,
                   struct session_err *e);

/* Marks live checkpoints from..to dropped (head outside the range, from > 0). */
int session_drop(struct session *s, int64_t from, int64_t to, struct session_err *e);

/* ---- search and diff --------------------------------------------------------------------- */

struct session_match {
    int64_t line_number; /* 1-based within the searched range */
    int64_t byte_offset; /* of the line's start, from the start of the whole file */
    char *line;          /* the line without its newline (and a trailing '\r') */
};

struct session_grep {
    struct session_match *matches;
    size_t n;
};

/*
 * Searches data[0..len) (which starts `base` bytes into the file) line by line with a
 * PCRE2 pattern (UTF mode; inline flags such as (?i) work). The range must be valid
 * UTF-8 (SESSION_E_BINARY). A pattern that does not compile, or that needs more than
 * the match or depth limit on some line (catastrophic backtracking), is
 * SESSION_E_PATTERN; the results past SESSION_READ_MAX bytes are SESSION_E_TOO_LARGE.
 */
int session_grep(const char *pattern, const char *data, size_t len, int64_t base,
                 struct session_grep *out, struct session_err *e);
void session_grep_release(struct session_grep *g);

/*
 * Appends a unified diff (git's format: 3 lines of context, `--- a/` `+++ b/` headers,
 * no-newline markers, modes and symlinks) of manifest `from` against `to` to out,
 * over the keys in `paths` (normal form, n_paths of them) or all keys when n_paths is 0.
 * Files that differ and are not both valid UTF-8 give "Binary file K changed.".
 */
int session_diff(struct session_mgr *m, const struct ws_manifest *from,
                 const struct ws_manifest *to, const char *const *paths, size_t n_paths,
                 struct buf *out, struct session_err *e);

/* 1 if data[0..len) is valid UTF-8 with no NUL byte (so it can travel as JSON text). */
int session_is_text(const void *data, size_t len);

/*
 * The largest n <= len such that data[0..n) ends on a UTF-8 character boundary (drops
 * an incomplete final character, at most 3 bytes).
 */
size_t session_utf8_floor(const void *data, size_t len);

/* ---- waiting for the DB's write lock off the loop (session_lock.c) ------------------ */

/*
 * A call whose store write found the write lock held (store_would_block after a nowait
 * BEGIN) is parked here instead of sleeping on the loop: the store's waiter thread waits
 * for the lock and wakes the loop (uv_async), which then calls fn(arg, 0) so the call
 * tries again, or fn(arg, 1) once the monotonic deadline_ms has passed. loop is the
 * uv_loop_t. Returns a handle for session_lock_cancel, or NULL with err filled (the
 * waiter thread or its handle could not be made). fn is never called from inside this
 * function.
 */
struct session_lockwait;
typedef void (*session_lock_fn)(void *arg, int timed_out);
struct session_lockwait *session_lock_wait(struct session_mgr *m, void *loop, int64_t deadline_ms,
                                           session_lock_fn fn, void *arg, struct err *err);
/* Forgets a parked call (its fn is not called). */
void session_lock_cancel(struct session_mgr *m, struct session_lockwait *w);
/* When the store holds queued rows of read-only calls, writes them once the lock is free
 * (store_queue_flush); a no-op when none are queued or a flush is already parked. */
void session_lock_flush_soon(struct session_mgr *m, void *loop);
/* Stops the waiter thread and closes the loop handle; call before the loop closes.
 * Parked calls are dropped (they were cancelled by then). */
void session_lock_shutdown(struct session_mgr *m);

#endif
