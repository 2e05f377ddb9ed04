/*
 * bwrap.c - the Linux sandbox: bubblewrap, a seccomp filter, rlimits and a pids cgroup.
 *
 * Design. One bwrap process per command, its argv built before the fork (never a shell
 * string). The mount plan is in sandbox-profiles/linux-mounts.md; in short: a size-capped
 * tmpfs at /tmp first (a later bind under /tmp must not be hidden by it, reference
 * section 14 item 1), read-only system directories with /bin, /lib, /lib64, /sbin
 * recreated as links on merged-/usr hosts (item 2), a narrow read-only /etc, the caller's
 * read-only paths, a fresh /proc and minimal /dev with a capped /dev/shm, the workspace
 * read-write at /workspace, overlays read-only on top, and finally the sandbox's own root
 * remounted read-only so nothing can be written outside /workspace, /tmp and /dev/shm.
 *
 * Why we start bwrap ourselves instead of uv_spawn: uv_spawn runs no code between fork
 * and exec, and we need four things there: (1) setrlimit for memory, CPU time, file
 * size and core dumps, which are inherited by bwrap and everything it starts; (2) joining
 * a fresh pids cgroup (when the daemon may create one) before bwrap can fork, so no
 * process escapes the count; (3) placing exactly the fds bwrap needs at fixed numbers
 * and closing every other one, including fds the daemon's own parent leaked to it without
 * close-on-exec; (4) resetting signal dispositions (an ignored SIGPIPE is inherited across
 * exec). The forked child runs only async-signal-safe calls (spawn_child, child_exec).
 * We then watch bwrap with a pidfd under uv_poll, which neither needs nor disturbs a
 * SIGCHLD handler.
 *
 * Killing. bwrap reports the host pid of the sandbox's pid 1 on --json-status-fd; we hold
 * a pidfd for it. Killing pid 1 of a pid namespace makes the kernel kill every process in
 * it, so background jobs, setsid double-forks and processes that ignore SIGTERM all die;
 * the kernel's pid-1 exit waits for them, so when bwrap is reaped the namespace is empty.
 * A command that ends normally gets the same: bwrap's pid 1 exits when the command does.
 *
 * The process limit. RLIMIT_NPROC set before bwrap would count every process of the
 * daemon's uid on the host (and is the cap of the new user namespace too), so it is set
 * inside the sandbox instead, by the shell prelude (`ulimit`), where the kernel (5.14+,
 * ucounts) counts per (user namespace, uid): one sandbox's fork bomb cannot starve
 * another. Real uid 0 is exempt from RLIMIT_NPROC, so when the daemon runs as root we put
 * bwrap in a fresh pids cgroup with pids.max instead (see docs/security.md).
 *
 * Never host root. A root daemon starts bwrap itself as an unprivileged host uid/gid
 * (sandbox_uid/sandbox_gid, 65534 by default): bwrap is not setuid, so the user namespace
 * it makes maps that uid, and nothing in the sandbox holds any power of host root over
 * host files, sysctls or devices. A namespace that only shows a non-zero uid inside but
 * maps host uid 0 would still pass root's ownership checks on /proc/sys (the
 * core_pattern attack: a pipe handler there runs a workspace file as host root).
 * /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus and /proc/fs are bound read-only
 * on top of the sandbox's /proc whatever the daemon's uid.
 *
 * Nothing outlives the daemon. The child sets PR_SET_PDEATHSIG (after it changed uid,
 * which clears it) and bwrap gets --die-with-parent. bwrap's own child waits on an eventfd
 * for its uid map, which has no EOF: killing bwrap in that window would leave it blocked
 * forever, so a bwrap whose child we do not know yet is stopped first and its children
 * killed before it (kill_unknown). A root daemon's sandboxes all sit in pids cgroups
 * named drun-sandbox-<pid>-<n>: sandbox_cleanup() empties and removes ours on exit and
 * sandbox_sweep() those of processes that died without it (kill -9).
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* The fds bwrap gets, at these numbers; everything else is closed. */
enum {
    FD_STATUS = 3,
    FD_SECCOMP = 4,
    FD_COMMAND = 5, /* cold: the memfd bound at COMMAND_PATH; warm: the script pipe */
    FD_EXECERR = 6,
    FD_BLOCK = 7, /* warm only: bwrap's --block-fd */
    FD_FIRST_FREE = 8
};

/* What build_argv passes on to bwrap besides the mounts. */
enum argv_kind {
    ARGV_RAW,  /* no fds, `echo hi` (sandbox_describe raw=1) */
    ARGV_COLD, /* the command in a memfd bound read-only at COMMAND_PATH */
    ARGV_WARM  /* --block-fd; the command arrives later through the script pipe */
};

#define COMMAND_PATH "/.drun/command"
/*
 * Warm scripts up to this size whose lines the shell reads with its `read` builtin (a few
 * syscalls) instead of exec'ing cat (a fork, an exec and a dynamic link, ~1 ms); longer
 * ones go through cat, which reads a 1 MiB script in a few reads instead of one byte
 * per syscall.
 */
#define WARM_READ_MAX 512
#define STATUS_MAX    4096
#define READ_CHUNK    65536
#define DRAIN_MS      5000 /* after a kill, how long pipes may take to reach EOF */

/* ---- argv vector ---------------------------------------------------------------- */

struct argv_vec {
    char **v;
    size_t n, cap;
    int failed;
};

static void
argv_push(struct argv_vec *a, const char *s)
{
    if (a->failed) {
        return;
    }
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        char **v = mem_realloc(a->v, cap * sizeof(*v));
        if (v == NULL) {
            a->failed = 1;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n] = mem_strdup(s);
    if (a->v[a->n] == NULL) {
        a->failed = 1;
        return;
    }
    a->n++;
    a->v[a->n] = NULL;
}

static void
argv_push_u64(struct argv_vec *a, uint64_t x)
{
    char tmp[32];
    snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)x);
    argv_push(a, tmp);
}

static void
argv_free(struct argv_vec *a)
{
    for (size_t i = 0; i < a->n; i++) {
        mem_free(a->v[i]);
    }
    mem_free(a->v);
    memset(a, 0, sizeof(*a));
}

/* ---- the running sandbox ---------------------------------------------------------- */

struct sandbox {
    uv_loop_t *loop;
    struct sandbox_callbacks cb;
    struct sandbox_limits lim;
    pid_t bwrap_pid;
    int bwrap_pidfd;
    pid_t child_pid; /* host pid of the sandbox's pid 1, once bwrap reports it */
    int child_pidfd;
    uv_poll_t exit_poll;
    uv_poll_t child_poll; /* on child_pidfd, once known */
    int child_watch;      /* child_poll initialised */
    int child_gone;       /* the sandbox's pid 1 has exited (or was never seen) */
    uv_pipe_t out_pipe, err_pipe, status_pipe;
    int status_keep; /* a second read end of the status pipe, closed once bwrap is reaped */
    int own_pidns;   /* bwrap is pid 1 of its own pid namespace: its pids are not ours */
    uv_timer_t timer;
    uv_timer_t tick;                     /* cb.on_tick while the command runs */
    int handles;                         /* initialised handles not yet closed */
    int out_open, err_open, status_open; /* still reading */
    int exited, wait_status, killing, done;
    int64_t start_ms;
    struct buf status;
    char cgroup[SANDBOX_PATH_MAX]; /* our pids cgroup directory, or "" */
    struct sandbox_result res;
    int prepared;          /* waiting on --block-fd (sandbox_prepare) */
    uv_pipe_t script_pipe; /* warm: the daemon's end of the script pipe, while writing */
    int script_open;       /* script_pipe initialised and not yet closed */
    char *script;          /* warm: the framed command while it is written */
    size_t script_len;
    uv_write_t script_req;
    char readbuf[READ_CHUNK];
};

static const char *
bwrap_find(char *out, size_t size)
{
    static const char *fallback[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
    const char *path = getenv("PATH");

    /* The daemon's PATH first, as the operator set it up; then the usual places. */
    if (path != NULL) {
        const char *p = path;
        while (*p) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n > 0 && p[0] == '/' && n + 7 < size) {
                snprintf(out, size, "%.*s/bwrap", (int)n, p);
                if (access(out, X_OK) == 0) {
                    return out;
                }
            }
            p += n;
            if (*p == ':') {
                p++;
            }
        }
    }
    for (size_t i = 0; i < sizeof(fallback) / sizeof(fallback[0]); i++) {
        if (access(fallback[i], X_OK) == 0) {
            snprintf(out, size, "%s", fallback[i]);
            return out;
        }
    }
    return NULL;
}

void
sandbox_limits_default(struct sandbox_limits *l)
{
    l->timeout_ms = 30000;
    l->memory_bytes = (uint64_t)4 << 30;
    l->cpu_secs = 60;
    l->file_size_bytes = (uint64_t)1 << 30;
    l->nproc = 256;
    l->tmp_size_bytes = (uint64_t)256 << 20;
    l->max_output_bytes = (size_t)16 << 20;
    l->max_command_bytes = SANDBOX_COMMAND_MAX_DEFAULT;
}

static void
limits_fill(struct sandbox_limits *l, const struct sandbox_limits *in)
{
    struct sandbox_limits d;

    sandbox_limits_default(&d);
    *l = *in;
    if (l->timeout_ms <= 0) {
        l->timeout_ms = d.timeout_ms;
    }
    if (l->memory_bytes == 0) {
        l->memory_bytes = d.memory_bytes;
    }
    if (l->cpu_secs == 0) {
        l->cpu_secs = d.cpu_secs;
    }
    if (l->file_size_bytes == 0) {
        l->file_size_bytes = d.file_size_bytes;
    }
    if (l->nproc == 0) {
        l->nproc = d.nproc;
    }
    if (l->tmp_size_bytes == 0) {
        l->tmp_size_bytes = d.tmp_size_bytes;
    }
    if (l->max_output_bytes == 0) {
        l->max_output_bytes = d.max_output_bytes;
    }
    if (l->max_command_bytes == 0) {
        l->max_command_bytes = d.max_command_bytes;
    }
}

/* ---- spec validation --------------------------------------------------------------- */

static int
valid_key(const char *k)
{
    const char *p = k;

    if (k == NULL || *k == '\0' || *k == '/' || strlen(k) >= SANDBOX_PATH_MAX / 2) {
        return 0;
    }
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
            return 0;
        }
        p += n;
        if (*p == '/') {
            p++;
            if (*p == '\0') {
                return 0;
            }
        }
    }
    return 1;
}

/* A host path that must never be bound read-only at its own place in the sandbox. */
static int
reserved_target(const char *p)
{
    static const char *const bad[] = {"/proc", "/sys", "/dev", "/workspace", "/.drun"};

    if (strcmp(p, "/") == 0) {
        return 1;
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = strlen(bad[i]);
        if (strncmp(p, bad[i], n) == 0 && (p[n] == '\0' || p[n] == '/')) {
            return 1;
        }
    }
    return 0;
}

static int
env_name_ok(const char *e, size_t n)
{
    static const char *const fixed[] = {"PATH", "HOME", "TMPDIR", "LANG", "TERM"};

    if (n == 0 || !((e[0] >= 'A' && e[0] <= 'Z') || (e[0] >= 'a' && e[0] <= 'z') || e[0] == '_')) {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        char c = e[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_')) {
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if (strlen(fixed[i]) == n && memcmp(fixed[i], e, n) == 0) {
            return 0;
        }
    }
    return 1;
}

static int
spec_check(const struct sandbox_spec *spec, const struct sandbox_limits *lim, struct err *err)
{
    struct stat st;

    if (spec->workspace_dir == NULL || spec->workspace_dir[0] != '/') {
        return err_set(err, ERR_INVAL, "workspace directory '%s' is not an absolute path",
                       spec->workspace_dir ? spec->workspace_dir : "");
    }
    if (stat(spec->workspace_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        return err_set(err, ERR_NOTFOUND, "workspace directory '%s' does not exist",
                       spec->workspace_dir);
    }
    if (spec->command == NULL) {
        return err_set(err, ERR_INVAL, "no command given");
    }
    if (lim->max_command_bytes > SANDBOX_COMMAND_MAX_LIMIT) {
        return err_set(err, ERR_INVAL, "command cap %zu is above the most allowed (%zu bytes)",
                       lim->max_command_bytes, SANDBOX_COMMAND_MAX_LIMIT);
    }
    if (spec->command_len > lim->max_command_bytes) {
        return err_set(err, ERR_TOOBIG,
                       "command is %zu bytes, more than the %zu allowed; put long scripts in "
                       "a workspace file and run that",
                       spec->command_len, lim->max_command_bytes);
    }
    if (memchr(spec->command, '\0', spec->command_len) != NULL) {
        return err_set(err, ERR_INVAL, "command contains a NUL byte; remove it");
    }
    if (spec->n_ro_paths > SANDBOX_RO_PATHS_MAX) {
        return err_set(err, ERR_TOOBIG, "%zu read-only paths given, more than the %d allowed",
                       spec->n_ro_paths, SANDBOX_RO_PATHS_MAX);
    }
    for (size_t i = 0; i < spec->n_ro_paths; i++) {
        const char *p = spec->ro_paths[i];
        if (p == NULL || p[0] != '/' || strlen(p) >= SANDBOX_PATH_MAX) {
            return err_set(err, ERR_INVAL, "read-only path '%s' is not an absolute path",
                           p ? p : "");
        }
    }
    if (spec->n_overlays > SANDBOX_OVERLAYS_MAX) {
        return err_set(err, ERR_TOOBIG, "%zu overlays given, more than the %d allowed",
                       spec->n_overlays, SANDBOX_OVERLAYS_MAX);
    }
    for (size_t i = 0; i < spec->n_overlays; i++) {
        const struct sandbox_overlay *o = &spec->overlays[i];
        if (!valid_key(o->key)) {
            return err_set(err, ERR_INVAL,
                           "overlay key '%s' is not a relative workspace path without '.' or "
                           "'..' components",
                           o->key ? o->key : "");
        }
        if (o->dir_fd > 0 ? fstat(o->dir_fd, &st) < 0 || !S_ISDIR(st.st_mode)
                          : o->host_dir == NULL || o->host_dir[0] != '/' ||
                                stat(o->host_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            return err_set(err, ERR_NOTFOUND, "overlay directory '%s' does not exist",
                           o->host_dir ? o->host_dir : "");
        }
    }
    if (spec->n_env > SANDBOX_ENV_MAX) {
        return err_set(err, ERR_TOOBIG, "%zu environment variables given, more than the %d allowed",
                       spec->n_env, SANDBOX_ENV_MAX);
    }
    for (size_t i = 0; i < spec->n_env; i++) {
        const char *e = spec->env[i];
        const char *eq = e ? strchr(e, '=') : NULL;
        if (eq == NULL || !env_name_ok(e, (size_t)(eq - e)) || strlen(e) > 65536) {
            return err_set(err, ERR_INVAL,
                           "environment entry '%.64s' is not NAME=value with a name other than "
                           "PATH, HOME, TMPDIR, LANG or TERM",
                           e ? e : "");
        }
    }
    if (spec->path_env != NULL && (strlen(spec->path_env) > 65536 || spec->path_env[0] == '\0')) {
        return err_set(err, ERR_INVAL, "PATH for the sandbox is empty or too long");
    }
    return 0;
}

/* ---- the bwrap argv ---------------------------------------------------------------- */

/*
 * The parts of /etc a shell and common tools need. Everything else of /etc (shadow, ssh
 * host keys, the machine id, sudoers, resolver and proxy configs, drun's own config) stays
 * out: it is either secret, a fingerprint, or useless without network.
 */
static const char *const etc_entries[] = {
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "default/locale",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "mime.types",
    "services",
    "protocols",
    "magic",
    "magic.mime",
    "profile",
    "bash.bashrc",
    "inputrc",
    "environment",
    "os-release",
    "debian_version",
    "python3",
    "perl",
    "gitconfig",
    "npmrc",
    "pip.conf",
    "java-17-openjdk",
    "fonts",
};

static void
bind_system(struct argv_vec *a)
{
    static const char *const top[] = {"bin", "sbin", "lib", "lib64", "lib32", "libx32"};
    char path[64], target[SANDBOX_PATH_MAX];
    struct stat st;

    argv_push(a, "--ro-bind");
    argv_push(a, "/usr");
    argv_push(a, "/usr");
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++) {
        snprintf(path, sizeof(path), "/%s", top[i]);
        if (lstat(path, &st) < 0) {
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            /* Merged /usr: recreate the link, or the ELF interpreter in /lib64 is missing. */
            ssize_t n = readlink(path, target, sizeof(target) - 1);
            if (n <= 0) {
                continue;
            }
            target[n] = '\0';
            argv_push(a, "--symlink");
            argv_push(a, target);
            argv_push(a, path);
        } else if (S_ISDIR(st.st_mode)) {
            argv_push(a, "--ro-bind");
            argv_push(a, path);
            argv_push(a, path);
        }
    }
    for (size_t i = 0; i < sizeof(etc_entries) / sizeof(etc_entries[0]); i++) {
        snprintf(target, sizeof(target), "/etc/%s", etc_entries[i]);
        if (lstat(target, &st) == 0) {
            argv_push(a, "--ro-bind");
            argv_push(a, target);
            argv_push(a, target);
        }
    }
    if (stat("/opt", &st) == 0 && S_ISDIR(st.st_mode)) {
        argv_push(a, "--ro-bind");
        argv_push(a, "/opt");
        argv_push(a, "/opt");
    }
}

/* Kernel interfaces under /proc that must never be writable in the sandbox. */
static const char *const proc_knobs[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq",
                                         "/proc/bus", "/proc/fs"};

void
sandbox_user(const struct sandbox_spec *spec, uint32_t *uid, uint32_t *gid)
{
    if (geteuid() != 0) {
        *uid = (uint32_t)geteuid();
        *gid = (uint32_t)getegid();
        return;
    }
    *uid = spec != NULL && spec->uid != 0 ? spec->uid : SANDBOX_UID_DEFAULT;
    *gid = spec != NULL && spec->gid != 0 ? spec->gid : SANDBOX_GID_DEFAULT;
}

/*
 * 1 if the host user uid/gid can reach directory `path` (search permission on every
 * directory on the way, by the owner/group/other bits). A root daemon's bwrap runs as that
 * user, so a bind source it cannot reach would fail the whole sandbox: such read-only
 * paths are left out instead (the sandbox user sees what any such user sees, no more).
 */
int
sandbox_reachable(const char *path, uint32_t uid, uint32_t gid)
{
    char p[PATH_MAX];
    size_t n = strlen(path);
    struct stat st;

    if (geteuid() != 0 || n >= sizeof(p)) {
        return 1;
    }
    memcpy(p, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') {
            continue;
        }
        char c = p[i];
        p[i] = '\0';
        if (stat(p, &st) != 0) {
            return 0;
        }
        p[i] = c;
        if (!S_ISDIR(st.st_mode)) {
            return 1; /* a file at the end: reading it needs the bits checked by bwrap */
        }
        mode_t need = st.st_uid == uid ? S_IXUSR : st.st_gid == gid ? S_IXGRP : S_IXOTH;
        if (!(st.st_mode & need)) {
            return 0;
        }
    }
    return 1;
}

static int
build_argv(const struct sandbox_spec *spec, const struct sandbox_limits *lim, const char *bwrap,
           enum argv_kind kind, struct argv_vec *a, struct err *err)
{
    char resolved[PATH_MAX], ws[PATH_MAX], prelude[1024];
    struct stat st;
    uint32_t uid, gid;

    sandbox_user(spec, &uid, &gid);
    if (realpath(spec->workspace_dir, ws) == NULL) {
        return err_set(err, ERR_NOTFOUND, "workspace directory '%s' cannot be resolved: %s",
                       spec->workspace_dir, strerror(errno));
    }
    argv_push(a, bwrap);
    /* Namespaces: user, pid, net, ipc, uts, cgroup; no way to make another user ns. */
    argv_push(a, "--unshare-all");
    argv_push(a, "--unshare-user");
    argv_push(a, "--disable-userns");
    if (spec->network) {
        argv_push(a, "--share-net");
    }
    argv_push(a, "--die-with-parent");
    argv_push(a, "--new-session");
    argv_push(a, "--cap-drop");
    argv_push(a, "ALL");
    argv_push(a, "--clearenv");
    argv_push(a, "--setenv");
    argv_push(a, "PATH");
    argv_push(a, spec->path_env ? spec->path_env : "/usr/local/bin:/usr/bin:/bin");
    argv_push(a, "--setenv");
    argv_push(a, "HOME");
    argv_push(a, "/tmp/home");
    argv_push(a, "--setenv");
    argv_push(a, "TMPDIR");
    argv_push(a, "/tmp");
    argv_push(a, "--setenv");
    argv_push(a, "LANG");
    argv_push(a, "C.UTF-8");
    argv_push(a, "--setenv");
    argv_push(a, "TERM");
    argv_push(a, "dumb");
    for (size_t i = 0; i < spec->n_env; i++) {
        const char *eq = strchr(spec->env[i], '=');
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - spec->env[i]), spec->env[i]);
        argv_push(a, "--setenv");
        argv_push(a, name);
        argv_push(a, eq + 1);
    }
    /* /tmp first: a bind under /tmp added later stays visible (reference 14.1). */
    argv_push(a, "--size");
    argv_push_u64(a, lim->tmp_size_bytes);
    argv_push(a, "--tmpfs");
    argv_push(a, "/tmp");
    argv_push(a, "--dir");
    argv_push(a, "/tmp/home");
    bind_system(a);
    for (size_t i = 0; i < spec->n_ro_paths; i++) {
        /* Missing entries are skipped (a $PATH entry may not exist); links resolved. */
        if (realpath(spec->ro_paths[i], resolved) == NULL || reserved_target(resolved) ||
            !sandbox_reachable(resolved, uid, gid)) {
            continue;
        }
        argv_push(a, "--ro-bind");
        argv_push(a, resolved);
        argv_push(a, resolved);
    }
    /* drun's own files under those binds (its config, DB, runtime directory) are covered:
     * no command reads the daemon's credentials or another session's files. */
    for (size_t i = 0; i < spec->n_hide_paths && i < SANDBOX_RO_PATHS_MAX; i++) {
        const char *h = spec->hide_paths[i];
        if (h == NULL || h[0] != '/' || lstat(h, &st) < 0) {
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            argv_push(a, "--tmpfs");
            argv_push(a, h);
            argv_push(a, "--remount-ro");
            argv_push(a, h);
        } else if (S_ISREG(st.st_mode)) {
            argv_push(a, "--ro-bind");
            argv_push(a, "/dev/null");
            argv_push(a, h);
        }
    }
    argv_push(a, "--proc");
    argv_push(a, "/proc");
    /*
     * Kernel knobs read-only whatever our uid (bwrap covers them only when it thinks they
     * are writable at set-up time). /proc/sys shows the sysctls of the reader's own
     * namespaces, so the host's /proc/sys bound here is the sandbox's own view.
     */
    for (size_t i = 0; i < sizeof(proc_knobs) / sizeof(proc_knobs[0]); i++) {
        argv_push(a, "--ro-bind-try");
        argv_push(a, proc_knobs[i]);
        argv_push(a, proc_knobs[i]);
    }
    argv_push(a, "--dev");
    argv_push(a, "/dev");
    argv_push(a, "--size");
    argv_push_u64(a, lim->tmp_size_bytes);
    argv_push(a, "--tmpfs");
    argv_push(a, "/dev/shm");
    argv_push(a, "--remount-ro");
    argv_push(a, "/dev");
    argv_push(a, spec->workspace_ro ? "--ro-bind" : "--bind");
    argv_push(a, ws);
    argv_push(a, "/workspace");
    for (size_t i = 0; i < spec->n_overlays; i++) {
        char dest[SANDBOX_PATH_MAX];
        if (spec->overlays[i].dir_fd > 0 && kind != ARGV_RAW) {
            /* The directory host/ opened and checked: bound through its fd, which the
             * child places at FD_FIRST_FREE + i, so no link swapped in can redirect it. */
            snprintf(dest, sizeof(dest), "/workspace/%s", spec->overlays[i].key);
            argv_push(a, "--ro-bind-fd");
            argv_push_u64(a, (uint64_t)(FD_FIRST_FREE + i));
            argv_push(a, dest);
            continue;
        }
        if (realpath(spec->overlays[i].host_dir, resolved) == NULL || stat(resolved, &st) < 0 ||
            !S_ISDIR(st.st_mode)) {
            continue;
        }
        if (!sandbox_reachable(resolved, uid, gid)) {
            log_warn("overlay '%s' is not reachable by the sandbox user (uid %lu); it is left "
                     "out: make its directories searchable by that user",
                     resolved, (unsigned long)uid);
            continue;
        }
        snprintf(dest, sizeof(dest), "/workspace/%s", spec->overlays[i].key);
        argv_push(a, "--ro-bind");
        argv_push(a, resolved);
        argv_push(a, dest);
    }
    if (kind == ARGV_COLD) {
        argv_push(a, "--ro-bind-data");
        argv_push_u64(a, FD_COMMAND);
        argv_push(a, COMMAND_PATH);
    }
    if (kind == ARGV_WARM) {
        /* Everything above is set up, then bwrap waits here until the call comes. */
        argv_push(a, "--block-fd");
        argv_push_u64(a, FD_BLOCK);
    }
    if (kind != ARGV_RAW) {
        argv_push(a, "--seccomp");
        argv_push_u64(a, FD_SECCOMP);
        argv_push(a, "--json-status-fd");
        argv_push_u64(a, FD_STATUS);
    }
    /* Last: the sandbox's own root tmpfs becomes read-only (no writes to /foo). */
    argv_push(a, "--remount-ro");
    argv_push(a, "/");
    argv_push(a, "--chdir");
    argv_push(a, "/workspace");
    argv_push(a, "--");
    argv_push(a, "/bin/sh");
    argv_push(a, "-c");
    /*
     * The process limit is set here, inside the sandbox's user namespace, so the kernel
     * counts this sandbox's processes only (dash spells it -p, bash -u). Then the script is
     * sourced from the read-only file, keeping `sh -c` semantics without an argv string.
     */
    if (kind == ARGV_WARM) {
        /*
         * Warm: the script comes through the pipe at fd 5 after a header line the daemon
         * writes (sandbox_start_prepared): "l<N>" says N lines follow, which the shell reads
         * with its `read` builtin (short scripts: no exec at all); "c" says the rest is
         * the script, which cat reads to EOF (the daemon closes its end after the last
         * byte). Either way the shell has read everything and closed fd 5 before the script
         * runs, so the command can never read its own pipe or anything after it. eval
         * keeps `sh -c` semantics (the last command's status, `exit` works); the helper
         * variables are unset before the script's first command.
         */
        snprintf(prelude, sizeof(prelude),
                 "ulimit -p %llu 2>/dev/null || ulimit -u %llu || exit 126; "
                 "IFS= read -r __drun_h <&5 || exit 126; __drun_s=; __drun_j=; "
                 "case $__drun_h in "
                 "c) __drun_s=$(exec /bin/cat <&5) || exit 126; __drun_s=${__drun_s%%.};; "
                 "l*) __drun_n=${__drun_h#l}; "
                 "while [ \"$__drun_n\" -gt 0 ]; do "
                 "IFS= read -r __drun_l <&5 || exit 126; "
                 "__drun_s=\"$__drun_s$__drun_j$__drun_l\"; __drun_j=\"\n\"; "
                 "__drun_n=$((__drun_n - 1)); done;; "
                 "*) exit 126;; esac; exec 5<&-; "
                 "eval \"unset __drun_h __drun_n __drun_l __drun_j __drun_s; $__drun_s\"",
                 (unsigned long long)lim->nproc, (unsigned long long)lim->nproc);
    } else {
        snprintf(prelude, sizeof(prelude),
                 "ulimit -p %llu 2>/dev/null || ulimit -u %llu || exit 126; . " COMMAND_PATH,
                 (unsigned long long)lim->nproc, (unsigned long long)lim->nproc);
    }
    argv_push(a, kind != ARGV_RAW ? prelude : "echo hi");
    argv_push(a, "sh");
    if (a->failed) {
        return err_set(err, ERR_NOMEM, "out of memory building the sandbox command line");
    }
    return 0;
}

/* ---- seccomp -------------------------------------------------------------------- */

/*
 * The filter bwrap installs before it execs the shell. Each rule names the attack it stops:
 *   keyctl, add_key, request_key: reading or planting keys in the daemon user's keyrings
 *     (keyrings are not namespaced by mount or pid namespaces);
 *   socket(AF_UNIX): connecting to a host daemon's socket that sits under a read-only bind
 *     (abstract sockets are already cut off by the network namespace); socketpair stays;
 *   ioctl TIOCSTI / TIOCLINUX: typing into a terminal (bwrap's --new-session also stops it);
 *   clone with CLONE_NEWUSER, clone3 (its flags are out of reach, so ENOSYS makes libc fall
 *     back to clone), unshare, setns, mount, umount2, pivot_root, chroot: a new user
 *     namespace is the usual first step of kernel exploits and of escaping mount rules;
 *   ptrace, process_vm_*: debugging other processes (defence in depth);
 *   bpf, perf_event_open, userfaultfd, kexec_*, *_module, iopl, ioperm, swapon, swapoff,
 *     reboot, syslog, acct, quotactl, open_by_handle_at, lookup_dcookie, add_key: kernel
 *     attack surface no shell command needs.
 * A 32-bit (int 0x80) or x32 syscall kills the process: the filter is built for the native
 * ABI only, and libseccomp's default bad-arch action refuses the others.
 */
static int
seccomp_compile(struct err *err)
{
    static const int deny[] = {
        SCMP_SYS(keyctl),
        SCMP_SYS(add_key),
        SCMP_SYS(request_key),
        SCMP_SYS(unshare),
        SCMP_SYS(setns),
        SCMP_SYS(mount),
        SCMP_SYS(umount2),
        SCMP_SYS(pivot_root),
        SCMP_SYS(chroot),
        SCMP_SYS(ptrace),
        SCMP_SYS(process_vm_readv),
        SCMP_SYS(process_vm_writev),
        SCMP_SYS(bpf),
        SCMP_SYS(perf_event_open),
        SCMP_SYS(userfaultfd),
        SCMP_SYS(kexec_load),
        SCMP_SYS(kexec_file_load),
        SCMP_SYS(init_module),
        SCMP_SYS(finit_module),
        SCMP_SYS(delete_module),
        SCMP_SYS(iopl),
        SCMP_SYS(ioperm),
        SCMP_SYS(swapon),
        SCMP_SYS(swapoff),
        SCMP_SYS(reboot),
        SCMP_SYS(syslog),
        SCMP_SYS(acct),
        SCMP_SYS(quotactl),
        SCMP_SYS(open_by_handle_at),
        SCMP_SYS(lookup_dcookie),
        SCMP_SYS(fsopen),
        SCMP_SYS(fsmount),
        SCMP_SYS(move_mount),
        SCMP_SYS(open_tree),
    };
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    int fd = -1, rc = 0;

    if (ctx == NULL) {
        return err_set(err, ERR_NOMEM, "cannot build the seccomp filter");
    }
    for (size_t i = 0; i < sizeof(deny) / sizeof(deny[0]); i++) {
        if (deny[i] < 0) {
            continue; /* not on this architecture */
        }
        rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), deny[i], 0);
    }
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                           SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                           SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc != 0) {
        seccomp_release(ctx);
        return err_set(err, ERR_INTERNAL, "cannot build the seccomp filter: a rule was refused");
    }
    fd = memfd_create("drun-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        seccomp_release(ctx);
        return err_set(err, ERR_IO, "cannot create a memfd for the seccomp filter: %s",
                       strerror(errno));
    }
    if (seccomp_export_bpf(ctx, fd) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
        seccomp_release(ctx);
        close(fd);
        return err_set(err, ERR_IO, "cannot export the seccomp filter");
    }
    seccomp_release(ctx);
    return fd;
}

/*
 * The compiled filter, kept for the life of the process: the rules never change, and
 * compiling them (libseccomp builds and optimises the BPF tree) is the larger part of the
 * cost. Each sandbox gets its own memfd with a copy, because bwrap reads it to the end.
 */
static unsigned char *seccomp_bytes;
static size_t seccomp_len;

static int
seccomp_memfd(struct err *err)
{
    int fd;

    if (seccomp_bytes == NULL) {
        struct stat st;
        unsigned char *b;
        int cfd = seccomp_compile(err);

        if (cfd < 0) {
            return -1;
        }
        if (fstat(cfd, &st) < 0 || st.st_size <= 0 || st.st_size > (1 << 20) ||
            (b = mem_calloc(1, (size_t)st.st_size)) == NULL) {
            close(cfd);
            return err_set(err, ERR_IO, "cannot read back the seccomp filter");
        }
        if (pread(cfd, b, (size_t)st.st_size, 0) != (ssize_t)st.st_size) {
            mem_free(b);
            close(cfd);
            return err_set(err, ERR_IO, "cannot read back the seccomp filter");
        }
        close(cfd);
        seccomp_bytes = b;
        seccomp_len = (size_t)st.st_size;
    }
    fd = memfd_create("drun-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        return err_set(err, ERR_IO, "cannot create a memfd for the seccomp filter: %s",
                       strerror(errno));
    }
    if (write(fd, seccomp_bytes, seccomp_len) != (ssize_t)seccomp_len ||
        lseek(fd, 0, SEEK_SET) < 0) {
        close(fd);
        return err_set(err, ERR_IO, "cannot write the seccomp filter: %s", strerror(errno));
    }
    return fd;
}

/* ---- the pids cgroup (root only) ---------------------------------------------------- */

/*
 * Where our pids cgroups go, found once per process: the parent directory and the file a
 * process joins through. On the v1 pids hierarchy that is `tasks`, not `cgroup.procs`:
 * writing "0" to `tasks` moves only the calling thread, which the kernel does without
 * taking the global threadgroup lock (whose RCU grace period cost ~7-13 ms per sandbox
 * here), and the child that writes it is single-threaded, so the whole process moves and
 * bwrap and everything after it is born inside. On v2 only cgroup.procs exists.
 */
static char cg_base[SANDBOX_PATH_MAX];
static const char *cg_join = "cgroup.procs";
static int cg_state; /* 0 not looked up, 1 found, -1 none */

static int
cgroup_find(void)
{
    char line[1024], base[SANDBOX_PATH_MAX], file[SANDBOX_PATH_MAX + 32];
    FILE *f;
    int found = 0;

    if (cg_state != 0) {
        return cg_state;
    }
    cg_state = -1;
    f = fopen("/proc/self/cgroup", "re");
    if (f == NULL) {
        return cg_state;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *nl = strchr(line, '\n'), *c1 = strchr(line, ':'), *c2;
        if (nl) {
            *nl = '\0';
        }
        if (c1 == NULL || (c2 = strchr(c1 + 1, ':')) == NULL) {
            continue;
        }
        *c2 = '\0';
        if (strcmp(c1 + 1, "pids") == 0) {
            snprintf(base, sizeof(base), "/sys/fs/cgroup/pids%s",
                     strcmp(c2 + 1, "/") ? c2 + 1 : "");
            found = 2;
            break;
        }
        if (c1[1] == '\0' && strcmp(line, "0") == 0) {
            snprintf(base, sizeof(base), "/sys/fs/cgroup%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
            snprintf(file, sizeof(file), "%s/cgroup.subtree_control", base);
            FILE *sc = fopen(file, "re");
            char ctl[256] = "";
            if (sc != NULL) {
                if (fgets(ctl, sizeof(ctl), sc) == NULL) {
                    ctl[0] = '\0';
                }
                fclose(sc);
            }
            found = strstr(ctl, "pids") != NULL;
        }
    }
    fclose(f);
    if (found) {
        snprintf(cg_base, sizeof(cg_base), "%s", base);
        snprintf(file, sizeof(file), "%s/tasks", base);
        if (found == 2 && access(file, W_OK) == 0) {
            cg_join = "tasks";
        }
        cg_state = 1;
    }
    return cg_state;
}

/*
 * Makes a fresh pids cgroup below ours with pids.max = nproc and returns an fd for the
 * file the child writes "0" into before exec, or -1 if the host offers none we may use.
 * Works with the v1 pids hierarchy and with v2 when our cgroup delegates pids.
 */
static int
cgroup_make(struct sandbox *sb)
{
    static unsigned long seq;
    char file[SANDBOX_PATH_MAX + 32];
    int fd;

    sb->cgroup[0] = '\0';
    if (cgroup_find() < 0) {
        return -1;
    }
    snprintf(sb->cgroup, sizeof(sb->cgroup), "%s/drun-sandbox-%d-%lu", cg_base, (int)getpid(),
             ++seq);
    if (mkdir(sb->cgroup, 0700) < 0) {
        sb->cgroup[0] = '\0';
        return -1;
    }
    snprintf(file, sizeof(file), "%s/pids.max", sb->cgroup);
    fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        char num[32];
        int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)sb->lim.nproc);
        if (write(fd, num, (size_t)n) != n) {
            close(fd);
            fd = -1;
        } else {
            close(fd);
            snprintf(file, sizeof(file), "%s/%s", sb->cgroup, cg_join);
            fd = open(file, O_WRONLY | O_CLOEXEC);
        }
    }
    if (fd < 0) {
        rmdir(sb->cgroup);
        sb->cgroup[0] = '\0';
    }
    return fd;
}

/*
 * Removes a finished sandbox's cgroup. The kernel may still hold it for a moment after
 * the last process is reaped (EBUSY); such directories are retried on the next call.
 */
static void
cgroup_remove(const char *dir)
{
    static char pending[8][SANDBOX_PATH_MAX];

    for (size_t i = 0; i < 8; i++) {
        if (pending[i][0] && (rmdir(pending[i]) == 0 || errno == ENOENT)) {
            pending[i][0] = '\0';
        }
    }
    if (dir == NULL || rmdir(dir) == 0) {
        return;
    }
    for (size_t i = 0; i < 8; i++) {
        if (!pending[i][0]) {
            snprintf(pending[i], sizeof(pending[i]), "%s", dir);
            return;
        }
    }
    log_warn("cannot remove cgroup '%s': %s", dir, strerror(errno));
}

/* Returns 1 if the cgroup refused a fork (pids.events "max N" with N > 0). */
static int
cgroup_hit_max(const struct sandbox *sb)
{
    char file[SANDBOX_PATH_MAX + 32], line[128];
    FILE *f;
    int hit = 0;

    snprintf(file, sizeof(file), "%s/pids.events", sb->cgroup);
    f = fopen(file, "re");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "max ", 4) == 0 && strtoull(line + 4, NULL, 10) > 0) {
            hit = 1;
        }
    }
    fclose(f);
    return hit;
}

/*
 * Kills every process in cgroup dir (SIGKILL, until cgroup.procs is empty) and removes
 * it, retrying while the kernel still holds it for a process being reaped. Bounded to a
 * few seconds. Returns 0 when the directory is gone.
 */
static int
cgroup_empty_remove(const char *dir)
{
    char file[SANDBOX_PATH_MAX + 32];

    snprintf(file, sizeof(file), "%s/cgroup.procs", dir);
    for (int round = 0; round < 5000; round++) {
        char line[32];
        int any = 0;
        FILE *f;

        if (rmdir(dir) == 0 || errno == ENOENT) {
            return 0;
        }
        f = fopen(file, "re");
        if (f == NULL) {
            return errno == ENOENT ? 0 : -1;
        }
        while (fgets(line, sizeof(line), f) != NULL) {
            long pid = strtol(line, NULL, 10);
            if (pid > 1 && pid <= INT_MAX && (pid_t)pid != getpid()) {
                kill((pid_t)pid, SIGKILL);
                any = 1;
            }
        }
        fclose(f);
        struct timespec ts = {0, any ? 200000 : 1000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/*
 * Our cgroups (own = 1) or those of dead makers (own = 0) under the pids hierarchy:
 * emptied and removed. Returns (removed, failed) counts through the pointers.
 */
static void
cgroup_sweep(int own, int *removed, int *failed)
{
    char dir[SANDBOX_PATH_MAX + 300];
    struct dirent *de;
    DIR *d;

    *removed = *failed = 0;
    if (geteuid() != 0 || cgroup_find() < 0) {
        return;
    }
    d = opendir(cg_base);
    if (d == NULL) {
        return;
    }
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid;
        struct stat st;

        if (strncmp(de->d_name, "drun-sandbox-", 13) != 0) {
            continue;
        }
        pid = strtol(de->d_name + 13, &end, 10);
        if (end == de->d_name + 13 || *end != '-' || pid <= 0 || pid > INT_MAX) {
            continue;
        }
        snprintf(dir, sizeof(dir), "%s/%s", cg_base, de->d_name);
        if (own != ((pid_t)pid == getpid())) {
            continue;
        }
        if (!own && (stat(dir, &st) != 0 || proc_maker_alive((pid_t)pid, (int64_t)st.st_ctime))) {
            continue;
        }
        if (cgroup_empty_remove(dir) == 0) {
            (*removed)++;
        } else {
            (*failed)++;
            log_warn("cannot remove cgroup '%s': %s", dir, strerror(errno));
        }
    }
    closedir(d);
}

int
sandbox_cleanup(void)
{
    int removed, failed;

    cgroup_sweep(1, &removed, &failed);
    return failed;
}

int
sandbox_sweep(void)
{
    int removed, failed;

    cgroup_sweep(0, &removed, &failed);
    if (removed > 0) {
        log_info("removed %d pids cgroups left by drun processes that are gone", removed);
    }
    return removed;
}

/* ---- the child, between fork and exec (async-signal-safe calls only) ------------------ */

struct child_plan {
    const char *bwrap;
    char *const *argv;
    int src[FD_FIRST_FREE];       /* fd to place at each number 0..6 */
    int ov[SANDBOX_OVERLAYS_MAX]; /* overlay dir fds, placed at FD_FIRST_FREE + i */
    size_t n_ov;
    int cgroup_fd;
    struct rlimit rl_as, rl_cpu, rl_fsize, rl_core;
    int drop;      /* become uid/gid (the daemon is root) */
    uid_t uid;     /* host uid bwrap runs as */
    gid_t gid;     /* host gid bwrap runs as */
    pid_t parent;  /* the daemon, for the parent-death check */
    int own_pidns; /* bwrap is pid 1 of a pid namespace of its own */
    int userns;    /* ... made with a user namespace mapping our own uid (not root) */
    int map_rd;    /* userns: EOF or one byte once the daemon has written the maps */
    int map_wr;    /* the daemon's end */
};

static void
child_fail(int code)
{
    int e = code;
    ssize_t w = write(FD_EXECERR, &e, sizeof(e));
    (void)w;
    _exit(127);
}

__attribute__((noreturn)) static void
child_exec(const struct child_plan *cp)
{
    static char *const no_env[] = {NULL};
    unsigned long dfl[8] = {0}; /* the kernel's struct sigaction, zeroed: SIG_DFL, no flags */
    sigset_t none;
    int tmp[FD_FIRST_FREE];
    int tov[SANDBOX_OVERLAYS_MAX];

    if (cp->userns) {
        /* Wait until the daemon has mapped our uid; EOF means it died: give up. */
        char b;
        close(cp->map_wr);
        if (read(cp->map_rd, &b, 1) != 1) {
            _exit(127);
        }
        close(cp->map_rd);
    }
    /*
     * The raw syscall, not sigaction(): glibc refuses signals 32 and 33 (its own), and a
     * daemon started by a parent that ignored them (make does) would pass that on to
     * every command. SIGKILL and SIGSTOP fail; that is fine.
     */
    for (int s = 1; s < NSIG; s++) {
        syscall(SYS_rt_sigaction, s, dfl, NULL, (size_t)(NSIG - 1) / 8);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Join the pids cgroup before bwrap exists, so no process is ever outside it. */
    if (cp->cgroup_fd >= 0 && write(cp->cgroup_fd, "0", 1) != 1) {
        int e = errno;
        ssize_t w = write(cp->src[FD_EXECERR], &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    /*
     * A root daemon's command never runs as host root: become the sandbox user now, after
     * joining the cgroup (which needs root) and before bwrap exists, so bwrap's user
     * namespace maps that uid. Raw syscalls: glibc's set*id wrappers synchronise every
     * thread of the process, which a child sharing the parent's memory must not do.
     * Groups first, then gid, then uid (after setresuid nothing else may change). Each is
     * checked: a failed drop must never exec bwrap as root.
     */
    if (cp->drop) {
        if (syscall(SYS_setgroups, 0, NULL) != 0 ||
            syscall(SYS_setresgid, cp->gid, cp->gid, cp->gid) != 0 ||
            syscall(SYS_setresuid, cp->uid, cp->uid, cp->uid) != 0 ||
            syscall(SYS_getuid) != (long)cp->uid || syscall(SYS_geteuid) != (long)cp->uid) {
            int e = errno ? errno : EPERM;
            ssize_t w = write(cp->src[FD_EXECERR], &e, sizeof(e));
            (void)w;
            _exit(127);
        }
    }
    /*
     * Die with the daemon, even before bwrap reads --die-with-parent; set after the uid
     * change, which clears it. A daemon that died before this line is seen by getppid.
     */
    if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 ||
        (!cp->own_pidns && syscall(SYS_getppid) != (long)cp->parent)) {
        _exit(127);
    }
    /* Move every fd above the targets first so no dup2 clobbers a source. */
    for (int i = 0; i < FD_FIRST_FREE; i++) {
        tmp[i] = cp->src[i] < 0 ? -1 : fcntl(cp->src[i], F_DUPFD, 64);
        if (cp->src[i] >= 0 && tmp[i] < 0) {
            _exit(127);
        }
    }
    for (size_t i = 0; i < cp->n_ov; i++) {
        tov[i] = cp->ov[i] < 0 ? -1 : fcntl(cp->ov[i], F_DUPFD, 64 + FD_FIRST_FREE);
        if (cp->ov[i] >= 0 && tov[i] < 0) {
            _exit(127);
        }
    }
    for (int i = 0; i < FD_FIRST_FREE; i++) {
        if (tmp[i] < 0) {
            close(i); /* not used in this mode: the number stays free */
        } else if (dup2(tmp[i], i) < 0) {
            _exit(127);
        }
    }
    for (size_t i = 0; i < cp->n_ov; i++) {
        if (tov[i] < 0) {
            close(FD_FIRST_FREE + (int)i); /* an overlay bound by path: the number stays free */
        } else if (dup2(tov[i], FD_FIRST_FREE + (int)i) < 0) {
            _exit(127);
        }
    }
    fcntl(FD_EXECERR, F_SETFD, FD_CLOEXEC);
    if (syscall(SYS_close_range, FD_FIRST_FREE + (unsigned)cp->n_ov, ~0U, 0) < 0) {
        for (int fd = FD_FIRST_FREE + (int)cp->n_ov; fd < 65536; fd++) {
            close(fd);
        }
    }
    if (setrlimit(RLIMIT_AS, &cp->rl_as) < 0 || setrlimit(RLIMIT_CPU, &cp->rl_cpu) < 0 ||
        setrlimit(RLIMIT_FSIZE, &cp->rl_fsize) < 0 || setrlimit(RLIMIT_CORE, &cp->rl_core) < 0) {
        child_fail(errno);
    }
    /* bwrap gets an environment built from scratch: its pid 1 shows nothing of ours. */
    execve(cp->bwrap, cp->argv, no_env);
    child_fail(errno);
    _exit(127);
}

/*
 * Starts the child that execs bwrap. A plain fork: a clone(CLONE_VM | CLONE_VFORK) child
 * (what posix_spawn does) saved ~1 ms of page-table copying, but a command in a prepared
 * sandbox was once seen with every signal blocked (the mask held across the clone), so it
 * was taken out until that is understood; see docs/architecture.md. Returns the pid, or
 * -1 with errno set.
 */
/* 0 once a user namespace could not be made for the pid namespace (see spawn). */
static int userns_nest_ok = 1;

/* Writes "what" to /proc/pid/file. */
static int
proc_write(pid_t pid, const char *file, const char *what)
{
    char path[64];
    size_t n = strlen(what);
    int fd, ok;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ok = write(fd, what, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

/*
 * Maps our own uid and gid (only them) in the child's new user namespace, then lets it
 * go on. Inside, bwrap runs as the same uid, without capabilities once it is exec'd, and
 * makes its own nested user namespace as usual.
 */
static int
userns_map(pid_t pid, int map_wr)
{
    char line[64];

    if (proc_write(pid, "setgroups", "deny") < 0) {
        return -1;
    }
    snprintf(line, sizeof(line), "%lu %lu 1\n", (unsigned long)getegid(), (unsigned long)getegid());
    if (proc_write(pid, "gid_map", line) < 0) {
        return -1;
    }
    snprintf(line, sizeof(line), "%lu %lu 1\n", (unsigned long)geteuid(), (unsigned long)geteuid());
    if (proc_write(pid, "uid_map", line) < 0) {
        return -1;
    }
    return write(map_wr, "x", 1) == 1 ? 0 : -1;
}

static pid_t
spawn_child(const struct child_plan *cp)
{
    pid_t pid;

    /*
     * A root daemon starts bwrap as pid 1 of a pid namespace of its own: when bwrap dies
     * for any reason (the daemon killed with -9 takes it along through PDEATHSIG), the
     * kernel kills everything in that namespace, including a sandbox pid 1 that bwrap
     * made but had not yet released from its uid-map handshake (an eventfd wait that no
     * one would ever end). The raw clone without a new stack behaves as fork.
     */
    if (cp->own_pidns) {
        unsigned long flags = CLONE_NEWPID | SIGCHLD | (cp->userns ? CLONE_NEWUSER : 0);
        pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    } else {
        pid = fork();
    }

    if (pid == 0) {
        child_exec(cp);
    }
    return pid;
}

/* ---- event handling --------------------------------------------------------------- */

static void status_release(struct sandbox *sb);

static void
on_close(uv_handle_t *h)
{
    struct sandbox *sb = h->data;

    if (h == (uv_handle_t *)&sb->exit_poll && sb->bwrap_pidfd >= 0) {
        close(sb->bwrap_pidfd);
        sb->bwrap_pidfd = -1;
    }
    if (h == (uv_handle_t *)&sb->exit_poll) {
        status_release(sb);
    }
    if (--sb->handles == 0) {
        if (sb->child_pidfd >= 0) {
            close(sb->child_pidfd);
            sb->child_pidfd = -1;
        }
        buf_release(&sb->status);
        mem_free(sb->script);
        mem_free(sb);
    }
}

/*
 * bwrap writes the sandbox's pid to the status pipe after it has made the sandbox's pid 1
 * and before it lets that pid 1 go on (an eventfd, which has no EOF). Were our read end
 * closed first (a shutdown closes every handle), that write would kill bwrap with SIGPIPE
 * right there and leave the pid 1 blocked forever. So a second read end stays open until
 * bwrap has been reaped.
 */
static void
status_release(struct sandbox *sb)
{
    if (sb->status_keep >= 0) {
        close(sb->status_keep);
        sb->status_keep = -1;
    }
}

static void
close_handle(struct sandbox *sb, uv_handle_t *h)
{
    (void)sb;
    if (!uv_is_closing(h)) {
        uv_close(h, on_close);
    }
}

static void
signal_kill(int pidfd, pid_t pid)
{
    if (pidfd >= 0) {
        if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) == 0 || errno == ESRCH) {
            return;
        }
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
    }
}

static void on_timer(uv_timer_t *t);

/*
 * Kills bwrap and every child it has, for a bwrap that has not reported its child yet.
 * bwrap's child (the sandbox's pid 1) first waits on an eventfd until bwrap has set up
 * its uid map; an eventfd never reaches EOF, so killing bwrap alone in that window leaves
 * the child blocked forever, reparented to init. So: stop bwrap (a stopped process forks
 * nothing), wait until it is stopped or gone, SIGKILL each of its children (a pid 1 takes
 * its namespace along), then bwrap itself. The caller reaps bwrap. Synchronous: bwrap is
 * our child, so waitid returns as soon as the stop (or its death) takes effect.
 */
static void
kill_unknown(struct sandbox *sb)
{
    char path[96], text[512];
    siginfo_t si;
    ssize_t n;
    int fd;

    if (sb->bwrap_pid <= 0) {
        return;
    }
    kill(sb->bwrap_pid, SIGSTOP);
    memset(&si, 0, sizeof(si));
    while (waitid(P_PID, (id_t)sb->bwrap_pid, &si, WSTOPPED | WEXITED | WNOWAIT) < 0 &&
           errno == EINTR) {
    }
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)sb->bwrap_pid,
             (int)sb->bwrap_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0) {
        close(fd);
    }
    if (n > 0) {
        text[n] = '\0';
        for (char *p = text, *end; *p != '\0'; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p) {
                break;
            }
            if (pid > 1 && pid <= INT_MAX) {
                kill((pid_t)pid, SIGKILL);
            }
        }
    }
    signal_kill(sb->bwrap_pidfd, sb->bwrap_pid);
}

/* Tells the caller how long the command has run, whether or not it printed anything. */
static void
on_tick(uv_timer_t *t)
{
    struct sandbox *sb = t->data;

    if (!sb->exited && !sb->killing && sb->cb.on_tick != NULL) {
        sb->cb.on_tick(sb->cb.ud, time_mono_ms() - sb->start_ms);
    }
}

/* Starts the timeout and, if the caller asked for one, the tick; the command runs now. */
static void
clock_start(struct sandbox *sb)
{
    uv_timer_start(&sb->timer, on_timer, (uint64_t)sb->lim.timeout_ms, 0);
    if (sb->cb.on_tick != NULL && sb->cb.tick_ms > 0) {
        uv_timer_start(&sb->tick, on_tick, (uint64_t)sb->cb.tick_ms, (uint64_t)sb->cb.tick_ms);
    }
}

/* Kills the sandbox's pid 1 (which takes its whole pid namespace along), then bwrap. */
static void
kill_all(struct sandbox *sb)
{
    if (sb->exited) {
        return;
    }
    sb->killing = 1;
    uv_timer_stop(&sb->tick);
    if (sb->child_pid > 0) {
        signal_kill(sb->child_pidfd, sb->child_pid);
        signal_kill(sb->bwrap_pidfd, 0);
    } else {
        kill_unknown(sb);
    }
    /* Pipes reach EOF once the namespace is gone; bound the wait anyway. */
    uv_timer_stop(&sb->timer);
    uv_timer_start(&sb->timer, on_timer, DRAIN_MS, 0);
}

static int
contains_ci(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        if (strncasecmp(hay + i, needle, m) == 0) {
            return 1;
        }
    }
    return 0;
}

/*
 * Memory is limited with RLIMIT_AS (set before bwrap, inherited by the command): a refused
 * allocation is an mmap/brk that fails with ENOMEM, which no one outside the process can
 * observe. So the answer comes from what the runtime prints as it dies, one message per
 * common runtime: libc (strerror ENOMEM), coreutils and glibc ("memory exhausted"),
 * Python (MemoryError), Perl and Node ("Out of memory"), C++ (std::bad_alloc), Rust
 * ("memory allocation of N bytes failed"), Go ("cannot allocate memory"), and
 * "failed to allocate" / "allocation failed" (V8, jemalloc, many C programs).
 */
static int
memory_refused(const char *tail, size_t tn)
{
    static const char *const words[] = {
        "cannot allocate memory", "out of memory",     "memoryerror",
        "memory exhausted",       "bad_alloc",         "memory allocation of",
        "failed to allocate",     "allocation failed",
    };

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (contains_ci(tail, tn, words[i])) {
            return 1;
        }
    }
    return 0;
}

static void
finish(struct sandbox *sb)
{
    struct sandbox_result *r = &sb->res;
    const char *tail = r->err.tail;
    size_t tn = r->err.tail_len;
    int st = sb->wait_status;

    if (sb->done) {
        return;
    }
    sb->done = 1;
    r->duration_ms = time_mono_ms() - sb->start_ms;
    if (WIFEXITED(st)) {
        r->exit_code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r->exit_code = 128 + WTERMSIG(st);
    } else {
        r->exit_code = 255;
    }
    if (r->exit_code > 128 && r->exit_code < 128 + NSIG) {
        r->signal = r->exit_code - 128;
    }
    if (sb->child_pid <= 0 && !sb->killing) {
        /* bwrap never started the command: its own setup failed. */
        r->failed = 1;
        err_set(&r->error, ERR_IO,
                "the sandbox could not start (bwrap exited %d: %.*s); run 'drun-mcp doctor' "
                "for the fix",
                r->exit_code, (int)(tn > 160 ? 160 : tn), tail);
    }
    if (r->timed_out) {
        r->limit_hit = "timeout";
    } else if (sb->cgroup[0] && cgroup_hit_max(sb)) {
        r->limit_hit = "processes";
    } else if (r->signal == SIGXCPU) {
        r->limit_hit = "cpu";
    } else if (r->signal == SIGXFSZ || (r->exit_code && contains_ci(tail, tn, "file too large"))) {
        r->limit_hit = "file_size";
    } else if (contains_ci(tail, tn, "cannot fork") || contains_ci(tail, tn, "fork: retry") ||
               contains_ci(tail, tn, "fork: resource temporarily")) {
        /* A refused fork shows as the shell's message even when the script still exits 0. */
        r->limit_hit = "processes";
    } else if (r->exit_code && memory_refused(tail, tn)) {
        r->limit_hit = "memory";
    } else if (r->exit_code && (contains_ci(tail, tn, "no space left on device") ||
                                contains_ci(tail, tn, "disk quota exceeded"))) {
        /* ENOSPC from the bounded workspace (or the /tmp tmpfs): see docs/security.md. */
        r->limit_hit = "disk";
    } else if (r->out.truncated || r->err.truncated) {
        r->limit_hit = "output";
    }
    uv_timer_stop(&sb->timer);
    close_handle(sb, (uv_handle_t *)&sb->timer);
    uv_timer_stop(&sb->tick);
    close_handle(sb, (uv_handle_t *)&sb->tick);
    close_handle(sb, (uv_handle_t *)&sb->exit_poll);
    if (sb->child_watch) {
        close_handle(sb, (uv_handle_t *)&sb->child_poll);
    }
    close_handle(sb, (uv_handle_t *)&sb->out_pipe);
    close_handle(sb, (uv_handle_t *)&sb->err_pipe);
    close_handle(sb, (uv_handle_t *)&sb->status_pipe);
    if (sb->script_open) {
        sb->script_open = 0;
        close_handle(sb, (uv_handle_t *)&sb->script_pipe);
    }
    /* The result moves to the caller; the handle frees itself in the close callbacks. */
    sb->cb.on_exit(sb->cb.ud, r);
    /*
     * The cgroup is empty (the namespace is gone and bwrap reaped); removing it can wait
     * until the caller has answered. sb lives on until its close callbacks, which uv runs
     * on a later turn of the loop, never from inside uv_close.
     */
    if (sb->cgroup[0]) {
        cgroup_remove(sb->cgroup);
    }
}

static void
maybe_finish(struct sandbox *sb)
{
    /*
     * bwrap may exit as soon as its pid 1 reports the status, while pid 1 is still
     * tearing the namespace down; wait for pid 1 too, so nothing is left when we answer.
     */
    if (sb->exited && !sb->out_open && !sb->err_open && (sb->child_gone || !sb->child_watch) &&
        (sb->child_pid > 0 || !sb->status_open)) {
        /* The last condition: bwrap's status line may still be unread when its exit and
         * the output EOFs are handled first (a busy machine); until that pipe's EOF, no
         * child pid does not mean the sandbox failed to start. Every writer of the pipe
         * is gone once bwrap and its pid 1 are, so the EOF comes. */
        finish(sb);
    }
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct sandbox *sb = h->data;
    (void)suggested;
    b->base = sb->readbuf;
    b->len = sizeof(sb->readbuf);
}

static void
capture(struct sandbox_output *o, size_t max, const char *p, size_t n)
{
    size_t room = max > o->data.len ? max - o->data.len : 0;
    size_t keep = n < room ? n : room;

    o->total += n;
    if (keep > 0 && buf_append(&o->data, p, keep) < 0) {
        keep = 0;
    }
    if (keep < n) {
        o->truncated = 1;
    }
    if (n >= SANDBOX_TAIL_BYTES) {
        memcpy(o->tail, p + n - SANDBOX_TAIL_BYTES, SANDBOX_TAIL_BYTES);
        o->tail_len = SANDBOX_TAIL_BYTES;
    } else {
        size_t drop =
            o->tail_len + n > SANDBOX_TAIL_BYTES ? o->tail_len + n - SANDBOX_TAIL_BYTES : 0;
        memmove(o->tail, o->tail + drop, o->tail_len - drop);
        o->tail_len -= drop;
        memcpy(o->tail + o->tail_len, p, n);
        o->tail_len += n;
    }
}

static void
on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct sandbox *sb = s->data;
    int is_out = s == (uv_stream_t *)&sb->out_pipe;

    if (n > 0) {
        struct sandbox_output *o = is_out ? &sb->res.out : &sb->res.err;
        capture(o, sb->lim.max_output_bytes, b->base, (size_t)n);
        if (sb->cb.on_output != NULL) {
            sb->cb.on_output(sb->cb.ud, is_out ? SANDBOX_STDOUT : SANDBOX_STDERR, b->base,
                             (size_t)n);
        }
        return;
    }
    if (n < 0) {
        uv_read_stop(s);
        if (is_out) {
            sb->out_open = 0;
        } else {
            sb->err_open = 0;
        }
        maybe_finish(sb);
    }
}

/* The host pid of process pid's first child (from /proc), or 0. */
static pid_t
only_child(pid_t pid)
{
    char path[96], text[64];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    text[n] = '\0';
    long c = strtol(text, NULL, 10);
    return c > 1 && c <= INT_MAX ? (pid_t)c : 0;
}

static void
on_child_gone(uv_poll_t *h, int status, int events)
{
    struct sandbox *sb = h->data;
    (void)status;
    (void)events;

    uv_poll_stop(h);
    sb->child_gone = 1;
    maybe_finish(sb);
}

static void
on_status(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct sandbox *sb = s->data;
    const char *p;

    if (n < 0) {
        uv_read_stop(s);
        sb->status_open = 0;
        maybe_finish(sb);
        return;
    }
    if (n == 0 || buf_append(&sb->status, b->base, (size_t)n) < 0 || sb->child_pid > 0) {
        return;
    }
    p = strstr(buf_cstr(&sb->status), "\"child-pid\"");
    if (p != NULL && strchr(p, '}') != NULL) {
        p = strchr(p, ':');
        if (p != NULL) {
            long pid = strtol(p + 1, NULL, 10);
            if (sb->own_pidns) {
                /* bwrap counts in its own namespace; ours is its only child. */
                pid = only_child(sb->bwrap_pid);
            }
            if (pid > 1 && pid <= INT_MAX) {
                sb->child_pid = (pid_t)pid;
                /* A pidfd pins the process: a later kill cannot hit a reused pid. */
                sb->child_pidfd = (int)syscall(SYS_pidfd_open, sb->child_pid, 0);
                if (sb->child_pidfd >= 0 &&
                    uv_poll_init(sb->loop, &sb->child_poll, sb->child_pidfd) == 0) {
                    sb->child_poll.data = sb;
                    sb->child_watch = 1;
                    sb->handles++;
                    uv_poll_start(&sb->child_poll, UV_READABLE, on_child_gone);
                    if (sb->prepared) {
                        uv_unref((uv_handle_t *)&sb->child_poll);
                    }
                }
                if (sb->killing) {
                    signal_kill(sb->child_pidfd, sb->child_pid);
                }
            }
        }
    }
}

static void
on_exit_ready(uv_poll_t *h, int status, int events)
{
    struct sandbox *sb = h->data;
    int st;
    pid_t r;
    (void)status;
    (void)events;

    r = waitpid(sb->bwrap_pid, &st, WNOHANG);
    if (r == 0) {
        return;
    }
    uv_poll_stop(h);
    sb->exited = 1;
    sb->wait_status = r == sb->bwrap_pid ? st : (255 << 8);
    status_release(sb);
    /* pid 1 of the namespace is gone with bwrap; the pipes follow. Bound the wait. */
    if (!sb->killing) {
        uv_timer_stop(&sb->timer);
        uv_timer_start(&sb->timer, on_timer, DRAIN_MS, 0);
    }
    maybe_finish(sb);
}

static void
on_timer(uv_timer_t *t)
{
    struct sandbox *sb = t->data;

    if (!sb->exited && !sb->killing) {
        sb->res.timed_out = 1;
        kill_all(sb);
        return;
    }
    if (!sb->exited) {
        /* SIGKILL was sent DRAIN_MS ago and bwrap still is not reaped: should not happen. */
        log_warn("sandbox process %d did not exit after SIGKILL", (int)sb->bwrap_pid);
        uv_timer_start(&sb->timer, on_timer, DRAIN_MS, 0);
        return;
    }
    /* Exited but a pipe is still open: something outside the namespace holds it. */
    log_warn("sandbox process %d: output pipes still open %d ms after it ended", (int)sb->bwrap_pid,
             DRAIN_MS);
    sb->out_open = sb->err_open = 0;
    sb->child_gone = 1;
    maybe_finish(sb);
}

void
sandbox_cancel(struct sandbox *sb)
{
    if (sb == NULL || sb->done) {
        return;
    }
    if (!sb->res.cancelled && !sb->exited) {
        sb->res.cancelled = 1;
        kill_all(sb);
    }
}

/* ---- start ------------------------------------------------------------------------ */

static int
open_pipe(int fds[2], struct err *err)
{
    if (pipe2(fds, O_CLOEXEC) < 0) {
        return err_set(err, ERR_IO, "cannot create a pipe: %s", strerror(errno));
    }
    return 0;
}

static void
set_rl(struct rlimit *r, uint64_t v)
{
    r->rlim_cur = (rlim_t)v;
    r->rlim_max = (rlim_t)v;
}

/*
 * Checks the spec, forks bwrap and sets up the handles that watch it. Cold (warm = 0): the
 * command goes into a memfd bound read-only at COMMAND_PATH. Warm: bwrap gets --block-fd
 * and a script pipe instead; *block_wr and *script_wr receive the daemon's ends, and
 * nothing past bwrap's set-up happens until the block fd is written. The caller sets
 * sb->cb and starts the timer. If argv_out is not NULL the argv moves there.
 */
static int
spawn(uv_loop_t *loop, const struct sandbox_spec *spec, int warm, struct sandbox **out,
      int *block_wr, int *script_wr, struct argv_vec *argv_out, struct err *err)
{
    struct sandbox *sb = NULL;
    struct argv_vec a = {0};
    struct child_plan cp;
    char bwrap[SANDBOX_PATH_MAX];
    int p_out[2] = {-1, -1}, p_err[2] = {-1, -1}, p_st[2] = {-1, -1}, p_ex[2] = {-1, -1};
    int devnull = -1, seccomp_fd = -1, cmd_fd = -1, cgroup_fd = -1;
    int p_block[2] = {-1, -1}, p_script[2] = {-1, -1}, p_map[2] = {-1, -1};
    int rc = -1, e = 0;
    ssize_t n;
    pid_t pid;

    *out = NULL;
    sb = mem_calloc(1, sizeof(*sb));
    if (sb == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory starting the sandbox");
    }
    sb->bwrap_pidfd = sb->child_pidfd = sb->status_keep = -1;
    limits_fill(&sb->lim, &spec->limits);
    if (spec_check(spec, &sb->lim, err) < 0) {
        goto out;
    }
    if (bwrap_find(bwrap, sizeof(bwrap)) == NULL) {
        err_set(err, ERR_NOTFOUND,
                "bwrap not found; install bubblewrap (e.g. 'apt-get install bubblewrap') to run "
                "commands");
        goto out;
    }
    if (build_argv(spec, &sb->lim, bwrap, warm ? ARGV_WARM : ARGV_COLD, &a, err) < 0) {
        goto out;
    }
    if (open_pipe(p_out, err) < 0 || open_pipe(p_err, err) < 0 || open_pipe(p_st, err) < 0 ||
        open_pipe(p_ex, err) < 0) {
        goto out;
    }
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        err_set(err, ERR_IO, "cannot open '/dev/null': %s", strerror(errno));
        goto out;
    }
    seccomp_fd = seccomp_memfd(err);
    if (seccomp_fd < 0) {
        goto out;
    }
    if (warm) {
        if (open_pipe(p_block, err) < 0 || open_pipe(p_script, err) < 0) {
            goto out;
        }
        cmd_fd = p_script[0];
        p_script[0] = -1;
        goto spawn;
    }
    cmd_fd = memfd_create("drun-command", MFD_CLOEXEC);
    if (cmd_fd < 0) {
        err_set(err, ERR_IO, "cannot create a memfd for the command: %s", strerror(errno));
        goto out;
    }
    for (size_t off = 0; off < spec->command_len; off += (size_t)n) {
        n = write(cmd_fd, spec->command + off, spec->command_len - off);
        if (n <= 0) {
            err_set(err, ERR_IO, "cannot write the command to its memfd: %s", strerror(errno));
            goto out;
        }
    }
    if (lseek(cmd_fd, 0, SEEK_SET) < 0) {
        err_set(err, ERR_IO, "cannot rewind the command memfd: %s", strerror(errno));
        goto out;
    }
spawn:
    /* uid 0 is exempt from RLIMIT_NPROC; only a cgroup bounds a root daemon's sandbox. */
    cgroup_fd = geteuid() == 0 ? cgroup_make(sb) : -1;
    if (geteuid() == 0 && cgroup_fd < 0) {
        static int warned;
        if (!warned++) {
            log_warn("running as root without a usable pids cgroup: the sandbox process limit "
                     "is not enforced; run drun-mcp as a normal user");
        }
    }

    memset(&cp, 0, sizeof(cp));
    cp.bwrap = bwrap;
    cp.argv = a.v;
    cp.src[0] = devnull;
    cp.src[1] = p_out[1];
    cp.src[2] = p_err[1];
    cp.src[FD_STATUS] = p_st[1];
    cp.src[FD_SECCOMP] = seccomp_fd;
    cp.src[FD_COMMAND] = cmd_fd;
    cp.src[FD_EXECERR] = p_ex[1];
    cp.src[FD_BLOCK] = p_block[0];
    cp.cgroup_fd = cgroup_fd;
    for (size_t i = 0; i < spec->n_overlays && i < SANDBOX_OVERLAYS_MAX; i++) {
        if (spec->overlays[i].dir_fd > 0) {
            cp.ov[i] = spec->overlays[i].dir_fd;
            cp.n_ov = i + 1;
        } else {
            cp.ov[i] = -1;
        }
    }
    set_rl(&cp.rl_as, sb->lim.memory_bytes);
    cp.rl_cpu.rlim_cur = (rlim_t)sb->lim.cpu_secs;
    cp.rl_cpu.rlim_max = (rlim_t)sb->lim.cpu_secs + 1; /* SIGXCPU first, then SIGKILL */
    set_rl(&cp.rl_fsize, sb->lim.file_size_bytes);
    set_rl(&cp.rl_core, 0);
    if (geteuid() == 0) {
        uint32_t uid, gid;
        sandbox_user(spec, &uid, &gid);
        cp.drop = 1;
        cp.uid = (uid_t)uid;
        cp.gid = (gid_t)gid;
    }
    cp.parent = getpid();
    cp.map_rd = cp.map_wr = -1;
    /*
     * Not root: a pid namespace needs a user namespace of its own, in which the child maps
     * just our uid and gid (written by us below, the child waits for them on a pipe that
     * reaches EOF if we die). Where user namespaces cannot nest, plain fork.
     */
    cp.own_pidns = geteuid() == 0 || userns_nest_ok;
    cp.userns = geteuid() != 0 && userns_nest_ok;
    if (cp.userns && pipe2(p_map, O_CLOEXEC) == 0) {
        cp.map_rd = p_map[0];
        cp.map_wr = p_map[1];
    } else if (cp.userns) {
        cp.own_pidns = cp.userns = 0;
    }
    sb->own_pidns = cp.own_pidns;

    sb->start_ms = time_mono_ms();
    pid = spawn_child(&cp);
    if (pid < 0 && cp.userns) {
        userns_nest_ok = 0; /* not allowed here: every later sandbox forks plainly */
        cp.own_pidns = cp.userns = 0;
        sb->own_pidns = 0;
        pid = spawn_child(&cp);
    }
    if (pid < 0) {
        err_set(err, ERR_IO, "cannot start the sandbox process: %s", strerror(errno));
        goto out;
    }
    if (cp.userns && userns_map(pid, p_map[1]) < 0) {
        int st;
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        err_set(err, ERR_IO, "cannot map the sandbox's user namespace: %s", strerror(errno));
        goto out;
    }
    sb->bwrap_pid = pid;
    close(p_out[1]);
    close(p_err[1]);
    close(p_st[1]);
    close(p_ex[1]);
    p_out[1] = p_err[1] = p_st[1] = p_ex[1] = -1;
    if (p_block[0] >= 0) {
        close(p_block[0]);
        p_block[0] = -1;
    }
    /* The exec-error pipe closes on a successful exec, or carries errno. */
    do {
        n = read(p_ex[0], &e, sizeof(e));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(e)) {
        int st;
        waitpid(pid, &st, 0);
        err_set(err, e == ENOENT ? ERR_NOTFOUND : ERR_IO, "cannot start '%s': %s", bwrap,
                strerror(e));
        goto out;
    }
    sb->bwrap_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (sb->bwrap_pidfd < 0) {
        int st;
        e = errno;
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        err_set(err, ERR_IO,
                "cannot watch the sandbox (pidfd_open: %s); Linux 5.3 or later is "
                "needed",
                strerror(e));
        goto out;
    }
    sb->loop = loop;
    buf_init(&sb->status, STATUS_MAX);
    buf_init(&sb->res.out.data, sb->lim.max_output_bytes);
    buf_init(&sb->res.err.data, sb->lim.max_output_bytes);
    uv_poll_init(loop, &sb->exit_poll, sb->bwrap_pidfd);
    uv_pipe_init(loop, &sb->out_pipe, 0);
    uv_pipe_init(loop, &sb->err_pipe, 0);
    uv_pipe_init(loop, &sb->status_pipe, 0);
    uv_timer_init(loop, &sb->timer);
    uv_timer_init(loop, &sb->tick);
    sb->exit_poll.data = sb->out_pipe.data = sb->err_pipe.data = sb->status_pipe.data = sb;
    sb->timer.data = sb->tick.data = sb;
    sb->handles = 6;
    uv_pipe_open(&sb->out_pipe, p_out[0]);
    uv_pipe_open(&sb->err_pipe, p_err[0]);
    sb->status_keep = fcntl(p_st[0], F_DUPFD_CLOEXEC, 3);
    uv_pipe_open(&sb->status_pipe, p_st[0]);
    p_out[0] = p_err[0] = p_st[0] = -1;
    sb->out_open = sb->err_open = sb->status_open = 1;
    uv_read_start((uv_stream_t *)&sb->out_pipe, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&sb->err_pipe, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&sb->status_pipe, on_alloc, on_status);
    uv_poll_start(&sb->exit_poll, UV_READABLE, on_exit_ready);
    if (warm) {
        *block_wr = p_block[1];
        *script_wr = p_script[1];
        p_block[1] = p_script[1] = -1;
    }
    if (argv_out != NULL) {
        *argv_out = a;
        memset(&a, 0, sizeof(a));
    }
    *out = sb;
    sb = NULL;
    rc = 0;
out:
    if (sb != NULL && sb->cgroup[0]) {
        rmdir(sb->cgroup);
    }
    mem_free(sb);
    argv_free(&a);
    for (int i = 0; i < 2; i++) {
        if (p_out[i] >= 0) {
            close(p_out[i]);
        }
        if (p_err[i] >= 0) {
            close(p_err[i]);
        }
        if (p_st[i] >= 0) {
            close(p_st[i]);
        }
        if (p_ex[i] >= 0) {
            close(p_ex[i]);
        }
        if (p_block[i] >= 0) {
            close(p_block[i]);
        }
        if (p_script[i] >= 0) {
            close(p_script[i]);
        }
        if (p_map[i] >= 0) {
            close(p_map[i]);
        }
    }
    if (devnull >= 0) {
        close(devnull);
    }
    if (seccomp_fd >= 0) {
        close(seccomp_fd);
    }
    if (cmd_fd >= 0) {
        close(cmd_fd);
    }
    if (cgroup_fd >= 0) {
        close(cgroup_fd);
    }
    return rc;
}

static int start_always(uv_loop_t *loop, const struct sandbox_spec *spec,
                        const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err);

int
sandbox_start(uv_loop_t *loop, const struct sandbox_spec *spec, const struct sandbox_callbacks *cb,
              struct sandbox **out, struct err *err)
{
    struct sandbox *sb = NULL;

    *out = NULL;
    if (cb == NULL || cb->on_exit == NULL) {
        return err_set(err, ERR_INVAL, "sandbox_start needs an on_exit callback");
    }
    if (sandbox_warm_mode() == SANDBOX_WARM_ALWAYS) {
        return start_always(loop, spec, cb, out, err);
    }
    if (spawn(loop, spec, 0, &sb, NULL, NULL, NULL, err) < 0) {
        return -1;
    }
    sb->cb = *cb;
    sb->start_ms = time_mono_ms();
    clock_start(sb);
    *out = sb;
    return 0;
}

/* ---- prepared (warm) sandboxes ------------------------------------------------------ */

/*
 * A prepared sandbox is a bwrap that has built every namespace and mount and waits on
 * --block-fd, before it loads the seccomp filter or execs anything: no process in it can
 * run user code. It is tied to exactly what it was built from: the full bwrap argv (every
 * bind, the environment, the tmpfs sizes, the process limit in the prelude), the rlimits
 * set before exec, and the identity (device, inode) of every bind source, so a directory
 * replaced under the same name is noticed too. sandbox_prepared_valid() rebuilds all of
 * that from the caller's current spec and accepts only an exact match; anything else is
 * discarded and the call goes cold, so a command never runs under an older policy.
 */
struct bind_id {
    dev_t dev;
    ino_t ino;
};

struct sandbox_prep {
    struct sandbox *sb; /* NULL once bwrap has exited or the command was released */
    int block_wr;       /* our end of --block-fd */
    int script_wr;      /* our end of the script pipe */
    struct argv_vec argv;
    struct sandbox_limits lim;
    struct bind_id *ids;
    size_t n_ids;
    uint32_t uid, gid; /* the host user it runs as */
    int orphaned;      /* freed by its owner while bwrap was still being reaped */
};

enum sandbox_warm
sandbox_warm_mode(void)
{
    const char *v = getenv("DRUN_SANDBOX_WARM");

    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0 || strcmp(v, "1") == 0) {
        return SANDBOX_WARM_AUTO;
    }
    if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "cold") == 0) {
        return SANDBOX_WARM_OFF;
    }
    if (strcmp(v, "always") == 0 || strcmp(v, "warm") == 0) {
        return SANDBOX_WARM_ALWAYS;
    }
    return SANDBOX_WARM_AUTO;
}

/* The (device, inode) of every --bind / --ro-bind source in a, in order. */
static int
bind_ids(const struct argv_vec *a, const struct sandbox_spec *spec, struct bind_id **out, size_t *n,
         struct err *err)
{
    struct bind_id *v;
    size_t k = 0;

    *out = NULL;
    *n = 0;
    v = mem_calloc(a->n / 3 + 1, sizeof(*v));
    if (v == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory preparing a sandbox");
    }
    for (size_t i = 0; i + 1 < a->n; i++) {
        struct stat st;
        if (strcmp(a->v[i], "--ro-bind-fd") == 0) {
            /* An overlay's fd (FD_FIRST_FREE + its index): the directory it holds. */
            size_t ov = (size_t)strtoul(a->v[i + 1], NULL, 10) - FD_FIRST_FREE;
            if (ov < spec->n_overlays && fstat(spec->overlays[ov].dir_fd, &st) == 0) {
                v[k].dev = st.st_dev;
                v[k].ino = st.st_ino;
            }
            k++;
            i += 2;
            continue;
        }
        if (strcmp(a->v[i], "--bind") != 0 && strcmp(a->v[i], "--ro-bind") != 0) {
            continue;
        }
        if (stat(a->v[i + 1], &st) == 0) {
            v[k].dev = st.st_dev;
            v[k].ino = st.st_ino;
        }
        k++;
        i += 2;
    }
    *out = v;
    *n = k;
    return 0;
}

static void
prep_destroy(struct sandbox_prep *p)
{
    if (p->block_wr >= 0) {
        close(p->block_wr);
    }
    if (p->script_wr >= 0) {
        close(p->script_wr);
    }
    argv_free(&p->argv);
    mem_free(p->ids);
    mem_free(p);
}

/* bwrap ended while the sandbox waited (or after it was discarded). */
static void
prep_on_exit(void *ud, struct sandbox_result *res)
{
    struct sandbox_prep *p = ud;

    if (res->failed && !p->orphaned) {
        log_debug("a prepared sandbox ended before use: %s", res->error.msg);
    }
    sandbox_result_release(res);
    p->sb = NULL;
    if (p->orphaned) {
        prep_destroy(p);
    }
}

/* While it waits, a prepared sandbox does not keep the loop alive (sandbox_run, shutdown). */
static void
prep_ref(struct sandbox *sb, int ref)
{
    uv_handle_t *hs[] = {(uv_handle_t *)&sb->exit_poll, (uv_handle_t *)&sb->out_pipe,
                         (uv_handle_t *)&sb->err_pipe, (uv_handle_t *)&sb->status_pipe,
                         sb->child_watch ? (uv_handle_t *)&sb->child_poll : NULL};

    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
        if (hs[i] != NULL) {
            if (ref) {
                uv_ref(hs[i]);
            } else {
                uv_unref(hs[i]);
            }
        }
    }
}

int
sandbox_prepare(uv_loop_t *loop, const struct sandbox_spec *spec, struct sandbox_prep **out,
                struct err *err)
{
    struct sandbox_spec s = *spec;
    struct sandbox_prep *p;

    *out = NULL;
    s.command = ""; /* the command is not known yet and never part of what is prepared */
    s.command_len = 0;
    p = mem_calloc(1, sizeof(*p));
    if (p == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory preparing a sandbox");
    }
    p->block_wr = p->script_wr = -1;
    if (spawn(loop, &s, 1, &p->sb, &p->block_wr, &p->script_wr, &p->argv, err) < 0) {
        mem_free(p);
        return -1;
    }
    p->lim = p->sb->lim;
    sandbox_user(spec, &p->uid, &p->gid);
    p->sb->prepared = 1;
    p->sb->cb.on_output = NULL;
    p->sb->cb.on_exit = prep_on_exit;
    p->sb->cb.ud = p;
    prep_ref(p->sb, 0);
    if (bind_ids(&p->argv, spec, &p->ids, &p->n_ids, err) < 0) {
        sandbox_prepared_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

/* 1 if bwrap has exited (maybe not yet seen by the loop). */
static int
bwrap_gone(const struct sandbox *sb)
{
    struct pollfd pf = {sb->bwrap_pidfd, POLLIN, 0};

    return sb->exited || sb->killing || sb->bwrap_pidfd < 0 || poll(&pf, 1, 0) != 0;
}

/* Appends s as /proc/PID/mountinfo writes a path: space, tab, newline, backslash octal. */
static void
mountinfo_escape(struct buf *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\\') {
            buf_printf(out, "\\%03o", (unsigned)(unsigned char)*s);
        } else {
            buf_putc(out, *s);
        }
    }
}

/* 1 if the mountinfo text mi has a mount whose mount point (5th field) is `point`. */
static int
mountinfo_has(const char *mi, const char *point)
{
    size_t plen = strlen(point);

    while (*mi != '\0') {
        const char *eol = strchr(mi, '\n');
        const char *f = mi;
        size_t len = eol ? (size_t)(eol - mi) : strlen(mi);

        for (int field = 0; field < 4 && f != NULL && f < mi + len; field++) {
            f = memchr(f, ' ', len - (size_t)(f - mi));
            f = f != NULL ? f + 1 : NULL;
        }
        if (f != NULL && f + plen <= mi + len && memcmp(f, point, plen) == 0 &&
            (f + plen == mi + len || f[plen] == ' ')) {
            return 1;
        }
        mi += len;
        if (*mi == '\n') {
            mi++;
        }
    }
    return 0;
}

/*
 * The waiting sandbox's pid 1: as bwrap reported it on the status fd, or (not read yet)
 * bwrap's only child, from /proc. 0 if there is none yet.
 */
static pid_t
prep_child(const struct sandbox *sb)
{
    if (sb->child_pid > 0) {
        return sb->child_pid;
    }
    return only_child(sb->bwrap_pid);
}

/*
 * 1 if every overlay bind of argv a (a bind whose target is under /workspace/) is still
 * mounted in the waiting sandbox. Its mount point is a directory bwrap created in the
 * host workspace directory; a sync that removed it (a rollback, a full re-sync) has
 * detached the overlay inside (the kernel does that for a mount point removed from
 * another mount namespace), which no inode comparison notices reliably.
 */
static int
overlays_mounted(const struct sandbox *sb, const struct argv_vec *a)
{
    struct buf mi, point;
    char path[64], chunk[4096];
    int fd, ok = 1, any = 0;
    ssize_t n;

    for (size_t i = 0; i + 2 < a->n && !any; i++) {
        any = (strcmp(a->v[i], "--ro-bind") == 0 || strcmp(a->v[i], "--ro-bind-fd") == 0) &&
              strncmp(a->v[i + 2], "/workspace/", 11) == 0;
    }
    if (!any) {
        return 1;
    }
    pid_t pid = prep_child(sb);
    if (pid <= 0) {
        return 0; /* no pid 1 yet: still setting up */
    }
    snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    buf_init(&mi, (size_t)4 << 20);
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        buf_append(&mi, chunk, (size_t)n);
    }
    close(fd);
    buf_init(&point, SANDBOX_PATH_MAX * 4 + 1);
    if (n < 0 || buf_failed(&mi)) {
        ok = 0;
    }
    for (size_t i = 0; ok && i + 2 < a->n; i++) {
        if ((strcmp(a->v[i], "--ro-bind") != 0 && strcmp(a->v[i], "--ro-bind-fd") != 0) ||
            strncmp(a->v[i + 2], "/workspace/", 11) != 0) {
            continue;
        }
        buf_reset(&point);
        mountinfo_escape(&point, a->v[i + 2]);
        ok = !buf_failed(&point) && mountinfo_has(buf_cstr(&mi), buf_cstr(&point));
        i += 2;
    }
    buf_release(&point);
    buf_release(&mi);
    return ok;
}

int
sandbox_prepared_valid(const struct sandbox_prep *p, const struct sandbox_spec *spec)
{
    struct sandbox_limits lim;
    struct argv_vec a = {0};
    struct bind_id *ids = NULL;
    size_t n_ids = 0;
    char bwrap[SANDBOX_PATH_MAX];
    struct err err;
    uint32_t uid, gid;
    int ok = 0;

    if (p == NULL || p->sb == NULL || bwrap_gone(p->sb)) {
        return 0;
    }
    sandbox_user(spec, &uid, &gid);
    if (uid != p->uid || gid != p->gid) {
        return 0;
    }
    limits_fill(&lim, &spec->limits);
    if (lim.memory_bytes != p->lim.memory_bytes || lim.cpu_secs != p->lim.cpu_secs ||
        lim.file_size_bytes != p->lim.file_size_bytes || lim.nproc != p->lim.nproc ||
        lim.tmp_size_bytes != p->lim.tmp_size_bytes) {
        return 0;
    }
    if (bwrap_find(bwrap, sizeof(bwrap)) == NULL ||
        build_argv(spec, &lim, bwrap, ARGV_WARM, &a, &err) < 0 || a.n != p->argv.n) {
        goto out;
    }
    for (size_t i = 0; i < a.n; i++) {
        if (strcmp(a.v[i], p->argv.v[i]) != 0) {
            goto out;
        }
    }
    if (bind_ids(&a, spec, &ids, &n_ids, &err) < 0 || n_ids != p->n_ids ||
        (n_ids > 0 && memcmp(ids, p->ids, n_ids * sizeof(*ids)) != 0)) {
        goto out;
    }
    if (!overlays_mounted(p->sb, &a)) {
        goto out;
    }
    ok = 1;
out:
    mem_free(ids);
    argv_free(&a);
    return ok;
}

static void
on_script_written(uv_write_t *req, int status)
{
    struct sandbox *sb = req->data;

    if (status < 0 && status != UV_ECANCELED) {
        log_debug("cannot hand the command to the sandbox: %s", uv_strerror(status));
    }
    /* EOF for the sandbox's reader: the whole script is in (or the run is over). */
    if (sb->script_open) {
        sb->script_open = 0;
        close_handle(sb, (uv_handle_t *)&sb->script_pipe);
    }
}

/*
 * What goes down the script pipe: a header line for the prelude (see build_argv), then
 * the script. Short scripts go as N lines ("l<N>\n", then the script and one more newline,
 * so the prelude's N reads see N newline-terminated lines, which it joins back with
 * newlines: the exact script), longer ones as "c\n", the bytes as they are and a "."
 * that keeps $(cat) from dropping the script's trailing newlines (the prelude strips it).
 */
static int
script_frame(const struct sandbox_spec *spec, char **out, size_t *out_len)
{
    const char *c = spec->command;
    size_t len = spec->command_len, lines = 0, n;
    char tail; /* "l": ends the last line for `read`; "c": a '.' the prelude strips, so
                  $(cat) keeps the script's own trailing newlines */
    char head[32];
    char *p;

    if (len <= WARM_READ_MAX) {
        for (size_t i = 0; i < len; i++) {
            lines += c[i] == '\n';
        }
        tail = '\n'; /* every line ends in a newline; the shell joins them without it */
        lines++;
        n = (size_t)snprintf(head, sizeof(head), "l%zu\n", lines);
    } else {
        n = (size_t)snprintf(head, sizeof(head), "c\n");
        tail = '.';
    }
    p = mem_alloc(n + len + 2);
    if (p == NULL) {
        return -1;
    }
    memcpy(p, head, n);
    if (len > 0) {
        memcpy(p + n, c, len);
    }
    p[n + len] = tail;
    *out = p;
    *out_len = n + len + 1;
    return 0;
}

int
sandbox_start_prepared(struct sandbox_prep *p, const struct sandbox_spec *spec,
                       const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err)
{
    struct sandbox_limits lim;
    struct sandbox *sb;
    uv_buf_t b;
    ssize_t w;

    *out = NULL;
    if (cb == NULL || cb->on_exit == NULL) {
        return err_set(err, ERR_INVAL, "sandbox_start_prepared needs an on_exit callback");
    }
    limits_fill(&lim, &spec->limits);
    if (spec_check(spec, &lim, err) < 0) {
        return -1;
    }
    if (!sandbox_prepared_valid(p, spec)) {
        return err_set(err, ERR_BUSY,
                       "the prepared sandbox no longer matches the policy; start one cold");
    }
    sb = p->sb;
    if (script_frame(spec, &sb->script, &sb->script_len) < 0) {
        return err_set(err, ERR_NOMEM, "out of memory handing over the command");
    }
    if (uv_pipe_init(sb->loop, &sb->script_pipe, 0) != 0 ||
        uv_pipe_open(&sb->script_pipe, p->script_wr) != 0) {
        mem_free(sb->script);
        sb->script = NULL;
        return err_set(err, ERR_IO, "cannot open the script pipe");
    }
    p->script_wr = -1;
    sb->script_pipe.data = sb;
    sb->script_req.data = sb;
    sb->handles++;
    sb->script_open = 1;
    /* From here on the sandbox belongs to this call, whatever happens. */
    p->sb = NULL;
    sb->prepared = 0;
    sb->lim = lim;
    sb->cb = *cb;
    sb->res.warm = 1;
    prep_ref(sb, 1);
    b = uv_buf_init(sb->script, (unsigned)sb->script_len);
    if (uv_write(&sb->script_req, (uv_stream_t *)&sb->script_pipe, &b, 1, on_script_written) != 0) {
        sb->script_open = 0;
        close_handle(sb, (uv_handle_t *)&sb->script_pipe);
    }
    /* Release: bwrap loads the seccomp filter and execs the shell; the clock starts now. */
    do {
        w = write(p->block_wr, "x", 1);
    } while (w < 0 && errno == EINTR);
    close(p->block_wr);
    p->block_wr = -1;
    sb->start_ms = time_mono_ms();
    clock_start(sb);
    if (w != 1) {
        kill_all(sb); /* bwrap went away under us: reported through on_exit */
    }
    prep_destroy(p);
    *out = sb;
    return 0;
}

void
sandbox_prepared_free(struct sandbox_prep *p)
{
    struct sandbox *sb;

    if (p == NULL) {
        return;
    }
    sb = p->sb;
    if (sb == NULL) {
        prep_destroy(p);
        return;
    }
    if (uv_is_closing((uv_handle_t *)&sb->exit_poll)) {
        /*
         * The loop was torn down under us (daemon shutdown closes every handle): kill
         * directly and reap, so nothing is left even before --die-with-parent acts.
         */
        int st;
        if (sb->child_pid > 0) {
            signal_kill(sb->child_pidfd, sb->child_pid);
            signal_kill(sb->bwrap_pidfd, sb->bwrap_pid);
        } else {
            kill_unknown(sb);
        }
        while (waitpid(sb->bwrap_pid, &st, 0) < 0 && errno == EINTR) {
        }
        status_release(sb);
        if (sb->cgroup[0]) {
            cgroup_remove(sb->cgroup);
        }
        /*
         * Only the daemon's shutdown gets here, after uv_run returned: every handle of sb
         * is closed and off the loop, but closed without on_close, so sb was never freed.
         */
        if (sb->child_pidfd >= 0) {
            close(sb->child_pidfd);
        }
        if (sb->bwrap_pidfd >= 0) {
            close(sb->bwrap_pidfd);
        }
        sandbox_result_release(&sb->res);
        buf_release(&sb->status);
        mem_free(sb->script);
        mem_free(sb);
        prep_destroy(p);
        return;
    }
    /*
     * Kill now: the sandbox's pid 1 if bwrap has reported it (it takes the namespace
     * along), else bwrap's children while bwrap is stopped (kill_unknown); never bwrap
     * alone, which could leave a pid 1 waiting forever for its uid map. The loop reaps.
     */
    p->orphaned = 1;
    sb->prepared = 0;
    prep_ref(sb, 1); /* the loop now waits for the reaping */
    if (p->block_wr >= 0) {
        close(p->block_wr);
        p->block_wr = -1;
    }
    if (p->script_wr >= 0) {
        close(p->script_wr);
        p->script_wr = -1;
    }
    kill_all(sb);
}

/*
 * DRUN_SANDBOX_WARM=always (the test switch): every command takes the warm path, prepared
 * on the spot. With overlays the release waits (bounded) until bwrap has mounted them,
 * since sandbox_prepared_valid requires that.
 */
static int
start_always(uv_loop_t *loop, const struct sandbox_spec *spec, const struct sandbox_callbacks *cb,
             struct sandbox **out, struct err *err)
{
    struct sandbox_prep *p = NULL;

    if (sandbox_prepare(loop, spec, &p, err) < 0) {
        return -1;
    }
    for (int i = 0; i < 5000 && spec->n_overlays > 0 && p->sb != NULL && !bwrap_gone(p->sb) &&
                    !overlays_mounted(p->sb, &p->argv);
         i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (sandbox_start_prepared(p, spec, cb, out, err) < 0) {
        sandbox_prepared_free(p);
        return -1;
    }
    return 0;
}

int
sandbox_describe(const struct sandbox_spec *spec, int raw, struct buf *out, struct err *err)
{
    struct sandbox_limits lim;
    struct argv_vec a = {0};
    char bwrap[SANDBOX_PATH_MAX];

    limits_fill(&lim, &spec->limits);
    if (spec_check(spec, &lim, err) < 0) {
        return -1;
    }
    if (bwrap_find(bwrap, sizeof(bwrap)) == NULL) {
        return err_set(err, ERR_NOTFOUND, "bwrap not found; install bubblewrap");
    }
    if (build_argv(spec, &lim, bwrap, raw ? ARGV_RAW : ARGV_COLD, &a, err) < 0) {
        argv_free(&a);
        return -1;
    }
    for (size_t i = 0; i < a.n; i++) {
        buf_puts(out, a.v[i]);
        buf_putc(out, '\n');
    }
    argv_free(&a);
    return buf_failed(out) ? buf_err(out, "sandbox command line", err) : 0;
}
