// ping_bench.mjs - how long one drun-mcp takes to answer a ping while another session of
// the same daemon is busy. A ping is sent every 5 ms (without waiting for the previous
// answer) for as long as the other work lasts; p50, p99 and max of their round trips are
// printed for each case, and p99 over the idle daemon's p99 (the floor, same run).
// Issue target: p99 <= 20 ms in every case. Nothing asserts.
//
//   (idle) no other work: the floor
//   (a)    another session's session_fetch of 100 MiB from a loopback server
//   (b)    another session's session_bash writing 64 MiB of files (64 x 1 MiB, random)
//   (c)    another session's session_write_files waiting for the write lock, which a
//          sqlite3 shell holds for 10 s (BEGIN EXCLUSIVE; .shell sleep 10; ROLLBACK)
//
//   node tools/bench/ping_bench.mjs [ROUNDS]     (after make and npm ci in tests/client;
//                                                 DRUN_BUILD picks another build)
// PING_BENCH_CASES=c runs a subset (letters, "idle" always runs).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
const ROUNDS = Math.max(1, Number(process.argv[2] || 1));
const CASES = process.env.PING_BENCH_CASES || 'abc';
const FETCH_BYTES = 100 << 20;
const LOCK_SECS = 10;

const tmp = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'drun-ping-bench-'));
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));
const now = () => Number(process.hrtime.bigint()) / 1e6;

// The loopback server for (a): its own process, so serving does not share our loop.
const serverSrc = `
const http = require('node:http');
const crypto = require('node:crypto');
const SIZE = ${FETCH_BYTES};
const body = Buffer.alloc(SIZE);
const line = Buffer.from('the quick brown fox jumps over the lazy dog 0123456789\\n');
for (let off = 0, i = 0; off < SIZE; off += 65536, i++) {
  const n = Math.min(65536, SIZE - off);
  if (i % 2 === 0) crypto.randomFillSync(body, off, n);
  else for (let k = 0; k < n; k++) body[off + k] = line[(k + i) % line.length];
}
let count = 0;
http.createServer((req, res) => {
  body.writeBigUInt64LE(BigInt(++count), 0);
  res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': SIZE });
  res.end(body);
}).listen(0, '127.0.0.1', function () { console.log('PORT ' + this.address().port); });
`;
let url = null;
let server = null;
if (CASES.includes('a')) {
  server = spawn(process.execPath, ['-e', serverSrc], { stdio: ['ignore', 'pipe', 'inherit'] });
  process.on('exit', () => server.kill('SIGKILL'));
  const port = await new Promise((res) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = /PORT (\d+)/.exec(out);
      if (m) res(Number(m[1]));
    });
  });
  url = `http://127.0.0.1:${port}/data`;
}

const db = join(tmp, 'ping.db');
const cfg = join(tmp, 'config.toml');
writeFileSync(cfg, `domain_allowlist = ["127.0.0.1"]
fetch_allow_private = true
fetch_max_bytes = ${FETCH_BYTES + (1 << 20)}
max_workspace_mb = 512
`);
const transport = new StdioClientTransport({
  command: MCP, args: ['--db', db, '--config', cfg], stderr: 'pipe',
  env: { ...process.env, XDG_RUNTIME_DIR: tmp },
});
const client = new Client({ name: 'ping-bench', version: '1' });
await client.connect(transport);
const call = async (name, args = {}) => {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600000 });
  return { error: r.isError ? r.content[0].text : null, text: r.content[0].text };
};
const sid = async () => JSON.parse((await call('create_session')).text).session_id;

// Sends a ping every PING_EVERY_MS (not waiting for answers, so a stall of the daemon's
// loop delays every ping sent during it, in proportion to its length) until done() says
// stop; returns the round trips in ms once all are answered.
const PING_EVERY_MS = 5;
async function pingWhile(done) {
  const pending = [];
  while (!done()) {
    const t0 = now();
    pending.push(client.ping({ timeout: 600000 }).then(() => now() - t0));
    await new Promise((r) => setTimeout(r, PING_EVERY_MS));
  }
  return Promise.all(pending);
}
const pct = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const fmt = (x) => x.toFixed(2).padStart(8);

// Runs work() (a promise-returning function) while pinging; returns the round trips.
async function measure(work) {
  let finished = false;
  const w = work().finally(() => { finished = true; });
  const t = await pingWhile(() => finished);
  const r = await w;
  return { t, r };
}

const lockHolder = () => new Promise((res, rej) => {
  const p = spawn('sqlite3', [db, 'BEGIN EXCLUSIVE;', `.shell echo locked; sleep ${LOCK_SECS}`, 'ROLLBACK;'],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => p.on('exit', r));
  p.stdout.on('data', (d) => { if (String(d).includes('locked')) res({ exited }); });
  p.on('error', rej);
});

const cases = {
  idle: async () => {
    const t0 = now();
    return measure(() => new Promise((r) => setTimeout(r, 2000)).then(() => ({ ms: now() - t0 })));
  },
  a: async (s) => measure(async () => {
    const t0 = now();
    const r = await call('session_fetch', { session_id: s, url, description: 'bench' });
    return { ms: now() - t0, error: r.error };
  }),
  b: async (s) => measure(async () => {
    const t0 = now();
    const r = await call('session_bash', {
      session_id: s, description: 'bench',
      command: `d=d$(date +%s%N); mkdir $d; for i in $(seq 1 64); do head -c 1048576 /dev/urandom > $d/f$i; done`,
    });
    return { ms: now() - t0, error: r.error };
  }),
  c: async (s) => {
    const { exited } = await lockHolder(); // (a promise would be adopted: wrapped)
    return measure(async () => {
      const t0 = now();
      const r = await call('session_write_files', { session_id: s, entries: [{ path: `w${Date.now()}.txt`, content: 'x\n' }], description: 'bench' });
      const ms = now() - t0;
      await exited; // ping for the whole hold, not only while the write waits
      return { ms, error: r.error };
    });
  },
};

const names = { idle: 'idle (floor)', a: '(a) fetch 100 MiB', b: '(b) bash writes 64 MiB', c: `(c) write, lock held ${LOCK_SECS} s` };
const all = {};
const sessions = {};
for (const k of ['a', 'b', 'c']) if (CASES.includes(k)) sessions[k] = await sid();
for (let round = 0; round < ROUNDS; round++) {
  for (const k of ['idle', ...['a', 'b', 'c'].filter((x) => CASES.includes(x))]) {
    const { t, r } = await cases[k](sessions[k]);
    all[k] ||= { t: [], r: [] };
    for (const x of t) all[k].t.push(x);
    all[k].r.push(r);
  }
}
console.log(`ping round trips on one drun-mcp while another session works (${ROUNDS} round(s))`);
console.log('case                          pings    p50 ms   p99 ms   max ms  p99/floor  the other call');
const floor = pct(all.idle.t, 99);
for (const k of Object.keys(all)) {
  const { t, r } = all[k];
  const other = r.map((x) => `${Math.round(x.ms)} ms${x.error ? ' ' + String(x.error).slice(0, 60) : ''}`).join(', ');
  console.log(`${names[k].padEnd(28)} ${String(t.length).padStart(6)} ${fmt(pct(t, 50))} ${fmt(pct(t, 99))} ${fmt(t.reduce((m, x) => (x > m ? x : m), 0))} ${(pct(t, 99) / floor).toFixed(1).padStart(9)}x  ${k === 'idle' ? '' : other}`);
}
console.log('target: p99 <= 20 ms in (a), (b) and (c)');
await client.close();
if (server) server.kill('SIGKILL'); // its pipe would keep this process alive
process.exit(0);
