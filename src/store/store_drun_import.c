/*
 * store_drun_import.c - the store's half of importing the original drun's .drun files,
 * and the blob read path the sqlite3 extension uses.
 *
 * A .drun file is the magic "DRUN" followed by one zstd stream of JSON (reference
 * §6.1). The JSON is decoded above this layer (cJSON lives in tools and cmd); this
 * file unpacks the bytes, with the output bounded by the caller's buffer so a small
 * file cannot expand into gigabytes, and stores a snapshot from plain values
 * (store_snapshot_insert), which the caller runs in the same bracket as the blob puts
 * so a failure anywhere keeps nothing.
 *
 * store_blob_get_conn wraps a borrowed connection (the sqlite3 CLI's) in a throwaway
 * struct store so the extension reads blobs through exactly the code drun uses:
 * size, codec, delta chain and hash checks included.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "util/mem.h"
#include "util/timeutil.h"

#define DRUN_MAGIC     "DRUN"
#define DRUN_MAGIC_LEN 4

int
store_drun_unpack(const void *data, size_t len, struct buf *json, struct err *err)
{
    ZSTD_DCtx *dctx = NULL;
    ZSTD_inBuffer in;
    size_t ret = 1, start = json->len;
    char chunk[65536];
    int rc = -1;

    if (len < DRUN_MAGIC_LEN || memcmp(data, DRUN_MAGIC, DRUN_MAGIC_LEN) != 0) {
        return err_set(err, ERR_CORRUPT,
                       "not a valid .drun snapshot: missing magic bytes 'DRUN' at the start");
    }
    dctx = ZSTD_createDCtx();
    if (dctx == NULL) {
        return err_set(err, ERR_NOMEM, "cannot unpack the .drun snapshot: out of memory");
    }
    in.src = (const char *)data + DRUN_MAGIC_LEN;
    in.size = len - DRUN_MAGIC_LEN;
    in.pos = 0;
    if (in.size == 0) {
        err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: nothing after the magic bytes");
        goto out;
    }
    while (in.pos < in.size) {
        ZSTD_outBuffer o = {chunk, sizeof(chunk), 0};
        ret = ZSTD_decompressStream(dctx, &o, &in);
        if (ZSTD_isError(ret)) {
            err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: its zstd data is damaged (%s)",
                    ZSTD_getErrorName(ret));
            goto out;
        }
        if (buf_append(json, chunk, o.pos) < 0) {
            buf_err(json, ".drun snapshot contents", err);
            goto out;
        }
        if (ret == 0 && in.pos < in.size) {
            /* Another frame follows: keep going (zstd allows concatenated frames). */
            continue;
        }
    }
    /* Flush what the decoder still holds once the input is consumed. */
    while (ret != 0) {
        ZSTD_outBuffer o = {chunk, sizeof(chunk), 0};
        ret = ZSTD_decompressStream(dctx, &o, &in);
        if (ZSTD_isError(ret)) {
            err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: its zstd data is damaged (%s)",
                    ZSTD_getErrorName(ret));
            goto out;
        }
        if (buf_append(json, chunk, o.pos) < 0) {
            buf_err(json, ".drun snapshot contents", err);
            goto out;
        }
        if (o.pos == 0 && ret != 0) {
            err_set(err, ERR_CORRUPT,
                    "not a valid .drun snapshot: its zstd data is truncated; the file is "
                    "incomplete");
            goto out;
        }
    }
    rc = 0;
out:
    ZSTD_freeDCtx(dctx);
    if (rc < 0) {
        buf_truncate(json, start);
    }
    return rc;
}

static int
exec_stmt(struct store *st, sqlite3_stmt *s, const char *what, struct err *err)
{
    int rc = sqlite3_step(s);

    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        return store_sqlerr(st, rc, what, err);
    }
    return 0;
}

static int
prepare(struct store *st, const char *sql, sqlite3_stmt **s, struct err *err)
{
    int rc = sqlite3_prepare_v2(st->db, sql, -1, s, NULL);

    if (rc != SQLITE_OK) {
        sqlite3_finalize(*s);
        *s = NULL;
        return store_sqlerr(st, rc, "prepare a snapshot query", err);
    }
    return 0;
}

static int
check_cp(const struct store_snapshot_cp *cp, struct err *err)
{
    if (cp->manifest_hash == NULL) {
        return err_set(err, ERR_INVAL, "checkpoint %lld has no manifest", (long long)cp->id);
    }
    if (store_check_text(cp->tool, STORE_LABEL_MAX, 0, "tool name", err) < 0 ||
        store_check_text(cp->label, STORE_LABEL_MAX, 0, "checkpoint label", err) < 0 ||
        store_check_text(cp->command, STORE_TEXT_MAX, 0, "command", err) < 0 ||
        store_check_text(cp->description, STORE_TEXT_MAX, 0, "description", err) < 0) {
        return -1;
    }
    for (size_t i = 0; i < cp->n_steps; i++) {
        if (store_check_text(cp->steps[i].tool, STORE_LABEL_MAX, 1, "step tool", err) < 0 ||
            store_check_text(cp->steps[i].description, STORE_TEXT_MAX, 0, "step description", err) <
                0) {
            return -1;
        }
    }
    for (size_t i = 0; i < cp->n_changes; i++) {
        if (store_check_text(cp->changes[i].path, STORE_PATH_MAX, 1, "change path", err) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
insert_cp(struct store *st, int64_t snap, const struct store_snapshot_cp *cp, int64_t now,
          struct err *err)
{
    sqlite3_stmt *s = NULL;

    if (check_cp(cp, err) < 0 ||
        prepare(st,
                "INSERT INTO snapshot_checkpoints (snapshot_id, id, parent, tool, command, "
                "description, label, exit_code, duration_ms, created_ms, stdout_hash, "
                "stdout_bytes, stderr_hash, stderr_bytes, manifest_hash, file_count, added, "
                "modified, removed, logical_bytes, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
                "?8, 0, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, 0)",
                &s, err) < 0) {
        return -1;
    }
    sqlite3_bind_int64(s, 1, snap);
    sqlite3_bind_int64(s, 2, cp->id);
    if (cp->parent >= 0) {
        sqlite3_bind_int64(s, 3, cp->parent);
    }
    store_bind_text(s, 4, cp->tool);
    store_bind_text(s, 5, cp->command);
    store_bind_text(s, 6, cp->description);
    store_bind_text(s, 7, cp->label && cp->label[0] ? cp->label : NULL);
    if (cp->has_exit_code) {
        sqlite3_bind_int(s, 8, cp->exit_code);
    }
    sqlite3_bind_int64(s, 9, cp->created_ms > 0 ? cp->created_ms : now);
    store_bind_hash(s, 10, cp->stdout_hash);
    sqlite3_bind_int64(s, 11, cp->stdout_hash ? cp->stdout_bytes : 0);
    store_bind_hash(s, 12, cp->stderr_hash);
    sqlite3_bind_int64(s, 13, cp->stderr_hash ? cp->stderr_bytes : 0);
    store_bind_hash(s, 14, cp->manifest_hash);
    sqlite3_bind_int64(s, 15, cp->file_count);
    sqlite3_bind_int64(s, 16, cp->added);
    sqlite3_bind_int64(s, 17, cp->modified);
    sqlite3_bind_int64(s, 18, cp->removed);
    sqlite3_bind_int64(s, 19, cp->logical_bytes);
    if (exec_stmt(st, s, "store an imported checkpoint", err) < 0) {
        return err_wrap(err, "checkpoint %lld", (long long)cp->id);
    }
    for (size_t i = 0; i < cp->n_steps; i++) {
        if (prepare(st,
                    "INSERT INTO snapshot_steps (snapshot_id, checkpoint_id, seq, time_ms, tool, "
                    "description) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    &s, err) < 0) {
            return -1;
        }
        sqlite3_bind_int64(s, 1, snap);
        sqlite3_bind_int64(s, 2, cp->id);
        sqlite3_bind_int64(s, 3, (int64_t)i);
        sqlite3_bind_int64(s, 4, now);
        store_bind_text(s, 5, cp->steps[i].tool);
        store_bind_text(s, 6, cp->steps[i].description ? cp->steps[i].description : "");
        if (exec_stmt(st, s, "store an imported step", err) < 0) {
            return -1;
        }
    }
    for (size_t i = 0; i < cp->n_changes; i++) {
        char kind[2] = {(char)cp->changes[i].kind, '\0'};
        if (prepare(st,
                    "INSERT OR REPLACE INTO snapshot_changes (snapshot_id, checkpoint_id, path, "
                    "kind) VALUES (?1, ?2, ?3, ?4)",
                    &s, err) < 0) {
            return -1;
        }
        sqlite3_bind_int64(s, 1, snap);
        sqlite3_bind_int64(s, 2, cp->id);
        store_bind_text(s, 3, cp->changes[i].path);
        store_bind_text(s, 4, kind);
        if (exec_stmt(st, s, "store an imported change", err) < 0) {
            return -1;
        }
    }
    return 0;
}

int
store_snapshot_insert(struct store *st, const struct store_snapshot_new *req,
                      struct store_snapshot *out, struct err *err)
{
    sqlite3_stmt *s = NULL;
    int64_t snap, now = time_now_ms();
    int own = 0, rc = -1, head_found = 0;

    if (out != NULL) {
        memset(out, 0, sizeof(*out));
    }
    if (store_snapshot_name_check(req->name, err) < 0 ||
        store_check_text(req->source, STORE_LABEL_MAX, 1, "snapshot source", err) < 0 ||
        store_check_text(req->label, STORE_LABEL_MAX, 0, "session label", err) < 0 ||
        store_check_text(req->description, STORE_TEXT_MAX, 0, "snapshot description", err) < 0) {
        return -1;
    }
    for (size_t i = 0; i < req->n_cps; i++) {
        if (req->cps[i].id == req->head) {
            head_found = 1;
        }
    }
    if (!head_found) {
        return err_set(err, ERR_INVAL, "the snapshot's head %lld is not one of its %zu checkpoints",
                       (long long)req->head, req->n_cps);
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (prepare(st, "SELECT 1 FROM snapshots WHERE name = ?1", &s, err) < 0) {
        goto out;
    }
    store_bind_text(s, 1, req->name);
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc == SQLITE_ROW) {
        rc = err_set(err, ERR_EXISTS,
                     "snapshot '%s' already exists; choose another name or delete it first",
                     req->name);
        goto out;
    }
    rc = -1;
    if (prepare(st,
                "INSERT INTO snapshots (name, created_ms, source_session_id, label, parent_id, "
                "parent_checkpoint, head, session_created_ms, client, description) VALUES (?1, "
                "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                &s, err) < 0) {
        goto out;
    }
    store_bind_text(s, 1, req->name);
    sqlite3_bind_int64(s, 2, now);
    store_bind_text(s, 3, req->source);
    store_bind_text(s, 4, req->label && req->label[0] ? req->label : NULL);
    store_bind_text(s, 5, req->parent_id && req->parent_id[0] ? req->parent_id : NULL);
    if (req->parent_checkpoint >= 0) {
        sqlite3_bind_int64(s, 6, req->parent_checkpoint);
    }
    sqlite3_bind_int64(s, 7, req->head);
    sqlite3_bind_int64(s, 8, req->session_created_ms > 0 ? req->session_created_ms : now);
    store_bind_text(s, 9, req->client);
    store_bind_text(s, 10, req->description);
    if (exec_stmt(st, s, "store a snapshot", err) < 0) {
        goto out;
    }
    snap = sqlite3_last_insert_rowid(st->db);
    for (size_t i = 0; i < req->n_cps; i++) {
        if (insert_cp(st, snap, &req->cps[i], now, err) < 0) {
            goto out;
        }
    }
    for (size_t i = 0; i < req->n_chat; i++) {
        if (store_check_text(req->chat[i].prompt, STORE_TEXT_MAX, 1, "chat prompt", err) < 0 ||
            store_check_text(req->chat[i].response, STORE_TEXT_MAX, 1, "chat response", err) < 0 ||
            prepare(st,
                    "INSERT INTO snapshot_chat (snapshot_id, seq, time_ms, prompt, response) "
                    "VALUES (?1, ?2, ?3, ?4, ?5)",
                    &s, err) < 0) {
            goto out;
        }
        sqlite3_bind_int64(s, 1, snap);
        sqlite3_bind_int64(s, 2, (int64_t)i);
        sqlite3_bind_int64(s, 3, now);
        store_bind_text(s, 4, req->chat[i].prompt);
        store_bind_text(s, 5, req->chat[i].response);
        if (exec_stmt(st, s, "store an imported chat record", err) < 0) {
            goto out;
        }
    }
    for (size_t i = 0; i < req->n_overlays; i++) {
        if (store_check_text(req->overlays[i].key, STORE_PATH_MAX, 1, "overlay key", err) < 0 ||
            store_check_text(req->overlays[i].host_path, STORE_PATH_MAX, 1, "overlay path", err) <
                0 ||
            prepare(st,
                    "INSERT OR REPLACE INTO snapshot_overlays (snapshot_id, key, host_path) "
                    "VALUES (?1, ?2, ?3)",
                    &s, err) < 0) {
            goto out;
        }
        sqlite3_bind_int64(s, 1, snap);
        store_bind_text(s, 2, req->overlays[i].key);
        store_bind_text(s, 3, req->overlays[i].host_path);
        if (exec_stmt(st, s, "store an imported overlay", err) < 0) {
            goto out;
        }
    }
    if (out != NULL && store_snapshot_get(st, req->name, out, err) < 0) {
        goto out;
    }
    rc = 0;
out:
    return store_tx_end(st, own, rc, err);
}

int
store_blob_get_conn(struct sqlite3 *db, const uint8_t hash[HASH_LEN], struct buf *out,
                    struct err *err)
{
    struct store tmp;
    int rc;

    memset(&tmp, 0, sizeof(tmp));
    tmp.db = db;
    tmp.path = (char *)"(sqlite3 connection)";
    tmp.blob_max = STORE_BLOB_MAX_DEFAULT;
    tmp.busy_timeout_ms = 0;
    tmp.read_only = 1;
    rc = store_blob_read(&tmp, hash, out, err);
    for (size_t i = 0; i < STORE_STMT_CACHE; i++) {
        sqlite3_finalize(tmp.stmts[i].stmt);
    }
    ZSTD_freeDCtx(tmp.zdctx);
    ZSTD_freeCCtx(tmp.zcctx);
    return rc;
}
