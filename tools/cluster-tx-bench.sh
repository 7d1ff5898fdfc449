#!/bin/sh
# cluster-tx-bench.sh - BENCHMARKS.md M5, TRANSACTIONAL row: 3 emberd
# processes, a TRANSACTIONAL cache with 2 backups in FULL_SYNC (every node
# holds every key), one-key PESSIMISTIC REPEATABLE_READ transactions
# (TX_START, PUT, TX_END) through node 1 from BENCH_CONNS connections
# (ember-txc bench: a warm-up run, then a measured one of BENCH_SECONDS),
# against the same puts without a transaction on the same cache.  B/op and
# allocs/op are the counting allocator's totals over the three nodes (op
# 32000, --debug-ops) around the measured run, per transaction.  Real
# processes on the run's own loopback addresses (tests/chaos/lib.sh).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
CONNS=${BENCH_CONNS:-8}
SECS=${BENCH_SECONDS:-5}
. tests/chaos/lib.sh
chaos_init
FL="--threads ${BENCH_SERVER_THREADS:-1} --debug-ops"
node_start 1 $(cluster_flags 1) $FL || finish
node_start 2 $(cluster_flags 2 1) $FL || finish
node_start 3 $(cluster_flags 3 1) $FL || finish
for i in 1 2 3; do wait_metric "$i" ember_cluster_members 3 || { bad "node $i"; finish; }; done
NODES=$(nodes_list 1 2 3)
echo "| op | connections | ops | ops/s | p50 µs | p99 µs | B/op (3 nodes) | allocs/op (3 nodes) | errors |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for plain in 0 1; do
    row=$("$BUILD/ember-txc" bench --nodes "$NODES" --cache txbench --backups 2 --clients "$CONNS" \
          --duration "$SECS" --plain $plain) || { bad "bench (plain $plain)"; continue; }
    echo "$row" | awk -F, '{ op = $1 == "tx" ? "PESSIMISTIC REPEATABLE_READ transaction, one put" : "put, no transaction"
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", op, $2, $3, $4, $5, $6, $7, $8, $9 }'
done
ok "cluster transaction bench ran"
finish
