/*
 * session_exec.h - what a command run needs from a session besides session.h: the
 * overlay mount points the sandbox creates inside the workspace directory.
 *
 * Overlays (mount_overlay_paths found by session_mount) are bound read-only at
 * /workspace/<key>. /workspace is a bind of the host workspace directory, so when a
 * mount point is missing bwrap creates it there, on the host: an empty directory (and
 * any missing parents) that the rescan after the command would otherwise record in the
 * checkpoint. Overlays are never checkpointed, so session_exec_mounts() notes which
 * directories do not exist before the command and session_exec_unmount() removes those
 * that are still empty afterwards, before the rescan. A prepared sandbox creates them at
 * prepare time: its caller takes the note then and keeps it with the sandbox
 * (tools_bash.c), removing them before the next rescan whether the sandbox is used or not.
 */
#ifndef DRUN_SESSION_EXEC_H
#define DRUN_SESSION_EXEC_H

#include <stddef.h>

#include "session/session.h"

struct session_mounts;

/*
 * For each overlay key (relative, '/'-separated, already validated), notes the missing
 * part of its path in s's workspace directory (session_workspace_prepare() must have
 * run). usable[i] is set to 0 for a key whose path crosses an existing non-directory or
 * link (bwrap could not mount there, so the caller leaves that overlay out), else 1.
 * *out (may be NULL when nothing is missing) is freed by session_exec_unmount().
 */
int session_exec_mounts(struct session *s, const char *const *keys, size_t n, int *usable,
                        struct session_mounts **out, struct session_err *e);

/*
 * Removes the directories noted by session_exec_mounts() that are still empty (deepest
 * first), never following a link a command may have planted; frees mk. NULL is a no-op.
 */
void session_exec_unmount(struct session *s, struct session_mounts *mk);

/*
 * The session's next sandbox, prepared in the background (tools_bash.c; opaque here so
 * this layer does not depend on the sandbox module). At most one per session: putting a
 * new one frees the old with its free function, and it is freed when the session is
 * detached, closed or freed at shutdown. put(s, NULL, NULL) just frees the current one.
 */
void session_exec_warm_put(struct session *s, void *obj, void (*free_fn)(void *));

/* Takes the prepared sandbox out of s (the caller owns it now), or NULL. */
void *session_exec_warm_take(struct session *s);

/* The host path of s's workspace directory, or NULL before the first command. Borrowed. */
const char *session_exec_dir_path(const struct session *s);

/*
 * Runs fn(s, arg) on the loop's next turn (after the current call's answer has been
 * written), if the session `id` is still attached to m then; nothing otherwise. loop is
 * the uv_loop_t. Returns 0, or -1 (out of memory, bad id) with nothing scheduled.
 */
int session_exec_defer(void *loop, struct session_mgr *m, const char *id,
                       void (*fn)(struct session *s, void *arg), void *arg);

#endif
