/*
 * ws_scan.c - rescan: read the workspace directory back into a manifest.
 *
 * The walk lists one directory at a time, re-opening each directory from the root
 * (ws_fs_list), so it holds one directory fd at a time however deep the tree, and
 * never follows a symlink: links are recorded as links with their target, whatever
 * they point at. Only entries whose stat differs from the cache are read; a read file
 * is streamed into a buffer bounded by what is left of the byte limit, so a huge file
 * is refused before it is held in memory. A file of WS_STREAM_MIN bytes or more goes
 * through blobs->put_fd instead when the caller gives one: the store reads it in pieces,
 * so the daemon never holds it whole, and the same bound is passed down.
 *
 * Entries are collected unsorted with their stat, sorted once at the end, and become
 * the directory's manifest and stat cache only if the whole scan succeeded.
 *
 * Incremental rescans. When ws_watch.c can say which directories the command changed
 * (ws_watch_collect), nothing else is looked at: no change at all returns at once;
 * otherwise the new manifest is the old entries whose directory did not change (with
 * their cache), plus a flat listing of every changed directory (files and links
 * stat'ed and re-read only if their stat changed, as in a full scan; subdirectories that
 * existed before are left to their own events; new ones are scanned in full), plus
 * WS_DIR entries for changed directories that are now empty. Entries below directories
 * that are gone are dropped with their directory. Any surprise (a file with a link
 * the cache did not know, a changed directory that cannot be listed, a limit passed, an
 * inconsistent result) makes it a full scan instead; ws_watch.c has the safety argument.
 */
#include "workspace/ws_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/mem.h"
#include "util/pathkey.h"

#define QMAX 100

struct scan_item {
    struct ws_entry e;
    struct ws_stat st;
};

struct scan {
    struct ws_dir *d;
    int incremental;  /* listing changed directories only (rescan_dirty) */
    size_t base_n;    /* entries kept from the old manifest (count towards max_entries) */
    struct buf skips; /* parents of skipped entries, NUL-terminated each */
    const struct ws_limits *lim;
    const struct ws_blobs *blobs;
    struct ws_scan_report *report;
    struct scan_item *items;
    size_t n, cap;
    uint64_t bytes;
    struct buf path; /* the directory being walked */
    struct buf data; /* scratch for file contents */
};

static void
skip(struct scan *s, const char *path, size_t len, const char *why)
{
    struct ws_scan_report *r = s->report;
    char q[QMAX];
    size_t plen = len;

    /* Remember the directory, so that later rescans list it again and report it too. */
    while (plen > 0 && path[plen - 1] != '/') {
        plen--;
    }
    buf_append(&s->skips, path, plen ? plen - 1 : 0);
    buf_putc(&s->skips, '\0');
    if (r == NULL) {
        return;
    }
    r->skipped_total++;
    if (r->nskipped >= WS_SKIP_LIST_MAX) {
        return;
    }
    if (r->skipped == NULL) {
        r->skipped = mem_calloc(WS_SKIP_LIST_MAX, sizeof(*r->skipped));
        if (r->skipped == NULL) {
            return; /* the count is still right; the names are best effort */
        }
    }
    pathkey_quote(path, len, q, sizeof(q));
    r->skipped[r->nskipped].path = mem_strdup(q);
    if (r->skipped[r->nskipped].path != NULL) {
        r->skipped[r->nskipped].why = why;
        r->nskipped++;
    }
}

void
ws_scan_report_release(struct ws_scan_report *r)
{
    if (r == NULL) {
        return;
    }
    for (size_t i = 0; i < r->nskipped; i++) {
        mem_free(r->skipped[i].path);
    }
    mem_free(r->skipped);
    memset(r, 0, sizeof(*r));
}

static int
add_item(struct scan *s, int type, uint64_t size, const uint8_t *hash, const struct stat *st,
         struct err *err)
{
    struct scan_item *it;

    if (s->lim != NULL && s->lim->max_entries != 0 && s->base_n + s->n + 1 > s->lim->max_entries) {
        return err_set(err, ERR_TOOBIG,
                       "workspace has more than %llu entries (the max_entries limit); delete "
                       "files or raise the limit",
                       (unsigned long long)s->lim->max_entries);
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        struct scan_item *v = mem_realloc(s->items, cap * sizeof(*v));
        if (v == NULL) {
            return err_set(err, ERR_NOMEM, "cannot scan the workspace: out of memory");
        }
        s->items = v;
        s->cap = cap;
    }
    it = &s->items[s->n];
    it->e.path = mem_strndup(s->path.data, s->path.len);
    if (it->e.path == NULL) {
        return err_set(err, ERR_NOMEM, "cannot scan the workspace: out of memory");
    }
    it->e.type = type;
    it->e.size = size;
    if (hash != NULL) {
        memcpy(it->e.hash, hash, HASH_LEN);
    } else {
        memset(it->e.hash, 0, HASH_LEN);
    }
    ws_stat_from(&it->st, st);
    s->n++;
    return 0;
}

static int
add_bytes(struct scan *s, uint64_t size, const char *q, struct err *err)
{
    if (s->lim != NULL && s->lim->max_bytes != 0 &&
        (size > s->lim->max_bytes || s->bytes > s->lim->max_bytes - size)) {
        return err_set(err, ERR_TOOBIG,
                       "workspace is larger than %llu bytes (the max_bytes limit) at '%s'; "
                       "delete files or raise the limit",
                       (unsigned long long)s->lim->max_bytes, q);
    }
    s->bytes += size;
    return 0;
}

/* The cached entry for the current path if its stat still vouches for it, else NULL. */
static const struct ws_entry *
cached(struct scan *s, int type, const struct stat *st)
{
    struct ws_dir *d = s->d;
    size_t i;

    if (d->dirty || d->cache == NULL) {
        return NULL;
    }
    i = ws_manifest_find(d->man, s->path.data, s->path.len);
    if (i == (size_t)-1 || d->man->v[i].type != type || !ws_stat_same(&d->cache[i], st)) {
        return NULL;
    }
    return &d->man->v[i];
}

/* The bytes a file read now may hold: one file's cap, or what is left of max_bytes. */
static uint64_t
file_room(const struct scan *s)
{
    uint64_t room = WS_FILE_MAX;

    if (s->lim != NULL && s->lim->max_bytes != 0 && s->lim->max_bytes - s->bytes < room) {
        room = s->lim->max_bytes - s->bytes;
    }
    return room;
}

/* Maps "read more than `room` bytes" to the error the buffered path gives. */
static int
too_big(struct scan *s, uint64_t room, const char *q, struct err *err)
{
    if (add_bytes(s, room + 1, q, err) == 0) {
        err_set(err, ERR_TOOBIG, "file '%s' is larger than %zu bytes, the most one file may hold",
                q, (size_t)WS_FILE_MAX);
    }
    return -1;
}

/*
 * Stores a big regular file (open as fd, stat'ed as st; closes fd) through
 * blobs->put_fd, which reads it in pieces. The file may still be changing: the size
 * and hash recorded are those of the bytes put_fd stored (it hashes what it stores),
 * never the stat's, so the manifest always names exactly the stored blob. The cache
 * keeps the stat taken before the read, so a file changed during it is read again by
 * the next rescan.
 */
static int
scan_file_stream(struct scan *s, int fd, const struct stat *st, const char *q, struct err *err)
{
    uint64_t room = file_room(s), size = 0;
    uint8_t hash[HASH_LEN];
    int rc;

    rc = s->blobs->put_fd(s->blobs->ctx, fd, room, hash, &size, err);
    close(fd);
    if (rc != 0) {
        if (err->code == ERR_TOOBIG && size > room) {
            return too_big(s, room, q, err);
        }
        return err_wrap(err, "cannot store '%s'", q);
    }
    if (add_bytes(s, size, q, err) != 0) {
        return -1;
    }
    s->d->stats.files_read++;
    if (s->report != NULL) {
        s->report->files_read++;
    }
    return add_item(s, (st->st_mode & 0111) ? WS_EXEC : WS_FILE, size, hash, st, err);
}

static int
scan_file(struct scan *s, int pfd, const char *name, const struct stat *st0, const char *q,
          struct err *err)
{
    int type = (st0->st_mode & 0111) ? WS_EXEC : WS_FILE;
    const struct ws_entry *c = cached(s, type, st0);
    uint8_t hash[HASH_LEN];
    struct stat st;
    int fd;

    if (c != NULL) {
        s->d->stats.files_reused++;
        if (s->report != NULL) {
            s->report->files_reused++;
        }
        if (add_bytes(s, c->size, q, err) != 0) {
            return -1;
        }
        return add_item(s, type, c->size, c->hash, st0, err);
    }
    /* O_NONBLOCK: should the name turn into a FIFO, open must not wait for a writer. */
    fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return err_set(err, ERR_IO, "cannot open '%s': %s", q, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, ERR_IO, "'%s' changed while the workspace was scanned", q);
    }
    if (add_bytes(s, (uint64_t)st.st_size, q, err) != 0) {
        close(fd);
        return -1;
    }
    s->bytes -= (uint64_t)st.st_size; /* counted again below with the size actually read */
    if (s->blobs->put_fd != NULL && (uint64_t)st.st_size >= WS_STREAM_MIN) {
        return scan_file_stream(s, fd, &st, q, err);
    }
    buf_reset(&s->data);
    s->data.max = (size_t)file_room(s);
    if (ws_fs_read_fd(fd, &s->data, q, err) != 0) {
        close(fd);
        if (err->code == ERR_TOOBIG) {
            return too_big(s, s->data.max, q, err);
        }
        return -1;
    }
    close(fd);
    if (add_bytes(s, s->data.len, q, err) != 0) {
        return -1;
    }
    if (s->blobs->put(s->blobs->ctx, s->data.data ? s->data.data : "", s->data.len, hash, err) !=
        0) {
        return err_wrap(err, "cannot store '%s'", q);
    }
    s->d->stats.files_read++;
    if (s->report != NULL) {
        s->report->files_read++;
    }
    type = (st.st_mode & 0111) ? WS_EXEC : WS_FILE;
    return add_item(s, type, s->data.len, hash, &st, err);
}

static int
scan_link(struct scan *s, int pfd, const char *name, const struct stat *st, const char *q,
          struct err *err)
{
    const struct ws_entry *c = cached(s, WS_SYMLINK, st);
    uint8_t hash[HASH_LEN];
    char target[4096];
    ssize_t n;

    if (c != NULL) {
        s->d->stats.files_reused++;
        if (s->report != NULL) {
            s->report->files_reused++;
        }
        return add_item(s, WS_SYMLINK, c->size, c->hash, st, err);
    }
    n = readlinkat(pfd, name, target, sizeof(target));
    if (n < 0) {
        return err_set(err, ERR_IO, "cannot read symlink '%s': %s", q, strerror(errno));
    }
    if (n == 0 || (size_t)n >= sizeof(target)) {
        return err_set(err, ERR_IO, "symlink '%s' has a target of unusable length", q);
    }
    if (s->blobs->put(s->blobs->ctx, target, (size_t)n, hash, err) != 0) {
        return err_wrap(err, "cannot store symlink '%s'", q);
    }
    s->d->stats.files_read++;
    if (s->report != NULL) {
        s->report->files_read++;
    }
    return add_item(s, WS_SYMLINK, (uint64_t)n, hash, st, err);
}

/* 1 if `name` can be a key component: UTF-8, no control characters. */
static int
name_ok(const char *name)
{
    struct err e;

    return pathkey_check(name, strlen(name), &e) == 0;
}

/*
 * In an incremental scan, a file with several links must be one the cache knew with
 * several links at this name: the other names' directories are then rescanned every
 * time (ws_watch.c). A new link may have other names in directories that saw no event.
 */
static int
known_links(struct scan *s, const struct stat *st, const char *q, struct err *err)
{
    const struct ws_dir *d = s->d;
    size_t i;

    if (!s->incremental || st->st_nlink <= 1) {
        return 0;
    }
    i = ws_manifest_find(d->man, s->path.data, s->path.len);
    if (i == (size_t)-1 || d->cache == NULL || d->cache[i].ino != (uint64_t)st->st_ino ||
        d->cache[i].nlink <= 1) {
        return err_set(err, ERR_INTERNAL, "'%s' has a new hard link; a full rescan is needed", q);
    }
    return 0;
}

/*
 * Scans the directory at s->path; *added gets the number of entries found below it.
 * `flat`: subdirectories that are watched are not entered (their own events say
 * whether they changed); the others are new and scanned in full.
 */
static int
scan_dir(struct scan *s, size_t *added, int flat, struct err *err)
{
    struct buf names;
    size_t base = s->path.len;
    size_t before = s->n;
    int pfd = -1;
    int rc = -1;
    char q[QMAX];

    buf_init(&names, (size_t)64 << 20);
    if (ws_fs_list(s->d->root_fd, s->path.data ? s->path.data : "", base, 0, &names, &pfd, err) !=
        0) {
        goto out;
    }
    for (size_t off = 0; off < names.len; off += strlen(names.data + off) + 1) {
        const char *name = names.data + off;
        struct stat st;

        buf_truncate(&s->path, base);
        if (base > 0) {
            buf_putc(&s->path, '/');
        }
        buf_puts(&s->path, name);
        if (buf_failed(&s->path)) {
            buf_err(&s->path, "a workspace path", err);
            goto out;
        }
        if (!name_ok(name)) {
            skip(s, s->path.data, s->path.len, "invalid name");
            continue;
        }
        if (s->path.len > PATHKEY_MAX) {
            skip(s, s->path.data, s->path.len, "path too long");
            continue;
        }
        pathkey_quote(s->path.data, s->path.len, q, sizeof(q));
        s->d->stat_calls++;
        if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) {
                continue;
            }
            err_set(err, ERR_IO, "cannot inspect '%s': %s", q, strerror(errno));
            goto out;
        }
        if (S_ISDIR(st.st_mode)) {
            size_t below = 0;
            if (flat && ws_watch_state(s->d->watch, s->path.data, s->path.len) != 0) {
                continue;
            }
            if (scan_dir(s, &below, 0, err) != 0) {
                goto out;
            }
            if (below == 0 && add_item(s, WS_DIR, 0, NULL, &st, err) != 0) {
                goto out;
            }
        } else if (S_ISREG(st.st_mode)) {
            if (known_links(s, &st, q, err) != 0 || scan_file(s, pfd, name, &st, q, err) != 0) {
                goto out;
            }
        } else if (S_ISLNK(st.st_mode)) {
            if (scan_link(s, pfd, name, &st, q, err) != 0) {
                goto out;
            }
        } else {
            skip(s, s->path.data, s->path.len,
                 S_ISFIFO(st.st_mode)   ? "fifo"
                 : S_ISSOCK(st.st_mode) ? "socket"
                                        : "device");
        }
    }
    *added = s->n - before;
    rc = 0;
out:
    buf_truncate(&s->path, base);
    if (pfd >= 0) {
        close(pfd);
    }
    buf_release(&names);
    return rc;
}

static int
cmp_items(const void *a, const void *b)
{
    return strcmp(((const struct scan_item *)a)->e.path, ((const struct scan_item *)b)->e.path);
}

static void
scan_init(struct scan *s, struct ws_dir *d, const struct ws_limits *limits,
          const struct ws_blobs *blobs, struct ws_scan_report *report)
{
    memset(s, 0, sizeof(*s));
    s->d = d;
    s->lim = limits;
    s->blobs = blobs;
    s->report = report;
    buf_init(&s->path, (size_t)1 << 20);
    buf_init(&s->data, 0);
    buf_init(&s->skips, (size_t)16 << 20);
    if (report != NULL) {
        memset(report, 0, sizeof(*report));
    }
}

static void
scan_release(struct scan *s)
{
    for (size_t i = 0; i < s->n; i++) {
        mem_free(s->items[i].e.path);
    }
    mem_free(s->items);
    buf_release(&s->path);
    buf_release(&s->data);
    buf_release(&s->skips);
}

static int
rescan_full(struct ws_dir *d, const struct ws_limits *limits, const struct ws_blobs *blobs,
            struct ws_scan_report *report, struct err *err)
{
    struct scan s;
    struct ws_manifest *nm = NULL;
    struct ws_stat *cache = NULL;
    size_t added = 0;
    int rc = -1;

    scan_init(&s, d, limits, blobs, report);
    if (scan_dir(&s, &added, 0, err) != 0) {
        goto out;
    }
    if (s.n > 1) {
        qsort(s.items, s.n, sizeof(s.items[0]), cmp_items);
    }
    if (ws_manifest_new(&nm, err) != 0) {
        goto out;
    }
    nm->v = mem_calloc(s.n ? s.n : 1, sizeof(*nm->v));
    cache = mem_calloc(s.n ? s.n : 1, sizeof(*cache));
    if (nm->v == NULL || cache == NULL) {
        err_set(err, ERR_NOMEM, "cannot scan the workspace: out of memory");
        goto out;
    }
    nm->cap = s.n ? s.n : 1;
    for (size_t i = 0; i < s.n; i++) {
        nm->v[i] = s.items[i].e;
        cache[i] = s.items[i].st;
        s.items[i].e.path = NULL; /* moved */
        nm->n = i + 1;
    }
    if (ws_manifest_finish(nm, 0, ERR_INTERNAL, err) != 0) {
        goto out;
    }
    ws_stat_unrace(cache, nm->n, ws_now_ns(), d->racy_ns);
    d->skipped = s.skips.len > 0 || buf_failed(&s.skips);
    ws_watch_set_skips(d, &s.skips);
    ws_dir_adopt(d, nm, cache);
    nm = NULL;
    cache = NULL;
    d->dirty = 0;
    d->last_scan = WS_SCAN_FULL;
    rc = 0;
out:
    if (rc != 0) {
        d->dirty = 1;
    }
    scan_release(&s);
    ws_manifest_free(nm);
    mem_free(cache);
    return rc;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * 1 if the new manifest will have an entry below directory p[0..n): an old entry kept,
 * one of the first `nsorted` items (sorted), or one of the items after them.
 */
static int
has_below(const struct scan *s, const unsigned char *kept, size_t nsorted, const char *p, size_t n)
{
    const struct ws_manifest *old = s->d->man;
    size_t lo = 0, hi = nsorted;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *q = s->items[mid].e.path;
        int c = strncmp(q, p, n);
        if (c == 0) {
            c = (unsigned char)q[n] - (unsigned char)'/';
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < nsorted && strncmp(s->items[lo].e.path, p, n) == 0 && s->items[lo].e.path[n] == '/') {
        return 1;
    }
    for (size_t i = nsorted; i < s->n; i++) {
        if (strncmp(s->items[i].e.path, p, n) == 0 && s->items[i].e.path[n] == '/') {
            return 1;
        }
    }
    for (size_t i = ws_manifest_lower(old, p, n, '/');
         i < old->n && strncmp(old->v[i].path, p, n) == 0 && old->v[i].path[n] == '/'; i++) {
        if (kept[i]) {
            return 1;
        }
    }
    return 0;
}

/*
 * Checks a manifest merged from kept (already consistent) and new entries: the whole
 * order, and for each new entry, no entry above it and none below it.
 */
static int
check_merged(const struct ws_manifest *m, const unsigned char *isnew, struct err *err)
{
    for (size_t k = 0; k < m->n; k++) {
        const char *p = m->v[k].path;
        size_t len;
        if (k > 0 && strcmp(m->v[k - 1].path, p) >= 0) {
            return err_set(err, ERR_INTERNAL, "incremental rescan put entries out of order");
        }
        if (!isnew[k]) {
            continue;
        }
        len = strlen(p);
        for (size_t j = 0; j < len; j++) {
            if ((p[j] == '/' && ws_manifest_find(m, p, j) != (size_t)-1) ||
                (j + 1 == len && ws_manifest_has_under(m, p, len))) {
                char q[QMAX];
                pathkey_quote(p, len, q, sizeof(q));
                return err_set(err, ERR_INTERNAL,
                               "incremental rescan found '%s' above or below another entry", q);
            }
        }
    }
    return 0;
}

/* The incremental rescan (see the top of the file); any failure means "scan in full". */
static int
rescan_dirty(struct ws_dir *d, const struct ws_limits *limits, const struct ws_blobs *blobs,
             struct ws_scan_report *report, struct err *err)
{
    const struct ws_manifest *old = d->man;
    struct scan s;
    struct ws_manifest *nm = NULL;
    struct ws_stat *cache = NULL;
    unsigned char *kept = NULL, *isnew = NULL;
    const char **dirs = NULL;
    size_t ndirs = 0, nkept = 0, nsorted, total, pos, i, j, k;
    const char *prev = NULL, *dir;
    size_t prevlen = 0, reused = 0;
    int prevclean = 0;
    int rc = -1;

    scan_init(&s, d, limits, blobs, report);
    s.incremental = 1;
    kept = mem_calloc(old->n ? old->n : 1, 1);
    if (kept == NULL) {
        err_set(err, ERR_NOMEM, "cannot scan the workspace: out of memory");
        goto out;
    }
    /* Old entries whose directory saw no event stay, with their cache. */
    for (i = 0; i < old->n; i++) {
        const struct ws_entry *e = &old->v[i];
        int clean;
        if (e->type == WS_DIR) {
            clean = ws_watch_state(d->watch, e->path, strlen(e->path)) == 1;
        } else {
            size_t dlen;
            const char *leaf;
            ws_split(e->path, &dlen, &leaf);
            if (prev == NULL || dlen != prevlen || memcmp(prev, e->path, dlen) != 0) {
                prev = e->path;
                prevlen = dlen;
                prevclean = ws_watch_state(d->watch, e->path, dlen) == 1;
            }
            clean = prevclean;
        }
        if (clean) {
            kept[i] = 1;
            nkept++;
            if (e->type == WS_FILE || e->type == WS_EXEC) {
                s.bytes += e->size;
            }
            if (e->type != WS_DIR) {
                reused++;
            }
        }
    }
    s.base_n = nkept;
    if (limits != NULL && ((limits->max_entries != 0 && nkept > limits->max_entries) ||
                           (limits->max_bytes != 0 && s.bytes > limits->max_bytes))) {
        err_set(err, ERR_TOOBIG, "workspace is over a limit");
        goto out;
    }
    /* List each changed directory again. */
    for (pos = 0; (dir = ws_watch_next_dirty(d->watch, &pos)) != NULL;) {
        size_t below = 0;
        const char **v = mem_realloc(dirs, (ndirs + 1) * sizeof(*dirs));
        if (v == NULL) {
            err_set(err, ERR_NOMEM, "cannot scan the workspace: out of memory");
            goto out;
        }
        dirs = v;
        dirs[ndirs++] = dir;
        buf_reset(&s.path);
        buf_puts(&s.path, dir);
        if (buf_failed(&s.path)) {
            buf_err(&s.path, "a workspace path", err);
            goto out;
        }
        if (scan_dir(&s, &below, 1, err) != 0) {
            goto out;
        }
    }
    if (s.n > 1) {
        qsort(s.items, s.n, sizeof(s.items[0]), cmp_items);
    }
    /* Changed directories left with nothing below them are empty-directory entries;
     * deepest first, so that a parent sees its empty children. */
    if (ndirs > 1) {
        qsort(dirs, ndirs, sizeof(*dirs), cmp_str);
    }
    nsorted = s.n;
    for (k = ndirs; k-- > 0;) {
        size_t n = strlen(dirs[k]);
        struct stat st;
        int fd;
        if (n == 0 || has_below(&s, kept, nsorted, dirs[k], n)) {
            continue;
        }
        if (ws_fs_open_dir(d->root_fd, dirs[k], n, 0, &fd, err) != 0) {
            goto out;
        }
        if (fstat(fd, &st) != 0) {
            close(fd);
            err_set(err, ERR_IO, "cannot inspect a workspace directory: %s", strerror(errno));
            goto out;
        }
        close(fd);
        buf_reset(&s.path);
        buf_puts(&s.path, dirs[k]);
        if (buf_failed(&s.path) || add_item(&s, WS_DIR, 0, NULL, &st, err) != 0) {
            goto out;
        }
    }
    if (s.n > nsorted) {
        qsort(s.items, s.n, sizeof(s.items[0]), cmp_items);
    }
    /* Merge the kept entries and the new items, both in order. */
    total = nkept + s.n;
    if (ws_manifest_new(&nm, err) != 0) {
        goto out;
    }
    nm->v = mem_calloc(total ? total : 1, sizeof(*nm->v));
    cache = mem_calloc(total ? total : 1, sizeof(*cache));
    isnew = mem_calloc(total ? total : 1, 1);
    if (nm->v == NULL || cache == NULL || isnew == NULL) {
        err_set(err, ERR_NOMEM, "cannot scan the workspace: out of memory");
        goto out;
    }
    nm->cap = total ? total : 1;
    for (i = 0, j = 0, k = 0; k < total; k++) {
        while (i < old->n && !kept[i]) {
            i++;
        }
        if (j < s.n && (i >= old->n || strcmp(s.items[j].e.path, old->v[i].path) < 0)) {
            nm->v[k] = s.items[j].e;
            cache[k] = s.items[j].st;
            isnew[k] = 1;
            j++;
        } else {
            nm->v[k] = old->v[i];
            cache[k] = d->cache[i];
            i++;
        }
    }
    nm->n = total;
    if (check_merged(nm, isnew, err) != 0) {
        goto out;
    }
    /* Committed: the paths move to nm (kept ones from the old manifest). */
    for (i = 0; i < old->n; i++) {
        if (kept[i]) {
            old->v[i].path = NULL;
        }
    }
    for (i = 0; i < s.n; i++) {
        s.items[i].e.path = NULL;
    }
    ws_stat_unrace(cache, nm->n, ws_now_ns(), d->racy_ns);
    d->skipped = s.skips.len > 0 || buf_failed(&s.skips);
    ws_watch_set_skips(d, &s.skips);
    ws_dir_adopt(d, nm, cache);
    nm = NULL;
    cache = NULL;
    /* entries kept unlooked-at count as reused, as a full scan would count them */
    d->stats.files_reused += reused;
    if (report != NULL) {
        report->files_reused += reused;
    }
    d->last_scan = WS_SCAN_DIRTY;
    rc = 0;
out:
    if (nm != NULL) {
        /* its paths are borrowed from the old manifest and the items */
        mem_free(nm->v);
        mem_free(nm);
    }
    scan_release(&s);
    mem_free(cache);
    mem_free(kept);
    mem_free(isnew);
    mem_free(dirs);
    return rc;
}

int
ws_dir_rescan(struct ws_dir *d, const struct ws_limits *limits, const struct ws_blobs *blobs,
              struct ws_scan_report *report, struct err *err)
{
    int how = WS_WATCH_FULL;

    if (report != NULL) {
        memset(report, 0, sizeof(*report));
    }
    if (!d->dirty && d->cache != NULL) {
        how = ws_watch_collect(d);
    }
    if (how == WS_WATCH_NONE) {
        /* Nothing changed; only a limit lowered since the last scan can make it fail. */
        if (limits == NULL ||
            ((limits->max_entries == 0 || d->man->n <= limits->max_entries) &&
             (limits->max_bytes == 0 || ws_manifest_bytes(d->man) <= limits->max_bytes))) {
            size_t files = ws_manifest_files(d->man);
            d->stats.files_reused += files;
            if (report != NULL) {
                report->files_reused = files;
            }
            d->last_scan = WS_SCAN_NONE;
            return 0;
        }
    } else if (how == WS_WATCH_SOME) {
        if (rescan_dirty(d, limits, blobs, report, err) == 0) {
            return 0;
        }
        /* A surprise, or an error a full scan will report in its own words. */
        log_debug("workspace '%s': %s; scanning it in full", d->root_path, err->msg);
        ws_scan_report_release(report);
        err_clear(err);
    }
    return rescan_full(d, limits, blobs, report, err);
}
