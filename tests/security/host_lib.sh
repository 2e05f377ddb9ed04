# host_lib.sh - runs a host-door attack script (tests/security/t053*-host-*.sh) in
# every pass the host boundary is tested in: as the current user and, when that is root,
# as user nobody; each with every command cold and with every command in a prepared
# (warm) sandbox. Sourced after tests/lib.sh. The script, $T_TMP/attack.mjs, imports
# host_prelude.mjs (T_PRELUDE) and prints "ok   NAME" / "FAIL NAME: why" lines, then
# "done N". host_pass_wrap, if the test defines it, wraps each pass's command (it gets
# the pass directory and the command) to set up mounts and the like.
mcp="$BUILD/drun-mcp"
lib="$T_TOP/tests/client/lib.mjs"
prelude="$T_TOP/tests/security/host_prelude.mjs"

host_need() {
    if [ ! -x "$mcp" ]; then
        t_begin "$1"
        t_skip "'$mcp' is not built; run 'make'"
        t_done
    fi
    if ! command -v node >/dev/null 2>&1; then
        t_begin "$1"
        t_skip "node is not installed"
        t_done
    fi
    if ! bwrap --unshare-all --ro-bind / / true 2>/dev/null; then
        t_begin "$1"
        t_skip "bwrap cannot create a sandbox here; run 'drun-mcp doctor'"
        t_done
    fi
}

# host_pass LABEL DIR WARM [PREFIX...]
host_pass() {
    label=$1
    dir=$2
    warm=$3
    shift 3
    out="$T_TMP/$label.log"
    if command -v host_pass_wrap >/dev/null 2>&1; then
        host_pass_wrap "$dir" "$@" env DRUN_SANDBOX_WARM="$warm" T_LIB="$lib" T_MCP="$mcp" \
            T_DIR="$dir" T_PRELUDE="$prelude" T_WARM="$warm" node "$T_TMP/attack.mjs" \
            >"$out" 2>&1
    else
        "$@" env DRUN_SANDBOX_WARM="$warm" T_LIB="$lib" T_MCP="$mcp" T_DIR="$dir" \
            T_PRELUDE="$prelude" T_WARM="$warm" node "$T_TMP/attack.mjs" >"$out" 2>&1
    fi
    rc=$?
    while IFS= read -r line; do
        case $line in
        "ok   "*) t_begin "$label: ${line#ok   }"; t_ok ;;
        "FAIL "*) t_begin "$label: ${line#FAIL }"; t_fail "see above" ;;
        "skip "*) t_begin "$label: ${line#skip }"; t_skip "see above" ;;
        esac
    done <"$out"
    if ! grep -q '^done ' "$out"; then
        t_begin "$label: the attack script ran to its end"
        t_fail "exit $rc: $(tail -5 "$out")"
    fi
}

host_run_passes() {
    chmod 711 "$T_TMP" # a root daemon's sandbox user passes through to its workspaces
    for warm in off always; do
        mkdir -p "$T_TMP/me-$warm" && chmod 711 "$T_TMP/me-$warm"
        host_pass "$(id -un)-$warm" "$T_TMP/me-$warm" "$warm"
    done
    if [ "$(id -u)" -ne 0 ]; then
        return 0
    fi
    if ! command -v setpriv >/dev/null 2>&1; then
        t_begin "unprivileged pass"
        t_skip "setpriv (util-linux) is not installed"
        return 0
    fi
    chmod 755 "$T_TMP" && chmod 644 "$T_TMP/attack.mjs"
    for warm in off always; do
        mkdir -p "$T_TMP/nobody-$warm" && chown 65534:65534 "$T_TMP/nobody-$warm" &&
            chmod 700 "$T_TMP/nobody-$warm"
    done
    if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$lib" -a -r "$prelude" \
        -a -x "$mcp"; then
        t_begin "unprivileged pass"
        t_skip "user nobody cannot read '$lib' or run '$mcp' (check the directory permissions)"
        return 0
    fi
    for warm in off always; do
        HOST_UNPRIVILEGED=1 host_pass "nobody-$warm" "$T_TMP/nobody-$warm" "$warm" \
            env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$T_TMP/nobody-$warm" \
            setpriv --reuid=65534 --regid=65534 --clear-groups
    done
}
