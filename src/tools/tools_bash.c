/*
 * tools_bash.c - session_bash: run one shell command in the session's workspace, inside
 * the sandbox, and checkpoint what it left (reference sections 3.1 and 4.2).
 *
 * The call is asynchronous: the handler checks the policy, marks the session busy,
 * syncs the workspace directory to the head and starts the sandbox, then returns; the
 * loop keeps serving other requests (other sessions are not blocked, this one answers
 * session_busy). Output arrives through on_output, which feeds throttled progress
 * notifications; the end arrives through on_exit, which either rescans the directory
 * and commits one checkpoint (with the audit row in the same transaction), or - after a
 * timeout, a cancel or a sandbox failure - puts the directory back to the head with a
 * full re-sync and fails the call, so a killed command's partial writes never reach a
 * later checkpoint (reference section 14 item 4).
 *
 * The sandbox never falls back to running a command unsandboxed: when it cannot start,
 * the call fails with the fix `drun-mcp doctor` would print.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host.h"
#include "policy/policy.h"
#include "sandbox/sandbox.h"
#include "session/session_exec.h"
#include "store/store.h"
#include "tools/tools_bash.h"
#include "tools/tools_sess.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"

#define PROGRESS_EVERY_MS 100  /* at most ~10 notifications a second */
#define HEARTBEAT_MS      2000 /* a silent command still reports this often */
#define PROGRESS_LINE_MAX 240  /* bytes of the latest line sent as the progress message */
#define SUMMARY_CMD_MAX   120

/* The latest output line of one stream, for progress messages. */
struct line_track {
    char cur[PROGRESS_LINE_MAX]; /* the line being written (cut at the cap) */
    size_t cur_len;
    char last[PROGRESS_LINE_MAX]; /* the last complete non-empty line */
    size_t last_len;
    int64_t last_seq; /* when `last` was completed (bytes seen), to pick the newest */
};

struct bash_run {
    struct tool_call *call;
    struct session *s;
    struct sandbox *sb;                 /* NULL once on_exit came */
    struct session_mounts *mounts;      /* mount points bwrap creates for this call */
    struct session_mounts *prep_mounts; /* those a prepared sandbox created (warm or not) */
    const char *command;                /* borrowed from the call's arguments, valid until done */
    const char *description;
    int64_t timeout_ms;
    uint64_t seen; /* bytes of output seen; the progress value */
    int64_t last_progress_ms;
    int64_t last_output_ms;
    int sent_seen; /* seen value of the last notification */
    struct line_track lines[2];
    struct policy *policy; /* the call's policy (a reference), for the next prepared sandbox */
    /* Where the time goes (logged at debug level; tools/bench/bash_bench reads it). */
    int64_t t0_us, t_sync_us, t_ready_us, t_exit_us;
    struct sandbox_result res; /* moved out of the sandbox at exit, while committing */
    int has_res;
};

static void prewarm(struct tools_env *env, struct session *s, struct policy *p);

/* ---- text helpers ------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p[0..n), or 0 if it is not one. */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;

    if (c < 0x80) {
        return c == 0 ? 0 : 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) {
        return 0;
    }
    unsigned v = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }
        v = (v << 6) | (p[i] & 0x3fu);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        return 0;
    }
    return len;
}

/*
 * Appends data as valid UTF-8 text: each byte that does not start a valid sequence (and
 * each NUL, which a C string cannot carry) becomes U+FFFD, so the JSON stays valid
 * whatever the command printed.
 */
static void
append_lossy(struct buf *out, const char *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 0;

    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (k == 0) {
            buf_puts(out, "\xef\xbf\xbd");
            i++;
        } else {
            buf_append(out, p + i, k);
            i += k;
        }
    }
}

/* The tail of a stream as text: a cut through a character at its start is dropped. */
static cJSON *
tail_json(const struct sandbox_output *o)
{
    struct buf b;
    size_t skip = 0;
    cJSON *s;

    buf_init(&b, SANDBOX_TAIL_BYTES * 3 + 16);
    if (o->total > o->tail_len) {
        while (skip < 3 && skip < o->tail_len && ((unsigned char)o->tail[skip] & 0xc0) == 0x80) {
            skip++;
        }
    }
    append_lossy(&b, o->tail + skip, o->tail_len - skip);
    s = cJSON_CreateString(buf_failed(&b) ? "" : buf_cstr(&b));
    buf_release(&b);
    return s;
}

/* ---- progress ----------------------------------------------------------------------- */

static void
track_bytes(struct line_track *t, const char *p, size_t n, uint64_t seen_before)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\n' || c == '\r') {
            if (t->cur_len > 0) {
                memcpy(t->last, t->cur, t->cur_len);
                t->last_len = t->cur_len;
                t->last_seq = (int64_t)(seen_before + i + 1);
            }
            t->cur_len = 0;
        } else if (t->cur_len < sizeof(t->cur)) {
            t->cur[t->cur_len++] = c;
        }
    }
}

/* The progress value: milliseconds since the call started, fractional so it always grows. */
static double
elapsed_ms(const struct bash_run *r)
{
    return (double)(time_mono_us() - r->t0_us) / 1000.0;
}

static void
send_progress(struct bash_run *r, int64_t now)
{
    const struct line_track *a = &r->lines[0], *b = &r->lines[1];
    const struct line_track *t = b->last_seq > a->last_seq ? b : a;
    struct buf msg;

    buf_init(&msg, PROGRESS_LINE_MAX * 3 + 16);
    if (t->last_len > 0) {
        append_lossy(&msg, t->last, t->last_len);
    } else if (a->cur_len > 0) {
        append_lossy(&msg, a->cur, a->cur_len);
    } else {
        append_lossy(&msg, b->cur, b->cur_len);
    }
    tool_call_progress(r->call, elapsed_ms(r), -1, buf_failed(&msg) ? NULL : buf_cstr(&msg));
    buf_release(&msg);
    r->last_progress_ms = now;
    r->sent_seen = 1;
}

/*
 * The heartbeat: a command that prints nothing for a while (a build, a test suite, a
 * download) still reports that it runs, so a client that resets its request timeout on
 * progress does not give up on it, and a user sees it is alive.
 */
static void
on_tick(void *ud, int64_t run_ms)
{
    struct bash_run *r = ud;
    int64_t now = time_mono_ms();
    char msg[96];

    if (!tool_call_has_progress(r->call) ||
        (r->sent_seen && now - r->last_progress_ms < HEARTBEAT_MS)) {
        return;
    }
    if (r->seen == 0) {
        snprintf(msg, sizeof(msg), "running for %lld s, no output yet", (long long)(run_ms / 1000));
    } else {
        snprintf(msg, sizeof(msg), "running for %lld s, no new output for %lld s",
                 (long long)(run_ms / 1000), (long long)((now - r->last_output_ms) / 1000));
    }
    tool_call_progress(r->call, elapsed_ms(r), -1, msg);
    r->last_progress_ms = now;
    r->sent_seen = 1;
}

static void
on_output(void *ud, enum sandbox_stream stream, const char *bytes, size_t len)
{
    struct bash_run *r = ud;
    int64_t now;

    track_bytes(&r->lines[stream == SANDBOX_STDERR ? 1 : 0], bytes, len, r->seen);
    r->seen += len;
    if (len == 0) {
        return;
    }
    now = time_mono_ms();
    r->last_output_ms = now;
    if (!tool_call_has_progress(r->call)) {
        return;
    }
    if (!r->sent_seen || now - r->last_progress_ms >= PROGRESS_EVERY_MS) {
        send_progress(r, now);
    }
}

/* ---- the end of a run ---------------------------------------------------------------- */

/*
 * The message for a sandbox that could not run the command: what failed and, from a
 * probe of the host, the fix doctor prints. Never suggests running unsandboxed.
 */
static void
fail_unavailable(struct tool_call *call, const struct err *why)
{
    struct sandbox_probe probe;
    struct err perr;
    char msg[ERR_MSG_MAX * 2 + 1200];
    cJSON *detail = cJSON_CreateObject();

    if (sandbox_probe(&probe, &perr) < 0) {
        snprintf(msg, sizeof(msg),
                 "the sandbox cannot run commands on this host (%s); fix: %s; commands never "
                 "run unsandboxed; 'drun-mcp doctor' checks the host",
                 why->msg, probe.fix);
        if (detail != NULL) {
            cJSON_AddStringToObject(detail, "fix", probe.fix);
        }
    } else {
        snprintf(msg, sizeof(msg),
                 "the sandbox failed to run the command (%s); run 'drun-mcp doctor' to check "
                 "the host",
                 why->msg);
    }
    tool_call_done_error(call, TOOL_ERR_INTERNAL, msg, detail);
}

/* Removes the overlay mount points this run and its prepared sandbox created, if empty. */
static void
run_unmount(struct bash_run *r)
{
    session_exec_unmount(r->s, r->mounts);
    r->mounts = NULL;
    session_exec_unmount(r->s, r->prep_mounts);
    r->prep_mounts = NULL;
}

static void
run_free(struct bash_run *r)
{
    run_unmount(r);
    policy_unref(r->policy);
    mem_free(r);
}

/* After a run that must leave no trace: back to the head, then out of the session. */
static void
reset_and_leave(struct bash_run *r)
{
    struct session_err e;

    run_unmount(r);
    if (session_workspace_reset(r->s, NULL, &e) < 0) {
        /* The next prepare re-syncs fully (the reset left the directory untrusted). */
        log_warn("session '%s': cannot reset the workspace after a failed command: %s",
                 session_id(r->s), e.base.msg);
    }
    session_leave(r->s, SESSION_WRITE);
}

static void
summarize(struct tool_call *call, const char *what, const char *command)
{
    char c[SUMMARY_CMD_MAX + 1];
    size_t n = strcspn(command, "\n");

    if (n > SUMMARY_CMD_MAX) {
        n = SUMMARY_CMD_MAX;
    }
    memcpy(c, command, n);
    c[n] = '\0';
    tool_call_set_summary(call, "%s: %s", what, c);
}

/* 1 if the stored bytes of o (or its tail) hold needle. */
static int
output_has(const struct sandbox_output *o, const char *needle)
{
    size_t n = strlen(needle);

    return (o->data.len >= n && memmem(o->data.data, o->data.len, needle, n) != NULL) ||
           (o->tail_len >= n && memmem(o->tail, o->tail_len, needle, n) != NULL);
}

/*
 * A write under a read-only overlay fails with a bare EROFS ("Read-only file system"),
 * which tells an agent nothing about why /workspace/.git is not writable. When a command
 * failed saying so and the session has overlays, the result names them: "hint" in a
 * sentence, "read_only_overlays" as [{key, host_path}] (those whose key the output
 * mentions, else all of them).
 */
static void
add_overlay_hint(struct tools_env *env, const char *sid, const struct sandbox_result *res,
                 cJSON *st)
{
    struct store_overlay *ov = NULL;
    size_t n = 0, named = 0;
    struct err err;
    struct buf keys;
    cJSON *list;

    if (res->exit_code == 0 || (!output_has(&res->err, "Read-only file system") &&
                                !output_has(&res->out, "Read-only file system"))) {
        return;
    }
    if (store_overlay_list(env->store, sid, &ov, &n, &err) < 0 || n == 0) {
        store_overlay_list_free(ov, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        named += output_has(&res->err, ov[i].key) || output_has(&res->out, ov[i].key);
    }
    list = cJSON_CreateArray();
    buf_init(&keys, 4096);
    for (size_t i = 0; list != NULL && i < n; i++) {
        cJSON *o;
        if (named > 0 && !output_has(&res->err, ov[i].key) && !output_has(&res->out, ov[i].key)) {
            continue;
        }
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "key", ov[i].key);
        cJSON_AddStringToObject(o, "host_path", ov[i].host_path);
        cJSON_AddItemToArray(list, o);
        buf_printf(&keys, "%s/workspace/%s", keys.len > 0 ? ", " : "", ov[i].key);
    }
    if (list != NULL && !buf_failed(&keys)) {
        struct buf h;
        buf_init(&h, 8192);
        buf_printf(&h,
                   "the command hit a read-only file system: %s %s a read-only overlay of a "
                   "host directory (mount_overlay_paths), bound into the sandbox as it is on "
                   "the host and never checkpointed; writes under it fail with EROFS. Write "
                   "elsewhere in /workspace, or ask the operator to remove the name from "
                   "mount_overlay_paths (a .git up to mount_git_copy_max_mb is copied) and "
                   "mount again",
                   buf_cstr(&keys), cJSON_GetArraySize(list) == 1 ? "is" : "are each");
        if (!buf_failed(&h)) {
            cJSON_AddStringToObject(st, "hint", buf_cstr(&h));
        }
        buf_release(&h);
        cJSON_AddItemToObject(st, "read_only_overlays", list);
        list = NULL;
    }
    cJSON_Delete(list);
    buf_release(&keys);
    store_overlay_list_free(ov, n);
}

static void bash_commit(struct bash_run *r);

static void
bash_on_exit(void *ud, struct sandbox_result *res)
{
    struct bash_run *r = ud;
    struct tool_call *call = r->call;
    struct tools_env *env = tool_call_env(call); /* the process's; outlives the call */

    r->t_exit_us = time_mono_us();
    r->sb = NULL;
    tool_call_on_cancel(call, NULL, NULL);
    if (res->cancelled || tool_call_cancelled(call)) {
        reset_and_leave(r);
        summarize(call, "cancelled", r->command);
        tool_call_done_error(call, TOOL_ERR_CANCELLED,
                             "the command was cancelled; its changes were discarded", NULL);
        goto out;
    }
    if (res->timed_out) {
        cJSON *detail = cJSON_CreateObject();
        char msg[256];

        reset_and_leave(r);
        summarize(call, "timed out", r->command);
        snprintf(msg, sizeof(msg),
                 "execution exceeded the %lldms timeout; increase the corresponding timeout "
                 "(bash_timeout_ms or package_install_timeout_ms) in server config",
                 (long long)r->timeout_ms);
        if (detail != NULL) {
            cJSON_AddNumberToObject(detail, "timeout_ms", (double)r->timeout_ms);
        }
        tool_call_done_error(call, "execution_timeout", msg, detail);
        goto out;
    }
    if (res->failed) {
        reset_and_leave(r);
        summarize(call, "sandbox failed", r->command);
        fail_unavailable(call, &res->error);
        goto out;
    }

    /* The command finished: the mount points go, then the directory becomes a checkpoint.
     * The result is kept (moved) in case the commit has to wait for the write lock. */
    run_unmount(r);
    r->res = *res;
    r->has_res = 1;
    bash_commit(r);
    return;
out:
    sandbox_result_release(res);
    /* The answer is out: prepare this session's next sandbox while the agent thinks. */
    prewarm(env, r->s, r->policy);
    run_free(r);
}

/* The commit was parked for the write lock: try again, or give up and reset. */
static void
bash_commit_parked(struct tool_call *call, void *arg, int status)
{
    struct bash_run *r = arg;
    struct tools_env *env = tool_call_env(call);

    if (status == TOOL_LOCK_READY) {
        bash_commit(r);
        return;
    }
    reset_and_leave(r);
    if (status == TOOL_LOCK_TIMEOUT) {
        summarize(call, "database locked", r->command);
        tool_call_done_store_busy(call);
    } else {
        summarize(call, "cancelled", r->command);
        tool_call_done_error(call, TOOL_ERR_CANCELLED,
                             "the command was cancelled; its changes were discarded", NULL);
    }
    sandbox_result_release(&r->res);
    prewarm(env, r->s, r->policy);
    run_free(r);
}

/*
 * Rescans and commits the workspace as the command left it, then answers. The commit
 * runs with the store in nowait mode: when another process holds the write lock the
 * scan is rolled back and the call waits off the loop (tool_call_wait_lock) with the
 * session still busy and the workspace as the command left it, then comes back here.
 */
static void
bash_commit(struct bash_run *r)
{
    struct tool_call *call = r->call;
    struct tools_env *env = tool_call_env(call); /* the process's; outlives the call */
    struct sandbox_result *res = &r->res;
    struct session_commit_meta meta;
    struct session_delta d;
    struct store_audit row;
    struct session_err e;
    cJSON *st;
    char tmp[64];
    int rc;

    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_bash";
    meta.command = r->command;
    meta.description = r->description;
    meta.has_exit_code = 1;
    meta.exit_code = res->exit_code;
    meta.stdout_data = res->out.data.len ? res->out.data.data : NULL;
    meta.stdout_len = res->out.data.len;
    meta.stderr_data = res->err.data.len ? res->err.data.data : NULL;
    meta.stderr_len = res->err.data.len;
    meta.duration_ms = res->duration_ms;
    meta.disk_full = res->limit_hit != NULL && strcmp(res->limit_hit, "disk") == 0;
    snprintf(tmp, sizeof(tmp), "exit %d", res->exit_code);
    summarize(call, tmp, r->command);
    tool_call_audit_prepare(call, &row);
    store_clear_would_block(env->store);
    store_set_nowait(env->store, 1);
    rc = session_commit_scan(r->s, &meta, &row, &d, NULL, &e);
    store_set_nowait(env->store, 0);
    if (rc < 0 && store_would_block(env->store) &&
        tool_call_wait_lock(call, bash_commit_parked, r) == 0) {
        return;
    }
    if (rc < 0) {
        session_leave(r->s, SESSION_WRITE);
        tsess_fail(call, &e);
        goto out;
    }
    tool_call_audit_taken(call);
    tool_call_set_checkpoint(call, d.checkpoint_id);
    session_leave(r->s, SESSION_WRITE);
    st = tsess_state(r->s, &d, &e);
    if (st == NULL) {
        tsess_fail(call, &e);
        goto out;
    }
    cJSON_AddNumberToObject(st, "duration_ms", (double)res->duration_ms);
    cJSON_AddBoolToObject(st, "stdout_truncated", res->out.truncated);
    cJSON_AddBoolToObject(st, "stderr_truncated", res->err.truncated);
    if (res->out.truncated) {
        cJSON_AddNumberToObject(st, "stdout_total_bytes", (double)res->out.total);
    }
    if (res->err.truncated) {
        cJSON_AddNumberToObject(st, "stderr_total_bytes", (double)res->err.total);
    }
    if (res->limit_hit != NULL) {
        cJSON_AddStringToObject(st, "limit_hit", res->limit_hit);
    } else {
        cJSON_AddNullToObject(st, "limit_hit");
    }
    cJSON_AddBoolToObject(st, "warm", res->warm);
    cJSON_AddItemToObject(st, "stdout_tail", tail_json(&res->out));
    cJSON_AddItemToObject(st, "stderr_tail", tail_json(&res->err));
    add_overlay_hint(env, session_id(r->s), res, st);
    {
        int64_t t_commit = time_mono_us();
        tool_call_done_json(call, st);
        log_debug("session_bash timing: %s warm %d sync %lld spawn %lld run %lld commit %lld "
                  "json %lld us",
                  session_id(r->s), res->warm, (long long)(r->t_sync_us - r->t0_us),
                  (long long)(r->t_ready_us - r->t_sync_us),
                  (long long)(r->t_exit_us - r->t_ready_us), (long long)(t_commit - r->t_exit_us),
                  (long long)(time_mono_us() - t_commit));
    }
out:
    sandbox_result_release(res);
    /* The answer is out: prepare this session's next sandbox while the agent thinks. */
    prewarm(env, r->s, r->policy);
    run_free(r);
}

static void
on_cancel(struct tool_call *call, void *arg)
{
    struct bash_run *r = arg;

    (void)call;
    if (r->sb != NULL) {
        sandbox_cancel(r->sb);
    }
}

/* ---- read-only paths ------------------------------------------------------------------ */

/*
 * The daemon's $PATH entries and what their tools need (shim managers' roots, the
 * targets of their links and "#!" lines), resolved, once per process (reference section
 * 3.2; host_toolchain_scan in host/ decides what may be bound). "/" is never one of
 * them: binding the whole host read-only would undo the sandbox's read set.
 */
static struct host_toolchain toolchain;
static char path_env[SANDBOX_PATH_MAX];
/* The fixed variables, then the shim managers' roots (host_toolchain). */
static const char *sandbox_env[2 + HOST_TOOLCHAIN_ENV_MAX] = {
    "PYTHONPATH=/workspace/.packages/pip", "NODE_PATH=/workspace/.packages/npm/node_modules"};
static size_t n_sandbox_env = 2;
static int path_ready;

static void
path_init(void)
{
    struct err err;

    if (path_ready) {
        return;
    }
    path_ready = 1;
    if (host_toolchain_scan(getenv("PATH"), &toolchain, &err) < 0) {
        log_warn("cannot look at $PATH's toolchains: %s", err.msg);
        return;
    }
    if (toolchain.path != NULL && strlen(toolchain.path) < sizeof(path_env)) {
        snprintf(path_env, sizeof(path_env), "%s", toolchain.path);
    }
    for (size_t i = 0; i < toolchain.n_env; i++) {
        sandbox_env[n_sandbox_env++] = toolchain.env[i];
    }
}

/* ---- the sandbox spec, and the session's prepared sandbox ------------------------------ */

/*
 * Everything of the spec that comes from the policy and the process: read-only paths
 * (the daemon's PATH entries, then mount_allowlist), environment and limits. ro must hold
 * SANDBOX_RO_PATHS_MAX entries.
 */
static void
spec_fill(struct sandbox_spec *spec, const struct policy *p, const char *ws_path, const char **ro,
          const char **hide)
{
    size_t n_ro = 0;

    path_init();
    for (size_t i = 0; i < toolchain.n_dirs && n_ro < SANDBOX_RO_PATHS_MAX / 2; i++) {
        ro[n_ro++] = toolchain.dirs[i];
    }

    for (size_t i = 0; i < p->mount_allowlist.n && n_ro < SANDBOX_RO_PATHS_MAX; i++) {
        if (strcmp(p->mount_allowlist.v[i], "/") != 0) {
            ro[n_ro++] = p->mount_allowlist.v[i];
        }
    }
    memset(spec, 0, sizeof(*spec));
    spec->workspace_dir = ws_path;
    spec->ro_paths = ro;
    spec->n_ro_paths = n_ro;
    /* An allowlisted $HOME holds ~/.drun, a toolchain's root may hold the runtime
     * directory: drun's own files beneath any bind are covered inside. */
    spec->hide_paths = hide;
    spec->n_hide_paths = host_own_hidden(ro, n_ro, hide, SANDBOX_RO_PATHS_MAX);
    spec->env = sandbox_env;
    spec->n_env = n_sandbox_env;
    spec->path_env = path_env[0] ? path_env : NULL;
    spec->limits.timeout_ms = p->bash_timeout_ms;
    spec->limits.memory_bytes = (uint64_t)p->sandbox_memory_mb << 20;
    spec->limits.cpu_secs = (uint64_t)p->sandbox_cpu_secs;
    spec->limits.file_size_bytes = (uint64_t)p->sandbox_file_size_mb << 20;
    spec->limits.nproc = (uint64_t)p->sandbox_max_processes;
    spec->limits.tmp_size_bytes = (uint64_t)p->sandbox_tmp_size_mb << 20;
    spec->uid = (uint32_t)p->sandbox_uid;
    spec->gid = (uint32_t)p->sandbox_gid;
    spec->limits.max_output_bytes = (size_t)p->max_output_bytes;
    spec->limits.max_command_bytes = SANDBOX_COMMAND_MAX_DEFAULT;
}

/*
 * A session's prepared sandbox and the policy object it was built under. A reloaded
 * config is a new policy object, so holding a reference both pins the identity (no reuse
 * of the address) and makes "the config changed" a pointer comparison; the sandbox
 * module checks the rest (mounts, limits, the workspace directory's identity).
 */
struct warm_slot {
    struct sandbox_prep *prep;
    struct policy *policy;
    struct session *s;
    struct session_mounts *mounts; /* overlay mount points bwrap created at prepare time */
};

static void
warm_slot_free(void *arg)
{
    struct warm_slot *w = arg;

    if (w == NULL) {
        return;
    }
    sandbox_prepared_free(w->prep);
    session_exec_unmount(w->s, w->mounts); /* after the kill: nothing waits on them now */
    policy_unref(w->policy);
    mem_free(w);
}

/* A session's overlays as the sandbox gets them (see overlays_collect). */
struct overlays {
    struct store_overlay *ov; /* from the store */
    size_t n_ov;
    struct sandbox_overlay *v; /* the usable ones */
    size_t n;
    const char **keys;
    int *usable;
    struct session_mounts *mounts; /* the mount points that do not exist yet */
    int *fds;                      /* the host directories, opened by host/, bound by fd */
    size_t n_fds;
};

static void
overlays_release(struct session *s, struct overlays *o)
{
    session_exec_unmount(s, o->mounts);
    for (size_t i = 0; i < o->n_fds; i++) {
        if (o->fds[i] >= 0) {
            close(o->fds[i]);
        }
    }
    mem_free(o->fds);
    mem_free(o->v);
    mem_free(o->keys);
    mem_free(o->usable);
    store_overlay_list_free(o->ov, o->n_ov);
    memset(o, 0, sizeof(*o));
}

/*
 * s's overlays: each host directory is checked against policy p now, as session_mount
 * would check it (a path admitted once is checked again at every use: the allowlist may
 * have shrunk, a snapshot may have brought it, a link may have replaced it) and opened
 * by host/ without following links; the sandbox binds that fd, never the path string.
 * Overlays refused or gone are left out (logged). Only those whose mount point in the
 * workspace can be a directory are kept; notes the mount points bwrap will create
 * (session_workspace_prepare must have run). 0, or -1 with e filled.
 */
static int
overlays_collect(struct tools_env *env, struct session *s, const struct policy *p,
                 struct overlays *o, struct session_err *e)
{
    struct err err;
    size_t n_keep = 0, j = 0;

    memset(o, 0, sizeof(*o));
    if (store_overlay_list(env->store, session_id(s), &o->ov, &o->n_ov, &err) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &err);
    }
    if (o->n_ov == 0) {
        return 0;
    }
    size_t n_ov = o->n_ov > SANDBOX_OVERLAYS_MAX ? SANDBOX_OVERLAYS_MAX : o->n_ov;
    o->v = mem_calloc(n_ov, sizeof(*o->v));
    o->keys = mem_calloc(n_ov, sizeof(*o->keys));
    o->usable = mem_calloc(n_ov, sizeof(*o->usable));
    o->fds = mem_calloc(n_ov, sizeof(*o->fds));
    if (o->v == NULL || o->keys == NULL || o->usable == NULL || o->fds == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n_ov; i++) {
        int fd = -1;
        if (host_check_overlay(p, o->ov[i].key, o->ov[i].host_path, &err) < 0 ||
            (fd = host_open_overlay(p, o->ov[i].host_path, &err)) < 0) {
            if (err.code != ERR_NOTFOUND) {
                log_warn("session '%s': overlay '%s' left out: %s", session_id(s), o->ov[i].key,
                         err.msg);
            }
            continue;
        }
        o->fds[o->n_fds++] = fd;
        o->keys[n_keep] = o->ov[i].key;
        o->v[n_keep].key = o->ov[i].key;
        o->v[n_keep].host_dir = o->ov[i].host_path;
        o->v[n_keep].dir_fd = fd;
        n_keep++;
    }
    if (session_exec_mounts(s, o->keys, n_keep, o->usable, &o->mounts, e) < 0) {
        return -1;
    }
    for (size_t i = 0; i < n_keep; i++) {
        if (o->usable[i]) {
            o->v[j++] = o->v[i];
        } else {
            log_warn("session '%s': overlay '%s' left out: its mount point is not a "
                     "directory in the workspace",
                     session_id(s), o->v[i].key);
        }
    }
    o->n = j;
    return 0;
}

/*
 * Prepares s's next sandbox under policy p, off the call path (after a command's answer
 * has been sent). With overlays, bwrap creates their mount points in the workspace now:
 * the slot keeps the note of them, so they are removed before the next rescan whether
 * the sandbox is used or discarded, and the validity check at release also requires
 * every overlay to be still mounted inside (a sync may have removed a mount point).
 * Failure only costs the next call its warm start.
 */
static void
prewarm(struct tools_env *env, struct session *s, struct policy *p)
{
    const char *ro[SANDBOX_RO_PATHS_MAX], *hide[SANDBOX_RO_PATHS_MAX];
    const char *ws_path = session_exec_dir_path(s);
    struct sandbox_spec spec;
    struct overlays o;
    struct warm_slot *w;
    struct session_err e;
    struct err err;

    session_exec_warm_put(s, NULL, NULL);
    if (sandbox_warm_mode() == SANDBOX_WARM_OFF || ws_path == NULL || p == NULL ||
        env->loop == NULL) {
        return;
    }
    w = mem_calloc(1, sizeof(*w));
    if (w == NULL) {
        return;
    }
    if (overlays_collect(env, s, p, &o, &e) < 0) {
        log_debug("session '%s': cannot prepare the next sandbox: %s", session_id(s), e.base.msg);
        overlays_release(s, &o);
        mem_free(w);
        return;
    }
    spec_fill(&spec, p, ws_path, ro, hide);
    spec.overlays = o.v;
    spec.n_overlays = o.n;
    spec.command = "";
    if (sandbox_prepare(env->loop, &spec, &w->prep, &err) < 0) {
        log_debug("session '%s': cannot prepare the next sandbox: %s", session_id(s), err.msg);
        overlays_release(s, &o); /* removes any mount point bwrap created */
        mem_free(w);
        return;
    }
    w->policy = policy_ref(p);
    w->s = s;
    w->mounts = o.mounts;
    o.mounts = NULL;
    overlays_release(s, &o);
    session_exec_warm_put(s, w, warm_slot_free);
}

/* Past these, preparing a sandbox for a session without a workspace directory is left to
 * its first command (see tools_bash_prewarm). */
#define PREWARM_SYNC_MAX_BYTES   ((uint64_t)16 << 20)
#define PREWARM_SYNC_MAX_ENTRIES 2000

void
tools_bash_prewarm(struct tools_env *env, struct session *s, struct policy *p)
{
    struct policy *cur = NULL;
    struct session_err e;
    struct ws_dir *dir = NULL;
    struct err err;

    if (env == NULL || s == NULL || env->loop == NULL || sandbox_warm_mode() == SANDBOX_WARM_OFF) {
        return;
    }
    if (p == NULL) {
        if (env->policy == NULL || policy_current(env->policy, &cur, &err) < 0) {
            return;
        }
        p = cur;
    }
    /* A busy session is being used: its command prepares the next sandbox itself. */
    if (session_enter(s, SESSION_WRITE, &e) == 0) {
        void *waiting = session_exec_warm_take(s);
        if (waiting != NULL) { /* one already waits; the call checks that it still fits */
            session_exec_warm_put(s, waiting, warm_slot_free);
            session_leave(s, SESSION_WRITE);
            policy_unref(cur);
            return;
        }
        /* A new or just attached session has no directory yet: sync it to the head, if
         * that is small. The sync runs on the loop; a big tree (a restore, an attach)
         * waits for the first command to sync it, which goes cold instead. */
        const struct ws_manifest *head = session_manifest(s);
        if (session_exec_dir_path(s) == NULL && head != NULL &&
            (ws_manifest_bytes(head) > PREWARM_SYNC_MAX_BYTES ||
             ws_manifest_count(head) > PREWARM_SYNC_MAX_ENTRIES)) {
            log_debug("session '%s': not preparing a sandbox: syncing %llu bytes in %zu entries "
                      "waits for the first command",
                      session_id(s), (unsigned long long)ws_manifest_bytes(head),
                      ws_manifest_count(head));
        } else if (session_exec_dir_path(s) != NULL ||
                   session_workspace_prepare(s, &dir, &e) == 0) {
            prewarm(env, s, p);
        } else {
            log_debug("session '%s': cannot sync the workspace to prepare a sandbox: %s",
                      session_id(s), e.base.msg);
        }
        session_leave(s, SESSION_WRITE);
    }
    policy_unref(cur);
}

static void
prewarm_deferred(struct session *s, void *arg)
{
    tools_bash_prewarm(arg, s, NULL);
}

void
tools_bash_prewarm_soon(struct tools_env *env, const char *id)
{
    if (env != NULL && env->loop != NULL && sandbox_warm_mode() != SANDBOX_WARM_OFF) {
        (void)session_exec_defer(env->loop, env->sessions, id, prewarm_deferred, env);
    }
}

/* ---- the handler ------------------------------------------------------------------------ */

static void
session_bash(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call);
    const char *command = tool_call_arg_str(call, "command");
    const char *description = tool_call_arg_str(call, "description");
    struct policy *p = NULL;
    struct session *s = NULL;
    struct bash_run *r = NULL;
    struct ws_dir *dir = NULL;
    struct overlays o;
    const char *ro[SANDBOX_RO_PATHS_MAX], *hide[SANDBOX_RO_PATHS_MAX];
    struct warm_slot *warm = NULL;
    struct sandbox_spec spec;
    struct sandbox_callbacks cb;
    struct session_err e;
    struct err err;
    size_t len;
    int rc;
    int64_t t0 = time_mono_us();

    memset(&o, 0, sizeof(o));

    if (tools_policy(call, &p) < 0) {
        return;
    }
    len = strlen(command);
    if (len == 0 || strspn(command, " \t\r\n") == len) {
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS,
                             "argument 'command' is empty; pass the shell command to run", NULL);
        goto out;
    }
    if (len > SANDBOX_COMMAND_MAX_DEFAULT) {
        char msg[200];
        cJSON *detail = cJSON_CreateObject();
        snprintf(msg, sizeof(msg),
                 "argument 'command' has %zu bytes, more than the %zu allowed; write the "
                 "script to a file with session_write_files and run it",
                 len, SANDBOX_COMMAND_MAX_DEFAULT);
        if (detail != NULL) {
            cJSON_AddNumberToObject(detail, "limit_bytes", (double)SANDBOX_COMMAND_MAX_DEFAULT);
        }
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS, msg, detail);
        goto out;
    }
    /* The command policy comes first: a denied command never starts (section 3.7). */
    if (policy_command_check(p, command, &err) < 0) {
        summarize(call, "denied", command);
        tool_call_done_error(call, "command_denied", err.msg, NULL);
        goto out;
    }
    if (tsess_mgr(call) == NULL) {
        goto out;
    }
    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        goto out;
    }
    if (session_workspace_prepare(s, &dir, &e) < 0) {
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        goto out;
    }
    r = mem_calloc(1, sizeof(*r));
    if (r == NULL) {
        session_leave(s, SESSION_WRITE);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    r->call = call;
    r->s = s;
    r->command = command;
    r->description = description;
    r->t0_us = t0;
    r->policy = policy_ref(p);
    r->t_sync_us = time_mono_us();

    /*
     * The prepared sandbox goes to this run whether it is used or not: the overlay mount
     * points it created are removed with the run's own before the rescan.
     */
    warm = session_exec_warm_take(s);
    if (warm != NULL) {
        r->prep_mounts = warm->mounts;
        warm->mounts = NULL;
    }
    if (overlays_collect(env, s, p, &o, &e) < 0) {
        overlays_release(s, &o);
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        goto out;
    }
    r->mounts = o.mounts;
    o.mounts = NULL;

    spec_fill(&spec, p, ws_dir_path(dir), ro, hide);
    spec.overlays = o.v;
    spec.n_overlays = o.n;
    spec.command = command;
    spec.command_len = len;
    r->timeout_ms = p->bash_timeout_ms;

    memset(&cb, 0, sizeof(cb));
    cb.on_output = on_output;
    cb.on_exit = bash_on_exit;
    cb.on_tick = on_tick;
    cb.tick_ms = HEARTBEAT_MS;
    cb.ud = r;
    /* The session's prepared sandbox, if one waits and still matches; else a cold start. */
    if (warm != NULL && warm->policy == p &&
        sandbox_start_prepared(warm->prep, &spec, &cb, &r->sb, &err) == 0) {
        warm->prep = NULL;
        rc = 0;
    } else {
        rc = sandbox_start(env->loop, &spec, &cb, &r->sb, &err);
    }
    warm_slot_free(warm);
    warm = NULL;
    if (rc < 0) {
        reset_and_leave(r);
        if (err.code == ERR_INVAL || err.code == ERR_TOOBIG) {
            tool_call_done_err(call, TOOL_ERR_INVALID_ARGUMENTS, &err);
        } else {
            fail_unavailable(call, &err);
        }
        goto out;
    }
    r->t_ready_us = time_mono_us();
    tool_call_on_cancel(call, on_cancel, r);
    r = NULL; /* on_exit owns it now */
out:
    if (r != NULL) {
        run_free(r);
    }
    overlays_release(s, &o);
    warm_slot_free(warm);
    policy_unref(p);
}

static const char bash_schema[] =
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
    "\"properties\":{\"command\":{\"type\":\"string\",\"description\":\"Shell script, run with "
    "sh -c in /workspace.\"},\"description\":{\"type\":\"string\",\"description\":\"Why you "
    "run it, in a few words (recorded in the checkpoint).\"}," TSESS_ID_PROP
    "},\"required\":[\"command\",\"description\"],\"additionalProperties\":false}";

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char bash_out[] = TSESS_OUT_OBJECT(
    TSESS_OUT_STATE_PROPS ",\"duration_ms\":" J_INT ",\"stdout_truncated\":" J_BOOL
                          ",\"stderr_truncated\":" J_BOOL ",\"limit_hit\":" J_STR_NULL
                          ",\"warm\":" J_BOOL ",\"stdout_tail\":" J_STR ",\"stderr_tail\":" J_STR,
    TSESS_OUT_STATE_REQ ",\"duration_ms\"");

const struct tool_def tools_bash_defs[] = {
    {
        .name = "session_bash",
        .title = "Run a shell command",
        .description = "Run a shell command (sh -c) in the session's /workspace, sandboxed with "
                       "no network, and checkpoint the files it changes. Returns exit code, "
                       "change counts and the last 2 KiB of stdout/stderr; full output via "
                       "checkpoint_read_stdstreams.",
        .input_schema = bash_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = bash_out,
        .handler = session_bash,
    },
};

const size_t tools_bash_count = sizeof(tools_bash_defs) / sizeof(tools_bash_defs[0]);
