/*
 * store_gc.c - mark-and-sweep garbage collection of blobs.
 *
 * First, when asked, hidden checkpoints and closed sessions past their age are
 * deleted (their change and step rows go with them by ON DELETE CASCADE). Then mark:
 * every blob a remaining row names (manifests, stdout, stderr of checkpoints and
 * snapshot checkpoints) and every blob those manifests list goes into a temporary
 * table, and then the bases of kept delta blobs, level by level. Sweep deletes
 * every other blob. Audit rows are never deleted, and every blob an audit row's
 * arguments reference (audit_refs) is marked, so the full arguments of every call
 * stay readable after its session is closed and collected.
 *
 * It all runs in one write transaction: no process can add a checkpoint that points
 * at a blob between mark and sweep. A dry run does exactly the same work and then
 * rolls back, so what it reports is what a real run would delete. Blobs a writer has
 * put but not yet referenced are only safe if the writer put them in the same
 * bracket as the checkpoint that names them (store.h asks callers to), or, like a
 * streamed blob stored ahead by its writer's thread (store_blob_writer_store_bg), are
 * looked up again inside that bracket and stored again if gc took them meanwhile.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

#include "util/timeutil.h"

static const char SQL_DEL_HIDDEN[] =
    "DELETE FROM checkpoints WHERE status <> 0 AND hidden_ms <= ?1 AND NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.id = session_id AND s.head = checkpoints.id)";
static const char SQL_DEL_CLOSED[] = "DELETE FROM sessions WHERE state = 1 AND closed_ms <= ?1";
static const char SQL_MARK_DIRECT[] =
    "INSERT OR IGNORE INTO temp.gc_live (hash) "
    "SELECT manifest_hash FROM checkpoints UNION SELECT stdout_hash FROM checkpoints "
    "WHERE stdout_hash IS NOT NULL UNION SELECT stderr_hash FROM checkpoints "
    "WHERE stderr_hash IS NOT NULL UNION SELECT manifest_hash FROM snapshot_checkpoints "
    "UNION SELECT stdout_hash FROM snapshot_checkpoints WHERE stdout_hash IS NOT NULL "
    "UNION SELECT stderr_hash FROM snapshot_checkpoints WHERE stderr_hash IS NOT NULL "
    "UNION SELECT hash FROM audit_refs";
static const char SQL_MANIFESTS[] = "SELECT manifest_hash FROM checkpoints UNION "
                                    "SELECT manifest_hash FROM snapshot_checkpoints";
static const char SQL_MARK_ONE[] = "INSERT OR IGNORE INTO temp.gc_live (hash) VALUES (?1)";
/* Keeps the base of every kept delta blob; run until nothing new is marked (a chain
 * is at most STORE_DELTA_DEPTH_MAX deep, so that bounds the loop). */
static const char SQL_MARK_BASES[] =
    "INSERT OR IGNORE INTO temp.gc_live (hash) SELECT b.base FROM blobs b "
    "JOIN temp.gc_live l ON l.hash = b.hash WHERE b.base IS NOT NULL";
static const char SQL_SWEEP_COUNT[] = "SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs "
                                      "WHERE hash NOT IN (SELECT hash FROM temp.gc_live)";
static const char SQL_SWEEP[] = "DELETE FROM blobs WHERE hash NOT IN (SELECT hash FROM "
                                "temp.gc_live)";

struct mark_ctx {
    struct store *st;
    int rc; /* first SQLite failure, sticky */
};

static void
mark_ref(void *refctx, const uint8_t hash[HASH_LEN])
{
    struct mark_ctx *m = refctx;
    struct err ignored;
    sqlite3_stmt *s;

    if (m->rc != SQLITE_OK) {
        return;
    }
    s = store_stmt(m->st, SQL_MARK_ONE, &ignored);
    if (s == NULL) {
        m->rc = SQLITE_NOMEM;
        return;
    }
    store_bind_hash(s, 1, hash);
    m->rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (m->rc == SQLITE_DONE) {
        m->rc = SQLITE_OK;
    }
}

static int
delete_aged(struct store *st, const char *sql, int64_t age_ms, int64_t *deleted, struct err *err)
{
    sqlite3_stmt *s;
    int rc;

    *deleted = 0;
    if (age_ms < 0) {
        return 0;
    }
    s = store_stmt(st, sql, err);
    if (s == NULL) {
        return -1;
    }
    sqlite3_bind_int64(s, 1, time_now_ms() - age_ms);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        return store_sqlerr(st, rc, "delete old history", err);
    }
    *deleted = sqlite3_changes64(st->db);
    return 0;
}

/* Marks every blob the manifests list. */
static int
mark_manifests(struct store *st, store_manifest_refs_fn refs, void *refs_ctx, struct err *err)
{
    struct mark_ctx m = {st, SQLITE_OK};
    sqlite3_stmt *list = NULL;
    struct buf manifest;
    int rc, ret = -1;

    /* A separate statement: the cached one would be reset by the nested reads. */
    rc = sqlite3_prepare_v2(st->db, SQL_MANIFESTS, -1, &list, NULL);
    if (rc != SQLITE_OK) {
        return store_sqlerr(st, rc, "list manifests", err);
    }
    buf_init(&manifest, st->blob_max);
    while ((rc = sqlite3_step(list)) == SQLITE_ROW) {
        uint8_t hash[HASH_LEN];
        if (sqlite3_column_bytes(list, 0) != HASH_LEN) {
            continue;
        }
        memcpy(hash, sqlite3_column_blob(list, 0), HASH_LEN);
        buf_reset(&manifest);
        if (store_blob_read(st, hash, &manifest, err) < 0) {
            err_wrap(err, "gc stopped, nothing deleted");
            goto out;
        }
        if (refs(refs_ctx, manifest.data ? manifest.data : "", manifest.len, mark_ref, &m, err) <
            0) {
            err_wrap(err, "gc stopped, nothing deleted: cannot read a manifest");
            goto out;
        }
        if (m.rc != SQLITE_OK) {
            store_sqlerr(st, m.rc, "mark blobs", err);
            goto out;
        }
    }
    if (rc != SQLITE_DONE) {
        store_sqlerr(st, rc, "list manifests", err);
        goto out;
    }
    ret = 0;
out:
    buf_release(&manifest);
    sqlite3_finalize(list);
    return ret;
}

int
store_gc(struct store *st, const struct store_gc_opts *opts, store_manifest_refs_fn refs,
         void *refs_ctx, struct store_gc_result *out, struct err *err)
{
    struct store_gc_result res;
    sqlite3_stmt *s;
    int own = 0, rc, ret = -1;

    memset(out, 0, sizeof(*out));
    memset(&res, 0, sizeof(res));
    if (refs == NULL) {
        /* Without a manifest reader every file blob would look unreferenced. */
        return err_set(err, ERR_INVAL, "gc needs a manifest reader; nothing was deleted");
    }
    if (st->in_bracket) {
        return err_set(err, ERR_INTERNAL, "gc cannot run inside an open bracket");
    }
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (store_exec(st,
                   "CREATE TEMP TABLE IF NOT EXISTS gc_live (hash BLOB PRIMARY KEY) WITHOUT ROWID",
                   err) < 0 ||
        store_exec(st, "DELETE FROM temp.gc_live", err) < 0) {
        goto out;
    }
    if (delete_aged(st, SQL_DEL_HIDDEN, opts ? opts->discarded_older_than_ms : -1,
                    &res.checkpoints_deleted, err) < 0 ||
        delete_aged(st, SQL_DEL_CLOSED, opts ? opts->closed_older_than_ms : -1,
                    &res.sessions_deleted, err) < 0) {
        goto out;
    }
    if (store_exec(st, SQL_MARK_DIRECT, err) < 0 || mark_manifests(st, refs, refs_ctx, err) < 0) {
        goto out;
    }
    for (int level = 0; level <= STORE_DELTA_DEPTH_MAX; level++) {
        if (store_exec(st, SQL_MARK_BASES, err) < 0) {
            goto out;
        }
        if (sqlite3_changes64(st->db) == 0) {
            break;
        }
    }
    s = store_stmt(st, SQL_SWEEP_COUNT, err);
    if (s == NULL) {
        goto out;
    }
    rc = sqlite3_step(s);
    res.blobs_deleted = sqlite3_column_int64(s, 0);
    res.bytes_freed = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        store_sqlerr(st, rc, "count unreferenced blobs", err);
        goto out;
    }
    if (store_exec(st, SQL_SWEEP, err) < 0) {
        goto out;
    }
    ret = 0;
out:
    /* A dry run keeps nothing: roll back whatever the run did. */
    if (ret == 0 && opts != NULL && opts->dry_run) {
        store_rollback(st);
        own = 0;
    }
    if (ret == 0) {
        *out = res;
    }
    return store_tx_end(st, own, ret, err);
}
