#!/bin/sh
# cluster_sql.sh - SQL on a 3-node cluster of real processes
# (tests/chaos/cluster_sql.js says what is checked), then a table with
# backups=1 filled through node 1 is counted through node 1 over and over
# while node 3 is paused (shorter than the failure detection timeout) and
# node 2 is cut off by iptables: every answer exact or an error, never a
# wrong count; then it answers whole through nodes 1 and 2 after node 3 is
# killed with -9.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
ROWS=${CHAOS_SQL_ROWS:-300}
. tests/chaos/lib.sh
chaos_init

start_three

if out=$(node tests/chaos/cluster_sql.js "$ROWS" "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)" 2>&1); then
    echo "$out" | sed 's/^ok /ok   node client: /'
    PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
else
    echo "$out"
    bad "SQL through three nodes"
fi

sqljs() { node tests/chaos/cluster_sql.js "$@" 2>&1; }
if out=$(sqljs --fill kept "$ROWS" "$(node_addr 1)"); then ok "${out#ok }"; else echo "$out"; bad "fill"; fi
sqljs --counts kept "$ROWS" 8 "$(node_addr 1)" >"$CHAOS_TMP/counts" &
cpid=$!
sleep 1
node_pause 3; sleep 2; node_resume 3
members_are 1 2 3 || bad "the cluster did not come back after the pause"
net_cut 2 1 && net_cut 1 2 && net_cut 2 3 && net_cut 3 2 || bad "iptables"
sleep 2
net_heal
members_are 1 2 3 || bad "the cluster did not come back after the cut"
if wait $cpid; then
    ok "counts through node 1 while node 3 paused and node 2 cut off: $(sed 's/^ok //' "$CHAOS_TMP/counts")"
else
    cat "$CHAOS_TMP/counts"; bad "a count through node 1 under the pause and the cut"
fi
for i in 1 2 3; do
    if out=$(sqljs --count kept "$ROWS" "$(node_addr "$i")"); then ok "after both: ${out#ok }"
    else echo "$out"; bad "rows through node $i after the pause and the cut"; fi
done
# COUNT(*), SUM(v) FROM kept is a whole-table aggregate: node 3 computed it
# over the partitions it fetched, without SQLite's row loop (sq_agg.c).
n=$(metric 3 ember_sql_direct_aggregates_total)
if [ "${n:-0}" -ge 1 ]; then ok "node 3 answered $n whole-table aggregates over the scan"
else bad "node 3 answered no whole-table aggregate over the scan (${n:-no metric})"; fi
node_kill 3
for i in 1 2; do
    wait_metric "$i" ember_cluster_members 2 || bad "node $i still counts node 3"
done
for i in 1 2; do
    if out=$(sqljs --count kept "$ROWS" "$(node_addr "$i")"); then
        ok "after kill -9 of node 3: ${out#ok }"
    else
        echo "$out"
        bad "rows through node $i after node 3 was killed"
    fi
done
finish
