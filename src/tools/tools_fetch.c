/*
 * tools_fetch.c - session_fetch: make an HTTP request for the agent through the fetch
 * gateway (src/fetch/) and save the response, its HTML assets and a manifest.json as
 * one checkpoint (reference section 5, with the gateway's checks on every hop).
 *
 * The call takes the session first (session_enter(SESSION_WRITE): the session must
 * exist, a busy one answers session_busy), so the checkpoint at the end cannot race
 * another mutation of the same session. The transfer itself runs on the loop (curl's
 * multi interface), so other sessions' calls carry on meanwhile.
 *
 * Streaming. The body is never held in memory: the gateway's sink feeds it straight
 * into a store blob writer (hashed and zstd-compressed chunk by chunk into an unlinked
 * temporary file), and each asset into its own writer, so memory stays near one chunk
 * per transfer whatever the size; the caps stay the gateway's, enforced as bytes
 * arrive. Only an HTML page is also kept in memory (by the gateway, within
 * fetch_max_bytes), because its assets are collected from its text. At the end the
 * writers are handed to the session edit (session_edit_put_writer), whose commit stores
 * them (one row each, unless the content is already stored) in the same transaction as
 * the checkpoint; a failed, refused or cancelled fetch aborts them, so nothing is
 * stored, and so does a commit that fails (size or checkpoint limit).
 *
 * The end of the fetch (fetch_done) writes one audit event per request hop (main
 * request, redirects, assets), whatever the outcome, then either commits the files as
 * one checkpoint with the call's own audit row in the same transaction, or fails the
 * call with the gateway's error code and writes nothing to the workspace.
 *
 * Credentials. [[fetch_credentials]] entries name an environment variable of the
 * daemon; its value is read here for each call and handed to the gateway, which sends
 * it only to the entry's host. The value never enters a result, a file, a log line or
 * an audit row: hop rows carry the URL, the address, the status, the byte count, the
 * outcome and a flag saying a credential was sent. A variable that is unset (or empty)
 * drops the entry with a log line naming the variable, so a misconfigured daemon never
 * sends an empty Authorization header.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/fetch.h"
#include "policy/policy.h"
#include "store/store.h"
#include "tools/tools_sess.h"
#include "util/buf.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"

#define PROGRESS_EVERY_MS  100 /* at most ~10 notifications a second */
#define HOP_URL_SUMMARY    160 /* bytes of a hop's URL in its audit summary */
#define HOP_DETAIL_SUMMARY 240 /* bytes of why it ended */

/* One session_fetch call in flight. Strings borrowed from the call's arguments live
 * until the call's done, which comes after the fetch's on_done. */
struct fetch_call {
    struct tool_call *call;
    struct session *s;
    struct policy *policy; /* the call's policy snapshot (a reference) */
    struct fetch *f;       /* NULL once on_done came */
    struct fetch_policy fp;
    struct fetch_credential *creds;
    const char **cidrs;
    const char **resolve;
    struct fetch_header *headers;
    size_t n_headers;
    const char *url;
    const char *method; /* points at method_buf: validated, upper-cased */
    char method_buf[40];
    const char *description;
    char session_id[16];
    int64_t last_progress_ms;
    int sent_progress;
    struct store *st;
    struct store_blob_writer *main_w;   /* the body, opened at its first byte */
    struct store_blob_writer **asset_w; /* per asset index, opened at its first byte */
    size_t n_asset_w;
    size_t asset_streaming; /* index of the asset whose writer is still compressing */
    int has_werr;           /* a writer failed: the call fails with werr */
    struct err werr;
    struct fetch_waker *wk;   /* the writers' threads wake the loop through it */
    struct fetch_result *res; /* the ended fetch, while its writers store their rows */
    int finishing;            /* fetch_finish ran: the waker has nothing more to do */
    struct session_edit *ed;  /* staged, while the commit waits for the write lock */
    struct fetch_layout *lay;
    size_t nf, ns, nfail; /* assets fetched, skipped, failed */
};

static void
fc_free(struct fetch_call *fc)
{
    if (fc == NULL) {
        return;
    }
    /* Joins every writer's thread first: none can wake the loop through wk after this. */
    store_blob_writer_abort(fc->main_w);
    for (size_t i = 0; i < fc->n_asset_w; i++) {
        store_blob_writer_abort(fc->asset_w[i]);
    }
    fetch_waker_close(fc->wk);
    session_edit_abort(fc->ed);
    fetch_layout_free(fc->lay);
    fetch_result_free(fc->res);
    mem_free(fc->asset_w);
    mem_free(fc->creds);
    mem_free(fc->cidrs);
    mem_free(fc->resolve);
    mem_free(fc->headers);
    policy_unref(fc->policy);
    mem_free(fc);
}

/* ---- the policy the gateway sees ------------------------------------------------------ */

#define WARNED_MAX 16

/*
 * Logs a credential problem once per process and message: the environment does not
 * change while the daemon runs, so repeating it on every call would only bury it.
 */
static void warn_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
warn_once(const char *fmt, ...)
{
    static uint8_t warned[WARNED_MAX][HASH_LEN];
    static size_t n_warned;
    struct buf msg;
    uint8_t h[HASH_LEN];
    va_list ap;

    buf_init(&msg, 1024);
    va_start(ap, fmt);
    buf_vprintf(&msg, fmt, ap);
    va_end(ap);
    if (buf_failed(&msg)) {
        buf_release(&msg);
        return;
    }
    hash_sha256(msg.data, msg.len, h);
    for (size_t i = 0; i < n_warned; i++) {
        if (memcmp(warned[i], h, HASH_LEN) == 0) {
            buf_release(&msg);
            return;
        }
    }
    if (n_warned < WARNED_MAX) {
        memcpy(warned[n_warned++], h, HASH_LEN);
    }
    log_warn("%s", buf_cstr(&msg));
    buf_release(&msg);
}

/*
 * Fills fc->fp from the call's policy. The arrays point into the policy (kept alive by
 * fc->policy) and into the daemon's environment (credential values).
 */
static int
build_policy(struct fetch_call *fc, struct err *err)
{
    const struct policy *p = fc->policy;
    struct fetch_policy *fp = &fc->fp;
    size_t nc = 0;

    memset(fp, 0, sizeof(*fp));
    fp->allowlist_given = 1; /* the policy fills the reference's default list itself */
    fp->domain_allowlist = (const char *const *)p->domain_allowlist.v;
    fp->n_domain_allowlist = p->domain_allowlist.n;
    fp->timeout_ms = p->fetch_timeout_ms;
    fp->connect_timeout_ms = p->connect_timeout_ms;
    fp->max_bytes = p->fetch_max_bytes > 0 ? (uint64_t)p->fetch_max_bytes : 0;
    fp->allow_private = p->fetch_allow_private;
    fp->allow_cidrs = (const char *const *)p->fetch_allow_cidrs.v;
    fp->n_allow_cidrs = p->fetch_allow_cidrs.n;
    fp->resolve = (const char *const *)p->fetch_resolve.v;
    fp->n_resolve = p->fetch_resolve.n;
    if (p->fetch_credentials_n > 0) {
        fc->creds = mem_calloc(p->fetch_credentials_n, sizeof(*fc->creds));
        if (fc->creds == NULL) {
            return err_set(err, ERR_NOMEM, "out of memory reading fetch_credentials");
        }
    }
    for (size_t i = 0; i < p->fetch_credentials_n; i++) {
        const struct policy_credential *c = &p->fetch_credentials[i];
        const char *v = c->env != NULL ? getenv(c->env) : NULL;

        if (v == NULL || v[0] == '\0') {
            /* Never an empty header: the operator sees why the credential is missing. */
            warn_once("fetch_credentials for '%s': environment variable '%s' is %s; header "
                      "'%s' is not sent (set it in drun-mcp's environment)",
                      c->domain, c->env ? c->env : "", v == NULL ? "not set" : "empty", c->header);
            continue;
        }
        struct fetch_header probe = {c->header, v};
        struct err why;
        if (fetch_header_check(&probe, &why) < 0) {
            /* A value with CR or LF would split the request: the operator must fix it.
             * The message names the header, never the value. */
            warn_once("fetch_credentials for '%s': the value of environment variable '%s' is "
                      "not a valid header value (it holds a line break or NUL); header '%s' is "
                      "not sent",
                      c->domain, c->env, c->header);
            continue;
        }
        fc->creds[nc].domain = c->domain;
        fc->creds[nc].header = c->header;
        fc->creds[nc].value = v;
        nc++;
    }
    fp->credentials = fc->creds;
    fp->n_credentials = nc;
    return 0;
}

/* ---- arguments ------------------------------------------------------------------------ */

/* Reads the headers argument ([{name, value}], already schema-checked) into fc. */
static int
read_headers(struct fetch_call *fc, const cJSON *arr, struct err *err)
{
    const cJSON *h;
    size_t n = 0;

    if (arr == NULL) {
        return 0;
    }
    n = (size_t)cJSON_GetArraySize(arr);
    if (n > FETCH_MAX_AGENT_HEADERS) {
        return err_set(err, ERR_INVAL, "argument 'headers' has %zu entries; at most %d are allowed",
                       n, FETCH_MAX_AGENT_HEADERS);
    }
    if (n == 0) {
        return 0;
    }
    fc->headers = mem_calloc(n, sizeof(*fc->headers));
    if (fc->headers == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory reading the headers");
    }
    cJSON_ArrayForEach(h, arr)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(h, "name");
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(h, "value");

        if (!cJSON_IsString(name) || !cJSON_IsString(value)) {
            return err_set(err, ERR_INVAL,
                           "each entry of argument 'headers' must be {\"name\": string, "
                           "\"value\": string}");
        }
        fc->headers[fc->n_headers].name = name->valuestring;
        fc->headers[fc->n_headers].value = value->valuestring;
        fc->n_headers++;
    }
    return 0;
}

/* ---- the body and assets into blob writers ------------------------------------------------ */

static int
sink_fail(struct fetch_call *fc, struct err *why)
{
    fc->has_werr = 1;
    *why = fc->werr;
    return -1;
}

/* On a writer's thread: a slot freed, or the thread is done. */
static void
writer_notify(void *ud)
{
    fetch_waker_send(ud);
}

static int
open_writer(struct fetch_call *fc, struct store_blob_writer **w)
{
    if (store_blob_writer_open(fc->st, w, &fc->werr) < 0) {
        return -1;
    }
    store_blob_writer_set_notify(*w, writer_notify, fc->wk);
    return 0;
}

/*
 * The loop never waits for a writer's thread: when its slots are full, try_write takes
 * nothing and the transfer pauses (FETCH_SINK_PAUSE); the thread's notify wakes the loop
 * when a slot frees, and the transfer resumes.
 */
static int
body_sink(void *ud, const void *data, size_t len, struct err *why)
{
    struct fetch_call *fc = ud;
    int rc;

    if (fc->main_w == NULL && open_writer(fc, &fc->main_w) < 0) {
        return sink_fail(fc, why);
    }
    rc = fetch_may_pause(fc->f) ? store_blob_writer_try_write(fc->main_w, data, len, &fc->werr)
                                : store_blob_writer_write(fc->main_w, data, len, &fc->werr);
    if (rc > 0) {
        return FETCH_SINK_PAUSE;
    }
    if (rc < 0) {
        return sink_fail(fc, why);
    }
    return 0;
}

static int
asset_sink(void *ud, size_t asset, const void *data, size_t len, struct err *why)
{
    struct fetch_call *fc = ud;
    int rc;

    if (asset >= fc->n_asset_w) {
        struct store_blob_writer **v = mem_realloc(fc->asset_w, (asset + 1) * sizeof(*v));
        if (v == NULL) {
            err_set(&fc->werr, ERR_NOMEM, "out of memory saving an asset");
            return sink_fail(fc, why);
        }
        memset(v + fc->n_asset_w, 0, (asset + 1 - fc->n_asset_w) * sizeof(*v));
        fc->asset_w = v;
        fc->n_asset_w = asset + 1;
    }
    if (fc->asset_w[asset] == NULL) {
        /* Assets arrive one after another: the previous one is complete, so its
         * compressor goes now and only one is held at a time. */
        if (fc->asset_streaming < fc->n_asset_w && fc->asset_w[fc->asset_streaming] != NULL &&
            store_blob_writer_end(fc->asset_w[fc->asset_streaming], &fc->werr) < 0) {
            return sink_fail(fc, why);
        }
        if (open_writer(fc, &fc->asset_w[asset]) < 0) {
            return sink_fail(fc, why);
        }
        fc->asset_streaming = asset;
    }
    rc = fetch_may_pause(fc->f)
             ? store_blob_writer_try_write(fc->asset_w[asset], data, len, &fc->werr)
             : store_blob_writer_write(fc->asset_w[asset], data, len, &fc->werr);
    if (rc > 0) {
        return FETCH_SINK_PAUSE;
    }
    if (rc < 0) {
        return sink_fail(fc, why);
    }
    return 0;
}

/* Stages *w at path (NULL: nothing arrived, an empty file); the edit takes the writer
 * and stores it inside the commit's transaction. */
static int
stage_writer(struct session_edit *ed, const char *path, struct store_blob_writer **w,
             struct session_err *e)
{
    struct store_blob_writer *taken = *w;

    if (taken == NULL) {
        return session_edit_write(ed, path, "", 0, 0, e);
    }
    *w = NULL;
    return session_edit_put_writer(ed, path, taken, 0, e);
}

/* ---- audit: one event per request hop --------------------------------------------------- */

static const char *
hop_outcome(int outcome)
{
    switch (outcome) {
    case FETCH_OK:
    case FETCH_REDIRECT:
        return "ok";
    case FETCH_DENIED:
        return "denied";
    case FETCH_CANCELLED:
        return "cancelled";
    default:
        return "error";
    }
}

static void
audit_hops(struct fetch_call *fc, const struct fetch_result *r)
{
    struct store *st = tool_call_env(fc->call)->store;

    if (st == NULL) {
        return;
    }
    for (size_t i = 0; i < r->n_hops; i++) {
        const struct fetch_hop *h = &r->hops[i];
        const char *url = h->url != NULL ? h->url : "";
        char summary[HOP_URL_SUMMARY + HOP_DETAIL_SUMMARY + 200];
        char who[32];
        struct store_audit row;
        struct err err;
        cJSON *args = cJSON_CreateObject();
        char *text = NULL;

        if (h->asset < 0) {
            snprintf(who, sizeof(who), "request");
        } else {
            snprintf(who, sizeof(who), "asset %d", h->asset + 1);
        }
        snprintf(summary, sizeof(summary), "%s %.*s%s -> %s status %ld, %llu bytes: %s%s%.*s%s",
                 who, HOP_URL_SUMMARY, url, strlen(url) > HOP_URL_SUMMARY ? "..." : "",
                 h->ip[0] ? h->ip : "(no address)", h->status, (unsigned long long)h->bytes,
                 h->outcome == FETCH_OK ? "ok" : fetch_outcome_name(h->outcome),
                 h->detail[0] ? " (" : "", HOP_DETAIL_SUMMARY, h->detail, h->detail[0] ? ")" : "");
        for (char *c = summary; *c != '\0'; c++) {
            if ((unsigned char)*c < 0x20) {
                *c = ' ';
            }
        }
        if (args != NULL) {
            cJSON_AddStringToObject(args, "url", url);
            cJSON_AddStringToObject(args, "address", h->ip);
            cJSON_AddNumberToObject(args, "status", (double)h->status);
            cJSON_AddNumberToObject(args, "bytes", (double)h->bytes);
            cJSON_AddStringToObject(args, "outcome", fetch_outcome_name(h->outcome));
            if (h->asset >= 0) {
                cJSON_AddNumberToObject(args, "asset", h->asset + 1);
            }
            cJSON_AddBoolToObject(args, "credential_sent", h->credentialed);
            if (h->detail[0] != '\0') {
                cJSON_AddStringToObject(args, "detail", h->detail);
            }
            text = cJSON_PrintUnformatted(args);
        }
        memset(&row, 0, sizeof(row));
        row.pid = getpid();
        row.kind = "event";
        row.client_name = tool_call_client_name(fc->call);
        row.client_version = tool_call_client_version(fc->call);
        row.session_id = fc->session_id;
        row.tool = "session_fetch_hop";
        row.summary = summary;
        row.outcome = hop_outcome(h->outcome);
        row.error_code = (h->outcome == FETCH_OK || h->outcome == FETCH_REDIRECT)
                             ? NULL
                             : fetch_outcome_name(h->outcome);
        row.checkpoint_id = -1;
        row.args = text;
        row.args_len = text != NULL ? strlen(text) : 0;
        /* Queued when another process holds the write lock: the loop never waits here. */
        if (store_audit_append_soon(st, &row, &err) < 0) {
            log_warn("cannot write the session_fetch_hop audit row: %s", err.msg);
        }
        cJSON_free(text);
        cJSON_Delete(args);
    }
}

/* ---- the end of a fetch ------------------------------------------------------------------ */

/* The tool error code for a failed fetch: the gateway's names, ours for bad input. */
static const char *
outcome_code(int outcome)
{
    switch (outcome) {
    case FETCH_INVAL:
        return TOOL_ERR_INVALID_ARGUMENTS;
    case FETCH_NOMEM:
        return TOOL_ERR_INTERNAL;
    case FETCH_CANCELLED:
        return TOOL_ERR_CANCELLED;
    default:
        return fetch_outcome_name(outcome);
    }
}

static void
fail_fetch(struct fetch_call *fc, const struct fetch_result *r)
{
    const char *code = outcome_code(r->outcome);
    cJSON *detail = cJSON_CreateObject();

    if (detail != NULL) {
        cJSON_AddStringToObject(detail, "url", r->url ? r->url : fc->url);
        if (r->outcome == FETCH_TOOBIG) {
            cJSON_AddNumberToObject(detail, "limit_bytes", (double)fc->fp.max_bytes);
        } else if (r->outcome == FETCH_TIMEOUT) {
            cJSON_AddNumberToObject(detail, "timeout_ms", (double)fc->fp.timeout_ms);
        }
    }
    tool_call_set_summary(fc->call, "%s: %s %.160s", code, fc->method, fc->url);
    tool_call_done_error(fc->call, code, r->err.msg[0] ? r->err.msg : "the fetch failed", detail);
}

static int save_commit(struct fetch_call *fc);

/* Inside the checkpoint's transaction: the hop rows go into it. */
static void
hops_in_tx(void *ud)
{
    struct fetch_call *fc = ud;

    audit_hops(fc, fc->res);
}

/* The commit was parked for the write lock: try again, or give up (nothing is saved). */
static void
save_parked(struct tool_call *call, void *arg, int status)
{
    struct fetch_call *fc = arg;

    if (status == TOOL_LOCK_READY) {
        if (save_commit(fc) == 0) {
            fc_free(fc);
        }
        return;
    }
    session_edit_abort(fc->ed);
    fc->ed = NULL;
    session_leave(fc->s, SESSION_WRITE);
    audit_hops(fc, fc->res);
    if (status == TOOL_LOCK_TIMEOUT) {
        tool_call_set_summary(call, "database locked: %s %.160s", fc->method, fc->url);
        tool_call_done_store_busy(call);
    } else {
        tool_call_set_summary(call, "cancelled: %s %.160s", fc->method, fc->url);
        tool_call_done_error(call, TOOL_ERR_CANCELLED, "the fetch was cancelled; nothing was saved",
                             NULL);
    }
    fc_free(fc);
}

/*
 * Commits the staged checkpoint (fc->ed) and answers. The commit runs with the store in
 * nowait mode: when another process holds the write lock the call waits off the loop
 * (tool_call_wait_lock) with the edit kept and the session still held, then comes back
 * here. Returns 1 when parked (fc stays), 0 when the call was answered.
 */
static int
save_commit(struct fetch_call *fc)
{
    struct tool_call *call = fc->call;
    struct fetch_result *r = fc->res;
    struct fetch_layout *lay = fc->lay;
    struct session_commit_meta meta;
    struct session_delta d;
    struct store_audit row;
    struct session_err e;
    struct buf command;
    cJSON *out = NULL;
    int rc;

    buf_init(&command, FETCH_MAX_URL_LEN + 64);
    buf_printf(&command, "%s %s", fc->method, r->url);
    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_fetch";
    meta.command = buf_failed(&command) ? r->url : buf_cstr(&command);
    meta.description = fc->description;
    tool_call_set_summary(call, "%s %.160s -> %ld, %llu bytes, assets %zu/%zu/%zu", fc->method,
                          r->url, r->status, (unsigned long long)r->bytes, fc->nf, fc->ns,
                          fc->nfail);
    tool_call_audit_prepare(call, &row);
    store_set_nowait(fc->st, 1);
    rc = session_edit_try_commit(fc->ed, &meta, &row, hops_in_tx, fc, &d, &e);
    store_set_nowait(fc->st, 0);
    buf_release(&command);
    if (rc < 0 && store_would_block(fc->st)) {
        if (tool_call_wait_lock(call, save_parked, fc) == 0) {
            return 1; /* fc->ed kept */
        }
        session_edit_abort(fc->ed);
    }
    fc->ed = NULL; /* freed by the commit */
    if (rc < 0) {
        session_leave(fc->s, SESSION_WRITE);
        audit_hops(fc, r); /* rolled back with the checkpoint: written on their own */
        tool_call_set_summary(call, "%s: %s %.160s", tsess_code(&e), fc->method, fc->url);
        tsess_fail(call, &e);
        return 0;
    }
    tool_call_audit_taken(call);
    tool_call_set_checkpoint(call, d.checkpoint_id);
    session_leave(fc->s, SESSION_WRITE);

    out = cJSON_CreateObject();
    if (out == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return 0;
    }
    cJSON_AddNumberToObject(out, "status", (double)r->status);
    cJSON_AddNumberToObject(out, "bytes", (double)r->bytes);
    cJSON_AddStringToObject(out, "content_type", r->content_type ? r->content_type : "");
    cJSON_AddStringToObject(out, "saved_to", lay->main_path);
    cJSON_AddStringToObject(out, "dir", lay->dir);
    cJSON_AddStringToObject(out, "manifest_path", lay->manifest_path);
    cJSON_AddNumberToObject(out, "assets_fetched", (double)fc->nf);
    cJSON_AddNumberToObject(out, "assets_skipped", (double)fc->ns);
    cJSON_AddNumberToObject(out, "assets_failed", (double)fc->nfail);
    cJSON_AddStringToObject(out, "final_url", r->final_url ? r->final_url : r->url);
    cJSON_AddNumberToObject(out, "checkpoint_id", (double)d.checkpoint_id);
    tool_call_done_json(call, out);
    return 0;
}

/* Stages the main file, the fetched assets and manifest.json; commits one checkpoint.
 * Returns 1 when the commit is parked for the write lock (fc stays), else 0. */
static int
save(struct fetch_call *fc, struct fetch_result *r)
{
    struct tool_call *call = fc->call;
    struct session_edit *ed = NULL;
    struct session_err e;
    struct err err;
    struct store_blob_writer *none = NULL; /* an asset with an empty body */

    if (fetch_layout_make(r, &fc->lay, &err) < 0) {
        session_leave(fc->s, SESSION_WRITE);
        audit_hops(fc, r);
        tool_call_done_err(call, TOOL_ERR_INTERNAL, &err);
        return 0;
    }
    if (session_edit_begin(fc->s, &ed, &e) < 0) {
        goto fail;
    }
    if (stage_writer(ed, fc->lay->main_path, &fc->main_w, &e) < 0) {
        goto fail;
    }
    for (size_t i = 0; i < r->n_assets; i++) {
        const struct fetch_asset *a = &r->assets[i];
        switch (a->state) {
        case FETCH_ASSET_FETCHED:
            fc->nf++;
            if (i < fc->lay->n_assets && fc->lay->asset_paths[i] != NULL &&
                stage_writer(ed, fc->lay->asset_paths[i],
                             i < fc->n_asset_w ? &fc->asset_w[i] : &none, &e) < 0) {
                goto fail;
            }
            break;
        case FETCH_ASSET_SKIPPED:
            fc->ns++;
            break;
        default:
            fc->nfail++;
            break;
        }
    }
    if (session_edit_write(ed, fc->lay->manifest_path, buf_cstr(&fc->lay->manifest),
                           fc->lay->manifest.len, 0, &e) < 0) {
        goto fail;
    }
    fc->ed = ed;
    return save_commit(fc);
fail:
    session_edit_abort(ed);
    session_leave(fc->s, SESSION_WRITE);
    audit_hops(fc, r);
    tool_call_set_summary(call, "%s: %s %.160s", tsess_code(&e), fc->method, fc->url);
    tsess_fail(call, &e);
    return 0;
}

/* 1 if a writer's thread gave up storing its row: the write lock was held throughout. */
static int
writers_bg_busy(struct fetch_call *fc)
{
    if (fc->main_w != NULL && store_blob_writer_bg_busy(fc->main_w)) {
        return 1;
    }
    for (size_t i = 0; i < fc->n_asset_w; i++) {
        if (fc->asset_w[i] != NULL && store_blob_writer_bg_busy(fc->asset_w[i])) {
            return 1;
        }
    }
    return 0;
}

/* The fetch has ended and every writer's thread is done: answer the call. */
static void
fetch_finish(struct fetch_call *fc)
{
    struct tool_call *call = fc->call;
    struct fetch_result *r = fc->res;

    fc->finishing = 1;
    if (r->outcome == FETCH_OK && !fc->has_werr && !tool_call_cancelled(call) &&
        !writers_bg_busy(fc)) {
        /* The hop rows commit with the checkpoint (save_commit), in one transaction. */
        if (save(fc, r) == 1) {
            return; /* parked for the write lock: save_parked goes on */
        }
        fc_free(fc);
        return;
    }
    audit_hops(fc, r);
    if (r->outcome == FETCH_CANCELLED || tool_call_cancelled(call)) {
        session_leave(fc->s, SESSION_WRITE);
        tool_call_set_summary(call, "cancelled: %s %.160s", fc->method, fc->url);
        tool_call_done_error(call, TOOL_ERR_CANCELLED, "the fetch was cancelled; nothing was saved",
                             NULL);
    } else if (fc->has_werr) {
        /* The store could not take the bytes (disk full, blob cap): nothing is saved. */
        session_leave(fc->s, SESSION_WRITE);
        tool_call_set_summary(call, "%s: %s %.160s", tools_err_code(fc->werr.code), fc->method,
                              fc->url);
        tool_call_done_err(call, NULL, &fc->werr);
    } else if (r->outcome != FETCH_OK) {
        session_leave(fc->s, SESSION_WRITE);
        fail_fetch(fc, r);
    } else {
        /* The body's row waited the whole busy timeout on the writer's thread: fail once
         * now rather than wait a second time for the checkpoint's commit. */
        session_leave(fc->s, SESSION_WRITE);
        tool_call_set_summary(call, "database locked: %s %.160s", fc->method, fc->url);
        tool_call_done_store_busy(call);
    }
    fc_free(fc);
}

/* 1 while a writer's thread still drains or stores its row. */
static int
writers_busy(struct fetch_call *fc)
{
    if (fc->main_w != NULL && store_blob_writer_busy(fc->main_w)) {
        return 1;
    }
    for (size_t i = 0; i < fc->n_asset_w; i++) {
        if (fc->asset_w[i] != NULL && store_blob_writer_busy(fc->asset_w[i])) {
            return 1;
        }
    }
    return 0;
}

/* Asks each writer to store its row on its own thread (store_blob_writer_store_bg),
 * unless the files cannot fit the session's size limit: that commit will fail, and a row
 * stored ahead of it would stay until gc. */
static int
writers_store_bg(struct fetch_call *fc)
{
    uint64_t total = fc->main_w != NULL ? store_blob_writer_size(fc->main_w) : 0;

    for (size_t i = 0; i < fc->n_asset_w; i++) {
        total += fc->asset_w[i] != NULL ? store_blob_writer_size(fc->asset_w[i]) : 0;
    }
    if (!session_fits(fc->s, total)) {
        return 0; /* the commit ends the writers itself (and will refuse the size) */
    }
    if (fc->main_w != NULL && store_blob_writer_store_bg(fc->main_w, &fc->werr) < 0) {
        fc->has_werr = 1;
        return 0;
    }
    for (size_t i = 0; i < fc->n_asset_w; i++) {
        if (fc->asset_w[i] != NULL && store_blob_writer_store_bg(fc->asset_w[i], &fc->werr) < 0) {
            fc->has_werr = 1;
            return 0;
        }
    }
    return 1;
}

/* On the loop, from the waker: resume a paused transfer, or go on once the writers are done. */
static void
fetch_wake(void *ud)
{
    struct fetch_call *fc = ud;

    if (fc->f != NULL) {
        fetch_resume(fc->f);
    } else if (fc->res != NULL && !fc->finishing && !writers_busy(fc)) {
        fetch_finish(fc);
    }
}

/*
 * The transfer ended. A good one first has its writers store their rows on their own
 * threads (the copy of a big body into the DB and the fsync of its WAL frames), so the
 * loop only commits the small checkpoint rows; fetch_wake goes on when they are done.
 */
static void
fetch_done(void *ud, struct fetch_result *r)
{
    struct fetch_call *fc = ud;
    struct tool_call *call = fc->call;

    fc->f = NULL;
    fc->res = r;
    tool_call_on_cancel(call, NULL, NULL);
    if (r->outcome == FETCH_OK && !fc->has_werr && !tool_call_cancelled(call)) {
        if (writers_store_bg(fc) && writers_busy(fc)) {
            return; /* fetch_wake finishes */
        }
    }
    fetch_finish(fc);
}

static void
fetch_progress(void *ud, uint64_t bytes)
{
    struct fetch_call *fc = ud;
    int64_t now;
    char msg[64];

    if (!tool_call_has_progress(fc->call)) {
        return;
    }
    now = time_mono_ms();
    if (fc->sent_progress && now - fc->last_progress_ms < PROGRESS_EVERY_MS) {
        return;
    }
    snprintf(msg, sizeof(msg), "%llu bytes received", (unsigned long long)bytes);
    tool_call_progress(fc->call, (double)bytes, -1, msg);
    fc->sent_progress = 1;
    fc->last_progress_ms = now;
}

static void
fetch_on_cancel(struct tool_call *call, void *arg)
{
    struct fetch_call *fc = arg;

    (void)call;
    if (fc->f != NULL) {
        fetch_cancel(fc->f);
    }
}

/* ---- the handler ------------------------------------------------------------------------ */

static void
session_fetch(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call);
    const cJSON *args = tool_call_args(call);
    const char *body = tool_call_arg_str(call, "body");
    struct fetch_call *fc = NULL;
    struct fetch_request req;
    struct fetch_callbacks cb;
    struct policy *p = NULL;
    struct err err;

    if (tools_policy(call, &p) < 0) {
        return;
    }
    fc = mem_calloc(1, sizeof(*fc));
    if (fc == NULL) {
        policy_unref(p);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    fc->call = call;
    fc->policy = p;
    fc->url = tool_call_arg_str(call, "url");
    fc->method = tool_call_arg_str(call, "method");
    fc->description = tool_call_arg_str(call, "description");
    if (fetch_method_check(fc->method != NULL ? fc->method : "GET", fc->method_buf,
                           sizeof(fc->method_buf), &err) < 0 ||
        read_headers(fc, cJSON_GetObjectItemCaseSensitive(args, "headers"), &err) < 0 ||
        build_policy(fc, &err) < 0) {
        tool_call_done_err(call, err.code == ERR_INVAL ? TOOL_ERR_INVALID_ARGUMENTS : NULL, &err);
        goto out;
    }
    fc->method = fc->method_buf;
    if (tsess_mgr(call) == NULL) {
        goto out;
    }
    /* Every argument is read: tsess_open may end the call. */
    fc->s = tsess_open(call, SESSION_WRITE);
    if (fc->s == NULL) {
        goto out;
    }
    snprintf(fc->session_id, sizeof(fc->session_id), "%s", session_id(fc->s));

    memset(&req, 0, sizeof(req));
    req.url = fc->url;
    req.method = fc->method;
    req.headers = fc->headers;
    req.n_headers = fc->n_headers;
    req.body = body;
    req.body_len = body != NULL ? strlen(body) : 0;
    req.collect_assets = 1;
    req.sink = body_sink;
    req.asset_sink = asset_sink;
    req.sink_ud = fc;
    fc->st = session_mgr_store(tsess_mgr(call)); /* the store the session commits to */
    fc->wk = fetch_waker_new(env->loop, fetch_wake, fc, &err);
    if (fc->wk == NULL) {
        session_leave(fc->s, SESSION_WRITE);
        tool_call_done_err(call, NULL, &err);
        goto out;
    }
    cb.on_progress = fetch_progress;
    cb.on_done = fetch_done;
    cb.ud = fc;
    fc->f = fetch_start(env->loop, &fc->fp, &req, &cb, &err);
    if (fc->f == NULL) {
        /* Refused before any network work: a denied URL or a malformed request. */
        const char *code = err.code == ERR_DENIED  ? "fetch_denied"
                           : err.code == ERR_INVAL ? TOOL_ERR_INVALID_ARGUMENTS
                                                   : NULL;
        session_leave(fc->s, SESSION_WRITE);
        tool_call_set_summary(call, "%s: %s %.160s", code ? code : tools_err_code(err.code),
                              fc->method, fc->url);
        tool_call_done_err(call, code, &err);
        goto out;
    }
    tool_call_on_cancel(call, fetch_on_cancel, fc);
    return; /* fetch_done owns fc now */
out:
    fc_free(fc);
}

static const char fetch_schema[] =
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
    "\"properties\":{"
    "\"url\":{\"type\":\"string\",\"minLength\":1,\"description\":\"http or https URL on the "
    "server's allowlist.\"},"
    "\"method\":{\"type\":\"string\",\"description\":\"HTTP method (default GET).\"},"
    "\"headers\":{\"type\":\"array\",\"maxItems\":64,\"items\":{\"type\":\"object\","
    "\"properties\":{\"name\":{\"type\":\"string\"},\"value\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"value\"],\"additionalProperties\":false},"
    "\"description\":\"Request headers.\"},"
    "\"body\":{\"type\":\"string\",\"description\":\"Request body, sent as given.\"},"
    "\"description\":{\"type\":\"string\",\"description\":\"Why you fetch it, in a few words "
    "(recorded in the checkpoint).\"}," TSESS_ID_PROP
    "},\"required\":[\"url\",\"description\"],\"additionalProperties\":false}";

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char fetch_out[] = TSESS_OUT_OBJECT(
    "\"status\":" J_INT ",\"bytes\":" J_INT ",\"content_type\":" J_STR ",\"saved_to\":" J_STR
    ",\"dir\":" J_STR ",\"manifest_path\":" J_STR ",\"assets_fetched\":" J_INT
    ",\"assets_skipped\":" J_INT ",\"assets_failed\":" J_INT ",\"final_url\":" J_STR
    ",\"checkpoint_id\":" J_INT,
    "\"status\",\"bytes\",\"saved_to\",\"dir\",\"manifest_path\",\"final_url\",\"checkpoint_id\"");

const struct tool_def tools_fetch_defs[] = {
    {
        .name = "session_fetch",
        .title = "Fetch a URL into the workspace",
        .description = "HTTP request made by the server (only to allowlisted hosts; every "
                       "redirect re-checked) and saved under downloads/<host>/<slug>/ with a "
                       "manifest.json, as one checkpoint. For an HTML page its stylesheets, "
                       "icons, scripts and images are fetched too. The body is not returned; "
                       "read the saved file.",
        .input_schema = fetch_schema,
        .annotations = {0, 0, 0, 1},
        .output_schema = fetch_out,
        .handler = session_fetch,
    },
};

const size_t tools_fetch_count = sizeof(tools_fetch_defs) / sizeof(tools_fetch_defs[0]);
