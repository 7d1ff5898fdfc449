/* metrics.c - per-worker counter blocks and the Prometheus text rendering
 * (text exposition format 0.0.4: "# HELP", "# TYPE", one sample per line,
 * all samples of a family together, histograms as cumulative _bucket{le}
 * series plus _sum and _count).  Counting itself is inline in metrics.h.
 */
#include "server/metrics.h"

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct srv_metrics {
    int                nblocks;
    srv_metrics_block *blocks;       /* em_malloc'd, 64-byte aligned inside raw */
    void              *raw;
    uint64_t           start_ns;
    wal               *wal;          /* srv_metrics_watch_wal; NULL = none */
    int                nregions;
    char               regions[SRV_HEALTH_MAX][64];
};

int srv_metrics_new(int nworkers, srv_metrics **out)
{
    *out = NULL;
    if (nworkers < 1 || nworkers > 4096)
        return EM_INVAL;
    srv_metrics *m = em_calloc(1, sizeof *m);
    if (!m)
        return EM_NOMEM;
    size_t bytes = (size_t)nworkers * sizeof(srv_metrics_block) + 64;
    m->raw = em_calloc(1, bytes);
    if (!m->raw) {
        em_free(m);
        return EM_NOMEM;
    }
    /* Align each block to a cache line so two workers never share one. */
    uintptr_t p = ((uintptr_t)m->raw + 63) & ~(uintptr_t)63;
    m->blocks = (srv_metrics_block *)p;
    m->nblocks = nworkers;
    m->start_ns = em_now_ns();
    srv_metrics_set_sampling(m, SRV_METRICS_SAMPLE_EVERY);
    *out = m;
    return 0;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m)
        return;
    em_free(m->raw);
    em_free(m);
}

void srv_metrics_set_sampling(srv_metrics *m, uint32_t every)
{
    uint32_t p = 1;
    while (every && p <= every / 2)
        p *= 2;
    for (int i = 0; i < m->nblocks; i++) {
        m->blocks[i].sample_mask = p - 1;
        m->blocks[i].tick = 0;
    }
}

srv_metrics_block *srv_metrics_worker(srv_metrics *m, int i)
{
    if (!m || i < 0 || i >= m->nblocks)
        return NULL;
    return &m->blocks[i];
}

/* ---- health --------------------------------------------------------------- */

int srv_metrics_watch_wal(srv_metrics *m, wal *w, const char *const *regions, size_t n)
{
    if ((size_t)m->nregions + n > SRV_HEALTH_MAX)
        return EM_RANGE;
    for (size_t i = 0; i < n; i++)
        if (strlen(regions[i]) >= sizeof m->regions[0])
            return EM_RANGE;
    for (size_t i = 0; i < n; i++)
        strcpy(m->regions[m->nregions++], regions[i]);
    m->wal = w;
    return 0;
}

int srv_metrics_health(srv_metrics *m, em_buf *out)
{
    /* wal_error takes the log's lock; the message was written under it when
     * the error was set and is never changed after, so reading it once the
     * error is seen is safe. */
    int werr = m->wal ? wal_error(m->wal) : 0;
    int failed = werr ? m->nregions : 0;
    int rc = 0;
    if (!failed)
        return em_buf_append(out, "ok\n", 3) ? EM_NOMEM : 0;
    const char *why = wal_errmsg(m->wal);
    for (int i = 0; i < m->nregions && !rc; i++) {
        char line[1400];
        int k = snprintf(line, sizeof line,
                         "wal_region_%s failed: persistence failed (%s): data region %s no "
                         "longer accepts writes%s%s\n", m->regions[i], em_strerror(werr),
                         m->regions[i], why[0] ? ": " : "", why);
        if (k < 0)
            k = 0;
        if ((size_t)k >= sizeof line) {
            k = (int)sizeof line - 1;
            line[k - 1] = '\n';
        }
        rc = em_buf_append(out, line, (size_t)k) ? EM_NOMEM : 0;
    }
    return rc ? rc : failed;
}

/* ---- rendering ------------------------------------------------------------ */

typedef struct out_t {
    em_buf *b;
    int     err;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    if (o->err)
        return;
    for (;;) {
        size_t room = o->b->cap - o->b->len;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(room ? (char *)o->b->p + o->b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->err = EM_INVAL;
            return;
        }
        if ((size_t)k < room) {
            o->b->len += (size_t)k;
            return;
        }
        if (em_buf_reserve(o->b, (size_t)k + 1)) {
            o->err = EM_NOMEM;
            return;
        }
    }
}

static void family(out_t *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* put_label_value writes a label value with Prometheus escaping. */
static void put_label_value(out_t *o, const char *s)
{
    for (; *s && !o->err; s++) {
        if (*s == '\\')
            put(o, "\\\\");
        else if (*s == '"')
            put(o, "\\\"");
        else if (*s == '\n')
            put(o, "\\n");
        else
            put(o, "%c", *s);
    }
}

int srv_metrics_label_value(em_buf *b, const char *v)
{
    out_t o = {b, 0};
    put_label_value(&o, v);
    return o.err;
}

static uint64_t rd(const srv_counter *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

typedef struct cache_row {
    char          *name;
    st_cache_stats st;
} cache_row;

typedef struct cache_acc {
    cache_row *rows;
    size_t     n, cap;
    int        err;
} cache_acc;

static void collect_cache(void *arg, st_cache *c)
{
    cache_acc *a = arg;
    if (a->err)
        return;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        cache_row *nr = em_realloc(a->rows, nc * sizeof *nr);
        if (!nr) {
            a->err = EM_NOMEM;
            return;
        }
        a->rows = nr;
        a->cap = nc;
    }
    const st_cache_config *cfg = st_cache_cfg(c);
    const char *name = cfg && cfg->name ? cfg->name : "";
    cache_row *r = &a->rows[a->n];
    r->name = em_strndup(name, strlen(name));
    if (!r->name) {
        a->err = EM_NOMEM;
        return;
    }
    st_cache_stats_get(c, &r->st);
    a->n++;
}

static void render_caches(out_t *o, st_store *store)
{
    cache_acc a = {NULL, 0, 0, 0};
    st_cache_each(store, collect_cache, &a);
    if (a.err)
        o->err = a.err;
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } fams[] = {
        {"ember_cache_entries", "gauge", "Entries in the cache.", offsetof(st_cache_stats, entries)},
        {"ember_cache_memory_bytes", "gauge", "Bytes held by the cache's entries.",
         offsetof(st_cache_stats, mem_bytes)},
        {"ember_cache_evictions_total", "counter", "Entries evicted by the memory limit.",
         offsetof(st_cache_stats, evictions)},
        {"ember_cache_expirations_total", "counter", "Entries removed by expiry.",
         offsetof(st_cache_stats, expirations)},
        {"ember_cache_puts_total", "counter", "Writes to the cache.", offsetof(st_cache_stats, puts)},
        {"ember_cache_gets_total", "counter", "Reads from the cache.", offsetof(st_cache_stats, gets)},
        {"ember_cache_hits_total", "counter", "Reads that found an entry.",
         offsetof(st_cache_stats, hits)},
        {"ember_cache_removals_total", "counter", "Entries removed by clients.",
         offsetof(st_cache_stats, removals)},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        family(o, fams[f].name, fams[f].type, fams[f].help);
        for (size_t i = 0; i < a.n; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&a.rows[i].st + fams[f].off, sizeof v);
            put(o, "%s{cache=\"", fams[f].name);
            put_label_value(o, a.rows[i].name);
            put(o, "\"} %" PRIu64 "\n", v);
        }
    }
    for (size_t i = 0; i < a.n; i++)
        em_free(a.rows[i].name);
    em_free(a.rows);
}

int srv_metrics_render(srv_metrics *m, st_store *store, em_buf *b)
{
    out_t o = {b, 0};
    /* Sum the blocks first: each family below reads consistent totals. */
    uint64_t lat[SRV_METRICS_SLOTS][SRV_METRICS_BUCKETS];
    uint64_t sum_ns[SRV_METRICS_SLOTS], errors[SRV_METRICS_SLOTS], ev[SRV_EV_COUNT];
    uint64_t count[SRV_METRICS_SLOTS], timed[SRV_METRICS_SLOTS], fwd[SRV_METRICS_SLOTS];
    uint64_t bytes_in = 0, bytes_out = 0;
    memset(fwd, 0, sizeof fwd);
    memset(lat, 0, sizeof lat);
    memset(sum_ns, 0, sizeof sum_ns);
    memset(errors, 0, sizeof errors);
    memset(ev, 0, sizeof ev);
    memset(count, 0, sizeof count);
    for (int w = 0; w < m->nblocks; w++) {
        const srv_metrics_block *k = &m->blocks[w];
        for (int s = 0; s < SRV_METRICS_SLOTS; s++) {
            for (int i = 0; i < SRV_METRICS_BUCKETS; i++)
                lat[s][i] += rd(&k->lat[s][i]);
            sum_ns[s] += rd(&k->lat_sum_ns[s]);
            count[s] += rd(&k->requests[s]);
            errors[s] += rd(&k->errors[s]);
            fwd[s] += rd(&k->forwarded[s]);
        }
        bytes_in += rd(&k->bytes_in);
        bytes_out += rd(&k->bytes_out);
        for (int e = 0; e < SRV_EV_COUNT; e++)
            ev[e] += rd(&k->events[e]);
    }
    /* A histogram's _count is the total of its own buckets, so the two
     * always agree even while workers count during the scrape. */
    for (int s = 0; s < SRV_METRICS_SLOTS; s++) {
        timed[s] = 0;
        for (int i = 0; i < SRV_METRICS_BUCKETS; i++)
            timed[s] += lat[s][i];
    }

    family(&o, "ember_uptime_seconds", "gauge", "Seconds since the metrics were created.");
    put(&o, "ember_uptime_seconds %.3f\n", (double)(em_now_ns() - m->start_ns) / 1e9);

    /* Only ops that have been seen get series: 50 ops x 22 buckets of zeros
     * would drown the interesting lines. */
    family(&o, "ember_requests_total", "counter", "Requests handled, by op code.");
    for (int s = 0; s < SRV_METRICS_SLOTS; s++)
        if (count[s])
            put(&o, "ember_requests_total{op=\"%s\"} %" PRIu64 "\n", srv_metrics_op_name(s),
                count[s]);
    family(&o, "ember_request_errors_total", "counter",
           "Requests answered with a non-zero status, by op code.");
    for (int s = 0; s < SRV_METRICS_SLOTS; s++)
        if (count[s])
            put(&o, "ember_request_errors_total{op=\"%s\"} %" PRIu64 "\n",
                srv_metrics_op_name(s), errors[s]);
    int any_fwd = 0;
    for (int s = 0; s < SRV_METRICS_SLOTS; s++)
        any_fwd |= fwd[s] != 0;
    if (any_fwd) {
        family(&o, "ember_cluster_forwarded_requests_total", "counter",
               "Requests (or a batch's parts) this node sent to another member to run, by op "
               "code.");
        for (int s = 0; s < SRV_METRICS_SLOTS; s++)
            if (fwd[s])
                put(&o, "ember_cluster_forwarded_requests_total{op=\"%s\"} %" PRIu64 "\n",
                    srv_metrics_op_name(s), fwd[s]);
    }
    family(&o, "ember_request_duration_seconds", "histogram",
           "Time from decoding a request to queuing its reply, by op code "
           "(a sample: one request in N per worker is timed).");
    for (int s = 0; s < SRV_METRICS_SLOTS; s++) {
        if (!timed[s])
            continue;
        const char *op = srv_metrics_op_name(s);
        uint64_t cum = 0;
        for (int i = 0; i < SRV_METRICS_BUCKETS - 1; i++) {
            cum += lat[s][i];
            put(&o, "ember_request_duration_seconds_bucket{op=\"%s\",le=\"%.9g\"} %" PRIu64 "\n",
                op, (double)(1ull << (10 + i)) / 1e9, cum);
        }
        put(&o, "ember_request_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", op,
            timed[s]);
        put(&o, "ember_request_duration_seconds_sum{op=\"%s\"} %.9f\n", op,
            (double)sum_ns[s] / 1e9);
        put(&o, "ember_request_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n", op, timed[s]);
    }

    family(&o, "ember_received_bytes_total", "counter", "Bytes read from thin-client connections.");
    put(&o, "ember_received_bytes_total %" PRIu64 "\n", bytes_in);
    family(&o, "ember_sent_bytes_total", "counter", "Bytes written to thin-client connections.");
    put(&o, "ember_sent_bytes_total %" PRIu64 "\n", bytes_out);

    uint64_t open = ev[SRV_EV_CONN_OPEN], closed = ev[SRV_EV_CONN_CLOSE];
    family(&o, "ember_connections", "gauge", "Thin-client connections open now.");
    put(&o, "ember_connections %" PRIu64 "\n", open > closed ? open - closed : 0);
    family(&o, "ember_connections_total", "counter", "Thin-client connections accepted.");
    put(&o, "ember_connections_total %" PRIu64 "\n", open);
    family(&o, "ember_handshakes_total", "counter", "Thin-client handshakes, by result.");
    put(&o, "ember_handshakes_total{result=\"ok\"} %" PRIu64 "\n", ev[SRV_EV_HANDSHAKE_OK]);
    put(&o, "ember_handshakes_total{result=\"refused\"} %" PRIu64 "\n", ev[SRV_EV_HANDSHAKE_FAIL]);
    put(&o, "ember_handshakes_total{result=\"auth_failed\"} %" PRIu64 "\n", ev[SRV_EV_AUTH_FAIL]);
    put(&o, "ember_handshakes_total{result=\"auth_limited\"} %" PRIu64 "\n",
        ev[SRV_EV_AUTH_LIMITED]);
    family(&o, "ember_tls_handshake_failures_total", "counter",
           "TLS handshakes that failed (plaintext clients, bad certificates).");
    put(&o, "ember_tls_handshake_failures_total %" PRIu64 "\n", ev[SRV_EV_TLS_FAIL]);
    family(&o, "ember_protocol_errors_total", "counter",
           "Connections closed for a protocol violation.");
    put(&o, "ember_protocol_errors_total %" PRIu64 "\n", ev[SRV_EV_PROTO_ERROR]);

    family(&o, "ember_health_component_failed", "gauge",
           "1 if the component has failed (GET /health says why), else 0.");
    int werr = m->wal ? wal_error(m->wal) : 0;
    for (int i = 0; i < m->nregions; i++) {
        put(&o, "ember_health_component_failed{component=\"wal_region_");
        put_label_value(&o, m->regions[i]);
        put(&o, "\"} %d\n", werr ? 1 : 0);
    }

    family(&o, "ember_memory_allocated_bytes", "gauge",
           "Bytes held through ember's allocator, whole process.");
    int64_t live = em_mem_live_bytes();
    put(&o, "ember_memory_allocated_bytes %" PRId64 "\n", live > 0 ? live : 0);

    if (store) {
        st_region_stats rs;
        st_region_stats_get(store, "default", &rs);
        family(&o, "ember_region_used_bytes", "gauge", "Bytes used by entries in the data region.");
        put(&o, "ember_region_used_bytes{region=\"default\"} %" PRIu64 "\n", rs.used_bytes);
        family(&o, "ember_region_limit_bytes", "gauge",
               "Memory limit of the data region (0 = unlimited).");
        put(&o, "ember_region_limit_bytes{region=\"default\"} %" PRIu64 "\n", rs.max_bytes);
        family(&o, "ember_region_evictions_total", "counter",
               "Entries evicted from the data region.");
        put(&o, "ember_region_evictions_total{region=\"default\"} %" PRIu64 "\n", rs.evictions);
        render_caches(&o, store);
    }
    return o.err;
}

void srv_metrics_sum(srv_metrics *m, pr_stats *sum, uint64_t *uptime_ms)
{
    for (int w = 0; w < m->nblocks; w++) {
        const srv_metrics_block *k = &m->blocks[w];
        for (int s = 0; s < SRV_METRICS_SLOTS; s++) {
            for (int i = 0; i < SRV_METRICS_BUCKETS; i++)
                srv_counter_add(&sum->lat[s][i], rd(&k->lat[s][i]));
            srv_counter_add(&sum->requests[s], rd(&k->requests[s]));
            srv_counter_add(&sum->errors[s], rd(&k->errors[s]));
            srv_counter_add(&sum->lat_sum_ns[s], rd(&k->lat_sum_ns[s]));
        }
    }
    *uptime_ms = (em_now_ns() - m->start_ns) / 1000000u;
}
