/*
 * proc.c - process identity by (pid, start time). See proc.h.
 */
#include "util/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t
proc_start_time(pid_t pid)
{
#ifdef __linux__
    char path[64];
    char data[1024];
    ssize_t n;
    int fd;
    char *p;
    int field;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    n = read(fd, data, sizeof(data) - 1);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    data[n] = '\0';
    /* The command name (field 2) may hold spaces and ')': skip to the last ')'. */
    p = strrchr(data, ')');
    if (p == NULL) {
        return -1;
    }
    p++;
    /* After ')' comes field 3; the start time is field 22. */
    for (field = 3; field < 22 && *p != '\0'; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL) {
            return -1;
        }
    }
    return strtoll(p + 1, NULL, 10);
#else
    if (kill(pid, 0) < 0 && errno == ESRCH) {
        return -1;
    }
    return 0;
#endif
}

int
proc_alive(pid_t pid, int64_t start_time)
{
    int64_t now;

    if (pid <= 0) {
        return 0;
    }
    now = proc_start_time(pid);
    return now >= 0 && now == start_time;
}

/* Start of the boot in seconds since the epoch (btime of /proc/stat), or -1. */
static int64_t
boot_time(void)
{
    char line[128];
    int64_t bt = -1;
    FILE *f = fopen("/proc/stat", "re");

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "btime ", 6) == 0) {
            bt = strtoll(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return bt;
}

int
proc_maker_alive(pid_t pid, int64_t made)
{
    int64_t ticks, bt;
    long hz = sysconf(_SC_CLK_TCK);

    if (pid <= 0) {
        return 0;
    }
    ticks = proc_start_time(pid);
    if (ticks < 0) {
        return 0;
    }
    bt = boot_time();
    if (bt < 0 || hz <= 0) {
        return 1;
    }
    return bt + ticks / hz <= made + 1;
}
