#!/bin/sh
# t0521-import-bombs.sh - importing a hostile snapshot file costs the daemon a fixed
# memory budget, whatever the file expands to. Each file is restored through the real
# drun-mcp (session_restore, from snapshots_dir) in a fresh daemon; the daemon's peak
# RSS (VmHWM in /proc/PID/status) must stay under a generous fixed bound, the answer
# must be a clear error, and nothing may be stored:
#
#   - a zstd bomb: a few KiB of .drun expanding to 600 MiB of JSON whitespace
#   - a huge repeated array: 5 million byte values in one blob (10 MiB of JSON)
#   - deep nesting: 4 MiB of '['
#   - a gzip stream where the zstd frame belongs
#   - an export file whose one blob row claims 1 GiB of zeros behind a 32 KiB zstd frame
#   - the value cap at its edge (1,000,000 values: imported) and one past it (refused)
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "import bombs"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
for c in node zstd gzip sqlite3; do
    if ! command -v $c >/dev/null 2>&1; then
        t_begin "import bombs"
        t_skip "$c is not installed"
        t_done
    fi
done

snaps="$T_TMP/snaps"
mkdir -p "$snaps"
# The bombs, made with streams so the test itself stays small.
{
    printf 'DRUN'
    { printf '{"checkpoint_idx":0,"blobs":[],"x":'; head -c 629145600 /dev/zero | tr '\0' ' '; printf '1}'; } |
        zstd -q -1 -c
} >"$snaps/space.drun"
{
    printf 'DRUN'
    { printf '{"checkpoint_idx":0,"blobs":[['; yes '0,' | head -n 5000000 | tr -d '\n'; printf '0]]}'; } |
        zstd -q -1 -c
} >"$snaps/array.drun"
{
    printf 'DRUN'
    head -c 4194304 /dev/zero | tr '\0' '[' | zstd -q -1 -c
} >"$snaps/deep.drun"
{
    printf 'DRUN'
    printf '{"checkpoint_idx":0}' | gzip -c
} >"$snaps/gzip.drun"
# edge: k byte values give k + 13 JSON values (see snapfile_drun.c's json_budget)
edge() {
    printf 'DRUN'
    {
        printf '{"checkpoint_idx":0,"blobs":[['
        yes '0,' | head -n $(($1 - 1)) | tr -d '\n'
        printf '0]],"checkpoints":[{"id":0,"stdout":"","stderr":"","files":{"a":0}}],"chat_log":[]}'
    } | zstd -q -1 -c
}
edge $((1000000 - 13)) >"$snaps/edge.drun"
edge $((1000000 - 12)) >"$snaps/past.drun"
head -c 1073741824 /dev/zero | zstd -q -1 -c --stream-size=1073741824 >"$T_TMP/gib.zst"

cat >"$T_TMP/bombs.mjs" <<'EOF'
import { readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
const snaps = `${dir}/snaps`;
const BOUND_MIB = 256; // drun's import budget is well under this; before it, 600+ MiB
writeFileSync(`${dir}/config.toml`, `snapshots_dir = "${snaps}"\n`);
let failed = 0;
const line = (ok, name, why) => {
  if (!ok) failed++;
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${why}`);
};
function hwm(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Infinity;
}
// Restores `file` in a fresh daemon; returns [result, peak MiB, db snapshot count].
async function restore(file, n) {
  const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/b${n}.db`, '--config', `${dir}/config.toml`],
    { TMPDIR: dir, XDG_RUNTIME_DIR: dir });
  await srv.initialize();
  const r = await srv.request({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'session_restore', arguments: { path: file } } });
  const peak = hwm(srv.proc.pid);
  const l = await srv.request({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'list_snapshots', arguments: {} } });
  await srv.alive();
  srv.endInput();
  await srv.exit();
  const res = r.result;
  let body = res ? res.content[0].text : JSON.stringify(r);
  try { body = JSON.parse(body); } catch {}
  const kept = JSON.parse(l.result.content[0].text).filter((s) => s.kind === 'db').length;
  return [{ isError: !!(res && res.isError), body }, peak, kept];
}
let n = 0;
async function bomb(name, file, want) {
  try {
    const [r, peak, kept] = await restore(file, n++);
    console.log(`# ${name}: daemon peak RSS ${peak.toFixed(1)} MiB`);
    if (peak > BOUND_MIB) return line(false, name, `peak RSS ${peak.toFixed(0)} MiB > ${BOUND_MIB} MiB`);
    if (want === 'ok') return line(!r.isError && kept === 1, name, `got ${JSON.stringify(r.body).slice(0, 300)}`);
    if (!r.isError) return line(false, name, `imported: ${JSON.stringify(r.body).slice(0, 200)}`);
    if (kept !== 0) return line(false, name, `${kept} snapshots kept`);
    line(want.test(r.body.message), name, `message: ${JSON.stringify(r.body).slice(0, 300)}`);
  } catch (e) {
    line(false, name, String(e.message || e).slice(0, 300));
  }
}
// An export file whose one extra blob claims 1 GiB of zeros behind a small frame.
{
  const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/src.db`, '--config', `${dir}/config.toml`],
    { TMPDIR: dir, XDG_RUNTIME_DIR: dir });
  await srv.initialize();
  await srv.request({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'create_session', arguments: {} } });
  const r = await srv.request({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'session_snapshot', arguments: { description: 'x', path: `${snaps}/blob.db` } } });
  if (r.result.isError) line(false, 'setup: export', r.result.content[0].text);
  srv.endInput();
  await srv.exit();
  execFileSync('sqlite3', [`${snaps}/blob.db`,
    `INSERT INTO blobs (hash, size, codec, data, base, depth) VALUES (randomblob(32), 1073741824, 1, readfile('${dir}/gib.zst'), NULL, 0)`]);
}
await bomb('a zstd bomb (600 MiB of JSON whitespace) is refused within the budget', `${snaps}/space.drun`, /expands to more than 32 MiB/);
await bomb('5 million byte values in one blob are refused within the budget', `${snaps}/array.drun`, /more than 1000000 JSON values/);
await bomb('4 MiB of nested arrays is refused within the budget', `${snaps}/deep.drun`, /nests deeper than 16 levels/);
await bomb('a gzip stream in place of zstd is refused', `${snaps}/gzip.drun`, /zstd data is damaged/);
await bomb('an export blob claiming 1 GiB behind a small frame is refused within the budget', `${snaps}/blob.db`, /corrupt|hash/);
await bomb('1,000,000 JSON values (the cap) are imported within the budget', `${snaps}/edge.drun`, 'ok');
await bomb('1,000,001 JSON values are refused', `${snaps}/past.drun`, /more than 1000000 JSON values/);
console.log(`done ${failed}`);
EOF

out="$T_TMP/bombs.log"
T_LIB="$lib" T_MCP="$mcp" T_DIR="$T_TMP" node "$T_TMP/bombs.mjs" >"$out" 2>&1
rc=$?
while IFS= read -r line; do
    case $line in
    "ok   "*) t_begin "${line#ok   }"; t_ok ;;
    "FAIL "*) t_begin "${line#FAIL }"; t_fail "see above" ;;
    esac
done <"$out"
grep '^# ' "$out"
if ! grep -q '^done ' "$out"; then
    t_begin "the bomb script ran to its end"
    t_fail "exit $rc: $(tail -5 "$out")"
fi
t_done
