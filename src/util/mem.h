/*
 * mem.h - allocation with a fault-injection hook.
 *
 * Every allocation in drun's own code goes through these, so a test can make the
 * N-th allocation fail (mem_fail_after) and check that each public function returns
 * ERR_NOMEM cleanly instead of crashing or leaking. Outside tests the hook is off and
 * these are the C library's functions. mem_free(NULL) is a no-op.
 */
#ifndef DRUN_UTIL_MEM_H
#define DRUN_UTIL_MEM_H

#include <stddef.h>

void *mem_alloc(size_t n);
void *mem_calloc(size_t count, size_t size);
void *mem_realloc(void *p, size_t n);
void mem_free(void *p);

/* Returns a copy of s (caller frees with mem_free), or NULL on allocation failure. */
char *mem_strdup(const char *s);

/* Returns a NUL-terminated copy of the first n bytes of s, or NULL. */
char *mem_strndup(const char *s, size_t n);

/*
 * Test hook: after `n` more successful allocations, every allocation fails until
 * mem_fail_after(-1) turns the hook off. Returns nothing; not thread-safe.
 */
void mem_fail_after(long n);

/* Test hook: how many allocations have failed on purpose since the hook was set. */
long mem_failures(void);

#endif
