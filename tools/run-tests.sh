#!/bin/sh
# run-tests.sh BUILD [--no-node] - run every suite, then sum their
# "N passed, N failed" lines into one final line of the same shape.
BUILD=${1:-build}
NONODE=$2
cd "$(dirname "$0")/.."
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

suite unit "$BUILD/unit-tests"
for r in "$BUILD"/replay/*; do
    [ -x "$r" ] || continue
    t=$(basename "$r")
    suite "fuzz-corpus $t" "$r" "tests/fuzz/corpus/$t"
done
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
