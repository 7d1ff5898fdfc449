# lib.sh - the fault-injection harness: real emberd processes on loopback
# addresses, real faults (kill -9, SIGSTOP, iptables), and cleanup of
# everything it made on every exit path.  Sourced by the scenarios in this
# folder; POSIX sh, safe under `set -u`.
#
# Each run takes its own /24 of the loopback range, 127.N.0.0 with N from
# the shell's pid, so its firewall rules can only ever match its own nodes'
# traffic: node i listens on 127.N.0.i (thin port CHAOS_PORT, HTTP 8080 on
# the same address) with its data directory under $CHAOS_TMP/n<i>.
#
#   chaos_init            temp dir, counters, traps, the iptables chain
#   node_start I [FLAGS]  start node I (fresh log file per start; waits for
#                         this pid's listening socket); node_addr I = ip:port;
#                         node_spawn I [FLAGS] + node_listening I: the same in
#                         two halves, to start several at one instant
#   node_kill I           kill -9 and reap          node_term I  SIGTERM, exit 0?
#   node_pause I / node_resume I                     SIGSTOP / SIGCONT
#   net_isolate I         drop every packet to or from node I
#   net_cut I J           drop packets from I to J (one way; call twice for both)
#   net_heal              remove every rule this run added
#   maps_agree I...       the nodes hold one full map of the last exchange (waits)
#   log_wait I TEXT       node I's log has a line with TEXT (waits)
#   ok NAME / bad NAME / finish   counting, final "N passed, N failed"
#   chaos_row NEMESIS WORKLOAD    a line of the results table

CHAOS_PORT=${CHAOS_PORT:-10800}
CHAOS_EMBERD=${CHAOS_EMBERD:-}       # another emberd binary (tests/chaos/planted.sh)
CHAOS_WAIT=${CHAOS_WAIT:-120}         # seconds a start may take on a loaded box

chaos_init() {
    CHAOS_TMP=$(mktemp -d)
    # The run's own 127.N.0.0/24: one where nothing listens (processes a
    # killed run left behind would take its ports).
    CHAOS_NET=$(( ($$ % 200) + 20 ))
    tries=0
    while [ $tries -lt 200 ] && ss -Hltn "src 127.$CHAOS_NET.0.0/24" 2>/dev/null | grep -q .; do
        CHAOS_NET=$(( (CHAOS_NET - 19) % 200 + 20 ))
        tries=$((tries + 1))
    done
    CHAOS_CHAIN="EMBCHAOS$$"
    CHAOS_PIDS=""
    CHAOS_FW=0
    PASS=0
    FAIL=0
    trap chaos_cleanup EXIT
    # PIPE too: a run whose output is cut short (| head) still stops its nodes.
    trap 'chaos_cleanup; exit 1' INT TERM HUP PIPE
}

chaos_fw_init() {
    [ "$CHAOS_FW" = 1 ] && return 0
    command -v iptables >/dev/null 2>&1 || { bad "iptables not installed"; return 1; }
    iptables -N "$CHAOS_CHAIN" 2>/dev/null || { bad "iptables -N failed (not root?)"; return 1; }
    iptables -I OUTPUT -o lo -j "$CHAOS_CHAIN" || { bad "iptables -I OUTPUT failed"; return 1; }
    CHAOS_FW=1
}

chaos_cleanup() {
    for p in $CHAOS_PIDS; do
        kill -CONT "$p" 2>/dev/null
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    CHAOS_PIDS=""
    # a filesystem a scenario mounted in the run's directory (cluster_disk.sh)
    if [ -n "${CHAOS_UMOUNT:-}" ]; then
        umount "$CHAOS_UMOUNT" 2>/dev/null || umount -l "$CHAOS_UMOUNT" 2>/dev/null
        CHAOS_UMOUNT=""
    fi
    if [ "$CHAOS_FW" = 1 ]; then
        iptables -D OUTPUT -o lo -j "$CHAOS_CHAIN" 2>/dev/null
        iptables -F "$CHAOS_CHAIN" 2>/dev/null
        iptables -X "$CHAOS_CHAIN" 2>/dev/null
        CHAOS_FW=0
    fi
    [ -n "${CHAOS_KEEP:-}" ] || rm -rf "$CHAOS_TMP"
}

ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; }
# finish: under a sanitizer build, any report in a node's log is a failure.
finish() {
    if [ -n "${EM_SANITIZER:-}" ]; then
        rep=$(grep -l 'Sanitizer' "$CHAOS_TMP"/n*/emberd.*.log 2>/dev/null)
        if [ -n "$rep" ]; then
            bad "sanitizer report in $(echo $rep | tr ' ' ',')"
            grep -h -A20 'Sanitizer' $rep | head -60
        else
            ok "no sanitizer report in any node's log"
        fi
    fi
    echo "$PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; exit $?
}

node_ip() { echo "127.$CHAOS_NET.0.$1"; }
node_addr() { echo "$(node_ip "$1"):$CHAOS_PORT"; }
node_pid() { eval echo "\${CHAOS_PID_$1:-}"; }

# node_start I [FLAGS...]: emberd for node I; fails the scenario if it does
# not listen within CHAOS_WAIT seconds.  Each start logs to a new file, so a
# check of the log can never read an earlier process's lines.
node_start() {
    node_spawn "$@"
    node_listening "$1"
}

# node_spawn I [FLAGS...]: start node I without waiting (node_listening I
# waits), so several can start at the same instant.
node_spawn() {
    i=$1; shift
    ip=$(node_ip "$i")
    dir="$CHAOS_TMP/n$i"
    mkdir -p "$dir"
    n=$(ls "$dir" | grep -c '^emberd\..*\.log$')
    log="$dir/emberd.$n.log"
    # TMPDIR: the metadata group's temporary directory goes in the run's
    # own, which a node killed with -9 cannot remove itself.
    TMPDIR="$dir" "${CHAOS_EMBERD:-$BUILD/emberd}" --host "$ip" --port "$CHAOS_PORT" \
        --http-host "$ip" --http-port 8080 --wal-path "$dir/data" "$@" >"$log" 2>&1 &
    pid=$!
    eval "CHAOS_PID_$i=$pid; CHAOS_LOG_$i=$log"
    CHAOS_PIDS="$CHAOS_PIDS $pid"
}

node_listening() {
    i=$1
    ip=$(node_ip "$i"); pid=$(node_pid "$i"); log=$(eval echo "\$CHAOS_LOG_$i")
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            bad "node $i exited at start"; cat "$log"; return 1
        fi
        ss -Hltnp "src $ip and sport = :$CHAOS_PORT" 2>/dev/null | grep -q "pid=$pid," && return 0
        sleep 0.1
        t=$((t + 1))
    done
    bad "node $i did not listen within ${CHAOS_WAIT}s"; cat "$log"; return 1
}

# start_three [FLAGS...]: nodes 1-3 (each with FLAGS), node 1 bootstrapping,
# the others through it; ends the scenario unless all three joined.
start_three() {
    node_start 1 $(cluster_flags 1) "$@" || finish
    node_start 2 $(cluster_flags 2 1) "$@" || finish
    node_start 3 $(cluster_flags 3 1) "$@" || finish
    for i in 1 2 3; do
        wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_joined 1 ||
            { bad "node $i did not join"; finish; }
    done
    ok "3 nodes joined"
}

chaos_forget() {
    np=""
    for p in $CHAOS_PIDS; do [ "$p" = "$1" ] || np="$np $p"; done
    CHAOS_PIDS=$np
}

node_kill() {
    pid=$(node_pid "$1")
    [ -n "$pid" ] || return 0
    kill -CONT "$pid" 2>/dev/null
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    chaos_forget "$pid"
    eval "CHAOS_PID_$1="
}

# node_term I: SIGTERM; 0 if the node exited with status 0.
node_term() {
    pid=$(node_pid "$1")
    [ -n "$pid" ] || return 1
    kill -CONT "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    st=$?
    chaos_forget "$pid"
    eval "CHAOS_PID_$1="
    # An abort or sanitizer report at stop: its last lines go to the output,
    # which is all CI keeps of a run.
    if [ $st -ne 0 ]; then
        echo "   node $1 exited $st; the end of its log:"
        tail -n 15 "$(eval echo "\$CHAOS_LOG_$1")" | sed 's/^/     /'
    fi
    return $st
}

node_pause() { kill -STOP "$(node_pid "$1")"; }
node_resume() { kill -CONT "$(node_pid "$1")"; }

net_isolate() {
    chaos_fw_init || return 1
    ip=$(node_ip "$1")
    iptables -A "$CHAOS_CHAIN" -d "$ip" -j DROP && iptables -A "$CHAOS_CHAIN" -s "$ip" -j DROP
}

net_cut() {
    chaos_fw_init || return 1
    iptables -A "$CHAOS_CHAIN" -s "$(node_ip "$1")" -d "$(node_ip "$2")" -j DROP
}

net_heal() {
    [ "$CHAOS_FW" = 1 ] && iptables -F "$CHAOS_CHAIN"
    return 0
}

# nodes_list I...: the --nodes argument of ember-chaos for nodes I...
nodes_list() {
    out=""
    for i in "$@"; do out="$out${out:+,}$(node_addr "$i")"; done
    echo "$out"
}

# metric I NAME: the value of a gauge on node I's /metrics ("" if none).
metric() {
    curl -s --max-time 5 "http://$(node_ip "$1"):8080/metrics" 2>/dev/null |
        awk -v m="$2" '$1 == m { print $2; exit }'
}

# wait_metric I NAME VALUE: until node I reports NAME == VALUE (CHAOS_WAIT s).
wait_metric() {
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        [ "$(metric "$1" "$2")" = "$3" ] && return 0
        sleep 0.1
        t=$((t + 1))
    done
    return 1
}

# log_wait I TEXT [N]: until node I's current log has N lines (1) with TEXT
# (CHAOS_WAIT s).
log_wait() {
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        [ "$(grep -cF "$2" "$(eval echo "\$CHAOS_LOG_$1")" 2>/dev/null)" -ge "${3:-1}" ] 2>/dev/null && return 0
        sleep 0.1; t=$((t + 1))
    done
    return 1
}

# maps_agree I...: the nodes report the same map hash and exchange id, and
# that exchange is the last one their metadata committed (waits).
maps_agree() {
    t=0
    while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
        first=""; same=1
        for i in "$@"; do
            v="$(metric "$i" ember_pme_map_exchange):$(metric "$i" ember_pme_map_hash)"
            [ -z "$first" ] && first=$v
            [ "$v" = "$first" ] || same=0
        done
        [ $same = 1 ] && [ "${first%%:*}" != "" ] && [ "${first%%:*}" != 0 ] && return 0
        sleep 0.1
        t=$((t + 1))
    done
    for i in "$@"; do echo "# node $i: $(metric "$i" ember_pme_map_exchange) $(metric "$i" ember_pme_map_hash)"; done
    return 1
}

# members_are I...: until each node I sees 3 members and holds its lease.
members_are() {
    for i in "$@"; do
        wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_lease 1 || {
            dump_metrics "$@"
            return 1
        }
    done
}

# dump_metrics I...: each node's metrics into $CHAOS_TMP/nI.metrics, kept
# with the logs (CHAOS_KEEP=1) for a cluster that did not come back.
dump_metrics() {
    for i in "$@"; do
        curl -s --max-time 5 "http://$(node_ip "$i"):8080/metrics" >"$CHAOS_TMP/n$i.metrics" 2>&1
    done
}

# chaos_row NEMESES WORKLOAD: one line of the results table
# (tools/chaos-table.sh) from $CHAOS_TMP/WORKLOAD.run and .check:
# operations, acknowledged, failed, indeterminate, lost, linearizability
# violations (keys), writes acknowledged on a minority side.
chaos_row() {
    r=$(grep '^run:' "$CHAOS_TMP/$2.run")
    row_count() { echo "$r" | sed -n "s/.* \([0-9]*\) $1,.*/\1/p"; }
    ok_=$(row_count ok); fail_=$(row_count fail); info_=$(row_count info)
    lost=$(sed -n 's/^check set: [0-9]* acknowledged, \([0-9]*\) lost, \([0-9]*\) wrong.*/\1 \2/p' \
        "$CHAOS_TMP/$2.check" | awk '{ print $1 + $2 }')
    nonlin=$(grep -c '^key [0-9]*:' "$CHAOS_TMP/$2.check")
    minority=$(sed -n 's/^minority: \([0-9]*\) writes.*(\([1-9][0-9]*\) windows)/\1/p' \
        "$CHAOS_TMP/$2.check")
    echo "row $1 | $2 | $((ok_ + fail_ + info_)) | $ok_ | $fail_ | $info_ | ${lost:--} |" \
         "$( [ "$2" = register ] && echo "$nonlin" || echo -) | ${minority:--}"
}

# cluster_flags I [SEED]: the flags of a cluster member I (bootstrap when no
# seed is given); every node uses the same ports on its own address.
cluster_flags() {
    if [ -n "${2:-}" ]; then
        echo "--seeds $(node_ip "$2"):47100 --failure-detection-timeout ${CHAOS_FD_MS:-3000}"
    else
        echo "--bootstrap true --failure-detection-timeout ${CHAOS_FD_MS:-3000}"
    fi
}

# persistent_cluster3 BACKUPS FLAGS...: nodes 1-3 started with FLAGS (a
# persistent cluster), formed, activated (a persistent cluster starts
# INACTIVE, as Ignite's), and the cache chaos-set made with BACKUPS through
# node 1.  Nonzero, with a FAIL line, when a step did not happen.
persistent_cluster3() {
    b=$1
    shift
    node_start 1 $(cluster_flags 1) "$@" || return 1
    node_start 2 $(cluster_flags 2 1) "$@" || return 1
    node_start 3 $(cluster_flags 3 1) "$@" || return 1
    members_are 1 2 3 || { bad "the cluster did not form"; return 1; }
    "$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" state ACTIVE >/dev/null ||
        { bad "activation"; return 1; }
    r=$(node tests/chaos/cluster_rebal.js put "$(node_addr 1)" chaos-set "$b" 0 0 2>&1) ||
        { bad "cache chaos-set: $r"; return 1; }
}

# idle_verify WHEN CACHE...: ember-cli idle-verify of the caches through
# node 1 - an ok line when every partition's owners agree, else a FAIL line
# saying after what (WHEN), with the tool's report.
idle_verify() {
    when=$1
    shift
    if "$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" idle-verify "$@" \
            >"$CHAOS_TMP/verify" 2>&1; then
        ok "idle-verify: the owners of every partition agree ($(tail -1 "$CHAOS_TMP/verify"))"
    else
        bad "idle-verify $when:"; head -20 "$CHAOS_TMP/verify"
    fi
}
