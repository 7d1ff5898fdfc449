/* bench_txwire.c - `ember-bench txload`: single-node transaction throughput
 * over the wire against a plain put (issue 17), and a point SELECT by
 * primary key against a GET of the same entry (issue 18).
 *
 * Each connection (one thread each, blocking, no pipelining) runs one of:
 *   put       PUT on an ATOMIC cache (the baseline)
 *   implicit  PUT on a TRANSACTIONAL cache, no transaction (a one-op
 *             transaction inside the server)
 *   tx        TX_START (PESSIMISTIC REPEATABLE_READ) + PUT in it + TX_END
 *             commit: three round trips, one op
 *   txopt     the same, OPTIMISTIC SERIALIZABLE
 *   get       GET of a row of table SQLBENCH (id INT PRIMARY KEY, v INT)
 *             through its cache SQL_PUBLIC_SQLBENCH
 *   sqlget    QUERY_SQL_FIELDS "SELECT v FROM sqlbench WHERE id = ?" of the
 *             same row (one page, the cursor closed with it)
 * over --keys int keys (connection i uses keys i, i + conns, ... so
 * pessimistic transactions never wait for each other).  Prints op/s,
 * latency p50/p99 per op, and, when emberd runs with --debug-ops, the
 * server's allocations per op (PR_OP_DEBUG_STATS before and after), and
 * with --pid the server's CPU per op (utime + stime over the run).
 * Usage: ember-bench txload --port P [--mode tx] [--connections 4]
 *        [--duration 3] [--keys 10000] [--pid PID]
 */
#include "bench.h"
#include "load.h"

#include "util/buf.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/mem.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { M_PUT, M_IMPLICIT, M_TX, M_TXOPT, M_GET, M_SQLGET };

typedef struct tw_opts {
    const char *host;
    long pid;
    int port, conns, mode;
    double duration;
    uint32_t keys;
} tw_opts;

typedef struct tw_thread {
    const tw_opts *o;
    int idx, fd;
    uint64_t ops, errors;
    ld_hist h;
    char err[160];
    pthread_t th;
} tw_thread;

static _Atomic int tw_stop;

static int32_t java_hash(const char *s) { return em_hash_java_str((const uint8_t *)s, strlen(s)); }

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_all(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* frame helpers: b[0..4) = length, then op, rid, payload */
typedef struct fb { uint8_t p[512]; size_t n; } fb;
static void fb_begin(fb *b, int op, uint64_t rid)
{
    b->n = 4;
    em_st16(b->p + 4, (uint16_t)op);
    em_st64(b->p + 6, rid);
    b->n = 14;
}
static void fb_u8(fb *b, uint8_t v) { b->p[b->n++] = v; }
static void fb_i32(fb *b, int32_t v) { em_st32(b->p + b->n, (uint32_t)v); b->n += 4; }
static void fb_i64(fb *b, int64_t v) { em_st64(b->p + b->n, (uint64_t)v); b->n += 8; }
static void fb_int(fb *b, int32_t v) { fb_u8(b, 3); fb_i32(b, v); }
static void fb_end(fb *b) { em_st32(b->p, (uint32_t)(b->n - 4)); }
static void fb_str(fb *b, const char *s)
{
    size_t n = strlen(s);
    fb_u8(b, 9);
    fb_i32(b, (int32_t)n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* fb_sql: QUERY_SQL_FIELDS of sql (schema PUBLIC, page 1024) with argc int
 * arguments. */
static void fb_sql(fb *b, uint64_t rid, const char *sql, int argc, const int32_t *args)
{
    fb_begin(b, 2004, rid);
    fb_i32(b, 0);
    fb_u8(b, 0);
    fb_str(b, "PUBLIC");
    fb_i32(b, 1024);
    fb_i32(b, -1);
    fb_str(b, sql);
    fb_i32(b, argc);
    for (int i = 0; i < argc; i++)
        fb_int(b, args[i]);
    fb_u8(b, 0);                    /* any statement type */
    for (int i = 0; i < 6; i++)
        fb_u8(b, 0);
    fb_i64(b, 0);
    fb_u8(b, 0);
}

/* call: one request, one reply (1.7.0 header: rid, short flags, [status]);
 * the payload's first 4 bytes into *i32 when asked. */
static int call(int fd, fb *b, int32_t *i32, char *err, size_t errn)
{
    fb_end(b);
    if (send_all(fd, b->p, b->n))
        return -1;
    uint8_t hdr[4];
    if (recv_all(fd, hdr, 4))
        return -1;
    uint32_t len = em_ld32(hdr);
    uint8_t buf[4096];
    if (len < 10 || len > sizeof buf || recv_all(fd, buf, len))
        return -1;
    uint16_t flags = em_ld16(buf + 8);
    size_t pos = 10;
    if (flags & 2)
        pos += 12;
    if (flags & 1) {
        int32_t st = (int32_t)em_ld32(buf + pos);
        uint32_t ml = pos + 9 <= len && buf[pos + 4] == 9 ? em_ld32(buf + pos + 5) : 0;
        snprintf(err, errn, "status %d: %.*s", st, (int)(ml < 120 ? ml : 120),
                 (const char *)buf + pos + 9);
        return st ? st : 1;
    }
    if (i32 && pos + 4 <= len)
        *i32 = (int32_t)em_ld32(buf + pos);
    return 0;
}

static int tw_connect(const tw_opts *o)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)o->port);
    inet_pton(AF_INET, o->host, &a.sin_addr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    /* handshake 1.7.0, no features */
    uint8_t h[] = {13, 0, 0, 0, 1, 1, 0, 7, 0, 0, 0, 2, 12, 0, 0, 0, 0};
    h[0] = (uint8_t)(sizeof h - 4);
    uint8_t r[64];
    if (send_all(fd, h, sizeof h) || recv_all(fd, r, 4) || em_ld32(r) > (uint32_t)sizeof r ||
        recv_all(fd, r, em_ld32(r)) || r[0] != 1) {
        close(fd);
        return -1;
    }
    return fd;
}

static int create_cache(int fd, const char *name, int atomicity, char *err, size_t errn)
{
    fb b;
    fb_begin(&b, 1053, 1);
    size_t start = b.n;
    fb_i32(&b, 0);
    em_st16(b.p + b.n, 2); b.n += 2;
    em_st16(b.p + b.n, 2); b.n += 2;
    fb_i32(&b, atomicity);
    em_st16(b.p + b.n, 0); b.n += 2;
    size_t nl = strlen(name);
    fb_u8(&b, 9);
    fb_i32(&b, (int32_t)nl);
    memcpy(b.p + b.n, name, nl);
    b.n += nl;
    em_st32(b.p + start, (uint32_t)(b.n - start));
    int rc = call(fd, &b, NULL, err, errn);
    return rc == 1001 ? 0 : rc;         /* exists already: fine */
}

static int one_op(tw_thread *t, uint64_t *rid, int32_t key)
{
    const tw_opts *o = t->o;
    fb b;
    if (o->mode == M_GET) {
        fb_begin(&b, 1000, (*rid)++);
        fb_i32(&b, java_hash("SQL_PUBLIC_SQLBENCH"));
        fb_u8(&b, 0);
        fb_int(&b, key);
        return call(t->fd, &b, NULL, t->err, sizeof t->err);
    }
    if (o->mode == M_SQLGET) {
        fb_sql(&b, (*rid)++, "SELECT v FROM sqlbench WHERE id = ?", 1, &key);
        return call(t->fd, &b, NULL, t->err, sizeof t->err);
    }
    int32_t cid = java_hash(o->mode == M_PUT ? "txbench_atomic" : "txbench_tx");
    if (o->mode == M_PUT || o->mode == M_IMPLICIT) {
        fb_begin(&b, 1001, (*rid)++);
        fb_i32(&b, cid);
        fb_u8(&b, 0);
        fb_int(&b, key);
        fb_int(&b, key);
        return call(t->fd, &b, NULL, t->err, sizeof t->err);
    }
    int32_t id = 0;
    fb_begin(&b, 4000, (*rid)++);
    fb_u8(&b, o->mode == M_TX ? 1 : 0);
    fb_u8(&b, o->mode == M_TX ? 1 : 2);
    fb_i64(&b, 0);
    fb_u8(&b, 101);
    int rc = call(t->fd, &b, &id, t->err, sizeof t->err);
    if (rc)
        return rc;
    fb_begin(&b, 1001, (*rid)++);
    fb_i32(&b, cid);
    fb_u8(&b, 2);
    fb_i32(&b, id);
    fb_int(&b, key);
    fb_int(&b, key);
    if ((rc = call(t->fd, &b, NULL, t->err, sizeof t->err)) != 0)
        return rc;
    fb_begin(&b, 4001, (*rid)++);
    fb_i32(&b, id);
    fb_u8(&b, 1);
    return call(t->fd, &b, NULL, t->err, sizeof t->err);
}

/* sql_setup creates table sqlbench and MERGEs rows 0..keys-1 (v = id). */
static int sql_setup(int fd, uint32_t keys, char *err, size_t errn)
{
    fb b;
    fb_sql(&b, 2, "CREATE TABLE IF NOT EXISTS sqlbench (id INT PRIMARY KEY, v INT)", 0, NULL);
    int rc = call(fd, &b, NULL, err, errn);
    for (uint32_t k = 0; !rc && k < keys; k++) {
        int32_t a[2] = {(int32_t)k, (int32_t)k};
        fb_sql(&b, 3 + k, "MERGE INTO sqlbench (id, v) VALUES (?, ?)", 2, a);
        rc = call(fd, &b, NULL, err, errn);
    }
    return rc;
}

static void *tw_main(void *arg)
{
    tw_thread *t = arg;
    uint64_t rid = 1;
    uint32_t k = (uint32_t)t->idx;
    while (!atomic_load(&tw_stop)) {
        uint64_t t0 = em_now_ns();
        if (one_op(t, &rid, (int32_t)k)) {
            t->errors++;
            if (t->errors > 100)
                break;
        } else {
            t->ops++;
            ld_hist_add(&t->h, em_now_ns() - t0);
        }
        k += (uint32_t)t->o->conns;
        if (k >= t->o->keys)
            k = (uint32_t)t->idx;
    }
    return NULL;
}

/* debug_stats: PR_OP_DEBUG_STATS (32000) -> allocation calls, bytes; -1 if
 * the server does not answer it (no --debug-ops). */
static int debug_stats(int fd, int64_t *allocs, int64_t *bytes)
{
    fb b;
    fb_begin(&b, 32000, 9);
    fb_end(&b);
    if (send_all(fd, b.p, b.n))
        return -1;
    uint8_t hdr[4], buf[128];
    if (recv_all(fd, hdr, 4) || em_ld32(hdr) > (uint32_t)sizeof buf ||
        recv_all(fd, buf, em_ld32(hdr)))
        return -1;
    uint32_t len = em_ld32(hdr);
    uint16_t flags = em_ld16(buf + 8);
    size_t pos = 10 + ((flags & 2) ? 12 : 0);
    if ((flags & 1) || pos + 16 > len)
        return -1;
    *allocs = (int64_t)em_ld64(buf + pos);
    *bytes = (int64_t)em_ld64(buf + pos + 8);
    return 0;
}

static int txload(int argc, char **argv)
{
    tw_opts o = {.host = "127.0.0.1", .port = 10800, .conns = 4, .mode = M_TX, .duration = 3.0,
                 .keys = 10000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "txload: %s wants a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--port")) o.port = atoi(v);
        else if (!strcmp(a, "--host")) o.host = v;
        else if (!strcmp(a, "--connections")) o.conns = atoi(v);
        else if (!strcmp(a, "--duration")) o.duration = atof(v);
        else if (!strcmp(a, "--keys")) o.keys = (uint32_t)atoi(v);
        else if (!strcmp(a, "--pid")) o.pid = atol(v);
        else if (!strcmp(a, "--mode")) {
            o.mode = !strcmp(v, "put") ? M_PUT : !strcmp(v, "implicit") ? M_IMPLICIT
                   : !strcmp(v, "tx") ? M_TX : !strcmp(v, "txopt") ? M_TXOPT
                   : !strcmp(v, "get") ? M_GET : !strcmp(v, "sqlget") ? M_SQLGET : -1;
            if (o.mode < 0) {
                fprintf(stderr, "txload: --mode is put, implicit, tx, txopt, get or sqlget\n");
                return 2;
            }
        } else {
            fprintf(stderr, "txload: unknown option %s\n", a);
            return 2;
        }
    }
    if (o.conns < 1 || o.conns > 256 || o.keys < (uint32_t)o.conns) {
        fprintf(stderr, "txload: 1..256 connections, keys >= connections\n");
        return 2;
    }
    char err[160] = "";
    int ctl = tw_connect(&o);
    if (ctl < 0 || create_cache(ctl, "txbench_atomic", 1, err, sizeof err) ||
        create_cache(ctl, "txbench_tx", 0, err, sizeof err)) {
        fprintf(stderr, "txload: cannot set up on %s:%d %s\n", o.host, o.port, err);
        return 1;
    }
    if ((o.mode == M_GET || o.mode == M_SQLGET) && sql_setup(ctl, o.keys, err, sizeof err)) {
        fprintf(stderr, "txload: cannot fill table sqlbench: %s\n", err);
        return 1;
    }
    tw_thread *t = em_calloc((size_t)o.conns, sizeof *t);
    if (!t)
        return 1;
    for (int i = 0; i < o.conns; i++) {
        t[i].o = &o;
        t[i].idx = i;
        if ((t[i].fd = tw_connect(&o)) < 0) {
            fprintf(stderr, "txload: connect failed\n");
            return 1;
        }
    }
    int64_t a0 = 0, b0 = 0, a1 = 0, b1 = 0;
    int dbg = debug_stats(ctl, &a0, &b0) == 0;
    double cpu0 = o.pid ? ld_proc_cpu_us(o.pid) : -1;
    uint64_t start = em_now_ns();
    for (int i = 0; i < o.conns; i++)
        pthread_create(&t[i].th, NULL, tw_main, &t[i]);
    while (em_now_ns() - start < (uint64_t)(o.duration * 1e9))
        usleep(10000);
    atomic_store(&tw_stop, 1);
    uint64_t ops = 0, errors = 0;
    ld_hist h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < o.conns; i++) {
        pthread_join(t[i].th, NULL);
        ops += t[i].ops;
        errors += t[i].errors;
        ld_hist_merge(&h, &t[i].h);
        if (t[i].errors && !err[0])
            snprintf(err, sizeof err, "%s", t[i].err);
    }
    double secs = (double)(em_now_ns() - start) / 1e9;
    double cpu1 = o.pid ? ld_proc_cpu_us(o.pid) : -1;
    if (dbg)
        dbg = debug_stats(ctl, &a1, &b1) == 0;
    static const char *const names[] = {"put (ATOMIC)", "implicit (TRANSACTIONAL)",
                                        "tx PESSIMISTIC REPEATABLE_READ", "tx OPTIMISTIC SERIALIZABLE",
                                        "GET of a table row", "SELECT v WHERE id = ? (SQL)"};
    printf("# ember-bench txload: source %s, load average %s\n", bench_source(), bench_loadavg());
    printf("%-32s %d conns  %10.0f op/s  p50 %7.1f us  p99 %7.1f us", names[o.mode], o.conns,
           (double)ops / secs, ld_hist_quantile(&h, 0.5) / 1e3, ld_hist_quantile(&h, 0.99) / 1e3);
    if (cpu0 >= 0 && cpu1 >= 0 && ops)
        printf("  server %.2f CPU us/op", (cpu1 - cpu0) / (double)ops);
    if (dbg && ops)
        printf("  server %.1f B/op %.2f allocs/op", (double)(b1 - b0) / (double)ops,
               (double)(a1 - a0) / (double)ops);
    printf("  errors %llu\n", (unsigned long long)errors);
    if (errors)
        fprintf(stderr, "txload: first error: %s\n", err);
    for (int i = 0; i < o.conns; i++)
        close(t[i].fd);
    close(ctl);
    em_free(t);
    return errors ? 1 : 0;
}

BENCH_COMMAND(txload, "txload", "transactions over the wire against a plain put, a point SELECT "
              "against a GET (--port P --mode put|implicit|tx|txopt|get|sqlget [--pid PID])", txload)
