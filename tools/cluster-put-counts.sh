#!/bin/sh
# cluster-put-counts.sh - BENCHMARKS.md M5: per acknowledged put, summed over
# 3 emberd processes (FULL_SYNC, 2 backups, one loop each), the syscalls and
# context switches of their two busy threads (client loop em-net, transport
# em-cluster), from `perf stat --per-thread` over 5 s of overwrites.
# Usage: tools/cluster-put-counts.sh [aware|node1]   (aware: each put sent to
# its primary, as cluster-put-bench.sh's emberd-pa row; node1: every put
# through node 1).  CHAOS_EMBERD picks another emberd; BENCH_VALUE (64).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
MODE=${1:-aware}
. tests/chaos/lib.sh
chaos_init
command -v perf >/dev/null || { bad "perf is not installed"; finish; }
EV=context-switches,syscalls:sys_enter_read,syscalls:sys_enter_write
EV=$EV,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom
EV=$EV,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex
FL="--threads 1 --debug-ops"
node_start 1 $(cluster_flags 1) $FL || finish
node_start 2 $(cluster_flags 2 1) $FL || finish
node_start 3 $(cluster_flags 3 1) $FL || finish
for i in 1 2 3; do wait_metric "$i" ember_cluster_members 3 || { bad "node $i"; finish; }; done
node tests/chaos/cluster_repl.js create bench "$(node_addr 1)" || { bad "create the cache"; finish; }
LOAD="--connections 8 --keys 10000 --mix 0 --value-size ${BENCH_VALUE:-64} --key-type int"
"$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --duration 2 \
    --warmup 0 >/dev/null 2>&1 || bad "warm-up"
if [ "$MODE" = node1 ]; then TO="--host $(node_ip 1) --port $CHAOS_PORT"
else TO="--hosts $(node_ip 1):$CHAOS_PORT,$(node_ip 2):$CHAOS_PORT,$(node_ip 3):$CHAOS_PORT --partition-aware --ignite-version 1.4.0"; fi
PS=""
for i in 1 2 3; do
    perf stat --per-thread -e "$EV" -p "$(node_pid $i)" -o "$CHAOS_TMP/ps$i.txt" &
    PS="$PS $!"
done
sleep 0.3                           # (a benchmark: perf attaching, not a condition)
"$BUILD/ember-bench" load $TO $LOAD --duration 5 --warmup 0 --no-prefill --csv \
    --label "$MODE" >"$CHAOS_TMP/load.csv" 2>&1 || bad "load"
kill -INT $PS 2>/dev/null
wait $PS 2>/dev/null
ops=$(awk -F, 'NR == 2 { print $10 }' "$CHAOS_TMP/load.csv")
echo "$MODE: $ops puts, p99 $(awk -F, 'NR == 2 { print $18 }' "$CHAOS_TMP/load.csv") us; per put, 3 nodes:"
cat "$CHAOS_TMP"/ps?.txt | grep -E '^ *em-(net|cluster)' | grep -v 'not counted' |
    awk -v ops="$ops" '{ sub("syscalls:sys_enter_", "", $3); v[$3] += $2 }
        END { for (k in v) printf "  %-18s %.3f\n", k, v[k] / ops }' | sort
ok "counted"
finish
