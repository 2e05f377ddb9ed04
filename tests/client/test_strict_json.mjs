// test_strict_json.mjs - the protocol edge, byte for byte: text that is not JSON by RFC 8259,
// values drun cannot carry, ids and progress tokens that must come back exactly, signals
// mid-call, and back-pressure from a client that stops reading.
//
// Each case is one that the daemon once got wrong: a lenient parse changed what a request
// meant (an invalid escape cut a host path short), served text that is not JSON, changed a
// large id or token, or lost a request. After each one the daemon must still answer ping.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MCP_TESTING, RawServer, Results, assert, assertEq, makeTmp, requireBinaries } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
let dbn = 0;
const db = () => join(tmp, `strict${dbn++}.db`);
const allowed = join(tmp, 'A');
mkdirSync(allowed);
const cfg = join(tmp, 'config.toml');
writeFileSync(cfg, `mount_allowlist = [${JSON.stringify(allowed)}]\n`);

function errOf(m, code, idWanted, what) {
  assert(m && m.error, `${what}: expected an error, got ${JSON.stringify(m)}`);
  assertEq(m.error.code, code, `${what}: error code`);
  assert(typeof m.error.message === 'string' && m.error.message.length > 0, `${what}: no message`);
  assertEq(m.id, idWanted, `${what}: id`);
}
function toolErr(m, code, what) {
  assert(m && m.result && m.result.isError === true, `${what}: expected a tool error result, got ${JSON.stringify(m)}`);
  const e = JSON.parse(m.result.content[0].text);
  assertEq(e.code, code, `${what}: tool error code`);
  assert(typeof e.message === 'string' && e.message.length > 0, `${what}: message`);
  return e;
}

const s = new RawServer(MCP_TESTING, ['--db', db(), '--config', cfg, '-v']);
await s.initialize();

// Each line here is not JSON; each gets exactly one -32700 with id null.
const notJson = [
  ['an invalid escape in a host path', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_from_host","arguments":{"path":"' + allowed + '/victim\\uqqqq.bak"}}}'],
  ['an invalid escape in a command', '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session_bash","arguments":{"command":"echo safe\\uqqqq; rm -rf x"}}}'],
  ['\\u12zz', '{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"secret\\u12zzhidden"}}'],
  ['an invalid escape in file content', '{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"session_write_files","arguments":{"description":"d","entries":[{"path":"f","content":"secret\\uzzzzhidden"}]}}}'],
  ['\\q', '{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"a\\qb"}}'],
  ['two objects on one line', '{"jsonrpc":"2.0","id":5,"method":"ping"}{"jsonrpc":"2.0","id":6,"method":"ping"}'],
  ['trailing text', '{"jsonrpc":"2.0","id":7,"method":"ping"}xyz'],
  ['a leading zero in the id', '{"jsonrpc":"2.0","id":01,"method":"ping"}'],
  ['a raw tab in a string', '{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":"a\tb"}}'],
  ['a trailing comma', '{"jsonrpc":"2.0","id":9,"method":"ping",}'],
  ['single quotes', "{'jsonrpc':'2.0','id':10,'method':'ping'}"],
  ['a plus sign', '{"jsonrpc":"2.0","id":+11,"method":"ping"}'],
];
await R.run('text that is not RFC 8259 JSON gets -32700 with id null', async () => {
  writeFileSync(join(allowed, 'victim'), 'keep me');
  for (const [what, line] of notJson) {
    s.write(line + '\n');
    const m = await s.next(what);
    errOf(m.msg, -32700, null, what);
    assert(/parse error/.test(m.msg.error.message), `${what}: message ${m.msg.error.message}`);
  }
  await s.alive('after-notjson');
  assert(existsSync(join(allowed, 'victim')), 'the host file named by a cut path was deleted');
});
await R.run('a raw NUL byte inside a string gets -32700', async () => {
  s.write(Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":12,"method":"ping","params":{"x":"a'), Buffer.from([0]), Buffer.from('b"}}\n')]));
  const m = await s.next('raw NUL');
  errOf(m.msg, -32700, null, 'raw NUL');
  assert(/NUL/.test(m.msg.error.message), m.msg.error.message);
  await s.alive('after-nul');
});
await R.run('a byte order mark before a valid request gets -32700 naming it', async () => {
  s.write(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"jsonrpc":"2.0","id":13,"method":"ping"}\n')]));
  const m = await s.next('BOM');
  errOf(m.msg, -32700, null, 'BOM');
  assert(/byte order mark/.test(m.msg.error.message), m.msg.error.message);
});
await R.run('a lone surrogate gets an error with the request\'s own id', async () => {
  s.write('{"jsonrpc":"2.0","id":"ls1","method":"ping","params":{"x":"\\ud800x"}}\n');
  const m = (await s.next('lone surrogate')).msg;
  errOf(m, -32602, 'ls1', 'lone surrogate');
  assert(/surrogate/.test(m.error.message), m.error.message);
  s.write('{"jsonrpc":"2.0","id":14,"method":"ping","params":{"x":"\\udc00"}}\n');
  errOf((await s.next('lone low surrogate')).msg, -32602, 14, 'lone low surrogate');
  s.write('{"jsonrpc":"2.0","id":15,"method":"ping","params":{"x":"\\u0000"}}\n');
  errOf((await s.next('NUL escape in params')).msg, -32602, 15, 'NUL escape');
  await s.alive('after-surrogate');
});
await R.run('a surrogate pair is one character, carried', async () => {
  s.write('{"jsonrpc":"2.0","id":"sp","method":"tools/call","params":{"name":"testing_echo","arguments":{"text":"\\ud83d\\ude00"}}}\n');
  const m = (await s.next('pair')).msg;
  assertEq(m.result.structuredContent.text, '😀', 'text');
});
await R.run('what drun cannot carry inside tool arguments is a tool error (isError)', async () => {
  s.write('{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"testing_echo","arguments":{"text":"\\ud800x"}}}\n');
  let m = (await s.next('surrogate in arguments')).msg;
  assertEq(m.id, 'a1', 'id');
  let e = toolErr(m, 'invalid_arguments', 'surrogate in arguments');
  assert(/surrogate/.test(e.message), e.message);
  s.write('{"jsonrpc":"2.0","id":"a2","method":"tools/call","params":{"name":"testing_echo","arguments":{"te\\u0000xt":"a"}}}\n');
  m = (await s.next('NUL in a key')).msg;
  e = toolErr(m, 'invalid_arguments', 'NUL in a key');
  assert(/NUL/.test(e.message), e.message);
  s.write('{"jsonrpc":"2.0","id":"a3","method":"tools/call","params":{"name":"testing_echo","arguments":{"text":"secret\\u0000hidden"}}}\n');
  e = toolErr((await s.next('NUL in content')).msg, 'invalid_arguments', 'NUL in content');
  // an unknown tool and a malformed tools/call stay JSON-RPC errors
  errOf(await s.request({ jsonrpc: '2.0', id: 'a4', method: 'tools/call', params: { name: 'no_such_tool' } }), -32602, 'a4', 'unknown tool');
  s.write('{"jsonrpc":"2.0","id":"a5","method":"tools/call","params":{"name":"testing_echo\\u0000","arguments":{}}}\n');
  errOf((await s.next('NUL in the tool name')).msg, -32602, 'a5', 'NUL in the tool name');
});
await R.run('ids are echoed as their exact text', async () => {
  for (const raw of ['9007199254740993', '1180591620717411303424', '-9007199254740993', '"\\u00e9\\/x"', '0']) {
    s.write(`{"jsonrpc":"2.0","id":${raw},"method":"ping"}\n`);
    const m = await s.next(raw);
    assert(m.line.includes(`"id":${raw}`), `id ${raw} came back as ${m.line}`);
  }
});
await R.run('progress tokens 2^53+1 and 2^70 come back exactly', async () => {
  for (const tok of ['9007199254740993', '1180591620717411303424', '"t\\u00e9"']) {
    s.write(`{"jsonrpc":"2.0","id":"pt","method":"tools/call","params":{"name":"testing_slow","arguments":{"steps":2,"interval_ms":10},"_meta":{"progressToken":${tok}}}}\n`);
    let progress = 0;
    for (;;) {
      const m = await s.next('progress or the result');
      if (m.msg.method === 'notifications/progress') {
        assert(m.line.includes(`"progressToken":${tok}`), `token ${tok} came back as ${m.line}`);
        progress++;
      } else {
        assertEq(m.msg.id, 'pt', 'the result');
        break;
      }
    }
    assert(progress > 0, 'no progress was sent');
  }
});
await R.run('notifications/cancelled finds the call with id 2^53+1, not 2^53', async () => {
  // Both in one write: the cancellation is read before either call can end.
  s.write('{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"testing_slow","arguments":{"steps":1000,"interval_ms":1000}}}\n' +
          '{"jsonrpc":"2.0","id":9007199254740992,"method":"tools/call","params":{"name":"testing_slow","arguments":{"steps":3,"interval_ms":50}}}\n' +
          '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9007199254740993}}\n');
  const m = await s.next('the 2^53 call');
  assert(m.line.includes('"id":9007199254740992'), `expected the 2^53 call's result, got ${m.line}`);
  assertEq(m.msg.result.structuredContent, { steps: 3 }, 'the 2^53 call ran to its end');
  await s.alive('after-cancel');
  assert(/request 9007199254740993 cancelled by the client/.test(s.stderr), 'the 2^53+1 call was not cancelled');
});
await R.run('long string ids sharing a prefix do not collide', async () => {
  const base = 'x'.repeat(100);
  s.send({ jsonrpc: '2.0', id: base + '1', method: 'tools/call', params: { name: 'testing_slow', arguments: { steps: 2, interval_ms: 50 } } });
  s.send({ jsonrpc: '2.0', id: base + '2', method: 'tools/call', params: { name: 'testing_slow', arguments: { steps: 1, interval_ms: 50 } } });
  const got = [(await s.next('first')).msg, (await s.next('second')).msg];
  for (const m of got) assert(m.result && !m.result.isError, `not a result: ${JSON.stringify(m).slice(0, 300)}`);
  assertEq(got.map((m) => m.id).sort(), [base + '1', base + '2'], 'ids');
});
await R.run('every stdout line was one JSON-RPC message', async () => {
  assert(s.badLines.length === 0, s.badLines.join('; '));
  s.endInput();
  assertEq(await s.exit(), 0, 'exit');
});

await R.run('SIGHUP mid-call: a clean shutdown, exit 0', async () => {
  const t = new RawServer(MCP_TESTING, ['--db', db(), '-v']);
  await t.initialize();
  t.send({ jsonrpc: '2.0', id: 'slow', method: 'tools/call', params: { name: 'testing_slow', arguments: { steps: 1000, interval_ms: 1000 } } });
  await t.alive('before-hup');
  t.proc.kill('SIGHUP');
  assertEq(await t.exit(), 0, 'exit');
  assert(/shutting down: SIGHUP/.test(t.stderr), `log: ${t.stderr.slice(-300)}`);
  assert(t.badLines.length === 0, t.badLines.join('; '));
});
await R.run('a file-size limit (SIGXFSZ) ends in an answered error, not death', async () => {
  const prlimit = spawnSync('prlimit', ['--version']);
  assert(prlimit.status === 0, 'prlimit (util-linux) is needed');
  const d = db();
  const first = new RawServer(MCP_TESTING, ['--db', d]);
  await first.initialize();
  first.endInput();
  assertEq(await first.exit(), 0, 'set-up exit');
  const limit = statSync(d).size + (256 << 10);
  const t = new RawServer('prlimit', [`--fsize=${limit}`, '--', MCP_TESTING, '--db', d]);
  await t.initialize();
  const c = await t.request({ jsonrpc: '2.0', id: 'c', method: 'tools/call', params: { name: 'create_session', arguments: {} } });
  assert(c.result, `create_session: ${JSON.stringify(c)}`);
  // 4 MiB that does not compress: the store must write past the limit
  const big = randomBytes(3 << 20).toString('base64');
  const w = await t.request({ jsonrpc: '2.0', id: 'w', method: 'tools/call', params: { name: 'session_write_files', arguments: { description: 'big', entries: [{ path: 'big.txt', content: big }] } } });
  assert(w && (w.error || w.result), `no answer: ${JSON.stringify(w)}`);
  assert(w.error || w.result.isError, `the write over the limit succeeded: ${JSON.stringify(w).slice(0, 300)}`);
  await t.alive('after-fsize');
  t.endInput();
  assertEq(await t.exit(), 0, 'exit');
});

await R.run('back-pressure: a client that pauses reading loses nothing', async () => {
  const t = new RawServer(MCP_TESTING, ['--db', db(), '--max-queue-bytes', '4096', '-v']);
  t.proc.stdout.pause();
  const n = 3000;
  const id = (i) => `bp-${'y'.repeat(100)}-${i}`;
  let lines = '';
  for (let i = 0; i < n; i++) lines += JSON.stringify({ jsonrpc: '2.0', id: id(i), method: 'ping' }) + '\n';
  t.write(lines);
  // wait until the daemon says it stopped reading, then read again
  const deadline = Date.now() + 60000;
  while (!/not reading requests until it catches up/.test(t.stderr)) {
    assert(Date.now() < deadline, `input never paused; stderr: ${t.stderr.slice(-300)}`);
    assert(t.exitCode === undefined, `exited: ${t.exitCode}; ${t.stderr.slice(-300)}`);
    await new Promise((res) => setTimeout(res, 50));
  }
  t.proc.stdout.resume();
  for (let i = 0; i < n; i++) assertEq((await t.next(`ping ${i}`)).msg.id, id(i), 'order');
  await t.alive();
  t.endInput();
  assertEq(await t.exit(), 0, 'exit');
});
await R.run('a client that reads nothing for --client-stall-ms is dropped, the daemon exits', async () => {
  const t = new RawServer(MCP_TESTING, ['--db', db(), '--max-queue-bytes', '4096', '--client-stall-ms', '1500']);
  t.proc.stdout.pause();
  let lines = '';
  for (let i = 0; i < 3000; i++) lines += JSON.stringify({ jsonrpc: '2.0', id: `st-${'z'.repeat(100)}-${i}`, method: 'ping' }) + '\n';
  t.write(lines);
  const code = await t.exit();
  assertEq(code, 0, 'exit');
  assert(/read nothing for 1500 ms/.test(t.stderr), t.stderr.slice(-300));
});

R.done();
