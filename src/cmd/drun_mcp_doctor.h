/*
 * drun_mcp_doctor.h - `drun-mcp doctor`: checks that this host can run drun and says
 * exactly what to change when it cannot.
 */
#ifndef DRUN_CMD_DRUN_MCP_DOCTOR_H
#define DRUN_CMD_DRUN_MCP_DOCTOR_H

#include <stddef.h>

/*
 * Runs every check and prints one line each to stdout ("ok ..." or "FAIL ...; fix: ...").
 * argv holds the words after `doctor` ([--db PATH] [--config PATH]); db and config are
 * what the main command line named before it (may be NULL). Returns the exit status:
 * 0 if every check passed, 1 if one failed, 2 for a bad command line.
 */
int drun_mcp_doctor(int argc, char **argv, const char *db, const char *config);

/*
 * Moves the calling process into a mount namespace of its own (slave to the host's), in
 * which it may mount the size-capped workspaces (docs/architecture.md, "The disk
 * bound"). A root process needs nothing more; an unprivileged one first enters a user
 * namespace that maps only its own uid and gid. Call it before any thread exists.
 * Returns 0, or -1 with why (a sentence) in why[0..n).
 */
int drun_mcp_bound_enter(char *why, size_t n);

#endif
