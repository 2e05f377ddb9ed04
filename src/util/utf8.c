/*
 * utf8.c - one UTF-8 check for the whole program (see utf8.h).
 *
 * The second byte's range depends on the lead byte (Unicode's table 3-7): that one
 * comparison rules out overlong forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and
 * code points past U+10FFFF (F4 90..BF); C0, C1 and F5..FF never lead a sequence.
 */
#include "util/utf8.h"

size_t
utf8_seq(const void *data, size_t n)
{
    const unsigned char *p = data;
    unsigned char lo = 0x80, hi = 0xbf;
    size_t need;

    if (p[0] < 0x80) {
        return 1;
    }
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        need = 2;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        need = 3;
        lo = p[0] == 0xe0 ? 0xa0 : 0x80; /* no overlong forms */
        hi = p[0] == 0xed ? 0x9f : 0xbf; /* no surrogates */
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        need = 4;
        lo = p[0] == 0xf0 ? 0x90 : 0x80; /* no overlong forms */
        hi = p[0] == 0xf4 ? 0x8f : 0xbf; /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    if (n < need || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < need; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf) {
            return 0;
        }
    }
    return need;
}

int
utf8_valid(const void *data, size_t n, size_t *bad_at)
{
    const unsigned char *p = data;
    size_t i = 0, k;

    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        k = utf8_seq(p + i, n - i);
        if (k == 0) {
            if (bad_at != NULL) {
                *bad_at = i;
            }
            return 0;
        }
        i += k;
    }
    return 1;
}
