#!/bin/sh
# drun-admin sessions/snapshot/audit over the fixture database: snapshot, export to a
# file, import into an empty DB, restore (as a session and --to-dir, refusing a
# non-empty directory and never writing through a link), audit verify catching an
# edited, a deleted and a reordered row, and admin commands racing a writer.
. "$(dirname "$0")/../lib.sh"

A="$BUILD/drun-admin"
db="$T_TMP/fx.db"
unset DRUN_DB
if ! DRUN_FIXTURE_OUT="$db" "$BUILD/tests/test_store_fixture" >"$T_TMP/fx.log" 2>&1; then
    t_begin "fixture"
    t_fail "cannot build the fixture: $(cat "$T_TMP/fx.log")"
    t_done
fi
run() { "$A" "$@" >"$T_TMP/out" 2>"$T_TMP/err"; echo $? >"$T_TMP/rc"; }
rc() { cat "$T_TMP/rc"; }
has() { grep -q -- "$2" "$T_TMP/$1"; }
sid=$("$A" --db "$db" --json sessions list | sed -n 's/.*"session_id":"\([0-9a-f]*\)".*/\1/p' | head -1)

for cmd in "sessions" "sessions list" "snapshot" "snapshot restore" "snapshot export" \
    "snapshot import" "audit show" "db vacuum"; do
    t_begin "--help on '$cmd' exits 0 without a database"
    # shellcheck disable=SC2086
    run $cmd --help
    [ "$(rc)" = 0 ] && has out "usage:" && t_ok || t_fail "rc $(rc)"
done

t_begin "sessions list shows the open session with aligned columns"
run --db "$db" sessions list
[ "$(rc)" = 0 ] && has out "^ID  *STATE" && has out "$sid  open" && t_ok || t_fail "$(cat "$T_TMP/out")"

t_begin "sessions show lists every checkpoint and marks the head"
run --db "$db" sessions show "$sid"
[ "$(rc)" = 0 ] && has out "^\* 3 " && has out "make test" && t_ok || t_fail "$(cat "$T_TMP/out")"

t_begin "sessions show of an unknown id: exit 1, names it"
run --db "$db" sessions show 0000aaaa
[ "$(rc)" = 1 ] && has err "'0000aaaa'" && t_ok || t_fail "rc $(rc)"

t_begin "snapshot create, list and show"
run --db "$db" snapshot create "$sid" --name demo --description "before refactor"
run2=$(rc)
run --db "$db" --json snapshot show demo
[ "$run2" = 0 ] && [ "$(rc)" = 0 ] && has out '"checkpoint_count":4' && has out '"description":"before refactor"' &&
    t_ok || t_fail "rc $run2/$(rc): $(cat "$T_TMP/out" "$T_TMP/err")"

t_begin "snapshot create with a taken name: exit 1, says so"
run --db "$db" snapshot create "$sid" --name demo
[ "$(rc)" = 1 ] && has err "'demo' already exists" && t_ok || t_fail "rc $(rc)"

t_begin "snapshot import of an original .drun file whose name is not a snapshot name"
# "DRUN" + zstd of the original's JSON (reference 6.1); the file stem has a space and a
# '+', which the generated name replaces, so the import still works.
printf '%s' '{"checkpoint_idx":1,"parent":null,"label":"legacy","overlays":{},"blobs":[[104,105,10]],"checkpoints":[{"id":0,"stdout":"","stderr":"","steps":[],"files":{}},{"id":1,"stdout":"","stderr":"","tool":"session_write_files","steps":[],"files":{"a.txt":0}}],"chat_log":[]}' |
    zstd -3 -q -c >"$T_TMP/j.zst"
{ printf 'DRUN'; cat "$T_TMP/j.zst"; } >"$T_TMP/old run+1.drun"
"$A" --db "$T_TMP/d.db" db migrate >/dev/null
run --db "$T_TMP/d.db" snapshot import "$T_TMP/old run+1.drun"
[ "$(rc)" = 0 ] && has out "imported snapshot 'old_run_1-[0-9TZ]*'" &&
    [ "$(sqlite3 "$T_TMP/d.db" "SELECT count(*) FROM snapshots WHERE name LIKE 'old_run_1-%'")" = 1 ] &&
    t_ok || t_fail "rc $(rc): $(cat "$T_TMP/out" "$T_TMP/err")"

t_begin "snapshot export, then import into an empty DB, is identical"
"$A" --db "$T_TMP/b.db" db migrate >/dev/null
run --db "$db" snapshot export demo -o "$T_TMP/demo.snap"
r1=$(rc)
run --db "$T_TMP/b.db" snapshot import "$T_TMP/demo.snap"
r2=$(rc)
q="SELECT id, parent, status, coalesce(label,''), coalesce(command,''), exit_code,
   hex(manifest_hash), hex(stdout_hash), hex(stderr_hash) FROM snapshot_checkpoints ORDER BY id"
if [ "$r1" = 0 ] && [ "$r2" = 0 ] &&
    [ "$(sqlite3 "$db" "$q")" = "$(sqlite3 "$T_TMP/b.db" "$q")" ] &&
    [ -n "$(sqlite3 "$T_TMP/b.db" "$q")" ]; then t_ok; else t_fail "rc $r1/$r2 $(cat "$T_TMP/err")"; fi

t_begin "the export holds no blob the snapshot does not need"
n=$(sqlite3 "$T_TMP/demo.snap" "SELECT count(*) FROM blobs WHERE data = CAST('orphaned output' || char(10) AS BLOB)")
s=$(sqlite3 "$T_TMP/demo.snap" "SELECT count(*) FROM sessions")
[ "$n" = 0 ] && [ "$s" = 0 ] && t_ok || t_fail "orphans $n sessions $s"

t_begin "export never overwrites a file"
run --db "$db" snapshot export demo -o "$T_TMP/demo.snap"
[ "$(rc)" = 1 ] && has err "already exists" && t_ok || t_fail "rc $(rc)"

t_begin "an export with a damaged blob is refused and nothing is kept"
cp "$T_TMP/demo.snap" "$T_TMP/bad.snap"
sqlite3 "$T_TMP/bad.snap" "UPDATE blobs SET data = CAST('XXXX' || char(10) AS BLOB) WHERE codec = 0 AND size = 5"
"$A" --db "$T_TMP/c.db" db migrate >/dev/null
before=$(sqlite3 "$T_TMP/c.db" "SELECT count(*) FROM blobs")
run --db "$T_TMP/c.db" snapshot import "$T_TMP/bad.snap"
after=$(sqlite3 "$T_TMP/c.db" "SELECT count(*) FROM blobs; SELECT count(*) FROM snapshots")
[ "$(rc)" = 1 ] && has err "do not match its hash" && [ "$after" = "$before
0" ] && t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err") [$after]"

t_begin "import of a file that is not a database names that file, not ours"
head -c 8192 /dev/urandom >"$T_TMP/noise.snap"
run --db "$T_TMP/c.db" snapshot import "$T_TMP/noise.snap"
[ "$(rc)" = 1 ] && has err "snapshot file '$T_TMP/noise.snap' is damaged" && ! has err "c.db" &&
    ! has err "restore it from a backup" && t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err")"

t_begin "import of a snapshot with a damaged page names that file, not ours"
cp "$T_TMP/demo.snap" "$T_TMP/torn.snap"
ps=$(sqlite3 "$T_TMP/torn.snap" "PRAGMA page_size")
np=$(sqlite3 "$T_TMP/torn.snap" "PRAGMA page_count")
head -c "$ps" /dev/zero | tr '\0' '\377' |
    dd of="$T_TMP/torn.snap" bs="$ps" seek=$((np - 1)) conv=notrunc 2>/dev/null
run --db "$T_TMP/c.db" snapshot import "$T_TMP/torn.snap"
after=$(sqlite3 "$T_TMP/c.db" "SELECT count(*) FROM snapshots")
[ "$(rc)" = 1 ] && has err "'$T_TMP/torn.snap'" && ! has err "c.db" && [ "$after" = 0 ] &&
    t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err")"

t_begin "snapshot restore makes a new unclaimed session with the same head"
run --db "$db" --json snapshot restore demo
new=$(sed -n 's/.*"session_id":"\([0-9a-f]*\)".*/\1/p' "$T_TMP/out")
[ "$(rc)" = 0 ] && [ -n "$new" ] && [ "$new" != "$sid" ] && has out '"head":3' &&
    [ "$(sqlite3 "$db" "SELECT count(*) FROM checkpoints WHERE session_id = '$new'")" = 4 ] &&
    t_ok || t_fail "rc $(rc) $(cat "$T_TMP/out" "$T_TMP/err")"

t_begin "restore --to-dir writes the checkpoint's files"
run --db "$db" snapshot restore demo --checkpoint 1 --to-dir "$T_TMP/out1"
[ "$(rc)" = 0 ] && [ "$(cat "$T_TMP/out1/README")" = demo ] && [ -f "$T_TMP/out1/src/main.c" ] &&
    [ ! -e "$T_TMP/out1/build" ] && t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err")"

t_begin "restore --to-dir refuses a non-empty directory and changes nothing in it"
mkdir -p "$T_TMP/full" && echo keep >"$T_TMP/full/README"
run --db "$db" snapshot restore demo --to-dir "$T_TMP/full"
[ "$(rc)" = 1 ] && has err "is not empty" && [ "$(cat "$T_TMP/full/README")" = keep ] && t_ok ||
    t_fail "rc $(rc)"

t_begin "restore --to-dir refuses a symlink as the directory"
mkdir -p "$T_TMP/elsewhere"
ln -s "$T_TMP/elsewhere" "$T_TMP/link"
run --db "$db" snapshot restore demo --to-dir "$T_TMP/link"
[ "$(rc)" = 1 ] && [ -z "$(ls -A "$T_TMP/elsewhere")" ] && t_ok || t_fail "rc $(rc)"

t_begin "restore --to-dir of a missing checkpoint: exit 1, names it"
run --db "$db" snapshot restore demo --checkpoint 9 --to-dir "$T_TMP/out9"
[ "$(rc)" = 1 ] && has err "no live checkpoint 9" && [ ! -e "$T_TMP/out9" ] && t_ok || t_fail "rc $(rc)"

t_begin "snapshot delete, then show: exit 1"
run --db "$db" snapshot delete demo
run --db "$db" snapshot show demo
[ "$(rc)" = 1 ] && has err "does not exist" && t_ok || t_fail "rc $(rc)"

t_begin "audit tail filters by session, tool and errors"
run --db "$db" audit tail --errors --tool session_bash --session "$sid"
[ "$(rc)" = 0 ] && [ "$(wc -l <"$T_TMP/out")" = 2 ] && has out "command_failed" && t_ok ||
    t_fail "$(cat "$T_TMP/out")"

t_begin "audit show prints one row with its arguments"
run --db "$db" audit show 2
[ "$(rc)" = 0 ] && has out '"README":"demo"' && t_ok || t_fail "$(cat "$T_TMP/out")"

t_begin "audit show of a missing row: exit 1"
run --db "$db" audit show 999
[ "$(rc)" = 1 ] && has err "does not exist" && t_ok || t_fail "rc $(rc)"

t_begin "audit verify passes on the untouched log"
run --db "$db" audit verify
[ "$(rc)" = 0 ] && t_ok || t_fail "$(cat "$T_TMP/err")"

tamper() {
    cp "$db" "$T_TMP/t.db"
    sqlite3 "$T_TMP/t.db" "$1"
    run --db "$T_TMP/t.db" audit verify
}
t_begin "audit verify catches an edited row and names it"
tamper "UPDATE audit SET summary = 'nothing to see' WHERE id = 3"
[ "$(rc)" = 1 ] && has err "row 3" && t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err")"

t_begin "audit verify catches a deleted row and names where"
tamper "DELETE FROM audit WHERE id = 4"
[ "$(rc)" = 1 ] && has err "row 5" && t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err")"

t_begin "audit verify catches two rows swapped"
tamper "UPDATE audit SET id = 100 WHERE id = 2; UPDATE audit SET id = 2 WHERE id = 3;
        UPDATE audit SET id = 3 WHERE id = 100"
[ "$(rc)" = 1 ] && has err "row 2" && t_ok || t_fail "rc $(rc) $(cat "$T_TMP/err")"

t_begin "db vacuum"
run --db "$db" db vacuum
[ "$(rc)" = 0 ] && has out "vacuumed" && t_ok || t_fail "$(cat "$T_TMP/err")"

t_begin "admin reads and writes race a writer: only clear busy errors, no corruption"
(
    i=0
    while [ $i -lt 25 ]; do
        "$A" --db "$db" snapshot create "$sid" --name "race$i" >/dev/null 2>>"$T_TMP/w.err"
        "$A" --db "$db" snapshot restore "race$i" >/dev/null 2>>"$T_TMP/w.err"
        i=$((i + 1))
    done
) &
wpid=$!
k=0
: >"$T_TMP/r.err"
while [ $k -lt 25 ]; do
    "$A" --db "$db" audit tail -n 5 >/dev/null 2>>"$T_TMP/r.err"
    "$A" --db "$db" snapshot list >/dev/null 2>>"$T_TMP/r.err"
    "$A" --db "$db" sessions list --all >/dev/null 2>>"$T_TMP/r.err"
    k=$((k + 1))
done
wait $wpid
other=$(cat "$T_TMP/r.err" "$T_TMP/w.err" 2>/dev/null | grep -v "is busy" | grep -c .)
run --db "$db" db check
[ "$other" = 0 ] && [ "$(rc)" = 0 ] && t_ok || t_fail "errors: $(cat "$T_TMP/r.err" "$T_TMP/w.err")"

t_done
