#!/bin/sh
# hist-bench.sh - BENCHMARKS.md F2: a persistent node's return, historical
# against whole.
#
# 3 emberd on the run's own loopback addresses (tests/chaos/lib.sh),
# persistent (LOG_ONLY, no periodic checkpoints), a PARTITIONED cache with 1
# backup in FULL_SYNC filled with HIST_KEYS (100 000) int keys of HIST_VALUE
# (1024) bytes by ember-bench's prefill, every node a member from the start
# (so every copy is whole in its WAL and can claim history), the baseline set
# to the three.  Node 3 is killed (kill -9), HIST_MISSED (5 000) keys are
# overwritten through node 1, and node 3 restarts on its directory.  Timed from
# its start: to its rejoin (it listens after its WAL replay, then sees 3
# members and holds its lease), to the end of its catch-up (its caught-up
# count at the partitions it owned before) and to the last partition owned
# again (besides, no copy loading on any node and none MOVING on node 3);
# /metrics polled every 100 ms.  Beside them, the catch-up alone from node 3's
# log (its first to its last partition caught up).  Then the same on a fresh
# cluster with rebalance_history_size 0 on every node (each partition loads
# whole).  One markdown table row per run; a FAIL line when the historical run
# did not catch every partition up from the logs (or the whole one did any).
#
# HIST_RUNS (1): how many times the pair runs (historical, then whole).
# HIST_VERBOSE=1: each step's time and node 3's counters on stderr.
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
KEYS=${HIST_KEYS:-100000}
MISSED=${HIST_MISSED:-5000}
VS=${HIST_VALUE:-1024}
RUNS=${HIST_RUNS:-1}
# A start replays the node's whole WAL (the prefill) before it listens.
CHAOS_WAIT=${CHAOS_WAIT:-300}
. tests/chaos/lib.sh
chaos_init
now_ms() { date +%s%3N; }
say() { [ -n "${HIST_VERBOSE:-}" ] && echo "# $*" >&2; return 0; }
PFL="--persistence true --wal-mode LOG_ONLY --checkpoint-frequency 0"
LOAD="--connections 8 --value-size $VS --mix 0 --key-type int --cache chaos-set"

# settled I...: until no copy is loading on nodes I... and none is MOVING
# on them (CHAOS_WAIT s).
settled() {
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        s=""
        for i in "$@"; do
            s="$s$(metric "$i" ember_rebal_loading)$(metric "$i" ember_cluster_moving_partitions)"
        done
        [ "$s" = "$(printf '%0*d' $(($# * 2)) 0)" ] && return 0
        sleep 0.1; t=$((t + 1))
    done
    return 1
}

# owned_by I: how many partitions of chaos-set node I owns (primary or
# backup), as `ember-cli cluster chaos-set` through node 1 lists them (the
# node found by its consistent id, its address: a restart has a new id).
owned_by() {
    "$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster chaos-set 2>/dev/null |
        awk -v cid="$(node_ip "$1"):47100" '$3 == cid { id = $1 }
            id != "" && $1 == id && NF == 7 { print $3 + $4; exit }'
}

# span LOG: ms from the first to the last "caught up with its primary" line
# of LOG (a node's own timestamps: the catch-up alone).
span() {
    grep 'caught up with its primary' "$1" | sed -n '1p;$p' |
        awk '{ split(substr($1, 12, 12), t, ":"); ms = (t[1] * 3600 + t[2] * 60 + t[3]) * 1000
               if (NR == 1) a = ms; else b = ms }
             END { if (b < a) b += 86400000; printf "%.0f\n", NR == 2 ? b - a : 0 }'
}

# one LABEL KIND FLAGS...: a fresh 3-node cluster with FLAGS, node 3's
# return timed; prints a table row.  KIND hist: every partition must catch
# up from the logs, whole: none.  Nonzero, with a FAIL line, when a step did
# not happen.
one() {
    label=$1
    kind=$2
    shift 2
    persistent_cluster3 1 $PFL "$@" || return 1
    # The baseline, as a persistent Ignite cluster has one (activation
    # sets it too): node 3's partitions keep their place while it is down
    # and nothing moves.
    "$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster baseline set-current \
        >"$CHAOS_TMP/baseline" 2>&1 || { bad "baseline"; cat "$CHAOS_TMP/baseline"; return 1; }
    say "$label: cluster up, baseline set"
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --keys "$KEYS" \
        --ops 1 --warmup 0 >"$CHAOS_TMP/prefill" 2>&1 ||
        { bad "prefill"; cat "$CHAOS_TMP/prefill"; return 1; }
    own=$(owned_by 3)
    say "prefilled $KEYS keys; node 3 owns ${own:-?} partitions"
    [ -n "$own" ] && [ "$own" -gt 0 ] || { bad "node 3 owns no partition"; return 1; }
    node_kill 3
    wait_metric 1 ember_cluster_members 2 || { bad "node 3 was not failed"; return 1; }
    settled 1 2 || { bad "nodes 1 and 2 did not settle after node 3 left"; return 1; }
    say "node 3 failed, nodes 1 and 2 settled"
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --keys "$MISSED" \
        --ops 1 --warmup 0 >"$CHAOS_TMP/missed" 2>&1 ||
        { bad "overwrites"; cat "$CHAOS_TMP/missed"; return 1; }
    say "overwrote $MISSED keys"
    t0=$(now_ms)
    node_start 3 $(cluster_flags 3 1) $PFL "$@" || return 1
    tl=$(now_ms)
    say "node 3 listens after $((tl - t0)) ms"
    members_are 1 2 3 || { bad "node 3 did not rejoin"; return 1; }
    tj=$(now_ms)
    say "node 3 rejoined after $((tj - t0)) ms"
    # Caught up (tc): node 3 caught up (or loaded) as many copies as it
    # owned.  Owned (t1): besides, no copy is loading on any node and none
    # is MOVING on node 3 (the cluster took its copies back as owners).
    t=0
    tc=""
    while :; do
        c=$(metric 3 ember_rebal_caught_up); l=$(metric 3 ember_rebal_loaded)
        if [ $((${c:-0} + ${l:-0})) -ge "$own" ]; then
            [ -n "$tc" ] || tc=$(now_ms)
            s="$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)$(metric 3 ember_rebal_loading)"
            [ "$s" = 000 ] && [ "$(metric 3 ember_cluster_moving_partitions)" = 0 ] && break
        fi
        sleep 0.1; t=$((t + 1))
        [ $t -lt $((CHAOS_WAIT * 10)) ] ||
            { bad "node 3 did not catch up (caught up ${c:-?}, loaded ${l:-?} of $own)"; return 1; }
    done
    t1=$(now_ms)
    say "caught up after $((tc - t0)) ms, owned after $((t1 - t0)) ms"
    c=$(metric 3 ember_rebal_caught_up); h=$(metric 3 ember_rebal_historical)
    u=$(metric 3 ember_rebal_historical_updates_in); e=$(metric 3 ember_rebal_entries_in)
    b=$(metric 3 ember_rebal_bytes_in); l=$(metric 3 ember_rebal_loaded)
    log3=$(eval echo "\$CHAOS_LOG_3")
    [ -z "${HIST_VERBOSE:-}" ] ||
        say "node 3: caught up $c (log lines: $(grep -c 'caught up with its primary' "$log3"), from" \
            "its log $(grep -c 'caught up with its primary from its log' "$log3")), historical $h" \
            "with $u updates, loaded $l, entries $e, bytes $b; owns $(owned_by 3) (before: $own)"
    printf '| %s | %s | %s | %s | %.1f | %d | %d | %d | %d |\n' "$label" "$c" "$h" "$e" \
        "$(echo "$b" | awk '{ print $1 / 1e6 }')" $((tj - t0)) $((tc - t0)) $((t1 - t0)) \
        "$(span "$log3")"
    if [ "$kind" = hist ] && [ "${h:-0}" -lt "$own" ]; then
        bad "historical: ${h:-0} of $own partitions caught up from the logs; node 3's other loads:"
        grep 'caught up with its primary$' "$log3" | head -5
    elif [ "$kind" = whole ] && [ "${h:-0}" != 0 ]; then
        bad "whole: $h partitions caught up from the logs with rebalance_history_size 0"
    fi
}

# stop_nodes: every node killed, its directory gone (its logs kept under
# $CHAOS_TMP/logs.N when CHAOS_KEEP is set).
stop_nodes() {
    for i in 1 2 3; do node_kill "$i"; done
    if [ -n "${CHAOS_KEEP:-}" ]; then
        k=$(ls -d "$CHAOS_TMP"/logs.* 2>/dev/null | wc -l)
        for i in 1 2 3; do
            mkdir -p "$CHAOS_TMP/logs.$k/n$i"
            cp "$CHAOS_TMP"/n$i/emberd.*.log "$CHAOS_TMP/logs.$k/n$i/" 2>/dev/null
        done
    fi
    rm -rf "$CHAOS_TMP"/n1 "$CHAOS_TMP"/n2 "$CHAOS_TMP"/n3
}

echo "| node 3's return ($KEYS keys of $VS B, $MISSED overwritten while down) | partitions caught up | from logs | entries in | MB in | ms start to rejoin | ms start to caught up | ms start to owned | ms catch-up alone (node 3's log) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
run=0
while [ $run -lt "$RUNS" ]; do
    one "historical (rebalance_history_size 64m)" hist || bad "historical run $((run + 1))"
    stop_nodes
    one "whole (rebalance_history_size 0)" whole --rebalance-history-size 0 || bad "whole run $((run + 1))"
    stop_nodes
    run=$((run + 1))
done
finish
