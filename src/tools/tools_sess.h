/*
 * tools_sess.h - helpers shared by the session tool families (tools_session.c,
 * tools_files.c, tools_history.c): finding the call's session, mapping session errors
 * to drun's {code, message, detail}, the SessionState and CheckpointSummary shapes
 * (reference section 4.0), paging, and base64. Private to src/tools/.
 */
#ifndef DRUN_TOOLS_SESS_H
#define DRUN_TOOLS_SESS_H

#include "session/session.h"
#include "tools/tools.h"

/* The schema fragment every session-scoped tool carries (the explicit handle). */
#define TSESS_ID_PROP                                                                              \
    "\"session_id\":{\"type\":\"string\",\"maxLength\":64,\"description\":\"Act on this "          \
    "session instead of the active one (the active session is not changed).\"}"

/*
 * Output schemas (tool_def.output_schema). J_* are property schemas; TSESS_OUT_OBJECT
 * builds an object schema from properties and required names. Objects stay open to keys
 * a later drun adds; the listed ones are always of the listed type.
 */
#define J_STR      "{\"type\":\"string\"}"
#define J_INT      "{\"type\":\"integer\"}"
#define J_BOOL     "{\"type\":\"boolean\"}"
#define J_STR_NULL "{\"type\":[\"string\",\"null\"]}"
#define J_INT_NULL "{\"type\":[\"integer\",\"null\"]}"
#define J_STRS     "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}"
#define J_OBJS     "{\"type\":\"array\",\"items\":{\"type\":\"object\"}}"
#define TSESS_OUT_OBJECT(props, req)                                                               \
    "{\"type\":\"object\",\"properties\":{" props "},\"required\":[" req "]}"

/* SessionState: what most session tools answer (tsess_state). */
#define TSESS_OUT_STATE_PROPS                                                                      \
    "\"session_id\":" J_STR ",\"label\":" J_STR_NULL ",\"checkpoint_id\":" J_INT                   \
    ",\"parent_session_id\":" J_STR ",\"parent_checkpoint_id\":" J_INT ",\"stdout_bytes\":" J_INT  \
    ",\"stderr_bytes\":" J_INT ",\"exit_code\":" J_INT_NULL ",\"workspace_file_count\":" J_INT     \
    ",\"files_added_count\":" J_INT ",\"files_modified_count\":" J_INT                             \
    ",\"files_removed_count\":" J_INT
#define TSESS_OUT_STATE_REQ                                                                        \
    "\"session_id\",\"checkpoint_id\",\"stdout_bytes\",\"stderr_bytes\",\"workspace_file_count\"," \
    "\"files_added_count\",\"files_modified_count\",\"files_removed_count\""
#define TSESS_OUT_STATE TSESS_OUT_OBJECT(TSESS_OUT_STATE_PROPS, TSESS_OUT_STATE_REQ)

/* The manager, or NULL after ending the call with internal_error. */
struct session_mgr *tsess_mgr(struct tool_call *call);

/*
 * The session this call acts on: the `session_id` argument (attached implicitly if no
 * live process holds it) or the connection's active session; then session_enter(mode)
 * unless mode is 0. Records the session for the audit row. On failure ends the call
 * with the matching error (no_active_session, session_not_found, session_busy, ...) and
 * returns NULL; the call is then freed, so read every argument BEFORE calling this.
 */
struct session *tsess_open(struct tool_call *call, int mode);

/*
 * tsess_open(call, SESSION_READ) for the read-only tools (state, history, diff, file
 * reads, stdstreams): a session another live process holds is answered from the DB
 * through a view (session_view) instead of failing with session_busy.
 */
struct session *tsess_open_read(struct tool_call *call);

/*
 * Commits ed as the new checkpoint with its audit row in the same transaction, leaves
 * the session (SESSION_WRITE) and ends the call with SessionState and the deltas, or
 * with the error. ed is consumed.
 */
void tsess_commit(struct tool_call *call, struct session *s, struct session_edit *ed,
                  const struct session_commit_meta *meta);

/* Ends the call with e as {code, message, detail}. */
void tsess_fail(struct tool_call *call, const struct session_err *e);

/* The drun error code for a session error kind. */
const char *tsess_code(const struct session_err *e);

/* Builds SessionState for s's head with the delta (NULL: the head's own counts). */
cJSON *tsess_state(struct session *s, const struct session_delta *d, struct session_err *e);

/* Builds the CheckpointSummary array of s's live checkpoints. */
cJSON *tsess_history(struct session_mgr *m, const char *id, struct session_err *e);

/* One CheckpointSummary (with_current: add is_current for the tree). */
cJSON *tsess_summary(struct session_mgr *m, const struct store_checkpoint *cp, int64_t head,
                     int tree, struct session_err *e);

/* An optional unsigned integer argument: its value, or -1 when absent. */
int64_t tsess_arg_id(struct tool_call *call, const char *name);

/*
 * Adds offset, length, total_bytes, has_more, encoding and content for the slice
 * [offset, offset+limit) of data (limit < 0: to the end) to obj, never splitting a
 * UTF-8 character in a text slice: a slice whose end falls inside a character is
 * shortened to the character boundary (has_more stays true); a slice that is still not
 * valid UTF-8 goes as base64. SESSION_E_TOO_LARGE past SESSION_READ_MAX.
 */
int tsess_page(cJSON *obj, const char *data, size_t len, int64_t offset, int64_t limit,
               struct session_err *e);

/* Standard base64 (RFC 4648, with padding). encode appends to out. */
int tsess_b64_encode(const void *data, size_t len, struct buf *out);
/* Decodes into out; -1 with a message in err on a bad character or length. */
int tsess_b64_decode(const char *in, size_t len, struct buf *out, struct err *err);

#endif
