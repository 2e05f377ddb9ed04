/*
 * tools_testing.c - tools that exist only in build/tests/drun-mcp-testing.
 *
 * The client tests need a tool that is slow on purpose (to see progress and to cancel
 * it) and one that echoes typed arguments (to exercise the schema check end to end).
 * They are linked only into the testing binary, which defines tools_testing_register()
 * for the registry's weak hook; build/drun-mcp never contains them.
 */
#include <stdio.h>

#include <uv.h>

#include "tools/tools.h"
#include "util/mem.h"

struct slow {
    uv_timer_t timer;
    struct tool_call *call;
    int64_t step, steps;
};

static void
slow_closed(uv_handle_t *h)
{
    mem_free(h->data);
}

static void
slow_end(struct slow *sl)
{
    uv_timer_stop(&sl->timer);
    sl->timer.data = sl;
    uv_close((uv_handle_t *)&sl->timer, slow_closed);
}

static void
slow_tick(uv_timer_t *t)
{
    struct slow *sl = t->data;
    char msg[64];

    sl->step++;
    snprintf(msg, sizeof(msg), "step %lld of %lld", (long long)sl->step, (long long)sl->steps);
    tool_call_progress(sl->call, (double)sl->step, (double)sl->steps, msg);
    if (sl->step >= sl->steps) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "steps", (double)sl->steps);
        tool_call_set_summary(sl->call, "testing_slow: %lld steps", (long long)sl->steps);
        tool_call_done_json(sl->call, r);
        slow_end(sl);
    }
}

static void
slow_cancel(struct tool_call *call, void *arg)
{
    struct slow *sl = arg;

    tool_call_set_summary(call, "testing_slow: cancelled after %lld steps", (long long)sl->step);
    slow_end(sl);
    tool_call_done_error(call, TOOL_ERR_CANCELLED, "the call was cancelled", NULL);
}

static void
testing_slow(struct tool_call *call)
{
    struct slow *sl = mem_calloc(1, sizeof(*sl));
    int64_t interval = tool_call_arg_int(call, "interval_ms", 20);

    if (sl == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    sl->call = call;
    sl->steps = tool_call_arg_int(call, "steps", 5);
    uv_timer_init(tool_call_env(call)->loop, &sl->timer);
    sl->timer.data = sl;
    uv_timer_start(&sl->timer, slow_tick, (uint64_t)interval, (uint64_t)interval);
    tool_call_on_cancel(call, slow_cancel, sl);
}

static void
testing_echo(struct tool_call *call)
{
    tool_call_done_json(call, cJSON_Duplicate(tool_call_args(call), 1));
}

static const struct tool_def testing_defs[] = {
    {
        .name = "testing_slow",
        .title = "Slow on purpose (tests only)",
        .description = "Counts `steps` ticks `interval_ms` apart, sending progress; cancellable.",
        .input_schema = "{\"type\":\"object\",\"properties\":{"
                        "\"steps\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":100000},"
                        "\"interval_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":60000}},"
                        "\"additionalProperties\":false}",
        .annotations = {.read_only = 1, .idempotent = 1},
        .handler = testing_slow,
    },
    {
        .name = "testing_echo",
        .title = "Echo arguments (tests only)",
        .description = "Returns its arguments.",
        .input_schema =
            "{\"type\":\"object\",\"properties\":{"
            "\"text\":{\"type\":\"string\",\"maxLength\":10},"
            "\"count\":{\"type\":\"integer\",\"minimum\":1},"
            "\"flag\":{\"type\":\"boolean\"},"
            "\"mode\":{\"type\":\"string\",\"enum\":[\"fast\",\"slow\"]},"
            "\"items\":{\"type\":\"array\",\"maxItems\":3,\"items\":{\"type\":\"string\"}},"
            "\"entries\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
            "\"path\":{\"type\":\"string\"}},\"required\":[\"path\"],"
            "\"additionalProperties\":false}}},"
            "\"required\":[\"text\"],\"additionalProperties\":false}",
        .annotations = {.read_only = 1, .idempotent = 1},
        .handler = testing_echo,
    },
};

int tools_testing_register(struct err *err);

int
tools_testing_register(struct err *err)
{
    return tools_register(testing_defs, sizeof(testing_defs) / sizeof(testing_defs[0]), err);
}
