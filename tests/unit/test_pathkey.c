/*
 * test_pathkey.c - workspace key validation, normalization and batch conflicts.
 */
#include "test.h"

#include "util/buf.h"
#include "util/err.h"
#include "util/pathkey.h"

/* Normalizes a C string; returns the result (static) or NULL with the error in *err. */
static const char *
norm(const char *key, struct err *err)
{
    static struct buf b;
    static int init;

    if (!init) {
        buf_init(&b, 1 << 16);
        init = 1;
    }
    buf_reset(&b);
    err_clear(err);
    if (pathkey_normalize(key, strlen(key), &b, err) != 0) {
        return NULL;
    }
    return buf_cstr(&b);
}

static void
check_rejected(const char *key, size_t len, const char *needle)
{
    struct buf b;
    struct err err;

    buf_init(&b, 1 << 16);
    err_clear(&err);
    CHECK_MSG(pathkey_normalize(key, len, &b, &err) == -1, "key was accepted: %s", key);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    CHECK_EQ_INT(b.len, 0); /* nothing half-written */
    err_clear(&err);
    CHECK(pathkey_check(key, len, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    buf_release(&b);
}

TEST(normalizes)
{
    struct err err;

    CHECK_EQ_STR(norm("a", &err), "a");
    CHECK_EQ_STR(norm("./a", &err), "a");
    CHECK_EQ_STR(norm("a//b", &err), "a/b");
    CHECK_EQ_STR(norm("a/b/", &err), "a/b");
    CHECK_EQ_STR(norm("a/./b/.//c/", &err), "a/b/c");
    CHECK_EQ_STR(norm(".a/..b/b..", &err), ".a/..b/b..");
    CHECK_EQ_STR(norm("caf\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80", &err),
                 "caf\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80");
    CHECK(pathkey_check("a/b", 3, &err) == 0);
    CHECK(pathkey_check("./a", 3, &err) == -1);
    CHECK(pathkey_check("a//b", 4, &err) == -1);
    CHECK(pathkey_check("a/", 2, &err) == -1);
    CHECK(strstr(err.msg, "normal form") != NULL);
}

TEST(rejects_each_bad_key)
{
    check_rejected("", 0, "must not be empty");
    check_rejected("/etc/passwd", 11, "relative path: '/etc/passwd'");
    check_rejected("..", 2, "must not contain '..'");
    check_rejected("a/../b", 6, "must not contain '..': 'a/../b'");
    check_rejected("a/..", 4, "'..'");
    check_rejected(".", 1, "names the workspace itself");
    check_rejected("./", 2, "names the workspace itself");
    check_rejected("//", 2, "relative path");
    check_rejected("a\0b", 3, "control character (byte 0x00 at offset 1)");
    check_rejected("a\nb", 3, "'a\\x0ab'");
    check_rejected("a\x1f", 2, "control character");
    check_rejected("a\x7f", 2, "byte 0x7f");
    check_rejected("a\xff", 2, "not valid UTF-8 (at byte 1)");
    check_rejected("\xc0\xaf", 2, "not valid UTF-8");         /* overlong '/' */
    check_rejected("\xed\xa0\x80", 3, "not valid UTF-8");     /* a surrogate */
    check_rejected("\xf4\x90\x80\x80", 4, "not valid UTF-8"); /* past U+10FFFF */
    check_rejected("\xe2\x82", 2, "not valid UTF-8");         /* truncated */
}

TEST(component_and_key_length_edges)
{
    char k[PATHKEY_MAX + 8];
    struct err err;
    struct buf b;

    buf_init(&b, 1 << 16);
    memset(k, 'c', PATHKEY_COMPONENT_MAX + 1);
    CHECK_OK(pathkey_normalize(k, PATHKEY_COMPONENT_MAX, &b, &err), &err);
    check_rejected(k, PATHKEY_COMPONENT_MAX + 1, "component of 256 bytes");

    /* a key of exactly PATHKEY_MAX bytes: components of 127 + '/' */
    for (size_t i = 0; i < PATHKEY_MAX; i++) {
        k[i] = (i % 128 == 127) ? '/' : 'k';
    }
    k[PATHKEY_MAX - 1] = 'k';
    buf_reset(&b);
    CHECK_OK(pathkey_normalize(k, PATHKEY_MAX, &b, &err), &err);
    CHECK_EQ_INT(b.len, PATHKEY_MAX);
    CHECK(pathkey_check(k, PATHKEY_MAX, &err) == 0);
    k[PATHKEY_MAX] = 'k';
    check_rejected(k, PATHKEY_MAX + 1, "longer than the 4096-byte limit");
    buf_release(&b);
}

TEST(quote_escapes_and_cuts)
{
    char q[16];

    pathkey_quote("a\x01\xff\xc3\xa9", 5, q, sizeof(q));
    CHECK_EQ_STR(q, "a\\x01\\xff\xc3\xa9");
    pathkey_quote("0123456789abcdefghij", 20, q, sizeof(q));
    CHECK_EQ_STR(q, "0123456789ab...");
    CHECK(strlen(q) < sizeof(q));
}

TEST(batch_conflicts)
{
    struct err err;
    const char *ok[] = {"a.txt", "a/b", "a/c", "ab", "b"};
    const char *dup[] = {"x", "y", "x"};
    const char *conflict[] = {"a", "a.txt", "a/b"};
    const char *deep[] = {"p/q/r/s", "z", "p/q"};
    const char *prefix_only[] = {"ab/c", "a"};

    CHECK_OK(pathkey_check_batch(ok, 5, &err), &err);
    CHECK_OK(pathkey_check_batch(prefix_only, 2, &err), &err);
    CHECK_OK(pathkey_check_batch(ok, 0, &err), &err);
    CHECK(pathkey_check_batch(dup, 3, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(strstr(err.msg, "'x' is given twice") != NULL);
    CHECK(pathkey_check_batch(conflict, 3, &err) == -1);
    CHECK(strstr(err.msg, "'a' and 'a/b' conflict") != NULL);
    CHECK(pathkey_check_batch(deep, 3, &err) == -1);
    CHECK(strstr(err.msg, "'p/q' and 'p/q/r/s'") != NULL);
}

TESTS(normalizes, rejects_each_bad_key, component_and_key_length_edges, quote_escapes_and_cuts,
      batch_conflicts)
