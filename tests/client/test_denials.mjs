// test_denials.mjs - every refusal by policy is audited with outcome 'denied' and the rule
// that refused it, so the cookbook's "denials in the last day" query finds it.
//
// Drives the real build/drun-mcp through the official SDK client with a config naming one
// allowlisted directory, an env allowlist, a command deny-list and no fetch domains, then
// reads the audit table with the sqlite3 CLI.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp, sqlite } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
const tmp = makeTmp();
const db = join(tmp, 'deny.db');
const cfg = join(tmp, 'config.toml');
const allowed = join(tmp, 'allowed');
const outside = join(tmp, 'outside');
const snaps = join(tmp, 'snaps');
for (const d of [allowed, outside, snaps]) mkdirSync(d);
writeFileSync(join(outside, 'keep'), 'outside\n');
writeFileSync(join(outside, 'old.drun'), 'not a snapshot\n');
writeFileSync(cfg, [
  `mount_allowlist = [${JSON.stringify(allowed)}]`,
  'env_allowlist = ["DRUN_TEST_SET"]',
  'bash_command_denylist = ["rm -rf /"]',
  'domain_allowlist = []',
  `snapshots_dir = ${JSON.stringify(snaps)}`,
  '',
].join('\n'));

const transport = new StdioClientTransport({
  command: MCP,
  args: ['--db', db, '--config', cfg],
  env: { ...process.env, HOME: tmp, DRUN_TEST_SET: 'x', DRUN_TEST_SECRET: 'no' },
  stderr: 'pipe',
});
const c = new Client({ name: 'drun-deny-test', version: '1.0' });
await c.connect(transport);
const call = (name, args = {}) => c.callTool({ name, arguments: args });
const d = { description: 'test' };

const cases = [
  ['session_mount', { path: outside, ...d }, 'mount_denied', outside],
  ['session_export', { output_dir: outside, ...d }, 'mount_denied', outside],
  ['delete_from_host', { path: join(outside, 'keep') }, 'mount_denied', outside],
  ['session_get_env', { name: 'DRUN_TEST_SECRET' }, 'env_var_denied', 'env_allowlist'],
  ['session_fetch', { url: 'http://denied.invalid/x', ...d }, 'fetch_denied', 'allowlist'],
  ['session_snapshot', { path: join(outside, 's.drun'), ...d }, 'snapshot_denied', snaps],
  ['session_restore', { path: join(outside, 'old.drun') }, 'snapshot_denied', 'snapshots_dir'],
  ['session_bash', { command: 'rm -rf / --no-preserve-root', ...d }, 'command_denied', 'rm -rf /'],
];

await R.run('every policy refusal is refused with its code', async () => {
  const r = await call('create_session');
  assert(!r.isError, `create_session: ${r.content[0].text}`);
  for (const [tool, args, code] of cases) {
    const res = await call(tool, args);
    assert(res.isError, `${tool}: expected ${code}, got ${res.content[0].text.slice(0, 200)}`);
    assertEq(JSON.parse(res.content[0].text).code, code, `${tool} code`);
  }
  assertEq(readFileSync(join(outside, 'keep'), 'utf8'), 'outside\n', 'the host file stays');
});

await R.run('each refusal is one audit row with outcome denied and the rule in the summary', async () => {
  for (const [tool, , code, rule] of cases) {
    const rows = sqlite(db, `select outcome, error_code, summary from audit where kind = 'call' and tool = '${tool}' order by id`);
    assert(rows.length >= 1, `${tool}: no audit row`);
    const row = rows[rows.length - 1];
    assertEq([row.outcome, row.error_code], ['denied', code], `${tool} outcome and code`);
    assert(row.summary.includes(code) && row.summary.includes(rule), `${tool}: summary names the rule: ${row.summary}`);
  }
});

await R.run("the cookbook's denials-in-the-last-day query lists them", async () => {
  const here = dirname(fileURLToPath(import.meta.url));
  const readme = readFileSync(join(here, '..', '..', 'schema', 'README.md'), 'utf8');
  const m = readme.match(/### 12\. Denials in the last day\s+```sql\n([\s\S]*?)```/);
  assert(m, 'the cookbook query is in schema/README.md');
  const rows = sqlite(db, m[1]);
  const calls = rows.filter((r) => r.tool !== 'session_fetch' || r.error_code === 'fetch_denied');
  for (const [tool] of cases) {
    assert(calls.some((r) => r.tool === tool), `${tool} missing from ${JSON.stringify(rows)}`);
  }
});

await R.run('a failure that is not a policy refusal stays outcome error', async () => {
  await call('session_read_file', { path: 'no/such/file', ...d });
  const rows = sqlite(db, "select outcome from audit where tool = 'session_read_file' order by id desc limit 1");
  assertEq(rows[0].outcome, 'error', 'outcome');
});

await c.close();
R.done();
