/* test_net_defer.c - net's before_send hook (net.h): replies produced in a
 * loop pass leave only after the hook returned 0 (a slow hook is seen to
 * finish first, also for a client that half-closes), and when it fails the
 * connection is closed without a byte of those replies.
 */
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"
#include "util/buf.h"
#include "util/err.h"

static int dstate;
static _Atomic int data_calls, synced_upto, fail_hook;

static void *d_open(void *arg, net_conn *c) { (void)arg; (void)c; return &dstate; }
static void d_close(void *arg, void *state) { (void)arg; (void)state; }

/* echo of 4-byte frames */
static int d_data(void *arg, net_conn *c, void *state, const uint8_t *p, size_t n,
                  em_buf *out, size_t cap, size_t *consumed)
{
    (void)arg; (void)c; (void)state; (void)cap;
    size_t pos = 0;
    while (n - pos >= 4) {
        if (em_buf_append(out, p + pos, 4))
            return EM_NOMEM;
        atomic_fetch_add(&data_calls, 1);
        pos += 4;
    }
    *consumed = pos;
    return 0;
}

/* slow "fsync": what it covers is recorded only after 30 ms */
static int d_before(void *arg)
{
    (void)arg;
    int seen = atomic_load(&data_calls);
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (atomic_load(&fail_hook))
        return EM_IO;
    atomic_store(&synced_upto, seen);
    return 0;
}

static int start(net_server **s)
{
    net_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.threads = 2;
    o.cb.on_open = d_open;
    o.cb.on_data = d_data;
    o.cb.on_close = d_close;
    o.cb.before_send = d_before;
    return net_server_start(s, &o);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* rd reads up to n bytes within 2 s; returns bytes read (0 = EOF/timeout). */
static ssize_t rd(int fd, uint8_t *p, size_t n)
{
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    if (poll(&pf, 1, 2000) <= 0)
        return -2;
    return recv(fd, p, n, 0);
}

TEST(net_defer_reply_after_hook)
{
    atomic_store(&data_calls, 0);
    atomic_store(&synced_upto, 0);
    atomic_store(&fail_hook, 0);
    net_server *s;
    REQUIRE_OK(start(&s));
    int fd = dial(net_server_port(s));
    REQUIRE(fd >= 0);
    for (int i = 1; i <= 5; i++) {
        uint8_t q[4] = {(uint8_t)i, 2, 3, 4}, r[4];
        REQUIRE(send(fd, q, 4, 0) == 4);
        REQUIRE(rd(fd, r, 4) == 4);
        CHECK(memcmp(q, r, 4) == 0);
        /* the hook that covered this request finished before the reply */
        CHECK(atomic_load(&synced_upto) >= i);
    }
    /* half-close: the last reply still comes, after the hook, then EOF */
    uint8_t q[4] = {9, 9, 9, 9}, r[8];
    REQUIRE(send(fd, q, 4, 0) == 4);
    shutdown(fd, SHUT_WR);
    REQUIRE(rd(fd, r, 4) == 4);
    CHECK(atomic_load(&synced_upto) >= 6);
    CHECK(rd(fd, r, 8) == 0);
    close(fd);
    net_server_stop(s);
}

TEST(net_defer_failed_hook_never_replies)
{
    atomic_store(&data_calls, 0);
    atomic_store(&synced_upto, 0);
    atomic_store(&fail_hook, 1);
    net_server *s;
    REQUIRE_OK(start(&s));
    int fd = dial(net_server_port(s));
    REQUIRE(fd >= 0);
    uint8_t q[4] = {1, 2, 3, 4}, r[4];
    REQUIRE(send(fd, q, 4, 0) == 4);
    ssize_t n = rd(fd, r, 4);
    CHECK(n == 0 || n == -1);        /* closed (EOF or reset), no reply bytes */
    close(fd);
    CHECK_EQ(atomic_load(&data_calls), 1);
    net_server_stop(s);
}
