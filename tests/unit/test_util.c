/*
 * test_util.c - the byte buffer, errors, hashing, hex, time and process identity.
 */
#include "test.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"
#include "util/userpath.h"
#include "util/utf8.h"

TEST(buf_appends_and_terminates)
{
    struct buf b;

    buf_init(&b, 100);
    CHECK_EQ_STR(buf_cstr(&b), "");
    CHECK(buf_puts(&b, "hello") == 0);
    CHECK(buf_putc(&b, ' ') == 0);
    CHECK(buf_printf(&b, "%d-%s", 42, "x") == 0);
    CHECK_EQ_STR(buf_cstr(&b), "hello 42-x");
    CHECK_EQ_INT(b.len, 10);
    CHECK(buf_append(&b, "\0z", 2) == 0);
    CHECK_EQ_INT(b.len, 12);
    CHECK(b.data[12] == '\0');
    buf_release(&b);
}

TEST(buf_cap_is_exact_and_sticky)
{
    struct buf b;
    struct err err;

    buf_init(&b, 8);
    CHECK(buf_append(&b, "12345678", 8) == 0); /* exactly at the cap */
    CHECK(buf_putc(&b, '9') < 0);              /* one past it */
    CHECK_EQ_INT(buf_failed(&b), ERR_TOOBIG);
    CHECK(buf_puts(&b, "") < 0); /* sticky: even an empty append fails now */
    CHECK_EQ_INT(b.len, 8);
    CHECK(buf_err(&b, "the reply", &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "the reply") != NULL);
    buf_reset(&b);
    CHECK(buf_puts(&b, "ok") == 0);
    buf_release(&b);
}

TEST(buf_printf_past_cap_fails)
{
    struct buf b;

    buf_init(&b, 10);
    CHECK(buf_printf(&b, "%s", "0123456789abc") < 0);
    CHECK_EQ_INT(b.len, 0);
    buf_release(&b);
}

TEST(buf_nomem_is_reported)
{
    struct buf b;

    buf_init(&b, 1000);
    mem_fail_after(0);
    CHECK(buf_puts(&b, "x") < 0);
    mem_fail_after(-1);
    CHECK_EQ_INT(buf_failed(&b), ERR_NOMEM);
    buf_release(&b);
}

TEST(buf_detach_hands_over)
{
    struct buf b;
    size_t n = 0;
    char *s;

    buf_init(&b, 100);
    s = buf_detach(&b, &n);
    CHECK(s != NULL && s[0] == '\0' && n == 0);
    mem_free(s);
    buf_puts(&b, "abc");
    s = buf_detach(&b, &n);
    CHECK_EQ_STR(s, "abc");
    CHECK_EQ_INT(n, 3);
    CHECK(b.data == NULL && b.len == 0);
    mem_free(s);
}

TEST(err_set_returns_minus_one)
{
    struct err err;

    CHECK(err_set(&err, ERR_IO, "cannot open '%s'", "x") == -1);
    CHECK_EQ_INT(err.code, ERR_IO);
    CHECK_EQ_STR(err.msg, "cannot open 'x'");
    err_wrap(&err, "loading %s", "config");
    CHECK_EQ_STR(err.msg, "loading config: cannot open 'x'");
    /* at the cap the whole message fits; past it, it ends in "..." */
    err_set(&err, ERR_IO, "%0*d", ERR_MSG_MAX - 1 - 4, 0);
    err_wrap(&err, "ab");
    CHECK_EQ_INT(strlen(err.msg), ERR_MSG_MAX - 1);
    CHECK(err.msg[ERR_MSG_MAX - 2] == '0');
    err_wrap(&err, "c");
    CHECK_EQ_INT(strlen(err.msg), ERR_MSG_MAX - 1);
    CHECK_EQ_STR(err.msg + ERR_MSG_MAX - 4, "...");
    CHECK(strncmp(err.msg, "c: ab: 000", 10) == 0);
    CHECK_EQ_STR(err_name(ERR_TOOBIG), "toobig");
    CHECK_EQ_STR(err_name(9999), "unknown");
}

TEST(sha256_known_vectors)
{
    uint8_t h[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    struct hash_ctx *ctx;

    hash_sha256("", 0, h);
    hex_encode(h, HASH_LEN, hex);
    CHECK_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hash_sha256("abc", 3, h);
    hex_encode(h, HASH_LEN, hex);
    CHECK_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    ctx = hash_new();
    CHECK(ctx != NULL);
    hash_update(ctx, "a", 1);
    hash_update(ctx, "bc", 2);
    hash_final(ctx, h);
    hex_encode(h, HASH_LEN, hex);
    CHECK_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(hex_round_trip_and_rejects)
{
    uint8_t in[4] = {0x00, 0xab, 0x7f, 0xff};
    uint8_t out[4];
    char hex[9];

    hex_encode(in, 4, hex);
    CHECK_EQ_STR(hex, "00ab7fff");
    CHECK(hex_decode("00AB7fff", out, 4) == 0);
    CHECK(memcmp(in, out, 4) == 0);
    CHECK(hex_decode("00ab7ff", out, 4) < 0);   /* short */
    CHECK(hex_decode("00ab7ffg", out, 4) < 0);  /* bad digit */
    CHECK(hex_decode("00ab7fff0", out, 4) < 0); /* long */
}

TEST(time_is_sane)
{
    char iso[32];
    int64_t a = time_mono_us();
    int64_t b = time_mono_us();

    CHECK(b >= a);
    CHECK(time_now_ms() > 1700000000000LL);
    time_format_iso(0, iso, sizeof(iso));
    CHECK_EQ_STR(iso, "1970-01-01T00:00:00.000Z");
    time_format_iso(1764546588123LL, iso, sizeof(iso));
    CHECK_EQ_STR(iso, "2025-11-30T23:49:48.123Z");
}

TEST(proc_identity_detects_reuse)
{
    int64_t me = proc_start_time(getpid());
    pid_t child;
    int st;
    int64_t cst;

    CHECK(me >= 0);
    CHECK(proc_alive(getpid(), me));
    CHECK(!proc_alive(getpid(), me + 1)); /* same pid, other start time: another process */
    child = fork();
    if (child == 0) {
        _exit(0);
    }
    cst = proc_start_time(child);
    waitpid(child, &st, 0);
    CHECK(!proc_alive(child, cst)); /* reaped: gone */
    CHECK(!proc_alive(0, 0));
}

TEST(userpath_expands_tilde)
{
    struct err err;
    char *p;

    CHECK(setenv("HOME", "/home/u", 1) == 0);
    p = userpath_expand("~/.drun/drun.db", &err);
    CHECK_EQ_STR(p, "/home/u/.drun/drun.db");
    mem_free(p);
    p = userpath_expand("~", &err);
    CHECK_EQ_STR(p, "/home/u");
    mem_free(p);
    p = userpath_expand("~user/x", &err); /* not ours to expand */
    CHECK_EQ_STR(p, "~user/x");
    mem_free(p);
    p = userpath_expand("/abs/~/x", &err);
    CHECK_EQ_STR(p, "/abs/~/x");
    mem_free(p);
    CHECK(setenv("HOME", "/", 1) == 0);
    p = userpath_expand("~/x", &err);
    CHECK_EQ_STR(p, "/x");
    mem_free(p);
    CHECK(unsetenv("HOME") == 0);
    CHECK(userpath_expand("~/x", &err) == NULL);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(strstr(err.msg, "HOME is not set") != NULL);
}

TEST(userpath_makes_missing_parents_0700)
{
    char path[4096], made[4096];
    struct stat sb;
    struct err err;
    int created = -1;

    CHECK_FMT(path, sizeof(path), "%s/a/b/c/drun.db", test_tmpdir());
    CHECK_OK(userpath_make_parent(path, &created, made, sizeof(made), &err), &err);
    CHECK_EQ_INT(created, 1);
    CHECK_FMT(path, sizeof(path), "%s/a", test_tmpdir());
    CHECK_EQ_STR(made, path);
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    CHECK_FMT(path, sizeof(path), "%s/a/b/c", test_tmpdir());
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    /* again: nothing to do */
    CHECK_FMT(path, sizeof(path), "%s/a/b/c/drun.db", test_tmpdir());
    CHECK_OK(userpath_make_parent(path, &created, made, sizeof(made), &err), &err);
    CHECK_EQ_INT(created, 0);
    /* a name in the working directory has no parent to make */
    CHECK_OK(userpath_make_parent("drun.db", &created, NULL, 0, &err), &err);
    CHECK_EQ_INT(created, 0);
    /* a file in the way */
    CHECK_FMT(path, sizeof(path), "%s/file", test_tmpdir());
    CHECK(close(open(path, O_CREAT | O_WRONLY, 0600)) == 0);
    CHECK_FMT(path, sizeof(path), "%s/file/sub/drun.db", test_tmpdir());
    CHECK(userpath_make_parent(path, &created, NULL, 0, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_IO);
}

TEST(utf8_at_and_past_every_edge)
{
    size_t bad = 0;

    CHECK(utf8_valid("a\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80", 10, NULL));
    CHECK(utf8_valid("", 0, NULL));
    CHECK(utf8_valid("a\0b", 3, NULL)); /* NUL is text here; callers that mind check it */
    CHECK(!utf8_valid("ab\xc0\xaf", 4, &bad));
    CHECK_EQ_INT(bad, 2);
    /* each boundary, valid on one side and not on the other */
    CHECK_EQ_INT(utf8_seq("\xc2\x80", 2), 2);         /* U+0080 */
    CHECK_EQ_INT(utf8_seq("\xc1\xbf", 2), 0);         /* overlong U+007F */
    CHECK_EQ_INT(utf8_seq("\xe0\xa0\x80", 3), 3);     /* U+0800 */
    CHECK_EQ_INT(utf8_seq("\xe0\x9f\xbf", 3), 0);     /* overlong U+07FF */
    CHECK_EQ_INT(utf8_seq("\xed\x9f\xbf", 3), 3);     /* U+D7FF */
    CHECK_EQ_INT(utf8_seq("\xed\xa0\x80", 3), 0);     /* U+D800, a surrogate */
    CHECK_EQ_INT(utf8_seq("\xed\xbf\xbf", 3), 0);     /* U+DFFF */
    CHECK_EQ_INT(utf8_seq("\xee\x80\x80", 3), 3);     /* U+E000 */
    CHECK_EQ_INT(utf8_seq("\xef\xbf\xbf", 3), 3);     /* U+FFFF */
    CHECK_EQ_INT(utf8_seq("\xf0\x90\x80\x80", 4), 4); /* U+10000 */
    CHECK_EQ_INT(utf8_seq("\xf0\x8f\xbf\xbf", 4), 0); /* overlong U+FFFF */
    CHECK_EQ_INT(utf8_seq("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
    CHECK_EQ_INT(utf8_seq("\xf4\x90\x80\x80", 4), 0); /* past U+10FFFF */
    CHECK_EQ_INT(utf8_seq("\xf5\x80\x80\x80", 4), 0); /* never a lead byte */
    CHECK_EQ_INT(utf8_seq("\x80", 1), 0);             /* a stray continuation */
    CHECK_EQ_INT(utf8_seq("\xe2\x82\xac", 2), 0);     /* cut short by n */
    CHECK_EQ_INT(utf8_seq("\xe2\x28\xac", 3), 0);     /* a bad continuation */
    CHECK_EQ_INT(utf8_seq("\xf0\x9f\x98\x28", 4), 0); /* a bad last continuation */
    CHECK(!utf8_valid("\xe2\x82", 2, &bad));
    CHECK_EQ_INT(bad, 0);
}

/* Three allocations, each failure reported as ERR_NOMEM and nothing leaked. */
static int
three_allocations(void *ctx, struct err *err)
{
    struct buf b;
    char *a = mem_strdup("one"), *c = NULL;
    int rc = -1;

    (void)ctx;
    buf_init(&b, 1 << 20);
    if (a == NULL || buf_printf(&b, "%0512d", 2) < 0 || (c = mem_strdup("three")) == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        goto out;
    }
    rc = 0;
out:
    mem_free(a);
    mem_free(c);
    buf_release(&b);
    return rc;
}

TEST(alloc_sweep_fails_each_allocation_once)
{
    struct test_sweep sw = {three_allocations, NULL, NULL, NULL, 0, 0, 0, 3};
    long clean_at = -1;

    CHECK_EQ_INT(test_alloc_sweep(&sw, &clean_at), 3);
    CHECK_EQ_INT(clean_at, 3);
}

TESTS(utf8_at_and_past_every_edge, alloc_sweep_fails_each_allocation_once,
      buf_appends_and_terminates, buf_cap_is_exact_and_sticky, buf_printf_past_cap_fails,
      buf_nomem_is_reported, buf_detach_hands_over, err_set_returns_minus_one, sha256_known_vectors,
      hex_round_trip_and_rejects, time_is_sane, proc_identity_detects_reuse, userpath_expands_tilde,
      userpath_makes_missing_parents_0700)
