/* proto.c - framing, handshake, response headers and op dispatch of the
 * Ignite thin-client protocol 1.0.0-1.7.0.
 *
 * Layouts: ../shared/reference/ignite-thin-protocol.md §1.1 (framing),
 * §1.2-§1.3 (handshake), §1.4-§1.5 (headers), §1.6 (status codes), §1.8
 * (features), §2.1 (op codes), §2.8 (cluster ops).  Request handlers live in
 * proto_cache.c, proto_cfg.c, proto_meta.c and proto_sql.c.
 */
#include "proto/proto_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "binary/binary.h"
#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_tx.h"
#include "sql/sql.h"
#include "util/clock.h"
#include "util/mem.h"

/* Features ember implements (reference §1.8), as the bitmask bytes. */
static const uint8_t our_features[PR_FEAT_BYTES] = {
    (1u << PR_FEAT_USER_ATTRIBUTES) | (1u << PR_FEAT_CLUSTER_STATES) |
        (1u << PR_FEAT_CLUSTER_GROUP_GET_NODES_ENDPOINTS) | (1u << PR_FEAT_CLUSTER_GROUPS),
    (1u << (PR_FEAT_BINARY_CONFIGURATION - 8)) | (1u << (PR_FEAT_HEARTBEAT - 8)),
    0, 0
};

/* ---- options, server, connection -------------------------------------- */

void pr_options_default(pr_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_msg = 64u << 20;
    o->max_handshake_msg = 1u << 20;
    o->max_cursors = 128;
    o->max_depth = BIN_MAX_DEPTH_DEFAULT;
    o->state = PR_STATE_ACTIVE;
    if (getrandom(o->node_id, sizeof o->node_id, 0) != (ssize_t)sizeof o->node_id) {
        uint64_t t = em_now_ns() ^ (uint64_t)em_wall_ms() << 20;
        memcpy(o->node_id, &t, 8);
        memcpy(o->node_id + 8, &t, 8);
    }
    /* A version-4 UUID: the wire carries the most significant long first,
     * each little-endian (reference §3.1), so the version nibble is the high
     * half of byte 1 and the variant bits top byte 15. */
    o->node_id[1] = (uint8_t)((o->node_id[1] & 0x0f) | 0x40);
    o->node_id[15] = (uint8_t)((o->node_id[15] & 0x3f) | 0x80);
}

int pr_server_new(pr_server **out, struct st_store *st, struct bin_registry *reg,
                  const pr_options *o)
{
    pr_server *s = em_calloc(1, sizeof *s);
    if (!s)
        return EM_NOMEM;
    pthread_mutex_init(&s->state_mu, NULL);
    pthread_mutex_init(&s->hist_mu, NULL);
    pthread_mutex_init(&s->apply_mu, NULL);
    pthread_mutex_init(&s->rwait_mu, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->apply_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    int state = o->state;
    atomic_store(&s->state, state >= PR_STATE_INACTIVE && state <= PR_STATE_ACTIVE_READ_ONLY
                                ? state : PR_STATE_ACTIVE);
    s->st = st;
    s->reg = reg;
    s->opt = *o;
    if (!s->opt.max_msg) s->opt.max_msg = 64u << 20;
    if (!s->opt.max_handshake_msg) s->opt.max_handshake_msg = 1u << 20;
    if (!s->opt.max_depth) s->opt.max_depth = BIN_MAX_DEPTH_DEFAULT;
    if (o->username) {
        s->username = em_strndup(o->username, strlen(o->username));
        s->password = em_strndup(o->password ? o->password : "", o->password ? strlen(o->password) : 0);
        if (!s->username || !s->password) {
            pr_server_free(s);
            return EM_NOMEM;
        }
    }
    s->opt.username = s->username;
    s->opt.password = s->password;
    atomic_store(&s->next_cursor, 1);
    atomic_store(&s->topo_ver, (uint64_t)1 << 32);
    atomic_store(&s->thin_port, o->thin_port);
    if ((o->cluster && !(s->apply_conn = pr_conn_new(s))) ||
        !(s->sql = sq_engine_new(st, reg)) || cl_txm_new(&s->txm, st)) {
        pr_server_free(s);
        return EM_NOMEM;
    }
    if (o->meta_persist)
        sq_engine_set_persist(s->sql, o->meta_persist, o->meta_arg);
    if (o->sql_query_memory)
        sq_engine_set_query_memory(s->sql, o->sql_query_memory > 0 ? o->sql_query_memory : 0);
    *out = s;
    return 0;
}

void pr_server_free(pr_server *s)
{
    if (!s)
        return;
    pr_server_sql_stop(s);
    sq_engine_free(s->sql);
    em_free(s->username);
    em_free(s->password);
    pr_conn_free(s->apply_conn);
    pr_conn_free(s->fwd_conn);
    pr_group_free(s);
    pr_txc_free(s);
    cl_txm_free(s->txm);
    pthread_mutex_destroy(&s->state_mu);
    pthread_mutex_destroy(&s->hist_mu);
    pthread_mutex_destroy(&s->apply_mu);
    pthread_mutex_destroy(&s->rwait_mu);
    pthread_cond_destroy(&s->apply_cv);
    em_free(s);
}

int pr_server_state(const pr_server *s)
{
    return atomic_load_explicit(&s->state, memory_order_acquire);
}

pr_conn *pr_conn_new(pr_server *s)
{
    pr_conn *c = em_calloc(1, sizeof *c);
    if (c)
        c->srv = s;
    return c;
}

void pr_conn_free(pr_conn *c)
{
    if (!c)
        return;
    /* The lists of this pass's held replies and forwards are the loop
     * thread's: c leaves them here, also when an SQL thread frees it. */
    pr_afwd_unpass(c);
    pr_ackw_unpass(c);
    if (pr_sqlx_release(c))
        return;                     /* an SQL thread frees it when its job ends */
    pr_cursors_close(c);
    pr_txs_close(c);
    pr_conn_free(c->sub);
    pr_conn_free(c->sqlkv);
    em_free(c->sqlrem);
    pr_afwd_free(c);
    pr_ackw_free(c);
    em_buf_free(&c->fwd_resp);
    em_buf_free(&c->rid_env);
    em_buf_free(&c->rid_resp);
    sq_sess_free(c->sql);
    em_free(c->cur);
    em_buf_free(&c->kscratch);
    em_buf_free(&c->vscratch);
    em_buf_free(&c->escratch);
    em_buf_free(&c->tmp);
    em_free(c->ks);
    em_free(c->vs);
    em_free(c);
}

int pr_conn_ready(const pr_conn *c) { return c->ready; }
int pr_conn_parked(const pr_conn *c) { return c->npq != 0 || c->job_busy || c->fwd_busy; }

void pr_server_tx_stats(pr_server *s, uint64_t *open, uint64_t *waiting, uint64_t *locks)
{
    *open = cl_txm_open(s->txm);
    /* the manager's count includes the members told to wait here */
    pthread_mutex_lock(&s->rwait_mu);
    uint32_t w = cl_txm_waiters(s->txm), remote = s->nrwait;
    pthread_mutex_unlock(&s->rwait_mu);
    *waiting = w > remote ? w - remote : 0;
    *locks = st_entry_locks_held(s->st);
}

/* txm_wake: locks were released here: this node's parked requests run
 * again, and the members told to wait here are told too. */
static void txm_wake(void *arg)
{
    pr_server *s = arg;
    if (s->tx_wake)
        s->tx_wake(s->tx_wake_arg);
    pr_txc_wake_waiters(s);
}

void pr_server_set_direct(pr_server *s, pr_direct_fn send, int (*idle)(void *arg, void *io),
                          void *arg)
{
    s->direct_send = send;
    s->out_idle = idle;
    s->direct_arg = arg;
}

void pr_conn_set_io(pr_conn *c, void *io) { c->io = io; }

void pr_server_set_tx_wake(pr_server *s, void (*fn)(void *arg), void *arg)
{
    s->tx_wake = fn;
    s->tx_wake_arg = arg;
    cl_txm_set_wake(s->txm, txm_wake, s);
}

void pr_server_tx_woken(pr_server *s)
{
    atomic_fetch_add_explicit(&s->rwake_got, 1, memory_order_relaxed);
    if (s->tx_wake)
        s->tx_wake(s->tx_wake_arg);
}
int pr_conn_version(const pr_conn *c) { return c->ver; }

/* ---- reader and writer helpers ---------------------------------------- */

int pr_rd_obj(pr_conn *c, pr_rd *r, const uint8_t **p, size_t *len)
{
    size_t l = 0;
    int rc = bin_validate(r->p + r->pos, r->n - r->pos, &l, c->srv->opt.max_depth);
    if (rc)
        return rc;
    *p = r->p + r->pos;
    *len = l;
    r->pos += l;
    return 0;
}

int pr_reply_parse(pr_conn *c, const uint8_t *p, size_t n, int32_t *status, const uint8_t **msg,
                   size_t *ml, const uint8_t **pay, size_t *pn)
{
    if (n < 14)
        return EM_PROTO;
    uint16_t flags = em_ld16(p + 12);
    pr_rd r = { p, n, 14 };
    if (flags & 2)
        r.pos += 12;                /* topology version */
    if (r.pos > n)
        return EM_PROTO;
    *status = 0;
    *msg = NULL;
    *ml = 0;
    if ((flags & 1) && (pr_rd_i32(&r, status) || pr_rd_str(c, &r, msg, ml)))
        return EM_PROTO;
    if ((flags & 1) && *status <= 0)
        *status = PR_ST_FAILED;
    *pay = p + r.pos;
    *pn = n - r.pos;
    return 0;
}

int pr_rd_str(pr_conn *c, pr_rd *r, const uint8_t **s, size_t *len)
{
    if (r->pos >= r->n)
        return EM_TRUNCATED;
    uint8_t t = r->p[r->pos];
    if (t == BIN_NULL) {
        r->pos++;
        *s = NULL;
        *len = 0;
        return 0;
    }
    if (t != BIN_STRING)
        return EM_BADTYPE;
    const uint8_t *o;
    size_t ol;
    int rc = pr_rd_obj(c, r, &o, &ol);
    if (rc)
        return rc;
    *s = o + 5;
    *len = ol - 5;
    return 0;
}

int pr_fail(pr_conn *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    return status;
}

int pr_bad_request(pr_conn *c, int code)
{
    return pr_fail(c, PR_ST_FAILED, "Malformed request: %s", em_strerror(code));
}

int pr_refuse_inactive(pr_conn *c)
{
    return pr_fail(c, PR_ST_FAILED, "Can not perform the operation because the cluster is "
                   "inactive. Note, that the cluster is considered inactive by default if "
                   "Ignite Persistent Store is used to let all the nodes join the cluster. To "
                   "activate the cluster call Ignite.active(true).");
}

int pr_refuse_read_only(pr_conn *c, const char *what, const char *group, const char *cache)
{
    /* Java formats a null group name as "null". */
    return pr_fail(c, PR_ST_FAILED, "Failed to perform %s operation (cluster is in read-only "
                   "mode) [cacheGrp=%s, cache=%s]", what, group ? group : "null",
                   cache ? cache : "null");
}

int pr_put_strn(em_buf *out, const uint8_t *s, size_t n)
{
    if (em_buf_reserve(out, 5 + n))
        return EM_NOMEM;
    out->p[out->len] = BIN_STRING;
    em_st32(out->p + out->len + 1, (uint32_t)n);
    if (n)
        memcpy(out->p + out->len + 5, s, n);
    out->len += 5 + n;
    return 0;
}

int pr_put_str(em_buf *out, const char *s)
{
    if (!s)
        return em_buf_put_u8(out, BIN_NULL);
    return pr_put_strn(out, (const uint8_t *)s, strlen(s));
}

/* The store appends the value at pos, where the reply needs it; only the
 * rare 103 root is moved afterwards, to make room for its 27 header (an
 * earlier version reserved those 5 bytes up front and moved every plain
 * value back over them: a second copy of each GET's value). */
int pr_val_begin(em_buf *out, size_t *pos)
{
    *pos = out->len;
    return 0;
}

/* may_hold_complex: could a stored container hold complex elements that
 * need 27 wrapping (reference §3.4, §5.4 quirk 2)?  A cheap pre-check so
 * the common values skip bin_wire_out's walk and the copy it needs. */
static int may_hold_complex(const uint8_t *v, size_t n)
{
    if (!n)
        return 0;
    switch (v[0]) {
    case BIN_OBJ_ARR: case BIN_COLLECTION: case BIN_MAP: case BIN_OBJ_ARR_WRAPPER:
        return memchr(v, BIN_OBJ, n) != NULL;
    default:
        return 0;
    }
}

int pr_put_stored(pr_conn *c, em_buf *out, const uint8_t *v, size_t n)
{
    (void)c;
    if (n && (v[0] == BIN_OBJ || may_hold_complex(v, n)))
        return bin_wire_out(v, n, out);
    return em_buf_append(out, v, n);
}

int pr_val_end(pr_conn *c, em_buf *out, size_t pos, int found)
{
    if (!found || out->len == pos) {
        out->len = pos;
        return em_buf_put_u8(out, BIN_NULL);
    }
    size_t n = out->len - pos;
    if (out->p[pos] == BIN_OBJ) {   /* wrap: 27, int length, bytes, int 0 */
        if (em_buf_reserve(out, 9))
            return EM_NOMEM;
        memmove(out->p + pos + 5, out->p + pos, n);
        out->p[pos] = BIN_WRAPPED;
        em_st32(out->p + pos + 1, (uint32_t)n);
        out->len += 5;
        return em_buf_put_le32(out, 0);
    }
    const uint8_t *v = out->p + pos;
    if (may_hold_complex(v, n)) {
        em_buf_reset(&c->tmp);
        if (em_buf_append(&c->tmp, v, n))
            return EM_NOMEM;
        out->len = pos;
        return bin_wire_out(c->tmp.p, c->tmp.len, out);
    }
    return 0;
}

/* ---- handshake -------------------------------------------------------- */

/* Failure reply (reference §1.3): success 0, the server's version, a message,
 * and an int status when the client's version is 1.1.0 or later. */
static int handshake_fail(em_buf *out, int client_ver, int a, int b, int cc,
                          const char *msg, int status)
{
    size_t start = out->len;
    if (em_buf_put_le32(out, 0) || em_buf_put_u8(out, 0) ||
        em_buf_put_le16(out, (uint16_t)a) || em_buf_put_le16(out, (uint16_t)b) ||
        em_buf_put_le16(out, (uint16_t)cc) || pr_put_str(out, msg))
        return EM_NOMEM;
    if (client_ver >= PR_VER(1, 1, 0) && em_buf_put_le32(out, (uint32_t)status))
        return EM_NOMEM;
    em_st32(out->p + start, (uint32_t)(out->len - start - 4));
    return 0;
}

static int str_eq(const uint8_t *s, size_t n, const char *z)
{
    size_t zl = strlen(z);
    return s && n == zl && memcmp(s, z, n) == 0;
}

static int handshake(pr_conn *c, const uint8_t *body, size_t len, em_buf *out)
{
    if (len < 8)
        return EM_PROTO;
    int major = (int16_t)em_ld16(body + 1);
    int minor = (int16_t)em_ld16(body + 3);
    int patch = (int16_t)em_ld16(body + 5);
    int client = body[7];
    int ver = (major >= 0 && major < 100 && minor >= 0 && minor < 100 && patch >= 0 && patch < 100)
                  ? PR_VER(major, minor, patch) : PR_VER(99, 0, 0);
    char msg[160];
    if (client != 2) {
        snprintf(msg, sizeof msg, "ember serves thin clients only (client code 2), got client code %d", client);
        int rc = handshake_fail(out, ver, 0, 0, 0, msg, PR_ST_FAILED);
        return rc ? rc : EM_UNSUPPORTED;    /* close after the reply */
    }
    if (major != 1 || minor < 0 || minor > 7 || patch != 0) {
        /* Name our preferred version so the client can retry on this socket. */
        snprintf(msg, sizeof msg, "Unsupported version: %d.%d.%d (ember supports 1.0.0 to 1.7.0)",
                 major, minor, patch);
        if (c->stats)
            pr_stats_event(c->stats, PR_EV_HANDSHAKE_FAIL);
        return handshake_fail(out, ver, 1, 7, 0, msg, PR_ST_FAILED);
    }
    pr_rd r = { body + 8, len - 8, 0 };
    uint8_t feat[PR_FEAT_BYTES] = {0};
    int client_attrs = 0;
    if (ver >= PR_VER(1, 7, 0)) {
        uint8_t t;
        int32_t fl;
        if (pr_rd_u8(&r, &t) || t != BIN_BYTE_ARR || pr_rd_i32(&r, &fl) || fl < 0 ||
            (size_t)fl > pr_rd_left(&r)) {
            int rc = handshake_fail(out, ver, 1, 7, 0, "Malformed handshake: bad feature array", PR_ST_FAILED);
            return rc ? rc : EM_PROTO;
        }
        for (int i = 0; i < fl && i < PR_FEAT_BYTES; i++)
            feat[i] = r.p[r.pos + (size_t)i] & our_features[i];
        client_attrs = fl > 0 && (r.p[r.pos] & (1u << PR_FEAT_USER_ATTRIBUTES));
        r.pos += (size_t)fl;
    }
    if (client_attrs) {
        const uint8_t *a;
        size_t al;
        if (pr_rd_obj(c, &r, &a, &al) || (a[0] != BIN_MAP && a[0] != BIN_NULL)) {
            int rc = handshake_fail(out, ver, 1, 7, 0, "Malformed handshake: bad user attributes", PR_ST_FAILED);
            return rc ? rc : EM_PROTO;
        }
    }
    const uint8_t *user = NULL, *pass = NULL;
    size_t ul = 0, pl = 0;
    if (ver >= PR_VER(1, 1, 0) && pr_rd_left(&r) > 0) {
        if (pr_rd_str(c, &r, &user, &ul) || (pr_rd_left(&r) > 0 && pr_rd_str(c, &r, &pass, &pl))) {
            int rc = handshake_fail(out, ver, 1, 7, 0, "Malformed handshake: bad credentials", PR_ST_FAILED);
            return rc ? rc : EM_PROTO;
        }
    }
    if (c->srv->opt.auth) {
        int arc = c->srv->opt.auth(c->srv->opt.auth_arg, c->peer, user, ul, pass, pl);
        if (arc) {
            if (c->stats)
                pr_stats_event(c->stats, arc == EM_TOOMANY ? PR_EV_AUTH_LIMITED : PR_EV_AUTH_FAIL);
            /* Java answers auth failures with version 0.0.0 and status 2000. */
            return handshake_fail(out, ver, 0, 0, 0,
                                  arc == EM_TOOMANY
                                      ? "Too many failed login attempts; retry later"
                                      : "The user name or password is incorrect",
                                  PR_ST_AUTH_FAILED);
        }
    }
    const char *wu = c->srv->opt.auth ? NULL : c->srv->opt.username;
    if (wu && (!str_eq(user, ul, wu) || !str_eq(pass, pl, c->srv->opt.password))) {
        if (c->stats)
            pr_stats_event(c->stats, PR_EV_AUTH_FAIL);
        /* Java answers auth failures with version 0.0.0 and status 2000. */
        return handshake_fail(out, ver, 0, 0, 0, "The user name or password is incorrect",
                              PR_ST_AUTH_FAILED);
    }
    size_t start = out->len;
    if (em_buf_put_le32(out, 0) || em_buf_put_u8(out, 1))
        return EM_NOMEM;
    if (ver >= PR_VER(1, 7, 0)) {
        int nb = 0;
        for (int i = 0; i < PR_FEAT_BYTES; i++)
            if (feat[i])
                nb = i + 1;
        if (em_buf_put_u8(out, BIN_BYTE_ARR) || em_buf_put_le32(out, (uint32_t)nb) ||
            em_buf_append(out, feat, (size_t)nb))
            return EM_NOMEM;
    }
    if (ver >= PR_VER(1, 4, 0)) {
        if (em_buf_put_u8(out, BIN_UUID) || em_buf_append(out, c->srv->opt.node_id, 16))
            return EM_NOMEM;
    }
    em_st32(out->p + start, (uint32_t)(out->len - start - 4));
    c->ready = 1;
    c->ver = ver;
    memcpy(c->feat, feat, sizeof feat);
    if (c->stats)
        pr_stats_event(c->stats, PR_EV_HANDSHAKE_OK);
    return 0;
}

/* ---- response header ----------------------------------------------------
 *
 * < 1.4.0:  int len | long rid | int status | [typed string msg]
 * >= 1.4.0: int len | long rid | short flags | [long major, int minor if
 *           flags & 2] | [int status, typed string msg if flags & 1]
 */
static int put_header(pr_conn *c, em_buf *out, int64_t rid, uint64_t topo, int status,
                      const char *msg)
{
    if (em_buf_put_le32(out, 0) || em_buf_put_le64(out, (uint64_t)rid))
        return EM_NOMEM;
    if (c->ver < PR_VER(1, 4, 0)) {
        if (em_buf_put_le32(out, (uint32_t)status))
            return EM_NOMEM;
    } else {
        uint16_t flags = (uint16_t)((status ? 1 : 0) | (topo ? 2 : 0));
        if (em_buf_put_le16(out, flags))
            return EM_NOMEM;
        /* The version a connection has not seen yet: (1, 0) once on a single
         * node, every change on a cluster. */
        if (topo && (em_buf_put_le64(out, topo >> 32) ||
                     em_buf_put_le32(out, (uint32_t)topo)))
            return EM_NOMEM;
        if (status && em_buf_put_le32(out, (uint32_t)status))
            return EM_NOMEM;
    }
    if (status && pr_put_str(out, msg))
        return EM_NOMEM;
    return 0;
}

int pr_reply_header(pr_conn *c, em_buf *out, int64_t rid, uint64_t topo)
{
    return put_header(c, out, rid, topo, 0, NULL);
}

static int unsupported(pr_conn *c, int op, const char *what)
{
    return pr_fail(c, PR_ST_FAILED, "%s is not supported by ember yet (op code %d)", what, op);
}

static int op_debug_stats(pr_conn *c, em_buf *out)
{
    em_mem_stats m;
    em_mem_trace_flip();    /* a measurement's two snapshots bracket the trace */
    if (c->srv->opt.debug_stats)
        c->srv->opt.debug_stats(c->srv->opt.debug_arg, &m);
    else
        m = em_mem_thread();
    if (em_buf_put_le64(out, m.allocs) || em_buf_put_le64(out, m.bytes) ||
        em_buf_put_le64(out, m.frees) || em_buf_put_le64(out, (uint64_t)em_mem_live_bytes()) ||
        em_buf_put_le64(out, (uint64_t)em_mem_live_blocks()))
        return EM_NOMEM;
    return 0;
}

/* ---- cluster state -----------------------------------------------------
 *
 * One node plays Ignite's three cluster states (ClusterState):
 *   ACTIVE            every operation;
 *   ACTIVE_READ_ONLY  reads; every cache modification and every cache start
 *                     is refused (GridDhtTopologyFutureAdapter.validateCache,
 *                     ClusterCachesInfo.processStartNewCacheRequest); cache
 *                     destroy is not (Ignite checks only starts);
 *   INACTIVE          cache operations, cache names, create and destroy are
 *                     refused (IgniteKernal.checkClusterState); cluster,
 *                     binary-type and partition ops still answer.
 * Deactivation clears the caches of memory-only data regions, as Ignite's
 * does ("Deactivation clears in-memory caches (without persistence)";
 * its thin server forces it for clients without the FORCE_DEACTIVATION
 * feature, which ember does not offer); their configurations stay, so they
 * come back empty on activation, while persistent caches keep their data.
 *
 * The check is one relaxed load per request (pr_state); a request that
 * read the old state just before a change completes under it, as requests
 * in flight complete before Ignite's state-change exchange (so a write
 * racing a deactivation may survive the clear).  Where the state comes from
 * at start is the server's choice (pr_options.state; srv.c: ACTIVE in
 * memory, persisted with persistence). */

static void clear_in_memory(void *arg, st_cache *sc)
{
    (void)arg;
    if (st_cache_in_memory(sc))
        (void)st_clear(sc);         /* only EM_NOCACHE (destroyed meanwhile) */
}

int pr_change_state(pr_server *s, int to)
{
    int rc = 0;
    pthread_mutex_lock(&s->state_mu);
    int from = atomic_load_explicit(&s->state, memory_order_relaxed);
    if (to != from) {
        if (s->opt.state_persist)
            rc = s->opt.state_persist(s->opt.state_arg, to);
        if (!rc) {
            atomic_store_explicit(&s->state, to, memory_order_release);
            if (to == PR_STATE_INACTIVE)
                st_cache_each(s->st, clear_in_memory, NULL);
        }
    }
    pthread_mutex_unlock(&s->state_mu);
    return rc;
}

static int change_state(pr_conn *c, int to)
{
    if (c->srv->opt.cluster) {
        /* Every node changes when the metadata group applies it.  A
         * persistent cluster activated without a baseline takes its
         * members as one first (Ignite does at the first activation):
         * without one, a whole cluster restarting would place every
         * partition on the first node back before the others are, and
         * their copies would catch up with it - emptied. */
        int rc = to != PR_STATE_INACTIVE && c->srv->opt.persistent
                     ? pr_baseline_default(c) : 0;
        if (rc)
            return rc;
        em_buf b = EM_BUF_INIT;
        rc = cl_meta_enc_state(&b, to);
        if (!rc)
            rc = pr_cluster_propose(c, b.p, b.len, "change the cluster state");
        em_buf_free(&b);
        return rc;
    }
    int rc = pr_change_state(c->srv, to);
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Failed to change cluster state: %s", em_strerror(rc));
    return 0;
}

static int op_cluster(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    switch (op) {
    case 5000: {    /* GET_STATE: the state's ordinal with feature 2, else
                     * the bool "active" of older servers */
        int st = pr_state(c);
        return em_buf_put_u8(out, (uint8_t)(pr_has_feat(c, PR_FEAT_CLUSTER_STATES)
                                            ? st : st != PR_STATE_INACTIVE));
    }
    case 5001: {    /* CHANGE_STATE: byte ordinal (a bool before feature 2:
                     * the same values for INACTIVE and ACTIVE) */
        uint8_t st;
        if (pr_rd_u8(r, &st))
            return pr_bad_request(c, EM_TRUNCATED);
        if (st > PR_STATE_ACTIVE_READ_ONLY)
            return pr_fail(c, PR_ST_FAILED, "Unknown cluster state: %d", st);
        return change_state(c, st);
    }
    case 5002:      /* CHANGE_WAL_STATE: name, bool -> bool changed */
    case 5003: {    /* GET_WAL_STATE: name -> bool enabled */
        const uint8_t *s;
        size_t n;
        uint8_t en = 0;
        int rc = pr_rd_str(c, r, &s, &n);
        if (!rc && op == 5002)
            rc = pr_rd_u8(r, &en);
        if (rc)
            return pr_bad_request(c, rc);
        if (!s)
            return pr_fail(c, PR_ST_FAILED, "Cache name must not be null");
        int32_t id = em_hash_java_str(s, n);
        st_cache *sc = st_cache_find(c->srv->st, id);
        if (!sc)
            return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", id);
        /* Per cache, from its data region (Ignite: the cache group's
         * walEnabled, which is its persistence flag).  A memory-only cache
         * has no WAL: it reads off, and changing it is refused as Ignite's
         * WalStateManager.init does.  Persistent caches always log: enabling
         * changes nothing, and disabling (Ignite's bulk-load switch) is not
         * offered. */
        int logged = !st_cache_in_memory(sc);
        if (op == 5003)
            return pr_put_bool(out, logged);
        const st_cache_config *cfg = st_cache_cfg(sc);
        if (cfg->cache_mode == 0)
            return pr_fail(c, PR_ST_FAILED, "WAL mode cannot be changed for LOCAL cache(s): [%s]",
                           cfg->name);
        if (!logged)
            return pr_fail(c, PR_ST_FAILED, "Cannot change WAL mode because persistence is not "
                           "enabled for cache(s) [caches=[%s], dataRegion=%s]", cfg->name,
                           cfg->data_region_name ? cfg->data_region_name : "null");
        if (!en)
            return pr_fail(c, PR_ST_FAILED, "Disabling the WAL is not supported by ember");
        return pr_put_bool(out, 0);
    }
    default:
        return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
    }
}

static int dispatch(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    switch (op) {
    case 0:
        return pr_op_close_any(c, r, out);
    case 1:
        if (!pr_has_feat(c, PR_FEAT_HEARTBEAT))
            break;
        return 0;
    case 2:
        if (!pr_has_feat(c, PR_FEAT_HEARTBEAT))
            break;
        return em_buf_put_le64(out, (uint64_t)c->srv->opt.idle_timeout_ms);
    case 1022: case 1023:
        return unsupported(c, op, "Data replication (conflict) operations");
    case 1024: case 1025:
        return unsupported(c, op, "Cache invoke (entry processors)");
    case 1050: case 1051: case 1052: case 1053: case 1054: case 1055: case 1056:
        return pr_op_config(c, op, r, out);
    case 1100:
        return pr_fail(c, PR_ST_FAILED, "CACHE_NODE_PARTITIONS (1100) is deprecated; "
                       "use CACHE_PARTITIONS (1101)");
    case 1101:
        return pr_op_partitions(c, r, out);
    case 2000:
        return pr_op_scan(c, r, out);
    case 2001:
        return pr_op_scan_page(c, r, out);
    case 2002:
        return pr_op_sql(c, r, out);
    case 2004:
        return pr_op_sql_fields(c, r, out);
    case 2003: case 2005:
        return pr_op_sql_page(c, r, out);
    case 2006:
        return unsupported(c, op, "Continuous queries");
    case 2008: case 2009:
        return unsupported(c, op, "Index queries");
    case 3000: case 3001: case 3002: case 3003:
        return pr_op_binary(c, op, r, out);
    case 3004:
        if (!pr_has_feat(c, PR_FEAT_BINARY_CONFIGURATION))
            break;
        return pr_op_binary(c, op, r, out);
    case 4000: case 4001:
        return pr_op_tx(c, op, r, out);
    case 5000: case 5001: case 5002: case 5003:
        return op_cluster(c, op, r, out);
    case 5100: case 5101: case 5102:
        return pr_op_group(c, op, r, out);
    case 6000:
        return unsupported(c, op, "Compute");
    case 7000: case 7001: case 7002: case 7003:
        return unsupported(c, op, "Services");
    case 8000: case 8001:
        return unsupported(c, op, "Data streamer");
    case PR_OP_DEBUG_STATS:
        if (!c->srv->opt.debug_ops)
            break;
        return op_debug_stats(c, out);
    case PR_OP_RESET_LOST:
        return pr_op_reset_lost(c, r, out);
    case PR_OP_BASELINE:
        return pr_op_baseline(c, r, out);
    case PR_OP_CORRUPT:
        if (!c->srv->opt.debug_ops)
            break;
        return pr_op_ops(c, op, r, out);
    case PR_OP_PART_SNAPSHOT:
        if (!c->forwarded)
            break;
        return pr_op_part_snapshot(c, r, out);
    case PR_OP_RID_CALL:
        if (!c->forwarded)
            break;
        return pr_op_rid_call(c, r, out);
    case PR_OP_TX_CALL:
        if (!c->forwarded)
            break;
        return pr_op_tx_call(c, r, out);
    case PR_OP_PART_VERIFY: case PR_OP_NODE_INFO: case PR_OP_CLUSTER_INFO:
        return pr_op_ops(c, op, r, out);
    default:
        if (op >= 1000 && op <= 1021)
            return pr_op_cache(c, op, r, out);
        if (op >= 9000 && op <= 9023)
            return unsupported(c, op, "Atomic longs and sets");
        break;
    }
    return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
}

/* trim_scratch frees per-connection scratch a big request grew (normalised
 * keys and values, copied configuration), so one huge request does not pin
 * its memory for the connection's life; everyday requests stay far below
 * and keep allocating nothing.  (Batch slices never grow past PR_BATCH.) */
#define PR_KEEP_SCRATCH ((size_t)1 << 20)

static void trim_scratch(pr_conn *c)
{
    em_buf *b[] = { &c->kscratch, &c->vscratch, &c->escratch, &c->tmp };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (b[i]->cap > PR_KEEP_SCRATCH)
            em_buf_free(b[i]);
}

/* request handles one frame after the handshake: short op, long request id,
 * payload.  A handler's error becomes an error reply; only a frame too short
 * to carry a request id (or running out of memory for the reply) closes. */
static int request(pr_conn *c, const uint8_t *body, size_t len, em_buf *out)
{
    if (len < 10)
        return EM_PROTO;
    int op = (int16_t)em_ld16(body);
    if (op < 0)
        op &= 0xffff;               /* op codes are unsigned in practice (32000) */
    int64_t rid = (int64_t)em_ld64(body + 2);
    pr_rd r = { body + 10, len - 10, 0 };
    c->req_body = body;
    c->req_len = len;
    c->req_op = op;
    size_t start = out->len;
    uint64_t tv = atomic_load_explicit(&c->srv->topo_ver, memory_order_relaxed);
    uint64_t topo = tv != c->topo_seen && c->ver >= PR_VER(1, 4, 0) ? tv : 0;
    int rc = put_header(c, out, rid, topo, 0, NULL);
    if (rc)
        return rc;
    c->msg[0] = 0;
    /* Counting is inline here, into the worker's own block.  One request in
     * sample_mask + 1 of each connection is timed, its first included, so
     * even a few requests show in the latency histogram. */
    pr_stats *st = c->stats;
    uint64_t t0 = st && c->afwd ? pr_afwd_t0(c, body, len) : 0;
    if (!t0 && st && --c->stats_left == 0) {
        c->stats_left = st->sample_mask + 1;
        t0 = em_now_ns();           /* never 0 here: a monotonic clock since boot */
    }
    c->req_t0 = t0;
    rc = dispatch(c, op, &r, out);
    trim_scratch(c);
    if (c->afwd && rc != PR_PARK)
        pr_afwd_end(c, body);
    if (rc == PR_PARK || rc == PR_OFFLOAD) {
        /* waits for a lock, or goes to the SQL threads: no reply now, the
         * frame is run again later */
        out->len = start;
        return rc;
    }
    c->last_status = rc < 0 ? PR_ST_FAILED : rc;
    if (rc != 0) {
        out->len = start;
        if (rc < 0)
            pr_fail(c, PR_ST_FAILED, "Request failed: %s", em_strerror(rc));
        int status = rc < 0 ? PR_ST_FAILED : rc;
        if (put_header(c, out, rid, topo, status, c->msg)) {
            out->len = start;
            return EM_NOMEM;
        }
    }
    if (out->len - start - 4 > INT32_MAX) {
        /* The int length field cannot describe it (e.g. a huge GET_ALL). */
        out->len = start;
        pr_fail(c, PR_ST_FAILED, "Reply too large (over 2 GiB); request fewer entries");
        if (put_header(c, out, rid, topo, PR_ST_FAILED, c->msg)) {
            out->len = start;
            return EM_NOMEM;
        }
    }
    em_st32(out->p + start, (uint32_t)(out->len - start - 4));
    if (topo)
        c->topo_seen = topo;
    /* (a reply held for its acks is counted once they settle: pr_ackw_hold) */
    if (st && !c->ack_deferred)
        pr_stats_req(st, op, rc < 0 ? PR_ST_FAILED : rc, t0 ? em_now_ns() - t0 : PR_STATS_UNTIMED);
    return 0;
}

int pr_exec_request(pr_conn *c, const uint8_t *body, size_t len, em_buf *out)
{
    return request(c, body, len, out);
}

void pr_conn_set_peer(pr_conn *c, const char *peer)
{
    snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "");
}

void pr_conn_set_stats(pr_conn *c, pr_stats *st)
{
    c->stats = st;
    c->stats_left = 1;              /* time the first request */
}

/* ---- framing ---------------------------------------------------------- */

/* queued_tx: does a waiting frame in q[0..qn) name transaction id? */
static int queued_tx(const uint8_t *q, size_t qn, int32_t id)
{
    for (size_t at = 0; id && at + 4 <= qn;) {
        uint32_t len = em_ld32(q + at);
        if (pr_tx_frame_id(q + at + 4, len) == id)
            return 1;
        at += 4 + (size_t)len;
    }
    return 0;
}

static int queue_frame(pr_conn *c, em_buf *q, const uint8_t *body, size_t len)
{
    if (em_buf_put_le32(q, (uint32_t)len) || em_buf_append(q, body, len))
        return EM_NOMEM;
    c->npq++;
    return 0;
}

/* run_or_queue runs one request frame, hands it to the SQL threads, or
 * adds it to q when it waits for a lock (or names a transaction with a
 * request waiting in q[0..qn)), or for the connection's SQL request.  A
 * full queue answers the request with an error instead. */
static int run_or_queue(pr_conn *c, em_buf *q, const uint8_t *body, size_t len, em_buf *out)
{
    int rc = PR_PARK;
    if (pr_afwd_skip(c, body, len))
        return 0;                   /* its reply went out from the answering thread */
    int waits = c->fwd_busy && !(c->fwd_busy == PR_OUT_READY && pr_afwd_frame(c, body, len));
    if (!c->job_busy && !waits && !queued_tx(q->p, q->len, pr_tx_frame_id(body, len))) {
        size_t at = out->len;
        c->in_loop = c->srv->tx_wake != NULL;   /* forwards and acks go without a wait */
        rc = request(c, body, len, out);
        c->in_loop = 0;
        if (c->ack_deferred)
            rc = pr_ackw_hold(c, rc, body, len, out, at);
    }
    if (rc == PR_OFFLOAD) {
        rc = pr_sqlx_take(c, body, len);
        return rc == 1 ? 0 : rc ? rc : EM_INVAL;    /* the reply: pr_sqlx_deliver */
    }
    if (rc != PR_PARK)
        return rc;
    if (c->npq < PR_MAX_WAITING && q->len + len + 4 <= PR_MAX_WAITING_BYTES)
        return queue_frame(c, q, body, len);
    /* answer it: a failure reply with its request id */
    size_t start = out->len;
    int64_t rid = len >= 10 ? (int64_t)em_ld64(body + 2) : 0;
    pr_fail(c, PR_ST_FAILED, "Too many requests waiting for locks or an SQL query on this "
            "connection (limit %d)", PR_MAX_WAITING);
    if (put_header(c, out, rid, 0, PR_ST_FAILED, c->msg)) {
        out->len = start;
        return EM_NOMEM;
    }
    em_st32(out->p + start, (uint32_t)(out->len - start - 4));
    return 0;
}

int pr_conn_resume(pr_conn *c, em_buf *out, size_t out_cap)
{
    int rc = pr_sqlx_deliver(c, out);
    if (rc < 0)
        return rc;
    if (c->fwd_busy == PR_OUT_ACKS) {
        if (!pr_ackw_poll(c, out, &rc))
            return 0;
        if (rc < 0)
            return rc;
    }
    if (!c->npq || c->job_busy || (c->fwd_busy == PR_OUT_FWD && pr_afwd_poll(c)))
        return 0;
    /* the waiting frames, in order, into pq2: the ones that still wait are
     * kept there, then the buffers swap */
    em_buf q = c->pq;
    c->pq = c->pq2;
    em_buf_reset(&c->pq);
    c->npq = 0;
    rc = 0;
    size_t at = 0;
    for (; at + 4 <= q.len; ) {
        uint32_t len = em_ld32(q.p + at);
        const uint8_t *body = q.p + at + 4;
        at += 4 + (size_t)len;
        if (out->len > out_cap) {   /* backpressure: keep the rest for later */
            if ((rc = queue_frame(c, &c->pq, body, len)) != 0)
                break;
            continue;
        }
        if ((rc = run_or_queue(c, &c->pq, body, len, out)) < 0)
            break;
    }
    em_buf_reset(&q);
    c->pq2 = q;
    pr_tx_sync_waiting(c);
    if (c->npq)
        pr_ackw_behind(c);
    if (c->npq > 1)
        pr_afwd_behind(c);          /* (the first waiting frame is its own) */
    return rc < 0 ? rc : 0;
}

#define PR_PF_MAX 32             /* frames one pr_feed call prefetches ahead */
#define PR_PF_PASS 128           /* frames a loop pass prefetches (pr_pf_add) */

static int pf_op(int op)
{
    switch (op) {
    case 1000: case 1001: case 1002: case 1005: case 1006: case 1007: case 1008:
    case 1009: case 1010: case 1011: case 1014: case 1016: case 1017:
        return 1;
    default:
        return 0;
    }
}

/* The keys of one batch, between their preparation and the store's steps. */
typedef struct pf_batch {
    st_pf     pf[PR_PF_PASS];
    st_cache *sc[PR_PF_PASS];
    uint32_t  hint[PR_PF_PASS];
    int       m, cap;
    st_cache *last;                 /* the last cache looked up, and its id */
    int32_t   last_id;
} pf_batch;

static _Thread_local pf_batch tl_pf = {.cap = PR_PF_PASS};

/* pf_frame prepares the key of one whole frame b[0..len) (op, request id,
 * cache id, flags 0 or keep-binary, key), if it is a single-key cache op. */
static void pf_frame(pr_conn *c, pf_batch *bt, const uint8_t *b, uint32_t len)
{
    if (bt->m >= bt->cap || len < 16 || !pf_op(em_ld16(b)) || (b[14] & ~1u))
        return;
    int32_t id = (int32_t)em_ld32(b + 10);
    st_cache *s = bt->last && id == bt->last_id ? bt->last : st_cache_find(c->srv->st, id);
    if (!s)
        return;
    bt->last = s;
    bt->last_id = id;
    if (st_pf_key(s, b + 15, len - 15, &bt->pf[bt->m])) {
        bt->sc[bt->m] = s;
        bt->hint[bt->m] = c->pf_vlen;
        bt->m++;
    }
}

static void pf_run(pf_batch *bt)
{
    if (bt->m > 1) {
        for (int i = 0; i < bt->m; i++)
            st_pf_slot(bt->sc[i], &bt->pf[i]);
        for (int i = 0; i < bt->m; i++)
            st_pf_entry(bt->sc[i], &bt->pf[i], bt->hint[i]);
    }
    bt->m = 0;
    bt->last = NULL;
}

void pr_pf_add(pr_conn *c, const uint8_t *p, size_t n)
{
    if (!c->ready || c->srv->opt.cluster)
        return;
    size_t pos = 0;
    uint32_t max = c->srv->opt.max_msg;
    while (tl_pf.m < tl_pf.cap && n - pos >= 4) {
        uint32_t len = em_ld32(p + pos);
        if (len == 0 || len > max || n - pos - 4 < len)
            break;
        pf_frame(c, &tl_pf, p + pos + 4, len);
        pos += 4 + len;
    }
    /* pr_feed on these very bytes need not prefetch what was walked here */
    c->pf_from = p;
    c->pf_to = p + pos;
}

void pr_pf_run(void)
{
    pf_run(&tl_pf);
}

/* prefetch_ahead: before running a pipelined batch, walk up to PR_PF_MAX
 * whole frames ahead, prepare the key of each single-key cache op and run
 * the store's prefetch steps over all of them, so the batch's slot, entry
 * and value misses overlap.  On the 1 KiB, P16, 90/10 N1 cell
 * (docs/profile-net.md) two dependent misses per GET were ~26 % of
 * emberd's CPU without it.  A lone request is left to pr_pf_add (other
 * connections' requests of the same pass).  Only frame lengths, op, flags
 * and cache id are read here; each request is decoded and validated as
 * always when it runs.  Returns the bytes of p[0..n) it looked at. */
static size_t prefetch_ahead(pr_conn *c, const uint8_t *p, size_t n)
{
    pf_batch bt;
    bt.m = 0;
    bt.cap = PR_PF_MAX;
    bt.last = NULL;
    int frames = 0;
    size_t pos = 0;
    uint32_t max = c->srv->opt.max_msg;
    while (frames < PR_PF_MAX && n - pos >= 4) {
        uint32_t len = em_ld32(p + pos);
        if (len == 0 || len > max || n - pos - 4 < len)
            break;
        if (frames == 0 && n - pos - 4 - len < 4)
            return n;               /* one request only: nothing to overlap */
        pf_frame(c, &bt, p + pos + 4, len);
        pos += 4 + len;
        frames++;
    }
    pf_run(&bt);
    return pos;
}

int pr_feed(pr_conn *c, const uint8_t *p, size_t n, em_buf *out, size_t out_cap,
            size_t *consumed)
{
    size_t pos = 0, pf_end = 0;
    int rc = 0;
    int pf = c->ready && !c->srv->opt.cluster;
    /* A held reply that settled (and went out from the settling thread)
     * lets the frames behind it run before these. */
    if ((pr_ackw_settled(c) || pr_afwd_settled(c)) &&
        (rc = pr_conn_resume(c, out, out_cap)) < 0)
        return rc;
    if (c->pf_from == p)
        pf_end = (size_t)(c->pf_to - p);    /* pr_pf_add walked these this pass */
    c->pf_from = c->pf_to = NULL;
    while (pos < n && out->len <= out_cap) {
        size_t left = n - pos;
        if (pf && pos >= pf_end) {
            size_t k = prefetch_ahead(c, p + pos, left);
            pf_end = k ? pos + k : n;
        }
        if (!c->ready && left >= 5 && p[pos + 4] != 1) {
            rc = EM_PROTO;          /* first message must be a handshake */
            break;
        }
        if (left < 4)
            break;
        int32_t len = (int32_t)em_ld32(p + pos);
        uint32_t max = c->ready ? c->srv->opt.max_msg : c->srv->opt.max_handshake_msg;
        if (len <= 0 || (uint32_t)len > max) {
            rc = EM_BADLEN;         /* close without allocating anything */
            break;
        }
        if (left - 4 < (size_t)len)
            break;
        if (c->fwd_busy && c->npq >= PR_OUT_QUEUE)
            break;                  /* the rest waits unread (backpressure) */
        const uint8_t *body = p + pos + 4;
        rc = c->ready ? run_or_queue(c, &c->pq, body, (size_t)len, out)
                      : handshake(c, body, (size_t)len, out);
        if (rc < 0)
            break;
        pos += 4 + (size_t)len;
    }
    *consumed = pos;
    pr_tx_sync_waiting(c);
    if (c->npq || pos < n)
        pr_ackw_behind(c);
    if (c->npq > 1 || pos < n)
        pr_afwd_behind(c);          /* (the first waiting frame is its own) */
    return rc < 0 ? rc : 0;
}
