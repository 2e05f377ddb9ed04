/*
 * drun_admin.h - what the drun_admin_*.c files (one per command family) share: the
 * parsed global options, error and usage printing, JSON output and opening the DB.
 */
#ifndef DRUN_CMD_DRUN_ADMIN_H
#define DRUN_CMD_DRUN_ADMIN_H

#include <cJSON.h>

#include "store/store.h"

#define EXIT_FAIL  1
#define EXIT_USAGE 2

struct admin {
    const char *db;
    const char *config; /* --config, or NULL for $DRUN_CONFIG / ~/.drun/config.toml */
    int json;
};

/*
 * An agent-supplied string (label, description, name, tool, summary, arguments, a
 * message quoting them) made safe to print as text on the operator's terminal: C0
 * controls, DEL, C1 controls (U+0080..U+009F) and bytes that are not valid UTF-8 become
 * visible escapes (\n \t \r \xNN \u0080), so a label holding ESC ] 52 (a clipboard
 * write) or ESC [ 2J cannot drive the terminal. Never cut. NULL gives "-". The result is
 * valid until ADMIN_TEXT_RING more calls, so one printf may take several. --json output
 * is never passed through it: JSON escapes controls itself and stays exact.
 */
#define ADMIN_TEXT_RING 16
const char *admin_text(const char *s);

/* The operator's policy for judging snapshot overlays (--config, $DRUN_CONFIG, or
 * ~/.drun/config.toml; built-in defaults when the default file is absent). 0 or an
 * exit code; the caller drops *out with policy_unref. */
struct policy;
int admin_policy(const struct admin *a, struct policy **out);

/* Prints "drun-admin: <message>; see 'drun-admin --help'" and returns EXIT_USAGE. */
int admin_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the error (a busy DB says so and to try again) and returns EXIT_FAIL. */
int admin_fail(const struct err *err);
int admin_is_help(const char *a);
/*
 * getopt_long over argv (argv[0] is the program or the command's own name) with error
 * printing of our own: an unknown option or one missing its value prints a usage error
 * naming cmd and returns -2 (callers return EXIT_USAGE for anything unexpected).
 * shortopts should begin with ':' (after a '+' when it has one). Call
 * admin_getopt_reset() before the first call on a new argv.
 */
struct option;
int admin_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
                 const char *cmd);
void admin_getopt_reset(void);
/* Prints obj as one line of JSON and frees it; 0 or EXIT_FAIL. */
int admin_print_json(cJSON *obj);
/* A non-negative integer up to max, or -1. */
long long admin_parse_count(const char *s, long long max);
/* Opens the DB (read-only unless writable; never migrates); 0 or an exit code. */
int admin_open_db(const struct admin *a, int writable, struct store **st);

int admin_run_sessions(const struct admin *a, int argc, char **argv);
int admin_run_snapshot(const struct admin *a, int argc, char **argv);

#endif
