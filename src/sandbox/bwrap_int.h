/*
 * bwrap_int.h - what the files of the Linux sandbox share; only src/sandbox/bwrap*.c include it.
 *
 * The sandbox is one module split by concern: bwrap.c (design notes, limits, start),
 * bwrap_argv.c (the argv vector, spec checks and the bwrap argv), bwrap_seccomp.c,
 * bwrap_cgroup.c (the pids cgroup of a root daemon), bwrap_child.c (between fork and exec),
 * bwrap_events.c (watching a running bwrap) and bwrap_warm.c (prepared sandboxes). Everything
 * else in those files is static.
 */
#ifndef DRUN_SANDBOX_BWRAP_INT_H
#define DRUN_SANDBOX_BWRAP_INT_H

#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* The fds bwrap gets, at these numbers; everything else is closed. */
enum {
    FD_STATUS = 3,
    FD_SECCOMP = 4,
    FD_COMMAND = 5, /* cold: the memfd bound at COMMAND_PATH; warm: the script pipe */
    FD_EXECERR = 6,
    FD_BLOCK = 7, /* warm only: bwrap's --block-fd */
    FD_FIRST_FREE = 8
};

/* What bwrap_build_argv passes on to bwrap besides the mounts. */
enum argv_kind {
    ARGV_RAW,  /* no fds, `echo hi` (sandbox_describe raw=1) */
    ARGV_COLD, /* the command in a memfd bound read-only at COMMAND_PATH */
    ARGV_WARM  /* --block-fd; the command arrives later through the script pipe */
};

#define COMMAND_PATH "/.drun/command"
/*
 * Warm scripts up to this size whose lines the shell reads with its `read` builtin (a few
 * syscalls) instead of exec'ing cat (a fork, an exec and a dynamic link, ~1 ms); longer
 * ones go through cat, which reads a 1 MiB script in a few reads instead of one byte
 * per syscall.
 */
#define WARM_READ_MAX 512
#define STATUS_MAX    4096
#define READ_CHUNK    65536
#define DRAIN_MS      5000 /* after a kill, how long pipes may take to reach EOF */

struct argv_vec {
    char **v;
    size_t n, cap;
    int failed;
};

struct sandbox {
    uv_loop_t *loop;
    struct sandbox_callbacks cb;
    struct sandbox_limits lim;
    pid_t bwrap_pid;
    int bwrap_pidfd;
    pid_t child_pid; /* host pid of the sandbox's pid 1, once bwrap reports it */
    int child_pidfd;
    uv_poll_t exit_poll;
    uv_poll_t child_poll; /* on child_pidfd, once known */
    int child_watch;      /* child_poll initialised */
    int child_gone;       /* the sandbox's pid 1 has exited (or was never seen) */
    uv_pipe_t out_pipe, err_pipe, status_pipe;
    int status_keep; /* a second read end of the status pipe, closed once bwrap is reaped */
    int own_pidns;   /* bwrap is pid 1 of its own pid namespace: its pids are not ours */
    uv_timer_t timer;
    uv_timer_t tick;                     /* cb.on_tick while the command runs */
    int handles;                         /* initialised handles not yet closed */
    int out_open, err_open, status_open; /* still reading */
    int exited, wait_status, killing, done;
    int64_t start_ms;
    struct buf status;
    char cgroup[SANDBOX_PATH_MAX]; /* our pids cgroup directory, or "" */
    struct sandbox_result res;
    int prepared;          /* waiting on --block-fd (sandbox_prepare) */
    uv_pipe_t script_pipe; /* warm: the daemon's end of the script pipe, while writing */
    int script_open;       /* script_pipe initialised and not yet closed */
    char *script;          /* warm: the framed command while it is written */
    size_t script_len;
    uv_write_t script_req;
    char readbuf[READ_CHUNK];
};

struct child_plan {
    const char *bwrap;
    char *const *argv;
    int src[FD_FIRST_FREE];       /* fd to place at each number 0..6 */
    int ov[SANDBOX_OVERLAYS_MAX]; /* overlay dir fds, placed at FD_FIRST_FREE + i */
    size_t n_ov;
    int cgroup_fd;
    struct rlimit rl_as, rl_cpu, rl_fsize, rl_core;
    int drop;      /* become uid/gid (the daemon is root) */
    uid_t uid;     /* host uid bwrap runs as */
    gid_t gid;     /* host gid bwrap runs as */
    pid_t parent;  /* the daemon, for the parent-death check */
    int own_pidns; /* bwrap is pid 1 of a pid namespace of its own */
    int userns;    /* ... made with a user namespace mapping our own uid (not root) */
    int map_rd;    /* userns: EOF or one byte once the daemon has written the maps */
    int map_wr;    /* the daemon's end */
};

/* bwrap_argv.c */
/* Frees every string of a and the vector; a is empty afterwards. */
void bwrap_argv_free(struct argv_vec *a);
/* 0 if spec may run under lim, or -1 with err naming the first bad field. */
int bwrap_spec_check(const struct sandbox_spec *spec, const struct sandbox_limits *lim,
                     struct err *err);
/* The full bwrap argv for spec into a (kind: raw, cold or warm); 0 or -1 with err. */
int bwrap_build_argv(const struct sandbox_spec *spec, const struct sandbox_limits *lim,
                     const char *bwrap, enum argv_kind kind, struct argv_vec *a, struct err *err);

/* bwrap.c */
/* The bwrap executable (the daemon's PATH, then the usual places) into out, or NULL. */
const char *bwrap_find(char *out, size_t size);
/* l = in, with every zero limit replaced by its default. */
void bwrap_limits_fill(struct sandbox_limits *l, const struct sandbox_limits *in);
/* Checks spec and forks bwrap (cold, or warm with *block_wr and *script_wr); 0 or -1. */
int bwrap_spawn(uv_loop_t *loop, const struct sandbox_spec *spec, int warm, struct sandbox **out,
                int *block_wr, int *script_wr, struct argv_vec *argv_out, struct err *err);

/* bwrap_seccomp.c */
/* A new memfd holding the compiled seccomp filter (compiled once), or -1 with err. */
int bwrap_seccomp_memfd(struct err *err);

/* bwrap_cgroup.c */
/* Makes sb's pids cgroup (path in sb->cgroup); an fd of its cgroup.procs, or -1 if none. */
int bwrap_cgroup_make(struct sandbox *sb);
/* Removes a finished sandbox's cgroup dir; a busy one is retried on the next call. */
void bwrap_cgroup_remove(const char *dir);
/* 1 if sb's pids cgroup refused a fork (pids.events max > 0). */
int bwrap_cgroup_hit_max(const struct sandbox *sb);

/* bwrap_child.c */
/* 0 once a user namespace could not be made for bwrap's own pid namespace. */
extern int bwrap_userns_nest_ok;
/* Maps our uid and gid in child pid's new user namespace, then releases it on map_wr. */
int bwrap_userns_map(pid_t pid, int map_wr);
/* Forks (or clones into a new pid namespace) and execs bwrap per cp; the child pid or -1. */
pid_t bwrap_spawn_child(const struct child_plan *cp);

/* bwrap_events.c */
/* Closes the second read end of the status pipe, if still open. */
void bwrap_status_release(struct sandbox *sb);
/* uv_close on an initialised handle of sb unless it is already closing. */
void bwrap_close_handle(struct sandbox *sb, uv_handle_t *h);
/* SIGKILL through pidfd (or pid when the pidfd is -1). */
void bwrap_signal_kill(int pidfd, pid_t pid);
/* Stops bwrap, kills its children, then bwrap: for a pid 1 not yet reported. */
void bwrap_kill_unknown(struct sandbox *sb);
/* Starts sb's timeout timer and heartbeat tick from now. */
void bwrap_clock_start(struct sandbox *sb);
/* Kills the sandbox's pid 1 (its whole pid namespace), then bwrap; no-op once exited. */
void bwrap_kill_all(struct sandbox *sb);
/* uv alloc callback: the sandbox's read buffer. */
void bwrap_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
/* uv read callback for stdout and stderr: captures up to max_output_bytes. */
void bwrap_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);
/* The host pid of pid's first child (from /proc), or 0. */
pid_t bwrap_only_child(pid_t pid);
/* uv read callback for --json-status-fd: learns the sandbox's pid 1. */
void bwrap_on_status(uv_stream_t *s, ssize_t n, const uv_buf_t *b);
/* uv poll callback on bwrap's pidfd: reaps bwrap and finishes the run. */
void bwrap_on_exit_ready(uv_poll_t *h, int status, int events);

/* bwrap_warm.c */
/* sandbox_start through a prepared sandbox made on the spot (DRUN_SANDBOX_WARM=always). */
int bwrap_start_always(uv_loop_t *loop, const struct sandbox_spec *spec,
                       const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err);

#endif
