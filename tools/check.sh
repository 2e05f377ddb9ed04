#!/bin/sh
# tools/check.sh - everything CI runs after the build: lint, every test suite against
# build/, then every suite again under AddressSanitizer + UBSan (make asan). Ends with
# one line "N passed, N failed, N skipped" summing both test runs; a lint failure or a
# sanitizer report counts as one failure more; just before it, the whole run's time.
# Exit 0 only if nothing failed.
set -u
cd "$(dirname "$0")/.."
t_start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log" "$log.rc"' EXIT
P=0 F=0 S=0

# Adds the closing "N passed, N failed, N skipped" line of $log to the totals (a run
# that ends without one, e.g. a build failure, counts as one failure).
tally() {
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        F=$((F + 1))
        return
    fi
    set -- $line
    P=$((P + $1)) F=$((F + $3)) S=$((S + $5))
}

echo "== lint"
if ! sh tools/lint.sh; then
    F=$((F + 1))
fi

echo "== tests (build/)"
sh tests/run.sh build all 2>&1 | tee "$log"
tally

echo "== tests under ASan + UBSan (build/asan/)"
{
    ${MAKE:-make} asan
    echo $? >"$log.rc"
} 2>&1 | tee "$log"
rc=$(cat "$log.rc")
tally
if [ "$rc" -ne 0 ] && ! grep -qE '^[0-9]+ passed, [1-9][0-9]* failed' "$log"; then
    echo "make asan failed (build error or sanitizer reports above)"
    F=$((F + 1))
fi

secs=$(($(date +%s) - t_start))
echo "run time: $((secs / 60)) min $((secs % 60)) s (lint, every suite, every suite under ASan + UBSan; load now: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
