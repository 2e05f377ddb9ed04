/*
 * session_extract.c - session_extract_text: the text of a PDF in the workspace, written
 * back as a new checkpoint.
 *
 * A PDF parser is among the most attacked code there is, and the PDF comes from the
 * agent's workspace, the untrusted side. So no parser ever runs in the daemon: the file's
 * bytes are copied from the store into a private directory of their own (nothing else of
 * the workspace is in it), and Poppler's pdftotext reads that copy in a sandbox built as
 * session_bash's (no network, no host root, clean environment, no inherited fds, seccomp,
 * rlimits) with the directory bound read-only, so a parser turned hostile sees one file it
 * cannot change and writes nowhere but a small /tmp. Its stdout, capped at
 * extract_max_mb, is the text; a run that hits the time, memory or CPU limit, or exits
 * non-zero, is extraction_failed naming why, and nothing is written.
 *
 * The run is asynchronous on the daemon's loop (session_extract_start, then _finish when
 * it is done), so other sessions are served meanwhile; session_extract_text() is the
 * synchronous form (a private loop) for tests.
 */
#include "session/session_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/mem.h"
#include "util/pathkey.h"

#define IN_NAME "in.pdf"

/* Makes this process's runtime directory on first use (as session_workspace_prepare does). */
static int
runtime_root(struct session_mgr *m, struct session_err *e)
{
    if (m->runtime == NULL && session_runtime_init(m, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

/* The extension of key's last component ("" when it has none). */
static const char *
key_ext(const char *key)
{
    const char *base = strrchr(key, '/');
    const char *dot;

    base = base ? base + 1 : key;
    dot = strrchr(base, '.');
    return dot && dot != base ? dot + 1 : "";
}

/* The last non-empty line of a stream's tail, printable, for a failure's cause. */
static void
last_line(const struct sandbox_output *o, char *out, size_t size)
{
    size_t end = o->tail_len, start;

    while (end > 0 && (o->tail[end - 1] == '\n' || o->tail[end - 1] == '\r')) {
        end--;
    }
    start = end;
    while (start > 0 && o->tail[start - 1] != '\n') {
        start--;
    }
    pathkey_quote(o->tail + start, end - start, out, size);
}

/* Code points in valid UTF-8 (bytes that are not continuation bytes). */
static int64_t
count_chars(const char *p, size_t n)
{
    int64_t c = 0;

    for (size_t i = 0; i < n; i++) {
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    }
    return c;
}

static int64_t
count_pages(const char *p, size_t n)
{
    int64_t c = 0;

    for (size_t i = 0; i < n; i++) {
        c += p[i] == '\f';
    }
    return c;
}

/* Copies entry's bytes into dir/in.pdf, readable by the sandbox user, nothing else. */
static int
write_input(struct session_mgr *m, const char *dir, const struct ws_entry *ent,
            struct session_err *e)
{
    char path[PATH_MAX];
    int fd, rc;

    snprintf(path, sizeof(path), "%s/%s", dir, IN_NAME);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        return session_fail(e, SESSION_E_OTHER, ERR_IO, "cannot create '%s': %s", path,
                            strerror(errno));
    }
    rc = store_blob_write_fd_size(m->st, ent->hash, ent->size, fd, &e->base);
    if (close(fd) < 0 && rc == 0) {
        return session_fail(e, SESSION_E_OTHER, ERR_IO, "cannot write '%s': %s", path,
                            strerror(errno));
    }
    return rc < 0 ? session_fail_err(e, SESSION_E_OTHER, &e->base) : 0;
}

static void
remove_dir(const char *dir)
{
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", dir, IN_NAME);
    (void)unlink(path);
    (void)rmdir(dir);
}

/* The script run in the sandbox: pdftotext's argv, nothing from the agent but integers. */
static void
build_command(const struct session_extract_opts *o, struct buf *cmd)
{
    buf_puts(cmd, "exec pdftotext -enc UTF-8");
    if (o->first_page > 0) {
        buf_printf(cmd, " -f %lld", (long long)o->first_page);
    }
    if (o->last_page > 0) {
        buf_printf(cmd, " -l %lld", (long long)o->last_page);
    }
    if (o->layout) {
        buf_puts(cmd, " -layout");
    }
    buf_puts(cmd, " " IN_NAME " -");
}

/* Maps a finished run that produced no usable text to extraction_failed. */
static int
run_failed(const struct session_extract_opts *o, const char *key, const struct sandbox_result *r,
           struct session_err *e)
{
    char cause[256];

    if (r->timed_out) {
        return session_fail(e, SESSION_E_EXTRACT, ERR_TIMEOUT,
                            "failed to extract text from '%s': it took longer than the time "
                            "limit (extract_timeout_ms = %lld)",
                            key, (long long)o->timeout_ms);
    }
    if (r->limit_hit != NULL && strcmp(r->limit_hit, "output") != 0) {
        const char *what = strcmp(r->limit_hit, "memory") == 0 ? " (sandbox_memory_mb)"
                           : strcmp(r->limit_hit, "cpu") == 0  ? " (sandbox_cpu_secs)"
                                                               : "";
        return session_fail(e, SESSION_E_EXTRACT, ERR_TOOBIG,
                            "failed to extract text from '%s': the parser hit the %s limit%s of "
                            "its sandbox (exit %d)",
                            key, r->limit_hit, what, r->exit_code);
    }
    if (r->signal != 0) {
        return session_fail(e, SESSION_E_EXTRACT, ERR_IO,
                            "failed to extract text from '%s': the parser died of signal %d "
                            "(the memory limit, sandbox_memory_mb, or a malformed file)",
                            key, r->signal);
    }
    last_line(&r->err, cause, sizeof(cause));
    return session_fail(e, SESSION_E_EXTRACT, ERR_INVAL, "failed to extract text from '%s': %s",
                        key, cause[0] ? cause : "pdftotext failed");
}

struct session_extract {
    struct session *s;
    struct session_extract_opts o; /* strings below are our own copies */
    char *key;                     /* the PDF's normal-form key */
    char *description;
    struct buf save, cmd, dir;
    int made; /* dir exists (and holds the copy) */
    struct sandbox *sb;
    struct sandbox_result res;
    int ran; /* res holds a result to release */
    void (*done)(void *ud);
    void *ud;
};

static void
extract_free(struct session_extract *x)
{
    if (x == NULL) {
        return;
    }
    if (x->ran) {
        sandbox_result_release(&x->res);
    }
    if (x->made) {
        remove_dir(x->dir.data);
    }
    buf_release(&x->save);
    buf_release(&x->cmd);
    buf_release(&x->dir);
    mem_free(x->key);
    mem_free(x->description);
    mem_free(x);
}

static void
extract_on_exit(void *ud, struct sandbox_result *r)
{
    struct session_extract *x = ud;

    x->res = *r; /* the result moves to us */
    memset(r, 0, sizeof(*r));
    x->ran = 1;
    x->sb = NULL;
    x->done(x->ud);
}

/* Everything before the parser runs: lookups, checks, the private copy, the command. */
static int
extract_prepare(struct session_extract *x, struct session_err *e)
{
    struct session_mgr *m = x->s->mgr;
    const struct session_extract_opts *o = &x->o;
    const struct ws_entry *ent = NULL;
    const char *ext;

    if (session_lookup(x->s->manifest, o->path, NULL, &ent, e) < 0) {
        return -1;
    }
    ext = key_ext(ent->path);
    if (strcmp(ext, "pdf") != 0) {
        return session_fail(e, SESSION_E_UNSUPPORTED, ERR_INVAL,
                            "no text extractor for '.%s' files", ext[0] ? ext : "(no extension)");
    }
    if ((x->key = mem_strdup(ent->path)) == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    if (ent->type != WS_FILE && ent->type != WS_EXEC) {
        return session_fail(e, SESSION_E_EXTRACT, ERR_INVAL,
                            "failed to extract text from '%s': not a regular file", ent->path);
    }
    if (ent->size > (uint64_t)m->limits.max_workspace_mb << 20) {
        return session_fail(e, SESSION_E_EXTRACT, ERR_TOOBIG,
                            "failed to extract text from '%s': %llu bytes is over "
                            "max_workspace_mb (%lld)",
                            ent->path, (unsigned long long)ent->size,
                            (long long)m->limits.max_workspace_mb);
    }
    /* save_to is checked before anything runs, so a bad one costs nothing. */
    if (o->save_to != NULL) {
        if (pathkey_normalize(o->save_to, strlen(o->save_to), &x->save, &e->base) < 0) {
            return session_fail_err(
                e, e->base.code == ERR_INVAL ? SESSION_E_BAD_PATH : SESSION_E_OTHER, &e->base);
        }
    } else {
        buf_printf(&x->save, "%s.txt", ent->path);
        if (pathkey_check(x->save.data, x->save.len, &e->base) < 0) {
            return session_fail_err(e, SESSION_E_BAD_PATH, &e->base);
        }
    }
    if (runtime_root(m, e) < 0) {
        return -1;
    }
    buf_printf(&x->dir, "%s/extract-XXXXXX", m->runtime);
    if (buf_failed(&x->dir) || mkdtemp(x->dir.data) == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_IO, "cannot make a directory under '%s': %s",
                            m->runtime, strerror(errno));
    }
    x->made = 1;
    /*
     * The sandbox user (a root daemon's sandbox_uid) must reach and read the copy, which
     * stays root's and read-only to it; the runtime directory above is reachable by that
     * user only (session_runtime_init checks it).
     */
    if (chmod(x->dir.data, 0755) < 0) {
        return session_fail(e, SESSION_E_OTHER, ERR_IO, "cannot chmod '%s': %s", x->dir.data,
                            strerror(errno));
    }
    if (write_input(m, x->dir.data, ent, e) < 0) {
        return -1;
    }
    build_command(o, &x->cmd);
    if (buf_failed(&x->cmd) || buf_failed(&x->save)) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    return 0;
}

int
session_extract_start(void *loop, struct session *s, const struct session_extract_opts *o,
                      void (*done)(void *ud), void *ud, struct session_extract **out,
                      struct session_err *e)
{
    struct session_extract *x = mem_calloc(1, sizeof(*x));
    struct sandbox_spec spec;
    struct sandbox_callbacks cb;

    *out = NULL;
    if (x == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    x->s = s;
    x->o = *o;
    x->done = done;
    x->ud = ud;
    buf_init(&x->save, PATHKEY_MAX + 1);
    buf_init(&x->cmd, 4096);
    buf_init(&x->dir, PATH_MAX);
    if (o->description != NULL && (x->description = mem_strdup(o->description)) == NULL) {
        extract_free(x);
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    x->o.description = x->description;
    /* path and save_to are the caller's, used only by extract_prepare, before we return. */
    if (extract_prepare(x, e) < 0) {
        extract_free(x);
        return -1;
    }
    x->o.path = x->o.save_to = NULL;
    memset(&spec, 0, sizeof(spec));
    spec.workspace_dir = x->dir.data;
    spec.workspace_ro = 1;
    /* A root daemon's parser runs as the sandbox user, as its commands do. */
    spec.uid = x->s->mgr->limits.sandbox_uid;
    spec.gid = x->s->mgr->limits.sandbox_gid;
    spec.command = x->cmd.data;
    spec.command_len = x->cmd.len;
    sandbox_limits_default(&spec.limits);
    spec.limits.timeout_ms = o->timeout_ms;
    spec.limits.max_output_bytes = (size_t)o->max_text_bytes;
    spec.limits.memory_bytes = o->memory_bytes;
    spec.limits.cpu_secs = o->cpu_secs;
    /* pdftotext is one process and writes only to stdout: little room for anything else. */
    spec.limits.nproc = 8;
    spec.limits.file_size_bytes = (uint64_t)16 << 20;
    spec.limits.tmp_size_bytes = (uint64_t)16 << 20;
    cb.on_output = NULL;
    cb.on_exit = extract_on_exit;
    cb.ud = x;
    if (sandbox_start(loop, &spec, &cb, &x->sb, &e->base) < 0) {
        extract_free(x);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    *out = x;
    return 0;
}

void
session_extract_cancel(struct session_extract *x)
{
    if (x != NULL && x->sb != NULL) {
        sandbox_cancel(x->sb);
    }
}

int
session_extract_finish(struct session_extract *x, struct store_audit *audit,
                       struct session_extract_result *out, struct session_err *e)
{
    struct sandbox_result *res = &x->res;
    struct session_edit *ed = NULL;
    struct session_commit_meta meta;
    struct session_delta d;
    size_t keep;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (res->cancelled) {
        session_fail(e, SESSION_E_OTHER, ERR_CANCELLED,
                     "the extraction of '%s' was cancelled; nothing was written", x->key);
        goto out;
    }
    if (res->failed) {
        session_fail_err(e, SESSION_E_OTHER, &res->error);
        goto out;
    }
    if (res->exit_code != 0 || res->timed_out ||
        (res->limit_hit && strcmp(res->limit_hit, "output") != 0)) {
        run_failed(&x->o, x->key, res, e);
        goto out;
    }
    keep = res->out.data.len;
    if (res->out.truncated) {
        keep = session_utf8_floor(res->out.data.data, keep);
    }
    out->truncated = res->out.truncated;
    out->total_bytes = res->out.total;
    out->pages = count_pages(res->out.data.data, keep);
    out->chars = count_chars(res->out.data.data, keep);

    if (session_edit_begin(x->s, &ed, e) < 0 ||
        session_edit_write(ed, x->save.data, res->out.data.data ? res->out.data.data : "", keep, 0,
                           e) < 0) {
        goto out;
    }
    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_extract_text";
    meta.command = x->cmd.data;
    meta.description = x->o.description;
    meta.has_exit_code = 1;
    meta.exit_code = res->exit_code;
    meta.stderr_data = res->err.data.data;
    meta.stderr_len = res->err.data.len;
    meta.duration_ms = res->duration_ms;
    rc = session_edit_commit(ed, &meta, audit, &d, e);
    ed = NULL;
    if (rc < 0) {
        goto out;
    }
    out->checkpoint_id = d.checkpoint_id;
    out->saved_to = buf_detach(&x->save, NULL);
    if (out->saved_to == NULL) {
        rc = session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
out:
    session_edit_abort(ed);
    extract_free(x);
    return rc;
}

static void
sync_done(void *ud)
{
    *(int *)ud = 1;
}

int
session_extract_text(struct session *s, const struct session_extract_opts *o,
                     struct store_audit *audit, struct session_extract_result *out,
                     struct session_err *e)
{
    uv_loop_t loop;
    struct session_extract *x = NULL;
    int done = 0, rc;

    memset(out, 0, sizeof(*out));
    if (uv_loop_init(&loop) != 0) {
        return session_fail(e, SESSION_E_OTHER, ERR_IO, "cannot create an event loop");
    }
    rc = session_extract_start(&loop, s, o, sync_done, &done, &x, e);
    if (rc == 0) {
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = done ? session_extract_finish(x, audit, out, e)
                  : session_fail(e, SESSION_E_OTHER, ERR_INTERNAL,
                                 "the sandbox loop ended without a result");
    }
    uv_loop_close(&loop);
    return rc;
}

void
session_extract_result_release(struct session_extract_result *r)
{
    if (r != NULL) {
        mem_free(r->saved_to);
        memset(r, 0, sizeof(*r));
    }
}
