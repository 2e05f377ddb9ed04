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
    got=$(sqlite3 -readonly -cmd ".load $BUILD/drun-sqlite" "$db" "$sql" 2>&1)
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
check_query 11 "11|548|548|1.0"

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

t_begin "at least five cookbook queries"
[ -n "$(query 5)" ] && t_ok || t_fail "fewer than five sql blocks"

t_done
