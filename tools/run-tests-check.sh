#!/bin/sh
# run-tests-check.sh - checks tools/run-tests.sh's own rules (suite "runner"):
# it runs a copy of the runner in a scratch tree of stub suites, once clean
# and once per defect, with CI=true and without.  Each defect (unit tests or
# a replay binary not built, a corpus missing, a corpus without a target, a
# script not executable, a suite with no checks, the fuzz suite without
# clang) must be one failure with CI=true and a WARN, counted neither way,
# without; lib.sh is not a suite.  The replay-canary suite in the stub tree
# uses the real REPLAY_BUILD/replay-canary.  Last line: "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
CANARY=$ROOT/${REPLAY_BUILD:-build/asan}/replay-canary
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -x "$CANARY" ]; then
    bad "$CANARY not built (make replay)"
    echo "$PASS passed, $FAIL failed"
    exit 1
fi

# stub FILE LINE...: an executable script printing the lines.
stub() {
    f=$1; shift
    mkdir -p "$(dirname "$f")"
    { echo '#!/bin/sh'; for l in "$@"; do echo "echo '$l'"; done; } >"$f"
    chmod +x "$f"
}

# tree DIR: the clean stub tree: 10 checks pass (unit 1, fuzz_a 1, canary 7,
# good.sh 1) and lib.sh is left alone.
tree() {
    mkdir -p "$1/tools" "$1/tests/fuzz/corpus/fuzz_a" "$1/tests/scripts" "$1/R/replay"
    cp tools/run-tests.sh "$1/tools/"
    stub "$1/build/unit-tests" "ok   u" "1 passed, 0 failed"
    : >"$1/tests/fuzz/fuzz_a.c"
    echo seed >"$1/tests/fuzz/corpus/fuzz_a/seed"
    stub "$1/R/replay/fuzz_a" "ok   fuzz_a: 1 inputs" "1 passed, 0 failed"
    ln -s "$CANARY" "$1/R/replay-canary"
    stub "$1/tests/scripts/good.sh" "ok   g" "1 passed, 0 failed"
    echo 'echo "sourced: not a suite"; exit 1' >"$1/tests/scripts/lib.sh"
}

# expect NAME CI RC PATTERN LAST: the runner in $TMP/t with CI=CI exits RC,
# prints PATTERN (grep -E) and ends with LAST.
expect() {
    (cd "$TMP/t" && env -u EM_SANITIZER CI="$2" REPLAY_BUILD="$TMP/t/R" FUZZ_CC="${FUZZ_CC:-clang}" \
        tools/run-tests.sh build) >"$TMP/out" 2>&1
    rc=$?
    last=$(tail -1 "$TMP/out")
    if [ "$rc" = "$3" ] && grep -Eq "$4" "$TMP/out" && [ "$last" = "$5" ]; then
        ok "$1 (CI=${2:-unset}): exit $rc, $last"
    else
        bad "$1 (CI=${2:-unset}): exit $rc, want $3 and /$4/ and '$5':"
        sed 's/^/     /' "$TMP/out" | tail -25
    fi
}

# defect NAME PATTERN PASSES COMMAND...: a fresh tree, COMMAND run in it;
# with CI=true one failure, without a WARN and no failure.
defect() {
    name=$1 pat=$2 n=$3; shift 3
    rm -rf "$TMP/t"
    tree "$TMP/t"
    (cd "$TMP/t" && "$@")
    expect "$name" true 1 "FAIL: .*$pat.*counted as 1 failure" "$n passed, 1 failed"
    expect "$name" "" 0 "WARN: .*$pat" "$n passed, 0 failed"
}

rm -rf "$TMP/t"
tree "$TMP/t"
expect "clean tree" true 0 "== good" "10 passed, 0 failed"
expect "clean tree" "" 0 "== good" "10 passed, 0 failed"
defect "unit tests not built" "build/unit-tests not built" 9 rm build/unit-tests
defect "replay binary missing" "replay/fuzz_a not built" 9 rm R/replay/fuzz_a
defect "corpus dir missing" "no corpus: tests/fuzz/corpus/fuzz_a" 9 rm -r tests/fuzz/corpus/fuzz_a
defect "corpus without target" "corpus/fuzz_gone has no target" 10 mkdir tests/fuzz/corpus/fuzz_gone
defect "script not executable" "noexec.sh is not executable" 10 \
    sh -c 'echo "echo \"1 passed, 0 failed\"" >tests/scripts/noexec.sh'
defect "suite with no checks" "suite none ran no checks" 10 \
    sh -c 'printf "#!/bin/sh\necho \"0 passed, 0 failed\"\n" >tests/scripts/none.sh; chmod +x tests/scripts/none.sh'
# the real fuzz.sh without its compiler: 0 checks without CI (so the runner
# warns), one failure with CI=true
rm -rf "$TMP/t"
tree "$TMP/t"
cp tests/scripts/fuzz.sh "$TMP/t/tests/scripts/"
FUZZ_CC=no-such-clang expect "fuzz suite without clang" true 1 \
    "FAIL no-such-clang not installed" "10 passed, 1 failed"
FUZZ_CC=no-such-clang expect "fuzz suite without clang" "" 0 \
    "WARN: suite fuzz ran no checks" "10 passed, 0 failed"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
