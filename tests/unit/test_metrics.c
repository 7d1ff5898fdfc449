/* test_metrics.c - per-worker counters and their Prometheus text
 * (src/server/metrics.c). */
#include "test.h"

#include "server/metrics.h"
#include "store/store.h"
#include "util/err.h"
#include "util/mem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* has_line: 1 if text contains exactly this line. */
static int has_line(const em_buf *b, const char *line)
{
    size_t n = strlen(line);
    const char *p = (const char *)b->p, *end = p + b->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (len == n && memcmp(p, line, n) == 0)
            return 1;
        p += len + 1;
    }
    return 0;
}

static int contains(const em_buf *b, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->p + i, s, n) == 0)
            return 1;
    return 0;
}

TEST(metrics_slots_and_buckets)
{
    CHECK_EQ(srv_metrics_slot(1000), SRV_METRICS_SLOT_CACHE_GET);
    CHECK_EQ(srv_metrics_slot(1001), SRV_METRICS_SLOT_CACHE_PUT);
    CHECK_EQ(srv_metrics_slot(1056), SRV_METRICS_SLOT_CACHE_DESTROY);
    CHECK_EQ(srv_metrics_slot(0), SRV_METRICS_SLOT_RESOURCE_CLOSE);
    CHECK_EQ(srv_metrics_slot(9999), SRV_METRICS_SLOT_OTHER);
    CHECK_EQ(srv_metrics_slot(-1), SRV_METRICS_SLOT_OTHER);
    CHECK(strcmp(srv_metrics_op_name(SRV_METRICS_SLOT_CACHE_GET), "CACHE_GET") == 0);
    CHECK(strcmp(srv_metrics_op_name(0), "OTHER") == 0);
    CHECK_EQ(srv_metrics_bucket(0), 0);
    CHECK_EQ(srv_metrics_bucket(1024), 0);
    CHECK_EQ(srv_metrics_bucket(1025), 1);
    CHECK_EQ(srv_metrics_bucket(2048), 1);
    CHECK_EQ(srv_metrics_bucket(2049), 2);
    CHECK_EQ(srv_metrics_bucket(1u << 30), 20);
    CHECK_EQ(srv_metrics_bucket((1u << 30) + 1), 21);
    CHECK_EQ(srv_metrics_bucket(UINT64_MAX), 21);
}

TEST(metrics_render_requests)
{
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(2, &m));
    CHECK(srv_metrics_worker(m, 2) == NULL);
    CHECK(srv_metrics_worker(m, -1) == NULL);
    srv_metrics_block *w0 = srv_metrics_worker(m, 0), *w1 = srv_metrics_worker(m, 1);
    REQUIRE(w0 && w1 && w0 != w1);
    CHECK_EQ((uintptr_t)w1 % 64, 0);
    srv_metrics_op(w0, 1000, 0, 500, 30, 40);        /* bucket le=1.024e-06 */
    srv_metrics_op(w1, 1000, 0, 3000, 30, 40);       /* bucket le=4.096e-06 */
    srv_metrics_op(w1, 1000, 1000, 2000000, 30, 20); /* error, ~2 ms */
    srv_metrics_op(w0, 1001, 0, 1000, 100, 18);
    srv_metrics_op(w0, 7777, 2, 100, 18, 50);        /* unknown op -> OTHER */
    srv_metrics_bytes(w0, 8, 5);
    srv_metrics_event(w0, SRV_EV_CONN_OPEN);
    srv_metrics_event(w1, SRV_EV_CONN_OPEN);
    srv_metrics_event(w1, SRV_EV_CONN_OPEN);
    srv_metrics_event(w0, SRV_EV_CONN_CLOSE);
    srv_metrics_event(w0, SRV_EV_AUTH_FAIL);
    srv_metrics_event(w1, SRV_EV_TLS_FAIL);

    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(srv_metrics_render(m, NULL, &b));
    CHECK(has_line(&b, "# TYPE ember_requests_total counter"));
    CHECK(has_line(&b, "ember_requests_total{op=\"CACHE_GET\"} 3"));
    CHECK(has_line(&b, "ember_requests_total{op=\"CACHE_PUT\"} 1"));
    CHECK(has_line(&b, "ember_requests_total{op=\"OTHER\"} 1"));
    CHECK(!contains(&b, "op=\"CACHE_REMOVE_KEY\""));
    CHECK(has_line(&b, "ember_request_errors_total{op=\"CACHE_GET\"} 1"));
    CHECK(has_line(&b, "ember_request_errors_total{op=\"OTHER\"} 1"));
    CHECK(has_line(&b, "# TYPE ember_request_duration_seconds histogram"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_GET\",le=\"1.024e-06\"} 1"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_GET\",le=\"2.048e-06\"} 1"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_GET\",le=\"4.096e-06\"} 2"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_GET\",le=\"0.001048576\"} 2"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_GET\",le=\"0.002097152\"} 3"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_GET\",le=\"+Inf\"} 3"));
    CHECK(has_line(&b, "ember_request_duration_seconds_sum{op=\"CACHE_GET\"} 0.002003500"));
    CHECK(has_line(&b, "ember_request_duration_seconds_count{op=\"CACHE_GET\"} 3"));
    CHECK(has_line(&b, "ember_received_bytes_total 216"));
    CHECK(has_line(&b, "ember_sent_bytes_total 173"));
    CHECK(has_line(&b, "ember_connections 2"));
    CHECK(has_line(&b, "ember_connections_total 3"));
    CHECK(has_line(&b, "ember_handshakes_total{result=\"auth_failed\"} 1"));
    CHECK(has_line(&b, "ember_tls_handshake_failures_total 1"));
    CHECK(contains(&b, "\nember_memory_allocated_bytes "));
    CHECK(!contains(&b, "ember_cache_entries{"));
    /* every line is a comment or "name[{labels}] value" */
    for (size_t i = 0, start = 0; i < b.len; i++) {
        if (b.p[i] != '\n')
            continue;
        CHECK(i > start);
        if (b.p[start] != '#')
            CHECK(memchr(b.p + start, ' ', i - start) != NULL);
        start = i + 1;
    }
    CHECK(b.len > 0 && b.p[b.len - 1] == '\n');
    em_buf_free(&b);
    srv_metrics_free(m);
}

TEST(metrics_counting_allocates_nothing)
{
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(1, &m));
    srv_metrics_block *w = srv_metrics_worker(m, 0);
    em_mem_stats before = em_mem_thread();
    for (int i = 0; i < 100000; i++)
        srv_metrics_op(w, 1000 + (i % 30), 0, (uint64_t)i * 7, 40, 30);
    em_mem_stats after = em_mem_thread();
    CHECK_EQ(after.allocs - before.allocs, 0);
    srv_metrics_free(m);
}

static void put_int_int(st_cache *c, int32_t k, int32_t v)
{
    uint8_t kb[5] = {3}, vb[5] = {3};
    memcpy(kb + 1, &k, 4);
    memcpy(vb + 1, &v, 4);
    st_put(c, NULL, kb, 5, vb, 5);
}

TEST(metrics_render_store)
{
    st_store *s;
    st_options opt;
    memset(&opt, 0, sizeof opt);
    opt.default_region.name = "default";
    opt.default_region.max_bytes = 1 << 20;
    REQUIRE_OK(st_open(&s, &opt));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = em_strndup("people \"vip\"", 12);
    st_cache *c;
    int rc = st_cache_create(s, &cfg, &c);
    st_cache_config_free(&cfg);
    if (rc) {
        st_close(s);
        REQUIRE_OK(rc);
    }
    put_int_int(c, 1, 10);
    put_int_int(c, 2, 20);
    put_int_int(c, 2, 21);
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(1, &m));
    em_buf b = EM_BUF_INIT;
    CHECK_OK(srv_metrics_render(m, s, &b));
    CHECK(has_line(&b, "# TYPE ember_cache_entries gauge"));
    CHECK(has_line(&b, "ember_cache_entries{cache=\"people \\\"vip\\\"\"} 2"));
    CHECK(has_line(&b, "ember_cache_puts_total{cache=\"people \\\"vip\\\"\"} 3"));
    CHECK(has_line(&b, "ember_cache_evictions_total{cache=\"people \\\"vip\\\"\"} 0"));
    CHECK(has_line(&b, "ember_cache_expirations_total{cache=\"people \\\"vip\\\"\"} 0"));
    CHECK(has_line(&b, "ember_region_limit_bytes{region=\"default\"} 1048576"));
    CHECK(contains(&b, "ember_region_used_bytes{region=\"default\"} "));
    CHECK(!has_line(&b, "ember_region_used_bytes{region=\"default\"} 0"));
    em_buf_free(&b);
    srv_metrics_free(m);
    st_close(s);
}

typedef struct worker_arg {
    srv_metrics_block *b;
    int n;
} worker_arg;

static void *count_thread(void *p)
{
    worker_arg *a = p;
    for (int i = 0; i < a->n; i++)
        srv_metrics_op(a->b, 1000, 0, 2000, 10, 10);
    return NULL;
}

TEST(metrics_concurrent_workers_and_scrapes)
{
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(3, &m));
    pthread_t t[3];
    worker_arg a[3];
    for (int i = 0; i < 3; i++) {
        a[i].b = srv_metrics_worker(m, i);
        a[i].n = 200000;
        pthread_create(&t[i], NULL, count_thread, &a[i]);
    }
    em_buf b = EM_BUF_INIT;
    for (int i = 0; i < 20; i++) {
        em_buf_reset(&b);
        CHECK_OK(srv_metrics_render(m, NULL, &b));
    }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    em_buf_reset(&b);
    CHECK_OK(srv_metrics_render(m, NULL, &b));
    CHECK(has_line(&b, "ember_requests_total{op=\"CACHE_GET\"} 600000"));
    CHECK(has_line(&b, "ember_received_bytes_total 6000000"));
    em_buf_free(&b);
    srv_metrics_free(m);
}

TEST(metrics_sampling)
{
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(2, &m));
    srv_metrics_block *w = srv_metrics_worker(m, 1);
    int timed = 0;
    for (int i = 0; i < 160; i++)
        timed += srv_metrics_time_this(w);
    CHECK_EQ(timed, 160 / SRV_METRICS_SAMPLE_EVERY);
    CHECK_EQ(srv_metrics_time_this(w), 1);      /* the 161st: 160 is a multiple */
    srv_metrics_set_sampling(m, 1);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(srv_metrics_time_this(w), 1);
    srv_metrics_set_sampling(m, 10);            /* rounds down to 8 */
    timed = 0;
    for (int i = 0; i < 80; i++)
        timed += srv_metrics_time_this(w);
    CHECK_EQ(timed, 10);

    /* untimed requests are counted but stay out of the histogram */
    srv_metrics_op(w, 1016, 0, SRV_METRICS_UNTIMED, 20, 18);
    srv_metrics_op(w, 1016, 0, SRV_METRICS_UNTIMED, 20, 18);
    srv_metrics_op(w, 1016, 0, 1500, 20, 18);
    srv_metrics_op(w, 1020, 0, SRV_METRICS_UNTIMED, 20, 18);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(srv_metrics_render(m, NULL, &b));
    CHECK(has_line(&b, "ember_requests_total{op=\"CACHE_REMOVE_KEY\"} 3"));
    CHECK(has_line(&b, "ember_request_duration_seconds_count{op=\"CACHE_REMOVE_KEY\"} 1"));
    CHECK(has_line(&b, "ember_request_duration_seconds_bucket{op=\"CACHE_REMOVE_KEY\",le=\"+Inf\"} 1"));
    CHECK(has_line(&b, "ember_requests_total{op=\"CACHE_GET_SIZE\"} 1"));
    CHECK(!contains(&b, "ember_request_duration_seconds_count{op=\"CACHE_GET_SIZE\"}"));
    CHECK(has_line(&b, "ember_received_bytes_total 80"));
    em_buf_free(&b);
    srv_metrics_free(m);
}

/* ---- health: a failed WAL fails every persistent region ------------------- */

#include "wal_env.h"

#include <errno.h>

TEST(metrics_health_wal_failure)
{
    /* Default region persistent, "mem" memory-only, over the in-memory file
     * layer with its fault injection: a failed fsync fails the log, and with
     * it every persistent region (they refuse writes from then on). */
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_region_spec def = {.cfg = {.name = "default"}};
    st_region_spec mem[1] = {{.cfg = {.name = "mem"}, .in_memory = 1}};
    st_store *s = NULL;
    REQUIRE_OK(st_open_regions(&s, &def, mem, 1));
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = WAL_FSYNC;
    wal *w;
    REQUIRE_OK(we_open(fs, &o, s, &w));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "p";
    cfg.partitions = 4;
    st_cache *c;
    REQUIRE_OK(st_cache_create(s, &cfg, &c));
    srv_metrics *m;
    REQUIRE_OK(srv_metrics_new(1, &m));
    const char *regions[] = {"default"};
    REQUIRE_OK(srv_metrics_watch_wal(m, w, regions, 1));

    em_buf b = EM_BUF_INIT;
    CHECK_EQ(srv_metrics_health(m, &b), 0);
    CHECK(b.len == 3 && !memcmp(b.p, "ok\n", 3));
    em_buf_reset(&b);
    CHECK_OK(srv_metrics_render(m, s, &b));
    CHECK(has_line(&b, "# TYPE ember_health_component_failed gauge"));
    CHECK(has_line(&b, "ember_health_component_failed{component=\"wal_region_default\"} 0"));
    CHECK(!contains(&b, "wal_region_mem"));

    put_int_int(c, 1, 1);
    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 1, EIO, 0, 0);
    uint8_t kb[5] = {3, 2, 0, 0, 0}, vb[5] = {3, 2, 0, 0, 0};
    CHECK_EQ(st_put(c, NULL, kb, 5, vb, 5), -EIO);
    CHECK_EQ(st_put(c, NULL, kb, 5, vb, 5), EM_READONLY);

    em_buf_reset(&b);
    CHECK_EQ(srv_metrics_health(m, &b), 1);
    REQUIRE_OK(em_buf_append(&b, "", 1));
    const char *want = "wal_region_default failed: persistence failed (";
    CHECK(!strncmp((const char *)b.p, want, strlen(want)));
    CHECK(strstr((const char *)b.p, "data region default no longer accepts writes: ") != NULL);
    CHECK(strstr((const char *)b.p, "fsync failed") != NULL);      /* the WAL's own message */
    CHECK_EQ(b.p[b.len - 2], '\n');
    CHECK(memchr(b.p, '\n', b.len - 2) == NULL);                  /* one line */
    em_buf_reset(&b);
    CHECK_OK(srv_metrics_render(m, s, &b));
    CHECK(has_line(&b, "ember_health_component_failed{component=\"wal_region_default\"} 1"));

    /* more regions than a config can hold, or too long a name: refused */
    const char *many[SRV_HEALTH_MAX];
    for (int i = 0; i < SRV_HEALTH_MAX; i++)
        many[i] = "r";
    CHECK_EQ(srv_metrics_watch_wal(m, w, many, SRV_HEALTH_MAX), EM_RANGE);

    em_buf_free(&b);
    srv_metrics_free(m);
    CHECK_EQ(wal_close(w), -EIO);
    st_close(s);
    wal_memfs_free(fs);
}
