#!/bin/sh
# Builds and runs tools/bench/snapshot_bench.c against build/libdrun.a (run `make` first).
#   sh tools/bench/snapshot_bench.sh [BUILD_DIR]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-${DRUN_BUILD:-$top/build}}
PKGS="sqlite3 libzstd libcjson libuv libcurl libcrypto libpcre2-8 libgit2"
[ "$(uname -s)" = Linux ] && PKGS="$PKGS libseccomp"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/drun-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2046
cc -std=c11 -O2 -D_GNU_SOURCE -I"$top/src" $(pkg-config --cflags $PKGS) \
    -o "$tmp/snapshot_bench" "$top/tools/bench/snapshot_bench.c" "$BUILD/libdrun.a" \
    $(pkg-config --libs $PKGS) -lstdc++ -lpthread -lm
"$tmp/snapshot_bench" "$tmp"
