// test_snapshot_tools.mjs - session_snapshot, list_snapshots, session_restore and
// snapshot_on_close through the official MCP SDK client.
//
// Drives the real build/drun-mcp (no sandbox needed: files are written with
// session_write_files) against temp DBs and a config whose snapshots_dir is a temp
// directory. Round trips are checked in the DB with sqlite3 (every checkpoint's manifest
// hash, label, status and the head identical), export files are restored into a second
// drun-mcp on an empty DB, and an original-format .drun file (made here as the original
// does: "DRUN" + zstd level 3 of the JSON) restores. Every bad input must give a clear
// error and leave no new session and no leftover snapshot.
import { execFileSync } from 'node:child_process';
import {
  copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, truncateSync,
  rmSync, utimesSync, writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp, sqlite } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
const tmp = makeTmp();
const db = join(tmp, 'a.db');
const db2 = join(tmp, 'b.db');
const cfg = join(tmp, 'config.toml');
const snaps = join(tmp, 'snaps');
const outside = join(tmp, 'outside');
mkdirSync(outside);

function writeConfig(extra = '', maxSessions = 20) {
  writeFileSync(cfg, `snapshots_dir = ${JSON.stringify(snaps)}\nmax_sessions = ${maxSessions}\n${extra}`);
  // The reload is keyed on stat; make each rewrite visibly newer.
  const t = Date.now() / 1000 + (writeConfig.n = (writeConfig.n || 0) + 1);
  utimesSync(cfg, t, t);
}
writeConfig();

async function start(dbPath) {
  const transport = new StdioClientTransport({
    command: MCP, args: ['--db', dbPath, '--config', cfg], env: { ...process.env, HOME: tmp },
    stderr: process.env.DRUN_TEST_STDERR ? 'inherit' : 'pipe',
  });
  const client = new Client({ name: 'drun-snapshot-test', version: '1.0' });
  await client.connect(transport);
  const call = async (name, args = {}) => {
    const r = await client.callTool({ name, arguments: args });
    const text = r.content[0].text;
    if (r.isError) {
      let e;
      try {
        e = JSON.parse(text);
      } catch {
        e = { code: 'plain', message: text };
      }
      return { error: e };
    }
    try {
      return { json: JSON.parse(text), text };
    } catch {
      return { text };
    }
  };
  return { client, call };
}

function ok(r, what) {
  if (r.error) throw new Error(`${what}: unexpected error ${JSON.stringify(r.error)}`);
  return r;
}
function errIs(r, code, what, re) {
  if (!r.error) throw new Error(`${what}: expected ${code}, got ${String(r.text).slice(0, 200)}`);
  assertEq(r.error.code, code, `${what}: code (message: ${r.error.message})`);
  const m = r.error.message;
  assert(typeof m === 'string' && m.length > 0 && m[0] === m[0].toLowerCase(), `${what}: message '${m}'`);
  if (re) assert(re.test(m), `${what}: message '${m}' does not match ${re}`);
  return r.error;
}
const D = { description: 'test' };

// The DB facts a round trip must keep: every checkpoint (any status) and the head.
function history(dbPath, sid) {
  const cps = sqlite(dbPath, `SELECT id, parent, tool, command, label, status, hex(manifest_hash) AS m,
    hex(stdout_hash) AS o, file_count FROM checkpoints WHERE session_id='${sid}' ORDER BY id`);
  const s = sqlite(dbPath, `SELECT head, label, state FROM sessions WHERE id='${sid}'`)[0];
  return { cps, head: s.head, label: s.label };
}
const openSessions = (p) => sqlite(p, 'SELECT id FROM sessions WHERE state=0 ORDER BY id').map((r) => r.id);
const snapNames = (p) => sqlite(p, 'SELECT name FROM snapshots ORDER BY name').map((r) => r.name);

// An original-drun .drun file: "DRUN" + zstd (level 3) of the JSON (reference 6.1).
const DRUN_JSON = {
  checkpoint_idx: 2, parent: null, label: 'legacy', overlays: {},
  blobs: [[104, 105, 10], [98, 121, 101, 10], []],
  checkpoints: [
    { id: 0, stdout: '', stderr: '', steps: [], files: {} },
    { id: 1, stdout: '', stderr: '', tool: 'session_write_files', description: 'add', label: 'start',
      steps: [{ tool: 'session_read_file', description: 'look' }], files: { 'a.txt': 0, 'dir/b.txt': 1, empty: 2 } },
    { id: 2, stdout: 'out\n', stderr: 'oops\n', command: 'rm a.txt', exit_code: 1, tool: 'session_bash',
      steps: [], files: { 'dir/b.txt': 0, empty: 2 } },
  ],
  chat_log: [{ prompt: 'hello', response: 'hi' }],
};
function makeDrun(path, json = DRUN_JSON) {
  const z = execFileSync('zstd', ['-3', '-q', '-c'], { input: JSON.stringify(json) });
  writeFileSync(path, Buffer.concat([Buffer.from('DRUN'), z]));
}

const A = await start(db);
const call = A.call;

await R.run('tools/list: the snapshot tools in the reference order', async () => {
  const names = (await A.client.listTools()).tools.map((t) => t.name);
  const want = ['get_config', 'get_system_instructions', 'list_snapshots', 'session_snapshot', 'session_restore'];
  assertEq(names.filter((n) => want.includes(n)), want, 'order');
  const t = (await A.client.listTools()).tools.find((x) => x.name === 'session_snapshot');
  assertEq(t.inputSchema.required, ['description'], 'description required');
});

await R.run('list_snapshots: a missing snapshots_dir is an empty list', async () => {
  assert(!existsSync(snaps), 'dir absent');
  assertEq(ok(await call('list_snapshots'), 'list').json, [], 'empty');
});

let S1;
await R.run('build a session with labels, a delete and a rollback', async () => {
  S1 = ok(await call('create_session'), 'create').json.session_id;
  ok(await call('session_write_files', { entries: [{ path: 'a.txt', content: 'one\n' }, { path: 'src/m.c', content: 'int x;\n' }], ...D }), 'w1');
  ok(await call('session_checkpoint_label', { label: 'first', ...D }), 'label');
  ok(await call('session_write_files', { entries: [{ path: 'a.txt', content: 'two\n' }], ...D }), 'w2');
  ok(await call('session_delete_files', { paths: ['src/m.c'], ...D }), 'del');
  ok(await call('session_rollback', { checkpoint_id: 2, ...D }), 'rollback');
  ok(await call('session_write_files', { entries: [{ path: 'b.bin', content: 'AAEC/w==', is_base64: true }], ...D }), 'w3');
  ok(await call('session_label', { label: 'main work' }), 'session label');
});

await R.run('session_snapshot: DB only, result keys, step appended, listed', async () => {
  const r = ok(await call('session_snapshot', { name: 'snap1', description: 'before refactor' }), 'snap').json;
  assertEq([r.name, r.session_id, r.snapshot_path, r.size_bytes], ['snap1', S1, null, null], 'keys');
  assert(Object.hasOwn(r, 'snapshot_path') && Object.hasOwn(r, 'size_bytes'), 'the reference\'s snapshot_path is kept, null for a DB-only snapshot');
  assert(Number.isInteger(r.snapshot_id) && r.checkpoints >= 4, `counts ${JSON.stringify(r)}`);
  const h = ok(await call('session_history', D), 'h').json;
  const steps = h[h.length - 1].steps || [];
  assert(steps.some((s) => s.tool === 'session_snapshot' && s.description === 'before refactor'), 'step');
  const l = ok(await call('list_snapshots'), 'list').json;
  assertEq(l.length, 1, 'one entry');
  assertEq([l[0].kind, l[0].name, l[0].session_id, l[0].checkpoint_count, l[0].description, l[0].label],
    ['db', 'snap1', S1, r.checkpoints, 'before refactor', 'main work'], 'entry');
  assert(l[0].path === null && l[0].size_bytes === null, `the reference's path and size_bytes are kept, null in the DB: ${JSON.stringify(l[0])}`);
  assert(/^\d{4}-\d\d-\d\dT/.test(l[0].created), 'created');
});

await R.run('session_snapshot: default name is <session>-<UTC time>', async () => {
  const r = ok(await call('session_snapshot', D), 'snap').json;
  assert(new RegExp(`^${S1}-\\d{8}T\\d{9}Z$`).test(r.name), `name ${r.name}`);
});

let R1;
await R.run('session_restore by name: full history, labels and head identical; active', async () => {
  const before = history(db, S1);
  const r = ok(await call('session_restore', { name: 'snap1' }), 'restore').json;
  R1 = r.session_id;
  assert(R1 !== S1 && /^[0-9a-f]{8}$/.test(R1), 'new id');
  assertEq([r.snapshot_name, r.label, r.checkpoint_id], ['snap1', 'main work', before.head], 'state');
  const after = history(db, R1);
  assertEq(after.cps, before.cps, 'every checkpoint (discarded one included)');
  assertEq([after.head, after.label], [before.head, before.label], 'head and label');
  assert(before.cps.some((c) => c.status === 1), 'the fixture has a discarded checkpoint');
  assertEq(ok(await call('get_session_state', D), 'state').json.session_id, R1, 'active');
  const files = ok(await call('session_read_files', { paths: ['a.txt', 'b.bin'], ...D }), 'read').json;
  assertEq([files[0].content, files[1].encoding, files[1].content], ['two\n', 'base64', 'AAEC/w=='], 'head files');
  const owner = sqlite(db, `SELECT owner_pid FROM sessions WHERE id='${R1}'`)[0].owner_pid;
  assert(owner > 0, 'claimed by this process');
  // Every checkpoint's files: roll back to the labelled one and read it.
  ok(await call('session_rollback', { checkpoint_label: 'first', ...D }), 'rollback');
  const f1 = ok(await call('session_read_files', { paths: ['a.txt', 'src/m.c'], ...D }), 'read1').json;
  assertEq(f1.map((f) => f.content), ['one\n', 'int x;\n'], 'checkpoint "first"');
});

const exp1 = join(snaps, 'sub', 's1.drunsql');
await R.run('session_snapshot with path: exports a file, listed with bytes and mtime', async () => {
  ok(await call('session_switch', { session_id: S1 }), 'switch');
  const r = ok(await call('session_snapshot', { name: 'snap2', path: exp1, ...D }), 'snap').json;
  assertEq([r.snapshot_path, r.name], [exp1, 'snap2'], 'keys');
  assertEq(r.size_bytes, statSync(exp1).size, 'size');
  assertEq(readFileSync(exp1).subarray(0, 15).toString(), 'SQLite format 3', 'a SQLite file');
  makeDrun(join(snaps, 'legacy.drun'));
  writeFileSync(join(snaps, 'legacy.drun.meta'), JSON.stringify({ label: 'legacy', checkpoint_count: 3 }));
  writeFileSync(join(snaps, 'notes.txt'), 'not a snapshot');
  const l = ok(await call('list_snapshots'), 'list').json;
  const files = l.filter((e) => e.kind !== 'db');
  assertEq(files.map((e) => [e.kind, e.path]), [['drun', join(snaps, 'legacy.drun')]], 'top level only, sorted');
  assertEq([files[0].label, files[0].checkpoint_count], ['legacy', 3], 'meta');
  assert(typeof files[0].mtime === 'string' && files[0].size_bytes > 4, 'bytes, mtime');
});

await R.run('session_snapshot: same path again overwrites atomically, no temp left', async () => {
  const first = readFileSync(exp1);
  ok(await call('session_write_files', { entries: [{ path: 'later.txt', content: 'later\n' }], ...D }), 'w');
  ok(await call('session_snapshot', { name: 'snap3', path: exp1, ...D }), 'snap');
  assert(!readFileSync(exp1).equals(first), 'replaced');
  assertEq(readdirSync(join(snaps, 'sub')), ['s1.drunsql'], 'no temp files');
});

await R.run('session_restore by path (same DB: the exported name is taken, a fresh one is used)', async () => {
  const r = ok(await call('session_restore', { path: exp1 }), 'restore').json;
  assert(r.snapshot_name !== 'snap3' && r.snapshot_name.startsWith('s1-'), `name ${r.snapshot_name}`);
  const files = ok(await call('session_read_files', { paths: ['later.txt'], ...D }), 'read').json;
  assertEq(files[0].content, 'later\n', 'content');
  assertEq(history(db, r.session_id).cps, history(db, S1).cps.slice(0, history(db, r.session_id).cps.length), 'history');
});

await R.run('session_restore of an original .drun file', async () => {
  const r = ok(await call('session_restore', { path: join(snaps, 'legacy.drun') }), 'restore').json;
  assertEq([r.label, r.checkpoint_id, r.workspace_file_count], ['legacy', 2, 2], 'state');
  const f = ok(await call('session_read_files', { paths: ['dir/b.txt', 'empty'], ...D }), 'read').json;
  assertEq(f.map((x) => x.content), ['hi\n', ''], 'files');
  const h = ok(await call('session_history', D), 'h').json;
  assertEq(h.map((c) => c.label ?? null), [null, 'start', null], 'labels');
  assertEq([h[2].command, h[2].exit_code], ['rm a.txt', 1], 'command');
});

// ---- bad inputs: a clear error, no new session, no leftover snapshot ------------------------
async function unchanged(what, fn) {
  const s0 = openSessions(db), n0 = snapNames(db);
  const l0 = ok(await call('list_snapshots'), 'list').json.filter((e) => e.kind === 'db').length;
  await fn();
  assertEq(openSessions(db), s0, `${what}: sessions`);
  assertEq(snapNames(db), n0, `${what}: snapshots`);
  assertEq(ok(await call('list_snapshots'), 'list').json.filter((e) => e.kind === 'db').length, l0, `${what}: listed`);
}

await R.run('session_snapshot: path with .. is snapshot_denied', async () => unchanged('dotdot', async () => {
  errIs(await call('session_snapshot', { path: `${snaps}/../outside/x`, ...D }), 'snapshot_denied', 'dotdot', /must not contain '\.\.'/);
  assert(!existsSync(join(outside, 'x')), 'nothing written');
}));

await R.run('session_snapshot: paths outside snapshots_dir are snapshot_denied', async () => unchanged('outside', async () => {
  errIs(await call('session_snapshot', { path: join(outside, 'x'), ...D }), 'snapshot_denied', 'outside', /must be under/);
  errIs(await call('session_snapshot', { path: snaps + 'x/y', ...D }), 'snapshot_denied', 'prefix is not a component');
  errIs(await call('session_snapshot', { path: 'snaps/x', ...D }), 'snapshot_denied', 'relative');
  errIs(await call('session_snapshot', { path: snaps + '/', ...D }), 'invalid_arguments', 'the dir itself');
}));

await R.run('session_snapshot: a symlink inside snapshots_dir is not followed', async () => unchanged('link', async () => {
  symlinkSync(outside, join(snaps, 'link'));
  errIs(await call('session_snapshot', { path: join(snaps, 'link', 'x.db'), ...D }), 'snapshot_denied', 'link',
    /no snapshot was kept/);
  assertEq(readdirSync(outside), [], 'nothing outside');
}));

await R.run('session_snapshot: a failed export keeps no DB snapshot and no half file', async () => unchanged('export fails', async () => {
  mkdirSync(join(snaps, 'adir'));
  errIs(await call('session_snapshot', { name: 'willfail', path: join(snaps, 'adir'), ...D }), 'internal_error', 'target is a dir', /directory/);
  assertEq(readdirSync(join(snaps, 'adir')), [], 'dir untouched');
  assertEq(readdirSync(snaps).filter((n) => n.startsWith('.')), [], 'no temp left');
}));

await R.run('session_snapshot: taken and malformed names are invalid_arguments', async () => unchanged('names', async () => {
  errIs(await call('session_snapshot', { name: 'snap1', ...D }), 'invalid_arguments', 'taken', /'snap1' is already taken/);
  errIs(await call('session_snapshot', { name: 'snap1', path: join(snaps, 'n.db'), ...D }), 'invalid_arguments', 'taken with path');
  assert(!existsSync(join(snaps, 'n.db')), 'no file for a taken name');
  errIs(await call('session_snapshot', { name: '../x', ...D }), 'invalid_arguments', 'bad name');
  errIs(await call('session_snapshot', { name: 'x'.repeat(129), ...D }), 'invalid_arguments', 'long name');
}));

await R.run('session_restore: both, neither, unknown name, missing file', async () => unchanged('restore args', async () => {
  errIs(await call('session_restore', {}), 'invalid_arguments', 'neither', /exactly one/);
  errIs(await call('session_restore', { name: 'snap1', path: exp1 }), 'invalid_arguments', 'both', /exactly one/);
  errIs(await call('session_restore', { name: 'nope' }), 'invalid_arguments', 'unknown', /no snapshot named 'nope'/);
  errIs(await call('session_restore', { path: join(tmp, 'missing.db') }), 'invalid_arguments', 'missing');
  mkdirSync(join(snaps, 'a-directory'), { recursive: true });
  errIs(await call('session_restore', { path: join(snaps, 'a-directory') }), 'invalid_arguments', 'a directory');
  // snapshots_dir itself is drun's own directory: behind the read door like the DB.
  errIs(await call('session_restore', { path: snaps }), 'snapshot_denied', 'snapshots_dir itself');
  errIs(await call('session_restore', { path: '/dev/zero' }), 'snapshot_denied', 'a device is never opened', /behind no door/);
}));

await R.run('session_restore: a truncated or damaged .drun file is refused, nothing kept', async () => unchanged('bad drun', async () => {
  const t = join(tmp, 'trunc.drun');
  copyFileSync(join(snaps, 'legacy.drun'), t);
  truncateSync(t, statSync(t).size - 6);
  errIs(await call('session_restore', { path: t }), 'internal_error', 'truncated');
  const bad = join(tmp, 'badidx.drun');
  makeDrun(bad, { ...DRUN_JSON, checkpoints: [{ id: 0, stdout: '', stderr: '', files: { a: 9 } }], checkpoint_idx: 0 });
  errIs(await call('session_restore', { path: bad }), 'internal_error', 'blob index out of range');
}));

await R.run('session_restore: a truncated export file is refused, nothing kept', async () => unchanged('bad export', async () => {
  const t = join(tmp, 'trunc.db');
  copyFileSync(exp1, t);
  truncateSync(t, 2048);
  errIs(await call('session_restore', { path: t }), 'internal_error', 'truncated');
}));

await R.run('session_restore reads only from snapshots_dir or mount_allowlist (not any host path)', async () => {
  // The reference reads any host path (its section 14, item 18); with a mount allowlist
  // set, a file elsewhere is refused and a link out of snapshots_dir does not help.
  const allowed = join(tmp, 'allowed');
  mkdirSync(allowed, { recursive: true });
  copyFileSync(exp1, join(allowed, 'in.db'));
  copyFileSync(exp1, join(outside, 'out.db'));
  symlinkSync(join(outside, 'out.db'), join(snaps, 'link-out.db'));
  writeConfig(`mount_allowlist = [${JSON.stringify(allowed)}]\n`);
  try {
    await unchanged('outside', async () => {
      errIs(await call('session_restore', { path: join(outside, 'out.db') }), 'snapshot_denied', 'outside',
        /not permitted.*snapshots_dir/);
      errIs(await call('session_restore', { path: join(snaps, 'link-out.db') }), 'snapshot_denied',
        'a link in snapshots_dir pointing out');
      errIs(await call('session_restore', { path: 'rel/x.db' }), 'invalid_arguments', 'relative', /not absolute/);
    });
    const r = ok(await call('session_restore', { path: join(allowed, 'in.db') }), 'from the allowlist').json;
    assert(typeof r.session_id === 'string', 'restored from a mount_allowlist path');
  } finally {
    rmSync(join(snaps, 'link-out.db'));
    writeConfig();
  }
});

await R.run('session_restore: max_sessions reached (by name and by path), nothing kept', async () => {
  writeConfig('', openSessions(db).length);
  await unchanged('limit', async () => {
    const e = errIs(await call('session_restore', { name: 'snap1' }), 'session_limit_reached', 'by name');
    assertEq(e.detail, { limit: openSessions(db).length }, 'detail');
    errIs(await call('session_restore', { path: exp1 }), 'session_limit_reached', 'by path');
  });
  writeConfig();
});

// ---- a second drun-mcp on an empty DB ------------------------------------------------------
await R.run('export restored into a second drun-mcp on an empty DB: identical', async () => {
  const B = await start(db2);
  try {
    // First a tampered copy: a blob whose bytes no longer match its hash.
    const bad = join(tmp, 'tampered.db');
    copyFileSync(exp1, bad);
    const n = sqlite(bad, "SELECT count(*) AS n FROM blobs WHERE codec=0 AND size>0")[0].n;
    assert(n > 0, 'a raw blob to tamper with');
    execFileSync('sqlite3', [bad, "UPDATE blobs SET data=CAST('tampered!' AS BLOB), size=9 WHERE codec=0 AND size>0"]);
    const e = errIs(await B.call('session_restore', { path: bad }), 'internal_error', 'tampered');
    assert(/hash|corrupt|damaged|match|blob/i.test(e.message), `message ${e.message}`);
    assertEq([openSessions(db2), snapNames(db2)], [[], []], 'nothing kept');
    const r = ok(await B.call('session_restore', { path: exp1 }), 'restore').json;
    assertEq(r.snapshot_name, 'snap3', 'keeps its exported name');
    const src = sqlite(db, "SELECT source_session_id AS s FROM snapshots WHERE name='snap3'")[0].s;
    const a = history(db, src), b = history(db2, r.session_id);
    assertEq(b.cps.length, sqlite(db, "SELECT count(*) AS n FROM snapshot_checkpoints WHERE snapshot_id=(SELECT id FROM snapshots WHERE name='snap3')")[0].n, 'all checkpoints');
    assertEq(b.cps, a.cps.slice(0, b.cps.length), 'checkpoints identical');
    assertEq(b.head, r.checkpoint_id, 'head');
    const f = ok(await B.call('session_read_files', { paths: ['a.txt', 'later.txt', 'b.bin'], ...D }), 'read').json;
    assertEq(f.map((x) => x.content), ['two\n', 'later\n', 'AAEC/w=='], 'files');
  } finally {
    await B.client.close();
  }
});

// ---- snapshot_on_close ----------------------------------------------------------------------
await R.run('snapshot_on_close: close snapshots first, then closes', async () => {
  writeConfig('snapshot_on_close = true\n');
  const id = ok(await call('create_session'), 'create').json.session_id;
  ok(await call('session_write_files', { entries: [{ path: 'k', content: 'keep\n' }], ...D }), 'w');
  const r = ok(await call('session_close'), 'close');
  assert(new RegExp(`^closed ${id}; snapshot '${id}-close-\\d{8}T\\d{9}Z'$`).test(r.text), `text ${r.text}`);
  const rows = sqlite(db, `SELECT name, description FROM snapshots WHERE source_session_id='${id}'`);
  assertEq(rows.length, 1, 'one snapshot');
  assertEq(sqlite(db, `SELECT state FROM sessions WHERE id='${id}'`)[0].state, 1, 'closed');
  const back = ok(await call('session_restore', { name: rows[0].name }), 'restore').json;
  assertEq(back.workspace_file_count, 1, 'restorable');
});

await R.run('snapshot_on_close: a failing snapshot leaves the session open', async () => {
  const id = ok(await call('create_session'), 'create').json.session_id;
  execFileSync('sqlite3', ['-cmd', '.timeout 120000', db, "CREATE TRIGGER t_block BEFORE INSERT ON snapshots BEGIN SELECT RAISE(ABORT, 'blocked by test'); END;"]);
  try {
    const e = errIs(await call('session_close'), 'internal_error', 'close', /left open/);
    assert(e.message.includes(id), 'names the session');
  } finally {
    execFileSync('sqlite3', ['-cmd', '.timeout 120000', db, 'DROP TRIGGER t_block']);
  }
  assertEq(sqlite(db, `SELECT state FROM sessions WHERE id='${id}'`)[0].state, 0, 'still open');
  assertEq(sqlite(db, `SELECT count(*) AS n FROM snapshots WHERE source_session_id='${id}'`)[0].n, 0, 'no snapshot');
  assertEq(ok(await call('get_session_state', D), 'state').json.session_id, id, 'still active');
  ok(await call('session_close'), 'close works once the snapshot can be taken');
  assertEq(sqlite(db, `SELECT state FROM sessions WHERE id='${id}'`)[0].state, 1, 'closed');
});

await R.run('snapshot_on_close false: close takes no snapshot', async () => {
  writeConfig('snapshot_on_close = false\n');
  const id = ok(await call('create_session'), 'create').json.session_id;
  assertEq(ok(await call('session_close'), 'close').text, `closed ${id}`, 'text');
  assertEq(sqlite(db, `SELECT count(*) AS n FROM snapshots WHERE source_session_id='${id}'`)[0].n, 0, 'none');
});

await R.run('limits: a 128-character name and a 4095-byte path at the edge, one past refused', async () => {
  ok(await call('create_session'), 'create');
  const n128 = 'n'.repeat(128);
  assertEq(ok(await call('session_snapshot', { name: n128, ...D }), 'edge').json.name, n128, '128 ok');
  errIs(await call('session_snapshot', { name: 'n'.repeat(129), ...D }), 'invalid_arguments', '129');
  errIs(await call('session_snapshot', { path: '/' + 'p'.repeat(4095), ...D }), 'invalid_arguments', 'path 4096');
  errIs(await call('session_snapshot', { path: '/' + 'p'.repeat(4094), ...D }), 'snapshot_denied', 'path 4095 is checked');
});

await R.run('list_snapshots: 1000 snapshot files listed, 1001 is result_too_large', async () => {
  const have = ok(await call('list_snapshots'), 'list').json.filter((e) => e.kind !== 'db').length;
  const drun = readFileSync(join(snaps, 'legacy.drun'));
  for (let i = have; i < 1000; i++) writeFileSync(join(snaps, `m${String(i).padStart(4, '0')}.drun`), drun);
  assertEq(ok(await call('list_snapshots'), 'list').json.filter((e) => e.kind !== 'db').length, 1000, 'at the cap');
  writeFileSync(join(snaps, 'zz.drun'), drun);
  errIs(await call('list_snapshots'), 'result_too_large', 'past the cap', /more than 1000 snapshot files/);
});

await A.client.close();
R.done();
