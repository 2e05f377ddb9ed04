/*
 * mcp_json.c - UTF-8 validation, nesting depth and raw member lookup for incoming lines.
 * See mcp_json.h for why these run before cJSON.
 */
#include "mcp/mcp_json.h"

#include <string.h>

#include <cjson/cJSON.h>

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

int
mcp_json_depth(const char *p, size_t n, int max)
{
    int depth = 0, deepest = 0, in_str = 0;

    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                in_str = 0;
            }
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > max) {
                    return max + 1;
                }
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

static size_t
skip_ws(const char *p, size_t n, size_t i)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')) {
        i++;
    }
    return i;
}

/* Returns the index just past the string starting at p[i] == '"'. */
static size_t
skip_string(const char *p, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (p[i] == '\\') {
            i++;
        } else if (p[i] == '"') {
            return i + 1;
        }
    }
    return n;
}

/* Returns the index just past the value starting at p[i]. */
static size_t
skip_value(const char *p, size_t n, size_t i)
{
    int depth = 0;

    if (i >= n) {
        return n;
    }
    if (p[i] == '"') {
        return skip_string(p, n, i);
    }
    if (p[i] != '[' && p[i] != '{') {
        while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && p[i] != ' ' && p[i] != '\t' &&
               p[i] != '\r' && p[i] != '\n') {
            i++;
        }
        return i;
    }
    for (; i < n; i++) {
        if (p[i] == '"') {
            i = skip_string(p, n, i) - 1;
        } else if (p[i] == '[' || p[i] == '{') {
            depth++;
        } else if (p[i] == ']' || p[i] == '}') {
            if (--depth == 0) {
                return i + 1;
            }
        }
    }
    return n;
}

static int
key_equals(const char *p, size_t len, const char *key)
{
    cJSON *s;
    int eq;

    if (memchr(p, '\\', len) == NULL) {
        return len - 2 == strlen(key) && memcmp(p + 1, key, len - 2) == 0;
    }
    s = cJSON_ParseWithLength(p, len);
    eq = cJSON_IsString(s) && strcmp(s->valuestring, key) == 0;
    cJSON_Delete(s);
    return eq;
}

int
mcp_json_raw_member(const char *p, size_t n, const char *key, const char **start, size_t *len)
{
    size_t i = skip_ws(p, n, 0);

    if (i >= n || p[i] != '{') {
        return -1;
    }
    i = skip_ws(p, n, i + 1);
    while (i < n && p[i] == '"') {
        size_t k0 = i, k1 = skip_string(p, n, i), v0, v1;

        i = skip_ws(p, n, k1);
        if (i >= n || p[i] != ':') {
            return -1;
        }
        v0 = skip_ws(p, n, i + 1);
        v1 = skip_value(p, n, v0);
        if (key_equals(p + k0, k1 - k0, key)) {
            *start = p + v0;
            *len = v1 - v0;
            return 0;
        }
        i = skip_ws(p, n, v1);
        if (i < n && p[i] == ',') {
            i = skip_ws(p, n, i + 1);
        }
    }
    return -1;
}

int
mcp_json_has_nul(const char *p, size_t n)
{
    int in_str = 0;

    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = p[i] == '"';
        } else if (p[i] == '"') {
            in_str = 0;
        } else if (p[i] == '\\' && i + 1 < n) {
            if (p[i + 1] == 'u' && n - i >= 6 && memcmp(p + i + 2, "0000", 4) == 0) {
                return 1;
            }
            i++; /* skip the escaped character: an escaped quote does not end the string */
        }
    }
    return 0;
}
