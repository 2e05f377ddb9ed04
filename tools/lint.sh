#!/bin/sh
# drun's lint: formatting, banned calls, the layer rule (includes point down only) and
# third-party headers kept in their layers. Exits 1 with one line per problem, each
# naming the file. tests/integration/t0190-lint.sh plants one violation of every rule in a
# copy of the tree and checks that lint names it.
set -u
cd "$(dirname "$0")/.."
bad=0

# The layers of DESIGN.md, one line each: the folder under src/ and its rank. A file may
# include headers of its own rank or below; a file in a folder not listed here fails.
# Adding a layer is one line here and its folder in the Makefile's LAYERS.
LAYERS='
util      0
store     1
workspace 2
sandbox   2
host      2
fetch     2
egress    2
policy    2
session   3
snapfile  3
tools     4
mcp       5
cmd       6
'

# Third-party headers and the only layers that may include them, one line each: an
# extended regex for the path inside <...> (any leading directory is allowed too, so
# <cJSON.h> and <cjson/cJSON.h> both match cJSON\.h), then the layers.
HEADERS='
sqlite3(ext)?\.h  store cmd
zstd\.h           store
curl/curl\.h      fetch
uv\.h             mcp sandbox session fetch egress
cJSON\.h          mcp tools snapfile cmd
libxml/[A-Za-z0-9_]+\.h  fetch
openssl/[a-z0-9_]+\.h    util tools
'

# 0. Every layer but cmd is compiled into libdrun.a: it must be in the Makefile's LAYERS.
mk=$(sed -nE 's/^LAYERS[[:space:]]*:=[[:space:]]*//p' Makefile)
for l in $(echo "$LAYERS" | awk 'NF == 2 && $1 != "cmd" { print $1 }'); do
    case " $mk " in
    *" $l "*) ;;
    *)
        echo "lint: layer '$l' is missing from LAYERS in the Makefile"
        bad=1
        ;;
    esac
done

src=$(git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'src/*.cpp' |
    while read -r f; do [ -f "$f" ] && echo "$f"; done)
csrc=$(echo "$src" | grep -E '\.c$')

# 1. Formatting: every C/C++ source matches .clang-format (one clang-format for all files).
if command -v clang-format >/dev/null 2>&1; then
    fmt=$(git ls-files --cached --others --exclude-standard 'tests/unit/*.c' |
        while read -r f; do [ -f "$f" ] && echo "$f"; done)
    # shellcheck disable=SC2086
    clang-format --dry-run -Werror $src $fmt 2>&1 |
        sed -nE 's/^(.+):[0-9]+:[0-9]+: error: code should be clang-formatted.*/\1/p' | sort -u |
        sed "s|.*|lint: '&' is not formatted; run 'make format'|" | grep . && bad=1
else
    echo "lint: clang-format not found; formatting not checked"
fi

[ -n "$src" ] || {
    [ $bad -eq 0 ] && echo "lint: ok"
    exit $bad
}

# 2. Banned calls: unbounded string functions and shell-spawning helpers.
banned='\b(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets|system|popen|tmpnam|mktemp)[[:space:]]*\('
# shellcheck disable=SC2086
grep -nHE "$banned" $src | grep -v 'lint: allow' |
    sed -E "s|^([^:]+):|lint: banned call in '\1':|" | grep . && bad=1
# vsnprintf only in the buffer, error and log modules.
rest=$(echo "$csrc" | grep -vE '^src/util/(buf|err|log)\.c$')
if [ -n "$rest" ]; then
    # shellcheck disable=SC2086
    grep -nHE '\bvsnprintf[[:space:]]*\(' $rest |
        sed -E "s|^([^:]+):|lint: vsnprintf outside util/buf,err,log in '\1':|" | grep . && bad=1
fi
# cJSON keys are case-sensitive in JSON: never the case-insensitive lookup.
if [ -n "$csrc" ]; then
    # shellcheck disable=SC2086
    grep -nHE '\bcJSON_GetObjectItem[[:space:]]*\(|\bcJSON_Parse[[:space:]]*\(' $csrc |
        sed -E "s|^([^:]+):|lint: use cJSON_GetObjectItemCaseSensitive / cJSON_ParseWithLength in '\1':|" |
        grep . && bad=1
fi

# 3. Layers: every file is in a layer and includes headers from its own layer or those
# below it ("store/store.h"; a "../" prefix is seen through). 4. Third-party headers stay
# in their layers.
# shellcheck disable=SC2086
awk -v layers="$LAYERS" -v headers="$HEADERS" '
BEGIN {
    n = split(layers, l, "\n")
    for (i = 1; i <= n; i++) {
        if (split(l[i], f, " ") == 2) {
            rank[f[1]] = f[2] + 0
        }
    }
    n = split(headers, l, "\n")
    for (i = 1; i <= n; i++) {
        m = split(l[i], f, " ")
        if (m < 2) {
            continue
        }
        nh++
        hre[nh] = "^([^>]*/)?" f[1] "$"
        who[nh] = ""
        for (j = 2; j <= m; j++) {
            who[nh] = who[nh] (j > 2 ? " " : "") f[j]
        }
    }
}
FNR == 1 {
    split(FILENAME, p, "/")
    layer = p[2]
    known = layer in rank
    if (!known) {
        print "lint: '\''" FILENAME "'\'' is in src/" layer "/, which is not a layer; add it to LAYERS in tools/lint.sh (and the Makefile)"
        bad = 1
    }
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
    s = $0
    sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", s)
    sub(/".*/, "", s)
    while (substr(s, 1, 3) == "../") {
        s = substr(s, 4)
    }
    if (known && index(s, "/") > 0) {
        inc = substr(s, 1, index(s, "/") - 1)
        if (!(inc in rank) || rank[inc] > rank[layer]) {
            print "lint: '\''" FILENAME "'\'' (" layer ") includes a header from '\''" inc "'\'', a layer above it"
            bad = 1
        }
    }
}
/^[ \t]*#[ \t]*include[ \t]*</ {
    s = $0
    sub(/^[ \t]*#[ \t]*include[ \t]*</, "", s)
    sub(/>.*/, "", s)
    for (k = 1; k <= nh; k++) {
        if (s ~ hre[k] && index(" " who[k] " ", " " layer " ") == 0) {
            print "lint: '\''" FILENAME "'\'' includes <" s ">, which belongs to: " who[k]
            bad = 1
        }
    }
}
END { exit bad }
' $src || bad=1

if [ $bad -ne 0 ]; then
    exit 1
fi
echo "lint: ok"
