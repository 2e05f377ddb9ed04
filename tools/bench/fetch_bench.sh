#!/bin/sh
# Builds and runs tools/bench/fetch_bench.c against build/libdrun.a: a 100 MiB fetch
# from a loopback server, throughput relative to curl(1) and peak RSS growth.
#   sh tools/bench/fetch_bench.sh [ROUNDS] [BUILD]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-${DRUN_BUILD:-$top/build}}
cd "$top"
if ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    echo "fetch_bench: needs python3 and curl; skipped"
    exit 0
fi
cc -std=c11 -O2 -D_GNU_SOURCE -Isrc $(pkg-config --cflags libuv libcurl) tools/bench/fetch_bench.c \
    "$BUILD/libdrun.a" $(pkg-config --libs libuv libcurl libcrypto) -lpthread \
    -o "$BUILD/fetch_bench"
DRUN_SRC_DIR=$top exec "$BUILD/fetch_bench" "${1:-3}"
