/*
 * test_workspace_manifest.c - manifests: set/remove/get, encode/decode (including
 * 10,000 mutated encodings), diff and the gc refs callback.
 */
#include "test.h"

#include "util/buf.h"
#include "util/hash.h"
#include "util/mem.h"
#include "workspace/workspace.h"

static void
hash_of(const char *s, uint8_t h[HASH_LEN])
{
    hash_sha256(s, strlen(s), h);
}

static struct ws_manifest *
sample(void)
{
    struct ws_manifest *m;
    struct err err;
    uint8_t h[HASH_LEN];

    CHECK_OK(ws_manifest_new(&m, &err), &err);
    hash_of("main", h);
    CHECK_OK(ws_manifest_set(m, "src/main.c", WS_FILE, 4, h, &err), &err);
    hash_of("run", h);
    CHECK_OK(ws_manifest_set(m, "run.sh", WS_EXEC, 3, h, &err), &err);
    hash_of("src/main.c", h);
    CHECK_OK(ws_manifest_set(m, "link", WS_SYMLINK, 10, h, &err), &err);
    CHECK_OK(ws_manifest_set(m, "empty", WS_DIR, 0, NULL, &err), &err);
    hash_of("a", h);
    CHECK_OK(ws_manifest_set(m, "a.txt", WS_FILE, 1, h, &err), &err);
    CHECK_OK(ws_manifest_set(m, "a/b", WS_FILE, 1, h, &err), &err);
    return m;
}

TEST(set_get_sorted)
{
    struct ws_manifest *m = sample();
    const char *order[] = {"a.txt", "a/b", "empty", "link", "run.sh", "src/main.c"};

    CHECK_EQ_INT(ws_manifest_count(m), 6);
    for (size_t i = 0; i < 6; i++) {
        CHECK_EQ_STR(ws_manifest_at(m, i)->path, order[i]);
    }
    CHECK(ws_manifest_at(m, 6) == NULL);
    CHECK_EQ_INT(ws_manifest_get(m, "run.sh")->type, WS_EXEC);
    CHECK(ws_manifest_get(m, "src") == NULL);
    CHECK(ws_manifest_get(m, "nope") == NULL);
    CHECK_EQ_INT(ws_manifest_bytes(m), 4 + 3 + 1 + 1);
    CHECK_EQ_INT(ws_manifest_files(m), 5);
    ws_manifest_free(m);
    ws_manifest_free(NULL);
}

TEST(set_replaces_and_refuses_conflicts)
{
    struct ws_manifest *m = sample();
    struct err err;
    uint8_t h[HASH_LEN];

    hash_of("new", h);
    CHECK_OK(ws_manifest_set(m, "a.txt", WS_EXEC, 3, h, &err), &err);
    CHECK_EQ_INT(ws_manifest_count(m), 6);
    CHECK_EQ_INT(ws_manifest_get(m, "a.txt")->type, WS_EXEC);
    /* file over an existing directory, and a file below an existing file */
    CHECK(ws_manifest_set(m, "src", WS_FILE, 1, h, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(strstr(err.msg, "'src'") && strstr(err.msg, "'src/main.c'"));
    CHECK(ws_manifest_set(m, "run.sh/x", WS_FILE, 1, h, &err) == -1);
    CHECK(strstr(err.msg, "'run.sh/x'") &&
          strstr(err.msg, "'run.sh' is a executable file") == NULL);
    CHECK(strstr(err.msg, "'run.sh'") != NULL);
    CHECK(ws_manifest_set(m, "link/x", WS_DIR, 0, NULL, &err) == -1);
    CHECK_EQ_INT(ws_manifest_count(m), 6); /* unchanged */
    /* a dir over a non-empty dir is a no-op; an entry below an empty dir replaces it */
    CHECK_OK(ws_manifest_set(m, "src", WS_DIR, 0, NULL, &err), &err);
    CHECK(ws_manifest_get(m, "src") == NULL);
    CHECK_OK(ws_manifest_set(m, "empty/deep/f", WS_FILE, 1, h, &err), &err);
    CHECK(ws_manifest_get(m, "empty") == NULL);
    CHECK(ws_manifest_get(m, "empty/deep/f") != NULL);
    /* bad keys and types */
    CHECK(ws_manifest_set(m, "./x", WS_FILE, 1, h, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(ws_manifest_set(m, "x", 9, 1, h, &err) == -1);
    CHECK(ws_manifest_set(m, "x", WS_FILE, 1, NULL, &err) == -1);
    /* remove */
    CHECK_OK(ws_manifest_remove(m, "a/b", &err), &err);
    CHECK(ws_manifest_remove(m, "a/b", &err) == -1);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK_OK(ws_manifest_set(m, "a", WS_FILE, 1, h, &err), &err); /* no conflict any more */
    ws_manifest_free(m);
}

TEST(encode_decode_round_trip)
{
    struct ws_manifest *m = sample(), *d = NULL, *c = NULL;
    struct buf b, b2;
    struct err err;

    buf_init(&b, 1 << 20);
    buf_init(&b2, 1 << 20);
    CHECK_OK(ws_manifest_encode(m, &b, &err), &err);
    CHECK(memcmp(b.data, "DRM1", 4) == 0);
    CHECK_OK(ws_manifest_decode(b.data, b.len, &d, &err), &err);
    CHECK_OK(ws_manifest_encode(d, &b2, &err), &err);
    CHECK_EQ_INT(b.len, b2.len);
    CHECK(memcmp(b.data, b2.data, b.len) == 0);
    CHECK_OK(ws_manifest_clone(d, &c, &err), &err);
    CHECK_EQ_INT(ws_manifest_count(c), 6);
    CHECK(memcmp(ws_manifest_get(c, "link")->hash, ws_manifest_get(m, "link")->hash, 32) == 0);
    /* empty manifest */
    ws_manifest_free(d);
    ws_manifest_free(c);
    CHECK_OK(ws_manifest_new(&c, &err), &err);
    buf_reset(&b);
    CHECK_OK(ws_manifest_encode(c, &b, &err), &err);
    CHECK_EQ_INT(b.len, 8);
    CHECK_OK(ws_manifest_decode(b.data, b.len, &d, &err), &err);
    CHECK_EQ_INT(ws_manifest_count(d), 0);
    /* the encoder honours the buffer's cap */
    buf_release(&b);
    buf_init(&b, 20);
    CHECK(ws_manifest_encode(m, &b, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK_EQ_INT(b.len, 0);
    ws_manifest_free(c);
    ws_manifest_free(d);
    ws_manifest_free(m);
    buf_release(&b);
    buf_release(&b2);
}

/* Encodes by hand: one entry of the given type and path. */
static size_t
one_entry(unsigned char *p, int type, const char *path, uint64_t size)
{
    size_t n = 0, len = strlen(path);

    memcpy(p, "DRM1", 4);
    p[4] = 1;
    p[5] = p[6] = p[7] = 0;
    n = 8;
    p[n++] = (unsigned char)type;
    p[n++] = (unsigned char)(len & 0xff);
    p[n++] = (unsigned char)(len >> 8);
    memcpy(p + n, path, len);
    n += len;
    if (type != WS_DIR) {
        for (int i = 0; i < 8; i++) {
            p[n++] = (unsigned char)(size >> (8 * i));
        }
        memset(p + n, 0xab, 32);
        n += 32;
    }
    return n;
}

static void
check_corrupt(const void *data, size_t len, int code, const char *needle)
{
    struct ws_manifest *m = (struct ws_manifest *)1;
    struct err err;

    err_clear(&err);
    CHECK(ws_manifest_decode(data, len, &m, &err) == -1);
    CHECK(m == NULL);
    CHECK_EQ_INT(err.code, code);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
}

TEST(decode_rejects_malformed)
{
    unsigned char p[8192];
    struct ws_manifest *m = NULL;
    struct err err;
    size_t n;

    check_corrupt("", 0, ERR_CORRUPT, "header");
    check_corrupt("DRM1\0\0\0", 7, ERR_CORRUPT, "header");
    check_corrupt("XRM1\0\0\0\0", 8, ERR_CORRUPT, "header");
    check_corrupt("DRM2\0\0\0\0", 8, ERR_VERSION, "'DRM2'");
    check_corrupt("DRM1\1\0\0\0", 8, ERR_CORRUPT, "cannot fit");
    check_corrupt("DRM1\xff\xff\xff\xff", 8, ERR_CORRUPT, "cannot fit");
    n = one_entry(p, WS_FILE, "a", 5);
    CHECK_OK(ws_manifest_decode(p, n, &m, &err), &err);
    ws_manifest_free(m);
    check_corrupt(p, n - 1, ERR_CORRUPT, "ends inside");
    p[n] = 0;
    check_corrupt(p, n + 1, ERR_CORRUPT, "stray");
    n = one_entry(p, 7, "a", 5);
    check_corrupt(p, n, ERR_CORRUPT, "unknown type 7");
    n = one_entry(p, WS_FILE, "../a", 5);
    check_corrupt(p, n, ERR_CORRUPT, "'..'");
    n = one_entry(p, WS_FILE, "a//b", 5);
    check_corrupt(p, n, ERR_CORRUPT, "normal form");
    n = one_entry(p, WS_FILE, "/etc", 5);
    check_corrupt(p, n, ERR_CORRUPT, "relative");
    n = one_entry(p, WS_SYMLINK, "l", 0);
    check_corrupt(p, n, ERR_CORRUPT, "target of 0 bytes");
    n = one_entry(p, WS_SYMLINK, "l", 4096);
    check_corrupt(p, n, ERR_CORRUPT, "target of 4096 bytes");
    n = one_entry(p, WS_FILE, "a", (uint64_t)1 << 63);
    check_corrupt(p, n, ERR_CORRUPT, "size");
    /* a path length pointing past the end */
    n = one_entry(p, WS_DIR, "abc", 0);
    p[9] = 200;
    check_corrupt(p, n, ERR_CORRUPT, "ends inside");
    /* a zero-length path */
    n = one_entry(p, WS_DIR, "abc", 0);
    p[9] = 0;
    check_corrupt(p, n, ERR_CORRUPT, "empty");
}

/* Builds an encoding of several entries in the given (possibly wrong) order. */
static void
encode_list(struct buf *b, const char *const *paths, const int *types, size_t n)
{
    unsigned char hdr[8] = {'D', 'R', 'M', '1', (unsigned char)n, 0, 0, 0};

    buf_reset(b);
    buf_append(b, hdr, 8);
    for (size_t i = 0; i < n; i++) {
        unsigned char e[3] = {(unsigned char)types[i], (unsigned char)strlen(paths[i]), 0};
        unsigned char tail[40] = {1};
        buf_append(b, e, 3);
        buf_append(b, paths[i], strlen(paths[i]));
        if (types[i] != WS_DIR) {
            buf_append(b, tail, 40);
        }
    }
}

TEST(decode_rejects_bad_order_and_conflicts)
{
    struct buf b;
    const char *unsorted[] = {"b", "a"};
    const char *dup[] = {"a", "a"};
    const char *conflict[] = {"a", "a.txt", "a/b"};
    const char *dir_kids[] = {"d", "d/x"};
    int files[] = {WS_FILE, WS_FILE, WS_FILE};
    int dir_file[] = {WS_DIR, WS_FILE};

    buf_init(&b, 4096);
    encode_list(&b, unsorted, files, 2);
    check_corrupt(b.data, b.len, ERR_CORRUPT, "out of order");
    encode_list(&b, dup, files, 2);
    check_corrupt(b.data, b.len, ERR_CORRUPT, "repeated");
    encode_list(&b, conflict, files, 3);
    check_corrupt(b.data, b.len, ERR_CORRUPT, "both 'a' and 'a/b'");
    encode_list(&b, dir_kids, dir_file, 2);
    check_corrupt(b.data, b.len, ERR_CORRUPT, "both 'd' and 'd/x'");
    buf_release(&b);
}

static uint32_t rng = 12345;
static uint32_t
rnd(void)
{
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

TEST(decode_survives_truncation_and_mutation)
{
    struct ws_manifest *m = sample(), *d;
    struct buf b;
    struct err err;
    unsigned char *copy;
    int ok = 0, bad = 0;

    buf_init(&b, 1 << 20);
    CHECK_OK(ws_manifest_encode(m, &b, &err), &err);
    copy = malloc(b.len);
    CHECK(copy != NULL);
    /* every truncation is refused, reading only [0, len) (ASan checks the reads) */
    for (size_t len = 0; len < b.len; len++) {
        unsigned char *t = malloc(len ? len : 1);
        memcpy(t, b.data, len);
        d = NULL;
        CHECK_MSG(ws_manifest_decode(t, len, &d, &err) == -1, "truncated at %zu accepted", len);
        CHECK_EQ_INT(err.code, len >= 8 ? ERR_CORRUPT : ERR_CORRUPT);
        free(t);
    }
    /* 10,000 random mutations: never a crash, and an accepted one re-encodes the same */
    for (int i = 0; i < 10000; i++) {
        size_t flips = 1 + rnd() % 4;
        memcpy(copy, b.data, b.len);
        for (size_t f = 0; f < flips; f++) {
            copy[rnd() % b.len] ^= (unsigned char)(1u << (rnd() % 8));
        }
        d = NULL;
        if (ws_manifest_decode(copy, b.len, &d, &err) == 0) {
            struct buf re;
            buf_init(&re, 1 << 20);
            CHECK_OK(ws_manifest_encode(d, &re, &err), &err);
            CHECK(re.len == b.len && memcmp(re.data, copy, b.len) == 0);
            buf_release(&re);
            ws_manifest_free(d);
            ok++;
        } else {
            CHECK(d == NULL);
            CHECK(err.code == ERR_CORRUPT || err.code == ERR_VERSION);
            bad++;
        }
    }
    CHECK(bad > 1000); /* many mutations break something */
    CHECK(ok > 0);     /* flips inside hashes are valid manifests */
    free(copy);
    buf_release(&b);
    ws_manifest_free(m);
}

struct seen {
    int n;
    char log[512];
};

static int
log_change(void *ctx, int change, const struct ws_entry *o, const struct ws_entry *nw,
           struct err *err)
{
    struct seen *s = ctx;
    size_t l = strlen(s->log);

    (void)err;
    snprintf(s->log + l, sizeof(s->log) - l, "%c%s ",
             change == WS_ADDED ? '+' : (change == WS_REMOVED ? '-' : '~'), o ? o->path : nw->path);
    s->n++;
    return 0;
}

static int
stop_at_first(void *ctx, int change, const struct ws_entry *o, const struct ws_entry *nw,
              struct err *err)
{
    (void)ctx;
    (void)change;
    (void)o;
    (void)nw;
    return err_set(err, ERR_CANCELLED, "stopped");
}

TEST(diff_counts_and_reports)
{
    struct ws_manifest *a = sample(), *b = sample();
    struct ws_diff_counts c;
    struct seen s;
    struct err err;
    uint8_t h[HASH_LEN];

    memset(&s, 0, sizeof(s));
    CHECK_OK(ws_manifest_diff(a, b, log_change, &s, &c, &err), &err);
    CHECK_EQ_INT(c.added + c.modified + c.removed, 0);
    hash_of("changed", h);
    CHECK_OK(ws_manifest_set(b, "src/main.c", WS_FILE, 4, h, &err), &err); /* content */
    hash_of("run", h);
    CHECK_OK(ws_manifest_set(b, "run.sh", WS_FILE, 3, h, &err), &err); /* mode only */
    CHECK_OK(ws_manifest_remove(b, "a.txt", &err), &err);
    CHECK_OK(ws_manifest_set(b, "zz", WS_DIR, 0, NULL, &err), &err);
    CHECK_OK(ws_manifest_diff(a, b, log_change, &s, &c, &err), &err);
    CHECK_EQ_INT(c.added, 1);
    CHECK_EQ_INT(c.modified, 2);
    CHECK_EQ_INT(c.removed, 1);
    CHECK_EQ_STR(s.log, "-a.txt ~run.sh ~src/main.c +zz ");
    CHECK(ws_manifest_diff(a, b, stop_at_first, NULL, &c, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_CANCELLED);
    CHECK_OK(ws_manifest_diff(a, b, NULL, NULL, &c, &err), &err);
    CHECK_EQ_INT(c.modified, 2);
    ws_manifest_free(a);
    ws_manifest_free(b);
}

static void
count_ref(void *ctx, const uint8_t hash[32])
{
    (void)hash;
    (*(int *)ctx)++;
}

TEST(refs_lists_blobs)
{
    struct ws_manifest *m = sample();
    struct buf b;
    struct err err;
    int n = 0;
    int (*fn)(void *, const void *, size_t, void (*)(void *, const uint8_t[32]), void *,
              struct err *) = ws_manifest_refs;

    buf_init(&b, 1 << 20);
    CHECK_OK(ws_manifest_encode(m, &b, &err), &err);
    CHECK_OK(fn(NULL, b.data, b.len, count_ref, &n, &err), &err);
    CHECK_EQ_INT(n, 5); /* every entry but the empty dir */
    CHECK(fn(NULL, b.data, b.len - 1, count_ref, &n, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_CORRUPT);
    buf_release(&b);
    ws_manifest_free(m);
}

TEST(nomem_is_clean)
{
    struct ws_manifest *m = sample(), *d;
    struct buf b;
    struct err err;
    int failed = 0;

    buf_init(&b, 1 << 20);
    CHECK_OK(ws_manifest_encode(m, &b, &err), &err);
    for (long k = 0; k < 20; k++) {
        d = NULL;
        mem_fail_after(k);
        int rc = ws_manifest_decode(b.data, b.len, &d, &err);
        mem_fail_after(-1);
        if (rc != 0) {
            CHECK_EQ_INT(err.code, ERR_NOMEM);
            CHECK(d == NULL);
            failed++;
        } else {
            ws_manifest_free(d);
        }
    }
    CHECK(failed > 0);
    buf_release(&b);
    ws_manifest_free(m);
}

TESTS(set_get_sorted, set_replaces_and_refuses_conflicts, encode_decode_round_trip,
      decode_rejects_malformed, decode_rejects_bad_order_and_conflicts,
      decode_survives_truncation_and_mutation, diff_counts_and_reports, refs_lists_blobs,
      nomem_is_clean)
