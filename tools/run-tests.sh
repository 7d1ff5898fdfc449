#!/bin/sh
# run-tests.sh BUILD [--no-node] - run every suite, then sum their
# "N passed, N failed" lines into one final line of the same shape.
# The fuzz corpus replays are ONE test per target (tests/fuzz/fuzz_*.c):
# REPLAY_BUILD/replay/<target> (ASan + UBSan; `make replay`, REPLAY_BUILD
# default build/asan) over tests/fuzz/corpus/<target>/; replay-canary checks
# that the replay fails, naming the file, on planted bugs.
BUILD=${1:-build}
NONODE=$2
cd "$(dirname "$0")/.."
REPLAY=${REPLAY_BUILD:-build/asan}
LOG=$(mktemp)
status=0

suite() {
    name=$1; shift
    echo "== $name"
    out=$(mktemp)
    "$@" >"$out" 2>&1
    rc=$?
    grep -v '^ok  ' "$out"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    if [ -z "$line" ]; then
        echo "   (suite $name printed no summary; exit $rc) -> counted as 1 failure"
        line="0 passed, 1 failed"
    elif [ $rc -ne 0 ] && echo "$line" | grep -q ' 0 failed'; then
        echo "   (suite $name exited $rc) -> counted as 1 failure"
        line="0 passed, 1 failed"
    fi
    echo "$line" >>"$LOG"
    rm -f "$out"
}

# replay_canary BIN: ok/FAIL lines and a summary for the replay's own checks.
replay_canary() {
    d=$(mktemp -d)
    p=0 f=0
    mkdir "$d/clean"
    printf 'no bug' >"$d/clean/a"
    : >"$d/clean/empty"
    "$1" "$d/clean" >"$d/out" 2>&1
    if [ $? -eq 0 ] && grep -q '^ok   replay-canary: 2 inputs$' "$d/out"; then
        p=$((p + 1)); echo "ok   clean inputs pass as one test"
    else
        f=$((f + 1)); echo "FAIL clean inputs:"; cat "$d/out"
    fi
    for k in heap:AddressSanitizer ubsan:'runtime error' leak:LeakSanitizer abort:'signal 6'; do
        bug=${k%%:*}
        printf '%s' "$bug" >"$d/$bug"
        "$1" "$d/clean" "$d/$bug" >"$d/out" 2>&1
        if [ $? -ne 0 ] && grep -q "^FAIL $d/$bug: " "$d/out" && grep -q "${k#*:}" "$d/out" &&
           tail -1 "$d/out" | grep -q '^0 passed, 1 failed$'; then
            p=$((p + 1)); echo "ok   $bug: caught, file named"
        else
            f=$((f + 1)); echo "FAIL $bug: not caught (is the replay built without sanitizers?):"
            sed 's/^/     /' "$d/out" | head -20
        fi
    done
    for arg in "$d/none" "$d/emptydir"; do
        mkdir -p "$d/emptydir"
        if ! "$1" "$arg" >"$d/out" 2>&1 && grep -q '^0 passed, 1 failed$' "$d/out"; then
            p=$((p + 1)); echo "ok   $(basename "$arg"): fails"
        else
            f=$((f + 1)); echo "FAIL $(basename "$arg") passed:"; cat "$d/out"
        fi
    done
    rm -rf "$d"
    echo "$p passed, $f failed"
}

suite unit "$BUILD/unit-tests"
for src in tests/fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    t=$(basename "$src" .c)
    suite "fuzz-corpus $t" "$REPLAY/replay/$t" "tests/fuzz/corpus/$t"
done
ls tests/fuzz/fuzz_*.c >/dev/null 2>&1 &&
    suite replay-canary replay_canary "$REPLAY/replay-canary"
[ -x "$BUILD/integration-tests" ] && EMBERD="$BUILD/emberd" suite integration env EMBER_BUILD="$BUILD" "$BUILD/integration-tests"
if [ "$NONODE" != "--no-node" ] && [ -x tests/node/run.sh ]; then
    suite node env EMBER_BUILD="$BUILD" tests/node/run.sh
fi
for s in tests/scripts/*.sh; do
    [ -x "$s" ] || continue
    suite "$(basename "$s" .sh)" env EMBER_BUILD="$BUILD" "$s"
done

awk -F'[ ,]+' '{p+=$1; f+=$3} END {printf "%d passed, %d failed\n", p, f; exit (f>0)}' "$LOG"
status=$?
rm -f "$LOG"
exit $status
