#!/bin/sh
# sim.sh - the deterministic simulation of the metadata group (ember-sim,
# tests/sim/sim_meta.c): many seeds of faults must break none of its
# checks; one seed run twice must run the same way (its trace digest); and
# the planted build without the io guard (build/plant/ember-sim-no_io_guard)
# must fail, or the checks prove nothing.
#
# SIM_SEEDS (default 2000; 100 under ASan, 20 under TSan, which has nothing
# to find in this one thread) seeds of 300 steps, and a tenth as many of
# 1000 steps.  `make chaos` runs it with SIM_SEEDS=20000.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SEEDS=${SIM_SEEDS:-2000}
if [ -z "${SIM_SEEDS:-}" ]; then
    case ${EM_SANITIZER:-} in
    asan) SEEDS=100 ;;
    tsan) SEEDS=20 ;;
    esac
fi
LONG=$((SEEDS / 10))
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

run() {                             # run WHAT ARGS...: one ember-sim run
    what=$1; shift
    out=$("$BUILD/ember-sim" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
        ok "$what: $(echo "$out" | tail -1)"
    else
        bad "$what (exit $rc):"
        echo "$out" | grep -E '^FAIL|^sim:' | head -5 | sed 's/^/     /'
    fi
}
run "$SEEDS seeds of 300 steps" --seeds "0:$SEEDS" --steps 300
run "$LONG seeds of 1000 steps" --seeds "100000:$((100000 + LONG))" --steps 1000

# The same seed twice: the same trace.
a=$("$BUILD/ember-sim" --seed 4242 --steps 500 -v 2>&1 | grep '^seed 4242:')
b=$("$BUILD/ember-sim" --seed 4242 --steps 500 -v 2>&1 | grep '^seed 4242:')
if [ -n "$a" ] && [ "$a" = "$b" ]; then
    ok "a seed replays exactly ($(echo "$a" | sed 's/.*trace /trace /'))"
else
    bad "seed 4242 ran two ways: '$a' / '$b'"
fi

# The planted bug: without the guard, libraft 0.15's faults must show.
plant=$BUILD/plant/ember-sim-no_io_guard
if [ -x "$plant" ]; then
    out=$("$plant" --seeds 0:40 --steps 1000 2>&1)
    if echo "$out" | grep -q '^FAIL seed'; then
        ok "the planted no_io_guard build is caught: $(echo "$out" | tail -1); first: $(echo "$out" | grep -m1 '^FAIL seed' | cut -c6-120)"
    else
        bad "the planted no_io_guard build passed: the checks catch nothing"
    fi
else
    bad "$plant is not built"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
