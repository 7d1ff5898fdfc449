/* test_store_conc.c - the store under concurrency (run under `make tsan`).
 *
 * store_conc_cas: 4 threads on 8 overlapping keys run compare-and-set
 * operations (replace_if_equals, remove_if_equals, put_if_absent) with values
 * unique per write, and log every outcome.  The per-key model then checks
 * that successes form one chain of states per key (no value replaced twice,
 * no lost update, the final stored value is the chain's end) and that every
 * failure was justified (its expected value was replaced by someone).
 * store_conc_create_destroy: operations race cache destroy and re-create.
 */
#include "test.h"

#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

enum { NTHREADS = 4, NKEYS = 8 };
#define OPS_PER_THREAD 6000
#define ABSENT 0ULL

struct cas_rec { uint8_t key, op, ok; uint64_t from, to; };

struct cas_thread {
    st_cache *c;
    int id;
    struct cas_rec *log;
    int n;
    int err;
};

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t lval(uint8_t *b, int64_t v) { b[0] = 4; em_st64(b + 1, (uint64_t)v); return 9; }

static void *cas_worker(void *arg)
{
    struct cas_thread *t = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(t->id + 1), seq = 0;
    em_buf out = EM_BUF_INIT;
    uint8_t kb[5], eb[9], vb[9];
    for (int i = 0; i < OPS_PER_THREAD && !t->err; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int key = (int)(rng % NKEYS);
        size_t kl = ikey(kb, key);
        int found = 0, ok = 0, rc;
        em_buf_reset(&out);
        if ((rc = st_get(t->c, NULL, kb, kl, &out, &found)) != 0) {
            t->err = rc;
            break;
        }
        uint64_t cur = found ? em_ld64(out.p + 1) : ABSENT;
        /* now and then give the others the CPU between read and CAS, so
         * outcomes interleave even when threads outnumber cores */
        if ((i & 15) == 0)
            sched_yield();
        uint64_t fresh = ((uint64_t)(t->id + 1) << 40) | ++seq;
        struct cas_rec *r = &t->log[t->n++];
        r->key = (uint8_t)key;
        r->from = cur;
        if (!found) {
            r->op = 'P';
            r->to = fresh;
            rc = st_put_if_absent(t->c, NULL, kb, kl, vb, lval(vb, (int64_t)fresh), &ok);
        } else if ((rng >> 32) % 4 == 0) {
            r->op = 'D';
            r->to = ABSENT;
            rc = st_remove_if_equals(t->c, NULL, kb, kl, eb, lval(eb, (int64_t)cur), &ok);
        } else {
            r->op = 'R';
            r->to = fresh;
            rc = st_replace_if_equals(t->c, NULL, kb, kl, eb, lval(eb, (int64_t)cur),
                                      vb, lval(vb, (int64_t)fresh), &ok);
        }
        if (rc)
            t->err = rc;
        r->ok = (uint8_t)ok;
    }
    em_buf_free(&out);
    return NULL;
}

/* value -> (times it became current, times it stopped being current) */
struct vcount { uint64_t v; int in, out; };
struct vmap { struct vcount *t; uint32_t mask; };

static struct vcount *vm_get(struct vmap *m, uint64_t v)
{
    for (uint32_t i = (uint32_t)em_mix64(v) & m->mask;; i = (i + 1) & m->mask) {
        if (m->t[i].v == v || m->t[i].v == 0) {
            m->t[i].v = v;
            return &m->t[i];
        }
    }
}

TEST(store_conc_cas)
{
    st_store *s = NULL;
    REQUIRE_OK(st_open(&s, NULL));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "cas";
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(s, &cfg, &c));
    struct cas_thread th[NTHREADS];
    pthread_t tid[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        th[i] = (struct cas_thread){c, i, em_calloc(OPS_PER_THREAD, sizeof(struct cas_rec)), 0, 0};
        REQUIRE(th[i].log);
    }
    for (int i = 0; i < NTHREADS; i++)
        REQUIRE(pthread_create(&tid[i], NULL, cas_worker, &th[i]) == 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(tid[i], NULL);

    uint32_t cap = 1;
    while (cap < 4u * NTHREADS * OPS_PER_THREAD)
        cap <<= 1;
    struct vmap m = {em_calloc(cap, sizeof(struct vcount)), cap - 1};
    REQUIRE(m.t);
    int absent_in[NKEYS] = {0}, absent_out[NKEYS] = {0}, succ = 0, fail = 0;
    for (int i = 0; i < NTHREADS; i++) {
        CHECK_EQ(th[i].err, 0);
        for (int j = 0; j < th[i].n; j++) {
            struct cas_rec *r = &th[i].log[j];
            if (!r->ok)
                continue;
            succ++;
            if (r->from == ABSENT)
                absent_out[r->key]++;
            else
                vm_get(&m, r->from)->out++;
            if (r->to == ABSENT)
                absent_in[r->key]++;
            else
                vm_get(&m, r->to)->in++;
        }
    }
    /* every value became current once and was replaced at most once */
    for (uint32_t i = 0; i <= m.mask; i++) {
        if (!m.t[i].v)
            continue;
        CHECK_EQ(m.t[i].in, 1);
        CHECK(m.t[i].out <= 1);
    }
    /* per key: the chain ends at the stored value (or absent) */
    em_buf out = EM_BUF_INIT;
    for (int k = 0; k < NKEYS; k++) {
        uint8_t kb[5];
        int found;
        em_buf_reset(&out);
        CHECK_OK(st_get(c, NULL, kb, ikey(kb, k), &out, &found));
        int open_ends = 0;  /* values of this key never replaced */
        for (int i = 0; i < NTHREADS; i++)
            for (int j = 0; j < th[i].n; j++) {
                struct cas_rec *r = &th[i].log[j];
                if (r->ok && r->key == k && r->to != ABSENT && vm_get(&m, r->to)->out == 0)
                    open_ends++;
            }
        if (found) {
            CHECK_EQ(open_ends, 1);
            struct vcount *vc = vm_get(&m, em_ld64(out.p + 1));
            CHECK(vc->in == 1 && vc->out == 0);
            CHECK_EQ(absent_out[k], absent_in[k] + 1);   /* starts absent */
        } else {
            CHECK_EQ(open_ends, 0);
            CHECK_EQ(absent_out[k], absent_in[k]);
        }
    }
    /* every failed CAS on a value: that value was replaced by someone */
    for (int i = 0; i < NTHREADS; i++)
        for (int j = 0; j < th[i].n; j++) {
            struct cas_rec *r = &th[i].log[j];
            if (r->ok)
                continue;
            fail++;
            if (r->from != ABSENT)
                CHECK_EQ(vm_get(&m, r->from)->out, 1);
        }
    CHECK(succ > 1000);
    CHECK(fail > 0 || NTHREADS == 1);
    em_buf_free(&out);
    em_free(m.t);
    for (int i = 0; i < NTHREADS; i++)
        em_free(th[i].log);
    st_close(s);
}

/* ---- create / destroy racing operations ------------------------------- */

struct cd_ctx {
    st_store *s;
    int32_t id;
    atomic_int stop;
    atomic_int bad;
    atomic_long ops, nocache;
};

static void *cd_worker(void *arg)
{
    struct cd_ctx *x = arg;
    em_buf out = EM_BUF_INIT;
    uint8_t kb[5], vb[9];
    int i = 0;
    while (!atomic_load(&x->stop)) {
        st_cache *c = st_cache_find(x->s, x->id);
        if (!c)
            continue;
        /* keep using the pointer for a while: the cache may be destroyed
         * under us, and ops must then say EM_NOCACHE */
        for (int j = 0; j < 50; j++, i++) {
            int f, rc;
            size_t kl = ikey(kb, i % 300);
            rc = st_put(c, NULL, kb, kl, vb, lval(vb, i));
            if (!rc) {
                em_buf_reset(&out);
                rc = st_get(c, NULL, kb, kl, &out, &f);
            }
            if (!rc && j % 10 == 0)
                rc = st_remove(c, NULL, kb, kl, &f);
            if (rc == EM_NOCACHE)
                atomic_fetch_add(&x->nocache, 1);
            else if (rc)
                atomic_fetch_add(&x->bad, 1);
            atomic_fetch_add(&x->ops, 1);
        }
    }
    em_buf_free(&out);
    return NULL;
}

TEST(store_conc_create_destroy)
{
    struct cd_ctx x;
    memset(&x, 0, sizeof x);
    REQUIRE_OK(st_open(&x.s, NULL));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "cd";
    cfg.partitions = 16;
    x.id = em_hash_java_str((const uint8_t *)"cd", 2);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        REQUIRE(pthread_create(&t[i], NULL, cd_worker, &x) == 0);
    int created = 0, exists = 0, rounds = 0;
    /* 300 rounds at least, and more until the workers have run ops: on a
     * loaded machine they may not be scheduled during the first 300. */
    for (int round = 0; round < 300 || (atomic_load(&x.ops) < 1000 && round < 200000);
         round++) {
        rounds++;
        st_cache *c;
        int rc = st_cache_create(x.s, &cfg, &c);
        if (rc == 0)
            created++;
        else if (rc == EM_CACHEEXISTS)
            exists++;
        else
            CHECK_OK(rc);
        for (volatile int spin = 0; spin < 20000; spin++)
            ;
        CHECK_OK(st_cache_destroy(x.s, x.id));
        CHECK_EQ(st_cache_destroy(x.s, x.id), EM_NOCACHE);
    }
    atomic_store(&x.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(created, rounds);
    CHECK_EQ(exists, 0);
    CHECK_EQ(atomic_load(&x.bad), 0);
    CHECK(atomic_load(&x.ops) > 0);
    st_close(x.s);
}

struct race_ctx { st_store *s; atomic_int wins, exists; };

static void *create_racer(void *arg)
{
    struct race_ctx *x = arg;
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "race";
    cfg.partitions = 8;
    st_cache *c;
    int rc = st_cache_create(x->s, &cfg, &c);
    if (rc == 0)
        atomic_fetch_add(&x->wins, 1);
    else if (rc == EM_CACHEEXISTS)
        atomic_fetch_add(&x->exists, 1);
    return NULL;
}

TEST(store_conc_create_same_name)
{
    for (int round = 0; round < 20; round++) {
        struct race_ctx x;
        memset(&x, 0, sizeof x);
        REQUIRE_OK(st_open(&x.s, NULL));
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            REQUIRE(pthread_create(&t[i], NULL, create_racer, &x) == 0);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
        CHECK_EQ(atomic_load(&x.wins), 1);
        CHECK_EQ(atomic_load(&x.exists), 3);
        st_close(x.s);
    }
}

/* ---- expiry tick and eviction racing writers -------------------------- */

struct mix_ctx { st_store *s; st_cache *c; int id; atomic_int bad; };

static void *mix_worker(void *arg)
{
    struct mix_ctx *x = arg;
    uint8_t kb[5], vb[9];
    em_buf out = EM_BUF_INIT;
    st_expiry e = {1, -2, 5};
    st_opctx o = {.expiry = &e};
    for (int i = 0; i < 20000; i++) {
        int f, rc;
        int key = (i * 31 + x->id) % 2000;
        size_t kl = ikey(kb, key);
        /* keys below 1000 are eternal (more than the region holds: evictions
         * must happen), the others expire within milliseconds */
        rc = st_put(x->c, key < 1000 ? NULL : &o, kb, kl, vb, lval(vb, i));
        if (!rc) {
            em_buf_reset(&out);
            rc = st_get(x->c, key < 1000 ? NULL : &o, kb, kl, &out, &f);
        }
        if (!rc && i % 100 == 0)
            st_expire_tick(x->s, 50);
        if (rc)
            atomic_fetch_add(&x->bad, 1);
    }
    em_buf_free(&out);
    return NULL;
}

TEST(store_conc_expiry_eviction)
{
    st_options opt = {{"default", 48 * 1024, 1}};
    st_store *s = NULL;
    REQUIRE_OK(st_open(&s, &opt));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "mix";
    cfg.partitions = 32;
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(s, &cfg, &c));
    struct mix_ctx x[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        x[i] = (struct mix_ctx){s, c, i, 0};
        REQUIRE(pthread_create(&t[i], NULL, mix_worker, &x[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(atomic_load(&x[i].bad), 0);
    st_region_stats rs;
    st_region_stats_get(s, NULL, &rs);
    CHECK(rs.used_bytes <= 48 * 1024);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.mem_bytes, rs.used_bytes);
    CHECK(st.evictions > 0);
    st_close(s);
}

/* ---- scans racing writers --------------------------------------------- */

struct scan_ctx { st_cache *c; atomic_int stop; atomic_int bad; };

static void *churn_worker(void *arg)
{
    struct scan_ctx *x = arg;
    uint8_t kb[5], vb[9];
    int r;
    for (int i = 0; !atomic_load(&x->stop); i++) {
        int key = 1000 + i % 5000;            /* never the stable keys 0..999 */
        size_t kl = ikey(kb, key);
        int rc = (i / 5000) % 2 ? st_remove(x->c, NULL, kb, kl, &r)
                                : st_put(x->c, NULL, kb, kl, vb, lval(vb, i));
        if (rc)
            atomic_fetch_add(&x->bad, 1);
    }
    return NULL;
}

static int stable_fn(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    uint8_t *seen = arg;
    (void)v; (void)vlen;
    int32_t key = (int32_t)em_ld32(k + 1);
    if (klen == 5 && key >= 0 && key < 1000)
        seen[key]++;
    return 0;
}

TEST(store_conc_scan_vs_writers)
{
    st_store *s = NULL;
    REQUIRE_OK(st_open(&s, NULL));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "scanrace";
    cfg.partitions = 64;
    struct scan_ctx x;
    memset(&x, 0, sizeof x);
    REQUIRE_OK(st_cache_create(s, &cfg, &x.c));
    uint8_t kb[5], vb[9];
    for (int i = 0; i < 1000; i++)
        REQUIRE_OK(st_put(x.c, NULL, kb, ikey(kb, i), vb, lval(vb, i)));
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&t[i], NULL, churn_worker, &x) == 0);
    static uint8_t seen[1000];
    for (int round = 0; round < 20; round++) {
        memset(seen, 0, sizeof seen);
        st_scan *sc;
        REQUIRE_OK(st_scan_open(x.c, -1, &sc));
        int more = 1;
        while (more)
            CHECK_OK(st_scan_next_page(sc, 37, stable_fn, seen, &more));
        st_scan_close(sc);
        for (int i = 0; i < 1000; i++)
            if (seen[i] != 1) {
                CHECK_EQ(seen[i], 1);
                break;
            }
    }
    atomic_store(&x.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&x.bad), 0);
    st_close(s);
}
