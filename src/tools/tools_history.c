/*
 * tools_history.c - the history tools: session_history, get_session_state,
 * session_rollback, session_diff, session_merge, session_checkpoint_label,
 * session_checkpoint_squash, session_checkpoint_drop and checkpoint_read_stdstreams.
 *
 * Checkpoint ids are stable (see session.h): a label or id names the same checkpoint
 * for the life of the session. Where a tool takes both a label and an id, the label
 * wins, as in the original.
 */
#include "tools/tools_sess.h"

#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "util/mem.h"
#include "util/pathkey.h"

/* Ends the call with the CheckpointSummary array of s. */
static void
done_history(struct tool_call *call, struct session *s)
{
    struct session_err e;
    cJSON *a = tsess_history(session_owner(s), session_id(s), &e);

    if (a == NULL) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_done_json(call, a);
}

static void
do_history(struct tool_call *call)
{
    struct session *s;
    struct session_err e;

    s = tsess_open_read(call);
    if (s == NULL) {
        return;
    }
    session_leave(s, SESSION_READ);
    if (session_step(s, -1, "session_history", tool_call_arg_str(call, "description"), &e) < 0) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_set_summary(call, "history");
    done_history(call, s);
}

static void
do_state(struct tool_call *call)
{
    struct session *s;
    struct session_err e;
    cJSON *st;

    s = tsess_open_read(call);
    if (s == NULL) {
        return;
    }
    session_leave(s, SESSION_READ);
    if (session_step(s, -1, "get_session_state", tool_call_arg_str(call, "description"), &e) < 0 ||
        (st = tsess_state(s, NULL, &e)) == NULL) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_set_summary(call, "state at checkpoint %lld", (long long)session_head(s));
    tool_call_done_json(call, st);
}

static void
do_rollback(struct tool_call *call)
{
    struct session *s;
    const char *label = tool_call_arg_str(call, "checkpoint_label");
    int64_t id = tsess_arg_id(call, "checkpoint_id"), cp;
    struct session_delta d;
    struct session_err e;
    cJSON *st;

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (label == NULL && id < 0) {
        session_leave(s, SESSION_WRITE);
        tool_call_done_error(call, TOOL_ERR_INTERNAL,
                             "provide checkpoint_id or checkpoint_label (see session_history)",
                             NULL);
        return;
    }
    if (session_resolve(s, label, id, -1, &cp, &e) < 0 || session_rollback(s, cp, &d, &e) < 0 ||
        session_step(s, cp, "session_rollback", tool_call_arg_str(call, "description"), &e) < 0) {
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        return;
    }
    session_leave(s, SESSION_WRITE);
    tool_call_set_summary(call, "rolled back to %lld", (long long)cp);
    st = tsess_state(s, &d, &e);
    if (st == NULL) {
        tsess_fail(call, &e);
        return;
    }
    /* Files the command made that no checkpoint could hold (bad names, FIFOs) are gone. */
    cJSON_AddNumberToObject(st, "removed_unstorable", (double)d.removed_unstorable);
    tool_call_done_json(call, st);
}

/* Normalizes the `paths` argument into keys (caller frees each and the array). */
static int
norm_paths(const cJSON *paths, char ***out, size_t *n, struct session_err *e)
{
    const cJSON *p;
    size_t cap = (size_t)cJSON_GetArraySize(paths);
    char **v = mem_calloc(cap ? cap : 1, sizeof(*v));

    *n = 0;
    if (v == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    cJSON_ArrayForEach(p, paths)
    {
        struct buf k;
        buf_init(&k, PATHKEY_MAX + 1);
        if (pathkey_normalize(p->valuestring, strlen(p->valuestring), &k, &e->base) < 0 ||
            (v[*n] = buf_detach(&k, NULL)) == NULL) {
            buf_release(&k);
            for (size_t i = 0; i < *n; i++) {
                mem_free(v[i]);
            }
            mem_free(v);
            return session_fail_err(e, SESSION_E_BAD_PATH, &e->base);
        }
        (*n)++;
    }
    *out = v;
    return 0;
}

static void
do_diff(struct tool_call *call)
{
    struct session *s;
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(tool_call_args(call), "paths");
    struct ws_manifest *fm = NULL, *tm = NULL;
    char **keys = NULL;
    size_t nk = 0;
    int64_t from, to;
    struct session_err e;
    struct buf out;
    long at;
    size_t n_live;
    const int64_t *live;

    s = tsess_open_read(call);
    if (s == NULL) {
        return;
    }
    buf_init(&out, SESSION_READ_MAX);
    live = session_live_ids(s, &n_live);
    if (session_resolve(s, tool_call_arg_str(call, "to_checkpoint_label"),
                        tsess_arg_id(call, "to_checkpoint_id"), session_head(s), &to, &e) < 0) {
        goto fail;
    }
    /* Default from: the live checkpoint before `to` (ids are stable, not dense). */
    at = 0;
    for (size_t i = 0; i < n_live; i++) {
        if (live[i] == to) {
            at = (long)i;
        }
    }
    if (session_resolve(s, tool_call_arg_str(call, "from_checkpoint_label"),
                        tsess_arg_id(call, "from_checkpoint_id"), live[at > 0 ? at - 1 : 0], &from,
                        &e) < 0 ||
        (paths != NULL && norm_paths(paths, &keys, &nk, &e) < 0) ||
        session_load_manifest(session_owner(s), session_id(s), from, &fm, &e) < 0 ||
        session_load_manifest(session_owner(s), session_id(s), to, &tm, &e) < 0 ||
        session_diff(session_owner(s), fm, tm, (const char *const *)keys, nk, &out, &e) < 0 ||
        session_step(s, -1, "session_diff", tool_call_arg_str(call, "description"), &e) < 0) {
        goto fail;
    }
    session_leave(s, SESSION_READ);
    tool_call_set_summary(call, "diff %lld..%lld", (long long)from, (long long)to);
    tool_call_done_text(call, out.len ? buf_cstr(&out) : "no changes");
    goto out;
fail:
    session_leave(s, SESSION_READ);
    tsess_fail(call, &e);
out:
    for (size_t i = 0; i < nk; i++) {
        mem_free(keys[i]);
    }
    mem_free(keys);
    ws_manifest_free(fm);
    ws_manifest_free(tm);
    buf_release(&out);
}

/*
 * Resolves the source checkpoint of a merge from the store (the source need not be
 * attached here, and is not claimed: reading committed checkpoints is safe).
 */
static int
merge_source(struct session_mgr *m, const char *src, const char *label, int64_t id, int64_t *out,
             struct session_err *e)
{
    struct store_session ss;
    struct store_checkpoint cp;

    if (store_session_get(session_mgr_store(m), src, &ss, &e->base) < 0 ||
        ss.state != STORE_SESSION_OPEN) {
        if (e->base.code == ERR_OK || e->base.code == ERR_NOTFOUND || ss.state != 0) {
            store_session_release(&ss);
            return session_fail(e, SESSION_E_NOT_FOUND, ERR_NOTFOUND,
                                "session '%.64s' not found; call session_list to see open "
                                "sessions",
                                src);
        }
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    *out = ss.head;
    store_session_release(&ss);
    if (label != NULL) {
        if (store_checkpoint_find_label(session_mgr_store(m), src, label, out, &e->base) < 0) {
            return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                                "no checkpoint with label '%.200s' in session '%s'", label, src);
        }
        return 0;
    }
    if (id >= 0) {
        memset(&cp, 0, sizeof(cp));
        if (store_checkpoint_get(session_mgr_store(m), src, id, &cp, &e->base) < 0 ||
            cp.status != STORE_CP_LIVE) {
            store_checkpoint_release(&cp);
            return session_fail(e, SESSION_E_CP_NOT_FOUND, ERR_NOTFOUND,
                                "checkpoint %lld does not exist in session '%s'", (long long)id,
                                src);
        }
        store_checkpoint_release(&cp);
        *out = id;
    }
    return 0;
}

static void
do_merge(struct tool_call *call)
{
    struct session *s;
    const char *src = tool_call_arg_str(call, "source_session_id");
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(tool_call_args(call), "keys");
    struct ws_manifest *sm = NULL;
    struct session_edit *ed = NULL;
    struct session_commit_meta meta;
    struct session_err e;
    int64_t cp;

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (strcmp(src, session_id(s)) == 0) {
        session_fail(&e, SESSION_E_OTHER, ERR_INVAL,
                     "cannot merge a session with itself; use session_rollback or fork first");
        goto fail;
    }
    if (merge_source(session_owner(s), src, tool_call_arg_str(call, "source_checkpoint_label"),
                     tsess_arg_id(call, "source_checkpoint_id"), &cp, &e) < 0 ||
        session_load_manifest(session_owner(s), src, cp, &sm, &e) < 0 ||
        session_edit_begin(s, &ed, &e) < 0) {
        goto fail;
    }
    if (keys != NULL) {
        const cJSON *k;
        cJSON_ArrayForEach(k, keys)
        {
            const struct ws_entry *ent;
            if (session_lookup(sm, k->valuestring, "source checkpoint", &ent, &e) < 0 ||
                session_edit_put(ed, ent, &e) < 0) {
                goto fail;
            }
        }
    } else {
        for (size_t i = 0; i < ws_manifest_count(sm); i++) {
            if (session_edit_put(ed, ws_manifest_at(sm, i), &e) < 0) {
                goto fail;
            }
        }
    }
    ws_manifest_free(sm);
    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_merge";
    meta.description = tool_call_arg_str(call, "description");
    tool_call_set_summary(call, "merged %s@%lld", src, (long long)cp);
    tsess_commit(call, s, ed, &meta);
    return;
fail:
    ws_manifest_free(sm);
    session_edit_abort(ed);
    session_leave(s, SESSION_WRITE);
    tsess_fail(call, &e);
}

static void
do_cp_label(struct tool_call *call)
{
    struct session *s;
    const char *label = tool_call_arg_str(call, "label");
    struct session_err e;
    int64_t cp;

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (session_resolve(s, NULL, tsess_arg_id(call, "checkpoint_id"), session_head(s), &cp, &e) <
            0 ||
        session_cp_label(s, cp, label, &e) < 0 ||
        session_step(s, cp, "session_checkpoint_label", tool_call_arg_str(call, "description"),
                     &e) < 0) {
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        return;
    }
    session_leave(s, SESSION_WRITE);
    tool_call_set_summary(call, "label %lld '%.100s'", (long long)cp, label);
    done_history(call, s);
}

static void
do_squash(struct tool_call *call)
{
    struct session *s;
    struct session_err e;
    int64_t from = tsess_arg_id(call, "from_checkpoint_id");
    int64_t to = tsess_arg_id(call, "to_checkpoint_id");

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (session_squash(s, from, to, tool_call_arg_str(call, "label"), &e) < 0) {
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        return;
    }
    session_leave(s, SESSION_WRITE);
    tool_call_set_summary(call, "squash %lld..%lld", (long long)from, (long long)to);
    done_history(call, s);
}

static void
do_drop(struct tool_call *call)
{
    struct session *s;
    struct session_err e;
    int64_t from = tsess_arg_id(call, "from_checkpoint_id");
    int64_t to = tsess_arg_id(call, "to_checkpoint_id");

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (session_drop(s, from, to, &e) < 0) {
        session_leave(s, SESSION_WRITE);
        tsess_fail(call, &e);
        return;
    }
    session_leave(s, SESSION_WRITE);
    tool_call_set_summary(call, "drop %lld..%lld", (long long)from, (long long)to);
    done_history(call, s);
}

static void
do_stdstreams(struct tool_call *call)
{
    struct session *s;
    const char *stream = tool_call_arg_str(call, "stream");
    const char *pattern = tool_call_arg_str(call, "pattern");
    int64_t offset = tsess_arg_id(call, "offset"), limit = tsess_arg_id(call, "limit");
    struct store_checkpoint cp;
    struct session_err e;
    struct buf b;
    cJSON *o = NULL;
    int64_t id, bytes;
    int err_stream;

    s = tsess_open_read(call);
    if (s == NULL) {
        return;
    }
    memset(&cp, 0, sizeof(cp));
    buf_init(&b, (size_t)1 << 30);
    if (stream == NULL) {
        stream = "stdout";
    }
    err_stream = strcmp(stream, "stderr") == 0;
    if (!err_stream && strcmp(stream, "stdout") != 0) {
        session_fail(&e, SESSION_E_OTHER, ERR_INVAL,
                     "unknown stream '%.64s'; use 'stdout' or 'stderr'", stream);
        goto fail;
    }
    if (session_resolve(s, NULL, tsess_arg_id(call, "checkpoint_id"), session_head(s), &id, &e) <
        0) {
        goto fail;
    }
    if (store_checkpoint_get(session_mgr_store(session_owner(s)), session_id(s), id, &cp, &e.base) <
        0) {
        session_fail_err(&e, SESSION_E_OTHER, &e.base);
        goto fail;
    }
    bytes = err_stream ? cp.stderr_bytes : cp.stdout_bytes;
    if (bytes > 0 &&
        store_blob_get(session_mgr_store(session_owner(s)),
                       err_stream ? cp.stderr_hash : cp.stdout_hash, &b, &e.base) < 0) {
        session_fail_err(&e, SESSION_E_OTHER, &e.base);
        goto fail;
    }
    if (session_step(s, -1, "checkpoint_read_stdstreams", tool_call_arg_str(call, "description"),
                     &e) < 0) {
        goto fail;
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "stream", stream);
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)id);
    if (pattern != NULL) {
        struct session_grep g;
        size_t len = b.len;
        size_t start = offset < 0 ? 0 : (uint64_t)offset > len ? len : (size_t)offset;
        size_t end = limit < 0 || (uint64_t)limit > len - start ? len : start + (size_t)limit;
        cJSON *arr;
        if (session_grep(pattern, b.data ? b.data + start : "", end - start, (int64_t)start, &g,
                         &e) < 0) {
            goto fail;
        }
        cJSON_AddNumberToObject(o, "total_matches", (double)g.n);
        arr = cJSON_AddArrayToObject(o, "matches");
        for (size_t i = 0; i < g.n; i++) {
            cJSON *mo = cJSON_CreateObject();
            cJSON_AddNumberToObject(mo, "line_number", (double)g.matches[i].line_number);
            cJSON_AddNumberToObject(mo, "byte_offset", (double)g.matches[i].byte_offset);
            cJSON_AddStringToObject(mo, "line", g.matches[i].line);
            cJSON_AddItemToArray(arr, mo);
        }
        session_grep_release(&g);
    } else {
        if (cp.has_exit_code) {
            cJSON_AddNumberToObject(o, "exit_code", cp.exit_code);
        } else {
            cJSON_AddNullToObject(o, "exit_code");
        }
        if (tsess_page(o, b.data ? b.data : "", b.len, offset, limit, &e) < 0) {
            goto fail;
        }
    }
    store_checkpoint_release(&cp);
    buf_release(&b);
    session_leave(s, SESSION_READ);
    tool_call_set_summary(call, "%s of checkpoint %lld", stream, (long long)id);
    tool_call_done_json(call, o);
    return;
fail:
    cJSON_Delete(o);
    store_checkpoint_release(&cp);
    buf_release(&b);
    session_leave(s, SESSION_READ);
    tsess_fail(call, &e);
}

/* clang-format off */
#define SCHEMA_HEAD \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
#define DESC_PROP \
    "\"description\":{\"type\":\"string\",\"description\":\"Why you are doing this (recorded " \
    "in the history).\"}"
#define ID_PROP(name, what) \
    "\"" name "\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"" what "\"}"
#define LABEL_PROP(name, what) "\"" name "\":{\"type\":\"string\",\"description\":\"" what "\"}"
#define TAIL_REQ(req) "," TSESS_ID_PROP "},\"required\":[" req "],\"additionalProperties\":false}"

static const char desc_schema[] =
    SCHEMA_HEAD "\"properties\":{" DESC_PROP TAIL_REQ("\"description\"");

static const char rollback_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    ID_PROP("checkpoint_id", "Checkpoint to move the head to.") ","
    LABEL_PROP("checkpoint_label", "Or its label (wins).") ","
    DESC_PROP TAIL_REQ("\"description\"");

static const char diff_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    ID_PROP("from_checkpoint_id", "Default: the checkpoint before to.") ","
    LABEL_PROP("from_checkpoint_label", "Wins over from_checkpoint_id.") ","
    ID_PROP("to_checkpoint_id", "Default: the head.") ","
    LABEL_PROP("to_checkpoint_label", "Wins over to_checkpoint_id.") ","
    "\"paths\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":10000,"
    "\"description\":\"Only these keys.\"},"
    DESC_PROP TAIL_REQ("\"description\"");

static const char merge_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    "\"source_session_id\":{\"type\":\"string\",\"maxLength\":64},"
    ID_PROP("source_checkpoint_id", "Default: the source's head.") ","
    LABEL_PROP("source_checkpoint_label", "Wins over source_checkpoint_id.") ","
    "\"keys\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":10000,"
    "\"description\":\"Only these files (default: all).\"},"
    DESC_PROP TAIL_REQ("\"source_session_id\",\"description\"");

static const char cp_label_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    ID_PROP("checkpoint_id", "Default: the head.") ","
    "\"label\":{\"type\":\"string\",\"maxLength\":256,\"description\":\"An empty string clears it.\"},"
    DESC_PROP TAIL_REQ("\"label\",\"description\"");

static const char squash_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    ID_PROP("from_checkpoint_id", "First of the range (>= 1).") ","
    ID_PROP("to_checkpoint_id", "Last of the range; keeps its id.") ","
    "\"label\":{\"type\":\"string\",\"maxLength\":256},"
    DESC_PROP TAIL_REQ("\"from_checkpoint_id\",\"to_checkpoint_id\",\"description\"");

static const char drop_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    ID_PROP("from_checkpoint_id", "First of the range (>= 1).") ","
    ID_PROP("to_checkpoint_id", "Last of the range.") ","
    DESC_PROP TAIL_REQ("\"from_checkpoint_id\",\"to_checkpoint_id\",\"description\"");

static const char streams_schema[] =
    SCHEMA_HEAD "\"properties\":{"
    ID_PROP("checkpoint_id", "Default: the head.") ","
    "\"stream\":{\"type\":\"string\",\"enum\":[\"stdout\",\"stderr\"],"
    "\"description\":\"stdout (default) or stderr.\"},"
    ID_PROP("offset", "Byte offset.") ","
    ID_PROP("limit", "Most bytes.") ","
    "\"pattern\":{\"type\":\"string\",\"maxLength\":4096,"
    "\"description\":\"Regular expression: return matching lines.\"},"
    DESC_PROP TAIL_REQ("\"description\"");
/* clang-format on */

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char streams_out[] = TSESS_OUT_OBJECT(
    "\"stream\":{\"enum\":[\"stdout\",\"stderr\"]},\"checkpoint_id\":" J_INT
    ",\"exit_code\":" J_INT_NULL ",\"offset\":" J_INT ",\"length\":" J_INT ",\"total_bytes\":" J_INT
    ",\"has_more\":" J_BOOL ",\"encoding\":{\"enum\":[\"text\",\"base64\"]},\"content\":" J_STR
    ",\"total_matches\":" J_INT ",\"matches\":" J_OBJS,
    "\"stream\",\"checkpoint_id\"");

const struct tool_def tools_history_defs[] = {
    {
        .name = "session_history",
        .title = "Checkpoint history",
        .description = "List the active session's checkpoints (ids are stable).",
        .input_schema = desc_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_history,
    },
    {
        .name = "get_session_state",
        .title = "Session state",
        .description = "The head checkpoint: id, file count, output sizes, exit code, and what "
                       "it changed.",
        .input_schema = desc_schema,
        .annotations = {1, 0, 1, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_state,
    },
    {
        .name = "session_rollback",
        .title = "Roll back",
        .description = "Move the head to an earlier checkpoint. The next change discards the "
                       "checkpoints after it; fork first to keep them.",
        .input_schema = rollback_schema,
        .annotations = {0, 1, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_rollback,
    },
    {
        .name = "session_diff",
        .title = "Diff checkpoints",
        .description = "Unified diff between two checkpoints (default: the head against the one "
                       "before it).",
        .input_schema = diff_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_diff,
    },
    {
        .name = "session_checkpoint_label",
        .title = "Label a checkpoint",
        .description = "Name a checkpoint (default: the head) so rollback, fork and diff can "
                       "use the label.",
        .input_schema = cp_label_schema,
        .annotations = {0, 0, 0, 0},
        .handler = do_cp_label,
    },
    {
        .name = "session_checkpoint_squash",
        .title = "Squash checkpoints",
        .description = "Fold checkpoints from..to into one; it keeps to's id and files.",
        .input_schema = squash_schema,
        .annotations = {0, 1, 0, 0},
        .handler = do_squash,
    },
    {
        .name = "session_checkpoint_drop",
        .title = "Drop checkpoints",
        .description = "Remove checkpoints from..to from the history (the head must be outside "
                       "the range). Other ids do not change.",
        .input_schema = drop_schema,
        .annotations = {0, 1, 0, 0},
        .handler = do_drop,
    },
    {
        .name = "session_merge",
        .title = "Merge from a session",
        .description = "Copy files (all, or keys) from another session's checkpoint onto the "
                       "head as one checkpoint. Never deletes.",
        .input_schema = merge_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_merge,
    },
    {
        .name = "checkpoint_read_stdstreams",
        .title = "Read command output",
        .description = "Read a checkpoint's stdout or stderr, paged by offset/limit or "
                       "filtered by pattern.",
        .input_schema = streams_schema,
        .annotations = {1, 0, 1, 0},
        .output_schema = streams_out,
        .handler = do_stdstreams,
    },
};

const size_t tools_history_count = sizeof(tools_history_defs) / sizeof(tools_history_defs[0]);
