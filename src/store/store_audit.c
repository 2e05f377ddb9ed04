/*
 * store_audit.c - the audit log and its hash chain.
 *
 * Each row's hash is SHA-256 over a canonical encoding of every other column, the
 * row id and prev_hash included: a domain tag, then per column a type byte and, for
 * text and blobs, an 8-byte big-endian length before the bytes (integers are 8
 * bytes big-endian; NULL is its own type byte). Length prefixes make the encoding
 * unambiguous, so no two different rows encode alike ("ab"+"c" vs "a"+"bc").
 *
 * What the chain catches: an edited row (its hash no longer matches), a deleted row
 * (the next row's prev_hash no longer matches), reordered rows (the id is hashed),
 * and rows cut off the end (audit_head keeps the newest id and hash, written in the
 * same transaction as each row). What it cannot catch: someone with write access who
 * rewrites every hash from the edit onwards, audit_head included. The chain proves
 * the log is internally consistent, not who wrote it.
 *
 * The previous hash is read inside the appending write transaction, so concurrent
 * drun-mcp processes on one file extend one chain instead of forking it.
 *
 * Large string values of the arguments are blobs (store.h, STORE_AUDIT_INLINE_MAX):
 * the row holds {"$blob":"<hex>","bytes":N} in their place, and audit_refs lists the
 * hashes so gc keeps them. The chain covers the row as stored, references included;
 * the blobs are content-addressed, so verify checks that each one exists and hashes
 * right, which together covers the full arguments.
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"

#define AUDIT_COMPRESS_MIN 1024 /* args shorter than this are stored raw */
#define AUDIT_ARGS_MAX     ((size_t)16 << 20)

static const char DOMAIN[] = "drun-audit-v1";

static const char SQL_LAST[] = "SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1";
static const char SQL_INSERT[] =
    "INSERT INTO audit (id, time_ms, pid, kind, client_name, client_version, session_id, tool, "
    "summary, outcome, error_code, duration_ms, checkpoint_id, args, args_codec, prev_hash, "
    "hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";
static const char SQL_HEAD_SET[] =
    "INSERT INTO audit_head (one, last_id, hash) VALUES (1, ?1, ?2) "
    "ON CONFLICT (one) DO UPDATE SET last_id = excluded.last_id, hash = excluded.hash";
static const char SQL_REF_ADD[] =
    "INSERT OR IGNORE INTO audit_refs (audit_id, hash) VALUES (?1, ?2)";
static const char SQL_REF_HAS[] = "SELECT 1 FROM audit_refs WHERE audit_id = ?1 AND hash = ?2";
static const char SQL_HEAD_GET[] = "SELECT last_id, hash FROM audit_head WHERE one = 1";
#define AUDIT_COLS                                                                                 \
    "id, time_ms, pid, kind, client_name, client_version, session_id, tool, summary, outcome, "    \
    "error_code, duration_ms, checkpoint_id, args, args_codec, prev_hash, hash"
static const char SQL_WALK[] = "SELECT " AUDIT_COLS " FROM audit ORDER BY id";
static const char SQL_TAIL[] =
    "SELECT * FROM (SELECT " AUDIT_COLS " FROM audit ORDER BY id DESC LIMIT ?1) ORDER BY id";

enum { ENC_NULL = 0, ENC_INT = 1, ENC_TEXT = 2, ENC_BLOB = 3 };

typedef int (*ref_fn)(void *ctx, const uint8_t hash[HASH_LEN], uint64_t bytes, struct buf *out,
                      struct err *err);
static int walk_refs(const char *in, size_t len, int keys, struct buf *out, ref_fn fn, void *ctx,
                     struct err *err);
static int put_json_string(struct buf *out, const unsigned char *s, size_t n);

static void
put_u64(struct hash_ctx *h, uint64_t v)
{
    uint8_t b[8];

    for (int i = 7; i >= 0; i--) {
        b[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
    hash_update(h, b, sizeof(b));
}

static void
enc_int(struct hash_ctx *h, int64_t v)
{
    uint8_t t = ENC_INT;

    hash_update(h, &t, 1);
    put_u64(h, (uint64_t)v);
}

static void
enc_bytes(struct hash_ctx *h, int type, const void *p, size_t n)
{
    uint8_t t = (uint8_t)(p == NULL ? ENC_NULL : type);

    hash_update(h, &t, 1);
    if (p != NULL) {
        put_u64(h, n);
        hash_update(h, p, n);
    }
}

/* One row's column values, as stored. */
struct row {
    int64_t id, time_ms, pid, duration_ms;
    int has_checkpoint;
    int64_t checkpoint_id;
    const char *text[8]; /* kind, client_name, client_version, session_id, tool, summary,
                            outcome, error_code */
    size_t text_len[8];
    const void *args;
    size_t args_len;
    int64_t args_codec;
    const uint8_t *prev_hash;
};

static int
row_hash(const struct row *r, uint8_t out[HASH_LEN], struct err *err)
{
    struct hash_ctx *h = hash_new();

    if (h == NULL) {
        return err_set(err, ERR_NOMEM, "cannot hash an audit row: out of memory");
    }
    hash_update(h, DOMAIN, sizeof(DOMAIN));
    enc_int(h, r->id);
    enc_int(h, r->time_ms);
    enc_int(h, r->pid);
    for (int i = 0; i < 8; i++) {
        enc_bytes(h, ENC_TEXT, r->text[i], r->text_len[i]);
    }
    enc_int(h, r->duration_ms);
    if (r->has_checkpoint) {
        enc_int(h, r->checkpoint_id);
    } else {
        enc_bytes(h, ENC_INT, NULL, 0);
    }
    enc_bytes(h, ENC_BLOB, r->args, r->args_len);
    enc_int(h, r->args_codec);
    enc_bytes(h, ENC_BLOB, r->prev_hash, HASH_LEN);
    hash_final(h, out);
    return 0;
}

/*
 * Small parts (STORE_AUDIT_INLINE_MAX bytes or less) stay references only when their
 * bytes are already a stored blob (a file this call or an earlier one wrote); the rest
 * go back inline, exactly as cJSON printed them. References appear in args in the order
 * of the parts (the writer makes both in one walk), so the k-th reference is part k.
 */
struct inline_ctx {
    const struct store_audit_part *parts;
    const unsigned char *keep;
    size_t n, next;
};

static int
inline_ref(void *ctx, const uint8_t hash[HASH_LEN], uint64_t bytes, struct buf *out,
           struct err *err)
{
    struct inline_ctx *c = ctx;
    const struct store_audit_part *p = c->next < c->n ? &c->parts[c->next] : NULL;
    char hex[HASH_HEX_LEN + 1];

    if (p == NULL || p->len != bytes || memcmp(p->hash, hash, HASH_LEN) != 0) {
        return err_set(err, ERR_INVAL,
                       "audit argument reference %zu does not match part %zu; pass the parts in "
                       "the order of the references",
                       c->next, c->next);
    }
    if (!c->keep[c->next++]) {
        return put_json_string(out, p->data, p->len) < 0 ? buf_err(out, "audit arguments", err) : 0;
    }
    hex_encode(hash, HASH_LEN, hex);
    if (buf_printf(out, "{\"$blob\":\"%s\",\"bytes\":%llu}", hex, (unsigned long long)bytes) < 0) {
        return buf_err(out, "audit arguments", err);
    }
    return 0;
}

/* Decides keep[] for each part and, if any goes inline, writes the new args to out. */
static int
choose_refs(struct store *st, const struct store_audit *row, unsigned char *keep, struct buf *out,
            int *rewritten, struct err *err)
{
    struct inline_ctx c = {row->parts, keep, row->nparts, 0};
    int any_inline = 0;

    *rewritten = 0;
    for (size_t i = 0; i < row->nparts; i++) {
        int exists = 0;
        if (row->parts[i].len <= STORE_AUDIT_INLINE_MAX) {
            uint8_t h[HASH_LEN]; /* a large part is checked by its put */
            hash_sha256(row->parts[i].data, row->parts[i].len, h);
            if (memcmp(h, row->parts[i].hash, HASH_LEN) != 0) {
                return err_set(err, ERR_INVAL, "audit argument part %zu does not match its hash",
                               i);
            }
            if (store_blob_has(st, row->parts[i].hash, &exists, NULL, err) < 0) {
                return -1;
            }
        }
        keep[i] = (unsigned char)(row->parts[i].len > STORE_AUDIT_INLINE_MAX || exists);
        any_inline |= !keep[i];
    }
    if (!any_inline) {
        return 0;
    }
    if (walk_refs(row->args, row->args_len, 0, out, inline_ref, &c, err) < 0) {
        return -1;
    }
    if (c.next != row->nparts) {
        return err_set(err, ERR_INVAL, "audit arguments hold %zu references for %zu parts", c.next,
                       row->nparts);
    }
    *rewritten = 1;
    return 0;
}

int
store_audit_append(struct store *st, struct store_audit *row, struct err *err)
{
    static const uint8_t zero[HASH_LEN];
    uint8_t prev[HASH_LEN], hash[HASH_LEN];
    void *packed = NULL;
    size_t packed_len = 0;
    struct row r;
    sqlite3_stmt *s;
    int own, bracket = 0, rewritten = 0, rc = -1;
    unsigned char *keep = NULL;
    struct buf inl;
    const char *texts[8] = {row->kind, row->client_name, row->client_version, row->session_id,
                            row->tool, row->summary,     row->outcome,        row->error_code};
    static const char *names[8] = {"audit kind", "client name",   "client version", "session id",
                                   "audit tool", "audit summary", "audit outcome",  "error code"};

    memset(&r, 0, sizeof(r));
    buf_init(&inl, AUDIT_ARGS_MAX);
    for (int i = 0; i < 8; i++) {
        int required = i == 0 || i == 4 || i == 6;
        size_t max = i == 5 ? STORE_TEXT_MAX : STORE_LABEL_MAX;
        if (store_check_text(texts[i], max, required, names[i], err) < 0) {
            return -1;
        }
        r.text[i] = texts[i];
        r.text_len[i] = texts[i] ? strlen(texts[i]) : 0;
    }
    if (r.text[5] == NULL) {
        r.text[5] = "";
    }
    if (row->args != NULL && row->args_len > AUDIT_ARGS_MAX) {
        return err_set(err, ERR_TOOBIG, "audit arguments of %zu bytes are over the limit of %zu",
                       row->args_len, AUDIT_ARGS_MAX);
    }
    r.time_ms = row->time_ms ? row->time_ms : time_now_ms();
    r.pid = row->pid;
    r.duration_ms = row->duration_ms;
    r.has_checkpoint = row->checkpoint_id >= 0;
    r.checkpoint_id = row->checkpoint_id;
    r.args = row->args;
    r.args_len = row->args ? row->args_len : 0;
    if (row->nparts > 0) {
        if (row->args == NULL || (keep = mem_calloc(row->nparts, 1)) == NULL) {
            return err_set(err, row->args ? ERR_NOMEM : ERR_INVAL,
                           "cannot append audit argument parts without arguments or memory");
        }
        if (choose_refs(st, row, keep, &inl, &rewritten, err) < 0) {
            buf_release(&inl);
            mem_free(keep);
            return -1;
        }
        if (rewritten) {
            r.args = inl.data ? inl.data : "";
            r.args_len = inl.len;
        }
    }
    if (r.args != NULL && r.args_len >= AUDIT_COMPRESS_MIN) {
        if (store_zstd_compress(st, r.args, r.args_len, NULL, 0, 0, &packed, &packed_len, err) <
            0) {
            buf_release(&inl);
            mem_free(keep);
            return -1;
        }
        if (packed != NULL) {
            r.args = packed;
            r.args_len = packed_len;
            r.args_codec = 1;
        }
    }
    /* Parts are blob puts, which open their own transaction unless in a bracket. */
    if (row->nparts > 0 && !st->in_bracket) {
        if (store_begin(st, err) < 0) {
            goto fail;
        }
        bracket = 1;
    }
    if (store_tx_begin(st, &own, err) < 0) {
        if (bracket) {
            store_rollback(st);
        }
        goto fail;
    }
    s = store_stmt(st, SQL_LAST, err);
    if (s == NULL) {
        goto out;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        r.id = sqlite3_column_int64(s, 0) + 1;
        if (sqlite3_column_bytes(s, 1) != HASH_LEN) {
            sqlite3_reset(s);
            rc = err_set(err, ERR_CORRUPT,
                         "audit row %lld has a damaged hash; run 'drun-admin "
                         "audit verify'",
                         (long long)r.id - 1);
            goto out;
        }
        memcpy(prev, sqlite3_column_blob(s, 1), HASH_LEN);
    } else if (rc == SQLITE_DONE) {
        r.id = 1;
        memcpy(prev, zero, HASH_LEN);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        rc = store_sqlerr(st, rc, "append to the audit log", err);
        goto out;
    }
    r.prev_hash = prev;
    rc = -1;
    for (size_t i = 0; i < row->nparts; i++) {
        uint8_t got[HASH_LEN];
        if (!keep[i]) {
            continue;
        }
        if (store_blob_put(st, row->parts[i].data, row->parts[i].len, got, err) < 0) {
            goto out;
        }
        if (memcmp(got, row->parts[i].hash, HASH_LEN) != 0) {
            err_set(err, ERR_INVAL, "audit argument part %zu does not match its hash", i);
            goto out;
        }
    }
    if (row_hash(&r, hash, err) < 0) {
        goto out;
    }
    s = store_stmt(st, SQL_INSERT, err);
    if (s == NULL) {
        goto out;
    }
    sqlite3_bind_int64(s, 1, r.id);
    sqlite3_bind_int64(s, 2, r.time_ms);
    sqlite3_bind_int64(s, 3, r.pid);
    for (int i = 0; i < 8; i++) {
        int col = i < 7 ? 4 + i : 11;
        if (r.text[i] != NULL) {
            sqlite3_bind_text(s, col, r.text[i], (int)r.text_len[i], SQLITE_STATIC);
        }
    }
    sqlite3_bind_int64(s, 12, r.duration_ms);
    if (r.has_checkpoint) {
        sqlite3_bind_int64(s, 13, r.checkpoint_id);
    }
    if (r.args != NULL) {
        sqlite3_bind_blob64(s, 14, r.args, r.args_len, SQLITE_STATIC);
    }
    sqlite3_bind_int64(s, 15, r.args_codec);
    store_bind_hash(s, 16, prev);
    store_bind_hash(s, 17, hash);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        rc = store_sqlerr(st, rc, "append to the audit log", err);
        goto out;
    }
    for (size_t i = 0; i < row->nparts; i++) {
        if (!keep[i]) {
            continue;
        }
        s = store_stmt(st, SQL_REF_ADD, err);
        if (s == NULL) {
            rc = -1;
            goto out;
        }
        sqlite3_bind_int64(s, 1, r.id);
        store_bind_hash(s, 2, row->parts[i].hash);
        rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE) {
            rc = store_sqlerr(st, rc, "append to the audit log", err);
            goto out;
        }
    }
    s = store_stmt(st, SQL_HEAD_SET, err);
    if (s == NULL) {
        rc = -1;
        goto out;
    }
    sqlite3_bind_int64(s, 1, r.id);
    store_bind_hash(s, 2, hash);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    rc = rc == SQLITE_DONE ? 0 : store_sqlerr(st, rc, "append to the audit log", err);
    if (rc == 0) {
        row->id = r.id;
    }
out:
    mem_free(packed);
    buf_release(&inl);
    mem_free(keep);
    rc = store_tx_end(st, own, rc, err);
    if (bracket) {
        if (rc == 0) {
            rc = store_commit(st, err);
        } else {
            store_rollback(st);
        }
    }
    return rc;
fail:
    mem_free(packed);
    buf_release(&inl);
    mem_free(keep);
    return -1;
}

/* Fills r from a row of AUDIT_COLS; pointers are valid until the statement steps. */
static void
read_row(sqlite3_stmt *s, struct row *r)
{
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(s, 0);
    r->time_ms = sqlite3_column_int64(s, 1);
    r->pid = sqlite3_column_int64(s, 2);
    for (int i = 0; i < 8; i++) {
        int col = i < 7 ? 3 + i : 10;
        if (sqlite3_column_type(s, col) != SQLITE_NULL) {
            r->text[i] = (const char *)sqlite3_column_text(s, col);
            r->text_len[i] = (size_t)sqlite3_column_bytes(s, col);
        }
    }
    r->duration_ms = sqlite3_column_int64(s, 11);
    r->has_checkpoint = sqlite3_column_type(s, 12) != SQLITE_NULL;
    r->checkpoint_id = sqlite3_column_int64(s, 12);
    if (sqlite3_column_type(s, 13) != SQLITE_NULL) {
        r->args = sqlite3_column_blob(s, 13);
        r->args_len = (size_t)sqlite3_column_bytes(s, 13);
        if (r->args == NULL) {
            r->args = ""; /* a zero-length blob */
        }
    }
    r->args_codec = sqlite3_column_int64(s, 14);
}

/* ---- references in stored args ------------------------------------------------- */

static const char REF_HEAD[] = "{\"$blob\":\"";
static const char REF_MID[] = "\",\"bytes\":";
#define REF_HEAD_LEN (sizeof(REF_HEAD) - 1)
#define REF_MID_LEN  (sizeof(REF_MID) - 1)

/* ref_fn is called for each reference; out is the expansion buffer, or NULL when only
 * walking. */

/* Length of the reference starting at p (which begins with REF_HEAD), filling hash and
 * *bytes; 0 if it is malformed. */
static size_t
parse_ref(const char *p, size_t len, uint8_t hash[HASH_LEN], uint64_t *bytes)
{
    size_t i = REF_HEAD_LEN, digits = 0;
    char hex[HASH_HEX_LEN + 1];

    if (len < i + HASH_HEX_LEN + REF_MID_LEN + 2) {
        return 0;
    }
    memcpy(hex, p + i, HASH_HEX_LEN);
    hex[HASH_HEX_LEN] = '\0';
    for (size_t k = 0; k < HASH_HEX_LEN; k++) {
        if (!((hex[k] >= '0' && hex[k] <= '9') || (hex[k] >= 'a' && hex[k] <= 'f'))) {
            return 0;
        }
    }
    if (hex_decode(hex, hash, HASH_LEN) < 0) {
        return 0;
    }
    i += HASH_HEX_LEN;
    if (memcmp(p + i, REF_MID, REF_MID_LEN) != 0) {
        return 0;
    }
    i += REF_MID_LEN;
    *bytes = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9' && digits < 12) {
        *bytes = *bytes * 10 + (uint64_t)(p[i] - '0');
        i++;
        digits++;
    }
    if (digits == 0 || i >= len || p[i] != '}') {
        return 0;
    }
    return i + 1;
}

/* An escaped key: two or more '$' then "blob" (the writer added one '$'). */
static int
escaped_key(const char *p, size_t n)
{
    size_t d = 0;

    while (d < n && p[d] == '$') {
        d++;
    }
    return d >= 2 && n - d == 4 && memcmp(p + d, "blob", 4) == 0;
}

/*
 * Walks stored args text, copying it to out (if non-NULL) with references handed to fn
 * and (with keys) escaped keys given back their name. Strings are skipped whole, so a reference
 * is only ever found where the writer put an object, never inside an agent's string.
 */
static int
walk_refs(const char *in, size_t len, int keys, struct buf *out, ref_fn fn, void *ctx,
          struct err *err)
{
    size_t i = 0, from = 0;

    while (i < len) {
        if (in[i] == '"') {
            size_t j = i + 1;
            while (j < len && in[j] != '"') {
                j += in[j] == '\\' ? 2 : 1;
            }
            if (j >= len) {
                return err_set(err, ERR_CORRUPT, "audit arguments end inside a string");
            }
            if (keys && j + 1 < len && in[j + 1] == ':' && escaped_key(in + i + 1, j - i - 1)) {
                if (out != NULL && (buf_append(out, in + from, i + 1 - from) < 0)) {
                    return buf_err(out, "audit arguments", err);
                }
                from = i + 2; /* drop one '$' */
            }
            i = j + 1;
        } else if (in[i] == '{' && len - i >= REF_HEAD_LEN &&
                   memcmp(in + i, REF_HEAD, REF_HEAD_LEN) == 0) {
            uint8_t hash[HASH_LEN];
            uint64_t bytes;
            size_t n = parse_ref(in + i, len - i, hash, &bytes);
            if (n == 0) {
                return err_set(err, ERR_CORRUPT,
                               "audit arguments hold a malformed blob reference at byte %zu", i);
            }
            if (out != NULL && buf_append(out, in + from, i - from) < 0) {
                return buf_err(out, "audit arguments", err);
            }
            if (fn(ctx, hash, bytes, out, err) < 0) {
                return -1;
            }
            i += n;
            from = i;
        } else {
            i++;
        }
    }
    if (out != NULL && buf_append(out, in + from, len - from) < 0) {
        return buf_err(out, "audit arguments", err);
    }
    return 0;
}

/* Appends s as a JSON string, escaped the way cJSON prints strings. */
static int
put_json_string(struct buf *out, const unsigned char *s, size_t n)
{
    size_t from = 0;

    buf_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        const char *esc = NULL;
        char u[8];
        switch (s[i]) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        default:
            if (s[i] < 0x20) {
                snprintf(u, sizeof(u), "\\u%04x", s[i]);
                esc = u;
            }
        }
        if (esc != NULL) {
            buf_append(out, s + from, i - from);
            buf_puts(out, esc);
            from = i + 1;
        }
    }
    buf_append(out, s + from, n - from);
    return buf_putc(out, '"');
}

struct expand_ctx {
    sqlite3 *db;
    struct buf tmp;
};

static int
expand_ref(void *ctx, const uint8_t hash[HASH_LEN], uint64_t bytes, struct buf *out,
           struct err *err)
{
    struct expand_ctx *x = ctx;
    char hex[HASH_HEX_LEN + 1];

    hex_encode(hash, HASH_LEN, hex);
    buf_reset(&x->tmp);
    if (store_blob_get_conn(x->db, hash, &x->tmp, err) < 0) {
        char why[ERR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err->msg);
        return err_set(err, err->code, "audit argument blob %s: %s", hex, why);
    }
    if (x->tmp.len != bytes) {
        return err_set(err, ERR_CORRUPT,
                       "audit argument blob %s holds %zu bytes but the reference says %llu", hex,
                       x->tmp.len, (unsigned long long)bytes);
    }
    if (put_json_string(out, (const unsigned char *)x->tmp.data, x->tmp.len) < 0) {
        return buf_err(out, "expanded audit arguments", err);
    }
    return 0;
}

int
store_audit_args_expand(struct sqlite3 *db, const char *args, size_t len, struct buf *out,
                        struct err *err)
{
    struct expand_ctx x = {db, {0}};
    int rc;

    buf_init(&x.tmp, STORE_AUDIT_EXPANDED_MAX);
    rc = walk_refs(args, len, 1, out, expand_ref, &x, err);
    buf_release(&x.tmp);
    return rc;
}

int
store_audit_args_read(struct sqlite3 *db, const void *args, size_t len, struct buf *out,
                      struct err *err)
{
    static const uint8_t magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    unsigned long long size;
    struct buf plain;
    size_t got;
    int rc;

    if (len < sizeof(magic) || memcmp(args, magic, sizeof(magic)) != 0) {
        return store_audit_args_expand(db, args, len, out, err);
    }
    size = ZSTD_getFrameContentSize(args, len);
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR ||
        size > AUDIT_ARGS_MAX) {
        return err_set(err, ERR_CORRUPT,
                       "compressed audit arguments do not declare a size within %zu bytes",
                       AUDIT_ARGS_MAX);
    }
    buf_init(&plain, AUDIT_ARGS_MAX + 1);
    if (buf_grow(&plain, (size_t)size + 1) < 0) {
        buf_release(&plain);
        return buf_err(&plain, "audit arguments", err);
    }
    got = ZSTD_decompress(plain.data, (size_t)size + 1, args, len);
    if (ZSTD_isError(got) || got != size) {
        buf_release(&plain);
        return err_set(err, ERR_CORRUPT, "compressed audit arguments are damaged");
    }
    rc = store_audit_args_expand(db, plain.data, got, out, err);
    buf_release(&plain);
    return rc;
}

/* The row's args, decompressed, into b (capped at AUDIT_ARGS_MAX). */
static int
decode_args(struct store *st, const struct row *r, struct buf *b, struct err *err)
{
    if (r->args_codec == 1) {
        /* The frame declares its size; it must be within the args cap. */
        return store_zstd_decompress(st, r->args, r->args_len, NULL, 0,
                                     (size_t)ZSTD_getFrameContentSize(r->args, r->args_len), b,
                                     "audit arguments", err);
    }
    if (buf_append(b, r->args, r->args_len) < 0) {
        return buf_err(b, "audit arguments", err);
    }
    return 0;
}

/* Verify: each referenced blob exists, hashes right, has the size, and is listed. */
struct check_ctx {
    struct store *st;
    int64_t id;
    struct buf tmp;
};

static int
check_ref(void *ctx, const uint8_t hash[HASH_LEN], uint64_t bytes, struct buf *out, struct err *err)
{
    struct check_ctx *c = ctx;
    char hex[HASH_HEX_LEN + 1];
    sqlite3_stmt *s;
    int rc;

    (void)out;
    hex_encode(hash, HASH_LEN, hex);
    buf_reset(&c->tmp);
    if (store_blob_get(c->st, hash, &c->tmp, err) < 0) {
        char why[ERR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err->msg);
        return err_set(err, ERR_CORRUPT, "audit row %lld: its argument blob %s cannot be read (%s)",
                       (long long)c->id, hex, why);
    }
    if (c->tmp.len != bytes) {
        return err_set(err, ERR_CORRUPT,
                       "audit row %lld: its argument blob %s holds %zu bytes, not %llu",
                       (long long)c->id, hex, c->tmp.len, (unsigned long long)bytes);
    }
    s = store_stmt(c->st, SQL_REF_HAS, err);
    if (s == NULL) {
        return -1;
    }
    sqlite3_bind_int64(s, 1, c->id);
    store_bind_hash(s, 2, hash);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE) {
        return err_set(err, ERR_CORRUPT,
                       "audit row %lld: its argument blob %s is not listed in audit_refs "
                       "(gc would not keep it)",
                       (long long)c->id, hex);
    }
    return rc == SQLITE_ROW ? 0 : store_sqlerr(c->st, rc, "read audit_refs", err);
}

/* 1 if the row's references are sound, 0 (err says why) if not, -1 on failure. */
static int
verify_refs(struct store *st, const struct row *r, struct err *err)
{
    struct check_ctx c = {st, r->id, {0}};
    struct buf b;
    int rc;

    if (r->args == NULL) {
        return 1;
    }
    buf_init(&b, AUDIT_ARGS_MAX);
    buf_init(&c.tmp, STORE_AUDIT_EXPANDED_MAX);
    rc = decode_args(st, r, &b, err) < 0 ? -1
         : walk_refs(b.data ? b.data : "", b.len, 0, NULL, check_ref, &c, err) < 0 ? -1
                                                                                   : 1;
    if (rc < 0 && (err->code == ERR_CORRUPT || err->code == ERR_TOOBIG)) {
        rc = 0; /* a verdict */
        if (strncmp(err->msg, "audit row ", 10) != 0) {
            char why[ERR_MSG_MAX];
            snprintf(why, sizeof(why), "%s", err->msg);
            err_set(err, ERR_CORRUPT, "audit row %lld: %s", (long long)r->id, why);
        }
    }
    buf_release(&b);
    buf_release(&c.tmp);
    return rc;
}

int
store_audit_verify(struct store *st, int *ok, int64_t *bad_id, int64_t *rows, struct err *err)
{
    static const uint8_t zero[HASH_LEN];
    uint8_t prev[HASH_LEN], want[HASH_LEN];
    int64_t last_id = 0, head_id = -1;
    uint8_t head_hash[HASH_LEN];
    sqlite3_stmt *s;
    int rc, own_read = 0, ret = -1;

    *ok = 0;
    *bad_id = 0;
    *rows = 0;
    memcpy(prev, zero, HASH_LEN);
    /* One read transaction, so the walk sees one consistent state of the chain. */
    if (!st->in_bracket && sqlite3_get_autocommit(st->db)) {
        if (store_exec(st, "BEGIN", err) < 0) {
            return -1;
        }
        own_read = 1;
    }
    s = store_stmt(st, SQL_WALK, err);
    if (s == NULL) {
        goto out;
    }
    err_clear(err);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct row r;
        const void *stored_prev = sqlite3_column_blob(s, 15);
        const void *stored_hash = sqlite3_column_blob(s, 16);

        read_row(s, &r);
        (*rows)++;
        if (sqlite3_column_bytes(s, 15) != HASH_LEN || sqlite3_column_bytes(s, 16) != HASH_LEN) {
            *bad_id = r.id;
            err_set(err, ERR_CORRUPT, "audit row %lld: its hash columns are damaged",
                    (long long)r.id);
            break;
        }
        if (memcmp(stored_prev, prev, HASH_LEN) != 0) {
            *bad_id = r.id;
            err_set(err, ERR_CORRUPT,
                    "audit row %lld: prev_hash does not match the hash of row %lld before it "
                    "(a row was deleted, inserted or reordered)",
                    (long long)r.id, (long long)last_id);
            break;
        }
        r.prev_hash = stored_prev;
        if (row_hash(&r, want, err) < 0) {
            sqlite3_reset(s);
            goto out;
        }
        if (memcmp(want, stored_hash, HASH_LEN) != 0) {
            *bad_id = r.id;
            err_set(err, ERR_CORRUPT,
                    "audit row %lld: its content does not match its hash (the row was edited)",
                    (long long)r.id);
            break;
        }
        rc = verify_refs(st, &r, err);
        if (rc <= 0) {
            sqlite3_reset(s);
            if (rc < 0) {
                goto out;
            }
            *bad_id = r.id;
            rc = SQLITE_DONE;
            break;
        }
        memcpy(prev, stored_hash, HASH_LEN);
        last_id = r.id;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        store_sqlerr(st, rc, "read the audit log", err);
        goto out;
    }
    if (*bad_id != 0) {
        ret = 0; /* a verdict, not a failure to verify */
        goto out;
    }
    s = store_stmt(st, SQL_HEAD_GET, err);
    if (s == NULL) {
        goto out;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(s, 1) == HASH_LEN) {
        head_id = sqlite3_column_int64(s, 0);
        memcpy(head_hash, sqlite3_column_blob(s, 1), HASH_LEN);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        store_sqlerr(st, rc, "read the audit log", err);
        goto out;
    }
    if ((head_id < 0 && *rows > 0) || (head_id >= 0 && *rows == 0) ||
        (head_id >= 0 && (head_id != last_id || memcmp(head_hash, prev, HASH_LEN) != 0))) {
        *bad_id = head_id > last_id ? last_id + 1 : last_id;
        err_set(err, ERR_CORRUPT,
                "audit log ends at row %lld but its recorded head is row %lld (rows were "
                "removed from the end, or the head was edited)",
                (long long)last_id, (long long)head_id);
        ret = 0;
        goto out;
    }
    *ok = 1;
    ret = 0;
out:
    if (own_read) {
        sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
    }
    return ret;
}

void
store_audit_entry_list_free(struct store_audit_entry *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        char **strs[] = {&list[i].kind,       &list[i].client_name, &list[i].client_version,
                         &list[i].session_id, &list[i].tool,        &list[i].summary,
                         &list[i].outcome,    &list[i].error_code,  &list[i].args};
        for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]); k++) {
            mem_free(*strs[k]);
        }
    }
    mem_free(list);
}

static int
fill_entry(struct store *st, sqlite3_stmt *s, int raw, struct store_audit_entry *e, struct err *err)
{
    struct row r;
    char **strs[8] = {&e->kind, &e->client_name, &e->client_version, &e->session_id,
                      &e->tool, &e->summary,     &e->outcome,        &e->error_code};

    memset(e, 0, sizeof(*e));
    read_row(s, &r);
    e->id = r.id;
    e->time_ms = r.time_ms;
    e->pid = r.pid;
    e->duration_ms = r.duration_ms;
    e->checkpoint_id = r.has_checkpoint ? r.checkpoint_id : -1;
    if (sqlite3_column_bytes(s, 16) == HASH_LEN) {
        memcpy(e->hash, sqlite3_column_blob(s, 16), HASH_LEN);
    }
    for (int i = 0; i < 8; i++) {
        if (r.text[i] != NULL && (*strs[i] = mem_strndup(r.text[i], r.text_len[i])) == NULL) {
            return err_set(err, ERR_NOMEM, "cannot read the audit log: out of memory");
        }
    }
    if (r.args != NULL) {
        struct buf b;
        buf_init(&b, AUDIT_ARGS_MAX);
        if (decode_args(st, &r, &b, err) < 0) {
            buf_release(&b);
            return -1;
        }
        if (!raw) {
            struct buf x;
            struct err xerr;
            buf_init(&x, STORE_AUDIT_EXPANDED_MAX);
            /* One row whose referenced blob is missing or damaged must not hide the rest of
             * the log: it keeps its stored form, whose {"$blob": ...} references say what
             * is there; `drun-admin audit verify` names the row and the fault. */
            if (store_audit_args_expand(st->db, b.data ? b.data : "", b.len, &x, &xerr) < 0) {
                if (xerr.code == ERR_NOMEM) {
                    buf_release(&b);
                    buf_release(&x);
                    return err_set(err, ERR_NOMEM, "audit row %lld: %s", (long long)r.id, xerr.msg);
                }
                log_warn("audit row %lld: %s; showing its arguments as stored (run 'drun-admin "
                         "audit verify')",
                         (long long)r.id, xerr.msg);
                buf_release(&x);
            } else {
                buf_release(&b);
                b = x;
            }
        }
        if (b.len == 0 && buf_puts(&b, "") < 0) {
            buf_release(&b);
            return buf_err(&b, "audit arguments", err);
        }
        e->args_len = b.len;
        e->args = buf_detach(&b, NULL);
        if (e->args == NULL) {
            return err_set(err, ERR_NOMEM, "cannot read the audit log: out of memory");
        }
    }
    return 0;
}

int
store_audit_tail(struct store *st, int64_t n, struct store_audit_entry **out, size_t *count,
                 struct err *err)
{
    struct store_audit_entry *list = NULL;
    size_t len = 0;
    sqlite3_stmt *s;
    int rc;

    *out = NULL;
    *count = 0;
    if (n < 1 || n > STORE_AUDIT_TAIL_MAX) {
        return err_set(err, ERR_INVAL, "row count %lld is outside 1..%d", (long long)n,
                       STORE_AUDIT_TAIL_MAX);
    }
    s = store_stmt(st, SQL_TAIL, err);
    if (s == NULL) {
        return -1;
    }
    sqlite3_bind_int64(s, 1, n);
    list = mem_calloc((size_t)n, sizeof(*list));
    if (list == NULL) {
        sqlite3_reset(s);
        return err_set(err, ERR_NOMEM, "cannot read the audit log: out of memory");
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && len < (size_t)n) {
        if (fill_entry(st, s, 0, &list[len], err) < 0) {
            sqlite3_reset(s);
            store_audit_entry_list_free(list, len + 1);
            return -1;
        }
        len++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        store_audit_entry_list_free(list, len);
        return store_sqlerr(st, rc, "read the audit log", err);
    }
    *out = list;
    *count = len;
    return 0;
}

/* Filtered tail: ?1 limit, ?2 session, ?3 tool, ?4 errors only, ?5 after id, ?6 one id. */
static const char SQL_QUERY[] =
    "SELECT * FROM (SELECT " AUDIT_COLS " FROM audit WHERE (?2 IS NULL OR session_id = ?2) AND "
    "(?3 IS NULL OR tool = ?3) AND (?4 = 0 OR outcome <> 'ok') AND id > ?5 AND "
    "(?6 < 0 OR id = ?6) ORDER BY id DESC LIMIT ?1) ORDER BY id";

int
store_audit_query(struct store *st, const struct store_audit_filter *f,
                  struct store_audit_entry **out, size_t *count, struct err *err)
{
    struct store_audit_entry *list = NULL;
    size_t len = 0;
    sqlite3_stmt *s = NULL;
    int rc;

    *out = NULL;
    *count = 0;
    if (f->limit < 1 || f->limit > STORE_AUDIT_TAIL_MAX) {
        return err_set(err, ERR_INVAL, "row count %lld is outside 1..%d", (long long)f->limit,
                       STORE_AUDIT_TAIL_MAX);
    }
    /* Rarely run, so not in the connection's statement cache. */
    rc = sqlite3_prepare_v2(st->db, SQL_QUERY, -1, &s, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(s);
        return store_sqlerr(st, rc, "read the audit log", err);
    }
    sqlite3_bind_int64(s, 1, f->limit);
    store_bind_text(s, 2, f->session_id);
    store_bind_text(s, 3, f->tool);
    sqlite3_bind_int(s, 4, f->errors_only ? 1 : 0);
    sqlite3_bind_int64(s, 5, f->after_id);
    sqlite3_bind_int64(s, 6, f->id > 0 ? f->id : -1);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if ((len & (len - 1)) == 0) { /* grow at powers of two */
            struct store_audit_entry *grown =
                mem_realloc(list, (len ? len * 2 : 1) * sizeof(*list));
            if (grown == NULL) {
                sqlite3_finalize(s);
                store_audit_entry_list_free(list, len);
                return err_set(err, ERR_NOMEM, "cannot read the audit log: out of memory");
            }
            list = grown;
        }
        memset(&list[len], 0, sizeof(list[len]));
        if (fill_entry(st, s, f->raw, &list[len], err) < 0) {
            sqlite3_finalize(s);
            store_audit_entry_list_free(list, len + 1);
            return -1;
        }
        len++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        store_audit_entry_list_free(list, len);
        return store_sqlerr(st, rc, "read the audit log", err);
    }
    *out = list;
    *count = len;
    return 0;
}
