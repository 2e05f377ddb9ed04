// test_windows.mjs - sessions that expire and a second window, with real daemons on one
// SQLite file:
// - the idle reaper: with max_sessions = 2 and session_idle_timeout_secs = 1, sessions
//   left open by daemons killed with SIGKILL no longer block create_session in a new
//   daemon; the reaped sessions are closed (history kept), with a `reap` audit row each,
//   and a snapshot first when snapshot_on_close is set; a session a live daemon holds
//   and uses is not reaped by another daemon, and its own daemon reaps it (freeing its
//   workspace) once it is idle;
// - `drun-admin sessions close --idle DURATION` closes idle sessions in bulk and prints
//   them, and leaves held and recent ones alone;
// - a second window: a daemon reads (state, history, tree, diff, read_file(s),
//   stdstreams) a session another live daemon holds, from the DB, without taking the
//   hold; mutations still answer session_busy.
// Every wait polls a condition with a generous bound; nothing sleeps to synchronise.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { BUILD, MCP, Results, assert, assertEq, makeTmp, requireBinaries, sqlite } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const ADMIN = join(BUILD, 'drun-admin');
const tmp = makeTmp();
// The daemons' runtime directories live in here: a root daemon's sandbox user must be
// able to reach them.
chmodSync(tmp, 0o711);
const HANG = 120000; // hang guard only

function config(name, body) {
  const p = join(tmp, name);
  writeFileSync(p, `runtime_dir = "${join(tmp, 'rt-' + name)}"\n${body}`);
  return p;
}

async function start(db, cfg) {
  const transport = new StdioClientTransport({
    command: MCP, args: ['--db', db, '--config', cfg], stderr: 'pipe',
    env: { ...process.env },
  });
  const client = new Client({ name: 'drun-windows-test', version: '1.0' });
  let stderr = '';
  transport.stderr.on('data', (d) => { stderr += d; if (process.env.DRUN_TEST_STDERR) process.stderr.write(d); });
  await client.connect(transport);
  const call = async (name, args = {}) => {
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: HANG });
    const text = r.content[0].text;
    if (r.isError) return { error: JSON.parse(text) };
    try { return { json: JSON.parse(text), text }; } catch { return { text }; }
  };
  return { client, call, pid: transport.pid, stderr: () => stderr, close: () => client.close() };
}

function ok(r, what) {
  if (r.error) throw new Error(`${what}: unexpected error ${JSON.stringify(r.error)}`);
  return r;
}

async function until(fn, what) {
  const end = Date.now() + HANG;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Kills a daemon with SIGKILL and waits until its pid is gone.
async function kill9(d) {
  process.kill(d.pid, 'SIGKILL');
  await until(() => { try { process.kill(d.pid, 0); return false; } catch { return true; } }, `pid ${d.pid} to exit`);
}

function state(db, id) {
  return sqlite(db, `SELECT state, owner_pid FROM sessions WHERE id = '${id}'`)[0];
}

await R.run('sessions left by killed daemons are reaped; create_session works again', async () => {
  const db = join(tmp, 'reap.db');
  const cfg = config('reap.toml', 'max_sessions = 2\nsession_idle_timeout_secs = 1\n');
  const a = await start(db, cfg);
  const s1 = ok(await a.call('create_session'), 'create 1').json.session_id;
  ok(await a.call('session_write_files', { entries: [{ path: 'keep.txt', content: 'history' }], description: 'w' }), 'write');
  const b = await start(db, cfg);
  const s2 = ok(await b.call('create_session'), 'create 2').json.session_id;
  await kill9(a);
  await kill9(b);
  assertEq(sqlite(db, 'SELECT count(*) AS n FROM sessions WHERE state = 0')[0].n, 2, 'open sessions after the kills');

  const c = await start(db, cfg);
  try {
    await until(() => state(db, s1).state === 1 && state(db, s2).state === 1, 'both sessions to be reaped');
    const s3 = ok(await c.call('create_session'), 'create after the reap').json.session_id;
    ok(await c.call('create_session'), 'a second create after the reap');
    assert(s3 !== s1 && s3 !== s2, 'a new session');
    // The history stays until gc.
    const cps = sqlite(db, `SELECT count(*) AS n FROM checkpoints WHERE session_id = '${s1}'`)[0].n;
    assertEq(cps, 2, 'checkpoints of the reaped session');
    const rows = sqlite(db, `SELECT session_id, outcome, kind FROM audit WHERE tool = 'reap' ORDER BY id`);
    assertEq(rows.map((r) => r.session_id).sort(), [s1, s2].sort(), 'reap audit rows');
    assert(rows.every((r) => r.outcome === 'ok' && r.kind === 'event'), `reap rows: ${JSON.stringify(rows)}`);
    const v = spawnSync(ADMIN, ['--db', db, 'audit', 'verify'], { encoding: 'utf8' });
    assertEq(v.status, 0, `audit verify: ${v.stdout}${v.stderr}`);
    // The reaped session answers session_not_found.
    const r = await c.call('get_session_state', { session_id: s1, description: 'x' });
    assertEq(r.error && r.error.code, 'session_not_found', 'a reaped session');
  } finally {
    await c.close();
  }
});

await R.run('snapshot_on_close: the reaper snapshots first, exactly once across two daemons', async () => {
  const db = join(tmp, 'snap.db');
  const cfg = config('snap.toml', 'session_idle_timeout_secs = 1\nsnapshot_on_close = true\n');
  const a = await start(db, cfg);
  const s1 = ok(await a.call('create_session'), 'create').json.session_id;
  ok(await a.call('session_write_files', { entries: [{ path: 'f', content: 'x' }], description: 'w' }), 'write');
  await kill9(a);
  const c = await start(db, cfg);
  const d = await start(db, cfg);
  try {
    await until(() => state(db, s1).state === 1, 'the session to be reaped');
    const snaps = sqlite(db, `SELECT name FROM snapshots WHERE source_session_id = '${s1}'`);
    assertEq(snaps.length, 1, 'one snapshot');
    assert(snaps[0].name.startsWith(`${s1}-close-`), `snapshot name ${snaps[0].name}`);
    assertEq(sqlite(db, `SELECT count(*) AS n FROM audit WHERE tool = 'reap' AND session_id = '${s1}'`)[0].n, 1, 'one reap row');
  } finally {
    await c.close();
    await d.close();
  }
});

await R.run('a held session is its holder\'s to reap; the holder frees its workspace', async () => {
  const db = join(tmp, 'held.db');
  const cfgLong = config('held-long.toml', 'session_idle_timeout_secs = 3600\n');
  const cfgShort = config('held-short.toml', 'session_idle_timeout_secs = 1\n');
  // The holder has a long timeout; the other daemon a short one. Its last_active_ms
  // goes old in the DB, but the holder's heartbeat is fresh: the other must not reap it.
  const holder = await start(db, cfgLong);
  const other = await start(db, cfgShort);
  try {
    const s = ok(await holder.call('create_session'), 'create').json.session_id;
    ok(await holder.call('session_bash', { command: 'echo hi > a.txt', description: 'b' }), 'bash');
    const rt = join(tmp, 'rt-held-long.toml');
    const ws = () => existsSync(rt) && JSON.stringify(readdirSync(rt, { recursive: true })).includes(s);
    assert(ws(), 'the holder has a workspace');
    // Wait for the DB to say the session was idle > 1 s and for two of the other
    // daemon's ticks to have passed since (its heartbeat moves on; poll the DB).
    const t0 = Date.now();
    await until(() => {
      const r = sqlite(db, `SELECT last_active_ms, heartbeat_ms FROM sessions WHERE id = '${s}'`)[0];
      return Date.now() - r.last_active_ms > 3000 && Date.now() - t0 > 3000;
    }, 'the session to look idle in the DB');
    assertEq(state(db, s).state, 0, 'not reaped by the other daemon');
    assertEq(sqlite(db, `SELECT count(*) AS n FROM audit WHERE tool = 'reap'`)[0].n, 0, 'no reap row');
    ok(await holder.call('session_write_files', { entries: [{ path: 'b', content: 'y' }], description: 'w' }), 'holder still writes');
  } finally {
    await holder.close();
    await other.close();
  }
  // Now a holder with the short timeout reaps its own idle session and frees the workspace.
  const h2 = await start(db, cfgShort);
  try {
    const s = ok(await h2.call('create_session'), 'create').json.session_id;
    ok(await h2.call('session_bash', { command: 'echo hi > a.txt', description: 'b' }), 'bash');
    const rt = join(tmp, 'rt-held-short.toml');
    const ws = () => existsSync(rt) && JSON.stringify(readdirSync(rt, { recursive: true })).includes(s);
    assert(ws(), 'the holder has a workspace');
    await until(() => state(db, s).state === 1, 'its own daemon to reap it');
    const row = sqlite(db, `SELECT pid FROM audit WHERE tool = 'reap' AND session_id = '${s}'`);
    assertEq(row.map((r) => r.pid), [h2.pid], 'reaped by its holder');
    await until(() => !ws(), 'the workspace to be freed');
    const r = await h2.call('session_write_files', { entries: [{ path: 'x', content: 'y' }], description: 'w' });
    assertEq(r.error && r.error.code, 'session_not_found', 'the reaped active session');
  } finally {
    await h2.close();
  }
});

await R.run('drun-admin sessions close --idle closes idle sessions in bulk', async () => {
  const db = join(tmp, 'admin.db');
  const cfg = config('admin.toml', 'session_idle_timeout_secs = 3600\n');
  const a = await start(db, cfg);
  const s1 = ok(await a.call('create_session'), 'create 1').json.session_id;
  const s2 = ok(await a.call('create_session'), 'create 2').json.session_id;
  await kill9(a);
  const live = await start(db, cfg);
  try {
    const s3 = ok(await live.call('create_session'), 'create 3').json.session_id;
    // Make s1 and s3 look idle for two hours; s2 stays recent.
    sqlite(db, `UPDATE sessions SET last_active_ms = last_active_ms - 7200000 WHERE id IN ('${s1}', '${s3}')`);
    const bad = spawnSync(ADMIN, ['--db', db, 'sessions', 'close', '--idle', '5 parsecs'], { encoding: 'utf8' });
    assertEq(bad.status, 2, `a bad duration: ${bad.stderr}`);
    assert(/duration/.test(bad.stderr), `names the duration: ${bad.stderr}`);
    const r = spawnSync(ADMIN, ['--db', db, 'sessions', 'close', '--idle', '1h'], { encoding: 'utf8' });
    assertEq(r.status, 0, `close --idle: ${r.stdout}${r.stderr}`);
    assert(r.stdout.includes(`closed ${s1}`), `prints what it closed: ${r.stdout}`);
    assert(!r.stdout.includes(s2) && !r.stdout.includes(`closed ${s3}`), `only the idle, unheld one: ${r.stdout}`);
    assertEq(state(db, s1).state, 1, 's1 closed');
    assertEq(state(db, s2).state, 0, 's2 (recent) open');
    assertEq(state(db, s3).state, 0, 's3 (held live) open');
    const j = spawnSync(ADMIN, ['--db', db, '--json', 'sessions', 'close', '--idle'], { encoding: 'utf8' });
    assertEq(j.status, 0, `close --idle default: ${j.stdout}${j.stderr}`);
    assertEq(JSON.parse(j.stdout).closed, [], 'nothing else idle for an hour');
  } finally {
    await live.close();
  }
});

await R.run('a second window reads a session another live daemon holds', async () => {
  const db = join(tmp, 'win.db');
  const a = await start(db, config('win-a.toml', ''));
  const b = await start(db, config('win-b.toml', ''));
  try {
    const s = ok(await a.call('create_session'), 'create').json.session_id;
    ok(await a.call('session_write_files', { entries: [{ path: 'a.txt', content: 'one\n' }], description: 'w1' }), 'write 1');
    ok(await a.call('session_bash', { command: 'echo two >> a.txt; echo out; echo err >&2', description: 'b' }), 'bash');
    const head = ok(await a.call('get_session_state', { description: 'x' }), 'a state').json;

    const st = ok(await b.call('get_session_state', { session_id: s, description: 'look' }), 'b state').json;
    assertEq(st.checkpoint_id, head.checkpoint_id, 'the head from the DB');
    assertEq(st.session_id, s, 'session id');
    const h = ok(await b.call('session_history', { session_id: s, description: 'look' }), 'b history').json;
    assertEq(h.length, 3, 'history length');
    const fr = ok(await b.call('session_read_file', { session_id: s, path: 'a.txt', description: 'look' }), 'b read');
    assertEq(fr.text, 'one\ntwo\n', 'file content');
    const fs = ok(await b.call('session_read_files', { session_id: s, paths: ['a.txt'], description: 'look' }), 'b read_files');
    assert(fs.text.includes('two'), `read_files: ${fs.text}`);
    const d = ok(await b.call('session_diff', { session_id: s, description: 'look' }), 'b diff');
    assert(d.text.includes('+two'), `diff: ${d.text}`);
    const so = ok(await b.call('checkpoint_read_stdstreams', { session_id: s, stream: 'stdout', description: 'look' }), 'b stdstreams');
    assert(so.json.content.includes('out'), `stdstreams: ${so.text}`);
    const tree = ok(await b.call('session_tree'), 'b tree').json;
    assert(JSON.stringify(tree).includes(s), 'tree lists it');

    // The hold did not move, and no workspace was made for b.
    assertEq(state(db, s).owner_pid, a.pid, 'still held by a');
    const rtb = join(tmp, 'rt-win-b.toml');
    assert(!existsSync(rtb) || !JSON.stringify(readdirSync(rtb, { recursive: true })).includes(s),
      'no workspace for the reading daemon');
    // Mutations still need the hold.
    const w = await b.call('session_write_files', { session_id: s, entries: [{ path: 'x', content: 'y' }], description: 'w' });
    assertEq(w.error && w.error.code, 'session_busy', 'a write from the second window');
    assert(/held by another drun process/.test(w.error.message), `message: ${w.error.message}`);
    const bash = await b.call('session_bash', { session_id: s, command: 'true', description: 'b' });
    assertEq(bash.error && bash.error.code, 'session_busy', 'a command from the second window');
    // The holder moves on; the second window sees the new head.
    ok(await a.call('session_write_files', { entries: [{ path: 'c.txt', content: 'c' }], description: 'w2' }), 'write 2');
    const st2 = ok(await b.call('get_session_state', { session_id: s, description: 'look' }), 'b state 2').json;
    assertEq(st2.checkpoint_id, head.checkpoint_id + 1, 'the new head');
    const f2 = ok(await b.call('session_read_file', { session_id: s, path: 'c.txt', description: 'look' }), 'b read 2');
    assertEq(f2.text, 'c', 'new file');
    ok(await a.call('session_write_files', { entries: [{ path: 'd.txt', content: 'd' }], description: 'w3' }), 'a still holds');
  } finally {
    await a.close();
    await b.close();
  }
});

R.done();
