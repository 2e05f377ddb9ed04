/*
 * log.c - one-line messages on stderr. See log.h.
 *
 * The whole line is formatted first and written with one write(2), so lines from
 * several threads or processes sharing stderr do not interleave mid-line.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *log_prog = "drun";
static int log_max = LOG_WARN;

void
log_init(const char *prog, int level)
{
    log_prog = prog;
    log_max = level;
}

int
log_level(void)
{
    return log_max;
}

void
log_msg(int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char msg[2048];
    char line[4200];
    size_t n = 0;
    va_list ap;

    if (level > log_max) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    n = (size_t)snprintf(line, sizeof(line), "%s: %s: ", log_prog, names[level]);
    for (const char *p = msg; *p != '\0' && n < sizeof(line) - 5; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\n') {
            line[n++] = '\\';
            line[n++] = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            n += (size_t)snprintf(line + n, sizeof(line) - n, "\\x%02x", c);
        } else {
            line[n++] = (char)c;
        }
    }
    line[n++] = '\n';
    /* Best effort: a log line that cannot be written has nowhere else to go. */
    if (write(STDERR_FILENO, line, n) < 0) {
        return;
    }
}
