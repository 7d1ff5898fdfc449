/* adversary.c - ember-adversary: a live adversarial driver for emberd.
 *
 * Sends malformed frames of every kind listed in shared/reference/
 * reliability.md §5.3 over many real connections (bad lengths, garbage and
 * bad versions before the handshake, truncated frames, counts larger than
 * their payloads, deep nesting, bad handles, forbidden and unknown type codes,
 * invalid UTF-8, bad complex-object offsets, unknown op codes and cursor ids,
 * random mutations of valid requests), while one correct client keeps writing
 * and reading its own cache and checking every answer.  It samples the
 * server's RSS and open descriptors (/proc) after a warm-up and at the end.
 * Prints a table of outcomes per kind, then checks and "N passed, N failed".
 *
 *   ember-adversary --port P --pid PID [--frames N] [--threads T] [--seed S]
 *                   [--max-seconds S] [--idle N] [--hs-timeout S]
 *                   [--rss-slack-kb K | --no-rss] [--check-pause-us U] [--verbose]
 *                   [--kinds name,name,...]   (names as in the report table)
 *                   [--big-bytes N [--big-slack F]]
 * With --big-bytes (the server's max_message_size) it first sends one request
 * of that size per op that decodes a count or a nested value, and checks
 * that it and other connections' requests are answered within a bound
 * proportional to its size (times F), i.e. that no decoder stalls a worker.
 * With emberd --debug-ops it also reads the server's live heap (op 32000),
 * which tells a leak from memory the C allocator keeps after free().
 */
#include "stress.h"

#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- kinds and outcomes --------------------------------------------------- */

enum kind {
    K_LEN_NEG, K_LEN_ZERO, K_LEN_HUGE, K_PRE_GARBAGE, K_HS_BADVER, K_HS_BADCODE,
    K_HS_BIG, K_PRE_OP, K_TRUNC, K_COUNT_OVER, K_DEEP, K_HANDLE, K_FORBIDDEN,
    K_UNKNOWN_TYPE, K_BAD_UTF8, K_BAD_OFFSETS, K_UNKNOWN_OP, K_UNKNOWN_CURSOR,
    K_UNKNOWN_CACHE, K_MUTATE, K_FLOOD, NKINDS
};

static const char *kind_name[NKINDS] = {
    "len<0", "len=0", "len-huge", "pre-hs-garbage", "hs-bad-version",
    "hs-bad-client", "hs-too-big", "op-before-hs", "truncated", "count>payload",
    "deep-nesting", "bad-handle", "forbidden-type", "unknown-type", "bad-utf8",
    "bad-offsets", "unknown-op", "unknown-cursor", "unknown-cache", "mutation",
    "pipelined-flood"
};

enum outcome { O_ERR, O_OK, O_CLOSED, O_HANG, O_GARBLED, O_NOWAIT, NOUT };

typedef struct kstats {
    uint64_t frames;            /* malformed frames sent */
    uint64_t out[NOUT];
    uint64_t violations;        /* accepted when it must be rejected, hangs, ... */
    uint64_t status2;           /* unknown-op replies with status 2 */
    double   secs;              /* time spent on this kind (one thread) */
} kstats;

/* ---- configuration and shared state ---------------------------------------- */

static int      g_port;
static pid_t    g_pid;
static uint64_t g_target = 100000;
static int      g_threads = 4;
static uint64_t g_seed = 1;
static double   g_max_seconds = 120;
static int      g_idle = 32;
static double   g_hs_timeout = 10;
static long     g_rss_slack_kb = 4096;
static int      g_verbose;
static int      g_check_pause_us = 200;  /* the correct client's think time */
static uint32_t g_kind_mask = (1u << NKINDS) - 1;
static int      g_main_phase;             /* 1 after the warm-up */

static atomic_uint_fast64_t g_sent;     /* malformed frames, all threads */
static uint64_t             g_phase_end; /* stop when g_sent reaches this */
static atomic_int           g_stop;
static atomic_int           g_server_dead;
static atomic_int           g_samples;  /* violation samples printed */
static double               g_t0;       /* start of the hostile phases */

static int32_t CID_CHECK, CID_HOSTILE, CID_MUT;

/* A valid Person{id:7, name:"abc"} (reference §3.2) and its metadata (§2.6). */
static const uint8_t PERSON[39] = {
    0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0x01, 0x00, 0x00, 0x00,
    0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
    0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62,
    0x63, 0x18, 0x1d
};
static const uint8_t PERSON_META[] = {
    0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0x00, 0x00, 0x00, 'P', 'e', 'r', 's', 'o', 'n',
    0x65, 0x02, 0x00, 0x00, 0x00, 0x09, 0x02, 0x00, 0x00, 0x00, 'i', 'd',
    0x03, 0x00, 0x00, 0x00, 0x1b, 0x0d, 0x00, 0x00,
    0x09, 0x04, 0x00, 0x00, 0x00, 'n', 'a', 'm', 'e', 0x09, 0x00, 0x00, 0x00,
    0x8b, 0x7a, 0x33, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39,
    0x02, 0x00, 0x00, 0x00, 0x1b, 0x0d, 0x00, 0x00, 0x8b, 0x7a, 0x33, 0x00
};

/* ---- per-thread state ------------------------------------------------------- */

typedef struct thr {
    int      id;
    uint64_t rng;
    sx_conn  pc;                /* persistent handshaken connection, fd -1 if none */
    em_buf   fb;                /* frame being built */
    em_buf   in;
    kstats   ks[NKINDS];
    uint64_t connects, connect_fail;
    pthread_t th;
} thr;

static uint32_t rnd(thr *t, uint32_t n) { return n ? (uint32_t)(sx_rand(&t->rng) % n) : 0; }

static void hexdump(char *out, size_t cap, const uint8_t *p, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 3 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x", p[i]);
    if (o < cap)
        out[o] = 0;
}

static void violation(thr *t, int k, const char *why, const uint8_t *p, size_t n)
{
    t->ks[k].violations++;
    if (atomic_fetch_add(&g_samples, 1) < 40) {
        char hex[2 * 160 + 1];
        hexdump(hex, sizeof hex, p, n < 160 ? n : 160);
        fprintf(stderr, "VIOLATION %s: %s; frame (%zu bytes) %s%s\n", kind_name[k], why,
                n, hex, n > 160 ? "..." : "");
    }
}

static void hard_close(int fd)
{
    /* RST instead of FIN: no TIME_WAIT on our side, so 100 000s of short
     * connections do not exhaust the ephemeral ports - and a reset is one more
     * thing the server must survive. */
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void check_server(void)
{
    if (!sx_proc_alive(g_pid)) {
        atomic_store(&g_server_dead, 1);
        atomic_store(&g_stop, 1);
    }
}

static int fresh_fd(thr *t)
{
    int fd = sx_connect(g_port);
    t->connects++;
    if (fd < 0) {
        t->connect_fail++;
        check_server();
        usleep(1000);
    }
    return fd;
}

static void pc_drop(thr *t)
{
    if (t->pc.fd >= 0) {
        hard_close(t->pc.fd);
        t->pc.fd = -1;
    }
    em_buf_free(&t->pc.in);
    em_buf_free(&t->pc.out);
}

static int pc_get(thr *t)
{
    if (t->pc.fd >= 0)
        return 0;
    int v7 = rnd(t, 2);
    t->connects++;
    int rc = sx_open(&t->pc, g_port, 1, v7 ? 7 : 2, 0);
    if (rc) {
        t->connect_fail++;
        t->pc.fd = -1;
        check_server();
        usleep(1000);
        return rc;
    }
    return 0;
}

static int64_t next_rid(thr *t) { return t->pc.rid++; }

/* ---- outcome collection ------------------------------------------------------ */

/* await_reply reads one reply on the persistent connection for request rid. */
static int await_reply(thr *t, int64_t rid, sx_reply *r, int timeout_ms)
{
    int rc = sx_read_frame(t->pc.fd, &t->pc.in, timeout_ms, (size_t)64 << 20);
    if (rc == EM_CLOSED)
        return O_CLOSED;
    if (rc == EM_TIMEOUT)
        return O_HANG;
    if (rc)
        return O_GARBLED;
    if (sx_parse_reply(t->pc.in.p, t->pc.in.len, t->pc.flags_hdr, r) || r->rid != rid)
        return O_GARBLED;
    return r->status ? O_ERR : O_OK;
}

/* post_frame sends t->fb (one request whose id is rid) on the persistent
 * connection and classifies the answer.  strict: success is a violation. */
static int post_frame(thr *t, int k, int64_t rid, int strict)
{
    sx_reply r;
    t->ks[k].frames++;
    atomic_fetch_add(&g_sent, 1);
    int o;
    if (sx_write_all(t->pc.fd, t->fb.p, t->fb.len, 2000) != 0)
        o = O_CLOSED;    /* the server closed during an earlier frame's send */
    else
        o = await_reply(t, rid, &r, 2000);
    t->ks[k].out[o]++;
    if (o == O_OK && strict)
        violation(t, k, "request accepted (success reply)", t->fb.p, t->fb.len);
    if (o == O_HANG)
        violation(t, k, "no reply and no close within 2 s", t->fb.p, t->fb.len);
    if (o == O_GARBLED)
        violation(t, k, "unparseable reply or wrong request id", t->fb.p, t->fb.len);
    if (k == K_UNKNOWN_OP && o == O_ERR && r.status == 2)
        t->ks[k].status2++;
    if (o == O_CLOSED || o == O_HANG || o == O_GARBLED)
        pc_drop(t);
    return o;
}

/* must_close: send raw bytes (already in t->fb) on fd; the server must close
 * (a reply first is allowed).  Closes fd. */
static void must_close(thr *t, int k, int fd)
{
    t->ks[k].frames++;
    atomic_fetch_add(&g_sent, 1);
    if (sx_write_all(fd, t->fb.p, t->fb.len, 2000) != 0) {
        t->ks[k].out[O_CLOSED]++;
        hard_close(fd);
        return;
    }
    if (sx_wait_closed(fd, 2000)) {
        t->ks[k].out[O_CLOSED]++;
    } else {
        t->ks[k].out[O_HANG]++;
        violation(t, k, "connection not closed within 2 s", t->fb.p, t->fb.len);
    }
    hard_close(fd);
}

/* pre_hs: send t->fb as the first bytes of a fresh connection; a handshake
 * failure reply or a close are fine, a success reply is a violation. */
static void pre_hs(thr *t, int k)
{
    int fd = fresh_fd(t);
    if (fd < 0)
        return;
    t->ks[k].frames++;
    atomic_fetch_add(&g_sent, 1);
    if (sx_write_all(fd, t->fb.p, t->fb.len, 2000) != 0) {
        t->ks[k].out[O_CLOSED]++;
        hard_close(fd);
        return;
    }
    int rc = sx_read_frame(fd, &t->in, 2000, 1 << 20);
    if (rc == 0) {
        if (t->in.len >= 1 && t->in.p[0] == 1) {
            t->ks[k].out[O_OK]++;
            violation(t, k, "handshake accepted", t->fb.p, t->fb.len);
        } else {
            t->ks[k].out[O_ERR]++;
        }
    } else if (rc == EM_CLOSED) {
        t->ks[k].out[O_CLOSED]++;
    } else if (rc == EM_TIMEOUT) {
        t->ks[k].out[O_HANG]++;
        violation(t, k, "no reply and no close within 2 s", t->fb.p, t->fb.len);
    } else {
        t->ks[k].out[O_GARBLED]++;
        violation(t, k, "unparseable handshake reply", t->fb.p, t->fb.len);
    }
    hard_close(fd);
}

/* ---- value builders ----------------------------------------------------------- */

static const int32_t HUGE_COUNTS[] = {0x7fffffff, 0x40000001, 0x10000000, 1000000, 65536,
                                      -1, (int32_t)0x80000000, -7};
#define NHUGE (sizeof HUGE_COUNTS / sizeof HUGE_COUNTS[0])

static void put_begin(thr *t, int64_t rid, int32_t cid)
{
    em_buf_reset(&t->fb);
    sx_req_begin(&t->fb, SX_OP_PUT, rid);
    sx_cache_hdr(&t->fb, cid);
}

static void nest(thr *t, em_buf *b, int shape, unsigned depth)
{
    for (unsigned i = 0; i < depth; i++) {
        switch (shape) {
        case 0: sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 1); break;
        case 1: sx_put_u8(b, 24); sx_put_i32(b, 1); sx_put_u8(b, 1); break;
        default: sx_put_u8(b, 25); sx_put_i32(b, 1); sx_put_u8(b, 1); sx_v_int(b, (int32_t)i); break;
        }
    }
    sx_v_int(b, (int32_t)rnd(t, 1000));
}

static const char *const BAD_UTF8[] = {
    "\xc0\x80", "\xed\xa0\x80", "\xff", "ab\xe2\x82", "\xf8\x88\x80\x80\x80",
    "\xf4\x90\x80\x80", "\x80", "ok\xc3", "\xe0\x80\xaf", "\xfe\xfe"
};

/* ---- the kinds ------------------------------------------------------------------ */

static void do_len(thr *t, int k)
{
    int32_t len;
    switch (k) {
    case K_LEN_NEG: {
        static const int32_t v[] = {-1, -4, (int32_t)0x80000000, -65536, -100000000};
        len = v[rnd(t, 5)];
        break;
    }
    case K_LEN_ZERO: len = 0; break;
    default: {
        static const int32_t v[] = {0x7fffffff, (64 << 20) + 1, 1 << 30, 0x7ffffff0, 200 << 20};
        len = v[rnd(t, 5)];
        break;
    }
    }
    em_buf_reset(&t->fb);
    sx_put_i32(&t->fb, len);
    int extra = (int)rnd(t, 16);
    for (int i = 0; i < extra; i++)
        sx_put_u8(&t->fb, (uint8_t)sx_rand(&t->rng));
    if (rnd(t, 2)) {                  /* before the handshake */
        int fd = fresh_fd(t);
        if (fd >= 0)
            must_close(t, k, fd);
    } else {                          /* after it, on a working connection */
        if (pc_get(t))
            return;
        int fd = t->pc.fd;
        t->pc.fd = -1;
        pc_drop(t);
        must_close(t, k, fd);
    }
}

static void do_pre_garbage(thr *t)
{
    em_buf_reset(&t->fb);
    int n = 1 + (int)rnd(t, 64);
    if (rnd(t, 2)) {                  /* well-framed garbage whose first byte is not 1 */
        sx_put_i32(&t->fb, n);
        for (int i = 0; i < n; i++)
            sx_put_u8(&t->fb, (uint8_t)sx_rand(&t->rng));
        if (t->fb.p[4] == 1)
            t->fb.p[4] = 2;
    } else {                          /* raw garbage with a small positive length */
        sx_put_i32(&t->fb, n);
        for (int i = 0; i < n; i++)
            sx_put_u8(&t->fb, (uint8_t)sx_rand(&t->rng));
        t->fb.p[4] = 1;               /* looks like a handshake, then junk */
        if (n > 8) t->fb.p[11] = (uint8_t)(2 + rnd(t, 250));
    }
    pre_hs(t, K_PRE_GARBAGE);
}

static void do_hs_bad(thr *t, int k)
{
    em_buf_reset(&t->fb);
    if (k == K_HS_BADVER) {
        static const int16_t v[][3] = {{0, 0, 0}, {1, 8, 0}, {2, 0, 0}, {1, 0, 1}, {-1, -1, -1},
                                       {1, 7, 1}, {0, 9, 9}, {32767, 0, 0}, {1, -3, 0}};
        int i = (int)rnd(t, 9);
        sx_hs_msg(&t->fb, v[i][0], v[i][1], v[i][2], 2, NULL, 0);
    } else {
        static const int codes[] = {0, 1, 3, 4, 255, 128};
        sx_hs_msg(&t->fb, 1, 2, 0, codes[rnd(t, 6)], NULL, 0);
    }
    pre_hs(t, k);
}

static void do_hs_big(thr *t)
{
    /* A handshake that declares more than the 1 MiB pre-auth cap: the server
     * must close without waiting for (or allocating) the bytes. */
    em_buf_reset(&t->fb);
    static const int32_t v[] = {(1 << 20) + 1, 4 << 20, 32 << 20, 60 << 20};
    sx_put_i32(&t->fb, v[rnd(t, 4)]);
    sx_put_u8(&t->fb, 1);
    sx_put_i16(&t->fb, 1); sx_put_i16(&t->fb, 7); sx_put_i16(&t->fb, 0);
    sx_put_u8(&t->fb, 2);
    sx_put_u8(&t->fb, 12);
    sx_put_i32(&t->fb, 1 << 20);
    for (int i = 0; i < 64; i++)
        sx_put_u8(&t->fb, 0);
    int fd = fresh_fd(t);
    if (fd >= 0)
        must_close(t, K_HS_BIG, fd);
}

static void do_pre_op(thr *t)
{
    em_buf_reset(&t->fb);
    switch (rnd(t, 3)) {
    case 0: {                           /* a cache op as the first message */
        size_t s = sx_req_begin(&t->fb, SX_OP_GET, 1);
        sx_cache_hdr(&t->fb, CID_CHECK);
        sx_v_int(&t->fb, 1);
        sx_req_end(&t->fb, s);
        break;
    }
    case 1:                             /* handshake cut short inside its frame */
        sx_put_i32(&t->fb, 4);
        sx_put_u8(&t->fb, 1); sx_put_u8(&t->fb, 1); sx_put_u8(&t->fb, 0); sx_put_u8(&t->fb, 2);
        break;
    default: {                          /* 1.7.0 handshake whose feature count lies */
        sx_hs_msg(&t->fb, 1, 7, 0, 2, NULL, 0);
        em_st32(t->fb.p + 4 + 9, (uint32_t)HUGE_COUNTS[rnd(t, NHUGE)]);
        break;
    }
    }
    pre_hs(t, K_PRE_OP);
}

static void do_trunc(thr *t)
{
    int v = (int)rnd(t, 5);
    em_buf_reset(&t->fb);
    if (v == 3) {                       /* length consistent, value cut inside */
        if (pc_get(t))
            return;
        int64_t rid = next_rid(t);
        put_begin(t, rid, CID_HOSTILE);
        sx_put_u8(&t->fb, 3);
        sx_put_i16(&t->fb, 7);          /* int key with 2 of its 4 bytes */
        sx_req_end(&t->fb, 0);
        post_frame(t, K_TRUNC, rid, 1);
        return;
    }
    int fd;
    if (v == 0) {                       /* handshake frame cut short */
        fd = fresh_fd(t);
        if (fd < 0) return;
        sx_hs_msg(&t->fb, 1, 2, 0, 2, NULL, 0);
        t->fb.len = 1 + rnd(t, 10);
    } else {
        if (pc_get(t)) return;
        fd = t->pc.fd;
        t->pc.fd = -1;
        pc_drop(t);
        if (v == 2) {                   /* the length prefix itself cut */
            sx_put_i32(&t->fb, 20);
            t->fb.len = 1 + rnd(t, 3);
        } else {                        /* body shorter than declared */
            size_t s = sx_req_begin(&t->fb, SX_OP_PUT, 99);
            sx_cache_hdr(&t->fb, CID_HOSTILE);
            sx_v_int(&t->fb, 5);
            sx_v_str(&t->fb, "truncated value");
            sx_req_end(&t->fb, s);
            t->fb.len = 4 + rnd(t, (uint32_t)t->fb.len - 4);
        }
    }
    t->ks[K_TRUNC].frames++;
    atomic_fetch_add(&g_sent, 1);
    sx_write_all(fd, t->fb.p, t->fb.len, 2000);
    if (v == 4) {
        /* half-close: the server sees EOF inside a frame and must close */
        shutdown(fd, SHUT_WR);
        if (sx_wait_closed(fd, 2000)) {
            t->ks[K_TRUNC].out[O_CLOSED]++;
        } else {
            t->ks[K_TRUNC].out[O_HANG]++;
            violation(t, K_TRUNC, "EOF inside a frame did not close within 2 s", t->fb.p, t->fb.len);
        }
    } else {
        t->ks[K_TRUNC].out[O_NOWAIT]++;
    }
    hard_close(fd);
}

static void do_count(thr *t)
{
    if (pc_get(t))
        return;
    int64_t rid = next_rid(t);
    int32_t big = HUGE_COUNTS[rnd(t, NHUGE)];
    em_buf *b = &t->fb;
    em_buf_reset(b);
    int v = (int)rnd(t, 10);
    size_t s;
    switch (v) {
    case 0:
        s = sx_req_begin(b, SX_OP_GET_ALL, rid);
        sx_cache_hdr(b, CID_HOSTILE);
        sx_put_i32(b, big);
        sx_v_int(b, 1);
        break;
    case 1:
        s = sx_req_begin(b, SX_OP_PUT_ALL, rid);
        sx_cache_hdr(b, CID_HOSTILE);
        sx_put_i32(b, big);
        sx_v_int(b, 1);
        sx_v_int(b, 2);
        break;
    case 8: {
        s = sx_req_begin(b, SX_OP_PUT_BINARY_TYPE, rid);
        size_t m = b->len;
        sx_put_raw(b, PERSON_META, sizeof PERSON_META);
        em_st32(b->p + m + 16, (uint32_t)big);     /* field count */
        break;
    }
    case 9:
        s = sx_req_begin(b, SX_OP_GET_SIZE, rid);
        sx_cache_hdr(b, CID_HOSTILE);
        sx_put_i32(b, big);
        sx_put_u8(b, 0);
        break;
    default:
        s = 0;
        put_begin(t, rid, CID_HOSTILE);
        sx_v_int(b, (int32_t)rnd(t, 100));
        switch (v) {
        case 2: sx_put_u8(b, 12); sx_put_i32(b, big); sx_put_i32(b, 0x01020304); break;
        case 3: sx_put_u8(b, 9); sx_put_i32(b, big); sx_put_raw(b, "abc", 3); break;
        case 4: sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, big); sx_v_int(b, 1); break;
        case 5: sx_put_u8(b, 24); sx_put_i32(b, big); sx_put_u8(b, 1); sx_v_int(b, 1); break;
        case 6: sx_put_u8(b, 25); sx_put_i32(b, big); sx_put_u8(b, 1); sx_v_int(b, 1); sx_v_int(b, 2); break;
        default: sx_put_u8(b, 14); sx_put_i32(b, big); sx_put_i32(b, 9); break;
        }
        break;
    }
    sx_req_end(b, s);
    post_frame(t, K_COUNT_OVER, rid, 1);
}

static void do_deep(thr *t)
{
    if (pc_get(t))
        return;
    static const unsigned depths[] = {100, 1000, 20000, 70000};
    int64_t rid = next_rid(t);
    put_begin(t, rid, CID_HOSTILE);
    unsigned d = depths[rnd(t, 4)];
    int shape = (int)rnd(t, 3);
    if (rnd(t, 2)) {                    /* deep key */
        nest(t, &t->fb, shape, d);
        sx_v_int(&t->fb, 1);
    } else {                            /* deep value */
        sx_v_int(&t->fb, 1);
        nest(t, &t->fb, shape, d);
    }
    sx_req_end(&t->fb, 0);
    post_frame(t, K_DEEP, rid, 1);
}

static void do_handle(thr *t)
{
    if (pc_get(t))
        return;
    int64_t rid = next_rid(t);
    put_begin(t, rid, CID_HOSTILE);
    sx_v_int(&t->fb, (int32_t)rnd(t, 100));
    em_buf *b = &t->fb;
    int strict = 1;
    switch (rnd(t, 5)) {
    case 0:                             /* a top-level handle: refers to itself */
        sx_put_u8(b, 102); sx_put_i32(b, 0);
        break;
    case 1:                             /* forward: negative back-offset */
        sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 2);
        sx_put_u8(b, 102); sx_put_i32(b, -(int32_t)(1 + rnd(t, 20)));
        sx_v_int(b, 5);
        break;
    case 2:                             /* outside the value */
        sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 1);
        sx_put_u8(b, 102); sx_put_i32(b, (int32_t)(100 + rnd(t, 1 << 20)));
        break;
    case 3:                             /* into the middle of an int's payload */
        sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 2);
        sx_v_int(b, 0x01010101);
        sx_put_u8(b, 102); sx_put_i32(b, 3);
        strict = 0;                     /* §5.3 does not name this case */
        break;
    default:                            /* the array's element is the array: a cycle */
        sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 1);
        sx_put_u8(b, 102); sx_put_i32(b, 9);
        break;
    }
    sx_req_end(b, 0);
    post_frame(t, K_HANDLE, rid, strict);
}

static void do_types(thr *t, int k)
{
    if (pc_get(t))
        return;
    static const uint8_t forbidden[] = {254, 32, 35, 99};
    static const uint8_t unknown[] = {0, 26, 40, 41, 50, 98, 100, 104, 200, 255, 127};
    uint8_t code = k == K_FORBIDDEN ? forbidden[rnd(t, 4)] : unknown[rnd(t, 11)];
    int64_t rid = next_rid(t);
    put_begin(t, rid, CID_HOSTILE);
    em_buf *b = &t->fb;
    int where = (int)rnd(t, 3);
    if (where == 0) {                   /* as the key */
        sx_put_u8(b, code);
        sx_put_i32(b, 16);
        for (int i = 0; i < 16; i++) sx_put_u8(b, (uint8_t)sx_rand(&t->rng));
        sx_v_int(b, 1);
    } else {
        sx_v_int(b, (int32_t)rnd(t, 100));
        if (where == 2) {               /* inside an object array */
            sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 2);
            sx_v_int(b, 1);
        }
        sx_put_u8(b, code);
        sx_put_i32(b, 16);
        for (int i = 0; i < 16; i++) sx_put_u8(b, (uint8_t)sx_rand(&t->rng));
    }
    sx_req_end(b, 0);
    post_frame(t, k, rid, 1);
}

static void do_utf8(thr *t)
{
    if (pc_get(t))
        return;
    const char *bad = BAD_UTF8[rnd(t, sizeof BAD_UTF8 / sizeof BAD_UTF8[0])];
    int64_t rid = next_rid(t);
    em_buf *b = &t->fb;
    em_buf_reset(b);
    switch (rnd(t, 4)) {
    case 0:                             /* cache name */
        sx_req_begin(b, SX_OP_GET_OR_CREATE_WITH_NAME, rid);
        sx_v_str(b, bad);
        break;
    case 1:                             /* key */
        put_begin(t, rid, CID_HOSTILE);
        sx_v_str(b, bad);
        sx_v_int(b, 1);
        break;
    case 2:                             /* value */
        put_begin(t, rid, CID_HOSTILE);
        sx_v_int(b, (int32_t)rnd(t, 100));
        sx_v_str(b, bad);
        break;
    default:                            /* element of a string array */
        put_begin(t, rid, CID_HOSTILE);
        sx_v_int(b, (int32_t)rnd(t, 100));
        sx_put_u8(b, 20); sx_put_i32(b, 2);
        sx_v_str(b, "fine");
        sx_v_str(b, bad);
        break;
    }
    sx_req_end(b, 0);
    post_frame(t, K_BAD_UTF8, rid, 1);
}

static void do_offsets(thr *t)
{
    if (pc_get(t))
        return;
    uint8_t o[sizeof PERSON];
    memcpy(o, PERSON, sizeof o);
    int strict = 1, wrap = 0;
    int32_t wrap_off = 0;
    switch (rnd(t, 12)) {
    case 0: em_st32(o + 12, 1000 + rnd(t, 100000)); break;      /* total > container */
    case 1: em_st32(o + 12, rnd(t, 24)); break;                 /* total < header */
    case 2: em_st32(o + 20, rnd(t, 24)); break;                 /* schema offset in header */
    case 3: em_st32(o + 20, 38 + rnd(t, 1000)); break;          /* footer past the end */
    case 4: o[37] = (uint8_t)rnd(t, 24); break;                 /* field offset in header */
    case 5: o[38] = (uint8_t)(39 + rnd(t, 200)); break;         /* field offset past end */
    case 6: o[1] = (uint8_t)(2 + rnd(t, 200)); strict = 0; break; /* unknown version */
    case 7: o[2] |= 0x10; strict = 0; break;                    /* 1- and 2-byte offsets */
    case 8: o[2] |= 0x04; strict = 0; break;                    /* raw flag, no raw offset */
    case 9: o[37] = 0x1d; o[38] = 0x18; break;                  /* non-monotonic offsets */
    case 10: wrap = 1; wrap_off = (int32_t)(39 + rnd(t, 1000)); break; /* 27: offset outside */
    default: wrap = 2; wrap_off = 0; break;                     /* 27: length > payload */
    }
    int64_t rid = next_rid(t);
    put_begin(t, rid, CID_HOSTILE);
    em_buf *b = &t->fb;
    sx_v_int(b, (int32_t)rnd(t, 100));
    if (wrap) {
        sx_put_u8(b, 27);
        sx_put_i32(b, wrap == 2 ? (int32_t)(40 + rnd(t, 100000)) : (int32_t)sizeof PERSON);
        sx_put_raw(b, PERSON, sizeof PERSON);
        sx_put_i32(b, wrap_off);
    } else {
        sx_put_raw(b, o, sizeof o);
    }
    sx_req_end(b, 0);
    post_frame(t, K_BAD_OFFSETS, rid, strict);
}

static void do_unknown_op(thr *t)
{
    if (pc_get(t))
        return;
    static const int ops[] = {3, 4, 100, 999, 1026, 1049, 1057, 1099, 1102, 2010, 2999,
                              3005, 4002, 5004, 6002, 9999, 12345, 0xffff, 0x8000, 7777};
    int op = ops[rnd(t, sizeof ops / sizeof ops[0])];
    int64_t rid = next_rid(t);
    em_buf_reset(&t->fb);
    sx_req_begin(&t->fb, op, rid);
    int n = (int)rnd(t, 32);
    for (int i = 0; i < n; i++)
        sx_put_u8(&t->fb, (uint8_t)sx_rand(&t->rng));
    sx_req_end(&t->fb, 0);
    if (rnd(t, 4) == 0) {
        /* the same request id twice, back to back: both must be answered */
        size_t one = t->fb.len;
        /* reserve first: appending a buffer to itself must not read freed bytes */
        if (em_buf_reserve(&t->fb, one))
            return;
        memcpy(t->fb.p + one, t->fb.p, one);
        t->fb.len += one;
        t->ks[K_UNKNOWN_OP].frames++;
        atomic_fetch_add(&g_sent, 1);
        if (sx_write_all(t->pc.fd, t->fb.p, t->fb.len, 2000) != 0) {
            t->ks[K_UNKNOWN_OP].out[O_CLOSED]++;
            pc_drop(t);
            return;
        }
        sx_reply r;
        int o = await_reply(t, rid, &r, 2000);
        t->ks[K_UNKNOWN_OP].out[o]++;
        if (o == O_ERR && r.status == 2)
            t->ks[K_UNKNOWN_OP].status2++;
        if (o != O_ERR) {
            if (o != O_CLOSED)
                violation(t, K_UNKNOWN_OP, "first of two same-id requests not rejected", t->fb.p, one);
            pc_drop(t);
            return;
        }
        t->fb.len = one;                /* the second one is counted by post_frame */
        t->ks[K_UNKNOWN_OP].frames++;
        atomic_fetch_add(&g_sent, 1);
        o = await_reply(t, rid, &r, 2000);
        t->ks[K_UNKNOWN_OP].out[o]++;
        if (o == O_ERR && r.status == 2)
            t->ks[K_UNKNOWN_OP].status2++;
        if (o != O_ERR && o != O_CLOSED)
            violation(t, K_UNKNOWN_OP, "second of two same-id requests not rejected", t->fb.p, one);
        if (o != O_ERR)
            pc_drop(t);
        return;
    }
    post_frame(t, K_UNKNOWN_OP, rid, 1);
}

static void do_unknown_cursor(thr *t)
{
    if (pc_get(t))
        return;
    int64_t rid = next_rid(t);
    int64_t cur = (int64_t)(sx_rand(&t->rng) | (1ULL << 40));
    if (rnd(t, 8) == 0)
        cur = -1 - (int64_t)rnd(t, 3);
    em_buf_reset(&t->fb);
    sx_req_begin(&t->fb, rnd(t, 2) ? SX_OP_SCAN_PAGE : SX_OP_RESOURCE_CLOSE, rid);
    sx_put_i64(&t->fb, cur);
    sx_req_end(&t->fb, 0);
    post_frame(t, K_UNKNOWN_CURSOR, rid, 1);
}

static void do_unknown_cache(thr *t)
{
    if (pc_get(t))
        return;
    int32_t cid;
    do
        cid = (int32_t)sx_rand(&t->rng);
    while (cid == CID_CHECK || cid == CID_HOSTILE || cid == CID_MUT);
    int64_t rid = next_rid(t);
    em_buf_reset(&t->fb);
    int put = (int)rnd(t, 2);
    sx_req_begin(&t->fb, put ? SX_OP_PUT : SX_OP_GET, rid);
    sx_cache_hdr(&t->fb, cid);
    sx_v_int(&t->fb, 1);
    if (put)
        sx_v_int(&t->fb, 2);
    sx_req_end(&t->fb, 0);
    post_frame(t, K_UNKNOWN_CACHE, rid, 1);
}

/* Valid request templates for mutation (body after the length prefix). */
static void tmpl(thr *t, em_buf *b, int64_t rid)
{
    size_t s;
    int32_t key = (int32_t)rnd(t, 1000);
    switch (rnd(t, 11)) {
    case 0:
        s = sx_req_begin(b, SX_OP_PUT, rid); sx_cache_hdr(b, CID_MUT);
        sx_v_int(b, key); sx_v_str(b, "mutable value");
        break;
    case 1:
        s = sx_req_begin(b, SX_OP_PUT, rid); sx_cache_hdr(b, CID_MUT);
        sx_v_str(b, "person"); sx_put_raw(b, PERSON, sizeof PERSON);
        break;
    case 2:
        s = sx_req_begin(b, SX_OP_GET, rid); sx_cache_hdr(b, CID_MUT); sx_v_int(b, key);
        break;
    case 3:
        s = sx_req_begin(b, SX_OP_GET_ALL, rid); sx_cache_hdr(b, CID_MUT);
        sx_put_i32(b, 3); sx_v_int(b, key); sx_v_int(b, key + 1); sx_v_str(b, "k");
        break;
    case 4:
        s = sx_req_begin(b, SX_OP_PUT_ALL, rid); sx_cache_hdr(b, CID_MUT);
        sx_put_i32(b, 2);
        sx_v_int(b, key);
        sx_put_u8(b, 12); sx_put_i32(b, 5); sx_put_raw(b, "bytes", 5);
        sx_v_int(b, key + 1);
        /* object array [int 7, handle back to it] - a valid back-reference */
        sx_put_u8(b, 23); sx_put_i32(b, -1); sx_put_i32(b, 2);
        sx_v_int(b, 7);
        sx_put_u8(b, 102); sx_put_i32(b, 5);
        break;
    case 5:
        s = sx_req_begin(b, SX_OP_SCAN, rid); sx_cache_hdr(b, CID_MUT);
        sx_v_null(b); sx_put_i32(b, 1024); sx_put_i32(b, -1); sx_put_u8(b, 0);
        break;
    case 6: {
        /* Creating caches is state the server keeps (and, as of this
         * writing, a destroyed cache's partitions stay allocated until
         * shutdown): only during the warm-up. */
        if (g_main_phase) {
            s = sx_req_begin(b, SX_OP_GET_NAMES, rid);
            break;
        }
        char name[32];
        snprintf(name, sizeof name, "adv-mut-%u", rnd(t, 4));
        s = sx_req_begin(b, SX_OP_GET_OR_CREATE_WITH_NAME, rid); sx_v_str(b, name);
        break;
    }
    case 7:
        /* Mutated PUT_BINARY_TYPE registers new types, which the server keeps
         * by design; only during the warm-up, so they are in the baseline. */
        if (g_main_phase) {
            s = sx_req_begin(b, SX_OP_GET_BINARY_TYPE, rid);
            sx_put_raw(b, PERSON_META, 4);
        } else {
            s = sx_req_begin(b, SX_OP_PUT_BINARY_TYPE, rid);
            sx_put_raw(b, PERSON_META, sizeof PERSON_META);
        }
        break;
    case 8:
        s = sx_req_begin(b, SX_OP_REPLACE_IF_EQUALS, rid); sx_cache_hdr(b, CID_MUT);
        sx_v_int(b, key); sx_v_str(b, "mutable value"); sx_v_str(b, "other");
        break;
    case 9:
        s = sx_req_begin(b, SX_OP_REMOVE_KEY, rid); sx_cache_hdr(b, CID_MUT); sx_v_int(b, key);
        break;
    default:
        s = sx_req_begin(b, SX_OP_PUT, rid); sx_cache_hdr(b, CID_MUT);
        sx_v_int(b, key);
        sx_put_u8(b, 25); sx_put_i32(b, 2); sx_put_u8(b, 1);
        sx_v_str(b, "a"); sx_put_u8(b, 24); sx_put_i32(b, 1); sx_put_u8(b, 1); sx_v_int(b, 1);
        sx_v_str(b, "b"); sx_put_u8(b, 33); sx_put_i64(b, 1700000000000LL); sx_put_i32(b, 5);
        break;
    }
    sx_req_end(b, s);
}

static void mutate(thr *t, em_buf *b, size_t from)
{
    static const uint32_t ints[] = {0x7fffffff, 0xffffffff, 0x80000000, 1u << 20, 0, 1,
                                    0x7ffffff7, 24, 0xfffffffe};
    static const uint8_t bytes[] = {0, 0xff, 0x7f, 0x80, 101, 102, 103, 27, 23, 9, 1, 254, 32};
    int n = 1 + (int)rnd(t, 4);
    for (int i = 0; i < n && b->len > from; i++) {
        size_t span = b->len - from;
        size_t at = from + rnd(t, (uint32_t)span);
        switch (rnd(t, 6)) {
        case 0: b->p[at] ^= (uint8_t)(1u << rnd(t, 8)); break;
        case 1: b->p[at] = bytes[rnd(t, sizeof bytes)]; break;
        case 2:
            if (b->len - at >= 4)
                em_st32(b->p + at, ints[rnd(t, sizeof ints / sizeof ints[0])]);
            break;
        case 3: b->p[at] = (uint8_t)sx_rand(&t->rng); break;
        case 4:                         /* delete a run */
            if (span > 1) {
                size_t k = 1 + rnd(t, (uint32_t)(b->len - at < 8 ? b->len - at : 8));
                memmove(b->p + at, b->p + at + k, b->len - at - k);
                b->len -= k;
            }
            break;
        default: {                      /* insert a run */
            size_t k = 1 + rnd(t, 8);
            if (em_buf_reserve(b, k)) break;
            memmove(b->p + at + k, b->p + at, b->len - at);
            for (size_t j = 0; j < k; j++) b->p[at + j] = (uint8_t)sx_rand(&t->rng);
            b->len += k;
            break;
        }
        }
    }
}

static int op_is_dangerous(int op)
{
    /* Cluster-wide switches and cache destruction would break the checker by
     * design, not by a bug: never send them. */
    if (op == 5001 || op == 5002 || op == 1056 || (op >= 4000 && op <= 4001))
        return 1;
    /* Ops that create server state kept by design (caches, binary types):
     * after the warm-up they would blur the memory comparison. */
    return g_main_phase && ((op >= 1051 && op <= 1054) || op == 3001 || op == 3003);
}

static void do_mutate(thr *t)
{
    if (rnd(t, 10) == 0) {              /* a mutated handshake on a fresh socket */
        em_buf_reset(&t->fb);
        sx_hs_msg(&t->fb, 1, rnd(t, 2) ? 7 : 2, 0, 2, (const uint8_t *)"\x04", 1);
        mutate(t, &t->fb, 4);
        em_st32(t->fb.p, (uint32_t)(t->fb.len - 4));
        int fd = fresh_fd(t);
        if (fd < 0) return;
        t->ks[K_MUTATE].frames++;
        atomic_fetch_add(&g_sent, 1);
        sx_write_all(fd, t->fb.p, t->fb.len, 2000);
        int rc = sx_read_frame(fd, &t->in, 2000, 1 << 20);
        t->ks[K_MUTATE].out[rc == 0 ? (t->in.len && t->in.p[0] == 1 ? O_OK : O_ERR)
                                    : rc == EM_CLOSED ? O_CLOSED
                                    : rc == EM_TIMEOUT ? O_HANG : O_GARBLED]++;
        if (rc == EM_TIMEOUT)
            violation(t, K_MUTATE, "no handshake reply and no close within 2 s", t->fb.p, t->fb.len);
        hard_close(fd);
        return;
    }
    if (pc_get(t))
        return;
    int64_t rid = next_rid(t);
    em_buf_reset(&t->fb);
    tmpl(t, &t->fb, rid);
    int fix = rnd(t, 8) != 0;
    /* Keep the request id intact when the length is fixed, so the reply can be
     * matched; everything after it is fair game. */
    mutate(t, &t->fb, fix ? 14 : 0);
    if (fix) {
        if (t->fb.len < 14) return;
        em_st32(t->fb.p, (uint32_t)(t->fb.len - 4));
        int op = (int)em_ld16(t->fb.p + 4);
        if (op_is_dangerous(op))
            em_st16(t->fb.p + 4, SX_OP_GET);
        post_frame(t, K_MUTATE, rid, 0);
        return;
    }
    if (t->fb.len >= 6 && op_is_dangerous((int)em_ld16(t->fb.p + 4)))
        em_st16(t->fb.p + 4, SX_OP_GET);
    /* Length possibly mutated: the stream may be out of step afterwards, so
     * read what comes within 10 ms and drop the connection. */
    t->ks[K_MUTATE].frames++;
    atomic_fetch_add(&g_sent, 1);
    sx_write_all(t->pc.fd, t->fb.p, t->fb.len, 2000);
    sx_wait_closed(t->pc.fd, 10);
    t->ks[K_MUTATE].out[O_NOWAIT]++;
    pc_drop(t);
}

static void do_flood(thr *t)
{
    /* Valid GETs pipelined without reading (backpressure, §5.3); half the
     * time every reply is then read and checked, half the time the socket is
     * reset with replies still queued.  These frames are not malformed and
     * are not counted toward the target. */
    sx_conn c;
    t->connects++;
    if (sx_open(&c, g_port, 1, 2, 0)) {
        t->connect_fail++;
        check_server();
        return;
    }
    int n = 100 + (int)rnd(t, 400);
    int readback = (int)rnd(t, 2);
    for (int i = 0; i < n; i++) {
        size_t s = sx_req_begin(&c.out, SX_OP_GET, 1000 + i);
        sx_cache_hdr(&c.out, CID_HOSTILE);
        sx_v_int(&c.out, i);
        sx_req_end(&c.out, s);
    }
    t->ks[K_FLOOD].frames += (uint64_t)n;
    if (readback) {
        /* write and read concurrently would need a thread; write in slices */
        size_t per = c.out.len / (size_t)n, sent = 0;
        int got = 0;
        while (got < n) {
            if (sent < c.out.len) {
                size_t chunk = per * 64;
                if (chunk > c.out.len - sent) chunk = c.out.len - sent;
                if (sx_write_all(c.fd, c.out.p + sent, chunk, 2000)) break;
                sent += chunk;
            }
            while (got < n && (sent == c.out.len || got < (int)(sent / per) - 32)) {
                sx_reply r;
                if (sx_read_frame(c.fd, &c.in, 2000, 1 << 24) ||
                    sx_parse_reply(c.in.p, c.in.len, 0, &r) || r.rid != 1000 + got || r.status)
                    goto bad;
                got++;
            }
        }
        if (got == n) {
            t->ks[K_FLOOD].out[O_OK] += (uint64_t)n;
        } else {
bad:
            t->ks[K_FLOOD].out[O_GARBLED]++;
            violation(t, K_FLOOD, "pipelined replies missing, out of order or failed",
                      c.out.p, 64);
        }
    } else {
        sx_write_all(c.fd, c.out.p, c.out.len, 500);
        t->ks[K_FLOOD].out[O_NOWAIT] += (uint64_t)n;
    }
    hard_close(c.fd);
    c.fd = -1;
    sx_close(&c);
}

static void *hostile_main(void *arg)
{
    thr *t = arg;
    t->pc.fd = -1;
    while (!atomic_load(&g_stop) && atomic_load(&g_sent) < g_phase_end) {
        uint32_t pick = rnd(t, 1000);
        int k;
        if (pick < 2)
            k = K_FLOOD;
        else if (pick < 300)
            k = K_MUTATE;
        else
            k = (int)rnd(t, K_MUTATE);
        if (!(g_kind_mask & (1u << k)))
            continue;
        if (sx_now_s() - g_t0 > g_max_seconds) {
            atomic_store(&g_stop, 1);
            break;
        }
        double tk = sx_now_s();
        switch (k) {
        case K_LEN_NEG: case K_LEN_ZERO: case K_LEN_HUGE: do_len(t, k); break;
        case K_PRE_GARBAGE: do_pre_garbage(t); break;
        case K_HS_BADVER: case K_HS_BADCODE: do_hs_bad(t, k); break;
        case K_HS_BIG: do_hs_big(t); break;
        case K_PRE_OP: do_pre_op(t); break;
        case K_TRUNC: do_trunc(t); break;
        case K_COUNT_OVER: do_count(t); break;
        case K_DEEP: do_deep(t); break;
        case K_HANDLE: do_handle(t); break;
        case K_FORBIDDEN: case K_UNKNOWN_TYPE: do_types(t, k); break;
        case K_BAD_UTF8: do_utf8(t); break;
        case K_BAD_OFFSETS: do_offsets(t); break;
        case K_UNKNOWN_OP: do_unknown_op(t); break;
        case K_UNKNOWN_CURSOR: do_unknown_cursor(t); break;
        case K_UNKNOWN_CACHE: do_unknown_cache(t); break;
        case K_MUTATE: do_mutate(t); break;
        default: do_flood(t); break;
        }
        t->ks[k].secs += sx_now_s() - tk;
        if (t->connect_fail > 1000 && t->connect_fail * 2 > t->connects) {
            fprintf(stderr, "adversary: thread %d: most connections fail, stopping\n", t->id);
            atomic_store(&g_stop, 1);
        }
    }
    pc_drop(t);
    return NULL;
}

/* ---- the correct client ------------------------------------------------------- */

typedef struct checker {
    atomic_int stop;
    uint64_t ops, errors, reconnects;
    double   max_lat, sum_lat;
    char     first_error[256];
    pthread_t th;
} checker;

static void chk_err(checker *ck, const char *fmt, long a, long b)
{
    if (ck->errors++ == 0)
        snprintf(ck->first_error, sizeof ck->first_error, fmt, a, b);
}

static void make_val(char *out, size_t cap, uint64_t iter, int32_t key)
{
    int pad = (int)(iter % 200);
    int n = snprintf(out, cap, "chk-%" PRIu64 "-%d-", iter, (int)key);
    for (int i = 0; i < pad && n + 1 < (int)cap; i++)
        out[n++] = (char)('a' + (iter + (uint64_t)i) % 26);
    out[n] = 0;
}

static void *checker_main(void *arg)
{
    checker *ck = arg;
    sx_conn c;
    uint64_t *model = em_calloc(1000, sizeof *model);   /* iteration of the last put, 0 = absent */
    char val[320], got[320];
    if (!model || sx_open(&c, g_port, 1, 2, 0)) {
        chk_err(ck, "checker could not connect (%ld %ld)", 0, 0);
        em_free(model);
        return NULL;
    }
    for (uint64_t it = 1; !atomic_load(&ck->stop); it++) {
        int32_t key = (int32_t)(it * 7919 % 100);  /* few keys: all present after the warm-up */
        sx_reply r;
        double t0 = sx_now_s();
        int rc;
        if (it % 97 == 0) {             /* remove, then get must be null */
            em_buf_reset(&c.out);
            size_t s = sx_req_begin(&c.out, SX_OP_REMOVE_KEY, c.rid++);
            sx_cache_hdr(&c.out, CID_CHECK);
            sx_v_int(&c.out, key);
            sx_req_end(&c.out, s);
            rc = sx_call(&c, &r, 5000);
            if (rc || r.status || r.n != 1 || (r.p[0] != 0) != (model[key] != 0)) {
                chk_err(ck, "remove key %ld: rc %ld", key, rc ? rc : r.status);
            }
            model[key] = 0;
        } else {
            make_val(val, sizeof val, it, key);
            em_buf_reset(&c.out);
            size_t s = sx_req_begin(&c.out, SX_OP_PUT, c.rid++);
            sx_cache_hdr(&c.out, CID_CHECK);
            sx_v_int(&c.out, key);
            sx_v_str(&c.out, val);
            sx_req_end(&c.out, s);
            rc = sx_call(&c, &r, 5000);
            if (rc || r.status)
                chk_err(ck, "put key %ld: rc %ld", key, rc ? rc : r.status);
            else
                model[key] = it;
        }
        ck->ops++;
        if (rc == EM_CLOSED || rc == EM_TIMEOUT || rc == EM_PROTO)
            goto reconnect;
        /* get it back */
        em_buf_reset(&c.out);
        size_t s = sx_req_begin(&c.out, SX_OP_GET, c.rid++);
        sx_cache_hdr(&c.out, CID_CHECK);
        sx_v_int(&c.out, key);
        sx_req_end(&c.out, s);
        rc = sx_call(&c, &r, 5000);
        ck->ops++;
        if (rc || r.status) {
            chk_err(ck, "get key %ld: rc %ld", key, rc ? rc : r.status);
            if (rc == EM_CLOSED || rc == EM_TIMEOUT || rc == EM_PROTO)
                goto reconnect;
        } else if (model[key] == 0) {
            if (!(r.n == 1 && r.p[0] == 101))
                chk_err(ck, "get key %ld: expected null, got %ld bytes", key, (long)r.n);
        } else {
            make_val(val, sizeof val, model[key], key);
            size_t vl = strlen(val);
            if (r.n != 5 + vl || r.p[0] != 9 || em_ld32(r.p + 1) != vl ||
                memcmp(r.p + 5, val, vl) != 0) {
                size_t gl = r.n < sizeof got ? r.n : sizeof got - 1;
                memcpy(got, r.p, gl);
                chk_err(ck, "get key %ld: wrong value (%ld bytes)", key, (long)r.n);
            }
        }
        double lat = sx_now_s() - t0;
        ck->sum_lat += lat;
        if (lat > ck->max_lat)
            ck->max_lat = lat;
        if (g_check_pause_us > 0)
            usleep((useconds_t)g_check_pause_us);
        continue;
reconnect:
        sx_close(&c);
        ck->reconnects++;
        if (sx_open(&c, g_port, 1, 2, 0)) {
            chk_err(ck, "checker lost the server (%ld %ld)", 0, 0);
            break;
        }
    }
    sx_close(&c);
    em_free(model);
    return NULL;
}

/* ---- phases --------------------------------------------------------------------- */

static thr *g_thr;

static void run_phase(uint64_t until)
{
    g_phase_end = until;
    for (int i = 0; i < g_threads; i++)
        pthread_create(&g_thr[i].th, NULL, hostile_main, &g_thr[i]);
    for (int i = 0; i < g_threads; i++)
        pthread_join(g_thr[i].th, NULL);
}

/* settle: wait (up to 10 s) until the server's fd count is at most want. */
static long settle_fds(long want)
{
    long n = sx_proc_fds(g_pid);
    for (int i = 0; i < 100 && n > want; i++) {
        usleep(100000);
        n = sx_proc_fds(g_pid);
    }
    return n;
}

static int simple_call(sx_conn *c, int op, int32_t cid, sx_reply *r)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, op, c->rid++);
    if (op != SX_OP_GET_NAMES)
        sx_cache_hdr(&c->out, cid);
    sx_req_end(&c->out, s);
    int rc = sx_call(c, r, 10000);
    return rc ? rc : r->status;
}

/* cleanup: clear the hostile caches and destroy the caches mutations created,
 * so the memory comparison is about leaks, not about data we stored. */
static void cleanup_caches(sx_conn *c)
{
    sx_reply r;
    simple_call(c, SX_OP_CLEAR, CID_HOSTILE, &r);
    simple_call(c, SX_OP_CLEAR, CID_MUT, &r);
    if (simple_call(c, SX_OP_GET_NAMES, 0, &r) != 0)
        return;
    sx_rd d = {r.p, r.n, 0, 0};
    int32_t n = sx_rd_i32(&d);
    int32_t ids[4096];
    int nid = 0;
    for (int32_t i = 0; i < n && !d.err; i++) {
        if (sx_rd_u8(&d) != 9) break;
        int32_t l = sx_rd_i32(&d);
        if (d.err || l < 0 || d.n - d.pos < (size_t)l) break;
        char name[512];
        size_t cl = (size_t)l < sizeof name - 1 ? (size_t)l : sizeof name - 1;
        memcpy(name, d.p + d.pos, cl);
        name[cl] = 0;
        d.pos += (size_t)l;
        int32_t id = sx_cache_id(name);
        if (id != CID_CHECK && id != CID_HOSTILE && id != CID_MUT && nid < 4096)
            ids[nid++] = id;
    }
    for (int i = 0; i < nid; i++) {
        em_buf_reset(&c->out);
        size_t s = sx_req_begin(&c->out, SX_OP_DESTROY, c->rid++);
        sx_put_i32(&c->out, ids[i]);
        sx_req_end(&c->out, s);
        sx_call(c, &r, 10000);
    }
    if (nid)
        printf("cleanup: destroyed %d caches created by mutated requests\n", nid);
}

/* live_heap asks emberd (started with --debug-ops) for its allocator's live
 * bytes and blocks; 0, or -1 if the op is not enabled. */
static int live_heap(sx_conn *c, int64_t *bytes, int64_t *blocks)
{
    sx_reply r;
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, 32000, c->rid++);
    sx_req_end(&c->out, s);
    if (sx_call(c, &r, 5000) || r.status || r.n < 40)
        return -1;
    *bytes = (int64_t)em_ld64(r.p + 24);
    *blocks = (int64_t)em_ld64(r.p + 32);
    return 0;
}

/* ---- main ----------------------------------------------------------------------- */

static int npass, nfail;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) npass++; else nfail++;
}

/* ---- maximum-size requests: no worker stalls ------------------------------------
 *
 * One request of each op that carries a count or a nested value, as large
 * as the server takes (--big-bytes = its max_message_size), sent while other
 * connections keep asking for a key and for a binary type (which takes the
 * type registry's read lock).  The big request must be answered or refused,
 * and every other reply must come, within big_bound_s(size): generous and
 * proportional to the request, so a busy or sanitized server passes while a
 * decoder that rescans per element (seconds for a few hundred KB) fails.
 */

static size_t g_big_bytes;              /* frame length to use; 0 = skip */
static double g_big_slack = 1;          /* multiplies every bound */

static double big_bound_s(size_t n)
{
    return g_big_slack * (2.0 + (double)n / (4.0 * 1048576));
}

#define PROBES 4                        /* more connections than worker loops */

typedef struct prober {
    pthread_t  th;
    atomic_int stop, ready;
    int        timeout_ms;
    double     max_lat;                 /* worst single reply */
    uint64_t   ops, errors;
    char       first_error[160];
} prober;

static void *prober_main(void *arg)
{
    prober *p = arg;
    sx_conn c[PROBES];
    int open = 0;
    for (; open < PROBES; open++)
        if (sx_open(&c[open], g_port, 1, 2, 0))
            break;
    if (open < PROBES) {
        p->errors++;
        snprintf(p->first_error, sizeof p->first_error, "probe connection %d failed", open);
    }
    atomic_store(&p->ready, 1);
    for (int round = 0; open == PROBES; round++) {
        if (round > 0 && atomic_load(&p->stop))
            break;
        for (int i = 0; i < PROBES; i++) {
            sx_reply r;
            em_buf_reset(&c[i].out);
            size_t s;
            if ((round + i) & 1) {
                s = sx_req_begin(&c[i].out, SX_OP_GET, c[i].rid++);
                sx_cache_hdr(&c[i].out, CID_CHECK);
                sx_v_int(&c[i].out, 1);
            } else {
                s = sx_req_begin(&c[i].out, SX_OP_GET_BINARY_TYPE, c[i].rid++);
                sx_put_raw(&c[i].out, PERSON_META, 4);
            }
            sx_req_end(&c[i].out, s);
            double t0 = sx_now_s();
            int rc = sx_call(&c[i], &r, p->timeout_ms);
            double lat = sx_now_s() - t0;
            if (lat > p->max_lat)
                p->max_lat = lat;
            p->ops++;
            if (rc || r.status) {
                if (p->errors++ == 0)
                    snprintf(p->first_error, sizeof p->first_error, "probe op: %s (status %d)",
                             rc ? em_strerror(rc) : "error reply", rc ? 0 : (int)r.status);
                sx_close(&c[i]);
                if (sx_open(&c[i], g_port, 1, 2, 0)) {
                    open = i;       /* give up: closes the ones before */
                    break;
                }
            }
        }
    }
    for (int i = 0; i < open; i++)
        sx_close(&c[i]);
    return NULL;
}

/* big_send sends c->out (one request) while a prober runs and checks both
 * bounds.  want_ok: 1 = must succeed, 0 = must be refused, -1 = either.
 * The bound is for the request's size, or g_big_bytes for a small request
 * with a big reply.  Returns the request's time (the bound if it failed). */
static double big_send(sx_conn *c, const char *what, size_t items, int want_ok)
{
    size_t bytes = c->out.len - 4;
    double bound = big_bound_s(bytes > 1024 ? bytes : g_big_bytes);
    if (c->fd < 0) {                    /* lost after an earlier failure: retry */
        em_buf req = c->out;
        c->out = (em_buf)EM_BUF_INIT;
        em_buf_free(&c->in);
        if (sx_open(c, g_port, 1, 2, 0))
            c->fd = -1;                 /* the checks below fail */
        em_buf_free(&c->out);
        c->out = req;
    }
    prober p;
    memset(&p, 0, sizeof p);
    p.timeout_ms = (int)(bound * 1000) + 1000;
    pthread_create(&p.th, NULL, prober_main, &p);
    while (!atomic_load(&p.ready))
        usleep(1000);
    sx_reply r;
    double t0 = sx_now_s();
    int rc = sx_call(c, &r, (int)(bound * 1000) + 1000);
    double dt = sx_now_s() - t0;
    int status = rc ? -1 : (int)r.status;
    char msg[120] = "";
    if (!rc && status && r.n >= 5 && r.p[0] == 9) {
        size_t l = em_ld32(r.p + 1);
        l = l < r.n - 5 ? l : r.n - 5;
        snprintf(msg, sizeof msg, ": %.*s", (int)(l < 90 ? l : 90), (const char *)r.p + 5);
    }
    atomic_store(&p.stop, 1);
    pthread_join(p.th, NULL);
    printf("big %-26s %9zu bytes %8zu items: %s in %.3f s (bound %.1f s), status %d%s; "
           "others: %" PRIu64 " replies, worst %.3f s\n", what, bytes, items,
           rc ? em_strerror(rc) : "answered", dt, bound, status, msg, p.ops, p.max_lat);
    check(rc == 0 && dt <= bound && (want_ok < 0 || (status == 0) == want_ok),
          "big %-26s answered within %.1f s (%.3f s, status %d)", what, bound, dt, status);
    check(p.errors == 0 && p.max_lat <= bound,
          "big %-26s other connections answered within %.1f s (worst %.3f s, %" PRIu64
          " errors%s%s)", what, bound, p.max_lat, p.errors, p.errors ? ": " : "", p.first_error);
    if (rc) {                           /* the reply may still come: start afresh */
        sx_close(c);
        if (sx_open(c, g_port, 1, 2, 0))
            c->fd = -1;
    }
    return rc ? bound : dt;
}

/* big_room: payload bytes left before c->out reaches the frame size. */
static size_t big_room(const sx_conn *c)
{
    size_t total = g_big_bytes + 4;
    return c->out.len < total ? total - c->out.len : 0;
}

static void big_meta_head(em_buf *b, int32_t type_id, const char *name)
{
    sx_put_i32(b, type_id);
    sx_v_str(b, name);
    sx_v_null(b);                        /* no affinity field */
}

static void big_field(em_buf *b, uint32_t i)
{
    char name[16];
    snprintf(name, sizeof name, "f%07u", i % 10000000u);
    sx_v_str(b, name);
    sx_put_i32(b, 3);                   /* int */
    sx_put_i32(b, (int32_t)(i + 1));
}

static void big_requests(sx_conn *c)
{
    if (!g_big_bytes)
        return;
    printf("maximum-size requests: %zu bytes each, bounds %.1f s + %.2f s/MiB\n", g_big_bytes,
           g_big_slack * 2.0, g_big_slack / 4.0);
    /* The type the probers read. */
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, SX_OP_PUT_BINARY_TYPE, c->rid++);
    sx_put_raw(&c->out, PERSON_META, sizeof PERSON_META);
    sx_req_end(&c->out, s);
    sx_reply r;
    sx_call(c, &r, 10000);
    size_t n;

    /* CACHE_PARTITIONS: as many ids as fit, unknown ones, then known caches
     * repeated (a rescan for "group seen before?" walks back over all the
     * unknown ones each time), then the most ember answers
     * (PR_MAX_PARTITION_CACHES). */
    static const char *const pnames[2] = {"adv-part-a", "adv-part-b"};
    for (int i = 0; i < 2; i++) {
        em_buf_reset(&c->out);
        s = sx_req_begin(&c->out, 1054, c->rid++);      /* GET_OR_CREATE_WITH_CONFIGURATION */
        size_t at = c->out.len;
        sx_put_i32(&c->out, 0);
        sx_put_i16(&c->out, 2);
        sx_put_i16(&c->out, 0);
        sx_v_str(&c->out, pnames[i]);
        sx_put_i16(&c->out, 1);                          /* cache mode */
        sx_put_i32(&c->out, 2);                          /* PARTITIONED */
        em_st32(c->out.p + at, (uint32_t)(c->out.len - at - 4));
        sx_req_end(&c->out, s);
        if (sx_call(c, &r, 10000) || r.status)
            printf("could not create PARTITIONED cache %s\n", pnames[i]);
    }
    const int32_t known[3] = {sx_cache_id(pnames[0]), CID_CHECK, sx_cache_id(pnames[1])};
    for (int pass = 0; pass < 2; pass++) {
        em_buf_reset(&c->out);
        s = sx_req_begin(&c->out, 1101, c->rid++);
        n = pass == 0 ? (big_room(c) - 4) / 4 : 65536;
        sx_put_i32(&c->out, (int32_t)n);
        for (size_t i = 0; i < n; i++)
            sx_put_i32(&c->out, i < n / 2 ? (int32_t)(0x9E3779B9u * (uint32_t)(i + 1))
                                          : known[i % 3]);
        sx_req_end(&c->out, s);
        big_send(c, pass == 0 ? "cache-partitions" : "cache-partitions-65536", n, pass);
    }
    for (int i = 0; i < 2; i++) {
        em_buf_reset(&c->out);
        s = sx_req_begin(&c->out, SX_OP_DESTROY, c->rid++);
        sx_put_i32(&c->out, sx_cache_id(pnames[i]));
        sx_req_end(&c->out, s);
        sx_call(c, &r, 10000);
    }

    /* PUT_BINARY_TYPE: a record of only fields, one of only schemas (both
     * past the per-type bounds), and one type at the bounds. */
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_PUT_BINARY_TYPE, c->rid++);
    big_meta_head(&c->out, 0x0B160001, "AdvBigFields");
    n = (big_room(c) - 4 - 1 - 4) / 21;
    sx_put_i32(&c->out, (int32_t)n);
    for (size_t i = 0; i < n; i++)
        big_field(&c->out, (uint32_t)i);
    sx_put_u8(&c->out, 0);
    sx_put_i32(&c->out, 0);
    sx_req_end(&c->out, s);
    big_send(c, "put-binary-type-fields", n, -1);

    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_PUT_BINARY_TYPE, c->rid++);
    big_meta_head(&c->out, 0x0B160002, "AdvBigSchemas");
    sx_put_i32(&c->out, 0);
    sx_put_u8(&c->out, 0);
    n = (big_room(c) - 4) / 8;
    sx_put_i32(&c->out, (int32_t)n);
    for (size_t i = 0; i < n; i++) {
        sx_put_i32(&c->out, (int32_t)(i + 1));
        sx_put_i32(&c->out, 0);
    }
    sx_req_end(&c->out, s);
    big_send(c, "put-binary-type-schemas", n, -1);

    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_PUT_BINARY_TYPE, c->rid++);
    big_meta_head(&c->out, 0x0B160003, "AdvCapType");
    n = 8192;                           /* BIN_MAX_TYPE_FIELDS and _SCHEMAS */
    sx_put_i32(&c->out, (int32_t)n);
    for (size_t i = 0; i < n; i++)
        big_field(&c->out, (uint32_t)i);
    sx_put_u8(&c->out, 0);
    sx_put_i32(&c->out, (int32_t)n);
    for (size_t i = 0; i < n; i++) {
        sx_put_i32(&c->out, (int32_t)(i + 1));
        sx_put_i32(&c->out, 1);
        sx_put_i32(&c->out, (int32_t)(i + 1));
    }
    sx_req_end(&c->out, s);
    big_send(c, "put-binary-type-at-bounds", 2 * n, 1);

    /* GET_ALL / PUT_ALL / REMOVE_KEYS with as many int keys as fit; the
     * writes use 4096 distinct keys so the cache stays small. */
    static const struct { int op; const char *name; int pairs; } kv[] = {
        {SX_OP_GET_ALL, "get-all", 0}, {SX_OP_PUT_ALL, "put-all", 1},
        {1018, "remove-keys", 0}, {1012, "contains-keys", 0},
    };
    double t_flat = 0;                  /* GET_ALL: a flat request of the same size */
    for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++) {
        em_buf_reset(&c->out);
        s = sx_req_begin(&c->out, kv[k].op, c->rid++);
        sx_cache_hdr(&c->out, CID_HOSTILE);
        n = (big_room(c) - 4) / (kv[k].pairs ? 10 : 5);
        sx_put_i32(&c->out, (int32_t)n);
        for (size_t i = 0; i < n; i++) {
            sx_v_int(&c->out, (int32_t)(kv[k].pairs ? i % 4096 : i));
            if (kv[k].pairs)
                sx_v_int(&c->out, (int32_t)i);
        }
        sx_req_end(&c->out, s);
        double dt = big_send(c, kv[k].name, n, 1);
        if (k == 0)
            t_flat = dt;
    }

    /* CACHE_CREATE_WITH_CONFIGURATION: one query entity with as many fields
     * as fit (1.2.0 layout: name, type, flags, default, precision, scale). */
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, 1053, c->rid++);
    size_t cfg_at = c->out.len;
    sx_put_i32(&c->out, 0);             /* length, patched below */
    sx_put_i16(&c->out, 2);
    sx_put_i16(&c->out, 0);
    sx_v_str(&c->out, "adv-big-config");
    sx_put_i16(&c->out, 200);
    sx_put_i32(&c->out, 1);
    static const char *const ent[5] = {"java.lang.Integer", "java.lang.String", "BIG", "k", "v"};
    for (int i = 0; i < 5; i++)
        sx_v_str(&c->out, ent[i]);
    size_t fl = 5 + 8 + 5 + 17 + 2 + 1 + 8;
    n = (big_room(c) - 4 - 4 - 4) / fl;
    sx_put_i32(&c->out, (int32_t)n);
    for (size_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%07u", (unsigned)(i % 10000000u));
        sx_v_str(&c->out, name);
        sx_v_str(&c->out, "java.lang.Integer");
        sx_put_u8(&c->out, 0);
        sx_put_u8(&c->out, 0);
        sx_v_null(&c->out);
        sx_put_i32(&c->out, -1);
        sx_put_i32(&c->out, -1);
    }
    sx_put_i32(&c->out, 0);             /* aliases */
    sx_put_i32(&c->out, 0);             /* indexes */
    em_st32(c->out.p + cfg_at, (uint32_t)(c->out.len - cfg_at - 4));
    sx_req_end(&c->out, s);
    big_send(c, "create-with-configuration", n, 1);
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_DESTROY, c->rid++);
    sx_put_i32(&c->out, sx_cache_id("adv-big-config"));
    sx_req_end(&c->out, s);
    sx_call(c, &r, 10000);

    /* SCAN with a filter: collections nested 60 deep around one int and as
     * many handles back to it as fit (the validator's handle pass). */
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_SCAN, c->rid++);
    sx_cache_hdr(&c->out, CID_HOSTILE);
    size_t fstart = c->out.len;
    const int depth = 60;
    n = (big_room(c) - 9 - (size_t)depth * 6 - 5) / 5;
    for (int d = 0; d < depth; d++) {
        sx_put_u8(&c->out, 24);
        sx_put_i32(&c->out, d == depth - 1 ? (int32_t)(n + 1) : 1);
        sx_put_u8(&c->out, 1);
    }
    size_t tgt = c->out.len;
    sx_v_int(&c->out, 7);
    for (size_t i = 0; i < n; i++) {
        size_t at = c->out.len;
        sx_put_u8(&c->out, 102);
        sx_put_i32(&c->out, (int32_t)(at - tgt));
    }
    (void)fstart;
    sx_put_i32(&c->out, 100);
    sx_put_i32(&c->out, -1);
    sx_put_u8(&c->out, 0);
    sx_req_end(&c->out, s);
    big_send(c, "scan-with-filter", n, 0);

    /* GET with a key of collections nested 60 deep around as many ints as
     * fit (key normalisation and Java hashing walk it). */
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_GET, c->rid++);
    sx_cache_hdr(&c->out, CID_HOSTILE);
    n = (big_room(c) - (size_t)depth * 6) / 5;
    for (int d = 0; d < depth; d++) {
        sx_put_u8(&c->out, 24);
        sx_put_i32(&c->out, d == depth - 1 ? (int32_t)n : 1);
        sx_put_u8(&c->out, 1);
    }
    for (size_t i = 0; i < n; i++)
        sx_v_int(&c->out, (int32_t)i);
    sx_req_end(&c->out, s);
    /* Depth must not multiply the work: nested 60 deep it may cost a few
     * times a flat GET_ALL of the same size, not 60 times (a walk that
     * re-skipped each element at every level took 14x here). */
    double t_deep = big_send(c, "get-deep-key", n, 1);
    check(t_deep <= 4 * t_flat + g_big_slack, "big get-deep-key costs at most 4x a flat "
          "get-all of its size + %.0f s (%.3f s vs %.3f s)", g_big_slack, t_deep, t_flat);

    /* PUT then GET a value of collections nested 60 deep (ints holding the
     * byte 103, so the reply path looks for complex objects to wrap). */
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_PUT, c->rid++);
    sx_cache_hdr(&c->out, CID_HOSTILE);
    sx_v_int(&c->out, -7);
    n = (big_room(c) - (size_t)depth * 6) / 5;
    for (int d = 0; d < depth; d++) {
        sx_put_u8(&c->out, 24);
        sx_put_i32(&c->out, d == depth - 1 ? (int32_t)n : 1);
        sx_put_u8(&c->out, 1);
    }
    for (size_t i = 0; i < n; i++)
        sx_v_int(&c->out, 0x67);
    sx_req_end(&c->out, s);
    big_send(c, "put-deep-value", n, 1);
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_GET, c->rid++);
    sx_cache_hdr(&c->out, CID_HOSTILE);
    sx_v_int(&c->out, -7);
    sx_req_end(&c->out, s);
    double t_get = big_send(c, "get-deep-value", n, 1);
    /* Its reply is as big as a flat get-all request: it may cost twice
     * that, not depth times (the reply path's walk took 7x here). */
    check(t_get <= 2 * t_flat + 0.5 * g_big_slack, "big get-deep-value costs at most 2x a flat "
          "get-all of its size + %.1f s (%.3f s vs %.3f s)", 0.5 * g_big_slack, t_get, t_flat);
    em_buf_reset(&c->out);
    s = sx_req_begin(&c->out, SX_OP_REMOVE_KEY, c->rid++);
    sx_cache_hdr(&c->out, CID_HOSTILE);
    sx_v_int(&c->out, -7);
    sx_req_end(&c->out, s);
    sx_call(c, &r, 10000);
    em_buf_free(&c->out);               /* give the big buffer back */
    em_buf_free(&c->in);
}

static void usage(void)
{
    fprintf(stderr, "usage: ember-adversary --port P --pid PID [--frames N] [--threads T]"
                    " [--seed S] [--max-seconds S] [--idle N] [--hs-timeout S]"
                    " [--rss-slack-kb K | --no-rss] [--check-pause-us U] [--verbose]"
                    " [--big-bytes N [--big-slack F]]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--verbose")) { g_verbose = 1; continue; }
        if (!strcmp(a, "--no-rss")) { g_rss_slack_kb = -1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--port")) g_port = atoi(v);
        else if (!strcmp(a, "--pid")) g_pid = (pid_t)atoi(v);
        else if (!strcmp(a, "--frames")) g_target = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--threads")) g_threads = atoi(v);
        else if (!strcmp(a, "--seed")) g_seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-seconds")) g_max_seconds = atof(v);
        else if (!strcmp(a, "--idle")) g_idle = atoi(v);
        else if (!strcmp(a, "--hs-timeout")) g_hs_timeout = atof(v);
        else if (!strcmp(a, "--rss-slack-kb")) g_rss_slack_kb = atol(v);
        else if (!strcmp(a, "--check-pause-us")) g_check_pause_us = atoi(v);
        else if (!strcmp(a, "--big-bytes")) g_big_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--big-slack")) g_big_slack = atof(v);
        else if (!strcmp(a, "--kinds")) {
            g_kind_mask = 0;
            for (int k = 0; k < NKINDS; k++) {
                const char *f = strstr(v, kind_name[k]);
                size_t l = strlen(kind_name[k]);
                if (f && (f == v || f[-1] == ',') && (f[l] == 0 || f[l] == ','))
                    g_kind_mask |= 1u << k;
            }
        }
        else usage();
        i++;
    }
    if (g_port <= 0 || g_pid <= 0 || g_threads < 1 || g_threads > 64)
        usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    sx_raise_nofile(4096);
    CID_CHECK = sx_cache_id("adv-check");
    CID_HOSTILE = sx_cache_id("adv-hostile");
    CID_MUT = sx_cache_id("adv-mut");

    long rss_idle = sx_proc_rss_kb(g_pid), fd_idle = sx_proc_fds(g_pid);
    printf("server pid %d: idle RSS %ld KiB, %ld fds\n", (int)g_pid, rss_idle, fd_idle);

    sx_conn setup;
    int rc = sx_open(&setup, g_port, 1, 2, 0);
    if (rc) {
        printf("cannot connect/handshake: %s\n", em_strerror(rc));
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (sx_create_cache(&setup, "adv-check") || sx_create_cache(&setup, "adv-hostile") ||
        sx_create_cache(&setup, "adv-mut")) {
        printf("cannot create caches\n0 passed, 1 failed\n");
        sx_close(&setup);
        return 1;
    }

    /* Fill and clear the caches the hostile requests write to, so every
     * partition's table has its capacity before the baseline (the store keeps
     * table capacity after a clear). */
    for (int ci = 0; ci < 2; ci++) {
        int32_t cid = ci ? CID_MUT : CID_HOSTILE;
        sx_reply r;
        for (int base = 0; base < 32768; base += 1024) {
            em_buf_reset(&setup.out);
            size_t s = sx_req_begin(&setup.out, SX_OP_PUT_ALL, setup.rid++);
            sx_cache_hdr(&setup.out, cid);
            sx_put_i32(&setup.out, 1024);
            for (int k = 0; k < 1024; k++) {
                sx_v_int(&setup.out, base + k);
                sx_v_int(&setup.out, k);
            }
            sx_req_end(&setup.out, s);
            sx_call(&setup, &r, 10000);
        }
        simple_call(&setup, SX_OP_CLEAR, cid, &r);
    }

    /* Before the baseline: types they register stay (the registry keeps
     * every type), and the big buffers' pages may stay with the allocator. */
    big_requests(&setup);
    if (setup.fd < 0) {
        printf("lost the setup connection after the maximum-size requests\n");
        printf("%d passed, %d failed\n", npass, nfail + 1);
        return 1;
    }

    /* idle sockets: never handshake (slowloris / half-open, §5.3) */
    int *idle = em_calloc((size_t)(g_idle > 0 ? g_idle : 1), sizeof *idle);
    for (int i = 0; i < g_idle; i++) {
        idle[i] = sx_connect(g_port);
        if (idle[i] >= 0 && (i & 1))
            sx_write_all(idle[i], "\x08\x00\x00", 3, 1000);   /* 3 bytes, then silence */
    }
    double t_idle = sx_now_s();

    checker ck;
    memset(&ck, 0, sizeof ck);
    pthread_create(&ck.th, NULL, checker_main, &ck);

    g_thr = em_calloc((size_t)g_threads, sizeof *g_thr);
    for (int i = 0; i < g_threads; i++) {
        g_thr[i].id = i;
        g_thr[i].rng = (g_seed * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)(i + 1) * 0xD1B54A32D192ED03ULL;
        if (!g_thr[i].rng) g_thr[i].rng = 1;
    }

    /* warm-up: 10% of the frames, then the baseline */
    double t0 = sx_now_s();
    g_t0 = t0;
    uint64_t warm = g_target / 10 > 1000 ? g_target / 10 : 1000;
    run_phase(warm);
    cleanup_caches(&setup);
    long fd_base = settle_fds(fd_idle + 2 + g_idle);
    long rss_base = sx_proc_rss_kb(g_pid);
    int64_t heap_base = 0, blocks_base = 0, heap_end = 0, blocks_end = 0;
    int have_heap = live_heap(&setup, &heap_base, &blocks_base) == 0;
    printf("after warm-up (%" PRIu64 " frames, %.1f s): RSS %ld KiB, %ld fds\n",
           (uint64_t)atomic_load(&g_sent), sx_now_s() - t0, rss_base, fd_base);

    /* the main phase, bounded in time by a watchdog in this thread */
    g_phase_end = g_target;
    g_main_phase = 1;
    for (int i = 0; i < g_threads; i++)
        pthread_create(&g_thr[i].th, NULL, hostile_main, &g_thr[i]);
    long rss_peak = rss_base;
    while (atomic_load(&g_sent) < g_target && !atomic_load(&g_stop)) {
        usleep(200000);
        long r = sx_proc_rss_kb(g_pid);
        if (r > rss_peak) rss_peak = r;
        check_server();
        if (sx_now_s() - t0 > g_max_seconds) {
            printf("time limit %.0f s reached\n", g_max_seconds);
            atomic_store(&g_stop, 1);
        }
        if (g_verbose)
            fprintf(stderr, "  %" PRIu64 " frames, RSS %ld KiB, fds %ld\n",
                    (uint64_t)atomic_load(&g_sent), r, sx_proc_fds(g_pid));
    }
    for (int i = 0; i < g_threads; i++)
        pthread_join(g_thr[i].th, NULL);
    double elapsed = sx_now_s() - t0;
    uint64_t sent = atomic_load(&g_sent);

    /* idle sockets: after the handshake timeout the server must have closed them */
    double idle_age = sx_now_s() - t_idle;
    int idle_closed = 0, idle_open = 0;
    for (int i = 0; i < g_idle; i++) {
        if (idle[i] < 0) continue;
        if (sx_wait_closed(idle[i], idle_age > g_hs_timeout + 2 ? 200 : 0)) idle_closed++;
        else idle_open++;
        hard_close(idle[i]);
    }
    em_free(idle);

    atomic_store(&ck.stop, 1);
    pthread_join(ck.th, NULL);

    /* a fresh correct client after the storm */
    int fresh_ok = 0;
    if (!atomic_load(&g_server_dead)) {
        sx_conn f;
        if (sx_open(&f, g_port, 1, 7, 0) == 0) {
            sx_reply r;
            em_buf_reset(&f.out);
            size_t s = sx_req_begin(&f.out, SX_OP_PUT, f.rid++);
            sx_cache_hdr(&f.out, CID_CHECK);
            sx_v_int(&f.out, 424242);
            sx_v_str(&f.out, "after");
            sx_req_end(&f.out, s);
            if (sx_call(&f, &r, 5000) == 0 && r.status == 0) {
                em_buf_reset(&f.out);
                s = sx_req_begin(&f.out, SX_OP_GET, f.rid++);
                sx_cache_hdr(&f.out, CID_CHECK);
                sx_v_int(&f.out, 424242);
                sx_req_end(&f.out, s);
                fresh_ok = sx_call(&f, &r, 5000) == 0 && r.status == 0 && r.n == 10 &&
                           memcmp(r.p + 5, "after", 5) == 0;
            }
            sx_close(&f);
        }
        cleanup_caches(&setup);
    }
    long fd_end = settle_fds(fd_base);
    usleep(500000);
    long rss_end = sx_proc_rss_kb(g_pid);
    if (have_heap)
        have_heap = live_heap(&setup, &heap_end, &blocks_end) == 0;
    sx_close(&setup);
    long fd_final = settle_fds(fd_idle);

    /* ---- report ---- */
    kstats tot[NKINDS];
    memset(tot, 0, sizeof tot);
    uint64_t connects = 0, cfail = 0;
    for (int i = 0; i < g_threads; i++) {
        connects += g_thr[i].connects;
        cfail += g_thr[i].connect_fail;
        for (int k = 0; k < NKINDS; k++) {
            tot[k].frames += g_thr[i].ks[k].frames;
            tot[k].violations += g_thr[i].ks[k].violations;
            tot[k].status2 += g_thr[i].ks[k].status2;
            tot[k].secs += g_thr[i].ks[k].secs;
            for (int o = 0; o < NOUT; o++)
                tot[k].out[o] += g_thr[i].ks[k].out[o];
        }
        em_buf_free(&g_thr[i].fb);
        em_buf_free(&g_thr[i].in);
    }
    em_free(g_thr);

    printf("\n%-16s %9s %9s %8s %8s %6s %7s %8s %6s %8s\n", "kind", "frames", "err-reply",
           "ok-reply", "closed", "hang", "garbled", "no-wait", "VIOL", "us/frame");
    uint64_t viol = 0, hangs = 0;
    for (int k = 0; k < NKINDS; k++) {
        printf("%-16s %9" PRIu64 " %9" PRIu64 " %8" PRIu64 " %8" PRIu64 " %6" PRIu64
               " %7" PRIu64 " %8" PRIu64 " %6" PRIu64 " %8.0f\n", kind_name[k], tot[k].frames,
               tot[k].out[O_ERR], tot[k].out[O_OK], tot[k].out[O_CLOSED], tot[k].out[O_HANG],
               tot[k].out[O_GARBLED], tot[k].out[O_NOWAIT], tot[k].violations,
               tot[k].frames ? tot[k].secs * 1e6 / (double)tot[k].frames : 0.0);
        viol += tot[k].violations;
        hangs += tot[k].out[O_HANG];
    }
    printf("malformed frames: %" PRIu64 " in %.1f s (%.0f/s) over %" PRIu64
           " connections (%" PRIu64 " failed to connect); unknown-op replies with status 2: %"
           PRIu64 "/%" PRIu64 "\n", sent, elapsed, sent / (elapsed > 0 ? elapsed : 1), connects,
           cfail, tot[K_UNKNOWN_OP].status2, tot[K_UNKNOWN_OP].out[O_ERR]);
    printf("correct client: %" PRIu64 " ops, %" PRIu64 " errors, %" PRIu64
           " reconnects, mean %.3f ms, max %.1f ms%s%s\n", ck.ops, ck.errors, ck.reconnects,
           ck.ops ? ck.sum_lat * 1000 / (double)(ck.ops / 2 ? ck.ops / 2 : 1) : 0.0,
           ck.max_lat * 1000, ck.errors ? "; first error: " : "", ck.first_error);
    printf("server RSS KiB: idle %ld, after warm-up %ld, peak %ld, end %ld (%+.1f%% vs warm-up)\n",
           rss_idle, rss_base, rss_peak, rss_end,
           rss_base > 0 ? 100.0 * (double)(rss_end - rss_base) / (double)rss_base : 0.0);
    if (have_heap)
        printf("server live heap (em_malloc): after warm-up %" PRId64 " bytes in %" PRId64
               " blocks, end %" PRId64 " bytes in %" PRId64 " blocks\n", heap_base, blocks_base,
               heap_end, blocks_end);
    printf("server fds: idle %ld, after warm-up %ld, end %ld, after all closed %ld\n",
           fd_idle, fd_base, fd_end, fd_final);
    printf("idle never-handshaking sockets: %d closed by the server, %d still open after %.1f s\n",
           idle_closed, idle_open, idle_age);
    printf("\n");

    int dead = atomic_load(&g_server_dead);
    check(!dead && sx_proc_alive(g_pid), "server alive after %" PRIu64 " malformed frames", sent);
    check(sent >= g_target, "sent at least %" PRIu64 " malformed frames (%" PRIu64 ")", g_target, sent);
    for (int k = 0; k < NKINDS; k++)
        if (g_kind_mask & (1u << k))
            check(tot[k].violations == 0 && tot[k].frames > 0, "%-16s %" PRIu64 " frames, %" PRIu64
              " violations", kind_name[k], tot[k].frames, tot[k].violations);
    check(hangs == 0, "every awaited frame answered or closed within 2 s (%" PRIu64 " hangs)", hangs);
    check(ck.errors == 0 && ck.ops > 0, "correct client: %" PRIu64 " ops, %" PRIu64 " errors", ck.ops, ck.errors);
    check(fresh_ok, "a fresh client works after the storm");
    check(fd_final >= 0 && fd_final <= fd_idle,
          "server fds back to baseline once every client closed (idle %ld, end %ld)", fd_idle, fd_final);
    long slack = rss_base / 20 > g_rss_slack_kb ? rss_base / 20 : g_rss_slack_kb;
    if (g_rss_slack_kb >= 0)
        check(rss_end >= 0 && rss_end <= rss_base + slack,
              "server RSS back to baseline within max(5%%, %ld KiB) (%ld -> %ld KiB)",
              g_rss_slack_kb, rss_base, rss_end);
    else
        printf("skip RSS check (--no-rss: a sanitizer's allocator keeps freed memory)\n");
    if (have_heap)
        check(heap_end - heap_base <= 65536 && blocks_end - blocks_base <= 64,
              "server live heap back to baseline (%+" PRId64 " bytes, %+" PRId64 " blocks)",
              heap_end - heap_base, blocks_end - blocks_base);
    if (idle_age > g_hs_timeout + 2)
        check(idle_open == 0, "never-handshaking sockets closed after the %.0f s handshake timeout"
              " (%d of %d)", g_hs_timeout, idle_closed, g_idle);
    else
        printf("skip never-handshaking sockets: run (%.1f s) shorter than handshake timeout + 2 s\n",
               idle_age);
    (void)viol;
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
