/*
 * store_checkpoint.c - checkpoints, their change rows and steps.
 *
 * Checkpoint ids are per session, assigned as max(id) + 1 over every row of the
 * session whatever its status, and never renumbered: squash and drop change a row's
 * status instead of moving ids, so fork parents and labels stay valid. Appending
 * after a rollback first marks the live checkpoints past the old head DISCARDED; they
 * stay in the DB, hidden, until gc. The append, its change rows and the head move
 * happen in one write transaction.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

#include "util/mem.h"
#include "util/timeutil.h"

#define CP_COLS                                                                                    \
    "session_id, id, parent, tool, command, description, label, exit_code, duration_ms, "          \
    "created_ms, stdout_hash, stdout_bytes, stderr_hash, stderr_bytes, manifest_hash, "            \
    "file_count, added, modified, removed, logical_bytes, status"

static const char SQL_HEAD[] = "SELECT head, state FROM sessions WHERE id = ?1";
static const char SQL_DISCARD[] = "UPDATE checkpoints SET status = 1, hidden_ms = ?3 "
                                  "WHERE session_id = ?1 AND id > ?2 AND status = 0";
static const char SQL_NEXT_ID[] =
    "SELECT coalesce(max(id), -1) + 1 FROM checkpoints WHERE session_id = ?1";
static const char SQL_CP_INSERT[] =
    "INSERT INTO checkpoints (" CP_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
    "?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, 0)";
static const char SQL_CP_REWRITE[] =
    "UPDATE checkpoints SET parent = ?3, tool = ?4, command = ?5, description = ?6, label = ?7, "
    "exit_code = ?8, duration_ms = ?9, stdout_hash = ?11, stdout_bytes = ?12, stderr_hash = ?13, "
    "stderr_bytes = ?14, manifest_hash = ?15, file_count = ?16, added = ?17, modified = ?18, "
    "removed = ?19, logical_bytes = ?20 WHERE session_id = ?1 AND id = ?2";
static const char SQL_MOVE_HEAD[] =
    "UPDATE sessions SET head = ?2, last_active_ms = ?3 WHERE id = ?1";
static const char SQL_CHANGE_INSERT[] =
    "INSERT INTO checkpoint_changes (session_id, checkpoint_id, path, kind) "
    "VALUES (?1, ?2, ?3, ?4)";
static const char SQL_CHANGE_DELETE[] =
    "DELETE FROM checkpoint_changes WHERE session_id = ?1 AND checkpoint_id = ?2";
static const char SQL_CP_GET[] =
    "SELECT " CP_COLS " FROM checkpoints WHERE session_id = ?1 AND id = ?2";
static const char SQL_CP_LIST[] = "SELECT " CP_COLS " FROM checkpoints WHERE session_id = ?1 "
                                  "AND (?2 OR status = 0) ORDER BY id";
static const char SQL_FIND_LABEL[] = "SELECT min(id) FROM checkpoints WHERE session_id = ?1 AND "
                                     "label = ?2 AND status = 0";
static const char SQL_SET_LABEL[] =
    "UPDATE checkpoints SET label = ?3 WHERE session_id = ?1 AND id = ?2";
static const char SQL_SET_STATUS[] =
    "UPDATE checkpoints SET status = ?4, hidden_ms = ?5 WHERE session_id = ?1 AND id BETWEEN ?2 "
    "AND ?3 AND status = 0";
static const char SQL_CHANGE_LIST[] = "SELECT path, kind FROM checkpoint_changes WHERE "
                                      "session_id = ?1 AND checkpoint_id = ?2 ORDER BY path";
static const char SQL_STEP_APPEND[] =
    "INSERT INTO checkpoint_steps (session_id, checkpoint_id, seq, time_ms, tool, description) "
    "VALUES (?1, ?2, (SELECT coalesce(max(seq), -1) + 1 FROM checkpoint_steps WHERE "
    "session_id = ?1 AND checkpoint_id = ?2), ?3, ?4, ?5)";
static const char SQL_STEP_LIST[] = "SELECT tool, description FROM checkpoint_steps WHERE "
                                    "session_id = ?1 AND checkpoint_id = ?2 ORDER BY seq";

void
store_checkpoint_release(struct store_checkpoint *cp)
{
    if (cp == NULL) {
        return;
    }
    mem_free(cp->tool);
    mem_free(cp->command);
    mem_free(cp->description);
    mem_free(cp->label);
    cp->tool = cp->command = cp->description = cp->label = NULL;
}

static int
check_cp_text(const struct store_checkpoint *cp, struct err *err)
{
    if (strlen(cp->session_id) != STORE_SESSION_ID_LEN) {
        return err_set(err, ERR_NOTFOUND, "session '%s' does not exist", cp->session_id);
    }
    if (store_check_text(cp->tool, STORE_LABEL_MAX, 0, "tool name", err) < 0 ||
        store_check_text(cp->label, STORE_LABEL_MAX, 0, "checkpoint label", err) < 0 ||
        store_check_text(cp->command, STORE_TEXT_MAX, 0, "command", err) < 0 ||
        store_check_text(cp->description, STORE_TEXT_MAX, 0, "description", err) < 0) {
        return -1;
    }
    if (cp->stdout_bytes < 0 || cp->stderr_bytes < 0 || cp->file_count < 0 || cp->added < 0 ||
        cp->modified < 0 || cp->removed < 0 || cp->logical_bytes < 0 || cp->duration_ms < 0) {
        return err_set(err, ERR_INVAL, "checkpoint counts and sizes must not be negative");
    }
    return 0;
}

static int
check_changes(const struct store_change *changes, size_t n, struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (changes[i].path == NULL || changes[i].path[0] == '\0') {
            return err_set(err, ERR_INVAL, "change %zu has no path", i);
        }
        if (store_check_text(changes[i].path, STORE_PATH_MAX, 1, "change path", err) < 0) {
            return -1;
        }
        if (changes[i].kind != STORE_ADDED && changes[i].kind != STORE_MODIFIED &&
            changes[i].kind != STORE_REMOVED) {
            return err_set(err, ERR_INVAL, "change of '%s' has kind %d; use 'A', 'M' or 'D'",
                           changes[i].path, changes[i].kind);
        }
    }
    return 0;
}

/* Binds ?1..?20 of the insert/rewrite statements from cp. */
static void
bind_cp(sqlite3_stmt *s, const struct store_checkpoint *cp)
{
    store_bind_text(s, 1, cp->session_id);
    sqlite3_bind_int64(s, 2, cp->id);
    if (cp->parent >= 0) {
        sqlite3_bind_int64(s, 3, cp->parent);
    }
    store_bind_text(s, 4, cp->tool);
    store_bind_text(s, 5, cp->command);
    store_bind_text(s, 6, cp->description);
    store_bind_text(s, 7, (cp->label && *cp->label) ? cp->label : NULL);
    if (cp->has_exit_code) {
        sqlite3_bind_int(s, 8, cp->exit_code);
    }
    sqlite3_bind_int64(s, 9, cp->duration_ms);
    sqlite3_bind_int64(s, 10, cp->created_ms);
    store_bind_hash(s, 11, cp->stdout_bytes > 0 ? cp->stdout_hash : NULL);
    sqlite3_bind_int64(s, 12, cp->stdout_bytes);
    store_bind_hash(s, 13, cp->stderr_bytes > 0 ? cp->stderr_hash : NULL);
    sqlite3_bind_int64(s, 14, cp->stderr_bytes);
    store_bind_hash(s, 15, cp->manifest_hash);
    sqlite3_bind_int64(s, 16, cp->file_count);
    sqlite3_bind_int64(s, 17, cp->added);
    sqlite3_bind_int64(s, 18, cp->modified);
    sqlite3_bind_int64(s, 19, cp->removed);
    sqlite3_bind_int64(s, 20, cp->logical_bytes);
}

/* Steps a write statement to completion and resets it. */
static int
step_done(struct store *st, sqlite3_stmt *s, const char *what, struct err *err)
{
    int rc = sqlite3_step(s);

    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        return store_sqlerr(st, rc, what, err);
    }
    return 0;
}

static int
write_changes(struct store *st, const char *session, int64_t id, const struct store_change *changes,
              size_t n, struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        char kind[2] = {(char)changes[i].kind, '\0'};
        sqlite3_stmt *s = store_stmt(st, SQL_CHANGE_INSERT, err);
        if (s == NULL) {
            return -1;
        }
        store_bind_text(s, 1, session);
        sqlite3_bind_int64(s, 2, id);
        store_bind_text(s, 3, changes[i].path);
        sqlite3_bind_text(s, 4, kind, 1, SQLITE_TRANSIENT);
        if (step_done(st, s, "record a change", err) < 0) {
            if (err->code == ERR_INVAL) {
                err_set(err, ERR_INVAL, "path '%.200s' is listed twice in one checkpoint",
                        changes[i].path);
            }
            return -1;
        }
    }
    return 0;
}

int
store_checkpoint_append(struct store *st, struct store_checkpoint *cp,
                        const struct store_change *changes, size_t n_changes, struct err *err)
{
    int64_t head, next, now = time_now_ms();
    sqlite3_stmt *s;
    int own, rc = -1, state;

    if (check_cp_text(cp, err) < 0 || check_changes(changes, n_changes, err) < 0) {
        return -1;
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    s = store_stmt(st, SQL_HEAD, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, cp->session_id);
    rc = sqlite3_step(s);
    head = sqlite3_column_int64(s, 0);
    state = sqlite3_column_int(s, 1);
    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE
                 ? err_set(err, ERR_NOTFOUND, "session '%s' does not exist", cp->session_id)
                 : store_sqlerr(st, rc, "append a checkpoint", err);
        goto out;
    }
    rc = -1;
    if (state != STORE_SESSION_OPEN) {
        err_set(err, ERR_INVAL, "session '%s' is closed; it takes no new checkpoints",
                cp->session_id);
        goto out;
    }
    s = store_stmt(st, SQL_DISCARD, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, cp->session_id);
    sqlite3_bind_int64(s, 2, head);
    sqlite3_bind_int64(s, 3, now);
    if (step_done(st, s, "discard rolled-back checkpoints", err) < 0) {
        goto out;
    }
    s = store_stmt(st, SQL_NEXT_ID, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, cp->session_id);
    rc = sqlite3_step(s);
    next = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        rc = store_sqlerr(st, rc, "append a checkpoint", err);
        goto out;
    }
    rc = -1;
    cp->id = next;
    cp->parent = head;
    cp->created_ms = now;
    cp->status = STORE_CP_LIVE;
    s = store_stmt(st, SQL_CP_INSERT, err);
    if (s == NULL) {
        goto out;
    }
    bind_cp(s, cp);
    if (step_done(st, s, "append a checkpoint", err) < 0 ||
        write_changes(st, cp->session_id, next, changes, n_changes, err) < 0) {
        goto out;
    }
    s = store_stmt(st, SQL_MOVE_HEAD, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, cp->session_id);
    sqlite3_bind_int64(s, 2, next);
    sqlite3_bind_int64(s, 3, now);
    rc = step_done(st, s, "move the session head", err);
out:
    return store_tx_end(st, own, rc, err);
}

static int
read_cp(sqlite3_stmt *s, struct store_checkpoint *cp)
{
    int oom = 0;
    const unsigned char *t = sqlite3_column_text(s, 0);

    memset(cp, 0, sizeof(*cp));
    if (t != NULL) {
        snprintf(cp->session_id, sizeof(cp->session_id), "%s", (const char *)t);
    }
    cp->id = sqlite3_column_int64(s, 1);
    cp->parent = sqlite3_column_type(s, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 2);
    cp->tool = store_col_strdup(s, 3, &oom);
    cp->command = store_col_strdup(s, 4, &oom);
    cp->description = store_col_strdup(s, 5, &oom);
    cp->label = store_col_strdup(s, 6, &oom);
    cp->has_exit_code = sqlite3_column_type(s, 7) != SQLITE_NULL;
    cp->exit_code = sqlite3_column_int(s, 7);
    cp->duration_ms = sqlite3_column_int64(s, 8);
    cp->created_ms = sqlite3_column_int64(s, 9);
    if (sqlite3_column_bytes(s, 10) == HASH_LEN) {
        memcpy(cp->stdout_hash, sqlite3_column_blob(s, 10), HASH_LEN);
    }
    cp->stdout_bytes = sqlite3_column_int64(s, 11);
    if (sqlite3_column_bytes(s, 12) == HASH_LEN) {
        memcpy(cp->stderr_hash, sqlite3_column_blob(s, 12), HASH_LEN);
    }
    cp->stderr_bytes = sqlite3_column_int64(s, 13);
    if (sqlite3_column_bytes(s, 14) == HASH_LEN) {
        memcpy(cp->manifest_hash, sqlite3_column_blob(s, 14), HASH_LEN);
    }
    cp->file_count = sqlite3_column_int64(s, 15);
    cp->added = sqlite3_column_int64(s, 16);
    cp->modified = sqlite3_column_int64(s, 17);
    cp->removed = sqlite3_column_int64(s, 18);
    cp->logical_bytes = sqlite3_column_int64(s, 19);
    cp->status = sqlite3_column_int(s, 20);
    if (oom) {
        store_checkpoint_release(cp);
        return -1;
    }
    return 0;
}

int
store_checkpoint_get(struct store *st, const char *session, int64_t id,
                     struct store_checkpoint *out, struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_CP_GET, err);
    int rc;

    memset(out, 0, sizeof(*out));
    if (s == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, id);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        rc = read_cp(s, out);
        sqlite3_reset(s);
        return rc < 0 ? err_set(err, ERR_NOMEM, "cannot read a checkpoint: out of memory") : 0;
    }
    sqlite3_reset(s);
    if (rc == SQLITE_DONE) {
        return err_set(err, ERR_NOTFOUND, "checkpoint %lld of session '%.16s' does not exist",
                       (long long)id, session ? session : "");
    }
    return store_sqlerr(st, rc, "read a checkpoint", err);
}

void
store_checkpoint_list_free(struct store_checkpoint *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        store_checkpoint_release(&list[i]);
    }
    mem_free(list);
}

int
store_checkpoint_list(struct store *st, const char *session, int include_hidden,
                      struct store_checkpoint **out, size_t *n, struct err *err)
{
    struct store_checkpoint *list = NULL;
    size_t len = 0, cap = 0;
    sqlite3_stmt *s = store_stmt(st, SQL_CP_LIST, err);
    int rc;

    *out = NULL;
    *n = 0;
    if (s == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int(s, 2, include_hidden ? 1 : 0);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct store_checkpoint *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                goto nomem;
            }
            list = grown;
            cap = ncap;
        }
        if (read_cp(s, &list[len]) < 0) {
            goto nomem;
        }
        len++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        store_checkpoint_list_free(list, len);
        return store_sqlerr(st, rc, "list checkpoints", err);
    }
    *out = list;
    *n = len;
    return 0;
nomem:
    sqlite3_reset(s);
    store_checkpoint_list_free(list, len);
    return err_set(err, ERR_NOMEM, "cannot list checkpoints: out of memory");
}

int
store_checkpoint_find_label(struct store *st, const char *session, const char *label, int64_t *id,
                            struct err *err)
{
    sqlite3_stmt *s;
    int rc, found = 0;

    *id = -1;
    if (store_check_text(label, STORE_LABEL_MAX, 1, "checkpoint label", err) < 0 ||
        (s = store_stmt(st, SQL_FIND_LABEL, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    store_bind_text(s, 2, label);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
        *id = sqlite3_column_int64(s, 0);
        found = 1;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        return store_sqlerr(st, rc, "find a label", err);
    }
    if (!found) {
        return err_set(err, ERR_NOTFOUND, "no live checkpoint of session '%.16s' has label '%s'",
                       session ? session : "", label);
    }
    return 0;
}

/* Runs a prepared UPDATE in its own or the caller's transaction; *changed gets the
 * number of rows changed. */
static int
run_write(struct store *st, sqlite3_stmt *s, const char *what, int64_t *changed, struct err *err)
{
    int own, rc;

    if (store_tx_begin(st, &own, err) < 0) {
        sqlite3_reset(s);
        return -1;
    }
    rc = step_done(st, s, what, err);
    *changed = rc == 0 ? sqlite3_changes64(st->db) : 0;
    return store_tx_end(st, own, rc, err);
}

int
store_checkpoint_set_label(struct store *st, const char *session, int64_t id, const char *label,
                           struct err *err)
{
    sqlite3_stmt *s;
    int64_t changed;

    if (store_check_text(label, STORE_LABEL_MAX, 0, "checkpoint label", err) < 0 ||
        (s = store_stmt(st, SQL_SET_LABEL, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, id);
    store_bind_text(s, 3, (label && *label) ? label : NULL);
    if (run_write(st, s, "label a checkpoint", &changed, err) < 0) {
        return -1;
    }
    if (changed == 0) {
        return err_set(err, ERR_NOTFOUND, "checkpoint %lld of session '%.16s' does not exist",
                       (long long)id, session ? session : "");
    }
    return 0;
}

int
store_checkpoint_set_status(struct store *st, const char *session, int64_t from, int64_t to,
                            int status, struct err *err)
{
    sqlite3_stmt *s;
    int64_t changed;

    if (status != STORE_CP_DISCARDED && status != STORE_CP_DROPPED && status != STORE_CP_SQUASHED) {
        return err_set(err, ERR_INVAL,
                       "checkpoint status %d is not discarded, dropped or "
                       "squashed",
                       status);
    }
    if (from < 0 || to < from) {
        return err_set(err, ERR_INVAL, "checkpoint range %lld..%lld is empty or negative",
                       (long long)from, (long long)to);
    }
    s = store_stmt(st, SQL_SET_STATUS, err);
    if (s == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, from);
    sqlite3_bind_int64(s, 3, to);
    sqlite3_bind_int(s, 4, status);
    sqlite3_bind_int64(s, 5, time_now_ms());
    return run_write(st, s, "hide checkpoints", &changed, err);
}

int
store_checkpoint_rewrite(struct store *st, const struct store_checkpoint *cp,
                         const struct store_change *changes, size_t n_changes, struct err *err)
{
    sqlite3_stmt *s;
    int own, rc = -1;

    if (check_cp_text(cp, err) < 0 || check_changes(changes, n_changes, err) < 0) {
        return -1;
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    s = store_stmt(st, SQL_CP_REWRITE, err);
    if (s == NULL) {
        goto out;
    }
    bind_cp(s, cp);
    if (step_done(st, s, "rewrite a checkpoint", err) < 0) {
        goto out;
    }
    if (sqlite3_changes(st->db) == 0) {
        err_set(err, ERR_NOTFOUND, "checkpoint %lld of session '%s' does not exist",
                (long long)cp->id, cp->session_id);
        goto out;
    }
    s = store_stmt(st, SQL_CHANGE_DELETE, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, cp->session_id);
    sqlite3_bind_int64(s, 2, cp->id);
    if (step_done(st, s, "rewrite a checkpoint", err) < 0 ||
        write_changes(st, cp->session_id, cp->id, changes, n_changes, err) < 0) {
        goto out;
    }
    rc = 0;
out:
    return store_tx_end(st, own, rc, err);
}

void
store_change_list_free(struct store_change_row *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        mem_free(list[i].path);
    }
    mem_free(list);
}

int
store_change_list(struct store *st, const char *session, int64_t id, struct store_change_row **out,
                  size_t *n, struct err *err)
{
    struct store_change_row *list = NULL;
    size_t len = 0, cap = 0;
    sqlite3_stmt *s = store_stmt(st, SQL_CHANGE_LIST, err);
    int rc, oom = 0;

    *out = NULL;
    *n = 0;
    if (s == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *k;
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct store_change_row *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                oom = 1;
                break;
            }
            list = grown;
            cap = ncap;
        }
        list[len].path = store_col_strdup(s, 0, &oom);
        k = sqlite3_column_text(s, 1);
        list[len].kind = k ? k[0] : 0;
        len++;
        if (oom) {
            break;
        }
    }
    sqlite3_reset(s);
    if (oom) {
        store_change_list_free(list, len);
        return err_set(err, ERR_NOMEM, "cannot list changes: out of memory");
    }
    if (rc != SQLITE_DONE) {
        store_change_list_free(list, len);
        return store_sqlerr(st, rc, "list changes", err);
    }
    *out = list;
    *n = len;
    return 0;
}

int
store_step_append(struct store *st, const char *session, int64_t checkpoint, const char *tool,
                  const char *description, struct err *err)
{
    sqlite3_stmt *s;
    int64_t changed;

    if (store_check_text(tool, STORE_LABEL_MAX, 1, "step tool", err) < 0 ||
        store_check_text(description, STORE_TEXT_MAX, 0, "step description", err) < 0 ||
        (s = store_stmt(st, SQL_STEP_APPEND, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, checkpoint);
    sqlite3_bind_int64(s, 3, time_now_ms());
    store_bind_text(s, 4, tool);
    store_bind_text(s, 5, description ? description : "");
    return run_write(st, s, "record a step", &changed, err);
}

void
store_step_list_free(struct store_step *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        mem_free(list[i].tool);
        mem_free(list[i].description);
    }
    mem_free(list);
}

int
store_step_list(struct store *st, const char *session, int64_t checkpoint, struct store_step **out,
                size_t *n, struct err *err)
{
    struct store_step *list = NULL;
    size_t len = 0, cap = 0;
    sqlite3_stmt *s = store_stmt(st, SQL_STEP_LIST, err);
    int rc, oom = 0;

    *out = NULL;
    *n = 0;
    if (s == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, checkpoint);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct store_step *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                oom = 1;
                break;
            }
            list = grown;
            cap = ncap;
        }
        list[len].tool = store_col_strdup(s, 0, &oom);
        list[len].description = store_col_strdup(s, 1, &oom);
        len++;
        if (oom) {
            break;
        }
    }
    sqlite3_reset(s);
    if (oom) {
        store_step_list_free(list, len);
        return err_set(err, ERR_NOMEM, "cannot list steps: out of memory");
    }
    if (rc != SQLITE_DONE) {
        store_step_list_free(list, len);
        return store_sqlerr(st, rc, "list steps", err);
    }
    *out = list;
    *n = len;
    return 0;
}
