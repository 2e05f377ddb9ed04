/*
 * test_audit_refs.c - audit arguments that keep large string values as blobs: the
 * reference shape at and past the threshold, exact round trips (agent "$blob" keys,
 * escapes, invalid UTF-8), gc keeping referenced blobs, verify catching a missing or
 * tampered blob, and the sqlite extension's reader on the stored column.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "test.h"
#include "test_db.h"
#include "tools/tool.h"
#include "util/mem.h"
#include "workspace/workspace.h"

/* A string of n bytes of c (caller frees). */
static char *
filled(size_t n, char c)
{
    char *s = mem_alloc(n + 1);

    CHECK(s != NULL);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* Appends one audit row for `args` the way tools_call does; returns its id. */
static int64_t
append_args(struct store *st, const cJSON *args, const char *session, char **stored, size_t *nparts)
{
    struct store_audit row = {0};
    struct store_audit_part *parts = NULL;
    char *text = NULL;
    struct err err;

    CHECK(tool_audit_args(args, &text, &parts, nparts) == 0);
    row.kind = "call";
    row.tool = "session_write_files";
    row.outcome = "ok";
    row.session_id = session;
    row.checkpoint_id = -1;
    row.args = text;
    row.args_len = strlen(text);
    row.parts = parts;
    row.nparts = *nparts;
    CHECK_OK(store_audit_append(st, &row, &err), &err);
    mem_free(parts);
    if (stored != NULL) {
        *stored = text;
    } else {
        cJSON_free(text);
    }
    return row.id;
}

/* The row's args read back: expanded, or as stored with raw. Caller frees. */
static char *
read_args(struct store *st, int64_t id, int raw)
{
    struct store_audit_filter f = {1, NULL, NULL, 0, 0, id, raw};
    struct store_audit_entry *e = NULL;
    size_t n = 0;
    struct err err;
    char *out;

    CHECK_OK(store_audit_query(st, &f, &e, &n, &err), &err);
    CHECK_EQ_INT(n, 1);
    out = e[0].args;
    e[0].args = NULL;
    store_audit_entry_list_free(e, n);
    return out;
}

static void
verify_ok(struct store *st)
{
    int ok = 0;
    int64_t bad = 0, rows = 0;
    struct err err;

    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK_MSG(ok, "verify: row %lld: %s", (long long)bad, err.msg);
}

TEST(reference_at_and_past_the_threshold)
{
    const char *path = test_path("a.db");
    struct store *st = tdb_open(path, NULL);
    char *at = filled(STORE_AUDIT_INLINE_MAX, 'x');
    char *past = filled(STORE_AUDIT_INLINE_MAX + 1, 'y');
    cJSON *args = cJSON_CreateObject(), *files = cJSON_AddArrayToObject(args, "files");
    cJSON *f1 = cJSON_CreateObject(), *f2 = cJSON_CreateObject();
    char *want, *stored = NULL, *got, hex[HASH_HEX_LEN + 1], ref[200];
    uint8_t h[HASH_LEN];
    size_t nparts = 0;
    int64_t id;

    cJSON_AddStringToObject(f1, "path", "at.txt");
    cJSON_AddStringToObject(f1, "content", at);
    cJSON_AddStringToObject(f2, "path", "past.txt");
    cJSON_AddStringToObject(f2, "content", past);
    cJSON_AddItemToArray(files, f1);
    cJSON_AddItemToArray(files, f2);
    want = cJSON_PrintUnformatted(args);
    id = append_args(st, args, NULL, &stored, &nparts);
    CHECK_EQ_INT(nparts, 2); /* both are candidates; the 1024-byte one goes back inline */
    hash_sha256(past, strlen(past), h);
    hex_encode(h, HASH_LEN, hex);
    snprintf(ref, sizeof(ref), "{\"$blob\":\"%s\",\"bytes\":%zu}", hex, strlen(past));
    CHECK_MSG(strstr(stored, ref) != NULL, "no reference in %.200s", stored);
    CHECK(strstr(stored, at) == NULL); /* the caller's text references both */
    got = read_args(st, id, 0);
    CHECK_EQ_STR(got, want); /* byte for byte what the call printed */
    mem_free(got);
    got = read_args(st, id, 1); /* as stored: 1024 bytes inline, 1025 a reference */
    CHECK(strstr(got, at) != NULL);
    CHECK(strstr(got, past) == NULL);
    CHECK(strstr(got, ref) != NULL);
    CHECK(strlen(got) < 1024 + 200);
    mem_free(got);
    verify_ok(st);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM audit_refs WHERE audit_id = 1"), 1);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), 1);
    cJSON_free(want);
    cJSON_free(stored);
    cJSON_Delete(args);
    mem_free(at);
    mem_free(past);
}

TEST(small_values_are_references_only_when_already_stored)
{
    const char *path = test_path("s.db");
    struct store *st = tdb_open(path, NULL);
    char *at = filled(STORE_AUDIT_REF_MIN, 'a'), *past = filled(STORE_AUDIT_REF_MIN + 1, 'b');
    char *file = filled(700, 'f'), *want, *got;
    cJSON *args = cJSON_CreateObject();
    uint8_t h[HASH_LEN];
    struct err err;
    size_t nparts = 0;
    int64_t id1, id2;

    cJSON_AddStringToObject(args, "at", at);
    cJSON_AddStringToObject(args, "past", past);
    cJSON_AddStringToObject(args, "content", file);
    want = cJSON_PrintUnformatted(args);
    /* Nothing stored yet: every small value goes back inline, no blob, no ref row. */
    id1 = append_args(st, args, NULL, NULL, &nparts);
    CHECK_EQ_INT(nparts, 2); /* 128 bytes is not even a candidate; 129 and 700 are */
    got = read_args(st, id1, 1);
    CHECK_EQ_STR(got, want);
    mem_free(got);
    /* The call wrote the 700 bytes as a file: now that value is a reference. */
    CHECK_OK(store_blob_put(st, file, strlen(file), h, &err), &err);
    id2 = append_args(st, args, NULL, NULL, &nparts);
    got = read_args(st, id2, 1);
    CHECK(strstr(got, file) == NULL);
    CHECK(strstr(got, past) != NULL);
    CHECK(strstr(got, "\"bytes\":700}") != NULL);
    mem_free(got);
    got = read_args(st, id2, 0);
    CHECK_EQ_STR(got, want);
    mem_free(got);
    verify_ok(st);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), 1);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM audit_refs"), 1);
    CHECK_EQ_INT(tdb_int(path, "SELECT audit_id FROM audit_refs"), id2);
    cJSON_free(want);
    cJSON_Delete(args);
    mem_free(at);
    mem_free(past);
    mem_free(file);
}

TEST(agent_blob_keys_round_trip_exactly)
{
    const char *path = test_path("k.db");
    struct store *st = tdb_open(path, NULL);
    const char *fake = "{\"$blob\":\"0000000000000000000000000000000000000000000000000000000000"
                       "000000\",\"bytes\":5}";
    cJSON *args = cJSON_Parse(fake), *inner = cJSON_CreateObject();
    char *big = filled(5000, 'z'), *want, *stored = NULL, *got;
    size_t nparts = 0;
    int64_t id;

    CHECK(args != NULL);
    cJSON_AddNumberToObject(inner, "$$blob", 1);
    cJSON_AddNumberToObject(inner, "$blobby", 2);
    cJSON_AddNumberToObject(inner, "blob", 3);
    cJSON_AddStringToObject(inner, "$$$blob", big);
    cJSON_AddItemToObject(args, "x", inner);
    cJSON_AddStringToObject(args, "s", fake); /* reference-like text inside a string */
    cJSON_AddStringToObject(args, "t", "\"$$blob\":");
    want = cJSON_PrintUnformatted(args);
    id = append_args(st, args, NULL, &stored, &nparts);
    CHECK_EQ_INT(nparts, 1);
    CHECK(strstr(stored, "{\"$$blob\":\"0000") != NULL); /* the agent's object, escaped */
    CHECK(strstr(stored, "\"$$$blob\":1") != NULL);
    CHECK(strstr(stored, "\"$blobby\":2") != NULL); /* not a marker key: untouched */
    CHECK(strstr(stored, "\"$$$$blob\":{\"$blob\":\"") != NULL);
    got = read_args(st, id, 0);
    CHECK_EQ_STR(got, want);
    mem_free(got);
    verify_ok(st);
    store_close(st);
    cJSON_free(want);
    cJSON_free(stored);
    cJSON_Delete(args);
    mem_free(big);
}

TEST(escapes_and_invalid_utf8_round_trip)
{
    const char *path = test_path("u.db");
    struct store *st = tdb_open(path, NULL);
    char s[4096];
    size_t n = 0;
    cJSON *args = cJSON_CreateObject();
    char *want, *got, *stored = NULL;
    size_t nparts = 0;
    int64_t id;

    while (n < 3000) {
        for (int c = 1; c < 0x20; c++) {
            s[n++] = (char)c;
        }
        memcpy(s + n, "\"\\/\x7f\xff\xfe\xc3\xa9\xe2\x82", 10); /* ends in a cut char */
        n += 10;
    }
    s[n] = '\0';
    cJSON_AddStringToObject(args, "content", s);
    cJSON_AddStringToObject(args, "path", "bin.dat");
    want = cJSON_PrintUnformatted(args);
    id = append_args(st, args, NULL, &stored, &nparts);
    CHECK_EQ_INT(nparts, 1);
    got = read_args(st, id, 0);
    CHECK_EQ_INT(strlen(got), strlen(want));
    CHECK(strcmp(got, want) == 0);
    mem_free(got);
    store_close(st);
    cJSON_free(want);
    cJSON_free(stored);
    cJSON_Delete(args);
}

TEST(many_parts_same_content_one_blob)
{
    const char *path = test_path("m.db");
    struct store *st = tdb_open(path, NULL);
    char *big = filled(20000, 'q'), *want, *got;
    cJSON *args = cJSON_CreateArray();
    size_t nparts = 0;
    int64_t id, blobs;

    for (int i = 0; i < 10; i++) {
        cJSON_AddItemToArray(args, cJSON_CreateString(big));
    }
    want = cJSON_PrintUnformatted(args);
    id = append_args(st, args, NULL, NULL, &nparts);
    CHECK_EQ_INT(nparts, 10);
    got = read_args(st, id, 0);
    CHECK_EQ_STR(got, want);
    mem_free(got);
    store_close(st);
    blobs = tdb_int(path, "SELECT count(*) FROM blobs");
    CHECK_EQ_INT(blobs, 1);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM audit_refs"), 1);
    cJSON_free(want);
    cJSON_Delete(args);
    mem_free(big);
}

TEST(bad_part_hash_is_refused_and_nothing_stored)
{
    const char *path = test_path("h.db");
    struct store *st = tdb_open(path, NULL);
    struct store_audit row = {0};
    struct store_audit_part part = {"hello", 5, {0}};
    struct err err;

    row.kind = "call";
    row.tool = "t";
    row.outcome = "ok";
    row.checkpoint_id = -1;
    row.args = "{}";
    row.args_len = 2;
    row.parts = &part;
    row.nparts = 1;
    CHECK(store_audit_append(st, &row, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK_MSG(strstr(err.msg, "does not match its hash") != NULL, "%s", err.msg);
    /* A large part with a wrong hash: refused by its put, in the row's transaction. */
    {
        char *big = filled(5000, 'L'), text[200], hex[HASH_HEX_LEN + 1];
        struct store_audit_part bp;
        bp.data = big;
        bp.len = 5000;
        memset(bp.hash, 0x11, HASH_LEN);
        hex_encode(bp.hash, HASH_LEN, hex);
        snprintf(text, sizeof(text), "{\"c\":{\"$blob\":\"%s\",\"bytes\":5000}}", hex);
        row.args = text;
        row.args_len = strlen(text);
        row.parts = &bp;
        CHECK(store_audit_append(st, &row, &err) < 0);
        CHECK_EQ_INT(err.code, ERR_INVAL);
        mem_free(big);
    }
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM audit"), 0);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), 0);
}

TEST(gc_keeps_audit_referenced_blobs)
{
    const char *path = test_path("g.db");
    struct store *st = tdb_open(path, NULL);
    struct store_session_new req = {0};
    struct store_session sess;
    struct store_gc_opts opts = {0, -1, 0};
    struct store_gc_result res;
    struct ws_manifest *m = NULL;
    struct buf enc;
    uint8_t content_hash[HASH_LEN], other_hash[HASH_LEN], mhash[HASH_LEN];
    char *content = filled(100000, 'c'), *other = filled(3000, 'o'), *want, *got;
    cJSON *args = cJSON_CreateObject();
    struct err err;
    size_t nparts = 0;
    int64_t id;

    /* A session whose checkpoint 0 holds two files; the audit row names one of them. */
    CHECK_OK(store_blob_put(st, content, strlen(content), content_hash, &err), &err);
    CHECK_OK(store_blob_put(st, other, strlen(other), other_hash, &err), &err);
    CHECK_OK(ws_manifest_new(&m, &err), &err);
    CHECK_OK(ws_manifest_set(m, "big.txt", WS_FILE, strlen(content), content_hash, &err), &err);
    CHECK_OK(ws_manifest_set(m, "other.txt", WS_FILE, strlen(other), other_hash, &err), &err);
    buf_init(&enc, BUF_MAX_DEFAULT);
    CHECK_OK(ws_manifest_encode(m, &enc, &err), &err);
    CHECK_OK(store_blob_put(st, enc.data, enc.len, mhash, &err), &err);
    req.manifest_hash = mhash;
    req.parent_checkpoint = -1;
    req.tool = "create_session";
    CHECK_OK(store_session_create(st, &req, &sess, &err), &err);
    cJSON_AddStringToObject(args, "path", "big.txt");
    cJSON_AddStringToObject(args, "content", content);
    want = cJSON_PrintUnformatted(args);
    id = append_args(st, args, sess.id, NULL, &nparts);
    CHECK_EQ_INT(nparts, 1);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), 3); /* no second copy */

    CHECK_OK(store_session_close(st, sess.id, &err), &err);
    CHECK_OK(store_gc(st, &opts, ws_manifest_refs, NULL, &res, &err), &err);
    CHECK_EQ_INT(res.sessions_deleted, 1);
    CHECK_EQ_INT(res.blobs_deleted, 2); /* the manifest and other.txt */
    got = read_args(st, id, 0);
    CHECK_EQ_STR(got, want);
    mem_free(got);
    verify_ok(st);
    store_close(st);
    store_session_release(&sess);
    ws_manifest_free(m);
    buf_release(&enc);
    cJSON_free(want);
    cJSON_Delete(args);
    mem_free(content);
    mem_free(other);
}

/* One row with a referenced blob; returns the blob's hex. */
static void
row_with_blob(const char *path, char hex[HASH_HEX_LEN + 1])
{
    struct store *st = tdb_open(path, NULL);
    char *big = filled(4000, 'b');
    cJSON *args = cJSON_CreateObject();
    uint8_t h[HASH_LEN];
    size_t nparts = 0;

    cJSON_AddStringToObject(args, "command", "ls");
    append_args(st, args, NULL, NULL, &nparts);
    cJSON_AddStringToObject(args, "content", big);
    append_args(st, args, NULL, NULL, &nparts);
    cJSON_DeleteItemFromObject(args, "content");
    append_args(st, args, NULL, NULL, &nparts);
    verify_ok(st);
    store_close(st);
    hash_sha256(big, strlen(big), h);
    hex_encode(h, HASH_LEN, hex);
    cJSON_Delete(args);
    mem_free(big);
}

static void
verify_names_row_2(const char *path, const char *why)
{
    struct store *st = tdb_open(path, NULL);
    int ok = 1;
    int64_t bad = 0, rows = 0;
    struct err err;

    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK(!ok);
    CHECK_EQ_INT(bad, 2);
    CHECK_MSG(strstr(err.msg, "audit row 2") != NULL && strstr(err.msg, why) != NULL, "msg: %s",
              err.msg);
    store_close(st);
}

TEST(verify_catches_a_deleted_blob)
{
    const char *path = test_path("d.db");
    char hex[HASH_HEX_LEN + 1], sql[256];

    row_with_blob(path, hex);
    snprintf(sql, sizeof(sql), "DELETE FROM blobs WHERE hash = x'%s'", hex);
    tdb_exec(path, sql);
    verify_names_row_2(path, hex);
}

/* A row whose referenced blob is gone keeps its stored form in a tail; the rest expand. */
TEST(tail_survives_a_deleted_blob)
{
    const char *path = test_path("t.db");
    char hex[HASH_HEX_LEN + 1], sql[256];
    struct store_audit_entry *list = NULL;
    struct store *st;
    size_t n = 0, seen = 0;
    struct err err;

    row_with_blob(path, hex);
    snprintf(sql, sizeof(sql), "DELETE FROM blobs WHERE hash = x'%s'", hex);
    tdb_exec(path, sql);
    st = tdb_open(path, NULL);
    CHECK_OK(store_audit_tail(st, 10, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 3);
    for (size_t i = 0; i < n; i++) {
        if (list[i].id == 2) {
            /* the stored reference, naming the missing blob */
            CHECK_MSG(list[i].args != NULL && strstr(list[i].args, "\"$blob\"") != NULL &&
                          strstr(list[i].args, hex) != NULL,
                      "row 2: %s", list[i].args ? list[i].args : "(null)");
            seen++;
        } else {
            CHECK(list[i].args != NULL && strstr(list[i].args, "\"$blob\"") == NULL);
            CHECK(strstr(list[i].args, "\"command\":\"ls\"") != NULL);
            seen++;
        }
    }
    CHECK_EQ_INT(seen, 3);
    store_audit_entry_list_free(list, n);
    store_close(st);
}

TEST(verify_catches_a_tampered_blob)
{
    const char *path = test_path("t.db");
    char hex[HASH_HEX_LEN + 1], sql[256];

    row_with_blob(path, hex);
    /* Same size, other bytes: whatever the codec, the hash no longer matches. */
    snprintf(sql, sizeof(sql),
             "UPDATE blobs SET codec = 0, data = CAST(zeroblob(size) AS BLOB) WHERE hash = "
             "x'%s'",
             hex);
    tdb_exec(path, sql);
    verify_names_row_2(path, hex);
}

TEST(verify_catches_a_missing_ref_row)
{
    const char *path = test_path("r.db");
    char hex[HASH_HEX_LEN + 1];

    row_with_blob(path, hex);
    tdb_exec(path, "DELETE FROM audit_refs");
    verify_names_row_2(path, "audit_refs");
}

TEST(args_read_handles_compressed_and_plain_columns)
{
    const char *path = test_path("c.db");
    struct store *st = tdb_open(path, NULL);
    cJSON *args = cJSON_CreateObject();
    char key[16], *want;
    size_t nparts = 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    struct err err;

    /* Many small values: over 1 KiB in all, so the row is stored compressed. */
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        cJSON_AddStringToObject(args, key, "some small value");
    }
    cJSON_AddStringToObject(args, "big", want = filled(2000, 'w'));
    mem_free(want);
    want = cJSON_PrintUnformatted(args);
    append_args(st, args, NULL, NULL, &nparts);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT args_codec FROM audit WHERE id = 1"), 1);
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_prepare_v2(db, "SELECT args FROM audit WHERE id = 1", -1, &s, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(s) == SQLITE_ROW);
    {
        struct buf out;
        buf_init(&out, STORE_AUDIT_EXPANDED_MAX);
        CHECK_OK(store_audit_args_read(db, sqlite3_column_blob(s, 0),
                                       (size_t)sqlite3_column_bytes(s, 0), &out, &err),
                 &err);
        CHECK_EQ_STR(buf_cstr(&out), want);
        buf_reset(&out);
        /* A malformed reference is an error, not wrong text. */
        CHECK(store_audit_args_read(db, "{\"$blob\":\"zz\",\"bytes\":1}", 25, &out, &err) < 0);
        CHECK_EQ_INT(err.code, ERR_CORRUPT);
        buf_release(&out);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    cJSON_free(want);
    cJSON_Delete(args);
}

TESTS(reference_at_and_past_the_threshold, small_values_are_references_only_when_already_stored,
      agent_blob_keys_round_trip_exactly, escapes_and_invalid_utf8_round_trip,
      many_parts_same_content_one_blob, bad_part_hash_is_refused_and_nothing_stored,
      gc_keeps_audit_referenced_blobs, verify_catches_a_deleted_blob, tail_survives_a_deleted_blob,
      verify_catches_a_tampered_blob, verify_catches_a_missing_ref_row,
      args_read_handles_compressed_and_plain_columns)
