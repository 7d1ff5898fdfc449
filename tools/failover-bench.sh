#!/bin/sh
# failover-bench.sh - BENCHMARKS.md F1: failover time, from kill -9 of a node
# to the first acknowledged write on a partition it was primary of.
#
# 3 emberd on the run's own loopback addresses (tests/chaos/lib.sh), a
# PARTITIONED cache with 1 backup in FULL_SYNC, 16 writers through a node
# that stays (tests/chaos/cluster_failover.js: writer k puts int key k, its
# own partition, in a loop).  At T0 the shell kills one node (reaped by T1);
# per writer the first acknowledged put started after T1 (the put in flight
# at the kill, if stalled, ends first) ends at E; the failover time of the
# run is the largest E - T0 (a writer whose partition
# had its primary elsewhere answers at once; "stalled" counts the writers
# that waited over 100 ms).  Two victims: a primary that
# is not the coordinator (node 2), and the coordinator itself (node 1, the
# metadata group's leader; the writers then go through node 3).  Each with
# --failure-detection-timeout 1000 and with the default (10 000), REPS runs
# each (FAILOVER_REPS, 3), the median and the largest printed.
# Also counts puts that failed (the client saw an error: 0 expected, the
# remap is invisible) and checks that a writer did stall (some primary was
# on the victim).
cd "$(dirname "$0")/.."
BUILD=${EMBER_BUILD:-build}
REPS=${FAILOVER_REPS:-3}
FDS=${FAILOVER_FDS:-1000 10000}
. tests/chaos/lib.sh
chaos_init
JS=tests/chaos/cluster_failover.js
now_ms() { date +%s%3N; }

# one_run FD VICTIM VIA: appends "failover_ms errors stalled_writers" to
# $CHAOS_TMP/rows (in this shell, so the harness's cleanup knows every pid).
one_run() {
    fd=$1 victim=$2 via=$3
    CHAOS_FD_MS=$fd
    export CHAOS_FD_MS
    node_start 1 $(cluster_flags 1) || return 1
    node_start 2 $(cluster_flags 2 1) || return 1
    node_start 3 $(cluster_flags 3 1) || return 1
    for i in 1 2 3; do
        wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_lease 1 ||
            return 1
    done
    node "$JS" create "$(node_addr 1)" fo 1 >/dev/null || return 1
    stop="$CHAOS_TMP/stop"; log="$CHAOS_TMP/writes"
    rm -f "$stop"
    : >"$log"
    node "$JS" write "$(node_addr "$via")" fo 16 "$stop" >"$log" 2>&1 &
    wp=$!
    # Steady state first: every writer had 5 puts acknowledged within the
    # last second, none slower than 100 ms (a cluster just formed runs its
    # first exchanges and rebalancing, which a kill must not be mixed with).
    t=0
    while [ "$(awk -v now="$(now_ms)" '$4 == "ok" && $3 >= now - 1000 && $3 - $2 < 100 { n[$1]++ }
                $3 >= now - 1000 && $3 - $2 >= 100 { slow = 1 }
                END { k = 0; for (i in n) if (n[i] >= 5) k++; print slow ? 0 : k }' "$log")" != 16 ]; do
        sleep 0.2; t=$((t + 1)); [ $t -gt 600 ] && { touch "$stop"; wait $wp; return 1; }
    done
    t0=$(now_ms)
    node_kill "$victim"
    t1=$(now_ms)                # the victim is reaped: dead from here on
    # Wait until every writer has an acknowledged put started after T0.
    t=0
    while [ "$(awk -v t1="$t1" '$2 >= t1 && $4 == "ok" { n[$1] = 1 } END { k = 0; for (i in n) k++; print k }' "$log")" != 16 ]; do
        sleep 0.1; t=$((t + 1)); [ $t -gt 1200 ] && break
    done
    touch "$stop"
    wait $wp
    awk -v t0="$t0" -v t1="$t1" '
        $2 >= t1 && $4 == "ok" && !($1 in first) { first[$1] = $3 }
        $4 == "err" { err++ }
        END {
            m = 0; for (k in first) if (first[k] - t0 > m) m = first[k] - t0
            s = 0; for (k in first) if (first[k] - t0 > 100) s++
            printf "%d %d %d\n", m, err + 0, s
        }' "$log" >>"$CHAOS_TMP/rows"
}

# stop_nodes: kill what one_run left running, forget its data.
stop_nodes() {
    for i in 1 2 3; do node_kill "$i"; done
    rm -rf "$CHAOS_TMP"/n1 "$CHAOS_TMP"/n2 "$CHAOS_TMP"/n3
}

med() { sort -n | awk '{ a[NR] = $1 } END { printf "%d %d", a[int((NR + 1) / 2)], a[NR] }'; }

printf '%-34s %8s %10s %8s %8s %8s\n' "victim" "fd_ms" "median_ms" "max_ms" "errors" "stalled"
for fd in $FDS; do
    for kind in ${FAILOVER_KINDS:-primary coordinator}; do
        if [ $kind = primary ]; then victim=2 via=1; else victim=1 via=3; fi
        : >"$CHAOS_TMP/rows"
        r=0
        while [ $r -lt "$REPS" ]; do
            one_run "$fd" $victim $via
            rc=$?
            stop_nodes
            [ $rc = 0 ] || { bad "$kind fd $fd: the run did not complete"; break; }
            [ -n "${FAILOVER_VERBOSE:-}" ] && echo "# $kind fd $fd run $r: $(tail -1 "$CHAOS_TMP/rows")" &&
                cp "$CHAOS_TMP/writes" "$CHAOS_TMP/writes.$kind.$fd.$r"
            r=$((r + 1))
        done
        [ -s "$CHAOS_TMP/rows" ] || continue
        set -- $(cut -d' ' -f1 "$CHAOS_TMP/rows" | med)
        errs=$(awk '{ e += $2 } END { print e + 0 }' "$CHAOS_TMP/rows")
        st=$(awk '{ if (min == "" || $3 < min) min = $3 } END { print min + 0 }' "$CHAOS_TMP/rows")
        label="kill -9 of a primary"
        [ $kind = coordinator ] && label="kill -9 of the coordinator"
        printf '%-34s %8d %10d %8d %8d %8d\n' "$label" "$fd" "$1" "$2" "$errs" "$st"
        [ "$st" -gt 0 ] && ok "$kind fd $fd: a writer stalled on the victim's partitions" ||
            bad "$kind fd $fd: no writer's partition had its primary on the victim"
        [ "$errs" = 0 ] && ok "$kind fd $fd: no put failed" || bad "$kind fd $fd: $errs puts failed"
    done
done
finish
