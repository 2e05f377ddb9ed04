/*
 * failmalloc.c - an LD_PRELOAD shim that makes one allocation of a whole process fail.
 *
 * The unit tests inject allocation failures through util/mem's hook, which sees only
 * drun's own allocations. This shim sees every malloc, calloc and realloc in the process
 * (cJSON, libuv, SQLite, zstd, libcrypto, glibc itself), which is what a real shortage
 * looks like. test_oom.mjs starts drun-mcp with it and sweeps N over a short session.
 *
 *   FAILMALLOC_NTH=N      the N-th allocation (counted from 1, across all threads) fails
 *                         with ENOMEM; every other one goes to glibc. 0 or unset: none.
 *   FAILMALLOC_REPORT=P   at exit, write the number of allocations made to file P.
 *   FAILMALLOC_SPARE=S    do not fail the N-th allocation if the code calling malloc
 *                         lives in a shared object whose path contains S (the run then
 *                         has no failure). For a library known to hang on a failed
 *                         allocation, so the sweep can go on finding drun's own faults.
 *   FAILMALLOC_BACKTRACE=1  print where the failed allocation was made (stderr).
 *
 * The constructor removes LD_PRELOAD from the environment so that processes the daemon
 * starts (bwrap, the sandboxed command) run without the shim and with their own memory.
 * Nothing here allocates; the failure is announced with write(2) on stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t n);

static unsigned long nth;
static unsigned long count;
static char report[4096];
static char spare[256];
static int want_backtrace;

static unsigned long
parse_ul(const char *s)
{
    unsigned long v = 0;

    for (; s != NULL && *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (unsigned long)(*s - '0');
    }
    return v;
}

__attribute__((constructor)) static void
failmalloc_init(void)
{
    const char *r = getenv("FAILMALLOC_REPORT");
    const char *sp = getenv("FAILMALLOC_SPARE");

    nth = parse_ul(getenv("FAILMALLOC_NTH"));
    if (r != NULL && strlen(r) < sizeof(report)) {
        memcpy(report, r, strlen(r) + 1);
    }
    if (sp != NULL && strlen(sp) < sizeof(spare)) {
        memcpy(spare, sp, strlen(sp) + 1);
    }
    want_backtrace = getenv("FAILMALLOC_BACKTRACE") != NULL;
    if (want_backtrace) {
        void *f[2];
        backtrace(f, 2); /* loads libgcc_s now, not inside a failing malloc */
    }
    unsetenv("FAILMALLOC_BACKTRACE");
    unsetenv("LD_PRELOAD");
    unsetenv("FAILMALLOC_SPARE");
    unsetenv("FAILMALLOC_NTH");
    unsetenv("FAILMALLOC_REPORT");
}

__attribute__((destructor)) static void
failmalloc_fini(void)
{
    char text[32];
    unsigned long v = __atomic_load_n(&count, __ATOMIC_RELAXED);
    int len = 0, fd;

    if (report[0] == '\0') {
        return;
    }
    do {
        text[sizeof(text) - 1 - len++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    fd = open(report, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        (void)!write(fd, text + sizeof(text) - len, (size_t)len);
        close(fd);
    }
}

/* Counts one allocation made from `caller`; returns 1 if this is the one to fail. */
static int
should_fail(void *caller)
{
    unsigned long k = __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);

    if (nth != 0 && k == nth) {
        Dl_info info;
        if (spare[0] != '\0' && dladdr(caller, &info) != 0 && info.dli_fname != NULL &&
            strstr(info.dli_fname, spare) != NULL) {
            static const char msg[] = "failmalloc: sparing this allocation\n";
            (void)!write(2, msg, sizeof(msg) - 1);
            return 0;
        }
        static const char msg[] = "failmalloc: failing this allocation\n";
        (void)!write(2, msg, sizeof(msg) - 1);
        if (want_backtrace) {
            void *f[24];
            backtrace_symbols_fd(f, backtrace(f, 24), 2);
        }
        return 1;
    }
    return 0;
}

void *
malloc(size_t n)
{
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(n);
}

void *
calloc(size_t count_, size_t size)
{
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(count_, size);
}

void *
realloc(void *p, size_t n)
{
    if (n != 0 && should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}
