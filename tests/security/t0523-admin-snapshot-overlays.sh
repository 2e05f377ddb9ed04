#!/bin/sh
# t0523-admin-snapshot-overlays.sh - drun-admin's snapshot import and restore judge a
# snapshot's overlays under the operator's policy (--config) as session_restore does:
#
#   - import of a .drun with overlays {"hostroot": "/", "node_modules": <a real
#     node_modules dir>} keeps node_modules, drops hostroot, and says so (text: one line
#     per dropped overlay with its reason; --json: dropped_overlays)
#   - restore of that snapshot after mount_allowlist narrowed drops node_modules too, in
#     the same transaction as the new session (no session_overlays row is left)
#   - import of an export file whose snapshot_overlays row names /proc drops it
#   - a config that does not parse refuses the import (never judged by defaults)
. "$(dirname "$0")/../lib.sh"

admin="$BUILD/drun-admin"
mcp="$BUILD/drun-mcp"
if [ ! -x "$admin" ] || [ ! -x "$mcp" ]; then
    t_begin "drun-admin snapshot overlays"
    t_skip "'$admin' or '$mcp' is not built; run 'make'"
    t_done
fi
for c in zstd sqlite3; do
    if ! command -v $c >/dev/null 2>&1; then
        t_begin "drun-admin snapshot overlays"
        t_skip "$c is not installed"
        t_done
    fi
done

d=$T_TMP
mkdir -p "$d/proj/node_modules/pkg" "$d/other"
printf 'x\n' >"$d/proj/node_modules/pkg/index.js"
cfg="$d/config.toml"
printf 'runtime_dir = "%s/rt"\nsnapshots_dir = "%s/snaps"\n' "$d" "$d" >"$cfg"
db="$d/s.db"
"$mcp" --db "$db" --config "$cfg" </dev/null >/dev/null 2>&1 # creates the database
drun() {
    printf 'DRUN'
    printf '{"checkpoint_idx":0,"blobs":[[104,105]],"checkpoints":[{"id":0,"stdout":"","stderr":"","files":{"a.txt":0}}],"chat_log":[],"overlays":%s}' "$1" |
        zstd -q -c
}
drun "{\"hostroot\":\"/\",\"node_modules\":\"$d/proj/node_modules\"}" >"$d/two.drun"
overlays() { sqlite3 "$db" "$1"; }

t_begin "import drops the overlay on / and keeps the one session_mount could make"
out=$("$admin" --db "$db" --config "$cfg" snapshot import "$d/two.drun" --name two 2>&1)
left=$(overlays "SELECT group_concat(key) FROM snapshot_overlays o JOIN snapshots s ON s.id = o.snapshot_id WHERE s.name = 'two'")
if [ "$left" = node_modules ] && printf '%s' "$out" | grep -q "hostroot -> /: .*not in mount_overlay_paths"; then
    t_ok
else
    t_fail "kept '$left'; output: $out"
fi

t_begin "import --json lists dropped_overlays"
out=$("$admin" --db "$db" --config "$cfg" --json snapshot import "$d/two.drun" --name two-json 2>&1)
case $out in
*'"dropped_overlays":[{"key":"hostroot","host_path":"/","reason":'*'"dropped_overlays_total":1'*) t_ok ;;
*) t_fail "$out" ;;
esac

t_begin "restore after mount_allowlist narrowed drops the overlay it no longer admits"
printf 'mount_allowlist = ["%s/other"]\n' "$d" >>"$cfg"
out=$("$admin" --db "$db" --config "$cfg" snapshot restore two 2>&1)
sid=$(printf '%s' "$out" | sed -n 's/.* as session \([0-9a-f]*\) .*/\1/p')
left=$(overlays "SELECT count(*) FROM session_overlays WHERE session_id = '$sid'")
if [ -n "$sid" ] && [ "$left" = 0 ] && printf '%s' "$out" | grep -q "node_modules -> $d/proj/node_modules: .*not inside any mount_allowlist entry"; then
    t_ok
else
    t_fail "session '$sid' keeps $left overlays; output: $out"
fi

t_begin "import of an export file drops an overlay on /proc"
"$admin" --db "$db" --config "$cfg" snapshot export two -o "$d/exp.db" >/dev/null 2>&1
sqlite3 "$d/exp.db" "INSERT INTO snapshot_overlays (snapshot_id, key, host_path) SELECT id, 'proc', '/proc' FROM snapshots"
out=$("$admin" --db "$db" --config "$cfg" snapshot import "$d/exp.db" --name exp 2>&1)
left=$(overlays "SELECT count(*) FROM snapshot_overlays o JOIN snapshots s ON s.id = o.snapshot_id WHERE s.name = 'exp' AND key = 'proc'")
if [ "$left" = 0 ] && printf '%s' "$out" | grep -q "proc -> /proc"; then t_ok; else t_fail "kept $left; output: $out"; fi

t_begin "a config that does not parse refuses the import"
printf 'mount_allowlist = [\n' >"$d/bad.toml"
if out=$("$admin" --db "$db" --config "$d/bad.toml" snapshot import "$d/two.drun" --name bad 2>&1); then
    t_fail "imported: $out"
elif [ "$(overlays "SELECT count(*) FROM snapshots WHERE name = 'bad'")" = 0 ]; then
    t_ok
else
    t_fail "a snapshot was kept"
fi
t_done
