/*
 * ws_fs.c - the only place the workspace module resolves paths on disk.
 *
 * Every operation starts from the root's fd and never follows a symlink. The threat:
 * a command in the sandbox owns the workspace tree and may replace any directory with
 * a symlink to "/" or "$HOME" (or a hard-to-spot "../../.."), hoping the next sync
 * writes or deletes through it on the host, where drun runs with the user's rights.
 *
 *   - util/safeopen.h, drun's one safe-open primitive: openat2(RESOLVE_BENEATH |
 *     RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) where the kernel has it, else its
 *     own O_NOFOLLOW walk with the same answers; any symlink, any ".." escape and /proc
 *     magic links are refused during the whole resolution.
 *   - to create or repair, a walk here, one component at a time, each opened with
 *     O_NOFOLLOW | O_DIRECTORY relative to the previous fd: a symlink component fails
 *     with ELOOP or ENOTDIR instead of being followed. Keys never hold "..".
 *   - leaves are always handled relative to their parent's fd with *at() calls and
 *     AT_SYMLINK_NOFOLLOW / O_NOFOLLOW, so swapping the leaf itself for a link does not
 *     help either; a link in the way of a write is removed (the link, not its target)
 *     and a real directory or file made in its place.
 *   - directories are removed by listing them through an fd opened O_NOFOLLOW, so a
 *     recursive delete never descends through a link.
 */
#include "workspace/ws_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/pathkey.h"
#include "util/safeopen.h"

static int force_fallback;

void
ws_fs_force_fallback(int on)
{
    force_fallback = on;
}

/*
 * The one safe-open primitive (util/safeopen.h) beneath dirfd, refusing every symlink;
 * -1 with errno. ENOSYS only when a test forces the repairing walk below.
 */
static int
open_beneath(int dirfd, const char *path, int flags)
{
    if (force_fallback) {
        errno = ENOSYS;
        return -1;
    }
    return safeopen_beneath(dirfd, path, flags, 0, SAFEOPEN_NO_SYMLINKS);
}

/* Makes sure `name` in dirfd is a real directory we can write; fixes it if asked. */
static int
open_component(int cur, const char *name, const char *shown, int flags, int *out, struct err *err)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        struct stat st;
        int fd = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            if ((flags & WS_FS_CREATE) && fstat(fd, &st) == 0 && (st.st_mode & 0700) != 0700) {
                /* A command may chmod a directory to 0500; we own it, so undo that. */
                if (fchmodat(cur, name, (st.st_mode & 07777) | 0700, AT_SYMLINK_NOFOLLOW) != 0) {
                    close(fd);
                    return err_set(err, ERR_IO, "cannot make '%s' writable: %s", shown,
                                   strerror(errno));
                }
            }
            *out = fd;
            return 0;
        }
        if (!(flags & WS_FS_CREATE)) {
            if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) {
                return err_set(err, ERR_NOTFOUND, "'%s' is not a directory in the workspace",
                               shown);
            }
            return err_set(err, ERR_IO, "cannot open '%s': %s", shown, strerror(errno));
        }
        if (errno == ENOTDIR || errno == ELOOP) {
            /* A file or a (possibly planted) symlink where a directory belongs. */
            if (ws_fs_rm(cur, name, shown, err) != 0) {
                return -1;
            }
        } else if (errno != ENOENT) {
            return err_set(err, ERR_IO, "cannot open '%s': %s", shown, strerror(errno));
        }
        if (mkdirat(cur, name, 0755) != 0 && errno != EEXIST) {
            return err_set(err, ERR_IO, "cannot make directory '%s': %s", shown, strerror(errno));
        }
        /*
         * A root daemon's workspace belongs to the sandbox user (ws_dir_open_as): a
         * directory made in it inherits its parent's owner, so commands can write there.
         */
        if (geteuid() == 0 && fstat(cur, &st) == 0 && st.st_uid != 0 &&
            fchownat(cur, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0) {
            return err_set(err, ERR_IO, "cannot give directory '%s' to its owner: %s", shown,
                           strerror(errno));
        }
    }
    return err_set(err, ERR_IO, "'%s' keeps changing while drun makes it a directory", shown);
}

int
ws_fs_open_dir(int root_fd, const char *p, size_t n, int flags, int *fd, struct err *err)
{
    char *path = NULL;
    char q[100];
    int cur = -1;
    int rc = -1;

    *fd = -1;
    if (n == 0) {
        *fd = openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (*fd < 0) {
            return err_set(err, ERR_IO, "cannot open the workspace root: %s", strerror(errno));
        }
        return 0;
    }
    path = mem_strndup(p, n);
    if (path == NULL) {
        return err_set(err, ERR_NOMEM, "cannot open a workspace directory: out of memory");
    }
    pathkey_quote(p, n, q, sizeof(q));
    cur = open_beneath(root_fd, path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cur >= 0) {
        /* Fast path. With WS_FS_CREATE the walk below still fixes permissions, so only
         * take it when the directory is already fully usable. */
        struct stat st;
        if (!(flags & WS_FS_CREATE) || (fstat(cur, &st) == 0 && (st.st_mode & 0700) == 0700)) {
            *fd = cur;
            mem_free(path);
            return 0;
        }
        close(cur);
    } else if (errno != ENOSYS && errno != EINVAL && errno != E2BIG && errno != ENAMETOOLONG &&
               !(flags & WS_FS_CREATE)) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EXDEV) {
            rc = err_set(err, ERR_NOTFOUND, "'%s' is not a directory in the workspace", q);
        } else {
            rc = err_set(err, ERR_IO, "cannot open '%s': %s", q, strerror(errno));
        }
        goto out;
    }
    /* The per-component walk: for kernels without openat2 and to create or repair. */
    cur = openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0) {
        rc = err_set(err, ERR_IO, "cannot open the workspace root: %s", strerror(errno));
        goto out;
    }
    for (size_t s = 0; s < n;) {
        size_t e = s;
        int next = -1;
        while (e < n && path[e] != '/') {
            e++;
        }
        path[e] = '\0';
        if (e > s && strcmp(path + s, ".") != 0) {
            if (strcmp(path + s, "..") == 0) {
                rc = err_set(err, ERR_INVAL, "workspace path '%s' must not contain '..'", q);
                goto out;
            }
            if (open_component(cur, path + s, q, flags, &next, err) != 0) {
                goto out;
            }
            close(cur);
            cur = next;
        }
        s = e + 1;
    }
    *fd = cur;
    cur = -1;
    rc = 0;
out:
    if (cur >= 0) {
        close(cur);
    }
    mem_free(path);
    return rc;
}

/* Lists the names in the directory open at fd (NUL-separated into names). */
static int
list_names(int fd, struct buf *names, const char *shown, struct err *err)
{
    DIR *d;
    struct dirent *de;
    int dfd = dup(fd);

    if (dfd < 0 || (d = fdopendir(dfd)) == NULL) {
        int e = errno;
        if (dfd >= 0) {
            close(dfd);
        }
        return err_set(err, ERR_IO, "cannot list '%s': %s", shown, strerror(e));
    }
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
            continue;
        }
        buf_append(names, de->d_name, strlen(de->d_name) + 1);
        errno = 0;
    }
    if (errno != 0) {
        int e = errno;
        closedir(d);
        return err_set(err, ERR_IO, "cannot list '%s': %s", shown, strerror(e));
    }
    closedir(d);
    if (buf_failed(names)) {
        return buf_err(names, "a directory listing", err);
    }
    return 0;
}

static int
rm_at(int dirfd, const char *name, const char *shown, int depth, struct err *err)
{
    struct stat st;
    struct buf names;
    int fd = -1;
    int rc = -1;

    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {
            return 0;
        }
        return err_set(err, ERR_IO, "cannot inspect '%s': %s", shown, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
            return err_set(err, ERR_IO, "cannot remove '%s': %s", shown, strerror(errno));
        }
        return 0;
    }
    if (depth >= WS_RM_DEPTH_MAX) {
        return err_set(err, ERR_TOOBIG,
                       "cannot remove '%s': directories nested deeper than %d levels", shown,
                       WS_RM_DEPTH_MAX);
    }
    buf_init(&names, (size_t)64 << 20);
    /* Never follow: a directory swapped for a link after the fstatat would hand the
     * link's target (anywhere on the host) a mode of the attacker's choosing. */
    if ((st.st_mode & 0700) != 0700 &&
        fchmodat(dirfd, name, (st.st_mode & 07777) | 0700, AT_SYMLINK_NOFOLLOW) != 0) {
        err_set(err, ERR_IO, "cannot make '%s' writable: %s", shown, strerror(errno));
        goto out;
    }
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            rc = 0;
            goto out;
        }
        err_set(err, ERR_IO, "cannot open '%s': %s", shown, strerror(errno));
        goto out;
    }
    if (list_names(fd, &names, shown, err) != 0) {
        goto out;
    }
    for (size_t off = 0; off < names.len; off += strlen(names.data + off) + 1) {
        if (rm_at(fd, names.data + off, shown, depth + 1, err) != 0) {
            goto out;
        }
    }
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        err_set(err, ERR_IO, "cannot remove directory '%s': %s", shown, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
    }
    buf_release(&names);
    return rc;
}

int
ws_fs_rm(int dirfd, const char *name, const char *shown, struct err *err)
{
    return rm_at(dirfd, name, shown, 0, err);
}

int
ws_fs_read_fd(int fd, struct buf *out, const char *shown, struct err *err)
{
    for (;;) {
        size_t room = out->max - out->len;
        size_t chunk = room < 65536 ? room : 65536;
        ssize_t n;

        if (room == 0) {
            /* At the cap: one more byte tells "exactly max" from "more than max". */
            char c;
            do {
                n = read(fd, &c, 1);
            } while (n < 0 && errno == EINTR);
            if (n == 0) {
                return 0;
            }
            return err_set(err, ERR_TOOBIG, "'%s' is larger than %zu bytes", shown, out->max);
        }
        if (buf_grow(out, chunk) != 0) {
            return buf_err(out, shown, err);
        }
        n = read(fd, out->data + out->len, chunk);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(err, ERR_IO, "cannot read '%s': %s", shown, strerror(errno));
        }
        if (n == 0) {
            return 0;
        }
        out->len += (size_t)n;
        out->data[out->len] = '\0';
    }
}

int
ws_fs_list(int root_fd, const char *p, size_t n, int flags, struct buf *names, int *dirfd,
           struct err *err)
{
    char q[100];
    int fd;
    int rfd;

    *dirfd = -1;
    if (ws_fs_open_dir(root_fd, p, n, flags, &fd, err) != 0) {
        return -1;
    }
    pathkey_quote(n ? p : ".", n ? n : 1, q, sizeof(q));
    rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) {
        err_set(err, ERR_IO, "cannot open '%s': %s", q, strerror(errno));
        close(fd);
        return -1;
    }
    if (list_names(rfd, names, q, err) != 0) {
        close(rfd);
        close(fd);
        return -1;
    }
    close(rfd);
    *dirfd = fd;
    return 0;
}
