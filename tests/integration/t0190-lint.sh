#!/bin/sh
# t0190-lint.sh - every rule of tools/lint.sh fails on a planted violation. Copies the
# tree (the files git knows of) to a temporary directory, checks lint passes there, then
# plants one violation at a time and checks lint exits 1 with a line naming it; a few
# allowed cases (a new layer including a lower one, a header in its own layer) must pass.
# Only the formatting plants use the whole copy; the rest a small tree (see below).
. "$(dirname "$0")/../lib.sh"

tree="$T_TMP/tree"
mkdir -p "$tree"
(cd "$T_TOP" && git ls-files --cached --others --exclude-standard -z -- src tools Makefile \
    .clang-format tests/unit | xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\n" "$f"; done' sh |
    tar -cf - -T -) | (cd "$tree" && tar -xf -)
git -C "$tree" init -q

# lint_run: runs the copy's lint; sets $out and $rc.
lint_run() {
    out=$(sh "$tree/tools/lint.sh" 2>&1)
    rc=$?
}

# plant DESC PATH CONTENT EXPECT: with PATH holding CONTENT, lint exits 1 and prints a line
# containing EXPECT (or, with EXPECT "ok", passes). PATH is removed again afterwards.
plant() {
    desc=$1 path=$2 content=$3 want=$4
    dir=$(dirname "$path")
    made=""
    if [ ! -d "$tree/$dir" ]; then
        made=$dir
        mkdir -p "$tree/$dir"
    fi
    printf '%s\n' "$content" >"$tree/$path"
    lint_run
    rm -f "$tree/$path"
    [ -n "$made" ] && rm -rf "${tree:?}/$made"
    if [ "$want" = ok ]; then
        t_begin "lint passes: $desc"
        if [ "$rc" -eq 0 ] && [ "$out" = "lint: ok" ]; then t_ok; else t_fail "exit $rc: $out"; fi
        return
    fi
    t_begin "lint fails on $desc"
    if [ "$rc" -eq 1 ] && printf '%s\n' "$out" | grep -qF -- "$want"; then
        t_ok
    else
        t_fail "exit $rc, wanted a line with \"$want\"; lint printed: $out"
    fi
}

t_begin "lint passes on the copied tree"
lint_run
if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -qx 'lint: ok'; then
    t_ok
else
    t_fail "exit $rc: $out"
    t_done
fi

# Formatting.
if command -v clang-format >/dev/null 2>&1; then
    plant "an unformatted file" src/util/zz_lint.c 'int  zz_lint( void ){return 0;}' \
        "lint: 'src/util/zz_lint.c' is not formatted"
    plant "an unformatted unit test" tests/unit/test_zz_lint.c 'int  zz_lint( void ){return 0;}' \
        "lint: 'tests/unit/test_zz_lint.c' is not formatted"
else
    t_begin "lint fails on an unformatted file"
    t_skip "clang-format is not installed"
fi

# The other rules look at one file at a time: plant them in a small tree (lint, the
# Makefile, .clang-format and one real module), where each lint run takes a fraction of
# the full tree's clang-format pass.
small="$T_TMP/small"
mkdir -p "$small/src/util" "$small/tools"
cp "$tree/Makefile" "$tree/.clang-format" "$small/"
cp "$tree/tools/lint.sh" "$small/tools/"
cp "$tree/src/util/buf.c" "$tree/src/util/buf.h" "$small/src/util/"
git -C "$small" init -q
tree=$small
t_begin "lint passes on the small tree"
lint_run
if [ "$rc" -eq 0 ] && [ "$out" = "lint: ok" ]; then t_ok; else t_fail "exit $rc: $out"; fi

# Banned calls.
fn='void zz_lint(char *b);

void
zz_lint(char *b)
{
    CALL;
}'
for call in 'sprintf(b, "x")' 'strcpy(b, "x")' 'system("true")' 'atoi(b)'; do
    plant "banned call $call" src/store/zz_lint.c "$(printf '%s\n' "$fn" | sed "s|CALL|$call|")" \
        "lint: banned call in 'src/store/zz_lint.c':6:"
done
plant "banned call with lint: allow" src/store/zz_lint.c \
    "$(printf '%s\n' "$fn" | sed 's|CALL;|system("true"); /* lint: allow */|')" ok
plant "vsnprintf outside util/buf,err,log" src/util/zz_lint.c \
    "$(printf '%s\n' "$fn" | sed 's|CALL|vsnprintf(b, 1, "x", NULL)|')" \
    "lint: vsnprintf outside util/buf,err,log in 'src/util/zz_lint.c':6:"
plant "cJSON_GetObjectItem" src/tools/zz_lint.c \
    "$(printf '%s\n' "$fn" | sed 's|CALL|cJSON_GetObjectItem(NULL, b)|')" \
    "lint: use cJSON_GetObjectItemCaseSensitive / cJSON_ParseWithLength in 'src/tools/zz_lint.c':6:"
plant "cJSON_Parse" src/mcp/zz_lint.c "$(printf '%s\n' "$fn" | sed 's|CALL|cJSON_Parse(b)|')" \
    "lint: use cJSON_GetObjectItemCaseSensitive / cJSON_ParseWithLength in 'src/mcp/zz_lint.c':6:"

# Layers: includes point down only, in the old layers and the new ones.
plant "store including session" src/store/zz_lint.c '#include "session/session.h"' \
    "lint: 'src/store/zz_lint.c' (store) includes a header from 'session', a layer above it"
plant "util including store through ../" src/util/zz_lint.c '#include "../store/store.h"' \
    "lint: 'src/util/zz_lint.c' (util) includes a header from 'store', a layer above it"
plant "sandbox including tools" src/sandbox/zz_lint.h '#include "tools/tools.h"' \
    "lint: 'src/sandbox/zz_lint.h' (sandbox) includes a header from 'tools', a layer above it"
plant "host including session" src/host/zz_lint.c '#include "session/session.h"' \
    "lint: 'src/host/zz_lint.c' (host) includes a header from 'session', a layer above it"
plant "egress including snapfile" src/egress/zz_lint.c '#include "snapfile/snapfile.h"' \
    "lint: 'src/egress/zz_lint.c' (egress) includes a header from 'snapfile', a layer above it"
plant "snapfile including tools" src/snapfile/zz_lint.c '#include "tools/tools.h"' \
    "lint: 'src/snapfile/zz_lint.c' (snapfile) includes a header from 'tools', a layer above it"
plant "store including host" src/store/zz_lint.c '#include "host/host.h"' \
    "lint: 'src/store/zz_lint.c' (store) includes a header from 'host', a layer above it"
plant "a header from a folder that is no layer" src/tools/zz_lint.c '#include "zzz/x.h"' \
    "lint: 'src/tools/zz_lint.c' (tools) includes a header from 'zzz', a layer above it"
plant "a file in a folder that is no layer" src/zzz/zz_lint.c '#include "util/buf.h"' \
    "lint: 'src/zzz/zz_lint.c' is in src/zzz/, which is not a layer"
plant "host including store and util" src/host/zz_lint.c '#include "store/store.h"
#include "util/buf.h"' ok
plant "snapfile including session and host" src/snapfile/zz_lint.c '#include "host/host.h"
#include "session/session.h"' ok

# Third-party headers stay in their layers.
plant "<cjson/cJSON.h> in store" src/store/zz_lint.c '#include <cjson/cJSON.h>' \
    "lint: 'src/store/zz_lint.c' includes <cjson/cJSON.h>, which belongs to: mcp tools snapfile cmd"
plant "<cJSON.h> in session" src/session/zz_lint.c '#include <cJSON.h>' \
    "lint: 'src/session/zz_lint.c' includes <cJSON.h>, which belongs to: mcp tools snapfile cmd"
plant "<sqlite3.h> in workspace" src/workspace/zz_lint.c '#include <sqlite3.h>' \
    "lint: 'src/workspace/zz_lint.c' includes <sqlite3.h>, which belongs to: store cmd"
plant "<zstd.h> in tools" src/tools/zz_lint.c '#include <zstd.h>' \
    "lint: 'src/tools/zz_lint.c' includes <zstd.h>, which belongs to: store"
plant "<curl/curl.h> in session" src/session/zz_lint.c '#include <curl/curl.h>' \
    "lint: 'src/session/zz_lint.c' includes <curl/curl.h>, which belongs to: fetch"
plant "<uv.h> in store" src/store/zz_lint.c '#  include <uv.h>' \
    "lint: 'src/store/zz_lint.c' includes <uv.h>, which belongs to: mcp sandbox session fetch egress"
plant "<cjson/cJSON.h> in snapfile" src/snapfile/zz_lint.c '#include <cjson/cJSON.h>' ok
plant "<uv.h> in egress" src/egress/zz_lint.c '#include <uv.h>' ok

# The Makefile compiles every layer.
cp "$tree/Makefile" "$T_TMP/Makefile.orig"
sed -i -E 's/^(LAYERS[[:space:]]*:=.*) host /\1 /' "$tree/Makefile"
t_begin "lint fails when a layer is missing from the Makefile's LAYERS"
lint_run
if [ "$rc" -eq 1 ] && printf '%s\n' "$out" | grep -qF "lint: layer 'host' is missing from LAYERS in the Makefile"; then
    t_ok
else
    t_fail "exit $rc: $out"
fi
cp "$T_TMP/Makefile.orig" "$tree/Makefile"

t_begin "lint passes again once every plant is gone"
lint_run
if [ "$rc" -eq 0 ] && [ "$out" = "lint: ok" ]; then t_ok; else t_fail "exit $rc: $out"; fi
t_done
