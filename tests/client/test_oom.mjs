// test_oom.mjs - out of memory anywhere in a short session: never a crash, never a hang.
//
// build/tests/failmalloc.so (tests/support/failmalloc/) makes the N-th malloc, calloc or
// realloc of the whole drun-mcp process fail. Two runs without a failure count the
// allocations up to the end of initialize and up to the end of a session (create_session,
// session_write_files, session_bash, session_read_file); the sweep then fails one
// allocation per run at OOM_RUNS places (default 100) over start-up and the session. In every run each request
// must be answered (a result or an error), or the daemon must exit cleanly (an exit code,
// not a signal) having said why on stderr; it must never die by SIGSEGV or SIGABRT and
// never leave a request unanswered while it lives. Allocation counts differ a little from
// run to run (threads), which only moves where each failure lands.
//
// libseccomp is spared (FAILMALLOC_SPARE): libseccomp 2.5.4's seccomp_export_bpf never
// returns when one of its allocations fails (seen by this sweep: the daemon spun in it
// while compiling the sandbox's filter on the first command). That is the library's
// defect; compiling the constant filter at build time would take libseccomp off the
// daemon's path and this exception with it.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD, MCP_TESTING, RawServer, Results, assert, makeTmp, requireBinaries } from './lib.mjs';

const R = new Results();
requireBinaries(R);
const SHIM = join(BUILD, 'tests', 'failmalloc.so');
// A sanitizer build replaces malloc itself and must come first in the library list.
if (readFileSync(MCP_TESTING).includes('__asan_init')) {
  console.log('skip: the sweep needs a build without AddressSanitizer (its malloc is its own)');
  console.log('0 passed, 0 failed, 1 skipped');
  process.exit(0);
}
const RUNS = Number(process.env.OOM_RUNS || 100);
const tmp = makeTmp();
let dbn = 0;

const session = [
  { name: 'create_session', arguments: {} },
  { name: 'session_write_files', arguments: { description: 'a', entries: [{ path: 'a.txt', content: 'hello\n' }] } },
  { name: 'session_bash', arguments: { command: 'cat a.txt; echo more >> a.txt', description: 'b' } },
  { name: 'session_read_file', arguments: { path: 'a.txt', description: 'c' } },
];

// One run; returns {answered, exit, stderr}. Throws on a crash, a hang or a bad line.
async function run(nth, report) {
  const env = { LD_PRELOAD: SHIM, FAILMALLOC_NTH: String(nth), FAILMALLOC_SPARE: 'libseccomp' };
  if (report) env.FAILMALLOC_REPORT = report;
  const t = new RawServer(MCP_TESTING, ['--db', join(tmp, `oom${dbn++}.db`)], env);
  const reqs = [{ jsonrpc: '2.0', id: 'init', method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'oom', version: '1' } } }];
  session.forEach((p, i) => reqs.push({ jsonrpc: '2.0', id: `c${i}`, method: 'tools/call', params: p }));
  let answered = 0;
  for (const q of reqs) {
    t.send(q);
    if (q.id === 'init') t.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    let m;
    try {
      m = await t.next(`the answer to ${q.id} (allocation ${nth})`);
    } catch (e) {
      if (t.exitCode === undefined) throw e; // a hang: alive but silent
      break;
    }
    assert(m.msg && m.msg.id === q.id && (m.msg.result || m.msg.error), `allocation ${nth}: bad answer to ${q.id}: ${m.line.slice(0, 200)}`);
    answered++;
  }
  t.endInput();
  const exit = await t.exit();
  assert(exit !== 'hang', `allocation ${nth}: no exit after the end of input`);
  assert(typeof exit === 'number', `allocation ${nth}: died by ${exit}; stderr: ${t.stderr.slice(-400)}`);
  if (answered < reqs.length) {
    assert(/drun-mcp: /.test(t.stderr), `allocation ${nth}: exited ${exit} mid-session without a message`);
  }
  assert(t.badLines.length === 0, `allocation ${nth}: ${t.badLines.join('; ')}`);
  return { answered, exit, stderr: t.stderr, total: reqs.length };
}

async function count(upto) {
  const report = join(tmp, `count${dbn}`);
  const env = { LD_PRELOAD: SHIM, FAILMALLOC_REPORT: report };
  const t = new RawServer(MCP_TESTING, ['--db', join(tmp, `oom${dbn++}.db`)], env);
  await t.initialize();
  for (let i = 0; i < upto; i++) {
    const m = await t.request({ jsonrpc: '2.0', id: `c${i}`, method: 'tools/call', params: session[i] });
    assert(m.result && !m.result.isError, `${session[i].name} without a failure: ${JSON.stringify(m).slice(0, 300)}`);
  }
  t.endInput();
  assert((await t.exit()) === 0, 'exit');
  assert(existsSync(report), 'the shim wrote no count (is LD_PRELOAD honoured?)');
  return Number(readFileSync(report, 'utf8'));
}

let lo = 0;
let hi = 0;
await R.run('the shim counts allocations', async () => {
  lo = await count(0);
  hi = await count(session.length);
  assert(hi > lo && lo > 0, `counts ${lo} .. ${hi}`);
  console.log(`# allocations: ${lo} to the end of initialize, ${hi} for the whole session`);
});
const outcomes = { answered: 0, exited: 0 };
await R.run(`failing one allocation, ${RUNS} places over the session: no crash, no hang`, async () => {
  const seen = new Set();
  const failures = [];
  for (let k = 0; k < RUNS; k++) {
    // 10 places spread over start-up, 20 one by one around the end of initialize, then
    // the rest spread over the session
    const nth = k < 10 ? Math.round(1 + ((lo - 20) * k) / 10)
      : k < 30 ? lo - 10 + (k - 10)
        : Math.round(lo + 10 + ((hi - lo) * (k - 30)) / Math.max(RUNS - 31, 1));
    if (seen.has(nth) || nth <= 0) continue;
    seen.add(nth);
    try {
      const r = await run(nth);
      if (r.answered === r.total) outcomes.answered++;
      else outcomes.exited++;
    } catch (e) {
      failures.push(e.message);
    }
  }
  console.log(`# ${outcomes.answered} runs answered every request, ${outcomes.exited} exited cleanly mid-session`);
  for (const f of failures) console.log(`# ${f}`);
  assert(failures.length === 0, `${failures.length} runs failed (listed above)`);
});
R.done();
