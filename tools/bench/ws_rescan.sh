#!/bin/sh
# Builds and runs the workspace rescan benchmark (tools/bench/ws_rescan.c) against
# BUILD/libdrun.a. Usage: sh tools/bench/ws_rescan.sh [build-dir] [tmp-dir]
set -eu
cd "$(dirname "$0")/../.."
BUILD=${1:-${DRUN_BUILD:-build}}
TMP=${2:-${TMPDIR:-/tmp}}
PKGS="sqlite3 libzstd libcjson libuv libcurl libcrypto libpcre2-8 libgit2"
[ "$(uname -s)" = Linux ] && PKGS="$PKGS libseccomp"
mkdir -p "$BUILD/bench"
# shellcheck disable=SC2046
cc -std=c11 -O2 -g -D_GNU_SOURCE -Isrc $(pkg-config --cflags $PKGS) \
    tools/bench/ws_rescan.c "$BUILD/libdrun.a" -o "$BUILD/bench/ws_rescan" \
    $(pkg-config --libs $PKGS) -lstdc++ -lpthread -lm
exec "$BUILD/bench/ws_rescan" "$TMP"
