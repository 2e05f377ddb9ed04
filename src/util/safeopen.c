/*
 * safeopen.c - openat2 beneath a directory fd, or the same rules by a walk. See
 * safeopen.h for the threat and the contract. The two paths must answer alike: the
 * unit tests run every case twice, once forcing the walk.
 */
#include "util/safeopen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/vfs.h>
#endif

#define LINKS_MAX     40  /* symlinks one resolution may follow, as the kernel's */
#define STACK_MAX     256 /* directory levels the walk holds */
#define SAFE_PATH_MAX 4096

static int force_fallback;
static int openat2_refused; /* ENOSYS, or EPERM for every openat2: walk for good */

void
safeopen_force_fallback(int on)
{
    force_fallback = on;
}

int
safeopen_using_fallback(void)
{
    return force_fallback || openat2_refused;
}

int
safeopen_mnt_id(int fd, unsigned long long *id)
{
#if defined(__linux__) && defined(STATX_MNT_ID)
    struct statx sx;

    memset(&sx, 0, sizeof(sx));
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &sx) < 0) {
        return -1;
    }
    *id = (sx.stx_mask & STATX_MNT_ID) ? (unsigned long long)sx.stx_mnt_id : 0;
    return 0;
#else
    (void)fd;
    *id = 0;
    return 0;
#endif
}

/* 1 if fd and the reference (mnt id, dev) are on different mounts. */
static int
crosses(int fd, unsigned long long ref_mnt, dev_t ref_dev)
{
    unsigned long long mnt = 0;
    struct stat sb;

    if (fstat(fd, &sb) < 0 || sb.st_dev != ref_dev) {
        return 1;
    }
    if (safeopen_mnt_id(fd, &mnt) < 0) {
        return 1;
    }
    return mnt != ref_mnt;
}

#if defined(__linux__) && defined(SYS_openat2)
static int
call_openat2(int dirfd, const char *path, int flags, mode_t mode, unsigned opts)
{
    struct open_how how;

    memset(&how, 0, sizeof(how));
    how.flags = (unsigned long long)(flags | O_CLOEXEC);
    how.mode = (flags & O_CREAT) ? (unsigned long long)(mode & 07777) : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (opts & SAFEOPEN_NO_SYMLINKS) {
        how.resolve |= RESOLVE_NO_SYMLINKS;
    }
    if (opts & SAFEOPEN_NO_XDEV) {
        how.resolve |= RESOLVE_NO_XDEV;
    }
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}
#endif

/* 1 if the directory fd is on procfs, where links may be magic. */
static int
on_procfs(int fd)
{
#ifdef __linux__
    struct statfs fs;

    return fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
#else
    (void)fd;
    return 0;
#endif
}

struct walk {
    int stack[STACK_MAX];
    int depth;  /* stack[0..depth] are open */
    char *rest; /* the components still to resolve, '/'-separated */
    unsigned long long mnt;
    dev_t dev;
};

static void
walk_release(struct walk *w)
{
    for (int i = 0; i <= w->depth; i++) {
        if (w->stack[i] >= 0) {
            close(w->stack[i]);
        }
    }
    free(w->rest);
}

/* Replaces w->rest with target + "/" + tail (the components after the link). */
static int
walk_splice(struct walk *w, const char *target, size_t tlen, const char *tail)
{
    size_t n = strlen(tail);
    char *s;

    if (tlen + 1 + n >= SAFE_PATH_MAX * 2) {
        errno = ENAMETOOLONG;
        return -1;
    }
    s = malloc(tlen + n + 2);
    if (s == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(s, target, tlen);
    s[tlen] = '/';
    memcpy(s + tlen + 1, tail, n + 1);
    free(w->rest);
    w->rest = s;
    return 0;
}

/*
 * The walk: every step relative to the fd of the step before, O_NOFOLLOW, a symlink
 * read and spliced into the remaining path (absolute target: EXDEV), ".." popping the
 * stack (past the start: EXDEV), a mount crossing refused with SAFEOPEN_NO_XDEV.
 */
static int
walk_open(int dirfd, const char *path, int flags, mode_t mode, unsigned opts)
{
    struct walk w;
    int links = 0, rc = -1, saved;
    char *p;

    if (path[0] == '/') {
        errno = EXDEV;
        return -1;
    }
    memset(&w, 0, sizeof(w));
    w.depth = 0;
    w.stack[0] = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (w.stack[0] < 0) {
        return -1;
    }
    w.rest = strdup(path);
    if (w.rest == NULL) {
        errno = ENOMEM;
        goto out;
    }
    if (opts & SAFEOPEN_NO_XDEV) {
        struct stat sb;
        if (fstat(w.stack[0], &sb) < 0 || safeopen_mnt_id(w.stack[0], &w.mnt) < 0) {
            goto out;
        }
        w.dev = sb.st_dev;
    }
    p = w.rest;
    for (;;) {
        char name[256];
        const char *end;
        size_t len;
        int last, top = w.stack[w.depth];
        struct stat sb;

        while (*p == '/') {
            p++;
        }
        if (*p == '\0') {
            /* Nothing left: the answer is the directory on top of the stack. */
            rc = openat(top, ".", (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW)) | O_CLOEXEC);
            goto out;
        }
        end = strchr(p, '/');
        len = end ? (size_t)(end - p) : strlen(p);
        if (len >= sizeof(name)) {
            errno = ENAMETOOLONG;
            goto out;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        p += len;
        {
            const char *q = p;
            while (*q == '/') {
                q++;
            }
            last = *q == '\0';
        }
        if (strcmp(name, ".") == 0) {
            continue;
        }
        if (strcmp(name, "..") == 0) {
            if (w.depth == 0) {
                errno = EXDEV; /* would leave the start directory */
                goto out;
            }
            close(w.stack[w.depth]);
            w.stack[w.depth--] = -1;
            continue;
        }
        if (fstatat(top, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT && last && (flags & O_CREAT)) {
                rc = openat(top, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
                goto check_last;
            }
            goto out;
        }
        if (S_ISLNK(sb.st_mode)) {
            char target[SAFE_PATH_MAX];
            ssize_t n;
            if ((opts & SAFEOPEN_NO_SYMLINKS) || (last && (flags & O_NOFOLLOW))) {
                if (last && (flags & O_PATH) && (flags & O_NOFOLLOW)) {
                    rc = openat(top, name, flags | O_CLOEXEC);
                    goto out;
                }
                errno = ELOOP;
                goto out;
            }
            if (on_procfs(top) || ++links > LINKS_MAX) {
                errno = ELOOP; /* a magic link, or a loop */
                goto out;
            }
            n = readlinkat(top, name, target, sizeof(target));
            if (n < 0) {
                goto out;
            }
            if (n == 0 || (size_t)n >= sizeof(target)) {
                errno = n == 0 ? ENOENT : ENAMETOOLONG;
                goto out;
            }
            if (target[0] == '/') {
                errno = EXDEV; /* an absolute target leaves the start directory */
                goto out;
            }
            if (walk_splice(&w, target, (size_t)n, p) < 0) {
                goto out;
            }
            p = w.rest;
            continue;
        }
        if (last) {
            rc = openat(top, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
            goto check_last;
        }
        if (!S_ISDIR(sb.st_mode)) {
            errno = ENOTDIR;
            goto out;
        }
        if (w.depth + 1 >= STACK_MAX) {
            errno = ELOOP;
            goto out;
        }
        {
            int fd = openat(top, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                goto out;
            }
            if ((opts & SAFEOPEN_NO_XDEV) && crosses(fd, w.mnt, w.dev)) {
                close(fd);
                errno = EXDEV;
                goto out;
            }
            w.stack[++w.depth] = fd;
        }
    }
check_last:
    if (rc >= 0 && (opts & SAFEOPEN_NO_XDEV) && crosses(rc, w.mnt, w.dev)) {
        close(rc);
        rc = -1;
        errno = EXDEV;
    }
out:
    saved = errno;
    walk_release(&w);
    errno = saved;
    return rc;
}

int
safeopen_beneath(int dirfd, const char *path, int flags, mode_t mode, unsigned opts)
{
    if (path == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (path[0] == '\0') {
        path = ".";
    }
    if (opts & SAFEOPEN_NO_SYMLINKS) {
        flags |= O_NOFOLLOW;
    }
#if defined(__linux__) && defined(SYS_openat2)
    if (!force_fallback && !openat2_refused) {
        for (int tries = 0; tries < 8; tries++) {
            int fd = call_openat2(dirfd, path, flags, mode, opts);
            if (fd >= 0) {
                return fd;
            }
            if (errno == EAGAIN) {
                continue; /* a rename or mount raced a "..": ask again, then walk */
            }
            if (errno == ENOSYS) {
                openat2_refused = 1;
            } else if (errno == EPERM) {
                /* A seccomp filter that refuses every openat2, or a real EPERM for this
                 * file: probe with the start directory itself to tell them apart. */
                int probe = call_openat2(dirfd, ".", O_PATH | O_DIRECTORY, 0, 0);
                if (probe >= 0) {
                    close(probe);
                    errno = EPERM;
                    return -1;
                }
                openat2_refused = 1;
            } else {
                return -1;
            }
            break;
        }
    }
#endif
    return walk_open(dirfd, path, flags, mode, opts);
}
