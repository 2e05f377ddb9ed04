#!/bin/sh
# t0542-workspace-bound-ratchet.sh - the workspace's size-capped tmpfs cannot be grown
# past max_workspace_mb by files that cost it nothing; through the real drun-mcp over
# stdio, a temp DB and the real sandbox:
#
#   - the attack: the tmpfs "grows to fit" the head (what the head's files occupy there).
#     Empty files take no tmpfs page, but counting each one as a page let a command make
#     20,000 empty files (0 logical bytes, so the commit is under the limit) and the next
#     command then found an 8 MiB workspace grown to 80 MiB (5,000: 20 MiB) and wrote 60 MiB of RAM into
#     it (deleting it again before it ended, so the call even succeeded)
#   - the bound still holds after the empty files: a write past max_workspace_mb + the
#     slack gets ENOSPC, and the empty files themselves are kept
#   - the slack ratchet: 1-byte files take a page each, so calls that each filled the
#     bound's 1 MiB of slack with them (under the logical limit) raised the next bound by
#     that much, call after call; 8 such calls must leave the filesystem at its bound
#   - inodes: tmpfs keeps each in about 1 KiB of kernel memory that size= does not count,
#     and allowed half the machine's RAM pages of them; 300,000 empty files in an 8 MiB
#     workspace pinned 300 MiB of slab (kept between calls). The mount now allows one per
#     KiB of its bound, and the head's entries are counted at that price
#
# Runs as the current user and, when that is root, again as nobody; each pass cold and
# warm (DRUN_SANDBOX_WARM=always).
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ]; then
    t_begin "workspace bound ratchet"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi
if ! command -v node >/dev/null 2>&1; then
    t_begin "workspace bound ratchet"
    t_skip "node is not installed"
    t_done
fi
if ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    t_begin "workspace bound ratchet"
    t_skip "bwrap cannot create a sandbox here; run 'drun-mcp doctor'"
    t_done
fi

cat >"$T_TMP/ratchet.mjs" <<'EOF'
import { mkdirSync, writeFileSync } from 'node:fs';
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
mkdirSync(`${dir}/xdg`, { mode: 0o711 });
writeFileSync(`${dir}/config.toml`, 'max_workspace_mb = 8\nbash_timeout_ms = 120000\n');
const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/s.db`, '--config', `${dir}/config.toml`],
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
async function check(name, fn) {
  try {
    const why = await fn();
    line(why === true, name, why);
  } catch (e) {
    line(false, name, String(e.message || e).slice(0, 300));
  }
}

await srv.initialize();
const S = (await tool('create_session', {})).body.session_id;
const MiB = 1024 * 1024;

await check('5,000 empty files are kept (0 logical bytes)', async () => {
  const r = await tool('session_bash', { command: 'mkdir e && cd e && seq -f f%g 5000 | xargs touch && ls | wc -l',
    description: 'empties', session_id: S });
  return (!r.isError && r.body.stdout_tail === '5000\n') || JSON.stringify(r.body).slice(0, 300);
});

await check('after them, a write into the workspace still stops at max_workspace_mb + slack', async () => {
  // The command measures what it could write, then removes it, so the call itself is
  // under the limit and reports the number.
  const r = await tool('session_bash', { command: 'head -c 62914560 /dev/zero > big 2>/dev/null; stat -c %s big; rm -f big',
    description: 'fill', session_id: S });
  if (r.isError) return `the call failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  const wrote = Number(r.body.stdout_tail.trim());
  return wrote <= 8 * MiB + 2 * MiB || `wrote ${(wrote / MiB).toFixed(1)} MiB into a workspace of max_workspace_mb = 8`;
});

await check('the empty files are still there', async () => {
  const r = await tool('session_bash', { command: 'ls e | wc -l', description: 'count', session_id: S });
  return (!r.isError && r.body.stdout_tail === '5000\n') || JSON.stringify(r.body).slice(0, 300);
});

await check('a command cannot make more inodes than the bound allows (one per KiB)', async () => {
  // Each inode is about 1 KiB of kernel memory that size= does not count: 300,000 empty
  // files in an 8 MiB workspace pinned 300 MiB, and the head kept them between calls.
  const r = await tool('session_bash', { command: 'mkdir many && cd many && { seq -f f%g 100000 | xargs touch 2>/dev/null; ls | wc -l; }; cd .. && rm -rf many',
    description: 'inodes', session_id: S });
  if (r.isError) return `the call failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  const n = Number(r.body.stdout_tail.trim());
  return n <= 10 * 1024 || `made ${n} files in a workspace of max_workspace_mb = 8`;
});

await check('calls that each fill the slack with 1-byte files do not raise the bound call after call', async () => {
  // Each 1-byte file takes a whole page: a head that filled the bound and its slack made
  // the next bound grow by the slack, without end (0 logical bytes over the limit).
  const T = (await tool('create_session', {})).body.session_id;
  for (let round = 0; round < 8; round++) {
    await tool('session_bash', { command: `a=$(df -k --output=avail . | tail -1); k=$(( a / 4 - 16 )); i=0; ` +
      `while [ $i -lt $k ]; do printf x > r${round}-$i; i=$((i+1)); done; echo $k`, description: 'slack', session_id: T });
  }
  const r = await tool('session_bash', { command: 'df -k --output=size . | tail -1', description: 'size', session_id: T });
  if (r.isError) return `the call failed: ${JSON.stringify(r.body).slice(0, 300)}`;
  const kib = Number(r.body.stdout_tail.trim());
  return kib <= 8 * 1024 + 2 * 1024 || `the workspace filesystem grew to ${(kib / 1024).toFixed(1)} MiB with max_workspace_mb = 8`;
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
    "$@" env T_LIB="$lib" T_MCP="$mcp" T_DIR="$d" node "$T_TMP/ratchet.mjs" >"$out" 2>&1
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
