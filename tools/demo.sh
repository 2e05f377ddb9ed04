#!/bin/sh
# drun's main job in one command: start drun-mcp on a fresh database, drive a short
# scripted session through it (tools/demo-session.mjs speaks MCP over stdio), then ask
# the audit log what happened with the sqlite3 CLI.
#
#   sh tools/demo.sh [DB_PATH]      (default: a new file under /tmp)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
db=${1:-$(mktemp -d "${TMPDIR:-/tmp}/drun-demo.XXXXXX")/drun.db}
if [ ! -x "$top/build/drun-mcp" ]; then
    echo "demo: build/drun-mcp is missing; run 'make' first" >&2
    exit 1
fi
echo "demo: database $db"
node "$top/tools/demo-session.mjs" --db "$db"
echo
echo "demo: the audit log, through the sqlite3 CLI:"
sqlite3 -header -column "$db" \
    "SELECT id, time, tool, outcome, error_code, duration_ms, summary FROM audit_log ORDER BY id"
