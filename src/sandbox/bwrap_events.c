/*
 * bwrap_events.c - watching a running bwrap on the event loop: its output and status pipes,
 * its pidfd, the timeout, killing, and the result handed to the caller.
 */
#include "sandbox/bwrap_int.h"

/* ---- event handling --------------------------------------------------------------- */

static void
on_close(uv_handle_t *h)
{
    struct sandbox *sb = h->data;

    if (h == (uv_handle_t *)&sb->exit_poll && sb->bwrap_pidfd >= 0) {
        close(sb->bwrap_pidfd);
        sb->bwrap_pidfd = -1;
    }
    if (h == (uv_handle_t *)&sb->exit_poll) {
        bwrap_status_release(sb);
    }
    if (--sb->handles == 0) {
        if (sb->child_pidfd >= 0) {
            close(sb->child_pidfd);
            sb->child_pidfd = -1;
        }
        buf_release(&sb->status);
        mem_free(sb->script);
        mem_free(sb);
    }
}

/*
 * bwrap writes the sandbox's pid to the status pipe after it has made the sandbox's pid 1
 * and before it lets that pid 1 go on (an eventfd, which has no EOF). Were our read end
 * closed first (a shutdown closes every handle), that write would kill bwrap with SIGPIPE
 * right there and leave the pid 1 blocked forever. So a second read end stays open until
 * bwrap has been reaped.
 */
void
bwrap_status_release(struct sandbox *sb)
{
    if (sb->status_keep >= 0) {
        close(sb->status_keep);
        sb->status_keep = -1;
    }
}

void
bwrap_close_handle(struct sandbox *sb, uv_handle_t *h)
{
    (void)sb;
    if (!uv_is_closing(h)) {
        uv_close(h, on_close);
    }
}

void
bwrap_signal_kill(int pidfd, pid_t pid)
{
    if (pidfd >= 0) {
        if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) == 0 || errno == ESRCH) {
            return;
        }
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
    }
}

static void on_timer(uv_timer_t *t);

/*
 * Kills bwrap and every child it has, for a bwrap that has not reported its child yet.
 * bwrap's child (the sandbox's pid 1) first waits on an eventfd until bwrap has set up
 * its uid map; an eventfd never reaches EOF, so killing bwrap alone in that window leaves
 * the child blocked forever, reparented to init. So: stop bwrap (a stopped process forks
 * nothing), wait until it is stopped or gone, SIGKILL each of its children (a pid 1 takes
 * its namespace along), then bwrap itself. The caller reaps bwrap. Synchronous: bwrap is
 * our child, so waitid returns as soon as the stop (or its death) takes effect.
 */
void
bwrap_kill_unknown(struct sandbox *sb)
{
    char path[96], text[512];
    siginfo_t si;
    ssize_t n;
    int fd;

    if (sb->bwrap_pid <= 0) {
        return;
    }
    kill(sb->bwrap_pid, SIGSTOP);
    memset(&si, 0, sizeof(si));
    while (waitid(P_PID, (id_t)sb->bwrap_pid, &si, WSTOPPED | WEXITED | WNOWAIT) < 0 &&
           errno == EINTR) {
    }
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)sb->bwrap_pid,
             (int)sb->bwrap_pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0) {
        close(fd);
    }
    if (n > 0) {
        text[n] = '\0';
        for (char *p = text, *end; *p != '\0'; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p) {
                break;
            }
            if (pid > 1 && pid <= INT_MAX) {
                kill((pid_t)pid, SIGKILL);
            }
        }
    }
    bwrap_signal_kill(sb->bwrap_pidfd, sb->bwrap_pid);
}

/* Tells the caller how long the command has run, whether or not it printed anything. */
static void
on_tick(uv_timer_t *t)
{
    struct sandbox *sb = t->data;

    if (!sb->exited && !sb->killing && sb->cb.on_tick != NULL) {
        sb->cb.on_tick(sb->cb.ud, time_mono_ms() - sb->start_ms);
    }
}

/* Starts the timeout and, if the caller asked for one, the tick; the command runs now. */
void
bwrap_clock_start(struct sandbox *sb)
{
    uv_timer_start(&sb->timer, on_timer, (uint64_t)sb->lim.timeout_ms, 0);
    if (sb->cb.on_tick != NULL && sb->cb.tick_ms > 0) {
        uv_timer_start(&sb->tick, on_tick, (uint64_t)sb->cb.tick_ms, (uint64_t)sb->cb.tick_ms);
    }
}

/* Kills the sandbox's pid 1 (which takes its whole pid namespace along), then bwrap. */
void
bwrap_kill_all(struct sandbox *sb)
{
    if (sb->exited) {
        return;
    }
    sb->killing = 1;
    uv_timer_stop(&sb->tick);
    if (sb->child_pid > 0) {
        bwrap_signal_kill(sb->child_pidfd, sb->child_pid);
        bwrap_signal_kill(sb->bwrap_pidfd, 0);
    } else {
        bwrap_kill_unknown(sb);
    }
    /* Pipes reach EOF once the namespace is gone; bound the wait anyway. */
    uv_timer_stop(&sb->timer);
    uv_timer_start(&sb->timer, on_timer, DRAIN_MS, 0);
}

static int
contains_ci(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        if (strncasecmp(hay + i, needle, m) == 0) {
            return 1;
        }
    }
    return 0;
}

/*
 * Memory is limited with RLIMIT_AS (set before bwrap, inherited by the command): a refused
 * allocation is an mmap/brk that fails with ENOMEM, which no one outside the process can
 * observe. So the answer comes from what the runtime prints as it dies, one message per
 * common runtime: libc (strerror ENOMEM), coreutils and glibc ("memory exhausted"),
 * Python (MemoryError), Perl and Node ("Out of memory"), C++ (std::bad_alloc), Rust
 * ("memory allocation of N bytes failed"), Go ("cannot allocate memory"), and
 * "failed to allocate" / "allocation failed" (V8, jemalloc, many C programs).
 */
static int
memory_refused(const char *tail, size_t tn)
{
    static const char *const words[] = {
        "cannot allocate memory", "out of memory",     "memoryerror",
        "memory exhausted",       "bad_alloc",         "memory allocation of",
        "failed to allocate",     "allocation failed",
    };

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (contains_ci(tail, tn, words[i])) {
            return 1;
        }
    }
    return 0;
}

static void
finish(struct sandbox *sb)
{
    struct sandbox_result *r = &sb->res;
    const char *tail = r->err.tail;
    size_t tn = r->err.tail_len;
    int st = sb->wait_status;

    if (sb->done) {
        return;
    }
    sb->done = 1;
    r->duration_ms = time_mono_ms() - sb->start_ms;
    if (WIFEXITED(st)) {
        r->exit_code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r->exit_code = 128 + WTERMSIG(st);
    } else {
        r->exit_code = 255;
    }
    if (r->exit_code > 128 && r->exit_code < 128 + NSIG) {
        r->signal = r->exit_code - 128;
    }
    if (sb->child_pid <= 0 && !sb->killing) {
        /* bwrap never started the command: its own setup failed. */
        r->failed = 1;
        err_set(&r->error, ERR_IO,
                "the sandbox could not start (bwrap exited %d: %.*s); run 'drun-mcp doctor' "
                "for the fix",
                r->exit_code, (int)(tn > 160 ? 160 : tn), tail);
    }
    if (r->timed_out) {
        r->limit_hit = "timeout";
    } else if (sb->cgroup[0] && bwrap_cgroup_hit_max(sb)) {
        r->limit_hit = "processes";
    } else if (r->signal == SIGXCPU) {
        r->limit_hit = "cpu";
    } else if (r->signal == SIGXFSZ || (r->exit_code && contains_ci(tail, tn, "file too large"))) {
        r->limit_hit = "file_size";
    } else if (contains_ci(tail, tn, "cannot fork") || contains_ci(tail, tn, "fork: retry") ||
               contains_ci(tail, tn, "fork: resource temporarily")) {
        /* A refused fork shows as the shell's message even when the script still exits 0. */
        r->limit_hit = "processes";
    } else if (r->exit_code && memory_refused(tail, tn)) {
        r->limit_hit = "memory";
    } else if (r->exit_code && (contains_ci(tail, tn, "no space left on device") ||
                                contains_ci(tail, tn, "disk quota exceeded"))) {
        /* ENOSPC from the bounded workspace (or the /tmp tmpfs): see docs/security.md. */
        r->limit_hit = "disk";
    } else if (r->out.truncated || r->err.truncated) {
        r->limit_hit = "output";
    }
    uv_timer_stop(&sb->timer);
    bwrap_close_handle(sb, (uv_handle_t *)&sb->timer);
    uv_timer_stop(&sb->tick);
    bwrap_close_handle(sb, (uv_handle_t *)&sb->tick);
    bwrap_close_handle(sb, (uv_handle_t *)&sb->exit_poll);
    if (sb->child_watch) {
        bwrap_close_handle(sb, (uv_handle_t *)&sb->child_poll);
    }
    bwrap_close_handle(sb, (uv_handle_t *)&sb->out_pipe);
    bwrap_close_handle(sb, (uv_handle_t *)&sb->err_pipe);
    bwrap_close_handle(sb, (uv_handle_t *)&sb->status_pipe);
    if (sb->script_open) {
        sb->script_open = 0;
        bwrap_close_handle(sb, (uv_handle_t *)&sb->script_pipe);
    }
    /* The result moves to the caller; the handle frees itself in the close callbacks. */
    sb->cb.on_exit(sb->cb.ud, r);
    /*
     * The cgroup is empty (the namespace is gone and bwrap reaped); removing it can wait
     * until the caller has answered. sb lives on until its close callbacks, which uv runs
     * on a later turn of the loop, never from inside uv_close.
     */
    if (sb->cgroup[0]) {
        bwrap_cgroup_remove(sb->cgroup);
    }
}

static void
maybe_finish(struct sandbox *sb)
{
    /*
     * bwrap may exit as soon as its pid 1 reports the status, while pid 1 is still
     * tearing the namespace down; wait for pid 1 too, so nothing is left when we answer.
     */
    if (sb->exited && !sb->out_open && !sb->err_open && (sb->child_gone || !sb->child_watch) &&
        (sb->child_pid > 0 || !sb->status_open)) {
        /* The last condition: bwrap's status line may still be unread when its exit and
         * the output EOFs are handled first (a busy machine); until that pipe's EOF, no
         * child pid does not mean the sandbox failed to start. Every writer of the pipe
         * is gone once bwrap and its pid 1 are, so the EOF comes. */
        finish(sb);
    }
}

void
bwrap_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct sandbox *sb = h->data;
    (void)suggested;
    b->base = sb->readbuf;
    b->len = sizeof(sb->readbuf);
}

static void
capture(struct sandbox_output *o, size_t max, const char *p, size_t n)
{
    size_t room = max > o->data.len ? max - o->data.len : 0;
    size_t keep = n < room ? n : room;

    o->total += n;
    if (keep > 0 && buf_append(&o->data, p, keep) < 0) {
        keep = 0;
    }
    if (keep < n) {
        o->truncated = 1;
    }
    if (n >= SANDBOX_TAIL_BYTES) {
        memcpy(o->tail, p + n - SANDBOX_TAIL_BYTES, SANDBOX_TAIL_BYTES);
        o->tail_len = SANDBOX_TAIL_BYTES;
    } else {
        size_t drop =
            o->tail_len + n > SANDBOX_TAIL_BYTES ? o->tail_len + n - SANDBOX_TAIL_BYTES : 0;
        memmove(o->tail, o->tail + drop, o->tail_len - drop);
        o->tail_len -= drop;
        memcpy(o->tail + o->tail_len, p, n);
        o->tail_len += n;
    }
}

void
bwrap_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct sandbox *sb = s->data;
    int is_out = s == (uv_stream_t *)&sb->out_pipe;

    if (n > 0) {
        struct sandbox_output *o = is_out ? &sb->res.out : &sb->res.err;
        capture(o, sb->lim.max_output_bytes, b->base, (size_t)n);
        if (sb->cb.on_output != NULL) {
            sb->cb.on_output(sb->cb.ud, is_out ? SANDBOX_STDOUT : SANDBOX_STDERR, b->base,
                             (size_t)n);
        }
        return;
    }
    if (n < 0) {
        uv_read_stop(s);
        if (is_out) {
            sb->out_open = 0;
        } else {
            sb->err_open = 0;
        }
        maybe_finish(sb);
    }
}

/* The host pid of process pid's first child (from /proc), or 0. */
pid_t
bwrap_only_child(pid_t pid)
{
    char path[96], text[64];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    text[n] = '\0';
    long c = strtol(text, NULL, 10);
    return c > 1 && c <= INT_MAX ? (pid_t)c : 0;
}

static void
on_child_gone(uv_poll_t *h, int status, int events)
{
    struct sandbox *sb = h->data;
    (void)status;
    (void)events;

    uv_poll_stop(h);
    sb->child_gone = 1;
    maybe_finish(sb);
}

void
bwrap_on_status(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct sandbox *sb = s->data;
    const char *p;

    if (n < 0) {
        uv_read_stop(s);
        sb->status_open = 0;
        maybe_finish(sb);
        return;
    }
    if (n == 0 || buf_append(&sb->status, b->base, (size_t)n) < 0 || sb->child_pid > 0) {
        return;
    }
    p = strstr(buf_cstr(&sb->status), "\"child-pid\"");
    if (p != NULL && strchr(p, '}') != NULL) {
        p = strchr(p, ':');
        if (p != NULL) {
            long pid = strtol(p + 1, NULL, 10);
            if (sb->own_pidns) {
                /* bwrap counts in its own namespace; ours is its only child. */
                pid = bwrap_only_child(sb->bwrap_pid);
            }
            if (pid > 1 && pid <= INT_MAX) {
                sb->child_pid = (pid_t)pid;
                /* A pidfd pins the process: a later kill cannot hit a reused pid. */
                sb->child_pidfd = (int)syscall(SYS_pidfd_open, sb->child_pid, 0);
                if (sb->child_pidfd >= 0 &&
                    uv_poll_init(sb->loop, &sb->child_poll, sb->child_pidfd) == 0) {
                    sb->child_poll.data = sb;
                    sb->child_watch = 1;
                    sb->handles++;
                    uv_poll_start(&sb->child_poll, UV_READABLE, on_child_gone);
                    if (sb->prepared) {
                        uv_unref((uv_handle_t *)&sb->child_poll);
                    }
                }
                if (sb->killing) {
                    bwrap_signal_kill(sb->child_pidfd, sb->child_pid);
                }
            }
        }
    }
}

void
bwrap_on_exit_ready(uv_poll_t *h, int status, int events)
{
    struct sandbox *sb = h->data;
    int st;
    pid_t r;
    (void)status;
    (void)events;

    r = waitpid(sb->bwrap_pid, &st, WNOHANG);
    if (r == 0) {
        return;
    }
    uv_poll_stop(h);
    sb->exited = 1;
    sb->wait_status = r == sb->bwrap_pid ? st : (255 << 8);
    bwrap_status_release(sb);
    /* pid 1 of the namespace is gone with bwrap; the pipes follow. Bound the wait. */
    if (!sb->killing) {
        uv_timer_stop(&sb->timer);
        uv_timer_start(&sb->timer, on_timer, DRAIN_MS, 0);
    }
    maybe_finish(sb);
}

static void
on_timer(uv_timer_t *t)
{
    struct sandbox *sb = t->data;

    if (!sb->exited && !sb->killing) {
        sb->res.timed_out = 1;
        bwrap_kill_all(sb);
        return;
    }
    if (!sb->exited) {
        /* SIGKILL was sent DRAIN_MS ago and bwrap still is not reaped: should not happen. */
        log_warn("sandbox process %d did not exit after SIGKILL", (int)sb->bwrap_pid);
        uv_timer_start(&sb->timer, on_timer, DRAIN_MS, 0);
        return;
    }
    /* Exited but a pipe is still open: something outside the namespace holds it. */
    log_warn("sandbox process %d: output pipes still open %d ms after it ended", (int)sb->bwrap_pid,
             DRAIN_MS);
    sb->out_open = sb->err_open = 0;
    sb->child_gone = 1;
    maybe_finish(sb);
}

void
sandbox_cancel(struct sandbox *sb)
{
    if (sb == NULL || sb->done) {
        return;
    }
    if (!sb->res.cancelled && !sb->exited) {
        sb->res.cancelled = 1;
        bwrap_kill_all(sb);
    }
}
