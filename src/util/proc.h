/*
 * proc.h - facts about processes on this host.
 *
 * A session in the DB is owned by one live drun-mcp process, named by (pid, start
 * time). The start time guards against pid reuse: a pid that is alive but started at
 * another time is a different process, so its session may be taken over.
 */
#ifndef DRUN_UTIL_PROC_H
#define DRUN_UTIL_PROC_H

#include <stdint.h>
#include <sys/types.h>

/*
 * Returns the start time of `pid` in clock ticks since boot (Linux: field 22 of
 * /proc/PID/stat; elsewhere a best-effort value), or -1 if no such process exists.
 */
int64_t proc_start_time(pid_t pid);

/* Returns 1 if (pid, start_time) names a process that is still running, else 0. */
int proc_alive(pid_t pid, int64_t start_time);

/*
 * Returns 1 if pid is a live process that may have made something at `made` (seconds
 * since the epoch, e.g. a directory's ctime): it exists and started no later than that,
 * with a second of slack. 0 if it is gone, or if the pid now names a later process (pid
 * reuse). When the start cannot be placed in time it answers 1: never treat a live
 * maker as dead.
 */
int proc_maker_alive(pid_t pid, int64_t made);

#endif
