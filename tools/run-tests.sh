#!/bin/sh
# run-tests.sh BUILD [--no-node] - run every suite, then sum their
# "N passed, N failed" lines into one final line of the same shape.
#
# Suites, found from the sources so that new ones join by themselves:
#   unit           BUILD/unit-tests
#   fuzz-corpus T  for each tests/fuzz/fuzz_T.c: REPLAY_BUILD/replay/fuzz_T
#                  (ASan + UBSan; `make replay`, REPLAY_BUILD default
#                  build/asan) over tests/fuzz/corpus/fuzz_T/, ONE test each
#   replay-canary  the replay fails, naming the file, on planted bugs
#   integration    BUILD/integration-tests, if tests/integration/*.c exist
#   node           tests/node/run.sh (not with --no-node)
#   every tests/scripts/*.sh but lib.sh (sourced by the others, not a suite);
#                  fuzz.sh only without EM_SANITIZER: its libFuzzer targets
#                  carry their own ASan + UBSan, and `make test` runs them;
#                  harness.sh (tests of the shell helpers) only without it;
#                  sim.sh (one thread) not under TSan
#   runner         tools/run-tests-check.sh: this script's own rules
#
# Nothing passes by being skipped.  A suite that cannot run (binary not
# built, fuzz target without a replay binary or a corpus, script not
# executable) or that ran no checks ("0 passed, 0 failed") is one failure
# with CI=true; otherwise a WARN line, counted neither way, and the final
# line says how many.  A suite without a summary line, or one that exits
# non-zero with 0 failed, is one failure either way.
BUILD=${1:-build}
NONODE=$2
cd "$(dirname "$0")/.." || exit 1
REPLAY=${REPLAY_BUILD:-build/asan}
LOG=$(mktemp)
WARNS=0

# not_run WHY: a suite that should have run did not.
not_run() {
    if [ "$CI" = true ]; then
        echo "   FAIL: $1 (CI=true) -> counted as 1 failure"
        echo "0 passed, 1 failed" >>"$LOG"
    else
        echo "   WARN: $1 -> not counted (a failure with CI=true)"
        WARNS=$((WARNS + 1))
    fi
}

suite() {
    name=$1; shift
    echo "== $name"
    out=$(mktemp)
    t0=$(date +%s)
    "$@" >"$out" 2>&1
    rc=$?
    grep -v '^ok  ' "$out"
    echo "   ($name: $(( $(date +%s) - t0 )) s)"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    rm -f "$out"
    if [ -z "$line" ]; then
        echo "   (suite $name printed no summary; exit $rc) -> counted as 1 failure"
        line="0 passed, 1 failed"
    elif [ $rc -ne 0 ] && echo "$line" | grep -q ' 0 failed'; then
        echo "   (suite $name exited $rc) -> counted as 1 failure"
        line="0 passed, 1 failed"
    elif [ "$line" = "0 passed, 0 failed" ]; then
        not_run "suite $name ran no checks"
        return
    fi
    echo "$line" >>"$LOG"
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

if [ -x "$BUILD/unit-tests" ]; then
    suite unit "$BUILD/unit-tests"
else
    echo "== unit"
    not_run "$BUILD/unit-tests not built"
fi

# replays: each fuzz target over its corpus, then the replay's own canary.
replays() {
    for src in tests/fuzz/fuzz_*.c; do
        [ -e "$src" ] || continue
        t=$(basename "$src" .c)
        c=tests/fuzz/corpus/$t
        if [ ! -x "$REPLAY/replay/$t" ]; then
            echo "== fuzz-corpus $t"
            not_run "$REPLAY/replay/$t not built (make replay)"
        elif [ ! -d "$c" ] || [ -z "$(ls -A "$c")" ]; then
            echo "== fuzz-corpus $t"
            not_run "no corpus: $c is missing or empty"
        else
            suite "fuzz-corpus $t" "$REPLAY/replay/$t" "$c"
        fi
    done
    for c in tests/fuzz/corpus/*; do
        [ -d "$c" ] && [ ! -e "tests/fuzz/$(basename "$c").c" ] &&
            { echo "== fuzz-corpus $(basename "$c")"; not_run "$c has no target tests/fuzz/$(basename "$c").c"; }
    done
    if ls tests/fuzz/fuzz_*.c >/dev/null 2>&1; then
        if [ -x "$REPLAY/replay-canary" ]; then
            suite replay-canary replay_canary "$REPLAY/replay-canary"
        else
            echo "== replay-canary"
            not_run "$REPLAY/replay-canary not built (make replay)"
        fi
    fi
}

# The corpus replays are ASan builds (REPLAY_BUILD) in every run: under
# EM_SANITIZER they would replay the very same binaries a second time.
if [ -n "$EM_SANITIZER" ] && [ "$REPLAY" = build/asan ]; then
    echo "== fuzz-corpus, replay-canary: not under EM_SANITIZER=$EM_SANITIZER (the same ASan replays make test runs)"
else
    replays
fi

if ls tests/integration/*.c >/dev/null 2>&1; then
    if [ -x "$BUILD/integration-tests" ]; then
        EMBERD="$BUILD/emberd" suite integration env EMBER_BUILD="$BUILD" "$BUILD/integration-tests"
    else
        echo "== integration"
        not_run "$BUILD/integration-tests not built"
    fi
fi

if [ "$NONODE" = "--no-node" ]; then
    echo "== node: not with --no-node"
elif [ -e tests/node/run.sh ]; then
    if [ -x tests/node/run.sh ]; then
        suite node env EMBER_BUILD="$BUILD" tests/node/run.sh
    else
        echo "== node"
        not_run "tests/node/run.sh is not executable"
    fi
fi

for s in tests/scripts/*.sh; do
    [ -e "$s" ] || continue
    n=$(basename "$s" .sh)
    case $n in
    lib) continue ;;            # sourced by the suites, not one itself
    fuzz) if [ -n "$EM_SANITIZER" ]; then
              echo "== fuzz: not under EM_SANITIZER=$EM_SANITIZER (libFuzzer builds carry ASan + UBSan; make test runs them)"
              continue
          fi ;;
    sim) if [ "$EM_SANITIZER" = tsan ]; then
              # The simulations run one thread: TSan has nothing to find.
              echo "== sim: not under EM_SANITIZER=tsan (one thread; make test and make asan run it)"
              continue
          fi ;;
    load_smoke) if [ -n "$EM_SANITIZER" ]; then
              # The load generator's own end-to-end check (and redis-server's):
              # the server under load is the soak's, in every build.
              echo "== load_smoke: not under EM_SANITIZER=$EM_SANITIZER (it tests ember-bench; make test runs it)"
              continue
          fi ;;
    adversary) if [ "$EM_SANITIZER" = tsan ]; then
              # Hostile bytes, answered or refused: memory errors are what
              # they find, and make asan runs them under ASan + UBSan.
              echo "== adversary: not under EM_SANITIZER=tsan (make test and make asan run it)"
              continue
          fi ;;
    harness) if [ -n "$EM_SANITIZER" ]; then
              # 70 s of sanitized starts per run to test the test helpers,
              # which are shell: make test runs it.
              echo "== harness: not under EM_SANITIZER=$EM_SANITIZER (it tests the shell test helpers; make test runs it)"
              continue
          fi ;;
    esac
    if [ -x "$s" ]; then
        suite "$n" env EMBER_BUILD="$BUILD" "$s"
    else
        echo "== $n"
        not_run "$s is not executable (chmod +x, or rename it if it is sourced)"
    fi
done

if [ -n "$EM_SANITIZER" ]; then
    # It runs a copy of this script on stub suites: nothing of the build.
    echo "== runner: not under EM_SANITIZER=$EM_SANITIZER (it tests this script; make test runs it)"
elif [ -e tools/run-tests-check.sh ]; then
    if [ -x tools/run-tests-check.sh ]; then
        suite runner tools/run-tests-check.sh
    else
        echo "== runner"
        not_run "tools/run-tests-check.sh is not executable"
    fi
fi

[ "$WARNS" -gt 0 ] && echo "WARN: $WARNS suite(s) not run or with no checks, counted neither way (failures with CI=true)"
awk -F'[ ,]+' '{p+=$1; f+=$3} END {printf "%d passed, %d failed\n", p, f; exit (f>0)}' "$LOG"
status=$?
rm -f "$LOG"
exit $status
