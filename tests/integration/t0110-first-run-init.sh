#!/bin/sh
# A new user's first steps, with a fresh HOME: "~/.drun/drun.db" as a client passes it
# (no shell to expand the tilde, no ~/.drun yet), --help and --version on stdout,
# usage errors on stderr, and `drun-mcp init CLIENT` editing each client's config file:
# merged with other servers, comments kept (TOML), idempotent, backed up, --dry-run
# writing nothing, a malformed file refused and left as it was.
. "$(dirname "$0")/../lib.sh"

M="$BUILD/drun-mcp"
A="$BUILD/drun-admin"
H="$T_TMP/home"
mkdir -p "$H"
unset DRUN_DB DRUN_CONFIG CODEX_HOME CLAUDE_CONFIG_DIR XDG_CONFIG_HOME

run() { "$@" >"$T_TMP/out" 2>"$T_TMP/err"; echo $? >"$T_TMP/rc"; }
rc() { cat "$T_TMP/rc"; }
has() { grep -q -- "$2" "$T_TMP/$1"; }
sum() { cksum <"$1"; }

# ---- first run ------------------------------------------------------------------------

t_begin "--db '~/.drun/drun.db' on a fresh HOME: the directory is made 0700, said on stderr"
echo '{"jsonrpc":"2.0","id":1,"method":"ping"}' |
    HOME="$H" "$M" --db '~/.drun/drun.db' >"$T_TMP/out" 2>"$T_TMP/err"
mode=$(stat -c %a "$H/.drun" 2>/dev/null)
[ -f "$H/.drun/drun.db" ] && [ "$mode" = 700 ] && has err "created the directory '$H/.drun'" &&
    [ ! -e "./~" ] && t_ok || t_fail "mode '$mode': $(cat "$T_TMP/err")"

t_begin "a second start says nothing about directories"
echo '{"jsonrpc":"2.0","id":1,"method":"ping"}' |
    HOME="$H" "$M" --db '~/.drun/drun.db' >"$T_TMP/out" 2>"$T_TMP/err"
! has err "created the directory" && t_ok || t_fail "$(cat "$T_TMP/err")"

t_begin "DRUN_DB=~/... with missing directories several levels deep"
echo '{"jsonrpc":"2.0","id":1,"method":"ping"}' |
    HOME="$H" DRUN_DB='~/a/b/drun.db' "$M" >"$T_TMP/out" 2>"$T_TMP/err"
[ -f "$H/a/b/drun.db" ] && [ "$(stat -c %a "$H/a")" = 700 ] && [ "$(stat -c %a "$H/a/b")" = 700 ] &&
    has err "created the directory '$H/a'" && t_ok || t_fail "$(cat "$T_TMP/err")"

t_begin "db_path = '~/...' in a config named '~/...' by --config"
printf 'db_path = "~/c/drun.db"\n' >"$H/cfg.toml"
echo '{"jsonrpc":"2.0","id":1,"method":"ping"}' |
    HOME="$H" "$M" --config '~/cfg.toml' >"$T_TMP/out" 2>"$T_TMP/err"
[ -f "$H/c/drun.db" ] && t_ok || t_fail "$(cat "$T_TMP/err")"

t_begin "drun-admin --db '~/...' reads the same file"
run env HOME="$H" "$A" --db '~/.drun/drun.db' db check
[ "$(rc)" = 0 ] && has out "is ok" && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "drun-admin db migrate makes the missing directory"
run env HOME="$H" "$A" --db '~/m/drun.db' db migrate
[ "$(rc)" = 0 ] && [ -f "$H/m/drun.db" ] && [ "$(stat -c %a "$H/m")" = 700 ] &&
    has err "created the directory" && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "a parent that cannot be made: exit 1 naming the directory"
run env HOME="$H" "$M" --db /proc/nope/drun.db
[ "$(rc)" = 1 ] && has err "cannot create the directory '/proc/nope'" && t_ok ||
    t_fail "rc $(rc): $(cat "$T_TMP/err")"

# ---- --help, --version, usage errors --------------------------------------------------

for p in "$M" "$A"; do
    n=$(basename "$p")
    t_begin "$n --help: usage on stdout, exit 0"
    run "$p" --help
    [ "$(rc)" = 0 ] && has out "usage: $n" && [ ! -s "$T_TMP/err" ] && t_ok || t_fail "rc $(rc)"
    t_begin "$n --version: on stdout, exit 0"
    run "$p" --version
    [ "$(rc)" = 0 ] && grep -Eq "^$n [0-9]+\.[0-9]+" "$T_TMP/out" && t_ok || t_fail "rc $(rc)"
    t_begin "$n --bogus: usage error on stderr, exit 2"
    run "$p" --bogus
    [ "$(rc)" = 2 ] && has err "bogus" && [ ! -s "$T_TMP/out" ] && t_ok || t_fail "rc $(rc)"
done

for sub in "doctor" "config" "init"; do
    t_begin "drun-mcp $sub --help: usage on stdout, exit 0"
    run "$M" $sub --help
    [ "$(rc)" = 0 ] && has out "usage: drun-mcp $sub" && [ ! -s "$T_TMP/err" ] && t_ok ||
        t_fail "rc $(rc): $(cat "$T_TMP/err")"
done

t_begin "drun-admin: an option missing its value is a usage error"
run "$A" --db "$H/x.db" audit tail -n
[ "$(rc)" = 2 ] && has err "'-n' to 'audit tail' needs a value" && t_ok ||
    t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "drun-admin: --db=PATH and options after the command's operands still parse"
run "$A" --db="$H/.drun/drun.db" --json gc --dry-run --closed-older-than 3
[ "$(rc)" = 0 ] && has out '"dry_run"' && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

# ---- drun-mcp init --------------------------------------------------------------------

I="$T_TMP/ihome"
mkdir -p "$I/.codex" "$I/.cursor" "$I/.gemini" "$I/.config/Code/User"
DB="$I/.drun/drun.db"
SELF=$(readlink -f "$M")
cat >"$I/.claude.json" <<'J'
{"numStartups": 3, "mcpServers": {"other": {"type": "stdio", "command": "/bin/other", "args": []}},
 "projects": {"/x": {"allowedTools": []}}}
J
cat >"$I/.codex/config.toml" <<'T'
# my codex settings
model = "o4" # inline comment

[mcp_servers.other]
# the other server
command = "/bin/other"
args = ["-v"]
T
echo '{"mcpServers": {"other": {"command": "/bin/other"}}}' >"$I/.cursor/mcp.json"
echo '{"theme": "dark"}' >"$I/.gemini/settings.json"
printf '{"servers": {}, "inputs": []}\n' >"$I/.config/Code/User/mcp.json"
file_of() {
    case $1 in
    claude) echo "$I/.claude.json" ;;
    codex) echo "$I/.codex/config.toml" ;;
    gemini) echo "$I/.gemini/settings.json" ;;
    cursor) echo "$I/.cursor/mcp.json" ;;
    vscode) echo "$I/.config/Code/User/mcp.json" ;;
    esac
}

for c in claude codex gemini cursor vscode; do
    f=$(file_of "$c")
    before=$(sum "$f")

    t_begin "init $c --dry-run shows the entry and writes nothing"
    run env HOME="$I" "$M" init "$c" --dry-run --db "$DB"
    [ "$(rc)" = 0 ] && has out "dry run" && has out "$SELF" && [ "$(sum "$f")" = "$before" ] &&
        [ ! -e "$f.drun-backup" ] && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

    t_begin "init $c adds drun, keeps the other entries, backs the file up"
    run env HOME="$I" "$M" init "$c" --db "$DB"
    [ "$(rc)" = 0 ] && [ "$(sum "$f.drun-backup")" = "$before" ] && t_ok ||
        t_fail "rc $(rc): $(cat "$T_TMP/err")"

    t_begin "init $c: the file says what the client needs"
    case $c in
    codex)
        python3 - "$f" "$SELF" "$DB" <<'P'
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
s = d["mcp_servers"]
assert s["drun"] == {"command": sys.argv[2], "args": ["--db", sys.argv[3]]}, s
assert s["other"]["command"] == "/bin/other" and d["model"] == "o4"
text = open(sys.argv[1]).read()
assert "# my codex settings" in text and "# inline comment" in text and "# the other server" in text
P
        ;;
    *)
        python3 - "$f" "$SELF" "$DB" "$c" <<'P'
import sys, json
d = json.load(open(sys.argv[1]))
key = "servers" if sys.argv[4] == "vscode" else "mcpServers"
e = d[key]["drun"]
assert e["command"] == sys.argv[2] and e["args"] == ["--db", sys.argv[3]], e
if sys.argv[4] in ("claude", "vscode"):
    assert e["type"] == "stdio", e
if sys.argv[4] == "claude":
    assert d["numStartups"] == 3 and d["mcpServers"]["other"]["command"] == "/bin/other"
    assert d["projects"] == {"/x": {"allowedTools": []}}
if sys.argv[4] == "cursor":
    assert d["mcpServers"]["other"] == {"command": "/bin/other"}
if sys.argv[4] == "gemini":
    assert d["theme"] == "dark"
if sys.argv[4] == "vscode":
    assert d["inputs"] == []
P
        ;;
    esac
    [ $? = 0 ] && t_ok || t_fail "$(cat "$f")"

    after=$(sum "$f")
    t_begin "init $c again changes nothing"
    run env HOME="$I" "$M" init "$c" --db "$DB"
    [ "$(rc)" = 0 ] && has out "nothing to do" && [ "$(sum "$f")" = "$after" ] &&
        [ "$(sum "$f.drun-backup")" = "$before" ] && t_ok || t_fail "rc $(rc)"
done

t_begin "init claude with another --db updates the entry, keeping its env"
python3 - "$I/.claude.json" <<'P'
import sys, json
d = json.load(open(sys.argv[1]))
d["mcpServers"]["drun"]["env"] = {"X": "1"}
json.dump(d, open(sys.argv[1], "w"))
P
run env HOME="$I" "$M" init claude --db '~/other.db'
python3 - "$I/.claude.json" "$I/other.db" <<'P' && [ "$(rc)" = 0 ] && t_ok || t_fail "rc $(rc)"
import sys, json
e = json.load(open(sys.argv[1]))["mcpServers"]["drun"]
assert e["args"] == ["--db", sys.argv[2]] and e["env"] == {"X": "1"}, e
P

t_begin "init codex with another --db updates the values in place, comments kept"
run env HOME="$I" "$M" init codex --db "$I/other.db"
[ "$(rc)" = 0 ] && grep -q "^# the other server" "$I/.codex/config.toml" &&
    [ "$(grep -c '^\[mcp_servers.drun\]' "$I/.codex/config.toml")" = 1 ] &&
    grep -q "other.db" "$I/.codex/config.toml" && t_ok || t_fail "$(cat "$I/.codex/config.toml")"

t_begin "a file that does not exist yet is created"
rm -rf "$I/.gemini"
run env HOME="$I" "$M" init gemini --db "$DB"
[ "$(rc)" = 0 ] && [ -f "$I/.gemini/settings.json" ] && [ ! -e "$I/.gemini/settings.json.drun-backup" ] &&
    t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "a symlinked config is edited where it lives and stays a link"
mkdir -p "$I/dotfiles"
mv "$I/.cursor/mcp.json" "$I/dotfiles/cursor.json"
ln -s "$I/dotfiles/cursor.json" "$I/.cursor/mcp.json"
run env HOME="$I" "$M" init cursor --db "$I/third.db"
[ "$(rc)" = 0 ] && [ -L "$I/.cursor/mcp.json" ] && grep -q third.db "$I/dotfiles/cursor.json" &&
    t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

for c in claude codex vscode; do
    f=$(file_of "$c")
    case $c in
    codex) printf '# broken\n[mcp_servers\ncommand = 1\n' >"$f" ;;
    claude) printf '{"mcpServers": {"x": 1},, }\n' >"$f" ;;
    vscode) printf '{\n  // a comment\n  "servers": {}\n}\n' >"$f" ;;
    esac
    before=$(sum "$f")
    rm -f "$f.drun-backup"
    t_begin "init $c refuses a malformed file, says where, leaves it untouched"
    run env HOME="$I" "$M" init "$c" --db "$DB"
    [ "$(rc)" = 1 ] && has err "$f" && has err "line" && has err "nothing was changed" &&
        [ "$(sum "$f")" = "$before" ] && [ ! -e "$f.drun-backup" ] && t_ok ||
        t_fail "rc $(rc): $(cat "$T_TMP/err")"
done

t_begin "init codex refuses an inline mcp_servers table"
printf 'mcp_servers = { other = { command = "x" } }\n' >"$I/.codex/config.toml"
before=$(sum "$I/.codex/config.toml")
run env HOME="$I" "$M" init codex --db "$DB"
[ "$(rc)" = 1 ] && has err "inline table" && [ "$(sum "$I/.codex/config.toml")" = "$before" ] &&
    t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "init with an unknown client, or none: usage on stderr, exit 2"
run "$M" init emacs
r1=$(rc)
run "$M" init
[ "$r1" = 2 ] && [ "$(rc)" = 2 ] && has err "claude, codex, gemini, cursor or vscode" && t_ok ||
    t_fail "rc $r1 $(rc)"

t_begin "CODEX_HOME, CLAUDE_CONFIG_DIR and XDG_CONFIG_HOME move the files"
run env HOME="$I" CODEX_HOME="$T_TMP/ch" CLAUDE_CONFIG_DIR="$T_TMP/cc" XDG_CONFIG_HOME="$T_TMP/xdg" \
    sh -c "'$M' init codex --db '$DB' && '$M' init claude --db '$DB' && '$M' init vscode --db '$DB'"
[ "$(rc)" = 0 ] && [ -f "$T_TMP/ch/config.toml" ] && [ -f "$T_TMP/cc/.claude.json" ] &&
    [ -f "$T_TMP/xdg/Code/User/mcp.json" ] && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_begin "init --file names another file (a project's .mcp.json)"
run env HOME="$I" "$M" init claude --file "$T_TMP/proj/.mcp.json" --db "$DB"
[ "$(rc)" = 0 ] && python3 -c "import json,sys; json.load(open(sys.argv[1]))['mcpServers']['drun']" \
    "$T_TMP/proj/.mcp.json" && t_ok || t_fail "rc $(rc): $(cat "$T_TMP/err")"

t_done
