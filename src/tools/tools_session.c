/*
 * tools_session.c - the session lifecycle tools: create_session, session_switch,
 * session_fork, session_list, session_close, session_label, session_tree and
 * session_chat_record.
 *
 * Sessions live in the DB and outlive the process: session_list and session_tree show
 * every open session in the DB, and say which are attached here and which another live
 * drun-mcp holds (by pid). session_switch attaches a free session (or takes over one
 * whose process died) and makes it the connection's active session.
 */
#include "tools/tools_bash.h"
#include "tools/tools_sess.h"
#include "tools/tools_snapshot.h"

#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "util/proc.h"
#include "util/timeutil.h"

static void
set_active(struct tool_call *call, const char *id)
{
    struct tools_env *env = tool_call_env(call);
    snprintf(env->session_id, sizeof(env->session_id), "%s", id);
}

/* Ends the call with s's SessionState (d: deltas, NULL for the head's own). */
static void
done_state(struct tool_call *call, struct session *s, const struct session_delta *d)
{
    struct session_err e;
    cJSON *st = tsess_state(s, d, &e);

    if (st == NULL) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_done_json(call, st);
}

static void
do_create_session(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call); /* outlives the call */
    struct session_mgr *m = tsess_mgr(call);
    struct session *s = NULL;
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};

    if (m == NULL) {
        return;
    }
    if (session_create(m, tool_call_client_name(call), &s, &e) < 0) {
        tsess_fail(call, &e);
        return;
    }
    set_active(call, session_id(s));
    tool_call_set_session(call, session_id(s));
    tool_call_set_checkpoint(call, 0);
    tool_call_set_summary(call, "created session %s", session_id(s));
    done_state(call, s, &d);
    tools_bash_prewarm(env, s, NULL); /* the answer is out: prepare its first sandbox */
}

static void
do_session_switch(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call); /* outlives the call */
    struct session_mgr *m = tsess_mgr(call);
    const char *id = tool_call_arg_str(call, "session_id");
    struct session *s = NULL;
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};

    if (m == NULL) {
        return;
    }
    tool_call_set_session(call, id);
    if (session_reattach(m, id, &s, &e) < 0) {
        tsess_fail(call, &e);
        return;
    }
    set_active(call, session_id(s));
    tool_call_set_summary(call, "switched to %s at checkpoint %lld", session_id(s),
                          (long long)session_head(s));
    done_state(call, s, &d);
    tools_bash_prewarm(env, s, NULL); /* attached: prepare its next sandbox */
}

static void
do_session_fork(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call); /* outlives the call */
    struct session *src, *s = NULL;
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};
    int64_t cp;

    src = tsess_open(call, 0);
    if (src == NULL) {
        return;
    }
    if (session_resolve(src, tool_call_arg_str(call, "checkpoint_label"),
                        tsess_arg_id(call, "checkpoint_id"), session_head(src), &cp, &e) < 0 ||
        session_fork(session_owner(src), src, cp, tool_call_client_name(call), &s, &e) < 0) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_set_summary(call, "forked %s at checkpoint %lld into %s", session_id(src),
                          (long long)cp, session_id(s));
    set_active(call, session_id(s));
    tool_call_set_session(call, session_id(s));
    done_state(call, s, &d);
    tools_bash_prewarm(env, s, NULL); /* the answer is out: prepare the fork's first sandbox */
}

static cJSON *
list_entry(struct session_mgr *m, const struct store_session *ss, const char *active,
           struct session_err *e)
{
    struct session *att = session_mgr_find(m, ss->id);
    cJSON *o = cJSON_CreateObject();
    size_t count = 0;

    if (o == NULL) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (att != NULL) {
        session_live_ids(att, &count);
    } else {
        struct store_checkpoint *list = NULL;
        if (store_checkpoint_list(session_mgr_store(m), ss->id, 0, &list, &count, &e->base) < 0) {
            cJSON_Delete(o);
            session_fail_err(e, SESSION_E_OTHER, &e->base);
            return NULL;
        }
        store_checkpoint_list_free(list, count);
    }
    cJSON_AddStringToObject(o, "session_id", ss->id);
    cJSON_AddBoolToObject(o, "is_current", strcmp(ss->id, active) == 0);
    if (ss->label != NULL) {
        cJSON_AddStringToObject(o, "label", ss->label);
    }
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)ss->head);
    cJSON_AddNumberToObject(o, "checkpoint_count", (double)count);
    if (ss->parent_id[0] != '\0') {
        cJSON_AddStringToObject(o, "parent_session_id", ss->parent_id);
        cJSON_AddNumberToObject(o, "parent_checkpoint_id", (double)ss->parent_checkpoint);
    }
    cJSON_AddBoolToObject(o, "attached", att != NULL);
    if (att == NULL && ss->owner_pid > 0 && proc_alive(ss->owner_pid, ss->owner_start)) {
        cJSON_AddNumberToObject(o, "holder_pid", (double)ss->owner_pid);
    }
    return o;
}

static void
do_session_list(struct tool_call *call)
{
    struct session_mgr *m = tsess_mgr(call);
    struct store_session *list = NULL;
    struct session_err e;
    size_t n = 0;
    cJSON *a;

    if (m == NULL) {
        return;
    }
    if (store_session_list(session_mgr_store(m), 0, &list, &n, &e.base) < 0) {
        session_fail_err(&e, SESSION_E_OTHER, &e.base);
        tsess_fail(call, &e);
        return;
    }
    a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON *o = list_entry(m, &list[i], tool_call_env(call)->session_id, &e);
        if (o == NULL) {
            store_session_list_free(list, n);
            cJSON_Delete(a);
            tsess_fail(call, &e);
            return;
        }
        cJSON_AddItemToArray(a, o);
    }
    store_session_list_free(list, n);
    tool_call_set_summary(call, "%zu open sessions", n);
    tool_call_done_json(call, a);
}

static void
do_session_close(struct tool_call *call)
{
    struct session *s;
    struct tools_env *env = tool_call_env(call);
    struct session_err e;
    char id[STORE_SESSION_ID_LEN + 1], text[256], snap[STORE_SNAPSHOT_NAME_MAX + 1] = "";
    int want = tsnap_close_wanted(call); /* snapshot_on_close; -1: the call has ended */

    if (want < 0) {
        return;
    }
    s = tsess_open(call, 0);
    if (s == NULL) {
        return;
    }
    snprintf(id, sizeof(id), "%s", session_id(s));
    /* Snapshot first and close only if it worked (the reference closes first and loses
     * the session when the snapshot fails). A busy session fails the close below. */
    if (want && !session_busy(s) && tsnap_close_snapshot(s, snap, sizeof(snap), &e) < 0) {
        tsess_fail(call, &e);
        return;
    }
    if (session_close(session_owner(s), s, &e) < 0) {
        if (snap[0] != '\0') {
            struct err derr;
            store_snapshot_delete(env->store, snap, &derr); /* the close did not happen */
        }
        tsess_fail(call, &e);
        return;
    }
    if (strcmp(env->session_id, id) == 0) {
        env->session_id[0] = '\0';
    }
    if (snap[0] != '\0') {
        tool_call_set_summary(call, "closed %s, snapshot '%s'", id, snap);
        snprintf(text, sizeof(text), "closed %s; snapshot '%s'", id, snap);
    } else {
        tool_call_set_summary(call, "closed %s", id);
        snprintf(text, sizeof(text), "closed %s", id);
    }
    tool_call_done_text(call, text);
}

static void
do_session_label(struct tool_call *call)
{
    struct session *s;
    const char *label = tool_call_arg_str(call, "label");
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (store_session_set_label(session_mgr_store(session_owner(s)), session_id(s),
                                label[0] ? label : NULL, &e.base) < 0) {
        session_leave(s, SESSION_WRITE);
        session_fail_err(&e, e.base.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER, &e.base);
        tsess_fail(call, &e);
        return;
    }
    session_leave(s, SESSION_WRITE);
    tool_call_set_summary(call, "label '%.100s'", label);
    done_state(call, s, &d);
}

static void
do_session_chat_record(struct tool_call *call)
{
    struct session *s;
    const char *prompt = tool_call_arg_str(call, "prompt");
    const char *response = tool_call_arg_str(call, "response");
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};

    s = tsess_open(call, SESSION_READ);
    if (s == NULL) {
        return;
    }
    if (store_chat_append(session_mgr_store(session_owner(s)), session_id(s), prompt, response,
                          &e.base) < 0) {
        session_leave(s, SESSION_READ);
        session_fail_err(&e, e.base.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER, &e.base);
        tsess_fail(call, &e);
        return;
    }
    if (session_step(s, -1, "session_chat_record", prompt, &e) < 0) {
        session_leave(s, SESSION_READ);
        tsess_fail(call, &e);
        return;
    }
    session_leave(s, SESSION_READ);
    tool_call_set_summary(call, "chat record");
    done_state(call, s, &d);
}

/* ---- session_tree ---------------------------------------------------------------------- */

struct tree_node {
    cJSON *node;
    cJSON *cps; /* the checkpoints array */
    const struct store_session *ss;
    int placed;
};

static cJSON *
tree_session(struct session_mgr *m, const struct store_session *ss, cJSON **cps_out,
             struct session_err *e)
{
    struct session *att = session_mgr_find(m, ss->id);
    struct store_checkpoint *list = NULL;
    size_t n = 0;
    int64_t now = time_now_ms();
    cJSON *o = cJSON_CreateObject(), *cps;

    if (o == NULL) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        return NULL;
    }
    cJSON_AddStringToObject(o, "session_id", ss->id);
    if (ss->label != NULL) {
        cJSON_AddStringToObject(o, "label", ss->label);
    }
    if (ss->parent_id[0] != '\0') {
        cJSON_AddStringToObject(o, "parent_session_id", ss->parent_id);
        cJSON_AddNumberToObject(o, "parent_checkpoint_id", (double)ss->parent_checkpoint);
    } else {
        cJSON_AddNullToObject(o, "parent_session_id");
        cJSON_AddNullToObject(o, "parent_checkpoint_id");
    }
    cJSON_AddNumberToObject(o, "age_secs", (double)((now - ss->created_ms) / 1000));
    cJSON_AddNumberToObject(o, "idle_secs",
                            att ? (double)session_idle_secs(att)
                                : (double)((now - ss->last_active_ms) / 1000));
    cJSON_AddBoolToObject(o, "running", att != NULL && session_busy(att));
    cJSON_AddBoolToObject(o, "attached", att != NULL);
    cps = cJSON_AddArrayToObject(o, "checkpoints");
    if (store_checkpoint_list(session_mgr_store(m), ss->id, 0, &list, &n, &e->base) < 0) {
        cJSON_Delete(o);
        session_fail_err(e, SESSION_E_OTHER, &e->base);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        cJSON *c = tsess_summary(m, &list[i], ss->head, 1, e);
        if (c == NULL) {
            store_checkpoint_list_free(list, n);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(cps, c);
    }
    store_checkpoint_list_free(list, n);
    *cps_out = cps;
    return o;
}

/* The checkpoint node with this id in a session's checkpoints array, or NULL. */
static cJSON *
find_cp(cJSON *cps, int64_t id)
{
    cJSON *c;
    cJSON_ArrayForEach(c, cps)
    {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "checkpoint_id");
        if (cJSON_IsNumber(v) && (int64_t)v->valuedouble == id) {
            return c;
        }
    }
    return NULL;
}

static void
do_session_tree(struct tool_call *call)
{
    struct session_mgr *m = tsess_mgr(call);
    struct store_session *list = NULL;
    struct tree_node *nodes = NULL;
    struct session_err e;
    size_t n = 0;
    cJSON *roots = NULL;

    if (m == NULL) {
        return;
    }
    if (store_session_list(session_mgr_store(m), 0, &list, &n, &e.base) < 0) {
        session_fail_err(&e, SESSION_E_OTHER, &e.base);
        tsess_fail(call, &e);
        return;
    }
    nodes = n ? cJSON_malloc(n * sizeof(*nodes)) : NULL;
    roots = cJSON_CreateArray();
    if ((n && nodes == NULL) || roots == NULL) {
        session_fail(&e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        goto fail;
    }
    memset(nodes, 0, n * sizeof(*nodes));
    for (size_t i = 0; i < n; i++) {
        nodes[i].ss = &list[i];
        nodes[i].node = tree_session(m, &list[i], &nodes[i].cps, &e);
        if (nodes[i].node == NULL) {
            goto fail;
        }
    }
    /* Nest each fork under its parent's checkpoint when both are open; else a root. */
    for (size_t i = 0; i < n; i++) {
        const struct store_session *ss = &list[i];
        cJSON *at = NULL;
        for (size_t j = 0; ss->parent_id[0] && j < n && at == NULL; j++) {
            if (j != i && strcmp(list[j].id, ss->parent_id) == 0) {
                at = find_cp(nodes[j].cps, ss->parent_checkpoint);
            }
        }
        if (at != NULL) {
            cJSON *forks = cJSON_GetObjectItemCaseSensitive(at, "forks");
            if (forks == NULL) {
                forks = cJSON_AddArrayToObject(at, "forks");
            }
            cJSON_AddItemToArray(forks, nodes[i].node);
            nodes[i].placed = 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!nodes[i].placed) {
            cJSON_AddItemToArray(roots, nodes[i].node);
        }
    }
    cJSON_free(nodes);
    store_session_list_free(list, n);
    tool_call_set_summary(call, "tree of %zu sessions", n);
    tool_call_done_json(call, roots);
    return;
fail:
    for (size_t i = 0; nodes != NULL && i < n; i++) {
        cJSON_Delete(nodes[i].node);
    }
    cJSON_free(nodes);
    cJSON_Delete(roots);
    store_session_list_free(list, n);
    tsess_fail(call, &e);
}

#define SCHEMA_HEAD                                                                                \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","

static const char no_args_schema[] =
    SCHEMA_HEAD "\"properties\":{},\"additionalProperties\":false}";

static const char switch_schema[] =
    SCHEMA_HEAD "\"properties\":{\"session_id\":{\"type\":\"string\",\"maxLength\":64,"
                "\"description\":\"The session to make active (8 hex characters).\"}},"
                "\"required\":[\"session_id\"],\"additionalProperties\":false}";

static const char fork_schema[] =
    SCHEMA_HEAD "\"properties\":{\"checkpoint_id\":{\"type\":\"integer\",\"minimum\":0,"
                "\"description\":\"Checkpoint to fork from (default: the head).\"},"
                "\"checkpoint_label\":{\"type\":\"string\",\"description\":\"Fork from the "
                "checkpoint with this label (wins over checkpoint_id).\"}," TSESS_ID_PROP
                "},\"additionalProperties\":false}";

static const char id_only_schema[] =
    SCHEMA_HEAD "\"properties\":{" TSESS_ID_PROP "},\"additionalProperties\":false}";

static const char label_schema[] = SCHEMA_HEAD
    "\"properties\":{\"label\":{\"type\":\"string\",\"maxLength\":256,"
    "\"description\":\"The session's label; an empty string clears it.\"}," TSESS_ID_PROP
    "},\"required\":[\"label\"],\"additionalProperties\":false}";

static const char chat_schema[] =
    SCHEMA_HEAD "\"properties\":{\"prompt\":{\"type\":\"string\"},\"response\":{\"type\":"
                "\"string\"}," TSESS_ID_PROP
                "},\"required\":[\"prompt\",\"response\"],\"additionalProperties\":false}";

const struct tool_def tools_session_defs[] = {
    {
        .name = "create_session",
        .title = "Create a session",
        .description = "Create an empty workspace session and make it your active session.",
        .input_schema = no_args_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_create_session,
    },
    {
        .name = "session_switch",
        .title = "Switch session",
        .description = "Make another open session active (also one a previous drun-mcp "
                       "process created). Fails with session_busy if another live process "
                       "holds it.",
        .input_schema = switch_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_session_switch,
    },
    {
        .name = "session_fork",
        .title = "Fork a session",
        .description = "Branch the active session at a checkpoint (default: the head) into a "
                       "new session holding that checkpoint's files; the fork becomes active.",
        .input_schema = fork_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_session_fork,
    },
    {
        .name = "session_list",
        .title = "List sessions",
        .description = "List open sessions: head, checkpoint count, parent, whether this "
                       "process holds it (attached) or which pid does.",
        .input_schema = no_args_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_session_list,
    },
    {
        .name = "session_close",
        .title = "Close a session",
        .description = "Close the active session. Its history stays in the database.",
        .input_schema = id_only_schema,
        .annotations = {0, 1, 0, 0},
        .handler = do_session_close,
    },
    {
        .name = "session_tree",
        .title = "Session tree",
        .description = "All open sessions as a tree: forks nested under the checkpoint they "
                       "branched from, with each session's checkpoints.",
        .input_schema = no_args_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_session_tree,
    },
    {
        .name = "session_label",
        .title = "Label a session",
        .description = "Set the active session's label (\"\" clears it).",
        .input_schema = label_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_session_label,
    },
    {
        .name = "session_chat_record",
        .title = "Record a chat turn",
        .description = "For the drun chat CLI only; agents must never call this.",
        .input_schema = chat_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_session_chat_record,
    },
};

const size_t tools_session_count = sizeof(tools_session_defs) / sizeof(tools_session_defs[0]);
