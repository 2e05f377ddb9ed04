/*
 * tools_extract.c - session_extract_text: arguments in, one call to the session layer
 * (session_extract_start, which runs the parser in its own sandbox on the daemon's loop;
 * extract_done finishes it), JSON out.
 */
#include "tools/tools_sess.h"

#include <string.h>

#include "policy/policy.h"
#include "util/mem.h"

struct extract_call {
    struct tool_call *call;
    struct session *s;
    struct session_extract *x;
};

static void
extract_on_cancel(struct tool_call *call, void *arg)
{
    struct extract_call *ec = arg;

    (void)call;
    session_extract_cancel(ec->x);
}

/* The parser finished (or was cancelled): commit or report, and end the call. */
static void
extract_done(void *ud)
{
    struct extract_call *ec = ud;
    struct tool_call *call = ec->call;
    struct session *s = ec->s;
    struct session_extract *x = ec->x;
    struct session_extract_result r;
    struct store_audit row;
    struct session_err e;
    cJSON *res;
    int rc;

    tool_call_on_cancel(call, NULL, NULL);
    mem_free(ec);
    tool_call_audit_prepare(call, &row);
    rc = session_extract_finish(x, &row, &r, &e);
    session_leave(s, SESSION_WRITE);
    if (rc < 0) {
        tsess_fail(call, &e);
        return;
    }
    tool_call_audit_taken(call);
    tool_call_set_checkpoint(call, r.checkpoint_id);
    tool_call_set_summary(call, "extracted %lld pages to '%s'", (long long)r.pages, r.saved_to);
    res = cJSON_CreateObject();
    if (res == NULL) {
        session_extract_result_release(&r);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    cJSON_AddStringToObject(res, "saved_to", r.saved_to);
    cJSON_AddNumberToObject(res, "checkpoint_id", (double)r.checkpoint_id);
    cJSON_AddNumberToObject(res, "pages", (double)r.pages);
    cJSON_AddNumberToObject(res, "chars", (double)r.chars);
    cJSON_AddBoolToObject(res, "truncated", r.truncated);
    session_extract_result_release(&r);
    tool_call_done_json(call, res);
}

static void
do_extract_text(struct tool_call *call)
{
    struct session_extract_opts o;
    struct session_err e;
    struct policy *p = NULL;
    struct extract_call *ec;

    memset(&o, 0, sizeof(o));
    o.path = tool_call_arg_str(call, "path");
    o.save_to = tool_call_arg_str(call, "save_to");
    o.description = tool_call_arg_str(call, "description");
    o.first_page = tool_call_arg_int(call, "first_page", 0);
    o.last_page = tool_call_arg_int(call, "last_page", 0);
    o.layout = tool_call_arg_bool(call, "layout", 0);
    if (o.first_page > 0 && o.last_page > 0 && o.first_page > o.last_page) {
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS,
                             "first_page must not be greater than last_page", NULL);
        return;
    }
    if (tools_policy(call, &p) < 0) {
        return;
    }
    o.timeout_ms = p->extract_timeout_ms;
    o.max_text_bytes = (uint64_t)p->extract_max_mb << 20;
    o.memory_bytes = (uint64_t)p->sandbox_memory_mb << 20;
    o.cpu_secs = (uint64_t)p->sandbox_cpu_secs;
    policy_unref(p);

    ec = mem_calloc(1, sizeof(*ec));
    if (ec == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    ec->call = call;
    ec->s = tsess_open(call, SESSION_WRITE);
    if (ec->s == NULL) {
        mem_free(ec);
        return;
    }
    if (session_extract_start(tool_call_env(call)->loop, ec->s, &o, extract_done, ec, &ec->x, &e) <
        0) {
        session_leave(ec->s, SESSION_WRITE);
        mem_free(ec);
        tsess_fail(call, &e);
        return;
    }
    tool_call_on_cancel(call, extract_on_cancel, ec);
}

static const char extract_schema[] =
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"Workspace key of a .pdf "
    "file.\"},\"save_to\":{\"type\":\"string\",\"description\":\"Workspace key for the text "
    "(default: <path>.txt).\"},\"first_page\":{\"type\":\"integer\",\"minimum\":1,"
    "\"description\":\"First page to extract.\"},\"last_page\":{\"type\":\"integer\","
    "\"minimum\":1,\"description\":\"Last page to extract.\"},\"layout\":{\"type\":"
    "\"boolean\",\"description\":\"Keep the physical layout (columns, tables).\"},"
    "\"description\":{\"type\":\"string\",\"description\":\"Why you are doing this (recorded "
    "in the history).\"}," TSESS_ID_PROP
    "},\"required\":[\"path\",\"description\"],\"additionalProperties\":false}";

const struct tool_def tools_extract_defs[] = {
    {
        .name = "session_extract_text",
        .title = "Extract PDF text",
        .description = "Extract the text of a workspace PDF into a text file (one checkpoint); "
                       "pages end with a form feed. Returns saved_to, checkpoint_id, pages, "
                       "chars, truncated.",
        .input_schema = extract_schema,
        .annotations = {0, 0, 0, 0},
        .handler = do_extract_text,
    },
};

const size_t tools_extract_count = sizeof(tools_extract_defs) / sizeof(tools_extract_defs[0]);
