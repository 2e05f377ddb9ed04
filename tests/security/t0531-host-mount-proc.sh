#!/bin/sh
# t0531-host-mount-proc.sh - /proc, /sys and /dev are behind no door: session_mount never
# reads the daemon's environment or open files, whatever mount_allowlist says:
#
#   - /proc/self/environ (the default empty allowlist) and its spellings (//proc, /./proc,
#     /proc/<pid>), /proc/self/root/..., /proc/self/fd/N, /dev/fd/N, /dev/stdin, /sys
#   - the same with mount_allowlist = ["/proc", "/sys", "/dev"]
#   - a host link to /proc/self inside the allowlist
#   - a canary variable of drun-mcp is in no workspace file afterwards
#
# Every pass: as the current user and (as root) as nobody, cold and warm sandboxes.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/host_lib.sh"
host_need "session_mount never reads /proc, /sys or /dev"

cat >"$T_TMP/attack.mjs" <<'JS'
import { mkdirSync, symlinkSync } from 'node:fs';
const { start, check, done, dir, writeConfig } = await import(process.env.T_PRELUDE);
const canary = 'daemon-env-canary-77a1';
mkdirSync(`${dir}/allow`, { recursive: true });
symlinkSync('/proc/self', `${dir}/allow/me`);
const d = await start({ config: '', env: { DRUN_HOST_CANARY: canary } });
const pid = d.srv.proc.pid;
const paths = ['/proc/self/environ', '//proc/self/environ', '/./proc/self/environ',
  `/proc/${pid}/environ`, '/proc/self/root/etc/hostname', '/proc/self/cwd', '/proc/self/fd/0',
  '/proc/self', '/dev/stdin', '/sys/kernel', '/dev/null'];
for (let fd = 0; fd < 24; fd++) paths.push(`/dev/fd/${fd}`);

async function attempt(label) {
  const s = await d.session();
  const got = [];
  for (const p of paths) {
    const r = await d.tool('session_mount', { path: p, description: 'x', session_id: s });
    if (!r.isError) got.push(p);
  }
  const r = await d.tool('session_mount', { path: `${dir}/allow/me/environ`, description: 'x', session_id: s });
  if (!r.isError) got.push('allow/me/environ (a link to /proc/self)');
  const g = await d.bash(s, `grep -rl ${canary} . 2>/dev/null | head -3; true`);
  if (g.stdout_tail.trim() !== '') got.push(`the canary is in ${g.stdout_tail.trim()}`);
  return got.length === 0 || `${label}: mounted ${got.join(', ')}`;
}

await check('session_mount of /proc, /sys, /dev paths is refused (empty allowlist)', () => attempt('empty'));
writeConfig(d.configPath, `mount_allowlist = ["/proc", "/sys", "/dev", "${dir}/allow"]\n`);
await check('session_mount of /proc, /sys, /dev paths is refused (allowlisted)', () => attempt('allowlisted'));
await d.stop();
done();
JS
host_run_passes
t_done
