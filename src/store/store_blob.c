/*
 * store_blob.c - content-addressed blobs: put, get (verified), has.
 *
 * A blob is named by the SHA-256 of its bytes, so identical content is stored once
 * across files, checkpoints, sessions and snapshots. It is kept as one zstd frame
 * (codec 1) only when that is smaller than the raw bytes (codec 0).
 *
 * Reading trusts nothing in the row: the stored size must not pass the blob cap or
 * the caller's buffer, a zstd frame must declare exactly the stored size (so a
 * damaged or crafted row cannot make us allocate more than it promises), and the
 * bytes returned must hash to the key. Any mismatch is ERR_CORRUPT.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>

#include "util/mem.h"

static const char SQL_HAS[] = "SELECT size FROM blobs WHERE hash = ?1";
static const char SQL_PUT[] =
    "INSERT OR IGNORE INTO blobs (hash, size, codec, data) VALUES (?1, ?2, ?3, ?4)";
static const char SQL_GET[] = "SELECT size, codec, data FROM blobs WHERE hash = ?1";

int
store_blob_has(struct store *st, const uint8_t hash[HASH_LEN], int *exists, int64_t *size,
               struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_HAS, err);
    int rc;

    *exists = 0;
    if (s == NULL) {
        return -1;
    }
    store_bind_hash(s, 1, hash);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *exists = 1;
        if (size != NULL) {
            *size = sqlite3_column_int64(s, 0);
        }
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        return store_sqlerr(st, rc, "look up a blob", err);
    }
    return 0;
}

int
store_blob_put(struct store *st, const void *data, size_t len, uint8_t hash[HASH_LEN],
               struct err *err)
{
    void *packed = NULL;
    size_t packed_len = 0;
    int exists = 0, own = 0, rc = -1;
    sqlite3_stmt *s;

    if (data == NULL && len > 0) {
        return err_set(err, ERR_INVAL, "blob data is missing");
    }
    if (len > st->blob_max) {
        return err_set(err, ERR_TOOBIG,
                       "blob of %zu bytes is over the limit of %zu bytes; store smaller files", len,
                       st->blob_max);
    }
    hash_sha256(data ? data : "", len, hash);
    if (store_tx_begin(st, &own, err) < 0) {
        return -1;
    }
    if (store_blob_has(st, hash, &exists, NULL, err) < 0) {
        goto out;
    }
    if (exists) {
        rc = 0;
        goto out;
    }
    if (store_zstd_compress(st, data, len, &packed, &packed_len, err) < 0) {
        goto out;
    }
    s = store_stmt(st, SQL_PUT, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_hash(s, 1, hash);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)len);
    sqlite3_bind_int(s, 3, packed ? 1 : 0);
    if (packed) {
        sqlite3_bind_blob64(s, 4, packed, packed_len, SQLITE_STATIC);
    } else {
        /* A zero-length blob binds as an empty BLOB, never NULL. */
        sqlite3_bind_blob64(s, 4, data ? data : "", len, SQLITE_STATIC);
    }
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        rc = store_sqlerr(st, rc, "store a blob", err);
        goto out;
    }
    rc = 0;
out:
    mem_free(packed);
    return store_tx_end(st, own, rc, err);
}

int
store_blob_read(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    char hex[HASH_HEX_LEN + 1], what[96];
    sqlite3_stmt *s = store_stmt(st, SQL_GET, err);
    uint8_t got[HASH_LEN];
    size_t start = out->len;
    int64_t size;
    int codec, rc, ret = -1;
    const void *data;
    size_t data_len;

    if (s == NULL) {
        return -1;
    }
    hex_encode(hash, HASH_LEN, hex);
    snprintf(what, sizeof(what), "blob '%.16s'", hex);
    store_bind_hash(s, 1, hash);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        err_set(err, ERR_NOTFOUND, "blob '%s' is not in the database", hex);
        goto out;
    }
    if (rc != SQLITE_ROW) {
        store_sqlerr(st, rc, "read a blob", err);
        goto out;
    }
    size = sqlite3_column_int64(s, 0);
    codec = sqlite3_column_int(s, 1);
    data = sqlite3_column_blob(s, 2);
    data_len = (size_t)sqlite3_column_bytes(s, 2);
    if (data == NULL && data_len > 0) {
        err_set(err, ERR_NOMEM, "cannot read %s: out of memory", what);
        goto out;
    }
    if (size < 0 || (uint64_t)size > st->blob_max) {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: stored size %lld is outside 0..%zu; restore the database from "
                "a backup",
                what, (long long)size, st->blob_max);
        goto out;
    }
    if ((size_t)size > out->max - out->len) {
        err_set(err, ERR_TOOBIG, "%s is %lld bytes, more than the %zu bytes left for it", what,
                (long long)size, out->max - out->len);
        goto out;
    }
    if (codec == 0) {
        if (data_len != (size_t)size) {
            err_set(err, ERR_CORRUPT,
                    "%s is corrupt: %zu bytes stored for size %lld; restore the database from "
                    "a backup",
                    what, data_len, (long long)size);
            goto out;
        }
        if (buf_append(out, data ? data : "", data_len) < 0) {
            buf_err(out, what, err);
            goto out;
        }
    } else if (codec == 1) {
        if (store_zstd_decompress(st, data, data_len, (size_t)size, out, what, err) < 0) {
            goto out;
        }
    } else {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: unknown codec %d; restore the database from "
                "a backup",
                what, codec);
        goto out;
    }
    hash_sha256(out->data ? out->data + start : "", out->len - start, got);
    if (memcmp(got, hash, HASH_LEN) != 0) {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: its bytes do not match its hash; restore the database from a "
                "backup",
                what);
        goto out;
    }
    ret = 0;
out:
    sqlite3_reset(s);
    if (ret < 0) {
        buf_truncate(out, start);
    }
    return ret;
}

int
store_blob_get(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    return store_blob_read(st, hash, out, err);
}
