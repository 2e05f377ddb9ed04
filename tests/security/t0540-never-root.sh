#!/bin/sh
# t0540-never-root.sh - a root drun-mcp never runs a command as host root, and kernel
# knobs are read-only whatever the daemon's uid; through the real drun-mcp over stdio, a
# temp DB and the real sandbox:
#
#   - every process of the sandbox has a non-zero host uid: the outside column of its
#     uid_map and its Uid line, read from the host, name no uid 0
#   - every file under /proc/sys that looks writable refuses a write of its own value
#     (the core_pattern attack: a pipe handler there would run a workspace file as root)
#   - files a command creates belong to the sandbox user on the host, the daemon reads
#     them back (session_read_file), a later command can change files the daemon wrote,
#     and checkpoints and rollback still work
#
# Runs as the current user and, when that is root, again as nobody; each pass cold and
# warm (DRUN_SANDBOX_WARM=always).
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "never host root"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
if ! command -v node >/dev/null 2>&1; then
    t_begin "never host root"
    t_skip "node is not installed"
    t_done
fi
if ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    t_begin "never host root"
    t_skip "bwrap cannot create a sandbox here; run 'drun-mcp doctor'"
    t_done
fi

cat >"$T_TMP/never-root.mjs" <<'EOF'
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
// A root daemon's sandbox user must pass through the runtime directory's parents.
mkdirSync(`${dir}/xdg`, { mode: 0o711 });
writeFileSync(`${dir}/config.toml`, 'bash_timeout_ms = 60000\n');
const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/s.db`, '--config', `${dir}/config.toml`],
  { TMPDIR: dir, XDG_RUNTIME_DIR: `${dir}/xdg` });
// This process's workspaces: <runtime root>/pid-<daemon pid>/ws-<session>, seen through the
// daemon's own mount namespace (each workspace is a size-capped tmpfs mounted there).
const wsPath = (sid) => `/proc/${srv.proc.pid}/root${dir}/xdg/drun/pid-${srv.proc.pid}/ws-${sid}`;
const root = process.getuid() === 0;
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
  const r = await tool('session_bash', { command, description: 'never-root', session_id: sid });
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
function pidsWith(marker) {
  const out = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'latin1').includes(marker)) out.push(p);
    } catch {}
  }
  return out;
}
// Polls cond() until it is true, for at most 60 s (a condition, not a timing).
async function until(cond) {
  const end = Date.now() + 60000;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() > end) return null;
    await new Promise((res) => setTimeout(res, 20));
  }
}

await srv.initialize();
const S = (await tool('create_session', {})).body.session_id;

await check('no process of the sandbox has host uid 0 (uid_map outside column, Uid)', async () => {
  const marker = `drun-never-root-${process.pid}-${Date.now()}`;
  const callId = ++id;
  // The command waits until the test drops a file into its workspace from the host.
  srv.send({ jsonrpc: '2.0', id: callId, method: 'tools/call', params: { name: 'session_bash', arguments: { command: `sh -c 'while [ ! -e go ]; do sleep 0.05; done; : ${marker}'`, description: 'hold', session_id: S } } });
  const pids = await until(() => { const p = pidsWith(marker); return p.length ? p : null; });
  if (!pids) return 'the sandboxed process never appeared on the host';
  const bad = [];
  for (const p of pids) {
    // Read from the host: the outside column is a host uid.
    const map = readFileSync(`/proc/${p}/uid_map`, 'utf8').trim().split('\n').map((l) => l.trim().split(/\s+/));
    for (const [inside, outside] of map) if (outside === '0') bad.push(`pid ${p} maps ${inside} to host 0`);
    const uid = readFileSync(`/proc/${p}/status`, 'utf8').match(/^Uid:\s+(.*)$/m)[1].split(/\s+/);
    if (uid.includes('0')) bad.push(`pid ${p} Uid ${uid.join(' ')}`);
  }
  writeFileSync(`${wsPath(S)}/go`, '');
  await srv.next('the held call');
  return bad.length === 0 || bad.join('; ');
});

await check('every writable-looking file under /proc/sys refuses a write', async () => {
  const r = await bash(S, 'n=0; w=0; for f in $(find /proc/sys -type f -perm /222 2>/dev/null); do ' +
    'n=$((n+1)); v=$(cat "$f" 2>/dev/null) || continue; ' +
    '(printf "%s\\n" "$v" > "$f") 2>/dev/null && { w=$((w+1)); echo "WROTE $f"; }; done; echo "tried $n wrote $w"');
  const tail = r.stdout_tail.trim().split('\n');
  const last = tail[tail.length - 1];
  return /^tried [1-9]\d* wrote 0$/.test(last) || `${tail.slice(-6).join(' | ')}`;
});

await check('core_pattern cannot be written (the pipe-handler attack)', async () => {
  const r = await bash(S, 'p=/proc/sys/kernel/core_pattern; (cat $p > $p) 2>/dev/null && echo WROTE || echo refused; ' +
    'for k in /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs; do [ -e $k ] && (: > $k/x || : > $k) 2>/dev/null && echo "WROTE $k"; done; echo end');
  return r.stdout_tail === 'refused\nend\n' || JSON.stringify(r.stdout_tail);
});

await check('files the command makes belong to the sandbox user and are read back', async () => {
  const r = await bash(S, 'echo hello > made.txt; mkdir -p d/e; echo deep > d/e/f.txt; ln -s made.txt link; echo ok');
  if (r.exit_code !== 0) return `exit ${r.exit_code}`;
  const st = statSync(`${wsPath(S)}/made.txt`);
  const dst = statSync(`${wsPath(S)}/d/e`);
  if (root && (st.uid === 0 || dst.uid === 0)) return `owned by uid ${st.uid}/${dst.uid} on the host`;
  if (!root && st.uid !== process.getuid()) return `owned by uid ${st.uid}`;
  const a = await tool('session_read_file', { path: 'made.txt', description: 'read' });
  const b = await tool('session_read_file', { path: 'd/e/f.txt', description: 'read', session_id: S });
  return (!a.isError && JSON.stringify(a.body).includes('hello') && !b.isError && JSON.stringify(b.body).includes('deep')) ||
    `read back: ${JSON.stringify(a.body).slice(0, 200)} ${JSON.stringify(b.body).slice(0, 200)}`;
});

await check('files the daemon writes can be changed by the next command; rollback works', async () => {
  const w = await tool('session_write_files', { entries: [{ path: 'w/by-daemon.txt', content: 'one\n' }], description: 'w', session_id: S });
  if (w.isError) return `write_files: ${JSON.stringify(w.body).slice(0, 200)}`;
  const cp = w.body.checkpoint_id ?? w.body.head;
  const r = await bash(S, 'echo two >> w/by-daemon.txt && touch w/new && rm made.txt && echo changed');
  if (r.exit_code !== 0 || !r.stdout_tail.includes('changed')) return `append failed: ${JSON.stringify(r).slice(0, 300)}`;
  const back = await tool('session_rollback', { checkpoint_id: cp, description: 'back', session_id: S });
  if (back.isError) return `rollback: ${JSON.stringify(back.body).slice(0, 200)}`;
  const r2 = await bash(S, 'cat w/by-daemon.txt; ls w; cat made.txt; echo more >> made.txt && echo appended');
  return r2.stdout_tail === 'one\nby-daemon.txt\nhello\nappended\n' || JSON.stringify(r2.stdout_tail);
});

srv.endInput();
await srv.exit();
process.exit(failed ? 1 : 0);
EOF

# run_pass LABEL DIR CMD...: runs the node script and turns its lines into ours.
run_pass() {
    label=$1
    d=$2
    shift 2
    out="$T_TMP/$label.log"
    "$@" env T_LIB="$lib" T_MCP="$mcp" T_DIR="$d" node "$T_TMP/never-root.mjs" >"$out" 2>&1
    while IFS= read -r line; do
        case $line in
        "ok   "*) t_begin "$label: ${line#ok   }"; t_ok ;;
        "FAIL "*) t_begin "$label: ${line#FAIL }"; t_fail "see above" ;;
        esac
    done <"$out"
    grep -q '^\(ok\|FAIL\) ' "$out" || { t_begin "$label"; t_fail "$(head -c 600 "$out")"; }
}

me=$(id -un)
chmod 711 "$T_TMP"
for warm in off always; do
    mkdir -p "$T_TMP/$me-$warm" && chmod 711 "$T_TMP/$me-$warm"
    run_pass "$me-$warm" "$T_TMP/$me-$warm" env DRUN_SANDBOX_WARM=$warm
done
if [ "$(id -u)" -eq 0 ]; then
    if ! command -v setpriv >/dev/null 2>&1; then
        t_begin "unprivileged pass"
        t_skip "setpriv (util-linux) is not installed"
        t_done
    fi
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
            HOME="$T_TMP/nobody-$warm" DRUN_SANDBOX_WARM=$warm setpriv --reuid=65534 --regid=65534 \
            --clear-groups
    done
fi
t_done
