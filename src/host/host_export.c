/*
 * host_export.c - session_export's writes (host.h, rules 2, 4 and 7). The entries come
 * from the session through callbacks; everything that touches the host is here: the
 * output directory opened from the allowlist root without following links, writes that
 * never follow a link, drun's own files refused, VCS hooks held back, and the links
 * written checked together, as the host is after the export, so that a chain of them
 * (each lexically inside) cannot reach "/".
 */
#include "host/host_int.h"

#include <string.h>
#include <unistd.h>

#include "util/mem.h"

#define EXPORT_DATA_MAX ((size_t)1 << 31)

/*
 * 1 if the symlink at `key` with `target` resolves (lexically) inside the exported
 * tree: a relative target whose ".." never climbs above the tree's root. An absolute
 * target is outside by definition: the host's "/" is not the workspace's.
 */
static int
link_stays_inside(const char *key, const char *target, size_t tlen)
{
    long depth = 0;
    const char *p;

    if (tlen == 0 || target[0] == '/' || memchr(target, '\0', tlen) != NULL) {
        return 0;
    }
    for (p = key; *p != '\0'; p++) {
        if (*p == '/') {
            depth++; /* the link lives in a directory this deep */
        }
    }
    p = target;
    while (p < target + tlen) {
        const char *end = memchr(p, '/', (size_t)(target + tlen - p));
        size_t n = end ? (size_t)(end - p) : (size_t)(target + tlen - p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0) {
                return 0;
            }
        } else if (!(n == 0 || (n == 1 && p[0] == '.'))) {
            depth++;
        }
        p += n + (end != NULL);
    }
    return 1;
}

int
host_export(const struct policy *p, const struct policy_hostpath *hp,
            const struct host_export_ops *ops, unsigned char *written, struct err *err)
{
    const char **links = NULL;
    size_t *link_at = NULL, nlinks = 0;
    unsigned char *bad = NULL;
    struct buf data;
    int rootfd = -1, outfd = -1, rc = -1;

    buf_init(&data, EXPORT_DATA_MAX);
    memset(written, 0, ops->n);
    rootfd = host_open_root(hp->root, err);
    if (rootfd < 0 || (outfd = host_open_dir(rootfd, hp->rel, 1, 0755, err)) < 0) {
        goto out;
    }
    links = mem_calloc(ops->n + 1, sizeof(*links));
    link_at = mem_calloc(ops->n + 1, sizeof(*link_at));
    bad = mem_calloc(ops->n + 1, 1);
    if (links == NULL || link_at == NULL || bad == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < ops->n; i++) {
        int kind = 0, r;
        const char *key = ops->key(ops->ctx, i, &kind);
        const char *vcs = host_export_vcs_refusal(p, key, kind == HOST_ENTRY_DIR);

        if (vcs != NULL) {
            ops->skip(ops->ctx, i, vcs);
            continue;
        }
        buf_reset(&data);
        if (kind == HOST_ENTRY_DIR) {
            r = host_mkdirs(outfd, key, 0755, err);
        } else {
            if (ops->read(ops->ctx, i, &data) < 0) {
                err_clear(err);
                goto out;
            }
            if (kind == HOST_ENTRY_LINK) {
                if (!link_stays_inside(key, data.data, data.len)) {
                    ops->skip(ops->ctx, i, "symlink target leaves the exported tree");
                    continue;
                }
                r = host_symlink(outfd, key, buf_cstr(&data), err);
            } else {
                r = host_write_file(outfd, key, data.data, data.len,
                                    kind == HOST_ENTRY_EXEC ? 0755 : 0644, err);
            }
        }
        if (r < 0) {
            if (err->code == ERR_DENIED) {
                /* A link or a file in the way on the host, or drun's own file: nothing
                 * was written there. */
                ops->skip(ops->ctx, i,
                          strstr(err->msg, "drun's own") != NULL
                              ? "drun's own file (config, database or runtime)"
                              : "a symlink or non-directory is in the way on the host");
                err_clear(err);
                continue;
            }
            err_wrap(err, "export stopped at '%s'", key);
            goto out;
        }
        written[i] = 1;
        if (kind == HOST_ENTRY_LINK) {
            link_at[nlinks] = i;
            links[nlinks++] = key;
        }
    }
    /*
     * Each link was judged alone, lexically; a chain of them (d0/.../d11/a -> ../..,
     * up -> d0/.../d11/a/../..) can still reach "/". So every link just written is
     * resolved on the host as it now is, beneath output_dir; one that leaves is removed.
     */
    if (nlinks > 0 && host_export_check_links(outfd, links, nlinks, bad, err) < 0) {
        goto out;
    }
    for (size_t j = 0; j < nlinks; j++) {
        if (bad[j]) {
            written[link_at[j]] = 0;
            ops->skip(ops->ctx, link_at[j],
                      "symlink resolves outside output_dir on the host (with the other links "
                      "written); removed");
        }
    }
    rc = 0;
out:
    if (outfd >= 0) {
        close(outfd);
    }
    if (rootfd >= 0) {
        close(rootfd);
    }
    mem_free(links);
    mem_free(link_at);
    mem_free(bad);
    buf_release(&data);
    return rc;
}
