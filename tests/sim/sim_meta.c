/* sim_meta.c - ember-sim: a deterministic simulation of the cluster's
 * consensus-backed topology (issue 16).
 *
 * Three to five servers, each running the metadata group's own code - the
 * state machine (cl_meta_fsm: members, topology versions, caches, binary
 * types, baseline, owners) and its libraft adapter (cl_meta_raft) - under
 * libraft's in-memory fixture: simulated network, disks and clock, no
 * threads, no sockets.  One seed drives everything: the entries proposed
 * (joins, leaves, failures, cache starts and stops, configuration changes,
 * types, baselines, states, exchanges, owner tables) and where, and the
 * faults (servers killed and revived, links cut one way or both, message
 * and disk latencies, leaders deposed, election timeouts).  Then every
 * fault heals and the group must converge.
 *
 * What is checked, after every fixture step and at the end:
 *   - never two leaders in one term;
 *   - every server applies log indices in increasing order, and its
 *     topology version never goes back;
 *   - every server that reaches index i holds the same state there (a
 *     digest of every field, computed here and not by the code under test,
 *     so a state lost in a snapshot is seen) - so an entry acknowledged to
 *     its proposer is the entry every server applies at its index;
 *   - once healed, a leader is elected and every server applies everything
 *     acknowledged (liveness, bounded in simulated time).
 *
 * The same seed runs the same way every time: `ember-sim --seed N -v`
 * prints a failing seed's trace, and the run's trace digest (printed per
 * seed with -v) is the proof.  make test runs a few hundred seeds
 * (tests/scripts/sim.sh); make chaos many more.
 *
 *   ember-sim [--seeds A:B] [--seed N] [--steps K] [-v]
 *
 * The planted build (build/plant/ember-sim-no_io_guard: cl_meta_raft.c
 * without the guard that holds libraft 0.15 to Raft's rules) must fail:
 * tests/scripts/sim.sh checks that the checker catches it.
 */
#include <inttypes.h>
#include <raft.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <raft/fixture.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_meta_raft.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "sim_lib.h"

#define SIM_MAX_SERVERS 5
#define SIM_MAX_INDEX 8192          /* log indices a run may reach */
#define SIM_MAX_PROPS 1024

typedef struct prop {
    struct raft_apply req;
    int      done, status;
    uint64_t index;                 /* where it was applied (status 0) */
} prop;

typedef struct server {
    uint64_t last_index;            /* last applied, as the subscription saw it */
    uint64_t major;
    uint32_t minor;
    int      restored;
} server;

typedef struct sim {
    struct raft_fixture f;          /* first: the hook casts back */
    cl_meta_node node[SIM_MAX_SERVERS];
    server   sv[SIM_MAX_SERVERS];
    unsigned n;
    sim_base b;
    prop     props[SIM_MAX_PROPS];
    unsigned nprops;
    uint8_t  cut[SIM_MAX_SERVERS][SIM_MAX_SERVERS];    /* link i -> j disconnected */
    uint32_t digest_at[SIM_MAX_INDEX];  /* state digest after index i (0: none yet) */
    uint32_t entry_at[SIM_MAX_INDEX];   /* the entry applied at index i (0: none yet) */
    int (*apply[SIM_MAX_SERVERS])(struct raft_fsm *fsm, const struct raft_buffer *buf,
                                  void **result);
} sim;

static sim S;

static uint64_t rnd(sim *s) { return sim_rnd(&s->b); }

static unsigned pick(sim *s, unsigned n) { return (unsigned)(rnd(s) % n); }

#define violation(s, ...) sim_violation(&(s)->b, __VA_ARGS__)
#define note(s, ...) sim_note(&(s)->b, (long long)raft_fixture_time(&(s)->f), __VA_ARGS__)

/* ---- the state's digest: every field, independent of the snapshot code ---- */

static uint32_t mix(uint32_t h, const void *p, size_t n) { return em_crc32c(h, p, n); }
static uint32_t mix64(uint32_t h, uint64_t v) { return mix(h, &v, sizeof v); }

static uint32_t blobs(uint32_t h, const cl_meta_blob *b, uint32_t n)
{
    h = mix64(h, n);
    for (uint32_t i = 0; i < n; i++) {
        h = mix64(h, (uint64_t)(uint32_t)b[i].id);
        h = mix(h, b[i].p, b[i].len);
        h = mix64(h, b[i].len);
    }
    return h;
}

static uint32_t digest(const cl_meta_fsm *f)
{
    uint32_t h = mix64(0, f->major);
    h = mix64(h, f->minor);
    h = mix64(h, f->state);
    h = mix64(h, f->last_exch);
    h = mix64(h, f->n_members);
    for (uint32_t i = 0; i < f->n_members; i++) {
        const cl_meta_member *m = &f->members[i];
        h = mix64(h, m->id.msb);
        h = mix64(h, m->id.lsb);
        h = mix64(h, m->raft_id);
        h = mix64(h, m->order);
        h = mix64(h, m->join_major);
        h = mix64(h, m->state);
        cl_meta_bytes cid = cl_meta_member_cid(m);
        h = mix(h, cid.p, cid.len);
    }
    h = mix64(h, f->n_voters);
    h = mix(h, f->voters, f->n_voters * sizeof f->voters[0]);
    h = mix64(h, f->n_baseline);
    h = mix(h, f->baseline.p, f->baseline.len);
    h = blobs(h, f->caches, f->n_caches);
    h = blobs(h, f->types, f->n_types);
    h = blobs(h, f->owners, f->n_owners);
    return h | 1;                   /* 0 means "not seen yet" */
}

/* ---- what every server applies ----------------------------------------- */

static void record(sim *s, unsigned i, uint64_t index)
{
    if (index >= SIM_MAX_INDEX) {
        violation(s, "the log passed %d entries (raise SIM_MAX_INDEX)", SIM_MAX_INDEX);
        return;
    }
    uint32_t d = digest(&s->node[i].state);
    if (!s->digest_at[index])
        s->digest_at[index] = d;
    else if (s->digest_at[index] != d)
        violation(s, "server %u holds another state than its peers after index %" PRIu64
                  " (%08x, others %08x)", i, index, d, s->digest_at[index]);
}

/* checked_apply: the entry itself, by content, must be the same at one
 * index on every server (two entries may leave the same state - refused
 * ones change nothing - so the state's digest alone could miss it). */
static int checked_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    sim *s = &S;
    unsigned i = 0;
    while (i < s->n && &s->node[i].fsm != fsm)
        i++;
    uint64_t index = raft_last_applied(s->node[i].raft) + 1;
    uint32_t h = em_crc32c(0, buf->base, buf->len) | 1;
    if (index < SIM_MAX_INDEX) {
        if (!s->entry_at[index])
            s->entry_at[index] = h;
        else if (s->entry_at[index] != h)
            violation(s, "server %u applied another entry than its peers at index %" PRIu64, i,
                      index);
    }
    return s->apply[i](fsm, buf, result);
}

typedef struct sub_arg { sim *s; unsigned i; } sub_arg;
static sub_arg SUBS[SIM_MAX_SERVERS];

static void on_apply(void *arg, const cl_meta_entry *e, const cl_meta_effect *eff)
{
    sub_arg *a = arg;
    sim *s = a->s;
    server *v = &s->sv[a->i];
    if (eff->index <= v->last_index && e)
        violation(s, "server %u applied index %" PRIu64 " after %" PRIu64, a->i, eff->index,
                  v->last_index);
    if (eff->major < v->major || (eff->major == v->major && eff->minor < v->minor))
        violation(s, "server %u's topology went back: %" PRIu64 ".%u -> %" PRIu64 ".%u", a->i,
                  v->major, v->minor, eff->major, eff->minor);
    v->last_index = eff->index;
    v->major = eff->major;
    v->minor = eff->minor;
    if (!e)
        v->restored++;
    record(s, a->i, eff->index);
}

/* After every step: never two leaders in one term. */
static void hook(struct raft_fixture *f, struct raft_fixture_event *ev)
{
    (void)ev;
    sim *s = (sim *)f;
    for (unsigned i = 0; i < f->n; i++) {
        struct raft *a = raft_fixture_get(f, i);
        if (raft_state(a) != RAFT_LEADER)
            continue;
        for (unsigned j = i + 1; j < f->n; j++) {
            struct raft *b = raft_fixture_get(f, j);
            if (raft_state(b) == RAFT_LEADER && a->current_term == b->current_term)
                violation(s, "servers %u and %u both lead term %llu", i, j,
                          (unsigned long long)a->current_term);
        }
    }
}

/* ---- proposals ------------------------------------------------------------- */

static void prop_cb(struct raft_apply *req, int status, void *result)
{
    prop *p = req->data;
    p->done = 1;
    p->status = status;
    if (status == 0)
        p->index = ((const cl_meta_effect *)result)->index;
}

static cl_meta_uuid member_id(unsigned k) { return (cl_meta_uuid){ 0xe0000 + k, k }; }

/* random_entry encodes one entry the group might see. */
static int random_entry(sim *s, em_buf *b, const char **what)
{
    unsigned k = 1 + pick(s, 12);
    char str[32];
    switch (pick(s, 11)) {
    case 0: case 1: {
        char addr[16];
        snprintf(str, sizeof str, "node-%u", k);
        snprintf(addr, sizeof addr, "127.0.0.%u", k);
        cl_meta_node_info n;
        memset(&n, 0, sizeof n);
        n.id = member_id(k);
        n.raft_id = 100 + k;
        n.cid = (cl_meta_bytes){ (const uint8_t *)str, (uint32_t)strlen(str) };
        n.raft_addr = (cl_meta_bytes){ (const uint8_t *)addr, (uint32_t)strlen(addr) };
        *what = "join";
        return cl_meta_enc_join(b, &n);
    }
    case 2:
        *what = "leave";
        return cl_meta_enc_leave(b, member_id(k));
    case 3:
        *what = "fail";
        return cl_meta_enc_fail(b, member_id(k));
    case 4:
        snprintf(str, sizeof str, "cache-%u-%u", k, pick(s, 3));
        *what = "cache start";
        return cl_meta_enc_cache_start(b, (int32_t)k, str, strlen(str));
    case 5:
        *what = "cache stop";
        return cl_meta_enc_cache_stop(b, (int32_t)k);
    case 6:
        snprintf(str, sizeof str, "type-%u-%u", k, pick(s, 4));
        *what = "type";
        return cl_meta_enc_type_put(b, (int32_t)k, str, strlen(str));
    case 7: {
        char c1[16], c2[16];
        snprintf(c1, sizeof c1, "node-%u", k);
        snprintf(c2, sizeof c2, "node-%u", 1 + pick(s, 12));
        cl_meta_bytes ids[2] = { { (const uint8_t *)c1, (uint32_t)strlen(c1) },
                                 { (const uint8_t *)c2, (uint32_t)strlen(c2) } };
        *what = "baseline";
        return cl_meta_enc_baseline(b, ids, 1 + pick(s, 2));
    }
    case 8:
        *what = "state";
        return cl_meta_enc_state(b, (int)pick(s, 3));
    case 9:
        *what = "exchange";
        return cl_meta_enc_exch(b, 1 + pick(s, 50), pick(s, 8), pick(s, 8));
    default: {
        /* an owner table for group k: every partition's owners, some of
         * them members, some moving */
        cl_meta_owners_enc e;
        uint32_t parts = 1 + pick(s, 8);
        int rc = cl_meta_enc_owners_begin(&e, b, 1 + pick(s, 50));
        if (!rc)
            rc = cl_meta_enc_owners_group(&e, (int32_t)k, parts);
        for (uint32_t p = 0; !rc && p < parts; p++) {
            uint64_t own[3] = { 1 + pick(s, 20), 21 + pick(s, 20), 41 + pick(s, 20) };
            uint8_t n = (uint8_t)(1 + pick(s, 3));
            rc = cl_meta_enc_owners_part(&e, p, 0, own, n, (uint8_t)pick(s, n));
        }
        if (!rc)
            rc = cl_meta_enc_owners_end(&e);
        *what = "owners";
        return rc;
    }
    }
}

static void propose(sim *s, unsigned i, em_buf *b, const char *what)
{
    if (s->nprops == SIM_MAX_PROPS)
        return;
    prop *p = &s->props[s->nprops++];
    memset(p, 0, sizeof *p);
    struct raft_buffer rb = cl_meta_raft_buf(b->p, b->len);
    p->req.data = p;
    int rv = rb.base ? raft_apply(raft_fixture_get(&s->f, i), &p->req, &rb, 1, prop_cb)
                     : RAFT_NOMEM;
    if (rv) {
        if (rb.base)
            raft_free(rb.base);
        p->done = 1;
        p->status = rv;
    }
    note(s, "propose %s on %u: %s", what, i, rv ? raft_strerror(rv) : "queued");
}

/* ---- one seed -------------------------------------------------------------- */

static int setup(sim *s, uint64_t seed)
{
    memset(s, 0, offsetof(sim, digest_at));
    memset(s->digest_at, 0, sizeof s->digest_at);
    memset(s->entry_at, 0, sizeof s->entry_at);
    sim_seed(&s->b, seed, 0);
    s->n = 3 + pick(s, 3);
    unsigned order[SIM_MAX_SERVERS];
    for (unsigned i = 0; i < s->n; i++)
        order[i] = i;
    for (unsigned i = s->n - 1; i > 0; i--) {
        unsigned k = pick(s, i + 1), t = order[i];
        order[i] = order[k];
        order[k] = t;
    }
    if (raft_fixture_initialize(&s->f) != 0)
        return -1;
    for (unsigned i = 0; i < s->n; i++) {
        if (cl_meta_node_init(&s->node[i]) != 0)
            return -1;
        SUBS[i] = (sub_arg){ s, i };
        cl_meta_node_subscribe(&s->node[i], on_apply, &SUBS[i]);
        s->apply[i] = s->node[i].fsm.apply;
        s->node[i].fsm.apply = checked_apply;
        if (raft_fixture_grow(&s->f, &s->node[i].fsm) != 0)
            return -1;
        struct raft *r = raft_fixture_get(&s->f, i);
        cl_meta_node_bind(&s->node[i], r);
        raft_set_pre_vote(r, true);
        /* Snapshots as emberd takes them (libraft's defaults, 1024 entries
         * and 2048 kept): none within a run.  Smaller ones are not
         * simulated: with fewer than about 16 entries kept, libraft 0.15
         * itself fails (a leader probing below a follower's snapshot trips
         * an assertion in replicationAppend, or corrupts the log where
         * assertions are compiled out). */
        /* election timeouts the seed orders: apart enough that one server
         * times out first (the fixture does not re-randomise them) */
        raft_fixture_set_randomized_election_timeout(&s->f, i, 1000 + order[i] * 150 +
                                                               pick(s, 50));
    }
    struct raft_configuration conf;
    if (raft_fixture_configuration(&s->f, s->n, &conf) != 0 ||
        raft_fixture_bootstrap(&s->f, &conf) != 0)
        return -1;
    raft_configuration_close(&conf);
    if (raft_fixture_start(&s->f) != 0)
        return -1;
    raft_fixture_hook(&s->f, hook);
    note(s, "%u servers", s->n);
    return 0;
}

static void teardown(sim *s)
{
    unsigned n = s->f.n;
    raft_fixture_close(&s->f);
    for (unsigned i = 0; i < n; i++)
        cl_meta_node_free(&s->node[i]);
}

static unsigned alive_count(sim *s)
{
    unsigned a = 0;
    for (unsigned i = 0; i < s->n; i++)
        a += raft_fixture_alive(&s->f, i);
    return a;
}

/* The fixture's rules: a link is dropped (saturated) or restored only while
 * connected, and a server is killed (every link of it saturated) or
 * revived only while every link of it is connected. */
static int links_up(sim *s, unsigned i)
{
    for (unsigned j = 0; j < s->n; j++)
        if (j != i && (s->cut[i][j] || s->cut[j][i]))
            return 0;
    return 1;
}

static int both_alive(sim *s, unsigned i, unsigned j)
{
    return i != j && raft_fixture_alive(&s->f, i) && raft_fixture_alive(&s->f, j);
}

static void link_set(sim *s, unsigned i, unsigned j, int up)
{
    if (up)
        raft_fixture_reconnect(&s->f, i, j);
    else
        raft_fixture_disconnect(&s->f, i, j);
    s->cut[i][j] = (uint8_t)!up;
}

/* fault: one random fault (or a proposal), as the seed says. */
static void fault(sim *s, em_buf *b)
{
    unsigned i = pick(s, s->n), j = pick(s, s->n);
    unsigned l = raft_fixture_leader_index(&s->f);
    switch (pick(s, 20)) {
    case 0: case 1:
        if (raft_fixture_alive(&s->f, i) && alive_count(s) > 1 && links_up(s, i)) {
            raft_fixture_kill(&s->f, i);
            note(s, "kill %u", i);
        }
        break;
    case 2: case 3:
        if (!raft_fixture_alive(&s->f, i)) {
            for (unsigned k = 0; k < s->n; k++)
                if (k != i) {
                    link_set(s, i, k, 1);
                    link_set(s, k, i, 1);
                }
            raft_fixture_revive(&s->f, i);
            note(s, "revive %u", i);
        }
        break;
    case 4:
        if (both_alive(s, i, j)) {
            link_set(s, i, j, 0);
            note(s, "cut %u -> %u", i, j);
        }
        break;
    case 5:
        if (both_alive(s, i, j)) {
            link_set(s, i, j, 0);
            link_set(s, j, i, 0);
            note(s, "cut %u <-> %u", i, j);
        }
        break;
    case 6: case 7:
        if (both_alive(s, i, j)) {
            link_set(s, i, j, 1);
            link_set(s, j, i, 1);
            note(s, "heal %u <-> %u", i, j);
        }
        break;
    case 8:
        if (both_alive(s, i, j) && !s->cut[i][j]) {
            raft_fixture_saturate(&s->f, i, j);
            note(s, "drop %u -> %u", i, j);
        }
        break;
    case 9:
        if (both_alive(s, i, j) && !s->cut[i][j]) {
            raft_fixture_desaturate(&s->f, i, j);
            note(s, "undrop %u -> %u", i, j);
        }
        break;
    case 10: {
        unsigned ms = 1 + pick(s, 150);
        raft_fixture_set_network_latency(&s->f, i, ms);
        note(s, "latency %u: %u ms", i, ms);
        break;
    }
    case 11: {
        unsigned ms = 1 + pick(s, 60);
        raft_fixture_set_disk_latency(&s->f, i, ms);
        note(s, "disk latency %u: %u ms", i, ms);
        break;
    }
    default: {
        /* a proposal, mostly on the leader, sometimes on a follower (it
         * must refuse) or on a server cut off from the rest */
        unsigned on = l < s->n && pick(s, 4) ? l : i;
        if (!raft_fixture_alive(&s->f, on))
            break;
        const char *what = "?";
        em_buf_reset(b);
        if (random_entry(s, b, &what) == 0)
            propose(s, on, b, what);
        break;
    }
    }
}

static bool props_done(struct raft_fixture *f, void *arg)
{
    (void)arg;
    sim *s = (sim *)f;
    for (unsigned i = 0; i < s->nprops; i++)
        if (!s->props[i].done)
            return false;
    return true;
}

static void dump(sim *s)
{
    for (unsigned j = 0; j < s->n; j++) {
        struct raft *r = raft_fixture_get(&s->f, j);
        note(s, "server %u (dropped %llu): %s term %llu last %llu stored %llu commit %llu applied %llu alive %d", j, (unsigned long long)s->node[j].stale_replies,
             raft_state(r) == RAFT_LEADER ? "leader" : raft_state(r) == RAFT_CANDIDATE ? "candidate" : "follower", (unsigned long long)r->current_term,
             (unsigned long long)raft_last_index(r), (unsigned long long)r->last_stored, (unsigned long long)r->commit_index,
             (unsigned long long)raft_last_applied(r), raft_fixture_alive(&s->f, j));
        if (raft_state(r) == RAFT_LEADER)
            for (unsigned k = 0; k < r->configuration.n; k++) {
                struct raft_progress *pr = &r->leader_state.progress[k];
                note(s, "  progress of %u: state %u next %llu match %llu", k, pr->state,
                     (unsigned long long)pr->next_index,
                     (unsigned long long)pr->match_index);
            }
    }
}

/* heal: every server back, every link up, the group converged. */
static void heal(sim *s, em_buf *b)
{
    for (unsigned i = 0; i < s->n; i++)
        for (unsigned j = 0; j < s->n; j++)
            if (i != j)
                link_set(s, i, j, 1);
    for (unsigned i = 0; i < s->n; i++) {
        if (!raft_fixture_alive(&s->f, i))
            raft_fixture_revive(&s->f, i);
        raft_fixture_set_network_latency(&s->f, i, 5);
        raft_fixture_set_disk_latency(&s->f, i, 5);
    }
    for (unsigned i = 0; i < s->n; i++)
        for (unsigned j = 0; j < s->n; j++)
            if (i != j)
                raft_fixture_desaturate(&s->f, i, j);
    note(s, "heal everything");
    /* a leader, then one more entry through it: it commits only once the
     * leader's term has a majority, so everything before it is settled */
    for (int tries = 0; tries < 5; tries++) {
        if (!raft_fixture_step_until_has_leader(&s->f, 60000)) {
            violation(s, "no leader within 60 s of simulated time after healing");
            dump(s);
            return;
        }
        unsigned l = raft_fixture_leader_index(&s->f);
        em_buf_reset(b);
        cl_meta_enc_type_put(b, 999, "settled", 7);
        propose(s, l, b, "final type");
        prop *p = &s->props[s->nprops - 1];
        if (!raft_fixture_step_until(&s->f, props_done, NULL, 60000)) {
            violation(s, "proposals still pending 60 s after healing");
            return;
        }
        if (p->status == 0)
            break;
        if (tries == 4)
            violation(s, "the final entry never committed (%s)", raft_strerror(p->status));
    }
    if (s->b.violations)
        return;
    /* the final entry's index: everything acknowledged is at or before it
     * (a server's own log may run further, with entries of a lost term) */
    uint64_t last = s->props[s->nprops - 1].index;
    for (unsigned i = 0; i < s->n; i++)
        if (!raft_fixture_step_until_applied(&s->f, i, last, 60000)) {
            violation(s, "server %u did not apply index %" PRIu64 " within 60 s after healing",
                      i, last);
            dump(s);
        }
}

static int run_seed(sim *s, uint64_t seed, unsigned steps, int verbose)
{
    s->b.verbose = 0;
    if (setup(s, seed) != 0) {
        fprintf(stderr, "ember-sim: seed %" PRIu64 ": fixture setup failed\n", seed);
        return 2;
    }
    s->b.verbose = verbose;
    em_buf b = EM_BUF_INIT;
    for (unsigned k = 0; k < steps && !s->b.violations; k++) {
        fault(s, &b);
        unsigned n = 1 + pick(s, 30);
        for (unsigned t = 0; t < n; t++)
            raft_fixture_step(&s->f);
    }
    if (!s->b.violations)
        heal(s, &b);
    /* acknowledged means applied at its index on every server */
    unsigned acked = 0;
    for (unsigned i = 0; i < s->nprops && !s->b.violations; i++) {
        prop *p = &s->props[i];
        if (!p->done || p->status)
            continue;
        acked++;
        for (unsigned j = 0; j < s->n; j++)
            if (s->sv[j].last_index < p->index)
                violation(s, "an acknowledged entry (index %" PRIu64 ") never reached server %u",
                          p->index, j);
    }
    unsigned restores = 0;
    for (unsigned i = 0; i < s->n; i++)
        restores += (unsigned)s->sv[i].restored;
    uint64_t guarded = 0;           /* what the io guard changed (cl_meta_raft.c) */
    for (unsigned i = 0; i < s->n; i++)
        guarded += s->node[i].stale_replies + s->node[i].capped_replies +
                   s->node[i].capped_commits + s->node[i].capped_old;
    if (verbose)
        printf("seed %" PRIu64 ": %u servers, %u proposals, %u acknowledged, %u snapshot "
               "installs, %" PRIu64 " messages the io guard changed, trace %016" PRIx64 "\n",
               seed, s->n, s->nprops, acked, restores, guarded, s->b.trace);
    em_buf_free(&b);
    teardown(s);
    return s->b.violations ? 1 : 0;
}

static int run_one(uint64_t seed, unsigned steps, int verbose)
{
    return run_seed(&S, seed, steps, verbose);
}

static sim_base *base(void) { return &S.b; }

static void done(unsigned ran, unsigned steps, unsigned failed)
{
    printf("sim: %u seeds, %u steps each: %u failed\n", ran, steps, failed);
}

int main(int argc, char **argv)
{
    static const sim_def d = { "ember-sim", run_one, base, done };
    return sim_main(argc, argv, &d);
}
