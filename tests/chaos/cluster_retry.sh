#!/bin/sh
# cluster_retry.sh - a forwarded write runs once (cluster/cl_rid.h): node 2
# exits right after the first write forwarded to it ran and was replicated,
# before its reply leaves (--cluster-exit-after-writes 1, a test hook).  The
# forwarding node re-maps the write to the key's new primary under the same
# origin request id; that copy learned the id with the update and answers
# with the first run's outcome.  The client sees every put-if-absent of a
# new key answer true - a second run would answer false - and no error.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
CHAOS_FD_MS=1000

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) --cluster-exit-after-writes 1 || finish
node_start 3 $(cluster_flags 3 1) || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_joined 1 ||
        { bad "node $i did not join"; finish; }
done
ok "3 nodes joined, node 2 exits after its first forwarded write"

if out=$(node tests/chaos/cluster_retry.js "$(node_addr 1)" retry 64 2>&1); then
    echo "$out"
    PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
else
    echo "$out"
    bad "node client: put-if-absent through node 1"
fi
pid2=$(node_pid 2)
st=$(ps -o stat= -p "$pid2" 2>/dev/null)
if [ -n "$st" ] && [ "${st#Z}" = "$st" ]; then
    bad "node 2 is still running: no write was forwarded to it"
else
    grep -q 'exit_after_writes: exiting' "$(eval echo "\$CHAOS_LOG_2")" &&
        ok "node 2 exited after a forwarded write ran there" ||
        bad "node 2 exited, but not by the hook"
fi
wait "$pid2" 2>/dev/null
chaos_forget "$pid2"
# The retry was answered from the window, on the new primary.
s=0
for i in 1 3; do
    v=$(metric "$i" 'ember_rid_retries_answered{from="replicated"}')
    s=$((s + ${v:-0}))
done
[ "$s" -ge 1 ] && ok "the retry was answered from the replicated request id ($s)" ||
    bad "no retry was answered from a replicated request id"
finish
