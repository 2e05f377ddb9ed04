/*
 * host_toolchain.c - what the $PATH's tools need bound in the sandbox (host.h).
 *
 * The sandbox binds the system directories and each $PATH entry read-only. That was
 * enough for /usr/bin, not for the toolchains users install in their home: a pyenv or
 * asdf shim is a script that runs the manager from its root (~/.pyenv/libexec/pyenv);
 * mise and volta shims are links to their own binary; Linuxbrew's bin/ holds links into
 * Cellar/ whose programs load libraries from the prefix; pipx puts links to venvs in
 * ~/.local/bin, and a venv's console script names its interpreter by "#!". Each ran on
 * the host and exited 127 (or "No such file") in the sandbox, while doctor passed.
 *
 * So we look at what the entries hold (links and "#!" lines only: nothing is executed)
 * and bind the directories they lead to, with the same read-only rule as the entries
 * themselves. What must never be bound stays out by rule, not by luck: the kernel's
 * pseudo filesystems (the daemon's environment is in /proc/self/environ), the daemon's
 * home as a whole (a link ~/x -> ~/y/z would otherwise expose ~/.ssh), directories near
 * the root, and drun's own files, which the sandbox covers beneath any bind.
 */
#include "host/host_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/mem.h"

/* Bound by the sandbox whatever $PATH says (sandbox/bwrap.c, bind_system). */
static const char *const system_roots[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                           "/lib64", "/lib32", "/libx32", "/opt"};

/* Never bound (rule 3), nor anything beneath them. */
static const char *const pseudo_roots[] = {"/proc", "/sys", "/dev"};

static const char *const manager_vars[] = {"PYENV_ROOT",    "RBENV_ROOT",     "ASDF_DATA_DIR",
                                           "MISE_DATA_DIR", "VOLTA_HOME",     "RUSTUP_HOME",
                                           "CARGO_HOME",    "HOMEBREW_PREFIX"};

static size_t
components(const char *p)
{
    size_t n = 0;

    for (; *p != '\0'; p++) {
        n += p[0] == '/' && p[1] != '\0' && p[1] != '/';
    }
    return n;
}

/* 1 if dir may be bound at all. */
static int
allowed(const char *dir, int derived)
{
    const char *home = getenv("HOME");
    char real_home[PATH_MAX];

    if (dir[0] != '/' || strcmp(dir, "/") == 0) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(pseudo_roots) / sizeof(pseudo_roots[0]); i++) {
        if (host_path_under(dir, pseudo_roots[i])) {
            return 0;
        }
    }
    if (derived && components(dir) < 2) {
        return 0;
    }
    /* $HOME, or a directory that holds it (/home), would show every secret in it. */
    if (home != NULL && home[0] == '/' &&
        (host_path_under(home, dir) ||
         (realpath(home, real_home) != NULL && host_path_under(real_home, dir)))) {
        return 0;
    }
    return 1;
}

/* 1 if path is beneath a system root (bound, or recreated as a link, by the sandbox). */
static int
covered_system(const char *path)
{
    for (size_t i = 0; i < sizeof(system_roots) / sizeof(system_roots[0]); i++) {
        if (host_path_under(path, system_roots[i])) {
            return 1;
        }
    }
    return 0;
}

/* 1 if dir is beneath a directory already in t or a system root. */
static int
covered(const struct host_toolchain *t, const char *dir)
{
    if (covered_system(dir)) {
        return 1;
    }
    for (size_t i = 0; i < t->n_dirs; i++) {
        if (host_path_under(dir, t->dirs[i])) {
            return 1;
        }
    }
    return 0;
}

/* Adds the resolved directory dir; a bind beneath it is dropped (it now covers it). */
static int
add_dir(struct host_toolchain *t, const char *dir, int derived, struct err *err)
{
    char real[PATH_MAX];
    struct stat sb;

    if (realpath(dir, real) == NULL || stat(real, &sb) < 0 || !S_ISDIR(sb.st_mode) ||
        !allowed(real, derived) || covered(t, real)) {
        return 0;
    }
    if (derived) {
        for (size_t i = 0; i < t->n_dirs;) {
            if (host_path_under(t->dirs[i], real)) {
                mem_free(t->dirs[i]);
                t->dirs[i] = t->dirs[--t->n_dirs];
            } else {
                i++;
            }
        }
    }
    if (t->n_dirs == HOST_TOOLCHAIN_DIRS_MAX) {
        return 0; /* bounded: the rest stay unbound, as before */
    }
    t->dirs[t->n_dirs] = mem_strdup(real);
    if (t->dirs[t->n_dirs] == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    t->n_dirs++;
    return 0;
}

/* The directory the program at file (resolved) needs: its own, or the prefix above a
 * bin/, sbin/ or libexec/. */
static int
add_program_home(struct host_toolchain *t, const char *file, struct err *err)
{
    char dir[PATH_MAX];
    char *slash;
    const char *base;

    if (strlen(file) >= sizeof(dir)) {
        return 0;
    }
    memcpy(dir, file, strlen(file) + 1);
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) {
        return 0;
    }
    *slash = '\0';
    /* A target beside what is bound already (rustup's links in ~/.cargo/bin) needs no
     * more: going up to the prefix there would bind ~/.cargo whole, credentials.toml
     * and all, or ~/.local for a link between two files of ~/.local/bin. */
    if (covered(t, dir)) {
        return 0;
    }
    base = strrchr(dir, '/') + 1;
    if (strcmp(base, "bin") == 0 || strcmp(base, "sbin") == 0 || strcmp(base, "libexec") == 0) {
        char *up = strrchr(dir, '/');
        if (up != dir) {
            *up = '\0';
        }
    }
    return add_dir(t, dir, 1, err);
}

/* The interpreter a "#!" script at dirfd/name names, resolved, into out; 0 if none. */
static int
shebang(int dirfd, const char *name, char *out, size_t size)
{
    char line[512], path[PATH_MAX];
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    ssize_t n;
    size_t i = 2, j = 0;
    struct stat sb;

    if (fd < 0) {
        return 0;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return 0;
    }
    n = read(fd, line, sizeof(line) - 1);
    close(fd);
    if (n < 4 || line[0] != '#' || line[1] != '!') {
        return 0;
    }
    line[n] = '\0';
    while (line[i] == ' ' || line[i] == '\t') {
        i++;
    }
    while (line[i] != '\0' && line[i] != ' ' && line[i] != '\t' && line[i] != '\n' &&
           line[i] != '\r' && j + 1 < sizeof(path)) {
        path[j++] = line[i++];
    }
    path[j] = '\0';
    if (path[0] != '/' || realpath(path, out) == NULL || strlen(out) >= size) {
        return 0;
    }
    return 1;
}

/* Follows the links and "#!" lines of the executables in the directory dir. */
static int
scan_entry(struct host_toolchain *t, const char *dir, struct err *err)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t seen = 0;
    int dfd, rc = 0;

    if (d == NULL) {
        return 0;
    }
    dfd = dirfd(d);
    while (rc == 0 && seen < HOST_TOOLCHAIN_ENTRIES_MAX && (de = readdir(d)) != NULL) {
        char full[PATH_MAX], real[PATH_MAX];
        struct stat sb;

        if (de->d_name[0] == '.') {
            continue;
        }
        seen++;
        if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            continue;
        }
        if (S_ISLNK(sb.st_mode)) {
            if (snprintf(full, sizeof(full), "%s/%s", dir, de->d_name) >= (int)sizeof(full) ||
                realpath(full, real) == NULL || stat(real, &sb) < 0 || !S_ISREG(sb.st_mode)) {
                continue;
            }
            rc = add_program_home(t, real, err);
            /* the target may itself be a "#!" script (a venv's console script) */
            if (rc == 0 && shebang(AT_FDCWD, real, full, sizeof(full))) {
                rc = add_program_home(t, full, err);
            }
        } else if (S_ISREG(sb.st_mode) && (sb.st_mode & 0111) &&
                   shebang(dfd, de->d_name, real, sizeof(real))) {
            rc = add_program_home(t, real, err);
        }
    }
    closedir(d);
    return rc;
}

static int
add_env(struct host_toolchain *t, const char *var, const char *dir, struct err *err)
{
    struct buf b;

    for (size_t i = 0; i < t->n_env; i++) {
        if (strncmp(t->env[i], var, strlen(var)) == 0 && t->env[i][strlen(var)] == '=') {
            return 0;
        }
    }
    if (t->n_env == HOST_TOOLCHAIN_ENV_MAX) {
        return 0;
    }
    buf_init(&b, PATH_MAX + 64);
    buf_printf(&b, "%s=%s", var, dir);
    if (buf_failed(&b)) {
        buf_release(&b);
        return 0;
    }
    t->env[t->n_env] = buf_detach(&b, NULL);
    if (t->env[t->n_env] == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    t->n_env++;
    return 0;
}

/* The variable a manager root found as "<root>/shims" goes by, or NULL. */
static const char *
shim_var(const char *root)
{
    const char *base = strrchr(root, '/');

    base = base ? base + 1 : root;
    if (strcmp(base, ".pyenv") == 0) {
        return "PYENV_ROOT";
    }
    if (strcmp(base, ".rbenv") == 0) {
        return "RBENV_ROOT";
    }
    if (strcmp(base, ".asdf") == 0) {
        return "ASDF_DATA_DIR";
    }
    if (strcmp(base, "mise") == 0) {
        return "MISE_DATA_DIR";
    }
    return NULL;
}

int
host_toolchain_scan(const char *path_env, struct host_toolchain *out, struct err *err)
{
    struct buf inside;
    const char *p = path_env;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    buf_init(&inside, 65536);
    /* 1: the entries themselves, so that derived directories beneath them are covered */
    while (p != NULL && *p != '\0') {
        size_t n = strcspn(p, ":");
        char raw[PATH_MAX], real[PATH_MAX];
        struct stat sb;

        if (n > 0 && n < sizeof(raw) && p[0] == '/') {
            memcpy(raw, p, n);
            raw[n] = '\0';
            if (realpath(raw, real) != NULL && stat(real, &sb) == 0 && S_ISDIR(sb.st_mode) &&
                allowed(real, 0)) {
                if (add_dir(out, real, 0, err) < 0) {
                    goto fail;
                }
                /* PATH inside names the entry as written when that exists inside (a system
                 * link such as /bin -> usr/bin is recreated), else by its real path. */
                if (inside.len > 0) {
                    buf_putc(&inside, ':');
                }
                if (strcmp(raw, real) == 0 || covered_system(raw)) {
                    buf_puts(&inside, raw);
                } else {
                    buf_puts(&inside, real);
                }
            }
        }
        p += n;
        if (*p == ':') {
            p++;
        }
    }
    /* 2: shim managers' roots, named by the environment or by a "shims" entry */
    for (size_t i = 0; i < sizeof(manager_vars) / sizeof(manager_vars[0]); i++) {
        const char *v = getenv(manager_vars[i]);
        char real[PATH_MAX];
        if (v != NULL && v[0] == '/' && realpath(v, real) != NULL && allowed(real, 1)) {
            size_t before = out->n_dirs;
            if (add_dir(out, real, 1, err) < 0) {
                goto fail;
            }
            if ((out->n_dirs > before || covered(out, real)) &&
                strcmp(manager_vars[i], "HOMEBREW_PREFIX") != 0 &&
                add_env(out, manager_vars[i], real, err) < 0) {
                goto fail;
            }
        }
    }
    {
        char roots[8][PATH_MAX]; /* shim managers: a few at most */
        size_t n_roots = 0;

        for (size_t i = 0; i < out->n_dirs; i++) {
            const char *base = strrchr(out->dirs[i], '/');
            size_t len = base != NULL ? (size_t)(base - out->dirs[i]) : 0;
            if (len > 0 && strcmp(base, "/shims") == 0 && n_roots < 8) {
                memcpy(roots[n_roots], out->dirs[i], len);
                roots[n_roots++][len] = '\0';
            }
        }
        /* rustup: ~/.cargo/bin holds links to rustup, which reads RUSTUP_HOME (~/.rustup,
         * beside ~/.cargo by default) for its toolchains and settings */
        for (size_t i = 0; i < out->n_dirs && !getenv("RUSTUP_HOME"); i++) {
            size_t len = strlen(out->dirs[i]);
            char rustup[PATH_MAX];
            if (len > 11 && strcmp(out->dirs[i] + len - 11, "/.cargo/bin") == 0 &&
                len < sizeof(rustup)) {
                memcpy(rustup, out->dirs[i], len - 10);
                memcpy(rustup + len - 10, ".rustup", 8);
                if (access(rustup, F_OK) == 0 && allowed(rustup, 1) &&
                    (add_dir(out, rustup, 1, err) < 0 ||
                     add_env(out, "RUSTUP_HOME", rustup, err) < 0)) {
                    goto fail;
                }
                break;
            }
        }
        for (size_t i = 0; i < n_roots; i++) {
            const char *var = shim_var(roots[i]);
            if (add_dir(out, roots[i], 1, err) < 0 ||
                (var != NULL && allowed(roots[i], 1) && add_env(out, var, roots[i], err) < 0)) {
                goto fail;
            }
        }
    }
    /* 3: where the entries' links and scripts lead */
    {
        size_t n0 = out->n_dirs;
        char *entries[HOST_TOOLCHAIN_DIRS_MAX];
        for (size_t i = 0; i < n0; i++) {
            entries[i] = mem_strdup(out->dirs[i]);
        }
        rc = 0;
        for (size_t i = 0; i < n0; i++) {
            if (rc == 0 && entries[i] != NULL) {
                rc = scan_entry(out, entries[i], err);
            }
            mem_free(entries[i]);
        }
        if (rc < 0) {
            goto fail;
        }
    }
    if (buf_failed(&inside)) {
        err_set(err, ERR_TOOBIG, "PATH is too long");
        goto fail;
    }
    out->path = inside.len > 0 ? buf_detach(&inside, NULL) : NULL;
    buf_release(&inside);
    return 0;
fail:
    buf_release(&inside);
    host_toolchain_release(out);
    return -1;
}

void
host_toolchain_release(struct host_toolchain *t)
{
    for (size_t i = 0; i < t->n_dirs; i++) {
        mem_free(t->dirs[i]);
    }
    for (size_t i = 0; i < t->n_env; i++) {
        mem_free(t->env[i]);
    }
    mem_free(t->path);
    memset(t, 0, sizeof(*t));
}
