#!/bin/sh
# Runs tools/bench/fetch_tool_bench.mjs: session_fetch of 100 MiB from a loopback server
# through the real drun-mcp against curl -o /dev/null, interleaved, and the daemon's peak
# RSS growth during the fetch.
#   sh tools/bench/fetch_tool_bench.sh [ROUNDS] [BUILD]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-${DRUN_BUILD:-$top/build}}
cd "$top"
if ! command -v curl >/dev/null 2>&1; then
    echo "fetch_tool_bench: needs curl; skipped"
    exit 0
fi
DRUN_BUILD="$BUILD" exec node tools/bench/fetch_tool_bench.mjs "${1:-5}"
