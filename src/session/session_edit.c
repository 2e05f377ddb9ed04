/*
 * session_edit.c - mutations: building a new checkpoint on the head, committing it in
 * one transaction, and the workspace directory commands run in.
 *
 * Order of a commit (the "right order"): the new manifest is built and every
 * key checked before anything touches the store; then the size limit; then, inside
 * one BEGIN IMMEDIATE bracket, the checkpoint limit on the live checkpoints up to the
 * head (the forward history a rolled-back head leaves is discarded by this very
 * commit, so it does not count), the blobs, the manifest blob, the checkpoint with its
 * change rows (store_checkpoint_append marks the forward history discarded), and the
 * caller's audit row. Memory moves to the new head only after the commit.
 */
#include "session/session_int.h"

#include <stdio.h>
#include <string.h>

#include "sandbox/sandbox.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/pathkey.h"

#define MIB ((int64_t)1 << 20)

struct staged {
    const void *data;
    size_t len;
    struct store_blob_writer *w; /* non-NULL: stored from this writer at commit */
};

struct session_edit {
    struct session *s;
    struct ws_manifest *next;
    struct staged *v;
    size_t n, cap;
};

int
session_edit_begin(struct session *s, struct session_edit **out, struct session_err *e)
{
    struct session_edit *ed = mem_calloc(1, sizeof(*ed));

    if (ed == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    if (ws_manifest_clone(s->manifest, &ed->next, &e->base) < 0) {
        mem_free(ed);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    ed->s = s;
    *out = ed;
    return 0;
}

void
session_edit_abort(struct session_edit *ed)
{
    if (ed == NULL) {
        return;
    }
    ws_manifest_free(ed->next);
    for (size_t i = 0; i < ed->n; i++) {
        store_blob_writer_abort(ed->v[i].w);
    }
    mem_free(ed->v);
    mem_free(ed);
}

static int
normalize(const char *key, struct buf *k, struct session_err *e)
{
    buf_init(k, PATHKEY_MAX + 1);
    if (pathkey_normalize(key, strlen(key), k, &e->base) < 0) {
        buf_release(k);
        return session_fail_err(e, SESSION_E_BAD_PATH, &e->base);
    }
    return 0;
}

int
session_edit_write(struct session_edit *ed, const char *key, const void *data, size_t len, int exec,
                   struct session_err *e)
{
    struct buf k;
    uint8_t hash[HASH_LEN];

    if (normalize(key, &k, e) < 0) {
        return -1;
    }
    if (ed->n == ed->cap) {
        size_t cap = ed->cap ? ed->cap * 2 : 16;
        struct staged *v = mem_realloc(ed->v, cap * sizeof(*v));
        if (v == NULL) {
            buf_release(&k);
            return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        }
        ed->v = v;
        ed->cap = cap;
    }
    hash_sha256(data, len, hash);
    if (ws_manifest_set(ed->next, buf_cstr(&k), exec ? WS_EXEC : WS_FILE, len, hash, &e->base) <
        0) {
        buf_release(&k);
        return session_fail_err(e, e->base.code == ERR_INVAL ? SESSION_E_BAD_PATH : SESSION_E_OTHER,
                                &e->base);
    }
    buf_release(&k);
    ed->v[ed->n].data = data;
    ed->v[ed->n].len = len;
    ed->v[ed->n].w = NULL;
    ed->n++;
    return 0;
}

int
session_edit_put_writer(struct session_edit *ed, const char *key, struct store_blob_writer *w,
                        int exec, struct session_err *e)
{
    uint8_t hash[HASH_LEN];

    /* Staged as an empty write first (the key checks and the room), then given the
     * writer's hash and size; from here on the edit owns w. */
    if (store_blob_writer_end(w, &e->base) < 0 || store_blob_writer_hash(w, hash, &e->base) < 0) {
        store_blob_writer_abort(w);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (session_edit_write(ed, key, "", 0, exec, e) < 0) {
        store_blob_writer_abort(w);
        return -1;
    }
    ed->v[ed->n - 1].w = w;
    {
        struct buf k;
        if (normalize(key, &k, e) < 0) {
            return -1;
        }
        if (ws_manifest_set(ed->next, buf_cstr(&k), exec ? WS_EXEC : WS_FILE,
                            store_blob_writer_size(w), hash, &e->base) < 0) {
            buf_release(&k);
            return session_fail_err(e, SESSION_E_OTHER, &e->base);
        }
        buf_release(&k);
    }
    return 0;
}

int
session_edit_put(struct session_edit *ed, const struct ws_entry *entry, struct session_err *e)
{
    if (ws_manifest_set(ed->next, entry->path, entry->type, entry->size, entry->hash, &e->base) <
        0) {
        return session_fail_err(e, e->base.code == ERR_INVAL ? SESSION_E_BAD_PATH : SESSION_E_OTHER,
                                &e->base);
    }
    return 0;
}

int
session_edit_remove(struct session_edit *ed, const char *key, struct session_err *e)
{
    struct buf k;
    const struct ws_entry *ent;

    if (normalize(key, &k, e) < 0) {
        return -1;
    }
    ent = ws_manifest_get(ed->next, buf_cstr(&k));
    if (ent == NULL || ent->type == WS_DIR) {
        char q[300];
        pathkey_quote(key, strlen(key), q, sizeof(q));
        buf_release(&k);
        return session_fail(e, SESSION_E_FILE_NOT_FOUND, ERR_NOTFOUND,
                            "'%s' not in current checkpoint; nothing was deleted (see "
                            "get_session_state or session_read_files for the keys)",
                            q);
    }
    if (ws_manifest_remove(ed->next, buf_cstr(&k), &e->base) < 0) {
        buf_release(&k);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    buf_release(&k);
    return 0;
}

/* Checks the size limit; grown is 0 when the change cannot have made things bigger. */
static int
check_size(const struct session *s, const struct ws_manifest *next, struct session_err *e)
{
    uint64_t bytes = ws_manifest_bytes(next);
    uint64_t before = ws_manifest_bytes(s->manifest);
    int64_t limit = s->mgr->limits.max_workspace_mb * MIB;

    /* A change that does not grow the workspace is always allowed, so an agent can
     * shrink a workspace that a lowered limit left too big. */
    if (bytes > (uint64_t)limit && bytes > before) {
        session_fail(e, SESSION_E_SIZE, ERR_TOOBIG,
                     "workspace size %llu bytes exceeds limit of %lld bytes; delete or shrink "
                     "files first",
                     (unsigned long long)bytes, (long long)limit);
        e->d1 = (int64_t)bytes;
        e->d2 = limit;
        return -1;
    }
    /* In a size-capped workspace, what the files take there (pages and inodes) is held
     * to the same limit: the bound grows to fit the head, so a head of small files that
     * filled the bound plus its slack would raise the next bound by the slack, call
     * after call, and session_write_files of 1-byte files would raise it without end. A
     * head that is over already (a restore, a lowered limit) may stay, not grow. The
     * slack is allowed here too, so a file of exactly the limit (its inode beyond it)
     * fits as it does in bytes; the bound then stops at twice the slack over the limit. */
    if (ws_bound_enabled()) {
        uint64_t need = ws_bound_need(next);
        if (need > (uint64_t)limit + WS_BOUND_SLACK && need > ws_bound_need(s->manifest)) {
            session_fail(e, SESSION_E_SIZE, ERR_TOOBIG,
                         "workspace files occupy %llu bytes in the size-capped workspace (each "
                         "file takes whole 4 KiB pages, each entry 1 KiB more), over the "
                         "limit of %lld bytes; use fewer, larger files",
                         (unsigned long long)need, (long long)limit);
            e->d1 = (int64_t)need;
            e->d2 = limit;
            return -1;
        }
    }
    return 0;
}

int
session_fits(const struct session *s, uint64_t more)
{
    uint64_t before = ws_manifest_bytes(s->manifest);
    int64_t limit = s->mgr->limits.max_workspace_mb * MIB;

    return limit > 0 && before + more <= (uint64_t)limit;
}

/* Puts an output stream as a blob (len 0: none). */
static int
put_stream(struct session_mgr *m, const void *data, size_t len, uint8_t hash[HASH_LEN],
           int64_t *bytes, struct session_err *e)
{
    *bytes = (int64_t)len;
    if (len == 0) {
        return 0;
    }
    if (store_blob_put(m->st, data, len, hash, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

/*
 * The shared commit: `next` becomes the head (ownership passes on success and on
 * failure). The caller has opened the bracket when in_tx; this function commits or
 * rolls it back in every case.
 */
static int
commit_manifest(struct session *s, struct ws_manifest *next, struct staged *staged, size_t n_staged,
                const struct session_commit_meta *meta, struct store_audit *audit,
                struct session_delta *delta, int in_tx, struct session_err *e)
{
    struct session_mgr *m = s->mgr;
    struct store_checkpoint cp;
    struct store_change *changes = NULL;
    struct ws_diff_counts counts = {0, 0, 0};
    size_t n_changes = 0;
    long at = sess_live_index(s, s->head);
    uint8_t hash[HASH_LEN];
    struct store_checkpoint head_cp;

    memset(&cp, 0, sizeof(cp));
    if (!in_tx && store_begin(m->st, &e->base) < 0) {
        ws_manifest_free(next);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (check_size(s, next, e) < 0) {
        goto fail;
    }
    if (at < 0) {
        session_fail(e, SESSION_E_OTHER, ERR_INTERNAL, "session '%s': head %lld is not live", s->id,
                     (long long)s->head);
        goto fail;
    }
    /* Live checkpoints that remain once the forward history is discarded: 0..head. */
    if ((int64_t)at + 1 >= m->limits.max_checkpoints) {
        session_fail(e, SESSION_E_CP_LIMIT, ERR_TOOBIG,
                     "checkpoint limit of %lld reached; close or snapshot this session and start "
                     "a new one (or squash or drop old checkpoints)",
                     (long long)m->limits.max_checkpoints);
        e->d1 = m->limits.max_checkpoints;
        goto fail;
    }
    /* Room for the new id before the commit, so memory cannot fail after it. */
    if (s->cap_live < (size_t)at + 2) {
        int64_t *v = mem_realloc(s->live, ((size_t)at + 10) * sizeof(*v));
        if (v == NULL) {
            session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
            goto fail;
        }
        s->live = v;
        s->cap_live = (size_t)at + 10;
    }
    for (size_t i = 0; i < n_staged; i++) {
        int rc;
        if (staged[i].w != NULL) {
            /* Inside the bracket, so gc never sees the row unreferenced. */
            rc = store_blob_writer_finish(staged[i].w, hash, NULL, &e->base);
            staged[i].w = NULL;
        } else {
            rc = store_blob_put(m->st, staged[i].data, staged[i].len, hash, &e->base);
        }
        if (rc < 0) {
            session_fail_err(e, SESSION_E_OTHER, &e->base);
            goto fail;
        }
    }
    /* The head's manifest is the delta base: consecutive manifests differ in a few entries. */
    memset(&head_cp, 0, sizeof(head_cp));
    if (store_checkpoint_get(m->st, s->id, s->head, &head_cp, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto fail;
    }
    store_checkpoint_release(&head_cp);
    if (sess_put_manifest(m, next, head_cp.manifest_hash, cp.manifest_hash, e) < 0 ||
        put_stream(m, meta->stdout_data, meta->stdout_len, cp.stdout_hash, &cp.stdout_bytes, e) <
            0 ||
        put_stream(m, meta->stderr_data, meta->stderr_len, cp.stderr_hash, &cp.stderr_bytes, e) <
            0 ||
        sess_changes(s->manifest, next, &changes, &n_changes, &counts, e) < 0) {
        goto fail;
    }
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s->id);
    cp.tool = (char *)meta->tool;
    cp.command = (char *)meta->command;
    cp.description = (char *)meta->description;
    cp.has_exit_code = meta->has_exit_code;
    cp.exit_code = meta->exit_code;
    cp.duration_ms = meta->duration_ms;
    cp.file_count = (int64_t)ws_manifest_files(next);
    cp.added = (int64_t)counts.added;
    cp.modified = (int64_t)counts.modified;
    cp.removed = (int64_t)counts.removed;
    cp.logical_bytes = (int64_t)ws_manifest_bytes(next);
    if (store_checkpoint_append(m->st, &cp, changes, n_changes, &e->base) < 0) {
        session_fail_err(e, e->base.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER,
                         &e->base);
        goto fail;
    }
    if (audit != NULL) {
        audit->session_id = s->id;
        audit->checkpoint_id = cp.id;
        if (store_audit_append(m->st, audit, &e->base) < 0) {
            session_fail_err(e, SESSION_E_OTHER, &e->base);
            goto fail;
        }
    }
    if (store_commit(m->st, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto fail;
    }
    mem_free(changes);
    s->n_live = (size_t)at + 1;
    s->live[s->n_live++] = cp.id;
    sess_set_head(s, cp.id, next);
    if (delta != NULL) {
        delta->checkpoint_id = cp.id;
        delta->added = counts.added;
        delta->modified = counts.modified;
        delta->removed = counts.removed;
    }
    return 0;

fail:
    store_rollback(m->st);
    mem_free(changes);
    ws_manifest_free(next);
    return -1;
}

int
session_edit_commit(struct session_edit *ed, const struct session_commit_meta *meta,
                    struct store_audit *audit, struct session_delta *delta, struct session_err *e)
{
    int rc = commit_manifest(ed->s, ed->next, ed->v, ed->n, meta, audit, delta, 0, e);

    ed->next = NULL;
    session_edit_abort(ed);
    return rc;
}

int
session_edit_try_commit(struct session_edit *ed, const struct session_commit_meta *meta,
                        struct store_audit *audit, void (*in_tx)(void *ud), void *ud,
                        struct session_delta *delta, struct session_err *e)
{
    struct store *st = ed->s->mgr->st;
    int rc;

    store_clear_would_block(st);
    if (store_begin(st, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        if (!store_would_block(st)) {
            session_edit_abort(ed);
        }
        return -1;
    }
    if (in_tx != NULL) {
        in_tx(ud);
    }
    rc = commit_manifest(ed->s, ed->next, ed->v, ed->n, meta, audit, delta, 1, e);
    ed->next = NULL;
    session_edit_abort(ed);
    return rc;
}

/* ---- the workspace directory --------------------------------------------------------- */

/*
 * The size of the workspace's bounding filesystem: max_workspace_mb, or what the head
 * occupies there if that is more (tmpfs counts whole pages per file, so a tree of many
 * small files needs more than its logical size), plus the slack.
 */
static uint64_t
workspace_bound(const struct session *s)
{
    uint64_t limit = (uint64_t)(s->mgr->limits.max_workspace_mb * MIB);
    uint64_t need = ws_bound_need(s->manifest);

    return (need > limit ? need : limit) + WS_BOUND_SLACK;
}

int
session_workspace_prepare(struct session *s, struct ws_dir **dir, struct session_err *e)
{
    struct session_mgr *m = s->mgr;
    struct sandbox_spec who;
    uint32_t uid, gid;
    struct buf p;
    int rc;

    if (m->runtime == NULL && session_runtime_init(m, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    /* The workspace belongs to the user the commands run as (never root). */
    memset(&who, 0, sizeof(who));
    who.uid = m->limits.sandbox_uid;
    who.gid = m->limits.sandbox_gid;
    sandbox_user(&who, &uid, &gid);
    if (s->dir != NULL && !ws_dir_owned_by(s->dir, uid, gid)) {
        ws_dir_close(s->dir); /* the config changed the sandbox user: start afresh */
        s->dir = NULL;
    }
    if (s->dir == NULL) {
        buf_init(&p, 4096);
        if (ws_runtime_session_path(m->runtime, s->id, &p, &e->base) < 0 ||
            ws_dir_open_as(buf_cstr(&p), workspace_bound(s), uid, gid, &s->dir, &e->base) < 0) {
            buf_release(&p);
            return session_fail_err(e, SESSION_E_OTHER, &e->base);
        }
        buf_release(&p);
        s->dir_trusted = 0;
    }
    if (ws_dir_bound_grow(s->dir, workspace_bound(s), &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    rc = s->dir_trusted ? ws_dir_sync(s->dir, s->manifest, &m->blobs, &e->base)
                        : ws_dir_resync(s->dir, s->manifest, &m->blobs, &e->base);
    if (rc < 0) {
        s->dir_trusted = 0;
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    s->dir_trusted = 1;
    *dir = s->dir;
    return 0;
}

int
session_workspace_reset(struct session *s, int64_t *removed_unstorable, struct session_err *e)
{
    struct ws_dir_stats before, after;

    if (removed_unstorable != NULL) {
        *removed_unstorable = 0;
    }
    s->dir_trusted = 0;
    if (s->dir == NULL) {
        return 0;
    }
    ws_dir_stats(s->dir, &before);
    if (ws_dir_bound_grow(s->dir, workspace_bound(s), &e->base) < 0 ||
        ws_dir_resync(s->dir, s->manifest, &s->mgr->blobs, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    ws_dir_stats(s->dir, &after);
    if (removed_unstorable != NULL) {
        *removed_unstorable = (int64_t)(after.removed_unstorable - before.removed_unstorable);
    }
    s->dir_trusted = 1;
    return 0;
}

int
session_workspace_has_unstorable(const struct session *s)
{
    return s->dir != NULL && ws_dir_skipped(s->dir);
}

/*
 * Every failed commit ends here before its answer: the directory goes back to the head
 * now, so the files the command wrote are gone when the caller learns the call failed
 * (the next command, or anyone reading the directory, never sees them). If even that
 * fails, the directory stays untrusted and the next prepare re-syncs it fully.
 */
static int
commit_failed(struct session *s)
{
    struct session_err re;

    if (session_workspace_reset(s, NULL, &re) < 0) {
        log_warn("session '%s': cannot reset the workspace after a failed commit: %s", s->id,
                 re.base.msg);
    }
    return -1;
}

/* The size error of a command that wrote more than the limit (or ran out of room). */
static int
size_exceeded(struct session_err *e, uint64_t limit, const char *why)
{
    char cause[ERR_MSG_MAX];

    snprintf(cause, sizeof(cause), "%s", why);
    session_fail(e, SESSION_E_SIZE, ERR_TOOBIG,
                 "workspace size exceeds limit of %lld bytes (%s); the command's changes were "
                 "not kept",
                 (long long)limit, cause);
    e->d1 = -1;
    e->d2 = (int64_t)limit;
    return -1;
}

int
session_commit_scan(struct session *s, const struct session_commit_meta *meta,
                    struct store_audit *audit, struct session_delta *delta,
                    struct ws_scan_report *skipped, struct session_err *e)
{
    struct session_mgr *m = s->mgr;
    struct ws_limits lim;
    struct ws_manifest *next = NULL;

    if (s->dir == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_INTERNAL,
                            "session '%s' has no workspace directory to scan", s->id);
    }
    memset(&lim, 0, sizeof(lim));
    lim.max_bytes = (uint64_t)(m->limits.max_workspace_mb * MIB);
    s->dir_trusted = 0; /* the command changed the directory: trusted again once committed */
    if (meta->disk_full) {
        /* The command ran out of room in its bounded workspace (ENOSPC): whatever it left
         * is what fitted, not what it meant to write, so none of it is kept. */
        size_exceeded(e, lim.max_bytes, "the command ran out of space in the workspace");
        return commit_failed(s);
    }
    /* The scan puts blobs inside the commit's bracket, so a failure leaves none. */
    if (store_begin(m->st, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        if (store_would_block(m->st)) {
            /* Another process holds the write lock and the loop may not wait for it: the
             * caller parks this commit and calls again once the lock is free, so the
             * command's changes must stay in the directory. A park that ends in a timeout
             * or a cancel resets the workspace itself before its answer. */
            return -1;
        }
        return commit_failed(s);
    }
    if (ws_dir_rescan(s->dir, &lim, &m->blobs, skipped, &e->base) < 0) {
        store_rollback(m->st);
        if (e->base.code == ERR_TOOBIG) {
            /* The reference's words first, then the scan's cause (the file, or the one-file
             * or blob cap that was hit), which says what to delete. */
            size_exceeded(e, lim.max_bytes, e->base.msg);
            return commit_failed(s);
        }
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return commit_failed(s);
    }
    if (ws_manifest_clone(ws_dir_manifest(s->dir), &next, &e->base) < 0) {
        store_rollback(m->st);
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return commit_failed(s);
    }
    if (commit_manifest(s, next, NULL, 0, meta, audit, delta, 1, e) < 0) {
        /* The directory holds the command's changes, which were not kept. */
        return commit_failed(s);
    }
    s->dir_trusted = 1;
    return 0;
}
