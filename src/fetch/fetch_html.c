/*
 * fetch_html.c - the pure parts of session_fetch's saving: which assets an HTML page
 * names, where the response and its assets are saved, and the manifest.json text.
 *
 * Asset collection follows the reference (§5 step 9): <link href> whose rel has a
 * token "stylesheet" or a token ending in "icon", then <script src>, then <img src>;
 * empty, "#...", data:, mailto: and javascript: values are skipped; the rest are
 * resolved against the page URL with curl's URL API, kept if http or https, and
 * de-duplicated by resolved URL. The page is read by libxml2's HTML parser (tolerant of
 * real-world markup; comments and the contents of <script> and <style> are not markup,
 * so a URL in a string inside a script is not taken for an <img>; every character
 * reference is decoded). It runs without network access, and its error reports are
 * silenced: a server's broken page is not our log's business. At most
 * FETCH_HTML_MAX_URLS URLs are collected from one page.
 */
#include <curl/curl.h>
#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fetch/fetch.h"
#include "util/mem.h"

#define FETCH_HTML_MAX_URLS 1024
#define ATTR_MAX            8192

void
fetch_strv_free(char **v, size_t n)
{
    if (v == NULL) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        mem_free(v[i]);
    }
    mem_free(v);
}

static int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}

/* 1 if the rel value has a token "stylesheet" or a token ending in "icon". */
static int
rel_wanted(const char *rel)
{
    const char *p = rel;

    while (*p) {
        while (*p && is_space(*p)) {
            p++;
        }
        const char *s = p;
        while (*p && !is_space(*p)) {
            p++;
        }
        size_t n = (size_t)(p - s);
        if ((n == 10 && strncasecmp(s, "stylesheet", 10) == 0) ||
            (n >= 4 && strncasecmp(p - 4, "icon", 4) == 0)) {
            return 1;
        }
    }
    return 0;
}

struct list {
    char **v;
    size_t n, cap;
};

static int
list_push(struct list *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = mem_realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            return -1;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = mem_strdup(s);
    if (l->v[l->n] == NULL) {
        return -1;
    }
    l->n++;
    return 0;
}

static int
skip_value(const char *v)
{
    return v[0] == 0 || v[0] == '#' || strncasecmp(v, "data:", 5) == 0 ||
           strncasecmp(v, "mailto:", 7) == 0 || strncasecmp(v, "javascript:", 11) == 0;
}

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void
xml_init(void)
{
    xmlInitParser();
}

#define HTML_CHUNK ((size_t)64 << 10) /* bytes handed to the parser at a time */

struct scan {
    struct list raw[3]; /* link, script, img: the wanted values in document order */
    size_t total;
    int nomem;
    htmlParserCtxtPtr ctxt;
};

/* atts[k] (a decoded value) trimmed of HTML whitespace into out; "" if too long. */
static const char *
trimmed(const xmlChar *v, char *out)
{
    const char *p = v ? (const char *)v : "";
    size_t n;

    while (is_space(*p)) {
        p++;
    }
    n = strlen(p);
    while (n > 0 && is_space(p[n - 1])) {
        n--;
    }
    if (n >= ATTR_MAX) {
        n = 0;
    }
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

/* The SAX start-tag callback: libxml2 has lower-cased the names and decoded the values. */
static void
on_start(void *ud, const xmlChar *name, const xmlChar **atts)
{
    struct scan *sc = ud;
    const char *tag = (const char *)name;
    const xmlChar *rel = NULL, *href = NULL, *src = NULL;
    char val[ATTR_MAX], relv[ATTR_MAX];
    int kind = strcasecmp(tag, "link") == 0     ? 0
               : strcasecmp(tag, "script") == 0 ? 1
               : strcasecmp(tag, "img") == 0    ? 2
                                                : -1;
    const xmlChar *v;

    if (kind < 0 || sc->nomem) {
        return;
    }
    for (size_t k = 0; atts != NULL && atts[k] != NULL; k += 2) {
        const char *an = (const char *)atts[k];
        /* The first of a repeated attribute wins, as in a browser. */
        if (strcasecmp(an, "rel") == 0 && rel == NULL) {
            rel = atts[k + 1] ? atts[k + 1] : (const xmlChar *)"";
        } else if (strcasecmp(an, "href") == 0 && href == NULL) {
            href = atts[k + 1] ? atts[k + 1] : (const xmlChar *)"";
        } else if (strcasecmp(an, "src") == 0 && src == NULL) {
            src = atts[k + 1] ? atts[k + 1] : (const xmlChar *)"";
        }
    }
    if (kind == 0 && !rel_wanted(trimmed(rel, relv))) {
        return;
    }
    v = kind == 0 ? href : src;
    trimmed(v, val);
    if (skip_value(val)) {
        return;
    }
    if (list_push(&sc->raw[kind], val) != 0) {
        sc->nomem = 1;
        xmlStopParser(sc->ctxt);
        return;
    }
    if (++sc->total >= FETCH_HTML_MAX_URLS) {
        xmlStopParser(sc->ctxt);
    }
}

/*
 * Feeds the page to libxml2's push parser with only a start-tag callback: no tree is
 * built, so a page of any size costs the parser's small state, not a DOM.
 */
static int
scan_page(const char *h, size_t n, const char *base_url, struct scan *sc)
{
    htmlSAXHandler sax;

    pthread_once(&xml_once, xml_init);
    memset(&sax, 0, sizeof(sax));
    sax.startElement = on_start;
    sc->ctxt = htmlCreatePushParserCtxt(&sax, sc, NULL, 0, base_url, XML_CHAR_ENCODING_NONE);
    if (sc->ctxt == NULL) {
        return -1;
    }
    /* NONET: never load anything the page names; the error options keep a broken page's
     * complaints off stderr. */
    htmlCtxtUseOptions(sc->ctxt, HTML_PARSE_RECOVER | HTML_PARSE_NONET | HTML_PARSE_NOERROR |
                                     HTML_PARSE_NOWARNING);
    for (size_t off = 0; off < n && !sc->ctxt->disableSAX && !sc->nomem; off += HTML_CHUNK) {
        size_t k = n - off < HTML_CHUNK ? n - off : HTML_CHUNK;
        htmlParseChunk(sc->ctxt, h + off, (int)k, 0);
    }
    if (!sc->ctxt->disableSAX && !sc->nomem) {
        htmlParseChunk(sc->ctxt, NULL, 0, 1);
    }
    htmlFreeParserCtxt(sc->ctxt);
    sc->ctxt = NULL;
    return sc->nomem ? -1 : 0;
}

int
fetch_html_assets(const char *h, size_t n, const char *base_url, char ***urls, size_t *n_out,
                  struct err *err)
{
    struct scan sc;
    struct list *raw = sc.raw;
    struct list out = {0};
    CURLU *u = NULL;
    int rc = -1;

    memset(&sc, 0, sizeof(sc));
    *urls = NULL;
    *n_out = 0;
    if (scan_page(h, n, base_url, &sc) != 0) {
        err_set(err, ERR_NOMEM, "out of memory reading html");
        goto out;
    }
    u = curl_url();
    if (u == NULL) {
        err_set(err, ERR_NOMEM, "out of memory reading html");
        goto out;
    }
    for (int k = 0; k < 3; k++) {
        for (size_t j = 0; j < raw[k].n; j++) {
            char *scheme = NULL, *full = NULL;
            int dup = 0;
            if (curl_url_set(u, CURLUPART_URL, base_url, 0) != CURLUE_OK ||
                curl_url_set(u, CURLUPART_URL, raw[k].v[j], CURLU_NON_SUPPORT_SCHEME) !=
                    CURLUE_OK ||
                curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
                (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0) ||
                curl_url_get(u, CURLUPART_URL, &full, 0) != CURLUE_OK) {
                curl_free(scheme);
                curl_free(full);
                continue;
            }
            for (size_t d = 0; d < out.n; d++) {
                dup |= strcmp(out.v[d], full) == 0;
            }
            int bad = !dup && list_push(&out, full) != 0;
            curl_free(scheme);
            curl_free(full);
            if (bad) {
                err_set(err, ERR_NOMEM, "out of memory reading html");
                goto out;
            }
        }
    }
    *urls = out.v;
    *n_out = out.n;
    out.v = NULL;
    out.n = 0;
    rc = 0;
out:
    for (int k = 0; k < 3; k++) {
        fetch_strv_free(raw[k].v, raw[k].n);
    }
    fetch_strv_free(out.v, out.n);
    curl_url_cleanup(u);
    return rc;
}

/* ---- naming ---------------------------------------------------------------------- */

/* The last path segment of url (percent-encoding kept), "" if none; caller frees. */
static int
url_parts(const char *url, char **host, char **segment, struct err *err)
{
    CURLU *u = curl_url();
    char *h = NULL, *path = NULL;
    int rc = -1;

    *host = *segment = NULL;
    if (u == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory naming '%s'", url);
    }
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK) {
        err_set(err, ERR_INVAL, "cannot name a file for '%s': not a URL", url);
        goto out;
    }
    char lh[256];
    fetch_host_normalize(h, lh, sizeof(lh));
    const char *slash = strrchr(path, '/');
    *host = mem_strdup(lh);
    *segment = mem_strdup(slash ? slash + 1 : path);
    if (*host == NULL || *segment == NULL) {
        mem_free(*host);
        mem_free(*segment);
        *host = *segment = NULL;
        err_set(err, ERR_NOMEM, "out of memory naming '%s'", url);
        goto out;
    }
    rc = 0;
out:
    curl_free(h);
    curl_free(path);
    curl_url_cleanup(u);
    return rc;
}

static int
media_type_is(const char *ct, const char *want)
{
    size_t n = 0, wl = strlen(want);

    if (ct == NULL) {
        return 0;
    }
    while (is_space(*ct)) {
        ct++;
    }
    while (ct[n] && ct[n] != ';' && !is_space(ct[n])) {
        n++;
    }
    return n == wl && strncasecmp(ct, want, wl) == 0;
}

static int
ends_with_ci(const char *s, const char *suffix)
{
    size_t n = strlen(s), sl = strlen(suffix);
    return n >= sl && strcasecmp(s + n - sl, suffix) == 0;
}

int
fetch_name(const char *url, const char *ct, char **dir, char **filename, struct err *err)
{
    char *host = NULL, *seg = NULL;
    struct buf d, fn;
    int rc = -1;

    *dir = *filename = NULL;
    buf_init(&d, 4096);
    buf_init(&fn, 4096);
    if (url_parts(url, &host, &seg, err) != 0) {
        return -1;
    }
    buf_printf(&d, "downloads/%s", host);
    if (seg[0] != 0) {
        const char *dot = strrchr(seg, '.');
        size_t stem = dot && dot != seg ? (size_t)(dot - seg) : strlen(seg);
        buf_putc(&d, '/');
        buf_append(&d, seg, stem);
        buf_puts(&fn, seg);
        if (media_type_is(ct, "application/pdf") && !ends_with_ci(seg, ".pdf")) {
            buf_puts(&fn, ".pdf");
        }
    } else {
        buf_puts(&fn, ct && strcasestr(ct, "text/html") ? "index.html" : "download");
    }
    if (buf_failed(&d) || buf_failed(&fn)) {
        buf_err(buf_failed(&d) ? &d : &fn, "the saved file name", err);
        goto out;
    }
    *dir = buf_detach(&d, NULL);
    *filename = buf_detach(&fn, NULL);
    if (*dir == NULL || *filename == NULL) {
        mem_free(*dir);
        mem_free(*filename);
        *dir = *filename = NULL;
        err_set(err, ERR_NOMEM, "out of memory naming '%s'", url);
        goto out;
    }
    rc = 0;
out:
    buf_release(&d);
    buf_release(&fn);
    mem_free(host);
    mem_free(seg);
    return rc;
}

/* ---- layout and manifest ---------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (NUL-terminated), or 0 if it is not one. */
static size_t
utf8_len(const unsigned char *p)
{
    unsigned c = p[0], v, min;
    size_t len;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    v = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) { /* also stops at the terminating NUL */
            return 0;
        }
        v = (v << 6) | (p[i] & 0x3fu);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        return 0;
    }
    return len;
}

/*
 * Appends s as a JSON string. Text from a server (a content type, a URL as the agent
 * gave it) is not trusted to be UTF-8: valid UTF-8 is written as it is, so the manifest
 * reads "café", and each byte that does not start a valid sequence becomes U+FFFD, so
 * the file is always valid JSON (RFC 8259 requires UTF-8).
 */
static void
json_str(struct buf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");

    buf_putc(b, '"');
    while (*p) {
        size_t k = utf8_len(p);
        if (k == 0) {
            buf_puts(b, "\xef\xbf\xbd");
            p++;
        } else if (*p == '"' || *p == '\\') {
            buf_putc(b, '\\');
            buf_putc(b, *p++);
        } else if (*p == '\n') {
            buf_puts(b, "\\n");
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            buf_printf(b, "\\u%04x", *p++);
        } else {
            buf_append(b, p, k);
            p += k;
        }
    }
    buf_putc(b, '"');
}

static int
name_used(char **used, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (used[i] && strcmp(used[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

void
fetch_layout_free(struct fetch_layout *l)
{
    if (l == NULL) {
        return;
    }
    mem_free(l->dir);
    mem_free(l->main_path);
    mem_free(l->manifest_path);
    fetch_strv_free(l->asset_paths, l->n_assets);
    buf_release(&l->manifest);
    mem_free(l);
}

int
fetch_layout_make(const struct fetch_result *r, struct fetch_layout **out, struct err *err)
{
    struct fetch_layout *l = mem_calloc(1, sizeof(*l));
    char *fname = NULL, **used = NULL;
    size_t n_used = 0;
    struct buf tmp;
    int rc = -1;
    size_t nf = 0, ns = 0, nfail = 0;

    *out = NULL;
    buf_init(&tmp, 4096);
    if (l == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory laying out the download");
    }
    buf_init(&l->manifest, (size_t)16 << 20);
    if (fetch_name(r->url, r->content_type, &l->dir, &fname, err) != 0) {
        goto out;
    }
    l->n_assets = r->n_assets;
    l->asset_paths = mem_calloc(r->n_assets + 1, sizeof(char *));
    used = mem_calloc(r->n_assets + 2, sizeof(char *));
    if (l->asset_paths == NULL || used == NULL) {
        err_set(err, ERR_NOMEM, "out of memory laying out the download");
        goto out;
    }
    used[n_used++] = fname;
    used[n_used++] = "manifest.json";
    buf_printf(&tmp, "%s/%s", l->dir, fname);
    l->main_path = buf_detach(&tmp, NULL);
    buf_printf(&tmp, "%s/manifest.json", l->dir);
    l->manifest_path = buf_detach(&tmp, NULL);
    if (l->main_path == NULL || l->manifest_path == NULL) {
        err_set(err, ERR_NOMEM, "out of memory laying out the download");
        goto out;
    }
    for (size_t i = 0; i < r->n_assets; i++) {
        const struct fetch_asset *a = &r->assets[i];
        char *h = NULL, *seg = NULL;
        if (a->state != FETCH_ASSET_FETCHED) {
            continue;
        }
        if (url_parts(a->url, &h, &seg, err) != 0) {
            goto out;
        }
        const char *base = seg[0] ? seg : "asset";
        const char *dot = strrchr(base, '.');
        size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
        buf_reset(&tmp);
        buf_puts(&tmp, base);
        for (int k = 2; name_used(used, n_used, buf_cstr(&tmp)) && k < 100000; k++) {
            buf_reset(&tmp);
            buf_append(&tmp, base, stem);
            buf_printf(&tmp, "-%d%s", k, base + stem);
        }
        mem_free(h);
        mem_free(seg);
        if (buf_failed(&tmp)) {
            buf_err(&tmp, "an asset file name", err);
            goto out;
        }
        char *name = buf_detach(&tmp, NULL);
        if (name == NULL) {
            err_set(err, ERR_NOMEM, "out of memory laying out the download");
            goto out;
        }
        used[n_used++] = name;
        buf_printf(&tmp, "%s/%s", l->dir, name);
        l->asset_paths[i] = buf_detach(&tmp, NULL);
        if (l->asset_paths[i] == NULL) {
            err_set(err, ERR_NOMEM, "out of memory laying out the download");
            goto out;
        }
    }

    struct buf *m = &l->manifest;
    buf_puts(m, "{\n  \"source_url\": ");
    json_str(m, r->url);
    buf_puts(m, ",\n  \"saved_to\": ");
    json_str(m, l->main_path);
    for (int pass = 0; pass < 3; pass++) {
        int want = pass == 0 ? FETCH_ASSET_FETCHED
                             : (pass == 1 ? FETCH_ASSET_SKIPPED : FETCH_ASSET_FAILED);
        size_t count = 0;
        buf_puts(m, pass == 0 ? ",\n  \"assets\": ["
                              : (pass == 1 ? ",\n  \"skipped\": [" : ",\n  \"failed\": ["));
        for (size_t i = 0; i < r->n_assets; i++) {
            const struct fetch_asset *a = &r->assets[i];
            if (a->state != want) {
                continue;
            }
            buf_puts(m, count ? ",\n    {\n      \"url\": " : "\n    {\n      \"url\": ");
            json_str(m, a->url);
            if (want == FETCH_ASSET_FETCHED) {
                buf_puts(m, ",\n      \"saved_to\": ");
                json_str(m, l->asset_paths[i]);
                /* bytes: counted by the gateway; a kept body (no asset sink) says the same */
                buf_printf(m, ",\n      \"bytes\": %llu,\n      \"content_type\": ",
                           (unsigned long long)(a->bytes > a->body.len ? a->bytes : a->body.len));
                json_str(m, a->content_type);
                buf_printf(m, ",\n      \"status\": %ld", a->status);
            } else {
                buf_puts(m, ",\n      \"reason\": ");
                json_str(m, a->reason);
            }
            buf_puts(m, "\n    }");
            count++;
        }
        buf_puts(m, count ? "\n  ]" : "]");
        *(pass == 0 ? &nf : (pass == 1 ? &ns : &nfail)) = count;
    }
    buf_printf(m,
               ",\n  \"totals\": {\n    \"fetched\": %zu,\n    \"skipped\": %zu,\n"
               "    \"failed\": %zu\n  }\n}\n",
               nf, ns, nfail);
    if (buf_failed(m)) {
        buf_err(m, "manifest.json", err);
        goto out;
    }
    *out = l;
    l = NULL;
    rc = 0;
out:
    if (used != NULL) {
        for (size_t i = 2; i < n_used; i++) {
            mem_free(used[i]);
        }
        mem_free(used);
    }
    mem_free(fname);
    buf_release(&tmp);
    fetch_layout_free(l);
    return rc;
}
