/*
 * host.h - every host path drun reads, writes, deletes or binds goes through here.
 *
 * The doors (session_mount, session_export, delete_from_host, overlays bound into a
 * sandbox, snapshot files read by restore and import) were each safe alone; chained,
 * they were not: a restored overlay named "/", an exported chain of links resolved to
 * "/", a mount of /proc/self/environ read the daemon's secrets, an export rewrote
 * drun's own config.toml. So the rules live in one module and every door asks it:
 *
 *  1. A path is admitted by policy_hostpath_check() (mount_allowlist, by whole
 *     components, after resolving links) AND by the host rules below; a path admitted
 *     once is checked again at every use (an overlay at bind time).
 *  2. Admitted paths are then opened, never re-resolved as strings: from a directory
 *     fd, with util/safeopen.h (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 *     RESOLVE_NO_MAGICLINKS, or the O_NOFOLLOW walk), so a link swapped in after the
 *     check makes the open fail (ERR_DENIED) instead of leading elsewhere.
 *  3. /proc, /sys and /dev (by path, and by filesystem type for procfs, sysfs and the
 *     other kernel pseudo filesystems) are behind no door: they hold the daemon's
 *     environment, its fds (/proc/self/fd, /dev/fd) and kernel knobs.
 *  4. drun's own files (the config file, the DB and its -wal/-shm/-journal, the runtime
 *     directory, the snapshots directory) are behind no door, identified by device and
 *     inode (and by parent directory + name for files that do not exist yet) as well as
 *     by path, whatever mount_allowlist says.
 *  5. Files are opened once (O_NOFOLLOW | O_NONBLOCK), checked by fstat, and read only
 *     through that fd: a path swapped for a FIFO cannot hang the daemon.
 *  6. Deletes never cross a mount (statx mount id, not only st_dev).
 *  7. Exported links must resolve beneath output_dir on the host as it is after the
 *     export; .git/hooks/..., .git/config are exported only with export_vcs_hooks.
 *
 * `rel` arguments are relative to a root fd: components separated by '/', none empty,
 * "." or "..", no leading '/', no control characters. Functions return 0 (or an fd) or
 * -1 and fill err: ERR_DENIED for a refused path (a symlink or non-directory on the
 * way, a rule above), ERR_INVAL for a malformed path, ERR_NOTFOUND, ERR_IO.
 */
#ifndef DRUN_HOST_HOST_H
#define DRUN_HOST_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "policy/policy.h"
#include "util/buf.h"
#include "util/err.h"

/* ---- drun's own files (rule 4) ----------------------------------------------------- */

/*
 * Registers a file of drun's own (the config file): refused by every door. The file
 * need not exist; its parent directory must. Returns 0 or -1.
 */
int host_own_add_file(const char *path, struct err *err);

/* Registers the DB file and its -wal, -shm and -journal companions. */
int host_own_add_db(const char *path, struct err *err);

/* Registers a directory of drun's own (runtime_dir, snapshots_dir): nothing in it or
 * holding it is behind a door. A missing directory is ignored. */
int host_own_add_tree(const char *dir, struct err *err);

/* Registers snapshots_dir: behind every door, but restore and import read from it. */
int host_own_add_snapshots(const char *dir, struct err *err);

/*
 * The sandbox binds every mount_allowlist entry read-only; an entry that holds drun's
 * own files would show them to every command. Fills out[] (at most max) with the
 * resolved paths of drun's own files that exist and trees that lie beneath one of
 * `roots` (absolute paths, resolved here), for the sandbox to cover. The strings live
 * as long as the registry. Returns the count.
 */
size_t host_own_hidden(const char *const *roots, size_t n_roots, const char **out, size_t max);

/* Forgets every registration (tests). */
void host_own_reset(void);

/*
 * Refuses (ERR_DENIED) the entry `name` of the directory dirfd when it is one of drun's
 * own files or trees, by parent directory + name, or by device and inode (sb, when not
 * NULL, is its lstat). `shown` names it in the message.
 */
int host_own_check_entry(int dirfd, const char *name, const struct stat *sb, const char *shown,
                         struct err *err);

/* ---- checking a path for a door (rules 1, 3, 4) ------------------------------------ */

/*
 * policy_hostpath_check() plus the host rules: refuses /proc, /sys, /dev (as given
 * and as resolved), drun's own files and trees, and for POLICY_DOOR_DELETE any path
 * that holds one of them. Fills out as policy_hostpath_check does.
 */
int host_check(const struct policy *p, const char *path, enum policy_door door,
               struct policy_hostpath *out, struct err *err);

/* ERR_DENIED if the open fd is on procfs, sysfs or another kernel pseudo filesystem. */
int host_check_fs(int fd, const char *shown, struct err *err);

/* ---- opening for reading (rules 2, 3, 5) ------------------------------------------- */

/*
 * session_mount's door: host_check(POLICY_DOOR_MOUNT), then opens the resolved path
 * from "/" without following any link, O_NONBLOCK, refusing a FIFO, socket or device
 * (never opened: ERR_INVAL, *sb filled), a pseudo filesystem or an own file. Returns a
 * directory or regular-file fd (per *sb) and fills hp, or -1.
 */
int host_open_read(const struct policy *p, const char *path, struct policy_hostpath *hp,
                   struct stat *sb, struct err *err);

/*
 * An overlay at bind time: the host directory `host_dir` (absolute, as registered) is
 * checked against the current policy as session_mount would, then opened without
 * following any link. Returns an O_PATH | O_DIRECTORY fd to bind (bwrap --ro-bind-fd),
 * or -1 (ERR_DENIED: the policy or the rules refuse it now; ERR_NOTFOUND: gone).
 */
int host_open_overlay(const struct policy *p, const char *host_dir, struct err *err);

/*
 * The overlay (key -> host_dir) as the current policy sees it, without opening it:
 * session_mount registers a directory named in mount_overlay_paths as host_root/key,
 * so key's last name must be in mount_overlay_paths now and host_dir must end in key;
 * then the rules of host_open_overlay. Restore and import use it to drop overlays a
 * snapshot brings that session_mount would refuse now. Returns 0 or -1 (ERR_DENIED,
 * ERR_INVAL, ERR_NOTFOUND) with a message naming the overlay.
 */
int host_check_overlay(const struct policy *p, const char *key, const char *host_dir,
                       struct err *err);

/*
 * A snapshot file (restore, import): opens the absolute `path` once, O_RDONLY |
 * O_NOFOLLOW | O_NONBLOCK, no link anywhere on the way, and fstat must say regular
 * file; never one of drun's own files (the DB, the config) or the runtime directory.
 * The caller has already decided the path is admitted (snapshots_dir or the mount
 * door) and reads only this fd. Returns the fd (O_NONBLOCK cleared) and *sb, or -1.
 */
int host_open_snapshot_file(const char *path, struct stat *sb, struct err *err);

/*
 * Walks the directory open at dirfd (consumed) for session_mount, never following a
 * link: each entry is lstat'ed, links are reported as links, FIFOs, sockets, devices,
 * pseudo filesystems and drun's own files are skipped (never opened), files and
 * directories are opened O_NOFOLLOW | O_NONBLOCK and checked again by fstat (same
 * device, inode and type, else skipped as changed). Callbacks return 0 to go on or -1
 * to stop the walk (the walk then returns -1 with err untouched, code ERR_OK).
 */
struct host_tree_ops {
    void *ctx;
    /* 1 if `name` (a directory in the directory open at parentfd) is an overlay to report
     * instead of entering. */
    int (*is_overlay)(void *ctx, const char *name, int parentfd);
    int (*overlay)(void *ctx, const char *key);
    int (*file)(void *ctx, const char *key, int fd, const struct stat *sb);
    int (*link)(void *ctx, const char *key, const char *target, size_t len);
    int (*empty_dir)(void *ctx, const char *key);
    int (*skip)(void *ctx, const char *key, const char *why);
};

/* Limits of one walk. */
#define HOST_TREE_DEPTH_MAX 256

int host_read_tree(int dirfd, const char *shown_root, const struct host_tree_ops *ops,
                   struct err *err);

/*
 * 1 if the directory `name` in the directory open at parentfd holds at most max_bytes of
 * regular-file bytes and HOST_SMALL_TREE_ENTRIES entries (links not followed, no other
 * mount entered, HOST_TREE_DEPTH_MAX deep), 0 if it holds more (the walk stops there),
 * -1 with err when it cannot be read. session_mount copies a small .git this way.
 */
#define HOST_SMALL_TREE_ENTRIES 100000
int host_dir_within(int parentfd, const char *name, uint64_t max_bytes, struct err *err);

/* ---- writing and deleting beneath a root (rules 2, 4, 6) -------------------------- */

/*
 * Opens the absolute directory `root` (e.g. policy_hostpath.root) for the functions
 * below, refusing any symlink in it. Returns an O_RDONLY | O_DIRECTORY fd the caller
 * closes, or -1. Refuses "/" itself: no door writes relative to the whole host.
 */
int host_open_root(const char *root, struct err *err);

/*
 * Opens the directory rel beneath rootfd ("" = a new fd for rootfd itself), creating
 * missing components with `mode` (mkdir -p) when create is 1. Returns the fd or -1.
 */
int host_open_dir(int rootfd, const char *rel, int create, mode_t mode, struct err *err);

/* mkdir -p of rel beneath rootfd. */
int host_mkdirs(int rootfd, const char *rel, mode_t mode, struct err *err);

/*
 * Writes `len` bytes to rel beneath rootfd atomically: missing parents are made (0755),
 * the data goes to a temp name in the same directory (O_EXCL), is fsynced, gets `mode`
 * (permission bits only) and is renamed over rel. An existing symlink at rel is
 * replaced as a link, never written through. One of drun's own files at rel (by name
 * or by inode) is refused (ERR_DENIED) and left as it is.
 */
int host_write_file(int rootfd, const char *rel, const void *data, size_t len, mode_t mode,
                    struct err *err);

/* As host_write_file, copying from srcfd to its end (at most max bytes, else ERR_TOOBIG). */
int host_write_fd(int rootfd, const char *rel, int srcfd, off_t max, mode_t mode, struct err *err);

/* Creates (or atomically replaces) a symlink at rel pointing at target. */
int host_symlink(int rootfd, const char *rel, const char *target, struct err *err);

struct host_removed {
    int missing;  /* the path did not exist: nothing done */
    size_t files; /* files, links and other non-directories removed */
    size_t dirs;  /* directories removed */
};

/*
 * Removes rel beneath rootfd without following links: a symlink is removed as a link;
 * a directory is removed recursively, refusing to enter another mount (statx mount id
 * or st_dev differs) or one of drun's own files or trees, or to go deeper than 256
 * levels. The whole tree is examined before anything is removed, so a refusal removes
 * nothing. rel must be non-empty. A missing path is not an error (out->missing = 1).
 */
int host_remove(int rootfd, const char *rel, struct host_removed *out, struct err *err);

/* ---- export rules (rule 7) ---------------------------------------------------------- */

/*
 * Why the workspace path `key` (is_dir: a directory) is not exported by default, or
 * NULL: .git/hooks/..., .git/config and a .git that is not a directory (a "gitdir:"
 * redirect to a directory of hooks), at any depth, run code on the host's next git
 * command. Exported anyway when the policy sets export_vcs_hooks.
 */
const char *host_export_vcs_refusal(const struct policy *p, const char *key, int is_dir);

/*
 * After an export wrote the symlinks `rels[0..n)` beneath outfd: checks each one as the
 * host is now (the other links included) and removes those that do not resolve beneath
 * outfd (or, dangling, whose target climbs with ".."), repeating until none is removed.
 * bad[i] is set to 1 for each removed link. Returns 0, or -1 on a system error.
 */
int host_export_check_links(int outfd, const char *const *rels, size_t n, unsigned char *bad,
                            struct err *err);

/* What session_export writes: the workspace entries, through callbacks. */
enum host_entry_kind { HOST_ENTRY_DIR = 1, HOST_ENTRY_FILE, HOST_ENTRY_EXEC, HOST_ENTRY_LINK };

struct host_export_ops {
    void *ctx;
    size_t n; /* entries */
    /* The key and kind of entry i (valid while the export runs). */
    const char *(*key)(void *ctx, size_t i, int *kind);
    /* Entry i's bytes (file contents, or a link's target) into out; -1 stops the export. */
    int (*read)(void *ctx, size_t i, struct buf *out);
    /* Entry i is not written (or its link was removed again), and why. */
    void (*skip)(void *ctx, size_t i, const char *why);
};

/*
 * session_export's writes beneath hp (host_check'ed for POLICY_DOOR_EXPORT): opens
 * output_dir (made if missing) from the allowlist root without following links, then
 * each entry: VCS hooks skipped (host_export_vcs_refusal), directories made, files
 * written atomically, links written only when their target stays inside lexically; an
 * entry refused on the host (a link in the way, drun's own file) is skipped. Then every
 * link written is checked as the host now is (host_export_check_links). written[i] is
 * set for each entry written and kept. Returns 0, or -1 with err: a refused or broken
 * output_dir or a system error at an entry; err->code is ERR_OK when read() stopped it.
 */
int host_export(const struct policy *p, const struct policy_hostpath *hp,
                const struct host_export_ops *ops, unsigned char *written, struct err *err);

/* ---- the $PATH toolchains the sandbox binds ----------------------------------------- */

/*
 * pyenv, asdf, mise, rbenv, volta, Linuxbrew and pipx put on $PATH directories of shims,
 * links and scripts whose real programs live elsewhere: binding the $PATH entries alone
 * left `python3` exiting 127 in the sandbox. host_toolchain_scan() finds, for the $PATH
 * `path_env` (absolute entries only), what its tools need, to bind read-only:
 *
 *  - each entry, resolved (a linked entry is named by its real path in out->path);
 *  - for each executable in an entry that is a link, or a script whose "#!" names an
 *    interpreter, the directory the resolved target lives in, or the prefix above it
 *    when that directory is bin/, sbin/ or libexec/ (a venv, a Cellar keg, a version of
 *    a runtime needs its lib/ too); nothing when that directory is bound already (a
 *    link beside its target does not bind the prefix: ~/.cargo holds credentials);
 *  - the root of a shim manager: the parent of an entry named "shims", and the
 *    directories PYENV_ROOT, RBENV_ROOT, ASDF_DATA_DIR, MISE_DATA_DIR, VOLTA_HOME,
 *    RUSTUP_HOME, CARGO_HOME and HOMEBREW_PREFIX name, and rustup's ~/.rustup beside a
 *    ~/.cargo/bin entry; each root is also passed into the sandbox under its variable
 *    (out->env), since the sandbox's HOME is not the user's and the managers look there.
 *
 * Never bound, whatever $PATH says: "/", /proc, /sys, /dev (and beneath), $HOME itself or
 * a directory holding it, a derived directory with fewer than two components (/home,
 * /var), or one already beneath another bind or the system directories the sandbox
 * binds anyway (/usr, /bin, /lib*, /sbin, /opt). drun's own files beneath a bind are
 * covered by the sandbox as for mount_allowlist (host_own_hidden). Bounded: at most
 * HOST_TOOLCHAIN_DIRS_MAX directories, HOST_TOOLCHAIN_ENTRIES_MAX entries read per $PATH
 * directory. Caller releases out with host_toolchain_release. Returns 0 or -1 (ERR_NOMEM).
 */
#define HOST_TOOLCHAIN_DIRS_MAX    64
#define HOST_TOOLCHAIN_ENTRIES_MAX 8192
#define HOST_TOOLCHAIN_ENV_MAX     8

struct host_toolchain {
    char *dirs[HOST_TOOLCHAIN_DIRS_MAX]; /* resolved directories to bind read-only */
    size_t n_dirs;
    char *env[HOST_TOOLCHAIN_ENV_MAX]; /* "PYENV_ROOT=/home/u/.pyenv", ... */
    size_t n_env;
    char *path; /* PATH inside: the entries that exist, linked ones by their real path */
};

int host_toolchain_scan(const char *path_env, struct host_toolchain *out, struct err *err);
void host_toolchain_release(struct host_toolchain *t);

/* Test hook: 1 forces the per-component walk, as if openat2 returned ENOSYS. */
void host_force_fallback(int on);

#endif
