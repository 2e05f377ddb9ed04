// test_host.mjs - attacks on the host boundary (session_mount, session_export,
// delete_from_host, session_get_env) and the policy wiring (get_config, reloads,
// `drun-mcp config`), each asserting its safe outcome.
//
// Drives the real build/drun-mcp through the official SDK client with --config naming a
// file in a temp dir. Each attack checks what actually happened on disk, not only the
// error code. The racing test swaps a directory for a symlink from a helper process in a
// loop bounded to ~2 s while exports run; no test asserts on time.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, statSync,
  symlinkSync, writeFileSync, openSync, ftruncateSync, closeSync, chmodSync, utimesSync,
} from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp, sqlite } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
const tmp = makeTmp();
const db = join(tmp, 'host.db');
const cfg = join(tmp, 'config.toml');
const allowed = join(tmp, 'al');      // the allowlisted directory
const alice = join(tmp, 'alice');     // shares the prefix "al" but is not allowed
const outside = join(tmp, 'outside'); // never allowed
for (const d of [allowed, alice, outside]) mkdirSync(d);
writeFileSync(join(alice, 'secret'), 'alice secret\n');
writeFileSync(join(outside, 'keep'), 'outside original\n');

const toml = (s) => JSON.stringify(s);
function writeConfig(extra = '') {
  writeFileSync(cfg, `# test config\nmount_allowlist = [${toml(allowed)}]\nenv_allowlist = ["DRUN_TEST_SET", "DRUN_TEST_UNSET"]\n${extra}`);
  // The reload is keyed on stat; make each rewrite visibly newer.
  const t = Date.now() / 1000 + (writeConfig.n = (writeConfig.n || 0) + 1);
  utimesSync(cfg, t, t);
}
writeConfig();

async function connect(args = ['--db', db, '--config', cfg], env = {}) {
  const transport = new StdioClientTransport({
    command: MCP,
    args,
    env: { ...process.env, HOME: tmp, DRUN_TEST_SET: 'hello', DRUN_TEST_SECRET: 'nope', ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'drun-host-test', version: '1.0' });
  await client.connect(transport);
  return client;
}

const call = (c, name, args = {}) => c.callTool({ name, arguments: args });
const body = (r) => JSON.parse(r.content[0].text);
function expectError(r, code, what) {
  assert(r.isError, `${what}: expected ${code}, got success ${r.content[0].text.slice(0, 200)}`);
  const e = body(r);
  assertEq(e.code, code, `${what}: code (message: ${e.message})`);
  assert(typeof e.message === 'string' && e.message.length > 0 && e.message[0] === e.message[0].toLowerCase(), `${what}: message`);
  return e;
}
function expectOk(r, what) {
  assert(!r.isError, `${what}: ${r.content[0].text.slice(0, 300)}`);
  return body(r);
}
const read = (p) => readFileSync(p, 'utf8');

let c = await connect();

// ---- get_config and the policy ---------------------------------------------------------

await R.run('get_config: the file, its mtime, the doors, unknown-key warnings', async () => {
  writeConfig('max_sessions = 7\nbogus_key = 1\n');
  const g = expectOk(await call(c, 'get_config'), 'get_config');
  assertEq(g.source, 'file', 'source');
  assertEq(g.config_path, cfg, 'config_path');
  assert(typeof g.config_mtime === 'string', 'mtime');
  assertEq(g.max_sessions, 7, 'max_sessions');
  assertEq(g.mount_allowlist, [allowed], 'mount_allowlist');
  assert(g.warnings.some((w) => w.includes('bogus_key')), `warnings: ${JSON.stringify(g.warnings)}`);
  assertEq(g.load_error, null, 'no load error');
  assert(g.mount_allowlist_effect.session_export.includes('only inside'), 'export door');
  for (const k of ['domain_allowlist', 'mount_overlay_paths', 'env_allowlist', 'bash_command_denylist', 'bash_command_allowlist', 'snapshots_dir', 'max_workspace_mb', 'max_checkpoints', 'session_idle_timeout_secs', 'bash_timeout_ms', 'fetch_timeout_ms', 'connect_timeout_ms', 'package_install_enabled', 'package_install_timeout_ms', 'db_path', 'runtime_dir', 'max_output_bytes'])
    assert(Object.hasOwn(g, k), `get_config lacks ${k}`);
});

await R.run('get_config: an empty allowlist says mount reads anywhere, export/delete refuse', async () => {
  const empty = join(tmp, 'empty.toml');
  writeFileSync(empty, 'mount_allowlist = []\n');
  const c2 = await connect(['--db', join(tmp, 'e.db'), '--config', empty]);
  const g = expectOk(await call(c2, 'get_config'), 'get_config');
  assert(g.mount_allowlist_effect.session_mount.includes('any host path'), 'mount door');
  assert(g.mount_allowlist_effect.session_export.startsWith('refused'), 'export door');
  assert(g.mount_allowlist_effect.delete_from_host.startsWith('refused'), 'delete door');
  writeFileSync(join(outside, 'victim'), 'x');
  const e = expectError(await call(c2, 'delete_from_host', { path: join(outside, 'victim') }), 'mount_denied', 'delete with empty list');
  assert(e.message.includes('drun-mcp config add-path'), 'message names the fix');
  assert(existsSync(join(outside, 'victim')), 'victim still there');
  await c2.close();
});

await R.run('a config with a syntax error: old policy stays, error shown, audited once', async () => {
  writeConfig('max_sessions = 7\n');
  expectOk(await call(c, 'get_config'), 'before');
  writeFileSync(cfg, readFileSync(cfg, 'utf8') + 'max_checkpoints = = 3\n');
  const t = Date.now() / 1000 + 100;
  utimesSync(cfg, t, t);
  const g = expectOk(await call(c, 'get_config'), 'after the bad edit');
  assertEq(g.max_sessions, 7, 'old value stays in force');
  assert(g.load_error && /line \d+/.test(g.load_error.message), `load_error with a line: ${JSON.stringify(g.load_error)}`);
  assert(g.load_error.effect.includes('stays in force'), 'effect');
  await call(c, 'get_config'); // the same error again: not audited twice
  await call(c, 'delete_from_host', { path: join(allowed, 'nothing-here') }); // still works
  const rows = sqlite(db, "select kind, tool, outcome, summary from audit_log where tool = 'config_reload'");
  assertEq(rows.length, 1, `one config_reload row, got ${JSON.stringify(rows)}`);
  assertEq([rows[0].kind, rows[0].outcome], ['event', 'error'], 'row kind and outcome');
  writeConfig('max_sessions = 9\n');
  const g2 = expectOk(await call(c, 'get_config'), 'fixed');
  assertEq(g2.max_sessions, 9, 'new value');
  assertEq(g2.load_error, null, 'error cleared');
});

await R.run('no good policy ever loaded: get_config shows it, policy tools refuse', async () => {
  const bad = join(tmp, 'bad.toml');
  writeFileSync(bad, 'mount_allowlist = [\n');
  const c2 = await connect(['--db', join(tmp, 'b.db'), '--config', bad]);
  const g = expectOk(await call(c2, 'get_config'), 'get_config');
  assertEq(g.policy_in_force, false, 'policy_in_force');
  assert(g.load_error && g.load_error.message.includes('bad.toml'), 'load_error');
  const e = expectError(await call(c2, 'delete_from_host', { path: join(allowed, 'x') }), 'config_error', 'delete');
  assert(e.message.includes('bad.toml'), 'the parse error is the message');
  await c2.close();
});

await R.run('db_path from config when neither --db nor DRUN_DB is given', async () => {
  const dbc = join(tmp, 'fromcfg.db');
  const f = join(tmp, 'dbpath.toml');
  writeFileSync(f, `db_path = ${toml(dbc)}\n`);
  const c2 = await connect(['--config', f], { DRUN_DB: '' });
  const g = expectOk(await call(c2, 'get_config'), 'get_config');
  assertEq(g.db_path, dbc, 'db_path');
  await c2.close();
  assert(existsSync(dbc), 'the DB was created where the config says');
  const r = spawnSync(MCP, ['--config', join(tmp, 'none.toml')], { env: { ...process.env, DRUN_DB: '', HOME: tmp }, input: '' });
  assert(r.status === 2 && /no database named/.test(r.stderr.toString()), `refuses without a DB: ${r.status} ${r.stderr}`);
});

await R.run('drun-mcp config add-path keeps comments and layout (before/after text)', async () => {
  const f = join(tmp, 'edit.toml');
  const before = '# my notes\nmax_sessions = 3 # inline\n\nmount_allowlist = [] # trailing\n\n[extra]\n# table comment\n';
  writeFileSync(f, before);
  chmodSync(f, 0o640);
  const out = execFileSync(MCP, ['config', 'add-path', allowed, '--config', f], { encoding: 'utf8' });
  const after = readFileSync(f, 'utf8');
  assertEq(after, before.replace('mount_allowlist = []', `mount_allowlist = [${toml(allowed)}]`), 'only the array changed');
  assertEq(statSync(f).mode & 0o777, 0o640, 'permissions kept');
  assert(out.length > 0, 'says what it did');
  const again = execFileSync(MCP, ['--config', f, 'config', 'add-path', allowed], { encoding: 'utf8' });
  assert(/already/.test(again), `idempotent message: ${again}`);
  assertEq(readFileSync(f, 'utf8'), after, 'second add changes nothing');
  const list = execFileSync(MCP, ['config', 'list', '--config', f], { encoding: 'utf8' });
  assert(list.includes(allowed), 'list shows it');
  const bad = spawnSync(MCP, ['config', 'add-path'], { env: { ...process.env, HOME: tmp } });
  assert(bad.status !== 0 && /usage/.test(bad.stderr.toString()), 'missing argument: usage');
  execFileSync(MCP, ['config', 'remove-path', allowed, '--config', f]);
  assertEq(readFileSync(f, 'utf8'), before, 'remove-path restores the text');
});

// ---- delete_from_host --------------------------------------------------------------------

writeConfig();

await R.run('delete_from_host: prefix confusion (/x/al does not admit /x/alice)', async () => {
  expectError(await call(c, 'delete_from_host', { path: join(alice, 'secret') }), 'mount_denied', 'alice');
  assert(existsSync(join(alice, 'secret')), 'alice/secret survives');
});

await R.run('delete_from_host: the allowlist root itself and / are refused', async () => {
  writeFileSync(join(allowed, 'in-root'), 'x');
  expectError(await call(c, 'delete_from_host', { path: allowed }), 'mount_denied', 'root');
  expectError(await call(c, 'delete_from_host', { path: allowed + '/' }), 'mount_denied', 'root/');
  expectError(await call(c, 'delete_from_host', { path: allowed + '/.' }), 'mount_denied', 'root/.');
  expectError(await call(c, 'delete_from_host', { path: '/' }), 'mount_denied', '/');
  assert(existsSync(join(allowed, 'in-root')), 'root intact');
});

await R.run('delete_from_host: ../, relative, newline and NUL paths are refused', async () => {
  expectError(await call(c, 'delete_from_host', { path: `${allowed}/../alice/secret` }), 'invalid_workspace_path', '..');
  expectError(await call(c, 'delete_from_host', { path: 'al/x' }), 'invalid_workspace_path', 'relative');
  expectError(await call(c, 'delete_from_host', { path: `${allowed}/a\nb` }), 'invalid_workspace_path', 'newline');
  writeFileSync(join(allowed, 'nul'), 'x');
  let threw = false;
  try {
    const r = await call(c, 'delete_from_host', { path: `${allowed}/nul\u0000/../../alice/secret` });
    threw = !!r.isError;
  } catch (e) {
    threw = /NUL/.test(String(e));
  }
  assert(threw, 'a NUL in the path is refused');
  assert(existsSync(join(allowed, 'nul')) && existsSync(join(alice, 'secret')), 'nothing deleted');
});

await R.run('delete_from_host: a symlink to outside is removed as a link, never followed', async () => {
  symlinkSync(outside, join(allowed, 'out-link'));
  expectError(await call(c, 'delete_from_host', { path: join(allowed, 'out-link', 'keep') }), 'mount_denied', 'through the link');
  assert(existsSync(join(outside, 'keep')), 'outside/keep survives the attempt through the link');
  const d = expectOk(await call(c, 'delete_from_host', { path: join(allowed, 'out-link') }), 'the link');
  assertEq(d.deleted, true, 'deleted');
  assert(!existsSync(join(allowed, 'out-link')) && existsSync(join(outside, 'keep')), 'link gone, target intact');
});

await R.run('delete_from_host: recursive delete, missing path is deleted:false', async () => {
  mkdirSync(join(allowed, 'tree/a/b'), { recursive: true });
  writeFileSync(join(allowed, 'tree/a/b/f'), 'x');
  symlinkSync(outside, join(allowed, 'tree/a/ln'));
  const d = expectOk(await call(c, 'delete_from_host', { path: join(allowed, 'tree') }), 'tree');
  assertEq([d.deleted, d.files_removed, d.dirs_removed], [true, 2, 3], 'counts');
  assert(!existsSync(join(allowed, 'tree')) && existsSync(join(outside, 'keep')), 'tree gone, outside intact');
  const m = expectOk(await call(c, 'delete_from_host', { path: join(allowed, 'tree') }), 'again');
  assertEq(m.deleted, false, 'missing is a no-op');
});

// ---- sessions: mount, export, get_env ---------------------------------------------------------

let haveSession = false;
await R.run('create_session for the session doors', async () => {
  const s = expectOk(await call(c, 'create_session'), 'create_session');
  assert(typeof s.session_id === 'string', 'session id');
  haveSession = true;
});

const src = join(allowed, 'src');
mkdirSync(join(src, 'sub'), { recursive: true });
writeFileSync(join(src, 'a.txt'), 'alpha\n');
writeFileSync(join(src, 'run.sh'), '#!/bin/sh\necho hi\n');
chmodSync(join(src, 'run.sh'), 0o755);
writeFileSync(join(src, 'sub', 'b.txt'), 'beta\n');
symlinkSync('a.txt', join(src, 'link-in'));
symlinkSync('/etc/passwd', join(src, 'link-out'));
execFileSync('ln', [join(src, 'a.txt'), join(src, 'hard.txt')]);
mkdirSync(join(src, 'node_modules', 'pkg'), { recursive: true });
writeFileSync(join(src, 'node_modules', 'pkg', 'index.js'), 'x'.repeat(1000));
execFileSync('mkfifo', [join(src, 'fifo')]);
mkdirSync(join(src, 'emptydir'));

await R.run('session_mount: contents at the root, links as links, FIFO skipped, overlay not copied', async () => {
  const m = expectOk(await call(c, 'session_mount', { path: src, description: 'mount src' }), 'mount');
  assert(m.skipped.some((s) => s.path === 'fifo' && s.why === 'fifo'), `fifo listed: ${JSON.stringify(m.skipped)}`);
  assertEq(m.overlays.map((o) => o.key), ['node_modules'], 'overlay registered');
  const r = await call(c, 'session_read_file', { path: 'sub/b.txt', description: 'read' });
  assertEq(r.content[0].text, 'beta\n', 'directory contents land at the root');
  const h = await call(c, 'session_read_file', { path: 'hard.txt', description: 'read' });
  assertEq(h.content[0].text, 'alpha\n', 'hard link read as content');
  const nm = await call(c, 'session_read_file', { path: 'node_modules/pkg/index.js', description: 'read' });
  assert(nm.isError, 'overlay contents are not copied into the checkpoint');
  const rows = sqlite(db, `select key, host_path from session_overlays`);
  assert(rows.some((x) => x.key === 'node_modules' && x.host_path === join(src, 'node_modules')), `overlay row: ${JSON.stringify(rows)}`);
});

await R.run('session_mount: a file lands as its basename', async () => {
  expectOk(await call(c, 'session_mount', { path: join(src, 'sub', 'b.txt'), description: 'one file' }), 'mount file');
  const r = await call(c, 'session_read_file', { path: 'b.txt', description: 'read' });
  assertEq(r.content[0].text, 'beta\n', 'b.txt at the root');
});

await R.run('session_mount: prefix confusion, ../, relative, newline and /etc via a link are refused', async () => {
  expectError(await call(c, 'session_mount', { path: alice, description: 'x' }), 'mount_denied', 'alice');
  expectError(await call(c, 'session_mount', { path: `${allowed}/../alice`, description: 'x' }), 'invalid_workspace_path', '..');
  expectError(await call(c, 'session_mount', { path: 'al', description: 'x' }), 'invalid_workspace_path', 'relative');
  expectError(await call(c, 'session_mount', { path: `${allowed}/a\nb`, description: 'x' }), 'invalid_workspace_path', 'newline');
  symlinkSync('/etc', join(allowed, 'etc-link'));
  const e = expectError(await call(c, 'session_mount', { path: join(allowed, 'etc-link'), description: 'x' }), 'mount_denied', 'link to /etc');
  assert(e.message.includes(allowed) && e.message.includes('drun-mcp config add-path'), `message names prefixes and the fix: ${e.message}`);
  expectError(await call(c, 'session_mount', { path: join(allowed, 'nope'), description: 'x' }), 'invalid_workspace_path', 'missing');
});

await R.run('session_mount: a FIFO or device named directly is refused without blocking', async () => {
  expectError(await call(c, 'session_mount', { path: join(src, 'fifo'), description: 'x' }), 'invalid_workspace_path', 'fifo');
  const dev = join(allowed, 'null-dev');
  const mk = spawnSync('mknod', [dev, 'c', '1', '3']);
  if (mk.status !== 0) {
    console.log('skip device node: mknod is not permitted here');
    return;
  }
  expectError(await call(c, 'session_mount', { path: dev, description: 'x' }), 'invalid_workspace_path', 'device');
  mkdirSync(join(allowed, 'devdir'));
  spawnSync('mknod', [join(allowed, 'devdir', 'zero'), 'c', '1', '5']);
  const m = expectOk(await call(c, 'session_mount', { path: join(allowed, 'devdir'), description: 'x' }), 'dir with device');
  assert(m.skipped.some((s) => s.path === 'zero' && s.why === 'device'), 'device skipped and listed');
});

await R.run('session_mount: a 2 GB sparse file with max_workspace_mb = 1 fails fast', async () => {
  writeConfig('max_workspace_mb = 1\n');
  const big = join(allowed, 'bigdir');
  mkdirSync(big);
  const fd = openSync(join(big, 'sparse'), 'w');
  ftruncateSync(fd, 2 * 1024 * 1024 * 1024);
  closeSync(fd);
  const e = expectError(await call(c, 'session_mount', { path: big, description: 'big' }), 'workspace_size_exceeded', 'sparse');
  assertEq(e.detail.limit_bytes, 1048576, 'limit in detail');
  assert(e.detail.actual_bytes > 1048576, 'actual in detail');
  // Just past the edge: 1 MiB + 1 byte of real data fails, exactly 1 MiB passes.
  const edge = join(allowed, 'edge');
  mkdirSync(edge);
  writeFileSync(join(edge, 'f'), Buffer.alloc(1048577, 97));
  expectError(await call(c, 'session_mount', { path: edge, description: 'edge+1' }), 'workspace_size_exceeded', 'one byte past');
  writeFileSync(join(edge, 'f'), Buffer.alloc(1048576, 97));
  expectOk(await call(c, 'create_session'), 'a fresh, empty session');
  const ok = expectOk(await call(c, 'session_mount', { path: edge, description: 'edge' }), 'exactly at the limit');
  assertEq(ok.bytes_mounted, 1048576, 'bytes at the edge');
  expectOk(await call(c, 'delete_from_host', { path: join(big, 'sparse') }), 'cleanup');
  writeConfig('max_workspace_mb = 2\n');
});

await R.run('the config limits apply to every session tool, not only the host doors', async () => {
  writeConfig('max_workspace_mb = 1\n');
  expectOk(await call(c, 'create_session'), 'a fresh, empty session');
  const e = expectError(await call(c, 'session_write_files', { entries: [{ path: 'big.txt', content: 'x'.repeat(1048577) }], description: 'over' }), 'workspace_size_exceeded', 'write_files over the config limit');
  assertEq(e.detail.limit_bytes, 1048576, 'the config limit, not the default');
  writeConfig('max_workspace_mb = 2\n');
  expectOk(await call(c, 'session_write_files', { entries: [{ path: 'big.txt', content: 'x'.repeat(1048577) }], description: 'fits now' }), 'write_files under the new limit');
});

await R.run('session_mount: a config edited while a call runs does not change that call', async () => {
  const many = join(allowed, 'many');
  mkdirSync(many);
  for (let i = 0; i < 300; i++) writeFileSync(join(many, `f${i}`), `file ${i}\n`);
  const p = call(c, 'session_mount', { path: many, description: 'many' });
  writeFileSync(cfg, `mount_allowlist = [${toml(outside)}]\n`); // revoke while it may be running
  const t = Date.now() / 1000 + 500;
  utimesSync(cfg, t, t);
  const r = await p;
  if (r.isError) assertEq(body(r).code, 'mount_denied', 'refused whole under the new policy');
  else assert(body(r).files_mounted === 300, 'mounted whole under the old policy');
  expectError(await call(c, 'session_mount', { path: many, description: 'again' }), 'mount_denied', 'the next call sees the new policy');
  writeConfig('max_workspace_mb = 2\n');
});

await R.run('session_mount: 256 directory levels mount, 257 are refused', async () => {
  const deep = (n) => {
    const root = join(allowed, `deep${n}`);
    mkdirSync(join(root, ...Array(n).fill('d')), { recursive: true });
    writeFileSync(join(root, ...Array(n).fill('d'), 'f'), 'x');
    return root;
  };
  expectOk(await call(c, 'create_session'), 'fresh session');
  expectOk(await call(c, 'session_mount', { path: deep(256), description: '256' }), '256 levels');
  const r257 = await call(c, 'session_mount', { path: deep(257), description: '257' });
  const e = expectError(r257, 'invalid_arguments', '257 levels');
  assert(e.message.includes('256 levels'), e.message);
  expectOk(await call(c, 'session_mount', { path: src, description: 'back to the test tree' }), 'remount src');
});

const outdir = join(allowed, 'out');

await R.run('session_export: writes files with modes, links inside only, skips and lists', async () => {
  const x = expectOk(await call(c, 'session_export', { output_dir: outdir, description: 'export' }), 'export');
  assertEq(read(join(outdir, 'sub', 'b.txt')), 'beta\n', 'file written');
  assertEq(statSync(join(outdir, 'run.sh')).mode & 0o777, 0o755, 'exec mode kept');
  assertEq(statSync(join(outdir, 'a.txt')).mode & 0o777, 0o644, 'plain mode');
  assertEq(readlinkSync(join(outdir, 'link-in')), 'a.txt', 'inside link written as a link');
  assert(!existsSync(join(outdir, 'link-out')) && x.skipped.some((s) => s.path === 'link-out'), 'outside link skipped and listed');
  assert(x.exported_files.includes(join(outdir, 'a.txt')), 'absolute paths reported');
  assert(statSync(join(outdir, 'emptydir')).isDirectory(), 'empty dir kept');
});

await R.run('session_export: never deletes; keys select files', async () => {
  writeFileSync(join(outdir, 'host-only'), 'mine');
  expectOk(await call(c, 'session_export', { output_dir: outdir, keys: ['a.txt'], description: 'one' }), 'keys');
  assertEq(read(join(outdir, 'host-only')), 'mine', 'host file kept');
});

await R.run('session_export: ../ in keys and output_dir, relative, prefix confusion are refused', async () => {
  expectError(await call(c, 'session_export', { output_dir: outdir, keys: ['../escape'], description: 'x' }), 'invalid_workspace_path', 'key ..');
  expectError(await call(c, 'session_export', { output_dir: outdir, keys: ['missing'], description: 'x' }), 'file_not_found', 'missing key');
  expectError(await call(c, 'session_export', { output_dir: `${allowed}/../outside`, description: 'x' }), 'invalid_workspace_path', 'dir ..');
  expectError(await call(c, 'session_export', { output_dir: 'al/out', description: 'x' }), 'invalid_workspace_path', 'relative');
  expectError(await call(c, 'session_export', { output_dir: join(alice, 'out'), description: 'x' }), 'mount_denied', 'alice');
  expectError(await call(c, 'session_export', { output_dir: join(allowed, 'etc-link'), description: 'x' }), 'mount_denied', 'link to /etc');
  expectError(await call(c, 'session_export', { output_dir: `${outdir}\nx`, description: 'x' }), 'invalid_workspace_path', 'newline');
  assert(!existsSync(join(outside, 'escape')) && !existsSync(join(alice, 'out')), 'nothing written outside');
  assertEq(readdirSync(outside).filter((n) => n !== 'victim').sort(), ['keep'], 'outside untouched');
});

await R.run('session_export: over an existing symlink pointing outside (outside unchanged)', async () => {
  const d = join(allowed, 'out2');
  mkdirSync(d);
  symlinkSync(join(outside, 'keep'), join(d, 'a.txt')); // planted file link
  symlinkSync(outside, join(d, 'sub'));                  // planted directory link
  const x = expectOk(await call(c, 'session_export', { output_dir: d, description: 'over links' }), 'export');
  assertEq(read(join(outside, 'keep')), 'outside original\n', 'outside file unchanged');
  assert(!existsSync(join(outside, 'b.txt')), 'nothing written through the dir link');
  assert(lstatSync(join(d, 'a.txt')).isFile(), 'the file link was replaced as a link');
  assert(x.skipped.some((s) => s.path === 'sub/b.txt'), `write through sub/ skipped: ${JSON.stringify(x.skipped)}`);
});

await R.run('session_export: a symlink swapped in between check and write (race, ~2 s)', async () => {
  const d = join(allowed, 'race');
  mkdirSync(join(d, 'sub'), { recursive: true });
  const outs = join(outside, 'race-target');
  mkdirSync(outs);
  // The helper flips race/sub between a directory and a link to outside/race-target.
  const racer = spawn('sh', ['-c', `end=$(( $(date +%s) + 2 )); n=0; while [ $(date +%s) -le $end ] && [ $n -lt 200000 ]; do rm -rf "$0/sub"; ln -s "$1" "$0/sub"; rm -rf "$0/sub"; mkdir -p "$0/sub"; n=$((n+1)); done`, d, outs], { stdio: 'ignore' });
  const done = new Promise((res) => racer.on('exit', res));
  let calls = 0, wrote = 0, refused = 0, exited = false;
  const codes = {};
  done.then(() => (exited = true));
  const stopAt = Date.now() + 4000; // a loop bound, not an assertion on speed
  while (!exited && calls < 2000 && Date.now() < stopAt) {
    const r = await call(c, 'session_export', { output_dir: d, keys: ['sub/b.txt', 'a.txt'], description: 'race' });
    calls++;
    if (r.isError) { refused++; codes[body(r).code + ': ' + body(r).message.slice(0, 80)] = 1; }
    else wrote++;
  }
  await done;
  assertEq(readdirSync(outs), [], `nothing landed outside after ${calls} exports (${wrote} ok, ${refused} refused)`);
  assert(calls > 0, 'exports ran');
  console.log(`# race: ${calls} exports, ${wrote} answered ok, ${refused} refused: ${Object.keys(codes).join(' / ')}`);
});

await R.run('session_get_env: allowed, unset, denied', async () => {
  const a = expectOk(await call(c, 'session_get_env', { name: 'DRUN_TEST_SET' }), 'allowed');
  assertEq([a.name, a.value, a.is_set], ['DRUN_TEST_SET', 'hello', true], 'allowed value');
  const u = expectOk(await call(c, 'session_get_env', { name: 'DRUN_TEST_UNSET' }), 'unset');
  assertEq([u.value, u.is_set], ['', false], 'unset value');
  const e = expectError(await call(c, 'session_get_env', { name: 'DRUN_TEST_SECRET' }), 'env_var_denied', 'denied');
  assert(!e.message.includes('nope'), 'the value never leaks');
  expectError(await call(c, 'session_get_env', { name: 'drun_test_set' }), 'env_var_denied', 'exact case');
});

await c.close();
R.done();
