#!/bin/sh
# cluster_ops.sh - the operator's commands on a 3-node cluster:
#   ember-cli idle-verify finds no conflict on a healthy cluster (text and
#   JSON, exit 0); after the debug hook (--debug-ops) changes one entry on
#   the node that owns it without an update, idle-verify --against the
#   figures saved before names that partition (exit 3): in a cache without
#   backups a corrupted copy has no other copy to disagree with, so the
#   check compares with the same node's saved figures (same update counter,
#   other content).  A cache with one backup: with
#   replication its owners agree and a corrupted copy is named as owners
#   disagreeing; without it idle-verify names every partition whose backup
#   copy is empty.
#   ember-cli cluster shows leader, uptime and lease per node, the cache's
#   mode, backups, sizes and partition counts per node (text and JSON); with
#   one member stopped (SIGSTOP), `cluster --json` and /api/cluster still
#   answer and name it as not answering.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
CLI="$BUILD/ember-cli"
KEYS=40

node_start 1 $(cluster_flags 1) --debug-ops || finish
node_start 2 $(cluster_flags 2 1) --debug-ops || finish
node_start 3 $(cluster_flags 3 1) --debug-ops || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_links 2 ||
        { bad "node $i did not join"; finish; }
done
cli() { n=$1; shift; "$CLI" -h "$(node_ip "$n")" -p "$CHAOS_PORT" "$@"; }
cli 1 create ops >/dev/null || { bad "create"; finish; }
# The exchange for the new cache: every node holds the same committed map.
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
    a=$(metric 1 ember_pme_map_exchange); b=$(metric 2 ember_pme_map_exchange)
    c=$(metric 3 ember_pme_map_exchange)
    [ -n "$a" ] && [ "$a" != 0 ] && [ "$a" = "$b" ] && [ "$b" = "$c" ] && break
    sleep 0.1; t=$((t + 1))
done
k=1
while [ $k -le $KEYS ]; do
    cli $(( (k % 3) + 1 )) put ops "int:$k" "string:v$k" >/dev/null || bad "put $k"
    k=$((k + 1))
done

# ---- idle-verify, healthy ----
out=$(cli 2 idle-verify ops); rc=$?
[ $rc = 0 ] && [ "$out" = "idle-verify: 1 cache, 1024 partitions, 3 nodes: no conflicts" ] &&
    ok "idle-verify on a healthy cluster: no conflicts, exit 0" || bad "idle-verify ($rc): $out"
js=$(cli 3 --json idle-verify); rc=$?
echo "$js" | node -e '
  const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
  process.exit(j.ok && j.agree && j.conflict_count === 0 && j.nodes === 3 &&
               j.partitions === 1024 && j.errors.length === 0 ? 0 : 1);' && [ $rc = 0 ] &&
    ok "idle-verify --json (every cache): agree, 0 conflicts, 3 nodes" || bad "idle-verify --json ($rc): $js"

# ---- cluster ----
txt=$(cli 1 cluster ops); rc=$?
[ $rc = 0 ] && echo "$txt" | grep -q '^leader: [0-9a-f-]\{36\}$' &&
    [ "$(echo "$txt" | grep -cE '^[0-9a-f-]{36}  [0-9]+h[0-9]{2}m[0-9]{2}s +(yes|no) +yes +ALIVE$')" = 3 ] &&
    [ "$(echo "$txt" | grep -cE '^[0-9a-f-]{36}  [0-9]+h[0-9]{2}m[0-9]{2}s +yes ')" = 1 ] &&
    echo "$txt" | grep -q '^cache ops: PARTITIONED, 0 backups, 1024 partitions$' &&
    echo "$txt" | grep -q '^lost partitions: 0$' &&
    ok "cluster (text): one leader, 3 nodes with uptime and lease, the cache's mode" ||
    bad "cluster text ($rc): $txt"
sum=$(echo "$txt" | awk '/^cache ops:/ { on = 1; next } on && $1 ~ /^[0-9a-f-]+$/ && NF == 7 { s += $2; p += $3 } END { print s, p }')
[ "$sum" = "$KEYS 1024" ] && ok "cluster (text): sizes add up to $KEYS, primaries to 1024" ||
    bad "cluster sizes/primaries: $sum"
cj=$(cli 2 --json cluster); rc=$?
echo "$cj" | node -e '
  const j = JSON.parse(require("fs").readFileSync(0, "utf8")), d = j.details;
  const c = d.caches.find(x => x.name === "ops");
  const ok = j.ok && d.cluster && d.nodes.length === 3 && d.leader &&
    d.nodes.filter(n => n.leader).length === 1 && d.nodes.every(n => n.answered && n.lease &&
    n.uptime_ms > 0) && c && c.mode === "PARTITIONED" && c.backups === 0 &&
    c.nodes.reduce((a, n) => a + n.size, 0) === '"$KEYS"' &&
    c.nodes.reduce((a, n) => a + n.counts.primary, 0) === 1024 &&
    c.nodes.every(n => n.cells.length === 1024) && c.lost.length === 0 &&
    d.rebalance.partitions_moving === 0 && !d.rebalance.in_progress;
  process.exit(ok ? 0 : 1);' && [ $rc = 0 ] &&
    ok "cluster --json: 3 nodes, one leader, leases, sizes and partition states per node" ||
    bad "cluster --json ($rc): $(echo "$cj" | head -c 600)"

# ---- a corrupted copy ----
S=$CHAOS_TMP/verify.txt
cli 1 idle-verify --save "$S" ops >/dev/null || bad "idle-verify --save"
line=$(awk -F'\t' '$5 > 0 { print; exit }' "$S")
part=$(echo "$line" | cut -f2); owner=$(echo "$line" | cut -f3)
n=""
for i in 1 2 3; do
    echo "$cj" | node -e '
      const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
      const m = j.details.nodes.find(x => x.id === process.argv[1]);
      process.exit(m && m.thin_addr === process.argv[2] ? 0 : 1);' "$owner" "$(node_addr "$i")" && n=$i
done
[ -n "$n" ] && [ -n "$part" ] || { bad "no owner found for a non-empty partition ($line)"; finish; }
r=$(cli "$n" debug-corrupt ops "$part") && [ "$r" = corrupted ] &&
    ok "debug hook changed partition $part on node $n" || bad "debug-corrupt: $r"
out=$(cli 2 idle-verify --against "$S" ops); rc=$?
[ $rc = 3 ] && echo "$out" | grep -q "^idle-verify: 1 cache, 1024 partitions, 3 nodes: 1 conflict$" &&
    echo "$out" | grep -q "^  cache ops partition $part: content changed without an update" &&
    ok "idle-verify --against names partition $part, exit 3" || bad "idle-verify after corruption ($rc): $out"
js=$(cli 1 --json idle-verify --against "$S" ops); rc=$?
echo "$js" | node -e '
  const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
  process.exit(!j.agree && j.conflict_count === 1 && j.conflicts[0].partition === +process.argv[1] &&
               j.conflicts[0].copies[0].node === process.argv[2] ? 0 : 1);' "$part" "$owner" &&
    [ $rc = 3 ] && ok "idle-verify --json names the partition and its owner" || bad "json after corruption ($rc): $js"

# ---- a cache with a backup ----
# Every partition of `rep` has two owners: with replication the backup
# holds the same entries, so idle-verify agrees, and a corrupted copy is a
# disagreement between owners.
out=$(node tests/chaos/cluster_ops.js make "$(node_addr 1)" rep 1 $KEYS 2>&1) ||
    { bad "creating rep: $out"; finish; }
# rep_state: "agree", "empty-backups N" (N non-empty partitions, every one
# listed with its backup copy empty) or "other".
rep_state() {
    cli 2 --json idle-verify rep | node -e '
      const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
      if (j.agree) { console.log("agree"); process.exit(0); }
      const bad = j.conflicts.filter(c => !(c.reason === "owners disagree" && c.copies.length === 2 &&
          c.copies.some(x => x.role === "primary" && x.size > 0) &&
          c.copies.some(x => x.role === "backup" && x.size === 0 && x.counter === 0)));
      console.log(bad.length || j.errors.length ? "other" : "empty-backups " + j.conflicts.length);'
}
st=$(rep_state)
t=0
while [ "$st" = other ] && [ $t -lt $((CHAOS_WAIT * 10)) ]; do   # backups catching up
    sleep 0.1; t=$((t + 1)); st=$(rep_state)
done
cli 1 idle-verify --save "$CHAOS_TMP/rep.txt" rep >/dev/null
nonempty=$(awk -F'\t' '$5 > 0 { print $2 }' "$CHAOS_TMP/rep.txt" | sort -u | wc -l)
case $st in
agree)
    ok "rep (1 backup): primary and backup copies agree"
    line=$(awk -F'\t' '$5 > 0 { print; exit }' "$CHAOS_TMP/rep.txt")
    rpart=$(echo "$line" | cut -f2); rowner=$(echo "$line" | cut -f3)
    rn=""
    for i in 1 2 3; do
        echo "$cj" | node -e '
          const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
          const m = j.details.nodes.find(x => x.id === process.argv[1]);
          process.exit(m && m.thin_addr === process.argv[2] ? 0 : 1);' "$rowner" "$(node_addr "$i")" && rn=$i
    done
    [ -n "$rn" ] && [ "$(cli "$rn" debug-corrupt rep "$rpart")" = corrupted ] || bad "corrupting rep $rpart on $rn"
    out=$(cli 3 idle-verify rep); rc=$?
    [ $rc = 3 ] && echo "$out" | grep -q "^  cache rep partition $rpart: owners disagree$" &&
        [ "$(echo "$out" | grep -c '^  cache rep partition')" = 1 ] &&
        ok "rep: a corrupted copy makes its owners disagree on partition $rpart, exit 3" ||
        bad "rep after corruption ($rc): $out" ;;
*)
    bad "rep: idle-verify state '$st' ($nonempty non-empty partitions)" ;;
esac

# ---- a member that does not answer ----
# SIGSTOP node 3: node 1 still answers `cluster` and /api/cluster, naming
# node 3 as not answering (or, past the failure detection, without it).
node_pause 3
cj=$(cli 1 --json cluster); rc=$?
api=$(curl -s --max-time 10 "http://$(node_ip 1):8080/api/cluster")
node_resume 3
# unanswered WHAT DOC: every member but node 3 answered; node 3 did not
# (with the reason) or is gone.
unanswered() {
    echo "$2" | node -e '
      const j = JSON.parse(require("fs").readFileSync(0, "utf8")), d = j.details || j;
      const n3 = d.nodes.find(n => n.thin_addr === process.argv[1]);
      const others = d.nodes.filter(n => n !== n3);
      process.exit(others.every(n => n.answered) && (!n3 || (!n3.answered && n3.error)) ? 0 : 1);' \
        "$(node_addr 3)" && ok "$1: a stopped member is reported as not answering" ||
        bad "$1 with node 3 stopped: $(echo "$2" | head -c 600)"
}
unanswered "cluster --json" "$cj"
unanswered "/api/cluster" "$api"
[ $rc = 0 ] || bad "cluster with node 3 stopped exited $rc"
finish
