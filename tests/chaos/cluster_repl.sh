#!/bin/sh
# cluster_repl.sh - replication on 3 real emberd processes with the real
# Node.js client (cluster_repl.js): every op on PARTITIONED (1 and 2 backups)
# and REPLICATED caches in each write synchronisation mode, every owner
# holding each key; then kill -9 of one node during FULL_SYNC writes: every
# acknowledged write is still readable through the survivors, and writes go
# on once the topology drops the killed node; scan queries through any node
# return each entry once (cluster_scan.js).  A persistent cluster restarted
# whole keeps its data, its state and its baseline: it waits INACTIVE for
# its baseline nodes, or for an operator.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
KEYS=${CHAOS_REPL_KEYS:-60}
. tests/chaos/lib.sh
chaos_init

node_start 1 $(cluster_flags 1) --debug-ops || finish
node_start 2 $(cluster_flags 2 1) --debug-ops || finish
node_start 3 $(cluster_flags 3 1) --debug-ops || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_joined 1 ||
        { bad "node $i did not join"; finish; }
done
ok "3 nodes joined"

JS=tests/chaos/cluster_repl.js
run_js() {
    if out=$(node "$JS" "$@" 2>&1); then
        echo "$out" | sed 's/^ok /ok   node client: /'
        PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
    else
        echo "$out"
        bad "node client: $1"
    fi
}
[ -n "${SKIP_OPS:-}" ] || run_js ops "$KEYS" "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)"
run_js expiry "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)"
# 0 B/op: a replicated overwrite allocates nothing on near, primary and
# backups (the counting allocator's totals over each node's threads).
# put_hist: node 1's CACHE_PUT latency histogram: "le count" per bucket,
# then "sum S" and "count N".
put_hist() {
    curl -s --max-time 5 "http://$(node_ip 1):8080/metrics" |
        sed -n -e 's/^ember_request_duration_seconds_bucket{op="CACHE_PUT",le="\([^"]*\)"} \([0-9]*\)$/\1 \2/p' \
            -e 's/^ember_request_duration_seconds_\(sum\|count\){op="CACHE_PUT"} \([0-9.e+-]*\)$/\1 \2/p'
}
run_js alloc 3000 64 "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)"
put_hist >"$CHAOS_TMP/hist.before"  # (the cache is on every owner by now)
run_js alloc 3000 1024 "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)"
# Those one-at-a-time puts whose near node was their primary held their
# replies on its loop; such a reply leaves from the thread that settles it
# (proto_ackw.c), not through a wake-up of the loop.
direct=0
for i in 1 2 3; do direct=$((direct + $(metric $i ember_repl_replies_direct || echo 0))); done
[ "$direct" -gt 0 ] && ok "held FULL_SYNC replies sent by the thread that got the last ack: $direct" ||
    bad "no held FULL_SYNC reply was sent by the settling thread"
# and those forwarded to their primary got their replies from the thread
# that received the primary's answer (proto_cluster.c), not from a second
# run of the request on a woken loop.
fwd=0
for i in 1 2 3; do fwd=$((fwd + $(metric $i ember_cluster_fwd_replies_direct || echo 0))); done
[ "$fwd" -gt 0 ] && ok "forwarded requests answered by the thread that got the owner's answer: $fwd" ||
    bad "no forwarded request's reply was sent by the thread that got the answer"
# Replies those threads sent count in the bytes a node sent its clients:
# every reply is at least 14 bytes (length, request id, status or flags),
# and before they did, most of these puts' replies went uncounted.
for i in 1 2 3; do
    m=$(curl -s --max-time 5 "http://$(node_ip $i):8080/metrics")
    sent=$(echo "$m" | awk '$1 == "ember_sent_bytes_total" { print $2 }')
    reqs=$(echo "$m" | awk '$1 ~ /^ember_requests_total/ { n += $2 } END { print n + 0 }')
    [ "${sent:-0}" -ge $((14 * reqs)) ] && ok "node $i sent $sent bytes of replies to $reqs requests" ||
        bad "node $i counts ${sent:-0} bytes sent for $reqs requests: replies went uncounted"
done
# Their latency is the whole forward's, from decoding to the reply sent (not
# left out, as when the answering thread's replies went untimed): two puts
# in three that node 1 took were forwarded, each a round trip to their
# primary and its backups, so node 1's mean put time is far above the few
# microseconds a put run here takes until its reply is held.
mean=$(metric 1 'ember_request_duration_seconds_sum{op="CACHE_PUT"}')
cnt=$(metric 1 'ember_request_duration_seconds_count{op="CACHE_PUT"}')
us=$(awk -v s="${mean:-0}" -v n="${cnt:-0}" 'BEGIN { printf "%d", (n > 0 ? s / n * 1e6 : 0) }')
[ "$us" -ge 50 ] && ok "node 1's timed puts, forwarded ones included: mean $us us over $cnt" ||
    bad "node 1's timed puts average $us us over ${cnt:-0}: forwarded puts are not timed whole"

# Each of those puts waited for a round trip: to its primary, or (node 1
# its primary) for its backups' acks, and a held reply's time runs to the
# acks, not to the hold.  So few of node 1's timed puts in the second run
# took under a quarter of their mean; timed to the hold, the third of them
# whose primary was node 1 did.  (Not the first run: puts made while the
# new cache's exchange still runs wait only for the owners it has so far.)
put_hist >"$CHAOS_TMP/hist.after"
read -r pf pc pm <<EOF
$(awk 'FILENAME == ARGV[1] { b[$1] = $2; next }
       { d = $2 - b[$1] }
       $1 == "sum" { sum = d; next }
       $1 == "count" { cnt = d; next }
       $1 != "+Inf" { le[++n] = $1; c[n] = d }
       END { m = cnt > 0 ? sum / cnt : 0; f = 0
             for (i = 1; i <= n; i++) if (le[i] + 0 <= m / 4) f = c[i]
             printf "%d %d %d\n", f, cnt, m * 1e6 }' "$CHAOS_TMP/hist.before" "$CHAOS_TMP/hist.after")
EOF
[ "${pc:-0}" -gt 0 ] && [ $((pf * 10)) -le "$pc" ] &&
    ok "node 1's replicated puts: $pf of $pc timed under a quarter of their mean ($pm us)" ||
    bad "node 1's replicated puts: ${pf:-?} of ${pc:-0} timed under a quarter of their mean (${pm:-?} us): held replies timed to the hold"

# Scans over the cluster: every partition once, from its primary.
if out=$(node tests/chaos/cluster_scan.js "$(node_addr 1)" "$(node_addr 2)" "$(node_addr 3)" 2>&1); then
    echo "$out" | sed 's/^ok /ok   scan: /'
    PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
else
    echo "$out"
    bad "node client: scan"
fi

# kill -9 of node 3 while node 1 takes FULL_SYNC writes (2 backups: every
# node holds every key, so the survivors hold every acknowledged one).
ACKED="$CHAOS_TMP/acked"
SECS=${CHAOS_SECONDS:-6}
node "$JS" write "$ACKED" "$SECS" "$(node_addr 1)" >"$CHAOS_TMP/writer.out" 2>&1 &
WRITER=$!
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
t=0
while [ "$(lines "$ACKED")" -lt 200 ] && [ $t -lt 600 ]; do
    sleep 0.05; t=$((t + 1))
done
before=$(lines "$ACKED")
node_kill 3
wait_metric 1 ember_cluster_members 2 || bad "the topology did not drop node 3"
dropped=$(lines "$ACKED")
wait "$WRITER"
rc=$?
cat "$CHAOS_TMP/writer.out" | sed 's/^ok /ok   writer: /'
[ $rc = 0 ] && ok "writer finished ($before acknowledged before the kill)" || bad "writer failed"
after=$(lines "$ACKED")
[ "$after" -gt "$dropped" ] && ok "writes went on after the topology dropped node 3 ($dropped -> $after)" ||
    bad "no write acknowledged after node 3 left ($dropped -> $after)"
run_js check "$ACKED" "$(node_addr 1)" "$(node_addr 2)"
for i in 1 2; do node_term $i || bad "node $i did not stop cleanly (exit $?)"; done

# Persistent regions: every owner logs its copy in its own WAL.  A fresh
# persistent cluster (nodes 4-6) takes FULL_SYNC writes through node 4; after
# a clean stop, each node's WAL holds a PUT of every acknowledged key.
node_start 4 $(cluster_flags 4) --persistence true || finish
node_start 5 --seeds "$(node_ip 4):47100" --failure-detection-timeout ${CHAOS_FD_MS:-3000} --persistence true || finish
node_start 6 --seeds "$(node_ip 4):47100" --failure-detection-timeout ${CHAOS_FD_MS:-3000} --persistence true || finish
for i in 4 5 6; do
    wait_metric "$i" ember_cluster_members 3 || { bad "persistent node $i did not join"; finish; }
done
"$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" state ACTIVE >/dev/null || bad "activate"
PACKED="$CHAOS_TMP/packed"
node "$JS" write "$PACKED" 1 "$(node_addr 4)" >"$CHAOS_TMP/pwriter.out" 2>&1 || { cat "$CHAOS_TMP/pwriter.out"; bad "persistent writes"; }
n=$(lines "$PACKED")
node "$JS" object put "$(node_addr 4)" || bad "an object of a new binary type"
"$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" cluster baseline set-current >/dev/null ||
    bad "baseline set-current"
"$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" state ACTIVE_READ_ONLY >/dev/null || bad "read-only"
for i in 4 5 6; do node_term $i || bad "node $i did not stop cleanly (exit $?)"; done
for i in 4 5 6; do
    logged=$("$BUILD/ember-wal" dump "$CHAOS_TMP/n$i/data" 2>/dev/null | grep -c ' PUT ')
    [ "$n" -gt 0 ] && [ "$logged" -ge "$n" ] && ok "node $i logged $logged PUTs for $n acknowledged writes" ||
        bad "node $i logged $logged PUTs for $n acknowledged writes"
done
# The whole persistent cluster restarts (a new metadata group, each node a
# new member): every acknowledged key is read back, and the cluster keeps
# the state it had (read-only), on the restarted nodes and on a new one.
# The baseline (nodes 4-6) was logged too: node 4, alone, puts it back in
# the new group and keeps the cluster INACTIVE until nodes 5 and 6 are back.
state_is() {                        # state_is I STATE: waits
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        [ "$("$BUILD/ember-cli" -h "$(node_ip "$1")" -p "$CHAOS_PORT" state 2>/dev/null)" = "$2" ] &&
            return 0
        sleep 0.1; t=$((t + 1))
    done
    return 1
}
node_start 4 $(cluster_flags 4) --persistence true || finish
state_is 4 INACTIVE && log_wait 4 "cluster INACTIVE until the 2 missing baseline nodes join" &&
    ok "restarted alone, node 4 waits INACTIVE for its 2 baseline nodes" ||
    bad "node 4 alone after the restart: $("$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" state)"
node_start 5 --seeds "$(node_ip 4):47100" --failure-detection-timeout ${CHAOS_FD_MS:-3000} --persistence true || finish
node_start 6 --seeds "$(node_ip 4):47100" --failure-detection-timeout ${CHAOS_FD_MS:-3000} --persistence true || finish
for i in 4 5 6; do
    wait_metric "$i" ember_cluster_members 3 || bad "restarted node $i did not join"
done
state_is 5 ACTIVE_READ_ONLY && state_is 6 ACTIVE_READ_ONLY &&
    ok "the baseline back, the cluster serves again in the state it had" ||
    bad "state once the baseline is back: $("$BUILD/ember-cli" -h "$(node_ip 5)" -p "$CHAOS_PORT" state)"
run_js check "$PACKED" "$(node_addr 5)" "$(node_addr 6)"
node_start 7 --seeds "$(node_ip 4):47100" --failure-detection-timeout ${CHAOS_FD_MS:-3000} --persistence true || finish
wait_metric 7 ember_cluster_members 4 || bad "node 7 did not join"
states=""
for i in 4 5 6 7; do states="$states $("$BUILD/ember-cli" -h "$(node_ip "$i")" -p "$CHAOS_PORT" state)"; done
[ "$states" = " ACTIVE_READ_ONLY ACTIVE_READ_ONLY ACTIVE_READ_ONLY ACTIVE_READ_ONLY" ] &&
    ok "after a whole restart every node, and a new one, is read-only as the cluster was" ||
    bad "states after the whole restart (nodes 4-7):$states"
# Node 7 never had the caches or the binary type: it learns them from the
# new group, which the node that created it seeded with what it restored.
c4=$("$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" caches | sort | tr '\n' ' ')
c7=$("$BUILD/ember-cli" -h "$(node_ip 7)" -p "$CHAOS_PORT" caches | sort | tr '\n' ' ')
[ -n "$c7" ] && [ "$c4" = "$c7" ] && ok "the new node knows the restored caches: $c7" ||
    bad "caches after the whole restart: node 4 '$c4', node 7 '$c7'"
out=$(node "$JS" object get "$(node_addr 7)" 2>&1) && echo "$out" | sed "s/^ok /ok   node client: /" ||
    bad "through node 7: $out"
PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
# Once more, node 4 alone (after a kill -9 of all four); an operator does
# not wait for the baseline.
for i in 4 5 6 7; do node_kill $i; done
node_start 4 $(cluster_flags 4) --persistence true || finish
state_is 4 INACTIVE || bad "node 4 alone again: not INACTIVE"
"$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" state ACTIVE >/dev/null &&
    state_is 4 ACTIVE && log_wait 4 "the baseline wait ended by an operator" &&
    ok "an operator activates it without the missing baseline nodes" ||
    { bad "operator activation while waiting for the baseline: state $("$BUILD/ember-cli" -h "$(node_ip 4)" -p "$CHAOS_PORT" state)"
      tail -5 "$(eval echo "\$CHAOS_LOG_4")"; }
finish
