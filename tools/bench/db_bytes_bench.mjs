// db_bytes_bench.mjs - DB bytes per edit, through the MCP SDK client against
// build/drun-mcp and a temp DB. Prints ratios; asserts nothing.
//
//   node tools/bench/db_bytes_bench.mjs      (after make, and npm ci in tests/client)
//
// A session gets a 1,000-file tree (one session_write_files call), then 100 calls each
// edit one file (session_write_files of one entry). After a WAL checkpoint (TRUNCATE) the
// DB file's size is divided by what the content alone costs compressed: the stored
// (zstd) bytes of the tree's 1,000 file blobs plus the 100 edited files' blobs. Target
// <= 1.5. Then the bytes each edit cost (the growth over the 100 edits / 100), split by
// table and index with SQLite's dbstat virtual table (pages, so page fill and free space
// count): audit rows, checkpoint rows, manifests (blobs of manifest_hash), content blobs,
// steps, changes, and the rest.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, existsSync } from 'node:fs';
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
const EDITS = Number(process.env.DB_BENCH_EDITS || 100);
// DB_BENCH_VIA=bash: each edit is a session_bash command (dd into the file) instead.
const VIA = process.env.DB_BENCH_VIA || 'write_files';

const tmp = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'drun-dbbench-'));
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));
const db = join(tmp, 'b.db');
const t = new StdioClientTransport({ command: MCP, args: ['--db', db], stderr: 'pipe', env: { ...process.env, XDG_RUNTIME_DIR: tmp } });
const c = new Client({ name: 'db-bytes-bench', version: '1' });
await c.connect(t);
const call = async (name, args = {}) => {
  const r = await c.callTool({ name, arguments: args });
  if (r.isError) throw new Error(`${name}: ${r.content[0].text}`);
  return r.structuredContent ?? JSON.parse(r.content[0].text);
};
const sql = (q) => execFileSync('sqlite3', [db, q], { encoding: 'utf8' }).trim();
const dbBytes = () => [db, db + '-wal'].reduce((a, f) => a + (existsSync(f) ? statSync(f).size : 0), 0);
// Two trees. small (the default; session_bench's): 1,000 files of 20 numbered lines
// (~700 bytes), each edit rewrites one file. mixed (DB_BENCH_TREE=mixed; store_bench.c's):
// every tenth file 64 KiB, the rest 1 KiB of generated code-like text, each edit rewrites a
// few bytes of one file picked at random.
const TREE = process.env.DB_BENCH_TREE || 'small';
let rng = 12345;
const next = () => { rng = (Math.imul(rng, 1103515245) + 12345) >>> 0; return rng >>> 8; };
const W = ['the ', 'value ', 'return ', 'if (x) ', '{\n', '}\n', 'int ', 'buffer', '_len ', '= 0;\n', 'count', '++;\n', 'static ', '// note: ', 'struct ', 'size_t '];
function gen(n) {
  let s = '';
  while (s.length < n) {
    s += W[next() % 16];
    if (next() % 7 === 0) s += String(next() % 9999999).padStart(7, '0') + ' ';
  }
  return s.slice(0, n);
}
const lines = (i, n) => Array.from({ length: n }, (_, k) => `line ${k} of file ${i}: ${(i * 7919 + k * 104729) % 1000003}`).join('\n') + '\n';
const FILES = 1000;
const files = Array.from({ length: FILES }, (_, i) => (TREE === 'mixed' ? gen(i % 10 === 0 ? 65536 : 1024) : lines(i, 20)));
const name = (i) => (TREE === 'mixed' ? `src/dir${String(i % 37).padStart(2, '0')}/file${String(i).padStart(4, '0')}.c` : `w/d${i % 20}/f${i}.txt`);
const tree = files.map((content, i) => ({ path: name(i), content }));

// Pages per table/index, the manifests' and content blobs' share of the blobs table by
// their stored bytes (dbstat cannot split one table by row).
function census() {
  const rows = sql("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").split('\n').map((l) => l.split('|'));
  const by = Object.fromEntries(rows.map(([n, b]) => [n, Number(b)]));
  const manifest = Number(sql('SELECT coalesce(sum(length(data)),0) FROM blobs WHERE hash IN (SELECT manifest_hash FROM checkpoints)'));
  const all = Number(sql('SELECT coalesce(sum(length(data)),0) FROM blobs'));
  return { by, manifest, all, file: dbBytes(), free: Number(sql('PRAGMA freelist_count')) * Number(sql('PRAGMA page_size')) };
}
const checkpoint = () => sql('PRAGMA wal_checkpoint(TRUNCATE);');

const sid = (await call('create_session')).session_id;
await call('session_write_files', { session_id: sid, entries: tree, description: 'seed' });
checkpoint();
const a = census();
const content0 = Number(sql(`SELECT coalesce(sum(length(data)),0) FROM blobs WHERE hash NOT IN (SELECT manifest_hash FROM checkpoints) `));
for (let e = 0; e < EDITS; e++) {
  const i = TREE === 'mixed' ? next() % FILES : (e * 10) % FILES;
  const at = TREE === 'mixed' ? next() % (files[i].length - 32) : 0;
  const patch = TREE === 'mixed' ? `changed ${e} ${next()} ` : lines(100000 + e, 20);
  files[i] = files[i].slice(0, at) + patch + files[i].slice(at + patch.length);
  if (VIA === 'bash') {
    await call('session_bash', { session_id: sid, command: `printf '%s' '${patch}' | dd of=${name(i)} bs=1 seek=${at} conv=notrunc status=none`, description: `edit ${e}` });
  } else {
    await call('session_write_files', { session_id: sid, entries: [{ path: name(i), content: files[i] }], description: `edit ${e}` });
  }
}
checkpoint();
const b = census();
const content1 = Number(sql(`SELECT coalesce(sum(length(data)),0) FROM blobs WHERE hash NOT IN (SELECT manifest_hash FROM checkpoints) `));
if (process.env.DB_BENCH_KEEP) execFileSync('cp', [db, process.env.DB_BENCH_KEEP]);
await c.close();

const ratio = b.file / content1;
console.log(`db_bytes_bench: 1,000-file tree ${TREE === 'mixed' ? '(every tenth file 64 KiB, the rest 1 KiB)' : 'of ~700-byte files'} + ${EDITS} one-file edits (${VIA === 'bash' ? 'session_bash' : 'session_write_files'}), page size ${sql('PRAGMA page_size')}`);
console.log(`  DB ${b.file} B / content compressed ${content1} B (tree ${content0} B + edits ${content1 - content0} B) = ${ratio.toFixed(2)} (target <= 1.5)`);
console.log(`  the edits alone: DB growth ${b.file - a.file} B / blob bytes stored ${b.all - a.all} B = ${((b.file - a.file) / (b.all - a.all)).toFixed(2)}; / content compressed ${content1 - content0} B = ${((b.file - a.file) / (content1 - content0)).toFixed(2)}`);
console.log(`  after the tree alone: DB ${a.file} B / ${content0} B = ${(a.file / content0).toFixed(2)}`);
const per = (x) => ((x) / EDITS).toFixed(0);
const d = (n) => (b.by[n] || 0) - (a.by[n] || 0);
const groups = {
  'audit rows': ['audit', 'audit_by_time', 'audit_by_session', 'audit_by_tool', 'audit_refs', 'audit_head'],
  'checkpoint rows': ['checkpoints', 'checkpoints_by_label', 'checkpoints_by_manifest', 'checkpoints_by_stdout', 'checkpoints_by_stderr'],
  steps: ['checkpoint_steps'],
  changes: ['checkpoint_changes', 'checkpoint_changes_by_path'],
};
const named = new Set(Object.values(groups).flat().concat(['blobs']));
console.log(`  per edit: DB file ${per(b.file - a.file)} B, of which`);
const blobsD = d('blobs');
const manD = b.manifest - a.manifest, allD = b.all - a.all;
console.log(`    blobs table pages ${per(blobsD)} B: manifests ${per(manD)} B stored, content ${per(allD - manD)} B stored, page overhead ${per(blobsD - allD)} B`);
for (const [g, names] of Object.entries(groups)) {
  console.log(`    ${g} ${per(names.reduce((s, n) => s + d(n), 0))} B (${names.filter((n) => d(n)).map((n) => `${n} ${per(d(n))}`).join(', ')})`);
}
const rest = Object.keys({ ...a.by, ...b.by }).filter((n) => !named.has(n) && d(n) !== 0);
console.log(`    other ${per(rest.reduce((s, n) => s + d(n), 0))} B (${rest.map((n) => `${n} ${per(d(n))}`).join(', ')}), free pages ${per(b.free - a.free)} B`);
