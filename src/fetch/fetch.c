/*
 * fetch.c - the transfer engine: libcurl's multi interface driven by a libuv loop.
 * The loop glue and curl's callbacks live in fetch_io.c.
 *
 * Design. One struct fetch per session_fetch call, with its own CURLM handle, so its
 * connection pool and DNS cache (with the operator's fetch_resolve pins) are never
 * shared with a fetch under another policy. curl tells us which sockets to watch
 * (CURLMOPT_SOCKETFUNCTION -> uv_poll) and when to wake it (CURLMOPT_TIMERFUNCTION ->
 * uv_timer); we call curl_multi_socket_action() from those callbacks, so a transfer
 * never blocks the loop and other calls carry on.
 *
 * A fetch is a chain of transfers, one at a time: the main request, each redirect hop
 * (followed here, never by curl: CURLOPT_FOLLOWLOCATION stays off so that every hop's
 * URL passes the scheme and allowlist checks again), then, for an HTML page, each
 * asset and its hops. Every transfer:
 *   - refuses any address the policy does not allow, in the open-socket callback, with
 *     the address curl is about to connect to (stops SSRF and DNS rebinding);
 *   - counts body bytes after decoding in the write callback and header bytes in the
 *     header callback, and aborts the moment a cap is passed (stops endless bodies,
 *     gzip bombs and endless headers from filling memory);
 *   - uses no proxy from the environment, no .netrc, no cookie engine and no protocol
 *     other than http and https (so the daemon's own settings cannot leak or be used);
 *   - carries operator credential headers only to their domain (exact or *.x), never after a
 *     hop that leaves it or drops from https to http.
 *
 * Invariants: the result is handed to on_done exactly once; after that the struct
 * stays allocated only until libuv has closed its handles (freed in the close
 * callbacks, as libuv requires). No callback of curl's calls back into curl.
 */
#include "fetch/fetch_int.h"

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void
global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- results --------------------------------------------------------------------- */

void
fetch_result_free(struct fetch_result *r)
{
    if (r == NULL) {
        return;
    }
    mem_free(r->content_type);
    mem_free(r->url);
    mem_free(r->final_url);
    buf_release(&r->body);
    for (size_t i = 0; i < r->n_hops; i++) {
        mem_free(r->hops[i].url);
    }
    mem_free(r->hops);
    for (size_t i = 0; i < r->n_assets; i++) {
        mem_free(r->assets[i].url);
        mem_free(r->assets[i].content_type);
        buf_release(&r->assets[i].body);
    }
    mem_free(r->assets);
    mem_free(r);
}

static int
outcome_err_code(int outcome)
{
    switch (outcome) {
    case FETCH_OK:
    case FETCH_REDIRECT:
        return ERR_OK;
    case FETCH_DENIED:
        return ERR_DENIED;
    case FETCH_DNS:
        return ERR_NOTFOUND;
    case FETCH_TIMEOUT:
        return ERR_TIMEOUT;
    case FETCH_TOOBIG:
        return ERR_TOOBIG;
    case FETCH_CANCELLED:
        return ERR_CANCELLED;
    case FETCH_INVAL:
        return ERR_INVAL;
    case FETCH_NOMEM:
        return ERR_NOMEM;
    case FETCH_CONNECT:
    case FETCH_TLS:
    case FETCH_HTTP:
    case FETCH_OUTCOME_COUNT:
    default:
        return ERR_IO;
    }
}

int
fetch_result_err(const struct fetch_result *r, struct err *err)
{
    if (r->outcome == FETCH_OK) {
        return 0;
    }
    *err = r->err;
    return -1;
}

/* ---- transfers ------------------------------------------------------------------- */

static struct fetch_hop *
cur_hop(struct fetch *f)
{
    return &f->res->hops[f->res->n_hops - 1];
}

static int
add_header(struct fetch *f, const char *name, const char *value, struct err *err)
{
    struct buf b;
    struct curl_slist *l;

    buf_init(&b, 16384);
    if (value[0] == 0) {
        buf_printf(&b, "%s;", name); /* curl's way to send an empty header */
    } else {
        buf_printf(&b, "%s: %s", name, value);
    }
    if (buf_failed(&b)) {
        buf_release(&b);
        return err_set(err, ERR_NOMEM, "out of memory building header '%s'", name);
    }
    l = curl_slist_append(f->hdrs, buf_cstr(&b));
    explicit_bzero(b.data, b.len); /* it may hold a credential */
    buf_release(&b);
    if (l == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory building header '%s'", name);
    }
    f->hdrs = l;
    return 0;
}

static int
cred_applies(struct fetch *f, size_t k)
{
    const struct fetch_credential *c = &f->pol.credentials[k];

    if (!f->creds_ok || f->cred_left == NULL || f->cred_left[k] || c->domain == NULL ||
        strcmp(c->domain, "*") == 0) {
        return 0;
    }
    return fetch_host_matches(c->domain, f->cur_host);
}

/* Marks the credentials whose domain the current hop's host leaves. */
static void
cred_track(struct fetch *f)
{
    for (size_t k = 0; f->cred_left != NULL && k < f->pol.n_credentials; k++) {
        const struct fetch_credential *c = &f->pol.credentials[k];
        if (c->domain == NULL || !fetch_host_matches(c->domain, f->cur_host)) {
            f->cred_left[k] = 1;
        }
    }
}

static int
build_headers(struct fetch *f, int *credentialed, struct err *err)
{
    int same_host = f->first_host != NULL && strcmp(f->first_host, f->cur_host) == 0;

    *credentialed = 0;
    cred_track(f);
    if (f->cur_asset < 0) {
        for (size_t i = 0; i < f->n_headers; i++) {
            const struct fetch_header *h = &f->headers[i];
            int drop = 0;
            /* The agent cannot replace a credential header with its own value. */
            for (size_t k = 0; k < f->pol.n_credentials; k++) {
                const struct fetch_credential *c = &f->pol.credentials[k];
                if (c->header && strcasecmp(c->header, h->name) == 0 && cred_applies(f, k)) {
                    drop = 1;
                }
            }
            /* As curl does for its own redirects: the agent's authorization and
             * cookies stay with the host they were written for. */
            if (!same_host &&
                (strcasecmp(h->name, "authorization") == 0 || strcasecmp(h->name, "cookie") == 0 ||
                 strcasecmp(h->name, "proxy-authorization") == 0)) {
                drop = 1;
            }
            if (!drop && add_header(f, h->name, h->value, err) != 0) {
                return -1;
            }
        }
    }
    for (size_t k = 0; k < f->pol.n_credentials; k++) {
        const struct fetch_credential *c = &f->pol.credentials[k];
        if (c->header && c->value && cred_applies(f, k)) {
            if (add_header(f, c->header, c->value, err) != 0) {
                return -1;
            }
            *credentialed = 1;
        }
    }
    return 0;
}

static void
end_easy(struct fetch *f)
{
    if (f->easy != NULL) {
        curl_multi_remove_handle(f->multi, f->easy);
        curl_easy_cleanup(f->easy);
        f->easy = NULL;
    }
    f->paused = 0;
    curl_slist_free_all(f->hdrs);
    f->hdrs = NULL;
}

/*
 * Starts a transfer of f->cur_url (already checked) for the current request. Appends
 * its hop record. Returns 0, or -1 with err filled.
 */
static int
begin_transfer(struct fetch *f, struct err *err)
{
    struct fetch_result *r = f->res;
    struct fetch_hop *hops, *h;
    int cred = 0;
    CURL *e;

    hops = mem_realloc(r->hops, (r->n_hops + 1) * sizeof(*hops));
    if (hops == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory starting a fetch");
    }
    r->hops = hops;
    h = &hops[r->n_hops];
    memset(h, 0, sizeof(*h));
    h->asset = f->cur_asset;
    h->url = mem_strdup(f->cur_url);
    if (h->url == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory starting a fetch");
    }
    r->n_hops++;
    f->cur_bytes = 0;
    f->cur_hdr_bytes = 0;
    f->why = WHY_NONE;
    err_clear(&f->why_err);
    f->errbuf[0] = 0;
    if (f->cur_body != NULL) {
        buf_reset(f->cur_body);
    }
    if (build_headers(f, &cred, err) != 0) {
        return -1;
    }
    h->credentialed = cred;
    e = curl_easy_init();
    if (e == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory starting a fetch");
    }
    f->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, f->cur_url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, f);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, f->errbuf);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    /* The daemon's http_proxy/https_proxy/ALL_PROXY must not apply. */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)f->pol.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)f->pol.timeout_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, f->pol.low_speed_bytes);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, f->pol.low_speed_secs);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 128L * 1024);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "drun-fetch/1");
    if (f->resolve != NULL) {
        curl_easy_setopt(e, CURLOPT_RESOLVE, f->resolve);
    }
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, fetch_open_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, f);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, fetch_header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, fetch_write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
    if (f->hdrs != NULL) {
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, f->hdrs);
    }
    if (f->cur_asset < 0 && f->cur_send_body && f->body != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, f->body);
        if (strcmp(f->cur_method, "POST") != 0) {
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, f->cur_method);
        }
    } else if (strcmp(f->cur_method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (strcmp(f->cur_method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, f->cur_method);
    }
    if (curl_multi_add_handle(f->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        f->easy = NULL;
        return err_set(err, ERR_NOMEM, "cannot start the transfer of '%s'", f->cur_url);
    }
    return 0;
}

/* Sets the current request to url/host (taking ownership of both). */
static void
set_current(struct fetch *f, char *url, char *host)
{
    mem_free(f->cur_url);
    mem_free(f->cur_host);
    f->cur_url = url;
    f->cur_host = host;
}

/* Translates a finished transfer's failure into an outcome and message. */
static int
classify(struct fetch *f, CURLcode code, struct err *e)
{
    const char *why = f->errbuf[0] ? f->errbuf : curl_easy_strerror(code);
    const char *url = f->cur_url;

    switch (f->why) {
    case WHY_ADDR:
        if (code != CURLE_OK) {
            err_set(e, ERR_DENIED, "connection to '%s' refused: %s", f->cur_host, f->why_err.msg);
            return FETCH_DENIED;
        }
        break;
    case WHY_BODY:
        err_set(e, ERR_TOOBIG,
                "the response from '%s' passed its cap of %llu bytes; the "
                "operator can raise %s",
                url, (unsigned long long)f->cur_cap,
                f->cur_asset < 0 ? "fetch_max_bytes" : "the per-asset cap");
        return FETCH_TOOBIG;
    case WHY_HEADERS:
        err_set(e, ERR_TOOBIG, "the response headers from '%s' passed their cap of %zu bytes", url,
                f->pol.max_header_bytes);
        return FETCH_TOOBIG;
    case WHY_CANCEL:
        err_set(e, ERR_CANCELLED, "the fetch of '%s' was cancelled", url);
        return FETCH_CANCELLED;
    case WHY_SINK:
        err_set(e, ERR_IO, "saving the response from '%s' failed: %s", url, f->why_err.msg);
        return FETCH_HTTP;
    case WHY_NOMEM:
        err_set(e, ERR_NOMEM, "out of memory keeping the response from '%s'", url);
        return FETCH_NOMEM;
    case WHY_NONE:
    default:
        break;
    }
    if (code == CURLE_COULDNT_RESOLVE_HOST) {
        err_set(e, ERR_NOTFOUND, "cannot resolve host '%s': %s", f->cur_host, why);
        return FETCH_DNS;
    }
    if (code == CURLE_COULDNT_CONNECT) {
        err_set(e, ERR_IO, "cannot connect to '%s': %s", f->cur_host, why);
        return FETCH_CONNECT;
    }
    if (code == CURLE_OPERATION_TIMEDOUT) {
        err_set(e, ERR_TIMEOUT,
                "fetching '%s' timed out: %s (limits: connect_timeout_ms %lld, "
                "fetch_timeout_ms %lld)",
                url, why, (long long)f->pol.connect_timeout_ms, (long long)f->pol.timeout_ms);
        return FETCH_TIMEOUT;
    }
    if (code == CURLE_SSL_CONNECT_ERROR || code == CURLE_PEER_FAILED_VERIFICATION ||
        code == CURLE_SSL_CERTPROBLEM || code == CURLE_SSL_CIPHER ||
        code == CURLE_SSL_CACERT_BADFILE || code == CURLE_SSL_ISSUER_ERROR ||
        code == CURLE_SSL_PINNEDPUBKEYNOTMATCH || code == CURLE_SSL_INVALIDCERTSTATUS ||
        code == CURLE_SSL_CRL_BADFILE || code == CURLE_USE_SSL_FAILED ||
        code == CURLE_SSL_ENGINE_NOTFOUND || code == CURLE_SSL_ENGINE_SETFAILED ||
        code == CURLE_SSL_ENGINE_INITFAILED || code == CURLE_SSL_SHUTDOWN_FAILED) {
        err_set(e, ERR_IO, "tls with '%s' failed: %s", f->cur_host, why);
        return FETCH_TLS;
    }
    if (code == CURLE_UNSUPPORTED_PROTOCOL) {
        err_set(e, ERR_DENIED, "'%s' uses a protocol other than http or https", url);
        return FETCH_DENIED;
    }
    if (code == CURLE_OUT_OF_MEMORY) {
        err_set(e, ERR_NOMEM, "out of memory fetching '%s'", url);
        return FETCH_NOMEM;
    }
    err_set(e, ERR_IO, "fetching '%s' failed: %s", url, why);
    return FETCH_HTTP;
}

void
fetch_finish_transfer(struct fetch *f, int outcome, const struct err *e)
{
    struct fetch_result *r = f->res;
    struct fetch_callbacks cb = f->cb;

    if (f->state != ST_RUNNING) {
        return;
    }
    f->state = ST_CLOSING;
    r->outcome = outcome;
    if (e != NULL && outcome != FETCH_OK) {
        r->err = *e;
        r->err.code = outcome_err_code(outcome);
    }
    if (outcome != FETCH_OK) {
        /* A failed or cancelled fetch keeps nothing. */
        buf_release(&r->body);
        for (size_t i = 0; i < r->n_assets; i++) {
            buf_release(&r->assets[i].body);
        }
    }
    end_easy(f);
    curl_multi_cleanup(f->multi); /* may still report sockets as removed */
    f->multi = NULL;
    while (f->socks != NULL) {
        fetch_sock_unlink_close(f, f->socks);
    }
    uv_timer_stop(&f->timer);
    uv_close((uv_handle_t *)&f->timer, fetch_timer_closed);
    curl_slist_free_all(f->resolve);
    f->resolve = NULL;
    set_current(f, NULL, NULL);
    mem_free(f->first_host);
    f->first_host = NULL;
    fetch_strv_free(f->asset_urls, f->n_asset_urls);
    f->asset_urls = NULL;
    f->res = NULL;
    cb.on_done(cb.ud, r);
}

static void
fail_with(struct fetch *f, int outcome, const struct err *e)
{
    cur_hop(f)->outcome = outcome;
    snprintf(cur_hop(f)->detail, sizeof(cur_hop(f)->detail), "%s", e->msg);
    fetch_finish_transfer(f, outcome, e);
}

static void next_asset(struct fetch *f);

/* An asset ended: record it and go on with the next one. */
static void
asset_end(struct fetch *f, int state, const char *reason)
{
    struct fetch_asset *a = &f->res->assets[f->cur_asset];

    a->state = state;
    snprintf(a->reason, sizeof(a->reason), "%s", reason ? reason : "");
    if (state != FETCH_ASSET_FETCHED) {
        buf_release(&a->body);
    }
    end_easy(f);
    next_asset(f);
}

static int
start_request(struct fetch *f, const char *url, int asset, struct err *err)
{
    char *norm = NULL, *host = NULL;

    if (fetch_url_check(&f->pol, url, &norm, &host, err) != 0) {
        return -1;
    }
    set_current(f, norm, host);
    mem_free(f->first_host);
    f->first_host = mem_strdup(host);
    if (f->first_host == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory starting a fetch");
    }
    f->cur_asset = asset;
    f->redirects = 0;
    f->creds_ok = 1;
    if (f->cred_left != NULL) {
        memset(f->cred_left, 0, f->pol.n_credentials);
    }
    if (asset < 0) {
        snprintf(f->cur_method, sizeof(f->cur_method), "%s", f->method);
        f->cur_send_body = f->body != NULL;
        f->cur_cap = f->pol.max_bytes;
        f->cur_body = f->sink ? NULL : &f->res->body;
    } else {
        snprintf(f->cur_method, sizeof(f->cur_method), "GET");
        f->cur_send_body = 0;
        f->cur_cap = f->pol.max_asset_bytes;
        f->cur_body = &f->res->assets[asset].body;
    }
    return begin_transfer(f, err);
}

static void
next_asset(struct fetch *f)
{
    struct fetch_result *r = f->res;
    struct err e;

    while (f->state == ST_RUNNING && f->next_asset < r->n_assets) {
        size_t i = f->next_asset++;
        struct fetch_asset *a = &r->assets[i];
        char *norm = NULL, *host = NULL;

        f->cur_asset = (int)i;
        if (i >= f->pol.max_assets) {
            a->state = FETCH_ASSET_SKIPPED;
            snprintf(a->reason, sizeof(a->reason), "too_many_assets");
            continue;
        }
        if (fetch_url_check(&f->pol, a->url, &norm, &host, &e) != 0) {
            a->state = FETCH_ASSET_SKIPPED;
            snprintf(a->reason, sizeof(a->reason), "%s",
                     e.code == ERR_DENIED ? "domain_not_allowed" : e.msg);
            continue;
        }
        mem_free(norm);
        mem_free(host);
        if (start_request(f, a->url, (int)i, &e) != 0) {
            a->state = FETCH_ASSET_FAILED;
            snprintf(a->reason, sizeof(a->reason), "%s", e.msg);
            end_easy(f);
            if (e.code == ERR_NOMEM) {
                fetch_finish_transfer(f, FETCH_NOMEM, &e);
                return;
            }
            continue;
        }
        return; /* in flight; transfer_done continues */
    }
    if (f->state == ST_RUNNING) {
        fetch_finish_transfer(f, FETCH_OK, NULL);
    }
}

static int
is_redirect(long status)
{
    return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

/* Sets up the assets of the finished main response, then starts the first. */
static void
begin_assets(struct fetch *f)
{
    struct fetch_result *r = f->res;
    struct err e;
    char **urls = NULL;
    size_t n = 0;

    if (fetch_html_assets(buf_cstr(&r->body), r->body.len, r->final_url, &urls, &n, &e) != 0) {
        fetch_finish_transfer(f, FETCH_NOMEM, &e);
        return;
    }
    if (n > 0) {
        r->assets = mem_calloc(n, sizeof(*r->assets));
        if (r->assets == NULL) {
            fetch_strv_free(urls, n);
            err_set(&e, ERR_NOMEM, "out of memory collecting assets");
            fetch_finish_transfer(f, FETCH_NOMEM, &e);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            r->assets[i].url = urls[i];
            r->assets[i].content_type = NULL;
            buf_init(&r->assets[i].body, (size_t)f->pol.max_asset_bytes);
        }
        mem_free(urls);
        r->n_assets = n;
    } else {
        mem_free(urls);
    }
    f->next_asset = 0;
    next_asset(f);
}

static void
transfer_done(struct fetch *f, CURLcode code)
{
    struct fetch_result *r = f->res;
    struct fetch_hop *h = cur_hop(f);
    long status = 0;
    char *ip = NULL, *ct = NULL, *loc = NULL;
    struct err e;
    int outcome;

    curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(f->easy, CURLINFO_PRIMARY_IP, &ip);
    h->status = status;
    h->bytes = f->cur_bytes;
    snprintf(h->ip, sizeof(h->ip), "%s", ip ? ip : "");

    if (f->cancelled) {
        err_set(&e, ERR_CANCELLED, "the fetch of '%s' was cancelled", r->url);
        fail_with(f, FETCH_CANCELLED, &e);
        return;
    }
    if (code != CURLE_OK || f->why == WHY_BODY || f->why == WHY_HEADERS) {
        outcome = classify(f, code, &e);
        if (outcome == FETCH_OK) {
            outcome = FETCH_HTTP;
        }
        if (f->redirects > 0 && outcome == FETCH_DENIED) {
            err_wrap(&e, "redirect hop %d to '%s' refused", f->redirects, f->cur_url);
        }
        if (f->cur_asset >= 0 && outcome != FETCH_NOMEM) {
            h->outcome = outcome;
            snprintf(h->detail, sizeof(h->detail), "%s", e.msg);
            asset_end(f, FETCH_ASSET_FAILED, e.msg);
            return;
        }
        fail_with(f, outcome, &e);
        return;
    }
    curl_easy_getinfo(f->easy, CURLINFO_REDIRECT_URL, &loc);
    if (is_redirect(status) && loc != NULL && loc[0] != 0) {
        char *norm = NULL, *host = NULL;
        int was_https = strncasecmp(f->cur_url, "https:", 6) == 0;

        h->outcome = FETCH_REDIRECT;
        if (f->redirects >= FETCH_MAX_REDIRECTS) {
            err_set(&e, ERR_DENIED,
                    "'%s' redirected more than %d times; fetch the final URL "
                    "directly",
                    r->url, FETCH_MAX_REDIRECTS);
        } else if (fetch_url_check(&f->pol, loc, &norm, &host, &e) != 0) {
            err_wrap(&e, "redirect hop %d to '%s' refused", f->redirects + 1, loc);
            e.code = ERR_DENIED;
        } else {
            f->redirects++;
            if (was_https && strncasecmp(norm, "http:", 5) == 0) {
                f->creds_ok = 0; /* never send a credential in clear text */
            }
            /* Browsers' and curl's rule: 303 always becomes GET; 301 and 302 turn a
             * POST into a GET; 307 and 308 keep the method and body. */
            if ((status == 303 && strcmp(f->cur_method, "HEAD") != 0) ||
                ((status == 301 || status == 302) && strcmp(f->cur_method, "POST") == 0)) {
                snprintf(f->cur_method, sizeof(f->cur_method), "GET");
                f->cur_send_body = 0;
            }
            end_easy(f);
            set_current(f, norm, host);
            if (begin_transfer(f, &e) != 0) {
                fetch_finish_transfer(f, FETCH_NOMEM, &e);
            }
            return;
        }
        /* a refused hop: the record of the hop that redirected says why */
        h->outcome = FETCH_DENIED;
        snprintf(h->detail, sizeof(h->detail), "%s", e.msg);
        if (f->cur_asset >= 0) {
            asset_end(f, FETCH_ASSET_FAILED, e.msg);
            return;
        }
        end_easy(f);
        fetch_finish_transfer(f, FETCH_DENIED, &e);
        return;
    }
    h->outcome = FETCH_OK;
    curl_easy_getinfo(f->easy, CURLINFO_CONTENT_TYPE, &ct);
    if (f->cur_asset >= 0) {
        struct fetch_asset *a = &r->assets[f->cur_asset];
        char reason[32];
        a->status = status;
        a->bytes = f->cur_bytes;
        a->content_type = mem_strdup(ct ? ct : "");
        if (a->content_type == NULL) {
            err_set(&e, ERR_NOMEM, "out of memory");
            fetch_finish_transfer(f, FETCH_NOMEM, &e);
            return;
        }
        if (status >= 200 && status < 300) {
            asset_end(f, FETCH_ASSET_FETCHED, NULL);
        } else {
            snprintf(reason, sizeof(reason), "http_%ld", status);
            asset_end(f, FETCH_ASSET_FAILED, reason);
        }
        return;
    }
    r->status = status;
    r->bytes = f->cur_bytes;
    r->content_type = mem_strdup(ct ? ct : "");
    r->final_url = mem_strdup(f->cur_url);
    if (r->content_type == NULL || r->final_url == NULL) {
        err_set(&e, ERR_NOMEM, "out of memory");
        fetch_finish_transfer(f, FETCH_NOMEM, &e);
        return;
    }
    end_easy(f);
    if (f->collect_assets && strcasestr(r->content_type, "text/html")) {
        begin_assets(f);
        return;
    }
    fetch_finish_transfer(f, FETCH_OK, NULL);
}

void
fetch_check_multi(struct fetch *f)
{
    CURLMsg *m;
    int left;

    while (f->state == ST_RUNNING && (m = curl_multi_info_read(f->multi, &left)) != NULL) {
        if (m->msg == CURLMSG_DONE && m->easy_handle == f->easy) {
            transfer_done(f, m->data.result);
        }
    }
}

/* ---- public ---------------------------------------------------------------------- */

static void
fill_defaults(struct fetch_policy *p)
{
    if (p->timeout_ms <= 0) {
        p->timeout_ms = FETCH_DEFAULT_TIMEOUT_MS;
    }
    if (p->connect_timeout_ms <= 0) {
        p->connect_timeout_ms = FETCH_DEFAULT_CONNECT_TIMEOUT_MS;
    }
    if (p->max_bytes == 0) {
        p->max_bytes = FETCH_DEFAULT_MAX_BYTES;
    }
    if (p->max_header_bytes == 0) {
        p->max_header_bytes = FETCH_DEFAULT_MAX_HEADER_BYTES;
    }
    if (p->max_assets == 0) {
        p->max_assets = FETCH_DEFAULT_MAX_ASSETS;
    }
    if (p->max_asset_bytes == 0) {
        p->max_asset_bytes = FETCH_DEFAULT_MAX_ASSET_BYTES;
    }
    if (p->low_speed_bytes <= 0 || p->low_speed_secs <= 0) {
        p->low_speed_bytes = FETCH_DEFAULT_LOW_SPEED_BYTES;
        p->low_speed_secs = FETCH_DEFAULT_LOW_SPEED_SECS;
    }
}

struct fetch *
fetch_start(void *loop, const struct fetch_policy *policy, const struct fetch_request *req,
            const struct fetch_callbacks *cb, struct err *err)
{
    struct fetch *f = NULL;
    struct fetch_result *r = NULL;
    char method[40];

    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        err_set(err, ERR_INTERNAL, "libcurl failed to initialize: %s",
                curl_easy_strerror(global_rc));
        return NULL;
    }
    if (cb == NULL || cb->on_done == NULL) {
        err_set(err, ERR_INVAL, "fetch_start needs an on_done callback");
        return NULL;
    }
    if (fetch_method_check(req->method, method, sizeof(method), err) != 0) {
        return NULL;
    }
    if (req->n_headers > FETCH_MAX_AGENT_HEADERS) {
        err_set(err, ERR_INVAL, "%zu headers given; at most %d are allowed", req->n_headers,
                FETCH_MAX_AGENT_HEADERS);
        return NULL;
    }
    for (size_t i = 0; i < req->n_headers; i++) {
        if (fetch_header_check(&req->headers[i], err) != 0) {
            return NULL;
        }
    }
    for (size_t i = 0; i < policy->n_allow_cidrs; i++) {
        if (fetch_cidr_check(policy->allow_cidrs[i], err) != 0) {
            return NULL;
        }
    }
    for (size_t i = 0; i < policy->n_resolve; i++) {
        if (fetch_resolve_check(policy->resolve[i], err) != 0) {
            return NULL;
        }
    }
    for (size_t i = 0; i < policy->n_credentials; i++) {
        const struct fetch_credential *c = &policy->credentials[i];
        struct fetch_header h = {c->header, c->value};
        /* the message names the header, never the value */
        if (c->domain == NULL || c->domain[0] == 0 || fetch_header_check(&h, err) != 0) {
            if (c->domain == NULL || c->domain[0] == 0) {
                err_set(err, ERR_INVAL, "a fetch_credentials entry has no domain");
            }
            err_wrap(err, "fetch_credentials entry %zu", i + 1);
            return NULL;
        }
        if (strcmp(c->domain, "*") == 0) {
            err_set(err, ERR_INVAL,
                    "fetch_credentials entry %zu: domain '*' would send the credential to "
                    "every host; name its host or '*.domain'",
                    i + 1);
            return NULL;
        }
    }
    f = mem_calloc(1, sizeof(*f));
    r = mem_calloc(1, sizeof(*r));
    if (f != NULL) {
        f->cred_left = mem_calloc(policy->n_credentials + 1, 1);
    }
    if (f == NULL || r == NULL || f->cred_left == NULL) {
        if (f != NULL) {
            mem_free(f->cred_left);
        }
        mem_free(f);
        mem_free(r);
        err_set(err, ERR_NOMEM, "out of memory starting a fetch");
        return NULL;
    }
    f->loop = loop;
    f->pol = *policy;
    fill_defaults(&f->pol);
    f->cb = *cb;
    snprintf(f->method, sizeof(f->method), "%s", method);
    f->headers = req->headers;
    f->n_headers = req->n_headers;
    f->body = req->body;
    f->body_len = req->body_len;
    f->collect_assets = req->collect_assets;
    f->sink = req->sink;
    f->sink_ud = req->sink_ud;
    f->asset_sink = req->asset_sink;
    f->res = r;
    buf_init(&r->body, (size_t)f->pol.max_bytes);
    for (size_t i = 0; i < f->pol.n_resolve; i++) {
        struct curl_slist *l = curl_slist_append(f->resolve, f->pol.resolve[i]);
        if (l == NULL) {
            err_set(err, ERR_NOMEM, "out of memory starting a fetch");
            goto fail;
        }
        f->resolve = l;
    }
    if (fetch_url_check(&f->pol, req->url, &r->url, &f->cur_host, err) != 0) {
        goto fail;
    }
    mem_free(f->cur_host);
    f->cur_host = NULL;
    f->multi = curl_multi_init();
    if (f->multi == NULL) {
        err_set(err, ERR_NOMEM, "out of memory starting a fetch");
        goto fail;
    }
    curl_multi_setopt(f->multi, CURLMOPT_SOCKETFUNCTION, fetch_sock_cb);
    curl_multi_setopt(f->multi, CURLMOPT_SOCKETDATA, f);
    curl_multi_setopt(f->multi, CURLMOPT_TIMERFUNCTION, fetch_timerfn_cb);
    curl_multi_setopt(f->multi, CURLMOPT_TIMERDATA, f);
    uv_timer_init(f->loop, &f->timer);
    f->timer.data = f;
    f->open_handles = 1;
    if (start_request(f, r->url, -1, err) != 0) {
        /* nothing ran yet: close down without calling on_done */
        f->cb.on_done = NULL;
        end_easy(f);
        curl_multi_cleanup(f->multi);
        f->multi = NULL;
        while (f->socks != NULL) {
            fetch_sock_unlink_close(f, f->socks);
        }
        f->state = ST_CLOSING;
        uv_close((uv_handle_t *)&f->timer, fetch_timer_closed);
        curl_slist_free_all(f->resolve);
        set_current(f, NULL, NULL);
        mem_free(f->first_host);
        fetch_result_free(r);
        return NULL;
    }
    return f;
fail:
    curl_slist_free_all(f->resolve);
    mem_free(f->cur_host);
    mem_free(f->cred_left);
    fetch_result_free(r);
    mem_free(f);
    return NULL;
}

int
fetch_may_pause(const struct fetch *f)
{
    return f != NULL && !f->cur_encoded;
}

void
fetch_resume(struct fetch *f)
{
    if (f == NULL || f->state != ST_RUNNING || !f->paused || f->easy == NULL) {
        return;
    }
    f->paused = 0;
    /* May call write_cb at once with the bytes curl kept (which may pause again); the
     * rest of the transfer goes on from the timer curl arms. */
    curl_easy_pause(f->easy, CURLPAUSE_CONT);
}

struct fetch_waker {
    uv_async_t async;
    void (*fn)(void *ud);
    void *ud;
};

static void
waker_cb(uv_async_t *h)
{
    struct fetch_waker *w = h->data;

    if (w->fn != NULL) {
        w->fn(w->ud);
    }
}

static void
waker_closed(uv_handle_t *h)
{
    mem_free(h->data);
}

struct fetch_waker *
fetch_waker_new(void *loop, void (*fn)(void *ud), void *ud, struct err *err)
{
    struct fetch_waker *w = mem_calloc(1, sizeof(*w));

    if (w == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (uv_async_init(loop, &w->async, waker_cb) != 0) {
        mem_free(w);
        err_set(err, ERR_INTERNAL, "cannot make an async handle for the fetch");
        return NULL;
    }
    w->async.data = w;
    w->fn = fn;
    w->ud = ud;
    return w;
}

void
fetch_waker_send(struct fetch_waker *w)
{
    uv_async_send(&w->async);
}

void
fetch_waker_close(struct fetch_waker *w)
{
    if (w != NULL) {
        w->fn = NULL;
        uv_close((uv_handle_t *)&w->async, waker_closed);
    }
}

void
fetch_cancel(struct fetch *f)
{
    if (f == NULL || f->state != ST_RUNNING) {
        return;
    }
    f->cancelled = 1;
    /* Finish from the loop, never from inside the caller (who may be in a callback). */
    uv_timer_start(&f->timer, fetch_timer_cb, 0, 0);
}

struct run_ctx {
    struct fetch_result *res;
};

static void
run_done(void *ud, struct fetch_result *r)
{
    ((struct run_ctx *)ud)->res = r;
}

int
fetch_run(const struct fetch_policy *policy, const struct fetch_request *req,
          struct fetch_result **out, struct err *err)
{
    uv_loop_t loop;
    struct run_ctx ctx = {NULL};
    struct fetch_callbacks cb = {NULL, run_done, &ctx};
    struct fetch *f;
    int rc;

    *out = NULL;
    rc = uv_loop_init(&loop);
    if (rc != 0) {
        return err_set(err, ERR_IO, "cannot make an event loop: %s", uv_strerror(rc));
    }
    f = fetch_start(&loop, policy, req, &cb, err);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (f == NULL) {
        return -1;
    }
    *out = ctx.res;
    return 0;
}
