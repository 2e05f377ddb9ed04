/*
 * policy_int.h - private to src/policy: helpers shared by policy.c, policy_match.c
 * and policy_edit.c. No other module may include it.
 */
#ifndef DRUN_POLICY_INT_H
#define DRUN_POLICY_INT_H

#include <stddef.h>

#include "policy/policy.h"

/* The largest config file we read (a config is a few KiB; this bounds a mistake). */
#define POLICY_FILE_MAX ((size_t)1 << 20)

/* Appends a copy of s; returns 0 or -1 on no memory. */
int policy_strlist_push(struct policy_strlist *l, const char *s);

/* Frees the strings and the array; the list is empty again. */
void policy_strlist_clear(struct policy_strlist *l);

/*
 * Cleans an absolute path lexically into out (size >= 4096): "~/" expands to $HOME,
 * "//" and "/." collapse, a trailing "/" goes. Fails (ERR_INVAL, message without a
 * subject: the caller prefixes the key) on a relative path, a ".." component, a
 * control character or an over-long path.
 */
int policy_path_clean(const char *in, char *out, size_t size, struct err *err);

/*
 * Validates a domain pattern and writes its canonical form (lower-case, no trailing
 * dot) into out (size >= 256). Same error convention as policy_path_clean.
 */
int policy_domain_clean(const char *in, char *out, size_t size, struct err *err);

/* Reads a whole file of at most `max` bytes into b. ERR_NOTFOUND if missing. */
int policy_read_file(const char *path, size_t max, struct buf *b, struct err *err);

#endif
