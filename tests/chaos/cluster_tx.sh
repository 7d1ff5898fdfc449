#!/bin/sh
# cluster_tx.sh - transactions across 3 real emberd processes (issue 17):
# ember-txc's functional suite through node 1 (every concurrency x
# isolation pair on keys whose primaries are on every node, waits (implicit
# puts too), deadlocks across nodes, timeouts,
# conflicts, disconnects, batches), then the bank workload - transfers in
# transactions from clients on every node, audits that must always read the
# initial total - without faults, with transfers that lock their accounts
# in any order and no timeout (only deadlock detection ends their cycles),
# and while node 3 is paused and resumed;
# then node 3 cut off by iptables until the others fail it (its clients
# move to the other nodes; the survivors must keep the total); then, on
# fresh clusters, a node dying at each point of two-phase commit
# (--cluster-tx-crash: a part prepared, a part told to commit, a part
# applied, a coordinator decided, a part between its backup copies): the survivors resolve what it left (its backups' copies of its
# part, its parts without their coordinator) and every node reads the same
# balances with the initial total.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
# Each bank run: half of CHAOS_SECONDS (make test: 3 s), 2 to 30 s; under a
# sanitizer 2 s, and the pause and cut cases are left to the normal build
# (they run the same code as the rest; CI's time is bounded).
SECS=$(( ${CHAOS_SECONDS:-6} / 2 ))
[ "$SECS" -lt 2 ] && SECS=2
[ "$SECS" -gt 30 ] && SECS=30
[ -n "${EM_SANITIZER:-}" ] && SECS=2
. tests/chaos/lib.sh
chaos_init

# CHAOS_TX_CASES: "all", or the crash cases alone (tests/chaos/planted.sh).
CASES=${CHAOS_TX_CASES:-all}
NODES=$(nodes_list 1 2 3)
txc() {
    out=$("$BUILD/ember-txc" "$@" 2>&1)
    rc=$?
    echo "$out" >"$CHAOS_TMP/last.out"
    if [ $rc = 0 ]; then
        echo "$out" | grep -v ' passed, ' | sed 's/^ok /ok   txc: /'
        PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
        return 0
    fi
    echo "$out" | sed 's/^/     /'
    return 1
}
# row NEMESIS FILE KEPT: a line of tools/chaos-table.sh's bank table from
# the bank summary in FILE; KEPT: whether the final check held.
row() {
    sed -n 's/^ *bank: [0-9]* clients, [0-9]* accounts: \([0-9]*\) transfers committed, \([0-9]*\) failed, \([0-9]*\) unknown.*; \([0-9]*\) audits committed, \([0-9]*\) saw.*/\1 | \2 | \3 | \4 | \5/p' "$2" |
        head -1 | sed "s/^/row $1 | bank | /; s/\$/ | $3/"
}
if [ "$CASES" = all ]; then
    start_three || finish
    txc test --nodes "$NODES" --cache txt || bad "ember-txc test"
    if txc bank --nodes "$NODES" --cache bank1 --accounts 16 --clients 4 --duration "$SECS"; then
        ok "bank: every audit and every node kept the total"; row none "$CHAOS_TMP/last.out" yes
    else
        bad "bank without faults"; row none "$CHAOS_TMP/last.out" NO
    fi
    # Transfers locking their two accounts in any order without a timeout:
    # opposite transfers deadlock, on one node or across nodes, and only
    # deadlock detection ends them (a cycle nobody broke leaves its clients
    # waiting until --call-ms: "never ended", a failure).
    if txc bank --nodes "$NODES" --cache bank4 --accounts 6 --clients 4 --duration "$SECS" \
           --any-order 1 --call-ms 20000; then
        dl=0
        for i in 1 2 3; do d=$(metric $i ember_tx_deadlocks_across_nodes); dl=$((dl + ${d:-0})); done
        ok "bank, any lock order, no timeouts: every transfer ended, total kept ($dl cycles across nodes broken)"
        row any-order "$CHAOS_TMP/last.out" yes
    else
        bad "bank with any lock order"; row any-order "$CHAOS_TMP/last.out" NO
    fi

    if [ -z "${EM_SANITIZER:-}" ]; then
        # A paused node: its clients' transactions wait, time out or go on after it
        # resumes; none may half-commit.
        "$BUILD/ember-txc" bank --nodes "$NODES" --cache bank2 --accounts 16 --clients 4 \
            --duration $((SECS + 2)) >"$CHAOS_TMP/bank2.out" 2>&1 &
        BANK=$!
        sleep 1
        node_pause 3
        sleep 1
        node_resume 3
        wait "$BANK"
        rc=$?
        sed 's/^/     /' "$CHAOS_TMP/bank2.out"
        if [ $rc = 0 ]; then
            ok "bank with node 3 paused and resumed: total kept"; row pause "$CHAOS_TMP/bank2.out" yes
        else
            bad "bank with a pause"; row pause "$CHAOS_TMP/bank2.out" NO
        fi

        # A partition: node 3 cut off (its clients too) until the others fail it.
        "$BUILD/ember-txc" bank --nodes "$NODES" --cache bank3 --accounts 16 --clients 4 \
            --duration $((SECS + 4)) --check 0 --call-ms 4000 >"$CHAOS_TMP/bank3.out" 2>&1 &
        BANK=$!
        sleep 1
        net_isolate 3
        wait_metric 1 ember_cluster_members 2 && ok "partition: nodes 1 and 2 failed node 3" ||
            bad "partition: node 3 never failed"
        net_heal
        wait "$BANK"
        rc=$?
        sed 's/^/     /' "$CHAOS_TMP/bank3.out"
        [ $rc = 0 ] || bad "bank with node 3 cut off"
        for i in 1 2; do
            wait_metric $i ember_tx_parts 0 && wait_metric $i ember_tx_backup_copies 0 ||
                bad "partition: node $i still holds transaction parts"
        done
        if txc bank-check --nodes "$(nodes_list 1 2)" --cache bank3 --accounts 16; then
            ok "partition: nodes 1 and 2 read the same balances, total kept"
            row cut "$CHAOS_TMP/bank3.out" yes
        else
            bad "partition: total"; row cut "$CHAOS_TMP/bank3.out" NO
        fi
    fi
    for i in 1 2 3; do node_kill $i; done
fi

# crash_case POINT BASE RECOVERY [BACKUPS]: nodes BASE..BASE+2, the last one
# exits at the 5th time it reaches POINT; a survivor must log RECOVERY.
# BACKUPS (default 1) is the bank cache's.
crash_case() {
    p=$1; b=$2; want=$3; last=$((b + 2)); bk=${4:-1}
    node_start $b $(cluster_flags $b) || finish
    node_start $((b + 1)) $(cluster_flags $((b + 1)) $b) || finish
    node_start $last $(cluster_flags $last $b) --cluster-tx-crash "$p:5" || finish
    for i in $b $((b + 1)) $last; do
        wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_joined 1 ||
            { bad "$p: node $i did not join"; finish; }
    done
    all=$(nodes_list $b $((b + 1)) $last)
    txc bank --nodes "$all" --cache "crash$p" --backups "$bk" --accounts 16 --clients 4 \
        --duration "$SECS" --check 0 || bad "$p: bank"
    cp "$CHAOS_TMP/last.out" "$CHAOS_TMP/crash$p.out"
    grep -q "tx_crash: exiting at '$p'" "$(eval echo "\$CHAOS_LOG_$last")" &&
        ok "$p: node $last exited at that point" || { bad "$p: node $last never reached it"; return; }
    # What it left is resolved once the survivors drop it (failure
    # detection): no part or backup copy remains on either.
    for i in $b $((b + 1)); do
        wait_metric $i ember_tx_parts 0 && wait_metric $i ember_tx_backup_copies 0 ||
            bad "$p: node $i still holds transaction parts"
    done
    grep -q -e "$want" "$CHAOS_TMP/n$b"/emberd.*.log "$CHAOS_TMP/n$((b + 1))"/emberd.*.log &&
        ok "$p: $(grep -h -e "$want" "$CHAOS_TMP/n$b"/emberd.*.log "$CHAOS_TMP/n$((b + 1))"/emberd.*.log |
                  head -1 | sed 's/^.*: its/its/')" || bad "$p: no survivor logged '$want'"
    if txc bank-check --nodes "$(nodes_list $b $((b + 1)))" --cache "crash$p" --accounts 16; then
        ok "$p: both survivors read the same balances, total kept"
        row "crash at $p" "$CHAOS_TMP/crash$p.out" yes
    else
        bad "$p: total"; row "crash at $p" "$CHAOS_TMP/crash$p.out" NO
    fi
    for i in $b $((b + 1)); do node_kill $i; done
    node_kill $last 2>/dev/null
}
# Under a sanitizer two of the four (a backup copy resolved with its
# coordinator alive, parts resolved without their coordinator).
SAN=${EM_SANITIZER:+yes}
case $CASES$SAN in all|*prepared*) crash_case prepared 4 "its primary left; [a-z ]* its backup copy" ;; esac
case $CASES in all|*committing*) crash_case committing 13 "its primary left; committed its backup copy" ;; esac
case $CASES$SAN in all|*applied*) crash_case applied 7 "its primary left; committed its backup copy" ;; esac
# (a coordinator's own part that only read has no copy, and its other parts
# roll back: either outcome keeps the total)
case $CASES in all|*decided*) crash_case decided 10 "its coordinator left; [a-z ]* its part" ;; esac
# A part's primary dying between its copies (one backup took its copy, the
# other none): the copy taken is no proof the part prepared.  Two backups,
# so that every part has copies on both other nodes: with one, a part has
# two only when its keys' backups differ, and a layout where none of the
# dying node's parts do (the node ids pick it) never reaches the point.
case $CASES$SAN in all|*shadowed*) crash_case shadowed 16 "its primary left; [a-z ]* its backup copy" 2 ;; esac
finish
