#!/bin/sh
# The docs are true where a machine can tell: every relative link points at a file of the
# repository, no doc names a path outside it or carries a development note, and the
# command lines of README.md, docs/admin.md and docs/configuration.md run (exit 0) against
# a scratch database made by a scripted session through the real drun-mcp. The sample
# output of `audit tail` is compared with what the command prints. (The sqlite3 cookbook
# of schema/README.md is run by t0101-store-cookbook.sh.)
. "$(dirname "$0")/../lib.sh"

cd "$T_TOP" || exit 1
docs="README.md docs/*.md schema/README.md sandbox-profiles/*.md tools/bench/README.md"

# ---- links and paths ------------------------------------------------------------------

t_begin "every relative link in the docs points at a file that exists"
bad=""
for f in $docs; do
    dir=$(dirname "$f")
    # [text](target): targets that are not URLs or same-page anchors
    for target in $(grep -o '\](\([^)]*\))' "$f" | sed 's/^](//; s/)$//; s/#.*//' |
        grep -v -E '^(https?:|mailto:|$)'); do
        [ -e "$dir/$target" ] || bad="$bad
$f: $target"
    done
done
if [ -z "$bad" ]; then t_ok; else t_fail "missing:$bad"; fi

t_begin "no doc names a path outside the repository"
got=$(grep -n -E '\.\./shared|\]\(\.\./\.\.|reference/drun-behaviour|DESIGN\.md|STYLE\.md|/work/' \
    $docs 2>/dev/null)
if [ -z "$got" ]; then t_ok; else t_fail "
$got"; fi

t_begin "no doc carries a development note"
got=$(grep -n -i -E 'to be merged|\bissues? [0-9]+\b|\bh[0-9]{2}[a-z]?\b' $docs 2>/dev/null)
if [ -z "$got" ]; then t_ok; else t_fail "
$got"; fi

t_begin "docs/*.md, schema/ and sandbox-profiles/ paths the docs name exist"
bad=""
for p in $(grep -o -h -E '`(docs|schema|sandbox-profiles|tools|tests/[a-z]+)/[A-Za-z0-9_./-]+\.(md|sh|mjs|c|h|sql)`' \
    $docs | tr -d '`' | grep -v NNNN | sort -u); do
    [ -e "$p" ] || [ -e "src/$p" ] || bad="$bad $p"
done
if [ -z "$bad" ]; then t_ok; else t_fail "missing:$bad"; fi

# ---- defaults ---------------------------------------------------------------------------

# The commented defaults `drun-mcp config` writes into a new config.toml are the code's
# (with the plain numbers of src/policy/policy.c for keys the template leaves out);
# the limits table of docs/security.md and the key table of docs/configuration.md must
# give the same numbers (security.md in units: s, MiB, GiB).
t_begin "the defaults in docs/security.md and docs/configuration.md are the code's"
mkdir "$T_TMP/cfg"
if HOME="$T_TMP/cfg" env -u DRUN_CONFIG "$BUILD/drun-mcp" config add-domain example.com \
    >/dev/null 2>"$T_TMP/cfg.err"; then
    sed -n -E 's/^# ([a-z_]+) = ([0-9]+).*/\1 \2/p' "$T_TMP/cfg/.drun/config.toml" \
        >"$T_TMP/defaults"
    # Keys the template leaves out: the plain-number defaults of the policy's constructor.
    sed -n -E 's/^ *p->([a-z_]+) = ([0-9]+);$/\1 \2/p' src/policy/policy.c >>"$T_TMP/defaults"
    bad=$( {
        # security.md: "(`key`, default N UNIT"
        grep -o -E '\(`[a-z_]+`, default [0-9]+( [A-Za-z]+)?' docs/security.md |
            sed -E 's/^\(`([a-z_]+)`, default ([0-9]+) ?([A-Za-z]*)$/sec \1 \2 \3/'
        # configuration.md: "| `key` | int ... | N"
        grep -E '^\| `[a-z_]+` \| int' docs/configuration.md |
            sed -E 's/^\| `([a-z_]+)` \|[^|]*\| *([0-9]+).*/conf \1 \2/'
    } | awk 'NR == FNR { if (!($1 in d)) d[$1] = $2; next }
        {
            v = $3
            if ($4 == "s" && $2 ~ /_ms$/) v *= 1000
            if ($4 == "GiB" && $2 ~ /_mb$/) v *= 1024
            if ($4 == "GiB" && $2 ~ /_bytes$/) v *= 1073741824
            if ($4 == "MiB" && $2 ~ /_bytes$/) v *= 1048576
            if (!($2 in d)) print $1 ": " $2 " has no default in the code"
            else if (d[$2] != v) print $1 ": " $2 " is " $3 " " $4 " in the doc, " d[$2] " in the code"
        }' "$T_TMP/defaults" -)
    n=$(grep -c -E '\(`[a-z_]+`, default' docs/security.md)
    if [ -z "$bad" ] && [ "$n" -ge 6 ]; then t_ok; else t_fail "($n limits with a key)
$bad"; fi
else
    t_fail "drun-mcp config: $(cat "$T_TMP/cfg.err")"
fi

# ---- a scripted session ---------------------------------------------------------------

if [ ! -x "$BUILD/drun-mcp" ] || [ ! -x "$BUILD/drun-admin" ]; then
    t_fail "build" "$BUILD/drun-mcp or drun-admin is missing; run make"
    t_done
fi

# send: one JSON-RPC line at a time, each request answered before the next goes out (the
# daemon runs calls concurrently, and a command must finish before the next call).
db="$T_TMP/drun.db"
mkfifo "$T_TMP/req"
mkdir "$T_TMP/home"
HOME="$T_TMP/home" env -u DRUN_CONFIG -u DRUN_DB "$BUILD/drun-mcp" --db "$db" \
    <"$T_TMP/req" >"$T_TMP/resp" 2>"$T_TMP/mcp.err" &
mcp=$!
exec 3>"$T_TMP/req"
send() {
    printf '%s\n' "$2" >&3
    [ "$1" = "-" ] && return 0
    n=0
    until grep -q "^{\"jsonrpc\":\"2.0\",\"id\":$1," "$T_TMP/resp"; do
        n=$((n + 1))
        if [ "$n" -gt 1200 ]; then
            echo "no answer to request $1 in 60 s" >&2
            return 1
        fi
        sleep 0.05
    done
}
call() {
    send "$1" "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}"
}
t_begin "a scripted session: a label, a file, a failing command, a refused fetch"
if send 1 '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"docs-test","version":"1"}}}' &&
    send - '{"jsonrpc":"2.0","method":"notifications/initialized"}' &&
    call 2 create_session '{}' &&
    call 3 session_label '{"label":"build-demo"}' &&
    call 4 session_write_files '{"description":"a Makefile","entries":[{"path":"Makefile","content":"test:\n\t@echo FAIL: test_parse >&2; exit 2\n"}]}' &&
    call 5 session_bash '{"command":"make test","description":"run the tests"}' &&
    call 6 session_fetch '{"url":"https://example.com/x","description":"a refused fetch"}'; then
    exec 3>&-
    wait $mcp
    rc=$?
    if [ $rc -eq 0 ]; then t_ok; else t_fail "drun-mcp exited $rc: $(cat "$T_TMP/mcp.err")"; fi
else
    exec 3>&-
    kill $mcp 2>/dev/null
    wait $mcp
    t_fail "$(cat "$T_TMP/mcp.err")"
    t_done
fi
sid=$(DRUN_DB="$db" "$BUILD/drun-admin" --json sessions list |
    grep -o '"session_id":"[0-9a-f]*"' | head -1 | cut -d'"' -f4)
denied=$(sqlite3 "$db" "SELECT id FROM audit WHERE outcome = 'denied'" 2>/dev/null)

# ---- the command lines ----------------------------------------------------------------

# cmds FILE: the drun-admin / drun-mcp config lines of FILE's ``` blocks ("$ " prompts
# and trailing comments dropped), in order.
cmds() {
    awk '/^```/ { on = !on; next } on' "$1" |
        sed -n -E 's/^(\$ )?((drun-admin|drun-mcp config) .*)$/\2/p' |
        sed -E 's/[[:space:]]+# .*$//'
}

# run_block NAME FILE SAMPLE_SID: runs FILE's command lines in a fresh copy of the
# session's database, the doc's sample session id replaced by the real one. A line that
# names a file we cannot have (an original drun .drun file) is listed and skipped.
run_block() {
    name=$1
    file=$2
    sample=$3
    dir="$T_TMP/run-$name"
    mkdir -p "$dir/home"
    cp "$db" "$dir/drun.db"
    bad=""
    ran=0
    cmds "$file" >"$dir/cmds"
    while IFS= read -r line; do
        case $line in
        *~/.drun/snapshots/*) continue ;;
        esac
        line=$(printf '%s' "$line" | sed "s/$sample/$sid/g; s/ DIR\$/ $(printf '%s' "$dir" | sed 's/[\/&]/\\&/g')/; s/ HOST\$/ example.com/")
        line=$(printf '%s' "$line" | sed -E "s/audit show [0-9]+/audit show $denied/")
        # The line is the doc's shell text: the shell parses its quotes.
        # The built-in policy (no config.toml under this HOME); config edits make one.
        out=$(cd "$dir" && unset DRUN_CONFIG && export HOME="$dir/home" DRUN_DB="$dir/drun.db" && eval "\"\$BUILD\"/$line" 2>&1 </dev/null)
        rc=$?
        ran=$((ran + 1))
        [ $rc -eq 0 ] || bad="$bad
  $line -> exit $rc: $out"
    done <"$dir/cmds"
    if [ "$ran" -eq 0 ]; then
        t_fail "no command lines found in $file"
    elif [ -z "$bad" ]; then
        t_ok
    else
        t_fail "$bad"
    fi
}

t_begin "README.md's Operating drun commands run"
run_block readme README.md 3f9a01bc
t_begin "docs/admin.md's commands run, in order"
run_block admin docs/admin.md '3f9a01bc\|3229a0e9\|69b21764'
t_begin "docs/configuration.md's drun-mcp config commands run"
run_block config docs/configuration.md none

# The audit tail sample: the same rows as the real command prints, times and the session
# id aside.
t_begin "docs/admin.md's audit tail sample is what the command prints"
norm() {
    sed -E 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z/TIME/; s/^[0-9]+ +/N /' |
        sed "s/$1/SID/g" | tr -s ' '
}
want=$(awk '/^```/ { on = !on; next } on' docs/admin.md |
    awk '/^\$ drun-admin audit tail/ { on = 1; next } /^\$/ { on = 0 } on' |
    norm '[0-9a-f]\{8\}')
got=$(DRUN_DB="$db" "$BUILD/drun-admin" audit tail --errors --session "$sid" | norm "$sid")
if [ -n "$want" ] && [ "$want" = "$got" ]; then t_ok; else t_fail "the doc shows:
$want
the command prints:
$got"; fi

t_begin "the audit verify sample counts the session's rows"
want=$(grep -o -E '^audit chain ok: [0-9]+ rows' docs/admin.md)
got=$(DRUN_DB="$db" "$BUILD/drun-admin" audit verify)
if [ "$want" = "$got" ]; then t_ok; else t_fail "doc: '$want', command: '$got'"; fi

# The sqlite3 shell lines of docs/admin.md and the SQL blocks outside schema/README.md.
t_begin "the sqlite3 examples of the docs run"
if ! command -v sqlite3 >/dev/null 2>&1; then
    t_skip "the sqlite3 command is not installed"
else
    asan_rt=$(ldd "$BUILD/drun-sqlite.so" 2>/dev/null | awk '/libasan/ { print $3 }')
    bad=""
    awk '/^```/ { on = !on; next } on' docs/admin.md |
        sed -n -E 's/^(sqlite>|   \.\.\.>) ?//p' |
        sed "s#^\.load build/#.load $BUILD/#; s/3229a0e9/$sid/g" >"$T_TMP/admin.sql"
    out=$(LD_PRELOAD="$asan_rt" sqlite3 -readonly -bail "$db" <"$T_TMP/admin.sql" 2>&1) ||
        bad="$bad
docs/admin.md: $out"
    for f in docs/*.md; do
        awk '/^```sql$/ { on = 1; next } /^```$/ { on = 0 } on' "$f" >"$T_TMP/blk.sql"
        [ -s "$T_TMP/blk.sql" ] || continue
        out=$(sqlite3 -readonly -bail "$db" <"$T_TMP/blk.sql" 2>&1) || bad="$bad
$f: $out"
    done
    if [ -z "$bad" ]; then t_ok; else t_fail "$bad"; fi
fi

t_done
