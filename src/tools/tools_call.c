/*
 * tools_call.c - one tools/call from start to end: argument check, handler, result
 * encoding, progress, cancellation and the audit row.
 *
 * Invariants. A call ends exactly once, through finish(); finish() writes the audit row,
 * hands the result (or NULL when cancelled) to the host and frees the call. Nothing is
 * sent for a cancelled call, and progress never goes backwards. Results follow the MCP
 * tools/call shape: content blocks, isError for tool failures, structuredContent for
 * JSON results (the same object as the text block, so a client can read either).
 */
#include "tools/tools.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "session/session.h"
#include "store/store.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"

#define SUMMARY_MAX 200

struct tool_call {
    struct tools_env *env;
    const struct tool_def *def;
    struct tool_call_host host;
    cJSON *args;           /* owned; always an object once run */
    cJSON *progress_token; /* owned; NULL if none */
    char *client_name;     /* owned; may be NULL */
    char *client_version;
    char *refusal;         /* owned; the transport's refusal of the arguments, or NULL */
    int64_t start_ms;      /* wall clock, for the audit row */
    int64_t start_mono_ms; /* for the duration */
    double last_progress;
    int sent_progress;
    int cancelled;
    tool_cancel_fn cancel_fn;
    void *cancel_arg;
    char session_id[16];
    int64_t checkpoint_id;
    char summary[SUMMARY_MAX + 1];
    char *audit_args;                     /* owned; the arguments printed by audit_args_build */
    struct store_audit_part *audit_parts; /* owned array; data points into args */
    size_t audit_nparts;
    char audit_summary[SUMMARY_MAX + 64];
    int audit_taken;                    /* the tool wrote the audit row in its own transaction */
    int64_t lock_deadline_ms;           /* monotonic; 0 until the call first met the lock */
    struct session_lockwait *lock_wait; /* parked until the write lock is free, or NULL */
    tool_lock_fn lock_fn;               /* what to call then */
    void *lock_arg;
};

/* The call whose handler runs synchronously right now (see run_handler). */
static struct tool_call *sync_call;

static void run_handler(struct tool_call *c);

const char *
tools_err_code(int err_code)
{
    switch ((enum err_code)err_code) {
    case ERR_INVAL:
        return TOOL_ERR_INVALID_ARGUMENTS;
    case ERR_CANCELLED:
        return TOOL_ERR_CANCELLED;
    case ERR_TIMEOUT:
        return "execution_timeout";
    case ERR_BUSY:
        return TOOL_ERR_STORE_BUSY;
    case ERR_STALE:
        return TOOL_ERR_STORE_REPLACED;
    case ERR_OK:
    case ERR_NOMEM:
    case ERR_NOTFOUND:
    case ERR_EXISTS:
    case ERR_DENIED:
    case ERR_TOOBIG:
    case ERR_IO:
    case ERR_DB:
    case ERR_CORRUPT:
    case ERR_VERSION:
    case ERR_INTERNAL:
    case ERR__COUNT:
        break;
    }
    return TOOL_ERR_INTERNAL;
}

struct tool_call *
tools_call_new(struct tools_env *env, const struct tool_call_req *req,
               const struct tool_call_host *host)
{
    struct tool_call *c = mem_calloc(1, sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    c->env = env;
    c->def = req->def;
    c->host = *host;
    c->checkpoint_id = -1;
    c->start_ms = time_now_ms();
    c->start_mono_ms = time_mono_ms();
    c->args = req->arguments ? cJSON_Duplicate(req->arguments, 1) : cJSON_CreateObject();
    if (req->progress_token != NULL) {
        c->progress_token = cJSON_Duplicate(req->progress_token, 1);
    }
    if (req->client_name != NULL) {
        c->client_name = mem_strdup(req->client_name);
    }
    if (req->client_version != NULL) {
        c->client_version = mem_strdup(req->client_version);
    }
    if (req->refusal != NULL) {
        c->refusal = mem_strdup(req->refusal);
    }
    if (c->args == NULL || (req->progress_token && c->progress_token == NULL) ||
        (req->client_name && c->client_name == NULL) ||
        (req->client_version && c->client_version == NULL) ||
        (req->refusal && c->refusal == NULL)) {
        cJSON_Delete(c->args);
        cJSON_Delete(c->progress_token);
        mem_free(c->client_name);
        mem_free(c->client_version);
        mem_free(c->refusal);
        mem_free(c);
        return NULL;
    }
    return c;
}

/*
 * Audit arguments: a copy of the call's arguments where every string value longer than
 * STORE_AUDIT_REF_MIN bytes is the reference {"$blob":"<hex>","bytes":N} and its bytes
 * a part (the store writes it as a blob, or puts a small one back inline unless those
 * bytes are already stored, so content a call also writes as a file is stored once),
 * and where an agent's key "$blob" ("$$blob", ...) gets one more '$'. The shape and its
 * expansion are described in store.h.
 */
struct audit_build {
    struct store_audit_part *parts;
    size_t n, cap;
};

static int
audit_key_needs_escape(const char *k)
{
    size_t d = strspn(k, "$");

    return d >= 1 && strcmp(k + d, "blob") == 0;
}

static cJSON *
audit_copy(const cJSON *v, struct audit_build *a)
{
    cJSON *out;

    if (cJSON_IsString(v) && v->valuestring != NULL) {
        size_t n = strlen(v->valuestring);
        char hex[HASH_HEX_LEN + 1];
        struct store_audit_part *p;

        if (n <= STORE_AUDIT_REF_MIN) {
            return cJSON_CreateString(v->valuestring);
        }
        if (a->n == a->cap) {
            size_t cap = a->cap ? a->cap * 2 : 4;
            struct store_audit_part *grown = mem_realloc(a->parts, cap * sizeof(*grown));
            if (grown == NULL) {
                return NULL;
            }
            a->parts = grown;
            a->cap = cap;
        }
        p = &a->parts[a->n];
        p->data = v->valuestring;
        p->len = n;
        hash_sha256(v->valuestring, n, p->hash);
        hex_encode(p->hash, HASH_LEN, hex);
        out = cJSON_CreateObject();
        if (out == NULL || cJSON_AddStringToObject(out, "$blob", hex) == NULL ||
            cJSON_AddNumberToObject(out, "bytes", (double)n) == NULL) {
            cJSON_Delete(out);
            return NULL;
        }
        a->n++;
        return out;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) {
        return cJSON_Duplicate(v, 0);
    }
    out = cJSON_IsObject(v) ? cJSON_CreateObject() : cJSON_CreateArray();
    if (out == NULL) {
        return NULL;
    }
    for (const cJSON *c = v->child; c != NULL; c = c->next) {
        cJSON *copy = audit_copy(c, a);
        cJSON_bool ok;
        if (copy == NULL) {
            cJSON_Delete(out);
            return NULL;
        }
        if (cJSON_IsArray(v)) {
            ok = cJSON_AddItemToArray(out, copy);
        } else if (c->string != NULL && audit_key_needs_escape(c->string)) {
            size_t klen = strlen(c->string) + 2;
            char *key = mem_alloc(klen);
            ok = key != NULL;
            if (ok) {
                snprintf(key, klen, "$%s", c->string);
                ok = cJSON_AddItemToObject(out, key, copy);
                mem_free(key);
            }
        } else {
            ok = cJSON_AddItemToObject(out, c->string ? c->string : "", copy);
        }
        if (!ok) {
            cJSON_Delete(copy);
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

int
tool_audit_args(const cJSON *args, char **text, struct store_audit_part **parts, size_t *nparts)
{
    struct audit_build a = {NULL, 0, 0};
    cJSON *copy = audit_copy(args, &a);

    *text = copy ? cJSON_PrintUnformatted(copy) : NULL;
    cJSON_Delete(copy);
    if (*text == NULL) {
        mem_free(a.parts);
        *parts = NULL;
        *nparts = 0;
        return -1;
    }
    *parts = a.parts;
    *nparts = a.n;
    return 0;
}

/* Prints the audit arguments once per call (NULL args on allocation failure). */
static void
audit_args_build(struct tool_call *c)
{
    if (c->audit_args != NULL || c->args == NULL) {
        return;
    }
    tool_audit_args(c->args, &c->audit_args, &c->audit_parts, &c->audit_nparts);
}

/*
 * A refusal by policy (the mount allowlist for mount, export, delete and restore, the env
 * allowlist, the fetch allowlist, snapshots_dir, the command deny- and allowlists) carries
 * a code ending in "_denied". It is audited as outcome "denied" so that an operator's
 * query for denials finds every one, apart from calls that merely failed.
 */
static int
is_policy_denial(const char *code)
{
    static const char suffix[] = "_denied";
    size_t n = code ? strlen(code) : 0;

    return n > sizeof(suffix) - 1 && strcmp(code + n - (sizeof(suffix) - 1), suffix) == 0;
}

static void
write_audit(struct tool_call *c, const char *outcome, const char *code, const char *message)
{
    struct store_audit row;
    struct err err;
    char summary[SUMMARY_MAX + 64];

    if (c->env == NULL || c->env->store == NULL) {
        return;
    }
    memset(&row, 0, sizeof(row));
    audit_args_build(c);
    if (message != NULL && is_policy_denial(code)) {
        /* The message names the rule that refused the call; the row must carry it. */
        snprintf(summary, sizeof(summary), "%s: %.*s", code, SUMMARY_MAX, message);
    } else if (c->summary[0] != '\0') {
        snprintf(summary, sizeof(summary), "%s", c->summary);
    } else if (message != NULL) {
        snprintf(summary, sizeof(summary), "%s: %.200s", code ? code : outcome, message);
    } else {
        snprintf(summary, sizeof(summary), "%s", c->def->name);
    }
    for (char *p = summary; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20) {
            *p = ' ';
        }
    }
    row.time_ms = c->start_ms;
    row.pid = getpid();
    row.kind = "call";
    row.client_name = c->client_name;
    row.client_version = c->client_version;
    row.session_id = c->session_id[0] ? c->session_id : NULL;
    row.tool = c->def->name;
    row.summary = summary;
    row.outcome = outcome;
    row.error_code = code;
    row.duration_ms = time_mono_ms() - c->start_mono_ms;
    row.checkpoint_id = c->checkpoint_id;
    row.args = c->audit_args;
    row.args_len = c->audit_args ? strlen(c->audit_args) : 0;
    row.parts = c->audit_parts;
    row.nparts = c->audit_nparts;
    /* A read-only or failed call's row does not wait for the write lock: it is queued
     * when another process holds the lock, and written once the lock is free. */
    if (store_audit_append_soon(c->env->store, &row, &err) < 0) {
        log_warn("cannot write the audit row for '%s': %s", c->def->name, err.msg);
    }
}

/* ---- waiting for the write lock ----------------------------------------------------- */

static void
lock_cancelled(struct tool_call *c, void *arg)
{
    tool_lock_fn fn = c->lock_fn;

    (void)arg;
    session_lock_cancel(c->env->sessions, c->lock_wait);
    c->lock_wait = NULL;
    c->lock_fn = NULL;
    fn(c, c->lock_arg, TOOL_LOCK_CANCELLED);
}

static void
lock_ready(void *arg, int timed_out)
{
    struct tool_call *c = arg;
    tool_lock_fn fn = c->lock_fn;

    c->lock_wait = NULL;
    c->lock_fn = NULL;
    tool_call_on_cancel(c, NULL, NULL);
    fn(c, c->lock_arg, timed_out ? TOOL_LOCK_TIMEOUT : TOOL_LOCK_READY);
}

int
tool_call_wait_lock(struct tool_call *c, tool_lock_fn fn, void *arg)
{
    struct err err;
    struct store *st = c->env != NULL ? c->env->store : NULL;

    if (c->cancelled || st == NULL || c->env->sessions == NULL || c->env->loop == NULL) {
        return -1;
    }
    store_clear_would_block(st);
    if (c->lock_deadline_ms == 0) {
        /* The deadline counts from the first wait: retries after a lost race do not
         * extend it, so the call fails once, after the busy timeout. */
        c->lock_deadline_ms = time_mono_ms() + store_busy_timeout_ms(st);
    }
    c->lock_fn = fn;
    c->lock_arg = arg;
    c->lock_wait =
        session_lock_wait(c->env->sessions, c->env->loop, c->lock_deadline_ms, lock_ready, c, &err);
    if (c->lock_wait == NULL) {
        log_warn("cannot wait for the database lock off the loop: %s", err.msg);
        c->lock_fn = NULL;
        return -1;
    }
    tool_call_on_cancel(c, lock_cancelled, NULL);
    return 0;
}

void
tool_call_done_store_busy(struct tool_call *c)
{
    char msg[ERR_MSG_MAX + 300];
    cJSON *detail = cJSON_CreateObject();
    int waited = store_busy_timeout_ms(c->env->store);

    snprintf(msg, sizeof(msg),
             "the database '%s' is locked by another process: this call waited %d ms (the busy "
             "timeout) for its write lock and nothing was changed; retry the call when the "
             "other process (a drun-admin gc or compact, a sqlite3 shell) is done",
             store_path(c->env->store), waited);
    if (detail != NULL) {
        cJSON_AddNumberToObject(detail, "waited_ms", waited);
    }
    tool_call_done_error(c, TOOL_ERR_STORE_BUSY, msg, detail);
}

/* A synchronous handler parked by park_for_lock: run it again, or end the call. */
static void
rerun(struct tool_call *c, void *arg, int status)
{
    (void)arg;
    switch (status) {
    case TOOL_LOCK_READY:
        run_handler(c);
        break;
    case TOOL_LOCK_TIMEOUT:
        tool_call_done_store_busy(c);
        break;
    default:
        tool_call_done_error(c, TOOL_ERR_CANCELLED, "the call was cancelled", NULL);
        break;
    }
}

/*
 * Called by finish() for a failing call: when the failure is the write lock held by
 * another process (a nowait BEGIN in the handler's synchronous part), parks the call
 * until the lock is free and returns 1; the handler then runs again from the start
 * (everything it did before its first write is in memory or re-done the same way).
 */
static int
park_for_lock(struct tool_call *c)
{
    struct store *st = c->env != NULL ? c->env->store : NULL;

    if (c != sync_call || st == NULL || !store_would_block(st)) {
        return 0;
    }
    if (tool_call_wait_lock(c, rerun, NULL) < 0) {
        return 0;
    }
    /* What the failed run noted about itself goes; the next run notes it again. */
    c->summary[0] = '\0';
    c->session_id[0] = '\0';
    c->checkpoint_id = -1;
    sync_call = NULL;
    return 1;
}

/* Ends the call: audit, hand the result (or NULL) to the host, free. */
static void
finish(struct tool_call *c, cJSON *result, const char *code, const char *message)
{
    const char *outcome = c->cancelled             ? "cancelled"
                          : is_policy_denial(code) ? "denied"
                          : code                   ? "error"
                                                   : "ok";
    struct tool_call_host host = c->host;
    struct session_mgr *sessions = c->env != NULL ? c->env->sessions : NULL;
    void *loop = c->env != NULL ? c->env->loop : NULL;

    if (code != NULL && park_for_lock(c)) {
        cJSON_Delete(result);
        return;
    }
    if (c == sync_call) {
        sync_call = NULL;
    }
    if (!c->audit_taken) {
        write_audit(c, outcome, c->cancelled ? TOOL_ERR_CANCELLED : code, message);
    }
    cJSON_free(c->audit_args);
    mem_free(c->audit_parts);
    cJSON_Delete(c->args);
    cJSON_Delete(c->progress_token);
    mem_free(c->client_name);
    mem_free(c->client_version);
    mem_free(c->refusal);
    mem_free(c);
    if (sessions != NULL && loop != NULL) {
        session_lock_flush_soon(sessions, loop); /* rows queued while the lock was held */
    }
    if (host.respond == NULL) {
        cJSON_Delete(result);
        return;
    }
    if (outcome[0] == 'c') { /* cancelled: nothing is sent */
        cJSON_Delete(result);
        host.respond(host.ctx, NULL);
        return;
    }
    if (result == NULL) {
        /* Out of memory while encoding: the host answers with a JSON-RPC internal error. */
        log_error("cannot encode the result of a tool call: out of memory");
    }
    host.respond(host.ctx, result);
}

static cJSON *
text_result(const char *text, int is_error)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(r, "content");
    cJSON *block = cJSON_CreateObject();

    if (r == NULL || content == NULL || block == NULL) {
        cJSON_Delete(block);
        cJSON_Delete(r);
        return NULL;
    }
    cJSON_AddStringToObject(block, "type", "text");
    if (cJSON_AddStringToObject(block, "text", text) == NULL) {
        cJSON_Delete(block);
        cJSON_Delete(r);
        return NULL;
    }
    cJSON_AddItemToArray(content, block);
    if (is_error) {
        cJSON_AddBoolToObject(r, "isError", 1);
    }
    return r;
}

void
tool_call_done_json(struct tool_call *call, cJSON *result)
{
    char *text = result ? cJSON_PrintUnformatted(result) : NULL;
    cJSON *r = text ? text_result(text, 0) : NULL;

    cJSON_free(text);
    /* structuredContent must be an object; an array result goes as text only. */
    if (r != NULL && cJSON_IsObject(result)) {
        cJSON_AddItemToObject(r, "structuredContent", result);
        result = NULL;
    }
    cJSON_Delete(result);
    finish(call, r, NULL, NULL);
}

void
tool_call_done_text(struct tool_call *call, const char *text)
{
    finish(call, text_result(text ? text : "", 0), NULL, NULL);
}

void
tool_call_done_content(struct tool_call *call, cJSON *content)
{
    cJSON *r = cJSON_CreateObject();

    if (r != NULL && content != NULL) {
        cJSON_AddItemToObject(r, "content", content);
        content = NULL;
    } else {
        cJSON_Delete(r);
        r = NULL;
    }
    cJSON_Delete(content);
    finish(call, r, NULL, NULL);
}

void
tool_call_done_error(struct tool_call *call, const char *code, const char *message, cJSON *detail)
{
    cJSON *e = cJSON_CreateObject();
    char *text = NULL;
    cJSON *r = NULL;

    if (code == NULL) {
        code = TOOL_ERR_INTERNAL;
    }
    if (message == NULL) {
        message = "";
    }
    if (e != NULL) {
        cJSON_AddStringToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", message);
        if (detail != NULL) {
            cJSON_AddItemToObject(e, "detail", detail);
            detail = NULL;
        }
        text = cJSON_PrintUnformatted(e);
    }
    cJSON_Delete(detail);
    cJSON_Delete(e);
    if (text != NULL) {
        r = text_result(text, 1);
    }
    cJSON_free(text);
    finish(call, r, code, message);
}

void
tool_call_done_err(struct tool_call *call, const char *code, const struct err *err)
{
    tool_call_done_error(call, code ? code : tools_err_code(err->code), err->msg, NULL);
}

void
tools_call_run(struct tool_call *call)
{
    struct buf msg;
    const cJSON *schema = tools_schema(call->def);

    if (call->refusal != NULL) {
        char text[512];
        snprintf(text, sizeof(text), "%s", call->refusal);
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS, text, NULL);
        return;
    }
    if (!cJSON_IsObject(call->args)) {
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS,
                             "'arguments' must be an object; send {} for a tool without arguments",
                             NULL);
        return;
    }
    buf_init(&msg, 1024);
    if (schema != NULL && tools_schema_check(schema, call->args, &msg) < 0) {
        /* The message is capped by the buffer; a cut one is still useful. */
        char text[1100];
        snprintf(text, sizeof(text), "%s", msg.data ? msg.data : "arguments do not match");
        buf_release(&msg);
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS, text, NULL);
        return;
    }
    buf_release(&msg);
    if (call->env != NULL && call->env->store != NULL && store_queue_full(call->env->store)) {
        tool_call_done_error(call, TOOL_ERR_STORE_BUSY,
                             "the database is locked by another process and the rows of "
                             "read-only calls waiting for it are at their cap; retry the call "
                             "when the other process is done",
                             NULL);
        return;
    }
    run_handler(call);
}

/*
 * Runs the handler with the store in nowait mode: a write in its synchronous part that
 * would wait for another process's lock fails at once, and finish() parks the call
 * (park_for_lock) instead of sleeping on the loop. An asynchronous tool's later writes
 * (after its child process or download) run with nowait off, as before, unless the tool
 * parks them itself (session_bash's commit: tool_call_wait_lock).
 */
static void
run_handler(struct tool_call *c)
{
    struct store *st = c->env != NULL ? c->env->store : NULL;

    if (st == NULL) {
        c->def->handler(c);
        return;
    }
    sync_call = c;
    store_clear_would_block(st);
    store_set_nowait(st, 1);
    c->def->handler(c); /* may end and free c */
    store_set_nowait(st, 0);
    sync_call = NULL;
}

void
tools_shutdown(struct tools_env *env)
{
    tools_reaper_stop(env);
    if (env != NULL && env->sessions != NULL) {
        session_lock_shutdown(env->sessions);
    }
}

void
tools_call_cancel(struct tool_call *call)
{
    tool_cancel_fn fn;

    if (call == NULL || call->cancelled) {
        return;
    }
    call->cancelled = 1;
    fn = call->cancel_fn;
    call->cancel_fn = NULL;
    if (fn != NULL) {
        fn(call, call->cancel_arg);
    }
}

const cJSON *
tool_call_args(const struct tool_call *call)
{
    return call->args;
}

const char *
tool_call_arg_str(const struct tool_call *call, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(call->args, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int64_t
tool_call_arg_int(const struct tool_call *call, const char *name, int64_t dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(call->args, name);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

int
tool_call_arg_bool(const struct tool_call *call, const char *name, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(call->args, name);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

struct tools_env *
tool_call_env(const struct tool_call *call)
{
    return call->env;
}

const struct tool_def *
tool_call_def(const struct tool_call *call)
{
    return call->def;
}

const char *
tool_call_client_name(const struct tool_call *call)
{
    return call->client_name ? call->client_name : "";
}

const char *
tool_call_client_version(const struct tool_call *call)
{
    return call->client_version ? call->client_version : "";
}

int
tool_call_has_progress(const struct tool_call *call)
{
    return call->progress_token != NULL;
}

void
tool_call_progress(struct tool_call *call, double progress, double total, const char *message)
{
    cJSON *p;

    if (call->progress_token == NULL || call->cancelled || call->host.progress == NULL) {
        return;
    }
    if (call->sent_progress && !(progress > call->last_progress)) {
        return;
    }
    p = cJSON_CreateObject();
    if (p == NULL) {
        return;
    }
    cJSON_AddItemToObject(p, "progressToken", cJSON_Duplicate(call->progress_token, 1));
    cJSON_AddNumberToObject(p, "progress", progress);
    if (total >= 0) {
        cJSON_AddNumberToObject(p, "total", total);
    }
    if (message != NULL) {
        cJSON_AddStringToObject(p, "message", message);
    }
    call->sent_progress = 1;
    call->last_progress = progress;
    call->host.progress(call->host.ctx, p);
}

void
tool_call_on_cancel(struct tool_call *call, tool_cancel_fn fn, void *arg)
{
    call->cancel_fn = fn;
    call->cancel_arg = arg;
}

int
tool_call_cancelled(const struct tool_call *call)
{
    return call->cancelled;
}

void
tool_call_set_session(struct tool_call *call, const char *session_id)
{
    snprintf(call->session_id, sizeof(call->session_id), "%s", session_id ? session_id : "");
}

void
tool_call_set_checkpoint(struct tool_call *call, int64_t checkpoint_id)
{
    call->checkpoint_id = checkpoint_id;
}

void
tool_call_set_summary(struct tool_call *call, const char *fmt, ...)
{
    struct buf b;
    va_list ap;

    buf_init(&b, 4096);
    va_start(ap, fmt);
    buf_vprintf(&b, fmt, ap);
    va_end(ap);
    snprintf(call->summary, sizeof(call->summary), "%s", buf_cstr(&b));
    buf_release(&b);
    for (char *p = call->summary; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20) {
            *p = ' ';
        }
    }
}

void
tool_call_audit_prepare(struct tool_call *c, struct store_audit *row)
{
    memset(row, 0, sizeof(*row));
    audit_args_build(c);
    snprintf(c->audit_summary, sizeof(c->audit_summary), "%s",
             c->summary[0] != '\0' ? c->summary : c->def->name);
    row->time_ms = c->start_ms;
    row->pid = getpid();
    row->kind = "call";
    row->client_name = c->client_name;
    row->client_version = c->client_version;
    row->session_id = c->session_id[0] ? c->session_id : NULL;
    row->tool = c->def->name;
    row->summary = c->audit_summary;
    row->outcome = "ok";
    row->error_code = NULL;
    row->duration_ms = time_mono_ms() - c->start_mono_ms;
    row->checkpoint_id = c->checkpoint_id;
    row->args = c->audit_args;
    row->args_len = c->audit_args ? strlen(c->audit_args) : 0;
    row->parts = c->audit_parts;
    row->nparts = c->audit_nparts;
}

void
tool_call_audit_taken(struct tool_call *c)
{
    c->audit_taken = 1;
}
