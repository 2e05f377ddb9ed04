/*
 * tools_sess.c - helpers shared by the session tool families; see tools_sess.h.
 */
#include "policy/policy.h"
#include "tools/tools_sess.h"

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "store/store.h"
#include "tools/tools_bash.h"
#include "util/mem.h"

struct session_mgr *
tsess_mgr(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call);

    if (env == NULL || env->sessions == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL,
                             "sessions are not available in this process; restart drun-mcp", NULL);
        return NULL;
    }
    /* Every session call runs under the limits of the policy in force now. Without a
     * good policy the last limits stay; tools that need policy refuse through
     * tools_policy() themselves. */
    if (env->policy != NULL) {
        struct policy *p = NULL;
        struct err err;
        if (policy_current(env->policy, &p, &err) == 0) {
            struct session_limits lim;
            lim.max_sessions = p->max_sessions;
            lim.max_checkpoints = p->max_checkpoints;
            lim.max_workspace_mb = p->max_workspace_mb;
            lim.idle_secs = p->session_idle_timeout_secs;
            lim.sandbox_uid = (uint32_t)p->sandbox_uid;
            lim.sandbox_gid = (uint32_t)p->sandbox_gid;
            session_mgr_set_limits(env->sessions, &lim);
            policy_unref(p);
        }
    }
    return env->sessions;
}

const char *
tsess_code(const struct session_err *e)
{
    switch ((enum session_errc)e->kind) {
    case SESSION_E_NOT_FOUND:
        return "session_not_found";
    case SESSION_E_BUSY:
        return "session_busy";
    case SESSION_E_IDLE:
        return "session_idle";
    case SESSION_E_LIMIT:
        return "session_limit_reached";
    case SESSION_E_CP_NOT_FOUND:
        return "checkpoint_not_found";
    case SESSION_E_CP_LIMIT:
        return "checkpoint_limit_reached";
    case SESSION_E_FILE_NOT_FOUND:
        return "file_not_found";
    case SESSION_E_BAD_PATH:
        return "invalid_workspace_path";
    case SESSION_E_SIZE:
        return "workspace_size_exceeded";
    case SESSION_E_PATTERN:
        return "invalid_pattern";
    case SESSION_E_BINARY:
        return "binary_content";
    case SESSION_E_TOO_LARGE:
        return "result_too_large";
    case SESSION_E_ARGS:
        return TOOL_ERR_INVALID_ARGUMENTS;
    case SESSION_E_UNSUPPORTED:
        return "unsupported_extraction_format";
    case SESSION_E_EXTRACT:
        return "extraction_failed";
    case SESSION_E_OTHER:
        break;
    }
    switch (e->base.code) {
    case ERR_CANCELLED:
    case ERR_BUSY:
    case ERR_STALE:
        return tools_err_code(e->base.code);
    default:
        return TOOL_ERR_INTERNAL;
    }
}

void
tsess_fail(struct tool_call *call, const struct session_err *e)
{
    cJSON *d = NULL;

    switch ((enum session_errc)e->kind) {
    case SESSION_E_IDLE:
        d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "idle_secs", (double)e->d1);
        cJSON_AddNumberToObject(d, "limit_secs", (double)e->d2);
        break;
    case SESSION_E_LIMIT:
    case SESSION_E_CP_LIMIT:
        d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "limit", (double)e->d1);
        break;
    case SESSION_E_SIZE:
        d = cJSON_CreateObject();
        if (e->d1 >= 0) {
            cJSON_AddNumberToObject(d, "actual_bytes", (double)e->d1);
        }
        cJSON_AddNumberToObject(d, "limit_bytes", (double)e->d2);
        break;
    case SESSION_E_TOO_LARGE:
        d = cJSON_CreateObject();
        if (e->d1 >= 0) {
            cJSON_AddNumberToObject(d, "total_bytes", (double)e->d1);
        }
        cJSON_AddNumberToObject(d, "limit_bytes", (double)e->d2);
        break;
    case SESSION_E_BUSY:
        if (e->d1 > 0) {
            d = cJSON_CreateObject();
            cJSON_AddNumberToObject(d, "holder_pid", (double)e->d1);
        }
        break;
    case SESSION_E_OTHER:
    case SESSION_E_NOT_FOUND:
    case SESSION_E_CP_NOT_FOUND:
    case SESSION_E_FILE_NOT_FOUND:
    case SESSION_E_BAD_PATH:
    case SESSION_E_PATTERN:
    case SESSION_E_BINARY:
    case SESSION_E_ARGS:
    case SESSION_E_UNSUPPORTED:
    case SESSION_E_EXTRACT:
        break;
    }
    tool_call_done_error(call, tsess_code(e), e->base.msg, d);
}

static struct session *open_with(struct tool_call *call, int mode, int view_ok);

struct session *
tsess_open(struct tool_call *call, int mode)
{
    return open_with(call, mode, 0);
}

struct session *
tsess_open_read(struct tool_call *call)
{
    return open_with(call, SESSION_READ, 1);
}

static struct session *
open_with(struct tool_call *call, int mode, int view_ok)
{
    struct session_mgr *m = tsess_mgr(call);
    struct tools_env *env = tool_call_env(call);
    const char *id = tool_call_arg_str(call, "session_id");
    struct session *s = NULL;
    struct session_err e;

    if (m == NULL) {
        return NULL;
    }
    if (id == NULL) {
        id = env->session_id;
        if (id[0] == '\0') {
            tool_call_done_error(call, "no_active_session",
                                 "no active session for this connection; call create_session or "
                                 "session_switch first",
                                 NULL);
            return NULL;
        }
    }
    tool_call_set_session(call, id);
    int fresh = session_mgr_find(m, id) == NULL;
    if (session_attach(m, id, &s, &e) < 0) {
        /* Held by another live process: a read is answered from the DB, without taking
         * the hold and without a workspace or sandbox here. */
        if (!view_ok || e.kind != SESSION_E_BUSY || session_view(m, id, &s, &e) < 0) {
            tsess_fail(call, &e);
            return NULL;
        }
        fresh = 0;
    }
    if (fresh) {
        tools_bash_prewarm_soon(env, id); /* just attached: its next sandbox, after this call */
    }
    if (mode != 0 && session_enter(s, mode, &e) < 0) {
        tsess_fail(call, &e);
        return NULL;
    }
    return s;
}

void
tsess_commit(struct tool_call *call, struct session *s, struct session_edit *ed,
             const struct session_commit_meta *meta)
{
    struct store_audit row;
    struct session_delta d;
    struct session_err e;
    cJSON *st;

    tool_call_audit_prepare(call, &row);
    if (session_edit_commit(ed, meta, &row, &d, &e) < 0) {
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        return;
    }
    tool_call_audit_taken(call);
    tool_call_set_checkpoint(call, d.checkpoint_id);
    session_leave(s, SESSION_WRITE);
    st = tsess_state(s, &d, &e);
    if (st == NULL) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_done_json(call, st);
}

cJSON *
tsess_state(struct session *s, const struct session_delta *d, struct session_err *e)
{
    struct store *st = session_mgr_store(session_owner(s));
    struct store_session ss;
    struct store_checkpoint cp;
    cJSON *o = NULL;

    memset(&cp, 0, sizeof(cp));
    if (store_session_get(st, session_id(s), &ss, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return NULL;
    }
    if (store_checkpoint_get(st, session_id(s), session_head(s), &cp, &e->base) < 0) {
        store_session_release(&ss);
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return NULL;
    }
    o = cJSON_CreateObject();
    if (o == NULL) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        goto out;
    }
    cJSON_AddStringToObject(o, "session_id", ss.id);
    if (ss.label != NULL) {
        cJSON_AddStringToObject(o, "label", ss.label);
    }
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)session_head(s));
    if (ss.parent_id[0] != '\0') {
        cJSON_AddStringToObject(o, "parent_session_id", ss.parent_id);
        cJSON_AddNumberToObject(o, "parent_checkpoint_id", (double)ss.parent_checkpoint);
    }
    cJSON_AddNumberToObject(o, "stdout_bytes", (double)cp.stdout_bytes);
    cJSON_AddNumberToObject(o, "stderr_bytes", (double)cp.stderr_bytes);
    if (cp.has_exit_code) {
        cJSON_AddNumberToObject(o, "exit_code", cp.exit_code);
    }
    cJSON_AddNumberToObject(o, "workspace_file_count",
                            (double)ws_manifest_files(session_manifest(s)));
    cJSON_AddNumberToObject(o, "files_added_count", d ? (double)d->added : (double)cp.added);
    cJSON_AddNumberToObject(o, "files_modified_count",
                            d ? (double)d->modified : (double)cp.modified);
    cJSON_AddNumberToObject(o, "files_removed_count", d ? (double)d->removed : (double)cp.removed);
out:
    store_session_release(&ss);
    store_checkpoint_release(&cp);
    return o;
}

cJSON *
tsess_summary(struct session_mgr *m, const struct store_checkpoint *cp, int64_t head, int tree,
              struct session_err *e)
{
    struct store_step *steps = NULL;
    size_t n = 0;
    cJSON *o = cJSON_CreateObject();

    if (o == NULL) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (store_step_list(session_mgr_store(m), cp->session_id, cp->id, &steps, &n, &e->base) < 0) {
        cJSON_Delete(o);
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return NULL;
    }
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)cp->id);
    if (tree) {
        cJSON_AddBoolToObject(o, "is_current", cp->id == head);
    }
    if (cp->label != NULL) {
        cJSON_AddStringToObject(o, "label", cp->label);
    }
    if (cp->command != NULL) {
        cJSON_AddStringToObject(o, "command", cp->command);
    }
    if (cp->has_exit_code && !tree) {
        cJSON_AddNumberToObject(o, "exit_code", cp->exit_code);
    }
    if (cp->tool != NULL) {
        cJSON_AddStringToObject(o, "tool", cp->tool);
    }
    if (cp->description != NULL) {
        cJSON_AddStringToObject(o, "description", cp->description);
    }
    if (n > 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "steps");
        for (size_t i = 0; i < n; i++) {
            cJSON *st = cJSON_CreateObject();
            cJSON_AddStringToObject(st, "tool", steps[i].tool ? steps[i].tool : "");
            cJSON_AddStringToObject(st, "description",
                                    steps[i].description ? steps[i].description : "");
            cJSON_AddItemToArray(a, st);
        }
    }
    if (cp->has_exit_code && tree) {
        cJSON_AddNumberToObject(o, "exit_code", cp->exit_code);
    }
    cJSON_AddNumberToObject(o, "stdout_bytes", (double)cp->stdout_bytes);
    cJSON_AddNumberToObject(o, "stderr_bytes", (double)cp->stderr_bytes);
    cJSON_AddNumberToObject(o, "file_count", (double)cp->file_count);
    cJSON_AddNumberToObject(o, "files_added_count", (double)cp->added);
    cJSON_AddNumberToObject(o, "files_modified_count", (double)cp->modified);
    cJSON_AddNumberToObject(o, "files_removed_count", (double)cp->removed);
    store_step_list_free(steps, n);
    return o;
}

cJSON *
tsess_history(struct session_mgr *m, const char *id, struct session_err *e)
{
    struct store_checkpoint *list = NULL;
    struct store_session ss;
    size_t n = 0;
    cJSON *a;

    if (store_session_get(session_mgr_store(m), id, &ss, &e->base) < 0) {
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return NULL;
    }
    if (store_checkpoint_list(session_mgr_store(m), id, 0, &list, &n, &e->base) < 0) {
        store_session_release(&ss);
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return NULL;
    }
    a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON *o = tsess_summary(m, &list[i], ss.head, 0, e);
        if (o == NULL) {
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        cJSON_AddItemToArray(a, o);
    }
    if (a == NULL && e->base.code == ERR_OK) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    store_session_release(&ss);
    store_checkpoint_list_free(list, n);
    return a;
}

int64_t
tsess_arg_id(struct tool_call *call, const char *name)
{
    return tool_call_arg_int(call, name, -1);
}

int
tsess_page(cJSON *obj, const char *data, size_t len, int64_t offset, int64_t limit,
           struct session_err *e)
{
    size_t start = offset < 0 ? 0 : (uint64_t)offset > len ? len : (size_t)offset;
    size_t end = limit < 0 || (uint64_t)limit > len - start ? len : start + (size_t)limit;
    size_t n2;
    int text;

    if (end - start > SESSION_READ_MAX) {
        session_fail(e, SESSION_E_TOO_LARGE, ERR_TOOBIG,
                     "the requested range has %zu bytes, more than one result may carry (%zu); "
                     "pass a smaller limit and read the rest with offset",
                     end - start, SESSION_READ_MAX);
        e->d1 = (int64_t)(end - start);
        e->d2 = (int64_t)SESSION_READ_MAX;
        return -1;
    }
    text = session_is_text(data + start, end - start);
    if (!text && end < len) {
        /* The cut may fall inside a character: end the slice at its boundary instead. */
        n2 = session_utf8_floor(data + start, end - start);
        if (n2 > 0 && session_is_text(data + start, n2)) {
            end = start + n2;
            text = 1;
        }
    }
    cJSON_AddNumberToObject(obj, "offset", (double)start);
    cJSON_AddNumberToObject(obj, "length", (double)(end - start));
    cJSON_AddNumberToObject(obj, "total_bytes", (double)len);
    cJSON_AddBoolToObject(obj, "has_more", end < len);
    cJSON_AddStringToObject(obj, "encoding", text ? "text" : "base64");
    if (text) {
        char *c = mem_strndup(data + start, end - start);
        if (c == NULL) {
            return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        }
        cJSON_AddStringToObject(obj, "content", c);
        mem_free(c);
    } else {
        struct buf b;
        buf_init(&b, SESSION_READ_MAX * 2);
        tsess_b64_encode(data + start, end - start, &b);
        cJSON_AddStringToObject(obj, "content", buf_cstr(&b));
        buf_release(&b);
    }
    return 0;
}

/*
 * Base64 is OpenSSL's codec (EVP_EncodeBlock / EVP_DecodeBlock). EVP_DecodeBlock alone is
 * too lenient for input: it reads '=' anywhere as zero bits and leaves the padding in the
 * output length. So the input is first checked here: ASCII whitespace (what `base64`
 * and mail tools wrap lines with) is dropped, '=' may only end the data (at most two),
 * and the remaining length must be a multiple of 4; a byte outside the alphabet is then
 * found by OpenSSL and named by its offset in the caller's input.
 */
#define B64_CHUNK ((size_t)1 << 20) /* encoded characters per OpenSSL call; a multiple of 4 */

static int
b64_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int
b64_alpha(int c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

int
tsess_b64_encode(const void *data, size_t len, struct buf *out)
{
    const unsigned char *p = data;

    if (buf_grow(out, (len + 2) / 3 * 4) < 0) {
        return -1;
    }
    for (size_t i = 0; i < len;) {
        size_t k = len - i < B64_CHUNK / 4 * 3 ? len - i : B64_CHUNK / 4 * 3;
        int n = EVP_EncodeBlock((unsigned char *)out->data + out->len, p + i, (int)k);
        out->len += (size_t)n;
        i += k;
    }
    if (out->data != NULL) {
        out->data[out->len] = '\0';
    }
    return 0;
}

int
tsess_b64_decode(const char *in, size_t len, struct buf *out, struct err *err)
{
    char *clean = NULL;
    size_t n = 0, pad = 0, first_pad = 0;
    int rc = -1;

    clean = mem_alloc(len + 1);
    if (clean == NULL) {
        return err_set(err, ERR_NOMEM, "cannot decode base64: out of memory");
    }
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)in[i];
        if (b64_space(c)) {
            continue;
        }
        if (c == '=') {
            if (pad++ == 0) {
                first_pad = i;
            }
        } else if (pad > 0) {
            err_set(err, ERR_INVAL,
                    "base64 decode error: '=' padding at offset %zu is inside the data; '=' may "
                    "only end it",
                    first_pad);
            goto out;
        }
        clean[n++] = (char)c;
    }
    if (pad > 2) {
        err_set(err, ERR_INVAL,
                "base64 decode error: %zu '=' at offset %zu; padding is at most two '='", pad,
                first_pad);
        goto out;
    }
    if (n % 4 != 0) {
        err_set(err, ERR_INVAL,
                "base64 decode error: %zu base64 characters (not counting whitespace) is not a "
                "multiple of 4; send standard padded base64",
                n);
        goto out;
    }
    if (buf_grow(out, n / 4 * 3) < 0) {
        rc = buf_err(out, "the decoded content", err);
        goto out;
    }
    for (size_t i = 0; i < n; i += B64_CHUNK) {
        size_t k = n - i < B64_CHUNK ? n - i : B64_CHUNK;
        int got = EVP_DecodeBlock((unsigned char *)out->data + out->len,
                                  (const unsigned char *)clean + i, (int)k);
        if (got < 0) {
            size_t at = 0;
            while (at < len && (b64_alpha((unsigned char)in[at]) || in[at] == '=' ||
                                b64_space((unsigned char)in[at]))) {
                at++;
            }
            err_set(err, ERR_INVAL,
                    "base64 decode error: invalid byte at offset %zu; send standard base64 "
                    "(A-Z a-z 0-9 + / and '=' padding)",
                    at);
            goto out;
        }
        out->len += (size_t)got;
    }
    out->len -= pad; /* EVP_DecodeBlock counts each '=' as a zero byte */
    if (out->data != NULL) {
        out->data[out->len] = '\0';
    }
    rc = 0;
out:
    mem_free(clean);
    return rc;
}
