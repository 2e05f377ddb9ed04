/*
 * policy.h - the operator's policy: config.toml, its reload, and allowlist matching.
 *
 * The operator decides what drun may touch in config.toml (path from --config,
 * DRUN_CONFIG or ~/.drun/config.toml; see policy_config_path()). This module parses it
 * (toml++ behind a small C wrapper), validates every field, and hands callers an
 * immutable snapshot: `struct policy`.
 *
 * Snapshots. A `struct policy` never changes after it is built. A caller takes one with
 * policy_current() at the start of a call and drops it with policy_unref() at the end,
 * so a config edited while a call runs does not change that call's rules. The fields
 * are public for reading; never write them.
 *
 * Reload. A `struct policy_store` owns the current snapshot. policy_current() first
 * stats the file and re-reads it only when (dev, inode, size, mtime, ctime) changed. A
 * file that fails to read, parse or validate never reverts to defaults: the last good
 * policy stays in force and the error is kept (policy_store_status()) for get_config
 * and the audit log, and logged once. With no good policy ever loaded, policy_current()
 * fails with that error, so calls that need policy are refused with it.
 *
 * Host paths. Requested host paths are resolved (symlinks included) and compared with
 * the resolved mount_allowlist entries by whole path components. An empty allowlist
 * lets the read door (session_mount) read any path but refuses every write door
 * (session_export, delete_from_host, snapshot export). The write itself goes through
 * policy/hostpath.h, which re-walks the path without following symlinks.
 */
#ifndef DRUN_POLICY_H
#define DRUN_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/err.h"

/* A list of strings owned by its policy. */
struct policy_strlist {
    char **v;
    size_t n;
};

/* One [[fetch_credentials]] table: send header `header: $env` to `domain`. */
struct policy_credential {
    char *domain; /* lower-case allowlist pattern, as in domain_allowlist */
    char *header; /* an HTTP header name */
    char *env;    /* the environment variable of the daemon holding the value */
};

enum policy_sync { POLICY_SYNC_FULL = 0, POLICY_SYNC_NORMAL = 1 };

struct policy {
    /* network (session_fetch) */
    struct policy_strlist domain_allowlist; /* lower-case, trailing dot dropped */
    int64_t fetch_timeout_ms;
    int64_t connect_timeout_ms;
    int64_t fetch_max_bytes;
    int fetch_allow_private;
    struct policy_strlist fetch_allow_cidrs; /* "addr/len", validated */
    struct policy_strlist fetch_resolve;     /* "host:port:addr[,addr...]", validated */
    struct policy_credential *fetch_credentials;
    size_t fetch_credentials_n;

    /* commands */
    int64_t bash_timeout_ms;
    int package_install_enabled;
    int64_t package_install_timeout_ms;
    struct policy_strlist bash_command_denylist;
    struct policy_strlist bash_command_allowlist;
    int64_t max_output_bytes; /* per stream */
    int64_t sandbox_memory_mb;
    int64_t sandbox_cpu_secs;
    int64_t sandbox_file_size_mb;
    int64_t sandbox_max_processes;
    int64_t sandbox_tmp_size_mb;
    int64_t sandbox_uid; /* host uid/gid a root daemon's commands run as (1..2^32-2) */
    int64_t sandbox_gid;
    int64_t extract_timeout_ms; /* session_extract_text's wall clock */
    int64_t extract_max_mb;     /* text kept by session_extract_text; past it, cut */

    /* sessions */
    int64_t max_workspace_mb;
    int64_t mount_git_copy_max_mb; /* a mounted .git up to this size is copied, not overlaid */
    int64_t max_sessions;
    int64_t max_checkpoints;
    int64_t session_idle_timeout_secs;

    /* host boundary */
    struct policy_strlist mount_allowlist;     /* absolute, lexically clean, as written */
    struct policy_strlist mount_overlay_paths; /* directory names */
    struct policy_strlist env_allowlist;       /* exact variable names */
    char *snapshots_dir;                       /* absolute */
    int snapshot_on_close;
    int export_vcs_hooks; /* session_export may write .git hooks and .git/config */

    /* storage */
    char *db_path;          /* absolute, or NULL when the config does not name one */
    char *runtime_dir;      /* absolute; the default is filled in */
    int sqlite_synchronous; /* enum policy_sync */

    /* where it came from */
    char *source_path;              /* the file read, or NULL for built-in defaults */
    int64_t source_mtime_ms;        /* its mtime, 0 for defaults */
    struct policy_strlist warnings; /* unknown keys and the like, one line each */

    int refs_; /* private: the reference count */
};

/*
 * Picks the config path: `cli` (from --config) if non-NULL, else $DRUN_CONFIG if set
 * and non-empty, else $HOME/.drun/config.toml. *explicit_out is 1 for the first two
 * (a missing file is then an error) and 0 for the default. Caller frees *path_out with
 * mem_free. Fails if the chosen path is relative, or HOME is unset for the default.
 */
int policy_config_path(const char *cli, char **path_out, int *explicit_out, struct err *err);

/* Returns a new policy holding the built-in defaults (refs = 1), or NULL on no memory. */
struct policy *policy_defaults(void);

/*
 * Parses and validates TOML text. `name` names the source in messages. On success
 * *out is a new policy (refs = 1; unknown keys are listed in its warnings). On failure
 * err says which key is wrong (with line:column for syntax errors) and *out is NULL.
 */
int policy_parse(const char *text, size_t len, const char *name, struct policy **out,
                 struct err *err);

/* Reads, parses and validates a file; as policy_parse. ERR_NOTFOUND if it is missing. */
int policy_load_file(const char *path, struct policy **out, struct err *err);

/* Takes another reference and returns p. Thread-safe. */
struct policy *policy_ref(struct policy *p);

/* Drops a reference; the last one frees the policy. NULL is a no-op. Thread-safe. */
void policy_unref(struct policy *p);

/* ---- the store: the current policy and its reload ---- */

struct policy_store;

/*
 * Makes a store for the config at `path` (from policy_config_path) and loads it once.
 * If the file does not exist and `explicit_path` is 0, the built-in defaults are the
 * policy (source "defaults"); if it is 1, that is a load error. A load error does not
 * make this fail: it is kept, as with later reloads. Fails only on no memory.
 * Caller frees with policy_store_free().
 */
int policy_store_open(const char *path, int explicit_path, struct policy_store **out,
                      struct err *err);

void policy_store_free(struct policy_store *st);

/*
 * Re-reads the file if its stat changed since the last attempt. Returns 1 if a new
 * policy was installed, 0 if nothing changed, -1 if the new file failed (err says why;
 * the previous policy stays in force and the error is kept for policy_store_status()).
 * The failure is logged once per change of the file.
 */
int policy_refresh(struct policy_store *st, struct err *err);

/*
 * Refreshes, then returns the policy in force with a reference the caller drops with
 * policy_unref(). Fails with the kept load error when no good policy was ever loaded.
 * A reload failure while a good policy exists does not fail this call.
 */
int policy_current(struct policy_store *st, struct policy **out, struct err *err);

/* What get_config reports besides the policy itself. */
struct policy_status {
    char path[4096];       /* the config path this store watches */
    int have_policy;       /* a good policy is in force */
    int from_defaults;     /* it is the built-in defaults (no file) */
    int64_t mtime_ms;      /* mtime of the file it came from, 0 for defaults */
    int64_t loaded_ms;     /* when it was installed (Unix ms) */
    struct err last_error; /* code ERR_OK if the latest load attempt succeeded */
    int64_t error_ms;      /* when last_error happened, 0 if none */
};

/* Copies the store's status (does not refresh). */
void policy_store_status(struct policy_store *st, struct policy_status *out);

/* ---- matching (policy_match.c) ---- */

/* 1 if `name` is exactly one of env_allowlist. */
int policy_env_allowed(const struct policy *p, const char *name);

/*
 * The reference's command policy (§3.7): split on newline ; | &, drop from '#', trim;
 * any segment containing a denylist pattern is refused; with a non-empty allowlist
 * every segment must contain an allowlist pattern. Returns 0 if allowed, else -1 with
 * ERR_DENIED and the reference's message.
 */
int policy_command_check(const struct policy *p, const char *command, struct err *err);

/* The doors through which drun touches host paths. */
enum policy_door {
    POLICY_DOOR_MOUNT,  /* read: the path is resolved fully; empty allowlist = any path */
    POLICY_DOOR_EXPORT, /* write: existing part resolved; empty allowlist = refused */
    POLICY_DOOR_DELETE  /* write: parent resolved, last name kept as is (a link is removed
                           as a link); never an allowlist entry itself or "/" */
};

/* A checked host path. `root` is "" when the door admitted it through an empty list. */
struct policy_hostpath {
    char resolved[4096]; /* absolute, symlink-free at check time */
    char root[4096];     /* the resolved allowlist entry that admits it */
    char rel[4096];      /* resolved below root ("" = root itself); no "." or ".." */
};

/*
 * Checks `path` for a door. The path must be absolute, free of control characters and
 * of ".." components. Symlinks are resolved (for a path that does not exist yet, its
 * deepest existing ancestor), then the result must lie under a resolved allowlist
 * entry by whole components. ERR_DENIED when refused, ERR_INVAL when malformed.
 */
int policy_hostpath_check(const struct policy *p, const char *path, enum policy_door door,
                          struct policy_hostpath *out, struct err *err);

/* ---- the config editor (policy_edit.c) ---- */

/*
 * Adds (add = 1) or removes `value` in the root string array `key` of the config at
 * `path`, keeping everything else in the file byte for byte. Creates the file with
 * commented defaults if it does not exist. Writes atomically (temp file in the same
 * directory, fsync, rename, same permissions). Idempotent: adding a present value or
 * removing an absent one changes nothing and says so in *msg. Returns 0 or -1.
 */
int policy_edit_list(const char *path, const char *key, const char *value, int add, struct buf *msg,
                     struct err *err);

/*
 * `drun-mcp config add-path|remove-path|add-domain|remove-domain|list [--config PATH]`.
 * argv[0] is the subcommand. `config_cli` is a --config given before "config" (or NULL).
 * Messages for the user go to `out`. Returns 0, or -1 with err set (ERR_INVAL with a
 * "usage: ..." message for bad arguments); the caller prints err and exits 1.
 */
int policy_config_cli(int argc, char **argv, const char *config_cli, FILE *out, struct err *err);

/*
 * Writes `len` bytes to path atomically: a temp file beside it (O_NOFOLLOW), fsync,
 * mode (permission bits), rename over path. Returns 0 or -1 (ERR_IO, ERR_INVAL).
 */
int policy_write_atomic(const char *path, const char *text, size_t len, mode_t mode,
                        struct err *err);

/*
 * Registers an MCP server in a TOML client config (Codex's config.toml): makes the
 * table [<table>.<name>] hold `command = COMMAND` and `args = [ARGS]`, keeping every
 * other byte of text (comments, other servers, their order). An existing table has just
 * those two values replaced; a missing one is appended at the end. `shown` names the
 * file in messages. *changed is 0 when the file already says so (out then holds text
 * unchanged). Fails (ERR_INVAL, naming the file and line) on text that does not parse
 * or whose <table> or <name> is not a table, or is an inline table (edit that by hand).
 * The result is re-parsed and checked before it is returned in out.
 */
int policy_toml_set_server(const char *text, size_t len, const char *shown, const char *table,
                           const char *name, const char *command, const char *const *args,
                           size_t n_args, struct buf *out, int *changed, struct err *err);

#endif
