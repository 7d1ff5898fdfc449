#!/bin/sh
# harness.sh - tests of the test helpers themselves (lib.sh): a start helper
# must report the port of the process it started, never one an earlier start
# wrote down, however late the new process gets scheduled; wait_port must
# wait for its own process, not for whoever listens on the port; a process
# that dies at start is reported at once.  And the counting: a driver that
# exits non-zero after its summary fails, a check that cannot fail is not
# counted, a skip fails under CI=true.  Last line: "N passed, N failed".
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

# ---- counting: only checks that can fail ------------------------------------------
# A driver that printed "N passed, 0 failed" and then exited non-zero fails.
printf 'ok   a\nok   b\n2 passed, 0 failed\n' >"$TMP/drv.out"
: >"$TMP/drv.err"
got=$(PASS=0 FAIL=0; add_driver_result "$TMP/drv.out" "$TMP/drv.err" 0 drv 134 >/dev/null; echo "$PASS $FAIL")
[ "$got" = "2 1" ] && ok "add_driver_result: exit 134 after '0 failed' is a failure" ||
    bad "add_driver_result: exit 134 after '0 failed' gave passed/failed $got, want 2 1"
got=$(PASS=0 FAIL=0; add_driver_result "$TMP/drv.out" "$TMP/drv.err" 0 drv 0 >/dev/null; echo "$PASS $FAIL")
[ "$got" = "2 0" ] && ok "add_driver_result: exit 0 adds the driver's counts" ||
    bad "add_driver_result: exit 0 gave $got, want 2 0"

# stop_emberd_checked: the exit status is one check; "no sanitizer report"
# is counted only where a sanitizer could have written one.
if emberd_spawn; then
    # In this shell (emberd is its child), counters saved and put back.
    p0=$PASS f0=$FAIL san=${EM_SANITIZER:-}
    EM_SANITIZER=
    stop_emberd_checked "in harness" >/dev/null
    got="$((PASS - p0)) $((FAIL - f0))"
    PASS=$p0 FAIL=$f0 EM_SANITIZER=$san
    [ "$got" = "1 0" ] && ok "stop_emberd_checked: one check counted in a plain build" ||
        bad "stop_emberd_checked: a plain build counted passed/failed $got, want 1 0"
fi

# skip: reported outside CI, a failure with CI=true.
got=$(PASS=0 FAIL=0 CI=; skip "x" >/dev/null; echo "$PASS $FAIL")
got_ci=$(PASS=0 FAIL=0 CI=true; skip "x" >/dev/null; echo "$PASS $FAIL")
[ "$got" = "0 0" ] && [ "$got_ci" = "0 1" ] && ok "skip: counts nothing, fails with CI=true" ||
    bad "skip: without CI $got, with CI=true $got_ci (want 0 0 and 0 1)"

# load_smoke.sh on a machine without memcached, with CI=true: must fail, not
# pass with the memcache runs silently left out.  A PATH of links to every
# program but memcached stands in for such a machine.
if command -v memcached >/dev/null 2>&1; then
    mkdir "$TMP/bin"
    for d in /usr/local/bin /usr/bin /bin; do
        for f in "$d"/*; do
            b=${f##*/}
            [ "$b" = memcached ] || [ -e "$TMP/bin/$b" ] || ln -s "$f" "$TMP/bin/$b"
        done
    done
fi
if [ -d "$TMP/bin" ] || ! command -v memcached >/dev/null 2>&1; then
    P=$PATH
    [ -d "$TMP/bin" ] && P=$TMP/bin
    CI=true PATH=$P EMBER_BUILD=$BUILD tests/scripts/load_smoke.sh >"$TMP/ls.out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q '^FAIL .*memcached is not installed' "$TMP/ls.out"; then
        ok "load_smoke.sh without memcached, CI=true: fails ($(tail -1 "$TMP/ls.out"))"
    else
        bad "load_smoke.sh without memcached, CI=true: exit $rc, $(tail -1 "$TMP/ls.out")"
    fi
fi

# ---- the race itself: the started process runs late ----------------------------
# On a busy machine the background child of a start helper may run only after
# the helper has begun to look for its port.  strace makes that happen every
# time: each process's first rt_sigaction (for the child of `cmd &`, its first
# system call after the fork, before it opens its output file) is delayed by
# 1 s.  cli.sh starts emberd twice; with a helper that reads a log file the
# previous start wrote, its second half used the previous port (5 failures,
# "Connection refused").
if command -v strace >/dev/null 2>&1 && strace -f -qq -o /dev/null true 2>/dev/null; then
    # LeakSanitizer cannot run under ptrace: an ASan build's leak check is
    # off for this one run (the plain cli.sh run has it).
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 EMBER_BUILD=$BUILD \
        strace -f -qq -o /dev/null -e trace=rt_sigaction \
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
