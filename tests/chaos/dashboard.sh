#!/bin/sh
# dashboard.sh - the dashboard in a real browser: headless Chromium loads
# http://NODE:8080/ from node 2 of a running 3-node cluster and the test
# checks the DOM the page rendered within the virtual time budget: the three
# nodes listed with one leader, one heat-map cell per partition per node for
# each cache (a primary per partition, and a backup for the cache that has
# one), the two charts drawn with a line per op seen, the rebalance
# panel.  It saves a screenshot to build/dashboard.png, then checks
# /api/node and the page of a single node (one column).  Skipped (with the
# reason) only when no chromium can be found or installed.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init
CLI="$BUILD/ember-cli"

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
    echo "skip dashboard: chromium is not installed (tools/deps.sh installs Debian's chromium)"
    finish
fi
# browser: one headless run with its own profile, bounded in time.
browser() {
    timeout 120 "$CHROME" --headless --disable-gpu --no-sandbox --no-first-run \
        --user-data-dir="$CHAOS_TMP/profile" --virtual-time-budget=5000 "$@" 2>>"$CHAOS_TMP/chromium.log"
}

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) || finish
node_start 3 $(cluster_flags 3 1) || finish
for i in 1 2 3; do
    wait_metric "$i" ember_cluster_members 3 && wait_metric "$i" ember_cluster_links 2 ||
        { bad "node $i did not join"; finish; }
done
cli() { n=$1; shift; "$CLI" -h "$(node_ip "$n")" -p "$CHAOS_PORT" "$@"; }
cli 1 create dash >/dev/null || bad "create dash"
out=$(node tests/chaos/cluster_ops.js make "$(node_addr 1)" orders 1 10 2>&1) ||
    bad "create orders (1 backup): $out"
k=1
while [ $k -le 30 ]; do
    cli $(( (k % 3) + 1 )) put dash "int:$k" "string:v$k" >/dev/null || bad "put $k"
    cli $(( (k % 3) + 1 )) get dash "int:$k" >/dev/null || bad "get $k"
    k=$((k + 1))
done

URL="http://$(node_ip 2):8080/"
api=$(curl -s --max-time 10 "${URL}api/cluster")
echo "$api" | node -e '
  const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
  process.exit(j.nodes.length === 3 && j.nodes.every(n => n.answered) ? 0 : 1);' &&
    ok "/api/cluster on node 2 has every member's answer" || bad "/api/cluster: $(echo "$api" | head -c 300)"
[ "$(curl -s -o /dev/null -w '%{http_code} %{content_type}' "$URL")" = "200 text/html; charset=utf-8" ] &&
    ok "GET / serves the page" || bad "GET / status"

# Some traffic while the page samples, so the charts have rates to draw.
touch "$CHAOS_TMP/load"
( k=0; while [ -f "$CHAOS_TMP/load" ] && [ $k -lt 400 ]; do
      cli $(( (k % 3) + 1 )) get dash "int:$(( k % 30 + 1 ))" >/dev/null; k=$((k + 1)); done ) &
LOAD=$!
DOM=$CHAOS_TMP/dom.html
browser --dump-dom "$URL" >"$DOM"
echo "$api" > "$CHAOS_TMP/api.json"
node -e '
  const fs = require("fs"), dom = fs.readFileSync(process.argv[1], "utf8");
  const api = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const count = re => (dom.match(re) || []).length;
  const fails = [];
  const nodes = count(/<tr class="node"/g);
  if (nodes !== 3) fails.push("node rows " + nodes);
  for (const n of api.nodes) if (!dom.includes(n.id)) fails.push("node " + n.id + " not listed");
  if (count(/<td class="yes">leader<\/td>/g) !== 1) fails.push("leader marks " + count(/<td class="yes">leader<\/td>/g));
  for (const c of api.caches) {
    const i = dom.indexOf("data-cache=\"" + c.name + "\"");
    if (i < 0) { fails.push("no heat map for " + c.name); continue; }
    const j = dom.indexOf("data-cache=", i + 1), part = dom.slice(i, j < 0 ? undefined : j);
    const cells = (part.match(/class="cell /g) || []).length;
    if (cells !== c.partitions * 3) fails.push(c.name + ": " + cells + " cells, want " + c.partitions * 3);
    const prim = (part.match(/class="cell cP"/g) || []).length;
    if (prim !== c.partitions) fails.push(c.name + ": " + prim + " primary cells");
    const back = (part.match(/class="cell cB"/g) || []).length;
    if (back !== c.partitions * c.backups) fails.push(c.name + ": " + back + " backup cells");
  }
  for (const id of ["ops-chart", "p99-chart"]) {
    const i = dom.indexOf("id=\"" + id + "\""), seg = dom.slice(i, dom.indexOf("</svg>", i));
    const lines = (seg.match(/<polyline points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+/g) || []).length;
    if (i < 0 || lines < 2) fails.push(id + ": " + lines + " lines");
    if (!/data-op="CACHE_PUT"/.test(seg)) fails.push(id + ": no CACHE_PUT line");
  }
  if (!/no rebalance in progress \(0 of 0\)/.test(dom)) fails.push("rebalance panel");
  const upd = +((dom.match(/data-updates="(\d+)"/) || [])[1] || 0);
  if (upd < 2) fails.push("refreshed " + upd + " times");
  const err = (dom.match(/id="error">([^<]*)</) || [])[1];
  if (err === undefined || err !== "") fails.push("error shown: " + err);
  if (fails.length) { console.log(fails.join("; ")); process.exit(1); }
' "$DOM" "$CHAOS_TMP/api.json" && ok "rendered DOM: 3 nodes, one leader, a cell per partition per node, charts drawn, refreshed" ||
    bad "rendered DOM (saved in $DOM with CHAOS_KEEP=1): $(tail -c 400 "$CHAOS_TMP/chromium.log")"

rm -f "$BUILD/dashboard.png"
browser --window-size=1280,900 --screenshot="$BUILD/dashboard.png" "$URL" >/dev/null
[ -s "$BUILD/dashboard.png" ] && [ "$(head -c 4 "$BUILD/dashboard.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ] &&
    ok "screenshot saved to $BUILD/dashboard.png" || bad "no screenshot"
rm -f "$CHAOS_TMP/load"
wait "$LOAD"

# /api/node: the serving node alone (the others not asked).
echo "$(curl -s --max-time 10 "http://$(node_ip 3):8080/api/node")" | node -e '
  const j = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const me = j.nodes.filter(n => n.self);
  process.exit(j.nodes.length === 3 && me.length === 1 && me[0].answered &&
               me[0].thin_addr === process.argv[1] &&
               j.nodes.filter(n => !n.self).every(n => !n.answered) ? 0 : 1);' "$(node_addr 3)" &&
    ok "/api/node answers for the serving node only" || bad "/api/node"

# A single node (no cluster): one column.
node_start 4 || finish
cli 4 create solo >/dev/null && cli 4 put solo int:1 string:x >/dev/null || bad "single node put"
browser --dump-dom "http://$(node_ip 4):8080/" >"$DOM"
node -e '
  const dom = require("fs").readFileSync(process.argv[1], "utf8"), fails = [];
  const rows = (dom.match(/<tr class="node"/g) || []).length;
  if (rows !== 1) fails.push(rows + " node rows");
  if (!/single node/.test(dom)) fails.push("no single-node summary");
  const cells = (dom.match(/class="cell cP"/g) || []).length;
  if (cells !== 1024) fails.push(cells + " primary cells");
  if (fails.length) { console.log(fails.join("; ")); process.exit(1); }' "$DOM" &&
    ok "single node: one row, one column of 1024 primary cells" || bad "single-node page"
finish
