// test_sessions.mjs - the session tools through the official MCP SDK client.
//
// Starts build/drun-mcp against a temp DB and drives every session tool: success
// result keys, each error code, rollback-then-mutate discard (checked in the DB with
// sqlite3), squash/drop keeping ids and fork parents valid, read paging over multi-byte
// text, a catastrophic pattern, 1,000 files in one write, session_diff against
// `git diff --no-index` on generated pairs, persistence across a kill -9, and two
// daemons on one DB.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp, requireBinaries, sqlite, waitFor } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
const db = join(tmp, 'sessions.db');

async function start(dbPath = db) {
  const transport = new StdioClientTransport({ command: MCP, args: ['--db', dbPath], stderr: process.env.DRUN_TEST_STDERR ? 'inherit' : 'pipe' });
  const client = new Client({ name: 'drun-sessions-test', version: '1.0' });
  await client.connect(transport);
  return { client, transport, pid: transport.pid };
}

// Calls a tool; returns {error: {code,message,detail}} or {json} or {text} or {raw}.
function caller(client) {
  return async (name, args = {}) => {
    const r = await client.callTool({ name, arguments: args });
    const block = r.content[0];
    if (r.isError) {
      let e;
      try {
        e = JSON.parse(block.text);
      } catch {
        e = { code: 'plain', message: block.text };
      }
      return { error: e, raw: r };
    }
    if (block.type !== 'text') return { raw: r };
    try {
      return { json: JSON.parse(block.text), text: block.text, raw: r };
    } catch {
      return { text: block.text, raw: r };
    }
  };
}

function ok(r, what) {
  if (r.error) throw new Error(`${what}: unexpected error ${JSON.stringify(r.error)}`);
  return r;
}
function errIs(r, code, what) {
  if (!r.error) throw new Error(`${what}: expected error ${code}, got ${String(JSON.stringify(r.json ?? r.text)).slice(0, 200)}`);
  assertEq(r.error.code, code, `${what}: error code (message: ${r.error.message})`);
  assert(typeof r.error.message === 'string' && r.error.message.length > 0, `${what}: message`);
  return r.error;
}
const STATE_KEYS = ['session_id', 'checkpoint_id', 'stdout_bytes', 'stderr_bytes', 'workspace_file_count',
  'files_added_count', 'files_modified_count', 'files_removed_count'];
function isState(j, what) {
  for (const k of STATE_KEYS) assert(k in j, `${what}: SessionState lacks ${k}`);
}
const SUMMARY_KEYS = ['checkpoint_id', 'stdout_bytes', 'stderr_bytes', 'file_count', 'files_added_count',
  'files_modified_count', 'files_removed_count'];
const D = { description: 'test' };

const A = await start();
const call = caller(A.client);

await R.run('tools/list has every session tool in the fixed order', async () => {
  const names = (await A.client.listTools()).tools.map((t) => t.name);
  const want = ['create_session', 'session_switch', 'session_fork', 'session_list', 'session_close',
    'session_history', 'get_session_state', 'session_rollback', 'session_read_file', 'session_read_files',
    'session_write_files', 'session_delete_files', 'session_diff', 'session_tree', 'session_label',
    'session_checkpoint_label', 'session_checkpoint_squash', 'session_checkpoint_drop', 'session_merge',
    'checkpoint_read_stdstreams', 'session_chat_record'];
  const got = names.filter((n) => want.includes(n));
  assertEq(got, want, 'order');
});

await R.run('no active session before create_session', async () => {
  errIs(await call('get_session_state', D), 'no_active_session', 'state');
  errIs(await call('session_write_files', { entries: [{ path: 'a', content: 'x' }], ...D }), 'no_active_session', 'write');
});

let S1;
await R.run('create_session: SessionState at checkpoint 0', async () => {
  const r = ok(await call('create_session'), 'create');
  isState(r.json, 'create');
  assert(/^[0-9a-f]{8}$/.test(r.json.session_id), `id ${r.json.session_id}`);
  assertEq([r.json.checkpoint_id, r.json.workspace_file_count], [0, 0], 'cp0');
  S1 = r.json.session_id;
});

await R.run('session_write_files: one checkpoint, deltas, normalized keys', async () => {
  const r = ok(await call('session_write_files', { entries: [
    { path: 'a.txt', content: 'héllo wörld\n' },
    { path: './src//main.c', content: 'int main(void) { return 0; }\n' },
    { path: 'bin.dat', content: Buffer.from([0, 1, 2, 255]).toString('base64'), is_base64: true },
    { path: 'a.txt', content: 'later wins: €uro\n' },
  ], ...D }), 'write');
  isState(r.json, 'write');
  assertEq([r.json.checkpoint_id, r.json.workspace_file_count, r.json.files_added_count], [1, 3, 3], 'state');
  const t = ok(await call('session_read_file', { path: 'src/main.c', ...D }), 'read');
  assertEq(t.text, 'int main(void) { return 0; }\n', 'normalized key readable');
  assertEq(ok(await call('session_read_file', { path: 'a.txt', ...D }), 'r').text, 'later wins: €uro\n', 'dup');
  const m = ok(await call('session_write_files', { entries: [{ path: 'a.txt', content: 'changed\n' }], ...D }), 'w2');
  assertEq([m.json.checkpoint_id, m.json.files_added_count, m.json.files_modified_count], [2, 0, 1], 'modify');
});

await R.run('session_write_files errors: bad keys reject the whole batch, bad base64', async () => {
  for (const bad of ['', '/abs', '../up', 'a/../../x', 'tab\there', 'x'.repeat(256), ('d/').repeat(2100) + 'f']) {
    const e = errIs(await call('session_write_files', { entries: [{ path: 'ok.txt', content: 'x' }, { path: bad, content: 'y' }], ...D }), 'invalid_workspace_path', `key ${JSON.stringify(bad).slice(0, 20)}`);
    assert(!e.message.includes('\n'), 'one-line message');
  }
  errIs(await call('session_write_files', { entries: [{ path: 'a.txt/under', content: 'x' }], ...D }), 'invalid_workspace_path', 'file/dir conflict with head');
  errIs(await call('session_write_files', { entries: [{ path: 'p', content: 'x' }, { path: 'p/q', content: 'y' }], ...D }), 'invalid_workspace_path', 'conflict in batch');
  errIs(await call('session_write_files', { entries: [{ path: 'b64', content: '!!!', is_base64: true }], ...D }), 'internal_error', 'base64');
  const st = ok(await call('get_session_state', D), 'state');
  assertEq(st.json.checkpoint_id, 2, 'nothing written by any failed batch');
  const e = errIs(await call('session_read_file', { path: 'ok.txt', ...D }), 'file_not_found', 'ok.txt not written');
  assert(e.message.includes("'ok.txt'"), 'message names the key');
});

await R.run('session_read_file: paging never splits UTF-8; base64 fallback; image block', async () => {
  const text = 'aé€😀b'.repeat(50); // 1+2+3+4+1 bytes per unit
  ok(await call('session_write_files', { entries: [{ path: 'u.txt', content: text }, { path: 'img.PNG', content: Buffer.from('png!').toString('base64'), is_base64: true }], ...D }), 'w');
  const bytes = Buffer.from(text);
  let off = 0, rebuilt = '', pages = 0;
  while (true) {
    const r = ok(await call('session_read_file', { path: 'u.txt', offset: off, limit: 7, ...D }), 'page');
    for (const k of ['offset', 'length', 'total_bytes', 'has_more', 'encoding', 'content']) assert(k in r.json, `page key ${k}`);
    assertEq(r.json.encoding, 'text', `page at ${off} is text`);
    assert(r.json.length > 0 && r.json.length <= 7, 'length');
    rebuilt += r.json.content;
    off += r.json.length;
    pages++;
    if (!r.json.has_more) break;
  }
  assertEq(rebuilt, text, 'pages rebuild the text');
  assertEq(off, bytes.length, 'total');
  // A slice starting inside a character cannot be text: base64 of exactly those bytes.
  const r = ok(await call('session_read_file', { path: 'u.txt', offset: 2, limit: 3, ...D }), 'mid');
  assertEq(r.json.encoding, 'base64', 'mid-char start');
  assertEq(Buffer.from(r.json.content, 'base64'), bytes.subarray(2, 5), 'bytes');
  // A limit smaller than one character: base64 of the raw byte.
  const one = ok(await call('session_read_file', { path: 'u.txt', offset: 3, limit: 1, ...D }), 'one');
  assertEq(one.json.encoding, 'base64', 'short limit');
  const past = ok(await call('session_read_file', { path: 'u.txt', offset: 100000, limit: 5, ...D }), 'past');
  assertEq([past.json.length, past.json.has_more, past.json.content], [0, false, ''], 'past end');
  const img = ok(await call('session_read_file', { path: 'img.PNG', ...D }), 'img');
  assertEq(img.raw.content[0].type, 'image', 'image block');
  assertEq(img.raw.content[0].mimeType, 'image/png', 'mime');
  assertEq(Buffer.from(img.raw.content[0].data, 'base64').toString(), 'png!', 'image data');
  const bin = ok(await call('session_read_file', { path: 'bin.dat', ...D }), 'bin');
  assert(bin.text.startsWith('[Unknown format] '), 'unknown format');
  errIs(await call('session_read_file', { path: 'nope', ...D }), 'file_not_found', 'missing');
  errIs(await call('session_read_file', { path: '../x', ...D }), 'invalid_workspace_path', 'bad key');
});

await R.run('session_read_file pattern: PCRE2, (?i), byte_offset from file start, errors', async () => {
  ok(await call('session_write_files', { entries: [{ path: 'g.txt', content: 'alpha\nBeta\r\ngamma beta\n' }], ...D }), 'w');
  const r = ok(await call('session_read_file', { path: 'g.txt', pattern: '(?i)beta', ...D }), 'grep');
  assertEq(r.json, { path: 'g.txt', total_matches: 2, matches: [
    { line_number: 2, byte_offset: 6, line: 'Beta' }, { line_number: 3, byte_offset: 12, line: 'gamma beta' }] }, 'matches');
  const ranged = ok(await call('session_read_file', { path: 'g.txt', pattern: 'beta', offset: 12, ...D }), 'ranged');
  assertEq(ranged.json.matches, [{ line_number: 1, byte_offset: 12, line: 'gamma beta' }], 'offset from file start');
  errIs(await call('session_read_file', { path: 'g.txt', pattern: '(unclosed', ...D }), 'invalid_pattern', 'compile');
  errIs(await call('session_read_file', { path: 'bin.dat', pattern: 'x', ...D }), 'binary_content', 'binary');
  ok(await call('session_write_files', { entries: [{ path: 'evil.txt', content: 'a'.repeat(5000) + 'b\n' }], ...D }), 'w');
  const t0 = Date.now();
  const e = errIs(await call('session_read_file', { path: 'evil.txt', pattern: '^(a+)+$', ...D }), 'invalid_pattern', 'catastrophic');
  assert(e.message.includes('backtrack'), `message says why: ${e.message}`);
  console.log(`# catastrophic pattern answered in ${Date.now() - t0} ms`);
});

await R.run('session_read_files: request order, any missing fails the call', async () => {
  const r = ok(await call('session_read_files', { paths: ['src/main.c', 'bin.dat'], ...D }), 'rf');
  assertEq(r.json.map((x) => [x.path, x.encoding]), [['src/main.c', 'text'], ['bin.dat', 'base64']], 'entries');
  assertEq(Buffer.from(r.json[1].content, 'base64'), Buffer.from([0, 1, 2, 255]), 'base64 content');
  errIs(await call('session_read_files', { paths: ['a.txt', 'missing'], ...D }), 'file_not_found', 'missing');
});

await R.run('session_delete_files: one checkpoint; a missing key deletes nothing', async () => {
  const before = ok(await call('get_session_state', D), 's').json;
  errIs(await call('session_delete_files', { paths: ['a.txt', 'nope'], ...D }), 'file_not_found', 'missing');
  assertEq(ok(await call('get_session_state', D), 's').json.checkpoint_id, before.checkpoint_id, 'no checkpoint');
  const r = ok(await call('session_delete_files', { paths: ['evil.txt', 'g.txt'], ...D }), 'del');
  assertEq([r.json.files_removed_count, r.json.workspace_file_count], [2, before.workspace_file_count - 2], 'removed');
});

await R.run('session_history and get_session_state: keys and steps', async () => {
  const h = ok(await call('session_history', { description: 'look' }), 'h').json;
  assert(Array.isArray(h) && h.length >= 5, 'array');
  for (const c of h) for (const k of SUMMARY_KEYS) assert(k in c, `summary key ${k}`);
  assertEq(h.map((c) => c.checkpoint_id), [...h.keys()], 'ids 0..n');
  const last = h[h.length - 1];
  assert(last.steps.some((s) => s.tool === 'session_history' && s.description === 'look'), 'step recorded');
  isState(ok(await call('get_session_state', D), 's').json, 'state');
});

await R.run('rollback then mutate: forward history discarded, kept in the DB as status 1', async () => {
  errIs(await call('session_rollback', D), 'internal_error', 'neither id nor label');
  errIs(await call('session_rollback', { checkpoint_id: 999, ...D }), 'checkpoint_not_found', 'bad id');
  errIs(await call('session_rollback', { checkpoint_label: 'nope', ...D }), 'checkpoint_not_found', 'bad label');
  const h0 = ok(await call('session_history', D), 'h').json;
  const top = h0[h0.length - 1].checkpoint_id;
  const r = ok(await call('session_rollback', { checkpoint_id: 2, ...D }), 'rb');
  assertEq(r.json.checkpoint_id, 2, 'head');
  assert(r.json.files_added_count + r.json.files_removed_count + r.json.files_modified_count > 0, 'deltas vs old head');
  assertEq(ok(await call('session_history', D), 'h').json.length, h0.length, 'forward history still visible after rollback');
  const w = ok(await call('session_write_files', { entries: [{ path: 'after.txt', content: 'x' }], ...D }), 'w');
  assertEq(w.json.checkpoint_id, top + 1, 'new id follows all ids ever used');
  const h1 = ok(await call('session_history', D), 'h').json;
  assertEq(h1.map((c) => c.checkpoint_id), [0, 1, 2, top + 1], 'discarded hidden');
  const rows = sqlite(db, `SELECT id, status FROM checkpoints WHERE session_id='${S1}' AND id > 2 AND id <= ${top} ORDER BY id`);
  assertEq(rows.length, top - 2, 'rows kept');
  assert(rows.every((x) => x.status === 1), 'status 1 (discarded)');
});

await R.run('labels, squash and drop keep ids and fork parents valid', async () => {
  for (let i = 0; i < 4; i++) ok(await call('session_write_files', { entries: [{ path: `s${i}`, content: `${i}` }], ...D }), 'w');
  let h = ok(await call('session_history', D), 'h').json;
  const ids = h.map((c) => c.checkpoint_id); // [0,1,2,T,T+1..T+4]
  const [a, b, c, d] = ids.slice(-4);
  const lab = ok(await call('session_checkpoint_label', { checkpoint_id: b, label: 'keep-me', ...D }), 'label').json;
  assertEq(lab.find((x) => x.checkpoint_id === b).label, 'keep-me', 'label set');
  errIs(await call('session_checkpoint_label', { checkpoint_id: 9999, label: 'x', ...D }), 'checkpoint_not_found', 'bad id');
  // Fork at c: its parent reference must survive the squash of a..c.
  const fork = ok(await call('session_fork', { checkpoint_id: c }), 'fork').json;
  assertEq([fork.parent_session_id, fork.parent_checkpoint_id, fork.checkpoint_id], [S1, c, 0], 'fork parent');
  assertEq(fork.workspace_file_count > 0, true, 'fork holds the files');
  ok(await call('session_switch', { session_id: S1 }), 'back');
  errIs(await call('session_checkpoint_squash', { from_checkpoint_id: 0, to_checkpoint_id: c, ...D }), 'internal_error', 'from 0');
  errIs(await call('session_checkpoint_squash', { from_checkpoint_id: c, to_checkpoint_id: a, ...D }), 'internal_error', 'from > to');
  errIs(await call('session_checkpoint_squash', { from_checkpoint_id: a, to_checkpoint_id: 9999, ...D }), 'checkpoint_not_found', 'to');
  const sq = ok(await call('session_checkpoint_squash', { from_checkpoint_id: a, to_checkpoint_id: c, label: 'sq', ...D }), 'squash').json;
  const after = sq.map((x) => x.checkpoint_id);
  assert(after.includes(c) && !after.includes(a) && !after.includes(b) && after.includes(d), `ids kept: ${after}`);
  const sqc = sq.find((x) => x.checkpoint_id === c);
  assertEq([sqc.tool, sqc.label], ['session_checkpoint_squash', 'sq'], 'squashed checkpoint');
  const tree = ok(await call('session_tree'), 'tree').json;
  const me = tree.find((n) => n.session_id === S1);
  const forks = me.checkpoints.find((x) => x.checkpoint_id === c).forks;
  assert(forks && forks.some((f) => f.session_id === fork.session_id), 'fork still nested under checkpoint c');
  errIs(await call('session_checkpoint_drop', { from_checkpoint_id: d, to_checkpoint_id: d, ...D }), 'internal_error', 'drop head');
  const dr = ok(await call('session_checkpoint_drop', { from_checkpoint_id: c, to_checkpoint_id: c, ...D }), 'drop').json;
  assertEq(dr.map((x) => x.checkpoint_id), after.filter((x) => x !== c), 'only c gone, no renumbering');
  const dd = dr.find((x) => x.checkpoint_id === d);
  assert(dd.files_added_count >= 1, 'next checkpoint re-parented (its delta is against the new parent)');
  const st = sqlite(db, `SELECT id, status FROM checkpoints WHERE session_id='${S1}' AND id IN (${a},${b},${c}) ORDER BY id`);
  assertEq(st.map((x) => x.status), [3, 3, 2], 'squashed, squashed, dropped');
  errIs(await call('session_rollback', { checkpoint_id: c, ...D }), 'checkpoint_not_found', 'dropped id');
});

await R.run('session_diff: text, modes, "no changes", errors', async () => {
  const r = ok(await call('session_write_files', { entries: [{ path: 'd.txt', content: 'one\ntwo\nthree\n' }], ...D }), 'w');
  ok(await call('session_write_files', { entries: [{ path: 'd.txt', content: 'one\n2\nthree' }], ...D }), 'w');
  const t = ok(await call('session_diff', D), 'diff').text;
  assert(t.includes('--- a/d.txt\n+++ b/d.txt\n@@ -1,3 +1,3 @@\n one\n-two\n-three\n+2\n+three\n\\ No newline at end of file\n'), `diff text: ${t}`);
  const none = ok(await call('session_diff', { from_checkpoint_id: r.json.checkpoint_id, to_checkpoint_id: r.json.checkpoint_id, ...D }), 'none');
  assertEq(none.text, 'no changes', 'no changes');
  errIs(await call('session_diff', { from_checkpoint_id: 9999, ...D }), 'checkpoint_not_found', 'bad from');
  errIs(await call('session_diff', { paths: ['../x'], ...D }), 'invalid_workspace_path', 'bad path');
  const bin = ok(await call('session_diff', { from_checkpoint_id: 0, paths: ['bin.dat'], ...D }), 'bin');
  assert(bin.text.includes('Binary file bin.dat changed.'), 'binary line');
});

await R.run('session_diff equals git diff --no-index on 60 generated pairs', async () => {
  let seed = 7;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const words = ['alpha', 'beta', 'gamma', 'delta', 'x', '', 'int f(void)', '  return 1;', '}', 'ünï', '€'];
  const pairs = [];
  for (let i = 0; i < 60; i++) {
    const n = 1 + rnd(40);
    const a = Array.from({ length: n }, () => words[rnd(words.length)]);
    const b = a.slice();
    for (let k = 0, edits = 1 + rnd(5); k < edits; k++) {
      const at = rnd(b.length + 1), op = rnd(3);
      if (op === 0) b.splice(at, 0, words[rnd(words.length)] + rnd(9));
      else if (op === 1 && b.length > 1) b.splice(Math.min(at, b.length - 1), 1);
      else b[Math.min(at, b.length - 1)] = 'changed' + rnd(99);
    }
    const ta = a.join('\n') + (rnd(4) ? '\n' : ''), tb = b.join('\n') + (rnd(4) ? '\n' : '');
    if (ta !== tb) pairs.push([`p/f${i}.txt`, ta, tb]);
  }
  assert(pairs.length >= 50, `${pairs.length} pairs`);
  const c1 = ok(await call('session_write_files', { entries: pairs.map(([p, a]) => ({ path: p, content: a })), ...D }), 'w1').json.checkpoint_id;
  const c2 = ok(await call('session_write_files', { entries: pairs.map(([p, , b]) => ({ path: p, content: b })), ...D }), 'w2').json.checkpoint_id;
  const body = (s) => s.split('\n').filter((l) => !l.startsWith('diff --git') && !l.startsWith('index ') && !l.startsWith('--- ') && !l.startsWith('+++ ')).join('\n');
  let compared = 0;
  for (const [p, a, b] of pairs) {
    const ours = ok(await call('session_diff', { from_checkpoint_id: c1, to_checkpoint_id: c2, paths: [p], ...D }), 'diff').text;
    const dir = join(tmp, 'git', String(compared));
    mkdirSync(join(dir, 'a', dirname(p)), { recursive: true });
    mkdirSync(join(dir, 'b', dirname(p)), { recursive: true });
    writeFileSync(join(dir, 'a', p), a);
    writeFileSync(join(dir, 'b', p), b);
    let git = '';
    try {
      execFileSync('git', ['diff', '--no-index', '--no-color', `a/${p}`, `b/${p}`], { cwd: dir, encoding: 'utf8' });
    } catch (e) {
      git = e.stdout; // exit 1 means "differs"
    }
    assert(ours.includes(`--- a/${p}\n+++ b/${p}\n`), `${p}: headers`);
    if (body(ours) !== body(git)) throw new Error(`${p} differs from git:\n${ours}\n----\n${git}`);
    compared++;
  }
  console.log(`# compared ${compared} pairs with git diff --no-index`);
});

await R.run('1,000 files in one session_write_files', async () => {
  const entries = Array.from({ length: 1000 }, (_, i) => ({ path: `many/d${i % 10}/f${i}.txt`, content: `file ${i}\n` }));
  const r = ok(await call('session_write_files', { entries, ...D }), 'w').json;
  assertEq(r.files_added_count, 1000, 'added');
  const rf = ok(await call('session_read_file', { path: 'many/d7/f997.txt', ...D }), 'r');
  assertEq(rf.text, 'file 997\n', 'content');
});

await R.run('fork, merge, explicit session_id, label, chat_record, stdstreams', async () => {
  const src = ok(await call('get_session_state', D), 's').json.session_id;
  errIs(await call('session_fork', { checkpoint_label: 'no-such' }), 'checkpoint_not_found', 'fork bad label');
  const fk = ok(await call('session_fork', {}), 'fork').json;
  assert(fk.session_id !== src && fk.parent_session_id === src, 'fork is active');
  ok(await call('session_write_files', { entries: [{ path: 'fork-only.txt', content: 'from fork' }], ...D }), 'w');
  // Explicit handle: read the source without switching.
  errIs(await call('session_read_file', { path: 'fork-only.txt', session_id: src, ...D }), 'file_not_found', 'explicit handle');
  assertEq(ok(await call('get_session_state', D), 's').json.session_id, fk.session_id, 'active unchanged');
  errIs(await call('session_merge', { source_session_id: fk.session_id, ...D }), 'internal_error', 'merge self');
  errIs(await call('session_merge', { source_session_id: 'deadbeef', ...D }), 'session_not_found', 'merge missing');
  ok(await call('session_switch', { session_id: src }), 'switch');
  errIs(await call('session_merge', { source_session_id: fk.session_id, keys: ['nope'], ...D }), 'file_not_found', 'merge key');
  const m = ok(await call('session_merge', { source_session_id: fk.session_id, keys: ['fork-only.txt'], ...D }), 'merge').json;
  isState(m, 'merge');
  assertEq(m.files_added_count, 1, 'merge delta');
  assertEq(ok(await call('session_read_file', { path: 'fork-only.txt', ...D }), 'r').text, 'from fork', 'merged');
  const l = ok(await call('session_label', { label: 'main line' }), 'label').json;
  assertEq(l.label, 'main line', 'label');
  const list = ok(await call('session_list'), 'list').json;
  const mine = list.find((x) => x.session_id === src);
  assertEq([mine.is_current, mine.attached, mine.label], [true, true, 'main line'], 'list entry');
  for (const k of ['session_id', 'is_current', 'checkpoint_id', 'checkpoint_count']) assert(k in mine, `list key ${k}`);
  isState(ok(await call('session_chat_record', { prompt: 'p', response: 'r' }), 'chat').json, 'chat');
  const so = ok(await call('checkpoint_read_stdstreams', D), 'streams').json;
  for (const k of ['stream', 'checkpoint_id', 'exit_code', 'offset', 'length', 'total_bytes', 'has_more', 'content']) assert(k in so, `streams key ${k}`);
  assertEq([so.stream, so.exit_code, so.content], ['stdout', null, ''], 'empty output');
  const sp = ok(await call('checkpoint_read_stdstreams', { stream: 'stderr', pattern: 'x', ...D }), 'sp').json;
  assertEq(sp.total_matches, 0, 'pattern on empty');
  errIs(await call('checkpoint_read_stdstreams', { stream: 'stdin', ...D }), 'invalid_arguments', 'bad stream (an enum in the schema)');
  errIs(await call('checkpoint_read_stdstreams', { checkpoint_id: 9999, ...D }), 'checkpoint_not_found', 'bad cp');
  errIs(await call('session_switch', { session_id: 'ffffffff' }), 'session_not_found', 'switch unknown');
  errIs(await call('session_switch', { session_id: '../etc' }), 'session_not_found', 'switch junk');
});

await R.run('session_close: text result, then no_active_session; closed sessions are gone', async () => {
  const fk = ok(await call('session_fork', {}), 'fork').json.session_id;
  const r = ok(await call('session_close'), 'close');
  assertEq(r.text, `closed ${fk}`, 'text');
  errIs(await call('get_session_state', D), 'no_active_session', 'after close');
  errIs(await call('session_switch', { session_id: fk }), 'session_not_found', 'closed');
  errIs(await call('session_close', { session_id: fk }), 'session_not_found', 'close twice');
  ok(await call('session_switch', { session_id: S1 }), 'switch back');
});

await R.run('checkpoint limit: 200 live checkpoints, then checkpoint_limit_reached', async () => {
  const s = ok(await call('create_session'), 'c').json.session_id;
  let last;
  for (let i = 1; i < 200; i++) last = ok(await call('session_write_files', { entries: [{ path: 'n', content: String(i) }], ...D }), `w${i}`);
  assertEq(last.json.checkpoint_id, 199, 'the 200th checkpoint is allowed');
  const e = errIs(await call('session_write_files', { entries: [{ path: 'n', content: 'x' }], ...D }), 'checkpoint_limit_reached', 'limit');
  assertEq(e.detail, { limit: 200 }, 'detail');
  // After a rollback the forward history is discarded first, so the write fits.
  ok(await call('session_rollback', { checkpoint_id: 150, ...D }), 'rb');
  assertEq(ok(await call('session_write_files', { entries: [{ path: 'n', content: 'y' }], ...D }), 'w').json.checkpoint_id, 200, 'fits after rollback');
  ok(await call('session_close', { session_id: s }), 'close');
  ok(await call('session_switch', { session_id: S1 }), 'back to S1');
});

// ---- persistence and two processes ------------------------------------------------------

let histBefore;
await R.run('kill -9, new daemon, session_switch: every acknowledged checkpoint is there', async () => {
  for (let i = 0; i < 5; i++) ok(await call('session_write_files', { entries: [{ path: `k${i}`, content: `${i}` }], ...D }), 'w');
  histBefore = ok(await call('session_history', D), 'h').json;
  process.kill(A.pid, 'SIGKILL');
  await A.client.close().catch(() => {});
  // Until it is reaped the killed daemon is a zombie with its pid and start time: wait
  // for it to be gone, or the next daemon may still see a live holder.
  await waitFor(() => !existsSync(`/proc/${A.pid}`), 'the killed daemon to be reaped');
  const B = await start();
  const cb = caller(B.client);
  const list = ok(await cb('session_list'), 'list').json;
  const e = list.find((x) => x.session_id === S1);
  assert(e && e.attached === false && !('holder_pid' in e), `dead holder shown as free: ${JSON.stringify(e)}`);
  ok(await cb('session_switch', { session_id: S1 }), 'switch');
  const h = ok(await cb('session_history', D), 'h').json;
  const strip = (x) => x.map(({ steps, ...rest }) => rest);
  assertEq(strip(h), strip(histBefore), 'history identical');
  assertEq(ok(await cb('session_read_file', { path: 'k4', ...D }), 'r').text, '4', 'files');
  // Two daemons: a third one cannot take the session B holds.
  const C = await start();
  const cc = caller(C.client);
  const list2 = ok(await cc('session_list'), 'list').json;
  assertEq(list2.find((x) => x.session_id === S1).holder_pid, B.pid, 'holder pid listed');
  const busy = errIs(await cc('session_switch', { session_id: S1 }), 'session_busy', 'second daemon');
  assert(busy.message.includes(String(B.pid)), `message names pid ${B.pid}: ${busy.message}`);
  // A read of the held session is answered from the DB; a mutation still needs the hold.
  assertEq(ok(await cc('session_read_file', { session_id: S1, path: 'k4', ...D }), 'read held').text, '4', 'read held');
  errIs(await cc('session_write_files', { session_id: S1, entries: [{ path: 'z', content: 'z' }], ...D }), 'session_busy', 'explicit handle too');
  // Once B exits cleanly it releases its claim, and C can attach.
  await B.client.close();
  ok(await cc('session_switch', { session_id: S1 }), 'C takes over after B exits');
  await C.client.close();
});

await R.run('session_write_files base64: wrapped lines decode; bad input names the offset', async () => {
  const D2 = await start();
  const c2 = caller(D2.client);
  ok(await c2('create_session'), 'create');
  const bytes = Buffer.alloc(200);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 37) & 255;
  // What `base64` prints: lines of 76 characters and a final newline (CRLF from some tools).
  const wrapped = bytes.toString('base64').replace(/.{76}/g, '$&\n') + '\n';
  const crlf = bytes.toString('base64').replace(/.{64}/g, '$&\r\n');
  ok(await c2('session_write_files', { entries: [{ path: 'w.bin', content: wrapped, is_base64: true }, { path: 'c.bin', content: crlf, is_base64: true }, { path: 'one.bin', content: 'QQ==', is_base64: true }, { path: 'empty.bin', content: '', is_base64: true }], ...D }), 'wrapped');
  const r = ok(await c2('session_read_files', { paths: ['w.bin', 'c.bin', 'one.bin', 'empty.bin'], ...D }), 'read').json;
  const got = r.map((f) => (f.encoding === 'base64' ? Buffer.from(f.content, 'base64') : Buffer.from(f.content)));
  assertEq(got[0].equals(bytes) && got[1].equals(bytes), true, 'wrapped base64 decodes to the same bytes');
  assertEq([got[2].toString(), got[3].length], ['A', 0], 'padding');
  for (const [bad, want] of [['QUJD!EVG', /offset 4/], ['QQ==QUJD', /'=' .*offset 2/], ['QUJDR', /multiple of 4/], ['Q===', /'=' .*offset 1/]]) {
    const e = errIs(await c2('session_write_files', { entries: [{ path: 'bad.bin', content: bad, is_base64: true }], ...D }), 'internal_error', `bad ${bad}`);
    assert(want.test(e.message) && e.message.includes('base64'), `message for ${bad}: ${e.message}`);
  }
  await D2.client.close();
});

R.done();
