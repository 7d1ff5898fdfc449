#!/bin/sh
# cluster_tls.sh - the cluster transport in TLS (cluster_tls, with the
# tls_cert / tls_key / tls_ca settings of the thin-client port): 3 nodes
# whose certificates share a CA form one topology and serve keys forwarded
# between them over those links; a plaintext node and a node whose
# certificate no trusted CA signed are refused at the handshake, and the
# topology stays as it was.  The nodes also share a cluster_secret, which
# the metadata group's own port (libraft's) checks: a stranger speaking
# libraft's preamble without the proof is cut off before libraft reads a
# byte of it; and that port's connections are in TLS too: a peer with the
# proof that then speaks plaintext is cut off the same way.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
command -v openssl >/dev/null 2>&1 || { bad "openssl not installed"; finish; }

P="$CHAOS_TMP/pki"
mkdir -p "$P"
(
    cd "$P" || exit 1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
        -out ca.pem -days 2 -subj "/CN=ember cluster test CA" 2>/dev/null &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout node.key \
        -out node.csr -subj "/CN=ember node" 2>/dev/null &&
    openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem \
        -days 2 2>/dev/null &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout rogue.key \
        -out rogue.pem -days 2 -subj "/CN=rogue" 2>/dev/null
) || { bad "could not make the test certificates"; finish; }
TLS="--cluster-tls true --tls-cert $P/node.pem --tls-key $P/node.key --tls-ca $P/ca.pem --cluster-secret s3cret-of-the-test"
cli() { n=$1; shift; "$BUILD/ember-cli" -h "$(node_ip "$n")" -p "$CHAOS_PORT" "$@"; }

node_start 1 $(cluster_flags 1) $TLS || finish
node_start 2 $(cluster_flags 2 1) $TLS || finish
node_start 3 $(cluster_flags 3 1) $TLS || finish
joined=1
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_joined 1 || joined=0
done
[ $joined = 1 ] && ok "3 nodes with certificates of one CA form one topology" ||
    { bad "the TLS nodes did not form"; finish; }
grep -q 'transport .*:47100 (TLS), metadata group .*:47500 (TLS)' "$CHAOS_LOG_1" &&
    ok "the transport and the metadata group say they run in TLS" ||
    bad "no '(TLS)' for both ports in node 1's start line"

# Keys of every owner: node 2 takes the writes, node 3 the reads, so most go
# over the links between members.
cli 1 create tlsc >/dev/null || bad "create the cache"
good=0
for k in $(seq 1 24); do
    cli 2 put tlsc "k$k" "v$k" >/dev/null && [ "$(cli 3 get tlsc "k$k")" = "string:v$k" ] &&
        good=$((good + 1))
done
[ $good = 24 ] && ok "24 keys written through node 2 read back through node 3" ||
    bad "only $good of 24 keys read back through node 3"

# A plaintext node, then one whose certificate no trusted CA signed (it
# learns only that node 1 closed the link: under TLS 1.3 the client's side
# of the handshake ends before the server has checked its certificate).
r1=$(metric 1 ember_cluster_links_refused)
node_start 4 $(cluster_flags 4 1) || finish
node_start 5 $(cluster_flags 5 1) --cluster-tls true --tls-cert "$P/rogue.pem" \
    --tls-key "$P/rogue.key" --tls-ca "$P/ca.pem" || finish
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
    grep -q 'TLS handshake failed: .*wrong version number' "$CHAOS_LOG_1" &&
        grep -q 'TLS handshake failed: .*certificate verify failed' "$CHAOS_LOG_1" && break
    sleep 0.1; t=$((t + 1))
done
[ "$(metric 4 ember_cluster_joined)" = 0 ] &&
    [ "$(metric 1 ember_cluster_links_refused)" -gt "$r1" ] 2>/dev/null &&
    ok "a plaintext node is refused" || bad "plaintext node: joined $(metric 4 ember_cluster_joined)"
[ "$(metric 5 ember_cluster_joined)" = 0 ] &&
    grep -q 'TLS handshake failed: .*certificate verify failed' "$CHAOS_LOG_1" &&
    ok "a node whose certificate no trusted CA signed is refused" ||
    bad "rogue node: joined $(metric 5 ember_cluster_joined)"
grep -m1 'wrong version number' "$CHAOS_LOG_1" | sed 's/^.* W /     node 1: /'
grep -m1 'certificate verify failed' "$CHAOS_LOG_1" | sed 's/^.* W /     node 1: /'
for i in 1 2 3; do
    [ "$(metric "$i" ember_cluster_members)" = 3 ] || joined=0
done
[ $joined = 1 ] && ok "refused nodes leave the topology as it was" || bad "topology changed"

# A stranger on node 1's metadata port (47500): libraft's preamble (protocol
# 1, a raft id, an address), then 32 bytes that are no proof of the secret.
# Node 1 must close the connection and say so; the group goes on.
out=$(node -e '
const net = require("net");
const s = net.connect(47500, process.argv[1], () => {
    const addr = Buffer.alloc(16); addr.write("10.9.9.9:1");
    const h = Buffer.alloc(24); h.writeBigUInt64LE(1n, 0); h.writeBigUInt64LE(424242n, 8);
    h.writeBigUInt64LE(16n, 16);
    s.write(Buffer.concat([h, addr]));
});
let got = 0;
s.on("data", (d) => { got += d.length; if (got >= 16) s.write(Buffer.alloc(32)); });
s.on("close", () => { console.log("closed after " + got + " bytes"); process.exit(0); });
setTimeout(() => { console.log("still open"); process.exit(1); }, 20000);
' "$(node_ip 1)" 2>&1)
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && ! grep -q 'metadata connection from .* refused' "$CHAOS_LOG_1"; do
    sleep 0.1; t=$((t + 1))
done
case $out in
"closed after 16 bytes")
    grep -q 'metadata connection from .* refused: wrong cluster secret' "$CHAOS_LOG_1" &&
        ok "a stranger without the secret on the metadata port is cut off: $(grep -m1 'metadata connection from' "$CHAOS_LOG_1" | sed 's/^.* W //')" ||
        bad "the metadata port closed the stranger but did not say why" ;;
*) bad "the metadata port let a stranger without the secret stay: $out" ;;
esac
# An impostor that knows the secret but not TLS: its proof is accepted,
# then the plaintext it sends where the TLS handshake belongs is refused
# before libraft reads a byte of it (the group's traffic is encrypted).
out=$(node -e '
const net = require("net"), crypto = require("crypto");
const id = 434343n;
const s = net.connect(47500, process.argv[1], () => {
    const addr = Buffer.alloc(16); addr.write("10.9.9.8:1");
    const h = Buffer.alloc(24); h.writeBigUInt64LE(1n, 0); h.writeBigUInt64LE(id, 8);
    h.writeBigUInt64LE(16n, 16);
    s.write(Buffer.concat([h, addr]));
});
let got = Buffer.alloc(0), sent = 0;
s.on("data", (d) => {
    got = Buffer.concat([got, d]);
    if (got.length >= 16 && sent === 0) {
        const idb = Buffer.alloc(8); idb.writeBigUInt64LE(id, 0);
        s.write(crypto.createHmac("sha256", process.argv[2])
            .update(Buffer.concat([Buffer.from("ember-raft"), got.subarray(0, 16), idb])).digest());
        sent = 1;
    }
    if (got.length >= 17 && sent === 1) {
        sent = 2;                   /* plaintext where TLS belongs: a message header */
        const m = Buffer.alloc(64); m.writeBigUInt64LE(1n, 0); s.write(m);
    }
});
s.on("close", () => { console.log("closed after " + got.length + " bytes, ok byte " + got[16]); process.exit(0); });
setTimeout(() => { console.log("still open"); process.exit(1); }, 20000);
' "$(node_ip 1)" s3cret-of-the-test 2>&1)
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && ! grep -q 'metadata connection from 10.9.9.8:1: TLS' "$CHAOS_LOG_1"; do
    sleep 0.1; t=$((t + 1))
done
case $out in
"closed after 17 bytes, ok byte 1")
    grep -q 'metadata connection from 10.9.9.8:1: TLS' "$CHAOS_LOG_1" &&
        ok "plaintext after the secret's proof is refused: $(grep -m1 'metadata connection from 10.9.9.8' "$CHAOS_LOG_1" | sed 's/^.* W //')" ||
        bad "the metadata port closed the impostor but did not say why" ;;
*) bad "the metadata port took a peer with the secret but without TLS: $out" ;;
esac
for i in 1 2 3; do
    [ "$(metric "$i" ember_cluster_members)" = 3 ] || joined=0
done
[ $joined = 1 ] && ok "the group goes on" || bad "topology changed after the strangers"
[ "$(cli 3 get tlsc k7)" = string:v7 ] && ok "the cluster still serves" || bad "no read after the refusals"
finish
