#!/bin/sh
# run.sh [filter] - start emberd on a free loopback port, run the Node.js
# client tests (apache-ignite-client@1.0.0) against it, stop it with SIGTERM
# and check it exits 0.  Last line: "N passed, N failed".
# EMBER_BUILD names the build directory holding emberd (default build).
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
BUILD=${EMBER_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
EMBERD=$BUILD/emberd

if [ ! -x "$EMBERD" ]; then
    echo "no emberd at $EMBERD"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -d node_modules/apache-ignite-client ]; then
    npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1
fi
if [ ! -d node_modules/apache-ignite-client ]; then
    echo "apache-ignite-client not installed (run tools/deps.sh)"
    echo "0 passed, 1 failed"
    exit 1
fi

# emberd_spawn: port 0, a fresh log, the port read from the socket that very
# process listens on; waits (long) for that or for its death.  Picking a port
# here and handing it over would race other test runs on the machine.
. "$ROOT/tests/scripts/lib.sh"
if ! emberd_spawn; then
    echo "emberd did not start:"
    cat "$LOG"
    [ -n "$PID" ] && kill "$PID" 2>/dev/null
    rm -f "$LOG"
    echo "0 passed, 1 failed"
    exit 1
fi

OUT=$(mktemp)
# Time values are written relative to local midnight (reference §5.4 quirk 4)
TZ=UTC EMBER_PORT=$PORT node main.js "$@" >"$OUT" 2>&1
NODE_RC=$?
grep -v -E '^[0-9]+ passed, [0-9]+ failed' "$OUT"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT" | tail -1)
[ -n "$line" ] || line="0 passed, 1 failed"
passed=$(echo "$line" | cut -d' ' -f1)
failed=$(echo "$line" | cut -d' ' -f3)
[ $NODE_RC -ne 0 ] && [ "$failed" -eq 0 ] && failed=1

# clean shutdown: SIGTERM, exit status 0 (emberd_stop waits long, then SIGKILL)
emberd_stop
rc=$?
if [ "$rc" -eq 0 ]; then
    echo "ok   emberd shutdown on SIGTERM (exit 0)"
    passed=$((passed + 1))
else
    echo "FAIL emberd shutdown: exit status $rc"
    failed=$((failed + 1))
    tail -20 "$LOG"
fi
rm -f "$LOG" "$OUT"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
