#!/bin/sh
# Installs everything drun's build and tests need, from the system's package manager.
# Debian/Ubuntu: apt-get, non-interactive and idempotent (safe to run again).
# macOS: prints the Homebrew line instead of running it.
# Nothing is vendored: every library comes from the system.
set -eu

DEBS="build-essential pkg-config clang clang-format git ca-certificates
      sqlite3 libsqlite3-dev zstd libzstd-dev libcjson-dev libuv1-dev
      libcurl4-openssl-dev libssl-dev libpcre2-dev libgit2-dev libtomlplusplus-dev libxml2-dev
      libseccomp-dev bubblewrap keyutils iproute2 python3 procps poppler-utils"

case "$(uname -s)" in
Darwin)
    echo "on macOS, install the dependencies with:"
    echo "  brew install pkg-config sqlite zstd cjson libuv curl openssl@3 pcre2 libgit2 tomlplusplus libxml2 node poppler"
    exit 0
    ;;
esac

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: no apt-get here; install the equivalents of: $DEBS" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

missing=""
for p in $DEBS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
# Node.js (18 or newer) and npm run the MCP SDK test client. A machine that already
# has a node with npm (for example from NodeSource) keeps it.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    missing="$missing nodejs npm"
fi

if [ -n "$missing" ]; then
    echo "install-deps: installing:$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
else
    echo "install-deps: everything is installed"
fi
