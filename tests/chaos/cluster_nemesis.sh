#!/bin/sh
# cluster_nemesis.sh - the workloads on a 3-node cluster under the nemeses:
# a cache with 2 backups (FULL_SYNC), clients spread over every node, and,
# one at a time, a kill -9 of a node (restarted: it rejoins as a new member
# and rebalancing brings its copies back), a SIGSTOP longer than the lease,
# an iptables cut of one node from the other two, the same cut of whichever
# node leads the metadata group (the coordinator), and a one-way cut (node
# 2 or 3 hears the others, they do not hear it).  Checks: every
# acknowledged add of the set workload is there afterwards (0 lost with at
# most `backups` owners down), the register history is linearizable, and
# at the end every owner of every partition holds the same entries with the
# same update counter (idle-verify).
# CHAOS_SECONDS sets each workload's length (`make chaos` runs it longer);
# CHAOS_WORKLOADS the workloads to run (default: set register).
# CHAOS_BASELINE=1: the same with a baseline set to the three nodes (a killed
# node keeps its partitions while down and loads them back when it returns).
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=${CHAOS_SECONDS:-8}
NEMESES_ALL=${CHAOS_NEMESES:-kill pause cut leader oneway}
REGISTER_NEMESES=${CHAOS_REGISTER_NEMESES:-$NEMESES_ALL}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_rebal.js

# leader_node: the node (1-3) that leads the metadata group.
leader_node() {
    for i in 1 2 3; do
        [ "$(metric $i ember_cluster_leader)" = 1 ] && { echo $i; return 0; }
    done
    return 1
}

# nemesis SECONDS: one fault at a time on node 2 or 3 until SECONDS passed;
# the cluster is whole again (3 members, leases held) after each.
nemesis() {
    end=$(( $(date +%s) + $1 ))
    round=0
    while [ "$(date +%s)" -lt "$end" ]; do
        v=$(( 2 + round % 2 ))
        set -- $NEMESES
        k=$(( (round / 2) % $# + 1 ))
        eval "kind=\${$k}"
        case $kind in
            kill) node_kill $v; node_start $v $(cluster_flags $v 1) || return 1 ;;
            pause) node_pause $v; sleep 2; node_resume $v ;;
            cut) net_cut $v 1 && net_cut 1 $v && o=$(( 5 - v )) && net_cut $v $o && net_cut $o $v ||
                   return 1
               # Node v is a minority of one until the heal: no write may be
               # acknowledged through it meanwhile (index v-1 in --nodes).
               from=$("$BUILD/ember-chaos" now)
               sleep 2
               echo "$((v - 1)) $from $("$BUILD/ember-chaos" now)" >>"$WINDOWS"
               net_heal ;;
            leader)
               l=$(leader_node) || { echo "nemesis: no leader"; return 1; }
               for o in 1 2 3; do
                   [ "$o" = "$l" ] || { net_cut "$l" "$o" && net_cut "$o" "$l"; } || return 1
               done
               from=$("$BUILD/ember-chaos" now)
               sleep 2
               echo "$((l - 1)) $from $("$BUILD/ember-chaos" now)" >>"$WINDOWS"
               net_heal ;;
            oneway)
               # Its frames are lost, the others' reach it: it may keep its
               # lease, but can get no write acknowledged by the others.
               o=$(( 5 - v ))
               net_cut $v 1 && net_cut $v $o || return 1
               from=$("$BUILD/ember-chaos" now)
               sleep 2
               echo "$((v - 1)) $from $("$BUILD/ember-chaos" now)" >>"$WINDOWS"
               net_heal ;;
        esac
        members_are 1 2 3 || { echo "nemesis: the cluster did not come back"; return 1; }
        round=$((round + 1))
    done
    echo "nemesis: $round faults"
}

run_workload() {
    w=$1
    NEMESES=$2
    hist="$CHAOS_TMP/$w.history"
    WINDOWS="$CHAOS_TMP/$w.windows"
    : >"$WINDOWS"
    "$BUILD/ember-chaos" run --nodes "$(nodes_list 1 2 3)" --workload "$w" --cache "chaos-$w" \
        --clients 4 --duration "$SECS" --timeout-ms 3000 --history "$hist" \
        >"$CHAOS_TMP/$w.run" 2>&1 &
    cpid=$!
    nemesis "$SECS" || bad "$w: nemesis could not run"
    wait $cpid
    rc=$?
    echo "# $w under: $NEMESES"
    cat "$CHAOS_TMP/$w.run"
    [ $rc -eq 0 ] || { bad "$w: ember-chaos run exited $rc"; return; }
    if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1 2 3)" --workload "$w" \
        --cache "chaos-$w" --history "$hist" --windows "$WINDOWS" >"$CHAOS_TMP/$w.check" 2>&1; then
        ok "$w: $(grep '^check' "$CHAOS_TMP/$w.check"); $(grep '^minority' "$CHAOS_TMP/$w.check")"
    else
        bad "$w: check failed"; cat "$CHAOS_TMP/$w.check"
    fi
    chaos_row "$(echo $NEMESES | tr ' ' '+')" "$w"
    grep -q ' [1-9][0-9]* ok' "$CHAOS_TMP/$w.run" || bad "$w: no operation was acknowledged"
}

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) || finish
node_start 3 $(cluster_flags 3 1) || finish
members_are 1 2 3 || { bad "the cluster did not form"; finish; }
r=$(node $JS put "$(node_addr 1)" chaos-set 2 0 0 2>&1) || { bad "cache chaos-set: $r"; finish; }
# The register reads from primaries only: a read from a backup may see a
# write one copy applied before every copy acknowledged it, and a read on
# another copy then goes back in time (ATOMIC caches, as in Ignite).
r=$(node $JS put "$(node_addr 1)" chaos-register 2 0 0 primary 2>&1) ||
    { bad "cache chaos-register: $r"; finish; }
ok "3 nodes, caches with 2 backups (FULL_SYNC)"
if [ "${CHAOS_BASELINE:-0}" = 1 ]; then
    r=$("$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster baseline set-current 2>&1) &&
        ok "baseline set to the 3 nodes" || { bad "baseline: $r"; finish; }
fi
for w in ${CHAOS_WORKLOADS:-set register}; do
    case $w in
        register) run_workload register "$REGISTER_NEMESES" ;;
        set) run_workload set "$NEMESES_ALL" ;;
        *) bad "CHAOS_WORKLOADS: no workload $w (set, register)" ;;
    esac
done
# The final check: every owner of every partition holds the same entries.
members_are 1 2 3 || bad "the cluster did not settle"
t=0
while [ $t -lt 60 ] && [ "$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)$(metric 3 ember_rebal_loading)" != 000 ]; do
    sleep 0.5; t=$((t + 1))
done
idle_verify "after the faults" chaos-set chaos-register
finish
