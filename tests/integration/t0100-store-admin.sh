#!/bin/sh
# drun-admin over a real database: how the path is given, exit codes, --help on every
# command, human and --json output, refusing foreign and newer files, audit verify
# catching an edit, and gc --dry-run changing nothing.
. "$(dirname "$0")/../lib.sh"

A="$BUILD/drun-admin"
db="$T_TMP/admin.db"
unset DRUN_DB

run() { "$A" "$@" >"$T_TMP/out" 2>"$T_TMP/err"; echo $? >"$T_TMP/rc"; }
rc() { cat "$T_TMP/rc"; }
has() { grep -q -- "$2" "$T_TMP/$1"; }

t_begin "no database: exit 2 and says how to give one"
run db stats
[ "$(rc)" = 2 ] && has err "no database given; pass --db PATH or set DRUN_DB" && t_ok ||
    t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "a missing file is not created by a read"
run --db "$db" db stats
[ "$(rc)" = 1 ] && has err "does not exist" && [ ! -e "$db" ] && t_ok || t_fail "rc $(rc)"

t_begin "db migrate creates the file 0600"
run --db "$db" db migrate
mode=$(stat -c %a "$db" 2>/dev/null)
[ "$(rc)" = 0 ] && [ "$mode" = 600 ] && has out "migrated from schema version 0 to 3" && t_ok ||
    t_fail "rc $(rc) mode $mode"

t_begin "db migrate again says it is current"
run --db "$db" db migrate
[ "$(rc)" = 0 ] && has out "already at schema version 3" && t_ok || t_fail "rc $(rc)"

t_begin "DRUN_DB names the database"
DRUN_DB="$db" "$A" db check >"$T_TMP/out" 2>&1 && grep -q "is ok" "$T_TMP/out" && t_ok ||
    t_fail "$(cat "$T_TMP/out")"

for cmd in "db" "db stats" "db check" "db migrate" "audit" "audit tail" "audit verify" "gc"; do
    t_begin "--help on '$cmd' exits 0 without a database"
    # shellcheck disable=SC2086
    run $cmd --help
    [ "$(rc)" = 0 ] && has out "usage: drun-admin" && t_ok || t_fail "rc $(rc)"
done

t_begin "unknown command and bad -n are usage errors"
run --db "$db" frobnicate
r1=$(rc)
run --db "$db" audit tail -n 0
r2=$(rc)
run --db "$db" audit tail -n 100001
r3=$(rc)
run --db "$db" audit tail -n 100000
r4=$(rc)
[ "$r1" = 2 ] && [ "$r2" = 2 ] && [ "$r3" = 2 ] && [ "$r4" = 0 ] && t_ok || t_fail "$r1 $r2 $r3 $r4"

# A populated database, built through the store API.
fx="$T_TMP/fx.db"
DRUN_FIXTURE_OUT="$fx" "$BUILD/tests/test_store_fixture" >/dev/null 2>&1

t_begin "db stats, human and json"
run --db "$fx" db stats
h=$(grep '^audit rows' "$T_TMP/out" | awk '{print $3}')
run --db "$fx" --json db stats
j=$(node -e 'const o=JSON.parse(require("fs").readFileSync(0,"utf8"));console.log(o.audit_rows, o.sessions_open, o.checkpoints)' <"$T_TMP/out")
[ "$h" = 6 ] && [ "$j" = "6 1 6" ] && t_ok || t_fail "human '$h' json '$j'"

t_begin "audit tail -n 2 shows the newest rows"
run --db "$fx" audit tail -n 2
[ "$(rc)" = 0 ] && [ "$(grep -c 'session_' "$T_TMP/out")" = 2 ] && has out "session_close" &&
    t_ok || t_fail "$(cat "$T_TMP/out")"

t_begin "audit tail --json carries the arguments"
run --db "$fx" --json audit tail -n 6
n=$(node -e 'const a=JSON.parse(require("fs").readFileSync(0,"utf8"));console.log(a.length, a[2].args)' <"$T_TMP/out")
[ "$n" = '6 {"command":"make"}' ] && t_ok || t_fail "$n"

t_begin "audit verify passes on an intact chain"
run --db "$fx" audit verify
[ "$(rc)" = 0 ] && has out "audit chain ok: 6 rows" && t_ok || t_fail "rc $(rc)"

t_begin "gc --dry-run reports and changes nothing"
before=$(sqlite3 "$fx" "SELECT count(*) FROM blobs")
run --db "$fx" --json gc --dry-run
after=$(sqlite3 "$fx" "SELECT count(*) FROM blobs")
has out '"blobs_deleted":1' && [ "$before" = "$after" ] && t_ok || t_fail "$(cat "$T_TMP/out")"

t_begin "gc deletes only the unreferenced blob and the DB stays sound"
run --db "$fx" gc
after=$(sqlite3 "$fx" "SELECT count(*) FROM blobs")
[ "$(rc)" = 0 ] && [ "$after" = $((before - 1)) ] && "$A" --db "$fx" db check >/dev/null &&
    t_ok || t_fail "rc $(rc) $before -> $after"

t_begin "audit verify names an edited row and exits 1"
cp "$fx" "$T_TMP/edit.db"
sqlite3 "$T_TMP/edit.db" "UPDATE audit SET outcome = 'ok' WHERE id = 4"
run --db "$T_TMP/edit.db" audit verify
[ "$(rc)" = 1 ] && has err "broken at row 4" && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "db check finds a dangling blob reference and exits 1"
cp "$fx" "$T_TMP/dangle.db"
sqlite3 "$T_TMP/dangle.db" "PRAGMA foreign_keys=OFF; DELETE FROM blobs WHERE hash IN (SELECT stderr_hash FROM checkpoints)"
run --db "$T_TMP/dangle.db" db check
[ "$(rc)" = 1 ] && has err "broken reference" && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "a non-drun SQLite file is refused by name"
sqlite3 "$T_TMP/other.db" "CREATE TABLE t (x)"
run --db "$T_TMP/other.db" db migrate
[ "$(rc)" = 1 ] && has err "other.db' is not a drun database" &&
    [ "$(sqlite3 "$T_TMP/other.db" "SELECT count(*) FROM sqlite_master")" = 1 ] && t_ok ||
    t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "a database from a newer drun is refused naming both versions"
cp "$fx" "$T_TMP/newer.db"
sqlite3 "$T_TMP/newer.db" "PRAGMA user_version = 7"
run --db "$T_TMP/newer.db" db stats
[ "$(rc)" = 1 ] && has err "schema version 7, newer than this drun's version 3" && t_ok ||
    t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "a garbage file is reported corrupt"
head -c 8192 /dev/urandom >"$T_TMP/junk.db"
run --db "$T_TMP/junk.db" db check
[ "$(rc)" = 1 ] && has err "is corrupt" && has err "restore it from a backup" && t_ok ||
    t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_done
