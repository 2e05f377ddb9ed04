/*
 * test.h - the unit-test harness: one binary per module, each test in a forked child.
 *
 * A test file defines tests with TEST(name) and lists them in TESTS(...) at the end:
 *
 *     TEST(buf_grows) { ... CHECK(x == 1); CHECK_EQ_INT(a, b); ... }
 *     TESTS(buf_grows, buf_caps)
 *
 * Each test runs in its own child process with a timeout (TEST_TIMEOUT seconds,
 * default 180: the store's allocation-failure sweep takes ~30 s on an idle 2-core
 * machine and twice that under load), so a crash or hang fails that test only. A test
 * may call SKIP("why") to report that it cannot run here (exit 77). Run one test with
 * `build/tests/test_x NAME`. The binary ends with the line
 * "N passed, N failed, N skipped" and exits 1 if anything failed.
 *
 * Each test gets a fresh temporary directory, test_tmpdir(), removed afterwards.
 */
#ifndef DRUN_TEST_H
#define DRUN_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/err.h"
#include "util/mem.h"

#define TEST_SKIP_CODE 77

struct test_case {
    const char *name;
    void (*fn)(void);
};

static char test_tmp[4096];

static inline const char *
test_tmpdir(void)
{
    return test_tmp;
}

/* Returns test_tmpdir()/name in a static buffer (overwritten by the next call). */
static inline const char *
test_path(const char *name)
{
    static char p[8192];
    snprintf(p, sizeof(p), "%s/%s", test_tmp, name);
    return p;
}

static inline void
test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(1);
}

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            test_fail(__FILE__, __LINE__, "check failed: %s", #cond);                              \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                                            \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                                     \
            test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,                    \
                      a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                     \
        }                                                                                          \
    } while (0)

/*
 * CHECK_FMT(out, size, fmt, ...): snprintf into out, failing the test if it does not fit:
 * a path cut short would test some other file.
 */
#define CHECK_FMT(out, size, ...)                                                                  \
    CHECK_MSG((size_t)snprintf((out), (size), __VA_ARGS__) < (size_t)(size),                       \
              "'%s' does not fit in %zu bytes", (out), (size_t)(size))

/*
 * The allocation-failure sweep (SQLite's fault injection, on mem_fail_after): runs the
 * scenario with the N-th allocation failing, for N = 0, 1, 2, ... (every N up to `dense`,
 * then every `stride`-th, at most `max`), until a run meets no injected failure. Before
 * each run reset(ctx) restores the starting state (a fresh DB, say). A run that fails
 * must fail with ERR_NOMEM, and then after(ctx, n) checks that what it left is
 * consistent (NULL: nothing to check). The test fails if the scenario never runs clean
 * or fewer than min_failures failures were injected. Route SQLite's allocator first
 * (tdb_route_sqlite_alloc) to reach its allocations too.
 */
struct test_sweep {
    int (*scenario)(void *ctx, struct err *err); /* 0 or -1 with err */
    void (*reset)(void *ctx);                    /* may be NULL */
    void (*after)(void *ctx, long n);            /* may be NULL */
    void *ctx;
    long dense, stride, max; /* 0: 300, 1, 20000 */
    int min_failures;        /* 0: 50 */
};

/* Returns the number of injected failures; the first clean step goes to *clean_at. */
static inline int
test_alloc_sweep(const struct test_sweep *sw, long *clean_at)
{
    long dense = sw->dense ? sw->dense : 300, stride = sw->stride ? sw->stride : 1;
    long max = sw->max ? sw->max : 20000, n;
    int failures = 0, clean = 0;

    for (n = 0; n < max && !clean; n += (n < dense ? 1 : stride)) {
        struct err err;
        int rc;

        if (sw->reset != NULL) {
            sw->reset(sw->ctx);
        }
        err_clear(&err);
        mem_fail_after(n);
        rc = sw->scenario(sw->ctx, &err);
        mem_fail_after(-1);
        if (rc == 0) {
            clean = mem_failures() == 0;
            if (clean && clean_at != NULL) {
                *clean_at = n;
            }
            continue;
        }
        failures++;
        if (err.code != ERR_NOMEM) {
            test_fail(__FILE__, __LINE__, "step %ld failed with %s, not nomem: %s", n,
                      err_name(err.code), err.msg);
        }
        if (sw->after != NULL) {
            sw->after(sw->ctx, n);
        }
    }
    if (!clean) {
        test_fail(__FILE__, __LINE__, "the scenario never ran clean (last step %ld)", n);
    }
    if (failures < (sw->min_failures ? sw->min_failures : 50)) {
        test_fail(__FILE__, __LINE__, "only %d allocation failures were injected", failures);
    }
    return failures;
}

/* Removes a database file and its -wal and -shm companions, if there. */
static inline void
test_rm_db(const char *path)
{
    char side[8192];

    unlink(path);
    if ((size_t)snprintf(side, sizeof(side), "%s-wal", path) < sizeof(side)) {
        unlink(side);
    }
    if ((size_t)snprintf(side, sizeof(side), "%s-shm", path) < sizeof(side)) {
        unlink(side);
    }
}

/* CHECK_OK(call, &err): the call returns 0, else the test fails with err's message. */
#define CHECK_OK(call, errp)                                                                       \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            test_fail(__FILE__, __LINE__, "%s failed: %s", #call, (errp)->msg);                    \
        }                                                                                          \
    } while (0)

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "    skip: ");                                                             \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        _exit(TEST_SKIP_CODE);                                                                     \
    } while (0)

static inline void
test_rm_rf(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) {
        int st;
        waitpid(pid, &st, 0);
    }
}

static inline int
test_run_one(const struct test_case *tc, int timeout)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    pid_t pid;
    int status = 0;

    snprintf(test_tmp, sizeof(test_tmp), "%s/drun-test-XXXXXX", base);
    if (mkdtemp(test_tmp) == NULL) {
        fprintf(stderr, "cannot make a temporary directory under '%s': %s\n", base,
                strerror(errno));
        return 1;
    }
    /* Searchable by others: a root test process's sandboxes run as an unprivileged host
     * user (65534), which must pass through to the workspaces made below it. */
    if (chmod(test_tmp, 0711) < 0) {
        fprintf(stderr, "cannot chmod '%s': %s\n", test_tmp, strerror(errno));
        return 1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        alarm((unsigned)timeout);
        tc->fn();
        fflush(NULL);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    kill(-pid, SIGKILL); /* anything the test left running */
    test_rm_rf(test_tmp);
    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "    killed by signal %d%s\n", WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? " (timed out)" : "");
    }
    return 1;
}

static inline int
test_main(int argc, char **argv, const struct test_case *tests, size_t n)
{
    int passed = 0, failed = 0, skipped = 0;
    int timeout = getenv("TEST_TIMEOUT") ? (int)strtol(getenv("TEST_TIMEOUT"), NULL, 10) : 180;
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];

    if (timeout <= 0) {
        timeout = 180;
    }
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < n; i++) {
        int rc;
        if (argc > 1) {
            int wanted = 0;
            for (int a = 1; a < argc; a++) {
                wanted |= strcmp(argv[a], tests[i].name) == 0;
            }
            if (!wanted) {
                continue;
            }
        }
        rc = test_run_one(&tests[i], timeout);
        if (rc == 0) {
            passed++;
            printf("ok   %s %s\n", prog, tests[i].name);
        } else if (rc == TEST_SKIP_CODE) {
            skipped++;
            printf("skip %s %s\n", prog, tests[i].name);
        } else {
            failed++;
            printf("FAIL %s %s\n", prog, tests[i].name);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

#define TEST_ENTRY(name) {#name, name},
/* TESTS(a, b, c) defines main() running the listed tests in order. */
#define TESTS(...)                                                                                 \
    static const struct test_case test_list_[] = {TEST_FOREACH_(__VA_ARGS__)};                     \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        return test_main(argc, argv, test_list_, sizeof(test_list_) / sizeof(test_list_[0]));      \
    }

/* Expands TEST_ENTRY over up to 64 names. */
#define TEST_FE_1(x)       TEST_ENTRY(x)
#define TEST_FE_2(x, ...)  TEST_ENTRY(x) TEST_FE_1(__VA_ARGS__)
#define TEST_FE_3(x, ...)  TEST_ENTRY(x) TEST_FE_2(__VA_ARGS__)
#define TEST_FE_4(x, ...)  TEST_ENTRY(x) TEST_FE_3(__VA_ARGS__)
#define TEST_FE_5(x, ...)  TEST_ENTRY(x) TEST_FE_4(__VA_ARGS__)
#define TEST_FE_6(x, ...)  TEST_ENTRY(x) TEST_FE_5(__VA_ARGS__)
#define TEST_FE_7(x, ...)  TEST_ENTRY(x) TEST_FE_6(__VA_ARGS__)
#define TEST_FE_8(x, ...)  TEST_ENTRY(x) TEST_FE_7(__VA_ARGS__)
#define TEST_FE_9(x, ...)  TEST_ENTRY(x) TEST_FE_8(__VA_ARGS__)
#define TEST_FE_10(x, ...) TEST_ENTRY(x) TEST_FE_9(__VA_ARGS__)
#define TEST_FE_11(x, ...) TEST_ENTRY(x) TEST_FE_10(__VA_ARGS__)
#define TEST_FE_12(x, ...) TEST_ENTRY(x) TEST_FE_11(__VA_ARGS__)
#define TEST_FE_13(x, ...) TEST_ENTRY(x) TEST_FE_12(__VA_ARGS__)
#define TEST_FE_14(x, ...) TEST_ENTRY(x) TEST_FE_13(__VA_ARGS__)
#define TEST_FE_15(x, ...) TEST_ENTRY(x) TEST_FE_14(__VA_ARGS__)
#define TEST_FE_16(x, ...) TEST_ENTRY(x) TEST_FE_15(__VA_ARGS__)
#define TEST_FE_17(x, ...) TEST_ENTRY(x) TEST_FE_16(__VA_ARGS__)
#define TEST_FE_18(x, ...) TEST_ENTRY(x) TEST_FE_17(__VA_ARGS__)
#define TEST_FE_19(x, ...) TEST_ENTRY(x) TEST_FE_18(__VA_ARGS__)
#define TEST_FE_20(x, ...) TEST_ENTRY(x) TEST_FE_19(__VA_ARGS__)
#define TEST_FE_21(x, ...) TEST_ENTRY(x) TEST_FE_20(__VA_ARGS__)
#define TEST_FE_22(x, ...) TEST_ENTRY(x) TEST_FE_21(__VA_ARGS__)
#define TEST_FE_23(x, ...) TEST_ENTRY(x) TEST_FE_22(__VA_ARGS__)
#define TEST_FE_24(x, ...) TEST_ENTRY(x) TEST_FE_23(__VA_ARGS__)
#define TEST_FE_25(x, ...) TEST_ENTRY(x) TEST_FE_24(__VA_ARGS__)
#define TEST_FE_26(x, ...) TEST_ENTRY(x) TEST_FE_25(__VA_ARGS__)
#define TEST_FE_27(x, ...) TEST_ENTRY(x) TEST_FE_26(__VA_ARGS__)
#define TEST_FE_28(x, ...) TEST_ENTRY(x) TEST_FE_27(__VA_ARGS__)
#define TEST_FE_29(x, ...) TEST_ENTRY(x) TEST_FE_28(__VA_ARGS__)
#define TEST_FE_30(x, ...) TEST_ENTRY(x) TEST_FE_29(__VA_ARGS__)
#define TEST_FE_31(x, ...) TEST_ENTRY(x) TEST_FE_30(__VA_ARGS__)
#define TEST_FE_32(x, ...) TEST_ENTRY(x) TEST_FE_31(__VA_ARGS__)
#define TEST_FE_33(x, ...) TEST_ENTRY(x) TEST_FE_32(__VA_ARGS__)
#define TEST_FE_34(x, ...) TEST_ENTRY(x) TEST_FE_33(__VA_ARGS__)
#define TEST_FE_35(x, ...) TEST_ENTRY(x) TEST_FE_34(__VA_ARGS__)
#define TEST_FE_36(x, ...) TEST_ENTRY(x) TEST_FE_35(__VA_ARGS__)
#define TEST_FE_37(x, ...) TEST_ENTRY(x) TEST_FE_36(__VA_ARGS__)
#define TEST_FE_38(x, ...) TEST_ENTRY(x) TEST_FE_37(__VA_ARGS__)
#define TEST_FE_39(x, ...) TEST_ENTRY(x) TEST_FE_38(__VA_ARGS__)
#define TEST_FE_40(x, ...) TEST_ENTRY(x) TEST_FE_39(__VA_ARGS__)
#define TEST_FE_41(x, ...) TEST_ENTRY(x) TEST_FE_40(__VA_ARGS__)
#define TEST_FE_42(x, ...) TEST_ENTRY(x) TEST_FE_41(__VA_ARGS__)
#define TEST_FE_43(x, ...) TEST_ENTRY(x) TEST_FE_42(__VA_ARGS__)
#define TEST_FE_44(x, ...) TEST_ENTRY(x) TEST_FE_43(__VA_ARGS__)
#define TEST_FE_45(x, ...) TEST_ENTRY(x) TEST_FE_44(__VA_ARGS__)
#define TEST_FE_46(x, ...) TEST_ENTRY(x) TEST_FE_45(__VA_ARGS__)
#define TEST_FE_47(x, ...) TEST_ENTRY(x) TEST_FE_46(__VA_ARGS__)
#define TEST_FE_48(x, ...) TEST_ENTRY(x) TEST_FE_47(__VA_ARGS__)
#define TEST_FE_49(x, ...) TEST_ENTRY(x) TEST_FE_48(__VA_ARGS__)
#define TEST_FE_50(x, ...) TEST_ENTRY(x) TEST_FE_49(__VA_ARGS__)
#define TEST_FE_51(x, ...) TEST_ENTRY(x) TEST_FE_50(__VA_ARGS__)
#define TEST_FE_52(x, ...) TEST_ENTRY(x) TEST_FE_51(__VA_ARGS__)
#define TEST_FE_53(x, ...) TEST_ENTRY(x) TEST_FE_52(__VA_ARGS__)
#define TEST_FE_54(x, ...) TEST_ENTRY(x) TEST_FE_53(__VA_ARGS__)
#define TEST_FE_55(x, ...) TEST_ENTRY(x) TEST_FE_54(__VA_ARGS__)
#define TEST_FE_56(x, ...) TEST_ENTRY(x) TEST_FE_55(__VA_ARGS__)
#define TEST_FE_57(x, ...) TEST_ENTRY(x) TEST_FE_56(__VA_ARGS__)
#define TEST_FE_58(x, ...) TEST_ENTRY(x) TEST_FE_57(__VA_ARGS__)
#define TEST_FE_59(x, ...) TEST_ENTRY(x) TEST_FE_58(__VA_ARGS__)
#define TEST_FE_60(x, ...) TEST_ENTRY(x) TEST_FE_59(__VA_ARGS__)
#define TEST_FE_61(x, ...) TEST_ENTRY(x) TEST_FE_60(__VA_ARGS__)
#define TEST_FE_62(x, ...) TEST_ENTRY(x) TEST_FE_61(__VA_ARGS__)
#define TEST_FE_63(x, ...) TEST_ENTRY(x) TEST_FE_62(__VA_ARGS__)
#define TEST_FE_64(x, ...) TEST_ENTRY(x) TEST_FE_63(__VA_ARGS__)
#define TEST_FE_N_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17,     \
                   _18, _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, _33, \
                   _34, _35, _36, _37, _38, _39, _40, _41, _42, _43, _44, _45, _46, _47, _48, _49, \
                   _50, _51, _52, _53, _54, _55, _56, _57, _58, _59, _60, _61, _62, _63, _64, N,   \
                   ...)                                                                            \
    TEST_FE_##N
#define TEST_FOREACH_(...)                                                                         \
    TEST_FE_N_(__VA_ARGS__, 64, 63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48,    \
               47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, \
               26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5,  \
               4, 3, 2, 1)                                                                         \
    (__VA_ARGS__)

#endif
