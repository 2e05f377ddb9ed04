/*
 * test_host.c - the symlink-proof host writer: writes, links, deletes, and a
 * symlink swapped in by a racing process while writes happen. Every test runs twice
 * where it matters: with openat2 and with the per-component O_NOFOLLOW fallback.
 */
#include "test.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>

#include "host/host.h"
#include "util/err.h"
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

TESTS(writes_files_atomically, writes_files_atomically_fallback, refuses_symlinks_on_the_way,
      refuses_symlinks_on_the_way_fallback, open_root_refuses_links_and_slash,
      symlinks_are_written_as_links, write_fd_copies_and_caps, removes_without_following,
      removes_without_following_fallback, race_symlink_swap, race_symlink_swap_fallback)
