#!/bin/sh
# fuzz.sh - runs every libFuzzer target (tests/fuzz/fuzz_*.c, built by
# `make fuzz-build` with clang, ASan + UBSan) for FUZZ_SECONDS each (default 10
# here, as a suite of `make test`; `make fuzz` passes 60).  The growing corpus
# lives in FUZZ_BUILD/corpus-<name>, seeded from tests/fuzz/corpus/<name>/;
# a crash leaves its input in FUZZ_BUILD/artifacts/<name>/ and fails the
# target (make it a regression file in tests/fuzz/corpus/<name>/).  Without
# clang it is skipped (a failure under CI=true); under `make asan`/`make tsan`
# it runs nothing and counts nothing.
# Prints executions per target.  Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
FUZZ_BUILD=${FUZZ_BUILD:-$BUILD/fuzz}
SECS=${FUZZ_SECONDS:-10}
# ok, bad, finish, skip (a skip fails under CI=true)
. tests/scripts/lib.sh
PASS=0
FAIL=0

if [ -n "$EM_SANITIZER" ]; then
    # Not a skip: the targets carry their own ASan + UBSan, and the plain
    # `make test` of the same tree fuzzes them.  Nothing is counted.
    echo "fuzzing runs in the plain \`make test\` (and \`make fuzz\`), not under $EM_SANITIZER"
    finish
fi
if ! command -v clang >/dev/null 2>&1; then
    skip "clang not installed: no fuzz target ran"
    finish
fi
TARGETS=$(ls tests/fuzz/fuzz_*.c 2>/dev/null | sed 's|tests/fuzz/||; s|\.c$||')
if [ -z "$TARGETS" ]; then
    skip "no fuzz targets in tests/fuzz/"
    finish
fi
if [ -z "$FUZZ_NOBUILD" ]; then
    LOG=$(mktemp)
    if ! make --no-print-directory -j2 BUILD="$BUILD" FUZZ_BUILD="$FUZZ_BUILD" fuzz-build >"$LOG" 2>&1; then
        tail -30 "$LOG"
        rm -f "$LOG"
        bad "fuzz targets do not build with clang"
        finish
    fi
    rm -f "$LOG"
fi

TOTAL=0
for t in $TARGETS; do
    bin=$FUZZ_BUILD/$t
    if [ ! -x "$bin" ]; then
        bad "$t: $bin not built"
        continue
    fi
    mkdir -p "$FUZZ_BUILD/corpus-$t" "$FUZZ_BUILD/artifacts/$t"
    seeds=
    [ -d "tests/fuzz/corpus/$t" ] && seeds="tests/fuzz/corpus/$t"
    dict=
    [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
    out=$FUZZ_BUILD/$t.log
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$bin" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$FUZZ_BUILD/artifacts/$t/" $dict \
        "$FUZZ_BUILD/corpus-$t" $seeds >"$out" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
    cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$out" | tail -1 | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ncorp=$(ls "$FUZZ_BUILD/corpus-$t" | wc -l)
    TOTAL=$((TOTAL + ${execs:-0}))
    if [ $rc -eq 0 ]; then
        ok "$t: ${execs:-?} executions in ${SECS}s, coverage ${cov:-?}, corpus $ncorp"
    else
        bad "$t: exit $rc after ${execs:-?} executions; log $out"
        grep -E -A40 '^==[0-9]+==ERROR|runtime error:|deadly signal|Test unit written' "$out" | head -60
        ls -1 "$FUZZ_BUILD/artifacts/$t/" | sed "s|^|    artifact: $FUZZ_BUILD/artifacts/$t/|"
    fi
done
echo "fuzz: $TOTAL executions in total"
finish
