/*
 * test_workspace_watch.c - inotify-assisted rescans (ws_watch.c, rescan_dirty in
 * ws_scan.c): a randomized differential test against full scans by a fresh ws_dir, and
 * targeted tests for the fast path, the fall-backs and hard links.
 */
#include "test.h"

#include <ftw.h>
#include <sys/mman.h>
#include <time.h>

#include "util/buf.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "workspace/workspace.h"
#include "workspace/ws_int.h"

/* ---- a blob store: content by hash, chained buckets -------------------------------- */

struct blob {
    struct blob *next;
    uint8_t hash[HASH_LEN];
    size_t len;
    char data[];
};

static struct blob *buckets[4096];

static int
mb_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    struct blob *b;
    size_t k;

    (void)ctx;
    hash_sha256(data, len, hash);
    k = ((size_t)hash[0] << 4 | hash[1] >> 4) & 4095;
    for (b = buckets[k]; b != NULL; b = b->next) {
        if (memcmp(b->hash, hash, HASH_LEN) == 0) {
            return 0;
        }
    }
    b = malloc(sizeof(*b) + len + 1);
    if (b == NULL) {
        return err_set(err, ERR_NOMEM, "test blob store: out of memory");
    }
    memcpy(b->hash, hash, HASH_LEN);
    memcpy(b->data, data, len);
    b->len = len;
    b->next = buckets[k];
    buckets[k] = b;
    return 0;
}

static int
mb_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    size_t k = ((size_t)hash[0] << 4 | hash[1] >> 4) & 4095;

    (void)ctx;
    for (struct blob *b = buckets[k]; b != NULL; b = b->next) {
        if (memcmp(b->hash, hash, HASH_LEN) == 0) {
            if (buf_append(out, b->data, b->len) != 0) {
                return buf_err(out, "blob", err);
            }
            return 0;
        }
    }
    return err_set(err, ERR_NOTFOUND, "no such blob");
}

static struct ws_blobs blobs = {.ctx = NULL, .get = mb_get, .put = mb_put};

static const char *
wp(const char *rel)
{
    static char p[8192];
    CHECK_FMT(p, sizeof(p), "%s/ws/%s", test_tmpdir(), rel);
    return p;
}

/* wp() into a second buffer, for calls that take two paths */
static const char *
wp2(const char *rel)
{
    static char p[8192];
    CHECK_FMT(p, sizeof(p), "%s/ws/%s", test_tmpdir(), rel);
    return p;
}

static void
spit(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK_MSG(fd >= 0, "cannot write %s", path);
    CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
    close(fd);
}

/* The first difference between two manifests, or NULL. */
static const char *
first_diff(const struct ws_manifest *a, const struct ws_manifest *b)
{
    static char why[512];
    size_t n =
        ws_manifest_count(a) > ws_manifest_count(b) ? ws_manifest_count(a) : ws_manifest_count(b);

    for (size_t i = 0; i < n; i++) {
        const struct ws_entry *x = i < ws_manifest_count(a) ? ws_manifest_at(a, i) : NULL;
        const struct ws_entry *y = i < ws_manifest_count(b) ? ws_manifest_at(b, i) : NULL;
        if (x == NULL || y == NULL || strcmp(x->path, y->path) != 0 || x->type != y->type ||
            x->size != y->size || memcmp(x->hash, y->hash, HASH_LEN) != 0) {
            snprintf(why, sizeof(why),
                     "entry %zu: incremental '%s' (type %d, %llu bytes), full "
                     "'%s' (type %d, %llu bytes)",
                     i, x ? x->path : "-", x ? x->type : 0, x ? (unsigned long long)x->size : 0ULL,
                     y ? y->path : "-", y ? y->type : 0, y ? (unsigned long long)y->size : 0ULL);
            return why;
        }
    }
    return NULL;
}

/* Scans the workspace in full with a fresh ws_dir; the caller frees the manifest. */
static struct ws_manifest *
full_scan(size_t *skipped)
{
    struct ws_dir *f;
    struct ws_manifest *m;
    struct ws_scan_report r;
    struct err err;

    CHECK_OK(ws_dir_open(test_path("ws"), &f, &err), &err);
    CHECK_OK(ws_dir_rescan(f, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(f->last_scan, WS_SCAN_FULL);
    CHECK_OK(ws_manifest_clone(ws_dir_manifest(f), &m, &err), &err);
    *skipped = r.skipped_total;
    ws_scan_report_release(&r);
    ws_dir_close(f);
    return m;
}

/* ---- random operations, run by a child process ------------------------------------ */

static char *files[4096], *dirs[4096];
static int nfiles, ndirs;

static int
collect(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    const char *rel = path + strlen(wp(""));

    (void)st;
    (void)ftw;
    if (strlen(path) < strlen(wp(""))) {
        rel = "";
    }
    if (flag == FTW_D || flag == FTW_DP) {
        if (ndirs < 4096) {
            dirs[ndirs++] = strdup(rel);
        }
    } else if (flag == FTW_F && S_ISREG(st->st_mode)) {
        if (nfiles < 4096) {
            files[nfiles++] = strdup(rel);
        }
    }
    return 0;
}

static void
scan_tree(void)
{
    for (int i = 0; i < nfiles; i++) {
        free(files[i]);
    }
    for (int i = 0; i < ndirs; i++) {
        free(dirs[i]);
    }
    nfiles = ndirs = 0;
    nftw(test_path("ws"), collect, 16, FTW_PHYS);
}

static const char *
rfile(void)
{
    return nfiles ? files[rand() % nfiles] : NULL;
}

static const char *
rdir(void)
{
    return dirs[rand() % ndirs];
}

/* A new name in a random directory (relative, in a static buffer). */
static const char *
newname(const char *prefix)
{
    static char p[4096];
    const char *d = rdir();
    snprintf(p, sizeof(p), "%s%s%s%d", d, *d ? "/" : "", prefix, rand() % 100000);
    return p;
}

static void
write_at(const char *rel, const char *s, int flags)
{
    int fd = open(wp(rel), O_WRONLY | flags | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        if (write(fd, s, strlen(s)) < 0) {
            _exit(3);
        }
        close(fd);
    }
}

static void
random_op(void)
{
    char buf[128], a[4096];
    const char *f = rfile();
    int op = rand() % 22;
    struct stat st;

    snprintf(buf, sizeof(buf), "content %d %d\n", rand(), rand() % 1000);
    if (nfiles < 150) {
        op = 0;
    }
    if (f == NULL && op != 7 && op != 8) {
        op = 0;
    }
    switch (op) {
    case 0:
    case 1: /* create */
        write_at(newname("f"), buf, O_CREAT | O_EXCL);
        break;
    case 2: /* modify */
        write_at(f, buf, O_TRUNC);
        break;
    case 3: /* append */
        write_at(f, "more\n", O_APPEND);
        break;
    case 4: /* truncate */
        if (truncate(wp(f), 3) != 0) {
            _exit(3);
        }
        break;
    case 5: /* same size, mtime set back */
        if (stat(wp(f), &st) == 0 && st.st_size > 0) {
            struct timespec ts[2] = {st.st_atim, st.st_mtim};
            int fd = open(wp(f), O_WRONLY | O_NOFOLLOW);
            char c = 'A' + (char)(rand() % 26);
            if (fd >= 0) {
                if (pwrite(fd, &c, 1, 0) != 1) {
                    _exit(3);
                }
                close(fd);
            }
            utimensat(AT_FDCWD, wp(f), ts, AT_SYMLINK_NOFOLLOW);
        }
        break;
    case 6: /* chmod +x / -x */
        if (stat(wp(f), &st) == 0) {
            chmod(wp(f), (st.st_mode & 0111) ? 0644 : 0755);
        }
        break;
    case 7: /* mkdir */
        mkdir(wp(newname("d")), 0755);
        break;
    case 8: /* mkdir -p deep, a file at the bottom */
        snprintf(a, sizeof(a), "%s", newname("p"));
        mkdir(wp(a), 0755);
        for (int i = 0; i < 3; i++) {
            size_t l = strlen(a);
            snprintf(a + l, sizeof(a) - l, "/q%d", i);
            mkdir(wp(a), 0755);
        }
        if (rand() % 2) {
            size_t l = strlen(a);
            snprintf(a + l, sizeof(a) - l, "/leaf");
            write_at(a, buf, O_CREAT);
        }
        break;
    case 9: /* delete */
        unlink(wp(f));
        break;
    case 10: { /* rmdir, or rm -r */
        const char *d = rdir();
        if (*d && rmdir(wp(d)) != 0 && rand() % 3 == 0) {
            test_rm_rf(wp(d));
        }
        break;
    }
    case 11: /* symlink create / replace */
        snprintf(a, sizeof(a), "%s", rand() % 2 ? f : newname("l"));
        unlink(wp(a));
        symlink(rand() % 2 ? "target-a" : "/etc/passwd", wp(a));
        break;
    case 12: /* hard link, then write through the new name */
        snprintf(a, sizeof(a), "%s", newname("h"));
        if (link(wp(f), wp2(a)) == 0) {
            write_at(a, buf, O_APPEND);
        }
        break;
    case 13: /* write through a shared mmap */
        if (stat(wp(f), &st) == 0 && st.st_size > 0) {
            int fd = open(wp(f), O_RDWR | O_NOFOLLOW);
            if (fd >= 0) {
                char *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (p != MAP_FAILED) {
                    p[0] = (char)('a' + rand() % 26);
                    munmap(p, (size_t)st.st_size);
                }
                close(fd);
            }
        }
        break;
    case 14: /* rename a file within or between directories */
        rename(wp(f), wp2(newname("r")));
        break;
    case 15: { /* rename a directory */
        const char *d = rdir();
        if (*d) {
            snprintf(a, sizeof(a), "%s", newname("m"));
            rename(wp(d), wp2(a));
        }
        break;
    }
    case 16: /* a file becomes a directory */
        if (unlink(wp(f)) == 0 && mkdir(wp(f), 0755) == 0 && rand() % 2) {
            snprintf(a, sizeof(a), "%s/in", f);
            write_at(a, buf, O_CREAT);
        }
        break;
    case 17: { /* a directory becomes a file */
        const char *d = rdir();
        if (*d) {
            test_rm_rf(wp(d));
            write_at(d, buf, O_CREAT);
        }
        break;
    }
    case 18: /* a FIFO */
        mkfifo(wp(newname("fifo")), 0644);
        break;
    case 19: /* overwrite an existing file by rename */
        write_at("tmp.x", buf, O_CREAT | O_TRUNC);
        rename(wp("tmp.x"), wp2(f));
        break;
    default: /* write through any name (a hard link made earlier may be it) */
        write_at(f, buf, O_APPEND);
        break;
    }
}

/* Runs `nops` random operations in a child that exits before we go on. */
static void
run_ops(unsigned seed, int nops)
{
    pid_t pid = fork();
    int status;

    CHECK(pid >= 0);
    if (pid == 0) {
        srand(seed);
        for (int i = 0; i < nops; i++) {
            scan_tree();
            random_op();
        }
        _exit(0);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ops child failed");
}

/* A synced tree; racy_zero: no racy window, so counts of reads are exact. */
static struct ws_dir *
build_tree(int nfiles_wanted, int racy_zero)
{
    struct ws_manifest *m;
    struct ws_dir *d;
    struct err err;
    uint8_t h[HASH_LEN];
    char key[128], data[64];

    CHECK_OK(ws_manifest_new(&m, &err), &err);
    for (int i = 0; i < nfiles_wanted; i++) {
        snprintf(key, sizeof(key), "top%d/mid%d/f%d.txt", i % 7, i % 5, i);
        if (i % 11 == 0) {
            snprintf(key, sizeof(key), "root%d", i);
        } else if (i % 13 == 0) {
            snprintf(key, sizeof(key), "top%d/deep/er/still/f%d", i % 3, i);
        }
        snprintf(data, sizeof(data), "file %d\n", i);
        CHECK_OK(mb_put(NULL, data, strlen(data), h, &err), &err);
        CHECK_OK(ws_manifest_set(m, key, i % 17 == 0 ? WS_EXEC : WS_FILE, strlen(data), h, &err),
                 &err);
    }
    CHECK_OK(ws_manifest_set(m, "empty/dir", WS_DIR, 0, NULL, &err), &err);
    CHECK_OK(ws_dir_open(test_path("ws"), &d, &err), &err);
    if (racy_zero) {
        d->racy_ns = 0;
    }
    CHECK_OK(ws_dir_sync(d, m, &blobs, &err), &err);
    ws_manifest_free(m);
    return d;
}

/* ---- the differential test --------------------------------------------------------- */

TEST(random_changes_match_full_scans)
{
    struct ws_dir *d = build_tree(300, 0);
    struct ws_manifest *older = NULL;
    struct err err;
    int kinds[4] = {0, 0, 0, 0};
    int64_t t0 = (int64_t)time(NULL);
    int rounds = 0;
    unsigned seed =
        getenv("WS_SEED") ? (unsigned)strtoul(getenv("WS_SEED"), NULL, 10) : (unsigned)t0;

    fprintf(stderr, "    seed %u (set WS_SEED to repeat)\n", seed);
    if (getenv("WS_DEBUG") != NULL) {
        log_init("test", LOG_DEBUG);
    }
    srand(seed);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_NONE);
    for (rounds = 0; rounds < 400 && (int64_t)time(NULL) - t0 < 25; rounds++) {
        struct ws_manifest *cur, *full;
        struct ws_scan_report r;
        size_t skipped = 0;
        const char *diff;
        int nops = rand() % 8 == 0 ? 0 : 1 + rand() % 4;
        int back;

        /* the session's cycle: sync (to the same manifest, or back to an older one) */
        CHECK_OK(ws_manifest_clone(ws_dir_manifest(d), &cur, &err), &err);
        back = older != NULL && rand() % 15 == 0;
        if (back) {
            CHECK_OK(ws_dir_sync(d, older, &blobs, &err), &err);
        } else {
            CHECK_OK(ws_dir_sync(d, cur, &blobs, &err), &err);
        }
        if (rand() % 10 == 0) {
            ws_manifest_free(older);
            CHECK_OK(ws_manifest_clone(ws_dir_manifest(d), &older, &err), &err);
        }
        ws_manifest_free(cur);
        run_ops((unsigned)rand(), nops);
        CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
        kinds[d->last_scan]++;
        full = full_scan(&skipped);
        diff = first_diff(ws_dir_manifest(d), full);
        CHECK_MSG(diff == NULL, "round %d (%d ops, %s rescan): %s", rounds, nops,
                  d->last_scan == WS_SCAN_FULL   ? "full"
                  : d->last_scan == WS_SCAN_NONE ? "no-change"
                                                 : "incremental",
                  diff);
        CHECK_EQ_INT(r.skipped_total, skipped);
        if (nops == 0 && !back) {
            /* no change: nothing at all, or only the always-listed directories (a sync
             * back may strand a directory holding a FIFO: that forces a full scan) */
            CHECK(d->last_scan != WS_SCAN_FULL);
        }
        ws_scan_report_release(&r);
        ws_manifest_free(full);
    }
    fprintf(stderr, "    %d rounds: %d full, %d no-change, %d incremental rescans; %zu entries\n",
            rounds, kinds[WS_SCAN_FULL], kinds[WS_SCAN_NONE], kinds[WS_SCAN_DIRTY],
            ws_manifest_count(ws_dir_manifest(d)));
    CHECK(rounds >= 100);
    CHECK(kinds[WS_SCAN_DIRTY] > rounds / 3); /* the test exercises the incremental path */
    ws_manifest_free(older);
    ws_dir_close(d);
}

/* ---- targeted tests ---------------------------------------------------------------- */

TEST(no_events_means_no_stat)
{
    struct ws_dir *d = build_tree(200, 1);
    struct ws_scan_report r;
    struct err err;
    uint64_t stats0;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    stats0 = d->stat_calls;
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_NONE);
    CHECK_EQ_INT(d->stat_calls, stats0);
    CHECK_EQ_INT(r.files_read, 0);
    CHECK_EQ_INT(r.files_reused, 200);
    /* one file changed: only its directory is listed again */
    spit(wp("root0"), "changed\n");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    CHECK_EQ_INT(r.files_read, 1);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "root0")->size, 8);
    /* the root holds 19 files and 8 directories: 27 fstatat calls, not 200+ */
    CHECK_EQ_INT(d->stat_calls - stats0, 27);
    ws_scan_report_release(&r);
    ws_dir_close(d);
}

TEST(limit_lowered_without_changes_still_refused)
{
    struct ws_dir *d = build_tree(50, 1);
    struct ws_limits lim = {0, 10};
    struct err err;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK(ws_dir_rescan(d, &lim, &blobs, NULL, &err) != 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    CHECK(strstr(err.msg, "max_entries") != NULL);
    ws_dir_close(d);
}

TEST(overflow_and_unknown_wd_mean_full_scan)
{
    struct ws_dir *d = build_tree(100, 1);
    struct err err;
    char key[64];
    int fd, fd2;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    /* more events than the queue holds (fs.inotify.max_queued_events, 16384 by default);
     * alternating two files, as equal events in a row are merged into one */
    fd = open(wp("root0"), O_WRONLY | O_APPEND);
    fd2 = open(wp("root11"), O_WRONLY | O_APPEND);
    CHECK(fd >= 0 && fd2 >= 0);
    for (int i = 0; i < 20000; i++) {
        CHECK(write(fd, "x", 1) == 1);
        CHECK(write(fd2, "x", 1) == 1);
    }
    close(fd);
    close(fd2);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "root0")->size, 20007);
    /* the table was rebuilt: the next change is incremental again */
    spit(wp("root0"), "y");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    /* an event from a watch the table does not know */
    ws_watch_test_forget(d, "top1");
    snprintf(key, sizeof(key), "top1/new");
    spit(wp(key), "n");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "top1/new") != NULL);
    /* a renamed directory */
    CHECK(rename(wp("top2"), wp2("top2x")) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "top2x/mid0/f30.txt") != NULL);
    spit(wp("top2x/mid0/f30.txt"), "zz");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "top2x/mid0/f30.txt")->size, 2);
    ws_dir_close(d);
}

TEST(watches_unavailable_mean_full_scans)
{
    struct ws_dir *d;
    struct err err;

    ws_watch_test_fail(1); /* no inotify instance */
    d = build_tree(30, 1);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    spit(wp("root0"), "a");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "root0")->size, 1);
    ws_dir_close(d);

    ws_watch_test_fail(2); /* every inotify_add_watch fails (ENOSPC) */
    CHECK_OK(ws_dir_open(test_path("ws"), &d, &err), &err);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    spit(wp("root0"), "bb");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "root0")->size, 2);
    /* watches possible again: the next settle adds them all */
    ws_watch_test_fail(0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_NONE);
    ws_dir_close(d);
}

TEST(hard_link_written_through_other_name_is_seen)
{
    struct ws_dir *d = build_tree(40, 1);
    struct err err;
    uint8_t h[HASH_LEN];
    int fd;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    /* command 1: link a file into another directory (a full rescan learns both names) */
    CHECK(link(wp("top1/mid1/f1.txt"), wp2("top3/other")) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    /* command 2: write through the other name, in place, same size */
    fd = open(wp("top3/other"), O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "FILE", 4, 0) == 4);
    close(fd);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    hash_sha256("FILE 1\n", 7, h);
    CHECK(memcmp(ws_manifest_get(ws_dir_manifest(d), "top1/mid1/f1.txt")->hash, h, HASH_LEN) == 0);
    /* command 3: write through the first name; the other one is seen too */
    fd = open(wp("top1/mid1/f1.txt"), O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "fIlE", 4, 0) == 4);
    close(fd);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    hash_sha256("fIlE 1\n", 7, h);
    CHECK(memcmp(ws_manifest_get(ws_dir_manifest(d), "top3/other")->hash, h, HASH_LEN) == 0);
    ws_dir_close(d);
}

TEST(transient_hard_link_written_then_removed_is_seen)
{
    struct ws_dir *d = build_tree(40, 1);
    struct err err;
    uint8_t h[HASH_LEN];
    int fd;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    /* one command: link, write through the link, remove the link (no event in top1/mid1) */
    CHECK(link(wp("top1/mid1/f1.txt"), wp2("top3/tmp")) == 0);
    fd = open(wp("top3/tmp"), O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "GONE", 4, 0) == 4);
    close(fd);
    CHECK(unlink(wp("top3/tmp")) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_FULL);
    hash_sha256("GONE 1\n", 7, h);
    CHECK(memcmp(ws_manifest_get(ws_dir_manifest(d), "top1/mid1/f1.txt")->hash, h, HASH_LEN) == 0);
    /* a temporary file written and renamed over a file stays incremental */
    spit(wp("top3/new.tmp"), "fresh");
    CHECK(rename(wp("top3/new.tmp"), wp2("top3/mid3/f3.txt")) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    CHECK_EQ_INT(ws_manifest_get(ws_dir_manifest(d), "top3/mid3/f3.txt")->size, 5);
    ws_dir_close(d);
}

TEST(skipped_entries_reported_every_time)
{
    struct ws_dir *d = build_tree(20, 1);
    struct ws_scan_report r;
    struct err err;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK(mkfifo(wp("top1/pipe"), 0644) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(r.skipped_total, 1);
    ws_scan_report_release(&r);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, &r, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY); /* the FIFO's directory is listed again */
    CHECK_EQ_INT(r.skipped_total, 1);
    CHECK_EQ_STR(r.skipped[0].why, "fifo");
    ws_scan_report_release(&r);
    ws_dir_close(d);
}

TEST(emptied_and_new_directories)
{
    struct ws_dir *d = build_tree(20, 1);
    const struct ws_entry *e;
    struct err err;

    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    /* empty a directory, fill the empty one, make a new deep one */
    CHECK(unlink(wp("top1/mid1/f1.txt")) == 0);
    spit(wp("empty/dir/now"), "x");
    CHECK(mkdir(wp("n1"), 0755) == 0 && mkdir(wp("n1/n2"), 0755) == 0);
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    e = ws_manifest_get(ws_dir_manifest(d), "top1/mid1");
    CHECK(e != NULL && e->type == WS_DIR);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "empty/dir") == NULL);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "empty/dir/now") != NULL);
    e = ws_manifest_get(ws_dir_manifest(d), "n1/n2");
    CHECK(e != NULL && e->type == WS_DIR);
    /* the new directories are watched now */
    spit(wp("n1/n2/f"), "y");
    CHECK_OK(ws_dir_rescan(d, NULL, &blobs, NULL, &err), &err);
    CHECK_EQ_INT(d->last_scan, WS_SCAN_DIRTY);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "n1/n2") == NULL);
    CHECK(ws_manifest_get(ws_dir_manifest(d), "n1/n2/f") != NULL);
    ws_dir_close(d);
}

TESTS(random_changes_match_full_scans, no_events_means_no_stat,
      limit_lowered_without_changes_still_refused, overflow_and_unknown_wd_mean_full_scan,
      watches_unavailable_mean_full_scans, hard_link_written_through_other_name_is_seen,
      transient_hard_link_written_then_removed_is_seen, skipped_entries_reported_every_time,
      emptied_and_new_directories)
