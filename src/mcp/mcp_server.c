/*
 * mcp_server.c - the stdio transport, JSON-RPC dispatch and MCP lifecycle.
 *
 * Design. One libuv loop reads stdin, splits it into lines and handles each line to
 * the end before the next: check (length, UTF-8, depth, JSON, JSON-RPC shape), then
 * dispatch. Only tools/call can take time; it becomes a task (struct mcp_req) that the
 * tool ends later through the registry's respond callback, so a slow tool never holds
 * up other requests. Output messages are single lines from cJSON_PrintUnformatted
 * (which escapes newlines in strings) queued with uv_write.
 *
 * Invariants.
 * - Every request gets exactly one response, except a tools/call the client cancelled.
 *   Notifications never get one.
 * - Ids are echoed exactly: a string as is, an integer as the text the client sent.
 * - Back-pressure: while more than max_queue_bytes wait for the client, no input is read,
 *   so a client that stops reading stops sending work; reading resumes once the queue
 *   drains below half the bound. Only a client that reads nothing at all for stall_ms
 *   while paused is dropped (logged). What queues past the bound is bounded by the calls
 *   already in flight and each tool's output caps.
 * - After shutdown begins no input is read; calls in flight are cancelled and get
 *   shutdown_grace_ms to end; then every handle is closed and mcp_serve() returns.
 *
 * Eras. The 2024-11-05 .. 2025-11-25 revisions open with initialize; until then only
 * ping (and server/discover) are served. The 2026-07-28 revision has no handshake: a
 * request whose params._meta names "io.modelcontextprotocol/protocolVersion" is served
 * on its own, or refused with -32022 listing the versions drun speaks.
 */
#include "mcp/mcp_int.h"

const char *const mcp_versions[] = {"2026-07-28", "2025-11-25", "2025-06-18",
                                    "2025-03-26", "2024-11-05", NULL};
static const char *const modern_versions[] = {"2026-07-28", NULL};
static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                              "2024-11-05", NULL};

static const char server_instructions[] =
    "drun runs shell commands in sandboxed workspaces (no network) and checkpoints every "
    "change. Call get_system_instructions once for the guide.";

static void start_fs_read(struct server *s);

/* ---- lifecycle results -------------------------------------------------------------- */

cJSON *
mcp_server_info(struct server *s)
{
    cJSON *i = cJSON_CreateObject();

    cJSON_AddStringToObject(i, "name", "drun");
    cJSON_AddStringToObject(i, "title", "drun");
    cJSON_AddStringToObject(i, "version", s->env->server_version ? s->env->server_version : "0");
    cJSON_AddStringToObject(i, "description",
                            "Sandboxed workspaces with checkpointed history for AI agents");
    return i;
}

static cJSON *
capabilities(void)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *t = cJSON_AddObjectToObject(c, "tools");

    cJSON_AddBoolToObject(t, "listChanged", 0);
    return c;
}

static cJSON *
version_list(const char *const *v)
{
    cJSON *a = cJSON_CreateArray();
    for (; a != NULL && *v != NULL; v++) {
        cJSON_AddItemToArray(a, cJSON_CreateString(*v));
    }
    return a;
}

static int
in_list(const char *const *list, const char *v)
{
    for (; *list != NULL; list++) {
        if (strcmp(*list, v) == 0) {
            return 1;
        }
    }
    return 0;
}

static void
copy_client_info(const cJSON *info, char *name, size_t name_size, char *version,
                 size_t version_size)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(info, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(info, "version");

    if (cJSON_IsString(n)) {
        snprintf(name, name_size, "%s", n->valuestring);
    }
    if (cJSON_IsString(v)) {
        snprintf(version, version_size, "%s", v->valuestring);
    }
}

static void
do_initialize(struct server *s, const cJSON *id, const cJSON *params)
{
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
    cJSON *r;

    if (!cJSON_IsString(pv)) {
        mcp_protocol_error(s, id, RPC_INVALID_PARAMS, NULL,
                           "initialize needs 'protocolVersion' (a string) in params");
        return;
    }
    if (s->initialized) {
        mcp_protocol_error(s, id, RPC_INVALID_REQUEST, NULL,
                           "'initialize' was already received on this connection; send it once");
        return;
    }
    /* Echo a version we speak; otherwise offer the newest handshake revision. */
    snprintf(s->version, sizeof(s->version), "%s",
             in_list(legacy_versions, pv->valuestring) ? pv->valuestring : legacy_versions[0]);
    copy_client_info(cJSON_GetObjectItemCaseSensitive(params, "clientInfo"), s->client_name,
                     sizeof(s->client_name), s->client_version, sizeof(s->client_version));
    snprintf(s->env->client_name, sizeof(s->env->client_name), "%s", s->client_name);
    snprintf(s->env->client_version, sizeof(s->env->client_version), "%s", s->client_version);
    s->initialized = 1;
    log_info("initialized: client '%s' %s, protocol %s (asked for %s)", s->client_name,
             s->client_version, s->version, pv->valuestring);

    r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "protocolVersion", s->version);
    cJSON_AddItemToObject(r, "capabilities", capabilities());
    cJSON_AddItemToObject(r, "serverInfo", mcp_server_info(s));
    cJSON_AddStringToObject(r, "instructions", server_instructions);
    mcp_send_result(s, id, r, 0);
}

static void
do_discover(struct server *s, const cJSON *id)
{
    cJSON *r = cJSON_CreateObject();

    cJSON_AddStringToObject(r, "resultType", "complete");
    cJSON_AddItemToObject(r, "supportedVersions", version_list(mcp_versions));
    cJSON_AddItemToObject(r, "capabilities", capabilities());
    cJSON_AddItemToObject(r, "serverInfo", mcp_server_info(s));
    cJSON_AddStringToObject(r, "instructions", server_instructions);
    /* Nothing here changes while the process lives. */
    cJSON_AddNumberToObject(r, "ttlMs", TOOLS_LIST_TTL_MS);
    cJSON_AddStringToObject(r, "cacheScope", "public");
    mcp_send_result(s, id, r, 1);
}

/* ---- tools/call tasks ----------------------------------------------------------------- */

static void
req_unlink(struct mcp_req *r)
{
    struct server *s = r->srv;

    if (r->prev != NULL) {
        r->prev->next = r->next;
    } else {
        s->inflight = r->next;
    }
    if (r->next != NULL) {
        r->next->prev = r->prev;
    }
    cJSON_Delete(r->id);
    mem_free(r->key);
    mem_free(r);
}

static void
on_call_respond(void *ctx, cJSON *result)
{
    struct mcp_req *r = ctx;
    struct server *s = r->srv;

    if (r->cancelled) {
        cJSON_Delete(result);
    } else if (result == NULL) {
        mcp_send_error(s, r->id, RPC_INTERNAL_ERROR, "internal error: out of memory", NULL);
    } else {
        mcp_send_result(s, r->id, result, r->modern);
    }
    req_unlink(r);
    mcp_maybe_finish(s);
}

static void
on_call_progress(void *ctx, cJSON *params)
{
    struct mcp_req *r = ctx;
    cJSON *m;

    if (r->cancelled) {
        cJSON_Delete(params);
        return;
    }
    m = cJSON_CreateObject();
    if (m == NULL) {
        cJSON_Delete(params);
        return;
    }
    if (cJSON_AddStringToObject(m, "jsonrpc", "2.0") == NULL ||
        cJSON_AddStringToObject(m, "method", "notifications/progress") == NULL ||
        mcp_add_item(m, "params", params) < 0) {
        cJSON_Delete(m);
        log_warn("a progress notification was dropped: out of memory");
        return;
    }
    mcp_send_msg(r->srv, m, NULL);
}

/* The parts of the incoming line that handlers need beside the parsed message. */
struct line_ctx {
    const char *text; /* the original line, as checked */
    const struct mcp_json_scan *sc;
};

/* Copies a span of the line into a raw cJSON value, echoed as exactly that text. */
static cJSON *
raw_value(const struct line_ctx *lc, const struct mcp_json_span *sp)
{
    char *text = mem_strndup(lc->text + sp->start, sp->len);
    cJSON *v = text ? cJSON_CreateRaw(text) : NULL;

    mem_free(text);
    return v;
}

/*
 * The key that notifications/cancelled finds a call by: "s:" and the decoded string, or
 * "n:" and the integer's exact text (so 9007199254740993 and 9007199254740992 differ).
 * Returns an owned string; NULL (with *nomem set if memory ran out) if v is neither.
 */
static char *
req_key(const cJSON *v, const struct line_ctx *lc, const struct mcp_json_span *sp, int *nomem)
{
    const char *text;
    size_t len;
    char kind, *out;

    *nomem = 0;
    if (cJSON_IsString(v)) {
        kind = 's', text = v->valuestring, len = strlen(v->valuestring);
    } else if (cJSON_IsNumber(v) && sp->found && sp->kind == MCP_JSON_INTEGER) {
        kind = 'n', text = lc->text + sp->start, len = sp->len;
    } else {
        return NULL;
    }
    out = mem_alloc(len + 3);
    if (out == NULL) {
        *nomem = 1;
        return NULL;
    }
    out[0] = kind;
    out[1] = ':';
    memcpy(out + 2, text, len);
    out[len + 2] = '\0';
    return out;
}

static struct mcp_req *
find_req(struct server *s, const char *key)
{
    for (struct mcp_req *r = s->inflight; r != NULL; r = r->next) {
        if (strcmp(r->key, key) == 0) {
            return r;
        }
    }
    return NULL;
}

static void
do_tools_call(struct server *s, const cJSON *id, const cJSON *idj, const cJSON *params, int modern,
              const struct line_ctx *lc)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
    const cJSON *token = cJSON_GetObjectItemCaseSensitive(meta, "progressToken");
    const struct mcp_json_scan *sc = lc->sc;
    struct tool_call_req treq;
    struct tool_call_host host;
    struct mcp_req *r;
    cJSON *raw_token = NULL;
    char cname[128] = "", cversion[64] = "", refusal[256];
    int nomem = 0;

    if (!cJSON_IsString(name)) {
        mcp_protocol_error(s, id, RPC_INVALID_PARAMS, NULL,
                           "tools/call needs 'name' (a string) in params");
        return;
    }
    memset(&treq, 0, sizeof(treq));
    treq.def = tools_find(name->valuestring);
    if (treq.def == NULL) {
        mcp_protocol_error(s, id, RPC_INVALID_PARAMS, NULL,
                           "unknown tool '%.100s'; tools/list names the tools", name->valuestring);
        return;
    }
    r = mem_calloc(1, sizeof(*r));
    if (r == NULL || (r->id = cJSON_Duplicate(id, 1)) == NULL ||
        (r->key = req_key(idj, lc, &sc->slot[MCP_SLOT_ID], &nomem)) == NULL) {
        if (r != NULL) {
            cJSON_Delete(r->id);
        }
        mem_free(r);
        mcp_answer_oom(s, id);
        return;
    }
    if (find_req(s, r->key) != NULL) {
        cJSON_Delete(r->id);
        mem_free(r->key);
        mem_free(r);
        mcp_protocol_error(s, id, RPC_INVALID_REQUEST, NULL,
                           "request id is already in use by a call in flight; use a new id");
        return;
    }
    r->srv = s;
    r->modern = modern;
    r->next = s->inflight;
    if (s->inflight != NULL) {
        s->inflight->prev = r;
    }
    s->inflight = r;

    snprintf(cname, sizeof(cname), "%s", s->client_name);
    snprintf(cversion, sizeof(cversion), "%s", s->client_version);
    copy_client_info(cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_INFO), cname, sizeof(cname),
                     cversion, sizeof(cversion));
    treq.arguments = cJSON_GetObjectItemCaseSensitive(params, "arguments");
    /* The token goes back in each progress notification as the client's exact text. */
    if ((cJSON_IsString(token) || cJSON_IsNumber(token)) && sc->slot[MCP_SLOT_TOKEN].found) {
        raw_token = raw_value(lc, &sc->slot[MCP_SLOT_TOKEN]);
        if (raw_token == NULL) {
            mcp_answer_oom(s, id);
            req_unlink(r);
            return;
        }
    }
    treq.progress_token = raw_token;
    treq.client_name = cname[0] ? cname : NULL;
    treq.client_version = cversion[0] ? cversion : NULL;
    if (sc->uncarriable) {
        /* Only reached when it lies inside the arguments: the model can fix those. */
        snprintf(refusal, sizeof(refusal),
                 "the arguments hold %s at byte %zu of the message, which drun cannot carry; "
                 "remove it (send binary content base64-encoded where the tool accepts it)",
                 sc->uncarriable_why, sc->uncarriable_at);
        treq.refusal = refusal;
    }
    host.respond = on_call_respond;
    host.progress = on_call_progress;
    host.ctx = r;
    r->call = tools_call_new(s->env, &treq, &host);
    cJSON_Delete(raw_token);
    if (r->call == NULL) {
        mcp_answer_oom(s, id);
        req_unlink(r);
        return;
    }
    tools_call_run(r->call); /* may end the call (and free r) before it returns */
}

static void
cancel_req(struct mcp_req *r)
{
    if (r->cancelled) {
        return;
    }
    r->cancelled = 1;
    tools_call_cancel(r->call); /* the hook may end the call and free r */
}

/* ---- one message ---------------------------------------------------------------------- */

static void
do_notification(struct server *s, const char *method, const cJSON *params,
                const struct line_ctx *lc)
{
    s->n_notifications++;
    if (strcmp(method, "notifications/cancelled") == 0) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
        int nomem = 0;
        char *key = req_key(rid, lc, &lc->sc->slot[MCP_SLOT_REQUEST_ID], &nomem);
        struct mcp_req *r = key ? find_req(s, key) : NULL;

        if (r != NULL) {
            log_info("request %.200s cancelled by the client", key + 2);
            cancel_req(r);
        } else if (nomem) {
            log_error("out of memory: a cancellation could not be matched to its call");
        } else {
            log_debug("cancellation for request %.200s, which is not in flight",
                      key ? key + 2 : "(not a string or an integer)");
        }
        mem_free(key);
    } else if (strcmp(method, "notifications/initialized") == 0) {
        log_debug("client sent notifications/initialized");
    } else {
        log_debug("ignoring notification '%s'", method);
    }
}

/*
 * Builds the id to echo: a string or an integer, as the exact text the client sent.
 * Returns NULL with *nomem 0 if the id is of another kind, or 1 if memory ran out.
 */
static cJSON *
make_id(const cJSON *idj, const struct line_ctx *lc, int *nomem)
{
    const struct mcp_json_span *sp = &lc->sc->slot[MCP_SLOT_ID];
    cJSON *id;

    *nomem = 0;
    if (!sp->found || !(sp->kind == MCP_JSON_STRING || sp->kind == MCP_JSON_INTEGER) ||
        !(cJSON_IsString(idj) || cJSON_IsNumber(idj))) {
        return NULL; /* null, a fraction or exponent, true, an object: not a JSON-RPC id */
    }
    id = raw_value(lc, sp);
    *nomem = id == NULL;
    return id;
}

static void
handle_message(struct server *s, const cJSON *msg, const struct line_ctx *lc)
{
    const cJSON *jsonrpc = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    const cJSON *idj = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    const cJSON *meta, *pv;
    cJSON *id = NULL;
    const char *method;
    int modern = 0, nomem = 0;

    if (idj == NULL && mj == NULL) {
        mcp_protocol_error(s, NULL, RPC_INVALID_REQUEST, NULL,
                           "a message needs 'method' (requests and notifications) or 'id'");
        return;
    }
    if (mj == NULL && (cJSON_GetObjectItemCaseSensitive(msg, "result") != NULL ||
                       cJSON_GetObjectItemCaseSensitive(msg, "error") != NULL)) {
        log_debug("ignoring a response from the client; drun sends no requests");
        return;
    }
    if (idj == NULL) {
        /* A notification: never answered, even when malformed. */
        if (!cJSON_IsString(jsonrpc) || strcmp(jsonrpc->valuestring, "2.0") != 0 ||
            !cJSON_IsString(mj)) {
            s->n_protocol_errors++;
            log_warn("protocol error: ignoring a malformed notification");
            return;
        }
        if (lc->sc->uncarriable) {
            s->n_protocol_errors++;
            log_warn("protocol error: ignoring a notification that holds %s at byte %zu",
                     lc->sc->uncarriable_why, lc->sc->uncarriable_at);
            return;
        }
        do_notification(s, mj->valuestring, params, lc);
        return;
    }
    s->n_requests++;
    id = make_id(idj, lc, &nomem);
    if (id == NULL) {
        if (nomem) {
            const struct mcp_json_span *sp = &lc->sc->slot[MCP_SLOT_ID];
            mcp_answer_oom_text(s, lc->text + sp->start, sp->len);
            return;
        }
        mcp_protocol_error(s, NULL, RPC_INVALID_REQUEST, NULL,
                           "'id' must be a string or an integer");
        return;
    }
    if (!cJSON_IsString(jsonrpc) || strcmp(jsonrpc->valuestring, "2.0") != 0) {
        mcp_protocol_error(s, id, RPC_INVALID_REQUEST, NULL, "'jsonrpc' must be \"2.0\"");
        goto out;
    }
    if (!cJSON_IsString(mj)) {
        mcp_protocol_error(s, id, RPC_INVALID_REQUEST, NULL, "'method' must be a string");
        goto out;
    }
    method = mj->valuestring;
    if (params != NULL && !cJSON_IsObject(params)) {
        mcp_protocol_error(s, id, RPC_INVALID_PARAMS, NULL, "'params' must be an object");
        goto out;
    }
    /*
     * Valid JSON that drun cannot carry: refused with the request's own id, so the
     * client's call completes. Inside a tool's arguments it is the tool's refusal
     * (a result with isError), which the model reads and can act on.
     */
    if (lc->sc->uncarriable &&
        !(strcmp(method, "tools/call") == 0 &&
          mcp_json_span_holds(&lc->sc->slot[MCP_SLOT_ARGUMENTS], lc->sc->uncarriable_at))) {
        mcp_protocol_error(s, id, RPC_INVALID_PARAMS, NULL,
                           "invalid params: the message holds %s at byte %zu, which drun cannot "
                           "carry; remove it (send binary data base64-encoded)",
                           lc->sc->uncarriable_why, lc->sc->uncarriable_at);
        goto out;
    }
    if (s->shutting_down) {
        mcp_protocol_error(s, id, RPC_INVALID_REQUEST, NULL,
                           "the server is shutting down; start a new one");
        goto out;
    }
    meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
    pv = cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION);
    if (pv != NULL) {
        if (!cJSON_IsString(pv) || !in_list(mcp_versions, pv->valuestring)) {
            cJSON *data = cJSON_CreateObject();
            cJSON_AddItemToObject(data, "supported", version_list(mcp_versions));
            cJSON_AddItemToObject(data, "requested",
                                  cJSON_IsString(pv) ? cJSON_CreateString(pv->valuestring)
                                                     : cJSON_Duplicate(pv, 1));
            mcp_protocol_error(s, id, RPC_UNSUPPORTED_VER, data, "Unsupported protocol version");
            goto out;
        }
        modern = in_list(modern_versions, pv->valuestring);
    }

    if (strcmp(method, "initialize") == 0) {
        do_initialize(s, id, params);
    } else if (strcmp(method, "ping") == 0) {
        mcp_send_result(s, id, cJSON_CreateObject(), modern);
    } else if (strcmp(method, "server/discover") == 0) {
        do_discover(s, id);
    } else if (!s->initialized && pv == NULL) {
        mcp_protocol_error(s, id, RPC_INVALID_REQUEST, NULL,
                           "'%.100s' before 'initialize'; send initialize first, or name the "
                           "protocol version in params._meta \"" META_PROTOCOL_VERSION "\"",
                           method);
    } else if (strcmp(method, "tools/list") == 0) {
        cJSON *r = cJSON_CreateObject();
        cJSON *list = tools_list_json();
        if (r == NULL || list == NULL) {
            cJSON_Delete(r);
            cJSON_Delete(list);
            mcp_send_error(s, id, RPC_INTERNAL_ERROR, "internal error: out of memory", NULL);
        } else {
            cJSON_AddItemToObject(r, "tools", list);
            if (modern) {
                /* A cacheable result in 2026-07-28: the list is fixed for the process's
                 * life and holds nothing of the user's (no policy, no paths). */
                cJSON_AddNumberToObject(r, "ttlMs", TOOLS_LIST_TTL_MS);
                cJSON_AddStringToObject(r, "cacheScope", "public");
            }
            mcp_send_result(s, id, r, modern);
        }
    } else if (strcmp(method, "tools/call") == 0) {
        do_tools_call(s, id, idj, params, modern, lc);
    } else {
        mcp_protocol_error(s, id, RPC_METHOD_NOT_FOUND, NULL, "method '%.100s' not found", method);
    }
out:
    cJSON_Delete(id);
}

static void
handle_line(struct server *s, const char *p, size_t n)
{
    struct mcp_json_scan sc;
    struct line_ctx lc = {p, &sc};
    char *copy = NULL;
    cJSON *msg;

    while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t')) {
        n--;
    }
    if (n == 0) {
        return; /* blank lines are not messages */
    }
    if (mcp_json_check(p, n, s->opts.max_depth, &sc) < 0) {
        if (sc.too_deep) {
            mcp_protocol_error(s, NULL, RPC_PARSE_ERROR, NULL,
                               "parse error: JSON nested deeper than %d levels", s->opts.max_depth);
        } else {
            mcp_protocol_error(s, NULL, RPC_PARSE_ERROR, NULL,
                               "parse error at byte %zu: %s; send one JSON-RPC message (RFC 8259 "
                               "JSON, UTF-8) per line",
                               sc.bad_at, sc.why);
        }
        return;
    }
    if (sc.uncarriable) {
        /* cJSON refuses a lone surrogate and cuts strings at \u0000: give it a copy
         * without them, only to learn the id and method for the refusal. */
        copy = mem_alloc(n);
        if (copy != NULL) {
            memcpy(copy, p, n);
            mcp_json_neutralize(copy, n);
        }
    }
    msg = (!sc.uncarriable || copy != NULL) ? cJSON_ParseWithLength(copy ? copy : p, n) : NULL;
    mem_free(copy);
    if (msg == NULL) {
        /* The text is JSON, so cJSON ran out of memory: answer a request, if it is one. */
        const struct mcp_json_span *sp = &sc.slot[MCP_SLOT_ID];
        if (sp->found && (sp->kind == MCP_JSON_STRING || sp->kind == MCP_JSON_INTEGER)) {
            mcp_answer_oom_text(s, p + sp->start, sp->len);
        } else {
            log_error("out of memory: a message without an id was dropped");
        }
        return;
    }
    if (cJSON_IsArray(msg)) {
        mcp_protocol_error(s, NULL, RPC_INVALID_REQUEST, NULL,
                           "batches are not supported; send one message per line");
    } else if (!cJSON_IsObject(msg)) {
        mcp_protocol_error(s, NULL, RPC_INVALID_REQUEST, NULL, "a message must be a JSON object");
    } else {
        handle_message(s, msg, &lc);
    }
    cJSON_Delete(msg);
}

/* Splits input into lines; an over-long line is answered once and skipped to its end. */
static void
feed(struct server *s, const char *data, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t seg = nl ? (size_t)(nl - data) : n;
        size_t used = nl ? seg + 1 : n;

        if (s->skipping) {
            s->skipping = nl == NULL;
        } else if (s->line.len + seg > s->opts.max_line_bytes) {
            mcp_protocol_error(s, NULL, RPC_INVALID_REQUEST, NULL,
                               "message longer than the %zu-byte line limit; it was skipped",
                               s->opts.max_line_bytes);
            buf_reset(&s->line);
            s->skipping = nl == NULL;
        } else if (nl == NULL) {
            buf_append(&s->line, data, seg);
        } else if (s->line.len == 0) {
            handle_line(s, data, seg); /* the whole line is in this chunk: no copy */
        } else {
            buf_append(&s->line, data, seg);
            handle_line(s, s->line.data, s->line.len);
            buf_reset(&s->line);
        }
        data += used;
        n -= used;
    }
}

/* ---- input ------------------------------------------------------------------------------ */

static void
end_of_input(struct server *s)
{
    if (s->line.len > 0 || s->skipping) {
        log_info("input ended inside a message; %zu bytes without a newline discarded",
                 s->line.len);
    }
    mcp_begin_shutdown(s, "end of input");
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct server *s = h->data;
    (void)suggested;
    *b = uv_buf_init(s->rbuf, (unsigned)READ_CHUNK);
}

static void
on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct server *s = st->data;

    if (n > 0) {
        feed(s, b->base, (size_t)n);
    } else if (n == UV_EOF) {
        end_of_input(s);
    } else if (n < 0) {
        log_warn("cannot read the input: %s", uv_strerror((int)n));
        mcp_begin_shutdown(s, "input error");
    }
}

static void
on_fs_read(uv_fs_t *req)
{
    struct server *s = req->data;
    ssize_t n = req->result;

    uv_fs_req_cleanup(req);
    s->in_fs_busy = 0;
    if (s->shutting_down) {
        mcp_maybe_finish(s);
        return;
    }
    if (n > 0) {
        feed(s, s->rbuf, (size_t)n);
        if (!s->input_paused) {
            start_fs_read(s);
        }
    } else if (n == 0) {
        end_of_input(s);
    } else {
        log_warn("cannot read the input: %s", uv_strerror((int)n));
        mcp_begin_shutdown(s, "input error");
    }
}

static void
start_fs_read(struct server *s)
{
    uv_buf_t b = uv_buf_init(s->rbuf, (unsigned)READ_CHUNK);

    if (s->shutting_down) {
        return;
    }
    s->in_fs.data = s;
    if (uv_fs_read(&s->loop, &s->in_fs, s->opts.in_fd, &b, 1, -1, on_fs_read) == 0) {
        s->in_fs_busy = 1;
    } else {
        mcp_begin_shutdown(s, "input error");
    }
}

/* Opens fd as a libuv stream if it is a pipe, socket or terminal; returns 1 if it did. */
static int
open_stream(struct server *s, void *h, int fd, int readable)
{
    uv_handle_type t = uv_guess_handle(fd);

    if (t == UV_NAMED_PIPE) {
        if (uv_pipe_init(&s->loop, h, 0) == 0 && uv_pipe_open(h, fd) == 0) {
            ((uv_handle_t *)h)->data = s;
            return 1;
        }
    } else if (t == UV_TTY) {
        if (uv_tty_init(&s->loop, h, fd, readable) == 0) {
            ((uv_handle_t *)h)->data = s;
            return 1;
        }
    }
    return 0;
}

/* ---- back-pressure -------------------------------------------------------------------- */

void
mcp_on_stall(uv_timer_t *t)
{
    struct server *s = t->data;

    if (!s->input_paused || s->out_broken) {
        return;
    }
    log_error("the client has read nothing for %d ms with %zu bytes waiting; dropping the "
              "connection (--client-stall-ms sets this limit)",
              s->opts.stall_ms, s->queued);
    s->out_broken = 1;
    mcp_close_output(s);
    mcp_begin_shutdown(s, "client stopped reading");
}

/* After queueing output: past the bound, stop reading input until the client catches up. */
void
mcp_input_pressure(struct server *s)
{
    if (s->input_paused || s->shutting_down || s->queued <= s->opts.max_queue_bytes) {
        return;
    }
    s->input_paused = 1;
    log_info("%zu bytes wait for the client; not reading requests until it catches up", s->queued);
    if (s->in_stream && s->in_open) {
        uv_read_stop((uv_stream_t *)&s->in);
    }
    /* A file input simply does not start its next read (on_fs_read checks the flag). */
    uv_timer_start(&s->stall, mcp_on_stall, (uint64_t)s->opts.stall_ms, 0);
}

/* After output drained: below half the bound, read input again. */
void
mcp_input_resume(struct server *s)
{
    if (!s->input_paused || s->queued > s->opts.max_queue_bytes / 2) {
        return;
    }
    s->input_paused = 0;
    uv_timer_stop(&s->stall);
    if (s->shutting_down) {
        return;
    }
    log_info("the client caught up; reading requests again");
    if (s->in_stream && s->in_open) {
        if (uv_read_start((uv_stream_t *)&s->in, on_alloc, on_read) < 0) {
            mcp_begin_shutdown(s, "input error");
        }
    } else if (!s->in_stream && !s->in_fs_busy) {
        start_fs_read(s);
    }
}

/* ---- shutdown ------------------------------------------------------------------------- */

static void
close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) {
        uv_close(h, NULL);
    }
}

/* The last step: every handle still open (ours, or a tool's that outstayed the grace). */
static void
on_final(uv_timer_t *t)
{
    struct server *s = t->data;

    s->in_open = 0;
    s->out_open = 0;
    tools_shutdown(s->env); /* joins the tools' threads that wake the loop */
    uv_walk(&s->loop, close_walk, NULL);
}

/*
 * Everything is done: close on the next loop turn, so a tool that ended its call from
 * inside a callback has closed its own handles first.
 */
void
mcp_maybe_finish(struct server *s)
{
    if (s->shutting_down && !s->finishing && s->inflight == NULL && s->queued == 0 &&
        !s->in_fs_busy) {
        s->finishing = 1;
        uv_timer_stop(&s->grace);
        uv_timer_start(&s->grace, on_final, 0, 0);
    }
}

static void
on_grace(uv_timer_t *t)
{
    struct server *s = t->data;
    int n = 0;

    for (struct mcp_req *r = s->inflight; r != NULL; r = r->next) {
        n++;
    }
    if (n > 0) {
        log_warn("%d cancelled calls did not end within %d ms; exiting without them", n,
                 s->opts.shutdown_grace_ms);
    }
    if (s->queued > 0) {
        log_warn("%zu bytes of output could not be delivered", s->queued);
    }
    on_final(t);
}

void
mcp_begin_shutdown(struct server *s, const char *why)
{
    struct mcp_req *r;

    if (s->shutting_down) {
        return;
    }
    s->shutting_down = 1;
    log_info("shutting down: %s", why);
    if (s->in_stream && s->in_open) {
        s->in_open = 0;
        uv_read_stop((uv_stream_t *)&s->in);
        uv_close((uv_handle_t *)&s->in, NULL);
    }
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    /* A second SIGTERM or SIGINT now kills (the operator insists); a second SIGHUP, which
     * a hang-up may well send, stays caught until the end. */
    uv_timer_stop(&s->stall);
    /* Cancel each call once; a hook may end its call (and unlink it) at once. */
    for (;;) {
        for (r = s->inflight; r != NULL && r->cancelled; r = r->next) {
        }
        if (r == NULL) {
            break;
        }
        cancel_req(r);
    }
    uv_timer_start(&s->grace, on_grace, (uint64_t)s->opts.shutdown_grace_ms, 0);
    s->grace_started = 1;
    mcp_maybe_finish(s);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct server *s = h->data;
    mcp_begin_shutdown(s, signum == SIGTERM ? "SIGTERM" : signum == SIGHUP ? "SIGHUP" : "SIGINT");
}

int
mcp_serve(struct tools_env *env, const struct mcp_opts *opts, struct err *err)
{
    struct server *s = mem_calloc(1, sizeof(*s));
    int rc;

    if (s == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    s->env = env;
    s->opts = *opts;
    if (s->opts.max_line_bytes == 0) {
        s->opts.max_line_bytes = MCP_MAX_LINE_DEFAULT;
    }
    if (s->opts.max_queue_bytes == 0) {
        s->opts.max_queue_bytes = MCP_MAX_QUEUE_DEFAULT;
    }
    if (s->opts.max_depth <= 0) {
        s->opts.max_depth = MCP_MAX_DEPTH_DEFAULT;
    }
    if (s->opts.shutdown_grace_ms <= 0) {
        s->opts.shutdown_grace_ms = 2000;
    }
    if (s->opts.stall_ms <= 0) {
        s->opts.stall_ms = MCP_STALL_MS_DEFAULT;
    }
    buf_init(&s->line, s->opts.max_line_bytes + 1);
    s->rbuf = mem_alloc(READ_CHUNK);
    if (s->rbuf == NULL) {
        mem_free(s);
        return err_set(err, ERR_NOMEM, "out of memory");
    }
    rc = uv_loop_init(&s->loop);
    if (rc < 0) {
        mem_free(s->rbuf);
        mem_free(s);
        return err_set(err, ERR_IO, "cannot start the event loop: %s", uv_strerror(rc));
    }
    env->loop = &s->loop;

    s->out_stream = open_stream(s, &s->out, s->opts.out_fd, 0);
    s->out_open = s->out_stream;
    s->in_stream = open_stream(s, &s->in, s->opts.in_fd, 1);
    s->in_open = s->in_stream;
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sighup);
    s->sigterm.data = s->sigint.data = s->sighup.data = s;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    /* The terminal or the client's session went away: the same clean end as SIGTERM. */
    uv_signal_start(&s->sighup, on_signal, SIGHUP);
    uv_timer_init(&s->loop, &s->grace);
    s->grace.data = s;
    uv_timer_init(&s->loop, &s->stall);
    s->stall.data = s;

    if (s->in_stream) {
        rc = uv_read_start((uv_stream_t *)&s->in, on_alloc, on_read);
        if (rc < 0) {
            log_error("cannot read the input: %s", uv_strerror(rc));
            mcp_begin_shutdown(s, "input error");
        }
    } else {
        start_fs_read(s);
    }
    tools_reaper_start(env);
    log_info("serving MCP on stdio (%zu tools)", tools_count());
    uv_run(&s->loop, UV_RUN_DEFAULT);

    log_info("served %ld requests and %ld notifications; %ld protocol errors", s->n_requests,
             s->n_notifications, s->n_protocol_errors);
    rc = uv_loop_close(&s->loop);
    if (rc < 0) {
        log_debug("event loop closed with handles open: %s", uv_strerror(rc));
    }
    env->loop = NULL;
    buf_release(&s->line);
    mem_free(s->rbuf);
    mem_free(s);
    return 0;
}
