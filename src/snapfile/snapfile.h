/*
 * snapfile.h - snapshot files: writing them under snapshots_dir, listing them, and
 * importing them (our SQLite exports and the original drun's `.drun` files).
 *
 * Every snapshot file is hostile input: an agent can write one into its workspace and
 * export it, or name any file it can reach. So a file is opened once and read only
 * through that fd; a .drun file is parsed under a memory budget (below) with every key,
 * type and index checked; an export is copied to a private file and every blob's hash
 * verified on import; and a snapshot's overlays (host directories it would bind) pass
 * through the current policy's judge, which drops those session_mount would refuse now.
 *
 * A .drun file is "DRUN" + zstd-compressed JSON (reference §6.1): checkpoints with their
 * files as indexes into a shared `blobs` array, stdout/stderr, labels, steps, the head
 * index, the chat log, overlays and the fork parent. The store unpacks the bytes
 * (store_drun_unpack); snapfile_drun.c decodes the JSON with cJSON, stores the blobs and
 * manifests, and hands the store plain values (store_snapshot_insert).
 *
 * Results are plain structs: tools/ and drun-admin build their own JSON or text from
 * them. Used by the snapshot tools and drun-admin. Errors: ERR_DENIED for a path the
 * rules refuse, ERR_INVAL / ERR_TOOBIG / ERR_CORRUPT for a bad argument or file (the
 * message names the file and what is wrong), ERR_NOTFOUND, ERR_IO, ERR_NOMEM.
 */
#ifndef DRUN_SNAPFILE_SNAPFILE_H
#define DRUN_SNAPFILE_SNAPFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "policy/policy.h"
#include "store/store.h"

/*
 * The memory budget of one import. A .drun file is parsed whole, so what bounds the
 * daemon's memory is the expanded JSON (decompression stops past SNAPFILE_JSON_MAX)
 * and the number of values cJSON would allocate a node for, counted on the text
 * before it is parsed, with the nesting depth (the format needs 5 levels). With these
 * caps an import costs at most a few hundred MiB whatever the file claims; a file over
 * any of them is refused with a message naming the cap, and nothing is stored.
 */
#define SNAPFILE_JSON_MAX        ((size_t)32 << 20) /* largest JSON a .drun may expand to */
#define SNAPFILE_MAX             (SNAPFILE_JSON_MAX + ((size_t)1 << 20)) /* largest file read */
#define SNAPFILE_VALUES_MAX      1000000 /* JSON values (cJSON nodes) in one .drun */
#define SNAPFILE_DEPTH_MAX       16      /* nesting of arrays and objects */
#define SNAPFILE_CHECKPOINTS_MAX 10000   /* checkpoints in one .drun */
#define SNAPFILE_OVERLAYS_MAX    10000   /* overlays in one snapshot file */
#define SNAPFILE_DROPPED_MAX     64      /* dropped overlays listed; the rest are counted */
#define SNAPFILE_EXPORT_MAX      ((off_t)16 << 30) /* largest export file (SQLite) imported */
#define SNAPFILE_LIST_MAX        1000              /* snapshot files snapfile_list reports */
#define SNAPFILE_META_MAX        65536             /* largest .drun.meta read */
#define SNAPFILE_PATH_MAX        4096 /* longest snapshot path argument, with its NUL */

/* ---- the overlay judge ------------------------------------------------------------- */

/* One overlay the judge refused: never bound. */
struct snapfile_dropped {
    char *key;
    char *host_path;
    char reason[ERR_MSG_MAX];
};

/*
 * The judge of a snapshot's overlays on import and restore (host_check_overlay under
 * the policy in force, drun's own files as registered with host_own_add_*). Overlays it
 * refuses are dropped, never bound, and reported: the first SNAPFILE_DROPPED_MAX in
 * dropped[0..n_dropped), all of them in `total`. Set up with snapfile_vet_init.
 */
struct snapfile_vet {
    const struct policy *p; /* borrowed */
    struct snapfile_dropped dropped[SNAPFILE_DROPPED_MAX];
    size_t n_dropped;
    size_t total; /* overlays dropped so far */
};

/* Starts an empty judge under p (borrowed; must outlive vet). */
void snapfile_vet_init(struct snapfile_vet *vet, const struct policy *p);

/* Frees the strings of vet's dropped overlays. */
void snapfile_vet_release(struct snapfile_vet *vet);

/* A store_overlay_keep_fn over struct snapfile_vet: 1 keeps the overlay, 0 drops it. */
int snapfile_overlay_keep(void *vet, const char *key, const char *host_path);

/* ---- importing --------------------------------------------------------------------- */

/* 1 if the bytes start with the .drun magic "DRUN". */
int snapfile_is_drun(const void *data, size_t len);

/* 1 if the bytes start with SQLite's file header (one of our exports, at least 16 bytes). */
int snapfile_is_export(const void *data, size_t len);

/*
 * Imports the .drun bytes as snapshot `name` (source `source`, e.g. the file stem),
 * in one transaction: on any error (bad magic, damaged zstd, bad JSON, a missing
 * key, a blob index out of range, an invalid path) nothing is stored and err says
 * what and where. Must be called outside a bracket. Fills *out (may be NULL). Its
 * overlays pass through vet (NULL keeps them all, for tests: restore re-checks).
 */
int snapfile_import(struct store *st, const void *data, size_t len, const char *name,
                    const char *source, struct snapfile_vet *vet, struct store_snapshot *out,
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
int snapfile_import_fd(struct store *st, int fd, const char *path, const char *name,
                       struct snapfile_vet *vet, struct store_snapshot *out, struct err *err);

/*
 * Opens the operator's snapshot file `path` (drun-admin's argument; links followed) once,
 * O_NONBLOCK so a FIFO cannot block, and checks with fstat that it is a regular file.
 * Returns the fd (caller closes) or -1.
 */
int snapfile_open(const char *path, struct err *err);

/* Reads fd to its end (at most SNAPFILE_MAX bytes) into out; `path` names it in errors. */
int snapfile_read_fd(int fd, const char *path, struct buf *out, struct err *err);

/* ---- snapshots_dir: the agent's door ---------------------------------------------- */

/*
 * Checks an agent's snapshot path against root (snapshots_dir) as the reference does (no
 * ".." component; under root component-wise, not canonicalized) and writes the remainder
 * (components joined by '/') into rel. Returns 0, or -1 with ERR_DENIED (not under root:
 * the reference's snapshot_denied), ERR_TOOBIG (too long) or ERR_INVAL (root itself).
 */
int snapfile_rel(const char *root, const char *path, char *rel, size_t size, struct err *err);

/*
 * Exports snapshot `name` to rel (from snapfile_rel) beneath root, creating root (0700)
 * and the directories of rel as needed, atomically: the store exports to a hidden temp
 * name at the top of the resolved root, and renameat moves it over the target in the
 * directory fd a no-link walk opened, so a link planted inside snapshots_dir cannot send
 * the file elsewhere, and a failed export never leaves a half file or destroys the
 * previous one. *bytes receives the file's size.
 */
int snapfile_write(struct store *st, const char *name, const char *root, const char *rel,
                   int64_t *bytes, struct err *err);

/* One snapshot file in snapshots_dir. */
struct snapfile_entry {
    char *path;               /* dir/name */
    const char *kind;         /* "export" or "drun" (static) */
    int64_t size;             /* bytes */
    int64_t mtime_ms;         /* modification time, ms since the epoch */
    char *label;              /* from a .drun's .drun.meta, or NULL */
    int64_t checkpoint_count; /* from a .drun's .drun.meta, or -1 */
};

/*
 * Lists the snapshot files of dir (told by their first bytes, never by name; hidden
 * names skipped), sorted by name, with each .drun file's .drun.meta keys. A missing dir
 * lists none. Only regular files are opened, without following a link. ERR_TOOBIG past
 * SNAPFILE_LIST_MAX files (or four times as many entries). Caller frees *out with
 * snapfile_list_free.
 */
int snapfile_list(const char *dir, struct snapfile_entry **out, size_t *n, struct err *err);

void snapfile_list_free(struct snapfile_entry *list, size_t n);

/*
 * The read door for session_restore's path (the reference reads any host path: its
 * section 14, item 18). A snapshot file is read from under snapshots_dir, or through the
 * same door as session_mount (mount_allowlist after resolving links, then /proc, /sys,
 * /dev and drun's own files refused): restore never reads what a mount could not. The
 * file is then opened once with host_open_snapshot_file. Returns the fd (caller closes);
 * the resolved path goes to shown.
 */
int snapfile_open_restore(const struct policy *p, const char *path, char *shown, size_t size,
                          struct err *err);

/*
 * Restores snapshot `name` as a new session claimed by process pid (start time `start`),
 * its overlays judged again by vet under the policy in force now (a DB snapshot may have
 * been taken under a wider one), all in one transaction, refused with ERR_BUSY when
 * max_sessions sessions are open already. Fills *out (store_session_release).
 */
int snapfile_restore(struct store *st, const char *name, int64_t max_sessions, pid_t pid,
                     int64_t start, struct snapfile_vet *vet, struct store_session *out,
                     struct err *err);

/* "<session_id>-close-<UTC time, digits only>": the name of a snapshot_on_close snapshot. */
void snapfile_close_name(const char *session_id, char *out, size_t size);

#endif
