/*
 * test_db.h - small helpers the store-facing unit tests share: open a store, poke at
 * its file through a separate plain SQLite connection (an outside reader or editor),
 * count this process's open descriptors or a directory's entries (leak checks), and
 * make reproducible incompressible content.
 *
 * Header-only (static inline) so each test binary keeps its single-file build.
 */
#ifndef DRUN_TEST_DB_H
#define DRUN_TEST_DB_H

#include <dirent.h>
#include <sqlite3.h>

#include "store/store.h"
#include "util/mem.h"
#include "test.h"

/* Opens the store at path (opts may be NULL); fails the test if it cannot. */
static inline struct store *
tdb_open(const char *path, const struct store_opts *opts)
{
    struct store *st = NULL;
    struct err err;

    CHECK_OK(store_open(path, opts, &st, &err), &err);
    return st;
}

/* Runs SQL on the file through a separate plain connection; fails the test on error. */
static inline void
tdb_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;

    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK_MSG(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", sql,
              sqlite3_errmsg(db));
    sqlite3_close(db);
}

/* The first column of the first row of sql, through a plain connection; -1 if no row. */
static inline int64_t
tdb_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    int64_t v = -1;

    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK_MSG(sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK, "%s: %s", sql,
              sqlite3_errmsg(db));
    if (sqlite3_step(s) == SQLITE_ROW) {
        v = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

/* Entries in a directory, "." and ".." included. */
static inline int
tdb_count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;

    CHECK(d != NULL);
    while (readdir(d) != NULL) {
        n++;
    }
    closedir(d);
    return n;
}

/* This process's open descriptors (plus the one reading /proc/self/fd). */
static inline int
tdb_count_fds(void)
{
    return tdb_count_dir("/proc/self/fd");
}

/* n pseudo-random bytes (xorshift32 from seed): incompressible, reproducible content. */
static inline void
tdb_fill_random(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

/* ---- SQLite's allocator through mem_alloc, so mem_fail_after reaches it too ---- */

static inline void *
tdb_mem_malloc(int n)
{
    int64_t *p = mem_alloc((size_t)n + 8);
    if (p == NULL) {
        return NULL;
    }
    p[0] = n;
    return p + 1;
}

static inline void
tdb_mem_free(void *p)
{
    if (p != NULL) {
        mem_free((int64_t *)p - 1);
    }
}

static inline void *
tdb_mem_realloc(void *p, int n)
{
    int64_t *q = mem_realloc(p ? (int64_t *)p - 1 : NULL, (size_t)n + 8);
    if (q == NULL) {
        return NULL;
    }
    q[0] = n;
    return q + 1;
}

static inline int
tdb_mem_size(void *p)
{
    return p ? (int)((int64_t *)p)[-1] : 0;
}

static inline int
tdb_mem_roundup(int n)
{
    return (n + 7) & ~7;
}

static inline int
tdb_mem_init(void *x)
{
    (void)x;
    return 0;
}

static inline void
tdb_mem_shutdown(void *x)
{
    (void)x;
}

/* Routes SQLite's allocations (no lookaside) through mem_alloc; call before any
 * connection opens (the test's child process has none yet). */
static inline void
tdb_route_sqlite_alloc(void)
{
    static const sqlite3_mem_methods methods = {
        tdb_mem_malloc,  tdb_mem_free, tdb_mem_realloc,  tdb_mem_size,
        tdb_mem_roundup, tdb_mem_init, tdb_mem_shutdown, NULL};

    CHECK_EQ_INT(sqlite3_config(SQLITE_CONFIG_MALLOC, &methods), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_config(SQLITE_CONFIG_LOOKASIDE, 0, 0), SQLITE_OK);
}

#endif
