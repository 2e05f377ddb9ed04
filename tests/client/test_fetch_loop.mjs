// test_fetch_loop.mjs - the daemon's loop keeps answering while a big session_fetch
// stores its body.
//
// A sqlite3 shell holds the DB's write lock (BEGIN EXCLUSIVE) until the test writes a
// line to its stdin. A session_fetch of a 4 MiB body (streamed past the writer's head,
// so its row is copied from the writer's temporary file) runs to the end of its transfer:
// the loopback server sees the daemon close the connection, which curl does when the
// transfer has ended, just before the tool goes on to store the body. Only then does the
// test send a ping, and it lets the lock go only once the ping has been answered. Before
// the body's row moved to the writer's thread, the loop waited for the lock itself (the
// busy timeout, set to 10 minutes here), so the ping was never answered while the lock
// was held; now the writer's thread waits and the loop answers. After the lock is let go
// the fetch must succeed with the right bytes stored once. Every step is ordered by a
// pipe or a socket event; the bounds are hang guards, not timing assertions.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp, requireBinaries, sqlite } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const tmp = makeTmp();
const db = join(tmp, 'loop.db');
const cfg = join(tmp, 'config.toml');
const HANG = 60000; // hang guard only

const BODY = randomBytes(4 << 20);
const SHA = createHash('sha256').update(BODY).digest('hex');

const SMALL = randomBytes(1000);
const SMALL_SHA = createHash('sha256').update(SMALL).digest('hex');

// The server: /body sends BODY, /small SMALL (keep-alive); `closed` resolves when the
// daemon closes the connection of the latest request.
let onClosed = null;
let closed = null;
const armClosed = () => { closed = new Promise((res) => (onClosed = res)); };
const srv = createServer((req, res) => {
  req.socket.once('close', () => onClosed());
  const b = req.url === '/small' ? SMALL : BODY;
  res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': b.length });
  res.end(b);
});
await new Promise((r) => srv.listen(0, '127.0.0.1', r));
const PORT = srv.address().port;
writeFileSync(cfg, 'domain_allowlist = ["127.0.0.1"]\nfetch_allow_private = true\n');

async function start(busyMs) {
  const transport = new StdioClientTransport({
    command: MCP, args: ['--db', db, '--config', cfg], stderr: 'pipe',
    env: { ...process.env, DRUN_BUSY_TIMEOUT_MS: String(busyMs) },
  });
  const d = { stderr: '' };
  transport.stderr.on('data', (x) => { d.stderr += x; if (process.env.DRUN_TEST_STDERR) process.stderr.write(x); });
  d.client = new Client({ name: 'drun-fetch-loop-test', version: '1.0' });
  await d.client.connect(transport);
  d.call = async (name, args = {}) => {
    const r = await d.client.callTool({ name, arguments: args }, undefined, { timeout: 15 * 60000 });
    const text = r.content[0].text;
    return r.isError ? { error: JSON.parse(text) } : { json: JSON.parse(text) };
  };
  return d;
}
const daemon = await start(600000);
const { client, call } = daemon;

// Holds the write lock of db until release() is called.
function holdLock() {
  const p = spawn('sqlite3', [db, 'BEGIN EXCLUSIVE;', '.shell echo locked; head -n 1 >/dev/null', 'ROLLBACK;'],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((res) => p.on('exit', res));
  return new Promise((resolve, reject) => {
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      if (out.includes('locked')) {
        let done = null;
        resolve({ release: () => { if (!done) { p.stdin.end('go\n'); done = exited; } return done; } });
      }
    });
    p.on('exit', (c) => reject(new Error(`sqlite3 exited ${c} before taking the lock`)));
  });
}

// Resolves with fn's promise, or with `fallback` once HANG passes (a hang guard).
function bounded(promise, fallback) {
  let t;
  return Promise.race([promise, new Promise((res) => (t = setTimeout(() => res(fallback), HANG)))])
    .finally(() => clearTimeout(t));
}

async function pingWhileLocked(path, body, sha) {
  const sid = (await call('create_session', {})).json.session_id;
  armClosed();
  const lock = await holdLock();
  let fetchDone = false;
  const fetching = call('session_fetch', { url: `http://127.0.0.1:${PORT}${path}`, description: 'locked', session_id: sid })
    .finally(() => { fetchDone = true; });
  try {
    assert(await bounded(closed.then(() => true), false), 'the daemon never ended the transfer');
    const answered = await bounded(client.ping({ timeout: 15 * 60000 }).then(() => true), false);
    assert(answered, 'no answer to a ping while the fetch waited for the write lock: the loop is stalled');
    assert(!fetchDone, 'the fetch ended while another process held the write lock');
  } finally {
    await lock.release();
  }
  const r = await fetching;
  assert(!r.error, `session_fetch failed: ${JSON.stringify(r.error)}`);
  assertEq(r.json.bytes, body.length, 'bytes');
  assertEq(sqlite(db, `select count(*) as n from blobs where hash = x'${sha}'`)[0].n, 1, 'the body stored once');
  assertEq(sqlite(db, `select count(*) as n from checkpoints where session_id = '${sid}'`)[0].n, 2, 'checkpoints');
  assertEq(sqlite(db, `select count(*) as n from audit_log where tool = 'session_fetch_hop' and session_id = '${sid}'`)[0].n, 1, 'the hop row, committed with the checkpoint');
  assert(!/error|warn/.test(daemon.stderr), `stderr: ${daemon.stderr}`);
}

// The body's row is stored by the writer's thread, which waits for the lock off the loop.
await R.run('a ping is answered while a big fetch waits for the write lock to store its body',
  () => pingWhileLocked('/body', BODY, SHA));
// A small body has no writer's thread: the checkpoint's commit parks for the lock.
await R.run('a ping is answered while a fetch waits for the write lock to commit its checkpoint',
  () => pingWhileLocked('/small', SMALL, SMALL_SHA));

// With a short busy timeout the fetch fails once with store_busy and saves nothing.
await R.run('a big fetch whose body cannot be stored within the busy timeout fails with store_busy', async () => {
  const d = await start(300);
  try {
    const sid = (await d.call('create_session', {})).json.session_id;
    const lock = await holdLock();
    let r;
    try {
      r = await d.call('session_fetch', { url: `http://127.0.0.1:${PORT}/body?busy`, description: 'busy', session_id: sid });
    } finally {
      await lock.release();
    }
    assert(r.error, `expected store_busy, got ${JSON.stringify(r.json)}`);
    assertEq(r.error.code, 'store_busy', `code (${r.error.message})`);
    assertEq(sqlite(db, `select count(*) as n from checkpoints where session_id = '${sid}'`)[0].n, 1, 'no checkpoint');
    const st = await d.call('get_session_state', { description: 's', session_id: sid });
    assert(!st.error, `session usable after store_busy: ${JSON.stringify(st.error)}`);
    // The hop row was queued while the lock was held; a later call's row is written
    // after the queued ones, in the same transaction.
    assertEq(sqlite(db, `select count(*) as n from audit_log where tool = 'session_fetch_hop' and session_id = '${sid}'`)[0].n, 1, 'the hop row');
  } finally {
    await d.client.close();
  }
});

await client.close();
srv.close();
R.done();
