/*
 * store_vacuum.c - give freed pages back to the file system.
 *
 * gc deletes rows; SQLite keeps their pages for reuse. VACUUM rewrites the file
 * compactly. It needs exclusive use of the file for its duration (other connections
 * get a busy timeout, reported as ERR_BUSY), so drun-admin runs it only on request.
 */
#include "store/store_int.h"

#include <sys/stat.h>

int
store_vacuum(struct store *st, int64_t *before, int64_t *after, struct err *err)
{
    struct stat sb;

    if (st->in_bracket) {
        return err_set(err, ERR_INTERNAL, "store_vacuum called inside a bracket");
    }
    if (st->read_only) {
        return err_set(err, ERR_DENIED, "database '%s' is open read-only", st->path);
    }
    *before = stat(st->path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    if (store_exec(st, "VACUUM", err) < 0 ||
        store_exec(st, "PRAGMA wal_checkpoint(TRUNCATE)", err) < 0) {
        return -1;
    }
    *after = stat(st->path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    return 0;
}
