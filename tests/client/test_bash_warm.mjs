// test_bash_warm.mjs - prepared ("warm") sandboxes of session_bash (issue 9), against the
// real build/drun-mcp, a temp DB and real bubblewrap.
//
// Covers: a session's first sandbox is prepared on create_session, on session_switch, on
// session_fork (the new session) and on an implicit attach (another tool's session_id), so
// its first call is warm, and after each call the next one (the result says which); both ways of handing the script over
// (short scripts read line by line by the shell's `read`, long ones by cat) keep `sh -c`
// semantics and close the pipe first; a session with an overlay runs warm once its
// prepared sandbox has the overlay mounted, never checkpoints the mount point, and goes
// cold when a sync removed the mount point under the waiting sandbox; a config change between two calls, or between
// create_session and the first call, discards the prepared sandbox, so the call runs cold
// under the new policy; a 1 MiB command runs warm; 50 attached sessions hold at most 50
// waiting sandboxes, none after session_close; and no sandbox outlives the daemon,
// whether it exits normally or is killed with SIGKILL (--die-with-parent).
// Processes are found through /proc (children of the daemon). Waiting for a killed
// process to disappear polls /proc with a bound; nothing asserts on speed.
import { chmodSync, mkdirSync, writeFileSync, utimesSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { MCP, RawServer, Results, assert, assertEq, makeTmp, waitFor } from './lib.mjs';

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
chmodSync(tmp, 0o711); // a root daemon's sandbox user passes through to its workspaces
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
  try {
    await waitFor(() => !pids.some(alive), what);
  } catch {}
  const left = pids.filter(alive);
  assert(left.length === 0, `${what}: ${left.length} sandbox processes left (${left.join(' ')})`);
}
// The waiting sandboxes of a daemon: its bwrap children and their children (pid 1 inside).
function waiting(pid) {
  const outer = children(pid).filter((c) => c.comm === 'bwrap');
  const inner = outer.flatMap((c) => children(c.pid));
  return { outer, inner, all: [...outer, ...inner].map((c) => c.pid) };
}

async function start(name, env = {}, db = null) {
  const dir = join(tmp, name);
  mkdirSync(dir);
  mkdirSync(join(dir, 'xdg'), { mode: 0o711 }); // a root daemon's sandbox user passes through
  const cfg = join(dir, 'config.toml');
  writeConfig(cfg, BASE);
  const srv = new RawServer(MCP, ['--db', db || join(dir, 'w.db'), '--config', cfg], { XDG_RUNTIME_DIR: join(dir, 'xdg'), DRUN_SANDBOX_WARM: 'auto', ...env });
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
  // create_session and session_switch prepare after their answer: the same ping proves it.
  const toolSync = async (tname, args) => {
    const r = await tool(tname, args);
    await srv.alive(`after-${id}`);
    return r;
  };
  return { srv, cfg, tool, toolSync, bash, pid: srv.proc.pid, dir };
}

const A = await start('a');
const before = waiting(A.pid).outer.length;
const sA = (await A.toolSync('create_session', {})).session_id;

await R.run('create_session prepares the first sandbox: the first call is warm', async () => {
  assertEq(waiting(A.pid).outer.length, before + 1, 'waiting sandboxes after create_session');
  const r1 = await A.bash(sA, 'echo one; echo err >&2; exit 3');
  assertEq(r1.warm, true, 'first call after create_session');
  assertEq([r1.exit_code, r1.stdout_tail, r1.stderr_tail], [3, 'one\n', 'err\n'], 'warm result');
  const r2 = await A.bash(sA, 'echo two; echo err >&2; exit 3');
  assertEq(r2.warm, true, 'second call');
  assertEq([r2.exit_code, r2.stdout_tail, r2.stderr_tail], [3, 'two\n', 'err\n'], 'warm result');
});

await R.run('warm and cold give the same result for awkward scripts, short and long', async () => {
  const C = await start('sem', { DRUN_SANDBOX_WARM: 'off' });
  const sC = (await C.tool('create_session', {})).session_id;
  const pad = (n) => `: ${'p'.repeat(n)}\n`;
  const scripts = [
    'echo hi',
    'echo hi\n',
    '  printf "%s|\\n" "  lead" \'back\\slash\' ; echo a \\\n  b',
    'x=1\nif [ $x = 1 ]; then\n\techo "tab"\nfi\nexit 7\necho never',
    'echo "no newline at the end" \\',
    'echo one\n\n\n',
    'cat <<EOF\n  $HOME \\$x\nEOF\necho after',
    'echo "$0" "$#"; false',
  ];
  // Around the size where the warm path switches from `read` to cat (512 bytes).
  for (const n of [511, 512, 513, 2000]) {
    const body = 'echo edge; echo $((6 * 7))\n';
    scripts.push(pad(n - body.length - 3) + body);
  }
  // The long (cat) path must keep a script's trailing newlines: a final backslash-newline
  // and an unterminated here-document at the end change meaning without them.
  scripts.push(`${pad(600)}echo a \\\n`);
  scripts.push(`${pad(600)}cat <<EOF\nx\n\n\n`);
  for (const [i, cmd] of scripts.entries()) {
    const w = await A.bash(sA, cmd);
    const c = await C.bash(sC, cmd);
    assertEq(w.warm, true, `script ${i} warm`);
    assertEq(c.warm, false, `script ${i} cold`);
    assertEq([w.exit_code, w.stdout_tail, w.stderr_tail], [c.exit_code, c.stdout_tail, c.stderr_tail], `script ${i} (${cmd.length} bytes): warm vs cold`);
  }
  C.srv.endInput();
  await C.srv.exit();
});

// A prepared sandbox with an overlay is used only once the overlay is mounted inside it;
// wait for that (as the daemon checks it, in pid 1's mountinfo), then let the daemon read
// the pid-1 report with a ping. Every caller expects the overlay to get there (a call
// before it would just run cold, which the test would then report).
async function overlayReady(D, point) {
  await waitFor(() => {
    const inner = waiting(D.pid).inner;
    let ok = inner.length > 0;
    for (const c of inner) {
      try {
        ok = ok && readFileSync(`/proc/${c.pid}/mountinfo`, 'utf8').split('\n').some((l) => l.split(' ')[4] === point);
      } catch {
        ok = false;
      }
    }
    return ok;
  }, `the overlay at ${point} mounted in the waiting sandbox`);
  await D.srv.alive('overlay-ready');
}

await R.run('a session with an overlay runs warm, overlay visible, mount point never checkpointed', async () => {
  const O = await start('ov');
  const src = join(O.dir, 'src');
  mkdirSync(join(src, 'node_modules', 'pkg'), { recursive: true });
  writeFileSync(join(src, 'node_modules', 'pkg', 'index.js'), 'overlay-ok\n');
  writeFileSync(join(src, 'a.txt'), 'a\n');
  writeConfig(O.cfg, `${BASE}mount_allowlist = ["${src}"]\n`);
  const sid = (await O.toolSync('create_session', {})).session_id;
  assertEq(waiting(O.pid).outer.length, 1, 'prepared on create (no overlay yet)');
  const m = await O.tool('session_mount', { path: src, description: 'mount', session_id: sid });
  assertEq(m.overlays.map((o) => o.key), ['node_modules'], 'overlay registered');
  const probe = 'cat node_modules/pkg/index.js a.txt';
  const r1 = await O.bash(sid, probe);
  assertEq([r1.warm, r1.exit_code, r1.stdout_tail], [false, 0, 'overlay-ok\na\n'], 'first call: the sandbox prepared without the overlay is discarded');
  for (let i = 0; i < 3; i++) {
    assertEq(waiting(O.pid).outer.length, 1, `call ${i}: one prepared sandbox, with the overlay`);
    await overlayReady(O, '/workspace/node_modules');
    const r = await O.bash(sid, `${probe}; echo x > f${i}.txt`);
    assertEq([r.warm, r.exit_code, r.stdout_tail], [true, 0, 'overlay-ok\na\n'], `warm call ${i}: overlay and files visible`);
  }
  const st = await O.tool('get_session_state', { session_id: sid, description: 'state' });
  assertEq(st.workspace_file_count, 4, 'checkpoint: a.txt and f0..f2 only, no mount point');
  const ls = await O.bash(sid, 'ls -a node_modules/..; ls node_modules');
  assertEq(ls.stdout_tail, '.\n..\na.txt\nf0.txt\nf1.txt\nf2.txt\nnode_modules\npkg\n', 'the mount point shows inside only');
  assert(!existsSync(join(`/proc/${O.srv.proc.pid}/root`, O.dir, 'xdg', 'drun', `pid-${O.srv.proc.pid}`, `ws-${sid}`, 'node_modules', 'pkg')), 'overlay contents never land in the host workspace');
  // The head gains a real node_modules/ then loses it: the sync before the next call
  // removes the mount point directory under the waiting sandbox, which detaches the
  // overlay there; the call must notice and still see the overlay.
  await O.tool('session_write_files', { entries: [{ path: 'node_modules/own.txt', content: 'own\n' }], description: 'w', session_id: sid });
  const r2 = await O.bash(sid, 'cat node_modules/pkg/index.js; ls node_modules');
  assertEq([r2.exit_code, r2.stdout_tail], [0, 'overlay-ok\npkg\n'], 'tracked file under the overlay is hidden by it');
  await O.tool('session_delete_files', { paths: ['node_modules/own.txt'], description: 'd', session_id: sid });
  await overlayReady(O, '/workspace/node_modules');
  const r3 = await O.bash(sid, probe);
  assertEq([r3.warm, r3.exit_code, r3.stdout_tail], [false, 0, 'overlay-ok\na\n'], 'the sync removed the mount point (overlay detached in the waiting sandbox): cold, overlay visible');
  O.srv.endInput();
  await O.srv.exit();
});

await R.run('a waiting sandbox runs nothing of the user: only bwrap, one per session', async () => {
  await A.bash(sA, 'true');
  const w = waiting(A.pid);
  assertEq(w.outer.length, 1, 'waiting sandboxes of one session');
  for (const c of [...w.outer, ...w.inner]) assertEq(c.comm, 'bwrap', `process ${c.pid} while waiting`);
});

await R.run('the command cannot read its own pipe, and sees only its own text', async () => {
  const probe = 'ls /proc/self/fd | sort -n | tr "\\n" " "; cat <&5 2>/dev/null && echo READ5; echo "$__drun_s$__drun_h$__drun_n$__drun_l" | wc -c';
  const r = await A.bash(sA, probe);
  assertEq(r.warm, true, 'warm');
  assertEq(r.stdout_tail, '0 1 2 3 1\n', 'fds, fd 5 closed, helper variables unset (short script)');
  const rl = await A.bash(sA, `: ${'x'.repeat(3000)}\n${probe}`);
  assertEq([rl.warm, rl.stdout_tail], [true, '0 1 2 3 1\n'], 'the same for a long script (cat)');
});

await R.run('a config change between create_session and the first call goes cold', async () => {
  const sid = (await A.toolSync('create_session', {})).session_id;
  writeConfig(A.cfg, `${BASE}sandbox_max_processes = 66\n`);
  const r = await A.bash(sid, 'ulimit -p 2>/dev/null || ulimit -u');
  assertEq([r.warm, r.stdout_tail], [false, '66\n'], 'first call: cold, the new policy');
  const r2 = await A.bash(sid, 'ulimit -p 2>/dev/null || ulimit -u');
  assertEq([r2.warm, r2.stdout_tail], [true, '66\n'], 'second call: warm, the new policy');
  writeConfig(A.cfg, BASE);
  await A.tool('session_close', { session_id: sid });
  await A.bash(sA, 'true'); // sA's sandbox was prepared under an older policy object
  assertEq((await A.bash(sA, 'true')).warm, true, 'warm again under the restored config');
});

await R.run('session_switch (attach) prepares the sandbox: the first call is warm', async () => {
  const E = await start('e1');
  const sid = (await E.tool('create_session', {})).session_id;
  await E.bash(sid, 'echo kept > kept.txt');
  E.srv.endInput();
  await E.srv.exit();
  const F = await start('e2', {}, join(E.dir, 'w.db'));
  assertEq(waiting(F.pid).outer.length, 0, 'nothing prepared before the attach');
  await F.toolSync('session_switch', { session_id: sid });
  assertEq(waiting(F.pid).outer.length, 1, 'one waiting sandbox after session_switch');
  const r = await F.bash(sid, 'cat kept.txt');
  assertEq([r.warm, r.stdout_tail], [true, 'kept\n'], 'first call after the attach');
  F.srv.endInput();
  await F.srv.exit();
  // Attached implicitly by another tool's session_id: prepared after that call answers.
  const G = await start('e3', {}, join(E.dir, 'w.db'));
  const st = await G.toolSync('get_session_state', { session_id: sid, description: 'attach' });
  assertEq(st.session_id, sid, 'get_session_state attached the session');
  assertEq(waiting(G.pid).outer.length, 1, 'one waiting sandbox after an implicit attach');
  const r2 = await G.bash(sid, 'cat kept.txt');
  assertEq([r2.warm, r2.stdout_tail], [true, 'kept\n'], 'first call after the implicit attach');
  G.srv.endInput();
  await G.srv.exit();
});

await R.run('session_fork prepares the new session\'s sandbox: the first call is warm', async () => {
  const H = await start('fork');
  const sid = (await H.tool('create_session', {})).session_id;
  await H.bash(sid, 'echo forked > f.txt');
  const before = waiting(H.pid).outer.length;
  const f = await H.toolSync('session_fork', { session_id: sid });
  assert(f.session_id && f.session_id !== sid, `fork answered ${JSON.stringify(f).slice(0, 200)}`);
  assertEq(waiting(H.pid).outer.length, before + 1, 'waiting sandboxes after session_fork');
  const r = await H.bash(f.session_id, 'cat f.txt');
  assertEq([r.warm, r.exit_code, r.stdout_tail], [true, 0, 'forked\n'], 'first call after the fork');
  const r0 = await H.bash(sid, 'cat f.txt');
  assertEq([r0.warm, r0.stdout_tail], [true, 'forked\n'], 'the source session stays warm too');
  H.srv.endInput();
  await H.srv.exit();
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
  try {
    await waitFor(() => waiting(A.pid).outer.length <= 1, 'the closed sessions\' sandboxes to go');
  } catch {}
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
