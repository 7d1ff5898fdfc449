#!/bin/sh
# fuzz.sh - runs every libFuzzer target (tests/fuzz/fuzz_*.c, built by
# `make fuzz-build` with clang, ASan + UBSan) for FUZZ_SECONDS each (default 2
# here, as a suite of `make test`; `make fuzz` passes 60).  The growing corpus
# lives in FUZZ_BUILD/corpus-<name>, seeded from tests/fuzz/corpus/<name>/;
# a crash leaves its input in FUZZ_BUILD/artifacts/<name>/ and fails the
# target (make it a regression file in tests/fuzz/corpus/<name>/), and so
# does a run of no executions.  Without clang (FUZZ_CC) or without targets it
# fails with CI=true and otherwise prints "0 passed, 0 failed", which
# tools/run-tests.sh reports as a suite that ran no checks, never as passes;
# the runner leaves this suite out under `make asan`/`make tsan`.
# Prints executions per target.  Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
FUZZ_BUILD=${FUZZ_BUILD:-$BUILD/fuzz}
SECS=${FUZZ_SECONDS:-2}
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; }
finish() { echo "$PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; exit $?; }

FUZZ_CC=${FUZZ_CC:-clang}
# cannot WHY: the suite cannot run; a failure in CI, 0 checks otherwise.
cannot() {
    if [ "$CI" = true ]; then
        bad "$1"
    else
        echo "skip: $1 (a failure with CI=true)"
    fi
    finish
}
if ! command -v "$FUZZ_CC" >/dev/null 2>&1; then
    cannot "$FUZZ_CC not installed (tools/deps.sh installs clang and libclang-rt-14-dev)"
fi
TARGETS=$(ls tests/fuzz/fuzz_*.c 2>/dev/null | sed 's|tests/fuzz/||; s|\.c$||')
if [ -z "$TARGETS" ]; then
    cannot "no fuzz targets (tests/fuzz/fuzz_*.c)"
fi
if [ -z "$FUZZ_NOBUILD" ]; then
    LOG=$(mktemp)
    if ! make --no-print-directory -j2 BUILD="$BUILD" FUZZ_BUILD="$FUZZ_BUILD" FUZZ_CC="$FUZZ_CC" \
            fuzz-build >"$LOG" 2>&1; then
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
    if [ $rc -eq 0 ] && [ "${execs:-0}" -gt 0 ]; then
        ok "$t: $execs executions in ${SECS}s, coverage ${cov:-?}, corpus $ncorp"
    elif [ $rc -eq 0 ]; then
        bad "$t: no executions reported; log $out"
        tail -20 "$out"
    else
        bad "$t: exit $rc after ${execs:-?} executions; log $out"
        grep -E -A40 '^==[0-9]+==ERROR|runtime error:|deadly signal|Test unit written' "$out" | head -60
        ls -1 "$FUZZ_BUILD/artifacts/$t/" | sed "s|^|    artifact: $FUZZ_BUILD/artifacts/$t/|"
    fi
done
echo "fuzz: $TOTAL executions in total"
finish
