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

/* ---- The io guard ---------------------------------------------------------
 *
 * Four faults of libraft 0.15 (Debian 12's) in AppendEntries handling, all
 * found by ember-sim (tests/sim/), all fixed here from outside by wrapping
 * the raft_io (later libraft releases fix some of them themselves):
 *
 *  - A leader commits an entry of an older term once a majority stores it
 *    (the Raft paper's figure 8): a later leader that lacks it may still be
 *    elected and overwrite it, and servers that applied it stop ("conflicting
 *    terms").  Raft commits older entries only under one of the leader's own
 *    term.  The guard lowers a success answer's claim, on a leader, to its
 *    commit index when the claimed entry is of an older term, so only
 *    entries of its own term are counted (and those before them commit with
 *    them).  A new leader therefore writes a barrier at once (cl_meta.c).
 *
 *  - The follower commits up to min(leader's commit, its whole stored
 *    log), where Raft says min(leader's commit, the last entry this message
 *    let it check).  A follower with a tail left over from an older term
 *    (entries no majority took) then commits and applies that tail as if
 *    it were the leader's: two servers apply different entries at one
 *    index.  The guard lowers the message's leader_commit to what the
 *    message lets the follower check (prev_log_index + n_entries).
 *
 *  - The answer claims the follower's whole stored log ("I hold everything
 *    up to index N"), where it checked only the leader's entries up to
 *    prev_log_index + n_entries.  A follower with a tail left over from an
 *    older term (entries no majority took) then makes the leader believe
 *    it holds the leader's own entries at those indices: the leader counts
 *    it in the majority of entries it does not hold, and ignores its later
 *    rejections as older than that match, so it never catches up.  The
 *    guard notes what each AppendEntries lets the follower claim and cuts
 *    a larger claim down to it.
 *  - An answer sent once entries are on disk goes out even when the term
 *    changed while they were written, to the new leader, which takes it for
 *    its own log.  The guard drops such a success (the leader asks again
 *    with its next heartbeat).
 */

typedef struct guard_req {
    raft_io_append_cb cb;
    void             *data;
    raft_term         term;         /* the raft's term when the append began */
    uint64_t          verified;     /* what its answer may claim (0: a leader's append) */
    cl_meta_node     *node;
} guard_req;

static cl_meta_node *guard_node(struct raft_io *io)
{
    struct raft *r = io->data;      /* raft_init sets it */
    return r && r->fsm ? r->fsm->data : NULL;
}

static void guard_append_cb(struct raft_io_append *req, int status)
{
    guard_req *g = req->data;
    cl_meta_node *n = g->node;
    req->data = g->data;
    raft_io_append_cb cb = g->cb;
    int quiet = status == 0 && n->raft && n->raft->current_term != g->term;
    uint64_t keep = n->verified;
    n->verified = g->verified;
    raft_free(g);
    n->quiet += quiet;
    cb(req, status);                /* a follower's answer goes out in here */
    n->quiet -= quiet;
    n->verified = keep;
}

static int guard_append(struct raft_io *io, struct raft_io_append *req,
                        const struct raft_entry entries[], unsigned n, raft_io_append_cb cb)
{
    cl_meta_node *node = guard_node(io);
    guard_req *g = node ? raft_malloc(sizeof *g) : NULL;
    if (!g)
        return node ? RAFT_NOMEM : RAFT_INVALID;
    *g = (guard_req){ cb, req->data, node->raft ? node->raft->current_term : 0,
                      node->verified, node };
    req->data = g;
    int rv = node->io_append(io, req, entries, n, guard_append_cb);
    if (rv) {
        req->data = g->data;
        raft_free(g);
    }
    return rv;
}

static int guard_send(struct raft_io *io, struct raft_io_send *req,
                      const struct raft_message *m, raft_io_send_cb cb)
{
    cl_meta_node *node = guard_node(io);
    if (m->type != RAFT_IO_APPEND_ENTRIES_RESULT || m->append_entries_result.rejected)
        return node->io_send(io, req, m, cb);
    if (node->quiet) {
        node->stale_replies++;
        cb(req, 0);                 /* libraft's callback only frees req */
        return 0;
    }
    if (node->verified && m->append_entries_result.last_log_index > node->verified) {
        /* the io encodes or copies the message before send returns */
        struct raft_message c = *m;
        c.append_entries_result.last_log_index = node->verified;
        node->capped_replies++;
        return node->io_send(io, req, &c, cb);
    }
    return node->io_send(io, req, m, cb);
}

/* log_term: the term of the entry at index in l, 0 when l has none there. */
static raft_term log_term(const struct raft_log *l, raft_index index)
{
    size_t n = l->back >= l->front ? l->back - l->front : l->size - l->front + l->back;
    if (index > l->offset && index - l->offset <= n)
        return l->entries[(l->front + (index - l->offset - 1)) % l->size].term;
    return index && index == l->snapshot.last_index ? l->snapshot.last_term : 0;
}

static void guard_recv(struct raft_io *io, struct raft_message *m)
{
    cl_meta_node *node = guard_node(io);
    struct raft *r = io->data;
    if (m->type == RAFT_IO_APPEND_ENTRIES_RESULT && r && r->state == RAFT_LEADER &&
        !m->append_entries_result.rejected) {
        struct raft_append_entries_result *a = &m->append_entries_result;
        if (a->last_log_index > r->commit_index &&
            log_term(&r->log, a->last_log_index) != r->current_term) {
            a->last_log_index = r->commit_index;    /* counts nothing of an older term */
            node->capped_old++;
        }
    }
    if (m->type != RAFT_IO_APPEND_ENTRIES) {
        node->io_recv(io, m);
        return;
    }
    /* It may commit, and claim in its answer (now, or once its entries are
     * on disk), no more than the entries this message lets it check. */
    uint64_t keep = node->verified;
    node->verified = m->append_entries.prev_log_index + m->append_entries.n_entries;
    if (m->append_entries.leader_commit > node->verified) {
        m->append_entries.leader_commit = node->verified;
        node->capped_commits++;
    }
    node->io_recv(io, m);
    node->verified = keep;
}

static int guard_start(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                       raft_io_recv_cb recv)
{
    cl_meta_node *node = guard_node(io);
    node->io_recv = recv;
    return node->io_start(io, msecs, tick, guard_recv);
}

void cl_meta_node_bind(cl_meta_node *n, struct raft *r)
{
    n->raft = r;
#ifdef EM_PLANT_NO_IO_GUARD
    /* Planted bug, for ember-sim's proof only (tests/scripts/sim.sh runs
     * build/plant/ember-sim-no_io_guard, which must fail): no guard. */
    return;
#endif
    if (r->io && r->io->append != guard_append) {
        n->io_append = r->io->append;
        n->io_send = r->io->send;
        n->io_start = r->io->start;
        r->io->append = guard_append;
        r->io->send = guard_send;
        r->io->start = guard_start;
    }
}

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
