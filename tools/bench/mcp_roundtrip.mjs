#!/usr/bin/env node
// mcp_roundtrip.mjs - drun-mcp's stdio round trip against a raw pipe echo, and its RSS.
//
//   node tools/bench/mcp_roundtrip.mjs [BUILD_DIR]      (BENCH_CALLS=100000 by default)
//
// Measures, in one run: p50/p99 of a raw pipe echo between two processes (this script
// and `cat`), of `ping` and of a trivial tool call (get_config, which also writes its
// audit row) over drun-mcp's stdio; prints the ratios to the echo (target: tool call
// <= 3x). Then RSS after 1,000 calls and after BENCH_CALLS calls (target: within 10 %).
// The DB lives in /dev/shm when there is one, so the disk's fsync does not dominate.
// Not a test: it prints numbers and never fails on them.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

const build = resolve(process.argv[2] || process.env.DRUN_BUILD || 'build');
const bin = join(build, 'drun-mcp');
const total = Number(process.env.BENCH_CALLS || 100000);
const samples = Number(process.env.BENCH_SAMPLES || 3000);
const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : '/tmp', 'drun-bench-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

function lineClient(proc) {
  const waiters = [];
  createInterface({ input: proc.stdout }).on('line', (l) => waiters.shift()(l));
  return (text) => new Promise((res) => {
    waiters.push(res);
    proc.stdin.write(text + '\n');
  });
}

async function timeIt(send, mk, n) {
  const t = [];
  for (let i = 0; i < n; i++) {
    const msg = mk(i);
    const t0 = process.hrtime.bigint();
    await send(msg);
    t.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  t.sort((a, b) => a - b);
  return { p50: t[Math.floor(n * 0.5)], p99: t[Math.floor(n * 0.99)] };
}

const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const fmt = (x) => `${x.toFixed(1)} us`;

// The floor: a line through a pipe to another process and back.
const cat = spawn('cat', [], { stdio: ['pipe', 'pipe', 'inherit'] });
const echo = lineClient(cat);
await timeIt(echo, (i) => `{"jsonrpc":"2.0","id":${i},"method":"ping"}`, 200); // warm up
const raw = await timeIt(echo, (i) => `{"jsonrpc":"2.0","id":${i},"method":"ping"}`, samples);
cat.stdin.end();

const srv = spawn(bin, ['--db', join(dir, 'bench.db')], { stdio: ['pipe', 'pipe', 'inherit'] });
const rpc = lineClient(srv);
await rpc(JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } }));
const call = (i) => `{"jsonrpc":"2.0","id":${i},"method":"tools/call","params":{"name":"get_config","arguments":{}}}`;
await timeIt(rpc, (i) => `{"jsonrpc":"2.0","id":${i},"method":"ping"}`, 200);
const ping = await timeIt(rpc, (i) => `{"jsonrpc":"2.0","id":${i},"method":"ping"}`, samples);
const tool = await timeIt(rpc, call, samples);

console.log(`raw pipe echo     p50 ${fmt(raw.p50)}  p99 ${fmt(raw.p99)}`);
console.log(`drun ping         p50 ${fmt(ping.p50)}  p99 ${fmt(ping.p99)}  (${(ping.p50 / raw.p50).toFixed(2)}x / ${(ping.p99 / raw.p99).toFixed(2)}x the echo)`);
console.log(`drun get_config   p50 ${fmt(tool.p50)}  p99 ${fmt(tool.p99)}  (${(tool.p50 / raw.p50).toFixed(2)}x / ${(tool.p99 / raw.p99).toFixed(2)}x the echo; target <= 3x)`);

// RSS: pipelined calls (64 in flight) so 100,000 calls take seconds, not minutes.
let done = samples + 400;
async function calls(upto) {
  while (done < upto) {
    const batch = [];
    for (let k = 0; k < 64 && done < upto; k++, done++) batch.push(rpc(call(done + 1000)));
    await Promise.all(batch);
  }
}
await calls(1000);
const r1 = rss(srv.pid);
const t0 = Date.now();
await calls(Math.min(10000, total));
const r10 = rss(srv.pid);
await calls(total);
const r2 = rss(srv.pid);
// SQLite's page cache (2 MiB by default) fills as the audit table grows, so the growth
// that matters for leaks is the one after it is full: 10,000 -> total.
console.log(`RSS after 10000 calls ${r10} KiB; from there to ${total}: ${(((r2 - r10) / r10) * 100).toFixed(1)} %`);
console.log(`RSS after ${1000} calls ${r1} KiB, after ${total} calls ${r2} KiB: ${(((r2 - r1) / r1) * 100).toFixed(1)} % (target within 10 %); ` +
  `${((total - 1000) / ((Date.now() - t0) / 1000)).toFixed(0)} calls/s pipelined`);
srv.stdin.end();
await new Promise((res) => srv.on('exit', res));
