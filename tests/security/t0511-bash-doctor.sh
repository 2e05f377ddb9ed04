#!/bin/sh
# t0511-bash-doctor.sh - `drun-mcp doctor`, and session_bash on a host where the sandbox
# cannot start: doctor says exactly what to fix, session_bash fails with the same fix,
# and the command never runs unsandboxed. The broken host is made by hiding bwrap in a
# private mount namespace (root only; skipped otherwise).
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
if [ ! -x "$mcp" ]; then
    t_begin "doctor"
    t_skip "'$mcp' is not built; run 'make'"
    t_done
fi

t_begin "doctor: a working host passes every check and exits 0"
# HOME points at an empty directory: no config file, so the built-in defaults apply.
# PATH: the system's only (a root daemon's commands run as nobody, who cannot reach a
# toolchain under /root; doctor rightly names those, test_toolchains checks that).
out=$(HOME="$T_TMP" PATH=/usr/local/bin:/usr/bin:/bin "$mcp" doctor --db "$T_TMP/ok.db" 2>&1)
rc=$?
# As root there is one more line: the host user commands run as (never root).
want_ok=8
[ "$(id -u)" -eq 0 ] && want_ok=$((want_ok + 1))
# And one for pdftotext when it is installed (a warning line otherwise).
{ [ -x /usr/local/bin/pdftotext ] || [ -x /usr/bin/pdftotext ] || [ -x /bin/pdftotext ]; } &&
    want_ok=$((want_ok + 1))
if [ "$(id -u)" -eq 0 ] && ! echo "$out" | grep -q '^ok   sandbox user: .* host uid 65534, never root'; then
    t_fail "no sandbox user line: $out"
elif ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
    t_skip "bwrap cannot create a sandbox here"
elif [ $rc -eq 0 ] && [ "$(echo "$out" | grep -c '^ok ')" -eq "$want_ok" ] && ! echo "$out" | grep -q FAIL &&
    echo "$out" | grep -q '^ok   disk bound: each workspace is a size-capped tmpfs'; then
    t_ok
else
    t_fail "exit $rc: $out"
fi

t_begin "doctor: a config that does not parse fails with the key and a fix"
printf 'bash_timeout_ms = "soon"\n' >"$T_TMP/bad.toml"
out=$("$mcp" doctor --db "$T_TMP/ok.db" --config "$T_TMP/bad.toml" 2>&1)
rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL config: .*bash_timeout_ms.*; fix: "; then
    t_ok
else
    t_fail "exit $rc: $out"
fi

t_begin "doctor: no database named fails with how to name one"
out=$(env -u DRUN_DB HOME="$T_TMP" "$mcp" doctor 2>&1)
rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL database: no database named; fix: pass --db"; then
    t_ok
else
    t_fail "exit $rc: $out"
fi

t_begin "doctor: an unopenable database fails"
mkdir -p "$T_TMP/dir.db"
out=$(HOME="$T_TMP" "$mcp" doctor --db "$T_TMP/dir.db" 2>&1)
rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL database: cannot open"; then
    t_ok
else
    t_fail "exit $rc: $out"
fi

t_begin "doctor: a bad option is a usage error (exit 2)"
"$mcp" doctor --bogus >/dev/null 2>&1
rc=$?
if [ $rc -eq 2 ]; then t_ok; else t_fail "exit $rc"; fi

# ---- bwrap hidden: doctor and session_bash give the same fix; nothing runs ----
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    t_begin "bwrap missing"
    t_skip "needs root and unshare -m to hide bwrap in a private mount namespace"
    t_done
fi
bw=$(command -v bwrap || echo /usr/bin/bwrap)
hide="mount --bind /dev/null '$bw'"
for p in /usr/bin/bwrap /usr/local/bin/bwrap /bin/bwrap; do
    [ -e "$p" ] && [ "$p" != "$bw" ] && hide="$hide && mount --bind /dev/null '$p'"
done

t_begin "doctor: bwrap missing fails with the install command"
out=$(HOME="$T_TMP" unshare -m sh -c "$hide && exec '$mcp' doctor --db '$T_TMP/ok.db'" 2>&1)
rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL bwrap: .*; fix: install it: 'sudo apt-get install bubblewrap'"; then
    t_ok
else
    t_fail "exit $rc: $out"
fi

cat >"$T_TMP/nobwrap.mjs" <<'EOF'
const { RawServer } = await import(process.env.T_LIB);
const srv = new RawServer(process.env.T_MCP, ['--db', `${process.env.T_DIR}/nb.db`]);
await srv.initialize();
const call = async (id, name, args) => {
  const r = await srv.request({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
  return r.result;
};
await call(1, 'create_session', {});
const r = await call(2, 'session_bash', { command: `touch '${process.env.T_DIR}/ran-unsandboxed'`, description: 'x' });
console.log(JSON.stringify({ isError: !!r.isError, body: JSON.parse(r.content[0].text) }));
const h = await call(3, 'session_history', { description: 'h' });
console.log(JSON.stringify(JSON.parse(h.content[0].text).length ?? -1));
srv.endInput();
await srv.exit();
EOF
t_begin "session_bash: bwrap missing fails with doctor's fix and runs nothing"
out=$(unshare -m sh -c "$hide && T_LIB='$T_TOP/tests/client/lib.mjs' T_MCP='$mcp' T_DIR='$T_TMP' exec node '$T_TMP/nobwrap.mjs'" 2>&1)
first=$(echo "$out" | head -1)
if echo "$first" | grep -q '"isError":true' && echo "$first" | grep -q '"code":"internal_error"' &&
    echo "$first" | grep -q "sudo apt-get install bubblewrap" && echo "$first" | grep -q '"fix"' &&
    echo "$first" | grep -q "never run unsandboxed" && [ "$(echo "$out" | sed -n 2p)" = 1 ] &&
    [ ! -e "$T_TMP/ran-unsandboxed" ]; then
    t_ok
else
    t_fail "$out"
fi
t_done
