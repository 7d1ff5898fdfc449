/* proto_meta.c - binary type ops 3000-3004 (type names, metadata with merge
 * semantics, binary configuration) and CACHE_PARTITIONS (1101) for a single
 * node.
 *
 * Layouts: ../shared/reference/ignite-thin-protocol.md §2.6 (metadata
 * record; the codec is bin_meta_decode/bin_meta_encode), §4.1 (partitions).
 */
#include "proto/proto_int.h"
#include "cluster/cl_node.h"

#include <string.h>

#include "binary/binary.h"
#include "util/hash.h"
#include "util/mem.h"

static int limit_err(pr_conn *c, int32_t type_id)
{
    return pr_fail(c, PR_ST_FAILED, "Binary type update rejected [typeId= %d]: a type may have "
                   "at most %d fields, %d schemas, %d enum values and %u MiB of names and "
                   "schema field ids (%s)", type_id, BIN_MAX_TYPE_FIELDS, BIN_MAX_TYPE_SCHEMAS,
                   BIN_MAX_TYPE_ENUMS, BIN_MAX_TYPE_BYTES >> 20, em_errname(EM_LIMIT));
}

static int reg_err(pr_conn *c, int rc, int32_t type_id)
{
    if (rc == EM_NOMEM)
        return rc;
    if (rc == EM_LIMIT)
        return limit_err(c, type_id);
    return pr_fail(c, PR_ST_FAILED, "Binary type update rejected [typeId= %d]: %s", type_id,
                   em_strerror(rc));
}

int pr_op_binary(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    bin_registry *reg = c->srv->reg;
    if (!reg)
        return pr_fail(c, PR_ST_FAILED, "Binary type registry is not available");
    switch (op) {
    case 3000: {    /* GET_BINARY_TYPE_NAME: byte platform, int type id -> string */
        uint8_t plat;
        int32_t id;
        if (pr_rd_u8(r, &plat) || pr_rd_i32(r, &id))
            return pr_bad_request(c, EM_TRUNCATED);
        size_t n = 0;
        const char *name = bin_registry_name_get(reg, plat, id, &n);
        if (!name)
            return pr_fail(c, PR_ST_FAILED, "Failed to resolve type name [platformId= %d, typeId= %d]",
                           plat, id);
        return pr_put_strn(out, (const uint8_t *)name, n);
    }
    case 3001: {    /* REGISTER_BINARY_TYPE_NAME: platform, type id, name -> bool */
        uint8_t plat;
        int32_t id;
        const uint8_t *s;
        size_t n;
        int rc;
        if (pr_rd_u8(r, &plat) || pr_rd_i32(r, &id))
            return pr_bad_request(c, EM_TRUNCATED);
        if ((rc = pr_rd_str(c, r, &s, &n)) != 0)
            return pr_bad_request(c, rc);
        if (!s)
            return pr_fail(c, PR_ST_FAILED, "Type name must not be null");
        rc = bin_registry_name_put(reg, plat, id, (const char *)s, n);
        if (rc)
            return reg_err(c, rc, id);
        if (c->srv->opt.meta_persist || c->srv->opt.cluster) {
            uint8_t hdr[5 + 256];
            uint8_t *rec = n <= 256 ? hdr : em_malloc(5 + n);
            if (!rec)
                return EM_NOMEM;
            rec[0] = plat;
            em_st32(rec + 1, (uint32_t)id);
            memcpy(rec + 5, s, n);
            rc = c->srv->opt.meta_persist
                 ? c->srv->opt.meta_persist(c->srv->opt.meta_arg, 2, rec, 5 + n) : 0;
            if (rc)
                rc = pr_fail(c, PR_ST_FAILED, "Type name was not persisted: %s", em_strerror(rc));
            else
                rc = pr_cluster_type_put(c, 2, id, rec, 5 + n);
            if (rec != hdr)
                em_free(rec);
            if (rc)
                return rc;
        }
        return pr_put_bool(out, 1);
    }
    case 3002: {    /* GET_BINARY_TYPE: int type id -> bool [+ record] */
        int32_t id;
        if (pr_rd_i32(r, &id))
            return pr_bad_request(c, EM_TRUNCATED);
        const bin_type *t = bin_registry_get(reg, id);
        if (!t && pr_cluster_sync(c))   /* registered on another node just now */
            t = bin_registry_get(reg, id);
        int rc = pr_put_bool(out, t != NULL);
        if (!rc && t)
            rc = bin_meta_encode(t, out);
        return rc;
    }
    case 3003: {    /* PUT_BINARY_TYPE: record -> empty; merged into the registry */
        bin_type *t = NULL;
        size_t used = 0;
        const uint8_t *rec = r->p + r->pos;
        int rc = bin_meta_decode(rec, pr_rd_left(r), &t, &used);
        if (rc == EM_NOMEM)
            return rc;
        if (rc == EM_LIMIT)
            return limit_err(c, pr_rd_left(r) >= 4 ? (int32_t)em_ld32(rec) : 0);
        if (rc)
            return pr_fail(c, PR_ST_FAILED, "Malformed binary type metadata: %s", em_strerror(rc));
        r->pos += used;
        int32_t id = t->type_id;
        rc = bin_registry_put(reg, t, NULL);
        bin_type_free(t);
        if (rc)
            return reg_err(c, rc, id);
        /* Durable before the reply: stored objects of this type must stay
         * readable after a restart. */
        if (c->srv->opt.meta_persist &&
            (rc = c->srv->opt.meta_persist(c->srv->opt.meta_arg, 1, rec, used)) != 0)
            return pr_fail(c, PR_ST_FAILED, "Binary type was not persisted [typeId= %d]: %s",
                           id, em_strerror(rc));
        return pr_cluster_type_put(c, 1, id, rec, used);
    }
    case 3004:      /* BINARY_CONFIGURATION_GET: bool compact footer, byte name
                     * mapper (0 = basic full name, Ignite's default) */
        return pr_put_bool(out, 1) || em_buf_put_u8(out, 0) ? EM_NOMEM : 0;
    default:
        return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
    }
}

/* ---- CACHE_PARTITIONS (1101) ---------------------------------------------
 *
 * Response: long topology major, int minor, int group count, then per group:
 *   bool applicable | int cache count | per cache: int id [, int key-config
 *   count, pairs (int key type id, int affinity field id) if applicable] |
 *   if applicable: int node count (1), typed UUID, int partition count,
 *   partition numbers.
 * One group per distinct partition count of the PARTITIONED caches asked
 * about, plus one non-applicable group for the rest; unknown ids are
 * skipped, as Java does, and a repeated id is reported once.  Linear in the
 * request (hash tables, a counting sort), and at most
 * PR_MAX_PARTITION_CACHES ids per request.
 */

/* put_key_configs converts stored property 401 bytes (int n, n x (type
 * name, affinity field name)) to (type id, field id) pairs. */
static int put_key_configs(pr_conn *c, const st_cache_config *g, em_buf *out)
{
    if (!g->key_configs || g->key_configs_len < 4)
        return em_buf_put_le32(out, 0);
    pr_rd r = { g->key_configs, g->key_configs_len, 0 };
    int32_t n;
    int rc = pr_rd_i32(&r, &n);
    if (rc || n < 0)
        return em_buf_put_le32(out, 0);
    size_t cnt = out->len;
    if (em_buf_put_le32(out, 0))
        return EM_NOMEM;
    int32_t done = 0;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *tn, *fn;
        size_t tl, fl;
        if (pr_rd_str(c, &r, &tn, &tl) || pr_rd_str(c, &r, &fn, &fl))
            break;
        if (!tn || !fn)
            continue;
        if (em_buf_put_le32(out, (uint32_t)bin_type_id((const char *)tn, tl)) ||
            em_buf_put_le32(out, (uint32_t)bin_field_id((const char *)fn, fl)))
            return EM_NOMEM;
        done++;
    }
    em_st32(out->p + cnt, (uint32_t)done);
    return 0;
}

static uint32_t cache_parts(const st_cache_config *g)
{
    return g->partitions ? g->partitions : 1024;
}

/* put_nodes lists each partition under its primary: the exchange's
 * committed one, else (no decision yet, or no owner left) the ideal one;
 * a partition whose baseline owners are all down is left out (a client
 * sends its keys to any node, which answers as for a lost partition). */
static int put_nodes(cl_topo *t, int32_t grp, uint32_t parts, em_buf *out)
{
    const cl_aff_table *a = cl_topo_affinity(t, parts, 0);
    if (!a)
        return EM_NOMEM;
    uint32_t *cnt = em_calloc(t->n, sizeof *cnt);
    uint16_t *prim = em_malloc(sizeof *prim * parts);
    if (!cnt || !prim) {
        em_free(cnt);
        em_free(prim);
        return EM_NOMEM;
    }
    for (uint32_t p = 0; p < parts; p++) {
        uint32_t o;
        prim[p] = cl_topo_owners(t, grp, parts, 0, 0, p, &o, 1) ? (uint16_t)o
                                                                 : cl_aff_owners(a, p)[0];
        if (prim[p] != CL_TOPO_NONE)
            cnt[prim[p]]++;
    }
    uint32_t nodes = 0;
    for (uint32_t i = 0; i < t->n; i++)
        nodes += cnt[i] != 0;
    int rc = em_buf_put_le32(out, nodes);
    for (uint32_t i = 0; i < t->n && !rc; i++) {
        if (!cnt[i])
            continue;
        if (em_buf_put_u8(out, BIN_UUID) || em_buf_put_le64(out, t->m[i].id.msb) ||
            em_buf_put_le64(out, t->m[i].id.lsb) || em_buf_put_le32(out, cnt[i]) ||
            em_buf_reserve(out, (size_t)cnt[i] * 4)) {
            rc = EM_NOMEM;
            break;
        }
        for (uint32_t p = 0; p < parts; p++)
            if (prim[p] == i) {
                em_st32(out->p + out->len, p);
                out->len += 4;
            }
    }
    em_free(cnt);
    em_free(prim);
    return rc;
}

/* put_group appends one applicable group: its caches, then the nodes
 * owning its partitions (this one alone on a single node). */
static int put_group(pr_conn *c, st_cache *const *sc, const uint32_t *pos, uint32_t n,
                     uint32_t parts, cl_topo *t, em_buf *out)
{
    if (pr_put_bool(out, 1) || em_buf_put_le32(out, n))
        return EM_NOMEM;
    for (uint32_t k = 0; k < n; k++) {
        st_cache *o = sc[pos[k]];
        if (em_buf_put_le32(out, (uint32_t)st_cache_id(o)) || put_key_configs(c, st_cache_cfg(o), out))
            return EM_NOMEM;
    }
    if (t && t->n)
        return put_nodes(t, st_cache_id(sc[pos[0]]), parts, out);
    if (em_buf_put_le32(out, 1) || em_buf_put_u8(out, BIN_UUID) ||
        em_buf_append(out, c->srv->opt.node_id, 16) || em_buf_put_le32(out, parts) ||
        em_buf_reserve(out, (size_t)parts * 4))
        return EM_NOMEM;
    for (uint32_t p = 0; p < parts; p++) {
        em_st32(out->p + out->len, p);
        out->len += 4;
    }
    return 0;
}

/* Per request scratch of pr_op_partitions, one allocation: n caches, n
 * group numbers (or a SKIP/OTHER mark) then per group its partition count,
 * size and start in `order`, the positions sorted by group (stable), and two
 * hash tables of 2^k >= 2n slots: cache ids seen, partition count -> group.
 * Caches whose owners the exchange decided each form their own group; the
 * others share one group per partition count (their ideal affinity). */
#define PT_SKIP  UINT32_MAX
#define PT_OTHER (UINT32_MAX - 1)

int pr_op_partitions(pr_conn *c, pr_rd *r, em_buf *out)
{
    int32_t n;
    if (pr_rd_i32(r, &n))
        return pr_bad_request(c, EM_TRUNCATED);
    if (n < 0 || (size_t)n > pr_rd_left(r) / 4)
        return pr_fail(c, PR_ST_FAILED, "Malformed request: count %d exceeds the message", n);
    if (n > PR_MAX_PARTITION_CACHES)
        return pr_fail(c, PR_ST_FAILED, "CACHE_PARTITIONS asks for %d caches; ember answers "
                       "at most %d per request: %s", n, PR_MAX_PARTITION_CACHES,
                       em_strerror(EM_LIMIT));
    const uint8_t *ids = r->p + r->pos;
    st_store *st = c->srv->st;
    /* One topology for the whole reply, its version at the top. */
    cl_topo *t = c->srv->opt.cluster ? cl_node_topo_acquire(c->srv->opt.cluster) : NULL;
    int rc0 = t && t->n ? em_buf_put_le64(out, t->major) || em_buf_put_le32(out, t->minor)
                        : em_buf_put_le64(out, 1) || em_buf_put_le32(out, 0);
    if (rc0) {
        cl_node_topo_release(t);
        return EM_NOMEM;
    }
    size_t ngroups_at = out->len;
    if (em_buf_put_le32(out, 0)) {
        cl_node_topo_release(t);
        return EM_NOMEM;
    }
    r->pos += 4 * (size_t)n;
    if (n == 0) {
        cl_node_topo_release(t);
        return 0;
    }

    uint32_t cap = 16;
    while (cap < 2 * (uint32_t)n)
        cap *= 2;
    size_t un = (size_t)n;
    uint8_t *mem = em_malloc(un * sizeof(st_cache *) + (un * 5 + 2 * (size_t)cap) * 4);
    if (!mem) {
        cl_node_topo_release(t);
        return EM_NOMEM;
    }
    st_cache **sc = (st_cache **)(void *)mem;
    uint32_t *grp = (uint32_t *)(void *)(sc + un);
    uint32_t *gparts = grp + un, *gsize = gparts + un, *gstart = gsize + un;
    uint32_t *order = gstart + un, *seen = order + un, *gmap = seen + cap;
    memset(seen, 0, 2 * (size_t)cap * 4);       /* seen and gmap: 0 = empty */

    /* One pass: drop repeats and unknown ids (Java skips those), number the
     * PARTITIONED caches' groups (one per partition count) in request order. */
    uint32_t ngroups = 0, others = 0;
    int synced = 0;
    for (uint32_t i = 0; i < un; i++) {
        int32_t id = (int32_t)em_ld32(ids + 4 * (size_t)i);
        grp[i] = PT_SKIP;
        uint32_t h = (uint32_t)em_mix64((uint32_t)id) & (cap - 1);
        while (seen[h] && (int32_t)em_ld32(ids + 4 * (size_t)(seen[h] - 1)) != id)
            h = (h + 1) & (cap - 1);
        if (seen[h])
            continue;
        seen[h] = i + 1;
        sc[i] = st_cache_find(st, id);
        if (!sc[i] && !synced) {
            synced = 1;             /* a cache another node just started */
            if (pr_cluster_sync(c))
                sc[i] = st_cache_find(st, id);
        }
        if (!sc[i])
            continue;
        const st_cache_config *g = st_cache_cfg(sc[i]);
        if (g->cache_mode != 2) {
            grp[i] = PT_OTHER;
            others++;
            continue;
        }
        uint32_t parts = cache_parts(g);
        if (t && t->n && cl_topo_has_owners(t, id, parts)) {
            /* Owners decided by the exchange: this cache's own group. */
            gparts[ngroups] = parts;
            gsize[ngroups] = 1;
            grp[i] = ngroups++;
            continue;
        }
        h = (uint32_t)em_mix64(parts) & (cap - 1);
        while (gmap[h] && gparts[gmap[h] - 1] != parts)
            h = (h + 1) & (cap - 1);
        if (!gmap[h]) {
            gparts[ngroups] = parts;
            gsize[ngroups] = 0;
            gmap[h] = ++ngroups;
        }
        grp[i] = gmap[h] - 1;
        gsize[grp[i]]++;
    }
    /* Counting sort of the positions by group keeps request order within one. */
    uint32_t at = 0;
    for (uint32_t g = 0; g < ngroups; g++) {
        gstart[g] = at;
        at += gsize[g];
    }
    for (uint32_t g = 0; g < ngroups; g++)
        gsize[g] = 0;
    for (uint32_t i = 0; i < un; i++)
        if (grp[i] < ngroups)
            order[gstart[grp[i]] + gsize[grp[i]]++] = i;

    int rc = 0;
    for (uint32_t g = 0; g < ngroups && !rc; g++)
        rc = put_group(c, sc, order + gstart[g], gsize[g], gparts[g], t, out);

    /* Everything else (LOCAL, REPLICATED) in one non-applicable group. */
    if (!rc && others) {
        rc = pr_put_bool(out, 0) || em_buf_put_le32(out, others) ? EM_NOMEM : 0;
        for (uint32_t i = 0; i < un && !rc; i++)
            if (grp[i] == PT_OTHER)
                rc = em_buf_put_le32(out, (uint32_t)st_cache_id(sc[i]));
    }
    em_free(mem);
    cl_node_topo_release(t);
    if (rc)
        return rc;
    em_st32(out->p + ngroups_at, ngroups + (others ? 1 : 0));
    return 0;
}
