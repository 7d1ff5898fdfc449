/* cl_rid.c - the window of recent request ids (cl_rid.h). */
#include "cluster/cl_rid.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "util/err.h"
#include "util/mem.h"

#define BUCKETS (CL_RID_PER_STRIPE * 2u)

enum { E_FREE = 0, E_RUN, E_DONE, E_APPLIED };

typedef struct ent {
    cl_rid   id;
    uint32_t next;              /* index + 1 of the next entry of its bucket */
    uint8_t  state;
    uint8_t  big;
    uint16_t op;
    int32_t  status;
    uint32_t len;
    uint8_t  data[CL_RID_INLINE];
} ent;

typedef struct stripe {
    pthread_mutex_t mu;
    pthread_cond_t  cv;         /* a claim running here finished */
    uint32_t ring;              /* the entry reused next */
    uint32_t head[BUCKETS];     /* index + 1 of a bucket's first entry */
    ent      e[CL_RID_PER_STRIPE];
} stripe;

struct cl_rids {
    stripe *s;                  /* CL_RID_STRIPES */
    _Atomic uint64_t st[6];
};
enum { S_CLAIMS, S_DONE, S_APPLIED, S_BUSY, S_LEARNED, S_EVICTED };

static uint64_t mix(cl_rid id)
{
    uint64_t h = id.origin ^ (id.seq * 0x9e3779b97f4a7c15ull);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static stripe *stripe_of(cl_rids *w, cl_rid id, uint32_t *bucket)
{
    uint64_t h = mix(id);
    *bucket = (uint32_t)(h >> 6) & (BUCKETS - 1);
    return &w->s[h & (CL_RID_STRIPES - 1)];
}

static int same(cl_rid a, cl_rid b) { return a.origin == b.origin && a.seq == b.seq; }

static ent *find(stripe *s, uint32_t b, cl_rid id)
{
    for (uint32_t i = s->head[b]; i; i = s->e[i - 1].next)
        if (s->e[i - 1].state != E_FREE && same(s->e[i - 1].id, id))
            return &s->e[i - 1];
    return NULL;
}

static void unlink_ent(cl_rids *w, stripe *s, ent *e)
{
    uint32_t b;
    (void)stripe_of(w, e->id, &b);
    uint32_t me = (uint32_t)(e - s->e) + 1;
    for (uint32_t *p = &s->head[b]; *p; p = &s->e[*p - 1].next)
        if (*p == me) {
            *p = e->next;
            break;
        }
    e->state = E_FREE;
    e->next = 0;
}

/* take reuses the oldest entry of the ring for id. */
static ent *take(cl_rids *w, stripe *s, uint32_t b, cl_rid id, uint8_t state, uint16_t op)
{
    ent *e = &s->e[s->ring];
    s->ring = (s->ring + 1) % CL_RID_PER_STRIPE;
    if (e->state != E_FREE) {
        unlink_ent(w, s, e);
        atomic_fetch_add_explicit(&w->st[S_EVICTED], 1, memory_order_relaxed);
    }
    e->id = id;
    e->state = state;
    e->op = op;
    e->big = 0;
    e->status = 0;
    e->len = 0;
    e->next = s->head[b];
    s->head[b] = (uint32_t)(e - s->e) + 1;
    return e;
}

int cl_rids_new(cl_rids **out)
{
    *out = NULL;
    cl_rids *w = em_calloc(1, sizeof *w);
    if (!w)
        return EM_NOMEM;
    if (!(w->s = em_calloc(CL_RID_STRIPES, sizeof *w->s))) {
        em_free(w);
        return EM_NOMEM;
    }
    for (uint32_t i = 0; i < CL_RID_STRIPES; i++) {
        pthread_mutex_init(&w->s[i].mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w->s[i].cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    *out = w;
    return 0;
}

void cl_rids_free(cl_rids *w)
{
    if (!w)
        return;
    for (uint32_t i = 0; i < CL_RID_STRIPES; i++) {
        pthread_mutex_destroy(&w->s[i].mu);
        pthread_cond_destroy(&w->s[i].cv);
    }
    em_free(w->s);
    em_free(w);
}

int cl_rids_claim(cl_rids *w, cl_rid id, uint16_t op, uint32_t wait_ms, cl_rid_res *res)
{
    uint32_t b;
    stripe *s = stripe_of(w, id, &b);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += wait_ms / 1000;
    end.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    atomic_fetch_add_explicit(&w->st[S_CLAIMS], 1, memory_order_relaxed);
    pthread_mutex_lock(&s->mu);
    ent *e = find(s, b, id);
    if (!e) {
        (void)take(w, s, b, id, E_RUN, op);
        pthread_mutex_unlock(&s->mu);
        return CL_RID_NEW;
    }
    /* The original still runs here (its forwarder lost the link while it
     * waited for its copies' acks): its outcome is the retry's.  The entry
     * is looked up again after each wake - the ring may have reused it. */
    while (e && e->state == E_RUN)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &end) != 0 ||
            !(e = find(s, b, id)))
            break;
    int rc;
    if (!e || e->state == E_RUN) {
        rc = CL_RID_BUSY;
        atomic_fetch_add_explicit(&w->st[S_BUSY], 1, memory_order_relaxed);
    } else if (e->state == E_DONE) {
        rc = CL_RID_DONE;
        res->op = e->op;
        res->status = e->status;
        res->big = e->big;
        res->len = e->len;
        memcpy(res->data, e->data, e->len);
        atomic_fetch_add_explicit(&w->st[S_DONE], 1, memory_order_relaxed);
    } else {
        rc = CL_RID_APPLIED;
        res->op = e->op;
        res->status = 0;
        res->big = 0;
        res->len = 0;
        atomic_fetch_add_explicit(&w->st[S_APPLIED], 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void cl_rids_finish(cl_rids *w, cl_rid id, int effect, int32_t status, const uint8_t *p,
                    size_t n)
{
    uint32_t b;
    stripe *s = stripe_of(w, id, &b);
    pthread_mutex_lock(&s->mu);
    ent *e = find(s, b, id);
    if (e && e->state == E_RUN) {
        if (!effect && status) {
            unlink_ent(w, s, e);    /* nothing changed: a retry runs it afresh */
        } else {
            e->state = E_DONE;
            e->status = status;
            /* A payload that does not fit is not kept (a retry is told so);
             * a message is kept cut short. */
            e->big = !status && n > CL_RID_INLINE;
            e->len = e->big ? 0 : (uint32_t)(n > CL_RID_INLINE ? CL_RID_INLINE : n);
            if (e->len)
                memcpy(e->data, p, e->len);
        }
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

void cl_rids_learn(cl_rids *w, cl_rid id, uint16_t op)
{
    uint32_t b;
    stripe *s = stripe_of(w, id, &b);
    pthread_mutex_lock(&s->mu);
    ent *e = find(s, b, id);
    if (!e)
        (void)take(w, s, b, id, E_APPLIED, op);
    /* else: it ran here (a primary that lost the role mid-write hears its
     * own updates back only through a new primary; its entry stands). */
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(&w->st[S_LEARNED], 1, memory_order_relaxed);
}

void cl_rids_stats_get(cl_rids *w, cl_rids_stats *o)
{
    memset(o, 0, sizeof *o);
    if (!w)
        return;
    o->claims = atomic_load_explicit(&w->st[S_CLAIMS], memory_order_relaxed);
    o->retries_done = atomic_load_explicit(&w->st[S_DONE], memory_order_relaxed);
    o->retries_applied = atomic_load_explicit(&w->st[S_APPLIED], memory_order_relaxed);
    o->busy = atomic_load_explicit(&w->st[S_BUSY], memory_order_relaxed);
    o->learned = atomic_load_explicit(&w->st[S_LEARNED], memory_order_relaxed);
    o->evicted = atomic_load_explicit(&w->st[S_EVICTED], memory_order_relaxed);
}

/* ---- the current thread's write ------------------------------------------ */

static _Thread_local struct {
    int      set, effect;
    uint16_t op;
    cl_rid   id;
} tl_cur;

void cl_rid_set_current(const cl_rid *id, uint16_t op)
{
    tl_cur.set = id != NULL;
    tl_cur.effect = 0;
    tl_cur.op = op;
    if (id)
        tl_cur.id = *id;
}

int cl_rid_current(cl_rid *id, uint16_t *op)
{
    if (!tl_cur.set)
        return 0;
    *id = tl_cur.id;
    *op = tl_cur.op;
    return 1;
}

void cl_rid_note_effect(void)
{
    if (tl_cur.set)
        tl_cur.effect = 1;
}

int cl_rid_effect(void) { return tl_cur.effect; }
