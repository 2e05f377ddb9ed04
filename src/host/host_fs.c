/*
 * host_fs.c - symlink-proof writes and deletes beneath a host directory (host.h, rules
 * 2, 4 and 6). The threat: a symlink swapped in between the policy check and the write.
 * Every operation here is relative to a directory fd and opens through util/safeopen.h
 * with SAFEOPEN_NO_SYMLINKS, so a link anywhere in the path makes it fail; the final
 * name is only ever created with O_EXCL (temp files), renamed onto (rename replaces a
 * link, it does not follow it), or unlinked. Before a rename or an unlink the name is
 * checked against drun's own files, so an allowlisted $HOME never lets an export
 * rewrite config.toml or a delete remove drun.db-wal.
 */
#include "host/host_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/safeopen.h"

#define REL_MAX   4096
#define DEPTH_MAX 256

void
host_force_fallback(int on)
{
    safeopen_force_fallback(on);
}

/* Checks rel: components non-empty, not "." or "..", no control characters. */
int
host_check_rel(const char *rel, int allow_empty, struct err *err)
{
    size_t n = strlen(rel);

    if (n == 0) {
        return allow_empty ? 0 : err_set(err, ERR_INVAL, "an empty path names the root itself");
    }
    if (n >= REL_MAX) {
        return err_set(err, ERR_INVAL, "path '%.64s...' is too long", rel);
    }
    if (rel[0] == '/') {
        return err_set(err, ERR_INVAL, "path '%s' must be relative to its root", rel);
    }
    for (const char *s = rel; *s != '\0';) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);

        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) {
            return err_set(err, ERR_INVAL,
                           "path '%s' has an empty, '.' or '..' component; name it plainly", rel);
        }
        for (size_t i = 0; i < len; i++) {
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
                return err_set(err, ERR_INVAL, "path '%s' contains a control character", rel);
            }
        }
        s = e ? e + 1 : s + len;
    }
    return 0;
}

int
host_walk_error(const char *rel, int code, struct err *err)
{
    if (code == ELOOP || code == ENOTDIR || code == EXDEV) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': a symlink or a non-directory is on the way; drun never "
                       "follows links on the host",
                       rel);
    }
    return err_set(err, code == ENOENT ? ERR_NOTFOUND : ERR_IO, "cannot open '%s': %s", rel,
                   strerror(code));
}

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

static int own_name_check(int dirfd, const char *name, const char *rel, struct err *err);

int
host_open_dir(int rootfd, const char *rel, int create, mode_t mode, struct err *err)
{
    char comp[256];
    int fd;

    if (host_check_rel(rel, 1, err) < 0) {
        return -1;
    }
    fd = safeopen_beneath(rootfd, rel, DIR_FLAGS, 0, SAFEOPEN_NO_SYMLINKS);
    if (fd >= 0 || !(errno == ENOENT && create)) {
        return fd >= 0 ? fd : host_walk_error(rel[0] ? rel : ".", errno, err);
    }
    /* mkdir -p: one component at a time, each relative to the fd of the one before. */
    fd = safeopen_beneath(rootfd, "", DIR_FLAGS, 0, SAFEOPEN_NO_SYMLINKS);
    if (fd < 0) {
        return host_walk_error(rel, errno, err);
    }
    for (const char *s = rel; *s != '\0';) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int next;

        if (len >= sizeof(comp)) {
            close(fd);
            return err_set(err, ERR_INVAL, "path '%s' has a component longer than 255 bytes", rel);
        }
        memcpy(comp, s, len);
        comp[len] = '\0';
        next = openat(fd, comp, DIR_FLAGS);
        if (next < 0 && errno == ENOENT) {
            if (own_name_check(fd, comp, rel, err) < 0) {
                close(fd);
                return -1;
            }
            if (mkdirat(fd, comp, mode) < 0 && errno != EEXIST) {
                int code = errno;
                close(fd);
                return err_set(err, ERR_IO, "cannot make directory '%s' in '%s': %s", comp, rel,
                               strerror(code));
            }
            next = openat(fd, comp, DIR_FLAGS);
        }
        if (next < 0) {
            int code = errno;
            close(fd);
            return host_walk_error(rel, code, err);
        }
        close(fd);
        fd = next;
        s = e ? e + 1 : s + len;
    }
    return fd;
}

int
host_open_root(const char *root, struct err *err)
{
    int slash;
    int fd;

    if (root == NULL || root[0] != '/') {
        return err_set(err, ERR_INVAL, "root '%s' must be an absolute path", root ? root : "");
    }
    if (root[1] == '\0') {
        return err_set(err, ERR_DENIED, "refusing to write relative to '/'");
    }
    slash = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (slash < 0) {
        return err_set(err, ERR_IO, "cannot open '/': %s", strerror(errno));
    }
    fd = host_open_dir(slash, root + 1, 0, 0, err);
    close(slash);
    if (fd < 0) {
        return err_wrap(err, "cannot open root '%s'", root);
    }
    return fd;
}

int
host_mkdirs(int rootfd, const char *rel, mode_t mode, struct err *err)
{
    int fd = host_open_dir(rootfd, rel, 1, mode, err);

    if (fd < 0) {
        return -1;
    }
    close(fd);
    return 0;
}

/* Splits rel into its parent (into parent[]) and returns a pointer to the last name. */
static const char *
split_parent(const char *rel, char *parent, size_t size)
{
    const char *slash = strrchr(rel, '/');
    size_t n = slash ? (size_t)(slash - rel) : 0;

    if (size == 0) {
        return rel;
    }
    if (n >= size) {
        n = size - 1; /* callers check rel against REL_MAX first */
    }
    memcpy(parent, rel, n);
    parent[n] = '\0';
    return slash ? slash + 1 : rel;
}

/*
 * Refuses name in dirfd when it is one of drun's own files (by name or inode) or in the
 * runtime directory. snapshots_dir is left to the doors' path check (host_check): drun
 * itself writes snapshot files there through these functions.
 */
static int
own_name_check(int dirfd, const char *name, const char *rel, struct err *err)
{
    struct stat sb, ps;
    int have = fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
    const char *hit;

    if (fstat(dirfd, &ps) < 0) {
        return err_set(err, ERR_IO, "cannot stat the directory of '%s': %s", rel, strerror(errno));
    }
    hit = host_own_match(ps.st_dev, ps.st_ino, name, have ? &sb : NULL, HOST_TREE_SNAPSHOTS);
    if (hit != NULL) {
        return err_set(err, ERR_DENIED,
                       "refusing '%s': it is drun's own file or directory ('%s'); no door "
                       "writes drun's config, database or runtime files",
                       rel, hit);
    }
    return 0;
}

/* Creates a fresh temp file in dirfd; its name goes to name[]. Returns the fd or -1. */
static int
make_temp(int dirfd, char *name, size_t size, struct err *err)
{
    static unsigned counter;

    for (int tries = 0; tries < 100; tries++) {
        int fd;
        snprintf(name, size, ".drun-tmp-%ld-%u", (long)getpid(),
                 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
        fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            return fd;
        }
        if (errno != EEXIST) {
            return err_set(err, ERR_IO, "cannot create a temporary file: %s", strerror(errno));
        }
    }
    return err_set(err, ERR_IO, "cannot create a temporary file: too many name clashes");
}

static int
write_all(int fd, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The shared body of the two write functions: data from a buffer or from srcfd. */
static int
write_common(int rootfd, const char *rel, const void *data, size_t len, int srcfd, off_t max,
             mode_t mode, struct err *err)
{
    char parent[REL_MAX];
    char tmp[64];
    const char *name;
    int dirfd = -1, fd = -1, rc = -1;

    if (host_check_rel(rel, 0, err) < 0) {
        return -1;
    }
    name = split_parent(rel, parent, sizeof(parent));
    dirfd = host_open_dir(rootfd, parent, 1, 0755, err);
    if (dirfd < 0) {
        return err_wrap(err, "cannot write '%s'", rel);
    }
    if (own_name_check(dirfd, name, rel, err) < 0) {
        tmp[0] = '\0';
        goto out;
    }
    fd = make_temp(dirfd, tmp, sizeof(tmp), err);
    if (fd < 0) {
        tmp[0] = '\0'; /* nothing of ours to clean up */
        goto out;
    }
    if (srcfd < 0) {
        if (write_all(fd, data, len) < 0) {
            err_set(err, ERR_IO, "cannot write '%s': %s", rel, strerror(errno));
            goto out;
        }
    } else {
        char chunk[65536];
        off_t total = 0;
        for (;;) {
            ssize_t n = read(srcfd, chunk, sizeof(chunk));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                err_set(err, ERR_IO, "cannot read the source of '%s': %s", rel, strerror(errno));
                goto out;
            }
            if (n == 0) {
                break;
            }
            total += n;
            if (total > max) {
                err_set(err, ERR_TOOBIG, "'%s' is larger than %lld bytes", rel, (long long)max);
                goto out;
            }
            if (write_all(fd, chunk, (size_t)n) < 0) {
                err_set(err, ERR_IO, "cannot write '%s': %s", rel, strerror(errno));
                goto out;
            }
        }
    }
    if (fchmod(fd, mode & 0777) < 0 || fsync(fd) < 0) {
        err_set(err, ERR_IO, "cannot finish '%s': %s", rel, strerror(errno));
        goto out;
    }
    if (close(fd) < 0) {
        fd = -1;
        err_set(err, ERR_IO, "cannot finish '%s': %s", rel, strerror(errno));
        goto out;
    }
    fd = -1;
    /* rename replaces whatever is at `name` (a file, or a symlink as a link). */
    if (renameat(dirfd, tmp, dirfd, name) < 0) {
        err_set(err, errno == EISDIR ? ERR_EXISTS : ERR_IO, "cannot put '%s' in place: %s", rel,
                strerror(errno));
        goto out;
    }
    tmp[0] = '\0';
    if (fsync(dirfd) < 0) {
        err_set(err, ERR_IO, "cannot sync the directory of '%s': %s", rel, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
    }
    if (rc < 0 && tmp[0] != '\0' && dirfd >= 0) {
        unlinkat(dirfd, tmp, 0);
    }
    if (dirfd >= 0) {
        close(dirfd);
    }
    return rc;
}

int
host_write_file(int rootfd, const char *rel, const void *data, size_t len, mode_t mode,
                struct err *err)
{
    return write_common(rootfd, rel, data, len, -1, 0, mode, err);
}

int
host_write_fd(int rootfd, const char *rel, int srcfd, off_t max, mode_t mode, struct err *err)
{
    if (srcfd < 0) {
        return err_set(err, ERR_INVAL, "no source to copy into '%s'", rel);
    }
    return write_common(rootfd, rel, NULL, 0, srcfd, max, mode, err);
}

int
host_symlink(int rootfd, const char *rel, const char *target, struct err *err)
{
    char parent[REL_MAX];
    char tmp[64];
    static unsigned counter;
    const char *name;
    int dirfd, rc = -1;

    if (host_check_rel(rel, 0, err) < 0) {
        return -1;
    }
    if (target == NULL || target[0] == '\0') {
        return err_set(err, ERR_INVAL, "symlink '%s' needs a target", rel);
    }
    name = split_parent(rel, parent, sizeof(parent));
    dirfd = host_open_dir(rootfd, parent, 1, 0755, err);
    if (dirfd < 0) {
        return err_wrap(err, "cannot write '%s'", rel);
    }
    if (own_name_check(dirfd, name, rel, err) < 0) {
        goto out;
    }
    for (int tries = 0;; tries++) {
        snprintf(tmp, sizeof(tmp), ".drun-tmp-%ld-l%u", (long)getpid(),
                 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
        if (symlinkat(target, dirfd, tmp) == 0) {
            break;
        }
        if (errno != EEXIST || tries >= 100) {
            err_set(err, ERR_IO, "cannot create symlink '%s': %s", rel, strerror(errno));
            goto out;
        }
    }
    if (renameat(dirfd, tmp, dirfd, name) < 0) {
        err_set(err, ERR_IO, "cannot put symlink '%s' in place: %s", rel, strerror(errno));
        unlinkat(dirfd, tmp, 0);
        goto out;
    }
    rc = 0;
out:
    close(dirfd);
    return rc;
}

/*
 * The tree of the directory `name` in parentfd, examined (remove = 0) or removed
 * (remove = 1). Every directory is opened O_NOFOLLOW and must be on the mount of the
 * top (statx mount id and st_dev): a bind mount of /etc on the same filesystem has the
 * same st_dev, only the mount id tells it apart. Entries that are drun's own files or
 * directories stop the walk. The examining pass runs first, so a refusal removes
 * nothing; the removing pass checks again, since the tree may change in between.
 */
struct rm_walk {
    const char *rel;
    unsigned long long mnt;
    dev_t dev;
    int remove;
    struct host_removed *out;
};

static int
remove_tree(struct rm_walk *w, int parentfd, const char *name, int depth, struct err *err)
{
    DIR *d = NULL;
    struct dirent *ent;
    struct stat sb;
    unsigned long long mnt = 0;
    int fd, rc = -1;

    if (depth > DEPTH_MAX) {
        return err_set(err, ERR_TOOBIG, "'%s' is nested deeper than %d levels; not removing it",
                       w->rel, DEPTH_MAX);
    }
    fd = openat(parentfd, name, DIR_FLAGS);
    if (fd < 0) {
        return host_walk_error(w->rel, errno, err);
    }
    if (fstat(fd, &sb) < 0 || safeopen_mnt_id(fd, &mnt) < 0) {
        close(fd);
        return err_set(err, ERR_IO, "cannot stat '%s': %s", w->rel, strerror(errno));
    }
    if (sb.st_dev != w->dev || mnt != w->mnt) {
        close(fd);
        return err_set(err, ERR_DENIED,
                       "refusing to delete '%s': a mount point is inside it (another mount "
                       "of this or another filesystem); nothing was deleted, unmount it first",
                       w->rel);
    }
    if (host_own_check_entry(parentfd, name, &sb, w->rel, err) < 0) {
        close(fd);
        return -1;
    }
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return err_set(err, ERR_IO, "cannot list '%s': %s", w->rel, strerror(errno));
    }
    while ((errno = 0, ent = readdir(d)) != NULL) {
        struct stat es;
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) {
            continue;
        }
        if (fstatat(fd, ent->d_name, &es, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT) {
                continue;
            }
            err_set(err, ERR_IO, "cannot stat '%s/%s': %s", w->rel, ent->d_name, strerror(errno));
            goto out;
        }
        if (S_ISDIR(es.st_mode)) {
            if (remove_tree(w, fd, ent->d_name, depth + 1, err) < 0) {
                goto out;
            }
            continue;
        }
        if (host_own_check_entry(fd, ent->d_name, &es, w->rel, err) < 0) {
            goto out;
        }
        if (!w->remove) {
            continue;
        }
        if (unlinkat(fd, ent->d_name, 0) == 0) {
            w->out->files++;
        } else if (errno != ENOENT) {
            err_set(err, ERR_IO, "cannot remove '%s/%s': %s", w->rel, ent->d_name, strerror(errno));
            goto out;
        }
    }
    if (errno != 0) {
        err_set(err, ERR_IO, "cannot list '%s': %s", w->rel, strerror(errno));
        goto out;
    }
    if (w->remove) {
        if (unlinkat(parentfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
            err_set(err, ERR_IO, "cannot remove '%s': %s", w->rel, strerror(errno));
            goto out;
        }
        w->out->dirs++;
    }
    rc = 0;
out:
    closedir(d); /* closes fd */
    return rc;
}

int
host_remove(int rootfd, const char *rel, struct host_removed *out, struct err *err)
{
    char parent[REL_MAX];
    const char *name;
    struct stat psb, sb;
    struct rm_walk w;
    int dirfd, rc = -1;

    memset(out, 0, sizeof(*out));
    if (host_check_rel(rel, 0, err) < 0) {
        return -1;
    }
    name = split_parent(rel, parent, sizeof(parent));
    dirfd = host_open_dir(rootfd, parent, 0, 0, err);
    if (dirfd < 0) {
        if (err->code == ERR_NOTFOUND) {
            err_clear(err);
            out->missing = 1;
            return 0;
        }
        return -1;
    }
    memset(&w, 0, sizeof(w));
    w.rel = rel;
    w.out = out;
    if (fstat(dirfd, &psb) < 0 || safeopen_mnt_id(dirfd, &w.mnt) < 0) {
        err_set(err, ERR_IO, "cannot stat the parent of '%s': %s", rel, strerror(errno));
        goto out;
    }
    w.dev = psb.st_dev;
    if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT) {
            out->missing = 1;
            rc = 0;
        } else {
            err_set(err, ERR_IO, "cannot stat '%s': %s", rel, strerror(errno));
        }
        goto out;
    }
    if (host_own_check_entry(dirfd, name, &sb, rel, err) < 0) {
        goto out;
    }
    if (S_ISDIR(sb.st_mode)) {
        /* Examine the whole tree first: a refusal (a mount inside, an own file) must
         * come before the first unlink, not after half the tree is gone. */
        if (remove_tree(&w, dirfd, name, 0, err) < 0) {
            goto out;
        }
        w.remove = 1;
        rc = remove_tree(&w, dirfd, name, 0, err);
        goto out;
    }
    /* A symlink, file, FIFO, socket or device node: unlink the entry itself. */
    if (unlinkat(dirfd, name, 0) < 0) {
        if (errno == ENOENT) {
            out->missing = 1;
            rc = 0;
        } else {
            err_set(err, ERR_IO, "cannot remove '%s': %s", rel, strerror(errno));
        }
        goto out;
    }
    out->files++;
    rc = 0;
out:
    close(dirfd);
    return rc;
}
