#!/bin/sh
# cluster_faults.sh - replication through a lossy transport: 3 nodes whose
# fault hook (--cluster-fault) drops, duplicates and delays (so reorders) a
# share of every replication frame and ack, under the set and register
# workloads on caches with 2 backups (FULL_SYNC).  The stream must make the
# faults harmless: no write fails or goes unanswered, none is lost, the
# registers stay linearizable, every copy of every partition is the same
# (idle-verify), and no owner had to give up on a gap (it was resent).
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SECS=${CHAOS_SECONDS:-6}
FAULT=${CHAOS_FAULT:-drop=3,dup=3,delay=5}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_rebal.js

node_start 1 $(cluster_flags 1) --cluster-fault "$FAULT" || finish
node_start 2 $(cluster_flags 2 1) --cluster-fault "$FAULT" || finish
node_start 3 $(cluster_flags 3 1) --cluster-fault "$FAULT" || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_lease 1 ||
        { bad "node $i did not join"; finish; }
done
r=$(node $JS put "$(node_addr 1)" faults-set 2 0 0 2>&1) || { bad "cache faults-set: $r"; finish; }
r=$(node $JS put "$(node_addr 1)" faults-register 2 0 0 primary 2>&1) ||
    { bad "cache faults-register: $r"; finish; }
ok "3 nodes dropping, duplicating and delaying replication frames ($FAULT)"

for w in set register; do
    hist="$CHAOS_TMP/$w.history"
    if "$BUILD/ember-chaos" run --nodes "$(nodes_list 1 2 3)" --workload "$w" \
            --cache "faults-$w" --clients 4 --duration "$SECS" --timeout-ms 5000 \
            --history "$hist" >"$CHAOS_TMP/$w.run" 2>&1; then
        run=$(tail -1 "$CHAOS_TMP/$w.run")
        # Nothing but acknowledgements: a lost frame costs time, not a write.
        echo "$run" | grep -q ' 0 fail, 0 info' && echo "$run" | grep -q ' [1-9][0-9]* ok' &&
            ok "$w: $run" || bad "$w: $run"
    else
        bad "$w: ember-chaos run failed"; cat "$CHAOS_TMP/$w.run"
    fi
    if "$BUILD/ember-chaos" check --nodes "$(nodes_list 1 2 3)" --workload "$w" \
            --cache "faults-$w" --history "$hist" >"$CHAOS_TMP/$w.check" 2>&1; then
        ok "$w: $(tail -1 "$CHAOS_TMP/$w.check")"
    else
        bad "$w: check failed"; cat "$CHAOS_TMP/$w.check"
    fi
    chaos_row faults "$w"
done

# The faults happened, the stream repaired them, and nobody gave up.
# sum NAME: NAME over the three nodes; "?" when a node does not report it
# (so a missing metric fails the checks below instead of the shell).
sum() {
    s=0
    for i in 1 2 3; do
        v=$(metric "$i" "$1")
        case $v in ''|*[!0-9]*) echo "?"; return ;; esac
        s=$((s + v))
    done
    echo $s
}
resent=$(sum ember_repl_resent)
gaps=$(sum ember_repl_gaps)
[ "$resent" != "?" ] && [ "$resent" -gt 0 ] && ok "windows resent: $resent (gaps reported: $gaps)" ||
    bad "no window was resent (gaps reported: $gaps): the faults did not bite"
skipped=$(sum ember_repl_gaps_skipped)
given=$(sum ember_repl_windows_given_up)
[ "$skipped" = 0 ] && [ "$given" = 0 ] && ok "no gap skipped, no window given up" ||
    bad "gaps skipped: $skipped, windows given up: $given"
idle_verify "at the end" faults-set faults-register
for i in 1 2 3; do node_term $i || bad "node $i did not stop cleanly (exit $?)"; done
finish
