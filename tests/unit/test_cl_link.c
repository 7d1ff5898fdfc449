/* test_cl_link.c - the cluster transport (cluster/cl_net.c) over real
 * loopback sockets: handshake, refusals, one link per pair, the fault hook,
 * hostile peers, silent peers.  Every wait is for a condition, with a bound
 * generous enough for a loaded machine. */
#include "test.h"

#include "cluster/cl_net.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_MS 60000

typedef struct node {
    cl_net *net;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ups, downs_up, refusals;
    char last_why[192];
    uint64_t peer_msb;
    char peer_cid[64];
    int frames;
    uint64_t seq[64];            /* payloads of REPL_UPDATE frames, in arrival order */
    int fault_mode;              /* CL_NET_* applied to REPL_UPDATE */
    int slow_us;                 /* on_frame takes this long (a busy callback) */
    uint32_t delay_ms;
} node;

static void on_up(void *arg, cl_net_link *l, const cl_net_hello *h)
{
    node *n = arg;
    (void)l;
    pthread_mutex_lock(&n->mu);
    n->ups++;
    n->peer_msb = h->node_msb;
    snprintf(n->peer_cid, sizeof n->peer_cid, "%.*s", (int)h->consistent_len, h->consistent);
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

static void on_frame(void *arg, cl_net_link *l, uint16_t type, const uint8_t *p, size_t len)
{
    node *n = arg;
    pthread_mutex_lock(&n->mu);
    if (type == CL_NET_MSG_REPL_UPDATE && len == 8 && n->frames < 64)
        n->seq[n->frames++] = em_ld64(p);
    int slow = n->slow_us;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    if (slow)
        usleep((useconds_t)slow);
    /* Echo an ACK back on the same link from the loop thread. */
    if (type == CL_NET_MSG_REPL_UPDATE)
        (void)cl_net_link_send(l, CL_NET_MSG_REPL_ACK, p, len);
}

static void on_down(void *arg, cl_net_link *l, int was_up, const char *why)
{
    node *n = arg;
    (void)l;
    pthread_mutex_lock(&n->mu);
    if (was_up)
        n->downs_up++;
    else
        n->refusals++;
    snprintf(n->last_why, sizeof n->last_why, "%s", why);
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

static int fault(void *arg, uint64_t msb, uint64_t lsb, uint16_t type, uint32_t *delay)
{
    node *n = arg;
    (void)msb; (void)lsb;
    if (type != CL_NET_MSG_REPL_UPDATE)
        return CL_NET_PASS;
    pthread_mutex_lock(&n->mu);
    int m = n->fault_mode;
    *delay = n->delay_ms;
    if (m == CL_NET_DELAY)
        n->fault_mode = CL_NET_PASS;    /* only the first frame is held back */
    pthread_mutex_unlock(&n->mu);
    return m;
}

static int node_start(node *n, uint64_t id, const char *cluster, const char *secret,
                      uint32_t link_timeout_ms)
{
    memset(n, 0, sizeof *n);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    char cid[32];
    snprintf(cid, sizeof cid, "node-%llu", (unsigned long long)id);
    cl_net_opts o = {
        .cluster = cluster, .secret = secret, .secret_len = secret ? strlen(secret) : 0,
        .node_msb = id, .node_lsb = id * 3, .consistent = cid,
        .link_timeout_ms = link_timeout_ms, .handshake_ms = 30000,
        .arg = n, .on_up = on_up, .on_frame = on_frame, .on_down = on_down,
        .fault = fault, .fault_arg = n,
    };
    return cl_net_start(&n->net, &o);
}

static void node_stop(node *n)
{
    cl_net_stop(n->net);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
}

/* wait_for: until *field >= want (under n->mu), or WAIT_MS. */
static int wait_for(node *n, const int *field, int want)
{
    uint64_t end = em_now_ms() + WAIT_MS;
    pthread_mutex_lock(&n->mu);
    while (*field < want && em_now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
    int ok = *field >= want;
    pthread_mutex_unlock(&n->mu);
    return ok;
}

/* get: *field read under n->mu (the loop thread writes it). */
static int get(node *n, const int *field)
{
    pthread_mutex_lock(&n->mu);
    int v = *field;
    pthread_mutex_unlock(&n->mu);
    return v;
}

static int send_seq(node *from, uint64_t to, uint64_t v)
{
    uint8_t b[8];
    em_st64(b, v);
    return cl_net_send(from->net, to, to * 3, CL_NET_MSG_REPL_UPDATE, b, 8);
}

TEST(cl_link_handshake_and_frames_both_ways)
{
    node a, b;
    REQUIRE_OK(node_start(&a, 1, "c1", NULL, 0));
    REQUIRE_OK(node_start(&b, 2, "c1", NULL, 0));
    REQUIRE_OK(cl_net_connect(b.net, "127.0.0.1", cl_net_port(a.net)));
    CHECK(wait_for(&a, &a.ups, 1));
    CHECK(wait_for(&b, &b.ups, 1));
    CHECK_EQ(a.peer_msb, 2);
    CHECK(strcmp(a.peer_cid, "node-2") == 0);
    CHECK(strcmp(b.peer_cid, "node-1") == 0);
    for (uint64_t i = 0; i < 10; i++)
        REQUIRE_OK(send_seq(&b, 1, i));
    for (uint64_t i = 0; i < 5; i++)
        REQUIRE_OK(send_seq(&a, 2, 100 + i));
    CHECK(wait_for(&a, &a.frames, 10));
    CHECK(wait_for(&b, &b.frames, 5));
    for (int i = 0; i < 10; i++)
        CHECK_EQ(a.seq[i], (uint64_t)i);          /* FIFO per link */
    for (int i = 0; i < 5; i++)
        CHECK_EQ(b.seq[i], 100 + (uint64_t)i);
    /* A frame for a node with no link is dropped and counted, not queued. */
    REQUIRE_OK(send_seq(&a, 9, 1));
    REQUIRE_OK(send_seq(&a, 2, 200));
    CHECK(wait_for(&b, &b.frames, 6));
    cl_net_stats st;
    cl_net_stats_get(a.net, &st);
    CHECK_EQ(st.dropped_no_link, 1);
    node_stop(&b);
    CHECK(wait_for(&a, &a.downs_up, 1));
    node_stop(&a);
}

TEST(cl_link_refuses_other_cluster_and_bad_secrets)
{
    node a, b, c, d;
    REQUIRE_OK(node_start(&a, 1, "prod", "secret-1", 0));
    REQUIRE_OK(node_start(&b, 2, "test", "secret-1", 0));
    REQUIRE_OK(node_start(&c, 3, "prod", "secret-2", 0));
    REQUIRE_OK(node_start(&d, 4, "prod", NULL, 0));
    int port = cl_net_port(a.net);
    REQUIRE_OK(cl_net_connect(b.net, "127.0.0.1", port));
    CHECK(wait_for(&b, &b.refusals, 1));
    /* The refusing side says why, and the refused side hears it. */
    CHECK(strstr(b.last_why, "the peer refused this node") != NULL);
    CHECK(strstr(b.last_why, "this node to 'prod'") != NULL);
    REQUIRE_OK(cl_net_connect(c.net, "127.0.0.1", port));
    CHECK(wait_for(&c, &c.refusals, 1));
    REQUIRE_OK(cl_net_connect(d.net, "127.0.0.1", port));
    CHECK(wait_for(&d, &d.refusals, 1));
    CHECK(wait_for(&a, &a.refusals, 3));
    CHECK_EQ(get(&a, &a.ups) + get(&b, &b.ups) + get(&c, &c.ups) + get(&d, &d.ups), 0);

    /* The right secret still gets in. */
    node e;
    REQUIRE_OK(node_start(&e, 5, "prod", "secret-1", 0));
    REQUIRE_OK(cl_net_connect(e.net, "127.0.0.1", port));
    CHECK(wait_for(&e, &e.ups, 1));
    CHECK(wait_for(&a, &a.ups, 1));
    node_stop(&e); node_stop(&d); node_stop(&c); node_stop(&b); node_stop(&a);
}

TEST(cl_link_one_link_per_pair_when_both_connect)
{
    node a, b;
    REQUIRE_OK(node_start(&a, 1, "c1", NULL, 0));
    REQUIRE_OK(node_start(&b, 2, "c1", NULL, 0));
    REQUIRE_OK(cl_net_connect(b.net, "127.0.0.1", cl_net_port(a.net)));
    REQUIRE_OK(cl_net_connect(a.net, "127.0.0.1", cl_net_port(b.net)));
    /* Both handshakes complete or one is cut as a duplicate; either way each
     * side ends with exactly one up link, and frames flow over it. */
    int done = 0;
    uint64_t end = em_now_ms() + WAIT_MS;
    while (!done && em_now_ms() < end) {
        pthread_mutex_lock(&a.mu);
        int la = a.ups - a.downs_up, settled_a = a.ups + a.refusals >= 2 || a.ups >= 2;
        pthread_mutex_unlock(&a.mu);
        pthread_mutex_lock(&b.mu);
        int lb = b.ups - b.downs_up, settled_b = b.ups + b.refusals >= 2 || b.ups >= 2;
        pthread_mutex_unlock(&b.mu);
        done = la == 1 && lb == 1 && settled_a && settled_b;
        if (!done)
            usleep(10000);
    }
    CHECK(done);
    REQUIRE_OK(send_seq(&a, 2, 7));
    CHECK(wait_for(&b, &b.frames, 1));
    CHECK_EQ(b.seq[0], 7);
    node_stop(&a);
    node_stop(&b);
}

/* settled: every one of `links` connections between a and b went up or was
 * refused at both ends, and each end keeps exactly `keep` up links. */
static int settled(node *a, node *b, int links, int keep)
{
    uint64_t end = em_now_ms() + WAIT_MS;
    for (;;) {
        int ok = 1;
        for (node *n = a; n; n = n == a ? b : NULL) {
            pthread_mutex_lock(&n->mu);
            ok &= n->ups + n->refusals == links && n->ups - n->downs_up == keep;
            pthread_mutex_unlock(&n->mu);
        }
        if (ok || em_now_ms() >= end)
            return ok;
        usleep(10000);
    }
}

TEST(cl_link_redials_keep_the_same_link_at_both_ends)
{
    /* The smaller id redials while its earlier connects are still in their
     * handshakes (a busy machine, a retry timer): both ends see the links
     * come up in their own order, and must still keep the same one - ends
     * that each keep the newest close each other's and lose both. */
    for (int round = 0; round < 5; round++) {
        node a, b;
        REQUIRE_OK(node_start(&a, 1, "c1", NULL, 0));
        REQUIRE_OK(node_start(&b, 2, "c1", NULL, 0));
        for (int i = 0; i < 8; i++)
            REQUIRE_OK(cl_net_connect(a.net, "127.0.0.1", cl_net_port(b.net)));
        CHECK(settled(&a, &b, 8, 1));
        REQUIRE_OK(send_seq(&a, 2, 7));
        CHECK(wait_for(&b, &b.frames, 1));
        node_stop(&a);
        node_stop(&b);
    }
}

TEST(cl_link_fault_hook_drops_duplicates_and_reorders)
{
    node a, b;
    REQUIRE_OK(node_start(&a, 1, "c1", NULL, 0));
    REQUIRE_OK(node_start(&b, 2, "c1", NULL, 0));
    REQUIRE_OK(cl_net_connect(b.net, "127.0.0.1", cl_net_port(a.net)));
    CHECK(wait_for(&b, &b.ups, 1));
    CHECK(wait_for(&a, &a.ups, 1));

    /* The hook runs on the loop thread: each mode is set, then its effect
     * awaited, before the next. */
    pthread_mutex_lock(&b.mu);
    b.fault_mode = CL_NET_DROP;
    pthread_mutex_unlock(&b.mu);
    REQUIRE_OK(send_seq(&b, 1, 1));
    cl_net_stats st;
    uint64_t end = em_now_ms() + WAIT_MS;
    do {
        cl_net_stats_get(b.net, &st);
    } while (st.fault_dropped == 0 && em_now_ms() < end && usleep(5000) == 0);
    pthread_mutex_lock(&b.mu);
    b.fault_mode = CL_NET_DUP;
    pthread_mutex_unlock(&b.mu);
    REQUIRE_OK(send_seq(&b, 1, 2));
    CHECK(wait_for(&a, &a.frames, 2));
    CHECK_EQ(a.seq[0], 2);
    CHECK_EQ(a.seq[1], 2);
    pthread_mutex_lock(&b.mu);
    b.fault_mode = CL_NET_PASS;
    pthread_mutex_unlock(&b.mu);

    /* Hold 3 back; 4 overtakes it. */
    pthread_mutex_lock(&b.mu);
    b.fault_mode = CL_NET_DELAY;
    b.delay_ms = 300;
    pthread_mutex_unlock(&b.mu);
    REQUIRE_OK(send_seq(&b, 1, 3));
    REQUIRE_OK(send_seq(&b, 1, 4));
    CHECK(wait_for(&a, &a.frames, 4));
    CHECK_EQ(a.seq[2], 4);
    CHECK_EQ(a.seq[3], 3);
    cl_net_stats_get(b.net, &st);
    CHECK_EQ(st.fault_dropped, 1);
    CHECK_EQ(st.fault_duplicated, 1);
    CHECK_EQ(st.fault_delayed, 1);
    node_stop(&b);
    node_stop(&a);
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* read_closed: 1 once the server closed fd (EOF or reset), within WAIT_MS. */
static int read_closed(int fd)
{
    struct timeval tv = { .tv_sec = WAIT_MS / 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t buf[4096];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            return 1;
        if (r < 0)
            return 0;
    }
}

TEST(cl_link_hostile_peers_close_alone)
{
    node a, b;
    REQUIRE_OK(node_start(&a, 1, "c1", NULL, 0));
    REQUIRE_OK(node_start(&b, 2, "c1", NULL, 0));
    REQUIRE_OK(cl_net_connect(b.net, "127.0.0.1", cl_net_port(a.net)));
    CHECK(wait_for(&a, &a.ups, 1));
    int port = cl_net_port(a.net);

    static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0x7f, 1, 0 };
    /* 4 KiB is a fine frame on an up link, but not before the handshake:
     * an anonymous peer gets nothing that size buffered. */
    static const uint8_t big_hello[] = { 0x00, 0x10, 0x00, 0x00, CL_NET_MSG_HELLO, 0 };
    static const uint8_t ping_first[] = { 2, 0, 0, 0, CL_NET_MSG_PING, 0 };
    static const uint8_t garbage[] = "GET / HTTP/1.1\r\n\r\n";
    const uint8_t *inputs[] = { huge, ping_first, garbage, big_hello };
    size_t lens[] = { sizeof huge, sizeof ping_first, sizeof garbage - 1, sizeof big_hello };
    for (int i = 0; i < 4; i++) {
        int fd = raw_connect(port);
        REQUIRE(fd >= 0);
        CHECK(send(fd, inputs[i], lens[i], 0) == (ssize_t)lens[i]);
        CHECK(read_closed(fd));
        close(fd);
    }
    /* The real link is untouched. */
    REQUIRE_OK(send_seq(&b, 1, 42));
    CHECK(wait_for(&a, &a.frames, 1));
    CHECK_EQ(get(&a, &a.downs_up), 0);
    node_stop(&b);
    node_stop(&a);
}

TEST(cl_link_busy_link_is_not_taken_for_silent)
{
    /* Frames that keep the transport thread busy past a millisecond stamp
     * their arrival later than the loop pass that runs the timer check: the
     * check must not read that as a link silent for ever. */
    node a, b;
    REQUIRE_OK(node_start(&a, 1, "c1", NULL, 0));
    REQUIRE_OK(node_start(&b, 2, "c1", NULL, 0));
    pthread_mutex_lock(&a.mu);
    a.slow_us = 2000;
    pthread_mutex_unlock(&a.mu);
    REQUIRE_OK(cl_net_connect(b.net, "127.0.0.1", cl_net_port(a.net)));
    CHECK(wait_for(&a, &a.ups, 1));
    CHECK(wait_for(&b, &b.ups, 1));
    /* Bursts of two frames for about 2 s: about ten timer checks, each
     * likely at the end of a pass that took 4 ms. */
    uint64_t end = em_now_ms() + 2000;
    while (em_now_ms() < end) {
        REQUIRE_OK(send_seq(&b, 1, 1));
        REQUIRE_OK(send_seq(&b, 1, 2));
        usleep(5000);
    }
    CHECK_EQ(get(&a, &a.downs_up), 0);
    CHECK_EQ(get(&b, &b.downs_up), 0);
    node_stop(&a);
    node_stop(&b);
}

TEST(cl_link_silent_peer_is_closed_after_link_timeout)
{
    node a;
    REQUIRE_OK(node_start(&a, 1, "c1", NULL, 1000));
    int fd = raw_connect(cl_net_port(a.net));
    REQUIRE(fd >= 0);
    /* A hand-made peer: HELLO and an empty AUTH, then silence. */
    em_buf b = EM_BUF_INIT;
    cl_net_hello h = { .version = CL_NET_VERSION, .node_msb = 77, .node_lsb = 1,
                       .cluster = "c1", .cluster_len = 2,
                       .consistent = "mute", .consistent_len = 4 };
    REQUIRE_OK(cl_net_hello_encode(&b, &h));
    size_t at;
    REQUIRE_OK(cl_net_frame_begin(&b, CL_NET_MSG_AUTH, &at));
    cl_net_frame_end(&b, at);
    CHECK(send(fd, b.p, b.len, 0) == (ssize_t)b.len);
    em_buf_free(&b);
    CHECK(wait_for(&a, &a.ups, 1));
    CHECK(read_closed(fd));
    CHECK(wait_for(&a, &a.downs_up, 1));
    CHECK(strstr(a.last_why, "no frame from the peer") != NULL);
    close(fd);
    node_stop(&a);
}
