#!/bin/sh
# soak.sh - the soak suite (reliability.md §6 L1/L2 in small): starts emberd on
# a free loopback port and runs ember-soak against it: SOAK_CONNS concurrent
# connections (default 1000) doing put/get/remove/getAll/putAll/scan for
# SOAK_SECONDS (default 35 in make test, keeping CI under 30 minutes; the
# local run is SOAK_SECONDS=600), every answer
# checked, the server's RSS and fd count sampled and required flat after the
# warm-up.  Then SIGTERM: emberd must exit cleanly with no sanitizer report.
# Under `make asan`/`make tsan` the default run is shorter and smaller.
# Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
case "$EM_SANITIZER" in
    tsan|asan) DEF_SECONDS=15; DEF_CONNS=200 ;;
    *)         DEF_SECONDS=35; DEF_CONNS=1000 ;;
esac
SECONDS_=${SOAK_SECONDS:-$DEF_SECONDS}
CONNS=${SOAK_CONNS:-$DEF_CONNS}
THINK=${SOAK_THINK_MS:-50}
# RSS means nothing under a sanitizer's allocator; the live heap still does.
RSSOPT=
[ -n "$EM_SANITIZER" ] && RSSOPT="--rss-check 0"
. tests/scripts/lib.sh
suite_init
need_built emberd ember-soak

# Both ends need a descriptor per connection.
ulimit -n $((CONNS + 1024)) 2>/dev/null || ulimit -n 4096 2>/dev/null || true
start_emberd --debug-ops --log-level warn
echo "emberd pid $PID on port $PORT; $CONNS connections for $SECONDS_ s"

"$BUILD/ember-soak" --port "$PORT" --pid "$PID" --conns "$CONNS" --seconds "$SECONDS_" \
    --think-ms "$THINK" --seed "${SOAK_SEED:-$$}" $RSSOPT >"$TMP/soak.out" 2>"$TMP/soak.err"
rc=$?
add_driver_result "$TMP/soak.out" "$TMP/soak.err" 30 ember-soak $rc

stop_emberd_checked "during the soak"
finish
