/*
 * store.c - opening the drun DB, migrations, transactions and the shared helpers.
 *
 * Opening is careful about three things. The file is created by us, 0600, before
 * SQLite touches it, so session contents and audit rows are never world-readable
 * (SQLite gives the -wal and -shm files the same mode as the database file). The
 * file must be ours: PRAGMA application_id is 'drun', or 0 on an empty file, and a
 * user_version newer than this binary is refused rather than misread. And damage is
 * reported, never repaired: SQLITE_CORRUPT or SQLITE_NOTADB at open becomes
 * ERR_CORRUPT telling the operator to restore a backup.
 *
 * Invariants: every write runs in a BEGIN IMMEDIATE transaction (the caller's bracket
 * or one the write function opens itself), so a writer takes the lock before reading
 * what it will change and two processes never interleave half a checkpoint. SQL text
 * is always a literal with bound parameters; no input is ever pasted into SQL.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "util/log.h"
#include "util/mem.h"

#define BUSY_TIMEOUT_DEFAULT 5000
#define ZSTD_LEVEL_DEFAULT   3

int
store_schema_version(void)
{
    int v = 0;

    for (size_t i = 0; i < store_migrations_count; i++) {
        if (store_migrations[i].version > v) {
            v = store_migrations[i].version;
        }
    }
    return v;
}

const char *
store_path(const struct store *st)
{
    return st->path;
}

int
store_version_at_open(const struct store *st)
{
    return st->version_at_open;
}

struct sqlite3 *
store_db(struct store *st)
{
    return st->db;
}

int
store_sqlerr(struct store *st, int rc, const char *what, struct err *err)
{
    const char *path = st ? st->path : "?";
    const char *msg = (st && st->db) ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
    int sys = (st && st->db) ? sqlite3_system_errno(st->db) : 0;

    if (rc == SQLITE_IOERR_NOMEM) {
        rc = SQLITE_NOMEM;
    }
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return err_set(err, ERR_BUSY,
                       "database '%s' is busy: another process held it for more than %d ms; "
                       "try again",
                       path, st ? st->busy_timeout_ms : 0);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return err_set(err, ERR_CORRUPT, "database '%s' is corrupt: %s; restore it from a backup",
                       path, msg);
    case SQLITE_NOMEM:
        return err_set(err, ERR_NOMEM, "cannot %s: out of memory", what);
    case SQLITE_FULL:
        return err_set(err, ERR_IO, "cannot %s in '%s': the disk is full; free some space", what,
                       path);
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
        if (sys != 0) {
            return err_set(err, ERR_IO, "cannot %s in '%s': %s (%s)", what, path, msg,
                           strerror(sys));
        }
        return err_set(err, ERR_IO,
                       "cannot %s in '%s': %s; check free disk space, file size limits and "
                       "permissions",
                       what, path, msg);
    case SQLITE_CONSTRAINT:
        if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
            return err_set(err, ERR_NOTFOUND,
                           "cannot %s: a session, checkpoint or blob it refers to does not exist",
                           what);
        }
        return err_set(err, ERR_INVAL, "cannot %s: %s", what, msg);
    case SQLITE_TOOBIG:
        return err_set(err, ERR_TOOBIG, "cannot %s: the value is too big for the database", what);
    default:
        return err_set(err, ERR_DB, "cannot %s in '%s': %s", what, path, msg);
    }
}

sqlite3_stmt *
store_stmt(struct store *st, const char *sql, struct err *err)
{
    struct store_stmt *slot = NULL;
    int rc;

    for (size_t i = 0; i < STORE_STMT_CACHE; i++) {
        if (st->stmts[i].sql == sql) {
            sqlite3_reset(st->stmts[i].stmt);
            sqlite3_clear_bindings(st->stmts[i].stmt);
            return st->stmts[i].stmt;
        }
        if (slot == NULL && st->stmts[i].sql == NULL) {
            slot = &st->stmts[i];
        }
    }
    if (slot == NULL) {
        /* More distinct statements than slots is a bug in this module. */
        err_set(err, ERR_INTERNAL, "store statement cache is full");
        return NULL;
    }
    rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &slot->stmt, NULL);
    if (rc != SQLITE_OK) {
        store_sqlerr(st, rc, "prepare a query", err);
        slot->stmt = NULL;
        return NULL;
    }
    slot->sql = sql;
    return slot->stmt;
}

int
store_exec(struct store *st, const char *sql, struct err *err)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

    if (rc != SQLITE_OK) {
        return store_sqlerr(st, rc, "update the database", err);
    }
    return 0;
}

int
store_bind_text(sqlite3_stmt *s, int i, const char *text)
{
    if (text == NULL) {
        return sqlite3_bind_null(s, i);
    }
    return sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC);
}

int
store_bind_hash(sqlite3_stmt *s, int i, const uint8_t *hash)
{
    if (hash == NULL) {
        return sqlite3_bind_null(s, i);
    }
    return sqlite3_bind_blob(s, i, hash, HASH_LEN, SQLITE_STATIC);
}

char *
store_col_strdup(sqlite3_stmt *s, int i, int *oom)
{
    const unsigned char *t;
    char *copy;

    if (sqlite3_column_type(s, i) == SQLITE_NULL) {
        return NULL;
    }
    t = sqlite3_column_text(s, i);
    if (t == NULL) {
        *oom = 1;
        return NULL;
    }
    copy = mem_strndup((const char *)t, (size_t)sqlite3_column_bytes(s, i));
    if (copy == NULL) {
        *oom = 1;
    }
    return copy;
}

int
store_check_text(const char *s, size_t max, int required, const char *what, struct err *err)
{
    size_t n;

    if (s == NULL) {
        if (required) {
            return err_set(err, ERR_INVAL, "%s is missing; give one", what);
        }
        return 0;
    }
    n = strlen(s);
    if (n > max) {
        return err_set(err, ERR_TOOBIG, "%s is %zu bytes, more than the limit of %zu; shorten it",
                       what, n, max);
    }
    return 0;
}

int
store_random_hex(char *out, size_t nbytes, struct err *err)
{
    uint8_t raw[32];

    if (nbytes > sizeof(raw)) {
        return err_set(err, ERR_INTERNAL, "random id too long");
    }
    for (size_t got = 0; got < nbytes;) {
        ssize_t r = getrandom(raw + got, nbytes - got, 0);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(err, ERR_IO, "cannot read random bytes: %s", strerror(errno));
        }
        got += (size_t)r;
    }
    hex_encode(raw, nbytes, out);
    return 0;
}

/* ---- transactions ------------------------------------------------------------------ */

static int
begin_immediate(struct store *st, struct err *err)
{
    int rc;

    if (store_ident_check(st, err) < 0) {
        return -1;
    }
    if (st->nowait) {
        /* Only this statement: reads keep waiting out a brief checkpoint lock. */
        sqlite3_busy_timeout(st->db, 0);
    }
    rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (st->nowait) {
        sqlite3_busy_timeout(st->db, st->busy_timeout_ms);
        if ((rc & 0xff) == SQLITE_BUSY) {
            st->would_block = 1;
            return err_set(err, ERR_BUSY,
                           "the write lock of database '%s' is held by another connection",
                           st->path);
        }
    }
    if (rc != SQLITE_OK) {
        return store_sqlerr(st, rc, "begin a transaction", err);
    }
    return 0;
}

static int
commit(struct store *st, struct err *err)
{
    int rc;

    /* The last moment to notice the file is gone: nothing is acknowledged into it. */
    if (store_ident_check(st, err) < 0) {
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);

    if (rc != SQLITE_OK) {
        store_sqlerr(st, rc, "commit", err);
        /* A failed COMMIT may leave the transaction open (e.g. SQLITE_BUSY); end it so
         * nothing half-done can be committed later by accident. */
        if (!sqlite3_get_autocommit(st->db)) {
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        }
        return -1;
    }
    return 0;
}

int
store_begin(struct store *st, struct err *err)
{
    if (st->in_bracket) {
        return err_set(err, ERR_INTERNAL, "store_begin called inside an open bracket");
    }
    if (st->read_only) {
        return err_set(err, ERR_DENIED, "database '%s' is open read-only", st->path);
    }
    if (begin_immediate(st, err) < 0) {
        return -1;
    }
    st->in_bracket = 1;
    return 0;
}

int
store_commit(struct store *st, struct err *err)
{
    if (!st->in_bracket) {
        return err_set(err, ERR_INTERNAL, "store_commit called without store_begin");
    }
    st->in_bracket = 0;
    return commit(st, err);
}

void
store_rollback(struct store *st)
{
    if (st == NULL || st->db == NULL) {
        return;
    }
    st->in_bracket = 0;
    if (!sqlite3_get_autocommit(st->db)) {
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    }
}

int
store_tx_begin(struct store *st, int *own, struct err *err)
{
    *own = 0;
    if (st->in_bracket) {
        return 0;
    }
    if (st->read_only) {
        return err_set(err, ERR_DENIED, "database '%s' is open read-only", st->path);
    }
    if (begin_immediate(st, err) < 0) {
        return -1;
    }
    *own = 1;
    return 0;
}

int
store_tx_end(struct store *st, int own, int rc, struct err *err)
{
    if (!own) {
        return rc;
    }
    if (rc == 0) {
        return commit(st, err);
    }
    if (!sqlite3_get_autocommit(st->db)) {
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    }
    return rc;
}

/* ---- zstd --------------------------------------------------------------------------- */

int
store_zstd_compress(struct store *st, const void *src, size_t len, const void *prefix,
                    size_t prefix_len, size_t limit, void **dst, size_t *dst_len, struct err *err)
{
    size_t bound, n;
    void *out;

    *dst = NULL;
    *dst_len = 0;
    if (limit == 0 || limit > len) {
        limit = len;
    }
    if (limit < 16 || (prefix == NULL && len < 64)) {
        return 0; /* a frame header alone eats most of what could be saved */
    }
    if (st->zcctx == NULL) {
        st->zcctx = ZSTD_createCCtx();
        if (st->zcctx == NULL) {
            return err_set(err, ERR_NOMEM, "cannot compress: out of memory");
        }
    }
    /* Only a result strictly smaller than the limit is worth keeping, so the output
     * buffer is limit - 1 bytes: zstd fails with dstSize_tooSmall when it would not fit. */
    bound = limit - 1;
    out = mem_alloc(bound);
    if (out == NULL) {
        return err_set(err, ERR_NOMEM, "cannot compress %zu bytes: out of memory", len);
    }
    ZSTD_CCtx_reset(st->zcctx, ZSTD_reset_session_and_parameters);
    n = ZSTD_CCtx_setParameter(st->zcctx, ZSTD_c_compressionLevel, st->zstd_level);
    if (!ZSTD_isError(n)) {
        n = ZSTD_CCtx_setParameter(st->zcctx, ZSTD_c_contentSizeFlag, 1);
    }
    if (!ZSTD_isError(n) && prefix != NULL) {
        n = ZSTD_CCtx_refPrefix(st->zcctx, prefix, prefix_len);
    }
    if (!ZSTD_isError(n)) {
        n = ZSTD_compress2(st->zcctx, out, bound, src, len);
    }
    if (ZSTD_isError(n)) {
        mem_free(out);
        if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall) {
            return 0;
        }
        return err_set(err, ERR_INTERNAL, "cannot compress: %s", ZSTD_getErrorName(n));
    }
    *dst = out;
    *dst_len = n;
    return 0;
}

int
store_zstd_decompress(struct store *st, const void *src, size_t len, const void *prefix,
                      size_t prefix_len, size_t size, struct buf *out, const char *what,
                      struct err *err)
{
    unsigned long long content = ZSTD_getFrameContentSize(src, len);
    size_t n;

    /* The frame must declare exactly the stored size; otherwise a crafted frame could
     * make us allocate or write more than the row promises (a zip bomb). */
    if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
        content != (unsigned long long)size) {
        return err_set(err, ERR_CORRUPT,
                       "%s is corrupt: its zstd frame does not declare the stored size %zu; "
                       "restore the database from a backup",
                       what, size);
    }
    if (buf_grow(out, size) < 0) {
        return buf_err(out, what, err);
    }
    if (st->zdctx == NULL) {
        st->zdctx = ZSTD_createDCtx();
        if (st->zdctx == NULL) {
            return err_set(err, ERR_NOMEM, "cannot decompress %s: out of memory", what);
        }
    }
    ZSTD_DCtx_reset(st->zdctx, ZSTD_reset_session_and_parameters);
    n = 0;
    if (prefix != NULL) {
        n = ZSTD_DCtx_refPrefix(st->zdctx, prefix, prefix_len);
    }
    if (!ZSTD_isError(n)) {
        n = ZSTD_decompressDCtx(st->zdctx, out->data + out->len, size, src, len);
    }
    if (ZSTD_isError(n) || n != size) {
        return err_set(err, ERR_CORRUPT, "%s is corrupt: %s; restore the database from a backup",
                       what, ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short decompression");
    }
    out->len += size;
    out->data[out->len] = '\0';
    return 0;
}

/* ---- opening ------------------------------------------------------------------------- */

static int
pragma_int(struct store *st, const char *sql, int64_t *out, struct err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);

    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(s, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *out = 0;
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK) {
        return store_sqlerr(st, rc, "read the database header", err);
    }
    return 0;
}

static int
migrate(struct store *st, int64_t from, struct err *err)
{
    char pragma[64];

    for (size_t i = 0; i < store_migrations_count; i++) {
        const struct store_migration *m = &store_migrations[i];
        int64_t now;
        int rc;

        if (m->version <= from) {
            continue;
        }
        if (begin_immediate(st, err) < 0) {
            return err_wrap(err, "cannot migrate '%s'", st->path);
        }
        /* Another process may have migrated while we waited for the lock. */
        if (pragma_int(st, "PRAGMA user_version", &now, err) < 0) {
            goto fail;
        }
        if (now >= m->version) {
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            continue;
        }
        rc = sqlite3_exec(st->db, m->sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            store_sqlerr(st, rc, "apply a migration", err);
            err_wrap(err, "migration '%s'", m->name);
            goto fail;
        }
        snprintf(pragma, sizeof(pragma), "PRAGMA application_id = %d", STORE_APPLICATION_ID);
        if (store_exec(st, pragma, err) < 0) {
            goto fail;
        }
        snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", m->version);
        if (store_exec(st, pragma, err) < 0 || commit(st, err) < 0) {
            goto fail;
        }
        continue;
    fail:
        if (!sqlite3_get_autocommit(st->db)) {
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        }
        return -1;
    }
    return 0;
}

/* Creates the file 0600 if it is absent; ERR_NOTFOUND in read-only mode. */
static int
create_file(const char *path, int read_only, struct err *err)
{
    int fd;

    if (read_only) {
        if (access(path, F_OK) != 0) {
            return err_set(err, ERR_NOTFOUND,
                           "database '%s' does not exist; check the path or create it with "
                           "'drun-admin --db %s db migrate'",
                           path, path);
        }
        return 0;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        if (errno == EEXIST) {
            return 0;
        }
        return err_set(err, ERR_IO, "cannot create database '%s': %s", path, strerror(errno));
    }
    close(fd);
    return 0;
}

static int
check_identity(struct store *st, int64_t *version, struct err *err)
{
    int64_t app_id = 0, tables = 0;

    if (pragma_int(st, "PRAGMA application_id", &app_id, err) < 0 ||
        pragma_int(st, "PRAGMA user_version", version, err) < 0 ||
        pragma_int(st, "SELECT count(*) FROM sqlite_master", &tables, err) < 0) {
        return -1;
    }
    if (app_id != STORE_APPLICATION_ID) {
        if (app_id != 0) {
            return err_set(err, ERR_INVAL,
                           "'%s' is not a drun database (application_id 0x%08llx); "
                           "give the path of a drun database",
                           st->path, (unsigned long long)(uint32_t)app_id);
        }
        if (tables != 0 || *version != 0) {
            return err_set(err, ERR_INVAL,
                           "'%s' is not a drun database (application_id 0 and it already holds "
                           "tables); give the path of a drun database",
                           st->path);
        }
    }
    if (*version > store_schema_version()) {
        return err_set(err, ERR_VERSION,
                       "database '%s' has schema version %lld, newer than this drun's version %d; "
                       "use a newer drun",
                       st->path, (long long)*version, store_schema_version());
    }
    return 0;
}

int
store_open(const char *path, const struct store_opts *opts, struct store **out, struct err *err)
{
    static const struct store_opts defaults;
    struct store *st = NULL;
    int64_t version = 0;
    int flags, rc;
    int sqlite_max;

    *out = NULL;
    if (opts == NULL) {
        opts = &defaults;
    }
    if (path == NULL || *path == '\0') {
        return err_set(err, ERR_INVAL, "no database path given; pass one");
    }
    if (opts->zstd_level < 0 || opts->zstd_level > ZSTD_maxCLevel()) {
        return err_set(err, ERR_INVAL, "zstd level %d is out of range 1..%d", opts->zstd_level,
                       ZSTD_maxCLevel());
    }
    if (create_file(path, opts->read_only, err) < 0) {
        return -1;
    }
    st = mem_calloc(1, sizeof(*st));
    if (st == NULL || (st->path = mem_strdup(path)) == NULL) {
        mem_free(st);
        return err_set(err, ERR_NOMEM, "cannot open '%s': out of memory", path);
    }
    st->ident_fd = -1;
    st->read_only = opts->read_only;
    st->busy_timeout_ms = opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : BUSY_TIMEOUT_DEFAULT;
    st->zstd_level = opts->zstd_level > 0 ? opts->zstd_level : ZSTD_LEVEL_DEFAULT;
    st->blob_max = opts->blob_max > 0 ? opts->blob_max : STORE_BLOB_MAX_DEFAULT;

    flags = (opts->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX |
            SQLITE_OPEN_NOFOLLOW;
    rc = sqlite3_open_v2(path, &st->db, flags, NULL);
    if (rc != SQLITE_OK) {
        if (st->db == NULL) {
            rc = SQLITE_NOMEM;
        }
        store_sqlerr(st, rc, "open the database", err);
        goto fail;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, st->busy_timeout_ms);
    /* SQLite's own cap on one value (1e9 bytes by default) is below our 1 GiB default:
     * keep the blob cap under it so a big blob fails with our message, not SQLite's. */
    sqlite_max = sqlite3_limit(st->db, SQLITE_LIMIT_LENGTH, -1);
    if (sqlite_max > 0 && st->blob_max > (size_t)sqlite_max - 1024) {
        st->blob_max = (size_t)sqlite_max - 1024;
    }
    if (check_identity(st, &version, err) < 0) {
        goto fail;
    }
    st->version_at_open = (int)version;
    if (!opts->read_only) {
        int64_t ignored;
        if (pragma_int(st, "PRAGMA journal_mode = WAL", &ignored, err) < 0) {
            goto fail;
        }
    }
    st->sync_normal = opts->synchronous_normal != 0;
    if (store_exec(st,
                   opts->synchronous_normal ? "PRAGMA synchronous = NORMAL"
                                            : "PRAGMA synchronous = FULL",
                   err) < 0 ||
        store_exec(st, "PRAGMA foreign_keys = ON", err) < 0) {
        goto fail;
    }
    if (version < store_schema_version()) {
        if (opts->read_only || opts->no_migrate) {
            err_set(err, ERR_VERSION,
                    "database '%s' has schema version %lld, older than this drun's version %d; "
                    "run 'drun-admin --db %s db migrate'",
                    path, (long long)version, store_schema_version(), path);
            goto fail;
        }
        if (migrate(st, version, err) < 0) {
            goto fail;
        }
    }
    if (store_wal_start(st, opts, err) < 0) {
        goto fail;
    }
    store_ident_init(st);
    *out = st;
    return 0;
fail:
    store_close(st);
    return -1;
}

void
store_close(struct store *st)
{
    if (st == NULL) {
        return;
    }
    store_rollback(st);
    store_lock_close(st);
    if (st->q_rows > 0) {
        struct err qerr;
        size_t n = st->q_rows;
        st->nowait = 0; /* the last chance: wait the busy timeout for the lock */
        if (store_queue_write(st, &qerr) < 0) {
            log_warn("%zu queued audit and step rows of read-only calls were not written: %s", n,
                     qerr.msg);
        }
    }
    store_queue_drop(st);
    for (size_t i = 0; i < STORE_STMT_CACHE; i++) {
        sqlite3_finalize(st->stmts[i].stmt);
    }
    store_wal_stop(st);
    sqlite3_close(st->db);
    if (st->ident_fd >= 0) {
        close(st->ident_fd); /* after the connection: a close drops the process's locks */
    }
    ZSTD_freeCCtx(st->zcctx);
    ZSTD_freeDCtx(st->zdctx);
    mem_free(st->path);
    mem_free(st);
}
