/*
 * fetch_io.c - the glue between curl's multi interface and the libuv loop (sockets
 * watched with uv_poll, curl's timer on a uv timer), and curl's per-transfer callbacks:
 * the address check at connect, the header cap and the body cap or sink.
 */
#include "fetch/fetch_int.h"

/* ---- libuv glue ------------------------------------------------------------------ */

static void
maybe_free(struct fetch *f)
{
    if (f->state == ST_CLOSING && f->open_handles == 0) {
        mem_free(f->cred_left);
        mem_free(f);
    }
}

static void
poll_closed(uv_handle_t *h)
{
    struct sock_ctx *c = h->data;
    struct fetch *f = c->f;

    mem_free(c);
    f->open_handles--;
    maybe_free(f);
}

void
fetch_timer_closed(uv_handle_t *h)
{
    struct fetch *f = h->data;

    f->open_handles--;
    maybe_free(f);
}

void
fetch_sock_unlink_close(struct fetch *f, struct sock_ctx *c)
{
    if (c->prev) {
        c->prev->next = c->next;
    } else {
        f->socks = c->next;
    }
    if (c->next) {
        c->next->prev = c->prev;
    }
    uv_poll_stop(&c->poll);
    uv_close((uv_handle_t *)&c->poll, poll_closed);
}

/*
 * After curl_multi_socket_action: collect finished transfers, or, if curl gave up on
 * the whole multi handle (a callback of ours failed, e.g. out of memory), end the
 * fetch rather than wait for a completion that will never come.
 */
static void
multi_result(struct fetch *f, CURLMcode mc)
{
    struct err e;

    if (mc != CURLM_OK && f->state == ST_RUNNING) {
        int nomem = mc == CURLM_OUT_OF_MEMORY || f->sock_failed;
        err_set(&e, nomem ? ERR_NOMEM : ERR_IO, "fetching '%s' failed: %s",
                f->cur_url ? f->cur_url : "",
                nomem ? "out of memory watching a socket" : curl_multi_strerror(mc));
        fetch_finish_transfer(f, nomem ? FETCH_NOMEM : FETCH_HTTP, &e);
        return;
    }
    fetch_check_multi(f);
}

static void
poll_cb(uv_poll_t *h, int status, int events)
{
    struct sock_ctx *c = h->data;
    struct fetch *f = c->f;
    int flags = 0, running;

    if (f->state != ST_RUNNING) {
        return;
    }
    if (status < 0) {
        flags = CURL_CSELECT_ERR;
    }
    if (events & UV_READABLE) {
        flags |= CURL_CSELECT_IN;
    }
    if (events & UV_WRITABLE) {
        flags |= CURL_CSELECT_OUT;
    }
    multi_result(f, curl_multi_socket_action(f->multi, c->fd, flags, &running));
}

int
fetch_sock_cb(CURL *e, curl_socket_t s, int action, void *userp, void *socketp)
{
    struct fetch *f = userp;
    struct sock_ctx *c = socketp;
    int events = 0;

    (void)e;
    if (action == CURL_POLL_REMOVE) {
        if (c != NULL) {
            curl_multi_assign(f->multi, s, NULL);
            fetch_sock_unlink_close(f, c);
        }
        return 0;
    }
    if (c == NULL) {
        c = mem_calloc(1, sizeof(*c));
        if (c == NULL) {
            f->sock_failed = 1;
            return -1;
        }
        if (uv_poll_init_socket(f->loop, &c->poll, s) != 0) {
            mem_free(c);
            f->sock_failed = 1;
            return -1;
        }
        c->f = f;
        c->fd = s;
        c->poll.data = c;
        c->next = f->socks;
        if (f->socks) {
            f->socks->prev = c;
        }
        f->socks = c;
        f->open_handles++;
        curl_multi_assign(f->multi, s, c);
    }
    if (action & CURL_POLL_IN) {
        events |= UV_READABLE;
    }
    if (action & CURL_POLL_OUT) {
        events |= UV_WRITABLE;
    }
    uv_poll_start(&c->poll, events, poll_cb);
    return 0;
}

void
fetch_timer_cb(uv_timer_t *t)
{
    struct fetch *f = t->data;
    int running;

    if (f->state != ST_RUNNING) {
        return;
    }
    if (f->cancelled) {
        struct err e;
        err_set(&e, ERR_CANCELLED, "the fetch of '%s' was cancelled", f->res->url);
        fetch_finish_transfer(f, FETCH_CANCELLED, &e);
        return;
    }
    multi_result(f, curl_multi_socket_action(f->multi, CURL_SOCKET_TIMEOUT, 0, &running));
}

int
fetch_timerfn_cb(CURLM *m, long timeout_ms, void *userp)
{
    struct fetch *f = userp;

    (void)m;
    if (f->cancelled) {
        timeout_ms = 0;
    }
    if (timeout_ms < 0) {
        uv_timer_stop(&f->timer);
    } else {
        uv_timer_start(&f->timer, fetch_timer_cb, (uint64_t)timeout_ms, 0);
    }
    return 0;
}

/* ---- curl callbacks -------------------------------------------------------------- */

curl_socket_t
fetch_open_cb(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct fetch *f = ud;
    char ip[INET6_ADDRSTRLEN] = "";
    int fd;

    (void)purpose;
    if (a->family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)&a->addr)->sin_addr, ip, sizeof(ip));
    } else if (a->family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)&a->addr)->sin6_addr, ip, sizeof(ip));
    } else {
        f->why = WHY_ADDR;
        err_set(&f->why_err, ERR_DENIED, "address family %d is not IPv4 or IPv6", a->family);
        return CURL_SOCKET_BAD;
    }
    if (fetch_addr_allowed(&f->pol, ip, &f->why_err) != 0) {
        f->why = WHY_ADDR;
        return CURL_SOCKET_BAD;
    }
    fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    return fd < 0 ? CURL_SOCKET_BAD : fd;
}

size_t
fetch_header_cb(char *p, size_t size, size_t n, void *ud)
{
    struct fetch *f = ud;
    size_t len = size * n;

    f->cur_hdr_bytes += len;
    if (f->cur_hdr_bytes > f->pol.max_header_bytes) {
        f->why = WHY_HEADERS;
        return 0;
    }
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        f->cur_encoded = 0; /* a new response (a redirect's, or an interim 1xx) */
    } else if (len > 17 && strncasecmp(p, "content-encoding:", 17) == 0) {
        size_t i = 17;
        while (i < len && (p[i] == ' ' || p[i] == '\t')) {
            i++;
        }
        f->cur_encoded = !(len - i >= 8 && strncasecmp(p + i, "identity", 8) == 0) && i < len &&
                         p[i] != '\r' && p[i] != '\n';
    }
    return len;
}

size_t
fetch_write_cb(char *p, size_t size, size_t n, void *ud)
{
    struct fetch *f = ud;
    size_t len = size * n;
    long code = 0;

    if (f->cancelled) {
        f->why = WHY_CANCEL;
        return 0;
    }
    if (len > f->cur_cap || f->cur_bytes > f->cur_cap - len) {
        f->why = WHY_BODY;
        return 0;
    }
    f->cur_bytes += len;
    curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 300 && code < 400) {
        return len; /* a redirect's body is counted, never kept */
    }
    if (f->cur_asset < 0 && f->sink != NULL) {
        char *ct = NULL;
        int rc = f->sink(f->sink_ud, p, len, &f->why_err);

        if (rc == FETCH_SINK_PAUSE) {
            f->cur_bytes -= len; /* curl hands the same bytes again after fetch_resume */
            f->paused = 1;
            return CURL_WRITEFUNC_PAUSE;
        }
        if (rc != 0) {
            f->why = WHY_SINK;
            return 0;
        }
        /* An HTML page's text is needed for its assets: kept too, within the same cap. */
        curl_easy_getinfo(f->easy, CURLINFO_CONTENT_TYPE, &ct);
        if (f->collect_assets && ct != NULL && strcasestr(ct, "text/html") != NULL &&
            buf_append(&f->res->body, p, len) != 0) {
            f->why = WHY_NOMEM;
            return 0;
        }
    } else if (f->cur_asset >= 0 && f->asset_sink != NULL) {
        int rc = f->asset_sink(f->sink_ud, (size_t)f->cur_asset, p, len, &f->why_err);

        if (rc == FETCH_SINK_PAUSE) {
            f->cur_bytes -= len;
            f->paused = 1;
            return CURL_WRITEFUNC_PAUSE;
        }
        if (rc != 0) {
            f->why = WHY_SINK;
            return 0;
        }
    } else if (buf_append(f->cur_body, p, len) != 0) {
        f->why = WHY_NOMEM;
        return 0;
    }
    if (f->cur_asset < 0 && f->cb.on_progress != NULL) {
        f->cb.on_progress(f->cb.ud, f->cur_bytes);
    }
    return len;
}
