#!/bin/sh
# t0541-shutdown.sh - nothing outlives drun-mcp: on every way out (input EOF, SIGTERM,
# SIGINT, SIGHUP) with a prepared sandbox in flight (the one made in the background right
# after a command answers), no sandbox process, no pids cgroup of the daemon
# (drun-sandbox-<pid>-*) and no runtime directory (pid-<pid>) is left once it has exited.
# After kill -9 the prepared sandbox dies with the daemon (no pid 1 left waiting for its
# uid map), and the next daemon sweeps the cgroups and the directory, while a live
# daemon's are never touched. Each way out runs ITER times (default 50). Only what the
# daemons started here own is counted: other drun processes may run on this host.
#
# Runs as the current user and, when that is root, again as nobody.
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "shutdown leaves nothing"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
if ! command -v node >/dev/null 2>&1; then
    t_begin "shutdown leaves nothing"
    t_skip "node is not installed"
    t_done
fi
if ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    t_begin "shutdown leaves nothing"
    t_skip "bwrap cannot create a sandbox here; run 'drun-mcp doctor'"
    t_done
fi

cat >"$T_TMP/shutdown.mjs" <<'EOF'
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
const iter = Number(process.env.T_ITER || 50);
const cgBase = '/sys/fs/cgroup/pids';
let failed = 0;
const line = (ok, name, why) => {
  if (!ok) failed++;
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${why}`);
};

// Processes whose command line holds `marker` and none of `except` (bwrap's argv names
// the workspace path, and the sandbox's pid 1 is a clone of bwrap).
function procsWith(marker, except = []) {
  const out = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const c = readFileSync(`/proc/${p}/cmdline`, 'latin1');
      if (c.includes(marker) && !except.some((e) => c.includes(e))) out.push(p);
    } catch {}
  }
  return out;
}
// What is in a runtime root besides the entries named in `except`.
function entries(xdg, except = []) {
  try {
    return readdirSync(`${xdg}/drun`).filter((n) => !except.includes(n));
  } catch {
    return [];
  }
}
function cgroupsOf(pid) {
  try {
    return readdirSync(cgBase).filter((n) => n.startsWith(`drun-sandbox-${pid}-`));
  } catch {
    return [];
  }
}
// Polls cond() for at most 60 s (a condition with a generous bound, not a timing).
async function until(cond) {
  const end = Date.now() + 60000;
  for (;;) {
    if (cond()) return true;
    if (Date.now() > end) return false;
    await new Promise((res) => setTimeout(res, 10));
  }
}

let rid = 0;
async function tool(srv, name, args) {
  const r = await srv.request({ jsonrpc: '2.0', id: ++rid, method: 'tools/call', params: { name, arguments: args } });
  if (!r.result) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
  return JSON.parse(r.result.content[0].text);
}
// Each way out has its own runtime root and DB (every iteration opens a session).
writeFileSync(`${dir}/config.toml`, 'max_sessions = 100000\n');
function start(xdg) {
  return new RawServer(process.env.T_MCP, ['--db', `${xdg}.db`, '--config', `${dir}/config.toml`],
    { TMPDIR: dir, XDG_RUNTIME_DIR: xdg, DRUN_SANDBOX_WARM: 'auto' });
}
// A daemon with one command answered: the next command's sandbox is being prepared now.
async function busyDaemon(xdg) {
  const srv = start(xdg);
  await srv.initialize();
  const sid = (await tool(srv, 'create_session', {})).session_id;
  const r = await tool(srv, 'session_bash', { command: 'echo hi', description: 'x', session_id: sid });
  if (r.exit_code !== 0) throw new Error(`the command failed: ${JSON.stringify(r).slice(0, 300)}`);
  srv.sid = sid;
  return srv;
}

const ways = [
  ['input EOF', (srv) => srv.endInput()],
  ['SIGTERM', (srv) => srv.proc.kill('SIGTERM')],
  ['SIGINT', (srv) => srv.proc.kill('SIGINT')],
  ['SIGHUP', (srv) => srv.proc.kill('SIGHUP')],
];
for (const [name, how] of ways) {
  const xdg = `${dir}/xdg-${name.replace(/\W/g, '')}`;
  mkdirSync(xdg, { mode: 0o711 });
  let survivors = 0, cgroups = 0, dirs = 0, bad = '';
  const seen = [];
  for (let i = 0; i < iter && !bad; i++) {
    const srv = await busyDaemon(xdg);
    const pid = srv.proc.pid;
    how(srv);
    const code = await srv.exit();
    if (code === 'hang') bad = `daemon ${pid} did not exit`;
    // Once the daemon has exited and been reaped, everything must already be gone: no
    // process of a sandbox under this runtime root, no cgroup, nothing in the root.
    for (const p of procsWith(`${xdg}/drun/`)) {
      survivors++;
      try { seen.push(readFileSync(`/proc/${p}/stat`, 'latin1').slice(0, 60)); } catch {}
    }
    cgroups += cgroupsOf(pid).length;
    dirs += entries(xdg).length;
  }
  line(!bad && survivors + cgroups + dirs === 0, `${name} x${iter}: nothing left`,
    bad || `${survivors} processes (${seen.slice(0, 3).join('; ')}), ${cgroups} cgroups, ${dirs} runtime directories left`);
}

{
  const xdg = `${dir}/xdg-kill9`;
  mkdirSync(xdg, { mode: 0o711 });
  let stuck = 0, cgroups = 0, dirs = 0, bad = '';
  let prev = null;
  for (let i = 0; i <= iter && !bad; i++) {
    const srv = await busyDaemon(xdg);
    if (prev !== null) {
      // This daemon has swept what the killed one left before it served anything: only
      // its own runtime entry (and its own workspace) is there.
      cgroups += cgroupsOf(prev).length;
      dirs += entries(xdg, [`pid-${srv.proc.pid}`, `ws-${srv.sid}`]).length;
    }
    if (i === iter) {
      srv.endInput();
      await srv.exit();
      break;
    }
    const pid = srv.proc.pid;
    srv.proc.kill('SIGKILL');
    await srv.exit();
    // The prepared sandbox dies with the daemon: wait for that (bounded), never forever.
    if (!(await until(() => procsWith(`${xdg}/drun/`).length === 0))) {
      stuck += procsWith(`${xdg}/drun/`).length;
      for (const p of procsWith(`${xdg}/drun/`)) try { process.kill(Number(p), 'SIGKILL'); } catch {}
    }
    prev = pid;
  }
  line(!bad && stuck + cgroups + dirs === 0, `kill -9 x${iter}: sandboxes die with it, the next daemon sweeps`,
    bad || `${stuck} processes never died, ${cgroups} cgroups and ${dirs} runtime directories not swept`);
}

{
  // A live daemon's cgroups and directory are never swept by another one: A holds a
  // command in a sandbox (its cgroup certainly exists) while B starts and sweeps.
  const xdg = `${dir}/xdg-live`;
  mkdirSync(xdg, { mode: 0o711 });
  const a = await busyDaemon(xdg);
  const sid = (await tool(a, 'create_session', {})).session_id;
  const held = ++rid;
  a.send({ jsonrpc: '2.0', id: held, method: 'tools/call', params: { name: 'session_bash', arguments: { command: 'while [ ! -e go ]; do sleep 0.05; done; echo still', description: 'hold', session_id: sid } } });
  const ws = `${xdg}/drun/pid-${a.proc.pid}/ws-${sid}`;
  await until(() => procsWith(ws).length > 0);
  const cgA = cgroupsOf(a.proc.pid);
  const b = await busyDaemon(xdg);
  const kept = existsSync(ws) && cgA.every((n) => existsSync(`${cgBase}/${n}`)) && procsWith(ws).length > 0;
  writeFileSync(`/proc/${a.proc.pid}/root${ws}/go`, ''); // the daemon's mount namespace
  const r = JSON.parse((await a.next('the held call')).msg.result.content[0].text);
  b.endInput();
  a.endInput();
  await b.exit();
  await a.exit();
  line(kept && r.exit_code === 0 && r.stdout_tail === 'still\n', "another daemon's sweep leaves a live daemon alone",
    `kept ${kept}, ${JSON.stringify(r).slice(0, 200)}`);
}
process.exit(failed ? 1 : 0);
EOF

run_pass() {
    label=$1
    d=$2
    shift 2
    out="$T_TMP/$label.log"
    rc=0
    "$@" env T_LIB="$lib" T_MCP="$mcp" T_DIR="$d" T_ITER="${ITER:-50}" node "$T_TMP/shutdown.mjs" >"$out" 2>&1 || rc=$?
    while IFS= read -r line; do
        case $line in
        "ok   "*) t_begin "$label: ${line#ok   }"; t_ok ;;
        "FAIL "*) t_begin "$label: ${line#FAIL }"; t_fail "see above" ;;
        esac
    done <"$out"
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
        t_begin "$label"
        t_fail "$(grep -v '^ok ' "$out" | head -c 800)"
    fi
}

me=$(id -un)
chmod 711 "$T_TMP"
mkdir -p "$T_TMP/$me" && chmod 711 "$T_TMP/$me"
run_pass "$me" "$T_TMP/$me"
if [ "$(id -u)" -eq 0 ]; then
    if ! command -v setpriv >/dev/null 2>&1; then
        t_begin "unprivileged pass"
        t_skip "setpriv (util-linux) is not installed"
        t_done
    fi
    mkdir -p "$T_TMP/nobody" && chown 65534:65534 "$T_TMP/nobody" && chmod 700 "$T_TMP/nobody"
    run_pass nobody "$T_TMP/nobody" env -i PATH=/usr/local/bin:/usr/bin:/bin \
        HOME="$T_TMP/nobody" setpriv --reuid=65534 --regid=65534 --clear-groups
fi
t_done
