/*
 * hash.c - SHA-256 through libcrypto, and hex. See hash.h.
 *
 * libcrypto's low-level SHA256_Init/Update/Final, not its EVP interface: EVP fetches the
 * algorithm and allocates its context inside libcrypto, so under memory pressure
 * EVP_Digest and EVP_DigestUpdate fail, and a caller that cannot fail (hashing is on every
 * store path) had only abort() left. The low-level functions work on memory we own and
 * cannot fail, so hashing never allocates except the one context hash_new() returns, and
 * that failure is an ordinary NULL the callers already handle. OpenSSL 3 marks these
 * functions deprecated in favour of EVP; they remain in its API, and the warning is
 * silenced here only.
 */
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "util/hash.h"

#include <openssl/sha.h>
#include <string.h>

#include "util/mem.h"

struct hash_ctx {
    SHA256_CTX sha;
};

void
hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN])
{
    SHA256_CTX sha;

    SHA256_Init(&sha);
    SHA256_Update(&sha, data, len);
    SHA256_Final(out, &sha);
    memset(&sha, 0, sizeof(sha));
}

struct hash_ctx *
hash_new(void)
{
    struct hash_ctx *h = mem_alloc(sizeof(*h));

    if (h == NULL) {
        return NULL;
    }
    SHA256_Init(&h->sha);
    return h;
}

void
hash_update(struct hash_ctx *h, const void *data, size_t len)
{
    SHA256_Update(&h->sha, data, len);
}

void
hash_final(struct hash_ctx *h, uint8_t out[HASH_LEN])
{
    SHA256_Final(out, &h->sha);
    hash_free(h);
}

void
hash_free(struct hash_ctx *h)
{
    mem_free(h);
}

void
hex_encode(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0xf];
    }
    out[2 * len] = '\0';
}

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

int
hex_decode(const char *in, uint8_t *out, size_t len)
{
    if (strlen(in) != 2 * len) {
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        int hi = hex_value(in[2 * i]);
        int lo = hex_value(in[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return -1;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
