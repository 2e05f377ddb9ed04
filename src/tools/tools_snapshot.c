/*
 * tools_snapshot.c - the snapshot tools: session_snapshot, list_snapshots and
 * session_restore (reference sections 4.6 and 6), and session_close's snapshot_on_close.
 *
 * A snapshot lives in the DB (store_snapshot_create: rows that point at the session's
 * blobs, so it costs rows, not bytes). session_snapshot with `path` also exports it to a
 * portable SQLite file, and the two are one operation for the agent: if the file cannot
 * be written the DB snapshot just made is deleted again and the error returned.
 *
 * The engines live in snapfile/: the path rule and the atomic write under
 * snapshots_dir, the listing of snapshot files, the read door of restore's path, the
 * import of either kind of file, and the restore itself (a new session claimed by this
 * process inside the same transaction as the max_sessions check). This file parses
 * arguments, maps errors to tool errors and builds JSON from snapfile's plain structs.
 * If the restore fails after an import, the imported snapshot is deleted, so a failed
 * call leaves nothing behind.
 */
#include "tools/tools_snapshot.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "policy/policy.h"
#include "snapfile/snapfile.h"
#include "store/store.h"
#include "tools/tools_bash.h"
#include "tools/tools_sess.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

/* ---- session_snapshot ------------------------------------------------------------------ */

static const char *
create_code(const struct err *err)
{
    switch (err->code) {
    case ERR_INVAL:
    case ERR_TOOBIG:
    case ERR_EXISTS:
        return TOOL_ERR_INVALID_ARGUMENTS;
    case ERR_NOTFOUND:
        return "session_not_found";
    default:
        return tools_err_code(err->code);
    }
}

static void
do_session_snapshot(struct tool_call *call)
{
    struct store *st = tool_call_env(call)->store;
    const char *arg_name = tool_call_arg_str(call, "name");
    const char *path = tool_call_arg_str(call, "path");
    const char *desc = tool_call_arg_str(call, "description");
    char *name = NULL, *pathc = NULL, *descc = NULL, *root = NULL;
    char rel[SNAPFILE_PATH_MAX];
    struct policy *p = NULL;
    struct store_snapshot snap, other;
    struct session *s;
    struct session_err e;
    struct err err;
    int64_t bytes = 0;
    cJSON *o;

    memset(&snap, 0, sizeof(snap));
    /* Copies: tsess_open frees the call (and its arguments) when it fails. */
    name = arg_name ? mem_strdup(arg_name) : NULL;
    pathc = path ? mem_strdup(path) : NULL;
    descc = mem_strdup(desc ? desc : "");
    if ((arg_name && name == NULL) || (path && pathc == NULL) || descc == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    if (name != NULL) {
        if (store_snapshot_name_check(name, &err) < 0) {
            tool_call_done_err(call, TOOL_ERR_INVALID_ARGUMENTS, &err);
            goto out;
        }
        memset(&other, 0, sizeof(other));
        if (store_snapshot_get(st, name, &other, &err) == 0) {
            char msg[ERR_MSG_MAX];
            store_snapshot_release(&other);
            snprintf(msg, sizeof(msg),
                     "snapshot name '%.128s' is already taken; choose another name, or omit "
                     "name for '<session_id>-<UTC time>'",
                     name);
            tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS, msg, NULL);
            goto out;
        }
    }
    if (pathc != NULL) {
        if (tools_policy(call, &p) < 0) {
            goto out;
        }
        root = mem_strdup(p->snapshots_dir);
        policy_unref(p);
        if (root == NULL) {
            tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
            goto out;
        }
        if (snapfile_rel(root, pathc, rel, sizeof(rel), &err) < 0) {
            tool_call_done_err(
                call, err.code == ERR_DENIED ? "snapshot_denied" : TOOL_ERR_INVALID_ARGUMENTS,
                &err);
            goto out;
        }
    }
    s = tsess_open(call, SESSION_READ);
    if (s == NULL) {
        goto out;
    }
    if (store_snapshot_create(st, session_id(s), name, descc[0] ? descc : NULL, &snap, &err) < 0) {
        session_leave(s, SESSION_READ);
        tool_call_done_err(call, create_code(&err), &err);
        goto out;
    }
    if (pathc != NULL && snapfile_write(st, snap.name, root, rel, &bytes, &err) < 0) {
        struct err derr;
        char msg[ERR_MSG_MAX];
        session_leave(s, SESSION_READ);
        int nowait = store_set_nowait(st, 0); /* a clean-up waits rather than leave it */
        if (store_snapshot_delete(st, snap.name, &derr) < 0) {
            log_warn("cannot delete snapshot '%s' after a failed export: %s", snap.name, derr.msg);
        }
        store_set_nowait(st, nowait);
        snprintf(msg, sizeof(msg), "cannot write snapshot file: %.180s; no snapshot was kept",
                 err.msg);
        tool_call_done_error(call, err.code == ERR_DENIED ? "snapshot_denied" : TOOL_ERR_INTERNAL,
                             msg, NULL);
        goto out;
    }
    if (session_step(s, -1, "session_snapshot", descc, &e) < 0) {
        /* The snapshot is whole; only the history note is missing. */
        log_warn("snapshot '%s': cannot append the step: %s", snap.name, e.base.msg);
    }
    session_leave(s, SESSION_READ);
    o = cJSON_CreateObject();
    if (o == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    /* The reference's key stays for its clients: null says the snapshot lives only in
     * the database, under `name`. */
    if (pathc != NULL) {
        cJSON_AddStringToObject(o, "snapshot_path", pathc);
        cJSON_AddNumberToObject(o, "size_bytes", (double)bytes);
    } else {
        cJSON_AddNullToObject(o, "snapshot_path");
        cJSON_AddNullToObject(o, "size_bytes");
    }
    cJSON_AddStringToObject(o, "name", snap.name);
    cJSON_AddNumberToObject(o, "snapshot_id", (double)snap.id);
    cJSON_AddStringToObject(o, "session_id", snap.session_id);
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)snap.head);
    cJSON_AddNumberToObject(o, "checkpoints", (double)snap.checkpoints);
    tool_call_set_summary(call, "snapshot '%s'%s%.150s", snap.name, pathc ? " to " : "",
                          pathc ? pathc : "");
    tool_call_done_json(call, o);
out:
    store_snapshot_release(&snap);
    mem_free(name);
    mem_free(pathc);
    mem_free(descc);
    mem_free(root);
}

/* ---- list_snapshots ----------------------------------------------------------------------- */

static cJSON *
db_entry(const struct store_snapshot *s)
{
    cJSON *o = cJSON_CreateObject();
    char t[32];

    if (o == NULL) {
        return NULL;
    }
    time_format_iso(s->created_ms, t, sizeof(t));
    cJSON_AddStringToObject(o, "kind", "db");
    cJSON_AddNullToObject(o, "path"); /* the reference's keys: it lives in the database */
    cJSON_AddNullToObject(o, "size_bytes");
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddNumberToObject(o, "snapshot_id", (double)s->id);
    cJSON_AddStringToObject(o, "session_id", s->session_id);
    cJSON_AddStringToObject(o, "created", t);
    cJSON_AddNumberToObject(o, "checkpoint_count", (double)s->checkpoints);
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)s->head);
    if (s->label != NULL) {
        cJSON_AddStringToObject(o, "label", s->label);
    }
    if (s->description != NULL) {
        cJSON_AddStringToObject(o, "description", s->description);
    }
    return o;
}

static cJSON *
file_entry(const struct snapfile_entry *f)
{
    cJSON *o = cJSON_CreateObject();
    char t[32];

    if (o == NULL) {
        return NULL;
    }
    time_format_iso(f->mtime_ms, t, sizeof(t));
    cJSON_AddStringToObject(o, "kind", f->kind);
    cJSON_AddStringToObject(o, "path", f->path);
    cJSON_AddNumberToObject(o, "size_bytes", (double)f->size);
    cJSON_AddStringToObject(o, "mtime", t);
    if (f->label != NULL) {
        cJSON_AddStringToObject(o, "label", f->label);
    }
    if (f->checkpoint_count >= 0) {
        cJSON_AddNumberToObject(o, "checkpoint_count", (double)f->checkpoint_count);
    }
    return o;
}

static void
do_list_snapshots(struct tool_call *call)
{
    struct store *st = tool_call_env(call)->store;
    struct store_snapshot *list = NULL;
    struct snapfile_entry *files = NULL;
    struct policy *p = NULL;
    size_t n = 0, nfiles = 0;
    const char *code = TOOL_ERR_INTERNAL;
    struct err err;
    cJSON *arr;

    if (tools_policy(call, &p) < 0) {
        return;
    }
    arr = cJSON_CreateArray();
    if (arr == NULL) {
        policy_unref(p);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    if (store_snapshot_list(st, &list, &n, &err) < 0) {
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        cJSON *o = db_entry(&list[i]);
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            err_set(&err, ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    if (snapfile_list(p->snapshots_dir, &files, &nfiles, &err) < 0) {
        if (err.code == ERR_TOOBIG) {
            code = "result_too_large";
        }
        goto fail;
    }
    for (size_t i = 0; i < nfiles; i++) {
        cJSON *o = file_entry(&files[i]);
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            err_set(&err, ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    store_snapshot_list_free(list, n);
    snapfile_list_free(files, nfiles);
    policy_unref(p);
    tool_call_set_summary(call, "%zu snapshots, %zu files", n, nfiles);
    tool_call_done_json(call, arr);
    return;
fail:
    store_snapshot_list_free(list, n);
    snapfile_list_free(files, nfiles);
    policy_unref(p);
    cJSON_Delete(arr);
    tool_call_done_err(call, code, &err);
}

/* ---- session_restore ------------------------------------------------------------------- */

/*
 * snapfile_restore for m's process under m's max_sessions, its errors as session errors
 * (tsess_fail words them for the agent).
 */
static int
restore_claimed(struct session_mgr *m, const char *name, struct snapfile_vet *vet,
                struct store_session *out, struct session_err *e)
{
    const struct session_limits *lim = session_mgr_limits(m);
    pid_t pid = session_mgr_pid(m);
    char msg[ERR_MSG_MAX];

    if (snapfile_restore(session_mgr_store(m), name, lim->max_sessions, pid, proc_start_time(pid),
                         vet, out, &e->base) == 0) {
        return 0;
    }
    memcpy(msg, e->base.msg, sizeof(msg)); /* session_fail writes e->base.msg */
    switch (e->base.code) {
    case ERR_BUSY:
        session_fail(e, SESSION_E_LIMIT, ERR_TOOBIG, "%s", msg);
        e->d1 = lim->max_sessions;
        return -1;
    case ERR_NOTFOUND:
        return session_fail(e, SESSION_E_ARGS, ERR_NOTFOUND, "%s", msg);
    default:
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
}

/* The import's error code for the agent: a bad or hostile file is a bad argument. */
static const char *
import_code(const struct err *err)
{
    switch (err->code) {
    case ERR_DENIED:
        return "snapshot_denied";
    case ERR_NOTFOUND:
    case ERR_INVAL:
    case ERR_TOOBIG: /* past an import cap: a smaller file would do */
        return TOOL_ERR_INVALID_ARGUMENTS;
    default:
        return TOOL_ERR_INTERNAL;
    }
}

static void
do_session_restore(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call);
    struct session_mgr *m;
    const char *name = tool_call_arg_str(call, "name");
    const char *path = tool_call_arg_str(call, "path");
    char snap[STORE_SNAPSHOT_NAME_MAX + 1];
    char real[PATH_MAX]; /* path, resolved */
    struct store_session ss;
    struct session *s = NULL;
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};
    struct policy *p = NULL;
    struct snapfile_vet vet;
    struct err err;
    int imported = 0, fd;
    cJSON *st;

    snapfile_vet_init(&vet, NULL);
    if ((name == NULL) == (path == NULL)) {
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS,
                             "give exactly one of 'name' (a snapshot in the database) or 'path' "
                             "(a snapshot file)",
                             NULL);
        return;
    }
    m = tsess_mgr(call);
    if (m == NULL) {
        return;
    }
    if (name != NULL && store_snapshot_name_check(name, &err) < 0) {
        tool_call_done_err(call, TOOL_ERR_INVALID_ARGUMENTS, &err);
        return;
    }
    if (tools_policy(call, &p) < 0) {
        return;
    }
    vet.p = p;
    if (name != NULL) {
        snprintf(snap, sizeof(snap), "%s", name);
    } else {
        struct store_snapshot got;
        fd = snapfile_open_restore(p, path, real, sizeof(real), &err);
        if (fd < 0) {
            tool_call_done_err(call, import_code(&err), &err);
            goto out;
        }
        memset(&got, 0, sizeof(got));
        /* The message names the file and what is wrong with it. */
        if (snapfile_import_fd(env->store, fd, real, NULL, &vet, &got, &err) < 0) {
            close(fd);
            tool_call_done_err(call, import_code(&err), &err);
            goto out;
        }
        close(fd);
        snprintf(snap, sizeof(snap), "%s", got.name);
        store_snapshot_release(&got);
        imported = 1;
    }
    memset(&ss, 0, sizeof(ss));
    if (restore_claimed(m, snap, &vet, &ss, &e) < 0) {
        goto fail;
    }
    if (session_attach(m, ss.id, &s, &e) < 0) {
        store_session_release(&ss);
        goto fail;
    }
    store_session_release(&ss);
    snprintf(env->session_id, sizeof(env->session_id), "%s", session_id(s));
    tool_call_set_session(call, session_id(s));
    tool_call_set_summary(call, "restored '%s' as %s%s", snap, session_id(s),
                          vet.total ? ", overlays dropped" : "");
    st = tsess_state(s, &d, &e);
    if (st == NULL) {
        tsess_fail(call, &e);
        goto out;
    }
    cJSON_AddStringToObject(st, "snapshot_name", snap);
    if (vet.total > 0) {
        /* Overlays the current policy refuses are never bound; the agent is told which. */
        cJSON *arr = cJSON_AddArrayToObject(st, "dropped_overlays");
        for (size_t i = 0; arr != NULL && i < vet.n_dropped; i++) {
            cJSON *o = cJSON_CreateObject();
            if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
                cJSON_Delete(o);
                break;
            }
            cJSON_AddStringToObject(o, "key", vet.dropped[i].key);
            cJSON_AddStringToObject(o, "host_path", vet.dropped[i].host_path);
            cJSON_AddStringToObject(o, "reason", vet.dropped[i].reason);
        }
        cJSON_AddNumberToObject(st, "dropped_overlays_total", (double)vet.total);
    }
    tool_call_done_json(call, st);
    tools_bash_prewarm(env, s, NULL); /* the answer is out: prepare its first sandbox */
    goto out;
fail:
    if (imported) {
        struct err derr;
        int nowait = store_set_nowait(env->store, 0); /* a clean-up waits, not leave it */
        if (store_snapshot_delete(env->store, snap, &derr) < 0) {
            log_warn("cannot delete imported snapshot '%s': %s", snap, derr.msg);
        }
        store_set_nowait(env->store, nowait);
    }
    tsess_fail(call, &e);
out:
    snapfile_vet_release(&vet);
    policy_unref(p);
}

/* ---- session_close's snapshot_on_close ----------------------------------------------- */

int
tsnap_close_wanted(struct tool_call *call)
{
    struct policy *p = NULL;
    int want;

    if (tools_policy(call, &p) < 0) {
        return -1;
    }
    want = p->snapshot_on_close != 0;
    policy_unref(p);
    return want;
}

int
tsnap_close_snapshot(struct session *s, char *name, size_t size, struct session_err *e)
{
    struct store *st = session_mgr_store(session_owner(s));
    struct store_snapshot snap;

    snapfile_close_name(session_id(s), name, size);
    if (store_snapshot_create(st, session_id(s), name, "snapshot_on_close", &snap, &e->base) < 0) {
        char msg[ERR_MSG_MAX];
        snprintf(msg, sizeof(msg), "%.150s", e->base.msg);
        name[0] = '\0';
        return session_fail(e, SESSION_E_OTHER, ERR_IO,
                            "snapshot_on_close: cannot snapshot session '%s' (%s); the session "
                            "was left open",
                            session_id(s), msg);
    }
    store_snapshot_release(&snap);
    return 0;
}

/* ---- definitions ----------------------------------------------------------------------- */

#define SCHEMA_HEAD                                                                                \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","

static const char snapshot_schema[] =
    SCHEMA_HEAD "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4095,"
                "\"description\":\"Also write a portable snapshot file here (absolute, under the "
                "server's snapshots_dir).\"},\"name\":{\"type\":\"string\",\"minLength\":1,"
                "\"maxLength\":128,\"description\":\"Snapshot name ([A-Za-z0-9._-]; default "
                "'<session_id>-<UTC time>').\"},\"description\":{\"type\":\"string\","
                "\"description\":\"Why you take it.\"}," TSESS_ID_PROP
                "},\"required\":[\"description\"],\"additionalProperties\":false}";

static const char list_schema[] = SCHEMA_HEAD "\"properties\":{},\"additionalProperties\":false}";

static const char restore_schema[] =
    SCHEMA_HEAD "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4095,"
                "\"description\":\"A snapshot file (drun export or original .drun).\"},"
                "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":128,"
                "\"description\":\"A snapshot in the database (see list_snapshots).\"}},"
                "\"additionalProperties\":false}";

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char restore_out[] = TSESS_OUT_OBJECT(
    TSESS_OUT_STATE_PROPS ",\"snapshot_name\":" J_STR ",\"dropped_overlays\":" J_OBJS
                          ",\"dropped_overlays_total\":" J_INT,
    TSESS_OUT_STATE_REQ ",\"snapshot_name\"");
static const char snapshot_out[] = TSESS_OUT_OBJECT(
    "\"snapshot_path\":" J_STR_NULL ",\"size_bytes\":" J_INT_NULL ",\"name\":" J_STR
    ",\"snapshot_id\":" J_INT ",\"session_id\":" J_STR ",\"checkpoint_id\":" J_INT
    ",\"checkpoints\":" J_INT,
    "\"snapshot_path\",\"size_bytes\",\"name\",\"snapshot_id\",\"session_id\",\"checkpoint_id\","
    "\"checkpoints\"");

const struct tool_def tools_snapshot_defs[] = {
    {
        .name = "list_snapshots",
        .title = "List snapshots",
        .description = "List snapshots: those in the database (kind db) and snapshot files in "
                       "the server's snapshots_dir.",
        .input_schema = list_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_list_snapshots,
    },
    {
        .name = "session_snapshot",
        .title = "Snapshot a session",
        .description = "Save the active session's whole history as a named, immutable "
                       "snapshot; with path, also write it to a portable file.",
        .input_schema = snapshot_schema,
        .annotations = {0, 0, 1, 0},
        .output_schema = snapshot_out,
        .handler = do_session_snapshot,
    },
    {
        .name = "session_restore",
        .title = "Restore a snapshot",
        .description = "Make a new session from a snapshot (name) or snapshot file (path) with "
                       "its full history; it becomes your active session.",
        .input_schema = restore_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = restore_out,
        .handler = do_session_restore,
    },
};

const size_t tools_snapshot_count = sizeof(tools_snapshot_defs) / sizeof(tools_snapshot_defs[0]);
