#!/bin/sh
# chaos-table.sh - the fault-injection results table: each nemesis alone
# (kill -9 and restart, SIGSTOP past the lease, an iptables cut of one node
# from the other two, the same of the coordinator, a one-way cut, the
# transport's fault hook) under each workload (set,
# register) on 3 nodes with 2 backups (FULL_SYNC), CHAOS_SECONDS each
# (default 30), one row per pair; and a primary deposed while alive
# (tests/chaos/cluster_fence.sh: 1 backup, set workload); then the bank
# workload of transactions across nodes (tests/chaos/cluster_tx.sh: no
# fault, a pause, a cut, a node dying at each point of the commit), a
# second table.  Prints markdown tables; exits non-zero
# when a scenario failed.  BENCHMARKS.md "Fault injection" quotes a run.
#
#   CHAOS_SECONDS=30 tools/chaos-table.sh [BUILD]
cd "$(dirname "$0")/.." || exit 1
BUILD=${1:-${EMBER_BUILD:-build}}
SECS=${CHAOS_SECONDS:-30}
out=$(mktemp)
rc=0
for nem in kill pause cut leader oneway; do
    echo "== $nem" >&2
    CHAOS_NEMESES=$nem EMBER_BUILD=$BUILD CHAOS_SECONDS=$SECS sh tests/chaos/cluster_nemesis.sh \
        >"$out.$nem" 2>&1 || rc=1
    grep -E '^(FAIL|nemesis:|[0-9]+ passed)' "$out.$nem" >&2
    grep '^row ' "$out.$nem" >>"$out"
done
echo "== faults" >&2
EMBER_BUILD=$BUILD CHAOS_SECONDS=$SECS sh tests/chaos/cluster_faults.sh >"$out.faults" 2>&1 || rc=1
grep -E '^(FAIL|[0-9]+ passed)' "$out.faults" >&2
grep '^row ' "$out.faults" >>"$out"
echo "== deposed" >&2
EMBER_BUILD=$BUILD CHAOS_SECONDS=$SECS sh tests/chaos/cluster_fence.sh >"$out.fence" 2>&1 || rc=1
grep -E '^(FAIL|deposed:|[0-9]+ passed)' "$out.fence" >&2
grep '^row ' "$out.fence" >>"$out"
echo "== bank" >&2
EMBER_BUILD=$BUILD CHAOS_SECONDS=$SECS sh tests/chaos/cluster_tx.sh >"$out.tx" 2>&1 || rc=1
grep -E '^(FAIL|[0-9]+ passed)' "$out.tx" >&2
echo "| nemesis | workload | operations | acknowledged | failed | indeterminate | lost | linearizability violations (keys) | minority-side acknowledgements |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
sed 's/^row /| /; s/$/ |/' "$out"
echo
echo "| nemesis | workload | transfers committed | failed | unknown | audits committed | audits with a wrong total | total kept on every node |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
grep '^row ' "$out.tx" | sed 's/^row /| /; s/$/ |/'
rm -f "$out" "$out".*
exit $rc
