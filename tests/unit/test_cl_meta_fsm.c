/* test_cl_meta_fsm.c - the metadata state machine alone: apply sequences and
 * their topology versions, idempotence, snapshot round trips, every
 * truncation and bit flip of encoded entries and snapshots, and allocation
 * failures (cl_meta_fsm.h has the entry table this checks). */
#include "test.h"

#include <stdio.h>

#include "cluster/cl_meta_fsm.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

/* A node's strings live here so the info can point at them. */
typedef struct tnode {
    char cid[32], raddr[32], addr0[32];
    cl_meta_node_info info;
} tnode;

static void tnode_make(tnode *t, int i)
{
    snprintf(t->cid, sizeof t->cid, "node-%d", i);
    snprintf(t->raddr, sizeof t->raddr, "127.0.0.%d:47500", i);
    snprintf(t->addr0, sizeof t->addr0, "127.0.0.%d:10800", i);
    memset(&t->info, 0, sizeof t->info);
    t->info.id = (cl_meta_uuid){ 0x1000 + (uint64_t)i, 0x2000 + (uint64_t)i };
    t->info.raft_id = (uint64_t)i;
    t->info.host = 7;
    t->info.cid = (cl_meta_bytes){ (const uint8_t *)t->cid, (uint32_t)strlen(t->cid) };
    t->info.raft_addr = (cl_meta_bytes){ (const uint8_t *)t->raddr, (uint32_t)strlen(t->raddr) };
    t->info.n_addrs = 1;
    t->info.addrs[0] = (cl_meta_bytes){ (const uint8_t *)t->addr0, (uint32_t)strlen(t->addr0) };
}

static cl_meta_bytes B(const char *s) { return (cl_meta_bytes){ (const uint8_t *)s, (uint32_t)strlen(s) }; }

/* apply_buf applies the entry in b at index, then empties b. */
static int apply_buf(cl_meta_fsm *f, uint64_t index, em_buf *b, cl_meta_effect *eff)
{
    int rc = cl_meta_fsm_apply(f, index, b->p, b->len, NULL, eff);
    em_buf_reset(b);
    return rc;
}

/* snap_tail: the snapshot without its header and last_index, to compare two
 * states that applied the same things at different indexes. */
static void snap(const cl_meta_fsm *f, em_buf *out)
{
    em_buf_reset(out);
    if (cl_meta_fsm_snapshot(f, out) != 0)
        test_fail(__FILE__, __LINE__, "snapshot failed");
}
static int same_state(const cl_meta_fsm *a, const cl_meta_fsm *b, int skip_index)
{
    em_buf x = EM_BUF_INIT, y = EM_BUF_INIT;
    snap(a, &x);
    snap(b, &y);
    size_t skip = 24 + (skip_index ? 8 : 0);
    int eq = x.len == y.len && memcmp(x.p + skip, y.p + skip, x.len - skip) == 0;
    em_buf_free(&x);
    em_buf_free(&y);
    return eq;
}

/* The sample entries used by several tests: one of each type. */
enum { N_SAMPLES = 12 };
static void samples(em_buf *e, tnode *nodes)
{
    for (int i = 0; i < 3; i++) {
        tnode_make(&nodes[i], i + 1);
        CHECK_OK(cl_meta_enc_join(&e[i], &nodes[i].info));
    }
    CHECK_OK(cl_meta_enc_cache_start(&e[3], 12345, "cfg-A", 5));
    CHECK_OK(cl_meta_enc_type_put(&e[4], -77, "type-meta", 9));
    cl_meta_bytes bl[2] = { B("node-1"), B("node-2") };
    CHECK_OK(cl_meta_enc_baseline(&e[5], bl, 2));
    CHECK_OK(cl_meta_enc_state(&e[6], CL_META_ACTIVE_READ_ONLY));
    cl_meta_uuid v[3] = { nodes[0].info.id, nodes[1].info.id, nodes[2].info.id };
    CHECK_OK(cl_meta_enc_voters(&e[7], v, 3));
    CHECK_OK(cl_meta_enc_exch(&e[8], 1, 3, 0));
    CHECK_OK(cl_meta_enc_cache_stop(&e[9], 12345));
    CHECK_OK(cl_meta_enc_leave(&e[10], nodes[1].info.id));
    CHECK_OK(cl_meta_enc_fail(&e[11], nodes[2].info.id));
}
static void samples_free(em_buf *e)
{
    for (int i = 0; i < N_SAMPLES; i++)
        em_buf_free(&e[i]);
}

TEST(cl_meta_fsm_sequence_versions)
{
    em_buf e[N_SAMPLES];
    for (int i = 0; i < N_SAMPLES; i++)
        e[i] = (em_buf)EM_BUF_INIT;
    tnode nodes[3];
    samples(e, nodes);
    cl_meta_fsm f;
    cl_meta_fsm_init(&f);
    CHECK_EQ(f.state, CL_META_ACTIVE);
    /* (major, minor) after each sample, applied at index 10 + i. */
    static const uint64_t want[N_SAMPLES][2] = {
        {1, 0}, {2, 0}, {3, 0},   /* joins */
        {3, 1},                   /* cache start */
        {3, 1},                   /* type put: none */
        {3, 2},                   /* baseline */
        {3, 3},                   /* state */
        {3, 3},                   /* voters: none */
        {3, 3},                   /* exchange done: none */
        {3, 4},                   /* cache stop */
        {4, 0}, {5, 0},           /* leave, fail */
    };
    for (int i = 0; i < N_SAMPLES; i++) {
        cl_meta_effect eff;
        cl_meta_entry en;
        REQUIRE_OK(cl_meta_fsm_apply(&f, 10 + (uint64_t)i, e[i].p, e[i].len, &en, &eff));
        CHECK_EQ(eff.status, 0);
        CHECK_EQ(eff.changed, 1);
        CHECK_EQ(eff.index, 10 + i);
        CHECK_EQ(eff.major, want[i][0]);
        CHECK_EQ(eff.minor, want[i][1]);
        CHECK_EQ(en.type, eff.type);
        if (i == 2) {
            CHECK_EQ(f.n_members, 3);
            CHECK_EQ(f.members[2].order, 12);
            CHECK_EQ(f.members[2].state, CL_META_JOINING);
            cl_meta_bytes a = cl_meta_member_addr(&f.members[2], 0);
            CHECK_EQ(a.len, strlen("127.0.0.3:10800"));
            CHECK_MEM(a.p, "127.0.0.3:10800", a.len);
        }
        if (i == 4) {
            const cl_meta_blob *t = cl_meta_fsm_type(&f, -77);
            REQUIRE(t != NULL);
            CHECK_EQ(t->len, 9);
            CHECK(cl_meta_fsm_cache(&f, 12345) != NULL);
        }
        if (i == 8)
            for (int k = 0; k < 3; k++)
                CHECK_EQ(f.members[k].state, CL_META_ALIVE);
    }
    CHECK_EQ(f.last_index, 21);
    CHECK_EQ(f.state, CL_META_ACTIVE_READ_ONLY);
    CHECK_EQ(f.last_exch, 1);
    CHECK_EQ(f.n_voters, 3);
    CHECK_EQ(f.n_baseline, 2);
    CHECK(cl_meta_fsm_cache(&f, 12345) == NULL);
    CHECK_EQ(f.members[0].state, CL_META_ALIVE);
    CHECK_EQ(f.members[1].state, CL_META_LEFT);
    CHECK_EQ(f.members[2].state, CL_META_LEFT);
    uint32_t off = 0, k = 0;
    cl_meta_bytes cid;
    while (cl_meta_baseline_next(f.baseline, &off, &cid))
        k++;
    CHECK_EQ(k, 2);
    cl_meta_fsm_free(&f);
    samples_free(e);
}

TEST(cl_meta_fsm_idempotent)
{
    em_buf e[N_SAMPLES];
    for (int i = 0; i < N_SAMPLES; i++)
        e[i] = (em_buf)EM_BUF_INIT;
    tnode nodes[3];
    samples(e, nodes);
    cl_meta_fsm once, twice;
    cl_meta_fsm_init(&once);
    cl_meta_fsm_init(&twice);
    uint64_t idx = 1;
    for (int i = 0; i < N_SAMPLES; i++) {
        cl_meta_effect eff;
        REQUIRE_OK(cl_meta_fsm_apply(&once, (uint64_t)i + 1, e[i].p, e[i].len, NULL, &eff));
        REQUIRE_OK(cl_meta_fsm_apply(&twice, idx++, e[i].p, e[i].len, NULL, &eff));
        uint64_t major = twice.major;
        uint32_t minor = twice.minor;
        REQUIRE_OK(cl_meta_fsm_apply(&twice, idx++, e[i].p, e[i].len, NULL, &eff));
        CHECK_EQ(eff.changed, 0);
        CHECK_EQ(eff.major, major);
        CHECK_EQ(eff.minor, minor);
        /* A repeated stop of a stopped cache reports it is not there; every
         * other repeat is a plain success. */
        CHECK_EQ(eff.status, i == 9 ? EM_NOCACHE : 0);
    }
    /* Orders differ (joins got other indexes), so compare what matters. */
    CHECK_EQ(once.major, twice.major);
    CHECK_EQ(once.minor, twice.minor);
    CHECK_EQ(once.n_members, twice.n_members);
    CHECK_EQ(once.n_caches, twice.n_caches);
    CHECK_EQ(once.n_types, twice.n_types);
    CHECK_EQ(once.state, twice.state);
    CHECK_EQ(once.last_exch, twice.last_exch);
    /* Replaying entries at or below last_index (log over a snapshot) does nothing. */
    cl_meta_fsm copy;
    cl_meta_fsm_init(&copy);
    em_buf s = EM_BUF_INIT;
    snap(&once, &s);
    REQUIRE_OK(cl_meta_fsm_restore(&copy, s.p, s.len));
    for (int i = 0; i < N_SAMPLES; i++) {
        cl_meta_effect eff;
        REQUIRE_OK(cl_meta_fsm_apply(&copy, (uint64_t)i + 1, e[i].p, e[i].len, NULL, &eff));
        CHECK_EQ(eff.changed, 0);
    }
    CHECK(same_state(&copy, &once, 0));
    em_buf_free(&s);
    cl_meta_fsm_free(&copy);
    cl_meta_fsm_free(&once);
    cl_meta_fsm_free(&twice);
    samples_free(e);
}

TEST(cl_meta_fsm_refusals)
{
    cl_meta_fsm f;
    cl_meta_fsm_init(&f);
    em_buf b = EM_BUF_INIT;
    cl_meta_effect eff;
    uint64_t idx = 1;
    tnode a, dup;
    tnode_make(&a, 1);
    REQUIRE_OK(cl_meta_enc_join(&b, &a.info));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    /* Another node id with the same consistent id: refused, like Ignite. */
    tnode_make(&dup, 1);
    dup.info.id.lsb ^= 1;
    dup.info.raft_id = 99;
    REQUIRE_OK(cl_meta_enc_join(&b, &dup.info));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_INVAL);
    CHECK_EQ(eff.changed, 0);
    CHECK_EQ(f.major, 1);
    /* The same node id with other data: refused. */
    a.info.host = 8;
    REQUIRE_OK(cl_meta_enc_join(&b, &a.info));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_INVAL);
    a.info.host = 7;
    /* Cache started with another config. */
    REQUIRE_OK(cl_meta_enc_cache_start(&b, 5, "x", 1));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    REQUIRE_OK(cl_meta_enc_cache_start(&b, 5, "y", 1));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_CACHEEXISTS);
    CHECK_EQ(f.minor, 1);
    /* Leave of an unknown node, exchange naming a future version. */
    REQUIRE_OK(cl_meta_enc_leave(&b, (cl_meta_uuid){ 1, 2 }));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_NOTFOUND);
    REQUIRE_OK(cl_meta_enc_exch(&b, 4, 2, 0));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_RANGE);
    CHECK_EQ(f.last_exch, 0);
    /* An exchange id must grow: an older one is a repeat. */
    REQUIRE_OK(cl_meta_enc_exch(&b, 4, 1, 1));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.changed, 1);
    REQUIRE_OK(cl_meta_enc_exch(&b, 3, 1, 1));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.changed, 0);
    CHECK_EQ(f.last_exch, 4);
    /* A left node id cannot join again (restarts get new ids). */
    REQUIRE_OK(cl_meta_enc_leave(&b, a.info.id));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(f.major, 2);
    REQUIRE_OK(cl_meta_enc_join(&b, &a.info));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_INVAL);
    CHECK_EQ(f.major, 2);
    /* Malformed bytes: refused, index consumed, state kept. */
    static const uint8_t junk[5] = { 1, 2, 3, 4, 5 };
    REQUIRE_OK(cl_meta_fsm_apply(&f, idx, junk, sizeof junk, NULL, &eff));
    CHECK_EQ(eff.status, EM_TRUNCATED);
    CHECK_EQ(eff.type, 0);
    CHECK_EQ(f.last_index, idx);
    /* Encoders refuse what the decoder would. */
    cl_meta_uuid v[6] = { {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6} };
    CHECK_EQ(cl_meta_enc_voters(&b, v, 6), EM_BADLEN);
    v[1] = v[0];
    CHECK_EQ(cl_meta_enc_voters(&b, v, 2), EM_INVAL);
    CHECK_EQ(cl_meta_enc_state(&b, 3), EM_RANGE);
    CHECK_EQ(cl_meta_enc_cache_start(&b, 1, "", 0), EM_BADLEN);
    static const char bad_utf8[] = "a\xc0\x80";
    cl_meta_bytes bl = { (const uint8_t *)bad_utf8, 3 };
    CHECK_EQ(cl_meta_enc_baseline(&b, &bl, 1), EM_BADUTF8);
    a.info.raft_id = 0;
    CHECK_EQ(cl_meta_enc_join(&b, &a.info), EM_INVAL);
    CHECK_EQ(b.len, 0);
    em_buf_free(&b);
    cl_meta_fsm_free(&f);
}

TEST(cl_meta_fsm_tombstones_bounded)
{
    cl_meta_fsm f;
    cl_meta_fsm_init(&f);
    em_buf b = EM_BUF_INIT;
    cl_meta_effect eff;
    uint64_t idx = 1;
    for (int i = 1; i <= 300; i++) {
        tnode t;
        tnode_make(&t, i);
        REQUIRE_OK(cl_meta_enc_join(&b, &t.info));
        REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
        REQUIRE_EQ(eff.status, 0);
        REQUIRE_OK(cl_meta_enc_leave(&b, t.info.id));
        REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    }
    CHECK_EQ(f.n_left, CL_META_MAX_TOMBSTONES);
    CHECK_EQ(f.n_members, CL_META_MAX_TOMBSTONES);
    CHECK_EQ(f.major, 600);
    /* The oldest went first: the survivors are the last 256. */
    CHECK_EQ(f.members[0].raft_id, 300 - CL_META_MAX_TOMBSTONES + 1);
    em_buf_free(&b);
    cl_meta_fsm_free(&f);
}

/* build_rich: a state with something in every field. */
static void build_rich(cl_meta_fsm *f)
{
    em_buf e[N_SAMPLES];
    for (int i = 0; i < N_SAMPLES; i++)
        e[i] = (em_buf)EM_BUF_INIT;
    tnode nodes[3];
    samples(e, nodes);
    cl_meta_fsm_init(f);
    /* Skip the cache stop, so a cache remains. */
    for (int i = 0; i < N_SAMPLES; i++)
        if (i != 9)
            CHECK_OK(cl_meta_fsm_apply(f, 100 + (uint64_t)i, e[i].p, e[i].len, NULL, NULL));
    samples_free(e);
    em_buf b = EM_BUF_INIT;
    CHECK_OK(cl_meta_enc_cache_start(&b, -5, "cfg-B", 5));
    CHECK_OK(apply_buf(f, 200, &b, NULL));
    CHECK_OK(cl_meta_enc_type_put(&b, 9, "T9", 2));
    CHECK_OK(apply_buf(f, 201, &b, NULL));
    cl_meta_owners_enc oe;
    uint64_t ord[2] = { 100, 101 };
    CHECK_OK(cl_meta_enc_owners_begin(&oe, &b, 7));
    CHECK_OK(cl_meta_enc_owners_group(&oe, -5, 4));
    CHECK_OK(cl_meta_enc_owners_part(&oe, 1, 0, ord, 2, 0));
    CHECK_OK(cl_meta_enc_owners_part(&oe, 3, CL_META_OWN_LOST, NULL, 0, 0));
    CHECK_OK(cl_meta_enc_owners_end(&oe));
    CHECK_OK(apply_buf(f, 202, &b, NULL));
    CHECK_EQ(f->n_owners, 1);
    em_buf_free(&b);
}

/* owners_of reads partition part of a table: flags, count, first order. */
static void owners_of(const cl_meta_blob *t, uint32_t part, uint8_t *flags, uint8_t *n,
                      uint64_t *first)
{
    uint32_t off = 0, i = 0;
    cl_meta_part_owners o;
    *flags = *n = 0xff;
    *first = 0;
    while (cl_meta_owners_next(t, &off, &o))
        if (i++ == part) {
            *flags = o.flags;
            *n = o.n;
            *first = o.n ? cl_meta_owner_at(&o, 0) : 0;
            return;
        }
}

TEST(cl_meta_fsm_owners_set)
{
    cl_meta_fsm f;
    cl_meta_fsm_init(&f);
    em_buf b = EM_BUF_INIT;
    cl_meta_effect eff;
    REQUIRE_OK(cl_meta_enc_cache_start(&b, 42, "cfg", 3));
    REQUIRE_OK(apply_buf(&f, 1, &b, &eff));
    uint32_t minor = f.minor;

    /* First decision: partitions 0 and 2 of 3 get owners; 1 has none. */
    cl_meta_owners_enc oe;
    uint64_t a[3] = { 10, 20, 30 };
    REQUIRE_OK(cl_meta_enc_owners_begin(&oe, &b, 1));
    REQUIRE_OK(cl_meta_enc_owners_group(&oe, 42, 3));
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 0, 0, a, 2, 0));
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 2, 0, a + 1, 2, 0));
    CHECK_EQ(cl_meta_enc_owners_part(&oe, 2, 0, a, 1, 0), EM_RANGE);    /* not ascending */
    CHECK_EQ(cl_meta_enc_owners_part(&oe, 3, 0, a, 1, 0), EM_RANGE);    /* out of range */
    REQUIRE_OK(cl_meta_enc_owners_group(&oe, 77, 8));                 /* no such cache */
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 5, 0, a, 1, 0));
    REQUIRE_OK(cl_meta_enc_owners_end(&oe));
    REQUIRE_OK(apply_buf(&f, 2, &b, &eff));
    CHECK_EQ(eff.status, 0);
    CHECK_EQ(eff.changed, 1);
    CHECK_EQ(f.minor, minor);                   /* a decision is not a new version */
    CHECK(cl_meta_fsm_owners(&f, 77) == NULL);
    const cl_meta_blob *t = cl_meta_fsm_owners(&f, 42);
    REQUIRE(t != NULL);
    CHECK_EQ(cl_meta_owners_parts(t), 3);
    uint8_t fl, n;
    uint64_t first;
    owners_of(t, 0, &fl, &n, &first);
    CHECK(fl == 0 && n == 2 && first == 10);
    owners_of(t, 1, &fl, &n, &first);
    CHECK(fl == 0 && n == 0);
    owners_of(t, 2, &fl, &n, &first);
    CHECK(fl == 0 && n == 2 && first == 20);

    /* A patch: partition 0 lost, partition 1 gains one owner, 2 kept. */
    REQUIRE_OK(cl_meta_enc_owners_begin(&oe, &b, 2));
    REQUIRE_OK(cl_meta_enc_owners_group(&oe, 42, 3));
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 0, CL_META_OWN_LOST, NULL, 0, 0));
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 1, 0, a + 2, 1, 0));
    REQUIRE_OK(cl_meta_enc_owners_end(&oe));
    em_buf again = EM_BUF_INIT;
    REQUIRE_OK(em_buf_append(&again, b.p, b.len));
    REQUIRE_OK(apply_buf(&f, 3, &b, &eff));
    CHECK_EQ(eff.changed, 1);
    t = cl_meta_fsm_owners(&f, 42);
    owners_of(t, 0, &fl, &n, &first);
    CHECK(fl == CL_META_OWN_LOST && n == 0);
    owners_of(t, 1, &fl, &n, &first);
    CHECK(fl == 0 && n == 1 && first == 30);
    owners_of(t, 2, &fl, &n, &first);
    CHECK(fl == 0 && n == 2 && first == 20);
    /* The same decision again changes nothing. */
    REQUIRE_OK(apply_buf(&f, 4, &again, &eff));
    CHECK_EQ(eff.changed, 0);

    /* A MOVING owner: listed after the owners, counted apart. */
    REQUIRE_OK(cl_meta_enc_owners_begin(&oe, &b, 3));
    REQUIRE_OK(cl_meta_enc_owners_group(&oe, 42, 3));
    CHECK_EQ(cl_meta_enc_owners_part(&oe, 2, 0, a, 1, 2), EM_RANGE);   /* moving > n */
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 2, 0, a + 1, 2, 1));
    REQUIRE_OK(cl_meta_enc_owners_end(&oe));
    REQUIRE_OK(apply_buf(&f, 5, &b, &eff));
    CHECK_EQ(eff.changed, 1);
    t = cl_meta_fsm_owners(&f, 42);
    {
        uint32_t off = 0, i = 0;
        cl_meta_part_owners o;
        while (cl_meta_owners_next(t, &off, &o))
            if (i++ == 2)
                CHECK(o.n == 2 && o.moving == 1 && cl_meta_owner_at(&o, 1) == 30);
    }

    /* An affinity switch that changes something bumps the minor version
     * (clients refetch the partitions); the same one again does not. */
    REQUIRE_OK(cl_meta_enc_owners_begin(&oe, &b, 4));
    cl_meta_enc_owners_switch(&oe);
    REQUIRE_OK(cl_meta_enc_owners_group(&oe, 42, 3));
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 2, 0, a + 1, 2, 0));
    REQUIRE_OK(cl_meta_enc_owners_end(&oe));
    em_buf_reset(&again);
    REQUIRE_OK(em_buf_append(&again, b.p, b.len));
    uint32_t m0 = f.minor;
    REQUIRE_OK(apply_buf(&f, 6, &b, &eff));
    CHECK_EQ(eff.changed, 1);
    CHECK_EQ(f.minor, m0 + 1);
    REQUIRE_OK(apply_buf(&f, 7, &again, &eff));
    CHECK_EQ(f.minor, m0 + 1);

    /* A row that applies only over the row it was decided on: partition
     * 2's expectation matches, partition 1's names a row replaced since -
     * 2 changes, 1 stays; and an expectation never reaches the table. */
    {
        uint32_t off = 0, i = 0, crc1 = 0, crc2 = 0;
        cl_meta_part_owners o;
        t = cl_meta_fsm_owners(&f, 42);
        while (cl_meta_owners_next(t, &off, &o)) {
            if (i == 1)
                crc1 = cl_meta_owners_row_crc(&o);
            if (i == 2)
                crc2 = cl_meta_owners_row_crc(&o);
            i++;
        }
        REQUIRE_OK(cl_meta_enc_owners_begin(&oe, &b, 5));
        REQUIRE_OK(cl_meta_enc_owners_group(&oe, 42, 3));
        CHECK_EQ(cl_meta_enc_owners_part(&oe, 1, CL_META_OWN_EXPECT, a, 1, 0), EM_RANGE);
        REQUIRE_OK(cl_meta_enc_owners_part_if(&oe, 1, crc1 ^ 1, a, 3, 0));
        REQUIRE_OK(cl_meta_enc_owners_part_if(&oe, 2, crc2, a, 3, 1));
        REQUIRE_OK(cl_meta_enc_owners_end(&oe));
        REQUIRE_OK(apply_buf(&f, 8, &b, &eff));
        CHECK_EQ(eff.status, 0);
        CHECK_EQ(eff.changed, 1);
        t = cl_meta_fsm_owners(&f, 42);
        REQUIRE_OK(cl_meta_owners_table_check(t->p, t->len));
        owners_of(t, 1, &fl, &n, &first);
        CHECK(fl == 0 && n == 1 && first == 30);        /* kept: another row came first */
        owners_of(t, 2, &fl, &n, &first);
        CHECK(fl == 0 && n == 3 && first == 10);        /* replaced: its row was the one */
        /* The same entry again: partition 2's row is no longer the one. */
        REQUIRE_OK(apply_buf(&f, 9, &b, &eff));
        CHECK_EQ(eff.changed, 0);
    }

    /* Snapshot round trip keeps the table. */
    em_buf s1 = EM_BUF_INIT;
    snap(&f, &s1);
    cl_meta_fsm g;
    cl_meta_fsm_init(&g);
    REQUIRE_OK(cl_meta_fsm_restore(&g, s1.p, s1.len));
    CHECK(same_state(&f, &g, 0));
    cl_meta_fsm_free(&g);

    /* Malformed entries are refused alike: a partition count of 0, counts
     * past the bytes, a flag that does not exist. */
    REQUIRE_OK(cl_meta_enc_owners_begin(&oe, &b, 3));
    REQUIRE_OK(cl_meta_enc_owners_group(&oe, 42, 3));
    REQUIRE_OK(cl_meta_enc_owners_part(&oe, 1, 0, a, 1, 0));
    REQUIRE_OK(cl_meta_enc_owners_end(&oe));
    em_buf bad = EM_BUF_INIT;
    REQUIRE_OK(em_buf_append(&bad, b.p, b.len));
    bad.p[8 + 12 + 4] = 0;                                  /* parts = 0 */
    bad.p[8 + 12 + 5] = 0;
    cl_meta_entry e;
    CHECK_EQ(cl_meta_entry_decode(bad.p, bad.len, &e), EM_RANGE);
    memcpy(bad.p, b.p, b.len);
    bad.p[8 + 12 + 12 + 4] = 4;                             /* unknown flag */
    CHECK_EQ(cl_meta_entry_decode(bad.p, bad.len, &e), EM_INVAL);
    memcpy(bad.p, b.p, b.len);
    bad.p[8 + 12 + 12 + 5] = 9;                             /* 9 owners, bytes for 1 */
    CHECK(cl_meta_entry_decode(bad.p, bad.len, &e) != 0);
    for (size_t cut = 0; cut < b.len; cut++)
        CHECK(cl_meta_entry_decode(b.p, cut, &e) != 0);
    em_buf_free(&bad);

    /* Stopping the cache drops its table. */
    em_buf_reset(&b);
    REQUIRE_OK(cl_meta_enc_cache_stop(&b, 42));
    REQUIRE_OK(apply_buf(&f, 10, &b, &eff));
    CHECK(cl_meta_fsm_owners(&f, 42) == NULL);
    em_buf_free(&b);
    em_buf_free(&again);
    em_buf_free(&s1);
    cl_meta_fsm_free(&f);
}

TEST(cl_meta_fsm_snapshot_round_trip)
{
    cl_meta_fsm f, g;
    build_rich(&f);
    CHECK_EQ(f.n_caches, 2);
    CHECK_EQ(f.n_types, 2);
    em_buf s = EM_BUF_INIT, s2 = EM_BUF_INIT;
    snap(&f, &s);
    cl_meta_fsm_init(&g);
    REQUIRE_OK(cl_meta_fsm_restore(&g, s.p, s.len));
    snap(&g, &s2);
    CHECK_EQ(s.len, s2.len);
    CHECK(s.len == s2.len && memcmp(s.p, s2.p, s.len) == 0);
    CHECK_EQ(g.last_index, f.last_index);
    CHECK_EQ(g.major, f.major);
    CHECK_EQ(g.minor, f.minor);
    CHECK_EQ(g.state, f.state);
    CHECK_EQ(g.n_members, f.n_members);
    CHECK_EQ(g.n_left, f.n_left);
    CHECK_EQ(g.n_voters, 3);
    CHECK_EQ(g.n_baseline, 2);
    for (uint32_t i = 0; i < f.n_members; i++) {
        CHECK(cl_meta_uuid_eq(g.members[i].id, f.members[i].id));
        CHECK_EQ(g.members[i].order, f.members[i].order);
        CHECK_EQ(g.members[i].state, f.members[i].state);
        cl_meta_bytes a = cl_meta_member_raft_addr(&f.members[i]);
        cl_meta_bytes b = cl_meta_member_raft_addr(&g.members[i]);
        CHECK(a.len == b.len && memcmp(a.p, b.p, a.len) == 0);
    }
    const cl_meta_blob *c = cl_meta_fsm_cache(&g, -5);
    REQUIRE(c != NULL);
    CHECK_MEM(c->p, "cfg-B", 5);
    /* The restored state keeps applying like the original. */
    em_buf b = EM_BUF_INIT;
    CHECK_OK(cl_meta_enc_cache_stop(&b, -5));
    CHECK_OK(cl_meta_fsm_apply(&f, 300, b.p, b.len, NULL, NULL));
    CHECK_OK(cl_meta_fsm_apply(&g, 300, b.p, b.len, NULL, NULL));
    CHECK(same_state(&f, &g, 0));
    /* An empty state round-trips too. */
    cl_meta_fsm z;
    cl_meta_fsm_init(&z);
    snap(&z, &s);
    REQUIRE_OK(cl_meta_fsm_restore(&g, s.p, s.len));
    CHECK(same_state(&z, &g, 0));
    em_buf_free(&b);
    em_buf_free(&s);
    em_buf_free(&s2);
    cl_meta_fsm_free(&f);
    cl_meta_fsm_free(&g);
}

/* exact: a copy in a block of exactly n bytes, so ASan sees any over-read. */
static uint8_t *exact(const uint8_t *p, size_t n)
{
    uint8_t *q = em_malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

/* try_entry decodes and applies one mutated entry to a copy of base. */
static void try_entry(const cl_meta_fsm *base_snap_src, const uint8_t *p, size_t n,
                      int must_fail, const char *what, size_t at)
{
    uint8_t *q = exact(p, n);
    cl_meta_entry e;
    int rc = cl_meta_entry_decode(q, n, &e);
    if (must_fail && rc == 0)
        test_fail(__FILE__, __LINE__, "%s at %zu decoded", what, at);
    if (rc == 0) {
        /* Decoded: it must apply (or be refused) without harm. */
        em_buf s = EM_BUF_INIT;
        snap(base_snap_src, &s);
        cl_meta_fsm g;
        cl_meta_fsm_init(&g);
        if (cl_meta_fsm_restore(&g, s.p, s.len) != 0)
            test_fail(__FILE__, __LINE__, "restore");
        cl_meta_effect eff;
        if (cl_meta_fsm_apply(&g, g.last_index + 1, q, n, NULL, &eff) != 0)
            test_fail(__FILE__, __LINE__, "apply of a mutated entry failed");
        cl_meta_fsm_free(&g);
        em_buf_free(&s);
    } else if (rc > 0 || rc == EM_NOMEM) {
        test_fail(__FILE__, __LINE__, "%s at %zu: odd code %d", what, at, rc);
    }
    em_free(q);
}

TEST(cl_meta_fsm_entries_truncated_and_flipped)
{
    em_buf e[N_SAMPLES];
    for (int i = 0; i < N_SAMPLES; i++)
        e[i] = (em_buf)EM_BUF_INIT;
    tnode nodes[3];
    samples(e, nodes);
    cl_meta_fsm base;
    build_rich(&base);
    uint64_t decoded = 0, refused = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        for (size_t k = 0; k < e[i].len; k++)
            try_entry(&base, e[i].p, k, 1, "truncation", k);
        for (size_t bit = 0; bit < e[i].len * 8; bit++) {
            e[i].p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            cl_meta_entry en;
            if (cl_meta_entry_decode(e[i].p, e[i].len, &en) == 0)
                decoded++;
            else
                refused++;
            try_entry(&base, e[i].p, e[i].len, 0, "flip", bit);
            e[i].p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
    /* Both outcomes occur: flips inside payloads decode, flips in lengths do not. */
    CHECK(decoded > 0);
    CHECK(refused > 0);
    cl_meta_fsm_free(&base);
    samples_free(e);
}

/* try_restore restores p[0..n) over a copy of base and checks that a refusal
 * leaves it unchanged. */
static int try_restore(const cl_meta_fsm *base, const uint8_t *p, size_t n)
{
    uint8_t *q = exact(p, n);
    em_buf s = EM_BUF_INIT;
    snap(base, &s);
    cl_meta_fsm g;
    cl_meta_fsm_init(&g);
    if (cl_meta_fsm_restore(&g, s.p, s.len) != 0)
        test_fail(__FILE__, __LINE__, "restore of the base");
    int rc = cl_meta_fsm_restore(&g, q, n);
    if (rc != 0 && !same_state(&g, base, 0))
        test_fail(__FILE__, __LINE__, "refused restore changed the state");
    if (rc == 0) {
        /* Whatever decoded must be a state we can snapshot and apply to. */
        em_buf b = EM_BUF_INIT;
        if (cl_meta_enc_cache_stop(&b, 12345) == 0)
            (void)cl_meta_fsm_apply(&g, g.last_index + 1, b.p, b.len, NULL, NULL);
        em_buf_free(&b);
        snap(&g, &b);
        em_buf_free(&b);
    }
    cl_meta_fsm_free(&g);
    em_buf_free(&s);
    em_free(q);
    return rc;
}

TEST(cl_meta_fsm_snapshot_truncated_and_flipped)
{
    cl_meta_fsm f, base;
    build_rich(&f);
    cl_meta_fsm_init(&base);
    em_buf s = EM_BUF_INIT;
    snap(&f, &s);
    for (size_t k = 0; k < s.len; k++)
        if (try_restore(&base, s.p, k) == 0)
            test_fail(__FILE__, __LINE__, "truncated snapshot of %zu bytes restored", k);
    /* Every flip anywhere is caught (header fields or the checksum). */
    for (size_t bit = 0; bit < s.len * 8; bit++) {
        s.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        if (try_restore(&base, s.p, s.len) == 0)
            test_fail(__FILE__, __LINE__, "flip of bit %zu restored", bit);
        s.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    /* Flips in the body with a fixed-up checksum reach the decoder itself:
     * it must refuse or decode safely, never crash or leak. */
    uint64_t ok = 0, bad = 0;
    for (size_t bit = 24 * 8; bit < s.len * 8; bit++) {
        s.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        em_st32(s.p + 16, em_crc32c(0, s.p + 24, s.len - 24));
        if (try_restore(&base, s.p, s.len) == 0)
            ok++;
        else
            bad++;
        s.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    em_st32(s.p + 16, em_crc32c(0, s.p + 24, s.len - 24));
    CHECK(ok > 0);
    CHECK(bad > 0);
    /* Truncated bodies with a valid header and checksum. */
    for (size_t k = 24; k < s.len; k++) {
        uint8_t *q = exact(s.p, k);
        em_st64(q + 8, k - 24);
        em_st32(q + 16, em_crc32c(0, q + 24, k - 24));
        if (try_restore(&base, q, k) == 0)
            test_fail(__FILE__, __LINE__, "body cut at %zu restored", k);
        em_free(q);
    }
    CHECK_OK(try_restore(&base, s.p, s.len));
    em_buf_free(&s);
    cl_meta_fsm_free(&f);
    cl_meta_fsm_free(&base);
}

TEST(cl_meta_fsm_alloc_failures)
{
    em_buf e[N_SAMPLES];
    for (int i = 0; i < N_SAMPLES; i++)
        e[i] = (em_buf)EM_BUF_INIT;
    tnode nodes[3];
    samples(e, nodes);
    cl_meta_fsm f, before;
    cl_meta_fsm_init(&f);
    em_buf s = EM_BUF_INIT;
    uint64_t failed = 0;
    /* Every entry, with the k-th allocation failing for k = 1, 2, ... until
     * it goes through: each failure must leave the state as it was. */
    for (int i = 0; i < N_SAMPLES; i++) {
        for (uint64_t k = 1;; k++) {
            snap(&f, &s);
            cl_meta_fsm_init(&before);
            REQUIRE_OK(cl_meta_fsm_restore(&before, s.p, s.len));
            em_mem_fail_after(k, 0);
            cl_meta_effect eff;
            int rc = cl_meta_fsm_apply(&f, (uint64_t)i + 1, e[i].p, e[i].len, NULL, &eff);
            em_mem_fail_after(0, 0);
            if (rc == EM_NOMEM) {
                failed++;
                CHECK(same_state(&f, &before, 0));
                cl_meta_fsm_free(&before);
                continue;
            }
            REQUIRE_OK(rc);
            CHECK_EQ(eff.status, 0);
            cl_meta_fsm_free(&before);
            break;
        }
    }
    CHECK(failed > 0);
    /* Snapshot and restore under failures: no leak, no half state. */
    em_buf_reset(&s);
    for (uint64_t k = 1;; k++) {
        em_buf t = EM_BUF_INIT;
        em_mem_fail_after(k, 0);
        int rc = cl_meta_fsm_snapshot(&f, &t);
        em_mem_fail_after(0, 0);
        em_buf_free(&t);
        if (rc == 0)
            break;
        CHECK_EQ(rc, EM_NOMEM);
    }
    snap(&f, &s);
    cl_meta_fsm g;
    build_rich(&g);
    cl_meta_fsm g0;
    cl_meta_fsm_init(&g0);
    {
        em_buf t = EM_BUF_INIT;
        snap(&g, &t);
        REQUIRE_OK(cl_meta_fsm_restore(&g0, t.p, t.len));
        em_buf_free(&t);
    }
    for (uint64_t k = 1;; k++) {
        em_mem_fail_after(k, 0);
        int rc = cl_meta_fsm_restore(&g, s.p, s.len);
        em_mem_fail_after(0, 0);
        if (rc == 0)
            break;
        CHECK_EQ(rc, EM_NOMEM);
        CHECK(same_state(&g, &g0, 0));
    }
    CHECK(same_state(&g, &f, 0));
    cl_meta_fsm_free(&g);
    cl_meta_fsm_free(&g0);
    em_buf_free(&s);
    cl_meta_fsm_free(&f);
    samples_free(e);
}

/* CACHE_CONFIG replaces a started cache's configuration when it names the
 * one it replaces (CRC-32C): the second of two changes made from the same
 * configuration is refused alike on every node, so neither is lost
 * silently.  No version change; a cache not started is refused. */
TEST(cl_meta_fsm_cache_config_compare_and_set)
{
    cl_meta_fsm f;
    cl_meta_fsm_init(&f);
    em_buf b = EM_BUF_INIT;
    cl_meta_effect eff;
    uint64_t idx = 1;
    REQUIRE_OK(cl_meta_enc_cache_start(&b, 9, "cfg-1", 5));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    uint32_t minor = f.minor, c1 = em_crc32c(0, "cfg-1", 5);
    REQUIRE_OK(cl_meta_enc_cache_config(&b, 9, "cfg-2a", 6, c1));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, 0);
    CHECK_EQ(eff.changed, 1);
    REQUIRE_OK(cl_meta_enc_cache_config(&b, 9, "cfg-2b", 6, c1));     /* raced */
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_STALE);
    const cl_meta_blob *cb = cl_meta_fsm_cache(&f, 9);
    REQUIRE(cb != NULL);
    CHECK(cb->len == 6 && !memcmp(cb->p, "cfg-2a", 6));
    CHECK_EQ(f.minor, minor);
    REQUIRE_OK(cl_meta_enc_cache_config(&b, 77, "cfg", 3, 0));
    REQUIRE_OK(apply_buf(&f, idx++, &b, &eff));
    CHECK_EQ(eff.status, EM_NOCACHE);
    /* decoded back: the same fields */
    cl_meta_entry e;
    REQUIRE_OK(cl_meta_enc_cache_config(&b, 9, "cfg-3", 5, 1234));
    REQUIRE_OK(cl_meta_entry_decode(b.p, b.len, &e));
    CHECK_EQ(e.type, CL_META_E_CACHE_CONFIG);
    CHECK(e.u.cache.id == 9 && e.u.cache.prev == 1234 && e.u.cache.blob.len == 5);
    em_buf_free(&b);
    cl_meta_fsm_free(&f);
}
