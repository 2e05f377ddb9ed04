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
    int json;
};

/* Prints "drun-admin: <message>; see 'drun-admin --help'" and returns EXIT_USAGE. */
int admin_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the error (a busy DB says so and to try again) and returns EXIT_FAIL. */
int admin_fail(const struct err *err);
int admin_is_help(const char *a);
/* Prints obj as one line of JSON and frees it; 0 or EXIT_FAIL. */
int admin_print_json(cJSON *obj);
/* A non-negative integer up to max, or -1. */
long long admin_parse_count(const char *s, long long max);
/* Opens the DB (read-only unless writable; never migrates); 0 or an exit code. */
int admin_open_db(const struct admin *a, int writable, struct store **st);

int admin_run_sessions(const struct admin *a, int argc, char **argv);
int admin_run_snapshot(const struct admin *a, int argc, char **argv);

#endif
