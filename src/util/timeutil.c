/*
 * timeutil.c - clocks and timestamps. See timeutil.h.
 */
#include "util/timeutil.h"

#include <stdio.h>
#include <time.h>

int64_t
time_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
time_mono_ms(void)
{
    return time_mono_us() / 1000;
}

int64_t
time_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
time_format_iso(int64_t ms, char *out, size_t size)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;

    if (gmtime_r(&secs, &tm) == NULL) {
        snprintf(out, size, "invalid-time");
        return;
    }
    snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}
