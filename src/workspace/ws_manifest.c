/*
 * ws_manifest.c - the manifest: a sorted array of entries, its binary encoding, the
 * diff of two manifests, and the gc callback that lists the blobs one references.
 *
 * Invariants (checked by ws_manifest_finish on everything decoded or scanned, and
 * kept by ws_manifest_set):
 *   - entries are sorted by path bytes (strcmp order) with no duplicates;
 *   - every path is a normal-form key (pathkey_check);
 *   - no entry is an ancestor of another, except that nothing at all sits below a
 *     WS_DIR entry (those are for empty directories only): "a" and "a/b" never both
 *     appear, so there is one canonical manifest per tree.
 *
 * Encoding "DRM1" (all integers little-endian):
 *     "DRM1"  u32 count
 *     count x { u8 type, u16 path_len, path bytes,
 *               and unless type == WS_DIR: u64 size, 32-byte SHA-256 }
 * Nothing may follow the last entry. The magic's last byte is the version.
 */
#include "workspace/ws_int.h"

#include <stdlib.h>
#include <string.h>

#include "util/mem.h"
#include "util/pathkey.h"

/* Compares s with p[0..n) followed by the byte c (if c >= 0), in unsigned byte order. */
static int
cmp_key(const char *s, const char *p, size_t n, int c)
{
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char a = (unsigned char)s[i], b = (unsigned char)p[i];
        if (a != b) {
            return a < b ? -1 : 1;
        }
        if (a == 0) {
            return -1; /* s is shorter (p holds no NUL) */
        }
    }
    if (c >= 0) {
        unsigned char a = (unsigned char)s[i];
        if (a != (unsigned char)c) {
            return a < (unsigned char)c ? -1 : 1;
        }
        i++;
    }
    return s[i] == '\0' ? 0 : 1;
}

size_t
ws_manifest_lower(const struct ws_manifest *m, const char *p, size_t n, int c)
{
    size_t lo = 0, hi = m->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(m->v[mid].path, p, n, c) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

size_t
ws_manifest_find(const struct ws_manifest *m, const char *p, size_t n)
{
    size_t i = ws_manifest_lower(m, p, n, -1);

    if (i < m->n && cmp_key(m->v[i].path, p, n, -1) == 0) {
        return i;
    }
    return (size_t)-1;
}

int
ws_manifest_has_under(const struct ws_manifest *m, const char *p, size_t n)
{
    size_t i = ws_manifest_lower(m, p, n, '/');

    return i < m->n && strncmp(m->v[i].path, p, n) == 0 && m->v[i].path[n] == '/';
}

int
ws_manifest_new(struct ws_manifest **out, struct err *err)
{
    *out = mem_calloc(1, sizeof(**out));
    if (*out == NULL) {
        return err_set(err, ERR_NOMEM, "cannot make a manifest: out of memory");
    }
    return 0;
}

void
ws_manifest_free(struct ws_manifest *m)
{
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n; i++) {
        mem_free(m->v[i].path);
    }
    mem_free(m->v);
    mem_free(m);
}

static int
reserve(struct ws_manifest *m, size_t extra, struct err *err)
{
    size_t cap;
    struct ws_entry *v;

    if (m->n + extra <= m->cap) {
        return 0;
    }
    cap = m->cap ? m->cap + m->cap / 2 : 16;
    if (cap < m->n + extra) {
        cap = m->n + extra;
    }
    if (cap > ((size_t)-1) / sizeof(*v)) {
        return err_set(err, ERR_NOMEM, "manifest is too large to grow");
    }
    v = mem_realloc(m->v, cap * sizeof(*v));
    if (v == NULL) {
        return err_set(err, ERR_NOMEM, "cannot grow a manifest to %zu entries: out of memory", cap);
    }
    m->v = v;
    m->cap = cap;
    return 0;
}

int
ws_manifest_clone(const struct ws_manifest *m, struct ws_manifest **out, struct err *err)
{
    struct ws_manifest *c = NULL;

    if (ws_manifest_new(&c, err) != 0 || reserve(c, m->n, err) != 0) {
        ws_manifest_free(c);
        return -1;
    }
    for (size_t i = 0; i < m->n; i++) {
        c->v[i] = m->v[i];
        c->v[i].path = mem_strdup(m->v[i].path);
        if (c->v[i].path == NULL) {
            ws_manifest_free(c);
            return err_set(err, ERR_NOMEM, "cannot copy a manifest: out of memory");
        }
        c->n = i + 1;
    }
    *out = c;
    return 0;
}

size_t
ws_manifest_count(const struct ws_manifest *m)
{
    return m->n;
}

const struct ws_entry *
ws_manifest_at(const struct ws_manifest *m, size_t i)
{
    return i < m->n ? &m->v[i] : NULL;
}

const struct ws_entry *
ws_manifest_get(const struct ws_manifest *m, const char *path)
{
    size_t i = ws_manifest_find(m, path, strlen(path));

    return i == (size_t)-1 ? NULL : &m->v[i];
}

uint64_t
ws_manifest_bytes(const struct ws_manifest *m)
{
    uint64_t total = 0;

    for (size_t i = 0; i < m->n; i++) {
        if (m->v[i].type == WS_FILE || m->v[i].type == WS_EXEC) {
            total += m->v[i].size;
        }
    }
    return total;
}

size_t
ws_manifest_files(const struct ws_manifest *m)
{
    size_t count = 0;

    for (size_t i = 0; i < m->n; i++) {
        count += m->v[i].type != WS_DIR;
    }
    return count;
}

static int
valid_type(int type)
{
    return type == WS_FILE || type == WS_EXEC || type == WS_SYMLINK || type == WS_DIR;
}

static const char *
type_name(int type)
{
    switch (type) {
    case WS_FILE:
        return "a file";
    case WS_EXEC:
        return "an executable file";
    case WS_SYMLINK:
        return "a symlink";
    case WS_DIR:
        return "a directory";
    default:
        return "an entry";
    }
}

static void
remove_at(struct ws_manifest *m, size_t i)
{
    mem_free(m->v[i].path);
    memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(m->v[0]));
    m->n--;
}

int
ws_manifest_set(struct ws_manifest *m, const char *path, int type, uint64_t size,
                const uint8_t hash[HASH_LEN], struct err *err)
{
    size_t len = strlen(path);
    size_t dir_parent = (size_t)-1;
    size_t i;
    char q1[100], q2[100];
    char *copy;

    if (pathkey_check(path, len, err) != 0) {
        return -1;
    }
    if (!valid_type(type)) {
        return err_set(err, ERR_INVAL, "unknown entry type %d for '%s'", type, path);
    }
    if (type != WS_DIR && hash == NULL) {
        return err_set(err, ERR_INVAL, "entry '%s' needs a blob hash", path);
    }
    /* An ancestor that is a file or link conflicts; an empty-dir ancestor goes away. */
    for (size_t j = 0; j < len; j++) {
        size_t a;
        if (path[j] != '/' || (a = ws_manifest_find(m, path, j)) == (size_t)-1) {
            continue;
        }
        if (m->v[a].type != WS_DIR) {
            pathkey_quote(path, j, q1, sizeof(q1));
            pathkey_quote(path, len, q2, sizeof(q2));
            return err_set(err, ERR_INVAL,
                           "cannot add '%s': '%s' is %s, not a directory; delete '%s' first", q2,
                           q1, type_name(m->v[a].type), q1);
        }
        dir_parent = a; /* at most one: the manifest holds no entries below a WS_DIR */
    }
    if (ws_manifest_has_under(m, path, len)) {
        if (type == WS_DIR) {
            return 0; /* already a (non-empty, implied) directory */
        }
        i = ws_manifest_lower(m, path, len, '/');
        pathkey_quote(path, len, q1, sizeof(q1));
        pathkey_quote(m->v[i].path, strlen(m->v[i].path), q2, sizeof(q2));
        return err_set(err, ERR_INVAL,
                       "cannot add %s '%s': it is a directory holding '%s'; delete it first",
                       type_name(type), q1, q2);
    }
    if (reserve(m, 1, err) != 0) {
        return -1;
    }
    i = ws_manifest_find(m, path, len);
    if (i == (size_t)-1) {
        copy = mem_strndup(path, len);
        if (copy == NULL) {
            return err_set(err, ERR_NOMEM, "cannot add '%s': out of memory", path);
        }
        if (dir_parent != (size_t)-1) {
            remove_at(m, dir_parent);
        }
        i = ws_manifest_lower(m, path, len, -1);
        memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(m->v[0]));
        m->n++;
        m->v[i].path = copy;
    }
    m->v[i].type = type;
    m->v[i].size = type == WS_DIR ? 0 : size;
    if (type == WS_DIR) {
        memset(m->v[i].hash, 0, HASH_LEN);
    } else {
        memcpy(m->v[i].hash, hash, HASH_LEN);
    }
    return 0;
}

int
ws_manifest_remove(struct ws_manifest *m, const char *path, struct err *err)
{
    size_t i = ws_manifest_find(m, path, strlen(path));
    char q[100];

    if (i == (size_t)-1) {
        pathkey_quote(path, strlen(path), q, sizeof(q));
        return err_set(err, ERR_NOTFOUND, "no entry '%s' in the workspace", q);
    }
    remove_at(m, i);
    return 0;
}

int
ws_manifest_push(struct ws_manifest *m, const char *path, size_t len, int type, uint64_t size,
                 const uint8_t hash[HASH_LEN], struct err *err)
{
    struct ws_entry *e;

    if (reserve(m, 1, err) != 0) {
        return -1;
    }
    e = &m->v[m->n];
    e->path = mem_strndup(path, len);
    if (e->path == NULL) {
        return err_set(err, ERR_NOMEM, "cannot add a manifest entry: out of memory");
    }
    e->type = type;
    e->size = size;
    if (hash != NULL) {
        memcpy(e->hash, hash, HASH_LEN);
    } else {
        memset(e->hash, 0, HASH_LEN);
    }
    m->n++;
    return 0;
}

static int
cmp_entries(const void *a, const void *b)
{
    return strcmp(((const struct ws_entry *)a)->path, ((const struct ws_entry *)b)->path);
}

int
ws_manifest_finish(struct ws_manifest *m, int sort, int code, struct err *err)
{
    char q1[100], q2[100];

    if (sort && m->n > 1) {
        qsort(m->v, m->n, sizeof(m->v[0]), cmp_entries);
    }
    for (size_t i = 0; i < m->n; i++) {
        const char *p = m->v[i].path;
        size_t len = strlen(p);
        if (i > 0 && strcmp(m->v[i - 1].path, p) >= 0) {
            pathkey_quote(p, len, q1, sizeof(q1));
            return err_set(err, code, "manifest entry '%s' is out of order or repeated", q1);
        }
        for (size_t j = 0; j < len; j++) {
            if (p[j] == '/' && ws_manifest_find(m, p, j) != (size_t)-1) {
                pathkey_quote(p, j, q1, sizeof(q1));
                pathkey_quote(p, len, q2, sizeof(q2));
                return err_set(err, code, "manifest has both '%s' and '%s' below it", q1, q2);
            }
        }
    }
    return 0;
}

/* ---- encoding ------------------------------------------------------------------ */

static void
put_le(struct buf *b, uint64_t v, int n)
{
    unsigned char x[8];

    for (int i = 0; i < n; i++) {
        x[i] = (unsigned char)(v >> (8 * i));
    }
    buf_append(b, x, (size_t)n);
}

static uint64_t
get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

int
ws_manifest_encode(const struct ws_manifest *m, struct buf *out, struct err *err)
{
    size_t start = out->len;

    if (m->n > UINT32_MAX) {
        return err_set(err, ERR_TOOBIG, "manifest has too many entries to encode");
    }
    buf_append(out, WS_MANIFEST_MAGIC, 4);
    put_le(out, m->n, 4);
    for (size_t i = 0; i < m->n; i++) {
        const struct ws_entry *e = &m->v[i];
        size_t len = strlen(e->path);
        put_le(out, (uint64_t)e->type, 1);
        put_le(out, len, 2);
        buf_append(out, e->path, len);
        if (e->type != WS_DIR) {
            put_le(out, e->size, 8);
            buf_append(out, e->hash, HASH_LEN);
        }
    }
    if (buf_failed(out)) {
        buf_truncate(out, start);
        return buf_err(out, "the manifest encoding", err);
    }
    return 0;
}

int
ws_manifest_decode(const void *data, size_t len, struct ws_manifest **out, struct err *err)
{
    const unsigned char *p = data;
    size_t off = 8;
    uint64_t count;
    struct ws_manifest *m = NULL;
    struct err kerr;

    *out = NULL;
    if (len < 8 || memcmp(p, "DRM", 3) != 0) {
        return err_set(err, ERR_CORRUPT, "manifest is damaged: no 'DRM1' header");
    }
    if (p[3] != WS_MANIFEST_MAGIC[3]) {
        return err_set(err, ERR_VERSION,
                       "manifest format 'DRM%c' is not one this drun reads; upgrade drun",
                       p[3] >= 0x20 && p[3] < 0x7f ? p[3] : '?');
    }
    count = get_le(p + 4, 4);
    /* The smallest entry is 4 bytes (type, length, one path byte). */
    if (count > (len - 8) / 4) {
        return err_set(err, ERR_CORRUPT,
                       "manifest is damaged: %llu entries cannot fit in %zu bytes",
                       (unsigned long long)count, len);
    }
    if (ws_manifest_new(&m, err) != 0) {
        return -1;
    }
    if (reserve(m, (size_t)count, err) != 0) {
        goto fail;
    }
    for (uint64_t i = 0; i < count; i++) {
        int type;
        size_t plen;
        const char *path;
        uint64_t size = 0;
        const uint8_t *hash = NULL;

        if (len - off < 3) {
            goto truncated;
        }
        type = p[off];
        plen = (size_t)get_le(p + off + 1, 2);
        off += 3;
        if (!valid_type(type)) {
            err_set(err, ERR_CORRUPT, "manifest is damaged: entry %llu has unknown type %d",
                    (unsigned long long)i, type);
            goto fail;
        }
        if (plen > len - off) {
            goto truncated;
        }
        path = (const char *)p + off;
        if (pathkey_check(path, plen, &kerr) != 0) {
            err_set(err, ERR_CORRUPT, "manifest is damaged: entry %llu: %s", (unsigned long long)i,
                    kerr.msg);
            goto fail;
        }
        off += plen;
        if (type != WS_DIR) {
            if (len - off < 8 + HASH_LEN) {
                goto truncated;
            }
            size = get_le(p + off, 8);
            hash = p + off + 8;
            off += 8 + HASH_LEN;
            if (type == WS_SYMLINK && (size == 0 || size >= 4096)) {
                err_set(err, ERR_CORRUPT,
                        "manifest is damaged: symlink entry %llu has a target of %llu bytes",
                        (unsigned long long)i, (unsigned long long)size);
                goto fail;
            }
            if (size > INT64_MAX) {
                err_set(err, ERR_CORRUPT, "manifest is damaged: entry %llu has size %llu",
                        (unsigned long long)i, (unsigned long long)size);
                goto fail;
            }
        }
        if (ws_manifest_push(m, path, plen, type, size, hash, err) != 0) {
            goto fail;
        }
    }
    if (off != len) {
        err_set(err, ERR_CORRUPT, "manifest is damaged: %zu stray bytes after the last entry",
                len - off);
        goto fail;
    }
    if (ws_manifest_finish(m, 0, ERR_CORRUPT, err) != 0) {
        goto fail;
    }
    *out = m;
    return 0;
truncated:
    err_set(err, ERR_CORRUPT, "manifest is damaged: it ends inside an entry (%zu bytes)", len);
fail:
    ws_manifest_free(m);
    return -1;
}

int
ws_manifest_refs(void *ctx, const void *manifest, size_t len,
                 void (*ref)(void *refctx, const uint8_t hash[32]), void *refctx, struct err *err)
{
    struct ws_manifest *m = NULL;

    (void)ctx;
    if (ws_manifest_decode(manifest, len, &m, err) != 0) {
        return -1;
    }
    for (size_t i = 0; i < m->n; i++) {
        if (m->v[i].type != WS_DIR) {
            ref(refctx, m->v[i].hash);
        }
    }
    ws_manifest_free(m);
    return 0;
}

/* ---- diff ----------------------------------------------------------------------- */

int
ws_manifest_diff(const struct ws_manifest *from, const struct ws_manifest *to, ws_diff_fn fn,
                 void *ctx, struct ws_diff_counts *counts, struct err *err)
{
    struct ws_diff_counts c = {0, 0, 0};
    size_t i = 0, j = 0;
    int rc = 0;

    while (rc == 0 && (i < from->n || j < to->n)) {
        const struct ws_entry *a = i < from->n ? &from->v[i] : NULL;
        const struct ws_entry *b = j < to->n ? &to->v[j] : NULL;
        int cmp = a == NULL ? 1 : (b == NULL ? -1 : strcmp(a->path, b->path));

        if (cmp < 0) {
            c.removed++;
            rc = fn ? fn(ctx, WS_REMOVED, a, NULL, err) : 0;
            i++;
        } else if (cmp > 0) {
            c.added++;
            rc = fn ? fn(ctx, WS_ADDED, NULL, b, err) : 0;
            j++;
        } else {
            if (a->type != b->type || a->size != b->size ||
                memcmp(a->hash, b->hash, HASH_LEN) != 0) {
                c.modified++;
                rc = fn ? fn(ctx, WS_MODIFIED, a, b, err) : 0;
            }
            i++;
            j++;
        }
    }
    if (counts != NULL) {
        *counts = c;
    }
    return rc == 0 ? 0 : -1;
}
