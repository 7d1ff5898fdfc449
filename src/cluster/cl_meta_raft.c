/* cl_meta_raft.c - cl_meta_fsm under libraft: the raft_fsm adapter (apply with
 * the entry's log index, snapshot as one buffer, restore), the voter/standby
 * planner and the membership-change driver (cl_meta_raft.h).
 *
 * libraft 0.15 stops applying at an entry whose apply returns an error and
 * retries it later, so apply fails only for EM_NOMEM (the state is unchanged
 * then); entries every node refuses alike are applied as refusals.
 */
#include "cluster/cl_meta_raft.h"

#include <errno.h>
#include <string.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"

int cl_meta_raft_err(int rv)
{
    switch (rv) {
    case 0:                     return 0;
    case RAFT_NOMEM:            return EM_NOMEM;
    case RAFT_NOTLEADER:        return EM_NOTLEADER;
    case RAFT_LEADERSHIPLOST:   return EM_LOSTLEADER;
    case RAFT_SHUTDOWN:
    case RAFT_CANCELED:         return EM_CLOSED;
    case RAFT_CANTCHANGE:
    case RAFT_BUSY:             return EM_BUSY;
    /* Another server still has the address: a restarted node whose old
     * self the group has not removed yet.  Busy, not invalid: the join is
     * retried and goes through once the removal committed. */
    case RAFT_DUPLICATEADDRESS: return EM_BUSY;
    case RAFT_BADID:
    case RAFT_DUPLICATEID:
    case RAFT_BADROLE:
    case RAFT_INVALID:
    case RAFT_CANTBOOTSTRAP:
    case RAFT_MALFORMED:        return EM_INVAL;
    case RAFT_CORRUPT:          return EM_CORRUPT;
    case RAFT_TOOBIG:           return EM_TOOBIG;
    case RAFT_NOTFOUND:         return EM_NOTFOUND;
    case RAFT_NOSPACE:          return -ENOSPC;
    case RAFT_NAMETOOLONG:      return -ENAMETOOLONG;
    default:                    return EM_IO;
    }
}

/* ---- the raft_fsm adapter ---- */

struct raft_buffer cl_meta_raft_buf(const void *entry, size_t len)
{
    size_t padded = (len + 7) & ~(size_t)7;
    struct raft_buffer b = { raft_malloc(padded ? padded : 8), padded ? padded : 8 };
    if (!b.base)
        return (struct raft_buffer){ NULL, 0 };
    memset(b.base, 0, b.len);
    if (len)
        memcpy(b.base, entry, len);
    return b;
}

/* unpad: the entry's own length when buf holds it plus up to 7 zero bytes of
 * cl_meta_raft_buf's padding; else buf's length (the FSM judges it). */
static size_t unpad(const uint8_t *p, size_t n)
{
    if (n < 8 || n % 8)
        return n;
    size_t want = 8 + (size_t)em_ld32(p + 4);
    if (want >= n || n - want >= 8)
        return n;
    for (size_t i = want; i < n; i++)
        if (p[i])
            return n;
    return want;
}

static void notify(cl_meta_node *n, const cl_meta_entry *e, const cl_meta_effect *eff)
{
    unsigned k = atomic_load_explicit(&n->n_subs, memory_order_acquire);
    for (unsigned i = 0; i < k; i++)
        n->subs[i].cb(n->subs[i].arg, e, eff);
}

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
    cl_meta_node *n = fsm->data;
    /* libraft advances last_applied after apply returns, so this entry's
     * index is the next one; the FSM needs it for member order. */
    uint64_t index = n->raft->last_applied + 1;
    cl_meta_entry e;
    cl_meta_effect eff;
    pthread_rwlock_wrlock(&n->lock);
    int rc = cl_meta_fsm_apply(&n->state, index, buf->base,
                               unpad(buf->base, buf->len), &e, &eff);
    pthread_rwlock_unlock(&n->lock);
    if (rc) {
        n->nomem++;
        return RAFT_NOMEM;
    }
    n->last = eff;
    *result = &n->last;
    notify(n, &e, &eff);        /* e->type is 0 for an entry that did not decode */
    return 0;
}

/* Version 2 with snapshot_finalize: raft leaves the buffers to us, so they
 * come from em_malloc (counted) and are freed in finalize. */
static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
    cl_meta_node *n = fsm->data;
    em_buf b = EM_BUF_INIT;
    struct raft_buffer *arr = em_malloc(sizeof *arr);
    if (!arr)
        return RAFT_NOMEM;
    /* Only the Raft thread writes the state, and this is it: no lock. */
    if (cl_meta_fsm_snapshot(&n->state, &b)) {
        em_free(arr);
        return RAFT_NOMEM;
    }
    arr[0].base = b.p;
    arr[0].len = b.len;
    *bufs = arr;
    *n_bufs = 1;
    return 0;
}

static int fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[],
                                 unsigned *n_bufs)
{
    (void)fsm;
    if (*bufs) {
        for (unsigned i = 0; i < *n_bufs; i++)
            em_free((*bufs)[i].base);
        em_free(*bufs);
    }
    *bufs = NULL;
    *n_bufs = 0;
    return 0;
}

static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
    cl_meta_node *n = fsm->data;
    pthread_rwlock_wrlock(&n->lock);
    int rc = cl_meta_fsm_restore(&n->state, buf->base, buf->len);
    pthread_rwlock_unlock(&n->lock);
    if (rc)
        return rc == EM_NOMEM ? RAFT_NOMEM : RAFT_CORRUPT;
    /* On success the buffer is ours (libraft's snapshotRestore). */
    raft_free(buf->base);
    cl_meta_effect eff = { 0 };
    eff.index = n->state.last_index;
    eff.changed = 1;
    eff.major = n->state.major;
    eff.minor = n->state.minor;
    notify(n, NULL, &eff);
    return 0;
}

int cl_meta_node_init(cl_meta_node *n)
{
    memset(n, 0, sizeof *n);
    if (pthread_rwlock_init(&n->lock, NULL))
        return EM_NOMEM;
    cl_meta_fsm_init(&n->state);
    n->fsm.version = 2;
    n->fsm.data = n;
    n->fsm.apply = fsm_apply;
    n->fsm.snapshot = fsm_snapshot;
    n->fsm.restore = fsm_restore;
    n->fsm.snapshot_finalize = fsm_snapshot_finalize;
    return 0;
}

void cl_meta_node_free(cl_meta_node *n)
{
    cl_meta_fsm_free(&n->state);
    pthread_rwlock_destroy(&n->lock);
}

void cl_meta_node_bind(cl_meta_node *n, struct raft *r) { n->raft = r; }

int cl_meta_node_subscribe(cl_meta_node *n, cl_meta_sub_cb cb, void *arg)
{
    /* Slots are only ever appended: the Raft thread reads n_subs with
     * acquire and sees the slot written before the release below.  Callers
     * subscribing concurrently must serialise among themselves. */
    unsigned k = atomic_load_explicit(&n->n_subs, memory_order_relaxed);
    if (k >= CL_META_MAX_SUBS)
        return EM_TOOMANY;
    n->subs[k] = (cl_meta_sub){ cb, arg };
    atomic_store_explicit(&n->n_subs, k + 1, memory_order_release);
    return 0;
}

void cl_meta_node_read(cl_meta_node *n, void (*fn)(void *arg, const cl_meta_fsm *s),
                       void *arg)
{
    pthread_rwlock_rdlock(&n->lock);
    fn(arg, &n->state);
    pthread_rwlock_unlock(&n->lock);
}

/* ---- roles ---- */

int cl_meta_roles_next(const struct raft_configuration *c, raft_id leader,
                       raft_id *id, int *role)
{
    unsigned voters = 0, standbys = 0;
    for (unsigned i = 0; i < c->n; i++) {
        if (c->servers[i].role == RAFT_SPARE) {
            *id = c->servers[i].id;
            *role = RAFT_STANDBY;
            return 1;
        }
        if (c->servers[i].role == RAFT_VOTER)
            voters++;
        else
            standbys++;
    }
    unsigned pool = voters + standbys;
    if (pool == 0)
        return 0;
    unsigned target = pool >= CL_META_MAX_VOTERS ? CL_META_MAX_VOTERS
                    : pool % 2 ? pool : pool - 1;
    if (voters < target) {
        for (unsigned i = 0; i < c->n; i++)
            if (c->servers[i].role == RAFT_STANDBY) {
                *id = c->servers[i].id;
                *role = RAFT_VOTER;
                return 1;
            }
    } else if (voters > target) {
        for (unsigned i = c->n; i-- > 0;)
            if (c->servers[i].role == RAFT_VOTER && c->servers[i].id != leader) {
                *id = c->servers[i].id;
                *role = RAFT_STANDBY;
                return 1;
            }
    }
    return 0;
}

/* ---- membership changes ---- */

/* A bound on the steps one operation takes (spares -> standbys, then at
 * most CL_META_MAX_VOTERS promotions or demotions), against a planner bug
 * turning into an endless loop of configuration changes. */
#define CHANGE_MAX_STEPS (2 * CL_META_MAX_VOTERS + 8)

static void change_cb(struct raft_change *req, int status);

/* change_next: 0 started, 1 nothing to do, else an EM code. */
static int change_next(cl_meta_change *c)
{
    raft_id id;
    int role;
    if (!cl_meta_roles_next(&c->raft->configuration, c->raft->id, &id, &role))
        return 1;
    if (c->steps >= CHANGE_MAX_STEPS)
        return EM_RANGE;
    int rv = raft_assign(c->raft, &c->req, id, role, change_cb);
    if (rv)
        return cl_meta_raft_err(rv);
    c->steps++;
    return 0;
}

static void change_cb(struct raft_change *req, int status)
{
    cl_meta_change *c = req->data;
    if (status) {
        c->done(c, cl_meta_raft_err(status));
        return;
    }
    int rc = change_next(c);
    if (rc == 1)
        c->done(c, 0);
    else if (rc)
        c->done(c, rc);
}

int cl_meta_change_start(cl_meta_change *c, struct raft *r)
{
    if (raft_state(r) != RAFT_LEADER)
        return EM_NOTLEADER;
    c->req.data = c;
    c->raft = r;
    c->steps = 0;
    int rv;
    switch (c->kind) {
    case CL_META_CHANGE_ADD:
        if (c->id == 0 || memchr(c->addr, 0, sizeof c->addr) == NULL)
            return EM_INVAL;
        rv = raft_add(r, &c->req, c->id, c->addr, change_cb);
        break;
    case CL_META_CHANGE_REMOVE:
        if (c->id == r->id)
            return EM_INVAL;        /* transfer leadership first */
        rv = raft_remove(r, &c->req, c->id, change_cb);
        break;
    case CL_META_CHANGE_ROLES:
        return change_next(c);
    default:
        return EM_INVAL;
    }
    if (rv)
        return cl_meta_raft_err(rv);
    c->steps++;
    return 0;
}
