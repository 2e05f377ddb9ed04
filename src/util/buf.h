/*
 * buf.h - the one growable byte buffer.
 *
 * A buffer has a required maximum size, fixed at buf_init(). Growing past it, or an
 * allocation failure, sets a sticky error: later appends do nothing, so a caller can
 * build a whole string and check buf_failed() once at the end. The data is always
 * NUL-terminated (data[len] == 0) and may itself contain NULs.
 *
 * Lifecycle as in git's strbuf: buf_init() before use, buf_release() to free the
 * memory and make the buffer empty again, buf_detach() to take ownership of the data.
 */
#ifndef DRUN_UTIL_BUF_H
#define DRUN_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "util/err.h"

struct buf {
    char *data; /* NULL until the first append; buf_cstr() never returns NULL */
    size_t len; /* bytes in use, not counting the terminating NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* the most `len` may ever be */
    int failed; /* 0, or ERR_NOMEM / ERR_TOOBIG once an append has failed */
};

#define BUF_MAX_DEFAULT ((size_t)64 << 20)

/* Makes an empty buffer that may hold at most `max` bytes. Allocates nothing. */
void buf_init(struct buf *b, size_t max);

/* Frees the data; the buffer is empty (and unfailed) again with the same max. */
void buf_release(struct buf *b);

/* Sets len to 0 and clears the sticky error, keeping the allocation. */
void buf_reset(struct buf *b);

/* Appends; returns 0, or -1 (and sets the sticky error) past max or on no memory. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, int c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Makes room for `n` more bytes without changing len; same errors as buf_append. */
int buf_grow(struct buf *b, size_t n);

/* Shortens to `len` bytes (no-op if already shorter). */
void buf_truncate(struct buf *b, size_t len);

/* Returns the data as a C string ("" for an empty buffer); borrowed. */
const char *buf_cstr(const struct buf *b);

/* Returns the sticky error code (0 if none). */
int buf_failed(const struct buf *b);

/* Fills err from the sticky error with "what" as the subject; returns -1. */
int buf_err(const struct buf *b, const char *what, struct err *err);

/*
 * Returns the data (caller frees with mem_free) and leaves the buffer empty. Returns
 * NULL only if allocating an empty string fails. *len_out, if given, gets the length.
 */
char *buf_detach(struct buf *b, size_t *len_out);

#endif
