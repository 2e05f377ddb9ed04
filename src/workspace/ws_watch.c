/*
 * ws_watch.c - which directories of the workspace a command changed (inotify).
 *
 * A rescan that stats every entry costs tens of milliseconds at 10,000 files, most of
 * it in the kernel; a sandboxed `echo hi` costs a few. So a ws_dir keeps an inotify
 * instance with one watch per directory of its tree, and a table wd -> directory key.
 * Whenever the disk is known to equal the manifest (the end of a successful sync,
 * resync or rescan: ws_dir_adopt), ws_watch_settle() discards the queued events (they
 * are drun's own writes) and watches every directory not yet watched. The next rescan
 * reads the queue (ws_watch_collect): no events means nothing changed; otherwise only
 * the directories named by events are listed again (ws_scan.c).
 *
 * Why the queue holds every change the command made (docs/workspace.md, "Incremental
 * rescan"):
 *   - every process of the command is dead before the rescan, and inotify events are
 *     queued synchronously by the system calls that cause them, so they are all queued;
 *   - marks live on inodes, so events arrive whatever mount (the sandbox's bind of the
 *     workspace) the change was made through;
 *   - a change to a name raises an event in the directory of the name used: create,
 *     delete, rename, write (IN_MODIFY), chmod/utimes (IN_ATTRIB), and IN_CLOSE_WRITE
 *     when the last descriptor opened for writing closes, at the latest when its process
 *     dies, which covers writes through a shared mmap (those raise no IN_MODIFY);
 *   - a write through a hard link raises events only in the directory of the name used,
 *     so every directory holding a file with more than one link is treated as changed
 *     at every rescan, and the scanner falls back to a full scan when it meets a file
 *     with several links that it did not know (a link made during the command; making
 *     a link raises IN_ATTRIB on the inode only, which a directory watch does not see);
 *   - what a table built from paths cannot follow makes the next rescan a full one and
 *     the next settle rebuild the table: a queue overflow, an event for an unknown wd, a
 *     directory renamed (IN_MOVED_FROM/TO with IN_ISDIR, IN_MOVE_SELF), an unmount.
 * When in doubt, the rescan is a full one: the fast path must never be wrong.
 *
 * Watches are added through "/proc/self/fd/N" of an O_PATH fd opened with
 * ws_fs_open_dir, so no symlink a command planted is followed; IN_ONLYDIR refuses
 * anything but a directory. If a watch cannot be added (fs.inotify.max_user_watches,
 * EMFILE, no /proc) the table is marked incomplete and rescans are full ones.
 */
#include "workspace/ws_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "util/log.h"
#include "util/mem.h"

#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO |                 \
     IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

/* Cap on each list of always-rescanned directories; past it, rescans are full ones. */
#define STICKY_MAX ((size_t)16 << 20)

static int test_fail;

/* One slot of the key -> wd table (open addressing, linear probing). */
struct slot {
    const char *key; /* borrowed from bywd[wd]; NULL: empty; &tomb: deleted */
    size_t len;
    int wd;
};

static const char tomb[1];

struct ws_watch;
static void names_clear(struct ws_watch *w);

/* What one name in one directory went through during a command (ws_watch_collect). */
struct name_rec {
    uint64_t h; /* hash of wd and name; 0: empty slot */
    int wd;
    char *name;
    unsigned flags;  /* NAME_* */
    uint32_t cookie; /* of its IN_MOVED_FROM */
};

#define NAME_WROTE 1u    /* IN_MODIFY, IN_CLOSE_WRITE, IN_ATTRIB */
#define NAME_GONE  2u    /* IN_DELETE, IN_MOVED_TO over it, or moved twice */
#define NAME_MOVED 4u    /* IN_MOVED_FROM with `cookie` */
#define NAMES_MAX  65536 /* names followed per rescan; past it, a full scan */

struct ws_watch {
    int fd;                 /* the inotify instance, -1 if none */
    char **bywd;            /* wd -> directory key (owned); NULL where none */
    unsigned char *hit;     /* wd -> changed since the last settle */
    size_t nbywd;           /* entries in bywd and hit */
    size_t live;            /* watches in the table */
    struct slot *tab;       /* key -> wd */
    size_t tcap;            /* slots (a power of two, or 0) */
    size_t tused;           /* slots in use, tombstones included */
    int complete;           /* every directory of the tree is watched */
    int stale;              /* a key in the table may name another directory: rebuild */
    int logged;             /* the failure to watch was logged */
    int full_next;          /* the disk may hold directories no manifest names: scan in full */
    struct buf skips;       /* directories holding entries the last scan skipped */
    struct buf links;       /* directories holding a file with more than one link */
    int track;              /* recording names (during ws_watch_collect) */
    struct name_rec *names; /* open addressing */
    size_t ncap, nnames;
    uint32_t *cookies_to; /* cookies of IN_MOVED_TO events */
    size_t nto, capto;
};

static uint64_t
hash_key(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    }
    return h;
}

/* The slot holding p[0..n), or (size_t)-1. */
static size_t
tab_find(const struct ws_watch *w, const char *p, size_t n)
{
    size_t mask = w->tcap - 1;

    if (w->tcap == 0) {
        return (size_t)-1;
    }
    for (size_t i = (size_t)hash_key(p, n) & mask;; i = (i + 1) & mask) {
        const struct slot *s = &w->tab[i];
        if (s->key == NULL) {
            return (size_t)-1;
        }
        if (s->key != tomb && s->len == n && memcmp(s->key, p, n) == 0) {
            return i;
        }
    }
}

static int
tab_insert(struct ws_watch *w, const char *key, size_t len, int wd)
{
    size_t mask;
    size_t i;

    if ((w->tused + 1) * 4 > w->tcap * 3) {
        size_t cap = w->tcap ? w->tcap : 64;
        struct slot *old = w->tab;
        size_t oldcap = w->tcap;
        while ((w->live + 1) * 2 > cap) {
            cap *= 2;
        }
        w->tab = mem_calloc(cap, sizeof(*w->tab));
        if (w->tab == NULL) {
            w->tab = old;
            return -1;
        }
        w->tcap = cap;
        w->tused = 0;
        for (size_t j = 0; j < oldcap; j++) {
            if (old[j].key != NULL && old[j].key != tomb) {
                for (i = (size_t)hash_key(old[j].key, old[j].len) & (cap - 1);
                     w->tab[i].key != NULL; i = (i + 1) & (cap - 1)) {
                }
                w->tab[i] = old[j];
                w->tused++;
            }
        }
        mem_free(old);
    }
    mask = w->tcap - 1;
    for (i = (size_t)hash_key(key, len) & mask; w->tab[i].key != NULL && w->tab[i].key != tomb;
         i = (i + 1) & mask) {
    }
    if (w->tab[i].key == NULL) {
        w->tused++;
    }
    w->tab[i].key = key;
    w->tab[i].len = len;
    w->tab[i].wd = wd;
    return 0;
}

/* Drops watch wd from the table (the kernel dropped it, or a test forgets it). */
static void
forget(struct ws_watch *w, int wd)
{
    char *key = w->bywd[wd];
    size_t i = tab_find(w, key, strlen(key));

    if (i != (size_t)-1) {
        w->tab[i].key = tomb;
    }
    mem_free(key);
    w->bywd[wd] = NULL;
    w->hit[wd] = 0;
    w->live--;
}

/* Forgets every watch and closes the instance (which drops every mark and the queue). */
static void
clear_table(struct ws_watch *w)
{
    for (size_t i = 0; i < w->nbywd; i++) {
        mem_free(w->bywd[i]);
    }
    mem_free(w->bywd);
    mem_free(w->hit);
    mem_free(w->tab);
    w->bywd = NULL;
    w->hit = NULL;
    w->nbywd = 0;
    w->live = 0;
    w->tab = NULL;
    w->tcap = 0;
    w->tused = 0;
    w->stale = 0;
    w->complete = 0;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
}

/* Forgets every watch and starts a new inotify instance (fd -1 if that fails). */
static void
reset(struct ws_watch *w)
{
    clear_table(w);
    w->fd = test_fail == 1 ? -1 : inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
}

void
ws_watch_full_next(struct ws_dir *d)
{
    if (d->watch != NULL) {
        d->watch->full_next = 1;
    }
}

void
ws_watch_test_fail(int mode)
{
    test_fail = mode;
}

void
ws_watch_open(struct ws_dir *d)
{
    struct ws_watch *w = mem_calloc(1, sizeof(*w));

    d->watch = NULL;
    if (w == NULL) {
        return;
    }
    w->fd = -1;
    buf_init(&w->skips, STICKY_MAX);
    buf_init(&w->links, STICKY_MAX);
    reset(w);
    if (w->fd < 0) {
        log_debug("workspace '%s': no inotify (%s); every rescan reads the whole tree",
                  d->root_path, test_fail == 1 ? "test hook" : strerror(errno));
    }
    d->watch = w;
}

void
ws_watch_close(struct ws_watch *w)
{
    if (w == NULL) {
        return;
    }
    clear_table(w);
    names_clear(w);
    buf_release(&w->skips);
    buf_release(&w->links);
    mem_free(w);
}

/* Watches directory p[0..n); 0, or -1 with errno. */
static int
add_watch(struct ws_watch *w, int root_fd, const char *p, size_t n)
{
    char proc[64];
    struct err e;
    char *key;
    int fd, wd, saved;

    if (test_fail == 2) {
        errno = ENOSPC;
        return -1;
    }
    if (ws_fs_open_dir(root_fd, p, n, 0, &fd, &e) != 0) {
        errno = ENOENT;
        return -1;
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    wd = inotify_add_watch(w->fd, proc, WATCH_MASK);
    saved = errno;
    close(fd);
    if (wd < 0) {
        errno = saved;
        return -1;
    }
    if ((size_t)wd < w->nbywd && w->bywd[wd] != NULL) {
        /* The inode is already watched under another key: the table is wrong. */
        w->stale = 1;
        errno = EEXIST;
        return -1;
    }
    if ((size_t)wd >= w->nbywd) {
        size_t cap = w->nbywd ? w->nbywd * 2 : 256;
        char **v;
        unsigned char *h;
        while (cap <= (size_t)wd) {
            cap *= 2;
        }
        v = mem_realloc(w->bywd, cap * sizeof(*v));
        if (v == NULL) {
            errno = ENOMEM;
            return -1;
        }
        w->bywd = v;
        h = mem_realloc(w->hit, cap);
        if (h == NULL) {
            errno = ENOMEM;
            return -1;
        }
        w->hit = h;
        memset(w->bywd + w->nbywd, 0, (cap - w->nbywd) * sizeof(*v));
        memset(w->hit + w->nbywd, 0, cap - w->nbywd);
        w->nbywd = cap;
    }
    key = mem_strndup(p, n);
    if (key == NULL || tab_insert(w, key, n, wd) != 0) {
        mem_free(key);
        w->stale = 1; /* the kernel has a watch the table lacks */
        errno = ENOMEM;
        return -1;
    }
    w->bywd[wd] = key;
    w->live++;
    return 0;
}

static void
names_clear(struct ws_watch *w)
{
    for (size_t i = 0; i < w->ncap; i++) {
        mem_free(w->names[i].name);
    }
    mem_free(w->names);
    mem_free(w->cookies_to);
    w->names = NULL;
    w->ncap = w->nnames = 0;
    w->cookies_to = NULL;
    w->nto = w->capto = 0;
}

/*
 * Records what happened to a file's name. A hard link made, written through and removed
 * within one command leaves no event in the directory of the file's other names (making
 * a link raises IN_ATTRIB on the inode only), so a name that was written and then left
 * the tree makes the rescan a full one. A name moved within the tree needs no such care:
 * the scan meets it at its new name with several links, and falls back there.
 */
static void
note_name(struct ws_watch *w, const struct inotify_event *ev)
{
    uint64_t h = hash_key(ev->name, strlen(ev->name)) ^ ((uint64_t)(unsigned)ev->wd << 32);
    struct name_rec *r;
    size_t i;

    if (h == 0) {
        h = 1;
    }
    if (ev->mask & IN_MOVED_TO) {
        if (w->nto == w->capto) {
            size_t cap = w->capto ? w->capto * 2 : 64;
            uint32_t *v = mem_realloc(w->cookies_to, cap * sizeof(*v));
            if (v == NULL) {
                w->stale = 1;
                return;
            }
            w->cookies_to = v;
            w->capto = cap;
        }
        w->cookies_to[w->nto++] = ev->cookie;
    }
    if ((w->nnames + 1) * 2 > w->ncap) {
        size_t cap = w->ncap ? w->ncap * 2 : 256;
        struct name_rec *old = w->names, *v;
        size_t oldcap = w->ncap;
        if (cap > 2 * NAMES_MAX || (v = mem_calloc(cap, sizeof(*v))) == NULL) {
            w->stale = 1; /* too much to follow: scan in full */
            return;
        }
        for (size_t j = 0; j < oldcap; j++) {
            if (old[j].h != 0) {
                for (i = old[j].h & (cap - 1); v[i].h != 0; i = (i + 1) & (cap - 1)) {
                }
                v[i] = old[j];
            }
        }
        mem_free(old);
        w->names = v;
        w->ncap = cap;
    }
    for (i = h & (w->ncap - 1);; i = (i + 1) & (w->ncap - 1)) {
        r = &w->names[i];
        if (r->h == 0) {
            r->name = mem_strdup(ev->name);
            if (r->name == NULL) {
                w->stale = 1;
                return;
            }
            r->h = h;
            r->wd = ev->wd;
            w->nnames++;
            break;
        }
        if (r->h == h && r->wd == ev->wd && strcmp(r->name, ev->name) == 0) {
            break;
        }
    }
    if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB)) {
        r->flags |= NAME_WROTE;
    }
    if (ev->mask & (IN_DELETE | IN_MOVED_TO)) {
        r->flags |= NAME_GONE;
    }
    if (ev->mask & IN_MOVED_FROM) {
        if (r->flags & NAME_MOVED) {
            r->flags |= NAME_GONE; /* keep it simple: one move per name is followed */
        }
        r->flags |= NAME_MOVED;
        r->cookie = ev->cookie;
    }
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* 1 if some name was written and then left the tree during the command. */
static int
written_name_left(struct ws_watch *w)
{
    if (w->nto > 1) {
        qsort(w->cookies_to, w->nto, sizeof(*w->cookies_to), cmp_u32);
    }
    for (size_t i = 0; i < w->ncap; i++) {
        const struct name_rec *r = &w->names[i];
        unsigned gone;
        if (r->h == 0 || !(r->flags & NAME_WROTE)) {
            continue;
        }
        gone = r->flags & NAME_GONE;
        if (!gone && (r->flags & NAME_MOVED) &&
            (w->nto == 0 ||
             bsearch(&r->cookie, w->cookies_to, w->nto, sizeof(*w->cookies_to), cmp_u32) == NULL)) {
            gone = 1; /* moved out of the watched tree */
        }
        if (gone) {
            return 1;
        }
    }
    return 0;
}

/* Reads one queued event into the table and the changed set. */
static void
take_event(struct ws_watch *w, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        w->stale = 1; /* events were lost */
        return;
    }
    if (ev->wd < 0 || (size_t)ev->wd >= w->nbywd || w->bywd[ev->wd] == NULL) {
        w->stale = 1; /* a watch the table does not know */
        return;
    }
    if (ev->mask & IN_IGNORED) {
        forget(w, ev->wd); /* the directory is gone; its parent saw IN_DELETE */
        return;
    }
    if ((ev->mask & (IN_MOVE_SELF | IN_UNMOUNT)) ||
        ((ev->mask & (IN_MOVED_FROM | IN_MOVED_TO)) && (ev->mask & IN_ISDIR))) {
        w->stale = 1; /* a directory moved: keys in the table may name other directories */
        return;
    }
    w->hit[ev->wd] = 1;
    if (w->track && ev->len > 0 && !(ev->mask & IN_ISDIR)) {
        note_name(w, ev);
    }
}

/* Reads every queued event. */
static void
drain(struct ws_watch *w)
{
    char ev[16384] __attribute__((aligned(__alignof__(struct inotify_event))));

    for (;;) {
        ssize_t n = read(w->fd, ev, sizeof(ev));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN) {
                w->stale = 1;
            }
            return;
        }
        for (size_t off = 0; off + sizeof(struct inotify_event) <= (size_t)n;) {
            const struct inotify_event *e = (const void *)(ev + off);
            take_event(w, e);
            off += sizeof(struct inotify_event) + e->len;
        }
    }
}

static void
clear_hits(struct ws_watch *w)
{
    if (w->hit != NULL) {
        memset(w->hit, 0, w->nbywd);
    }
}

/* Appends p[0..n) and a NUL to b unless it is the last key there already. */
static void
note_dir(struct buf *b, const char *p, size_t n)
{
    size_t last = b->len;

    if (last > 0) {
        size_t s = last - 1;
        while (s > 0 && b->data[s - 1] != '\0') {
            s--;
        }
        if (last - 1 - s == n && memcmp(b->data + s, p, n) == 0) {
            return;
        }
    }
    buf_append(b, p, n);
    buf_putc(b, '\0');
}

void
ws_watch_set_skips(struct ws_dir *d, struct buf *dirs)
{
    struct ws_watch *w = d->watch;

    if (w == NULL) {
        return;
    }
    buf_reset(&w->skips);
    if (dirs != NULL) {
        if (buf_failed(dirs) || buf_append(&w->skips, dirs->data, dirs->len) != 0) {
            w->complete = 0; /* cannot say which directories to rescan: full rescans */
        }
        buf_reset(dirs);
    }
}

void
ws_watch_settle(struct ws_dir *d)
{
    struct ws_watch *w = d->watch;
    const struct ws_manifest *m = d->man;
    const char *prev = NULL;
    size_t prevlen = 0;

    if (w == NULL) {
        return;
    }
    if (w->fd >= 0) {
        drain(w); /* drun's own writes, or a scan's reads: nothing to record */
    }
    clear_hits(w);
    /* wds are handed out in increasing order; rebuild before the table grows sparse */
    if (w->stale || w->nbywd > 4 * w->live + 4096 || w->fd < 0) {
        reset(w);
    }
    if (w->fd < 0) {
        return;
    }
    w->complete = 1;
    if (tab_find(w, "", 0) == (size_t)-1 && add_watch(w, d->root_fd, "", 0) != 0) {
        goto failed;
    }
    for (size_t i = 0; i < m->n; i++) {
        const char *p = m->v[i].path;
        size_t dlen = 0;
        if (m->v[i].type == WS_DIR) {
            dlen = strlen(p);
        } else {
            const char *leaf;
            ws_split(p, &dlen, &leaf);
        }
        if (dlen == 0 || (prev != NULL && dlen == prevlen && memcmp(prev, p, dlen) == 0)) {
            continue;
        }
        prev = p;
        prevlen = dlen;
        for (size_t j = 1; j <= dlen; j++) {
            if ((j == dlen || p[j] == '/') && tab_find(w, p, j) == (size_t)-1 &&
                add_watch(w, d->root_fd, p, j) != 0) {
                goto failed;
            }
        }
    }
    /* Directories holding a file with several links: a write through another name
     * raises no event here, so they are rescanned every time. */
    buf_reset(&w->links);
    for (size_t i = 0; d->cache != NULL && i < m->n; i++) {
        if ((m->v[i].type == WS_FILE || m->v[i].type == WS_EXEC) && d->cache[i].nlink > 1) {
            size_t plen;
            const char *leaf;
            ws_split(m->v[i].path, &plen, &leaf);
            note_dir(&w->links, m->v[i].path, plen);
        }
    }
    if (buf_failed(&w->links)) {
        w->complete = 0;
    }
    return;
failed:
    w->complete = 0;
    if (!w->logged) {
        log_debug("workspace '%s': cannot watch every directory (%s); rescans read the whole "
                  "tree (raise fs.inotify.max_user_watches to avoid this)",
                  d->root_path, strerror(errno));
        w->logged = 1;
    }
}

/* Marks every watched directory named in the NUL-separated list b as changed. */
static void
hit_list(struct ws_watch *w, const struct buf *b)
{
    for (size_t off = 0; off < b->len; off += strlen(b->data + off) + 1) {
        size_t i = tab_find(w, b->data + off, strlen(b->data + off));
        if (i != (size_t)-1) {
            w->hit[w->tab[i].wd] = 1;
        }
    }
}

int
ws_watch_collect(struct ws_dir *d)
{
    struct ws_watch *w = d->watch;

    if (w == NULL || w->fd < 0 || !w->complete || w->stale || w->full_next) {
        if (w != NULL) {
            w->full_next = 0;
        }
        return WS_WATCH_FULL;
    }
    clear_hits(w);
    w->track = 1;
    drain(w);
    w->track = 0;
    if (!w->stale && written_name_left(w)) {
        log_debug("workspace '%s': a file written by the command left the tree (it may have "
                  "been a hard link); scanning it in full",
                  d->root_path);
        w->full_next = 1; /* consumed just below */
    }
    names_clear(w);
    if (w->stale || w->full_next) {
        w->full_next = 0;
        return WS_WATCH_FULL;
    }
    hit_list(w, &w->skips);
    hit_list(w, &w->links);
    for (size_t i = 0; i < w->nbywd; i++) {
        if (w->hit[i]) {
            return WS_WATCH_SOME;
        }
    }
    return WS_WATCH_NONE;
}

int
ws_watch_state(const struct ws_watch *w, const char *p, size_t n)
{
    size_t i = tab_find(w, p, n);

    if (i == (size_t)-1) {
        return 0;
    }
    return w->hit[w->tab[i].wd] ? 2 : 1;
}

const char *
ws_watch_next_dirty(const struct ws_watch *w, size_t *pos)
{
    for (; *pos < w->nbywd; (*pos)++) {
        if (w->hit[*pos] && w->bywd[*pos] != NULL) {
            return w->bywd[(*pos)++];
        }
    }
    return NULL;
}

void
ws_watch_test_forget(struct ws_dir *d, const char *p)
{
    struct ws_watch *w = d->watch;
    size_t i = w != NULL ? tab_find(w, p, strlen(p)) : (size_t)-1;

    if (i != (size_t)-1) {
        forget(w, w->tab[i].wd);
    }
}
