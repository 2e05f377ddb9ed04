// test_store_lock.mjs - the database's write lock held by another process, and the
// database file deleted or replaced under a running daemon.
//
// A sqlite3 shell holds the write lock (BEGIN EXCLUSIVE) until the test writes a line
// to its stdin; it reports "locked" on stdout once it holds it, so every step below is
// ordered by that pipe, never by a sleep:
// - while it holds the lock, pings and read-only calls of two daemons on the DB are
//   answered and a write and a session_bash of another session wait without an answer;
//   after it lets go, they succeed, the queued audit rows reach the DB and the audit
//   chain verifies;
// - with a short busy timeout (DRUN_BUSY_TIMEOUT_MS) a write fails once with store_busy
//   (not internal_error), changes nothing, and its audit row is written later; so does a
//   session_bash, whose file then does not stay in the workspace;
// - a write and a session_bash cancelled while they wait for the lock end, and leave
//   their sessions usable and their files uncommitted;
// - `rm drun.db` or `mv other.db drun.db` under a daemon: the next writes are refused
//   with store_replaced and a loud line on stderr, not acknowledged into a lost file.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD, Results, assert, assertEq, makeTmp, requireBinaries, runColdAndWarm, sqlite, startDaemon } from './lib.mjs';

// Its session_bash calls wait for the lock in a cold sandbox and in a prepared one.
await runColdAndWarm(import.meta.url);

const R = new Results();
requireBinaries(R);
const ADMIN = join(BUILD, 'drun-admin');
const tmp = makeTmp();
const HANG = 120000; // hang guard only

// A daemon on db; its own runtime directory unless env names one.
function start(db, env = {}) {
  return startDaemon({ db, env, name: 'drun-store-lock-test', timeout: HANG });
}

function ok(r, what) {
  if (r.error) throw new Error(`${what}: unexpected error ${JSON.stringify(r.error)}`);
  return r;
}

// Holds the write lock of db until release() is called.
function holdLock(db) {
  const p = spawn('sqlite3', [db, 'BEGIN EXCLUSIVE;', '.shell echo locked; head -n 1 >/dev/null', 'ROLLBACK;'],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((res) => p.on('exit', res));
  return new Promise((resolve, reject) => {
    let out = '';
    const guard = setTimeout(() => { p.kill('SIGKILL'); reject(new Error('sqlite3 never took the lock')); }, HANG);
    p.stdout.on('data', (d) => {
      out += d;
      if (out.includes('locked')) {
        clearTimeout(guard);
        let done = null;
        resolve({ release: () => { if (!done) { p.stdin.end('go\n'); done = exited; } return done; } });
      }
    });
    p.on('exit', (c) => { clearTimeout(guard); reject(new Error(`sqlite3 exited ${c} before taking the lock`)); });
  });
}

// Tracks whether a promise has settled.
function track(promise) {
  const t = { settled: false };
  t.promise = promise
    .catch((e) => ({ error: { code: 'rejected', message: String(e) } }))
    .finally(() => { t.settled = true; });
  return t;
}

// Polls fn() until it returns true (bounded: a hang guard, not a timing assertion).
async function until(fn, what) {
  const end = Date.now() + HANG;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// True if a file called name is somewhere under dir.
function findFile(dir, name) {
  let found = false;
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === name) return true;
      if (e.isDirectory() && findFile(join(dir, e.name), name)) found = true;
    }
  } catch {
    return false;
  }
  return found;
}

function verify(db) {
  const v = spawnSync(ADMIN, ['--db', db, 'audit', 'verify'], { encoding: 'utf8' });
  assertEq(v.status, 0, `audit verify: ${v.stdout}${v.stderr}`);
}

await R.run('a held write lock: pings and reads answered, writes wait and then succeed', async () => {
  const db = join(tmp, 'held.db');
  // A long busy timeout: nothing here may fail for the lock, however slow the machine.
  const d1 = await start(db, { DRUN_BUSY_TIMEOUT_MS: '600000' });
  const d2 = await start(db, { DRUN_BUSY_TIMEOUT_MS: '600000' });
  let lock = null;
  try {
    const a = ok(await d1.call('create_session'), 'create a').json.session_id;
    const b = ok(await d1.call('create_session'), 'create b').json.session_id;
    const c = ok(await d1.call('create_session'), 'create c').json.session_id;
    ok(await d1.call('session_write_files', { session_id: b, entries: [{ path: 'r.txt', content: 'read me\n' }] }), 'write b');
    ok(await d1.call('session_bash', { session_id: c, command: 'true' }), 'a first command in c');
    // d2's own session (a session another live daemon holds is not attached here).
    const e = ok(await d2.call('create_session'), 'create e on d2').json.session_id;
    ok(await d2.call('session_write_files', { session_id: e, entries: [{ path: 'r.txt', content: 'read me\n' }] }), 'write e');
    const before = sqlite(db, 'SELECT count(*) AS n FROM audit')[0].n;

    lock = await holdLock(db);
    const write = track(d1.call('session_write_files', { session_id: a, entries: [{ path: 'w.txt', content: 'w\n' }] }));
    const bash = track(d1.call('session_bash', { session_id: c, command: 'echo made > bash.txt' }));
    // The loop still answers: pings and reads of the other session, on both daemons.
    await d1.client.ping();
    const r1 = ok(await d1.call('session_read_file', { session_id: b, path: 'r.txt' }), 'read on d1');
    assertEq(r1.text, 'read me\n', 'read on d1');
    await d2.client.ping();
    const r2 = ok(await d2.call('session_read_file', { session_id: e, path: 'r.txt' }), 'read on d2');
    assertEq(r2.text, 'read me\n', 'read on d2');
    ok(await d2.call('session_history', { session_id: e }), 'history on d2');
    await d1.client.ping();
    assert(!write.settled, 'the write answered while another process held the lock');
    assert(!bash.settled, 'session_bash answered while another process held the lock');
    await lock.release();

    const w = await write.promise;
    ok(w, 'the write after the lock was let go');
    const bb = await bash.promise;
    ok(bb, 'session_bash after the lock was let go');
    const seen = ok(await d1.call('session_read_file', { session_id: c, path: 'bash.txt' }), 'read bash.txt');
    assertEq(seen.text, 'made\n', 'the command\'s file is in the checkpoint');
    // The reads' rows were queued and are written once the lock is free.
    await until(() => sqlite(db, "SELECT count(*) AS n FROM audit WHERE tool = 'session_read_file'")[0].n >= 2,
      'the queued audit rows');
    await until(() => sqlite(db, "SELECT count(*) AS n FROM audit WHERE tool = 'session_history'")[0].n >= 1,
      'the queued audit row of d2');
    const after = sqlite(db, 'SELECT count(*) AS n FROM audit')[0].n;
    assert(after >= before + 5, `audit rows: ${before} before, ${after} after`);
    const stepsB = sqlite(db, `SELECT count(*) AS n FROM checkpoint_steps WHERE session_id = '${b}'`)[0].n;
    const stepsE = sqlite(db, `SELECT count(*) AS n FROM checkpoint_steps WHERE session_id = '${e}'`)[0].n;
    assert(stepsB >= 1 && stepsE >= 2, `history steps of the reads were recorded (${stepsB}, ${stepsE})`);
  } finally {
    if (lock) await lock.release();
    await d1.close();
    await d2.close();
  }
  verify(db);
});

await R.run('past the busy timeout a write fails once with store_busy and changes nothing', async () => {
  const db = join(tmp, 'busy.db');
  const d = await start(db, { DRUN_BUSY_TIMEOUT_MS: '300' });
  let lock = null;
  try {
    const s = ok(await d.call('create_session'), 'create').json.session_id;
    lock = await holdLock(db);
    const r = await d.call('session_write_files', { session_id: s, entries: [{ path: 'x.txt', content: 'x\n' }] });
    const r2 = await d.call('create_session');
    const state = await d.call('get_session_state', { session_id: s });
    const bash = await d.call('session_bash', { session_id: s, command: 'echo left > left.txt' });
    await lock.release();
    assert(bash.error && bash.error.code === 'store_busy', `session_bash: ${JSON.stringify(bash)}`);
    // The command's file was not committed, so it must not stay in the workspace either.
    const ls = ok(await d.call('session_bash', { session_id: s, command: 'ls' }), 'ls after');
    assert(!/left\.txt/.test(ls.json.stdout_tail), `the uncommitted file leaked: ${ls.json.stdout_tail}`);
    assert(r.error, `the write was acknowledged under the lock: ${JSON.stringify(r.json)}`);
    assertEq(r.error.code, 'store_busy', `error code (message: ${r.error.message})`);
    assert(/retry/.test(r.error.message) && /lock/.test(r.error.message), `message names the wait and says retry: ${r.error.message}`);
    assert(r2.error && r2.error.code === 'store_busy', `create_session: ${JSON.stringify(r2)}`);
    ok(state, 'a read under the lock');
    assertEq(state.json.checkpoint_id, 0, 'nothing was committed');
    const x = await d.call('session_read_file', { session_id: s, path: 'x.txt' });
    assert(x.error && x.error.code === 'file_not_found', `x.txt must not exist: ${JSON.stringify(x)}`);
  } finally {
    if (lock) await lock.release();
    await d.close();
  }
  const rows = sqlite(db, "SELECT error_code FROM audit WHERE tool = 'session_write_files'");
  assertEq(rows.map((x) => x.error_code), ['store_busy'], 'one audit row, with the code');
  verify(db);
});

await R.run('a call cancelled while it waits for the lock ends, and its session is usable', async () => {
  const db = join(tmp, 'cancel.db');
  const rt = join(tmp, 'rt-cancel');
  // 0711 down to it: a root daemon's sandbox user (65534) passes through to its workspace.
  chmodSync(tmp, 0o711);
  mkdirSync(rt, { mode: 0o711 });
  const d = await start(db, { DRUN_BUSY_TIMEOUT_MS: '600000', XDG_RUNTIME_DIR: rt });
  let lock = null;
  try {
    const s = ok(await d.call('create_session'), 'create').json.session_id;
    const t = ok(await d.call('create_session'), 'create t').json.session_id;
    ok(await d.call('session_bash', { session_id: t, command: 'true' }), 'a first command in t');
    lock = await holdLock(db);
    const ac = new AbortController();
    const w = track(d.client.callTool({ name: 'session_write_files', arguments: { session_id: s, description: 'd', entries: [{ path: 'c.txt', content: 'c\n' }] } },
      undefined, { signal: ac.signal, timeout: HANG }));
    const bc = new AbortController();
    const b = track(d.client.callTool({ name: 'session_bash', arguments: { session_id: t, description: 'd', command: 'echo x > cancelled.txt' } },
      undefined, { signal: bc.signal, timeout: HANG }));
    await d.client.ping(); // both are in the daemon by now (one line each, in order)
    // The command has run (its file is in the workspace directory) and its commit waits.
    // Workspaces are size-capped mounts in the daemon's own mount namespace: look through
    // its root, where they are visible.
    await until(() => findFile(`/proc/${d.pid}/root${rt}`, 'cancelled.txt'), 'the command to run');
    ac.abort();
    bc.abort();
    await w.promise;
    await b.promise;
    await d.client.ping();
    await lock.release();
    lock = null;
    const again = ok(await d.call('session_write_files', { session_id: s, entries: [{ path: 'c.txt', content: 'c\n' }] }), 'the session after the cancel');
    assertEq(again.json.checkpoint_id, 1, 'the cancelled write made no checkpoint');
    // A command cancelled before its commit parked is cleaned up when its sandbox has
    // exited: until then its session answers session_busy.
    let ls;
    for (let i = 0; i < 2400; i++) {
      ls = await d.call('session_bash', { session_id: t, command: 'ls' });
      if (!(ls.error && ls.error.code === 'session_busy')) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    ok(ls, 'ls in t');
    assert(!/cancelled\.txt/.test(ls.json.stdout_tail), `the cancelled command's file stayed: ${ls.json.stdout_tail}`);
  } finally {
    if (lock) await lock.release();
    await d.close();
  }
});

async function replacedCase(name, mutate) {
  await R.run(name, async () => {
    const dir = join(tmp, name.replace(/[^a-z]+/g, '-'));
    execFileSync('mkdir', ['-p', dir]);
    const db = join(dir, 'drun.db');
    const d = await start(db);
    try {
      const s = ok(await d.call('create_session'), 'create').json.session_id;
      ok(await d.call('session_write_files', { session_id: s, entries: [{ path: 'a.txt', content: 'a\n' }] }), 'write before');
      mutate(db, dir);
      for (let i = 0; i < 3; i++) {
        const r = await d.call('session_write_files', { session_id: s, entries: [{ path: `b${i}.txt`, content: 'b\n' }] });
        assert(r.error, `write ${i} was acknowledged into a file no one will open: ${JSON.stringify(r.json)}`);
        assertEq(r.error.code, 'store_replaced', `write ${i}: error code (message: ${r.error.message})`);
      }
      const c = await d.call('create_session');
      assert(c.error && c.error.code === 'store_replaced', `create_session: ${JSON.stringify(c)}`);
      assert(/refus/.test(d.stderr()) && /restart/.test(d.stderr()), `stderr says so loudly: ${d.stderr()}`);
    } finally {
      await d.close();
    }
  });
}

await replacedCase('rm drun.db under a daemon: writes refused with store_replaced', (db) => {
  rmSync(db);
});

await replacedCase('mv other.db drun.db under a daemon: writes refused with store_replaced', (db, dir) => {
  const other = join(dir, 'other.db');
  copyFileSync(db, other);
  renameSync(other, db);
  assert(existsSync(db), 'replaced');
});

R.done();
