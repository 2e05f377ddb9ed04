/*
 * test_host.c - the host module and its safe-open primitive: writes, links, deletes,
 * a symlink swapped in by a racing process while writes happen, escapes by "..",
 * links and magic links, drun's own files, deletes across mounts, exported link chains
 * and VCS hooks. Every test runs twice where it matters: with openat2 and with the
 * per-component O_NOFOLLOW fallback, which must answer alike.
 */
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <limits.h>
#include <stdio.h>

#include "host/host.h"
#include "util/err.h"
#include "util/safeopen.h"
#include "util/timeutil.h"

static char root[PATH_MAX];    /* the allowlisted directory */
static char outside[PATH_MAX]; /* a directory no write may reach */

static int
setup(void)
{
    struct err err;
    int fd;

    snprintf(root, sizeof(root), "%s/root", test_tmpdir());
    snprintf(outside, sizeof(outside), "%s/outside", test_tmpdir());
    CHECK(mkdir(root, 0755) == 0);
    CHECK(mkdir(outside, 0755) == 0);
    fd = host_open_root(root, &err);
    CHECK_MSG(fd >= 0, "open root: %s", err.msg);
    return fd;
}

static size_t
count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0;

    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL) {
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    }
    closedir(d);
    return n;
}

static void
read_into(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n;

    CHECK_MSG(f != NULL, "cannot read %s", path);
    n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
}

static void
writes_files_atomically_body(int fallback)
{
    int rfd;
    struct err err;
    char p[PATH_MAX], data[64];
    struct stat sb;

    host_force_fallback(fallback);
    rfd = setup();
    CHECK_OK(host_write_file(rfd, "a/b/c.txt", "hello", 5, 0750, &err), &err);
    snprintf(p, sizeof(p), "%s/a/b/c.txt", root);
    read_into(p, data, sizeof(data));
    CHECK_EQ_STR(data, "hello");
    CHECK(stat(p, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 0777, 0750);
    /* Overwrite in place: new content, no temp file left behind. */
    CHECK_OK(host_write_file(rfd, "a/b/c.txt", "bye", 3, 0644, &err), &err);
    read_into(p, data, sizeof(data));
    CHECK_EQ_STR(data, "bye");
    snprintf(p, sizeof(p), "%s/a/b", root);
    CHECK_EQ_INT(count_entries(p), 1);
    /* Setuid bits are never written. */
    CHECK_OK(host_write_file(rfd, "s", "x", 1, 04755, &err), &err);
    snprintf(p, sizeof(p), "%s/s", root);
    CHECK(stat(p, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0755);
    CHECK_OK(host_mkdirs(rfd, "x/y/z", 0755, &err), &err);
    snprintf(p, sizeof(p), "%s/x/y/z", root);
    CHECK(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode));
    close(rfd);
}

TEST(writes_files_atomically)
{
    writes_files_atomically_body(0);
}

TEST(writes_files_atomically_fallback)
{
    writes_files_atomically_body(1);
}

static void
refuses_symlinks_on_the_way_body(int fallback)
{
    int rfd;
    struct err err;
    char p[PATH_MAX], data[64];

    host_force_fallback(fallback);
    rfd = setup();
    snprintf(p, sizeof(p), "%s/evil", root);
    CHECK(symlink(outside, p) == 0);
    CHECK(host_write_file(rfd, "evil/x", "pwned", 5, 0644, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(strstr(err.msg, "'evil/x'") != NULL);
    CHECK(host_write_file(rfd, "evil/deeper/x", "pwned", 5, 0644, &err) < 0);
    CHECK(host_mkdirs(rfd, "evil/d", 0755, &err) < 0);
    CHECK_EQ_INT(count_entries(outside), 0);

    /* Export over an existing symlink that points outside: the link is replaced. */
    snprintf(data, sizeof(data), "%s/target", outside);
    {
        FILE *f = fopen(data, "w");
        fputs("original", f);
        fclose(f);
    }
    snprintf(p, sizeof(p), "%s/out.txt", root);
    CHECK(symlink(data, p) == 0);
    CHECK_OK(host_write_file(rfd, "out.txt", "new", 3, 0644, &err), &err);
    {
        char got[64];
        struct stat sb;
        read_into(data, got, sizeof(got));
        CHECK_EQ_STR(got, "original");
        CHECK(lstat(p, &sb) == 0 && S_ISREG(sb.st_mode));
    }

    /* Malformed relative paths. */
    CHECK(host_write_file(rfd, "../outside/x", "x", 1, 0644, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(host_write_file(rfd, "/etc/x", "x", 1, 0644, &err) < 0);
    CHECK(host_write_file(rfd, "a/./b", "x", 1, 0644, &err) < 0);
    CHECK(host_write_file(rfd, "a//b", "x", 1, 0644, &err) < 0);
    CHECK(host_write_file(rfd, "a\nb", "x", 1, 0644, &err) < 0);
    CHECK(host_write_file(rfd, "", "x", 1, 0644, &err) < 0);
    CHECK_EQ_INT(count_entries(outside), 1);
    close(rfd);
}

TEST(refuses_symlinks_on_the_way)
{
    refuses_symlinks_on_the_way_body(0);
}

TEST(refuses_symlinks_on_the_way_fallback)
{
    refuses_symlinks_on_the_way_body(1);
}

TEST(open_root_refuses_links_and_slash)
{
    struct err err;
    char link[PATH_MAX];

    setup();
    snprintf(link, sizeof(link), "%s/rootlink", test_tmpdir());
    CHECK(symlink(root, link) == 0);
    CHECK(host_open_root(link, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_open_root("/", &err) < 0);
    CHECK(host_open_root("relative", &err) < 0);
}

TEST(symlinks_are_written_as_links)
{
    int rfd = setup();
    struct err err;
    char p[PATH_MAX], target[PATH_MAX];
    ssize_t n;

    CHECK_OK(host_symlink(rfd, "d/link", "../f", &err), &err);
    snprintf(p, sizeof(p), "%s/d/link", root);
    n = readlink(p, target, sizeof(target) - 1);
    CHECK(n == 4);
    target[n] = '\0';
    CHECK_EQ_STR(target, "../f");
    CHECK_OK(host_symlink(rfd, "d/link", "g", &err), &err); /* replaced atomically */
    n = readlink(p, target, sizeof(target) - 1);
    CHECK(n == 1);
    close(rfd);
}

TEST(write_fd_copies_and_caps)
{
    int rfd = setup();
    struct err err;
    int pfd[2];

    CHECK(pipe(pfd) == 0);
    CHECK(write(pfd[1], "0123456789", 10) == 10);
    close(pfd[1]);
    CHECK_OK(host_write_fd(rfd, "ten", pfd[0], 10, 0644, &err), &err);
    close(pfd[0]);
    CHECK(pipe(pfd) == 0);
    CHECK(write(pfd[1], "0123456789", 10) == 10);
    close(pfd[1]);
    CHECK(host_write_fd(rfd, "nine", pfd[0], 9, 0644, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    close(pfd[0]);
    CHECK_EQ_INT(count_entries(root), 1); /* no partial file, no temp file */
    close(rfd);
}

static void
removes_without_following_body(int fallback)
{
    int rfd;
    struct err err;
    struct host_removed r;
    char p[PATH_MAX], q[PATH_MAX];

    host_force_fallback(fallback);
    rfd = setup();
    /* outside/keep must survive everything below */
    snprintf(p, sizeof(p), "%s/keep", outside);
    CHECK(mkdir(p, 0755) == 0);
    CHECK_OK(host_write_file(rfd, "tree/a/b/f1", "1", 1, 0644, &err), &err);
    CHECK_OK(host_write_file(rfd, "tree/f2", "2", 1, 0644, &err), &err);
    snprintf(q, sizeof(q), "%s/tree/a/out", root);
    CHECK(symlink(outside, q) == 0);
    snprintf(q, sizeof(q), "%s/link", root);
    CHECK(symlink(outside, q) == 0);

    /* A link is removed as a link. */
    CHECK_OK(host_remove(rfd, "link", &r, &err), &err);
    CHECK_EQ_INT(r.files, 1);
    CHECK_EQ_INT(count_entries(outside), 1);
    /* Through a link: refused. */
    snprintf(q, sizeof(q), "%s/link2", root);
    CHECK(symlink(outside, q) == 0);
    CHECK(host_remove(rfd, "link2/keep", &r, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    /* A tree with a link inside: the link goes, its target stays. */
    CHECK_OK(host_remove(rfd, "tree", &r, &err), &err);
    CHECK_EQ_INT(r.dirs, 3);
    CHECK_EQ_INT(r.files, 3);
    snprintf(q, sizeof(q), "%s/tree", root);
    CHECK(access(q, F_OK) < 0);
    CHECK_EQ_INT(count_entries(outside), 1);
    /* Missing: a no-op. */
    CHECK_OK(host_remove(rfd, "nope/nothing", &r, &err), &err);
    CHECK_EQ_INT(r.missing, 1);
    /* The root itself and dot-dot: refused. */
    CHECK(host_remove(rfd, "", &r, &err) < 0);
    CHECK(host_remove(rfd, "..", &r, &err) < 0);
    CHECK(host_remove(rfd, "../outside", &r, &err) < 0);
    CHECK_EQ_INT(count_entries(outside), 1);
    close(rfd);
}

TEST(removes_without_following)
{
    removes_without_following_body(0);
}

TEST(removes_without_following_fallback)
{
    removes_without_following_body(1);
}

/*
 * The race: a helper process swaps root/d between a real directory and a symlink to
 * `outside` (renameat2 RENAME_EXCHANGE, so one of them is always there) as fast as it
 * can, while this process writes and deletes under d/. Whatever interleaving happens,
 * no byte may land in `outside`. Bounded by an iteration count and ~2 s of wall time.
 */
static void
race_body(int fallback)
{
    int rfd;
    struct err err;
    char real_d[PATH_MAX], link_d[PATH_MAX], d[PATH_MAX];
    pid_t pid;
    int ok = 0, refused = 0;
    int64_t until;

    host_force_fallback(fallback);
    rfd = setup();
    snprintf(d, sizeof(d), "%s/d", root);
    snprintf(real_d, sizeof(real_d), "%s/d", root);
    snprintf(link_d, sizeof(link_d), "%s/swap", root);
    CHECK(mkdir(d, 0755) == 0);
    CHECK(symlink(outside, link_d) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (long i = 0; i < 50000000; i++) {
            if (renameat2(AT_FDCWD, real_d, AT_FDCWD, link_d, RENAME_EXCHANGE) < 0) {
                _exit(2);
            }
        }
        _exit(0);
    }
    until = time_mono_ms() + 2000;
    for (int i = 0; i < 200000 && time_mono_ms() < until; i++) {
        char rel[64];
        struct host_removed r;
        snprintf(rel, sizeof(rel), "d/sub%d/f", i % 7);
        if (host_write_file(rfd, rel, "x", 1, 0644, &err) == 0) {
            ok++;
        } else {
            refused++;
        }
        if (i % 3 == 0) {
            snprintf(rel, sizeof(rel), "d/sub%d", (i + 1) % 7);
            host_remove(rfd, rel, &r, &err);
        }
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("    race (%s): %d writes landed inside, %d refused\n",
           fallback ? "fallback" : "openat2", ok, refused);
    CHECK_EQ_INT(count_entries(outside), 0);
    CHECK(ok + refused > 0);
    close(rfd);
}

TEST(race_symlink_swap)
{
    race_body(0);
}

TEST(race_symlink_swap_fallback)
{
    race_body(1);
}

/* ---- util/safeopen: both paths answer alike ---- */

static void
safeopen_body(int fallback)
{
    char p[PATH_MAX];
    int rfd, fd;

    safeopen_force_fallback(fallback);
    rfd = setup();
    snprintf(p, sizeof(p), "%s/d", root);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/d/e", root);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/d/e/f.txt", root);
    CHECK(close(open(p, O_CREAT | O_WRONLY, 0644)) == 0);
    snprintf(p, sizeof(p), "%s/in", root);
    CHECK(symlink("d/e", p) == 0);
    snprintf(p, sizeof(p), "%s/abs", root);
    CHECK(symlink(outside, p) == 0);
    snprintf(p, sizeof(p), "%s/up", root);
    CHECK(symlink("d/../..", p) == 0);
    snprintf(p, sizeof(p), "%s/d/e/chain", root);
    CHECK(symlink("../../in/../..", p) == 0); /* in -> d/e, so ../.. from d/e is root */

    /* Plain paths and links that stay inside. */
    fd = safeopen_beneath(rfd, "d/e/f.txt", O_RDONLY, 0, 0);
    CHECK(fd >= 0);
    close(fd);
    fd = safeopen_beneath(rfd, "in/f.txt", O_RDONLY, 0, 0);
    CHECK_MSG(fd >= 0, "a link inside: %s", strerror(errno));
    close(fd);
    fd = safeopen_beneath(rfd, "d/e/chain", O_PATH, 0, 0);
    CHECK_MSG(fd >= 0, "a chain that ends at the root: %s", strerror(errno));
    close(fd);
    fd = safeopen_beneath(rfd, "", O_RDONLY | O_DIRECTORY, 0, 0);
    CHECK(fd >= 0);
    close(fd);
    /* Escapes. */
    CHECK(safeopen_beneath(rfd, "..", O_PATH, 0, 0) < 0 && errno == EXDEV);
    CHECK(safeopen_beneath(rfd, "d/../../outside", O_PATH, 0, 0) < 0 && errno == EXDEV);
    CHECK(safeopen_beneath(rfd, "abs", O_PATH, 0, 0) < 0 && errno == EXDEV);
    CHECK(safeopen_beneath(rfd, "up", O_PATH, 0, 0) < 0 && errno == EXDEV);
    CHECK(safeopen_beneath(rfd, "/etc", O_PATH, 0, 0) < 0 && errno == EXDEV);
    /* No symlinks at all. */
    CHECK(safeopen_beneath(rfd, "in/f.txt", O_RDONLY, 0, SAFEOPEN_NO_SYMLINKS) < 0 &&
          errno == ELOOP);
    CHECK(safeopen_beneath(rfd, "in", O_RDONLY, 0, SAFEOPEN_NO_SYMLINKS) < 0 && errno == ELOOP);
    /* Creation. */
    fd =
        safeopen_beneath(rfd, "d/new.txt", O_WRONLY | O_CREAT | O_EXCL, 0600, SAFEOPEN_NO_SYMLINKS);
    CHECK_MSG(fd >= 0, "create: %s", strerror(errno));
    close(fd);
    CHECK(safeopen_beneath(rfd, "missing/x", O_RDONLY, 0, 0) < 0 && errno == ENOENT);
    close(rfd);

    /* Magic links: /proc/self/root is "/" on the host, never followed. */
    rfd = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(rfd >= 0);
    CHECK(safeopen_beneath(rfd, "root/etc", O_PATH, 0, 0) < 0);
    CHECK(safeopen_beneath(rfd, "cwd", O_PATH, 0, 0) < 0);
    close(rfd);
    safeopen_force_fallback(0);
}

TEST(safeopen_escapes)
{
    safeopen_body(0);
}

TEST(safeopen_escapes_fallback)
{
    safeopen_body(1);
}

/* A bind mount on the same filesystem: same st_dev, another mount id. */
static void
xdev_body(int fallback)
{
    char a[PATH_MAX], b[PATH_MAX], f[PATH_MAX];
    struct host_removed rm;
    struct err err;
    int rfd, fd;

    if (geteuid() != 0 || unshare(CLONE_NEWNS) < 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        SKIP("needs root to make a private bind mount");
    }
    safeopen_force_fallback(fallback);
    rfd = setup();
    snprintf(b, sizeof(b), "%s/victim", root);
    snprintf(a, sizeof(a), "%s/victim/m", root);
    CHECK(mkdir(b, 0755) == 0 && mkdir(a, 0755) == 0);
    snprintf(f, sizeof(f), "%s/keep.txt", outside);
    CHECK(close(open(f, O_CREAT | O_WRONLY, 0644)) == 0);
    CHECK(mount(outside, a, NULL, MS_BIND, NULL) == 0);
    fd = safeopen_beneath(rfd, "victim/m/keep.txt", O_RDONLY, 0, 0);
    CHECK(fd >= 0);
    close(fd);
    CHECK(safeopen_beneath(rfd, "victim/m/keep.txt", O_RDONLY, 0, SAFEOPEN_NO_XDEV) < 0 &&
          errno == EXDEV);
    CHECK(host_remove(rfd, "victim", &rm, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(access(f, F_OK) == 0);
    CHECK(host_remove(rfd, "victim/m", &rm, &err) < 0);
    CHECK(access(f, F_OK) == 0);
    umount2(a, MNT_DETACH);
    close(rfd);
    safeopen_force_fallback(0);
}

TEST(never_crosses_a_bind_mount)
{
    xdev_body(0);
}

TEST(never_crosses_a_bind_mount_fallback)
{
    xdev_body(1);
}

/* ---- drun's own files ---- */

TEST(own_files_behind_every_door)
{
    char own[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
    struct host_removed rm;
    struct err err;
    int rfd = setup();

    host_own_reset();
    snprintf(own, sizeof(own), "%s/.drun", root);
    CHECK(mkdir(own, 0700) == 0);
    snprintf(p, sizeof(p), "%s/drun.db", own);
    CHECK(close(open(p, O_CREAT | O_WRONLY, 0600)) == 0);
    CHECK(host_own_add_db(p, &err) == 0);
    snprintf(p, sizeof(p), "%s/config.toml", own);
    CHECK(host_own_add_file(p, &err) == 0);
    /* A config whose directory does not exist yet is guarded once it does. */
    snprintf(p, sizeof(p), "%s/later/config.toml", root);
    CHECK(host_own_add_file(p, &err) == 0);

    CHECK(host_write_file(rfd, ".drun/config.toml", "x", 1, 0644, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_write_file(rfd, ".drun/drun.db-journal", "x", 1, 0644, &err) < 0);
    CHECK(host_symlink(rfd, ".drun/drun.db-wal", "/etc/passwd", &err) < 0);
    CHECK(host_write_file(rfd, "later/config.toml", "x", 1, 0644, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_write_file(rfd, ".drun/other.txt", "x", 1, 0644, &err) == 0);
    /* By inode: a hard link of the DB under another name. */
    snprintf(p, sizeof(p), "%s/drun.db", own);
    snprintf(q, sizeof(q), "%s/innocent", root);
    CHECK(link(p, q) == 0);
    CHECK(host_write_file(rfd, "innocent", "x", 1, 0644, &err) < 0);
    CHECK(host_remove(rfd, "innocent", &rm, &err) < 0);
    /* A directory that holds one is not removed, not even partly. */
    CHECK(host_remove(rfd, ".drun", &rm, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    snprintf(q, sizeof(q), "%s/other.txt", own);
    CHECK(access(q, F_OK) == 0);
    CHECK(access(p, F_OK) == 0);
    host_own_reset();
    close(rfd);
}

/* ---- export rules ---- */

TEST(exported_link_chains_stay_inside)
{
    static const char *rels[] = {"d0/d1/d2/a", "up", "ok", "dangling", "dangling_up"};
    unsigned char bad[5] = {0};
    struct err err;
    int rfd = setup();

    CHECK(host_mkdirs(rfd, "d0/d1/d2", 0755, &err) == 0);
    CHECK(host_symlink(rfd, "d0/d1/d2/a", "../../..", &err) == 0);
    CHECK(host_symlink(rfd, "up", "d0/d1/d2/a/..", &err) == 0); /* root/.. = outside */
    CHECK(host_symlink(rfd, "ok", "d0/d1", &err) == 0);
    CHECK(host_symlink(rfd, "dangling", "nothing/here", &err) == 0);
    CHECK(host_symlink(rfd, "dangling_up", "nothing/../../x", &err) == 0);
    CHECK(host_export_check_links(rfd, rels, 5, bad, &err) == 0);
    CHECK_EQ_INT(bad[0], 0);
    CHECK_EQ_INT(bad[1], 1);
    CHECK_EQ_INT(bad[2], 0);
    CHECK_EQ_INT(bad[3], 0);
    CHECK_EQ_INT(bad[4], 1);
    CHECK(faccessat(rfd, "up", F_OK, AT_SYMLINK_NOFOLLOW) < 0);
    CHECK(faccessat(rfd, "ok", F_OK, AT_SYMLINK_NOFOLLOW) == 0);
    close(rfd);
}

TEST(vcs_hooks_need_the_operator)
{
    struct policy p;

    memset(&p, 0, sizeof(p));
    CHECK(host_export_vcs_refusal(&p, ".git/hooks/pre-commit", 0) != NULL);
    CHECK(host_export_vcs_refusal(&p, "a/b/.git/hooks/x/y", 0) != NULL);
    CHECK(host_export_vcs_refusal(&p, ".git/config", 0) != NULL);
    CHECK(host_export_vcs_refusal(&p, "sub/.git", 0) != NULL);
    CHECK(host_export_vcs_refusal(&p, "sub/.git", 1) == NULL);
    CHECK(host_export_vcs_refusal(&p, ".git/HEAD", 0) == NULL);
    CHECK(host_export_vcs_refusal(&p, ".github/hooks/x", 0) == NULL);
    CHECK(host_export_vcs_refusal(&p, "config", 0) == NULL);
    p.export_vcs_hooks = 1;
    CHECK(host_export_vcs_refusal(&p, ".git/hooks/pre-commit", 0) == NULL);
}

/* ---- opening once ---- */

TEST(snapshot_file_opened_once)
{
    char f[PATH_MAX], fifo[PATH_MAX], lnk[PATH_MAX], db[PATH_MAX];
    struct stat sb;
    struct err err;
    int rfd = setup(), fd;

    host_own_reset();
    snprintf(f, sizeof(f), "%s/snap.drun", root);
    CHECK(close(open(f, O_CREAT | O_WRONLY, 0644)) == 0);
    fd = host_open_snapshot_file(f, &sb, &err);
    CHECK_MSG(fd >= 0, "%s", err.msg);
    CHECK(S_ISREG(sb.st_mode));
    CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
    close(fd);
    /* A FIFO answers at once (never opened for a blocking read), a link is refused. */
    snprintf(fifo, sizeof(fifo), "%s/fifo.drun", root);
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK(host_open_snapshot_file(fifo, &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    snprintf(lnk, sizeof(lnk), "%s/link.drun", root);
    CHECK(symlink(f, lnk) == 0);
    CHECK(host_open_snapshot_file(lnk, &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_open_snapshot_file("/proc/self/environ", &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_open_snapshot_file("/dev/zero", &sb, &err) < 0);
    /* drun's own DB is not a snapshot file. */
    snprintf(db, sizeof(db), "%s/drun.db", root);
    CHECK(close(open(db, O_CREAT | O_WRONLY, 0600)) == 0);
    CHECK(host_own_add_db(db, &err) == 0);
    CHECK(host_open_snapshot_file(db, &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    host_own_reset();
    close(rfd);
}

TEST(read_door_refuses_proc_and_fifos)
{
    struct policy p;
    struct policy_hostpath hp;
    char fifo[PATH_MAX];
    struct stat sb;
    struct err err;
    int rfd = setup();

    memset(&p, 0, sizeof(p)); /* an empty allowlist: mount reads anywhere, but not these */
    CHECK(host_open_read(&p, "/proc/self/environ", &hp, &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_open_read(&p, "//proc/./self/environ", &hp, &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(host_open_read(&p, "/dev/fd/0", &hp, &sb, &err) < 0);
    CHECK(host_open_read(&p, "/sys/kernel", &hp, &sb, &err) < 0);
    snprintf(fifo, sizeof(fifo), "%s/fifo", root);
    CHECK(mkfifo(fifo, 0644) == 0);
    memset(&sb, 0, sizeof(sb));
    CHECK(host_open_read(&p, fifo, &hp, &sb, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(S_ISFIFO(sb.st_mode));
    close(rfd);
}

/* ---- host_toolchain_scan --------------------------------------------------------------- */

static int
tc_has(const struct host_toolchain *t, const char *dir)
{
    char real[PATH_MAX];

    if (realpath(dir, real) == NULL) {
        return 0;
    }
    for (size_t i = 0; i < t->n_dirs; i++) {
        if (strcmp(t->dirs[i], real) == 0) {
            return 1;
        }
    }
    return 0;
}

static void
tc_mkdirs(const char *path)
{
    char p[PATH_MAX];

    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s != '\0'; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    }
    mkdir(p, 0755);
}

static void
tc_script(const char *path, const char *body)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    fputs(body, f);
    fclose(f);
    CHECK(chmod(path, 0755) == 0);
}

TEST(toolchain_binds_what_path_needs)
{
    char home[PATH_MAX], shims[PATH_MAX], links[PATH_MAX], path[8 * PATH_MAX], f[PATH_MAX];
    const char *t = test_tmpdir();
    struct host_toolchain tc;
    struct err err;

    snprintf(home, sizeof(home), "%s/home", t);
    tc_mkdirs(home);
    CHECK(setenv("HOME", home, 1) == 0);
    unsetenv("PYENV_ROOT");
    unsetenv("RUSTUP_HOME");
    /* a pyenv root: shims/ on PATH, the root bound and named */
    snprintf(shims, sizeof(shims), "%s/.pyenv/shims", t);
    tc_mkdirs(shims);
    /* links: into a runtime's bin/ (its prefix bound), to a script in HOME (not), into
     * /proc (not), to "/" (not) */
    snprintf(links, sizeof(links), "%s/links", t);
    tc_mkdirs(links);
    snprintf(f, sizeof(f), "%s/rt/v1/bin", t);
    tc_mkdirs(f);
    snprintf(f, sizeof(f), "%s/rt/v1/bin/tool", t);
    tc_script(f, "#!/bin/sh\n");
    snprintf(path, sizeof(path), "%s/tool", links);
    CHECK(symlink(f, path) == 0);
    snprintf(f, sizeof(f), "%s/x.sh", home);
    tc_script(f, "#!/bin/sh\n");
    snprintf(path, sizeof(path), "%s/hometool", links);
    CHECK(symlink(f, path) == 0);
    snprintf(path, sizeof(path), "%s/environ", links);
    CHECK(symlink("/proc/self/environ", path) == 0);
    snprintf(path, sizeof(path), "%s/root", links);
    CHECK(symlink("/", path) == 0);
    /* a "#!" script whose interpreter lives in an unbound prefix */
    snprintf(f, sizeof(f), "%s/interp/bin", t);
    tc_mkdirs(f);
    snprintf(f, sizeof(f), "%s/interp/bin/run", t);
    tc_script(f, "#!/bin/sh\n");
    snprintf(path, sizeof(path), "%s/scripted", links);
    {
        char body[PATH_MAX + 8];
        snprintf(body, sizeof(body), "#!%s -x\n", f);
        tc_script(path, body);
    }
    /* rustup-style: links beside their target in <prefix>/bin, a secret in the prefix */
    snprintf(f, sizeof(f), "%s/cargo/bin", t);
    tc_mkdirs(f);
    snprintf(f, sizeof(f), "%s/cargo/bin/rustup", t);
    tc_script(f, "#!/bin/sh\n");
    snprintf(path, sizeof(path), "%s/cargo/bin/cargo", t);
    CHECK(symlink("rustup", path) == 0);
    /* $PATH: those three, HOME itself and /proc as entries, a relative and a missing one */
    snprintf(path, sizeof(path), "%s:%s:%s/cargo/bin:%s:/proc:relative/bin:%s/missing:/usr/bin",
             shims, links, t, home, t);
    CHECK_OK(host_toolchain_scan(path, &tc, &err), &err);
    snprintf(f, sizeof(f), "%s/.pyenv", t);
    CHECK_MSG(tc_has(&tc, f), "the pyenv root is bound");
    CHECK_MSG(tc.n_env >= 1 && strncmp(tc.env[0], "PYENV_ROOT=", 11) == 0, "PYENV_ROOT named");
    CHECK(tc_has(&tc, links));
    snprintf(f, sizeof(f), "%s/rt/v1", t);
    CHECK_MSG(tc_has(&tc, f), "a link's bin/ prefix is bound");
    snprintf(f, sizeof(f), "%s/interp", t);
    CHECK_MSG(tc_has(&tc, f), "a #! interpreter's prefix is bound");
    CHECK_MSG(!tc_has(&tc, home), "HOME is never bound");
    snprintf(f, sizeof(f), "%s/cargo", t);
    CHECK_MSG(!tc_has(&tc, f), "a link beside its target does not bind the prefix");
    snprintf(f, sizeof(f), "%s/cargo/bin", t);
    CHECK(tc_has(&tc, f));
    for (size_t i = 0; i < tc.n_dirs; i++) {
        CHECK_MSG(strcmp(tc.dirs[i], "/") != 0 && strncmp(tc.dirs[i], "/proc", 5) != 0 &&
                      strncmp(tc.dirs[i], "/sys", 4) != 0 && strncmp(tc.dirs[i], "/dev", 4) != 0,
                  "'%s' bound", tc.dirs[i]);
        CHECK_MSG(strncmp(home, tc.dirs[i], strlen(tc.dirs[i])) != 0 ||
                      (home[strlen(tc.dirs[i])] != '/' && home[strlen(tc.dirs[i])] != '\0'),
                  "'%s' holds HOME", tc.dirs[i]);
    }
    /* PATH inside: existing entries only, /usr/bin kept as written */
    CHECK(tc.path != NULL && strstr(tc.path, "relative") == NULL &&
          strstr(tc.path, "missing") == NULL && strstr(tc.path, "/usr/bin") != NULL &&
          strstr(tc.path, "/proc") == NULL);
    host_toolchain_release(&tc);
    CHECK(tc.n_dirs == 0 && tc.path == NULL);
}

TEST(toolchain_bounds)
{
    char path[65536], d[PATH_MAX];
    size_t n = 0;
    struct host_toolchain tc;
    struct err err;

    /* more entries than HOST_TOOLCHAIN_DIRS_MAX: the rest are left out, no failure */
    path[0] = '\0';
    for (int i = 0; i < HOST_TOOLCHAIN_DIRS_MAX + 10; i++) {
        snprintf(d, sizeof(d), "%s/e%d", test_tmpdir(), i);
        CHECK(mkdir(d, 0755) == 0);
        n += (size_t)snprintf(path + n, sizeof(path) - n, "%s%s", n ? ":" : "", d);
    }
    CHECK_OK(host_toolchain_scan(path, &tc, &err), &err);
    CHECK_EQ_INT((int)tc.n_dirs, HOST_TOOLCHAIN_DIRS_MAX);
    host_toolchain_release(&tc);
    for (const char *const *v = (const char *const[]){"PYENV_ROOT", "RBENV_ROOT", "ASDF_DATA_DIR",
                                                      "MISE_DATA_DIR", "VOLTA_HOME", "RUSTUP_HOME",
                                                      "CARGO_HOME", "HOMEBREW_PREFIX", NULL};
         *v != NULL; v++) {
        unsetenv(*v);
    }
    CHECK_OK(host_toolchain_scan(NULL, &tc, &err), &err);
    CHECK_EQ_INT((int)tc.n_dirs, 0);
    host_toolchain_release(&tc);
}

TESTS(writes_files_atomically, writes_files_atomically_fallback, refuses_symlinks_on_the_way,
      refuses_symlinks_on_the_way_fallback, open_root_refuses_links_and_slash,
      symlinks_are_written_as_links, write_fd_copies_and_caps, removes_without_following,
      removes_without_following_fallback, race_symlink_swap, race_symlink_swap_fallback,
      safeopen_escapes, safeopen_escapes_fallback, never_crosses_a_bind_mount,
      never_crosses_a_bind_mount_fallback, own_files_behind_every_door,
      exported_link_chains_stay_inside, vcs_hooks_need_the_operator, snapshot_file_opened_once,
      read_door_refuses_proc_and_fifos, toolchain_binds_what_path_needs, toolchain_bounds)
