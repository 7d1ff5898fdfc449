#!/bin/sh
# cluster_disk.sh - a full disk on a persistent cluster node: three nodes
# persisting in FSYNC mode, a cache with 2 backups (FULL_SYNC), node 3's
# data directory on a small tmpfs of its own that is filled while the set
# workload writes through every node.  Node 3's log writes fail (ENOSPC):
# it must not crash, must report its region failed (/metrics), and no write
# may be acknowledged unless every owner applied it - so every acknowledged
# add is there afterwards.  Then the space comes back, node 3 is restarted
# on its directory, rejoins, and every owner of every partition holds the
# same entries (idle-verify).  Needs root (mount), as CI has.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=${CHAOS_SECONDS:-8}
. tests/chaos/lib.sh
chaos_init
D3="$CHAOS_TMP/n3/data"
mkdir -p "$D3"
if ! mount -t tmpfs -o size=16m tmpfs "$D3" 2>"$CHAOS_TMP/mount.err"; then
    bad "cannot mount a tmpfs for node 3's data: $(cat "$CHAOS_TMP/mount.err")"
    finish
fi
# unmounted before lib.sh removes the run's directory, on every exit path
CHAOS_UMOUNT="$D3"
PFL="--persistence true --wal-mode FSYNC --wal-segment-size 1m"

persistent_cluster3 2 $PFL || finish
ok "3 persistent nodes (FSYNC), node 3's data on a 16 MiB tmpfs, a cache with 2 backups"

hist="$CHAOS_TMP/set.history"
"$BUILD/ember-chaos" run --nodes "$(nodes_list 1 2 3)" --workload set --cache chaos-set \
    --clients 4 --duration "$SECS" --timeout-ms 3000 --history "$hist" \
    >"$CHAOS_TMP/set.run" 2>&1 &
cpid=$!
sleep 1
# The disk fills: what is left of it, in one file.
dd if=/dev/zero of="$D3/filler" bs=64k 2>/dev/null
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] &&
      [ "$(metric 3 'ember_health_component_failed{component="wal_region_default"}')" != 1 ]; do
    sleep 0.1; t=$((t + 1))
done
if [ "$(metric 3 'ember_health_component_failed{component="wal_region_default"}')" = 1 ]; then
    ok "node 3 reports its region failed once its disk is full"
else
    bad "node 3 never reported the full disk (/metrics)"
fi
wait $cpid
rc=$?
cat "$CHAOS_TMP/set.run"
[ $rc -eq 0 ] || bad "set: ember-chaos run exited $rc"
if kill -0 "$(node_pid 3)" 2>/dev/null && ! grep -q "^State:.*Z" "/proc/$(node_pid 3)/status" 2>/dev/null; then
    ok "node 3 ran on with a full disk (no crash)"
else
    bad "node 3 died with its disk full:"; tail -20 "$(eval echo \$CHAOS_LOG_3)"
fi
grep -q 'persistence failed' "$(eval echo \$CHAOS_LOG_3)" &&
    ok "node 3's log says why: $(grep -m1 -o 'persistence failed.*accept writes' "$(eval echo \$CHAOS_LOG_3)")" ||
    bad "node 3's log does not say its persistence failed"

# The space comes back; node 3 restarts on its directory and rejoins.
rm -f "$D3/filler"
node_kill 3
node_start 3 $(cluster_flags 3 1) $PFL || finish
members_are 1 2 3 || bad "node 3 did not rejoin"
t=0
while [ $t -lt 600 ] && [ "$(metric 1 ember_rebal_loading)$(metric 2 ember_rebal_loading)$(metric 3 ember_rebal_loading)" != 000 ]; do
    sleep 0.1; t=$((t + 1))
done
if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1 2 3)" --workload set \
    --cache chaos-set --history "$hist" >"$CHAOS_TMP/set.check" 2>&1; then
    ok "set: $(grep '^check' "$CHAOS_TMP/set.check")"
else
    bad "set: check failed"; cat "$CHAOS_TMP/set.check"
fi
chaos_row disk-full set
grep -q ' [1-9][0-9]* ok' "$CHAOS_TMP/set.run" || bad "set: no operation was acknowledged"
idle_verify "after the full disk" chaos-set
finish
