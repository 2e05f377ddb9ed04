/*
 * test_fetch_check.c - the fetch module's checks that need no network: address
 * classes and CIDRs, URL and allowlist rules, methods and headers, HTML asset
 * collection, the saving layout and the manifest text.
 */
#include "test.h"

#include "fetch/fetch.h"
#include "util/mem.h"

TEST(addr_classes)
{
    static const struct {
        const char *a;
        int cls;
    } cases[] = {
        {"127.0.0.1", FETCH_ADDR_LOOPBACK},
        {"127.255.0.9", FETCH_ADDR_LOOPBACK},
        {"10.1.2.3", FETCH_ADDR_PRIVATE},
        {"172.16.0.1", FETCH_ADDR_PRIVATE},
        {"172.31.255.255", FETCH_ADDR_PRIVATE},
        {"172.32.0.1", FETCH_ADDR_PUBLIC},
        {"192.168.1.1", FETCH_ADDR_PRIVATE},
        {"100.64.0.1", FETCH_ADDR_PRIVATE},
        {"100.127.255.255", FETCH_ADDR_PRIVATE},
        {"100.128.0.1", FETCH_ADDR_PUBLIC},
        {"169.254.169.254", FETCH_ADDR_LINKLOCAL},
        {"224.0.0.1", FETCH_ADDR_MULTICAST},
        {"0.0.0.0", FETCH_ADDR_UNSPECIFIED},
        {"255.255.255.255", FETCH_ADDR_RESERVED},
        {"8.8.8.8", FETCH_ADDR_PUBLIC},
        {"::1", FETCH_ADDR_LOOPBACK},
        {"::", FETCH_ADDR_UNSPECIFIED},
        {"fc00::1", FETCH_ADDR_PRIVATE},
        {"fd12:3456::1", FETCH_ADDR_PRIVATE},
        {"fe80::1", FETCH_ADDR_LINKLOCAL},
        {"febf::1", FETCH_ADDR_LINKLOCAL},
        {"ff02::1", FETCH_ADDR_MULTICAST},
        {"::ffff:127.0.0.1", FETCH_ADDR_LOOPBACK},
        {"::ffff:7f00:1", FETCH_ADDR_LOOPBACK},
        {"::ffff:169.254.169.254", FETCH_ADDR_LINKLOCAL},
        {"::ffff:10.0.0.1", FETCH_ADDR_PRIVATE},
        {"::ffff:8.8.8.8", FETCH_ADDR_PUBLIC},
        {"::127.0.0.1", FETCH_ADDR_LOOPBACK},
        {"64:ff9b::7f00:1", FETCH_ADDR_LOOPBACK},
        {"2002:a9fe:a9fe::1", FETCH_ADDR_LINKLOCAL},
        {"2606:4700::1111", FETCH_ADDR_PUBLIC},
        {"2001:db8::1", FETCH_ADDR_RESERVED},
        {"fe80::1%eth0", FETCH_ADDR_INVALID},
        {"localhost", FETCH_ADDR_INVALID},
        {"", FETCH_ADDR_INVALID},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_MSG(fetch_addr_classify(cases[i].a) == cases[i].cls, "'%s': got %s want %s",
                  cases[i].a, fetch_addr_class_name(fetch_addr_classify(cases[i].a)),
                  fetch_addr_class_name(cases[i].cls));
    }
}

TEST(addr_policy)
{
    struct err err;
    const char *cidrs[] = {"10.1.0.0/16", "127.0.0.2", "fd00::/8"};
    struct fetch_policy p = {0};

    CHECK_EQ_INT(fetch_addr_allowed(&p, "8.8.8.8", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "127.0.0.1", &err), -1);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(strstr(err.msg, "loopback") != NULL);
    CHECK(strstr(err.msg, "fetch_allow_cidrs") != NULL);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "169.254.169.254", &err), -1);
    CHECK(strstr(err.msg, "link-local") != NULL);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "::ffff:127.0.0.1", &err), -1);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "not-an-ip", &err), -1);

    p.allow_cidrs = cidrs;
    p.n_allow_cidrs = 3;
    CHECK_EQ_INT(fetch_addr_allowed(&p, "10.1.200.3", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "10.2.0.1", &err), -1);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "127.0.0.2", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "::ffff:127.0.0.2", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "127.0.0.1", &err), -1);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "fd99::5", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "fc00::5", &err), -1);

    p.n_allow_cidrs = 0;
    p.allow_private = 1;
    CHECK_EQ_INT(fetch_addr_allowed(&p, "127.0.0.1", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "169.254.169.254", &err), 0);
    CHECK_EQ_INT(fetch_addr_allowed(&p, "garbage", &err), -1); /* never allowed */
}

TEST(cidr_rules)
{
    struct err err;

    CHECK(fetch_cidr_match("10.0.0.0/8", "10.255.1.1"));
    CHECK(!fetch_cidr_match("10.0.0.0/8", "11.0.0.1"));
    CHECK(fetch_cidr_match("0.0.0.0/0", "203.0.113.9"));
    CHECK(fetch_cidr_match("192.168.1.0/31", "192.168.1.1"));
    CHECK(!fetch_cidr_match("192.168.1.0/31", "192.168.1.2"));
    CHECK(fetch_cidr_match("::1/128", "::1"));
    CHECK(!fetch_cidr_match("::1/128", "::2"));
    CHECK(fetch_cidr_match("fe80::/10", "febf::1"));
    CHECK(!fetch_cidr_match("fe80::/10", "fec0::1"));
    CHECK(!fetch_cidr_match("10.0.0.0/8", "::1"));
    CHECK_EQ_INT(fetch_cidr_check("10.0.0.0/32", &err), 0);
    CHECK_EQ_INT(fetch_cidr_check("::/128", &err), 0);
    const char *bad[] = {"10.0.0.0/33", "::/129", "x", "10.0.0.0/", "/8", "10.0.0.0/8x", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(fetch_cidr_check(bad[i], &err) == -1, "'%s' accepted", bad[i]);
        CHECK_EQ_INT(err.code, ERR_INVAL);
        CHECK(!fetch_cidr_match(bad[i], "10.0.0.1"));
    }
}

TEST(allowlist_rules)
{
    const char *list[] = {"Example.COM.", "*.wild.org", "127.0.0.1", "::1", "*.ts.net"};
    struct fetch_policy p = {0};

    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 5;
    CHECK(fetch_host_allowed(&p, "example.com"));
    CHECK(fetch_host_allowed(&p, "EXAMPLE.com."));
    CHECK(!fetch_host_allowed(&p, "www.example.com"));
    CHECK(fetch_host_allowed(&p, "a.wild.org"));
    CHECK(fetch_host_allowed(&p, "a.b.wild.org"));
    CHECK(!fetch_host_allowed(&p, "wild.org"));
    CHECK(!fetch_host_allowed(&p, "evilwild.org"));
    CHECK(!fetch_host_allowed(&p, ".wild.org.evil"));
    CHECK(fetch_host_allowed(&p, "127.0.0.1"));
    CHECK(!fetch_host_allowed(&p, "127.0.0.2"));
    CHECK(fetch_host_allowed(&p, "::1"));
    CHECK(fetch_host_allowed(&p, "0:0::1"));
    CHECK(!fetch_host_allowed(&p, ""));

    const char *star[] = {"*"};
    p.domain_allowlist = star;
    p.n_domain_allowlist = 1;
    CHECK(fetch_host_allowed(&p, "anything.example"));
    CHECK(!fetch_host_allowed(&p, "10.0.0.1")); /* an IP literal needs its own entry */

    p.n_domain_allowlist = 0; /* an explicit empty list allows nothing */
    CHECK(!fetch_host_allowed(&p, "pypi.org"));

    p.allowlist_given = 0; /* key absent: the reference's defaults */
    CHECK(fetch_host_allowed(&p, "pypi.org"));
    CHECK(fetch_host_allowed(&p, "cdn.jsdelivr.net"));
    CHECK(fetch_host_allowed(&p, "files.pythonhosted.org"));
    CHECK(!fetch_host_allowed(&p, "example.com"));
}

TEST(url_rules)
{
    struct err err;
    char *norm = NULL, *host = NULL;
    const char *list[] = {"example.com", "127.0.0.1", "::1"};
    struct fetch_policy p = {0};

    p.allowlist_given = 1;
    p.domain_allowlist = list;
    p.n_domain_allowlist = 3;
    CHECK_OK(fetch_url_check(&p, "HTTP://EXAMPLE.COM./a/b?x=1#frag", &norm, &host, &err), &err);
    CHECK_EQ_STR(host, "example.com");
    CHECK(strncmp(norm, "http://", 7) == 0);
    mem_free(norm);
    mem_free(host);
    CHECK_OK(fetch_url_check(&p, "http://[::1]:8080/", &norm, &host, &err), &err);
    CHECK_EQ_STR(host, "::1");
    mem_free(norm);
    mem_free(host);

    const char *denied[] = {"file:///etc/passwd",
                            "gopher://127.0.0.1/",
                            "dict://127.0.0.1/",
                            "ftp://example.com/",
                            "ldap://example.com/",
                            "http://other.com/",
                            "https://example.com.evil.net/",
                            "http://127.0.0.2/"};
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
        CHECK_MSG(fetch_url_check(&p, denied[i], &norm, &host, &err) == -1, "'%s' allowed",
                  denied[i]);
        CHECK_EQ_INT(err.code, ERR_DENIED);
        CHECK(norm == NULL && host == NULL);
    }
    CHECK_EQ_INT(fetch_url_check(&p, "file:///etc/passwd", &norm, &host, &err), -1);
    CHECK(strstr(err.msg, "scheme 'file'") != NULL);
    CHECK_EQ_INT(fetch_url_check(&p, "http://other.com/", &norm, &host, &err), -1);
    CHECK(strstr(err.msg, "drun-mcp config add-domain other.com") != NULL);
    CHECK_EQ_INT(fetch_url_check(&p, "not a url", &norm, &host, &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK_EQ_INT(fetch_url_check(&p, "", &norm, &host, &err), -1);
    CHECK_EQ_INT(fetch_url_check(&p, "http://ex\xc3\xa4mple.com/", &norm, &host, &err), -1);

    /* the URL length cap, at and past its edge */
    char *big = mem_alloc(FETCH_MAX_URL_LEN + 2);
    memset(big, 'a', FETCH_MAX_URL_LEN + 1);
    memcpy(big, "http://example.com/", 19);
    big[FETCH_MAX_URL_LEN] = 0;
    CHECK_OK(fetch_url_check(&p, big, &norm, &host, &err), &err);
    mem_free(norm);
    mem_free(host);
    big[FETCH_MAX_URL_LEN] = 'a';
    big[FETCH_MAX_URL_LEN + 1] = 0;
    CHECK_EQ_INT(fetch_url_check(&p, big, &norm, &host, &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    mem_free(big);
}

TEST(methods_and_headers)
{
    struct err err;
    char m[40];

    CHECK_OK(fetch_method_check("get", m, sizeof(m), &err), &err);
    CHECK_EQ_STR(m, "GET");
    CHECK_OK(fetch_method_check(NULL, m, sizeof(m), &err), &err);
    CHECK_EQ_STR(m, "GET");
    CHECK_OK(fetch_method_check("propfind", m, sizeof(m), &err), &err);
    CHECK_EQ_STR(m, "PROPFIND");
    CHECK_EQ_INT(fetch_method_check("GE T", m, sizeof(m), &err), -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(strstr(err.msg, "invalid HTTP method") != NULL);
    CHECK_EQ_INT(fetch_method_check("", m, sizeof(m), &err), -1);
    CHECK_EQ_INT(fetch_method_check("GET\r\nX: y", m, sizeof(m), &err), -1);
    CHECK_OK(fetch_method_check("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", m, sizeof(m), &err), &err);
    CHECK_EQ_INT(fetch_method_check("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", m, sizeof(m), &err), -1);

    struct fetch_header ok = {"X-Thing", "a value; with: punctuation"};
    struct fetch_header empty = {"X-Empty", ""};
    struct fetch_header bad_name = {"Bad Name", "v"};
    struct fetch_header colon = {"X:Y", "v"};
    struct fetch_header crlf = {"X-A", "a\r\nInjected: yes"};
    struct fetch_header lf = {"X-A", "a\nb"};
    struct fetch_header host = {"host", "evil.com"};
    struct fetch_header te = {"Transfer-Encoding", "chunked"};
    CHECK_OK(fetch_header_check(&ok, &err), &err);
    CHECK_OK(fetch_header_check(&empty, &err), &err);
    CHECK_EQ_INT(fetch_header_check(&bad_name, &err), -1);
    CHECK(strstr(err.msg, "'Bad Name'") != NULL);
    CHECK_EQ_INT(fetch_header_check(&colon, &err), -1);
    CHECK_EQ_INT(fetch_header_check(&crlf, &err), -1);
    CHECK(strstr(err.msg, "line break") != NULL);
    CHECK_EQ_INT(fetch_header_check(&lf, &err), -1);
    CHECK_EQ_INT(fetch_header_check(&host, &err), -1);
    CHECK_EQ_INT(fetch_header_check(&te, &err), -1);
}

TEST(html_assets_order_and_skips)
{
    static const char page[] =
        "<html><head>\n"
        "<!-- <img src=\"commented.png\"> -->\n"
        "<img src=\"/img/a.png\">\n"
        "<script>var s = '<img src=\"in-script.png\">';</script>\n"
        "<SCRIPT SRC='js/app.js'></SCRIPT>\n"
        "<link rel=\"stylesheet\" href=\"style.css?v=1&amp;x=2\">\n"
        "<link rel=\"canonical\" href=\"/canon\">\n"
        "<link rel='shortcut icon' href=//cdn.example.org/fav.ico>\n"
        "<link rel=\"apple-touch-icon\" href=\"https://example.com/touch.png\">\n"
        "<img src=\"\"><img src=\"#top\"><img src=\"data:image/png;base64,AAAA\">\n"
        "<a href=\"mailto:x@y\">m</a><img src=\"javascript:alert(1)\">\n"
        "<img src=\"ftp://example.com/f.png\">\n"
        "<img src=\"https://example.com/base/img/a.png\">\n"
        "<img src=\"  spaced.png  \">\n"
        "<style>.x{background:url('<img src=no.png>')}</style>\n"
        "</head></html>";
    char **urls = NULL;
    size_t n = 0;
    struct err err;

    CHECK_OK(fetch_html_assets(page, sizeof(page) - 1, "https://example.com/base/page.html", &urls,
                               &n, &err),
             &err);
    const char *want[] = {
        "https://example.com/base/style.css?v=1&x=2",
        "https://cdn.example.org/fav.ico",
        "https://example.com/touch.png",
        "https://example.com/base/js/app.js",
        "https://example.com/img/a.png",
        "https://example.com/base/img/a.png",
        "https://example.com/base/spaced.png",
    };
    CHECK_EQ_INT(n, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_STR(urls[i], want[i]);
    }
    fetch_strv_free(urls, n);
}

TEST(html_assets_character_references)
{
    /* Every HTML character reference decodes, named or numeric, ASCII or not; a name
     * without ';' (as in a query string) stays as written. */
    static const char page[] = "<img src=\"caf&eacute;.png\"><img src=\"x&#233;y.png\">"
                               "<img src=\"a&#x2F;b.png\"><img src=\"q.png?a=1&copy=2\">"
                               "<img src=\"n&nbsp;b.png\">"
                               "<link rel=\"stylesheet\" href=\"s.css?a=1&amp;b=2\">";
    char **urls = NULL;
    size_t n = 0;
    struct err err;

    CHECK_OK(fetch_html_assets(page, sizeof(page) - 1, "https://example.com/base/page.html", &urls,
                               &n, &err),
             &err);
    const char *want[] = {
        "https://example.com/base/s.css?a=1&b=2",    "https://example.com/base/caf%c3%a9.png",
        "https://example.com/base/x%c3%a9y.png",     "https://example.com/base/a/b.png",
        "https://example.com/base/q.png?a=1&copy=2", "https://example.com/base/n%c2%a0b.png",
    };
    CHECK_EQ_INT(n, 6);
    for (size_t i = 0; i < n && i < 6; i++) {
        CHECK_EQ_STR(urls[i], want[i]);
    }
    fetch_strv_free(urls, n);
}

TEST(html_assets_follow_the_html_parser)
{
    /* A tag split across lines, attributes without quotes and in upper case, a comment
     * that a naive '-->' search ends early, CDATA in script and style, an unclosed
     * comment at the end. */
    static const char page[] = "<IMG\nSRC=one.png\nALT=x><!-- a -- b --><img src=two.png>"
                               "<script>document.write('<img src=\"no.png\">')</script>"
                               "<style>/* <img src=no2.png> */</style>"
                               "<img src='three.png'/><!-- <img src=no3.png>";
    char **urls = NULL;
    size_t n = 0;
    struct err err;

    CHECK_OK(fetch_html_assets(page, sizeof(page) - 1, "http://h.test/", &urls, &n, &err), &err);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_EQ_STR(urls[0], "http://h.test/one.png");
        CHECK_EQ_STR(urls[1], "http://h.test/two.png");
        CHECK_EQ_STR(urls[2], "http://h.test/three.png");
    }
    fetch_strv_free(urls, n);
}

TEST(html_assets_dedupe_and_nomem)
{
    static const char page[] = "<img src=a.png><img src=./a.png><img src=/a.png><script "
                               "src=b.js></script><link rel=stylesheet href=c.css>";
    char **urls = NULL;
    size_t n = 0;
    struct err err;

    CHECK_OK(fetch_html_assets(page, sizeof(page) - 1, "http://h/", &urls, &n, &err), &err);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_STR(urls[0], "http://h/c.css");
    CHECK_EQ_STR(urls[1], "http://h/b.js");
    CHECK_EQ_STR(urls[2], "http://h/a.png");
    fetch_strv_free(urls, n);

    /* every allocation failure is reported, never a crash or a partial list */
    for (long k = 0; k < 40; k++) {
        mem_fail_after(k);
        int rc = fetch_html_assets(page, sizeof(page) - 1, "http://h/", &urls, &n, &err);
        mem_fail_after(-1);
        if (rc == 0) {
            CHECK_EQ_INT(n, 3);
            fetch_strv_free(urls, n);
        } else {
            CHECK_EQ_INT(err.code, ERR_NOMEM);
            CHECK(urls == NULL && n == 0);
        }
    }
}

TEST(naming_rules)
{
    struct err err;
    char *dir = NULL, *fn = NULL;
    static const struct {
        const char *url, *ct, *dir, *fn;
    } cases[] = {
        {"http://127.0.0.1:8080/data.json", "application/json", "downloads/127.0.0.1/data",
         "data.json"},
        {"http://127.0.0.1/pdf/1803.07199", "application/pdf", "downloads/127.0.0.1/1803",
         "1803.07199.pdf"},
        {"http://127.0.0.1/", "text/html; charset=utf-8", "downloads/127.0.0.1", "index.html"},
        {"http://127.0.0.1/", "application/octet-stream", "downloads/127.0.0.1", "download"},
        {"http://Example.com/dir/", "", "downloads/example.com", "download"},
        {"http://example.com/a/Paper.PDF?x=1", "Application/PDF ; q", "downloads/example.com/Paper",
         "Paper.PDF"},
        {"http://example.com/.hidden", "text/plain", "downloads/example.com/.hidden", ".hidden"},
        {"http://example.com/a%20b.tar.gz", "", "downloads/example.com/a%20b.tar", "a%20b.tar.gz"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_OK(fetch_name(cases[i].url, cases[i].ct, &dir, &fn, &err), &err);
        CHECK_EQ_STR(dir, cases[i].dir);
        CHECK_EQ_STR(fn, cases[i].fn);
        mem_free(dir);
        mem_free(fn);
    }
}

TEST(layout_and_manifest)
{
    struct fetch_result r;
    struct fetch_asset a[5];
    struct fetch_layout *l = NULL;
    struct err err;

    memset(&r, 0, sizeof(r));
    memset(a, 0, sizeof(a));
    r.url = "http://127.0.0.1:9/docs/style.css";
    r.content_type = "text/html";
    const char *urls[] = {"http://127.0.0.1:9/a/style.css", "http://127.0.0.1:9/b/style.css",
                          "http://127.0.0.1:9/manifest.json", "http://evil.test/x.png",
                          "http://127.0.0.1:9/"};
    for (int i = 0; i < 5; i++) {
        a[i].url = (char *)urls[i];
        a[i].content_type = "text/css";
        a[i].status = 200;
        buf_init(&a[i].body, 100);
        buf_puts(&a[i].body, "abc");
    }
    a[3].state = FETCH_ASSET_SKIPPED;
    snprintf(a[3].reason, sizeof(a[3].reason), "domain_not_allowed");
    r.assets = a;
    r.n_assets = 5;
    CHECK_OK(fetch_layout_make(&r, &l, &err), &err);
    CHECK_EQ_STR(l->dir, "downloads/127.0.0.1/style");
    CHECK_EQ_STR(l->main_path, "downloads/127.0.0.1/style/style.css");
    CHECK_EQ_STR(l->manifest_path, "downloads/127.0.0.1/style/manifest.json");
    CHECK_EQ_STR(l->asset_paths[0], "downloads/127.0.0.1/style/style-2.css");
    CHECK_EQ_STR(l->asset_paths[1], "downloads/127.0.0.1/style/style-3.css");
    CHECK_EQ_STR(l->asset_paths[2], "downloads/127.0.0.1/style/manifest-2.json");
    CHECK(l->asset_paths[3] == NULL);
    CHECK_EQ_STR(l->asset_paths[4], "downloads/127.0.0.1/style/asset");
    const char *m = buf_cstr(&l->manifest);
    CHECK(strstr(m, "\"source_url\": \"http://127.0.0.1:9/docs/style.css\"") != NULL);
    CHECK(strstr(m, "\"reason\": \"domain_not_allowed\"") != NULL);
    CHECK(strstr(m, "\"fetched\": 4") != NULL);
    CHECK(strstr(m, "\"skipped\": 1") != NULL);
    CHECK(strstr(m, "\"failed\": 0") != NULL);
    CHECK(strstr(m, "\"failed\": []") != NULL);
    CHECK(strstr(m, "\"bytes\": 3") != NULL);
    fetch_layout_free(l);

    /* UTF-8 from a server stays UTF-8 (not one \u00XX per byte); bytes that are not
     * UTF-8 become U+FFFD; the manifest is JSON either way. */
    a[0].content_type = "text/css; title=\"caf\xc3\xa9\"";
    a[1].content_type = "text/css; x=\xff\xc3";
    CHECK_OK(fetch_layout_make(&r, &l, &err), &err);
    m = buf_cstr(&l->manifest);
    CHECK_MSG(strstr(m, "\"content_type\": \"text/css; title=\\\"caf\xc3\xa9\\\"\"") != NULL, "%s",
              m);
    CHECK_MSG(strstr(m, "\"content_type\": \"text/css; x=\xef\xbf\xbd\xef\xbf\xbd\"") != NULL, "%s",
              m);
    CHECK(strstr(m, "\\u00c3") == NULL);
    fetch_layout_free(l);
    for (int i = 0; i < 5; i++) {
        buf_release(&a[i].body);
    }
}

TEST(resolve_entries)
{
    struct err err;
    const char *good[] = {"a.test:80:127.0.0.1", "a.test:65535:[::1]", "x:1:10.0.0.1,10.0.0.2",
                          "h:443:::1"};
    const char *bad[] = {"a.test:80",       "a.test::1.2.3.4", ":80:1.2.3.4", "a:0:1.2.3.4",
                         "a:65536:1.2.3.4", "a:80:notip",      "a:80:",       "a:8x:1.2.3.4"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECK_MSG(fetch_resolve_check(good[i], &err) == 0, "'%s': %s", good[i], err.msg);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(fetch_resolve_check(bad[i], &err) == -1, "'%s' accepted", bad[i]);
        CHECK_EQ_INT(err.code, ERR_INVAL);
    }
}

TESTS(html_assets_character_references, html_assets_follow_the_html_parser, resolve_entries,
      addr_classes, addr_policy, cidr_rules, allowlist_rules, url_rules, methods_and_headers,
      html_assets_order_and_skips, html_assets_dedupe_and_nomem, naming_rules, layout_and_manifest)
