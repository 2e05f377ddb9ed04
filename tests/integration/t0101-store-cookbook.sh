#!/bin/sh
# The sqlite3 queries in schema/README.md, each run against a fixture database built
# through the store API (tests/unit/test_store_fixture.c), with its expected output.
. "$(dirname "$0")/../lib.sh"

db="$T_TMP/fixture.db"
if ! command -v sqlite3 >/dev/null 2>&1; then
    t_skip "cookbook" "the sqlite3 command is not installed"
    t_done
fi
if ! DRUN_FIXTURE_OUT="$db" "$BUILD/tests/test_store_fixture" >"$T_TMP/fx.log" 2>&1; then
    t_fail "fixture" "cannot build the fixture: $(cat "$T_TMP/fx.log")"
    t_done
fi

# An ASan build's extension (make check) cannot load into the uninstrumented sqlite3
# unless the ASan runtime is preloaded into it.
asan_rt=$(ldd "$BUILD/drun-sqlite.so" 2>/dev/null | awk '/libasan/ { print $3 }')

# query N: the SQL of the N-th ```sql block of schema/README.md
query() {
    awk -v n="$1" '/^```sql$/ { k++; on = (k == n); next } /^```$/ { on = 0 } on' \
        "$T_TOP/schema/README.md"
}

check_query() {
    n=$1
    want=$2
    sql=$(query "$n")
    if [ -z "$sql" ]; then
        t_fail "no query $n in schema/README.md"
        return
    fi
    # The extension is loaded for every query; only query 14 needs it.
    got=$(LD_PRELOAD="$asan_rt" sqlite3 -readonly -cmd ".load $BUILD/drun-sqlite" "$db" "$sql" 2>&1)
    if [ "$got" = "$want" ]; then t_ok; else t_fail "query $n gave:
$got
expected:
$want"; fi
}

t_begin "cookbook 1: which calls changed a file"
check_query 1 "build-demo|1|session_write_files||A
build-demo|2|session_bash|make|M"

t_begin "cookbook 2: failed commands"
check_query 2 "build-demo|3|make test|2"

t_begin "cookbook 3: audit rows that were not ok"
check_query 3 "4|call|session_bash|error|command_failed
5|event|session_fetch|denied|domain_not_allowed"

t_begin "cookbook 4: sessions at a glance"
check_query 4 "build-demo|open|3|4|0
scratch|closed|1|2|0"

t_begin "cookbook 5: a command's stderr"
check_query 5 "make test|FAIL: test_parse (expected 3, got 4)"

t_begin "cookbook 6: calls per tool"
check_query 6 "session_bash|2|1
session_close|1|1
session_create|1|1
session_fetch|1|0
session_write_files|1|1"

t_begin "cookbook 7: removed files"
check_query 7 "scratch|closed|1|README"

t_begin "cookbook 8: the last 20 calls"
check_query 8 "6|session_close|ok|
4|session_bash|error|command_failed
3|session_bash|ok|
2|session_write_files|ok|
1|session_create|ok|"

t_begin "cookbook 9: failed calls by error code"
check_query 9 "command_failed|1
domain_not_allowed|1"

t_begin "cookbook 10: every command a session ran"
check_query 10 "2|make|0|live
3|make test|2|live"

t_begin "cookbook 11: stored vs logical bytes"
# 12 blobs: the fixture's 11 plus the 1,250-byte audit argument (stored as a blob).
check_query 11 "12|1798|570|0.32"

t_begin "cookbook 12: denials in the last day"
check_query 12 "session_fetch|domain_not_allowed|example.org not in allowlist"

t_begin "cookbook 13: sessions by client"
check_query 13 "claude-code|2|1"

t_begin "cookbook 14: a file's text at a checkpoint, through the extension"
check_query 14 "src/main.c|29|int main(void) { return 0; }"

t_begin "cookbook 15: snapshots at a glance"
sid=$(sqlite3 "$db" "SELECT id FROM sessions WHERE label = 'build-demo'")
"$BUILD/drun-admin" --db "$db" snapshot create "$sid" --name before-fix >/dev/null
check_query 15 "before-fix|build-demo|4|3|46"

# The write_files row's NOTES value (1,250 bytes) is stored as a blob reference.
notes=$(printf 'line\\n%.0s' $(seq 250))
full='{"files":{"src/main.c":"...","README":"demo","NOTES":"'"$notes"'"}}'

t_begin "cookbook 16: a write_files call's full arguments, through the extension"
check_query 16 "2|144|$full"

t_begin "the stored row holds a reference, not the value"
raw=$(sqlite3 "$db" "SELECT args FROM audit_log WHERE id = 2")
case "$raw" in
*'"NOTES":{"$blob":"'*'","bytes":1250}}}') t_ok ;;
*) t_fail "raw args: $raw" ;;
esac

t_begin "drun-admin audit show expands the reference; --raw does not"
"$BUILD/drun-admin" --db "$db" --json audit show 2 >"$T_TMP/show.json" 2>&1
"$BUILD/drun-admin" --db "$db" --json audit show --raw 2 >"$T_TMP/raw.json" 2>&1
a=$(node -e 'const o=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));process.stdout.write(o.args)' "$T_TMP/show.json")
r=$(node -e 'const o=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));process.stdout.write(o.args)' "$T_TMP/raw.json")
[ "$a" = "$full" ] && [ "$r" = "$raw" ] && t_ok || t_fail "show: $a
raw: $r"

t_begin "audit verify checks referenced blobs and names the row"
cp "$db" "$T_TMP/gone.db"
sqlite3 "$T_TMP/gone.db" "DELETE FROM blobs WHERE hash = (SELECT hash FROM audit_refs WHERE audit_id = 2)"
"$BUILD/drun-admin" --db "$T_TMP/gone.db" audit verify >"$T_TMP/v.out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q "audit row 2" "$T_TMP/v.out" && t_ok || t_fail "rc $rc: $(cat "$T_TMP/v.out")"

t_begin "drun_audit_args names a missing blob instead of returning wrong text"
got=$(LD_PRELOAD="$asan_rt" sqlite3 -readonly -cmd ".load $BUILD/drun-sqlite" "$T_TMP/gone.db" "SELECT drun_audit_args(args) FROM audit WHERE id = 2" 2>&1)
case "$got" in *"drun: audit argument blob "*) t_ok ;; *) t_fail "got: $got" ;; esac

t_begin "at least five cookbook queries"
[ -n "$(query 5)" ] && t_ok || t_fail "fewer than five sql blocks"

t_done
