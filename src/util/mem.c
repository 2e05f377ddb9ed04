/*
 * mem.c - allocation wrappers with a fault-injection counter. See mem.h.
 */
#include "util/mem.h"

#include <stdlib.h>
#include <string.h>

static long fail_countdown = -1;
static long fail_count;

static int
should_fail(void)
{
    if (fail_countdown < 0) {
        return 0;
    }
    if (fail_countdown == 0) {
        fail_count++;
        return 1;
    }
    fail_countdown--;
    return 0;
}

void *
mem_alloc(size_t n)
{
    if (should_fail()) {
        return NULL;
    }
    return malloc(n ? n : 1);
}

void *
mem_calloc(size_t count, size_t size)
{
    if (should_fail()) {
        return NULL;
    }
    return calloc(count ? count : 1, size ? size : 1);
}

void *
mem_realloc(void *p, size_t n)
{
    if (should_fail()) {
        return NULL;
    }
    return realloc(p, n ? n : 1);
}

void
mem_free(void *p)
{
    free(p);
}

char *
mem_strndup(const char *s, size_t n)
{
    char *copy = mem_alloc(n + 1);

    if (copy == NULL) {
        return NULL;
    }
    memcpy(copy, s, n);
    copy[n] = '\0';
    return copy;
}

char *
mem_strdup(const char *s)
{
    return mem_strndup(s, strlen(s));
}

void
mem_fail_after(long n)
{
    fail_countdown = n;
    fail_count = 0;
}

long
mem_failures(void)
{
    return fail_count;
}
