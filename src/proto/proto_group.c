/* proto_group.c - cluster-group discovery: CLUSTER_GROUP_GET_NODE_IDS (5100),
 * CLUSTER_GROUP_GET_NODE_INFO (5101), CLUSTER_GROUP_GET_NODE_ENDPOINTS (5102),
 * which partition-aware clients use to find every node.  Layouts follow
 * Ignite's ClientClusterGroup*Request/Response classes (tables below); the
 * nodes are the one local node, or the members of the cluster's topology.
 */
#include "proto/proto_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binary/binary.h"
#include "cluster/cl_node.h"
#include "util/mem.h"

/* Requests (payload after op and request id; raw values unless "typed"):
 *
 *   5100  long topVer | int nItems | nItems x (short code | item)
 *         code 1 ATTRIBUTE: typed string name, typed string value (or null)
 *         code 2 SERVER_NODES: bool (true: servers, false: clients)
 *   5101  int n | n x (long msb, long lsb)
 *   5102  long startTopVer (-1 = none) | long endTopVer (-1 = current)
 *
 * Replies:
 *
 *   5100  bool changed (false when topVer >= current; nothing follows)
 *         | long topVer | int n | n x (long msb, long lsb)
 *   5101  int n | n x node:
 *           typed uuid id (10) | int nAttrs | nAttrs x (typed string name,
 *           typed value) | addresses: collection (24, int n, byte type 1, n
 *           typed strings) | host names: same | long order | bool isLocal |
 *           bool isDaemon (false) | bool isClient | typed consistent id |
 *           version: byte major, byte minor, byte maintenance, typed string
 *           stage, long revision timestamp, typed byte array revision hash
 *   5102  long endTopVer | int nAdded | nAdded x (long msb, long lsb, int
 *           port, int nAddrs, nAddrs x typed string) | int nRemoved |
 *           nRemoved x (long msb, long lsb)
 *
 * The 5101 layout is the same in every protocol version (Ignite writes no
 * version-dependent field); 5102's data-centre id (DC_AWARE_REQUESTS) is not
 * offered, so never read.  Every ember node is a server node; a member that
 * publishes no thin address has no client connector, and 5102 leaves it out
 * as Ignite does.  Node attributes are few and describe what ember knows:
 *
 *   clientListenerPort   Integer  thin port (only when there is one)
 *   org.apache.ignite.ips String  thin address host
 *   ember.cluster.addr   String   transport "ip:port" ("" on a single node)
 */

#define GROUP_MAX_ITEMS   64        /* projection items one request may carry */
#define GROUP_HISTORY     32        /* topology versions 5102 can diff from */
#define UNKNOWN_TOP_VER   (-1)

/* The version 5101 reports: Ignite's product version ember's protocol
 * matches (clients gate features on it, not on ember's own). */
#define VER_MAJOR 2
#define VER_MINOR 16
#define VER_MAINT 0
#define VER_STAGE "ember"

typedef struct gnode {
    uint8_t     id[16];             /* wire order: msb LE, lsb LE */
    uint64_t    order;
    int         local;
    const char *cid;
    const char *cluster_addr;
    char        host[64];           /* thin host, "" if none */
    int         port;               /* thin port, 0 if none */
} gnode;

/* A view of the nodes a request sees: the topology is held while it runs. */
typedef struct gview {
    uint64_t  ver;                  /* topology major version */
    uint32_t  n;
    gnode    *nodes;
    cl_topo  *topo;                 /* NULL on a single node */
    char      single_cid[80];
} gview;

struct pr_group_hist {
    struct { uint64_t ver; uint32_t n; uint8_t (*ids)[16]; } e[GROUP_HISTORY];
    uint32_t next;
};

static void uuid_put(uint8_t out[16], cl_meta_uuid u)
{
    em_st64(out, u.msb);
    em_st64(out + 8, u.lsb);
}

/* split_addr: "ip:port" into host and port (port 0 if absent or bad). */
static void split_addr(const char *a, char *host, size_t cap, int *port)
{
    host[0] = 0;
    *port = 0;
    if (!a || !*a)
        return;
    const char *colon = strrchr(a, ':');
    size_t hl = colon ? (size_t)(colon - a) : strlen(a);
    if (hl >= cap)
        hl = cap - 1;
    memcpy(host, a, hl);
    host[hl] = 0;
    if (colon) {
        long p = strtol(colon + 1, NULL, 10);
        *port = p > 0 && p < 65536 ? (int)p : 0;
    }
}

static void view_release(gview *v)
{
    em_free(v->nodes);
    if (v->topo)
        cl_node_topo_release(v->topo);
    memset(v, 0, sizeof *v);
}

static int view_acquire(pr_conn *c, gview *v)
{
    memset(v, 0, sizeof *v);
    const pr_options *o = &c->srv->opt;
    if (!o->cluster) {
        if (!(v->nodes = em_calloc(1, sizeof *v->nodes)))
            return EM_NOMEM;
        gnode *g = &v->nodes[0];
        v->ver = 1;
        v->n = 1;
        memcpy(g->id, o->node_id, 16);
        g->order = 1;
        g->local = 1;
        int port = atomic_load_explicit(&c->srv->thin_port, memory_order_relaxed);
        snprintf(v->single_cid, sizeof v->single_cid, "%s:%d", o->thin_host, port);
        g->cid = v->single_cid;
        g->cluster_addr = "";
        snprintf(g->host, sizeof g->host, "%s", o->thin_host);
        g->port = port;
        return 0;
    }
    cl_topo *t = cl_node_topo_acquire(o->cluster);
    v->topo = t;
    v->ver = t->major;
    if (t->n && !(v->nodes = em_calloc(t->n, sizeof *v->nodes))) {
        view_release(v);
        return EM_NOMEM;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        gnode *g = &v->nodes[v->n++];
        uuid_put(g->id, t->m[i].id);
        g->order = t->m[i].order;
        g->local = (int)i == t->self;
        g->cid = t->m[i].cid ? t->m[i].cid : "";
        g->cluster_addr = t->m[i].cluster_addr ? t->m[i].cluster_addr : "";
        split_addr(t->m[i].thin_addr, g->host, sizeof g->host, &g->port);
    }
    return 0;
}

/* ---- projection (5100) --------------------------------------------------- */

typedef struct gitem {
    int16_t        code;
    int            servers;         /* SERVER_NODES */
    const uint8_t *name, *val;      /* ATTRIBUTE: val NULL = has the attribute */
    size_t         nlen, vlen;
} gitem;

/* attr_str: node attribute `name` as a string (*is_str = 0 for the integer
 * port); 0 if the node has no such attribute. */
static int attr_str(const gnode *g, const uint8_t *name, size_t nlen, const char **s,
                    int *is_str)
{
    *is_str = 1;
    if (nlen == 18 && !memcmp(name, "clientListenerPort", 18) && g->port) {
        *is_str = 0;
        *s = NULL;
        return 1;
    }
    if (nlen == 21 && !memcmp(name, "org.apache.ignite.ips", 21) && g->host[0]) {
        *s = g->host;
        return 1;
    }
    if (nlen == 18 && !memcmp(name, "ember.cluster.addr", 18)) {
        *s = g->cluster_addr;
        return 1;
    }
    return 0;
}

/* matches: Ignite's forServers / forClients / forAttribute(name, val): the
 * attribute equals val (an Integer never equals a String), or exists when
 * val is null. */
static int matches(const gnode *g, const gitem *it, uint32_t nit)
{
    for (uint32_t i = 0; i < nit; i++) {
        if (it[i].code == 2) {
            if (!it[i].servers)
                return 0;           /* ember has no client nodes */
            continue;
        }
        const char *s;
        int is_str;
        if (!attr_str(g, it[i].name, it[i].nlen, &s, &is_str))
            return 0;
        if (it[i].val && (!is_str || strlen(s) != it[i].vlen || memcmp(s, it[i].val, it[i].vlen)))
            return 0;
    }
    return 1;
}

static int op_node_ids(pr_conn *c, pr_rd *r, em_buf *out)
{
    int64_t topver;
    int32_t nit;
    gitem it[GROUP_MAX_ITEMS];
    if (pr_rd_i64(r, &topver) || pr_rd_i32(r, &nit))
        return pr_bad_request(c, EM_TRUNCATED);
    if (nit < 0 || nit > GROUP_MAX_ITEMS)
        return pr_fail(c, PR_ST_FAILED, "Cluster group projection with %d items (ember "
                       "accepts 0 to %d)", (int)nit, GROUP_MAX_ITEMS);
    for (int32_t i = 0; i < nit; i++) {
        gitem *g = &it[i];
        memset(g, 0, sizeof *g);
        int rc = pr_rd_i16(r, &g->code);
        if (rc)
            return pr_bad_request(c, rc);
        if (g->code == 1) {
            if ((rc = pr_rd_str(c, r, &g->name, &g->nlen)) != 0 ||
                (rc = pr_rd_str(c, r, &g->val, &g->vlen)) != 0)
                return pr_bad_request(c, rc);
            if (!g->name)
                return pr_fail(c, PR_ST_FAILED, "Cluster group attribute name must not be null");
        } else if (g->code == 2) {
            uint8_t b;
            if ((rc = pr_rd_u8(r, &b)) != 0)
                return pr_bad_request(c, rc);
            g->servers = b != 0;
        } else {
            /* Ignite's text (ClientClusterGroupProjection.read). */
            return pr_fail(c, PR_ST_FAILED, "Unknown code: %d", g->code);
        }
    }
    gview v;
    int rc = view_acquire(c, &v);
    if (rc)
        return rc;
    if ((int64_t)v.ver <= topver) {
        view_release(&v);
        return pr_put_bool(out, 0);
    }
    size_t at;
    uint32_t n = 0;
    rc = pr_put_bool(out, 1) || em_buf_put_le64(out, v.ver) ? EM_NOMEM : 0;
    at = out->len;
    if (!rc && em_buf_put_le32(out, 0))
        rc = EM_NOMEM;
    for (uint32_t i = 0; i < v.n && !rc; i++) {
        if (!matches(&v.nodes[i], it, (uint32_t)nit))
            continue;
        if (em_buf_append(out, v.nodes[i].id, 16))
            rc = EM_NOMEM;
        n++;
    }
    if (!rc)
        em_st32(out->p + at, n);
    view_release(&v);
    return rc;
}

/* ---- node info (5101) ---------------------------------------------------- */

static int put_uuid_typed(em_buf *out, const uint8_t id[16])
{
    return em_buf_put_u8(out, BIN_UUID) || em_buf_append(out, id, 16) ? EM_NOMEM : 0;
}

/* put_str_col: a collection (24) of type ARR_LIST (1) holding s, or empty. */
static int put_str_col(em_buf *out, const char *s)
{
    int one = s && *s;
    if (em_buf_put_u8(out, BIN_COLLECTION) || em_buf_put_le32(out, one ? 1 : 0) ||
        em_buf_put_u8(out, 1) || (one && pr_put_str(out, s)))
        return EM_NOMEM;
    return 0;
}

static int put_node_info(em_buf *out, const gnode *g)
{
    uint32_t na = (g->port ? 1 : 0) + (g->host[0] ? 1 : 0) + 1;
    if (put_uuid_typed(out, g->id) || em_buf_put_le32(out, na))
        return EM_NOMEM;
    if (g->port && (pr_put_str(out, "clientListenerPort") || em_buf_put_u8(out, BIN_INT) ||
                    em_buf_put_le32(out, (uint32_t)g->port)))
        return EM_NOMEM;
    if (g->host[0] && (pr_put_str(out, "org.apache.ignite.ips") || pr_put_str(out, g->host)))
        return EM_NOMEM;
    if (pr_put_str(out, "ember.cluster.addr") || pr_put_str(out, g->cluster_addr))
        return EM_NOMEM;
    if (put_str_col(out, g->host) || put_str_col(out, NULL) ||
        em_buf_put_le64(out, g->order) || pr_put_bool(out, g->local) ||
        pr_put_bool(out, 0) || pr_put_bool(out, 0) || pr_put_str(out, g->cid))
        return EM_NOMEM;
    static const uint8_t hash[20];
    if (em_buf_put_u8(out, VER_MAJOR) || em_buf_put_u8(out, VER_MINOR) ||
        em_buf_put_u8(out, VER_MAINT) || pr_put_str(out, VER_STAGE) ||
        em_buf_put_le64(out, 0) || em_buf_put_u8(out, BIN_BYTE_ARR) ||
        em_buf_put_le32(out, sizeof hash) || em_buf_append(out, hash, sizeof hash))
        return EM_NOMEM;
    return 0;
}

/* read_ids: int n and n raw UUIDs, bounded by what the request holds. */
static int read_ids(pr_conn *c, pr_rd *r, const uint8_t **ids, uint32_t *n)
{
    int32_t cnt;
    if (pr_rd_i32(r, &cnt))
        return pr_bad_request(c, EM_TRUNCATED);
    if (cnt < 0 || (size_t)cnt > pr_rd_left(r) / 16)
        return pr_fail(c, PR_ST_FAILED, "Node id count %d does not match the request "
                       "(%zu bytes left)", (int)cnt, pr_rd_left(r));
    *ids = r->p + r->pos;
    *n = (uint32_t)cnt;
    r->pos += (size_t)cnt * 16;
    return 0;
}

static int wanted(const uint8_t *ids, uint32_t n, const uint8_t id[16])
{
    for (uint32_t i = 0; i < n; i++)
        if (!memcmp(ids + (size_t)i * 16, id, 16))
            return 1;
    return 0;
}

static int op_node_info(pr_conn *c, pr_rd *r, em_buf *out)
{
    const uint8_t *ids = NULL;
    uint32_t nids = 0;
    int rc = read_ids(c, r, &ids, &nids);
    if (rc)
        return rc;
    gview v;
    if ((rc = view_acquire(c, &v)) != 0)
        return rc;
    size_t at = out->len;
    uint32_t n = 0;
    if (em_buf_put_le32(out, 0))
        rc = EM_NOMEM;
    /* Topology order, each node once (Ignite: forNodeIds(ids).nodes()). */
    for (uint32_t i = 0; i < v.n && !rc; i++) {
        if (!wanted(ids, nids, v.nodes[i].id))
            continue;
        rc = put_node_info(out, &v.nodes[i]);
        n++;
    }
    if (!rc)
        em_st32(out->p + at, n);
    view_release(&v);
    return rc;
}

/* ---- endpoints (5102) and the topology history ---------------------------- */

void pr_cluster_members(pr_server *s, const cl_topo *t)
{
    uint8_t (*ids)[16] = t->n ? em_malloc((size_t)t->n * 16) : NULL;
    if (t->n && !ids)
        return;                     /* a diff from this version is refused later */
    for (uint32_t i = 0; i < t->n; i++)
        uuid_put(ids[i], t->m[i].id);
    pthread_mutex_lock(&s->hist_mu);
    if (!s->hist && !(s->hist = em_calloc(1, sizeof *s->hist))) {
        pthread_mutex_unlock(&s->hist_mu);
        em_free(ids);
        return;
    }
    struct pr_group_hist *h = s->hist;
    /* A minor change (state) keeps the major version: replace its set. */
    uint32_t slot = h->next;
    for (uint32_t i = 0; i < GROUP_HISTORY; i++)
        if (h->e[i].ids && h->e[i].ver == t->major)
            slot = i;
    if (slot == h->next)
        h->next = (h->next + 1) % GROUP_HISTORY;
    em_free(h->e[slot].ids);
    h->e[slot].ver = t->major;
    h->e[slot].n = t->n;
    h->e[slot].ids = ids;
    pthread_mutex_unlock(&s->hist_mu);
}

void pr_server_set_thin_port(pr_server *s, int port)
{
    atomic_store_explicit(&s->thin_port, port, memory_order_relaxed);
}

void pr_group_free(pr_server *s)
{
    if (!s->hist)
        return;
    for (uint32_t i = 0; i < GROUP_HISTORY; i++)
        em_free(s->hist->e[i].ids);
    em_free(s->hist);
    s->hist = NULL;
}

/* hist_copy: the node ids of version ver, copied (caller frees); 0, or 1
 * when that version is not kept. */
static int hist_copy(pr_server *s, uint64_t ver, uint8_t (**ids)[16], uint32_t *n)
{
    int rc = 1;
    pthread_mutex_lock(&s->hist_mu);
    for (uint32_t i = 0; s->hist && i < GROUP_HISTORY; i++) {
        if (s->hist->e[i].ver != ver || (!s->hist->e[i].ids && s->hist->e[i].n))
            continue;
        if (s->hist->e[i].ver == 0)
            continue;
        *n = s->hist->e[i].n;
        *ids = *n ? em_malloc((size_t)*n * 16) : NULL;
        if (*n && !*ids) {
            rc = EM_NOMEM;
            break;
        }
        if (*n)
            memcpy(*ids, s->hist->e[i].ids, (size_t)*n * 16);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&s->hist_mu);
    return rc;
}

static int put_endpoint(em_buf *out, const gnode *g)
{
    if (em_buf_append(out, g->id, 16) || em_buf_put_le32(out, (uint32_t)g->port) ||
        em_buf_put_le32(out, 1) || pr_put_str(out, g->host))
        return EM_NOMEM;
    return 0;
}

static int op_endpoints(pr_conn *c, pr_rd *r, em_buf *out)
{
    int64_t start, end;
    if (pr_rd_i64(r, &start) || pr_rd_i64(r, &end))
        return pr_bad_request(c, EM_TRUNCATED);
    gview v;
    int rc = view_acquire(c, &v);
    if (rc)
        return rc;
    uint8_t (*old)[16] = NULL;
    uint32_t nold = 0;
    if (end != UNKNOWN_TOP_VER && (uint64_t)end != v.ver) {
        rc = pr_fail(c, PR_ST_FAILED, "Topology history not found [topVer=%lld] (ember keeps "
                     "node endpoints for the current version %llu only)", (long long)end,
                     (unsigned long long)v.ver);
        goto done;
    }
    if (start != UNKNOWN_TOP_VER && (start < 0 || (uint64_t)start > v.ver)) {
        rc = pr_fail(c, PR_ST_FAILED, "Topology history not found [topVer=%lld] (current "
                     "version %llu)", (long long)start, (unsigned long long)v.ver);
        goto done;
    }
    if (start != UNKNOWN_TOP_VER && (uint64_t)start != v.ver) {
        rc = hist_copy(c->srv, (uint64_t)start, &old, &nold);
        if (rc == 1)
            rc = pr_fail(c, PR_ST_FAILED, "Topology history not found [topVer=%lld] (ember "
                         "keeps the last %d versions; ask with -1 for every node)",
                         (long long)start, GROUP_HISTORY);
        if (rc)
            goto done;
    }
    if (em_buf_put_le64(out, v.ver)) {
        rc = EM_NOMEM;
        goto done;
    }
    size_t at = out->len;
    uint32_t n = 0;
    if (em_buf_put_le32(out, 0)) {
        rc = EM_NOMEM;
        goto done;
    }
    int same = start != UNKNOWN_TOP_VER && (uint64_t)start == v.ver;
    for (uint32_t i = 0; i < v.n && !same; i++) {
        const gnode *g = &v.nodes[i];
        if (!g->port || (old && wanted(old[0], nold, g->id)))
            continue;
        if ((rc = put_endpoint(out, g)) != 0)
            goto done;
        n++;
    }
    em_st32(out->p + at, n);
    at = out->len;
    n = 0;
    if (em_buf_put_le32(out, 0)) {
        rc = EM_NOMEM;
        goto done;
    }
    for (uint32_t i = 0; i < nold; i++) {
        int present = 0;
        for (uint32_t j = 0; j < v.n && !present; j++)
            present = !memcmp(v.nodes[j].id, old[i], 16);
        if (present)
            continue;
        if (em_buf_append(out, old[i], 16)) {
            rc = EM_NOMEM;
            goto done;
        }
        n++;
    }
    em_st32(out->p + at, n);
done:
    em_free(old);
    view_release(&v);
    return rc;
}

int pr_op_group(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    switch (op) {
    case 5100: return op_node_ids(c, r, out);
    case 5101: return op_node_info(c, r, out);
    case 5102: return op_endpoints(c, r, out);
    default:   return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
    }
}
