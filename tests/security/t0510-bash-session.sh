#!/bin/sh
# t0510-bash-session.sh - session-level attacks on session_bash, through the real
# drun-mcp over stdio (JSON-RPC lines), a temp DB and the real sandbox:
#
#   - another session's workspace (files, directory path) is invisible
#   - a canary variable in drun-mcp's environment reaches no process of the sandbox
#     (/proc/1/environ included) and the child's environment is the documented one
#   - no host processes, no capabilities (CapEff 0), no network (loopback included)
#   - nothing a command starts (background loop, setsid double-fork, SIGTERM ignored)
#     is alive on the host when the call answers, and it does not change the next
#     checkpoint
#   - a timed-out command's partial writes (and a writer it left running) never reach
#     the next checkpoint
#   - a fork bomb in one session does not stop another session's commands
#
# Runs as the current user and, when that is root, again as an unprivileged user; each
# pass once with every command cold and once with every command warm (a prepared
# sandbox, DRUN_SANDBOX_WARM=always).
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "session_bash attacks"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
if ! command -v node >/dev/null 2>&1; then
    t_begin "session_bash attacks"
    t_skip "node is not installed"
    t_done
fi
if ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    t_begin "session_bash attacks"
    t_skip "bwrap cannot create a sandbox here; run 'drun-mcp doctor'"
    t_done
fi

cat >"$T_TMP/attack.mjs" <<'EOF'
import { mkdirSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
const canary = 'canary-env-91d2c7';
// Workspaces live under $XDG_RUNTIME_DIR/drun: a known path the attacks then look for.
// 0711: a root daemon's sandbox user passes through it to its workspace.
mkdirSync(`${dir}/xdg`, { mode: 0o711 });
// A generous timeout (a loaded machine is slow, never a failure); the two checks that need
// a command to time out lower it for their calls. The daemon reloads the file on a stat
// change, so each write moves its mtime forward.
let cfgAge = 0;
function writeConfig(timeoutMs) {
  writeFileSync(`${dir}/config.toml`, `bash_timeout_ms = ${timeoutMs}\nsandbox_max_processes = 64\n`);
  cfgAge += 10;
  const t = new Date(Date.now() + cfgAge * 1000);
  utimesSync(`${dir}/config.toml`, t, t);
}
writeConfig(120000);
const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/s.db`, '--config', `${dir}/config.toml`],
  { DRUN_ATTACK_CANARY: canary, TMPDIR: dir, XDG_RUNTIME_DIR: `${dir}/xdg` });
// This daemon's workspaces: <runtime root>/pid-<daemon pid>/ws-<session>.
const runtime = `${dir}/xdg/drun/pid-${srv.proc.pid}`;
let id = 0;
let failed = 0;
const line = (ok, name, why) => {
  if (!ok) failed++;
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${why}`);
};
async function tool(name, args) {
  const r = await srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
  const res = r.result;
  if (!res) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
  let body = res.content[0].text;
  try { body = JSON.parse(body); } catch {}
  return { isError: !!res.isError, body };
}
async function bash(sid, command) {
  const r = await tool('session_bash', { command, description: 'attack', session_id: sid });
  if (r.isError) throw new Error(`session_bash failed: ${JSON.stringify(r.body).slice(0, 300)}`);
  return r.body;
}
async function check(name, fn) {
  try {
    const why = await fn();
    line(why === true, name, why);
  } catch (e) {
    line(false, name, String(e.message || e).slice(0, 300));
  }
}
function hostHas(marker) {
  // Any process on the host whose command line carries the marker.
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'latin1').includes(marker)) return p;
    } catch {}
  }
  return null;
}

await srv.initialize();
const A = (await tool('create_session', {})).body.session_id;
const B = (await tool('create_session', {})).body.session_id;
await bash(A, 'echo topsecret-A1 > secret.txt; mkdir -p sub; echo x > sub/y');
// A root daemon's workspaces are size-capped mounts in its own mount namespace: read
// them as the daemon sees them.
const wsA = `/proc/${srv.proc.pid}/root${runtime}/ws-${A}`;
if (!readdirSync(wsA).includes('secret.txt')) line(false, 'setup', `no workspace at ${wsA}`);

await check("another session's files are invisible", async () => {
  const r = await bash(B, `find /tmp /workspace /home /root /run /var/tmp /dev/shm -name secret.txt 2>/dev/null; ` +
    `for p in '${runtime}' '${runtime}/ws-${A}' '${runtime}/ws-${A}/secret.txt' '${dir}/s.db'; do ` +
    `test -e "$p" && echo "visible $p"; done; ls /workspace; echo end`);
  return r.stdout_tail === 'end\n' || `saw: ${JSON.stringify(r.stdout_tail)}`;
});

await check('a canary variable of drun-mcp is in no sandbox process (/proc/1/environ too)', async () => {
  const r = await bash(B, `{ cat /proc/1/environ; env; for f in /proc/[0-9]*/environ; do cat "$f"; done; } ` +
    `2>/dev/null | tr '\\0' '\\n' | grep -c 'canary-env'; true`);
  return r.stdout_tail === '0\n' || `count: ${JSON.stringify(r.stdout_tail)}`;
});

await check("the child's environment is only the documented variables", async () => {
  const r = await bash(B, 'env | cut -d= -f1 | sort | tr "\\n" " "');
  // Plus the documented roots of shim managers found on $PATH (docs/tools.md), which
  // the daemon passes on when it has them.
  const allowed = new Set(['PATH', 'HOME', 'TMPDIR', 'LANG', 'TERM', 'PYTHONPATH', 'NODE_PATH', 'PWD', 'SHLVL', 'OLDPWD', '_', 'LC_ALL',
    'PYENV_ROOT', 'RBENV_ROOT', 'ASDF_DATA_DIR', 'MISE_DATA_DIR', 'VOLTA_HOME', 'RUSTUP_HOME', 'CARGO_HOME', 'HOMEBREW_PREFIX']);
  const extra = r.stdout_tail.trim().split(/\s+/).filter((n) => n && !allowed.has(n));
  return extra.length === 0 || `unexpected: ${extra.join(' ')}`;
});

await check('no host process is visible', async () => {
  const r = await bash(B, `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'drun[-]mcp'; ls -d /proc/[0-9]* | wc -l`);
  const [hits, n] = r.stdout_tail.trim().split('\n').map(Number);
  return (hits === 0 && n < 10) || `drun-mcp seen ${hits} times, ${n} processes`;
});

await check('no capabilities inside (CapEff 0)', async () => {
  const r = await bash(B, 'grep -E "^Cap(Eff|Prm|Amb):" /proc/self/status | cut -f2 | sort -u');
  return r.stdout_tail === '0000000000000000\n' || `caps: ${JSON.stringify(r.stdout_tail)}`;
});

await check('no network: only lo, and a host loopback listener cannot be reached', async () => {
  const server = createServer((s) => s.end('reached\n'));
  await new Promise((res) => server.listen(0, '127.0.0.1', res));
  const port = server.address().port;
  const r = await bash(B, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo; ` +
    `if [ -x /usr/bin/python3 ]; then /usr/bin/python3 -c "import socket; s=socket.create_connection(('127.0.0.1', ${port}), 2); print(s.recv(10))" 2>/dev/null || echo refused; ` +
    `elif [ -x /bin/bash ]; then /bin/bash -c "cat < /dev/tcp/127.0.0.1/${port}" 2>/dev/null || echo refused; else echo refused; fi`);
  server.close();
  return r.stdout_tail === 'lo \nrefused\n' || `got ${JSON.stringify(r.stdout_tail)}`;
});

await check('nothing a command starts outlives the call', async () => {
  const marker = 'drun-survivor-4b1e';
  const r = await bash(B, `(trap '' TERM; while :; do echo x >> bg.txt; sleep 0.01; done) & ` +
    `setsid sh -c 'trap "" TERM; while :; do echo y >> bg2.txt; sleep 0.01; done; : ${marker}' & ` +
    `sh -c 'sleep 300; : ${marker}' & echo started`);
  if (r.exit_code !== 0) return `exit ${r.exit_code}`;
  const p = hostHas(marker);
  if (p) return `process ${p} is still alive on the host`;
  const n1 = await bash(B, 'wc -l < bg.txt');
  const n2 = await bash(B, 'wc -l < bg.txt');
  if (n1.stdout_tail !== n2.stdout_tail) return 'bg.txt still grows';
  return n2.files_added_count + n2.files_modified_count + n2.files_removed_count === 0 || 'the next checkpoint changed';
});

await check("a timed-out command's partial writes and its writer never reach the next checkpoint", async () => {
  writeConfig(3000);
  const r = await tool('session_bash', { command: 'echo partial > p.txt; rm secret.txt; (while :; do echo z >> w.txt; done) & sleep 60', description: 't', session_id: A });
  writeConfig(120000);
  if (!(r.isError && r.body.code === 'execution_timeout')) return `got ${JSON.stringify(r.body)}`;
  const n = await bash(A, 'ls; cat secret.txt');
  if (n.stdout_tail !== 'secret.txt\nsub\ntopsecret-A1\n') return `workspace: ${JSON.stringify(n.stdout_tail)}`;
  return n.files_added_count + n.files_modified_count + n.files_removed_count === 0 || 'the next checkpoint changed';
});

await check("a fork bomb in one session does not stop another session's commands", async () => {
  writeConfig(3000);
  const r = await tool('session_bash', { command: 'f() { f | f & }; f; sleep 60', description: 'bomb', session_id: A });
  writeConfig(120000);
  if (!r.isError && r.body.limit_hit !== 'processes') return `bomb: ${JSON.stringify(r.body).slice(0, 200)}`;
  const b = await bash(B, 'echo still-running');
  return b.stdout_tail === 'still-running\n' || `B: ${JSON.stringify(b)}`;
});

await srv.alive();
srv.endInput();
await srv.exit();
console.log(`done ${failed}`);
EOF

# run_pass LABEL DIR [PREFIX...]: runs the attack script, turning its lines into ours.
run_pass() {
    label=$1
    dir=$2
    shift 2
    out="$T_TMP/$label.log"
    "$@" env DRUN_SANDBOX_WARM="$warm" T_LIB="$lib" T_MCP="$mcp" T_DIR="$dir" \
        node "$T_TMP/attack.mjs" >"$out" 2>&1
    rc=$?
    while IFS= read -r line; do
        case $line in
        "ok   "*) t_begin "$label: ${line#ok   }"; t_ok ;;
        "FAIL "*) t_begin "$label: ${line#FAIL }"; t_fail "see above" ;;
        esac
    done <"$out"
    if ! grep -q '^done ' "$out"; then
        t_begin "$label: the attack script ran to its end"
        t_fail "exit $rc: $(tail -5 "$out")"
    fi
}

# Every pass runs twice: every command cold, then every command in a prepared (warm)
# sandbox (DRUN_SANDBOX_WARM, see docs/security.md).
for warm in off always; do
    chmod 711 "$T_TMP" # a root daemon's sandbox user passes through to its workspaces
    mkdir -p "$T_TMP/me-$warm" && chmod 711 "$T_TMP/me-$warm"
    run_pass "$(id -un)-$warm" "$T_TMP/me-$warm"
done

if [ "$(id -u)" -eq 0 ]; then
    if ! command -v setpriv >/dev/null 2>&1; then
        t_begin "unprivileged pass"
        t_skip "setpriv (util-linux) is not installed"
        t_done
    fi
    chmod 755 "$T_TMP" && chmod 644 "$T_TMP/attack.mjs"
    for warm in off always; do
        mkdir -p "$T_TMP/nobody-$warm" && chown 65534:65534 "$T_TMP/nobody-$warm" &&
            chmod 700 "$T_TMP/nobody-$warm"
    done
    if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$lib" -a -x "$mcp"; then
        t_begin "unprivileged pass"
        t_skip "user nobody cannot read '$lib' or run '$mcp' (check the directory permissions)"
        t_done
    fi
    for warm in off always; do
        run_pass "nobody-$warm" "$T_TMP/nobody-$warm" env -i PATH=/usr/local/bin:/usr/bin:/bin \
            HOME="$T_TMP/nobody-$warm" setpriv --reuid=65534 --regid=65534 --clear-groups
    done
fi
t_done
