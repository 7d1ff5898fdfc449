#!/bin/sh
# adversary.sh - the live adversarial suite (reliability.md §5.3, goal B2 in
# small): starts emberd on a free loopback port, runs ember-adversary against
# it (ADV_FRAMES malformed frames, default 100 000, over many connections,
# while a correct client checks its answers), then stops emberd with SIGTERM.
# Checks: the driver's own checks, a clean exit of emberd, and no sanitizer
# report in emberd's output.  Under `make asan`/`make tsan` (EM_SANITIZER set)
# the frame count is smaller by default.  Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
case "$EM_SANITIZER" in
    tsan) DEF_FRAMES=20000 ;;
    asan) DEF_FRAMES=50000 ;;
    *)    DEF_FRAMES=100000 ;;
esac
FRAMES=${ADV_FRAMES:-$DEF_FRAMES}
# A sanitizer's allocator keeps freed memory (ASan's quarantine), so RSS says
# nothing there; the live-heap check (op 32000) still applies.
RSSOPT=
[ -n "$EM_SANITIZER" ] && RSSOPT=--no-rss
MAXSEC=${ADV_SECONDS:-150}
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

for b in emberd ember-adversary; do
    if [ ! -x "$BUILD/$b" ]; then
        bad "$BUILD/$b not built"
        finish
    fi
done

ulimit -n 8192 2>/dev/null || true
# A short handshake timeout so the never-handshaking sockets can be checked
# within the run.
# --http false: no HTTP listener, so the port found below is the thin-client one.
"$BUILD/emberd" --host 127.0.0.1 --port 0 --http false --handshake-timeout 3000 --debug-ops --log-level warn \
    >"$TMP/emberd.log" 2>&1 &
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
echo "emberd pid $PID on port $PORT; $FRAMES malformed frames"

"$BUILD/ember-adversary" --port "$PORT" --pid "$PID" --frames "$FRAMES" \
    --max-seconds "$MAXSEC" --hs-timeout 3 --seed "${ADV_SEED:-$$}" $RSSOPT >"$TMP/adv.out" 2>"$TMP/adv.err"
rc=$?
grep -v '^ok  ' "$TMP/adv.out" | grep -Ev '^[0-9]+ passed, [0-9]+ failed'
head -40 "$TMP/adv.err"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$TMP/adv.out" | tail -1)
if [ -n "$line" ]; then
    PASS=$((PASS + $(echo "$line" | cut -d' ' -f1)))
    FAIL=$((FAIL + $(echo "$line" | cut -d' ' -f3)))
else
    bad "ember-adversary printed no summary (exit $rc)"
fi

if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    wait "$PID"
    st=$?
    PID=
    [ $st -eq 0 ] && ok "emberd exits cleanly on SIGTERM" || bad "emberd exit status $st on SIGTERM"
else
    wait "$PID"
    bad "emberd died during the run (status $?)"
    PID=
fi
if grep -Eq 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$TMP/emberd.log"; then
    bad "sanitizer report in emberd's output:"
    grep -E -A30 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$TMP/emberd.log" | head -80
else
    ok "no sanitizer report in emberd's output"
fi
finish
