#!/bin/sh
# harness.sh - tests of the test helpers themselves (lib.sh): a start helper
# must report the port of the process it started, never one an earlier start
# wrote down, however late the new process gets scheduled; wait_port must
# wait for its own process, not for whoever listens on the port; a process
# that dies at start is reported at once.  Last line: "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${EMBER_BUILD:-build}
. tests/scripts/lib.sh
suite_init
need_built emberd ember-cli

# ---- every start writes a fresh log ------------------------------------------
if emberd_spawn; then
    log1=$LOG port1=$PORT
    emberd_stop
    if emberd_spawn; then
        if [ "$LOG" != "$log1" ] && ! grep -q ":$port1 " "$LOG" &&
           pid_ports "$PID" | grep -qx "$PORT"; then
            ok "second start: own log, own port ($port1 then $PORT)"
        else
            bad "second start: log $LOG (first $log1), port $PORT (first $port1)"
        fi
        emberd_stop
    else
        bad "second emberd did not start: $(cat "$LOG")"
    fi
else
    bad "emberd did not start: $(cat "$LOG")"
fi

# ---- wait_port waits for its own process ---------------------------------------
# Another process listens on the port; the one waited for exits at once (an
# emberd that lost the port).  The old wait_port took `kill -0` of the
# unreaped child and any listener on the port for success.
if emberd_spawn; then
    other=$PID otherport=$PORT
    sh -c 'exit 0' &
    dead=$!
    if wait_port "$dead" "$otherport"; then
        bad "wait_port: took another process's listener on $otherport for its dead child's"
    else
        ok "wait_port: a dead child is not listening, whoever holds the port"
    fi
    wait "$dead"
    if wait_port "$other" "$otherport"; then
        ok "wait_port: the listening process itself is found"
    else
        bad "wait_port: emberd $other on $otherport not found"
    fi
    PID=$other
    emberd_stop
fi

# ---- a start that fails is reported, with its status ---------------------------
printf '#!/bin/sh\necho "stand-in: cannot start" >&2\nexit 3\n' >"$TMP/fail-emberd"
chmod +x "$TMP/fail-emberd"
if EMBERD=$TMP/fail-emberd emberd_spawn; then
    bad "emberd_spawn: a stand-in that exits at once reported port $PORT"
else
    wait "$PID"
    st=$?
    if [ $st -eq 3 ] && grep -q 'cannot start' "$LOG"; then
        ok "emberd_spawn: an emberd that exits at start is reported (status 3, log kept)"
    else
        bad "emberd_spawn: stand-in status $st, log: $(cat "$LOG")"
    fi
fi
PID=

# ---- the race itself: the started process runs late ----------------------------
# On a busy machine the background child of a start helper may run only after
# the helper has begun to look for its port.  strace makes that happen every
# time: each process's first rt_sigaction (for the child of `cmd &`, its first
# system call after the fork, before it opens its output file) is delayed by
# 1 s.  cli.sh starts emberd twice; with a helper that reads a log file the
# previous start wrote, its second half used the previous port (5 failures,
# "Connection refused").
if command -v strace >/dev/null 2>&1 && strace -f -qq -o /dev/null true 2>/dev/null; then
    EMBER_BUILD=$BUILD strace -f -qq -o /dev/null -e trace=rt_sigaction \
        -e inject=rt_sigaction:delay_enter=1000000:when=1 sh tests/scripts/cli.sh >"$TMP/cli.out" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$TMP/cli.out" | tail -1)
    if [ $rc -eq 0 ] && echo "$line" | grep -q ' 0 failed'; then
        ok "cli.sh with every process's start delayed by 1 s: $line"
    else
        bad "cli.sh with every process's start delayed by 1 s: exit $rc, ${line:-no summary}"
        grep -v '^ok ' "$TMP/cli.out" | head -20
    fi
else
    skip "strace missing or not permitted: cannot delay the started processes"
fi

finish
