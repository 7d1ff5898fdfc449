#!/bin/sh
# cluster_handoff.sh - a write mapped to its key's primary runs only while
# that node still is the primary.  A client's put reaches node 2, the
# primary of its key's partition P, and waits there between its mapping and
# its run (--cluster-write-hold, a test hook) while node 3 joins and, once
# it loaded P, becomes P's primary.  Run on node 2 then, the put would reach
# no other copy - node 2 is a backup, and only a primary streams - yet be
# acknowledged: the new primary would never have it.  It is refused before
# it applies (ember_repl_writes_moved) and mapped again to node 3; the
# client sees it succeed, and every copy holds it.  The same for a put on a
# TRANSACTIONAL cache (an implicit one-op transaction, refused whole before
# its commit), held at the same time on node 2's second event loop.
# Node 3 serves P only once node 2 answered that it applied the switch
# (cl_take.h).  And an explicit transaction coordinated by node 1, with a part on node 2
# (a key of P) and one on node 1: both parts prepared and COMMIT decided,
# node 1 holds it (--cluster-tx-hold) while P moves.  Node 2's part then
# commits where it no longer is P's primary: its writes of P are handed to
# the new primary, which applies them as P's (ember_tx_writes_handed_off);
# the transaction commits and every copy holds both keys.  A second one,
# on cache py, prepares once node 3 joined and is still loading py's P
# (slowly: one entry per batch, 200 ms apart): node 3 takes a backup copy
# of node 2's part as a MOVING copy, with the key's lock, so a put a client
# sends node 3 once it is P's primary waits for the handoff, and the
# transaction's write cannot overwrite it (the put's value is read last).
#
# Nodes have fixed consistent ids, so the affinity of the three is known
# before node 3 joins: a first cluster of the three ids, stopped, tells
# which partitions node 3 will be the primary of.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
HOLD="$CHAOS_TMP/hold"
TXHOLD="$CHAOS_TMP/txhold"
cli() { n=$1; shift; "$BUILD/ember-cli" -h "$(node_ip "$n")" -p "$CHAOS_PORT" "$@"; }
# primaries N ID [CACHE]: the partitions of CACHE (pm) whose primary is the
# node with consistent id ID, as node N's map says them, one per line.
primaries() {
    cli "$1" --json cluster "${3:-pm}" | node -e '
        let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
            for (const n of JSON.parse(s).nodes)
                if (n.consistent_id === process.argv[1]) console.log((n.partitions || []).join("\n"));
        });' "$2"
}
members() {
    for i in $2; do
        wait_metric "$i" ember_cluster_members "$1" && wait_metric "$i" ember_cluster_joined 1 ||
            { bad "node $i does not see $1 members"; finish; }
    done
}

# The three nodes' affinity, from a cluster of their consistent ids.
node_start 4 $(cluster_flags 4) --consistent-id hA || finish
node_start 5 $(cluster_flags 5 4) --consistent-id hB || finish
node_start 6 $(cluster_flags 6 4) --consistent-id hC || finish
members 3 "4 5 6"
r=$(node tests/chaos/cluster_rebal.js put "$(node_addr 4)" pm 1 0 0 2>&1) ||
    { bad "cache pm: $r"; finish; }
primaries 4 hC | sort >"$CHAOS_TMP/c3"
for i in 4 5 6; do node_kill $i; done
[ -s "$CHAOS_TMP/c3" ] || { bad "no partition has hC for primary among hA, hB, hC"; finish; }

node_start 1 $(cluster_flags 1) --consistent-id hA --cluster-tx-hold "$TXHOLD" --threads 3 ||
    finish
node_start 2 $(cluster_flags 2 1) --consistent-id hB --cluster-write-hold "$HOLD" --threads 2 ||
    finish
members 2 "1 2"
r=$(node tests/chaos/cluster_rebal.js put "$(node_addr 1)" pm 1 0 0 2>&1) &&
    r=$(REBAL_TX=1 node tests/chaos/cluster_rebal.js put "$(node_addr 1)" pt 1 0 0 2>&1) ||
    { bad "caches pm, pt: $r"; finish; }
primaries 1 hB | sort >"$CHAOS_TMP/b2"
p=$(comm -12 "$CHAOS_TMP/b2" "$CHAOS_TMP/c3" | head -1)
[ -n "$p" ] || { bad "no partition moves from node 2 to node 3 as primary"; finish; }
ok "partition $p: primary node 2 now, node 3 once it joins"
q=$(primaries 1 hA | sort | comm -23 - "$CHAOS_TMP/c3" | head -1)
[ -n "$q" ] || { bad "no partition stays with node 1 as primary"; finish; }
# py: partition p holds 40 entries, which node 3 will load one per batch.
keys=$(for i in $(seq 0 39); do printf '%s,' $((i * 1024 + p)); done)
keys=${keys%,}
r=$(REBAL_TX=1 REBAL_BATCH=1 REBAL_THROTTLE=200 node tests/chaos/cluster_rebal.js put \
    "$(node_addr 1)" py 1 0 0 2>&1) &&
    r=$("$BUILD/ember-txc" put --nodes "$(node_addr 1)" --cache py --keys "$keys" --value 1 2>&1) ||
    { bad "cache py: $r"; finish; }
# tx_held N: node 1 logged N transactions held.
tx_held() { log_wait 1 "tx_hold: a transaction decided here waits" "$1"; }

# The transaction: keys p (node 2's part) and q (node 1's), decided, held.
touch "$TXHOLD"
"$BUILD/ember-txc" put --nodes "$(node_addr 1)" --cache px --keys "$p,$q" --value 7 \
    --call-ms 120000 >"$CHAOS_TMP/tx.out" 2>&1 &
txput=$!
tx_held 1 || { bad "the transaction was not held on node 1: $(cat "$CHAOS_TMP/tx.out")"; finish; }
ok "a transaction on keys $p (node 2) and $q (node 1) is prepared, decided and held"

# The puts wait on node 2, mapped (one per event loop: a new connection
# goes to the least loaded); node 3 joins and takes partition p over.
touch "$HOLD"
cli 2 --timeout 120000 put pm "int:$p" string:held >"$CHAOS_TMP/put.out" 2>&1 &
put=$!
log_wait 2 "write_hold: a write mapped here waits" || { bad "the put did not wait on node 2"; finish; }
cli 2 --timeout 120000 put pt "int:$p" string:held >"$CHAOS_TMP/putx.out" 2>&1 &
putx=$!
log_wait 2 "write_hold: a write mapped here waits" 2 ||
    { bad "the transactional put did not wait on node 2"; finish; }
node_start 3 $(cluster_flags 3 1) --consistent-id hC || finish
members 3 "1 3"
# The second transaction, while node 3 loads py's partition p.
primaries 1 hC py | grep -qx "$p" && { bad "node 3 loaded py's partition $p at once"; finish; }
"$BUILD/ember-txc" put --nodes "$(node_addr 1)" --cache py --keys "$p,$q" --value 7 \
    --call-ms 120000 >"$CHAOS_TMP/ty.out" 2>&1 &
typut=$!
tx_held 2 || { bad "the second transaction was not held on node 1: $(cat "$CHAOS_TMP/ty.out")"; finish; }
c=$(metric 3 ember_tx_backup_copies)
[ "${c:-0}" -ge 1 ] && ok "node 3, loading py's partition $p, took a backup copy of node 2's part" ||
    { bad "node 3 holds no backup copy (ember_tx_backup_copies ${c:-?}; did its load of $p end first?)"; finish; }
t=0
# Each cache switches to node 3 once node 3 loaded it: both must have, or
# the put on pt may still run on node 2 as its primary.
until primaries 1 hC | grep -qx "$p" && primaries 1 hC pt | grep -qx "$p" &&
      primaries 1 hC px | grep -qx "$p" && primaries 1 hC py | grep -qx "$p"; do
    t=$((t + 1))
    [ $t -lt $((CHAOS_WAIT * 10)) ] || { bad "node 3 did not become partition $p's primary"; finish; }
    sleep 0.1
done
maps_agree 1 2 3 || bad "the nodes' maps differ"
# Node 2's own topology names node 3 now (its event loops are held, so its
# metrics say it): the topology version node 1 has.
v="$(metric 1 ember_cluster_topology_major) $(metric 1 ember_cluster_topology_minor)"
t=0
until [ "$(metric 2 ember_cluster_topology_major) $(metric 2 ember_cluster_topology_minor)" = "$v" ]; do
    t=$((t + 1))
    [ $t -lt $((CHAOS_WAIT * 10)) ] || { bad "node 2 did not reach topology $v"; finish; }
    sleep 0.1
done
ok "node 3 is partition $p's primary in the four caches on every node; the puts run on node 2 now"
# Node 3 served its new partitions only once node 2, the primary before,
# answered that it applied the switch and streamed its last writes.
m=$(metric 3 ember_cluster_takeover_taken)
[ "${m:-0}" -ge 1 ] && [ "$(metric 2 ember_cluster_takeover_answered)" -ge 1 ] &&
    ok "node 3 held what it took over until node 2 answered (ember_cluster_takeover_taken $m)" ||
    bad "node 3 took over without node 2's answer (ember_cluster_takeover_taken ${m:-?})"
# A put of py's key p on node 3, its primary now: it waits for the lock
# node 3's backup copy of the held transaction holds.
cli 3 --timeout 120000 put py "int:$p" string:later >"$CHAOS_TMP/later.out" 2>&1 &
later=$!
wait_metric 3 ember_tx_waiting_connections 1 && ok "a put of $p on node 3 waits for the transaction's lock" ||
    bad "the put of $p on node 3 does not wait ($(cat "$CHAOS_TMP/later.out"))"
rm -f "$HOLD" "$TXHOLD"
wait $put && ok "the put succeeded ($(cat "$CHAOS_TMP/put.out"))" ||
    bad "the put failed: $(cat "$CHAOS_TMP/put.out")"
wait $putx && ok "the transactional put succeeded ($(cat "$CHAOS_TMP/putx.out"))" ||
    bad "the transactional put failed: $(cat "$CHAOS_TMP/putx.out")"
m=$(metric 2 ember_repl_writes_moved)
[ "${m:-0}" -ge 2 ] && ok "node 2 refused both as no longer the primary (ember_repl_writes_moved $m)" ||
    bad "node 2 did not refuse both writes (ember_repl_writes_moved ${m:-?})"
wait $txput && ok "the transaction committed" || bad "the transaction failed: $(cat "$CHAOS_TMP/tx.out")"
wait $typut && ok "the second transaction committed" || bad "the second transaction failed: $(cat "$CHAOS_TMP/ty.out")"
wait $later && ok "the put on node 3 succeeded" || bad "the put on node 3 failed: $(cat "$CHAOS_TMP/later.out")"
m=$(metric 2 ember_tx_writes_handed_off)
[ "${m:-0}" -ge 2 ] && ok "node 2 handed both parts' writes of $p to the new primary (ember_tx_writes_handed_off $m)" ||
    bad "node 2 handed nothing off (ember_tx_writes_handed_off ${m:-?})"
for cache in pm pt; do
    for i in 3 1 2; do
        v=$(cli $i get $cache "int:$p" 2>&1)
        [ "$v" = string:held ] && ok "$cache: read through node $i: held" ||
            bad "$cache: read through node $i: '$v'"
    done
done
for k in $p $q; do
    for i in 3 1 2; do
        v=$(cli $i get px "int:$k" 2>&1)
        [ "$v" = int:7 ] && ok "px: key $k read through node $i: 7" ||
            bad "px: key $k read through node $i: '$v'"
    done
done
for i in 3 1 2; do
    v=$(cli $i get py "int:$p" 2>&1)
    [ "$v" = string:later ] && ok "py: key $p read through node $i: the later put's value" ||
        bad "py: key $p read through node $i: '$v' (the put must come after the transaction)"
    v=$(cli $i get py "int:$q" 2>&1)
    [ "$v" = int:7 ] && ok "py: key $q read through node $i: 7" || bad "py: key $q read through node $i: '$v'"
done
r=$(cli 1 idle-verify pm pt px py 2>&1) && ok "idle-verify: $(echo "$r" | tail -1)" ||
    { bad "idle-verify:"; echo "$r" | head -10; }
finish
