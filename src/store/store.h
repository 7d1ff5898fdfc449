/* store.h - ember's store: the cache registry and the key-value operations.
 *
 * Fixed interface (proto/, wal/ and the embedded API in include/ember.h are
 * written against it).  Keys and values are data objects in Ignite's binary
 * format that the caller has already validated (binary/binary.h); the store
 * normalises keys itself (bin_key_prepare) and partitions them with Ignite's
 * rendezvous rule.  All functions are thread-safe.  Values are copied once
 * into the store and once out of it: reads append to a caller-supplied
 * em_buf, so a steady-state get allocates nothing (DESIGN rules 3 and 5).
 */
#ifndef EM_STORE_H
#define EM_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

typedef struct st_store st_store;
typedef struct st_cache st_cache;

/* Expiry durations in ms: -1 eternal, -2 unchanged (Ignite's thin-protocol
 * encoding), 0 = expire at once, > 0 = that many ms. */
typedef struct st_expiry {
    int64_t create_ms, update_ms, access_ms;
} st_expiry;

#define ST_EXPIRY_ETERNAL ((st_expiry){-1, -1, -1})

/* Cache configuration: every property a thin client can send (reference
 * §2.4), kept as sent, so GET_CONFIGURATION echoes it and the cluster
 * milestone can act on it.  Query entities and key configurations are kept as
 * the exact protocol bytes (encoded per protocol 1.2.0+). */
typedef struct st_cache_config {
    char    *name;                  /* required; owned (em_malloc'd) */
    int32_t  cache_mode;            /* 0 LOCAL, 1 REPLICATED, 2 PARTITIONED (default 2) */
    int32_t  atomicity_mode;        /* 0 TRANSACTIONAL, 1 ATOMIC (default 1) */
    int32_t  backups;               /* default 0 */
    int32_t  write_sync_mode;       /* 0 FULL_SYNC, 1 FULL_ASYNC, 2 PRIMARY_SYNC (default 2) */
    uint8_t  copy_on_read;          /* default 1 */
    uint8_t  read_from_backup;      /* default 1 */
    char    *data_region_name;      /* NULL = default region */
    uint8_t  onheap_cache_enabled;
    int32_t  query_parallelism;     /* default 1 */
    int32_t  query_detail_metrics_size;
    char    *sql_schema;
    int32_t  sql_index_inline_max_size;  /* default -1 */
    uint8_t  sql_escape_all;
    int32_t  max_query_iterators;   /* default 1024 */
    int32_t  rebalance_mode;        /* default 1 ASYNC */
    int64_t  rebalance_delay;
    int64_t  rebalance_timeout;     /* default 10000 */
    int32_t  rebalance_batch_size;  /* default 524288 */
    int64_t  rebalance_batches_prefetch_count;  /* default 2 */
    int32_t  rebalance_order;
    int64_t  rebalance_throttle;
    char    *group_name;
    int64_t  default_lock_timeout;
    int32_t  max_concurrent_async_ops;   /* default 500 */
    int32_t  partition_loss_policy;      /* ember default 2 READ_WRITE_SAFE (Ignite: 4 IGNORE) */
    uint8_t  eager_ttl;             /* default 1 */
    uint8_t  statistics_enabled;
    uint8_t  has_expiry;            /* property 407 present */
    st_expiry expiry;               /* cache-wide default expiry policy */
    uint32_t partitions;            /* RendezvousAffinityFunction partitions, default 1024 */
    uint8_t  eviction_enabled;      /* may entries be evicted when the region is full */
    uint8_t *key_configs;           /* raw property 401 bytes (count + pairs), owned */
    uint32_t key_configs_len;
    uint8_t *query_entities;        /* raw property 200 bytes (count + entities), owned */
    uint32_t query_entities_len;
} st_cache_config;

/* st_cache_config_init fills Ignite's defaults (no name). */
void st_cache_config_init(st_cache_config *c);
/* st_cache_config_copy deep-copies src into dst (dst uninitialised). */
int  st_cache_config_copy(st_cache_config *dst, const st_cache_config *src);
void st_cache_config_free(st_cache_config *c);

/* Data region: memory limit and eviction, as Ignite's DataRegionConfiguration. */
typedef struct st_region_config {
    const char *name;               /* "default" for the default region */
    uint64_t    max_bytes;          /* 0 = unlimited */
    uint8_t     eviction;           /* 1 = random-2-LRU eviction when full */
} st_region_config;

typedef struct st_options {
    st_region_config default_region;
} st_options;

int  st_open(st_store **out, const st_options *opt);

/* A data region with its persistence switch (Ignite's persistenceEnabled,
 * inverted so that zeroed specs keep st_open's behaviour): in_memory = 0
 * makes the region's updates be logged once a WAL is attached (wal_attach),
 * 1 keeps it memory-only (the WAL skips it, checkpoints leave it out). */
typedef struct st_region_spec {
    st_region_config cfg;
    uint8_t          in_memory;
} st_region_spec;

/* st_open_regions: st_open with the default region given by def (NULL =
 * unlimited, persistent) and n named regions besides it (Ignite's
 * dataRegionConfigurations).  A cache whose data_region_name is NULL or
 * "default" lives in the default region; any other name must be one of
 * these, else creating the cache fails with EM_CONFIG (Ignite refuses it:
 * "data region N is not configured").  Names are copied; an empty,
 * "default" or repeated name is EM_CONFIG. */
int  st_open_regions(st_store **out, const st_region_spec *def,
                     const st_region_spec *regions, size_t n);
void st_close(st_store *s);

/* Cache registry.  Cache id = Java hashCode of the name.  A st_cache pointer
 * stays valid until st_close; after a destroy, operations on it return
 * EM_NOCACHE. */
int       st_cache_create(st_store *s, const st_cache_config *cfg, st_cache **out); /* EM_CACHEEXISTS */
int       st_cache_get_or_create(st_store *s, const st_cache_config *cfg, st_cache **out);
st_cache *st_cache_find(st_store *s, int32_t cache_id);    /* NULL if none; allocates nothing */
int       st_cache_destroy(st_store *s, int32_t cache_id);  /* EM_NOCACHE if missing */
/* st_cache_names calls fn for each live cache (order unspecified). */
void      st_cache_each(st_store *s, void (*fn)(void *arg, st_cache *c), void *arg);
const st_cache_config *st_cache_cfg(const st_cache *c);
int32_t   st_cache_id(const st_cache *c);
/* The query entities (property 200: SQL's tables and their indexes) are the
 * one part of a configuration that changes after creation, as Ignite's
 * schema does with CREATE/DROP INDEX and ALTER TABLE.  st_cache_set_qe
 * replaces them (a copy of qe[0..len)) and tells the observer
 * (ST_UPD_CACHE_CONFIG with the whole new configuration: the WAL logs it,
 * so a restart comes back with it); EM_NOMEM, EM_NOCACHE, or the
 * observer's error (then nothing changed).  st_cache_cfg's query_entities
 * may change under a reader: read them through st_cache_cfg_copy (free it
 * with st_cache_config_free). */
int       st_cache_set_qe(st_cache *c, const uint8_t *qe, uint32_t len);
int       st_cache_cfg_copy(st_cache *c, st_cache_config *dst);

/* Per-operation options: NULL = the cache's defaults. */
typedef struct st_opctx {
    const st_expiry *expiry;        /* per-operation expiry policy, or NULL */
    em_buf *scratch;                /* for key normalisation; NULL = internal */
} st_opctx;

/* Batch prefetch (issue #22): a pipelined batch of single-key requests
 * spends most of its store time on dependent cache misses (the slot, then
 * the entry, then its value).  The caller prepares every key of the batch
 * (st_pf_key), then runs st_pf_slot over all of them, then st_pf_entry, and only then
 * executes the requests: each step issues
 * prefetches for the next one, so the misses of the whole batch overlap
 * instead of following each other.  Every step is only a hint: it changes
 * nothing, takes the partition's lock for what it reads (so it never reads
 * a freed table or entry), and a key it cannot prepare cheaply (anything
 * but int, long and ASCII strings) is skipped.  k[0..avail) is unvalidated
 * wire data: st_pf_key checks the bounds itself. */
typedef struct st_pf {
    uint32_t part, tag;
} st_pf;
int  st_pf_key(st_cache *c, const uint8_t *k, size_t avail, st_pf *pf);   /* 1 = prepared */
void st_pf_slot(st_cache *c, const st_pf *pf);
/* st_pf_entry prefetches the entry's header and key and the first
 * value_hint bytes of its value (the caller's guess, e.g. the size of the
 * last value it read; at most 1 KiB are prefetched). */
void st_pf_entry(st_cache *c, const st_pf *pf, size_t value_hint);

/* Key-value operations.  k/v are validated data objects (klen/vlen bytes).
 * Functions that return a previous value append it to `out` and set *found
 * (a null previous value appends nothing and sets *found = 0).  Return 0 or a
 * negative code (EM_NOCACHE, EM_MEMLIMIT, EM_NOMEM, ...). */
int st_put(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen);
int st_get(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, em_buf *out, int *found);
int st_contains(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, int *found);
int st_get_and_put(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, em_buf *out, int *found);
int st_get_and_replace(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, em_buf *out, int *found);
int st_get_and_remove(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, em_buf *out, int *found);
int st_put_if_absent(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, int *stored);
int st_get_and_put_if_absent(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, em_buf *out, int *found);
int st_replace(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, int *replaced);
int st_replace_if_equals(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *expect, size_t elen, const uint8_t *v, size_t vlen, int *replaced);
int st_remove(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, int *removed);
int st_remove_if_equals(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *expect, size_t elen, int *removed);
int st_clear(st_cache *c);          /* removes every entry (CLEAR / REMOVE_ALL) */
/* st_size: live entries among the copies the peek modes ask for (below). */
int st_size(st_cache *c, int peek_mode_mask, int64_t *size);
/* st_local_peek: like get, for the copies the peek modes ask for (a key
 * whose copy here is of another kind reads as absent); never touches access
 * expiry. */
int st_local_peek(st_cache *c, const st_opctx *o, int peek_mode_mask, const uint8_t *k,
                  size_t klen, em_buf *out, int *found);

/* Batch operations take arrays of (pointer, length) slices. */
typedef struct st_slice { const uint8_t *p; size_t len; } st_slice;
int st_put_all(st_cache *c, const st_opctx *o, const st_slice *keys, const st_slice *vals, size_t n);
int st_remove_keys(st_cache *c, const st_opctx *o, const st_slice *keys, size_t n);
int st_contains_all(st_cache *c, const st_opctx *o, const st_slice *keys, size_t n, int *all);
/* get_all calls fn(arg, key, klen, value, vlen) for each key present; value bytes
 * are valid only during the call (the partition is locked). */
typedef int (*st_kv_fn)(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen);
int st_get_all(st_cache *c, const st_opctx *o, const st_slice *keys, size_t n, st_kv_fn fn, void *arg);

/* Scan cursors: pages over all partitions (part < 0) or one partition.  Each
 * entry present for the whole scan is returned exactly once. */
typedef struct st_scan st_scan;
int  st_scan_open(st_cache *c, int32_t part, st_scan **out);
/* st_scan_next: the next entry (1), the end (0), or an error; the pointers
 * stay valid until the next call on sc (no copy: for a reader that takes
 * one entry at a time, e.g. SQL's full scans). */
int  st_scan_next(st_scan *sc, const uint8_t **k, uint32_t *kl, const uint8_t **v, uint32_t *vl);
/* st_scan_next_page emits up to max entries through fn; *more = 0 after the last. */
int  st_scan_next_page(st_scan *sc, uint32_t max, st_kv_fn fn, void *arg, int *more);
/* st_scan_next_page_exp: the same, also passing each entry's expiry deadline
 * (wall-clock ms as st_update.expire_at_ms, 0 = never), for checkpoints. */
typedef int (*st_kve_fn)(void *arg, const uint8_t *k, size_t klen, const uint8_t *v,
                         size_t vlen, int64_t expire_at_ms);
int  st_scan_next_page_exp(st_scan *sc, uint32_t max, st_kve_fn fn, void *arg, int *more);
void st_scan_close(st_scan *sc);
/* A partition's snapshot: every live entry, appended to snap as records of
 * u32 klen | u32 vlen | u64 expire_at (wall-clock ms, 0 = never) | key
 * (normalised) | value, little-endian.  st_part_snapshot takes it here
 * under the partition's lock; a scan opened with st_scan_open_via asks
 * fetch for each partition instead (a cluster scan takes each one from its
 * primary, wherever it is), and serves its pages from those bytes.  fetch
 * returns 0 or an error the page returns. */
typedef int (*st_snap_fn)(void *arg, st_cache *c, uint32_t part, em_buf *snap);
int  st_part_snapshot(st_cache *c, uint32_t part, em_buf *snap);
int  st_scan_open_via(st_cache *c, int32_t part, st_snap_fn fetch, void *arg, st_scan **out);

/* Statistics, readable per cache (lock-free reads of relaxed counters). */
typedef struct st_cache_stats {
    uint64_t entries, mem_bytes, evictions, expirations, puts, gets, hits, removals;
} st_cache_stats;
void st_cache_stats_get(st_cache *c, st_cache_stats *out);
typedef struct st_region_stats { uint64_t used_bytes, max_bytes, evictions; } st_region_stats;
void st_region_stats_get(st_store *s, const char *region, st_region_stats *out);

/* Write observer: called for every applied update, in partition order, before
 * the operation returns (the WAL hooks in here; later, replication).  The
 * encoding of the update is the one record type of DESIGN rule 9.  A nonzero
 * return fails the operation (a failed WAL write is never acknowledged). */
enum st_update_kind { ST_UPD_PUT = 1, ST_UPD_REMOVE = 2, ST_UPD_CLEAR = 3,
                      ST_UPD_CACHE_CREATE = 4, ST_UPD_CACHE_DESTROY = 5,
                      ST_UPD_TX = 6, ST_UPD_CACHE_CONFIG = 7,
                      /* reported once st_tx_commit is done with an ST_UPD_TX
                       * (applied or failed): nothing to log or apply, the
                       * end of what the observer may hold for that commit */
                      ST_UPD_TX_END = 8 };
typedef struct st_update {
    enum st_update_kind kind;
    int32_t cache_id;
    uint32_t partition;
    const uint8_t *key; uint32_t klen;     /* normalised key (PUT/REMOVE) */
    const uint8_t *val; uint32_t vlen;     /* stored value (PUT) */
    int64_t expire_at_ms;                  /* wall-clock ms, 0 = never */
    const st_cache_config *cfg;            /* CACHE_CREATE, CACHE_CONFIG (its
                                            * query entities are what changed) */
    /* cntr: the partition's update counter once this update is applied
     * (PUT/REMOVE/CLEAR of one partition).  The store sets it for the
     * observer; st_apply raises the partition's counter to it (0: advance
     * by one, as a live write would). */
    uint64_t cntr;
    const struct st_update *batch;         /* TX: the committed PUTs and REMOVEs, */
    uint32_t nbatch;                       /*   one unit (st_tx_commit) */
    /* in_tx: a PUT or REMOVE of a TX the observer was told of already,
     * told again one by one as each is applied, under its partition's lock
     * and with its counter: a log has it (in the TX record) and skips it,
     * replication streams it like any write. */
    uint8_t in_tx;
    /* evict: a REMOVE the store made for room (a region at its limit), in
     * any partition, whichever copy this node holds of it. */
    uint8_t evict;
} st_update;
typedef int (*st_observer_fn)(void *arg, const st_update *u);
void st_set_observer(st_store *s, st_observer_fn fn, void *arg);
/* st_apply applies a record replayed from the WAL (or, later, from a primary)
 * through the same code as live writes, without calling the observer. */
int st_apply(st_store *s, const st_update *u);

/* ---- additions (store helper) ------------------------------------------ */

/* Data regions: st_region_stats_get takes a region name (NULL = default);
 * an unknown name gives all zeros.  st_region_exists: 1 if configured.
 * st_cache_region: the name of the region the cache lives in;
 * st_cache_in_memory: nonzero if that region is not persistent;
 * st_region_in_memory: the same by region name (0 if unknown). */
int         st_region_exists(const st_store *s, const char *region);
const char *st_cache_region(const st_cache *c);
int         st_cache_in_memory(const st_cache *c);
int         st_region_in_memory(const st_store *s, const char *region);

/* st_expire_tick reclaims up to `budget` expired entries, visiting partitions
 * round-robin across calls and locking only those whose earliest deadline
 * has passed; the server calls it periodically (e.g. every 100 ms).  Expired
 * entries are invisible at once anyway; writes also reclaim a few per op.
 * Returns how many entries it reclaimed. */
int st_expire_tick(st_store *s, uint32_t budget);

/* st_apply_load applies an entry loaded from another owner (rebalancing):
 * a PUT only if its key is absent (a loaded entry never overwrites one the
 * live stream wrote since), or, with overwrite, whatever is there (a copy
 * catching up, which knows which keys the live stream wrote); a REMOVE
 * drops the key.  *done = 1 when it changed the copy.  Not reported to
 * the observer, and the partition's counter stays (see st_part_raise). */
int st_apply_load(st_store *s, const st_update *u, int overwrite, int *done);

/* st_clear_part empties one partition (notify_obs 0: without telling the
 * observer, as when a node drops a copy it no longer holds). */
int st_clear_part(st_cache *c, uint32_t pi, int notify_obs);

/* st_part_info: partition part's update counter and entry count (read
 * without its lock: a moment's values).  EM_RANGE for a partition out of
 * range, EM_NOCACHE after a destroy. */
int st_part_info(st_cache *c, uint32_t part, uint64_t *cntr, uint64_t *size);
/* st_part_raise raises partition part's update counter to cntr (a copy
 * loaded from another owner takes that owner's counter); never lowers it. */
int st_part_raise(st_cache *c, uint32_t part, uint64_t cntr);
/* st_part_set sets it, lower or higher (a copy that caught up with its
 * primary takes the primary's, even below what it had). */
int st_part_set(st_cache *c, uint32_t part, uint64_t cntr);
/* st_cache_parts: the cache's partition count. */
uint32_t st_cache_parts(const st_cache *c);

/* Entry-change hook (SQL's secondary indexes): fn hears of every change
 * to one of c's entries - a write, a removal, an expiry or eviction, a
 * cleared partition, a replayed or received update - with the old and the
 * new value (NULL: absent), under the entry's partition lock, after
 * everything that can fail the change has succeeded.  It must not call
 * into the store and cannot fail the change.  st_cache_set_hook(c, NULL,
 * NULL) returns only once no call of the old hook is running (it takes
 * every partition lock in turn), so the caller may then free its arg. */
typedef void (*st_hook_fn)(void *arg, const uint8_t *k, uint32_t klen, const uint8_t *oldv,
                           uint32_t oldlen, const uint8_t *newv, uint32_t newlen);
void st_cache_set_hook(st_cache *c, st_hook_fn fn, void *arg);
/* st_cache_each_locked calls fn for every live entry of c, one partition
 * at a time under its lock (so no hook call of that partition interleaves:
 * what fn sees and what the hook reports later form one history).  fn must
 * not call into the store; a nonzero return stops and is returned. */
int st_cache_each_locked(st_cache *c, st_kv_fn fn, void *arg);

/* st_cache_destroyed: nonzero once the cache was destroyed (its pointer stays
 * valid until st_close; every operation on it returns EM_NOCACHE). */
int st_cache_destroyed(const st_cache *c);

/* Peek modes (Ignite's CachePeekMode; reference §2.3): peek_mode_mask has
 * bit m set for mode m; 0 = ALL.  st_peek_parse turns a mask into the two
 * questions Ignite asks (GridCacheAdapter.parsePeekModes): which copies
 * (near, primary, backup) and which storage (on-heap, off-heap), each
 * defaulting to "all" when the mask names none of its modes.  A copy counts
 * when both its kind and its storage were asked for.  A single node holds
 * every partition as its primary copy, off the heap, and no near copies, so
 * there: ALL, PRIMARY, OFFHEAP (alone or with each other) count every
 * entry; NEAR, BACKUP, ONHEAP alone, or PRIMARY+ONHEAP, count none.  On a
 * cluster st_set_copy_fn says which partitions are primary, backup or not
 * held here, and the modes count by that. */
enum { ST_PEEK_ALL = 0, ST_PEEK_NEAR = 1, ST_PEEK_PRIMARY = 2, ST_PEEK_BACKUP = 3,
       ST_PEEK_ONHEAP = 4, ST_PEEK_OFFHEAP = 5 };
typedef struct st_peek {
    uint8_t near, primary, backup;  /* copy kinds asked for */
    uint8_t onheap, offheap;        /* storage asked for */
} st_peek;
void st_peek_parse(int peek_mode_mask, st_peek *pm);
/* The kinds of copy a node can hold of a partition (store_ops.c part_copy). */
enum { ST_COPY_NONE = 0, ST_COPY_PRIMARY = 1, ST_COPY_BACKUP = 2 };
/* st_set_copy_fn: on a cluster, who answers which copy of a partition this
 * node holds (cluster/cl_repl.c); NULL = every partition is primary here.
 * Peek modes (st_size, st_local_peek) count by its answer. */
typedef int (*st_copy_fn)(void *arg, const st_cache_config *cfg, int32_t cache_id,
                          uint32_t part);
void st_set_copy_fn(st_store *s, st_copy_fn fn, void *arg);
/* st_get_observer: the current write observer (NULL if none), for a module
 * that chains in front of it. */
void st_get_observer(st_store *s, st_observer_fn *fn, void **arg);
/* Read observer: a request's keyed operation looked at partition part of
 * cache c - a get, a contains, a write's test of what was there - and has
 * released the partition (called for every key of st_get, st_contains,
 * st_get_all, the writes and removes; not for a peek, a scan, a replayed
 * or loaded update).  On a cluster, replication holds the request's reply
 * until the writes it may have seen are on every owner (cl_repl.c).  NULL
 * (the default): nothing is called. */
typedef void (*st_seen_fn)(void *arg, st_cache *c, uint32_t part);
void st_set_seen_fn(st_store *s, st_seen_fn fn, void *arg);

/* ---- transactions: entry locks and atomic commits (store_lock.c) -------
 *
 * Entry locks exist for TRANSACTIONAL caches only: the transaction layer
 * (cluster/cl_tx) takes them, ATOMIC caches never touch the table.  A lock
 * is named by (cache id, normalised key bytes, the key's Java hash) and held
 * by an owner id (nonzero, unique per transaction).  Taking one never
 * blocks: a busy lock answers EM_LOCKED and the caller decides how to wait
 * (the thin-client server parks the request and retries it, so no worker
 * thread sleeps on a lock).
 *
 * deadline_ms (monotonic ms, em_now_ms; 0 = none) is the owner's timeout: a
 * lock whose owner's deadline has passed is taken over by the next asker,
 * as Ignite rolls back a timed-out transaction and frees its locks.  Before
 * committing, an owner pins its locks (st_entry_pin), so they cannot be
 * taken over while the commit runs. */
int  st_entry_lock(st_store *s, int32_t cache_id, int32_t hash, const uint8_t *k, size_t klen,
                   uint64_t owner, uint64_t deadline_ms, uint64_t *holder);
/* st_entry_pin: 0 if owner still holds the lock (now without deadline),
 * EM_TIMEOUT if it was taken over (or never held). */
int  st_entry_pin(st_store *s, int32_t cache_id, int32_t hash, const uint8_t *k, size_t klen,
                  uint64_t owner);
/* st_entry_unlock releases the lock if owner holds it (else nothing). */
void st_entry_unlock(st_store *s, int32_t cache_id, int32_t hash, const uint8_t *k, size_t klen,
                     uint64_t owner);
/* st_entry_locks_held: locks in the table now (tests, metrics). */
uint64_t st_entry_locks_held(st_store *s);

/* st_tx_commit applies n PUT/REMOVE updates (normalised keys, absolute
 * deadlines, as st_apply takes them) as one unit: the observer hears one
 * ST_UPD_TX update carrying all of them (the WAL writes it as one frame, so
 * recovery replays all or none), then each applied one marked in_tx (the
 * WAL skips those; replication streams them), then ST_UPD_TX_END.  The
 * caller holds the entry locks of every key (nothing else writes them
 * meanwhile).  A nonzero observer return applies nothing. */
int  st_tx_commit(st_store *s, const st_update *ups, uint32_t n);
/* The commit gate (see store_int.h): checkpoints take it exclusively while
 * they fix their WAL position. */
void st_commit_gate_lock(st_store *s);
void st_commit_gate_unlock(st_store *s);

/* Scan cursors copy one partition at a time (under its lock) into the
 * cursor, so a cache configured with one partition is copied whole. */

/* Record conventions for the observer / st_apply:
 *  - PUT carries the normalised key, the stored (normalised) value and the
 *    absolute deadline; a PUT whose deadline has passed replays as nothing.
 *  - REMOVE is also reported for evictions and for writes with expiry
 *    duration 0 (so replay never resurrects them); lazy expiry of an entry is
 *    not reported (its PUT record carries the deadline).
 *  - CLEAR is reported once per non-empty partition, under that partition's
 *    lock; st_apply accepts partition = UINT32_MAX for "every partition".
 *  - CACHE_CREATE carries the full configuration; CACHE_DESTROY the id.
 *  - Writes racing a destroy may be reported after its CACHE_DESTROY (they
 *    hit partitions the destroy had not reached yet); replay gets
 *    EM_NOCACHE for them and should skip them.
 *  - The observer runs under the partition's lock (that is what orders the
 *    records of a partition): it should append and return; waiting for
 *    fsync there makes readers of that partition wait too (DESIGN §5).
 *  - A deadline moved by an access-expiry read is not reported.
 *  - st_set_observer may be called while operations run (the hook is read
 *    atomically); operations already past the check may still report to
 *    the previous hook. */

#endif
