/*
 * drun_mcp_doctor.c - `drun-mcp doctor [--db PATH] [--config PATH]`.
 *
 * drun refuses to run a command unsandboxed, so a host where bubblewrap cannot build a
 * sandbox gives an agent nothing but errors. This command tells the operator why, before
 * an agent finds out: bwrap's presence and version, user namespaces (and AppArmor's
 * kernel.apparmor_restrict_unprivileged_userns, which Ubuntu 24.04 sets), the private
 * runtime directory, the config file (parsed, as drun-mcp would), the database (opened,
 * with its migrations applied, as drun-mcp would), and one real command in the sandbox.
 * Each line is "ok <check>: <what was found>" or "FAIL <check>: <what is wrong>; fix:
 * <the exact command or setting>". The sandbox probe is sandbox_probe(), the same code
 * session_bash uses to explain a sandbox that cannot start, so both give the same fix.
 */
#include "cmd/drun_mcp_doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host/host.h"
#include "policy/policy.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"
#include "util/userpath.h"
#include "workspace/workspace.h"

struct report {
    int failed;
};

static void
line_ok(const char *check, const char *what)
{
    printf("ok   %s: %s\n", check, what);
}

static void
line_fail(struct report *r, const char *check, const char *what, const char *fix)
{
    r->failed = 1;
    printf("FAIL %s: %s; fix: %s\n", check, what, fix);
}

static void
line_skip(const char *check, const char *why)
{
    printf("skip %s: %s\n", check, why);
}

/* bwrap, user namespaces, AppArmor and one real sandboxed command. */
static void
check_sandbox(struct report *r, const struct policy *pol)
{
    struct sandbox_probe p;
    struct err err;
    char what[SANDBOX_PATH_MAX + 128];
    int rc = sandbox_probe_as(pol ? (uint32_t)pol->sandbox_uid : 0,
                              pol ? (uint32_t)pol->sandbox_gid : 0, &p, &err);

    if (!p.bwrap_found) {
        line_fail(r, "bwrap", "bubblewrap is not installed", p.fix);
        line_skip("user namespaces", "needs bwrap");
        line_skip("sandbox", "needs bwrap");
        return;
    }
    snprintf(what, sizeof(what), "%s (%s)", p.bwrap_path,
             p.bwrap_version[0] ? p.bwrap_version : "version unknown");
    line_ok("bwrap", what);
    if (!p.userns_ok) {
        line_fail(r, "user namespaces", err.msg, p.fix);
        line_skip("sandbox", "needs user namespaces");
        return;
    }
    snprintf(what, sizeof(what), "an unprivileged user namespace can be created%s",
             p.apparmor_restrict == 1   ? " (AppArmor restricts them, but bwrap is allowed)"
             : p.apparmor_restrict == 0 ? " (kernel.apparmor_restrict_unprivileged_userns = 0)"
                                        : "");
    line_ok("user namespaces", what);
    if (geteuid() == 0) {
        /* Debian's bwrap is not setuid: a root daemon needs unprivileged user namespaces
         * for the sandbox user it starts bwrap as. */
        snprintf(what, sizeof(what),
                 "drun-mcp runs as root: commands run as host uid %lu, never root%s",
                 (unsigned long)p.run_uid,
                 p.userns_clone == 1 ? " (kernel.unprivileged_userns_clone = 1)" : "");
        line_ok("sandbox user", what);
    }
    if (rc < 0 || !p.sandbox_ok) {
        line_fail(r, "sandbox", err.msg,
                  p.fix[0]
                      ? p.fix
                      : "run 'bwrap --unshare-all --ro-bind / / true' and fix what it reports");
        return;
    }
    line_ok("sandbox",
            "a test command ran in the sandbox with no network and printed what it should");
}

/*
 * Poppler's pdftotext, which session_extract_text runs in its sandbox (whose PATH is
 * /usr/local/bin:/usr/bin:/bin). Without it only that tool fails, so this is a warning.
 */
static void
check_pdftotext(void)
{
    static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
    char path[64], what[128];

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(path, sizeof(path), "%s/pdftotext", dirs[i]);
        if (access(path, X_OK) == 0) {
            snprintf(what, sizeof(what), "%s (for session_extract_text)", path);
            line_ok("pdftotext", what);
            return;
        }
    }
    printf("warn pdftotext: not installed, so session_extract_text fails; fix: install Poppler's "
           "tools: 'sudo apt-get install poppler-utils' (macOS: 'brew install poppler')\n");
}

/* The tools doctor tries, each with the argument that makes it print and exit 0. */
static const char *const toolchain_probes[][2] = {
    {"sh", "-c true"},     {"python3", "--version"}, {"python", "--version"}, {"pip3", "--version"},
    {"node", "--version"}, {"npm", "--version"},     {"git", "--version"},    {"cc", "--version"},
    {"make", "--version"}, {"cargo", "--version"},   {"rustc", "--version"},  {"go", "version"},
    {"ruby", "--version"}, {"java", "-version"},     {"deno", "--version"},   {"bun", "--version"},
    {"uv", "--version"},
};

/* The first executable `name` on path_env into out; 0 if there is none. */
static int
host_which(const char *path_env, const char *name, char *out, size_t size)
{
    const char *p = path_env;

    while (p != NULL && *p != '\0') {
        size_t n = strcspn(p, ":");
        if (n > 0 && p[0] == '/' &&
            (size_t)snprintf(out, size, "%.*s/%s", (int)n, p, name) < size &&
            access(out, X_OK) == 0) {
            return 1;
        }
        p += n;
        if (*p == ':') {
            p++;
        }
    }
    return 0;
}

/* The first line of a stream's tail, for a one-line reason. */
static void
first_line(const struct sandbox_output *o, char *out, size_t size)
{
    size_t n = 0;

    while (n < o->tail_len && o->tail[n] != '\n' && n + 1 < size) {
        out[n] = (o->tail[n] >= 0x20 && o->tail[n] < 0x7f) ? o->tail[n] : '?';
        n++;
    }
    out[n] = '\0';
}

/*
 * Each tool of toolchain_probes found on this $PATH, run in a sandbox built as
 * session_bash builds it (the same $PATH binds, shim roots and mount_allowlist), so a
 * tool that works on the host and exits 127 in the sandbox is named here, not by an
 * agent's first failed command.
 */
static void
check_toolchains(struct report *r, const struct policy *p)
{
    const char *path_env = getenv("PATH");
    struct host_toolchain tc;
    const char *ro[SANDBOX_RO_PATHS_MAX], *env[2 + HOST_TOOLCHAIN_ENV_MAX];
    size_t n_ro = 0, n_env = 0;
    char ws[] = "/tmp/drun-doctor-XXXXXX";
    struct buf ran;
    struct err err;
    uint32_t uid = 0, gid = 0;
    int failed = 0;

    if (host_toolchain_scan(path_env, &tc, &err) < 0) {
        line_fail(r, "toolchains", err.msg, "check $PATH");
        return;
    }
    {
        /* the scratch workspace belongs to the user commands run as (a root daemon's
         * sandbox_uid), as session_bash's workspaces do */
        struct sandbox_spec who;
        memset(&who, 0, sizeof(who));
        who.uid = p != NULL ? (uint32_t)p->sandbox_uid : 0;
        who.gid = p != NULL ? (uint32_t)p->sandbox_gid : 0;
        sandbox_user(&who, &uid, &gid);
    }
    if (mkdtemp(ws) == NULL || (geteuid() == 0 && chown(ws, uid, gid) != 0)) {
        line_skip("toolchains", "cannot make a scratch workspace in /tmp");
        rmdir(ws);
        host_toolchain_release(&tc);
        return;
    }
    buf_init(&ran, 1024);
    for (size_t i = 0; i < tc.n_dirs; i++) {
        ro[n_ro++] = tc.dirs[i];
    }
    for (size_t i = 0; p != NULL && i < p->mount_allowlist.n && n_ro < SANDBOX_RO_PATHS_MAX; i++) {
        if (strcmp(p->mount_allowlist.v[i], "/") != 0) {
            ro[n_ro++] = p->mount_allowlist.v[i];
        }
    }
    for (size_t i = 0; i < tc.n_env; i++) {
        env[n_env++] = tc.env[i];
    }
    for (size_t t = 0; t < sizeof(toolchain_probes) / sizeof(toolchain_probes[0]); t++) {
        const char *name = toolchain_probes[t][0];
        char where[SANDBOX_PATH_MAX], cmd[256], what[SANDBOX_PATH_MAX + 1024], why[512];
        struct sandbox_spec spec;
        struct sandbox_result res;

        if (!host_which(path_env, name, where, sizeof(where))) {
            continue;
        }
        snprintf(cmd, sizeof(cmd), "%s %s </dev/null >/dev/null", name, toolchain_probes[t][1]);
        memset(&spec, 0, sizeof(spec));
        memset(&res, 0, sizeof(res));
        spec.workspace_dir = ws;
        spec.ro_paths = ro;
        spec.n_ro_paths = n_ro;
        spec.env = env;
        spec.n_env = n_env;
        spec.path_env = tc.path;
        spec.command = cmd;
        spec.command_len = strlen(cmd);
        sandbox_limits_default(&spec.limits);
        spec.limits.timeout_ms = 30000;
        spec.uid = uid;
        spec.gid = gid;
        if (sandbox_run(&spec, &res, &err) < 0 || res.failed) {
            snprintf(what, sizeof(what), "'%s' cannot be tried: %s", where,
                     res.failed ? res.error.msg : err.msg);
            line_fail(r, "toolchains", what, "run 'drun-mcp doctor' again once the sandbox works");
            sandbox_result_release(&res);
            break;
        }
        if (res.exit_code != 0) {
            first_line(&res.err, why, sizeof(why));
            snprintf(what, sizeof(what), "'%s' runs on the host but exits %d in the sandbox%s%s%s",
                     where, res.exit_code, why[0] ? " (" : "", why, why[0] ? ")" : "");
            if (!sandbox_reachable(where, uid, gid)) {
                printf("FAIL toolchain %s: %s; fix: the sandbox user (uid %lu, sandbox_uid) "
                       "cannot reach '%s': make every directory on the way searchable by it "
                       "(chmod o+x), install the tool elsewhere, or set sandbox_uid\n",
                       name, what, (unsigned long)uid, where);
            } else {
                printf("FAIL toolchain %s: %s; fix: %s\n", name, what,
                       res.exit_code == 127
                           ? "it or what it runs lives where drun binds nothing (the top of "
                             "$HOME, or a manager root no variable names): export the manager's "
                             "root (PYENV_ROOT, RBENV_ROOT, ASDF_DATA_DIR, MISE_DATA_DIR, "
                             "VOLTA_HOME, HOMEBREW_PREFIX) to drun-mcp, install it outside "
                             "$HOME's top level, or add its directory to mount_allowlist"
                           : "run it by hand with the same PATH to see what it needs");
            }
            r->failed = 1;
            failed++;
        } else {
            buf_printf(&ran, "%s%s", ran.len > 0 ? ", " : "", name);
        }
        sandbox_result_release(&res);
    }
    rmdir(ws);
    if (ran.len > 0) {
        buf_puts(&ran, failed ? " run in the sandbox" : " run in the sandbox (every one found)");
        line_ok("toolchains", buf_cstr(&ran));
    } else if (!failed) {
        line_skip("toolchains", "none of the usual tools is on $PATH");
    }
    buf_release(&ran);
    host_toolchain_release(&tc);
}

/* The runtime directory the workspaces live in (made 0700 if missing, as drun-mcp does). */
static void
check_runtime(struct report *r, const struct policy *p)
{
    struct buf dir;
    struct err err;
    char probe[SANDBOX_PATH_MAX + 32];

    buf_init(&dir, SANDBOX_PATH_MAX);
    if (ws_runtime_dir(p ? p->runtime_dir : NULL, &dir, &err) < 0) {
        line_fail(r, "runtime directory", err.msg,
                  "set runtime_dir in config.toml to a directory you own with mode 0700, or "
                  "fix the one named ('chmod 700 DIR', 'chown $USER DIR')");
        buf_release(&dir);
        return;
    }
    snprintf(probe, sizeof(probe), "%s/doctor-XXXXXX", buf_cstr(&dir));
    if (mkdtemp(probe) == NULL) {
        char what[SANDBOX_PATH_MAX + 64];
        snprintf(what, sizeof(what), "cannot create a directory in '%s': %s", buf_cstr(&dir),
                 strerror(errno));
        line_fail(r, "runtime directory", what,
                  "make it writable by this user, or set runtime_dir in config.toml");
    } else if (geteuid() == 0 &&
               !sandbox_reachable(buf_cstr(&dir), p ? (uint32_t)p->sandbox_uid : 65534,
                                  p ? (uint32_t)p->sandbox_gid : 65534)) {
        char what[SANDBOX_PATH_MAX + 128];
        rmdir(probe);
        snprintf(what, sizeof(what),
                 "'%s' cannot be reached by the sandbox user; drun-mcp uses /tmp/drun-root "
                 "instead unless runtime_dir is set",
                 buf_cstr(&dir));
        line_ok("runtime directory", what);
    } else {
        rmdir(probe);
        line_ok("runtime directory", buf_cstr(&dir));
    }
    buf_release(&dir);
}

/* Writes text to a /proc file; 0 or -1 (errno set). */
static int
proc_write(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    size_t n = strlen(text);
    ssize_t w;

    if (fd < 0) {
        return -1;
    }
    w = write(fd, text, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/*
 * The mount namespace the workspaces are mounted in. Slave to the host's: the daemon
 * still sees mounts the host makes later, and the host never sees the workspaces, which
 * vanish with the process even on kill -9. An unprivileged daemon's user namespace maps
 * only its own uid and gid to themselves, so it keeps its identity (files it writes are
 * its own, ownership checks see the same uid) and gains the right to mount there only;
 * bwrap, started from it, nests each sandbox's user namespace below it.
 */
int
drun_mcp_bound_enter(char *why, size_t n)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    char map[64];

    if (uid != 0) {
        if (getuid() != uid || getgid() != gid) {
            snprintf(why, n, "drun-mcp runs set-uid or set-gid, so it cannot map its ids");
            return -1;
        }
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(why, n, "cannot create a user namespace for the workspace mounts: %s",
                     strerror(errno));
            return -1;
        }
        snprintf(map, sizeof(map), "%lu %lu 1", (unsigned long)uid, (unsigned long)uid);
        if (proc_write("/proc/self/uid_map", map) != 0 ||
            proc_write("/proc/self/setgroups", "deny") != 0) {
            snprintf(why, n, "cannot map uid %lu in the workspace namespace: %s",
                     (unsigned long)uid, strerror(errno));
            return -1;
        }
        snprintf(map, sizeof(map), "%lu %lu 1", (unsigned long)gid, (unsigned long)gid);
        if (proc_write("/proc/self/gid_map", map) != 0) {
            snprintf(why, n, "cannot map gid %lu in the workspace namespace: %s",
                     (unsigned long)gid, strerror(errno));
            return -1;
        }
    } else if (unshare(CLONE_NEWNS) != 0) {
        snprintf(why, n, "cannot make a private mount namespace: %s", strerror(errno));
        return -1;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) {
        snprintf(why, n, "cannot make the mount namespace private: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * The disk bound, probed as drun-mcp does it, in a child so this process stays where it
 * is: enter the namespace, mount a 1 MiB tmpfs on a scratch directory under the runtime
 * directory, and write 2 MiB into it, which must fail with ENOSPC.
 */
static void
check_disk_bound(struct report *r, const struct policy *p)
{
    struct buf dir;
    struct err err;
    char scratch[SANDBOX_PATH_MAX + 32];
    char why[256] = "";
    int fds[2];
    pid_t pid;
    int st = 0;
    ssize_t got;

    buf_init(&dir, SANDBOX_PATH_MAX);
    if (ws_runtime_dir(p ? p->runtime_dir : NULL, &dir, &err) < 0) {
        buf_release(&dir);
        line_skip("disk bound", "needs the runtime directory");
        return;
    }
    snprintf(scratch, sizeof(scratch), "%s/doctor-XXXXXX", buf_cstr(&dir));
    buf_release(&dir);
    if (mkdtemp(scratch) == NULL || pipe2(fds, O_CLOEXEC) != 0) {
        line_skip("disk bound", "cannot make a scratch directory");
        return;
    }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        static char block[65536];
        int fd;
        size_t total = 0;

        close(fds[0]);
        if (drun_mcp_bound_enter(why, sizeof(why)) < 0) {
            (void)!write(fds[1], why, strlen(why));
            _exit(1);
        }
        if (mount("drun-doctor", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=1048576") != 0) {
            snprintf(why, sizeof(why), "cannot mount a tmpfs in the workspace namespace: %s",
                     strerror(errno));
            (void)!write(fds[1], why, strlen(why));
            _exit(1);
        }
        fd = open(scratch, O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600);
        while (fd >= 0 && total < ((size_t)2 << 20) && write(fd, block, sizeof(block)) > 0) {
            total += sizeof(block);
        }
        if (fd < 0 || total >= ((size_t)2 << 20) || errno != ENOSPC) {
            snprintf(why, sizeof(why), "a 1 MiB workspace mount took %zu bytes without ENOSPC",
                     total);
            (void)!write(fds[1], why, strlen(why));
            _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    got = pid > 0 ? read(fds[0], why, sizeof(why) - 1) : -1;
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    rmdir(scratch);
    if (pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        line_ok("disk bound",
                geteuid() == 0
                    ? "each workspace is a size-capped tmpfs (max_workspace_mb) in a private mount "
                      "namespace: a command sees ENOSPC at the limit"
                    : "each workspace is a size-capped tmpfs (max_workspace_mb), mounted from "
                      "drun-mcp's own user namespace: a command sees ENOSPC at the limit");
        return;
    }
    line_fail(r, "disk bound", why[0] ? why : "the probe failed",
              geteuid() == 0
                  ? "allow mount namespaces for drun-mcp (it needs unshare(CLONE_NEWNS) and "
                    "mount), or accept that a command can fill the disk holding runtime_dir "
                    "until it ends"
                  : "allow unprivileged user namespaces for drun-mcp ('sysctl -w "
                    "user.max_user_namespaces=15000'; on Ubuntu 24.04 an AppArmor profile "
                    "with 'userns,' for drun-mcp, or 'sysctl -w "
                    "kernel.apparmor_restrict_unprivileged_userns=0'), or run drun-mcp as "
                    "root; until then a command can fill the disk holding runtime_dir until "
                    "it ends");
}

/* Loads config.toml as drun-mcp would; *out gets the policy (or NULL). */
static void
check_config(struct report *r, const char *cli, struct policy **out)
{
    char *path = NULL;
    int explicit_path = 0;
    struct err err;
    char what[ERR_MSG_MAX + 4200];

    *out = NULL;
    if (policy_config_path(cli, &path, &explicit_path, &err) < 0) {
        line_fail(r, "config", err.msg, "pass --config /absolute/path/config.toml or set HOME");
        return;
    }
    if (policy_load_file(path, out, &err) < 0) {
        if (err.code == ERR_NOTFOUND && !explicit_path) {
            snprintf(what, sizeof(what), "no file at '%s'; the built-in defaults apply", path);
            line_ok("config", what);
            *out = policy_defaults();
        } else {
            snprintf(what, sizeof(what), "'%s': %s", path, err.msg);
            line_fail(r, "config", what,
                      "correct the key named in config.toml (see docs/configuration.md); "
                      "drun-mcp keeps refusing policy-dependent calls until it parses");
        }
    } else {
        snprintf(what, sizeof(what), "'%s' parses (%zu warning%s)", path, (*out)->warnings.n,
                 (*out)->warnings.n == 1 ? "" : "s");
        line_ok("config", what);
        for (size_t i = 0; i < (*out)->warnings.n; i++) {
            printf("     warning: %s\n", (*out)->warnings.v[i]);
        }
    }
    mem_free(path);
}

/* Opens the DB as drun-mcp would (creating it if it does not exist yet). */
static void
check_db(struct report *r, const char *db, const struct policy *p)
{
    struct store_opts opts;
    struct store *st = NULL;
    struct err err;
    char what[ERR_MSG_MAX + 4200];
    char *expanded = NULL;

    if ((db == NULL || db[0] == '\0') && p != NULL && p->db_path != NULL) {
        db = p->db_path;
    }
    if (db == NULL || db[0] == '\0') {
        line_fail(r, "database", "no database named",
                  "pass --db /path/to/drun.db, set DRUN_DB=/path/to/drun.db, or set db_path in "
                  "config.toml");
        return;
    }
    /* as drun-mcp does: "~" expanded, a missing directory made (0700) */
    expanded = userpath_expand(db, &err);
    if (expanded == NULL || userpath_make_parent(expanded, NULL, NULL, 0, &err) < 0) {
        snprintf(what, sizeof(what), "cannot use '%s': %s", db, err.msg);
        line_fail(r, "database", what, "name a path in a directory you can create or write");
        mem_free(expanded);
        return;
    }
    db = expanded;
    memset(&opts, 0, sizeof(opts));
    if (store_open(db, &opts, &st, &err) < 0) {
        snprintf(what, sizeof(what), "cannot open '%s': %s", db, err.msg);
        line_fail(r, "database", what,
                  err.code == ERR_CORRUPT   ? "restore it from a backup or 'drun-admin db check'"
                  : err.code == ERR_VERSION ? "use the newer drun that wrote it"
                                            : "name a writable path with --db (its directory must "
                                              "exist and be writable)");
        mem_free(expanded);
        return;
    }
    store_close(st);
    snprintf(what, sizeof(what), "'%s' opens", db);
    line_ok("database", what);
    mem_free(expanded);
}

static void
usage(FILE *stream)
{
    fprintf(stream, "usage: drun-mcp doctor [--db PATH] [--config PATH]\n"
                    "Checks bwrap, user namespaces, the runtime directory, the config, the "
                    "database, one\nsandboxed command and the $PATH toolchains; prints one line "
                    "per check and exits "
                    "0 if all pass, 1 otherwise.\n");
}

int
drun_mcp_doctor(int argc, char **argv, const char *db, const char *config)
{
    struct report r = {0};
    struct policy *p = NULL;
    int sandbox_ok;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0 && i + 1 < argc) {
            db = argv[++i];
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "drun-mcp doctor: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (db == NULL || db[0] == '\0') {
        db = getenv("DRUN_DB");
    }
    check_config(&r, config, &p);
    {
        int before = r.failed;
        r.failed = 0;
        check_sandbox(&r, p);
        sandbox_ok = !r.failed;
        r.failed |= before;
    }
    check_runtime(&r, p);
    check_pdftotext();
    check_disk_bound(&r, p);
    check_db(&r, db, p);
    if (sandbox_ok) {
        check_toolchains(&r, p);
    } else {
        line_skip("toolchains", "needs the sandbox");
    }
    policy_unref(p);
    printf("%s\n", r.failed
                       ? "some checks failed: apply the fixes above and run 'drun-mcp doctor' again"
                       : "all checks passed");
    fflush(stdout);
    return r.failed ? 1 : 0;
}
