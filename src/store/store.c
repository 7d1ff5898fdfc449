/* store.c - the store's frame: open/close, cache configuration, the cache
 * registry (int cache id -> cache, read lock-free), statistics, the write
 * observer, WAL replay (st_apply) and the expiry tick.  Entry-level operations
 * live in store_ops.c, scan cursors in store_scan.c; structures in
 * store_int.h.
 */
#include "store/store_int.h"

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "util/clock.h"

#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

st_cache st_tomb_;

/* ---- partition lock (store_int.h) ------------------------------------- */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

void st_lock_wait(st_lock *l)
{
    /* Brief spin first: holders keep the lock for one entry update. */
    for (int i = 0; i < 64; i++) {
        uint32_t z = 0;
        if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->v, &z, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        futex(&l->v, FUTEX_WAIT_PRIVATE, 2);
}

void st_lock_wake(st_lock *l)
{
    atomic_store_explicit(&l->v, 0, memory_order_release);
    futex(&l->v, FUTEX_WAKE_PRIVATE, 1);
}

/* ---- configuration ---------------------------------------------------- */

void st_cache_config_init(st_cache_config *c)
{
    memset(c, 0, sizeof *c);
    c->cache_mode = 2;
    c->atomicity_mode = 1;
    c->backups = 0;
    c->write_sync_mode = 2;
    c->copy_on_read = 1;
    c->read_from_backup = 1;
    c->query_parallelism = 1;
    c->sql_index_inline_max_size = -1;
    c->max_query_iterators = 1024;
    c->rebalance_mode = 1;
    c->rebalance_timeout = 10000;
    c->rebalance_batch_size = 524288;
    c->rebalance_batches_prefetch_count = 2;
    c->max_concurrent_async_ops = 500;
    c->partition_loss_policy = 2;     /* READ_WRITE_SAFE (Ignite: IGNORE), see docs/operations.md */
    c->eager_ttl = 1;
    c->expiry = ST_EXPIRY_ETERNAL;
    c->partitions = 1024;
    /* The region decides whether anything is evicted (Ignite's page eviction
     * is a region property); a cache may opt out by clearing this. */
    c->eviction_enabled = 1;
}

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return 0;
    *dst = em_strndup(src, strlen(src));
    return *dst ? 0 : EM_NOMEM;
}

static int dup_bytes(uint8_t **dst, const uint8_t *src, uint32_t n)
{
    *dst = NULL;
    if (!src || !n)
        return 0;
    *dst = em_memdup(src, n);
    return *dst ? 0 : EM_NOMEM;
}

int st_cache_config_copy(st_cache_config *dst, const st_cache_config *src)
{
    *dst = *src;
    dst->name = dst->data_region_name = dst->sql_schema = dst->group_name = NULL;
    dst->key_configs = dst->query_entities = NULL;
    if (dup_str(&dst->name, src->name) || dup_str(&dst->data_region_name, src->data_region_name) ||
        dup_str(&dst->sql_schema, src->sql_schema) || dup_str(&dst->group_name, src->group_name) ||
        dup_bytes(&dst->key_configs, src->key_configs, src->key_configs_len) ||
        dup_bytes(&dst->query_entities, src->query_entities, src->query_entities_len)) {
        st_cache_config_free(dst);
        return EM_NOMEM;
    }
    if (!dst->key_configs)
        dst->key_configs_len = 0;
    if (!dst->query_entities)
        dst->query_entities_len = 0;
    return 0;
}

void st_cache_config_free(st_cache_config *c)
{
    em_free(c->name);
    em_free(c->data_region_name);
    em_free(c->sql_schema);
    em_free(c->group_name);
    em_free(c->key_configs);
    em_free(c->query_entities);
    c->name = c->data_region_name = c->sql_schema = c->group_name = NULL;
    c->key_configs = c->query_entities = NULL;
    c->key_configs_len = c->query_entities_len = 0;
}

/* ---- open / close ----------------------------------------------------- */

static st_regtab *regtab_new(uint32_t cap)
{
    st_regtab *t = em_calloc(1, sizeof *t + cap * sizeof(t->slot[0]));
    if (t)
        t->mask = cap - 1;
    return t;
}

static void region_set(st_region *r, const st_region_spec *rs)
{
    r->max_bytes = rs->cfg.max_bytes;
    r->eviction = rs->cfg.eviction;
    r->in_memory = rs->in_memory;
}

static void regions_free(st_store *s)
{
    for (size_t i = 0; i < s->nregions; i++)
        em_free(s->regions[i].name);
    em_free(s->regions);
    em_free(s->region.name);
}

/* regions_copy: the named regions of opt; EM_CONFIG for a missing, empty,
 * "default" or repeated name. */
static int regions_copy(st_store *s, const st_region_spec *regions, size_t nr)
{
    if (!nr)
        return 0;
    if (!regions)
        return EM_INVAL;
    s->regions = em_calloc(nr, sizeof *s->regions);
    if (!s->regions)
        return EM_NOMEM;
    for (size_t i = 0; i < nr; i++) {
        const char *n = regions[i].cfg.name;
        if (!n || !n[0] || !strcmp(n, "default"))
            return EM_CONFIG;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->regions[j].name, n))
                return EM_CONFIG;
        if (!(s->regions[i].name = em_strndup(n, strlen(n))))
            return EM_NOMEM;
        s->nregions = i + 1;
        region_set(&s->regions[i], &regions[i]);
    }
    return 0;
}

int st_open(st_store **out, const st_options *opt)
{
    st_region_spec def = {.cfg = {.name = "default"}};
    if (opt)
        def.cfg = opt->default_region;
    return st_open_regions(out, &def, NULL, 0);
}

int st_open_regions(st_store **out, const st_region_spec *def,
                    const st_region_spec *regions, size_t nr)
{
    *out = NULL;
    st_store *s = em_calloc(1, sizeof *s);
    if (!s)
        return EM_NOMEM;
    st_regtab *t = regtab_new(16);
    s->region.name = em_strndup("default", 7);
    int rc = !t || !s->region.name ? EM_NOMEM : 0;
    if (!rc && def)
        region_set(&s->region, def);
    if (!rc)
        rc = regions_copy(s, regions, nr);
    if (rc) {
        em_free(t);
        regions_free(s);
        em_free(s);
        return rc;
    }
    if (st_locks_new(s)) {
        em_free(t);
        regions_free(s);
        em_free(s);
        return EM_NOMEM;
    }
    atomic_init(&s->reg, t);
    pthread_mutex_init(&s->reg_lock, NULL);
    pthread_rwlock_init(&s->commit_gate, NULL);
    *out = s;
    return 0;
}

/* find_region: NULL or "default" = the default region; NULL if unknown. */
static st_region *find_region(const st_store *s, const char *name)
{
    if (!name || !strcmp(name, "default"))
        return (st_region *)(uintptr_t)&s->region;
    for (size_t i = 0; i < s->nregions; i++)
        if (!strcmp(s->regions[i].name, name))
            return &s->regions[i];
    return NULL;
}

int st_region_exists(const st_store *s, const char *region)
{
    return find_region(s, region) != NULL;
}

const char *st_cache_region(const st_cache *c) { return c->region->name; }
int st_cache_in_memory(const st_cache *c) { return c->region->in_memory; }

int st_region_in_memory(const st_store *s, const char *region)
{
    const st_region *r = find_region(s, region);
    return r ? r->in_memory : 0;
}

/* Frees c; its partitions' contents too if c still owns its array (a
 * destroyed cache's were emptied, and the array may be another's now).
 * Arrays themselves are freed by st_close. */
static void cache_free(st_cache *c)
{
    if (c->arr && c->arr->owner == c) {
        for (uint32_t i = 0; i < c->nparts; i++) {
            st_part *p = &c->parts[i];
            st_part_free_all(c, p);
            em_free(p->slots);
            em_free(p->heap);
        }
    }
    st_cache_config_free(&c->cfg);
    pthread_mutex_destroy(&c->cfg_mu);
    em_free(c);
}

void st_close(st_store *s)
{
    if (!s)
        return;
    st_cache *c = s->all;
    while (c) {
        st_cache *n = c->next_all;
        cache_free(c);
        c = n;
    }
    st_parr *a = s->arrays;
    while (a) {
        st_parr *n = a->next;
        em_free(a->mem);
        em_free(a);
        a = n;
    }
    st_regtab *t = atomic_load(&s->reg);
    while (t) {
        st_regtab *o = t->older;
        em_free(t);
        t = o;
    }
    pthread_mutex_destroy(&s->reg_lock);
    pthread_rwlock_destroy(&s->commit_gate);
    st_locks_free(s);
    regions_free(s);
    em_free(s);
}

/* ---- registry --------------------------------------------------------- */

static inline uint32_t id_slot(int32_t id, uint32_t mask)
{
    return (uint32_t)em_mix64((uint32_t)id) & mask;
}

st_cache *st_cache_find(st_store *s, int32_t cache_id)
{
    st_regtab *t = atomic_load_explicit(&s->reg, memory_order_acquire);
    for (uint32_t i = id_slot(cache_id, t->mask), n = 0; n <= t->mask; i = (i + 1) & t->mask, n++) {
        st_cache *c = atomic_load_explicit(&t->slot[i], memory_order_acquire);
        if (!c)
            return NULL;
        if (c != ST_TOMB && c->id == cache_id)
            return c;
    }
    return NULL;
}

/* Under reg_lock: make room for one more cache, growing (and dropping
 * tombstones) when the table would pass half full. */
static int reg_reserve(st_store *s)
{
    st_regtab *t = atomic_load_explicit(&s->reg, memory_order_relaxed);
    if ((t->used + 1) * 2 > t->mask + 1) {
        uint32_t cap = (t->mask + 1);
        if ((s->ncaches + 1) * 4 > cap)
            cap *= 2;
        st_regtab *nt = regtab_new(cap);
        if (!nt)
            return EM_NOMEM;
        for (uint32_t i = 0; i <= t->mask; i++) {
            st_cache *o = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
            if (!o || o == ST_TOMB)
                continue;
            uint32_t j = id_slot(o->id, nt->mask);
            while (atomic_load_explicit(&nt->slot[j], memory_order_relaxed))
                j = (j + 1) & nt->mask;
            atomic_store_explicit(&nt->slot[j], o, memory_order_relaxed);
            nt->used++;
        }
        nt->older = t;
        atomic_store_explicit(&s->reg, nt, memory_order_release);
    }
    return 0;
}

/* Under reg_lock, after reg_reserve: publish c. */
static void reg_insert(st_store *s, st_cache *c)
{
    st_regtab *t = atomic_load_explicit(&s->reg, memory_order_relaxed);
    uint32_t j = id_slot(c->id, t->mask);
    for (;;) {
        st_cache *o = atomic_load_explicit(&t->slot[j], memory_order_relaxed);
        if (!o)
            break;
        j = (j + 1) & t->mask;
    }
    atomic_store_explicit(&t->slot[j], c, memory_order_release);
    t->used++;
    s->ncaches++;
}

static void reg_remove(st_store *s, st_cache *c)
{
    st_regtab *t = atomic_load_explicit(&s->reg, memory_order_relaxed);
    for (uint32_t i = id_slot(c->id, t->mask);; i = (i + 1) & t->mask) {
        st_cache *o = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
        if (!o)
            return;
        if (o == c) {
            atomic_store_explicit(&t->slot[i], ST_TOMB, memory_order_release);
            s->ncaches--;
            return;
        }
    }
}

static int notify(st_store *s, const st_update *u)
{
    return st_observe(s, u);
}

/* Under reg_lock: a free array of np partitions, or a new one (NULL if out
 * of memory).  The caller claims it with parr_claim. */
static st_parr *parr_get(st_store *s, uint32_t np)
{
    for (st_parr *a = s->arrays; a; a = a->next)
        if (!a->owner && a->nparts == np)
            return a;
    st_parr *a = em_calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->mem = em_calloc(1, np * sizeof(st_part) + 64);
    if (!a->mem) {
        em_free(a);
        return NULL;
    }
    a->parts = (st_part *)(((uintptr_t)a->mem + 63) & ~(uintptr_t)63);
    a->nparts = np;
    a->next = s->arrays;
    s->arrays = a;
    return a;
}

/* Under reg_lock: hand a's (empty) partitions to c.  Each one changes hands
 * under its lock, so a thread in an op on the previous owner (through an
 * old pointer) sees a gen that is not its cache's either way. */
static void parr_claim(st_parr *a, st_cache *c)
{
    a->owner = c;
    c->arr = a;
    c->parts = a->parts;
    for (uint32_t i = 0; i < a->nparts; i++) {
        st_part *p = &a->parts[i];
        st_lock_acquire(&p->lock);
        atomic_store_explicit(&p->puts, 0, memory_order_relaxed);
        atomic_store_explicit(&p->gets, 0, memory_order_relaxed);
        atomic_store_explicit(&p->hits, 0, memory_order_relaxed);
        atomic_store_explicit(&p->next_expire, 0, memory_order_relaxed);
        atomic_store_explicit(&p->st.entries, 0, memory_order_relaxed);
        atomic_store_explicit(&p->st.mem, 0, memory_order_relaxed);
        atomic_store_explicit(&p->st.evictions, 0, memory_order_relaxed);
        atomic_store_explicit(&p->st.expirations, 0, memory_order_relaxed);
        atomic_store_explicit(&p->st.removals, 0, memory_order_relaxed);
        p->gen = c->gen;
        st_lock_release(&p->lock);
    }
}

/* Empties c's partitions and marks them dead for c (each under its lock);
 * then, under reg_lock, frees the array for the next cache. */
static void parr_release(st_store *s, st_cache *c)
{
    for (uint32_t i = 0; i < c->nparts; i++) {
        st_part *p = &c->parts[i];
        st_lock_acquire(&p->lock);
        st_part_free_all(c, p);
        em_free(p->slots);
        em_free(p->heap);
        p->slots = NULL;
        p->heap = NULL;
        p->mask = p->count = p->heap_n = p->heap_cap = 0;
        p->gen = 0;
        st_lock_release(&p->lock);
    }
    pthread_mutex_lock(&s->reg_lock);
    c->arr->owner = NULL;
    pthread_mutex_unlock(&s->reg_lock);
}

/* Under reg_lock. */
static int cache_new(st_store *s, const st_cache_config *cfg, st_cache **out)
{
    uint32_t np = cfg->partitions ? cfg->partitions : 1024;
    if (!cfg->name || np > 65000)
        return EM_INVAL;
    /* Ignite refuses a cache whose region is not configured. */
    st_region *r = find_region(s, cfg->data_region_name);
    if (!r)
        return EM_CONFIG;
    st_cache *c = em_calloc(1, sizeof *c);
    if (!c)
        return EM_NOMEM;
    st_parr *a = parr_get(s, np);
    if (!a || st_cache_config_copy(&c->cfg, cfg)) {
        em_free(c);
        return EM_NOMEM;
    }
    pthread_mutex_init(&c->cfg_mu, NULL);
    /* 0 is never a gen (p->gen = 0 means dead); 2^32 creates would have to
     * pass while a thread holds an old pointer for a gen to repeat. */
    if (++s->next_gen == 0)
        s->next_gen = 1;
    c->gen = s->next_gen;
    c->cfg.partitions = np;
    c->store = s;
    c->id = em_hash_java_str((const uint8_t *)cfg->name, strlen(cfg->name));
    c->nparts = np;
    c->region = r;
    c->evictable = r->eviction && cfg->eviction_enabled;
    c->has_expiry = cfg->has_expiry;
    parr_claim(a, c);
    *out = c;
    return 0;
}

/* Under reg_lock: frees a cache that was never published. */
static void cache_unmake(st_cache *c)
{
    for (uint32_t i = 0; i < c->nparts; i++) {
        st_part *p = &c->parts[i];  /* empty; old owners' threads may lock it */
        st_lock_acquire(&p->lock);
        p->gen = 0;
        st_lock_release(&p->lock);
    }
    c->arr->owner = NULL;
    cache_free(c);
}

static int create_locked(st_store *s, const st_cache_config *cfg, st_cache **out, int observe)
{
    st_cache *c;
    int rc = cache_new(s, cfg, &c);
    if (rc)
        return rc;
    /* Everything that can fail happens before the observer hears of the
     * cache, so a logged CACHE_CREATE always names a cache that exists. */
    rc = reg_reserve(s);
    if (!rc && observe) {
        st_update u = {.kind = ST_UPD_CACHE_CREATE, .cache_id = c->id, .cfg = &c->cfg};
        rc = notify(s, &u);
    }
    if (rc) {
        cache_unmake(c);
        return rc;
    }
    reg_insert(s, c);
    c->next_all = s->all;
    s->all = c;
    if (out)
        *out = c;
    return 0;
}

static int cache_create(st_store *s, const st_cache_config *cfg, st_cache **out,
                        int or_get, int observe)
{
    if (!cfg || !cfg->name)
        return EM_INVAL;
    int32_t id = em_hash_java_str((const uint8_t *)cfg->name, strlen(cfg->name));
    pthread_mutex_lock(&s->reg_lock);
    st_cache *c = st_cache_find(s, id);
    int rc;
    if (c) {
        rc = or_get ? 0 : EM_CACHEEXISTS;
        if (out && or_get)
            *out = c;
    } else {
        rc = create_locked(s, cfg, out, observe);
    }
    pthread_mutex_unlock(&s->reg_lock);
    return rc;
}

int st_cache_create(st_store *s, const st_cache_config *cfg, st_cache **out)
{
    return cache_create(s, cfg, out, 0, 1);
}

int st_cache_get_or_create(st_store *s, const st_cache_config *cfg, st_cache **out)
{
    return cache_create(s, cfg, out, 1, 1);
}

static int cache_destroy(st_store *s, int32_t cache_id, int observe)
{
    pthread_mutex_lock(&s->reg_lock);
    st_cache *c = st_cache_find(s, cache_id);
    if (!c) {
        pthread_mutex_unlock(&s->reg_lock);
        return EM_NOCACHE;
    }
    if (observe) {
        st_update u = {.kind = ST_UPD_CACHE_DESTROY, .cache_id = cache_id};
        int rc = notify(s, &u);
        if (rc) {
            pthread_mutex_unlock(&s->reg_lock);
            return rc;
        }
    }
    reg_remove(s, c);
    atomic_store(&c->destroyed, 1);
    pthread_mutex_unlock(&s->reg_lock);
    /* Threads inside an operation on c hold (or wait for) one partition
     * lock; each partition is emptied and marked dead under its lock, so
     * they either finish before or see it dead after.  The cache struct
     * stays allocated until st_close (old pointers stay valid); its
     * partition array goes to the next cache of the same size. */
    parr_release(s, c);
    return 0;
}

int st_cache_destroy(st_store *s, int32_t cache_id)
{
    return cache_destroy(s, cache_id, 1);
}

void st_cache_each(st_store *s, void (*fn)(void *arg, st_cache *c), void *arg)
{
    pthread_mutex_lock(&s->reg_lock);
    st_regtab *t = atomic_load_explicit(&s->reg, memory_order_relaxed);
    for (uint32_t i = 0; i <= t->mask; i++) {
        st_cache *c = atomic_load_explicit(&t->slot[i], memory_order_relaxed);
        if (c && c != ST_TOMB)
            fn(arg, c);
    }
    pthread_mutex_unlock(&s->reg_lock);
}

const st_cache_config *st_cache_cfg(const st_cache *c) { return &c->cfg; }

/* set_qe swaps c's query entities for a copy of qe; observe: tell the
 * observer first (a live change; recovery applies without). */
static int set_qe(st_cache *c, const uint8_t *qe, uint32_t len, int observe)
{
    uint8_t *n = NULL;
    if (len && !(n = em_memdup(qe, len)))
        return EM_NOMEM;
    pthread_mutex_lock(&c->cfg_mu);
    int rc = st_cache_destroyed(c) ? EM_NOCACHE : 0;
    if (!rc && observe) {
        st_cache_config cfg = c->cfg;
        cfg.query_entities = n;
        cfg.query_entities_len = n ? len : 0;
        st_update u = {.kind = ST_UPD_CACHE_CONFIG, .cache_id = c->id, .cfg = &cfg};
        rc = notify(c->store, &u);
    }
    if (!rc) {
        uint8_t *old = c->cfg.query_entities;
        c->cfg.query_entities = n;
        c->cfg.query_entities_len = n ? len : 0;
        n = old;
    }
    pthread_mutex_unlock(&c->cfg_mu);
    em_free(n);
    return rc;
}

int st_cache_set_qe(st_cache *c, const uint8_t *qe, uint32_t len)
{
    return set_qe(c, qe, len, 1);
}

int st_cache_cfg_copy(st_cache *c, st_cache_config *dst)
{
    pthread_mutex_lock(&c->cfg_mu);
    int rc = st_cache_config_copy(dst, &c->cfg);
    pthread_mutex_unlock(&c->cfg_mu);
    return rc;
}
int32_t st_cache_id(const st_cache *c) { return c->id; }
int st_cache_destroyed(const st_cache *c) { return atomic_load(&c->destroyed); }

/* ---- statistics ------------------------------------------------------- */

#define RD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void st_cache_stats_get(st_cache *c, st_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (atomic_load(&c->destroyed))
        return;                     /* its array may be another cache's now */
    for (uint32_t i = 0; i < c->nparts; i++) {
        st_part *p = &c->parts[i];
        out->entries += RD(p->st.entries);
        out->mem_bytes += RD(p->st.mem);
        out->evictions += RD(p->st.evictions);
        out->expirations += RD(p->st.expirations);
        out->removals += RD(p->st.removals);
        out->puts += RD(p->puts);
        out->gets += RD(p->gets);
        out->hits += RD(p->hits);
    }
}

typedef struct mem_sum { const st_region *r; uint64_t bytes; } mem_sum;

static void sum_mem(void *arg, st_cache *c)
{
    mem_sum *m = arg;
    if (c->region != m->r)
        return;
    for (uint32_t i = 0; i < c->nparts; i++)
        m->bytes += RD(c->parts[i].st.mem);
}

void st_region_stats_get(st_store *s, const char *region, st_region_stats *out)
{
    memset(out, 0, sizeof *out);
    const st_region *r = find_region(s, region);
    if (!r)
        return;
    out->max_bytes = r->max_bytes;
    out->evictions = RD(r->evictions);
    if (r->max_bytes) {
        out->used_bytes = RD(r->used);
    } else {
        mem_sum m = {r, 0};
        st_cache_each(s, sum_mem, &m);
        out->used_bytes = m.bytes;
    }
}

/* ---- observer, replay ------------------------------------------------- */

/* SET_HOOK installs one of the store's callbacks: cleared, its argument,
 * then the function (release), so a caller that loads the function
 * (acquire) finds its argument; under reg_lock, against another setter. */
#define SET_HOOK(s, fnf, argf, fn, arg) do {                               \
        pthread_mutex_lock(&(s)->reg_lock);                                \
        atomic_store_explicit(&(s)->fnf, NULL, memory_order_release);      \
        atomic_store_explicit(&(s)->argf, (arg), memory_order_relaxed);    \
        atomic_store_explicit(&(s)->fnf, (fn), memory_order_release);      \
        pthread_mutex_unlock(&(s)->reg_lock);                              \
    } while (0)

void st_set_observer(st_store *s, st_observer_fn fn, void *arg)
{
    SET_HOOK(s, obs, obs_arg, fn, arg);
}

void st_get_observer(st_store *s, st_observer_fn *fn, void **arg)
{
    pthread_mutex_lock(&s->reg_lock);
    *fn = atomic_load_explicit(&s->obs, memory_order_acquire);
    *arg = atomic_load_explicit(&s->obs_arg, memory_order_relaxed);
    pthread_mutex_unlock(&s->reg_lock);
}

void st_set_seen_fn(st_store *s, st_seen_fn fn, void *arg)
{
    SET_HOOK(s, seen_fn, seen_arg, fn, arg);
}

void st_set_copy_fn(st_store *s, st_copy_fn fn, void *arg)
{
    SET_HOOK(s, copy_fn, copy_arg, fn, arg);
}

int st_apply(st_store *s, const st_update *u)
{
    st_cache *c;
    switch (u->kind) {
    case ST_UPD_CACHE_CREATE:
        if (!u->cfg)
            return EM_INVAL;
        return cache_create(s, u->cfg, NULL, 0, 0);
    case ST_UPD_CACHE_DESTROY:
        return cache_destroy(s, u->cache_id, 0);
    case ST_UPD_CACHE_CONFIG:
        if (!u->cfg)
            return EM_INVAL;
        if (!(c = st_cache_find(s, u->cache_id)))
            return EM_NOCACHE;
        return set_qe(c, u->cfg->query_entities, u->cfg->query_entities_len, 0);
    case ST_UPD_TX_END:
        return 0;
    case ST_UPD_TX:
        for (uint32_t i = 0; i < u->nbatch; i++) {
            int rc = st_apply(s, &u->batch[i]);
            if (rc && rc != EM_NOCACHE)
                return rc;
        }
        return 0;
    case ST_UPD_PUT:
    case ST_UPD_REMOVE:
    case ST_UPD_CLEAR:
        c = st_cache_find(s, u->cache_id);
        if (!c)
            return EM_NOCACHE;
        if (u->kind == ST_UPD_PUT)
            return st_apply_put(c, u);
        if (u->kind == ST_UPD_REMOVE)
            return st_apply_remove(c, u);
        if (u->partition == UINT32_MAX) {
            for (uint32_t i = 0; i < c->nparts; i++) {
                int rc = st_clear_part(c, i, 0);
                if (rc)
                    return rc;
            }
            return 0;
        }
        if (u->partition >= c->nparts)
            return EM_RANGE;
        return st_clear_part(c, u->partition, 0);
    }
    return EM_INVAL;
}

/* ---- expiry tick ------------------------------------------------------ */

/* A tick looks at up to 64 caches, starting where the last one stopped. */
struct tick_ctx { st_cache *list[64]; uint32_t n, skip, seen; };

static void collect(void *arg, st_cache *c)
{
    struct tick_ctx *t = arg;
    if (t->seen++ >= t->skip && t->n < 64)
        t->list[t->n++] = c;
}

int st_expire_tick(st_store *s, uint32_t budget)
{
    int64_t now = em_wall_ms();
    struct tick_ctx t = {.n = 0};
    t.skip = atomic_load_explicit(&s->tick_cache, memory_order_relaxed);
    st_cache_each(s, collect, &t);
    if (!t.n && t.skip) {           /* past the end: start over */
        t.skip = t.seen = 0;
        st_cache_each(s, collect, &t);
    }
    if (!t.n)
        return 0;
    /* Visit partitions round-robin across calls; only partitions whose
     * heap top is due are locked (the hint is read without the lock). */
    uint32_t ci = 0, base = t.skip;
    uint32_t pi = atomic_load_explicit(&s->tick_part, memory_order_relaxed);
    int reclaimed = 0;
    uint32_t visits = 0, max_visits = 0;
    for (uint32_t i = 0; i < t.n; i++)
        max_visits += t.list[i]->nparts;
    while (budget && visits < max_visits) {
        st_cache *c = t.list[ci];
        if (pi >= c->nparts) {
            pi = 0;
            if (++ci == t.n) {
                if (base || t.n == 64) {    /* window done: the next call moves on */
                    base += t.n;
                    ci = 0;
                    break;
                }
                ci = 0;                     /* every cache fits: wrap around */
            }
            continue;
        }
        st_part *p = &c->parts[pi];
        int64_t ne = atomic_load_explicit(&p->next_expire, memory_order_relaxed);
        if (ne && ne <= now) {
            st_lock_acquire(&p->lock);
            int r = st_part_dead(c, p) ? 0 : st_part_purge_expired(c, p, now, budget);
            st_lock_release(&p->lock);
            reclaimed += r;
            budget = (uint32_t)r >= budget ? 0 : budget - (uint32_t)r;
        }
        pi++;
        visits++;
    }
    /* Resume where this call stopped (registry order; only a hint). */
    atomic_store_explicit(&s->tick_cache, base + ci, memory_order_relaxed);
    atomic_store_explicit(&s->tick_part, pi, memory_order_relaxed);
    return reclaimed;
}
