/*
 * snapfile_file.c - reading a snapshot file of either kind, and the overlay judge.
 *
 * A snapshot file is opened once and read only through its fd. An original .drun file
 * (told by its magic, not its name) is read whole, up to SNAPFILE_MAX, and handed to
 * snapfile_import. One of our SQLite exports cannot be read through the fd by SQLite,
 * which opens files by name (and resolves /proc/self/fd/N back to the path), so its bytes
 * are copied to a private file beside the database and that copy is imported, every
 * blob's hash verified, then removed.
 */
#include "snapfile/snapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/host.h"
#include "util/mem.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"

#define SQLITE_HEADER "SQLite format 3" /* 15 characters and its NUL: 16 bytes */

int
snapfile_is_drun(const void *data, size_t len)
{
    return len >= 4 && memcmp(data, "DRUN", 4) == 0;
}

int
snapfile_is_export(const void *data, size_t len)
{
    return len >= 16 && memcmp(data, SQLITE_HEADER, 16) == 0;
}

int
snapfile_read_fd(int fd, const char *path, struct buf *out, struct err *err)
{
    char chunk[65536];
    ssize_t n;

    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        if (buf_append(out, chunk, (size_t)n) < 0) {
            if (out->failed == ERR_TOOBIG) {
                return err_set(err, ERR_TOOBIG,
                               "snapshot file '%.200s' is larger than %zu MiB, the most drun "
                               "imports",
                               path, SNAPFILE_MAX >> 20);
            }
            return buf_err(out, path, err);
        }
    }
    if (n < 0) {
        return err_set(err, ERR_IO, "cannot read '%.200s': %s", path, strerror(errno));
    }
    return 0;
}

int
snapfile_open(const char *path, struct err *err)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

    if (fd < 0) {
        return err_set(err, errno == ENOENT ? ERR_NOTFOUND : ERR_IO,
                       "cannot read snapshot file '%.200s': %s", path, strerror(errno));
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(err, ERR_INVAL, "snapshot file '%.200s' is not a regular file", path);
    }
    return fd;
}

/* ---- overlays ------------------------------------------------------------------------- */

void
snapfile_vet_init(struct snapfile_vet *vet, const struct policy *p)
{
    memset(vet, 0, sizeof(*vet));
    vet->p = p;
}

void
snapfile_vet_release(struct snapfile_vet *vet)
{
    for (size_t i = 0; i < vet->n_dropped; i++) {
        mem_free(vet->dropped[i].key);
        mem_free(vet->dropped[i].host_path);
    }
    vet->n_dropped = 0;
}

int
snapfile_overlay_keep(void *ctx, const char *key, const char *host_path)
{
    struct snapfile_vet *vet = ctx;
    struct snapfile_dropped *d;
    struct err err;

    if (host_check_overlay(vet->p, key, host_path, &err) == 0) {
        return 1;
    }
    vet->total++;
    if (vet->n_dropped < SNAPFILE_DROPPED_MAX) {
        d = &vet->dropped[vet->n_dropped];
        d->key = mem_strdup(key);
        d->host_path = mem_strdup(host_path);
        if (d->key == NULL || d->host_path == NULL) {
            /* Still dropped and counted; only its listing is lost. */
            mem_free(d->key);
            mem_free(d->host_path);
            return 0;
        }
        snprintf(d->reason, sizeof(d->reason), "%s", err.msg);
        vet->n_dropped++;
    }
    return 0;
}

/* ---- importing a snapshot file of either kind ------------------------------------------ */

#define STEM_MAX 80 /* file stem kept in an imported snapshot's generated name */

/* "<file stem, made a valid snapshot name>-<UTC time, digits only>". */
static void
fresh_name(const char *path, char *out, size_t size)
{
    const char *base = strrchr(path, '/');
    char iso[32];
    size_t k = 0;

    base = base ? base + 1 : path;
    while (*base == '.' || *base == '-') {
        base++;
    }
    for (; *base != '\0' && *base != '.' && k < STEM_MAX && k + 1 < size; base++) {
        char c = *base;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
        out[k++] = ok ? c : '_';
    }
    if (k == 0) {
        k = (size_t)snprintf(out, size, "import");
    }
    time_format_iso(time_now_ms(), iso, sizeof(iso));
    if (k + 1 < size) {
        out[k++] = '-';
    }
    for (const char *c = iso; *c != '\0' && k + 1 < size; c++) {
        if (*c != '-' && *c != ':' && *c != '.') {
            out[k++] = *c;
        }
    }
    out[k] = '\0';
}

/*
 * Copies regular file fd (sb: its fstat) to a new private file beside the database,
 * named into tmp: at most SNAPFILE_EXPORT_MAX bytes, with memory for one chunk.
 */
static int
copy_private(struct store *st, int fd, const char *path, const struct stat *sb, char *tmp,
             size_t size, struct err *err)
{
    static unsigned seq;
    char chunk[65536];
    off_t total = 0;
    ssize_t n;
    int out;

    if (sb->st_size > SNAPFILE_EXPORT_MAX) {
        return err_set(err, ERR_TOOBIG,
                       "snapshot file '%.200s' is larger than %lld GiB, the most drun imports",
                       path, (long long)(SNAPFILE_EXPORT_MAX >> 30));
    }
    if ((size_t)snprintf(tmp, size, "%s-import-%d-%u", store_path(st), (int)getpid(), seq++) >=
        size) {
        return err_set(err, ERR_TOOBIG, "the database path is too long");
    }
    out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        return err_set(err, ERR_IO, "cannot create '%.200s': %s", tmp, strerror(errno));
    }
    while ((n = pread(fd, chunk, sizeof(chunk), total)) > 0) {
        if ((total += n) > SNAPFILE_EXPORT_MAX) {
            err_set(err, ERR_TOOBIG, "snapshot file '%.200s' grew past %lld GiB while read", path,
                    (long long)(SNAPFILE_EXPORT_MAX >> 30));
            goto fail;
        }
        for (ssize_t done = 0, w; done < n; done += w) {
            w = write(out, chunk + done, (size_t)(n - done));
            if (w < 0) {
                err_set(err, ERR_IO, "cannot write '%.200s': %s", tmp, strerror(errno));
                goto fail;
            }
        }
    }
    if (n < 0) {
        err_set(err, ERR_IO, "cannot read '%.200s': %s", path, strerror(errno));
        goto fail;
    }
    if (close(out) < 0) {
        out = -1;
        err_set(err, ERR_IO, "cannot write '%.200s': %s", tmp, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    if (out >= 0) {
        close(out);
    }
    unlink(tmp);
    return -1;
}

int
snapfile_import_fd(struct store *st, int fd, const char *path, const char *name,
                   struct snapfile_vet *vet, struct store_snapshot *out, struct err *err)
{
    char fresh[STORE_SNAPSHOT_NAME_MAX + 1], head[4] = {0}, tmp[PATH_MAX];
    struct stat sb;
    struct buf data;
    ssize_t got;
    int rc;

    if (out != NULL) {
        memset(out, 0, sizeof(*out));
    }
    /* Only a regular file is read: a device or a FIFO can block or have effects. */
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        return err_set(err, ERR_INVAL, "snapshot file '%.200s' is not a regular file", path);
    }
    got = pread(fd, head, sizeof(head), 0);
    fresh_name(path, fresh, sizeof(fresh));
    if (got == 4 && snapfile_is_drun(head, 4)) {
        buf_init(&data, SNAPFILE_MAX);
        rc = lseek(fd, 0, SEEK_SET) < 0
                 ? err_set(err, ERR_IO, "cannot read '%.200s': %s", path, strerror(errno))
                 : snapfile_read_fd(fd, path, &data, err);
        if (rc == 0) {
            rc =
                snapfile_import(st, data.data, data.len, name ? name : fresh, fresh, vet, out, err);
        }
        buf_release(&data);
        return rc;
    }
    /* SQLite opens files by name, and would resolve /proc/self/fd/N back to the path: so
     * the bytes fd holds are copied to a private file beside the database (0600, O_EXCL)
     * and that copy is imported, then removed. */
    if (copy_private(st, fd, path, &sb, tmp, sizeof(tmp), err) < 0) {
        return -1;
    }
    rc = store_snapshot_import_as(st, tmp, path, name, ws_manifest_refs, NULL, out, err);
    if (rc < 0 && name == NULL && err->code == ERR_EXISTS) {
        rc = store_snapshot_import_as(st, tmp, path, fresh, ws_manifest_refs, NULL, out, err);
    }
    unlink(tmp);
    if (rc == 0 &&
        store_snapshot_overlays_filter(st, out->name, snapfile_overlay_keep, vet, err) < 0) {
        struct err derr;
        store_snapshot_delete(st, out->name, &derr);
        store_snapshot_release(out);
        return -1;
    }
    return rc;
}
