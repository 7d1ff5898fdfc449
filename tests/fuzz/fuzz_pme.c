/* fuzz_pme.c - libFuzzer target for the exchange's messages as they arrive
 * from another node: the compressed form (src/cluster/cl_zip.c) and, inside
 * it, the full map and the single message (cl_pmap.c).  The input is tried
 * as a compressed stream; what inflates is decoded as both messages.  The
 * input itself is also decoded as both (so the decoders are reached without
 * DEFLATE in the way).  Properties: a decoded message re-encodes to exactly
 * the bytes it came from, and inflated bytes deflate and inflate back to
 * themselves.  The input is also checked as a single request
 * (cl_pme_sreq_check), uncompressed as it travels.  Seeds: tests/fuzz/corpus/fuzz_pme/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_pmap.h"
#include "cluster/cl_pme.h"
#include "cluster/cl_zip.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One codec state for the process, as a node keeps one per thread (it stays
 * reachable, so the leak checker does not count it). */
static cl_zip *zip;

static void check_pmap(const uint8_t *p, size_t n)
{
    uint32_t cap = cl_pmap_peek_groups(p, n);
    cl_pmap_group *g = em_calloc(cap ? cap : 1, sizeof *g);
    if (!g)
        return;
    cl_pmap m;
    m.g = g;
    if (cl_pmap_decode(p, n, &m, cap) == 0) {
        /* the view re-encodes to the same bytes */
        cl_meta_uuid *ids = em_malloc(m.nodes * sizeof *ids);
        size_t nd = 0;
        for (uint32_t i = 0; i < m.ngroups; i++)
            nd += m.g[i].ndiff;
        cl_pmap_diff *d = em_malloc((nd ? nd : 1) * sizeof *d);
        em_buf b = EM_BUF_INIT;
        if (ids && d) {
            for (uint32_t i = 0; i < m.nodes; i++)
                ids[i] = cl_pmap_node(&m, i);
            size_t k = 0;
            for (uint32_t i = 0; i < m.ngroups; i++) {
                cl_pmap_diff *gd = d + k;
                for (uint32_t j = 0; j < m.g[i].ndiff; j++)
                    d[k++] = cl_pmap_diff_at(&m.g[i], j);
                m.g[i].diff = gd;
            }
            m.node = ids;
            int rc = cl_pmap_encode(&b, &m);
            if (rc == 0 && (b.len != n || memcmp(b.p, p, n) != 0))
                abort();
            if (rc != 0 && rc != EM_NOMEM)
                abort();                    /* what decodes must encode */
        }
        em_buf_free(&b);
        em_free(ids);
        em_free(d);
    }
    em_free(g);
}

static void check_psingle(const uint8_t *p, size_t n)
{
    uint32_t cap = cl_psingle_peek_groups(p, n);
    cl_psingle_group *g = em_calloc(cap ? cap : 1, sizeof *g);
    if (!g)
        return;
    cl_psingle s;
    s.g = g;
    if (cl_psingle_decode(p, n, &s, cap) == 0) {
        size_t total = 0;
        for (uint32_t i = 0; i < s.ngroups; i++)
            total += s.g[i].k;
        cl_psingle_part *parts = em_malloc((total ? total : 1) * sizeof *parts);
        em_buf b = EM_BUF_INIT;
        if (parts) {
            size_t k = 0;
            for (uint32_t i = 0; i < s.ngroups; i++) {
                cl_psingle_part *gp = parts + k;
                for (uint32_t j = 0; j < s.g[i].k; j++)
                    parts[k++] = cl_psingle_part_at(&s.g[i], j);
                s.g[i].p = gp;
            }
            int rc = cl_psingle_encode(&b, &s);
            if (rc == 0 && (b.len != n || memcmp(b.p, p, n) != 0))
                abort();
            if (rc != 0 && rc != EM_NOMEM)
                abort();
        }
        em_buf_free(&b);
        em_free(parts);
    }
    em_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!zip && cl_zip_new(&zip, CL_ZIP_LEVEL) != 0)
        return 0;
    check_pmap(data, size);
    check_psingle(data, size);
    /* the single request, from an exact-size copy (ASan sees a read past) */
    uint8_t *q = malloc(size ? size : 1);
    if (q) {
        memcpy(q, data, size);
        if (cl_pme_sreq_check(q, size) == 0 &&
            (size < 12 || size != 12 + 16 * (size_t)em_ld32(q + 8)))
            abort();
        free(q);
    }
    em_buf out = EM_BUF_INIT, w = EM_BUF_INIT, again = EM_BUF_INIT;
    char why[160] = "";
    int rc = cl_zip_inflate(zip, data, size, &out, why, sizeof why);
    if (rc == 0) {
        if (out.len != cl_zip_data_size(data, size))
            abort();
        check_pmap(out.p, out.len);
        check_psingle(out.p, out.len);
        if (cl_zip_deflate(zip, &w, out.p, out.len) == 0 &&
            cl_zip_inflate(zip, w.p, w.len, &again, why, sizeof why) == 0 &&
            (again.len != out.len || (out.len && memcmp(again.p, out.p, out.len) != 0)))
            abort();
    } else if (rc != EM_NOMEM && !why[0]) {
        abort();                            /* every rejection says why */
    }
    em_buf_free(&out);
    em_buf_free(&w);
    em_buf_free(&again);
    return 0;
}
