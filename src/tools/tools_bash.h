/*
 * tools_bash.h - what the other session tools need from session_bash (tools_bash.c):
 * preparing a session's next sandbox when the session is created or attached, not only
 * after a command. Private to src/tools/.
 */
#ifndef DRUN_TOOLS_BASH_H
#define DRUN_TOOLS_BASH_H

#include "policy/policy.h"
#include "session/session.h"
#include "tools/tool.h"

/*
 * Prepares s's next sandbox in the background under policy p (NULL: the policy in force
 * now). Call it off the call path, after the call's answer has been sent. When s has no
 * workspace directory yet (a new or just attached session) it is synced to the head
 * first. Does nothing when the session is busy, the warm path is off
 * (DRUN_SANDBOX_WARM=off), or anything fails: the next command then starts cold.
 */
void tools_bash_prewarm(struct tools_env *env, struct session *s, struct policy *p);

/*
 * tools_bash_prewarm() for the attached session `id` on the loop's next turn, after the
 * current call has answered (a session attached implicitly by a call's session_id).
 */
void tools_bash_prewarm_soon(struct tools_env *env, const char *id);

#endif
