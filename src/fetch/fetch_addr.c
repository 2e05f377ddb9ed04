/*
 * fetch_addr.c - which addresses a fetch may connect to.
 *
 * The allowlist speaks of names, but a name can point anywhere: an allowed host whose
 * DNS answer is 127.0.0.1, 10.0.0.5 or 169.254.169.254 (the cloud metadata service)
 * would turn the gateway into a way into the operator's own network (SSRF), and a
 * name that resolves to a public address once and a private one later (DNS rebinding)
 * defeats any check made before curl connects. So fetch.c calls fetch_addr_allowed()
 * from curl's open-socket callback, with the exact address about to be connected to.
 *
 * IPv6 forms that carry an IPv4 address (IPv4-mapped ::ffff:a.b.c.d, the deprecated
 * IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 6to4 2002::/16) are classified as
 * the IPv4 address they reach, so ::ffff:127.0.0.1 is loopback like 127.0.0.1.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/fetch.h"

struct net {
    int family; /* 4 or 6 */
    uint8_t a[16];
};

static int
parse_addr(const char *s, struct net *n)
{
    memset(n, 0, sizeof(*n));
    if (inet_pton(AF_INET, s, n->a) == 1) {
        n->family = 4;
        return 0;
    }
    if (inet_pton(AF_INET6, s, n->a) == 1) {
        n->family = 6;
        return 0;
    }
    return -1;
}

/* 1 if the first `bits` bits of a and b agree. */
static int
prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned full = bits / 8, rest = bits % 8;

    if (memcmp(a, b, full) != 0) {
        return 0;
    }
    if (rest == 0) {
        return 1;
    }
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == (b[full] & mask);
}

/* If an IPv6 address carries an IPv4 one it reaches, copies it to v4 and returns 1. */
static int
embedded_v4(const uint8_t *a, uint8_t v4[4])
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t zero[12] = {0};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0) {
        memcpy(v4, a + 12, 4);
        return 1;
    }
    /* ::a.b.c.d, but not :: and ::1 themselves */
    if (memcmp(a, zero, 12) == 0 && (a[12] | a[13] | a[14]) != 0) {
        memcpy(v4, a + 12, 4);
        return 1;
    }
    if (a[0] == 0x20 && a[1] == 0x02) { /* 6to4 */
        memcpy(v4, a + 2, 4);
        return 1;
    }
    return 0;
}

static int
classify_v4(const uint8_t *a)
{
    if (a[0] == 0) {
        return FETCH_ADDR_UNSPECIFIED;
    }
    if (a[0] == 127) {
        return FETCH_ADDR_LOOPBACK;
    }
    if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168) ||
        (a[0] == 100 && (a[1] & 0xc0) == 64)) {
        return FETCH_ADDR_PRIVATE;
    }
    if (a[0] == 169 && a[1] == 254) {
        return FETCH_ADDR_LINKLOCAL;
    }
    if ((a[0] & 0xf0) == 224) {
        return FETCH_ADDR_MULTICAST;
    }
    if ((a[0] & 0xf0) == 240 || (a[0] == 192 && a[1] == 0 && (a[2] == 0 || a[2] == 2)) ||
        (a[0] == 198 && (a[1] & 0xfe) == 18) || (a[0] == 198 && a[1] == 51 && a[2] == 100) ||
        (a[0] == 203 && a[1] == 0 && a[2] == 113)) {
        return FETCH_ADDR_RESERVED;
    }
    return FETCH_ADDR_PUBLIC;
}

static int
classify_v6(const uint8_t *a)
{
    static const uint8_t zero[16] = {0};
    static const uint8_t doc[4] = {0x20, 0x01, 0x0d, 0xb8};
    uint8_t v4[4];

    if (memcmp(a, zero, 16) == 0) {
        return FETCH_ADDR_UNSPECIFIED;
    }
    if (memcmp(a, zero, 15) == 0 && a[15] == 1) {
        return FETCH_ADDR_LOOPBACK;
    }
    if (embedded_v4(a, v4)) {
        return classify_v4(v4);
    }
    if ((a[0] & 0xfe) == 0xfc || (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)) {
        return FETCH_ADDR_PRIVATE; /* ULA fc00::/7, old site-local fec0::/10 */
    }
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) {
        return FETCH_ADDR_LINKLOCAL;
    }
    if (a[0] == 0xff) {
        return FETCH_ADDR_MULTICAST;
    }
    if (memcmp(a, doc, 4) == 0 || (a[0] == 0x01 && a[1] == 0 && memcmp(a + 2, zero, 6) == 0)) {
        return FETCH_ADDR_RESERVED; /* 2001:db8::/32 documentation, 100::/64 discard */
    }
    return FETCH_ADDR_PUBLIC;
}

int
fetch_addr_classify(const char *addr)
{
    struct net n;

    if (addr == NULL || parse_addr(addr, &n) != 0) {
        return FETCH_ADDR_INVALID;
    }
    return n.family == 4 ? classify_v4(n.a) : classify_v6(n.a);
}

const char *
fetch_addr_class_name(int cls)
{
    switch (cls) {
    case FETCH_ADDR_PUBLIC:
        return "public";
    case FETCH_ADDR_LOOPBACK:
        return "loopback";
    case FETCH_ADDR_PRIVATE:
        return "private";
    case FETCH_ADDR_LINKLOCAL:
        return "link-local";
    case FETCH_ADDR_MULTICAST:
        return "multicast";
    case FETCH_ADDR_UNSPECIFIED:
        return "unspecified";
    case FETCH_ADDR_RESERVED:
        return "reserved";
    default:
        return "invalid";
    }
}

/* Parses "addr/len" or a bare address; returns 0 and fills net and bits, or -1. */
static int
parse_cidr(const char *cidr, struct net *n, unsigned *bits)
{
    char host[64];
    const char *slash = strchr(cidr, '/');
    size_t hl = slash ? (size_t)(slash - cidr) : strlen(cidr);

    if (hl == 0 || hl >= sizeof(host)) {
        return -1;
    }
    memcpy(host, cidr, hl);
    host[hl] = 0;
    if (parse_addr(host, n) != 0) {
        return -1;
    }
    unsigned max = n->family == 4 ? 32 : 128;
    if (slash == NULL) {
        *bits = max;
        return 0;
    }
    const char *d = slash + 1;
    unsigned v = 0;
    if (*d == 0 || strlen(d) > 3) {
        return -1;
    }
    for (; *d; d++) {
        if (*d < '0' || *d > '9') {
            return -1;
        }
        v = v * 10 + (unsigned)(*d - '0');
    }
    if (v > max) {
        return -1;
    }
    *bits = v;
    return 0;
}

int
fetch_cidr_check(const char *cidr, struct err *err)
{
    struct net n;
    unsigned bits;

    if (cidr == NULL || parse_cidr(cidr, &n, &bits) != 0) {
        return err_set(err, ERR_INVAL,
                       "fetch_allow_cidrs entry '%s' is not an address or address/prefix; "
                       "write it like '10.1.0.0/16' or 'fd00::/8'",
                       cidr ? cidr : "");
    }
    return 0;
}

int
fetch_cidr_match(const char *cidr, const char *addr)
{
    struct net c, a;
    unsigned bits;
    uint8_t v4[4];

    if (cidr == NULL || addr == NULL || parse_cidr(cidr, &c, &bits) != 0 ||
        parse_addr(addr, &a) != 0) {
        return 0;
    }
    if (c.family == a.family) {
        return prefix_eq(c.a, a.a, bits);
    }
    /* an IPv4 entry also covers the IPv6 forms that reach that IPv4 address */
    if (c.family == 4 && a.family == 6 && embedded_v4(a.a, v4)) {
        return prefix_eq(c.a, v4, bits);
    }
    return 0;
}

int
fetch_addr_allowed(const struct fetch_policy *p, const char *addr, struct err *err)
{
    int cls = fetch_addr_classify(addr);

    if (cls == FETCH_ADDR_PUBLIC) {
        return 0;
    }
    if (cls != FETCH_ADDR_INVALID) {
        if (p->allow_private) {
            return 0;
        }
        for (size_t i = 0; i < p->n_allow_cidrs; i++) {
            if (fetch_cidr_match(p->allow_cidrs[i], addr)) {
                return 0;
            }
        }
    }
    if (cls == FETCH_ADDR_INVALID) {
        return err_set(err, ERR_DENIED, "address '%s' is not a plain IPv4 or IPv6 address",
                       addr ? addr : "");
    }
    return err_set(err, ERR_DENIED,
                   "address '%s' is %s; the operator can allow it with fetch_allow_cidrs = "
                   "[\"%s\"] (or fetch_allow_private = true)",
                   addr, fetch_addr_class_name(cls), addr);
}
