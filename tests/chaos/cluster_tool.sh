#!/bin/sh
# cluster_tool.sh - tools/cluster.sh: `start 3` brings up 3 nodes that see
# each other and prints one line per node (thin address, cluster port,
# pid); a value put through node 1 is read through node 3 with ember-cli;
# `stop` ends every node it started, and no emberd of the run is left.  The
# nodes live on 127.N.1.x (--net), beside anything on 127.0.0.x.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init

NET=127.$CHAOS_NET.1
D=$CHAOS_TMP/cl
CLI="$BUILD/ember-cli"
export EMBERD="$BUILD/emberd"

# running PID: the process exists and is not a zombie (a node the tool
# started is reaped by init, some time after it exited).
running() { st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ]; }

# On any exit, stop what the tool started (chaos_cleanup then removes D).
trap 'tools/cluster.sh stop --dir "$D" >/dev/null 2>&1; chaos_cleanup' EXIT

out=$(tools/cluster.sh start 3 --base-port 11900 --dir "$D" --net "$NET" 2>&1)
rc=$?
[ $rc = 0 ] && ok "start 3 exits 0" || { bad "start 3 exited $rc: $out"; finish; }
[ "$(echo "$out" | wc -l)" = 3 ] && ok "start prints 3 lines" || bad "start printed: $out"
for i in 1 2 3; do
    line=$(echo "$out" | sed -n "${i}p")
    pid=$(cat "$D/node$i.pid" 2>/dev/null)
    [ "$line" = "node $i thin $NET.$i:$((11899 + i)) cluster $NET.$i:47100 pid $pid" ] &&
        ok "line $i names node $i's thin address, cluster port and pid" ||
        bad "line $i: '$line' (pid file: $pid)"
    running "$pid" && ok "node $i (pid $pid) runs" || bad "node $i is not running"
    [ "$(curl -s "http://$NET.$i:8080/metrics" | awk '$1 == "ember_cluster_members" { print $2 }')" = 3 ] &&
        ok "node $i reports 3 members" || bad "node $i members"
done

"$CLI" -h "$NET.1" -p 11900 create tool >/dev/null || bad "create through node 1"
"$CLI" -h "$NET.1" -p 11900 put tool int:7 string:seven >/dev/null || bad "put through node 1"
got=$("$CLI" -h "$NET.3" -p 11902 get tool int:7 2>&1)
[ "$got" = "string:seven" ] && ok "a put through node 1 is read through node 3" ||
    bad "get through node 3: $got"

again=$(tools/cluster.sh start 3 --base-port 11900 --dir "$D" --net "$NET" 2>&1)
[ $? != 0 ] && echo "$again" | grep -q "is running" && ok "a second start on the same dir is refused" ||
    bad "second start: $again"

pids="$(cat "$D"/node*.pid)"
stop=$(tools/cluster.sh stop --dir "$D" 2>&1)
[ $? = 0 ] && ok "stop exits 0" || bad "stop: $stop"
[ "$(echo "$stop" | grep -c '^stopped node')" = 3 ] && ok "stop names 3 nodes" || bad "stop printed: $stop"
left=0
for p in $pids; do running "$p" && left=$((left + 1)); done
[ $left = 0 ] && ok "no node of the run is left" || bad "$left nodes still run"
[ "$(ps -eo args | grep -c "^$EMBERD .*--wal-path $D/")" = 0 ] && ok "no emberd with this run's dir" ||
    bad "left: $(ps -eo pid,args | grep "$D/")"
for i in 1 2 3; do
    grep -q "emberd stopped" "$D/node$i.log" && ok "node $i stopped cleanly" || bad "node $i log: $(tail -3 "$D/node$i.log")"
done
[ "$(tools/cluster.sh stop --dir "$D")" = "no running nodes recorded in $D" ] &&
    ok "a second stop finds nothing" || bad "second stop"
tools/cluster.sh start 0 --dir "$D" >/dev/null 2>&1
[ $? != 0 ] && ok "start 0 is refused" || bad "start 0 accepted"
finish
