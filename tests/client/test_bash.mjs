// test_bash.mjs - session_bash through the official MCP SDK client, against the real
// build/drun-mcp, a temp DB and the real bubblewrap sandbox.
//
// Covers exit codes, stdout/stderr capture and the inline tails, files created /
// modified / deleted / chmod +x / symlinked / empty dirs becoming the checkpoint's delta,
// the timeout and cancel paths (no checkpoint, and the next command does not see the
// killed command's partial writes), progress notifications, command_denied, a long
// command, 100 MiB of output, invalid UTF-8, the busy rule and concurrency across
// sessions. The long-running commands wait on a gate file the test creates in a
// read-only mount_allowlist directory, so nothing here depends on timing.
import { chmodSync, mkdirSync, readdirSync, writeFileSync, utimesSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp, sqlite, waitFor } from './lib.mjs';

// Without DRUN_SANDBOX_WARM the whole file runs twice: every command cold, then every
// command in a prepared sandbox (warm), as the security suites do.
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
      console.log(`FAIL [${mode}] test_bash exited ${r.status}: ${(r.stderr || '').slice(-300)}`);
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
} catch (e) {
  console.log('skip test_bash: bwrap cannot create a sandbox here (run drun-mcp doctor)');
  console.log('0 passed, 0 failed');
  process.exit(77);
}

const tmp = makeTmp();
// A root daemon's sandbox user must reach the allowlisted gates directory (and the
// workspaces): paths it cannot reach are left out of the sandbox.
chmodSync(tmp, 0o711);
const db = join(tmp, 'bash.db');
const cfg = join(tmp, 'config.toml');
const gates = join(tmp, 'gates');
mkdirSync(gates);
let cfgAge = 0;
function writeConfig(extra) {
  writeFileSync(cfg, `mount_allowlist = ["${gates}"]\nbash_command_denylist = ["forbidden_tool"]\n${extra}\n`);
  // The policy reloads on a stat change: move the mtime forward each time.
  cfgAge += 10;
  const t = new Date(Date.now() + cfgAge * 1000);
  utimesSync(cfg, t, t);
}
writeConfig('bash_timeout_ms = 60000');

const transport = new StdioClientTransport({
  command: MCP,
  args: ['--db', db, '--config', cfg],
  env: { ...process.env, DRUN_TEST_CANARY: 'canary-7f3a' },
  stderr: 'pipe',
});
let stderr = '';
transport.stderr?.on('data', (d) => (stderr += d));
const client = new Client({ name: 'drun-bash-test', version: '1.0' });
await client.connect(transport);

const TIMEOUT = { timeout: 120000 };
async function call(name, args, opts = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, { ...TIMEOUT, ...opts });
  const text = r.content?.[0]?.text;
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { isError: !!r.isError, body, raw: r };
}
async function ok(name, args, opts) {
  const r = await call(name, args, opts);
  assert(!r.isError, `${name} failed: ${JSON.stringify(r.body).slice(0, 300)}`);
  return r.body;
}
const bash = (command, extra = {}, opts) => ok('session_bash', { command, description: 'test', ...extra }, opts);
const history = async (sid) => ok('session_history', { description: 'h', ...(sid ? { session_id: sid } : {}) });
const histLen = async (sid) => {
  const h = await history(sid);
  return (Array.isArray(h) ? h : h.checkpoints).length;
};
// Waits until a session answers (it is busy while a cancelled command is being cleaned up).
async function idle(sid) {
  let body;
  await waitFor(async () => {
    const r = await call('get_session_state', { description: 's', session_id: sid });
    if (!r.isError) body = r.body;
    else if (r.body.code !== 'session_busy') throw new Error(`get_session_state: ${JSON.stringify(r.body)}`);
    return !r.isError;
  }, `session ${sid} to be idle`);
  return body;
}
async function readFile(path) {
  const r = await call('session_read_file', { path, description: 'r' });
  assert(!r.isError, `session_read_file ${path}: ${JSON.stringify(r.body)}`);
  const t = r.raw.content[0].text;
  try {
    const o = JSON.parse(t);
    if (o && typeof o === 'object' && 'content' in o) return o.content;
  } catch {}
  return t;
}
const gate = (name) => join(gates, name);
const waitGate = (name) => `while [ ! -e '${gate(name)}' ]; do sleep 0.05; done`;

const A = (await ok('create_session', {})).session_id;

await R.run('exit codes and output capture', async () => {
  let r = await bash('echo hello; echo oops >&2');
  assertEq(r.exit_code, 0, 'exit code');
  assertEq(r.stdout_tail, 'hello\n', 'stdout_tail');
  assertEq(r.stderr_tail, 'oops\n', 'stderr_tail');
  assertEq(r.stdout_bytes, 6, 'stdout_bytes');
  assertEq(r.stderr_bytes, 5, 'stderr_bytes');
  assertEq(r.limit_hit, null, 'limit_hit');
  assertEq([r.stdout_truncated, r.stderr_truncated], [false, false], 'truncated flags');
  assert(Number.isInteger(r.duration_ms) && r.duration_ms >= 0, 'duration_ms');
  r = await bash('exit 7');
  assertEq(r.exit_code, 7, 'exit 7');
  r = await bash('false');
  assertEq(r.exit_code, 1, 'false');
  r = await bash('kill -9 $$');
  assertEq(r.exit_code, 137, 'killed by signal 9');
  r = await bash('pwd; echo "$HOME" "$TMPDIR"; echo "$PYTHONPATH"; echo "$NODE_PATH"');
  const lines = r.stdout_tail.split('\n');
  assertEq(lines[0], '/workspace', 'working directory');
  assert(lines[1].startsWith('/tmp'), `HOME/TMPDIR under /tmp: ${lines[1]}`);
  assertEq(lines[2], '/workspace/.packages/pip', 'PYTHONPATH');
  assertEq(lines[3], '/workspace/.packages/npm/node_modules', 'NODE_PATH');
});

await R.run('sh -c semantics: the status of the last command, multi-line scripts', async () => {
  const r = await bash('false\nx=41\necho $((x+1))\n');
  assertEq([r.exit_code, r.stdout_tail], [0, '42\n'], 'result');
});

await R.run('full output readable with checkpoint_read_stdstreams', async () => {
  const r = await bash('seq 1 5000');
  const s = await ok('checkpoint_read_stdstreams', { description: 'r', checkpoint_id: r.checkpoint_id, stream: 'stdout' });
  const text = s.content ?? s.stdout ?? JSON.stringify(s);
  assert(text.startsWith('1\n2\n') && text.includes('\n5000\n'), 'full stdout stored');
  assert(r.stdout_tail.length <= 2048 && r.stdout_tail.endsWith('5000\n'), 'tail is the last 2 KiB');
});

let files;
await R.run('created files become the checkpoint delta', async () => {
  const before = await histLen();
  const r = await bash('echo a > a.txt; echo b > b.txt; mkdir -p d/e; echo c > d/c.txt; mkdir empty');
  // Three files and two empty directories (d/e, empty) are entries of the manifest.
  assertEq([r.files_added_count, r.files_modified_count, r.files_removed_count], [5, 0, 0], 'added/modified/removed');
  assertEq(await histLen(), before + 1, 'one checkpoint');
  files = r.workspace_file_count;
  assertEq(await readFile('d/c.txt'), 'c\n', 'content');
});

await R.run('modified, deleted, chmod +x and symlinked', async () => {
  const r = await bash('echo a2 > a.txt; rm b.txt; chmod +x d/c.txt; ln -s a.txt link');
  assertEq(r.files_removed_count, 1, 'removed');
  assert(r.files_added_count >= 1, `a link was added: ${JSON.stringify(r)}`);
  assert(r.files_modified_count >= 1, 'a.txt modified');
  assertEq(await readFile('a.txt'), 'a2\n', 'new content');
  // A fork materializes a fresh directory from the store: the mode and the link survived.
  const fork = await ok('session_fork', {});
  const r2 = await bash('test -x d/c.txt && echo exec; readlink link; test -d empty && echo empty; test -e b.txt || echo gone');
  assertEq(r2.stdout_tail, 'exec\na.txt\nempty\ngone\n', 'stored exec bit, link, empty dir, removal');
  await ok('session_switch', { session_id: A });
  await ok('session_close', { session_id: fork.session_id });
});

await R.run('command_denied: nothing runs, no checkpoint', async () => {
  const before = await histLen();
  const r = await call('session_bash', { command: 'touch denied.txt; forbidden_tool --x', description: 'd' });
  assert(r.isError && r.body.code === 'command_denied', `got ${JSON.stringify(r.body)}`);
  assert(r.body.message.includes('forbidden_tool'), 'names the pattern');
  assertEq(await histLen(), before, 'no checkpoint');
  const l = await bash('ls');
  assert(!l.stdout_tail.includes('denied.txt'), 'the command did not run');
});

await R.run('empty and missing arguments are refused', async () => {
  let r = await call('session_bash', { command: '  ', description: 'x' });
  assert(r.isError && r.body.code === 'invalid_arguments', `empty: ${JSON.stringify(r.body)}`);
  r = await call('session_bash', { command: 'true' });
  assert(r.isError, 'description is required');
});

await R.run('a 200 KiB command runs (passed on a file, not argv)', async () => {
  const big = `x='${'y'.repeat(200 * 1024)}'\necho \${#x}`;
  const r = await bash(big);
  assertEq([r.exit_code, r.stdout_tail], [0, `${200 * 1024}\n`], 'result');
});

await R.run('a command past 1 MiB is refused with the limit', async () => {
  const r = await call('session_bash', { command: '#'.repeat((1 << 20) + 1), description: 'big' });
  assert(r.isError && r.body.code === 'invalid_arguments', `got ${JSON.stringify(r.body).slice(0, 200)}`);
  assertEq(r.body.detail.limit_bytes, 1 << 20, 'detail.limit_bytes');
  const ok1 = await bash('#'.repeat(1 << 20));
  assertEq(ok1.exit_code, 0, 'exactly 1 MiB runs');
});

await R.run('100 MiB of output: capped at 16 MiB, counted, flagged, no hang', async () => {
  const r = await bash("head -c 104857600 /dev/zero | tr '\\0' 'x'; echo; echo done >&2");
  assertEq(r.stdout_truncated, true, 'stdout_truncated');
  assertEq(r.stdout_bytes, 16 << 20, 'stored bytes');
  assertEq(r.stdout_total_bytes, 104857601, 'counted bytes');
  assertEq(r.limit_hit, 'output', 'limit_hit');
  assertEq(r.stderr_tail, 'done\n', 'stderr still captured');
  assert(/^x+\n$/.test(r.stdout_tail) && r.stdout_tail.length === 2048, 'tail of the stream');
});

await R.run('binary and invalid UTF-8 output keeps the JSON valid', async () => {
  const r = await bash("printf 'ok\\377\\376\\000end\\342\\202'");
  assertEq(r.stdout_bytes, 10, 'bytes stored as they were');
  assertEq(r.stdout_tail, 'ok\ufffd\ufffd\ufffdend\ufffd\ufffd', 'lossy tail');
});

await R.run('progress notifications: the latest line, increasing, throttled', async () => {
  // Each line waits until the client has seen the previous one as a notification (a gate
  // file), then at least 150 ms more (past the 100 ms throttle): three notifications on
  // any machine, however slow.
  const seen = [];
  const r = await bash(`echo line1; ${waitGate('p1')}; sleep 0.15; echo line2; ${waitGate('p2')}; sleep 0.15; echo line3`, {}, {
    onprogress: (p) => {
      seen.push(p);
      const m = /^line([12])$/.exec(p.message);
      if (m) writeFileSync(gate(`p${m[1]}`), '');
    },
    resetTimeoutOnProgress: true,
  });
  assertEq(r.exit_code, 0, 'exit');
  assertEq(seen.map((p) => p.message), ['line1', 'line2', 'line3'], 'one notification per line');
  for (let i = 1; i < seen.length; i++) assert(seen[i].progress > seen[i - 1].progress, 'strictly increasing');
  const flood = [];
  const r2 = await bash('seq 1 2000000', {}, { onprogress: (p) => flood.push(p) });
  assert(flood.length >= 1 && flood.length <= r2.duration_ms / 100 + 3,
    `${flood.length} notifications in ${r2.duration_ms} ms (at most ~10 a second)`);
});

await R.run('a silent command sends a heartbeat with its elapsed time before it ends', async () => {
  // The command blocks on a FIFO in its workspace; the test opens the FIFO from the host
  // only after a heartbeat came, so the beat cannot have been caused by output or exit.
  const name = `hb-${process.pid}-${Date.now()}`;
  const rt = (await ok('get_config', {})).runtime_dir;
  const sid = (await ok('get_session_state', { description: 'sid' })).session_id;
  // The workspace is ws-<sid> under runtime_dir, directly or in the daemon's own
  // directory, as the daemon sees it (its own mount namespace holds the workspace tmpfs).
  const top = `/proc/${transport.pid}/root${rt}`;
  const fifoPath = () => {
    const direct = join(top, `ws-${sid}`, name);
    if (existsSync(direct)) return direct;
    let subs = [];
    try {
      subs = readdirSync(top);
    } catch {}
    for (const sub of subs) {
      const p = join(top, sub, `ws-${sid}`, name);
      if (existsSync(p)) return p;
    }
    return '';
  };
  const beats = [];
  let onBeat;
  const beat = new Promise((res) => (onBeat = res));
  const run = bash(`mkfifo ${name} && cat ${name}`, {}, {
    onprogress: (p) => {
      beats.push(p);
      onBeat();
    },
    resetTimeoutOnProgress: true,
  });
  let ended = false;
  run.then(() => (ended = true), () => (ended = true));
  let guard;
  const first = await Promise.race([beat.then(() => 'beat'), run.then(() => 'ended'),
    new Promise((res) => (guard = setTimeout(() => res('no heartbeat within 60 s'), 60000)))]);
  clearTimeout(guard);
  assertEq(first, 'beat', 'a heartbeat came while the command was blocked');
  assert(!ended, 'the command was still running');
  assert(/^running for \d+ s, no output yet$/.test(beats[0].message), `message ${JSON.stringify(beats[0])}`);
  assert(typeof beats[0].progress === 'number' && beats[0].progress > 0, 'progress is the elapsed time');
  // Release: find the FIFO under the runtime dir and write a line into it.
  let fifo = '';
  for (let i = 0; i < 600 && !fifo; i++) {
    fifo = fifoPath();
    if (!fifo) await new Promise((res) => setTimeout(res, 100));
  }
  assert(fifo, `the FIFO ${name} is not under ${rt}`);
  // A bounded writer, so a command that already ended cannot hang the test here.
  const w = spawnSync('timeout', ['60', 'sh', '-c', 'echo released > "$1"', 'sh', fifo]);
  assertEq(w.status, 0, 'wrote the FIFO');
  const r = await run;
  assertEq([r.exit_code, r.stdout_tail], [0, 'released\n'], 'the command ends once released');
  for (let i = 1; i < beats.length; i++) assert(beats[i].progress > beats[i - 1].progress, 'strictly increasing');
});

await R.run('timeout: execution_timeout, no checkpoint, partial writes do not leak', async () => {
  await bash('echo keep > kept.txt');
  writeConfig('bash_timeout_ms = 1500');
  const before = await histLen();
  const r = await call('session_bash', { command: 'echo partial > leak.txt; echo x >> kept.txt; rm a.txt; sleep 60', description: 't' });
  assert(r.isError && r.body.code === 'execution_timeout', `got ${JSON.stringify(r.body)}`);
  assertEq(r.body.detail, { timeout_ms: 1500 }, 'detail');
  assert(r.body.message.includes('1500ms'), 'message names the timeout');
  assertEq(await histLen(), before, 'no checkpoint');
  writeConfig('bash_timeout_ms = 60000');
  const n = await bash('ls; cat kept.txt');
  assertEq(n.files_added_count + n.files_modified_count + n.files_removed_count, 0, 'next checkpoint has no delta');
  assert(!n.stdout_tail.includes('leak.txt'), 'the partial file is gone');
  assert(n.stdout_tail.includes('a.txt'), 'the deleted file is back');
  assert(n.stdout_tail.endsWith('keep\n'), 'the modified file is restored');
  const rows = sqlite(db, "select outcome, error_code from audit where tool='session_bash' order by rowid desc limit 2");
  assertEq(rows[1], { outcome: 'error', error_code: 'execution_timeout' }, 'audited');
});

await R.run('cancel (AbortSignal): killed, no checkpoint, workspace reset', async () => {
  const before = await histLen();
  const ac = new AbortController();
  let rejected = null;
  const p = call('session_bash', { command: 'echo partial > cancelled.txt; echo started; sleep 60', description: 'c' }, {
    signal: ac.signal,
    onprogress: (n) => {
      if (n.message === 'started') ac.abort('test');
    },
  }).catch((e) => (rejected = e));
  await p;
  assert(rejected !== null, 'the call was rejected by the abort');
  await idle(A);
  assertEq(await histLen(), before, 'no checkpoint');
  const n = await bash('ls');
  assert(!n.stdout_tail.includes('cancelled.txt'), 'the partial file is gone');
  assertEq(n.files_added_count, 0, 'no delta');
  const rows = sqlite(db, "select outcome from audit where tool='session_bash' order by rowid desc limit 2");
  assertEq(rows[1].outcome, 'cancelled', 'audited as cancelled');
});

await R.run('busy session answers session_busy; other sessions are not blocked', async () => {
  const B = (await ok('create_session', {})).session_id;
  await ok('session_switch', { session_id: A });
  let doneA = false;
  const long = bash(`echo start; ${waitGate('g1')}; echo end`, { session_id: A }).then((r) => {
    doneA = true;
    return r;
  });
  // Wait until A's command is running (its session answers busy).
  await waitFor(async () => {
    const r = await call('get_session_state', { description: 's', session_id: A });
    return r.isError && r.body.code === 'session_busy';
  }, 'session A to be busy');
  const busy = await call('session_bash', { command: 'true', description: 'b', session_id: A });
  assert(busy.isError && busy.body.code === 'session_busy', `second call: ${JSON.stringify(busy.body)}`);
  const rb = await bash('echo from-b > b.txt; cat b.txt', { session_id: B });
  assertEq(rb.stdout_tail, 'from-b\n', 'B ran');
  await ok('get_session_state', { description: 's', session_id: B });
  assert(!doneA, 'B answered while A was still running');
  writeFileSync(gate('g1'), '');
  const ra = await long;
  assertEq(ra.stdout_tail, 'start\nend\n', 'A finished after the gate opened');
});

await R.run('two sessions run commands at the same time', async () => {
  const B = (await ok('create_session', {})).session_id;
  const pa = bash(`${waitGate('g2')}; echo a`, { session_id: A });
  const pb = bash(`touch '${gate('never')}' 2>/dev/null; echo b; `, { session_id: B });
  const rb = await pb;
  assertEq(rb.stdout_tail, 'b\n', 'B');
  writeFileSync(gate('g2'), '');
  assertEq((await pa).stdout_tail, 'a\n', 'A');
  assert(!existsSync(gate('never')), 'the allowlisted directory is read-only inside');
});

await R.run('a command that grows the workspace past max_workspace_mb: nothing kept, the cause named', async () => {
  const S = (await ok('create_session', {})).session_id;
  const before = await histLen(S);
  writeConfig('bash_timeout_ms = 60000\nmax_workspace_mb = 1');
  try {
    const r = await call('session_bash', { command: 'head -c 1048577 /dev/zero > big.bin', description: 'over', session_id: S });
    assert(r.isError, `expected an error, got ${JSON.stringify(r.body).slice(0, 200)}`);
    assertEq(r.body.code, 'workspace_size_exceeded', 'code');
    assert(/exceeds limit of 1048576 bytes \(.*big\.bin.*\); the command's changes were not kept/.test(r.body.message),
      `message names the limit and the file: ${r.body.message}`);
    assertEq(await histLen(S), before, 'no checkpoint');
  } finally {
    writeConfig('bash_timeout_ms = 60000');
  }
  const r2 = await bash('ls', { session_id: S });
  assertEq(r2.stdout_tail, '', 'the over-limit file was not kept');
});

await R.run('the session survives: the server is still alive and correct', async () => {
  const r = await bash('echo alive');
  assertEq(r.stdout_tail, 'alive\n', 'alive');
  const s = await ok('get_session_state', { description: 's' });
  assertEq(s.checkpoint_id, r.checkpoint_id, 'head');
});

await client.close();
if (R.failed) console.log(`stderr tail: ${stderr.slice(-800)}`);
R.done();
