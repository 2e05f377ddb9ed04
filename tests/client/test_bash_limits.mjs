// test_bash_limits.mjs - the limits around one session_bash call, against the real
// build/drun-mcp through the official SDK client:
//
// - runtime_dir in config.toml moves the workspaces (created 0700), ahead of
//   XDG_RUNTIME_DIR;
// - the idle clock counts from the END of the last call: a command longer than the idle
//   limit (held on a FIFO this test controls) does not make the next call idle;
// - a 2 GiB allocation that the memory limit refuses says limit_hit "memory";
// - files whose names drun cannot store (newline, invalid UTF-8, control characters)
//   are removed by session_rollback, which says so (removed_unstorable);
// - the disk bound: with max_workspace_mb = 64, fallocate and a plain writer see ENOSPC
//   while the command runs, the call fails with workspace_size_exceeded, and the
//   workspace never holds much more than the bound (du polled during the command, and
//   once the command is parked on a FIFO), and is back at the head when the answer comes;
// - a failed commit resets the workspace before the answer: the write lock held by
//   another process (sqlite3 BEGIN EXCLUSIVE), the checkpoint limit (a store refusal
//   mid-commit), a size overflow and a timeout.
//
// `node test_bash_limits.mjs nobody` runs the daemon as uid 65534 (needs root): the
// unprivileged daemon bounds its workspaces from a user namespace of its own, and every
// check holds in both modes. The workspace is a mount in the daemon's own mount
// namespace, so it is measured both as the daemon sees it (/proc/PID/root/...) and on
// the host (the directory under it, which must stay empty).
import { chmodSync, existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
try {
  execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
} catch (e) {
  console.log('skip test_bash_limits: bwrap cannot create a sandbox here (run drun-mcp doctor)');
  console.log('0 passed, 0 failed');
  process.exit(77);
}
const asNobody = process.argv[2] === 'nobody';
if (asNobody && process.getuid() !== 0) {
  console.log('skip test_bash_limits nobody: needs root to start the daemon as nobody');
  console.log('0 passed, 0 failed');
  process.exit(77);
}
const MIB = 1 << 20;
const HOLD = 120000; // hang guard only
const tmp = makeTmp();
// Every directory above a workspace must be searchable by whoever the sandbox runs as.
chmodSync(tmp, 0o755);

// Starts a daemon with config text `cfg`; returns { client, pid, stderr(), rt, db, close }.
async function daemon(name, cfg, env = {}) {
  const dir = join(tmp, name);
  mkdirSync(dir, { mode: 0o755 });
  const rt = join(dir, 'rt');
  const cfgPath = join(dir, 'config.toml');
  writeFileSync(cfgPath, `runtime_dir = "${rt}"\n${cfg}`);
  const db = join(dir, 'd.db');
  let command = MCP;
  let args = ['--db', db, '--config', cfgPath];
  if (asNobody) {
    execFileSync('chown', ['-R', '65534:65534', dir]);
    args = ['--reuid=65534', '--regid=65534', '--clear-groups', MCP, ...args];
    command = 'setpriv';
  }
  const transport = new StdioClientTransport({
    command,
    args,
    env: { ...process.env, XDG_RUNTIME_DIR: join(dir, 'xdg'), HOME: dir, DRUN_SANDBOX_WARM: 'auto', ...env },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d) => (stderr += d));
  const client = new Client({ name: 'drun-bash-limits-test', version: '1.0' });
  await client.connect(transport);
  return { client, pid: transport.pid, stderr: () => stderr, rt, db, dir, close: () => client.close() };
}

async function call(d, name, args) {
  const r = await d.client.callTool({ name, arguments: args }, undefined, { timeout: HOLD });
  const text = r.content?.[0]?.text;
  let v = text;
  try {
    v = JSON.parse(text);
  } catch {}
  return { isError: !!r.isError, v };
}
async function ok(d, name, args) {
  const r = await call(d, name, args);
  assert(!r.isError, `${name} failed: ${JSON.stringify(r.v).slice(0, 400)}`);
  return r.v;
}
const bash = (d, sid, command) => ok(d, 'session_bash', { command, description: 't', session_id: sid });

// Polls cond() until it is true (a hang guard of 60 s, never a timing assertion).
async function until(what, cond) {
  const end = Date.now() + 60000;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`waited 60 s for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
// Writes a line into a FIFO without blocking the event loop (the reader may not be there yet).
function release(fifo) {
  return new Promise((res, rej) => {
    // Bounded, so a command that already ended (a failing run) cannot hang the test here.
    const p = spawn('timeout', ['60', 'sh', '-c', 'echo go > "$1"', 'sh', fifo], { stdio: 'ignore' });
    p.on('exit', (c) => (c === 0 ? res() : rej(new Error(`writing ${fifo}: exit ${c}`))));
  });
}
// The workspace as the daemon sees it (its mount namespace), and as the host sees it:
// ws-<sid> under runtime_dir, directly or in the daemon's own directory below it.
function wsRel(d, sid) {
  const top = `/proc/${d.pid}/root${d.rt}`;
  if (existsSync(`${top}/ws-${sid}`)) return `ws-${sid}`;
  for (const sub of names(top) || []) {
    if (existsSync(`${top}/${sub}/ws-${sid}`)) return `${sub}/ws-${sid}`;
  }
  return `ws-${sid}`;
}
const wsDaemon = (d, sid) => `/proc/${d.pid}/root${d.rt}/${wsRel(d, sid)}`;
const wsHost = (d, sid) => join(d.rt, wsRel(d, sid));
function duKiB(path) {
  try {
    return Number(execFileSync('du', ['-sk', path], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\t')[0]);
  } catch {
    return 0; // the directory is being changed under du; the next poll sees it
  }
}
function names(path) {
  try {
    return readdirSync(path).sort();
  } catch {
    return null;
  }
}

// ---- runtime_dir -----------------------------------------------------------------------------
{
  const d = await daemon('rtdir', '');
  await R.run('runtime_dir in config.toml holds the workspaces, 0700, ahead of XDG_RUNTIME_DIR', async () => {
    const sid = (await ok(d, 'create_session', {})).session_id;
    const r = await bash(d, sid, 'echo hi > a.txt');
    assertEq(r.exit_code, 0, 'exit code');
    assert(existsSync(wsHost(d, sid)), `no ws-${sid} under runtime_dir ${d.rt}; xdg holds ${JSON.stringify(names(join(d.dir, 'xdg')))}`);
    assert(existsSync(join(wsDaemon(d, sid), 'a.txt')), `no ws-${sid}/a.txt under runtime_dir ${d.rt} as the daemon sees it`);
    // Private: 0700 (a root daemon may add search-only for the user its sandboxes run as).
    const mode = statSync(d.rt).mode & 0o777;
    assert((mode & 0o066) === 0 && (mode & 0o700) === 0o700, `mode of runtime_dir is ${mode.toString(8)}`);
    assert(!existsSync(join(d.dir, 'xdg', 'drun')), 'a workspace went under XDG_RUNTIME_DIR');
  });
  await d.close();
}

// ---- idle from the end of the last call ----------------------------------------------------------
{
  const d = await daemon('idle', 'session_idle_timeout_secs = 2\nbash_timeout_ms = 120000\n');
  await R.run('the idle clock starts when a call ends, not when it starts', async () => {
    const sid = (await ok(d, 'create_session', {})).session_id;
    await bash(d, sid, 'true');
    const t0 = Date.now();
    const p = call(d, 'session_bash', { command: 'mkfifo hold && cat hold > /dev/null; rm -f hold; echo done', description: 'long', session_id: sid });
    const fifo = () => `${wsDaemon(d, sid)}/hold`;
    await until('the command to park on its FIFO', () => existsSync(fifo()));
    // Hold the call past the idle limit (2 s, compared in whole seconds: > 2 means 3 s).
    await until('the call to be older than the idle limit', () => Date.now() - t0 > 4500);
    await release(fifo());
    const r = await p;
    assert(!r.isError, `the long call failed: ${JSON.stringify(r.v).slice(0, 300)}`);
    const n = await call(d, 'session_bash', { command: 'echo next', description: 'next', session_id: sid });
    assert(!n.isError, `the call right after a ${Date.now() - t0} ms call was refused: ${JSON.stringify(n.v).slice(0, 300)}`);
  });
  await d.close();
}

// ---- limit_hit memory ------------------------------------------------------------------------------
{
  const d = await daemon('mem', 'sandbox_memory_mb = 512\n');
  const sid = (await ok(d, 'create_session', {})).session_id;
  for (const [what, cmd] of [
    ['python bytearray', `/usr/bin/python3 -c 'b = bytearray(2 << 30)'`],
    ['perl string', `perl -e '$x = "x" x (2 << 30)'`],
    ['head|sort buffer', `head -c 2147483648 /dev/zero | sort -S 2G > /dev/null`],
  ]) {
    await R.run(`a 2 GiB allocation over the memory limit says limit_hit "memory" (${what})`, async () => {
      const r = await bash(d, sid, cmd);
      assert(r.exit_code !== 0, `the allocation succeeded (exit 0) under sandbox_memory_mb = 512`);
      assertEq(r.limit_hit, 'memory', `limit_hit (exit ${r.exit_code}, stderr ${JSON.stringify(r.stderr_tail.slice(-200))})`);
    });
  }
  await R.run('a command that fails for another reason says limit_hit null', async () => {
    const r = await bash(d, sid, 'echo "no memory here" >&2; exit 3');
    assertEq([r.exit_code, r.limit_hit], [3, null], 'exit code and limit_hit');
  });
  await d.close();
}

// ---- unstorable names go on rollback -------------------------------------------------------------------
{
  const d = await daemon('unstorable', '');
  await R.run('session_rollback to 0 removes files drun cannot store, and says so', async () => {
    const sid = (await ok(d, 'create_session', {})).session_id;
    const r = await bash(d, sid, `echo ok > good.txt; mkdir sub; printf x > "$(printf 'a\\nb')"; printf y > "$(printf 'bad\\377')"; printf z > "sub/$(printf 'c\\001d')"; find . -mindepth 1 -printf x | wc -c`);
    assertEq(r.exit_code, 0, `exit code (${r.stderr_tail})`);
    assertEq(r.stdout_tail, '5\n', 'entries the command made');
    const rb = await ok(d, 'session_rollback', { session_id: sid, checkpoint_id: 0, description: 'back' });
    assertEq(rb.removed_unstorable, 3, `removed_unstorable in ${JSON.stringify(rb)}`);
    const n = await bash(d, sid, 'find . -mindepth 1 -printf x | wc -c');
    assertEq(n.stdout_tail, '0\n', 'entries the next command sees after rollback to 0');
  });
  await d.close();
}

// ---- the disk bound and the reset after a failed call -----------------------------------------------
{
  const d = await daemon('disk', 'max_workspace_mb = 64\nbash_timeout_ms = 120000\n');
  const sid = (await ok(d, 'create_session', {})).session_id;
  await bash(d, sid, 'echo head > kept.txt');
  const boundKiB = 64 * 1024 + 2 * 1024; // the bound plus 2 MiB of slack
  for (const [what, writer, hold] of [
    ['fallocate', 'for i in 1 2 3; do fallocate -l 300M f$i; done', 'hold1'],
    ['head -c', 'head -c 314572800 /dev/zero > big', 'hold2'],
    ['dd', 'dd if=/dev/zero of=big bs=1M count=300 status=none', 'hold3'],
  ]) {
    await R.run(`a command writing 300+ MiB with max_workspace_mb = 64 is bounded while it runs (${what})`, async () => {
      let maxD = 0, maxH = 0, done = false;
      const p = call(d, 'session_bash', { command: `${writer}; rc=$?; mkfifo ${hold}; cat ${hold}; exit $rc`, description: 'fill', session_id: sid });
      p.then(() => (done = true), () => (done = true));
      const poll = (async () => {
        while (!done) {
          maxD = Math.max(maxD, duKiB(wsDaemon(d, sid)));
          maxH = Math.max(maxH, duKiB(wsHost(d, sid)));
          await new Promise((r) => setTimeout(r, 10));
        }
      })();
      await until('the command to park on its FIFO', () => existsSync(`${wsDaemon(d, sid)}/${hold}`));
      const parkedD = duKiB(wsDaemon(d, sid)), parkedH = duKiB(wsHost(d, sid));
      maxD = Math.max(maxD, parkedD);
      maxH = Math.max(maxH, parkedH);
      await release(`${wsDaemon(d, sid)}/${hold}`);
      const r = await p;
      await poll;
      const after = names(wsDaemon(d, sid));
      const afterKiB = duKiB(wsDaemon(d, sid));
      console.log(`    ${what}: parked ${parkedD} KiB (host view ${parkedH}), peak ${maxD} KiB (host view ${maxH}), after the answer ${afterKiB} KiB ${JSON.stringify(after)}`);
      assert(r.isError, `the call succeeded: ${JSON.stringify(r.v).slice(0, 300)}`);
      assertEq(r.v.code, 'workspace_size_exceeded', `error code (${JSON.stringify(r.v).slice(0, 300)})`);
      assertEq(after, ['kept.txt'], 'the workspace right after the answer (back at the head)');
      assert(maxD <= boundKiB && maxH <= boundKiB, `the workspace held ${Math.max(maxD, maxH)} KiB while the command ran (bound ${boundKiB})`);
      assert(r.v.message.includes('space') || r.v.message.includes('exceeds'), `message: ${r.v.message}`);
    });
  }
  await R.run('after the overflows the session carries on at its head', async () => {
    const r = await bash(d, sid, 'ls; echo more > more.txt');
    assertEq(r.stdout_tail, 'kept.txt\n', 'what the next command sees');
  });
  await d.close();
}

// ---- small files count whole pages (and an inode each) against the limit on a tmpfs --------
{
  const d = await daemon('pages', 'max_workspace_mb = 8\n');
  await R.run('1,200 small files (6 MiB of pages and inodes, 12 KB of bytes) under max_workspace_mb = 8 reach the sandbox', async () => {
    const sid = (await ok(d, 'create_session', {})).session_id;
    const entries = [];
    for (let i = 0; i < 1200; i++) entries.push({ path: `d${i % 10}/f${i}.txt`, content: `file ${i}\n` });
    await ok(d, 'session_write_files', { entries, description: 'many', session_id: sid });
    const r = await bash(d, sid, 'find . -type f | wc -l; cat d7/f1197.txt');
    assertEq([r.exit_code, r.stdout_tail], [0, '1200\nfile 1197\n'], `what the command sees (${r.stderr_tail})`);
  });
  await R.run('3,000 small files (15 MiB of pages and inodes, 30 KB of bytes) over max_workspace_mb = 8 are refused when the workspace is size-capped', async () => {
    const sid = (await ok(d, 'create_session', {})).session_id;
    const entries = [];
    for (let i = 0; i < 3000; i++) entries.push({ path: `d${i % 10}/f${i}.txt`, content: `file ${i}\n` });
    const r = await call(d, 'session_write_files', { entries, description: 'many', session_id: sid });
    if (!r.isError) {
      // No size-capped workspace here (no mount namespace): only the bytes count.
      const b = await bash(d, sid, 'find . -type f | wc -l');
      assertEq(b.stdout_tail, '3000\n', 'what the command sees');
      return;
    }
    assertEq(r.v.code, 'workspace_size_exceeded', `error (${JSON.stringify(r.v).slice(0, 300)})`);
    assert(r.v.message.includes('pages'), `message: ${r.v.message}`);
  });
  await d.close();
}

// ---- a failed commit resets the workspace before the answer ----------------------------------------------
{
  const d = await daemon('reset', 'max_checkpoints = 4\nbash_timeout_ms = 3000\n');
  const sid = (await ok(d, 'create_session', {})).session_id;
  await bash(d, sid, 'echo head > kept.txt');
  const ws = () => names(wsDaemon(d, sid));

  await R.run('the write lock held by another process: the call fails and the workspace is at the head', async () => {
    const fifo = join(tmp, 'lockfifo');
    execFileSync('mkfifo', [fifo]);
    const marker = join(tmp, 'locked');
    const locker = spawn('sqlite3', [d.db, 'BEGIN EXCLUSIVE;', `.shell touch ${marker}`, `.shell cat ${fifo} > /dev/null`, 'ROLLBACK;'], { stdio: 'ignore' });
    const lexit = new Promise((res) => locker.on('exit', res));
    await until('sqlite3 to hold the lock', () => existsSync(marker));
    const r = await call(d, 'session_bash', { command: 'echo leaked > leak.txt', description: 'busy', session_id: sid });
    const after = ws();
    await release(fifo);
    await lexit;
    assert(r.isError, `the call succeeded under the lock: ${JSON.stringify(r.v).slice(0, 300)}`);
    assertEq(after, ['kept.txt'], `the workspace when the error (${r.v.code}) came`);
    const n = await bash(d, sid, 'ls');
    assertEq(n.stdout_tail, 'kept.txt\n', 'what the next command sees');
  });

  await R.run('a timeout: the workspace is at the head when the answer comes', async () => {
    const r = await call(d, 'session_bash', { command: 'echo leaked > leak.txt; exec sleep 600', description: 'slow', session_id: sid });
    assertEq(r.v.code, 'execution_timeout', 'error code');
    assertEq(ws(), ['kept.txt'], 'the workspace when the error came');
  });

  await R.run('the checkpoint limit refuses the commit: the workspace is at the head when the answer comes', async () => {
    let r;
    for (let i = 0; i < 6; i++) {
      r = await call(d, 'session_bash', { command: `echo ${i} > n${i}.txt`, description: 'fill', session_id: sid });
      if (r.isError) break;
    }
    assert(r.isError, 'the checkpoint limit never refused a commit');
    const after = ws();
    assert(!after.some((n) => !['kept.txt', 'n0.txt', 'n1.txt', 'n2.txt', 'n3.txt', 'n4.txt'].includes(n)), `odd entries ${after}`);
    const st = await ok(d, 'get_session_state', { session_id: sid, description: 'state' });
    assertEq(after.length, st.workspace_file_count, `the workspace (${after}) holds the head's files when the ${r.v.code} error came`);
  });
  await d.close();
}

R.done();
