/*
 * drun_mcp_doctor.h - `drun-mcp doctor`: checks that this host can run drun and says
 * exactly what to change when it cannot.
 */
#ifndef DRUN_CMD_DRUN_MCP_DOCTOR_H
#define DRUN_CMD_DRUN_MCP_DOCTOR_H

/*
 * Runs every check and prints one line each to stdout ("ok ..." or "FAIL ...; fix: ...").
 * argv holds the words after `doctor` ([--db PATH] [--config PATH]); db and config are
 * what the main command line named before it (may be NULL). Returns the exit status:
 * 0 if every check passed, 1 if one failed, 2 for a bad command line.
 */
int drun_mcp_doctor(int argc, char **argv, const char *db, const char *config);

#endif
