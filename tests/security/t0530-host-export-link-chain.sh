#!/bin/sh
# t0530-host-export-link-chain.sh - exported symlinks never resolve out of output_dir,
# through the real drun-mcp, real bwrap and a temp DB:
#
#   - a chain of links, each lexically inside the tree, exported together
#     (d0/.../d11/a -> ../.. x12, up -> d0/.../d11/a/../..) does not reach the
#     directory above output_dir on the host: the escaping link is removed and listed
#   - the same chain aimed at an overlay whose host directory was deleted: the next
#     session_bash of the session that mounted it does not see the host outside
#   - an overlay is bound through an fd host/ opened, and that fd never reaches the command
#   - an overlay whose host directory a host process replaced by a link is not bound
#   - an overlay that the current mount_allowlist no longer admits is not bound
#
# Every pass: as the current user and (as root) as nobody, cold and warm sandboxes.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/host_lib.sh"
host_need "exported links stay inside output_dir"

cat >"$T_TMP/attack.mjs" <<'JS'
import { existsSync, mkdirSync, writeFileSync, readFileSync, renameSync, symlinkSync, realpathSync } from 'node:fs';
const { start, check, done, dir, writeConfig } = await import(process.env.T_PRELUDE);
const canary = 'host-secret-5e1f';
const allow = `${dir}/allow`;
mkdirSync(`${allow}/proj`, { recursive: true });
mkdirSync(`${allow}/app/node_modules`, { recursive: true });
writeFileSync(`${allow}/app/node_modules/pkg.js`, 'pkg');
writeFileSync(`${dir}/secret.txt`, canary);
const config = `mount_allowlist = ["${allow}"]\n`;
const d = await start({ config });
const chain = (last, ups) => {
  const p = 'd0/d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11';
  return `mkdir -p ${p} && ln -s ${Array(12).fill('..').join('/')} ${p}/a && ln -s ${p}/a/${ups} ${last}`;
};

await check('a chain of exported links does not resolve above output_dir', async () => {
  const s = await d.session();
  await d.bash(s, chain('up', '../..'));
  const r = await d.ok('session_export', { output_dir: `${allow}/proj`, description: 'x', session_id: s });
  if (existsSync(`${allow}/proj/up/secret.txt`)) return `the host reads ${realpathSync.native(`${allow}/proj/up`)} through proj/up`;
  if (!r.skipped.some((k) => k.path === 'up')) return `'up' is not listed in skipped: ${JSON.stringify(r.skipped)}`;
  if (!existsSync(`${allow}/proj/d0/d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/a`)) return 'the link that stays inside was not written';
  return true;
});

await check('an overlay replaced by an exported chain does not show the host outside', async () => {
  const b = await d.session();
  await d.ok('session_mount', { path: `${allow}/app`, description: 'x', session_id: b });
  const first = await d.bash(b, 'cat node_modules/pkg.js');
  if (first.stdout_tail !== 'pkg') return `the overlay is not bound to begin with: ${JSON.stringify(first).slice(0, 200)}`;
  await d.ok('delete_from_host', { path: `${allow}/app/node_modules` });
  const c = await d.session();
  await d.bash(c, chain('node_modules', '../..'));
  await d.tool('session_export', { output_dir: `${allow}/app`, description: 'x', session_id: c });
  const r = await d.bash(b, 'cat node_modules/secret.txt 2>/dev/null; ls node_modules 2>/dev/null | head -3; true');
  if (r.stdout_tail.includes(canary)) return `session_bash read the host's ${dir}/secret.txt through the overlay`;
  return true;
});

await check('the overlay fd bound by the sandbox does not reach the command', async () => {
  mkdirSync(`${allow}/app4/node_modules`, { recursive: true });
  writeFileSync(`${allow}/app4/node_modules/pkg.js`, 'pkg4');
  const b = await d.session();
  await d.ok('session_mount', { path: `${allow}/app4`, description: 'x', session_id: b });
  const r = await d.bash(b, 'cat node_modules/pkg.js; echo; ls /proc/self/fd | tr "\\n" " "');
  const [pkg, fds] = r.stdout_tail.split('\n');
  if (pkg !== 'pkg4') return `not bound: ${JSON.stringify(r.stdout_tail)}`;
  return fds.trim() === '0 1 2 3' || `open fds in the command: ${fds}`;
});

await check('an overlay whose host directory became a link is not bound', async () => {
  mkdirSync(`${allow}/app2/node_modules`, { recursive: true });
  writeFileSync(`${allow}/app2/node_modules/pkg.js`, 'pkg2');
  const b = await d.session();
  await d.ok('session_mount', { path: `${allow}/app2`, description: 'x', session_id: b });
  await d.bash(b, 'true'); // a warm sandbox may now wait with the overlay bound
  renameSync(`${allow}/app2/node_modules`, `${allow}/app2/nm-old`);
  symlinkSync(dir, `${allow}/app2/node_modules`);
  const r = await d.bash(b, 'cat node_modules/secret.txt 2>/dev/null; true');
  if (r.stdout_tail.includes(canary)) return 'the overlay followed the link to the directory above the allowlist';
  return true;
});

await check('an overlay the current mount_allowlist no longer admits is not bound', async () => {
  mkdirSync(`${allow}/app3/node_modules`, { recursive: true });
  writeFileSync(`${allow}/app3/node_modules/pkg.js`, 'pkg3');
  const b = await d.session();
  await d.ok('session_mount', { path: `${allow}/app3`, description: 'x', session_id: b });
  const before = await d.bash(b, 'cat node_modules/pkg.js 2>/dev/null; true');
  if (before.stdout_tail !== 'pkg3') return `not bound to begin with: ${before.stdout_tail}`;
  mkdirSync(`${dir}/other`, { recursive: true });
  writeConfig(d.configPath, `mount_allowlist = ["${dir}/other"]\n`);
  const after = await d.bash(b, 'cat node_modules/pkg.js 2>/dev/null; true');
  writeConfig(d.configPath, config);
  if (after.stdout_tail.includes('pkg3')) return 'still bound after the allowlist dropped it';
  return true;
});

await d.stop();
done();
JS
host_run_passes
t_done
