/*
 * drun_mcp.c - the drun-mcp program: argv, the DB, fd set-up, signals, exit codes.
 *
 * An MCP client starts drun-mcp as a child and talks JSON-RPC on its stdin/stdout. The
 * first thing it does is keep a private copy of fd 1 for protocol output and point fd 1
 * at stderr: a stray printf anywhere (ours or a library's) then lands in the log instead
 * of corrupting the protocol stream. SIGPIPE is ignored so a client that goes away is
 * an EPIPE the transport handles (clean shutdown), not a silent death.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "mcp/mcp.h"
#include "store/store.h"
#include "tools/tools.h"
#include "util/log.h"
#include "util/mem.h"

#ifndef DRUN_VERSION
#define DRUN_VERSION "0.1.0"
#endif

static void
usage(void)
{
    fprintf(stderr, "usage: drun-mcp --db PATH [--config PATH] [--max-line-bytes N] [-v]\n"
                    "\n"
                    "Serves MCP (newline-delimited JSON-RPC) on stdin/stdout; logs go to stderr.\n"
                    "The database is named by --db, else by the DRUN_DB environment variable.\n"
                    "Client configuration:\n"
                    "  {\"command\": \"/path/to/drun-mcp\", \"args\": [\"--db\", "
                    "\"/path/to/drun.db\"]}\n");
}

static int
parse_size(const char *s, size_t *out)
{
    char *end = NULL;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1024 || v > ((unsigned long long)1 << 32)) {
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

int
main(int argc, char **argv)
{
    const char *db = NULL, *config = NULL;
    struct mcp_opts opts;
    struct tools_env env;
    struct store *st = NULL;
    struct err err;
    cJSON_Hooks hooks = {mem_alloc, mem_free};
    int verbose = 0;
    int out_fd;

    memset(&opts, 0, sizeof(opts));
    memset(&env, 0, sizeof(env));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--db") == 0 && i + 1 < argc) {
            db = argv[++i];
        } else if (strcmp(a, "--config") == 0 && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(a, "--max-line-bytes") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &opts.max_line_bytes) < 0) {
                fprintf(stderr,
                        "drun-mcp: --max-line-bytes '%s' must be a number of bytes "
                        "from 1024 to 4294967296\n",
                        argv[i]);
                return 2;
            }
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose++;
        } else if (strcmp(a, "-vv") == 0) {
            verbose += 2;
        } else if (strcmp(a, "--version") == 0) {
            fprintf(stderr, "drun-mcp %s\n", DRUN_VERSION);
            return 0;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "drun-mcp: unknown or incomplete option '%s'\n", a);
            usage();
            return 2;
        }
    }
    if (db == NULL || db[0] == '\0') {
        db = getenv("DRUN_DB");
    }
    if (config == NULL) {
        config = getenv("DRUN_CONFIG");
    }
    if (db == NULL || db[0] == '\0') {
        fprintf(stderr, "drun-mcp: no database named; start it as 'drun-mcp --db "
                        "/path/to/drun.db' or set DRUN_DB=/path/to/drun.db\n");
        return 2;
    }

    /* stdout belongs to the protocol: keep a private copy, point fd 1 at stderr. */
    out_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (out_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "drun-mcp: cannot set up stdout for the protocol: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    cJSON_InitHooks(&hooks);
    log_init("drun-mcp", verbose >= 2 ? LOG_DEBUG : verbose == 1 ? LOG_INFO : LOG_WARN);

    if (store_open(db, NULL, &st, &err) < 0) {
        log_error("cannot open the database '%s': %s", db, err.msg);
        return 1;
    }
    if (tools_registry_init(&err) < 0) {
        log_error("cannot register the tools: %s", err.msg);
        store_close(st);
        return 1;
    }
    env.store = st;
    env.db_path = db;
    env.config_path = config;
    env.server_version = DRUN_VERSION;
    opts.in_fd = STDIN_FILENO;
    opts.out_fd = out_fd;
    if (mcp_serve(&env, &opts, &err) < 0) {
        log_error("%s", err.msg);
        store_close(st);
        return 1;
    }
    store_close(st);
    tools_registry_reset();
    close(out_fd);
    return 0;
}
