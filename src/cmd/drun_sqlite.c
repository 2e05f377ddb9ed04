/*
 * drun_sqlite.c - build/drun-sqlite.so, a loadable SQLite extension for reading a drun
 * database from the sqlite3 CLI:
 *
 *     sqlite3 -readonly drun.db
 *     sqlite> .load build/drun-sqlite
 *     sqlite> SELECT drun_text(stderr_hash) FROM checkpoints WHERE exit_code <> 0;
 *     sqlite> SELECT path, size FROM drun_manifest((SELECT manifest_hash FROM checkpoints
 *                                                   WHERE session_id = 'ab12cd34' AND id = 3));
 *
 *   drun_blob(hash)      the blob's bytes (raw, zstd or delta: decompressed, hash checked)
 *   drun_text(hash)      the same as text
 *   drun_manifest(hash)  table-valued: one row per manifest entry (path, type, size, hash)
 *   drun_audit_args(args) an audit.args column as the call's full JSON arguments (zstd
 *                        undone, {"$blob":...} references replaced by the blobs' text)
 *
 * A hash is the 32-byte BLOB the tables store or its 64-digit hex text (what the views
 * and drun_manifest show). NULL gives NULL. A missing or damaged blob is an SQL error
 * naming it, never wrong bytes.
 *
 * Blobs are read through the store's own read path (store_blob_get_conn) on the CLI's
 * connection, so deltas, size caps and hash checks behave exactly as in drun. That path
 * calls the SQLite library directly: it assumes the host program uses the shared
 * libsqlite3 (as Debian's sqlite3 CLI does), not a private static copy.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "util/buf.h"
#include "util/hash.h"
#include "util/mem.h"
#include "workspace/workspace.h"

/* The largest blob handed back to SQL; SQLite's own default limit is 1e9 bytes. */
#define SQLEXT_BLOB_MAX ((size_t)1000000000)

int sqlite3_drunsqlite_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);
int sqlite3_extension_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

/* Reads a hash argument; 1 if present, 0 for NULL, -1 (error set on ctx) if malformed. */
static int
arg_hash(sqlite3_context *ctx, sqlite3_value *v, uint8_t out[HASH_LEN])
{
    int type = sqlite3_value_type(v);

    if (type == SQLITE_NULL) {
        return 0;
    }
    if (type == SQLITE_BLOB && sqlite3_value_bytes(v) == HASH_LEN) {
        memcpy(out, sqlite3_value_blob(v), HASH_LEN);
        return 1;
    }
    if (type == SQLITE_TEXT && sqlite3_value_bytes(v) == HASH_HEX_LEN &&
        hex_decode((const char *)sqlite3_value_text(v), out, HASH_LEN) == 0) {
        return 1;
    }
    sqlite3_result_error(ctx,
                         "drun: a hash is a 32-byte blob or 64 hex digits; pass a *_hash column "
                         "or a hex hash from a view",
                         -1);
    return -1;
}

static void
blob_func(sqlite3_context *ctx, int argc, sqlite3_value **argv, int as_text)
{
    uint8_t h[HASH_LEN];
    struct buf out;
    struct err err;
    size_t len = 0;
    char *data;
    int r;

    (void)argc;
    r = arg_hash(ctx, argv[0], h);
    if (r <= 0) {
        if (r == 0) {
            sqlite3_result_null(ctx);
        }
        return;
    }
    buf_init(&out, SQLEXT_BLOB_MAX);
    if (store_blob_get_conn(sqlite3_context_db_handle(ctx), h, &out, &err) < 0) {
        char msg[ERR_MSG_MAX + 8];
        snprintf(msg, sizeof(msg), "drun: %s", err.msg);
        buf_release(&out);
        sqlite3_result_error(ctx, msg, -1);
        return;
    }
    data = buf_detach(&out, &len);
    if (data == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (as_text) {
        sqlite3_result_text64(ctx, data, len, mem_free, SQLITE_UTF8);
    } else {
        sqlite3_result_blob64(ctx, data, len, mem_free);
    }
}

static void
drun_blob(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    blob_func(ctx, argc, argv, 0);
}

static void
drun_text(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    blob_func(ctx, argc, argv, 1);
}

/* drun_audit_args(args): the audit.args column (compressed or not) as the full JSON
 * text, each {"$blob":...} reference replaced by its blob's bytes. */
static void
drun_audit_args(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct buf out;
    struct err err;
    size_t len = 0;
    const void *in;
    char *data;

    (void)argc;
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
        sqlite3_result_null(ctx);
        return;
    }
    in = sqlite3_value_blob(argv[0]);
    buf_init(&out, SQLEXT_BLOB_MAX);
    if (store_audit_args_read(sqlite3_context_db_handle(ctx), in ? in : "",
                              (size_t)sqlite3_value_bytes(argv[0]), &out, &err) < 0) {
        char msg[ERR_MSG_MAX + 8];
        snprintf(msg, sizeof(msg), "drun: %s", err.msg);
        buf_release(&out);
        sqlite3_result_error(ctx, msg, -1);
        return;
    }
    if (out.len == 0 && buf_puts(&out, "") < 0) {
        buf_release(&out);
        sqlite3_result_error_nomem(ctx);
        return;
    }
    data = buf_detach(&out, &len);
    if (data == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text64(ctx, data, len, mem_free, SQLITE_UTF8);
}

/* ---- drun_manifest(hash): a table-valued function ------------------------------------ */

enum { COL_PATH, COL_TYPE, COL_SIZE, COL_HASH, COL_ARG };

struct mf_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
};

struct mf_cursor {
    sqlite3_vtab_cursor base;
    struct ws_manifest *m;
    size_t i;
};

static int
mf_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
           char **errmsg)
{
    struct mf_vtab *v;
    int rc;

    (void)aux;
    (void)argc;
    (void)argv;
    (void)errmsg;
    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(path TEXT, type TEXT, size INTEGER, hash TEXT, "
                                  "manifest HIDDEN)");
    if (rc != SQLITE_OK) {
        return rc;
    }
    v = mem_calloc(1, sizeof(*v));
    if (v == NULL) {
        return SQLITE_NOMEM;
    }
    v->db = db;
    *out = &v->base;
    return SQLITE_OK;
}

static int
mf_disconnect(sqlite3_vtab *vt)
{
    mem_free(vt);
    return SQLITE_OK;
}

static int
mf_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out)
{
    struct mf_cursor *c = mem_calloc(1, sizeof(*c));

    (void)vt;
    if (c == NULL) {
        return SQLITE_NOMEM;
    }
    *out = &c->base;
    return SQLITE_OK;
}

static int
mf_close(sqlite3_vtab_cursor *cur)
{
    struct mf_cursor *c = (struct mf_cursor *)cur;

    ws_manifest_free(c->m);
    mem_free(c);
    return SQLITE_OK;
}

/* The manifest argument is required: plan only with an equality on it. */
static int
mf_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    int arg = -1;

    (void)vt;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->iColumn == COL_ARG && c->op == SQLITE_INDEX_CONSTRAINT_EQ) {
            if (!c->usable) {
                return SQLITE_CONSTRAINT;
            }
            arg = i;
        }
    }
    if (arg < 0) {
        vt->zErrMsg = sqlite3_mprintf("drun_manifest needs a manifest hash: "
                                      "SELECT * FROM drun_manifest(manifest_hash)");
        return SQLITE_ERROR;
    }
    info->aConstraintUsage[arg].argvIndex = 1;
    info->aConstraintUsage[arg].omit = 1;
    info->estimatedCost = 1000;
    info->estimatedRows = 1000;
    return SQLITE_OK;
}

static int
mf_filter(sqlite3_vtab_cursor *cur, int idx, const char *idxstr, int argc, sqlite3_value **argv)
{
    struct mf_cursor *c = (struct mf_cursor *)cur;
    struct mf_vtab *v = (struct mf_vtab *)cur->pVtab;
    uint8_t h[HASH_LEN];
    struct buf bytes;
    struct err err;

    (void)idx;
    (void)idxstr;
    ws_manifest_free(c->m);
    c->m = NULL;
    c->i = 0;
    if (argc < 1 || sqlite3_value_type(argv[0]) == SQLITE_NULL) {
        return SQLITE_OK; /* no rows */
    }
    if (sqlite3_value_type(argv[0]) == SQLITE_BLOB && sqlite3_value_bytes(argv[0]) == HASH_LEN) {
        memcpy(h, sqlite3_value_blob(argv[0]), HASH_LEN);
    } else if (sqlite3_value_type(argv[0]) == SQLITE_TEXT &&
               sqlite3_value_bytes(argv[0]) == HASH_HEX_LEN &&
               hex_decode((const char *)sqlite3_value_text(argv[0]), h, HASH_LEN) == 0) {
        /* hex */
    } else {
        sqlite3_free(v->base.zErrMsg);
        v->base.zErrMsg = sqlite3_mprintf("drun_manifest: a hash is a 32-byte blob or 64 hex "
                                          "digits; pass checkpoints.manifest_hash");
        return SQLITE_ERROR;
    }
    buf_init(&bytes, STORE_BLOB_MAX_DEFAULT);
    if (store_blob_get_conn(v->db, h, &bytes, &err) < 0 ||
        ws_manifest_decode(bytes.data ? bytes.data : "", bytes.len, &c->m, &err) < 0) {
        buf_release(&bytes);
        sqlite3_free(v->base.zErrMsg);
        v->base.zErrMsg = sqlite3_mprintf("drun_manifest: %s", err.msg);
        return SQLITE_ERROR;
    }
    buf_release(&bytes);
    return SQLITE_OK;
}

static int
mf_next(sqlite3_vtab_cursor *cur)
{
    ((struct mf_cursor *)cur)->i++;
    return SQLITE_OK;
}

static int
mf_eof(sqlite3_vtab_cursor *cur)
{
    struct mf_cursor *c = (struct mf_cursor *)cur;

    return c->m == NULL || c->i >= ws_manifest_count(c->m);
}

static int
mf_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    struct mf_cursor *c = (struct mf_cursor *)cur;
    const struct ws_entry *e = ws_manifest_at(c->m, c->i);
    char hex[HASH_HEX_LEN + 1];
    static const char *const types[] = {"?", "file", "exec", "symlink", "dir"};

    switch (col) {
    case COL_PATH:
        sqlite3_result_text(ctx, e->path, -1, SQLITE_TRANSIENT);
        break;
    case COL_TYPE:
        sqlite3_result_text(ctx, types[e->type >= 1 && e->type <= 4 ? e->type : 0], -1,
                            SQLITE_STATIC);
        break;
    case COL_SIZE:
        sqlite3_result_int64(ctx, (sqlite3_int64)e->size);
        break;
    case COL_HASH:
        if (e->type == WS_DIR) {
            sqlite3_result_null(ctx);
        } else {
            hex_encode(e->hash, HASH_LEN, hex);
            sqlite3_result_text(ctx, hex, HASH_HEX_LEN, SQLITE_TRANSIENT);
        }
        break;
    default:
        sqlite3_result_null(ctx);
        break;
    }
    return SQLITE_OK;
}

static int
mf_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
    *rowid = (sqlite3_int64)((struct mf_cursor *)cur)->i;
    return SQLITE_OK;
}

static sqlite3_module manifest_module = {
    .iVersion = 0,
    .xConnect = mf_connect,
    .xBestIndex = mf_best_index,
    .xDisconnect = mf_disconnect,
    .xOpen = mf_open,
    .xClose = mf_close,
    .xFilter = mf_filter,
    .xNext = mf_next,
    .xEof = mf_eof,
    .xColumn = mf_column,
    .xRowid = mf_rowid,
};

int
sqlite3_drunsqlite_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
    int rc;
    const int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC;

    (void)pzErrMsg;
    SQLITE_EXTENSION_INIT2(pApi);
    rc = sqlite3_create_function(db, "drun_blob", 1, flags, NULL, drun_blob, NULL, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_function(db, "drun_text", 1, flags, NULL, drun_text, NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_function(db, "drun_audit_args", 1, flags, NULL, drun_audit_args, NULL,
                                     NULL);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_create_module(db, "drun_manifest", &manifest_module, NULL);
    }
    return rc;
}

int
sqlite3_extension_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
    return sqlite3_drunsqlite_init(db, pzErrMsg, pApi);
}
