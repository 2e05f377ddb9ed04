/*
 * ws_dir.c - the workspace directory: open, sync to a manifest (incremental and
 * full), remove. The scanner is in ws_scan.c, path resolution in ws_fs.c.
 *
 * State. A ws_dir holds the manifest the directory was last made equal to (by a sync)
 * or read from (by a rescan), and a stat cache parallel to it. Between a rescan and
 * the next sync nothing else touches the directory (commands run only between a sync
 * and a rescan), so an incremental sync may trust the manifest for every path the
 * new manifest does not change. Anything that breaks that chain (a failed operation,
 * a fresh open) sets `dirty`, and the next sync is then a full one.
 *
 * Writes. A file is written by removing whatever is at its name (a file, a link, a
 * FIFO, a whole directory tree) and creating it anew with O_CREAT|O_EXCL|O_NOFOLLOW,
 * then fchmod 0644/0755 (the umask does not apply). Removing first, rather than
 * O_TRUNC on the existing name, also stops two quieter attacks: a hard link the
 * command made to another workspace file (truncating would change both) and a FIFO
 * left at the name (opening it for writing would block drun forever). A file of
 * WS_STREAM_MIN bytes or more is written through blobs->write_fd when the caller gives
 * one, so its bytes never sit in memory; a failed stream removes the partial file. A
 * full re-sync hashes such a file in pieces (hash_fd) for the same reason.
 */
#include "workspace/ws_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/pathkey.h"

#define QMAX 100

int64_t
ws_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void
ws_stat_from(struct ws_stat *c, const struct stat *st)
{
    c->dev = (uint64_t)st->st_dev;
    c->ino = (uint64_t)st->st_ino;
    c->size = (int64_t)st->st_size;
    c->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    c->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
    c->mode = (uint32_t)st->st_mode;
    c->nlink = (uint32_t)st->st_nlink;
}

int
ws_stat_same(const struct ws_stat *c, const struct stat *st)
{
    struct ws_stat now;

    if (c->mode == 0) {
        return 0;
    }
    ws_stat_from(&now, st);
    return c->dev == now.dev && c->ino == now.ino && c->size == now.size &&
           c->mtime_ns == now.mtime_ns && c->ctime_ns == now.ctime_ns && c->mode == now.mode;
}

void
ws_stat_unrace(struct ws_stat *cache, size_t n, int64_t stamp_ns, int64_t window_ns)
{
    for (size_t i = 0; i < n; i++) {
        if (cache[i].mtime_ns >= stamp_ns - window_ns ||
            cache[i].ctime_ns >= stamp_ns - window_ns) {
            cache[i].mode = 0; /* nlink stays: ws_watch.c needs it */
        }
    }
}

void
ws_split(const char *path, size_t *parent_len, const char **leaf)
{
    const char *slash = strrchr(path, '/');

    *parent_len = slash ? (size_t)(slash - path) : 0;
    *leaf = slash ? slash + 1 : path;
}

void
ws_dir_adopt(struct ws_dir *d, struct ws_manifest *m, struct ws_stat *cache)
{
    ws_manifest_free(d->man);
    mem_free(d->cache);
    d->man = m;
    d->cache = cache;
    ws_watch_settle(d);
}

int
ws_dir_own(const struct ws_dir *d, int pfd, const char *leaf, const char *shown, struct err *err)
{
    if (d->chown && fchownat(pfd, leaf, d->uid, d->gid, AT_SYMLINK_NOFOLLOW) != 0) {
        return err_set(err, ERR_IO, "cannot give '%s' to the sandbox user: %s", shown,
                       strerror(errno));
    }
    return 0;
}

int
ws_dir_owned_by(const struct ws_dir *d, uint32_t uid, uint32_t gid)
{
    if (!(geteuid() == 0 && uid != 0)) {
        return !d->chown;
    }
    return d->chown && d->uid == (uid_t)uid && d->gid == (gid_t)gid;
}

int
ws_remove_tree(const char *path, struct err *err)
{
    return ws_fs_rm(AT_FDCWD, path, path, err);
}

int
ws_dir_open(const char *path, struct ws_dir **out, struct err *err)
{
    return ws_dir_open_as(path, 0, (uint32_t)geteuid(), (uint32_t)getegid(), out, err);
}

int
ws_dir_open_bounded(const char *path, uint64_t bound_bytes, struct ws_dir **out, struct err *err)
{
    return ws_dir_open_as(path, bound_bytes, (uint32_t)geteuid(), (uint32_t)getegid(), out, err);
}

int
ws_dir_open_as(const char *path, uint64_t bound_bytes, uint32_t uid, uint32_t gid,
               struct ws_dir **out, struct err *err)
{
    struct ws_dir *d = NULL;
    struct stat st;
    int created = 0;
    int other = geteuid() == 0 && uid != 0;

    *out = NULL;
    if (!other) {
        uid = (uint32_t)geteuid();
        gid = (uint32_t)getegid();
    }
    if (other && lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
        (st.st_uid != uid || st.st_gid != gid)) {
        /* Left by a daemon that ran commands as another user: start afresh. */
        if (ws_fs_rm(AT_FDCWD, path, path, err) != 0) {
            return -1;
        }
    }
    if (mkdir(path, 0700) == 0) {
        created = 1;
    } else if (errno != EEXIST) {
        return err_set(err, ERR_IO, "cannot make the workspace directory '%s': %s", path,
                       strerror(errno));
    }
    /* Before the bound is mounted: its tmpfs root takes the directory's owner and mode. */
    if (other && created && chown(path, uid, gid) != 0) {
        return err_set(err, ERR_IO, "cannot give the workspace directory '%s' to uid %lu: %s", path,
                       (unsigned long)uid, strerror(errno));
    }
    d = mem_calloc(1, sizeof(*d));
    if (d == NULL) {
        return err_set(err, ERR_NOMEM, "cannot open workspace '%s': out of memory", path);
    }
    d->root_fd = -1;
    d->root_path = mem_strdup(path);
    if (d->root_path == NULL) {
        err_set(err, ERR_NOMEM, "cannot open workspace '%s': out of memory", path);
        goto fail;
    }
    /* Mounted before the root fd is opened, so the fd is the bounded filesystem's root. */
    if (ws_bound_mount(d, path, bound_bytes, err) != 0) {
        goto fail;
    }
    if (d->bound_mounted) {
        created = 1; /* a fresh, empty filesystem */
    }
    d->root_fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d->root_fd < 0) {
        err_set(err, ERR_IO, "cannot open the workspace directory '%s': %s", path,
                errno == ELOOP || errno == ENOTDIR ? "it is not a directory (a symlink?)"
                                                   : strerror(errno));
        goto fail;
    }
    if (fstat(d->root_fd, &st) != 0 || st.st_uid != uid) {
        err_set(err, ERR_DENIED, "workspace directory '%s' is not owned by uid %lu", path,
                (unsigned long)uid);
        goto fail;
    }
    d->chown = other;
    d->uid = (uid_t)uid;
    d->gid = (gid_t)gid;
    if (ws_manifest_new(&d->man, err) != 0) {
        err_set(err, ERR_NOMEM, "cannot open workspace '%s': out of memory", path);
        goto fail;
    }
    d->dirty = !created;
    d->racy_ns = WS_RACY_NS;
    ws_watch_open(d);
    *out = d;
    return 0;
fail:
    ws_dir_close(d);
    return -1;
}

void
ws_dir_close(struct ws_dir *d)
{
    if (d == NULL) {
        return;
    }
    ws_watch_close(d->watch);
    if (d->root_fd >= 0) {
        close(d->root_fd);
    }
    ws_bound_unmount(d);
    ws_manifest_free(d->man);
    mem_free(d->cache);
    mem_free(d->root_path);
    mem_free(d);
}

int
ws_dir_destroy(struct ws_dir *d, struct err *err)
{
    char *copy;
    int rc;

    if (d == NULL) {
        return 0;
    }
    copy = mem_strdup(d->root_path);
    if (copy == NULL) {
        ws_dir_close(d);
        return err_set(err, ERR_NOMEM, "cannot remove the workspace: out of memory");
    }
    ws_dir_close(d);
    /* By name from here: the path was made by us under the private runtime root. */
    rc = ws_fs_rm(AT_FDCWD, copy, copy, err);
    mem_free(copy);
    return rc;
}

const struct ws_manifest *
ws_dir_manifest(const struct ws_dir *d)
{
    return d->man;
}

const char *
ws_dir_path(const struct ws_dir *d)
{
    return d->root_path;
}

int
ws_dir_skipped(const struct ws_dir *d)
{
    return d->skipped;
}

void
ws_dir_stats(const struct ws_dir *d, struct ws_dir_stats *out)
{
    size_t mem = sizeof(*d) + sizeof(*d->man) + strlen(d->root_path) + 1;

    mem += d->man->cap * sizeof(struct ws_entry);
    for (size_t i = 0; i < d->man->n; i++) {
        /* malloc rounds each key up to 16 bytes and adds 8 of its own */
        mem += ((strlen(d->man->v[i].path) + 1 + 8 + 15) / 16) * 16;
    }
    if (d->cache != NULL) {
        mem += d->man->n * sizeof(struct ws_stat);
    }
    *out = d->stats;
    out->mem_bytes = mem;
}

/* Writes all of data to fd. */
static int
write_all(int fd, const char *data, size_t len, const char *shown, struct err *err)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return err_set(err, ERR_IO, "cannot write '%s': %s", shown, strerror(errno));
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * Writes regular file e (nothing at its name now) through blobs->write_fd, without
 * holding its bytes; on any failure the partial file is removed again.
 */
static int
write_streamed(const struct ws_dir *d, const struct ws_entry *e, const struct ws_blobs *blobs,
               int pfd, const char *leaf, const char *q, struct stat *st, struct err *err)
{
    mode_t mode = e->type == WS_EXEC ? 0755 : 0644;
    int fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);

    if (fd < 0) {
        return err_set(err, ERR_IO, "cannot create '%s': %s", q, strerror(errno));
    }
    if (d->chown && fchown(fd, d->uid, d->gid) != 0) {
        err_set(err, ERR_IO, "cannot give '%s' to the sandbox user: %s", q, strerror(errno));
        goto fail;
    }
    if (blobs->write_fd(blobs->ctx, e->hash, e->size, fd, err) != 0) {
        err_wrap(err, "cannot write '%s'", q);
        goto fail;
    }
    if (fchmod(fd, mode) != 0 || fstat(fd, st) != 0) {
        err_set(err, ERR_IO, "cannot set the mode of '%s': %s", q, strerror(errno));
        goto fail;
    }
    if ((uint64_t)st->st_size != e->size) {
        err_set(err, ERR_CORRUPT, "blob for '%s' holds %lld bytes, the manifest says %llu", q,
                (long long)st->st_size, (unsigned long long)e->size);
        goto fail;
    }
    close(fd);
    return 0;
fail:
    close(fd);
    unlinkat(pfd, leaf, 0);
    return -1;
}

/*
 * Makes the disk entry at e->path what e says, whatever is there now, and fills *c
 * with the stat of the result. `blob` is scratch space.
 */
static int
write_entry(struct ws_dir *d, const struct ws_entry *e, const struct ws_blobs *blobs,
            struct buf *blob, struct ws_stat *c, struct err *err)
{
    char q[QMAX];
    size_t plen;
    const char *leaf;
    struct stat st;
    int pfd = -1, fd = -1;
    int rc = -1;

    pathkey_quote(e->path, strlen(e->path), q, sizeof(q));
    ws_split(e->path, &plen, &leaf);
    if (ws_fs_open_dir(d->root_fd, e->path, plen, WS_FS_CREATE, &pfd, err) != 0) {
        return -1;
    }
    if (e->type == WS_DIR) {
        if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
            if ((st.st_mode & 07777) != 0755 &&
                fchmodat(pfd, leaf, 0755, AT_SYMLINK_NOFOLLOW) != 0) {
                err_set(err, ERR_IO, "cannot set the mode of '%s': %s", q, strerror(errno));
                goto out;
            }
        } else {
            if (ws_fs_rm(pfd, leaf, q, err) != 0) {
                goto out;
            }
            if (mkdirat(pfd, leaf, 0755) != 0 ||
                fchmodat(pfd, leaf, 0755, AT_SYMLINK_NOFOLLOW) != 0) {
                err_set(err, ERR_IO, "cannot make directory '%s': %s", q, strerror(errno));
                goto out;
            }
            if (ws_dir_own(d, pfd, leaf, q, err) != 0) {
                goto out;
            }
            d->stats.dirs_made++;
        }
        if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            err_set(err, ERR_IO, "cannot inspect '%s': %s", q, strerror(errno));
            goto out;
        }
        ws_stat_from(c, &st);
        rc = 0;
        goto out;
    }
    if (ws_fs_rm(pfd, leaf, q, err) != 0) {
        goto out;
    }
    if (e->type != WS_SYMLINK && blobs->write_fd != NULL && e->size >= WS_STREAM_MIN) {
        rc = write_streamed(d, e, blobs, pfd, leaf, q, &st, err);
        if (rc == 0) {
            ws_stat_from(c, &st);
            d->stats.files_written++;
        }
        goto out;
    }
    buf_reset(blob);
    blob->max = (size_t)e->size;
    if (blobs->get(blobs->ctx, e->hash, blob, err) != 0) {
        err_wrap(err, "cannot write '%s'", q);
        goto out;
    }
    if (blob->len != e->size) {
        err_set(err, ERR_CORRUPT, "blob for '%s' holds %zu bytes, the manifest says %llu", q,
                blob->len, (unsigned long long)e->size);
        goto out;
    }
    if (e->type == WS_SYMLINK) {
        if (memchr(blob->data, '\0', blob->len) != NULL) {
            err_set(err, ERR_CORRUPT, "symlink target of '%s' contains a NUL byte", q);
            goto out;
        }
        if (symlinkat(blob->data, pfd, leaf) != 0) {
            err_set(err, ERR_IO, "cannot make symlink '%s': %s", q, strerror(errno));
            goto out;
        }
        if (ws_dir_own(d, pfd, leaf, q, err) != 0) {
            goto out;
        }
        if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            err_set(err, ERR_IO, "cannot inspect '%s': %s", q, strerror(errno));
            goto out;
        }
    } else {
        mode_t mode = e->type == WS_EXEC ? 0755 : 0644;
        fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0) {
            err_set(err, ERR_IO, "cannot create '%s': %s", q, strerror(errno));
            goto out;
        }
        if (d->chown && fchown(fd, d->uid, d->gid) != 0) {
            err_set(err, ERR_IO, "cannot give '%s' to the sandbox user: %s", q, strerror(errno));
            goto out;
        }
        if (write_all(fd, blob->data, blob->len, q, err) != 0) {
            goto out;
        }
        if (fchmod(fd, mode) != 0 || fstat(fd, &st) != 0) {
            err_set(err, ERR_IO, "cannot set the mode of '%s': %s", q, strerror(errno));
            goto out;
        }
    }
    ws_stat_from(c, &st);
    d->stats.files_written++;
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
    }
    if (pfd >= 0) {
        close(pfd);
    }
    return rc;
}

/*
 * Removes `path` from disk (recursively, links never followed), then the parent
 * directories that are left empty and that `keep` neither names nor needs.
 */
static int
remove_path(struct ws_dir *d, const char *path, const struct ws_manifest *keep, struct err *err)
{
    char q[QMAX];
    size_t plen;
    const char *leaf;
    int pfd;
    struct err nf;

    pathkey_quote(path, strlen(path), q, sizeof(q));
    ws_split(path, &plen, &leaf);
    if (ws_fs_open_dir(d->root_fd, path, plen, 0, &pfd, &nf) != 0) {
        if (nf.code == ERR_NOTFOUND) {
            return 0; /* its parent is gone or not a directory: nothing below to remove */
        }
        *err = nf;
        return -1;
    }
    if (ws_fs_rm(pfd, leaf, q, err) != 0) {
        close(pfd);
        return -1;
    }
    close(pfd);
    d->stats.removed++;
    while (plen > 0) {
        size_t gplen;
        const char *p = path;
        if (ws_manifest_find(keep, p, plen) != (size_t)-1 || ws_manifest_has_under(keep, p, plen)) {
            break;
        }
        gplen = plen;
        while (gplen > 0 && p[gplen - 1] != '/') {
            gplen--;
        }
        if (ws_fs_open_dir(d->root_fd, p, gplen ? gplen - 1 : 0, 0, &pfd, &nf) != 0) {
            break;
        }
        {
            char name[PATHKEY_COMPONENT_MAX + 1];
            size_t nlen = plen - gplen;
            memcpy(name, p + gplen, nlen);
            name[nlen] = '\0';
            if (unlinkat(pfd, name, AT_REMOVEDIR) != 0) {
                close(pfd);
                /* not empty (a skipped entry is left in it), or not a directory: leave it,
                 * and since no manifest names it, let the next rescan find it */
                ws_watch_full_next(d);
                break;
            }
        }
        close(pfd);
        plen = gplen ? gplen - 1 : 0;
    }
    return 0;
}

static int
sync_incremental(struct ws_dir *d, const struct ws_manifest *m, const struct ws_blobs *blobs,
                 struct err *err)
{
    struct ws_manifest *nm = NULL;
    struct ws_stat *cache = NULL;
    struct buf blob;
    int rc = -1;

    buf_init(&blob, 0);
    if (ws_manifest_clone(m, &nm, err) != 0) {
        goto out;
    }
    cache = mem_calloc(m->n ? m->n : 1, sizeof(*cache));
    if (cache == NULL) {
        err_set(err, ERR_NOMEM, "cannot sync the workspace: out of memory");
        goto out;
    }
    d->dirty = 1; /* until we finish */
    for (size_t i = 0; i < d->man->n; i++) {
        const char *p = d->man->v[i].path;
        if (ws_manifest_find(m, p, strlen(p)) == (size_t)-1 && remove_path(d, p, m, err) != 0) {
            goto out;
        }
    }
    for (size_t j = 0; j < m->n; j++) {
        const struct ws_entry *e = &m->v[j];
        size_t i = ws_manifest_find(d->man, e->path, strlen(e->path));
        if (i != (size_t)-1 && d->man->v[i].type == e->type && d->man->v[i].size == e->size &&
            memcmp(d->man->v[i].hash, e->hash, HASH_LEN) == 0) {
            if (d->cache != NULL) {
                cache[j] = d->cache[i];
            }
            continue;
        }
        if (write_entry(d, e, blobs, &blob, &cache[j], err) != 0) {
            goto out;
        }
    }
    ws_stat_unrace(cache, m->n, ws_now_ns(), d->racy_ns);
    ws_dir_adopt(d, nm, cache);
    nm = NULL;
    cache = NULL;
    d->dirty = 0;
    rc = 0;
out:
    ws_manifest_free(nm);
    mem_free(cache);
    buf_release(&blob);
    return rc;
}

/* State of one full re-sync. */
struct resync {
    struct ws_dir *d;
    const struct ws_manifest *m;
    struct ws_stat *cache;   /* parallel to m */
    unsigned char *verified; /* parallel to m: disk already matches */
    struct buf path;         /* the directory being walked */
    struct buf data;         /* scratch for reading contents */
    int unwanted;            /* > 0: walking a tree that is being removed */
};

/*
 * SHA-256 of what fd holds, read in pieces: 1 if it held exactly `size` bytes (h set),
 * 0 if it held another number, -1 on a read error.
 */
static int
hash_fd(int fd, uint64_t size, uint8_t h[HASH_LEN], const char *shown, struct err *err)
{
    size_t cap = (size_t)64 << 10;
    char *piece = mem_alloc(cap);
    struct hash_ctx *hc = hash_new();
    uint64_t total = 0;
    int rc = -1;

    if (piece == NULL || hc == NULL) {
        err_set(err, ERR_NOMEM, "cannot read '%s': out of memory", shown);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, piece, cap);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            err_set(err, ERR_IO, "cannot read '%s': %s", shown, strerror(errno));
            goto out;
        }
        if (n == 0) {
            break;
        }
        total += (uint64_t)n;
        if (total > size) {
            rc = 0;
            goto out;
        }
        hash_update(hc, piece, (size_t)n);
    }
    hash_final(hc, h);
    hc = NULL;
    rc = total == size;
out:
    hash_free(hc);
    mem_free(piece);
    return rc;
}

/* 1 if the file or link at name (stat st) holds exactly e's content. */
static int
content_matches(struct resync *r, int pfd, const char *name, const struct stat *st,
                const struct ws_entry *e, struct err *err)
{
    uint8_t h[HASH_LEN];
    size_t i = ws_manifest_find(r->d->man, e->path, strlen(e->path));
    int fd;
    int rc;

    /* The stat cache vouches for content only if nothing about the inode changed:
     * ctime cannot be set by the command, and racy entries were dropped already. */
    if (!r->d->dirty && r->d->cache != NULL && i != (size_t)-1 && r->d->man->v[i].type == e->type &&
        r->d->man->v[i].size == e->size && memcmp(r->d->man->v[i].hash, e->hash, HASH_LEN) == 0 &&
        ws_stat_same(&r->d->cache[i], st)) {
        return 1;
    }
    if ((uint64_t)st->st_size != e->size) {
        return 0;
    }
    buf_reset(&r->data);
    r->data.max = (size_t)e->size;
    if (S_ISLNK(st->st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(pfd, name, target, sizeof(target));
        if (n < 0 || (uint64_t)n != e->size) {
            return 0;
        }
        hash_sha256(target, (size_t)n, h);
    } else {
        struct stat st2;
        fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            return 0;
        }
        if (fstat(fd, &st2) != 0 || st2.st_ino != st->st_ino || !S_ISREG(st2.st_mode)) {
            close(fd);
            return 0;
        }
        if (e->size >= WS_STREAM_MIN) {
            /* big files are hashed in pieces, never read whole (as the sync writes them) */
            rc = hash_fd(fd, e->size, h, e->path, err);
            close(fd);
            if (rc < 0) {
                return -1;
            }
            r->d->stats.files_read++;
            return rc == 1 && memcmp(h, e->hash, HASH_LEN) == 0;
        }
        rc = ws_fs_read_fd(fd, &r->data, e->path, err);
        close(fd);
        if (rc != 0) {
            if (err->code == ERR_TOOBIG) {
                err_clear(err);
                return 0;
            }
            return -1;
        }
        hash_sha256(r->data.data ? r->data.data : "", r->data.len, h);
        r->d->stats.files_read++;
    }
    return memcmp(h, e->hash, HASH_LEN) == 0;
}

/* Walks the directory at r->path, keeping what matches r->m and removing the rest. */
static int
resync_dir(struct resync *r, struct err *err)
{
    struct buf names;
    size_t base = r->path.len;
    int pfd = -1;
    int rc = -1;
    char q[QMAX];

    buf_init(&names, (size_t)64 << 20);
    if (ws_fs_list(r->d->root_fd, r->path.data ? r->path.data : "", base, WS_FS_CREATE, &names,
                   &pfd, err) != 0) {
        goto out;
    }
    for (size_t off = 0; off < names.len; off += strlen(names.data + off) + 1) {
        const char *name = names.data + off;
        struct stat st;
        size_t idx;
        int keep = 0;

        buf_truncate(&r->path, base);
        if (base > 0) {
            buf_putc(&r->path, '/');
        }
        buf_puts(&r->path, name);
        if (buf_failed(&r->path)) {
            buf_err(&r->path, "a workspace path", err);
            goto out;
        }
        pathkey_quote(r->path.data, r->path.len, q, sizeof(q));
        if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) {
                continue;
            }
            err_set(err, ERR_IO, "cannot inspect '%s': %s", q, strerror(errno));
            goto out;
        }
        idx = r->path.len <= PATHKEY_MAX ? ws_manifest_find(r->m, r->path.data, r->path.len)
                                         : (size_t)-1;
        if (S_ISDIR(st.st_mode)) {
            int wanted_empty = idx != (size_t)-1 && r->m->v[idx].type == WS_DIR;
            if (wanted_empty || (r->path.len <= PATHKEY_MAX &&
                                 ws_manifest_has_under(r->m, r->path.data, r->path.len))) {
                if ((st.st_mode & 07777) != 0755 &&
                    fchmodat(pfd, name, 0755, AT_SYMLINK_NOFOLLOW) != 0) {
                    err_set(err, ERR_IO, "cannot set the mode of '%s': %s", q, strerror(errno));
                    goto out;
                }
                if (resync_dir(r, err) != 0) {
                    goto out;
                }
                if (wanted_empty && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                    ws_stat_from(&r->cache[idx], &st);
                    r->verified[idx] = 1;
                }
                continue;
            }
            if (r->d->skipped) {
                /* An unwanted tree that may hold entries the scan could not store: empty
                 * it entry by entry, so each of those is counted, then remove it. */
                int rc2;
                r->unwanted++;
                rc2 = resync_dir(r, err);
                r->unwanted--;
                if (rc2 != 0) {
                    goto out;
                }
            }
        } else if (idx != (size_t)-1) {
            const struct ws_entry *e = &r->m->v[idx];
            int type_ok =
                (e->type == WS_SYMLINK && S_ISLNK(st.st_mode)) ||
                (e->type == WS_FILE && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644) ||
                (e->type == WS_EXEC && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0755);
            if (type_ok && st.st_nlink <= 1) {
                keep = content_matches(r, pfd, name, &st, e, err);
                if (keep < 0) {
                    goto out;
                }
            }
            if (keep) {
                ws_stat_from(&r->cache[idx], &st);
                r->verified[idx] = 1;
                continue;
            }
        }
        if (ws_fs_rm(pfd, name, q, err) != 0) {
            goto out;
        }
        if (r->unwanted == 0) {
            r->d->stats.removed++; /* a tree counts once */
        }
        {
            /* What no checkpoint can hold: a name that is not a valid key, or a FIFO,
             * socket or device. The parents walked here are all valid keys. */
            struct err bad;
            if (!(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode)) ||
                r->path.len > PATHKEY_MAX || pathkey_check(r->path.data, r->path.len, &bad) != 0) {
                r->d->stats.removed_unstorable++;
            }
        }
    }
    rc = 0;
out:
    buf_truncate(&r->path, base);
    if (pfd >= 0) {
        close(pfd);
    }
    buf_release(&names);
    return rc;
}

int
ws_dir_resync(struct ws_dir *d, const struct ws_manifest *m, const struct ws_blobs *blobs,
              struct err *err)
{
    struct resync r;
    struct ws_manifest *nm = NULL;
    int rc = -1;

    memset(&r, 0, sizeof(r));
    r.d = d;
    r.m = m;
    buf_init(&r.path, (size_t)1 << 20);
    buf_init(&r.data, 0);
    if (ws_manifest_clone(m, &nm, err) != 0) {
        goto out;
    }
    r.cache = mem_calloc(m->n ? m->n : 1, sizeof(*r.cache));
    r.verified = mem_calloc(m->n ? m->n : 1, 1);
    if (r.cache == NULL || r.verified == NULL) {
        err_set(err, ERR_NOMEM, "cannot re-sync the workspace: out of memory");
        goto out;
    }
    if (resync_dir(&r, err) != 0) {
        goto out;
    }
    for (size_t j = 0; j < m->n; j++) {
        if (!r.verified[j] && write_entry(d, &m->v[j], blobs, &r.data, &r.cache[j], err) != 0) {
            goto out;
        }
    }
    ws_stat_unrace(r.cache, m->n, ws_now_ns(), d->racy_ns);
    ws_watch_set_skips(d, NULL); /* the walk removed every skipped entry */
    d->skipped = 0;
    ws_dir_adopt(d, nm, r.cache);
    nm = NULL;
    r.cache = NULL;
    d->dirty = 0;
    rc = 0;
out:
    if (rc != 0) {
        d->dirty = 1;
    }
    ws_manifest_free(nm);
    mem_free(r.cache);
    mem_free(r.verified);
    buf_release(&r.path);
    buf_release(&r.data);
    return rc;
}

int
ws_dir_sync(struct ws_dir *d, const struct ws_manifest *m, const struct ws_blobs *blobs,
            struct err *err)
{
    if (d->dirty) {
        return ws_dir_resync(d, m, blobs, err);
    }
    return sync_incremental(d, m, blobs, err);
}
