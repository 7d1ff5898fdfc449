/* cl_keyset.c - a bounded set of byte-string keys (see cl_keyset.h). */
#include "cluster/cl_keyset.h"

#include <string.h>

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

static uint32_t key_hash(const uint8_t *k, size_t n) { return em_crc32c(0x52454241u, k, n); }

int cl_keyset_has(const cl_keyset *s, const uint8_t *k, uint32_t n)
{
    if (!s->cap)
        return 0;
    for (uint32_t i = key_hash(k, n) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        uint32_t at = s->tab[i];
        if (!at)
            return 0;
        const uint8_t *e = s->keys.p + at - 1;
        if (em_ld32(e) == n && memcmp(e + 4, k, n) == 0)
            return 1;
    }
}

/* grow doubles the table (half full at most), re-placing every offset. */
static int grow(cl_keyset *s)
{
    uint32_t cap = s->cap ? s->cap * 2 : 256;
    uint32_t *t = em_calloc(cap, sizeof *t);
    if (!t)
        return EM_NOMEM;
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->tab[i]) {
            const uint8_t *e = s->keys.p + s->tab[i] - 1;
            uint32_t j = key_hash(e + 4, em_ld32(e)) & (cap - 1);
            while (t[j])
                j = (j + 1) & (cap - 1);
            t[j] = s->tab[i];
        }
    em_free(s->tab);
    s->tab = t;
    s->cap = cap;
    return 0;
}

int cl_keyset_add(cl_keyset *s, const uint8_t *k, uint32_t n)
{
    if (cl_keyset_has(s, k, n))
        return 0;
    if (s->cnt >= CL_KEYSET_MAX || s->keys.len + 4 + n > UINT32_MAX - 1)
        return EM_LIMIT;
    int rc = (s->cnt + 1) * 2 > s->cap ? grow(s) : 0;
    if (rc)
        return rc;
    uint32_t at = (uint32_t)s->keys.len + 1;
    uint8_t h[4];
    em_st32(h, n);
    if (em_buf_append(&s->keys, h, 4) || em_buf_append(&s->keys, k, n))
        return EM_NOMEM;
    uint32_t j = key_hash(k, n) & (s->cap - 1);
    while (s->tab[j])
        j = (j + 1) & (s->cap - 1);
    s->tab[j] = at;
    s->cnt++;
    return 0;
}

void cl_keyset_reset(cl_keyset *s)
{
    em_buf_reset(&s->keys);
    if (s->cap)
        memset(s->tab, 0, sizeof *s->tab * s->cap);
    s->cnt = 0;
}

void cl_keyset_free(cl_keyset *s)
{
    em_buf_free(&s->keys);
    em_free(s->tab);
    memset(s, 0, sizeof *s);
}
