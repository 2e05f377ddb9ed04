/*
 * sandbox_bench.c - what the sandbox module costs over raw bwrap.
 *
 * Interleaves N runs of `echo hi` through sandbox_run() with N runs of plain bwrap with
 * the same mounts (sandbox_describe raw=1) running `sh -c 'echo hi'`, and prints both
 * p50s, their ratio (the floor is 1.0), and where the module's time goes: building the
 * argv and seccomp filter up to the fork, and the rest (bwrap, the shell prelude, our
 * pid-1 wait and pipe draining). Ratios only; nothing here asserts on speed.
 *
 *   sh tools/bench/sandbox_bench.sh [N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/timeutil.h"

static int
cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t
p50(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return v[n / 2];
}

int
main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 30;
    char ws[] = "/tmp/drun-bench-XXXXXX";
    struct sandbox_spec spec;
    struct buf line;
    struct err err;
    char *args[512];
    int na = 0;
    int64_t *mod, *raw, *desc;

    if (n < 3 || n > 10000 || mkdtemp(ws) == NULL) {
        fprintf(stderr, "usage: sandbox_bench [N>=3]\n");
        return 2;
    }
    mod = calloc((size_t)n, sizeof(*mod));
    raw = calloc((size_t)n, sizeof(*raw));
    desc = calloc((size_t)n, sizeof(*desc));
    memset(&spec, 0, sizeof(spec));
    spec.workspace_dir = ws;
    spec.command = "echo hi";
    spec.command_len = 7;
    buf_init(&line, 1 << 20);
    if (sandbox_describe(&spec, 1, &line, &err) < 0) {
        fprintf(stderr, "sandbox_bench: %s\n", err.msg);
        return 1;
    }
    for (char *p = line.data, *nl; p && *p && na < 510; p = nl + 1) {
        nl = strchr(p, '\n');
        *nl = '\0';
        args[na++] = p;
    }
    args[na] = NULL;
    for (int i = 0; i < n; i++) {
        struct sandbox_result r;
        struct buf tmp;
        int64_t t0 = time_mono_us();
        buf_init(&tmp, 1 << 20);
        sandbox_describe(&spec, 0, &tmp, &err); /* argv building cost, measured alone */
        desc[i] = time_mono_us() - t0;
        buf_release(&tmp);
        t0 = time_mono_us();
        if (sandbox_run(&spec, &r, &err) < 0 || strcmp(buf_cstr(&r.out.data), "hi\n") != 0) {
            fprintf(stderr, "sandbox_bench: module run failed: %s\n", err.msg);
            return 1;
        }
        mod[i] = time_mono_us() - t0;
        sandbox_result_release(&r);
        t0 = time_mono_us();
        pid_t pid = fork();
        if (pid == 0) {
            static char *const no_env[] = {NULL};
            if (!freopen("/dev/null", "w", stdout)) {
                _exit(127);
            }
            execve(args[0], args, no_env);
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        raw[i] = time_mono_us() - t0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "sandbox_bench: raw bwrap failed\n");
            return 1;
        }
    }
    int64_t pm = p50(mod, n), pr = p50(raw, n), pd = p50(desc, n);
    printf("sandbox module  echo hi  p50 %7.2f ms\n", pm / 1000.0);
    printf("raw bwrap       echo hi  p50 %7.2f ms\n", pr / 1000.0);
    printf("ratio module/raw           %7.2f  (floor 1.00; %d runs each, interleaved)\n",
           (double)pm / (double)pr, n);
    printf("where the time goes: argv+mount plan %.2f ms; seccomp, rlimits, cgroup, prelude, "
           "pid-1 wait and pipes: %.2f ms\n",
           pd / 1000.0, (pm - pr - pd) / 1000.0);
    rmdir(ws);
    return 0;
}
