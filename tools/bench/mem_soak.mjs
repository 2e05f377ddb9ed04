// mem_soak.mjs - is the daemon's memory flat? Drives build/drun-mcp over raw JSON-RPC
// (no SDK, so the client adds nothing per call) with a mix of calls on one session, and
// prints its RSS after a warm-up and every MEM_SOAK_STEP calls. Target: after warm-up,
// 50,000 mixed calls grow RSS by at most 1 MiB. Prints; asserts nothing.
//
//   node tools/bench/mem_soak.mjs [CALLS] [WARMUP]      (defaults 50000 and 5000)
//
// The mix, per 10 calls: 3 session_read_file, 1 session_write_files (one file
// overwritten, so each makes a checkpoint), 1 get_session_state, 1 session_list,
// 1 session_diff (the last write), 1 ping, 1 tools/list, 1 call that fails (a missing file).
// MEM_SOAK_MIX=bash|read|write|ping|list|state|diff|error|toolslist runs one kind only, to
// find which one grows.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const BUILD = process.env.DRUN_BUILD || join(resolve(here, '..', '..'), 'build');
const CALLS = Number(process.argv[2] || 50000);
const WARMUP = Number(process.argv[3] || 5000);
const STEP = Number(process.env.MEM_SOAK_STEP || 5000);
const tmp = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'drun-soak-'));
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));
const cfg = join(tmp, 'config.toml');
writeFileSync(cfg, '');
// MEM_SOAK_WRAP='heaptrack -o FILE' (or another wrapper) runs the daemon under it.
const wrap = (process.env.MEM_SOAK_WRAP || '').split(' ').filter(Boolean);
const p = spawn(wrap[0] || join(BUILD, 'drun-mcp'), [...(wrap.length ? [...wrap.slice(1), join(BUILD, 'drun-mcp')] : []), '--db', join(tmp, 's.db'), '--config', cfg], {
  stdio: ['pipe', 'pipe', 'ignore'],
  env: { ...process.env, XDG_RUNTIME_DIR: tmp },
});
const waiting = new Map();
let out = '';
p.stdout.on('data', (d) => {
  out += d;
  let i;
  while ((i = out.indexOf('\n')) >= 0) {
    const line = out.slice(0, i);
    out = out.slice(i + 1);
    if (!line.startsWith('{')) continue; // a wrapper's own output
    const m = JSON.parse(line);
    const w = waiting.get(m.id);
    if (w) {
      waiting.delete(m.id);
      w(m);
    }
  }
});
let id = 0;
const rpc = (method, params) => new Promise((res) => {
  const n = ++id;
  waiting.set(n, res);
  p.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: n, method, params }) + '\n');
});
const tool = async (name, args, expectError = false) => {
  const r = await rpc('tools/call', { name, arguments: args });
  if (!r.result || Boolean(r.result.isError) !== expectError) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
  return r.result;
};
await rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'mem-soak', version: '1' } });
p.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
let sid = JSON.parse((await tool('create_session', {})).content[0].text).session_id;
await tool('session_write_files', { session_id: sid, entries: Array.from({ length: 100 }, (_, i) => ({ path: `d/f${i}.txt`, content: `file ${i}\n`.repeat(20) })), description: 'seed' });

let writes = 0;
// Sessions hold at most 200 checkpoints: every 150 mutations the session is closed and a
// new one made (its file written first), so session creation and close are in the mix too.
async function rotate() {
  if (++writes % 150 !== 0) return;
  await tool('session_close', { session_id: sid });
  sid = JSON.parse((await tool('create_session', {})).content[0].text).session_id;
  await tool('session_write_files', { session_id: sid, entries: [{ path: 'd/f7.txt', content: 'new\n' }], description: 'soak' });
}
const kinds = {
  read: () => tool('session_read_file', { session_id: sid, path: 'd/f7.txt', description: 'soak' }),
  write: async (i) => {
    await rotate();
    return tool('session_write_files', { session_id: sid, entries: [{ path: 'd/f7.txt', content: `write ${i}\n` }], description: 'soak' });
  },
  state: () => tool('get_session_state', { session_id: sid, description: 'soak' }),
  list: () => tool('session_list', {}),
  diff: () => tool('session_diff', { session_id: sid, description: 'soak' }),
  ping: () => rpc('ping', {}),
  bash: async () => (await rotate(), tool('session_bash', { session_id: sid, command: 'echo hi > d/b.txt; wc -c < d/f7.txt', description: 'soak' })),
  toolslist: () => rpc('tools/list', {}),
  error: () => tool('session_read_file', { session_id: sid, path: 'd/missing.txt', description: 'soak' }, true),
};
const MIX = ['read', 'write', 'read', 'state', 'list', 'read', 'diff', 'ping', 'toolslist', 'error'];
const only = process.env.MEM_SOAK_MIX;
const rss = () => { try { return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))[1]) * 1024; } catch { return 0; } };
const mib = (b) => (b / 1048576).toFixed(2);
let done = 0;
async function run(n) {
  for (let k = 0; k < n; k++, done++) await kinds[only || MIX[done % MIX.length]](done);
}
const r0 = rss();
await run(WARMUP);
const base = rss();
const t0 = Date.now();
const marks = [];
for (let left = CALLS; left > 0; left -= STEP) {
  await run(Math.min(STEP, left));
  marks.push(`${done - WARMUP}:${mib(rss())}`);
}
const end = rss();
console.log(`mem_soak: ${CALLS} calls (${only || 'mixed'}) after ${WARMUP} warm-up calls, ${((Date.now() - t0) / CALLS).toFixed(2)} ms per call`);
console.log(`  RSS at start ${mib(r0)} MiB, after warm-up ${mib(base)} MiB, at the end ${mib(end)} MiB`);
console.log(`  growth after warm-up ${mib(end - base)} MiB (target <= 1 MiB); ${((end - base) / 1024 / (CALLS / 1000)).toFixed(1)} KiB per 1,000 calls`);
console.log(`  RSS (MiB) by calls after warm-up: ${marks.join(' ')}`);
p.stdin.end();
