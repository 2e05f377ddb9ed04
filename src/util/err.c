/*
 * err.c - filling in struct err. See err.h.
 */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
err_vset(struct err *err, int code, const char *fmt, va_list ap)
{
    if (err == NULL) {
        return -1;
    }
    err->code = code;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return -1;
}

int
err_set(struct err *err, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    err_vset(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

int
err_wrap(struct err *err, const char *fmt, ...)
{
    char prefix[ERR_MSG_MAX];
    char old[ERR_MSG_MAX];
    va_list ap;

    if (err == NULL) {
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    if (snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old) >= (int)sizeof(err->msg)) {
        /* A message is capped at ERR_MSG_MAX; say it was cut rather than cut silently. */
        memcpy(err->msg + sizeof(err->msg) - 4, "...", 4);
    }
    return -1;
}

void
err_clear(struct err *err)
{
    if (err != NULL) {
        err->code = ERR_OK;
        err->msg[0] = '\0';
    }
}

const char *
err_name(int code)
{
    static const char *const names[ERR__COUNT] = {
        [ERR_OK] = "ok",
        [ERR_NOMEM] = "nomem",
        [ERR_INVAL] = "inval",
        [ERR_NOTFOUND] = "notfound",
        [ERR_EXISTS] = "exists",
        [ERR_DENIED] = "denied",
        [ERR_BUSY] = "busy",
        [ERR_TIMEOUT] = "timeout",
        [ERR_TOOBIG] = "toobig",
        [ERR_IO] = "io",
        [ERR_DB] = "db",
        [ERR_CORRUPT] = "corrupt",
        [ERR_VERSION] = "version",
        [ERR_CANCELLED] = "cancelled",
        [ERR_INTERNAL] = "internal",
        [ERR_STALE] = "stale",
    };

    if (code < 0 || code >= ERR__COUNT || names[code] == NULL) {
        return "unknown";
    }
    return names[code];
}
