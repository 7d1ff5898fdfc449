#!/bin/sh
# cluster_hist.sh - historical rebalancing: three persistent nodes (no
# checkpoints, so each WAL holds every update), a cache with 1 backup
# (FULL_SYNC), the set workload writing through every node.  Node 3 is
# killed (kill -9) while it writes, the workload goes on through nodes 1
# and 2, and node 3 restarts on its directory (checkpoints on from there).  Its partitions come back
# as what its WAL replayed plus the updates it missed, sent from the
# suppliers' logs - checked: it caught partitions up historically, took
# fewer entries than the partitions hold, and none whole (a copy whose
# claim the supplier cannot vouch for, such as one node 3 was primary of
# with writes in flight, would have loaded whole: counted, not failed).
# Then every acknowledged add of both runs is there through every node and
# every owner of every partition holds the same entries (idle-verify), and
# once a checkpoint has taken node 3's caught-up copies, its set of copies
# incomplete on disk is empty again.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=$(( ${CHAOS_SECONDS:-6} / 2 ))     # each of two runs: half the usual length
[ "$SECS" -lt 2 ] && SECS=2
. tests/chaos/lib.sh
chaos_init
PFL="--persistence true --wal-mode LOG_ONLY --checkpoint-frequency 0"

persistent_cluster3 1 $PFL || finish
ok "3 persistent nodes (LOG_ONLY, no checkpoints), a cache with 1 backup"

# run NAME NODES: the set workload for SECS seconds through NODES.
run() {
    "$BUILD/ember-chaos" run --nodes "$2" --workload set --cache chaos-set --clients 4 \
        --duration "$SECS" --timeout-ms 3000 --history "$CHAOS_TMP/$1.history" \
        >"$CHAOS_TMP/$1.run" 2>&1
}
acks() { awk '/ ok/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^ok/) print $i }' "$CHAOS_TMP/$1.run" | head -1; }

run before "$(nodes_list 1 2 3)" || bad "set (before): ember-chaos run exited $?"
node_kill 3
wait_metric 1 ember_cluster_members 2 || bad "node 3 was not failed"
run while_down "$(nodes_list 1 2)" || bad "set (node 3 down): ember-chaos run exited $?"
a1=$(acks before)
a2=$(acks while_down)
ok "writes: ${a1:-?} acknowledged with 3 nodes, ${a2:-?} more with node 3 down"

# Back with checkpoints on: once one begun after the catch-up completes,
# node 3's copies are whole on disk again (its partial set empties).
node_start 3 $(cluster_flags 3 1) $PFL --checkpoint-frequency 500 || finish
members_are 1 2 3 || bad "node 3 did not rejoin"
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] &&
      { [ "$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)$(metric 3 ember_rebal_loading)" != 000 ] ||
        [ "$(metric 3 ember_rebal_caught_up)" = 0 ]; }; do
    sleep 0.1; t=$((t + 1))
done
hist=$(metric 3 ember_rebal_historical)
upd=$(metric 3 ember_rebal_historical_updates_in)
ent=$(metric 3 ember_rebal_entries_in)
served=$(( $(metric 1 ember_rebal_historical_served) + $(metric 2 ember_rebal_historical_served) ))
whole=$(( $(metric 3 ember_rebal_caught_up) - ${hist:-0} ))
if [ "${hist:-0}" -gt 0 ] && [ "${upd:-0}" -gt 0 ] && [ "$served" -ge "$hist" ]; then
    ok "node 3 caught $hist partitions up from its suppliers' logs ($served answered so), $whole whole"
else
    bad "node 3 caught up no partition historically (historical ${hist:-?}, updates ${upd:-?}, served $served)"
    grep -i 'rebalanc' "$(eval echo \$CHAOS_LOG_3)" | tail -5
fi
held=$(( ${a1:-0} + ${a2:-0} ))
if [ "${ent:-0}" -lt "$held" ] && [ "${upd:-0}" -le "${a2:-0}" ]; then
    ok "node 3 took $ent entries ($upd of them updates from the logs), fewer than the $held its partitions hold"
else
    bad "node 3 took ${ent:-?} entries (${upd:-?} updates from the logs) for $held written"
fi

for h in before while_down; do
    if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1 2 3)" --workload set \
        --cache chaos-set --history "$CHAOS_TMP/$h.history" >"$CHAOS_TMP/$h.check" 2>&1; then
        ok "set ($h): $(grep '^check' "$CHAOS_TMP/$h.check")"
    else
        bad "set ($h): check failed"; cat "$CHAOS_TMP/$h.check"
    fi
done
pset="$CHAOS_TMP/n3/data/rebal-partial"
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$(stat -c %s "$pset" 2>/dev/null)" != 16 ]; do
    sleep 0.1; t=$((t + 1))
done
if [ "$(stat -c %s "$pset" 2>/dev/null)" = 16 ]; then
    ok "node 3's loaded copies are whole on disk after a checkpoint (its partial set is empty)"
else
    bad "node 3's partial set did not empty after checkpoints ($(stat -c %s "$pset" 2>/dev/null) bytes)"
fi
idle_verify "after the historical catch-up" chaos-set
finish
