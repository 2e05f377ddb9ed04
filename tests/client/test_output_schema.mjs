// test_output_schema.mjs - every tool whose results are objects declares an outputSchema,
// and every real result matches it.
//
// Drives the real build/drun-mcp through the official SDK client, which itself checks
// structuredContent against a tool's outputSchema on each callTool (and refuses a result
// without structuredContent when one is declared). The calls below reach every tool with
// successful, real arguments (a mount of a temp dir, a fetch from a loopback server, a
// command in the sandbox); each result is also checked here with Ajv so a failure names
// the key. Enumerated arguments are checked to be real enums in the input schemas.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import Ajv2020 from 'ajv/dist/2020.js';
import { MCP, Results, assert, assertEq, makeTmp } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
const tmp = makeTmp();
const proj = join(tmp, 'proj');
const out = join(tmp, 'out');
const snaps = join(tmp, 'snaps');
for (const d of [proj, out, snaps]) mkdirSync(d);
writeFileSync(join(proj, 'README'), 'hello\n');
writeFileSync(join(out, 'gone'), 'x\n');

const web = createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/plain' });
  res.end('served\n');
});
await new Promise((r) => web.listen(0, '127.0.0.1', r));
const PORT = web.address().port;

const cfg = join(tmp, 'config.toml');
writeFileSync(cfg, [
  `mount_allowlist = [${JSON.stringify(tmp)}]`,
  'env_allowlist = ["DRUN_TEST_SET"]',
  'domain_allowlist = ["127.0.0.1"]',
  'fetch_allow_private = true',
  `snapshots_dir = ${JSON.stringify(snaps)}`,
  '',
].join('\n'));

const transport = new StdioClientTransport({
  command: MCP,
  args: ['--db', join(tmp, 'out.db'), '--config', cfg],
  env: { ...process.env, HOME: tmp, DRUN_TEST_SET: 'x' },
  stderr: 'pipe',
});
const client = new Client({ name: 'drun-output-schema-test', version: '1.0' });
await client.connect(transport);
const tools = new Map((await client.listTools()).tools.map((t) => [t.name, t]));
const ajv = new Ajv2020({ strict: false, allErrors: true });
const validators = new Map();
const seen = new Map(); // tool -> { objects, others }
const D = { description: 'output schema test' };

async function call(name, args = {}) {
  let r;
  try {
    r = await client.callTool({ name, arguments: args });
  } catch (e) {
    throw new Error(`${name}: the SDK client refused the result: ${e.message}`);
  }
  const text = r.content && r.content[0] && r.content[0].text;
  if (r.isError) throw new Error(`${name}: ${text}`);
  const s = seen.get(name) || { objects: 0, others: 0 };
  const sc = r.structuredContent;
  if (sc !== undefined) {
    s.objects++;
    const t = tools.get(name);
    if (t.outputSchema) {
      if (!validators.has(name)) validators.set(name, ajv.compile(t.outputSchema));
      const v = validators.get(name);
      if (!v(sc)) throw new Error(`${name}: structuredContent does not match outputSchema: ${ajv.errorsText(v.errors)}`);
    }
    assertEq(sc, JSON.parse(text), `${name}: structuredContent is the text`);
  } else {
    s.others++;
  }
  seen.set(name, s);
  return sc !== undefined ? sc : text;
}

await R.run('every tool called for real', async () => {
  await call('get_config');
  await call('get_system_instructions');
  const s1 = (await call('create_session')).session_id;
  await call('session_label', { label: 'one' });
  await call('get_session_state', D);
  await call('session_write_files', { entries: [{ path: 'a.txt', content: 'a\n' }, { path: 'b.txt', content: 'b\n' }], ...D });
  await call('session_read_file', { path: 'a.txt', ...D });
  await call('session_read_file', { path: 'a.txt', pattern: 'a', ...D });
  await call('session_read_files', { paths: ['a.txt', 'b.txt'], ...D });
  await call('session_bash', { command: 'echo out; echo err >&2; echo c > c.txt', ...D });
  await call('checkpoint_read_stdstreams', D);
  await call('checkpoint_read_stdstreams', { stream: 'stderr', pattern: 'err', ...D });
  await call('session_delete_files', { paths: ['b.txt'], ...D });
  await call('session_checkpoint_label', { label: 'labelled', ...D });
  await call('session_diff', { from_checkpoint_id: 0, ...D });
  await call('session_history', D);
  await call('session_tree');
  await call('session_chat_record', { prompt: 'p', response: 'r' });
  await call('session_mount', { path: proj, ...D });
  await call('session_get_env', { name: 'DRUN_TEST_SET' });
  await call('session_fetch', { url: `http://127.0.0.1:${PORT}/f.txt`, ...D });
  await call('session_export', { output_dir: out, ...D });
  await call('delete_from_host', { path: join(out, 'gone') });
  await call('session_write_files', { entries: [{ path: 'd1', content: '1' }], ...D });
  await call('session_write_files', { entries: [{ path: 'd2', content: '2' }], ...D });
  const st = await call('get_session_state', D);
  await call('session_checkpoint_squash', { from_checkpoint_id: st.checkpoint_id - 1, to_checkpoint_id: st.checkpoint_id, ...D });
  await call('session_write_files', { entries: [{ path: 'd3', content: '3' }], ...D });
  await call('session_write_files', { entries: [{ path: 'd4', content: '4' }], ...D });
  const st2 = await call('get_session_state', D);
  await call('session_rollback', { checkpoint_id: st2.checkpoint_id - 1, ...D });
  await call('session_checkpoint_drop', { from_checkpoint_id: st2.checkpoint_id, to_checkpoint_id: st2.checkpoint_id, ...D });
  await call('session_rollback', { checkpoint_label: 'labelled', ...D });
  await call('session_snapshot', { name: 'snap-a', ...D });
  await call('session_snapshot', { path: join(snaps, 'f.snap'), ...D });
  await call('list_snapshots');
  await call('session_fork', { checkpoint_label: 'labelled' });
  await call('session_write_files', { entries: [{ path: 'forked.txt', content: 'f' }], ...D });
  await call('session_merge', { source_session_id: s1, keys: ['a.txt'], ...D });
  await call('session_list');
  await call('session_switch', { session_id: s1 });
  await call('session_close');
  await call('session_restore', { name: 'snap-a' });
  await call('session_close');
  await call('session_restore', { path: join(snaps, 'f.snap') });
  await call('session_close');
});

await R.run('tools that answer with objects declare an outputSchema', async () => {
  const missing = [];
  for (const [name, s] of seen) {
    const t = tools.get(name);
    if (s.objects > 0 && s.others === 0 && !t.outputSchema) missing.push(name);
    if (t.outputSchema) assert(s.others === 0, `${name}: declares an outputSchema but sent a result without structuredContent`);
  }
  assertEq(missing, [], 'tools without an outputSchema');
  const uncalled = [...tools.keys()].filter((n) => !seen.has(n) && !n.startsWith('test_'));
  console.log(`# called ${seen.size} tools; not called: ${uncalled.join(', ') || 'none'}`);
});

await R.run('every outputSchema is an object schema that compiles', async () => {
  for (const t of tools.values()) {
    if (!t.outputSchema) continue;
    assertEq(t.outputSchema.type, 'object', `${t.name}: outputSchema type`);
    new Ajv2020({ strict: true }).compile(t.outputSchema);
  }
});

await R.run('enumerated arguments are enums in the input schemas', async () => {
  assertEq(tools.get('checkpoint_read_stdstreams').inputSchema.properties.stream.enum, ['stdout', 'stderr'], 'stream');
  const e = await client.callTool({ name: 'checkpoint_read_stdstreams', arguments: { stream: 'stdin', ...D } });
  assert(e.isError && JSON.parse(e.content[0].text).code === 'invalid_arguments', 'stdin refused');
});

await client.close();
web.close();
R.done();
