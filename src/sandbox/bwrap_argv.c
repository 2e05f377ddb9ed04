/*
 * bwrap_argv.c - the bwrap argv: a growable argv vector, the checks a sandbox spec must
 * pass, and the mount plan turned into bwrap arguments (see bwrap.c for the design).
 */
#include "sandbox/bwrap_int.h"

/* ---- argv vector ---------------------------------------------------------------- */

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

void
bwrap_argv_free(struct argv_vec *a)
{
    for (size_t i = 0; i < a->n; i++) {
        mem_free(a->v[i]);
    }
    mem_free(a->v);
    memset(a, 0, sizeof(*a));
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

int
bwrap_spec_check(const struct sandbox_spec *spec, const struct sandbox_limits *lim, struct err *err)
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

int
bwrap_build_argv(const struct sandbox_spec *spec, const struct sandbox_limits *lim,
                 const char *bwrap, enum argv_kind kind, struct argv_vec *a, struct err *err)
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
