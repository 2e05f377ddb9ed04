/*
 * ws_runtime.c - the private runtime root that holds the workspace directories.
 *
 * Workspaces hold the agent's files, so they live in a directory only this user can
 * enter. The threat the checks stop: on a shared host, another user pre-creates
 * /tmp/drun-1000 (or a symlink by that name) so that drun writes workspaces into a
 * directory they can read, or swaps files under drun's feet. We therefore open the
 * root with O_NOFOLLOW, and check owner and mode on the opened fd, not by name.
 */
#include "workspace/ws_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/proc.h"

int
ws_runtime_dir(const char *configured, struct buf *out, struct err *err)
{
    struct buf path;
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    int fd = -1;
    int rc = -1;

    buf_init(&path, 4096);
    if (configured != NULL && configured[0] != '\0') {
        buf_puts(&path, configured);
    } else if (xdg != NULL && xdg[0] == '/') {
        buf_printf(&path, "%s/drun", xdg);
    } else {
        buf_printf(&path, "/tmp/drun-%lu", (unsigned long)geteuid());
    }
    if (buf_failed(&path)) {
        rc = buf_err(&path, "the runtime directory path", err);
        goto out;
    }
    if (path.data[0] != '/') {
        rc = err_set(err, ERR_INVAL, "runtime directory '%s' must be an absolute path", path.data);
        goto out;
    }
    if (mkdir(path.data, WS_RUNTIME_MODE(geteuid())) != 0 && errno != EEXIST) {
        rc = err_set(err, ERR_IO, "cannot make the runtime directory '%s': %s", path.data,
                     strerror(errno));
        goto out;
    }
    fd = open(path.data, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = err_set(err, ERR_DENIED,
                     "runtime directory '%s' is not a directory (%s); remove it or set "
                     "'runtime_dir' in config.toml",
                     path.data, strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) != 0) {
        rc = err_set(err, ERR_IO, "cannot inspect '%s': %s", path.data, strerror(errno));
        goto out;
    }
    if (st.st_uid != geteuid()) {
        rc = err_set(err, ERR_DENIED,
                     "runtime directory '%s' is owned by uid %lu, not by this user (uid %lu); "
                     "remove it or set 'runtime_dir' in config.toml",
                     path.data, (unsigned long)st.st_uid, (unsigned long)geteuid());
        goto out;
    }
    if (st.st_mode & 022) {
        rc = err_set(err, ERR_DENIED,
                     "runtime directory '%s' is writable by other users (mode %03o); run "
                     "'chmod 700 %s'",
                     path.data, (unsigned)(st.st_mode & 0777), path.data);
        goto out;
    }
    if ((st.st_mode & 0777) != WS_RUNTIME_MODE(geteuid()) &&
        fchmod(fd, WS_RUNTIME_MODE(geteuid())) != 0) {
        rc = err_set(err, ERR_IO, "cannot make '%s' private: %s", path.data, strerror(errno));
        goto out;
    }
    if (buf_append(out, path.data, path.len) != 0) {
        rc = buf_err(out, "the runtime directory path", err);
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
    }
    buf_release(&path);
    return rc;
}

int
ws_runtime_session_path(const char *runtime, const char *session_id, struct buf *out,
                        struct err *err)
{
    size_t n = strlen(session_id);
    size_t start = out->len;

    if (n == 0 || n > 64) {
        return err_set(err, ERR_INVAL, "session id '%.64s' must be 1 to 64 characters", session_id);
    }
    for (size_t i = 0; i < n; i++) {
        char c = session_id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) {
            return err_set(err, ERR_INVAL,
                           "session id '%.64s' may hold only lower-case letters and digits",
                           session_id);
        }
    }
    buf_printf(out, "%s/ws-%s", runtime, session_id);
    if (buf_failed(out)) {
        buf_truncate(out, start);
        return buf_err(out, "the workspace path", err);
    }
    return 0;
}

int
ws_runtime_proc_dir(const char *root, pid_t pid, struct buf *out, struct err *err)
{
    size_t start = out->len;
    struct stat st;

    buf_printf(out, "%s/pid-%ld", root, (long)pid);
    if (buf_failed(out)) {
        buf_truncate(out, start);
        return buf_err(out, "the runtime directory path", err);
    }
    if (mkdir(out->data + start, WS_RUNTIME_MODE(geteuid())) != 0 && errno != EEXIST) {
        err_set(err, ERR_IO, "cannot make '%s': %s", out->data + start, strerror(errno));
        buf_truncate(out, start);
        return -1;
    }
    if (lstat(out->data + start, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        err_set(err, ERR_DENIED, "'%s' is not a directory owned by this user; remove it",
                out->data + start);
        buf_truncate(out, start);
        return -1;
    }
    return 0;
}

int
ws_runtime_sweep(const char *root)
{
    struct dirent *de;
    int removed = 0;
    DIR *d = opendir(root);

    if (d == NULL) {
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX];
        struct stat st;
        struct err err;
        char *end;
        long pid;

        if (strncmp(de->d_name, "pid-", 4) != 0) {
            continue;
        }
        pid = strtol(de->d_name + 4, &end, 10);
        if (end == de->d_name + 4 || *end != '\0' || pid <= 0 || pid > INT_MAX ||
            (pid_t)pid == getpid()) {
            continue;
        }
        if (snprintf(path, sizeof(path), "%s/%s", root, de->d_name) >= (int)sizeof(path) ||
            lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
            proc_maker_alive((pid_t)pid, (int64_t)st.st_ctime)) {
            continue;
        }
        if (ws_fs_rm(AT_FDCWD, path, path, &err) == 0) {
            removed++;
        }
    }
    closedir(d);
    return removed;
}
