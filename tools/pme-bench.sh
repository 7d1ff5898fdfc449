#!/bin/sh
# pme-bench.sh - the exchange's timing rows (BENCHMARKS.md "Cluster"): on 3
# and on 5 real emberd processes with 100 caches (1024 partitions, no
# backups), the time the coordinator's exchange takes (single requests out
# to the full map broadcast) for each cache start, for a join and for a kill
# -9, read from the coordinator's log lines ("exchange ... done in N ms").
# CACHES sets the cache count (default 100).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
CACHES=${CACHES:-100}
. tests/chaos/lib.sh
chaos_init
FL="--failure-detection-timeout ${FD_MS:-3000}"
all_members() {
    n=$1; shift
    for i in "$@"; do
        wait_metric "$i" ember_cluster_members "$n" && wait_metric "$i" ember_cluster_links $((n - 1)) ||
            return 1
    done
}
# times FROM: the exchange durations logged since line FROM of node 1's log.
exch_times() { tail -n +"$1" "$(ls "$CHAOS_TMP"/n1/emberd.*.log | head -1)" |
          sed -n 's/.*exchange .* done in \([0-9]*\) ms.*/\1/p'; }
lines() { wc -l < "$(ls "$CHAOS_TMP"/n1/emberd.*.log | head -1)"; }
stats() { sort -n | awk '{a[NR]=$1} END { if (NR) printf "%d exchanges, median %d ms, p90 %d ms, max %d ms", NR, a[int((NR+1)/2)], a[int(NR*0.9+0.5)], a[NR]; else printf "none" }'; }

echo "| nodes | caches | event | exchange time |"
echo "|---:|---:|---|---|"
for N in 3 5; do
    node_start 1 --bootstrap true $FL || finish
    i=2
    while [ $i -le $N ]; do node_start $i --seeds "$(node_ip 1):47100" $FL || finish; i=$((i + 1)); done
    list=$(seq 1 $N)
    all_members $N $list || { bad "$N nodes did not form"; finish; }
    l0=$(lines)
    node tests/chaos/cluster_pme.js make "$(node_addr 2)" "$CACHES" >/dev/null || { bad "caches"; finish; }
    wait_metric 1 ember_pme_map_exchange "$(( ($N << 32) + CACHES ))" || bad "last cache exchange"
    echo "| $N | 1..$CACHES | cache start | $(exch_times $((l0 + 1)) | stats) |"
    l0=$(lines)
    node_start $((N + 1)) --seeds "$(node_ip 1):47100" $FL || finish
    all_members $((N + 1)) $list $((N + 1)) || bad "join"
    wait_metric 1 ember_pme_map_exchange "$(( (($N + 1) << 32) ))" || bad "join exchange"
    echo "| $N -> $((N + 1)) | $CACHES | join | $(exch_times $((l0 + 1)) | stats) |"
    l0=$(lines)
    node_kill $((N + 1))
    all_members $N $list || bad "kill"
    wait_metric 1 ember_pme_map_exchange "$(( (($N + 2) << 32) ))" || bad "kill exchange"
    echo "| $((N + 1)) -> $N | $CACHES | kill -9 | $(exch_times $((l0 + 1)) | stats) |"
    [ -n "${PME_VERBOSE:-}" ] && grep -h "exchange .* done" "$CHAOS_TMP"/n1/emberd.*.log | tail -2
    for i in $list; do node_kill $i; done
    rm -rf "$CHAOS_TMP"/n*
done
ok "exchange bench ran"
finish
