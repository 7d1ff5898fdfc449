/* sq_mem.c - a memory quota per SQL query.
 *
 * SQLite's heap cap (sqlite3_hard_heap_limit64) is one number for the whole
 * process: one query sorting a large table could take all of it and make
 * every other query fail.  So SQLite's allocator is wrapped: while a
 * statement steps (sq_mem_enter .. sq_mem_leave, on the thread that steps
 * it) the bytes it allocates net of what it frees count against its
 * quota, and an allocation past the quota fails - SQLite then stops the
 * statement with SQLITE_NOMEM, which sq_mem_hit tells apart from a real
 * out-of-memory.  The count lives in the cursor, so a sort that grew on
 * one page still counts on the next.  Memory freed during a step that was
 * allocated outside it (a statement's own structures) only gives room.
 *
 * Why a wrapper and not SQLite's own limits: they are per process
 * (hard/soft heap limit) or per value (SQLITE_LIMIT_LENGTH); none is per
 * statement.  The wrapper adds one thread-local load per allocation when
 * no statement steps.
 */
#include "sql/sql_int.h"

#include <pthread.h>

#include "util/log.h"

static sqlite3_mem_methods base;    /* SQLite's own allocator */
static int installed;

static _Thread_local sq_memq *tl;

static int charge(int64_t n)
{
    sq_memq *s = tl;
    if (!s)
        return 1;
    if (n > 0 && *s->used + n > s->limit) {
        s->hit = 1;
        return 0;
    }
    *s->used += n;
    return 1;
}

static void *q_malloc(int n)
{
    if (!charge(n))
        return NULL;
    void *p = base.xMalloc(n);
    if (!p)
        charge(-(int64_t)n);
    else if (tl)
        charge(base.xSize(p) - n);  /* the rounded-up size */
    return p;
}

static void q_free(void *p)
{
    if (p && tl)
        charge(-(int64_t)base.xSize(p));
    base.xFree(p);
}

static void *q_realloc(void *p, int n)
{
    int64_t old = p ? base.xSize(p) : 0;
    if (!charge(n - old))
        return NULL;
    void *q = base.xRealloc(p, n);
    if (!q)
        charge(old - n);
    else if (tl)
        charge(base.xSize(q) - n);
    return q;
}

static int q_size(void *p) { return base.xSize(p); }
static int q_roundup(int n) { return base.xRoundup(n); }
static int q_init(void *a) { return base.xInit(a); }
static void q_shutdown(void *a) { base.xShutdown(a); }

static void install(void)
{
    sqlite3_mem_methods m;
    /* Only before SQLite initialises (the first engine, before any other
     * SQLite call in the process): otherwise queries run without a quota,
     * under the process-wide cap alone. */
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &base) != SQLITE_OK) {
        EM_WARN("SQL: SQLite was initialised before ember: no per-query memory quota");
        return;
    }
    m = base;
    m.xMalloc = q_malloc;
    m.xFree = q_free;
    m.xRealloc = q_realloc;
    m.xSize = q_size;
    m.xRoundup = q_roundup;
    m.xInit = q_init;
    m.xShutdown = q_shutdown;
    if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK) {
        EM_WARN("SQL: SQLite was initialised before ember: no per-query memory quota");
        return;
    }
    installed = 1;
}

void sq_mem_install(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install);
}

void sq_mem_enter(sq_memq *q, int64_t *used, int64_t limit)
{
    q->prev = tl;
    q->used = used;
    q->limit = limit;
    q->hit = 0;
    if (installed && limit > 0)
        tl = q;
}

int sq_mem_leave(sq_memq *q)
{
    tl = q->prev;
    return q->hit;
}
