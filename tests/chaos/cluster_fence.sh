#!/bin/sh
# cluster_fence.sh - epoch fencing: a primary paused past the failure
# detection timeout is deposed while it has writes in flight (the fault hook
# holds back a share of the replication frames, so some are still unsent
# when it stops).  When it runs again it still believes it is the primary
# and sends, or resends, those updates with its old epoch; the other owners
# must refuse them (a deposed primary's update may be one the new primary
# never had) and catch up instead.  Checks: every acknowledged add of the
# set workload is there, and at the end every owner of every partition holds
# the same entries (idle-verify) - what an owner that applied a deposed
# primary's updates would break; and the deposed node is told it is
# segmented (the leader's NOT_MEMBER), serves nothing, and is restarted.
# (A planted build without the epoch check was tried against this and not
# caught: the few updates in flight at a pause had reached every owner
# before it, so nothing stale arrived after.  No checker claims it.)
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=${CHAOS_SECONDS:-8}
CHAOS_FD_MS=${CHAOS_FD_MS:-1500}
FAULT=${CHAOS_FAULT:-delay=40}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_rebal.js

# deposed SECONDS: node 2 or 3 paused until the other two failed it (they
# promote other owners), then resumed: it must find itself segmented (told
# by the leader) and serve nothing; then it is restarted and joins as a new
# member.  Until SECONDS passed.
deposed() {
    end=$(( $(date +%s) + $1 ))
    round=0
    while [ "$(date +%s)" -lt "$end" ]; do
        v=$(( 2 + round % 2 ))
        o=$(( 5 - v ))
        sleep 1                     # writes flowing, some held back by the hook
        node_pause $v
        t=0
        while [ $t -lt $((CHAOS_WAIT * 10)) ] && ! { [ "$(metric 1 ember_cluster_members)" = 2 ] &&
                                     [ "$(metric $o ember_cluster_members)" = 2 ]; }; do
            sleep 0.1; t=$((t + 1))
        done
        node_resume $v
        wait_metric $v ember_cluster_segmented 1 ||
            { echo "deposed: node $v was failed but does not say it is segmented"; return 1; }
        code=$(curl -s -o "$CHAOS_TMP/health" -w '%{http_code}' "http://$(node_ip $v):8080/health")
        [ "$code" != 200 ] && grep -q segmented "$CHAOS_TMP/health" ||
            { echo "deposed: node $v segmented, /health $code: $(cat "$CHAOS_TMP/health")"; return 1; }
        out=$("$BUILD/ember-cli" -h "$(node_ip $v)" -p "$CHAOS_PORT" get fence-set int:1 2>&1)
        case "$out" in *"not a member"*) ;;
            *) echo "deposed: segmented node $v answered a get: $out"; return 1 ;; esac
        SEGMENTED=$((SEGMENTED + 1))
        node_kill $v
        node_start $v $(cluster_flags $v 1) --cluster-fault "$FAULT" || return 1
        members_are 1 2 3 || { echo "deposed: the cluster did not come back"; return 1; }
        round=$((round + 1))
    done
    echo "deposed: $round pauses past the failure detection timeout, $SEGMENTED segmented"
}
SEGMENTED=0

for i in 1 2 3; do
    seed=""; [ $i -gt 1 ] && seed=1
    node_start $i $(cluster_flags $i $seed) --cluster-fault "$FAULT" || finish
done
members_are 1 2 3 || { bad "the cluster did not form"; finish; }
# One backup: the deposed primary's other owner becomes the primary, and the
# third node loads a copy from it; an update from the deposed one applied
# there afterwards would be on one copy only.
r=$(node $JS put "$(node_addr 1)" fence-set 1 0 0 2>&1) || { bad "cache fence-set: $r"; finish; }
ok "3 nodes, a cache with 1 backup (FULL_SYNC), failure detection ${CHAOS_FD_MS} ms, fault hook $FAULT"

hist="$CHAOS_TMP/set.history"
"$BUILD/ember-chaos" run --nodes "$(nodes_list 1 2 3)" --workload set --cache fence-set \
    --clients 8 --duration "$SECS" --timeout-ms 3000 --history "$hist" >"$CHAOS_TMP/set.run" 2>&1 &
cpid=$!
deposed "$SECS" >"$CHAOS_TMP/nemesis" 2>&1 || bad "the nemesis could not run: $(cat "$CHAOS_TMP/nemesis")"
wait $cpid
rc=$?
cat "$CHAOS_TMP/nemesis"
cat "$CHAOS_TMP/set.run"
[ $rc -eq 0 ] || bad "ember-chaos run exited $rc"
grep -q ' [1-9][0-9]* ok' "$CHAOS_TMP/set.run" || bad "no operation was acknowledged"
if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1 2 3)" --workload set --cache fence-set \
        --history "$hist" >"$CHAOS_TMP/set.check" 2>&1; then
    ok "set: $(grep '^check' "$CHAOS_TMP/set.check")"
else
    bad "set: check failed"; cat "$CHAOS_TMP/set.check"
fi
chaos_row deposed set
fenced=0 notices=0
for i in 1 2 3; do
    f=$(metric $i ember_repl_refused); fenced=$((fenced + ${f:-0}))
    f=$(metric $i ember_repl_fence_notices); notices=$((notices + ${f:-0}))
done
echo "# updates refused by owners (deposed primaries' among them): $fenced;" \
    "copies told by a deposed primary to catch up: $notices"

members_are 1 2 3 || bad "the cluster did not settle"
t=0
while [ $t -lt 120 ] && [ "$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)$(metric 3 ember_rebal_loading)" != 000 ]; do
    sleep 0.5; t=$((t + 1))
done
idle_verify "after the pauses" fence-set
finish
