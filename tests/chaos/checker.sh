#!/bin/sh
# checker.sh - the history checker judged on histories made by hand
# (histories/*.good must pass, *.bad must be caught), so a checker that
# accepts everything fails here.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
PASS=0; FAIL=0
for f in tests/chaos/histories/*; do
    name=$(basename "$f")
    "$BUILD/ember-chaos" judge --history "$f" --keys 2 >/dev/null 2>&1
    rc=$?
    case $name in
        *.good) [ $rc -eq 0 ] && ok "judge accepts $name" || bad "judge rejected $name (rc $rc)" ;;
        *.bad)  [ $rc -eq 1 ] && ok "judge catches $name" || bad "judge missed $name (rc $rc)" ;;
    esac
done
finish
