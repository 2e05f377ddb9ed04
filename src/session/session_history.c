/*
 * session_history.c - operations that move the head or rewrite history in place:
 * rollback, checkpoint labels, squash and drop.
 *
 * None of them renumbers anything. Squash folds a range into its LAST checkpoint (that
 * checkpoint already holds the range's final files, so its id and manifest stay valid)
 * and marks the others STORE_CP_SQUASHED; drop marks its range STORE_CP_DROPPED and
 * re-parents the next live checkpoint, recomputing its change rows against its new
 * parent. Each runs in one transaction, and memory follows only after the commit.
 */
#include "session/session_int.h"

#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "util/mem.h"

int
session_rollback(struct session *s, int64_t cp, struct session_delta *delta, struct session_err *e)
{
    struct ws_manifest *man = NULL;
    struct ws_diff_counts c = {0, 0, 0};

    if (!session_cp_live(s, cp)) {
        return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                            "checkpoint %lld does not exist; see session_history", (long long)cp);
    }
    if (session_load_manifest(s->mgr, s->id, cp, &man, e) < 0) {
        return -1;
    }
    if (ws_manifest_diff(s->manifest, man, NULL, NULL, &c, &e->base) < 0 ||
        store_session_set_head(s->mgr->st, s->id, cp, &e->base) < 0) {
        ws_manifest_free(man);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    sess_set_head(s, cp, man);
    if (delta != NULL) {
        delta->checkpoint_id = cp;
        delta->added = c.added;
        delta->modified = c.modified;
        delta->removed = c.removed;
        delta->removed_unstorable = 0;
    }
    /*
     * Entries the scans could not store (bad names, FIFOs, ...) are in no checkpoint, so
     * the incremental sync before the next command would never remove them: a rollback
     * to checkpoint 0 would still let the next command read them. Remove them now.
     */
    if (session_workspace_has_unstorable(s)) {
        int64_t n = 0;
        if (session_workspace_reset(s, &n, e) < 0) {
            log_warn("session '%s': cannot reset the workspace after a rollback: %s", s->id,
                     e->base.msg);
        } else if (delta != NULL) {
            delta->removed_unstorable = n;
        }
    }
    return 0;
}

int
session_cp_label(struct session *s, int64_t cp, const char *label, struct session_err *e)
{
    if (!session_cp_live(s, cp)) {
        return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                            "checkpoint %lld does not exist; see session_history", (long long)cp);
    }
    if (store_checkpoint_set_label(s->mgr->st, s->id, cp, label && label[0] ? label : NULL,
                                   &e->base) < 0) {
        return session_fail_err(e, e->base.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER,
                                &e->base);
    }
    return 0;
}

/* The range rules shared by squash and drop (reference section 4.5), on stable ids. */
static int
check_range(struct session *s, int64_t from, int64_t to, const char *verb, struct session_err *e)
{
    if (from < 1) {
        return session_fail(e, SESSION_E_OTHER, ERR_INVAL,
                            "checkpoint 0 is the session's starting point and cannot be %s; "
                            "start the range at checkpoint 1 or later",
                            verb);
    }
    if (from > to) {
        return session_fail(e, SESSION_E_OTHER, ERR_INVAL, "from_id %lld must be <= to_id %lld",
                            (long long)from, (long long)to);
    }
    if (!session_cp_live(s, from)) {
        return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                            "checkpoint %lld does not exist; see session_history", (long long)from);
    }
    if (!session_cp_live(s, to)) {
        return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                            "checkpoint %lld does not exist; see session_history", (long long)to);
    }
    return 0;
}

/*
 * Rewrites checkpoint `cp` (loaded, any fields changed by the caller) with parent
 * `parent` and change rows recomputed against the parent's manifest.
 */
static int
reparent(struct session *s, struct store_checkpoint *cp, int64_t parent, struct session_err *e)
{
    struct ws_manifest *pm = NULL, *cm = NULL;
    struct store_change *changes = NULL;
    struct ws_diff_counts c = {0, 0, 0};
    size_t n = 0;
    int rc = -1;

    if (session_load_manifest(s->mgr, s->id, parent, &pm, e) < 0 ||
        session_load_manifest(s->mgr, s->id, cp->id, &cm, e) < 0 ||
        sess_changes(pm, cm, &changes, &n, &c, e) < 0) {
        goto out;
    }
    cp->parent = parent;
    cp->added = (int64_t)c.added;
    cp->modified = (int64_t)c.modified;
    cp->removed = (int64_t)c.removed;
    if (store_checkpoint_rewrite(s->mgr->st, cp, changes, n, &e->base) < 0) {
        session_fail_err(e, e->base.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER,
                         &e->base);
        goto out;
    }
    rc = 0;
out:
    mem_free(changes);
    ws_manifest_free(pm);
    ws_manifest_free(cm);
    return rc;
}

/* Appends the stream of checkpoint c (stdout if which == 0) to out, "\n"-joined. */
static int
join_stream(struct session *s, const struct store_checkpoint *c, int which, struct buf *out,
            struct session_err *e)
{
    int64_t bytes = which == 0 ? c->stdout_bytes : c->stderr_bytes;

    if (bytes == 0) {
        return 0;
    }
    if (out->len > 0) {
        buf_putc(out, '\n');
    }
    if (store_blob_get(s->mgr->st, which == 0 ? c->stdout_hash : c->stderr_hash, out, &e->base) <
        0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

/* Stores the joined stream in b as a blob (none when empty). */
static int
put_or_clear(struct session *s, const struct buf *b, uint8_t hash[HASH_LEN], int64_t *bytes,
             struct session_err *e)
{
    *bytes = (int64_t)b->len;
    if (b->len == 0) {
        memset(hash, 0, HASH_LEN);
        return 0;
    }
    if (store_blob_put(s->mgr->st, b->data, b->len, hash, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

int
session_squash(struct session *s, int64_t from, int64_t to, const char *label,
               struct session_err *e)
{
    struct store_checkpoint *list = NULL, last;
    size_t n = 0;
    struct buf out, errb, cmd;
    int64_t parent = -1;
    int rc = -1, in_tx = 0;
    struct ws_manifest *head_man = NULL;
    int64_t new_head = s->head;

    memset(&last, 0, sizeof(last));
    buf_init(&out, (size_t)1 << 30);
    buf_init(&errb, (size_t)1 << 30);
    buf_init(&cmd, STORE_TEXT_MAX);
    if (check_range(s, from, to, "squashed", e) < 0) {
        goto out;
    }
    parent = s->live[sess_live_index(s, from) - 1];
    if (store_checkpoint_list(s->mgr->st, s->id, 0, &list, &n, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (list[i].id < from || list[i].id > to) {
            continue;
        }
        if (join_stream(s, &list[i], 0, &out, e) < 0 || join_stream(s, &list[i], 1, &errb, e) < 0) {
            goto out;
        }
        if (list[i].command != NULL && list[i].command[0] != '\0') {
            if (cmd.len > 0) {
                buf_puts(&cmd, " && ");
            }
            buf_puts(&cmd, list[i].command);
        }
        if (list[i].id == to) {
            last = list[i];
            memset(&list[i], 0, sizeof(list[i]));
        }
    }
    if (buf_failed(&out) || buf_failed(&errb) || buf_failed(&cmd)) {
        session_fail(e, SESSION_E_OTHER, ERR_TOOBIG,
                     "the squashed output or commands are too large; squash a shorter range");
        goto out;
    }
    if (s->head >= from && s->head < to) {
        new_head = to;
        if (session_load_manifest(s->mgr, s->id, to, &head_man, e) < 0) {
            goto out;
        }
    }
    if (store_begin(s->mgr->st, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    in_tx = 1;
    if (to > from && store_checkpoint_set_status(s->mgr->st, s->id, from, to - 1, STORE_CP_SQUASHED,
                                                 &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    if (put_or_clear(s, &out, last.stdout_hash, &last.stdout_bytes, e) < 0 ||
        put_or_clear(s, &errb, last.stderr_hash, &last.stderr_bytes, e) < 0) {
        goto out;
    }
    mem_free(last.command);
    last.command = cmd.len > 0 ? mem_strdup(buf_cstr(&cmd)) : NULL;
    mem_free(last.tool);
    last.tool = mem_strdup("session_checkpoint_squash");
    mem_free(last.description);
    last.description = NULL;
    mem_free(last.label);
    last.label = label && label[0] ? mem_strdup(label) : NULL;
    if (last.tool == NULL || (cmd.len > 0 && last.command == NULL) ||
        (label && label[0] && last.label == NULL)) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        goto out;
    }
    if (reparent(s, &last, parent, e) < 0) {
        goto out;
    }
    if (new_head != s->head && store_session_set_head(s->mgr->st, s->id, new_head, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    if (store_step_append(s->mgr->st, s->id, to, "session_checkpoint_squash", "", &e->base) < 0 ||
        store_commit(s->mgr->st, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    in_tx = 0;
    /* Memory follows the store: drop the squashed ids, move the head if it was inside. */
    {
        size_t w = 0;
        for (size_t i = 0; i < s->n_live; i++) {
            if (s->live[i] < from || s->live[i] >= to) {
                s->live[w++] = s->live[i];
            }
        }
        s->n_live = w;
    }
    if (head_man != NULL) {
        sess_set_head(s, new_head, head_man);
        head_man = NULL;
    }
    rc = 0;
out:
    if (in_tx) {
        store_rollback(s->mgr->st);
    }
    ws_manifest_free(head_man);
    store_checkpoint_release(&last);
    store_checkpoint_list_free(list, n);
    buf_release(&out);
    buf_release(&errb);
    buf_release(&cmd);
    return rc;
}

int
session_drop(struct session *s, int64_t from, int64_t to, struct session_err *e)
{
    struct store_checkpoint next;
    long ifrom, ito;
    int rc = -1, in_tx = 0;

    memset(&next, 0, sizeof(next));
    if (check_range(s, from, to, "dropped", e) < 0) {
        return -1;
    }
    if (s->head >= from && s->head <= to) {
        return session_fail(e, SESSION_E_OTHER, ERR_INVAL,
                            "cannot drop the current checkpoint (%lld); roll back outside the "
                            "range first",
                            (long long)s->head);
    }
    ifrom = sess_live_index(s, from);
    ito = sess_live_index(s, to);
    if (store_begin(s->mgr->st, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    in_tx = 1;
    if (store_checkpoint_set_status(s->mgr->st, s->id, from, to, STORE_CP_DROPPED, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    if ((size_t)ito + 1 < s->n_live) {
        /* The next live checkpoint now follows the one before the range. */
        if (store_checkpoint_get(s->mgr->st, s->id, s->live[ito + 1], &next, &e->base) < 0) {
            session_fail_err(e, SESSION_E_OTHER, &e->base);
            goto out;
        }
        if (reparent(s, &next, s->live[ifrom - 1], e) < 0) {
            goto out;
        }
    }
    if (store_step_append(s->mgr->st, s->id, s->head, "session_checkpoint_drop", "", &e->base) <
            0 ||
        store_commit(s->mgr->st, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        goto out;
    }
    in_tx = 0;
    memmove(s->live + ifrom, s->live + ito + 1, (s->n_live - (size_t)ito - 1) * sizeof(int64_t));
    s->n_live -= (size_t)(ito - ifrom + 1);
    rc = 0;
out:
    if (in_tx) {
        store_rollback(s->mgr->st);
    }
    store_checkpoint_release(&next);
    return rc;
}
