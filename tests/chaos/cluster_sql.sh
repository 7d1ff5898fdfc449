#!/bin/sh
# cluster_sql.sh - SQL on a 3-node cluster of real processes
# (tests/chaos/cluster_sql.js says what is checked), then a table with
# backups=1 filled through node 1 answers whole through nodes 1 and 2 after
# node 3 is killed with -9.
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
