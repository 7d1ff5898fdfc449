/* test_store.c - unit tests of the store (src/store/): registry, every
 * key-value operation and its edge cases, partitions (reference §4.2),
 * expiry, memory limit and eviction, scans, stats, observer + replay, and the
 * allocation guarantees of DESIGN rules 3 and 5.  Concurrency: test_store_conc.c.
 */
#include "test.h"

#include "binary/binary.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <stdlib.h>
#include <time.h>

/* Data objects by hand (reference §3.1): int = 3 + LE32, long = 4 + LE64,
 * string = 9 + LE32 length + UTF-8. */
static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t lval(uint8_t *b, int64_t v) { b[0] = 4; em_st64(b + 1, (uint64_t)v); return 9; }
static size_t sval(uint8_t *b, const char *s)
{
    size_t n = strlen(s);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    memcpy(b + 5, s, n);
    return 5 + n;
}

static st_store *open_store(uint64_t max_bytes, int eviction)
{
    st_options o = {{"default", max_bytes, (uint8_t)eviction}};
    st_store *s = NULL;
    return st_open(&s, &o) == 0 ? s : NULL;
}

static st_cache *make_cache(st_store *s, const char *name, uint32_t parts)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    if (parts)
        cfg.partitions = parts;
    st_cache *c = NULL;
    return st_cache_create(s, &cfg, &c) == 0 ? c : NULL;
}

static void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* put/get of int key -> long value */
static int put_il(st_cache *c, const st_opctx *o, int32_t k, int64_t v)
{
    uint8_t kb[5], vb[9];
    return st_put(c, o, kb, ikey(kb, k), vb, lval(vb, v));
}

static int get_il(st_cache *c, int32_t k, int64_t *v)
{
    uint8_t kb[5];
    em_buf out = EM_BUF_INIT;
    int found = 0;
    int rc = st_get(c, NULL, kb, ikey(kb, k), &out, &found);
    if (!rc && found && out.len == 9 && out.p[0] == 4)
        *v = (int64_t)em_ld64(out.p + 1);
    em_buf_free(&out);
    return rc ? rc : (found ? 1 : 0);
}

TEST(store_config_defaults)
{
    st_cache_config c, d;
    st_cache_config_init(&c);
    CHECK_EQ(c.cache_mode, 2);
    CHECK_EQ(c.atomicity_mode, 1);
    CHECK_EQ(c.write_sync_mode, 2);
    CHECK_EQ(c.partitions, 1024);
    CHECK_EQ(c.max_query_iterators, 1024);
    CHECK_EQ(c.partition_loss_policy, 2);
    CHECK_EQ(c.rebalance_batch_size, 524288);
    CHECK_EQ(c.sql_index_inline_max_size, -1);
    CHECK_EQ(c.expiry.create_ms, -1);
    CHECK(c.copy_on_read && c.read_from_backup && c.eager_ttl);
    c.name = "x";
    c.sql_schema = "PUBLIC";
    uint8_t qe[3] = {1, 2, 3};
    c.query_entities = qe;
    c.query_entities_len = 3;
    REQUIRE_OK(st_cache_config_copy(&d, &c));
    CHECK(d.name != c.name && strcmp(d.name, "x") == 0);
    CHECK(strcmp(d.sql_schema, "PUBLIC") == 0);
    CHECK(d.query_entities != qe && d.query_entities_len == 3 && d.query_entities[2] == 3);
    CHECK(d.group_name == NULL && d.key_configs == NULL);
    st_cache_config_free(&d);
}

static void count_cache(void *arg, st_cache *c) { (void)c; ++*(int *)arg; }

TEST(store_registry)
{
    st_store *s = open_store(0, 0);
    REQUIRE(s);
    st_cache *c = make_cache(s, "myCache", 0);
    REQUIRE(c);
    CHECK_EQ(st_cache_id(c), 0x585F5D36);
    CHECK(st_cache_find(s, 0x585F5D36) == c);
    CHECK(st_cache_find(s, 1234) == NULL);
    CHECK(strcmp(st_cache_cfg(c)->name, "myCache") == 0);
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "myCache";
    st_cache *c2 = NULL;
    CHECK_EQ(st_cache_create(s, &cfg, &c2), EM_CACHEEXISTS);
    REQUIRE_OK(st_cache_get_or_create(s, &cfg, &c2));
    CHECK(c2 == c);
    /* many caches: the registry grows and keeps finding each one */
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "cache-%d", i);
        REQUIRE(make_cache(s, name, 16));
    }
    int n = 0;
    st_cache_each(s, count_cache, &n);
    CHECK_EQ(n, 101);
    for (int i = 0; i < 100; i += 2) {
        snprintf(name, sizeof name, "cache-%d", i);
        CHECK_OK(st_cache_destroy(s, em_hash_java_str((const uint8_t *)name, strlen(name))));
    }
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "cache-%d", i);
        st_cache *f = st_cache_find(s, em_hash_java_str((const uint8_t *)name, strlen(name)));
        CHECK((f != NULL) == (i % 2 == 1));
    }
    n = 0;
    st_cache_each(s, count_cache, &n);
    CHECK_EQ(n, 51);
    /* destroy: missing -> EM_NOCACHE; old pointer stays valid, ops refuse */
    CHECK_OK(put_il(c, NULL, 1, 10));
    CHECK_OK(st_cache_destroy(s, 0x585F5D36));
    CHECK_EQ(st_cache_destroy(s, 0x585F5D36), EM_NOCACHE);
    CHECK(st_cache_destroyed(c));
    CHECK(st_cache_find(s, 0x585F5D36) == NULL);
    int64_t v;
    CHECK_EQ(put_il(c, NULL, 1, 10), EM_NOCACHE);
    CHECK_EQ(get_il(c, 1, &v), EM_NOCACHE);
    int64_t sz;
    CHECK_EQ(st_size(c, 0, &sz), EM_NOCACHE);
    st_scan *sc;
    CHECK_EQ(st_scan_open(c, -1, &sc), EM_NOCACHE);
    /* recreate: a new, empty cache */
    st_cache *c3 = make_cache(s, "myCache", 0);
    REQUIRE(c3);
    CHECK(c3 != c);
    CHECK_EQ(get_il(c3, 1, &v), 0);
    CHECK_EQ(st_cache_create(s, &(st_cache_config){.name = NULL}, &c2), EM_INVAL);
    st_close(s);
}

TEST(store_put_get_basic)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "c", 0);
    REQUIRE(c);
    int64_t v = 0;
    CHECK_EQ(get_il(c, 7, &v), 0);                  /* missing */
    CHECK_OK(put_il(c, NULL, 7, 70));
    CHECK_EQ(get_il(c, 7, &v), 1);
    CHECK_EQ(v, 70);
    CHECK_OK(put_il(c, NULL, 7, 71));               /* overwrite */
    CHECK_EQ(get_il(c, 7, &v), 1);
    CHECK_EQ(v, 71);
    /* value of another type and size; grow well beyond the capacity */
    uint8_t kb[5], vb[300];
    char big[280];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    size_t kl = ikey(kb, 7);
    em_buf out = EM_BUF_INIT;
    int found;
    CHECK_OK(st_put(c, NULL, kb, kl, vb, sval(vb, "ab")));
    CHECK_OK(st_get(c, NULL, kb, kl, &out, &found));
    CHECK(found && out.len == 7 && memcmp(out.p + 5, "ab", 2) == 0);
    size_t bl = sval(vb, big);
    CHECK_OK(st_put(c, NULL, kb, kl, vb, bl));
    em_buf_reset(&out);
    CHECK_OK(st_get(c, NULL, kb, kl, &out, &found));
    CHECK(found && out.len == bl);
    CHECK_MEM(out.p, vb, bl);
    /* get appends to what the caller already has */
    CHECK_OK(st_get(c, NULL, kb, kl, &out, &found));
    CHECK_EQ(out.len, 2 * bl);
    /* many keys across partitions */
    for (int i = 0; i < 5000; i++)
        CHECK_OK(put_il(c, NULL, i * 7919, i));
    for (int i = 0; i < 5000; i++) {
        CHECK_EQ(get_il(c, i * 7919, &v), 1);
        CHECK_EQ(v, i);
    }
    int64_t sz;
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, 5001);     /* 5000 keys i*7919, plus key 7 */
    em_buf_free(&out);
    st_close(s);
}

TEST(store_key_identity)
{
    /* int 1 and long 1 have the same Java hash but different bytes: two keys */
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "c", 0);
    REQUIRE(c);
    uint8_t k1[5], k2[9], v[9];
    ikey(k1, 1);
    lval(k2, 1);
    CHECK_OK(st_put(c, NULL, k1, 5, v, lval(v, 100)));
    CHECK_OK(st_put(c, NULL, k2, 9, v, lval(v, 200)));
    em_buf out = EM_BUF_INIT;
    int f;
    CHECK_OK(st_get(c, NULL, k1, 5, &out, &f));
    CHECK(f && em_ld64(out.p + 1) == 100);
    em_buf_reset(&out);
    CHECK_OK(st_get(c, NULL, k2, 9, &out, &f));
    CHECK(f && em_ld64(out.p + 1) == 200);
    int64_t sz;
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, 2);
    em_buf_free(&out);
    st_close(s);
}

TEST(store_conditional_ops)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "c", 0);
    REQUIRE(c);
    uint8_t k[5], a[9], b[9], x[9];
    size_t kl = ikey(k, 42), al = lval(a, 1), bl = lval(b, 2), xl = lval(x, 3);
    em_buf out = EM_BUF_INIT;
    int r, f;

    /* replace of absent: nothing stored */
    CHECK_OK(st_replace(c, NULL, k, kl, a, al, &r));
    CHECK_EQ(r, 0);
    CHECK_OK(st_get_and_replace(c, NULL, k, kl, a, al, &out, &f));
    CHECK(!f && out.len == 0);
    CHECK_OK(st_replace_if_equals(c, NULL, k, kl, a, al, b, bl, &r));
    CHECK_EQ(r, 0);
    CHECK_OK(st_contains(c, NULL, k, kl, &f));
    CHECK_EQ(f, 0);
    CHECK_OK(st_remove(c, NULL, k, kl, &r));
    CHECK_EQ(r, 0);
    CHECK_OK(st_remove_if_equals(c, NULL, k, kl, a, al, &r));
    CHECK_EQ(r, 0);
    CHECK_OK(st_get_and_remove(c, NULL, k, kl, &out, &f));
    CHECK(!f && out.len == 0);

    /* put_if_absent: stores once */
    CHECK_OK(st_put_if_absent(c, NULL, k, kl, a, al, &r));
    CHECK_EQ(r, 1);
    CHECK_OK(st_put_if_absent(c, NULL, k, kl, b, bl, &r));
    CHECK_EQ(r, 0);
    CHECK_OK(st_get_and_put_if_absent(c, NULL, k, kl, b, bl, &out, &f));
    CHECK(f && out.len == al && memcmp(out.p, a, al) == 0);   /* existing value, unchanged */
    em_buf_reset(&out);
    CHECK_OK(st_local_peek(c, NULL, 0, k, kl, &out, &f));
    CHECK(f && memcmp(out.p, a, al) == 0);
    em_buf_reset(&out);
    /* a peek for backups (or on-heap copies) sees nothing on one node */
    CHECK_OK(st_local_peek(c, NULL, 1 << 3, k, kl, &out, &f));
    CHECK(!f && out.len == 0);
    CHECK_OK(st_local_peek(c, NULL, 1 << 4, k, kl, &out, &f));
    CHECK(!f && out.len == 0);
    CHECK_OK(st_local_peek(c, NULL, (1 << 2) | (1 << 5), k, kl, &out, &f));
    CHECK(f && memcmp(out.p, a, al) == 0);
    em_buf_reset(&out);

    /* replace / replace_if_equals */
    CHECK_OK(st_replace_if_equals(c, NULL, k, kl, b, bl, x, xl, &r));   /* wrong expect */
    CHECK_EQ(r, 0);
    CHECK_OK(st_replace_if_equals(c, NULL, k, kl, a, al, b, bl, &r));
    CHECK_EQ(r, 1);
    CHECK_OK(st_replace(c, NULL, k, kl, x, xl, &r));
    CHECK_EQ(r, 1);
    CHECK_OK(st_get_and_replace(c, NULL, k, kl, a, al, &out, &f));
    CHECK(f && memcmp(out.p, x, xl) == 0);
    em_buf_reset(&out);
    CHECK_OK(st_get_and_put(c, NULL, k, kl, b, bl, &out, &f));
    CHECK(f && memcmp(out.p, a, al) == 0);
    em_buf_reset(&out);

    /* remove_if_equals / get_and_remove / remove */
    CHECK_OK(st_remove_if_equals(c, NULL, k, kl, a, al, &r));
    CHECK_EQ(r, 0);
    CHECK_OK(st_remove_if_equals(c, NULL, k, kl, b, bl, &r));
    CHECK_EQ(r, 1);
    CHECK_OK(st_get_and_put(c, NULL, k, kl, a, al, &out, &f));
    CHECK(!f && out.len == 0);
    CHECK_OK(st_get_and_remove(c, NULL, k, kl, &out, &f));
    CHECK(f && memcmp(out.p, a, al) == 0);
    em_buf_reset(&out);
    CHECK_OK(st_get_and_put_if_absent(c, NULL, k, kl, x, xl, &out, &f));
    CHECK(!f && out.len == 0);
    CHECK_OK(st_remove(c, NULL, k, kl, &r));
    CHECK_EQ(r, 1);
    CHECK_OK(st_remove(c, NULL, k, kl, &r));
    CHECK_EQ(r, 0);

    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 0);
    CHECK_EQ(st.mem_bytes, 0);
    CHECK(st.puts >= 6 && st.removals == 3);
    em_buf_free(&out);
    st_close(s);
}

struct kv_seen { int n; int64_t sum; };
static int seen_fn(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    struct kv_seen *s = arg;
    if (klen != 5 || vlen != 9)
        return EM_INVAL;
    s->n++;
    s->sum += (int64_t)em_ld64(v + 1) - (int32_t)em_ld32(k + 1);
    return 0;
}

TEST(store_batch_ops)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "c", 0);
    REQUIRE(c);
    enum { N = 50 };
    uint8_t kb[N][5], vb[N][9];
    st_slice ks[N], vs[N];
    for (int i = 0; i < N; i++) {
        ks[i] = (st_slice){kb[i], ikey(kb[i], i)};
        vs[i] = (st_slice){vb[i], lval(vb[i], i + 1000)};
    }
    CHECK_OK(st_put_all(c, NULL, ks, vs, N / 2));
    int all;
    CHECK_OK(st_contains_all(c, NULL, ks, N / 2, &all));
    CHECK_EQ(all, 1);
    CHECK_OK(st_contains_all(c, NULL, ks, N, &all));
    CHECK_EQ(all, 0);
    struct kv_seen seen = {0, 0};
    CHECK_OK(st_get_all(c, NULL, ks, N, seen_fn, &seen));   /* only present keys */
    CHECK_EQ(seen.n, N / 2);
    CHECK_EQ(seen.sum, 1000 * (N / 2));
    CHECK_OK(st_remove_keys(c, NULL, ks, 10));
    int64_t sz;
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, N / 2 - 10);
    /* peek modes: one node holds primaries only, off the heap, no near
     * copies: NEAR (1), BACKUP (3), ONHEAP (4) alone count nothing */
    CHECK_OK(st_size(c, 1 << 2, &sz));
    CHECK_EQ(sz, N / 2 - 10);
    CHECK_OK(st_size(c, 1 << 3, &sz));
    CHECK_EQ(sz, 0);
    CHECK_OK(st_size(c, (1 << 1) | (1 << 3), &sz));
    CHECK_EQ(sz, 0);
    CHECK_OK(st_size(c, 1 << 4, &sz));
    CHECK_EQ(sz, 0);
    CHECK_OK(st_size(c, (1 << 2) | (1 << 4), &sz));
    CHECK_EQ(sz, 0);
    CHECK_OK(st_size(c, (1 << 4) | (1 << 5), &sz));
    CHECK_EQ(sz, N / 2 - 10);
    CHECK_OK(st_size(c, 1 << 5, &sz));
    CHECK_EQ(sz, N / 2 - 10);
    CHECK_OK(st_clear(c));
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, 0);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.mem_bytes, 0);
    CHECK_EQ(st.entries, 0);
    st_close(s);
}

/* ---- partitions, observer, replay ------------------------------------- */

struct rec { int kind; int32_t cache; uint32_t part; uint8_t k[64]; uint32_t kl; uint8_t v[64]; uint32_t vl; int64_t at; };
struct log { struct rec r[256]; int n; int fail; };

static int log_obs(void *arg, const st_update *u)
{
    struct log *l = arg;
    if (l->fail)
        return EM_IO;
    if (l->n >= 256)
        return 0;
    struct rec *r = &l->r[l->n++];
    r->kind = u->kind;
    r->cache = u->cache_id;
    r->part = u->partition;
    r->kl = u->klen < 64 ? u->klen : 0;
    r->vl = u->vlen < 64 ? u->vlen : 0;
    if (u->key)
        memcpy(r->k, u->key, r->kl);
    if (u->val)
        memcpy(r->v, u->val, r->vl);
    r->at = u->expire_at_ms;
    return 0;
}

TEST(store_partition_examples)
{
    /* reference §4.2, P = 1024: int 1 -> 1, int 12345 -> 57, int -1 -> 0, "abc" -> 99 */
    st_store *s = open_store(0, 0);
    static struct log l;
    memset(&l, 0, sizeof l);
    st_set_observer(s, log_obs, &l);
    st_cache *c = make_cache(s, "parts", 0);
    REQUIRE(c);
    uint8_t kb[16], vb[9];
    size_t vl = lval(vb, 5);
    CHECK_OK(st_put(c, NULL, kb, ikey(kb, 1), vb, vl));
    CHECK_OK(st_put(c, NULL, kb, ikey(kb, 12345), vb, vl));
    CHECK_OK(st_put(c, NULL, kb, ikey(kb, -1), vb, vl));
    CHECK_OK(st_put(c, NULL, kb, sval(kb, "abc"), vb, vl));
    REQUIRE_EQ(l.n, 5);
    CHECK_EQ(l.r[0].kind, ST_UPD_CACHE_CREATE);
    CHECK_EQ(l.r[1].part, 1);
    CHECK_EQ(l.r[2].part, 57);
    CHECK_EQ(l.r[3].part, 0);
    CHECK_EQ(l.r[4].part, 99);
    CHECK_EQ(l.r[4].kind, ST_UPD_PUT);
    CHECK_EQ(l.r[4].cache, st_cache_id(c));
    /* a single-partition scan of 57 returns exactly key 12345 */
    st_scan *sc;
    REQUIRE_OK(st_scan_open(c, 57, &sc));
    struct kv_seen seen = {0, 0};
    int more;
    CHECK_OK(st_scan_next_page(sc, 10, seen_fn, &seen, &more));
    CHECK_EQ(seen.n, 1);
    CHECK_EQ(seen.sum, 5 - 12345);
    CHECK_EQ(more, 0);
    st_scan_close(sc);
    CHECK_EQ(st_scan_open(c, 1024, &sc), EM_RANGE);
    /* a non-power-of-two partition count uses |h mod P| */
    st_cache *c2 = make_cache(s, "p1000", 1000);
    REQUIRE(c2);
    CHECK_OK(st_put(c2, NULL, kb, ikey(kb, -12345), vb, vl));
    CHECK_EQ(l.r[l.n - 1].part, 345);
    st_close(s);
}

TEST(store_observer_and_replay)
{
    st_store *s = open_store(0, 0), *r = open_store(0, 0);
    REQUIRE(s && r);
    static struct log l;
    memset(&l, 0, sizeof l);
    st_set_observer(s, log_obs, &l);
    st_cache *c = make_cache(s, "wal", 0);
    REQUIRE(c);
    for (int i = 0; i < 20; i++)
        CHECK_OK(put_il(c, NULL, i, i * 10));
    int rm;
    uint8_t kb[5];
    for (int i = 0; i < 20; i += 3)
        CHECK_OK(st_remove(c, NULL, kb, ikey(kb, i), &rm));
    CHECK_OK(put_il(c, NULL, 1, 111));
    /* a failing observer fails the op and changes nothing */
    l.fail = 1;
    CHECK_EQ(put_il(c, NULL, 1, 999), EM_IO);
    CHECK_EQ(put_il(c, NULL, 500, 1), EM_IO);
    CHECK_EQ(st_remove(c, NULL, kb, ikey(kb, 2), &rm), EM_IO);
    l.fail = 0;
    int64_t v;
    CHECK_EQ(get_il(c, 1, &v), 1);
    CHECK_EQ(v, 111);
    CHECK_EQ(get_il(c, 500, &v), 0);
    CHECK_EQ(get_il(c, 2, &v), 1);
    /* replay the log into a fresh store: same content */
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "wal";
    for (int i = 0; i < l.n; i++) {
        struct rec *x = &l.r[i];
        st_update u = {.kind = (enum st_update_kind)x->kind, .cache_id = x->cache,
                       .partition = x->part, .key = x->k, .klen = x->kl, .val = x->v,
                       .vlen = x->vl, .expire_at_ms = x->at, .cfg = &cfg};
        CHECK_OK(st_apply(r, &u));
    }
    st_cache *rc = st_cache_find(r, st_cache_id(c));
    REQUIRE(rc);
    for (int i = 0; i < 20; i++) {
        int64_t a = -1, b = -1;
        CHECK_EQ(get_il(c, i, &a), get_il(rc, i, &b));
        CHECK_EQ(a, b);
    }
    /* clear and destroy are logged and replay too */
    int before = l.n;
    CHECK_OK(st_clear(c));
    CHECK(l.n > before);
    for (int i = before; i < l.n; i++) {
        CHECK_EQ(l.r[i].kind, ST_UPD_CLEAR);
        st_update u = {.kind = ST_UPD_CLEAR, .cache_id = l.r[i].cache, .partition = l.r[i].part};
        CHECK_OK(st_apply(r, &u));
    }
    int64_t sz;
    CHECK_OK(st_size(rc, 0, &sz));
    CHECK_EQ(sz, 0);
    CHECK_OK(st_cache_destroy(s, st_cache_id(c)));
    CHECK_EQ(l.r[l.n - 1].kind, ST_UPD_CACHE_DESTROY);
    st_update d = {.kind = ST_UPD_CACHE_DESTROY, .cache_id = l.r[l.n - 1].cache};
    CHECK_OK(st_apply(r, &d));
    CHECK(st_cache_find(r, st_cache_id(c)) == NULL);
    CHECK_EQ(st_apply(r, &d), EM_NOCACHE);
    st_close(s);
    st_close(r);
}

static int count_obs(void *arg, const st_update *u)
{
    if (u->kind == ST_UPD_PUT)
        ++*(int *)arg;
    else if (u->kind == ST_UPD_REMOVE)
        --*(int *)arg;
    return 0;
}

TEST(store_observer_only_applied)
{
    /* writes refused for memory are never reported; evictions are reported
     * as removals, so the log's live count matches the store */
    st_store *s = open_store(16 * 1024, 0);
    int live = 0;
    st_set_observer(s, count_obs, &live);
    st_cache *c = make_cache(s, "o", 16);
    REQUIRE(c);
    int rc = 0, i;
    for (i = 0; i < 10000 && !rc; i++)
        rc = put_il(c, NULL, i, i);
    CHECK_EQ(rc, EM_MEMLIMIT);
    int64_t sz;
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(live, sz);
    st_close(s);
    s = open_store(16 * 1024, 1);
    live = 0;
    st_set_observer(s, count_obs, &live);
    c = make_cache(s, "o", 16);
    REQUIRE(c);
    for (i = 0; i < 3000; i++)
        CHECK_OK(put_il(c, NULL, i, i));
    CHECK_OK(st_size(c, 0, &sz));
    CHECK(sz < 3000);
    CHECK_EQ(live, sz);
    st_close(s);
}

/* ---- expiry ----------------------------------------------------------- */

TEST(store_expiry_policies)
{
    st_store *s = open_store(0, 0);
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "exp";
    cfg.has_expiry = 1;
    cfg.expiry = (st_expiry){300, -2, -2};  /* created entries live 300 ms */
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(s, &cfg, &c));
    int64_t v;
    CHECK_OK(put_il(c, NULL, 1, 1));
    CHECK_OK(put_il(c, NULL, 2, 2));
    st_expiry eternal = ST_EXPIRY_ETERNAL;
    st_opctx keep = {.expiry = &eternal};
    CHECK_OK(put_il(c, &keep, 3, 3));           /* per-op policy: eternal */
    CHECK_EQ(get_il(c, 1, &v), 1);
    msleep(150);
    CHECK_OK(put_il(c, NULL, 2, 22));           /* update: unchanged deadline */
    msleep(250);
    CHECK_EQ(get_il(c, 1, &v), 0);              /* expired: invisible at once */
    CHECK_EQ(get_il(c, 2, &v), 0);
    CHECK_EQ(get_il(c, 3, &v), 1);
    int64_t sz;
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, 1);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.expirations, 2);
    CHECK_EQ(st.entries, 1);

    /* duration 0: written and expired at once, previous value gone too */
    st_expiry now0 = {0, 0, -2};
    st_opctx zero = {.expiry = &now0};
    CHECK_OK(put_il(c, &zero, 4, 4));
    CHECK_EQ(get_il(c, 4, &v), 0);
    CHECK_OK(put_il(c, &zero, 3, 33));
    CHECK_EQ(get_il(c, 3, &v), 0);

    /* access expiry: each get pushes the deadline out */
    st_expiry acc = {-1, -2, 300};
    st_opctx ao = {.expiry = &acc};
    CHECK_OK(put_il(c, &ao, 5, 5));             /* created eternal */
    uint8_t kb[5];
    em_buf out = EM_BUF_INIT;
    int f;
    CHECK_OK(st_get(c, &ao, kb, ikey(kb, 5), &out, &f));   /* now 300 ms */
    for (int i = 0; i < 4; i++) {
        msleep(120);
        em_buf_reset(&out);
        CHECK_OK(st_get(c, &ao, kb, ikey(kb, 5), &out, &f));
        CHECK(f);
    }
    msleep(400);
    CHECK_OK(st_local_peek(c, NULL, 0, kb, ikey(kb, 5), &out, &f));
    CHECK_EQ(f, 0);
    /* update -1 makes an expiring entry eternal */
    CHECK_OK(put_il(c, NULL, 6, 6));            /* cache policy: 300 ms */
    st_expiry upd = {-2, -1, -2};
    st_opctx uo = {.expiry = &upd};
    CHECK_OK(put_il(c, &uo, 6, 66));
    msleep(400);
    CHECK_EQ(get_il(c, 6, &v), 1);
    CHECK_EQ(v, 66);
    em_buf_free(&out);
    st_close(s);
}

TEST(store_expiry_reclaim_without_access)
{
    /* expired entries' memory comes back through the tick, with no reads */
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "t", 0);
    REQUIRE(c);
    st_expiry e = {300, -2, -2};
    st_opctx o = {.expiry = &e};
    for (int i = 0; i < 3000; i++)
        CHECK_OK(put_il(c, &o, i, i));
    for (int i = 3000; i < 3100; i++)
        CHECK_OK(put_il(c, NULL, i, i));
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    /* slow builds (TSan) may already see early entries expire: writes
     * reclaim a few due entries each */
    CHECK_EQ(st.entries + st.expirations, 3100);
    uint64_t mem0 = st.mem_bytes, early = st.expirations;
    msleep(350);
    int got = 0, r;
    while ((r = st_expire_tick(s, 500)) > 0)
        got += r;
    CHECK_EQ(got, 3000 - (int)early);
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 100);
    CHECK_EQ(st.expirations, 3000);
    CHECK(st.mem_bytes < mem0 / 10);
    CHECK_EQ(st_expire_tick(s, 500), 0);
    st_close(s);
}

TEST(store_expiry_tick_many_caches)
{
    /* the tick walks more caches than fit its window (64) across calls */
    st_store *s = open_store(0, 0);
    st_expiry e = {50, -2, -2};
    st_opctx o = {.expiry = &e};
    char name[16];
    st_cache *cs[100];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "c%d", i);
        cs[i] = make_cache(s, name, 8);
        REQUIRE(cs[i]);
        CHECK_OK(put_il(cs[i], &o, i, i));
        CHECK_OK(put_il(cs[i], NULL, 1000 + i, i));
    }
    msleep(100);
    int got = 0;
    for (int i = 0; i < 10 && got < 100; i++)
        got += st_expire_tick(s, 1000);
    CHECK_EQ(got, 100);
    for (int i = 0; i < 100; i++) {
        st_cache_stats st;
        st_cache_stats_get(cs[i], &st);
        CHECK_EQ(st.entries, 1);
        CHECK_EQ(st.expirations, 1);
    }
    st_close(s);
}

/* ---- memory limit and eviction ---------------------------------------- */

TEST(store_memlimit_no_damage)
{
    st_store *s = open_store(64 * 1024, 0);
    st_cache *c = make_cache(s, "m", 0);
    REQUIRE(c);
    int i, rc = 0;
    for (i = 0; i < 100000; i++)
        if ((rc = put_il(c, NULL, i, i)) != 0)
            break;
    CHECK_EQ(rc, EM_MEMLIMIT);
    int stored = i;
    CHECK(stored > 100);
    st_region_stats rs;
    st_region_stats_get(s, NULL, &rs);
    CHECK(rs.used_bytes <= 64 * 1024);
    CHECK_EQ(rs.max_bytes, 64 * 1024);
    /* nothing already stored is damaged; overwrites in place still work */
    int64_t v;
    for (int j = 0; j < stored; j++) {
        CHECK_EQ(get_il(c, j, &v), 1);
        CHECK_EQ(v, j);
    }
    CHECK_OK(put_il(c, NULL, 0, -5));
    CHECK_EQ(get_il(c, 0, &v), 1);
    CHECK_EQ(v, -5);
    CHECK_EQ(put_il(c, NULL, stored + 1, 1), EM_MEMLIMIT);
    int64_t sz;
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, stored);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.evictions, 0);
    CHECK_EQ(st.mem_bytes, rs.used_bytes);
    /* freeing makes room again */
    int r;
    uint8_t kb[5];
    CHECK_OK(st_remove(c, NULL, kb, ikey(kb, 3), &r));
    CHECK_OK(put_il(c, NULL, stored + 1, 1));
    st_close(s);
}

TEST(store_eviction_random2lru)
{
    st_store *s = open_store(256 * 1024, 1);
    st_cache *c = make_cache(s, "e", 64);
    REQUIRE(c);
    /* keys 0..99 are hot: one is read after every write (and put back on a
     * miss, cache-aside).  Random-2-LRU keeps them: a hot key is evicted only
     * when sampled together with a still newer entry.  Random eviction would
     * miss ~2.3% of the hot reads here (100 evictions between reads of a key,
     * ~4300 entries); LRU-ish eviction well under 1%. */
    int64_t v;
    for (int i = 0; i < 100; i++)
        CHECK_OK(put_il(c, NULL, i, i));
    int misses = 0;
    for (int i = 100; i < 20000; i++) {
        CHECK_OK(put_il(c, NULL, i, i));
        if (get_il(c, i % 100, &v) != 1) {
            misses++;
            CHECK_OK(put_il(c, NULL, i % 100, i % 100));
        }
    }
    st_region_stats rs;
    st_region_stats_get(s, NULL, &rs);
    CHECK(rs.used_bytes <= 256 * 1024);
    CHECK(rs.evictions > 10000);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.evictions, rs.evictions);
    CHECK_EQ(st.entries + st.evictions, 20000 + misses);
    CHECK(misses < 199);
    /* a cache that opts out of eviction fails instead */
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "noevict";
    cfg.eviction_enabled = 0;
    st_cache *n = NULL;
    REQUIRE_OK(st_cache_create(s, &cfg, &n));
    int rc = 0;
    for (int i = 0; i < 100000 && !rc; i++)
        rc = put_il(n, NULL, i, i);
    CHECK_EQ(rc, EM_MEMLIMIT);
    st_close(s);
}

/* ---- scans ------------------------------------------------------------ */

struct scan_seen { uint8_t *cnt; int n; int32_t max; };
static int scan_fn(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    struct scan_seen *s = arg;
    (void)v;
    if (klen != 5 || vlen != 9)
        return EM_INVAL;
    int32_t key = (int32_t)em_ld32(k + 1);
    if (key < 0 || key >= s->max)
        return EM_RANGE;
    s->cnt[key]++;
    s->n++;
    return 0;
}

/* filled: a new cache of n int keys 0..n-1 (NULL if any put failed). */
static st_cache *filled(st_store *s, const char *name, int n)
{
    st_cache *c = make_cache(s, name, 0);
    for (int i = 0; c && i < n; i++)
        if (put_il(c, NULL, i, i) != 0)
            return NULL;
    return c;
}

TEST(store_scan_paging)
{
    st_store *s = open_store(0, 0);
    enum { N = 10000 };
    st_cache *c = filled(s, "scan", N);
    REQUIRE(c);
    struct scan_seen seen = {em_calloc(2 * N, 1), 0, 2 * N};
    st_scan *sc;
    REQUIRE_OK(st_scan_open(c, -1, &sc));
    int more = 1, pages = 0;
    while (more) {
        int before = seen.n;
        CHECK_OK(st_scan_next_page(sc, 7, scan_fn, &seen, &more));
        CHECK(seen.n - before <= 7);
        CHECK(seen.n - before == 7 || !more);
        /* mutate during the scan: drop 0..999, add N..N+999 */
        if (pages == 100)
            for (int i = 0; i < 1000; i++) {
                int r;
                uint8_t kb[5];
                CHECK_OK(st_remove(c, NULL, kb, ikey(kb, i), &r));
                CHECK_OK(put_il(c, NULL, N + i, i));
            }
        pages++;
    }
    st_scan_close(sc);
    CHECK(pages > 1000);
    /* every key present for the whole scan (1000..N-1) exactly once; the
     * others at most once */
    for (int i = 0; i < 2 * N; i++) {
        if (i >= 1000 && i < N)
            CHECK_EQ(seen.cnt[i], 1);
        else
            CHECK(seen.cnt[i] <= 1);
    }
    /* single partition: only that partition's keys, all of them */
    memset(seen.cnt, 0, 2 * N);
    seen.n = 0;
    REQUIRE_OK(st_scan_open(c, 3, &sc));
    more = 1;
    while (more)
        CHECK_OK(st_scan_next_page(sc, 2, scan_fn, &seen, &more));
    st_scan_close(sc);
    int expect = 0;
    for (int i = 1000; i < N + 1000; i++)
        expect += ((uint32_t)i ^ ((uint32_t)i >> 16)) % 1024 == 3;
    CHECK_EQ(seen.n, expect);
    CHECK(expect > 0);
    /* empty cache: one empty page, more = 0 */
    st_cache *e = make_cache(s, "empty", 0);
    REQUIRE_OK(st_scan_open(e, -1, &sc));
    seen.n = 0;
    CHECK_OK(st_scan_next_page(sc, 100, scan_fn, &seen, &more));
    CHECK(seen.n == 0 && more == 0);
    st_scan_close(sc);
    /* a scan on a cache destroyed under it reports EM_NOCACHE */
    REQUIRE_OK(st_scan_open(c, -1, &sc));
    CHECK_OK(st_scan_next_page(sc, 5, scan_fn, &seen, &more));
    CHECK_OK(st_cache_destroy(s, st_cache_id(c)));
    int rc = 0;
    while (!rc && more)
        rc = st_scan_next_page(sc, 1000, scan_fn, &seen, &more);
    CHECK_EQ(rc, EM_NOCACHE);
    st_scan_close(sc);
    em_free(seen.cnt);
    st_close(s);
}

/* ---- allocation guarantees -------------------------------------------- */

TEST(store_alloc_get_and_overwrite)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "alloc", 0);
    REQUIRE(c);
    uint8_t kb[5], vb[64];
    char str[40];
    for (int i = 0; i < 1000; i++) {
        snprintf(str, sizeof str, "value-%d-xxxxxxxxxx", i);
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, i), vb, sval(vb, str)));
    }
    em_buf out = EM_BUF_INIT;
    int f;
    CHECK_OK(em_buf_reserve(&out, 256));
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < 10000; i++) {
        em_buf_reset(&out);
        CHECK_OK(st_get(c, NULL, kb, ikey(kb, i % 1000), &out, &f));
    }
    /* misses allocate nothing either */
    for (int i = 0; i < 1000; i++)
        CHECK_OK(st_get(c, NULL, kb, ikey(kb, 100000 + i), &out, &f));
    em_mem_stats m1 = em_mem_thread();
    CHECK_EQ(m1.bytes - m0.bytes, 0);
    CHECK_EQ(m1.allocs - m0.allocs, 0);
    /* overwrites with values no larger than the old ones */
    m0 = em_mem_thread();
    for (int i = 0; i < 10000; i++) {
        snprintf(str, sizeof str, "v%d", i);
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, i % 1000), vb, sval(vb, str)));
    }
    m1 = em_mem_thread();
    CHECK_EQ(m1.bytes - m0.bytes, 0);
    CHECK_EQ(m1.allocs - m0.allocs, 0);
    /* contains and find allocate nothing */
    m0 = em_mem_thread();
    for (int i = 0; i < 1000; i++) {
        CHECK_OK(st_contains(c, NULL, kb, ikey(kb, i), &f));
        CHECK(st_cache_find(s, st_cache_id(c)) == c);
    }
    m1 = em_mem_thread();
    CHECK_EQ(m1.allocs - m0.allocs, 0);
    em_buf_free(&out);
    st_close(s);
}

TEST(store_alloc_failure)
{
    /* out of memory on insert: EM_NOMEM, the store stays consistent */
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "oom", 4);
    REQUIRE(c);
    int fails = 0;
    for (int i = 0; i < 200; i++) {
        em_mem_fail_after((uint64_t)(i % 3) + 1, 0);
        int rc = put_il(c, NULL, i, i);
        em_mem_fail_after(0, 0);
        CHECK(rc == 0 || rc == EM_NOMEM);
        fails += rc == EM_NOMEM;
        int64_t v;
        CHECK_EQ(get_il(c, i, &v), rc == 0 ? 1 : 0);
    }
    CHECK(fails > 0);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 200 - fails);
    st_close(s);
}

/* ---- randomised model check ------------------------------------------- */

TEST(store_model_random_ops)
{
    /* 200 000 random operations on 64 keys against a plain array model;
     * every result and, at the end, a full scan must agree with it */
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "model", 4);
    REQUIRE(c);
    enum { K = 64 };
    int64_t model[K];
    int present[K] = {0};
    uint64_t rng = 88172645463325252ULL;
    em_buf out = EM_BUF_INIT;
    uint8_t kb[5], vb[64];
    char str[48];
    for (int step = 0; step < 200000; step++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int k = (int)(rng % K), op = (int)((rng >> 8) % 11), f = -1, r = -1;
        int64_t nv = (int64_t)(rng >> 20) % 1000;
        /* values are strings of varying length, so overwrites both fit and
         * outgrow the entry's capacity */
        snprintf(str, sizeof str, "%lld%.*s", (long long)nv, (int)(nv % 30), "------------------------------");
        size_t kl = ikey(kb, k), vl = sval(vb, str);
        int64_t ev = (rng >> 40) % 2 && present[k] ? model[k] : nv + 1;
        char es[48];
        snprintf(es, sizeof es, "%lld%.*s", (long long)ev, (int)(ev % 30), "------------------------------");
        uint8_t ebuf[64];
        size_t el = sval(ebuf, es);
        em_buf_reset(&out);
        int rc = 0;
        switch (op) {
        case 0: rc = st_put(c, NULL, kb, kl, vb, vl); present[k] = 1; model[k] = nv; break;
        case 1:
            rc = st_get(c, NULL, kb, kl, &out, &f);
            CHECK_EQ(f, present[k]);
            if (f) {
                snprintf(es, sizeof es, "%lld%.*s", (long long)model[k], (int)(model[k] % 30), "------------------------------");
                CHECK(out.len == 5 + strlen(es) && memcmp(out.p + 5, es, strlen(es)) == 0);
            }
            break;
        case 2: rc = st_remove(c, NULL, kb, kl, &r); CHECK_EQ(r, present[k]); present[k] = 0; break;
        case 3:
            rc = st_replace(c, NULL, kb, kl, vb, vl, &r);
            CHECK_EQ(r, present[k]);
            if (r) model[k] = nv;
            break;
        case 4:
            rc = st_put_if_absent(c, NULL, kb, kl, vb, vl, &r);
            CHECK_EQ(r, !present[k]);
            if (r) { present[k] = 1; model[k] = nv; }
            break;
        case 5: {
            int eq = present[k] && model[k] == ev;
            rc = st_replace_if_equals(c, NULL, kb, kl, ebuf, el, vb, vl, &r);
            CHECK_EQ(r, eq);
            if (r) model[k] = nv;
            break;
        }
        case 6: {
            int eq = present[k] && model[k] == ev;
            rc = st_remove_if_equals(c, NULL, kb, kl, ebuf, el, &r);
            CHECK_EQ(r, eq);
            if (r) present[k] = 0;
            break;
        }
        case 7:
            rc = st_get_and_put(c, NULL, kb, kl, vb, vl, &out, &f);
            CHECK_EQ(f, present[k]);
            present[k] = 1; model[k] = nv;
            break;
        case 8:
            rc = st_get_and_remove(c, NULL, kb, kl, &out, &f);
            CHECK_EQ(f, present[k]);
            present[k] = 0;
            break;
        case 9:
            rc = st_get_and_replace(c, NULL, kb, kl, vb, vl, &out, &f);
            CHECK_EQ(f, present[k]);
            if (f) model[k] = nv;
            break;
        default:
            if (step % 1000 == 0) {
                rc = st_clear(c);
                memset(present, 0, sizeof present);
            } else {
                rc = st_contains(c, NULL, kb, kl, &f);
                CHECK_EQ(f, present[k]);
            }
        }
        CHECK_OK(rc);
        if (test_failed())
            break;
    }
    int64_t sz, n = 0;
    for (int k = 0; k < K; k++)
        n += present[k];
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, n);
    st_cache_stats st;
    st_cache_stats_get(c, &st);
    CHECK_EQ(st.entries, n);
    em_buf_free(&out);
    st_close(s);
}

/* ---- partition update counters --------------------------------------------- */

static uint64_t part_cntr(st_cache *c, uint32_t part)
{
    uint64_t cntr = 0, size = 0;
    CHECK_OK(st_part_info(c, part, &cntr, &size));
    return cntr;
}

static int refuse_obs(void *arg, const st_update *u)
{
    (void)u;
    return *(int *)arg;
}

/* A copy loaded from another owner takes its counter, never a lower one -
 * and an empty owner's 0 leaves a fresh copy at 0 (idle-verify compares
 * counters, so one more than the owner would be a conflict). */
TEST(store_part_raise_takes_the_owners_counter)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "raise", 2);
    REQUIRE_OK(st_part_raise(c, 0, 0));
    CHECK_EQ(part_cntr(c, 0), 0);
    REQUIRE_OK(st_part_raise(c, 0, 7));
    CHECK_EQ(part_cntr(c, 0), 7);
    REQUIRE_OK(st_part_raise(c, 0, 3));
    CHECK_EQ(part_cntr(c, 0), 7);
    REQUIRE_OK(st_part_raise(c, 0, 0));
    CHECK_EQ(part_cntr(c, 0), 7);
    CHECK_EQ(part_cntr(c, 1), 0);
    CHECK_EQ(st_part_raise(c, 2, 1), EM_RANGE);
    /* A copy that caught up takes its primary's, even a lower one. */
    REQUIRE_OK(st_part_set(c, 0, 5));
    CHECK_EQ(part_cntr(c, 0), 5);
    CHECK_EQ(st_part_set(c, 2, 1), EM_RANGE);
    st_close(s);
}

TEST(store_part_counter_advances_per_write)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "cntr", 1);   /* one partition: every key in it */
    CHECK_EQ(part_cntr(c, 0), 0);
    for (int i = 0; i < 10; i++)
        REQUIRE_OK(put_il(c, NULL, i, i));
    CHECK_EQ(part_cntr(c, 0), 10);
    uint8_t k[8];
    int removed = 0;
    REQUIRE_OK(st_remove(c, NULL, k, ikey(k, 3), &removed));
    CHECK_EQ(removed, 1);
    CHECK_EQ(part_cntr(c, 0), 11);
    REQUIRE_OK(st_remove(c, NULL, k, ikey(k, 3), &removed));   /* nothing removed */
    CHECK_EQ(part_cntr(c, 0), 11);
    uint64_t cntr = 0, size = 0;
    REQUIRE_OK(st_part_info(c, 0, &cntr, &size));
    CHECK_EQ(size, 9);
    CHECK_EQ(st_part_info(c, 1, &cntr, &size), EM_RANGE);

    /* A write the observer refuses did not happen: the counter stays. */
    int refuse = EM_IO;
    st_set_observer(s, refuse_obs, &refuse);
    CHECK_EQ(put_il(c, NULL, 100, 1), EM_IO);
    CHECK_EQ(part_cntr(c, 0), 11);
    refuse = 0;
    REQUIRE_OK(put_il(c, NULL, 100, 1));
    CHECK_EQ(part_cntr(c, 0), 12);
    st_set_observer(s, NULL, NULL);

    /* Replay raises the counter to the record's, and never lowers it. */
    uint8_t v[16];
    size_t kl = ikey(k, 200), vl = lval(v, 5);
    st_update u = {.kind = ST_UPD_PUT, .cache_id = st_cache_id(c), .partition = 0,
                   .key = k, .klen = (uint32_t)kl, .val = v, .vlen = (uint32_t)vl,
                   .cntr = 50};
    REQUIRE_OK(st_apply(s, &u));
    CHECK_EQ(part_cntr(c, 0), 50);
    u.cntr = 20;
    REQUIRE_OK(st_apply(s, &u));
    CHECK_EQ(part_cntr(c, 0), 50);
    st_close(s);
}

/* On a cluster the peek modes count by the copy each partition is here
 * (st_set_copy_fn): even partitions primary, odd ones backup, partition 3
 * not held at all. */
static int copy_by_parity(void *arg, const st_cache_config *cfg, int32_t id, uint32_t part)
{
    (void)cfg; (void)id;
    (*(int *)arg)++;
    return part == 3 ? ST_COPY_NONE : part % 2 ? ST_COPY_BACKUP : ST_COPY_PRIMARY;
}

TEST(store_peek_modes_by_copy)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "copies", 4);
    CHECK(c);
    int64_t want[4] = {0, 0, 0, 0};
    for (int32_t k = 0; k < 200; k++) {
        CHECK_OK(put_il(c, NULL, k, k));
        want[bin_partition(k, 4)]++;     /* an int key hashes to itself */
    }
    int calls = 0;
    st_set_copy_fn(s, copy_by_parity, &calls);
    int64_t sz;
    CHECK_OK(st_size(c, 1 << ST_PEEK_PRIMARY, &sz));
    CHECK_EQ(sz, want[0] + want[2]);
    CHECK_OK(st_size(c, 1 << ST_PEEK_BACKUP, &sz));
    CHECK_EQ(sz, want[1]);
    CHECK_OK(st_size(c, 0, &sz));
    CHECK_EQ(sz, want[0] + want[1] + want[2]);
    CHECK(calls > 0);
    /* local peek: a key of a backup partition reads as absent for PRIMARY */
    em_buf out = EM_BUF_INIT;
    int seen[4] = {0, 0, 0, 0};
    for (int32_t k = 0; k < 200; k++) {
        uint8_t kb[5];
        ikey(kb, k);
        uint32_t p = bin_partition(k, 4);
        int found;
        em_buf_reset(&out);
        CHECK_OK(st_local_peek(c, NULL, 1 << ST_PEEK_PRIMARY, kb, 5, &out, &found));
        CHECK_EQ(found, p == 0 || p == 2);
        em_buf_reset(&out);
        CHECK_OK(st_local_peek(c, NULL, 0, kb, 5, &out, &found));
        CHECK_EQ(found, p != 3);
        seen[p] = 1;
    }
    CHECK(seen[1] && seen[3]);
    st_set_copy_fn(s, NULL, NULL);
    CHECK_OK(st_size(c, 1 << ST_PEEK_BACKUP, &sz));
    CHECK_EQ(sz, 0);
    em_buf_free(&out);
    st_close(s);
}

/* Batch prefetch hints (store.h st_pf_*): only int, long and ASCII string
 * keys are prepared, bounds are checked against hostile lengths, the same
 * key always lands on the same partition and tag, and the steps change
 * nothing and allocate nothing, whether the key is present or not. */
TEST(store_prefetch_hints)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "pf", 0);
    REQUIRE(c);
    uint8_t kb[64];
    st_pf a, b;
    /* an empty cache: no table yet */
    size_t kl = sval(kb, "key:0000000001");
    CHECK_EQ(st_pf_key(c, kb, kl, &a), 1);
    st_pf_slot(c, &a);
    st_pf_entry(c, &a, 1024);
    for (int i = 0; i < 2000; i++)
        CHECK_OK(put_il(c, NULL, i, i * 3));
    CHECK_EQ(st_pf_key(c, kb, ikey(kb, 42), &a), 1);
    CHECK_EQ(st_pf_key(c, kb, ikey(kb, 42), &b), 1);
    CHECK(a.part == b.part && a.tag == b.tag);
    CHECK_EQ(st_pf_key(c, kb, 4, &b), 0);           /* int cut short */
    CHECK_EQ(st_pf_key(c, kb, lval(kb, 42), &b), 1);
    CHECK_EQ(st_pf_key(c, kb, 8, &b), 0);           /* long cut short */
    kl = sval(kb, "abc");
    CHECK_EQ(st_pf_key(c, kb, kl, &b), 1);
    CHECK_EQ(st_pf_key(c, kb, kl - 1, &b), 0);      /* string longer than the bytes */
    em_st32(kb + 1, 0xffffffffu);
    CHECK_EQ(st_pf_key(c, kb, kl, &b), 0);          /* hostile length */
    kl = sval(kb, "\xc3\xa9t\xc3\xa9");
    CHECK_EQ(st_pf_key(c, kb, kl, &b), 0);          /* not ASCII: left to the real path */
    kb[0] = 101;
    CHECK_EQ(st_pf_key(c, kb, 1, &b), 0);           /* null */
    CHECK_EQ(st_pf_key(c, kb, 0, &b), 0);
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < 3000; i++) {                /* present and absent keys */
        if (st_pf_key(c, kb, ikey(kb, i), &a) != 1) {
            CHECK(0);
            break;
        }
        st_pf_slot(c, &a);
        st_pf_entry(c, &a, (size_t)i);
    }
    em_mem_stats m1 = em_mem_thread();
    CHECK_EQ(m1.allocs - m0.allocs, 0);
    int64_t v = 0;
    for (int i = 0; i < 2000; i += 97) {
        CHECK_EQ(get_il(c, i, &v), 1);
        CHECK_EQ(v, (int64_t)i * 3);
    }
    CHECK_EQ(get_il(c, 2500, &v), 0);
    st_close(s);
}

/* A scan through a fetch hook (a cluster scan's shape): every partition's
 * snapshot comes from the hook, and a snapshot whose records run past its
 * end is refused, not read past. */
struct fetch_ctx { int calls; int cut; };
static int fetch_local(void *arg, st_cache *c, uint32_t part, em_buf *snap)
{
    struct fetch_ctx *f = arg;
    f->calls++;
    int rc = st_part_snapshot(c, part, snap);
    if (!rc && f->cut && snap->len)
        snap->len -= 1;             /* the last record loses its last byte */
    return rc;
}

TEST(store_scan_via_fetch_hook)
{
    st_store *s = open_store(0, 0);
    enum { N = 3000 };
    st_cache *c = filled(s, "scanvia", N);
    REQUIRE(c);
    struct scan_seen seen = {em_calloc(N, 1), 0, N};
    struct fetch_ctx f = {0, 0};
    st_scan *sc;
    REQUIRE_OK(st_scan_open_via(c, -1, fetch_local, &f, &sc));
    int more = 1;
    while (more)
        CHECK_OK(st_scan_next_page(sc, 100, scan_fn, &seen, &more));
    st_scan_close(sc);
    CHECK_EQ(f.calls, 1024);        /* each partition asked for once */
    CHECK_EQ(seen.n, N);
    for (int i = 0; i < N; i++)
        CHECK_EQ(seen.cnt[i], 1);
    struct fetch_ctx cut = {0, 1};
    REQUIRE_OK(st_scan_open_via(c, -1, fetch_local, &cut, &sc));
    int rc = 0;
    more = 1;
    while (!rc && more)
        rc = st_scan_next_page(sc, 100, scan_fn, &seen, &more);
    st_scan_close(sc);
    CHECK_EQ(rc, EM_TRUNCATED);
    em_free(seen.cnt);
    st_close(s);
}

/* A loaded entry (rebalancing): absent-only for a MOVING copy, overwriting
 * for a copy catching up, a REMOVE drops the key - and none of it moves the
 * partition's counter, which the copy takes from its supplier. */
TEST(store_apply_load_modes)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "load", 1);
    REQUIRE_OK(put_il(c, NULL, 1, 10));
    uint64_t before = part_cntr(c, 0);
    uint8_t kb[5], vb[9];
    st_update u = {.kind = ST_UPD_PUT, .cache_id = st_cache_id(c), .partition = 0,
                   .key = kb, .klen = (uint32_t)ikey(kb, 1), .val = vb,
                   .vlen = (uint32_t)lval(vb, 20)};
    int done = -1;
    REQUIRE_OK(st_apply_load(s, &u, 0, &done));
    CHECK_EQ(done, 0);                            /* present: kept */
    int64_t v = 0;
    CHECK_EQ(get_il(c, 1, &v), 1);
    CHECK_EQ(v, 10);
    REQUIRE_OK(st_apply_load(s, &u, 1, &done));
    CHECK_EQ(done, 1);                            /* overwrite */
    CHECK_EQ(get_il(c, 1, &v), 1);
    CHECK_EQ(v, 20);
    u.klen = (uint32_t)ikey(kb, 2);
    REQUIRE_OK(st_apply_load(s, &u, 0, &done));
    CHECK_EQ(done, 1);                            /* absent: stored */
    u.kind = ST_UPD_REMOVE;
    u.klen = (uint32_t)ikey(kb, 1);
    REQUIRE_OK(st_apply_load(s, &u, 0, &done));
    CHECK_EQ(done, 1);
    CHECK_EQ(get_il(c, 1, &v), 0);
    REQUIRE_OK(st_apply_load(s, &u, 0, &done));
    CHECK_EQ(done, 0);                            /* nothing to remove */
    CHECK_EQ(part_cntr(c, 0), before);
    u.kind = ST_UPD_CLEAR;
    CHECK_EQ(st_apply_load(s, &u, 0, &done), EM_INVAL);
    st_close(s);
}

/* The read observer (st_set_seen_fn): replication holds a primary's reply
 * until what the request saw is on every owner, so every keyed request
 * must report the partition it looked at - and nothing else may. */
typedef struct seen_rec { int n; int32_t cache; uint32_t part[16]; } seen_rec;

static int count_kv(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    (void)k; (void)kl; (void)v; (void)vl;
    ++*(int *)arg;
    return 0;
}

static void seen_cb(void *arg, st_cache *c, uint32_t part)
{
    seen_rec *r = arg;
    r->cache = st_cache_id(c);
    if (r->n < 16)
        r->part[r->n] = part;
    r->n++;
}

TEST(store_seen_fn_reports_each_keyed_request)
{
    st_store *s = open_store(0, 0);
    st_cache *c = make_cache(s, "seen", 0);
    REQUIRE(c);
    seen_rec r = {0};
    st_set_seen_fn(s, seen_cb, &r);
    uint8_t kb[5], k2[5], vb[9];
    size_t kl = ikey(kb, 42), vl = lval(vb, 1);
    ikey(k2, 43);
    uint32_t parts = st_cache_parts(c);
    uint32_t p42 = bin_partition(42, parts), p43 = bin_partition(43, parts);
    em_buf out = EM_BUF_INIT;
    int f;
    CHECK_OK(st_put(c, NULL, kb, kl, vb, vl));
    CHECK_EQ(r.n, 1);
    CHECK_EQ(r.part[0], p42);
    CHECK_EQ(r.cache, st_cache_id(c));
    CHECK_OK(st_get(c, NULL, kb, kl, &out, &f));
    CHECK_OK(st_contains(c, NULL, k2, 5, &f));
    CHECK_OK(st_put_if_absent(c, NULL, kb, kl, vb, vl, &f));   /* a test, no write */
    CHECK_EQ(f, 0);
    CHECK_OK(st_remove_if_equals(c, NULL, k2, 5, vb, vl, &f));
    CHECK_EQ(f, 0);
    st_slice ks[2] = {{kb, kl}, {k2, 5}};
    int cnt = 0;
    CHECK_OK(st_get_all(c, NULL, ks, 2, count_kv, &cnt));
    CHECK_EQ(cnt, 1);
    CHECK_EQ(r.n, 7);
    uint32_t want[7] = {p42, p42, p43, p42, p43, p42, p43};
    for (int i = 0; i < 7; i++)
        CHECK_EQ(r.part[i], want[i]);
    /* not a request's look: a peek, a replayed update, nor once unset */
    CHECK_OK(st_local_peek(c, NULL, 0, kb, kl, &out, &f));
    st_update u = {.kind = ST_UPD_PUT, .cache_id = st_cache_id(c), .partition = p43,
                   .key = k2, .klen = 5, .val = vb, .vlen = (uint32_t)vl};
    CHECK_OK(st_apply(s, &u));
    CHECK_EQ(r.n, 7);
    st_set_seen_fn(s, NULL, NULL);
    CHECK_OK(st_get(c, NULL, kb, kl, &out, &f));
    CHECK_EQ(r.n, 7);
    em_buf_free(&out);
    st_close(s);
}
