#!/bin/sh
# hist-bench.sh - BENCHMARKS.md F2: a persistent node's return, historical
# against whole.
#
# 3 emberd on the run's own loopback addresses (tests/chaos/lib.sh),
# persistent (LOG_ONLY, no checkpoints), a PARTITIONED cache with 1 backup
# in FULL_SYNC filled with HIST_KEYS (100 000) int keys of HIST_VALUE (1024)
# bytes by ember-bench's prefill.  Node 3 is killed (kill -9), HIST_MISSED
# (5 000) keys are overwritten through node 1, and node 3 restarts on its
# directory: timed from its start until every partition it holds caught up
# (ember_rebal_loading 0 on every node once its caught-up count stopped at
# the partitions it owns; /metrics polled every 100 ms), with the bytes it
# received.  Then the same with rebalance_history_size 0 on every node
# (each partition loads whole), in one run.
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
KEYS=${HIST_KEYS:-100000}
MISSED=${HIST_MISSED:-5000}
VS=${HIST_VALUE:-1024}
. tests/chaos/lib.sh
chaos_init
now_ms() { date +%s%3N; }
LOAD="--connections 8 --value-size $VS --mix 0 --key-type int --cache chaos-set"

# one LABEL FLAGS...: a fresh 3-node cluster with FLAGS, node 3's return
# timed; prints a table row.
one() {
    label=$1
    shift
    persistent_cluster3 1 --persistence true --wal-mode LOG_ONLY --checkpoint-frequency 0 "$@" ||
        return 1
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --keys "$KEYS" \
        --ops 1 --warmup 0 >/dev/null 2>&1
    node_kill 3
    wait_metric 1 ember_cluster_members 2 || { bad "node 3 was not failed"; return 1; }
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --keys "$MISSED" \
        --ops 1 --warmup 0 >/dev/null 2>&1
    t0=$(now_ms)
    node_start 3 $(cluster_flags 3 1) --persistence true --wal-mode LOG_ONLY \
        --checkpoint-frequency 0 "$@" || return 1
    members_are 1 2 3 || { bad "node 3 did not rejoin"; return 1; }
    last=-1
    t=0
    while [ $t -lt 600 ]; do
        c=$(metric 3 ember_rebal_caught_up)
        busy="$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)$(metric 3 ember_rebal_loading)"
        [ "$busy" = 000 ] && [ "${c:-0}" -gt 0 ] && [ "$c" = "$last" ] && break
        last=${c:-0}
        sleep 0.1; t=$((t + 1))
    done
    ms=$(( $(now_ms) - t0 ))
    printf '| %s | %s | %s | %s | %s | %.1f |\n' "$label" "$(metric 3 ember_rebal_caught_up)" \
        "$(metric 3 ember_rebal_historical)" "$(metric 3 ember_rebal_entries_in)" \
        "$(metric 3 ember_rebal_bytes_in)" "$(echo "$ms" | awk '{ print $1 / 1000 }')"
    for i in 1 2 3; do node_kill "$i"; done
    rm -rf "$CHAOS_TMP"/n1 "$CHAOS_TMP"/n2 "$CHAOS_TMP"/n3
}

echo "| node 3's return ($KEYS keys of $VS B, $MISSED overwritten while down) | partitions caught up | from logs | entries in | bytes in | s (start to caught up) |"
echo "|---|---|---|---|---|---|"
one "historical (rebalance_history_size 64m)"
one "whole (rebalance_history_size 0)" --rebalance-history-size 0
finish
