/*
 * bwrap_seccomp.c - the seccomp filter bwrap loads before it execs the command, compiled
 * once per daemon and handed to bwrap in a memfd.
 */
#include "sandbox/bwrap_int.h"

/* ---- seccomp -------------------------------------------------------------------- */

/*
 * The filter bwrap installs before it execs the shell. Each rule names the attack it stops:
 *   keyctl, add_key, request_key: reading or planting keys in the daemon user's keyrings
 *     (keyrings are not namespaced by mount or pid namespaces);
 *   socket(AF_UNIX): connecting to a host daemon's socket that sits under a read-only bind
 *     (abstract sockets are already cut off by the network namespace); socketpair stays;
 *   ioctl TIOCSTI / TIOCLINUX: typing into a terminal (bwrap's --new-session also stops it);
 *   clone with CLONE_NEWUSER, clone3 (its flags are out of reach, so ENOSYS makes libc fall
 *     back to clone), unshare, setns, mount, umount2, pivot_root, chroot: a new user
 *     namespace is the usual first step of kernel exploits and of escaping mount rules;
 *   ptrace, process_vm_*: debugging other processes (defence in depth);
 *   bpf, perf_event_open, userfaultfd, kexec_*, *_module, iopl, ioperm, swapon, swapoff,
 *     reboot, syslog, acct, quotactl, open_by_handle_at, lookup_dcookie, add_key: kernel
 *     attack surface no shell command needs.
 * A 32-bit (int 0x80) or x32 syscall kills the process: the filter is built for the native
 * ABI only, and libseccomp's default bad-arch action refuses the others.
 */
static int
seccomp_compile(struct err *err)
{
    static const int deny[] = {
        SCMP_SYS(keyctl),
        SCMP_SYS(add_key),
        SCMP_SYS(request_key),
        SCMP_SYS(unshare),
        SCMP_SYS(setns),
        SCMP_SYS(mount),
        SCMP_SYS(umount2),
        SCMP_SYS(pivot_root),
        SCMP_SYS(chroot),
        SCMP_SYS(ptrace),
        SCMP_SYS(process_vm_readv),
        SCMP_SYS(process_vm_writev),
        SCMP_SYS(bpf),
        SCMP_SYS(perf_event_open),
        SCMP_SYS(userfaultfd),
        SCMP_SYS(kexec_load),
        SCMP_SYS(kexec_file_load),
        SCMP_SYS(init_module),
        SCMP_SYS(finit_module),
        SCMP_SYS(delete_module),
        SCMP_SYS(iopl),
        SCMP_SYS(ioperm),
        SCMP_SYS(swapon),
        SCMP_SYS(swapoff),
        SCMP_SYS(reboot),
        SCMP_SYS(syslog),
        SCMP_SYS(acct),
        SCMP_SYS(quotactl),
        SCMP_SYS(open_by_handle_at),
        SCMP_SYS(lookup_dcookie),
        SCMP_SYS(fsopen),
        SCMP_SYS(fsmount),
        SCMP_SYS(move_mount),
        SCMP_SYS(open_tree),
    };
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    int fd = -1, rc = 0;

    if (ctx == NULL) {
        return err_set(err, ERR_NOMEM, "cannot build the seccomp filter");
    }
    for (size_t i = 0; i < sizeof(deny) / sizeof(deny[0]); i++) {
        if (deny[i] < 0) {
            continue; /* not on this architecture */
        }
        rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), deny[i], 0);
    }
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                           SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                           SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc != 0) {
        seccomp_release(ctx);
        return err_set(err, ERR_INTERNAL, "cannot build the seccomp filter: a rule was refused");
    }
    fd = memfd_create("drun-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        seccomp_release(ctx);
        return err_set(err, ERR_IO, "cannot create a memfd for the seccomp filter: %s",
                       strerror(errno));
    }
    if (seccomp_export_bpf(ctx, fd) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
        seccomp_release(ctx);
        close(fd);
        return err_set(err, ERR_IO, "cannot export the seccomp filter");
    }
    seccomp_release(ctx);
    return fd;
}

/*
 * The compiled filter, kept for the life of the process: the rules never change, and
 * compiling them (libseccomp builds and optimises the BPF tree) is the larger part of the
 * cost. Each sandbox gets its own memfd with a copy, because bwrap reads it to the end.
 */
static unsigned char *seccomp_bytes;
static size_t seccomp_len;

int
bwrap_seccomp_memfd(struct err *err)
{
    int fd;

    if (seccomp_bytes == NULL) {
        struct stat st;
        unsigned char *b;
        int cfd = seccomp_compile(err);

        if (cfd < 0) {
            return -1;
        }
        if (fstat(cfd, &st) < 0 || st.st_size <= 0 || st.st_size > (1 << 20) ||
            (b = mem_calloc(1, (size_t)st.st_size)) == NULL) {
            close(cfd);
            return err_set(err, ERR_IO, "cannot read back the seccomp filter");
        }
        if (pread(cfd, b, (size_t)st.st_size, 0) != (ssize_t)st.st_size) {
            mem_free(b);
            close(cfd);
            return err_set(err, ERR_IO, "cannot read back the seccomp filter");
        }
        close(cfd);
        seccomp_bytes = b;
        seccomp_len = (size_t)st.st_size;
    }
    fd = memfd_create("drun-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        return err_set(err, ERR_IO, "cannot create a memfd for the seccomp filter: %s",
                       strerror(errno));
    }
    if (write(fd, seccomp_bytes, seccomp_len) != (ssize_t)seccomp_len ||
        lseek(fd, 0, SEEK_SET) < 0) {
        close(fd);
        return err_set(err, ERR_IO, "cannot write the seccomp filter: %s", strerror(errno));
    }
    return fd;
}
