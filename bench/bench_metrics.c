/* bench_metrics.c - cost of emberd's request counting (src/server/metrics.h):
 * one srv_metrics_op per request on a worker's own block, and one scrape.
 * Compare ns/op here with a request's ns/op in `ember-bench load` to get the
 * share of CPU spent on counting (issue 5 asks for <= 2%). */
#include "bench.h"

#include "server/metrics.h"
#include "util/clock.h"
#include "util/mem.h"

#include <stdlib.h>

static void *setup_metrics(void)
{
    srv_metrics *m = NULL;
    srv_metrics_new(2, &m);
    return m;
}

static void teardown_metrics(void *ctx) { srv_metrics_free(ctx); }

static int op_count(void *ctx, uint64_t n)
{
    srv_metrics_block *b = srv_metrics_worker(ctx, 0);
    if (!b)
        return -1;
    /* a realistic spread of ops and latencies (1-16 us) */
    static const int ops[4] = {1000, 1001, 1000, 1016};
    for (uint64_t i = 0; i < n; i++)
        srv_metrics_op(b, ops[i & 3], 0, 1000 + (i & 15) * 1000, 40, 30);
    return 0;
}

BENCH_REGISTER(metrics_op, {"metrics", "per-worker block", "srv_metrics_op", NULL, op_count,
                            setup_metrics, teardown_metrics, 0})

/* What a worker pays per request in total: the sampling decision, two clock
 * reads for one request in SRV_METRICS_SAMPLE_EVERY, and the counting. */
static int op_count_sampled(void *ctx, uint64_t n)
{
    srv_metrics_block *b = srv_metrics_worker(ctx, 0);
    if (!b)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        int timed = srv_metrics_time_this(b);
        uint64_t t0 = timed ? em_now_ns() : 0;
        bench_sink += i;                    /* the request would run here */
        uint64_t ns = timed ? em_now_ns() - t0 : SRV_METRICS_UNTIMED;
        srv_metrics_op(b, (i & 1) ? 1000 : 1001, 0, ns, 40, 30);
    }
    return 0;
}

BENCH_REGISTER(metrics_op_sampled, {"metrics", "sampled timing + count", "per request", NULL,
                                    op_count_sampled, setup_metrics, teardown_metrics, 0})

static int op_render(void *ctx, uint64_t n)
{
    em_buf b = EM_BUF_INIT;
    int rc = 0;
    for (uint64_t i = 0; i < n && !rc; i++) {
        em_buf_reset(&b);
        rc = srv_metrics_render(ctx, NULL, &b);
    }
    bench_sink += b.len;
    em_buf_free(&b);
    return rc;
}

static void *setup_render(void)
{
    srv_metrics *m = setup_metrics();
    if (m)
        op_count(m, 100000);    /* several ops with series to render */
    return m;
}

BENCH_REGISTER(metrics_render, {"metrics", "4 ops seen, no store", "srv_metrics_render", NULL,
                                op_render, setup_render, teardown_metrics, 200})

/* The clock read a caller pays per timed request (one per request when the
 * end of one request is taken as the start of the next in a batch). */
static int op_clock(void *ctx, uint64_t n)
{
    (void)ctx;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc += em_now_ns();
    bench_sink += acc;
    return 0;
}

BENCH_REGISTER(metrics_clock, {"metrics", "clock read", "em_now_ns", NULL, op_clock, NULL, NULL, 0})
