/*
 * ws_bound.c - the hard bound on what one command can write into its workspace.
 *
 * The rescan after a command checks max_workspace_mb, but only once the command has
 * ended: until then a command could fill the disk that holds the runtime directory
 * (`fallocate -l 300G x`), and every other user of that disk with it. When the daemon
 * may mount (it is root, and cmd/ has moved it into a mount namespace of its own so
 * nothing it mounts is seen by, or outlives, anyone else), each workspace directory is
 * a tmpfs of max_workspace_mb plus WS_BOUND_SLACK: a write past it fails with ENOSPC
 * inside the sandbox, exactly like a full disk, while the command runs. The mount is
 * made before the directory's root fd is opened, so every sync, rescan and the sandbox's
 * bind see the same bounded filesystem; it is detached when the directory is closed.
 *
 * Why tmpfs and not a loop device, a project quota or an overlay: see
 * docs/architecture.md ("The disk bound").
 */
#include "workspace/ws_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

/* tmpfs keeps a symlink target shorter than this in the inode (SHORT_SYMLINK_LEN). */
#define WS_BOUND_SHORT_LINK 128

/*
 * Bytes of the bound per inode (nr_inodes = bound / this). An inode and its dentry cost
 * the kernel about 1 KiB that tmpfs does not count in size=; without nr_inodes a tmpfs
 * allows half the machine's RAM pages of them (300,000 empty files in an 8 MiB
 * workspace pinned 300 MiB). So the entries can at most double what a workspace holds.
 */
#define WS_BOUND_INODE 1024

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static int bound_enabled;

void
ws_bound_enable(int on)
{
    bound_enabled = on;
}

int
ws_bound_enabled(void)
{
    return bound_enabled;
}

int
ws_bound_mount(struct ws_dir *d, const char *path, uint64_t bytes, struct err *err)
{
    struct stat st;
    struct statfs sf;
    char opts[160];

    if (!bound_enabled || bytes == 0) {
        return 0;
    }
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return err_set(err, ERR_IO, "cannot bound the workspace '%s': not a directory", path);
    }
    if (statfs(path, &sf) == 0 && (unsigned long)sf.f_type == TMPFS_MAGIC) {
        /* Our own mount from an earlier open in this process (the directory was closed
         * while a prepared sandbox held it): it is bounded already; start it empty. */
        if (umount2(path, MNT_DETACH) != 0) {
            return err_set(err, ERR_IO, "cannot re-mount the workspace '%s': %s", path,
                           strerror(errno));
        }
    }
    /* The tmpfs root takes the directory's owner and mode, so whoever may write the
     * workspace today still may. */
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu,mode=%04o,uid=%lu,gid=%lu",
             (unsigned long long)bytes, (unsigned long long)(bytes / WS_BOUND_INODE),
             (unsigned)(st.st_mode & 07777), (unsigned long)st.st_uid, (unsigned long)st.st_gid);
    if (mount("drun-workspace", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        return err_set(err, ERR_IO,
                       "cannot mount the size-capped workspace on '%s': %s; run 'drun-mcp "
                       "doctor'",
                       path, strerror(errno));
    }
    d->bound_mounted = 1;
    d->bound_bytes = bytes;
    return 0;
}

void
ws_bound_unmount(struct ws_dir *d)
{
    if (d->bound_mounted && d->root_path != NULL) {
        /* Detached: a prepared sandbox may still hold it; the kernel frees it with the last
         * reference. */
        umount2(d->root_path, MNT_DETACH);
        d->bound_mounted = 0;
    }
}

int
ws_dir_bound_grow(struct ws_dir *d, uint64_t bytes, struct err *err)
{
    char opts[96];

    if (!d->bound_mounted || bytes <= d->bound_bytes) {
        return 0;
    }
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu", (unsigned long long)bytes,
             (unsigned long long)(bytes / WS_BOUND_INODE));
    if (mount(NULL, d->root_path, NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV, opts) != 0) {
        return err_set(err, ERR_IO, "cannot grow the size-capped workspace '%s': %s", d->root_path,
                       strerror(errno));
    }
    d->bound_bytes = bytes;
    return 0;
}

uint64_t
ws_bound_need(const struct ws_manifest *m)
{
    uint64_t need = 0;

    /* What tmpfs charges against size=, exactly and never more: a file takes whole pages
     * of its content (an empty one none), a symlink a page only when its target does not
     * fit in the inode (128 bytes with the NUL), a directory none. An overestimate here
     * would be a ratchet: the bound grows to fit the head, so files counted but free
     * (20,000 empty ones) would let the next command write that much RAM. Every entry
     * also takes an inode, which tmpfs keeps in kernel memory outside size=: the mount's
     * nr_inodes allows one per WS_BOUND_INODE bytes of the bound, so each is counted at
     * that price. */
    for (size_t i = 0; i < m->n; i++) {
        need += WS_BOUND_INODE;
        if (m->v[i].type == WS_SYMLINK) {
            need += m->v[i].size >= WS_BOUND_SHORT_LINK ? 4096 : 0;
        } else if (m->v[i].type != WS_DIR) {
            need += (m->v[i].size + 4095) / 4096 * 4096;
        }
    }
    return need;
}

uint64_t
ws_dir_bound(const struct ws_dir *d)
{
    return d->bound_mounted ? d->bound_bytes : 0;
}
