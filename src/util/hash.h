/*
 * hash.h - SHA-256 (through OpenSSL's libcrypto) and hex encoding.
 *
 * Blobs are named by the SHA-256 of their content; manifests, audit rows and
 * snapshot files all use these 32-byte values.
 */
#ifndef DRUN_UTIL_HASH_H
#define DRUN_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define HASH_LEN     32
#define HASH_HEX_LEN 64

struct hash_ctx; /* opaque incremental state */

/* Hashes `len` bytes into out. Allocates nothing and cannot fail. */
void hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN]);

/* Incremental hashing: new -> update* -> final (which frees the context); only new
 * allocates, so only it can fail. */
struct hash_ctx *hash_new(void); /* NULL on allocation failure */
void hash_update(struct hash_ctx *h, const void *data, size_t len);
void hash_final(struct hash_ctx *h, uint8_t out[HASH_LEN]);
void hash_free(struct hash_ctx *h); /* for abandoning a context; NULL is a no-op */

/* Writes 2*len lower-case hex digits and a NUL into out (size >= 2*len+1). */
void hex_encode(const uint8_t *in, size_t len, char *out);

/* Decodes exactly 2*len hex digits (either case); returns 0 or -1 on a bad digit/length. */
int hex_decode(const char *in, uint8_t *out, size_t len);

#endif
