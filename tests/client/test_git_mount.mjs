// test_git_mount.mjs - a mounted repository's .git, and the hint for a read-only overlay.
//
// Before: .git was always a read-only overlay, so `git commit` in the sandbox failed with
// a bare "Read-only file system". Now a .git up to mount_git_copy_max_mb is copied into
// the workspace like any directory (the commit works, is checkpointed, and the host's
// repository is untouched); a larger one, or any with mount_git_copy_max_mb = 0, stays an
// overlay, and a command that fails writing under it gets a result naming the overlay.
// The size bound is tested at and one byte past its edge. Cold and warm.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp } from './lib.mjs';

if (!process.env.DRUN_SANDBOX_WARM) {
  let passed = 0, failed = 0, skipped = 0;
  for (const mode of ['off', 'always']) {
    const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url)], { env: { ...process.env, DRUN_SANDBOX_WARM: mode }, encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.status === 77) skipped++;
    for (const line of (r.stdout || '').split('\n')) {
      const m = /^(\d+) passed, (\d+) failed$/.exec(line);
      if (m) {
        passed += Number(m[1]);
        failed += Number(m[2]);
      } else if (line) console.log(line.replace(/^(ok|FAIL|skip) /, `$1 [${mode}] `));
    }
    if (r.status !== 0 && r.status !== 77 && !/passed, \d+ failed/.test(r.stdout || '')) {
      failed++;
      console.log(`FAIL [${mode}] test_git_mount exited ${r.status}: ${(r.stderr || '').slice(-300)}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? (skipped === 2 ? 77 : 0) : 1);
}

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
try {
  execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
  execFileSync('git', ['--version'], { stdio: 'ignore' });
} catch (e) {
  console.log('skip test_git_mount: needs a working sandbox and git');
  console.log('0 passed, 0 failed');
  process.exit(77);
}

const tmp = makeTmp();
// a root daemon's commands run as an unprivileged host user, who must reach what is bound
chmodSync(tmp, 0o711);
const db = join(tmp, 'g.db');
const cfg = join(tmp, 'config.toml');
const repo = join(tmp, 'repo');
mkdirSync(repo);
const git = (args, cwd = repo) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', ...args], { cwd, encoding: 'utf8' });
git(['init', '-q']);
writeFileSync(join(repo, 'a.txt'), 'one\n');
git(['add', 'a.txt']);
git(['commit', '-q', '-m', 'first']);
const hostHead = git(['rev-parse', 'HEAD']).trim();

// fake ".git" directories of an exact size, for the bound
const MiB = 1 << 20;
function fakeRepo(name, bytes) {
  const d = join(tmp, name);
  mkdirSync(join(d, '.git'), { recursive: true });
  writeFileSync(join(d, '.git', 'blob'), Buffer.alloc(bytes, 1));
  writeFileSync(join(d, 'file.txt'), 'x\n');
  return d;
}
const atEdge = fakeRepo('at-edge', 1 * MiB);
const pastEdge = fakeRepo('past-edge', 1 * MiB + 1);

let age = 0;
function writeConfig(extra) {
  writeFileSync(cfg, `mount_allowlist = [${JSON.stringify(tmp)}]\n${extra}\n`);
  const t = Date.now() / 1000 + ++age;
  utimesSync(cfg, t, t);
}
writeConfig('');

const transport = new StdioClientTransport({ command: MCP, args: ['--db', db, '--config', cfg], env: { ...process.env, HOME: tmp }, stderr: 'pipe' });
const client = new Client({ name: 'drun-git-test', version: '1.0' });
await client.connect(transport);
const TIMEOUT = { timeout: 120000 };
async function call(name, args = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, TIMEOUT);
  let body = r.content?.[0]?.text;
  try {
    body = JSON.parse(body);
  } catch {}
  return { isError: !!r.isError, body };
}
async function ok(name, args) {
  const r = await call(name, args);
  assert(!r.isError, `${name}: ${JSON.stringify(r.body).slice(0, 300)}`);
  return r.body;
}
const commitCmd = "git -c safe.directory='*' -c user.name=agent -c user.email=a@example.com commit -q --allow-empty -m 'from the sandbox' && git -c safe.directory='*' log --oneline | wc -l";

await R.run('a small .git is copied: git commit in the sandbox works and is checkpointed', async () => {
  await ok('create_session', {});
  const m = await ok('session_mount', { path: repo, description: 'mount' });
  assertEq(m.overlays.map((o) => o.key), [], 'no overlay for a small .git');
  const b = await ok('session_bash', { command: commitCmd, description: 'commit' });
  assertEq(b.exit_code, 0, `exit (stderr: ${b.stderr_tail})`);
  assertEq(b.stdout_tail.trim(), '2', 'two commits inside');
  assertEq(git(['rev-parse', 'HEAD']).trim(), hostHead, 'the host repository is untouched');
  const again = await ok('session_bash', { command: "git -c safe.directory='*' log --oneline | wc -l", description: 'again' });
  assertEq(again.stdout_tail.trim(), '2', 'the commit is kept in the next checkpoint');
  assert(!('hint' in b), 'no hint on success');
});

await R.run('mount_git_copy_max_mb = 0: .git is an overlay; a commit fails and the result names it', async () => {
  writeConfig('mount_git_copy_max_mb = 0');
  await ok('create_session', {});
  const m = await ok('session_mount', { path: repo, description: 'mount' });
  assertEq(m.overlays.map((o) => o.key), ['.git'], 'overlay registered');
  const b = await ok('session_bash', { command: commitCmd, description: 'commit' });
  assert(b.exit_code !== 0, 'the commit failed');
  assert(/Read-only file system/.test(b.stderr_tail), `EROFS: ${b.stderr_tail}`);
  assert(typeof b.hint === 'string' && b.hint.includes('/workspace/.git') && b.hint.includes('read-only overlay'), `hint: ${b.hint}`);
  assertEq(JSON.stringify(b.read_only_overlays), JSON.stringify([{ key: '.git', host_path: join(repo, '.git') }]), 'read_only_overlays');
});

await R.run('a failure that is not EROFS gets no hint, even with an overlay', async () => {
  const b = await ok('session_bash', { command: 'echo nope >&2; exit 3', description: 'fail' });
  assertEq(b.exit_code, 3, 'exit');
  assert(!('hint' in b) && !('read_only_overlays' in b), `unexpected hint: ${JSON.stringify(b)}`);
});

await R.run('a .git of exactly mount_git_copy_max_mb is copied', async () => {
  writeConfig('mount_git_copy_max_mb = 1');
  await ok('create_session', {});
  const m = await ok('session_mount', { path: atEdge, description: 'mount' });
  assertEq(m.overlays.map((o) => o.key), [], 'copied at the edge');
  const b = await ok('session_bash', { command: 'wc -c < .git/blob', description: 'size' });
  assertEq(b.stdout_tail.trim(), String(MiB), 'the copy is whole');
});

await R.run('one byte past mount_git_copy_max_mb: an overlay', async () => {
  await ok('create_session', {});
  const m = await ok('session_mount', { path: pastEdge, description: 'mount' });
  assertEq(m.overlays.map((o) => o.key), ['.git'], 'overlay past the edge');
});

await R.run('a .git within mount_git_copy_max_mb but past half of max_workspace_mb: an overlay, the mount succeeds', async () => {
  writeConfig('mount_git_copy_max_mb = 64\nmax_workspace_mb = 1');
  await ok('create_session', {});
  const m = await ok('session_mount', { path: atEdge, description: 'mount' });
  assertEq(m.overlays.map((o) => o.key), ['.git'], 'overlay, not a failed mount');
  writeConfig('mount_git_copy_max_mb = 1');
});

await R.run('get_config shows mount_git_copy_max_mb', async () => {
  const g = await ok('get_config', {});
  const v = g.mount_git_copy_max_mb ?? g.config?.mount_git_copy_max_mb ?? JSON.stringify(g).match(/"mount_git_copy_max_mb":(\d+)/)?.[1];
  assertEq(Number(v), 1, 'value');
});

await client.close();
R.done();
