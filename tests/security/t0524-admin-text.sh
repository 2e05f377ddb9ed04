#!/bin/sh
# t0524-admin-text.sh - strings an agent chose (session label, checkpoint label,
# command, snapshot description, audit summary and arguments) never reach the operator's
# terminal as control sequences: drun-admin's text output of sessions list/show,
# snapshot list/show and audit tail/show holds no ESC, BEL, C1 control (U+0080..U+009F)
# or invalid UTF-8, and shows them as visible escapes instead; --json output keeps every
# string exact. The strings go in through the real drun-mcp (ESC ] 52 clipboard write,
# ESC [ 2J, CSI as U+009B), and one label is written as invalid UTF-8 with sqlite3.
. "$(dirname "$0")/../lib.sh"

mcp="$BUILD/drun-mcp"
admin="$BUILD/drun-admin"
lib="$T_TOP/tests/client/lib.mjs"
if [ ! -x "$mcp" ] || [ ! -x "$admin" ]; then
    t_begin "drun-admin text escaping"
    t_skip "'$mcp' or '$admin' is not built; run 'make'"
    t_done
fi
for c in node sqlite3; do
    if ! command -v $c >/dev/null 2>&1; then
        t_begin "drun-admin text escaping"
        t_skip "$c is not installed"
        t_done
    fi
done

cat >"$T_TMP/agent.mjs" <<'EOF'
const { RawServer } = await import(process.env.T_LIB);
const dir = process.env.T_DIR;
const evil = '\x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J \u009b31m \x7f end';
const srv = new RawServer(process.env.T_MCP, ['--db', `${dir}/s.db`], { TMPDIR: dir, XDG_RUNTIME_DIR: dir, HOME: dir });
await srv.initialize();
let id = 0;
const call = (name, args) => srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
const s = JSON.parse((await call('create_session', {})).result.content[0].text).session_id;
await call('session_label', { label: evil });
const w = await call('session_write_files', { entries: [{ path: 'a.txt', content: 'x' }], description: evil });
if (w.result.isError) throw new Error(w.result.content[0].text);
const l = await call('session_checkpoint_label', { checkpoint_id: 1, label: evil, description: evil });
if (l.result.isError) throw new Error(l.result.content[0].text);
await call('session_snapshot', { name: 'evil', description: evil });
console.log(s);
srv.endInput();
await srv.exit();
EOF
sid=$(T_LIB="$lib" T_MCP="$mcp" T_DIR="$T_TMP" node "$T_TMP/agent.mjs" 2>"$T_TMP/agent.err")
if [ -z "$sid" ]; then
    t_begin "setup"
    t_fail "the agent script failed: $(tail -3 "$T_TMP/agent.err")"
    t_done
fi
# A second session whose label is invalid UTF-8 with an ESC in it, as a damaged or
# foreign database could hold.
sqlite3 "$T_TMP/s.db" "UPDATE snapshots SET label = CAST(x'ff1b5b324ac29b' AS TEXT)"
audit_id=$(sqlite3 "$T_TMP/s.db" "SELECT max(id) FROM audit WHERE tool = 'session_label'")

# clean FILE: no ESC, BEL, DEL, other C0 but \n, C1 as UTF-8, or invalid UTF-8.
clean() {
    node -e '
const b = require("fs").readFileSync(process.argv[1]);
for (let i = 0; i < b.length; i++) {
  const c = b[i];
  if ((c < 0x20 && c !== 0x0a) || c === 0x7f) { console.log(`byte 0x${c.toString(16)} at ${i}`); process.exit(1); }
  if (c === 0xc2 && b[i + 1] >= 0x80 && b[i + 1] <= 0x9f) { console.log(`C1 at ${i}`); process.exit(1); }
}
try { new TextDecoder("utf-8", { fatal: true }).decode(b); } catch { console.log("invalid UTF-8"); process.exit(1); }
' "$1"
}

n=0
for cmd in "sessions list --all" "sessions show $sid" "snapshot list" "snapshot show evil" \
    "audit tail -n 50" "audit show $audit_id"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    "$admin" --db "$T_TMP/s.db" $cmd >"$T_TMP/out$n" 2>&1
    t_begin "drun-admin $cmd: no control sequence reaches the terminal"
    if why=$(clean "$T_TMP/out$n"); then
        # Audit summaries are already cut and cleaned when stored: clean is enough there.
        if case $cmd in audit*) true ;; *) false ;; esac ||
            grep -qF '\x1b]52' "$T_TMP/out$n" || grep -qF '\xff\x1b[2J' "$T_TMP/out$n"; then
            t_ok
        else
            t_fail "the escaped text is not shown: $(head -c 300 "$T_TMP/out$n")"
        fi
    else
        t_fail "$why"
    fi
done

t_begin "--json keeps agent strings exact"
"$admin" --db "$T_TMP/s.db" --json sessions show "$sid" >"$T_TMP/json" 2>&1
if node -e '
const o = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const evil = "\x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J \u009b31m \x7f end";
process.exit(o.label === evil && o.checkpoints.some((c) => c.label === evil) ? 0 : 1);
' "$T_TMP/json"; then t_ok; else t_fail "$(head -c 300 "$T_TMP/json")"; fi
t_done
