/*
 * store_blob.c - content-addressed blobs: put, get (verified), has.
 * The streaming writer and reader live in store_blob_stream.c.
 *
 * A blob is named by the SHA-256 of its bytes, so identical content is stored once
 * across files, checkpoints, sessions and snapshots. It is kept as one zstd frame
 * (codec 1) only when that is smaller than the raw bytes (codec 0).
 *
 * Delta blobs (codec 2). A checkpoint's manifest lists every file of the tree, so
 * consecutive manifests share almost all their bytes, and 1,000 SHA-256 hashes do
 * not compress: stored whole, each checkpoint would cost ~36 KB of manifest. A
 * caller that knows a similar blob (the parent checkpoint's manifest) passes it as
 * the base: the new blob is stored as a zstd frame that references the base's bytes
 * as a prefix, so only what changed costs space. The row names its base and its
 * depth (base depth + 1); a chain longer than STORE_DELTA_DEPTH_MAX is cut by storing
 * in full, which bounds the work of a read. Reading a delta reads its base first
 * (recursively, with the depth checked against the row so a damaged row cannot
 * loop). gc keeps the bases of every blob it keeps.
 *
 * Reading trusts nothing in the row: the stored size must not pass the blob cap or
 * the caller's buffer, a zstd frame must declare exactly the stored size (so a
 * damaged or crafted row cannot make us allocate more than it promises), and the
 * bytes returned must hash to the key. Any mismatch is ERR_CORRUPT.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

static const char SQL_HAS[] = "SELECT size FROM blobs WHERE hash = ?1";
static const char SQL_PUT[] = "INSERT OR IGNORE INTO blobs (hash, size, codec, data, base, depth) "
                              "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
static const char SQL_GET[] = "SELECT size, codec, data, base, depth FROM blobs WHERE hash = ?1";
static const char SQL_DEPTH[] = "SELECT depth, base FROM blobs WHERE hash = ?1";

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

/* Reads a blob's delta depth and base; *depth = -1 if it is not stored. */
static int
blob_depth(struct store *st, const uint8_t hash[HASH_LEN], int *depth, uint8_t base[HASH_LEN],
           struct err *err)
{
    sqlite3_stmt *s = store_stmt(st, SQL_DEPTH, err);
    int rc;

    *depth = -1;
    if (s == NULL) {
        return -1;
    }
    store_bind_hash(s, 1, hash);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *depth = sqlite3_column_int(s, 0);
        if (sqlite3_column_bytes(s, 1) == HASH_LEN) {
            memcpy(base, sqlite3_column_blob(s, 1), HASH_LEN);
        }
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        return store_sqlerr(st, rc, "look up a blob", err);
    }
    return 0;
}

int
store_blob_put_row(struct store *st, const void *data, size_t len, const uint8_t *base,
                   uint8_t hash[HASH_LEN], struct err *err)
{
    void *packed = NULL, *delta = NULL;
    size_t packed_len = 0, delta_len = 0;
    int exists = 0, own = 0, rc = -1, base_depth = -1;
    struct buf base_bytes;
    uint8_t root[HASH_LEN]; /* base may point here until the row is stored */
    sqlite3_stmt *s;

    buf_init(&base_bytes, st->blob_max);
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
    if (store_zstd_compress(st, data, len, NULL, 0, 0, &packed, &packed_len, err) < 0) {
        goto out;
    }
    /* A delta is worth it only against a stored base, and only when it beats the plain
     * encoding. When the base's chain is as deep as allowed, the delta is taken against
     * the chain's root instead (depth 1), as long as that costs under a quarter of the
     * plain encoding: so full copies stay rare and a read decompresses at most
     * STORE_DELTA_DEPTH_MAX + 1 frames. */
    if (base != NULL && memcmp(base, hash, HASH_LEN) != 0) {
        size_t limit = packed ? packed_len : len;

        memcpy(root, base, HASH_LEN);
        if (blob_depth(st, root, &base_depth, root, err) < 0) {
            goto out;
        }
        if (base_depth >= STORE_DELTA_DEPTH_MAX) {
            uint8_t next[HASH_LEN];
            /* Walk down to the full copy at the bottom of the chain. */
            for (int i = 0; i <= STORE_DELTA_DEPTH_MAX && base_depth > 0; i++) {
                memcpy(next, root, HASH_LEN);
                if (blob_depth(st, next, &base_depth, root, err) < 0) {
                    goto out;
                }
                if (base_depth == 0) {
                    memcpy(root, next, HASH_LEN);
                }
            }
            base = base_depth == 0 ? root : NULL;
            limit /= 4;
        } else {
            memcpy(root, base, HASH_LEN);
        }
        if (base != NULL && base_depth >= 0) {
            if (store_blob_read(st, base, &base_bytes, err) < 0) {
                goto out;
            }
            if (store_zstd_compress(st, data, len, base_bytes.data ? base_bytes.data : "",
                                    base_bytes.len, limit, &delta, &delta_len, err) < 0) {
                goto out;
            }
        }
    }
    s = store_stmt(st, SQL_PUT, err);
    if (s == NULL) {
        goto out;
    }
    store_bind_hash(s, 1, hash);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)len);
    if (delta) {
        sqlite3_bind_int(s, 3, 2);
        sqlite3_bind_blob64(s, 4, delta, delta_len, SQLITE_STATIC);
        store_bind_hash(s, 5, base);
        sqlite3_bind_int(s, 6, base_depth + 1);
    } else {
        sqlite3_bind_int(s, 3, packed ? 1 : 0);
        if (packed) {
            sqlite3_bind_blob64(s, 4, packed, packed_len, SQLITE_STATIC);
        } else {
            /* A zero-length blob binds as an empty BLOB, never NULL. */
            sqlite3_bind_blob64(s, 4, data ? data : "", len, SQLITE_STATIC);
        }
        sqlite3_bind_null(s, 5);
        sqlite3_bind_int(s, 6, 0);
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
    mem_free(delta);
    buf_release(&base_bytes);
    return store_tx_end(st, own, rc, err);
}

int
store_blob_put(struct store *st, const void *data, size_t len, uint8_t hash[HASH_LEN],
               struct err *err)
{
    return store_blob_put_row(st, data, len, NULL, hash, err);
}

int
store_blob_put_delta(struct store *st, const void *data, size_t len, const uint8_t base[HASH_LEN],
                     uint8_t hash[HASH_LEN], struct err *err)
{
    return store_blob_put_row(st, data, len, base, hash, err);
}

/*
 * Reads one blob into out. `expect_depth` is the depth the referring delta row
 * promises for its base (-1 for a top-level read): a row that disagrees is corrupt,
 * which also stops a damaged chain from looping.
 */
static int
blob_read(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out, int expect_depth,
          struct err *err)
{
    char hex[HASH_HEX_LEN + 1], what[96];
    sqlite3_stmt *s = store_stmt(st, SQL_GET, err);
    uint8_t got[HASH_LEN], base[HASH_LEN];
    size_t start = out->len;
    int64_t size;
    int codec, rc, depth, ret = -1;
    const void *data;
    size_t data_len;
    void *copy = NULL;
    struct buf base_bytes;

    buf_init(&base_bytes, st->blob_max);
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
    depth = sqlite3_column_int(s, 4);
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
        if (store_zstd_decompress(st, data, data_len, NULL, 0, (size_t)size, out, what, err) < 0) {
            goto out;
        }
    } else if (codec == 2) {
        if (depth < 1 || depth > STORE_DELTA_DEPTH_MAX ||
            (expect_depth >= 0 && depth != expect_depth) ||
            sqlite3_column_bytes(s, 3) != HASH_LEN) {
            err_set(err, ERR_CORRUPT,
                    "%s is corrupt: its delta chain is damaged; restore the database from a "
                    "backup",
                    what);
            goto out;
        }
        memcpy(base, sqlite3_column_blob(s, 3), HASH_LEN);
        /* The cached statement is needed again for the base: copy the frame, then let go. */
        copy = mem_alloc(data_len);
        if (copy == NULL) {
            err_set(err, ERR_NOMEM, "cannot read %s: out of memory", what);
            goto out;
        }
        memcpy(copy, data, data_len);
        sqlite3_reset(s);
        if (blob_read(st, base, &base_bytes, depth - 1, err) < 0) {
            err_wrap(err, "reading the base of %s", what);
            goto out;
        }
        if (store_zstd_decompress(st, copy, data_len, base_bytes.data ? base_bytes.data : "",
                                  base_bytes.len, (size_t)size, out, what, err) < 0) {
            goto out;
        }
    } else {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: unknown codec %d; restore the database from "
                "a backup",
                what, codec);
        goto out;
    }
    if (codec != 2 && expect_depth > 0) {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: its delta chain is damaged; restore the database from a backup",
                what);
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
    mem_free(copy);
    buf_release(&base_bytes);
    if (ret < 0) {
        buf_truncate(out, start);
    }
    return ret;
}

int
store_blob_read(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    return blob_read(st, hash, out, -1, err);
}

int
store_blob_get(struct store *st, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    return store_blob_read(st, hash, out, err);
}
