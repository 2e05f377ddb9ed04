/*
 * host_int.h - shared between the files of the host module only.
 */
#ifndef DRUN_HOST_HOST_INT_H
#define DRUN_HOST_HOST_INT_H

#include <sys/stat.h>
#include <sys/types.h>

#include "host/host.h"

enum { HOST_TREE_RUNTIME = 1, HOST_TREE_SNAPSHOTS = 2 };

/* 1 if path is root or beneath it, by whole components. */
int host_path_under(const char *path, const char *root);

/*
 * The own file or tree the resolved path is (or is beneath; with holds, also one that
 * lies beneath the path), or NULL. Trees of kind skip_kind are ignored (-1: none).
 */
const char *host_own_path_match(const char *resolved, int holds, int skip_kind);

/*
 * The own file or tree that the entry `name` in the directory (pdev, pino) is, by
 * parent + name or by the entry's lstat `sb` (may be NULL), or NULL.
 */
const char *host_own_match(dev_t pdev, ino_t pino, const char *name, const struct stat *sb,
                           int skip_kind);

/* Fills err for a walk's errno (ELOOP, ENOTDIR, EXDEV: ERR_DENIED) and returns -1. */
int host_walk_error(const char *shown, int code, struct err *err);

/* Checks a rel path (see host.h); allow_empty admits "". */
int host_check_rel(const char *rel, int allow_empty, struct err *err);

#endif
