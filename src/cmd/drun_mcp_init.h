/*
 * drun_mcp_init.h - `drun-mcp init CLIENT`: register drun in an agent client's MCP
 * configuration file.
 */
#ifndef DRUN_CMD_DRUN_MCP_INIT_H
#define DRUN_CMD_DRUN_MCP_INIT_H

/*
 * argv holds the words after `init` (CLIENT [--db PATH] [--file PATH] [--dry-run]);
 * db and config are what the main command line named before it (may be NULL). Prints
 * what it did (or, with --dry-run, would do) on stdout. Returns the exit status: 0 done
 * or nothing to do, 1 a file that cannot be read, parsed or written (left untouched),
 * 2 a bad command line.
 */
int drun_mcp_init_main(int argc, char **argv, const char *db, const char *config);

#endif
