/*
 * store_int.h - what the store_*.c files share and nobody else may include.
 *
 * The connection, its cached prepared statements, the transaction helpers that make
 * "inside a caller's bracket or on our own" one line, and the translation of SQLite
 * result codes into drun's error codes (so SQLite codes never leave the module).
 */
#ifndef DRUN_STORE_INT_H
#define DRUN_STORE_INT_H

#include <sqlite3.h>

#include "store/store.h"

#define STORE_APPLICATION_ID 0x6472756e /* 'drun' */
#define STORE_STMT_CACHE     48

struct store_migration {
    int version;
    const char *name;
    const char *sql;
};
extern const struct store_migration store_migrations[];
extern const size_t store_migrations_count;

struct store_stmt {
    const char *sql; /* the static SQL text; compared by pointer */
    sqlite3_stmt *stmt;
};

struct store {
    sqlite3 *db;
    char *path;
    int in_bracket; /* store_begin() is open */
    int busy_timeout_ms;
    int zstd_level;
    size_t blob_max;
    int read_only;
    int sync_normal;     /* PRAGMA synchronous = NORMAL (else FULL), for other connections */
    int version_at_open; /* user_version found before migrating */
    void *zcctx;         /* ZSTD_CCtx, made on first compress */
    void *zdctx;         /* ZSTD_DCtx, made on first decompress */
    struct store_stmt stmts[STORE_STMT_CACHE];
    struct store_wal *wal; /* the background checkpointer, or NULL (store_wal.c) */

    /* Waiting for the write lock off the caller's thread (store_lock.c). */
    int nowait;                /* a BEGIN that would wait for another connection fails at once */
    int would_block;           /* a nowait BEGIN found the write lock held (store_would_block) */
    struct store_lockwait *lw; /* the waiter thread, or NULL */

    /* The file we opened (store_lock.c): its identity, checked before every write. */
    int ident_fd; /* our own read-only fd of the DB file, -1 when not checked */
    dev_t db_dev, wal_dev;
    ino_t db_ino, wal_ino;
    int wal_known; /* the -wal's identity was recorded */
    int stale;     /* the DB or its -wal was unlinked or replaced: every write refused */
    char stale_msg[200];

    /* Audit and step rows of read-only calls waiting for the write lock (store_queue.c). */
    struct store_qrow *q_head, *q_tail;
    size_t q_rows, q_bytes;
};

/* Records the DB's and its -wal's identity after open (store_lock.c); no-op read-only. */
void store_ident_init(struct store *st);
/* ERR_STALE if the DB file or its -wal is no longer the one opened (sticky). */
int store_ident_check(struct store *st, struct err *err);
/* Stops the lock waiter and closes the identity fd (store_lock.c). */
void store_lock_close(struct store *st);
/* Writes what the queue holds in one transaction (store_queue.c); frees it on success. */
int store_queue_write(struct store *st, struct err *err);
/* Frees the queue without writing; returns how many rows were dropped. */
size_t store_queue_drop(struct store *st);

/* Starts the checkpointer when opts->wal_thread asks for it (store_wal.c); on failure
 * st->wal may hold a part-built one that store_wal_stop frees. */
int store_wal_start(struct store *st, const struct store_opts *opts, struct err *err);
/* Stops and joins the thread, then runs the final checkpoint; no-op when off. */
void store_wal_stop(struct store *st);

/*
 * Returns the cached prepared statement for `sql` (a string literal: the pointer is
 * the key), reset and with no bindings; NULL with err filled on failure. The caller
 * calls sqlite3_reset() when done so no read snapshot stays pinned.
 */
sqlite3_stmt *store_stmt(struct store *st, const char *sql, struct err *err);

/* Fills err from a SQLite result code with "cannot <what>"; returns -1. */
int store_sqlerr(struct store *st, int rc, const char *what, struct err *err);

/*
 * Opens a write transaction unless a bracket is already open: *own is 1 if this call
 * opened it. store_tx_end() commits (rc == 0) or rolls back what store_tx_begin opened
 * and returns rc, or -1 if the commit failed. Inside a caller's bracket both only
 * pass rc through: the caller commits or rolls back.
 */
int store_tx_begin(struct store *st, int *own, struct err *err);
int store_tx_end(struct store *st, int own, int rc, struct err *err);

/* Runs one SQL statement with no result rows (no bindings). */
int store_exec(struct store *st, const char *sql, struct err *err);

/* Binds text or NULL; binds a hash or NULL. */
int store_bind_text(sqlite3_stmt *s, int i, const char *text);
int store_bind_hash(sqlite3_stmt *s, int i, const uint8_t *hash);

/* Returns a mem_strdup copy of a text column or NULL (NULL column). *oom set to 1 on
 * allocation failure. */
char *store_col_strdup(sqlite3_stmt *s, int i, int *oom);

/* Checks a caller string against a cap: ERR_INVAL if NULL and required, ERR_TOOBIG past
 * max. `what` names the field in the message. */
int store_check_text(const char *s, size_t max, int required, const char *what, struct err *err);

/* Reads a blob's stored row and decodes it into out (see store_blob_get). */
int store_blob_read(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out,
                    struct err *err);

/* zstd helpers: compress src into *dst (caller frees with mem_free) if it gets smaller
 * than `limit` bytes (0: than len); returns 0 with *dst NULL when it does not. With a
 * prefix (a delta blob's base bytes, NULL for none) the frame references it, so only
 * what differs from the base costs space. */
int store_zstd_compress(struct store *st, const void *src, size_t len, const void *prefix,
                        size_t prefix_len, size_t limit, void **dst, size_t *dst_len,
                        struct err *err);
/* Decompresses one frame whose content size must be exactly `size`, appending to out;
 * prefix as given to the compression (NULL for none). */
int store_zstd_decompress(struct store *st, const void *src, size_t len, const void *prefix,
                          size_t prefix_len, size_t size, struct buf *out, const char *what,
                          struct err *err);

/* Random lower-case hex of n bytes (2n chars + NUL into out). */
int store_random_hex(char *out, size_t nbytes, struct err *err);

/* store_blob.c, for store_blob_stream.c */
/* Stores data (as a delta against base when that is smaller, base NULL for none) under its
 * SHA-256, into hash; a blob already stored is kept. 0, or -1 with err. */
int store_blob_put_row(struct store *st, const void *data, size_t len, const uint8_t *base,
                       uint8_t hash[HASH_LEN], struct err *err);

/* store_snapshot.c, for store_snapshot_file.c */
/* The columns checkpoints and snapshot_checkpoints have in common, in this order. */
#define CP_BODY                                                                                    \
    "id, parent, tool, command, description, label, exit_code, duration_ms, created_ms, "          \
    "stdout_hash, stdout_bytes, stderr_hash, stderr_bytes, manifest_hash, file_count, added, "     \
    "modified, removed, logical_bytes, status"

/* Prepares sql into *s; 0, or -1 with err. */
int store_snap_prep(struct store *st, const char *sql, sqlite3_stmt **s, struct err *err);
/* Steps a statement with no result rows to the end, finalizes it, translates errors. */
int store_snap_done(struct store *st, sqlite3_stmt *s, const char *what, struct err *err);
/* Runs `sql` with ?1 = an int64 and ?2 = a text (either may be unused). */
int store_snap_run(struct store *st, const char *sql, int64_t a, const char *b, const char *what,
                   struct err *err);
/* Runs a query whose first column of the first row is an integer into *out (0 if none). */
int store_snap_query_int(struct store *st, const char *sql, const char *text, int64_t *out,
                         struct err *err);
/* Loads a snapshot by name from schema `db` ("main" or an attached one). */
int store_snapshot_get_in(struct store *st, const char *db, const char *name,
                          struct store_snapshot *out, struct err *err);
/* 0 if no snapshot in main has this name, else -1 with ERR_EXISTS naming what to do. */
int store_snap_name_taken(struct store *st, const char *name, struct err *err);

#endif
