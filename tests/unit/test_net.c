/* test_net.c - the event loops over real loopback sockets with a tiny framed
 * echo protocol (int length + bytes): replies, the connection cap, the
 * handshake timeout, and backpressure with a client that does not read.
 */
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/net.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/err.h"

static int dummy_state;
static uint32_t reply_size;         /* 0 = echo the payload */

static void *t_open(void *arg, net_conn *c)
{
    (void)arg;
    (void)c;
    return &dummy_state;
}

/* Frames of `int len, bytes`; a first byte 'E' marks the connection
 * established.  Replies: the payload echoed, or reply_size bytes. */
static int t_data(void *arg, net_conn *c, void *state, const uint8_t *p, size_t n,
                  em_buf *out, size_t cap, size_t *consumed)
{
    (void)arg;
    (void)state;
    size_t pos = 0;
    while (n - pos >= 4 && out->len <= cap) {
        uint32_t l = em_ld32(p + pos);
        if (l == 0 || l > 1000)
            return EM_BADLEN;
        if (n - pos - 4 < l)
            break;
        const uint8_t *b = p + pos + 4;
        if (b[0] == 'E')
            net_conn_established(c);
        if (reply_size) {
            if (em_buf_put_le32(out, reply_size) || em_buf_reserve(out, reply_size))
                return EM_NOMEM;
            memset(out->p + out->len, 'r', reply_size);
            out->len += reply_size;
        } else if (em_buf_put_le32(out, l) || em_buf_append(out, b, l)) {
            return EM_NOMEM;
        }
        pos += 4 + l;
    }
    *consumed = pos;
    return 0;
}

static void t_close(void *arg, void *state)
{
    (void)arg;
    (void)state;
}

static int start(net_server **s, uint32_t max_conns, uint32_t hs_ms, size_t soft)
{
    net_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = 0;
    o.threads = 2;
    o.limits.max_conns = max_conns;
    o.limits.handshake_timeout_ms = hs_ms;
    o.limits.out_soft_cap = soft;
    o.cb.on_open = t_open;
    o.cb.on_data = t_data;
    o.cb.on_close = t_close;
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

static void send_frame(int fd, const char *s)
{
    uint8_t b[256];
    uint32_t l = (uint32_t)strlen(s);
    em_st32(b, l);
    memcpy(b + 4, s, l);
    (void)!write(fd, b, 4 + l);
}

/* read_n reads exactly n bytes within ms; returns bytes read (0 on EOF). */
static size_t read_n(int fd, void *buf, size_t n, int ms)
{
    size_t got = 0;
    uint64_t end = em_now_ms() + (uint64_t)ms;
    while (got < n) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left = (int)(end - em_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

/* closed_within: 1 if the peer closes within ms. */
static int closed_within(int fd, int ms)
{
    uint8_t b[64];
    uint64_t end = em_now_ms() + (uint64_t)ms;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left = (int)(end - em_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return 0;
        ssize_t r = read(fd, b, sizeof b);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return 1;
    }
}

TEST(net_echo_pipelined)
{
    net_server *s;
    reply_size = 0;
    REQUIRE_OK(start(&s, 0, 0, 0));
    int fd = dial(net_server_port(s));
    REQUIRE(fd >= 0);
    /* three frames in one write come back in order */
    uint8_t req[3 * 9];
    for (int i = 0; i < 3; i++) {
        em_st32(req + 9 * i, 5);
        memcpy(req + 9 * i + 4, i == 0 ? "abcde" : i == 1 ? "fghij" : "klmno", 5);
    }
    CHECK_EQ(write(fd, req, sizeof req), sizeof req);
    uint8_t rep[sizeof req];
    CHECK_EQ(read_n(fd, rep, sizeof rep, 2000), sizeof rep);
    CHECK_MEM(rep, req, sizeof req);
    CHECK_EQ(net_conn_count(s), 1);
    close(fd);
    net_server_stop(s);
}

TEST(net_max_connections_rejected_at_accept)
{
    net_server *s;
    reply_size = 0;
    REQUIRE_OK(start(&s, 2, 0, 0));
    int a = dial(net_server_port(s)), b = dial(net_server_port(s));
    REQUIRE(a >= 0 && b >= 0);
    send_frame(a, "x");
    send_frame(b, "y");
    char r[5];
    CHECK_EQ(read_n(a, r, 5, 2000), 5);
    CHECK_EQ(read_n(b, r, 5, 2000), 5);
    int c = dial(net_server_port(s));
    REQUIRE(c >= 0);
    CHECK(closed_within(c, 2000));
    close(c);
    /* the two admitted connections still work */
    send_frame(a, "z");
    CHECK_EQ(read_n(a, r, 5, 2000), 5);
    close(a);
    close(b);
    net_server_stop(s);
}

TEST(net_handshake_timeout)
{
    net_server *s;
    reply_size = 0;
    REQUIRE_OK(start(&s, 0, 300, 0));
    int idle = dial(net_server_port(s));
    int est = dial(net_server_port(s));
    REQUIRE(idle >= 0 && est >= 0);
    send_frame(est, "E");
    char r[5];
    CHECK_EQ(read_n(est, r, 5, 2000), 5);
    uint64_t t0 = em_now_ms();
    CHECK(closed_within(idle, 2000));
    CHECK(em_now_ms() - t0 < 1000);
    CHECK(!closed_within(est, 600));
    send_frame(est, "E");
    CHECK_EQ(read_n(est, r, 5, 2000), 5);
    close(idle);
    close(est);
    net_server_stop(s);
}

TEST(net_backpressure_client_not_reading)
{
    net_server *s;
    reply_size = 32 * 1024;
    REQUIRE_OK(start(&s, 0, 0, 64 * 1024));
    int fd = dial(net_server_port(s));
    REQUIRE(fd >= 0);
    /* All 200 requests in one write: the server stops at its output cap
     * with the rest buffered, and must resume them once the kernel has taken
     * the queued replies (with or without an EPOLLOUT wake-up). */
    uint8_t reqs[200 * 5];
    for (int i = 0; i < 200; i++) {
        em_st32(reqs + 5 * i, 1);
        reqs[5 * i + 4] = 'q';
    }
    CHECK_EQ(write(fd, reqs, sizeof reqs), sizeof reqs);
    usleep(200 * 1000);
    static uint8_t buf[200 * (32 * 1024 + 4)];
    size_t got = read_n(fd, buf, sizeof buf, 10000);
    CHECK_EQ(got, sizeof buf);
    for (int i = 0; got == sizeof buf && i < 200; i++)
        CHECK_EQ(em_ld32(buf + (size_t)i * (32 * 1024 + 4)), 32 * 1024);
    close(fd);
    net_server_stop(s);
    reply_size = 0;
}

/* on_peek staging (net.h): with the peek callbacks set, a pass reads every
 * readable connection first, shows the bytes to on_peek, then on_data gets
 * the same bytes.  Echoes must stay exact for many connections at once, a
 * frame split across writes (bytes held in the connection), and a burst
 * larger than one read (the staged read fills, the ordinary path goes on). */
static _Atomic uint64_t peek_bytes, peek_done;

static void t_peek(void *arg, void *state, const uint8_t *p, size_t n)
{
    (void)arg;
    (void)state;
    (void)p;
    atomic_fetch_add(&peek_bytes, n);
}

static void t_peek_done(void *arg)
{
    (void)arg;
    atomic_fetch_add(&peek_done, 1);
}

TEST(net_peek_staged_reads_echo_exactly)
{
    net_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.threads = 1;
    o.cb.on_open = t_open;
    o.cb.on_data = t_data;
    o.cb.on_close = t_close;
    o.cb.on_peek = t_peek;
    o.cb.on_peek_done = t_peek_done;
    reply_size = 0;
    atomic_store(&peek_bytes, 0);
    atomic_store(&peek_done, 0);
    net_server *s;
    REQUIRE_OK(net_server_start(&s, &o));
    enum { N = 12 };
    int fd[N];
    for (int i = 0; i < N; i++) {
        fd[i] = dial(net_server_port(s));
        REQUIRE(fd[i] >= 0);
    }
    /* one frame on every connection, several rounds */
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++)
            send_frame(fd[i], round % 2 ? "ping" : "pong!");
        for (int i = 0; i < N; i++) {
            char r[9];
            size_t want = round % 2 ? 8 : 9;
            CHECK_EQ(read_n(fd[i], r, want, 5000), want);
            CHECK(memcmp(r + 4, round % 2 ? "ping" : "pong!", want - 4) == 0);
        }
    }
    /* a frame split across two writes: its head waits in the connection */
    uint8_t half[4 + 6];
    em_st32(half, 6);
    memcpy(half + 4, "abcdef", 6);
    CHECK_EQ(write(fd[0], half, 7), 7);
    usleep(50 * 1000);
    CHECK_EQ(write(fd[0], half + 7, 3), 3);
    uint8_t r10[10];
    CHECK_EQ(read_n(fd[0], r10, 10, 5000), 10);
    CHECK_MEM(r10, half, 10);
    /* a burst far larger than one read */
    enum { F = 300, L = 1000 };
    static uint8_t burst[F * (4 + L)], back[F * (4 + L)];
    for (int i = 0; i < F; i++) {
        em_st32(burst + (size_t)i * (4 + L), L);
        memset(burst + (size_t)i * (4 + L) + 4, 'a' + i % 26, L);
    }
    size_t sent = 0;
    while (sent < sizeof burst) {
        ssize_t w = write(fd[1], burst + sent, sizeof burst - sent);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    CHECK_EQ(sent, sizeof burst);
    CHECK_EQ(read_n(fd[1], back, sizeof back, 10000), sizeof back);
    CHECK_MEM(back, burst, sizeof back);
    CHECK(atomic_load(&peek_done) > 0);
    CHECK(atomic_load(&peek_bytes) > 0);
    for (int i = 0; i < N; i++)
        close(fd[i]);
    net_server_stop(s);
}

/* Shared output (net_conn_share): two other threads write frames straight
 * to a connection while its loop writes its own replies, and the client
 * reads nothing until they are done, so the socket fills and their sends go
 * partial and queue, and the loop must send the rest first.  Every frame
 * arrives whole, each thread's in order, and every echo too. */
static _Atomic(net_conn *) shared_conn;

static void *t_open_share(void *arg, net_conn *c)
{
    (void)arg;
    if (net_conn_share(c) == 0)
        atomic_store(&shared_conn, c);
    return &dummy_state;
}

enum { SH_FRAMES = 600, SH_MAX = 60000 };
static net_server *sh_srv;

/* sh_small: the writers send SC_FRAMES frames of 9..72 bytes (to collide
 * often) instead of SH_FRAMES of up to SH_MAX (to fill the socket). */
enum { SC_FRAMES = 20000, SC_ECHOES = 4000 };
static int sh_small;

/* sh_len: frame i of thread t's payload length (a tag, a sequence, fill). */
static uint32_t sh_len(int t, uint32_t i)
{
    return sh_small ? 9 + i % 64 : 5 + (i * 7919u + (uint32_t)t * 17u) % SH_MAX;
}
static uint8_t sh_fill(int t, uint32_t i) { return (uint8_t)('a' + (i + (uint32_t)t) % 26); }

static void *sh_writer(void *arg)
{
    int t = (int)(intptr_t)arg;
    net_conn *c = atomic_load(&shared_conn);
    static uint8_t pbuf[2][4 + SH_MAX + 5];
    uint8_t *p = pbuf[t];
    for (uint32_t i = 0; i < (sh_small ? SC_FRAMES : SH_FRAMES); i++) {
        uint32_t n = sh_len(t, i);
        em_st32(p, n);
        p[4] = (uint8_t)('A' + t);
        em_st32(p + 5, i);
        memset(p + 9, sh_fill(t, i), n - 5);
        /* The header and the payload as the two parts of one frame. */
        if (net_conn_send_any(c, p, 4, p + 4, n) != 0)
            return (void *)1;
    }
    return NULL;
}

/* sh_start: a one-loop server whose connections share their output, and
 * one client connection to it, established (its echo shows on_open ran);
 * the client's fd, or -1. */
static int sh_start(void)
{
    net_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.threads = 1;
    o.limits.out_soft_cap = 1u << 20;
    o.cb.on_open = t_open_share;
    o.cb.on_data = t_data;
    o.cb.on_close = t_close;
    atomic_store(&shared_conn, NULL);
    if (net_server_start(&sh_srv, &o) != 0)
        return -1;
    int fd = dial(net_server_port(sh_srv));
    if (fd < 0)
        return -1;
    send_frame(fd, "Estart");
    uint8_t first[10];
    if (read_n(fd, first, 10, 10000) != 10 || !atomic_load(&shared_conn)) {
        close(fd);
        return -1;
    }
    return fd;
}

TEST(net_shared_output_frames_stay_whole)
{
    sh_small = 0;
    int fd = sh_start();
    REQUIRE(fd >= 0);
    /* Echo requests before and while the writers run (some 36 MB, more
     * than the socket buffers hold). */
    for (int i = 0; i < 25; i++)
        send_frame(fd, "qecho-request");
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        REQUIRE(pthread_create(&th[t], NULL, sh_writer, (void *)(intptr_t)t) == 0);
    for (int i = 0; i < 25; i++)
        send_frame(fd, "qecho-request");
    void *rv[2];
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], &rv[t]);
    CHECK(rv[0] == NULL && rv[1] == NULL);
    uint32_t next[2] = { 0, 0 }, echoes = 0;
    static uint8_t b[SH_MAX + 5];
    int bad = 0;
    while (!bad && (next[0] < SH_FRAMES || next[1] < SH_FRAMES || echoes < 50)) {
        uint8_t h[4];
        if (read_n(fd, h, 4, 20000) != 4) {
            bad = 1;
            break;
        }
        uint32_t n = em_ld32(h);
        if (n > sizeof b || read_n(fd, b, n, 20000) != n) {
            bad = 2;
            break;
        }
        if (n == 13 && memcmp(b, "qecho-request", 13) == 0) {
            echoes++;
        } else if (n >= 5 && (b[0] == 'A' || b[0] == 'B')) {
            int t = b[0] - 'A';
            uint32_t i = em_ld32(b + 1);
            bad = i != next[t] || n != sh_len(t, i) ? 3 : 0;
            for (uint32_t k = 9; !bad && k < n; k++)
                bad = b[k] != sh_fill(t, i) ? 4 : 0;
            next[t]++;
        } else {
            bad = 5;
        }
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(next[0], SH_FRAMES);
    CHECK_EQ(next[1], SH_FRAMES);
    CHECK_EQ(echoes, 50);
    close(fd);
    net_server_stop(sh_srv);
}

/* The same three senders while the client reads all the time, so the
 * socket takes what it is given and the senders collide on it instead
 * (the loop and a writer each finding the other sending, and leaving
 * their frames to it): every frame still arrives whole and in its
 * sender's order, the loop's echoes of numbered requests too. */
typedef struct sc_reader { int fd; int bad; uint32_t next[2], echoes; } sc_reader;

static void *sc_read(void *arg)
{
    sc_reader *r = arg;
    static uint8_t b[1024];
    while (!r->bad && (r->next[0] < SC_FRAMES || r->next[1] < SC_FRAMES || r->echoes < SC_ECHOES)) {
        uint8_t h[4];
        if (read_n(r->fd, h, 4, 20000) != 4) {
            r->bad = 1;
            break;
        }
        uint32_t n = em_ld32(h);
        if (n > sizeof b || read_n(r->fd, b, n, 20000) != n) {
            r->bad = 2;
            break;
        }
        if (n == 9 && b[0] == 'q') {
            r->bad = em_ld32(b + 1) != r->echoes ? 6 : 0;
            r->echoes++;
        } else if (n >= 9 && (b[0] == 'A' || b[0] == 'B')) {
            int t = b[0] - 'A';
            uint32_t i = em_ld32(b + 1);
            r->bad = i != r->next[t] || n != sh_len(t, i) ? 3 : 0;
            for (uint32_t k = 9; !r->bad && k < n; k++)
                r->bad = b[k] != sh_fill(t, i) ? 4 : 0;
            r->next[t]++;
        } else {
            r->bad = 5;
        }
    }
    return NULL;
}

TEST(net_shared_output_colliding_senders_keep_order)
{
    sh_small = 1;
    int fd = sh_start();
    REQUIRE(fd >= 0);
    sc_reader r = { .fd = fd };
    pthread_t rd, th[2];
    REQUIRE(pthread_create(&rd, NULL, sc_read, &r) == 0);
    for (int t = 0; t < 2; t++)
        REQUIRE(pthread_create(&th[t], NULL, sh_writer, (void *)(intptr_t)t) == 0);
    /* numbered requests, a few per write, while the writers run */
    for (uint32_t i = 0; i < SC_ECHOES; i += 4) {
        uint8_t q[4 * 13];
        for (uint32_t k = 0; k < 4; k++) {
            em_st32(q + 13 * k, 9);
            q[13 * k + 4] = 'q';
            em_st32(q + 13 * k + 5, i + k);
            em_st32(q + 13 * k + 9, 0);
        }
        REQUIRE(write(fd, q, sizeof q) == (ssize_t)sizeof q);
    }
    void *rv[2];
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], &rv[t]);
    pthread_join(rd, NULL);
    CHECK(rv[0] == NULL && rv[1] == NULL);
    CHECK_EQ(r.bad, 0);
    CHECK_EQ(r.next[0], SC_FRAMES);
    CHECK_EQ(r.next[1], SC_FRAMES);
    CHECK_EQ(r.echoes, SC_ECHOES);
    close(fd);
    net_server_stop(sh_srv);
}
