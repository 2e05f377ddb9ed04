/*
 * snapfile_dir.c - snapshots_dir: writing our export files there, listing the snapshot
 * files in it, the read door of session_restore's path, and restoring a snapshot.
 *
 * Writing. The agent's path must follow the reference's rule (no ".." component, under
 * snapshots_dir component by component) or it is refused (ERR_DENIED, the tools'
 * snapshot_denied). The write then starts from a directory fd of snapshots_dir and opens
 * each directory below it with the host walk (no symlink followed), so a link planted
 * inside snapshots_dir cannot send the file elsewhere. The store exports to a hidden temp
 * name at the top of snapshots_dir, and renameat moves it from there over the target in
 * the directory fd the walk opened: a failed export never leaves a half file and never
 * destroys the previous one.
 *
 * Listing. Files are told by their first bytes, never by their names, and only regular
 * files are opened (O_NOFOLLOW | O_NONBLOCK): opening a device or a FIFO can have effects.
 */
#include "snapfile/snapfile.h"

#include <cJSON.h>
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
#include "util/mem.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

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

/* ---- writing: the path rule (reference section 4.6) ----------------------------- */

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

int
snapfile_rel(const char *root, const char *path, char *rel, size_t size, struct err *err)
{
    const char *p = path, *r = root, *ps, *rs;
    size_t pl, rl, k = 0;

    if (strlen(path) >= SNAPFILE_PATH_MAX) {
        return err_set(err, ERR_TOOBIG, "snapshot path is longer than %d bytes",
                       SNAPFILE_PATH_MAX - 1);
    }

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

int
snapfile_write(struct store *st, const char *name, const char *root, const char *rel,
               int64_t *bytes, struct err *err)
{
    char real[PATH_MAX], dir[SNAPFILE_PATH_MAX], tmp[160], tpath[PATH_MAX + 168];
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

/* ---- listing -------------------------------------------------------------------- */

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

/* Reads name's .drun.meta (the reference's label and checkpoint_count) into e. */
static void
read_meta(int dfd, const char *name, struct snapfile_entry *e)
{
    char meta[NAME_MAX + 8];
    char *text = NULL;
    struct stat sb;
    cJSON *j = NULL;
    const cJSON *label, *count;
    ssize_t n;

    if ((size_t)snprintf(meta, sizeof(meta), "%s.meta", name) >= sizeof(meta) ||
        (text = mem_alloc(SNAPFILE_META_MAX)) == NULL) {
        goto out;
    }
    n = read_head(dfd, meta, text, SNAPFILE_META_MAX, &sb);
    if (n <= 0 || (j = cJSON_ParseWithLength(text, (size_t)n)) == NULL) {
        goto out;
    }
    label = cJSON_GetObjectItemCaseSensitive(j, "label");
    count = cJSON_GetObjectItemCaseSensitive(j, "checkpoint_count");
    if (cJSON_IsString(label)) {
        e->label = mem_strdup(label->valuestring); /* NULL on no memory: no label shown */
    }
    if (cJSON_IsNumber(count) && count->valuedouble >= 0 && count->valuedouble < 1e15) {
        e->checkpoint_count = (int64_t)count->valuedouble;
    }
out:
    cJSON_Delete(j);
    mem_free(text);
}

void
snapfile_list_free(struct snapfile_entry *list, size_t n)
{
    for (size_t i = 0; list != NULL && i < n; i++) {
        mem_free(list[i].path);
        mem_free(list[i].label);
    }
    mem_free(list);
}

int
snapfile_list(const char *dir, struct snapfile_entry **out, size_t *nout, struct err *err)
{
    DIR *d = NULL;
    struct dirent *de;
    char **names = NULL;
    struct snapfile_entry *list = NULL;
    size_t n = 0, listed = 0;
    int dfd, rc = -1;

    *out = NULL;
    *nout = 0;
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
    names = mem_calloc(SNAPFILE_LIST_MAX * 4 + 1, sizeof(*names));
    list = mem_calloc(SNAPFILE_LIST_MAX, sizeof(*list));
    if (names == NULL || list == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') {
            continue; /* ".", "..", and the hidden temp names of exports in flight */
        }
        if (n == SNAPFILE_LIST_MAX * 4) {
            err_set(err, ERR_TOOBIG,
                    "snapshots_dir '%.150s' holds more than %d entries; move some files away", dir,
                    SNAPFILE_LIST_MAX * 4);
            goto out;
        }
        if ((names[n++] = mem_strdup(de->d_name)) == NULL) {
            err_set(err, ERR_NOMEM, "out of memory");
            goto out;
        }
    }
    qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; i++) {
        char head[16];
        struct stat sb;
        const char *kind;
        ssize_t got = read_head(dirfd(d), names[i], head, sizeof(head), &sb);
        struct snapfile_entry *e;
        struct buf path;

        if (got > 0 && snapfile_is_export(head, (size_t)got)) {
            kind = "export";
        } else if (got > 0 && snapfile_is_drun(head, (size_t)got)) {
            kind = "drun";
        } else {
            continue; /* not a snapshot file (a .drun.meta is read with its .drun) */
        }
        if (listed == SNAPFILE_LIST_MAX) {
            err_set(err, ERR_TOOBIG,
                    "snapshots_dir '%.150s' holds more than %d snapshot files; move some away", dir,
                    SNAPFILE_LIST_MAX);
            goto out;
        }
        e = &list[listed++];
        e->kind = kind;
        e->size = (int64_t)sb.st_size;
        e->mtime_ms = (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000;
        e->checkpoint_count = -1;
        buf_init(&path, PATH_MAX);
        if (buf_printf(&path, "%s/%s", dir, names[i]) < 0 ||
            (e->path = buf_detach(&path, NULL)) == NULL) {
            buf_err(&path, "a snapshot file's path", err);
            buf_release(&path);
            goto out;
        }
        if (strcmp(kind, "drun") == 0) {
            read_meta(dirfd(d), names[i], e);
        }
    }
    *out = list;
    *nout = listed;
    list = NULL;
    rc = 0;
out:
    snapfile_list_free(list, listed);
    for (size_t i = 0; names != NULL && i < n; i++) {
        mem_free(names[i]);
    }
    mem_free(names);
    closedir(d);
    return rc;
}

/* ---- restoring ------------------------------------------------------------------ */

int
snapfile_open_restore(const struct policy *p, const char *path, char *shown, size_t size,
                      struct err *err)
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

int
snapfile_restore(struct store *st, const char *name, int64_t max_sessions, pid_t pid, int64_t start,
                 struct snapfile_vet *vet, struct store_session *out, struct err *err)
{
    int64_t open = 0;

    if (store_begin(st, err) < 0) {
        return -1;
    }
    if (store_session_count_open(st, &open, err) < 0) {
        goto fail;
    }
    if (open >= max_sessions) {
        err_set(err, ERR_BUSY,
                "session limit of %lld reached; close an existing session to create a new one",
                (long long)max_sessions);
        goto fail;
    }
    if (store_snapshot_restore(st, name, -1, pid, start, out, err) < 0) {
        if (err->code == ERR_NOTFOUND) {
            err_set(err, ERR_NOTFOUND, "no snapshot named '%.128s'; list_snapshots lists them",
                    name);
        }
        goto fail;
    }
    if (store_session_overlays_filter(st, out->id, snapfile_overlay_keep, vet, err) < 0) {
        store_session_release(out);
        goto fail;
    }
    if (store_commit(st, err) < 0) {
        store_session_release(out);
        return -1;
    }
    return 0;
fail:
    store_rollback(st);
    return -1;
}

void
snapfile_close_name(const char *session_id, char *out, size_t size)
{
    char t[32];

    compact_time(t, sizeof(t));
    snprintf(out, size, "%s-close-%s", session_id, t);
}
