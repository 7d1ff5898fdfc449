# lib.sh - shared shell helpers for the script suites (adversary.sh, soak.sh,
# cli.sh, ops.sh, load_smoke.sh, harness.sh), tests/node/run.sh and
# tools/bench-net.sh.  Sourced, not run: it is not executable, so
# tools/run-tests.sh skips it.  Defines functions only; a suite calls
# suite_init to get $TMP, the counters and the cleanup traps.
# POSIX sh, safe under `set -u`.
#
# Waiting: every helper below waits for a condition (its own process
# listening, a line in its own fresh log, its own process gone) and gives up
# only when the process it waits for has died or EMBER_WAIT_SECONDS (default
# 300) have passed.  The bound is long on purpose: a 2-core machine shared
# with other builds, under ASan, can take tens of seconds to start emberd,
# and a wait that ends early is a false failure.

# ---- processes ---------------------------------------------------------------

# wait_seconds: the bound every wait here uses.
wait_seconds() { echo "${EMBER_WAIT_SECONDS:-300}"; }

# alive PID: PID exists and is not a zombie (`kill -0` succeeds on a child
# that has exited but was not reaped yet, so it cannot tell a dead emberd).
alive() {
    [ -r "/proc/$1/stat" ] || return 1
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# pid_ports PID: the TCP ports PID itself listens on, one a line (ss -p names
# the owning process of each listening socket).
pid_ports() {
    ss -Hltnp 2>/dev/null | grep "pid=$1," | awk '{ n = split($4, a, ":"); print a[n] }'
}

# free_port N: the first port >= N nobody listens on.  Another process may
# take it before the caller binds: callers check who listens (wait_port) and,
# where they can, bind port 0 instead.
free_port() {
    p=$1
    while ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; do p=$((p + 1)); done
    echo "$p"
}

# wait_port PID PORT: PID itself listens on PORT (not some other process that
# took the port).  Fails as soon as PID has died, or after wait_seconds.
wait_port() {
    end=$(($(date +%s) + $(wait_seconds)))
    while [ "$(date +%s)" -lt "$end" ]; do
        alive "$1" || return 1
        pid_ports "$1" | grep -qx "$2" && return 0
        sleep 0.1
    done
    return 1
}

# wait_gone PID: PID has exited (still to be reaped); fails after wait_seconds.
wait_gone() {
    end=$(($(date +%s) + $(wait_seconds)))
    while alive "$1"; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.1
    done
    return 0
}

# ---- emberd ----------------------------------------------------------------------

# emberd_spawn ARGS...: ${EMBERD:-$BUILD/emberd} on 127.0.0.1, a
# kernel-chosen port, no HTTP listener, in the background, its output in a
# fresh file $LOG (made here, before the fork: no line of an earlier start
# can be read from it).  Waits until that very process listens (ss names the
# owner, so any log level works).  Sets PID, PORT, LOG; returns 1 (PORT
# empty, PID still set if it runs) when emberd exits first or the wait ends.
emberd_spawn() {
    LOG=$(mktemp "${TMP:-/tmp}/emberd.XXXXXX")
    "${EMBERD:-$BUILD/emberd}" --host 127.0.0.1 --port 0 --http false "$@" >"$LOG" 2>&1 &
    PID=$!
    PORT=
    end=$(($(date +%s) + $(wait_seconds)))
    while [ "$(date +%s)" -lt "$end" ]; do
        alive "$PID" || return 1
        PORT=$(pid_ports "$PID" | head -1)
        [ -n "$PORT" ] && return 0
        sleep 0.1
    done
    return 1
}

# emberd_spawn_http ARGS...: like emberd_spawn, with the HTTP endpoint on a
# kernel-chosen port too; both ports are read from this start's own fresh
# $LOG ("metrics on ..." comes before "listening on ...", so the INFO log
# level is needed).  Sets PID, PORT, HTTP, LOG.
emberd_spawn_http() {
    LOG=$(mktemp "${TMP:-/tmp}/emberd.XXXXXX")
    "${EMBERD:-$BUILD/emberd}" --host 127.0.0.1 --port 0 --http-port 0 "$@" >"$LOG" 2>&1 &
    PID=$!
    PORT= HTTP=
    end=$(($(date +%s) + $(wait_seconds)))
    while [ "$(date +%s)" -lt "$end" ]; do
        PORT=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$LOG" | head -1)
        HTTP=$(sed -n 's|.*metrics on http://[^ ]*:\([0-9][0-9]*\)/metrics.*|\1|p' "$LOG" | head -1)
        [ -n "$PORT" ] && return 0
        alive "$PID" || return 1
        sleep 0.1
    done
    return 1
}

# emberd_stop: SIGTERM to $PID, wait (wait_seconds, then SIGKILL) and reap;
# returns emberd's exit status (137 if it had to be killed).  PID is cleared.
emberd_stop() {
    [ -n "$PID" ] || return 0
    kill -TERM "$PID" 2>/dev/null
    if ! wait_gone "$PID"; then
        echo "emberd $PID still running $(wait_seconds) s after SIGTERM: SIGKILL"
        kill -KILL "$PID" 2>/dev/null
    fi
    wait "$PID"
    st=$?
    PID=
    return $st
}

# ---- suites that run one emberd (adversary.sh, soak.sh) --------------------

# suite_init: PASS/FAIL counters, a temp dir $TMP, and traps that kill the
# emberd in $PID and remove $TMP on any exit.
suite_init() {
    TMP=$(mktemp -d)
    PID=
    PASS=0
    FAIL=0
    trap suite_cleanup EXIT
    trap 'suite_cleanup; exit 1' INT TERM
}

suite_cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    PID=
    rm -rf "$TMP"
}

ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; }
finish() { echo "$PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; exit $?; }

# skip WHY: a check that cannot run here.  Outside CI it is only reported;
# with CI=true a skipped check is a failure, so a CI machine that lacks a
# tool never passes by running less.
skip() {
    if [ "${CI:-}" = true ]; then
        bad "skipped under CI=true: $1"
    else
        echo "skip $1"
    fi
}

# need_built NAME...: each $BUILD/NAME must be executable, else fail the suite.
need_built() {
    for b in "$@"; do
        if [ ! -x "$BUILD/$b" ]; then
            bad "$BUILD/$b not built"
            finish
        fi
    done
}

# start_emberd FLAGS...: emberd_spawn, failing the whole suite (with the log)
# when emberd does not come up.  Sets PID, PORT, LOG.
start_emberd() {
    if ! emberd_spawn "$@"; then
        bad "emberd did not start"
        cat "$LOG"
        finish
    fi
}

# add_driver_result OUT ERR ERRLINES NAME RC: show a stress driver's non-ok
# lines and the first ERRLINES of its stderr, and add its "N passed, N failed"
# line to the counters.  A missing line is a failure, and so is a non-zero
# exit status RC behind a summary that says 0 failed: a driver that crashed,
# was killed or bailed out after printing its summary must not pass.
add_driver_result() {
    grep -v '^ok  ' "$1" | grep -Ev '^[0-9]+ passed, [0-9]+ failed'
    head -"$3" "$2"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -n "$line" ]; then
        nf=$(echo "$line" | cut -d' ' -f3)
        PASS=$((PASS + $(echo "$line" | cut -d' ' -f1)))
        FAIL=$((FAIL + nf))
        if [ "$5" -ne 0 ] && [ "$nf" -eq 0 ]; then
            bad "$4 exited with status $5 after reporting 0 failures"
        fi
    else
        bad "$4 printed no summary (exit $5)"
    fi
}

# stop_emberd_checked WHEN: SIGTERM; emberd must still be alive ("died
# WHEN" otherwise) and exit 0 - one check, counted either way - and its log
# must hold no sanitizer report.  That second check is counted as passed
# only under a sanitizer build (EM_SANITIZER): elsewhere nothing writes such
# a report, so it could not fail (it still fails if one appears).
stop_emberd_checked() {
    if alive "$PID"; then
        emberd_stop
        st=$?
        [ $st -eq 0 ] && ok "emberd exits cleanly on SIGTERM" || bad "emberd exit status $st on SIGTERM"
    else
        wait "$PID"
        bad "emberd died $1 (status $?)"
        PID=
    fi
    if grep -Eq 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$LOG"; then
        bad "sanitizer report in emberd's output:"
        grep -E -A30 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$LOG" | head -80
    elif [ -n "${EM_SANITIZER:-}" ]; then
        ok "no $EM_SANITIZER report in emberd's output"
    fi
}
