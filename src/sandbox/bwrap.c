/*
 * bwrap.c - the Linux sandbox: bubblewrap, a seccomp filter, rlimits and a pids cgroup.
 *
 * Design. One bwrap process per command, its argv built before the fork (never a shell
 * string). The mount plan is in sandbox-profiles/linux-mounts.md; in short: a size-capped
 * tmpfs at /tmp first (a later bind under /tmp must not be hidden by it, reference
 * section 14 item 1), read-only system directories with /bin, /lib, /lib64, /sbin
 * recreated as links on merged-/usr hosts (item 2), a narrow read-only /etc, the caller's
 * read-only paths, a fresh /proc and minimal /dev with a capped /dev/shm, the workspace
 * read-write at /workspace, overlays read-only on top, and finally the sandbox's own root
 * remounted read-only so nothing can be written outside /workspace, /tmp and /dev/shm.
 *
 * Why we start bwrap ourselves instead of uv_spawn: uv_spawn runs no code between fork
 * and exec, and we need four things there: (1) setrlimit for memory, CPU time, file
 * size and core dumps, which are inherited by bwrap and everything it starts; (2) joining
 * a fresh pids cgroup (when the daemon may create one) before bwrap can fork, so no
 * process escapes the count; (3) placing exactly the fds bwrap needs at fixed numbers
 * and closing every other one, including fds the daemon's own parent leaked to it without
 * close-on-exec; (4) resetting signal dispositions (an ignored SIGPIPE is inherited across
 * exec). The forked child runs only async-signal-safe calls (bwrap_spawn_child, child_exec).
 * We then watch bwrap with a pidfd under uv_poll, which neither needs nor disturbs a
 * SIGCHLD handler.
 *
 * Killing. bwrap reports the host pid of the sandbox's pid 1 on --json-status-fd; we hold
 * a pidfd for it. Killing pid 1 of a pid namespace makes the kernel kill every process in
 * it, so background jobs, setsid double-forks and processes that ignore SIGTERM all die;
 * the kernel's pid-1 exit waits for them, so when bwrap is reaped the namespace is empty.
 * A command that ends normally gets the same: bwrap's pid 1 exits when the command does.
 *
 * The process limit. RLIMIT_NPROC set before bwrap would count every process of the
 * daemon's uid on the host (and is the cap of the new user namespace too), so it is set
 * inside the sandbox instead, by the shell prelude (`ulimit`), where the kernel (5.14+,
 * ucounts) counts per (user namespace, uid): one sandbox's fork bomb cannot starve
 * another. Real uid 0 is exempt from RLIMIT_NPROC, so when the daemon runs as root we put
 * bwrap in a fresh pids cgroup with pids.max instead (see docs/security.md).
 *
 * Never host root. A root daemon starts bwrap itself as an unprivileged host uid/gid
 * (sandbox_uid/sandbox_gid, 65534 by default): bwrap is not setuid, so the user namespace
 * it makes maps that uid, and nothing in the sandbox holds any power of host root over
 * host files, sysctls or devices. A namespace that only shows a non-zero uid inside but
 * maps host uid 0 would still pass root's ownership checks on /proc/sys (the
 * core_pattern attack: a pipe handler there runs a workspace file as host root).
 * /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus and /proc/fs are bound read-only
 * on top of the sandbox's /proc whatever the daemon's uid.
 *
 * Nothing outlives the daemon. The child sets PR_SET_PDEATHSIG (after it changed uid,
 * which clears it) and bwrap gets --die-with-parent. bwrap's own child waits on an eventfd
 * for its uid map, which has no EOF: killing bwrap in that window would leave it blocked
 * forever, so a bwrap whose child we do not know yet is stopped first and its children
 * killed before it (bwrap_kill_unknown). A root daemon's sandboxes all sit in pids cgroups
 * named drun-sandbox-<pid>-<n>: sandbox_cleanup() empties and removes ours on exit and
 * sandbox_sweep() those of processes that died without it (kill -9).
 */
#include "sandbox/bwrap_int.h"

/* ---- the running sandbox ---------------------------------------------------------- */

const char *
bwrap_find(char *out, size_t size)
{
    static const char *fallback[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
    const char *path = getenv("PATH");

    /* The daemon's PATH first, as the operator set it up; then the usual places. */
    if (path != NULL) {
        const char *p = path;
        while (*p) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n > 0 && p[0] == '/' && n + 7 < size) {
                snprintf(out, size, "%.*s/bwrap", (int)n, p);
                if (access(out, X_OK) == 0) {
                    return out;
                }
            }
            p += n;
            if (*p == ':') {
                p++;
            }
        }
    }
    for (size_t i = 0; i < sizeof(fallback) / sizeof(fallback[0]); i++) {
        if (access(fallback[i], X_OK) == 0) {
            snprintf(out, size, "%s", fallback[i]);
            return out;
        }
    }
    return NULL;
}

void
sandbox_limits_default(struct sandbox_limits *l)
{
    l->timeout_ms = 30000;
    l->memory_bytes = (uint64_t)4 << 30;
    l->cpu_secs = 60;
    l->file_size_bytes = (uint64_t)1 << 30;
    l->nproc = 256;
    l->tmp_size_bytes = (uint64_t)256 << 20;
    l->max_output_bytes = (size_t)16 << 20;
    l->max_command_bytes = SANDBOX_COMMAND_MAX_DEFAULT;
}

void
bwrap_limits_fill(struct sandbox_limits *l, const struct sandbox_limits *in)
{
    struct sandbox_limits d;

    sandbox_limits_default(&d);
    *l = *in;
    if (l->timeout_ms <= 0) {
        l->timeout_ms = d.timeout_ms;
    }
    if (l->memory_bytes == 0) {
        l->memory_bytes = d.memory_bytes;
    }
    if (l->cpu_secs == 0) {
        l->cpu_secs = d.cpu_secs;
    }
    if (l->file_size_bytes == 0) {
        l->file_size_bytes = d.file_size_bytes;
    }
    if (l->nproc == 0) {
        l->nproc = d.nproc;
    }
    if (l->tmp_size_bytes == 0) {
        l->tmp_size_bytes = d.tmp_size_bytes;
    }
    if (l->max_output_bytes == 0) {
        l->max_output_bytes = d.max_output_bytes;
    }
    if (l->max_command_bytes == 0) {
        l->max_command_bytes = d.max_command_bytes;
    }
}

/* ---- start ------------------------------------------------------------------------ */

static int
open_pipe(int fds[2], struct err *err)
{
    if (pipe2(fds, O_CLOEXEC) < 0) {
        return err_set(err, ERR_IO, "cannot create a pipe: %s", strerror(errno));
    }
    return 0;
}

static void
set_rl(struct rlimit *r, uint64_t v)
{
    r->rlim_cur = (rlim_t)v;
    r->rlim_max = (rlim_t)v;
}

/*
 * Checks the spec, forks bwrap and sets up the handles that watch it. Cold (warm = 0): the
 * command goes into a memfd bound read-only at COMMAND_PATH. Warm: bwrap gets --block-fd
 * and a script pipe instead; *block_wr and *script_wr receive the daemon's ends, and
 * nothing past bwrap's set-up happens until the block fd is written. The caller sets
 * sb->cb and starts the timer. If argv_out is not NULL the argv moves there.
 */
int
bwrap_spawn(uv_loop_t *loop, const struct sandbox_spec *spec, int warm, struct sandbox **out,
            int *block_wr, int *script_wr, struct argv_vec *argv_out, struct err *err)
{
    struct sandbox *sb = NULL;
    struct argv_vec a = {0};
    struct child_plan cp;
    char bwrap[SANDBOX_PATH_MAX];
    int p_out[2] = {-1, -1}, p_err[2] = {-1, -1}, p_st[2] = {-1, -1}, p_ex[2] = {-1, -1};
    int devnull = -1, seccomp_fd = -1, cmd_fd = -1, cgroup_fd = -1;
    int p_block[2] = {-1, -1}, p_script[2] = {-1, -1}, p_map[2] = {-1, -1};
    int rc = -1, e = 0;
    ssize_t n;
    pid_t pid;

    *out = NULL;
    sb = mem_calloc(1, sizeof(*sb));
    if (sb == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory starting the sandbox");
    }
    sb->bwrap_pidfd = sb->child_pidfd = sb->status_keep = -1;
    bwrap_limits_fill(&sb->lim, &spec->limits);
    if (bwrap_spec_check(spec, &sb->lim, err) < 0) {
        goto out;
    }
    if (bwrap_find(bwrap, sizeof(bwrap)) == NULL) {
        err_set(err, ERR_NOTFOUND,
                "bwrap not found; install bubblewrap (e.g. 'apt-get install bubblewrap') to run "
                "commands");
        goto out;
    }
    if (bwrap_build_argv(spec, &sb->lim, bwrap, warm ? ARGV_WARM : ARGV_COLD, &a, err) < 0) {
        goto out;
    }
    if (open_pipe(p_out, err) < 0 || open_pipe(p_err, err) < 0 || open_pipe(p_st, err) < 0 ||
        open_pipe(p_ex, err) < 0) {
        goto out;
    }
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        err_set(err, ERR_IO, "cannot open '/dev/null': %s", strerror(errno));
        goto out;
    }
    seccomp_fd = bwrap_seccomp_memfd(err);
    if (seccomp_fd < 0) {
        goto out;
    }
    if (warm) {
        if (open_pipe(p_block, err) < 0 || open_pipe(p_script, err) < 0) {
            goto out;
        }
        cmd_fd = p_script[0];
        p_script[0] = -1;
        goto bwrap_spawn;
    }
    cmd_fd = memfd_create("drun-command", MFD_CLOEXEC);
    if (cmd_fd < 0) {
        err_set(err, ERR_IO, "cannot create a memfd for the command: %s", strerror(errno));
        goto out;
    }
    for (size_t off = 0; off < spec->command_len; off += (size_t)n) {
        n = write(cmd_fd, spec->command + off, spec->command_len - off);
        if (n <= 0) {
            err_set(err, ERR_IO, "cannot write the command to its memfd: %s", strerror(errno));
            goto out;
        }
    }
    if (lseek(cmd_fd, 0, SEEK_SET) < 0) {
        err_set(err, ERR_IO, "cannot rewind the command memfd: %s", strerror(errno));
        goto out;
    }
bwrap_spawn:
    /* uid 0 is exempt from RLIMIT_NPROC; only a cgroup bounds a root daemon's sandbox. */
    cgroup_fd = geteuid() == 0 ? bwrap_cgroup_make(sb) : -1;
    if (geteuid() == 0 && cgroup_fd < 0) {
        static int warned;
        if (!warned++) {
            log_warn("running as root without a usable pids cgroup: the sandbox process limit "
                     "is not enforced; run drun-mcp as a normal user");
        }
    }

    memset(&cp, 0, sizeof(cp));
    cp.bwrap = bwrap;
    cp.argv = a.v;
    cp.src[0] = devnull;
    cp.src[1] = p_out[1];
    cp.src[2] = p_err[1];
    cp.src[FD_STATUS] = p_st[1];
    cp.src[FD_SECCOMP] = seccomp_fd;
    cp.src[FD_COMMAND] = cmd_fd;
    cp.src[FD_EXECERR] = p_ex[1];
    cp.src[FD_BLOCK] = p_block[0];
    cp.cgroup_fd = cgroup_fd;
    for (size_t i = 0; i < spec->n_overlays && i < SANDBOX_OVERLAYS_MAX; i++) {
        if (spec->overlays[i].dir_fd > 0) {
            cp.ov[i] = spec->overlays[i].dir_fd;
            cp.n_ov = i + 1;
        } else {
            cp.ov[i] = -1;
        }
    }
    set_rl(&cp.rl_as, sb->lim.memory_bytes);
    cp.rl_cpu.rlim_cur = (rlim_t)sb->lim.cpu_secs;
    cp.rl_cpu.rlim_max = (rlim_t)sb->lim.cpu_secs + 1; /* SIGXCPU first, then SIGKILL */
    set_rl(&cp.rl_fsize, sb->lim.file_size_bytes);
    set_rl(&cp.rl_core, 0);
    if (geteuid() == 0) {
        uint32_t uid, gid;
        sandbox_user(spec, &uid, &gid);
        cp.drop = 1;
        cp.uid = (uid_t)uid;
        cp.gid = (gid_t)gid;
    }
    cp.parent = getpid();
    cp.map_rd = cp.map_wr = -1;
    /*
     * Not root: a pid namespace needs a user namespace of its own, in which the child maps
     * just our uid and gid (written by us below, the child waits for them on a pipe that
     * reaches EOF if we die). Where user namespaces cannot nest, plain fork.
     */
    cp.own_pidns = geteuid() == 0 || bwrap_userns_nest_ok;
    cp.userns = geteuid() != 0 && bwrap_userns_nest_ok;
    if (cp.userns && pipe2(p_map, O_CLOEXEC) == 0) {
        cp.map_rd = p_map[0];
        cp.map_wr = p_map[1];
    } else if (cp.userns) {
        cp.own_pidns = cp.userns = 0;
    }
    sb->own_pidns = cp.own_pidns;

    sb->start_ms = time_mono_ms();
    pid = bwrap_spawn_child(&cp);
    if (pid < 0 && cp.userns) {
        bwrap_userns_nest_ok = 0; /* not allowed here: every later sandbox forks plainly */
        cp.own_pidns = cp.userns = 0;
        sb->own_pidns = 0;
        pid = bwrap_spawn_child(&cp);
    }
    if (pid < 0) {
        err_set(err, ERR_IO, "cannot start the sandbox process: %s", strerror(errno));
        goto out;
    }
    if (cp.userns && bwrap_userns_map(pid, p_map[1]) < 0) {
        int st;
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        err_set(err, ERR_IO, "cannot map the sandbox's user namespace: %s", strerror(errno));
        goto out;
    }
    sb->bwrap_pid = pid;
    close(p_out[1]);
    close(p_err[1]);
    close(p_st[1]);
    close(p_ex[1]);
    p_out[1] = p_err[1] = p_st[1] = p_ex[1] = -1;
    if (p_block[0] >= 0) {
        close(p_block[0]);
        p_block[0] = -1;
    }
    /* The exec-error pipe closes on a successful exec, or carries errno. */
    do {
        n = read(p_ex[0], &e, sizeof(e));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(e)) {
        int st;
        waitpid(pid, &st, 0);
        err_set(err, e == ENOENT ? ERR_NOTFOUND : ERR_IO, "cannot start '%s': %s", bwrap,
                strerror(e));
        goto out;
    }
    sb->bwrap_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (sb->bwrap_pidfd < 0) {
        int st;
        e = errno;
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        err_set(err, ERR_IO,
                "cannot watch the sandbox (pidfd_open: %s); Linux 5.3 or later is "
                "needed",
                strerror(e));
        goto out;
    }
    sb->loop = loop;
    buf_init(&sb->status, STATUS_MAX);
    buf_init(&sb->res.out.data, sb->lim.max_output_bytes);
    buf_init(&sb->res.err.data, sb->lim.max_output_bytes);
    uv_poll_init(loop, &sb->exit_poll, sb->bwrap_pidfd);
    uv_pipe_init(loop, &sb->out_pipe, 0);
    uv_pipe_init(loop, &sb->err_pipe, 0);
    uv_pipe_init(loop, &sb->status_pipe, 0);
    uv_timer_init(loop, &sb->timer);
    uv_timer_init(loop, &sb->tick);
    sb->exit_poll.data = sb->out_pipe.data = sb->err_pipe.data = sb->status_pipe.data = sb;
    sb->timer.data = sb->tick.data = sb;
    sb->handles = 6;
    uv_pipe_open(&sb->out_pipe, p_out[0]);
    uv_pipe_open(&sb->err_pipe, p_err[0]);
    sb->status_keep = fcntl(p_st[0], F_DUPFD_CLOEXEC, 3);
    uv_pipe_open(&sb->status_pipe, p_st[0]);
    p_out[0] = p_err[0] = p_st[0] = -1;
    sb->out_open = sb->err_open = sb->status_open = 1;
    uv_read_start((uv_stream_t *)&sb->out_pipe, bwrap_on_alloc, bwrap_on_read);
    uv_read_start((uv_stream_t *)&sb->err_pipe, bwrap_on_alloc, bwrap_on_read);
    uv_read_start((uv_stream_t *)&sb->status_pipe, bwrap_on_alloc, bwrap_on_status);
    uv_poll_start(&sb->exit_poll, UV_READABLE, bwrap_on_exit_ready);
    if (warm) {
        *block_wr = p_block[1];
        *script_wr = p_script[1];
        p_block[1] = p_script[1] = -1;
    }
    if (argv_out != NULL) {
        *argv_out = a;
        memset(&a, 0, sizeof(a));
    }
    *out = sb;
    sb = NULL;
    rc = 0;
out:
    if (sb != NULL && sb->cgroup[0]) {
        rmdir(sb->cgroup);
    }
    mem_free(sb);
    bwrap_argv_free(&a);
    for (int i = 0; i < 2; i++) {
        if (p_out[i] >= 0) {
            close(p_out[i]);
        }
        if (p_err[i] >= 0) {
            close(p_err[i]);
        }
        if (p_st[i] >= 0) {
            close(p_st[i]);
        }
        if (p_ex[i] >= 0) {
            close(p_ex[i]);
        }
        if (p_block[i] >= 0) {
            close(p_block[i]);
        }
        if (p_script[i] >= 0) {
            close(p_script[i]);
        }
        if (p_map[i] >= 0) {
            close(p_map[i]);
        }
    }
    if (devnull >= 0) {
        close(devnull);
    }
    if (seccomp_fd >= 0) {
        close(seccomp_fd);
    }
    if (cmd_fd >= 0) {
        close(cmd_fd);
    }
    if (cgroup_fd >= 0) {
        close(cgroup_fd);
    }
    return rc;
}

int bwrap_start_always(uv_loop_t *loop, const struct sandbox_spec *spec,
                       const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err);

int
sandbox_start(uv_loop_t *loop, const struct sandbox_spec *spec, const struct sandbox_callbacks *cb,
              struct sandbox **out, struct err *err)
{
    struct sandbox *sb = NULL;

    *out = NULL;
    if (cb == NULL || cb->on_exit == NULL) {
        return err_set(err, ERR_INVAL, "sandbox_start needs an on_exit callback");
    }
    if (sandbox_warm_mode() == SANDBOX_WARM_ALWAYS) {
        return bwrap_start_always(loop, spec, cb, out, err);
    }
    if (bwrap_spawn(loop, spec, 0, &sb, NULL, NULL, NULL, err) < 0) {
        return -1;
    }
    sb->cb = *cb;
    sb->start_ms = time_mono_ms();
    bwrap_clock_start(sb);
    *out = sb;
    return 0;
}
