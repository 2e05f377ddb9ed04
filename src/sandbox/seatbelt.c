/*
 * seatbelt.c - the macOS sandbox: an SBPL profile for sandbox-exec.
 *
 * The profile mirrors sandbox-profiles/drun.sb (which carries a comment on every rule):
 * deny by default; read the system directories, the caller's read-only paths, overlays,
 * the workspace and the per-command temp dir; write only the workspace, the temp dir and
 * /dev/null; no network. Paths go into SBPL string literals, escaped so that no directory
 * name (one containing '"', ')', '\' or ';') can end the string early and add rules; a
 * path with a control character is refused outright.
 *
 * This file compiles on every OS so the profile builder is unit-tested on Linux CI. It
 * has NOT been run on a Mac: on macOS, sandbox_start below only reports that.
 */
#include "sandbox/sandbox.h"

#include <string.h>

static const char *const mac_system_dirs[] = {
    "/usr",
    "/bin",
    "/sbin",
    "/opt",
    "/System",
    "/Library",
    "/etc",
    "/private/etc",
    "/dev",
    "/private/var/db/timezone",
    "/Applications/Xcode.app/Contents/Developer",
};

void
sandbox_seatbelt_quote(struct buf *out, const char *s)
{
    buf_putc(out, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            buf_putc(out, '\\');
        }
        buf_putc(out, *s);
    }
    buf_putc(out, '"');
}

static int
path_ok(const char *p, struct err *err)
{
    if (p == NULL || p[0] != '/') {
        return err_set(err, ERR_INVAL, "sandbox path '%s' is not absolute", p ? p : "");
    }
    for (const char *c = p; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            return err_set(err, ERR_INVAL,
                           "sandbox path '%s' contains a control character; rename it", p);
        }
    }
    return 0;
}

static void
rule(struct buf *out, const char *kind, const char *path)
{
    buf_printf(out, "    (%s ", kind);
    sandbox_seatbelt_quote(out, path);
    buf_puts(out, ")\n");
}

int
sandbox_seatbelt_profile(const struct sandbox_spec *spec, const char *tmp_dir, struct buf *out,
                         struct err *err)
{
    if (path_ok(spec->workspace_dir, err) < 0 || path_ok(tmp_dir, err) < 0) {
        return -1;
    }
    for (size_t i = 0; i < spec->n_ro_paths; i++) {
        if (path_ok(spec->ro_paths[i], err) < 0) {
            return -1;
        }
    }
    for (size_t i = 0; i < spec->n_overlays; i++) {
        if (path_ok(spec->overlays[i].host_dir, err) < 0) {
            return -1;
        }
    }
    buf_puts(out, "(version 1)\n");
    buf_puts(out, "(deny default)\n");
    buf_puts(out, "(allow file-read-metadata)\n");
    buf_puts(out, "(allow file-read*\n    (literal \"/\")\n");
    for (size_t i = 0; i < sizeof(mac_system_dirs) / sizeof(mac_system_dirs[0]); i++) {
        rule(out, "subpath", mac_system_dirs[i]);
    }
    for (size_t i = 0; i < spec->n_ro_paths; i++) {
        rule(out, "subpath", spec->ro_paths[i]);
    }
    for (size_t i = 0; i < spec->n_overlays; i++) {
        rule(out, "subpath", spec->overlays[i].host_dir);
    }
    rule(out, "subpath", spec->workspace_dir);
    rule(out, "subpath", tmp_dir);
    buf_puts(out, ")\n");
    buf_puts(out, "(allow file-write*\n");
    rule(out, "subpath", spec->workspace_dir);
    rule(out, "subpath", tmp_dir);
    buf_puts(out, "    (literal \"/dev/null\")\n)\n");
    if (spec->network) {
        buf_puts(out, "(deny network-outbound (remote ip \"localhost:*\"))\n");
        buf_puts(out, "(allow network*)\n");
    } else {
        buf_puts(out, "(deny network*)\n");
    }
    buf_puts(out, "(allow process-exec*)\n");
    buf_puts(out, "(allow process-fork)\n");
    buf_puts(out, "(allow signal (target same-sandbox))\n");
    buf_puts(out, "(allow sysctl-read)\n");
    buf_puts(out, "(allow mach-lookup)\n");
    if (buf_failed(out)) {
        return buf_err(out, "the sandbox profile", err);
    }
    return 0;
}

#ifndef __linux__
#include "util/mem.h"

void
sandbox_limits_default(struct sandbox_limits *l)
{
    memset(l, 0, sizeof(*l));
    l->timeout_ms = 30000;
    l->memory_bytes = (uint64_t)4 << 30;
    l->cpu_secs = 60;
    l->file_size_bytes = (uint64_t)1 << 30;
    l->nproc = 256;
    l->tmp_size_bytes = (uint64_t)256 << 20;
    l->max_output_bytes = (size_t)16 << 20;
    l->max_command_bytes = SANDBOX_COMMAND_MAX_DEFAULT;
}

int
sandbox_start(uv_loop_t *loop, const struct sandbox_spec *spec, const struct sandbox_callbacks *cb,
              struct sandbox **out, struct err *err)
{
    (void)loop;
    (void)spec;
    (void)cb;
    *out = NULL;
    return err_set(err, ERR_INTERNAL,
                   "running commands under sandbox-exec is not implemented yet on this "
                   "platform; drun never runs them unsandboxed");
}

void
sandbox_cancel(struct sandbox *sb)
{
    (void)sb;
}

int
sandbox_describe(const struct sandbox_spec *spec, int raw, struct buf *out, struct err *err)
{
    (void)raw;
    return sandbox_seatbelt_profile(spec, "/private/tmp", out, err);
}
#endif
