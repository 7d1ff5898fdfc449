#!/bin/sh
# cluster_badinput.sh - the cluster port (47100) gets the thin port's
# bad-input treatment, on a real 3-node cluster: connections sending
# garbage, a frame announcing 4 GiB, an oversized frame before the
# handshake, a frame of the wrong type before it, a peer that trickles its
# HELLO a byte at a time, and 100 that connect and send nothing.  Every one
# of them is closed by node 1 (the silent and trickling ones once the
# handshake bound - the failure detection timeout, 3 s here - runs out),
# while a client keeps writing and reading through node 1 and the three
# members keep their links and their topology.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
CLI="$BUILD/ember-cli"

start_three
"$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" create bad >/dev/null || bad "create"
r1=$(metric 1 ember_cluster_links_refused)

# The attackers, all at once; each line of output: CLASS closed N of M, the
# last after T ms.
node -e '
const net = require("net");
const host = process.argv[1], t0 = Date.now();
const classes = {};
let open = 0;
function attack(cls, onConnect) {
    const c = classes[cls] = classes[cls] || { n: 0, closed: 0, last: 0 };
    c.n++; open++;
    const s = net.connect(47100, host, () => onConnect(s));
    s.on("error", () => {});
    s.on("data", () => {});
    s.on("close", () => {
        c.closed++; c.last = Date.now() - t0;
        if (--open === 0) done();
    });
}
function frame(len, type, payload) {
    const h = Buffer.alloc(6); h.writeUInt32LE(len, 0); h.writeUInt16LE(type, 4);
    return Buffer.concat([h, payload || Buffer.alloc(0)]);
}
for (let i = 0; i < 20; i++)
    attack("garbage", (s) => s.write(require("crypto").randomBytes(4096)));
attack("huge-length", (s) => s.write(frame(0xfffffff0, 1)));
attack("oversized-hello", (s) => s.write(frame(2002, 1, Buffer.alloc(2000))));
attack("ping-before-hello", (s) => s.write(frame(2, 3)));
for (let i = 0; i < 5; i++)
    attack("trickle", (s) => {
        const b = frame(60, 1, Buffer.from("EMBC"));
        let k = 0;
        const t = setInterval(() => {
            if (s.destroyed || k >= b.length) return clearInterval(t);
            s.write(b.subarray(k, k + 1)); k++;
        }, 400);
    });
for (let i = 0; i < 100; i++)
    attack("silent", () => {});
function done() {
    for (const [k, c] of Object.entries(classes))
        console.log(`${k} closed ${c.closed} of ${c.n}, the last after ${c.last} ms`);
    process.exit(0);
}
setTimeout(() => { console.log("timeout: " + open + " still open"); done(); }, 30000);
' "$(node_ip 1)" >"$CHAOS_TMP/attack" 2>&1 &
apid=$!

# A client through node 1 while the attack runs.
good=0
for k in $(seq 1 20); do
    "$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" put bad "k$k" "v$k" >/dev/null &&
        [ "$("$CLI" -h "$(node_ip 1)" -p "$CHAOS_PORT" get bad "k$k")" = "string:v$k" ] &&
        good=$((good + 1))
done
wait $apid
sed 's/^/     /' "$CHAOS_TMP/attack"
grep -q "still open" "$CHAOS_TMP/attack" && bad "node 1 left attacking connections open"
for c in garbage huge-length oversized-hello ping-before-hello trickle silent; do
    line=$(grep "^$c closed" "$CHAOS_TMP/attack")
    set -- $(echo "$line" | tr -c '0-9\n' ' ')
    n=${1:-}; m=${2:-}; ms=${3:-}
    case $c in
    trickle|silent) lim=$((3000 + 5000)) ;;       # the handshake bound, plus a loaded box
    *) lim=5000 ;;
    esac
    [ -n "$n" ] && [ "$n" = "$m" ] && [ "$ms" -le $lim ] 2>/dev/null &&
        ok "node 1 closed every '$c' connection ($n, the last after $ms ms)" ||
        bad "'$c': ${line:-no result}"
done
[ $good = 20 ] && ok "a client wrote and read 20 keys through node 1 meanwhile" ||
    bad "only $good of 20 keys through node 1 during the attack"
kept=1
for i in 1 2 3; do
    [ "$(metric "$i" ember_cluster_members)" = 3 ] && [ "$(metric "$i" ember_cluster_links)" = 2 ] ||
        { kept=0; bad "node $i: members $(metric "$i" ember_cluster_members), links $(metric "$i" ember_cluster_links)"; }
done
[ $kept = 1 ] && ok "the three members kept their topology and links"
[ "$(metric 1 ember_cluster_links_refused)" -gt "${r1:-0}" ] 2>/dev/null &&
    ok "node 1 counted the refusals ($(metric 1 ember_cluster_links_refused))" ||
    bad "ember_cluster_links_refused did not grow"
[ "$("$CLI" -h "$(node_ip 2)" -p "$CHAOS_PORT" get bad k7)" = string:v7 ] &&
    ok "the keys read back through node 2" || bad "node 2 read"
finish
