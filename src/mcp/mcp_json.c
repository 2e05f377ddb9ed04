/*
 * mcp_json.c - UTF-8 validation of byte strings. The strict check of whole lines is in
 * mcp_json_check.c; see mcp_json.h for why it runs before cJSON.
 */
#include "mcp/mcp_json.h"

int
mcp_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        unsigned c = p[i];
        size_t need;
        unsigned cp, min;

        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1, cp = c & 0x1f, min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2, cp = c & 0x0f, min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            goto bad; /* continuation byte, overlong lead (c0, c1) or past f4 */
        }
        if (n - i <= need) {
            goto bad;
        }
        for (size_t k = 1; k <= need; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                goto bad;
            }
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            goto bad;
        }
        i += need + 1;
    }
    return 1;
bad:
    if (bad_at != NULL) {
        *bad_at = i;
    }
    return 0;
}
