/*
 * err.h - the error value every fallible function in drun fills in.
 *
 * A function that can fail returns int (0 on success, -1 on failure) and takes a
 * `struct err *` as its last argument. err_set() returns -1 so a failure path stays
 * one line:
 *
 *     if (fd < 0)
 *         return err_set(err, ERR_IO, "cannot open '%s': %s", path, strerror(errno));
 *
 * Library codes (SQLite, curl, zstd, libuv) are translated into these codes at the
 * module boundary; they never leak upwards. Messages are lower-case, without a full
 * stop, with the subject in quotes, and say what to do next where that is known.
 */
#ifndef DRUN_UTIL_ERR_H
#define DRUN_UTIL_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum err_code {
    ERR_OK = 0,
    ERR_NOMEM,     /* an allocation failed */
    ERR_INVAL,     /* the caller's input is wrong */
    ERR_NOTFOUND,  /* the named thing does not exist */
    ERR_EXISTS,    /* the named thing already exists */
    ERR_DENIED,    /* policy or permissions refuse it */
    ERR_BUSY,      /* someone else holds it; try again later */
    ERR_TIMEOUT,   /* a time limit passed */
    ERR_TOOBIG,    /* a size cap was passed */
    ERR_IO,        /* a system call failed */
    ERR_DB,        /* the database failed */
    ERR_CORRUPT,   /* stored data is damaged */
    ERR_VERSION,   /* stored data is from an incompatible version */
    ERR_CANCELLED, /* the caller asked to stop */
    ERR_INTERNAL,  /* a bug: an invariant did not hold */
    ERR_STALE,     /* the file we hold open is no longer the one at its path */
    ERR__COUNT
};

#define ERR_MSG_MAX 256

struct err {
    int code;
    char msg[ERR_MSG_MAX];
};

/* Sets code and a printf-style message (truncated to fit) and returns -1. */
int err_set(struct err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* err_set with a va_list, for functions that take printf-style arguments themselves. */
int err_vset(struct err *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Prefixes the existing message with "what: " and returns -1. */
int err_wrap(struct err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Resets to ERR_OK with an empty message. */
void err_clear(struct err *err);

/* Returns a stable lower-case name for a code ("nomem", "io", ...). */
const char *err_name(int code);

#endif
