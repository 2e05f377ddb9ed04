// test_audit_refs.mjs - audit rows keep large argument strings as blobs, through the
// official MCP SDK client: a session_write_files of a 100 KiB file grows the DB by about
// the file's compressed size once (the audit row references the file's own blob), the
// row's stored args hold a {"$blob":...} reference, and drun-admin gives the full
// arguments back and verifies the chain with its blobs.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { BUILD, Results, assert, assertEq, requireBinaries, sqlite, startDaemon } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const ADMIN = join(BUILD, 'drun-admin');
const { db, client, ok } = await startDaemon({ name: 'drun-audit-refs-test' });
const call = (name, args = {}) => ok(name, args);
const checkpoint = () => execFileSync('sqlite3', [db, 'PRAGMA wal_checkpoint(TRUNCATE);']);
const dbBytes = () => [db, db + '-wal'].reduce((a, f) => a + (existsSync(f) ? statSync(f).size : 0), 0);
const blobBytes = () => Number(sqlite(db, 'SELECT coalesce(sum(length(data)), 0) AS n FROM blobs')[0].n);

// 100 KiB of text that zstd halves or so: words from a small pseudo-random stream.
let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 8);
let content = '';
while (content.length < 100 * 1024) content += `w${rnd() % 5000} ${rnd() % 100000}\n`;
content = content.slice(0, 100 * 1024);
const sha = createHash('sha256').update(content).digest('hex');

await R.run('write_files of 100 KiB grows the DB by the compressed size once', async () => {
  await call('create_session');
  checkpoint();
  const size0 = dbBytes();
  const blobs0 = blobBytes();
  await call('session_write_files', { entries: [{ path: 'big.txt', content }], description: 'one big file' });
  checkpoint();
  const growth = dbBytes() - size0;
  const written = blobBytes() - blobs0; // the file's zstd frame and the new manifest
  const stored = Number(sqlite(db, `SELECT length(data) AS n FROM blobs WHERE hash = x'${sha}'`)[0].n);
  assert(stored > 20 * 1024 && stored < 90 * 1024, `the file compresses to ${stored} B`);
  assert(written < stored + 2048, `blob bytes written ${written} for a ${stored} B frame: the content is stored once`);
  // Twice would be >= 2 x stored; page and row overhead stays well under that.
  assert(growth < 1.35 * stored, `db grew ${growth} B for ${stored} B of compressed content (${(growth / stored).toFixed(2)}x)`);
  console.log(`    db growth ${growth} B / compressed ${stored} B = ${(growth / stored).toFixed(2)}`);
});

await R.run('the audit row holds a reference, listed in audit_refs', async () => {
  const row = sqlite(db, "SELECT id, args_codec, CAST(args AS TEXT) AS args FROM audit WHERE tool = 'session_write_files' ORDER BY id DESC LIMIT 1")[0];
  assertEq(row.args_codec, 0, 'small enough to stay uncompressed');
  const args = JSON.parse(row.args);
  assertEq(args.entries[0].content, { $blob: sha, bytes: 100 * 1024 }, 'reference in place of the content');
  assertEq(args.entries[0].path, 'big.txt', 'small values inline');
  assertEq(args.description, 'one big file', 'description inline');
  const refs = sqlite(db, `SELECT lower(hex(hash)) AS h FROM audit_refs WHERE audit_id = ${row.id}`);
  assertEq(refs.map((r) => r.h), [sha], 'audit_refs lists the blob');
});

await R.run('drun-admin audit show gives the full arguments; --raw the stored ones; verify ok', async () => {
  const id = sqlite(db, "SELECT id FROM audit WHERE tool = 'session_write_files' ORDER BY id DESC LIMIT 1")[0].id;
  const show = JSON.parse(execFileSync(ADMIN, ['--db', db, '--json', 'audit', 'show', String(id)], { encoding: 'utf8', maxBuffer: 1 << 26 }));
  const full = JSON.parse(show.args);
  assert(full.entries[0].content === content, 'content expanded exactly');
  const raw = JSON.parse(execFileSync(ADMIN, ['--db', db, '--json', 'audit', 'show', '--raw', String(id)], { encoding: 'utf8' }));
  assertEq(JSON.parse(raw.args).entries[0].content.$blob, sha, '--raw keeps the reference');
  const tail = JSON.parse(execFileSync(ADMIN, ['--db', db, '--json', 'audit', 'tail', '-n', '1', '--tool', 'session_write_files'], { encoding: 'utf8', maxBuffer: 1 << 26 }));
  assert(JSON.parse(tail[0].args).entries[0].content === content, 'tail --json expands too');
  const v = spawnSync(ADMIN, ['--db', db, 'audit', 'verify'], { encoding: 'utf8' });
  assertEq(v.status, 0, `verify: ${v.stdout}${v.stderr}`);
});

await R.run('an agent object with a "$blob" key round-trips exactly', async () => {
  // An unknown tool argument is refused by schema validation, so use a string-valued
  // field the tool keeps: the description carries reference-like text.
  const tricky = '{"$blob":"' + '0'.repeat(64) + '","bytes":3}';
  await call('session_write_files', { entries: [{ path: 'x.txt', content: tricky }], description: tricky });
  const id = sqlite(db, "SELECT id FROM audit WHERE tool = 'session_write_files' ORDER BY id DESC LIMIT 1")[0].id;
  const show = JSON.parse(execFileSync(ADMIN, ['--db', db, '--json', 'audit', 'show', String(id)], { encoding: 'utf8' }));
  assertEq(JSON.parse(show.args).entries[0].content, tricky, 'a string that looks like a reference stays a string');
  assertEq(sqlite(db, `SELECT count(*) AS n FROM audit_refs WHERE audit_id = ${id}`)[0].n, 0, 'no reference made');
});

await client.close();
R.done();
