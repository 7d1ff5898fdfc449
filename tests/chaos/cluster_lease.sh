#!/bin/sh
# cluster_lease.sh - a member cut off from the majority stops serving: node 3
# of 3 loses every link to the others (iptables on loopback, both ways); it
# refuses cache operations with an error naming the lost lease and /health
# fails, within about one election timeout, while the majority goes on
# serving the keys its members own.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
CLI="$BUILD/ember-cli"

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) || finish
node_start 3 $(cluster_flags 3 1) || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_links 2 &&
        wait_metric "$i" ember_cluster_lease 1 || { bad "node $i did not join"; finish; }
done
"$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" create leased >/dev/null || bad "create"
"$CLI" -h "$(node_ip 3)" -p "$CHAOS_PORT" put leased int:1 one >/dev/null &&
    ok "node 3 serves with its lease" || bad "node 3 before the cut"

t0=$(date +%s%N)
net_cut 3 1 && net_cut 1 3 && net_cut 3 2 && net_cut 2 3 || { bad "iptables"; finish; }
wait_metric 3 ember_cluster_lease 0 &&
    ok "node 3 lost its lease once cut off ($(( ($(date +%s%N) - t0) / 1000000 )) ms after the cut, failure detection timeout ${CHAOS_FD_MS:-3000} ms; BENCHMARKS.md)" ||
    bad "node 3 kept its lease"
out=$("$CLI" -h "$(node_ip 3)" -p "$CHAOS_PORT" get leased int:1 2>&1)
case "$out" in *"no lease"*) ok "node 3 refuses cache operations: lease named in the error" ;;
    *) bad "node 3 answered without a lease: $out" ;; esac
code=$(curl -s -o "$CHAOS_TMP/health" -w '%{http_code}' "http://$(node_ip 3):8080/health")
[ "$code" != 200 ] && grep -q "no lease" "$CHAOS_TMP/health" &&
    ok "node 3's /health fails ($code): $(cat "$CHAOS_TMP/health")" || bad "/health $code"
# The majority keeps its lease and serves what its members own.
wait_metric 1 ember_cluster_lease 1 && wait_metric 2 ember_cluster_lease 1 &&
    ok "the majority keeps its leases" || bad "majority lease"
served=0
for k in 1 2 3 4 5 6 7 8 9 10; do
    "$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" --timeout 4000 put leased int:$k v >/dev/null 2>&1 &&
        served=$((served + 1))
done
[ "$served" -gt 0 ] && ok "the majority side served $served of 10 writes" ||
    bad "the majority served nothing"
net_heal
finish
