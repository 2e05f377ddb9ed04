/*
 * fetch_url.c - the checks a fetch passes before any network work: URL, scheme, host,
 * allowlist, method and the agent's headers.
 *
 * URLs are parsed with curl's own URL API, and the URL handed to curl afterwards is
 * the one curl_url() rendered, so the host we check is the host curl connects to
 * (no parser differential between the check and the request). Hosts are compared
 * lower-cased with one trailing dot dropped; hosts with characters outside
 * [a-z0-9.-_] are refused outright, so an internationalized or percent-encoded name
 * cannot be checked in one form and resolved in another.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <string.h>
#include <strings.h>

#include "fetch/fetch.h"
#include "util/mem.h"

const char *const fetch_default_allowlist[] = {"cdn.jsdelivr.net", "files.pythonhosted.org",
                                               "pypi.org"};
const size_t fetch_default_allowlist_len =
    sizeof(fetch_default_allowlist) / sizeof(fetch_default_allowlist[0]);

const char *
fetch_outcome_name(int outcome)
{
    switch (outcome) {
    case FETCH_OK:
        return "ok";
    case FETCH_DENIED:
        return "fetch_denied";
    case FETCH_DNS:
        return "fetch_dns_failed";
    case FETCH_CONNECT:
        return "fetch_connect_failed";
    case FETCH_TLS:
        return "fetch_tls_failed";
    case FETCH_TIMEOUT:
        return "fetch_timeout";
    case FETCH_TOOBIG:
        return "fetch_too_large";
    case FETCH_CANCELLED:
        return "cancelled";
    case FETCH_HTTP:
        return "fetch_http_error";
    case FETCH_INVAL:
        return "invalid_argument";
    case FETCH_NOMEM:
        return "out_of_memory";
    case FETCH_REDIRECT:
        return "redirect";
    default:
        return "internal_error";
    }
}

void
fetch_host_normalize(const char *in, char *out, size_t size)
{
    size_t n = 0;

    if (size == 0) {
        return;
    }
    for (; in[n] && n + 1 < size; n++) {
        char c = in[n];
        out[n] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    out[n] = 0;
    if (n > 1 && out[n - 1] == '.') {
        out[n - 1] = 0;
    }
}

/* Strips [] from an IPv6 literal in place-copy; returns 1 if s is an IP literal. */
static int
ip_literal(const char *s, unsigned char bin[16], int *family)
{
    char tmp[64];
    size_t n = strlen(s);

    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
        if (n - 2 >= sizeof(tmp)) {
            return 0;
        }
        memcpy(tmp, s + 1, n - 2);
        tmp[n - 2] = 0;
    } else {
        if (n >= sizeof(tmp)) {
            return 0;
        }
        memcpy(tmp, s, n + 1);
    }
    memset(bin, 0, 16);
    if (inet_pton(AF_INET, tmp, bin) == 1) {
        *family = 4;
        return 1;
    }
    if (inet_pton(AF_INET6, tmp, bin) == 1) {
        *family = 6;
        return 1;
    }
    return 0;
}

static int
entry_matches(const char *entry_raw, const char *host, int host_is_ip, const unsigned char *hbin,
              int hfam)
{
    char entry[256];
    unsigned char ebin[16];
    int efam;

    fetch_host_normalize(entry_raw, entry, sizeof(entry));
    if (host_is_ip) {
        /* An IP literal host needs an identical IP entry: "*" and wildcards name
         * hosts, and an operator who means an address must write it. */
        return ip_literal(entry, ebin, &efam) && efam == hfam &&
               memcmp(ebin, hbin, hfam == 4 ? 4 : 16) == 0;
    }
    if (strcmp(entry, "*") == 0) {
        return 1;
    }
    if (entry[0] == '*' && entry[1] == '.' && entry[2] != 0) {
        const char *suffix = entry + 1; /* ".example.com" */
        size_t hl = strlen(host), sl = strlen(suffix);
        return hl > sl && strcmp(host + hl - sl, suffix) == 0;
    }
    return strcmp(entry, host) == 0;
}

int
fetch_host_matches(const char *entry, const char *host_raw)
{
    char host[256];
    unsigned char hbin[16];
    int hfam = 0, is_ip;

    if (entry == NULL || host_raw == NULL || host_raw[0] == 0 || strlen(host_raw) >= sizeof(host) ||
        strlen(entry) >= sizeof(host)) {
        return 0;
    }
    fetch_host_normalize(host_raw, host, sizeof(host));
    is_ip = ip_literal(host, hbin, &hfam);
    return entry_matches(entry, host, is_ip, hbin, hfam);
}

int
fetch_host_allowed(const struct fetch_policy *p, const char *host_raw)
{
    const char *const *list = p->allowlist_given ? p->domain_allowlist : fetch_default_allowlist;
    size_t n = p->allowlist_given ? p->n_domain_allowlist : fetch_default_allowlist_len;
    char host[256];
    unsigned char hbin[16];
    int hfam = 0, is_ip;

    if (host_raw == NULL || host_raw[0] == 0 || strlen(host_raw) >= sizeof(host)) {
        return 0;
    }
    fetch_host_normalize(host_raw, host, sizeof(host));
    is_ip = ip_literal(host, hbin, &hfam);
    for (size_t i = 0; i < n; i++) {
        if (list[i] != NULL && entry_matches(list[i], host, is_ip, hbin, hfam)) {
            return 1;
        }
    }
    return 0;
}

static int
host_chars_ok(const char *h)
{
    for (; *h; h++) {
        char c = *h;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_' || c == ':')) {
            return 0;
        }
    }
    return 1;
}

int
fetch_url_check(const struct fetch_policy *p, const char *url, char **norm, char **host_out,
                struct err *err)
{
    CURLU *u = NULL;
    char *scheme = NULL, *chost = NULL, *full = NULL;
    char host[256];
    int rc = -1;
    CURLUcode uc;

    *norm = NULL;
    *host_out = NULL;
    if (url == NULL || url[0] == 0) {
        return err_set(err, ERR_INVAL, "url is empty; give an absolute http or https URL");
    }
    if (strlen(url) > FETCH_MAX_URL_LEN) {
        return err_set(err, ERR_INVAL, "url is longer than %d bytes; shorten it",
                       FETCH_MAX_URL_LEN);
    }
    u = curl_url();
    if (u == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory parsing url");
    }
    uc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
    if (uc != CURLUE_OK) {
        err_set(err, ERR_INVAL,
                "'%s' is not an absolute URL (%s); give one like "
                "'https://example.com/page'",
                url, curl_url_strerror(uc));
        goto out;
    }
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK || scheme == NULL) {
        err_set(err, ERR_INVAL, "'%s' has no scheme; give an http or https URL", url);
        goto out;
    }
    if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0) {
        err_set(err, ERR_DENIED,
                "scheme '%s' of '%s' is not allowed; only http and https "
                "URLs can be fetched",
                scheme, url);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_HOST, &chost, 0) != CURLUE_OK || chost == NULL || chost[0] == 0) {
        err_set(err, ERR_DENIED, "'%s' has no host; give an http or https URL with a host", url);
        goto out;
    }
    if (strlen(chost) >= sizeof(host)) {
        err_set(err, ERR_DENIED, "the host of '%s' is too long", url);
        goto out;
    }
    fetch_host_normalize(chost, host, sizeof(host));
    if (host[0] == '[') { /* IPv6 literal: drop the brackets */
        size_t hl = strlen(host);
        memmove(host, host + 1, hl - 1);
        host[hl - 2] = 0;
    }
    if (!host_chars_ok(host)) {
        err_set(err, ERR_DENIED,
                "host '%s' of '%s' has characters other than letters, digits, "
                "'.', '-' and '_'; use its ASCII (punycode) form",
                chost, url);
        goto out;
    }
    if (!fetch_host_allowed(p, host)) {
        err_set(err, ERR_DENIED,
                "host '%s' is not on domain_allowlist; the operator can "
                "allow it with: drun-mcp config add-domain %s",
                host, host);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_URL, &full, 0) != CURLUE_OK || full == NULL) {
        err_set(err, ERR_INVAL, "cannot render '%s' as a URL", url);
        goto out;
    }
    *norm = mem_strdup(full);
    *host_out = mem_strdup(host);
    if (*norm == NULL || *host_out == NULL) {
        mem_free(*norm);
        mem_free(*host_out);
        *norm = *host_out = NULL;
        err_set(err, ERR_NOMEM, "out of memory checking '%s'", url);
        goto out;
    }
    rc = 0;
out:
    curl_free(scheme);
    curl_free(chost);
    curl_free(full);
    curl_url_cleanup(u);
    return rc;
}

/* RFC 9110 token characters. */
static int
is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

int
fetch_method_check(const char *in, char *out, size_t size, struct err *err)
{
    size_t n;

    if (in == NULL) {
        in = "GET";
    }
    n = strlen(in);
    if (n == 0 || n > 32 || n >= size) {
        return err_set(err, ERR_INVAL,
                       "invalid HTTP method: '%.40s'; use a method such as "
                       "GET or POST",
                       in);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (!is_tchar(c)) {
            return err_set(err, ERR_INVAL,
                           "invalid HTTP method: '%.40s'; a method has only "
                           "letters, digits and !#$%%&'*+-.^_`|~",
                           in);
        }
        out[i] = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : (char)c;
    }
    out[n] = 0;
    return 0;
}

int
fetch_header_check(const struct fetch_header *h, struct err *err)
{
    /* Framing headers are the daemon's business: a forged Content-Length or
     * Transfer-Encoding desynchronizes the request, and Host would let the request
     * claim to be for a host the allowlist never saw. */
    static const char *const reserved[] = {
        "host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "expect"};
    size_t n;

    if (h->name == NULL || h->name[0] == 0) {
        return err_set(err, ERR_INVAL, "a header has an empty name; give each header a name");
    }
    n = strlen(h->name);
    if (n > 256) {
        return err_set(err, ERR_INVAL, "header name '%.40s...' is longer than 256 bytes", h->name);
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_tchar((unsigned char)h->name[i])) {
            return err_set(err, ERR_INVAL,
                           "header name '%.64s' has a character that is not "
                           "allowed in a header name; use letters, digits and '-'",
                           h->name);
        }
    }
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
        if (strcasecmp(h->name, reserved[i]) == 0) {
            return err_set(err, ERR_INVAL, "header '%s' is set by drun itself; leave it out",
                           h->name);
        }
    }
    if (h->value == NULL) {
        return err_set(err, ERR_INVAL, "header '%.64s' has no value", h->name);
    }
    if (strlen(h->value) > 8192) {
        return err_set(err, ERR_INVAL, "the value of header '%.64s' is longer than 8192 bytes",
                       h->name);
    }
    for (const char *v = h->value; *v; v++) {
        if (*v == '\r' || *v == '\n') {
            return err_set(err, ERR_INVAL,
                           "the value of header '%.64s' has a line break; "
                           "header values must be one line",
                           h->name);
        }
    }
    return 0;
}

int
fetch_resolve_check(const char *entry, struct err *err)
{
    const char *c1, *c2, *p;
    char addr[64];
    unsigned char bin[16];
    long port = 0;

    if (entry == NULL || (c1 = strchr(entry, ':')) == NULL || c1 == entry ||
        (c2 = strchr(c1 + 1, ':')) == NULL || c2 == c1 + 1 || c2[1] == 0) {
        return err_set(err, ERR_INVAL,
                       "fetch_resolve entry '%s' is not 'host:port:address'; "
                       "write it like 'example.com:443:203.0.113.7'",
                       entry ? entry : "");
    }
    for (p = c1 + 1; p < c2; p++) {
        if (*p < '0' || *p > '9' || port > 65535) {
            break;
        }
        port = port * 10 + (*p - '0');
    }
    if (p != c2 || port < 1 || port > 65535) {
        return err_set(err, ERR_INVAL, "fetch_resolve entry '%s' has a bad port; use 1 to 65535",
                       entry);
    }
    for (p = c2 + 1; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n >= 2 && p[0] == '[' && p[n - 1] == ']') {
            p++;
            n -= 2;
        }
        if (n == 0 || n >= sizeof(addr)) {
            return err_set(err, ERR_INVAL,
                           "fetch_resolve entry '%s' has an empty or overlong "
                           "address",
                           entry);
        }
        memcpy(addr, p, n);
        addr[n] = 0;
        if (inet_pton(AF_INET, addr, bin) != 1 && inet_pton(AF_INET6, addr, bin) != 1) {
            return err_set(err, ERR_INVAL,
                           "fetch_resolve entry '%s': '%s' is not an IP "
                           "address",
                           entry, addr);
        }
        p = end ? end + 1 : p + n + (p[n] == ']' ? 1 : 0);
        if (end == NULL) {
            break;
        }
    }
    return 0;
}
