/*
 * bash_bench_argv.c - prints, one per line, the raw bwrap command line (sandbox_describe
 * with raw=1: the same mounts as session_bash, nothing of ours around them, running
 * `echo hi`) for a workspace directory, with the read-only paths session_bash adds for
 * the daemon's $PATH. tools/bench/bash_bench.mjs runs it as the floor.
 *
 *   bash_bench_argv WORKSPACE_DIR
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sandbox/sandbox.h"

int
main(int argc, char **argv)
{
    static char dirs[SANDBOX_RO_PATHS_MAX][PATH_MAX];
    const char *ro[SANDBOX_RO_PATHS_MAX];
    const char *path = getenv("PATH");
    struct sandbox_spec spec;
    struct buf out;
    struct err err;
    size_t n = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: bash_bench_argv WORKSPACE_DIR\n");
        return 2;
    }
    /* The daemon's PATH entries as tools_bash.c resolves them. */
    while (path != NULL && *path != '\0' && n < SANDBOX_RO_PATHS_MAX / 2) {
        size_t len = strcspn(path, ":");
        char raw[PATH_MAX];
        struct stat st;
        int dup = 0;

        if (len > 0 && len < sizeof(raw) && path[0] == '/') {
            memcpy(raw, path, len);
            raw[len] = '\0';
            if (realpath(raw, dirs[n]) != NULL && strcmp(dirs[n], "/") != 0 &&
                stat(dirs[n], &st) == 0 && S_ISDIR(st.st_mode)) {
                for (size_t i = 0; i < n; i++) {
                    dup |= strcmp(ro[i], dirs[n]) == 0;
                }
                if (!dup) {
                    ro[n] = dirs[n];
                    n++;
                }
            }
        }
        path += len;
        if (*path == ':') {
            path++;
        }
    }
    memset(&spec, 0, sizeof(spec));
    spec.workspace_dir = argv[1];
    spec.ro_paths = ro;
    spec.n_ro_paths = n;
    spec.command = "echo hi";
    spec.command_len = 7;
    buf_init(&out, 1 << 20);
    if (sandbox_describe(&spec, 1, &out, &err) < 0) {
        fprintf(stderr, "bash_bench_argv: %s\n", err.msg);
        return 1;
    }
    fwrite(out.data, 1, out.len, stdout);
    buf_release(&out);
    return 0;
}
