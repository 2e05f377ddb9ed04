/*
 * pathkey.h - workspace keys: the relative paths that name entries in a workspace.
 *
 * A key is what an agent writes to name a file ("src/main.c"). Every key that enters
 * drun (write_files, fetch output, extract_text's save_to, export) goes through
 * pathkey_normalize() first, so the rest of drun only ever sees keys in normal form:
 *
 *   - relative, '/'-separated, no empty, "." or ".." components, no trailing '/';
 *   - 1..PATHKEY_MAX bytes, each component 1..PATHKEY_COMPONENT_MAX bytes;
 *   - valid UTF-8 without control characters (bytes < 0x20 and 0x7f).
 *
 * The original drun did not normalize ("./a" and "a" were different files) and did not
 * notice that "a" and "a/b" cannot both be files; we do both (reference §9.1, §14.17).
 * Rejections are ERR_INVAL with a message that quotes the key (control characters
 * escaped); the tools layer maps them to the `invalid_workspace_path` code.
 */
#ifndef DRUN_UTIL_PATHKEY_H
#define DRUN_UTIL_PATHKEY_H

#include <stddef.h>

#include "util/buf.h"
#include "util/err.h"

#define PATHKEY_MAX           4096 /* bytes in a whole key */
#define PATHKEY_COMPONENT_MAX 255  /* bytes in one component (NAME_MAX) */

/*
 * Normalizes the `len` bytes at `key` and appends the result to `out` (the caller
 * resets it first if it should hold only the key; out->max must allow PATHKEY_MAX).
 * Drops "." and empty components and a trailing '/'. Returns 0, or -1 with ERR_INVAL
 * for an empty key, an absolute key, a ".." component, a NUL or other control
 * character, a component over PATHKEY_COMPONENT_MAX bytes, a key over PATHKEY_MAX
 * bytes, invalid UTF-8 or a key naming the root itself ("."); ERR_NOMEM/ERR_TOOBIG
 * from `out`.
 */
int pathkey_normalize(const char *key, size_t len, struct buf *out, struct err *err);

/*
 * Returns 0 if the `len` bytes at `key` are a valid key already in normal form, else
 * -1 with ERR_INVAL saying what is wrong. Allocates nothing.
 */
int pathkey_check(const char *key, size_t len, struct err *err);

/*
 * Checks a batch of normal-form keys (as one write_files call would create them) for
 * a key given twice and for file/directory conflicts ("a" and "a/b"). Does not modify
 * keys. Returns 0, or -1 with ERR_INVAL naming both keys (ERR_NOMEM if the sort
 * array cannot be allocated).
 */
int pathkey_check_batch(const char *const *keys, size_t n, struct err *err);

/*
 * Writes a printable form of `len` bytes at `key` into out (size >= 8): control bytes
 * and bytes that are not part of valid UTF-8 as \xNN, cut with "..." to fit (never
 * inside a UTF-8 sequence). For quoting keys and on-disk names in messages.
 */
void pathkey_quote(const char *key, size_t len, char *out, size_t size);

#endif
