/*
 * store_snapshot.c - snapshots: create, list, show, delete, restore, export, import.
 * Export and import (the blob set, the file, the checks) live in store_snapshot_file.c.
 *
 * A snapshot copies a session's rows (session, checkpoints of every status, change
 * rows, steps, chat log, overlays) into the snapshot_* tables with INSERT ... SELECT,
 * so it points at the same blobs and costs rows, never blob bytes. gc treats
 * snapshot checkpoints as roots, so the blobs stay as long as the snapshot does.
 *
 * Export (SQLite as an application file format): a fresh drun database is created
 * beside the target, ATTACHed to this connection, and filled with the snapshot's rows
 * and exactly the blobs they need: manifests, outputs, every blob a manifest lists,
 * and the base chain of every delta (a delta without its base cannot be read). The
 * file is switched to a rollback journal (one self-contained file) and renamed into
 * place without replacing anything.
 *
 * Import trusts nothing in the file: its application_id and schema version are
 * checked, it must hold exactly one snapshot, every blob this DB lacks is copied and
 * then read back through store_blob_read (size, zstd frame, delta chain and SHA-256
 * checks), every blob the snapshot names must then be present, and the head must be
 * a live checkpoint. All of it is one BEGIN IMMEDIATE transaction: any failure rolls
 * back and leaves the DB as it was.
 *
 * These functions run rarely and use many distinct statements, so they prepare and
 * finalize their own instead of taking slots in the connection's statement cache.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/timeutil.h"

#define SNAP_COLS                                                                                  \
    "p.id, p.name, p.description, p.created_ms, p.source_session_id, p.label, p.client, "          \
    "p.parent_id, p.parent_checkpoint, p.session_created_ms, p.head, "                             \
    "(SELECT count(*) FROM snapshot_checkpoints c WHERE c.snapshot_id = p.id AND c.status = 0), "  \
    "(SELECT count(*) FROM snapshot_checkpoints c WHERE c.snapshot_id = p.id), "                   \
    "coalesce((SELECT c.logical_bytes FROM snapshot_checkpoints c WHERE c.snapshot_id = p.id "     \
    "AND c.id = p.head), 0)"

static const char SQL_SNAP_INSERT[] =
    "INSERT INTO snapshots (name, created_ms, source_session_id, label, parent_id, "
    "parent_checkpoint, head, session_created_ms, client, description) SELECT ?1, ?2, id, label, "
    "parent_id, parent_checkpoint, head, created_ms, client, ?4 FROM sessions WHERE id = ?3";
static const char SQL_SNAP_CPS[] =
    "INSERT INTO snapshot_checkpoints (snapshot_id, " CP_BODY ") SELECT ?1, " CP_BODY
    " FROM checkpoints WHERE session_id = ?2";
static const char SQL_SNAP_CHANGES[] =
    "INSERT INTO snapshot_changes (snapshot_id, checkpoint_id, path, kind) "
    "SELECT ?1, checkpoint_id, path, kind FROM checkpoint_changes WHERE session_id = ?2";
static const char SQL_SNAP_STEPS[] =
    "INSERT INTO snapshot_steps (snapshot_id, checkpoint_id, seq, time_ms, tool, description) "
    "SELECT ?1, checkpoint_id, seq, time_ms, tool, description FROM checkpoint_steps "
    "WHERE session_id = ?2";
static const char SQL_SNAP_CHAT[] =
    "INSERT INTO snapshot_chat (snapshot_id, seq, time_ms, prompt, response) "
    "SELECT ?1, seq, time_ms, prompt, response FROM session_chat WHERE session_id = ?2";
static const char SQL_SNAP_OVERLAYS[] =
    "INSERT INTO snapshot_overlays (snapshot_id, key, host_path) "
    "SELECT ?1, key, host_path FROM session_overlays WHERE session_id = ?2";

static const char SQL_RESTORE_SESSION[] =
    "INSERT INTO sessions (id, label, parent_id, parent_checkpoint, created_ms, last_active_ms, "
    "head, state, owner_pid, owner_start, heartbeat_ms, client) SELECT ?1, label, parent_id, "
    "parent_checkpoint, ?3, ?3, ?4, 0, ?5, ?6, ?3, client FROM snapshots WHERE id = ?2";
static const char SQL_RESTORE_CPS[] =
    "INSERT INTO checkpoints (session_id, " CP_BODY ", hidden_ms) SELECT ?1, " CP_BODY
    ", CASE WHEN status <> 0 THEN ?3 END FROM snapshot_checkpoints WHERE snapshot_id = ?2";
static const char SQL_RESTORE_CHANGES[] =
    "INSERT INTO checkpoint_changes (session_id, checkpoint_id, path, kind) "
    "SELECT ?1, checkpoint_id, path, kind FROM snapshot_changes WHERE snapshot_id = ?2";
static const char SQL_RESTORE_STEPS[] =
    "INSERT INTO checkpoint_steps (session_id, checkpoint_id, seq, time_ms, tool, description) "
    "SELECT ?1, checkpoint_id, seq, time_ms, tool, description FROM snapshot_steps "
    "WHERE snapshot_id = ?2";
static const char SQL_RESTORE_CHAT[] =
    "INSERT INTO session_chat (session_id, seq, time_ms, prompt, response) "
    "SELECT ?1, seq, time_ms, prompt, response FROM snapshot_chat WHERE snapshot_id = ?2";
static const char SQL_RESTORE_OVERLAYS[] =
    "INSERT INTO session_overlays (session_id, key, host_path) "
    "SELECT ?1, key, host_path FROM snapshot_overlays WHERE snapshot_id = ?2";

/* ---- small helpers ----------------------------------------------------------------- */

int
store_snap_prep(struct store *st, const char *sql, sqlite3_stmt **s, struct err *err)
{
    int rc = sqlite3_prepare_v2(st->db, sql, -1, s, NULL);

    if (rc != SQLITE_OK) {
        sqlite3_finalize(*s);
        *s = NULL;
        return store_sqlerr(st, rc, "prepare a snapshot query", err);
    }
    return 0;
}

/* Steps a statement with no result rows to the end, finalizes it, translates errors. */
int
store_snap_done(struct store *st, sqlite3_stmt *s, const char *what, struct err *err)
{
    int rc = sqlite3_step(s);

    if (rc == SQLITE_ROW) {
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        }
    }
    if (rc != SQLITE_DONE) {
        store_sqlerr(st, rc, what, err);
        sqlite3_finalize(s);
        return -1;
    }
    sqlite3_finalize(s);
    return 0;
}

/* Runs `sql` with ?1 = an int64 and ?2 = a text (either may be unused). */
int
store_snap_run(struct store *st, const char *sql, int64_t a, const char *b, const char *what,
               struct err *err)
{
    sqlite3_stmt *s = NULL;

    if (store_snap_prep(st, sql, &s, err) < 0) {
        return -1;
    }
    if (sqlite3_bind_parameter_count(s) >= 1) {
        sqlite3_bind_int64(s, 1, a);
    }
    if (sqlite3_bind_parameter_count(s) >= 2) {
        store_bind_text(s, 2, b);
    }
    return store_snap_done(st, s, what, err);
}

/* Runs a query whose first column of the first row is an integer into *out (0 if none). */
int
store_snap_query_int(struct store *st, const char *sql, const char *text, int64_t *out,
                     struct err *err)
{
    sqlite3_stmt *s = NULL;
    int rc;

    *out = 0;
    if (store_snap_prep(st, sql, &s, err) < 0) {
        return -1;
    }
    if (sqlite3_bind_parameter_count(s) >= 1) {
        store_bind_text(s, 1, text);
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(s, 0);
    } else if (rc != SQLITE_DONE) {
        store_sqlerr(st, rc, "read the database", err);
        sqlite3_finalize(s);
        return -1;
    }
    sqlite3_finalize(s);
    return 0;
}

void
store_snapshot_release(struct store_snapshot *s)
{
    if (s == NULL) {
        return;
    }
    mem_free(s->description);
    mem_free(s->label);
    mem_free(s->client);
    s->description = NULL;
    s->label = NULL;
    s->client = NULL;
}

int
store_snapshot_name_check(const char *name, struct err *err)
{
    size_t n;

    if (name == NULL || name[0] == '\0') {
        return err_set(err, ERR_INVAL, "snapshot name is missing; give one");
    }
    n = strlen(name);
    if (n > STORE_SNAPSHOT_NAME_MAX) {
        return err_set(err, ERR_INVAL, "snapshot name '%.40s...' is longer than %d characters",
                       name, STORE_SNAPSHOT_NAME_MAX);
    }
    if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n ||
        name[0] == '.' || name[0] == '-') {
        return err_set(err, ERR_INVAL,
                       "snapshot name '%.64s' is not valid; use letters, digits, '.', '_' and "
                       "'-', not starting with '.' or '-'",
                       name);
    }
    return 0;
}

static int
read_snapshot(sqlite3_stmt *s, struct store_snapshot *out)
{
    int oom = 0;
    const unsigned char *t;

    memset(out, 0, sizeof(*out));
    out->id = sqlite3_column_int64(s, 0);
    t = sqlite3_column_text(s, 1);
    snprintf(out->name, sizeof(out->name), "%s", t ? (const char *)t : "");
    out->description = store_col_strdup(s, 2, &oom);
    out->created_ms = sqlite3_column_int64(s, 3);
    t = sqlite3_column_text(s, 4);
    snprintf(out->session_id, sizeof(out->session_id), "%s", t ? (const char *)t : "");
    out->label = store_col_strdup(s, 5, &oom);
    out->client = store_col_strdup(s, 6, &oom);
    t = sqlite3_column_text(s, 7);
    snprintf(out->parent_id, sizeof(out->parent_id), "%s", t ? (const char *)t : "");
    out->parent_checkpoint =
        sqlite3_column_type(s, 8) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 8);
    out->session_created_ms = sqlite3_column_int64(s, 9);
    out->head = sqlite3_column_int64(s, 10);
    out->checkpoints = sqlite3_column_int64(s, 11);
    out->checkpoints_all = sqlite3_column_int64(s, 12);
    out->head_bytes = sqlite3_column_int64(s, 13);
    if (oom) {
        store_snapshot_release(out);
        return -1;
    }
    return 0;
}

/* Loads by name from schema `db` ("main" or an attached one). */
int
store_snapshot_get_in(struct store *st, const char *db, const char *name,
                      struct store_snapshot *out, struct err *err)
{
    char sql[1024];
    sqlite3_stmt *s = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    snprintf(sql, sizeof(sql), "SELECT " SNAP_COLS " FROM %s.snapshots p WHERE p.name = ?1", db);
    /* The counting subqueries name unqualified tables; for an attached file qualify
     * them so they count its rows. */
    if (strcmp(db, "main") != 0) {
        snprintf(sql, sizeof(sql),
                 "SELECT p.id, p.name, p.description, p.created_ms, p.source_session_id, "
                 "p.label, p.client, p.parent_id, p.parent_checkpoint, p.session_created_ms, "
                 "p.head, (SELECT count(*) FROM %s.snapshot_checkpoints c WHERE c.snapshot_id "
                 "= p.id AND c.status = 0), (SELECT count(*) FROM %s.snapshot_checkpoints c "
                 "WHERE c.snapshot_id = p.id), 0 FROM %s.snapshots p WHERE ?1 IS NULL OR "
                 "p.name = ?1",
                 db, db, db);
    }
    if (store_snap_prep(st, sql, &s, err) < 0) {
        return -1;
    }
    store_bind_text(s, 1, name);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        if (read_snapshot(s, out) < 0) {
            sqlite3_finalize(s);
            return err_set(err, ERR_NOMEM, "cannot read snapshot '%s': out of memory", name);
        }
        sqlite3_finalize(s);
        return 0;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        return store_sqlerr(st, rc, "read a snapshot", err);
    }
    return err_set(err, ERR_NOTFOUND,
                   "snapshot '%s' does not exist; 'drun-admin snapshot list' shows them",
                   name ? name : "");
}

int
store_snapshot_get(struct store *st, const char *name, struct store_snapshot *out, struct err *err)
{
    if (store_snapshot_name_check(name, err) < 0) {
        memset(out, 0, sizeof(*out));
        if (name != NULL && name[0] != '\0') {
            err->code = ERR_NOTFOUND;
        }
        return -1;
    }
    return store_snapshot_get_in(st, "main", name, out, err);
}

int
store_snapshot_list(struct store *st, struct store_snapshot **out, size_t *n, struct err *err)
{
    sqlite3_stmt *s = NULL;
    struct store_snapshot *list = NULL;
    size_t count = 0, cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    if (store_snap_prep(st, "SELECT " SNAP_COLS " FROM snapshots p ORDER BY p.created_ms, p.id", &s,
                        err) < 0) {
        return -1;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct store_snapshot *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                rc = SQLITE_NOMEM;
                break;
            }
            list = grown;
            cap = ncap;
        }
        if (read_snapshot(s, &list[count]) < 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        count++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        store_snapshot_list_free(list, count);
        if (rc == SQLITE_NOMEM) {
            return err_set(err, ERR_NOMEM, "cannot list snapshots: out of memory");
        }
        return store_sqlerr(st, rc, "list snapshots", err);
    }
    *out = list;
    *n = count;
    return 0;
}

void
store_snapshot_list_free(struct store_snapshot *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        store_snapshot_release(&list[i]);
    }
    mem_free(list);
}

int
store_snapshot_checkpoints(struct store *st, const char *name, struct store_checkpoint **out,
                           size_t *n, struct err *err)
{
    struct store_snapshot snap;
    sqlite3_stmt *s = NULL;
    struct store_checkpoint *list = NULL;
    size_t count = 0, cap = 0;
    int rc, oom = 0;

    *out = NULL;
    *n = 0;
    if (store_snapshot_get(st, name, &snap, err) < 0) {
        return -1;
    }
    if (store_snap_prep(
            st, "SELECT " CP_BODY " FROM snapshot_checkpoints WHERE snapshot_id = ?1 ORDER BY id",
            &s, err) < 0) {
        store_snapshot_release(&snap);
        return -1;
    }
    sqlite3_bind_int64(s, 1, snap.id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct store_checkpoint *cp;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct store_checkpoint *grown = mem_realloc(list, ncap * sizeof(*list));
            if (grown == NULL) {
                rc = SQLITE_NOMEM;
                break;
            }
            list = grown;
            cap = ncap;
        }
        cp = &list[count++];
        memset(cp, 0, sizeof(*cp));
        snprintf(cp->session_id, sizeof(cp->session_id), "%s", snap.session_id);
        cp->id = sqlite3_column_int64(s, 0);
        cp->parent = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 1);
        cp->tool = store_col_strdup(s, 2, &oom);
        cp->command = store_col_strdup(s, 3, &oom);
        cp->description = store_col_strdup(s, 4, &oom);
        cp->label = store_col_strdup(s, 5, &oom);
        cp->has_exit_code = sqlite3_column_type(s, 6) != SQLITE_NULL;
        cp->exit_code = sqlite3_column_int(s, 6);
        cp->duration_ms = sqlite3_column_int64(s, 7);
        cp->created_ms = sqlite3_column_int64(s, 8);
        if (sqlite3_column_bytes(s, 9) == HASH_LEN) {
            memcpy(cp->stdout_hash, sqlite3_column_blob(s, 9), HASH_LEN);
        }
        cp->stdout_bytes = sqlite3_column_int64(s, 10);
        if (sqlite3_column_bytes(s, 11) == HASH_LEN) {
            memcpy(cp->stderr_hash, sqlite3_column_blob(s, 11), HASH_LEN);
        }
        cp->stderr_bytes = sqlite3_column_int64(s, 12);
        if (sqlite3_column_bytes(s, 13) == HASH_LEN) {
            memcpy(cp->manifest_hash, sqlite3_column_blob(s, 13), HASH_LEN);
        }
        cp->file_count = sqlite3_column_int64(s, 14);
        cp->added = sqlite3_column_int64(s, 15);
        cp->modified = sqlite3_column_int64(s, 16);
        cp->removed = sqlite3_column_int64(s, 17);
        cp->logical_bytes = sqlite3_column_int64(s, 18);
        cp->status = sqlite3_column_int(s, 19);
        if (oom) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(s);
    store_snapshot_release(&snap);
    if (rc != SQLITE_DONE) {
        store_checkpoint_list_free(list, count);
        if (rc == SQLITE_NOMEM) {
            return err_set(err, ERR_NOMEM, "cannot list snapshot checkpoints: out of memory");
        }
        return store_sqlerr(st, rc, "list snapshot checkpoints", err);
    }
    *out = list;
    *n = count;
    return 0;
}

int
store_snap_name_taken(struct store *st, const char *name, struct err *err)
{
    int64_t taken = 0;

    if (store_snap_query_int(st, "SELECT count(*) FROM main.snapshots WHERE name = ?1", name,
                             &taken, err) < 0) {
        return -1;
    }
    if (taken) {
        return err_set(err, ERR_EXISTS,
                       "snapshot '%s' already exists; choose another name or delete it first",
                       name);
    }
    return 0;
}

int
store_snapshot_create(struct store *st, const char *session, const char *name,
                      const char *description, struct store_snapshot *out, struct err *err)
{
    char auto_name[64];
    sqlite3_stmt *s = NULL;
    int64_t id, now = time_now_ms();
    int own = 0, rc = -1;
    static const char *const copies[] = {SQL_SNAP_CPS, SQL_SNAP_CHANGES, SQL_SNAP_STEPS,
                                         SQL_SNAP_CHAT, SQL_SNAP_OVERLAYS};

    if (out != NULL) {
        memset(out, 0, sizeof(*out));
    }
    if (session == NULL || strlen(session) != STORE_SESSION_ID_LEN) {
        return err_set(err, ERR_NOTFOUND, "session '%.32s' does not exist", session ? session : "");
    }
    if (name == NULL) {
        char iso[32];
        time_format_iso(now, iso, sizeof(iso));
        /* 2026-01-02T03:04:05.678Z -> 20260102T030405678Z: a valid name and file stem. */
        size_t k = 0;
        k += (size_t)snprintf(auto_name, sizeof(auto_name), "%s-", session);
        for (const char *c = iso; *c != '\0' && k + 1 < sizeof(auto_name); c++) {
            if (*c != '-' && *c != ':' && *c != '.') {
                auto_name[k++] = *c;
            }
        }
        auto_name[k] = '\0';
        name = auto_name;
    }
    if (store_snapshot_name_check(name, err) < 0 ||
        store_check_text(description, STORE_TEXT_MAX, 0, "snapshot description", err) < 0) {
        return -1;
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (store_snap_name_taken(st, name, err) < 0 ||
        store_snap_prep(st, SQL_SNAP_INSERT, &s, err) < 0) {
        goto out;
    }
    store_bind_text(s, 1, name);
    sqlite3_bind_int64(s, 2, now);
    store_bind_text(s, 3, session);
    store_bind_text(s, 4, description);
    if (store_snap_done(st, s, "store a snapshot", err) < 0) {
        goto out;
    }
    if (sqlite3_changes(st->db) == 0) {
        err_set(err, ERR_NOTFOUND, "cannot snapshot session '%s': it does not exist", session);
        goto out;
    }
    id = sqlite3_last_insert_rowid(st->db);
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        if (store_snap_run(st, copies[i], id, session, "copy the session into the snapshot", err) <
            0) {
            goto out;
        }
    }
    if (out != NULL && store_snapshot_get_in(st, "main", name, out, err) < 0) {
        goto out;
    }
    rc = 0;
out:
    rc = store_tx_end(st, own, rc, err);
    if (rc < 0 && out != NULL) {
        store_snapshot_release(out);
    }
    return rc;
}

int
store_snapshot_delete(struct store *st, const char *name, struct err *err)
{
    struct store_snapshot snap;
    int own = 0, rc = -1;

    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (store_snapshot_get(st, name, &snap, err) < 0) {
        goto out;
    }
    rc = store_snap_run(st, "DELETE FROM snapshots WHERE id = ?1", snap.id, NULL,
                        "delete a snapshot", err);
    store_snapshot_release(&snap);
out:
    return store_tx_end(st, own, rc, err);
}

/* Picks a session id that no session uses. */
static int
new_session_id(struct store *st, char id[STORE_SESSION_ID_LEN + 1], struct err *err)
{
    for (int i = 0; i < 32; i++) {
        int64_t used = 0;
        if (store_random_hex(id, STORE_SESSION_ID_LEN / 2, err) < 0 ||
            store_snap_query_int(st, "SELECT count(*) FROM sessions WHERE id = ?1", id, &used,
                                 err) < 0) {
            return -1;
        }
        if (!used) {
            return 0;
        }
    }
    return err_set(err, ERR_INTERNAL, "cannot find a free session id");
}

int
store_snapshot_restore(struct store *st, const char *name, int64_t head, pid_t owner_pid,
                       int64_t owner_start, struct store_session *out, struct err *err)
{
    struct store_snapshot snap;
    char id[STORE_SESSION_ID_LEN + 1];
    sqlite3_stmt *s = NULL;
    int64_t live = 0, now = time_now_ms();
    int own = 0, rc = -1;
    char q[160];
    static const char *const copies[] = {SQL_RESTORE_CPS, SQL_RESTORE_CHANGES, SQL_RESTORE_STEPS,
                                         SQL_RESTORE_CHAT, SQL_RESTORE_OVERLAYS};

    memset(out, 0, sizeof(*out));
    memset(&snap, 0, sizeof(snap));
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (store_snapshot_get(st, name, &snap, err) < 0) {
        goto out;
    }
    if (head < 0) {
        head = snap.head;
    }
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM snapshot_checkpoints WHERE snapshot_id = %lld AND id = %lld "
             "AND status = 0 AND ?1 IS NULL",
             (long long)snap.id, (long long)head);
    if (store_snap_query_int(st, q, NULL, &live, err) < 0) {
        goto out;
    }
    if (!live) {
        err_set(err, ERR_NOTFOUND,
                "snapshot '%s' has no live checkpoint %lld; 'drun-admin snapshot show %s' lists "
                "them",
                name, (long long)head, name);
        goto out;
    }
    if (new_session_id(st, id, err) < 0 || store_snap_prep(st, SQL_RESTORE_SESSION, &s, err) < 0) {
        goto out;
    }
    store_bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, snap.id);
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int64(s, 4, head);
    if (owner_pid > 0) {
        sqlite3_bind_int64(s, 5, owner_pid);
        sqlite3_bind_int64(s, 6, owner_start);
    }
    if (store_snap_done(st, s, "make the restored session", err) < 0) {
        goto out;
    }
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        sqlite3_stmt *c = NULL;
        if (store_snap_prep(st, copies[i], &c, err) < 0) {
            goto out;
        }
        store_bind_text(c, 1, id);
        sqlite3_bind_int64(c, 2, snap.id);
        if (sqlite3_bind_parameter_count(c) >= 3) {
            sqlite3_bind_int64(c, 3, now);
        }
        if (store_snap_done(st, c, "copy the snapshot into the session", err) < 0) {
            goto out;
        }
    }
    rc = store_session_get(st, id, out, err);
out:
    store_snapshot_release(&snap);
    return store_tx_end(st, own, rc, err);
}

/* ---- overlays re-checked --------------------------------------------------------------- */

/* Runs the overlays `sel` lists (bound to owner) through keep; deletes the dropped ones. */
static int
overlays_filter(struct store *st, const char *sel, const char *del, int64_t owner_i,
                const char *owner_s, store_overlay_keep_fn keep, void *ctx, struct err *err)
{
    sqlite3_stmt *s = NULL, *ins = NULL;
    int own = 0, rc = -1, step;

    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (store_exec(st, "CREATE TEMP TABLE IF NOT EXISTS ov_drop (key TEXT PRIMARY KEY)", err) < 0 ||
        store_exec(st, "DELETE FROM temp.ov_drop", err) < 0 ||
        store_snap_prep(st, sel, &s, err) < 0 ||
        store_snap_prep(st, "INSERT OR IGNORE INTO temp.ov_drop (key) VALUES (?1)", &ins, err) <
            0) {
        goto out;
    }
    if (owner_s != NULL) {
        store_bind_text(s, 1, owner_s);
    } else {
        sqlite3_bind_int64(s, 1, owner_i);
    }
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(s, 0);
        const char *host = (const char *)sqlite3_column_text(s, 1);
        if (keep(ctx, key ? key : "", host ? host : "")) {
            continue;
        }
        sqlite3_reset(ins);
        store_bind_text(ins, 1, key ? key : "");
        if ((step = sqlite3_step(ins)) != SQLITE_DONE) {
            store_sqlerr(st, step, "note a dropped overlay", err);
            goto out;
        }
    }
    if (step != SQLITE_DONE) {
        store_sqlerr(st, step, "read the overlays", err);
        goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
    if (store_snap_prep(st, del, &s, err) < 0) {
        goto out;
    }
    if (owner_s != NULL) {
        store_bind_text(s, 1, owner_s);
    } else {
        sqlite3_bind_int64(s, 1, owner_i);
    }
    if (store_snap_done(st, s, "drop refused overlays", err) < 0) {
        s = NULL;
        goto out;
    }
    s = NULL;
    rc = store_exec(st, "DELETE FROM temp.ov_drop", err);
out:
    sqlite3_finalize(s);
    sqlite3_finalize(ins);
    return store_tx_end(st, own, rc, err);
}

int
store_snapshot_overlays_filter(struct store *st, const char *name, store_overlay_keep_fn keep,
                               void *ctx, struct err *err)
{
    struct store_snapshot snap;
    int rc;

    memset(&snap, 0, sizeof(snap));
    if (store_snapshot_get(st, name, &snap, err) < 0) {
        return -1;
    }
    rc = overlays_filter(st,
                         "SELECT key, host_path FROM snapshot_overlays WHERE snapshot_id = ?1 "
                         "ORDER BY key",
                         "DELETE FROM snapshot_overlays WHERE snapshot_id = ?1 AND key IN "
                         "(SELECT key FROM temp.ov_drop)",
                         snap.id, NULL, keep, ctx, err);
    store_snapshot_release(&snap);
    return rc;
}

int
store_session_overlays_filter(struct store *st, const char *session_id, store_overlay_keep_fn keep,
                              void *ctx, struct err *err)
{
    return overlays_filter(st,
                           "SELECT key, host_path FROM session_overlays WHERE session_id = ?1 "
                           "ORDER BY key",
                           "DELETE FROM session_overlays WHERE session_id = ?1 AND key IN "
                           "(SELECT key FROM temp.ov_drop)",
                           0, session_id, keep, ctx, err);
}
