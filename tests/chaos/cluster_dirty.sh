#!/bin/sh
# cluster_dirty.sh - a read on a key's primary returns only what every
# owner of the key acknowledged (FULL_SYNC).  The primary applies a write
# before its owners have it; a read there that returned it at once would
# show a value that dies with the primary if it fails before its stream
# leaves: a later read through the new primary goes back to the value
# before - a history no single copy gives (cluster_nemesis.sh's register
# check found one after a kill -9).
#
# Node 2 holds back what it streams as a primary while a file exists
# (--cluster-repl-hold, a test hook): a write whose primary is node 2 is
# applied there and reaches no other copy.  Checks: a read of it through
# node 2 does not return it while it is held; once let go the write reaches
# node 1 and the read returns it; held again, node 2 is killed with such a
# write applied, node 1 (now the primary) does not have it, and no read
# returned it.  A getAll through node 1 of six such keys (more partitions
# than the transport thread's deferred wait holds: a worker takes it) is
# refused while they are held and returns all six once let go.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
CHAOS_FD_MS=1500
JS=tests/chaos/cluster_rebal.js
HOLD=$CHAOS_TMP/hold

cli() {
    n=$1; ms=$2; shift 2
    "$BUILD/ember-cli" -h "$(node_ip "$n")" -p "$CHAOS_PORT" --timeout "$ms" "$@" 2>&1
}

# held_key FROM: the first key from FROM whose put through node 1 times out
# because node 2 ran it as the primary and holds its stream (node 2 queued
# an update for node 1 meanwhile: a put that was merely slow on node 1
# does not count); 1 if none.
held_key() {
    k=$1
    while [ "$k" -lt $(($1 + 64)) ]; do
        q=$(metric 2 ember_repl_updates_sent)
        case $(cli 1 600 put dirty "int:$k" "int:$((k + 7000))") in
        *"timed out"*) [ "$(metric 2 ember_repl_updates_sent)" -gt "${q:-0}" ] &&
                           { echo "$k"; return 0; } ;;
        esac
        k=$((k + 1))
    done
    return 1
}

# read_check NODE MS KEY HELD WHAT: a get of KEY through NODE (MS timeout).
# HELD=1: it must not return KEY's held write (SAW=1 when it does); 0: it
# must return it.
read_check() {
    out=$(cli "$1" "$2" get dirty "int:$3")
    case $out in *"$(($3 + 7000))"*) got=1 ;; *) got=0 ;; esac
    if [ "$4" = 1 ] && [ $got = 1 ]; then
        bad "key $3: $5 returned $out, a write no other copy has"; SAW=1
    elif [ "$4" = 1 ]; then
        ok "key $3: $5 does not return the held write (${out%%
*})"
    elif [ $got = 1 ]; then
        ok "key $3: $5 returns it"
    else
        bad "key $3: $5 returned: $out"
    fi
}

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) --cluster-repl-hold "$HOLD" || finish
for i in 1 2; do
    wait_metric "$i" ember_cluster_members 2 && wait_metric "$i" ember_cluster_lease 1 ||
        { bad "node $i did not join"; finish; }
done
# One backup (every key on both nodes), FULL_SYNC, reads on the primary.
r=$(node $JS put "$(node_addr 1)" dirty 1 0 0 primary 2>&1) || { bad "cache dirty: $r"; finish; }
ok "2 nodes, a cache with 1 backup (FULL_SYNC, reads on the primary)"

touch "$HOLD"
k=$(held_key 0) || { bad "no put through node 1 waited for node 2's stream"; finish; }
ok "key $k: its put waits on node 2, which applied it and holds its stream"
read_check 2 1000 "$k" 1 "a read through node 2"
# Through node 1 the read is forwarded to node 2, the primary: the same.
read_check 1 1000 "$k" 1 "a read through node 1 (forwarded to node 2)"
w=$(metric 2 ember_repl_read_waits)
[ "${w:-0}" -ge 2 ] && ok "node 2 held $w reads for their acks" ||
    bad "node 2 reports ${w:-no} reads held for their acks"
rm -f "$HOLD"
read_check 2 10000 "$k" 0 "let go, the write reaches node 1 and a read through node 2"
read_check 1 10000 "$k" 0 "a read through node 1"

# A batch read of more partitions with held writes than the transport
# thread's deferred wait holds: handed to a worker, which waits; it answers
# no held value, then, let go, every one.
touch "$HOLD"
keys=""; from=$((k + 1))
for i in 1 2 3 4 5 6; do
    kk=$(held_key "$from") || { bad "no put $i waited for node 2's stream"; finish; }
    keys="$keys $kk"; from=$((kk + 1))
done
w0=$(metric 2 ember_repl_read_waits)
out=$(node tests/chaos/cluster_dirty.js getall "$(node_addr 1)" dirty $keys 2>&1)
case $out in
"error "*"not yet acknowledged"*) ok "getAll of held keys$keys through node 1: refused (${out%%;*})" ;;
*) bad "getAll of held keys$keys through node 1: $out" ;;
esac
w=$(metric 2 ember_repl_read_waits)
[ "${w:-0}" -ge $((${w0:-0} + 6)) ] && ok "node 2 held the getAll for its 6 partitions' acks" ||
    bad "node 2's reads held for acks went from ${w0:-?} to ${w:-?}"
rm -f "$HOLD"
want=""; for kk in $keys; do want="$want $kk=$((kk + 7000))"; done
out=$(node tests/chaos/cluster_dirty.js getall "$(node_addr 1)" dirty $keys 2>&1)
[ "$out" = "got$want" ] && ok "let go, getAll returns all six" || bad "let go, getAll: $out (want got$want)"

touch "$HOLD"
k2=$(held_key "$from") || { bad "no second put waited for node 2's stream"; finish; }
w0=$(metric 2 ember_repl_read_waits)
read_check 2 1000 "$k2" 1 "held again, a read through node 2"
w=$(metric 2 ember_repl_read_waits)
[ "${w:-0}" -gt "${w0:-0}" ] && ok "node 2 held that read for its acks" ||
    bad "node 2's reads held for acks went from ${w0:-?} to ${w:-?}"
node_kill 2
wait_metric 1 ember_cluster_members 1 && wait_metric 1 ember_cluster_lease 1 ||
    bad "node 1 did not go on alone"
out=$(cli 1 10000 get dirty "int:$k2")
case $out in
*"$((k2 + 7000))"*) bad "key $k2: node 1 has the write node 2 held (the hook held nothing?)" ;;
*) [ -z "${SAW:-}" ] && ok "key $k2: died with node 2, and no read returned it (node 1: ${out%%
*})" || bad "key $k2: died with node 2 after a read returned it (node 1: ${out%%
*})" ;;
esac
finish
