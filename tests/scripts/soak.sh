#!/bin/sh
# soak.sh - the soak suite (reliability.md §6 L1/L2 in small): starts emberd on
# a free loopback port and runs ember-soak against it: SOAK_CONNS concurrent
# connections (default 1000) doing put/get/remove/getAll/putAll/scan for
# SOAK_SECONDS (default 60; the local run is SOAK_SECONDS=600), every answer
# checked, the server's RSS and fd count sampled and required flat after the
# warm-up.  Then SIGTERM: emberd must exit cleanly with no sanitizer report.
# Under `make asan`/`make tsan` the default run is shorter and smaller.
# Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
case "$EM_SANITIZER" in
    tsan|asan) DEF_SECONDS=20; DEF_CONNS=200 ;;
    *)         DEF_SECONDS=60; DEF_CONNS=1000 ;;
esac
SECONDS_=${SOAK_SECONDS:-$DEF_SECONDS}
CONNS=${SOAK_CONNS:-$DEF_CONNS}
THINK=${SOAK_THINK_MS:-50}
# RSS means nothing under a sanitizer's allocator; the live heap still does.
RSSOPT=
[ -n "$EM_SANITIZER" ] && RSSOPT="--rss-check 0"
TMP=$(mktemp -d)
PID=
PASS=0
FAIL=0

cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    PID=
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM

ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; }
finish() { echo "$PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; exit $?; }

for b in emberd ember-soak; do
    if [ ! -x "$BUILD/$b" ]; then
        bad "$BUILD/$b not built"
        finish
    fi
done

# Both ends need a descriptor per connection.
ulimit -n $((CONNS + 1024)) 2>/dev/null || ulimit -n 4096 2>/dev/null || true
# --http false: no HTTP listener, so the port found below is the thin-client one.
"$BUILD/emberd" --host 127.0.0.1 --port 0 --http false --debug-ops --log-level warn >"$TMP/emberd.log" 2>&1 &
PID=$!
PORT=
i=0
while [ $i -lt 100 ] && [ -z "$PORT" ]; do
    kill -0 "$PID" 2>/dev/null || break
    PORT=$(ss -Hltnp 2>/dev/null | grep "pid=$PID," | sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' | head -1)
    [ -z "$PORT" ] && sleep 0.1
    i=$((i + 1))
done
if [ -z "$PORT" ]; then
    bad "emberd did not start"
    cat "$TMP/emberd.log"
    finish
fi
echo "emberd pid $PID on port $PORT; $CONNS connections for $SECONDS_ s"

"$BUILD/ember-soak" --port "$PORT" --pid "$PID" --conns "$CONNS" --seconds "$SECONDS_" \
    --think-ms "$THINK" --seed "${SOAK_SEED:-$$}" $RSSOPT >"$TMP/soak.out" 2>"$TMP/soak.err"
rc=$?
grep -v '^ok  ' "$TMP/soak.out" | grep -Ev '^[0-9]+ passed, [0-9]+ failed'
head -30 "$TMP/soak.err"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$TMP/soak.out" | tail -1)
if [ -n "$line" ]; then
    PASS=$((PASS + $(echo "$line" | cut -d' ' -f1)))
    FAIL=$((FAIL + $(echo "$line" | cut -d' ' -f3)))
else
    bad "ember-soak printed no summary (exit $rc)"
fi

if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    wait "$PID"
    st=$?
    PID=
    [ $st -eq 0 ] && ok "emberd exits cleanly on SIGTERM" || bad "emberd exit status $st on SIGTERM"
else
    wait "$PID"
    bad "emberd died during the soak (status $?)"
    PID=
fi
if grep -Eq 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$TMP/emberd.log"; then
    bad "sanitizer report in emberd's output:"
    grep -E -A30 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$TMP/emberd.log" | head -80
else
    ok "no sanitizer report in emberd's output"
fi
finish
