/*
 * hash.c - SHA-256 through libcrypto's EVP interface, and hex. See hash.h.
 */
#include "util/hash.h"

#include <openssl/evp.h>
#include <stdlib.h>

#include "util/mem.h"
#include <string.h>

struct hash_ctx {
    EVP_MD_CTX *md;
};

void
hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN])
{
    unsigned int n = HASH_LEN;

    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != HASH_LEN) {
        abort(); /* libcrypto cannot compute SHA-256: nothing can be stored safely */
    }
}

struct hash_ctx *
hash_new(void)
{
    struct hash_ctx *h = mem_alloc(sizeof(*h));

    if (h == NULL) {
        return NULL;
    }
    h->md = EVP_MD_CTX_new();
    if (h->md == NULL || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->md);
        mem_free(h);
        return NULL;
    }
    return h;
}

void
hash_update(struct hash_ctx *h, const void *data, size_t len)
{
    if (EVP_DigestUpdate(h->md, data, len) != 1) {
        abort();
    }
}

void
hash_final(struct hash_ctx *h, uint8_t out[HASH_LEN])
{
    unsigned int n = HASH_LEN;

    if (EVP_DigestFinal_ex(h->md, out, &n) != 1 || n != HASH_LEN) {
        abort();
    }
    hash_free(h);
}

void
hash_free(struct hash_ctx *h)
{
    if (h != NULL) {
        EVP_MD_CTX_free(h->md);
        mem_free(h);
    }
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
