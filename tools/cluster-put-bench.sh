#!/bin/sh
# cluster-put-bench.sh - BENCHMARKS.md M5: replicated ATOMIC puts on 3 emberd
# processes (FULL_SYNC, 2 backups, every node holds every key) against
# redis-server with 2 replicas where each SET is followed by WAIT 2 0, driven
# by the same load generator (ember-bench load, 100% writes overwriting a
# prefilled key space).  Per value size (64 B, 1 KiB): throughput, p50/p99,
# server CPU per acknowledged put summed over the 3 processes, and for emberd
# B/op and allocs/op summed over the 3 nodes from the counting allocator
# (private op 32000, --debug-ops; ember-bench --mem-stats reads it over its
# own connections around the measured interval), on a run after a warm-up
# run.  emberd runs twice per size: every put through node 1 (row emberd),
# and partition-aware, each put to its primary (row emberd-pa).
# BENCH_SERVER_THREADS: emberd --threads (1).
# Real processes on the run's own loopback addresses (tests/chaos/lib.sh).
# BENCH_CONNS (8), BENCH_SECONDS (5), BENCH_KEYS (10000).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
CONNS=${BENCH_CONNS:-8}
SECS=${BENCH_SECONDS:-5}
KEYS=${BENCH_KEYS:-10000}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_repl.js
hz=$(getconf CLK_TCK)
cpu_ticks() {
    t=0
    for p in "$@"; do
        set -- $(cut -d' ' -f14,15 "/proc/$p/stat"); t=$((t + $1 + $2))
    done
    echo $t
}
col() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i } NR == 2 { print $k }' "$1"; }
FL="--threads ${BENCH_SERVER_THREADS:-1} --debug-ops"
node_start 1 $(cluster_flags 1) $FL || finish
node_start 2 $(cluster_flags 2 1) $FL || finish
node_start 3 $(cluster_flags 3 1) $FL || finish
for i in 1 2 3; do wait_metric "$i" ember_cluster_members 3 || { bad "node $i"; finish; }; done
node "$JS" create bench "$(node_addr 1)" || { bad "create the cache"; finish; }
EP="$(node_addr 1) $(node_addr 2) $(node_addr 3)"
P="$(node_pid 1) $(node_pid 2) $(node_pid 3)"
ROWS="$CHAOS_TMP/rows"
MEM="$(node_addr 1),$(node_addr 2),$(node_addr 3)"
# Two ways in per value size: every put through node 1 (two in three
# forwarded to their primary), and partition-aware (each put sent to its
# primary, as Ignite's Java, .NET and C++ thin clients do by default; the
# connections spread over the 3 nodes).
HOSTS="$(node_ip 1):$CHAOS_PORT,$(node_ip 2):$CHAOS_PORT,$(node_ip 3):$CHAOS_PORT"
for vs in 64 1024; do
    LOAD="--connections $CONNS --keys $KEYS --mix 0 --value-size $vs --key-type int"
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" $LOAD --duration 2 \
        --warmup 0 >/dev/null 2>&1 || bad "emberd warm-up $vs"
    for how in emberd emberd-pa; do
        if [ $how = emberd ]; then TO="--host $(node_ip 1) --port $CHAOS_PORT"
        else TO="--hosts $HOSTS --partition-aware --ignite-version 1.4.0"; fi
        c0=$(cpu_ticks $P)
        "$BUILD/ember-bench" load $TO $LOAD --duration "$SECS" --warmup 0 --no-prefill \
            --mem-stats "$MEM" --csv --label $how >"$CHAOS_TMP/e$vs.csv" 2>&1 ||
            bad "$how run $vs"
        c1=$(cpu_ticks $P)
        ops=$(col "$CHAOS_TMP/e$vs.csv" ops)
        echo "$how $vs $(col "$CHAOS_TMP/e$vs.csv" ops_s) $(col "$CHAOS_TMP/e$vs.csv" p50_us)" \
             "$(col "$CHAOS_TMP/e$vs.csv" p99_us) $(( (c1 - c0) * 1000000 / hz / ops ))" \
             "$(col "$CHAOS_TMP/e$vs.csv" server_bytes_op)" \
             "$(col "$CHAOS_TMP/e$vs.csv" server_allocs_op) $(col "$CHAOS_TMP/e$vs.csv" errors)" \
             >>"$ROWS"
    done
done
node_term 1; node_term 2; node_term 3

# redis: a primary and 2 replicas on the same three addresses.
RP=""
for i in 1 2 3; do
    rep=""; [ $i -gt 1 ] && rep="--replicaof $(node_ip 1) 6379"
    # --dir: a replica's full sync writes an RDB file there, not into the tree
    mkdir -p "$CHAOS_TMP/redis$i"
    redis-server --port 6379 --bind "$(node_ip $i)" --save '' --appendonly no --daemonize no \
        --dir "$CHAOS_TMP/redis$i" $rep >"$CHAOS_TMP/redis$i.log" 2>&1 &
    RP="$RP $!"
    CHAOS_PIDS="$CHAOS_PIDS $!"
done
t=0
until redis-cli -h "$(node_ip 1)" -p 6379 info replication 2>/dev/null | grep -q 'connected_slaves:2'; do
    sleep 0.1; t=$((t + 1)); [ $t -gt 300 ] && { bad "redis replicas"; finish; }
done
for vs in 64 1024; do
    LOAD="--connections $CONNS --keys $KEYS --mix 0 --value-size $vs --proto resp --resp-wait 2"
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port 6379 $LOAD --duration 2 --warmup 0 \
        >/dev/null 2>&1 || bad "redis warm-up $vs"
    c0=$(cpu_ticks $RP)
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port 6379 $LOAD --duration "$SECS" --warmup 0 \
        --no-prefill --csv --label redis >"$CHAOS_TMP/r$vs.csv" 2>&1 || bad "redis run $vs"
    c1=$(cpu_ticks $RP)
    ops=$(col "$CHAOS_TMP/r$vs.csv" ops)
    echo "redis $vs $(col "$CHAOS_TMP/r$vs.csv" ops_s) $(col "$CHAOS_TMP/r$vs.csv" p50_us)" \
         "$(col "$CHAOS_TMP/r$vs.csv" p99_us) $(( (c1 - c0) * 1000000 / hz / ops )) - -" \
         "$(col "$CHAOS_TMP/r$vs.csv" errors)" >>"$ROWS"
done
echo "| server | value | puts/s | p50 µs | p99 µs | server CPU µs/put (3 processes) | B/op (3 nodes) | allocs/op (3 nodes) | errors |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
awk '{ printf "| %s | %s B | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$ROWS"
ok "cluster put bench ran"
finish
