/*
 * session_diff.c - session_diff's unified diff, made by libgit2 (git_patch_from_buffers)
 * rather than by a diff algorithm of our own.
 *
 * The output follows `git diff --no-index` for the same pair of trees: per changed path
 * a `diff --git a/K b/K` line, mode lines (`new file mode`, `deleted file mode`,
 * `old mode`/`new mode` for the executable bit), `--- a/K` / `+++ b/K` (or /dev/null),
 * hunks with 3 lines of context and "\ No newline at end of file" markers. Symlinks
 * diff their targets under mode 120000; a path that turns from a file into a link (or
 * back) shows as a deletion and an addition, as git does. Only git's `index` lines are
 * left out (they name git object ids, which mean nothing here). Content that is not
 * valid UTF-8 on either side gives the original drun's "Binary file K changed." line.
 * Empty directories have no content and are not shown.
 */
#include <git2.h>

#include <string.h>

#include "session/session_int.h"
#include "util/mem.h"

static const char *
mode_of(int type)
{
    return type == WS_EXEC ? "100755" : type == WS_SYMLINK ? "120000" : "100644";
}

static int
git_init_once(struct session_err *e)
{
    static int done;

    if (!done) {
        if (git_libgit2_init() < 0) {
            return session_fail(e, SESSION_E_OTHER, ERR_INTERNAL, "cannot initialise libgit2");
        }
        done = 1;
    }
    return 0;
}

/* Appends the hunks of old -> new (both text) to out. */
static int
hunks(const struct buf *o, const struct buf *n, const char *path, struct buf *out,
      struct session_err *e)
{
    git_patch *patch = NULL;
    git_buf gb = {0};
    git_diff_options opts;
    const char *at;

    git_diff_options_init(&opts, GIT_DIFF_OPTIONS_VERSION);
    opts.context_lines = 3;
    opts.flags = GIT_DIFF_FORCE_TEXT;
    if (git_patch_from_buffers(&patch, o->data, o->len, path, n->data, n->len, path, &opts) < 0 ||
        git_patch_to_buf(&gb, patch) < 0) {
        const git_error *ge = git_error_last();
        git_patch_free(patch);
        git_buf_dispose(&gb);
        return session_fail(e, SESSION_E_OTHER, ERR_INTERNAL, "cannot diff '%s': %s", path,
                            ge && ge->message ? ge->message : "libgit2 failed");
    }
    /* Keep the hunks only; the headers are ours. */
    at = gb.ptr && gb.size >= 3 ? strstr(gb.ptr, "\n@@ ") : NULL;
    if (at != NULL) {
        buf_append(out, at + 1, gb.size - (size_t)(at + 1 - gb.ptr));
    }
    git_patch_free(patch);
    git_buf_dispose(&gb);
    return 0;
}

/* Diffs one path; o or n may be NULL (absent). Both have the same kind of content. */
static int
diff_one(struct session_mgr *m, const char *path, const struct ws_entry *o,
         const struct ws_entry *n, struct buf *out, struct session_err *e)
{
    struct buf ob, nb;
    int rc = -1;

    buf_init(&ob, SESSION_READ_MAX);
    buf_init(&nb, SESSION_READ_MAX);
    if ((o != NULL && session_read_entry(m, o, &ob, e) < 0) ||
        (n != NULL && session_read_entry(m, n, &nb, e) < 0)) {
        goto out;
    }
    buf_printf(out, "diff --git a/%s b/%s\n", path, path);
    if (o == NULL) {
        buf_printf(out, "new file mode %s\n", mode_of(n->type));
    } else if (n == NULL) {
        buf_printf(out, "deleted file mode %s\n", mode_of(o->type));
    } else if (o->type != n->type) {
        buf_printf(out, "old mode %s\nnew mode %s\n", mode_of(o->type), mode_of(n->type));
    }
    if (ob.len == nb.len && (ob.len == 0 || memcmp(ob.data, nb.data, ob.len) == 0)) {
        rc = 0; /* a mode change, or an empty file added or removed */
        goto out;
    }
    if (!session_is_text(ob.data ? ob.data : "", ob.len) ||
        !session_is_text(nb.data ? nb.data : "", nb.len)) {
        buf_printf(out, "Binary file %s changed.\n", path);
        rc = 0;
        goto out;
    }
    if (o != NULL) {
        buf_printf(out, "--- a/%s\n", path);
    } else {
        buf_puts(out, "--- /dev/null\n");
    }
    if (n != NULL) {
        buf_printf(out, "+++ b/%s\n", path);
    } else {
        buf_puts(out, "+++ /dev/null\n");
    }
    rc = hunks(&ob, &nb, path, out, e);
out:
    buf_release(&ob);
    buf_release(&nb);
    return rc;
}

static int
is_link(const struct ws_entry *x)
{
    return x != NULL && x->type == WS_SYMLINK;
}

static int
diff_path(struct session_mgr *m, const struct ws_entry *o, const struct ws_entry *n,
          struct buf *out, struct session_err *e)
{
    const char *path = o ? o->path : n->path;

    if (o != NULL && o->type == WS_DIR) {
        o = NULL;
    }
    if (n != NULL && n->type == WS_DIR) {
        n = NULL;
    }
    if (o == NULL && n == NULL) {
        return 0;
    }
    if (o != NULL && n != NULL && o->type == n->type && o->size == n->size &&
        memcmp(o->hash, n->hash, HASH_LEN) == 0) {
        return 0;
    }
    if (o != NULL && n != NULL && is_link(o) != is_link(n)) {
        /* A file became a link or back: git shows a deletion and an addition. */
        if (diff_one(m, path, o, NULL, out, e) < 0) {
            return -1;
        }
        return diff_one(m, path, NULL, n, out, e);
    }
    return diff_one(m, path, o, n, out, e);
}

int
session_diff(struct session_mgr *m, const struct ws_manifest *from, const struct ws_manifest *to,
             const char *const *paths, size_t n_paths, struct buf *out, struct session_err *e)
{
    if (git_init_once(e) < 0) {
        return -1;
    }
    if (n_paths > 0) {
        for (size_t i = 0; i < n_paths; i++) {
            if (diff_path(m, ws_manifest_get(from, paths[i]), ws_manifest_get(to, paths[i]), out,
                          e) < 0) {
                return -1;
            }
        }
    } else {
        size_t i = 0, j = 0, nf = ws_manifest_count(from), nt = ws_manifest_count(to);
        while (i < nf || j < nt) {
            const struct ws_entry *a = i < nf ? ws_manifest_at(from, i) : NULL;
            const struct ws_entry *b = j < nt ? ws_manifest_at(to, j) : NULL;
            int c = a == NULL ? 1 : b == NULL ? -1 : strcmp(a->path, b->path);
            if (diff_path(m, c <= 0 ? a : NULL, c >= 0 ? b : NULL, out, e) < 0) {
                return -1;
            }
            i += c <= 0;
            j += c >= 0;
        }
    }
    if (buf_failed(out)) {
        session_fail(e, SESSION_E_TOO_LARGE, ERR_TOOBIG,
                     "the diff is larger than one result may carry (%zu bytes); pass paths to "
                     "diff fewer files",
                     out->max);
        e->d1 = -1;
        e->d2 = (int64_t)out->max;
        return -1;
    }
    return 0;
}
