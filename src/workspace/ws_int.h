/*
 * ws_int.h - the workspace module's private declarations. Only the workspace module (ws_*.c) and
 * the module's own unit tests include this file.
 */
#ifndef DRUN_WS_INT_H
#define DRUN_WS_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "workspace/workspace.h"

/* The manifest: entries sorted by path bytes, no duplicates, no conflicts. */
struct ws_manifest {
    struct ws_entry *v;
    size_t n;
    size_t cap;
};

/* Index of the first entry whose path is >= p[0..n) followed by `c` (c < 0: nothing). */
size_t ws_manifest_lower(const struct ws_manifest *m, const char *p, size_t n, int c);

/* Index of the entry equal to p[0..n), or (size_t)-1. */
size_t ws_manifest_find(const struct ws_manifest *m, const char *p, size_t n);

/* 1 if some entry's path starts with p[0..n) + "/". */
int ws_manifest_has_under(const struct ws_manifest *m, const char *p, size_t n);

/*
 * Appends an entry without keeping the order (for the scanner and the decoder); path
 * is copied. ws_manifest_finish() then sorts and checks the whole manifest.
 */
int ws_manifest_push(struct ws_manifest *m, const char *path, size_t len, int type, uint64_t size,
                     const uint8_t hash[HASH_LEN], struct err *err);

/*
 * Sorts (if `sort`) and checks order, duplicates, file/dir conflicts and that
 * directory entries have no children. `code` is the error code to use (ERR_CORRUPT
 * when decoding, ERR_INTERNAL for the scanner).
 */
int ws_manifest_finish(struct ws_manifest *m, int sort, int code, struct err *err);

/* The largest single file a rescan reads (the store's default blob cap). */
#define WS_FILE_MAX ((size_t)1 << 30)

/* ---- stat cache --------------------------------------------------------------- */

/* What the last sync/scan saw on disk for one manifest entry (mode 0: unknown). */
struct ws_stat {
    uint64_t dev;
    uint64_t ino;
    int64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint32_t mode;  /* st_mode, type bits included */
    uint32_t nlink; /* st_nlink: kept when the rest is dropped (ws_watch.c) */
};

void ws_stat_from(struct ws_stat *c, const struct stat *st);

/* 1 if st matches the cached stat exactly (a valid cache entry). */
int ws_stat_same(const struct ws_stat *c, const struct stat *st);

/*
 * Racy-git guard: entries whose mtime or ctime is within window_ns (normally
 * WS_RACY_NS) of `stamp_ns` (the time the sync or scan finished) are dropped from the
 * cache, because a change made later in the same timestamp tick would leave their stat
 * unchanged.
 */
#define WS_RACY_NS ((int64_t)100 * 1000 * 1000)
void ws_stat_unrace(struct ws_stat *cache, size_t n, int64_t stamp_ns, int64_t window_ns);

/* Wall-clock now in ns (CLOCK_REALTIME, as file timestamps are). */
int64_t ws_now_ns(void);

/* ---- the directory object -------------------------------------------------------- */

struct ws_watch; /* ws_watch.c */

/* How the last rescan went (for tests and the bench). */
enum ws_scan_kind { WS_SCAN_FULL = 1, WS_SCAN_NONE = 2, WS_SCAN_DIRTY = 3 };

struct ws_dir {
    int root_fd;               /* O_PATH|O_DIRECTORY on the root */
    char *root_path;           /* for messages */
    struct ws_manifest *man;   /* what the directory was last synced/scanned to */
    struct ws_stat *cache;     /* parallel to man->v; NULL if none */
    struct ws_dir_stats stats; /* cumulative counters */
    int dirty;                 /* disk may differ from man: next sync is a full one */
    int64_t racy_ns;           /* the racy window, WS_RACY_NS (tests may change it) */
    struct ws_watch *watch;    /* inotify state; NULL: every rescan is a full one */
    int last_scan;             /* enum ws_scan_kind of the last successful rescan */
    uint64_t stat_calls;       /* fstatat calls made by rescans (tests count them) */
    int skipped;               /* the last rescan left entries it could not store */
    int bound_mounted;         /* a size-capped tmpfs is mounted on the root (ws_bound.c) */
    uint64_t bound_bytes;      /* its size */
    int chown;                 /* entries a sync creates go to uid/gid (root daemon) */
    uid_t uid;
    gid_t gid;
};

/* Gives the entry `leaf` in pfd to d's owner when d has one (no-op otherwise). */
int ws_dir_own(const struct ws_dir *d, int pfd, const char *leaf, const char *shown,
               struct err *err);

/* The parent part and the leaf of a normal-form key ("a/b/c" -> "a/b", "c"). */
void ws_split(const char *path, size_t *parent_len, const char **leaf);

/*
 * Replaces d's manifest and cache (taking ownership of both). Called only when the disk
 * equals m (a successful sync, resync or rescan), so it also settles the watches.
 */
void ws_dir_adopt(struct ws_dir *d, struct ws_manifest *m, struct ws_stat *cache);

/* ---- the disk bound (ws_bound.c) ----------------------------------------------------- */

/* Mounts a tmpfs of `bytes` on path (before d's root fd is opened) if bounds are
 * enabled; 0 (nothing done) when they are not, or -1. */
int ws_bound_mount(struct ws_dir *d, const char *path, uint64_t bytes, struct err *err);

/* Detaches d's tmpfs, if it has one (d->root_path must still be set). */
void ws_bound_unmount(struct ws_dir *d);

/* ---- change watching (ws_watch.c) ---------------------------------------------------- */

/* Sets up d->watch (an inotify instance); without one, d->watch stays NULL. */
void ws_watch_open(struct ws_dir *d);

/* Frees the watch state and closes its instance; NULL is a no-op. */
void ws_watch_close(struct ws_watch *w);

/*
 * The disk equals d->man: discards queued events (drun's own writes), rebuilds the
 * table if a path in it may be stale, watches every directory of the tree not yet
 * watched, and records the directories holding files with more than one link. A failed
 * watch makes the next rescans full ones (until a later settle watches everything).
 */
void ws_watch_settle(struct ws_dir *d);

/*
 * Replaces the directories holding entries the last scan skipped (taking `dirs`, keys
 * NUL-terminated one after another, and leaving it empty); NULL clears them (a resync
 * removed them all). These directories are rescanned every time, so every rescan
 * reports the same skipped entries a full one would.
 */
void ws_watch_set_skips(struct ws_dir *d, struct buf *dirs);

enum ws_watch_result {
    WS_WATCH_FULL = 1, /* no usable record of the changes: scan everything */
    WS_WATCH_NONE = 2, /* nothing changed since the last settle */
    WS_WATCH_SOME = 3, /* the directories ws_watch_state() calls dirty changed */
};

/* At the start of a rescan: reads every queued event into the dirty set. */
int ws_watch_collect(struct ws_dir *d);

/* 0: p[0..n) is not a watched directory; 1: watched and unchanged; 2: watched, changed. */
int ws_watch_state(const struct ws_watch *w, const char *p, size_t n);

/* The next changed (dirty, still watched) directory after *pos (start at 0), or NULL. */
const char *ws_watch_next_dirty(const struct ws_watch *w, size_t *pos);

/*
 * The disk may now hold a directory that no manifest names and no watch covers (an
 * incremental sync could not remove a directory because a skipped entry, such as a
 * FIFO, is still in it): the next rescan is a full one.
 */
void ws_watch_full_next(struct ws_dir *d);

/* Test hooks: 1 makes inotify unavailable to later opens, 2 makes every watch fail. */
void ws_watch_test_fail(int mode);

/* Test hook: forgets the watch of directory p (the kernel keeps it): its wd is unknown. */
void ws_watch_test_forget(struct ws_dir *d, const char *p);

/* ---- safe file-system operations (ws_fs.c) ------------------------------------------ */

#define WS_FS_CREATE 1 /* create missing directories, replace non-directories in the way */

/* Deepest directory tree ws_fs_rm removes (each level is one recursion). */
#define WS_RM_DEPTH_MAX 4096

/*
 * Opens the directory at relative path p[0..n) beneath root_fd (n == 0: the root
 * itself) without following any symlink, as an O_PATH fd in *fd. With WS_FS_CREATE,
 * missing components are created 0755, and a file, symlink or other non-directory in
 * the way is removed first (the link itself, never its target). Without it, a missing
 * or non-directory component is ERR_NOTFOUND.
 */
int ws_fs_open_dir(int root_fd, const char *p, size_t n, int flags, int *fd, struct err *err);

/* Removes the name in dirfd (recursively for a directory; links never followed).
 * A missing name is success. `shown` names it in messages. */
int ws_fs_rm(int dirfd, const char *name, const char *shown, struct err *err);

/*
 * Opens the directory at p[0..n) as ws_fs_open_dir does (flags likewise), appends the
 * names in it (NUL-terminated each, without "." and "..") to names, and returns its
 * O_PATH fd in *dirfd for *at() calls on the names.
 */
int ws_fs_list(int root_fd, const char *p, size_t n, int flags, struct buf *names, int *dirfd,
               struct err *err);

/* Test hook: 1 forces the per-component walk instead of openat2. */
void ws_fs_force_fallback(int on);

/* Reads the whole regular file open at fd (at most `max` bytes; ERR_TOOBIG past it). */
int ws_fs_read_fd(int fd, struct buf *out, const char *shown, struct err *err);

#endif
