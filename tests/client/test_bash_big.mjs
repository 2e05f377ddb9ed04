// test_bash_big.mjs - a big file a command writes reaches the store streamed (the rescan's
// ws_blobs.put_fd), against the real build/drun-mcp through the official SDK client.
//
// Covers: session_bash writes a 64 MiB file; the daemon's peak RSS (VmHWM in
// /proc/<pid>/status) grows far less than the file (a memory bound, not a timing one);
// the checkpoint records the file at its full size; a later call in the same session and a
// session_fork (whose workspace is synced from the store, streamed the other way) see the
// same SHA-256 inside the sandbox; the fork's first call is cold: a workspace over 16 MiB
// is not synced on the event loop just to prepare a sandbox (tools_bash_prewarm).
import { existsSync, readFileSync } from 'node:fs';
import { MCP, Results, assert, assertEq, requireSandbox, startDaemon } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
requireSandbox('test_bash_big');

const MIB = 1 << 20;
const BIG = 64 * MIB;
const BOUND = 16 * MIB;
const daemon = await startDaemon({
  name: 'drun-bash-big-test',
  config: 'bash_timeout_ms = 120000\n',
  env: { DRUN_SANDBOX_WARM: 'auto' },
  timeout: 180000,
});
const { client, pid, ok } = daemon;

const bash = (sid, command) => ok('session_bash', { command, description: 'big', session_id: sid });
// Peak resident memory of the daemon so far, in bytes.
function hwm() {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  assert(m, `no VmHWM in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}
const mib = (n) => `${(n / MIB).toFixed(1)} MiB`;

const sid = (await ok('create_session', {})).session_id;
let digest = '';

await R.run('a 64 MiB file written by a command is stored without holding it in memory', async () => {
  assert(Number.isInteger(pid) && existsSync(`/proc/${pid}/status`), `daemon pid ${pid}`);
  // Warm the paths first (a sandbox, a streamed 2 MiB file, its store row), so the peak
  // below measures what the size of the file adds, not first-use allocations.
  const w = await bash(sid, 'head -c 2097152 /dev/urandom > warm.bin && echo warm');
  assertEq([w.exit_code, w.stdout_tail], [0, 'warm\n'], 'warm-up call');
  const before = hwm();
  const r = await bash(sid, `head -c ${BIG} /dev/urandom > big.bin && sha256sum big.bin | cut -c1-64`);
  const after = hwm();
  assertEq(r.exit_code, 0, `exit code (stderr: ${r.stderr_tail})`);
  digest = r.stdout_tail.trim();
  assert(/^[0-9a-f]{64}$/.test(digest), `sha256sum printed ${JSON.stringify(r.stdout_tail)}`);
  console.log(`    VmHWM before ${mib(before)}, after ${mib(after)}: +${mib(after - before)} for a ${mib(BIG)} file`);
  assert(after - before < BOUND, `the daemon's peak RSS grew by ${mib(after - before)} (bound ${mib(BOUND)})`);
  const st = await ok('get_session_state', { session_id: sid, description: 'state' });
  assertEq(st.workspace_file_count, 2, 'files in the checkpoint');
});

await R.run('a later call sees the same bytes', async () => {
  const r = await bash(sid, 'sha256sum big.bin | cut -c1-64; stat -c %s big.bin');
  assertEq(r.stdout_tail, `${digest}\n${BIG}\n`, 'hash and size in the same session');
});

await R.run('a fork synced from the store sees the same bytes, cold (too big to prepare), memory still bounded', async () => {
  const before = hwm();
  const f = await ok('session_fork', { session_id: sid });
  assert(f.session_id && f.session_id !== sid, `fork answered ${JSON.stringify(f).slice(0, 200)}`);
  const r = await bash(f.session_id, 'sha256sum big.bin | cut -c1-64; stat -c %s big.bin');
  const after = hwm();
  assertEq(r.stdout_tail, `${digest}\n${BIG}\n`, 'hash and size in the fork (written from the store)');
  assertEq(r.warm, false, 'the fork\'s first call is cold: its 64 MiB tree was not synced just to prepare');
  console.log(`    fork: VmHWM +${mib(after - before)}`);
  assert(after - before < BOUND, `the daemon's peak RSS grew by ${mib(after - before)} on the fork`);
});

await client.close();
if (R.failed > 0 && daemon.stderr()) console.log(`    daemon stderr: ${daemon.stderr().slice(-500)}`);
R.done();
