/*
 * timeutil.h - clocks and timestamps.
 *
 * Wall-clock times are stored as Unix milliseconds (int64). Durations use the
 * monotonic clock, which never jumps when the system time is set.
 */
#ifndef DRUN_UTIL_TIMEUTIL_H
#define DRUN_UTIL_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Unix time in milliseconds. */
int64_t time_now_ms(void);

/* Monotonic clock in milliseconds and microseconds (arbitrary origin). */
int64_t time_mono_ms(void);
int64_t time_mono_us(void);

/* Formats Unix ms as "2026-11-30T23:49:48.123Z" (UTC) into out (size >= 32). */
void time_format_iso(int64_t ms, char *out, size_t size);

#endif
