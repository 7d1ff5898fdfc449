#!/bin/sh
# load_smoke.sh - `ember-bench load` end to end: its self-test, then a few
# seconds against emberd (Ignite thin protocol) and a local redis-server
# (RESP), each started here on a free loopback port and stopped by PID even
# on failure.  Checks: exit status 0, 0 errors, ops > 0, GETs that hit.
# No timing assertions.  Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
BENCH=$BUILD/ember-bench
PASS=0
FAIL=0
PIDS=
TMP=$(mktemp -d)

cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    for p in $PIDS; do wait "$p" 2>/dev/null; done
    PIDS=
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM

# free_port, wait_port, emberd_spawn (lib.sh also has ok/bad; this suite
# keeps its own)
. tests/scripts/lib.sh
ok() { PASS=$((PASS + 1)); echo "ok  $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; }

# run_load NAME ARGS...: one run with --csv; checks exit 0, errors 0, ops > 0
# and (when the mix has GETs) hits > 0.
run_load() {
    name=$1
    shift
    "$BENCH" load "$@" --csv >"$TMP/out.csv" 2>"$TMP/err.txt"
    rc=$?
    row=$(tail -1 "$TMP/out.csv")
    # columns: 10 ops, 13 hits, 16 errors (see `ember-bench load --csv`)
    ops=$(echo "$row" | cut -d, -f10)
    hits=$(echo "$row" | cut -d, -f13)
    errs=$(echo "$row" | cut -d, -f16)
    if [ $rc -eq 0 ] && [ "$errs" = 0 ] && [ "${ops:-0}" -gt 0 ] 2>/dev/null &&
       [ "${hits:-0}" -gt 0 ] 2>/dev/null; then
        ok "$name ($ops ops, $hits GET hits, 0 errors)"
    else
        bad "$name: exit $rc, ops=${ops:-?} hits=${hits:-?} errors=${errs:-?}: $(head -c 400 "$TMP/err.txt")"
    fi
}

if [ ! -x "$BENCH" ]; then
    bad "no $BENCH (build first)"
    echo "$PASS passed, $FAIL failed"
    exit 1
fi

if "$BENCH" load --self-test >"$TMP/st.txt" 2>&1; then
    ok "self-test (encoders vs wire captures, parsers, histogram)"
else
    bad "self-test: $(cat "$TMP/st.txt")"
fi

# A run against a closed port must fail loudly (exit 2), not report figures.
DEAD=$(free_port 29500)
"$BENCH" load --proto resp --port "$DEAD" --duration 1 >/dev/null 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 2 ] && grep -q "connect" "$TMP/err.txt"; then
    ok "refused connection is reported (exit 2)"
else
    bad "refused connection: exit $rc, stderr: $(cat "$TMP/err.txt")"
fi

COMMON="--connections 8 --threads 2 --keys 2000 --warmup 0.3"

# ---- emberd ----
# Port 0: emberd binds whatever port is free and emberd_spawn reads it from
# the socket that process holds (no port picked here for another run on this
# machine to take first).
if [ -x "$BUILD/emberd" ]; then
    if emberd_spawn; then
        EP=$PORT EPID=$PID
        PIDS="$PIDS $EPID"
        # shellcheck disable=SC2086
        run_load "ignite: 3 s, pipeline 4, 90% GET, string keys" --proto ignite --port "$EP" \
            $COMMON --pipeline 4 --duration 3 --pid "$EPID"
        # shellcheck disable=SC2086
        run_load "ignite: int keys, 1 KiB values, 50% GET, handshake 1.7.0" --proto ignite \
            --port "$EP" $COMMON --key-type int --value-size 1024 --mix 50 \
            --ignite-version 1.7.0 --duration 1
        # shellcheck disable=SC2086
        run_load "ignite: --ops 20000, pipeline 16" --proto ignite --port "$EP" $COMMON \
            --pipeline 16 --ops 20000
    else
        [ -n "$PID" ] && PIDS="$PIDS $PID"
        bad "emberd did not start: $(head -c 400 "$LOG")"
    fi
else
    bad "no $BUILD/emberd to run against"
fi

# ---- ember-bench floor (the N1 yardstick; epoll and io_uring forms) ----
# The client verifies every GET against the value it expects for the key, so
# 0 errors means the floor answers the protocol as emberd does.
for form in epoll uring; do
    flag=; [ $form = uring ] && flag=--uring
    FP=27400 up=0 try=0
    while [ $up = 0 ] && [ $try -lt 5 ]; do
        FP=$(free_port "$FP")
        # shellcheck disable=SC2086
        "$BENCH" floor --port "$FP" --value-size 1024 $flag >"$TMP/floor.log" 2>&1 &
        FPID=$!
        PIDS="$PIDS $FPID"
        wait_port "$FPID" "$FP" && up=1
        FP=$((FP + 1)) try=$((try + 1))
    done
    FP=$((FP - 1))
    if [ $up = 1 ]; then
        # shellcheck disable=SC2086
        run_load "floor ($form): 1 KiB, pipeline 16, string keys" --proto ignite --port "$FP" \
            $COMMON --value-size 1024 --pipeline 16 --duration 1 --pid "$FPID"
        # shellcheck disable=SC2086
        run_load "floor ($form): int keys, 50% GET, handshake 1.7.0" --proto ignite \
            --port "$FP" $COMMON --key-type int --value-size 1024 --mix 50 \
            --ignite-version 1.7.0 --duration 1
    else
        bad "floor ($form) did not start: $(head -c 400 "$TMP/floor.log")"
    fi
done

# ---- redis-server ----
if command -v redis-server >/dev/null; then
    # A port free now may be taken before redis binds it (other test runs
    # share the machine): then redis exits and another port is tried.
    RP=26400 up=0 try=0
    while [ $up = 0 ] && [ $try -lt 5 ]; do
        RP=$(free_port "$RP")
        redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
            >"$TMP/redis.log" 2>&1 &
        RPID=$!
        PIDS="$PIDS $RPID"
        wait_port "$RPID" "$RP" && up=1
        RP=$((RP + 1)) try=$((try + 1))
    done
    RP=$((RP - 1))
    if [ $up = 1 ]; then
        # shellcheck disable=SC2086
        run_load "resp: 3 s, pipeline 4, 90% GET" --proto resp --port "$RP" $COMMON \
            --pipeline 4 --duration 3 --pid "$RPID"
        # shellcheck disable=SC2086
        run_load "resp: 1 KiB values, 50% GET, pipeline 16" --proto resp --port "$RP" $COMMON \
            --value-size 1024 --mix 50 --pipeline 16 --duration 1
    else
        bad "redis-server did not listen on port $RP: $(head -c 400 "$TMP/redis.log")"
    fi
else
    bad "redis-server is not installed (tools/deps.sh installs it)"
fi

# ---- memcached (binary protocol) ----
# Missing memcached skips these runs on a developer machine; with CI=true the
# skip is a failure (lib.sh skip), as tools/deps.sh installs it.
if ! command -v memcached >/dev/null; then
    skip "memcached is not installed: the memcache runs did not run (tools/deps.sh installs it)"
else
    U=; [ "$(id -u)" = 0 ] && U="-u root"
    MP=27300 up=0 try=0
    while [ $up = 0 ] && [ $try -lt 5 ]; do
        MP=$(free_port "$MP")
        # shellcheck disable=SC2086
        memcached $U -l 127.0.0.1 -p "$MP" -U 0 -t 1 -m 256 >"$TMP/mc.log" 2>&1 &
        MPID=$!
        PIDS="$PIDS $MPID"
        wait_port "$MPID" "$MP" && up=1
        MP=$((MP + 1)) try=$((try + 1))
    done
    MP=$((MP - 1))
    if [ $up = 1 ]; then
        # shellcheck disable=SC2086
        run_load "memcache: 1 s, pipeline 8, 90% GET" --proto memcache --port "$MP" $COMMON \
            --pipeline 8 --duration 1 --pid "$MPID"
    else
        bad "memcached did not listen on port $MP: $(head -c 400 "$TMP/mc.log")"
    fi
fi

cleanup
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
