/*
 * fetch_server.h - starts tests/support/httpd.py on a loopback address for the fetch
 * tests and the fetch benchmark. The server exits when its stdin closes, so it never
 * outlives the process that started it.
 */
#ifndef DRUN_TEST_FETCH_SERVER_H
#define DRUN_TEST_FETCH_SERVER_H

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct fetch_server {
    pid_t pid;
    int in_fd; /* closing it stops the server */
    int port;
};

/* Finds httpd.py from the source tree the binary was built in; "" if not found. */
static inline void
fetch_server_script(char *out, size_t size)
{
    char exe[PATH_MAX];
    const char *env = getenv("DRUN_SRC_DIR");
    ssize_t n;

    out[0] = 0;
    if (env != NULL) {
        snprintf(out, size, "%s/tests/support/httpd.py", env);
        if (access(out, R_OK) == 0) {
            return;
        }
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        out[0] = 0;
        return;
    }
    exe[n] = 0;
    for (int up = 0; up < 5; up++) {
        char *slash = strrchr(exe, '/');
        if (slash == NULL) {
            break;
        }
        *slash = 0;
        if ((size_t)snprintf(out, size, "%s/tests/support/httpd.py", exe) < size &&
            access(out, R_OK) == 0) {
            return;
        }
    }
    out[0] = 0;
}

/* Starts the server bound to addr; returns 0, or -1 (with a reason on stderr). */
static inline int
fetch_server_start(struct fetch_server *s, const char *addr)
{
    char script[PATH_MAX], line[64];
    int in[2], out[2];
    size_t got = 0;

    fetch_server_script(script, sizeof(script));
    if (script[0] == 0) {
        fprintf(stderr, "    cannot find tests/support/httpd.py\n");
        return -1;
    }
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        return -1;
    }
    s->pid = fork();
    if (s->pid < 0) {
        return -1;
    }
    if (s->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execlp("python3", "python3", script, "--bind", addr, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    s->in_fd = in[1];
    while (got + 1 < sizeof(line)) {
        ssize_t r = read(out[0], line + got, 1);
        if (r <= 0 || line[got] == '\n') {
            break;
        }
        got++;
    }
    line[got] = 0;
    close(out[0]);
    if (strncmp(line, "PORT ", 5) != 0) {
        fprintf(stderr, "    the test server on '%s' did not start ('%s')\n", addr, line);
        close(s->in_fd);
        waitpid(s->pid, NULL, 0);
        return -1;
    }
    s->port = (int)strtol(line + 5, NULL, 10);
    return 0;
}

static inline void
fetch_server_stop(struct fetch_server *s)
{
    close(s->in_fd);
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
}

#endif
