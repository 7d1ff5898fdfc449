/* bench_m2_scan.c - M2's stored-value scan (../shared/BENCHMARKS.md M2,
 * seed CASSANDRA-21587).
 *
 * 100 000 values of one type (id int, name string, score long, city string)
 * stored in a cache, written in 1, 2 or 3 footer encodings interleaved
 * (key i uses encoding i % variants): compact footer with 1-byte offsets,
 * compact with 2-byte offsets, full footer (field id + offset) with 4-byte
 * offsets.  One op = one entry of a scan cursor over all partitions (pages
 * of 1 024) whose callback reads the named field "score" (name -> field id
 * and the type's metadata are resolved once, DESIGN rule 1; the footer is
 * decoded per value by bin_rd_field, one code path for all encodings).
 * ns/op is per entry; the target is 3 variants within 5% of 1.  The objects
 * are those of bench_m2.c's decode rows (same type, fields and encodings),
 * generated here because they go into a cache instead of an array.
 */
#include "bench.h"

#include "binary/binary.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/mem.h"

#include <stdio.h>
#include <string.h>

enum { M2_VALUES = 100000 };

typedef struct m2s_ctx {
    st_store *s;
    st_cache *c;
    bin_registry *reg;
    const bin_type *type;
    int32_t fid;
    st_scan *sc;             /* open cursor, kept across calls */
    uint32_t seen;           /* entries of the current pass */
    int64_t sum;             /* sum of "score" over the current pass */
    int bad;
} m2s_ctx;

static void m2s_teardown(void *p)
{
    m2s_ctx *x = p;
    st_scan_close(x->sc);
    st_close(x->s);
    bin_registry_free(x->reg);
    em_free(x);
}

static int m2s_write(bin_writer *w, const bin_desc *d, int i)
{
    char s[32];
    int n = snprintf(s, sizeof s, "name-%d", i);
    bin_w_obj_begin(w, d);
    bin_w_field_idx(w, 0);
    bin_w_int(w, i);
    bin_w_field_idx(w, 1);
    bin_w_string(w, s, (size_t)n);
    bin_w_field_idx(w, 2);
    bin_w_long(w, i);
    bin_w_field_idx(w, 3);
    bin_w_string(w, "Lisbon", 6);
    return bin_w_obj_end(w);
}

static void *m2s_setup(int variants)
{
    static const char *const fields[] = {"id", "name", "score", "city"};
    static const int32_t codes[] = {BIN_INT, BIN_STRING, BIN_LONG, BIN_STRING};
    m2s_ctx *x = em_calloc(1, sizeof *x);
    if (!x)
        return NULL;
    const bin_desc *d;
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "m2";
    x->reg = bin_registry_new();
    if (!x->reg || st_open(&x->s, NULL) || st_cache_create(x->s, &cfg, &x->c) ||
        bin_registry_define(x->reg, "M2Person", fields, codes, 4, &d)) {
        m2s_teardown(x);
        return NULL;
    }
    x->type = bin_registry_get(x->reg, d->type_id);
    x->fid = bin_field_id("score", 5);
    em_buf v = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, x->reg, &v);
    uint8_t k[5];
    int rc = 0;
    for (int i = 0; i < M2_VALUES && !rc; i++) {
        int var = i % variants;
        em_buf_reset(&v);
        bin_writer_reset(&w, &v);
        w.full_footer = var == 2;
        w.min_width = var == 0 ? 1 : var == 1 ? 2 : 4;
        rc = m2s_write(&w, d, i);
        k[0] = 3;
        em_st32(k + 1, (uint32_t)i);
        if (!rc)
            rc = st_put(x->c, NULL, k, 5, v.p, v.len);
    }
    bin_writer_free(&w);
    em_buf_free(&v);
    if (rc || !x->type) {
        m2s_teardown(x);
        return NULL;
    }
    return x;
}

static int m2s_row(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    m2s_ctx *x = arg;
    const uint8_t *f;
    (void)k; (void)klen; (void)vlen;
    if (bin_rd_field(v, x->type, x->fid, &f) || f[0] != BIN_LONG) {
        x->bad = 1;
        return 1;
    }
    x->sum += (int64_t)em_ld64(f + 1);
    x->seen++;
    return 0;
}

static int m2s_scan(void *p, uint64_t n)
{
    m2s_ctx *x = p;
    uint64_t done = 0;
    while (done < n) {
        if (!x->sc) {
            if (st_scan_open(x->c, -1, &x->sc))
                return 1;
            x->seen = 0;
            x->sum = 0;
        }
        uint32_t before = x->seen;
        uint32_t page = n - done < 1024 ? (uint32_t)(n - done) : 1024;
        int more;
        if (st_scan_next_page(x->sc, page, m2s_row, x, &more) || x->bad)
            return 1;
        done += x->seen - before;
        if (!more) {
            /* a full pass must have seen every value exactly once */
            int64_t want = (int64_t)M2_VALUES * (M2_VALUES - 1) / 2;
            if (x->seen != M2_VALUES || x->sum != want)
                return 1;
            st_scan_close(x->sc);
            x->sc = NULL;
        }
    }
    return 0;
}

static void *m2s_v1(void) { return m2s_setup(1); }
static void *m2s_v2(void) { return m2s_setup(2); }
static void *m2s_v3(void) { return m2s_setup(3); }

BENCH_REGISTER(m2s_scan1, {"m2", "1 variant", "scan", "Cassandra 934.7 ns",
                           m2s_scan, m2s_v1, m2s_teardown, M2_VALUES})
BENCH_REGISTER(m2s_scan2, {"m2", "2 variants", "scan", "Cassandra 981.4 ns",
                           m2s_scan, m2s_v2, m2s_teardown, M2_VALUES})
BENCH_REGISTER(m2s_scan3, {"m2", "3 variants", "scan", "Cassandra 1129.1 ns",
                           m2s_scan, m2s_v3, m2s_teardown, M2_VALUES})
