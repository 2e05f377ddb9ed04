/*
 * sandbox.h - run one untrusted shell command in a fresh OS sandbox.
 *
 * One interface, one backend per OS chosen at build time (as OpenSSH's sandbox-*.c):
 * bwrap*.c on Linux (bubblewrap + a seccomp filter + rlimits + an optional pids cgroup),
 * seatbelt.c on macOS (sandbox-exec with the SBPL profile from sandbox-profiles/). The
 * command is a shell script run by `/bin/sh` with `sh -c` semantics (one script, the exit
 * status of its last command). It reads only the system directories and the read-only
 * paths the caller names, writes only the workspace (at /workspace, also the working
 * directory) and a size-capped /tmp, has no network unless the spec asks for it, sees
 * none of the daemon's environment, file descriptors, keyring or processes, and leaves
 * nothing running when the result is delivered.
 *
 * The run is asynchronous on a libuv loop so the daemon keeps serving other requests:
 *
 *     sandbox_start(loop, &spec, &cb, &sb, &err)   -> 0, or -1 and nothing started
 *     cb.on_output(ud, stream, bytes, len)         -> zero or more times, as output arrives
 *     cb.on_exit(ud, &result)                      -> exactly once; then sb is gone
 *
 * sandbox_cancel(sb) kills everything; on_exit still comes (with result.cancelled set).
 * sandbox_run() is the synchronous wrapper (its own loop) for tests and `doctor`.
 * The command allow/deny check of reference section 3.7 is policy_command_check()
 * (src/policy/policy.h): callers run it before anything else, so a denied command
 * never starts.
 */
#ifndef DRUN_SANDBOX_SANDBOX_H
#define DRUN_SANDBOX_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "util/buf.h"
#include "util/err.h"

/* Caps on the spec itself, enforced by sandbox_start (ERR_TOOBIG / ERR_INVAL past them). */
#define SANDBOX_COMMAND_MAX_DEFAULT ((size_t)1 << 20) /* 1 MiB of script */
#define SANDBOX_COMMAND_MAX_LIMIT   ((size_t)16 << 20)
#define SANDBOX_RO_PATHS_MAX        256
#define SANDBOX_OVERLAYS_MAX        256
#define SANDBOX_ENV_MAX             16
#define SANDBOX_PATH_MAX            4096
#define SANDBOX_TAIL_BYTES          2048 /* the last bytes of each stream kept in the result */

/*
 * Limits for one command. A zero field means "use the default" (sandbox_limits_default),
 * never "unlimited": every run is bounded.
 */
struct sandbox_limits {
    int64_t timeout_ms;       /* wall clock; default 30 000 (bash_timeout_ms) */
    uint64_t memory_bytes;    /* RLIMIT_AS per process; default 4 GiB */
    uint64_t cpu_secs;        /* RLIMIT_CPU per process; default 60 */
    uint64_t file_size_bytes; /* RLIMIT_FSIZE; default 1 GiB */
    uint64_t nproc;           /* processes in this sandbox; default 256 */
    uint64_t tmp_size_bytes;  /* size of the /tmp tmpfs, and of /dev/shm; default 256 MiB */
    size_t max_output_bytes;  /* stored bytes per stream; default 16 MiB */
    size_t max_command_bytes; /* default SANDBOX_COMMAND_MAX_DEFAULT */
};

/* A workspace key bound read-only over /workspace/<key> (mount_overlay_paths). */
struct sandbox_overlay {
    const char *key;      /* relative, '/'-separated, no '.', '..' or empty component */
    const char *host_dir; /* absolute path of an existing directory (shown, checked) */
    int dir_fd;           /* > 0: the directory as opened by host/ (O_PATH), bound through
                             this fd (bwrap --ro-bind-fd), never by resolving host_dir
                             again; 0 or -1: bound by path (tests, sandbox_describe) */
};

/* What to run and where. All pointers are borrowed for the duration of sandbox_start. */
struct sandbox_spec {
    const char *workspace_dir;   /* absolute host directory, bound read-write at /workspace */
    const char *const *ro_paths; /* extra read-only host paths ($PATH entries, allowlist) */
    size_t n_ro_paths;           /* each is bound at its own path; missing ones are skipped */
    const struct sandbox_overlay *overlays;
    size_t n_overlays;
    const char *const *hide_paths; /* resolved host paths under ro_paths to cover: a file */
    size_t n_hide_paths;           /* with an empty one, a directory with an empty tmpfs */
    const char *command;           /* the script bytes (no NUL); need not be NUL-terminated */
    size_t command_len;
    const char *const *env; /* extra "NAME=value" (PYTHONPATH, NODE_PATH); not PATH etc. */
    size_t n_env;
    const char *path_env; /* PATH inside; NULL = /usr/local/bin:/usr/bin:/bin */
    struct sandbox_limits limits;
    int network; /* 0 (default): no network namespace access at all; 1: share the host's */
    /*
     * The host uid/gid the sandbox runs as when the daemon is root (sandbox_uid and
     * sandbox_gid in config.toml); 0 means SANDBOX_UID_DEFAULT. A daemon that is not root
     * cannot change its uid, and its sandboxes run as itself: these are then ignored.
     */
    uint32_t uid, gid;
    int workspace_ro; /* 1: bind workspace_dir read-only (text extraction's input copy) */
};

#define SANDBOX_UID_DEFAULT 65534 /* nobody */
#define SANDBOX_GID_DEFAULT 65534 /* nogroup */

/*
 * The host uid and gid a command of spec runs as: the spec's (or the default) when the
 * daemon is root, else the daemon's own. Its workspace directory must belong to them.
 */
void sandbox_user(const struct sandbox_spec *spec, uint32_t *uid, uint32_t *gid);

/*
 * 1 if host user uid/gid can reach directory `path` (search permission on each directory
 * on the way): bwrap runs as that user, so it must reach every bind source, the workspace
 * first of all. Always 1 for a daemon that is not root (bwrap runs as the daemon).
 */
int sandbox_reachable(const char *path, uint32_t uid, uint32_t gid);

/*
 * Kills every sandbox this process started that is still alive, running or prepared, and
 * removes their pids cgroups. For the daemon's exit paths, after the loop has stopped;
 * returns the number of cgroups it could not remove (0 when all is clean).
 */
int sandbox_cleanup(void);

/*
 * Removes what dead processes left: pids cgroups named drun-sandbox-<pid>-<n> whose pid
 * is not a live process started before the cgroup was made (their processes are killed
 * first). Never touches those of a live process. Returns how many were removed.
 */
int sandbox_sweep(void);

enum sandbox_stream { SANDBOX_STDOUT = 1, SANDBOX_STDERR = 2 };

/* One captured stream: the first max_output_bytes stored, everything counted. */
struct sandbox_output {
    struct buf data;               /* stored bytes (may contain NULs and invalid UTF-8) */
    uint64_t total;                /* every byte the command wrote, stored or not */
    int truncated;                 /* 1 if total > what was stored */
    char tail[SANDBOX_TAIL_BYTES]; /* the last bytes written, in order */
    size_t tail_len;
};

struct sandbox_result {
    int exit_code;         /* the shell's status: 0..255; 128+N when killed by signal N */
    int signal;            /* N when the status says the command died of signal N, else 0 */
    int timed_out;         /* the wall-clock limit killed it */
    int cancelled;         /* sandbox_cancel killed it */
    const char *limit_hit; /* "timeout", "memory", "cpu", "file_size", "processes",
                              "disk" (ENOSPC), "output" or NULL; a static string */
    struct sandbox_output out;
    struct sandbox_output err;
    int64_t duration_ms;
    int warm;         /* 1 if it ran in a prepared sandbox (sandbox_start_prepared) */
    int failed;       /* 1 if the sandbox itself failed (see error) */
    struct err error; /* why, when failed */
};

struct sandbox_callbacks {
    /* Output as it arrives, for progress; bytes are borrowed for the call. May be NULL. */
    void (*on_output)(void *ud, enum sandbox_stream stream, const char *bytes, size_t len);
    /*
     * Called exactly once with the result, which the callee now owns: keep what you need
     * (moving the bufs out is fine) and call sandbox_result_release on it when done. The
     * sandbox handle is invalid from this call on; its memory is freed once its libuv
     * handles have closed.
     */
    void (*on_exit)(void *ud, struct sandbox_result *result);
    /*
     * Called every tick_ms while the command runs, with the milliseconds since it
     * started, so a caller can report a command that prints nothing. May be NULL; not
     * called once the command has ended or is being killed. Linux only.
     */
    void (*on_tick)(void *ud, int64_t elapsed_ms);
    int64_t tick_ms;
    void *ud;
};

struct sandbox; /* opaque: one running command */

/* Fills every field of l with its default. */
void sandbox_limits_default(struct sandbox_limits *l);

/*
 * Checks the spec and starts the command on `loop`. Returns 0 and sets *out, or -1 with
 * err filled (ERR_INVAL for a bad spec, ERR_TOOBIG for a command past the cap, ERR_NOTFOUND
 * when bwrap is missing, ERR_IO when the sandbox cannot be set up) and nothing running.
 */
int sandbox_start(uv_loop_t *loop, const struct sandbox_spec *spec,
                  const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err);

/*
 * Prepared ("warm") sandboxes. sandbox_prepare() does everything of sandbox_start() that
 * does not depend on the command: bwrap builds the namespaces and mounts, then waits on
 * --block-fd; no process in it can run user code while it waits, and it dies with the
 * daemon (--die-with-parent). sandbox_start_prepared() hands the command over through a
 * pipe the sandbox's shell reads to EOF and closes before the script runs, then releases
 * it; the timeout counts from the release. A prepared sandbox is usable only by a spec
 * that builds exactly the same sandbox (see sandbox_prepared_valid); the caller keeps at
 * most one per session and frees it when the session goes.
 */
struct sandbox_prep; /* opaque: one waiting sandbox */

/* DRUN_SANDBOX_WARM: "off"/"cold"/"0", "always"/"warm", or unset/"auto". */
enum sandbox_warm {
    SANDBOX_WARM_AUTO,  /* prepare in the background, use one when it is ready */
    SANDBOX_WARM_OFF,   /* never prepare: every command starts cold */
    SANDBOX_WARM_ALWAYS /* every command goes warm; sandbox_start prepares on the spot */
};

/* The mode the environment asks for (read each call; tests switch it). */
enum sandbox_warm sandbox_warm_mode(void);

/*
 * Starts a sandbox for spec (its command is ignored) that waits for its command on
 * `loop`. Returns 0 and sets *out (free with sandbox_prepared_free or consume with
 * sandbox_start_prepared), or -1 with err as sandbox_start. The waiting sandbox does not
 * keep the loop alive.
 */
int sandbox_prepare(uv_loop_t *loop, const struct sandbox_spec *spec, struct sandbox_prep **out,
                    struct err *err);

/*
 * 1 if p is still waiting and was built from exactly what spec builds now: the same bwrap
 * argv (mounts, environment, sizes, process limit), the same rlimits, the same
 * (device, inode) behind every bind source, and every overlay still mounted inside (its
 * mount point sits in the host workspace, where a sync may have removed it; a sandbox
 * still setting up fails this). 0 otherwise: discard it and go cold.
 */
int sandbox_prepared_valid(const struct sandbox_prep *p, const struct sandbox_spec *spec);

/*
 * Runs spec's command in p, as sandbox_start would. On success p is consumed and *out is
 * the running sandbox (on_exit comes exactly once, result.warm set). On -1 (a bad spec as
 * sandbox_start, or ERR_BUSY when p does not match spec or has died) p is untouched: free
 * it and start cold.
 */
int sandbox_start_prepared(struct sandbox_prep *p, const struct sandbox_spec *spec,
                           const struct sandbox_callbacks *cb, struct sandbox **out,
                           struct err *err);

/* Kills and frees a prepared sandbox that was not used. NULL is a no-op. */
void sandbox_prepared_free(struct sandbox_prep *p);

/* Kills the whole sandbox; on_exit follows with cancelled set. No-op after on_exit. */
void sandbox_cancel(struct sandbox *sb);

/*
 * Runs the spec to completion on a private loop and fills *res (caller releases it with
 * sandbox_result_release). Returns 0 when the command ran (whatever its exit status), -1
 * with err filled when the sandbox could not start or failed.
 */
int sandbox_run(const struct sandbox_spec *spec, struct sandbox_result *res, struct err *err);

/*
 * Appends the bwrap command line for spec to out, one argument per line (for doctor, the
 * benchmark and debugging). raw=1 leaves out the fd-passing arguments and runs
 * `echo hi` instead of the command: the same mounts with nothing of ours around them.
 */
int sandbox_describe(const struct sandbox_spec *spec, int raw, struct buf *out, struct err *err);

/* Frees the captured output; the result is zeroed. NULL is a no-op. */
void sandbox_result_release(struct sandbox_result *res);

/*
 * What `drun-mcp doctor` reports. Each failing check leaves its `fix` with the exact
 * command or setting that fixes it.
 */
struct sandbox_probe {
    int bwrap_found;
    char bwrap_path[SANDBOX_PATH_MAX];
    char bwrap_version[64];
    int userns_ok;         /* an unprivileged user namespace can be created */
    int apparmor_restrict; /* kernel.apparmor_restrict_unprivileged_userns: -1 absent, 0, 1 */
    int pids_cgroup;       /* 1 if a pids cgroup can be used for the process limit */
    uint32_t run_uid;      /* the host uid commands run as (never 0) */
    int userns_clone;      /* kernel.unprivileged_userns_clone: -1 absent, 0, 1 */
    int sandbox_ok;        /* a real command ran in the sandbox and printed what it should */
    char fix[1024];        /* what to do, for the first failing check; "" if all passed */
};

/*
 * Probes the host. Returns 0 when the sandbox works, -1 with err (and p->fix) naming the
 * first problem. Never suggests or falls back to running unsandboxed.
 */
int sandbox_probe(struct sandbox_probe *p, struct err *err);

/* sandbox_probe for a root daemon whose commands run as want_uid/want_gid (0: default). */
int sandbox_probe_as(uint32_t want_uid, uint32_t want_gid, struct sandbox_probe *p,
                     struct err *err);

/*
 * macOS: builds the SBPL profile for a spec's read and write sets into out (with every
 * path escaped so no name can change the profile's structure) and the sandbox-exec argv.
 * Compiled on every OS so Linux tests check it. See seatbelt.c.
 */
int sandbox_seatbelt_profile(const struct sandbox_spec *spec, const char *tmp_dir, struct buf *out,
                             struct err *err);

/* Appends `s` as an SBPL string literal (quoted, escaped) to out. */
void sandbox_seatbelt_quote(struct buf *out, const char *s);

#endif
