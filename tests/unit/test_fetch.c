/*
 * test_fetch.c - the fetch engine against loopback servers (tests/support/httpd.py):
 * requests and headers, every-hop checks, connect-time address checks, caps while
 * streaming, credentials, assets, cancellation and parallel fetches on one loop.
 */
#include "test.h"

#include <uv.h>

#include "fetch/fetch.h"
#include "fetch_server.h"
#include "util/mem.h"

static struct fetch_server srv;
static char url_buf[4096];

static void
start_server(void)
{
    if (access("/usr/bin/python3", X_OK) != 0 && access("/usr/local/bin/python3", X_OK) != 0) {
        SKIP("python3 is not installed; the fetch tests need it for their server");
    }
    if (fetch_server_start(&srv, "127.0.0.1") != 0) {
        test_fail(__FILE__, __LINE__, "cannot start the test server");
    }
}

/* Returns http://127.0.0.1:PORT<path> in a static buffer. */
static const char *
U(const char *path)
{
    snprintf(url_buf, sizeof(url_buf), "http://127.0.0.1:%d%s", srv.port, path);
    return url_buf;
}

static const char *local_list[] = {"127.0.0.1"};

/* A policy for loopback tests: 127.0.0.1 on the list, private addresses allowed. */
static struct fetch_policy
local_policy(void)
{
    struct fetch_policy p;
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = local_list;
    p.n_domain_allowlist = 1;
    p.allow_private = 1;
    /* Generous: a loaded machine must not turn a local fetch into a timeout. */
    p.timeout_ms = 120000;
    p.connect_timeout_ms = 60000;
    return p;
}

static struct fetch_result *
run(const struct fetch_policy *p, const char *url)
{
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;

    memset(&req, 0, sizeof(req));
    req.url = url;
    CHECK_OK(fetch_run(p, &req, &r, &err), &err);
    CHECK(r != NULL);
    return r;
}

static int
contains(const struct buf *b, const char *s)
{
    return memmem(b->data ? b->data : "", b->len, s, strlen(s)) != NULL;
}

TEST(get_with_headers)
{
    struct fetch_policy p;
    struct fetch_header h[] = {{"X-Test", "one two"}, {"X-Empty", ""}};
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;

    start_server();
    p = local_policy();
    memset(&req, 0, sizeof(req));
    req.url = U("/echo");
    req.headers = h;
    req.n_headers = 2;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(r->status, 200);
    CHECK(contains(&r->body, "method: GET\n"));
    CHECK(contains(&r->body, "X-Test: one two\n"));
    CHECK(contains(&r->body, "X-Empty: \n"));
    CHECK_EQ_STR(r->content_type, "text/plain");
    CHECK_EQ_INT(r->bytes, r->body.len);
    CHECK_EQ_INT(r->n_hops, 1);
    CHECK_EQ_STR(r->hops[0].ip, "127.0.0.1");
    CHECK_EQ_INT(r->hops[0].status, 200);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(post_with_body)
{
    struct fetch_policy p;
    struct fetch_header h[] = {{"Content-Type", "application/json"}};
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;
    static const char body[] = "{\"k\": \"v\"}";

    start_server();
    p = local_policy();
    memset(&req, 0, sizeof(req));
    req.url = U("/echo");
    req.method = "post";
    req.headers = h;
    req.n_headers = 1;
    req.body = body;
    req.body_len = sizeof(body) - 1;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK(contains(&r->body, "method: POST\n"));
    CHECK(contains(&r->body, "Content-Type: application/json\n"));
    CHECK(contains(&r->body, "\n\n{\"k\": \"v\"}"));
    fetch_result_free(r);

    req.method = "put";
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK(contains(&r->body, "method: PUT\n"));
    CHECK(contains(&r->body, "{\"k\": \"v\"}"));
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(bad_requests_refused_before_network)
{
    struct fetch_policy p = local_policy();
    struct fetch_header crlf[] = {{"X-A", "a\r\nX-Injected: 1"}};
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;

    memset(&req, 0, sizeof(req));
    req.url = "http://127.0.0.1:1/";
    req.headers = crlf;
    req.n_headers = 1;
    CHECK_EQ_INT(fetch_run(&p, &req, &r, &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(r == NULL);
    req.n_headers = 0;
    req.method = "G(ET";
    CHECK_EQ_INT(fetch_run(&p, &req, &r, &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);

    req.method = NULL;
    const char *refused[] = {"file:///etc/passwd", "gopher://127.0.0.1:70/", "dict://127.0.0.1/d",
                             "http://not-listed.example/"};
    for (size_t i = 0; i < 4; i++) {
        req.url = refused[i];
        CHECK_MSG(fetch_run(&p, &req, &r, &err) == -1, "'%s' was fetched", refused[i]);
        CHECK_EQ_INT(err.code, ERR_DENIED);
    }
    CHECK(strstr(err.msg, "add-domain not-listed.example") != NULL);

    struct fetch_credential bad_cred = {"a.test", "X-Key", "sec\r\nret-v"};
    p.credentials = &bad_cred;
    p.n_credentials = 1;
    req.url = "http://127.0.0.1:1/";
    CHECK_EQ_INT(fetch_run(&p, &req, &r, &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(strstr(err.msg, "fetch_credentials entry 1") != NULL);
    CHECK(strstr(err.msg, "ret-v") == NULL);
    p.n_credentials = 0;

    const char *bad_cidr[] = {"10.0.0.0/99"};
    p.allow_cidrs = bad_cidr;
    p.n_allow_cidrs = 1;
    req.url = "http://127.0.0.1:1/";
    CHECK_EQ_INT(fetch_run(&p, &req, &r, &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
}

TEST(redirects_followed_and_rechecked)
{
    struct fetch_policy p;
    struct fetch_result *r;
    char path[512];

    start_server();
    p = local_policy();
    r = run(&p, U("/redirect?to=/plain%3Fbody%3Dmoved-here"));
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(r->status, 200);
    CHECK(contains(&r->body, "moved-here"));
    CHECK_EQ_INT(r->n_hops, 2);
    CHECK_EQ_INT(r->hops[0].outcome, FETCH_REDIRECT);
    CHECK_EQ_INT(r->hops[0].status, 302);
    CHECK(strstr(r->final_url, "/plain?body=moved-here") != NULL);
    fetch_result_free(r);

    /* a hop to a host that is not on the list stops the fetch, naming the hop */
    r = run(&p, U("/redirect?to=http://evil.example/steal&code=301"));
    CHECK_EQ_INT(r->outcome, FETCH_DENIED);
    CHECK_EQ_INT(r->err.code, ERR_DENIED);
    CHECK(strstr(r->err.msg, "redirect hop 1") != NULL);
    CHECK(strstr(r->err.msg, "evil.example") != NULL);
    CHECK(strstr(r->err.msg, "add-domain evil.example") != NULL);
    CHECK_EQ_INT(r->body.len, 0);
    CHECK_EQ_INT(r->n_hops, 1);
    CHECK_EQ_INT(r->hops[0].status, 301);
    CHECK_EQ_INT(r->hops[0].outcome, FETCH_DENIED);
    CHECK(strstr(r->hops[0].detail, "evil.example") != NULL);
    fetch_result_free(r);

    /* a hop to another scheme */
    r = run(&p, U("/redirect?to=file:///etc/passwd"));
    CHECK_EQ_INT(r->outcome, FETCH_DENIED);
    CHECK(strstr(r->err.msg, "scheme 'file'") != NULL);
    fetch_result_free(r);

    /* at most 10 redirects */
    r = run(&p, U("/loop"));
    CHECK_EQ_INT(r->outcome, FETCH_DENIED);
    CHECK(strstr(r->err.msg, "more than 10") != NULL);
    CHECK_EQ_INT(r->n_hops, 11);
    fetch_result_free(r);

    /* 303 turns a POST into a GET */
    struct fetch_request req;
    struct err err;
    memset(&req, 0, sizeof(req));
    snprintf(path, sizeof(path), "/redirect?to=/echo&code=303");
    req.url = U(path);
    req.method = "POST";
    req.body = "x=1";
    req.body_len = 3;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK(contains(&r->body, "method: GET\n"));
    fetch_result_free(r);
    /* 307 keeps it */
    snprintf(path, sizeof(path), "/redirect?to=/echo&code=307");
    req.url = U(path);
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK(contains(&r->body, "method: POST\n"));
    CHECK(contains(&r->body, "x=1"));
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(redirect_to_loopback_denied_at_connect)
{
    struct fetch_server s2;
    char resolve[128], url[512];
    const char *list[] = {"a.test", "127.0.0.1"};
    const char *cidrs[] = {"127.0.0.2/32"};
    const char *res[] = {resolve};
    struct fetch_policy p;
    struct fetch_result *r;

    if (fetch_server_start(&s2, "127.0.0.2") != 0) {
        SKIP("cannot bind 127.0.0.2 here");
    }
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 2;
    p.allow_cidrs = cidrs;
    p.n_allow_cidrs = 1;
    snprintf(resolve, sizeof(resolve), "a.test:%d:127.0.0.2", s2.port);
    p.resolve = res;
    p.n_resolve = 1;

    /* the allowed host on an allowed address works */
    snprintf(url, sizeof(url), "http://a.test:%d/plain?body=fine", s2.port);
    r = run(&p, url);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK(contains(&r->body, "fine"));
    CHECK_EQ_STR(r->hops[0].ip, "127.0.0.2");
    fetch_result_free(r);

    /* its redirect to 127.0.0.1 passes the allowlist but not the address check */
    snprintf(url, sizeof(url), "http://a.test:%d/redirect?to=http://127.0.0.1:%d/plain", s2.port,
             s2.port);
    r = run(&p, url);
    CHECK_EQ_INT(r->outcome, FETCH_DENIED);
    CHECK_MSG(strstr(r->err.msg, "loopback") != NULL, "%s", r->err.msg);
    CHECK(strstr(r->err.msg, "redirect hop 1") != NULL);
    CHECK_EQ_INT(r->n_hops, 2);
    CHECK_EQ_INT(r->hops[1].outcome, FETCH_DENIED);
    CHECK_EQ_INT(r->hops[1].status, 0);
    fetch_result_free(r);
    fetch_server_stop(&s2);
}

TEST(pinned_name_refused_at_connect)
{
    char resolve[128], url[256];
    const char *list[] = {"pinned.test"};
    const char *res[] = {resolve};
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 1;
    snprintf(resolve, sizeof(resolve), "pinned.test:%d:127.0.0.1", srv.port);
    p.resolve = res;
    p.n_resolve = 1;
    snprintf(url, sizeof(url), "http://pinned.test:%d/plain?body=secret-inside", srv.port);
    r = run(&p, url);
    CHECK_EQ_INT(r->outcome, FETCH_DENIED);
    CHECK_EQ_INT(r->err.code, ERR_DENIED);
    CHECK(strstr(r->err.msg, "'127.0.0.1' is loopback") != NULL);
    CHECK(strstr(r->err.msg, "fetch_allow_cidrs") != NULL);
    CHECK_EQ_INT(r->body.len, 0);
    fetch_result_free(r);

    p.allow_private = 1; /* the control: allowed, the same fetch works */
    r = run(&p, url);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK(contains(&r->body, "secret-inside"));
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(body_cap_at_and_past_edge)
{
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    p = local_policy();
    p.max_bytes = 65536;
    r = run(&p, U("/big?size=65536"));
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(r->body.len, 65536);
    fetch_result_free(r);
    r = run(&p, U("/big?size=65537"));
    CHECK_EQ_INT(r->outcome, FETCH_TOOBIG);
    CHECK_EQ_INT(r->err.code, ERR_TOOBIG);
    CHECK(strstr(r->err.msg, "fetch_max_bytes") != NULL);
    CHECK_EQ_INT(r->body.len, 0);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(endless_body_stops_at_cap)
{
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    p = local_policy();
    p.max_bytes = 3 << 20;
    r = run(&p, U("/endless"));
    CHECK_EQ_INT(r->outcome, FETCH_TOOBIG);
    CHECK(r->hops[0].bytes <= (3u << 20));
    CHECK_EQ_INT(r->body.len, 0);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(gzip_bomb_stops_at_cap)
{
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    p = local_policy();
    p.max_bytes = 8 << 20;
    r = run(&p, U("/bomb"));
    CHECK_EQ_INT(r->outcome, FETCH_TOOBIG);
    CHECK(r->hops[0].bytes <= (8u << 20));
    CHECK(r->hops[0].bytes > (4u << 20)); /* it did decode up to the cap */
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(headers_forever_stop_at_cap)
{
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    p = local_policy();
    r = run(&p, U("/headers-forever"));
    CHECK_EQ_INT(r->outcome, FETCH_TOOBIG);
    CHECK(strstr(r->err.msg, "headers") != NULL);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(never_answering_times_out)
{
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    p = local_policy();
    p.timeout_ms = 300;
    r = run(&p, U("/never"));
    CHECK_EQ_INT(r->outcome, FETCH_TIMEOUT);
    CHECK_EQ_INT(r->err.code, ERR_TIMEOUT);
    CHECK(strstr(r->err.msg, "fetch_timeout_ms 300") != NULL);
    fetch_result_free(r);

    /* a trickle below the low-speed limit is a stall */
    p.timeout_ms = 20000;
    p.low_speed_bytes = 1 << 20;
    p.low_speed_secs = 1;
    r = run(&p, U("/slow?chunks=40&delay=100"));
    CHECK_EQ_INT(r->outcome, FETCH_TIMEOUT);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(connect_failure_and_http_status)
{
    struct fetch_policy p;
    struct fetch_result *r;

    start_server();
    p = local_policy();
    r = run(&p, "http://127.0.0.1:1/");
    CHECK_EQ_INT(r->outcome, FETCH_CONNECT);
    CHECK_EQ_INT(r->err.code, ERR_IO);
    CHECK(strstr(r->err.msg, "cannot connect") != NULL);
    fetch_result_free(r);

    r = run(&p, U("/status?code=404"));
    CHECK_EQ_INT(r->outcome, FETCH_OK); /* a 4xx is a result, not an error */
    CHECK_EQ_INT(r->status, 404);
    fetch_result_free(r);
    r = run(&p, U("/status?code=503"));
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(r->status, 503);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

static int
sink_count(void *ud, const void *data, size_t len, struct err *why)
{
    uint64_t *n = ud;
    (void)data;
    *n += len;
    if (*n > (5u << 20)) {
        return err_set(why, ERR_IO, "disk full (test)");
    }
    return 0;
}

TEST(sink_streams_body)
{
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;
    uint64_t n = 0;

    start_server();
    p = local_policy();
    p.max_bytes = 16 << 20;
    memset(&req, 0, sizeof(req));
    req.url = U("/big?size=4194304");
    req.sink = sink_count;
    req.sink_ud = &n;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(n, 4194304);
    CHECK_EQ_INT(r->bytes, 4194304);
    CHECK_EQ_INT(r->body.len, 0);
    fetch_result_free(r);

    n = 0;
    req.url = U("/big?size=8388608");
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_HTTP);
    CHECK(strstr(r->err.msg, "disk full (test)") != NULL);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

TEST(html_assets_fetched_skipped_failed)
{
    char path[2048], resolve[128];
    const char *list[] = {"127.0.0.1", "b.test"};
    const char *res[] = {resolve};
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct fetch_layout *l = NULL;
    struct err err;

    start_server();
    p = local_policy();
    p.domain_allowlist = list;
    p.n_domain_allowlist = 2;
    snprintf(resolve, sizeof(resolve), "b.test:%d:127.0.0.1", srv.port);
    p.resolve = res;
    p.n_resolve = 1;
    /* kinds cycle: stylesheet, icon, script, img, stylesheet, icon, script */
    snprintf(path, sizeof(path),
             "/html?assets=/plain%%3Fbody%%3Dcss,"       /* 0 link: fetched */
             "http://evil.test/fav.ico,"                 /* 1 link: skipped */
             "/redirect%%3Fto%%3Dhttp://evil.test/x.js," /* 2 script: failed (hop denied) */
             "http://b.test:%d/plain%%3Fbody%%3Dimg,"    /* 3 img: fetched on another host */
             "/status%%3Fcode%%3D404,"                   /* 4 link: failed http_404 */
             "/plain%%3Fbody%%3Dcss,"                    /* 5 duplicate of 0 */
             "data:text/plain;base64%%3DAA",             /* 6 script: ignored */
             srv.port);
    memset(&req, 0, sizeof(req));
    req.url = U(path);
    req.collect_assets = 1;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_MSG(r->outcome == FETCH_OK, "%s", r->err.msg);
    CHECK(strstr(r->content_type, "text/html") != NULL);
    CHECK_EQ_INT(r->n_assets, 5);
    /* order: links (0, 1, 4), scripts (2), imgs (3) */
    CHECK(strstr(r->assets[0].url, "/plain?body=css") != NULL);
    CHECK_EQ_INT(r->assets[0].state, FETCH_ASSET_FETCHED);
    CHECK_EQ_INT(r->assets[0].status, 200);
    CHECK(contains(&r->assets[0].body, "css"));
    CHECK_EQ_STR(r->assets[1].url, "http://evil.test/fav.ico");
    CHECK_EQ_INT(r->assets[1].state, FETCH_ASSET_SKIPPED);
    CHECK_EQ_STR(r->assets[1].reason, "domain_not_allowed");
    CHECK(strstr(r->assets[2].url, "/status?code=404") != NULL);
    CHECK_EQ_INT(r->assets[2].state, FETCH_ASSET_FAILED);
    CHECK_EQ_STR(r->assets[2].reason, "http_404");
    CHECK(strstr(r->assets[3].url, "/redirect?to=") != NULL);
    CHECK_EQ_INT(r->assets[3].state, FETCH_ASSET_FAILED);
    CHECK_MSG(strstr(r->assets[3].reason, "redirect hop 1") != NULL, "%s", r->assets[3].reason);
    CHECK(strstr(r->assets[4].url, "b.test") != NULL);
    CHECK_EQ_INT(r->assets[4].state, FETCH_ASSET_FETCHED);
    CHECK(contains(&r->assets[4].body, "img"));

    CHECK_OK(fetch_layout_make(r, &l, &err), &err);
    CHECK_EQ_STR(l->dir, "downloads/127.0.0.1/html");
    CHECK_EQ_STR(l->main_path, "downloads/127.0.0.1/html/html");
    CHECK_EQ_STR(l->asset_paths[0], "downloads/127.0.0.1/html/plain");
    CHECK_EQ_STR(l->asset_paths[4], "downloads/127.0.0.1/html/plain-2");
    CHECK(l->asset_paths[1] == NULL);
    CHECK(strstr(buf_cstr(&l->manifest), "\"fetched\": 2") != NULL);
    CHECK(strstr(buf_cstr(&l->manifest), "\"skipped\": 1") != NULL);
    CHECK(strstr(buf_cstr(&l->manifest), "\"failed\": 2") != NULL);
    fetch_layout_free(l);
    fetch_result_free(r);

    /* the asset count cap: past it, assets are skipped, never silently dropped */
    p.max_assets = 1;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->n_assets, 5);
    CHECK_EQ_INT(r->assets[0].state, FETCH_ASSET_FETCHED);
    for (size_t i = 1; i < 5; i++) {
        CHECK_EQ_INT(r->assets[i].state, FETCH_ASSET_SKIPPED);
    }
    CHECK_EQ_STR(r->assets[2].reason, "too_many_assets");
    fetch_result_free(r);

    /* the per-asset byte cap */
    p.max_assets = 0;
    p.max_asset_bytes = 2;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->assets[0].state, FETCH_ASSET_FAILED); /* "css": 3 bytes > 2 */
    CHECK_MSG(strstr(r->assets[0].reason, "per-asset cap") != NULL, "%s", r->assets[0].reason);
    CHECK_EQ_INT(r->assets[0].body.len, 0);
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

/* 1 if s contains the secret */
static int
leaks(const char *s)
{
    return s != NULL && strstr(s, "s3cret-v4lue") != NULL;
}

TEST(credentials_stay_with_their_host)
{
    char ra[128], rb[128], url[512];
    const char *list[] = {"a.test", "b.test"};
    const char *res[] = {ra, rb};
    struct fetch_credential cred = {"A.test.", "X-Api-Key", "s3cret-v4lue"};
    struct fetch_header agent[] = {{"x-api-key", "agent-own"}, {"X-Other", "kept"}};
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;

    start_server();
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 2;
    p.allow_private = 1;
    snprintf(ra, sizeof(ra), "a.test:%d:127.0.0.1", srv.port);
    snprintf(rb, sizeof(rb), "b.test:%d:127.0.0.1", srv.port);
    p.resolve = res;
    p.n_resolve = 2;
    p.credentials = &cred;
    p.n_credentials = 1;
    memset(&req, 0, sizeof(req));
    req.headers = agent;
    req.n_headers = 2;

    /* on its host: present once, the agent's own value dropped */
    snprintf(url, sizeof(url), "http://a.test:%d/echo", srv.port);
    req.url = url;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK(contains(&r->body, "X-Api-Key: s3cret-v4lue\n"));
    CHECK(!contains(&r->body, "agent-own"));
    CHECK(contains(&r->body, "X-Other: kept"));
    CHECK_EQ_INT(r->hops[0].credentialed, 1);
    fetch_result_free(r);

    /* after a redirect off the host: absent; the agent's header goes along */
    snprintf(url, sizeof(url), "http://a.test:%d/redirect?to=http://b.test:%d/echo", srv.port,
             srv.port);
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(r->n_hops, 2);
    CHECK_EQ_INT(r->hops[0].credentialed, 1);
    CHECK_EQ_INT(r->hops[1].credentialed, 0);
    CHECK(!contains(&r->body, "s3cret-v4lue"));
    CHECK(contains(&r->body, "agent-own"));
    CHECK(strstr((char *)r->body.data, "b.test") != NULL);
    /* nothing returned holds the value */
    CHECK(!leaks(r->url) && !leaks(r->final_url) && !leaks(r->content_type) && !leaks(r->err.msg));
    for (size_t i = 0; i < r->n_hops; i++) {
        CHECK(!leaks(r->hops[i].url) && !leaks(r->hops[i].detail));
    }
    fetch_result_free(r);

    /* a denied hop's error message does not hold it either */
    snprintf(url, sizeof(url), "http://a.test:%d/redirect?to=http://c.test/", srv.port);
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_DENIED);
    CHECK(!leaks(r->err.msg));
    for (size_t i = 0; i < r->n_hops; i++) {
        CHECK(!leaks(r->hops[i].url) && !leaks(r->hops[i].detail));
    }
    fetch_result_free(r);
    fetch_server_stop(&srv);
}

struct cancel_ctx {
    struct fetch *f;
    int cancelled;
    int done;
    struct fetch_result *r;
};

static void
cancel_progress(void *ud, uint64_t bytes)
{
    struct cancel_ctx *c = ud;
    if (bytes > (1u << 20) && !c->cancelled) {
        c->cancelled = 1;
        fetch_cancel(c->f);
    }
}

static void
cancel_done(void *ud, struct fetch_result *r)
{
    struct cancel_ctx *c = ud;
    c->done++;
    c->r = r;
}

TEST(cancel_mid_download)
{
    uv_loop_t loop;
    struct fetch_policy p;
    struct fetch_request req;
    struct cancel_ctx c = {0};
    struct fetch_callbacks cb = {cancel_progress, cancel_done, &c};
    struct err err;

    start_server();
    p = local_policy();
    p.max_bytes = (uint64_t)1 << 30;
    memset(&req, 0, sizeof(req));
    req.url = U("/endless");
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    c.f = fetch_start(&loop, &p, &req, &cb, &err);
    CHECK_MSG(c.f != NULL, "%s", err.msg);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0); /* every handle was closed */
    CHECK_EQ_INT(c.done, 1);
    CHECK(c.cancelled);
    CHECK_EQ_INT(c.r->outcome, FETCH_CANCELLED);
    CHECK_EQ_INT(c.r->err.code, ERR_CANCELLED);
    CHECK_EQ_INT(c.r->body.len, 0);
    CHECK(c.r->body.data == NULL); /* nothing kept */
    fetch_result_free(c.r);
    fetch_server_stop(&srv);
}

static void
cancel_now_timer(uv_timer_t *t)
{
    struct cancel_ctx *c = t->data;
    fetch_cancel(c->f);
    uv_close((uv_handle_t *)t, NULL);
}

TEST(cancel_while_waiting)
{
    uv_loop_t loop;
    uv_timer_t t;
    struct fetch_policy p;
    struct fetch_request req;
    struct cancel_ctx c = {0};
    struct fetch_callbacks cb = {NULL, cancel_done, &c};
    struct err err;

    start_server();
    p = local_policy();
    memset(&req, 0, sizeof(req));
    req.url = U("/never");
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    c.f = fetch_start(&loop, &p, &req, &cb, &err);
    CHECK(c.f != NULL);
    uv_timer_init(&loop, &t);
    t.data = &c;
    uv_timer_start(&t, cancel_now_timer, 50, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    CHECK_EQ_INT(c.done, 1);
    CHECK_EQ_INT(c.r->outcome, FETCH_CANCELLED);
    fetch_result_free(c.r);
    fetch_server_stop(&srv);
}

struct par_ctx {
    int done;
    int ok;
    int ticks_at_done[10];
    int ticks;
    int idx[10];
    struct fetch_result *r[10];
};

struct par_one {
    struct par_ctx *ctx;
    int i;
};

static void
par_done(void *ud, struct fetch_result *r)
{
    struct par_one *o = ud;
    o->ctx->r[o->i] = r;
    o->ctx->ticks_at_done[o->i] = o->ctx->ticks;
    o->ctx->done++;
}

static void
tick(uv_timer_t *t)
{
    struct par_ctx *c = t->data;
    c->ticks++;
    if (c->done == 10) {
        uv_close((uv_handle_t *)t, NULL);
    }
}

TEST(ten_in_parallel_on_one_loop)
{
    uv_loop_t loop;
    uv_timer_t t;
    struct fetch_policy p;
    struct fetch_request req[10];
    struct par_ctx c;
    struct par_one one[10];
    struct fetch_callbacks cb[10];
    char urls[10][256];
    struct err err;

    start_server();
    p = local_policy();
    memset(&c, 0, sizeof(c));
    CHECK_EQ_INT(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &t);
    t.data = &c;
    uv_timer_start(&t, tick, 10, 10);
    for (int i = 0; i < 10; i++) {
        /* each takes about 0.3 s; serialized they would take 3 s */
        snprintf(urls[i], sizeof(urls[i]), "http://127.0.0.1:%d/slow?chunks=%d&delay=100", srv.port,
                 3 + i % 2);
        memset(&req[i], 0, sizeof(req[i]));
        req[i].url = urls[i];
        one[i].ctx = &c;
        one[i].i = i;
        cb[i].on_progress = NULL;
        cb[i].on_done = par_done;
        cb[i].ud = &one[i];
        CHECK_MSG(fetch_start(&loop, &p, &req[i], &cb[i], &err) != NULL, "%s", err.msg);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    CHECK_EQ_INT(c.done, 10);
    for (int i = 0; i < 10; i++) {
        CHECK_MSG(c.r[i]->outcome == FETCH_OK, "fetch %d: %s", i, c.r[i]->err.msg);
        CHECK_EQ_INT(c.r[i]->body.len, (3 + i % 2) * 1024);
        /* the loop kept turning while fetches were in flight */
        CHECK(c.ticks_at_done[i] > 0);
        fetch_result_free(c.r[i]);
    }
    fetch_server_stop(&srv);
}

TEST(allocation_failures_are_clean)
{
    struct fetch_policy p;
    struct fetch_header h[] = {{"X-A", "b"}};
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;
    int saw_ok = 0, saw_fail = 0;

    start_server();
    p = local_policy();
    memset(&req, 0, sizeof(req));
    req.url = U("/html?assets=/plain,/plain%3Fbody%3Dx");
    req.headers = h;
    req.n_headers = 1;
    req.collect_assets = 1;
    for (long k = 0; k < 80; k++) {
        mem_fail_after(k);
        int rc = fetch_run(&p, &req, &r, &err);
        mem_fail_after(-1);
        if (rc != 0) {
            CHECK_MSG(err.code == ERR_NOMEM, "k=%ld: %s", k, err.msg);
            saw_fail = 1;
            continue;
        }
        if (r->outcome == FETCH_OK) {
            CHECK_EQ_INT(r->n_assets, 2);
            saw_ok = 1;
        } else {
            CHECK_MSG(r->outcome == FETCH_NOMEM, "k=%ld: %s", k, r->err.msg);
            CHECK_EQ_INT(r->body.len, 0);
            saw_fail = 1;
        }
        fetch_result_free(r);
    }
    CHECK(saw_ok && saw_fail);
    fetch_server_stop(&srv);
}

TESTS(get_with_headers, post_with_body, bad_requests_refused_before_network,
      redirects_followed_and_rechecked, redirect_to_loopback_denied_at_connect,
      pinned_name_refused_at_connect, body_cap_at_and_past_edge, endless_body_stops_at_cap,
      gzip_bomb_stops_at_cap, headers_forever_stop_at_cap, never_answering_times_out,
      connect_failure_and_http_status, sink_streams_body, html_assets_fetched_skipped_failed,
      credentials_stay_with_their_host, cancel_mid_download, cancel_while_waiting,
      ten_in_parallel_on_one_loop, allocation_failures_are_clean)
