/*
 * fetch.h - the libcurl gateway behind session_fetch: the only way out to the network.
 *
 * The daemon makes the request itself, for the agent, under the operator's policy:
 *
 *   - only http and https, only to hosts on the allowlist, checked again on every
 *     redirect hop (we follow redirects ourselves, at most FETCH_MAX_REDIRECTS);
 *   - the address curl is about to connect to is checked at connect time, so a name
 *     that resolves (or re-resolves: DNS rebinding) to loopback, a private network,
 *     link-local (cloud metadata at 169.254.169.254), multicast or unspecified is
 *     refused unless the operator allowed private addresses or a matching CIDR;
 *   - body bytes (decoded bytes for compressed bodies), header bytes, assets and
 *     bytes per asset, connect and total time are capped while streaming;
 *   - credential headers from the operator's config are added for their domain only
 *     (an exact host or "*.example.com" for its subdomains), never once a redirect
 *     chain has left it, and never appear in anything returned.
 *
 * Transfers run on the caller's libuv loop (curl's multi interface driven by uv_poll
 * and uv_timer), so other calls carry on; fetch_run() is a blocking wrapper for tests
 * and tools. The module also holds the pure parts of session_fetch: URL checks and
 * allowlist matching (fetch_url.c), address classification (fetch_addr.c), HTML asset
 * collection, the saving layout and the manifest text (fetch_html.c).
 */
#ifndef DRUN_FETCH_FETCH_H
#define DRUN_FETCH_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

#define FETCH_MAX_REDIRECTS 10

/* Defaults used when a policy field is 0 (the reference's values where it has one). */
#define FETCH_DEFAULT_TIMEOUT_MS         60000
#define FETCH_DEFAULT_CONNECT_TIMEOUT_MS 30000
#define FETCH_DEFAULT_MAX_BYTES          ((uint64_t)64 << 20)
#define FETCH_DEFAULT_MAX_HEADER_BYTES   ((size_t)64 << 10)
#define FETCH_DEFAULT_MAX_ASSETS         60
#define FETCH_DEFAULT_MAX_ASSET_BYTES    ((uint64_t)20 << 20)
#define FETCH_DEFAULT_LOW_SPEED_BYTES    1  /* bytes per second ... */
#define FETCH_DEFAULT_LOW_SPEED_SECS     30 /* ... below which for this long is a stall */
#define FETCH_MAX_AGENT_HEADERS          64
#define FETCH_MAX_URL_LEN                8192

/* How a fetch (or one hop of it) ended. Names for tool errors: fetch_outcome_name(). */
enum fetch_outcome {
    FETCH_OK = 0,    /* a response arrived (any HTTP status, 4xx/5xx included) */
    FETCH_DENIED,    /* policy refused: scheme, host, address or redirect count */
    FETCH_DNS,       /* the name did not resolve */
    FETCH_CONNECT,   /* the TCP connection failed */
    FETCH_TLS,       /* the TLS handshake or certificate check failed */
    FETCH_TIMEOUT,   /* connect, total or low-speed time limit */
    FETCH_TOOBIG,    /* body, decoded body or header bytes passed their cap */
    FETCH_CANCELLED, /* fetch_cancel() was called */
    FETCH_HTTP,      /* the server spoke broken HTTP, closed early, bad encoding */
    FETCH_INVAL,     /* the request itself is malformed (bad header, method, URL) */
    FETCH_NOMEM,     /* out of memory */
    FETCH_REDIRECT,  /* a hop answered with a redirect (hop records only) */
    FETCH_OUTCOME_COUNT
};

/* Returns a stable name: "ok", "fetch_denied", "fetch_dns_failed", ... */
const char *fetch_outcome_name(int outcome);

/* A header from the operator's config whose value the agent never sees. */
struct fetch_credential {
    const char *domain; /* exact host or "*.x.y" (lower-cased, trailing dot dropped) */
    const char *header; /* header name, e.g. "Authorization" */
    const char *value;  /* resolved by the caller from the daemon's environment */
};

/*
 * The operator's fetch policy. A zeroed struct is the reference's defaults: the
 * default allowlist, default timeouts and caps, private addresses refused. The caller
 * owns every pointer; it must outlive the fetch.
 */
struct fetch_policy {
    int allowlist_given;                 /* 0: key absent, use the reference's defaults */
    const char *const *domain_allowlist; /* with allowlist_given: exact, "*.x.y" or "*" */
    size_t n_domain_allowlist;           /* 0 with allowlist_given: nothing is allowed */
    int64_t timeout_ms;                  /* total time per request (and per asset) */
    int64_t connect_timeout_ms;
    uint64_t max_bytes;       /* body bytes (decoded) of the main response */
    size_t max_header_bytes;  /* all header bytes of one response */
    size_t max_assets;        /* assets fetched for an HTML page */
    uint64_t max_asset_bytes; /* body bytes per asset */
    long low_speed_bytes;     /* with low_speed_secs: abort a transfer slower than this */
    long low_speed_secs;
    int allow_private;              /* fetch_allow_private */
    const char *const *allow_cidrs; /* fetch_allow_cidrs: "10.1.0.0/16", "fd00::/8" */
    size_t n_allow_cidrs;
    const char *const *resolve; /* fetch_resolve: "host:port:addr" pins */
    size_t n_resolve;
    const struct fetch_credential *credentials; /* [[fetch_credentials]] */
    size_t n_credentials;
};

struct fetch_header {
    const char *name;
    const char *value;
};

/*
 * Receives body bytes as they arrive (the main response only, after decoding). Returns
 * 0 to go on or -1 to stop the fetch (it then ends with FETCH_HTTP and `why`, which the
 * sink may fill). With a sink the body is not kept in the result.
 */
typedef int (*fetch_sink_fn)(void *ud, const void *data, size_t len, struct err *why);
/* A sink's (or asset sink's) third answer: take none of these bytes now. The transfer
 * pauses (curl keeps the bytes, the socket is not read) until fetch_resume, which hands
 * the same bytes to the sink again. */
#define FETCH_SINK_PAUSE 1

/*
 * Receives an asset's body bytes as they arrive (asset is the index into the result's
 * assets[]; only the final response of the asset's redirect chain is passed, whatever
 * its status). Returns 0 or -1 to fail that asset (the fetch goes on). The asset's
 * state in the result (FETCH_ASSET_FETCHED or not) says whether the bytes count. With
 * an asset sink asset bodies are not kept in the result.
 */
typedef int (*fetch_asset_sink_fn)(void *ud, size_t asset, const void *data, size_t len,
                                   struct err *why);

/* Resumes a transfer a sink paused (FETCH_SINK_PAUSE); on the loop's thread, never from
 * inside a callback of f. No-op when nothing is paused or the fetch has ended. */
struct fetch;
void fetch_resume(struct fetch *f);
/* 1 when a sink may answer FETCH_SINK_PAUSE now. 0 while the response is content-encoded:
 * curl would keep decoding into a buffer of its own while paused (up to 64 MiB, then a
 * failure), so such a sink must take the bytes, waiting if it has to. */
int fetch_may_pause(const struct fetch *f);

/*
 * A thread-safe wake-up of the loop (a uv_async handle): fetch_waker_send may be called
 * from any thread; fn(ud) then runs on the loop's thread (sends made before it runs are
 * coalesced into one call). fetch_waker_close stops it; its memory is freed once the
 * loop has closed the handle. For a sink that pauses when its consumer thread is full.
 */
struct fetch_waker;
struct fetch_waker *fetch_waker_new(void *loop, void (*fn)(void *ud), void *ud, struct err *err);
void fetch_waker_send(struct fetch_waker *w);
void fetch_waker_close(struct fetch_waker *w);

struct fetch_request {
    const char *url;
    const char *method;                 /* NULL: GET; upper-cased; token characters only */
    const struct fetch_header *headers; /* the agent's headers, validated */
    size_t n_headers;
    const void *body; /* sent as given; NULL for none */
    size_t body_len;
    int collect_assets; /* for an HTML response, fetch its assets (reference §5 step 9) */
    fetch_sink_fn sink; /* NULL: keep the body in the result (at most max_bytes) */
    void *sink_ud;      /* for sink and asset_sink */
    /* NULL: keep asset bodies in the result (at most max_asset_bytes each) */
    fetch_asset_sink_fn asset_sink;
};

/* One request hop, for the audit log. Holds no credential value. */
struct fetch_hop {
    int asset;        /* -1 for the main request, else the index into assets[] */
    char *url;        /* the URL requested on this hop */
    char ip[48];      /* the address connected to (CURLINFO_PRIMARY_IP), or "" */
    long status;      /* HTTP status, 0 if none arrived */
    uint64_t bytes;   /* body bytes received on this hop */
    int outcome;      /* enum fetch_outcome; FETCH_REDIRECT for a followed redirect */
    int credentialed; /* 1 if a credential header was sent on this hop */
    char detail[256]; /* why it ended (the error message), "" if ok */
};

enum fetch_asset_state { FETCH_ASSET_FETCHED, FETCH_ASSET_SKIPPED, FETCH_ASSET_FAILED };

struct fetch_asset {
    char *url;        /* resolved absolute URL */
    int state;        /* enum fetch_asset_state */
    char reason[256]; /* skipped/failed: "domain_not_allowed", "http_404", or the error */
    long status;
    char *content_type; /* "" if none */
    struct buf body;    /* fetched bytes (at most max_asset_bytes), unless an asset sink */
    uint64_t bytes;     /* body bytes of the asset's final response */
};

struct fetch_result {
    int outcome;        /* FETCH_OK, or why the main request failed */
    struct err err;     /* the message for a failure; code is an ERR_* */
    long status;        /* HTTP status of the final response */
    char *content_type; /* "" if none */
    char *url;          /* the URL as requested (normalized) */
    char *final_url;    /* after redirects */
    uint64_t bytes;     /* body bytes received (decoded) */
    /* The body, unless a sink took it. With a sink and collect_assets, an HTML body
     * (Content-Type text/html) is also kept here, bounded by max_bytes, because its
     * assets are collected from its text. */
    struct buf body;
    struct fetch_hop *hops;
    size_t n_hops;
    struct fetch_asset *assets; /* in the reference's order, de-duplicated */
    size_t n_assets;
};

/* Frees a result and everything in it; NULL is a no-op. */
void fetch_result_free(struct fetch_result *r);

/* ---- running fetches ------------------------------------------------------------ */

struct fetch; /* opaque: one fetch in flight */

struct fetch_callbacks {
    /* Called as bytes arrive (total body bytes so far of the current transfer). */
    void (*on_progress)(void *ud, uint64_t bytes_received);
    /* Called once at the end; the callee owns `r` (fetch_result_free). */
    void (*on_done)(void *ud, struct fetch_result *r);
    void *ud;
};

/*
 * Starts a fetch on `loop` (a uv_loop_t *, kept void here so callers need not include
 * uv.h). Policy, request and callbacks are copied where needed; the strings they point
 * to must stay valid until on_done. Checks that need no network (URL, scheme, host,
 * method, headers) run before this returns: on such an error it returns NULL, fills err
 * (ERR_DENIED or ERR_INVAL) and never calls on_done. Otherwise on_done is called
 * exactly once, from the loop, and the handle is invalid afterwards.
 */
struct fetch *fetch_start(void *loop, const struct fetch_policy *policy,
                          const struct fetch_request *req, const struct fetch_callbacks *cb,
                          struct err *err);

/*
 * Aborts a fetch in flight. on_done follows from the loop (not from inside this call)
 * with FETCH_CANCELLED and no body or assets kept. Only valid before on_done.
 */
void fetch_cancel(struct fetch *f);

/*
 * Runs one fetch to the end on a private loop. Returns 0 with *out set (the caller
 * frees it; *out->outcome may still be a failure such as FETCH_TIMEOUT), or -1 with err
 * filled when the request was refused before any network work.
 */
int fetch_run(const struct fetch_policy *policy, const struct fetch_request *req,
              struct fetch_result **out, struct err *err);

/* Fills err from a finished result's outcome; returns 0 for FETCH_OK, else -1. */
int fetch_result_err(const struct fetch_result *r, struct err *err);

/* ---- checks without network (fetch_url.c, fetch_addr.c) -------------------------- */

/* The reference's allowlist when domain_allowlist is absent. */
extern const char *const fetch_default_allowlist[];
extern const size_t fetch_default_allowlist_len;

/*
 * Parses an absolute URL and checks it against the policy: scheme http/https, a host,
 * a host on the allowlist. On success *norm (caller frees with mem_free) is the URL as
 * curl will request it and *host the normalized host (lower-case, no trailing dot,
 * IPv6 without brackets). On failure returns -1 with ERR_DENIED (the message names
 * the rule and the operator's fix) or ERR_INVAL (not a URL).
 */
int fetch_url_check(const struct fetch_policy *p, const char *url, char **norm, char **host,
                    struct err *err);

/* Returns 1 if the normalized host is allowed by the policy's allowlist, else 0. */
int fetch_host_allowed(const struct fetch_policy *p, const char *host);

/*
 * Returns 1 if host matches one allowlist-style entry: exact, "*.x.y" (subdomains only)
 * or "*", after lower-casing and dropping a trailing dot; an IP literal only an
 * identical IP entry. Also how [[fetch_credentials]] domains are matched.
 */
int fetch_host_matches(const char *entry, const char *host);

/* Lower-cases and drops one trailing dot into out (size >= strlen(in)+1). */
void fetch_host_normalize(const char *in, char *out, size_t size);

/* Validates a method into out (upper-cased, token chars, 1..32 long); -1 ERR_INVAL. */
int fetch_method_check(const char *in, char *out, size_t size, struct err *err);

/* Validates an agent header: name is a token, value has no CR, LF or NUL. */
int fetch_header_check(const struct fetch_header *h, struct err *err);

enum fetch_addr_class {
    FETCH_ADDR_PUBLIC = 0,
    FETCH_ADDR_LOOPBACK,
    FETCH_ADDR_PRIVATE,   /* RFC 1918, CGNAT 100.64/10, ULA fc00::/7 */
    FETCH_ADDR_LINKLOCAL, /* 169.254/16 (cloud metadata), fe80::/10 */
    FETCH_ADDR_MULTICAST,
    FETCH_ADDR_UNSPECIFIED, /* 0.0.0.0/8, :: */
    FETCH_ADDR_RESERVED,    /* broadcast, 240/4, documentation, benchmarking */
    FETCH_ADDR_INVALID
};

/* Classifies a textual address; IPv4-mapped/compatible IPv6 is classified as its IPv4. */
int fetch_addr_classify(const char *addr);

/* A stable lower-case name of a class ("loopback", "private", ...). */
const char *fetch_addr_class_name(int cls);

/*
 * Returns 0 if the policy lets a connection go to addr (textual form), else -1 with
 * ERR_DENIED naming the class and the operator's fix. Malformed CIDR entries in the
 * policy are ignored here (fetch_cidr_check reports them).
 */
int fetch_addr_allowed(const struct fetch_policy *p, const char *addr, struct err *err);

/* Validates one fetch_resolve entry: "host:port:addr[,addr...]" (IPv6 in brackets). */
int fetch_resolve_check(const char *entry, struct err *err);

/* Validates one CIDR entry ("10.0.0.0/8", "fd00::/8", a bare address). */
int fetch_cidr_check(const char *cidr, struct err *err);

/* 1 if addr lies inside cidr, 0 if not or either is malformed. */
int fetch_cidr_match(const char *cidr, const char *addr);

/* ---- HTML assets, saving layout, manifest (fetch_html.c) -------------------------- */

/*
 * Collects asset URLs from an HTML page in the reference's order (link stylesheet or
 * *icon href, script src, img src), resolved against base_url, http/https only,
 * de-duplicated. Returns 0 with *urls (caller frees with fetch_strv_free) and *n.
 * At most `max` URLs are returned; more is not an error here (the caller reports it).
 */
int fetch_html_assets(const char *html, size_t len, const char *base_url, char ***urls, size_t *n,
                      struct err *err);

/* Frees an array of n strings from this module; NULL is a no-op. */
void fetch_strv_free(char **v, size_t n);

/* Where session_fetch saves a response (reference §5 step 8 and step 9). */
struct fetch_layout {
    char *dir;           /* "downloads/<host>/<slug>" or "downloads/<host>" */
    char *main_path;     /* dir + "/" + filename */
    char *manifest_path; /* dir + "/manifest.json" */
    char **asset_paths;  /* per result asset: its path if fetched, else NULL */
    size_t n_assets;
    struct buf manifest; /* the manifest.json text */
};

/*
 * Computes the saving layout and manifest text for a finished, successful result.
 * Naming follows the original request URL. Caller frees with fetch_layout_free.
 */
int fetch_layout_make(const struct fetch_result *r, struct fetch_layout **out, struct err *err);
void fetch_layout_free(struct fetch_layout *l);

/*
 * The naming rule alone: for url and content type, fills *dir and *filename (caller
 * frees both with mem_free).
 */
int fetch_name(const char *url, const char *content_type, char **dir, char **filename,
               struct err *err);

#endif
