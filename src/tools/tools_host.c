/*
 * tools_host.c - the host doors as tools: session_mount, session_export,
 * delete_from_host and session_get_env. JSON in, one call into host/ (host.h), JSON out.
 *
 * These four tools are the only ways an agent reaches the host's files and environment,
 * so every path they get is treated as hostile, and every rule about host paths lives in
 * host/, not here: the allowlist and the host rules (host_check), opening once without
 * following links (host_open_read), the mount walk (host_read_tree, whose callbacks here
 * stage entries into the session and count bytes against max_workspace_mb), the export
 * (host_export, whose callbacks read entries from the session) and the delete
 * (host_remove). Each call takes one policy snapshot (tools_policy).
 */
#include "tools/tools_sess.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host.h"
#include "policy/policy.h"
#include "session/session.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/pathkey.h"

#define ERR_MOUNT_DENIED  "mount_denied"
#define ERR_BAD_PATH      "invalid_workspace_path"
#define ERR_FILE_NOTFOUND "file_not_found"
#define ERR_SIZE          "workspace_size_exceeded"
#define ERR_ENV_DENIED    "env_var_denied"

#define MIB             ((int64_t)1 << 20)
#define MOUNT_ENTRY_MAX 1000000 /* entries one mount may stage */
#define SKIP_LIST_MAX   100     /* skipped entries listed by name in a result */
#define READ_CHUNK      65536
#define HOST_PATH_MAX   4096

/* ---- shared helpers ------------------------------------------------------------------ */

/* Ends the call for a refused or malformed host path, naming the permitted prefixes. */
static void
fail_hostpath(struct tool_call *call, const struct policy *p, const struct err *err)
{
    struct buf msg;
    cJSON *detail = NULL;

    if (err->code == ERR_INVAL) {
        tool_call_done_error(call, ERR_BAD_PATH, err->msg, NULL);
        return;
    }
    if (err->code != ERR_DENIED) {
        tool_call_done_err(call, NULL, err);
        return;
    }
    buf_init(&msg, 8192);
    buf_puts(&msg, err->msg);
    detail = cJSON_CreateObject();
    if (p->mount_allowlist.n > 0) {
        cJSON *a = cJSON_CreateArray();
        buf_puts(&msg, "; permitted prefixes: ");
        for (size_t i = 0; i < p->mount_allowlist.n; i++) {
            buf_printf(&msg, "%s%s", i ? ", " : "", p->mount_allowlist.v[i]);
            cJSON_AddItemToArray(a, cJSON_CreateString(p->mount_allowlist.v[i]));
        }
        cJSON_AddItemToObject(detail, "permitted_prefixes", a);
    }
    tool_call_done_error(call, ERR_MOUNT_DENIED, buf_cstr(&msg), detail);
    buf_release(&msg);
}

/* A list of {path, why} the result reports; the first SKIP_LIST_MAX by name. */
struct skips {
    cJSON *list;
    size_t total;
};

static void
skips_add(struct skips *sk, const char *path, const char *why)
{
    char q[512];
    cJSON *o;

    sk->total++;
    if (sk->list == NULL || (size_t)cJSON_GetArraySize(sk->list) >= SKIP_LIST_MAX) {
        return;
    }
    pathkey_quote(path, strlen(path), q, sizeof(q));
    o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddStringToObject(o, "path", q);
        cJSON_AddStringToObject(o, "why", why);
        cJSON_AddItemToArray(sk->list, o);
    }
}

/* ---- delete_from_host -------------------------------------------------------------- */

static void
delete_from_host(struct tool_call *call)
{
    const char *path = tool_call_arg_str(call, "path");
    struct policy *p = NULL;
    struct policy_hostpath hp;
    struct host_removed rm;
    struct err err;
    cJSON *r;
    int rootfd = -1;

    if (tools_policy(call, &p) < 0) {
        return;
    }
    if (host_check(p, path, POLICY_DOOR_DELETE, &hp, &err) < 0) {
        tool_call_set_summary(call, "delete_from_host: refused '%s'", path);
        fail_hostpath(call, p, &err);
        goto out;
    }
    /*
     * The check resolved the parent and kept the last name, so hp.rel names the entry
     * itself (a link is removed as a link). host_remove re-walks rel from the root
     * fd without following links and refuses to cross into another filesystem.
     */
    rootfd = host_open_root(hp.root, &err);
    if (rootfd < 0 || host_remove(rootfd, hp.rel, &rm, &err) < 0) {
        tool_call_set_summary(call, "delete_from_host: failed '%s'", path);
        fail_hostpath(call, p, &err);
        goto out;
    }
    r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "path", path);
    cJSON_AddBoolToObject(r, "deleted", !rm.missing);
    cJSON_AddNumberToObject(r, "files_removed", (double)rm.files);
    cJSON_AddNumberToObject(r, "dirs_removed", (double)rm.dirs);
    tool_call_set_summary(call, "delete_from_host: '%s' %s", path,
                          rm.missing ? "did not exist" : "deleted");
    tool_call_done_json(call, r);
out:
    if (rootfd >= 0) {
        close(rootfd);
    }
    policy_unref(p);
}

/* ---- session_get_env ---------------------------------------------------------------- */

static void
session_get_env(struct tool_call *call)
{
    const char *name = tool_call_arg_str(call, "name");
    struct policy *p = NULL;
    struct session *s = NULL;
    const char *value;
    char msg[512];
    cJSON *r;

    if (tools_policy(call, &p) < 0) {
        return;
    }
    /* The reference needs an active session but takes no lock: existence only. */
    if ((s = tsess_open(call, 0)) == NULL) {
        goto out;
    }
    if (!policy_env_allowed(p, name)) {
        char q[300];
        pathkey_quote(name, strlen(name), q, sizeof(q));
        snprintf(msg, sizeof(msg),
                 "'%s' is not in the server's env_allowlist; ask the operator to add it to "
                 "env_allowlist in config.toml",
                 q);
        tool_call_set_summary(call, "session_get_env: denied '%s'", q);
        tool_call_done_error(call, ERR_ENV_DENIED, msg, NULL);
        goto out;
    }
    value = getenv(name);
    r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", name);
    cJSON_AddStringToObject(r, "value", value != NULL ? value : "");
    cJSON_AddBoolToObject(r, "is_set", value != NULL);
    tool_call_set_summary(call, "session_get_env: '%s'", name);
    tool_call_done_json(call, r);
out:
    policy_unref(p);
}

/* ---- session_mount ------------------------------------------------------------------ */

struct mount {
    struct tool_call *call;
    const struct policy *p;
    struct session_mgr *mgr;
    struct session_edit *ed;
    const char *host_root; /* the resolved path mounted */
    uint64_t limit;        /* max_workspace_mb in bytes */
    uint64_t bytes;        /* file bytes read so far */
    size_t entries;
    size_t files;
    struct skips skipped;
    cJSON *overlays; /* [{key, host_path}] found, registered after the commit */
    struct buf data; /* one file's contents */
    struct store *st;
    int in_tx;      /* a store bracket holds the blobs put since the last batch */
    size_t batched; /* blobs put in the open bracket */
    struct session_err e;
};

#define BLOB_BATCH 256 /* blobs per transaction: one fsync per batch, not per file */

/*
 * Puts a blob through the session's ws_blobs, batching BLOB_BATCH puts per store
 * transaction: a mount of thousands of small files would otherwise pay one fsync each.
 * The batches commit before the checkpoint's own transaction (brackets do not nest);
 * blobs of a mount that then fails are unreferenced and go at the next gc.
 */
static int
mount_put(struct mount *mt, const void *data, size_t len, uint8_t hash[HASH_LEN])
{
    const struct ws_blobs *blobs = session_mgr_blobs(mt->mgr);

    if (!mt->in_tx) {
        if (store_begin(mt->st, &mt->e.base) < 0) {
            return session_fail_err(&mt->e, SESSION_E_OTHER, &mt->e.base);
        }
        mt->in_tx = 1;
    }
    if (blobs->put(blobs->ctx, data, len, hash, &mt->e.base) < 0) {
        return session_fail_err(&mt->e, SESSION_E_OTHER, &mt->e.base);
    }
    if (++mt->batched >= BLOB_BATCH) {
        mt->batched = 0;
        mt->in_tx = 0;
        if (store_commit(mt->st, &mt->e.base) < 0) {
            return session_fail_err(&mt->e, SESSION_E_OTHER, &mt->e.base);
        }
    }
    return 0;
}

static const char *
special_kind(mode_t m)
{
    if (S_ISFIFO(m)) {
        return "fifo";
    }
    if (S_ISSOCK(m)) {
        return "socket";
    }
    if (S_ISCHR(m) || S_ISBLK(m)) {
        return "device";
    }
    return "not a regular file, directory or symlink";
}

static int
mount_too_big(struct mount *mt, uint64_t would_be, const char *key)
{
    char q[300];

    pathkey_quote(key, strlen(key), q, sizeof(q));
    session_fail(&mt->e, SESSION_E_SIZE, ERR_TOOBIG,
                 "workspace size %llu bytes exceeds limit of %llu bytes (reading '%s' passed "
                 "max_workspace_mb); mount a smaller directory or ask the operator to raise "
                 "max_workspace_mb",
                 (unsigned long long)would_be, (unsigned long long)mt->limit, q);
    mt->e.d1 = (int64_t)would_be;
    mt->e.d2 = (int64_t)mt->limit;
    return -1;
}

/* Stages one entry whose blob is already stored. */
static int
mount_stage(struct mount *mt, const char *key, int type, uint64_t size, const uint8_t *hash)
{
    struct ws_entry ent;

    if (++mt->entries > MOUNT_ENTRY_MAX) {
        return session_fail(&mt->e, SESSION_E_ARGS, ERR_TOOBIG,
                            "'%s' holds more than %d entries; mount a smaller directory",
                            mt->host_root, MOUNT_ENTRY_MAX);
    }
    memset(&ent, 0, sizeof(ent));
    ent.path = (char *)key;
    ent.type = type;
    ent.size = size;
    if (hash != NULL) {
        memcpy(ent.hash, hash, HASH_LEN);
    }
    return session_edit_put(mt->ed, &ent, &mt->e);
}

/*
 * Reads the regular file open at fd into a blob, counting bytes against the limit as
 * they arrive (the file may grow while we read), and stages it at key.
 */
static int
mount_file(struct mount *mt, int fd, const struct stat *sb, const char *key)
{
    uint8_t hash[HASH_LEN];
    uint64_t room = mt->limit - mt->bytes;

    /* The stat size first: a 2 GB sparse file fails here, before a byte is read. */
    if ((uint64_t)sb->st_size > room) {
        return mount_too_big(mt, mt->bytes + (uint64_t)sb->st_size, key);
    }
    buf_reset(&mt->data);
    for (;;) {
        ssize_t n;
        if (buf_grow(&mt->data, READ_CHUNK) < 0) {
            return session_fail(&mt->e, SESSION_E_OTHER, ERR_NOMEM, "out of memory reading '%s'",
                                key);
        }
        n = read(fd, mt->data.data + mt->data.len, READ_CHUNK);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return session_fail(&mt->e, SESSION_E_OTHER, ERR_IO, "cannot read '%s/%s': %s",
                                mt->host_root, key, strerror(errno));
        }
        if (n == 0) {
            break;
        }
        if ((uint64_t)mt->data.len + (uint64_t)n > room) {
            return mount_too_big(mt, mt->bytes + mt->data.len + (uint64_t)n, key);
        }
        mt->data.len += (size_t)n;
        mt->data.data[mt->data.len] = '\0';
    }
    if (mount_put(mt, mt->data.data, mt->data.len, hash) < 0) {
        return -1;
    }
    mt->bytes += mt->data.len;
    mt->files++;
    return mount_stage(mt, key, (sb->st_mode & 0111) ? WS_EXEC : WS_FILE, mt->data.len, hash);
}

/* ---- the walk's callbacks (host_read_tree does the walking) ---- */

/*
 * A directory named in mount_overlay_paths is registered as a read-only overlay, except a
 * .git no larger than mount_git_copy_max_mb: it is copied like any directory, so `git
 * commit` in the sandbox works and is checkpointed (docs/architecture.md, "A mounted
 * repository's .git").
 */
static int
mount_cb_is_overlay(void *ctx, const char *name, int parentfd)
{
    struct mount *mt = ctx;
    struct err err;

    for (size_t i = 0; i < mt->p->mount_overlay_paths.n; i++) {
        if (strcmp(mt->p->mount_overlay_paths.v[i], name) == 0) {
            /* Bounded by half of what max_workspace_mb leaves too, so copying a .git
             * never makes a mount fail that an overlay would have let through. */
            uint64_t max = (uint64_t)mt->p->mount_git_copy_max_mb * MIB;
            uint64_t left = mt->limit > mt->bytes ? (mt->limit - mt->bytes) / 2 : 0;
            if (strcmp(name, ".git") == 0 && max > 0 &&
                host_dir_within(parentfd, name, max < left ? max : left, &err) == 1) {
                return 0;
            }
            return 1;
        }
    }
    return 0;
}

static int
mount_cb_overlay(void *ctx, const char *key)
{
    struct mount *mt = ctx;
    char host[HOST_PATH_MAX];
    cJSON *o;

    if ((size_t)snprintf(host, sizeof(host), "%s%s%s", mt->host_root,
                         strcmp(mt->host_root, "/") ? "/" : "", key) >= sizeof(host)) {
        skips_add(&mt->skipped, key, "path too long");
        return 0;
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", key);
    cJSON_AddStringToObject(o, "host_path", host);
    cJSON_AddItemToArray(mt->overlays, o);
    return 0;
}

static int
mount_cb_file(void *ctx, const char *key, int fd, const struct stat *sb)
{
    struct mount *mt = ctx;

    if (pathkey_check(key, strlen(key), &mt->e.base) < 0) {
        skips_add(&mt->skipped, key, "invalid name");
        return 0;
    }
    return mount_file(mt, fd, sb, key);
}

/* Records a symlink as a link (its target, never followed). */
static int
mount_cb_link(void *ctx, const char *key, const char *target, size_t len)
{
    struct mount *mt = ctx;
    uint8_t hash[HASH_LEN];

    if (pathkey_check(key, strlen(key), &mt->e.base) < 0) {
        skips_add(&mt->skipped, key, "invalid name");
        return 0;
    }
    if (mount_put(mt, target, len, hash) < 0) {
        return -1;
    }
    mt->files++;
    return mount_stage(mt, key, WS_SYMLINK, (uint64_t)len, hash);
}

static int
mount_cb_empty_dir(void *ctx, const char *key)
{
    struct mount *mt = ctx;

    if (pathkey_check(key, strlen(key), &mt->e.base) < 0) {
        skips_add(&mt->skipped, key, "invalid name");
        return 0;
    }
    return mount_stage(mt, key, WS_DIR, 0, NULL);
}

static int
mount_cb_skip(void *ctx, const char *key, const char *why)
{
    skips_add(&((struct mount *)ctx)->skipped, key, why);
    return 0;
}

static void
session_mount(struct tool_call *call)
{
    const char *path = tool_call_arg_str(call, "path");
    const char *description = tool_call_arg_str(call, "description");
    struct tools_env *env = tool_call_env(call);
    struct policy *p = NULL;
    struct session *s = NULL;
    struct policy_hostpath hp;
    struct session_commit_meta meta;
    struct session_delta delta;
    struct mount mt;
    struct stat sb;
    struct err err;
    cJSON *r = NULL;
    int fd = -1, nowait;

    memset(&mt, 0, sizeof(mt));
    memset(&hp, 0, sizeof(hp));
    memset(&sb, 0, sizeof(sb));
    buf_init(&mt.data, (size_t)1 << 31);
    if (tools_policy(call, &p) < 0) {
        goto out;
    }
    fd = host_open_read(p, path, &hp, &sb, &err);
    if (fd < 0) {
        char msg[HOST_PATH_MAX + 200];
        tool_call_set_summary(call, "session_mount: refused '%s'", path);
        if (err.code == ERR_NOTFOUND) {
            snprintf(msg, sizeof(msg), "path does not exist: %s", path);
            tool_call_done_error(call, ERR_BAD_PATH, msg, NULL);
        } else if (err.code == ERR_INVAL && sb.st_mode != 0) {
            snprintf(msg, sizeof(msg),
                     "'%s' is a %s; session_mount reads only regular files, directories and "
                     "symlinks",
                     path, special_kind(sb.st_mode));
            tool_call_done_error(call, ERR_BAD_PATH, msg, NULL);
        } else {
            fail_hostpath(call, p, &err);
        }
        goto out;
    }
    if ((s = tsess_open(call, SESSION_WRITE)) == NULL) {
        goto out;
    }
    mt.call = call;
    mt.p = p;
    mt.mgr = env->sessions;
    mt.st = env->store;
    mt.host_root = hp.resolved;
    mt.limit = (uint64_t)p->max_workspace_mb * (uint64_t)MIB;
    mt.skipped.list = cJSON_CreateArray();
    mt.overlays = cJSON_CreateArray();
    if (mt.skipped.list == NULL || mt.overlays == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    if (session_edit_begin(s, &mt.ed, &mt.e) < 0) {
        tsess_fail(call, &mt.e);
        goto out;
    }
    if (S_ISDIR(sb.st_mode)) {
        /* A directory's contents land at the workspace root (the reference's behaviour). */
        int dfd = fd;
        fd = -1;
        struct host_tree_ops ops = {
            .ctx = &mt,
            .is_overlay = mount_cb_is_overlay,
            .overlay = mount_cb_overlay,
            .file = mount_cb_file,
            .link = mount_cb_link,
            .empty_dir = mount_cb_empty_dir,
            .skip = mount_cb_skip,
        };
        if (host_read_tree(dfd, hp.resolved, &ops, &err) < 0) { /* closes dfd */
            if (err.code != ERR_OK) {
                session_fail_err(&mt.e, err.code == ERR_TOOBIG ? SESSION_E_ARGS : SESSION_E_OTHER,
                                 &err);
            }
            tsess_fail(call, &mt.e);
            goto out;
        }
    } else {
        const char *base = strrchr(hp.resolved, '/');
        base = base != NULL ? base + 1 : hp.resolved;
        if (pathkey_check(base, strlen(base), &mt.e.base) < 0) {
            session_fail_err(&mt.e, SESSION_E_BAD_PATH, &mt.e.base);
            tsess_fail(call, &mt.e);
            goto out;
        }
        if (mount_file(&mt, fd, &sb, base) < 0) {
            tsess_fail(call, &mt.e);
            goto out;
        }
    }
    if (mt.in_tx) {
        mt.in_tx = 0;
        if (store_commit(mt.st, &mt.e.base) < 0) {
            session_fail_err(&mt.e, SESSION_E_OTHER, &mt.e.base);
            tsess_fail(call, &mt.e);
            goto out;
        }
    }
    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_mount";
    meta.command = path;
    meta.description = description;
    memset(&delta, 0, sizeof(delta));
    {
        struct session_edit *ed = mt.ed;
        mt.ed = NULL; /* commit frees it whatever the outcome */
        if (session_edit_commit(ed, &meta, NULL, &delta, &mt.e) < 0) {
            tsess_fail(call, &mt.e);
            goto out;
        }
    }
    tool_call_set_checkpoint(call, delta.checkpoint_id);
    /* Overlays are session-wide and never checkpointed: register them, do not copy. The
     * checkpoint is committed, so these writes wait for the lock as before instead of
     * failing at once and sending the call round again (tool.h, "write lock"). */
    nowait = store_set_nowait(env->store, 0);
    for (int i = 0; i < cJSON_GetArraySize(mt.overlays); i++) {
        const cJSON *o = cJSON_GetArrayItem(mt.overlays, i);
        const char *k = cJSON_GetObjectItemCaseSensitive(o, "key")->valuestring;
        const char *h = cJSON_GetObjectItemCaseSensitive(o, "host_path")->valuestring;
        if (store_overlay_set(env->store, session_id(s), k, h, &err) < 0) {
            log_warn("cannot register overlay '%s' -> '%s': %s", k, h, err.msg);
        }
    }
    store_set_nowait(env->store, nowait);
    r = tsess_state(s, &delta, &mt.e);
    if (r == NULL) {
        tsess_fail(call, &mt.e);
        goto out;
    }
    cJSON_AddStringToObject(r, "mounted_from", hp.resolved);
    cJSON_AddNumberToObject(r, "files_mounted", (double)mt.files);
    cJSON_AddNumberToObject(r, "bytes_mounted", (double)mt.bytes);
    cJSON_AddItemToObject(r, "skipped", mt.skipped.list);
    cJSON_AddNumberToObject(r, "skipped_total", (double)mt.skipped.total);
    cJSON_AddItemToObject(r, "overlays", mt.overlays);
    mt.skipped.list = NULL;
    mt.overlays = NULL;
    tool_call_set_summary(call, "session_mount: '%s' (%zu files, %zu skipped)", hp.resolved,
                          mt.files, mt.skipped.total);
    tool_call_done_json(call, r);
out:
    if (fd >= 0) {
        close(fd);
    }
    if (mt.in_tx) {
        store_rollback(mt.st);
    }
    session_edit_abort(mt.ed);
    if (s != NULL) {
        session_leave(s, SESSION_WRITE);
    }
    cJSON_Delete(mt.skipped.list);
    cJSON_Delete(mt.overlays);
    buf_release(&mt.data);
    policy_unref(p);
}

/* ---- session_export ------------------------------------------------------------------ */

/* The session's side of an export: the entries, read through the session. */
struct export
{
    struct session_mgr *mgr;
    const struct ws_entry **todo;
    struct skips *skipped;
    struct session_err e;
    int failed;
};

static const char *
export_cb_key(void *ctx, size_t i, int *kind)
{
    const struct ws_entry *ent = ((struct export *)ctx)->todo[i];

    *kind = ent->type == WS_DIR       ? HOST_ENTRY_DIR
            : ent->type == WS_SYMLINK ? HOST_ENTRY_LINK
            : ent->type == WS_EXEC    ? HOST_ENTRY_EXEC
                                      : HOST_ENTRY_FILE;
    return ent->path;
}

static int
export_cb_read(void *ctx, size_t i, struct buf *out)
{
    struct export *ex = ctx;

    if (session_read_entry(ex->mgr, ex->todo[i], out, &ex->e) < 0) {
        ex->failed = 1;
        return -1;
    }
    return 0;
}

static void
export_cb_skip(void *ctx, size_t i, const char *why)
{
    struct export *ex = ctx;

    skips_add(ex->skipped, ex->todo[i]->path, why);
}

static void
session_export(struct tool_call *call)
{
    const char *output_dir = tool_call_arg_str(call, "output_dir");
    const char *description = tool_call_arg_str(call, "description");
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(tool_call_args(call), "keys");
    struct tools_env *env = tool_call_env(call);
    struct policy *p = NULL;
    struct session *s = NULL;
    struct policy_hostpath hp;
    const struct ws_manifest *m;
    const struct ws_entry **todo = NULL;
    unsigned char *done = NULL;
    size_t ntodo = 0, nwritten = 0;
    struct skips skipped = {NULL, 0};
    struct host_export_ops ops;
    struct export ex;
    struct session_err e;
    struct err err;
    cJSON *written = NULL, *r;

    if (tools_policy(call, &p) < 0) {
        goto out;
    }
    if (host_check(p, output_dir, POLICY_DOOR_EXPORT, &hp, &err) < 0) {
        tool_call_set_summary(call, "session_export: refused '%s'", output_dir);
        fail_hostpath(call, p, &err);
        goto out;
    }
    if ((s = tsess_open(call, SESSION_READ)) == NULL) {
        goto out;
    }
    m = session_manifest(s);
    /* Check every key before writing anything, so a bad key writes nothing. */
    if (cJSON_IsArray(keys)) {
        todo = mem_calloc((size_t)cJSON_GetArraySize(keys) + 1, sizeof(*todo));
        if (todo == NULL) {
            tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
            goto out;
        }
        for (int i = 0; i < cJSON_GetArraySize(keys); i++) {
            const cJSON *k = cJSON_GetArrayItem(keys, i);
            const struct ws_entry *ent;
            if (session_lookup(m, k->valuestring, NULL, &ent, &e) < 0) {
                tsess_fail(call, &e);
                goto out;
            }
            todo[ntodo++] = ent;
        }
    } else {
        size_t n = ws_manifest_count(m);
        todo = mem_calloc(n + 1, sizeof(*todo));
        if (todo == NULL) {
            tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            todo[ntodo++] = ws_manifest_at(m, i);
        }
    }
    written = cJSON_CreateArray();
    skipped.list = cJSON_CreateArray();
    done = mem_calloc(ntodo + 1, 1);
    if (written == NULL || skipped.list == NULL || done == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        goto out;
    }
    memset(&ex, 0, sizeof(ex));
    ex.mgr = env->sessions;
    ex.todo = todo;
    ex.skipped = &skipped;
    memset(&ops, 0, sizeof(ops));
    ops.ctx = &ex;
    ops.n = ntodo;
    ops.key = export_cb_key;
    ops.read = export_cb_read;
    ops.skip = export_cb_skip;
    if (host_export(p, &hp, &ops, done, &err) < 0) {
        tool_call_set_summary(call, "session_export: failed for '%s'", output_dir);
        if (ex.failed) {
            tsess_fail(call, &ex.e);
        } else if (err.code == ERR_DENIED || err.code == ERR_INVAL) {
            fail_hostpath(call, p, &err);
        } else {
            tool_call_done_err(call, TOOL_ERR_INTERNAL, &err);
        }
        goto out;
    }
    for (size_t i = 0; i < ntodo; i++) {
        char abs[HOST_PATH_MAX * 2];
        if (done[i]) {
            snprintf(abs, sizeof(abs), "%s/%s", hp.resolved, todo[i]->path);
            cJSON_AddItemToArray(written, cJSON_CreateString(abs));
            nwritten++;
        }
    }
    {
        struct session_err se;
        if (session_step(s, -1, "session_export", description, &se) < 0) {
            log_warn("cannot record the session_export step: %s", se.base.msg);
        }
    }
    r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "output_dir", output_dir);
    cJSON_AddStringToObject(r, "resolved_output_dir", hp.resolved);
    cJSON_AddNumberToObject(r, "written_count", (double)nwritten);
    cJSON_AddItemToObject(r, "exported_files", written);
    cJSON_AddItemToObject(r, "skipped", skipped.list);
    cJSON_AddNumberToObject(r, "skipped_total", (double)skipped.total);
    written = NULL;
    tool_call_set_summary(call, "session_export: %zu entries to '%s' (%zu skipped)", nwritten,
                          hp.resolved, skipped.total);
    skipped.list = NULL;
    tool_call_done_json(call, r);
out:
    if (s != NULL) {
        session_leave(s, SESSION_READ);
    }
    cJSON_Delete(written);
    cJSON_Delete(skipped.list);
    mem_free(todo);
    mem_free(done);
    policy_unref(p);
}

/* ---- registry ------------------------------------------------------------------------- */

#define SCHEMA_HEAD                                                                                \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
#define DESCRIPTION_PROP "\"description\":{\"type\":\"string\",\"maxLength\":4096}"

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char delete_out[] = TSESS_OUT_OBJECT(
    "\"path\":" J_STR ",\"deleted\":" J_BOOL ",\"files_removed\":" J_INT ",\"dirs_removed\":" J_INT,
    "\"path\",\"deleted\",\"files_removed\",\"dirs_removed\"");
static const char env_out[] = TSESS_OUT_OBJECT(
    "\"name\":" J_STR ",\"value\":" J_STR ",\"is_set\":" J_BOOL, "\"name\",\"value\",\"is_set\"");
static const char export_out[] = TSESS_OUT_OBJECT(
    "\"output_dir\":" J_STR ",\"resolved_output_dir\":" J_STR ",\"written_count\":" J_INT
    ",\"exported_files\":" J_STRS ",\"skipped\":" J_OBJS ",\"skipped_total\":" J_INT,
    "\"output_dir\",\"resolved_output_dir\",\"written_count\",\"exported_files\"");
static const char mount_out[] =
    TSESS_OUT_OBJECT(TSESS_OUT_STATE_PROPS ",\"mounted_from\":" J_STR ",\"files_mounted\":" J_INT
                                           ",\"bytes_mounted\":" J_INT ",\"skipped\":" J_OBJS
                                           ",\"skipped_total\":" J_INT ",\"overlays\":" J_OBJS,
                     TSESS_OUT_STATE_REQ ",\"mounted_from\",\"files_mounted\",\"bytes_mounted\"");

const struct tool_def tools_host_defs[] = {
    {
        .name = "session_mount",
        .title = "Copy host files in",
        .description =
            "Copy a host file or directory (absolute path, inside mount_allowlist) into the "
            "workspace as a new checkpoint. A file lands as its basename; a directory's "
            "CONTENTS land at the workspace root (not under the directory's name). Symlinks "
            "are kept as links, FIFOs/devices skipped and listed; overlay dirs "
            "(node_modules, .venv, ...) are linked read-only, not copied.",
        .input_schema = SCHEMA_HEAD "\"properties\":{"
                                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                                    "\"maxLength\":4096}," DESCRIPTION_PROP "," TSESS_ID_PROP "},"
                                    "\"required\":[\"path\",\"description\"],"
                                    "\"additionalProperties\":false}",
        .annotations = {.read_only = 0, .destructive = 0, .idempotent = 0, .open_world = 0},
        .output_schema = mount_out,
        .handler = session_mount,
    },
    {
        .name = "session_export",
        .title = "Write workspace files to the host",
        .description =
            "Write workspace files (all, or `keys`) under output_dir on the host (inside "
            "mount_allowlist; refused when it is empty). Keeps modes; writes each file "
            "atomically; never deletes. Symlinks leaving the tree and anything a host "
            "symlink would redirect are skipped and listed.",
        .input_schema =
            SCHEMA_HEAD "\"properties\":{"
                        "\"output_dir\":{\"type\":\"string\",\"minLength\":1,"
                        "\"maxLength\":4096},"
                        "\"keys\":{\"type\":\"array\",\"maxItems\":100000,"
                        "\"items\":{\"type\":\"string\",\"maxLength\":4096}}," DESCRIPTION_PROP
                        "," TSESS_ID_PROP "},"
                        "\"required\":[\"output_dir\",\"description\"],"
                        "\"additionalProperties\":false}",
        .annotations = {.read_only = 0, .destructive = 0, .idempotent = 0, .open_world = 0},
        .output_schema = export_out,
        .handler = session_export,
    },
    {
        .name = "delete_from_host",
        .title = "Delete a host path",
        .description = "Delete a host file or directory (recursively) inside mount_allowlist; "
                       "the only host deletion. Never an allowlist entry itself; links are "
                       "removed as links. A missing path returns deleted: false.",
        .input_schema = SCHEMA_HEAD "\"properties\":{"
                                    "\"path\":{\"type\":\"string\",\"minLength\":1,"
                                    "\"maxLength\":4096}},"
                                    "\"required\":[\"path\"],\"additionalProperties\":false}",
        .annotations = {.read_only = 0, .destructive = 1, .idempotent = 1, .open_world = 0},
        .output_schema = delete_out,
        .handler = delete_from_host,
    },
    {
        .name = "session_get_env",
        .title = "Read an allowed host variable",
        .description = "Read a host environment variable named in env_allowlist (exact name). "
                       "Unset gives \"\" with is_set false.",
        .input_schema = SCHEMA_HEAD "\"properties\":{"
                                    "\"name\":{\"type\":\"string\",\"minLength\":1,"
                                    "\"maxLength\":256}," TSESS_ID_PROP "},"
                                    "\"required\":[\"name\"],\"additionalProperties\":false}",
        .annotations = {.read_only = 1, .destructive = 0, .idempotent = 1, .open_world = 0},
        .output_schema = env_out,
        .handler = session_get_env,
    },
};

const size_t tools_host_count = sizeof(tools_host_defs) / sizeof(tools_host_defs[0]);
