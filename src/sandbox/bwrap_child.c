/*
 * bwrap_child.c - the forked child between fork and exec of bwrap: rlimits, the pids
 * cgroup, fixed fds, signal dispositions and the uid switch (async-signal-safe calls only).
 */
#include "sandbox/bwrap_int.h"

/* ---- the child, between fork and exec (async-signal-safe calls only) ------------------ */

static void
child_fail(int code)
{
    int e = code;
    ssize_t w = write(FD_EXECERR, &e, sizeof(e));
    (void)w;
    _exit(127);
}

__attribute__((noreturn)) static void
child_exec(const struct child_plan *cp)
{
    static char *const no_env[] = {NULL};
    unsigned long dfl[8] = {0}; /* the kernel's struct sigaction, zeroed: SIG_DFL, no flags */
    sigset_t none;
    int tmp[FD_FIRST_FREE];
    int tov[SANDBOX_OVERLAYS_MAX];

    if (cp->userns) {
        /* Wait until the daemon has mapped our uid; EOF means it died: give up. */
        char b;
        close(cp->map_wr);
        if (read(cp->map_rd, &b, 1) != 1) {
            _exit(127);
        }
        close(cp->map_rd);
    }
    /*
     * The raw syscall, not sigaction(): glibc refuses signals 32 and 33 (its own), and a
     * daemon started by a parent that ignored them (make does) would pass that on to
     * every command. SIGKILL and SIGSTOP fail; that is fine.
     */
    for (int s = 1; s < NSIG; s++) {
        syscall(SYS_rt_sigaction, s, dfl, NULL, (size_t)(NSIG - 1) / 8);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Join the pids cgroup before bwrap exists, so no process is ever outside it. */
    if (cp->cgroup_fd >= 0 && write(cp->cgroup_fd, "0", 1) != 1) {
        int e = errno;
        ssize_t w = write(cp->src[FD_EXECERR], &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    /*
     * A root daemon's command never runs as host root: become the sandbox user now, after
     * joining the cgroup (which needs root) and before bwrap exists, so bwrap's user
     * namespace maps that uid. Raw syscalls: glibc's set*id wrappers synchronise every
     * thread of the process, which a child sharing the parent's memory must not do.
     * Groups first, then gid, then uid (after setresuid nothing else may change). Each is
     * checked: a failed drop must never exec bwrap as root.
     */
    if (cp->drop) {
        if (syscall(SYS_setgroups, 0, NULL) != 0 ||
            syscall(SYS_setresgid, cp->gid, cp->gid, cp->gid) != 0 ||
            syscall(SYS_setresuid, cp->uid, cp->uid, cp->uid) != 0 ||
            syscall(SYS_getuid) != (long)cp->uid || syscall(SYS_geteuid) != (long)cp->uid) {
            int e = errno ? errno : EPERM;
            ssize_t w = write(cp->src[FD_EXECERR], &e, sizeof(e));
            (void)w;
            _exit(127);
        }
    }
    /*
     * Die with the daemon, even before bwrap reads --die-with-parent; set after the uid
     * change, which clears it. A daemon that died before this line is seen by getppid.
     */
    if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 ||
        (!cp->own_pidns && syscall(SYS_getppid) != (long)cp->parent)) {
        _exit(127);
    }
    /* Move every fd above the targets first so no dup2 clobbers a source. */
    for (int i = 0; i < FD_FIRST_FREE; i++) {
        tmp[i] = cp->src[i] < 0 ? -1 : fcntl(cp->src[i], F_DUPFD, 64);
        if (cp->src[i] >= 0 && tmp[i] < 0) {
            _exit(127);
        }
    }
    for (size_t i = 0; i < cp->n_ov; i++) {
        tov[i] = cp->ov[i] < 0 ? -1 : fcntl(cp->ov[i], F_DUPFD, 64 + FD_FIRST_FREE);
        if (cp->ov[i] >= 0 && tov[i] < 0) {
            _exit(127);
        }
    }
    for (int i = 0; i < FD_FIRST_FREE; i++) {
        if (tmp[i] < 0) {
            close(i); /* not used in this mode: the number stays free */
        } else if (dup2(tmp[i], i) < 0) {
            _exit(127);
        }
    }
    for (size_t i = 0; i < cp->n_ov; i++) {
        if (tov[i] < 0) {
            close(FD_FIRST_FREE + (int)i); /* an overlay bound by path: the number stays free */
        } else if (dup2(tov[i], FD_FIRST_FREE + (int)i) < 0) {
            _exit(127);
        }
    }
    fcntl(FD_EXECERR, F_SETFD, FD_CLOEXEC);
    if (syscall(SYS_close_range, FD_FIRST_FREE + (unsigned)cp->n_ov, ~0U, 0) < 0) {
        for (int fd = FD_FIRST_FREE + (int)cp->n_ov; fd < 65536; fd++) {
            close(fd);
        }
    }
    if (setrlimit(RLIMIT_AS, &cp->rl_as) < 0 || setrlimit(RLIMIT_CPU, &cp->rl_cpu) < 0 ||
        setrlimit(RLIMIT_FSIZE, &cp->rl_fsize) < 0 || setrlimit(RLIMIT_CORE, &cp->rl_core) < 0) {
        child_fail(errno);
    }
    /* bwrap gets an environment built from scratch: its pid 1 shows nothing of ours. */
    execve(cp->bwrap, cp->argv, no_env);
    child_fail(errno);
    _exit(127);
}

/*
 * Starts the child that execs bwrap. A plain fork: a clone(CLONE_VM | CLONE_VFORK) child
 * (what posix_spawn does) saved ~1 ms of page-table copying, but a command in a prepared
 * sandbox was once seen with every signal blocked (the mask held across the clone), so it
 * was taken out until that is understood; see docs/architecture.md. Returns the pid, or
 * -1 with errno set.
 */
/* 0 once a user namespace could not be made for the pid namespace (see bwrap_spawn). */
int bwrap_userns_nest_ok = 1;

/* Writes "what" to /proc/pid/file. */
static int
proc_write(pid_t pid, const char *file, const char *what)
{
    char path[64];
    size_t n = strlen(what);
    int fd, ok;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ok = write(fd, what, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

/*
 * Maps our own uid and gid (only them) in the child's new user namespace, then lets it
 * go on. Inside, bwrap runs as the same uid, without capabilities once it is exec'd, and
 * makes its own nested user namespace as usual.
 */
int
bwrap_userns_map(pid_t pid, int map_wr)
{
    char line[64];

    if (proc_write(pid, "setgroups", "deny") < 0) {
        return -1;
    }
    snprintf(line, sizeof(line), "%lu %lu 1\n", (unsigned long)getegid(), (unsigned long)getegid());
    if (proc_write(pid, "gid_map", line) < 0) {
        return -1;
    }
    snprintf(line, sizeof(line), "%lu %lu 1\n", (unsigned long)geteuid(), (unsigned long)geteuid());
    if (proc_write(pid, "uid_map", line) < 0) {
        return -1;
    }
    return write(map_wr, "x", 1) == 1 ? 0 : -1;
}

pid_t
bwrap_spawn_child(const struct child_plan *cp)
{
    pid_t pid;

    /*
     * A root daemon starts bwrap as pid 1 of a pid namespace of its own: when bwrap dies
     * for any reason (the daemon killed with -9 takes it along through PDEATHSIG), the
     * kernel kills everything in that namespace, including a sandbox pid 1 that bwrap
     * made but had not yet released from its uid-map handshake (an eventfd wait that no
     * one would ever end). The raw clone without a new stack behaves as fork.
     */
    if (cp->own_pidns) {
        unsigned long flags = CLONE_NEWPID | SIGCHLD | (cp->userns ? CLONE_NEWUSER : 0);
        pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    } else {
        pid = fork();
    }

    if (pid == 0) {
        child_exec(cp);
    }
    return pid;
}
