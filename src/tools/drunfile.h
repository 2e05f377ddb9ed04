/*
 * drunfile.h - import of the original drun's `.drun` snapshot files.
 *
 * A .drun file is "DRUN" + zstd-compressed JSON (reference §6.1): checkpoints with
 * their files as indexes into a shared `blobs` array, stdout/stderr, labels, steps,
 * the head index, the chat log, overlays and the fork parent. The store unpacks the
 * bytes (store_drun_unpack); this module decodes the JSON with cJSON, checks every
 * key, type and index, stores the blobs and manifests, and hands the store plain
 * values (store_snapshot_insert). Used by the session_restore tool and drun-admin.
 */
#ifndef DRUN_TOOLS_DRUNFILE_H
#define DRUN_TOOLS_DRUNFILE_H

#include <stddef.h>
#include <sys/types.h>

#include "policy/policy.h"
#include "store/store.h"

/*
 * The memory budget of one import. A .drun file is parsed whole, so what bounds the
 * daemon's memory is the expanded JSON (decompression stops past DRUNFILE_JSON_MAX)
 * and the number of values cJSON would allocate a node for, counted on the text
 * before it is parsed, with the nesting depth (the format needs 5 levels). With these
 * caps an import costs at most a few hundred MiB whatever the file claims; a file over
 * any of them is refused with a message naming the cap, and nothing is stored.
 */
#define DRUNFILE_JSON_MAX        ((size_t)32 << 20) /* largest JSON a .drun may expand to */
#define DRUNFILE_MAX             (DRUNFILE_JSON_MAX + ((size_t)1 << 20)) /* largest file read */
#define DRUNFILE_VALUES_MAX      1000000 /* JSON values (cJSON nodes) in one .drun */
#define DRUNFILE_DEPTH_MAX       16      /* nesting of arrays and objects */
#define DRUNFILE_CHECKPOINTS_MAX 10000   /* checkpoints in one .drun */
#define DRUNFILE_OVERLAYS_MAX    10000   /* overlays in one snapshot file */
#define DRUNFILE_DROPPED_MAX     64      /* dropped overlays listed; the rest are counted */
#define DRUNFILE_EXPORT_MAX      ((off_t)16 << 30) /* largest export file (SQLite) imported */

struct cJSON;

/*
 * The judge of a snapshot's overlays on import and restore (host_check_overlay under
 * the policy in force, drun's own files as registered with host_own_add_*). Overlays it
 * refuses are dropped, never bound, and reported: the first DRUNFILE_DROPPED_MAX as
 * {key, host_path, reason} objects in `dropped`, all of them in `total`.
 */
struct drunfile_vet {
    const struct policy *p; /* borrowed */
    struct cJSON *dropped;  /* a cJSON array the caller owns; NULL = count only */
    size_t total;           /* overlays dropped so far */
};

/* A store_overlay_keep_fn over struct drunfile_vet: 1 keeps the overlay, 0 drops it. */
int drunfile_overlay_keep(void *vet, const char *key, const char *host_path);

/* 1 if the bytes start with the .drun magic "DRUN". */
int drunfile_is_drun(const void *data, size_t len);

/*
 * Imports the .drun bytes as snapshot `name` (source `source`, e.g. the file stem),
 * in one transaction: on any error (bad magic, damaged zstd, bad JSON, a missing
 * key, a blob index out of range, an invalid path) nothing is stored and err says
 * what and where. Must be called outside a bracket. Fills *out (may be NULL). Its
 * overlays pass through vet (NULL keeps them all, for tests: restore re-checks).
 */
int drunfile_import(struct store *st, const void *data, size_t len, const char *name,
                    const char *source, struct drunfile_vet *vet, struct store_snapshot *out,
                    struct err *err);

/*
 * Imports the snapshot file open at fd (a regular file; `path` names it in messages and
 * gives the name's stem), whichever kind it is: an original drun .drun file (told by its
 * magic) or one of our SQLite exports (store_snapshot_import, reading the very file fd
 * holds: every blob's hash checked). Only fd is read, never the path again, so a file
 * swapped for a FIFO or a link after it was opened changes nothing. The snapshot is named
 * `name`; with NULL, an export keeps the name it was exported with, and a .drun file, or
 * an export whose name is taken, gets "<file stem>-<UTC time>". Overlays go through vet
 * (required). Nothing is kept on any error. Fills *out. Does not close fd.
 */
int drunfile_import_fd(struct store *st, int fd, const char *path, const char *name,
                       struct drunfile_vet *vet, struct store_snapshot *out, struct err *err);

/*
 * Opens the operator's snapshot file `path` (drun-admin's argument; links followed) once,
 * O_NONBLOCK so a FIFO cannot block, and checks with fstat that it is a regular file.
 * Returns the fd (caller closes) or -1.
 */
int drunfile_open(const char *path, struct err *err);

/* Reads fd to its end (at most DRUNFILE_MAX bytes) into out; `path` names it in errors. */
int drunfile_read_fd(int fd, const char *path, struct buf *out, struct err *err);

#endif
