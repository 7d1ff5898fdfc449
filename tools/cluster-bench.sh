#!/bin/sh
# cluster-bench.sh - the cluster's timing rows (BENCHMARKS.md "Cluster"): time
# to form 3 and 5 nodes, to join a 6th, from kill -9 to the new topology, a
# load through one node of three against one node alone, and GETs and PUTs
# through one node on the keys it owns against the keys the others own
# (server CPU per op summed over the three processes).  Real emberd processes on the
# run's own loopback addresses (tests/chaos/lib.sh), one run; prints a table.
# FD_MS sets failure_detection_timeout (default 3000).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
FD_MS=${FD_MS:-3000}
. tests/chaos/lib.sh
chaos_init
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
all_members() {
    n=$1; shift
    for i in "$@"; do
        wait_metric "$i" ember_cluster_members "$n" && wait_metric "$i" ember_cluster_joined 1 || return 1
    done
}
cpu_ticks() {  # utime+stime of the listed pids, in clock ticks
    t=0
    for p in "$@"; do
        set -- $(cut -d' ' -f14,15 "/proc/$p/stat"); t=$((t + $1 + $2))
    done
    echo $t
}
FL="--failure-detection-timeout $FD_MS --threads 1"

t0=$(now_ms)
node_start 1 --bootstrap true $FL || finish
node_start 2 --seeds "$(node_ip 1):47100" $FL || finish
node_start 3 --seeds "$(node_ip 1):47100" $FL || finish
all_members 3 1 2 3 || { bad "3 did not form"; finish; }
form3=$(( $(now_ms) - t0 ))
t0=$(now_ms)
node_start 4 --seeds "$(node_ip 1):47100" $FL || finish
node_start 5 --seeds "$(node_ip 1):47100" $FL || finish
all_members 5 1 2 3 4 5 || { bad "5 did not form"; finish; }
grow5=$(( $(now_ms) - t0 ))
t0=$(now_ms)
node_start 6 --seeds "$(node_ip 2):47100" $FL || finish
all_members 6 1 2 3 4 5 6 || { bad "6th did not join"; finish; }
join6=$(( $(now_ms) - t0 ))
t0=$(now_ms)
node_kill 6
all_members 5 1 2 3 4 5 || { bad "kill -9 not detected"; finish; }
kill6=$(( $(now_ms) - t0 ))
node_term 5; node_term 4
all_members 3 1 2 3 || { bad "leaves"; finish; }

# Five nodes from cold, started one right after the other (a separate
# cluster of its own on nodes 11-15: its own bootstrap node).
t0=$(now_ms)
node_start 11 --bootstrap true $FL || finish
for i in 12 13 14 15; do node_start $i --seeds "$(node_ip 11):47100" $FL || finish; done
all_members 5 11 12 13 14 15 || { bad "5 from cold did not form"; finish; }
form5=$(( $(now_ms) - t0 ))
for i in 15 14 13 12 11; do node_kill $i; done

# Load through node 1 of 3 (2/3 of the keys forwarded) against one node.
P1=$(node_pid 1); P2=$(node_pid 2); P3=$(node_pid 3)
"$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" create bench >/dev/null

# The same load through node 1 on the keys node 1 owns (every request a
# direct call) and on the keys the others own (every request forwarded),
# GET and PUT apart: server CPU per op summed over the three processes.
"$BUILD/ember-chaos" partitions --nodes "$(node_addr 1)" --cache bench >"$CHAOS_TMP/parts" ||
    bad "partitions"
"$BUILD/ember-cli" --json -h "$(node_ip 1)" -p "$CHAOS_PORT" cluster >"$CHAOS_TMP/cl.json" ||
    bad "cluster --json"
node -e '
const fs = require("fs");
const [parts, cl, n, dir] = process.argv.slice(1);
const self = JSON.parse(fs.readFileSync(cl)).nodes.find((x) => x.local).id.replace(/-/g, "");
const own = {};
for (const l of fs.readFileSync(parts, "utf8").trim().split("\n")) {
    const [p, o] = l.split(" "); own[+p] = o;
}
const np = Object.keys(own).length, loc = [], fwd = [];
for (let k = 0; k < +n; k++) {     /* an int key hashes to itself */
    const h = k >>> 0, p = ((h ^ (h >>> 16)) & (np - 1)) >>> 0;
    (own[p] === self ? loc : fwd).push(k);
}
fs.writeFileSync(dir + "/keys.local", loc.join("\n") + "\n");
fs.writeFileSync(dir + "/keys.fwd", fwd.join("\n") + "\n");
' "$CHAOS_TMP/parts" "$CHAOS_TMP/cl.json" 30000 "$CHAOS_TMP" || bad "key lists"
for f in local fwd; do              # every key written once, outside the measured runs
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" --connections 16 \
        --key-list "$CHAOS_TMP/keys.$f" --ops 1 --warmup 0 --key-type int >/dev/null 2>&1 ||
        bad "prefill $f"
done
split_row() {  # KEYS-FILE MIX LABEL -> "ops/s p50 p99 cpu-us/op"
    k0=$(cpu_ticks $P1 $P2 $P3)
    "$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" --connections 16 \
        --key-list "$1" --mix "$2" --duration 4 --warmup 1 --key-type int --label "$3" --csv \
        --no-prefill \
        >"$CHAOS_TMP/$3.csv" 2>&1 || bad "load $3"
    k1=$(cpu_ticks $P1 $P2 $P3)
    awk -F, -v t=$((k1 - k0)) -v hz="$(getconf CLK_TCK)" -v l="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
        $1 == l { printf "%s | %.0f | %s | %s | %.1f\n", l, $c["ops_s"], $c["p50_us"], $c["p99_us"],
                  t / hz * 1e6 / ($c["ops_s"] * 5) }' "$CHAOS_TMP/$3.csv"
}
for m in 100 0; do
    op=$([ $m = 100 ] && echo GET || echo PUT)
    split_row "$CHAOS_TMP/keys.local" $m "local-$op" >>"$CHAOS_TMP/split"
    split_row "$CHAOS_TMP/keys.fwd" $m "forwarded-$op" >>"$CHAOS_TMP/split"
done
c0=$(cpu_ticks $P1 $P2 $P3)
"$BUILD/ember-bench" load --host "$(node_ip 1)" --port "$CHAOS_PORT" --connections 16 \
    --keys 20000 --mix 90 --duration 4 --warmup 1 --key-type int --label cluster3 --csv \
    >"$CHAOS_TMP/c3.csv" 2>&1 || bad "cluster load"
c1=$(cpu_ticks $P1 $P2 $P3)
node_term 3; node_term 2; node_term 1
node_start 7 $FL || finish
P7=$(node_pid 7)
"$BUILD/ember-cli" -h "$(node_ip 7)" -p "$CHAOS_PORT" create bench >/dev/null
s0=$(cpu_ticks $P7)
"$BUILD/ember-bench" load --host "$(node_ip 7)" --port "$CHAOS_PORT" --connections 16 \
    --keys 20000 --mix 90 --duration 4 --warmup 1 --key-type int --label single --csv \
    >"$CHAOS_TMP/s1.csv" 2>&1 || bad "single load"
s1=$(cpu_ticks $P7)
hz=$(getconf CLK_TCK)
echo "| measurement | result |"
echo "|---|---:|"
echo "| form 3 nodes (start of the first to all joined) | $form3 ms |"
echo "| grow 3 -> 5 (two joins at once) | $grow5 ms |"
echo "| form 5 nodes from cold (start of the first to all joined) | $form5 ms |"
echo "| join a 6th | $join6 ms |"
echo "| kill -9 to the new topology on all (failure_detection_timeout $FD_MS ms) | $kill6 ms |"
echo
echo "load (ember-bench load, 16 connections, 90% GET, int keys, 4 s):"
head -1 "$CHAOS_TMP/c3.csv"
grep -h '^cluster3\|^single' "$CHAOS_TMP/c3.csv" "$CHAOS_TMP/s1.csv"
ops3=$(grep -h '^cluster3' "$CHAOS_TMP/c3.csv" | cut -d, -f11)
ops1=$(grep -h '^single' "$CHAOS_TMP/s1.csv" | cut -d, -f11)
echo "server CPU over the measured run+warm-up, all nodes: cluster $(( (c1 - c0) * 1000 / hz )) ms, single $(( (s1 - s0) * 1000 / hz )) ms"
# Server CPU per op, summed over every node: the CPU of warm-up and run over
# the ops of both (the csv's ops are the run's; warm-up is 1 s of 5).
cpu_per_op() {  # ticks ops_per_s -> us/op over warm-up + run (5 s)
    awk -v t="$1" -v hz="$hz" -v r="$2" 'BEGIN { if (r > 0) printf "%.1f", t / hz * 1e6 / (r * 5); else print "?" }'
}
echo "server CPU per op (all nodes): forwarded through one of 3 $(cpu_per_op $((c1 - c0)) "$ops3") us, single node $(cpu_per_op $((s1 - s0)) "$ops1") us"
echo
echo "through node 1 of 3, keys node 1 owns (local) or the others own (forwarded), 16 connections, 4 s + 1 s warm-up:"
echo "| keys, op | ops/s | p50 us | p99 us | server CPU us/op, 3 nodes |"
echo "|---|---:|---:|---:|---:|"
sed 's/^/| /; s/$/ |/' "$CHAOS_TMP/split"
ok "cluster bench ran"
finish
