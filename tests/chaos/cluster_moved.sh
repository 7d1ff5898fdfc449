#!/bin/sh
# cluster_moved.sh - partitions moved by rebalancing survive a power loss.
# Two persistent nodes (LOG_ONLY, a checkpoint every second) with a
# baseline hold a cache without backups; the set workload writes through
# both.  A third node (periodic checkpoints far apart) joins and is added
# to the baseline: a third of the partitions move to it, and the two
# others evict their copies, which their next checkpoints make final.  Then
# every node is killed at once (kill -9, as a power loss would), and the
# whole cluster restarts on its directories.  Every acknowledged add must be read
# back: a loaded copy owns its partition only once what it loaded is on
# its disk (its WAL does not log what a load applies; a checkpoint takes
# it), as in Ignite, where rebalanced partitions own after the checkpoint
# that follows.  Then the same power loss with writes in flight: the set
# workload through all three nodes, every node killed while it runs, the
# cluster restarted, and every add acknowledged before the kill is there
# (not under a sanitizer, where the first is enough to run that code).
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=$(( ${CHAOS_SECONDS:-6} / 3 ))     # the writes only fill the cache
[ "$SECS" -lt 2 ] && SECS=2
. tests/chaos/lib.sh
chaos_init
PFL="--persistence true --wal-mode LOG_ONLY --checkpoint-frequency 1000"
PFL3="--persistence true --wal-mode LOG_ONLY --checkpoint-frequency 600000"
cli() { "$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" "$@"; }

node_start 1 $(cluster_flags 1) $PFL || finish
node_start 2 $(cluster_flags 2 1) $PFL || finish
wait_metric 1 ember_cluster_members 2 && wait_metric 2 ember_cluster_members 2 ||
    { bad "nodes 1 and 2 did not form a cluster"; finish; }
cli state ACTIVE >/dev/null || { bad "activation"; finish; }
r=$(node tests/chaos/cluster_rebal.js put "$(node_addr 1)" chaos-set 0 0 0 2>&1) ||
    { bad "cache chaos-set: $r"; finish; }
cli cluster baseline set-current >/dev/null || { bad "baseline of nodes 1 and 2"; finish; }
"$BUILD/ember-chaos" run --nodes "$(nodes_list 1 2)" --workload set --cache chaos-set --clients 4 \
    --duration "$SECS" --timeout-ms 3000 --history "$CHAOS_TMP/set.history" \
    >"$CHAOS_TMP/set.run" 2>&1 || bad "set: ember-chaos run exited $?"
acked=$(awk '/ ok/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^ok/) print $i }' "$CHAOS_TMP/set.run" | head -1)
ok "2 persistent nodes, a cache without backups: ${acked:-?} adds acknowledged"

node_start 3 $(cluster_flags 3 1) $PFL3 || finish
wait_metric 1 ember_cluster_members 3 || { bad "node 3 did not join"; finish; }
cli cluster baseline set-current >/dev/null || { bad "baseline of the 3 nodes"; finish; }
# Rebalanced: node 3 loaded and owns its share, and nodes 1 and 2 evicted
# the copies they no longer own.
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
    [ "$(metric 3 ember_rebal_loaded)" -gt 0 ] 2>/dev/null &&
        [ "$(metric 1 ember_cluster_moving_partitions)$(metric 3 ember_cluster_moving_partitions)" = 00 ] &&
        [ $(( $(metric 1 ember_rebal_evicted) + $(metric 2 ember_rebal_evicted) )) -gt 0 ] && break
    sleep 0.1; t=$((t + 1))
done
loaded=$(metric 3 ember_rebal_loaded)
evicted=$(( $(metric 1 ember_rebal_evicted) + $(metric 2 ember_rebal_evicted) ))
if [ "${loaded:-0}" -gt 0 ] && [ "$evicted" -gt 0 ]; then
    ok "node 3 loaded $loaded partitions, nodes 1 and 2 evicted $evicted copies"
else
    bad "rebalancing to node 3 did not finish (loaded ${loaded:-?}, evicted $evicted)"
fi
# Two checkpoints of nodes 1 and 2 written since (one begun after this at
# least): their evictions are on disk.
for k in 1 2; do
    touch "$CHAOS_TMP/mark"
    for i in 1 2; do
        t=0
        while [ $t -lt $((CHAOS_WAIT * 10)) ] &&
              [ -z "$(find "$CHAOS_TMP/n$i/data" -name 'ckpt-*.ckpt' -newer "$CHAOS_TMP/mark")" ]; do
            sleep 0.1; t=$((t + 1))
        done
    done
done

# power_loss WHEN: every node killed at once, the whole cluster restarted on
# its directories, ACTIVE again once its baseline is back; then every
# acknowledged add of each history so far is read back.
HISTS=set
power_loss() {
    for i in 1 2 3; do node_kill $i; done
    node_start 1 $(cluster_flags 1) $PFL || finish
    node_start 2 $(cluster_flags 2 1) $PFL || finish
    node_start 3 $(cluster_flags 3 1) $PFL3 || finish
    members_are 1 2 3 || bad "the restarted nodes did not form a cluster"
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$(cli state 2>/dev/null)" != ACTIVE ]; do
        sleep 0.1; t=$((t + 1))
    done
    [ "$(cli state 2>/dev/null)" = ACTIVE ] && ok "the whole cluster restarted ($1), ACTIVE with its baseline" ||
        bad "state after the restart ($1): $(cli state 2>&1)"
    for h in $HISTS; do
        if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1 2 3)" --workload set --cache chaos-set \
                --history "$CHAOS_TMP/$h.history" >"$CHAOS_TMP/$h.check" 2>&1; then
            ok "$h, after the power loss $1: $(grep '^check' "$CHAOS_TMP/$h.check")"
        else
            bad "$h, after the power loss $1: $(grep '^check' "$CHAOS_TMP/$h.check" || tail -3 "$CHAOS_TMP/$h.check")"
        fi
    done
}
power_loss "after the move"
if [ -n "${EM_SANITIZER:-}" ]; then
    finish      # under a sanitizer, one power loss: the restart's code is the same
fi

# Once more with writes in flight: the set workload through all three, and
# every node killed at once while it runs.
"$BUILD/ember-chaos" run --nodes "$(nodes_list 1 2 3)" --workload set --cache chaos-set --clients 4 \
    --duration $((SECS + 2)) --timeout-ms 3000 --history "$CHAOS_TMP/live.history" \
    >"$CHAOS_TMP/live.run" 2>&1 &
cpid=$!
entries() {
    curl -s "http://$(node_ip 1):8080/metrics" |
        sed -n 's/^ember_cache_entries{cache="chaos-set"} \([0-9]*\)$/\1/p'
}
was=$(entries)
t=0                                 # until node 1 holds 2 000 more entries
while [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$(entries)" -lt $(( ${was:-0} + 2000 )) ] 2>/dev/null; do
    sleep 0.1; t=$((t + 1))
done
HISTS="set live"
for i in 1 2 3; do node_kill $i; done
wait $cpid
acked=$(awk '/ ok/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^ok/) print $i }' "$CHAOS_TMP/live.run" | head -1)
[ "${acked:-0}" -gt 0 ] && ok "writes in flight: ${acked} adds acknowledged before every node was killed" ||
    bad "no add acknowledged before the kill: $(tail -3 "$CHAOS_TMP/live.run")"
power_loss "under writes"
finish
