/* store_api.c - section 3 of include/ember.h (node and caches): thin public
 * wrappers over store.h.  Keys and values from the embedding program are
 * validated here (bin_validate) before they reach the store, as proto/ does
 * for wire data; ember_buf is layout-compatible with em_buf so reads append
 * straight into the caller's buffer (one copy, no allocation when it has
 * room).
 */
#include "ember.h"

#include "binary/binary.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(ember_buf) == sizeof(em_buf) &&
               offsetof(ember_buf, data) == offsetof(em_buf, p) &&
               offsetof(ember_buf, len) == offsetof(em_buf, len) &&
               offsetof(ember_buf, cap) == offsetof(em_buf, cap),
               "ember_buf must mirror em_buf");
_Static_assert((int)EMBER_ENOMEM == (int)EM_NOMEM && (int)EMBER_EINVAL == (int)EM_INVAL &&
               (int)EMBER_ENOCACHE == (int)EM_NOCACHE &&
               (int)EMBER_ECACHEEXISTS == (int)EM_CACHEEXISTS &&
               (int)EMBER_EMEMLIMIT == (int)EM_MEMLIMIT, "public codes mirror err.h");

#define ST(n) ((st_store *)(void *)(n))
#define CA(c) ((st_cache *)(void *)(c))
#define EB(b) ((em_buf *)(void *)(b))

void ember_buf_free(ember_buf *b) { em_buf_free(EB(b)); }

/* One complete data object, nothing after it. */
static inline int valid(const void *p, size_t n)
{
    /* the common key, an int, is exactly its 5 bytes (bin_validate's
     * first case) without the call */
    if (n == 5 && ((const uint8_t *)p)[0] == BIN_INT)
        return 0;
    size_t len;
    int rc = bin_validate(p, n, &len, 0);
    if (rc)
        return rc;
    return len == n ? 0 : EM_TRAILING;
}

static int valid2(const void *a, size_t an, const void *b, size_t bn)
{
    int rc = valid(a, an);
    return rc ? rc : valid(b, bn);
}

int ember_node_open(ember_node **out, const ember_node_config *cfg)
{
    st_options o = {{"default", cfg ? cfg->max_memory : 0, (uint8_t)(cfg ? cfg->eviction != 0 : 0)}};
    st_store *s;
    int rc = st_open(&s, &o);
    *out = rc ? NULL : (ember_node *)(void *)s;
    return rc;
}

void ember_node_close(ember_node *n) { st_close(ST(n)); }

static int create(ember_node *n, const char *name, const ember_cache_options *opt,
                  ember_cache **out, int or_get)
{
    if (!name || !*name)
        return EM_INVAL;
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;     /* copied by the store */
    if (opt) {
        if (opt->partitions)
            cfg.partitions = opt->partitions;
        cfg.eviction_enabled = !opt->no_eviction;
        if (opt->expiry) {
            cfg.has_expiry = 1;
            cfg.expiry = (st_expiry){opt->expiry->create_ms, opt->expiry->update_ms,
                                     opt->expiry->access_ms};
        }
    }
    st_cache *c = NULL;
    int rc = or_get ? st_cache_get_or_create(ST(n), &cfg, &c) : st_cache_create(ST(n), &cfg, &c);
    if (out)
        *out = rc ? NULL : (ember_cache *)(void *)c;
    return rc;
}

int ember_cache_create(ember_node *n, const char *name, const ember_cache_options *opt,
                       ember_cache **out)
{
    return create(n, name, opt, out, 0);
}

int ember_cache_get_or_create(ember_node *n, const char *name, const ember_cache_options *opt,
                              ember_cache **out)
{
    return create(n, name, opt, out, 1);
}

static int32_t cache_id(const char *name)
{
    return em_hash_java_str((const uint8_t *)name, strlen(name));
}

ember_cache *ember_cache_get(ember_node *n, const char *name)
{
    st_cache *c = name ? st_cache_find(ST(n), cache_id(name)) : NULL;
    if (c && strcmp(st_cache_cfg(c)->name, name) != 0)
        c = NULL;       /* another name with the same id */
    return (ember_cache *)(void *)c;
}

int ember_cache_destroy(ember_node *n, const char *name)
{
    return name ? st_cache_destroy(ST(n), cache_id(name)) : EM_INVAL;
}

int ember_put(ember_cache *c, const void *key, size_t klen, const void *val, size_t vlen)
{
    int rc = valid2(key, klen, val, vlen);
    return rc ? rc : st_put(CA(c), NULL, key, klen, val, vlen);
}

int ember_put_expiring(ember_cache *c, const void *key, size_t klen, const void *val,
                       size_t vlen, const ember_expiry *expiry)
{
    int rc = valid2(key, klen, val, vlen);
    if (rc)
        return rc;
    st_expiry e;
    st_opctx o = {NULL, NULL};
    if (expiry) {
        e = (st_expiry){expiry->create_ms, expiry->update_ms, expiry->access_ms};
        o.expiry = &e;
    }
    return st_put(CA(c), &o, key, klen, val, vlen);
}

int ember_get(ember_cache *c, const void *key, size_t klen, ember_buf *out, int *found)
{
    int rc = valid(key, klen);
    if (rc) {
        *found = 0;
        return rc;
    }
    return st_get(CA(c), NULL, key, klen, EB(out), found);
}

int ember_contains(ember_cache *c, const void *key, size_t klen, int *found)
{
    int rc = valid(key, klen);
    *found = 0;
    return rc ? rc : st_contains(CA(c), NULL, key, klen, found);
}

int ember_remove(ember_cache *c, const void *key, size_t klen, int *removed)
{
    int rc = valid(key, klen);
    *removed = 0;
    return rc ? rc : st_remove(CA(c), NULL, key, klen, removed);
}

int ember_get_and_put(ember_cache *c, const void *key, size_t klen, const void *val,
                      size_t vlen, ember_buf *out, int *found)
{
    int rc = valid2(key, klen, val, vlen);
    *found = 0;
    return rc ? rc : st_get_and_put(CA(c), NULL, key, klen, val, vlen, EB(out), found);
}

int ember_get_and_remove(ember_cache *c, const void *key, size_t klen, ember_buf *out,
                         int *found)
{
    int rc = valid(key, klen);
    *found = 0;
    return rc ? rc : st_get_and_remove(CA(c), NULL, key, klen, EB(out), found);
}

int ember_put_if_absent(ember_cache *c, const void *key, size_t klen, const void *val,
                        size_t vlen, int *stored)
{
    int rc = valid2(key, klen, val, vlen);
    *stored = 0;
    return rc ? rc : st_put_if_absent(CA(c), NULL, key, klen, val, vlen, stored);
}

int ember_replace(ember_cache *c, const void *key, size_t klen, const void *val,
                  size_t vlen, int *replaced)
{
    int rc = valid2(key, klen, val, vlen);
    *replaced = 0;
    return rc ? rc : st_replace(CA(c), NULL, key, klen, val, vlen, replaced);
}

int ember_replace_if_equals(ember_cache *c, const void *key, size_t klen, const void *expect,
                            size_t elen, const void *val, size_t vlen, int *replaced)
{
    int rc = valid2(key, klen, val, vlen);
    *replaced = 0;
    if (!rc)
        rc = valid(expect, elen);
    return rc ? rc : st_replace_if_equals(CA(c), NULL, key, klen, expect, elen, val, vlen, replaced);
}

int ember_remove_if_equals(ember_cache *c, const void *key, size_t klen, const void *expect,
                           size_t elen, int *removed)
{
    int rc = valid2(key, klen, expect, elen);
    *removed = 0;
    return rc ? rc : st_remove_if_equals(CA(c), NULL, key, klen, expect, elen, removed);
}

int ember_clear(ember_cache *c) { return st_clear(CA(c)); }

int ember_size(ember_cache *c, int64_t *size) { return st_size(CA(c), 0, size); }

int ember_scan(ember_cache *c, int32_t part, ember_entry_fn fn, void *arg)
{
    st_scan *sc;
    int rc = st_scan_open(CA(c), part, &sc), more = 1;
    while (!rc && more)
        rc = st_scan_next_page(sc, 1024, fn, arg, &more);
    st_scan_close(sc);
    return rc;
}

void ember_cache_stats_get(ember_cache *c, ember_cache_stats *out)
{
    st_cache_stats s;
    st_cache_stats_get(CA(c), &s);
    *out = (ember_cache_stats){s.entries, s.mem_bytes, s.evictions, s.expirations,
                               s.puts, s.gets, s.hits, s.removals};
}

int ember_expire_tick(ember_node *n, uint32_t budget) { return st_expire_tick(ST(n), budget); }
