#!/bin/sh
# t0532-host-own-files.sh - drun's own files are behind no door even when their directory
# is allowlisted (an operator who allowlists $HOME holds ~/.drun/config.toml and the DB):
#
#   - session_export cannot overwrite config.toml (domain_allowlist = ["*"]) nor write
#     drun.db-wal or drun.db-journal next to the live DB
#   - delete_from_host cannot remove drun.db, drun.db-wal or their directory (nothing
#     of the directory is removed), nor through a host link to the directory
#   - session_mount cannot read config.toml, nor the DB through a hard link (same inode,
#     another name); mounting $HOME skips them and lists them
#   - the runtime directory (other sessions' workspaces) is behind no door
#   - a command reads none of them through the sandbox's read-only bind of the allowlist
#
# Every pass: as the current user and (as root) as nobody, cold and warm sandboxes.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/host_lib.sh"
host_need "drun's own files are behind no door"

cat >"$T_TMP/attack.mjs" <<'JS'
import { existsSync, mkdirSync, readFileSync, writeFileSync, symlinkSync, linkSync, statSync } from 'node:fs';
const { start, check, done, dir } = await import(process.env.T_PRELUDE);
// Each attack gets its own daemon, home and DB, so one that worked on old code does not
// hide the next (an overwritten config.toml drops the allowlist).
let home, own, d, s, cfgBefore;
async function fresh(n) {
  if (d) await d.stop();
  home = `${dir}/home${n}`;
  own = `${home}/.drun`;
  mkdirSync(own, { recursive: true });
  const config = `mount_allowlist = ["${home}", "${dir}/xdg"]\n`;
  d = await start({ config, configPath: `${own}/config.toml`, dbPath: `${own}/drun.db` });
  s = await d.session();
  await d.bash(s, `mkdir -p .drun && printf 'domain_allowlist = ["*"]\\nfetch_allow_private = true\\n' > .drun/config.toml && echo junk > .drun/drun.db-wal && echo junk > .drun/drun.db-journal && echo fine > .drun/other.txt`);
  cfgBefore = readFileSync(`${own}/config.toml`, 'utf8');
}

await fresh(1);
await check('session_export does not overwrite config.toml or write next to the DB', async () => {
  const walBefore = existsSync(`${own}/drun.db-wal`) ? statSync(`${own}/drun.db-wal`).ino : 0;
  const r = await d.tool('session_export', { output_dir: home, description: 'x', session_id: s });
  if (readFileSync(`${own}/config.toml`, 'utf8') !== cfgBefore) return 'config.toml was rewritten';
  if (existsSync(`${own}/drun.db-journal`)) return 'drun.db-journal was written';
  if (existsSync(`${own}/drun.db-wal`) && statSync(`${own}/drun.db-wal`).ino !== walBefore) return 'drun.db-wal was replaced';
  if (!r.isError && !existsSync(`${own}/other.txt`)) return 'an ordinary file next to them was not written';
  const cfg = (await d.ok('get_config', {}));
  if (JSON.stringify(cfg).includes('"*"')) return 'the exported config is in force';
  return true;
});

await fresh(2);
await d.bash(s, 'echo fine > other.txt');
await d.ok('session_export', { output_dir: `${dir}/home2/.drun`, keys: ['other.txt'], description: 'x', session_id: s }).catch(() => {});
await check('delete_from_host cannot remove the DB, its WAL or its directory', async () => {
  await d.bash(s, 'echo keep-wal-alive > f.txt'); // the DB is in WAL mode: the -wal exists
  const got = [];
  for (const p of [`${own}/drun.db-wal`, `${own}/drun.db`, `${own}/config.toml`, own, home]) {
    const r = await d.tool('delete_from_host', { path: p });
    if (!r.isError) got.push(p);
  }
  symlinkSync('.drun', `${home}/alias`);
  const r = await d.tool('delete_from_host', { path: `${home}/alias/drun.db` });
  if (!r.isError) got.push('alias/drun.db');
  if (!existsSync(`${own}/drun.db`) || !existsSync(`${own}/config.toml`)) got.push('(files are gone)');
  if (existsSync(own) && !existsSync(`${own}/other.txt`) && existsSync(`${own}/drun.db`)) got.push('(a refused delete removed other.txt first)');
  await d.bash(s, 'echo still-works > g.txt');
  return got.length === 0 || `deleted: ${got.join(', ')}`;
});

await fresh(3);
await check('session_mount cannot read config.toml, the DB (hard link too) or the runtime directory', async () => {
  linkSync(`${own}/drun.db`, `${home}/innocent.bin`);
  const got = [];
  for (const p of [`${own}/config.toml`, `${own}/drun.db`, `${home}/innocent.bin`, `${dir}/xdg/drun`]) {
    const r = await d.tool('session_mount', { path: p, description: 'x', session_id: s });
    if (!r.isError) got.push(p);
  }
  const t = await d.session();
  const r = await d.ok('session_mount', { path: home, description: 'x', session_id: t });
  const ls = await d.bash(t, 'ls -a .drun 2>/dev/null; ls innocent.bin 2>/dev/null; true');
  for (const n of ['config.toml', 'drun.db', 'innocent.bin']) if (ls.stdout_tail.includes(n)) got.push(`${n} via a mount of home`);
  if (!r.skipped.some((k) => k.path.includes('config.toml'))) got.push(`(config.toml not listed in skipped: ${JSON.stringify(r.skipped).slice(0, 200)})`);
  return got.length === 0 || `read: ${got.join(', ')}`;
});

await fresh(4);
await check('a command does not read them through the read-only bind of an allowlisted home', async () => {
  const r = await d.bash(s, `cat ${own}/config.toml 2>/dev/null; head -c 16 ${own}/drun.db 2>/dev/null; ls ${dir}/xdg/drun 2>/dev/null | head -3; true`);
  const got = [];
  if (r.stdout_tail.includes('mount_allowlist')) got.push('config.toml');
  if (r.stdout_tail.includes('SQLite format')) got.push('drun.db');
  if (/ws-/.test(r.stdout_tail)) got.push('the runtime directory');
  return got.length === 0 || `read ${got.join(', ')}: ${JSON.stringify(r.stdout_tail).slice(0, 200)}`;
});

await d.stop();
done();
JS
host_run_passes
t_done
