/*
 * pathkey.c - validation and normalization of workspace keys. See pathkey.h.
 *
 * The checks run over raw bytes, one pass, so a key from JSON (which may hold any
 * byte after unescaping) is judged exactly as the file system would see it.
 */
#include "util/pathkey.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/mem.h"
#include "util/utf8.h"

/* Longest quoted key shown in a message; keeps err.msg readable and untruncated. */
#define QUOTE_MAX 96

void
pathkey_quote(const char *key, size_t len, char *out, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)key;
    size_t o = 0;
    size_t i = 0;

    if (size == 0) {
        return;
    }
    while (i < len) {
        size_t n = p[i] < 0x20 || p[i] == 0x7f ? 0 : utf8_seq(p + i, len - i);
        size_t need = n ? n : 4;
        if (o + need + 4 > size) { /* room for "..." and the NUL */
            if (o + 4 <= size) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (n) {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[p[i] >> 4];
            out[o++] = hex[p[i] & 15];
            i++;
        }
    }
    out[o] = '\0';
}

/*
 * The one validation pass. With `out` NULL it checks that the key is already in
 * normal form; with `out` it appends the normal form there.
 */
static int
scan_key(const char *key, size_t len, struct buf *out, struct err *err)
{
    const unsigned char *p = (const unsigned char *)key;
    char q[QUOTE_MAX];
    size_t i = 0;
    size_t start_len = out ? out->len : 0;
    int wrote = 0;

    pathkey_quote(key, len, q, sizeof(q));
    if (len == 0) {
        return err_set(err, ERR_INVAL,
                       "workspace key must not be empty; name a file such as "
                       "'src/main.c'");
    }
    if (len > PATHKEY_MAX) {
        return err_set(err, ERR_INVAL,
                       "workspace key '%s' is %zu bytes, longer than the %d-byte limit", q, len,
                       PATHKEY_MAX);
    }
    if (p[0] == '/') {
        return err_set(err, ERR_INVAL,
                       "workspace key must be a relative path: '%s'; drop the leading '/'", q);
    }
    /* Bytes first, so a control character is named even inside a ".." component. */
    for (size_t j = 0; j < len;) {
        size_t n;
        if (p[j] < 0x20 || p[j] == 0x7f) {
            return err_set(err, ERR_INVAL,
                           "workspace key '%s' contains a control character (byte 0x%02x at "
                           "offset %zu); rename it",
                           q, p[j], j);
        }
        n = utf8_seq(p + j, len - j);
        if (n == 0) {
            return err_set(err, ERR_INVAL,
                           "workspace key '%s' is not valid UTF-8 (at byte %zu); use UTF-8 names",
                           q, j);
        }
        j += n;
    }
    while (i < len) {
        size_t s = i;
        size_t clen;
        while (i < len && p[i] != '/') {
            i++;
        }
        clen = i - s;
        if (i < len) {
            i++; /* the '/' */
        }
        if (clen == 0 || (clen == 1 && p[s] == '.')) {
            if (out == NULL) {
                return err_set(err, ERR_INVAL, "workspace key '%s' is not in normal form", q);
            }
            continue;
        }
        if (clen == 2 && p[s] == '.' && p[s + 1] == '.') {
            return err_set(err, ERR_INVAL, "workspace key must not contain '..': '%s'", q);
        }
        if (clen > PATHKEY_COMPONENT_MAX) {
            return err_set(err, ERR_INVAL,
                           "workspace key '%s' has a component of %zu bytes, longer than the "
                           "%d-byte limit",
                           q, clen, PATHKEY_COMPONENT_MAX);
        }
        if (out != NULL) {
            if (wrote) {
                buf_putc(out, '/');
            }
            buf_append(out, key + s, clen);
        }
        wrote = 1;
    }
    if (!wrote) {
        return err_set(err, ERR_INVAL,
                       "workspace key '%s' names the workspace itself; name a file inside it", q);
    }
    if (out == NULL && p[len - 1] == '/') {
        return err_set(err, ERR_INVAL, "workspace key '%s' is not in normal form", q);
    }
    if (out != NULL && buf_failed(out)) {
        buf_truncate(out, start_len);
        return buf_err(out, "workspace key", err);
    }
    return 0;
}

int
pathkey_normalize(const char *key, size_t len, struct buf *out, struct err *err)
{
    size_t start = out->len;

    if (scan_key(key, len, out, err) != 0) {
        buf_truncate(out, start); /* never leave half a key behind */
        return -1;
    }
    return 0;
}

int
pathkey_check(const char *key, size_t len, struct err *err)
{
    return scan_key(key, len, NULL, err);
}

static int
cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Returns 1 if the first n bytes of p equal the whole string s, by binary search. */
static int
sorted_has(const char *const *v, size_t count, const char *p, size_t n)
{
    size_t lo = 0, hi = count;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        size_t sl = strlen(v[mid]);
        int c = memcmp(v[mid], p, sl < n ? sl : n);
        if (c == 0) {
            c = sl < n ? -1 : (sl > n ? 1 : 0);
        }
        if (c == 0) {
            return 1;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

int
pathkey_check_batch(const char *const *keys, size_t n, struct err *err)
{
    const char **v = NULL;
    char q1[QUOTE_MAX], q2[QUOTE_MAX];
    int rc = 0;

    if (n < 2) {
        return 0;
    }
    v = mem_calloc(n, sizeof(*v));
    if (v == NULL) {
        return err_set(err, ERR_NOMEM, "cannot check %zu workspace keys: out of memory", n);
    }
    memcpy(v, keys, n * sizeof(*v));
    qsort(v, n, sizeof(*v), cmp_keys);
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t len = strlen(v[i]);
        if (i > 0 && strcmp(v[i - 1], v[i]) == 0) {
            pathkey_quote(v[i], len, q1, sizeof(q1));
            rc = err_set(err, ERR_INVAL, "workspace key '%s' is given twice; give each key once",
                         q1);
            break;
        }
        for (size_t j = 0; j < len; j++) {
            if (v[i][j] == '/' && sorted_has(v, n, v[i], j)) {
                pathkey_quote(v[i], j, q1, sizeof(q1));
                pathkey_quote(v[i], len, q2, sizeof(q2));
                rc = err_set(err, ERR_INVAL,
                             "workspace keys '%s' and '%s' conflict: '%s' cannot be both a file "
                             "and a directory",
                             q1, q2, q1);
                break;
            }
        }
    }
    mem_free(v);
    return rc;
}
