/*
 * tools.h - the tool registry and the call lifecycle, as the protocol layer sees them.
 *
 * The registry holds every tool this binary serves, in drun's fixed order (the original's
 * tools/list order; tools that do not exist yet are simply absent, tools the order does
 * not name come last in registration order). Each schema is parsed once at
 * registration, so a typo in a schema literal stops start-up instead of failing calls.
 *
 * A call is made with tools_call_new() and started with tools_call_run(): the arguments
 * are checked against the schema (a failure is answered at once as an invalid_arguments
 * tool error) and the handler runs. The end of the call reaches the protocol layer
 * through host->respond, exactly once per call (with NULL if it was cancelled), and the
 * call is freed right after; the protocol layer must forget the pointer then. Progress
 * reaches it through host->progress. tools_call_cancel() runs the tool's cancel hook.
 */
#ifndef DRUN_TOOLS_TOOLS_H
#define DRUN_TOOLS_TOOLS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "tools/tool.h"
#include "util/buf.h"
#include "util/err.h"

#define TOOLS_MAX 128 /* tools one binary may register */

/*
 * Registers the built-in tool families in the fixed order, then the test-only tools if
 * the binary was linked with them (a weak tools_testing_register()). Idempotent.
 */
int tools_registry_init(struct err *err);

/* Adds tools (static storage; not copied). Names must be unique. */
int tools_register(const struct tool_def *defs, size_t n, struct err *err);

/* Forgets every tool (tests, and exit so leak checkers stay quiet). */
void tools_registry_reset(void);

/* Returns the tool with this name, or NULL. */
const struct tool_def *tools_find(const char *name);

/* Returns how many tools are registered and the i-th in list order. */
size_t tools_count(void);
const struct tool_def *tools_at(size_t i);

/* Returns the tools/list array (caller frees with cJSON_Delete), or NULL on no memory. */
cJSON *tools_list_json(void);

/* Returns the parsed schema of a registered tool; borrowed. */
const cJSON *tools_schema(const struct tool_def *def);

/*
 * Checks `value` against the subset of JSON Schema drun's tools use: type (object,
 * string, integer, number, boolean, array), properties, required,
 * additionalProperties: false, enum, minimum/maximum, minLength/maxLength (in
 * characters), minItems/maxItems, items. Returns 0, or -1 with a message in `msg`
 * naming the argument and what was expected ("argument 'command' must be a string").
 */
int tools_schema_check(const cJSON *schema, const cJSON *value, struct buf *msg);

/* What the protocol layer gives each call. */
struct tool_call_host {
    /*
     * Called exactly once per call, when it ends: with the tools/call result (ownership
     * passes), or with NULL if the call was cancelled (send nothing). The call is freed
     * right after; the host forgets its pointer here.
     */
    void (*respond)(void *ctx, cJSON *result);
    /* Sends notifications/progress with these params (ownership passes). */
    void (*progress)(void *ctx, cJSON *params);
    void *ctx;
};

struct tool_call_req {
    const struct tool_def *def;
    const cJSON *arguments;      /* the request's "arguments"; NULL means {} (copied) */
    const cJSON *progress_token; /* _meta.progressToken or NULL (copied) */
    const char *client_name;     /* for this request (initialize or _meta); may be NULL */
    const char *client_version;
    /*
     * Non-NULL when the transport found something in the arguments that drun cannot
     * carry (a NUL, a lone surrogate): the call ends at once, before the schema check,
     * as an invalid_arguments tool error with this message (copied).
     */
    const char *refusal;
};

/*
 * Makes a call without starting it, so the host can keep the handle before the tool
 * runs. Returns NULL on no memory (the host answers with an internal error itself).
 */
struct tool_call *tools_call_new(struct tools_env *env, const struct tool_call_req *req,
                                 const struct tool_call_host *host);

/*
 * Checks the arguments against the schema (a failure ends the call at once with an
 * invalid_arguments tool error) and runs the handler. The call may end before this
 * returns (host->respond called, call freed).
 */
void tools_call_run(struct tool_call *call);

/*
 * Cancels a call in flight: its result will not be sent, and the tool's cancel hook
 * (if any) runs now. The call still ends (respond with NULL) only when the tool calls
 * done; a tool without a hook simply runs to its end.
 */
void tools_call_cancel(struct tool_call *call);

/*
 * Stops what the tools keep running in the background on the loop (the database lock
 * waiter); the protocol layer calls it once, before it closes the loop's handles.
 */
void tools_shutdown(struct tools_env *env);

/*
 * Starts the idle reaper on env->loop (tools_reap.c): a timer, unreferenced so it never
 * keeps the loop alive, that closes sessions idle past session_idle_timeout_secs. The
 * protocol layer calls it once the loop runs; tools_shutdown() stops it.
 */
void tools_reaper_start(struct tools_env *env);
void tools_reaper_stop(struct tools_env *env);

/* The tool families, each in its own file. */
extern const struct tool_def tools_config_defs[];
extern const size_t tools_config_count;
extern const struct tool_def tools_session_defs[]; /* tools_session.c */
extern const size_t tools_session_count;
extern const struct tool_def tools_files_defs[]; /* tools_files.c */
extern const size_t tools_files_count;
extern const struct tool_def tools_extract_defs[]; /* tools_extract.c */
extern const size_t tools_extract_count;
extern const struct tool_def tools_history_defs[]; /* tools_history.c */
extern const size_t tools_history_count;
extern const struct tool_def tools_host_defs[];
extern const size_t tools_host_count;
extern const struct tool_def tools_bash_defs[]; /* tools_bash.c */
extern const size_t tools_bash_count;
extern const struct tool_def tools_fetch_defs[]; /* tools_fetch.c */
extern const size_t tools_fetch_count;
extern const struct tool_def tools_snapshot_defs[]; /* tools_snapshot.c */
extern const size_t tools_snapshot_count;

#endif
