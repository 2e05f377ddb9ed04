/*
 * test_workspace_dir.c - the workspace directory: sync, rescan, full re-sync, the
 * symlink attacks, special files, caps and the runtime root.
 */
#include "test.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include "util/buf.h"
#include "util/hash.h"
#include "util/mem.h"
#include "workspace/workspace.h"
#include "workspace/ws_int.h"

/* ---- an in-memory blob store ------------------------------------------------------ */

struct mem_blobs {
    struct {
        uint8_t hash[HASH_LEN];
        char *data;
        size_t len;
    } v[256];
    int n;
    int puts;
    int gets;
};

static int
mb_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    struct mem_blobs *b = ctx;

    hash_sha256(data, len, hash);
    b->puts++;
    for (int i = 0; i < b->n; i++) {
        if (memcmp(b->v[i].hash, hash, HASH_LEN) == 0) {
            return 0;
        }
    }
    if (b->n == 256) {
        return err_set(err, ERR_TOOBIG, "test blob store is full");
    }
    memcpy(b->v[b->n].hash, hash, HASH_LEN);
    b->v[b->n].data = malloc(len + 1);
    memcpy(b->v[b->n].data, data, len);
    b->v[b->n].len = len;
    b->n++;
    return 0;
}

static int
mb_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    struct mem_blobs *b = ctx;

    b->gets++;
    for (int i = 0; i < b->n; i++) {
        if (memcmp(b->v[i].hash, hash, HASH_LEN) == 0) {
            if (buf_append(out, b->v[i].data, b->v[i].len) != 0) {
                return buf_err(out, "blob", err);
            }
            return 0;
        }
    }
    return err_set(err, ERR_NOTFOUND, "no such blob");
}

static struct mem_blobs store;
static struct ws_blobs blobs = {.ctx = &store, .get = mb_get, .put = mb_put};

/* Adds an entry whose content (or link target) is `content`. */
static void
add(struct ws_manifest *m, const char *path, int type, const char *content)
{
    struct err err;
    uint8_t h[HASH_LEN];

    if (type == WS_DIR) {
        CHECK_OK(ws_manifest_set(m, path, WS_DIR, 0, NULL, &err), &err);
        return;
    }
    CHECK_OK(mb_put(&store, content, strlen(content), h, &err), &err);
    CHECK_OK(ws_manifest_set(m, path, type, strlen(content), h, &err), &err);
}

static struct ws_manifest *
base_manifest(void)
{
    struct ws_manifest *m;
    struct err err;

    CHECK_OK(ws_manifest_new(&m, &err), &err);
    add(m, "README", WS_FILE, "hello\n");
    add(m, "bin/run", WS_EXEC, "#!/bin/sh\necho hi\n");
    add(m, "src/a/b/c.txt", WS_FILE, "deep");
    add(m, "src/empty", WS_DIR, NULL);
    add(m, "sub/f", WS_FILE, "inside");
    add(m, "link", WS_SYMLINK, "README");
    add(m, "escape", WS_SYMLINK, "/etc/passwd");
    add(m, "zero", WS_FILE, "");
    return m;
}

static const char *
slurp(const char *path)
{
    static char b[4096];
    int fd = open(path, O_RDONLY);
    ssize_t n;

    if (fd < 0) {
        return NULL;
    }
    n = read(fd, b, sizeof(b) - 1);
    close(fd);
    b[n < 0 ? 0 : n] = '\0';
    return b;
}

static void
spit(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK_MSG(fd >= 0, "cannot write %s", path);
    CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
    close(fd);
}

static const char *
wp(const char *rel)
{
    static char p[8192];
    snprintf(p, sizeof(p), "%s/ws/%s", test_tmpdir(), rel);
    return p;
}

static struct ws_dir *
open_ws(int racy_zero)
{
    struct ws_dir *d;
    struct err err;

    CHECK_OK(ws_dir_open(test_path("ws"), &d, &err), &err);
    if (racy_zero) {
        d->racy_ns = 0;
    }
    return d;
}

/* The directory, scanned afresh by a new ws_dir, equals m. */
static void
check_disk_is(const struct ws_manifest *m)
{
    struct ws_dir *d;
    struct ws_diff_counts c;
    struct err err;

    CHECK_OK(ws_dir_open(test_path("ws"), &d, &err), &err);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_OK(ws_manifest_diff(m, ws_dir_manifest(d), NULL, NULL, &c, &err), &err);
    CHECK_MSG(c.added + c.modified + c.removed == 0, "disk differs: +%zu ~%zu -%zu", c.added,
              c.modified, c.removed);
    ws_dir_close(d);
}

TEST(sync_materializes_everything)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d = open_ws(0);
    struct err err;
    struct stat st;
    char target[256];
    ssize_t n;

    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    CHECK_EQ_STR(slurp(wp("README")), "hello\n");
    CHECK_EQ_STR(slurp(wp("src/a/b/c.txt")), "deep");
    CHECK(stat(wp("bin/run"), &st) == 0 && (st.st_mode & 07777) == 0755);
    CHECK(stat(wp("README"), &st) == 0 && (st.st_mode & 07777) == 0644);
    CHECK(stat(wp("src/empty"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(stat(wp("zero"), &st) == 0 && st.st_size == 0);
    n = readlink(wp("escape"), target, sizeof(target));
    CHECK(n == 11 && memcmp(target, "/etc/passwd", 11) == 0);
    CHECK(stat(test_path("ws"), &st) == 0 && (st.st_mode & 0777) == 0700);
    check_disk_is(m);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TEST(sync_writes_only_what_differs)
{
    struct ws_manifest *m = base_manifest(), *m2 = NULL;
    struct ws_dir *d = open_ws(0);
    struct ws_dir_stats s0, s1;
    struct err err;
    struct stat a0, a1, c0;

    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    ws_dir_stats(d, &s0);
    CHECK_EQ_INT(s0.files_written, 7);
    CHECK(stat(wp("README"), &a0) == 0);
    CHECK_OK(ws_manifest_clone(m, &m2, &err), &err);
    add(m2, "sub/f", WS_FILE, "changed");
    add(m2, "new/file", WS_FILE, "n");
    CHECK_OK(ws_manifest_remove(m2, "src/a/b/c.txt", &err), &err);
    CHECK_OK(ws_dir_sync(d, m2, &blobs, &err), &err);
    ws_dir_stats(d, &s1);
    CHECK_EQ_INT(s1.files_written - s0.files_written, 2);
    CHECK_EQ_INT(s1.removed - s0.removed, 1);
    CHECK(stat(wp("README"), &a1) == 0);
    CHECK(a0.st_ino == a1.st_ino && a0.st_mtim.tv_nsec == a1.st_mtim.tv_nsec &&
          a0.st_ctim.tv_nsec == a1.st_ctim.tv_nsec);
    /* the emptied directories went with the file; src/empty stays */
    CHECK(lstat(wp("src/a"), &c0) == -1 && errno == ENOENT);
    CHECK(lstat(wp("src/empty"), &c0) == 0);
    CHECK_EQ_STR(slurp(wp("sub/f")), "changed");
    check_disk_is(m2);
    /* syncing to the same manifest writes nothing */
    CHECK_OK(ws_dir_sync(d, m2, &blobs, &err), &err);
    ws_dir_stats(d, &s0);
    CHECK_EQ_INT(s0.files_written, s1.files_written);
    CHECK_EQ_INT(s0.removed, s1.removed);
    ws_dir_close(d);
    ws_manifest_free(m);
    ws_manifest_free(m2);
}

TEST(rescan_reuses_unchanged_entries)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d = open_ws(1);
    struct ws_scan_report r;
    struct err err;
    int puts;

    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    puts = store.puts;
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(store.puts, puts); /* nothing re-read */
    CHECK_EQ_INT(r.files_read, 0);
    CHECK_EQ_INT(r.files_reused, 7);
    /* replace one file (new inode) and add one: exactly two reads */
    CHECK(unlink(wp("README")) == 0);
    spit(wp("README"), "HELLO\n");
    spit(wp("added"), "x");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(store.puts - puts, 2);
    CHECK_EQ_INT(r.files_read, 2);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "README")->size, 6);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "added") != NULL);
    CHECK_EQ_INT(ws_manifest_count(ws_dir_manifest(d)), 9);
    ws_scan_report_release(&r);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TEST(same_size_change_in_same_tick_is_seen)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d = open_ws(0); /* the real racy window */
    struct timespec ts[2];
    struct stat st;
    struct err err;
    uint8_t h[HASH_LEN];
    int fd;

    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    CHECK(stat(wp("README"), &st) == 0);
    /* same size, same mtime (set back), in place: only ctime and the guard can tell */
    fd = open(wp("README"), O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "HELLO\n", 6, 0) == 6);
    close(fd);
    ts[0] = st.st_atim;
    ts[1] = st.st_mtim;
    CHECK(utimensat(AT_FDCWD, wp("README"), ts, 0) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    hash_sha256("HELLO\n", 6, h);
    CHECK(memcmp(ws_manifest_get(ws_dir_manifest(d), "README")->hash, h, HASH_LEN) == 0);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TEST(exec_bit_and_links_recorded)
{
    struct ws_dir *d = open_ws(1);
    const struct ws_manifest *m;
    struct ws_manifest *empty;
    struct err err;
    uint8_t h[HASH_LEN];

    CHECK_OK(ws_manifest_new(&empty, &err), &err);
    CHECK_OK(ws_dir_sync(d, empty, &blobs, &err), &err);
    CHECK(mkdir(test_path("outside"), 0755) == 0);
    spit(test_path("outside/secret"), "secret");
    spit(wp("tool"), "t");
    CHECK(chmod(wp("tool"), 0700) == 0);
    spit(wp("plain"), "p");
    CHECK(chmod(wp("plain"), 0600) == 0);
    CHECK(symlink(test_path("outside"), wp("dirlink")) == 0);
    CHECK(symlink("/etc/shadow", wp("abs")) == 0);
    CHECK(symlink("../../../x", wp("rel")) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    m = ws_dir_manifest(d);
    CHECK_EQ_INT(ws_manifest_get(m, "tool")->type, WS_EXEC);
    CHECK_EQ_INT(ws_manifest_get(m, "plain")->type, WS_FILE);
    CHECK_EQ_INT(ws_manifest_get(m, "dirlink")->type, WS_SYMLINK);
    CHECK_EQ_INT(ws_manifest_get(m, "dirlink")->size, strlen(test_path("outside")));
    hash_sha256("/etc/shadow", 11, h);
    CHECK(memcmp(ws_manifest_get(m, "abs")->hash, h, HASH_LEN) == 0);
    CHECK(ws_manifest_get(m, "dirlink/secret") == NULL); /* never followed */
    CHECK_EQ_INT(ws_manifest_count(m), 5);
    ws_dir_close(d);
    ws_manifest_free(empty);
}

static void
planted_link(int fallback)
{
    struct ws_manifest *m = base_manifest(), *m2 = NULL, *m3 = NULL;
    struct ws_dir *d = open_ws(0);
    struct err err;
    struct stat st;

    ws_fs_force_fallback(fallback);
    CHECK(mkdir(test_path("outside"), 0755) == 0);
    spit(test_path("outside/f"), "canary");
    spit(test_path("outside/other"), "canary2");
    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    /* a command swaps the directory "sub" for a link to a host directory */
    test_rm_rf(wp("sub"));
    CHECK(symlink(test_path("outside"), wp("sub")) == 0);
    /* a sync that rewrites sub/f must not write through the link */
    CHECK_OK(ws_manifest_clone(m, &m2, &err), &err);
    add(m2, "sub/f", WS_FILE, "rewritten");
    CHECK_OK(ws_dir_sync(d, m2, &blobs, &err), &err);
    CHECK_EQ_STR(slurp(test_path("outside/f")), "canary");
    CHECK(lstat(wp("sub"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ_STR(slurp(wp("sub/f")), "rewritten");
    /* again, and now a sync that deletes sub/f: the delete must not go through it */
    test_rm_rf(wp("sub"));
    CHECK(symlink(test_path("outside"), wp("sub")) == 0);
    CHECK_OK(ws_manifest_clone(m2, &m3, &err), &err);
    CHECK_OK(ws_manifest_remove(m3, "sub/f", &err), &err);
    CHECK_OK(ws_dir_sync(d, m3, &blobs, &err), &err);
    CHECK_EQ_STR(slurp(test_path("outside/f")), "canary");
    /* a deeper link: src -> outside while writing src/a/b/c.txt */
    test_rm_rf(wp("src"));
    CHECK(symlink(test_path("outside"), wp("src")) == 0);
    CHECK_OK(ws_dir_resync(d, m3, &blobs, &err), &err);
    CHECK_EQ_STR(slurp(test_path("outside/f")), "canary");
    CHECK_EQ_STR(slurp(test_path("outside/other")), "canary2");
    CHECK(lstat(wp("src"), &st) == 0 && S_ISDIR(st.st_mode));
    check_disk_is(m3);
    /* the workspace root's own parent is never touched by a resync of links */
    CHECK(symlink("..", wp("up")) == 0);
    CHECK_OK(ws_dir_resync(d, m3, &blobs, &err), &err);
    CHECK(lstat(test_path("outside/f"), &st) == 0);
    CHECK(lstat(wp("up"), &st) == -1);
    ws_dir_close(d);
    ws_manifest_free(m);
    ws_manifest_free(m2);
    ws_manifest_free(m3);
}

TEST(planted_symlink_dir_openat2)
{
    planted_link(0);
}

TEST(planted_symlink_dir_fallback_walk)
{
    planted_link(1);
}

TEST(open_dir_never_resolves_through_links)
{
    struct ws_dir *d = open_ws(0);
    struct err err;
    int fd;

    for (int fb = 0; fb < 2; fb++) {
        ws_fs_force_fallback(fb);
        CHECK(mkdir(wp("real"), 0755) == 0 || errno == EEXIST);
        CHECK(symlink(test_tmpdir(), wp("l")) == 0 || errno == EEXIST);
        CHECK_OK(ws_fs_open_dir(d->root_fd, "real", 4, 0, &fd, &err), &err);
        close(fd);
        CHECK(ws_fs_open_dir(d->root_fd, "l", 1, 0, &fd, &err) == -1);
        CHECK_EQ_INT(err.code, ERR_NOTFOUND);
        CHECK(ws_fs_open_dir(d->root_fd, "l/ws", 4, 0, &fd, &err) == -1);
        CHECK(ws_fs_open_dir(d->root_fd, "real/../..", 10, 0, &fd, &err) == -1);
    }
    ws_dir_close(d);
}

TEST(special_files_skipped_and_reported)
{
    struct ws_manifest *empty;
    struct ws_dir *d = open_ws(1);
    struct ws_scan_report r;
    struct sockaddr_un sa;
    struct err err;
    int s, have_dev;

    CHECK_OK(ws_manifest_new(&empty, &err), &err);
    CHECK_OK(ws_dir_sync(d, empty, &blobs, &err), &err);
    CHECK(mkfifo(wp("pipe"), 0644) == 0);
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    CHECK(chdir(wp("")) == 0);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "sock");
    CHECK(bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    have_dev = mknod(wp("null"), S_IFCHR | 0666, makedev(1, 3)) == 0;
    spit(wp("real"), "r");
    CHECK(mkdir(wp("bad\x01name"), 0755) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(ws_manifest_count(ws_dir_manifest(d)), 1);
    CHECK_EQ_INT(r.skipped_total, 3 + have_dev);
    CHECK_EQ_INT(r.nskipped, 3 + have_dev);
    for (size_t i = 0; i < r.nskipped; i++) {
        const char *p = r.skipped[i].path, *w = r.skipped[i].why;
        CHECK((!strcmp(p, "pipe") && !strcmp(w, "fifo")) ||
              (!strcmp(p, "sock") && !strcmp(w, "socket")) ||
              (!strcmp(p, "null") && !strcmp(w, "device")) ||
              (!strcmp(p, "bad\\x01name") && !strcmp(w, "invalid name")));
    }
    ws_scan_report_release(&r);
    /* a full re-sync to the scanned manifest removes them */
    CHECK_OK(ws_dir_resync(d, ws_dir_manifest(d), &blobs, &err), &err);
    CHECK(access(wp("pipe"), F_OK) == -1 && access(wp("sock"), F_OK) == -1);
    CHECK(access(wp("real"), F_OK) == 0);
    close(s);
    ws_dir_close(d);
    ws_manifest_free(empty);
}

TEST(resync_counts_unstorable_entries_in_removed_trees)
{
    struct ws_manifest *empty;
    struct ws_dir *d = open_ws(1);
    struct ws_dir_stats before, after;
    struct err err;

    CHECK_OK(ws_manifest_new(&empty, &err), &err);
    CHECK_OK(ws_dir_sync(d, empty, &blobs, &err), &err);
    CHECK(mkdir(wp("sub"), 0755) == 0);
    spit(wp("sub/ok"), "o");
    spit(wp("sub/c\x01d"), "x");
    spit(wp("a\nb"), "y");
    spit(wp("bad\xff"), "z");
    CHECK(mkfifo(wp("sub/pipe"), 0644) == 0);
    CHECK_EQ_INT(ws_dir_skipped(d), 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(ws_dir_skipped(d), 1);
    CHECK_EQ_INT(ws_manifest_count(ws_dir_manifest(d)), 1); /* sub/ok */
    ws_dir_stats(d, &before);
    /* back to empty: sub goes as a tree, and the four inside and beside it are counted */
    CHECK_OK(ws_dir_resync(d, empty, &blobs, &err), &err);
    ws_dir_stats(d, &after);
    CHECK_EQ_INT(after.removed_unstorable - before.removed_unstorable, 4);
    CHECK_EQ_INT(after.removed - before.removed, 3); /* sub, a\nb, bad\xff: a tree counts once */
    CHECK_EQ_INT(ws_dir_skipped(d), 0);
    CHECK(access(wp("sub"), F_OK) == -1 && access(wp("a\nb"), F_OK) == -1);
    ws_dir_close(d);
    ws_manifest_free(empty);
}

/* As root, a bounded directory refuses writes past its size with ENOSPC. */
TEST(bounded_dir_refuses_writes_past_its_size)
{
    struct ws_dir *d;
    struct err err;
    static char block[65536];
    size_t total = 0;
    int fd;

    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) {
        SKIP("needs root to mount (the client test covers the unprivileged daemon)");
    }
    ws_bound_enable(1);
    CHECK_OK(ws_dir_open_bounded(test_path("bws"), (uint64_t)1 << 20, &d, &err), &err);
    CHECK_EQ_INT(ws_dir_bound(d), (uint64_t)1 << 20);
    fd = open(test_path("bws/f"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    while (total < ((size_t)4 << 20) && write(fd, block, sizeof(block)) > 0) {
        total += sizeof(block);
    }
    CHECK_EQ_INT(errno, ENOSPC);
    CHECK(total <= ((size_t)1 << 20));
    close(fd);
    CHECK_OK(ws_dir_bound_grow(d, (uint64_t)2 << 20, &err), &err);
    CHECK_EQ_INT(ws_dir_bound(d), (uint64_t)2 << 20);
    ws_dir_close(d);
    /* closed: the mount is gone, the directory underneath is empty */
    CHECK(access(test_path("bws/f"), F_OK) == -1);
    ws_bound_enable(0);
}

TEST(empty_dirs_kept_and_removed)
{
    struct ws_manifest *empty;
    struct ws_dir *d = open_ws(1);
    struct err err;
    const struct ws_manifest *m;

    CHECK_OK(ws_manifest_new(&empty, &err), &err);
    CHECK_OK(ws_dir_sync(d, empty, &blobs, &err), &err);
    CHECK(mkdir(wp("e1"), 0755) == 0 && mkdir(wp("e1/e2"), 0755) == 0);
    CHECK(mkdir(wp("e3"), 0755) == 0);
    spit(wp("e3/f"), "f");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    m = ws_dir_manifest(d);
    CHECK_EQ_INT(ws_manifest_count(m), 2);
    CHECK_EQ_INT(ws_manifest_get(m, "e1/e2")->type, WS_DIR);
    CHECK(ws_manifest_get(m, "e1") == NULL);
    CHECK_OK(ws_dir_sync(d, empty, &blobs, &err), &err);
    CHECK(access(wp("e1"), F_OK) == -1 && access(wp("e3"), F_OK) == -1);
    ws_dir_close(d);
    ws_manifest_free(empty);
}

TEST(full_resync_repairs_damage)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d = open_ws(0);
    struct ws_dir *d2;
    struct err err;

    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    spit(wp("extra"), "x");                 /* added */
    CHECK(unlink(wp("README")) == 0);       /* removed */
    CHECK(chmod(wp("bin/run"), 0644) == 0); /* exec bit lost */
    CHECK(chmod(wp("sub/f"), 0600) == 0);   /* mode changed */
    test_rm_rf(wp("src/a"));                /* dir tree -> file */
    spit(wp("src/a"), "not a dir");
    test_rm_rf(wp("src/empty")); /* empty dir -> file */
    spit(wp("src/empty"), "e");
    CHECK(unlink(wp("zero")) == 0 && mkdir(wp("zero"), 0) == 0); /* file -> locked dir */
    CHECK(unlink(wp("link")) == 0 && symlink("elsewhere", wp("link")) == 0);
    {
        char f[8192];
        snprintf(f, sizeof(f), "%s", wp("sub/f"));
        CHECK(link(f, wp("hard")) == 0); /* hard link */
    }
    CHECK(mkfifo(wp("bin/fifo"), 0644) == 0);
    CHECK(unlink(wp("escape")) == 0 && mkdir(wp("escape"), 0755) == 0); /* link -> dir */
    spit(wp("escape/in"), "i");
    CHECK_OK(ws_dir_resync(d, m, &blobs, &err), &err);
    check_disk_is(m);
    CHECK(access(wp("extra"), F_OK) == -1 && access(wp("hard"), F_OK) == -1);
    CHECK_EQ_STR(slurp(wp("README")), "hello\n");
    /* a fresh ws_dir on a damaged directory re-syncs fully on its first sync */
    spit(wp("extra2"), "y");
    CHECK_OK(ws_dir_open(test_path("ws"), &d2, &err), &err);
    CHECK_OK(ws_dir_sync(d2, m, &blobs, &err), &err);
    CHECK(access(wp("extra2"), F_OK) == -1);
    check_disk_is(m);
    ws_dir_close(d2);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TEST(caps_at_and_past_the_edge)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d = open_ws(0);
    struct ws_limits lim;
    struct err err;
    size_t count = ws_manifest_count(m);
    uint64_t bytes = ws_manifest_bytes(m);

    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    lim.max_entries = count;
    lim.max_bytes = bytes;
    CHECK_OK(ws_dir_rescan(d, &lim, &blobs, NULL, &err), &err);
    lim.max_entries = count - 1;
    CHECK(ws_dir_rescan(d, &lim, &blobs, NULL, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "max_entries") != NULL);
    CHECK_EQ_INT(ws_manifest_count(ws_dir_manifest(d)), count); /* previous kept */
    lim.max_entries = count;
    lim.max_bytes = bytes - 1;
    CHECK(ws_dir_rescan(d, &lim, &blobs, NULL, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "max_bytes") != NULL);
    /* a big sparse file is refused from its size, without reading 1 GiB first */
    {
        int fd = open(wp("huge"), O_WRONLY | O_CREAT, 0644);
        CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 32) == 0);
        close(fd);
    }
    lim.max_bytes = 1 << 20;
    lim.max_entries = 0;
    CHECK(ws_dir_rescan(d, &lim, &blobs, NULL, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "'huge'") != NULL);
    CHECK(ws_dir_rescan(d, NULL, &blobs, NULL, &err) == -1); /* 4 GiB > one file's max */
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TEST(sync_reports_missing_blob_and_recovers)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d = open_ws(0);
    struct err err;
    uint8_t h[HASH_LEN];

    memset(h, 0x42, HASH_LEN);
    CHECK_OK(ws_manifest_set(m, "missing", WS_FILE, 3, h, &err), &err);
    CHECK(ws_dir_sync(d, m, &blobs, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(strstr(err.msg, "'missing'") != NULL);
    CHECK_OK(ws_manifest_remove(m, "missing", &err), &err);
    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err); /* a full one, as d is dirty */
    check_disk_is(m);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TEST(runtime_dir_checks)
{
    struct buf b;
    struct err err;
    struct stat st;
    char p[4200];

    buf_init(&b, 8192);
    snprintf(p, sizeof(p), "%s/rt", test_tmpdir());
    CHECK_OK(ws_runtime_dir(p, &b, &err), &err);
    CHECK_EQ_STR(buf_cstr(&b), p);
    /* 0711 for root: its sandbox user passes through (search only) to its workspace */
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == (mode_t)WS_RUNTIME_MODE(geteuid()));
    CHECK(chmod(p, 0750) == 0); /* looser but safe: tightened */
    buf_reset(&b);
    CHECK_OK(ws_runtime_dir(p, &b, &err), &err);
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == (mode_t)WS_RUNTIME_MODE(geteuid()));
    CHECK(chmod(p, 0777) == 0);
    CHECK(ws_runtime_dir(p, &b, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(strstr(err.msg, "writable by other users") != NULL);
    CHECK(chmod(p, 0700) == 0);
    if (geteuid() == 0) {
        CHECK(chown(p, 65534, 65534) == 0);
        CHECK(ws_runtime_dir(p, &b, &err) == -1);
        CHECK_EQ_INT(err.code, ERR_DENIED);
        CHECK(strstr(err.msg, "owned by uid 65534") != NULL);
    }
    snprintf(p, sizeof(p), "%s/rtlink", test_tmpdir());
    CHECK(symlink(test_tmpdir(), p) == 0);
    CHECK(ws_runtime_dir(p, &b, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(ws_runtime_dir("relative", &b, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    /* defaults: $XDG_RUNTIME_DIR/drun */
    snprintf(p, sizeof(p), "%s", test_tmpdir());
    setenv("XDG_RUNTIME_DIR", p, 1);
    buf_reset(&b);
    CHECK_OK(ws_runtime_dir(NULL, &b, &err), &err);
    CHECK(strstr(buf_cstr(&b), "/drun") != NULL);
    buf_reset(&b);
    CHECK_OK(ws_runtime_session_path("/r", "ab12cd34", &b, &err), &err);
    CHECK_EQ_STR(buf_cstr(&b), "/r/ws-ab12cd34");
    CHECK(ws_runtime_session_path("/r", "../x", &b, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(ws_runtime_session_path("/r", "", &b, &err) == -1);
    CHECK(ws_runtime_session_path("/r", "AB", &b, &err) == -1);
    buf_release(&b);
}

TEST(open_refuses_symlink_root_and_destroy_removes)
{
    struct ws_manifest *m = base_manifest();
    struct ws_dir *d;
    struct err err;

    CHECK(symlink(test_tmpdir(), test_path("lnk")) == 0);
    CHECK(ws_dir_open(test_path("lnk"), &d, &err) == -1);
    CHECK_EQ_INT(err.code, ERR_IO);
    d = open_ws(0);
    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    CHECK(chmod(wp("src"), 0) == 0);
    CHECK_OK(ws_dir_destroy(d, &err), &err);
    CHECK(access(test_path("ws"), F_OK) == -1);
    ws_manifest_free(m);
}

TEST(memory_per_thousand_files)
{
    struct ws_manifest *m;
    struct ws_dir *d = open_ws(0);
    struct ws_dir_stats st;
    struct err err;
    char p[64];

    CHECK_OK(ws_manifest_new(&m, &err), &err);
    for (int i = 0; i < 1000; i++) {
        snprintf(p, sizeof(p), "src/module%02d/file_%04d.c", i / 50, i);
        add(m, p, WS_FILE, "x");
    }
    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    ws_dir_stats(d, &st);
    fprintf(stderr, "    ws_dir memory for 1,000 files: %zu bytes\n", st.mem_bytes);
    CHECK(st.mem_bytes <= 256 * 1024);
    ws_dir_close(d);
    ws_manifest_free(m);
}

TESTS(sync_materializes_everything, sync_writes_only_what_differs, rescan_reuses_unchanged_entries,
      same_size_change_in_same_tick_is_seen, exec_bit_and_links_recorded,
      planted_symlink_dir_openat2, planted_symlink_dir_fallback_walk,
      open_dir_never_resolves_through_links, special_files_skipped_and_reported,
      resync_counts_unstorable_entries_in_removed_trees, bounded_dir_refuses_writes_past_its_size,
      empty_dirs_kept_and_removed, full_resync_repairs_damage, caps_at_and_past_the_edge,
      sync_reports_missing_blob_and_recovers, runtime_dir_checks,
      open_refuses_symlink_root_and_destroy_removes, memory_per_thousand_files)
