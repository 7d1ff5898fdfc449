/* client.c - blocking test client and emberd process control for the
 * integration tests (see client.h).  Layouts: ignite-thin-protocol.md §1.1
 * framing, §1.2/1.3 handshake, §1.4/1.5 headers, §3.1 type codes.
 */
#include "client.h"

#include "util/err.h"
#include "util/hash.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t tc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tc_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

const char *tc_emberd_path(void)
{
    static char path[1024];
    const char *b = getenv("EMBER_BUILD");
    snprintf(path, sizeof path, "%s/emberd", b && *b ? b : "build");
    return path;
}

/* free_port asks the kernel for an unused loopback port.  Another process
 * could take it before emberd binds; tc_server_start retries on that. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int try_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* TC_WAIT_MS: how long tc_server_start waits for emberd to listen and
 * tc_server_stop for it to exit.  Long, because a loaded 2-core machine
 * under ASan can take many seconds; each wait ends as soon as its condition
 * holds (or the process died).  The test runner's per-test alarm (120 s by
 * default) still bounds a test that hangs. */
#define TC_WAIT_MS 90000
/* TC_REPLY_MS bounds tc_handshake and tc_call waiting for their one reply:
 * only a server that never answers waits it out. */
#define TC_REPLY_MS 60000

/* listen_inodes collects the socket inodes of TCP listeners on port from
 * /proc/net/tcp or tcp6 (columns: sl local rem st ... uid timeout inode). */
static int listen_inodes(const char *file, int port, unsigned long *ino, int n, int cap)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return n;
    char line[512];
    if (!fgets(line, sizeof line, f)) {     /* header */
        fclose(f);
        return n;
    }
    while (n < cap && fgets(line, sizeof line, f)) {
        char local[64], rem[64];
        unsigned st;
        unsigned long inode;
        if (sscanf(line, "%*s %63s %63s %x %*s %*s %*s %*s %*s %lu", local, rem, &st, &inode) != 4)
            continue;
        const char *colon = strrchr(local, ':');
        if (st == 0x0A && colon && (int)strtol(colon + 1, NULL, 16) == port)
            ino[n++] = inode;
    }
    fclose(f);
    return n;
}

/* pid_listens: 1 if process pid itself holds a socket listening on port.
 * Connecting is not enough: when another process took the port first, our
 * emberd exits and a connect would reach that other server. */
static int pid_listens(pid_t pid, int port)
{
    unsigned long ino[16];
    int n = listen_inodes("/proc/net/tcp", port, ino, 0, 16);
    n = listen_inodes("/proc/net/tcp6", port, ino, n, 16);
    if (n == 0)
        return 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char path[128], target[64];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t k = readlink(path, target, sizeof target - 1);
        unsigned long v;
        if (k <= 0)
            continue;
        target[k] = 0;
        if (sscanf(target, "socket:[%lu]", &v) == 1)
            for (int i = 0; i < n; i++)
                found |= v == ino[i];
    }
    closedir(d);
    return found;
}

int tc_server_start(tc_server *s, const char *const *extra)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int port = free_port();
        if (port <= 0)
            return EM_IO;
        char portstr[16];
        snprintf(portstr, sizeof portstr, "%d", port);
        const char *argv[64];
        int n = 0;
        argv[n++] = tc_emberd_path();
        argv[n++] = "--host";
        argv[n++] = "127.0.0.1";
        argv[n++] = "--port";
        argv[n++] = portstr;
        /* Tests run many servers at once: none takes the HTTP port (8080). */
        argv[n++] = "--http";
        argv[n++] = "false";
        for (int i = 0; extra && extra[i] && n < 62; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            return -errno;
        if (pid == 0) {
            if (!getenv("EMBER_TEST_LOG")) {
                int dn = open("/dev/null", O_RDWR);
                if (dn >= 0) {
                    dup2(dn, 1);
                    dup2(dn, 2);
                    close(dn);
                }
            }
            signal(SIGPIPE, SIG_DFL);
            /* die with the test process, even if a REQUIRE returned early */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execv(argv[0], (char *const *)argv);
            _exit(127);
        }
        int64_t deadline = tc_now_ms() + TC_WAIT_MS;
        int exited = 0;
        while (tc_now_ms() < deadline) {
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                exited = 1;
                break;
            }
            if (pid_listens(pid, port)) {
                s->pid = pid;
                s->port = port;
                return 0;
            }
            tc_sleep_ms(10);
        }
        if (!exited) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return EM_TIMEOUT;
        }
        /* exited early: maybe the port was taken meanwhile; try another. */
    }
    return EM_IO;
}

int tc_server_alive(tc_server *s)
{
    if (s->pid <= 0)
        return 0;
    int st;
    pid_t r = waitpid(s->pid, &st, WNOHANG);
    if (r == 0)
        return 1;
    s->pid = -1;
    return 0;
}

int tc_server_stop(tc_server *s)
{
    if (s->pid <= 0)
        return -1;
    int st = 0;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
        s->pid = -1;
        return -1;
    }
    kill(s->pid, SIGTERM);
    int64_t deadline = tc_now_ms() + TC_WAIT_MS;
    pid_t r = 0;
    while ((r = waitpid(s->pid, &st, WNOHANG)) == 0 && tc_now_ms() < deadline)
        tc_sleep_ms(5);
    if (r == 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
        s->pid = -1;
        return 128 + SIGKILL;
    }
    s->pid = -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

void tc_server_kill9(tc_server *s)
{
    kill(s->pid, SIGKILL);
    int st;
    waitpid(s->pid, &st, 0);
}

void tc_rm_dir(const char *path)
{
    DIR *dir = opendir(path);
    if (!dir)
        return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        unlink(p);
    }
    closedir(dir);
    rmdir(path);
}

/* ---- connections ---------------------------------------------------- */

int tc_connect(tc_conn *c, int port)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->rid = 1;
    int fd = try_connect(port);
    if (fd < 0)
        return fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    return 0;
}

void tc_close(tc_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    em_buf_free(&c->in);
}

int tc_send(tc_conn *c, const void *p, size_t n)
{
    const uint8_t *q = p;
    while (n > 0) {
        ssize_t w = send(c->fd, q, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

/* read_full reads exactly n bytes before the deadline. */
static int read_full(int fd, uint8_t *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        int left = (int)(deadline - tc_now_ms());
        if (left <= 0)
            return EM_TIMEOUT;
        struct pollfd pf = {fd, POLLIN, 0};
        int pr = poll(&pf, 1, left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return pr == 0 ? EM_TIMEOUT : -errno;
        ssize_t r = recv(fd, p, n, 0);
        if (r == 0)
            return EM_CLOSED;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return (errno == ECONNRESET || errno == EPIPE) ? EM_CLOSED : -errno;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int tc_recv_frame(tc_conn *c, int timeout_ms)
{
    int64_t deadline = tc_now_ms() + timeout_ms;
    uint8_t lb[4];
    int rc = read_full(c->fd, lb, 4, deadline);
    if (rc)
        return rc;
    int32_t len = (int32_t)em_ld32(lb);
    if (len < 0 || len > (256 << 20))
        return EM_BADLEN;
    em_buf_reset(&c->in);
    if (em_buf_reserve(&c->in, (size_t)len + 1))
        return EM_NOMEM;
    rc = read_full(c->fd, c->in.p, (size_t)len, deadline);
    if (rc)
        return rc;
    c->in.len = (size_t)len;
    return 0;
}

int tc_wait_closed(tc_conn *c, int timeout_ms)
{
    int64_t deadline = tc_now_ms() + timeout_ms;
    uint8_t junk[4096];
    for (;;) {
        int left = (int)(deadline - tc_now_ms());
        if (left <= 0)
            return 0;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int pr = poll(&pf, 1, left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            return 0;
        if (pr < 0)
            return 1;
        ssize_t r = recv(c->fd, junk, sizeof junk, 0);
        if (r == 0)
            return 1;
        if (r < 0 && errno != EINTR && errno != EAGAIN)
            return 1;
    }
}

/* ---- value builders -------------------------------------------------- */

/* Test data is small; an allocation failure here is a broken test machine,
 * so the builders abort rather than thread error codes through every call. */
static void put(em_buf *b, const void *p, size_t n)
{
    if (em_buf_append(b, p, n) != 0)
        abort();
}

void tc_put_u8(em_buf *b, uint8_t v) { put(b, &v, 1); }
void tc_put_i16(em_buf *b, int16_t v) { put(b, &v, 2); }
void tc_put_i32(em_buf *b, int32_t v) { put(b, &v, 4); }
void tc_put_i64(em_buf *b, int64_t v) { put(b, &v, 8); }
void tc_put_bytes(em_buf *b, const void *p, size_t n) { put(b, p, n); }

void tc_v_int(em_buf *b, int32_t v) { tc_put_u8(b, 3); tc_put_i32(b, v); }
void tc_v_long(em_buf *b, int64_t v) { tc_put_u8(b, 4); tc_put_i64(b, v); }
void tc_v_bool(em_buf *b, int v) { tc_put_u8(b, 8); tc_put_u8(b, v ? 1 : 0); }
void tc_v_null(em_buf *b) { tc_put_u8(b, 101); }

void tc_v_strn(em_buf *b, const void *s, size_t n)
{
    tc_put_u8(b, 9);
    tc_put_i32(b, (int32_t)n);
    tc_put_bytes(b, s, n);
}

void tc_v_str(em_buf *b, const char *s) { tc_v_strn(b, s, strlen(s)); }

void tc_v_bytes(em_buf *b, size_t n, uint8_t fill)
{
    tc_put_u8(b, 12);
    tc_put_i32(b, (int32_t)n);
    if (em_buf_reserve(b, n))
        abort();
    memset(b->p + b->len, fill, n);
    b->len += n;
}

void tc_cache_hdr(em_buf *b, int32_t cache_id, uint8_t flags)
{
    tc_put_i32(b, cache_id);
    tc_put_u8(b, flags);
}

int32_t tc_cache_id(const char *name)
{
    return em_hash_java_str((const uint8_t *)name, strlen(name));
}

/* ---- handshake ---------------------------------------------------------- */

void tc_handshake_msg(em_buf *b, int a, int bb, int cc, const uint8_t *feat, int nfeat)
{
    size_t start = b->len;
    tc_put_i32(b, 0);
    tc_put_u8(b, 1);
    tc_put_i16(b, (int16_t)a);
    tc_put_i16(b, (int16_t)bb);
    tc_put_i16(b, (int16_t)cc);
    tc_put_u8(b, 2);
    if (TC_VER(a, bb, cc) >= TC_VER(1, 7, 0)) {
        tc_put_u8(b, 12);
        tc_put_i32(b, nfeat);
        if (nfeat > 0)
            tc_put_bytes(b, feat, (size_t)nfeat);
    }
    em_st32(b->p + start, (uint32_t)(b->len - start - 4));
}

int tc_handshake(tc_conn *c, int a, int b, int cc, const uint8_t *feat, int nfeat)
{
    em_buf m = EM_BUF_INIT;
    tc_handshake_msg(&m, a, b, cc, feat, nfeat);
    int rc = tc_send(c, m.p, m.len);
    em_buf_free(&m);
    if (rc)
        return rc;
    rc = tc_recv_frame(c, TC_REPLY_MS);
    if (rc)
        return rc;
    const uint8_t *p = c->in.p;
    size_t n = c->in.len, pos = 1;
    if (n < 1)
        return EM_TRUNCATED;
    if (p[0] != 1)
        return 0;
    int ver = TC_VER(a, b, cc);
    c->ver = ver;
    c->flags_hdr = ver >= TC_VER(1, 4, 0);
    if (ver >= TC_VER(1, 7, 0)) {
        if (pos + 5 > n || p[pos] != 12)
            return EM_PROTO;
        int32_t fl = (int32_t)em_ld32(p + pos + 1);
        pos += 5;
        if (fl < 0 || (size_t)fl > n - pos || fl > (int)sizeof c->features)
            return EM_PROTO;
        memcpy(c->features, p + pos, (size_t)fl);
        c->nfeatures = fl;
        pos += (size_t)fl;
    }
    if (ver >= TC_VER(1, 4, 0)) {
        if (pos + 17 > n || p[pos] != 10)
            return EM_PROTO;
        memcpy(c->node_id, p + pos + 1, 16);
        c->has_node_id = 1;
        pos += 17;
    }
    if (pos != n)
        return EM_TRAILING;
    return 1;
}

int tc_open(tc_conn *c, int port)
{
    int rc = tc_connect(c, port);
    if (rc)
        return rc;
    rc = tc_handshake(c, 1, 2, 0, NULL, 0);
    if (rc == 1)
        return 0;
    tc_close(c);
    return rc == 0 ? EM_PROTO : rc;
}

/* ---- requests ----------------------------------------------------------- */

int64_t tc_req_begin(tc_conn *c, em_buf *b, int op)
{
    em_buf_reset(b);
    int64_t rid = c->rid++;
    tc_put_i32(b, 0);
    tc_put_i16(b, (int16_t)op);
    tc_put_i64(b, rid);
    return rid;
}

void tc_req_end(em_buf *b)
{
    em_st32(b->p, (uint32_t)(b->len - 4));
}

int tc_parse_reply(tc_conn *c, tc_reply *r)
{
    memset(r, 0, sizeof *r);
    tc_rd d = {c->in.p, c->in.len, 0, 0};
    r->rid = tc_rd_i64(&d);
    int err;
    if (c->flags_hdr) {
        r->flags = (uint16_t)tc_rd_i16(&d);
        if (r->flags & 2) {
            r->topo_changed = 1;
            r->topo_major = tc_rd_i64(&d);
            r->topo_minor = tc_rd_i32(&d);
        }
        err = r->flags & 1;
        if (err)
            r->status = tc_rd_i32(&d);
    } else {
        r->status = tc_rd_i32(&d);
        err = r->status != 0;
        r->flags = err;
    }
    if (err)
        tc_rd_str(&d, r->msg, sizeof r->msg);
    if (d.err)
        return EM_TRUNCATED;
    r->p = c->in.p + d.pos;
    r->n = c->in.len - d.pos;
    return 0;
}

int tc_call(tc_conn *c, em_buf *b, tc_reply *r)
{
    int64_t rid = (int64_t)em_ld64(b->p + 6);
    int rc = tc_send(c, b->p, b->len);
    if (rc)
        return rc;
    rc = tc_recv_frame(c, TC_REPLY_MS);
    if (rc)
        return rc;
    rc = tc_parse_reply(c, r);
    if (rc)
        return rc;
    return r->rid == rid ? 0 : EM_PROTO;
}

/* ---- readers ------------------------------------------------------------ */

static const uint8_t *rd_take(tc_rd *d, size_t k)
{
    if (d->err || d->n - d->pos < k) {
        d->err = 1;
        return NULL;
    }
    const uint8_t *q = d->p + d->pos;
    d->pos += k;
    return q;
}

uint8_t tc_rd_u8(tc_rd *d) { const uint8_t *q = rd_take(d, 1); return q ? q[0] : 0; }
int16_t tc_rd_i16(tc_rd *d) { const uint8_t *q = rd_take(d, 2); return q ? (int16_t)em_ld16(q) : 0; }
int32_t tc_rd_i32(tc_rd *d) { const uint8_t *q = rd_take(d, 4); return q ? (int32_t)em_ld32(q) : 0; }
int64_t tc_rd_i64(tc_rd *d) { const uint8_t *q = rd_take(d, 8); return q ? (int64_t)em_ld64(q) : 0; }

void tc_rd_str(tc_rd *d, char *out, size_t cap)
{
    if (cap)
        out[0] = 0;
    uint8_t t = tc_rd_u8(d);
    if (t == 101 || d->err)
        return;
    if (t != 9) {
        d->err = 1;
        return;
    }
    int32_t len = tc_rd_i32(d);
    if (len < 0) {
        d->err = 1;
        return;
    }
    const uint8_t *q = rd_take(d, (size_t)len);
    if (!q || !cap)
        return;
    size_t k = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
    memcpy(out, q, k);
    out[k] = 0;
}

/* ---- whole operations --------------------------------------------------- */

int tc_op(tc_conn *c, int op, const em_buf *body, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, op);
    if (body)
        tc_put_bytes(&b, body->p, body->len);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc ? rc : r->status;
}

int tc_open_features(tc_conn *c, int port, uint8_t features)
{
    int rc = tc_connect(c, port);
    if (rc)
        return rc;
    rc = tc_handshake(c, 1, 7, 0, &features, 1);
    if (rc == 1)
        return 0;
    tc_close(c);
    return rc ? rc : EM_PROTO;
}

int tc_activate(tc_conn *c)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 5001);
    tc_put_u8(&b, 1);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    return r.status ? EM_PROTO : 0;
}

int tc_create_cache(tc_conn *c, const char *name)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1052);
    tc_v_str(&b, name);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    return r.status ? EM_PROTO : 0;
}

void tc_sql_fields_msg(tc_conn *c, em_buf *b, const char *sql, int32_t page,
                       int64_t timeout_ms)
{
    tc_req_begin(c, b, 2004);
    tc_cache_hdr(b, 0, 0);
    tc_v_null(b);                   /* schema: PUBLIC */
    tc_put_i32(b, page);
    tc_put_i32(b, -1);              /* max rows: all */
    tc_v_str(b, sql);
    tc_put_i32(b, 0);               /* no arguments */
    for (int i = 0; i < 7; i++)     /* statement type, distributed joins, ... flags */
        tc_put_u8(b, 0);
    tc_put_i64(b, timeout_ms);
    tc_put_u8(b, 0);                /* no field names */
    tc_req_end(b);
}

int tc_put_int_str(tc_conn *c, const char *cache, int32_t key, const char *val)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_v_int(&b, key);
    tc_v_str(&b, val);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    return r.status || r.n ? EM_PROTO : 0;
}

int tc_get_int_str(tc_conn *c, const char *cache, int32_t key, char *out, size_t cap)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_v_int(&b, key);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    if (r.status)
        return EM_PROTO;
    tc_rd d = tc_rd_of(&r);
    if (r.n == 1 && r.p[0] == 101)
        return 0;
    tc_rd_str(&d, out, cap);
    if (d.err || d.pos != r.n)
        return EM_PROTO;
    return 1;
}

int tc_sanity(int port)
{
    static int32_t counter;
    tc_conn c;
    int rc = tc_open(&c, port);
    if (rc)
        return rc;
    int32_t key = (int32_t)getpid() * 1000 + counter++;
    char val[64], got[64];
    snprintf(val, sizeof val, "sanity-%d", (int)key);
    rc = tc_create_cache(&c, "sanity");
    if (!rc)
        rc = tc_put_int_str(&c, "sanity", key, val);
    if (!rc) {
        int g = tc_get_int_str(&c, "sanity", key, got, sizeof got);
        rc = g < 0 ? g : (g == 1 && strcmp(got, val) == 0) ? 0 : EM_PROTO;
    }
    tc_close(&c);
    return rc;
}

const char *tc_hex(const void *p, size_t n, char *out, size_t cap)
{
    const uint8_t *q = p;
    size_t o = 0;
    if (cap)
        out[0] = 0;
    for (size_t i = 0; i < n && o + 3 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x", q[i]);
    return out;
}
