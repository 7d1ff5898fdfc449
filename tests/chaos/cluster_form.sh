#!/bin/sh
# cluster_form.sh - real emberd processes forming one cluster on loopback:
# 3 then 5 nodes agree on one topology; a node killed with -9 leaves it
# within the failure detection timeout; a node joins while the others run;
# a node of another cluster name or with a wrong secret is refused; two
# nodes that were not told to bootstrap never make a cluster of their own;
# a clean stop leaves the topology at once.
cd "$(dirname "$0")/../.."
BUILD=${EMBER_BUILD:-build}
. tests/chaos/lib.sh
chaos_init

# members_all N I...: every listed node sees N members including itself.
members_all() {
    n=$1; shift
    for i in "$@"; do
        wait_metric "$i" ember_cluster_members "$n" && wait_metric "$i" ember_cluster_joined 1 ||
            { echo "node $i: members $(metric "$i" ember_cluster_members)," \
                   "joined $(metric "$i" ember_cluster_joined)"; return 1; }
    done
}

# same_version I...: every listed node reports the same topology version.
same_version() {
    v=""
    for i in "$@"; do
        w="$(metric "$i" ember_cluster_topology_major).$(metric "$i" ember_cluster_topology_minor)"
        [ -z "$v" ] && v=$w
        [ "$v" = "$w" ] || { echo "node $i at $w, others at $v"; return 1; }
    done
}

node_start 1 $(cluster_flags 1) || finish
node_start 2 $(cluster_flags 2 1) || finish
node_start 3 $(cluster_flags 3 1) || finish
members_all 3 1 2 3 && ok "3 nodes form one topology" || bad "3 nodes did not form"
same_version 1 2 3 && ok "3 nodes agree on the topology version" || bad "versions differ"
[ "$(metric 1 ember_cluster_leader)$(metric 2 ember_cluster_leader)$(metric 3 ember_cluster_leader)" = 100 ] &&
    ok "the bootstrap node leads" || bad "leader flags: $(metric 1 ember_cluster_leader)$(metric 2 ember_cluster_leader)$(metric 3 ember_cluster_leader)"

node_start 4 $(cluster_flags 4 2) || finish
node_start 5 $(cluster_flags 5 3) || finish
members_all 5 1 2 3 4 5 && ok "5 nodes form one topology (joined through any member)" ||
    bad "5 nodes did not form"
same_version 1 2 3 4 5 && ok "5 nodes agree on the topology version" || bad "versions differ"

node_kill 5
members_all 4 1 2 3 4 && ok "a node killed with -9 leaves the topology" ||
    bad "the killed node was not failed"

node_start 6 --cluster-name other $(cluster_flags 6 1) || finish
node_start 7 --cluster-secret wrong $(cluster_flags 7 1) || finish
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ]; do
    [ "$(metric 6 ember_cluster_links_refused)" -ge 1 ] 2>/dev/null &&
        [ "$(metric 7 ember_cluster_links_refused)" -ge 1 ] 2>/dev/null && break
    sleep 0.1; t=$((t + 1))
done
[ "$(metric 6 ember_cluster_links_refused)" -ge 1 ] 2>/dev/null &&
    [ "$(metric 6 ember_cluster_joined)" = 0 ] && ok "a node of another cluster is refused" ||
    bad "cluster name check: refused $(metric 6 ember_cluster_links_refused), joined $(metric 6 ember_cluster_joined)"
[ "$(metric 7 ember_cluster_links_refused)" -ge 1 ] 2>/dev/null &&
    [ "$(metric 7 ember_cluster_joined)" = 0 ] && ok "a node with the wrong secret is refused" ||
    bad "secret check: refused $(metric 7 ember_cluster_links_refused), joined $(metric 7 ember_cluster_joined)"
members_all 4 1 2 3 4 && ok "refused nodes leave the topology as it was" || bad "topology changed"
node_kill 6
node_kill 7

# Two nodes pointing at each other, neither told to bootstrap: linked, but
# no cluster (two nodes can never each create one).
node_start 8 --seeds "$(node_ip 9):47100" || finish
node_start 9 --seeds "$(node_ip 8):47100" || finish
wait_metric 8 ember_cluster_links 1 && wait_metric 9 ember_cluster_links 1 &&
    [ "$(metric 8 ember_cluster_joined)$(metric 9 ember_cluster_joined)" = 00 ] &&
    ok "two nodes without bootstrap link but form no cluster" ||
    bad "8/9: links $(metric 8 ember_cluster_links)/$(metric 9 ember_cluster_links) joined $(metric 8 ember_cluster_joined)$(metric 9 ember_cluster_joined)"
node_kill 8
node_kill 9

node_term 4 && ok "a member exits 0 on SIGTERM" || bad "exit status $? on SIGTERM"
members_all 3 1 2 3 && ok "a clean stop leaves the topology" || bad "the stopped node is still a member"

# Members that left also leave the metadata group's configuration: with two
# of three stopped cleanly the last one still has a majority and commits.
node_term 2; node_term 3
members_all 1 1 && "$BUILD/ember-cli" -h "$(node_ip 1)" -p "$CHAOS_PORT" create after-leaves >/dev/null &&
    ok "after two clean leaves the last node still commits (they left the Raft configuration)" ||
    bad "the last node cannot commit after two clean leaves"
node_term 1

# Joiners that are each other's seeds and link before the bootstrap node is
# up still reach it once it is.
SEEDS3="$(node_ip 11):47100,$(node_ip 12):47100,$(node_ip 13):47100"
node_start 12 --seeds "$SEEDS3" --failure-detection-timeout 3000 || finish
node_start 13 --seeds "$SEEDS3" --failure-detection-timeout 3000 || finish
wait_metric 12 ember_cluster_links 1
node_start 11 --bootstrap true --seeds "$SEEDS3" --failure-detection-timeout 3000 \
    --baseline-auto-adjust true --baseline-auto-adjust-timeout 300 || finish
members_all 3 11 12 13 && ok "joiners linked to each other first still join the bootstrap node" ||
    bad "joiners that linked first never joined"

# baseline_auto_adjust on the coordinator (node 11): a baseline that leaves
# a member out is set to all the members once they stayed the same 300 ms.
in_baseline() {
    "$BUILD/ember-cli" --json -h "$(node_ip 11)" -p "$CHAOS_PORT" cluster baseline |
        grep -o '"baseline":true,"online":true' | wc -l
}
"$BUILD/ember-cli" -h "$(node_ip 11)" -p "$CHAOS_PORT" cluster baseline set \
    "$(node_ip 11):47100,$(node_ip 12):47100" >/dev/null || bad "baseline set failed"
t=0
while [ $t -lt $((CHAOS_WAIT * 10)) ] && [ "$(in_baseline)" != 3 ]; do sleep 0.1; t=$((t + 1)); done
[ "$(in_baseline)" = 3 ] && log_wait 11 "baseline auto-adjusted to the 3 members" &&
    ok "baseline auto-adjust: the coordinator added the member left out" ||
    bad "baseline auto-adjust: $(in_baseline) members in the baseline"

# Two nodes started at the same instant, each with an empty directory (the
# bootstrap rule names node 21): one cluster of two, never two of one.
node_spawn 21 --bootstrap true --seeds "$(node_ip 22):47100" --failure-detection-timeout 3000
node_spawn 22 --seeds "$(node_ip 21):47100" --failure-detection-timeout 3000
node_listening 21 && node_listening 22 || finish
members_all 2 21 22 && [ "$(metric 21 ember_cluster_leader)$(metric 22 ember_cluster_leader)" != 11 ] &&
    ok "two nodes started at once form one cluster of two" ||
    bad "21/22 started at once: members $(metric 21 ember_cluster_members)/$(metric 22 ember_cluster_members)"
finish
