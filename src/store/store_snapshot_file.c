/*
 * store_snapshot_file.c - snapshot files: export one snapshot (its rows and exactly the
 * blobs they need) into a fresh drun database file, and import such a file, checking all
 * of it, in one transaction. See store_snapshot.c for the design.
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

/* ---- the set of blobs a snapshot needs --------------------------------------------- */

struct ref_ctx {
    sqlite3_stmt *ins;
    int rc;
};

static void
ref_one(void *refctx, const uint8_t hash[HASH_LEN])
{
    struct ref_ctx *r = refctx;
    int rc;

    if (r->rc != SQLITE_DONE) {
        return;
    }
    sqlite3_reset(r->ins);
    store_bind_hash(r->ins, 1, hash);
    rc = sqlite3_step(r->ins);
    if (rc != SQLITE_DONE) {
        r->rc = rc;
    }
    sqlite3_reset(r->ins);
}

/*
 * Fills temp.snap_refs with every blob snapshot `id` of schema `db` needs, reading
 * manifests from this connection's main blobs. With `closure`, adds the base chains.
 */
static int
collect_refs(struct store *st, const char *db, int64_t id, store_manifest_refs_fn refs,
             void *refs_ctx, int closure, struct err *err)
{
    char sql[512];
    sqlite3_stmt *m = NULL;
    struct ref_ctx r = {NULL, SQLITE_DONE};
    struct buf bytes;
    int rc = -1, step;

    buf_init(&bytes, st->blob_max);
    if (store_exec(st,
                   "CREATE TEMP TABLE IF NOT EXISTS snap_refs (hash BLOB PRIMARY KEY) "
                   "WITHOUT ROWID",
                   err) < 0 ||
        store_exec(st, "DELETE FROM temp.snap_refs", err) < 0) {
        return -1;
    }
    snprintf(sql, sizeof(sql),
             "INSERT OR IGNORE INTO temp.snap_refs SELECT manifest_hash FROM "
             "%s.snapshot_checkpoints WHERE snapshot_id = ?1 UNION SELECT stdout_hash FROM "
             "%s.snapshot_checkpoints WHERE snapshot_id = ?1 AND stdout_hash IS NOT NULL UNION "
             "SELECT stderr_hash FROM %s.snapshot_checkpoints WHERE snapshot_id = ?1 AND "
             "stderr_hash IS NOT NULL",
             db, db, db);
    if (store_snap_run(st, sql, id, NULL, "collect the snapshot's blobs", err) < 0) {
        return -1;
    }
    snprintf(sql, sizeof(sql),
             "SELECT DISTINCT manifest_hash, id FROM %s.snapshot_checkpoints WHERE "
             "snapshot_id = ?1 GROUP BY manifest_hash",
             db);
    if (store_snap_prep(st, sql, &m, err) < 0 ||
        store_snap_prep(st, "INSERT OR IGNORE INTO temp.snap_refs (hash) VALUES (?1)", &r.ins,
                        err) < 0) {
        goto out;
    }
    sqlite3_bind_int64(m, 1, id);
    while ((step = sqlite3_step(m)) == SQLITE_ROW) {
        uint8_t h[HASH_LEN];
        if (sqlite3_column_bytes(m, 0) != HASH_LEN) {
            err_set(err, ERR_CORRUPT, "snapshot checkpoint %lld has a damaged manifest hash",
                    (long long)sqlite3_column_int64(m, 1));
            goto out;
        }
        memcpy(h, sqlite3_column_blob(m, 0), HASH_LEN);
        buf_reset(&bytes);
        if (store_blob_read(st, h, &bytes, err) < 0) {
            err_wrap(err, "reading the manifest of checkpoint %lld",
                     (long long)sqlite3_column_int64(m, 1));
            goto out;
        }
        if (refs(refs_ctx, bytes.data ? bytes.data : "", bytes.len, ref_one, &r, err) < 0) {
            goto out;
        }
        if (r.rc != SQLITE_DONE) {
            store_sqlerr(st, r.rc, "collect the snapshot's blobs", err);
            goto out;
        }
    }
    if (step != SQLITE_DONE) {
        store_sqlerr(st, step, "read the snapshot's manifests", err);
        goto out;
    }
    /* Delta bases, level by level; a chain is at most STORE_DELTA_DEPTH_MAX deep. */
    for (int i = 0; closure && i <= STORE_DELTA_DEPTH_MAX + 1; i++) {
        if (store_exec(st,
                       "INSERT OR IGNORE INTO temp.snap_refs SELECT b.base FROM main.blobs b "
                       "JOIN temp.snap_refs r ON r.hash = b.hash WHERE b.base IS NOT NULL",
                       err) < 0) {
            goto out;
        }
        if (sqlite3_changes(st->db) == 0) {
            break;
        }
    }
    rc = 0;
out:
    sqlite3_finalize(m);
    sqlite3_finalize(r.ins);
    buf_release(&bytes);
    return rc;
}

/* ---- export -------------------------------------------------------------------------- */

/*
 * SQLite reports a damaged attached file as the connection's own corruption; the store's
 * message would then tell the operator to restore their database from a backup. Names
 * the snapshot file instead, whose bytes are the ones at fault.
 */
static int
file_corrupt(const char *path, struct err *err)
{
    char why[sizeof(err->msg)];
    const char *p = strstr(err->msg, "is corrupt: ");
    size_t n;

    snprintf(why, sizeof(why), "%s", p ? p + strlen("is corrupt: ") : err->msg);
    n = strcspn(why, ";");
    why[n] = '\0';
    return err_set(err, ERR_CORRUPT,
                   "snapshot file '%s' is damaged or not a drun snapshot (%s); the database "
                   "was not changed; export the snapshot again",
                   path, why);
}

static int
attach(struct store *st, const char *path, const char *shown, struct err *err)
{
    sqlite3_stmt *s = NULL;

    /* An imported file is not ours until checked: its schema may hold views or triggers
     * built to run functions. Untrusted schema may call only innocuous functions, and
     * defensive mode keeps it from reaching the database's own structure. */
    sqlite3_db_config(st->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
    sqlite3_db_config(st->db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
    if (store_snap_prep(st, "ATTACH DATABASE ?1 AS snapfile", &s, err) < 0) {
        return -1;
    }
    store_bind_text(s, 1, path);
    if (store_snap_done(st, s, "open the snapshot file", err) < 0) {
        if (err->code == ERR_CORRUPT) {
            return file_corrupt(shown, err);
        }
        err_wrap(err, "'%s'", shown);
        return -1;
    }
    return 0;
}

static void
detach(struct store *st)
{
    struct err ignored;

    store_exec(st, "DETACH DATABASE snapfile", &ignored);
}

/* Makes `path` a rollback-journal database (one self-contained file). */
static int
finish_file(const char *path, struct err *err)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        err_set(err, ERR_IO, "cannot finish snapshot file '%s': %s", path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_close(db);
    return 0;
}

int
store_snapshot_export(struct store *st, const char *name, const char *path,
                      store_manifest_refs_fn refs, void *refs_ctx, struct err *err)
{
    struct store_snapshot snap;
    struct store_opts o = {0};
    struct store *fresh = NULL;
    struct buf tmp;
    struct stat sb;
    int rc = -1, attached = 0, began = 0;
    char sql[512];
    static const char *const tables[] = {"snapshot_checkpoints", "snapshot_changes",
                                         "snapshot_steps", "snapshot_chat", "snapshot_overlays"};

    memset(&snap, 0, sizeof(snap));
    buf_init(&tmp, STORE_PATH_MAX + 32);
    if (st->in_bracket) {
        return err_set(err, ERR_INTERNAL, "store_snapshot_export called inside a bracket");
    }
    if (store_check_text(path, STORE_PATH_MAX, 1, "export path", err) < 0) {
        return -1;
    }
    if (lstat(path, &sb) == 0) {
        return err_set(err, ERR_EXISTS, "cannot export to '%s': it already exists; pick a new file",
                       path);
    }
    if (errno != ENOENT) {
        return err_set(err, ERR_IO, "cannot export to '%s': %s", path, strerror(errno));
    }
    if (store_snapshot_get(st, name, &snap, err) < 0) {
        return -1;
    }
    buf_printf(&tmp, "%s.part%d", path, (int)getpid());
    if (buf_failed(&tmp)) {
        buf_err(&tmp, "export path", err);
        goto out;
    }
    unlink(tmp.data);
    /* A fresh drun file: schema, application_id and user_version as every drun DB. */
    if (store_open(tmp.data, &o, &fresh, err) < 0) {
        goto out;
    }
    store_close(fresh);
    if (attach(st, tmp.data, tmp.data, err) < 0) {
        goto out;
    }
    attached = 1;
    /* Deferred: this DB is only read (snapshots are immutable), so drun-mcp writers
     * are not held up; only the new file is written. */
    if (store_exec(st, "BEGIN", err) < 0) {
        goto out;
    }
    began = 1;
    if (collect_refs(st, "main", snap.id, refs, refs_ctx, 1, err) < 0) {
        goto out;
    }
    /* Bases before the deltas that reference them (foreign key on blobs.base). */
    if (store_exec(st,
                   "INSERT INTO snapfile.blobs (hash, size, codec, data, base, depth) "
                   "SELECT hash, size, codec, data, base, depth FROM main.blobs "
                   "WHERE hash IN (SELECT hash FROM temp.snap_refs) ORDER BY depth",
                   err) < 0) {
        goto out;
    }
    if (store_snap_run(st,
                       "INSERT INTO snapfile.snapshots SELECT * FROM main.snapshots WHERE id = ?1",
                       snap.id, NULL, "write the snapshot file", err) < 0) {
        goto out;
    }
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO snapfile.%s SELECT * FROM main.%s WHERE snapshot_id = ?1", tables[i],
                 tables[i]);
        if (store_snap_run(st, sql, snap.id, NULL, "write the snapshot file", err) < 0) {
            goto out;
        }
    }
    if (store_exec(st, "COMMIT", err) < 0) {
        goto out;
    }
    began = 0;
    detach(st);
    attached = 0;
    if (finish_file(tmp.data, err) < 0) {
        goto out;
    }
    /* Never replaces a file that appeared at `path` meanwhile. */
    if (renameat2(AT_FDCWD, tmp.data, AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
        err_set(err, errno == EEXIST ? ERR_EXISTS : ERR_IO, "cannot export to '%s': %s", path,
                strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (began) {
        struct err ignored;
        store_exec(st, "ROLLBACK", &ignored);
    }
    if (attached) {
        detach(st);
    }
    if (rc < 0 && tmp.data != NULL) {
        unlink(tmp.data);
        buf_printf(&tmp, "-wal");
        unlink(tmp.data);
        buf_truncate(&tmp, tmp.len - 4);
        buf_printf(&tmp, "-shm");
        unlink(tmp.data);
    }
    store_snapshot_release(&snap);
    buf_release(&tmp);
    return rc;
}

/* ---- import -------------------------------------------------------------------------- */

/* Reads every page of the attached file once, so damage found later is not blamed on ours. */
static int
check_file_pages(struct store *st, const char *path, struct err *err)
{
    sqlite3_stmt *s = NULL;
    char first[160];
    int rc;

    if (store_snap_prep(st, "PRAGMA snapfile.quick_check(1)", &s, err) < 0) {
        return -1;
    }
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        store_sqlerr(st, rc, "check the snapshot file", err);
        sqlite3_finalize(s);
        return err->code == ERR_CORRUPT ? file_corrupt(path, err) : -1;
    }
    const unsigned char *t = sqlite3_column_text(s, 0);
    snprintf(first, sizeof(first), "%s", t ? (const char *)t : "no result");
    sqlite3_finalize(s);
    if (strcmp(first, "ok") != 0) {
        return err_set(err, ERR_CORRUPT,
                       "snapshot file '%s' is damaged (%s); the database was not changed; export "
                       "the snapshot again",
                       path, first);
    }
    return 0;
}

/* Checks that the attached file is a drun DB of our schema version with one snapshot. */
static int
check_file(struct store *st, const char *path, struct err *err)
{
    int64_t app = 0, ver = 0, count = 0;

    if (store_snap_query_int(st, "PRAGMA snapfile.application_id", NULL, &app, err) < 0) {
        if (err->code == ERR_CORRUPT) {
            return file_corrupt(path, err);
        }
        return err_wrap(err, "'%s' is not a drun snapshot file", path);
    }
    if (app != STORE_APPLICATION_ID) {
        return err_set(err, ERR_CORRUPT,
                       "'%s' is not a drun snapshot file (wrong application id); export one with "
                       "'drun-admin snapshot export'",
                       path);
    }
    if (store_snap_query_int(st, "PRAGMA snapfile.user_version", NULL, &ver, err) < 0) {
        return -1;
    }
    if (ver != store_schema_version()) {
        return err_set(err, ERR_VERSION,
                       "snapshot file '%s' has schema version %lld and this drun reads version "
                       "%d; import it with the drun that exported it",
                       path, (long long)ver, store_schema_version());
    }
    if (store_snap_query_int(st, "SELECT count(*) FROM snapfile.snapshots", NULL, &count, err) <
        0) {
        return -1;
    }
    if (count != 1) {
        return err_set(err, ERR_CORRUPT,
                       "snapshot file '%s' holds %lld snapshots; a snapshot file holds exactly one",
                       path, (long long)count);
    }
    return check_file_pages(st, path, err);
}

/*
 * Reads back every blob listed in temp.imp_new through the full check, streaming each
 * to /dev/null: a blob whose row claims a gigabyte behind a few compressed bytes costs
 * 256 KiB pieces, never its declared size in memory (store_blob_write_fd).
 */
static int
verify_new_blobs(struct store *st, const char *path, struct err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = -1, step, sink;

    sink = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (sink < 0) {
        return err_set(err, ERR_IO, "cannot open /dev/null: %s", strerror(errno));
    }
    if (store_snap_prep(st, "SELECT hash FROM temp.imp_new", &s, err) < 0) {
        close(sink);
        return -1;
    }
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        uint8_t h[HASH_LEN];
        if (sqlite3_column_bytes(s, 0) != HASH_LEN) {
            err_set(err, ERR_CORRUPT, "snapshot file '%s' has a blob with a damaged hash", path);
            goto out;
        }
        memcpy(h, sqlite3_column_blob(s, 0), HASH_LEN);
        if (store_blob_write_fd(st, h, sink, err) < 0) {
            err_wrap(err, "snapshot file '%s'", path);
            if (err->code == ERR_NOTFOUND) {
                err->code = ERR_CORRUPT;
            }
            goto out;
        }
    }
    if (step != SQLITE_DONE) {
        store_sqlerr(st, step, "check the imported blobs", err);
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(s);
    close(sink);
    return rc;
}

int
store_snapshot_import(struct store *st, const char *path, const char *name,
                      store_manifest_refs_fn refs, void *refs_ctx, struct store_snapshot *out,
                      struct err *err)
{
    return store_snapshot_import_as(st, path, path, name, refs, refs_ctx, out, err);
}

int
store_snapshot_import_as(struct store *st, const char *path, const char *shown, const char *name,
                         store_manifest_refs_fn refs, void *refs_ctx, struct store_snapshot *out,
                         struct err *err)
{
    struct store_snapshot file_snap;
    struct stat sb;
    sqlite3_stmt *s = NULL;
    int own = 0, rc = -1, attached = 0;
    int64_t new_id, missing = 0, live = 0;
    char sql[768];
    static const char *const tables[] = {"snapshot_changes", "snapshot_steps", "snapshot_chat",
                                         "snapshot_overlays"};
    static const char *const cols[] = {"checkpoint_id, path, kind",
                                       "checkpoint_id, seq, time_ms, tool, description",
                                       "seq, time_ms, prompt, response", "key, host_path"};

    memset(&file_snap, 0, sizeof(file_snap));
    if (out != NULL) {
        memset(out, 0, sizeof(*out));
    }
    if (st->in_bracket) {
        return err_set(err, ERR_INTERNAL, "store_snapshot_import called inside a bracket");
    }
    if (store_check_text(path, STORE_PATH_MAX, 1, "snapshot file path", err) < 0) {
        return -1;
    }
    /* ATTACH would create a missing file: refuse that first. */
    if (stat(path, &sb) < 0) {
        return err_set(err, errno == ENOENT ? ERR_NOTFOUND : ERR_IO,
                       "cannot read snapshot file '%s': %s", shown, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        return err_set(err, ERR_INVAL, "snapshot file '%s' is not a regular file", shown);
    }
    if (name != NULL && store_snapshot_name_check(name, err) < 0) {
        return -1;
    }
    if (attach(st, path, shown, err) < 0) {
        return -1;
    }
    attached = 1;
    if (check_file(st, shown, err) < 0 ||
        store_snapshot_get_in(st, "snapfile", NULL, &file_snap, err) < 0) {
        goto out;
    }
    if (name == NULL) {
        name = file_snap.name;
        if (store_snapshot_name_check(name, err) < 0) {
            err_wrap(err, "snapshot file '%s'", shown);
            goto out;
        }
    }
    if (store_tx_begin(st, &own, err) < 0 || store_snap_name_taken(st, name, err) < 0) {
        goto out;
    }
    /* Blobs: copy those this DB lacks, bases first, then read each one back. */
    if (store_exec(st,
                   "CREATE TEMP TABLE IF NOT EXISTS imp_new (hash BLOB PRIMARY KEY) WITHOUT ROWID",
                   err) < 0 ||
        store_exec(st, "DELETE FROM temp.imp_new", err) < 0 ||
        store_exec(st,
                   "INSERT OR IGNORE INTO temp.imp_new SELECT hash FROM snapfile.blobs "
                   "WHERE length(hash) = 32 AND hash NOT IN (SELECT hash FROM main.blobs)",
                   err) < 0) {
        goto out;
    }
    if (store_snap_query_int(
            st,
            "SELECT count(*) FROM snapfile.blobs b WHERE b.base IS NOT NULL AND b.base NOT "
            "IN (SELECT hash FROM snapfile.blobs) AND b.base NOT IN (SELECT hash FROM "
            "main.blobs)",
            NULL, &missing, err) < 0) {
        goto out;
    }
    if (missing) {
        err_set(err, ERR_CORRUPT,
                "snapshot file '%s' is incomplete: %lld delta blobs lack their base; export it "
                "again",
                shown, (long long)missing);
        goto out;
    }
    if (store_exec(st,
                   "INSERT INTO main.blobs (hash, size, codec, data, base, depth) "
                   "SELECT hash, size, codec, data, base, depth FROM snapfile.blobs "
                   "WHERE hash IN (SELECT hash FROM temp.imp_new) ORDER BY depth",
                   err) < 0 ||
        verify_new_blobs(st, shown, err) < 0) {
        goto out;
    }
    /* Rows, under a new snapshot id. */
    if (store_snap_prep(
            st,
            "INSERT INTO main.snapshots (name, created_ms, source_session_id, label, parent_id, "
            "parent_checkpoint, head, session_created_ms, client, description) SELECT ?1, "
            "created_ms, source_session_id, label, parent_id, parent_checkpoint, head, "
            "session_created_ms, client, description FROM snapfile.snapshots WHERE id = ?2",
            &s, err) < 0) {
        goto out;
    }
    store_bind_text(s, 1, name);
    sqlite3_bind_int64(s, 2, file_snap.id);
    if (store_snap_done(st, s, "store the imported snapshot", err) < 0) {
        goto out;
    }
    new_id = sqlite3_last_insert_rowid(st->db);
    snprintf(sql, sizeof(sql),
             "INSERT INTO main.snapshot_checkpoints (snapshot_id, " CP_BODY
             ") SELECT %lld, " CP_BODY
             " FROM snapfile.snapshot_checkpoints WHERE snapshot_id = ?1 AND manifest_hash IN "
             "(SELECT hash FROM main.blobs) AND (stdout_hash IS NULL OR stdout_hash IN (SELECT "
             "hash FROM main.blobs)) AND (stderr_hash IS NULL OR stderr_hash IN (SELECT hash "
             "FROM main.blobs))",
             (long long)new_id);
    if (store_snap_run(st, sql, file_snap.id, NULL, "store the imported checkpoints", err) < 0) {
        goto out;
    }
    if ((int64_t)sqlite3_changes(st->db) != file_snap.checkpoints_all) {
        err_set(err, ERR_CORRUPT,
                "snapshot file '%s' is incomplete: a checkpoint's manifest or output blob is "
                "missing; export it again",
                shown);
        goto out;
    }
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO main.%s (snapshot_id, %s) SELECT %lld, %s FROM snapfile.%s WHERE "
                 "snapshot_id = ?1",
                 tables[i], cols[i], (long long)new_id, cols[i], tables[i]);
        if (store_snap_run(st, sql, file_snap.id, NULL, "store the imported snapshot", err) < 0) {
            goto out;
        }
    }
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM main.snapshot_checkpoints WHERE snapshot_id = %lld AND id = "
             "%lld AND status = 0 AND ?1 IS NULL",
             (long long)new_id, (long long)file_snap.head);
    if (store_snap_query_int(st, sql, NULL, &live, err) < 0) {
        goto out;
    }
    if (!live) {
        err_set(err, ERR_CORRUPT,
                "snapshot file '%s' is damaged: its head %lld is not a live checkpoint", shown,
                (long long)file_snap.head);
        goto out;
    }
    /* Every blob a manifest lists must now be here. */
    if (collect_refs(st, "main", new_id, refs, refs_ctx, 0, err) < 0) {
        err_wrap(err, "snapshot file '%s'", shown);
        if (err->code == ERR_NOTFOUND) {
            err->code = ERR_CORRUPT;
        }
        goto out;
    }
    if (store_snap_query_int(
            st,
            "SELECT count(*) FROM temp.snap_refs WHERE hash NOT IN (SELECT hash FROM "
            "main.blobs)",
            NULL, &missing, err) < 0) {
        goto out;
    }
    if (missing) {
        err_set(err, ERR_CORRUPT,
                "snapshot file '%s' is incomplete: %lld file blobs its manifests list are "
                "missing; export it again",
                shown, (long long)missing);
        goto out;
    }
    if (out != NULL && store_snapshot_get_in(st, "main", name, out, err) < 0) {
        goto out;
    }
    rc = 0;
out:
    rc = store_tx_end(st, own, rc, err);
    if (attached) {
        detach(st);
    }
    if (rc < 0 && out != NULL) {
        store_snapshot_release(out);
    }
    store_snapshot_release(&file_snap);
    return rc;
}
