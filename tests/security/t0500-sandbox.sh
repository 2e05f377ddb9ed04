#!/bin/sh
# t0500-sandbox.sh - the sandbox attack suite (build/tests/test_sandbox: canary env, key,
# unix socket, home file, writes outside /workspace, survivors, fork bomb, TIOCSTI,
# /tmp and /dev/shm caps, long commands, 100 MiB of output, network, CapEff) run as the
# current user and, when that is root, again as an unprivileged user (nobody), because
# the kernel treats uid 0 differently (RLIMIT_NPROC exemption, cgroup access).
. "$(dirname "$0")/../lib.sh"

bin="$BUILD/tests/test_sandbox"
if [ ! -x "$bin" ]; then
    t_begin "sandbox suite"
    t_skip "'$bin' is not built; run 'make'"
    t_done
fi
if ! command -v bwrap >/dev/null 2>&1 && [ ! -x /usr/bin/bwrap ]; then
    t_begin "sandbox suite"
    t_skip "bwrap is not installed ('apt-get install bubblewrap')"
    t_done
fi

# run_pass LABEL CMD...: runs the unit binary and turns its lines into ours.
run_pass() {
    label=$1
    shift
    out="$T_TMP/$label.log"
    "$@" >"$out" 2>&1
    while IFS= read -r line; do
        case $line in
        "ok   "*) t_begin "$label: ${line#ok   test_sandbox }"; t_ok ;;
        "FAIL "*) t_begin "$label: ${line#FAIL test_sandbox }"; t_fail "see below" ;;
        "skip "*) t_begin "$label: ${line#skip test_sandbox }"; t_skip "see below" ;;
        esac
    done <"$out"
    grep -E '^    ' "$out" | head -40
}

# Each pass runs twice: cold (bwrap started per command) and warm (every command in a
# prepared sandbox released through --block-fd, DRUN_SANDBOX_WARM=always).
me=$(id -un)
for warm in off always; do
    run_pass "$me-$warm" env DRUN_SANDBOX_WARM=$warm "$bin"
done

if [ "$(id -u)" -eq 0 ]; then
    if ! command -v setpriv >/dev/null 2>&1; then
        t_begin "unprivileged pass"
        t_skip "setpriv (util-linux) is not installed"
        t_done
    fi
    # A world-writable scratch dir for the unprivileged pass; the binary must be readable.
    utmp="$T_TMP/nobody"
    mkdir -p "$utmp" && chmod 1777 "$T_TMP" "$utmp"
    if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$bin"; then
        t_begin "unprivileged pass"
        t_skip "user nobody cannot execute '$bin' (check the directory permissions)"
        t_done
    fi
    for warm in off always; do
        run_pass "nobody-$warm" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$utmp" \
            TMPDIR="$utmp" DRUN_SANDBOX_WARM=$warm setpriv --reuid=65534 --regid=65534 \
            --clear-groups "$bin"
    done
fi
t_done
