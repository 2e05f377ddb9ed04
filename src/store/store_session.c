/*
 * store_session.c - sessions: create, read, claim by a process, label, close;
 * overlays and the chat log that hang off a session.
 *
 * A session is held live by one drun-mcp process, named by (pid, start time) so a
 * reused pid is not mistaken for the old owner. Claiming reads the owner and writes
 * the new one inside one BEGIN IMMEDIATE transaction, so two processes racing for a
 * session cannot both win; a dead owner's claim is simply taken over.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

#define ID_ATTEMPTS 32

static const char SQL_ID_EXISTS[] = "SELECT 1 FROM sessions WHERE id = ?1";
static const char SQL_SESSION_INSERT[] =
    "INSERT INTO sessions (id, label, parent_id, parent_checkpoint, created_ms, last_active_ms, "
    "head, state, owner_pid, owner_start, heartbeat_ms, client) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0, 0, ?6, ?7, ?5, ?8)";
static const char SQL_CP0_INSERT[] =
    "INSERT INTO checkpoints (session_id, id, parent, tool, created_ms, manifest_hash, "
    "file_count, logical_bytes) VALUES (?1, 0, NULL, ?2, ?3, ?4, ?5, ?6)";
#define SESSION_COLS                                                                               \
    "id, label, parent_id, parent_checkpoint, created_ms, closed_ms, last_active_ms, head, "       \
    "state, owner_pid, owner_start, heartbeat_ms, client"
static const char SQL_SESSION_GET[] = "SELECT " SESSION_COLS " FROM sessions WHERE id = ?1";
static const char SQL_SESSION_LIST[] =
    "SELECT " SESSION_COLS " FROM sessions WHERE ?1 OR state = 0 ORDER BY created_ms, id";
static const char SQL_COUNT_OPEN[] = "SELECT count(*) FROM sessions WHERE state = 0";
static const char SQL_OWNER_GET[] = "SELECT state, owner_pid, owner_start FROM sessions "
                                    "WHERE id = ?1";
static const char SQL_OWNER_SET[] =
    "UPDATE sessions SET owner_pid = ?2, owner_start = ?3, heartbeat_ms = ?4, "
    "last_active_ms = ?4 WHERE id = ?1";
static const char SQL_OWNER_CLEAR[] =
    "UPDATE sessions SET owner_pid = NULL, owner_start = NULL WHERE id = ?1 AND owner_pid = ?2 "
    "AND owner_start = ?3";
static const char SQL_HEARTBEAT[] =
    "UPDATE sessions SET heartbeat_ms = ?3 WHERE owner_pid = ?1 AND owner_start = ?2 AND "
    "state = 0";
static const char SQL_SET_ACTIVE[] =
    "UPDATE sessions SET last_active_ms = ?4 WHERE id = ?1 AND owner_pid = ?2 AND "
    "owner_start = ?3 AND state = 0";
/* The reaper's candidates: open sessions whose stored activity is older than ?1 (the
 * state index narrows it to open sessions). */
static const char SQL_IDLE_LIST[] =
    "SELECT id, owner_pid, owner_start, heartbeat_ms, last_active_ms FROM sessions "
    "WHERE state = 0 AND last_active_ms < ?1 ORDER BY last_active_ms, id";
/* The reaper's close: one conditional UPDATE, so of several processes only one wins.
 * Either the named owner (ourselves, or a holder seen dead) still holds it, or it is
 * idle in the DB and no process holds it with a fresh heartbeat. */
static const char SQL_REAP[] =
    "UPDATE sessions SET state = 1, closed_ms = ?6, owner_pid = NULL, owner_start = NULL "
    "WHERE id = ?1 AND state = 0 AND ((?4 <> 0 AND owner_pid = ?4 AND owner_start = ?5) OR "
    "(last_active_ms < ?2 AND (owner_pid IS NULL OR heartbeat_ms IS NULL OR "
    "heartbeat_ms < ?3)))";
static const char SQL_SET_LABEL[] = "UPDATE sessions SET label = ?2 WHERE id = ?1";
static const char SQL_SET_HEAD[] =
    "UPDATE sessions SET head = ?2, last_active_ms = ?3 WHERE id = ?1 AND EXISTS "
    "(SELECT 1 FROM checkpoints WHERE session_id = ?1 AND id = ?2 AND status = 0)";
static const char SQL_TOUCH[] = "UPDATE sessions SET last_active_ms = ?2 WHERE id = ?1";
static const char SQL_CLOSE[] =
    "UPDATE sessions SET state = 1, closed_ms = ?2, owner_pid = NULL, owner_start = NULL "
    "WHERE id = ?1 AND state = 0";
static const char SQL_OVERLAY_SET[] =
    "INSERT INTO session_overlays (session_id, key, host_path) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (session_id, key) DO UPDATE SET host_path = excluded.host_path";
static const char SQL_OVERLAY_LIST[] =
    "SELECT key, host_path FROM session_overlays WHERE session_id = ?1 ORDER BY key";
static const char SQL_CHAT_APPEND[] =
    "INSERT INTO session_chat (session_id, seq, time_ms, prompt, response) VALUES (?1, "
    "(SELECT coalesce(max(seq), -1) + 1 FROM session_chat WHERE session_id = ?1), ?2, ?3, ?4)";

static int
check_id(const char *id, struct err *err)
{
    if (id == NULL) {
        return err_set(err, ERR_INVAL, "session id is missing; give one");
    }
    if (strlen(id) != STORE_SESSION_ID_LEN || strspn(id, "0123456789abcdef") != strlen(id)) {
        return err_set(err, ERR_NOTFOUND,
                       "session '%.32s' does not exist; session ids are 8 lower-case hex "
                       "characters",
                       id);
    }
    return 0;
}

/* Runs a one-row write; with `must_change`, ERR_NOTFOUND naming session `id` if it
 * changed nothing. */
static int
run_update(struct store *st, sqlite3_stmt *s, const char *what, int must_change, const char *id,
           struct err *err)
{
    int own, rc;

    if (store_tx_begin(st, &own, err) < 0) {
        sqlite3_reset(s);
        return -1;
    }
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        rc = store_sqlerr(st, rc, what, err);
    } else if (must_change && sqlite3_changes(st->db) == 0) {
        rc = err_set(err, ERR_NOTFOUND, "cannot %s: session '%s' does not exist%s", what, id,
                     must_change == 2 ? " or has no such live checkpoint" : "");
    } else {
        rc = 0;
    }
    return store_tx_end(st, own, rc, err);
}

void
store_session_release(struct store_session *s)
{
    if (s == NULL) {
        return;
    }
    mem_free(s->label);
    mem_free(s->client);
    s->label = NULL;
    s->client = NULL;
}

static int
read_session(sqlite3_stmt *s, struct store_session *out)
{
    int oom = 0;
    const unsigned char *t;

    memset(out, 0, sizeof(*out));
    t = sqlite3_column_text(s, 0);
    if (t != NULL) {
        snprintf(out->id, sizeof(out->id), "%s", (const char *)t);
    }
    out->label = store_col_strdup(s, 1, &oom);
    t = sqlite3_column_text(s, 2);
    if (t != NULL) {
        snprintf(out->parent_id, sizeof(out->parent_id), "%s", (const char *)t);
    }
    out->parent_checkpoint =
        sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 3);
    out->created_ms = sqlite3_column_int64(s, 4);
    out->closed_ms = sqlite3_column_int64(s, 5);
    out->last_active_ms = sqlite3_column_int64(s, 6);
    out->head = sqlite3_column_int64(s, 7);
    out->state = sqlite3_column_int(s, 8);
    out->owner_pid = (pid_t)sqlite3_column_int64(s, 9);
    out->owner_start = sqlite3_column_int64(s, 10);
    out->heartbeat_ms = sqlite3_column_int64(s, 11);
    out->client = store_col_strdup(s, 12, &oom);
    if (oom) {
        store_session_release(out);
        return -1;
    }
    return 0;
}

int
store_session_create(struct store *st, const struct store_session_new *req,
                     struct store_session *out, struct err *err)
{
    char id[STORE_SESSION_ID_LEN + 1];
    int64_t now = time_now_ms();
    sqlite3_stmt *s;
    int own, rc = -1, found = 0;

    memset(out, 0, sizeof(*out));
    if (req->manifest_hash == NULL) {
        return err_set(err, ERR_INVAL, "checkpoint 0 needs a manifest hash");
    }
    if (store_check_text(req->label, STORE_LABEL_MAX, 0, "session label", err) < 0 ||
        store_check_text(req->client, STORE_LABEL_MAX, 0, "client name", err) < 0 ||
        store_check_text(req->tool, STORE_LABEL_MAX, 0, "tool name", err) < 0) {
        return -1;
    }
    if (req->parent_id != NULL && check_id(req->parent_id, err) < 0) {
        return -1;
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    /* 8 hex characters give 2^32 ids; a collision is rare but checked, inside the
     * write lock so no other process can take the id between check and insert. */
    for (int attempt = 0; attempt < ID_ATTEMPTS && !found; attempt++) {
        if (store_random_hex(id, STORE_SESSION_ID_LEN / 2, err) < 0) {
            goto out;
        }
        s = store_stmt(st, SQL_ID_EXISTS, err);
        if (s == NULL) {
            goto out;
        }
        store_bind_text(s, 1, id);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            rc = store_sqlerr(st, rc, "create a session", err);
            goto out;
        }
        found = rc == SQLITE_DONE;
    }
    rc = -1;
    if (!found) {
        err_set(err, ERR_INTERNAL, "cannot find a free session id after %d tries", ID_ATTEMPTS);
        goto out;
    }
    s = store_stmt(st, SQL_SESSION_INSERT, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, id);
    store_bind_text(s, 2, req->label);
    store_bind_text(s, 3, req->parent_id);
    if (req->parent_checkpoint >= 0) {
        sqlite3_bind_int64(s, 4, req->parent_checkpoint);
    }
    sqlite3_bind_int64(s, 5, now);
    if (req->owner_pid > 0) {
        sqlite3_bind_int64(s, 6, req->owner_pid);
        sqlite3_bind_int64(s, 7, req->owner_start);
    }
    store_bind_text(s, 8, req->client);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        rc = store_sqlerr(st, rc, "create a session", err);
        goto out;
    }
    s = store_stmt(st, SQL_CP0_INSERT, err);
    if (s == NULL) {
        rc = -1;
        goto out;
    }
    store_bind_text(s, 1, id);
    store_bind_text(s, 2, req->tool);
    sqlite3_bind_int64(s, 3, now);
    store_bind_hash(s, 4, req->manifest_hash);
    sqlite3_bind_int64(s, 5, req->file_count);
    sqlite3_bind_int64(s, 6, req->logical_bytes);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        rc = store_sqlerr(st, rc, "create checkpoint 0 (is its manifest blob stored?)", err);
        goto out;
    }
    rc = 0;
out:
    if (store_tx_end(st, own, rc, err) < 0) {
        return -1;
    }
    return store_session_get(st, id, out, err);
}

int
store_session_get(struct store *st, const char *id, struct store_session *out, struct err *err)
{
    sqlite3_stmt *s;
    int rc;

    memset(out, 0, sizeof(*out));
    if (check_id(id, err) < 0) {
        return -1;
    }
    s = store_stmt(st, SQL_SESSION_GET, err);
    if (s == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        rc = read_session(s, out) < 0 ? err_set(err, ERR_NOMEM,
                                                "cannot read a session: out of "
                                                "memory")
                                      : 0;
        sqlite3_reset(s);
        return rc;
    }
    sqlite3_reset(s);
    if (rc == SQLITE_DONE) {
        return err_set(err, ERR_NOTFOUND, "session '%s' does not exist", id);
    }
    return store_sqlerr(st, rc, "read a session", err);
}

void
store_session_list_free(struct store_session *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        store_session_release(&list[i]);
    }
    mem_free(list);
}

int
store_session_list(struct store *st, int include_closed, struct store_session **out, size_t *n,
                   struct err *err)
{
    struct store_session *list = NULL;
    size_t len = 0, cap = 0;
    sqlite3_stmt *s = store_stmt(st, SQL_SESSION_LIST, err);
    int rc;

    *out = NULL;
    *n = 0;
    if (s == NULL) {
        return -1;
    }
    sqlite3_bind_int(s, 1, include_closed ? 1 : 0);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct store_session *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                goto nomem;
            }
            list = grown;
            cap = ncap;
        }
        if (read_session(s, &list[len]) < 0) {
            goto nomem;
        }
        len++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        store_session_list_free(list, len);
        return store_sqlerr(st, rc, "list sessions", err);
    }
    *out = list;
    *n = len;
    return 0;
nomem:
    sqlite3_reset(s);
    store_session_list_free(list, len);
    return err_set(err, ERR_NOMEM, "cannot list sessions: out of memory");
}

int
store_session_count_open(struct store *st, int64_t *count, struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_COUNT_OPEN, err);
    int rc;

    *count = 0;
    if (s == NULL) {
        return -1;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *count = sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        return store_sqlerr(st, rc, "count sessions", err);
    }
    return 0;
}

int
store_session_claim(struct store *st, const char *id, pid_t pid, int64_t start, pid_t *holder_pid,
                    struct err *err)
{
    sqlite3_stmt *s;
    int own, rc = -1, state;
    pid_t owner;
    int64_t owner_start;

    if (holder_pid != NULL) {
        *holder_pid = 0;
    }
    if (check_id(id, err) < 0) {
        return -1;
    }
    if (pid <= 0) {
        return err_set(err, ERR_INVAL, "cannot claim session '%s' for pid %d", id, (int)pid);
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    s = store_stmt(st, SQL_OWNER_GET, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, id);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        rc = rc == SQLITE_DONE ? err_set(err, ERR_NOTFOUND, "session '%s' does not exist", id)
                               : store_sqlerr(st, rc, "claim a session", err);
        goto out;
    }
    state = sqlite3_column_int(s, 0);
    owner = (pid_t)sqlite3_column_int64(s, 1);
    owner_start = sqlite3_column_int64(s, 2);
    sqlite3_reset(s);
    rc = -1;
    if (state != STORE_SESSION_OPEN) {
        err_set(err, ERR_INVAL, "session '%s' is closed; open or fork another", id);
        goto out;
    }
    if (owner > 0 && !(owner == pid && owner_start == start) && proc_alive(owner, owner_start)) {
        if (holder_pid != NULL) {
            *holder_pid = owner;
        }
        err_set(err, ERR_BUSY,
                "session '%s' is held by another drun process (pid %d); switch to another "
                "session or stop that process",
                id, (int)owner);
        goto out;
    }
    s = store_stmt(st, SQL_OWNER_SET, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, pid);
    sqlite3_bind_int64(s, 3, start);
    sqlite3_bind_int64(s, 4, time_now_ms());
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    rc = rc == SQLITE_DONE ? 0 : store_sqlerr(st, rc, "claim a session", err);
out:
    return store_tx_end(st, own, rc, err);
}

int
store_session_release_claim(struct store *st, const char *id, pid_t pid, int64_t start,
                            struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(id, err) < 0 || (s = store_stmt(st, SQL_OWNER_CLEAR, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, pid);
    sqlite3_bind_int64(s, 3, start);
    return run_update(st, s, "release a session", 0, id, err);
}

int
store_session_heartbeat(struct store *st, pid_t pid, int64_t start, int *held, struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_HEARTBEAT, err);

    if (s == NULL) {
        return -1;
    }
    sqlite3_bind_int64(s, 1, pid);
    sqlite3_bind_int64(s, 2, start);
    sqlite3_bind_int64(s, 3, time_now_ms());
    if (run_update(st, s, "refresh heartbeats", 0, "", err) < 0) {
        return -1;
    }
    if (held != NULL) {
        *held = sqlite3_changes(st->db);
    }
    return 0;
}

int
store_session_set_active(struct store *st, const char *id, pid_t pid, int64_t start,
                         int64_t active_ms, struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(id, err) < 0 || (s = store_stmt(st, SQL_SET_ACTIVE, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, pid);
    sqlite3_bind_int64(s, 3, start);
    sqlite3_bind_int64(s, 4, active_ms);
    return run_update(st, s, "record a session's activity", 0, id, err);
}

int
store_session_idle_list(struct store *st, int64_t before_ms, struct store_idle **out, size_t *n,
                        struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_IDLE_LIST, err);
    struct store_idle *v = NULL;
    size_t cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    if (s == NULL) {
        return -1;
    }
    sqlite3_bind_int64(s, 1, before_ms);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct store_idle *nv = mem_realloc(v, ncap * sizeof(*nv));
            if (nv == NULL) {
                sqlite3_reset(s);
                mem_free(v);
                return err_set(err, ERR_NOMEM, "out of memory");
            }
            v = nv;
            cap = ncap;
        }
        struct store_idle *c = &v[(*n)++];
        const unsigned char *id = sqlite3_column_text(s, 0);
        snprintf(c->id, sizeof(c->id), "%s", id ? (const char *)id : "");
        c->owner_pid = (pid_t)sqlite3_column_int64(s, 1);
        c->owner_start = sqlite3_column_int64(s, 2);
        c->heartbeat_ms = sqlite3_column_int64(s, 3);
        c->last_active_ms = sqlite3_column_int64(s, 4);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        mem_free(v);
        *n = 0;
        return store_sqlerr(st, rc, "list idle sessions", err);
    }
    *out = v;
    return 0;
}

int
store_session_reap(struct store *st, const struct store_reap *r, int *won, struct err *err)
{
    sqlite3_stmt *s;
    int own = !st->in_bracket, rc;

    *won = 0;
    if (check_id(r->id, err) < 0 || (s = store_stmt(st, SQL_REAP, err)) == NULL) {
        return -1;
    }
    /* A bracket of our own, so the snapshot and the audit row join this transaction. */
    if (own && store_begin(st, err) < 0) {
        return -1;
    }
    store_bind_text(s, 1, r->id);
    sqlite3_bind_int64(s, 2, r->idle_before_ms);
    sqlite3_bind_int64(s, 3, r->stale_before_ms);
    sqlite3_bind_int64(s, 4, r->owner_pid);
    sqlite3_bind_int64(s, 5, r->owner_start);
    sqlite3_bind_int64(s, 6, time_now_ms());
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    rc = rc == SQLITE_DONE ? 0 : store_sqlerr(st, rc, "close an idle session", err);
    if (rc == 0 && sqlite3_changes(st->db) > 0) {
        /* Only the winner snapshots and audits, in the close's own transaction. */
        if (r->snapshot != NULL) {
            rc = store_snapshot_create(st, r->id, r->snapshot, "snapshot_on_close (idle reaper)",
                                       NULL, err);
        }
        if (rc == 0 && r->row != NULL) {
            rc = store_audit_append(st, r->row, err);
        }
        *won = rc == 0;
    }
    if (!own) {
        return rc;
    }
    if (rc < 0) {
        store_rollback(st);
        *won = 0;
        return -1;
    }
    if (store_commit(st, err) < 0) {
        *won = 0;
        return -1;
    }
    return 0;
}

int
store_session_set_label(struct store *st, const char *id, const char *label, struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(id, err) < 0 ||
        store_check_text(label, STORE_LABEL_MAX, 0, "session label", err) < 0 ||
        (s = store_stmt(st, SQL_SET_LABEL, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    store_bind_text(s, 2, (label && *label) ? label : NULL);
    return run_update(st, s, "label a session", 1, id, err);
}

int
store_session_set_head(struct store *st, const char *id, int64_t head, struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(id, err) < 0 || (s = store_stmt(st, SQL_SET_HEAD, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, head);
    sqlite3_bind_int64(s, 3, time_now_ms());
    if (run_update(st, s, "move a session head", 2, id, err) < 0) {
        return -1;
    }
    return 0;
}

int
store_session_touch(struct store *st, const char *id, struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(id, err) < 0 || (s = store_stmt(st, SQL_TOUCH, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, time_now_ms());
    return run_update(st, s, "touch a session", 1, id, err);
}

int
store_session_close(struct store *st, const char *id, struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(id, err) < 0 || (s = store_stmt(st, SQL_CLOSE, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, time_now_ms());
    return run_update(st, s, "close a session", 1, id, err);
}

int
store_overlay_set(struct store *st, const char *session, const char *key, const char *host_path,
                  struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(session, err) < 0 ||
        store_check_text(key, STORE_PATH_MAX, 1, "overlay key", err) < 0 ||
        store_check_text(host_path, STORE_PATH_MAX, 1, "overlay host path", err) < 0 ||
        (s = store_stmt(st, SQL_OVERLAY_SET, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    store_bind_text(s, 2, key);
    store_bind_text(s, 3, host_path);
    return run_update(st, s, "set an overlay", 0, session, err);
}

void
store_overlay_list_free(struct store_overlay *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        mem_free(list[i].key);
        mem_free(list[i].host_path);
    }
    mem_free(list);
}

int
store_overlay_list(struct store *st, const char *session, struct store_overlay **out, size_t *n,
                   struct err *err)
{
    struct store_overlay *list = NULL;
    size_t len = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, oom = 0;

    *out = NULL;
    *n = 0;
    if (check_id(session, err) < 0 || (s = store_stmt(st, SQL_OVERLAY_LIST, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            struct store_overlay *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                oom = 1;
                break;
            }
            list = grown;
            cap = ncap;
        }
        list[len].key = store_col_strdup(s, 0, &oom);
        list[len].host_path = store_col_strdup(s, 1, &oom);
        len++;
        if (oom) {
            break;
        }
    }
    sqlite3_reset(s);
    if (oom) {
        store_overlay_list_free(list, len);
        return err_set(err, ERR_NOMEM, "cannot list overlays: out of memory");
    }
    if (rc != SQLITE_DONE) {
        store_overlay_list_free(list, len);
        return store_sqlerr(st, rc, "list overlays", err);
    }
    *out = list;
    *n = len;
    return 0;
}

int
store_chat_append(struct store *st, const char *session, const char *prompt, const char *response,
                  struct err *err)
{
    sqlite3_stmt *s;

    if (check_id(session, err) < 0 ||
        store_check_text(prompt, STORE_TEXT_MAX, 1, "chat prompt", err) < 0 ||
        store_check_text(response, STORE_TEXT_MAX, 1, "chat response", err) < 0 ||
        (s = store_stmt(st, SQL_CHAT_APPEND, err)) == NULL) {
        return -1;
    }
    store_bind_text(s, 1, session);
    sqlite3_bind_int64(s, 2, time_now_ms());
    store_bind_text(s, 3, prompt);
    store_bind_text(s, 4, response);
    return run_update(st, s, "record a chat entry", 0, session, err);
}
