/*
 * session_read.c - reading a session's stored state: manifests of checkpoints, file
 * contents, key lookup, checkpoint resolution, steps, and the UTF-8 checks that decide
 * whether bytes can travel as JSON text.
 */
#include "session/session_int.h"

#include <stdio.h>
#include <string.h>

#include "util/mem.h"
#include "util/pathkey.h"
#include "util/utf8.h"

int
session_load_manifest(struct session_mgr *m, const char *id, int64_t cp, struct ws_manifest **out,
                      struct session_err *e)
{
    struct store_checkpoint c;
    struct buf b;
    int rc;

    memset(&c, 0, sizeof(c));
    if (store_checkpoint_get(m->st, id, cp, &c, &e->base) < 0) {
        return session_fail_err(
            e, e->base.code == ERR_NOTFOUND ? SESSION_E_CP_NOT_FOUND : SESSION_E_OTHER, &e->base);
    }
    buf_init(&b, STORE_BLOB_MAX_DEFAULT);
    rc = store_blob_get(m->st, c.manifest_hash, &b, &e->base);
    store_checkpoint_release(&c);
    if (rc == 0) {
        rc = ws_manifest_decode(b.data ? b.data : "", b.len, out, &e->base);
    }
    buf_release(&b);
    if (rc < 0) {
        err_wrap(&e->base, "cannot load checkpoint %lld of session '%s'", (long long)cp, id);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

int
session_read_entry(struct session_mgr *m, const struct ws_entry *entry, struct buf *out,
                   struct session_err *e)
{
    if (entry->type == WS_DIR) {
        return session_fail(e, SESSION_E_FILE_NOT_FOUND, ERR_NOTFOUND,
                            "'%s' is a directory; read the files inside it", entry->path);
    }
    if (entry->size > out->max - out->len) {
        session_fail(e, SESSION_E_TOO_LARGE, ERR_TOOBIG,
                     "'%s' has %llu bytes, more than one result may carry (%zu); read it in "
                     "pieces with offset and limit, or search it with pattern",
                     entry->path, (unsigned long long)entry->size, out->max - out->len);
        e->d1 = (int64_t)entry->size;
        e->d2 = (int64_t)(out->max - out->len);
        return -1;
    }
    if (entry->size == 0) {
        return 0;
    }
    if (store_blob_get(m->st, entry->hash, out, &e->base) < 0) {
        err_wrap(&e->base, "cannot read '%s'", entry->path);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

int
session_lookup(const struct ws_manifest *m, const char *key, const char *where,
               const struct ws_entry **out, struct session_err *e)
{
    struct buf k;
    const struct ws_entry *ent;

    buf_init(&k, PATHKEY_MAX + 1);
    if (pathkey_normalize(key, strlen(key), &k, &e->base) < 0) {
        buf_release(&k);
        return session_fail_err(e, SESSION_E_BAD_PATH, &e->base);
    }
    ent = ws_manifest_get(m, buf_cstr(&k));
    if (ent == NULL || ent->type == WS_DIR) {
        char q[300];
        pathkey_quote(key, strlen(key), q, sizeof(q));
        buf_release(&k);
        if (where != NULL) {
            return session_fail(e, SESSION_E_FILE_NOT_FOUND, ERR_NOTFOUND,
                                "file '%s' not found in %s", q, where);
        }
        return session_fail(e, SESSION_E_FILE_NOT_FOUND, ERR_NOTFOUND,
                            "'%s' not found in current checkpoint", q);
    }
    buf_release(&k);
    *out = ent;
    return 0;
}

int
session_resolve(struct session *s, const char *label, int64_t id, int64_t dflt, int64_t *out,
                struct session_err *e)
{
    if (label != NULL) {
        if (store_checkpoint_find_label(s->mgr->st, s->id, label, out, &e->base) < 0) {
            if (e->base.code == ERR_NOTFOUND) {
                char q[300];
                pathkey_quote(label, strlen(label), q, sizeof(q));
                return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                                    "no checkpoint with label '%s'; see session_history", q);
            }
            return session_fail_err(e, SESSION_E_OTHER, &e->base);
        }
        return 0;
    }
    if (id < 0) {
        id = dflt;
    }
    if (!session_cp_live(s, id)) {
        return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                            "checkpoint %lld does not exist; see session_history", (long long)id);
    }
    *out = id;
    return 0;
}

int
session_step(struct session *s, int64_t cp, const char *tool, const char *description,
             struct session_err *e)
{
    if (store_step_append_soon(s->mgr->st, s->id, cp < 0 ? s->head : cp, tool,
                               description ? description : "", &e->base) < 0) {
        return session_fail_err(e, e->base.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER,
                                &e->base);
    }
    return 0;
}

int
session_is_text(const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t i = 0;

    while (i < len) {
        size_t k;
        if (p[i] == 0) {
            return 0;
        }
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        k = utf8_seq(p + i, len - i);
        if (k == 0) {
            return 0;
        }
        i += k;
    }
    return 1;
}

size_t
session_utf8_floor(const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t back = 0;

    /* Walk back over at most 3 continuation bytes to the lead byte of the last char. */
    while (back < 4 && back < len) {
        unsigned char c = p[len - 1 - back];
        if ((c & 0xc0) != 0x80) {
            size_t want = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            return back + 1 >= want ? len : len - back - 1;
        }
        back++;
    }
    return len;
}
