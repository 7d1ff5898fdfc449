/* proto_baseline.c - PR_OP_BASELINE: show and change the cluster's baseline
 * (Ignite's baseline topology; control.sh --baseline, which thin clients
 * lack; ember-cli cluster baseline).
 *
 * Request:  byte action | int n | n x string consistent id
 *   0 show   1 set (the list)   2 add (members now)   3 remove (not members)
 *   4 set to the members now    5 clear: affinity follows the members again
 * Response: long major | int minor | bool set | int n | n x (string id |
 *           byte flags (1 in the baseline, 2 online) | long join order or -1)
 *           - every baseline node, then the members outside it.
 *
 * The change goes through the metadata group (BASELINE_SET); the exchange
 * it starts moves partitions (cl_topo_affinity has the placement rule).
 * Ignite's checks: a node added must be online, a node removed offline (a
 * running node leaves the baseline by stopping first), a baseline is never
 * empty and holds at least one running node.
 */
#include <string.h>

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_node.h"
#include "cluster/cl_topo.h"
#include "proto/proto_int.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

enum { B_SHOW, B_SET, B_ADD, B_REMOVE, B_CURRENT, B_CLEAR };

/* A working list of ids (views into the request, the topology, or both). */
typedef struct idlist {
    cl_meta_bytes *v;
    uint32_t       n, cap;
} idlist;

static int idx_of(const idlist *l, const uint8_t *p, size_t n)
{
    for (uint32_t i = 0; i < l->n; i++)
        if (l->v[i].len == n && !memcmp(l->v[i].p, p, n))
            return (int)i;
    return -1;
}

static int push(idlist *l, const uint8_t *p, size_t n)
{
    if (idx_of(l, p, n) >= 0)
        return 0;
    if (l->n == l->cap)
        return EM_BADLEN;
    l->v[l->n++] = (cl_meta_bytes){ p, (uint32_t)n };
    return 0;
}

static int member_of(const cl_topo *t, const uint8_t *p, size_t n)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (strlen(t->m[i].cid) == n && !memcmp(t->m[i].cid, p, n))
            return (int)i;
    return -1;
}

static int put_view(const cl_topo *t, em_buf *out)
{
    uint32_t others = 0;
    for (uint32_t i = 0; i < t->n; i++)
        others += t->nbl && !t->m[i].data;
    uint32_t n = t->nbl ? t->nbl + others : t->n;
    int rc = em_buf_put_le64(out, t->major) || em_buf_put_le32(out, t->minor) ||
             em_buf_put_u8(out, t->nbl != 0) || em_buf_put_le32(out, n);
    for (uint32_t i = 0; i < t->nbl && !rc; i++) {
        int m = member_of(t, (const uint8_t *)t->bl[i], strlen(t->bl[i]));
        rc = pr_put_str(out, t->bl[i]) || em_buf_put_u8(out, m >= 0 ? 3 : 1) ||
             em_buf_put_le64(out, m >= 0 ? t->m[m].order : UINT64_MAX);
    }
    for (uint32_t i = 0; i < t->n && !rc; i++)
        if (!t->nbl || !t->m[i].data)
            rc = pr_put_str(out, t->m[i].cid) || em_buf_put_u8(out, t->nbl ? 2 : 3) ||
                 em_buf_put_le64(out, t->m[i].order);
    return rc ? EM_NOMEM : 0;
}

/* change builds the new baseline into nb from t and the request's ids:
 * 0, or the status of a refusal (its message set). */
static int change(pr_conn *c, cl_topo *t, int action, const idlist *req, idlist *nb)
{
    if (action == B_SET) {
        for (uint32_t i = 0; i < req->n; i++)
            (void)push(nb, req->v[i].p, req->v[i].len);
    } else if (action == B_CURRENT || (!t->nbl && (action == B_ADD || action == B_REMOVE))) {
        /* No baseline yet: adding or removing starts from the members. */
        for (uint32_t i = 0; i < t->n; i++)
            (void)push(nb, (const uint8_t *)t->m[i].cid, strlen(t->m[i].cid));
    } else {
        for (uint32_t i = 0; i < t->nbl; i++)
            (void)push(nb, (const uint8_t *)t->bl[i], strlen(t->bl[i]));
    }
    for (uint32_t i = 0; i < req->n && action == B_ADD; i++) {
        if (member_of(t, req->v[i].p, req->v[i].len) < 0)
            return pr_fail(c, PR_ST_FAILED, "Node not found for consistent ID: %.*s",
                           (int)req->v[i].len, (const char *)req->v[i].p);
        (void)push(nb, req->v[i].p, req->v[i].len);
    }
    for (uint32_t i = 0; i < req->n && action == B_REMOVE; i++) {
        int k = idx_of(nb, req->v[i].p, req->v[i].len);
        if (k < 0)
            return pr_fail(c, PR_ST_FAILED, "Node not found in the baseline: %.*s",
                           (int)req->v[i].len, (const char *)req->v[i].p);
        if (member_of(t, req->v[i].p, req->v[i].len) >= 0)
            return pr_fail(c, PR_ST_FAILED, "Failed to remove node from the baseline: it is "
                           "online [consistentId=%.*s]; stop it first", (int)req->v[i].len,
                           (const char *)req->v[i].p);
        nb->v[k] = nb->v[--nb->n];
    }
    int online = 0;
    for (uint32_t i = 0; i < nb->n; i++)
        online |= member_of(t, nb->v[i].p, nb->v[i].len) >= 0;
    if (!online)
        return pr_fail(c, PR_ST_FAILED, "The new baseline must contain at least one online "
                       "node");
    return 0;
}

int pr_baseline_default(pr_conn *c)
{
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    idlist none = { NULL, 0, 0 }, nb = { NULL, 0, t->n };
    int rc = 0;
    em_buf e = EM_BUF_INIT;
    if (!t->nbl && t->n) {
        if (!(nb.v = em_malloc(sizeof *nb.v * nb.cap)))
            rc = EM_NOMEM;
        if (!rc)
            rc = change(c, t, B_CURRENT, &none, &nb);
        if (!rc && (rc = cl_meta_enc_baseline(&e, nb.v, nb.n)) != 0 && rc != EM_NOMEM)
            rc = pr_fail(c, PR_ST_FAILED, "Bad consistent id: %s", em_strerror(rc));
    }
    cl_node_topo_release(t);
    if (!rc && e.len) {
        rc = pr_cluster_propose(c, e.p, e.len, "set the baseline before activation");
        if (!rc)
            EM_INFO("cluster: activated without a baseline: its %u members are the baseline",
                    nb.n);
    }
    em_buf_free(&e);
    em_free(nb.v);
    return rc;
}

int pr_op_baseline(pr_conn *c, pr_rd *r, em_buf *out)
{
    uint8_t action;
    int32_t n;
    if (pr_rd_u8(r, &action) || pr_rd_i32(r, &n))
        return pr_bad_request(c, EM_TRUNCATED);
    if (action > B_CLEAR || n < 0 || (uint32_t)n > CL_META_MAX_MEMBERS)
        return pr_bad_request(c, EM_INVAL);
    cl_node *node = c->srv->opt.cluster;
    if (!node)
        return pr_fail(c, PR_ST_FAILED, "This node is not a cluster member: it has no "
                       "baseline");
    int rc = 0;
    idlist req = { NULL, 0, (uint32_t)n }, nb = { NULL, 0, 0 };
    if (n && !(req.v = em_malloc(sizeof *req.v * (size_t)n)))
        return EM_NOMEM;
    for (int32_t i = 0; i < n && !rc; i++) {
        const uint8_t *s;
        size_t sl;
        if (pr_rd_str(c, r, &s, &sl) || !s || !sl || sl > CL_META_MAX_CID)
            rc = pr_bad_request(c, EM_INVAL);
        else
            (void)push(&req, s, sl);
    }
    if (!rc && action == B_SET && !req.n)
        rc = pr_fail(c, PR_ST_FAILED, "The new baseline must contain at least one node");
    cl_topo *t = cl_node_topo_acquire(node);
    if (!rc && action != B_SHOW && action != B_CLEAR) {
        nb.cap = req.n + (t->nbl > t->n ? t->nbl : t->n);
        if (!(nb.v = em_malloc(sizeof *nb.v * nb.cap)))
            rc = EM_NOMEM;
        if (!rc)
            rc = change(c, t, action, &req, &nb);
    }
    em_buf e = EM_BUF_INIT;
    if (!rc && action != B_SHOW) {
        if (nb.n > CL_META_MAX_MEMBERS)
            rc = pr_fail(c, PR_ST_FAILED, "A baseline holds at most %u nodes",
                         CL_META_MAX_MEMBERS);
        else if ((rc = cl_meta_enc_baseline(&e, nb.v, nb.n)) != 0 && rc != EM_NOMEM)
            rc = pr_fail(c, PR_ST_FAILED, "Bad consistent id: %s", em_strerror(rc));
    }
    cl_node_topo_release(t);
    if (!rc && action != B_SHOW)
        rc = pr_cluster_propose(c, e.p, e.len, "change the baseline");
    em_buf_free(&e);
    em_free(req.v);
    em_free(nb.v);
    if (rc)
        return rc;
    t = cl_node_topo_acquire(node);
    rc = put_view(t, out);
    cl_node_topo_release(t);
    return rc;
}
