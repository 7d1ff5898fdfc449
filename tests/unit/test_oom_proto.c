/* test_oom_proto.c - allocation-failure loops over the thin-client protocol
 * (reliability.md §3.1 item 2, goal B4): the handshake and each op code are
 * fed to pr_feed() with the 1st, 2nd, ... Nth allocation failing, until a run
 * completes without the hook firing.  Every run must end without a crash or
 * a leak (checked per run), with an error reply or a close, and leave the
 * store consistent: an error reply means the operation did not happen (key 1
 * keeps its old value), a success reply means it did, a close means either.
 * Wire layouts: shared/reference/ignite-thin-protocol.md §1-§2.
 */
#include "test.h"

#include "binary/binary.h"
#include "proto/proto.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <stdlib.h>

#define OOM_MAX_N 5000

/* Person{id:int, name:string} metadata as Node 1.0.0 sends it (§2.6). */
static const uint8_t PERSON_META[] = {
    0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0x00, 0x00, 0x00, 'P', 'e', 'r', 's', 'o', 'n',
    0x65, 0x02, 0x00, 0x00, 0x00, 0x09, 0x02, 0x00, 0x00, 0x00, 'i', 'd',
    0x03, 0x00, 0x00, 0x00, 0x1b, 0x0d, 0x00, 0x00,
    0x09, 0x04, 0x00, 0x00, 0x00, 'n', 'a', 'm', 'e', 0x09, 0x00, 0x00, 0x00,
    0x8b, 0x7a, 0x33, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39,
    0x02, 0x00, 0x00, 0x00, 0x1b, 0x0d, 0x00, 0x00, 0x8b, 0x7a, 0x33, 0x00
};
/* Person{id:7, name:"abc"} (§3.2). */
static const uint8_t PERSON[39] = {
    0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0x01, 0x00, 0x00, 0x00,
    0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
    0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62,
    0x63, 0x18, 0x1d
};

/* ---- frame building (allocation failures here are outside the hook) ---- */

static void put8(em_buf *b, uint8_t v) { em_buf_put_u8(b, v); }
static void put16(em_buf *b, int16_t v) { em_buf_put_le16(b, (uint16_t)v); }
static void put32(em_buf *b, int32_t v) { em_buf_put_le32(b, (uint32_t)v); }
static void put64(em_buf *b, int64_t v) { em_buf_put_le64(b, (uint64_t)v); }
static void v_int(em_buf *b, int32_t v) { put8(b, 3); put32(b, v); }
static void v_str(em_buf *b, const char *s)
{
    put8(b, 9);
    put32(b, (int32_t)strlen(s));
    em_buf_append(b, s, strlen(s));
}

static size_t req_begin(em_buf *b, int op, int64_t rid)
{
    size_t s = b->len;
    put32(b, 0);
    put16(b, (int16_t)op);
    put64(b, rid);
    return s;
}
static void req_end(em_buf *b, size_t s) { em_st32(b->p + s, (uint32_t)(b->len - s - 4)); }

static int32_t cid_of(const char *name) { return em_hash_java_str((const uint8_t *)name, strlen(name)); }
static void cache_hdr(em_buf *b) { put32(b, cid_of("oom")); put8(b, 0); }

static void hs_frame(em_buf *b, int minor, int with_feat)
{
    size_t s = b->len;
    put32(b, 0);
    put8(b, 1);
    put16(b, 1); put16(b, (int16_t)minor); put16(b, 0);
    put8(b, 2);
    if (minor >= 7) {
        put8(b, 12);
        put32(b, with_feat ? 2 : 0);
        if (with_feat) { put8(b, 0x05); put8(b, 0x09); }   /* user attrs, cluster states, heartbeat, binary cfg */
        if (with_feat) {                                     /* user attributes: map {"k": "v"} */
            put8(b, 25); put32(b, 1); put8(b, 1);
            v_str(b, "k"); v_str(b, "v");
        }
    }
    em_st32(b->p + s, (uint32_t)(b->len - s - 4));
}

/* ---- an in-process server and connection ---------------------------------- */

typedef struct env {
    st_store     *st;
    bin_registry *reg;
    pr_server    *ps;
    pr_conn      *c;
    em_buf        out, fb;
    int64_t       rid;
    int64_t       cursor;       /* scan cursor opened by the setup, if any */
} env;

/* feed: the whole of fb through pr_feed; 0 or the (negative) close code. */
static int feed(env *e, pr_conn *c)
{
    size_t used = 0, pos = 0;
    em_buf_reset(&e->out);
    while (pos < e->fb.len) {
        int rc = pr_feed(c, e->fb.p + pos, e->fb.len - pos, &e->out, (size_t)64 << 20, &used);
        if (rc < 0)
            return rc;
        if (used == 0)
            return EM_AGAIN;
        pos += used;
    }
    return 0;
}

/* reply_status parses the first reply in e->out (1.2.0 header): its status,
 * or -1 if there is none. */
static int reply_status(env *e, const uint8_t **payload, size_t *plen)
{
    if (e->out.len < 16)
        return -1;
    uint32_t len = em_ld32(e->out.p);
    if (len < 12 || e->out.len < 4 + (size_t)len)
        return -1;
    int32_t st = (int32_t)em_ld32(e->out.p + 12);
    if (payload) {
        *payload = e->out.p + 16;
        *plen = len - 12;
    }
    return st;
}

static int call(env *e, pr_conn *c)
{
    int rc = feed(e, c);
    if (rc)
        return rc;
    return reply_status(e, NULL, NULL);
}

static int conn_handshake(env *e, pr_conn *c)
{
    em_buf_reset(&e->fb);
    hs_frame(&e->fb, 2, 0);
    int rc = feed(e, c);
    if (rc)
        return rc;
    return (e->out.len >= 5 && e->out.p[4] == 1) ? 0 : EM_PROTO;
}

static int put_str(env *e, int32_t key, const char *val)
{
    em_buf_reset(&e->fb);
    size_t s = req_begin(&e->fb, 1001, e->rid++);
    cache_hdr(&e->fb);
    v_int(&e->fb, key);
    v_str(&e->fb, val);
    req_end(&e->fb, s);
    return call(e, e->c);
}

enum { SETUP_SCAN = 1, SETUP_TYPE = 2, SETUP_NAME = 4 };

static int env_open(env *e, int setup)
{
    memset(e, 0, sizeof *e);
    e->rid = 1;
    pr_options o;
    pr_options_default(&o);
    o.max_cursors = 8;
    if (st_open(&e->st, NULL))
        return -1;
    if (!(e->reg = bin_registry_new()))
        return -1;
    if (pr_server_new(&e->ps, e->st, e->reg, &o))
        return -1;
    if (!(e->c = pr_conn_new(e->ps)))
        return -1;
    if (conn_handshake(e, e->c))
        return -1;
    em_buf_reset(&e->fb);
    size_t s = req_begin(&e->fb, 1052, e->rid++);
    v_str(&e->fb, "oom");
    req_end(&e->fb, s);
    if (call(e, e->c) != 0)
        return -1;
    if (put_str(e, 1, "old") || put_str(e, 2, "two"))
        return -1;
    if (setup & SETUP_SCAN) {
        em_buf_reset(&e->fb);
        s = req_begin(&e->fb, 2000, e->rid++);
        cache_hdr(&e->fb);
        put8(&e->fb, 101); put32(&e->fb, 1); put32(&e->fb, -1); put8(&e->fb, 0);
        req_end(&e->fb, s);
        const uint8_t *p;
        size_t n;
        if (feed(e, e->c) || reply_status(e, &p, &n) != 0 || n < 8)
            return -1;
        e->cursor = (int64_t)em_ld64(p);
    }
    if (setup & SETUP_TYPE) {
        em_buf_reset(&e->fb);
        s = req_begin(&e->fb, 3003, e->rid++);
        em_buf_append(&e->fb, PERSON_META, sizeof PERSON_META);
        req_end(&e->fb, s);
        if (call(e, e->c) != 0)
            return -1;
    }
    if (setup & SETUP_NAME) {
        em_buf_reset(&e->fb);
        s = req_begin(&e->fb, 3001, e->rid++);
        put8(&e->fb, 0); put32(&e->fb, (int32_t)0xc4e39b55); v_str(&e->fb, "Person");
        req_end(&e->fb, s);
        if (call(e, e->c) != 0)
            return -1;
    }
    return 0;
}

static void env_close(env *e)
{
    if (e->c) pr_conn_free(e->c);
    if (e->ps) pr_server_free(e->ps);
    if (e->reg) bin_registry_free(e->reg);
    if (e->st) st_close(e->st);
    em_buf_free(&e->out);
    em_buf_free(&e->fb);
}

/* key1: GET key 1 on a connection (the given one, or a fresh one).  Returns
 * 1 if found and copies the string, 0 if null, -1000 if the cache is gone,
 * or another negative value on error. */
static int key1(env *e, pr_conn *c, char *out, size_t cap)
{
    pr_conn *own = NULL;
    if (!c) {
        own = c = pr_conn_new(e->ps);
        if (!c || conn_handshake(e, c)) {
            if (own) pr_conn_free(own);
            return -2;
        }
    }
    em_buf_reset(&e->fb);
    size_t s = req_begin(&e->fb, 1000, e->rid++);
    cache_hdr(&e->fb);
    v_int(&e->fb, 1);
    req_end(&e->fb, s);
    const uint8_t *p;
    size_t n;
    int rc = feed(e, c);
    int st = rc ? rc : reply_status(e, &p, &n);
    int res;
    if (st == 1000)
        res = -1000;
    else if (st != 0)
        res = -3;
    else if (n == 1 && p[0] == 101)
        res = 0;
    else if (n >= 5 && p[0] == 9 && em_ld32(p + 1) == n - 5 && n - 5 < cap) {
        memcpy(out, p + 5, n - 5);
        out[n - 5] = 0;
        res = 1;
    } else
        res = -4;
    if (own)
        pr_conn_free(own);
    return res;
}

/* ---- the loop ------------------------------------------------------------------ */

#define K1_SAME    NULL
#define K1_REMOVED ""
static const char k1_gone[] = "<cache destroyed>";
#define K1_GONE    k1_gone

typedef struct op_case {
    const char *name;
    int setup;
    void (*build)(env *e, em_buf *b);
    const char *k1;             /* key 1 after success: K1_SAME, K1_REMOVED, K1_GONE or a value */
    int partial;                /* batch op: an error may follow a partial update, as
                                 * Ignite's CachePartialUpdateException allows */
} op_case;

typedef struct oom_stats { int runs, injected, err_replies, closes, ok_despite; } oom_stats;

static void key1_expect(env *e, pr_conn *c, const op_case *oc, int outcome, int n)
{
    /* outcome: 0 success reply, 1 error reply, 2 closed */
    char v[64] = "";
    int r = key1(e, c, v, sizeof v);
    const char *after = oc->k1;
    int is_old = r == 1 && !strcmp(v, "old");
    int is_new;
    if (after == K1_SAME)
        is_new = is_old;
    else if (after == K1_GONE)
        is_new = r == -1000;
    else if (after[0] == 0)
        is_new = r == 0;
    else
        is_new = r == 1 && !strcmp(v, after);
    int ok = outcome == 0 ? is_new : (outcome == 1 && !oc->partial) ? is_old : (is_old || is_new);
    if (!ok)
        test_fail(__FILE__, __LINE__, "%s, allocation %d failed: %s reply, then key 1 reads"
                  " %d '%s' (expected %s)", oc->name, n,
                  outcome == 0 ? "success" : outcome == 1 ? "error" : "close", r, v,
                  (outcome == 1 && !oc->partial) ? "the old value" : "the new state");
}

/* run_oom: the loop for one op.  cold: run the op on a connection that has
 * only handshaken, so its scratch buffers grow under the hook too. */
static void run_oom(const op_case *oc, int cold, oom_stats *stt)
{
    memset(stt, 0, sizeof *stt);
    for (int n = 1; n <= OOM_MAX_N; n++) {
        int64_t b0 = em_mem_live_bytes(), k0 = em_mem_live_blocks();
        env e;
        if (env_open(&e, oc->setup)) {
            test_fail(__FILE__, __LINE__, "%s: setup failed", oc->name);
            env_close(&e);
            return;
        }
        if (cold) {
            pr_conn_free(e.c);
            e.c = pr_conn_new(e.ps);
            if (!e.c || conn_handshake(&e, e.c)) {
                test_fail(__FILE__, __LINE__, "%s: setup failed", oc->name);
                env_close(&e);
                return;
            }
            em_buf_free(&e.out);        /* the reply buffer starts empty too */
        }
        em_buf_reset(&e.fb);
        oc->build(&e, &e.fb);
        uint64_t f0 = em_mem_failures();
        em_mem_fail_after((uint64_t)n, 0);
        int rc = feed(&e, e.c);
        em_mem_fail_after(0, 0);
        int injected = em_mem_failures() > f0;
        stt->runs++;
        int outcome;
        pr_conn *after = e.c;
        if (rc < 0 && rc != EM_AGAIN) {
            outcome = 2;
            stt->closes++;
            after = NULL;           /* the server would drop this connection */
        } else {
            int st = reply_status(&e, NULL, NULL);
            if (st < 0) {
                test_fail(__FILE__, __LINE__, "%s, allocation %d failed: no reply and no close (rc %d)",
                          oc->name, n, rc);
                outcome = 2;
            } else if (st != 0) {
                outcome = 1;
                stt->err_replies++;
            } else {
                outcome = 0;
                stt->ok_despite += injected;
            }
        }
        if (!injected) {
            /* the hook never fired: the op ran to completion normally */
            CHECK(outcome != 2);
            key1_expect(&e, after, oc, outcome, n);
            env_close(&e);
            int64_t db = em_mem_live_bytes() - b0, dk = em_mem_live_blocks() - k0;
            if (db || dk)
                test_fail(__FILE__, __LINE__, "%s: leak of %lld bytes in %lld blocks in the clean run",
                          oc->name, (long long)db, (long long)dk);
            return;
        }
        stt->injected++;
        key1_expect(&e, after, oc, outcome, n);
        if (after == NULL) {
            /* pr_conn_free must release everything the failed request held */
            pr_conn_free(e.c);
            e.c = NULL;
        }
        env_close(&e);
        int64_t db = em_mem_live_bytes() - b0, dk = em_mem_live_blocks() - k0;
        if (db || dk) {
            test_fail(__FILE__, __LINE__, "%s, allocation %d failed: leak of %lld bytes in %lld blocks",
                      oc->name, n, (long long)db, (long long)dk);
            return;
        }
        if (test_failed())
            return;
    }
    test_fail(__FILE__, __LINE__, "%s: still failing after %d allocations", oc->name, OOM_MAX_N);
}

/* ---- requests ------------------------------------------------------------------- */

#define OP_KEY(fn, op, k) static void fn(env *e, em_buf *b) { size_t s = req_begin(b, op, e->rid++); \
    cache_hdr(b); v_int(b, k); req_end(b, s); }
#define OP_KV(fn, op, k, v) static void fn(env *e, em_buf *b) { size_t s = req_begin(b, op, e->rid++); \
    cache_hdr(b); v_int(b, k); v_str(b, v); req_end(b, s); }
#define OP_KEYS(fn, op) static void fn(env *e, em_buf *b) { size_t s = req_begin(b, op, e->rid++); \
    cache_hdr(b); put32(b, 3); v_int(b, 1); v_int(b, 2); v_int(b, 3); req_end(b, s); }
#define OP_NONE(fn, op) static void fn(env *e, em_buf *b) { size_t s = req_begin(b, op, e->rid++); \
    cache_hdr(b); req_end(b, s); }

OP_KEY(b_get, 1000, 1)
OP_KV(b_put, 1001, 1, "new")
OP_KV(b_put_if_absent, 1002, 3, "x")
OP_KEYS(b_get_all, 1003)
OP_KV(b_get_and_put, 1005, 1, "new")
OP_KV(b_get_and_replace, 1006, 1, "new")
OP_KEY(b_get_and_remove, 1007, 1)
OP_KV(b_get_and_put_if_absent, 1008, 1, "new")
OP_KV(b_replace, 1009, 1, "new")
OP_KEY(b_contains_key, 1011, 1)
OP_KEYS(b_contains_keys, 1012)
OP_NONE(b_clear, 1013)
OP_KEY(b_clear_key, 1014, 1)
OP_KEYS(b_clear_keys, 1015)
OP_KEY(b_remove_key, 1016, 1)
OP_KV(b_remove_if_equals, 1017, 1, "old")
OP_KEYS(b_remove_keys, 1018)
OP_NONE(b_remove_all, 1019)

static void b_put_all(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1004, e->rid++);
    cache_hdr(b);
    put32(b, 3);
    v_int(b, 1); v_str(b, "new");
    v_int(b, 3); em_buf_append(b, PERSON, sizeof PERSON);
    v_str(b, "complex-key"); put8(b, 27); put32(b, 39); em_buf_append(b, PERSON, 39); put32(b, 0);
    req_end(b, s);
}
static void b_replace_if_equals(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1010, e->rid++);
    cache_hdr(b); v_int(b, 1); v_str(b, "old"); v_str(b, "new");
    req_end(b, s);
}
static void b_get_size(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1020, e->rid++);
    cache_hdr(b); put32(b, 1); put8(b, 0);
    req_end(b, s);
}
static void b_local_peek(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1021, e->rid++);
    cache_hdr(b); v_int(b, 1); put32(b, 0);
    req_end(b, s);
}
static void b_get_names(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1050, e->rid++);
    req_end(b, s);
}
static void b_create(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1051, e->rid++);
    v_str(b, "other");
    req_end(b, s);
}
static void b_get_or_create(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1052, e->rid++);
    v_str(b, "other");
    req_end(b, s);
}
static void b_create_cfg(env *e, em_buf *b)
{
    /* Node 1.0.0's CREATE_WITH_CONFIGURATION for "cfgCache" (reference §2.4) */
    static const uint8_t cfg[] = {
        0x65, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x03, 0x00, 0x01, 0x00, 0x00, 0x00,
        0xcb, 0x00, 0x09, 0x06, 0x00, 0x00, 0x00, 'P', 'U', 'B', 'L', 'I', 'C',
        0xc8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 'I', 'N', 'T',
        0x09, 0x01, 0x00, 0x00, 0x00, 'P', 0x65, 0x65, 0x65, 0x01, 0x00, 0x00, 0x00,
        0x09, 0x02, 0x00, 0x00, 0x00, 'i', 'd', 0x09, 0x03, 0x00, 0x00, 0x00, 'I', 'N', 'T',
        0x01, 0x00, 0x65, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x09, 0x08, 0x00, 0x00, 0x00, 'c', 'f', 'g', 'C', 'a', 'c', 'h', 'e'
    };
    size_t s = req_begin(b, 1053, e->rid++);
    em_buf_append(b, cfg, sizeof cfg);
    req_end(b, s);
}
static void b_get_cfg(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1055, e->rid++);
    cache_hdr(b);
    req_end(b, s);
}
static void b_destroy(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1056, e->rid++);
    put32(b, cid_of("oom"));
    req_end(b, s);
}
static void b_scan(env *e, em_buf *b)
{
    size_t s = req_begin(b, 2000, e->rid++);
    cache_hdr(b);
    put8(b, 101); put32(b, 1); put32(b, -1); put8(b, 0);
    req_end(b, s);
}
static void b_scan_page(env *e, em_buf *b)
{
    size_t s = req_begin(b, 2001, e->rid++);
    put64(b, e->cursor);
    req_end(b, s);
}
static void b_resource_close(env *e, em_buf *b)
{
    size_t s = req_begin(b, 0, e->rid++);
    put64(b, e->cursor);
    req_end(b, s);
}
static void b_put_type(env *e, em_buf *b)
{
    size_t s = req_begin(b, 3003, e->rid++);
    em_buf_append(b, PERSON_META, sizeof PERSON_META);
    req_end(b, s);
}
static void b_get_type(env *e, em_buf *b)
{
    size_t s = req_begin(b, 3002, e->rid++);
    put32(b, (int32_t)0xc4e39b55);
    req_end(b, s);
}
static void b_reg_name(env *e, em_buf *b)
{
    size_t s = req_begin(b, 3001, e->rid++);
    put8(b, 0); put32(b, 12345); v_str(b, "org.example.Thing");
    req_end(b, s);
}
static void b_get_name(env *e, em_buf *b)
{
    size_t s = req_begin(b, 3000, e->rid++);
    put8(b, 0); put32(b, (int32_t)0xc4e39b55);
    req_end(b, s);
}
static void b_put_person(env *e, em_buf *b)
{
    /* a complex value whose schema is registered by the setup */
    size_t s = req_begin(b, 1001, e->rid++);
    cache_hdr(b); v_int(b, 9); em_buf_append(b, PERSON, sizeof PERSON);
    req_end(b, s);
}
static void b_heartbeat(env *e, em_buf *b) { size_t s = req_begin(b, 1, e->rid++); req_end(b, s); }
static void b_idle_timeout(env *e, em_buf *b) { size_t s = req_begin(b, 2, e->rid++); req_end(b, s); }
static void b_cluster_state(env *e, em_buf *b) { size_t s = req_begin(b, 5000, e->rid++); req_end(b, s); }
static void b_partitions(env *e, em_buf *b)
{
    size_t s = req_begin(b, 1101, e->rid++);
    put32(b, 1); put32(b, cid_of("oom"));
    req_end(b, s);
}
static void b_unknown_op(env *e, em_buf *b)
{
    size_t s = req_begin(b, 31337, e->rid++);
    put32(b, 7);
    req_end(b, s);
}
static void b_tx_start(env *e, em_buf *b)
{
    size_t s = req_begin(b, 4000, e->rid++);
    put8(b, 1); put8(b, 1); put64(b, 0); put8(b, 101);
    req_end(b, s);
}
static void b_sql_fields(env *e, em_buf *b)
{
    size_t s = req_begin(b, 2004, e->rid++);
    cache_hdr(b);
    put8(b, 101); put32(b, 1024); put32(b, -1); v_str(b, "SELECT 1");
    put32(b, 0); put8(b, 0);
    for (int i = 0; i < 6; i++) put8(b, 0);
    put64(b, 0); put8(b, 1);
    req_end(b, s);
}
static void b_bad_value(env *e, em_buf *b)
{
    /* a value the validator rejects (forbidden type code) */
    size_t s = req_begin(b, 1001, e->rid++);
    cache_hdr(b); v_int(b, 1); put8(b, 254); put32(b, 0);
    req_end(b, s);
}

static const op_case OPS[] = {
    {"GET", 0, b_get, K1_SAME, 0},
    {"PUT", 0, b_put, "new", 0},
    {"PUT complex value", SETUP_TYPE, b_put_person, K1_SAME, 0},
    {"PUT_IF_ABSENT", 0, b_put_if_absent, K1_SAME, 0},
    {"GET_ALL", 0, b_get_all, K1_SAME, 0},
    {"PUT_ALL", 0, b_put_all, "new", 1},
    {"GET_AND_PUT", 0, b_get_and_put, "new", 0},
    {"GET_AND_REPLACE", 0, b_get_and_replace, "new", 0},
    {"GET_AND_REMOVE", 0, b_get_and_remove, K1_REMOVED, 0},
    {"GET_AND_PUT_IF_ABSENT", 0, b_get_and_put_if_absent, K1_SAME, 0},
    {"REPLACE", 0, b_replace, "new", 0},
    {"REPLACE_IF_EQUALS", 0, b_replace_if_equals, "new", 0},
    {"CONTAINS_KEY", 0, b_contains_key, K1_SAME, 0},
    {"CONTAINS_KEYS", 0, b_contains_keys, K1_SAME, 0},
    {"CLEAR", 0, b_clear, K1_REMOVED, 1},
    {"CLEAR_KEY", 0, b_clear_key, K1_REMOVED, 0},
    {"CLEAR_KEYS", 0, b_clear_keys, K1_REMOVED, 1},
    {"REMOVE_KEY", 0, b_remove_key, K1_REMOVED, 0},
    {"REMOVE_IF_EQUALS", 0, b_remove_if_equals, K1_REMOVED, 0},
    {"REMOVE_KEYS", 0, b_remove_keys, K1_REMOVED, 1},
    {"REMOVE_ALL", 0, b_remove_all, K1_REMOVED, 1},
    {"GET_SIZE", 0, b_get_size, K1_SAME, 0},
    {"LOCAL_PEEK", 0, b_local_peek, K1_SAME, 0},
    {"CACHE_GET_NAMES", 0, b_get_names, K1_SAME, 0},
    {"CACHE_CREATE_WITH_NAME", 0, b_create, K1_SAME, 0},
    {"CACHE_GET_OR_CREATE_WITH_NAME", 0, b_get_or_create, K1_SAME, 0},
    {"CACHE_CREATE_WITH_CONFIGURATION", 0, b_create_cfg, K1_SAME, 0},
    {"CACHE_GET_CONFIGURATION", 0, b_get_cfg, K1_SAME, 0},
    {"CACHE_DESTROY", 0, b_destroy, K1_GONE, 0},
    {"QUERY_SCAN", 0, b_scan, K1_SAME, 0},
    {"QUERY_SCAN_CURSOR_GET_PAGE", SETUP_SCAN, b_scan_page, K1_SAME, 0},
    {"RESOURCE_CLOSE", SETUP_SCAN, b_resource_close, K1_SAME, 0},
    {"PUT_BINARY_TYPE", 0, b_put_type, K1_SAME, 0},
    {"GET_BINARY_TYPE", SETUP_TYPE, b_get_type, K1_SAME, 0},
    {"REGISTER_BINARY_TYPE_NAME", 0, b_reg_name, K1_SAME, 0},
    {"GET_BINARY_TYPE_NAME", SETUP_NAME, b_get_name, K1_SAME, 0},
    {"HEARTBEAT", 0, b_heartbeat, K1_SAME, 0},
    {"GET_IDLE_TIMEOUT", 0, b_idle_timeout, K1_SAME, 0},
    {"CLUSTER_GET_STATE", 0, b_cluster_state, K1_SAME, 0},
    {"CACHE_PARTITIONS", 0, b_partitions, K1_SAME, 0},
    {"TX_START", 0, b_tx_start, K1_SAME, 0},
    {"QUERY_SQL_FIELDS", 0, b_sql_fields, K1_SAME, 0},
    {"unknown op code", 0, b_unknown_op, K1_SAME, 0},
    {"PUT of a forbidden type code", 0, b_bad_value, K1_SAME, 0},
};

TEST(oom_proto_each_op)
{
    int total_runs = 0;
    for (int cold = 0; cold < 2; cold++)
        for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) {
            oom_stats s;
            run_oom(&OPS[i], cold, &s);
            total_runs += s.runs;
            if (getenv("EM_OOM_VERBOSE"))
                printf("    %-32s %-4s %3d runs: %3d error replies, %3d closes, %3d successes"
                       " despite a failure\n", OPS[i].name, cold ? "cold" : "warm", s.runs,
                       s.err_replies, s.closes, s.ok_despite);
            if (test_failed())
                return;
        }
    if (getenv("EM_OOM_VERBOSE"))
        printf("    %d runs in all\n", total_runs);
    CHECK(total_runs > (int)(sizeof OPS / sizeof OPS[0]));
}

/* The handshake: 1.2.0, 1.7.0 with an empty feature array, and 1.7.0 with
 * features and a user-attribute map.  A failed handshake must answer with a
 * failure reply (then a retry on the same connection succeeds) or close. */
TEST(oom_proto_handshake)
{
    static const struct { int minor, feat; } V[] = {{2, 0}, {7, 0}, {7, 1}};
    for (size_t v = 0; v < 3; v++) {
        int done = 0;
        for (int n = 1; n <= OOM_MAX_N && !done; n++) {
            int64_t b0 = em_mem_live_bytes(), k0 = em_mem_live_blocks();
            st_store *st = NULL;
            bin_registry *reg = bin_registry_new();
            pr_server *ps = NULL;
            pr_options o;
            pr_options_default(&o);
            REQUIRE(reg);
            REQUIRE_OK(st_open(&st, NULL));
            REQUIRE_OK(pr_server_new(&ps, st, reg, &o));
            env e;
            memset(&e, 0, sizeof e);
            hs_frame(&e.fb, V[v].minor, V[v].feat);
            uint64_t f0 = em_mem_failures();
            em_mem_fail_after((uint64_t)n, 0);
            pr_conn *c = pr_conn_new(ps);
            int rc = c ? feed(&e, c) : EM_NOMEM;
            em_mem_fail_after(0, 0);
            int injected = em_mem_failures() > f0;
            if (c && rc == 0) {
                CHECK(e.out.len >= 5);
                if (e.out.len >= 5 && e.out.p[4] != 1) {
                    CHECK(injected);
                    /* failure reply: a retry on the same connection must work */
                    rc = feed(&e, c);
                    CHECK(rc == 0 && e.out.len >= 5 && e.out.p[4] == 1);
                } else {
                    CHECK(pr_conn_ready(c));
                }
            } else {
                CHECK(injected);            /* only an allocation failure may close */
            }
            if (!injected)
                done = 1;
            if (c) pr_conn_free(c);
            em_buf_free(&e.out);
            em_buf_free(&e.fb);
            pr_server_free(ps);
            bin_registry_free(reg);
            st_close(st);
            int64_t db = em_mem_live_bytes() - b0, dk = em_mem_live_blocks() - k0;
            if (db || dk) {
                test_fail(__FILE__, __LINE__, "handshake 1.%d.0%s, allocation %d failed: leak of"
                          " %lld bytes in %lld blocks", V[v].minor, V[v].feat ? " +features" : "",
                          n, (long long)db, (long long)dk);
                return;
            }
            if (test_failed())
                return;
        }
        CHECK(done);
    }
}
