// bound_bench.mjs - what the size-capped workspace mounts cost session_bash, in one run.
//
// Four drun-mcp from the same build: warm and cold (DRUN_SANDBOX_WARM=auto/off), each with
// the workspace bound on (the default) and off (DRUN_WORKSPACE_BOUND=off, the workspace a
// plain directory as before the bound). One 100-file session each; N interleaved rounds of
// `echo hi` on all four. Prints the p50 of each and the ratio bound/unbound (target: within
// 5 %). Ratios only; nothing asserts on speed.
//   DRUN_BUILD=build node tools/bench/bound_bench.mjs [N]
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RawServer, BUILD } from '../../tests/client/lib.mjs';

const N = Math.max(3, Number(process.argv[2] || 40));
const tmp = mkdtempSync(join(tmpdir(), 'drun-bound-bench-'));
let id = 0;
function daemon(name, env) {
  mkdirSync(join(tmp, name), { mode: 0o700 });
  return new RawServer(join(BUILD, 'drun-mcp'), ['--db', join(tmp, `${name}.db`), '-vv'], { XDG_RUNTIME_DIR: join(tmp, name), ...env });
}
async function tool(s, name, args) {
  const r = await s.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
  if (!r.result || r.result.isError) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
  return JSON.parse(r.result.content[0].text);
}
const kinds = [
  ['warm, bound', { DRUN_SANDBOX_WARM: 'auto' }],
  ['warm, unbound', { DRUN_SANDBOX_WARM: 'auto', DRUN_WORKSPACE_BOUND: 'off' }],
  ['cold, bound', { DRUN_SANDBOX_WARM: 'off' }],
  ['cold, unbound', { DRUN_SANDBOX_WARM: 'off', DRUN_WORKSPACE_BOUND: 'off' }],
];
const runs = [];
for (const [k, env] of kinds) {
  const s = daemon(k.replace(/[^a-z]/g, ''), env);
  await s.initialize();
  const sid = (await tool(s, 'create_session', {})).session_id;
  await tool(s, 'session_bash', { command: 'for i in $(seq 100); do echo "file $i" > f$i.txt; done', description: 'b', session_id: sid });
  runs.push({ k, s, sid, t: [] });
}
const now = () => Number(process.hrtime.bigint()) / 1e6;
for (let i = 0; i < N; i++) {
  for (const r of i % 2 ? runs : [...runs].reverse()) {
    const t = now();
    const res = await tool(r.s, 'session_bash', { command: 'echo hi', description: 'b', session_id: r.sid });
    r.t.push(now() - t);
    if (res.stdout_tail !== 'hi\n') throw new Error('wrong output');
    await new Promise((ok) => setTimeout(ok, 40)); // the warm daemons prepare the next sandbox
  }
}
const p50 = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const m = Object.fromEntries(runs.map((r) => [r.k, p50(r.t)]));
console.log(`bound_bench: ${N} interleaved rounds, session_bash p50 in ms`);
for (const w of ['warm', 'cold']) {
  const b = m[`${w}, bound`], u = m[`${w}, unbound`];
  console.log(`  ${w}: bound ${b.toFixed(2)}  unbound ${u.toFixed(2)}  ratio ${(b / u).toFixed(3)} (target <= 1.05)`);
}
// The daemons' own split of each call (-vv): sync, spawn, run, commit.
for (const r of runs) {
  const ph = { sync: [], spawn: [], run: [], commit: [] };
  for (const m of r.s.stderr.matchAll(/session_bash timing: \S+ warm \d sync (\d+) spawn (\d+) run (\d+) commit (\d+)/g)) {
    ph.sync.push(+m[1]); ph.spawn.push(+m[2]); ph.run.push(+m[3]); ph.commit.push(+m[4]);
  }
  console.log(`  ${r.k}: ` + Object.entries(ph).map(([k, v]) => `${k} ${(p50(v.slice(-N)) / 1000).toFixed(2)}`).join(', ') + ' ms');
}
for (const r of runs) {
  r.s.endInput();
  await r.s.exit();
}
rmSync(tmp, { recursive: true, force: true });
