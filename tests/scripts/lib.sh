# lib.sh - shared shell helpers for the script suites (adversary.sh, soak.sh,
# load_smoke.sh) and tools/bench-net.sh.  Sourced, not run: it is not
# executable, so tools/run-tests.sh skips it.  Defines functions only; a
# suite calls suite_init to get $TMP, the counters and the cleanup traps.
# POSIX sh, safe under `set -u`.

# free_port N: the first port >= N nobody listens on.
free_port() {
    p=$1
    while ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; do p=$((p + 1)); done
    echo "$p"
}

# wait_port PID PORT: the process is alive and listening on PORT, within 10 s.
wait_port() {
    i=0
    while [ $i -lt 100 ]; do
        kill -0 "$1" 2>/dev/null || return 1
        ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
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

# need_built NAME...: each $BUILD/NAME must be executable, else fail the suite.
need_built() {
    for b in "$@"; do
        if [ ! -x "$BUILD/$b" ]; then
            bad "$BUILD/$b not built"
            finish
        fi
    done
}

# start_emberd FLAGS...: emberd on 127.0.0.1, a kernel-chosen port, no HTTP
# listener (so the one listening port is the thin-client one), output in
# $TMP/emberd.log.  Sets PID and PORT (found with ss within 10 s); on failure
# fails the suite with the log.
start_emberd() {
    "$BUILD/emberd" --host 127.0.0.1 --port 0 --http false "$@" >"$TMP/emberd.log" 2>&1 &
    PID=$!
    PORT=
    i=0
    while [ $i -lt 100 ] && [ -z "$PORT" ]; do
        kill -0 "$PID" 2>/dev/null || break
        PORT=$(ss -Hltnp 2>/dev/null | grep "pid=$PID," | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' | head -1)
        [ -z "$PORT" ] && sleep 0.1
        i=$((i + 1))
    done
    if [ -z "$PORT" ]; then
        bad "emberd did not start"
        cat "$TMP/emberd.log"
        finish
    fi
}

# add_driver_result OUT ERR ERRLINES NAME RC: show a stress driver's non-ok
# lines and the first ERRLINES of its stderr, and add its "N passed, N failed"
# line to the counters (a missing line is a failure).
add_driver_result() {
    grep -v '^ok  ' "$1" | grep -Ev '^[0-9]+ passed, [0-9]+ failed'
    head -"$3" "$2"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -n "$line" ]; then
        PASS=$((PASS + $(echo "$line" | cut -d' ' -f1)))
        FAIL=$((FAIL + $(echo "$line" | cut -d' ' -f3)))
    else
        bad "$4 printed no summary (exit $5)"
    fi
}

# stop_emberd_checked WHEN: SIGTERM; emberd must still be alive ("died
# WHEN" otherwise), exit 0, and its log must hold no sanitizer report.
stop_emberd_checked() {
    if kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID"
        wait "$PID"
        st=$?
        PID=
        [ $st -eq 0 ] && ok "emberd exits cleanly on SIGTERM" || bad "emberd exit status $st on SIGTERM"
    else
        wait "$PID"
        bad "emberd died $1 (status $?)"
        PID=
    fi
    if grep -Eq 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$TMP/emberd.log"; then
        bad "sanitizer report in emberd's output:"
        grep -E -A30 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$TMP/emberd.log" | head -80
    else
        ok "no sanitizer report in emberd's output"
    fi
}
