#!/bin/sh
# Runs every benchmark under tools/bench/ (make bench). Benchmarks print ratios against
# a floor measured in the same run; they are not tests and never fail the build.
#   sh tools/bench/run.sh [BUILD_DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-build}
for b in "$here"/*.sh "$here"/*.mjs; do
    [ -f "$b" ] || continue
    case $(basename "$b") in run.sh) continue ;; esac
    # A .mjs with a .sh of the same name is run by that script (it builds or checks first).
    case $b in *.mjs) [ -f "${b%.mjs}.sh" ] && continue ;; esac
    echo "== $(basename "$b")"
    case $b in
    *.sh) DRUN_BUILD=$BUILD sh "$b" ;;
    *.mjs) DRUN_BUILD=$BUILD node "$b" ;;
    esac
done
