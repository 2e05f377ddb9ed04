/*
 * hostpath.c - symlink-proof writes and deletes beneath a host directory. See
 * hostpath.h for the threat: a symlink swapped in between the policy check and the
 * write. Every operation here is relative to a directory fd and never resolves a
 * symlink: openat2 with RESOLVE_NO_SYMLINKS refuses one anywhere in the path, the
 * fallback refuses one at each component with O_NOFOLLOW, and the final name is only
 * ever created with O_EXCL (temp files), renamed onto (rename replaces a link, it does
 * not follow it), or unlinked.
 */
#include "policy/hostpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/mem.h"

#ifdef __linux__
#include <linux/openat2.h>
#endif

#define REL_MAX   4096
#define DEPTH_MAX 256

static int force_fallback;

void
hostpath_force_fallback(int on)
{
    force_fallback = on;
}

/* Checks rel: components non-empty, not "." or "..", no control characters. */
static int
check_rel(const char *rel, int allow_empty, struct err *err)
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

static int
walk_error(const char *rel, int code, struct err *err)
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

/*
 * Opens directory rel beneath dirfd with openat2; returns the fd, or -1 with errno
 * (ENOSYS when the kernel lacks it, which switches to the fallback for good).
 */
static int
open_beneath2(int dirfd, const char *rel)
{
#if defined(__linux__) && defined(SYS_openat2)
    struct open_how how;

    memset(&how, 0, sizeof(how));
    how.flags = DIR_FLAGS;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
#else
    (void)dirfd;
    (void)rel;
    errno = ENOSYS;
    return -1;
#endif
}

int
hostpath_open_dir(int rootfd, const char *rel, int create, mode_t mode, struct err *err)
{
    char comp[256];
    int fd;

    if (check_rel(rel, 1, err) < 0) {
        return -1;
    }
    if (rel[0] == '\0') {
        fd = openat(rootfd, ".", DIR_FLAGS);
        return fd >= 0 ? fd : walk_error(".", errno, err);
    }
    if (!force_fallback) {
        fd = open_beneath2(rootfd, rel);
        if (fd >= 0) {
            return fd;
        }
        if (errno == ENOSYS) {
            force_fallback = 1; /* the kernel lacks openat2: walk by hand from now on */
        } else if (!(errno == ENOENT && create)) {
            return walk_error(rel, errno, err);
        }
    }
    /* One component at a time, each relative to the fd of the one before. */
    fd = openat(rootfd, ".", DIR_FLAGS);
    if (fd < 0) {
        return walk_error(rel, errno, err);
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
        if (next < 0 && errno == ENOENT && create) {
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
            return walk_error(rel, code, err);
        }
        close(fd);
        fd = next;
        s = e ? e + 1 : s + len;
    }
    return fd;
}

int
hostpath_open_root(const char *root, struct err *err)
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
    fd = hostpath_open_dir(slash, root + 1, 0, 0, err);
    close(slash);
    if (fd < 0) {
        return err_wrap(err, "cannot open root '%s'", root);
    }
    return fd;
}

int
hostpath_mkdirs(int rootfd, const char *rel, mode_t mode, struct err *err)
{
    int fd = hostpath_open_dir(rootfd, rel, 1, mode, err);

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

    if (check_rel(rel, 0, err) < 0) {
        return -1;
    }
    name = split_parent(rel, parent, sizeof(parent));
    dirfd = hostpath_open_dir(rootfd, parent, 1, 0755, err);
    if (dirfd < 0) {
        return err_wrap(err, "cannot write '%s'", rel);
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
hostpath_write_file(int rootfd, const char *rel, const void *data, size_t len, mode_t mode,
                    struct err *err)
{
    return write_common(rootfd, rel, data, len, -1, 0, mode, err);
}

int
hostpath_write_fd(int rootfd, const char *rel, int srcfd, off_t max, mode_t mode, struct err *err)
{
    if (srcfd < 0) {
        return err_set(err, ERR_INVAL, "no source to copy into '%s'", rel);
    }
    return write_common(rootfd, rel, NULL, 0, srcfd, max, mode, err);
}

int
hostpath_symlink(int rootfd, const char *rel, const char *target, struct err *err)
{
    char parent[REL_MAX];
    char tmp[64];
    static unsigned counter;
    const char *name;
    int dirfd, rc = -1;

    if (check_rel(rel, 0, err) < 0) {
        return -1;
    }
    if (target == NULL || target[0] == '\0') {
        return err_set(err, ERR_INVAL, "symlink '%s' needs a target", rel);
    }
    name = split_parent(rel, parent, sizeof(parent));
    dirfd = hostpath_open_dir(rootfd, parent, 1, 0755, err);
    if (dirfd < 0) {
        return err_wrap(err, "cannot write '%s'", rel);
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

/* Removes the directory `name` in parentfd and everything under it. */
static int
remove_tree(int parentfd, const char *name, dev_t dev, int depth, const char *rel,
            struct hostpath_removed *out, struct err *err)
{
    DIR *d = NULL;
    struct dirent *ent;
    struct stat sb;
    int fd, rc = -1;

    if (depth > DEPTH_MAX) {
        return err_set(err, ERR_TOOBIG, "'%s' is nested deeper than %d levels; not removing it",
                       rel, DEPTH_MAX);
    }
    fd = openat(parentfd, name, DIR_FLAGS);
    if (fd < 0) {
        return walk_error(rel, errno, err);
    }
    if (fstat(fd, &sb) < 0) {
        close(fd);
        return err_set(err, ERR_IO, "cannot stat '%s': %s", rel, strerror(errno));
    }
    if (sb.st_dev != dev) {
        close(fd);
        return err_set(err, ERR_DENIED,
                       "refusing to delete into '%s': it is on another filesystem (a mount "
                       "point); unmount it first",
                       rel);
    }
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return err_set(err, ERR_IO, "cannot list '%s': %s", rel, strerror(errno));
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
            err_set(err, ERR_IO, "cannot stat '%s/%s': %s", rel, ent->d_name, strerror(errno));
            goto out;
        }
        if (S_ISDIR(es.st_mode)) {
            if (remove_tree(fd, ent->d_name, dev, depth + 1, rel, out, err) < 0) {
                goto out;
            }
        } else if (unlinkat(fd, ent->d_name, 0) == 0) {
            out->files++;
        } else if (errno != ENOENT) {
            err_set(err, ERR_IO, "cannot remove '%s/%s': %s", rel, ent->d_name, strerror(errno));
            goto out;
        }
    }
    if (errno != 0) {
        err_set(err, ERR_IO, "cannot list '%s': %s", rel, strerror(errno));
        goto out;
    }
    if (unlinkat(parentfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
        err_set(err, ERR_IO, "cannot remove '%s': %s", rel, strerror(errno));
        goto out;
    }
    out->dirs++;
    rc = 0;
out:
    closedir(d); /* closes fd */
    return rc;
}

int
hostpath_remove(int rootfd, const char *rel, struct hostpath_removed *out, struct err *err)
{
    char parent[REL_MAX];
    const char *name;
    struct stat psb, sb;
    int dirfd, rc = -1;

    memset(out, 0, sizeof(*out));
    if (check_rel(rel, 0, err) < 0) {
        return -1;
    }
    name = split_parent(rel, parent, sizeof(parent));
    dirfd = hostpath_open_dir(rootfd, parent, 0, 0, err);
    if (dirfd < 0) {
        if (err->code == ERR_NOTFOUND) {
            err_clear(err);
            out->missing = 1;
            return 0;
        }
        return -1;
    }
    if (fstat(dirfd, &psb) < 0) {
        err_set(err, ERR_IO, "cannot stat the parent of '%s': %s", rel, strerror(errno));
        goto out;
    }
    if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT) {
            out->missing = 1;
            rc = 0;
        } else {
            err_set(err, ERR_IO, "cannot stat '%s': %s", rel, strerror(errno));
        }
        goto out;
    }
    if (S_ISDIR(sb.st_mode)) {
        rc = remove_tree(dirfd, name, psb.st_dev, 0, rel, out, err);
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
