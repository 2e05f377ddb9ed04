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
 */
#include "store/store_int.h"

#include <stdio.h>
#include <string.h>
#include <zstd.h>

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
static const char SQL_HEAD_GET[] = "SELECT last_id, hash FROM audit_head WHERE one = 1";
#define AUDIT_COLS                                                                                 \
    "id, time_ms, pid, kind, client_name, client_version, session_id, tool, summary, outcome, "    \
    "error_code, duration_ms, checkpoint_id, args, args_codec, prev_hash, hash"
static const char SQL_WALK[] = "SELECT " AUDIT_COLS " FROM audit ORDER BY id";
static const char SQL_TAIL[] =
    "SELECT * FROM (SELECT " AUDIT_COLS " FROM audit ORDER BY id DESC LIMIT ?1) ORDER BY id";

enum { ENC_NULL = 0, ENC_INT = 1, ENC_TEXT = 2, ENC_BLOB = 3 };

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

int
store_audit_append(struct store *st, struct store_audit *row, struct err *err)
{
    static const uint8_t zero[HASH_LEN];
    uint8_t prev[HASH_LEN], hash[HASH_LEN];
    void *packed = NULL;
    size_t packed_len = 0;
    struct row r;
    sqlite3_stmt *s;
    int own, rc = -1;
    const char *texts[8] = {row->kind, row->client_name, row->client_version, row->session_id,
                            row->tool, row->summary,     row->outcome,        row->error_code};
    static const char *names[8] = {"audit kind", "client name",   "client version", "session id",
                                   "audit tool", "audit summary", "audit outcome",  "error code"};

    memset(&r, 0, sizeof(r));
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
    if (row->args != NULL && row->args_len >= AUDIT_COMPRESS_MIN) {
        if (store_zstd_compress(st, row->args, row->args_len, NULL, 0, 0, &packed, &packed_len,
                                err) < 0) {
            return -1;
        }
        if (packed != NULL) {
            r.args = packed;
            r.args_len = packed_len;
            r.args_codec = 1;
        }
    }
    if (store_tx_begin(st, &own, err) < 0) {
        mem_free(packed);
        return -1;
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
    return store_tx_end(st, own, rc, err);
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
fill_entry(struct store *st, sqlite3_stmt *s, struct store_audit_entry *e, struct err *err)
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
        if (r.args_codec == 1) {
            /* The frame declares its size; it must be within the args cap. */
            if (store_zstd_decompress(st, r.args, r.args_len, NULL, 0,
                                      (size_t)ZSTD_getFrameContentSize(r.args, r.args_len), &b,
                                      "audit arguments", err) < 0) {
                buf_release(&b);
                return -1;
            }
        } else if (buf_append(&b, r.args, r.args_len) < 0) {
            buf_release(&b);
            return buf_err(&b, "audit arguments", err);
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
        if (fill_entry(st, s, &list[len], err) < 0) {
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
        if (fill_entry(st, s, &list[len], err) < 0) {
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
