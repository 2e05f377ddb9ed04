#!/bin/sh
# Builds and runs tools/bench/sandbox_bench.c against build/libdrun.a.
#   sh tools/bench/sandbox_bench.sh [N] [BUILD]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$top/build}
cd "$top"
cc -std=c11 -O2 -D_GNU_SOURCE -Isrc $(pkg-config --cflags libuv) tools/bench/sandbox_bench.c \
    "$BUILD/libdrun.a" $(pkg-config --libs libuv libseccomp libcrypto) -lpthread \
    -o "$BUILD/sandbox_bench"
exec "$BUILD/sandbox_bench" "${1:-30}"
