/* test_oom_store.c - allocation-failure loops over the store (store/store.h)
 * and the binary layer (binary/binary.h): fail the 1st, 2nd, ... Nth
 * allocation of one operation until it completes without the hook firing
 * (reliability.md §3.1 item 2).  Each run must return an error code or
 * succeed, leak nothing (checked per run) and leave the state consistent: a
 * failed put keeps the old value, a failed create leaves no cache, a failed
 * merge keeps the previous type version.
 */
#include "test.h"

#include "binary/binary.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <stdlib.h>

#define OOM_MAX_N 5000

typedef struct octx {
    st_store *st;
    st_cache *c;
    bin_registry *reg;
    const bin_type *t1;
    em_buf b;
    void *p;                    /* whatever the op produced, freed by verify */
    int n;                      /* the allocation that failed */
} octx;

typedef struct oom_case {
    const char *name;
    int  (*setup)(octx *x);     /* unhooked; 0 or error */
    int  (*op)(octx *x);        /* hooked */
    void (*verify)(octx *x, int rc, int injected);
} oom_case;

/* ---- values --------------------------------------------------------------- */

static void k_int(uint8_t k[5], int32_t v) { k[0] = 3; em_st32(k + 1, (uint32_t)v); }
/* v_str writes a string data object into buf (cap >= 5 + strlen). */
static size_t v_str(uint8_t *buf, const char *s)
{
    size_t n = strlen(s);
    buf[0] = 9;
    em_st32(buf + 1, (uint32_t)n);
    memcpy(buf + 5, s, n);
    return 5 + n;
}

static int put_is(octx *x, int32_t key, const char *s)
{
    uint8_t k[5], v[256];
    k_int(k, key);
    size_t vl = v_str(v, s);
    return st_put(x->c, NULL, k, 5, v, vl);
}

/* get_is: 1 if key holds string s, 0 if absent, -1 if something else. */
static int get_is(octx *x, int32_t key, const char *s)
{
    uint8_t k[5], v[256];
    k_int(k, key);
    em_buf out = EM_BUF_INIT;
    int found = 0;
    int rc = st_get(x->c, NULL, k, 5, &out, &found);
    int r;
    if (rc)
        r = -2;
    else if (!found)
        r = 0;
    else {
        size_t vl = v_str(v, s);
        r = (out.len == vl && memcmp(out.p, v, vl) == 0) ? 1 : -1;
    }
    em_buf_free(&out);
    return r;
}

static int32_t cid(const char *name) { return em_hash_java_str((const uint8_t *)name, strlen(name)); }

static int make_cache(octx *x, const char *name, st_cache **out)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = em_strndup(name, strlen(name));
    if (!cfg.name)
        return EM_NOMEM;
    int rc = st_cache_create(x->st, &cfg, out);
    st_cache_config_free(&cfg);
    return rc;
}

/* Standard setup: a store, cache "c" with keys 0..99 -> "old". */
static int std_setup(octx *x)
{
    if (st_open(&x->st, NULL) || make_cache(x, "c", &x->c))
        return -1;
    char v[32];
    for (int i = 0; i < 100; i++) {
        snprintf(v, sizeof v, "old%d", i);
        if (put_is(x, i, v))
            return -1;
    }
    return 0;
}

/* ---- the loop ---------------------------------------------------------------- */

static void teardown(octx *x)
{
    if (x->st) st_close(x->st);
    if (x->reg) bin_registry_free(x->reg);
    em_buf_free(&x->b);
}

static int run_case(const oom_case *oc)
{
    for (int n = 1; n <= OOM_MAX_N; n++) {
        int64_t b0 = em_mem_live_bytes(), k0 = em_mem_live_blocks();
        octx x;
        memset(&x, 0, sizeof x);
        x.n = n;
        if (oc->setup && oc->setup(&x)) {
            test_fail(__FILE__, __LINE__, "%s: setup failed", oc->name);
            teardown(&x);
            return -1;
        }
        uint64_t f0 = em_mem_failures();
        em_mem_fail_after((uint64_t)n, 0);
        int rc = oc->op(&x);
        em_mem_fail_after(0, 0);
        int injected = em_mem_failures() > f0;
        if (!injected && rc != 0)
            test_fail(__FILE__, __LINE__, "%s: fails (%s) with no allocation failure", oc->name,
                      em_errname(rc));
        if (injected && rc != 0 && rc != EM_NOMEM)
            test_fail(__FILE__, __LINE__, "%s, allocation %d failed: returned %s, not EM_NOMEM",
                      oc->name, n, em_errname(rc));
        oc->verify(&x, rc, injected);
        teardown(&x);
        int64_t db = em_mem_live_bytes() - b0, dk = em_mem_live_blocks() - k0;
        if (db || dk)
            test_fail(__FILE__, __LINE__, "%s, allocation %d failed: leak of %lld bytes in %lld blocks",
                      oc->name, n, (long long)db, (long long)dk);
        if (test_failed())
            return -1;
        if (!injected) {
            if (getenv("EM_OOM_VERBOSE"))
                printf("    %-36s %d runs\n", oc->name, n);
            return n;
        }
    }
    test_fail(__FILE__, __LINE__, "%s: still failing after %d allocations", oc->name, OOM_MAX_N);
    return -1;
}

#define VERIFY_FAIL(...) test_fail(__FILE__, __LINE__, __VA_ARGS__)

/* ---- store cases -------------------------------------------------------------- */

static int op_open(octx *x) { return st_open(&x->st, NULL); }
static void vf_open(octx *x, int rc, int inj)
{
    (void)inj;
    if (rc == 0 && !x->st)
        VERIFY_FAIL("st_open: success without a store");
    if (rc != 0 && x->st)
        VERIFY_FAIL("st_open: failure left a store behind (allocation %d)", x->n);
}

static int su_open(octx *x) { return st_open(&x->st, NULL); }
static int op_create(octx *x) { st_cache *c; return make_cache(x, "created", &c); }
static void vf_create(octx *x, int rc, int inj)
{
    (void)inj;
    st_cache *c = st_cache_find(x->st, cid("created"));
    if ((rc == 0) != (c != NULL))
        VERIFY_FAIL("cache create returned %s but the cache %s (allocation %d)", em_errname(rc),
                    c ? "exists" : "does not exist", x->n);
    if (rc != 0) {
        /* the name must still be free: a retry must work */
        st_cache *c2;
        if (make_cache(x, "created", &c2) != 0)
            VERIFY_FAIL("cache create after a failed one does not work (allocation %d)", x->n);
    }
}

static int op_put_new(octx *x) { return put_is(x, 100000, "brand new"); }
static void vf_put_new(octx *x, int rc, int inj)
{
    (void)inj;
    int g = get_is(x, 100000, "brand new");
    if (rc == 0 ? g != 1 : g != 0)
        VERIFY_FAIL("put of a new key returned %s, then get gives %d (allocation %d)",
                    em_errname(rc), g, x->n);
    if (get_is(x, 5, "old5") != 1)
        VERIFY_FAIL("put of a new key damaged another key (allocation %d)", x->n);
}

static const char LONGV[] = "a replacement value long enough to need a new entry allocation ....";
static int op_put_replace(octx *x) { return put_is(x, 7, LONGV); }
static void vf_put_replace(octx *x, int rc, int inj)
{
    (void)inj;
    int gnew = get_is(x, 7, LONGV), gold = get_is(x, 7, "old7");
    if (rc == 0 ? gnew != 1 : gold != 1)
        VERIFY_FAIL("put over an existing key returned %s, then new=%d old=%d (allocation %d)",
                    em_errname(rc), gnew, gold, x->n);
}

/* Many new keys: crosses table growth in some partitions. */
static int op_put_many(octx *x)
{
    char v[32];
    for (int i = 0; i < 400; i++) {
        snprintf(v, sizeof v, "m%d", i);
        int rc = put_is(x, 1000 + i, v);
        if (rc)
            return rc;
    }
    return 0;
}
static void vf_put_many(octx *x, int rc, int inj)
{
    (void)rc; (void)inj;
    char v[32];
    for (int i = 0; i < 400; i++) {
        snprintf(v, sizeof v, "m%d", i);
        int g = get_is(x, 1000 + i, v);
        if (g < 0 || (rc == 0 && g != 1)) {
            VERIFY_FAIL("after %s in a put loop, key %d reads %d (allocation %d)",
                        em_errname(rc), 1000 + i, g, x->n);
            return;
        }
    }
    for (int i = 0; i < 100; i++) {
        snprintf(v, sizeof v, "old%d", i);
        if (get_is(x, i, v) != 1) {
            VERIFY_FAIL("put loop damaged key %d (allocation %d)", i, x->n);
            return;
        }
    }
}

static int op_put_all(octx *x)
{
    uint8_t ks[64][5], vs[64][32];
    st_slice k[64], v[64];
    for (int i = 0; i < 64; i++) {
        char s[24];
        snprintf(s, sizeof s, "pa%d", i);
        k_int(ks[i], i < 8 ? i : 5000 + i);     /* 8 replace old values, 56 are new */
        k[i] = (st_slice){ks[i], 5};
        v[i] = (st_slice){vs[i], v_str(vs[i], s)};
    }
    return st_put_all(x->c, NULL, k, v, 64);
}
static void vf_put_all(octx *x, int rc, int inj)
{
    (void)inj;
    for (int i = 0; i < 64; i++) {
        char s[24], o[24];
        snprintf(s, sizeof s, "pa%d", i);
        snprintf(o, sizeof o, "old%d", i);
        int32_t key = i < 8 ? i : 5000 + i;
        int gn = get_is(x, key, s), go = i < 8 ? get_is(x, key, o) : (get_is(x, key, s) == 0);
        /* success: every key new; failure: each key old or new (partial update) */
        if (rc == 0 ? gn != 1 : !(gn == 1 || go == 1)) {
            VERIFY_FAIL("put_all returned %s; key %d reads new=%d old=%d (allocation %d)",
                        em_errname(rc), key, gn, go, x->n);
            return;
        }
    }
}

static int op_get_and_put(octx *x)
{
    uint8_t k[5], v[128];
    k_int(k, 3);
    size_t vl = v_str(v, LONGV);
    int found;
    em_buf_reset(&x->b);
    return st_get_and_put(x->c, NULL, k, 5, v, vl, &x->b, &found);
}
static void vf_get_and_put(octx *x, int rc, int inj)
{
    (void)inj;
    uint8_t old[16];
    size_t ol = v_str(old, "old3");
    if (rc == 0 && (x->b.len != ol || memcmp(x->b.p, old, ol)))
        VERIFY_FAIL("get_and_put did not return the previous value (allocation %d)", x->n);
    if ((rc == 0 ? get_is(x, 3, LONGV) : get_is(x, 3, "old3")) != 1)
        VERIFY_FAIL("get_and_put returned %s but key 3 is wrong (allocation %d)", em_errname(rc), x->n);
}

static int op_replace_if_equals(octx *x)
{
    uint8_t k[5], e[16], v[128];
    k_int(k, 4);
    size_t el = v_str(e, "old4"), vl = v_str(v, LONGV);
    int replaced = 0;
    int rc = st_replace_if_equals(x->c, NULL, k, 5, e, el, v, vl, &replaced);
    if (rc == 0 && !replaced)
        return EM_INVAL;
    return rc;
}
static void vf_replace_if_equals(octx *x, int rc, int inj)
{
    (void)inj;
    if ((rc == 0 ? get_is(x, 4, LONGV) : get_is(x, 4, "old4")) != 1)
        VERIFY_FAIL("replace_if_equals returned %s but key 4 is wrong (allocation %d)",
                    em_errname(rc), x->n);
}

static int op_remove(octx *x)
{
    uint8_t k[5];
    k_int(k, 9);
    int removed = 0;
    int rc = st_remove(x->c, NULL, k, 5, &removed);
    return rc ? rc : (removed ? 0 : EM_INVAL);
}
static void vf_remove(octx *x, int rc, int inj)
{
    (void)inj;
    if ((rc == 0 ? get_is(x, 9, "old9") != 0 : get_is(x, 9, "old9") != 1))
        VERIFY_FAIL("remove returned %s but key 9 is wrong (allocation %d)", em_errname(rc), x->n);
}

/* A 27-wrapped complex key with a wrong header hash: normalisation must
 * rewrite it (DESIGN §4), in the store's internal scratch. */
static const uint8_t PERSON[39] = {
    0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0x01, 0x00, 0x00, 0x00,
    0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
    0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62,
    0x63, 0x18, 0x1d
};
static size_t wrapped_person(uint8_t *k)
{
    k[0] = 27;
    em_st32(k + 1, 39);
    memcpy(k + 5, PERSON, 39);
    em_st32(k + 44, 0);
    return 48;
}
static int op_put_complex_key(octx *x)
{
    uint8_t k[48], v[32];
    size_t kl = wrapped_person(k), vl = v_str(v, "person value");
    return st_put(x->c, NULL, k, kl, v, vl);
}
static void vf_put_complex_key(octx *x, int rc, int inj)
{
    (void)inj;
    /* read it back with the plain 103 form: normalised keys compare equal */
    uint8_t v[32];
    size_t vl = v_str(v, "person value");
    em_buf out = EM_BUF_INIT;
    int found = 0;
    int grc = st_get(x->c, NULL, PERSON, sizeof PERSON, &out, &found);
    if (grc || (rc == 0) != (found && out.len == vl && memcmp(out.p, v, vl) == 0))
        VERIFY_FAIL("complex-key put returned %s, then get found=%d (allocation %d)",
                    em_errname(rc), found, x->n);
    em_buf_free(&out);
}

typedef struct scan_acc { uint8_t seen[100]; int bad; } scan_acc;
static int scan_fn(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    scan_acc *a = arg;
    (void)v; (void)vlen;
    if (klen != 5 || k[0] != 3) { a->bad++; return 0; }
    int32_t key = (int32_t)em_ld32(k + 1);
    if (key < 0 || key >= 100 || a->seen[key]++) a->bad++;
    return 0;
}
static int op_scan(octx *x)
{
    st_scan *sc;
    int rc = st_scan_open(x->c, -1, &sc);
    if (rc)
        return rc;
    scan_acc *a = em_calloc(1, sizeof *a);
    if (!a) {
        st_scan_close(sc);
        return EM_NOMEM;
    }
    x->p = a;
    int more = 1;
    while (more && rc == 0)
        rc = st_scan_next_page(sc, 7, scan_fn, a, &more);
    st_scan_close(sc);
    return rc;
}
static void vf_scan(octx *x, int rc, int inj)
{
    (void)inj;
    scan_acc *a = x->p;
    if (rc == 0) {
        int all = 1;
        for (int i = 0; i < 100; i++)
            all &= a->seen[i] == 1;
        if (!all || a->bad)
            VERIFY_FAIL("a complete scan missed or repeated keys (allocation %d)", x->n);
    } else if (a && a->bad) {
        VERIFY_FAIL("a failed scan returned bad rows (allocation %d)", x->n);
    }
    em_free(a);
    x->p = NULL;
}

typedef struct ga_acc { int n, bad; } ga_acc;
static int ga_fn(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    ga_acc *a = arg;
    (void)k; (void)klen;
    char s[16];
    uint8_t e[32];
    snprintf(s, sizeof s, "old%d", (int)em_ld32(k + 1));
    size_t el = v_str(e, s);
    a->n++;
    a->bad += !(vlen == el && memcmp(v, e, el) == 0);
    return 0;
}
static int op_get_all(octx *x)
{
    uint8_t ks[20][5];
    st_slice k[20];
    for (int i = 0; i < 20; i++) {
        k_int(ks[i], i * 7);        /* 0..133: 15 present, 5 absent */
        k[i] = (st_slice){ks[i], 5};
    }
    ga_acc a = {0, 0};
    int rc = st_get_all(x->c, NULL, k, 20, ga_fn, &a);
    if (rc == 0 && (a.n != 15 || a.bad))
        return EM_INVAL;
    return rc;
}
static void vf_none(octx *x, int rc, int inj) { (void)x; (void)rc; (void)inj; }

static int op_destroy(octx *x) { return st_cache_destroy(x->st, cid("c")); }
static void vf_destroy(octx *x, int rc, int inj)
{
    (void)inj;
    st_cache *c = st_cache_find(x->st, cid("c"));
    if ((rc == 0) != (c == NULL))
        VERIFY_FAIL("destroy returned %s but the cache %s (allocation %d)", em_errname(rc),
                    c ? "is still there" : "is gone", x->n);
    if (rc != 0 && get_is(x, 1, "old1") != 1)
        VERIFY_FAIL("a failed destroy lost data (allocation %d)", x->n);
}

static int op_cfg_copy(octx *x)
{
    (void)x;
    st_cache_config a, b;
    st_cache_config_init(&a);
    a.name = em_strndup("cfg", 3);
    a.sql_schema = em_strndup("PUBLIC", 6);
    a.group_name = em_strndup("g", 1);
    a.query_entities = em_memdup("\x01\x00\x00\x00", 4);
    a.query_entities_len = 4;
    int rc = (a.name && a.sql_schema && a.group_name && a.query_entities) ? 0 : EM_NOMEM;
    if (rc == 0) {
        rc = st_cache_config_copy(&b, &a);
        if (rc == 0) {
            if (strcmp(b.name, "cfg") || strcmp(b.sql_schema, "PUBLIC") || b.query_entities_len != 4)
                rc = EM_INVAL;
            st_cache_config_free(&b);
        }
    }
    st_cache_config_free(&a);
    return rc;
}

static const oom_case STORE_CASES[] = {
    {"st_open", NULL, op_open, vf_open},
    {"st_cache_create", su_open, op_create, vf_create},
    {"st_put new key", std_setup, op_put_new, vf_put_new},
    {"st_put over an existing key", std_setup, op_put_replace, vf_put_replace},
    {"st_put 400 new keys", std_setup, op_put_many, vf_put_many},
    {"st_put complex 27-wrapped key", std_setup, op_put_complex_key, vf_put_complex_key},
    {"st_put_all", std_setup, op_put_all, vf_put_all},
    {"st_get_and_put", std_setup, op_get_and_put, vf_get_and_put},
    {"st_replace_if_equals", std_setup, op_replace_if_equals, vf_replace_if_equals},
    {"st_remove", std_setup, op_remove, vf_remove},
    {"st_get_all", std_setup, op_get_all, vf_none},
    {"st_scan_open + pages", std_setup, op_scan, vf_scan},
    {"st_cache_destroy", std_setup, op_destroy, vf_destroy},
    {"st_cache_config_copy", NULL, op_cfg_copy, vf_none},
};

TEST(oom_store_ops)
{
    for (size_t i = 0; i < sizeof STORE_CASES / sizeof STORE_CASES[0]; i++)
        if (run_case(&STORE_CASES[i]) < 0)
            return;
}

/* ---- binary cases ---------------------------------------------------------------- */

static const uint8_t PERSON_META[] = {
    0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0x00, 0x00, 0x00, 'P', 'e', 'r', 's', 'o', 'n',
    0x65, 0x02, 0x00, 0x00, 0x00, 0x09, 0x02, 0x00, 0x00, 0x00, 'i', 'd',
    0x03, 0x00, 0x00, 0x00, 0x1b, 0x0d, 0x00, 0x00,
    0x09, 0x04, 0x00, 0x00, 0x00, 'n', 'a', 'm', 'e', 0x09, 0x00, 0x00, 0x00,
    0x8b, 0x7a, 0x33, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39,
    0x02, 0x00, 0x00, 0x00, 0x1b, 0x0d, 0x00, 0x00, 0x8b, 0x7a, 0x33, 0x00
};

static int op_reg_new(octx *x) { x->reg = bin_registry_new(); return x->reg ? 0 : EM_NOMEM; }

static int op_meta_decode(octx *x)
{
    (void)x;
    bin_type *t = NULL;
    size_t used = 0;
    int rc = bin_meta_decode(PERSON_META, sizeof PERSON_META, &t, &used);
    if (rc == 0) {
        if (used != sizeof PERSON_META || t->nfields != 2 || t->nschemas != 1 ||
            strcmp(t->name, "Person"))
            rc = EM_INVAL;
        bin_type_free(t);
    }
    return rc;
}

static int su_reg(octx *x) { x->reg = bin_registry_new(); return x->reg ? 0 : -1; }
static int su_reg_person(octx *x)
{
    if (su_reg(x))
        return -1;
    bin_type *t = NULL;
    size_t used;
    if (bin_meta_decode(PERSON_META, sizeof PERSON_META, &t, &used))
        return -1;
    int rc = bin_registry_put(x->reg, t, &x->t1);
    bin_type_free(t);
    return rc;
}

static int op_reg_put(octx *x)
{
    bin_type *t = NULL;
    size_t used;
    em_mem_fail_after(0, 0);            /* decode outside the hook: only the put is tested */
    int rc = bin_meta_decode(PERSON_META, sizeof PERSON_META, &t, &used);
    em_mem_fail_after((uint64_t)x->n, 0);
    if (rc)
        return -1;
    rc = bin_registry_put(x->reg, t, NULL);
    em_mem_fail_after(0, 0);
    bin_type_free(t);
    return rc;
}
static void vf_reg_put(octx *x, int rc, int inj)
{
    (void)inj;
    const bin_type *g = bin_registry_get(x->reg, (int32_t)0xc4e39b55);
    if (rc == 0 ? (!g || g->nfields != 2) : g != NULL)
        VERIFY_FAIL("registry put returned %s, then get gives %p (allocation %d)",
                    em_errname(rc), (const void *)g, x->n);
}

/* Merge: Person gains field "age" (int) and a second schema {id, name, age}. */
static int op_reg_merge(octx *x)
{
    static const int32_t s1[] = {3355, 3373707}, s2[] = {3355, 3373707, 96511};
    bin_field_meta f[3] = {{"id", 3355, 3}, {"name", 3373707, 9}, {"age", 96511, 3}};
    bin_schema sc[2] = {{bin_schema_id(s1, 2), 2, s1}, {bin_schema_id(s2, 3), 3, s2}};
    bin_type t;
    memset(&t, 0, sizeof t);
    t.type_id = (int32_t)0xc4e39b55;
    t.name = "Person";
    t.nfields = 3;
    t.fields = f;
    t.nschemas = 2;
    t.schemas = sc;
    return bin_registry_put(x->reg, &t, NULL);
}
static void vf_reg_merge(octx *x, int rc, int inj)
{
    (void)inj;
    const bin_type *g = bin_registry_get(x->reg, (int32_t)0xc4e39b55);
    if (!g) {
        VERIFY_FAIL("merge lost the type (allocation %d)", x->n);
        return;
    }
    if (rc == 0 ? (g->nfields != 3 || g->nschemas != 2) : (g->nfields != 2 || g->nschemas != 1))
        VERIFY_FAIL("merge returned %s, then the type has %u fields, %u schemas (allocation %d)",
                    em_errname(rc), g->nfields, g->nschemas, x->n);
    if (x->t1 && x->t1->nfields != 2)
        VERIFY_FAIL("the previous version changed under a reader (allocation %d)", x->n);
}

static int op_name_put(octx *x)
{
    return bin_registry_name_put(x->reg, 0, 4242, "org.example.Thing", 17);
}
static void vf_name_put(octx *x, int rc, int inj)
{
    (void)inj;
    size_t l = 0;
    const char *nm = bin_registry_name_get(x->reg, 0, 4242, &l);
    if (rc == 0 ? (!nm || l != 17) : nm != NULL)
        VERIFY_FAIL("name put returned %s, then get gives %s (allocation %d)", em_errname(rc),
                    nm ? nm : "NULL", x->n);
}

static int op_key_prepare(octx *x)
{
    uint8_t k[48];
    size_t kl = wrapped_person(k);
    k[5 + 8] = 0x02;                    /* a wrong header hash: must be rewritten */
    bin_key out;
    int rc = bin_key_prepare(k, kl, &x->b, &out);
    if (rc == 0 && (out.len != 39 || out.p[0] != 103))
        rc = EM_INVAL;
    return rc;
}

static int op_builder(octx *x)
{
    static const char *const names[] = {"x", "y", "label"};
    static const int32_t codes[] = {3, 3, 9};
    const bin_desc *d = NULL;
    int rc = bin_registry_define(x->reg, "Point", names, codes, 3, &d);
    if (rc)
        return rc;
    bin_writer w;
    bin_writer_init(&w, x->reg, &x->b);
    bin_w_obj_begin(&w, d);
    bin_w_field_idx(&w, 0); bin_w_int(&w, 1);
    bin_w_field_idx(&w, 1); bin_w_int(&w, 2);
    bin_w_field_idx(&w, 2); bin_w_string(&w, "p", 1);
    rc = bin_w_obj_end(&w);
    bin_writer_free(&w);
    if (rc == 0) {
        size_t len;
        if (bin_validate(x->b.p, x->b.len, &len, 0) || len != x->b.len)
            rc = EM_INVAL;
    }
    return rc;
}
static void vf_builder(octx *x, int rc, int inj)
{
    (void)inj;
    if (rc == 0 && !bin_registry_get(x->reg, bin_type_id("point", 5)))
        VERIFY_FAIL("define succeeded but the type is not registered (allocation %d)", x->n);
}

static void vf_reg_new(octx *x, int rc, int inj)
{
    (void)inj;
    if (rc == 0 && !bin_registry_desc(x->reg, BIN_TYPE_TREEMAP_ID))
        VERIFY_FAIL("registry without the predefined TreeMap type (allocation %d)", x->n);
}

static const oom_case BIN_CASES[] = {
    {"bin_registry_new", NULL, op_reg_new, vf_reg_new},
    {"bin_meta_decode", NULL, op_meta_decode, vf_none},
    {"bin_registry_put new type", su_reg, op_reg_put, vf_reg_put},
    {"bin_registry_put merge", su_reg_person, op_reg_merge, vf_reg_merge},
    {"bin_registry_name_put", su_reg, op_name_put, vf_name_put},
    {"bin_key_prepare 27-wrapped key", NULL, op_key_prepare, vf_none},
    {"bin_registry_define + writer", su_reg, op_builder, vf_builder},
};

TEST(oom_binary_ops)
{
    for (size_t i = 0; i < sizeof BIN_CASES / sizeof BIN_CASES[0]; i++)
        if (run_case(&BIN_CASES[i]) < 0)
            return;
}
