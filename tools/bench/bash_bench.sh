#!/bin/sh
# Builds the raw-bwrap argv helper and runs tools/bench/bash_bench.mjs: session_bash of
# `echo hi` on a 100-file and a 10,000-file session against raw bwrap with the same
# mounts, interleaved in one run.
#   sh tools/bench/bash_bench.sh [N] [BUILD]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$top/build}
cd "$top"
cc -std=c11 -O2 -D_GNU_SOURCE -Isrc $(pkg-config --cflags libuv) tools/bench/bash_bench_argv.c \
    "$BUILD/libdrun.a" $(pkg-config --libs libuv libseccomp libcrypto) -lpthread \
    -o "$BUILD/bash_bench_argv"
DRUN_BUILD="$BUILD" exec node tools/bench/bash_bench.mjs "${1:-30}"
