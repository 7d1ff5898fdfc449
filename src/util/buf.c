/* buf.c - growth policy for em_buf (see buf.h). */
#include "buf.h"
#include "err.h"
#include "mem.h"

void em_buf_free(em_buf *b)
{
    em_free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

int em_buf_grow(em_buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len)
        return EM_NOMEM;
    size_t need = b->len + extra;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    uint8_t *p = em_realloc(b->p, cap);
    if (!p)
        return EM_NOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int em_buf_grow_exact(em_buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len)
        return EM_NOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    uint8_t *p = em_realloc(b->p, need ? need : 1);
    if (!p)
        return EM_NOMEM;
    b->p = p;
    b->cap = need;
    return 0;
}
