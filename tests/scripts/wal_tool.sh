#!/bin/sh
# wal_tool.sh - black-box tests of `ember-wal check|dump|repair` (tools/wal/) on WAL
# files from the fuzz seed corpus (tests/fuzz/corpus/fuzz_wal/, written by
# src/wal/): clean, torn tail, mid-log corruption, missing segment,
# checkpoint, a segment whose header's first LSN disagrees with its
# records.  Last line: "N passed, N failed".
BUILD=${EMBER_BUILD:-build}
TOOL="$BUILD/ember-wal"
SEEDS=tests/fuzz/corpus/fuzz_wal
cd "$(dirname "$0")/../.."
pass=0; fail=0
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# expect NAME WANT_STATUS PATTERN -- CMD...: status and a line matching PATTERN
expect() {
    name=$1; want=$2; pat=$3; shift 4
    out=$("$@" 2>&1); st=$?
    if [ "$st" -eq "$want" ] && printf '%s\n' "$out" | grep -q -- "$pat"; then ok "$name"
    else bad "$name (exit $st, want $want; pattern '$pat')"; printf '%s\n' "$out" | sed 's/^/     /'; fi
}

seg0=wal-0000000000000000.seg

mkdir "$T/clean"; cp "$SEEDS/segment-8-records" "$T/clean/$seg0"
expect check_clean 0 "^OK: 8 records replayable (4 put, 1 remove, 1 clear, 1 cache create, 1 cache destroy); next LSN 9" -- "$TOOL" check "$T/clean"

mkdir "$T/torn"; cp "$SEEDS/segment-torn" "$T/torn/$seg0"
size_before=$(wc -c <"$T/torn/$seg0")
expect check_torn_tail 0 "note: .*$seg0: torn tail at offset 764 (recovery cuts it)" -- "$TOOL" check "$T/torn"
size_after=$(wc -c <"$T/torn/$seg0")
if [ "$size_before" -eq "$size_after" ]; then ok check_is_read_only; else bad check_is_read_only; fi

mkdir "$T/flip"; cp "$SEEDS/segment-bitflip-middle" "$T/flip/$seg0"
expect check_mid_corruption 1 "^CORRUPT: $T/flip/$seg0: corrupt record at offset 384 followed by a valid record at offset 492" -- "$TOOL" check "$T/flip"

mkdir "$T/gap"; cp "$SEEDS/segment-8-records" "$T/gap/$seg0"; cp "$SEEDS/segment-8-records" "$T/gap/wal-0000000000000002.seg"
expect check_missing_segment 1 "wal-0000000000000001.seg: missing between existing segments" -- "$TOOL" check "$T/gap"

mkdir "$T/mislabeled"; cp "$SEEDS/segment-mislabeled" "$T/mislabeled/$seg0"
expect check_mislabeled 0 "^warning: 1 segment(s) read by their records' LSNs, not their headers'; the last: .*$seg0: segment header says first LSN 5 but its records start at LSN 1 (offset 32)" -- "$TOOL" check "$T/mislabeled"

expect repair_mislabeled 0 "^repaired: 1 file header(s) rewritten" -- "$TOOL" repair "$T/mislabeled"
expect repaired_checks_clean 0 "^OK: 8 records replayable" -- "$TOOL" check "$T/mislabeled"
if "$TOOL" check "$T/mislabeled" | grep -q "^warning"; then bad repaired_has_no_warning; else ok repaired_has_no_warning; fi
expect repair_nothing 0 "^OK: nothing to repair" -- "$TOOL" repair "$T/clean"
cp "$T/flip/$seg0" "$T/flip.before"
expect repair_refuses_corruption 1 "^not repaired (EM_CORRUPT): 0 file(s) rewritten" -- "$TOOL" repair "$T/flip"
if cmp -s "$T/flip/$seg0" "$T/flip.before"; then ok repair_leaves_corruption_alone; else bad repair_leaves_corruption_alone; fi

mkdir "$T/ckpt"; cp "$SEEDS/checkpoint" "$T/ckpt/ckpt-0000000000000001.ckpt"
expect check_checkpoint 0 "^OK: 4 records replayable (3 put, 0 remove, 0 clear, 1 cache create" -- "$TOOL" check "$T/ckpt"
expect dump_checkpoint 0 "END records=4" -- "$TOOL" dump "$T/ckpt"

expect dump_segment 0 "lsn 2 .*PUT .*cache 3169 .*expire_at 1700000000000" -- "$TOOL" dump "$T/clean/$seg0"
expect dump_torn 0 "7 records, then 59 invalid bytes at offset 764 (a torn tail)" -- "$TOOL" dump "$T/torn/$seg0"
expect dump_corrupt 1 "CORRUPT bytes at offset 384; valid frames resume at 492" -- "$TOOL" dump "$T/flip/$seg0"
expect usage 2 "usage: ember-wal" -- "$TOOL" frobnicate

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
