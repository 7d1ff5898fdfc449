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

PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();})')
LOG=$(mktemp)
"$EMBERD" --host 127.0.0.1 --port "$PORT" --http false >"$LOG" 2>&1 &
PID=$!

# wait until it accepts connections (10 s)
ready=0
for i in $(seq 1 200); do
    if node -e 'const c=require("net").connect(+process.argv[1],"127.0.0.1",()=>{c.end();process.exit(0)});c.on("error",()=>process.exit(1))' "$PORT" 2>/dev/null; then
        ready=1; break
    fi
    kill -0 $PID 2>/dev/null || break
    sleep 0.05
done
if [ $ready -ne 1 ]; then
    echo "emberd did not start on port $PORT:"
    cat "$LOG"
    kill $PID 2>/dev/null
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

# clean shutdown: SIGTERM, exit status 0 within 10 s
kill -TERM $PID
rc=
for i in $(seq 1 100); do
    if ! kill -0 $PID 2>/dev/null; then break; fi
    sleep 0.1
done
if kill -0 $PID 2>/dev/null; then
    kill -KILL $PID
    wait $PID 2>/dev/null
    echo "FAIL emberd shutdown: still running 10 s after SIGTERM"
    failed=$((failed + 1))
else
    wait $PID
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "ok   emberd shutdown on SIGTERM (exit 0)"
        passed=$((passed + 1))
    else
        echo "FAIL emberd shutdown: exit status $rc"
        failed=$((failed + 1))
        tail -20 "$LOG"
    fi
fi
rm -f "$LOG" "$OUT"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
