/*
 * store_stats.c - counts for `drun-admin db stats` and the integrity check for
 * `drun-admin db check`.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util/buf.h"

static const char SQL_STATS[] = "SELECT (SELECT count(*) FROM sessions WHERE state = 0), "
                                "(SELECT count(*) FROM sessions WHERE state = 1), "
                                "(SELECT count(*) FROM checkpoints WHERE status = 0), "
                                "(SELECT count(*) FROM checkpoints WHERE status <> 0), "
                                "(SELECT count(*) FROM blobs), "
                                "(SELECT coalesce(sum(size), 0) FROM blobs), "
                                "(SELECT coalesce(sum(length(data)), 0) FROM blobs), "
                                "(SELECT count(*) FROM audit), "
                                "(SELECT count(*) FROM snapshots)";

static int64_t
file_size(const char *path, const char *suffix)
{
    struct buf b;
    struct stat sb;
    int64_t size = 0;

    buf_init(&b, 8192);
    buf_puts(&b, path);
    buf_puts(&b, suffix);
    if (!buf_failed(&b) && stat(buf_cstr(&b), &sb) == 0) {
        size = (int64_t)sb.st_size;
    }
    buf_release(&b);
    return size;
}

int
store_stats(struct store *st, struct store_stats *out, struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_STATS, err);
    int rc;

    memset(out, 0, sizeof(*out));
    if (s == NULL) {
        return -1;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        out->sessions_open = sqlite3_column_int64(s, 0);
        out->sessions_closed = sqlite3_column_int64(s, 1);
        out->checkpoints = sqlite3_column_int64(s, 2);
        out->checkpoints_hidden = sqlite3_column_int64(s, 3);
        out->blobs = sqlite3_column_int64(s, 4);
        out->blob_bytes_logical = sqlite3_column_int64(s, 5);
        out->blob_bytes_stored = sqlite3_column_int64(s, 6);
        out->audit_rows = sqlite3_column_int64(s, 7);
        out->snapshots = sqlite3_column_int64(s, 8);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        return store_sqlerr(st, rc, "read statistics", err);
    }
    out->file_bytes = file_size(st->path, "") + file_size(st->path, "-wal");
    out->schema_version = store_schema_version();
    return 0;
}

int
store_check(struct store *st, int *ok, struct err *err)
{
    sqlite3_stmt *s = NULL;
    int rc, ret = -1;

    *ok = 0;
    err_clear(err);
    rc = sqlite3_prepare_v2(st->db, "PRAGMA integrity_check", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        return store_sqlerr(st, rc, "check the database", err);
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(s, 0);
        if (first == NULL || strcmp(first, "ok") != 0) {
            err_set(err, ERR_CORRUPT, "database '%s' is corrupt: %s; restore it from a backup",
                    st->path, first ? first : "integrity_check failed");
            ret = 0;
            goto out;
        }
    } else {
        store_sqlerr(st, rc, "check the database", err);
        goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
    rc = sqlite3_prepare_v2(st->db, "PRAGMA foreign_key_check", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        store_sqlerr(st, rc, "check the database", err);
        goto out;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const char *table = (const char *)sqlite3_column_text(s, 0);
        const char *parent = (const char *)sqlite3_column_text(s, 2);
        err_set(err, ERR_CORRUPT,
                "database '%s' has a broken reference: a row of '%s' points at a missing row "
                "of '%s'; restore it from a backup",
                st->path, table ? table : "?", parent ? parent : "?");
        ret = 0;
        goto out;
    }
    if (rc != SQLITE_DONE) {
        store_sqlerr(st, rc, "check the database", err);
        goto out;
    }
    *ok = 1;
    ret = 0;
out:
    sqlite3_finalize(s);
    return ret;
}
