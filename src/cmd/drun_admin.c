/*
 * drun_admin.c - drun-admin, the operator's command line over a drun database.
 *
 *   drun-admin [--db PATH] [--json] db stats|check|migrate
 *   drun-admin [--db PATH] [--json] audit tail [-n N] | audit verify
 *   drun-admin [--db PATH] [--json] gc [--dry-run] [--hidden-older-than DAYS]
 *                                      [--closed-older-than DAYS]
 *
 * The database is always named explicitly (--db, else DRUN_DB); there is no default
 * path, so an operator never inspects or collects the wrong file by accident. Reading
 * commands open the file read-only and never migrate it; only `db migrate` (which
 * also creates a new file) and `gc` write. Human output by default, --json for
 * scripts. Exit codes: 0 ok, 1 failure (including a failed check or a broken audit
 * chain), 2 usage.
 */
#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

#define EXIT_FAIL    1
#define EXIT_USAGE   2
#define TAIL_DEFAULT 20

struct admin {
    const char *db;
    int json;
};

static const char USAGE[] =
    "usage: drun-admin [--db PATH] [--json] COMMAND\n"
    "\n"
    "commands:\n"
    "  db stats                 sizes and row counts\n"
    "  db check                 integrity and reference check (exit 1 if damaged)\n"
    "  db migrate               create the file or bring its schema up to date\n"
    "  audit tail [-n N]        the newest N audit rows (default 20)\n"
    "  audit verify             check the audit hash chain (exit 1 if broken)\n"
    "  gc [--dry-run] [--hidden-older-than DAYS] [--closed-older-than DAYS]\n"
    "                           delete unreferenced blobs (and old hidden history)\n"
    "\n"
    "The database is --db PATH, else $DRUN_DB. --json prints JSON for scripts.\n"
    "Exit codes: 0 ok, 1 failure, 2 usage.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("drun-admin: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("; see 'drun-admin --help'\n", stderr);
    return EXIT_USAGE;
}

static int
fail(const struct err *err)
{
    fprintf(stderr, "drun-admin: error: %s\n", err->msg);
    return EXIT_FAIL;
}

static int
is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

static int
print_json(cJSON *obj)
{
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;

    cJSON_Delete(obj);
    if (text == NULL) {
        fputs("drun-admin: error: out of memory\n", stderr);
        return EXIT_FAIL;
    }
    puts(text);
    cJSON_free(text);
    return 0;
}

/* Parses a non-negative integer argument; -1 if it is not one. */
static long long
parse_count(const char *s, long long max)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0 || v > max) {
        return -1;
    }
    return v;
}

static int
open_db(const struct admin *a, int writable, struct store **st)
{
    struct store_opts opts = {0};
    struct err err;

    opts.read_only = !writable;
    opts.no_migrate = 1;
    if (store_open(a->db, &opts, st, &err) < 0) {
        return fail(&err);
    }
    return 0;
}

static int
cmd_db_stats(const struct admin *a)
{
    struct store *st = NULL;
    struct store_stats s;
    struct err err;
    int rc = open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_stats(st, &s, &err);
    store_close(st);
    if (rc < 0) {
        return fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "db", a->db);
        cJSON_AddNumberToObject(o, "schema_version", s.schema_version);
        cJSON_AddNumberToObject(o, "file_bytes", (double)s.file_bytes);
        cJSON_AddNumberToObject(o, "sessions_open", (double)s.sessions_open);
        cJSON_AddNumberToObject(o, "sessions_closed", (double)s.sessions_closed);
        cJSON_AddNumberToObject(o, "checkpoints", (double)s.checkpoints);
        cJSON_AddNumberToObject(o, "checkpoints_hidden", (double)s.checkpoints_hidden);
        cJSON_AddNumberToObject(o, "blobs", (double)s.blobs);
        cJSON_AddNumberToObject(o, "blob_bytes_logical", (double)s.blob_bytes_logical);
        cJSON_AddNumberToObject(o, "blob_bytes_stored", (double)s.blob_bytes_stored);
        cJSON_AddNumberToObject(o, "audit_rows", (double)s.audit_rows);
        cJSON_AddNumberToObject(o, "snapshots", (double)s.snapshots);
        return print_json(o);
    }
    printf("%-20s %s\n", "database", a->db);
    printf("%-20s %d\n", "schema version", s.schema_version);
    printf("%-20s %lld\n", "file bytes", (long long)s.file_bytes);
    printf("%-20s %lld\n", "sessions open", (long long)s.sessions_open);
    printf("%-20s %lld\n", "sessions closed", (long long)s.sessions_closed);
    printf("%-20s %lld\n", "checkpoints", (long long)s.checkpoints);
    printf("%-20s %lld\n", "checkpoints hidden", (long long)s.checkpoints_hidden);
    printf("%-20s %lld\n", "blobs", (long long)s.blobs);
    printf("%-20s %lld\n", "blob bytes", (long long)s.blob_bytes_logical);
    printf("%-20s %lld\n", "blob bytes stored", (long long)s.blob_bytes_stored);
    printf("%-20s %lld\n", "audit rows", (long long)s.audit_rows);
    printf("%-20s %lld\n", "snapshots", (long long)s.snapshots);
    return 0;
}

static int
cmd_db_check(const struct admin *a)
{
    struct store *st = NULL;
    struct err err;
    int ok = 0, rc = open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_check(st, &ok, &err);
    store_close(st);
    if (rc < 0) {
        return fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", ok);
        if (!ok) {
            cJSON_AddStringToObject(o, "error", err.msg);
        }
        rc = print_json(o);
        return rc ? rc : (ok ? 0 : EXIT_FAIL);
    }
    if (!ok) {
        return fail(&err);
    }
    printf("database '%s' is ok\n", a->db);
    return 0;
}

static int
cmd_db_migrate(const struct admin *a)
{
    struct store *st = NULL;
    struct err err;
    int from, to;

    if (store_open(a->db, NULL, &st, &err) < 0) {
        return fail(&err);
    }
    from = store_version_at_open(st);
    to = store_schema_version();
    store_close(st);
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "db", a->db);
        cJSON_AddNumberToObject(o, "from_version", from);
        cJSON_AddNumberToObject(o, "to_version", to);
        return print_json(o);
    }
    if (from == to) {
        printf("database '%s' is already at schema version %d\n", a->db, to);
    } else {
        printf("database '%s' migrated from schema version %d to %d\n", a->db, from, to);
    }
    return 0;
}

static int
cmd_audit_tail(const struct admin *a, long long n)
{
    struct store *st = NULL;
    struct store_audit_entry *e = NULL;
    size_t count = 0;
    struct err err;
    int rc = open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_audit_tail(st, n, &e, &count, &err);
    store_close(st);
    if (rc < 0) {
        return fail(&err);
    }
    if (a->json) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < count; i++) {
            cJSON *o = cJSON_CreateObject();
            char iso[32], hex[HASH_HEX_LEN + 1];
            time_format_iso(e[i].time_ms, iso, sizeof(iso));
            hex_encode(e[i].hash, HASH_LEN, hex);
            cJSON_AddNumberToObject(o, "id", (double)e[i].id);
            cJSON_AddStringToObject(o, "time", iso);
            cJSON_AddNumberToObject(o, "pid", (double)e[i].pid);
            cJSON_AddStringToObject(o, "kind", e[i].kind ? e[i].kind : "");
            if (e[i].client_name) {
                cJSON_AddStringToObject(o, "client_name", e[i].client_name);
            }
            if (e[i].session_id) {
                cJSON_AddStringToObject(o, "session_id", e[i].session_id);
            }
            cJSON_AddStringToObject(o, "tool", e[i].tool ? e[i].tool : "");
            cJSON_AddStringToObject(o, "summary", e[i].summary ? e[i].summary : "");
            cJSON_AddStringToObject(o, "outcome", e[i].outcome ? e[i].outcome : "");
            if (e[i].error_code) {
                cJSON_AddStringToObject(o, "error_code", e[i].error_code);
            }
            cJSON_AddNumberToObject(o, "duration_ms", (double)e[i].duration_ms);
            if (e[i].checkpoint_id >= 0) {
                cJSON_AddNumberToObject(o, "checkpoint_id", (double)e[i].checkpoint_id);
            }
            if (e[i].args) {
                cJSON_AddStringToObject(o, "args", e[i].args);
            }
            cJSON_AddStringToObject(o, "hash", hex);
            cJSON_AddItemToArray(arr, o);
        }
        store_audit_entry_list_free(e, count);
        return print_json(arr);
    }
    printf("%-6s %-24s %-9s %-10s %-24s %s\n", "ID", "TIME", "OUTCOME", "SESSION", "TOOL",
           "SUMMARY");
    for (size_t i = 0; i < count; i++) {
        char iso[32];
        time_format_iso(e[i].time_ms, iso, sizeof(iso));
        printf("%-6lld %-24s %-9s %-10s %-24s %s\n", (long long)e[i].id, iso,
               e[i].outcome ? e[i].outcome : "", e[i].session_id ? e[i].session_id : "-",
               e[i].tool ? e[i].tool : "", e[i].summary ? e[i].summary : "");
    }
    store_audit_entry_list_free(e, count);
    return 0;
}

static int
cmd_audit_verify(const struct admin *a)
{
    struct store *st = NULL;
    struct err err;
    int ok = 0, rc = open_db(a, 0, &st);
    int64_t bad = 0, rows = 0;

    if (rc != 0) {
        return rc;
    }
    rc = store_audit_verify(st, &ok, &bad, &rows, &err);
    store_close(st);
    if (rc < 0) {
        return fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", ok);
        cJSON_AddNumberToObject(o, "rows", (double)rows);
        if (!ok) {
            cJSON_AddNumberToObject(o, "bad_id", (double)bad);
            cJSON_AddStringToObject(o, "error", err.msg);
        }
        rc = print_json(o);
        return rc ? rc : (ok ? 0 : EXIT_FAIL);
    }
    if (!ok) {
        fprintf(stderr, "drun-admin: audit chain broken at row %lld: %s\n", (long long)bad,
                err.msg);
        return EXIT_FAIL;
    }
    printf("audit chain ok: %lld rows\n", (long long)rows);
    return 0;
}

static int
cmd_gc(const struct admin *a, const struct store_gc_opts *opts)
{
    struct store *st = NULL;
    struct store_gc_result res;
    struct err err;
    int rc = open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    /* The workspace module reads manifests, so the store need not know their format. */
    rc = store_gc(st, opts, ws_manifest_refs, NULL, &res, &err);
    store_close(st);
    if (rc < 0) {
        return fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "dry_run", opts->dry_run);
        cJSON_AddNumberToObject(o, "checkpoints_deleted", (double)res.checkpoints_deleted);
        cJSON_AddNumberToObject(o, "sessions_deleted", (double)res.sessions_deleted);
        cJSON_AddNumberToObject(o, "blobs_deleted", (double)res.blobs_deleted);
        cJSON_AddNumberToObject(o, "bytes_freed", (double)res.bytes_freed);
        return print_json(o);
    }
    printf("%s%-20s %lld\n", opts->dry_run ? "would delete: " : "", "hidden checkpoints",
           (long long)res.checkpoints_deleted);
    printf("%s%-20s %lld\n", opts->dry_run ? "would delete: " : "", "closed sessions",
           (long long)res.sessions_deleted);
    printf("%s%-20s %lld\n", opts->dry_run ? "would delete: " : "", "blobs",
           (long long)res.blobs_deleted);
    printf("%s%-20s %lld\n", opts->dry_run ? "would free:   " : "", "stored bytes",
           (long long)res.bytes_freed);
    return 0;
}

static int
run_db(const struct admin *a, int argc, char **argv)
{
    if (argc < 1) {
        return usage_error("'db' needs a subcommand: stats, check or migrate");
    }
    if (is_help(argv[0]) || (argc > 1 && is_help(argv[1]))) {
        fputs("usage: drun-admin [--db PATH] [--json] db stats|check|migrate\n"
              "  stats    sizes and row counts\n"
              "  check    PRAGMA integrity_check and foreign_key_check; exit 1 if damaged\n"
              "  migrate  create the file if absent and apply pending migrations\n",
              stdout);
        return 0;
    }
    if (argc > 1) {
        return usage_error("unexpected argument '%s'", argv[1]);
    }
    if (strcmp(argv[0], "stats") == 0) {
        return cmd_db_stats(a);
    }
    if (strcmp(argv[0], "check") == 0) {
        return cmd_db_check(a);
    }
    if (strcmp(argv[0], "migrate") == 0) {
        return cmd_db_migrate(a);
    }
    return usage_error("unknown db command '%s'; use stats, check or migrate", argv[0]);
}

static int
run_audit(const struct admin *a, int argc, char **argv)
{
    long long n = TAIL_DEFAULT;

    if (argc < 1) {
        return usage_error("'audit' needs a subcommand: tail or verify");
    }
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: drun-admin [--db PATH] [--json] audit tail [-n N] | audit verify\n"
                  "  tail    the newest N audit rows, oldest first (default 20)\n"
                  "  verify  walk the hash chain; exit 1 naming the first bad row\n",
                  stdout);
            return 0;
        }
    }
    if (strcmp(argv[0], "tail") == 0) {
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
                n = parse_count(argv[++i], STORE_AUDIT_TAIL_MAX);
                if (n < 1) {
                    return usage_error("-n takes a number from 1 to 100000, not '%s'", argv[i]);
                }
            } else {
                return usage_error("unexpected argument '%s' to 'audit tail'", argv[i]);
            }
        }
        return cmd_audit_tail(a, n);
    }
    if (strcmp(argv[0], "verify") == 0) {
        if (argc > 1) {
            return usage_error("unexpected argument '%s'", argv[1]);
        }
        return cmd_audit_verify(a);
    }
    return usage_error("unknown audit command '%s'; use tail or verify", argv[0]);
}

static int
run_gc(const struct admin *a, int argc, char **argv)
{
    struct store_gc_opts opts = {0, -1, -1};

    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs("usage: drun-admin [--db PATH] [--json] gc [--dry-run]\n"
                  "          [--hidden-older-than DAYS] [--closed-older-than DAYS]\n"
                  "  Deletes every blob no checkpoint, manifest or snapshot refers to.\n"
                  "  --hidden-older-than  also delete discarded/dropped/squashed checkpoints\n"
                  "                       hidden for more than DAYS (0: all of them)\n"
                  "  --closed-older-than  also delete sessions closed more than DAYS ago\n"
                  "  --dry-run            report what would go and change nothing\n",
                  stdout);
            return 0;
        }
    }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0) {
            opts.dry_run = 1;
        } else if ((strcmp(argv[i], "--hidden-older-than") == 0 ||
                    strcmp(argv[i], "--closed-older-than") == 0) &&
                   i + 1 < argc) {
            long long days = parse_count(argv[i + 1], 36500);
            if (days < 0) {
                return usage_error("a number of days from 0 to 36500 is needed, not '%s'",
                                   argv[i + 1]);
            }
            if (argv[i][2] == 'h') {
                opts.discarded_older_than_ms = days * 86400000LL;
            } else {
                opts.closed_older_than_ms = days * 86400000LL;
            }
            i++;
        } else {
            return usage_error("unexpected argument '%s' to 'gc'", argv[i]);
        }
    }
    return cmd_gc(a, &opts);
}

int
main(int argc, char **argv)
{
    struct admin a = {NULL, 0};
    int i;

    log_init("drun-admin", LOG_WARN);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0) {
            if (i + 1 >= argc) {
                return usage_error("--db needs a path");
            }
            a.db = argv[++i];
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            a.db = argv[i] + 5;
        } else if (strcmp(argv[i], "--json") == 0) {
            a.json = 1;
        } else if (is_help(argv[i])) {
            fputs(USAGE, stdout);
            return 0;
        } else if (argv[i][0] == '-') {
            return usage_error("unknown option '%s'", argv[i]);
        } else {
            break;
        }
    }
    if (i >= argc) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    /* --help after the command needs no database */
    for (int k = i; k < argc; k++) {
        if (is_help(argv[k])) {
            if (strcmp(argv[i], "db") == 0) {
                return run_db(&a, argc - i - 1, argv + i + 1);
            }
            if (strcmp(argv[i], "audit") == 0) {
                return run_audit(&a, argc - i - 1, argv + i + 1);
            }
            if (strcmp(argv[i], "gc") == 0) {
                return run_gc(&a, argc - i - 1, argv + i + 1);
            }
        }
    }
    if (strcmp(argv[i], "db") != 0 && strcmp(argv[i], "audit") != 0 && strcmp(argv[i], "gc") != 0) {
        return usage_error("unknown command '%s'", argv[i]);
    }
    if (a.db == NULL) {
        a.db = getenv("DRUN_DB");
    }
    if (a.db == NULL || a.db[0] == '\0') {
        fputs("drun-admin: no database given; pass --db PATH or set DRUN_DB\n", stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[i], "db") == 0) {
        return run_db(&a, argc - i - 1, argv + i + 1);
    }
    if (strcmp(argv[i], "audit") == 0) {
        return run_audit(&a, argc - i - 1, argv + i + 1);
    }
    return run_gc(&a, argc - i - 1, argv + i + 1);
}
