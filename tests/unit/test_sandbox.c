/*
 * test_sandbox.c - the sandbox module against the real bwrap: functional behaviour, every
 * limit at and past its edge, and the attacks of issue 5 (each asserting the safe
 * outcome). Also the command policy (reference 12.3) and the macOS profile builder.
 *
 * Needs bwrap and user namespaces; tests that need them skip with the reason otherwise.
 * tests/security/t0500-sandbox.sh runs this binary as root and again as an unprivileged
 * user. A few attacks need a small C probe; it is compiled with `cc` into the test's
 * workspace (those tests skip when no compiler is installed).
 */
#include "test.h"

#include <linux/keyctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <dirent.h>

#include "sandbox/sandbox.h"
#include "util/buf.h"
#include "util/err.h"

/* ---- helpers -------------------------------------------------------------------- */

static void
need_sandbox(void)
{
    static int state; /* 0 unknown, 1 ok, 2 not */
    struct sandbox_probe p;
    struct err err;

    if (state == 0) {
        state = sandbox_probe(&p, &err) == 0 ? 1 : 2;
        if (state == 2) {
            SKIP("the sandbox cannot run here: %s", err.msg);
        }
    } else if (state == 2) {
        SKIP("the sandbox cannot run here");
    }
}

static const char *
ws(void)
{
    static char p[4096];
    snprintf(p, sizeof(p), "%s/ws", test_tmpdir());
    mkdir(p, 0755);
    if (geteuid() == 0) {
        /* A root daemon's bwrap runs as the sandbox user: it must reach and own the
         * workspace (the session layer does this through ws_dir_open_as). */
        chmod(test_tmpdir(), 0711);
        if (chown(p, SANDBOX_UID_DEFAULT, SANDBOX_GID_DEFAULT) != 0) {
            return p;
        }
    }
    return p;
}

static void
spec_init(struct sandbox_spec *s, const char *cmd)
{
    memset(s, 0, sizeof(*s));
    s->workspace_dir = ws();
    s->command = cmd;
    s->command_len = strlen(cmd);
    s->limits.timeout_ms = 120000; /* a hang guard: a loaded machine is slow, not wrong */
}

/* Runs cmd in a default sandbox; fails the test if the sandbox itself fails. */
static void
run(const char *cmd, struct sandbox_result *r)
{
    struct sandbox_spec s;
    struct err err;

    need_sandbox();
    spec_init(&s, cmd);
    CHECK_OK(sandbox_run(&s, r, &err), &err);
}

static void
run_spec(struct sandbox_spec *s, struct sandbox_result *r)
{
    struct err err;
    need_sandbox();
    CHECK_OK(sandbox_run(s, r, &err), &err);
}

static const char *
out_of(struct sandbox_result *r)
{
    return buf_cstr(&r->out.data);
}

static const char *probe_src =
    "#define _GNU_SOURCE\n#include <errno.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include "
    "<string.h>\n"
    "#include <unistd.h>\n#include <sched.h>\n#include <sys/ioctl.h>\n#include <sys/socket.h>\n"
    "#include <sys/syscall.h>\n#include <sys/un.h>\n#include <netinet/in.h>\n"
    "#include <arpa/inet.h>\n#include <fcntl.h>\n"
    "int main(int c, char **v) {\n"
    "  if (c < 2) return 2;\n"
    "  if (!strcmp(v[1], \"tcp\")) { int s = socket(AF_INET, SOCK_STREAM, 0);\n"
    "    struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_port = htons(atoi(v[2]));\n"
    "    a.sin_addr.s_addr = htonl(0x7f000001);\n"
    "    if (s >= 0 && connect(s, (void *)&a, sizeof a) == 0) { puts(\"CONNECTED\"); return 0; }\n"
    "    printf(\"refused %s\\n\", strerror(errno)); return 1; }\n"
    "  if (!strcmp(v[1], \"unix\")) { int s = socket(AF_UNIX, SOCK_STREAM, 0);\n"
    "    struct sockaddr_un a = {0}; a.sun_family = AF_UNIX;\n"
    "    strncpy(a.sun_path, v[2], sizeof a.sun_path - 1);\n"
    "    if (s >= 0 && connect(s, (void *)&a, sizeof a) == 0) { puts(\"CONNECTED\"); return 0; }\n"
    "    printf(\"refused %s\\n\", strerror(errno)); return 1; }\n"
    "  if (!strcmp(v[1], \"pair\")) { int sv[2];\n"
    "    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) { puts(\"PAIR\"); return 0; } return 1; "
    "}\n"
    "  if (!strcmp(v[1], \"key\")) { char b[256]; long id = atol(v[2]);\n"
    "    long n = syscall(SYS_keyctl, 11 /* KEYCTL_READ */, id, b, sizeof b);\n"
    "    if (n > 0) { printf(\"READ %.*s\\n\", (int)n, b); return 0; }\n"
    "    n = syscall(SYS_keyctl, 10 /* KEYCTL_SEARCH */, -4 /* user keyring */, \"user\",\n"
    "                \"drun-canary\", 0);\n"
    "    if (n > 0) { puts(\"FOUND\"); return 0; }\n"
    "    printf(\"denied %s\\n\", strerror(errno)); return 1; }\n"
    "  if (!strcmp(v[1], \"tiocsti\")) { char ch = 'x'; int fd = open(\"/dev/tty\", O_RDWR);\n"
    "    int r0 = ioctl(0, TIOCSTI, &ch); int r1 = fd >= 0 ? ioctl(fd, TIOCSTI, &ch) : -1;\n"
    "    if (r0 == 0 || r1 == 0) { puts(\"INJECTED\"); return 0; }\n"
    "    puts(\"denied\"); return 1; }\n"
    "  if (!strcmp(v[1], \"userns\")) { if (unshare(CLONE_NEWUSER) == 0) { puts(\"UNSHARED\");\n"
    "      return 0; } printf(\"denied %s\\n\", strerror(errno)); return 1; }\n"
    "  if (!strcmp(v[1], \"mem\")) { size_t n = (size_t)atol(v[2]) << 20; char *p = malloc(n);\n"
    "    if (!p) { fprintf(stderr, \"probe: Cannot allocate memory\\n\"); return 1; }\n"
    "    memset(p, 1, n); puts(\"ALLOCATED\"); return 0; }\n"
    "  return 2; }\n";

/* Compiles the probe into the workspace as ./probe; skips without a compiler. */
static void
build_probe(void)
{
    char src[4096], cmd[8192];
    FILE *f;

    snprintf(src, sizeof(src), "%s/probe.c", test_tmpdir());
    f = fopen(src, "w");
    CHECK(f != NULL);
    fputs(probe_src, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "cc -O1 -o '%s/probe' '%s' 2>&1", ws(), src);
    if (access("/usr/bin/cc", X_OK) != 0) {
        SKIP("no C compiler for the attack probe");
    }
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cannot compile the probe");
}

/* Returns 1 if a host process has `marker` as an argument. */
static int
host_has_process(const char *marker)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int found = 0;

    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL && !found) {
        char path[300], buf[4096];
        ssize_t n;
        int fd;
        if (e->d_name[0] < '0' || e->d_name[0] > '9') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\0') {
                buf[i] = ' ';
            }
        }
        if (n > 0) {
            buf[n] = '\0';
            found = strstr(buf, marker) != NULL;
        }
    }
    closedir(d);
    return found;
}

/* ---- macOS profile builder ------------------------------------------------------- */

TEST(seatbelt_escapes_paths)
{
    struct sandbox_spec s;
    struct buf b;
    struct err err;
    const char *ro[] = {"/opt/a\"b) (allow file-write* (subpath \"/\")) ;x\\"};

    memset(&s, 0, sizeof(s));
    s.workspace_dir = "/Users/me/ws";
    s.ro_paths = ro;
    s.n_ro_paths = 1;
    buf_init(&b, 1 << 16);
    CHECK_OK(sandbox_seatbelt_profile(&s, "/private/tmp/x", &b, &err), &err);
    /* The hostile name is one escaped literal; the write set is unchanged. */
    CHECK(strstr(buf_cstr(&b),
                 "(subpath \"/opt/a\\\"b) (allow file-write* (subpath \\\"/\\\")) ;x\\\\\")") !=
          NULL);
    const char *w = strstr(buf_cstr(&b), "(allow file-write*\n");
    CHECK(w != NULL);
    CHECK(
        strncmp(w,
                "(allow file-write*\n    (subpath \"/Users/me/ws\")\n    (subpath "
                "\"/private/tmp/x\")\n    (literal \"/dev/null\")\n)\n(deny network*)\n",
                strlen("(allow file-write*\n    (subpath \"/Users/me/ws\")\n    (subpath "
                       "\"/private/tmp/x\")\n    (literal \"/dev/null\")\n)\n(deny network*)\n")) ==
        0);
    /* Balanced parentheses outside string literals. */
    int depth = 0, in_str = 0;
    for (const char *p = buf_cstr(&b); *p; p++) {
        if (in_str) {
            if (*p == '\\') {
                p++;
            } else if (*p == '"') {
                in_str = 0;
            }
        } else if (*p == '"') {
            in_str = 1;
        } else if (*p == '(') {
            depth++;
        } else if (*p == ')') {
            CHECK(--depth >= 0);
        }
    }
    CHECK_EQ_INT(depth, 0);
    CHECK_EQ_INT(in_str, 0);
    buf_reset(&b);
    const char *bad[] = {"/tmp/a\nb"};
    s.ro_paths = bad;
    CHECK(sandbox_seatbelt_profile(&s, "/private/tmp/x", &b, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    buf_release(&b);
}

/* ---- spec validation ------------------------------------------------------------- */

TEST(spec_rejects_bad_input)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    struct err err;
    struct sandbox_overlay ov = {"../etc", "/usr", -1};
    const char *env_bad[] = {"PATH=/evil"};

    spec_init(&s, "echo x");
    s.workspace_dir = "relative/ws";
    CHECK(sandbox_run(&s, &r, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    CHECK(strstr(err.msg, "'relative/ws'") != NULL);
    spec_init(&s, "echo x");
    s.overlays = &ov;
    s.n_overlays = 1;
    CHECK(sandbox_run(&s, &r, &err) < 0);
    CHECK(strstr(err.msg, "overlay key '../etc'") != NULL);
    spec_init(&s, "echo x");
    s.env = env_bad;
    s.n_env = 1;
    CHECK(sandbox_run(&s, &r, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    spec_init(&s, "echo x");
    s.command_len = 7; /* includes the NUL */
    CHECK(sandbox_run(&s, &r, &err) < 0);
    CHECK(strstr(err.msg, "NUL") != NULL);
}

/* ---- functional ---------------------------------------------------------------- */

TEST(exit_codes_and_output)
{
    struct sandbox_result r;

    run("echo hi; echo oops >&2; exit 3", &r);
    CHECK_EQ_STR(out_of(&r), "hi\n");
    CHECK_EQ_STR(buf_cstr(&r.err.data), "oops\n");
    CHECK_EQ_INT(r.exit_code, 3);
    CHECK_EQ_INT(r.signal, 0);
    CHECK(r.limit_hit == NULL && !r.timed_out && !r.cancelled);
    CHECK_EQ_INT(r.out.total, 3);
    sandbox_result_release(&r);
    run("kill -9 $$", &r);
    CHECK_EQ_INT(r.exit_code, 137);
    CHECK_EQ_INT(r.signal, 9);
    sandbox_result_release(&r);
    /* sh -c semantics: the status of the last command; a syntax error is status 2. */
    run("false; true", &r);
    CHECK_EQ_INT(r.exit_code, 0);
    sandbox_result_release(&r);
    run("echo (", &r);
    CHECK_EQ_INT(r.exit_code, 2);
    sandbox_result_release(&r);
}

TEST(binary_output_kept_as_bytes)
{
    struct sandbox_result r;

    run("printf 'a\\377\\000\\376b'; printf '\\300\\000' >&2", &r);
    CHECK_EQ_INT(r.out.data.len, 5);
    CHECK(memcmp(r.out.data.data, "a\377\000\376b", 5) == 0);
    CHECK_EQ_INT(r.err.data.len, 2);
    CHECK(memcmp(r.err.data.data, "\300\000", 2) == 0);
    CHECK_EQ_INT(r.out.tail_len, 5);
    sandbox_result_release(&r);
}

TEST(workspace_is_cwd_and_writable)
{
    struct sandbox_result r;
    char p[4200];
    struct stat st;

    run("pwd; echo data > made.txt; mkdir -p d/e && ln -s made.txt link", &r);
    CHECK_EQ_STR(out_of(&r), "/workspace\n");
    CHECK_EQ_INT(r.exit_code, 0);
    snprintf(p, sizeof(p), "%s/made.txt", ws());
    CHECK(stat(p, &st) == 0 && st.st_size == 5);
    snprintf(p, sizeof(p), "%s/link", ws());
    CHECK(lstat(p, &st) == 0 && S_ISLNK(st.st_mode));
    sandbox_result_release(&r);
}

/* workspace_ro (text extraction): the input is readable, nothing in it can be changed. */
TEST(workspace_ro_is_read_only)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    struct err err;
    char p[4200];
    struct stat st;
    FILE *f;

    need_sandbox();
    snprintf(p, sizeof(p), "%s/in.pdf", ws());
    f = fopen(p, "w");
    CHECK(f != NULL);
    fputs("input\n", f);
    fclose(f);
    spec_init(&s, "cat in.pdf; echo x > in.pdf; echo y > new.txt; chmod 777 in.pdf; "
                  "rm -f in.pdf; ls /workspace");
    s.workspace_ro = 1;
    CHECK_OK(sandbox_run(&s, &r, &err), &err);
    CHECK_EQ_STR(out_of(&r), "input\nin.pdf\n");
    CHECK(stat(p, &st) == 0 && st.st_size == 6 && (st.st_mode & 07777) == 0644);
    snprintf(p, sizeof(p), "%s/new.txt", ws());
    CHECK(stat(p, &st) < 0);
    sandbox_result_release(&r);
}

TEST(environment_is_clean)
{
    struct sandbox_result r;
    struct sandbox_spec s;
    const char *env[] = {"PYTHONPATH=/workspace/.packages/pip"};

    setenv("DRUN_CANARY_ENV", "canary-4711", 1);
    spec_init(&s, "env | sort; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo ---; "
                  "cat /proc/$$/environ | tr '\\0' '\\n' | sort");
    s.env = env;
    s.n_env = 1;
    run_spec(&s, &r);
    CHECK_MSG(strstr(out_of(&r), "canary-4711") == NULL, "canary visible: %s", out_of(&r));
    CHECK(strstr(out_of(&r), "PYTHONPATH=/workspace/.packages/pip\n") != NULL);
    CHECK(strstr(out_of(&r), "HOME=/tmp/home\n") != NULL);
    CHECK(strstr(out_of(&r), "TMPDIR=/tmp\n") != NULL);
    CHECK(strstr(out_of(&r), "TERM=dumb\n") != NULL);
    CHECK(strstr(out_of(&r), "LANG=C.UTF-8\n") != NULL);
    /* pid 1 (bwrap's init) has an empty environment. */
    CHECK(strstr(out_of(&r), "---\n---\n") != NULL);
    sandbox_result_release(&r);
}

TEST(no_inherited_fds_and_stdin_is_devnull)
{
    struct sandbox_result r;
    int leak = open("/dev/null", O_RDONLY); /* deliberately without O_CLOEXEC */

    CHECK(dup2(leak, 50) == 50);
    run("ls /proc/self/fd | sort -n | tr '\\n' ' '; echo; readlink /proc/self/fd/0; "
        "cat; echo end",
        &r);
    /* 0-2, and 3 is ls's own directory fd. */
    CHECK_EQ_STR(out_of(&r), "0 1 2 3 \n/dev/null\nend\n");
    sandbox_result_release(&r);
}

/*
 * What the command sees must be a clean slate (nothing ignored, nothing blocked), whatever
 * the daemon ignores or blocks, and whatever the child that execs bwrap blocks while it
 * runs. Each process reads its own mask: the shell with its `read` builtin, then grep
 * exec'd in the shell's place. A forked grep reading the shell's /proc/PID/status would
 * race: dash blocks every signal around each fork and unblocks them in the parent only
 * after the fork returns, so the child can see the shell mid-fork with all of them blocked.
 */
TEST(signals_are_reset_for_the_command)
{
    struct sandbox_result r;
    sigset_t m;

    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
#if defined(__x86_64__) || defined(__aarch64__)
    {
        /* Signal 33, which glibc's sigaction refuses to touch (make ignores it, for one). */
        unsigned long ign[8] = {(unsigned long)SIG_IGN}; /* the kernel's sigaction */
        CHECK(syscall(SYS_rt_sigaction, 33, ign, NULL, (size_t)8) == 0);
    }
#endif
    sigemptyset(&m);
    sigaddset(&m, SIGUSR2);
    sigaddset(&m, SIGINT);
    CHECK(sigprocmask(SIG_BLOCK, &m, NULL) == 0);
    run("while IFS= read -r l; do case $l in SigBlk:* | SigIgn:*) echo \"$l\";; esac; "
        "done </proc/self/status; exec grep -E '^Sig(Blk|Ign)' /proc/self/status",
        &r);
    CHECK_EQ_STR(out_of(&r), "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
                             "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    sandbox_result_release(&r);
}

/* A bwrap that cannot be exec'd: a clear error, the child reaped, and the next run works. */
TEST(exec_failure_is_reported)
{
    struct sandbox_result r;
    struct sandbox_spec s;
    struct err err;
    char dir[4200], path[4300], *old = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    FILE *f;
    int st;

    need_sandbox();
    snprintf(dir, sizeof(dir), "%s/fakebin", test_tmpdir());
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof(path), "%s/bwrap", dir);
    f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("not an executable\n", f); /* no #!: execve fails with ENOEXEC */
    fclose(f);
    CHECK(chmod(path, 0755) == 0);
    setenv("PATH", dir, 1);
    spec_init(&s, "echo hi");
    CHECK(sandbox_run(&s, &r, &err) < 0);
    CHECK_MSG(strstr(err.msg, "cannot start") != NULL && strstr(err.msg, path) != NULL &&
                  strstr(err.msg, "format") != NULL,
              "%s", err.msg);
    CHECK(waitpid(-1, &st, WNOHANG) < 0 && errno == ECHILD);
    if (old != NULL) {
        setenv("PATH", old, 1);
        free(old);
    }
    run("echo hi", &r);
    CHECK_EQ_STR(out_of(&r), "hi\n");
    sandbox_result_release(&r);
}

TEST(long_commands_run)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    struct err err;
    struct buf cmd;
    size_t sizes[] = {200 * 1024, SANDBOX_COMMAND_MAX_DEFAULT};

    for (size_t k = 0; k < 2; k++) {
        buf_init(&cmd, SANDBOX_COMMAND_MAX_DEFAULT + 1);
        buf_puts(&cmd, "x=0\n");
        while (cmd.len < sizes[k] - 64) {
            buf_puts(&cmd, "x=$((x+1)) # padding padding padding padding padding\n");
        }
        buf_printf(&cmd, "echo \"$x\"");
        while (cmd.len < sizes[k]) {
            buf_putc(&cmd, '\n');
        }
        CHECK_EQ_INT(cmd.len, sizes[k]);
        spec_init(&s, buf_cstr(&cmd));
        s.command_len = cmd.len;
        run_spec(&s, &r);
        CHECK_EQ_INT(r.exit_code, 0);
        CHECK(strtol(out_of(&r), NULL, 10) > 1000);
        sandbox_result_release(&r);
        buf_release(&cmd);
    }
    /* One byte past the cap is refused before anything runs. */
    buf_init(&cmd, SANDBOX_COMMAND_MAX_DEFAULT + 1);
    while (cmd.len < SANDBOX_COMMAND_MAX_DEFAULT + 1) {
        buf_putc(&cmd, '\n');
    }
    spec_init(&s, buf_cstr(&cmd));
    s.command_len = cmd.len;
    CHECK(sandbox_run(&s, &r, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    buf_release(&cmd);
}

TEST(output_capped_and_counted)
{
    struct sandbox_spec s;
    struct sandbox_result r;

    spec_init(&s, "head -c 104857600 /dev/zero; echo tail-marker; echo done >&2");
    s.limits.max_output_bytes = 1 << 20;
    run_spec(&s, &r);
    CHECK_EQ_INT(r.exit_code, 0);
    CHECK_EQ_INT(r.out.total, 104857600 + 12);
    CHECK_EQ_INT(r.out.data.len, 1 << 20);
    CHECK(r.out.truncated);
    CHECK(!r.err.truncated);
    CHECK_EQ_STR(r.limit_hit, "output");
    CHECK(r.out.tail_len == SANDBOX_TAIL_BYTES);
    CHECK(memcmp(r.out.tail + SANDBOX_TAIL_BYTES - 12, "tail-marker\n", 12) == 0);
    /* Exactly at the cap is not truncated. */
    sandbox_result_release(&r);
    spec_init(&s, "head -c 1024 /dev/zero");
    s.limits.max_output_bytes = 1024;
    run_spec(&s, &r);
    CHECK_EQ_INT(r.out.data.len, 1024);
    CHECK(!r.out.truncated && r.limit_hit == NULL);
    sandbox_result_release(&r);
}

/*
 * The timeout must fire after the command has started everything (it prints "started"
 * then); on a loaded machine bwrap's set-up alone can outlast a short limit, so a run
 * that timed out before "started" proves nothing and runs again with twice the limit
 * (0.7 s up to ~90 s). Every run must still time out and leave nothing behind.
 */
TEST(timeout_kills_everything)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    int started = 0;

    for (int64_t limit = 700; !started && limit <= 90000; limit *= 2) {
        spec_init(&s, "sleep 987651 & setsid sh -c 'sleep 987652 &' ; "
                      "sh -c 'trap \"\" TERM; sleep 987653' & echo started; sleep 987654");
        s.limits.timeout_ms = limit;
        run_spec(&s, &r);
        CHECK(r.timed_out);
        CHECK_EQ_STR(r.limit_hit, "timeout");
        started = strcmp(out_of(&r), "started\n") == 0;
        CHECK_MSG(started || out_of(&r)[0] == '\0', "output: '%s'", out_of(&r));
        for (int m = 987651; m <= 987654; m++) {
            char mark[32];
            snprintf(mark, sizeof(mark), "sleep %d", m);
            CHECK_MSG(!host_has_process(mark), "'%s' survived", mark);
        }
        sandbox_result_release(&r);
    }
    CHECK_MSG(started, "the command never printed 'started' before its timeout");
}

TEST(nothing_survives_a_normal_exit)
{
    struct sandbox_result r;

    run("sleep 987661 & setsid sh -c 'sleep 987662 & :' ; "
        "(trap '' TERM HUP; exec sleep 987663) & echo ok",
        &r);
    CHECK_EQ_INT(r.exit_code, 0);
    CHECK(!r.timed_out);
    for (int m = 987661; m <= 987663; m++) {
        char mark[32];
        snprintf(mark, sizeof(mark), "sleep %d", m);
        CHECK_MSG(!host_has_process(mark), "'%s' survived", mark);
    }
    sandbox_result_release(&r);
}

struct cancel_state {
    struct sandbox *sb;
    struct sandbox_result res;
    int exits;
};

static void
cancel_on_output(void *ud, enum sandbox_stream stream, const char *b, size_t n)
{
    struct cancel_state *cs = ud;
    (void)stream;
    if (memchr(b, '\n', n) != NULL) {
        sandbox_cancel(cs->sb);
        sandbox_cancel(cs->sb); /* twice is harmless */
    }
}

static void
cancel_on_exit(void *ud, struct sandbox_result *r)
{
    struct cancel_state *cs = ud;
    cs->res = *r;
    cs->exits++;
}

TEST(cancel_kills_and_reports)
{
    struct sandbox_spec s;
    struct cancel_state cs;
    struct sandbox_callbacks cb = {.on_output = cancel_on_output, .on_exit = cancel_on_exit};
    uv_loop_t loop;
    struct err err;

    need_sandbox();
    memset(&cs, 0, sizeof(cs));
    cb.ud = &cs;
    spec_init(&s, "sleep 987671 & echo started; sleep 987672");
    uv_loop_init(&loop);
    CHECK_OK(sandbox_start(&loop, &s, &cb, &cs.sb, &err), &err);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(cs.exits, 1);
    CHECK(cs.res.cancelled);
    CHECK(!cs.res.timed_out);
    CHECK(!host_has_process("sleep 987671") && !host_has_process("sleep 987672"));
    CHECK_EQ_INT(uv_loop_close(&loop), 0); /* every handle closed and freed */
    sandbox_result_release(&cs.res);
}

TEST(tmp_and_shm_are_capped)
{
    struct sandbox_spec s;
    struct sandbox_result r;

    spec_init(&s, "head -c 1048576 /dev/zero > /tmp/a && echo tmp-at-cap-ok; "
                  "head -c 3000000 /dev/zero > /tmp/b || echo tmp-full; "
                  "head -c 3000000 /dev/zero > /dev/shm/b || echo shm-full");
    s.limits.tmp_size_bytes = 2 << 20;
    run_spec(&s, &r);
    CHECK_MSG(strstr(out_of(&r), "tmp-at-cap-ok\ntmp-full\nshm-full\n") != NULL, "%s", out_of(&r));
    CHECK(strstr(buf_cstr(&r.err.data), "No space left on device") != NULL);
    sandbox_result_release(&r);
}

TEST(writes_outside_workspace_fail)
{
    struct sandbox_result r;
    char cmd[8192], host[4200];
    struct stat st;

    snprintf(cmd, sizeof(cmd),
             "for p in /usr/drun-x /etc/drun-x /drun-x /dev/drun-x /opt/drun-x /proc/drun-x "
             "'%s/drun-x' /tmp/home/ok; do touch \"$p\" 2>/dev/null && echo \"wrote $p\"; done; "
             "true",
             test_tmpdir());
    run(cmd, &r);
    /* Only the sandbox's own /tmp/home is writable; the test dir's host path is not there. */
    CHECK_EQ_STR(out_of(&r), "wrote /tmp/home/ok\n");
    snprintf(host, sizeof(host), "%s/drun-x", test_tmpdir());
    CHECK(stat(host, &st) < 0);
    CHECK(stat("/usr/drun-x", &st) < 0 && stat("/etc/drun-x", &st) < 0);
    sandbox_result_release(&r);
}

TEST(home_files_are_invisible)
{
    struct sandbox_result r;
    const char *home = getenv("HOME");
    char planted[4200], cmd[8400];
    FILE *f;

    if (home == NULL || access(home, W_OK) != 0) {
        home = test_tmpdir(); /* the host's /tmp tree is as private */
    }
    snprintf(planted, sizeof(planted), "%s/.drun-canary-secret-%d", home, (int)getpid());
    f = fopen(planted, "w");
    CHECK(f != NULL);
    fputs("secret", f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "cat '%s' || echo not-found; ls /root /home 2>&1 | head -5",
             planted);
    run(cmd, &r);
    unlink(planted);
    CHECK(strstr(out_of(&r), "secret") == NULL);
    CHECK(strncmp(out_of(&r), "not-found\n", 10) == 0);
    sandbox_result_release(&r);
}

TEST(network_is_unreachable)
{
    struct sandbox_result r;
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    char cmd[256];
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    need_sandbox();
    build_probe();
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
    snprintf(cmd, sizeof(cmd), "./probe tcp %d; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
             ntohs(a.sin_port));
    run(cmd, &r);
    CHECK_MSG(strstr(out_of(&r), "CONNECTED") == NULL, "%s", out_of(&r));
    CHECK(strstr(out_of(&r), "refused") != NULL);
    /* The only interface is lo. */
    CHECK(strstr(out_of(&r), "\nlo\n") != NULL);
    const char *ifs = strstr(out_of(&r), "\nlo\n");
    CHECK(ifs[4] == '\0');
    close(lfd);
    sandbox_result_release(&r);
}

TEST(keyring_canary_unreadable)
{
    struct sandbox_result r;
    char cmd[256], b[64];
    long id;

    need_sandbox();
    build_probe();
    id = syscall(SYS_add_key, "user", "drun-canary", "key-secret-4711", 15, KEY_SPEC_USER_KEYRING);
    if (id < 0) {
        SKIP("cannot add a key to the user keyring here: %s", strerror(errno));
    }
    /* The canary is readable outside, so the check below means something. */
    CHECK(syscall(SYS_keyctl, KEYCTL_READ, id, b, sizeof(b)) == 15);
    snprintf(cmd, sizeof(cmd), "./probe key %ld", id);
    run(cmd, &r);
    syscall(SYS_keyctl, KEYCTL_UNLINK, id, KEY_SPEC_USER_KEYRING);
    CHECK_MSG(strstr(out_of(&r), "key-secret") == NULL && strstr(out_of(&r), "FOUND") == NULL, "%s",
              out_of(&r));
    CHECK(strstr(out_of(&r), "denied") != NULL);
    sandbox_result_release(&r);
}

TEST(unix_socket_canary_unreachable)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    struct sockaddr_un a;
    char dir[4200], cmd[8600];
    const char *ro[1];
    int lfd, cfd;

    need_sandbox();
    build_probe();
    snprintf(dir, sizeof(dir), "%s/sock", test_tmpdir());
    mkdir(dir, 0755);
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s/s", dir);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0);
    chmod(a.sun_path, 0777);
    /* Reachable from outside, so the check below means something. */
    cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(connect(cfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    close(cfd);
    ro[0] = dir;
    snprintf(cmd, sizeof(cmd), "test -S '%s' && echo visible; ./probe unix '%s'; ./probe pair",
             a.sun_path, a.sun_path);
    spec_init(&s, cmd);
    s.ro_paths = ro;
    s.n_ro_paths = 1;
    run_spec(&s, &r);
    CHECK_MSG(strstr(out_of(&r), "visible\n") != NULL, "%s", out_of(&r));
    CHECK_MSG(strstr(out_of(&r), "CONNECTED") == NULL, "%s", out_of(&r));
    CHECK(strstr(out_of(&r), "PAIR") != NULL); /* socketpair still works */
    close(lfd);
    sandbox_result_release(&r);
}

TEST(tiocsti_and_userns_refused)
{
    struct sandbox_result r;

    need_sandbox();
    build_probe();
    run("./probe tiocsti; ./probe userns", &r);
    CHECK_MSG(strstr(out_of(&r), "INJECTED") == NULL, "%s", out_of(&r));
    CHECK(strstr(out_of(&r), "UNSHARED") == NULL);
    CHECK(strstr(out_of(&r), "denied") != NULL);
    sandbox_result_release(&r);
}

TEST(no_capabilities)
{
    struct sandbox_result r;

    run("grep -E '^Cap(Eff|Prm|Amb)' /proc/self/status", &r);
    CHECK_EQ_STR(out_of(&r), "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
                             "CapAmb:\t0000000000000000\n");
    sandbox_result_release(&r);
}

TEST(own_pid_namespace)
{
    struct sandbox_result r;

    run("ls /proc | grep -c '^[0-9]'", &r);
    /* bwrap's init, the shell, ls, grep: a handful, never the host's list. */
    CHECK(strtol(out_of(&r), NULL, 10) <= 6);
    sandbox_result_release(&r);
}

TEST(overlays_are_read_only)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    struct sandbox_overlay ov;
    char host[4200], f[4300];
    FILE *fp;

    snprintf(host, sizeof(host), "%s/host-nm", test_tmpdir());
    mkdir(host, 0755);
    snprintf(f, sizeof(f), "%s/pkg.js", host);
    fp = fopen(f, "w");
    fputs("module", fp);
    fclose(fp);
    ov.key = "app/node_modules";
    ov.host_dir = host;
    ov.dir_fd = -1;
    spec_init(&s, "cat app/node_modules/pkg.js; echo; touch app/node_modules/new 2>/dev/null "
                  "&& echo WROTE; rm app/node_modules/pkg.js 2>/dev/null && echo REMOVED; true");
    s.overlays = &ov;
    s.n_overlays = 1;
    run_spec(&s, &r);
    CHECK_EQ_STR(out_of(&r), "module\n");
    CHECK(access(f, F_OK) == 0);
    sandbox_result_release(&r);
}

/*
 * An overlay bound through the fd host/ opened: the path is swapped for a link to /etc
 * after the open, and the sandbox still sees the directory that was opened.
 */
TEST(overlay_bound_by_fd_not_by_path)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    struct sandbox_overlay ov;
    char host[4200], moved[4200], f[4300];
    FILE *fp;
    int fd;

    snprintf(host, sizeof(host), "%s/fd-nm", test_tmpdir());
    snprintf(moved, sizeof(moved), "%s/fd-nm-moved", test_tmpdir());
    mkdir(host, 0755);
    snprintf(f, sizeof(f), "%s/pkg.js", host);
    fp = fopen(f, "w");
    fputs("opened", fp);
    fclose(fp);
    fd = open(host, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(rename(host, moved) == 0);
    CHECK(symlink("/etc", host) == 0);
    ov.key = "node_modules";
    ov.host_dir = host;
    ov.dir_fd = fd;
    spec_init(&s, "cat node_modules/pkg.js; echo; test -e node_modules/passwd && echo ETC; true");
    s.overlays = &ov;
    s.n_overlays = 1;
    run_spec(&s, &r);
    CHECK_EQ_STR(out_of(&r), "opened\n");
    sandbox_result_release(&r);
    close(fd);
}

TEST(file_size_limit)
{
    struct sandbox_spec s;
    struct sandbox_result r;

    spec_init(&s, "head -c 1048576 /dev/zero > at-cap && echo at-cap-ok; "
                  "head -c 1048577 /dev/zero > past-cap");
    s.limits.file_size_bytes = 1 << 20;
    run_spec(&s, &r);
    CHECK_EQ_STR(out_of(&r), "at-cap-ok\n");
    CHECK_EQ_STR(r.limit_hit, "file_size");
    CHECK_EQ_INT(r.signal, SIGXFSZ);
    sandbox_result_release(&r);
}

TEST(cpu_limit)
{
    struct sandbox_spec s;
    struct sandbox_result r;

    spec_init(&s, "while :; do :; done");
    s.limits.cpu_secs = 1;
    run_spec(&s, &r);
    CHECK_EQ_STR(r.limit_hit, "cpu");
    CHECK(!r.timed_out);
    sandbox_result_release(&r);
}

TEST(memory_limit)
{
    struct sandbox_spec s;
    struct sandbox_result r;

    need_sandbox();
    build_probe();
    spec_init(&s, "./probe mem 16 && ./probe mem 512");
    s.limits.memory_bytes = 128 << 20;
    run_spec(&s, &r);
    CHECK_EQ_STR(out_of(&r), "ALLOCATED\n");
    CHECK_EQ_INT(r.exit_code, 1);
    CHECK_EQ_STR(r.limit_hit, "memory");
    sandbox_result_release(&r);
}

TEST(process_limit_and_fork_bomb)
{
    struct sandbox_spec s;
    struct sandbox_result r;
    pid_t pid;
    int st;

    /* At the edge: 20 background sleeps fit under 32; 60 do not. */
    spec_init(&s, "i=0; while [ $i -lt 20 ]; do sleep 987681 & i=$((i+1)); done; echo fit");
    s.limits.nproc = 32;
    run_spec(&s, &r);
    CHECK_EQ_STR(out_of(&r), "fit\n");
    sandbox_result_release(&r);
    spec_init(&s, "i=0; while [ $i -lt 60 ]; do sleep 987682 & i=$((i+1)); done; echo fit");
    s.limits.nproc = 32;
    run_spec(&s, &r);
    CHECK(strstr(out_of(&r), "fit") == NULL);
    CHECK_EQ_STR(r.limit_hit, "processes");
    sandbox_result_release(&r);
    /* A real fork bomb, then another sandbox still runs and the host can still fork. */
    spec_init(&s, "b() { b | b & }; b; wait");
    s.limits.nproc = 64;
    s.limits.timeout_ms = 2000;
    run_spec(&s, &r);
    /* Under load the bomb can also burn out on its own before either limit is seen
     * (every fork past the cap fails and the shells exit); what must hold is that it
     * was contained, which the next two checks show. */
    CHECK_MSG(r.limit_hit == NULL || !strcmp(r.limit_hit, "processes") ||
                  !strcmp(r.limit_hit, "timeout"),
              "limit_hit %s", r.limit_hit);
    sandbox_result_release(&r);
    run("echo ok", &r);
    CHECK_EQ_STR(out_of(&r), "ok\n");
    sandbox_result_release(&r);
    pid = fork();
    if (pid == 0) {
        _exit(0);
    }
    CHECK(pid > 0);
    waitpid(pid, &st, 0);
    CHECK(!host_has_process("sleep 98768"));
}

TEST(probe_reports)
{
    struct sandbox_probe p;
    struct err err;

    need_sandbox();
    CHECK_OK(sandbox_probe(&p, &err), &err);
    CHECK(p.bwrap_found && p.userns_ok && p.sandbox_ok);
    CHECK(strncmp(p.bwrap_version, "bubblewrap ", 11) == 0);
    CHECK_EQ_STR(p.fix, "");
}

/* ---- prepared (warm) sandboxes ---------------------------------------------------- */

struct warm_state {
    struct sandbox_result res;
    int exits;
};

static void
warm_on_exit(void *ud, struct sandbox_result *r)
{
    struct warm_state *w = ud;
    w->res = *r;
    w->exits++;
}

TEST(prepared_runs_warm_and_goes_stale)
{
    struct sandbox_spec s, s2;
    struct sandbox_prep *p = NULL;
    struct sandbox *sb = NULL;
    struct warm_state st;
    struct sandbox_callbacks cb = {.on_exit = warm_on_exit};
    const char *ro[1] = {"/opt"};
    char moved[4200];
    uv_loop_t loop;
    struct err err;

    need_sandbox();
    memset(&st, 0, sizeof(st));
    cb.ud = &st;
    uv_loop_init(&loop);
    spec_init(&s, "echo warm; exit 4");
    CHECK_OK(sandbox_prepare(&loop, &s, &p, &err), &err);
    CHECK(sandbox_prepared_valid(p, &s));
    /* Every input of the sandbox counts: limits, read-only paths, network, the workspace. */
    s2 = s;
    s2.limits.nproc = 99;
    CHECK(!sandbox_prepared_valid(p, &s2));
    s2 = s;
    s2.limits.memory_bytes = (uint64_t)1 << 30;
    CHECK(!sandbox_prepared_valid(p, &s2));
    s2 = s;
    s2.ro_paths = ro;
    s2.n_ro_paths = 1;
    CHECK(!sandbox_prepared_valid(p, &s2));
    s2 = s;
    s2.network = 1;
    CHECK(!sandbox_prepared_valid(p, &s2));
    CHECK_EQ_INT(sandbox_start_prepared(p, &s2, &cb, &sb, &err), -1);
    CHECK_EQ_INT(err.code, ERR_BUSY);
    /* The same path with a new directory behind it is stale too. */
    snprintf(moved, sizeof(moved), "%s.old", ws());
    CHECK(rename(ws(), moved) == 0);
    ws(); /* makes a new, empty directory at the old path */
    CHECK(!sandbox_prepared_valid(p, &s));
    CHECK(rmdir(ws()) == 0 && rename(moved, ws()) == 0);
    /* (The rename may also have raced bwrap's own set-up: start again from a fresh one.) */
    sandbox_prepared_free(p);
    CHECK_OK(sandbox_prepare(&loop, &s, &p, &err), &err);
    CHECK(sandbox_prepared_valid(p, &s));
    CHECK_OK(sandbox_start_prepared(p, &s, &cb, &sb, &err), &err);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(st.exits, 1);
    CHECK(st.res.warm);
    CHECK_EQ_INT(st.res.exit_code, 4);
    CHECK_EQ_STR(out_of(&st.res), "warm\n");
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    sandbox_result_release(&st.res);
}

/* The parent pid of pid from /proc, or -1. */
static long
ppid_of(const char *pid)
{
    char path[300], buf[512];
    FILE *f;
    long ppid = -1;
    char *cp;

    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    if (fgets(buf, sizeof(buf), f) != NULL && (cp = strrchr(buf, ')')) != NULL) {
        ppid = strtol(cp + 4, NULL, 10);
    }
    fclose(f);
    return ppid;
}

/* The children and grandchildren of root (a prepared sandbox: bwrap and its pid 1). */
static int
descendants(pid_t root, pid_t *out, int max)
{
    int n = 0;

    for (int depth = 0; depth < 2; depth++) {
        int end = n;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL && n < max) {
            long pp = ppid_of(e->d_name);
            int hit = depth == 0 && pp == root;
            for (int i = 0; depth == 1 && i < end; i++) {
                hit |= pp == out[i];
            }
            if (hit && pp > 0) {
                out[n++] = (pid_t)strtol(e->d_name, NULL, 10);
            }
        }
        if (d != NULL) {
            closedir(d);
        }
    }
    return n;
}

static int
pid_alive(pid_t pid)
{
    char path[64], buf[512];
    FILE *f;
    int alive = 0;
    char *cp;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f != NULL) {
        alive =
            fgets(buf, sizeof(buf), f) != NULL && (cp = strrchr(buf, ')')) != NULL && cp[2] != 'Z';
        fclose(f);
    }
    return alive;
}

/* Waits (bounded, 120 s) for every pid to be gone; returns how many are left. */
static int
wait_gone(const pid_t *pids, int n)
{
    int left = n;

    for (int tries = 0; tries < 12000 && left > 0; tries++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        left = 0;
        for (int i = 0; i < n; i++) {
            left += pid_alive(pids[i]);
        }
        if (left > 0) {
            nanosleep(&ts, NULL);
        }
    }
    return left;
}

TEST(prepared_freed_leaves_nothing)
{
    struct sandbox_spec s;
    struct sandbox_prep *p = NULL;
    pid_t pids[16];
    uv_loop_t loop;
    struct err err;
    int n;

    need_sandbox();
    uv_loop_init(&loop);
    spec_init(&s, "");
    CHECK_OK(sandbox_prepare(&loop, &s, &p, &err), &err);
    n = descendants(getpid(), pids, 16);
    CHECK(n >= 1);
    sandbox_prepared_free(p);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(wait_gone(pids, n), 0);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

/* 1 if pid is the pid 1 of its own pid namespace with its uid map written: its bwrap is
 * past the set-up window in which a SIGKILL of the daemon can strand it. */
static int
is_ready_pid1(pid_t pid)
{
    char path[64], line[256];
    int ns1 = 0, mapped = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "NSpid:", 6) == 0) {
            char *last = strrchr(line, '\t');
            ns1 = last != NULL && last != strchr(line, '\t') && strtol(last + 1, NULL, 10) == 1;
        }
    }
    fclose(f);
    snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
    f = fopen(path, "r");
    if (f != NULL) {
        mapped = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
    }
    return ns1 && mapped;
}

TEST(prepared_dies_with_a_killed_daemon)
{
    int fds[2];
    pid_t child, pids[16];
    int n, st;
    char c;

    need_sandbox();
    CHECK(pipe(fds) == 0);
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        struct sandbox_spec s;
        struct sandbox_prep *p[3];
        uv_loop_t loop;
        struct err err;
        uv_loop_init(&loop);
        spec_init(&s, "");
        for (int i = 0; i < 3; i++) {
            if (sandbox_prepare(&loop, &s, &p[i], &err) < 0) {
                _exit(1);
            }
        }
        if (write(fds[1], "r", 1) != 1) {
            _exit(1);
        }
        for (;;) {
            pause();
        }
    }
    close(fds[1]);
    CHECK(read(fds[0], &c, 1) == 1);
    close(fds[0]);
    /*
     * Wait (bounded) until each bwrap has its pid 1: a SIGKILL in the first milliseconds
     * of bwrap's own set-up is a window of bwrap's (see docs/security.md), not ours.
     */
    for (int tries = 0; tries < 24000; tries++) { /* bounded: 120 s */
        struct timespec ts = {0, 5 * 1000 * 1000};
        int ready = 0;
        n = descendants(child, pids, 16);
        for (int i = 0; i < n; i++) {
            ready += is_ready_pid1(pids[i]);
        }
        if (n >= 6 && ready >= 3) {
            break;
        }
        nanosleep(&ts, NULL);
    }
    CHECK(n >= 6);
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
    CHECK_EQ_INT(wait_gone(pids, n), 0);
}

TEST(prepared_runs_a_1mib_command)
{
    struct sandbox_spec s;
    struct sandbox_prep *p = NULL;
    struct sandbox *sb = NULL;
    struct warm_state st;
    struct sandbox_callbacks cb = {.on_exit = warm_on_exit};
    size_t len = SANDBOX_COMMAND_MAX_DEFAULT;
    const char *tail = "\necho done";
    char *cmd = malloc(len + 2);
    uv_loop_t loop;
    struct err err;

    need_sandbox();
    CHECK(cmd != NULL);
    memset(cmd, 'x', len + 1);
    cmd[0] = '#';
    memcpy(cmd + len - strlen(tail), tail, strlen(tail));
    cmd[len] = '\0';
    memset(&st, 0, sizeof(st));
    cb.ud = &st;
    uv_loop_init(&loop);
    spec_init(&s, cmd);
    CHECK_OK(sandbox_prepare(&loop, &s, &p, &err), &err);
    /* One byte past the cap is refused and the prepared sandbox is left as it was. */
    s.command_len = len + 1;
    CHECK_EQ_INT(sandbox_start_prepared(p, &s, &cb, &sb, &err), -1);
    CHECK_EQ_INT(err.code, ERR_TOOBIG);
    s.command_len = len;
    CHECK_OK(sandbox_start_prepared(p, &s, &cb, &sb, &err), &err);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(st.res.warm);
    CHECK_EQ_INT(st.res.exit_code, 0);
    CHECK_EQ_STR(out_of(&st.res), "done\n");
    sandbox_result_release(&st.res);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    free(cmd);
}

TESTS(seatbelt_escapes_paths, spec_rejects_bad_input, exit_codes_and_output,
      binary_output_kept_as_bytes, workspace_is_cwd_and_writable, environment_is_clean,
      no_inherited_fds_and_stdin_is_devnull, signals_are_reset_for_the_command,
      exec_failure_is_reported, long_commands_run, output_capped_and_counted,
      timeout_kills_everything, nothing_survives_a_normal_exit, cancel_kills_and_reports,
      tmp_and_shm_are_capped, writes_outside_workspace_fail, home_files_are_invisible,
      network_is_unreachable, keyring_canary_unreadable, unix_socket_canary_unreachable,
      tiocsti_and_userns_refused, no_capabilities, own_pid_namespace, overlays_are_read_only,
      overlay_bound_by_fd_not_by_path, file_size_limit, cpu_limit, memory_limit,
      process_limit_and_fork_bomb, probe_reports, prepared_runs_warm_and_goes_stale,
      prepared_freed_leaves_nothing, prepared_dies_with_a_killed_daemon,
      prepared_runs_a_1mib_command, workspace_ro_is_read_only)
