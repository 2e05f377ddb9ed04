/*
 * mcp_output.c - the server's output: the write queue on stdout (with back-pressure on
 * input), and every answer - results, JSON-RPC errors, and the fixed out-of-memory answer.
 */
#include "mcp/mcp_int.h"

/* ---- output --------------------------------------------------------------------- */

static void
on_written(uv_write_t *w, int status)
{
    struct wreq *wr = (struct wreq *)w;
    struct server *s = wr->srv;

    s->queued -= wr->len;
    mem_free(wr);
    if (status < 0 && status != UV_ECANCELED && !s->out_broken) {
        s->out_broken = 1;
        log_info("output closed (%s); shutting down", uv_strerror(status));
        mcp_begin_shutdown(s, "output closed");
    }
    if (status == 0 && s->input_paused) {
        /* The client is reading: it has stall_ms again from now. */
        uv_timer_start(&s->stall, mcp_on_stall, (uint64_t)s->opts.stall_ms, 0);
    }
    mcp_input_resume(s);
    mcp_maybe_finish(s);
}

void
mcp_close_output(struct server *s)
{
    if (s->out_stream && s->out_open) {
        s->out_open = 0;
        uv_close((uv_handle_t *)&s->out, NULL);
    }
}

/*
 * Queues one line (text without its newline). Returns 0, or -1 if no memory was left to
 * queue it (nothing was sent). A broken output swallows the line and returns 0.
 */
static int
queue_line(struct server *s, const char *text, size_t len)
{
    struct wreq *wr;

    if (s->out_broken) {
        return 0;
    }
    wr = mem_alloc(sizeof(*wr) + len + 1);
    if (wr == NULL) {
        return -1;
    }
    memcpy(wr->data, text, len);
    wr->data[len] = '\n';
    wr->len = len + 1;
    wr->srv = s;

    if (!s->out_stream) {
        /* A regular file or device: plain blocking writes keep the order. */
        size_t off = 0;
        while (off < wr->len) {
            ssize_t n = write(s->opts.out_fd, wr->data + off, wr->len - off);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                log_info("output closed (%s); shutting down", strerror(errno));
                s->out_broken = 1;
                mcp_begin_shutdown(s, "output closed");
                break;
            }
            off += (size_t)n;
        }
        mem_free(wr);
        return 0;
    }
    uv_buf_t b = uv_buf_init(wr->data, (unsigned)wr->len);
    s->queued += wr->len;
    int rc = uv_write(&wr->w, (uv_stream_t *)&s->out, &b, 1, on_written);
    if (rc < 0) {
        s->queued -= wr->len;
        mem_free(wr);
        if (rc == UV_ENOMEM) {
            return -1;
        }
        s->out_broken = 1;
        log_info("output closed (%s); shutting down", uv_strerror(rc));
        mcp_begin_shutdown(s, "output closed");
        return 0;
    }
    mcp_input_pressure(s);
    return 0;
}

/*
 * The answer of last resort to request `id` (raw JSON text, or NULL for null) when
 * memory ran out while building or queueing its real answer: a fixed error built without
 * cJSON. If even that cannot be queued, the request would hang forever, so the server
 * says why on stderr and shuts down cleanly instead.
 */
void
mcp_answer_oom_text(struct server *s, const char *id, size_t id_len)
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
    static const char tail[] = ",\"error\":{\"code\":-32603,\"message\":\"internal error: the "
                               "server ran out of memory; retry the request\"}}";
    char small[512];
    char *text = small;
    size_t len;

    if (id == NULL) {
        id = "null";
        id_len = 4;
    }
    len = sizeof(head) - 1 + id_len + sizeof(tail) - 1;
    if (len > sizeof(small) && (text = mem_alloc(len)) == NULL) {
        goto fatal;
    }
    memcpy(text, head, sizeof(head) - 1);
    memcpy(text + sizeof(head) - 1, id, id_len);
    memcpy(text + sizeof(head) - 1 + id_len, tail, sizeof(tail) - 1);
    if (queue_line(s, text, len) < 0) {
        if (text != small) {
            mem_free(text);
        }
        goto fatal;
    }
    if (text != small) {
        mem_free(text);
    }
    log_error("out of memory: answered request %.*s with an internal error", (int)id_len, id);
    return;
fatal:
    log_error("out of memory: cannot answer request %.*s; shutting down", (int)id_len, id);
    mcp_begin_shutdown(s, "out of memory");
}

void
mcp_answer_oom(struct server *s, const cJSON *id)
{
    if (cJSON_IsRaw(id)) {
        mcp_answer_oom_text(s, id->valuestring, strlen(id->valuestring));
    } else {
        mcp_answer_oom_text(s, NULL, 0);
    }
}

/*
 * Sends one message (ownership of msg passes). `id` is the request it answers (NULL for
 * a notification): if memory runs out, that request still gets an error answer.
 */
void
mcp_send_msg(struct server *s, cJSON *msg, const cJSON *id)
{
    char *text;

    if (s->out_broken) {
        cJSON_Delete(msg);
        return;
    }
    text = msg ? cJSON_PrintUnformatted(msg) : NULL;
    cJSON_Delete(msg);
    if (text == NULL || queue_line(s, text, strlen(text)) < 0) {
        cJSON_free(text);
        if (id != NULL) {
            mcp_answer_oom(s, id);
        } else {
            log_error("cannot send a notification: out of memory");
        }
        return;
    }
    cJSON_free(text);
}

/* Adds item to obj; on failure frees item and returns -1 (cJSON leaves it unowned). */
int
mcp_add_item(cJSON *obj, const char *key, cJSON *item)
{
    if (item == NULL || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return -1;
    }
    return 0;
}

static cJSON *
envelope(const cJSON *id)
{
    cJSON *m = cJSON_CreateObject();

    if (m == NULL || cJSON_AddStringToObject(m, "jsonrpc", "2.0") == NULL ||
        mcp_add_item(m, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull()) < 0) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/*
 * The 2026-07-28 revision's common result fields: resultType (required), and the server's
 * name and version in _meta["io.modelcontextprotocol/serverInfo"] (which that revision
 * asks for on every response, replacing initialize's serverInfo). Returns -1 out of memory.
 */
static int
modern_result(struct server *s, cJSON *result)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");

    if (cJSON_GetObjectItemCaseSensitive(result, "resultType") == NULL &&
        cJSON_AddStringToObject(result, "resultType", "complete") == NULL) {
        return -1;
    }
    if (meta == NULL && (meta = cJSON_AddObjectToObject(result, "_meta")) == NULL) {
        return -1;
    }
    if (cJSON_IsObject(meta) && cJSON_GetObjectItemCaseSensitive(meta, META_SERVER_INFO) == NULL &&
        mcp_add_item(meta, META_SERVER_INFO, mcp_server_info(s)) < 0) {
        return -1;
    }
    return 0;
}

void
mcp_send_result(struct server *s, const cJSON *id, cJSON *result, int modern)
{
    cJSON *m = envelope(id);

    if (m == NULL || result == NULL) {
        cJSON_Delete(m);
        cJSON_Delete(result);
        mcp_answer_oom(s, id);
        return;
    }
    if (modern && cJSON_IsObject(result) && modern_result(s, result) < 0) {
        cJSON_Delete(result);
        result = NULL;
    }
    if (mcp_add_item(m, "result", result) < 0) {
        cJSON_Delete(m);
        mcp_answer_oom(s, id);
        return;
    }
    mcp_send_msg(s, m, id);
}

void
mcp_send_error(struct server *s, const cJSON *id, int code, const char *message, cJSON *data)
{
    cJSON *m = envelope(id);
    cJSON *e = cJSON_CreateObject();

    if (e == NULL) {
        cJSON_Delete(data);
    } else if (data != NULL && mcp_add_item(e, "data", data) < 0) {
        cJSON_Delete(e); /* add_item freed data */
        e = NULL;
    }
    if (e != NULL && (cJSON_AddNumberToObject(e, "code", code) == NULL ||
                      cJSON_AddStringToObject(e, "message", message) == NULL)) {
        cJSON_Delete(e);
        e = NULL;
    }
    if (m == NULL || e == NULL || mcp_add_item(m, "error", e) < 0) {
        if (m == NULL) {
            cJSON_Delete(e);
        }
        cJSON_Delete(m);
        mcp_answer_oom(s, id);
        return;
    }
    mcp_send_msg(s, m, id);
}

/* A protocol-level error: counted, logged once, answered. */
void
mcp_protocol_error(struct server *s, const cJSON *id, int code, cJSON *data, const char *fmt, ...)
{
    struct buf b;
    va_list ap;

    buf_init(&b, 1024);
    va_start(ap, fmt);
    buf_vprintf(&b, fmt, ap);
    va_end(ap);
    s->n_protocol_errors++;
    log_warn("protocol error %d: %s", code, buf_cstr(&b));
    mcp_send_error(s, id, code, buf_cstr(&b), data);
    buf_release(&b);
}
