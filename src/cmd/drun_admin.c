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
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/drun_admin.h"
#include "host/host.h"
#include "policy/policy.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"
#include "util/userpath.h"
#include "util/utf8.h"
#include "workspace/workspace.h"

#define TAIL_DEFAULT 20

#ifndef DRUN_VERSION
#define DRUN_VERSION "0.1.0"
#endif

static const char USAGE[] =
    "usage: drun-admin [--db PATH] [--config PATH] [--json] COMMAND\n"
    "       drun-admin --version | --help\n"
    "\n"
    "commands:\n"
    "  sessions list [--all]     open sessions (--all: closed ones too)\n"
    "  sessions show ID          one session and its checkpoints\n"
    "  sessions close ID         close a session (refused while a live drun-mcp holds it)\n"
    "  sessions close --idle [DURATION]\n"
    "                            close sessions idle longer than DURATION (default 1h)\n"
    "  snapshot list             snapshots in the database\n"
    "  snapshot show NAME        one snapshot and its checkpoints\n"
    "  snapshot create ID [--name N] [--description D]\n"
    "                            snapshot session ID\n"
    "  snapshot restore NAME [--checkpoint N] [--to-dir DIR]\n"
    "                            a new session (or the files, into a new empty DIR)\n"
    "  snapshot export NAME -o FILE\n"
    "                            write a standalone snapshot file (SQLite)\n"
    "  snapshot import FILE [--name N]\n"
    "                            read a snapshot file or an original drun .drun file\n"
    "  snapshot delete NAME      delete a snapshot (gc frees its blobs)\n"
    "  audit tail [-n N] [--session ID] [--tool T] [--errors] [-f]\n"
    "                            the newest N audit rows (default 20)\n"
    "  audit show ID             one audit row, arguments included\n"
    "  audit verify              check the audit hash chain (exit 1 if broken)\n"
    "  gc [--dry-run] [--hidden-older-than DAYS] [--closed-older-than DAYS]\n"
    "                            delete unreferenced blobs (and old hidden history)\n"
    "  db stats|check|migrate|vacuum\n"
    "                            sizes; integrity check; schema upgrade; compact the file\n"
    "\n"
    "The database is --db PATH, else $DRUN_DB. --json prints JSON for scripts (exact\n"
    "strings); text output escapes control characters in stored strings. --config PATH\n"
    "names the config.toml whose policy judges a snapshot's overlays on import and\n"
    "restore (else $DRUN_CONFIG, else ~/.drun/config.toml).\n"
    "Every command takes --help. Exit codes: 0 ok, 1 failure, 2 usage.\n";

int
admin_usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("drun-admin: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("; see 'drun-admin --help'\n", stderr);
    return EXIT_USAGE;
}

int
admin_fail(const struct err *err)
{
    fprintf(stderr, "drun-admin: error: %s\n", admin_text(err->msg));
    return EXIT_FAIL;
}

const char *
admin_text(const char *s)
{
    static struct buf ring[ADMIN_TEXT_RING];
    static size_t next;
    struct buf *b = &ring[next];
    const unsigned char *p = (const unsigned char *)s;
    size_t n;

    if (s == NULL) {
        return "-";
    }
    next = (next + 1) % ADMIN_TEXT_RING;
    buf_release(b);
    buf_init(b, BUF_MAX_DEFAULT * 4);
    n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (p[i] == '\n') {
            buf_puts(b, "\\n");
        } else if (p[i] == '\t') {
            buf_puts(b, "\\t");
        } else if (p[i] == '\r') {
            buf_puts(b, "\\r");
        } else if (p[i] < 0x20 || p[i] == 0x7f || k == 0) {
            buf_printf(b, "\\x%02x", p[i]);
            k = 1;
        } else if (k == 2 && p[i] == 0xc2 && p[i + 1] <= 0x9f) {
            buf_printf(b, "\\u%04x", p[i + 1]); /* C1: U+0080..U+009F */
        } else {
            buf_append(b, p + i, k);
        }
        i += k;
    }
    return buf_failed(b) ? "(too long to print)" : buf_cstr(b);
}

/* drun's own files, for host_own_*: no overlay a snapshot brings in may show them. */
static void
admin_own_files(const struct admin *a, const char *config_path, const struct policy *p)
{
    struct buf rt;
    struct err err;

    host_own_reset();
    if (host_own_add_file(config_path, &err) < 0 || host_own_add_db(a->db, &err) < 0 ||
        host_own_add_snapshots(p->snapshots_dir, &err) < 0) {
        log_warn("cannot guard drun's own files: %s", err.msg);
    }
    buf_init(&rt, 8192);
    if (ws_runtime_dir(p->runtime_dir, &rt, &err) < 0 ||
        host_own_add_tree(buf_cstr(&rt), &err) < 0) {
        log_warn("cannot guard the runtime directory: %s", err.msg);
    }
    buf_release(&rt);
}

int
admin_policy(const struct admin *a, struct policy **out)
{
    char *path = NULL;
    int explicit_path = 0;
    struct err err;

    *out = NULL;
    if (policy_config_path(a->config, &path, &explicit_path, &err) < 0) {
        return admin_fail(&err);
    }
    if (policy_load_file(path, out, &err) < 0) {
        if (err.code != ERR_NOTFOUND || explicit_path) {
            mem_free(path);
            fprintf(stderr,
                    "drun-admin: error: cannot judge the snapshot's overlays without the "
                    "policy: %s; fix the config or pass --config\n",
                    admin_text(err.msg));
            return EXIT_FAIL;
        }
        *out = policy_defaults();
        if (*out == NULL) {
            mem_free(path);
            fputs("drun-admin: error: out of memory\n", stderr);
            return EXIT_FAIL;
        }
    }
    admin_own_files(a, path, *out);
    mem_free(path);
    return 0;
}

int
admin_is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

int
admin_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
             const char *cmd)
{
    int c;

    opterr = 0;
    c = getopt_long(argc, argv, shortopts, longopts, NULL);
    if (c == '?' || c == ':') {
        const char *bad = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        if (c == ':') {
            admin_usage_error("'%s' to '%s' needs a value", bad, cmd);
        } else {
            admin_usage_error("unexpected argument '%s' to '%s'", bad, cmd);
        }
        return -2;
    }
    return c;
}

void
admin_getopt_reset(void)
{
    optind = 0; /* glibc and the BSDs: a full re-initialisation for the next argv */
#ifdef __APPLE__
    optreset = 1;
    optind = 1;
#endif
}

int
admin_print_json(cJSON *obj)
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
long long
admin_parse_count(const char *s, long long max)
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

int
admin_open_db(const struct admin *a, int writable, struct store **st)
{
    struct store_opts opts = {0};
    struct err err;

    opts.read_only = !writable;
    opts.no_migrate = 1;
    if (store_open(a->db, &opts, st, &err) < 0) {
        return admin_fail(&err);
    }
    return 0;
}

static int
cmd_db_stats(const struct admin *a)
{
    struct store *st = NULL;
    struct store_stats s;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_stats(st, &s, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
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
        return admin_print_json(o);
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
    int ok = 0, rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_check(st, &ok, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", ok);
        if (!ok) {
            cJSON_AddStringToObject(o, "error", err.msg);
        }
        rc = admin_print_json(o);
        return rc ? rc : (ok ? 0 : EXIT_FAIL);
    }
    if (!ok) {
        return admin_fail(&err);
    }
    printf("database '%s' is ok\n", a->db);
    return 0;
}

static int
cmd_db_migrate(const struct admin *a)
{
    struct store *st = NULL;
    struct err err;
    int from, to, created = 0;
    char made[4096];

    if (userpath_make_parent(a->db, &created, made, sizeof(made), &err) < 0) {
        return admin_fail(&err);
    }
    if (created) {
        fprintf(stderr, "drun-admin: created the directory '%s' (mode 0700) for the database\n",
                made);
    }
    if (store_open(a->db, NULL, &st, &err) < 0) {
        return admin_fail(&err);
    }
    from = store_version_at_open(st);
    to = store_schema_version();
    store_close(st);
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "db", a->db);
        cJSON_AddNumberToObject(o, "from_version", from);
        cJSON_AddNumberToObject(o, "to_version", to);
        return admin_print_json(o);
    }
    if (from == to) {
        printf("database '%s' is already at schema version %d\n", a->db, to);
    } else {
        printf("database '%s' migrated from schema version %d to %d\n", a->db, from, to);
    }
    return 0;
}

static cJSON *
audit_json(const struct store_audit_entry *e)
{
    cJSON *o = cJSON_CreateObject();
    char iso[32], hex[HASH_HEX_LEN + 1];

    time_format_iso(e->time_ms, iso, sizeof(iso));
    hex_encode(e->hash, HASH_LEN, hex);
    cJSON_AddNumberToObject(o, "id", (double)e->id);
    cJSON_AddStringToObject(o, "time", iso);
    cJSON_AddNumberToObject(o, "pid", (double)e->pid);
    cJSON_AddStringToObject(o, "kind", e->kind ? e->kind : "");
    if (e->client_name) {
        cJSON_AddStringToObject(o, "client_name", e->client_name);
    }
    if (e->client_version) {
        cJSON_AddStringToObject(o, "client_version", e->client_version);
    }
    if (e->session_id) {
        cJSON_AddStringToObject(o, "session_id", e->session_id);
    }
    cJSON_AddStringToObject(o, "tool", e->tool ? e->tool : "");
    cJSON_AddStringToObject(o, "summary", e->summary ? e->summary : "");
    cJSON_AddStringToObject(o, "outcome", e->outcome ? e->outcome : "");
    if (e->error_code) {
        cJSON_AddStringToObject(o, "error_code", e->error_code);
    }
    cJSON_AddNumberToObject(o, "duration_ms", (double)e->duration_ms);
    if (e->checkpoint_id >= 0) {
        cJSON_AddNumberToObject(o, "checkpoint_id", (double)e->checkpoint_id);
    }
    if (e->args) {
        cJSON_AddStringToObject(o, "args", e->args);
    }
    cJSON_AddStringToObject(o, "hash", hex);
    return o;
}

static void
audit_line(const struct store_audit_entry *e)
{
    char iso[32];
    const char *code = e->error_code;
    const char *sum = e->summary ? e->summary : "";
    size_t n = code ? strlen(code) : 0;

    /* A denial's summary already starts with its code ("fetch_denied: host ..."): the
     * code is shown once. */
    if (code != NULL && strncmp(sum, code, n) == 0 && strncmp(sum + n, ": ", 2) == 0) {
        code = NULL;
    }
    time_format_iso(e->time_ms, iso, sizeof(iso));
    printf("%-6lld %-24s %-9s %-10s %-24s %s%s%s\n", (long long)e->id, iso,
           admin_text(e->outcome ? e->outcome : ""), admin_text(e->session_id),
           admin_text(e->tool ? e->tool : ""), admin_text(code ? code : ""), code ? ": " : "",
           admin_text(sum));
}

/* Prints rows; in follow mode (or with --json and follow) one JSON object per line. */
static void
audit_print(const struct admin *a, const struct store_audit_entry *e, size_t count, int lines)
{
    for (size_t i = 0; i < count; i++) {
        if (a->json && lines) {
            admin_print_json(audit_json(&e[i]));
        } else if (!a->json) {
            audit_line(&e[i]);
        }
    }
    fflush(stdout);
}

static volatile sig_atomic_t stop_follow;

static void
on_signal(int sig)
{
    (void)sig;
    stop_follow = 1;
}

static int
cmd_audit_tail(const struct admin *a, struct store_audit_filter *f, int follow)
{
    struct store *st = NULL;
    struct store_audit_entry *e = NULL;
    size_t count = 0;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_audit_query(st, f, &e, &count, &err);
    if (rc < 0) {
        store_close(st);
        return admin_fail(&err);
    }
    if (a->json && !follow) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < count; i++) {
            cJSON_AddItemToArray(arr, audit_json(&e[i]));
        }
        store_audit_entry_list_free(e, count);
        store_close(st);
        return admin_print_json(arr);
    }
    if (!a->json) {
        printf("%-6s %-24s %-9s %-10s %-24s %s\n", "ID", "TIME", "OUTCOME", "SESSION", "TOOL",
               "SUMMARY");
    }
    audit_print(a, e, count, 1);
    if (count > 0) {
        f->after_id = e[count - 1].id;
    }
    store_audit_entry_list_free(e, count);
    /* -f: poll for newer rows (a read never blocks drun-mcp writers in WAL mode) until
     * interrupted. A busy moment is reported and retried, never fatal. */
    if (follow) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        f->limit = STORE_AUDIT_TAIL_MAX;
        while (!stop_follow) {
            struct timespec ts = {0, 500 * 1000 * 1000};
            nanosleep(&ts, NULL);
            if (store_audit_query(st, f, &e, &count, &err) < 0) {
                if (err.code != ERR_BUSY) {
                    store_close(st);
                    return admin_fail(&err);
                }
                fprintf(stderr, "drun-admin: %s\n", admin_text(err.msg));
                continue;
            }
            audit_print(a, e, count, 1);
            if (count > 0) {
                f->after_id = e[count - 1].id;
            }
            store_audit_entry_list_free(e, count);
        }
    }
    store_close(st);
    return 0;
}

static int
cmd_audit_show(const struct admin *a, long long id, int raw)
{
    struct store *st = NULL;
    struct store_audit_entry *e = NULL;
    struct store_audit_filter f = {1, NULL, NULL, 0, 0, id, raw};
    size_t count = 0;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_audit_query(st, &f, &e, &count, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (count == 0) {
        fprintf(stderr,
                "drun-admin: error: audit row %lld does not exist; 'drun-admin audit tail' "
                "lists the newest\n",
                id);
        return EXIT_FAIL;
    }
    if (a->json) {
        rc = admin_print_json(audit_json(&e[0]));
    } else {
        char iso[32], hex[HASH_HEX_LEN + 1];
        time_format_iso(e[0].time_ms, iso, sizeof(iso));
        hex_encode(e[0].hash, HASH_LEN, hex);
        printf("%-15s %lld\n", "id", (long long)e[0].id);
        printf("%-15s %s\n", "time", iso);
        printf("%-15s %s\n", "kind", admin_text(e[0].kind ? e[0].kind : ""));
        printf("%-15s %lld\n", "pid", (long long)e[0].pid);
        printf("%-15s %s %s\n", "client", admin_text(e[0].client_name),
               admin_text(e[0].client_version ? e[0].client_version : ""));
        printf("%-15s %s\n", "session", admin_text(e[0].session_id));
        printf("%-15s %s\n", "tool", admin_text(e[0].tool ? e[0].tool : ""));
        printf("%-15s %s\n", "outcome", admin_text(e[0].outcome ? e[0].outcome : ""));
        printf("%-15s %s\n", "error code", admin_text(e[0].error_code));
        printf("%-15s %lld\n", "duration ms", (long long)e[0].duration_ms);
        if (e[0].checkpoint_id >= 0) {
            printf("%-15s %lld\n", "checkpoint", (long long)e[0].checkpoint_id);
        } else {
            printf("%-15s -\n", "checkpoint");
        }
        printf("%-15s %s\n", "summary", admin_text(e[0].summary ? e[0].summary : ""));
        printf("%-15s %s\n", "hash", hex);
        printf("%-15s %s\n", "args", admin_text(e[0].args));
    }
    store_audit_entry_list_free(e, count);
    return rc;
}

static int
cmd_audit_verify(const struct admin *a)
{
    struct store *st = NULL;
    struct err err;
    int ok = 0, rc = admin_open_db(a, 0, &st);
    int64_t bad = 0, rows = 0;

    if (rc != 0) {
        return rc;
    }
    rc = store_audit_verify(st, &ok, &bad, &rows, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", ok);
        cJSON_AddNumberToObject(o, "rows", (double)rows);
        if (!ok) {
            cJSON_AddNumberToObject(o, "bad_id", (double)bad);
            cJSON_AddStringToObject(o, "error", err.msg);
        }
        rc = admin_print_json(o);
        return rc ? rc : (ok ? 0 : EXIT_FAIL);
    }
    if (!ok) {
        fprintf(stderr, "drun-admin: audit chain broken at row %lld: %s\n", (long long)bad,
                admin_text(err.msg));
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
    int rc = admin_open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    /* The workspace module reads manifests, so the store need not know their format. */
    rc = store_gc(st, opts, ws_manifest_refs, NULL, &res, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "dry_run", opts->dry_run);
        cJSON_AddNumberToObject(o, "checkpoints_deleted", (double)res.checkpoints_deleted);
        cJSON_AddNumberToObject(o, "sessions_deleted", (double)res.sessions_deleted);
        cJSON_AddNumberToObject(o, "blobs_deleted", (double)res.blobs_deleted);
        cJSON_AddNumberToObject(o, "bytes_freed", (double)res.bytes_freed);
        return admin_print_json(o);
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
cmd_db_vacuum(const struct admin *a)
{
    struct store *st = NULL;
    struct err err;
    int64_t before = 0, after = 0;
    int rc = admin_open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_vacuum(st, &before, &after, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "bytes_before", (double)before);
        cJSON_AddNumberToObject(o, "bytes_after", (double)after);
        return admin_print_json(o);
    }
    printf("database '%s' vacuumed: %lld -> %lld bytes\n", a->db, (long long)before,
           (long long)after);
    return 0;
}

static int
run_db(const struct admin *a, int argc, char **argv)
{
    if (argc < 1) {
        return admin_usage_error("'db' needs a subcommand: stats, check, migrate or vacuum");
    }
    if (admin_is_help(argv[0]) || (argc > 1 && admin_is_help(argv[1]))) {
        fputs("usage: drun-admin [--db PATH] [--json] db stats|check|migrate|vacuum\n"
              "  stats    sizes and row counts\n"
              "  check    PRAGMA integrity_check and foreign_key_check; exit 1 if damaged\n"
              "  migrate  create the file if absent and apply pending migrations\n"
              "  vacuum   rewrite the file compactly after gc (needs a moment of exclusive use)\n",
              stdout);
        return 0;
    }
    if (argc > 1) {
        return admin_usage_error("unexpected argument '%s'", argv[1]);
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
    if (strcmp(argv[0], "vacuum") == 0) {
        return cmd_db_vacuum(a);
    }
    return admin_usage_error("unknown db command '%s'; use stats, check, migrate or vacuum",
                             argv[0]);
}

static int
run_audit(const struct admin *a, int argc, char **argv)
{
    struct store_audit_filter f = {TAIL_DEFAULT, NULL, NULL, 0, 0, 0, 0};
    int follow = 0;

    if (argc < 1) {
        return admin_usage_error("'audit' needs a subcommand: tail, show or verify");
    }
    for (int i = 0; i < argc; i++) {
        if (admin_is_help(argv[i])) {
            fputs("usage: drun-admin [--db PATH] [--json] audit COMMAND\n"
                  "  tail [-n N] [--session ID] [--tool T] [--errors] [--raw] [-f]\n"
                  "          the newest N matching rows, oldest first (default 20);\n"
                  "          --errors: outcome not ok; -f: keep printing new rows until ^C\n"
                  "          (with --json, one object per line)\n"
                  "  show [--raw] ID\n"
                  "          the whole row, arguments included; large string values are\n"
                  "          read back from their blobs (--raw, here or on tail: as stored,\n"
                  "          with {\"$blob\":HASH,\"bytes\":N} references)\n"
                  "  verify  walk the hash chain; exit 1 naming the first bad row\n",
                  stdout);
            return 0;
        }
    }
    if (strcmp(argv[0], "tail") == 0) {
        static const struct option opts[] = {
            {"session", required_argument, NULL, 's'}, {"tool", required_argument, NULL, 't'},
            {"errors", no_argument, NULL, 'e'},        {"raw", no_argument, NULL, 'r'},
            {"follow", no_argument, NULL, 'f'},        {NULL, 0, NULL, 0}};
        int c;

        admin_getopt_reset();
        while ((c = admin_getopt(argc, argv, "+:n:f", opts, "audit tail")) != -1) {
            switch (c) {
            case 'n':
                f.limit = admin_parse_count(optarg, STORE_AUDIT_TAIL_MAX);
                if (f.limit < 1) {
                    return admin_usage_error("-n takes a number from 1 to %d, not '%s'",
                                             STORE_AUDIT_TAIL_MAX, optarg);
                }
                break;
            case 's':
                f.session_id = optarg;
                break;
            case 't':
                f.tool = optarg;
                break;
            case 'e':
                f.errors_only = 1;
                break;
            case 'r':
                f.raw = 1;
                break;
            case 'f':
                follow = 1;
                break;
            default:
                return EXIT_USAGE;
            }
        }
        if (optind < argc) {
            return admin_usage_error("unexpected argument '%s' to 'audit tail'", argv[optind]);
        }
        return cmd_audit_tail(a, &f, follow);
    }
    if (strcmp(argv[0], "show") == 0) {
        static const struct option opts[] = {{"raw", no_argument, NULL, 'r'}, {NULL, 0, NULL, 0}};
        long long id;
        int raw = 0, c;

        admin_getopt_reset();
        while ((c = admin_getopt(argc, argv, ":", opts, "audit show")) != -1) {
            if (c != 'r') {
                return EXIT_USAGE;
            }
            raw = 1;
        }
        if (argc - optind != 1) {
            return admin_usage_error("'audit show' takes one row id (and --raw)");
        }
        id = admin_parse_count(argv[optind], (long long)1 << 62);
        if (id < 1) {
            return admin_usage_error("an audit row id is a positive number, not '%s'",
                                     argv[optind]);
        }
        return cmd_audit_show(a, id, raw);
    }
    if (strcmp(argv[0], "verify") == 0) {
        if (argc > 1) {
            return admin_usage_error("unexpected argument '%s'", argv[1]);
        }
        return cmd_audit_verify(a);
    }
    return admin_usage_error("unknown audit command '%s'; use tail, show or verify", argv[0]);
}

static int
run_gc(const struct admin *a, int argc, char **argv)
{
    struct store_gc_opts opts = {0, -1, -1};

    for (int i = 0; i < argc; i++) {
        if (admin_is_help(argv[i])) {
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
    {
        static const struct option longopts[] = {
            {"dry-run", no_argument, NULL, 'd'},
            {"hidden-older-than", required_argument, NULL, 'H'},
            {"closed-older-than", required_argument, NULL, 'C'},
            {NULL, 0, NULL, 0}};
        int c;
        char **gargv = argv - 1; /* getopt skips argv[0]: "gc" itself */

        admin_getopt_reset();
        while ((c = admin_getopt(argc + 1, gargv, "+:", longopts, "gc")) != -1) {
            long long days;

            switch (c) {
            case 'd':
                opts.dry_run = 1;
                break;
            case 'H':
            case 'C':
                days = admin_parse_count(optarg, 36500);
                if (days < 0) {
                    return admin_usage_error("a number of days from 0 to 36500 is needed, not '%s'",
                                             optarg);
                }
                if (c == 'H') {
                    opts.discarded_older_than_ms = days * 86400000LL;
                } else {
                    opts.closed_older_than_ms = days * 86400000LL;
                }
                break;
            default:
                return EXIT_USAGE;
            }
        }
        if (optind < argc + 1) {
            return admin_usage_error("unexpected argument '%s' to 'gc'", gargv[optind]);
        }
    }
    return cmd_gc(a, &opts);
}

int
main(int argc, char **argv)
{
    struct admin a = {NULL, NULL, 0};
    int i;

    static const struct option longopts[] = {
        {"db", required_argument, NULL, 'd'}, {"config", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},     {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},  {NULL, 0, NULL, 0}};
    int c;

    log_init("drun-admin", LOG_WARN);
    /* "+": options end at the command; what follows is the command's own argv. */
    while ((c = admin_getopt(argc, argv, "+:h", longopts, "drun-admin")) != -1) {
        switch (c) {
        case 'd':
            a.db = optarg;
            break;
        case 'c':
            a.config = optarg;
            break;
        case 'j':
            a.json = 1;
            break;
        case 'h':
            fputs(USAGE, stdout);
            return 0;
        case 'V':
            printf("drun-admin %s\n", DRUN_VERSION);
            return 0;
        default:
            return EXIT_USAGE;
        }
    }
    i = optind;
    if (i >= argc) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    {
        static const char *const names[] = {"db", "audit", "gc", "sessions", "snapshot"};
        static int (*const runs[])(const struct admin *, int, char **) = {
            run_db, run_audit, run_gc, admin_run_sessions, admin_run_snapshot};
        int which = -1, help = 0, rc;
        char *db_owned = NULL;

        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (strcmp(argv[i], names[k]) == 0) {
                which = (int)k;
            }
        }
        if (which < 0) {
            return admin_usage_error("unknown command '%s'", argv[i]);
        }
        /* --help after the command needs no database */
        for (int k = i; k < argc; k++) {
            help |= admin_is_help(argv[k]);
        }
        if (!help) {
            if (a.db == NULL) {
                a.db = getenv("DRUN_DB");
            }
            if (a.db == NULL || a.db[0] == '\0') {
                fputs("drun-admin: no database given; pass --db PATH or set DRUN_DB\n", stderr);
                return EXIT_USAGE;
            }
            /* "~/.drun/drun.db" quoted, or from DRUN_DB, reaches us unexpanded */
            if (a.db[0] == '~') {
                struct err err;
                char *expanded = userpath_expand(a.db, &err);
                if (expanded == NULL) {
                    return admin_fail(&err);
                }
                a.db = db_owned = expanded;
            }
        }
        rc = runs[which](&a, argc - i - 1, argv + i + 1);
        mem_free(db_owned);
        return rc;
    }
}
