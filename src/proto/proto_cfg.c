/* proto_cfg.c - cache registry and configuration ops 1050-1056: decode the
 * configuration properties of a create request into st_cache_config, and
 * echo a cache's configuration in the fixed GET_CONFIGURATION order of the
 * connection's protocol version.
 *
 * Layouts: ../shared/reference/ignite-thin-protocol.md §2.4 (property codes,
 * query entities, response order; precision/scale from 1.2.0, expiry policy
 * from 1.6.0).  Query entities are stored in their 1.2.0+ encoding.
 */
#include "proto/proto_int.h"

#include "sql/sql.h"
#include "cluster/cl_meta_fsm.h"

#include <string.h>

#include "binary/binary.h"
#include "util/mem.h"

#define START_AWAIT_MS 10000       /* a cache start waits for its first owners, at most */

/* copy_str reads a typed string (or null) and appends its bytes unchanged. */
static int copy_str(pr_conn *c, pr_rd *r, em_buf *dst)
{
    size_t start = r->pos;
    const uint8_t *s;
    size_t n;
    int rc = pr_rd_str(c, r, &s, &n);
    if (rc)
        return rc;
    return em_buf_append(dst, r->p + start, r->pos - start);
}

static int copy_fixed(pr_rd *r, em_buf *dst, size_t n)
{
    if (pr_rd_left(r) < n)
        return EM_TRUNCATED;
    int rc = em_buf_append(dst, r->p + r->pos, n);
    r->pos += n;
    return rc;
}

static int copy_count(pr_rd *r, em_buf *dst, size_t min_item, int32_t *n)
{
    if (pr_rd_i32(r, n))
        return EM_TRUNCATED;
    if (*n < 0 || (size_t)*n > pr_rd_left(r) / min_item)
        return EM_BADLEN;
    return em_buf_put_le32(dst, (uint32_t)*n);
}

/* copy_entities copies `int n, n query entities` (reference §2.4), reading
 * field precision/scale if in_ps and writing them if out_ps (-1 when the
 * input has none). */
static int copy_entities(pr_conn *c, pr_rd *r, em_buf *dst, int in_ps, int out_ps)
{
    int32_t ne, nf, na, ni, nif;
    int rc = copy_count(r, dst, 5, &ne);
    for (int32_t e = 0; !rc && e < ne; e++) {
        for (int i = 0; !rc && i < 5; i++)        /* key/value type, table, key/value field */
            rc = copy_str(c, r, dst);
        if (!rc)
            rc = copy_count(r, dst, 4, &nf);
        for (int32_t f = 0; !rc && f < nf; f++) {
            const uint8_t *d;
            size_t dl;
            rc = copy_str(c, r, dst);             /* name */
            if (!rc) rc = copy_str(c, r, dst);    /* type name */
            if (!rc) rc = copy_fixed(r, dst, 2);  /* is key, not null */
            if (!rc) rc = pr_rd_obj(c, r, &d, &dl);
            if (!rc) rc = em_buf_append(dst, d, dl);   /* default value */
            int32_t prec = -1, scale = -1;
            if (!rc && in_ps && (pr_rd_i32(r, &prec) || pr_rd_i32(r, &scale)))
                rc = EM_TRUNCATED;
            if (!rc && out_ps)
                rc = em_buf_put_le32(dst, (uint32_t)prec) || em_buf_put_le32(dst, (uint32_t)scale)
                         ? EM_NOMEM : 0;
        }
        if (!rc)
            rc = copy_count(r, dst, 2, &na);
        for (int32_t a = 0; !rc && a < na * 2; a++)
            rc = copy_str(c, r, dst);
        if (!rc)
            rc = copy_count(r, dst, 10, &ni);
        for (int32_t x = 0; !rc && x < ni; x++) {
            rc = copy_str(c, r, dst);             /* index name */
            if (!rc) rc = copy_fixed(r, dst, 5);  /* type byte, inline size */
            if (!rc) rc = copy_count(r, dst, 2, &nif);
            for (int32_t f = 0; !rc && f < nif; f++) {
                rc = copy_str(c, r, dst);
                if (!rc) rc = copy_fixed(r, dst, 1);
            }
        }
    }
    return rc;
}

static int dup_str(pr_conn *c, pr_rd *r, char **dst)
{
    const uint8_t *s;
    size_t n;
    int rc = pr_rd_str(c, r, &s, &n);
    if (rc)
        return rc;
    em_free(*dst);
    *dst = NULL;
    if (s && !(*dst = em_strndup((const char *)s, n)))
        return EM_NOMEM;
    return 0;
}

static int rd_bool(pr_rd *r, uint8_t *v)
{
    int rc = pr_rd_u8(r, v);
    if (!rc)
        *v = *v != 0;
    return rc;
}

/* decode_config reads `int length, short count, count x (short code,
 * value)` into cfg (initialised by the caller). */
static int decode_config(pr_conn *c, pr_rd *r, st_cache_config *cfg)
{
    int32_t len;
    int16_t count;
    if (pr_rd_i32(r, &len) || pr_rd_i16(r, &count))
        return pr_bad_request(c, EM_TRUNCATED);
    if (count < 0)
        return pr_fail(c, PR_ST_FAILED, "Malformed cache configuration: %d properties", count);
    for (int i = 0; i < count; i++) {
        int16_t code;
        int rc;
        if (pr_rd_i16(r, &code))
            return pr_bad_request(c, EM_TRUNCATED);
        switch (code) {
        case 0:   rc = dup_str(c, r, &cfg->name); break;
        case 1:   rc = pr_rd_i32(r, &cfg->cache_mode); break;
        case 2:   rc = pr_rd_i32(r, &cfg->atomicity_mode); break;
        case 3:   rc = pr_rd_i32(r, &cfg->backups); break;
        case 4:   rc = pr_rd_i32(r, &cfg->write_sync_mode); break;
        case 5:   rc = rd_bool(r, &cfg->copy_on_read); break;
        case 6:   rc = rd_bool(r, &cfg->read_from_backup); break;
        case 100: rc = dup_str(c, r, &cfg->data_region_name); break;
        case 101: rc = rd_bool(r, &cfg->onheap_cache_enabled); break;
        case 200: {
            em_buf_reset(&c->tmp);
            rc = copy_entities(c, r, &c->tmp, c->ver >= PR_VER(1, 2, 0), 1);
            if (!rc) {
                em_free(cfg->query_entities);
                cfg->query_entities = em_memdup(c->tmp.p, c->tmp.len);
                cfg->query_entities_len = (uint32_t)c->tmp.len;
                if (!cfg->query_entities)
                    rc = EM_NOMEM;
            }
            break;
        }
        case 201: rc = pr_rd_i32(r, &cfg->query_parallelism); break;
        case 202: rc = pr_rd_i32(r, &cfg->query_detail_metrics_size); break;
        case 203: rc = dup_str(c, r, &cfg->sql_schema); break;
        case 204: rc = pr_rd_i32(r, &cfg->sql_index_inline_max_size); break;
        case 205: rc = rd_bool(r, &cfg->sql_escape_all); break;
        case 206: rc = pr_rd_i32(r, &cfg->max_query_iterators); break;
        case 300: rc = pr_rd_i32(r, &cfg->rebalance_mode); break;
        case 301: rc = pr_rd_i64(r, &cfg->rebalance_delay); break;
        case 302: rc = pr_rd_i64(r, &cfg->rebalance_timeout); break;
        case 303: rc = pr_rd_i32(r, &cfg->rebalance_batch_size); break;
        case 304: rc = pr_rd_i64(r, &cfg->rebalance_batches_prefetch_count); break;
        case 305: rc = pr_rd_i32(r, &cfg->rebalance_order); break;
        case 306: rc = pr_rd_i64(r, &cfg->rebalance_throttle); break;
        case 400: rc = dup_str(c, r, &cfg->group_name); break;
        case 401: {
            int32_t n;
            em_buf_reset(&c->tmp);
            rc = copy_count(r, &c->tmp, 2, &n);
            for (int32_t k = 0; !rc && k < n * 2; k++)
                rc = copy_str(c, r, &c->tmp);
            if (!rc) {
                em_free(cfg->key_configs);
                cfg->key_configs = em_memdup(c->tmp.p, c->tmp.len);
                cfg->key_configs_len = (uint32_t)c->tmp.len;
                if (!cfg->key_configs)
                    rc = EM_NOMEM;
            }
            break;
        }
        case 402: rc = pr_rd_i64(r, &cfg->default_lock_timeout); break;
        case 403: rc = pr_rd_i32(r, &cfg->max_concurrent_async_ops); break;
        case 404: rc = pr_rd_i32(r, &cfg->partition_loss_policy); break;
        case 405: rc = rd_bool(r, &cfg->eager_ttl); break;
        case 406: rc = rd_bool(r, &cfg->statistics_enabled); break;
        case 407:
            rc = rd_bool(r, &cfg->has_expiry);
            if (!rc && cfg->has_expiry &&
                (pr_rd_i64(r, &cfg->expiry.create_ms) || pr_rd_i64(r, &cfg->expiry.update_ms) ||
                 pr_rd_i64(r, &cfg->expiry.access_ms)))
                rc = EM_TRUNCATED;
            break;
        default:
            return pr_fail(c, PR_ST_FAILED, "Unsupported cache configuration property code: %d", code);
        }
        if (rc == EM_NOMEM)
            return rc;
        if (rc)
            return pr_fail(c, PR_ST_FAILED, "Malformed cache configuration property %d: %s",
                           code, em_strerror(rc));
    }
    return 0;
}

/* encode_config writes the GET_CONFIGURATION payload (reference §2.4). */
static int encode_config(pr_conn *c, const st_cache_config *g, em_buf *o)
{
    size_t start = o->len;
    int rc = em_buf_put_le32(o, 0);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->atomicity_mode);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->backups);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->cache_mode);
    rc = rc || pr_put_bool(o, g->copy_on_read);
    rc = rc || pr_put_str(o, g->data_region_name);
    rc = rc || pr_put_bool(o, g->eager_ttl);
    rc = rc || pr_put_bool(o, g->statistics_enabled);
    rc = rc || pr_put_str(o, g->group_name);
    rc = rc || em_buf_put_le64(o, (uint64_t)g->default_lock_timeout);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->max_concurrent_async_ops);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->max_query_iterators);
    rc = rc || pr_put_str(o, g->name);
    rc = rc || pr_put_bool(o, g->onheap_cache_enabled);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->partition_loss_policy);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->query_detail_metrics_size);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->query_parallelism);
    rc = rc || pr_put_bool(o, g->read_from_backup);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->rebalance_batch_size);
    rc = rc || em_buf_put_le64(o, (uint64_t)g->rebalance_batches_prefetch_count);
    rc = rc || em_buf_put_le64(o, (uint64_t)g->rebalance_delay);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->rebalance_mode);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->rebalance_order);
    rc = rc || em_buf_put_le64(o, (uint64_t)g->rebalance_throttle);
    rc = rc || em_buf_put_le64(o, (uint64_t)g->rebalance_timeout);
    rc = rc || pr_put_bool(o, g->sql_escape_all);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->sql_index_inline_max_size);
    rc = rc || pr_put_str(o, g->sql_schema);
    rc = rc || em_buf_put_le32(o, (uint32_t)g->write_sync_mode);
    if (rc)
        return EM_NOMEM;
    if (g->key_configs && g->key_configs_len >= 4)
        rc = em_buf_append(o, g->key_configs, g->key_configs_len);
    else
        rc = em_buf_put_le32(o, 0);
    if (rc)
        return rc;
    if (g->query_entities && g->query_entities_len >= 4) {
        if (c->ver >= PR_VER(1, 2, 0)) {
            rc = em_buf_append(o, g->query_entities, g->query_entities_len);
        } else {                    /* strip precision/scale for 1.0.0 / 1.1.0 */
            pr_rd r = { g->query_entities, g->query_entities_len, 0 };
            rc = copy_entities(c, &r, o, 1, 0);
        }
    } else {
        rc = em_buf_put_le32(o, 0);
    }
    if (rc)
        return rc;
    if (c->ver >= PR_VER(1, 6, 0)) {
        rc = pr_put_bool(o, g->has_expiry);
        if (!rc && g->has_expiry)
            rc = em_buf_put_le64(o, (uint64_t)g->expiry.create_ms) ||
                 em_buf_put_le64(o, (uint64_t)g->expiry.update_ms) ||
                 em_buf_put_le64(o, (uint64_t)g->expiry.access_ms) ? EM_NOMEM : 0;
        if (rc)
            return rc;
    }
    em_st32(o->p + start, (uint32_t)(o->len - start - 4));
    return 0;
}

typedef struct names_ctx {
    em_buf *out;
    int32_t n;
    int     rc;
} names_ctx;

static void add_name(void *arg, st_cache *sc)
{
    names_ctx *nc = arg;
    if (nc->rc)
        return;
    nc->rc = pr_put_str(nc->out, st_cache_cfg(sc)->name);
    nc->n++;
}

/* create_cluster: a cache start through the metadata group; every node
 * creates it from the same configuration bytes (pr_cfg_apply_start), this
 * one before the reply. */
static int create_cluster(pr_conn *c, st_cache_config *cfg, int or_get, const uint8_t *blob,
                          size_t blen)
{
    int32_t id = em_hash_java_str((const uint8_t *)cfg->name, strlen(cfg->name));
    if (st_cache_find(c->srv->st, id))
        return or_get ? 0 : pr_fail(c, PR_ST_CACHE_EXISTS, "Failed to start cache (a cache "
                                    "with the same name is already started): %s", cfg->name);
    if (cfg->data_region_name && !st_region_exists(c->srv->st, cfg->data_region_name))
        return pr_fail(c, PR_ST_FAILED, "Requested DataRegion is not configured: %s",
                       cfg->data_region_name);
    /* Every member decodes the configuration's bytes in the 1.2.0+ layout
     * (pr_server_set_cluster). */
    if (cfg->query_entities && c->ver < PR_VER(1, 2, 0))
        return pr_fail(c, PR_ST_FAILED, "Failed to start cache %s: query entities on a cluster "
                       "need protocol 1.2.0 or later", cfg->name);
    em_buf b = EM_BUF_INIT;
    int rc = cl_meta_enc_cache_start(&b, id, blob, blen);
    if (rc == 0)
        rc = pr_cluster_propose(c, b.p, b.len, "start the cache");
    else if (rc != EM_NOMEM)
        rc = pr_fail(c, PR_ST_FAILED, "Failed to start cache %s: %s", cfg->name, em_strerror(rc));
    em_buf_free(&b);
    if (rc == PR_ST_CACHE_EXISTS && or_get && st_cache_find(c->srv->st, id))
        return 0;                   /* another node started it first: found */
    if (rc)
        return rc;
    st_cache *sc = st_cache_find(c->srv->st, id);
    if (!sc)
        return pr_fail(c, PR_ST_FAILED, "Failed to start cache %s on this node (its log "
                       "says why)", cfg->name);
    /* The start returns once the cache's exchange decided its owners (its
     * requests wait for that anyway); a slow exchange only delays them. */
    (void)pr_cluster_await_owners(c->srv, sc, START_AWAIT_MS);
    return 0;
}

/* name_blob: the configuration bytes of a cache known by name alone, in
 * CACHE_CREATE_WITH_CONFIGURATION's layout (one property, NAME). */
static int name_blob(em_buf *b, const char *name)
{
    if (em_buf_put_le32(b, 0) || em_buf_put_le16(b, 1) || em_buf_put_le16(b, 0) ||
        pr_put_str(b, name))
        return EM_NOMEM;
    em_st32(b->p, (uint32_t)(b->len - 4));
    return 0;
}

/* ---- a configuration as CACHE_CREATE_WITH_CONFIGURATION's properties ----
 * (the layout decode_config reads, query entities with precision and scale:
 * what the members decode from a CACHE_CONFIG entry). */

static int p_code(em_buf *b, int code, int *n)
{
    (*n)++;
    return em_buf_put_le16(b, (uint16_t)code);
}
static int p_i32(em_buf *b, int code, int32_t v, int *n)
{
    return p_code(b, code, n) || em_buf_put_le32(b, (uint32_t)v);
}
static int p_i64(em_buf *b, int code, int64_t v, int *n)
{
    return p_code(b, code, n) || em_buf_put_le64(b, (uint64_t)v);
}
static int p_bool(em_buf *b, int code, int v, int *n)
{
    return p_code(b, code, n) || em_buf_put_u8(b, v ? 1 : 0);
}
static int p_str(em_buf *b, int code, const char *v, int *n)
{
    return v && (p_code(b, code, n) || pr_put_str(b, v));
}
static int p_raw(em_buf *b, int code, const uint8_t *v, uint32_t len, int *n)
{
    return v && len && (p_code(b, code, n) || em_buf_append(b, v, len));
}

int pr_cfg_encode_props(const st_cache_config *g, em_buf *b)
{
    size_t at = b->len;
    int n = 0;
    int rc = em_buf_put_le32(b, 0) || em_buf_put_le16(b, 0) ||
             p_str(b, 0, g->name, &n) || p_i32(b, 1, g->cache_mode, &n) ||
             p_i32(b, 2, g->atomicity_mode, &n) || p_i32(b, 3, g->backups, &n) ||
             p_i32(b, 4, g->write_sync_mode, &n) || p_bool(b, 5, g->copy_on_read, &n) ||
             p_bool(b, 6, g->read_from_backup, &n) || p_str(b, 100, g->data_region_name, &n) ||
             p_bool(b, 101, g->onheap_cache_enabled, &n) ||
             p_raw(b, 200, g->query_entities, g->query_entities_len, &n) ||
             p_i32(b, 201, g->query_parallelism, &n) ||
             p_i32(b, 202, g->query_detail_metrics_size, &n) || p_str(b, 203, g->sql_schema, &n) ||
             p_i32(b, 204, g->sql_index_inline_max_size, &n) ||
             p_bool(b, 205, g->sql_escape_all, &n) || p_i32(b, 206, g->max_query_iterators, &n) ||
             p_i32(b, 300, g->rebalance_mode, &n) || p_i64(b, 301, g->rebalance_delay, &n) ||
             p_i64(b, 302, g->rebalance_timeout, &n) || p_i32(b, 303, g->rebalance_batch_size, &n) ||
             p_i64(b, 304, g->rebalance_batches_prefetch_count, &n) ||
             p_i32(b, 305, g->rebalance_order, &n) || p_i64(b, 306, g->rebalance_throttle, &n) ||
             p_str(b, 400, g->group_name, &n) ||
             p_raw(b, 401, g->key_configs, g->key_configs_len, &n) ||
             p_i64(b, 402, g->default_lock_timeout, &n) ||
             p_i32(b, 403, g->max_concurrent_async_ops, &n) ||
             p_i32(b, 404, g->partition_loss_policy, &n) || p_bool(b, 405, g->eager_ttl, &n) ||
             p_bool(b, 406, g->statistics_enabled, &n) || p_bool(b, 407, g->has_expiry, &n);
    if (!rc && g->has_expiry)
        rc = em_buf_put_le64(b, (uint64_t)g->expiry.create_ms) ||
             em_buf_put_le64(b, (uint64_t)g->expiry.update_ms) ||
             em_buf_put_le64(b, (uint64_t)g->expiry.access_ms);
    if (rc)
        return EM_NOMEM;
    em_st32(b->p + at, (uint32_t)(b->len - at - 4));
    em_st16(b->p + at + 4, (uint16_t)n);
    return 0;
}

/* decode_applied: the configuration of an applied entry (EM_CONFIG with
 * the message in apply_conn->msg when it does not decode). */
static int decode_applied(pr_server *s, const uint8_t *blob, size_t len, st_cache_config *cfg)
{
    pr_rd r = { blob, len, 0 };
    st_cache_config_init(cfg);
    int rc = decode_config(s->apply_conn, &r, cfg);
    return rc > 0 ? EM_CONFIG : rc;
}

int pr_cfg_apply_config(pr_server *s, const uint8_t *blob, size_t len)
{
    st_cache_config cfg;
    int rc = decode_applied(s, blob, len, &cfg);
    st_cache *sc = !rc && cfg.name ? st_cache_find(s->st, em_hash_java_str(
                       (const uint8_t *)cfg.name, strlen(cfg.name))) : NULL;
    /* Only the query entities change after a start (SQL DDL); a snapshot
     * restored over a cache that has them already changes nothing. */
    st_cache_config now;
    if (sc && !rc && (rc = st_cache_cfg_copy(sc, &now)) == 0) {
        int same = now.query_entities_len == cfg.query_entities_len &&
                   (!cfg.query_entities_len ||
                    !memcmp(now.query_entities, cfg.query_entities, cfg.query_entities_len));
        st_cache_config_free(&now);
        if (!same && (rc = st_cache_set_qe(sc, cfg.query_entities, cfg.query_entities_len)) == 0)
            sq_cat_refresh(s->sql, sc);
    }
    st_cache_config_free(&cfg);
    return rc;
}

int pr_cfg_apply_start(pr_server *s, const uint8_t *blob, size_t len)
{
    st_cache_config cfg;
    int rc = decode_applied(s, blob, len, &cfg);
    st_cache *sc;
    if (!rc)
        rc = cfg.name && cfg.name[0] ? st_cache_get_or_create(s->st, &cfg, &sc) : EM_CONFIG;
    st_cache_config_free(&cfg);
    return rc;
}

static int create(pr_conn *c, st_cache_config *cfg, int or_get, const uint8_t *blob,
                  size_t blen)
{
    if (!cfg->name || !cfg->name[0])
        return pr_fail(c, PR_ST_FAILED, "Cache name must not be null or empty");
    /* Read-only: Ignite refuses only the start of a new cache; an existing
     * one is found (GET_OR_CREATE) or reported as existing (CREATE). */
    if (pr_state(c) == PR_STATE_ACTIVE_READ_ONLY &&
        !st_cache_find(c->srv->st, em_hash_java_str((const uint8_t *)cfg->name,
                                                    strlen(cfg->name))))
        return pr_refuse_read_only(c, "start cache", cfg->group_name, cfg->name);
    if (c->srv->opt.cluster) {
        em_buf nb = EM_BUF_INIT;
        int rc = 0;
        if (!blob) {
            if ((rc = name_blob(&nb, cfg->name)) != 0)
                return rc;
            blob = nb.p;
            blen = nb.len;
        }
        rc = create_cluster(c, cfg, or_get, blob, blen);
        em_buf_free(&nb);
        return rc;
    }
    st_cache *sc;
    int rc = or_get ? st_cache_get_or_create(c->srv->st, cfg, &sc)
                    : st_cache_create(c->srv->st, cfg, &sc);
    if (rc == EM_CACHEEXISTS)
        return pr_fail(c, PR_ST_CACHE_EXISTS, "Failed to start cache (a cache with the same name "
                       "is already started): %s", cfg->name);
    if (rc == EM_NOMEM || rc == 0)
        return rc;
    /* The store refuses a region it does not have with EM_CONFIG; say which,
     * in the words of Ignite's IgniteCacheDatabaseSharedManager.dataRegion. */
    if (rc == EM_CONFIG && cfg->data_region_name &&
        !st_region_exists(c->srv->st, cfg->data_region_name))
        return pr_fail(c, PR_ST_FAILED, "Requested DataRegion is not configured: %s",
                       cfg->data_region_name);
    return pr_fail(c, PR_ST_FAILED, "Failed to create cache %s: %s", cfg->name, em_strerror(rc));
}

int pr_op_config(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    /* Names, create, get-or-create, configuration and destroy all go
     * through IgniteKernal.checkClusterState in Ignite. */
    if (pr_state(c) == PR_STATE_INACTIVE)
        return pr_refuse_inactive(c);
    switch (op) {
    case 1050: {    /* GET_NAMES -> int n, n strings */
        names_ctx nc = { out, 0, 0 };
        (void)pr_cluster_sync(c);   /* a cache another node started is listed */
        size_t cnt = out->len;
        if (em_buf_put_le32(out, 0))
            return EM_NOMEM;
        st_cache_each(c->srv->st, add_name, &nc);
        if (nc.rc)
            return nc.rc;
        em_st32(out->p + cnt, (uint32_t)nc.n);
        return 0;
    }
    case 1051: case 1052: case 1053: case 1054: {
        st_cache_config cfg;
        st_cache_config_init(&cfg);
        int rc;
        size_t from = r->pos;
        if (op <= 1052) {
            rc = dup_str(c, r, &cfg.name);
            if (rc && rc != EM_NOMEM)
                rc = pr_bad_request(c, rc);
        } else {
            rc = decode_config(c, r, &cfg);
        }
        /* The configuration's own bytes are what the other nodes decode. */
        if (!rc)
            rc = create(c, &cfg, op == 1052 || op == 1054,
                        op <= 1052 ? NULL : r->p + from, r->pos - from);
        st_cache_config_free(&cfg);
        return rc;
    }
    case 1055: {    /* GET_CONFIGURATION: cache id, flags */
        pr_cache_hdr h;
        int rc = pr_cache_header(c, r, &h);
        if (rc)
            return rc;
        st_cache_config cc;         /* its query entities may change meanwhile */
        if ((rc = st_cache_cfg_copy(h.cache, &cc)) != 0)
            return rc;
        rc = encode_config(c, &cc, out);
        st_cache_config_free(&cc);
        return rc;
    }
    case 1056: {    /* DESTROY: int cache id */
        int32_t id;
        if (pr_rd_i32(r, &id))
            return pr_bad_request(c, EM_TRUNCATED);
        int rc;
        if (c->srv->opt.cluster) {
            if (!st_cache_find(c->srv->st, id) && !(pr_cluster_sync(c) && st_cache_find(c->srv->st, id)))
                return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", id);
            em_buf b = EM_BUF_INIT;
            rc = cl_meta_enc_cache_stop(&b, id);
            if (!rc)
                rc = pr_cluster_propose(c, b.p, b.len, "destroy the cache");
            em_buf_free(&b);
            return rc;
        }
        rc = st_cache_destroy(c->srv->st, id);
        if (rc == EM_NOCACHE)
            return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", id);
        return rc == 0 || rc == EM_NOMEM ? rc : pr_fail(c, PR_ST_FAILED, "%s", em_strerror(rc));
    }
    default:
        return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
    }
}
