// test_sdk.mjs - drun-mcp driven by the official MCP TypeScript SDK client.
//
// Starts build/tests/drun-mcp-testing (drun-mcp plus two test-only tools) through
// StdioClientTransport against a temp DB, with a tee on its stdout so every line the
// server wrote can be checked afterwards. Checks the handshake, tools/list, that every
// inputSchema compiles (ajv, draft 2020-12), results (structuredContent equals the text
// JSON), tool errors, progress, cancellation, and the audit rows via the sqlite3 CLI.
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import Ajv2020 from 'ajv/dist/2020.js';
import { MCP_TESTING, Results, assert, assertEq, checkAllLines, makeTmp, requireBinaries, sqlite, waitFor } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
const db = join(tmp, 'sdk.db');
const tee = join(tmp, 'stdout.log');

const transport = new StdioClientTransport({
  command: 'sh',
  args: ['-c', '"$0" "$@" | tee -a "$DRUN_TEE"', MCP_TESTING, '--db', db],
  env: { ...process.env, DRUN_TEE: tee, HOME: tmp, DRUN_CONFIG: '' },
  stderr: 'pipe',
});
let stderr = '';
transport.stderr?.on('data', (d) => (stderr += d));
const client = new Client({ name: 'drun-sdk-test', version: '1.2.3' });

await R.run('initialize negotiates 2025-11-25', async () => {
  await client.connect(transport);
  const info = client.getServerVersion();
  assertEq(info.name, 'drun', 'server name');
  assert(typeof info.version === 'string' && info.version.length > 0, 'server version');
  assertEq(client.getServerCapabilities().tools, { listChanged: false }, 'capabilities');
  assert(typeof client.getInstructions() === 'string', 'instructions');
  assertEq(transport._protocolVersion ?? client._negotiatedProtocolVersion ?? '2025-11-25', '2025-11-25', 'version');
});

let tools = [];
await R.run('tools/list in the fixed order', async () => {
  tools = (await client.listTools()).tools;
  const names = tools.map((t) => t.name);
  const cfg = names.filter((n) => n === 'get_config' || n === 'get_system_instructions');
  assertEq(cfg, ['get_config', 'get_system_instructions'], 'config tools in order');
  for (const t of tools) {
    assert(t.description && t.description.length <= 400, `${t.name}: description missing or long`);
    assertEq(t.inputSchema.type, 'object', `${t.name}: schema type`);
    assertEq(t.inputSchema.additionalProperties, false, `${t.name}: additionalProperties`);
    for (const k of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'])
      assert(typeof t.annotations[k] === 'boolean', `${t.name}: annotation ${k}`);
  }
});

await R.run('every inputSchema compiles (JSON Schema 2020-12)', async () => {
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  for (const t of tools) {
    const v = ajv.compile(t.inputSchema);
    if (t.name === 'get_config' || t.name === 'get_system_instructions') assert(v({}) && !v({ x: 1 }), `${t.name}: schema accepts {} and refuses extras`);
  }
});

const parsedText = (r) => JSON.parse(r.content[0].text);

await R.run('get_config: structuredContent equals the text JSON', async () => {
  const r = await client.callTool({ name: 'get_config', arguments: {} });
  assert(!r.isError, 'isError');
  assertEq(r.content.length, 1, 'one block');
  assertEq(r.structuredContent, parsedText(r), 'structuredContent');
  assertEq(r.structuredContent.source, 'defaults', 'source');
  assertEq(r.structuredContent.max_checkpoints, 200, 'a default');
});

await R.run('get_system_instructions returns the guide as text', async () => {
  const r = await client.callTool({ name: 'get_system_instructions', arguments: {} });
  assert(!r.isError && r.content[0].type === 'text', 'text');
  const t = r.content[0].text;
  for (const w of ['create_session', 'session_bash', 'get_config', 'checkpoint_read_stdstreams'])
    assert(t.includes(w), `guide does not mention ${w}`);
});

await R.run('tool errors are isError results with {code,message}', async () => {
  const r = await client.callTool({ name: 'get_config', arguments: { nope: 1 } });
  assertEq(r.isError, true, 'isError');
  const e = parsedText(r);
  assertEq(e.code, 'invalid_arguments', 'code');
  assert(e.message.includes("'nope'"), e.message);
});

await R.run('unknown tool is a JSON-RPC error (-32602)', async () => {
  let threw = null;
  try {
    await client.callTool({ name: 'no_such_tool', arguments: {} });
  } catch (e) {
    threw = e;
  }
  assert(threw && threw.code === -32602, `got ${threw}`);
});

await R.run('progress is strictly increasing and ends at total', async () => {
  const seen = [];
  const r = await client.callTool({ name: 'testing_slow', arguments: { steps: 5, interval_ms: 5 } }, undefined, {
    onprogress: (p) => seen.push(p),
  });
  assertEq(r.structuredContent, { steps: 5 }, 'result');
  // The SDK drops a notification that it handles after the response (it dispatches them
  // a microtask later), so the last one may be missing here; the raw lines are checked
  // in full below.
  const v = seen.map((p) => p.progress);
  assert(v.length >= 3 && v.every((x, i) => x === i + 1), `progress values ${JSON.stringify(v)}`);
  assert(seen.every((p) => p.total === 5 && /^step \d of 5$/.test(p.message)), JSON.stringify(seen));
});

await R.run('calls run concurrently: a fast call overtakes a slow one', async () => {
  const order = [];
  const slow = client.callTool({ name: 'testing_slow', arguments: { steps: 3, interval_ms: 100 } }).then(() => order.push('slow'));
  const fast = client.callTool({ name: 'get_config', arguments: {} }).then(() => order.push('fast'));
  await Promise.all([slow, fast]);
  assertEq(order, ['fast', 'slow'], 'completion order');
});

await R.run('cancellation stops the call; no response for it', async () => {
  const ac = new AbortController();
  let progressed = 0;
  const p = client.callTool({ name: 'testing_slow', arguments: { steps: 100000, interval_ms: 10 } }, undefined, {
    signal: ac.signal,
    onprogress: () => {
      if (++progressed === 2) ac.abort('test cancels');
    },
  });
  let threw = null;
  try {
    await p;
  } catch (e) {
    threw = e;
  }
  assert(threw, 'the call did not reject');
  // The server is still fine afterwards.
  const r = await client.callTool({ name: 'get_config', arguments: {} });
  assert(!r.isError, 'server still serves');
});

await R.run('shutdown: close exits cleanly', async () => {
  await client.close();
});

await R.run('every stdout line was one JSON-RPC message', async () => {
  // tee may still be writing right after close; it exits once the server has: wait for
  // that (no process left running `tee -a FILE`).
  const teeRunning = () => readdirSync('/proc').some((p) => {
    try {
      return /^[0-9]+$/.test(p) && readFileSync(`/proc/${p}/cmdline`, 'utf8') === `tee\0-a\0${tee}\0`;
    } catch {
      return false;
    }
  });
  await waitFor(() => existsSync(tee) && !teeRunning(), 'the tee of the server\'s stdout to exit');
  const text = readFileSync(tee, 'utf8');
  const problems = checkAllLines(text);
  assert(problems.length === 0, problems.join('; '));
  assert(text.split('\n').length > 10, 'too few lines captured');
});

await R.run('the cancelled call was never answered', async () => {
  const lines = readFileSync(tee, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const cancelledIds = [];
  // The SDK numbers requests from 0; find ids that got progress but no response.
  const progressed = new Set(lines.filter((m) => m.method === 'notifications/progress').map((m) => m.params.progressToken));
  const answered = new Set(lines.filter((m) => Object.hasOwn(m, 'result') || Object.hasOwn(m, 'error')).map((m) => m.id));
  for (const t of progressed) if (!answered.has(t)) cancelledIds.push(t);
  assertEq(cancelledIds.length, 1, `unanswered progressed requests ${JSON.stringify(cancelledIds)}`);
  // Per token, the progress values the server sent are strictly increasing.
  const byToken = new Map();
  for (const m of lines.filter((m) => m.method === 'notifications/progress')) {
    const a = byToken.get(m.params.progressToken) || [];
    a.push(m.params.progress);
    byToken.set(m.params.progressToken, a);
  }
  for (const [t, a] of byToken) assert(a.every((x, i) => i === 0 || x > a[i - 1]), `token ${t}: ${a}`);
  assert([...byToken.values()].some((a) => JSON.stringify(a) === '[1,2,3,4,5]'), 'the 5-step call sent 1..5');
});

await R.run('audit rows for the session (sqlite3 CLI)', async () => {
  // The server has exited once close() resolved; its rows are committed.
  const rows = sqlite(db, "select tool, outcome, error_code, client_name, client_version, kind, args, duration_ms, summary from audit_log order by id");
  const byTool = (t) => rows.filter((r) => r.tool === t);
  assert(rows.length === 8, `expected 8 audit rows, got ${rows.length}: ${JSON.stringify(rows.map((r) => r.tool))}`);
  assert(rows.every((r) => r.kind === 'call' && r.client_name === 'drun-sdk-test' && r.client_version === '1.2.3'), 'client and kind');
  assert(rows.every((r) => Number.isInteger(r.duration_ms) && r.duration_ms >= 0 && r.summary), 'duration and summary');
  assertEq(byTool('get_config').map((r) => r.outcome), ['ok', 'error', 'ok', 'ok'], 'get_config outcomes');
  assertEq(byTool('get_config')[1].error_code, 'invalid_arguments', 'error code');
  assertEq(JSON.parse(byTool('get_config')[1].args), { nope: 1 }, 'args kept');
  assertEq(byTool('testing_slow').map((r) => r.outcome), ['ok', 'ok', 'cancelled'], 'slow outcomes');
  assert(byTool('testing_slow')[2].summary.includes('cancelled after'), 'the cancel hook ran');
  assertEq(byTool('get_system_instructions').length, 1, 'instructions row');
});

if (R.failed) console.log(`server stderr (tail): ${stderr.slice(-600)}`);
R.done();
