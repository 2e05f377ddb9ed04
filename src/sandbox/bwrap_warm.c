/*
 * bwrap_warm.c - prepared (warm) sandboxes: a bwrap built in advance and waiting on
 * --block-fd, reused only for a spec that rebuilds exactly the same argv.
 */
#include "sandbox/bwrap_int.h"

/* ---- prepared (warm) sandboxes ------------------------------------------------------ */

/*
 * A prepared sandbox is a bwrap that has built every namespace and mount and waits on
 * --block-fd, before it loads the seccomp filter or execs anything: no process in it can
 * run user code. It is tied to exactly what it was built from: the full bwrap argv (every
 * bind, the environment, the tmpfs sizes, the process limit in the prelude), the rlimits
 * set before exec, and the identity (device, inode) of every bind source, so a directory
 * replaced under the same name is noticed too. sandbox_prepared_valid() rebuilds all of
 * that from the caller's current spec and accepts only an exact match; anything else is
 * discarded and the call goes cold, so a command never runs under an older policy.
 */
struct bind_id {
    dev_t dev;
    ino_t ino;
};

struct sandbox_prep {
    struct sandbox *sb; /* NULL once bwrap has exited or the command was released */
    int block_wr;       /* our end of --block-fd */
    int script_wr;      /* our end of the script pipe */
    struct argv_vec argv;
    struct sandbox_limits lim;
    struct bind_id *ids;
    size_t n_ids;
    uint32_t uid, gid; /* the host user it runs as */
    int orphaned;      /* freed by its owner while bwrap was still being reaped */
};

enum sandbox_warm
sandbox_warm_mode(void)
{
    const char *v = getenv("DRUN_SANDBOX_WARM");

    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0 || strcmp(v, "1") == 0) {
        return SANDBOX_WARM_AUTO;
    }
    if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "cold") == 0) {
        return SANDBOX_WARM_OFF;
    }
    if (strcmp(v, "always") == 0 || strcmp(v, "warm") == 0) {
        return SANDBOX_WARM_ALWAYS;
    }
    return SANDBOX_WARM_AUTO;
}

/* The (device, inode) of every --bind / --ro-bind source in a, in order. */
static int
bind_ids(const struct argv_vec *a, const struct sandbox_spec *spec, struct bind_id **out, size_t *n,
         struct err *err)
{
    struct bind_id *v;
    size_t k = 0;

    *out = NULL;
    *n = 0;
    v = mem_calloc(a->n / 3 + 1, sizeof(*v));
    if (v == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory preparing a sandbox");
    }
    for (size_t i = 0; i + 1 < a->n; i++) {
        struct stat st;
        if (strcmp(a->v[i], "--ro-bind-fd") == 0) {
            /* An overlay's fd (FD_FIRST_FREE + its index): the directory it holds. */
            size_t ov = (size_t)strtoul(a->v[i + 1], NULL, 10) - FD_FIRST_FREE;
            if (ov < spec->n_overlays && fstat(spec->overlays[ov].dir_fd, &st) == 0) {
                v[k].dev = st.st_dev;
                v[k].ino = st.st_ino;
            }
            k++;
            i += 2;
            continue;
        }
        if (strcmp(a->v[i], "--bind") != 0 && strcmp(a->v[i], "--ro-bind") != 0) {
            continue;
        }
        if (stat(a->v[i + 1], &st) == 0) {
            v[k].dev = st.st_dev;
            v[k].ino = st.st_ino;
        }
        k++;
        i += 2;
    }
    *out = v;
    *n = k;
    return 0;
}

static void
prep_destroy(struct sandbox_prep *p)
{
    if (p->block_wr >= 0) {
        close(p->block_wr);
    }
    if (p->script_wr >= 0) {
        close(p->script_wr);
    }
    bwrap_argv_free(&p->argv);
    mem_free(p->ids);
    mem_free(p);
}

/* bwrap ended while the sandbox waited (or after it was discarded). */
static void
prep_on_exit(void *ud, struct sandbox_result *res)
{
    struct sandbox_prep *p = ud;

    if (res->failed && !p->orphaned) {
        log_debug("a prepared sandbox ended before use: %s", res->error.msg);
    }
    sandbox_result_release(res);
    p->sb = NULL;
    if (p->orphaned) {
        prep_destroy(p);
    }
}

/* While it waits, a prepared sandbox does not keep the loop alive (sandbox_run, shutdown). */
static void
prep_ref(struct sandbox *sb, int ref)
{
    uv_handle_t *hs[] = {(uv_handle_t *)&sb->exit_poll, (uv_handle_t *)&sb->out_pipe,
                         (uv_handle_t *)&sb->err_pipe, (uv_handle_t *)&sb->status_pipe,
                         sb->child_watch ? (uv_handle_t *)&sb->child_poll : NULL};

    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
        if (hs[i] != NULL) {
            if (ref) {
                uv_ref(hs[i]);
            } else {
                uv_unref(hs[i]);
            }
        }
    }
}

int
sandbox_prepare(uv_loop_t *loop, const struct sandbox_spec *spec, struct sandbox_prep **out,
                struct err *err)
{
    struct sandbox_spec s = *spec;
    struct sandbox_prep *p;

    *out = NULL;
    s.command = ""; /* the command is not known yet and never part of what is prepared */
    s.command_len = 0;
    p = mem_calloc(1, sizeof(*p));
    if (p == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory preparing a sandbox");
    }
    p->block_wr = p->script_wr = -1;
    if (bwrap_spawn(loop, &s, 1, &p->sb, &p->block_wr, &p->script_wr, &p->argv, err) < 0) {
        mem_free(p);
        return -1;
    }
    p->lim = p->sb->lim;
    sandbox_user(spec, &p->uid, &p->gid);
    p->sb->prepared = 1;
    p->sb->cb.on_output = NULL;
    p->sb->cb.on_exit = prep_on_exit;
    p->sb->cb.ud = p;
    prep_ref(p->sb, 0);
    if (bind_ids(&p->argv, spec, &p->ids, &p->n_ids, err) < 0) {
        sandbox_prepared_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

/* 1 if bwrap has exited (maybe not yet seen by the loop). */
static int
bwrap_gone(const struct sandbox *sb)
{
    struct pollfd pf = {sb->bwrap_pidfd, POLLIN, 0};

    return sb->exited || sb->killing || sb->bwrap_pidfd < 0 || poll(&pf, 1, 0) != 0;
}

/* Appends s as /proc/PID/mountinfo writes a path: space, tab, newline, backslash octal. */
static void
mountinfo_escape(struct buf *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\\') {
            buf_printf(out, "\\%03o", (unsigned)(unsigned char)*s);
        } else {
            buf_putc(out, *s);
        }
    }
}

/* 1 if the mountinfo text mi has a mount whose mount point (5th field) is `point`. */
static int
mountinfo_has(const char *mi, const char *point)
{
    size_t plen = strlen(point);

    while (*mi != '\0') {
        const char *eol = strchr(mi, '\n');
        const char *f = mi;
        size_t len = eol ? (size_t)(eol - mi) : strlen(mi);

        for (int field = 0; field < 4 && f != NULL && f < mi + len; field++) {
            f = memchr(f, ' ', len - (size_t)(f - mi));
            f = f != NULL ? f + 1 : NULL;
        }
        if (f != NULL && f + plen <= mi + len && memcmp(f, point, plen) == 0 &&
            (f + plen == mi + len || f[plen] == ' ')) {
            return 1;
        }
        mi += len;
        if (*mi == '\n') {
            mi++;
        }
    }
    return 0;
}

/*
 * The waiting sandbox's pid 1: as bwrap reported it on the status fd, or (not read yet)
 * bwrap's only child, from /proc. 0 if there is none yet.
 */
static pid_t
prep_child(const struct sandbox *sb)
{
    if (sb->child_pid > 0) {
        return sb->child_pid;
    }
    return bwrap_only_child(sb->bwrap_pid);
}

/*
 * 1 if every overlay bind of argv a (a bind whose target is under /workspace/) is still
 * mounted in the waiting sandbox. Its mount point is a directory bwrap created in the
 * host workspace directory; a sync that removed it (a rollback, a full re-sync) has
 * detached the overlay inside (the kernel does that for a mount point removed from
 * another mount namespace), which no inode comparison notices reliably.
 */
static int
overlays_mounted(const struct sandbox *sb, const struct argv_vec *a)
{
    struct buf mi, point;
    char path[64], chunk[4096];
    int fd, ok = 1, any = 0;
    ssize_t n;

    for (size_t i = 0; i + 2 < a->n && !any; i++) {
        any = (strcmp(a->v[i], "--ro-bind") == 0 || strcmp(a->v[i], "--ro-bind-fd") == 0) &&
              strncmp(a->v[i + 2], "/workspace/", 11) == 0;
    }
    if (!any) {
        return 1;
    }
    pid_t pid = prep_child(sb);
    if (pid <= 0) {
        return 0; /* no pid 1 yet: still setting up */
    }
    snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    buf_init(&mi, (size_t)4 << 20);
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        buf_append(&mi, chunk, (size_t)n);
    }
    close(fd);
    buf_init(&point, SANDBOX_PATH_MAX * 4 + 1);
    if (n < 0 || buf_failed(&mi)) {
        ok = 0;
    }
    for (size_t i = 0; ok && i + 2 < a->n; i++) {
        if ((strcmp(a->v[i], "--ro-bind") != 0 && strcmp(a->v[i], "--ro-bind-fd") != 0) ||
            strncmp(a->v[i + 2], "/workspace/", 11) != 0) {
            continue;
        }
        buf_reset(&point);
        mountinfo_escape(&point, a->v[i + 2]);
        ok = !buf_failed(&point) && mountinfo_has(buf_cstr(&mi), buf_cstr(&point));
        i += 2;
    }
    buf_release(&point);
    buf_release(&mi);
    return ok;
}

int
sandbox_prepared_valid(const struct sandbox_prep *p, const struct sandbox_spec *spec)
{
    struct sandbox_limits lim;
    struct argv_vec a = {0};
    struct bind_id *ids = NULL;
    size_t n_ids = 0;
    char bwrap[SANDBOX_PATH_MAX];
    struct err err;
    uint32_t uid, gid;
    int ok = 0;

    if (p == NULL || p->sb == NULL || bwrap_gone(p->sb)) {
        return 0;
    }
    sandbox_user(spec, &uid, &gid);
    if (uid != p->uid || gid != p->gid) {
        return 0;
    }
    bwrap_limits_fill(&lim, &spec->limits);
    if (lim.memory_bytes != p->lim.memory_bytes || lim.cpu_secs != p->lim.cpu_secs ||
        lim.file_size_bytes != p->lim.file_size_bytes || lim.nproc != p->lim.nproc ||
        lim.tmp_size_bytes != p->lim.tmp_size_bytes) {
        return 0;
    }
    if (bwrap_find(bwrap, sizeof(bwrap)) == NULL ||
        bwrap_build_argv(spec, &lim, bwrap, ARGV_WARM, &a, &err) < 0 || a.n != p->argv.n) {
        goto out;
    }
    for (size_t i = 0; i < a.n; i++) {
        if (strcmp(a.v[i], p->argv.v[i]) != 0) {
            goto out;
        }
    }
    if (bind_ids(&a, spec, &ids, &n_ids, &err) < 0 || n_ids != p->n_ids ||
        (n_ids > 0 && memcmp(ids, p->ids, n_ids * sizeof(*ids)) != 0)) {
        goto out;
    }
    if (!overlays_mounted(p->sb, &a)) {
        goto out;
    }
    ok = 1;
out:
    mem_free(ids);
    bwrap_argv_free(&a);
    return ok;
}

static void
on_script_written(uv_write_t *req, int status)
{
    struct sandbox *sb = req->data;

    if (status < 0 && status != UV_ECANCELED) {
        log_debug("cannot hand the command to the sandbox: %s", uv_strerror(status));
    }
    /* EOF for the sandbox's reader: the whole script is in (or the run is over). */
    if (sb->script_open) {
        sb->script_open = 0;
        bwrap_close_handle(sb, (uv_handle_t *)&sb->script_pipe);
    }
}

/*
 * What goes down the script pipe: a header line for the prelude (see bwrap_build_argv), then
 * the script. Short scripts go as N lines ("l<N>\n", then the script and one more newline,
 * so the prelude's N reads see N newline-terminated lines, which it joins back with
 * newlines: the exact script), longer ones as "c\n", the bytes as they are and a "."
 * that keeps $(cat) from dropping the script's trailing newlines (the prelude strips it).
 */
static int
script_frame(const struct sandbox_spec *spec, char **out, size_t *out_len)
{
    const char *c = spec->command;
    size_t len = spec->command_len, lines = 0, n;
    char tail; /* "l": ends the last line for `read`; "c": a '.' the prelude strips, so
                  $(cat) keeps the script's own trailing newlines */
    char head[32];
    char *p;

    if (len <= WARM_READ_MAX) {
        for (size_t i = 0; i < len; i++) {
            lines += c[i] == '\n';
        }
        tail = '\n'; /* every line ends in a newline; the shell joins them without it */
        lines++;
        n = (size_t)snprintf(head, sizeof(head), "l%zu\n", lines);
    } else {
        n = (size_t)snprintf(head, sizeof(head), "c\n");
        tail = '.';
    }
    p = mem_alloc(n + len + 2);
    if (p == NULL) {
        return -1;
    }
    memcpy(p, head, n);
    if (len > 0) {
        memcpy(p + n, c, len);
    }
    p[n + len] = tail;
    *out = p;
    *out_len = n + len + 1;
    return 0;
}

int
sandbox_start_prepared(struct sandbox_prep *p, const struct sandbox_spec *spec,
                       const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err)
{
    struct sandbox_limits lim;
    struct sandbox *sb;
    uv_buf_t b;
    ssize_t w;

    *out = NULL;
    if (cb == NULL || cb->on_exit == NULL) {
        return err_set(err, ERR_INVAL, "sandbox_start_prepared needs an on_exit callback");
    }
    bwrap_limits_fill(&lim, &spec->limits);
    if (bwrap_spec_check(spec, &lim, err) < 0) {
        return -1;
    }
    if (!sandbox_prepared_valid(p, spec)) {
        return err_set(err, ERR_BUSY,
                       "the prepared sandbox no longer matches the policy; start one cold");
    }
    sb = p->sb;
    if (script_frame(spec, &sb->script, &sb->script_len) < 0) {
        return err_set(err, ERR_NOMEM, "out of memory handing over the command");
    }
    if (uv_pipe_init(sb->loop, &sb->script_pipe, 0) != 0 ||
        uv_pipe_open(&sb->script_pipe, p->script_wr) != 0) {
        mem_free(sb->script);
        sb->script = NULL;
        return err_set(err, ERR_IO, "cannot open the script pipe");
    }
    p->script_wr = -1;
    sb->script_pipe.data = sb;
    sb->script_req.data = sb;
    sb->handles++;
    sb->script_open = 1;
    /* From here on the sandbox belongs to this call, whatever happens. */
    p->sb = NULL;
    sb->prepared = 0;
    sb->lim = lim;
    sb->cb = *cb;
    sb->res.warm = 1;
    prep_ref(sb, 1);
    b = uv_buf_init(sb->script, (unsigned)sb->script_len);
    if (uv_write(&sb->script_req, (uv_stream_t *)&sb->script_pipe, &b, 1, on_script_written) != 0) {
        sb->script_open = 0;
        bwrap_close_handle(sb, (uv_handle_t *)&sb->script_pipe);
    }
    /* Release: bwrap loads the seccomp filter and execs the shell; the clock starts now. */
    do {
        w = write(p->block_wr, "x", 1);
    } while (w < 0 && errno == EINTR);
    close(p->block_wr);
    p->block_wr = -1;
    sb->start_ms = time_mono_ms();
    bwrap_clock_start(sb);
    if (w != 1) {
        bwrap_kill_all(sb); /* bwrap went away under us: reported through on_exit */
    }
    prep_destroy(p);
    *out = sb;
    return 0;
}

void
sandbox_prepared_free(struct sandbox_prep *p)
{
    struct sandbox *sb;

    if (p == NULL) {
        return;
    }
    sb = p->sb;
    if (sb == NULL) {
        prep_destroy(p);
        return;
    }
    if (uv_is_closing((uv_handle_t *)&sb->exit_poll)) {
        /*
         * The loop was torn down under us (daemon shutdown closes every handle): kill
         * directly and reap, so nothing is left even before --die-with-parent acts.
         */
        int st;
        if (sb->child_pid > 0) {
            bwrap_signal_kill(sb->child_pidfd, sb->child_pid);
            bwrap_signal_kill(sb->bwrap_pidfd, sb->bwrap_pid);
        } else {
            bwrap_kill_unknown(sb);
        }
        while (waitpid(sb->bwrap_pid, &st, 0) < 0 && errno == EINTR) {
        }
        bwrap_status_release(sb);
        if (sb->cgroup[0]) {
            bwrap_cgroup_remove(sb->cgroup);
        }
        /*
         * Only the daemon's shutdown gets here, after uv_run returned: every handle of sb
         * is closed and off the loop, but closed without on_close, so sb was never freed.
         */
        if (sb->child_pidfd >= 0) {
            close(sb->child_pidfd);
        }
        if (sb->bwrap_pidfd >= 0) {
            close(sb->bwrap_pidfd);
        }
        sandbox_result_release(&sb->res);
        buf_release(&sb->status);
        mem_free(sb->script);
        mem_free(sb);
        prep_destroy(p);
        return;
    }
    /*
     * Kill now: the sandbox's pid 1 if bwrap has reported it (it takes the namespace
     * along), else bwrap's children while bwrap is stopped (bwrap_kill_unknown); never bwrap
     * alone, which could leave a pid 1 waiting forever for its uid map. The loop reaps.
     */
    p->orphaned = 1;
    sb->prepared = 0;
    prep_ref(sb, 1); /* the loop now waits for the reaping */
    if (p->block_wr >= 0) {
        close(p->block_wr);
        p->block_wr = -1;
    }
    if (p->script_wr >= 0) {
        close(p->script_wr);
        p->script_wr = -1;
    }
    bwrap_kill_all(sb);
}

/*
 * DRUN_SANDBOX_WARM=always (the test switch): every command takes the warm path, prepared
 * on the spot. With overlays the release waits (bounded) until bwrap has mounted them,
 * since sandbox_prepared_valid requires that.
 */
int
bwrap_start_always(uv_loop_t *loop, const struct sandbox_spec *spec,
                   const struct sandbox_callbacks *cb, struct sandbox **out, struct err *err)
{
    struct sandbox_prep *p = NULL;

    if (sandbox_prepare(loop, spec, &p, err) < 0) {
        return -1;
    }
    for (int i = 0; i < 5000 && spec->n_overlays > 0 && p->sb != NULL && !bwrap_gone(p->sb) &&
                    !overlays_mounted(p->sb, &p->argv);
         i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (sandbox_start_prepared(p, spec, cb, out, err) < 0) {
        sandbox_prepared_free(p);
        return -1;
    }
    return 0;
}

int
sandbox_describe(const struct sandbox_spec *spec, int raw, struct buf *out, struct err *err)
{
    struct sandbox_limits lim;
    struct argv_vec a = {0};
    char bwrap[SANDBOX_PATH_MAX];

    bwrap_limits_fill(&lim, &spec->limits);
    if (bwrap_spec_check(spec, &lim, err) < 0) {
        return -1;
    }
    if (bwrap_find(bwrap, sizeof(bwrap)) == NULL) {
        return err_set(err, ERR_NOTFOUND, "bwrap not found; install bubblewrap");
    }
    if (bwrap_build_argv(spec, &lim, bwrap, raw ? ARGV_RAW : ARGV_COLD, &a, err) < 0) {
        bwrap_argv_free(&a);
        return -1;
    }
    for (size_t i = 0; i < a.n; i++) {
        buf_puts(out, a.v[i]);
        buf_putc(out, '\n');
    }
    bwrap_argv_free(&a);
    return buf_failed(out) ? buf_err(out, "sandbox command line", err) : 0;
}
