#!/bin/sh
# Runs drun's test suites and ends with one line "N passed, N failed, N skipped".
#
#   sh tests/run.sh [BUILD_DIR] [unit|shell|client|security|all]
#
# Each suite prints its own closing line of the same form; this script adds them up.
# A suite that exits non-zero without such a line counts as one failure, so a crash
# can never pass silently. Each suite's time is shown, and the whole run's just before the
# closing line.
set -u
t_start=$(date +%s)
BUILD=${1:-build}
ONLY=${2:-all}
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$top" && mkdir -p "$BUILD" && cd "$BUILD" && pwd)
export DRUN_BUILD="$BUILD"
logdir="$BUILD/test-logs"
mkdir -p "$logdir"
P=0
F=0
S=0

run_suite() {
    name=$1
    shift
    log="$logdir/$(echo "$name" | tr '/ ' '__').log"
    echo "== $name"
    t0=$(date +%s)
    "$@" >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    # Show failures and skips in full, passes as a count.
    grep -v '^ok ' "$log" | grep -v '^[0-9]* passed, ' | sed 's/^/   /' | tail -n 200
    line=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "   $name: no result line (exit $rc); see $log"
        F=$((F + 1))
        return
    fi
    p=$(echo "$line" | sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p')
    s=${s:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "   $name: exited $rc although it reported no failure; counted as one"
        f=1
    fi
    echo "   $p passed, $f failed, $s skipped (${secs} s)"
    P=$((P + p))
    F=$((F + f))
    S=$((S + s))
}

if [ "$ONLY" = all ] || [ "$ONLY" = unit ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        run_suite "unit/$(basename "$t")" "$t"
    done
fi

if [ "$ONLY" = all ] || [ "$ONLY" = shell ]; then
    for t in "$top"/tests/integration/t[0-9]*.sh; do
        [ -f "$t" ] || continue
        run_suite "shell/$(basename "$t" .sh)" sh "$t"
    done
fi

if [ "$ONLY" = all ] || [ "$ONLY" = client ]; then
    if [ -f "$top/tests/client/package.json" ]; then
        if [ ! -d "$top/tests/client/node_modules" ]; then
            (cd "$top/tests/client" && npm ci --no-audit --no-fund --loglevel=error) ||
                echo "   npm ci failed in tests/client"
        fi
        for t in "$top"/tests/client/test_*.mjs; do
            [ -f "$t" ] || continue
            run_suite "client/$(basename "$t" .mjs)" node "$t"
        done
    fi
fi

if [ "$ONLY" = all ] || [ "$ONLY" = security ]; then
    for t in "$top"/tests/security/t[0-9]*.sh; do
        [ -f "$t" ] || continue
        run_suite "security/$(basename "$t" .sh)" sh "$t"
    done
fi

secs=$(($(date +%s) - t_start))
echo "run time: $((secs / 60)) min $((secs % 60)) s ($BUILD, $ONLY)"
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
