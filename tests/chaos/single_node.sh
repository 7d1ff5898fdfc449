#!/bin/sh
# single_node.sh - one persistent emberd (FSYNC) under the nemeses while
# clients write: kill -9 and restart, SIGSTOP past the client timeout, and
# an iptables partition between clients and node.  Checks: every
# acknowledged put is there afterwards (set workload) and the register
# history is linearizable.  CHAOS_SECONDS sets each workload's length
# (`make chaos` runs it longer than `make test`).
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=${CHAOS_SECONDS:-8}
. tests/chaos/lib.sh
chaos_init

FLAGS=${CHAOS_FLAGS:-"--persistence true --wal-mode FSYNC --checkpoint-frequency 500 --threads 1"}

# nemesis SECONDS: faults on node 1 until SECONDS have passed.
nemesis() {
    end=$(( $(date +%s) + $1 ))
    round=0
    while [ "$(date +%s)" -lt "$end" ]; do
        sleep 1
        case $((round % 3)) in
            0) node_kill 1; node_start 1 $FLAGS || return 1 ;;
            1) node_pause 1; sleep 3; node_resume 1 ;;
            2) net_isolate 1 || return 1; sleep 3; net_heal ;;
        esac
        round=$((round + 1))
    done
    echo "nemesis: $round faults"
}

run_workload() {
    w=$1
    hist="$CHAOS_TMP/$w.history"
    "$BUILD/ember-chaos" run --nodes "$(nodes_list 1)" --workload "$w" --cache "chaos-$w" \
        --clients 4 --duration "$SECS" --timeout-ms 1500 --history "$hist" \
        >"$CHAOS_TMP/$w.run" 2>&1 &
    cpid=$!
    nemesis "$SECS" || bad "$w: nemesis could not run"
    wait $cpid
    rc=$?
    cat "$CHAOS_TMP/$w.run"
    [ $rc -eq 0 ] || { bad "$w: ember-chaos run exited $rc"; return; }
    # The node must be serving again before the check reads everything back.
    node_pid 1 >/dev/null
    if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1)" --workload "$w" \
        --cache "chaos-$w" --history "$hist" >"$CHAOS_TMP/$w.check" 2>&1; then
        ok "$w: $(tail -1 "$CHAOS_TMP/$w.check")"
    else
        bad "$w: check failed"; cat "$CHAOS_TMP/$w.check"
    fi
    # A history with no acknowledged op proves nothing.
    grep -q ' [1-9][0-9]* ok' "$CHAOS_TMP/$w.run" || bad "$w: no operation was acknowledged"
}

node_start 1 $FLAGS || finish
# A persistent node starts INACTIVE the first time, as Ignite does.
"$BUILD/ember-cli" --host "$(node_ip 1)" --port "$CHAOS_PORT" state ACTIVE >/dev/null ||
    { bad "could not activate node 1"; finish; }
run_workload set
run_workload register
node_term 1 && ok "node exits 0 on SIGTERM after the faults" || bad "node exit status $? on SIGTERM"
finish
