/*
 * session_mgr.c - the process's session manager: attaching, creating, forking and
 * closing sessions, the busy/idle gate every call passes, and the helpers the other
 * session_*.c files share.
 *
 * Invariants. An attached session is claimed in the DB by this process (pid and start
 * time), so no other drun-mcp writes it; its in-memory head, manifest and live-id list
 * therefore always equal the store's. Each of them changes only after the transaction
 * that changed the store has committed.
 */
#include "session/session_exec.h"
#include "session/session_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

int
session_fail(struct session_err *e, int kind, int code, const char *fmt, ...)
{
    va_list ap;

    /* A message longer than the err's buffer is cut, never lost. */
    e->kind = kind;
    e->d1 = e->d2 = 0;
    va_start(ap, fmt);
    err_vset(&e->base, code, fmt, ap);
    va_end(ap);
    return -1;
}

int
session_fail_err(struct session_err *e, int kind, const struct err *err)
{
    e->kind = kind;
    e->d1 = e->d2 = 0;
    if (&e->base != err) {
        e->base = *err;
    }
    return -1;
}

static int
blobs_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    return store_blob_get(ctx, hash, out, err);
}

static int
blobs_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    return store_blob_put(ctx, data, len, hash, err);
}

/* Streams a big file's blob into the workspace (ws_dir's write_fd); the stored size is
 * checked first, so a damaged row cannot make the sync write more than the manifest says. */
static int
blobs_write_fd(void *ctx, const uint8_t hash[HASH_LEN], uint64_t size, int fd, struct err *err)
{
    return store_blob_write_fd_size(ctx, hash, size, fd, err);
}

/*
 * Stores a big workspace file in pieces (ws_dir's put_fd, used by the rescan): read
 * STORE_BLOB_CHUNK at a time into a streaming writer, so the daemon holds about the
 * writer's 1.3 MiB plus one chunk whatever the file's size. The writer hashes exactly
 * the bytes it stores, and that hash is the one returned: a file the command is still
 * writing cannot get a hash that does not match its stored bytes. Reading more than
 * `max` stops before those bytes reach the writer (*size then says how far it got).
 */
static int
blobs_put_fd(void *ctx, int fd, uint64_t max, uint8_t hash[HASH_LEN], uint64_t *size,
             struct err *err)
{
    struct store_blob_writer *w = NULL;
    char *chunk = NULL;
    int rc = -1;

    *size = 0;
    chunk = mem_alloc(STORE_BLOB_CHUNK);
    if (chunk == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory storing a file");
    }
    if (store_blob_writer_open(ctx, &w, err) < 0) {
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, STORE_BLOB_CHUNK);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            err_set(err, ERR_IO, "cannot read the file: %s", strerror(errno));
            goto out;
        }
        if (n == 0) {
            break;
        }
        *size += (uint64_t)n;
        if (*size > max) {
            err_set(err, ERR_TOOBIG, "file is larger than %llu bytes", (unsigned long long)max);
            goto out;
        }
        if (store_blob_writer_write(w, chunk, (size_t)n, err) < 0) {
            goto out;
        }
    }
    rc = store_blob_writer_finish(w, hash, NULL, err);
    w = NULL; /* finish frees it in every case */
out:
    store_blob_writer_abort(w);
    mem_free(chunk);
    return rc;
}

int
session_mgr_new(struct store *st, const char *runtime_dir, struct session_mgr **out,
                struct err *err)
{
    struct session_mgr *m = mem_calloc(1, sizeof(*m));

    if (m == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    if (runtime_dir != NULL && (m->runtime_cfg = mem_strdup(runtime_dir)) == NULL) {
        mem_free(m);
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    m->st = st;
    m->pid = getpid();
    m->start = proc_start_time(m->pid);
    m->limits = SESSION_LIMITS_DEFAULT;
    m->blobs.ctx = st;
    m->blobs.get = blobs_get;
    m->blobs.put = blobs_put;
    m->blobs.write_fd = blobs_write_fd;
    m->blobs.put_fd = blobs_put_fd;
    *out = m;
    return 0;
}

static void
sess_free(struct session *s, int destroy_dir)
{
    struct err err;

    session_exec_warm_put(s, NULL, NULL); /* the waiting sandbox goes first */
    if (s->dir != NULL) {
        if (destroy_dir && ws_dir_destroy(s->dir, &err) < 0) {
            log_warn("cannot remove the workspace of session '%s': %s", s->id, err.msg);
        } else if (!destroy_dir) {
            ws_dir_close(s->dir);
        }
    }
    ws_manifest_free(s->manifest);
    mem_free(s->live);
    mem_free(s);
}

static void
unlink_session(struct session_mgr *m, struct session *s)
{
    for (struct session **p = &m->list; *p != NULL; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            m->n--;
            return;
        }
    }
}

void
session_detach(struct session_mgr *m, struct session *s)
{
    struct err err;

    if (s == NULL) {
        return;
    }
    unlink_session(m, s);
    /* Leave the end of its last call in the DB: another process reaps it by that. */
    if (s->active == 0 && !s->busy && s->readers == 0 &&
        store_session_set_active(m->st, s->id, m->pid, m->start,
                                 time_now_ms() - (time_mono_ms() - s->last_mono_ms), &err) < 0) {
        log_warn("cannot record the last activity of session '%s': %s", s->id, err.msg);
    }
    if (store_session_release_claim(m->st, s->id, m->pid, m->start, &err) < 0) {
        log_warn("cannot release session '%s': %s", s->id, err.msg);
    }
    /* The directory is a cache of the store; the next process re-materializes it. */
    sess_free(s, 1);
}

void
session_mgr_free(struct session_mgr *m)
{
    if (m == NULL) {
        return;
    }
    sess_lock_free(m);
    session_timer_stop(m);
    while (m->list != NULL) {
        session_detach(m, m->list);
    }
    while (m->views != NULL) {
        struct session *v = m->views;
        m->views = v->next;
        sess_free(v, 0);
    }
    if (m->runtime != NULL) {
        /* Every workspace in it is gone with its session: the directory goes too. */
        struct err err;
        if (rmdir(m->runtime) != 0 && ws_remove_tree(m->runtime, &err) < 0) {
            log_warn("cannot remove the runtime directory '%s': %s", m->runtime, err.msg);
        }
    }
    mem_free(m->runtime_cfg);
    mem_free(m->runtime);
    mem_free(m->runtime_root);
    mem_free(m);
}

int
session_runtime_init(struct session_mgr *m, struct err *err)
{
    struct buf root, p;

    if (m->runtime != NULL) {
        return 0;
    }
    buf_init(&root, 4096);
    buf_init(&p, 4096);
    /*
     * A root daemon without runtime_dir or $XDG_RUNTIME_DIR does not take the generic
     * /tmp/drun-0: drun versions that ran commands as root keep it at 0700, which would
     * lock the sandbox user out while both run. It uses /tmp/drun-root.
     */
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    const char *cfg = m->runtime_cfg;
    if (cfg == NULL && geteuid() == 0 && (xdg == NULL || xdg[0] != '/')) {
        cfg = "/tmp/drun-root";
    }
    if (ws_runtime_dir(cfg, &root, err) < 0) {
        buf_release(&root);
        buf_release(&p);
        return -1;
    }
    if (geteuid() == 0) {
        /*
         * A root daemon's bwrap runs as the sandbox user, which must be able to pass
         * through every directory above the workspaces. root's $XDG_RUNTIME_DIR is
         * usually 0700: then the default moves to /tmp/drun-root (made 0711). Not
         * /tmp/drun-0, which drun versions that ran commands as root keep at 0700.
         */
        struct sandbox_spec who;
        uint32_t uid, gid;
        memset(&who, 0, sizeof(who));
        who.uid = m->limits.sandbox_uid;
        who.gid = m->limits.sandbox_gid;
        sandbox_user(&who, &uid, &gid);
        if (!sandbox_reachable(buf_cstr(&root), uid, gid) && m->runtime_cfg == NULL) {
            buf_reset(&root);
            if (ws_runtime_dir("/tmp/drun-root", &root, err) < 0) {
                buf_release(&root);
                buf_release(&p);
                return -1;
            }
        }
        if (!sandbox_reachable(buf_cstr(&root), uid, gid)) {
            err_set(err, ERR_DENIED,
                    "runtime directory '%s' cannot be reached by the sandbox user (uid %lu), "
                    "which root's commands run as; make each directory above it searchable "
                    "(chmod o+x) or set 'runtime_dir' in config.toml to one that is",
                    buf_cstr(&root), (unsigned long)uid);
            buf_release(&root);
            buf_release(&p);
            return -1;
        }
    }
    if (ws_runtime_proc_dir(buf_cstr(&root), m->pid, &p, err) < 0) {
        buf_release(&root);
        buf_release(&p);
        return -1;
    }
    m->runtime_root = buf_detach(&root, NULL);
    m->runtime = buf_detach(&p, NULL);
    if (m->runtime == NULL || m->runtime_root == NULL) {
        mem_free(m->runtime_root);
        mem_free(m->runtime);
        m->runtime = m->runtime_root = NULL;
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    return 0;
}

int
session_mgr_sweep(struct session_mgr *m, struct err *err)
{
    int n;

    if (session_runtime_init(m, err) < 0) {
        return -1;
    }
    n = ws_runtime_sweep(m->runtime_root);
    if (n > 0) {
        log_info("removed %d runtime directories left by drun processes that are gone", n);
    }
    sandbox_sweep();
    return 0;
}

const char *
session_mgr_runtime_root(const struct session_mgr *m)
{
    return m->runtime_root;
}

void
session_mgr_set_limits(struct session_mgr *m, const struct session_limits *l)
{
    m->limits = *l;
}

const struct session_limits *
session_mgr_limits(const struct session_mgr *m)
{
    return &m->limits;
}

struct store *
session_mgr_store(const struct session_mgr *m)
{
    return m->st;
}

const struct ws_blobs *
session_mgr_blobs(const struct session_mgr *m)
{
    return &m->blobs;
}

pid_t
session_mgr_pid(const struct session_mgr *m)
{
    return m->pid;
}

struct session *
session_mgr_find(const struct session_mgr *m, const char *id)
{
    for (struct session *s = m->list; s != NULL; s = s->next) {
        if (strcmp(s->id, id) == 0) {
            return s;
        }
    }
    return NULL;
}

size_t
session_mgr_attached(const struct session_mgr *m)
{
    return m->n;
}

size_t
session_mgr_mem(const struct session_mgr *m)
{
    size_t total = 0;

    for (struct session *s = m->list; s != NULL; s = s->next) {
        size_t n = ws_manifest_count(s->manifest);
        total += sizeof(*s) + s->cap_live * sizeof(int64_t);
        for (size_t i = 0; i < n; i++) {
            total += sizeof(struct ws_entry) + strlen(ws_manifest_at(s->manifest, i)->path) + 1;
        }
    }
    return total;
}

/* ---- shared helpers ---------------------------------------------------------------- */

int
sess_put_manifest(struct session_mgr *m, const struct ws_manifest *man, const uint8_t *base,
                  uint8_t hash[HASH_LEN], struct session_err *e)
{
    struct buf b;
    int rc;

    buf_init(&b, STORE_BLOB_MAX_DEFAULT);
    if (ws_manifest_encode(man, &b, &e->base) < 0) {
        buf_release(&b);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    rc = base != NULL
             ? store_blob_put_delta(m->st, b.data ? b.data : "", b.len, base, hash, &e->base)
             : store_blob_put(m->st, b.data ? b.data : "", b.len, hash, &e->base);
    buf_release(&b);
    return rc < 0 ? session_fail_err(e, SESSION_E_OTHER, &e->base) : 0;
}

int
sess_load_live(struct session *s, struct session_err *e)
{
    struct store_checkpoint *list = NULL;
    size_t n = 0;
    int64_t *ids;

    if (store_checkpoint_list(s->mgr->st, s->id, 0, &list, &n, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    ids = mem_alloc((n + 8) * sizeof(*ids));
    if (ids == NULL) {
        store_checkpoint_list_free(list, n);
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        ids[i] = list[i].id;
    }
    store_checkpoint_list_free(list, n);
    mem_free(s->live);
    s->live = ids;
    s->n_live = n;
    s->cap_live = n + 8;
    return 0;
}

long
sess_live_index(const struct session *s, int64_t cp)
{
    size_t lo = 0, hi = s->n_live;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->live[mid] < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < s->n_live && s->live[lo] == cp ? (long)lo : -1;
}

void
sess_set_head(struct session *s, int64_t head, struct ws_manifest *man)
{
    if (man != s->manifest) {
        ws_manifest_free(s->manifest);
        s->manifest = man;
    }
    s->head = head;
}

struct change_ctx {
    struct store_change *v;
    size_t n, cap;
};

static int
collect_change(void *ctx, int change, const struct ws_entry *old_entry,
               const struct ws_entry *new_entry, struct err *err)
{
    struct change_ctx *c = ctx;

    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct store_change *v = mem_realloc(c->v, cap * sizeof(*v));
        if (v == NULL) {
            return err_set(err, ERR_NOMEM, "out of memory");
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n].path = new_entry ? new_entry->path : old_entry->path;
    c->v[c->n].kind = change == WS_ADDED     ? STORE_ADDED
                      : change == WS_REMOVED ? STORE_REMOVED
                                             : STORE_MODIFIED;
    c->n++;
    return 0;
}

int
sess_changes(const struct ws_manifest *from, const struct ws_manifest *to,
             struct store_change **out, size_t *n, struct ws_diff_counts *counts,
             struct session_err *e)
{
    struct change_ctx c = {NULL, 0, 0};

    if (ws_manifest_diff(from, to, collect_change, &c, counts, &e->base) < 0) {
        mem_free(c.v);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    *out = c.v;
    *n = c.n;
    return 0;
}

/* ---- attaching ---------------------------------------------------------------------- */

/* Builds the attached session for `id` (already claimed), loading head and live ids. */
static int
attach_loaded(struct session_mgr *m, const char *id, int64_t head, struct session **out,
              struct session_err *e)
{
    struct session *s = mem_calloc(1, sizeof(*s));

    if (s == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    s->mgr = m;
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->head = head;
    s->last_mono_ms = time_mono_ms();
    s->synced_ms = time_now_ms(); /* the claim wrote last_active_ms */
    if (session_load_manifest(m, id, head, &s->manifest, e) < 0 || sess_load_live(s, e) < 0) {
        sess_free(s, 0);
        return -1;
    }
    s->next = m->list;
    m->list = s;
    m->n++;
    *out = s;
    return 0;
}

int
session_attach(struct session_mgr *m, const char *id, struct session **out, struct session_err *e)
{
    struct store_session ss;
    struct err err;
    pid_t holder = 0;
    int64_t head;

    *out = session_mgr_find(m, id);
    if (*out != NULL) {
        return 0;
    }
    if (strlen(id) != STORE_SESSION_ID_LEN || strspn(id, "0123456789abcdef") != strlen(id)) {
        return session_fail(e, SESSION_E_NOT_FOUND, ERR_NOTFOUND,
                            "session '%.64s' not found; session ids are 8 lower-case hex "
                            "characters (see session_list)",
                            id);
    }
    if (store_session_get(m->st, id, &ss, &err) < 0) {
        if (err.code == ERR_NOTFOUND) {
            return session_fail(e, SESSION_E_NOT_FOUND, ERR_NOTFOUND,
                                "session '%s' not found; call session_list to see open sessions",
                                id);
        }
        return session_fail_err(e, SESSION_E_OTHER, &err);
    }
    head = ss.head;
    if (ss.state != STORE_SESSION_OPEN) {
        store_session_release(&ss);
        return session_fail(e, SESSION_E_NOT_FOUND, ERR_NOTFOUND,
                            "session '%s' not found: it was closed; create_session or fork "
                            "another",
                            id);
    }
    store_session_release(&ss);
    if (store_session_claim(m->st, id, m->pid, m->start, &holder, &err) < 0) {
        if (err.code == ERR_BUSY) {
            e->kind = SESSION_E_BUSY;
            e->d1 = holder;
            e->d2 = 0;
            e->base = err;
            return -1;
        }
        return session_fail_err(e, err.code == ERR_INVAL ? SESSION_E_NOT_FOUND : SESSION_E_OTHER,
                                &err);
    }
    if (attach_loaded(m, id, head, out, e) < 0) {
        store_session_release_claim(m->st, id, m->pid, m->start, &err);
        return -1;
    }
    return 0;
}

int
session_reattach(struct session_mgr *m, const char *id, struct session **out, struct session_err *e)
{
    if (session_attach(m, id, out, e) < 0) {
        return -1;
    }
    (*out)->last_mono_ms = time_mono_ms();
    return 0;
}

int
session_view(struct session_mgr *m, const char *id, struct session **out, struct session_err *e)
{
    struct store_session ss;
    struct session **p, *v;
    struct err err;
    int64_t head;

    *out = NULL;
    for (p = &m->views; *p != NULL; p = &(*p)->next) {
        if (strcmp((*p)->id, id) == 0) {
            break;
        }
    }
    if (*p != NULL && (*p)->readers > 0) {
        *out = *p; /* a read is in flight on it: keep what it sees */
        return 0;
    }
    if (store_session_get(m->st, id, &ss, &err) < 0) {
        if (err.code == ERR_NOTFOUND) {
            return session_fail(e, SESSION_E_NOT_FOUND, ERR_NOTFOUND,
                                "session '%.64s' not found; call session_list to see open "
                                "sessions",
                                id);
        }
        return session_fail_err(e, SESSION_E_OTHER, &err);
    }
    head = ss.head;
    if (ss.state != STORE_SESSION_OPEN) {
        store_session_release(&ss);
        return session_fail(e, SESSION_E_NOT_FOUND, ERR_NOTFOUND,
                            "session '%s' not found: it was closed; create_session or fork "
                            "another",
                            id);
    }
    store_session_release(&ss);
    if ((v = mem_calloc(1, sizeof(*v))) == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    v->mgr = m;
    v->view = 1;
    snprintf(v->id, sizeof(v->id), "%s", id);
    v->head = head;
    v->last_mono_ms = time_mono_ms();
    if (session_load_manifest(m, id, head, &v->manifest, e) < 0 || sess_load_live(v, e) < 0) {
        sess_free(v, 0);
        return -1;
    }
    if (*p != NULL) { /* replace the old view of this session */
        struct session *old = *p;
        v->next = old->next;
        *p = v;
        sess_free(old, 0);
    } else {
        v->next = m->views;
        m->views = v;
    }
    *out = v;
    return 0;
}

int
session_is_view(const struct session *s)
{
    return s->view;
}

int64_t
session_mgr_start(const struct session_mgr *m)
{
    return m->start;
}

struct session *
session_mgr_first(const struct session_mgr *m)
{
    return m->list;
}

struct session *
session_next(const struct session *s)
{
    return s->next;
}

int64_t
session_idle_ms(const struct session *s)
{
    if (s->busy || s->readers > 0 || s->active > 0) {
        return -1;
    }
    return time_mono_ms() - s->last_mono_ms;
}

void
session_forget(struct session_mgr *m, struct session *s)
{
    unlink_session(m, s);
    sess_free(s, 1);
}

int
session_mgr_heartbeat(struct session_mgr *m, struct err *err)
{
    int64_t now = time_now_ms(), mono = time_mono_ms();
    int held = 0;
    struct session *s, *next;

    if (m->n == 0) {
        return 0;
    }
    if (store_begin(m->st, err) < 0) {
        return -1;
    }
    if (store_session_heartbeat(m->st, m->pid, m->start, &held, err) < 0) {
        goto fail;
    }
    for (s = m->list; s != NULL; s = s->next) {
        int64_t at = session_idle_ms(s) < 0 ? now : now - (mono - s->last_mono_ms);
        /* Within a second is the same time: the two clocks drift by milliseconds. */
        if (at - s->synced_ms >= 1000 || s->synced_ms - at >= 1000) {
            if (store_session_set_active(m->st, s->id, m->pid, m->start, at, err) < 0) {
                goto fail;
            }
        }
    }
    if (store_commit(m->st, err) < 0) {
        return -1;
    }
    for (s = m->list; s != NULL; s = s->next) {
        int64_t at = session_idle_ms(s) < 0 ? now : now - (mono - s->last_mono_ms);
        if (at - s->synced_ms >= 1000 || s->synced_ms - at >= 1000) {
            s->synced_ms = at;
        }
    }
    if ((size_t)held == m->n) {
        return 0;
    }
    /* Some session is no longer ours in the DB (closed from outside, or taken over
     * after our heartbeat went stale): drop it here, unless a call is using it. */
    for (s = m->list; s != NULL; s = next) {
        struct store_session ss;
        struct err gerr;
        int ours;

        next = s->next;
        if (store_session_get(m->st, s->id, &ss, &gerr) < 0) {
            ours = gerr.code != ERR_NOTFOUND;
        } else {
            ours = ss.state == STORE_SESSION_OPEN && ss.owner_pid == m->pid &&
                   ss.owner_start == m->start;
            store_session_release(&ss);
        }
        if (!ours && session_idle_ms(s) >= 0) {
            log_info("session '%s' is no longer held here (closed or taken over in the "
                     "database); dropped it",
                     s->id);
            session_forget(m, s);
        }
    }
    return 0;

fail:
    store_rollback(m->st);
    return -1;
}

/*
 * Creates a session row (checkpoint 0 = man) inside one bracket with the max_sessions
 * check, then attaches it.
 */
static int
create_with(struct session_mgr *m, const struct ws_manifest *man, const char *parent_id,
            int64_t parent_cp, const char *client, const char *tool, struct session **out,
            struct session_err *e)
{
    struct store_session_new req;
    struct store_session ss;
    uint8_t hash[HASH_LEN];
    int64_t open = 0;
    char id[STORE_SESSION_ID_LEN + 1];
    struct store_overlay *ov = NULL;
    size_t n_ov = 0;

    memset(&ss, 0, sizeof(ss));
    if (store_begin(m->st, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (store_session_count_open(m->st, &open, &e->base) < 0) {
        goto fail_err;
    }
    if (open >= m->limits.max_sessions) {
        store_rollback(m->st);
        session_fail(e, SESSION_E_LIMIT, ERR_TOOBIG,
                     "session limit of %lld reached; close an existing session to create a "
                     "new one",
                     (long long)m->limits.max_sessions);
        e->d1 = m->limits.max_sessions;
        return -1;
    }
    if (sess_put_manifest(m, man, NULL, hash, e) < 0) {
        store_rollback(m->st);
        return -1;
    }
    memset(&req, 0, sizeof(req));
    req.parent_id = parent_id;
    req.parent_checkpoint = parent_cp;
    req.manifest_hash = hash;
    req.file_count = (int64_t)ws_manifest_files(man);
    req.logical_bytes = (int64_t)ws_manifest_bytes(man);
    req.owner_pid = m->pid;
    req.owner_start = m->start;
    req.client = client && client[0] ? client : NULL;
    req.tool = tool;
    if (store_session_create(m->st, &req, &ss, &e->base) < 0) {
        goto fail_err;
    }
    if (parent_id != NULL) {
        /* A fork inherits the source's overlays (reference section 2.5). */
        if (store_overlay_list(m->st, parent_id, &ov, &n_ov, &e->base) < 0) {
            goto fail_err;
        }
        for (size_t i = 0; i < n_ov; i++) {
            if (store_overlay_set(m->st, ss.id, ov[i].key, ov[i].host_path, &e->base) < 0) {
                store_overlay_list_free(ov, n_ov);
                goto fail_err;
            }
        }
        store_overlay_list_free(ov, n_ov);
    }
    if (store_commit(m->st, &e->base) < 0) {
        goto fail_err;
    }
    snprintf(id, sizeof(id), "%s", ss.id);
    store_session_release(&ss);
    return attach_loaded(m, id, 0, out, e);

fail_err:
    store_rollback(m->st);
    store_session_release(&ss);
    return session_fail_err(e, SESSION_E_OTHER, &e->base);
}

int
session_create(struct session_mgr *m, const char *client, struct session **out,
               struct session_err *e)
{
    struct ws_manifest *empty = NULL;
    int rc;

    if (ws_manifest_new(&empty, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    rc = create_with(m, empty, NULL, -1, client, "create_session", out, e);
    ws_manifest_free(empty);
    return rc;
}

int
session_fork(struct session_mgr *m, struct session *src, int64_t cp, const char *client,
             struct session **out, struct session_err *e)
{
    struct ws_manifest *man = NULL;
    int rc;

    if (!session_cp_live(src, cp)) {
        return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                            "checkpoint %lld does not exist; see session_history", (long long)cp);
    }
    if (cp == src->head) {
        if (ws_manifest_clone(src->manifest, &man, &e->base) < 0) {
            return session_fail_err(e, SESSION_E_OTHER, &e->base);
        }
    } else if (session_load_manifest(m, src->id, cp, &man, e) < 0) {
        return -1;
    }
    rc = create_with(m, man, src->id, cp, client, "session_fork", out, e);
    ws_manifest_free(man);
    return rc;
}

int
session_close(struct session_mgr *m, struct session *s, struct session_err *e)
{
    if (s->busy || s->readers > 0) {
        return session_fail(e, SESSION_E_BUSY, ERR_BUSY,
                            "session '%s' is currently executing; wait for it to complete and "
                            "retry",
                            s->id);
    }
    if (store_session_close(m->st, s->id, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    unlink_session(m, s);
    sess_free(s, 1);
    return 0;
}

/* ---- the attached session -------------------------------------------------------------- */

const char *
session_id(const struct session *s)
{
    return s->id;
}

struct session_mgr *
session_owner(const struct session *s)
{
    return s->mgr;
}

int64_t
session_head(const struct session *s)
{
    return s->head;
}

const struct ws_manifest *
session_manifest(const struct session *s)
{
    return s->manifest;
}

const int64_t *
session_live_ids(const struct session *s, size_t *n)
{
    *n = s->n_live;
    return s->live;
}

int
session_cp_live(const struct session *s, int64_t cp)
{
    return cp >= 0 && sess_live_index(s, cp) >= 0;
}

int
session_busy(const struct session *s)
{
    return s->busy;
}

int64_t
session_idle_secs(const struct session *s)
{
    return (time_mono_ms() - s->last_mono_ms) / 1000;
}

int
session_enter(struct session *s, int mode, struct session_err *e)
{
    int64_t now = time_mono_ms();
    int64_t idle = (now - s->last_mono_ms) / 1000;
    int64_t limit = s->mgr->limits.idle_secs;
    /* A session with a call in flight is in use, however long that call runs. */
    int is_idle = limit > 0 && s->active == 0 && idle > limit;

    if (s->view && mode != SESSION_READ) {
        return session_fail(e, SESSION_E_BUSY, ERR_BUSY,
                            "session '%s' is held by another drun process; only reads are "
                            "answered here",
                            s->id);
    }
    if (s->busy || (mode == SESSION_WRITE && s->readers > 0)) {
        return session_fail(e, SESSION_E_BUSY, ERR_BUSY,
                            "session '%s' is currently executing; wait for it to complete and "
                            "retry",
                            s->id);
    }
    if (mode == SESSION_WRITE && is_idle) {
        session_fail(e, SESSION_E_IDLE, ERR_TIMEOUT,
                     "session '%s' has been idle for %llds (limit: %llds); close it and open a "
                     "new one, or session_switch to it to resume",
                     s->id, (long long)idle, (long long)limit);
        e->d1 = idle;
        e->d2 = limit;
        return -1;
    }
    if (mode == SESSION_WRITE) {
        s->busy = 1;
    } else {
        s->readers++;
    }
    if (!is_idle) {
        s->last_mono_ms = now;
        s->active++;
    }
    return 0;
}

void
session_leave(struct session *s, int mode)
{
    /*
     * Idleness counts from the end of the last call: a command longer than the idle
     * limit must not make the very next call idle. A call that entered an idle session
     * did not count as activity and does not here either (active is 0 then).
     */
    if (s->active > 0) {
        s->active--;
        s->last_mono_ms = time_mono_ms();
    }
    if (mode == SESSION_WRITE) {
        s->busy = 0;
    } else if (s->readers > 0) {
        s->readers--;
    }
}
