/*
 * workspace.h - manifests, and the workspace directory a session's commands run in.
 *
 * A manifest is the tree of one checkpoint: a list of entries sorted by path bytes,
 * each a normal-form workspace key (util/pathkey.h) with a type, a size and the
 * SHA-256 of a blob in the store. File contents never live in a manifest; they live
 * in the store (as blobs) and in the workspace directory. Only empty directories have
 * entries of their own; a non-empty directory is implied by its children, so there is
 * exactly one manifest (and one encoding, one hash) for a given tree.
 *
 * A workspace directory (struct ws_dir) is a real directory under the private runtime
 * root. Before each command the session syncs it to the head manifest, writing only
 * entries that differ from what its stat cache says is there; after the command it
 * rescans it into a new manifest, re-reading only entries whose stat changed. After a
 * failed or timed-out command it does a full re-sync, which trusts nothing.
 *
 * Every path operation is relative to the root's fd and never follows a symlink
 * (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or an O_NOFOLLOW walk per component),
 * so a link planted by a command cannot redirect a write or delete outside the root.
 * docs/workspace.md describes the format, the algorithms and the threats.
 *
 * Blob contents move through struct ws_blobs, callbacks the session layer wires to
 * store_blob_get/put, so this module does not depend on the store.
 *
 * Threads: a manifest or a ws_dir is used by one thread at a time.
 */
#ifndef DRUN_WORKSPACE_H
#define DRUN_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"

/* ---- manifests ------------------------------------------------------------------ */

enum ws_type {
    WS_FILE = 1,    /* regular file, mode 0644 */
    WS_EXEC = 2,    /* regular file with an execute bit, mode 0755 */
    WS_SYMLINK = 3, /* symlink; size = target length, hash names a blob of the target */
    WS_DIR = 4,     /* empty directory; size 0, hash all zero */
};

struct ws_entry {
    char *path;    /* normal-form key, NUL-terminated; owned by the manifest */
    uint64_t size; /* bytes of content (files) or of the link target (symlinks) */
    uint8_t hash[HASH_LEN];
    int type; /* enum ws_type */
};

struct ws_manifest; /* sorted array of ws_entry; see ws_int.h */

#define WS_MANIFEST_MAGIC "DRM1"

/* Makes an empty manifest; free with ws_manifest_free(). ERR_NOMEM only. */
int ws_manifest_new(struct ws_manifest **out, struct err *err);

/* Frees m and its entries; NULL is a no-op. */
void ws_manifest_free(struct ws_manifest *m);

/* Makes a deep copy; the caller frees it. */
int ws_manifest_clone(const struct ws_manifest *m, struct ws_manifest **out, struct err *err);

/* Number of entries (all types). */
size_t ws_manifest_count(const struct ws_manifest *m);

/* The i-th entry in path order (i < count); borrowed until m is next modified. */
const struct ws_entry *ws_manifest_at(const struct ws_manifest *m, size_t i);

/* The entry at `path` by binary search, or NULL; borrowed until m is next modified. */
const struct ws_entry *ws_manifest_get(const struct ws_manifest *m, const char *path);

/*
 * Adds or replaces the entry at `path` (which must be in normal form: ERR_INVAL
 * otherwise). For WS_DIR, size and hash are ignored (hash may be NULL), and adding a
 * directory that already has entries under it changes nothing. Adding an entry below
 * an empty-directory entry drops that entry (the directory is now implied). A file or
 * symlink that would sit above or below another non-directory entry ("a" and "a/b")
 * is refused with ERR_INVAL naming both keys, and m is left unchanged.
 */
int ws_manifest_set(struct ws_manifest *m, const char *path, int type, uint64_t size,
                    const uint8_t hash[HASH_LEN], struct err *err);

/* Removes the entry at `path`; ERR_NOTFOUND if there is none. */
int ws_manifest_remove(struct ws_manifest *m, const char *path, struct err *err);

/* Total logical bytes: the sum of the sizes of WS_FILE and WS_EXEC entries. */
uint64_t ws_manifest_bytes(const struct ws_manifest *m);

/* Number of WS_FILE, WS_EXEC and WS_SYMLINK entries (directories not counted). */
size_t ws_manifest_files(const struct ws_manifest *m);

/*
 * Appends the encoding ("DRM1", little-endian; docs/workspace.md) to out. ERR_TOOBIG
 * or ERR_NOMEM from out.
 */
int ws_manifest_encode(const struct ws_manifest *m, struct buf *out, struct err *err);

/*
 * Decodes `len` bytes into a new manifest (caller frees). Every length, type, key,
 * the sort order and the absence of conflicts are checked; a truncated, malformed or
 * non-canonical encoding is ERR_CORRUPT, a future format version ERR_VERSION. Never
 * reads outside [data, data+len).
 */
int ws_manifest_decode(const void *data, size_t len, struct ws_manifest **out, struct err *err);

/*
 * The store's gc callback (store_manifest_refs_fn): decodes the manifest and calls
 * ref() once for each blob hash it names (files, exec files, symlink targets). ctx is
 * unused. ERR_CORRUPT as ws_manifest_decode.
 */
int ws_manifest_refs(void *ctx, const void *manifest, size_t len,
                     void (*ref)(void *refctx, const uint8_t hash[32]), void *refctx,
                     struct err *err);

enum ws_change { WS_ADDED = 1, WS_MODIFIED = 2, WS_REMOVED = 3 };

struct ws_diff_counts {
    size_t added;
    size_t modified; /* same path; type (hence mode), size or content differs */
    size_t removed;
};

/*
 * Compares `from` with `to` in path order. For each changed path calls fn (if not
 * NULL) with the change and the old/new entries (NULL where absent); fn returns 0 to
 * go on or -1 (having set err) to stop. Fills counts (may be NULL).
 */
typedef int (*ws_diff_fn)(void *ctx, int change, const struct ws_entry *old_entry,
                          const struct ws_entry *new_entry, struct err *err);
int ws_manifest_diff(const struct ws_manifest *from, const struct ws_manifest *to, ws_diff_fn fn,
                     void *ctx, struct ws_diff_counts *counts, struct err *err);

/* ---- blob access ---------------------------------------------------------------- */

/*
 * How the workspace reads and writes blob contents. get appends the blob's bytes to
 * out (whose max bounds it); put stores bytes and returns their SHA-256 in hash. Both
 * return 0 or -1 with err set (ERR_NOTFOUND, ERR_CORRUPT, ERR_TOOBIG, ...).
 *
 * write_fd is optional (NULL: get is used for everything). When set, a sync writes a
 * regular file of WS_STREAM_MIN bytes or more through it instead of get, so a big file
 * never sits in memory: it writes the blob's bytes to fd in pieces, with get's checks
 * (the blob must hold exactly `size` bytes, which it checks before writing anything,
 * and match its hash). On failure some bytes may be in fd already: the sync removes the
 * file, so either path leaves the same thing behind (nothing at the name).
 *
 * put_fd is optional too (NULL: put is used for everything). When set, a rescan stores
 * a regular file of WS_STREAM_MIN bytes or more (by its stat) through it instead of
 * reading it into memory: it reads fd from its current offset to end of file in pieces
 * and stores what it read, filling hash with the SHA-256 of exactly the bytes stored and
 * *size with their count (the file may have changed since it was stat'ed; the stored
 * bytes are what count). More than `max` bytes: ERR_TOOBIG, nothing stored. Other
 * failures as put (the store's blob cap: ERR_TOOBIG; a read error: ERR_IO), with
 * nothing stored.
 * Initialize with designated initializers: fields may be added.
 */
struct ws_blobs {
    void *ctx;
    int (*get)(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err);
    int (*put)(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err);
    int (*write_fd)(void *ctx, const uint8_t hash[HASH_LEN], uint64_t size, int fd,
                    struct err *err);
    int (*put_fd)(void *ctx, int fd, uint64_t max, uint8_t hash[HASH_LEN], uint64_t *size,
                  struct err *err);
};

/* Files this big or bigger go through ws_blobs.write_fd (sync) and ws_blobs.put_fd
 * (rescan) when they are set. */
#define WS_STREAM_MIN ((uint64_t)1 << 20)

/* ---- the workspace directory ------------------------------------------------------ */

struct ws_dir;

/*
 * Opens the workspace directory at `path`, creating it 0700 if it is missing (its
 * parent must exist). A symlink at `path` is refused. The directory starts with an
 * empty manifest and no stat cache, so the first sync should be a full one
 * (ws_dir_resync) unless the directory is known to be empty. Caller closes it.
 */
int ws_dir_open(const char *path, struct ws_dir **out, struct err *err);

/*
 * ws_dir_open, and when bounds are enabled (ws_bound_enable) mounts a tmpfs of
 * `bound_bytes` on the directory first, so nothing written into it, by a sync or by a
 * command in a sandbox, can exceed that many bytes (writes fail with ENOSPC). The mount
 * goes when the directory is closed. bound_bytes 0: no bound.
 */
int ws_dir_open_bounded(const char *path, uint64_t bound_bytes, struct ws_dir **out,
                        struct err *err);

/* 1 if the last rescan left entries on disk it could not store (until a resync). */
int ws_dir_skipped(const struct ws_dir *d);

/*
 * Grows d's bounding tmpfs to `bytes` if it has one and it is smaller (a head that needs
 * more pages than the limit: many small files, or a raised max_workspace_mb). Never
 * shrinks it. 0 or -1.
 */
int ws_dir_bound_grow(struct ws_dir *d, uint64_t bytes, struct err *err);

/*
 * What m takes on a size-capped tmpfs, in bytes: the whole pages of each file's content
 * (an empty file none; a symlink one only if its target is 128 bytes or more) plus 1 KiB
 * per entry for its inode (the mount allows one inode per KiB of its size). Exact, never
 * more: the bound grows to fit a head, so an overestimate would let it grow for free.
 */
uint64_t ws_bound_need(const struct ws_manifest *m);

/* The size of d's bounding tmpfs, or 0 if it has none. */
uint64_t ws_dir_bound(const struct ws_dir *d);

/* Bytes a bounding tmpfs holds beyond the workspace limit (slack for the last partial write,
 * so a command that filled it has exceeded the limit by construction). */
#define WS_BOUND_SLACK ((uint64_t)1 << 20)

/*
 * Allows ws_dir_open_bounded to mount. Only cmd/ calls it, after moving the process into
 * a mount namespace of its own (so the mounts are private and die with the process).
 */
void ws_bound_enable(int on);

/* 1 if workspaces are bounded by a mount (ws_bound_enable was called with 1). */
int ws_bound_enabled(void);

/*
 * ws_dir_open for a directory that belongs to another host user: a root daemon's
 * sandbox runs as uid/gid (never root), so its workspace, and every entry a sync creates
 * in it, belongs to that user. A directory found owned by anyone else is emptied and
 * given to uid/gid (nothing a previous owner left is trusted). Only root may name a
 * uid other than its own; for anyone else this is ws_dir_open_bounded. A bounding tmpfs
 * (bound_bytes, as ws_dir_open_bounded) belongs to uid/gid too.
 */
int ws_dir_open_as(const char *path, uint64_t bound_bytes, uint32_t uid, uint32_t gid,
                   struct ws_dir **out, struct err *err);

/* 1 if d was opened by ws_dir_open_as(path, uid, gid) (the same effective owner). */
int ws_dir_owned_by(const struct ws_dir *d, uint32_t uid, uint32_t gid);

/* Removes the directory tree at absolute `path` (links never followed). */
int ws_remove_tree(const char *path, struct err *err);

/* Closes the fd and frees the memory; leaves the files. NULL is a no-op. */
void ws_dir_close(struct ws_dir *d);

/* Removes everything inside the directory and the directory itself, then closes. */
int ws_dir_destroy(struct ws_dir *d, struct err *err);

/* The manifest the directory was last synced or scanned to; borrowed from d. */
const struct ws_manifest *ws_dir_manifest(const struct ws_dir *d);

/* The path the directory was opened with; borrowed from d. */
const char *ws_dir_path(const struct ws_dir *d);

/*
 * Incremental sync: makes the directory equal to m, trusting the stat cache: entries
 * that m and the last-synced manifest agree on are not touched; others are written
 * (parents created, files via blobs->get or, from WS_STREAM_MIN bytes, blobs->write_fd,
 * mode 0644/0755, symlinks, empty dirs) or
 * removed (directories recursively, links never followed). Use ws_dir_resync when
 * anything besides this module may have changed the directory in an unknown way.
 * On failure the cache is invalidated, so the next sync must be a resync.
 */
int ws_dir_sync(struct ws_dir *d, const struct ws_manifest *m, const struct ws_blobs *blobs,
                struct err *err);

/*
 * Full re-sync: compares every entry on disk with m (stat, and content where the
 * stat cannot vouch for it), fixes what differs, removes whatever m does not name.
 * Used after a failed or timed-out command and after ws_dir_open.
 */
int ws_dir_resync(struct ws_dir *d, const struct ws_manifest *m, const struct ws_blobs *blobs,
                  struct err *err);

struct ws_limits {
    uint64_t max_bytes;   /* largest total logical bytes; 0: no limit */
    uint64_t max_entries; /* most manifest entries (files, links, empty dirs); 0: no limit */
};

struct ws_skip {
    char *path;      /* printable form (pathkey_quote); owned by the report */
    const char *why; /* "fifo", "socket", "device", "invalid name", "path too long" */
};

#define WS_SKIP_LIST_MAX 64 /* skipped entries listed by name; the rest only counted */

struct ws_scan_report {
    struct ws_skip *skipped; /* the first WS_SKIP_LIST_MAX of them */
    size_t nskipped;         /* entries in `skipped` */
    size_t skipped_total;    /* all entries skipped */
    size_t files_read;       /* files and links read and put through blobs */
    size_t files_reused;     /* taken from the stat cache without reading */
};

/* Frees the skip list; the report is zeroed. Safe on a zeroed report. */
void ws_scan_report_release(struct ws_scan_report *r);

/*
 * Walks the directory (never following symlinks) into a new manifest, re-reading
 * only entries whose (type, mode, size, mtime, ctime, inode, device) differ from the
 * stat cache or whose times fall within the racy window of the last sync/scan. A file
 * re-read is stored through blobs->put, or from WS_STREAM_MIN bytes through
 * blobs->put_fd when it is set (streamed: never whole in memory).
 * FIFOs, sockets, devices and entries whose names are not valid keys are skipped and
 * listed in report (may be NULL). Passing a limit stops the scan with ERR_TOOBIG
 * naming it. On success ws_dir_manifest(d) is the new manifest; on failure the
 * previous manifest stays and the cache is invalidated.
 */
int ws_dir_rescan(struct ws_dir *d, const struct ws_limits *limits, const struct ws_blobs *blobs,
                  struct ws_scan_report *report, struct err *err);

struct ws_dir_stats {
    uint64_t files_written;      /* files and links written by sync/resync */
    uint64_t dirs_made;          /* directories created */
    uint64_t removed;            /* paths removed (a directory tree counts once) */
    uint64_t removed_unstorable; /* of those, entries no checkpoint can hold (resync) */
    uint64_t files_read;         /* files and links read by rescan/resync */
    uint64_t files_reused;       /* entries taken from the stat cache by rescan */
    size_t mem_bytes;            /* heap held by d: manifest, keys, cache (estimate) */
};

/* Cumulative counters since ws_dir_open, and the current memory estimate. */
void ws_dir_stats(const struct ws_dir *d, struct ws_dir_stats *out);

/* ---- the runtime directory ------------------------------------------------------- */

/*
 * Makes or checks the private runtime root and appends its path to out: `configured`
 * if given, else $XDG_RUNTIME_DIR/drun, else /tmp/drun-$UID. The directory is created
 * 0700; an existing one must be a real directory (not a symlink) owned by this user
 * and not group- or world-writable, else ERR_DENIED saying what is wrong. Its mode is
 * tightened to 0700 if it was looser.
 */
int ws_runtime_dir(const char *configured, struct buf *out, struct err *err);

/*
 * The runtime root's mode: 0700, or 0711 for root, whose sandboxes run as another user
 * that must pass through it (search only: no listing) to reach its own workspace.
 */
#define WS_RUNTIME_MODE(euid) ((euid) == 0 ? 0711 : 0700)

/*
 * This process's own directory under the runtime root, `root`/pid-`pid`: made (mode as
 * the root's) and appended to out. Workspaces go inside it, so what a process leaves
 * when it is killed is found by its pid (ws_runtime_sweep).
 */
int ws_runtime_proc_dir(const char *root, pid_t pid, struct buf *out, struct err *err);

/*
 * Removes the pid-N directories under `root` whose process is gone (not a live process
 * started before the directory was made; util/proc.h), never this process's or a live
 * one's. Returns how many were removed; failures are logged by the caller's count only.
 */
int ws_runtime_sweep(const char *root);

/*
 * Appends `runtime`/ws-`session_id` to out. The id must be 1..64 characters of
 * [0-9a-z] (ERR_INVAL otherwise), so it can never name a path outside the root.
 */
int ws_runtime_session_path(const char *runtime, const char *session_id, struct buf *out,
                            struct err *err);

#endif
