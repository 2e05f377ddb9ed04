/*
 * bwrap_cgroup.c - the pids cgroup a root daemon puts each sandbox in (real uid 0 is exempt
 * from RLIMIT_NPROC), and the sweep of cgroups a killed daemon left behind.
 */
#include "sandbox/bwrap_int.h"

/* ---- the pids cgroup (root only) ---------------------------------------------------- */

/*
 * Where our pids cgroups go, found once per process: the parent directory and the file a
 * process joins through. On the v1 pids hierarchy that is `tasks`, not `cgroup.procs`:
 * writing "0" to `tasks` moves only the calling thread, which the kernel does without
 * taking the global threadgroup lock (whose RCU grace period cost ~7-13 ms per sandbox
 * here), and the child that writes it is single-threaded, so the whole process moves and
 * bwrap and everything after it is born inside. On v2 only cgroup.procs exists.
 */
static char cg_base[SANDBOX_PATH_MAX];
static const char *cg_join = "cgroup.procs";
static int cg_state; /* 0 not looked up, 1 found, -1 none */

static int
cgroup_find(void)
{
    char line[1024], base[SANDBOX_PATH_MAX], file[SANDBOX_PATH_MAX + 32];
    FILE *f;
    int found = 0;

    if (cg_state != 0) {
        return cg_state;
    }
    cg_state = -1;
    f = fopen("/proc/self/cgroup", "re");
    if (f == NULL) {
        return cg_state;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *nl = strchr(line, '\n'), *c1 = strchr(line, ':'), *c2;
        if (nl) {
            *nl = '\0';
        }
        if (c1 == NULL || (c2 = strchr(c1 + 1, ':')) == NULL) {
            continue;
        }
        *c2 = '\0';
        if (strcmp(c1 + 1, "pids") == 0) {
            snprintf(base, sizeof(base), "/sys/fs/cgroup/pids%s",
                     strcmp(c2 + 1, "/") ? c2 + 1 : "");
            found = 2;
            break;
        }
        if (c1[1] == '\0' && strcmp(line, "0") == 0) {
            snprintf(base, sizeof(base), "/sys/fs/cgroup%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
            snprintf(file, sizeof(file), "%s/cgroup.subtree_control", base);
            FILE *sc = fopen(file, "re");
            char ctl[256] = "";
            if (sc != NULL) {
                if (fgets(ctl, sizeof(ctl), sc) == NULL) {
                    ctl[0] = '\0';
                }
                fclose(sc);
            }
            found = strstr(ctl, "pids") != NULL;
        }
    }
    fclose(f);
    if (found) {
        snprintf(cg_base, sizeof(cg_base), "%s", base);
        snprintf(file, sizeof(file), "%s/tasks", base);
        if (found == 2 && access(file, W_OK) == 0) {
            cg_join = "tasks";
        }
        cg_state = 1;
    }
    return cg_state;
}

/*
 * Makes a fresh pids cgroup below ours with pids.max = nproc and returns an fd for the
 * file the child writes "0" into before exec, or -1 if the host offers none we may use.
 * Works with the v1 pids hierarchy and with v2 when our cgroup delegates pids.
 */
int
bwrap_cgroup_make(struct sandbox *sb)
{
    static unsigned long seq;
    char file[SANDBOX_PATH_MAX + 32];
    int fd;

    sb->cgroup[0] = '\0';
    if (cgroup_find() < 0) {
        return -1;
    }
    snprintf(sb->cgroup, sizeof(sb->cgroup), "%s/drun-sandbox-%d-%lu", cg_base, (int)getpid(),
             ++seq);
    if (mkdir(sb->cgroup, 0700) < 0) {
        sb->cgroup[0] = '\0';
        return -1;
    }
    snprintf(file, sizeof(file), "%s/pids.max", sb->cgroup);
    fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        char num[32];
        int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)sb->lim.nproc);
        if (write(fd, num, (size_t)n) != n) {
            close(fd);
            fd = -1;
        } else {
            close(fd);
            snprintf(file, sizeof(file), "%s/%s", sb->cgroup, cg_join);
            fd = open(file, O_WRONLY | O_CLOEXEC);
        }
    }
    if (fd < 0) {
        rmdir(sb->cgroup);
        sb->cgroup[0] = '\0';
    }
    return fd;
}

/*
 * Removes a finished sandbox's cgroup. The kernel may still hold it for a moment after
 * the last process is reaped (EBUSY); such directories are retried on the next call.
 */
void
bwrap_cgroup_remove(const char *dir)
{
    static char pending[8][SANDBOX_PATH_MAX];

    for (size_t i = 0; i < 8; i++) {
        if (pending[i][0] && (rmdir(pending[i]) == 0 || errno == ENOENT)) {
            pending[i][0] = '\0';
        }
    }
    if (dir == NULL || rmdir(dir) == 0) {
        return;
    }
    for (size_t i = 0; i < 8; i++) {
        if (!pending[i][0]) {
            snprintf(pending[i], sizeof(pending[i]), "%s", dir);
            return;
        }
    }
    log_warn("cannot remove cgroup '%s': %s", dir, strerror(errno));
}

/* Returns 1 if the cgroup refused a fork (pids.events "max N" with N > 0). */
int
bwrap_cgroup_hit_max(const struct sandbox *sb)
{
    char file[SANDBOX_PATH_MAX + 32], line[128];
    FILE *f;
    int hit = 0;

    snprintf(file, sizeof(file), "%s/pids.events", sb->cgroup);
    f = fopen(file, "re");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "max ", 4) == 0 && strtoull(line + 4, NULL, 10) > 0) {
            hit = 1;
        }
    }
    fclose(f);
    return hit;
}

/*
 * Kills every process in cgroup dir (SIGKILL, until cgroup.procs is empty) and removes
 * it, retrying while the kernel still holds it for a process being reaped. Bounded to a
 * few seconds. Returns 0 when the directory is gone.
 */
static int
cgroup_empty_remove(const char *dir)
{
    char file[SANDBOX_PATH_MAX + 32];

    snprintf(file, sizeof(file), "%s/cgroup.procs", dir);
    for (int round = 0; round < 5000; round++) {
        char line[32];
        int any = 0;
        FILE *f;

        if (rmdir(dir) == 0 || errno == ENOENT) {
            return 0;
        }
        f = fopen(file, "re");
        if (f == NULL) {
            return errno == ENOENT ? 0 : -1;
        }
        while (fgets(line, sizeof(line), f) != NULL) {
            long pid = strtol(line, NULL, 10);
            if (pid > 1 && pid <= INT_MAX && (pid_t)pid != getpid()) {
                kill((pid_t)pid, SIGKILL);
                any = 1;
            }
        }
        fclose(f);
        struct timespec ts = {0, any ? 200000 : 1000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/*
 * Our cgroups (own = 1) or those of dead makers (own = 0) under the pids hierarchy:
 * emptied and removed. Returns (removed, failed) counts through the pointers.
 */
static void
cgroup_sweep(int own, int *removed, int *failed)
{
    char dir[SANDBOX_PATH_MAX + 300];
    struct dirent *de;
    DIR *d;

    *removed = *failed = 0;
    if (geteuid() != 0 || cgroup_find() < 0) {
        return;
    }
    d = opendir(cg_base);
    if (d == NULL) {
        return;
    }
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid;
        struct stat st;

        if (strncmp(de->d_name, "drun-sandbox-", 13) != 0) {
            continue;
        }
        pid = strtol(de->d_name + 13, &end, 10);
        if (end == de->d_name + 13 || *end != '-' || pid <= 0 || pid > INT_MAX) {
            continue;
        }
        snprintf(dir, sizeof(dir), "%s/%s", cg_base, de->d_name);
        if (own != ((pid_t)pid == getpid())) {
            continue;
        }
        if (!own && (stat(dir, &st) != 0 || proc_maker_alive((pid_t)pid, (int64_t)st.st_ctime))) {
            continue;
        }
        if (cgroup_empty_remove(dir) == 0) {
            (*removed)++;
        } else {
            (*failed)++;
            log_warn("cannot remove cgroup '%s': %s", dir, strerror(errno));
        }
    }
    closedir(d);
}

int
sandbox_cleanup(void)
{
    int removed, failed;

    cgroup_sweep(1, &removed, &failed);
    return failed;
}

int
sandbox_sweep(void)
{
    int removed, failed;

    cgroup_sweep(0, &removed, &failed);
    if (removed > 0) {
        log_info("removed %d pids cgroups left by drun processes that are gone", removed);
    }
    return removed;
}
