// bash_ab.mjs - session_bash of `echo hi` on a 100-file session, cold and warm, for two
// builds at once, calls interleaved (A cold, B cold, A warm, B warm, ...), so both see the
// same load. Prints per-call p50s and B/A ratios.
//   node tools/bench/bash_ab.mjs BUILD_A BUILD_B [N]
import { chmodSync, mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RawServer } from '../../tests/client/lib.mjs';

const [A, B] = [process.argv[2], process.argv[3]];
const N = Number(process.argv[4] || 40);
const tmp = mkdtempSync(join(tmpdir(), 'drun-bash-ab-'));
chmodSync(tmp, 0o711); // a root daemon's sandbox user passes through to its workspaces
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));
let id = 0;
async function daemon(build, name, warm) {
  mkdirSync(join(tmp, name), { mode: 0o711 });
  const srv = new RawServer(join(build, 'drun-mcp'), ['--db', join(tmp, `${name}.db`)],
    { XDG_RUNTIME_DIR: join(tmp, name), DRUN_SANDBOX_WARM: warm });
  await srv.initialize();
  const call = async (n, a) => JSON.parse((await srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: n, arguments: a } })).result.content[0].text);
  const sid = (await call('create_session', {})).session_id;
  await call('session_bash', { command: 'for i in $(seq 100); do echo "file $i" > f$i.txt; done', description: 'b', session_id: sid });
  return { srv, bash: () => call('session_bash', { command: 'echo hi', description: 'b', session_id: sid }) };
}
const d = {
  ac: await daemon(A, 'ac', 'off'), bc: await daemon(B, 'bc', 'off'),
  aw: await daemon(A, 'aw', 'auto'), bw: await daemon(B, 'bw', 'auto'),
};
const t = { ac: [], bc: [], aw: [], bw: [] };
const pause = () => new Promise((r) => setTimeout(r, 40)); // let the next sandbox be prepared
for (let i = 0; i < N; i++) {
  for (const k of i % 2 ? ['bc', 'ac', 'bw', 'aw'] : ['ac', 'bc', 'aw', 'bw']) {
    const s = performance.now();
    const r = await d[k].bash();
    t[k].push(performance.now() - s);
    if (r.stdout_tail !== 'hi\n') throw new Error(`${k}: ${JSON.stringify(r)}`);
    if (k.endsWith('w')) await pause();
  }
}
const p50 = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
const f = (x) => x.toFixed(2);
console.log(`bash_ab: ${N} interleaved rounds, per-call p50 in ms`);
console.log(`  cold: A ${f(p50(t.ac))}  B ${f(p50(t.bc))}  B/A ${f(p50(t.bc) / p50(t.ac))}`);
console.log(`  warm: A ${f(p50(t.aw))}  B ${f(p50(t.bw))}  B/A ${f(p50(t.bw) / p50(t.aw))}`);
for (const k of Object.keys(d)) d[k].srv.endInput();
await Promise.all(Object.values(d).map((x) => x.srv.exit()));
