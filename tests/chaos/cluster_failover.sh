#!/bin/sh
# cluster_failover.sh - failover on real processes while the real Node.js
# client writes throughout (tests/chaos/cluster_repl.js write: PARTITIONED
# caches in FULL_SYNC, one key after another, each retried until
# acknowledged), on 5 nodes:
#   1. writers on a cache with 1 backup and one with 2; kill -9 of a node
#      that is neither the coordinator nor the one the clients write
#      through; the 1-backup writer stops, its keys are checked, and the
#      node restarts (it rejoins as a new member);
#   2. kill -9 of two nodes at the same instant - as many as the cache has
#      backups - neither the coordinator nor the clients' node;
#   3. once the metadata group is down to 3 voters, kill -9 of the
#      coordinator (its leader).
# After each: the writes went on, every acknowledged key is read back with
# its value through every survivor, and the owners of every partition agree
# (idle-verify).  The clients never see the failovers: a write that met one
# is mapped again and retried inside the cluster.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
CHAOS_FD_MS=${CHAOS_FD_MS:-1000}    # failovers within seconds (cluster_flags)
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_repl.js

node_start 1 $(cluster_flags 1) || finish
for i in 2 3 4 5; do node_start $i $(cluster_flags $i 1) || finish; done
# members N: every node of the list $up sees N members and has joined.
members() {
    for i in $up; do
        wait_metric $i ember_cluster_members $1 && wait_metric $i ember_cluster_joined 1 ||
            { bad "node $i does not see $1 members"; finish; }
    done
}
up="1 2 3 4 5"
members 5
ok "5 nodes joined"

# The coordinator (the metadata group's leader), the node the clients write
# through, and the victims: the others.
lead=""
for i in 1 2 3 4 5; do [ "$(metric $i ember_cluster_leader)" = 1 ] && lead=$i; done
[ -n "$lead" ] || { bad "no node says it leads the metadata group"; finish; }
via="" victims=""
for i in 1 2 3 4 5; do
    [ $i = "$lead" ] && continue
    if [ -z "$via" ]; then via=$i; else victims="$victims $i"; fi
done
set -- $victims
one=$1 two="$2 $3" rest=$1

lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
# acked_past FILE N: until the writer of FILE has N acknowledged keys (bounded).
acked_past() {
    t=0
    while [ "$(lines "$1")" -lt "$2" ] && [ $t -lt $((CHAOS_WAIT * 20)) ]; do
        sleep 0.05; t=$((t + 1))
    done
    [ "$(lines "$1")" -ge "$2" ]
}
# writer NAME BACKUPS: a client writing the cache NAME through node $via
# until $CHAOS_TMP/NAME.stop exists (300 s at most); acknowledged keys in
# $CHAOS_TMP/NAME.
writer() {
    WRITE_CACHE=$1 WRITE_BACKUPS=$2 WRITE_STOP="$CHAOS_TMP/$1.stop" \
        node "$JS" write "$CHAOS_TMP/$1" 300 "$(node_addr $via)" >"$CHAOS_TMP/$1.out" 2>&1 &
    eval "PID_$1=$!"
}
# stop_check NAME WHEN NODES...: stop NAME's writer, then read every key it
# had acknowledged through each of the nodes.
stop_check() {
    name=$1 when=$2
    shift 2
    touch "$CHAOS_TMP/$name.stop"
    if wait "$(eval echo "\$PID_$name")"; then
        sed 's/^ok /ok   writer: /' "$CHAOS_TMP/$name.out"
        PASS=$((PASS + $(grep -c '^ok ' "$CHAOS_TMP/$name.out")))
    else
        cat "$CHAOS_TMP/$name.out"; bad "the writer of $name failed"
    fi
    eps=""
    for i in "$@"; do eps="$eps $(node_addr $i)"; done
    if out=$(WRITE_CACHE=$name node "$JS" check "$CHAOS_TMP/$name" $eps 2>&1); then
        echo "$out" | sed "s/^ok /ok   $name: /"
        PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
    else
        echo "$out"; bad "$name: acknowledged keys after $when"
    fi
}
verify() {
    r=$("$BUILD/ember-cli" -h "$(node_ip $via)" -p "$CHAOS_PORT" idle-verify "$@" 2>&1) &&
        ok "idle-verify: the owners of every partition agree ($(echo "$r" | tail -1))" ||
        { bad "idle-verify of $*:"; echo "$r" | head -20; }
}

writer fo1 1
writer fo2 2
acked_past "$CHAOS_TMP/fo1" 200 && acked_past "$CHAOS_TMP/fo2" 200 ||
    bad "the writers did not get going"

# 1. One node, under both caches.
b1=$(lines "$CHAOS_TMP/fo1") b2=$(lines "$CHAOS_TMP/fo2")
node_kill $one
up=$(echo " 1 2 3 4 5 " | sed "s/ $one / /")
members 4
acked_past "$CHAOS_TMP/fo1" $((b1 + 200)) && acked_past "$CHAOS_TMP/fo2" $((b2 + 200)) &&
    ok "kill -9 of node $one: the writes of both caches went on" ||
    bad "writes after node $one's kill: fo1 $(lines "$CHAOS_TMP/fo1"), fo2 $(lines "$CHAOS_TMP/fo2")"
stop_check fo1 "node $one's kill" $up
verify fo1
node_start $one $(cluster_flags $one $via) || finish
up="1 2 3 4 5"
members 5
ok "node $one restarted and rejoined"

# 2. Two nodes at once: each partition of fo2 keeps at least one of its 3
# copies.
before=$(lines "$CHAOS_TMP/fo2")
for v in $two; do kill -9 "$(node_pid $v)"; done
for v in $two; do node_kill $v; done
up="$lead $via $rest"
members 3
acked_past "$CHAOS_TMP/fo2" $((before + 200)) &&
    ok "kill -9 of nodes $two at once ($before keys acknowledged): the writes went on" ||
    bad "no writes after the double kill ($(lines "$CHAOS_TMP/fo2") acknowledged)"

# 3. The coordinator, once the survivors' group has 3 voters (2 of 5 would
# be no majority; the group shrinks to 3 when the two dead are failed) and
# rebalancing has given every partition its 3 copies again: a third kill
# before that is more failures than the cache has backups.
wait_metric $lead ember_cluster_voters 3 || bad "the metadata group did not shrink to 3 voters"
# No MOVING copy means rebalancing is done only once each survivor holds the
# map of an exchange on the topology after the double kill (its major
# version): before that exchange decides, no copy is MOVING yet either.
major=$(metric $lead ember_cluster_topology_major)
for i in $up; do
    t=0
    until e=$(metric $i ember_pme_map_exchange) && [ $(( ${e:-0} >> 32 )) -ge "${major:-1}" ]; do
        t=$((t + 1))
        [ $t -lt $((CHAOS_WAIT * 10)) ] || { bad "node $i: no exchange after the double kill"; break; }
        sleep 0.1
    done
    wait_metric $i ember_cluster_moving_partitions 0 || bad "node $i: rebalancing did not finish"
done
before=$(lines "$CHAOS_TMP/fo2")
node_kill $lead
up="$via $rest"
members 2
nl=""
for i in $up; do [ "$(metric $i ember_cluster_leader)" = 1 ] && nl=$i; done
acked_past "$CHAOS_TMP/fo2" $((before + 200)) &&
    ok "kill -9 of the coordinator (node $lead; node ${nl:-?} leads now): the writes went on" ||
    bad "no writes after the coordinator's kill ($(lines "$CHAOS_TMP/fo2") acknowledged)"
stop_check fo2 "all the kills" $up
settled=1
for i in $up; do
    wait_metric $i ember_rebal_catching_up 0 && wait_metric $i ember_rebal_entries_left 0 || {
        settled=0
        bad "node $i: $(metric $i ember_rebal_catching_up) copies catching up, $(metric $i ember_rebal_entries_left) entries left"
    }
done
[ $settled = 1 ] && ok "no copy left catching up or loading on nodes $up"
verify fo2
finish
