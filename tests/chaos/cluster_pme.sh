#!/bin/sh
# cluster_pme.sh - the partition map exchange on real processes: after the
# caches are created, after a join and after a kill -9, every node holds the
# same full map of the same committed exchange; partitions whose only owner
# was killed are LOST and refuse operations with Ignite's error (the
# READ_WRITE_SAFE default) until `ember-cli cluster reset-lost`; the
# exchange times (from the coordinator's log) are printed for the record.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
CACHES=${CHAOS_PME_CACHES:-30}
. tests/chaos/lib.sh
chaos_init
CLI="$BUILD/ember-cli"

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) || finish
node_start 3 $(cluster_flags 3 1) || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_links 2 ||
        { bad "node $i did not join"; finish; }
done
out=$(node tests/chaos/cluster_pme.js make "$(node_addr 2)" "$CACHES" 2>&1) ||
    { bad "creating $CACHES caches: $out"; finish; }
maps_agree 1 2 3 && ok "$CACHES caches: the three nodes hold the same full map" ||
    bad "full maps differ after the caches were created"
bytes=$(metric 1 ember_pme_map_bytes); zb=$(metric 1 ember_pme_map_compressed_bytes)
[ -n "$bytes" ] && [ "$bytes" -gt 0 ] && [ "$zb" -gt 0 ] && [ "$zb" -lt "$bytes" ] &&
    ok "full map $bytes bytes, $zb compressed" || bad "map sizes '$bytes' '$zb'"

node_start 4 $(cluster_flags 4 1) || finish
for i in 1 2 3 4; do
    wait_metric "$i" ember_cluster_members 4 || bad "node $i does not see 4 members"
done
maps_agree 1 2 3 4 && ok "after a join: four nodes, one full map" || bad "maps differ after a join"
r=$(node tests/chaos/cluster_pme.js probe "$(node_addr 4)" pme0 20 2>&1)
[ "$r" = "ok 20 lost 0 other 0" ] && ok "after the join every key is still readable (owners kept)" ||
    bad "reads after a join: $r"

node_kill 2
for i in 1 3 4; do
    wait_metric "$i" ember_cluster_members 3 || bad "node $i still sees node 2"
done
# The map of the kill's exchange (not the one before it) must name losses.
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$(metric 1 ember_pme_lost_partitions)" = 0 ]; do
    sleep 0.1; t=$((t + 1))
done
maps_agree 1 3 4 && ok "after kill -9: the three survivors hold one full map" ||
    bad "maps differ after a kill"
lost=$(metric 1 ember_pme_lost_partitions)
[ -n "$lost" ] && [ "$lost" -gt 0 ] && ok "$lost partitions lost with their only owner" ||
    bad "no lost partitions after killing an owner of caches without backups ('$lost')"
r=$(node tests/chaos/cluster_pme.js probe "$(node_addr 3)" pme0 100 2>&1)
case "$r" in
    "ok "*" lost 0 "*) bad "no read refused on a lost partition: $r" ;;
    *" other 0") ok "reads on lost partitions refused with Ignite's error, the rest served: $r" ;;
    *) bad "reads: $r" ;;
esac
r=$(node tests/chaos/cluster_pme.js write "$(node_addr 1)" pme0 100 2>&1)
case "$r" in *" lost 0 "*) bad "writes on lost partitions accepted: $r" ;;
    *" other 0") ok "writes on lost partitions refused: $r" ;; *) bad "writes: $r" ;; esac

"$CLI" -h "$(node_ip 4)" -p "$CHAOS_PORT" cluster reset-lost pme0 >"$CHAOS_TMP/reset" 2>&1 &&
    ok "reset-lost: $(cat "$CHAOS_TMP/reset")" || bad "reset-lost: $(cat "$CHAOS_TMP/reset")"
# Once reset-lost returned (through node 4), every node takes the writes at
# once: a node that has not applied the reset yet catches up with the
# leader before it would refuse.
r=$(node tests/chaos/cluster_pme.js write "$(node_addr 3)" pme0 100 2>&1)
[ "$r" = "ok 100 lost 0 other 0" ] && ok "after reset-lost every key of pme0 takes writes" ||
    bad "after reset-lost: $r"
r=$(node tests/chaos/cluster_pme.js probe "$(node_addr 1)" pme1 100 2>&1)
case "$r" in *" lost 0 "*) bad "pme1 was reset too: $r" ;; *) ok "other caches stay lost until reset" ;; esac

grep -h "exchange .* done in" "$CHAOS_TMP"/n*/emberd.*.log 2>/dev/null | sed 's/.*done in \([0-9]*\) ms.*/\1/' |
    sort -n | awk '{a[NR]=$1} END { if (NR) printf "# %d exchanges: median %d ms, max %d ms\n", NR, a[int((NR+1)/2)], a[NR] }'
finish
