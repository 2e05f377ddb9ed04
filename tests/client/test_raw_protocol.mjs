// test_raw_protocol.mjs - raw bytes on drun-mcp's stdin, each reply checked exactly.
//
// No SDK here: these are the inputs an SDK never sends (malformed JSON, invalid UTF-8,
// a 20 MiB line, deep nesting, batches, odd ids). After each one the daemon must still
// answer ping correctly, and every line it wrote must be one valid JSON-RPC message.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { MCP, MCP_TESTING, RawServer, Results, assert, assertEq, makeTmp, requireBinaries } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
let dbn = 0;
const db = () => join(tmp, `raw${dbn++}.db`);

function errOf(m, code, idWanted, what) {
  assert(m && m.error, `${what}: expected an error, got ${JSON.stringify(m)}`);
  assertEq(m.error.code, code, `${what}: error code`);
  assert(typeof m.error.message === 'string' && m.error.message.length > 0, `${what}: no message`);
  assertEq(m.id, idWanted, `${what}: id`);
}

const s = new RawServer(MCP_TESTING, ['--db', db()]);

await R.run('discover before initialize', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 'd1', method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } });
  assertEq(m.id, 'd1', 'id');
  assert(m.result.supportedVersions.includes('2026-07-28') && m.result.supportedVersions.includes('2025-11-25'), 'versions');
  assertEq(m.result.serverInfo.name, 'drun', 'server name');
  assertEq(m.result.capabilities.tools, { listChanged: false }, 'capabilities');
  assertEq(m.result.resultType, 'complete', 'resultType');
});
await R.run('discover with no params at all', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 'd2', method: 'server/discover' });
  assert(Array.isArray(m.result.supportedVersions), 'supportedVersions');
});
await R.run('ping before initialize', () => s.alive('p0'));
await R.run('tools/list before initialize is refused', async () => {
  errOf(await s.request({ jsonrpc: '2.0', id: 3, method: 'tools/list' }), -32600, 3, 'pre-init');
});
await R.run('modern request without initialize is served', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 4, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } });
  assert(Array.isArray(m.result.tools) && m.result.tools.some((t) => t.name === 'get_config'), 'tools');
  assertEq(m.result.resultType, 'complete', 'resultType');
});
await R.run('modern tools/call without initialize records _meta client', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'get_config', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'modern-client', version: '2.0' } } } });
  assert(/^defaults/.test(m.result.structuredContent.source), `source: ${m.result.structuredContent.source}`);
});
await R.run('unsupported protocol version lists the supported ones', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 6, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '1900-01-01' } } });
  errOf(m, -32022, 6, 'unsupported version');
  assertEq(m.error.data.requested, '1900-01-01', 'requested');
  assert(m.error.data.supported.includes('2026-07-28') && m.error.data.supported.includes('2024-11-05'), 'supported list');
});
await R.run('initialize echoes a supported version', async () => {
  const m = await s.initialize();
  assertEq(m.result.protocolVersion, '2025-11-25', 'version');
  assertEq(m.result.serverInfo.name, 'drun', 'name');
  assert(typeof m.result.instructions === 'string', 'instructions');
});
await R.run('second initialize is refused', async () => {
  errOf(await s.request({ jsonrpc: '2.0', id: 7, method: 'initialize', params: { protocolVersion: '2025-11-25' } }), -32600, 7, 'reinit');
});
await R.run('malformed JSON gives -32700 with id null', async () => {
  s.write('{"jsonrpc":"2.0","id":8,"method":"ping"\n');
  errOf((await s.next()).msg, -32700, null, 'malformed');
  await s.alive();
});
await R.run('invalid UTF-8 gives -32700', async () => {
  s.write(Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}}\n')]));
  errOf((await s.next()).msg, -32700, null, 'utf8');
  s.write(Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}}\n')]));
  errOf((await s.next()).msg, -32700, null, 'surrogate');
  s.write(Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}}\n')]));
  errOf((await s.next()).msg, -32700, null, 'overlong');
  await s.alive();
});
await R.run('valid multi-byte UTF-8 is accepted', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 'ü€😀', method: 'ping' });
  assertEq(m.id, 'ü€😀', 'id');
});
const nest = (d) => '['.repeat(d) + ']'.repeat(d);
await R.run('nesting at the cap (64) is accepted', async () => {
  // the message object is level 1, params 2, x holds 62 arrays: 64 in all
  s.write(`{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":${nest(62)}}}\n`);
  assertEq((await s.next()).msg.id, 10, 'answered');
});
await R.run('nesting past the cap (65) gives -32700', async () => {
  s.write(`{"jsonrpc":"2.0","id":11,"method":"ping","params":{"x":${nest(63)}}}\n`);
  errOf((await s.next()).msg, -32700, null, 'deep');
  s.write(nest(100000) + '\n');
  errOf((await s.next()).msg, -32700, null, 'very deep');
  await s.alive();
});
await R.run('batches give -32600', async () => {
  s.write('[{"jsonrpc":"2.0","id":12,"method":"ping"},{"jsonrpc":"2.0","id":13,"method":"ping"}]\n');
  errOf((await s.next()).msg, -32600, null, 'batch');
  s.write('[]\n');
  errOf((await s.next()).msg, -32600, null, 'empty batch');
  await s.alive();
});
await R.run('non-object messages give -32600', async () => {
  for (const t of ['42', '"ping"', 'null', 'true']) {
    s.write(t + '\n');
    errOf((await s.next()).msg, -32600, null, t);
  }
});
await R.run('wrong jsonrpc gives -32600 with the id', async () => {
  errOf(await s.request({ jsonrpc: '1.0', id: 14, method: 'ping' }), -32600, 14, 'version');
  s.write('{"id":15,"method":"ping"}\n');
  errOf((await s.next()).msg, -32600, 15, 'missing jsonrpc');
});
await R.run('ids of every type', async () => {
  assertEq((await s.request({ jsonrpc: '2.0', id: 'abc', method: 'ping' })).id, 'abc', 'string');
  assertEq((await s.request({ jsonrpc: '2.0', id: '', method: 'ping' })).id, '', 'empty string');
  assertEq((await s.request({ jsonrpc: '2.0', id: 0, method: 'ping' })).id, 0, 'zero');
  assertEq((await s.request({ jsonrpc: '2.0', id: -5, method: 'ping' })).id, -5, 'negative');
  s.write('{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}\n');
  const big = await s.next();
  assert(big.line.includes('"id":123456789012345678901234567890'), `large id not echoed exactly: ${big.line}`);
  for (const [raw, what] of [['null', 'null'], ['1.5', 'fraction'], ['1e3', 'exponent'], ['true', 'boolean'], ['{}', 'object'], ['[1]', 'array']]) {
    s.write(`{"jsonrpc":"2.0","id":${raw},"method":"ping"}\n`);
    errOf((await s.next()).msg, -32600, null, `id ${what}`);
  }
  await s.alive();
});
await R.run('notifications are never answered', async () => {
  s.send({ jsonrpc: '2.0', method: 'notifications/unknown' });
  s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'nothing' } });
  s.send({ jsonrpc: '2.0', method: 'tools/list' });
  s.send({ jsonrpc: '1.0', method: 'ping' });
  s.send({ jsonrpc: '2.0', method: 42 });
  s.write('\n   \n\r\n');
  const m = await s.request({ jsonrpc: '2.0', id: 'after', method: 'ping' });
  assertEq(m.id, 'after', 'the next reply is the ping');
});
await R.run('responses from the client are ignored', async () => {
  s.send({ jsonrpc: '2.0', id: 99, result: {} });
  assertEq((await s.request({ jsonrpc: '2.0', id: 'r2', method: 'ping' })).id, 'r2', 'ping next');
});
await R.run('unknown method gives -32601', async () => {
  errOf(await s.request({ jsonrpc: '2.0', id: 16, method: 'resources/list' }), -32601, 16, 'unknown');
  errOf(await s.request({ jsonrpc: '2.0', id: 17, method: 'no/such' }), -32601, 17, 'unknown');
});
await R.run('bad params give -32602', async () => {
  errOf(await s.request({ jsonrpc: '2.0', id: 18, method: 'tools/call', params: { name: 'no_such_tool', arguments: {} } }), -32602, 18, 'unknown tool');
  errOf(await s.request({ jsonrpc: '2.0', id: 19, method: 'tools/call', params: { arguments: {} } }), -32602, 19, 'no name');
  errOf(await s.request({ jsonrpc: '2.0', id: 20, method: 'tools/call', params: [1] }), -32602, 20, 'array params');
  errOf(await s.request({ jsonrpc: '2.0', id: 21, method: 'initialize', params: {} }), -32602, 21, 'initialize without version');
});
await R.run('missing arguments are treated as {}', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 22, method: 'tools/call', params: { name: 'get_config' } });
  assert(!m.result.isError && m.result.structuredContent.max_sessions === 50, JSON.stringify(m));
});
await R.run('argument errors are tool errors, not JSON-RPC errors', async () => {
  const cases = [
    [{}, "missing required argument 'text'"],
    [{ text: 5 }, "argument 'text' must be a string"],
    [{ text: 'a', extra: 1 }, "unknown argument 'extra'"],
    [{ text: 'a', count: 0 }, "argument 'count' must be at least 1"],
    [{ text: 'a', count: 1.5 }, "argument 'count' must be an integer"],
    [{ text: 'a', mode: 'medium' }, "argument 'mode' must be one of"],
    [{ text: 'a', items: ['1', '2', '3', '4'] }, "argument 'items' has 4 items; the limit is 3"],
    [{ text: 'a', items: ['1', 2] }, "argument 'items[1]' must be a string"],
    [{ text: 'a', entries: [{ path: 'x' }, {}] }, "missing required member 'path' in argument 'entries[1]'"],
    [{ text: 'a', flag: 'yes' }, "argument 'flag' must be a boolean"],
    [{ text: '12345678901' }, "argument 'text' is 11 characters long; the limit is 10"],
  ];
  for (const [args, want] of cases) {
    const m = await s.request({ jsonrpc: '2.0', id: 'v', method: 'tools/call', params: { name: 'testing_echo', arguments: args } });
    assert(m.result && m.result.isError === true, `not a tool error for ${JSON.stringify(args)}`);
    const e = JSON.parse(m.result.content[0].text);
    assertEq(e.code, 'invalid_arguments', 'code');
    assert(e.message.includes(want), `message '${e.message}' lacks '${want}'`);
  }
  const ok = await s.request({ jsonrpc: '2.0', id: 'v2', method: 'tools/call', params: { name: 'testing_echo', arguments: { text: '1234567890', count: 1, items: ['a', 'b', 'c'], mode: 'fast' } } });
  assert(!ok.result.isError, 'the edge values are accepted');
  const u = await s.request({ jsonrpc: '2.0', id: 'v3', method: 'tools/call', params: { name: 'testing_echo', arguments: { text: 'ü€😀ab' } } });
  assert(!u.result.isError, 'maxLength counts characters, not bytes');
  const na = await s.request({ jsonrpc: '2.0', id: 'v4', method: 'tools/call', params: { name: 'testing_echo', arguments: 'text' } });
  assertEq(JSON.parse(na.result.content[0].text).code, 'invalid_arguments', 'non-object arguments');
});
await R.run('newlines inside strings never split a message', async () => {
  const m = await s.request({ jsonrpc: '2.0', id: 'nl', method: 'tools/call', params: { name: 'testing_echo', arguments: { text: 'a\nb\r\nc' } } });
  assertEq(m.result.structuredContent.text, 'a\nb\r\nc', 'text');
});
await R.run('a 20 MiB line is answered and skipped', async () => {
  const big = '{"jsonrpc":"2.0","id":"big","method":"ping","params":{"x":"' + 'a'.repeat(20 << 20) + '"}}\n';
  s.write(big);
  errOf((await s.next('the over-long line error')).msg, -32600, null, 'long line');
  await s.alive('after-big');
});
await R.run('duplicate id of a call in flight is refused', async () => {
  s.send({ jsonrpc: '2.0', id: 'dup', method: 'tools/call', params: { name: 'testing_slow', arguments: { steps: 3, interval_ms: 50 } } });
  s.send({ jsonrpc: '2.0', id: 'dup', method: 'tools/call', params: { name: 'testing_slow', arguments: { steps: 1 } } });
  const first = (await s.next()).msg;
  errOf(first, -32600, 'dup', 'duplicate');
  const second = (await s.next()).msg;
  assertEq(second.result.structuredContent, { steps: 3 }, 'the first call still ends');
});
await R.run('every stdout line was one JSON-RPC message', async () => {
  assert(s.badLines.length === 0, s.badLines.join('; '));
});
await R.run('stdin EOF exits 0', async () => {
  s.endInput();
  assertEq(await s.exit(), 0, 'exit code');
});

await R.run('line cap: at the cap accepted, one past refused', async () => {
  const cap = 4096;
  const t = new RawServer(MCP_TESTING, ['--db', db(), '--max-line-bytes', String(cap)]);
  const base = '{"jsonrpc":"2.0","id":"cap","method":"ping","params":{"x":""}}';
  const at = base.replace('"x":""', `"x":"${'y'.repeat(cap - base.length)}"`);
  assertEq(Buffer.byteLength(at), cap, 'line length');
  t.write(at + '\n');
  assertEq((await t.next()).msg.id, 'cap', 'at the cap');
  const past = base.replace('"x":""', `"x":"${'y'.repeat(cap - base.length + 1)}"`);
  t.write(past.slice(0, 1000));
  t.write(past.slice(1000) + '\n');
  errOf((await t.next()).msg, -32600, null, 'past the cap');
  await t.alive();
  t.endInput();
  assertEq(await t.exit(), 0, 'exit');
  assert(t.badLines.length === 0, t.badLines.join('; '));
});
await R.run('stdin closed mid-request exits 0', async () => {
  const t = new RawServer(MCP_TESTING, ['--db', db()]);
  t.write('{"jsonrpc":"2.0","id":1,"method":"pi');
  t.endInput();
  assertEq(await t.exit(), 0, 'exit');
  assertEq(t.messages.length, 0, 'no reply to a partial line');
});
await R.run('stdin /dev/null exits 0', async () => {
  const p = spawn(MCP, ['--db', db()], { stdio: ['ignore', 'pipe', 'pipe'] });
  const code = await new Promise((res) => p.on('exit', (c) => res(c)));
  assertEq(code, 0, 'exit');
});
await R.run('SIGTERM with a call in flight exits 0, no reply for it', async () => {
  const t = new RawServer(MCP_TESTING, ['--db', db()]);
  await t.initialize();
  t.send({ jsonrpc: '2.0', id: 'slow', method: 'tools/call', params: { name: 'testing_slow', arguments: { steps: 1000, interval_ms: 1000 } } });
  await t.alive('before-term');
  t.proc.kill('SIGTERM');
  assertEq(await t.exit(), 0, 'exit');
  assert(!t.messages.some((m) => m.msg && m.msg.id === 'slow'), 'the cancelled call was answered');
});
await R.run('no database named: refuses with how to name one', async () => {
  const env = { ...process.env };
  delete env.DRUN_DB;
  const p = spawn(MCP, [], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let err = '';
  p.stderr.on('data', (d) => (err += d));
  const code = await new Promise((res) => p.on('exit', (c) => res(c)));
  assert(code !== 0 && err.includes('--db') && err.includes('DRUN_DB'), `exit ${code}: ${err}`);
});
await R.run('the normal build has no test-only tools', async () => {
  const t = new RawServer(MCP, ['--db', db()]);
  await t.initialize();
  const m = await t.request({ jsonrpc: '2.0', id: 'l', method: 'tools/list' });
  assert(!m.result.tools.some((x) => x.name.startsWith('testing_')), 'testing tools listed');
  t.endInput();
  assertEq(await t.exit(), 0, 'exit');
});

R.done();
