// test_bash_warm.mjs - prepared ("warm") sandboxes of session_bash (issue 9), against the
// real build/drun-mcp, a temp DB and real bubblewrap.
//
// Covers: the first call of a session goes cold and the next one warm (the result says
// which); a config change between two calls discards the prepared sandbox, so the second
// call runs cold under the new policy; a 1 MiB command runs warm; 50 attached sessions
// hold at most 50 waiting sandboxes, none after session_close; and no sandbox outlives the
// daemon, whether it exits normally or is killed with SIGKILL (--die-with-parent).
// Processes are found through /proc (children of the daemon). Waiting for a killed
// process to disappear polls /proc with a bound; nothing asserts on speed.
import { mkdirSync, writeFileSync, utimesSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { MCP, RawServer, Results, assert, assertEq, makeTmp } from './lib.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
try {
  execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
} catch (e) {
  console.log('skip test_bash_warm: bwrap cannot create a sandbox here (run drun-mcp doctor)');
  console.log('0 passed, 0 failed');
  process.exit(77);
}

const tmp = makeTmp();
const extra = join(tmp, 'extra');
mkdirSync(extra);
writeFileSync(join(extra, 'marker.txt'), 'visible\n');
const BASE = 'bash_timeout_ms = 60000\nmax_sessions = 60\n';
let cfgAge = 0;
function writeConfig(cfg, text) {
  writeFileSync(cfg, text);
  cfgAge += 10; // the policy reloads on a stat change: move the mtime forward each time
  const t = new Date(Date.now() + cfgAge * 1000);
  utimesSync(cfg, t, t);
}

// Children of pid (from /proc/*/stat), with their command names.
function children(pid) {
  const out = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    let st;
    try {
      st = readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue;
    }
    const close = st.lastIndexOf(')');
    const comm = st.slice(st.indexOf('(') + 1, close);
    const ppid = Number(st.slice(close + 2).split(' ')[1]);
    if (ppid === pid) out.push({ pid: Number(e), comm });
  }
  return out;
}
const alive = (pid) => existsSync(`/proc/${pid}/stat`) && !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
async function gone(pids, what) {
  for (let i = 0; i < 500 && pids.some(alive); i++) await new Promise((r) => setTimeout(r, 20));
  const left = pids.filter(alive);
  assert(left.length === 0, `${what}: ${left.length} sandbox processes left (${left.join(' ')})`);
}
// The waiting sandboxes of a daemon: its bwrap children and their children (pid 1 inside).
function waiting(pid) {
  const outer = children(pid).filter((c) => c.comm === 'bwrap');
  const inner = outer.flatMap((c) => children(c.pid));
  return { outer, inner, all: [...outer, ...inner].map((c) => c.pid) };
}

async function start(name, env = {}) {
  const dir = join(tmp, name);
  mkdirSync(dir);
  mkdirSync(join(dir, 'xdg'), { mode: 0o700 });
  const cfg = join(dir, 'config.toml');
  writeConfig(cfg, BASE);
  const srv = new RawServer(MCP, ['--db', join(dir, 'w.db'), '--config', cfg], { XDG_RUNTIME_DIR: join(dir, 'xdg'), DRUN_SANDBOX_WARM: 'auto', ...env });
  await srv.initialize();
  let id = 0;
  const tool = async (tname, args) => {
    const r = await srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: tname, arguments: args } });
    if (!r.result || r.result.isError) throw new Error(`${tname}: ${JSON.stringify(r).slice(0, 400)}`);
    const text = r.result.content[0].text;
    return text.startsWith('{') ? JSON.parse(text) : text;
  };
  // The next sandbox is prepared right after the answer is written; a ping answered after
  // it proves the daemon got past that point (one loop, requests in order).
  const bash = async (sid, command) => {
    const r = await tool('session_bash', { command, description: 'warm test', session_id: sid });
    await srv.alive(`after-${id}`);
    return r;
  };
  return { srv, cfg, tool, bash, pid: srv.proc.pid };
}

const A = await start('a');
const sA = (await A.tool('create_session', {})).session_id;

await R.run('the first call goes cold, the next one warm, with the same result', async () => {
  const r1 = await A.bash(sA, 'echo one; echo err >&2; exit 3');
  assertEq(r1.warm, false, 'first call (nothing prepared yet)');
  assertEq([r1.exit_code, r1.stdout_tail, r1.stderr_tail], [3, 'one\n', 'err\n'], 'cold result');
  const r2 = await A.bash(sA, 'echo two; echo err >&2; exit 3');
  assertEq(r2.warm, true, 'second call');
  assertEq([r2.exit_code, r2.stdout_tail, r2.stderr_tail], [3, 'two\n', 'err\n'], 'warm result');
});

await R.run('a waiting sandbox runs nothing of the user: only bwrap, one per session', async () => {
  await A.bash(sA, 'true');
  const w = waiting(A.pid);
  assertEq(w.outer.length, 1, 'waiting sandboxes of one session');
  for (const c of [...w.outer, ...w.inner]) assertEq(c.comm, 'bwrap', `process ${c.pid} while waiting`);
});

await R.run('the command cannot read its own pipe, and sees only its own text', async () => {
  const r = await A.bash(sA, 'ls /proc/self/fd | sort -n | tr "\\n" " "; cat <&5 2>/dev/null && echo READ5; echo "$__drun_script" | wc -c');
  assertEq(r.warm, true, 'warm');
  assertEq(r.stdout_tail, '0 1 2 3 1\n', 'fds, fd 5 closed, helper variable unset');
});

await R.run('a config change between two calls discards the prepared sandbox', async () => {
  const r1 = await A.bash(sA, `cat '${join(extra, 'marker.txt')}' 2>/dev/null || echo hidden`);
  assertEq([r1.warm, r1.stdout_tail], [true, 'hidden\n'], 'before: not allowlisted');
  writeConfig(A.cfg, `${BASE}mount_allowlist = ["${extra}"]\n`);
  const r2 = await A.bash(sA, `cat '${join(extra, 'marker.txt')}' 2>/dev/null || echo hidden`);
  assertEq([r2.warm, r2.stdout_tail], [false, 'visible\n'], 'after: the new policy, cold');
  const r3 = await A.bash(sA, `cat '${join(extra, 'marker.txt')}' 2>/dev/null || echo hidden`);
  assertEq([r3.warm, r3.stdout_tail], [true, 'visible\n'], 'the next one is warm again, new policy');
  writeConfig(A.cfg, `${BASE}sandbox_max_processes = 77\n`);
  const r4 = await A.bash(sA, 'ulimit -p 2>/dev/null || ulimit -u');
  assertEq([r4.warm, r4.stdout_tail], [false, '77\n'], 'a limit change goes cold too');
});

await R.run('a 1 MiB command runs warm', async () => {
  await A.bash(sA, 'true');
  const tailCmd = '\necho big-done';
  const cmd = '#' + 'x'.repeat(1048576 - 1 - tailCmd.length) + tailCmd;
  assertEq(cmd.length, 1048576, 'command size');
  const r = await A.bash(sA, cmd);
  assertEq([r.warm, r.exit_code, r.stdout_tail], [true, 0, 'big-done\n'], '1 MiB warm');
});

await R.run('50 attached sessions hold at most 50 waiting sandboxes, none after close', async () => {
  const ids = [];
  for (let i = 0; i < 50; i++) {
    const sid = (await A.tool('create_session', {})).session_id;
    ids.push(sid);
    await A.bash(sid, 'true');
  }
  const w = waiting(A.pid);
  assert(w.outer.length <= 51 && w.outer.length >= 50, `waiting sandboxes with 51 sessions: ${w.outer.length}`);
  for (const sid of ids) await A.tool('session_close', { session_id: sid });
  for (let i = 0; i < 500 && waiting(A.pid).outer.length > 1; i++) await new Promise((r) => setTimeout(r, 20));
  const after = waiting(A.pid);
  assert(after.outer.length <= 1, `waiting sandboxes after closing 50: ${after.outer.length}`);
  await gone(w.all.filter((p) => !after.all.includes(p)), 'the closed sessions');
});

await R.run('no sandbox outlives a daemon that exits normally', async () => {
  await A.bash(sA, 'true');
  const w = waiting(A.pid);
  assert(w.outer.length === 1, `one waiting sandbox before exit (${w.outer.length})`);
  A.srv.endInput();
  await A.srv.exit();
  await gone(w.all, 'after a normal exit');
});

await R.run('no sandbox outlives a daemon killed with SIGKILL (--die-with-parent)', async () => {
  const B = await start('b');
  const ids = [];
  for (let i = 0; i < 3; i++) {
    ids.push((await B.tool('create_session', {})).session_id);
    await B.bash(ids[i], 'true');
  }
  const w = waiting(B.pid);
  assertEq(w.outer.length, 3, 'waiting sandboxes before the kill');
  B.srv.proc.kill('SIGKILL');
  await B.srv.exit();
  await gone(w.all, 'after SIGKILL');
});

await R.run('DRUN_SANDBOX_WARM=off keeps every call cold', async () => {
  const C = await start('c', { DRUN_SANDBOX_WARM: 'off' });
  const sid = (await C.tool('create_session', {})).session_id;
  for (let i = 0; i < 3; i++) assertEq((await C.bash(sid, 'echo x')).warm, false, `call ${i}`);
  assertEq(waiting(C.pid).outer.length, 0, 'nothing prepared');
  C.srv.endInput();
  await C.srv.exit();
});

R.done();
