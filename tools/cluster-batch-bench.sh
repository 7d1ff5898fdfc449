#!/bin/sh
# cluster-batch-bench.sh [EMBERD...] - batches over several owners: 3 emberd
# processes (a PARTITIONED cache, 1 backup, FULL_SYNC), the real Node.js
# client calling getAll and putAll of 30 keys through node 1, one call at a
# time (tools/cluster-batch-bench.js); each batch spans every owner.  With
# several emberd binaries (an A/B of two builds), each runs in turn, for
# BENCH_ROUNDS (2) interleaved rounds.  BENCH_CALLS (2000), BENCH_KEYS (30).
# Real processes on the run's own loopback addresses (tests/chaos/lib.sh).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
[ $# -gt 0 ] || set -- "$BUILD/emberd"
. tests/chaos/lib.sh
for r in $(seq 1 "${BENCH_ROUNDS:-2}"); do
    for bin in "$@"; do
        (
            CHAOS_EMBERD=$bin
            chaos_init
            start_three >/dev/null
            node tools/cluster-batch-bench.js "$(node_addr 1)" "${BENCH_CALLS:-2000}" \
                "${BENCH_KEYS:-30}" | sed "s|^|round $r $bin: |"
        )
    done
done
