#!/bin/sh
# drun's lint: formatting, banned calls, and the layer rule (includes point down only).
# Exits 1 with one line per problem.
set -u
cd "$(dirname "$0")/.."
bad=0

# 1. Formatting: every C/C++ source matches .clang-format.
if command -v clang-format >/dev/null 2>&1; then
    for f in $(git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'src/*.cpp' 'tests/unit/*.c'); do
        if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
            echo "lint: '$f' is not formatted; run 'make format'"
            bad=1
        fi
    done
else
    echo "lint: clang-format not found; formatting not checked"
fi

# 2. Banned calls: unbounded string functions and shell-spawning helpers.
banned='\b(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets|system|popen|tmpnam|mktemp)[[:space:]]*\('
git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'src/*.cpp' | while read -r f; do
    grep -nE "$banned" "$f" | grep -v 'lint: allow' | sed "s|^|lint: banned call in '$f':|"
done | grep . && bad=1
# vsnprintf only in the buffer, error and log modules.
git ls-files --cached --others --exclude-standard 'src/*.c' | grep -vE '^src/util/(buf|err|log)\.c$' | while read -r f; do
    grep -nE '\bvsnprintf[[:space:]]*\(' "$f" | sed "s|^|lint: vsnprintf outside util/buf,err,log in '$f':|"
done | grep . && bad=1
# cJSON keys are case-sensitive in JSON: never the case-insensitive lookup.
git ls-files --cached --others --exclude-standard 'src/*.c' | while read -r f; do
    grep -nE '\bcJSON_GetObjectItem[[:space:]]*\(|\bcJSON_Parse[[:space:]]*\(' "$f" |
        sed "s|^|lint: use cJSON_GetObjectItemCaseSensitive / cJSON_ParseWithLength in '$f':|"
done | grep . && bad=1

# 3. Layers: a file may include headers from its own layer or layers below it.
rank() {
    case $1 in
    util) echo 0 ;;
    store) echo 1 ;;
    workspace | sandbox | fetch | policy | host) echo 2 ;;
    session) echo 3 ;;
    tools) echo 4 ;;
    mcp) echo 5 ;;
    cmd) echo 6 ;;
    *) echo 99 ;;
    esac
}
for f in $(git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'src/*.cpp'); do
    layer=$(echo "$f" | cut -d/ -f2)
    mine=$(rank "$layer")
    for inc in $(sed -nE 's/^#include "([a-z]+)\/[^"]+".*/\1/p' "$f" | sort -u); do
        theirs=$(rank "$inc")
        if [ "$theirs" -gt "$mine" ]; then
            echo "lint: '$f' ($layer) includes a header from '$inc', a layer above it"
            bad=1
        fi
    done
done

# 4. Third-party headers stay in their layer.
check_header() {
    hdr=$1
    shift
    for f in $(git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'src/*.cpp'); do
        layer=$(echo "$f" | cut -d/ -f2)
        if grep -qE "^#include <$hdr>" "$f"; then
            ok=0
            for l in "$@"; do [ "$l" = "$layer" ] && ok=1; done
            if [ $ok -eq 0 ]; then
                echo "lint: '$f' includes <$hdr>, which belongs to: $*"
                bad=1
            fi
        fi
    done
}
check_header 'sqlite3(ext)?\.h' store cmd
check_header 'zstd\.h' store
check_header 'curl/curl\.h' fetch
check_header 'libxml/[A-Za-z0-9_]+\.h' fetch
check_header 'uv\.h' mcp sandbox session fetch
check_header 'cJSON\.h' mcp tools cmd
check_header 'openssl/[a-z0-9_]+\.h' util tools

if [ $bad -ne 0 ]; then
    exit 1
fi
echo "lint: ok"
