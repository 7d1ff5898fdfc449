#!/bin/sh
# cluster_group.sh - cluster-group discovery on 3 real emberd nodes: every
# node lists the same 3 node ids (CLUSTER_GROUP_GET_NODE_IDS / _INFO), the
# ids the nodes send in their handshakes, and the same thin endpoints
# (_GET_NODE_ENDPOINTS) - what a partition-aware client needs to find every
# node; a cache's partitions are spread over all 3; a clean stop leaves the
# others listing 2.  Through build/ember-cli cluster --json.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init

CLI="$BUILD/ember-cli"

members_all() {
    n=$1; shift
    for i in "$@"; do
        wait_metric "$i" ember_cluster_members "$n" && wait_metric "$i" ember_cluster_joined 1 ||
            { echo "node $i: members $(metric "$i" ember_cluster_members)"; return 1; }
    done
}

cl() { i=$1; shift; "$CLI" -h "$(node_ip "$i")" -p "$CHAOS_PORT" --json "$@"; }

# ids J: the sorted node ids in a cluster --json reply (the "nodes" part).
ids() { sed 's/"endpoints".*//' | grep -o '"id":"[^"]*"' | sort | tr '\n' ' '; }
# endpoints J: the sorted endpoints (id, port, addresses) of the reply.
endpoints() { sed 's/.*"endpoints":\[//; s/\],"details":.*//' | grep -o '{[^}]*}' | sort | tr '\n' ' '; }

# wait_listing I N: until node I's cluster listing has N nodes (it joins
# before the others' topology reaches it).
wait_listing() {
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        [ "$(cl "$1" cluster | ids | wc -w)" = "$2" ] && return 0
        sleep 0.1; t=$((t + 1))
    done
    return 1
}

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) || finish
node_start 3 $(cluster_flags 3 1) || finish
members_all 3 1 2 3 && ok "3 nodes form one topology" || bad "3 nodes did not form"
for i in 1 2 3; do wait_listing "$i" 3 || bad "node $i does not list 3 nodes"; done

ref_ids=$(cl 1 cluster | ids)
ref_ep=$(cl 1 cluster | endpoints)
[ "$(echo "$ref_ids" | wc -w)" = 3 ] && ok "node 1 lists 3 node ids" || bad "node 1 lists: $ref_ids"
[ "$(echo "$ref_ep" | grep -o '"port"' | wc -l)" = 3 ] && ok "node 1 lists 3 endpoints" ||
    bad "node 1 endpoints: $ref_ep"
for i in 2 3; do
    [ "$(cl "$i" cluster | ids)" = "$ref_ids" ] && ok "node $i lists the same 3 ids" ||
        bad "node $i lists $(cl "$i" cluster | ids), node 1 $ref_ids"
    [ "$(cl "$i" cluster | endpoints)" = "$ref_ep" ] && ok "node $i lists the same endpoints" ||
        bad "node $i endpoints $(cl "$i" cluster | endpoints)"
done

# Each node's handshake id is among the listed ids, marked local there, and
# its endpoint is its own thin address.
for i in 1 2 3; do
    hid=$(cl "$i" stats | grep -o '"node_id":"[^"]*"' | sed 's/"node_id"/"id"/')
    case "$ref_ids" in *"$hid"*) ok "node $i's handshake id is listed";;
        *) bad "node $i's handshake id $hid not in $ref_ids";; esac
    cl "$i" cluster | grep -q "$hid,\"consistent_id\":\"[^\"]*\",\"addresses\":\[\"$(node_ip "$i")\"\],\"port\":$CHAOS_PORT,\"order\":[0-9]*,\"local\":true" &&
        ok "node $i lists itself as local at its own address" ||
        bad "node $i's own entry: $(cl "$i" cluster)"
    echo "$ref_ep" | grep -q "$hid,\"port\":$CHAOS_PORT,\"addresses\":\[\"$(node_ip "$i")\"\]" &&
        ok "node $i's endpoint is $(node_addr "$i")" || bad "no endpoint for node $i in $ref_ep"
done

# A cache's partitions over the 3 nodes, the same from every node.
"$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" create grp >/dev/null || bad "create grp"
sum_parts() { grep -o '"partition_count":[0-9]*' | cut -d: -f2 | awk '{ s += $1; if ($1 > 0) n++ } END { print s "/" n }'; }
for i in 1 2 3; do
    got=$(cl "$i" cluster grp | sum_parts)
    [ "$got" = 1024/3 ] && ok "node $i: 1024 partitions over 3 nodes" ||
        bad "node $i: partitions total/owners $got"
done

node_term 3 && ok "node 3 exits 0 on SIGTERM" || bad "node 3 exit status $?"
members_all 2 1 2 && ok "2 members after a clean stop" || bad "node 3 still a member"
for i in 1 2; do
    wait_listing "$i" 2 && ok "node $i lists 2 nodes after the stop" || bad "node $i: $(cl "$i" cluster)"
    [ "$(cl "$i" cluster | endpoints | grep -o '"port"' | wc -l)" = 2 ] &&
        ok "node $i lists 2 endpoints after the stop" || bad "node $i: $(cl "$i" cluster | endpoints)"
done
finish
