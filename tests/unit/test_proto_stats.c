/* test_proto_stats.c - proto/ counting straight into a worker's pr_stats
 * block (requests per op slot, errors, sampled latencies, handshake results)
 * and the handshake's auth hook (wrong password, limiter refusal: status
 * 2000 with version 0.0.0).  Wire layouts: ignite-thin-protocol.md §1.2-§1.5.
 */
#include "test.h"
#include "proto_env.h"

#include <string.h>

#include "binary/binary.h"
#include "proto/proto.h"
#include "proto/proto_stats.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"


static void put_str(em_buf *b, const char *s)
{
    em_buf_put_u8(b, 9);
    em_buf_put_le32(b, (uint32_t)strlen(s));
    em_buf_append(b, s, strlen(s));
}

/* feed_req frames e->req (length placeholder at 0) and feeds it whole. */
static int feed_req(pe_env *e)
{
    em_st32(e->req.p, (uint32_t)(e->req.len - 4));
    em_buf_reset(&e->out);
    size_t used = 0;
    int rc = pr_feed(e->c, e->req.p, e->req.len, &e->out, SIZE_MAX / 2, &used);
    if (rc)
        return rc;
    return used == e->req.len ? 0 : EM_AGAIN;
}

/* handshake at 1.2.0 with user/pw (NULL = no credentials). */
static int handshake(pe_env *e, const char *user, const char *pw)
{
    em_buf_reset(&e->req);
    em_buf_put_le32(&e->req, 0);
    em_buf_put_u8(&e->req, 1);
    em_buf_put_le16(&e->req, 1);
    em_buf_put_le16(&e->req, 2);
    em_buf_put_le16(&e->req, 0);
    em_buf_put_u8(&e->req, 2);
    if (user) {
        put_str(&e->req, user);
        put_str(&e->req, pw);
    }
    return feed_req(e);
}

/* request op with payload cache id (+ int key 1); returns the status. */
static int32_t request(pe_env *e, int op, const char *cache, int with_key)
{
    static int64_t rid;
    em_buf_reset(&e->req);
    em_buf_put_le32(&e->req, 0);
    em_buf_put_le16(&e->req, (uint16_t)op);
    em_buf_put_le64(&e->req, (uint64_t)++rid);
    if (op == 1052) {
        put_str(&e->req, cache);
    } else if (cache) {
        em_buf_put_le32(&e->req, (uint32_t)em_hash_java_str((const uint8_t *)cache, strlen(cache)));
        em_buf_put_u8(&e->req, 0);
    }
    if (with_key) {
        em_buf_put_u8(&e->req, 3);
        em_buf_put_le32(&e->req, 1);
    }
    if (feed_req(e) || e->out.len < 16)
        return -1;
    return (int32_t)em_ld32(e->out.p + 12);    /* pre-1.4.0 header: rid, status */
}

static uint64_t rd(pr_counter *c) { return atomic_load(c); }

static uint64_t timed_total(pr_stats *b)
{
    uint64_t n = 0;
    for (int s = 0; s < PR_STATS_SLOTS; s++)
        for (int i = 0; i < PR_STATS_BUCKETS; i++)
            n += rd(&b->lat[s][i]);
    return n;
}

TEST(proto_stats_counted_in_place)
{
    static pr_stats b;              /* static: the block is 64-byte aligned */
    memset(&b, 0, sizeof b);
    b.sample_mask = PR_STATS_SAMPLE_EVERY - 1;
    pe_env e;
    pr_options o;
    pr_options_default(&o);
    REQUIRE_OK(pe_open(&e, &o));
    pr_conn_set_stats(e.c, &b);
    REQUIRE_OK(handshake(&e, NULL, NULL));
    CHECK(pr_conn_ready(e.c));
    CHECK_EQ(rd(&b.events[PR_EV_HANDSHAKE_OK]), 1);
    CHECK_EQ(request(&e, 1052, "c", 0), 0);
    CHECK_EQ(request(&e, 1000, "missing", 1), PR_ST_CACHE_NOT_FOUND);
    CHECK_EQ(request(&e, 4242, NULL, 0), PR_ST_INVALID_OP);
    for (int i = 0; i < 17; i++)
        CHECK_EQ(request(&e, 1000, "c", 1), 0);
    CHECK_EQ(rd(&b.requests[PR_STATS_SLOT_CACHE_GET_OR_CREATE_WITH_NAME]), 1);
    CHECK_EQ(rd(&b.requests[PR_STATS_SLOT_CACHE_GET]), 18);
    CHECK_EQ(rd(&b.errors[PR_STATS_SLOT_CACHE_GET]), 1);
    CHECK_EQ(rd(&b.requests[PR_STATS_SLOT_OTHER]), 1);
    CHECK_EQ(rd(&b.errors[PR_STATS_SLOT_OTHER]), 1);
    /* 20 requests, one in 16 timed starting with the first: #1 and #17 */
    CHECK_EQ(timed_total(&b), 2);
    uint64_t create_timed = 0;
    for (int i = 0; i < PR_STATS_BUCKETS; i++)
        create_timed += rd(&b.lat[PR_STATS_SLOT_CACHE_GET_OR_CREATE_WITH_NAME][i]);
    CHECK_EQ(create_timed, 1);
    /* wire bytes are the server's to count, per read batch */
    CHECK_EQ(rd(&b.bytes_in), 0);
    pe_close(&e);
}

TEST(proto_stats_off_counts_nothing)
{
    static pr_stats b;
    memset(&b, 0, sizeof b);
    pe_env e;
    pr_options o;
    pr_options_default(&o);
    REQUIRE_OK(pe_open(&e, &o));
    pr_conn_set_stats(e.c, &b);
    pr_conn_set_stats(e.c, NULL);
    REQUIRE_OK(handshake(&e, NULL, NULL));
    CHECK_EQ(request(&e, 1052, "c", 0), 0);
    static const pr_stats zero;
    CHECK(memcmp(&b, &zero, sizeof b) == 0);
    pe_close(&e);
}

typedef struct auth_log {
    char peer[64];
    int  calls;
} auth_log;

static int fake_auth(void *arg, const char *peer, const uint8_t *user, size_t ul,
                     const uint8_t *pw, size_t pl)
{
    auth_log *l = arg;
    l->calls++;
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    if (!user)
        return EM_AUTH;
    if (ul == 7 && !memcmp(user, "limited", 7))
        return EM_TOOMANY;
    return ul == 3 && !memcmp(user, "ops", 3) && pl == 2 && !memcmp(pw, "pw", 2) ? 0 : EM_AUTH;
}

/* check_auth_failure: a handshake failure reply with version 0.0.0, status
 * 2000 and message msg. */
static void check_auth_failure(pe_env *e, const char *msg)
{
    REQUIRE(e->out.len > 16);
    CHECK_EQ(e->out.p[4], 0);
    CHECK_EQ(em_ld16(e->out.p + 5), 0);
    CHECK_EQ(em_ld16(e->out.p + 7), 0);
    CHECK_EQ(em_ld16(e->out.p + 9), 0);
    uint32_t ml = em_ld32(e->out.p + 12);
    REQUIRE(16 + ml + 4 <= e->out.len);
    CHECK_EQ(ml, strlen(msg));
    CHECK(memcmp(e->out.p + 16, msg, ml) == 0);
    CHECK_EQ(em_ld32(e->out.p + 16 + ml), PR_ST_AUTH_FAILED);
}

TEST(proto_auth_hook_wrong_limited_and_right)
{
    static pr_stats b;
    memset(&b, 0, sizeof b);
    auth_log log = {"", 0};
    pe_env e;
    pr_options o;
    pr_options_default(&o);
    o.username = "ignored";         /* the hook replaces username/password */
    o.password = "ignored";
    o.auth = fake_auth;
    o.auth_arg = &log;
    REQUIRE_OK(pe_open(&e, &o));
    pr_conn_set_stats(e.c, &b);
    pr_conn_set_peer(e.c, "10.0.0.7:5555");
    CHECK_OK(handshake(&e, "ops", "nope"));
    check_auth_failure(&e, "The user name or password is incorrect");
    CHECK(!pr_conn_ready(e.c));
    CHECK_OK(handshake(&e, "limited", "pw"));
    check_auth_failure(&e, "Too many failed login attempts; retry later");
    CHECK_OK(handshake(&e, NULL, NULL));
    check_auth_failure(&e, "The user name or password is incorrect");
    CHECK(!pr_conn_ready(e.c));
    /* no op before a successful handshake: the connection must close */
    em_buf_reset(&e.req);
    em_buf_put_le32(&e.req, 10);
    em_buf_put_le16(&e.req, 1000);
    em_buf_put_le64(&e.req, 1);
    size_t used;
    CHECK(pr_feed(e.c, e.req.p, e.req.len, &e.out, SIZE_MAX / 2, &used) < 0);
    CHECK_EQ(rd(&b.requests[PR_STATS_SLOT_CACHE_GET]), 0);
    CHECK_OK(handshake(&e, "ignored", "ignored"));
    CHECK(!pr_conn_ready(e.c));
    CHECK_OK(handshake(&e, "ops", "pw"));
    CHECK(pr_conn_ready(e.c));
    CHECK_EQ(e.out.len, 5);
    CHECK_EQ(log.calls, 5);
    CHECK(strcmp(log.peer, "10.0.0.7:5555") == 0);
    CHECK_EQ(rd(&b.events[PR_EV_AUTH_FAIL]), 3);
    CHECK_EQ(rd(&b.events[PR_EV_AUTH_LIMITED]), 1);
    CHECK_EQ(rd(&b.events[PR_EV_HANDSHAKE_OK]), 1);
    pe_close(&e);
}
