/*
 * userpath.c - "~" expansion and parent-directory creation for operator-named paths
 * (userpath.h).
 */
#include "util/userpath.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/buf.h"
#include "util/mem.h"

#define USERPATH_MAX 4096

char *
userpath_expand(const char *path, struct err *err)
{
    const char *home = getenv("HOME");
    struct buf b;
    char *out;

    if (path[0] != '~' || (path[1] != '/' && path[1] != '\0')) {
        out = mem_strdup(path);
        if (out == NULL) {
            err_set(err, ERR_NOMEM, "out of memory");
        }
        return out;
    }
    if (home == NULL || home[0] != '/') {
        err_set(err, ERR_INVAL, "'%s' uses '~' but HOME is not set; write an absolute path", path);
        return NULL;
    }
    buf_init(&b, USERPATH_MAX - 1);
    buf_puts(&b, home);
    /* "/" as HOME plus "/x" would give "//x": harmless, but keep it tidy */
    if (b.len >= 1 && buf_cstr(&b)[b.len - 1] == '/' && path[1] == '/') {
        b.len--;
    }
    buf_puts(&b, path + 1);
    if (buf_failed(&b)) {
        buf_release(&b);
        err_set(err, ERR_INVAL, "'%s' is longer than %d bytes once '~' is expanded", path,
                USERPATH_MAX - 1);
        return NULL;
    }
    out = buf_detach(&b, NULL);
    if (out == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
    }
    return out;
}

int
userpath_make_parent(const char *path, int *created, char *made, size_t made_size, struct err *err)
{
    char dir[USERPATH_MAX];
    size_t n = strlen(path);
    struct stat sb;

    if (created != NULL) {
        *created = 0;
    }
    if (made != NULL && made_size > 0) {
        made[0] = '\0';
    }
    while (n > 0 && path[n - 1] != '/') {
        n--;
    }
    while (n > 1 && path[n - 1] == '/') {
        n--;
    }
    if (n == 0 || n >= sizeof(dir)) {
        return 0; /* a name in the working directory, or too long to be a real path */
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    if (stat(dir, &sb) == 0) {
        return 0;
    }
    /* mkdir -p: every component from the top; one that exists (EEXIST) is passed. */
    for (size_t i = 1; i <= n; i++) {
        if (i < n && dir[i] != '/') {
            continue;
        }
        dir[i] = '\0';
        if (mkdir(dir, 0700) == 0) {
            if (created != NULL && !*created && made != NULL && made_size > 0) {
                snprintf(made, made_size, "%s", dir);
            }
            if (created != NULL) {
                *created = 1;
            }
        } else if (errno != EEXIST) {
            int e = errno;
            return err_set(err, ERR_IO, "cannot create the directory '%s': %s", dir, strerror(e));
        }
        if (i < n) {
            dir[i] = '/';
        }
    }
    return 0;
}
