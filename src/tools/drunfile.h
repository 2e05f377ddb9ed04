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

#include "store/store.h"

#define DRUNFILE_MAX      ((size_t)256 << 20) /* largest .drun file read */
#define DRUNFILE_JSON_MAX ((size_t)1 << 30)   /* largest JSON it may expand to */

/* 1 if the bytes start with the .drun magic "DRUN". */
int drunfile_is_drun(const void *data, size_t len);

/*
 * Imports the .drun bytes as snapshot `name` (source `source`, e.g. the file stem),
 * in one transaction: on any error (bad magic, damaged zstd, bad JSON, a missing
 * key, a blob index out of range, an invalid path) nothing is stored and err says
 * what and where. Must be called outside a bracket. Fills *out (may be NULL).
 */
int drunfile_import(struct store *st, const void *data, size_t len, const char *name,
                    const char *source, struct store_snapshot *out, struct err *err);

/*
 * Imports the snapshot file at `path`, whichever kind it is: an original drun .drun file
 * (told by its magic) or one of our SQLite exports (store_snapshot_import: every blob's
 * hash checked). Only a regular file is opened. The snapshot is named `name`; with NULL,
 * an export keeps the name it was exported with, and a .drun file, or an export whose name
 * is taken, gets "<file stem>-<UTC time>". Nothing is kept on any error. Fills *out.
 */
int drunfile_import_path(struct store *st, const char *path, const char *name,
                         struct store_snapshot *out, struct err *err);

/* Reads a whole file (at most DRUNFILE_MAX bytes) into out. */
int drunfile_read(const char *path, struct buf *out, struct err *err);

#endif
