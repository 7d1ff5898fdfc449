#!/bin/sh
# rebal-bench.sh - BENCHMARKS.md F2: rebalancing throughput, and writes
# while it runs.
#
# 2 emberd on the run's own loopback addresses (tests/chaos/lib.sh), a
# PARTITIONED cache with 1 backup in FULL_SYNC filled with REBAL_KEYS
# (200 000) int keys of REBAL_VALUE (1024) bytes by ember-bench's prefill;
# then a third node joins and loads its share from the primaries.  Timed
# from its start to the end of rebalancing (ember_cluster_moving_partitions
# 0 on it after it loaded copies: every one owned; /metrics polled every
# 100 ms); MB/s is ember_rebal_bytes_in over that time.  The same byte count is then
# copied over one loopback TCP connection by tools/loopback-copy.js (Node.js
# sockets, 64 KiB writes): the floor a transfer of those bytes has here.
# A second run repeats the join with ember-bench writing (8 connections,
# 100% overwrites through node 1) in 1 s windows while it loads, beside the
# same windows on the whole cluster afterwards (steady state): the median
# window's puts/s and the largest window p99.
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
KEYS=${REBAL_KEYS:-200000}
VS=${REBAL_VALUE:-1024}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_failover.js
now_ms() { date +%s%3N; }
LOAD="--connections 8 --keys $KEYS --value-size $VS --mix 0 --key-type int --cache rb"

# windows FILE STOPFILE: 1 s write windows through node 1 until STOPFILE
# exists, one csv row each (header once) in FILE.
windows() {
    while [ ! -f "$2" ]; do
        "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --duration 1 \
            --warmup 0 --no-prefill --csv --label w >"$2.one" 2>/dev/null
        [ -s "$1" ] && tail -n +2 "$2.one" >>"$1" || cat "$2.one" >>"$1"
    done
}

# summary FILE: "median puts/s, largest p99 us, errors" over its windows.
summary() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { r[++n] = $c["ops_s"]; if ($c["p99_us"] > p) p = $c["p99_us"]; e += $c["errors"] }
             END { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                       if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
                   printf "%d %d %d %d\n", r[int((n + 1) / 2)], p, e, n }' "$1"
}

# join_run [LOADFILE]: fill 2 nodes, join a third (with LOADFILE: under
# write windows, their csv there); writes "ms bytes entries join-ms load-ms" to
# $CHAOS_TMP/join (in this shell: the harness's cleanup knows every pid).
join_run() {
    node_start 1 $(cluster_flags 1) || return 1
    node_start 2 $(cluster_flags 2 1) || return 1
    for i in 1 2; do wait_metric "$i" ember_cluster_members 2 || return 1; done
    node "$JS" create "$(node_addr 1)" rb 1 >/dev/null || return 1
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --ops 1 \
        --warmup 0 >/dev/null 2>&1 || return 1
    wp=""
    rm -f "$CHAOS_TMP/stop"
    if [ -n "${1:-}" ]; then
        : >"$1"
        windows "$1" "$CHAOS_TMP/stop" &
        wp=$!
    fi
    t0=$(now_ms)
    node_start 3 $(cluster_flags 3 1) || return 1
    wait_metric 3 ember_cluster_members 3 || return 1
    tj=$(now_ms)
    # Loading starts once the exchange names node 3 an owner; done when it
    # loaded something and no copy of any cache is MOVING any more.
    t=0
    while :; do
        ld=$(metric 3 ember_rebal_loaded); mv=$(metric 3 ember_cluster_moving_partitions)
        [ -n "$ld" ] && [ "$ld" -gt 0 ] && [ "$mv" = 0 ] && break
        sleep 0.1; t=$((t + 1)); [ $t -gt 6000 ] && return 1
    done
    t1=$(now_ms)
    touch "$CHAOS_TMP/stop"
    [ -n "$wp" ] && wait $wp
    # The coordinator's line for the end of rb's rebalancing: from its first
    # scan that saw rb MOVING to the last partition owned (the load alone).
    t=0
    while ! cat "$CHAOS_TMP"/n*/emberd.*.log | grep -q "rebalancing: cache 'rb' finished"; do
        sleep 0.1; t=$((t + 1)); [ $t -gt 100 ] && return 1
    done
    lms=$(cat "$CHAOS_TMP"/n*/emberd.*.log | grep -m1 "rebalancing: cache 'rb' finished" |
          sed 's/.*, \([0-9]*\) ms)$/\1/')
    echo "$((t1 - t0)) $(metric 3 ember_rebal_bytes_in) $(metric 3 ember_rebal_entries_in)" \
        "$((tj - t0)) $lms" >"$CHAOS_TMP/join"
}

stop_nodes() {
    for i in 1 2 3; do node_kill "$i"; done
    rm -rf "$CHAOS_TMP"/n1 "$CHAOS_TMP"/n2 "$CHAOS_TMP"/n3
}

rm -f "$CHAOS_TMP/join"
join_run
stop_nodes
set -- $(cat "$CHAOS_TMP/join" 2>/dev/null)
[ $# = 5 ] || { bad "the join did not complete"; finish; }
ms=$1 bytes=$2 entries=$3 jms=$4 lms=$5
ok "node 3 loaded $entries entries, $bytes bytes in $ms ms (joined after $jms ms, loading $lms ms)"
lb=$(node tools/loopback-copy.js "$bytes" 2>&1) || bad "loopback copy: $lb"
printf '%-44s %10s %10s %10s\n' "transfer" "MB" "ms" "MB/s"
awk -v b="$bytes" -v ms="$ms" 'BEGIN { printf "%-44s %10.1f %10d %10.1f\n", "rebalancing: join of a 3rd node (idle)", b / 1e6, ms, b / 1e6 / (ms / 1000) }'
awk -v b="$bytes" -v ms="$lms" 'BEGIN { printf "%-44s %10.1f %10d %10.1f\n", "  the load alone (coordinator log line)", b / 1e6, ms, b / 1e6 / (ms / 1000) }'
set -- $lb
awk -v b="$bytes" -v ms="$1" 'BEGIN { printf "%-44s %10.1f %10d %10.1f\n", "the same bytes over one loopback connection", b / 1e6, ms, b / 1e6 / (ms / 1000) }'

# Writes during a join, then on the whole cluster.
rm -f "$CHAOS_TMP/join"
join_run "$CHAOS_TMP/during.csv"
set -- $(cat "$CHAOS_TMP/join" 2>/dev/null)
[ $# = 5 ] || { bad "the join under writes did not complete"; stop_nodes; finish; }
jms=$1
: >"$CHAOS_TMP/steady.csv"
rm -f "$CHAOS_TMP/stop"
windows "$CHAOS_TMP/steady.csv" "$CHAOS_TMP/stop" &
wp=$!
sleep 6
touch "$CHAOS_TMP/stop"
wait $wp
stop_nodes
printf '%-44s %10s %10s %10s %8s\n' "writes via node 1 (FULL_SYNC, $VS B)" "puts/s" "p99 us" "errors" "windows"
for w in during steady; do
    label="during the join's rebalancing ($jms ms)"
    [ $w = steady ] && label="steady state, 3 nodes"
    set -- $(summary "$CHAOS_TMP/$w.csv")
    printf '%-44s %10s %10s %10s %8s\n' "$label" "$1" "$2" "$3" "$4"
done
finish
