#!/bin/sh
# cli.sh - black-box test of ember-cli against a real emberd: cache listing,
# typed put/get round trips, remove, size, stats, errors and exit codes,
# JSON output, authentication.  Prints "N passed, N failed" last.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${EMBER_BUILD:-build}
EMBERD=$BUILD/emberd
CLI=$BUILD/ember-cli
pass=0
fail=0
TMP=$(mktemp -d)
PID=

cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# emberd_spawn (each start its own fresh log, the port taken from the
# socket that very process listens on), emberd_stop
. tests/scripts/lib.sh

# start_emberd ARGS...: emberd on a free port; sets PID and PORT.
start_emberd() {
    emberd_spawn "$@" && return 0
    echo "emberd did not start:"; cat "$LOG"
    return 1
}

stop_emberd() {
    emberd_stop
}

# check NAME EXPECTED_RC EXPECTED_STDOUT -- ember-cli args...
check() {
    name=$1; want_rc=$2; want_out=$3
    shift 4
    out=$("$CLI" -p "$PORT" "$@" 2>"$TMP/err")
    rc=$?
    if [ "$rc" = "$want_rc" ] && [ "$out" = "$want_out" ]; then
        pass=$((pass + 1))
        echo "ok   $name"
    else
        fail=$((fail + 1))
        echo "FAIL $name: rc=$rc (want $want_rc) out='$out' (want '$want_out') err='$(cat "$TMP/err")'"
    fi
}

# check_glob: like check, but EXPECTED_STDOUT is a shell pattern.
check_glob() {
    name=$1; want_rc=$2; want_out=$3
    shift 4
    out=$("$CLI" -p "$PORT" "$@" 2>"$TMP/err")
    rc=$?
    # shellcheck disable=SC2254
    case "$out" in
        $want_out) matched=1 ;;
        *) matched=0 ;;
    esac
    if [ "$rc" = "$want_rc" ] && [ $matched = 1 ]; then
        pass=$((pass + 1))
        echo "ok   $name"
    else
        fail=$((fail + 1))
        echo "FAIL $name: rc=$rc (want $want_rc) out='$out' (want '$want_out') err='$(cat "$TMP/err")'"
    fi
}

if [ ! -x "$EMBERD" ] || [ ! -x "$CLI" ]; then
    echo "missing $EMBERD or $CLI"
    echo "0 passed, 1 failed"
    exit 1
fi

if start_emberd; then
    check caches_empty 0 '' -- caches
    check create 0 'created' -- create people
    check create_again 1 '' -- create people
    check put_int_string 0 'ok' -- put people int:1 string:alice
    check put_long_double 0 'ok' -- put people long:2 double:2.5
    check put_untyped 0 'ok' -- put people key value
    check put_uuid_bool 0 'ok' -- put people uuid:d57babad-7bc1-4c82-9f9c-e72841b92a85 bool:true
    check get_int 0 'string:alice' -- get people int:1
    check get_long 0 'double:2.5' -- get people long:2
    check get_untyped 0 'string:value' -- get people string:key
    check get_uuid 0 'bool:true' -- get people uuid:D57BABAD-7BC1-4C82-9F9C-E72841B92A85
    check get_typed_miss 0 '(not found)' -- get people long:1
    check size 0 '4' -- size people
    check caches 0 'people' -- caches
    check caches_json 0 '{"caches":["people"]}' -- --json caches
    check get_json 0 '{"ok":true,"found":true,"value":{"type":"string","value":"alice"}}' -- --json get people int:1
    check remove 0 'removed' -- remove people int:1
    check remove_again 0 'not found' -- remove people int:1
    check size_after 0 '3' -- size people
    check no_cache 1 '' -- get nosuch int:1
    check_glob no_cache_json 1 '{"ok":false,"status":1000,"status_name":"CACHE_DOES_NOT_EXIST","error":"*"}' -- --json get nosuch int:1
    check bad_value 2 '' -- put people int:x string:y
    check bad_command 2 '' -- frobnicate
    check proto_17 0 'string:value' -- --protocol 1.7.0 get people key
    check proto_10 0 'string:value' -- --protocol 1.0.0 get people key
    check_glob cluster_one 0 'topology 1.0, state ACTIVE, 1 node
NODE ID*ORDER*CONSISTENT ID*THIN ADDRESS*
*-*-*-*-*  1 *127.0.0.1:'"$PORT"'*127.0.0.1:'"$PORT"'*(this node)
leader: *-*-*-*-*
NODE ID*UPTIME*LEADER*LEASE*STATE
*-*-*-*-*  0h00m*s*yes*yes*ALIVE
cache people: PARTITIONED, 0 backups, 1024 partitions
  NODE*SIZE*PRIMARY*BACKUP*MOVING*RENTING*LOST
  *-*-*-*-*           3     1024        0       0        0     0
lost partitions: 0
rebalance: none in progress' -- cluster
    check_glob cluster_json 0 '{"ok":true,"topology":{"major":1,"minor":0},"state":"ACTIVE","nodes":?{"id":"*","consistent_id":"127.0.0.1:'"$PORT"'","addresses":?"127.0.0.1"?,"port":'"$PORT"',"order":1,"local":true}?,"endpoints_version":1,"endpoints":?{"id":"*","port":'"$PORT"',"addresses":?"127.0.0.1"?}?,"details":{"cluster":false,"state":"ACTIVE",*"nodes":?{"id":"*","self":true,*"leader":true,"answered":true,"uptime_ms":*,"lease":true,"caches":?{"name":"people","size":3,"entries_left":0}?*"caches":?{"name":"people",*"mode":"PARTITIONED","backups":0,"partitions":1024,*"primary":1024,*"lost":??}?,"rebalance":{"in_progress":false,*}}' -- --json cluster
    check_glob cluster_cache 0 '*PARTITIONS
*  1024  (this node)
leader: *' -- cluster people
    check idle_verify 0 'idle-verify: 1 cache, 1024 partitions, 1 node: no conflicts' -- idle-verify
    check idle_verify_named 0 'idle-verify: 1 cache, 1024 partitions, 1 node: no conflicts' -- idle-verify people
    check_glob idle_verify_json 0 '{"ok":true,"agree":true,"caches":1,"partitions":1024,"nodes":1,"conflict_count":0,"conflicts":??,"errors":??}' -- --json idle-verify
    check_glob idle_verify_missing 3 'idle-verify: 1 cache, 0 partitions, 1 node: 0 conflicts, some nodes did not answer
  cache nosuch, node *: PART_VERIFY failed: Cache does not exist ?name=nosuch?' -- idle-verify nosuch
    check idle_verify_bad_option 2 '' -- idle-verify --frob
    check corrupt_needs_debug_ops 1 '' -- debug-corrupt people 0
    check_glob cluster_cache_json 0 '*"cache":"people","partition_aware":true,*"partition_count":1024,"partitions":?0,1,2,*,1023?}?*' -- --json cluster people
    check_glob cluster_no_cache 0 '*cache nosuch: not found*' -- cluster nosuch
    check cluster_state 0 'ACTIVE' -- cluster state
    check cluster_too_many 2 '' -- cluster a b
    check cluster_old_protocol 2 '' -- --protocol 1.4.0 cluster
    check destroy 0 'destroyed' -- destroy people
    check destroy_again 1 '' -- destroy people
    stop_emberd
else
    fail=$((fail + 1))
fi

# nothing listening: a connection error is exit code 2
PORT=1
check refused 2 '' -- ping

if start_emberd --username ops --password s3cret; then
    check auth_missing 1 '' -- ping
    check auth_wrong 1 '' -- -u ops -P nope caches
    check auth_right 0 '' -- -u ops -P s3cret caches
    EMBER_PASSWORD=s3cret check auth_env 0 'created' -- -u ops create c
    check_glob auth_json 1 '{"ok":false,"status":2000,"status_name":"AUTH_FAILED","error":"*"}' -- --json -u ops -P nope ping
    stop_emberd
else
    fail=$((fail + 1))
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
