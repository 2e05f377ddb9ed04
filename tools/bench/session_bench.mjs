// session_bench.mjs - the session layer's two benchmarks, through the MCP SDK client
// against build/drun-mcp and a temp DB. Prints ratios; asserts nothing.
//
//   node tools/bench/session_bench.mjs        (run from the repo, after make and
//                                             npm ci in tests/client)
//
// (1) 100 session_write_files calls of one file each on a 1,000-file session: per-call
//     p50 (and p90), and DB growth / compressed bytes written (the growth of the blobs
//     table's stored bytes, which is what zstd made of the new content and manifests);
//     target <= 1.2.
//     The audit row of each call references the content blob instead of holding the
//     content (schema/README.md, "Audit arguments"); the line after the ratio splits the
//     growth into blobs, audit rows and the rest (pages of the other tables, free pages).
//     `--write-only` runs (1) alone (for interleaved runs against another build).
// (2) daemon RSS with 50 attached sessions of 1,000 files each: (RSS after - RSS with
//     none) / 50; target <= 256 KiB per session.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const top = resolve(here, '..', '..');
const req = createRequire(join(top, 'tests', 'client', 'package.json'));
const { Client } = await import(req.resolve('@modelcontextprotocol/sdk/client/index.js'));
const { StdioClientTransport } = await import(req.resolve('@modelcontextprotocol/sdk/client/stdio.js'));
const MCP = join(process.env.DRUN_BUILD || join(top, 'build'), 'drun-mcp');

const tmp = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'drun-sbench-'));
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));

async function start(db) {
  const t = new StdioClientTransport({ command: MCP, args: ['--db', db], stderr: 'pipe' });
  const c = new Client({ name: 'session-bench', version: '1' });
  await c.connect(t);
  const call = async (name, args = {}) => {
    const r = await c.callTool({ name, arguments: args });
    if (r.isError) throw new Error(`${name}: ${r.content[0].text}`);
    return r.structuredContent ?? r.content[0].text;
  };
  return { c, t, call };
}
const sql = (db, q) => execFileSync('sqlite3', [db, q], { encoding: 'utf8' }).trim();
const dbBytes = (db) => [db, db + '-wal'].reduce((a, f) => a + (existsSync(f) ? statSync(f).size : 0), 0);
const text = (i, n) => Array.from({ length: n }, (_, k) => `line ${k} of file ${i}: ${(i * 7919 + k * 104729) % 1000003}`).join('\n') + '\n';
const tree = (prefix) => Array.from({ length: 1000 }, (_, i) => ({ path: `${prefix}/d${i % 20}/f${i}.txt`, content: text(i, 20) }));
const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;

// (1)
{
  const db = join(tmp, 'b1.db');
  const { c, call } = await start(db);
  await call('create_session');
  await call('session_write_files', { entries: tree('w'), description: 'seed' });
  sql(db, 'PRAGMA wal_checkpoint(TRUNCATE);');
  const blobs0 = Number(sql(db, 'SELECT coalesce(sum(length(data)),0) FROM blobs'));
  const size0 = dbBytes(db);
  const pages = () => {
    try { // dbstat needs SQLITE_ENABLE_DBSTAT_VTAB (Debian's sqlite3 has it)
      return Object.fromEntries(sql(db, "SELECT name, sum(pgsize) FROM dbstat GROUP BY name").split('\n').map((l) => l.split('|')).map(([n, b]) => [n, Number(b)]));
    } catch { return {}; }
  };
  const pages0 = pages();
  const times = [];
  for (let i = 0; i < 100; i++) {
    const t0 = process.hrtime.bigint();
    await call('session_write_files', { entries: [{ path: `w/d${i % 20}/f${i * 10}.txt`, content: text(100000 + i, 20) }], description: 'edit' });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  sql(db, 'PRAGMA wal_checkpoint(TRUNCATE);');
  const blobs1 = Number(sql(db, 'SELECT coalesce(sum(length(data)),0) FROM blobs'));
  const size1 = dbBytes(db);
  times.sort((a, b) => a - b);
  console.log(`write_files p50 ${times[50].toFixed(2)} ms, p90 ${times[90].toFixed(2)} ms per call (1 file on 1,000)`);
  console.log(`db growth ${size1 - size0} B / compressed bytes written ${blobs1 - blobs0} B = ${((size1 - size0) / (blobs1 - blobs0)).toFixed(2)} (target <= 1.2)`);
  const pages1 = pages();
  const grew = Object.keys(pages1).map((n) => [n, pages1[n] - (pages0[n] || 0)]).filter(([, d]) => d !== 0).sort((a, b) => b[1] - a[1]);
  console.log(`  page growth by table/index: ${grew.map(([n, d]) => `${n} ${d}`).join(', ')}`);
  await c.close();
}
if (process.argv.includes('--write-only')) process.exit(0);

// (2)
{
  const db = join(tmp, 'b2.db');
  const { c, t, call } = await start(db);
  await call('session_list');
  const base = rss(t.pid);
  const entries = tree('r');
  for (let i = 0; i < 50; i++) {
    await call('create_session');
    await call('session_write_files', { entries, description: 'seed' });
  }
  const after = rss(t.pid);
  console.log(`rss ${base} B with no session, ${after} B with 50 attached 1,000-file sessions: ${((after - base) / 50 / 1024).toFixed(1)} KiB per session (target <= 256 KiB)`);
  await c.close();
}
