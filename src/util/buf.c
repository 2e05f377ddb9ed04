/*
 * buf.c - the growable byte buffer with a maximum and a sticky error. See buf.h.
 */
#include "util/buf.h"

#include <stdio.h>
#include <string.h>

#include "util/mem.h"

void
buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
    b->failed = 0;
}

void
buf_release(struct buf *b)
{
    mem_free(b->data);
    buf_init(b, b->max);
}

void
buf_reset(struct buf *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

int
buf_grow(struct buf *b, size_t n)
{
    size_t want;
    size_t cap;
    char *p;

    if (b->failed) {
        return -1;
    }
    if (n > b->max || b->len > b->max - n) {
        b->failed = ERR_TOOBIG;
        return -1;
    }
    want = b->len + n + 1;
    if (want <= b->cap) {
        return 0;
    }
    cap = b->cap ? b->cap : 64;
    while (cap < want) {
        cap = cap > ((size_t)-1) / 2 ? want : cap * 2;
    }
    if (cap > b->max + 1) {
        cap = b->max + 1;
    }
    p = mem_realloc(b->data, cap);
    if (p == NULL) {
        b->failed = ERR_NOMEM;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int
buf_append(struct buf *b, const void *p, size_t n)
{
    if (buf_grow(b, n) < 0) {
        return -1;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int
buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int
buf_putc(struct buf *b, int c)
{
    char ch = (char)c;

    return buf_append(b, &ch, 1);
}

int
buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;

    if (b->failed) {
        return -1;
    }
    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        b->failed = ERR_INVAL;
        return -1;
    }
    if (buf_grow(b, (size_t)n) < 0) {
        return -1;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void
buf_truncate(struct buf *b, size_t len)
{
    if (len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

const char *
buf_cstr(const struct buf *b)
{
    return b->data != NULL ? b->data : "";
}

int
buf_failed(const struct buf *b)
{
    return b->failed;
}

int
buf_err(const struct buf *b, const char *what, struct err *err)
{
    if (b->failed == ERR_TOOBIG) {
        return err_set(err, ERR_TOOBIG, "%s is larger than the limit of %zu bytes", what, b->max);
    }
    if (b->failed == ERR_NOMEM) {
        return err_set(err, ERR_NOMEM, "out of memory building %s", what);
    }
    return err_set(err, b->failed ? b->failed : ERR_INTERNAL, "cannot build %s", what);
}

char *
buf_detach(struct buf *b, size_t *len_out)
{
    char *p = b->data;
    size_t len = b->len;

    if (p == NULL) {
        p = mem_alloc(1);
        if (p == NULL) {
            return NULL;
        }
        p[0] = '\0';
    }
    if (len_out != NULL) {
        *len_out = len;
    }
    buf_init(b, b->max);
    return p;
}
