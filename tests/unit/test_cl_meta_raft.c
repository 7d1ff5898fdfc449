/* test_cl_meta_raft.c - the metadata FSM under libraft's in-memory fixture:
 * elections, leader isolation, membership changes (4th and 5th voters, a
 * standby that applies the log, removal), crash and revive with snapshot
 * install.  The FSM, its raft_fsm adapter, the role planner and the change
 * driver are the ones cl_meta.c runs (cl_meta_raft.h).  A fixture hook checks
 * after every step that no two servers lead in one term.
 *
 * Fixture gotchas (reference/cluster.md §2.1): raft_fixture_initialize +
 * raft_fixture_grow, and raft_start every server grown after the start.
 */
#include "test.h"

#include <raft.h>
#include <raft/fixture.h>

#include "cluster/cl_meta_raft.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"

#define FX_MAX RAFT_FIXTURE_MAX_SERVERS

typedef struct prop {
    struct raft_apply req;
    int               done, status;
    cl_meta_effect    eff;
} prop;

typedef struct seen {
    uint64_t index[256];
    uint32_t major[256], minor[256];
    unsigned n;
    unsigned restores;
    int      out_of_order;
} seen;

typedef struct fx {
    struct raft_fixture f;       /* first: the hook casts back */
    cl_meta_node  node[FX_MAX];
    seen          seen[FX_MAX];
    prop          props[128];
    unsigned      n_props;
    unsigned long steps;
    unsigned      two_leaders;
} fx;

static fx X;

static void hook(struct raft_fixture *f, struct raft_fixture_event *ev)
{
    (void)ev;
    fx *x = (fx *)f;
    x->steps++;
    for (unsigned i = 0; i < f->n; i++) {
        struct raft *a = raft_fixture_get(f, i);
        if (raft_state(a) != RAFT_LEADER)
            continue;
        for (unsigned j = i + 1; j < f->n; j++) {
            struct raft *b = raft_fixture_get(f, j);
            if (raft_state(b) == RAFT_LEADER && a->current_term == b->current_term)
                x->two_leaders++;
        }
    }
}

static void sub(void *arg, const cl_meta_entry *e, const cl_meta_effect *eff)
{
    seen *s = arg;
    if (!e) {
        s->restores++;
        return;
    }
    if (s->n && eff->index <= s->index[s->n - 1])
        s->out_of_order++;
    if (s->n < 256) {
        s->index[s->n] = eff->index;
        s->major[s->n] = (uint32_t)eff->major;
        s->minor[s->n] = eff->minor;
        s->n++;
    }
}

/* fx_add_server grows the fixture by one server running a cl_meta_node. */
static void fx_add_server(fx *x, int start)
{
    unsigned i = x->f.n;
    if (cl_meta_node_init(&x->node[i]) != 0)
        test_fail(__FILE__, __LINE__, "node init");
    cl_meta_node_subscribe(&x->node[i], sub, &x->seen[i]);
    if (raft_fixture_grow(&x->f, &x->node[i].fsm) != 0)
        test_fail(__FILE__, __LINE__, "grow");
    struct raft *r = raft_fixture_get(&x->f, i);
    cl_meta_node_bind(&x->node[i], r);
    raft_set_pre_vote(r, true);
    raft_set_snapshot_threshold(r, 8);
    raft_set_snapshot_trailing(r, 2);
    if (start && raft_start(r) != 0)
        test_fail(__FILE__, __LINE__, "start");
}

static void fx_init(fx *x, unsigned n, unsigned voters)
{
    memset(x, 0, sizeof *x);
    if (raft_fixture_initialize(&x->f) != 0)
        test_fail(__FILE__, __LINE__, "fixture");
    for (unsigned i = 0; i < n; i++)
        fx_add_server(x, 0);
    struct raft_configuration conf;
    if (raft_fixture_configuration(&x->f, voters, &conf) != 0 ||
        raft_fixture_bootstrap(&x->f, &conf) != 0)
        test_fail(__FILE__, __LINE__, "bootstrap");
    raft_configuration_close(&conf);
    if (raft_fixture_start(&x->f) != 0)
        test_fail(__FILE__, __LINE__, "start");
    raft_fixture_hook(&x->f, hook);
}

static void fx_close(fx *x)
{
    unsigned n = x->f.n;
    raft_fixture_close(&x->f);
    for (unsigned i = 0; i < n; i++)
        cl_meta_node_free(&x->node[i]);
}

static void prop_cb(struct raft_apply *req, int status, void *result)
{
    prop *p = req->data;
    p->done = 1;
    p->status = status;
    if (status == 0)
        p->eff = *(const cl_meta_effect *)result;
}

/* fx_propose proposes the entry in b on server i; returns the prop (its
 * raft_apply return in ->status when it failed at once) and empties b. */
static prop *fx_propose(fx *x, unsigned i, em_buf *b)
{
    prop *p = &x->props[x->n_props++];
    struct raft_buffer rb = cl_meta_raft_buf(b->p, b->len);
    p->req.data = p;
    int rv = raft_apply(raft_fixture_get(&x->f, i), &p->req, &rb, 1, prop_cb);
    if (rv) {
        raft_free(rb.base);
        p->done = 1;
        p->status = rv;
    }
    em_buf_reset(b);
    return p;
}

static unsigned fx_leader(fx *x)
{
    return raft_fixture_leader_index(&x->f);
}

/* Stop conditions for raft_fixture_step_until. */
typedef struct want_leader { unsigned not_this; raft_term above; } want_leader;
static bool has_other_leader(struct raft_fixture *f, void *arg)
{
    want_leader *w = arg;
    for (unsigned i = 0; i < f->n; i++) {
        struct raft *r = raft_fixture_get(f, i);
        if (i != w->not_this && raft_fixture_alive(f, i) &&
            raft_state(r) == RAFT_LEADER && r->current_term > w->above)
            return true;
    }
    return false;
}
static bool props_done(struct raft_fixture *f, void *arg)
{
    (void)arg;
    fx *x = (fx *)f;
    for (unsigned i = 0; i < x->n_props; i++)
        if (!x->props[i].done)
            return false;
    return true;
}
typedef struct chg_wait { cl_meta_change c; int done, status; } chg_wait;
static bool change_done(struct raft_fixture *f, void *arg)
{
    (void)f;
    return ((chg_wait *)arg)->done;
}
static void chg_cb(cl_meta_change *c, int status)
{
    chg_wait *w = c->data;
    w->done = 1;
    w->status = status;
}

/* same_states: every server in mask holds the state of server ref. */
static int same_states(fx *x, unsigned ref, unsigned mask)
{
    em_buf a = EM_BUF_INIT, b = EM_BUF_INIT;
    int eq = 1;
    cl_meta_fsm_snapshot(&x->node[ref].state, &a);
    for (unsigned i = 0; i < x->f.n; i++) {
        if (!(mask & (1u << i)) || i == ref)
            continue;
        em_buf_reset(&b);
        cl_meta_fsm_snapshot(&x->node[i].state, &b);
        if (a.len != b.len || memcmp(a.p, b.p, a.len) != 0)
            eq = 0;
    }
    em_buf_free(&a);
    em_buf_free(&b);
    return eq;
}

static void count_roles(struct raft *r, unsigned *v, unsigned *s, unsigned *sp)
{
    *v = *s = *sp = 0;
    for (unsigned i = 0; i < r->configuration.n; i++) {
        int role = r->configuration.servers[i].role;
        if (role == RAFT_VOTER) (*v)++;
        else if (role == RAFT_STANDBY) (*s)++;
        else (*sp)++;
    }
}

static void join_entry(em_buf *b, int i)
{
    char cid[16], addr[16];
    snprintf(cid, sizeof cid, "node-%d", i);
    snprintf(addr, sizeof addr, "%d", i);
    cl_meta_node_info n;
    memset(&n, 0, sizeof n);
    n.id = (cl_meta_uuid){ 0xaa00u + (uint64_t)i, (uint64_t)i };
    n.raft_id = (uint64_t)i;
    n.cid = (cl_meta_bytes){ (const uint8_t *)cid, (uint32_t)strlen(cid) };
    n.raft_addr = (cl_meta_bytes){ (const uint8_t *)addr, (uint32_t)strlen(addr) };
    if (cl_meta_enc_join(b, &n) != 0)
        test_fail(__FILE__, __LINE__, "enc join");
}

TEST(cl_meta_raft_election_and_apply)
{
    fx *x = &X;
    fx_init(x, 3, 3);
    REQUIRE(raft_fixture_step_until_has_leader(&x->f, 10000));
    unsigned l = fx_leader(x);
    REQUIRE(l < 3);
    em_buf b = EM_BUF_INIT;
    for (int i = 1; i <= 3; i++) {
        join_entry(&b, i);
        fx_propose(x, l, &b);
    }
    cl_meta_enc_cache_start(&b, 42, "cfg", 3);
    fx_propose(x, l, &b);
    static const uint8_t junk[3] = { 9, 9, 9 };
    em_buf_append(&b, junk, sizeof junk);
    prop *bad = fx_propose(x, l, &b);
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    for (unsigned i = 0; i < 4; i++) {
        CHECK_EQ(x->props[i].status, 0);
        CHECK_EQ(x->props[i].eff.status, 0);
    }
    /* Malformed: committed, refused by the FSM alike everywhere. */
    CHECK_EQ(bad->status, 0);
    CHECK(bad->eff.status < 0);
    CHECK_EQ(bad->eff.type, 0);
    raft_index last = raft_last_index(raft_fixture_get(&x->f, l));
    REQUIRE(raft_fixture_step_until_applied(&x->f, 3, last, 10000));
    for (unsigned i = 0; i < 3; i++) {
        const cl_meta_fsm *s = &x->node[i].state;
        CHECK_EQ(s->major, 3);
        CHECK_EQ(s->minor, 1);
        CHECK_EQ(s->n_members, 3);
        /* Order = the join's log index, the same on every replica. */
        CHECK_EQ(s->members[0].order, x->props[0].eff.index);
        CHECK_EQ(s->members[2].order, x->props[2].eff.index);
        CHECK_EQ(x->seen[i].n, 5);
        CHECK_EQ(x->seen[i].out_of_order, 0);
        CHECK_EQ(x->seen[i].major[3], 3);
        CHECK_EQ(x->seen[i].minor[3], 1);
    }
    CHECK(same_states(x, 0, 0x7));
    CHECK(x->steps > 0);
    CHECK_EQ(x->two_leaders, 0);
    em_buf_free(&b);
    fx_close(x);
}

TEST(cl_meta_raft_leader_isolation)
{
    fx *x = &X;
    fx_init(x, 3, 3);
    REQUIRE(raft_fixture_step_until_has_leader(&x->f, 10000));
    unsigned l = fx_leader(x);
    em_buf b = EM_BUF_INIT;
    join_entry(&b, 1);
    fx_propose(x, l, &b);
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    raft_term old_term = raft_fixture_get(&x->f, l)->current_term;
    for (unsigned j = 0; j < 3; j++) {
        if (j == l)
            continue;
        raft_fixture_disconnect(&x->f, l, j);
        raft_fixture_disconnect(&x->f, j, l);
    }
    /* The isolated leader still accepts an entry... */
    cl_meta_enc_cache_start(&b, 777, "lost", 4);
    prop *lost = fx_propose(x, l, &b);
    CHECK_EQ(lost->status, 0);
    CHECK(!lost->done);
    /* ...the other two elect a new leader in a higher term... */
    want_leader w = { l, old_term };
    REQUIRE(raft_fixture_step_until(&x->f, has_other_leader, &w, 20000));
    unsigned nl = 3;
    for (unsigned i = 0; i < 3; i++)
        if (i != l && raft_state(raft_fixture_get(&x->f, i)) == RAFT_LEADER)
            nl = i;
    REQUIRE(nl < 3);
    /* ...and the old one steps down without a majority: the entry fails. */
    REQUIRE(raft_fixture_step_until_state_is(&x->f, l, RAFT_FOLLOWER, 20000));
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    CHECK_EQ(lost->status, RAFT_LEADERSHIPLOST);
    CHECK_EQ(cl_meta_raft_err(lost->status), EM_LOSTLEADER);
    cl_meta_enc_cache_start(&b, 888, "kept", 4);
    prop *kept = fx_propose(x, nl, &b);
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    CHECK_EQ(kept->status, 0);
    /* Heal: the old leader drops its uncommitted entry and catches up. */
    for (unsigned j = 0; j < 3; j++) {
        if (j == l)
            continue;
        raft_fixture_reconnect(&x->f, l, j);
        raft_fixture_reconnect(&x->f, j, l);
    }
    raft_index last = raft_last_index(raft_fixture_get(&x->f, nl));
    REQUIRE(raft_fixture_step_until_applied(&x->f, 3, last, 20000));
    raft_fixture_step_until_elapsed(&x->f, 2000);
    for (unsigned i = 0; i < 3; i++) {
        CHECK(cl_meta_fsm_cache(&x->node[i].state, 777) == NULL);
        CHECK(cl_meta_fsm_cache(&x->node[i].state, 888) != NULL);
    }
    CHECK(same_states(x, nl, 0x7));
    CHECK_EQ(x->two_leaders, 0);
    em_buf_free(&b);
    fx_close(x);
}

/* fx_change runs one membership change on the leader to its end. */
static int fx_change(fx *x, int kind, raft_id id)
{
    static chg_wait w;
    memset(&w, 0, sizeof w);
    w.c.kind = kind;
    w.c.id = id;
    snprintf(w.c.addr, sizeof w.c.addr, "%llu", (unsigned long long)id);
    w.c.done = chg_cb;
    w.c.data = &w;
    unsigned l = fx_leader(x);
    if (l >= x->f.n)
        return EM_NOTLEADER;
    int rc = cl_meta_change_start(&w.c, raft_fixture_get(&x->f, l));
    if (rc)
        return rc;
    if (!raft_fixture_step_until(&x->f, change_done, &w, 60000))
        return EM_TIMEOUT;
    return w.status;
}

TEST(cl_meta_raft_membership)
{
    fx *x = &X;
    fx_init(x, 3, 3);
    REQUIRE(raft_fixture_step_until_has_leader(&x->f, 10000));
    em_buf b = EM_BUF_INIT;
    for (int i = 1; i <= 3; i++) {
        join_entry(&b, i);
        fx_propose(x, fx_leader(x), &b);
    }
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    unsigned v, s, sp;

    /* A 4th server: a standby (4 voters would be even). */
    fx_add_server(x, 1);
    REQUIRE_OK(fx_change(x, CL_META_CHANGE_ADD, 4));
    count_roles(raft_fixture_get(&x->f, fx_leader(x)), &v, &s, &sp);
    CHECK_EQ(v, 3);
    CHECK_EQ(s, 1);
    CHECK_EQ(sp, 0);
    /* A 5th: now both become voters (5, odd, the cap). */
    fx_add_server(x, 1);
    REQUIRE_OK(fx_change(x, CL_META_CHANGE_ADD, 5));
    count_roles(raft_fixture_get(&x->f, fx_leader(x)), &v, &s, &sp);
    CHECK_EQ(v, 5);
    CHECK_EQ(s, 0);
    /* A 6th stays a standby, yet applies the whole log. */
    fx_add_server(x, 1);
    REQUIRE_OK(fx_change(x, CL_META_CHANGE_ADD, 6));
    count_roles(raft_fixture_get(&x->f, fx_leader(x)), &v, &s, &sp);
    CHECK_EQ(v, 5);
    CHECK_EQ(s, 1);
    struct raft *six = raft_fixture_get(&x->f, 5);
    unsigned l = fx_leader(x);
    for (int i = 4; i <= 6; i++) {
        join_entry(&b, i);
        fx_propose(x, l, &b);
    }
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    raft_index last = raft_last_index(raft_fixture_get(&x->f, l));
    REQUIRE(raft_fixture_step_until_applied(&x->f, 5, last, 20000));
    CHECK_EQ(six->state, RAFT_FOLLOWER);
    CHECK_EQ(x->node[5].state.n_members, 6);
    CHECK_EQ(x->node[5].state.major, 6);
    REQUIRE(raft_fixture_step_until_applied(&x->f, 6, last, 20000));
    CHECK(same_states(x, l, 0x3f));
    /* Remove a voter that is not the leader: the standby is promoted to keep 5. */
    unsigned victim = l == 1 ? 2 : 1;
    REQUIRE_OK(fx_change(x, CL_META_CHANGE_REMOVE, victim + 1));
    count_roles(raft_fixture_get(&x->f, fx_leader(x)), &v, &s, &sp);
    CHECK_EQ(v, 5);
    CHECK_EQ(s, 0);
    /* The leader cannot remove itself (transfer first). */
    CHECK_EQ(fx_change(x, CL_META_CHANGE_REMOVE, fx_leader(x) + 1), EM_INVAL);
    /* A change on a follower is refused. */
    static chg_wait w2;
    w2.c.kind = CL_META_CHANGE_ROLES;
    w2.c.done = chg_cb;
    w2.c.data = &w2;
    unsigned fol = 0;
    while (fol == fx_leader(x) || fol == victim)
        fol++;
    CHECK_EQ(cl_meta_change_start(&w2.c, raft_fixture_get(&x->f, fol)), EM_NOTLEADER);
    /* Nothing left to plan. */
    CHECK_EQ(cl_meta_change_start(&w2.c, raft_fixture_get(&x->f, fx_leader(x))), 1);
    CHECK_EQ(x->two_leaders, 0);
    em_buf_free(&b);
    fx_close(x);
}

TEST(cl_meta_raft_roles_plan)
{
    struct raft_configuration c;
    raft_configuration_init(&c);
    raft_id id;
    int role;
    CHECK_EQ(cl_meta_roles_next(&c, 1, &id, &role), 0);
    raft_configuration_add(&c, 1, "1", RAFT_VOTER);
    CHECK_EQ(cl_meta_roles_next(&c, 1, &id, &role), 0);
    raft_configuration_add(&c, 2, "2", RAFT_SPARE);
    REQUIRE_EQ(cl_meta_roles_next(&c, 1, &id, &role), 1);
    CHECK_EQ(id, 2);
    CHECK_EQ(role, RAFT_STANDBY);
    c.servers[1].role = RAFT_STANDBY;
    CHECK_EQ(cl_meta_roles_next(&c, 1, &id, &role), 0);     /* 2 -> stay at 1 voter */
    raft_configuration_add(&c, 3, "3", RAFT_STANDBY);
    REQUIRE_EQ(cl_meta_roles_next(&c, 1, &id, &role), 1);   /* 3 -> promote oldest */
    CHECK_EQ(id, 2);
    CHECK_EQ(role, RAFT_VOTER);
    c.servers[1].role = RAFT_VOTER;
    c.servers[0].role = RAFT_STANDBY;   /* pretend 1 was demoted: 1 voter of 3 */
    REQUIRE_EQ(cl_meta_roles_next(&c, 2, &id, &role), 1);
    CHECK_EQ(id, 1);
    CHECK_EQ(role, RAFT_VOTER);
    /* Too many voters: demote the newest that is not the leader. */
    c.servers[0].role = RAFT_VOTER;
    c.servers[2].role = RAFT_VOTER;
    raft_configuration_add(&c, 4, "4", RAFT_VOTER);        /* 4 voters: even */
    REQUIRE_EQ(cl_meta_roles_next(&c, 4, &id, &role), 1);
    CHECK_EQ(id, 3);
    CHECK_EQ(role, RAFT_STANDBY);
    raft_configuration_close(&c);
    /* 8 servers: 5 voters at most. */
    raft_configuration_init(&c);
    for (unsigned i = 1; i <= 8; i++)
        raft_configuration_add(&c, i, (char[]){ (char)('0' + i), 0 }, RAFT_VOTER);
    REQUIRE_EQ(cl_meta_roles_next(&c, 1, &id, &role), 1);
    CHECK_EQ(id, 8);
    CHECK_EQ(role, RAFT_STANDBY);
    raft_configuration_close(&c);
}

TEST(cl_meta_raft_crash_and_revive)
{
    fx *x = &X;
    fx_init(x, 3, 3);
    REQUIRE(raft_fixture_step_until_has_leader(&x->f, 10000));
    unsigned l = fx_leader(x);
    unsigned f1 = (l + 1) % 3;
    em_buf b = EM_BUF_INIT;
    raft_fixture_kill(&x->f, f1);
    /* 30 entries while f1 is down: more than the snapshot threshold (8) plus
     * trailing (2), so f1 must be sent a snapshot. */
    for (int i = 0; i < 30; i++) {
        char meta[16];
        snprintf(meta, sizeof meta, "type-%d", i);
        cl_meta_enc_type_put(&b, i, meta, strlen(meta));
        fx_propose(x, l, &b);
    }
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 20000));
    for (unsigned i = 0; i < x->n_props; i++)
        CHECK_EQ(x->props[i].status, 0);
    raft_index last = raft_last_index(raft_fixture_get(&x->f, l));
    raft_fixture_revive(&x->f, f1);
    REQUIRE(raft_fixture_step_until_applied(&x->f, f1, last, 30000));
    CHECK(x->seen[f1].restores >= 1);
    CHECK_EQ(x->node[f1].state.n_types, 30);
    CHECK(same_states(x, l, 0x7));

    /* Now the leader crashes: the others elect, go on, and it catches up. */
    raft_term t = raft_fixture_get(&x->f, l)->current_term;
    raft_fixture_kill(&x->f, l);
    want_leader w = { l, t };
    REQUIRE(raft_fixture_step_until(&x->f, has_other_leader, &w, 20000));
    unsigned nl = 3;
    for (unsigned i = 0; i < 3; i++)
        if (i != l && raft_state(raft_fixture_get(&x->f, i)) == RAFT_LEADER)
            nl = i;
    REQUIRE(nl < 3);
    join_entry(&b, 1);
    prop *p = fx_propose(x, nl, &b);
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 20000));
    CHECK_EQ(p->status, 0);
    raft_fixture_revive(&x->f, l);
    last = raft_last_index(raft_fixture_get(&x->f, nl));
    REQUIRE(raft_fixture_step_until_applied(&x->f, 3, last, 30000));
    CHECK(same_states(x, nl, 0x7));
    CHECK_EQ(x->node[l].state.n_members, 1);
    CHECK_EQ(x->two_leaders, 0);
    em_buf_free(&b);
    fx_close(x);
}

/* fx_any_leader: the server leading in the highest term, stable or not. */
static unsigned fx_any_leader(fx *x)
{
    unsigned best = FX_MAX;
    for (unsigned i = 0; i < x->f.n; i++) {
        struct raft *r = raft_fixture_get(&x->f, i);
        if (raft_state(r) == RAFT_LEADER &&
            (best == FX_MAX || r->current_term > raft_fixture_get(&x->f, best)->current_term))
            best = i;
    }
    return best;
}

TEST(cl_meta_raft_apply_nomem)
{
    /* An apply that runs out of memory leaves the state exactly as before
     * the entry (apply is all-or-nothing) and tells libraft to stop there.
     * libraft 0.15 then either retries the entry later (on the leader, whose
     * append callback ignores the error) or turns the server RAFT_UNAVAILABLE
     * for good (on a follower, whose recv path propagates it): fail-stop,
     * recovered by a restart that replays the log (cl_meta.h).  Either way
     * no replica skips the entry and the majority goes on. */
    fx *x = &X;
    fx_init(x, 3, 3);
    REQUIRE(raft_fixture_step_until_has_leader(&x->f, 10000));
    unsigned l = fx_leader(x);
    em_buf b = EM_BUF_INIT;
    join_entry(&b, 1);
    fx_propose(x, l, &b);
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 10000));
    raft_index first = raft_last_index(raft_fixture_get(&x->f, l));
    REQUIRE(raft_fixture_step_until_applied(&x->f, 3, first, 10000));
    for (int round = 0; round < 2; round++) {
        /* Each join applies with one allocation per replica and the leader
         * applies first: round 0 fails the leader's apply, round 1 the first
         * follower's. */
        join_entry(&b, 2 + round);      /* encoded before the hook is armed */
        want_leader w0 = { FX_MAX, 0 };
        REQUIRE(raft_fixture_step_until(&x->f, has_other_leader, &w0, 20000));
        unsigned lead = fx_any_leader(x);
        REQUIRE(lead < 3);
        uint64_t before = 0, after = 0;
        for (unsigned i = 0; i < 3; i++)
            before += x->node[i].nomem;
        em_mem_fail_after((uint64_t)round + 1, 0);
        prop *p = fx_propose(x, lead, &b);
        raft_fixture_step_until_elapsed(&x->f, 3000);
        em_mem_fail_after(0, 0);
        for (unsigned i = 0; i < 3; i++)
            after += x->node[i].nomem;
        CHECK(after > before);
        if (p->done)
            CHECK(p->status == 0 || p->status == RAFT_LEADERSHIPLOST);
    }
    /* Whoever is still up converges; a stopped replica holds a prefix. */
    want_leader w = { FX_MAX, 0 };
    REQUIRE(raft_fixture_step_until(&x->f, has_other_leader, &w, 20000));
    unsigned nl = fx_any_leader(x);
    REQUIRE(nl < 3);
    join_entry(&b, 9);
    fx_propose(x, nl, &b);
    raft_index last = raft_last_index(raft_fixture_get(&x->f, nl));
    unsigned up = 0;
    for (unsigned i = 0; i < 3; i++) {
        if (raft_state(raft_fixture_get(&x->f, i)) == RAFT_UNAVAILABLE) {
            const cl_meta_fsm *s = &x->node[i].state;
            CHECK(s->n_members >= 1 && s->n_members < 4);
            CHECK_EQ(s->major, s->n_members);
            continue;
        }
        REQUIRE(raft_fixture_step_until_applied(&x->f, i, last, 20000));
        CHECK_EQ(x->node[i].state.n_members, 4);
        up |= 1u << i;
    }
    /* The fixture is deterministic: round 0 was retried by the leader,
     * round 1 stopped one follower. */
    CHECK_EQ(__builtin_popcount(up), 2);
    CHECK(same_states(x, nl, up));
    CHECK_EQ(x->two_leaders, 0);
    em_buf_free(&b);
    fx_close(x);
}

TEST(cl_meta_raft_follower_disk_fault)
{
    /* A follower's disk fails: libraft stops that server (fail-stop, the
     * same as above), the other two keep committing, and what the stopped
     * one applied is a prefix of their log. */
    fx *x = &X;
    fx_init(x, 3, 3);
    REQUIRE(raft_fixture_step_until_has_leader(&x->f, 10000));
    unsigned l = fx_leader(x);
    unsigned f1 = (l + 1) % 3, f2 = (l + 2) % 3;
    em_buf b = EM_BUF_INIT;
    raft_fixture_io_fault(&x->f, f1, 0, 3);
    for (int i = 0; i < 6; i++) {
        cl_meta_enc_type_put(&b, i, "meta", 4);
        fx_propose(x, l, &b);
    }
    REQUIRE(raft_fixture_step_until(&x->f, props_done, NULL, 20000));
    for (unsigned i = 0; i < x->n_props; i++)
        CHECK_EQ(x->props[i].status, 0);
    raft_index last = raft_last_index(raft_fixture_get(&x->f, l));
    REQUIRE(raft_fixture_step_until_applied(&x->f, f2, last, 30000));
    CHECK(same_states(x, l, (1u << l) | (1u << f2)));
    CHECK_EQ(x->node[l].state.n_types, 6);
    CHECK_EQ(raft_state(raft_fixture_get(&x->f, f1)), RAFT_UNAVAILABLE);
    CHECK(x->node[f1].state.n_types <= 6);
    CHECK(x->node[f1].state.last_index <= x->node[l].state.last_index);
    CHECK_EQ(x->two_leaders, 0);
    em_buf_free(&b);
    fx_close(x);
}

static void apply_raw(cl_meta_node *n, struct raft *r, const void *p, size_t len, int *rv,
                      cl_meta_effect *eff)
{
    struct raft_buffer rb = cl_meta_raft_buf(p, len);
    void *result = NULL;
    *rv = n->fsm.apply(&n->fsm, &rb, &result);
    if (*rv == 0)
        *eff = *(const cl_meta_effect *)result;
    r->last_applied++;
    raft_free(rb.base);
}

TEST(cl_meta_raft_padding)
{
    /* raft_uv needs 8-byte multiples: cl_meta_raft_buf pads with zeros and
     * the adapter strips them, so the FSM sees the entry it was given;
     * anything else after an entry is still refused as trailing bytes. */
    cl_meta_node n;
    REQUIRE_OK(cl_meta_node_init(&n));
    struct raft r;
    memset(&r, 0, sizeof r);
    cl_meta_node_bind(&n, &r);
    em_buf b = EM_BUF_INIT;
    cl_meta_effect eff;
    int rv;
    for (size_t blob = 1; blob <= 17; blob++) {
        em_buf_reset(&b);
        REQUIRE_OK(cl_meta_enc_type_put(&b, (int32_t)blob, "0123456789abcdefg", blob));
        struct raft_buffer rb = cl_meta_raft_buf(b.p, b.len);
        CHECK_EQ(rb.len % 8, 0);
        CHECK(rb.len >= b.len && rb.len < b.len + 8);
        raft_free(rb.base);
        apply_raw(&n, &r, b.p, b.len, &rv, &eff);
        CHECK_EQ(rv, 0);
        CHECK_EQ(eff.status, 0);
        CHECK_EQ(eff.index, r.last_applied);
    }
    CHECK_EQ(n.state.n_types, 17);
    /* A non-zero byte in what would be padding: not ours, refused. */
    em_buf_reset(&b);
    REQUIRE_OK(cl_meta_enc_type_put(&b, 99, "abc", 3));   /* 19 bytes */
    uint8_t odd[24];
    memset(odd, 0, sizeof odd);
    memcpy(odd, b.p, b.len);
    odd[23] = 1;
    apply_raw(&n, &r, odd, sizeof odd, &rv, &eff);
    CHECK_EQ(rv, 0);
    CHECK_EQ(eff.status, EM_TRAILING);
    CHECK(cl_meta_fsm_type(&n.state, 99) == NULL);
    em_buf_free(&b);
    cl_meta_node_free(&n);
}
