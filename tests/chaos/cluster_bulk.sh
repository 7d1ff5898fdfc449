#!/bin/sh
# cluster_bulk.sh - two survivors rebalance a lot of data to each other.
# Three in-memory nodes, a cache with 1 backup filled with BULK_KEYS
# (300 000; 60 000 under a sanitizer) int keys of 1 KiB, then node 3 is
# killed: nodes 1 and 2 each load node 3's share from the other at once,
# every partition's batches travelling both ways on their one link.  The
# link used to stop for good: each side stopped reading while its own output
# to the other was over the transport's soft cap, so neither queue drained;
# the nodes lost their leases and one was failed.  Checks: the two are
# rebalanced (no MOVING copy) with their leases, within CHAOS_WAIT; while
# they load, /metrics says how many entries are left to load
# (ember_rebal_entries_left: more than 0 and at most what node 3 held while
# the loads are held back by --cluster-rebal-hold, 0 at the end).
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
keys=${BULK_KEYS:-300000}
[ -z "${BULK_KEYS:-}" ] && [ -n "${EM_SANITIZER:-}" ] && keys=60000
# The loads wait while $HOLD exists: what is left to load is then seen
# for certain, not only when a poll happens to fall inside the loading.
HOLD="$CHAOS_TMP/rebal.hold"
start_three --cluster-rebal-hold "$HOLD"
r=$(node tests/chaos/cluster_rebal.js put "$(node_addr 1)" chaos-set 1 0 0 2>&1) ||
    { bad "cache chaos-set: $r"; finish; }
"$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" --connections 8 \
    --value-size 1024 --mix 0 --key-type int --cache chaos-set --keys "$keys" --ops 1 \
    --warmup 0 >"$CHAOS_TMP/prefill" 2>&1 || { bad "prefill: $(tail -3 "$CHAOS_TMP/prefill")"; finish; }
ok "$keys keys of 1 KiB in a cache with 1 backup"
: >"$HOLD"
node_kill 3
t=0 peak=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$peak" = 0 ]; do
    peak=$(( $(metric 1 ember_rebal_entries_left) + $(metric 2 ember_rebal_entries_left) ))
    sleep 0.1; t=$((t + 1))
done
rm -f "$HOLD"
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] &&
      ! { [ "$(metric 1 ember_cluster_members)$(metric 2 ember_cluster_members)" = 22 ] &&
          [ "$(metric 1 ember_cluster_moving_partitions)$(metric 2 ember_cluster_moving_partitions)" = 00 ] &&
          [ "$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)" = 00 ]; }; do
    left=$(( $(metric 1 ember_rebal_entries_left) + $(metric 2 ember_rebal_entries_left) ))
    [ "$left" -gt "$peak" ] && peak=$left
    sleep 0.1; t=$((t + 1))
done
state="members $(metric 1 ember_cluster_members)/$(metric 2 ember_cluster_members), leases $(metric 1 ember_cluster_lease)/$(metric 2 ember_cluster_lease), loaded $(metric 1 ember_rebal_loaded)/$(metric 2 ember_rebal_loaded), MOVING $(metric 1 ember_cluster_moving_partitions)/$(metric 2 ember_cluster_moving_partitions)"
if [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$(metric 1 ember_cluster_lease)$(metric 2 ember_cluster_lease)" = 11 ]; then
    ok "nodes 1 and 2 rebalanced node 3's share to each other in $((t / 10)) s ($state)"
else
    bad "nodes 1 and 2 did not rebalance ($state)"
fi
end=$(( $(metric 1 ember_rebal_entries_left) + $(metric 2 ember_rebal_entries_left) ))
[ "$peak" -gt 0 ] && [ "$peak" -le "$keys" ] && [ "$end" = 0 ] &&
    ok "/metrics: entries left to load seen at $peak at most, 0 once rebalanced" ||
    bad "entries left to load: $peak at most, $end at the end (of $keys keys)"
finish
