#!/bin/sh
# sim.sh - the deterministic simulations: the metadata group (ember-sim,
# tests/sim/sim_meta.c) and partition ownership - the exchange's decisions
# and rebalancing's promotions (ember-sim-own, tests/sim/sim_own.c).  For
# each: many seeds of faults must break none of its checks; one seed run
# twice must run the same way (its trace digest); and its planted build
# (build/plant/ember-sim-no_io_guard, build/plant/ember-sim-own-no_switch)
# must fail, or the checks prove nothing.
#
# SIM_SEEDS (default 2000; 100 under ASan; the runner leaves it out under
# TSan, which has nothing to find in this one thread) seeds of 300 steps,
# and a tenth as many of 1000 steps.  `make chaos` runs it with SIM_SEEDS=20000.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
SEEDS=${SIM_SEEDS:-2000}
if [ -z "${SIM_SEEDS:-}" ]; then
    case ${EM_SANITIZER:-} in
    asan) SEEDS=100 ;;
    tsan) SEEDS=20 ;;
    esac
fi
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

SIM=ember-sim
run() {                             # run WHAT ARGS...: one $SIM run
    what=$1; shift
    out=$("$BUILD/$SIM" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
        ok "$what: $(echo "$out" | tail -1)"
    else
        bad "$what (exit $rc):"
        echo "$out" | grep -E '^FAIL|^sim:' | head -5 | sed 's/^/     /'
    fi
}
# suite SIM SEEDS PLANT PLANT_SEEDS: one simulation's runs.
suite() {
    SIM=$1 n=$2 plant=$BUILD/plant/$3 pseeds=$4
    run "$SIM: $n seeds of 300 steps" --seeds "0:$n" --steps 300
    run "$SIM: $((n / 10)) seeds of 1000 steps" --seeds "100000:$((100000 + n / 10))" --steps 1000

    # The same seed twice: the same trace.
    a=$("$BUILD/$SIM" --seed 4242 --steps 500 -v 2>&1 | grep '^seed 4242:')
    b=$("$BUILD/$SIM" --seed 4242 --steps 500 -v 2>&1 | grep '^seed 4242:')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        ok "$SIM: a seed replays exactly ($(echo "$a" | sed 's/.*trace /trace /'))"
    else
        bad "$SIM: seed 4242 ran two ways: '$a' / '$b'"
    fi

    # The planted bug must show.
    if [ -x "$plant" ]; then
        out=$("$plant" --seeds "0:$pseeds" --steps 1000 2>&1)
        if echo "$out" | grep -q '^FAIL seed'; then
            ok "the planted $3 is caught: $(echo "$out" | tail -1); first: $(echo "$out" | grep -m1 '^FAIL seed' | cut -c6-120)"
        else
            bad "the planted $3 passed: the checks catch nothing"
        fi
    else
        bad "$plant is not built"
    fi
}
# Without the guard, libraft 0.15's faults must show.
suite ember-sim "$SEEDS" ember-sim-no_io_guard 40
# Without the version bump on a new primary, a deposed primary's writes in
# flight reach the new one unfenced: an acknowledged write goes missing.
suite ember-sim-own "$SEEDS" ember-sim-own-no_switch 400
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
