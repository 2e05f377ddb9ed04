/*
 * session_exec.c - the overlay mount points a command's sandbox creates in the workspace
 * directory, and their removal before the rescan; the slot that holds the session's
 * prepared sandbox, and running something for a session on the loop's next turn. See
 * session_exec.h.
 *
 * Every walk here opens through util/safeopen.h, refusing every symlink, from the workspace root,
 * so a command that replaced a directory on the path with a link to somewhere else on
 * the host cannot make us remove (or even look at) anything outside the workspace.
 */
#include "session/session_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "session/session_int.h"
#include "util/mem.h"
#include "util/safeopen.h"

struct mount_point {
    char *key;      /* the overlay key */
    size_t top_len; /* length of the first missing prefix of key */
};

struct session_mounts {
    struct mount_point *v;
    size_t n;
};

/*
 * Opens the directory `rel` (first `len` bytes; "" is the root) beneath root_fd without
 * following links (util/safeopen.h). Returns the fd or -1.
 */
static int
open_beneath(int root_fd, const char *rel, size_t len)
{
    char path[4096];

    if (len >= sizeof(path)) {
        return -1;
    }
    memcpy(path, rel, len);
    path[len] = '\0';
    return safeopen_beneath(root_fd, path, O_RDONLY | O_DIRECTORY, 0, SAFEOPEN_NO_SYMLINKS);
}

/* Removes the empty directory rel[0..len) beneath root_fd; 0 or -1. */
static int
rmdir_beneath(int root_fd, const char *rel, size_t len)
{
    size_t slash = len;
    int pfd, rc;
    char name[256];

    while (slash > 0 && rel[slash - 1] != '/') {
        slash--;
    }
    if (len - slash == 0 || len - slash >= sizeof(name)) {
        return -1;
    }
    memcpy(name, rel + slash, len - slash);
    name[len - slash] = '\0';
    pfd = open_beneath(root_fd, rel, slash > 0 ? slash - 1 : 0);
    if (pfd < 0) {
        return -1;
    }
    rc = unlinkat(pfd, name, AT_REMOVEDIR);
    close(pfd);
    return rc;
}

int
session_exec_mounts(struct session *s, const char *const *keys, size_t n, int *usable,
                    struct session_mounts **out, struct session_err *e)
{
    struct session_mounts *mk = NULL;
    int root = -1;

    *out = NULL;
    if (n == 0) {
        return 0;
    }
    if (s->dir == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_INTERNAL,
                            "session '%s' has no workspace directory yet", s->id);
    }
    root = open(ws_dir_path(s->dir), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        return session_fail(e, SESSION_E_OTHER, ERR_IO, "cannot open the workspace of '%s': %s",
                            s->id, strerror(errno));
    }
    mk = mem_calloc(1, sizeof(*mk));
    if (mk != NULL) {
        mk->v = mem_calloc(n, sizeof(*mk->v));
    }
    if (mk == NULL || mk->v == NULL) {
        mem_free(mk);
        close(root);
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = keys[i];
        size_t len = strlen(k), end = 0;
        int missing = 0;

        usable[i] = 1;
        /* Walk the prefixes "a", "a/b", ... until one is missing or is not a directory. */
        while (end < len) {
            struct stat st;
            int pfd;
            char name[256];
            size_t start = end;

            while (end < len && k[end] != '/') {
                end++;
            }
            if (end - start == 0 || end - start >= sizeof(name)) {
                usable[i] = 0;
                break;
            }
            memcpy(name, k + start, end - start);
            name[end - start] = '\0';
            pfd = open_beneath(root, k, start > 0 ? start - 1 : 0);
            if (pfd < 0) {
                usable[i] = 0;
                break;
            }
            if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                close(pfd);
                if (errno == ENOENT) {
                    missing = 1;
                    mk->v[mk->n].top_len = end;
                } else {
                    usable[i] = 0;
                }
                break;
            }
            close(pfd);
            if (!S_ISDIR(st.st_mode)) {
                usable[i] = 0; /* a file or a link where the mount point must go */
                break;
            }
            end++;
        }
        if (usable[i] && missing) {
            mk->v[mk->n].key = mem_strdup(k);
            if (mk->v[mk->n].key == NULL) {
                close(root);
                session_exec_unmount(s, mk);
                return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
            }
            mk->n++;
        }
    }
    close(root);
    *out = mk;
    return 0;
}

void
session_exec_unmount(struct session *s, struct session_mounts *mk)
{
    int root = -1;

    if (mk == NULL) {
        return;
    }
    if (s->dir != NULL) {
        root = open(ws_dir_path(s->dir), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    for (size_t i = 0; i < mk->n; i++) {
        const char *k = mk->v[i].key;
        size_t len = k ? strlen(k) : 0;

        /* Deepest first; stop at the first directory that is not empty (or not ours). */
        while (root >= 0 && k != NULL && len >= mk->v[i].top_len && len > 0) {
            if (rmdir_beneath(root, k, len) < 0) {
                break;
            }
            while (len > 0 && k[len - 1] != '/') {
                len--;
            }
            if (len > 0) {
                len--; /* drop the '/' */
            }
        }
        mem_free(mk->v[i].key);
    }
    if (root >= 0) {
        close(root);
    }
    mem_free(mk->v);
    mem_free(mk);
}

void
session_exec_warm_put(struct session *s, void *obj, void (*free_fn)(void *))
{
    void *old = s->warm;
    void (*old_free)(void *) = s->warm_free;

    s->warm = obj;
    s->warm_free = obj != NULL ? free_fn : NULL;
    if (old != NULL && old_free != NULL) {
        old_free(old);
    }
}

void *
session_exec_warm_take(struct session *s)
{
    void *obj = s->warm;

    s->warm = NULL;
    s->warm_free = NULL;
    return obj;
}

const char *
session_exec_dir_path(const struct session *s)
{
    return s->dir != NULL ? ws_dir_path(s->dir) : NULL;
}

/* ---- deferred work --------------------------------------------------------------------- */

struct exec_defer {
    uv_timer_t timer;
    struct session_mgr *m;
    char id[64];
    void (*fn)(struct session *s, void *arg);
    void *arg;
};

static void
defer_closed(uv_handle_t *h)
{
    mem_free(h->data);
}

static void
defer_fire(uv_timer_t *t)
{
    struct exec_defer *d = t->data;
    struct session *s = session_mgr_find(d->m, d->id);

    if (s != NULL) {
        d->fn(s, d->arg);
    }
    uv_close((uv_handle_t *)&d->timer, defer_closed);
}

int
session_exec_defer(void *loop, struct session_mgr *m, const char *id,
                   void (*fn)(struct session *s, void *arg), void *arg)
{
    struct exec_defer *d;

    if (loop == NULL || m == NULL || id == NULL ||
        strlen(id) >= sizeof(((struct exec_defer *)0)->id)) {
        return -1;
    }
    d = mem_calloc(1, sizeof(*d));
    if (d == NULL) {
        return -1;
    }
    d->m = m;
    memcpy(d->id, id, strlen(id) + 1);
    d->fn = fn;
    d->arg = arg;
    d->timer.data = d;
    if (uv_timer_init(loop, &d->timer) != 0) {
        mem_free(d);
        return -1;
    }
    if (uv_timer_start(&d->timer, defer_fire, 0, 0) != 0) {
        uv_close((uv_handle_t *)&d->timer, defer_closed);
        return -1;
    }
    return 0;
}
