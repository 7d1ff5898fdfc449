/* load_hist.c - the load generator's latency histogram: log-linear buckets
 * (2^k ranges split into 32 linear sub-buckets), fixed size, no allocation
 * per sample.  Layout of the bucket index is described in load.h. */
#include "load.h"

static unsigned bucket_of(uint64_t v)
{
    if (v < LD_SUB)
        return (unsigned)v;
    unsigned k = 63u - (unsigned)__builtin_clzll(v);   /* v in [2^k, 2^(k+1)) */
    unsigned shift = k - LD_SUB_BITS;
    return (k - LD_SUB_BITS + 1) * LD_SUB + (unsigned)((v >> shift) & (LD_SUB - 1));
}

/* bucket_top: the largest value that falls in bucket b. */
static uint64_t bucket_top(unsigned b)
{
    if (b < LD_SUB)
        return b;
    unsigned k = b / LD_SUB + LD_SUB_BITS - 1, sub = b % LD_SUB;
    unsigned shift = k - LD_SUB_BITS;
    uint64_t lo = ((uint64_t)(LD_SUB + sub)) << shift;
    return lo + ((uint64_t)1 << shift) - 1;
}

void ld_hist_add(ld_hist *h, uint64_t ns)
{
    h->count[bucket_of(ns)]++;
    h->n++;
    h->sum += ns;
    if (ns > h->max)
        h->max = ns;
}

void ld_hist_merge(ld_hist *into, const ld_hist *from)
{
    for (unsigned i = 0; i < LD_BUCKETS; i++)
        into->count[i] += from->count[i];
    into->n += from->n;
    into->sum += from->sum;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t ld_hist_quantile(const ld_hist *h, double q)
{
    if (h->n == 0)
        return 0;
    /* rank of the sample at quantile q, 1-based, at least 1 */
    uint64_t rank = (uint64_t)(q * (double)h->n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > h->n)
        rank = h->n;
    uint64_t seen = 0;
    for (unsigned b = 0; b < LD_BUCKETS; b++) {
        seen += h->count[b];
        if (seen >= rank) {
            uint64_t top = bucket_top(b);
            return top < h->max ? top : h->max;
        }
    }
    return h->max;
}
