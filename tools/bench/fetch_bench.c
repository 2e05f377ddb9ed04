/*
 * fetch_bench.c - throughput and memory of the fetch gateway on a 100 MiB response.
 *
 * Starts tests/support/httpd.py on loopback and, alternating N rounds, times
 * `curl -s -o /dev/null URL` (the floor) and fetch_run() of the same URL streaming into
 * a sink that drops the bytes (how session_fetch writes into the workspace file). Prints
 * the best time of each, the ratio fetch/curl throughput (target >= 0.8), and the
 * growth of this process's peak RSS during one streamed fetch (target: well under two
 * transfer buffers, not the body size). A buffered fetch (body kept in memory, cap
 * above the size) is measured too, for comparison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../tests/unit/fetch_server.h"
#include "fetch/fetch.h"
#include "util/timeutil.h"

#define SIZE ((uint64_t)100 << 20)

static long
status_kb(const char *key)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, strlen(key)) == 0) {
            v = strtol(line + strlen(key) + 1, NULL, 10);
        }
    }
    fclose(f);
    return v;
}

static void
reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f != NULL) {
        fputs("5", f);
        fclose(f);
    }
}

static int
drop(void *ud, const void *data, size_t len, struct err *why)
{
    (void)data;
    (void)why;
    *(uint64_t *)ud += len;
    return 0;
}

static double
time_curl(const char *url)
{
    int64_t t0 = time_mono_us();
    pid_t pid = fork();
    int st = 0;

    if (pid == 0) {
        execlp("curl", "curl", "-s", "-o", "/dev/null", url, (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        return -1;
    }
    return (double)(time_mono_us() - t0) / 1e6;
}

static double
time_fetch(const char *url, int stream, long *rss_growth_kb)
{
    static const char *list[] = {"127.0.0.1"};
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;
    uint64_t got = 0;
    long before;
    int64_t t0;
    double secs;

    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 1;
    p.allow_private = 1;
    p.max_bytes = SIZE + (1 << 20);
    memset(&req, 0, sizeof(req));
    req.url = url;
    if (stream) {
        req.sink = drop;
        req.sink_ud = &got;
    }
    reset_peak();
    before = status_kb("VmRSS:");
    t0 = time_mono_us();
    if (fetch_run(&p, &req, &r, &err) != 0 || r->outcome != FETCH_OK) {
        fprintf(stderr, "fetch failed: %s\n", r ? r->err.msg : err.msg);
        exit(1);
    }
    secs = (double)(time_mono_us() - t0) / 1e6;
    *rss_growth_kb = status_kb("VmHWM:") - before;
    if (r->bytes != SIZE) {
        fprintf(stderr, "fetch got %llu bytes\n", (unsigned long long)r->bytes);
        exit(1);
    }
    fetch_result_free(r);
    return secs;
}

int
main(int argc, char **argv)
{
    struct fetch_server srv;
    char url[256];
    int rounds = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 3;
    double best_curl = 1e9, best_fetch = 1e9, best_buf = 1e9, best_start = 1e9;
    long rss_stream = 0, rss_buf = 0, g;

    if (fetch_server_start(&srv, "127.0.0.1") != 0) {
        fprintf(stderr, "cannot start tests/support/httpd.py\n");
        return 1;
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/big?size=%llu", srv.port,
             (unsigned long long)SIZE);
    /* Warm up once (libcurl and OpenSSL initialize on the first fetch), and time a
     * tiny curl run: the process start-up that the curl figure includes. */
    time_fetch(url, 1, &g);
    char small[256];
    snprintf(small, sizeof(small), "http://127.0.0.1:%d/plain", srv.port);
    for (int i = 0; i < rounds; i++) {
        double s0 = time_curl(small);
        best_start = s0 >= 0 && s0 < best_start ? s0 : best_start;
    }
    for (int i = 0; i < rounds; i++) {
        double c = time_curl(url), f = time_fetch(url, 1, &g), b;
        if (c < 0) {
            fprintf(stderr, "curl failed\n");
            return 1;
        }
        best_curl = c < best_curl ? c : best_curl;
        best_fetch = f < best_fetch ? f : best_fetch;
        rss_stream = g > rss_stream ? g : rss_stream;
        b = time_fetch(url, 0, &g);
        best_buf = b < best_buf ? b : best_buf;
        rss_buf = g > rss_buf ? g : rss_buf;
    }
    fetch_server_stop(&srv);
    printf("fetch 100 MiB from loopback, best of %d\n", rounds);
    printf("  curl -o /dev/null : %.3f s  (%.0f MiB/s)\n", best_curl, 100 / best_curl);
    printf("  curl start-up     : %.3f s  (a tiny request; part of the curl figure)\n", best_start);
    printf("  fetch, streamed   : %.3f s  (%.0f MiB/s)  ratio %.2f (target >= 0.8)\n", best_fetch,
           100 / best_fetch, best_curl / best_fetch);
    printf("  ratio without curl's start-up: %.2f\n", (best_curl - best_start) / best_fetch);
    printf("  fetch, buffered   : %.3f s  (%.0f MiB/s)  ratio %.2f\n", best_buf, 100 / best_buf,
           best_curl / best_buf);
    printf("  peak RSS growth, streamed: %ld KiB (transfer buffer 128 KiB)\n", rss_stream);
    printf("  peak RSS growth, buffered: %ld KiB (body 102400 KiB)\n", rss_buf);
    return 0;
}
