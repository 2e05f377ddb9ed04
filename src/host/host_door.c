/*
 * host_door.c - checking a host path for a door and opening it for reading: session_mount,
 * overlays at bind time, snapshot files (host.h, rules 1, 3, 4, 5), and the export rules
 * for links and VCS hooks (rule 7).
 *
 * Reads open the path once: the parent directory through util/safeopen.h without
 * following any link, then the last name O_NOFOLLOW | O_NONBLOCK after an lstat says it
 * is a regular file or a directory, then fstat on the fd must agree (same device, inode
 * and type). A FIFO is never opened for a read that could block; a device never at all.
 */
#include "host/host_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/mem.h"
#include "util/safeopen.h"

#ifdef __linux__
#include <linux/magic.h>
#endif

/* ---- rule 3: the kernel's trees ------------------------------------------------------- */

static const char *const system_trees[] = {"/proc", "/sys", "/dev"};

/*
 * The first of /proc, /sys, /dev that `path` names, read lexically ("//proc/./self"
 * included), or NULL. Checked on the path as given (so /proc/self/root/... is refused
 * before anything resolves it) and again on the resolved path.
 */
static const char *
system_tree(const char *path)
{
    char first[8];
    size_t n = 0;
    const char *p = path;

    for (;;) {
        while (*p == '/') {
            p++;
        }
        if (p[0] == '.' && (p[1] == '/' || p[1] == '\0')) {
            p++;
            continue;
        }
        break;
    }
    while (p[n] != '\0' && p[n] != '/' && n < sizeof(first) - 1) {
        first[n] = p[n];
        n++;
    }
    first[n] = '\0';
    if (p[n] != '\0' && p[n] != '/') {
        return NULL;
    }
    for (size_t i = 0; i < sizeof(system_trees) / sizeof(system_trees[0]); i++) {
        if (strcmp(first, system_trees[i] + 1) == 0) {
            return system_trees[i];
        }
    }
    return NULL;
}

int
host_check_fs(int fd, const char *shown, struct err *err)
{
#ifdef __linux__
    struct statfs fs;

    if (fstatfs(fd, &fs) < 0) {
        return err_set(err, ERR_IO, "cannot stat the filesystem of '%s': %s", shown,
                       strerror(errno));
    }
    switch ((unsigned long)fs.f_type) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case DEVPTS_SUPER_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case DEBUGFS_MAGIC:
    case SECURITYFS_MAGIC:
    case TRACEFS_MAGIC:
    case BPF_FS_MAGIC:
    case SELINUX_MAGIC:
    case EFIVARFS_MAGIC:
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it is on a kernel pseudo filesystem (/proc, /sys and "
                       "the like), which no door reads or writes",
                       shown);
    default:
        break;
    }
#else
    (void)fd;
    (void)shown;
    (void)err;
#endif
    return 0;
}

int
host_check(const struct policy *p, const char *path, enum policy_door door,
           struct policy_hostpath *out, struct err *err)
{
    const char *tree, *own;

    if (path != NULL && (tree = system_tree(path)) != NULL) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': %s is behind no door (it holds the daemon's environment, "
                       "its open files and kernel settings), whatever mount_allowlist says",
                       path, tree);
    }
    if (policy_hostpath_check(p, path, door, out, err) < 0) {
        return -1;
    }
    if ((tree = system_tree(out->resolved)) != NULL) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it resolves to '%s', and %s is behind no door, whatever "
                       "mount_allowlist says",
                       path, out->resolved, tree);
    }
    own = host_own_path_match(out->resolved, door == POLICY_DOOR_DELETE, -1);
    if (own != NULL) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it is or holds drun's own file or directory ('%s'); no "
                       "door reads, writes or deletes drun's config, database or runtime files",
                       path, own);
    }
    return 0;
}

/* ---- rule 5: open once ---------------------------------------------------------------- */

/*
 * Opens the absolute, symlink-free `abs` for reading: the parent beneath "/" without
 * following links, the last name after an lstat. `want` is a mask of S_IFREG / S_IFDIR
 * accepted. o_path opens a directory O_PATH (for a bind). Returns the fd and *sb, or
 * -1 with err (ERR_INVAL + *sb for a type not wanted, never opened).
 */
static int
open_abs(const char *abs, int want_dir, int want_reg, int o_path, int skip_kind, struct stat *sb,
         struct err *err)
{
    char parent[PATH_MAX];
    const char *name, *slash, *own;
    struct stat psb, fsb;
    int slashfd = -1, dirfd = -1, fd = -1;

    if (abs == NULL || abs[0] != '/') {
        return err_set(err, ERR_INVAL, "'%s' is not an absolute path", abs ? abs : "");
    }
    slash = strrchr(abs, '/');
    if (strlen(abs) >= sizeof(parent)) {
        return err_set(err, ERR_INVAL, "path '%.200s' is too long", abs);
    }
    memcpy(parent, abs + 1, (size_t)(slash - abs));
    parent[slash > abs ? slash - abs - 1 : 0] = '\0';
    name = slash + 1;
    slashfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (slashfd < 0) {
        return err_set(err, ERR_IO, "cannot open '/': %s", strerror(errno));
    }
    if (name[0] == '\0' && abs[1] != '\0') {
        close(slashfd);
        return err_set(err, ERR_INVAL, "'%s' ends in '/'; name it without one", abs);
    }
    if (name[0] == '\0') {
        /* "/" itself (mount of the whole host with an empty allowlist). */
        dirfd = slashfd;
        slashfd = -1;
        if (!want_dir || fstat(dirfd, sb) < 0) {
            close(dirfd);
            return err_set(err, ERR_INVAL, "'/' cannot be opened here");
        }
        if (o_path) {
            fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
            close(dirfd);
            return fd >= 0 ? fd : err_set(err, ERR_IO, "cannot open '/': %s", strerror(errno));
        }
        return dirfd;
    }
    dirfd = safeopen_beneath(slashfd, parent, O_RDONLY | O_DIRECTORY, 0, SAFEOPEN_NO_SYMLINKS);
    close(slashfd);
    if (dirfd < 0) {
        return host_walk_error(abs, errno, err);
    }
    if (fstatat(dirfd, name, sb, AT_SYMLINK_NOFOLLOW) < 0) {
        int code = errno;
        close(dirfd);
        return host_walk_error(abs, code, err);
    }
    if (S_ISLNK(sb->st_mode)) {
        close(dirfd);
        return host_walk_error(abs, ELOOP, err);
    }
    if (!((S_ISDIR(sb->st_mode) && want_dir) || (S_ISREG(sb->st_mode) && want_reg))) {
        close(dirfd);
        return err_set(err, ERR_INVAL, "'%s' is not a %s", abs,
                       want_dir && want_reg ? "regular file or directory"
                       : want_dir           ? "directory"
                                            : "regular file");
    }
    if (fstat(dirfd, &psb) < 0) {
        close(dirfd);
        return err_set(err, ERR_IO, "cannot stat '%s': %s", abs, strerror(errno));
    }
    own = host_own_match(psb.st_dev, psb.st_ino, name, sb, skip_kind);
    if (own != NULL) {
        close(dirfd);
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it is drun's own file or directory ('%s'); no door "
                       "reads, writes or deletes drun's config, database or runtime files",
                       abs, own);
    }
    if (o_path) {
        fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    } else {
        fd = openat(dirfd, name,
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                        (S_ISDIR(sb->st_mode) ? O_DIRECTORY : 0));
    }
    close(dirfd);
    if (fd < 0) {
        return host_walk_error(abs, errno, err);
    }
    if (fstat(fd, &fsb) < 0 || fsb.st_dev != sb->st_dev || fsb.st_ino != sb->st_ino ||
        (fsb.st_mode & S_IFMT) != (sb->st_mode & S_IFMT)) {
        close(fd);
        return err_set(err, ERR_DENIED, "'%s' changed while being opened; try again", abs);
    }
    if (host_check_fs(fd, abs, err) < 0) {
        close(fd);
        return -1;
    }
    *sb = fsb;
    return fd;
}

int
host_open_read(const struct policy *p, const char *path, struct policy_hostpath *hp,
               struct stat *sb, struct err *err)
{
    if (host_check(p, path, POLICY_DOOR_MOUNT, hp, err) < 0) {
        return -1;
    }
    return open_abs(hp->resolved, 1, 1, 0, -1, sb, err);
}

/*
 * The host rules for a directory bound into a sandbox: the read door, and nothing of
 * /proc, /sys, /dev or drun's own beneath it either. bwrap binds recursively, so an
 * overlay of "/" (or of any directory holding /proc) would show the sandbox the
 * daemon's /proc/<pid>/environ and fds.
 */
static int
overlay_rules(const struct policy *p, const char *host_dir, struct policy_hostpath *hp,
              struct err *err)
{
    const char *own;

    if (host_check(p, host_dir, POLICY_DOOR_MOUNT, hp, err) < 0) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(system_trees) / sizeof(system_trees[0]); i++) {
        if (host_path_under(system_trees[i], hp->resolved)) {
            return err_set(err, ERR_DENIED,
                           "overlay '%s' holds %s, which is behind no door; not bound", host_dir,
                           system_trees[i]);
        }
    }
    own = host_own_path_match(hp->resolved, 1, -1);
    if (own != NULL) {
        return err_set(err, ERR_DENIED,
                       "overlay '%s' holds drun's own file or directory ('%s'); not bound",
                       host_dir, own);
    }
    return 0;
}

int
host_check_overlay(const struct policy *p, const char *key, const char *host_dir, struct err *err)
{
    struct policy_hostpath hp;
    const char *base;
    size_t kl, hl;
    int named = 0;

    if (key == NULL || host_dir == NULL || key[0] == '\0' || host_check_rel(key, 0, err) < 0) {
        return err_set(err, ERR_INVAL, "overlay key '%s' is not a workspace path", key ? key : "");
    }
    base = strrchr(key, '/');
    base = base ? base + 1 : key;
    for (size_t i = 0; i < p->mount_overlay_paths.n; i++) {
        named |= strcmp(p->mount_overlay_paths.v[i], base) == 0;
    }
    if (!named) {
        return err_set(err, ERR_DENIED,
                       "overlay '%s' -> '%s': '%s' is not in mount_overlay_paths; not bound", key,
                       host_dir, base);
    }
    kl = strlen(key);
    hl = strlen(host_dir);
    if (hl <= kl + 1 || strcmp(host_dir + hl - kl, key) != 0 || host_dir[hl - kl - 1] != '/') {
        return err_set(err, ERR_DENIED,
                       "overlay '%s' -> '%s': the host directory is not the mounted one of the "
                       "same name; not bound",
                       key, host_dir);
    }
    return overlay_rules(p, host_dir, &hp, err);
}

int
host_open_overlay(const struct policy *p, const char *host_dir, struct err *err)
{
    struct policy_hostpath hp;
    struct stat sb;

    if (overlay_rules(p, host_dir, &hp, err) < 0) {
        return -1;
    }
    if (strcmp(hp.resolved, host_dir) != 0) {
        /* Registered resolved; a link on the way now means someone moved it. */
        return err_set(err, ERR_DENIED,
                       "overlay '%s' now resolves to '%s' (a symlink on the way); not bound",
                       host_dir, hp.resolved);
    }
    return open_abs(host_dir, 1, 0, 1, -1, &sb, err);
}

int
host_open_snapshot_file(const char *path, struct stat *sb, struct err *err)
{
    const char *tree, *own;
    int fd, fl;

    if (path != NULL && (tree = system_tree(path)) != NULL) {
        return err_set(err, ERR_DENIED, "refusing '%s': %s is behind no door", path, tree);
    }
    if (path != NULL && (own = host_own_path_match(path, 0, HOST_TREE_SNAPSHOTS)) != NULL) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it is drun's own file or directory ('%s'), not a "
                       "snapshot file",
                       path, own);
    }
    fd = open_abs(path, 0, 1, 0, HOST_TREE_SNAPSHOTS, sb, err);
    if (fd < 0) {
        if (err->code == ERR_INVAL && path != NULL && path[0] == '/') {
            return err_set(err, ERR_INVAL,
                           "'%s' is not a regular file; a snapshot file must be a plain file",
                           path);
        }
        return -1;
    }
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        close(fd);
        return err_set(err, ERR_IO, "cannot set up '%s': %s", path, strerror(errno));
    }
    return fd;
}

/* ---- session_mount's walk -------------------------------------------------------------- */

static const char *
special_kind(mode_t m)
{
    if (S_ISFIFO(m)) {
        return "fifo";
    }
    if (S_ISSOCK(m)) {
        return "socket";
    }
    if (S_ISCHR(m) || S_ISBLK(m)) {
        return "device";
    }
    return "not a regular file, directory or symlink";
}

#define TREE_KEY_MAX 4096

static int
read_dir(int fd, const char *shown_root, const char *prefix, int depth,
         const struct host_tree_ops *ops, struct err *err)
{
    DIR *d;
    struct dirent *de;
    struct stat dsb;
    struct buf key;
    int rc = -1, any = 0;

    if (depth > HOST_TREE_DEPTH_MAX) {
        close(fd);
        return err_set(err, ERR_TOOBIG,
                       "directories are nested deeper than %d levels below '%s'; mount a "
                       "shallower directory",
                       HOST_TREE_DEPTH_MAX, shown_root);
    }
    if (fstat(fd, &dsb) < 0) {
        close(fd);
        return err_set(err, ERR_IO, "cannot stat '%s/%s': %s", shown_root, prefix, strerror(errno));
    }
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return err_set(err, ERR_IO, "cannot list '%s/%s': %s", shown_root, prefix, strerror(errno));
    }
    buf_init(&key, TREE_KEY_MAX + 1);
    while ((errno = 0, de = readdir(d)) != NULL) {
        struct stat sb, fsb;
        const char *name = de->d_name;
        int cfd, r;

        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            continue;
        }
        any = 1;
        buf_reset(&key);
        if (prefix[0] != '\0') {
            buf_printf(&key, "%s/", prefix);
        }
        buf_puts(&key, name);
        if (buf_failed(&key)) {
            if (ops->skip(ops->ctx, name, "path too long") < 0) {
                goto stop;
            }
            continue;
        }
        if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT) {
                continue; /* gone since readdir */
            }
            err_set(err, ERR_IO, "cannot stat '%s/%s': %s", shown_root, key.data, strerror(errno));
            goto out;
        }
        if (prefix[0] == '\0' && strcmp(shown_root, "/") == 0 && system_tree(name) != NULL) {
            /* A mount of "/" (empty allowlist): /proc, /sys and /dev are not entered. */
            if (ops->skip(ops->ctx, key.data, "behind no door (/proc, /sys, /dev)") < 0) {
                goto stop;
            }
            continue;
        }
        if (host_own_match(dsb.st_dev, dsb.st_ino, name, &sb, -1) != NULL) {
            if (ops->skip(ops->ctx, key.data, "drun's own file (config, database or runtime)") <
                0) {
                goto stop;
            }
            continue;
        }
        if (S_ISLNK(sb.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(dirfd(d), name, target, sizeof(target));
            if (n <= 0 || (size_t)n >= sizeof(target)) {
                r = ops->skip(ops->ctx, key.data,
                              n < 0 ? "unreadable symlink" : "symlink target too long");
            } else {
                r = ops->link(ops->ctx, key.data, target, (size_t)n);
            }
            if (r < 0) {
                goto stop;
            }
            continue;
        }
        if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
            if (ops->skip(ops->ctx, key.data, special_kind(sb.st_mode)) < 0) {
                goto stop;
            }
            continue;
        }
        if (S_ISDIR(sb.st_mode) && ops->is_overlay(ops->ctx, name, dirfd(d))) {
            if (ops->overlay(ops->ctx, key.data) < 0) {
                goto stop;
            }
            continue;
        }
        cfd = openat(dirfd(d), name,
                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                         (S_ISDIR(sb.st_mode) ? O_DIRECTORY : 0));
        if (cfd < 0) {
            if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) {
                if (ops->skip(ops->ctx, key.data, "changed while being read") < 0) {
                    goto stop;
                }
                continue;
            }
            err_set(err, ERR_IO, "cannot open '%s/%s': %s", shown_root, key.data, strerror(errno));
            goto out;
        }
        if (fstat(cfd, &fsb) < 0 || fsb.st_dev != sb.st_dev || fsb.st_ino != sb.st_ino ||
            (fsb.st_mode & S_IFMT) != (sb.st_mode & S_IFMT)) {
            close(cfd);
            if (ops->skip(ops->ctx, key.data, "changed while being read") < 0) {
                goto stop;
            }
            continue;
        }
        if (S_ISDIR(fsb.st_mode)) {
            struct err fe;
            if (host_check_fs(cfd, key.data, &fe) < 0) {
                close(cfd);
                if (ops->skip(ops->ctx, key.data, "kernel pseudo filesystem (/proc, /sys)") < 0) {
                    goto stop;
                }
                continue;
            }
            if (read_dir(cfd, shown_root, key.data, depth + 1, ops, err) < 0) { /* closes cfd */
                goto out;
            }
            continue;
        }
        r = ops->file(ops->ctx, key.data, cfd, &fsb);
        close(cfd);
        if (r < 0) {
            goto stop;
        }
    }
    if (errno != 0) {
        err_set(err, ERR_IO, "cannot list '%s/%s': %s", shown_root, prefix, strerror(errno));
        goto out;
    }
    /* An empty directory below the top is kept as one (checkpoints keep them). */
    if (!any && prefix[0] != '\0' && ops->empty_dir(ops->ctx, prefix) < 0) {
        goto stop;
    }
    rc = 0;
    goto out;
stop:
    err_clear(err);
out:
    buf_release(&key);
    closedir(d);
    return rc;
}

struct within {
    uint64_t bytes, max_bytes;
    size_t entries;
};

/* Adds up the directory open at fd (consumed): 1 within the bounds, 0 past them, -1. */
static int
within_walk(int fd, struct within *w, int depth, struct err *err)
{
    DIR *d;
    struct dirent *de;
    struct stat dsb;
    int rc = 1;

    if (depth > HOST_TREE_DEPTH_MAX || fstat(fd, &dsb) < 0) {
        close(fd);
        return depth > HOST_TREE_DEPTH_MAX
                   ? 0
                   : err_set(err, ERR_IO, "cannot stat: %s", strerror(errno));
    }
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return err_set(err, ERR_IO, "cannot list: %s", strerror(errno));
    }
    while (rc == 1 && (errno = 0, de = readdir(d)) != NULL) {
        struct stat sb;
        int cfd;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
            continue;
        }
        if (++w->entries > HOST_SMALL_TREE_ENTRIES) {
            rc = 0;
            break;
        }
        if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            continue; /* gone since readdir */
        }
        if (S_ISREG(sb.st_mode)) {
            w->bytes += (uint64_t)sb.st_size;
            rc = w->bytes <= w->max_bytes;
        } else if (S_ISDIR(sb.st_mode) && sb.st_dev == dsb.st_dev) {
            cfd = openat(dirfd(d), de->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (cfd >= 0) {
                rc = within_walk(cfd, w, depth + 1, err); /* closes cfd */
            }
        }
    }
    closedir(d);
    return rc;
}

int
host_dir_within(int parentfd, const char *name, uint64_t max_bytes, struct err *err)
{
    struct within w = {0, max_bytes, 0};
    int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        return err_set(err, ERR_IO, "cannot open '%s': %s", name, strerror(errno));
    }
    return within_walk(fd, &w, 0, err);
}

int
host_read_tree(int dirfd, const char *shown_root, const struct host_tree_ops *ops, struct err *err)
{
    err_clear(err);
    if (host_check_fs(dirfd, shown_root, err) < 0) {
        close(dirfd);
        return -1;
    }
    return read_dir(dirfd, shown_root, "", 0, ops, err);
}

/* ---- rule 7: export ---------------------------------------------------------------------- */

const char *
host_export_vcs_refusal(const struct policy *p, const char *key, int is_dir)
{
    const char *s = key;

    if (p != NULL && p->export_vcs_hooks) {
        return NULL;
    }
    while (*s != '\0') {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 4 && memcmp(s, ".git", 4) == 0) {
            const char *next = e ? e + 1 : NULL;
            if (next == NULL) {
                return is_dir ? NULL
                              : "a .git file redirects git to another directory (gitdir:), "
                                "whose hooks the host's next git command runs; set "
                                "export_vcs_hooks = true in config.toml to export it";
            }
            if (strncmp(next, "hooks/", 6) == 0 || strcmp(next, "hooks") == 0) {
                return "a git hook runs on the host's next git command; set export_vcs_hooks = "
                       "true in config.toml to export it";
            }
            if (strcmp(next, "config") == 0) {
                return "a .git/config can name programs (core.fsmonitor, hooksPath) that the "
                       "host's next git command runs; set export_vcs_hooks = true in "
                       "config.toml to export it";
            }
        }
        s = e ? e + 1 : s + n;
    }
    return NULL;
}

/* 1 if the link target (relative) has a ".." component. */
static int
target_climbs(const char *t)
{
    while (*t != '\0') {
        const char *e = strchr(t, '/');
        size_t n = e ? (size_t)(e - t) : strlen(t);
        if (n == 2 && t[0] == '.' && t[1] == '.') {
            return 1;
        }
        t = e ? e + 1 : t + n;
    }
    return 0;
}

/* 1 if the link at rel beneath outfd stays beneath; 0 if not; -1 on a system error. */
static int
link_ok(int outfd, const char *rel, struct err *err)
{
    char parent[PATH_MAX], target[PATH_MAX];
    const char *slash = strrchr(rel, '/'), *name = slash ? slash + 1 : rel;
    size_t pn = slash ? (size_t)(slash - rel) : 0;
    ssize_t n;
    int fd, pfd, code;

    fd = safeopen_beneath(outfd, rel, O_PATH, 0, 0);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    code = errno;
    if (code == EXDEV || code == ELOOP) {
        return 0; /* leaves output_dir, or a loop or magic link on the way */
    }
    if (code != ENOENT && code != ENOTDIR) {
        return 0; /* cannot tell: not kept */
    }
    /* Dangling: kept only if its target never climbs, so whatever appears later at the
     * missing names (each checked when drun writes it) cannot take it out. */
    if (pn >= sizeof(parent)) {
        return 0;
    }
    memcpy(parent, rel, pn);
    parent[pn] = '\0';
    pfd = safeopen_beneath(outfd, parent, O_RDONLY | O_DIRECTORY, 0, SAFEOPEN_NO_SYMLINKS);
    if (pfd < 0) {
        return err_set(err, ERR_IO, "cannot open the directory of '%s': %s", rel, strerror(errno));
    }
    n = readlinkat(pfd, name, target, sizeof(target) - 1);
    close(pfd);
    if (n <= 0) {
        return 0;
    }
    target[n] = '\0';
    return target[0] != '/' && !target_climbs(target);
}

/* Removes the link at rel beneath outfd (only if it is still a link). */
static int
link_remove(int outfd, const char *rel, struct err *err)
{
    char parent[PATH_MAX];
    const char *slash = strrchr(rel, '/'), *name = slash ? slash + 1 : rel;
    size_t pn = slash ? (size_t)(slash - rel) : 0;
    struct stat sb;
    int pfd;

    if (pn >= sizeof(parent)) {
        return err_set(err, ERR_INVAL, "path '%.200s' is too long", rel);
    }
    memcpy(parent, rel, pn);
    parent[pn] = '\0';
    pfd = safeopen_beneath(outfd, parent, O_RDONLY | O_DIRECTORY, 0, SAFEOPEN_NO_SYMLINKS);
    if (pfd < 0) {
        return errno == ENOENT ? 0 : host_walk_error(rel, errno, err);
    }
    if (fstatat(pfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode) &&
        unlinkat(pfd, name, 0) < 0 && errno != ENOENT) {
        int code = errno;
        close(pfd);
        return err_set(err, ERR_IO, "cannot remove the link '%s': %s", rel, strerror(code));
    }
    close(pfd);
    return 0;
}

int
host_export_check_links(int outfd, const char *const *rels, size_t n, unsigned char *bad,
                        struct err *err)
{
    size_t removed;

    /* Removing one link can change what another resolves to: repeat until stable. */
    do {
        removed = 0;
        for (size_t i = 0; i < n; i++) {
            int ok;
            if (bad[i]) {
                continue;
            }
            ok = link_ok(outfd, rels[i], err);
            if (ok < 0) {
                return -1;
            }
            if (!ok) {
                if (link_remove(outfd, rels[i], err) < 0) {
                    return -1;
                }
                bad[i] = 1;
                removed++;
            }
        }
    } while (removed > 0);
    return 0;
}
