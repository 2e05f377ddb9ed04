/*
 * policy_match.c - allowlist matching: env names, shell commands and host paths. Fetch
 * domains are matched by the fetch module (fetch_host_allowed), the one implementation
 * the daemon uses.
 *
 * Host paths are where a mistake becomes a host compromise, so the rules are strict:
 * a requested path must be absolute, without control characters (a newline would
 * forge log and audit lines) and without ".." (the reference refuses it too). It is
 * then resolved through symlinks and compared with each resolved allowlist entry by
 * whole components, so "/home/al" never admits "/home/alice" and "/allowed/link ->
 * /etc" never admits "/etc". The result is only a decision at one moment: the write
 * doors must then write through policy/hostpath.h, which refuses any symlink met on
 * the way, so a link planted after this check cannot redirect the write.
 */
#include "policy/policy.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policy/policy_int.h"
#include "util/buf.h"

int
policy_env_allowed(const struct policy *p, const char *name)
{
    if (name == NULL || name[0] == '\0') {
        return 0;
    }
    for (size_t i = 0; i < p->env_allowlist.n; i++) {
        if (strcmp(p->env_allowlist.v[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* ---- commands ---- */

int
policy_command_check(const struct policy *p, const char *command, struct err *err)
{
    const char *s = command;

    if (p->bash_command_denylist.n == 0 && p->bash_command_allowlist.n == 0) {
        return 0;
    }
    while (*s != '\0') {
        const char *e = s + strcspn(s, "\n;|&");
        const char *hash = memchr(s, '#', (size_t)(e - s));
        const char *end = hash ? hash : e;
        char seg[1024];
        size_t n;

        while (s < end && isspace((unsigned char)*s)) {
            s++;
        }
        while (end > s && isspace((unsigned char)end[-1])) {
            end--;
        }
        n = (size_t)(end - s);
        if (n > 0) {
            int ok = 0;
            struct buf list;

            if (n >= sizeof(seg)) {
                n = sizeof(seg) - 1; /* patterns are checked on the whole segment below */
            }
            memcpy(seg, s, n);
            seg[n] = '\0';
            for (size_t i = 0; i < p->bash_command_denylist.n; i++) {
                const char *pat = p->bash_command_denylist.v[i];
                if (memmem(s, (size_t)(end - s), pat, strlen(pat)) != NULL) {
                    return err_set(err, ERR_DENIED, "command denied: matches denylist pattern '%s'",
                                   pat);
                }
            }
            if (p->bash_command_allowlist.n > 0) {
                for (size_t i = 0; i < p->bash_command_allowlist.n && !ok; i++) {
                    const char *pat = p->bash_command_allowlist.v[i];
                    ok = memmem(s, (size_t)(end - s), pat, strlen(pat)) != NULL;
                }
                if (!ok) {
                    buf_init(&list, 200);
                    for (size_t i = 0; i < p->bash_command_allowlist.n; i++) {
                        buf_printf(&list, "%s%s", i ? ", " : "", p->bash_command_allowlist.v[i]);
                    }
                    err_set(err, ERR_DENIED,
                            "command denied: '%s' is not matched by any allowlist pattern; "
                            "permitted: %s%s",
                            seg, buf_cstr(&list), buf_failed(&list) ? ", ..." : "");
                    buf_release(&list);
                    return -1;
                }
            }
        }
        s = *e != '\0' ? e + 1 : e;
    }
    return 0;
}

/* ---- host paths ---- */

/* 1 if `path` equals `root` or lies below it by whole components. */
static int
under(const char *path, const char *root)
{
    size_t n = strlen(root);

    if (strcmp(root, "/") == 0) {
        return path[0] == '/';
    }
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/*
 * Resolves a clean absolute path: realpath() of its deepest existing ancestor with the
 * missing components appended. A component that exists but cannot be resolved (a
 * dangling symlink, a loop, a file used as a directory) is refused: the write doors
 * would refuse it later anyway, and saying so now gives the clearer message.
 */
static int
resolve_existing(const char *clean, char *out, size_t size, struct err *err)
{
    char head[PATH_MAX];
    size_t cut = strlen(clean); /* head is clean[0, cut) */
    const char *tail;
    char *r;
    int n;

    if (cut >= sizeof(head)) {
        return err_set(err, ERR_INVAL, "path '%s' is too long", clean);
    }
    memcpy(head, clean, cut + 1);
    for (;;) {
        struct stat sb;
        char *slash;

        r = realpath(head, NULL);
        if (r != NULL) {
            break;
        }
        if (errno != ENOENT) {
            return err_set(err, ERR_DENIED, "cannot resolve '%s': %s", head, strerror(errno));
        }
        if (lstat(head, &sb) == 0) {
            return err_set(err, ERR_DENIED, "'%s' is a symlink to a missing target; remove it",
                           head);
        }
        slash = strrchr(head, '/');
        cut = (size_t)(slash - head);
        if (cut == 0) {
            head[1] = '\0';
        } else {
            head[cut] = '\0';
        }
    }
    tail = clean + cut;
    if (strcmp(r, "/") == 0 && tail[0] != '\0') {
        n = snprintf(out, size, "%s", tail);
    } else {
        n = snprintf(out, size, "%s%s", r, tail);
    }
    free(r); /* realpath allocates with malloc */
    if (n < 0 || (size_t)n >= size) {
        return err_set(err, ERR_INVAL, "path '%s' is too long", clean);
    }
    return 0;
}

int
policy_hostpath_check(const struct policy *p, const char *path, enum policy_door door,
                      struct policy_hostpath *out, struct err *err)
{
    char clean[PATH_MAX];
    const char *best = NULL;
    size_t best_len = 0;
    int is_write = door != POLICY_DOOR_MOUNT;
    char *roots[64];
    size_t nroots = 0;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    for (const char *c = path; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            return err_set(err, ERR_INVAL,
                           "host path '%s' contains a control character; name it without one",
                           path);
        }
    }
    if (path[0] != '/') {
        return err_set(err, ERR_INVAL, "host path '%s' must be absolute", path);
    }
    if (policy_path_clean(path, clean, sizeof(clean), err) < 0) {
        return err_wrap(err, "host path '%s'", path);
    }
    if (door == POLICY_DOOR_DELETE) {
        char *slash = strrchr(clean, '/');
        char parent[PATH_MAX];

        if (strcmp(clean, "/") == 0) {
            return err_set(err, ERR_DENIED, "refusing to delete '/'");
        }
        memcpy(parent, clean, (size_t)(slash - clean));
        parent[slash - clean] = '\0';
        if (parent[0] == '\0') {
            parent[0] = '/';
            parent[1] = '\0';
        }
        if (resolve_existing(parent, out->resolved, sizeof(out->resolved), err) < 0) {
            return -1;
        }
        {
            size_t n = strlen(out->resolved);
            int w = snprintf(out->resolved + n, sizeof(out->resolved) - n, "%s%s",
                             strcmp(out->resolved, "/") == 0 ? "" : "/", slash + 1);
            if (w < 0 || (size_t)w >= sizeof(out->resolved) - n) {
                return err_set(err, ERR_INVAL, "host path '%s' is too long", path);
            }
        }
    } else if (resolve_existing(clean, out->resolved, sizeof(out->resolved), err) < 0) {
        return -1;
    }

    if (p->mount_allowlist.n == 0) {
        if (is_write) {
            return err_set(err, ERR_DENIED,
                           "cannot write to '%s': mount_allowlist is empty, so drun may not "
                           "write to or delete host paths; add a directory with 'drun-mcp "
                           "config add-path DIR'",
                           path);
        }
        snprintf(out->rel, sizeof(out->rel), "%s", out->resolved + 1);
        return 0;
    }
    for (size_t i = 0; i < p->mount_allowlist.n && nroots < 64; i++) {
        char *r = realpath(p->mount_allowlist.v[i], NULL);
        if (r == NULL) {
            continue; /* an entry that does not exist admits nothing */
        }
        roots[nroots++] = r;
        if (door == POLICY_DOOR_DELETE &&
            (strcmp(r, out->resolved) == 0 || strcmp(p->mount_allowlist.v[i], clean) == 0)) {
            err_set(err, ERR_DENIED,
                    "refusing to delete '%s': it is a mount_allowlist entry itself", path);
            goto out;
        }
        if (under(out->resolved, r) && strlen(r) >= best_len) {
            best = r;
            best_len = strlen(r);
        }
    }
    if (best == NULL) {
        err_set(err, ERR_DENIED,
                "'%s' is not inside any mount_allowlist entry; add its directory with "
                "'drun-mcp config add-path DIR'",
                path);
        goto out;
    }
    snprintf(out->root, sizeof(out->root), "%s", best);
    {
        const char *rest = out->resolved + (strcmp(best, "/") == 0 ? 1 : best_len);
        while (*rest == '/') {
            rest++;
        }
        snprintf(out->rel, sizeof(out->rel), "%s", rest);
    }
    rc = 0;
out:
    for (size_t i = 0; i < nroots; i++) {
        free(roots[i]);
    }
    return rc;
}
