#!/bin/sh
# adversary.sh - the live adversarial suite (reliability.md §5.3, goal B2 in
# small): starts emberd on a free loopback port, runs ember-adversary against
# it (ADV_FRAMES malformed frames, default 100 000, over many connections,
# while a correct client checks its answers), then stops emberd with SIGTERM.
# Checks: the driver's own checks, a clean exit of emberd, and no sanitizer
# report in emberd's output.  Under `make asan`/`make tsan` (EM_SANITIZER set)
# the frame count is smaller by default.  First, one request per op as large
# as max_message_size (ADV_BIG_BYTES, default 16 MiB; 0 skips them) must be
# answered, with other connections still served, within a bound proportional
# to its size (times ADV_BIG_SLACK, 4 under a sanitizer).
# Last line: "N passed, N failed".
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
case "$EM_SANITIZER" in
    tsan) DEF_FRAMES=20000; DEF_SLACK=6 ;;
    asan) DEF_FRAMES=50000; DEF_SLACK=4 ;;
    *)    DEF_FRAMES=100000; DEF_SLACK=1 ;;
esac
BIG=${ADV_BIG_BYTES:-16777216}
BIGOPT=
if [ "$BIG" -gt 0 ]; then
    BIGOPT="--big-bytes $BIG --big-slack ${ADV_BIG_SLACK:-$DEF_SLACK}"
    MAXMSG="--max-message-size $BIG"
fi
FRAMES=${ADV_FRAMES:-$DEF_FRAMES}
# A sanitizer's allocator keeps freed memory (ASan's quarantine), so RSS says
# nothing there; the live-heap check (op 32000) still applies.
RSSOPT=
[ -n "$EM_SANITIZER" ] && RSSOPT=--no-rss
MAXSEC=${ADV_SECONDS:-150}
. tests/scripts/lib.sh
suite_init
need_built emberd ember-adversary

ulimit -n 8192 2>/dev/null || true
# A short handshake timeout so the never-handshaking sockets can be checked
# within the run.
start_emberd --handshake-timeout 3000 --debug-ops --log-level warn $MAXMSG
echo "emberd pid $PID on port $PORT; $FRAMES malformed frames"

"$BUILD/ember-adversary" --port "$PORT" --pid "$PID" --frames "$FRAMES" \
    --max-seconds "$MAXSEC" --hs-timeout 3 --seed "${ADV_SEED:-$$}" $RSSOPT $BIGOPT >"$TMP/adv.out" 2>"$TMP/adv.err"
rc=$?
add_driver_result "$TMP/adv.out" "$TMP/adv.err" 40 ember-adversary $rc

stop_emberd_checked "during the run"
finish
