/*
 * drun_mcp.c - the drun-mcp program: argv, the DB, fd set-up, signals, exit codes.
 *
 * An MCP client starts drun-mcp as a child and talks JSON-RPC on its stdin/stdout. The
 * first thing it does is keep a private copy of fd 1 for protocol output and point fd 1
 * at stderr: a stray printf anywhere (ours or a library's) then lands in the log instead
 * of corrupting the protocol stream.
 *
 * Signals. SIGPIPE is ignored so a client that goes away is an EPIPE the transport
 * handles (clean shutdown), not a silent death. SIGXFSZ is ignored so a file-size limit
 * (ulimit -f, prlimit --fsize) makes the write that passes it fail with EFBIG, which the
 * call in flight reports as an error, instead of killing the daemon mid-call. SIGHUP,
 * like SIGTERM and SIGINT, is caught by the transport and begins a clean shutdown; it is
 * ignored until then so a hang-up during start-up cannot kill it half-way. Sandboxed
 * commands get every disposition reset to the default (sandbox/bwrap_child.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cmd/drun_mcp_doctor.h"
#include "cmd/drun_mcp_init.h"
#include "host/host.h"
#include "mcp/mcp.h"
#include "session/session.h"
#include "policy/policy.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "tools/tools.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/userpath.h"
#include "workspace/workspace.h"

#ifndef DRUN_VERSION
#define DRUN_VERSION "0.1.0"
#endif

static void
usage(FILE *stream)
{
    fprintf(stream, "usage: drun-mcp --db PATH [--config PATH] [--max-line-bytes N] "
                    "[--max-queue-bytes N] [--client-stall-ms MS] [-v]\n"
                    "       drun-mcp [--config PATH] config add-path|remove-path|add-domain|"
                    "remove-domain|list [ARG] [--config PATH]\n"
                    "       drun-mcp doctor [--db PATH] [--config PATH]\n"
                    "       drun-mcp init claude|codex|gemini|cursor|vscode [--db PATH] "
                    "[--dry-run]\n"
                    "       drun-mcp --version | --help\n"
                    "\n"
                    "Serves MCP (newline-delimited JSON-RPC) on stdin/stdout; logs go to stderr.\n"
                    "The database is named by --db, else by the DRUN_DB environment variable,\n"
                    "else by db_path in config.toml (--config, DRUN_CONFIG or "
                    "~/.drun/config.toml).\n"
                    "Client configuration:\n"
                    "  {\"command\": \"/path/to/drun-mcp\", \"args\": [\"--db\", "
                    "\"/path/to/drun.db\"]}\n");
}

/* `drun-mcp config ...`: edits config.toml in place (policy_config_cli) and exits. */
static int
config_main(int argc, char **argv, const char *config)
{
    struct err err;

    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: drun-mcp config add-path DIR | remove-path DIR | add-domain HOST | "
               "remove-domain HOST | list [--config PATH]\n"
               "Edits mount_allowlist or domain_allowlist in config.toml in place, keeping "
               "comments (docs/configuration.md).\n");
        return 0;
    }
    if (policy_config_cli(argc, argv, config, stdout, &err) < 0) {
        fprintf(stderr, "drun-mcp: %s\n", err.msg);
        return err.code == ERR_INVAL ? 2 : 1;
    }
    return 0;
}

/*
 * Everything a daemon must not leave behind, on every way out (input EOF, SIGTERM,
 * SIGINT, SIGHUP, a fatal error after start-up): detaching every session kills its
 * prepared sandbox and removes its workspace and then this process's runtime directory;
 * sandbox_cleanup() then kills whatever sandbox is still alive (a call that outstayed the
 * shutdown grace) and removes every pids cgroup we made. After a kill -9, where none of
 * this runs, the next daemon's session_mgr_sweep() does it.
 */
static void
shutdown_all(struct tools_env *env, struct store *st)
{
    session_mgr_free(env->sessions);
    env->sessions = NULL;
    if (sandbox_cleanup() > 0) {
        log_warn("some sandbox cgroups could not be removed; the next drun-mcp retries");
    }
    store_close(st);
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

/* The disk bound: see drun_mcp_bound_enter(). */
static void
bound_workspaces(void)
{
    const char *v = getenv("DRUN_WORKSPACE_BOUND");
    char why[256];

    if (v != NULL && strcmp(v, "off") == 0) {
        return; /* the escape hatch, and the benchmarks' "before" */
    }
    if (drun_mcp_bound_enter(why, sizeof(why)) < 0) {
        fprintf(stderr,
                "drun-mcp: warn: %s; workspaces are bounded only after each command (run "
                "'drun-mcp doctor')\n",
                why);
        return;
    }
    ws_bound_enable(1);
}

/*
 * Puts drun's own files behind every host door (host.h, rule 4): the config file, the
 * DB and its companions, the runtime directory and snapshots_dir. A failure is logged,
 * not fatal: the allowlist still decides, and a missing directory has nothing to guard.
 */
static void
register_own_files(struct policy_store *ps, const char *config_path, const char *db)
{
    struct policy *p = NULL;
    struct buf rt;
    struct err err;

    if (host_own_add_file(config_path, &err) < 0) {
        log_warn("cannot guard the config file '%s': %s", config_path, err.msg);
    }
    if (host_own_add_db(db, &err) < 0) {
        log_warn("cannot guard the database '%s': %s", db, err.msg);
    }
    buf_init(&rt, 8192);
    if (policy_current(ps, &p, &err) == 0) {
        if (ws_runtime_dir(p->runtime_dir, &rt, &err) == 0 &&
            host_own_add_tree(buf_cstr(&rt), &err) < 0) {
            log_warn("cannot guard the runtime directory: %s", err.msg);
        }
        if (host_own_add_snapshots(p->snapshots_dir, &err) < 0) {
            log_warn("cannot guard snapshots_dir: %s", err.msg);
        }
        policy_unref(p);
    } else if (ws_runtime_dir(NULL, &rt, &err) == 0 && host_own_add_tree(buf_cstr(&rt), &err) < 0) {
        log_warn("cannot guard the runtime directory: %s", err.msg);
    }
    buf_release(&rt);
}

int
main(int argc, char **argv)
{
    const char *db = NULL, *config = NULL;
    char *config_path = NULL, *db_owned = NULL, *runtime_dir = NULL;
    struct policy_store *policy = NULL;
    struct store_opts sopts;
    int config_explicit = 0;
    struct mcp_opts opts;
    struct tools_env env;
    struct store *st = NULL;
    struct err err;
    cJSON_Hooks hooks = {mem_alloc, mem_free};
    int verbose = 0;
    int out_fd;

    memset(&opts, 0, sizeof(opts));
    memset(&env, 0, sizeof(env));
    signal(SIGHUP, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
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
        } else if (strcmp(a, "--max-queue-bytes") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &opts.max_queue_bytes) < 0) {
                fprintf(stderr,
                        "drun-mcp: --max-queue-bytes '%s' must be a number of bytes "
                        "from 1024 to 4294967296\n",
                        argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--client-stall-ms") == 0 && i + 1 < argc) {
            size_t ms = 0;
            if (parse_size(argv[++i], &ms) < 0 || ms > 86400000) {
                fprintf(stderr,
                        "drun-mcp: --client-stall-ms '%s' must be a number of milliseconds "
                        "from 1024 to 86400000 (a day)\n",
                        argv[i]);
                return 2;
            }
            opts.stall_ms = (int)ms;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose++;
        } else if (strcmp(a, "-vv") == 0) {
            verbose += 2;
        } else if (strcmp(a, "--version") == 0) {
            printf("drun-mcp %s\n", DRUN_VERSION);
            return 0;
        } else if (strcmp(a, "config") == 0) {
            return config_main(argc - i - 1, argv + i + 1, config);
        } else if (strcmp(a, "doctor") == 0) {
            return drun_mcp_doctor(argc - i - 1, argv + i + 1, db, config);
        } else if (strcmp(a, "init") == 0) {
            return drun_mcp_init_main(argc - i - 1, argv + i + 1, db, config);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "drun-mcp: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (db == NULL || db[0] == '\0') {
        db = getenv("DRUN_DB");
    }
    /*
     * The policy is loaded before the DB so that db_path and sqlite_synchronous can come
     * from it. A config that fails to load does not stop start-up (tools that need policy
     * refuse with its error, get_config shows it) unless the DB path was to come from it.
     */
    memset(&sopts, 0, sizeof(sopts));
    /* The WAL is checkpointed on a store thread, off the tool call's path (docs/
     * architecture.md, "Checkpoints"); DRUN_WAL_THREAD=0 restores SQLite's automatic
     * checkpoint on commits, for benchmarks and as an escape hatch. */
    sopts.wal_thread = getenv("DRUN_WAL_THREAD") == NULL || strcmp(getenv("DRUN_WAL_THREAD"), "0");
    /* How long a call waits for another process's write lock (off the loop) before it
     * fails with store_busy; 5000 ms unless DRUN_BUSY_TIMEOUT_MS says otherwise. */
    if (getenv("DRUN_BUSY_TIMEOUT_MS") != NULL) {
        char *end = NULL;
        long v;
        errno = 0;
        v = strtol(getenv("DRUN_BUSY_TIMEOUT_MS"), &end, 10);
        if (errno != 0 || end == getenv("DRUN_BUSY_TIMEOUT_MS") || *end != '\0' || v < 1 ||
            v > 600000) {
            fprintf(stderr,
                    "drun-mcp: DRUN_BUSY_TIMEOUT_MS='%s' must be a number of milliseconds from 1 "
                    "to 600000\n",
                    getenv("DRUN_BUSY_TIMEOUT_MS"));
            return 2;
        }
        sopts.busy_timeout_ms = (int)v;
    }
    if (policy_config_path(config, &config_path, &config_explicit, &err) < 0 ||
        policy_store_open(config_path, config_explicit, &policy, &err) < 0) {
        fprintf(stderr, "drun-mcp: %s\n", err.msg);
        mem_free(config_path);
        return 2;
    }
    {
        struct policy *p = NULL;
        if (policy_current(policy, &p, &err) == 0) {
            if ((db == NULL || db[0] == '\0') && p->db_path != NULL) {
                db = db_owned = mem_strdup(p->db_path);
            }
            sopts.synchronous_normal = p->sqlite_synchronous == POLICY_SYNC_NORMAL;
            /* runtime_dir is read once: workspaces do not move under a running daemon. */
            if (p->runtime_dir != NULL) {
                runtime_dir = mem_strdup(p->runtime_dir);
            }
            policy_unref(p);
        } else if (db == NULL || db[0] == '\0') {
            fprintf(stderr, "drun-mcp: no database named and config '%s' cannot be used: %s\n",
                    config_path, err.msg);
            policy_store_free(policy);
            mem_free(config_path);
            return 2;
        }
    }
    if (db == NULL || db[0] == '\0') {
        fprintf(stderr,
                "drun-mcp: no database named; start it as 'drun-mcp --db "
                "/path/to/drun.db', set DRUN_DB=/path/to/drun.db, or set db_path in "
                "'%s'\n",
                config_path);
        policy_store_free(policy);
        mem_free(config_path);
        mem_free(runtime_dir);
        return 2;
    }

    /* "~/.drun/drun.db" from a client's JSON config or DRUN_DB reaches us unexpanded,
     * and a fresh machine has no ~/.drun yet: expand, and make the directory (0700). */
    {
        char made[4096];
        int created = 0;
        char *expanded = userpath_expand(db, &err);

        if (expanded == NULL ||
            userpath_make_parent(expanded, &created, made, sizeof(made), &err) < 0) {
            fprintf(stderr, "drun-mcp: cannot use the database '%s': %s\n", db, err.msg);
            mem_free(expanded);
            policy_store_free(policy);
            mem_free(config_path);
            mem_free(db_owned);
            mem_free(runtime_dir);
            return 1;
        }
        if (created) {
            fprintf(stderr, "drun-mcp: created the directory '%s' (mode 0700) for the database\n",
                    made);
        }
        mem_free(db_owned);
        db = db_owned = expanded;
    }
    bound_workspaces();

    /* stdout belongs to the protocol: keep a private copy, point fd 1 at stderr. */
    out_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (out_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "drun-mcp: cannot set up stdout for the protocol: %s\n", strerror(errno));
        mem_free(runtime_dir);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    cJSON_InitHooks(&hooks);
    log_init("drun-mcp", verbose >= 2 ? LOG_DEBUG : verbose == 1 ? LOG_INFO : LOG_WARN);

    if (store_open(db, &sopts, &st, &err) < 0) {
        log_error("cannot open the database '%s': %s", db, err.msg);
        mem_free(runtime_dir);
        return 1;
    }
    register_own_files(policy, config_path, db);
    if (tools_registry_init(&err) < 0) {
        log_error("cannot register the tools: %s", err.msg);
        store_close(st);
        mem_free(runtime_dir);
        return 1;
    }
    if (session_mgr_new(st, runtime_dir, &env.sessions, &err) < 0) {
        log_error("cannot start the session manager: %s", err.msg);
        store_close(st);
        mem_free(runtime_dir);
        return 1;
    }
    register_own_files(policy, config_path, db);
    /* What dead drun processes left: runtime directories, sandbox cgroups. */
    if (session_mgr_sweep(env.sessions, &err) < 0) {
        log_warn("%s", err.msg);
    }
    /* The root actually used (a root daemon may have moved to /tmp/drun-root): guarded
     * like the configured one. */
    if (session_mgr_runtime_root(env.sessions) != NULL &&
        host_own_add_tree(session_mgr_runtime_root(env.sessions), &err) < 0) {
        log_warn("cannot guard the runtime directory: %s", err.msg);
    }
    env.store = st;
    env.db_path = db;
    env.config_path = config_path;
    env.policy = policy;
    env.server_version = DRUN_VERSION;
    opts.in_fd = STDIN_FILENO;
    opts.out_fd = out_fd;
    if (mcp_serve(&env, &opts, &err) < 0) {
        log_error("%s", err.msg);
        shutdown_all(&env, st);
        mem_free(runtime_dir);
        return 1;
    }
    signal(SIGHUP, SIG_IGN); /* the transport's handler is gone; finish cleaning up */
    /* Releases every claim, so another drun-mcp can attach these sessions at once. */
    shutdown_all(&env, st);
    tools_registry_reset();
    policy_store_free(policy);
    mem_free(config_path);
    mem_free(db_owned);
    mem_free(runtime_dir);
    close(out_fd);
    return 0;
}
