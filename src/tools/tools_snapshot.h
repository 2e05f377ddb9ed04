/*
 * tools_snapshot.h - what the snapshot tool family (tools_snapshot.c) offers the other
 * session tools: session_close's snapshot_on_close. Private to src/tools/.
 */
#ifndef DRUN_TOOLS_SNAPSHOT_H
#define DRUN_TOOLS_SNAPSHOT_H

#include <stddef.h>

#include "session/session.h"
#include "tools/tools.h"

/*
 * The policy's snapshot_on_close for this call: 1 or 0, or -1 after ending the call
 * with config_error (no good policy was ever loaded: whether to snapshot is unknown,
 * so the close is refused rather than risk losing the history the operator asked for).
 */
int tsnap_close_wanted(struct tool_call *call);

/*
 * Takes the DB snapshot "<session id>-close-<UTC time>" of s before it is closed and
 * writes its name into name (size >= STORE_SNAPSHOT_NAME_MAX + 1). On failure fills e
 * with a message that says the session was left open.
 */
int tsnap_close_snapshot(struct session *s, char *name, size_t size, struct session_err *e);

#endif
