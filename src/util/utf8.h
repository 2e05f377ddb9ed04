/*
 * utf8.h - UTF-8 validation, strict to RFC 3629: overlong forms, surrogates
 * (U+D800..U+DFFF), code points past U+10FFFF, stray continuation bytes and sequences
 * cut short are all invalid. Every layer that decides "is this text" asks here, so the
 * transport, workspace keys, file reads and drun-admin's escaping agree byte for byte.
 */
#ifndef DRUN_UTIL_UTF8_H
#define DRUN_UTIL_UTF8_H

#include <stddef.h>

/*
 * The length (1 to 4) of the valid UTF-8 sequence at p, reading at most n bytes (n >= 1),
 * or 0 if the bytes there are not one. A NUL byte is a valid sequence of length 1.
 */
size_t utf8_seq(const void *p, size_t n);

/* 1 if p[0..n) is valid UTF-8, else 0 with the offset of the first bad byte in *bad_at
 * (may be NULL). */
int utf8_valid(const void *p, size_t n, size_t *bad_at);

#endif
