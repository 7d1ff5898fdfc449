#!/bin/sh
# cluster_data.sh - data through a 3-node cluster of real processes: the
# real Node.js client creates a cache through node 1, puts keys through node
# 2 and reads them all through node 3 (each key served by its owner, the
# others forwarding); every node's CACHE_PARTITIONS names one owner for
# every partition, the same on every node; a cache and a state change made
# through one node are seen through the others at once; /metrics counts the
# requests each node forwarded, by op; deep pipelines through one node
# answer every request.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
KEYS=${CHAOS_KEYS:-10000}
. tests/chaos/lib.sh
chaos_init

start_three

if out=$(node tests/chaos/cluster_kv.js "$KEYS" "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)" 2>&1); then
    echo "$out" | sed 's/^ok /ok   node client: /'
    PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
else
    echo "$out"
    bad "node client through three nodes"
fi

# /metrics counts what each node forwarded, by op: node 2 took the puts and
# owns about a third of the keys, node 3 the reads.
f2=$(metric 2 'ember_cluster_forwarded_requests_total{op="CACHE_PUT"}')
f3=$(metric 3 'ember_cluster_forwarded_requests_total{op="CACHE_GET"}')
[ "${f2:-0}" -gt $((KEYS / 3)) ] 2>/dev/null && [ "${f2:-0}" -lt "$KEYS" ] &&
    [ "${f3:-0}" -gt $((KEYS / 3)) ] 2>/dev/null &&
    ok "/metrics: node 2 forwarded $f2 of $KEYS puts, node 3 $f3 gets" ||
    bad "forwarded requests per op: node 2 puts '$f2', node 3 gets '$f3' (of $KEYS)"

# CACHE_PARTITIONS on every node: all 1024 partitions, one owner each, and
# the same owners everywhere.
CLI="$BUILD/ember-cli"
"$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" create parts >/dev/null || bad "create parts"
for i in 1 2 3; do
    "$BUILD/ember-chaos" partitions --nodes "$(node_addr "$i")" --cache parts \
        >"$CHAOS_TMP/parts.$i" 2>&1 || { bad "partitions through node $i: $(cat "$CHAOS_TMP/parts.$i")"; }
done
if [ "$(grep -c . "$CHAOS_TMP/parts.1")" = 1024 ] && cmp -s "$CHAOS_TMP/parts.1" "$CHAOS_TMP/parts.2" &&
   cmp -s "$CHAOS_TMP/parts.1" "$CHAOS_TMP/parts.3"; then
    ok "CACHE_PARTITIONS: 1024 partitions, one owner each, the same on every node"
else
    bad "CACHE_PARTITIONS differ or are incomplete ($(grep -c . "$CHAOS_TMP/parts.1") lines)"
fi
owners=$(cut -d' ' -f2 "$CHAOS_TMP/parts.1" | sort -u | grep -c .)
[ "$owners" = 3 ] && ok "every node owns partitions" || bad "$owners distinct owners"

# Deep pipelines through one node: 2 connections with 2 048 requests in
# flight each, two thirds of the keys forwarded.  A forwarded request or a
# FULL_SYNC ack wait parks its connection; what arrives meanwhile waits
# unread past a bound (backpressure), never answered with an error.
for m in 100 0; do
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" --cache parts \
        --connections 2 --pipeline 2048 --keys 3000 --mix $m --ops 8192 --warmup 0 \
        --key-type int --csv --label deep >"$CHAOS_TMP/deep.csv" 2>&1 || bad "deep pipeline load"
    e=$(awk -F, '$1 == "label" { for (i = 1; i <= NF; i++) c[$i] = i } $1 == "deep" { print $c["errors"] " " $c["ops"] }' \
        "$CHAOS_TMP/deep.csv")
    [ "${e%% *}" = 0 ] && [ "${e#* }" -gt 0 ] 2>/dev/null &&
        ok "$((100 - m))% puts, 2048 in flight per connection through node 1: ${e#* } ops, no error" ||
        bad "deep pipeline, $((100 - m))% puts: errors and ops '$e'"
done

# A partition-aware client (ember-bench --partition-aware, as Ignite's Java,
# .NET and C++ clients): from the partition map and each node's id in the
# handshake it sends every key to its primary, so no node forwards any of
# the measured requests (M5's "aware" rows rest on this).
fwd_sum() {
    t=0
    for i in 1 2 3; do
        v=$(curl -s --max-time 5 "http://$(node_ip $i):8080/metrics" |
            awk '$1 ~ /^ember_cluster_forwarded_requests_total/ { s += $2 } END { print s + 0 }')
        t=$((t + v))
    done
    echo $t
}
AW="$(node_ip 1):$CHAOS_PORT,$(node_ip 2):$CHAOS_PORT,$(node_ip 3):$CHAOS_PORT"
"$BUILD/ember-bench" load --hosts "$AW" --partition-aware --ignite-version 1.4.0 --cache parts \
    --connections 3 --keys 3000 --key-type int --duration 0.2 --warmup 0 >/dev/null 2>&1 ||
    bad "partition-aware prefill"
f0=$(fwd_sum)
"$BUILD/ember-bench" load --hosts "$AW" --partition-aware --ignite-version 1.4.0 --cache parts \
    --connections 3 --keys 3000 --key-type int --mix 50 --ops 3000 --warmup 0 --no-prefill \
    --csv --label aware >"$CHAOS_TMP/aware.csv" 2>&1 || bad "partition-aware load"
f1=$(fwd_sum)
e=$(awk -F, '$1 == "label" { for (i = 1; i <= NF; i++) c[$i] = i } $1 == "aware" { print $c["errors"] " " $c["ops"] }' \
    "$CHAOS_TMP/aware.csv")
[ "${e%% *}" = 0 ] && [ "${e#* }" -gt 0 ] 2>/dev/null && [ "$f1" = "$f0" ] &&
    ok "partition-aware client: ${e#* } ops on 3 nodes, none forwarded" ||
    bad "partition-aware client: errors and ops '$e', forwarded $f0 -> $f1"

"$CLI" -h "$(node_ip 2)" -p "$CHAOS_PORT" state ACTIVE_READ_ONLY >/dev/null
[ "$("$CLI" -h "$(node_ip 3)" -p "$CHAOS_PORT" state)" = ACTIVE_READ_ONLY ] &&
    ! "$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" put parts int:1 x >/dev/null 2>&1 &&
    ok "read-only set through one node refuses writes through another" ||
    bad "cluster-wide read-only"
"$CLI" -h "$(node_ip 3)" -p "$CHAOS_PORT" state ACTIVE >/dev/null
"$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" put parts int:1 x >/dev/null &&
    ok "active again through a third node" || bad "cluster-wide activation"
finish
