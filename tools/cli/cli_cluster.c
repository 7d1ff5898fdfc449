/* cli_cluster.c - `ember-cli cluster [CACHE]`: the nodes of the cluster the
 * server belongs to, from CLUSTER_GROUP_GET_NODE_IDS (5100) and
 * CLUSTER_GROUP_GET_NODE_INFO (5101), the topology version of the response
 * header, the state (GET_STATE 5000), and with a cache the primary
 * partitions per node (CACHE_PARTITIONS 1101); then what ember's own
 * CLUSTER_INFO (32104) adds: uptime, leader and lease per node, caches with
 * mode, backups and sizes per node, partition states per node (from the
 * exchange's full map), lost partitions and rebalance progress.  Layouts: the table in
 * src/proto/proto_group.c, ignite-thin-protocol.md §4.1.  Every count in a
 * reply is checked against the bytes that carry it.
 */
#include "cli.h"

#include "binary/binary.h"
#include "util/hash.h"
#include "util/mem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 4096              /* more nodes in a reply is refused */

static const char *const state_names[] = { "INACTIVE", "ACTIVE", "ACTIVE_READ_ONLY" };

typedef struct node {
    uint8_t  id[16];
    char     cid[256];
    char     addrs[512];            /* comma-separated */
    int      port;
    int64_t  order;
    int      local;
    uint32_t nparts;
    int32_t *parts;
} node;

/* ---- a bounded reader over one reply ---- */

typedef struct rd { const uint8_t *p; size_t n, pos; int bad; } rd;

static int need(rd *r, size_t k)
{
    if (r->bad || r->n - r->pos < k) {
        r->bad = 1;
        return 0;
    }
    return 1;
}
static uint8_t u8(rd *r) { return need(r, 1) ? r->p[r->pos++] : 0; }
static int32_t i32(rd *r)
{
    if (!need(r, 4)) return 0;
    int32_t v = (int32_t)em_ld32(r->p + r->pos);
    r->pos += 4;
    return v;
}
static int64_t i64(rd *r)
{
    if (!need(r, 8)) return 0;
    int64_t v = (int64_t)em_ld64(r->p + r->pos);
    r->pos += 8;
    return v;
}
/* count: a non-negative count of items at least `each` bytes long. */
static uint32_t count(rd *r, size_t each)
{
    int32_t v = i32(r);
    if (r->bad || v < 0 || (size_t)v > (r->n - r->pos) / (each ? each : 1)) {
        r->bad = 1;
        return 0;
    }
    return (uint32_t)v;
}
/* str: typed string or null into out ("" for null). */
static void str(rd *r, char *out, size_t cap)
{
    out[0] = 0;
    const uint8_t *s;
    uint32_t n;
    if (r->bad || cli_typed_string(r->p, r->n, &r->pos, &s, &n)) {
        r->bad = 1;
        return;
    }
    if (s) {
        size_t k = n < cap - 1 ? n : cap - 1;
        memcpy(out, s, k);
        out[k] = 0;
    }
}
/* obj: skip one data object; start and len say where it was. */
static void obj(rd *r, const uint8_t **start, size_t *len)
{
    size_t l = 0;
    if (r->bad || bin_validate(r->p + r->pos, r->n - r->pos, &l, 64)) {
        r->bad = 1;
        return;
    }
    if (start) *start = r->p + r->pos;
    if (len) *len = l;
    r->pos += l;
}

/* str_col: a collection of strings, appended comma-separated to out. */
static void str_col(rd *r, char *out, size_t cap)
{
    if (u8(r) != BIN_COLLECTION) {
        r->bad = 1;
        return;
    }
    uint32_t n = count(r, 1);
    u8(r);
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        char s[256];
        str(r, s, sizeof s);
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", l ? "," : "", s);
    }
}

/* ---- the three requests ---- */

static int get_ids(cli_conn *c, const cli_opts *o, node **nodes, uint32_t *nn, int64_t *ver)
{
    em_buf b = EM_BUF_INIT;
    em_buf_put_le64(&b, (uint64_t)-1);
    em_buf_put_le32(&b, 0);
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 5100, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    rd r = {p, n, 0, 0};
    if (u8(&r) != 1) {
        r.bad = 1;
    }
    *ver = i64(&r);
    uint32_t k = count(&r, 16);
    if (r.bad || k > MAX_NODES || r.pos + (size_t)k * 16 != n) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CLUSTER_GROUP_GET_NODE_IDS");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    *nodes = em_calloc(k ? k : 1, sizeof **nodes);
    if (!*nodes) {
        snprintf(e.msg, sizeof e.msg, "out of memory");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    for (uint32_t i = 0; i < k; i++)
        memcpy((*nodes)[i].id, p + r.pos + (size_t)i * 16, 16);
    *nn = k;
    return 0;
}

static int get_info(cli_conn *c, const cli_opts *o, node *nodes, uint32_t nn)
{
    em_buf b = EM_BUF_INIT;
    em_buf_put_le32(&b, nn);
    for (uint32_t i = 0; i < nn; i++)
        em_buf_append(&b, nodes[i].id, 16);
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 5101, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    rd r = {p, n, 0, 0};
    uint32_t k = count(&r, 17);
    for (uint32_t i = 0; i < k && !r.bad; i++) {
        if (u8(&r) != BIN_UUID || !need(&r, 16))
            break;
        node *g = NULL;
        for (uint32_t j = 0; j < nn; j++)
            if (!memcmp(nodes[j].id, p + r.pos, 16))
                g = &nodes[j];
        r.pos += 16;
        node scratch;
        if (!g) {
            memset(&scratch, 0, sizeof scratch);
            g = &scratch;           /* not asked for: read and drop */
        }
        uint32_t na = count(&r, 2);
        for (uint32_t a = 0; a < na && !r.bad; a++) {
            char name[128];
            str(&r, name, sizeof name);
            const uint8_t *v;
            size_t vl;
            obj(&r, &v, &vl);
            if (!r.bad && !strcmp(name, "clientListenerPort") && vl == 5 && v[0] == BIN_INT)
                g->port = (int32_t)em_ld32(v + 1);
        }
        str_col(&r, g->addrs, sizeof g->addrs);     /* addresses */
        char hosts[256] = "";
        str_col(&r, hosts, sizeof hosts);           /* host names */
        g->order = i64(&r);
        g->local = u8(&r) != 0;
        u8(&r);                                      /* daemon */
        u8(&r);                                      /* client */
        const uint8_t *v;
        size_t vl;
        size_t at = r.pos;
        obj(&r, &v, &vl);
        if (!r.bad) {
            rd s = {p, n, at, 0};
            if (v[0] == BIN_STRING || v[0] == BIN_NULL)
                str(&s, g->cid, sizeof g->cid);
            else
                snprintf(g->cid, sizeof g->cid, "(type %d)", v[0]);
        }
        u8(&r); u8(&r); u8(&r);                      /* version */
        char stage[64];
        str(&r, stage, sizeof stage);
        i64(&r);
        obj(&r, NULL, NULL);                         /* revision hash */
    }
    if (r.bad || r.pos != n) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CLUSTER_GROUP_GET_NODE_INFO");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    return 0;
}

/* get_parts: CACHE_PARTITIONS for one cache: each node's primary partitions. */
static int get_parts(cli_conn *c, const cli_opts *o, const char *cache, node *nodes,
                     uint32_t nn, int *applicable)
{
    em_buf b = EM_BUF_INIT;
    int32_t id = em_hash_java_str((const uint8_t *)cache, strlen(cache));
    em_buf_put_le32(&b, 1);
    em_buf_put_le32(&b, (uint32_t)id);
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 1101, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    rd r = {p, n, 0, 0};
    i64(&r);
    i32(&r);
    *applicable = -1;               /* the cache is in no group: unknown */
    uint32_t ng = count(&r, 5);
    for (uint32_t gi = 0; gi < ng && !r.bad; gi++) {
        int app = u8(&r) != 0;
        uint32_t nc = count(&r, 4);
        int ours = 0;
        for (uint32_t ci = 0; ci < nc && !r.bad; ci++) {
            if (i32(&r) == id)
                ours = 1;
            if (app) {
                uint32_t nk = count(&r, 8);
                if (need(&r, (size_t)nk * 8))
                    r.pos += (size_t)nk * 8;
            }
        }
        if (ours)
            *applicable = app;
        if (!app)
            continue;
        uint32_t nnodes = count(&r, 21);
        for (uint32_t ni = 0; ni < nnodes && !r.bad; ni++) {
            if (u8(&r) != BIN_UUID || !need(&r, 16))
                break;
            node *g = NULL;
            for (uint32_t j = 0; j < nn; j++)
                if (!memcmp(nodes[j].id, p + r.pos, 16))
                    g = &nodes[j];
            r.pos += 16;
            uint32_t np = count(&r, 4);
            if (r.bad)
                break;
            if (ours && g && !g->parts && np) {
                if (!(g->parts = em_malloc((size_t)np * sizeof *g->parts))) {
                    snprintf(e.msg, sizeof e.msg, "out of memory");
                    return cli_report(o, CLI_ELOCAL, &e);
                }
                for (uint32_t k = 0; k < np; k++)
                    g->parts[k] = (int32_t)em_ld32(p + r.pos + (size_t)k * 4);
                g->nparts = np;
            }
            r.pos += (size_t)np * 4;
        }
    }
    if (r.bad || r.pos != n) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CACHE_PARTITIONS");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    return 0;
}

/* get_endpoints: CLUSTER_GROUP_GET_NODE_ENDPOINTS (-1, -1), what a
 * partition-aware client connects to, appended to out as a JSON array
 * (*ver = the version it is for). */
static int get_endpoints(cli_conn *c, const cli_opts *o, em_buf *out, int64_t *ver)
{
    em_buf b = EM_BUF_INIT;
    em_buf_put_le64(&b, (uint64_t)-1);
    em_buf_put_le64(&b, (uint64_t)-1);
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 5102, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    rd r = {p, n, 0, 0};
    *ver = i64(&r);
    uint32_t k = count(&r, 24);
    char tmp[128];
    em_buf_append(out, "[", 1);
    for (uint32_t i = 0; i < k && !r.bad; i++) {
        if (!need(&r, 16))
            break;
        char id[37];
        cli_uuid_str(p + r.pos, id);
        r.pos += 16;
        int32_t port = i32(&r);
        uint32_t na = count(&r, 1);
        int l = snprintf(tmp, sizeof tmp, "%s{\"id\":\"%s\",\"port\":%d,\"addresses\":[",
                         i ? "," : "", id, port);
        em_buf_append(out, tmp, (size_t)l);
        for (uint32_t a = 0; a < na && !r.bad; a++) {
            char s[256];
            str(&r, s, sizeof s);
            if (a)
                em_buf_append(out, ",", 1);
            cli_json_str(out, s, strlen(s));
        }
        em_buf_append(out, "]}", 2);
    }
    em_buf_append(out, "]", 1);
    uint32_t removed = count(&r, 16);
    if (r.bad || r.pos + (size_t)removed * 16 != n) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CLUSTER_GROUP_GET_NODE_ENDPOINTS");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    return 0;
}

/* ---- for other commands ---- */

int cli_cluster_nodes(cli_conn *c, const cli_opts *o, cli_node **out, uint32_t *nout)
{
    node *nodes = NULL;
    uint32_t nn = 0;
    int64_t ver = 0;
    *out = NULL;
    *nout = 0;
    int ret = get_ids(c, o, &nodes, &nn, &ver);
    if (!ret)
        ret = get_info(c, o, nodes, nn);
    if (!ret && !(*out = em_calloc(nn ? nn : 1, sizeof **out))) {
        fprintf(stderr, "ember-cli: out of memory\n");
        ret = 2;
    }
    for (uint32_t i = 0; !ret && i < nn; i++) {
        cli_node *d = &(*out)[i];
        memcpy(d->id, nodes[i].id, 16);
        snprintf(d->cid, sizeof d->cid, "%s", nodes[i].cid);
        /* the first address the node publishes */
        size_t k = strcspn(nodes[i].addrs, ",");
        snprintf(d->host, sizeof d->host, "%.*s", (int)k, nodes[i].addrs);
        d->port = nodes[i].port;
        d->local = nodes[i].local;
    }
    if (!ret)
        *nout = nn;
    em_free(nodes);
    return ret;
}

/* cluster_info: ember's CLUSTER_INFO (32104) in the format asked for (0
 * JSON, 1 text): uptime, leader and lease per node, caches with sizes per
 * node, partition states per node, lost partitions, rebalance. */
static int cluster_info(cli_conn *c, const cli_opts *o, int fmt, em_buf *out)
{
    em_buf b = EM_BUF_INIT;
    em_buf_put_u8(&b, (uint8_t)fmt);
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 32104, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    size_t pos = 0;
    const uint8_t *s;
    uint32_t sl;
    if (cli_typed_string(p, n, &pos, &s, &sl) || !s || pos != n) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CLUSTER_INFO");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    while (sl && s[sl - 1] == '\n')
        sl--;
    em_buf_append(out, s, sl);
    return 0;
}

/* ---- output ---- */

static void json_nodes(em_buf *out, const node *nodes, uint32_t nn, int with_parts)
{
    char tmp[128];
    em_buf_append(out, "\"nodes\":[", 9);
    for (uint32_t i = 0; i < nn; i++) {
        const node *g = &nodes[i];
        char id[37];
        cli_uuid_str(g->id, id);
        int k = snprintf(tmp, sizeof tmp, "%s{\"id\":\"%s\",\"consistent_id\":", i ? "," : "", id);
        em_buf_append(out, tmp, (size_t)k);
        cli_json_str(out, g->cid, strlen(g->cid));
        em_buf_append(out, ",\"addresses\":[", 14);
        const char *a = g->addrs;
        for (int first = 1; *a; first = 0) {
            const char *comma = strchr(a, ',');
            size_t l = comma ? (size_t)(comma - a) : strlen(a);
            if (!first)
                em_buf_append(out, ",", 1);
            cli_json_str(out, a, l);
            a += l + (comma ? 1 : 0);
        }
        k = snprintf(tmp, sizeof tmp, "],\"port\":%d,\"order\":%" PRId64 ",\"local\":%s", g->port,
                     g->order, g->local ? "true" : "false");
        em_buf_append(out, tmp, (size_t)k);
        if (with_parts) {
            k = snprintf(tmp, sizeof tmp, ",\"partition_count\":%u,\"partitions\":[", g->nparts);
            em_buf_append(out, tmp, (size_t)k);
            for (uint32_t j = 0; j < g->nparts; j++) {
                k = snprintf(tmp, sizeof tmp, "%s%d", j ? "," : "", g->parts[j]);
                em_buf_append(out, tmp, (size_t)k);
            }
            em_buf_append(out, "]", 1);
        }
        em_buf_append(out, "}", 1);
    }
    em_buf_append(out, "]", 1);
}

int cli_cmd_cluster(cli_conn *c, const cli_opts *o, const char *cache)
{
    node *nodes = NULL;
    uint32_t nn = 0;
    int64_t ver = 0;
    int ret, applicable = -1;
    if (cache && !cli_utf8_valid((const uint8_t *)cache, strlen(cache))) {
        fprintf(stderr, "ember-cli: cache name is not valid UTF-8\n");
        return 2;
    }
    if ((ret = get_ids(c, o, &nodes, &nn, &ver)) != 0 ||
        (ret = get_info(c, o, nodes, nn)) != 0)
        goto out;
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 5000, NULL, &p, &n, &e);
    if (rc) {
        ret = cli_report(o, rc, &e);
        goto out;
    }
    if (n != 1 || p[0] > 2) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: GET_STATE");
        ret = cli_report(o, CLI_ELOCAL, &e);
        goto out;
    }
    const char *state = state_names[p[0]];
    if (cache && (ret = get_parts(c, o, cache, nodes, nn, &applicable)) != 0)
        goto out;
    em_buf ep = EM_BUF_INIT;
    int64_t ep_ver = 0;
    if (o->json && (ret = get_endpoints(c, o, &ep, &ep_ver)) != 0) {
        em_buf_free(&ep);
        goto out;
    }
    /* The header's version (major.minor) when a reply carried one; the
     * ids reply's major otherwise. */
    int64_t major = c->has_topo ? c->topo_major : ver;
    int32_t minor = c->has_topo ? c->topo_minor : 0;
    em_buf info = EM_BUF_INIT;
    if ((ret = cluster_info(c, o, o->json ? 0 : 1, &info)) != 0) {
        em_buf_free(&ep);
        em_buf_free(&info);
        goto out;
    }
    em_buf out = EM_BUF_INIT;
    char tmp[256];
    int k;
    if (o->json) {
        k = snprintf(tmp, sizeof tmp, "{\"ok\":true,\"topology\":{\"major\":%" PRId64
                     ",\"minor\":%d},\"state\":\"%s\",", major, minor, state);
        em_buf_append(&out, tmp, (size_t)k);
        if (cache) {
            em_buf_append(&out, "\"cache\":", 8);
            cli_json_str(&out, cache, strlen(cache));
            k = snprintf(tmp, sizeof tmp, ",\"partition_aware\":%s,",
                         applicable == 1 ? "true" : "false");
            em_buf_append(&out, tmp, (size_t)k);
        }
        json_nodes(&out, nodes, nn, cache != NULL);
        k = snprintf(tmp, sizeof tmp, ",\"endpoints_version\":%" PRId64 ",\"endpoints\":", ep_ver);
        em_buf_append(&out, tmp, (size_t)k);
        em_buf_append(&out, ep.p, ep.len);
        em_buf_append(&out, ",\"details\":", 11);
        em_buf_append(&out, info.p, info.len);
        em_buf_append(&out, "}\n", 2);
    } else {
        k = snprintf(tmp, sizeof tmp, "topology %" PRId64 ".%d, state %s, %u node%s\n", major,
                     minor, state, nn, nn == 1 ? "" : "s");
        em_buf_append(&out, tmp, (size_t)k);
        if (cache && applicable != 1) {
            k = snprintf(tmp, sizeof tmp, "cache %s: %s\n", cache, applicable < 0
                         ? "not found (no partitions reported)"
                         : "not partition-aware (no per-node partitions)");
            em_buf_append(&out, tmp, (size_t)k);
        }
        k = snprintf(tmp, sizeof tmp, "%-36s  %-5s  %-24s  %-24s%s\n", "NODE ID", "ORDER",
                     "CONSISTENT ID", "THIN ADDRESS", cache ? "  PARTITIONS" : "");
        em_buf_append(&out, tmp, (size_t)k);
        for (uint32_t i = 0; i < nn; i++) {
            char id[37], addr[600];
            cli_uuid_str(nodes[i].id, id);
            if (nodes[i].port)
                snprintf(addr, sizeof addr, "%s:%d", nodes[i].addrs, nodes[i].port);
            else
                snprintf(addr, sizeof addr, "%s", nodes[i].addrs[0] ? nodes[i].addrs : "-");
            k = snprintf(tmp, sizeof tmp, "%-36s  %-5" PRId64 "  %-24s  %-24s", id,
                         nodes[i].order, nodes[i].cid, addr);
            em_buf_append(&out, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
            if (cache) {
                k = snprintf(tmp, sizeof tmp, "  %u", nodes[i].nparts);
                em_buf_append(&out, tmp, (size_t)k);
            }
            em_buf_append(&out, nodes[i].local ? "  (this node)\n" : "\n",
                          nodes[i].local ? 14 : 1);
        }
    }
    if (!o->json) {
        em_buf_append(&out, info.p, info.len);
        em_buf_append(&out, "\n", 1);
    }
    fwrite(out.p, 1, out.len, stdout);
    em_buf_free(&out);
    em_buf_free(&ep);
    em_buf_free(&info);
    ret = 0;
out:
    for (uint32_t i = 0; i < nn; i++)
        em_free(nodes[i].parts);
    em_free(nodes);
    return ret;
}

/* ---- cluster baseline (ember's BASELINE op, 32108) ---- */

/* cli_cmd_baseline: `cluster baseline [set|add|remove ID[,ID...] |
 * set-current | clear]`: sends the action, prints the baseline after it. */
int cli_cmd_baseline(cli_conn *c, const cli_opts *o, char **args, int nargs)
{
    static const char *const acts[] = { "show", "set", "add", "remove", "set-current",
                                        "clear" };
    int act = nargs ? -1 : 0;
    for (int i = 0; nargs && i < 6; i++)
        if (!strcmp(args[0], acts[i]))
            act = i;
    int want_ids = act >= 1 && act <= 3;
    if (act < 0 || nargs > 1 + want_ids || (want_ids && nargs != 2)) {
        fprintf(stderr, "ember-cli: cluster baseline [set|add|remove ID[,ID...] | "
                        "set-current | clear]\n");
        return 2;
    }
    em_buf b = EM_BUF_INIT;
    em_buf_put_u8(&b, (uint8_t)act);
    size_t at = b.len;
    em_buf_put_le32(&b, 0);
    uint32_t n = 0;
    for (const char *s = want_ids ? args[1] : ""; *s;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l)
            cli_put_str(&b, s, l), n++;
        s += l + (e != NULL);
    }
    if (want_ids && !n) {
        em_buf_free(&b);
        fprintf(stderr, "ember-cli: no consistent id given\n");
        return 2;
    }
    em_st32(b.p + at, n);
    const uint8_t *p;
    size_t pn;
    cli_err e;
    int rc = cli_call(c, 32108, &b, &p, &pn, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    rd r = { p, pn, 0, 0 };
    int64_t major = i64(&r);
    int32_t minor = i32(&r);
    int set = u8(&r);
    uint32_t k = count(&r, 14);
    if (o->json)
        printf("{\"ok\":true,\"topology\":\"%" PRId64 ".%d\",\"set\":%s,\"nodes\":[",
               major, minor, set ? "true" : "false");
    else if (set)
        printf("Baseline (topology %" PRId64 ".%d):\n", major, minor);
    else
        printf("No baseline set: partitions follow the members (topology %" PRId64 ".%d)\n",
               major, minor);
    int others = 0;
    for (uint32_t i = 0; i < k && !r.bad; i++) {
        char cid[256];
        str(&r, cid, sizeof cid);
        int fl = u8(&r);
        int64_t order = i64(&r);
        if (r.bad)
            break;
        if (o->json) {
            em_buf j = EM_BUF_INIT;
            cli_json_str(&j, cid, strlen(cid));
            printf("%s{\"id\":%.*s,\"baseline\":%s,\"online\":%s,\"order\":%" PRId64 "}",
                   i ? "," : "", (int)j.len, (const char *)j.p, fl & 1 ? "true" : "false",
                   fl & 2 ? "true" : "false", fl & 2 ? order : -1);
            em_buf_free(&j);
            continue;
        }
        if (set && !(fl & 1) && !others++)
            printf("Other nodes (no partitions here):\n");
        if (fl & 2)
            printf("    ConsistentId=%s, State=ONLINE, Order=%" PRId64 "\n", cid, order);
        else
            printf("    ConsistentId=%s, State=OFFLINE\n", cid);
    }
    if (o->json)
        printf("]}\n");
    if (r.bad || r.pos != r.n) {
        fprintf(stderr, "ember-cli: malformed reply to BASELINE\n");
        return 2;
    }
    return 0;
}
