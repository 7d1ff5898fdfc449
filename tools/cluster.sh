#!/bin/sh
# cluster.sh - a local ember cluster for development: N emberd nodes on
# 127.0.0.1 .. 127.0.0.N, node i serving thin clients on 127.0.0.i:P+i-1,
# its transport on :47100, its metadata group on :47500 and /metrics on
# :8080 of its own address; node 1 bootstraps, the others seed from it.
#
#   tools/cluster.sh start N [--base-port P] [--dir D] [--net A.B.C]
#                                  start, wait, print one line per node
#   tools/cluster.sh stop [--dir D]            SIGTERM each node, wait
#   tools/cluster.sh run N [...]               start, then stop on Ctrl-C /
#                                              SIGTERM (make run-cluster)
#
# P defaults to 10800, D to ./ember-cluster (logs nodeI.log, pid files
# nodeI.pid, data under nI/), the addresses' first three octets to 127.0.0
# (--net moves the nodes to A.B.C.1 .. A.B.C.N, so a test runs beside a
# cluster already on 127.0.0.x).  start waits until every node reports
# ember_cluster_members N, ember_cluster_joined 1 and ember_cluster_links
# N-1 (a member forwards keys it does not own over those links, so a
# request right after start needs them up) - CLUSTER_WAIT seconds, default
# 120 - then prints one line per node:
#   node I thin A.B.C.I:PORT cluster A.B.C.I:47100 pid PID
# emberd is $EMBERD, else $EMBER_BUILD/emberd, else build/emberd next to
# this script.
set -u

CLUSTER_PORT=47100
RAFT_PORT=47500
HTTP_PORT=8080
WAIT=${CLUSTER_WAIT:-120}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EMBERD=${EMBERD:-${EMBER_BUILD:-$ROOT/build}/emberd}

usage() {
    echo "usage: tools/cluster.sh start N [--base-port P] [--dir D] [--net 127.B.C]" >&2
    echo "       tools/cluster.sh stop [--dir D]" >&2
    echo "       tools/cluster.sh run N [--base-port P] [--dir D] [--net 127.B.C]" >&2
    exit 2
}

die() { echo "cluster.sh: $*" >&2; exit 1; }

is_uint() { case "$1" in ''|*[!0-9]*) return 1;; *) return 0;; esac; }

[ $# -ge 1 ] || usage
CMD=$1; shift
N=""
BASE=10800
DIR=./ember-cluster
NET=127.0.0
if [ "$CMD" = start ] || [ "$CMD" = run ]; then
    [ $# -ge 1 ] || usage
    N=$1; shift
    is_uint "$N" && [ "$N" -ge 1 ] && [ "$N" -le 254 ] || die "N must be 1 to 254 (got '$N')"
elif [ "$CMD" != stop ]; then
    usage
fi
while [ $# -gt 0 ]; do
    case "$1" in
        --base-port) [ $# -ge 2 ] || usage; BASE=$2; shift 2;;
        --dir) [ $# -ge 2 ] || usage; DIR=$2; shift 2;;
        --net) [ $# -ge 2 ] || usage; NET=$2; shift 2;;
        *) usage;;
    esac
done
is_uint "$BASE" && [ "$BASE" -ge 1 ] && [ "$BASE" -le $((65536 - ${N:-1})) ] ||
    die "bad --base-port '$BASE'"
case "$NET" in
    127.*.*) o2=${NET#127.}; o3=${o2#*.}; o2=${o2%%.*}
             is_uint "$o2" && is_uint "$o3" && [ "$o2" -le 255 ] && [ "$o3" -le 255 ] ||
                 die "bad --net '$NET' (127.B.C)";;
    *) die "bad --net '$NET' (a loopback prefix 127.B.C)";;
esac

# alive PID: the process exists and is an emberd (a recycled pid is not ours).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ -r "/proc/$1/cmdline" ] || return 0
    tr '\0' ' ' <"/proc/$1/cmdline" | grep -q emberd
}

# metric IP NAME: a gauge from that node's /metrics ("" if none).
metric() {
    curl -s --max-time 5 "http://$1:$HTTP_PORT/metrics" 2>/dev/null |
        awk -v m="$2" '$1 == m { print $2; exit }'
}

# stop_all: SIGTERM each recorded node, the last started first (each clean
# stop leaves the topology while the others still form a majority), and
# wait for it to exit.
stop_all() {
    found=0
    for i in $(ls "$DIR" 2>/dev/null | sed -n 's/^node\([0-9][0-9]*\)\.pid$/\1/p' | sort -n -r); do
        f=$DIR/node$i.pid
        pid=$(cat "$f" 2>/dev/null)
        if is_uint "$pid" && alive "$pid"; then
            found=1
            kill -TERM "$pid" 2>/dev/null
            t=0
            while alive "$pid" && [ $t -lt $((WAIT * 10)) ]; do
                sleep 0.1; t=$((t + 1))
            done
            if alive "$pid"; then
                echo "cluster.sh: pid $pid did not exit within ${WAIT}s; SIGKILL" >&2
                kill -KILL "$pid" 2>/dev/null
            fi
            echo "stopped $(basename "$f" .pid) (pid $pid)"
        fi
        rm -f "$f"
    done
    [ $found = 1 ] || echo "no running nodes recorded in $DIR"
}

start_all() {
    [ -x "$EMBERD" ] || die "no emberd at $EMBERD (run make, or set EMBERD)"
    command -v curl >/dev/null 2>&1 || die "curl is needed to read /metrics"
    mkdir -p "$DIR" || die "cannot create $DIR"
    for f in "$DIR"/node*.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null)
        is_uint "$pid" && alive "$pid" &&
            die "a cluster from $DIR is running (pid $pid); tools/cluster.sh stop --dir $DIR"
        rm -f "$f"
    done
    i=1
    while [ $i -le "$N" ]; do
        ip=$NET.$i
        port=$((BASE + i - 1))
        if [ $i = 1 ]; then join="--bootstrap true"; else join="--seeds $NET.1:$CLUSTER_PORT"; fi
        mkdir -p "$DIR/n$i"
        # shellcheck disable=SC2086
        "$EMBERD" --host "$ip" --port "$port" --http-host "$ip" --http-port "$HTTP_PORT" \
            --cluster-port "$CLUSTER_PORT" --raft-port "$RAFT_PORT" \
            --wal-path "$DIR/n$i/data" $join >"$DIR/node$i.log" 2>&1 &
        echo $! >"$DIR/node$i.pid"
        i=$((i + 1))
    done
    # Wait for each node's own /metrics (its log says it bound it: another
    # process on that address would answer for it otherwise), then for the
    # whole topology on every node.
    t=0
    i=1
    while [ $i -le "$N" ]; do
        pid=$(cat "$DIR/node$i.pid")
        ip=$NET.$i
        if ! alive "$pid"; then
            echo "cluster.sh: node $i exited at start; its log:" >&2
            tail -20 "$DIR/node$i.log" >&2
            stop_all >/dev/null
            exit 1
        fi
        if grep -q "HTTP endpoint off" "$DIR/node$i.log"; then
            echo "cluster.sh: node $i cannot serve /metrics on $ip:$HTTP_PORT:" >&2
            grep "HTTP endpoint off" "$DIR/node$i.log" >&2
            stop_all >/dev/null
            exit 1
        fi
        if grep -q "metrics on http://$ip:$HTTP_PORT/" "$DIR/node$i.log" &&
            [ "$(metric "$ip" ember_cluster_members)" = "$N" ] &&
            [ "$(metric "$ip" ember_cluster_joined)" = 1 ] &&
            [ "$(metric "$ip" ember_cluster_links)" = $((N - 1)) ]; then
            i=$((i + 1))
            continue
        fi
        if [ $t -ge $((WAIT * 10)) ]; then
            echo "cluster.sh: node $i did not see $N members within ${WAIT}s" \
                 "(members $(metric "$ip" ember_cluster_members)," \
                 "joined $(metric "$ip" ember_cluster_joined)," \
                 "links $(metric "$ip" ember_cluster_links)); log $DIR/node$i.log" >&2
            stop_all >/dev/null
            exit 1
        fi
        sleep 0.1
        t=$((t + 1))
    done
    i=1
    while [ $i -le "$N" ]; do
        echo "node $i thin $NET.$i:$((BASE + i - 1)) cluster $NET.$i:$CLUSTER_PORT" \
             "pid $(cat "$DIR/node$i.pid")"
        i=$((i + 1))
    done
}

case "$CMD" in
    start) start_all;;
    stop) stop_all;;
    run)
        trap 'trap - INT TERM; echo; stop_all; exit 0' INT TERM
        start_all
        echo "running; Ctrl-C (or SIGTERM to pid $$) stops every node"
        # wait returns when a trapped signal arrives, or when every node exited.
        wait
        echo "every node exited"
        stop_all
        ;;
esac
