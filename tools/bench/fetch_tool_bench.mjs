// fetch_tool_bench.mjs - session_fetch end to end through the real drun-mcp (see
// fetch_tool_bench.sh): a loopback HTTP server (its own node process) serves 100 MiB of
// mixed content, 64 KiB blocks alternately random and text-like (a new 8-byte prefix per
// request, so every round stores a new blob rather than finding it stored). N rounds,
// each interleaving `curl -s -o /dev/null` of the URL and session_fetch of it (which
// streams the body into the store: hash, zstd, temporary file, copy into the row, then
// the checkpoint). Prints the p50 of each and the throughput ratio (target >= 0.8), and
// the daemon's peak RSS growth during each fetch (VmHWM after, reset through
// /proc/PID/clear_refs before, minus VmRSS before) divided by the writer's chunk
// (STORE_BLOB_CHUNK, 1 MiB; target < 2). After each fetch a session_bash `wc -c` syncs
// the file into the workspace: its time and the daemon's peak RSS growth across it are
// printed too. Ratios only; nothing asserts on speed.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RawServer, BUILD } from '../../tests/client/lib.mjs';

const N = Math.max(1, Number(process.argv[2] || 5));
const SIZE = Number(process.env.FETCH_BENCH_BYTES || 100 << 20);
const CHUNK = 1 << 20;
const tmp = mkdtempSync(join(tmpdir(), 'drun-fetch-tool-bench-'));
process.on('exit', () => rmSync(tmp, { recursive: true, force: true }));

const serverSrc = `
const http = require('node:http');
const crypto = require('node:crypto');
const SIZE = ${SIZE};
const line = Buffer.from('the quick brown fox jumps over the lazy dog 0123456789\\n');
const mixed = Buffer.alloc(SIZE);
for (let off = 0, i = 0; off < SIZE; off += 65536, i++) {
  const n = Math.min(65536, SIZE - off);
  if (i % 2 === 0) crypto.randomFillSync(mixed, off, n);
  else for (let k = 0; k < n; k++) mixed[off + k] = line[(k + i) % line.length];
}
const random = crypto.randomBytes(SIZE);
// Text: lines of words drawn (xorshift PRNG) from a 4,096-word vocabulary, with numbers,
// so it compresses about 3:1 like prose, logs or source, not 100:1 like one repeated line.
let x = 2463534242;
const rnd = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
const vocab = Array.from({ length: 4096 }, () => Array.from({ length: 2 + (rnd() % 9) }, () => String.fromCharCode(97 + (rnd() % 26))).join(''));
const text = Buffer.alloc(SIZE);
for (let off = 0; off < SIZE; ) {
  let l = '';
  for (let w = 8 + (rnd() % 7); w > 0; w--) l += (rnd() % 9 === 0 ? String(rnd() % 100000) : vocab[rnd() % 4096]) + ' ';
  off += text.write(l + '\\n', off);
}
const bodies = { mixed, random, text };
let count = 0;
const srv = http.createServer((req, res) => {
  const body = bodies[req.url.slice(1)] || mixed;
  body.writeBigUInt64LE(BigInt(++count), 0);
  res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': SIZE });
  res.end(body);
});
srv.listen(0, '127.0.0.1', () => console.log('PORT ' + srv.address().port));
`;
const server = spawn(process.execPath, ['-e', serverSrc], { stdio: ['ignore', 'pipe', 'inherit'] });
process.on('exit', () => server.kill('SIGKILL'));
const port = await new Promise((res) => {
  let out = '';
  server.stdout.on('data', (d) => {
    out += d;
    const m = /PORT (\d+)/.exec(out);
    if (m) res(Number(m[1]));
  });
});
const base = `http://127.0.0.1:${port}`;

const cfg = join(tmp, 'config.toml');
writeFileSync(cfg, `domain_allowlist = ["127.0.0.1"]
fetch_allow_private = true
fetch_max_bytes = ${SIZE + (1 << 20)}
max_workspace_mb = ${Math.ceil(SIZE / (1 << 20)) * 4 + 16}
${process.env.FETCH_BENCH_SYNC ? `sqlite_synchronous = "${process.env.FETCH_BENCH_SYNC}"\n` : ''}`);
// By default glibc keeps freed big buffers for reuse (its mmap threshold rises after the
// first free), so only round 1 shows a fetch's peak and later rounds show ~0 growth.
// FETCH_BENCH_MALLOC=fixed pins the threshold at glibc's initial 128 KiB: every big buffer
// goes back to the kernel when freed and each round's peak is a true one; it also makes
// the daemon slower (mmap/munmap churn), so time the default and measure memory fixed.
const mallocEnv = process.env.FETCH_BENCH_MALLOC === 'fixed' ? { MALLOC_MMAP_THRESHOLD_: '131072' } : {};
const srv = new RawServer(join(BUILD, 'drun-mcp'), ['--db', join(tmp, 'f.db'), '--config', cfg], { XDG_RUNTIME_DIR: tmp, ...mallocEnv });
await srv.initialize();
let id = 0;
async function tool(name, args) {
  const r = await srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
  if (!r.result || r.result.isError) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 400)}`);
  return JSON.parse(r.result.content[0].text);
}
const sid = (await tool('create_session', {})).session_id;
const sql = (q) => spawnSync('sqlite3', [join(tmp, 'f.db'), q], { encoding: 'utf8' }).stdout.trim();

const pid = srv.proc.pid;
const status = (key) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
const now = () => Number(process.hrtime.bigint()) / 1e6;
const p50 = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const mib = (b) => (b / 1048576).toFixed(1);
const cpu = () => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, ms (USER_HZ 100)
};
// A second floor that does what the store must do (hash, zstd -3, write, fsync), as a
// shell pipeline (its processes run in parallel); FETCH_BENCH_PIPE=1, needs bash and zstd.
const havePipe = process.env.FETCH_BENCH_PIPE === '1' && spawnSync('sh', ['-c', 'command -v bash && command -v zstd && command -v sha256sum'], { stdio: 'ignore' }).status === 0;
const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const floorFile = join(tmp, 'curl.out'); // beside the DB: the same file system
const bodies = (process.env.FETCH_BENCH_BODIES || 'text,random').split(',');
console.log(`fetch_tool_bench: ${mib(SIZE)} MiB bodies ${bodies.join(', ')}; ${N} rounds interleaved, loadavg ${load}, sqlite_synchronous ${process.env.FETCH_BENCH_SYNC || 'full (default)'}${mallocEnv.MALLOC_MMAP_THRESHOLD_ ? ', MALLOC_MMAP_THRESHOLD_=131072' : ''}`);

async function runBody(body) {
  const url = `${base}/${body}`;
  const t = { curl: [], disk: [], pipe: [], drun: [], rss: [], cpu: [], bash: [], rssBash: [] };
  const pipeCmd = `set -o pipefail; curl -s '${url}' | tee >(sha256sum > /dev/null) | zstd -q -3 -c > '${join(tmp, 'out.zst')}' && sync '${join(tmp, 'out.zst')}'`;
  // FETCH_BENCH_WARMUP=1: one untimed fetch first, so round 1 shows no one-time growth
  // (SQLite's page cache filling to its cache_size, first-use allocations).
  if (process.env.FETCH_BENCH_WARMUP === '1') await tool('session_fetch', { url, description: 'warm-up', session_id: sid });
  for (let i = 0; i < N; i++) {
    let s = now();
    const c = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{size_download}', url], { encoding: 'utf8' });
    t.curl.push(now() - s);
    if (c.status !== 0 || Number(c.stdout) !== SIZE) throw new Error(`curl: ${c.status} ${c.stdout}`);
    // The durable floor: the body in a file on the DB's file system, synced.
    rmSync(floorFile, { force: true });
    s = now();
    const d = spawnSync('sh', ['-c', `curl -s -o '${floorFile}' '${url}' && sync '${floorFile}'`], { stdio: 'ignore' });
    t.disk.push(now() - s);
    if (d.status !== 0) throw new Error(`curl -o FILE && sync FILE failed: ${d.status}`);
    rmSync(floorFile, { force: true });
    if (havePipe) {
      s = now();
      const q = spawnSync('bash', ['-c', pipeCmd], { stdio: 'ignore' });
      t.pipe.push(now() - s);
      if (q.status !== 0) throw new Error(`pipeline floor failed: ${q.status}`);
    }
    let canReset = true;
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, '5');
    } catch {
      canReset = false;
    }
    const before = canReset ? status('VmRSS') : status('VmHWM');
    const c0 = cpu();
    s = now();
    const r = await tool('session_fetch', { url, description: 'bench', session_id: sid });
    t.drun.push(now() - s);
    t.cpu.push(cpu() - c0);
    if (r.bytes !== SIZE) throw new Error(`session_fetch got ${r.bytes} bytes`);
    t.rss.push(status('VmHWM') - before);
    if (process.env.FETCH_BENCH_BASH === '0') continue;
    // The next command syncs the 100 MiB file into the workspace (streamed from the store
    // through store_blob_write_fd, never whole in memory).
    if (canReset) writeFileSync(`/proc/${pid}/clear_refs`, '5');
    const before2 = canReset ? status('VmRSS') : status('VmHWM');
    s = now();
    const b = await tool('session_bash', { command: `wc -c < '${r.saved_to}'`, description: 'bench: size', session_id: sid });
    t.bash.push(now() - s);
    t.rssBash.push(status('VmHWM') - before2);
    if (!JSON.stringify(b).includes(String(SIZE))) throw new Error(`wc -c: ${JSON.stringify(b).slice(0, 300)}`);
  }
  const stored = sql(`SELECT codec, length(data) FROM blobs WHERE size = ${SIZE} ORDER BY rowid DESC LIMIT 1`);
  const rDisk = p50(t.disk) / p50(t.drun);
  const rNull = p50(t.curl) / p50(t.drun);
  console.log(`[${body}] stored as codec|bytes ${stored}`);
  console.log(`  curl -o /dev/null            p50 ${p50(t.curl).toFixed(0)} ms  (${(SIZE / 1048576 / (p50(t.curl) / 1000)).toFixed(0)} MiB/s)`);
  console.log(`  curl -o FILE && sync FILE    p50 ${p50(t.disk).toFixed(0)} ms  (${(SIZE / 1048576 / (p50(t.disk) / 1000)).toFixed(0)} MiB/s)`);
  if (havePipe) console.log(`  curl | tee >(sha256sum) | zstd -3 > file; sync  p50 ${p50(t.pipe).toFixed(0)} ms`);
  console.log(`  session_fetch                p50 ${p50(t.drun).toFixed(0)} ms  (${(SIZE / 1048576 / (p50(t.drun) / 1000)).toFixed(0)} MiB/s), daemon CPU p50 ${p50(t.cpu).toFixed(0)} ms`);
  console.log(`  ratio vs curl -o FILE && sync = ${rDisk.toFixed(2)} (target >= 0.8); vs curl -o /dev/null = ${rNull.toFixed(2)} (target >= 0.3)`);
  // Round 1 of a fresh daemon also pays one-time growth (SQLite's page cache filling to its
  // cache_size at the first big write): reported apart from the per-fetch peak.
  const later = t.rss.length > 1 ? t.rss.slice(1) : t.rss;
  console.log(`  daemon peak RSS growth per fetch: round 1 ${mib(t.rss[0])} MiB; rounds ${t.rss.length > 1 ? '2+' : '1'}: p50 ${mib(p50(later))} MiB, max ${mib(Math.max(...later))} MiB = ${(Math.max(...later) / CHUNK).toFixed(2)}x the 1 MiB chunk (target < 2)${mallocEnv.MALLOC_MMAP_THRESHOLD_ ? '' : '; FETCH_BENCH_MALLOC=fixed for true per-round peaks'}`);
  if (t.bash.length) console.log(`  session_bash 'wc -c' after each fetch (syncs the file into the workspace): p50 ${p50(t.bash).toFixed(0)} ms, daemon peak RSS growth p50 ${mib(p50(t.rssBash))} MiB, max ${mib(Math.max(...t.rssBash))} MiB`);
  console.log(`  rounds (ms curl/curl+sync/drun, MiB RSS growth): ${t.curl.map((c, k) => `${c.toFixed(0)}/${t.disk[k].toFixed(0)}/${t.drun[k].toFixed(0)} ${mib(t.rss[k])}`).join('  ')}`);
}
for (const b of bodies) await runBody(b);
srv.proc.stdin.end();
server.kill('SIGKILL');
