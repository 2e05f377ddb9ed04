/*
 * host_own.c - drun's own files and directories, behind no door (host.h, rule 4).
 *
 * The attack: an operator allowlists $HOME, which holds ~/.drun/config.toml and often
 * the DB. An agent then exports a config.toml that sets domain_allowlist = ["*"], or
 * deletes drun.db-wal under the live daemon. So the config file, the DB with its
 * -wal/-shm/-journal, the runtime directory and the snapshots directory are registered
 * at start-up and refused by every door. A file is matched three ways, so neither a
 * second path to it nor a file that does not exist yet gets through: its resolved path,
 * its parent directory's device and inode plus its name, and its own device and inode
 * (taken fresh at each check, since SQLite recreates -wal and -shm).
 *
 * The registry is filled once by the program before it serves, then only read.
 */
#include "host/host_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"

#define OWN_MAX 16

struct own_file {
    char path[PATH_MAX]; /* resolved parent + "/" + name (lexical while unresolved) */
    char dir[PATH_MAX];  /* the parent as given, for a parent that did not exist yet */
    const char *name;    /* points into path */
    int resolved;        /* pdev, pino and path are from the parent as it exists */
    dev_t pdev;
    ino_t pino;
};

struct own_tree {
    char path[PATH_MAX]; /* resolved (as given, absolute, while it does not exist) */
    int resolved;        /* dev and ino are from the directory */
    dev_t dev;
    ino_t ino;
    int kind; /* HOST_TREE_RUNTIME or HOST_TREE_SNAPSHOTS */
};

static struct own_file files[OWN_MAX];
static size_t nfiles;
static struct own_tree trees[OWN_MAX];
static size_t ntrees;

void
host_own_reset(void)
{
    nfiles = 0;
    ntrees = 0;
}

int
host_own_add_file(const char *path, struct err *err)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash;
    struct own_file *f;
    struct stat sb;
    size_t n;

    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    if (nfiles >= OWN_MAX) {
        return err_set(err, ERR_TOOBIG, "too many of drun's own files registered");
    }
    slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(dir, sizeof(dir), ".");
        slash = path - 1;
    } else {
        n = (size_t)(slash - path);
        if (n >= sizeof(dir)) {
            return err_set(err, ERR_INVAL, "path '%.200s' is too long", path);
        }
        memcpy(dir, path, n);
        dir[n] = '\0';
        if (n == 0) {
            snprintf(dir, sizeof(dir), "/");
        }
    }
    f = &files[nfiles];
    memset(f, 0, sizeof(*f));
    if (realpath(dir, real) == NULL || stat(real, &sb) < 0) {
        /*
         * The parent does not exist yet (~/.drun before the first run). An export could
         * make it and plant a config.toml the next call would load; so the file is kept
         * by its path and its parent is looked up again at every check.
         */
        if (dir[0] != '/') {
            return err_set(err, ERR_INVAL, "cannot resolve the directory of '%.200s': %s", path,
                           strerror(errno));
        }
        snprintf(f->dir, sizeof(f->dir), "%s", dir);
        snprintf(real, sizeof(real), "%s", dir);
    } else {
        f->resolved = 1;
        f->pdev = sb.st_dev;
        f->pino = sb.st_ino;
    }
    if ((size_t)snprintf(f->path, sizeof(f->path), "%s/%s", strcmp(real, "/") ? real : "",
                         slash + 1) >= sizeof(f->path)) {
        return err_set(err, ERR_INVAL, "path '%.200s' is too long", path);
    }
    f->name = strrchr(f->path, '/') + 1;
    nfiles++;
    return 0;
}

/*
 * The file's parent identity and resolved path now: fixed at registration, or looked up
 * again for a parent that did not exist then. Returns 0, or -1 while it still does not.
 */
static int
file_now(const struct own_file *f, dev_t *pdev, ino_t *pino, char *path, size_t size)
{
    char real[PATH_MAX];
    struct stat sb;

    if (f->resolved) {
        *pdev = f->pdev;
        *pino = f->pino;
        snprintf(path, size, "%s", f->path);
        return 0;
    }
    if (realpath(f->dir, real) == NULL || stat(real, &sb) < 0) {
        snprintf(path, size, "%s", f->path);
        return -1;
    }
    *pdev = sb.st_dev;
    *pino = sb.st_ino;
    if ((size_t)snprintf(path, size, "%s/%s", strcmp(real, "/") ? real : "", f->name) >= size) {
        /* Too long to name resolved: the path as registered; the parent's identity,
         * which the inode checks use, is filled all the same. */
        snprintf(path, size, "%s", f->path);
    }
    return 0;
}

int
host_own_add_db(const char *path, struct err *err)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[PATH_MAX];

    if (path == NULL || path[0] == '\0' || strcmp(path, ":memory:") == 0) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        if ((size_t)snprintf(p, sizeof(p), "%s%s", path, suffix[i]) >= sizeof(p)) {
            return err_set(err, ERR_INVAL, "path '%.200s' is too long", path);
        }
        if (host_own_add_file(p, err) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
add_tree(const char *dir, int kind, struct err *err)
{
    struct own_tree *t;
    struct stat sb;

    if (dir == NULL || dir[0] == '\0') {
        return 0;
    }
    if (ntrees >= OWN_MAX) {
        return err_set(err, ERR_TOOBIG, "too many of drun's own directories registered");
    }
    t = &trees[ntrees];
    memset(t, 0, sizeof(*t));
    if (realpath(dir, t->path) == NULL || stat(t->path, &sb) < 0) {
        /* Not there yet (snapshots_dir before the first snapshot): kept by its path, and
         * by its inode once it exists (looked up at each check). */
        if (dir[0] != '/' || strlen(dir) >= sizeof(t->path)) {
            return 0;
        }
        snprintf(t->path, sizeof(t->path), "%s", dir);
    } else {
        t->resolved = 1;
        t->dev = sb.st_dev;
        t->ino = sb.st_ino;
    }
    if (strcmp(t->path, "/") == 0) {
        return 0; /* never make the whole host "ours": every door would close */
    }
    t->kind = kind;
    ntrees++;
    return 0;
}

/* The tree's device and inode now; -1 while it does not exist. */
static int
tree_now(const struct own_tree *t, dev_t *dev, ino_t *ino)
{
    struct stat sb;

    if (t->resolved) {
        *dev = t->dev;
        *ino = t->ino;
        return 0;
    }
    if (stat(t->path, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        return -1;
    }
    *dev = sb.st_dev;
    *ino = sb.st_ino;
    return 0;
}

int
host_own_add_tree(const char *dir, struct err *err)
{
    return add_tree(dir, HOST_TREE_RUNTIME, err);
}

int
host_own_add_snapshots(const char *dir, struct err *err)
{
    return add_tree(dir, HOST_TREE_SNAPSHOTS, err);
}

/* 1 if path is root or beneath it, by whole components. */
int
host_path_under(const char *path, const char *root)
{
    size_t n = strlen(root);

    if (n == 1 && root[0] == '/') {
        return path[0] == '/';
    }
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

const char *
host_own_path_match(const char *resolved, int holds, int skip_kind)
{
    for (size_t i = 0; i < nfiles; i++) {
        char now[PATH_MAX];
        dev_t d;
        ino_t n;
        (void)file_now(&files[i], &d, &n, now, sizeof(now));
        if (strcmp(resolved, now) == 0 || strcmp(resolved, files[i].path) == 0 ||
            (holds &&
             (host_path_under(now, resolved) || host_path_under(files[i].path, resolved)))) {
            return files[i].path;
        }
    }
    for (size_t i = 0; i < ntrees; i++) {
        if (trees[i].kind == skip_kind) {
            continue;
        }
        char now[PATH_MAX];
        const char *t = trees[i].path;
        if (!trees[i].resolved && realpath(trees[i].path, now) != NULL) {
            t = now; /* made since start-up: its resolved path now */
        }
        if (host_path_under(resolved, t) || (holds && host_path_under(t, resolved))) {
            return trees[i].path;
        }
    }
    return NULL;
}

const char *
host_own_match(dev_t pdev, ino_t pino, const char *name, const struct stat *sb, int skip_kind)
{
    for (size_t i = 0; i < nfiles; i++) {
        char now[PATH_MAX];
        struct stat fs;
        dev_t d = 0;
        ino_t n = 0;
        if (file_now(&files[i], &d, &n, now, sizeof(now)) < 0) {
            continue; /* its directory does not exist: nothing can be in it */
        }
        if (name != NULL && d == pdev && n == pino && strcmp(files[i].name, name) == 0) {
            return files[i].path;
        }
        /* By inode, fresh: a hard link or a bind mount of the file is the file. */
        if (sb != NULL && !S_ISDIR(sb->st_mode) && lstat(now, &fs) == 0 &&
            fs.st_dev == sb->st_dev && fs.st_ino == sb->st_ino) {
            return files[i].path;
        }
    }
    for (size_t i = 0; i < ntrees; i++) {
        dev_t d;
        ino_t n;
        if (trees[i].kind == skip_kind || tree_now(&trees[i], &d, &n) < 0) {
            continue;
        }
        if (sb != NULL && S_ISDIR(sb->st_mode) && d == sb->st_dev && n == sb->st_ino) {
            return trees[i].path;
        }
        if (d == pdev && n == pino) {
            return trees[i].path; /* anything directly in one of our directories */
        }
    }
    return NULL;
}

int
host_own_check_entry(int dirfd, const char *name, const struct stat *sb, const char *shown,
                     struct err *err)
{
    struct stat ps;
    const char *hit;

    if (fstat(dirfd, &ps) < 0) {
        return err_set(err, ERR_IO, "cannot stat the directory of '%s': %s", shown,
                       strerror(errno));
    }
    hit = host_own_match(ps.st_dev, ps.st_ino, name, sb, -1);
    if (hit != NULL) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it is drun's own file or directory ('%s'); no door "
                       "reads, writes or deletes drun's config, database or runtime files",
                       shown, hit);
    }
    return 0;
}

size_t
host_own_hidden(const char *const *roots, size_t n_roots, const char **out, size_t max)
{
    char real[PATH_MAX];
    size_t n = 0;

    for (size_t r = 0; r < n_roots; r++) {
        if (roots[r] == NULL || realpath(roots[r], real) == NULL || strcmp(real, "/") == 0) {
            continue;
        }
        for (size_t i = 0; i < nfiles && n < max; i++) {
            struct stat sb;
            if (files[i].resolved && host_path_under(files[i].path, real) &&
                lstat(files[i].path, &sb) == 0 && !S_ISLNK(sb.st_mode)) {
                out[n++] = files[i].path;
            }
        }
        for (size_t i = 0; i < ntrees && n < max; i++) {
            if (host_path_under(trees[i].path, real)) {
                out[n++] = trees[i].path;
            }
        }
    }
    /* The same path under two roots once. */
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n;) {
            if (out[j] == out[i]) {
                out[j] = out[--n];
            } else {
                j++;
            }
        }
    }
    return n;
}
