/* proto_sqlrun.c - SQL requests that would stall the network loops run on
 * threads of their own.
 *
 * A query can take seconds (a join over a large table, a big CREATE INDEX);
 * run on the loop thread it would stall every other connection the loop
 * owns.  Handing every query to another thread costs a wake-up and a few
 * microseconds of CPU each way, several times what a point SELECT by key
 * costs.  So under emberd (pr_server_sql_start):
 *
 *   - a SELECT (2002, 2004) first runs on the loop with a budget of
 *     PR_SQL_INLINE_NS (200 us) for its first page; most point and small
 *     queries finish well inside it and answer at once.  One that runs
 *     over is interrupted (a SELECT changed nothing), the connection
 *     remembers its text (16 per connection), and it is handed over;
 *   - DML, DDL and cursor pages (2003, 2005) are always handed over: they
 *     cannot be undone half way, and pages belong to queries that were
 *     already long;
 *   - handing over: the loop copies the frame into the connection's job and
 *     parks the connection, so every later frame of it waits in its queue
 *     (its requests keep their order, its SQL session has one user at a
 *     time); an SQL thread runs the request as the loop would
 *     (pr_exec_request), waits for its own WAL group commit (DML must be
 *     durable before its reply leaves, as before_send makes the loop's),
 *     marks the job done and wakes the loops; pr_conn_resume ->
 *     pr_sqlx_deliver sends the reply and runs what waited.
 *
 * Other connections are served meanwhile.  A connection that closes while
 * its job runs cancels it (the session's progress handler stops SQLite at
 * its next check) and leaves freeing the connection to the SQL thread; one
 * whose job still waits in the queue takes it out and frees at once.  The
 * pool's size bounds how much CPU SQL can take from the loops (default 1);
 * queries beyond it wait their turn in FIFO order.  The in-process path
 * (pr_feed with no pool: unit tests, the fuzz target) runs SQL inline, with
 * no budget.
 */
#include "proto/proto_int.h"

#include <pthread.h>
#include <string.h>

#include "sql/sql.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/mem.h"

enum { J_IDLE, J_QUEUED, J_RUNNING, J_DONE };

struct pr_sqljob {
    pr_conn  *c;
    em_buf    req;                  /* the request frame body (op, id, payload) */
    em_buf    out;                  /* its whole reply frame */
    int       op, status, commit_rc;
    uint64_t  ns;                   /* time the SQL thread spent on it */
    int       state;                /* J_* (under the pool's lock) */
    int       orphan;               /* its connection closed: the SQL thread frees it */
    struct pr_sqljob *next;
};

struct pr_sqlx {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    pr_sqljob      *head, *tail;
    int             stop, nth;
    pthread_t       th[PR_SQL_MAX_THREADS];
    int           (*commit)(void *arg);
    void          (*wake)(void *arg);
    void           *arg;
    _Atomic uint64_t ran, cancelled, queued_now;
    em_mem_stats    mem[PR_SQL_MAX_THREADS];    /* each thread's, after each job */
};

typedef struct wk_arg { pr_sqlx *x; int idx; } wk_arg;

static void job_free(pr_sqljob *j)
{
    if (!j)
        return;
    em_buf_free(&j->req);
    em_buf_free(&j->out);
    em_free(j);
}

static void run_job(pr_sqlx *x, pr_sqljob *j)
{
    pr_conn *c = j->c;
    /* Counted by the loop at delivery: the stats block is the loop's. */
    struct pr_stats *st = c->stats;
    c->stats = NULL;
    uint64_t t0 = em_now_ns();
    em_buf_reset(&j->out);
    c->pooled = 1;
    int rc = pr_exec_request(c, j->req.p, j->req.len, &j->out);
    c->pooled = 0;
    c->stats = st;
    j->status = rc < 0 ? PR_ST_FAILED : c->last_status;
    j->commit_rc = rc < 0 ? rc : x->commit ? x->commit(x->arg) : 0;
    j->ns = em_now_ns() - t0;
}

static void *worker(void *arg)
{
    pr_sqlx *x = ((wk_arg *)arg)->x;
    int me = ((wk_arg *)arg)->idx;
    em_free(arg);
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->head && !x->stop)
            pthread_cond_wait(&x->cv, &x->mu);
        if (!x->head)
            break;
        pr_sqljob *j = x->head;
        x->head = j->next;
        if (!x->head)
            x->tail = NULL;
        j->next = NULL;
        j->state = J_RUNNING;
        atomic_fetch_sub(&x->queued_now, 1);
        pthread_mutex_unlock(&x->mu);
        run_job(x, j);
        atomic_fetch_add(&x->ran, 1);
        pthread_mutex_lock(&x->mu);
        j->state = J_DONE;
        x->mem[me] = em_mem_thread();   /* before the reply can reach anyone */
        int orphan = j->orphan;
        pthread_mutex_unlock(&x->mu);
        if (orphan) {
            atomic_fetch_add(&x->cancelled, 1);
            pr_conn_free(j->c);     /* the state is J_DONE: frees the job too */
        } else if (x->wake) {
            x->wake(x->arg);
        }
        pthread_mutex_lock(&x->mu);
        x->mem[me] = em_mem_thread();
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

int pr_server_sql_start(pr_server *s, int threads, int (*commit)(void *arg),
                        void (*wake)(void *arg), void *arg)
{
    if (threads <= 0)
        threads = 1;
    if (threads > PR_SQL_MAX_THREADS)
        threads = PR_SQL_MAX_THREADS;
    pr_sqlx *x = em_calloc(1, sizeof *x);
    if (!x)
        return EM_NOMEM;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->commit = commit;
    x->wake = wake;
    x->arg = arg;
    for (; x->nth < threads; x->nth++) {
        wk_arg *a = em_malloc(sizeof *a);
        if (!a)
            break;
        *a = (wk_arg){x, x->nth};
        if (pthread_create(&x->th[x->nth], NULL, worker, a) != 0) {
            em_free(a);
            break;
        }
        pthread_setname_np(x->th[x->nth], "em-sql");
    }
    if (!x->nth) {
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
        em_free(x);
        return EM_NOMEM;
    }
    s->sqlx = x;
    return 0;
}

void pr_server_sql_stop(pr_server *s)
{
    pr_sqlx *x = s->sqlx;
    if (!x)
        return;
    /* Connections still open keep their jobs: the threads drain the queue
     * (their replies are delivered, or freed with the connection), then
     * exit. */
    pthread_mutex_lock(&x->mu);
    x->stop = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    for (int i = 0; i < x->nth; i++)
        pthread_join(x->th[i], NULL);
    s->sqlx = NULL;
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    em_free(x);
}

void pr_server_sql_mem_stats(pr_server *s, em_mem_stats *sum)
{
    pr_sqlx *x = s->sqlx;
    memset(sum, 0, sizeof *sum);
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    for (int i = 0; i < x->nth; i++) {
        sum->allocs += x->mem[i].allocs;
        sum->bytes += x->mem[i].bytes;
        sum->frees += x->mem[i].frees;
    }
    pthread_mutex_unlock(&x->mu);
}

void pr_server_sql_stats(pr_server *s, uint64_t *ran, uint64_t *cancelled, uint64_t *queued)
{
    pr_sqlx *x = s->sqlx;
    *ran = x ? atomic_load(&x->ran) : 0;
    *cancelled = x ? atomic_load(&x->cancelled) : 0;
    *queued = x ? atomic_load(&x->queued_now) : 0;
}

uint64_t pr_server_sql_direct_aggs(pr_server *s)
{
    return s->sql ? sq_engine_direct_aggs(s->sql) : 0;
}

int pr_sqlx_take(pr_conn *c, const uint8_t *body, size_t len)
{
    pr_sqlx *x = c->srv->sqlx;
    if (!x || c->forwarded || len < 10)
        return 0;
    /* The session exists before the job is queued, so the loop thread can
     * cancel it (pr_sqlx_release) without racing its creation. */
    if (!c->sql && c->srv->sql && !pr_sql_sess(c))
        return EM_NOMEM;
    pr_sqljob *j = c->job;
    if (!j) {
        if (!(j = em_calloc(1, sizeof *j)))
            return EM_NOMEM;
        j->c = c;
        c->job = j;
    }
    em_buf_reset(&j->req);
    if (em_buf_append(&j->req, body, len))
        return EM_NOMEM;
    j->op = (int)(uint16_t)em_ld16(body);
    pthread_mutex_lock(&x->mu);
    j->state = J_QUEUED;
    if (x->tail)
        x->tail->next = j;
    else
        x->head = j;
    x->tail = j;
    atomic_fetch_add(&x->queued_now, 1);
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->mu);
    c->job_busy = 1;
    return 1;
}

static uint64_t text_key(const char *sql, size_t len)
{
    return (uint64_t)em_crc32c(0, sql, len) << 32 | (uint32_t)len;
}

int pr_sqlx_inline(pr_conn *c, int op, const char *sql, size_t len)
{
    if (!c->srv->sqlx || c->pooled || c->forwarded)
        return 2;
    /* On a cluster a query waits for other members: never on the loop. */
    if (op == 2003 || op == 2005 || c->srv->opt.cluster)
        return 0;
    uint64_t k = text_key(sql, len);
    return c->sql_slow[k % 16] != k;
}

void pr_sqlx_note_slow(pr_conn *c, const char *sql, size_t len)
{
    uint64_t k = text_key(sql, len);
    c->sql_slow[k % 16] = k;
}

int pr_sqlx_deliver(pr_conn *c, em_buf *out)
{
    pr_sqlx *x = c->srv->sqlx;
    pr_sqljob *j = c->job;
    if (!c->job_busy || !x)
        return 0;
    pthread_mutex_lock(&x->mu);
    int done = j->state == J_DONE;
    pthread_mutex_unlock(&x->mu);
    if (!done)
        return 0;
    c->job_busy = 0;
    j->state = J_IDLE;
    /* A reply whose writes the WAL could not make durable must never
     * leave (as before_send): the connection closes. */
    if (j->commit_rc)
        return j->commit_rc < 0 ? j->commit_rc : EM_IO;
    if (em_buf_append(out, j->out.p, j->out.len))
        return EM_NOMEM;
    if (c->stats)
        pr_stats_req(c->stats, j->op, j->status, j->ns);
    /* A huge result page must not pin its memory for the connection's
     * life (as trim_scratch). */
    if (j->out.cap > ((size_t)1 << 20))
        em_buf_free(&j->out);
    if (j->req.cap > ((size_t)1 << 20))
        em_buf_free(&j->req);
    return 1;
}

int pr_sqlx_release(pr_conn *c)
{
    pr_sqljob *j = c->job;
    pr_sqlx *x = c->srv->sqlx;
    if (!j)
        return 0;
    int keep = 0;
    if (x) {
        pthread_mutex_lock(&x->mu);
        if (j->state == J_QUEUED) {
            /* take it out of the queue: it never ran */
            pr_sqljob **pp = &x->head, *prev = NULL;
            while (*pp && *pp != j) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            if (*pp) {
                *pp = j->next;
                if (x->tail == j)
                    x->tail = prev;
                atomic_fetch_sub(&x->queued_now, 1);
                atomic_fetch_add(&x->cancelled, 1);
            }
            j->state = J_IDLE;
        } else if (j->state == J_RUNNING) {
            /* Under the lock: once it is released the SQL thread may end
             * the job and free c. */
            j->orphan = 1;
            if (c->sql)
                sq_sess_cancel(c->sql);
            keep = 1;
        }
        pthread_mutex_unlock(&x->mu);
    }
    if (keep)
        return 1;
    c->job = NULL;
    job_free(j);
    return 0;
}
