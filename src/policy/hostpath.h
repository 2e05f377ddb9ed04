/*
 * hostpath.h - writing and deleting host files beneath a directory without ever
 * following a symlink.
 *
 * The write doors (session_export, delete_from_host, snapshot export) first ask
 * policy_hostpath_check() whether a path is allowed, which answers for one moment.
 * Between that answer and the write, anything on the host (or an agent's own earlier
 * export) may replace a directory with a symlink to /etc. So the write itself starts
 * from a directory fd of the allowlisted root and walks the remaining components with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or, where the kernel lacks openat2
 * (ENOSYS), one component at a time with openat(O_NOFOLLOW | O_DIRECTORY). Every step
 * is relative to the fd of the step before, so a swapped-in link makes the walk fail
 * (ERR_DENIED) instead of leading elsewhere; no byte can land outside the root.
 *
 * `rel` arguments are relative to the root fd: components separated by '/', none of
 * them empty, "." or "..", no leading '/', no control characters. Functions return 0
 * or -1 and fill err: ERR_DENIED for a symlink or a non-directory on the way or a
 * refused target, ERR_INVAL for a malformed rel, ERR_IO for other system errors.
 */
#ifndef DRUN_POLICY_HOSTPATH_H
#define DRUN_POLICY_HOSTPATH_H

#include <stddef.h>
#include <sys/types.h>

#include "util/err.h"

/*
 * Opens the absolute directory `root` (e.g. policy_hostpath.root) for the walks below,
 * refusing any symlink in it. Returns an O_RDONLY|O_DIRECTORY|O_CLOEXEC fd the caller
 * closes, or -1. Refuses "/" itself: no door writes relative to the whole host.
 */
int hostpath_open_root(const char *root, struct err *err);

/*
 * Opens the directory rel beneath rootfd ("" = a new fd for rootfd itself), creating
 * missing components with `mode` (mkdir -p) when create is 1. Returns the fd or -1.
 */
int hostpath_open_dir(int rootfd, const char *rel, int create, mode_t mode, struct err *err);

/* mkdir -p of rel beneath rootfd. */
int hostpath_mkdirs(int rootfd, const char *rel, mode_t mode, struct err *err);

/*
 * Writes `len` bytes to rel beneath rootfd atomically: missing parents are made (0755),
 * the data goes to a temp name in the same directory (O_EXCL, so a planted name is
 * never followed), is fsynced, gets `mode` (permission bits only) and is renamed over
 * rel. An existing symlink at rel is replaced as a link, never written through.
 */
int hostpath_write_file(int rootfd, const char *rel, const void *data, size_t len, mode_t mode,
                        struct err *err);

/* As hostpath_write_file, copying from srcfd to its end (at most max bytes, else ERR_TOOBIG). */
int hostpath_write_fd(int rootfd, const char *rel, int srcfd, off_t max, mode_t mode,
                      struct err *err);

/* Creates (or atomically replaces) a symlink at rel pointing at target. */
int hostpath_symlink(int rootfd, const char *rel, const char *target, struct err *err);

struct hostpath_removed {
    int missing;  /* the path did not exist: nothing done */
    size_t files; /* files, links and other non-directories removed */
    size_t dirs;  /* directories removed */
};

/*
 * Removes rel beneath rootfd without following links: a symlink is removed as a link;
 * a directory is removed recursively, refusing to enter another filesystem (st_dev
 * differs) or to go deeper than 256 levels. rel must be non-empty (the root itself is
 * never removed). A missing path is not an error (out->missing = 1).
 */
int hostpath_remove(int rootfd, const char *rel, struct hostpath_removed *out, struct err *err);

/* Test hook: 1 forces the per-component fallback, as if openat2 returned ENOSYS. */
void hostpath_force_fallback(int on);

#endif
