/*
 * tool.h - what a tool is, and everything a tool's handler may use.
 *
 * A tool is a static `struct tool_def`: its name, a short title and description (agents
 * pay for every word of a description on every turn, so keep it to what changes how an
 * agent calls it), an input schema as a JSON text literal (JSON Schema 2020-12,
 * "additionalProperties": false, required fields listed), its annotations, and a handler.
 * Each tool family file (tools_config.c, later tools_session.c, tools_bash.c, ...) defines
 * one array of tool_defs and the registry (tools.h) lists them in drun's fixed order.
 *
 * The handler runs on the event loop with a `struct tool_call *`. By the time it runs the
 * arguments have been checked against the schema, so a required string is a string and
 * an unknown key cannot appear. A synchronous tool calls one of the tool_call_done_*()
 * functions before it returns. A tool that waits for something (a child process, a timer)
 * returns without calling done, keeps the call pointer, and calls done later from a loop
 * callback; it registers a cancel hook with tool_call_on_cancel() so that
 * notifications/cancelled and shutdown can stop it. Exactly one done call ends every call,
 * cancelled or not; after it the call pointer is freed and must not be used.
 *
 * Results. tool_call_done_json() sends the object as compact JSON text and as
 * structuredContent; tool_call_done_text() sends plain text; tool_call_done_content()
 * sends content blocks the tool built (an image block); tool_call_done_error() sends a
 * result with isError true whose single text block is {"code","message","detail"?}.
 * Codes are drun's (reference section 1.5) plus invalid_arguments and cancelled.
 *
 * Audit. Every call writes one audit row when it ends (tool, arguments, outcome, error
 * code, duration, client). A tool adds what only it knows: the session it acted on, the
 * checkpoint it made, and a one-line summary.
 */
#ifndef DRUN_TOOLS_TOOL_H
#define DRUN_TOOLS_TOOL_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "util/err.h"

struct policy;
struct policy_store;
struct store;
struct store_audit;
struct session_mgr;
struct tool_call; /* opaque; one per tools/call request */

/* Error codes shared by every tool (reference section 1.5 names the rest). */
#define TOOL_ERR_INVALID_ARGUMENTS "invalid_arguments"
#define TOOL_ERR_INTERNAL          "internal_error"
#define TOOL_ERR_CANCELLED         "cancelled"
#define TOOL_ERR_STORE_BUSY        "store_busy"     /* another process held the DB's write lock */
#define TOOL_ERR_STORE_REPLACED    "store_replaced" /* the DB file was deleted or replaced */

/*
 * The process-wide environment every handler sees. One per drun-mcp process (stdio has
 * one connection, so the connection's active session lives here too). Owned by cmd/;
 * the sessions layer will add its manager pointer.
 */
struct tools_env {
    struct store *store;         /* the open DB */
    void *loop;                  /* the uv_loop_t, opaque above the layers that include uv.h */
    const char *db_path;         /* as given on the command line or by DRUN_DB */
    const char *config_path;     /* the config.toml watched (policy_config_path) */
    struct policy_store *policy; /* the operator's policy and its reload (policy/policy.h) */
    char session_id[16];         /* the connection's active session; "" if none */
    char client_name[128];       /* from initialize's clientInfo; "" if unknown */
    char client_version[64];
    const char *server_version; /* drun's version string */

    struct session_mgr *sessions; /* the attached sessions (session/session.h) */
};

struct tool_annotations {
    int read_only;   /* readOnlyHint */
    int destructive; /* destructiveHint */
    int idempotent;  /* idempotentHint */
    int open_world;  /* openWorldHint */
};

typedef void (*tool_handler_fn)(struct tool_call *call);

struct tool_def {
    const char *name;         /* snake_case, unique */
    const char *title;        /* a few words for humans */
    const char *description;  /* short; for the agent */
    const char *input_schema; /* JSON text of a JSON Schema 2020-12 object schema */
    /* JSON text of the schema every successful result matches (its structuredContent),
     * or NULL for a tool whose results are text, arrays or of more than one kind. */
    const char *output_schema;
    struct tool_annotations annotations;
    tool_handler_fn handler;
};

/* ---- the database's write lock ------------------------------------------------------ */

/*
 * Another process (a drun-admin gc, a sqlite3 shell) may hold the DB's write lock. A
 * handler's synchronous part runs with the store in nowait mode: when a write in it
 * finds the lock held, its failure is not sent; the call is parked off the loop and the
 * handler runs again from the start once the lock is free, or the call ends with
 * store_busy after the busy timeout. A tool's asynchronous part (after its child process)
 * parks itself: it runs its writes with store_set_nowait(st, 1), and when
 * store_would_block(st) says the lock was held, calls tool_call_wait_lock; fn then comes
 * on the loop with TOOL_LOCK_READY (try the writes again), or TOOL_LOCK_TIMEOUT /
 * TOOL_LOCK_CANCELLED (the tool undoes its work and ends the call, e.g. with
 * tool_call_done_store_busy). Returns 0 when parked, -1 when it cannot park (report the
 * error as it is).
 */
enum { TOOL_LOCK_READY, TOOL_LOCK_TIMEOUT, TOOL_LOCK_CANCELLED };
typedef void (*tool_lock_fn)(struct tool_call *call, void *arg, int status);
int tool_call_wait_lock(struct tool_call *call, tool_lock_fn fn, void *arg);
/* Ends the call with store_busy: what was waited for, that nothing changed, to retry. */
void tool_call_done_store_busy(struct tool_call *call);

/* ---- what the handler reads ------------------------------------------------------- */

/* The validated arguments (an object, {} when none were given); borrowed until done. */
const cJSON *tool_call_args(const struct tool_call *call);

/* One argument by name: the string (NULL if absent), integer or boolean (dflt if absent). */
const char *tool_call_arg_str(const struct tool_call *call, const char *name);
int64_t tool_call_arg_int(const struct tool_call *call, const char *name, int64_t dflt);
int tool_call_arg_bool(const struct tool_call *call, const char *name, int dflt);

/* The process environment; borrowed, valid for the life of the process. */
struct tools_env *tool_call_env(const struct tool_call *call);

/*
 * The policy in force for this call, or the call ends. On success *out holds a reference
 * the tool drops with policy_unref() before it finishes, so an edit of config.toml while
 * the call runs does not change its rules. When no good policy was ever loaded the call
 * is ended with a config_error tool error carrying the load error, and -1 is returned:
 * the tool must then return without calling done. A reload that failed while a good
 * policy exists is written to the audit log once per distinct error.
 */
int tools_policy(struct tool_call *call, struct policy **out);

/* The tool being called; borrowed. */
const struct tool_def *tool_call_def(const struct tool_call *call);

/* The calling client's name and version ("" if unknown); borrowed until done. */
const char *tool_call_client_name(const struct tool_call *call);
const char *tool_call_client_version(const struct tool_call *call);

/* ---- progress and cancellation --------------------------------------------------------- */

/* Returns 1 if the request carried _meta.progressToken, so progress reaches someone. */
int tool_call_has_progress(const struct tool_call *call);

/*
 * Sends notifications/progress when the request carried a progress token. `progress`
 * must be strictly greater than the last value sent (a call that is not is dropped, so
 * a client never sees progress go backwards); total < 0 means unknown; message may be
 * NULL (one line; newlines are sent escaped). Rate limiting is the caller's job.
 * Nothing is sent after the call was cancelled.
 */
void tool_call_progress(struct tool_call *call, double progress, double total, const char *message);

typedef void (*tool_cancel_fn)(struct tool_call *call, void *arg);

/*
 * Registers the function that stops this call's work (kills its child, stops its
 * timer). It is called at most once, on the loop, when the client cancels the request
 * or the server shuts down; the tool then finishes with any done function (the result
 * is not sent, and the audit outcome is "cancelled"). Replaces an earlier hook.
 */
void tool_call_on_cancel(struct tool_call *call, tool_cancel_fn fn, void *arg);

/* Returns 1 once the call has been cancelled. */
int tool_call_cancelled(const struct tool_call *call);

/* ---- audit facts ------------------------------------------------------------------ */

/* The session the call acted on (copied). */
void tool_call_set_session(struct tool_call *call, const char *session_id);
/* The checkpoint the call made. */
void tool_call_set_checkpoint(struct tool_call *call, int64_t checkpoint_id);
/* A one-line summary for the audit log (copied, truncated to 200 bytes, newlines escaped). */
void tool_call_set_summary(struct tool_call *call, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * For a tool that commits its own transaction (a checkpoint): fills `row` as the final
 * audit row would be (outcome "ok", duration so far, arguments, client, session,
 * summary), with strings owned by the call until it ends, so the tool can append the
 * row inside its transaction. After that commit it calls tool_call_audit_taken() so the
 * end of the call does not write a second row.
 */
void tool_call_audit_prepare(struct tool_call *call, struct store_audit *row);
void tool_call_audit_taken(struct tool_call *call);

/*
 * The audit row's form of `args`: compact JSON text (cJSON_free) in which every string
 * value over STORE_AUDIT_REF_MIN bytes is a {"$blob":...} reference whose bytes are
 * a part (array: mem_free; each part's data points into args), and agent keys "$blob",
 * "$$blob", ... get one more '$' (store.h describes the shape). -1 on no memory.
 */
struct store_audit_part;
int tool_audit_args(const cJSON *args, char **text, struct store_audit_part **parts,
                    size_t *nparts);

/* ---- finishing (exactly one per call; the call is freed by it) ------------------------- */

/* Sends `result` (an object or array; ownership passes) as compact text + structuredContent. */
void tool_call_done_json(struct tool_call *call, cJSON *result);

/* Sends one text block holding `text`. */
void tool_call_done_text(struct tool_call *call, const char *text);

/* Sends the content blocks in `content` (a cJSON array; ownership passes), e.g. an image. */
void tool_call_done_content(struct tool_call *call, cJSON *content);

/*
 * Sends an isError result whose single text block is {"code","message","detail"?}.
 * detail (ownership passes) may be NULL.
 */
void tool_call_done_error(struct tool_call *call, const char *code, const char *message,
                          cJSON *detail);

/* Same, from a struct err: `code` names the tool error, or NULL for tools_err_code(err). */
void tool_call_done_err(struct tool_call *call, const char *code, const struct err *err);

/*
 * Maps a generic struct err code to a tool error code where the mapping does not depend
 * on the tool (ERR_INVAL -> invalid_arguments, ERR_CANCELLED -> cancelled, ERR_TIMEOUT ->
 * execution_timeout); everything else is internal_error. Context-dependent codes
 * (session_not_found vs file_not_found) are the tool's to name explicitly.
 */
const char *tools_err_code(int err_code);

#endif
