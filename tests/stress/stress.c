/* stress.c - wire helpers for the reliability drivers (see stress.h).
 * Layouts: shared/reference/ignite-thin-protocol.md §1.1-§1.5 (frames,
 * handshake, response headers) and §3.1 (type codes). */
#include "stress.h"

#include "util/err.h"
#include "util/hash.h"

#include <dirent.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double sx_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int sx_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - sx_now_s();
        if (left <= 0)
            return EM_TIMEOUT;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

int sx_write_all(int fd, const void *p, size_t n, int timeout_ms)
{
    const uint8_t *q = p;
    double deadline = sx_now_s() + timeout_ms / 1000.0;
    while (n) {
        ssize_t w = send(fd, q, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            q += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = wait_fd(fd, POLLOUT, deadline);
        if (rc)
            return rc;
    }
    return 0;
}

static int read_exact(int fd, uint8_t *p, size_t n, double deadline)
{
    while (n) {
        ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return EM_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return EM_CLOSED;   /* reset counts as closed */
        int rc = wait_fd(fd, POLLIN, deadline);
        if (rc)
            return rc;
    }
    return 0;
}

int sx_read_frame(int fd, em_buf *in, int timeout_ms, size_t max)
{
    double deadline = sx_now_s() + timeout_ms / 1000.0;
    uint8_t l4[4];
    em_buf_reset(in);
    int rc = read_exact(fd, l4, 4, deadline);
    if (rc)
        return rc;
    int32_t len = (int32_t)em_ld32(l4);
    if (len < 0 || (size_t)len > max)
        return EM_BADLEN;
    if (em_buf_reserve(in, (size_t)len + 1))
        return EM_NOMEM;
    rc = read_exact(fd, in->p, (size_t)len, deadline);
    if (rc)
        return rc;
    in->len = (size_t)len;
    return 0;
}

int sx_wait_closed(int fd, int timeout_ms)
{
    double deadline = sx_now_s() + timeout_ms / 1000.0;
    uint8_t junk[4096];
    for (;;) {
        ssize_t r = recv(fd, junk, sizeof junk, MSG_DONTWAIT);
        if (r == 0)
            return 1;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return 1;
        if (r > 0)
            continue;
        if (wait_fd(fd, POLLIN, deadline) == EM_TIMEOUT)
            return 0;
    }
}

/* ---- builders (allocation failure here is fatal: these are test tools) ---- */

static void must(int rc)
{
    if (rc) {
        fprintf(stderr, "stress: out of memory\n");
        exit(2);
    }
}

void sx_put_u8(em_buf *b, uint8_t v) { must(em_buf_put_u8(b, v)); }
void sx_put_i16(em_buf *b, int16_t v) { must(em_buf_put_le16(b, (uint16_t)v)); }
void sx_put_i32(em_buf *b, int32_t v) { must(em_buf_put_le32(b, (uint32_t)v)); }
void sx_put_i64(em_buf *b, int64_t v) { must(em_buf_put_le64(b, (uint64_t)v)); }
void sx_put_raw(em_buf *b, const void *p, size_t n) { must(em_buf_append(b, p, n)); }

void sx_v_int(em_buf *b, int32_t v) { sx_put_u8(b, 3); sx_put_i32(b, v); }
void sx_v_strn(em_buf *b, const void *s, size_t n)
{
    sx_put_u8(b, 9);
    sx_put_i32(b, (int32_t)n);
    sx_put_raw(b, s, n);
}
void sx_v_str(em_buf *b, const char *s) { sx_v_strn(b, s, strlen(s)); }
void sx_v_null(em_buf *b) { sx_put_u8(b, 101); }

void sx_cache_hdr(em_buf *b, int32_t cache_id)
{
    sx_put_i32(b, cache_id);
    sx_put_u8(b, 0);
}

int32_t sx_cache_id(const char *name)
{
    return em_hash_java_str((const uint8_t *)name, strlen(name));
}

void sx_hs_msg(em_buf *b, int a, int bb, int c, int cc, const uint8_t *feat, int nfeat)
{
    size_t start = b->len;
    sx_put_i32(b, 0);
    sx_put_u8(b, 1);
    sx_put_i16(b, (int16_t)a);
    sx_put_i16(b, (int16_t)bb);
    sx_put_i16(b, (int16_t)c);
    sx_put_u8(b, (uint8_t)cc);
    if (SX_VER(a, bb, c) >= SX_VER(1, 7, 0)) {
        sx_put_u8(b, 12);
        sx_put_i32(b, nfeat);
        if (nfeat > 0)
            sx_put_raw(b, feat, (size_t)nfeat);
    }
    em_st32(b->p + start, (uint32_t)(b->len - start - 4));
}

size_t sx_req_begin(em_buf *b, int op, int64_t rid)
{
    size_t start = b->len;
    sx_put_i32(b, 0);
    sx_put_i16(b, (int16_t)op);
    sx_put_i64(b, rid);
    return start;
}

void sx_req_end(em_buf *b, size_t start)
{
    em_st32(b->p + start, (uint32_t)(b->len - start - 4));
}

int sx_parse_reply(const uint8_t *p, size_t n, int flags_hdr, sx_reply *r)
{
    size_t pos = 0;
    memset(r, 0, sizeof *r);
    if (n < 8)
        return EM_TRUNCATED;
    r->rid = (int64_t)em_ld64(p);
    pos = 8;
    int err = 0;
    if (flags_hdr) {
        if (n < pos + 2)
            return EM_TRUNCATED;
        uint16_t fl = em_ld16(p + pos);
        pos += 2;
        if (fl & 2) {
            if (n < pos + 12)
                return EM_TRUNCATED;
            r->topo_changed = 1;
            r->topo_major = (int64_t)em_ld64(p + pos);
            r->topo_minor = (int32_t)em_ld32(p + pos + 8);
            pos += 12;
        }
        err = fl & 1;
        if (err) {
            if (n < pos + 4)
                return EM_TRUNCATED;
            r->status = (int32_t)em_ld32(p + pos);
            pos += 4;
            if (r->status == 0)
                r->status = 1;      /* error flag without a code: still an error */
        }
    } else {
        if (n < pos + 4)
            return EM_TRUNCATED;
        r->status = (int32_t)em_ld32(p + pos);
        pos += 4;
        err = r->status != 0;
    }
    if (err) {
        /* typed string message or null */
        if (pos < n && p[pos] == 9) {
            if (n < pos + 5)
                return EM_TRUNCATED;
            int32_t l = (int32_t)em_ld32(p + pos + 1);
            if (l < 0 || n - pos - 5 < (size_t)l)
                return EM_TRUNCATED;
            pos += 5 + (size_t)l;
        } else if (pos < n && p[pos] == 101) {
            pos++;
        }
    }
    r->p = p + pos;
    r->n = n - pos;
    return 0;
}

int sx_connect_addr(const char *ip, int port, int timeout_ms)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        return -EINVAL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    /* Non-blocking connect: a firewalled address must not hold a client
     * for the kernel's SYN retry time. */
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        if (e == EINPROGRESS) {
            struct pollfd pf = { .fd = fd, .events = POLLOUT };
            int n = poll(&pf, 1, timeout_ms);
            socklen_t el = sizeof e;
            if (n <= 0)
                e = n == 0 ? ETIMEDOUT : errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
                e = errno;
        }
        if (e) {
            close(fd);
            return -e;
        }
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int sx_open(sx_conn *c, int port, int a, int b, int cc)
{
    return sx_open_addr(c, "127.0.0.1", port, 5000, a, b, cc);
}

int sx_open_addr(sx_conn *c, const char *ip, int port, int timeout_ms, int a, int b, int cc)
{
    memset(c, 0, sizeof *c);
    c->fd = sx_connect_addr(ip, port, timeout_ms);
    if (c->fd < 0)
        return c->fd;
    c->ver = SX_VER(a, b, cc);
    c->flags_hdr = c->ver >= SX_VER(1, 4, 0);
    c->rid = 1;
    sx_hs_msg(&c->out, a, b, cc, 2, NULL, 0);
    int rc = sx_write_all(c->fd, c->out.p, c->out.len, timeout_ms);
    em_buf_reset(&c->out);
    if (rc == 0)
        rc = sx_read_frame(c->fd, &c->in, timeout_ms, 1 << 20);
    if (rc == 0 && (c->in.len < 1 || c->in.p[0] != 1))
        rc = EM_PROTO;
    if (rc) {
        sx_close(c);
        return rc;
    }
    return 0;
}

void sx_close(sx_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    em_buf_free(&c->in);
    em_buf_free(&c->out);
}

int sx_call(sx_conn *c, sx_reply *r, int timeout_ms)
{
    int64_t rid = c->out.len >= 14 ? (int64_t)em_ld64(c->out.p + 6) : 0;
    int rc = sx_write_all(c->fd, c->out.p, c->out.len, timeout_ms);
    if (rc)
        return rc;
    rc = sx_read_frame(c->fd, &c->in, timeout_ms, (size_t)256 << 20);
    if (rc)
        return rc;
    rc = sx_parse_reply(c->in.p, c->in.len, c->flags_hdr, r);
    if (rc)
        return rc;
    return r->rid == rid ? 0 : EM_PROTO;
}

int sx_create_cache(sx_conn *c, const char *name)
{
    sx_reply r;
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, SX_OP_GET_OR_CREATE_WITH_NAME, c->rid++);
    sx_v_str(&c->out, name);
    sx_req_end(&c->out, s);
    int rc = sx_call(c, &r, 5000);
    return rc ? rc : r.status;
}

/* ---- readers ------------------------------------------------------------- */

uint8_t sx_rd_u8(sx_rd *d)
{
    if (d->err || d->n - d->pos < 1) { d->err = 1; return 0; }
    return d->p[d->pos++];
}

int32_t sx_rd_i32(sx_rd *d)
{
    if (d->err || d->n - d->pos < 4) { d->err = 1; return 0; }
    int32_t v = (int32_t)em_ld32(d->p + d->pos);
    d->pos += 4;
    return v;
}

int64_t sx_rd_i64(sx_rd *d)
{
    if (d->err || d->n - d->pos < 8) { d->err = 1; return 0; }
    int64_t v = (int64_t)em_ld64(d->p + d->pos);
    d->pos += 8;
    return v;
}

void sx_rd_skip_value(sx_rd *d)
{
    uint8_t t = sx_rd_u8(d);
    size_t skip = 0;
    switch (t) {
    case 101: return;
    case 1: case 8: skip = 1; break;
    case 3: skip = 4; break;
    case 4: skip = 8; break;
    case 9: case 12: {
        int32_t l = sx_rd_i32(d);
        if (l < 0) { d->err = 1; return; }
        skip = (size_t)l;
        break;
    }
    default:
        d->err = 1;
        return;
    }
    if (d->err || d->n - d->pos < skip) { d->err = 1; return; }
    d->pos += skip;
}

/* ---- /proc ----------------------------------------------------------------- */

long sx_proc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

long sx_proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int sx_proc_alive(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int alive = 1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "State:", 6) == 0) {
            if (strchr(line, 'Z') || strchr(line, 'X'))
                alive = 0;
            break;
        }
    fclose(f);
    return alive;
}

long sx_raise_nofile(long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if ((long)rl.rlim_cur < want) {
        rlim_t to = (rlim_t)want;
        if (rl.rlim_max != RLIM_INFINITY && to > rl.rlim_max)
            to = rl.rlim_max;
        rl.rlim_cur = to;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (long)rl.rlim_cur;
}

int sx_part_owners(sx_conn *c, int32_t cache_id, int timeout_ms, uint64_t (*own)[2],
                   uint8_t *have, int32_t max, int32_t *maxp)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, 1101, c->rid++);
    sx_put_i32(&c->out, 1);
    sx_put_i32(&c->out, cache_id);
    sx_req_end(&c->out, s);
    sx_reply r;
    int rc = sx_call(c, &r, timeout_ms);
    if (rc || r.status)
        return rc ? rc : r.status;
    sx_rd d = { r.p, r.n, 0, 0 };
    (void)sx_rd_i64(&d);            /* topology version */
    (void)sx_rd_i32(&d);
    int32_t groups = sx_rd_i32(&d);
    memset(have, 0, (size_t)max);
    *maxp = -1;
    for (int32_t g = 0; g < groups && !d.err; g++) {
        int applicable = sx_rd_u8(&d);
        int32_t nc = sx_rd_i32(&d);
        for (int32_t k = 0; k < nc && !d.err; k++) {
            (void)sx_rd_i32(&d);    /* cache id */
            if (applicable) {
                int32_t kc = sx_rd_i32(&d);
                for (int32_t j = 0; j < kc && !d.err; j++) {
                    (void)sx_rd_i32(&d);
                    (void)sx_rd_i32(&d);
                }
            }
        }
        if (!applicable)
            continue;
        int32_t nn = sx_rd_i32(&d);
        for (int32_t k = 0; k < nn && !d.err; k++) {
            (void)sx_rd_u8(&d);
            uint64_t msb = (uint64_t)sx_rd_i64(&d), lsb = (uint64_t)sx_rd_i64(&d);
            int32_t np = sx_rd_i32(&d);
            for (int32_t j = 0; j < np && !d.err; j++) {
                int32_t p = sx_rd_i32(&d);
                if (p < 0 || p >= max || have[p]) {
                    d.err = 1;
                    break;
                }
                have[p] = 1;
                own[p][0] = msb;
                own[p][1] = lsb;
                if (p > *maxp)
                    *maxp = p;
            }
        }
    }
    return d.err ? 1 : 0;
}
