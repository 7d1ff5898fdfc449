/* test_cl_net.c - cluster frames and handshake (cluster/cl_net_codec.c):
 * round trips, every truncation, hostile lengths, and the peer checks. */
#include <stdio.h>

#include "test.h"

#include "cluster/cl_net.h"
#include "util/err.h"
#include "util/mem.h"

static cl_net_hello sample(void)
{
    cl_net_hello h = {
        .version = CL_NET_VERSION, .flags = CL_NET_HELLO_SECRET,
        .node_msb = 0x1122334455667788ull, .node_lsb = 0x99aabbccddeeff00ull,
        .top_major = 7, .top_minor = 3,
        .cluster = "prod", .cluster_len = 4,
        .consistent = "127.0.0.1:47100", .consistent_len = 15,
    };
    for (int i = 0; i < CL_NET_NONCE; i++)
        h.nonce[i] = (uint8_t)(i * 7 + 1);
    return h;
}

TEST(cl_net_hello_round_trip_and_frame)
{
    em_buf b = EM_BUF_INIT;
    cl_net_hello h = sample(), d;
    REQUIRE_OK(cl_net_hello_encode(&b, &h));
    cl_net_frame f;
    REQUIRE_OK(cl_net_frame_parse(b.p, b.len, CL_NET_MAX_FRAME_DEFAULT, &f));
    CHECK_EQ(f.type, CL_NET_MSG_HELLO);
    CHECK_EQ(f.total, b.len);
    REQUIRE_OK(cl_net_hello_decode(f.payload, f.len, &d));
    CHECK_EQ(d.version, h.version);
    CHECK_EQ(d.flags, h.flags);
    CHECK_EQ(d.node_msb, h.node_msb);
    CHECK_EQ(d.node_lsb, h.node_lsb);
    CHECK_EQ(d.top_major, 7);
    CHECK_EQ(d.top_minor, 3);
    CHECK_MEM(d.nonce, h.nonce, CL_NET_NONCE);
    CHECK(d.cluster_len == 4 && memcmp(d.cluster, "prod", 4) == 0);
    CHECK(d.consistent_len == 15 && memcmp(d.consistent, "127.0.0.1:47100", 15) == 0);
    CHECK(strcmp(cl_net_msg_name(CL_NET_MSG_PME_FULL), "PME_FULL") == 0);
    CHECK(cl_net_msg_name(9999) == NULL);
    em_buf_free(&b);
}

TEST(cl_net_every_truncation_is_refused_or_waits)
{
    em_buf b = EM_BUF_INIT;
    cl_net_hello h = sample(), d;
    REQUIRE_OK(cl_net_hello_encode(&b, &h));
    cl_net_frame f;
    for (size_t n = 0; n < b.len; n++)
        CHECK_EQ(cl_net_frame_parse(b.p, n, CL_NET_MAX_FRAME_DEFAULT, &f), EM_AGAIN);
    /* A payload cut anywhere, as a lying length would present it. */
    const uint8_t *pl = b.p + CL_NET_HDR;
    size_t pn = b.len - CL_NET_HDR;
    for (size_t n = 0; n < pn; n++)
        CHECK(cl_net_hello_decode(pl, n, &d) != 0);
    em_buf_free(&b);
}

TEST(cl_net_hostile_frames)
{
    uint8_t p[16] = { 0 };
    cl_net_frame f;
    em_st32(p, 1);                              /* shorter than its type */
    CHECK_EQ(cl_net_frame_parse(p, 8, 1024, &f), EM_BADLEN);
    em_st32(p, 0xffffffffu);                    /* refused before buffering */
    CHECK_EQ(cl_net_frame_parse(p, 4, 1024, &f), EM_BADLEN);
    em_st32(p, 1025);
    CHECK_EQ(cl_net_frame_parse(p, 4, 1024, &f), EM_BADLEN);
    em_st32(p, 2);
    em_st16(p + 4, 9999);                       /* unknown type */
    CHECK_EQ(cl_net_frame_parse(p, 6, 1024, &f), EM_BADOP);
    em_st16(p + 4, CL_NET_MSG_PING);            /* empty payload is fine */
    REQUIRE_OK(cl_net_frame_parse(p, 6, 1024, &f));
    CHECK_EQ(f.len, 0);

    /* Names: empty, not UTF-8, with NUL, trailing bytes. */
    em_buf b = EM_BUF_INIT;
    cl_net_hello h = sample(), d;
    REQUIRE_OK(cl_net_hello_encode(&b, &h));
    uint8_t *pl = b.p + CL_NET_HDR;
    size_t pn = b.len - CL_NET_HDR;
    pl[52 + 1] = 0xff;                          /* first byte of the cluster name */
    CHECK_EQ(cl_net_hello_decode(pl, pn, &d), EM_BADUTF8);
    pl[52 + 1] = 0;
    CHECK_EQ(cl_net_hello_decode(pl, pn, &d), EM_BADUTF8);
    pl[52 + 1] = 'p';
    pl[52] = 0;
    CHECK_EQ(cl_net_hello_decode(pl, pn, &d), EM_BADLEN);
    pl[52] = 4;
    REQUIRE_OK(em_buf_put_u8(&b, 1));
    CHECK_EQ(cl_net_hello_decode(b.p + CL_NET_HDR, pn + 1, &d), EM_TRAILING);
    pl = b.p + CL_NET_HDR;
    pl[0] = 'X';
    CHECK_EQ(cl_net_hello_decode(pl, pn, &d), EM_PROTO);
    em_buf_free(&b);

    cl_net_hello bad = sample();
    bad.cluster_len = 0;
    em_buf c = EM_BUF_INIT;
    CHECK_EQ(cl_net_hello_encode(&c, &bad), EM_BADLEN);
    em_buf_free(&c);
}

TEST(cl_net_peer_checks_name_version_and_secret)
{
    cl_net_hello h = sample();
    char why[160];
    CHECK_OK(cl_net_check_peer(&h, "prod", 4, 1, why, sizeof why));
    CHECK_EQ(cl_net_check_peer(&h, "test", 4, 1, why, sizeof why), EM_AUTH);
    CHECK(strstr(why, "cluster 'prod'") != NULL);
    CHECK_EQ(cl_net_check_peer(&h, "prod", 4, 0, why, sizeof why), EM_AUTH);
    h.flags = 0;
    CHECK_EQ(cl_net_check_peer(&h, "prod", 4, 1, why, sizeof why), EM_AUTH);
    h.version = CL_NET_VERSION + 1;
    CHECK_EQ(cl_net_check_peer(&h, "prod", 4, 0, why, sizeof why), EM_AUTH);
    char want[32];
    snprintf(want, sizeof want, "version %d", CL_NET_VERSION + 1);
    CHECK(strstr(why, want) != NULL);
}

TEST(cl_net_proofs_bind_role_nonce_and_node)
{
    static const char secret[] = "s3cret";
    uint8_t nonce[CL_NET_NONCE] = { 1, 2, 3 };
    uint8_t proof[CL_NET_PROOF];
    cl_net_proof(proof, secret, 6, 'C', nonce, 10, 20);
    CHECK_OK(cl_net_verify_auth(proof, CL_NET_PROOF, secret, 6, 'C', nonce, 10, 20));
    /* Reflected to the other role, other node, other nonce, other secret. */
    CHECK_EQ(cl_net_verify_auth(proof, CL_NET_PROOF, secret, 6, 'A', nonce, 10, 20), EM_AUTH);
    CHECK_EQ(cl_net_verify_auth(proof, CL_NET_PROOF, secret, 6, 'C', nonce, 10, 21), EM_AUTH);
    nonce[0] = 9;
    CHECK_EQ(cl_net_verify_auth(proof, CL_NET_PROOF, secret, 6, 'C', nonce, 10, 20), EM_AUTH);
    nonce[0] = 1;
    CHECK_EQ(cl_net_verify_auth(proof, CL_NET_PROOF, "other", 5, 'C', nonce, 10, 20), EM_AUTH);
    CHECK_EQ(cl_net_verify_auth(proof, CL_NET_PROOF - 1, secret, 6, 'C', nonce, 10, 20), EM_AUTH);
    /* No secret: an empty AUTH, and only that. */
    CHECK_OK(cl_net_verify_auth(proof, 0, NULL, 0, 'C', nonce, 10, 20));
    CHECK_EQ(cl_net_verify_auth(proof, CL_NET_PROOF, NULL, 0, 'C', nonce, 10, 20), EM_AUTH);
}

TEST(cl_net_frames_encode_in_place_without_allocating_twice)
{
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(em_buf_reserve(&b, 256));
    em_mem_stats a = em_mem_thread();
    size_t at;
    REQUIRE_OK(cl_net_frame_begin(&b, CL_NET_MSG_REPL_ACK, &at));
    REQUIRE_OK(em_buf_put_le64(&b, 42));
    cl_net_frame_end(&b, at);
    CHECK_EQ(em_mem_thread().allocs - a.allocs, 0);
    cl_net_frame f;
    REQUIRE_OK(cl_net_frame_parse(b.p, b.len, 1024, &f));
    CHECK_EQ(f.type, CL_NET_MSG_REPL_ACK);
    CHECK_EQ(f.len, 8);
    CHECK_EQ(em_ld64(f.payload), 42);
    em_buf_free(&b);
}
