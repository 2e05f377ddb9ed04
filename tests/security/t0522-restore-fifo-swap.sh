#!/bin/sh
# t0522-restore-fifo-swap.sh - session_restore of a path that is swapped between a
# regular .drun file and a FIFO, as fast as rename(2) allows, never blocks the daemon:
# the file is opened once (O_NOFOLLOW | O_NONBLOCK), fstat must say regular file, and
# only that descriptor is read. 200 restores of the swapping path must each answer
# (restored, or refused as not a regular file), and the daemon must answer a ping.
# A hang is the failure this test looks for, so each answer is awaited with a generous
# bound (60 s); on the old code the daemon blocked in open() within a few calls.
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "restore of a swapping path"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
for c in node zstd python3; do
    if ! command -v $c >/dev/null 2>&1; then
        t_begin "restore of a swapping path"
        t_skip "$c is not installed"
        t_done
    fi
done

snaps="$T_TMP/snaps"
mkdir -p "$snaps"
{
    printf 'DRUN'
    printf '{"checkpoint_idx":0,"blobs":[[104,105]],"checkpoints":[{"id":0,"stdout":"","stderr":"","files":{"a.txt":0}}],"chat_log":[]}' |
        zstd -q -c
} >"$T_TMP/master.drun"

cat >"$T_TMP/swap.py" <<'EOF'
# Swaps snaps/swap.drun between a hard link of master.drun and a FIFO until killed,
# with syscalls only, so each state lasts about as long as the other.
import os, sys
d = sys.argv[1]
t, r, f = d + "/snaps/swap.drun", d + "/snaps/.r", d + "/snaps/.f"
while True:
    os.link(d + "/master.drun", r)
    os.rename(r, t)
    os.mkfifo(f)
    os.rename(f, t)
EOF

cat >"$T_TMP/race.mjs" <<'EOF'
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
writeFileSync(`${dir}/config.toml`, `snapshots_dir = "${dir}/snaps"\nmax_sessions = 1000\n`);
const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/s.db`, '--config', `${dir}/config.toml`],
  { TMPDIR: dir, XDG_RUNTIME_DIR: dir });
let failed = 0;
const line = (ok, name, why) => {
  if (!ok) failed++;
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${why}`);
};
await srv.initialize();
const swapper = spawn('python3', [`${dir}/swap.py`, dir], { stdio: 'ignore' });
while (!existsSync(`${dir}/snaps/swap.drun`)) await new Promise((r) => setTimeout(r, 10));
let restored = 0, refused = 0, hung = null, odd = null;
for (let i = 0; i < 200 && !hung && !odd; i++) {
  let timer;
  const guard = new Promise((res) => { timer = setTimeout(() => res('hang'), 60000); });
  srv.send({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'session_restore', arguments: { path: `${dir}/snaps/swap.drun` } } });
  // srv.next gives up on its own bound (lib.mjs) by throwing: that is a hang too.
  const r = await Promise.race([srv.next(`restore ${i}`).catch(() => 'hang'), guard]);
  clearTimeout(timer);
  if (r === 'hang') { hung = `restore ${i} got no answer in 60 s`; break; }
  const res = r.msg && r.msg.result;
  if (!res) { odd = JSON.stringify(r.msg).slice(0, 300); break; }
  const body = JSON.parse(res.content[0].text);
  if (!res.isError) {
    restored++;
    await srv.request({ jsonrpc: '2.0', id: `c${i}`, method: 'tools/call', params: { name: 'session_close', arguments: { session_id: body.session_id } } });
  } else if (/not a regular file|changed while being opened|does not exist|No such file|not found/i.test(body.message)) {
    refused++;
  } else {
    odd = JSON.stringify(body).slice(0, 300);
  }
}
swapper.kill('SIGKILL');
console.log(`# ${restored} restored, ${refused} refused as not a regular file`);
line(!hung, 'every restore of a path swapped between a file and a FIFO answers', hung);
line(!odd, 'each answer is a restore or a clear refusal', odd);
if (hung) {
  srv.proc.kill('SIGKILL');
} else {
  await srv.alive();
  line(true, 'the daemon answers a ping afterwards');
  srv.endInput();
  await srv.exit();
}
console.log(`done ${failed}`);
EOF

out="$T_TMP/race.log"
T_LIB="$lib" T_MCP="$mcp" T_DIR="$T_TMP" node "$T_TMP/race.mjs" >"$out" 2>&1
rc=$?
while IFS= read -r line; do
    case $line in
    "ok   "*) t_begin "${line#ok   }"; t_ok ;;
    "FAIL "*) t_begin "${line#FAIL }"; t_fail "see above" ;;
    esac
done <"$out"
grep '^# ' "$out"
if ! grep -q '^done ' "$out"; then
    t_begin "the race script ran to its end"
    t_fail "exit $rc: $(tail -5 "$out")"
fi
t_done
