/*
 * test_store.c - the store module: opening and refusing files, blobs, sessions,
 * checkpoints, the audit chain, gc, and the faults the issue lists (busy, disk full,
 * SIGKILL mid-write, allocation failure).
 *
 * Tests use sqlite3 directly only to inspect or damage a file from outside, as an
 * operator or an attacker would.
 */
#include "test.h"
#include "test_db.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <time.h>

#include "store/store.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

/* ---- helpers ------------------------------------------------------------------------ */

static void
fill_text(char *p, size_t n, unsigned seed)
{
    static const char *words[] = {"alpha ",       "beta ",       "gamma ",  "delta ",
                                  "int x = 1;\n", "return 0;\n", "static ", "void\n"};
    size_t i = 0;

    while (i < n) {
        const char *w = words[(seed = seed * 1103515245u + 12345u) >> 16 & 7];
        for (size_t k = 0; w[k] && i < n; k++) {
            p[i++] = w[k];
        }
    }
}

static void
fill_random(void *p, size_t n)
{
    CHECK(getentropy(p, n < 256 ? n : 256) == 0);
    for (size_t i = 256; i < n; i++) {
        ((uint8_t *)p)[i] = (uint8_t)(((uint8_t *)p)[i - 256] * 31 + (uint8_t)i * 7 + 1);
    }
}

/* The test manifest format: a concatenation of 32-byte blob hashes. */
static int
test_refs(void *ctx, const void *manifest, size_t len,
          void (*ref)(void *refctx, const uint8_t hash[HASH_LEN]), void *refctx, struct err *err)
{
    (void)ctx;
    if (len % HASH_LEN != 0) {
        return err_set(err, ERR_CORRUPT, "test manifest of %zu bytes is not whole hashes", len);
    }
    for (size_t i = 0; i < len; i += HASH_LEN) {
        ref(refctx, (const uint8_t *)manifest + i);
    }
    return 0;
}

/* Creates a session whose checkpoint 0 has an empty manifest. */
static void
new_session(struct store *st, struct store_session *s)
{
    struct store_session_new req = {0};
    uint8_t empty[HASH_LEN];
    struct err err;

    CHECK_OK(store_blob_put(st, "", 0, empty, &err), &err);
    req.parent_checkpoint = -1;
    req.manifest_hash = empty;
    req.owner_pid = getpid();
    req.owner_start = proc_start_time(getpid());
    req.client = "test-client";
    req.tool = "session_create";
    CHECK_OK(store_session_create(st, &req, s, &err), &err);
}

/* Appends a checkpoint whose manifest lists one fresh blob; returns its id. */
static int64_t
add_checkpoint(struct store *st, const char *session, const char *path, unsigned seed)
{
    struct store_checkpoint cp = {0};
    struct store_change ch = {path, STORE_MODIFIED};
    char text[2048];
    uint8_t file[HASH_LEN];
    struct err err;

    fill_text(text, sizeof(text), seed);
    snprintf(text, 32, "seed %u\n", seed);
    CHECK_OK(store_blob_put(st, text, sizeof(text), file, &err), &err);
    CHECK_OK(store_blob_put(st, file, HASH_LEN, cp.manifest_hash, &err), &err);
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", session);
    cp.tool = "session_bash";
    cp.command = "make";
    cp.has_exit_code = 1;
    cp.file_count = 1;
    cp.modified = 1;
    CHECK_OK(store_checkpoint_append(st, &cp, &ch, 1, &err), &err);
    return cp.id;
}

static void
check_integrity(const char *path)
{
    struct store *st = tdb_open(path, NULL);
    struct err err;
    int ok = 0;

    CHECK_OK(store_check(st, &ok, &err), &err);
    CHECK_MSG(ok, "integrity: %s", err.msg);
    store_close(st);
}

/* ---- opening -------------------------------------------------------------------------- */

TEST(open_creates_private_wal_db)
{
    const char *path = test_path("d.db");
    struct store *st = tdb_open(path, NULL);
    char wal[8192];
    struct stat sb;
    uint8_t h[HASH_LEN];
    struct err err;

    CHECK(stat(path, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 0777, 0600);
    CHECK_OK(store_blob_put(st, "x", 1, h, &err), &err);
    CHECK_FMT(wal, sizeof(wal), "%s-wal", path);
    CHECK(stat(wal, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 0777, 0600);
    CHECK_FMT(wal, sizeof(wal), "%s-shm", path);
    CHECK(stat(wal, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 0777, 0600);
    CHECK_EQ_INT(store_version_at_open(st), 0);
    CHECK_EQ_STR(store_path(st), path);
    CHECK(store_schema_version() >= 1);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "PRAGMA application_id"), 0x6472756e);
    CHECK_EQ_INT(tdb_int(path, "PRAGMA user_version"), store_schema_version());
    st = tdb_open(path, NULL);
    CHECK_EQ_INT(store_version_at_open(st), store_schema_version());
    store_close(st);
}

TEST(open_refuses_other_sqlite_files)
{
    const char *path = test_path("other.db");
    struct store *st = NULL;
    struct err err;

    tdb_exec(path, "PRAGMA application_id = 42; CREATE TABLE t (x); INSERT INTO t VALUES (7)");
    CHECK(store_open(path, NULL, &st, &err) < 0);
    CHECK(st == NULL);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK_MSG(strstr(err.msg, "is not a drun database") && strstr(err.msg, "other.db"), "%s",
              err.msg);
    CHECK_EQ_INT(tdb_int(path, "SELECT x FROM t"), 7);
    /* application_id 0 but already holding someone's tables */
    path = test_path("plain.db");
    tdb_exec(path, "CREATE TABLE t (x); INSERT INTO t VALUES (8)");
    CHECK(store_open(path, NULL, &st, &err) < 0);
    CHECK_MSG(strstr(err.msg, "is not a drun database"), "%s", err.msg);
    CHECK_EQ_INT(tdb_int(path, "SELECT x FROM t"), 8);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM sqlite_master"), 1);
}

TEST(open_reports_garbage_as_corrupt)
{
    const char *path = test_path("junk.db");
    char junk[8192], back[8192];
    struct store *st = NULL;
    struct err err;
    FILE *f;

    fill_text(junk, sizeof(junk), 3);
    f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fwrite(junk, 1, sizeof(junk), f) == sizeof(junk));
    fclose(f);
    CHECK(store_open(path, NULL, &st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    CHECK_MSG(strstr(err.msg, "is corrupt") && strstr(err.msg, "backup") &&
                  strstr(err.msg, "junk.db"),
              "%s", err.msg);
    f = fopen(path, "r");
    CHECK(f != NULL && fread(back, 1, sizeof(back), f) == sizeof(back));
    fclose(f);
    CHECK(memcmp(junk, back, sizeof(junk)) == 0); /* never "fixed" */
}

TEST(open_reports_truncated_as_corrupt)
{
    const char *path = test_path("t.db");
    struct store *st = tdb_open(path, NULL);
    char data[4096];
    uint8_t h[HASH_LEN];
    struct err err;
    struct stat sb;

    for (unsigned i = 0; i < 200; i++) {
        fill_random(data, sizeof(data));
        CHECK_OK(store_blob_put(st, data, sizeof(data), h, &err), &err);
    }
    store_close(st); /* the last close checkpoints the WAL into the file */
    CHECK(stat(path, &sb) == 0);
    CHECK(sb.st_size > 400000);
    CHECK(truncate(path, sb.st_size / 2) == 0);
    st = NULL;
    CHECK(store_open(path, NULL, &st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    CHECK_MSG(strstr(err.msg, "is corrupt") && strstr(err.msg, "restore it from a backup"), "%s",
              err.msg);
}

TEST(open_refuses_newer_schema)
{
    const char *path = test_path("new.db");
    struct store *st = tdb_open(path, NULL);
    struct err err;
    char want[64];

    store_close(st);
    tdb_exec(path, "PRAGMA user_version = 99");
    st = NULL;
    CHECK(store_open(path, NULL, &st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_VERSION);
    snprintf(want, sizeof(want), "version %d", store_schema_version());
    CHECK_MSG(strstr(err.msg, "99") && strstr(err.msg, want), "%s", err.msg);
    CHECK_EQ_INT(tdb_int(path, "PRAGMA user_version"), 99);
}

TEST(open_without_migrating)
{
    struct store_opts opts = {0};
    struct store *st = NULL;
    struct err err;

    opts.no_migrate = 1;
    CHECK(store_open(test_path("a.db"), &opts, &st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_VERSION);
    CHECK_MSG(strstr(err.msg, "db migrate"), "%s", err.msg);
    opts.no_migrate = 0;
    opts.read_only = 1;
    CHECK(store_open(test_path("missing.db"), &opts, &st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(access(test_path("missing.db"), F_OK) != 0);
    st = tdb_open(test_path("b.db"), NULL);
    store_close(st);
    st = tdb_open(test_path("b.db"), &opts);
    CHECK(store_begin(st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    store_close(st);
}

/* Finds schema/drun.sql by walking up from the test binary. */
static int
find_schema(char *out, size_t size)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0) {
        return -1;
    }
    exe[n] = '\0';
    for (char *slash = strrchr(exe, '/'); slash != NULL; slash = strrchr(exe, '/')) {
        *slash = '\0';
        if ((size_t)snprintf(out, size, "%s/schema/drun.sql", exe) < size &&
            access(out, R_OK) == 0) {
            return 0;
        }
    }
    return -1;
}

static char *
schema_dump(sqlite3 *db)
{
    static const char q[] = "SELECT type || ' ' || name || ' ' || tbl_name || ': ' || "
                            "coalesce(sql, '') FROM sqlite_master ORDER BY type, name";
    sqlite3_stmt *s = NULL;
    struct buf b;

    buf_init(&b, 1 << 20);
    CHECK(sqlite3_prepare_v2(db, q, -1, &s, NULL) == SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW) {
        buf_puts(&b, (const char *)sqlite3_column_text(s, 0));
        buf_putc(&b, '\n');
    }
    sqlite3_finalize(s);
    CHECK(!buf_failed(&b));
    return buf_detach(&b, NULL);
}

TEST(schema_file_matches_migrations)
{
    char schema[4096];
    sqlite3 *a = NULL, *b = NULL;
    char *da, *db_, *sql;
    struct buf text;
    FILE *f;
    char chunk[4096];
    size_t n;

    if (find_schema(schema, sizeof(schema)) < 0) {
        SKIP("schema/drun.sql not found above the test binary");
    }
    store_close(tdb_open(test_path("m.db"), NULL));
    CHECK(sqlite3_open(test_path("m.db"), &a) == SQLITE_OK);
    buf_init(&text, 1 << 20);
    f = fopen(schema, "r");
    CHECK(f != NULL);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        buf_append(&text, chunk, n);
    }
    fclose(f);
    sql = buf_detach(&text, NULL);
    CHECK(sqlite3_open(":memory:", &b) == SQLITE_OK);
    CHECK_MSG(sqlite3_exec(b, sql, NULL, NULL, NULL) == SQLITE_OK, "schema/drun.sql: %s",
              sqlite3_errmsg(b));
    da = schema_dump(a);
    db_ = schema_dump(b);
    CHECK_MSG(strcmp(da, db_) == 0, "schema/drun.sql differs from the migrations:\n%s\n----\n%s",
              da, db_);
    CHECK(strstr(da, "table audit") != NULL);
    mem_free(da);
    mem_free(db_);
    mem_free(sql);
    sqlite3_close(a);
    sqlite3_close(b);
}

/* ---- blobs ------------------------------------------------------------------------------ */

TEST(blob_roundtrip_compress_and_dedup)
{
    const char *path = test_path("b.db");
    struct store *st = tdb_open(path, NULL);
    static char text[65536], noise[4096];
    uint8_t h1[HASH_LEN], h2[HASH_LEN], h3[HASH_LEN], h4[HASH_LEN], want[HASH_LEN];
    struct buf out;
    struct err err;
    int exists;
    int64_t size;

    fill_text(text, sizeof(text), 1);
    fill_random(noise, sizeof(noise));
    CHECK_OK(store_blob_put(st, text, sizeof(text), h1, &err), &err);
    hash_sha256(text, sizeof(text), want);
    CHECK(memcmp(h1, want, HASH_LEN) == 0);
    CHECK_OK(store_blob_put(st, noise, sizeof(noise), h2, &err), &err);
    CHECK_OK(store_blob_put(st, "", 0, h3, &err), &err);
    CHECK_OK(store_blob_put(st, text, sizeof(text), h4, &err), &err); /* again */
    CHECK(memcmp(h1, h4, HASH_LEN) == 0);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), 3);
    CHECK_EQ_INT(tdb_int(path, "SELECT codec FROM blobs WHERE size = 65536"), 1);
    CHECK(tdb_int(path, "SELECT length(data) FROM blobs WHERE size = 65536") < 65536 / 4);
    CHECK_EQ_INT(tdb_int(path, "SELECT codec FROM blobs WHERE size = 4096"), 0);
    CHECK_EQ_INT(tdb_int(path, "SELECT length(data) FROM blobs WHERE size = 4096"), 4096);
    st = tdb_open(path, NULL);
    buf_init(&out, 1 << 20);
    CHECK_OK(store_blob_get(st, h1, &out, &err), &err);
    CHECK_EQ_INT(out.len, sizeof(text));
    CHECK(memcmp(out.data, text, sizeof(text)) == 0);
    buf_reset(&out);
    CHECK_OK(store_blob_get(st, h2, &out, &err), &err);
    CHECK(out.len == sizeof(noise) && memcmp(out.data, noise, sizeof(noise)) == 0);
    buf_reset(&out);
    CHECK_OK(store_blob_get(st, h3, &out, &err), &err);
    CHECK_EQ_INT(out.len, 0);
    CHECK_OK(store_blob_has(st, h2, &exists, &size, &err), &err);
    CHECK(exists && size == 4096);
    want[0] ^= 1;
    CHECK_OK(store_blob_has(st, want, &exists, NULL, &err), &err);
    CHECK(!exists);
    CHECK(store_blob_get(st, want, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    /* a buffer too small for the blob: ERR_TOOBIG, buffer unchanged */
    buf_release(&out);
    buf_init(&out, 100);
    buf_puts(&out, "keep");
    CHECK(store_blob_get(st, h1, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK_EQ_STR(buf_cstr(&out), "keep");
    buf_release(&out);
    store_close(st);
}

/* Manifest-like blobs (1,000 incompressible hashes) stored as deltas of each other. */
TEST(blob_delta_chain_roundtrip_and_gc)
{
    const char *path = test_path("delta.db");
    struct store *st = tdb_open(path, NULL);
    enum { N = 1000 * HASH_LEN, VERSIONS = 40 };
    uint8_t *m = mem_alloc(N);
    uint8_t hashes[VERSIONS][HASH_LEN], orphan[HASH_LEN];
    struct store_gc_opts opts = {0, -1, -1};
    struct store_gc_result res;
    struct store_checkpoint cp = {0};
    struct store_session s;
    struct buf out;
    struct err err;
    int64_t delta_bytes;

    CHECK(m != NULL);
    fill_random(m, N);
    CHECK_OK(store_blob_put(st, m, N, hashes[0], &err), &err);
    for (int v = 1; v < VERSIONS; v++) {
        fill_random(m + (size_t)(v * 7 % 1000) * HASH_LEN, HASH_LEN); /* one entry changes */
        CHECK_OK(store_blob_put_delta(st, m, N, hashes[v - 1], hashes[v], &err), &err);
    }
    /* every version reads back exactly */
    buf_init(&out, (size_t)N + 1);
    for (int v = VERSIONS - 1; v >= 0; v--) {
        uint8_t got[HASH_LEN];
        buf_reset(&out);
        CHECK_OK(store_blob_get(st, hashes[v], &out, &err), &err);
        CHECK_EQ_INT(out.len, N);
        hash_sha256(out.data, out.len, got);
        CHECK(memcmp(got, hashes[v], HASH_LEN) == 0);
    }
    CHECK_OK(store_blob_put(st, "orphan", 6, orphan, &err), &err);
    new_session(st, &s);
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
    memcpy(cp.manifest_hash, hashes[VERSIONS - 1], HASH_LEN);
    cp.tool = "test";
    CHECK_OK(store_checkpoint_append(st, &cp, NULL, 0, &err), &err);
    store_close(st);

    /* deltas are small, chains are capped, and a capped chain restarts from its root */
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs WHERE codec = 2"), VERSIONS - 1);
    CHECK(tdb_int(path, "SELECT max(depth) FROM blobs") == STORE_DELTA_DEPTH_MAX);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs WHERE depth = 1"),
                 1 + (VERSIONS - 1) / (STORE_DELTA_DEPTH_MAX + 1));
    delta_bytes = tdb_int(path, "SELECT sum(length(data)) FROM blobs WHERE codec = 2");
    CHECK_MSG(delta_bytes < 300 * (VERSIONS - 1), "deltas take %lld bytes", (long long)delta_bytes);

    /* gc keeps the chain under the live manifest, and only that */
    st = tdb_open(path, NULL);
    CHECK_OK(store_gc(st, &opts, test_refs, NULL, &res, &err), &err);
    buf_reset(&out);
    CHECK_OK(store_blob_get(st, hashes[VERSIONS - 1], &out, &err), &err);
    CHECK_EQ_INT(out.len, N);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs WHERE base IS NOT NULL AND base NOT IN "
                               "(SELECT hash FROM blobs)"),
                 0);
    CHECK(res.blobs_deleted >= (VERSIONS - 1) - STORE_DELTA_DEPTH_MAX);

    /* a damaged chain is corrupt, not a loop or a crash */
    tdb_exec(path, "PRAGMA foreign_keys = OFF; UPDATE blobs SET base = hash WHERE codec = 2");
    st = tdb_open(path, NULL);
    buf_reset(&out);
    CHECK(store_blob_get(st, hashes[VERSIONS - 1], &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    store_close(st);
    buf_release(&out);
    mem_free(m);
}

TEST(blob_cap_at_and_past_edge)
{
    const char *path = test_path("cap.db");
    struct store_opts opts = {0};
    struct store *st;
    static char data[1001];
    uint8_t h[HASH_LEN];
    struct err err;

    opts.blob_max = 1000;
    st = tdb_open(path, &opts);
    fill_random(data, sizeof(data));
    CHECK_OK(store_blob_put(st, data, 1000, h, &err), &err);
    CHECK(store_blob_put(st, data, 1001, h, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK_MSG(strstr(err.msg, "1001") && strstr(err.msg, "1000"), "%s", err.msg);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs WHERE size > 1000"), 0);
}

TEST(blob_damage_is_detected)
{
    const char *path = test_path("dmg.db");
    struct store *st = tdb_open(path, NULL);
    static char text[65536], noise[2048];
    uint8_t ht[HASH_LEN], hn[HASH_LEN];
    struct buf out;
    struct err err;

    fill_text(text, sizeof(text), 5);
    fill_random(noise, sizeof(noise));
    CHECK_OK(store_blob_put(st, text, sizeof(text), ht, &err), &err);
    CHECK_OK(store_blob_put(st, noise, sizeof(noise), hn, &err), &err);
    store_close(st);
    buf_init(&out, 1 << 24);
    /* 1. a flipped byte in a raw blob */
    tdb_exec(path, "UPDATE blobs SET data = zeroblob(1) || substr(data, 2) WHERE codec = 0 "
                   "AND size = 2048");
    st = tdb_open(path, NULL);
    CHECK(store_blob_get(st, hn, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    CHECK_MSG(strstr(err.msg, "do not match its hash"), "%s", err.msg);
    CHECK_EQ_INT(out.len, 0);
    store_close(st);
    /* 2. a raw blob whose size column lies */
    tdb_exec(path, "UPDATE blobs SET size = 2047 WHERE codec = 0 AND size = 2048");
    st = tdb_open(path, NULL);
    CHECK(store_blob_get(st, hn, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    store_close(st);
    /* 3. a zip bomb: the stored size is smaller than what the frame expands to */
    tdb_exec(path, "UPDATE blobs SET size = 100 WHERE codec = 1");
    st = tdb_open(path, NULL);
    CHECK(store_blob_get(st, ht, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    CHECK_MSG(strstr(err.msg, "does not declare the stored size"), "%s", err.msg);
    CHECK(out.cap < 65536); /* never allocated the frame's claimed size */
    store_close(st);
    /* 4. a damaged zstd frame with the right size */
    tdb_exec(path, "UPDATE blobs SET size = 65536, data = substr(data, 1, 12) || "
                   "zeroblob(8) || substr(data, 21) WHERE codec = 1");
    st = tdb_open(path, NULL);
    CHECK(store_blob_get(st, ht, &out, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    store_close(st);
    buf_release(&out);
}

/* ---- sessions --------------------------------------------------------------------------- */

TEST(session_lifecycle)
{
    struct store *st = tdb_open(test_path("s.db"), NULL);
    struct store_session s, g, *list;
    struct store_overlay *ov;
    char label[STORE_LABEL_MAX + 2];
    size_t n;
    int64_t count;
    struct err err;

    new_session(st, &s);
    CHECK_EQ_INT(strlen(s.id), 8);
    CHECK_EQ_INT(strspn(s.id, "0123456789abcdef"), 8);
    CHECK_EQ_INT(s.head, 0);
    CHECK_EQ_INT(s.state, STORE_SESSION_OPEN);
    CHECK_EQ_INT(s.owner_pid, getpid());
    CHECK_EQ_STR(s.client, "test-client");
    CHECK_EQ_INT(s.parent_checkpoint, -1);
    memset(label, 'l', sizeof(label));
    label[STORE_LABEL_MAX] = '\0';
    CHECK_OK(store_session_set_label(st, s.id, label, &err), &err);
    label[STORE_LABEL_MAX] = 'l';
    label[STORE_LABEL_MAX + 1] = '\0';
    CHECK(store_session_set_label(st, s.id, label, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK_OK(store_session_get(st, s.id, &g, &err), &err);
    CHECK_EQ_INT(strlen(g.label), STORE_LABEL_MAX);
    store_session_release(&g);
    CHECK_OK(store_session_set_label(st, s.id, "", &err), &err);
    CHECK_OK(store_session_get(st, s.id, &g, &err), &err);
    CHECK(g.label == NULL);
    store_session_release(&g);
    CHECK(store_session_get(st, "00000000", &g, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(store_session_get(st, "'; DROP TABLE sessions; --", &g, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK_OK(store_overlay_set(st, s.id, "lib", "/opt/lib", &err), &err);
    CHECK_OK(store_overlay_set(st, s.id, "lib", "/opt/lib2", &err), &err);
    CHECK_OK(store_overlay_set(st, s.id, "a", "/a", &err), &err);
    CHECK_OK(store_overlay_list(st, s.id, &ov, &n, &err), &err);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(ov[0].key, "a");
    CHECK_EQ_STR(ov[1].host_path, "/opt/lib2");
    store_overlay_list_free(ov, n);
    CHECK(store_overlay_set(st, "0badf00d", "k", "/x", &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK_OK(store_chat_append(st, s.id, "hi", "hello", &err), &err);
    CHECK_OK(store_chat_append(st, s.id, "again", "ok", &err), &err);
    CHECK_OK(store_session_count_open(st, &count, &err), &err);
    CHECK_EQ_INT(count, 1);
    CHECK_OK(store_session_heartbeat(st, getpid(), proc_start_time(getpid()), NULL, &err), &err);
    CHECK_OK(store_session_touch(st, s.id, &err), &err);
    CHECK_OK(store_session_close(st, s.id, &err), &err);
    CHECK_OK(store_session_list(st, 0, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 0);
    store_session_list_free(list, n);
    CHECK_OK(store_session_list(st, 1, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(list[0].state, STORE_SESSION_CLOSED);
    CHECK(list[0].closed_ms > 0);
    CHECK_EQ_INT(list[0].owner_pid, 0);
    store_session_list_free(list, n);
    CHECK(store_session_claim(st, s.id, getpid(), 1, NULL, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    {
        /* The idle reaper's conditional close: a held session with a fresh heartbeat is
         * not taken by idleness alone; a stale heartbeat, or naming its holder, is; and
         * a session is closed only once. */
        struct store_session r2;
        struct store_idle *idle = NULL;
        size_t n_idle = 0;
        int64_t now = time_now_ms(), start = proc_start_time(getpid());
        int held = 0, won = 1;
        struct store_reap fresh = {NULL, now + 1000000, 0, 0, 0, NULL, NULL};
        struct store_reap stale = {NULL, now + 1000000, now + 1000000, 0, 0, NULL, NULL};
        struct store_reap named = {NULL, 0, 0, getpid(), start, NULL, NULL};

        new_session(st, &r2);
        CHECK_OK(store_session_heartbeat(st, getpid(), start, &held, &err), &err);
        CHECK_EQ_INT(held, 1);
        CHECK_OK(store_session_set_active(st, r2.id, getpid(), start, now - 5000, &err), &err);
        CHECK_OK(store_session_idle_list(st, now - 1000, &idle, &n_idle, &err), &err);
        CHECK_EQ_INT(n_idle, 1);
        CHECK_EQ_STR(idle[0].id, r2.id);
        CHECK_EQ_INT(idle[0].last_active_ms, now - 5000);
        mem_free(idle);
        fresh.id = stale.id = named.id = r2.id;
        CHECK_OK(store_session_reap(st, &fresh, &won, &err), &err);
        CHECK_EQ_INT(won, 0);
        CHECK_OK(store_session_reap(st, &stale, &won, &err), &err);
        CHECK_EQ_INT(won, 1);
        CHECK_OK(store_session_reap(st, &stale, &won, &err), &err);
        CHECK_EQ_INT(won, 0);
        CHECK_OK(store_session_reap(st, &named, &won, &err), &err);
        CHECK_EQ_INT(won, 0);
        CHECK_OK(store_session_get(st, r2.id, &g, &err), &err);
        CHECK_EQ_INT(g.state, STORE_SESSION_CLOSED);
        CHECK_EQ_INT(g.owner_pid, 0);
        store_session_release(&g);
        store_session_release(&r2);
        /* Our own session, named: closed whatever the DB says of its idleness. */
        new_session(st, &r2);
        named.id = r2.id;
        CHECK_OK(store_session_reap(st, &named, &won, &err), &err);
        CHECK_EQ_INT(won, 1);
        store_session_release(&r2);
    }
    store_session_release(&s);
    store_close(st);
    CHECK_EQ_INT(tdb_int(test_path("s.db"), "SELECT max(seq) FROM session_chat"), 1);
}

TEST(session_claim_live_and_dead_owner)
{
    struct store *st = tdb_open(test_path("c.db"), NULL);
    struct store_session s, g;
    pid_t child, holder = 0;
    int64_t child_start, me_start = proc_start_time(getpid());
    struct err err;
    int status;

    new_session(st, &s); /* owned by this (live) process */
    child = fork();
    if (child == 0) {
        _exit(0);
    }
    child_start = proc_start_time(child); /* may be -1 if it already exited */
    CHECK(store_session_claim(st, s.id, child, child_start, &holder, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    CHECK_EQ_INT(holder, getpid());
    CHECK_MSG(strstr(err.msg, "held by another drun process"), "%s", err.msg);
    /* our own claim again is fine */
    CHECK_OK(store_session_claim(st, s.id, getpid(), me_start, NULL, &err), &err);
    /* hand it to the child, let the child die, and take it over */
    CHECK_OK(store_session_release_claim(st, s.id, getpid(), me_start, &err), &err);
    CHECK_OK(store_session_claim(st, s.id, child, child_start + 1000, NULL, &err), &err);
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(!proc_alive(child, child_start + 1000));
    CHECK_OK(store_session_claim(st, s.id, getpid(), me_start, &holder, &err), &err);
    CHECK_OK(store_session_get(st, s.id, &g, &err), &err);
    CHECK_EQ_INT(g.owner_pid, getpid());
    CHECK_EQ_INT(g.owner_start, me_start);
    store_session_release(&g);
    /* releasing someone else's claim is a no-op */
    CHECK_OK(store_session_release_claim(st, s.id, 1, 1, &err), &err);
    CHECK_OK(store_session_get(st, s.id, &g, &err), &err);
    CHECK_EQ_INT(g.owner_pid, getpid());
    store_session_release(&g);
    store_session_release(&s);
    store_close(st);
}

/* ---- checkpoints ------------------------------------------------------------------------ */

TEST(checkpoint_history_and_discard)
{
    struct store *st = tdb_open(test_path("h.db"), NULL);
    struct store_session s, g;
    struct store_checkpoint cp, *list;
    struct store_change_row *rows;
    struct store_step *steps;
    struct store_change bad[2] = {{"a.txt", STORE_ADDED}, {"a.txt", STORE_REMOVED}};
    size_t n;
    int64_t id;
    struct err err;

    new_session(st, &s);
    CHECK_EQ_INT(add_checkpoint(st, s.id, "a.txt", 1), 1);
    CHECK_EQ_INT(add_checkpoint(st, s.id, "b.txt", 2), 2);
    CHECK_EQ_INT(add_checkpoint(st, s.id, "c.txt", 3), 3);
    CHECK_OK(store_session_get(st, s.id, &g, &err), &err);
    CHECK_EQ_INT(g.head, 3);
    store_session_release(&g);
    /* roll back to 1 and push: 2 and 3 are discarded, the new one is 4 with parent 1 */
    CHECK_OK(store_session_set_head(st, s.id, 1, &err), &err);
    CHECK(store_session_set_head(st, s.id, 42, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK_EQ_INT(add_checkpoint(st, s.id, "d.txt", 4), 4);
    CHECK_OK(store_checkpoint_get(st, s.id, 4, &cp, &err), &err);
    CHECK_EQ_INT(cp.parent, 1);
    CHECK_EQ_STR(cp.command, "make");
    CHECK(cp.has_exit_code && cp.exit_code == 0);
    store_checkpoint_release(&cp);
    CHECK_OK(store_checkpoint_get(st, s.id, 2, &cp, &err), &err);
    CHECK_EQ_INT(cp.status, STORE_CP_DISCARDED);
    store_checkpoint_release(&cp);
    CHECK_OK(store_checkpoint_list(st, s.id, 0, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 3);
    CHECK(list[0].id == 0 && list[1].id == 1 && list[2].id == 4);
    store_checkpoint_list_free(list, n);
    CHECK_OK(store_checkpoint_list(st, s.id, 1, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 5);
    store_checkpoint_list_free(list, n);
    /* labels */
    CHECK_OK(store_checkpoint_set_label(st, s.id, 4, "good", &err), &err);
    CHECK_OK(store_checkpoint_find_label(st, s.id, "good", &id, &err), &err);
    CHECK_EQ_INT(id, 4);
    CHECK(store_checkpoint_find_label(st, s.id, "nope", &id, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(store_checkpoint_set_label(st, s.id, 99, "x", &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    /* drop 1: ids do not move */
    CHECK_OK(store_checkpoint_set_status(st, s.id, 1, 1, STORE_CP_DROPPED, &err), &err);
    CHECK(store_checkpoint_set_status(st, s.id, 1, 1, STORE_CP_LIVE, &err) < 0);
    CHECK_OK(store_checkpoint_get(st, s.id, 4, &cp, &err), &err);
    CHECK_EQ_INT(cp.id, 4);
    /* rewrite 4 to point at 0 with two change rows */
    cp.parent = 0;
    {
        struct store_change two[2] = {{"a.txt", STORE_ADDED}, {"d.txt", STORE_ADDED}};
        CHECK_OK(store_checkpoint_rewrite(st, &cp, two, 2, &err), &err);
    }
    store_checkpoint_release(&cp);
    CHECK_OK(store_change_list(st, s.id, 4, &rows, &n, &err), &err);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(rows[0].path, "a.txt");
    CHECK_EQ_INT(rows[1].kind, 'A');
    store_change_list_free(rows, n);
    /* steps */
    CHECK_OK(store_step_append(st, s.id, 4, "session_read_file", "look", &err), &err);
    CHECK_OK(store_step_append(st, s.id, 4, "session_diff", NULL, &err), &err);
    CHECK_OK(store_step_list(st, s.id, 4, &steps, &n, &err), &err);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(steps[1].tool, "session_diff");
    CHECK_EQ_STR(steps[1].description, "");
    store_step_list_free(steps, n);
    CHECK(store_step_append(st, s.id, 77, "x", "y", &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    /* bad input writes nothing */
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
    CHECK_OK(store_blob_put(st, "", 0, cp.manifest_hash, &err), &err);
    CHECK(store_checkpoint_append(st, &cp, bad, 2, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK_MSG(strstr(err.msg, "'a.txt' is listed twice"), "%s", err.msg);
    bad[0].kind = 'X';
    CHECK(store_checkpoint_append(st, &cp, bad, 1, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    cp.manifest_hash[0] ^= 0xff; /* a manifest blob nobody stored */
    CHECK(store_checkpoint_append(st, &cp, NULL, 0, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK_OK(store_checkpoint_list(st, s.id, 1, &list, &n, &err), &err);
    CHECK_EQ_INT(n, 5);
    store_checkpoint_list_free(list, n);
    CHECK_OK(store_session_get(st, s.id, &g, &err), &err);
    CHECK_EQ_INT(g.head, 4);
    store_session_release(&g);
    snprintf(cp.session_id, sizeof(cp.session_id), "ffffffff");
    CHECK(store_checkpoint_append(st, &cp, NULL, 0, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    store_session_release(&s);
    store_close(st);
}

TEST(bracket_rollback_keeps_nothing)
{
    const char *path = test_path("br.db");
    struct store *st = tdb_open(path, NULL);
    struct store_session s;
    struct err err;
    int64_t blobs;

    new_session(st, &s);
    store_close(st);
    blobs = tdb_int(path, "SELECT count(*) FROM blobs");
    st = tdb_open(path, NULL);
    CHECK_OK(store_begin(st, &err), &err);
    CHECK(store_begin(st, &err) < 0); /* brackets do not nest */
    add_checkpoint(st, s.id, "x", 9);
    store_rollback(st);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM checkpoints"), 1);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), blobs);
    CHECK_EQ_INT(tdb_int(path, "SELECT head FROM sessions"), 0);
    /* and a committed bracket keeps all of it */
    st = tdb_open(path, NULL);
    CHECK_OK(store_begin(st, &err), &err);
    add_checkpoint(st, s.id, "x", 9);
    CHECK_OK(store_commit(st, &err), &err);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM checkpoints"), 2);
    store_session_release(&s);
}

/* ---- audit ------------------------------------------------------------------------------ */

static void
audit_rows(struct store *st, int n)
{
    static char big[8192];
    struct err err;

    fill_text(big, sizeof(big) - 1, 11);
    for (int i = 0; i < n; i++) {
        struct store_audit a = {0};
        char summary[64];
        snprintf(summary, sizeof(summary), "call %d", i);
        a.pid = getpid();
        a.kind = "call";
        a.client_name = "claude-code";
        a.tool = i % 2 ? "session_bash" : "session_write_files";
        a.summary = summary;
        a.outcome = i == 2 ? "error" : "ok";
        a.error_code = i == 2 ? "command_failed" : NULL;
        a.checkpoint_id = i % 3 ? i : -1;
        a.args = i == 1 ? big : "{\"command\":\"ls\"}";
        a.args_len = strlen(a.args);
        CHECK_OK(store_audit_append(st, &a, &err), &err);
        CHECK_EQ_INT(a.id, i + 1);
    }
}

static void
expect_verify(const char *path, int ok_want, int64_t bad_want, const char *msg_part)
{
    struct store *st = tdb_open(path, NULL);
    int ok;
    int64_t bad, rows;
    struct err err;

    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK_MSG(ok == ok_want, "verify ok=%d want %d: %s", ok, ok_want, err.msg);
    CHECK_EQ_INT(bad, bad_want);
    if (msg_part != NULL) {
        CHECK_MSG(strstr(err.msg, msg_part), "%s", err.msg);
    }
    store_close(st);
}

TEST(audit_chain_appends_and_verifies)
{
    const char *path = test_path("a.db");
    struct store *st = tdb_open(path, NULL);
    struct store_audit_entry *e;
    struct store_audit a = {0};
    size_t n;
    int ok;
    int64_t bad, rows;
    struct err err;

    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK(ok && rows == 0);
    audit_rows(st, 6);
    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK(ok);
    CHECK_EQ_INT(rows, 6);
    CHECK_OK(store_audit_tail(st, 5, &e, &n, &err), &err);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(e[0].id, 2);
    CHECK_EQ_INT(e[0].args_len, 8191); /* the big one, stored compressed */
    CHECK_EQ_INT(strlen(e[0].args), 8191);
    CHECK_EQ_STR(e[1].error_code, "command_failed");
    CHECK_EQ_STR(e[4].args, "{\"command\":\"ls\"}");
    CHECK_EQ_INT(e[2].checkpoint_id, -1);
    store_audit_entry_list_free(e, n);
    CHECK(store_audit_tail(st, 0, &e, &n, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(store_audit_tail(st, STORE_AUDIT_TAIL_MAX + 1, &e, &n, &err) < 0);
    a.kind = "call";
    a.outcome = "ok"; /* no tool */
    CHECK(store_audit_append(st, &a, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT args_codec FROM audit WHERE id = 2"), 1);
    CHECK(tdb_int(path, "SELECT length(args) FROM audit WHERE id = 2") < 4000);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM audit_log WHERE time LIKE '20%Z'"), 6);
}

TEST(audit_detects_edit)
{
    const char *path = test_path("e.db");
    struct store *st = tdb_open(path, NULL);

    audit_rows(st, 5);
    store_close(st);
    tdb_exec(path, "UPDATE audit SET outcome = 'ok' WHERE id = 3");
    expect_verify(path, 0, 3, "was edited");
}

TEST(audit_detects_deleted_row)
{
    const char *path = test_path("d.db");
    struct store *st = tdb_open(path, NULL);

    audit_rows(st, 5);
    store_close(st);
    tdb_exec(path, "DELETE FROM audit WHERE id = 3");
    expect_verify(path, 0, 4, "prev_hash does not match");
}

TEST(audit_detects_swapped_rows)
{
    const char *path = test_path("s.db");
    struct store *st = tdb_open(path, NULL);

    audit_rows(st, 5);
    store_close(st);
    tdb_exec(path, "UPDATE audit SET id = -2 WHERE id = 2; UPDATE audit SET id = 2 WHERE id = 3;"
                   "UPDATE audit SET id = 3 WHERE id = -2");
    expect_verify(path, 0, 2, NULL);
}

TEST(audit_detects_cut_tail)
{
    const char *path = test_path("t.db");
    struct store *st = tdb_open(path, NULL);

    audit_rows(st, 5);
    store_close(st);
    tdb_exec(path, "DELETE FROM audit WHERE id >= 4");
    expect_verify(path, 0, 4, "removed from the end");
}

/* ---- gc --------------------------------------------------------------------------------- */

TEST(gc_marks_and_sweeps)
{
    const char *path = test_path("g.db");
    struct store *st = tdb_open(path, NULL);
    struct store_session s;
    struct store_gc_opts opts = {0, -1, -1};
    struct store_gc_result res;
    uint8_t orphan[HASH_LEN], kept[HASH_LEN];
    struct buf out;
    struct err err;
    int exists;
    int64_t before;

    new_session(st, &s);
    add_checkpoint(st, s.id, "a", 1);
    add_checkpoint(st, s.id, "b", 2);
    CHECK_OK(store_blob_put(st, "orphan bytes", 12, orphan, &err), &err);
    store_close(st);
    before = tdb_int(path, "SELECT count(*) FROM blobs");
    st = tdb_open(path, NULL);
    CHECK(store_gc(st, &opts, NULL, NULL, &res, &err) < 0); /* no manifest reader */
    CHECK_EQ_INT(err.code, ERR_INVAL);
    opts.dry_run = 1;
    CHECK_OK(store_gc(st, &opts, test_refs, NULL, &res, &err), &err);
    CHECK_EQ_INT(res.blobs_deleted, 1);
    CHECK_EQ_INT(res.bytes_freed, 12);
    CHECK_OK(store_blob_has(st, orphan, &exists, NULL, &err), &err);
    CHECK(exists);
    opts.dry_run = 0;
    CHECK_OK(store_gc(st, &opts, test_refs, NULL, &res, &err), &err);
    CHECK_EQ_INT(res.blobs_deleted, 1);
    CHECK_OK(store_blob_has(st, orphan, &exists, NULL, &err), &err);
    CHECK(!exists);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), before - 1);
    /* hide checkpoint 2 (roll back + push), then gc hidden rows of any age */
    st = tdb_open(path, NULL);
    CHECK_OK(store_session_set_head(st, s.id, 1, &err), &err);
    add_checkpoint(st, s.id, "c", 3);
    opts.discarded_older_than_ms = 0;
    CHECK_OK(store_gc(st, &opts, test_refs, NULL, &res, &err), &err);
    CHECK_EQ_INT(res.checkpoints_deleted, 1);
    CHECK_EQ_INT(res.blobs_deleted, 2); /* checkpoint 2's manifest and its file */
    /* everything still referenced reads back */
    {
        struct store_checkpoint cp;
        buf_init(&out, 1 << 20);
        CHECK_OK(store_checkpoint_get(st, s.id, 3, &cp, &err), &err);
        CHECK_OK(store_blob_get(st, cp.manifest_hash, &out, &err), &err);
        memcpy(kept, out.data, HASH_LEN);
        buf_reset(&out);
        CHECK_OK(store_blob_get(st, kept, &out, &err), &err);
        store_checkpoint_release(&cp);
        buf_release(&out);
    }
    CHECK(store_checkpoint_get(st, s.id, 2, &(struct store_checkpoint){0}, &err) < 0);
    /* closed sessions past their age go with all their rows */
    CHECK_OK(store_session_close(st, s.id, &err), &err);
    opts.closed_older_than_ms = 0;
    CHECK_OK(store_gc(st, &opts, test_refs, NULL, &res, &err), &err);
    CHECK_EQ_INT(res.sessions_deleted, 1);
    store_close(st);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM blobs"), 0);
    CHECK_EQ_INT(tdb_int(path, "SELECT count(*) FROM checkpoint_changes"), 0);
    check_integrity(path);
    store_session_release(&s);
}

TEST(stats_and_check)
{
    const char *path = test_path("st.db");
    struct store *st = tdb_open(path, NULL);
    struct store_session s;
    struct store_stats stats;
    struct err err;
    int ok;

    new_session(st, &s);
    add_checkpoint(st, s.id, "a", 1);
    audit_rows(st, 2);
    CHECK_OK(store_stats(st, &stats, &err), &err);
    CHECK_EQ_INT(stats.sessions_open, 1);
    CHECK_EQ_INT(stats.checkpoints, 2);
    CHECK_EQ_INT(stats.blobs, 3);
    CHECK_EQ_INT(stats.audit_rows, 2);
    CHECK_EQ_INT(stats.schema_version, store_schema_version());
    CHECK(stats.file_bytes > 0);
    CHECK(stats.blob_bytes_logical == 2048 + 32);
    CHECK_OK(store_check(st, &ok, &err), &err);
    CHECK(ok);
    store_close(st);
    /* a dangling reference is reported by check */
    tdb_exec(path, "PRAGMA foreign_keys = OFF; DELETE FROM blobs WHERE size = 32");
    st = tdb_open(path, NULL);
    CHECK_OK(store_check(st, &ok, &err), &err);
    CHECK(!ok);
    CHECK_MSG(strstr(err.msg, "broken reference") && strstr(err.msg, "checkpoints"), "%s", err.msg);
    store_close(st);
    store_session_release(&s);
}

/* ---- faults ----------------------------------------------------------------------------- */

TEST(busy_database_is_reported_and_nothing_half_written)
{
    const char *path = test_path("busy.db");
    struct store_opts opts = {0};
    struct store *st = tdb_open(path, NULL);
    int go[2], done[2];
    pid_t child;
    char c;
    uint8_t h[HASH_LEN];
    struct err err;
    int exists, status;

    store_close(st);
    CHECK(pipe(go) == 0 && pipe(done) == 0);
    child = fork();
    if (child == 0) {
        struct store *cs = NULL;
        if (store_open(path, NULL, &cs, &err) < 0 || store_begin(cs, &err) < 0) {
            _exit(1);
        }
        store_blob_put(cs, "held", 4, h, &err);
        CHECK(write(go[1], "g", 1) == 1);
        CHECK(read(done[0], &c, 1) == 1);
        store_rollback(cs);
        store_close(cs);
        _exit(0);
    }
    CHECK(read(go[0], &c, 1) == 1);
    opts.busy_timeout_ms = 50;
    st = tdb_open(path, &opts);
    CHECK(store_blob_put(st, "mine", 4, h, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    CHECK_MSG(strstr(err.msg, "is busy") && strstr(err.msg, "50 ms"), "%s", err.msg);
    CHECK(store_begin(st, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    CHECK(write(done[1], "d", 1) == 1);
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(store_blob_has(st, h, &exists, NULL, &err), &err);
    CHECK(!exists);
    CHECK_OK(store_blob_put(st, "mine", 4, h, &err), &err); /* and now it works */
    store_close(st);
    check_integrity(path);
}

TEST(disk_full_is_a_clear_error)
{
    const char *path = test_path("full.db");
    int fds[2];
    pid_t child;
    char msg[512] = {0};
    ssize_t n;
    int status;

    store_close(tdb_open(path, NULL));
    CHECK(pipe(fds) == 0);
    child = fork();
    if (child == 0) {
        struct rlimit rl = {256 * 1024, 256 * 1024};
        struct store *st = NULL;
        struct err err;
        static char data[16384];
        uint8_t h[HASH_LEN];
        int i;

        signal(SIGXFSZ, SIG_IGN);
        CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
        if (store_open(path, NULL, &st, &err) < 0) {
            dprintf(fds[1], "open %d %s", err.code, err.msg);
            _exit(0);
        }
        for (i = 0; i < 10000; i++) {
            fill_random(data, sizeof(data));
            if (store_blob_put(st, data, sizeof(data), h, &err) < 0) {
                dprintf(fds[1], "put %d %s", err.code, err.msg);
                break;
            }
        }
        store_close(st);
        _exit(i < 10000 ? 0 : 2);
    }
    close(fds[1]);
    n = read(fds[0], msg, sizeof(msg) - 1);
    CHECK(waitpid(child, &status, 0) == child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    CHECK(n > 0);
    msg[n] = '\0';
    fprintf(stderr, "    disk full: %s\n", msg);
    CHECK_MSG(strncmp(msg, "put 9 ", 6) == 0 || strncmp(msg, "put 6 ", 6) == 0, "%s", msg);
    CHECK_MSG(strstr(msg, "full.db") && (strstr(msg, "File too large") || strstr(msg, "full")),
              "%s", msg);
    check_integrity(path);
}

TEST(sigkill_never_loses_a_committed_checkpoint)
{
    const char *path = test_path("kill.db");
    struct store *st = tdb_open(path, NULL);
    struct store_session s;
    unsigned seed = (unsigned)time_mono_us();
    int total_reported = 0;

    new_session(st, &s);
    CHECK(store_session_release_claim(st, s.id, getpid(), proc_start_time(getpid()),
                                      &(struct err){0}) == 0);
    store_close(st);
    for (int round = 0; round < 24; round++) {
        int fds[2], status;
        pid_t child;
        int64_t ids[4096];
        size_t n_ids = 0, got = 0;
        char buf[8192];
        int64_t spin, t0;

        CHECK(pipe(fds) == 0);
        child = fork();
        if (child == 0) {
            struct store *cs = NULL;
            struct err err;
            close(fds[0]);
            if (store_open(path, NULL, &cs, &err) < 0 ||
                store_session_claim(cs, s.id, getpid(), proc_start_time(getpid()), NULL, &err) <
                    0) {
                dprintf(2, "child: %s\n", err.msg);
                _exit(1);
            }
            for (unsigned i = 0;; i++) {
                int64_t id;
                if (store_begin(cs, &err) < 0) {
                    _exit(1);
                }
                id = add_checkpoint(cs, s.id, "loop.txt", i * 7919u + (unsigned)round);
                if (store_commit(cs, &err) < 0) {
                    _exit(1);
                }
                if (write(fds[1], &id, sizeof(id)) != sizeof(id)) {
                    _exit(1);
                }
            }
        }
        close(fds[1]);
        /* Wait for one commit, then kill after a random amount of busy work. */
        CHECK(read(fds[0], &ids[n_ids++], sizeof(int64_t)) == sizeof(int64_t));
        seed = seed * 1103515245u + 12345u;
        spin = (int64_t)(seed >> 8) % 30000;
        t0 = time_mono_us();
        while (time_mono_us() - t0 < spin) {
        }
        kill(child, SIGKILL);
        CHECK(waitpid(child, &status, 0) == child);
        for (;;) {
            ssize_t r = read(fds[0], buf + got, sizeof(buf) - got);
            if (r <= 0) {
                break;
            }
            got += (size_t)r;
            while (got >= sizeof(int64_t) && n_ids < 4096) {
                memcpy(&ids[n_ids++], buf, sizeof(int64_t));
                memmove(buf, buf + sizeof(int64_t), got - sizeof(int64_t));
                got -= sizeof(int64_t);
            }
        }
        close(fds[0]);
        total_reported += (int)n_ids;
        st = tdb_open(path, NULL);
        for (size_t i = 0; i < n_ids; i++) {
            struct store_checkpoint cp;
            struct err err;
            CHECK_OK(store_checkpoint_get(st, s.id, ids[i], &cp, &err), &err);
            store_checkpoint_release(&cp);
        }
        store_close(st);
        check_integrity(path);
    }
    CHECK(total_reported >= 24);
    fprintf(stderr, "    %d committed checkpoints reported over 24 kills, all present\n",
            total_reported);
    store_session_release(&s);
}

/* One pass over the public API; returns 0, or -1 with err from the first failure. */
static int
scenario(const char *path, struct err *err)
{
    struct store_opts opts = {0};
    struct store *st = NULL;
    struct store_session_new req = {0};
    struct store_session s = {0};
    struct store_checkpoint cp = {0}, *list = NULL;
    struct store_change ch = {"f.txt", STORE_ADDED};
    struct store_audit a = {0};
    struct store_audit_entry *e = NULL;
    struct store_gc_opts gopts = {0, 0, 0};
    struct store_gc_result res;
    struct store_stats stats;
    static char text[8192];
    uint8_t fh[HASH_LEN];
    struct buf out;
    size_t n;
    int ok, rc = -1;
    int64_t bad, rows;

    opts.synchronous_normal = 1;
    buf_init(&out, 1 << 20);
    fill_text(text, sizeof(text), 2);
    if (store_open(path, &opts, &st, err) < 0 ||
        store_blob_put(st, text, sizeof(text), fh, err) < 0 ||
        store_blob_put(st, fh, HASH_LEN, cp.manifest_hash, err) < 0) {
        goto out;
    }
    req.parent_checkpoint = -1;
    req.manifest_hash = cp.manifest_hash;
    req.owner_pid = getpid();
    req.owner_start = 1;
    req.label = "sweep";
    if (store_session_create(st, &req, &s, err) < 0) {
        goto out;
    }
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
    cp.tool = "session_bash";
    cp.command = "true";
    a.kind = "call";
    a.tool = "session_bash";
    a.summary = "true";
    a.outcome = "ok";
    a.args = text;
    a.args_len = sizeof(text);
    a.checkpoint_id = -1;
    if (store_begin(st, err) < 0 || store_checkpoint_append(st, &cp, &ch, 1, err) < 0 ||
        store_audit_append(st, &a, err) < 0 || store_commit(st, err) < 0) {
        store_rollback(st);
        goto out;
    }
    if (store_blob_get(st, fh, &out, err) < 0 ||
        store_checkpoint_list(st, s.id, 1, &list, &n, err) < 0 ||
        store_audit_verify(st, &ok, &bad, &rows, err) < 0 ||
        store_audit_tail(st, 10, &e, &n, err) < 0 ||
        store_session_claim(st, s.id, getpid(), 2, NULL, err) < 0 ||
        store_gc(st, &gopts, test_refs, NULL, &res, err) < 0 || store_stats(st, &stats, err) < 0) {
        goto out;
    }
    rc = 0;
out:
    store_audit_entry_list_free(e, e ? n : 0);
    store_checkpoint_list_free(list, list ? n : 0);
    store_session_release(&s);
    buf_release(&out);
    store_close(st);
    return rc;
}

static int
sweep_run(void *path, struct err *err)
{
    return scenario(path, err);
}

static void
sweep_reset(void *path)
{
    test_rm_db(path);
}

/* Whatever did get written is a consistent database with an intact audit chain. */
static void
sweep_after(void *path, long n)
{
    struct store *st = NULL;
    struct err err;

    if (access(path, F_OK) == 0 && store_open(path, NULL, &st, &err) == 0) {
        int ok = 0;
        int64_t bad, rows;
        CHECK_OK(store_check(st, &ok, &err), &err);
        CHECK_MSG(ok, "after failure %ld: %s", n, err.msg);
        CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
        CHECK_MSG(ok, "audit after failure %ld: %s", n, err.msg);
        store_close(st);
    }
}

TEST(allocation_failure_sweep)
{
    char path[8192];
    struct test_sweep sw = {sweep_run, sweep_reset, sweep_after, path, 400, 7, 20000, 51};
    int failures;

    CHECK_FMT(path, sizeof(path), "%s", test_path("oom.db"));
    tdb_route_sqlite_alloc();
    failures = test_alloc_sweep(&sw, NULL);
    fprintf(stderr, "    %d injected failures, all ERR_NOMEM\n", failures);
}

TESTS(blob_delta_chain_roundtrip_and_gc, open_creates_private_wal_db,
      open_refuses_other_sqlite_files, open_reports_garbage_as_corrupt,
      open_reports_truncated_as_corrupt, open_refuses_newer_schema, open_without_migrating,
      schema_file_matches_migrations, blob_roundtrip_compress_and_dedup, blob_cap_at_and_past_edge,
      blob_damage_is_detected, session_lifecycle, session_claim_live_and_dead_owner,
      checkpoint_history_and_discard, bracket_rollback_keeps_nothing,
      audit_chain_appends_and_verifies, audit_detects_edit, audit_detects_deleted_row,
      audit_detects_swapped_rows, audit_detects_cut_tail, gc_marks_and_sweeps, stats_and_check,
      busy_database_is_reported_and_nothing_half_written, disk_full_is_a_clear_error,
      sigkill_never_loses_a_committed_checkpoint, allocation_failure_sweep)
