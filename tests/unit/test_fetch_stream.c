/*
 * test_fetch_stream.c - the gateway's streaming contract that session_fetch builds on:
 * the body sink and the asset sink (an HTML page kept as well, assets not kept, byte
 * counts, a failing asset sink fails that asset only), the allowlist rule for one
 * entry (fetch_host_matches), and wildcard credentials that never follow a redirect
 * chain once it has left their domain.
 */
#include "test.h"

#include <uv.h>

#include "fetch/fetch.h"
#include "fetch_server.h"
#include "util/mem.h"

static struct fetch_server srv;

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

static int
contains(const struct buf *b, const char *s)
{
    return memmem(b->data ? b->data : "", b->len, s, strlen(s)) != NULL;
}

struct sinks {
    struct buf main;
    struct buf asset[8];
    int fail_asset; /* index whose sink refuses, -1 none */
};

static int
main_sink(void *ud, const void *data, size_t len, struct err *why)
{
    struct sinks *s = ud;
    (void)why;
    return buf_append(&s->main, data, len) == 0 ? 0 : -1;
}

static int
asset_sink(void *ud, size_t asset, const void *data, size_t len, struct err *why)
{
    struct sinks *s = ud;

    if ((int)asset == s->fail_asset) {
        err_set(why, ERR_IO, "disk full (test)");
        return -1;
    }
    CHECK(asset < 8);
    return buf_append(&s->asset[asset], data, len) == 0 ? 0 : -1;
}

TEST(html_page_and_assets_through_sinks)
{
    char path[1024], url[1200], resolve[128];
    const char *list[] = {"127.0.0.1", "b.test"};
    const char *res[] = {resolve};
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct sinks s;
    struct err err;

    start_server();
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 2;
    p.allow_private = 1;
    snprintf(resolve, sizeof(resolve), "b.test:%d:127.0.0.1", srv.port);
    p.resolve = res;
    p.n_resolve = 1;
    /* 0 link: css; 1 icon: 404; 2 script: b.test via a redirect */
    snprintf(path, sizeof(path),
             "/html?assets=/plain%%3Fbody%%3Dcss-bytes,/status%%3Fcode%%3D404,"
             "/redirect%%3Fto%%3Dhttp://b.test:%d/plain%%253Fbody%%253Dscript-bytes",
             srv.port);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", srv.port, path);
    for (int round = 0; round < 2; round++) {
        memset(&s, 0, sizeof(s));
        buf_init(&s.main, 1 << 20);
        for (int i = 0; i < 8; i++) {
            buf_init(&s.asset[i], 1 << 20);
        }
        s.fail_asset = round == 0 ? -1 : 0;
        memset(&req, 0, sizeof(req));
        req.url = url;
        req.collect_assets = 1;
        req.sink = main_sink;
        req.asset_sink = asset_sink;
        req.sink_ud = &s;
        CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
        CHECK_MSG(r->outcome == FETCH_OK, "%s", r->err.msg);
        /* the page went to the sink and, being HTML, is also kept for its assets */
        CHECK(contains(&s.main, "<!doctype html>"));
        CHECK_EQ_INT(r->body.len, s.main.len);
        CHECK_EQ_INT(r->bytes, s.main.len);
        CHECK_EQ_INT(r->n_assets, 3);
        if (round == 0) {
            CHECK_EQ_INT(r->assets[0].state, FETCH_ASSET_FETCHED);
            CHECK(s.asset[0].len == 9 && contains(&s.asset[0], "css-bytes"));
            CHECK_EQ_INT(r->assets[0].bytes, 9);
        } else {
            /* a refusing asset sink fails that asset only */
            CHECK_EQ_INT(r->assets[0].state, FETCH_ASSET_FAILED);
            CHECK_MSG(strstr(r->assets[0].reason, "disk full (test)") != NULL, "%s",
                      r->assets[0].reason);
        }
        CHECK_EQ_INT(r->assets[0].body.len, 0); /* never kept with an asset sink */
        CHECK_EQ_INT(r->assets[1].state, FETCH_ASSET_FAILED);
        CHECK_EQ_STR(r->assets[1].reason, "http_404");
        /* only the final response of a redirecting asset reaches its sink */
        CHECK_EQ_INT(r->assets[2].state, FETCH_ASSET_FETCHED);
        CHECK_MSG(s.asset[2].len == 12 && contains(&s.asset[2], "script-bytes"), "%.*s",
                  (int)s.asset[2].len, s.asset[2].data ? s.asset[2].data : "");
        CHECK_EQ_INT(r->assets[2].bytes, 12);
        CHECK_EQ_INT(r->assets[2].body.len, 0);
        fetch_result_free(r);
        buf_release(&s.main);
        for (int i = 0; i < 8; i++) {
            buf_release(&s.asset[i]);
        }
    }
    fetch_server_stop(&srv);
}

TEST(non_html_body_through_sink_is_not_kept)
{
    char url[256];
    const char *list[] = {"127.0.0.1"};
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct sinks s;
    struct err err;

    start_server();
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 1;
    p.allow_private = 1;
    memset(&s, 0, sizeof(s));
    buf_init(&s.main, 1 << 20);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/big?size=300000", srv.port);
    memset(&req, 0, sizeof(req));
    req.url = url;
    req.collect_assets = 1;
    req.sink = main_sink;
    req.sink_ud = &s;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK_EQ_INT(s.main.len, 300000);
    CHECK_EQ_INT(r->body.len, 0);
    fetch_result_free(r);
    buf_release(&s.main);
    fetch_server_stop(&srv);
}

TEST(host_matches_one_entry)
{
    CHECK(fetch_host_matches("*.example.test", "a.example.test"));
    CHECK(fetch_host_matches("*.Example.Test.", "A.B.EXAMPLE.test."));
    CHECK(!fetch_host_matches("*.example.test", "example.test"));
    CHECK(!fetch_host_matches("*.example.test", "xexample.test"));
    CHECK(!fetch_host_matches("*.example.test", "example.test.evil"));
    CHECK(fetch_host_matches("example.test", "EXAMPLE.test."));
    CHECK(!fetch_host_matches("example.test", "a.example.test"));
    CHECK(fetch_host_matches("*", "anything.test"));
    CHECK(!fetch_host_matches("*", "127.0.0.1")); /* an IP needs an identical IP entry */
    CHECK(fetch_host_matches("127.0.0.1", "127.0.0.1"));
    CHECK(!fetch_host_matches(NULL, "a.test"));
    CHECK(!fetch_host_matches("a.test", ""));
    /* The cases the policy module's former copy of this matcher was tested with. */
    CHECK(fetch_host_matches("Example.com.", "example.com"));
    CHECK(fetch_host_matches("*.example.com", "a.b.example.com"));
    CHECK(!fetch_host_matches("*.example.com", "badexample.com"));
    CHECK(!fetch_host_matches("example.com", "example.com.evil.org"));
    CHECK(!fetch_host_matches("*.0.0.1", "127.0.0.1"));
    CHECK(!fetch_host_matches("127.0.0.1", "127.0.0.2"));
    CHECK(!fetch_host_matches("*", "::1"));
    CHECK(fetch_host_matches("::1", "[::1]"));
    CHECK(fetch_host_matches("[0:0::1]", "::1"));
    CHECK(!fetch_host_matches("example.com", "."));
}

TEST(wildcard_credential_never_follows_a_chain_that_left)
{
    char rs[4][128], url[1024];
    const char *list[] = {"*.w.test", "w.test", "other.test"};
    const char *res[] = {rs[0], rs[1], rs[2], rs[3]};
    const char *hosts[] = {"a.w.test", "b.w.test", "w.test", "other.test"};
    struct fetch_credential cred = {"*.W.test.", "X-Wild", "s3cret-w1ld"};
    struct fetch_credential star = {"*", "X-Wild", "s3cret-w1ld"};
    struct fetch_header agent[] = {{"x-wild", "agent-own"}};
    struct fetch_policy p;
    struct fetch_request req;
    struct fetch_result *r = NULL;
    struct err err;

    start_server();
    memset(&p, 0, sizeof(p));
    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 3;
    p.allow_private = 1;
    for (int i = 0; i < 4; i++) {
        snprintf(rs[i], sizeof(rs[i]), "%s:%d:127.0.0.1", hosts[i], srv.port);
    }
    p.resolve = res;
    p.n_resolve = 4;
    p.credentials = &cred;
    p.n_credentials = 1;
    memset(&req, 0, sizeof(req));
    req.headers = agent;
    req.n_headers = 1;

    /* a subdomain: the operator's value, not the agent's */
    snprintf(url, sizeof(url), "http://b.w.test:%d/echo", srv.port);
    req.url = url;
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_EQ_INT(r->outcome, FETCH_OK);
    CHECK(strstr(buf_cstr(&r->body), "X-Wild: s3cret-w1ld\n") != NULL);
    CHECK(strstr(buf_cstr(&r->body), "agent-own") == NULL);
    CHECK_EQ_INT(r->hops[0].credentialed, 1);
    fetch_result_free(r);

    /* the apex is not a subdomain: the agent's own header goes there */
    snprintf(url, sizeof(url), "http://w.test:%d/echo", srv.port);
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK(strstr(buf_cstr(&r->body), "s3cret") == NULL);
    CHECK(strstr(buf_cstr(&r->body), "agent-own") != NULL);
    CHECK_EQ_INT(r->hops[0].credentialed, 0);
    fetch_result_free(r);

    /* a.w.test -> other.test -> b.w.test: only the first hop carries it */
    snprintf(url, sizeof(url),
             "http://a.w.test:%d/redirect?to=http%%3A//other.test%%3A%d/redirect%%3Fto%%3D"
             "http%%3A//b.w.test%%3A%d/echo",
             srv.port, srv.port, srv.port);
    CHECK_OK(fetch_run(&p, &req, &r, &err), &err);
    CHECK_MSG(r->outcome == FETCH_OK, "%s", r->err.msg);
    CHECK_EQ_INT(r->n_hops, 3);
    CHECK(strstr(r->hops[2].url, "b.w.test") != NULL);
    CHECK_EQ_INT(r->hops[0].credentialed, 1);
    CHECK_EQ_INT(r->hops[1].credentialed, 0);
    CHECK_EQ_INT(r->hops[2].credentialed, 0);
    CHECK(strstr(buf_cstr(&r->body), "s3cret") == NULL);
    fetch_result_free(r);

    /* "*" would send it everywhere: refused before any network work */
    p.credentials = &star;
    CHECK(fetch_run(&p, &req, &r, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK_MSG(strstr(err.msg, "every host") != NULL && strstr(err.msg, "s3cret") == NULL, "%s",
              err.msg);
    fetch_server_stop(&srv);
}

TESTS(html_page_and_assets_through_sinks, non_html_body_through_sink_is_not_kept,
      host_matches_one_entry, wildcard_credential_never_follows_a_chain_that_left)
