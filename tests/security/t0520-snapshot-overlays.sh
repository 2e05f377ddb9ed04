#!/bin/sh
# t0520-snapshot-overlays.sh - a snapshot never brings in a host path that session_mount
# would refuse now. Through the real drun-mcp over stdio, a temp DB and the real sandbox:
#
#   - the chain: a .drun written in the workspace with overlays {"hostroot": "/"}, the
#     workspace's host path read from /proc/self/mountinfo, session_restore of that path,
#     then a read of a host file through /workspace/hostroot; the overlay is dropped and
#     reported in dropped_overlays
#   - the same overlay in one of our SQLite export files
#   - overlay keys that are not workspace paths ("..", absolute, empty components)
#   - an overlay naming drun's own database directory, /proc, or another session's
#     workspace (all under a name listed in mount_overlay_paths)
#   - a snapshot made by session_snapshot, restored by name after the operator narrowed
#     mount_allowlist: its overlay is re-checked and dropped
#   - a snapshot file that is a symlink to a FIFO: a clear error, the daemon answers
#   - ten thousand overlays: restored with every one dropped, the report bounded
#
# Runs as the current user and, when that is root, again as an unprivileged user; each
# pass once with every command cold and once warm (DRUN_SANDBOX_WARM=always).
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "snapshot overlay attacks"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
for c in node zstd sqlite3; do
    if ! command -v $c >/dev/null 2>&1; then
        t_begin "snapshot overlay attacks"
        t_skip "$c is not installed"
        t_done
    fi
done
if ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    t_begin "snapshot overlay attacks"
    t_skip "bwrap cannot create a sandbox here; run 'drun-mcp doctor'"
    t_done
fi

cat >"$T_TMP/attack.mjs" <<'EOF'
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
mkdirSync(`${dir}/xdg`, { mode: 0o711 }); // a root daemon's sandbox user passes through
// The workspaces of the daemon under test: <runtime root>/pid-<daemon pid>/ws-<session>,
// each a size-capped tmpfs in the daemon's own mount namespace (read it on the host
// through /proc/<daemon pid>/root). Set once the daemon runs.
let runtime = null;
let seen = null; // runtime as the daemon sees it, from the host
// drun's database lives in a directory whose name is an overlay name, so only the rule
// about drun's own files can refuse it.
mkdirSync(`${dir}/node_modules`);
mkdirSync(`${dir}/snaps`);
writeFileSync(`${dir}/canary.txt`, 'host-canary-5d1e\n', { mode: 0o600 });
mkdirSync(`${dir}/proj/node_modules/pkg`, { recursive: true });
writeFileSync(`${dir}/proj/node_modules/pkg/index.js`, 'module-canary-77a0\n');
writeFileSync(`${dir}/proj/main.js`, 'main\n');
mkdirSync(`${dir}/other`);
const config = (extra) => writeFileSync(`${dir}/config.toml`,
  `bash_timeout_ms = 20000\nsnapshots_dir = "${dir}/snaps"\n` +
  'mount_overlay_paths = ["node_modules", "proc"]\n' + extra);
config('');
const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/node_modules/s.db`, '--config', `${dir}/config.toml`],
  { TMPDIR: dir, XDG_RUNTIME_DIR: `${dir}/xdg` });
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
    line(false, name, String(e.message || e).slice(0, 300) + (e.stderr ? ` stderr: ${e.stderr}` : ""));
  }
}
function drunJson(overlays) {
  return JSON.stringify({ checkpoint_idx: 0, blobs: [[104, 105, 10]],
    checkpoints: [{ id: 0, stdout: '', stderr: '', files: { 'a.txt': 0 } }], chat_log: [], overlays });
}
function writeDrun(path, overlays) {
  const z = execFileSync('zstd', ['-q', '-c'], { input: drunJson(overlays) });
  writeFileSync(path, Buffer.concat([Buffer.from('DRUN'), z]));
}
function dropped(r, key) {
  const d = r.body.dropped_overlays;
  return Array.isArray(d) && d.some((o) => o.key === key && typeof o.reason === 'string' && o.reason.length > 0);
}
// Restores `path`, then reads `file` from the new session; returns true when the read
// fails and the overlay `key` is reported dropped (or, with mayRefuse, when the restore
// itself is refused with snapshot_denied).
async function restoreAndRead(path, key, file, mayRefuse = false) {
  const r = await tool('session_restore', { path });
  if (mayRefuse && r.isError && r.body.code === 'snapshot_denied') return true;
  if (r.isError) return `restore failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  const b = await bash(r.body.session_id, `cat ${file} 2>/dev/null; echo end`);
  if (b.stdout_tail !== 'end\n') return `read through the overlay: ${JSON.stringify(b.stdout_tail)}`;
  return dropped(r, key) || `'${key}' not in dropped_overlays: ${JSON.stringify(r.body.dropped_overlays)}`;
}

await srv.initialize();
runtime = `${dir}/xdg/drun/pid-${srv.proc.pid}`;
seen = `/proc/${srv.proc.pid}/root${runtime}`;
const A = (await tool('create_session', {})).body.session_id;

await check('a .drun with overlays {"hostroot": "/"} written in the workspace and restored reads no host file', async () => {
  const json = drunJson({ hostroot: '/' });
  await bash(A, `printf DRUN > evil.drun && printf '%s' '${json}' | zstd -q -c >> evil.drun && echo ok`);
  // The attacker learns the workspace's host path: from /proc/self/mountinfo when the
  // workspace is a bind of a host directory, or from the runtime layout (runtime root,
  // pid-<daemon pid>, ws-<session id>) when it is a tmpfs of its own, whose mountinfo
  // root is "/". Either way it is the path the daemon would open.
  const mi = await bash(A, "awk '$5 == \"/workspace\" { print $4 }' /proc/self/mountinfo");
  let wsHost = mi.stdout_tail.trim();
  if (wsHost === '/') wsHost = `${runtime}/ws-${A}`;
  if (wsHost !== `${runtime}/ws-${A}`) return `mountinfo said ${JSON.stringify(wsHost)}`;
  // Two rules stop it now: the workspace is in drun's runtime directory, which restore
  // never reads from, and the overlay would be dropped.
  return restoreAndRead(`${wsHost}/evil.drun`, 'hostroot', `/workspace/hostroot${dir}/canary.txt`, true);
});

await check('the same .drun copied out of the workspace and restored reads no host file', async () => {
  copyFileSync(`${seen}/ws-${A}/evil.drun`, `${dir}/snaps/evil.drun`);
  return restoreAndRead(`${dir}/snaps/evil.drun`, 'hostroot', `/workspace/hostroot${dir}/canary.txt`);
});

await check('an export file whose snapshot_overlays row names "/" reads no host file', async () => {
  const r = await tool('session_snapshot', { description: 'x', path: `${dir}/snaps/base.db` });
  if (r.isError) return `snapshot: ${JSON.stringify(r.body)}`;
  execFileSync('sqlite3', [`${dir}/snaps/base.db`,
    "INSERT INTO snapshot_overlays (snapshot_id, key, host_path) SELECT id, 'hostroot', '/' FROM snapshots"]);
  return restoreAndRead(`${dir}/snaps/base.db`, 'hostroot', `/workspace/hostroot${dir}/canary.txt`);
});

await check('overlay keys that are not workspace paths are dropped and the session works', async () => {
  const bad = ['../escape', '/abs/node_modules', 'a//node_modules', 'node_modules/..', ''];
  const ov = {};
  for (const k of bad) ov[k] = `${dir}/proj/node_modules`;
  writeDrun(`${dir}/keys.drun`, ov);
  const r = await tool('session_restore', { path: `${dir}/keys.drun` });
  if (r.isError) return `restore failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  for (const k of bad) if (!dropped(r, k)) return `'${k}' not dropped: ${JSON.stringify(r.body.dropped_overlays)}`;
  const b = await bash(r.body.session_id, 'cat a.txt');
  return b.stdout_tail === 'hi\n' || `bash: ${JSON.stringify(b)}`;
});

await check("an overlay on drun's own database directory is dropped", async () => {
  writeDrun(`${dir}/db.drun`, { node_modules: `${dir}/node_modules` });
  return restoreAndRead(`${dir}/db.drun`, 'node_modules', '/workspace/node_modules/s.db');
});

await check('an overlay on /proc is dropped', async () => {
  writeDrun(`${dir}/proc.drun`, { proc: '/proc' });
  return restoreAndRead(`${dir}/proc.drun`, 'proc', '/workspace/proc/self/environ');
});

await check("an overlay into another session's workspace is dropped", async () => {
  const B = (await tool('create_session', {})).body.session_id;
  await bash(B, 'mkdir -p node_modules && echo other-session-3c9f > node_modules/secret.txt');
  writeDrun(`${dir}/ws.drun`, { node_modules: `${runtime}/ws-${B}/node_modules` });
  return restoreAndRead(`${dir}/ws.drun`, 'node_modules', '/workspace/node_modules/secret.txt');
});

await check('a DB snapshot restored after mount_allowlist narrowed drops the overlay it no longer admits', async () => {
  const C = (await tool('create_session', {})).body.session_id;
  const m = await tool('session_mount', { path: `${dir}/proj`, description: 'proj', session_id: C });
  if (m.isError) return `mount: ${JSON.stringify(m.body).slice(0, 300)}`;
  const before = await bash(C, 'cat node_modules/pkg/index.js');
  if (before.stdout_tail !== 'module-canary-77a0\n') return `mount gave no overlay: ${JSON.stringify(before)}`;
  const s = await tool('session_snapshot', { description: 'with overlay', name: 'with-overlay', session_id: C });
  if (s.isError) return `snapshot: ${JSON.stringify(s.body)}`;
  config(`mount_allowlist = ["${dir}/other"]\n`);
  const r = await tool('session_restore', { name: 'with-overlay' });
  config('');
  if (r.isError) return `restore failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  const b = await bash(r.body.session_id, 'cat node_modules/pkg/index.js 2>/dev/null; echo end');
  if (b.stdout_tail !== 'end\n') return `read through the overlay: ${JSON.stringify(b.stdout_tail)}`;
  return dropped(r, 'node_modules') || `not reported: ${JSON.stringify(r.body).slice(0, 300)}`;
});

await check('a snapshot file that is a symlink to a FIFO is refused at once', async () => {
  execFileSync('mkfifo', [`${dir}/snaps/fifo`]);
  symlinkSync(`${dir}/snaps/fifo`, `${dir}/snaps/link.drun`);
  const r = await tool('session_restore', { path: `${dir}/snaps/link.drun` });
  await srv.alive();
  return (r.isError && /regular file/.test(r.body.message)) || `got ${JSON.stringify(r.body).slice(0, 300)}`;
});

await check('ten thousand overlays: every one dropped, the report bounded', async () => {
  const ov = {};
  for (let i = 0; i < 10000; i++) ov[`k${i}`] = '/';
  writeDrun(`${dir}/many.drun`, ov);
  const r = await tool('session_restore', { path: `${dir}/many.drun` });
  if (r.isError) return `restore failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  const d = r.body.dropped_overlays;
  if (!Array.isArray(d) || d.length === 0 || d.length > 100) return `dropped_overlays has ${d && d.length}`;
  if (r.body.dropped_overlays_total !== 10000) return `total ${r.body.dropped_overlays_total}`;
  const b = await bash(r.body.session_id, 'cat a.txt');
  return b.stdout_tail === 'hi\n' || `bash: ${JSON.stringify(b)}`;
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

chmod 711 "$T_TMP" # a root daemon's sandbox user passes through to its workspaces
for warm in ${T_WARM:-off always}; do
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
