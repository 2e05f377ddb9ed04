/*
 * drun_admin_snap.c - drun-admin's `sessions` and `snapshot` commands.
 *
 *   sessions list [--all] | show ID | close ID
 *   snapshot list | show NAME | create ID [--name N] [--description D]
 *            | restore NAME [--checkpoint N] [--to-dir DIR] | export NAME -o FILE
 *            | import FILE [--name N] | delete NAME
 *
 * Writes go through the store's short BEGIN IMMEDIATE transactions with its busy
 * timeout, so they interleave safely with drun-mcp processes on the same file; a
 * database held past the timeout is reported as busy with "try again".
 *
 * restore --to-dir writes a checkpoint's tree into a new or empty directory through
 * the workspace module, which never follows a symlink (openat2 RESOLVE_BENEATH or an
 * O_NOFOLLOW walk per component): a link that appears inside the directory, or a
 * link in the tree itself, cannot redirect a write outside it. The directory itself
 * must not be a symlink.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/drun_admin.h"
#include "snapfile/snapfile.h"
#include "util/hash.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

static void
iso(int64_t ms, char out[32])
{
    if (ms <= 0) {
        snprintf(out, 32, "-");
        return;
    }
    time_format_iso(ms, out, 32);
}

static cJSON *
cp_json(const struct store_checkpoint *c)
{
    static const char *const status[] = {"live", "discarded", "dropped", "squashed"};
    cJSON *o = cJSON_CreateObject();
    char t[32], hex[HASH_HEX_LEN + 1];

    iso(c->created_ms, t);
    hex_encode(c->manifest_hash, HASH_LEN, hex);
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)c->id);
    cJSON_AddStringToObject(o, "status", status[c->status >= 0 && c->status <= 3 ? c->status : 0]);
    cJSON_AddStringToObject(o, "created", t);
    if (c->tool) {
        cJSON_AddStringToObject(o, "tool", c->tool);
    }
    if (c->label) {
        cJSON_AddStringToObject(o, "label", c->label);
    }
    if (c->command) {
        cJSON_AddStringToObject(o, "command", c->command);
    }
    if (c->has_exit_code) {
        cJSON_AddNumberToObject(o, "exit_code", c->exit_code);
    }
    cJSON_AddNumberToObject(o, "file_count", (double)c->file_count);
    cJSON_AddNumberToObject(o, "logical_bytes", (double)c->logical_bytes);
    cJSON_AddNumberToObject(o, "stdout_bytes", (double)c->stdout_bytes);
    cJSON_AddNumberToObject(o, "stderr_bytes", (double)c->stderr_bytes);
    cJSON_AddStringToObject(o, "manifest", hex);
    return o;
}

static void
cp_table(const struct store_checkpoint *cps, size_t n, int64_t head)
{
    static const char *const status[] = {"live", "discarded", "dropped", "squashed"};

    printf("  %-5s %-9s %-24s %-20s %-12s %-5s %7s  %s\n", "ID", "STATUS", "CREATED", "TOOL",
           "LABEL", "EXIT", "FILES", "COMMAND");
    for (size_t i = 0; i < n; i++) {
        const struct store_checkpoint *c = &cps[i];
        char t[32], ex[16];
        iso(c->created_ms, t);
        snprintf(ex, sizeof(ex), "%d", c->exit_code);
        printf("%s %-5lld %-9s %-24s %-20s %-12s %-5s %7lld  %s\n", c->id == head ? "*" : " ",
               (long long)c->id, status[c->status >= 0 && c->status <= 3 ? c->status : 0], t,
               admin_text(c->tool), admin_text(c->label), c->has_exit_code ? ex : "-",
               (long long)c->file_count, admin_text(c->command ? c->command : ""));
    }
}

/* ---- sessions ------------------------------------------------------------------------ */

static cJSON *
session_json(const struct store_session *s)
{
    cJSON *o = cJSON_CreateObject();
    char t[32];

    cJSON_AddStringToObject(o, "session_id", s->id);
    if (s->label) {
        cJSON_AddStringToObject(o, "label", s->label);
    }
    cJSON_AddStringToObject(o, "state", s->state == STORE_SESSION_OPEN ? "open" : "closed");
    iso(s->created_ms, t);
    cJSON_AddStringToObject(o, "created", t);
    iso(s->last_active_ms, t);
    cJSON_AddStringToObject(o, "last_active", t);
    if (s->closed_ms > 0) {
        iso(s->closed_ms, t);
        cJSON_AddStringToObject(o, "closed", t);
    }
    cJSON_AddNumberToObject(o, "head", (double)s->head);
    if (s->owner_pid > 0) {
        cJSON_AddNumberToObject(o, "owner_pid", s->owner_pid);
        cJSON_AddBoolToObject(o, "owner_alive", proc_alive(s->owner_pid, s->owner_start));
    }
    if (s->client) {
        cJSON_AddStringToObject(o, "client", s->client);
    }
    if (s->parent_id[0]) {
        cJSON_AddStringToObject(o, "parent_session_id", s->parent_id);
        cJSON_AddNumberToObject(o, "parent_checkpoint_id", (double)s->parent_checkpoint);
    }
    return o;
}

static int
sessions_list(const struct admin *a, int all)
{
    struct store *st = NULL;
    struct store_session *list = NULL;
    size_t n = 0;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_session_list(st, all, &list, &n, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(arr, session_json(&list[i]));
        }
        store_session_list_free(list, n);
        return admin_print_json(arr);
    }
    printf("%-8s  %-6s  %-24s  %-24s  %5s  %-8s  %-14s  %s\n", "ID", "STATE", "CREATED",
           "LAST ACTIVE", "HEAD", "OWNER", "CLIENT", "LABEL");
    for (size_t i = 0; i < n; i++) {
        const struct store_session *s = &list[i];
        char c[32], l[32], owner[16];
        iso(s->created_ms, c);
        iso(s->last_active_ms, l);
        if (s->owner_pid > 0 && proc_alive(s->owner_pid, s->owner_start)) {
            snprintf(owner, sizeof(owner), "%d", (int)s->owner_pid);
        } else {
            snprintf(owner, sizeof(owner), "-");
        }
        printf("%-8s  %-6s  %-24s  %-24s  %5lld  %-8s  %-14s  %s\n", admin_text(s->id),
               s->state == STORE_SESSION_OPEN ? "open" : "closed", c, l, (long long)s->head, owner,
               admin_text(s->client), admin_text(s->label ? s->label : ""));
    }
    store_session_list_free(list, n);
    return 0;
}

static int
sessions_show(const struct admin *a, const char *id)
{
    struct store *st = NULL;
    struct store_session s;
    struct store_checkpoint *cps = NULL;
    size_t n = 0;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    if (store_session_get(st, id, &s, &err) < 0) {
        store_close(st);
        return admin_fail(&err);
    }
    rc = store_checkpoint_list(st, id, 1, &cps, &n, &err);
    store_close(st);
    if (rc < 0) {
        store_session_release(&s);
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = session_json(&s), *arr = cJSON_AddArrayToObject(o, "checkpoints");
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(arr, cp_json(&cps[i]));
        }
        rc = admin_print_json(o);
    } else {
        char t[32];
        printf("%-13s %s\n", "session", admin_text(s.id));
        printf("%-13s %s\n", "label", admin_text(s.label));
        printf("%-13s %s\n", "state", s.state == STORE_SESSION_OPEN ? "open" : "closed");
        iso(s.created_ms, t);
        printf("%-13s %s\n", "created", t);
        iso(s.last_active_ms, t);
        printf("%-13s %s\n", "last active", t);
        printf("%-13s %s\n", "client", admin_text(s.client));
        if (s.parent_id[0]) {
            printf("%-13s %s @ %lld\n", "forked from", admin_text(s.parent_id),
                   (long long)s.parent_checkpoint);
        }
        printf("%-13s %lld\n", "head", (long long)s.head);
        printf("checkpoints (* = head):\n");
        cp_table(cps, n, s.head);
    }
    store_checkpoint_list_free(cps, n);
    store_session_release(&s);
    return rc;
}

static int
sessions_close(const struct admin *a, const char *id)
{
    struct store *st = NULL;
    struct store_session s;
    struct err err;
    int rc = admin_open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    if (store_session_get(st, id, &s, &err) < 0) {
        store_close(st);
        return admin_fail(&err);
    }
    if (s.state != STORE_SESSION_OPEN) {
        store_session_release(&s);
        store_close(st);
        fprintf(stderr, "drun-admin: error: session '%s' is already closed\n", id);
        return EXIT_FAIL;
    }
    /* A live drun-mcp holding it would carry on writing to a closed session. */
    if (s.owner_pid > 0 && proc_alive(s.owner_pid, s.owner_start)) {
        fprintf(stderr,
                "drun-admin: error: session '%s' is held by the drun-mcp process %d; close it "
                "from that client, or stop that process first\n",
                id, (int)s.owner_pid);
        store_session_release(&s);
        store_close(st);
        return EXIT_FAIL;
    }
    store_session_release(&s);
    rc = store_session_close(st, id, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "session_id", id);
        cJSON_AddStringToObject(o, "state", "closed");
        return admin_print_json(o);
    }
    printf("closed %s\n", id);
    return 0;
}

/* "90", "90s", "30m", "2h", "1d": seconds, or -1. */
static long long
parse_duration(const char *s)
{
    char *end = NULL;
    long long v, mul = 1;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || v < 0) {
        return -1;
    }
    if (*end != '\0') {
        if (end[1] != '\0') {
            return -1;
        }
        switch (*end) {
        case 's':
            mul = 1;
            break;
        case 'm':
            mul = 60;
            break;
        case 'h':
            mul = 3600;
            break;
        case 'd':
            mul = 86400;
            break;
        default:
            return -1;
        }
    }
    if (v > 366LL * 86400 / mul) {
        return -1;
    }
    return v * mul;
}

/*
 * `sessions close --idle [DURATION]`: closes every open session whose last activity is
 * older than DURATION (default 1h), as the idle reaper does (one conditional UPDATE per
 * session and a `reap` audit row), except those a live drun-mcp holds: that process
 * reaps them itself. Prints each session it closed.
 */
static int
sessions_close_idle(const struct admin *a, long long secs)
{
    struct store *st = NULL;
    struct store_idle *list = NULL;
    size_t n = 0;
    struct err err;
    int64_t now = time_now_ms();
    cJSON *closed = NULL, *held = NULL;
    int rc = admin_open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    if (store_session_idle_list(st, now - secs * 1000, &list, &n, &err) < 0) {
        store_close(st);
        return admin_fail(&err);
    }
    closed = cJSON_CreateArray();
    held = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        struct store_idle *c = &list[i];
        struct store_audit row;
        char summary[160];
        int won = 0;
        struct store_reap r = {c->id, now - secs * 1000, now, c->owner_pid, c->owner_start, NULL,
                               &row};

        if (c->owner_pid > 0 && proc_alive(c->owner_pid, c->owner_start)) {
            cJSON_AddItemToArray(held, cJSON_CreateString(c->id));
            if (!a->json) {
                printf("left %s open: held by the drun-mcp process %d\n", c->id, (int)c->owner_pid);
            }
            continue;
        }
        snprintf(summary, sizeof(summary),
                 "drun-admin closed idle session %s (idle %llds, limit %llds)", c->id,
                 (long long)((now - c->last_active_ms) / 1000), secs);
        memset(&row, 0, sizeof(row));
        row.pid = getpid();
        row.kind = "event";
        row.client_name = "drun-admin";
        row.session_id = c->id;
        row.tool = "reap";
        row.summary = summary;
        row.outcome = "ok";
        row.checkpoint_id = -1;
        if (store_session_reap(st, &r, &won, &err) < 0) {
            mem_free(list);
            store_close(st);
            cJSON_Delete(closed);
            cJSON_Delete(held);
            return admin_fail(&err);
        }
        if (won) {
            cJSON_AddItemToArray(closed, cJSON_CreateString(c->id));
            if (!a->json) {
                printf("closed %s (idle %llds)\n", c->id,
                       (long long)((now - c->last_active_ms) / 1000));
            }
        }
    }
    mem_free(list);
    store_close(st);
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "closed", closed);
        cJSON_AddItemToObject(o, "held", held);
        return admin_print_json(o);
    }
    if (cJSON_GetArraySize(closed) == 0) {
        printf("no session idle for %llds\n", secs);
    }
    cJSON_Delete(closed);
    cJSON_Delete(held);
    return 0;
}

int
admin_run_sessions(const struct admin *a, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (admin_is_help(argv[i])) {
            fputs("usage: drun-admin [--db PATH] [--json] sessions COMMAND\n"
                  "  list [--all]  open sessions, oldest first (--all: closed ones too)\n"
                  "  show ID       one session and every checkpoint (hidden ones included)\n"
                  "  close ID      mark it closed; refused while a live drun-mcp holds it\n"
                  "  close --idle [DURATION]\n"
                  "                close every session idle longer than DURATION (90s, 30m,\n"
                  "                2h, 1d; default 1h) that no live drun-mcp holds\n",
                  stdout);
            return 0;
        }
    }
    if (argc < 1) {
        return admin_usage_error("'sessions' needs a subcommand: list, show or close");
    }
    if (strcmp(argv[0], "list") == 0) {
        static const struct option longopts[] = {{"all", no_argument, NULL, 'a'},
                                                 {NULL, 0, NULL, 0}};
        int all = 0, c;

        admin_getopt_reset();
        while ((c = admin_getopt(argc, argv, "+:", longopts, "sessions list")) != -1) {
            if (c != 'a') {
                return EXIT_USAGE;
            }
            all = 1;
        }
        if (optind < argc) {
            return admin_usage_error("unexpected argument '%s' to 'sessions list'", argv[optind]);
        }
        return sessions_list(a, all);
    }
    if (strcmp(argv[0], "close") == 0 && argc >= 2 && strcmp(argv[1], "--idle") == 0) {
        long long secs = argc >= 3 ? parse_duration(argv[2]) : 3600;
        if (argc > 3) {
            return admin_usage_error("unexpected argument '%s' to 'sessions close --idle'",
                                     argv[3]);
        }
        if (secs < 0) {
            return admin_usage_error("'%s' is not a duration: give seconds, or a number "
                                     "followed by s, m, h or d (e.g. 30m)",
                                     argv[2]);
        }
        return sessions_close_idle(a, secs);
    }
    if (strcmp(argv[0], "show") == 0 || strcmp(argv[0], "close") == 0) {
        if (argc != 2) {
            return admin_usage_error("'sessions %s' takes one session id", argv[0]);
        }
        return argv[0][0] == 's' ? sessions_show(a, argv[1]) : sessions_close(a, argv[1]);
    }
    return admin_usage_error("unknown sessions command '%s'; use list, show or close", argv[0]);
}

/* ---- snapshots ----------------------------------------------------------------------- */

static cJSON *
snap_json(const struct store_snapshot *s)
{
    cJSON *o = cJSON_CreateObject();
    char t[32];

    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddNumberToObject(o, "id", (double)s->id);
    cJSON_AddStringToObject(o, "session_id", s->session_id);
    iso(s->created_ms, t);
    cJSON_AddStringToObject(o, "created", t);
    if (s->label) {
        cJSON_AddStringToObject(o, "label", s->label);
    }
    if (s->description) {
        cJSON_AddStringToObject(o, "description", s->description);
    }
    cJSON_AddNumberToObject(o, "head", (double)s->head);
    cJSON_AddNumberToObject(o, "checkpoint_count", (double)s->checkpoints);
    cJSON_AddNumberToObject(o, "bytes", (double)s->head_bytes);
    return o;
}

static int
snapshot_list(const struct admin *a)
{
    struct store *st = NULL;
    struct store_snapshot *list = NULL;
    size_t n = 0;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_snapshot_list(st, &list, &n, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(arr, snap_json(&list[i]));
        }
        store_snapshot_list_free(list, n);
        return admin_print_json(arr);
    }
    printf("%-32s  %-8s  %-24s  %11s  %12s  %s\n", "NAME", "SESSION", "CREATED", "CHECKPOINTS",
           "BYTES", "LABEL");
    for (size_t i = 0; i < n; i++) {
        char t[32];
        iso(list[i].created_ms, t);
        printf("%-32s  %-8s  %-24s  %11lld  %12lld  %s\n", admin_text(list[i].name),
               admin_text(list[i].session_id), t, (long long)list[i].checkpoints,
               (long long)list[i].head_bytes, admin_text(list[i].label ? list[i].label : ""));
    }
    store_snapshot_list_free(list, n);
    return 0;
}

static int
snapshot_show(const struct admin *a, const char *name)
{
    struct store *st = NULL;
    struct store_snapshot s;
    struct store_checkpoint *cps = NULL;
    size_t n = 0;
    struct err err;
    int rc = admin_open_db(a, 0, &st);

    if (rc != 0) {
        return rc;
    }
    if (store_snapshot_get(st, name, &s, &err) < 0) {
        store_close(st);
        return admin_fail(&err);
    }
    rc = store_snapshot_checkpoints(st, name, &cps, &n, &err);
    store_close(st);
    if (rc < 0) {
        store_snapshot_release(&s);
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = snap_json(&s), *arr = cJSON_AddArrayToObject(o, "checkpoints");
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(arr, cp_json(&cps[i]));
        }
        rc = admin_print_json(o);
    } else {
        char t[32];
        iso(s.created_ms, t);
        printf("%-13s %s\n", "snapshot", admin_text(s.name));
        printf("%-13s %s\n", "created", t);
        printf("%-13s %s\n", "session", admin_text(s.session_id));
        printf("%-13s %s\n", "label", admin_text(s.label));
        printf("%-13s %s\n", "description", admin_text(s.description));
        printf("%-13s %lld\n", "head", (long long)s.head);
        printf("%-13s %lld live, %lld in all\n", "checkpoints", (long long)s.checkpoints,
               (long long)s.checkpoints_all);
        printf("checkpoints (* = head):\n");
        cp_table(cps, n, s.head);
    }
    store_checkpoint_list_free(cps, n);
    store_snapshot_release(&s);
    return rc;
}

static int
snapshot_create(const struct admin *a, const char *id, const char *name, const char *desc)
{
    struct store *st = NULL;
    struct store_snapshot s;
    struct err err;
    int rc = admin_open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_snapshot_create(st, id, name, desc, &s, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        rc = admin_print_json(snap_json(&s));
    } else {
        printf("snapshot '%s' of session %s: %lld checkpoints\n", s.name, s.session_id,
               (long long)s.checkpoints);
    }
    store_snapshot_release(&s);
    return rc;
}

static int
blob_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    return store_blob_get(ctx, hash, out, err);
}

static int
blob_write_fd(void *ctx, const uint8_t hash[HASH_LEN], uint64_t size, int fd, struct err *err)
{
    return store_blob_write_fd_size(ctx, hash, size, fd, err);
}

static int
blob_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    (void)ctx;
    (void)data;
    (void)len;
    (void)hash;
    return err_set(err, ERR_INTERNAL, "restore --to-dir never stores blobs");
}

/* Refuses anything but a missing path or an empty real directory (never a symlink). */
static int
check_target(const char *dir, struct err *err)
{
    struct stat sb;
    DIR *d;
    struct dirent *e;
    int fd, n = 0;

    if (lstat(dir, &sb) < 0) {
        if (errno == ENOENT) {
            return 0;
        }
        return err_set(err, ERR_IO, "cannot use '%s': %s", dir, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode) || !S_ISDIR(sb.st_mode)) {
        return err_set(err, ERR_EXISTS,
                       "'%s' exists and is not a directory (or is a symlink); name a new or "
                       "empty directory",
                       dir);
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || (d = fdopendir(fd)) == NULL) {
        int e2 = errno;
        if (fd >= 0) {
            close(fd);
        }
        return err_set(err, ERR_IO, "cannot read '%s': %s", dir, strerror(e2));
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            n++;
        }
    }
    closedir(d);
    if (n > 0) {
        return err_set(err, ERR_EXISTS,
                       "directory '%s' is not empty; restore writes only into a new or empty "
                       "directory, never over files",
                       dir);
    }
    return 0;
}

static int
restore_to_dir(struct store *st, const char *name, int64_t cpid, const char *dir, int64_t *files,
               struct err *err)
{
    struct store_snapshot s;
    struct store_checkpoint *cps = NULL;
    struct ws_manifest *m = NULL;
    struct ws_dir *wd = NULL;
    struct ws_blobs blobs = {
        .ctx = st, .get = blob_get, .put = blob_put, .write_fd = blob_write_fd};
    struct buf bytes;
    size_t n = 0;
    int rc = -1, found = 0;

    buf_init(&bytes, STORE_BLOB_MAX_DEFAULT);
    if (store_snapshot_get(st, name, &s, err) < 0) {
        return -1;
    }
    if (cpid < 0) {
        cpid = s.head;
    }
    if (store_snapshot_checkpoints(st, name, &cps, &n, err) < 0) {
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (cps[i].id == cpid && cps[i].status == STORE_CP_LIVE) {
            found = 1;
            if (store_blob_get(st, cps[i].manifest_hash, &bytes, err) < 0 ||
                ws_manifest_decode(bytes.data ? bytes.data : "", bytes.len, &m, err) < 0) {
                goto out;
            }
        }
    }
    if (!found) {
        err_set(err, ERR_NOTFOUND,
                "snapshot '%s' has no live checkpoint %lld; 'drun-admin snapshot show %s' lists "
                "them",
                name, (long long)cpid, name);
        goto out;
    }
    if (check_target(dir, err) < 0 || ws_dir_open(dir, &wd, err) < 0 ||
        ws_dir_resync(wd, m, &blobs, err) < 0) {
        goto out;
    }
    *files = (int64_t)ws_manifest_files(m);
    rc = 0;
out:
    ws_dir_close(wd);
    ws_manifest_free(m);
    store_checkpoint_list_free(cps, n);
    store_snapshot_release(&s);
    buf_release(&bytes);
    return rc;
}

/* Adds the overlays the judge dropped to o: dropped_overlays and dropped_overlays_total. */
static void
admin_vet_json(const struct snapfile_vet *vet, cJSON *o)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "dropped_overlays");

    for (size_t i = 0; arr != NULL && i < vet->n_dropped; i++) {
        cJSON *d = cJSON_CreateObject();
        if (d == NULL || !cJSON_AddItemToArray(arr, d)) {
            cJSON_Delete(d);
            break;
        }
        cJSON_AddStringToObject(d, "key", vet->dropped[i].key);
        cJSON_AddStringToObject(d, "host_path", vet->dropped[i].host_path);
        cJSON_AddStringToObject(d, "reason", vet->dropped[i].reason);
    }
    cJSON_AddNumberToObject(o, "dropped_overlays_total", (double)vet->total);
}

/* Prints the overlays a snapshot brought in that the policy refused, one line each. */
static void
admin_vet_print(const struct snapfile_vet *vet)
{
    if (vet->total > 0) {
        printf("dropped %zu overlays the policy refuses (never bound):\n", vet->total);
    }
    for (size_t i = 0; i < vet->n_dropped; i++) {
        printf("  %s -> %s: %s\n", admin_text(vet->dropped[i].key),
               admin_text(vet->dropped[i].host_path), admin_text(vet->dropped[i].reason));
    }
    if (vet->n_dropped < vet->total) {
        printf("  ... and %zu more\n", vet->total - vet->n_dropped);
    }
}

static int
snapshot_restore(const struct admin *a, const char *name, int64_t cpid, const char *dir)
{
    struct store *st = NULL;
    struct store_session s;
    struct policy *p = NULL;
    struct snapfile_vet vet;
    struct err err;
    int64_t files = 0;
    int rc = admin_open_db(a, dir == NULL, &st);

    if (rc != 0) {
        return rc;
    }
    if (dir != NULL) {
        rc = restore_to_dir(st, name, cpid, dir, &files, &err);
        store_close(st);
        if (rc < 0) {
            return admin_fail(&err);
        }
        if (a->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "dir", dir);
            cJSON_AddNumberToObject(o, "files", (double)files);
            return admin_print_json(o);
        }
        printf("wrote %lld files of snapshot '%s' into '%s'\n", (long long)files, name, dir);
        return 0;
    }
    /* Unclaimed, so any drun-mcp on this DB can session_switch to it. Its overlays are
     * judged again under the policy in force, as session_restore does. */
    rc = admin_policy(a, &p);
    if (rc != 0) {
        store_close(st);
        return rc;
    }
    snapfile_vet_init(&vet, p);
    rc = store_begin(st, &err);
    if (rc == 0 && (rc = store_snapshot_restore(st, name, cpid, 0, 0, &s, &err)) == 0) {
        rc = store_session_overlays_filter(st, s.id, snapfile_overlay_keep, &vet, &err);
        if (rc < 0) {
            store_session_release(&s);
        }
    }
    if (rc == 0) {
        rc = store_commit(st, &err);
    } else {
        store_rollback(st);
    }
    store_close(st);
    policy_unref(p);
    if (rc < 0) {
        snapfile_vet_release(&vet);
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = session_json(&s);
        admin_vet_json(&vet, o);
        rc = admin_print_json(o);
    } else {
        printf("restored snapshot '%s' as session %s (head %lld); switch to it with "
               "session_switch\n",
               admin_text(name), admin_text(s.id), (long long)s.head);
        admin_vet_print(&vet);
    }
    snapfile_vet_release(&vet);
    store_session_release(&s);
    return rc;
}

static int
snapshot_export(const struct admin *a, const char *name, const char *file)
{
    struct store *st = NULL;
    struct err err;
    struct stat sb;
    int rc = admin_open_db(a, 1, &st); /* ATTACH needs a writable connection */

    if (rc != 0) {
        return rc;
    }
    rc = store_snapshot_export(st, name, file, ws_manifest_refs, NULL, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (stat(file, &sb) < 0) {
        sb.st_size = 0;
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "path", file);
        cJSON_AddNumberToObject(o, "bytes", (double)sb.st_size);
        return admin_print_json(o);
    }
    printf("exported snapshot '%s' to '%s' (%lld bytes)\n", name, file, (long long)sb.st_size);
    return 0;
}

static int
snapshot_import(const struct admin *a, const char *file, const char *name)
{
    struct store *st = NULL;
    struct store_snapshot s;
    struct policy *p = NULL;
    struct snapfile_vet vet;
    struct err err;
    int fd, rc = admin_policy(a, &p);

    if (rc != 0) {
        return rc;
    }
    rc = admin_open_db(a, 1, &st);
    if (rc != 0) {
        policy_unref(p);
        return rc;
    }
    memset(&s, 0, sizeof(s));
    snapfile_vet_init(&vet, p);
    fd = snapfile_open(file, &err);
    rc = fd < 0 ? -1 : snapfile_import_fd(st, fd, file, name, &vet, &s, &err);
    if (fd >= 0) {
        close(fd);
    }
    store_close(st);
    policy_unref(p);
    if (rc < 0) {
        snapfile_vet_release(&vet);
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = snap_json(&s);
        admin_vet_json(&vet, o);
        rc = admin_print_json(o);
    } else {
        printf("imported snapshot '%s' from '%s': %lld checkpoints\n", admin_text(s.name),
               admin_text(file), (long long)s.checkpoints);
        admin_vet_print(&vet);
    }
    snapfile_vet_release(&vet);
    store_snapshot_release(&s);
    return rc;
}

static int
snapshot_delete(const struct admin *a, const char *name)
{
    struct store *st = NULL;
    struct err err;
    int rc = admin_open_db(a, 1, &st);

    if (rc != 0) {
        return rc;
    }
    rc = store_snapshot_delete(st, name, &err);
    store_close(st);
    if (rc < 0) {
        return admin_fail(&err);
    }
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "deleted", name);
        return admin_print_json(o);
    }
    printf("deleted snapshot '%s'; 'drun-admin gc' frees blobs nothing else uses\n", name);
    return 0;
}

static const char SNAP_HELP[] =
    "usage: drun-admin [--db PATH] [--json] snapshot COMMAND\n"
    "  list                      snapshots in the database\n"
    "  show NAME                 one snapshot and its checkpoints\n"
    "  create ID [--name N] [--description D]\n"
    "                            snapshot session ID (default name: ID-<UTC time>)\n"
    "  restore NAME [--checkpoint N] [--to-dir DIR]\n"
    "                            without --to-dir: a new session (head, or checkpoint N)\n"
    "                            that any drun-mcp on this DB can switch to; with --to-dir:\n"
    "                            write that checkpoint's files, modes and links into a new\n"
    "                            or empty DIR (never over files, never through links)\n"
    "  export NAME -o FILE       a standalone SQLite file with the snapshot and its blobs\n"
    "  import FILE [--name N]    a file from 'export' (every blob's hash is checked) or an\n"
    "                            original drun .drun file; nothing is kept on any error\n"
    "  delete NAME               delete it; 'gc' then frees blobs nothing else uses\n";

int
admin_run_snapshot(const struct admin *a, int argc, char **argv)
{
    const char *name = NULL, *desc = NULL, *dir = NULL, *outf = NULL;
    long long cp = -1;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;

    for (int i = 0; i < argc; i++) {
        if (admin_is_help(argv[i])) {
            fputs(SNAP_HELP, stdout);
            return 0;
        }
    }
    if (argc < 1) {
        return admin_usage_error(
            "'snapshot' needs a subcommand: list, show, create, restore, export, import or delete");
    }
    {
        static const struct option longopts[] = {{"name", required_argument, NULL, 'n'},
                                                 {"description", required_argument, NULL, 'D'},
                                                 {"to-dir", required_argument, NULL, 't'},
                                                 {"checkpoint", required_argument, NULL, 'c'},
                                                 {NULL, 0, NULL, 0}};
        char cmd[64];
        int c;

        snprintf(cmd, sizeof(cmd), "snapshot %.40s", argv[0]);
        admin_getopt_reset();
        /* options and the NAME/FILE may come in any order (getopt permutes argv) */
        while ((c = admin_getopt(argc, argv, ":o:", longopts, cmd)) != -1) {
            switch (c) {
            case 'n':
                name = optarg;
                break;
            case 'D':
                desc = optarg;
                break;
            case 't':
                dir = optarg;
                break;
            case 'o':
                outf = optarg;
                break;
            case 'c':
                cp = admin_parse_count(optarg, (long long)1 << 62);
                if (cp < 0) {
                    return admin_usage_error("--checkpoint takes a checkpoint id, not '%s'",
                                             optarg);
                }
                break;
            default:
                return EXIT_USAGE;
            }
        }
        for (int i = optind; i < argc; i++) {
            if (npos == 2) {
                return admin_usage_error("unexpected argument '%s' to '%s'", argv[i], cmd);
            }
            pos[npos++] = argv[i];
        }
    }
    if (strcmp(argv[0], "list") == 0) {
        if (npos || name || desc || dir || outf || cp >= 0) {
            return admin_usage_error("'snapshot list' takes no arguments");
        }
        return snapshot_list(a);
    }
    if (npos != 1) {
        return admin_usage_error("'snapshot %s' takes one %s", argv[0],
                                 strcmp(argv[0], "import") == 0   ? "file"
                                 : strcmp(argv[0], "create") == 0 ? "session id"
                                                                  : "snapshot name");
    }
    if (strcmp(argv[0], "show") == 0) {
        return snapshot_show(a, pos[0]);
    }
    if (strcmp(argv[0], "create") == 0) {
        return snapshot_create(a, pos[0], name, desc);
    }
    if (strcmp(argv[0], "restore") == 0) {
        return snapshot_restore(a, pos[0], cp, dir);
    }
    if (strcmp(argv[0], "export") == 0) {
        if (outf == NULL) {
            return admin_usage_error("'snapshot export' needs -o FILE");
        }
        return snapshot_export(a, pos[0], outf);
    }
    if (strcmp(argv[0], "import") == 0) {
        return snapshot_import(a, pos[0], name);
    }
    if (strcmp(argv[0], "delete") == 0) {
        return snapshot_delete(a, pos[0]);
    }
    return admin_usage_error("unknown snapshot command '%s'; use list, show, create, restore, "
                             "export, import or delete",
                             argv[0]);
}
