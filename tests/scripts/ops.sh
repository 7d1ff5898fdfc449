#!/bin/sh
# ops.sh - black-box tests of emberd's operator features (issue 5) with real
# clients: a users file (ember-cli and the Node.js client with right and wrong
# passwords, the failed-login limiter, ops before the handshake), /metrics
# and /health (counters move with the requests sent), and TLS (ember-cli and
# Node over TLS, plaintext and TLS 1.1 clients refused, client certificates).
# Needs: emberd with the issue-5 settings, ember-cli, curl, openssl, node.
# Prints "N passed, N failed" last.
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
BUILD=${EMBER_BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
EMBERD=$BUILD/emberd
CLI=$BUILD/ember-cli
TMP=$(mktemp -d)
PID=
pass=0
fail=0

cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# emberd_spawn_http (a fresh log per start, both ports read from it),
# emberd_stop.  Sourced before this suite's own ok/bad, which count in
# pass/fail.
. tests/scripts/lib.sh

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
# expect NAME COMMAND...: the command must succeed
expect() { n=$1; shift; if "$@" >"$TMP/out" 2>&1; then ok "$n"; else bad "$n: $(head -c 300 "$TMP/out")"; fi; }
# expect_rc NAME RC COMMAND...: the command must exit with RC
expect_rc() {
    n=$1; want=$2; shift 2
    "$@" >"$TMP/out" 2>&1
    rc=$?
    if [ "$rc" = "$want" ]; then ok "$n"; else bad "$n: exit $rc, want $want: $(head -c 300 "$TMP/out")"; fi
}

for tool in curl openssl node; do
    if ! command -v $tool >/dev/null; then
        echo "missing $tool"; echo "0 passed, 1 failed"; exit 1
    fi
done
if [ ! -x "$EMBERD" ] || [ ! -x "$CLI" ]; then
    echo "missing $EMBERD or $CLI"; echo "0 passed, 1 failed"; exit 1
fi
if ! "$EMBERD" --help | grep -q users_file; then
    # The modules exist (unit tests cover them) but this emberd does not read
    # their settings yet: nothing here can run.
    echo "emberd does not read users_file/tls/http settings yet"
    echo "0 passed, 1 failed"
    exit 1
fi

# start ARGS...: emberd on free ports; sets PID, PORT, HTTP.
start() {
    emberd_spawn_http "$@" && return 0
    echo "emberd did not start: $(cat "$LOG")"
    return 1
}

# stop: SIGTERM; returns emberd's exit status.
stop() {
    emberd_stop
}

# metric NAME_WITH_LABELS: its value in a fresh scrape (empty if absent)
metric() {
    curl -s "http://127.0.0.1:$HTTP/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}

# node_connect ARGS: a Node client connects (and puts/gets) or fails;
# prints "ok" or "error: <message>".
node_connect() {
    (cd "$ROOT/tests/node" && node -e '
const IgniteClient = require("apache-ignite-client");
const fs = require("fs");
const [port, user, pass, ca] = process.argv.slice(1);
(async () => {
    const c = new IgniteClient();
    const cfg = new IgniteClient.IgniteClientConfiguration("127.0.0.1:" + port);
    if (user) cfg.setUserName(user).setPassword(pass);
    if (ca) cfg.setConnectionOptions(true, { ca: fs.readFileSync(ca), servername: "localhost" });
    try {
        await c.connect(cfg);
        const cache = (await c.getOrCreateCache("node_ops")).setKeyType(IgniteClient.ObjectType.PRIMITIVE_TYPE.INTEGER);
        await cache.put(7, "seven");
        const v = await cache.get(7);
        console.log(v === "seven" ? "ok" : "error: got " + v);
    } catch (e) {
        console.log("error: " + e.message);
    }
    c.disconnect();
})();' "$@")
}

# raw_before_handshake PORT: sends CACHE_GET_NAMES (op 1050) as the first
# frame; prints "closed" if the server closes without answering.
raw_before_handshake() {
    node -e '
const net = require("net");
const s = net.connect(+process.argv[1], "127.0.0.1", () => {
    const b = Buffer.alloc(14);
    b.writeInt32LE(10, 0); b.writeInt16LE(1050, 4); b.writeBigInt64LE(1n, 6);
    s.write(b);
});
let got = 0;
s.on("data", (d) => { got += d.length; });
s.on("close", () => { console.log(got ? "answered " + got : "closed"); process.exit(0); });
s.on("error", () => {});
// Only a bound for a server that never closes: "closed" ends it at once.
setTimeout(() => { console.log("still open"); process.exit(0); }, 60000);' "$1"
}

# ---- authentication ----------------------------------------------------------
USERS=$TMP/users
expect add_user env EMBER_PASSWORD=s3cret "$EMBERD" --users-file "$USERS" --add-user ignite
expect users_file_mode sh -c "[ \"\$(stat -c %a '$USERS')\" = 600 ]"
expect users_file_salted grep -q '^ignite:pbkdf2-sha256\$' "$USERS"
# Failures are forgiven one per 60 s here, not the default 2 s, so the
# limiter check below does not depend on how fast the steps before it run
# (under ASan the node clients and password hashing take seconds).
if start --users-file "$USERS" --auth-max-failures 6 --auth-failure-forgive 60s; then
    expect_rc cli_no_credentials 1 "$CLI" -p "$PORT" ping
    expect_rc cli_wrong_password 1 "$CLI" -p "$PORT" -u ignite -P wrong ping
    expect_rc cli_unknown_user 1 "$CLI" -p "$PORT" -u nobody -P s3cret ping
    expect_rc cli_right_password 0 "$CLI" -p "$PORT" -u ignite -P s3cret create authed
    expect_rc cli_put_authed 0 env EMBER_PASSWORD=s3cret "$CLI" -p "$PORT" -u ignite put authed k v
    [ "$(node_connect "$PORT" ignite s3cret)" = ok ] && ok node_right_password || bad node_right_password
    case "$(node_connect "$PORT" ignite wrong)" in
        error:*) ok node_wrong_password ;; *) bad node_wrong_password ;;
    esac
    case "$(node_connect "$PORT")" in
        error:*) ok node_no_credentials ;; *) bad node_no_credentials ;;
    esac
    [ "$(raw_before_handshake "$PORT")" = closed ] && ok op_before_handshake_refused ||
        bad op_before_handshake_refused
    # 5 failures so far from 127.0.0.1; the limit is 6: after more wrong
    # passwords even the right one is refused until failures are forgiven.
    i=0
    while [ $i -lt 3 ]; do "$CLI" -p "$PORT" -u ignite -P "wrong$i" ping >/dev/null 2>&1; i=$((i + 1)); done
    "$CLI" -p "$PORT" -u ignite -P s3cret ping >"$TMP/out" 2>&1
    grep -q 'Too many failed' "$TMP/out" && ok limiter_refuses || bad "limiter_refuses: $(cat "$TMP/out")"
    [ "$(metric 'ember_handshakes_total{result="auth_limited"}')" -ge 1 ] 2>/dev/null &&
        ok metrics_count_limited || bad metrics_count_limited
    [ "$(metric 'ember_handshakes_total{result="auth_failed"}')" -ge 3 ] 2>/dev/null &&
        ok metrics_count_auth_failed || bad metrics_count_auth_failed
    stop && ok emberd_clean_exit_auth || bad emberd_clean_exit_auth
else
    bad start_with_users_file
fi

# ---- metrics and health ------------------------------------------------------
if start; then
    [ "$(curl -s "http://127.0.0.1:$HTTP/health")" = ok ] && ok health || bad health
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/nope")
    [ "$code" = 404 ] && ok http_404 || bad "http_404: $code"
    curl -s -D "$TMP/hdr" -o /dev/null "http://127.0.0.1:$HTTP/metrics"
    grep -qi '^content-type: text/plain; version=0.0.4' "$TMP/hdr" && ok metrics_content_type ||
        bad metrics_content_type
    "$CLI" -p "$PORT" create m >/dev/null
    c0=$(metric 'ember_connections_total')
    p0=$(metric 'ember_requests_total{op="CACHE_PUT"}')
    i=0
    while [ $i -lt 5 ]; do "$CLI" -p "$PORT" put m int:$i v >/dev/null; i=$((i + 1)); done
    "$CLI" -p "$PORT" get nosuch int:1 >/dev/null 2>&1
    c1=$(metric 'ember_connections_total')
    p1=$(metric 'ember_requests_total{op="CACHE_PUT"}')
    [ "$((${p1:-0} - ${p0:-0}))" = 5 ] && ok metrics_puts_counted || bad "metrics_puts_counted: $p0 -> $p1"
    [ "$((${c1:-0} - ${c0:-0}))" = 6 ] && ok metrics_connections_counted ||
        bad "metrics_connections_counted: $c0 -> $c1"
    [ "$(metric 'ember_request_errors_total{op="CACHE_GET"}')" = 1 ] && ok metrics_errors_counted ||
        bad metrics_errors_counted
    [ "$(metric 'ember_cache_entries{cache="m"}')" = 5 ] && ok metrics_cache_entries ||
        bad metrics_cache_entries
    [ "$(metric 'ember_connections')" = 0 ] && ok metrics_connections_gauge || bad metrics_connections_gauge
    curl -s "http://127.0.0.1:$HTTP/metrics" | grep -q '^ember_request_duration_seconds_bucket{op="CACHE_PUT",le="+Inf"} ' &&
        ok metrics_histogram || bad metrics_histogram
    stop && ok emberd_clean_exit_metrics || bad emberd_clean_exit_metrics
else
    bad start_plain
fi

# ---- health after a WAL failure ---------------------------------------------------
# A real write error, without a hook in emberd: a file-size limit (ulimit -f;
# dash counts 512-byte blocks, bash 1 KiB) with SIGXFSZ ignored (inherited
# through exec) makes write(2) past the limit fail with EFBIG.  Three 100 KB
# values cannot fit; the WAL fails, the default region refuses writes, and
# /health must say so (it answered 200 "ok" regardless).
printf '#!/bin/sh\nulimit -f 256\ntrap "" XFSZ\nexec "%s" "$@"\n' "$EMBERD" >"$TMP/limited-emberd"
chmod +x "$TMP/limited-emberd"
if EMBERD=$TMP/limited-emberd emberd_spawn_http --persistence true --wal-path "$TMP/wal" \
        --wal-mode FSYNC --checkpoint-frequency 0; then
    [ "$(curl -s "http://127.0.0.1:$HTTP/health")" = ok ] && ok health_ok_before_failure ||
        bad health_ok_before_failure
    [ "$(metric 'ember_health_component_failed{component="wal_region_default"}')" = 0 ] &&
        ok metrics_health_component_ok || bad metrics_health_component_ok
    # A persistent node starts INACTIVE the first time, as Ignite does.
    "$CLI" -p "$PORT" state ACTIVE >/dev/null 2>&1
    "$CLI" -p "$PORT" create big >/dev/null 2>&1
    big=$(head -c 100000 /dev/zero | tr '\0' x)
    fails=0
    for k in 1 2 3; do
        "$CLI" -p "$PORT" put big "k$k" "$big" >"$TMP/out" 2>&1 || fails=$((fails + 1))
    done
    [ $fails -ge 1 ] && grep -q 'no longer accepts writes' "$TMP/out" && ok wal_failure_refuses_writes ||
        bad "wal_failure_refuses_writes: $fails failed puts: $(head -c 300 "$TMP/out")"
    code=$(curl -s -o "$TMP/health" -w '%{http_code}' "http://127.0.0.1:$HTTP/health")
    if [ "$code" = 503 ] && [ "$(wc -l <"$TMP/health")" = 1 ] &&
       grep -q '^wal_region_default failed: persistence failed (.*): data region default no longer accepts writes' "$TMP/health"; then
        ok health_503_names_failed_region
    else
        bad "health_503_names_failed_region: $code $(head -c 400 "$TMP/health")"
    fi
    [ "$(metric 'ember_health_component_failed{component="wal_region_default"}')" = 1 ] &&
        ok metrics_health_component_failed || bad metrics_health_component_failed
    expect_rc reads_after_wal_failure 0 "$CLI" -p "$PORT" caches
    stop
else
    bad "start_limited_persistence: $(cat "$LOG")"
fi

# ---- config file ---------------------------------------------------------------
# A section header ember does not know is ignored with a warning (it made
# emberd exit 2); a [region:NAME] section still configures a region.
printf 'max_cursors = 3\n[server]\nidle_timeout = 0\n[region:r1]\nmax_size = 1m\n' >"$TMP/sections.ini"
if emberd_spawn --config "$TMP/sections.ini"; then
    grep -q 'section \[server\] is not one ember knows' "$LOG" && ok config_unknown_section_warned ||
        bad "config_unknown_section_warned: $(cat "$LOG")"
    expect_rc config_sections_serves 0 "$CLI" -p "$PORT" ping
    stop && ok emberd_clean_exit_config || bad emberd_clean_exit_config
else
    bad "config_unknown_section_starts: $(cat "$LOG")"
fi

# ---- TLS ---------------------------------------------------------------------
cd "$TMP" || exit 1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
    -days 2 -subj "/CN=ember test CA" 2>/dev/null
for who in server client; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $who.key -out $who.csr \
        -subj "/CN=$who" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.cnf
    openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem -days 2 \
        -extfile san.cnf 2>/dev/null
done
# a certificate no trusted CA signed
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout rogue.key \
    -out rogue.pem -days 2 -subj "/CN=rogue" 2>/dev/null
cd "$ROOT" || exit 1
if start --tls true --tls-cert "$TMP/server.pem" --tls-key "$TMP/server.key"; then
    expect_rc tls_cli_ping 0 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" ping
    expect_rc tls_cli_create 0 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" create t
    expect_rc tls_cli_put 0 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" put t k v
    expect_rc tls_cli_wrong_ca 2 "$CLI" -p "$PORT" --tls --ca "$TMP/server.pem" ping
    expect_rc tls_plaintext_client_closed 2 "$CLI" -p "$PORT" --timeout 3000 ping
    [ "$(node_connect "$PORT" "" "" "$TMP/ca.pem")" = ok ] && ok tls_node_client || bad tls_node_client
    if openssl s_client -connect "127.0.0.1:$PORT" -tls1_1 </dev/null >"$TMP/out" 2>&1 &&
        grep -q 'Cipher is [A-Z]' "$TMP/out"; then
        bad tls11_refused
    else
        ok tls11_refused
    fi
    expect_rc tls_server_still_serves 0 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" get t k
    [ "$(metric 'ember_tls_handshake_failures_total')" -ge 2 ] 2>/dev/null &&
        ok metrics_tls_failures || bad metrics_tls_failures
    stop && ok emberd_clean_exit_tls || bad emberd_clean_exit_tls
else
    bad start_tls
fi
if start --tls true --tls-cert "$TMP/server.pem" --tls-key "$TMP/server.key" \
        --tls-ca "$TMP/ca.pem" --tls-client-auth require; then
    expect_rc mtls_with_cert 0 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" --cert "$TMP/client.pem" \
        --key "$TMP/client.key" ping
    expect_rc mtls_without_cert 2 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" ping
    expect_rc mtls_untrusted_cert 2 "$CLI" -p "$PORT" --tls --ca "$TMP/ca.pem" \
        --cert "$TMP/rogue.pem" --key "$TMP/rogue.key" ping
    stop && ok emberd_clean_exit_mtls || bad emberd_clean_exit_mtls
else
    bad start_mtls
fi
expect_rc tls_bad_key_refused_at_start 1 "$EMBERD" --port 0 --http false --tls true \
    --tls-cert "$TMP/server.pem" --tls-key "$TMP/client.key"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
