/*
 * tools_snapshot.c - the snapshot tools: session_snapshot, list_snapshots and
 * session_restore (reference sections 4.6 and 6), and session_close's snapshot_on_close.
 *
 * A snapshot lives in the DB (store_snapshot_create: rows that point at the session's
 * blobs, so it costs rows, not bytes). session_snapshot with `path` also exports it to a
 * portable SQLite file, and the two are one operation for the agent: if the file cannot
 * be written the DB snapshot just made is deleted again and the error returned.
 *
 * Writing the file. The path must follow the reference's rule (no ".." component, under
 * snapshots_dir component by component) or the call is refused with snapshot_denied.
 * The write then starts from a directory fd of snapshots_dir and opens each directory
 * below it with the hostpath walk (no symlink followed), so a link planted inside
 * snapshots_dir cannot send the file elsewhere. The store exports to a hidden temp name
 * at the top of snapshots_dir, and renameat moves it from there over the target in the
 * directory fd the walk opened: a failed export never leaves a half file and never
 * destroys the previous one.
 *
 * Restoring. By name, or from a file: an original drun .drun file is imported with
 * drunfile_import, our export with store_snapshot_import (every blob hash-checked), each
 * into a DB snapshot first. The new session is claimed by this process inside the same
 * transaction as the max_sessions check, then attached and made active, as
 * create_session does. If the restore fails after an import, the imported snapshot is
 * deleted, so a failed call leaves nothing behind.
 */
#include "tools/tools_snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host.h"
#include "policy/policy.h"
#include "store/store.h"
#include "tools/drunfile.h"
#include "tools/tools_bash.h"
#include "tools/tools_sess.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

#define SNAP_LIST_MAX  1000  /* portable files list_snapshots reports */
#define SNAP_META_MAX  65536 /* largest .drun.meta read */
#define SNAP_PATH_MAX  4096  /* longest path argument */
#define SNAP_SQLITE_HD "SQLite format 3"

/* "2026-01-02T03:04:05.678Z" -> "20260102T030405678Z": valid in a name and a file stem. */
static void
compact_time(char *out, size_t size)
{
    char iso[32];
    size_t k = 0;

    time_format_iso(time_now_ms(), iso, sizeof(iso));
    for (const char *c = iso; *c != '\0' && k + 1 < size; c++) {
        if (*c != '-' && *c != ':' && *c != '.') {
            out[k++] = *c;
        }
    }
    out[k] = '\0';
}

/* ---- the path rule (reference section 4.6) ------------------------------------------- */

/* The next component of *p (skipping '/' and "."), or 0 at the end. */
static int
next_comp(const char **p, const char **start, size_t *len)
{
    for (;;) {
        while (**p == '/') {
            (*p)++;
        }
        if (**p == '\0') {
            return 0;
        }
        *start = *p;
        while (**p != '\0' && **p != '/') {
            (*p)++;
        }
        *len = (size_t)(*p - *start);
        if (!(*len == 1 && (*start)[0] == '.')) {
            return 1;
        }
    }
}

/*
 * Checks path against root as the reference does (no ".." component; under root
 * component-wise, not canonicalized) and writes the remainder (components joined by
 * '/') into rel. Ends nothing: returns 0, or -1 with the tool error code in *code and
 * the message in err.
 */
static int
snap_rel(const char *root, const char *path, char *rel, size_t size, const char **code,
         struct err *err)
{
    const char *p = path, *r = root, *ps, *rs;
    size_t pl, rl, k = 0;

    *code = "snapshot_denied";
    while (next_comp(&p, &ps, &pl)) {
        if (pl == 2 && ps[0] == '.' && ps[1] == '.') {
            return err_set(err, ERR_DENIED,
                           "snapshot to '%.200s' is not permitted; path must not contain '..'",
                           path);
        }
    }
    p = path;
    if (path[0] != '/') {
        return err_set(err, ERR_DENIED,
                       "snapshot to '%.150s' is not permitted; must be under '%.80s'", path, root);
    }
    while (next_comp(&r, &rs, &rl)) {
        if (!next_comp(&p, &ps, &pl) || pl != rl || memcmp(ps, rs, rl) != 0) {
            return err_set(err, ERR_DENIED,
                           "snapshot to '%.150s' is not permitted; must be under '%.80s'", path,
                           root);
        }
    }
    while (next_comp(&p, &ps, &pl)) {
        if (k + pl + 2 > size) {
            *code = TOOL_ERR_INVALID_ARGUMENTS;
            return err_set(err, ERR_TOOBIG, "snapshot path '%.200s' is too long", path);
        }
        if (k > 0) {
            rel[k++] = '/';
        }
        memcpy(rel + k, ps, pl);
        k += pl;
    }
    rel[k] = '\0';
    if (k == 0) {
        *code = TOOL_ERR_INVALID_ARGUMENTS;
        return err_set(err, ERR_INVAL,
                       "snapshot path '%.200s' names the snapshots directory itself; name a file "
                       "under it",
                       path);
    }
    return 0;
}

/* mkdir -p of an absolute directory the operator configured (0700 for new ones). */
static int
mkdirs_abs(const char *dir, struct err *err)
{
    char tmp[PATH_MAX];
    size_t n = strlen(dir);

    if (n == 0 || n >= sizeof(tmp)) {
        return err_set(err, ERR_INVAL, "snapshots_dir '%.200s' is not a usable path", dir);
    }
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == '\0') {
            char c = tmp[i];
            tmp[i] = '\0';
            if (mkdir(tmp, 0700) < 0 && errno != EEXIST) {
                return err_set(err, ERR_IO, "cannot create snapshots_dir '%.200s': %s", tmp,
                               strerror(errno));
            }
            tmp[i] = c;
        }
    }
    return 0;
}

/*
 * Exports snapshot `name` to rel beneath root, atomically (see the file comment).
 * *bytes receives the file's size.
 */
static int
snap_write_file(struct store *st, const char *name, const char *root, const char *rel,
                int64_t *bytes, struct err *err)
{
    char real[PATH_MAX], dir[SNAP_PATH_MAX], tmp[160], tpath[PATH_MAX + 168];
    const char *base = strrchr(rel, '/');
    int rootfd = -1, dfd = -1, rc = -1, made = 0;
    struct stat sb;

    if (base != NULL) {
        snprintf(dir, sizeof(dir), "%.*s", (int)(base - rel), rel);
        base++;
    } else {
        dir[0] = '\0';
        base = rel;
    }
    if (mkdirs_abs(root, err) < 0) {
        return -1;
    }
    /* snapshots_dir is the operator's: its own symlinks are resolved once, here. */
    if (realpath(root, real) == NULL) {
        return err_set(err, ERR_IO, "cannot resolve snapshots_dir '%.200s': %s", root,
                       strerror(errno));
    }
    rootfd = host_open_root(real, err);
    if (rootfd < 0) {
        goto out;
    }
    dfd = host_open_dir(rootfd, dir, 1, 0755, err); /* "" = the root itself */
    if (dfd < 0) {
        goto out;
    }
    /* The store writes through SQLite, which takes a path: the temp file goes at the top
     * of the resolved snapshots_dir (the operator's directory, not a place an agent can
     * plant links), and renameat moves it into the directory fd the walk opened. */
    snprintf(tmp, sizeof(tmp), ".%.100s.tmp-%d-%lld", base, (int)getpid(),
             (long long)time_now_ms());
    if ((size_t)snprintf(tpath, sizeof(tpath), "%s/%s", real, tmp) >= sizeof(tpath)) {
        err_set(err, ERR_TOOBIG, "snapshots_dir '%.200s' is too long", real);
        goto out;
    }
    if (store_snapshot_export(st, name, tpath, ws_manifest_refs, NULL, err) < 0) {
        goto out;
    }
    made = 1;
    if (fstatat(dfd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode)) {
        err_set(err, ERR_EXISTS, "'%.200s' is a directory; name a file", rel);
        goto out;
    }
    if (renameat(rootfd, tmp, dfd, base) < 0) {
        err_set(err, ERR_IO, "cannot rename into '%.200s': %s", rel, strerror(errno));
        goto out;
    }
    made = 0;
    *bytes = fstatat(dfd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0 ? (int64_t)sb.st_size : 0;
    rc = 0;
out:
    if (made) {
        unlinkat(rootfd, tmp, 0);
    }
    if (dfd >= 0) {
        close(dfd);
    }
    if (rootfd >= 0) {
        close(rootfd);
    }
    return rc;
}

/* ---- session_snapshot ------------------------------------------------------------------ */

static const char *
create_code(const struct err *err)
{
    switch (err->code) {
    case ERR_INVAL:
    case ERR_TOOBIG:
    case ERR_EXISTS:
        return TOOL_ERR_INVALID_ARGUMENTS;
    case ERR_NOTFOUND:
        return "session_not_found";
    default:
        return tools_err_code(err->code);
    }
}

static void
do_session_snapshot(struct tool_call *call)
{
    struct store *st = tool_call_env(call)->store;
    const char *arg_name = tool_call_arg_str(call, "name");
    const char *path = tool_call_arg_str(call, "path");
    const char *desc = tool_call_arg_str(call, "description");
    char *name = NULL, *pathc = NULL, *descc = NULL, *root = NULL;
    char rel[SNAP_PATH_MAX];
    const char *code = NULL;
    struct policy *p = NULL;
    struct store_snapshot snap, other;
    struct session *s;
    struct session_err e;
    struct err err;
    int64_t bytes = 0;
    cJSON *o;

    memset(&snap, 0, sizeof(snap));
    /* Copies: tsess_open frees the call (and its arguments) when it fails. */
    name = arg_name ? mem_strdup(arg_name) : NULL;
    pathc = path ? mem_strdup(path) : NULL;
    descc = mem_strdup(desc ? desc : "");
    if ((arg_name && name == NULL) || (path && pathc == NULL) || descc == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    if (name != NULL) {
        if (store_snapshot_name_check(name, &err) < 0) {
            tool_call_done_err(call, TOOL_ERR_INVALID_ARGUMENTS, &err);
            goto out;
        }
        memset(&other, 0, sizeof(other));
        if (store_snapshot_get(st, name, &other, &err) == 0) {
            char msg[ERR_MSG_MAX];
            store_snapshot_release(&other);
            snprintf(msg, sizeof(msg),
                     "snapshot name '%.128s' is already taken; choose another name, or omit "
                     "name for '<session_id>-<UTC time>'",
                     name);
            tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS, msg, NULL);
            goto out;
        }
    }
    if (pathc != NULL) {
        if (tools_policy(call, &p) < 0) {
            goto out;
        }
        root = mem_strdup(p->snapshots_dir);
        policy_unref(p);
        if (root == NULL) {
            tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
            goto out;
        }
        if (strlen(pathc) >= SNAP_PATH_MAX ||
            snap_rel(root, pathc, rel, sizeof(rel), &code, &err) < 0) {
            if (code == NULL) {
                code = TOOL_ERR_INVALID_ARGUMENTS;
                err_set(&err, ERR_TOOBIG, "snapshot path is longer than %d bytes",
                        SNAP_PATH_MAX - 1);
            }
            tool_call_done_err(call, code, &err);
            goto out;
        }
    }
    s = tsess_open(call, SESSION_READ);
    if (s == NULL) {
        goto out;
    }
    if (store_snapshot_create(st, session_id(s), name, descc[0] ? descc : NULL, &snap, &err) < 0) {
        session_leave(s, SESSION_READ);
        tool_call_done_err(call, create_code(&err), &err);
        goto out;
    }
    if (pathc != NULL && snap_write_file(st, snap.name, root, rel, &bytes, &err) < 0) {
        struct err derr;
        char msg[ERR_MSG_MAX];
        session_leave(s, SESSION_READ);
        int nowait = store_set_nowait(st, 0); /* a clean-up waits rather than leave it */
        if (store_snapshot_delete(st, snap.name, &derr) < 0) {
            log_warn("cannot delete snapshot '%s' after a failed export: %s", snap.name, derr.msg);
        }
        store_set_nowait(st, nowait);
        snprintf(msg, sizeof(msg), "cannot write snapshot file: %.180s; no snapshot was kept",
                 err.msg);
        tool_call_done_error(call, err.code == ERR_DENIED ? "snapshot_denied" : TOOL_ERR_INTERNAL,
                             msg, NULL);
        goto out;
    }
    if (session_step(s, -1, "session_snapshot", descc, &e) < 0) {
        /* The snapshot is whole; only the history note is missing. */
        log_warn("snapshot '%s': cannot append the step: %s", snap.name, e.base.msg);
    }
    session_leave(s, SESSION_READ);
    o = cJSON_CreateObject();
    if (o == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    /* The reference's key stays for its clients: null says the snapshot lives only in
     * the database, under `name`. */
    if (pathc != NULL) {
        cJSON_AddStringToObject(o, "snapshot_path", pathc);
        cJSON_AddNumberToObject(o, "size_bytes", (double)bytes);
    } else {
        cJSON_AddNullToObject(o, "snapshot_path");
        cJSON_AddNullToObject(o, "size_bytes");
    }
    cJSON_AddStringToObject(o, "name", snap.name);
    cJSON_AddNumberToObject(o, "snapshot_id", (double)snap.id);
    cJSON_AddStringToObject(o, "session_id", snap.session_id);
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)snap.head);
    cJSON_AddNumberToObject(o, "checkpoints", (double)snap.checkpoints);
    tool_call_set_summary(call, "snapshot '%s'%s%.150s", snap.name, pathc ? " to " : "",
                          pathc ? pathc : "");
    tool_call_done_json(call, o);
out:
    store_snapshot_release(&snap);
    mem_free(name);
    mem_free(pathc);
    mem_free(descc);
    mem_free(root);
}

/* ---- list_snapshots ----------------------------------------------------------------------- */

static cJSON *
db_entry(const struct store_snapshot *s)
{
    cJSON *o = cJSON_CreateObject();
    char t[32];

    if (o == NULL) {
        return NULL;
    }
    time_format_iso(s->created_ms, t, sizeof(t));
    cJSON_AddStringToObject(o, "kind", "db");
    cJSON_AddNullToObject(o, "path"); /* the reference's keys: it lives in the database */
    cJSON_AddNullToObject(o, "size_bytes");
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddNumberToObject(o, "snapshot_id", (double)s->id);
    cJSON_AddStringToObject(o, "session_id", s->session_id);
    cJSON_AddStringToObject(o, "created", t);
    cJSON_AddNumberToObject(o, "checkpoint_count", (double)s->checkpoints);
    cJSON_AddNumberToObject(o, "checkpoint_id", (double)s->head);
    if (s->label != NULL) {
        cJSON_AddStringToObject(o, "label", s->label);
    }
    if (s->description != NULL) {
        cJSON_AddStringToObject(o, "description", s->description);
    }
    return o;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads up to max bytes of a regular file beneath dfd without following a link. */
static ssize_t
read_head(int dfd, const char *name, char *out, size_t max, struct stat *sb)
{
    ssize_t n = -1;
    size_t got = 0;
    int fd;

    /* Only regular files are opened: opening a device or a FIFO can have effects. */
    if (fstatat(dfd, name, sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb->st_mode)) {
        return -1;
    }
    fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    if (fstat(fd, sb) == 0 && S_ISREG(sb->st_mode)) {
        while (got < max) {
            n = read(fd, out + got, max - got);
            if (n <= 0) {
                break;
            }
            got += (size_t)n;
        }
        n = n < 0 ? -1 : (ssize_t)got;
    }
    close(fd);
    return n;
}

/* Adds the reference's .drun.meta keys (label, checkpoint_count) for name to o. */
static void
add_meta(int dfd, const char *name, cJSON *o)
{
    char meta[NAME_MAX + 8];
    char *text = NULL;
    struct stat sb;
    cJSON *j = NULL;
    const cJSON *label, *count;
    ssize_t n;

    if ((size_t)snprintf(meta, sizeof(meta), "%s.meta", name) >= sizeof(meta) ||
        (text = mem_alloc(SNAP_META_MAX)) == NULL) {
        goto out;
    }
    n = read_head(dfd, meta, text, SNAP_META_MAX, &sb);
    if (n <= 0 || (j = cJSON_ParseWithLength(text, (size_t)n)) == NULL) {
        goto out;
    }
    label = cJSON_GetObjectItemCaseSensitive(j, "label");
    count = cJSON_GetObjectItemCaseSensitive(j, "checkpoint_count");
    if (cJSON_IsString(label)) {
        cJSON_AddStringToObject(o, "label", label->valuestring);
    }
    if (cJSON_IsNumber(count)) {
        cJSON_AddNumberToObject(o, "checkpoint_count", count->valuedouble);
    }
out:
    cJSON_Delete(j);
    mem_free(text);
}

/* Appends the portable files of dir to arr, sorted by path. A missing dir adds none. */
static int
list_files(const char *dir, cJSON *arr, const char **code, struct err *err)
{
    DIR *d = NULL;
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, listed = 0;
    int dfd, rc = -1;

    *code = TOOL_ERR_INTERNAL;
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == ENOENT) {
            return 0;
        }
        return err_set(err, ERR_IO, "cannot read snapshots_dir '%.200s': %s", dir, strerror(errno));
    }
    d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return err_set(err, ERR_IO, "cannot read snapshots_dir '%.200s': %s", dir, strerror(errno));
    }
    names = mem_calloc(SNAP_LIST_MAX * 4 + 1, sizeof(*names));
    if (names == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') {
            continue; /* ".", "..", and the hidden temp names of exports in flight */
        }
        if (n == SNAP_LIST_MAX * 4) {
            *code = "result_too_large";
            err_set(err, ERR_TOOBIG,
                    "snapshots_dir '%.150s' holds more than %d entries; move some files away", dir,
                    SNAP_LIST_MAX * 4);
            goto out;
        }
        if ((names[n++] = mem_strdup(de->d_name)) == NULL) {
            err_set(err, ERR_NOMEM, "out of memory");
            goto out;
        }
    }
    qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; i++) {
        char head[16], path[PATH_MAX], t[32];
        struct stat sb;
        const char *kind;
        ssize_t got = read_head(dirfd(d), names[i], head, sizeof(head), &sb);
        cJSON *o;

        if (got == 16 && memcmp(head, SNAP_SQLITE_HD, 16) == 0) {
            kind = "export";
        } else if (got >= 4 && drunfile_is_drun(head, (size_t)got)) {
            kind = "drun";
        } else {
            continue; /* not a snapshot file (a .drun.meta is read with its .drun) */
        }
        if (++listed > SNAP_LIST_MAX) {
            *code = "result_too_large";
            err_set(err, ERR_TOOBIG,
                    "snapshots_dir '%.150s' holds more than %d snapshot files; move some away", dir,
                    SNAP_LIST_MAX);
            goto out;
        }
        o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            err_set(err, ERR_NOMEM, "out of memory");
            goto out;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        time_format_iso((int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000, t,
                        sizeof(t));
        cJSON_AddStringToObject(o, "kind", kind);
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddNumberToObject(o, "size_bytes", (double)sb.st_size);
        cJSON_AddStringToObject(o, "mtime", t);
        if (strcmp(kind, "drun") == 0) {
            add_meta(dirfd(d), names[i], o);
        }
    }
    rc = 0;
out:
    for (size_t i = 0; names != NULL && i < n; i++) {
        mem_free(names[i]);
    }
    mem_free(names);
    closedir(d);
    return rc;
}

static void
do_list_snapshots(struct tool_call *call)
{
    struct store *st = tool_call_env(call)->store;
    struct store_snapshot *list = NULL;
    struct policy *p = NULL;
    size_t n = 0, nfiles;
    const char *code = NULL;
    struct err err;
    cJSON *arr;

    if (tools_policy(call, &p) < 0) {
        return;
    }
    arr = cJSON_CreateArray();
    if (arr == NULL) {
        policy_unref(p);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    if (store_snapshot_list(st, &list, &n, &err) < 0) {
        code = TOOL_ERR_INTERNAL;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        cJSON *o = db_entry(&list[i]);
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            code = TOOL_ERR_INTERNAL;
            err_set(&err, ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    if (list_files(p->snapshots_dir, arr, &code, &err) < 0) {
        goto fail;
    }
    nfiles = (size_t)cJSON_GetArraySize(arr) - n;
    store_snapshot_list_free(list, n);
    policy_unref(p);
    tool_call_set_summary(call, "%zu snapshots, %zu files", n, nfiles);
    tool_call_done_json(call, arr);
    return;
fail:
    store_snapshot_list_free(list, n);
    policy_unref(p);
    cJSON_Delete(arr);
    tool_call_done_err(call, code, &err);
}

/* ---- session_restore ------------------------------------------------------------------- */

/*
 * The read door for session_restore's path (the reference reads any host path: its
 * section 14, item 18). A snapshot file is read from under snapshots_dir, or through the
 * same door as session_mount (mount_allowlist after resolving links): restore never reads
 * what a mount could not. The check answers for one moment, so the file is then opened
 * once by host_open_snapshot_file (no link followed anywhere on the way, O_NOFOLLOW |
 * O_NONBLOCK, fstat must say regular file): a path a sandbox swaps for a FIFO or a link
 * between the check and the open is refused instead of blocking the daemon in open() or
 * leading elsewhere. Only that fd is read afterwards. Returns the fd; the resolved path
 * goes to shown.
 */
static int
restore_open(const struct policy *p, const char *path, char *shown, size_t size, struct err *err)
{
    struct policy_hostpath hp;
    char real[PATH_MAX], root[PATH_MAX];
    struct stat sb;
    int admitted = 0;
    size_t n;

    if (path[0] != '/') {
        return err_set(err, ERR_INVAL,
                       "path '%.200s' is not absolute; give the snapshot file's "
                       "absolute path",
                       path);
    }
    if (realpath(path, real) != NULL && p->snapshots_dir != NULL &&
        realpath(p->snapshots_dir, root) != NULL) {
        n = strlen(root);
        admitted = (n == 1 && root[0] == '/') || (strncmp(real, root, n) == 0 && real[n] == '/');
    }
    if (!admitted) {
        if (policy_hostpath_check(p, path, POLICY_DOOR_MOUNT, &hp, err) < 0) {
            if (err->code == ERR_DENIED) {
                return err_set(err, ERR_DENIED,
                               "reading '%.200s' is not permitted; snapshot files are read from "
                               "snapshots_dir ('%.200s') or a mount_allowlist path",
                               path, p->snapshots_dir ? p->snapshots_dir : "");
            }
            return -1;
        }
        /* The rest of the read door (/proc, /sys, /dev, drun's own files), in its words:
         * a workspace is in the runtime directory, so a file an agent wrote there is
         * never read back as a snapshot. */
        if (host_check(p, path, POLICY_DOOR_MOUNT, &hp, err) < 0) {
            return -1;
        }
        snprintf(real, sizeof(real), "%s", hp.resolved);
    }
    snprintf(shown, size, "%s", real);
    return host_open_snapshot_file(real, &sb, err);
}

/*
 * Restores snapshot `name` as a session claimed by m's process, under max_sessions, its
 * overlays judged again by vet under the policy in force now (a DB snapshot may have been
 * taken under a wider one), all in one transaction.
 */
static int
restore_claimed(struct session_mgr *m, const char *name, struct drunfile_vet *vet,
                struct store_session *out, struct session_err *e)
{
    struct store *st = session_mgr_store(m);
    const struct session_limits *lim = session_mgr_limits(m);
    pid_t pid = session_mgr_pid(m);
    int64_t open = 0;

    if (store_begin(st, &e->base) < 0) {
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (store_session_count_open(st, &open, &e->base) < 0) {
        store_rollback(st);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (open >= lim->max_sessions) {
        store_rollback(st);
        session_fail(e, SESSION_E_LIMIT, ERR_TOOBIG,
                     "session limit of %lld reached; close an existing session to create a "
                     "new one",
                     (long long)lim->max_sessions);
        e->d1 = lim->max_sessions;
        return -1;
    }
    if (store_snapshot_restore(st, name, -1, pid, proc_start_time(pid), out, &e->base) < 0) {
        store_rollback(st);
        if (e->base.code == ERR_NOTFOUND) {
            return session_fail(e, SESSION_E_ARGS, ERR_NOTFOUND,
                                "no snapshot named '%.128s'; list_snapshots lists them", name);
        }
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (store_session_overlays_filter(st, out->id, drunfile_overlay_keep, vet, &e->base) < 0) {
        store_rollback(st);
        store_session_release(out);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    if (store_commit(st, &e->base) < 0) {
        store_session_release(out);
        return session_fail_err(e, SESSION_E_OTHER, &e->base);
    }
    return 0;
}

/* The import's error code for the agent: a bad or hostile file is a bad argument. */
static const char *
import_code(const struct err *err)
{
    switch (err->code) {
    case ERR_DENIED:
        return "snapshot_denied";
    case ERR_NOTFOUND:
    case ERR_INVAL:
    case ERR_TOOBIG: /* past an import cap: a smaller file would do */
        return TOOL_ERR_INVALID_ARGUMENTS;
    default:
        return TOOL_ERR_INTERNAL;
    }
}

static void
do_session_restore(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call);
    struct session_mgr *m;
    const char *name = tool_call_arg_str(call, "name");
    const char *path = tool_call_arg_str(call, "path");
    char snap[STORE_SNAPSHOT_NAME_MAX + 1];
    char real[PATH_MAX]; /* path, resolved */
    struct store_session ss;
    struct session *s = NULL;
    struct session_err e;
    struct session_delta d = {0, 0, 0, 0, 0};
    struct policy *p = NULL;
    struct drunfile_vet vet;
    struct err err;
    int imported = 0, fd;
    cJSON *st;

    memset(&vet, 0, sizeof(vet));
    if ((name == NULL) == (path == NULL)) {
        tool_call_done_error(call, TOOL_ERR_INVALID_ARGUMENTS,
                             "give exactly one of 'name' (a snapshot in the database) or 'path' "
                             "(a snapshot file)",
                             NULL);
        return;
    }
    m = tsess_mgr(call);
    if (m == NULL) {
        return;
    }
    if (name != NULL && store_snapshot_name_check(name, &err) < 0) {
        tool_call_done_err(call, TOOL_ERR_INVALID_ARGUMENTS, &err);
        return;
    }
    if (tools_policy(call, &p) < 0) {
        return;
    }
    vet.p = p;
    vet.dropped = cJSON_CreateArray();
    if (vet.dropped == NULL) {
        policy_unref(p);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    if (name != NULL) {
        snprintf(snap, sizeof(snap), "%s", name);
    } else {
        struct store_snapshot got;
        fd = restore_open(p, path, real, sizeof(real), &err);
        if (fd < 0) {
            tool_call_done_err(call, import_code(&err), &err);
            goto out;
        }
        memset(&got, 0, sizeof(got));
        /* The message names the file and what is wrong with it. */
        if (drunfile_import_fd(env->store, fd, real, NULL, &vet, &got, &err) < 0) {
            close(fd);
            tool_call_done_err(call, import_code(&err), &err);
            goto out;
        }
        close(fd);
        snprintf(snap, sizeof(snap), "%s", got.name);
        store_snapshot_release(&got);
        imported = 1;
    }
    memset(&ss, 0, sizeof(ss));
    if (restore_claimed(m, snap, &vet, &ss, &e) < 0) {
        goto fail;
    }
    if (session_attach(m, ss.id, &s, &e) < 0) {
        store_session_release(&ss);
        goto fail;
    }
    store_session_release(&ss);
    snprintf(env->session_id, sizeof(env->session_id), "%s", session_id(s));
    tool_call_set_session(call, session_id(s));
    tool_call_set_summary(call, "restored '%s' as %s%s", snap, session_id(s),
                          vet.total ? ", overlays dropped" : "");
    st = tsess_state(s, &d, &e);
    if (st == NULL) {
        tsess_fail(call, &e);
        goto out;
    }
    cJSON_AddStringToObject(st, "snapshot_name", snap);
    if (vet.total > 0) {
        /* Overlays the current policy refuses are never bound; the agent is told which. */
        cJSON_AddItemToObject(st, "dropped_overlays", vet.dropped);
        cJSON_AddNumberToObject(st, "dropped_overlays_total", (double)vet.total);
        vet.dropped = NULL;
    }
    tool_call_done_json(call, st);
    tools_bash_prewarm(env, s, NULL); /* the answer is out: prepare its first sandbox */
    goto out;
fail:
    if (imported) {
        struct err derr;
        int nowait = store_set_nowait(env->store, 0); /* a clean-up waits, not leave it */
        if (store_snapshot_delete(env->store, snap, &derr) < 0) {
            log_warn("cannot delete imported snapshot '%s': %s", snap, derr.msg);
        }
        store_set_nowait(env->store, nowait);
    }
    tsess_fail(call, &e);
out:
    cJSON_Delete(vet.dropped);
    policy_unref(p);
}

/* ---- session_close's snapshot_on_close ----------------------------------------------- */

int
tsnap_close_wanted(struct tool_call *call)
{
    struct policy *p = NULL;
    int want;

    if (tools_policy(call, &p) < 0) {
        return -1;
    }
    want = p->snapshot_on_close != 0;
    policy_unref(p);
    return want;
}

int
tsnap_close_snapshot(struct session *s, char *name, size_t size, struct session_err *e)
{
    struct store *st = session_mgr_store(session_owner(s));
    struct store_snapshot snap;
    char t[32];

    compact_time(t, sizeof(t));
    snprintf(name, size, "%s-close-%s", session_id(s), t);
    if (store_snapshot_create(st, session_id(s), name, "snapshot_on_close", &snap, &e->base) < 0) {
        char msg[ERR_MSG_MAX];
        snprintf(msg, sizeof(msg), "%.150s", e->base.msg);
        name[0] = '\0';
        return session_fail(e, SESSION_E_OTHER, ERR_IO,
                            "snapshot_on_close: cannot snapshot session '%s' (%s); the session "
                            "was left open",
                            session_id(s), msg);
    }
    store_snapshot_release(&snap);
    return 0;
}

/* ---- definitions ----------------------------------------------------------------------- */

#define SCHEMA_HEAD                                                                                \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","

static const char snapshot_schema[] =
    SCHEMA_HEAD "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4095,"
                "\"description\":\"Also write a portable snapshot file here (absolute, under the "
                "server's snapshots_dir).\"},\"name\":{\"type\":\"string\",\"minLength\":1,"
                "\"maxLength\":128,\"description\":\"Snapshot name ([A-Za-z0-9._-]; default "
                "'<session_id>-<UTC time>').\"},\"description\":{\"type\":\"string\","
                "\"description\":\"Why you take it.\"}," TSESS_ID_PROP
                "},\"required\":[\"description\"],\"additionalProperties\":false}";

static const char list_schema[] = SCHEMA_HEAD "\"properties\":{},\"additionalProperties\":false}";

static const char restore_schema[] =
    SCHEMA_HEAD "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4095,"
                "\"description\":\"A snapshot file (drun export or original .drun).\"},"
                "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":128,"
                "\"description\":\"A snapshot in the database (see list_snapshots).\"}},"
                "\"additionalProperties\":false}";

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char restore_out[] = TSESS_OUT_OBJECT(
    TSESS_OUT_STATE_PROPS ",\"snapshot_name\":" J_STR ",\"dropped_overlays\":" J_OBJS
                          ",\"dropped_overlays_total\":" J_INT,
    TSESS_OUT_STATE_REQ ",\"snapshot_name\"");
static const char snapshot_out[] = TSESS_OUT_OBJECT(
    "\"snapshot_path\":" J_STR_NULL ",\"size_bytes\":" J_INT_NULL ",\"name\":" J_STR
    ",\"snapshot_id\":" J_INT ",\"session_id\":" J_STR ",\"checkpoint_id\":" J_INT
    ",\"checkpoints\":" J_INT,
    "\"snapshot_path\",\"size_bytes\",\"name\",\"snapshot_id\",\"session_id\",\"checkpoint_id\","
    "\"checkpoints\"");

const struct tool_def tools_snapshot_defs[] = {
    {
        .name = "list_snapshots",
        .title = "List snapshots",
        .description = "List snapshots: those in the database (kind db) and snapshot files in "
                       "the server's snapshots_dir.",
        .input_schema = list_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_list_snapshots,
    },
    {
        .name = "session_snapshot",
        .title = "Snapshot a session",
        .description = "Save the active session's whole history as a named, immutable "
                       "snapshot; with path, also write it to a portable file.",
        .input_schema = snapshot_schema,
        .annotations = {0, 0, 1, 0},
        .output_schema = snapshot_out,
        .handler = do_session_snapshot,
    },
    {
        .name = "session_restore",
        .title = "Restore a snapshot",
        .description = "Make a new session from a snapshot (name) or snapshot file (path) with "
                       "its full history; it becomes your active session.",
        .input_schema = restore_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = restore_out,
        .handler = do_session_restore,
    },
};

const size_t tools_snapshot_count = sizeof(tools_snapshot_defs) / sizeof(tools_snapshot_defs[0]);
