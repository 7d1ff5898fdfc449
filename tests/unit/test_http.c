/* test_http.c - the operator HTTP endpoint (src/server/http.c), exercised
 * over real loopback sockets. */
#include "test.h"

#include "server/http.h"
#include "server/metrics.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* read_all reads until EOF (at most cap-1 bytes, 5 s); returns length. */
static size_t read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    uint64_t end = em_now_ns() + 5000000000ull;
    while (n + 1 < cap && em_now_ns() < end) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    return n;
}

/* fetch sends req and reads the whole response into buf. */
static size_t fetch(int port, const char *req, char *buf, size_t cap)
{
    int fd = connect_port(port);
    if (fd < 0) {
        buf[0] = 0;
        return 0;
    }
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
        close(fd);
        buf[0] = 0;
        return 0;
    }
    size_t n = read_all(fd, buf, cap);
    close(fd);
    return n;
}

static int fixed_render(void *arg, em_buf *out)
{
    int *calls = arg;
    (*calls)++;
    const char *t = "# TYPE ember_test counter\nember_test 7\n";
    return em_buf_append(out, t, strlen(t));
}

static int failing_render(void *arg, em_buf *out)
{
    (void)arg;
    (void)out;
    return EM_NOMEM;
}

TEST(http_metrics_health_404)
{
    int calls = 0;
    srv_http *h;
    REQUIRE_OK(srv_http_start("127.0.0.1", 0, fixed_render, &calls, &h));
    int port = srv_http_port(h);
    CHECK(port > 0);
    char buf[4096];
    fetch(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK(strstr(buf, "Content-Type: text/plain; version=0.0.4") != NULL);
    CHECK(strstr(buf, "Content-Length: 39\r\n") != NULL);
    CHECK(strstr(buf, "\r\n\r\n# TYPE ember_test counter\nember_test 7\n") != NULL);
    CHECK_EQ(calls, 1);

    fetch(port, "GET /health HTTP/1.0\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK(strstr(buf, "\r\n\r\nok\n") != NULL);

    fetch(port, "GET /metrics?x=1 HTTP/1.1\n\n", buf, sizeof buf);   /* bare LF, query */
    CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK_EQ(calls, 2);

    fetch(port, "HEAD /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, "Content-Length: 39\r\n") != NULL);
    CHECK(strstr(buf, "ember_test") == NULL);

    fetch(port, "GET /nope HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 404 Not Found\r\n", 24) == 0);
    fetch(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 405 ", 13) == 0);
    CHECK(strstr(buf, "Allow: GET, HEAD\r\n") != NULL);
    fetch(port, "garbage\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 400 ", 13) == 0);
    srv_http_stop(h);
    /* the port is closed after stop */
    CHECK(connect_port(port) < 0);
}

TEST(http_oversized_request_refused)
{
    int calls = 0;
    srv_http *h;
    REQUIRE_OK(srv_http_start(NULL, 0, fixed_render, &calls, &h));
    int fd = connect_port(srv_http_port(h));
    REQUIRE(fd >= 0);
    char big[SRV_HTTP_MAX_REQUEST + 100];
    memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
    memset(big + 26, 'a', sizeof big - 26);
    ssize_t w = send(fd, big, sizeof big, MSG_NOSIGNAL);
    CHECK(w > 0);
    char buf[1024];
    read_all(fd, buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 431 ", 13) == 0);
    close(fd);
    CHECK_EQ(calls, 0);
    srv_http_stop(h);
}

TEST(http_stalled_client_does_not_block_scrapes)
{
    int calls = 0;
    srv_http_options o = {"127.0.0.1", 0, fixed_render, &calls, 300, NULL, NULL};
    srv_http *h;
    REQUIRE_OK(srv_http_start_opts(&o, &h));
    int port = srv_http_port(h);
    int idle = connect_port(port);              /* says nothing */
    REQUIRE(idle >= 0);
    int partial = connect_port(port);           /* half a request line */
    REQUIRE(partial >= 0);
    CHECK(send(partial, "GET /hea", 8, MSG_NOSIGNAL) == 8);
    char buf[2048];
    fetch(port, "GET /health HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    /* both stalled connections are closed at the timeout, with no reply */
    uint64_t t0 = em_now_ns();
    size_t n = read_all(idle, buf, sizeof buf);
    CHECK_EQ(n, 0);
    CHECK(em_now_ns() - t0 < 3000000000ull);
    n = read_all(partial, buf, sizeof buf);
    CHECK_EQ(n, 0);
    close(idle);
    close(partial);
    srv_http_stop(h);
}

TEST(http_render_failure_is_500)
{
    srv_http *h;
    REQUIRE_OK(srv_http_start("127.0.0.1", 0, failing_render, NULL, &h));
    char buf[2048];
    fetch(srv_http_port(h), "GET /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 500 ", 13) == 0);
    srv_http_stop(h);
    CHECK(srv_http_start("256.1.1.1", 0, NULL, NULL, &h) < 0);
}

static int metrics_render(void *arg, em_buf *out)
{
    return srv_metrics_render(arg, NULL, out);
}

TEST(http_serves_real_metrics)
{
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(1, &m));
    srv_http *h;
    int rc = srv_http_start("127.0.0.1", 0, metrics_render, m, &h);
    if (rc) {
        srv_metrics_free(m);
        REQUIRE_OK(rc);
    }
    char buf[16384];
    fetch(srv_http_port(h), "GET /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, "\nember_connections_total 0\n") != NULL);
    CHECK(strstr(buf, "ember_requests_total{op=\"CACHE_PUT\"}") == NULL);
    srv_metrics_op(srv_metrics_worker(m, 0), 1001, 0, 5000, 50, 18);
    srv_metrics_event(srv_metrics_worker(m, 0), SRV_EV_CONN_OPEN);
    fetch(srv_http_port(h), "GET /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, "\nember_connections_total 1\n") != NULL);
    CHECK(strstr(buf, "\nember_requests_total{op=\"CACHE_PUT\"} 1\n") != NULL);
    srv_http_stop(h);
    srv_metrics_free(m);
}

/* health_fn: *failed components, each named by one line. */
static int health_fn(void *arg, em_buf *out)
{
    int failed = atomic_load((_Atomic int *)arg);
    if (failed < 0)
        return EM_NOMEM;
    if (!failed)
        return em_buf_append(out, "ok\n", 3) ? EM_NOMEM : 0;
    for (int i = 0; i < failed; i++) {
        char line[64];
        int k = snprintf(line, sizeof line, "wal_region_r%d failed: disk\n", i);
        if (em_buf_append(out, line, (size_t)k))
            return EM_NOMEM;
    }
    return failed;
}

TEST(http_health_reports_failed_components)
{
    _Atomic int failed = 0;     /* read on the HTTP thread */
    srv_http_options o = {"127.0.0.1", 0, NULL, (void *)&failed, 0, health_fn, NULL};
    srv_http *h;
    REQUIRE_OK(srv_http_start_opts(&o, &h));
    int port = srv_http_port(h);
    char buf[4096];
    fetch(port, "GET /health HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK(strstr(buf, "\r\n\r\nok\n") != NULL);
    failed = 2;
    fetch(port, "GET /health HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0);
    CHECK(strstr(buf, "\r\n\r\nwal_region_r0 failed: disk\nwal_region_r1 failed: disk\n") != NULL);
    fetch(port, "HEAD /health HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 503 ", 13) == 0);
    CHECK(strstr(buf, "wal_region") == NULL);
    failed = -1;
    fetch(port, "GET /health HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 500 ", 13) == 0);
    srv_http_stop(h);
}

/* api_fn: the page for /, the route number for the /api/ paths. */
static int api_fn(void *arg, int route, em_buf *out, const char **ctype)
{
    (void)arg;
    char b[64];
    int k;
    if (route == SRV_HTTP_ROOT) {
        *ctype = "text/html; charset=utf-8";
        k = snprintf(b, sizeof b, "<html>page</html>");
    } else
        k = snprintf(b, sizeof b, "{\"route\":%d}", route);
    return em_buf_append(out, b, (size_t)k);
}

TEST(http_routes_dashboard_and_api)
{
    srv_http_req r;
    const char *cases[][2] = { {"GET / HTTP/1.1\r\n\r\n", "3"},
                               {"GET /index.html HTTP/1.1\r\n\r\n", "3"},
                               {"GET /api/cluster?x=1 HTTP/1.1\r\n\r\n", "4"},
                               {"HEAD /api/node HTTP/1.1\r\n\r\n", "5"},
                               {"GET /api/ HTTP/1.1\r\n\r\n", "0"},
                               {"GET /api/clusterX HTTP/1.1\r\n\r\n", "0"} };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_http_parse(cases[i][0], strlen(cases[i][0]), &r);
        CHECK_EQ(r.status, 0);
        CHECK_EQ(r.route, cases[i][1][0] - '0');
    }
    srv_http_options o = {"127.0.0.1", 0, NULL, NULL, 0, NULL, api_fn};
    srv_http *h;
    REQUIRE_OK(srv_http_start_opts(&o, &h));
    int port = srv_http_port(h);
    char buf[4096];
    fetch(port, "GET / HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK(strstr(buf, "Content-Type: text/html; charset=utf-8\r\n") != NULL);
    CHECK(strstr(buf, "\r\n\r\n<html>page</html>") != NULL);
    fetch(port, "GET /api/cluster HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, "Content-Type: application/json\r\n") != NULL);
    CHECK(strstr(buf, "\r\n\r\n{\"route\":4}") != NULL);
    fetch(port, "GET /api/node HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, "\r\n\r\n{\"route\":5}") != NULL);
    fetch(port, "GET /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 404 ", 13) == 0);      /* no render callback */
    srv_http_stop(h);
    /* without the callback the page is 404 */
    srv_http_options o2 = {"127.0.0.1", 0, NULL, NULL, 0, NULL, NULL};
    REQUIRE_OK(srv_http_start_opts(&o2, &h));
    fetch(srv_http_port(h), "GET / HTTP/1.1\r\n\r\n", buf, sizeof buf);
    CHECK(strncmp(buf, "HTTP/1.1 404 ", 13) == 0);
    srv_http_stop(h);
}
