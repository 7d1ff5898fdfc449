#!/bin/sh
# bench-net.sh - the N1 network grid (../shared/BENCHMARKS.md §N1): starts
# emberd, redis-server (no persistence) and memcached (binary protocol, one
# worker thread) one at a time on free loopback ports, drives each with the
# same client (`ember-bench load`), stops each by PID, then writes the table
# into README.md between <!-- bench-net:begin --> and <!-- bench-net:end -->,
# the raw rows into docs/bench-net.csv and a chart into docs/bench-net.svg.
#
# Environment: BUILD (build), BENCH_SECONDS (4) and BENCH_WARMUP (1) per cell,
# BENCH_THREADS (1 client thread), BENCH_SERVERS ("emberd redis memcached"),
# BENCH_NO_README=1 for a trial run that leaves README.md and docs/ alone
# (csv and svg go to $BUILD/bench-net/), EMBERD_ARGS extra emberd flags.
#
# The table names the commit emberd was built from.  With changes in the
# tree (tracked or untracked; this script's own outputs aside) it says
# "<commit>-dirty" and the run is a trial run (README.md and docs/ are left
# alone) unless BENCH_ALLOW_DIRTY=1, so no published table claims a commit
# anyone can check out when it was measured on something else.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SECS=${BENCH_SECONDS:-4}
WARM=${BENCH_WARMUP:-1}
THREADS=${BENCH_THREADS:-1}
SERVERS=${BENCH_SERVERS:-emberd redis memcached}
BENCH=$BUILD/ember-bench
OUT=$BUILD/bench-net
DOCS=docs
[ "${BENCH_NO_README:-0}" = 1 ] && DOCS=$OUT
mkdir -p "$OUT" "$DOCS"

# The source, read before the build: the build uses what is in the tree now.
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if [ "$REV" != '?' ] && [ -n "$(git status --porcelain -- . ':!README.md' \
        ':!docs/bench-net.csv' ':!docs/bench-net.svg' 2>/dev/null)" ]; then
    REV=$REV-dirty
    if [ "${BENCH_ALLOW_DIRTY:-0}" != 1 ] && [ "${BENCH_NO_README:-0}" != 1 ]; then
        echo "bench-net: the working tree has changes (git status): measuring $REV as a" >&2
        echo "bench-net: trial run; README.md and docs/ stay as they are (commit first, or" >&2
        echo "bench-net: BENCH_ALLOW_DIRTY=1 to publish a table that says $REV)" >&2
        BENCH_NO_README=1
        DOCS=$OUT
    fi
fi
echo "bench-net: source $REV"

TARGETS=$BENCH
case " $SERVERS " in *" emberd "*) TARGETS="$TARGETS $BUILD/emberd" ;; esac
# shellcheck disable=SC2086
make --no-print-directory -j2 BUILD="$BUILD" $TARGETS >/dev/null || exit 1

SPID=
cleanup() {
    if [ -n "$SPID" ]; then
        kill "$SPID" 2>/dev/null
        wait "$SPID" 2>/dev/null
        SPID=
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# free_port, wait_port
. tests/scripts/lib.sh

start_server() {
    case $1 in
    emberd)
        PORT=$(free_port 10900); PROTO=ignite
        # shellcheck disable=SC2086
        "$BUILD/emberd" --port "$PORT" --http false ${EMBERD_ARGS:-} >"$OUT/emberd.log" 2>&1 &
        SPID=$! ;;
    redis)
        PORT=$(free_port 6400); PROTO=resp
        redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize no >"$OUT/redis.log" 2>&1 &
        SPID=$! ;;
    memcached)
        PORT=$(free_port 11300); PROTO=memcache
        USERFLAG=; [ "$(id -u)" = 0 ] && USERFLAG="-u root"
        # -m 2048: the 1 KiB cells hold 100 000 values; the default 64 MB would evict.
        # shellcheck disable=SC2086
        memcached $USERFLAG -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 2048 >"$OUT/memcached.log" 2>&1 &
        SPID=$! ;;
    esac
    wait_port "$SPID" "$PORT"
}

version_of() {
    case $1 in
    emberd) echo "emberd ($REV)" ;;
    redis) redis-server --version | sed 's/ sha=.*//' ;;
    memcached) memcached -V ;;
    esac
}

CSV=$OUT/results.csv
HDR=
: >"$CSV"
T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for srv in $SERVERS; do
    if ! start_server "$srv"; then
        echo "bench-net: $srv did not start (log: $OUT/$srv.log)" >&2
        cleanup
        continue
    fi
    echo "== $srv (pid $SPID, port $PORT)"
    for vs in 64 1024; do
        for pl in 1 16; do
            for mix in 90 50; do
                "$BENCH" load --proto "$PROTO" --port "$PORT" --connections 50 \
                    --threads "$THREADS" --pipeline "$pl" --value-size "$vs" --keys 100000 \
                    --mix "$mix" --duration "$SECS" --warmup "$WARM" --pid "$SPID" \
                    --label "$srv" --csv >"$OUT/cell.csv" 2>"$OUT/cell.err"
                rc=$?
                if [ $rc -le 1 ] && [ "$(wc -l <"$OUT/cell.csv")" -eq 2 ]; then
                    [ -z "$HDR" ] && HDR=$(head -1 "$OUT/cell.csv")
                    tail -1 "$OUT/cell.csv" >>"$CSV"
                    tail -1 "$OUT/cell.csv" | awk -F, '{printf "   %5s B P%-2s %s/%s  %9.0f ops/s  p99 %8.1f us  cpu %6.3f us/op  errors %s\n", $6, $5, $8, 100-$8, $11, $18, $22, $16}'
                else
                    echo "   $vs B P$pl mix $mix: FAILED (exit $rc): $(cat "$OUT/cell.err")"
                    echo "$srv,$PROTO,50,$THREADS,$pl,$vs,100000,$mix,0,0,?,0,0,0,0,failed,?,?,?,?,?,?,?,?" >>"$CSV"
                fi
                [ -s "$OUT/cell.err" ] && sed 's/^/      /' "$OUT/cell.err"
            done
        done
    done
    cleanup
done
T1=$(date +%s)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
[ -n "$HDR" ] || { echo "bench-net: no cell ran" >&2; exit 1; }
{ echo "$HDR"; cat "$CSV"; } >"$DOCS/bench-net.csv"

# ---- markdown table, one row per cell and server ----
BLOCK=$OUT/block.md
CPU=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
{
    echo "N1 grid, measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) vCPU ($CPU), loopback,"
    echo "by \`make bench-net\` (tools/bench-net.sh, $((T1 - T0)) s). Each cell:"
    echo "\`ember-bench load --proto ignite|resp|memcache --connections 50 --threads $THREADS --pipeline P"
    echo "--value-size V --keys 100000 --mix GET% --duration $SECS --warmup $WARM --pid SERVER\`"
    echo "after a prefill of all 100 000 keys; every response is verified. Servers, one at a time:"
    for srv in $SERVERS; do echo "$(version_of "$srv")" | sed 's/^/- /'; done
    echo "(redis: \`--save '' --appendonly no\`; memcached: \`-t 1 -m 2048\`, binary protocol; emberd: Ignite"
    echo "thin protocol 1.2.0, string keys, byte[] values). **Server CPU µs/op** = the server's"
    echo "utime+stime over the measured interval / ops: the client shares the 2 cores, so this is the"
    echo "fair figure (../shared/reference/performance.md §3.4). Latency percentiles in µs."
    echo "Load average (1/5/15 min) before the grid: $LOAD0, after: $LOAD1 (anything above ~2 means"
    echo "other work shared the 2 vCPUs and the absolute figures are lower than on an idle box)."
    echo
    echo "| cell (value, pipeline, GET/PUT) | server | ops/s | p50 | p99 | p999 | server CPU µs/op | errors |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    awk -F, '{ order = ($1 == "emberd") ? 0 : ($1 == "redis") ? 1 : 2
               printf "%06d %03d %03d %d\t| %s B, P%s, %s/%s | %s | %s | %s | %s | %s | %s | %s |\n",
                   $6, $5, 100 - $8, order, $6, $5, $8, 100 - $8, $1, $11, $17, $18, $19,
                   ($22 == "?" || $22 + 0 < 0 ? "?" : $22), $16 }' "$CSV" | sort | cut -f2-
    echo
    echo "![N1: server CPU per op and p99 per cell](docs/bench-net.svg)"
    echo
    echo "Profiles and analysis of a grid run (by hand, not regenerated): docs/bench-net-notes.md."
} >"$BLOCK"

# ---- chart: server CPU µs/op and p99 per cell, clustered by server ----
pivot() {   # pivot COLUMN -> "cell" emberd redis memcached
    awk -F, -v col="$1" '
        { cell = sprintf("%s B P%s %s/%s", ($6 == 1024 ? "1K" : $6), $5, $8, 100 - $8)
          if (!(cell in seen)) { seen[cell] = 1; cells[++n] = cell }
          v = $col; if (v == "?" || v + 0 < 0) v = "?"; val[cell, $1] = v }
        END { for (i = 1; i <= n; i++) {
                c = cells[i]; printf "\"%s\"", c
                split("emberd redis memcached", s, " ")
                for (j = 1; j <= 3; j++) printf " %s", ((c, s[j]) in val ? val[c, s[j]] : "?")
                printf "\n" } }' "$2"
}
awk -F, '{ printf "%06d %03d %03d\t%s\n", $6, $5, 100 - $8, $0 }' "$CSV" | sort | cut -f2- >"$OUT/sorted.csv"
pivot 22 "$OUT/sorted.csv" >"$OUT/cpu.dat"
pivot 18 "$OUT/sorted.csv" >"$OUT/p99.dat"
if command -v gnuplot >/dev/null; then
    gnuplot <<EOF || echo "bench-net: gnuplot failed" >&2
set terminal svg size 1000,760 dynamic font "sans,11" background "white"
set output '$DOCS/bench-net.svg'
set datafile missing '?'
set multiplot layout 2,1 title "N1: emberd vs redis vs memcached, 50 connections, 100 000 keys (ember-bench load)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set logscale y
set key top right
set ylabel 'server CPU µs per op (lower is better)'
plot '$OUT/cpu.dat' using 2:xtic(1) title 'emberd' lc rgb '#d95f02', '' using 3 title 'redis' lc rgb '#1b9e77', '' using 4 title 'memcached' lc rgb '#7570b3'
set ylabel 'p99 latency µs (lower is better)'
plot '$OUT/p99.dat' using 2:xtic(1) title 'emberd' lc rgb '#d95f02', '' using 3 title 'redis' lc rgb '#1b9e77', '' using 4 title 'memcached' lc rgb '#7570b3'
unset multiplot
EOF
fi

cat "$BLOCK"

# ---- README: replace the block between the markers (re-read right now) ----
[ "${BENCH_NO_README:-0}" = 1 ] && exit 0
if ! grep -q '<!-- bench-net:begin -->' README.md; then
    if grep -q '^## Benchmarks' README.md; then
        awk '{ print } /^## Benchmarks/ && !done { print ""; print "<!-- bench-net:begin -->";
               print "<!-- bench-net:end -->"; done = 1 }' README.md >"$OUT/readme.tmp"
    else
        { cat README.md; printf '\n## Benchmarks\n\n<!-- bench-net:begin -->\n<!-- bench-net:end -->\n'; } >"$OUT/readme.tmp"
    fi
    cat "$OUT/readme.tmp" >README.md
fi
awk -v block="$BLOCK" '
    /<!-- bench-net:begin -->/ { print; while ((getline l < block) > 0) print l; skip = 1; next }
    /<!-- bench-net:end -->/ { skip = 0 }
    !skip { print }' README.md >"$OUT/readme.tmp" && cat "$OUT/readme.tmp" >README.md
echo "bench-net: README.md, $DOCS/bench-net.csv, $DOCS/bench-net.svg updated"
