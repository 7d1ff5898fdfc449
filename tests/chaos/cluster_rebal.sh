#!/bin/sh
# cluster_rebal.sh - rebalancing on real processes: a cache with one backup
# on 3 nodes; a 4th joins while a client writes; the new node loads its
# partitions (MOVING, then owner), the copies no ideal owner needs are
# dropped, and every acknowledged key is readable through the new node with
# exactly two copies in all, on different machines (excludeNeighbors, with
# host ids), and a 1.7.0 client polling a member is told
# of every topology change in its reply headers; then a kill -9: the
# survivors restore the second copy of what the dead node held, and every
# key is still there.  Then the baseline (ember-cli cluster baseline): a
# node outside it gets no partitions until it is added; a baseline node
# that dies keeps its partitions (nothing moves) and gets them back when it
# returns; an online node cannot be removed, an offline one can, and its
# partitions then move; with baseline_auto_adjust the coordinator adds a
# new member by itself.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
N=${CHAOS_REBAL_KEYS:-3000}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_rebal.js
# neighbours I...: 0 if every partition of rb has its two copies (primary,
# backup) on nodes of different host ids (HOST_<i>), per node 1's view.
neighbours() {
    "$BUILD/ember-cli" --json -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster rb >"$CHAOS_TMP/nb.json" ||
        return 1
    hosts=""
    for i in "$@"; do hosts="$hosts $(eval echo "\$HOST_$i")"; done
    node -e '
const d = JSON.parse(require("fs").readFileSync(process.argv[1])).details.caches[0];
const hosts = process.argv[2].trim().split(" ");
let bad = 0;
for (let p = 0; p < d.partitions; p++) {
    const h = d.nodes.map((n, i) => "PB".includes(n.cells[p]) ? hosts[i] : null).filter((x) => x);
    if (h.length !== 2 || h[0] === h[1]) bad++;
}
console.log(bad + " of " + d.partitions);
process.exit(bad ? 1 : 0);
' "$CHAOS_TMP/nb.json" "$hosts"
}

# entries I: node I's entries of cache rb.
entries() { curl -s --max-time 5 "http://$(node_ip "$1"):8080/metrics" 2>/dev/null |
            awk '$1 == "ember_cache_entries{cache=\"rb\"}" { print $2; exit }'; }
# copies_are WANT I...: wait until the nodes hold WANT entries of rb in all
# and none of them is loading.
copies_are() {
    want=$1; shift
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        sum=0; busy=0
        for i in "$@"; do
            e=$(entries "$i"); sum=$((sum + ${e:-0}))
            [ "$(metric "$i" ember_rebal_loading)" = 0 ] || busy=1
        done
        [ $busy = 0 ] && [ $sum = "$want" ] && return 0
        sleep 0.2; t=$((t + 2))
    done
    echo "# copies: $sum of $want (busy $busy)"
    return 1
}

# excludeNeighbors: nodes 1 and 2 count as one machine, 3 and 4 as another,
# so every partition keeps a copy on each (until a machine has no node).
HOST_1=hostA; HOST_2=hostA; HOST_3=hostB; HOST_4=hostB
nb() { echo "--exclude-neighbors true --host-id $(eval echo "\$HOST_$1")"; }
node_start 1 $(cluster_flags 1) $(nb 1) || finish
node_start 2 $(cluster_flags 2 1) $(nb 2) || finish
node_start 3 $(cluster_flags 3 1) $(nb 3) || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_links 2 ||
        { bad "node $i did not join"; finish; }
done
# Batches of one entry (rebalanceBatchSize 32 bytes), two sent ahead of the
# demands (rebalanceBatchesPrefetchCount, as by default): every partition
# moves in several batches, the stream's sequence and its prefetch at work.
r=$(REBAL_BATCH=32 REBAL_PREFETCH=2 node $JS put "$(node_addr 1)" rb 1 0 "$N" 2>&1)
[ "${r%% retried*}" = "acked $N failed 0" ] && ok "$N keys written, one backup each" || bad "first writes: $r"
copies_are $((2 * N)) 1 2 3 && ok "two copies of every key on three nodes" || bad "copies before the join"

# A 4th node joins while a client writes, and a partition-aware client
# (protocol 1.7.0) polls node 1 meanwhile.
"$BUILD/ember-chaos" topology --nodes "$(node_addr 1)" --duration 60 >"$CHAOS_TMP/topo" 2>&1 &
tpid=$!
node_start 4 $(cluster_flags 4 1) $(nb 4) || finish
node $JS put "$(node_addr 2)" rb 1 "$N" $((2 * N)) >"$CHAOS_TMP/w2" 2>"$CHAOS_TMP/w2.err" &
wpid=$!
for i in 1 2 3 4; do wait_metric "$i" ember_cluster_members 4 || bad "node $i: 4 members"; done
wait $wpid
acked=$(awk '{print $2}' "$CHAOS_TMP/w2")
[ "$acked" = "$N" ] && ok "writes during the join: $(cat "$CHAOS_TMP/w2")" ||
    bad "writes during the join: $(cat "$CHAOS_TMP/w2") $(head -3 "$CHAOS_TMP/w2.err")"
copies_are $((4 * N)) 1 2 3 4 && ok "after rebalancing: two copies of each of $((2 * N)) keys" ||
    bad "copies after the join"
# The switch follows the last load's report (waits: the copies can add up
# a moment before node 4 installs the switched topology).
t=0
until mn=$(metric 4 ember_cluster_topology_minor); [ "${mn:-0}" -gt 0 ] || [ $t -ge $((CHAOS_WAIT * 10)) ]; do
    sleep 0.1; t=$((t + 1))
done
[ "${mn:-0}" -gt 0 ] && ok "the affinity switched (topology $(metric 4 ember_cluster_topology_major).$mn: clients refetch partitions)" ||
    bad "no affinity switch after rebalancing (minor '$mn')"
# The polling client was told of each change in a reply header
# (AFFINITY_TOPOLOGY_CHANGED), up to the version node 1 is at now.
want="$(metric 1 ember_cluster_topology_major).$(metric 1 ember_cluster_topology_minor)"
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && ! grep -qx "topology $want" "$CHAOS_TMP/topo"; do
    sleep 0.1; t=$((t + 1))
done
kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
first=$(head -1 "$CHAOS_TMP/topo"); seen=$(grep -c '^topology ' "$CHAOS_TMP/topo")
grep -qx "topology $want" "$CHAOS_TMP/topo" && [ "$seen" -ge 2 ] &&
    ok "a 1.7.0 client's reply headers told it of $seen topology changes, from ${first#topology } to $want" ||
    bad "the 1.7.0 client saw: $(tr '\n' ' ' <"$CHAOS_TMP/topo") (node 1 at $want)"
wait_metric 4 'ember_cluster_cache_moving_partitions{cache="rb"}' 0 &&
    ok "/metrics: cache rb has 0 partitions left to move" ||
    bad "cache rb moving partitions: '$(metric 4 'ember_cluster_cache_moving_partitions{cache="rb"}')'"
# The coordinator logs the end of the cache's rebalancing.
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] &&
      ! cat "$CHAOS_TMP"/n*/emberd.*.log | grep -q "rebalancing: cache 'rb' finished"; do
    sleep 0.1; t=$((t + 1))
done
fin=$(cat "$CHAOS_TMP"/n*/emberd.*.log | grep -c "rebalancing: cache 'rb' finished")
[ "$fin" -ge 1 ] && ok "the coordinator logged: $(cat "$CHAOS_TMP"/n*/emberd.*.log |
    grep -m1 "rebalancing: cache 'rb' finished" | cut -d' ' -f3-)" ||
    bad "no log line for the end of cache rb's rebalancing"
bo=$(( $(metric 1 ember_rebal_batches_out) + $(metric 2 ember_rebal_batches_out) + $(metric 3 ember_rebal_batches_out) ))
ld=$(metric 4 ember_rebal_loaded)
[ "$bo" -gt $((2 * ${ld:-0})) ] && ok "the cache's batch size honoured: $bo batches for $ld partitions" ||
    bad "batches: $bo for ${ld:-?} partitions (batches of one entry expected)"
r=$(neighbours 1 2 3 4) && ok "excludeNeighbors: every partition's two copies on different machines ($r sharing one)" ||
    bad "excludeNeighbors: $r partitions with both copies on one machine"
e4=$(entries 4)
[ "${e4:-0}" -gt 0 ] && ok "the new node holds $e4 entries (loaded: $(metric 4 ember_rebal_loaded) partitions)" ||
    bad "the new node holds nothing"
[ "$(metric 1 ember_rebal_evicted)$(metric 2 ember_rebal_evicted)$(metric 3 ember_rebal_evicted)" != 000 ] &&
    ok "old owners dropped the copies they no longer hold" || bad "nothing evicted"
r=$(node $JS check "$(node_addr 4)" rb 0 $((2 * N)) 2>&1)
[ "$r" = "ok $((2 * N)) missing 0 wrong 0" ] && ok "every key readable through the new node" ||
    bad "reads through node 4: $r"

# A kill -9: the second copies of what node 2 held come back on the others.
node_kill 2
for i in 1 3 4; do wait_metric "$i" ember_cluster_members 3 || bad "node $i: 3 members"; done
copies_are $((4 * N)) 1 3 4 && ok "after kill -9: two copies again on the three survivors" ||
    bad "copies after the kill"
# Node 1, the coordinator, is the only node left on its machine: it loads a
# copy of half the partitions, and its own reports promote them.
wait_metric 1 'ember_cluster_cache_moving_partitions{cache="rb"}' 0 &&
    ok "after kill -9: every copy owned, the coordinator's own loads too" ||
    bad "after the kill: $(metric 1 'ember_cluster_cache_moving_partitions{cache="rb"}') partitions still moving"
r=$(node $JS check "$(node_addr 3)" rb 0 $((2 * N)) 2>&1)
[ "$r" = "ok $((2 * N)) missing 0 wrong 0" ] && ok "no acknowledged key lost" || bad "reads after the kill: $r"
"$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" idle-verify rb >"$CHAOS_TMP/verify" 2>&1 &&
    ok "idle-verify: every partition's owners hold the same entries" ||
    { bad "idle-verify after rebalancing:"; cat "$CHAOS_TMP/verify"; }
# ---- the baseline ----
CLI="$BUILD/ember-cli"
bl() { "$CLI" --json -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster baseline "$@"; }
cid() { echo "$(node_ip "$1"):47100"; }
# cells_of I: node I's heat-map column of cache rb, per node 1's view.
cells_of() {
    "$CLI" --json -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster rb 2>/dev/null | node -e '
const j = JSON.parse(require("fs").readFileSync(0)).details;
const m = j.nodes.find((x) => x.consistent_id === process.argv[1]);
const n = m && j.caches[0].nodes.find((x) => x.id === m.id);
console.log(n ? n.cells : "none");' "$(cid "$1")"
}
# settled I...: the nodes hold the same full map, of an exchange of the
# topology node I is at now (not one before it), and nothing is MOVING in it.
settled() {
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        want=$(( ($(metric "$1" ember_cluster_topology_major) << 32) | $(metric "$1" ember_cluster_topology_minor) ))
        [ "$(metric "$1" ember_pme_map_exchange)" -ge "$want" ] 2>/dev/null && break
        sleep 0.1; t=$((t + 1))
    done
    maps_agree "$@" && wait_metric "$1" 'ember_cluster_cache_moving_partitions{cache="rb"}' 0
}
r=$(bl) && echo "$r" | grep -q '"set":false' && ok "no baseline at first: partitions follow the members" ||
    bad "baseline show: $r"
r=$(bl set-current) && [ "$(echo "$r" | grep -o '"baseline":true,"online":true' | wc -l)" = 3 ] &&
    ok "baseline set to the 3 members" || bad "baseline set-current: $r"
node_start 5 $(cluster_flags 5 1) $(nb 4) || finish
for i in 1 3 4 5; do wait_metric "$i" ember_cluster_members 4 || bad "node $i: 4 members"; done
settled 1 3 4 5
c5=$(cells_of 5)
[ -n "$c5" ] && [ "$c5" != none ] && [ -z "$(echo "$c5" | tr -d .)" ] && [ "$(entries 5)" = 0 ] &&
    ok "a node outside the baseline holds no partition" || bad "node 5 outside the baseline: cells '$c5', entries $(entries 5)"
r=$(bl add "$(cid 5)") && echo "$r" | grep -q "\"id\":\"$(cid 5)\",\"baseline\":true" &&
    ok "node 5 added to the baseline" || bad "baseline add: $r"
# The add returns once applied on node 1; the exchange it starts makes node
# 5 a MOVING copy right after: wait for its first entries, then the copies.
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
    e5=$(entries 5); [ "${e5:-0}" = 0 ] || break
    sleep 0.1; t=$((t + 1))
done
[ "$(entries 5)" -gt 0 ] 2>/dev/null && copies_are $((4 * N)) 1 3 4 5 &&
    ok "added: node 5 loads its partitions ($(entries 5) entries), two copies of each key" ||
    bad "after adding node 5: entries $(entries 5)"
settled 1 3 4 5 || bad "no settled map after adding node 5"
e3=$(entries 3)
node_kill 3
for i in 1 4 5; do wait_metric "$i" ember_cluster_members 3 || bad "node $i: 3 members"; done
settled 1 4 5; s=0; for i in 1 4 5; do s=$((s + $(entries "$i"))); done
[ "$s" = $((4 * N - e3)) ] && [ "$(metric 1 ember_rebal_loading)$(metric 4 ember_rebal_loading)$(metric 5 ember_rebal_loading)" = 000 ] &&
    ok "a baseline node killed: its partitions stay its own, nothing moves ($s copies left of $((4 * N)))" ||
    bad "after killing baseline node 3: $s copies (want $((4 * N - e3)))"
r=$(node $JS check "$(node_addr 4)" rb 0 $((2 * N)) 2>&1)
[ "$r" = "ok $((2 * N)) missing 0 wrong 0" ] && ok "every key readable with node 3 down" || bad "reads with node 3 down: $r"
r=$(bl) && echo "$r" | grep -q "\"id\":\"$(cid 3)\",\"baseline\":true,\"online\":false" &&
    ok "the baseline shows node 3 offline" || bad "baseline with node 3 down: $r"
node_start 3 $(cluster_flags 3 1) $(nb 3) || finish
for i in 1 3 4 5; do wait_metric "$i" ember_cluster_members 4 || bad "node $i: 4 members"; done
copies_are $((4 * N)) 1 3 4 5 && ok "node 3 back: it loads its partitions again, two copies of each key" ||
    bad "after node 3 came back"
r=$(bl remove "$(cid 3)" 2>&1) && bad "an online node removed from the baseline: $r" ||
    { echo "$r" | grep -q "it is online" && ok "an online node cannot be removed: ${r#*\"message\":}" ||
      bad "remove online node 3: $r"; }
node_kill 3
for i in 1 4 5; do wait_metric "$i" ember_cluster_members 3 || bad "node $i: 3 members"; done
r=$(bl remove "$(cid 3)") && ! echo "$r" | grep -q "$(cid 3)" && ok "an offline node removed from the baseline" ||
    bad "baseline remove: $r"
copies_are $((4 * N)) 1 4 5 && ok "removed: its partitions move to the others, two copies of each key" ||
    bad "after removing node 3"
r=$(node $JS check "$(node_addr 5)" rb 0 $((2 * N)) 2>&1)
[ "$r" = "ok $((2 * N)) missing 0 wrong 0" ] && ok "no acknowledged key lost through the baseline changes" ||
    bad "reads after the baseline changes: $r"
finish
