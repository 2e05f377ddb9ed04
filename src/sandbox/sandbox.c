/*
 * sandbox.c - the parts of the sandbox module every backend shares: the synchronous
 * wrapper, result lifecycle and the host probe for `drun-mcp doctor`.
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/mem.h"

void
sandbox_result_release(struct sandbox_result *res)
{
    if (res == NULL) {
        return;
    }
    buf_release(&res->out.data);
    buf_release(&res->err.data);
    memset(res, 0, sizeof(*res));
}

struct run_state {
    struct sandbox_result *res;
    int done;
};

static void
run_on_exit(void *ud, struct sandbox_result *r)
{
    struct run_state *rs = ud;

    *rs->res = *r; /* the result moves to our caller */
    memset(r, 0, sizeof(*r));
    rs->done = 1;
}

int
sandbox_run(const struct sandbox_spec *spec, struct sandbox_result *res, struct err *err)
{
    uv_loop_t loop;
    struct sandbox *sb = NULL;
    struct sandbox_callbacks cb = {.on_exit = run_on_exit};
    struct run_state rs = {res, 0};
    int rc;

    memset(res, 0, sizeof(*res));
    if (uv_loop_init(&loop) != 0) {
        return err_set(err, ERR_IO, "cannot create an event loop for the sandbox");
    }
    cb.ud = &rs;
    rc = sandbox_start(&loop, spec, &cb, &sb, err);
    if (rc == 0) {
        uv_run(&loop, UV_RUN_DEFAULT);
        if (!rs.done) {
            rc = err_set(err, ERR_INTERNAL, "the sandbox loop ended without a result");
        } else if (res->failed) {
            *err = res->error;
            rc = -1;
        }
    }
    uv_loop_close(&loop);
    return rc;
}

/*
 * Runs argv (absolute program) with stdout captured into out; returns the exit status.
 * A root caller runs it as uid/gid (the sandbox user), as the sandbox would run bwrap.
 */
static int
capture_cmd_as(char *const argv[], uint32_t uid, uint32_t gid, char *out, size_t size)
{
    int fds[2], st = 0;
    size_t len = 0;
    pid_t pid;

    out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) < 0) {
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        static char *const no_env[] = {NULL};
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 ||
                               setresuid(uid, uid, uid) != 0)) {
            _exit(126);
        }
        execve(argv[0], argv, no_env);
        _exit(127);
    }
    close(fds[1]);
    for (;;) {
        ssize_t n = read(fds[0], out + len, size - 1 - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        len += (size_t)n;
        if (len == size - 1) {
            char sink[256];
            while (read(fds[0], sink, sizeof(sink)) > 0) {
            }
            break;
        }
    }
    out[len] = '\0';
    close(fds[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int
capture_cmd(char *const argv[], char *out, size_t size)
{
    return capture_cmd_as(argv, (uint32_t)geteuid(), (uint32_t)getegid(), out, size);
}

static int
read_int_file(const char *path)
{
    FILE *f = fopen(path, "re");
    char line[32];
    int v = -1;

    if (f == NULL) {
        return -1;
    }
    if (fgets(line, sizeof(line), f) != NULL) {
        v = (int)strtol(line, NULL, 10);
    }
    fclose(f);
    return v;
}

static int
probe_fail(struct sandbox_probe *p, struct err *err, int code, const char *msg, const char *fix)
{
    snprintf(p->fix, sizeof(p->fix), "%s", fix);
    return err_set(err, code, "%s; %s", msg, fix);
}

int
sandbox_probe(struct sandbox_probe *p, struct err *err)
{
    return sandbox_probe_as(0, 0, p, err);
}

int
sandbox_probe_as(uint32_t want_uid, uint32_t want_gid, struct sandbox_probe *p, struct err *err)
{
    char out[4096], tmpl[] = "/tmp/drun-probe-XXXXXX";
    struct sandbox_spec spec;
    struct sandbox_result res;
    struct err e2;
    uint32_t uid, gid;
    int rc;

    memset(p, 0, sizeof(*p));
    memset(&spec, 0, sizeof(spec));
    spec.uid = want_uid;
    spec.gid = want_gid;
    sandbox_user(&spec, &uid, &gid);
    p->run_uid = uid;
    p->userns_clone = read_int_file("/proc/sys/kernel/unprivileged_userns_clone");
    p->apparmor_restrict = read_int_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    p->pids_cgroup = -1;
    {
        const char *cands[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
        for (size_t i = 0; i < 3 && !p->bwrap_found; i++) {
            if (access(cands[i], X_OK) == 0) {
                snprintf(p->bwrap_path, sizeof(p->bwrap_path), "%s", cands[i]);
                p->bwrap_found = 1;
            }
        }
    }
    if (!p->bwrap_found) {
        return probe_fail(p, err, ERR_NOTFOUND, "bwrap (bubblewrap) is not installed",
                          "install it: 'sudo apt-get install bubblewrap' (Debian/Ubuntu) or "
                          "'sudo dnf install bubblewrap' (Fedora)");
    }
    {
        char *argv[] = {p->bwrap_path, (char *)"--version", NULL};
        if (capture_cmd(argv, out, sizeof(out)) == 0) {
            char *nl = strchr(out, '\n');
            if (nl) {
                *nl = '\0';
            }
            snprintf(p->bwrap_version, sizeof(p->bwrap_version), "%s", out);
        }
    }
    {
        char *argv[] = {p->bwrap_path,
                        (char *)"--unshare-user",
                        (char *)"--ro-bind",
                        (char *)"/",
                        (char *)"/",
                        (char *)"/bin/true",
                        NULL};
        /* As the user bwrap runs as: a root daemon's bwrap is not root either. */
        rc = capture_cmd_as(argv, uid, gid, out, sizeof(out));
        p->userns_ok = rc == 0;
    }
    if (!p->userns_ok) {
        if (p->apparmor_restrict == 1) {
            return probe_fail(p, err, ERR_DENIED, "AppArmor forbids unprivileged user namespaces",
                              "allow them: 'sudo sysctl -w "
                              "kernel.apparmor_restrict_unprivileged_userns=0' (persist it in "
                              "/etc/sysctl.d/), or install an AppArmor profile for bwrap");
        }
        if (read_int_file("/proc/sys/user/max_user_namespaces") == 0) {
            return probe_fail(p, err, ERR_DENIED, "user namespaces are disabled",
                              "enable them: 'sudo sysctl -w user.max_user_namespaces=15000'");
        }
        if (p->userns_clone == 0) {
            return probe_fail(p, err, ERR_DENIED,
                              "unprivileged user namespaces are disabled (Debian's bwrap is "
                              "not setuid, and a root daemon starts it as the sandbox user)",
                              "enable them: 'sudo sysctl -w kernel.unprivileged_userns_clone=1' "
                              "(persist it in /etc/sysctl.d/)");
        }
        return probe_fail(p, err, ERR_DENIED, "bwrap cannot create a user namespace here",
                          "in a container, run it with user namespaces allowed (e.g. docker "
                          "--security-opt seccomp=unconfined --security-opt apparmor=unconfined)");
    }
    if (mkdtemp(tmpl) == NULL) {
        return probe_fail(p, err, ERR_IO, "cannot make a temporary directory",
                          "make sure $TMPDIR or /tmp is writable");
    }
    if (geteuid() == 0 && chown(tmpl, uid, gid) != 0) {
        rmdir(tmpl);
        return probe_fail(p, err, ERR_IO, "cannot give the probe's directory to the sandbox user",
                          "make sure $TMPDIR or /tmp is a normal local directory");
    }
    spec.workspace_dir = tmpl;
    spec.command = "echo drun-sandbox-ok";
    spec.command_len = strlen(spec.command);
    spec.limits.timeout_ms = 10000;
    rc = sandbox_run(&spec, &res, &e2);
    p->sandbox_ok =
        rc == 0 && res.exit_code == 0 && strcmp(buf_cstr(&res.out.data), "drun-sandbox-ok\n") == 0;
    if (rc == 0 && !p->sandbox_ok) {
        snprintf(e2.msg, sizeof(e2.msg), "exit %d, stderr '%.*s'", res.exit_code,
                 (int)(res.err.tail_len > 120 ? 120 : res.err.tail_len), res.err.tail);
    }
    sandbox_result_release(&res);
    rmdir(tmpl);
    if (!p->sandbox_ok) {
        char msg[400];
        snprintf(msg, sizeof(msg), "a test command did not run in the sandbox (%s)", e2.msg);
        return probe_fail(p, err, ERR_IO, msg,
                          "check that bwrap works: 'bwrap --unshare-all --ro-bind / / true'");
    }
    return 0;
}
