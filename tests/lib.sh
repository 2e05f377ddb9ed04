# tests/lib.sh - helpers for shell tests (sourced). Each test script:
#
#   . "$(dirname "$0")/../lib.sh"
#   t_begin "what it checks"; ...; t_ok or t_fail "why"
#   t_done            # prints "N passed, N failed, N skipped" and exits
#
# T_TMP is a fresh directory removed on exit; DRUN_BUILD names the build folder.
set -u
T_TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${DRUN_BUILD:-$T_TOP/build}
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/drun-t.XXXXXX")
trap 'rm -rf "$T_TMP"' EXIT
T_P=0
T_F=0
T_S=0
T_NAME=""

t_begin() { T_NAME=$1; }
t_ok() { T_P=$((T_P + 1)); echo "ok   $T_NAME"; }
t_fail() { T_F=$((T_F + 1)); echo "FAIL $T_NAME: $*"; }
t_skip() { T_S=$((T_S + 1)); echo "skip $T_NAME: $*"; }
# t_check DESCRIPTION COMMAND...: passes if the command succeeds.
t_check() {
    T_NAME=$1
    shift
    if "$@"; then t_ok; else t_fail "command failed: $*"; fi
}
t_done() {
    echo "$T_P passed, $T_F failed, $T_S skipped"
    [ "$T_F" -eq 0 ]
    exit $?
}
