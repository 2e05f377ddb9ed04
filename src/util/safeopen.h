/*
 * safeopen.h - the one safe-open primitive: open a path beneath a directory fd so that
 * nothing on the way (a symlink, "..", a /proc magic link, optionally a mount point)
 * can lead the open outside that directory.
 *
 * The threat: drun opens paths below directories that hostile code can change at any
 * moment (a sandboxed command owns its workspace; an agent's earlier export or a host
 * process owns an allowlisted directory). A string checked a moment ago may now hold a
 * symlink to "/" or "/etc". So every open is relative to an fd, and the kernel (or our
 * walk) refuses any step that leaves it.
 *
 * Where the kernel has openat2 (Linux >= 5.6) it does the resolution atomically with
 * RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (+ RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV on
 * request). Otherwise (ENOSYS, or EPERM from a seccomp filter that refuses openat2, both
 * remembered for the life of the process) the same rules are applied by a walk, one
 * component at a time, each opened O_NOFOLLOW relative to the fd before it; symlinks
 * (when allowed) are read with readlinkat and resolved by the walk itself, ".." pops a
 * stack of fds and fails at the start fd, and an absolute link target fails. EAGAIN
 * (openat2 saw a concurrent rename or mount during "..") is retried a few times, then
 * the walk decides. Both paths fail the same way: errno EXDEV for an escape, ELOOP for
 * a refused symlink (or too many), ENOTDIR, ENOENT and the rest as open(2) gives them.
 *
 * This header is the primitive only: no policy, no allowlists (host/ holds those).
 */
#ifndef DRUN_UTIL_SAFEOPEN_H
#define DRUN_UTIL_SAFEOPEN_H

#include <sys/types.h>

enum {
    SAFEOPEN_NO_SYMLINKS = 1 << 0, /* refuse any symlink on the way, the last name included */
    SAFEOPEN_NO_XDEV = 1 << 1,     /* refuse crossing into another mount */
};

/*
 * Opens `path` (relative; "" or "." is dirfd itself) beneath dirfd with open(2)
 * `flags` (O_CLOEXEC is always added; O_NOFOLLOW is added with SAFEOPEN_NO_SYMLINKS)
 * and `mode` for O_CREAT. Returns the fd, or -1 with errno set as above.
 */
int safeopen_beneath(int dirfd, const char *path, int flags, mode_t mode, unsigned opts);

/*
 * The mount id of the open fd (statx STATX_MNT_ID; 0 where the kernel lacks it, then
 * callers fall back to st_dev). Returns 0 and fills *id, or -1 with errno.
 */
int safeopen_mnt_id(int fd, unsigned long long *id);

/* Test hook: 1 forces the walk, as if openat2 returned ENOSYS. */
void safeopen_force_fallback(int on);

/* 1 once the walk is in use for good (the kernel or a filter refused openat2). */
int safeopen_using_fallback(void);

#endif
