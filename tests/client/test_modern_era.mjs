// test_modern_era.mjs - results in the 2026-07-28 protocol revision carry what that
// revision requires: resultType everywhere, ttlMs and cacheScope on tools/list (a
// cacheable result), and _meta["io.modelcontextprotocol/serverInfo"] naming the server.
//
// Raw JSON-RPC lines, since the SDK in tests/client speaks the earlier revisions. When
// DRUN_MCP_SCHEMA names the revision's official schema.json (schema/2026-07-28/schema.json
// of the specification repository), every result is also validated against it with Ajv;
// without it that part is skipped and the keys are checked by hand.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020.js';
import { MCP, RawServer, Results, assert, assertEq, makeTmp, requireBinaries } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
const VERSION = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': VERSION };
const SERVER_INFO = 'io.modelcontextprotocol/serverInfo';

let validate = null;
const schemaPath = process.env.DRUN_MCP_SCHEMA;
if (schemaPath && existsSync(schemaPath)) {
  const schema = JSON.parse(readFileSync(schemaPath, 'utf8'));
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false, logger: false });
  ajv.addSchema(schema, 'mcp');
  validate = (def, value) => {
    const v = ajv.getSchema(`mcp#/$defs/${def}`);
    assert(v, `the schema has no ${def}`);
    if (!v(value)) throw new Error(`${def} rejected: ${ajv.errorsText(v.errors)} in ${JSON.stringify(value).slice(0, 300)}`);
  };
} else {
  console.log('# DRUN_MCP_SCHEMA unset: results checked by hand, not against the official schema');
}

const s = new RawServer(MCP, ['--db', join(tmp, 'modern.db')]);
let n = 0;
const req = (method, params = {}) =>
  s.request({ jsonrpc: '2.0', id: ++n, method, params: { ...params, _meta: { ...META, ...(params._meta || {}) } } });

function serverInfoOf(result, what) {
  const info = result._meta && result._meta[SERVER_INFO];
  assert(info, `${what}: no _meta["${SERVER_INFO}"] in ${JSON.stringify(result).slice(0, 200)}`);
  assertEq(info.name, 'drun', `${what}: server name`);
  assert(typeof info.version === 'string' && info.version.length > 0, `${what}: server version`);
  assertEq(result.resultType, 'complete', `${what}: resultType`);
}

await R.run('tools/list: ttlMs, cacheScope, resultType and serverInfo', async () => {
  const m = await req('tools/list');
  assert(m.result, `no result: ${JSON.stringify(m)}`);
  assert(Number.isInteger(m.result.ttlMs) && m.result.ttlMs >= 0, `ttlMs ${m.result.ttlMs}`);
  assert(['public', 'private'].includes(m.result.cacheScope), `cacheScope ${m.result.cacheScope}`);
  serverInfoOf(m.result, 'tools/list');
  if (validate) validate('ListToolsResult', m.result);
});

await R.run('tools/call (a result and a tool error) and ping carry serverInfo', async () => {
  const ok = await req('tools/call', { name: 'get_config', arguments: {} });
  serverInfoOf(ok.result, 'tools/call');
  if (validate) validate('CallToolResult', ok.result);
  const bad = await req('tools/call', { name: 'session_history', arguments: { description: 'x' } });
  assert(bad.result && bad.result.isError, `expected a tool error: ${JSON.stringify(bad).slice(0, 200)}`);
  serverInfoOf(bad.result, 'tools/call error');
  if (validate) validate('CallToolResult', bad.result);
  const p = await req('ping');
  serverInfoOf(p.result, 'ping');
});

await R.run('server/discover validates', async () => {
  const m = await req('server/discover');
  serverInfoOf(m.result, 'server/discover');
  if (validate) validate('DiscoverResult', m.result);
});

await R.run('the earlier revisions are unchanged: no ttlMs, no _meta', async () => {
  await s.initialize();
  const m = await s.request({ jsonrpc: '2.0', id: ++n, method: 'tools/list' });
  assert(!('ttlMs' in m.result) && !('_meta' in m.result) && !('resultType' in m.result), `legacy keys ${Object.keys(m.result)}`);
});

await s.exit();
R.done();
