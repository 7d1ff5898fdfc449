/* sq_agg.c - whole-table aggregates computed over the store's scan instead
 * of through SQLite's virtual-table loop (issue 18's full-table aggregate).
 *
 * SELECT f(x) [, g(y) ...] FROM t, with f among COUNT, SUM, AVG, TOTAL, MIN
 * and MAX over plain numeric columns (or COUNT(*), COUNT(1)) and nothing else - no
 * WHERE, GROUP BY, DISTINCT, join or table alias - reads every row of t exactly
 * once and keeps one accumulator per result.  Through SQLite the same query
 * costs a virtual-table call to step each row and another to read each
 * column, about as much again as the scan itself; here a row costs the
 * scan's copy, a type test and a field load per column.
 *
 * The answer must be the one SQLite gives, to the bit, so the accumulators
 * follow SQLite 3.40's (func.c): SUM keeps an exact 64-bit sum while every
 * input is an integer and a double sum beside it (returned once any input
 * was a double), AVG is that double sum over the count, MIN/MAX keep the
 * first of equal values and compare integers with doubles exactly; the rows
 * arrive in the virtual table's order, so the double sums round alike.
 * SQLite 3.43 changed how SUM, AVG and TOTAL round, so with a newer library
 * those three go through SQLite.  Whatever this code does not take as SQLite
 * would - a value that is not a number, an integer SUM that overflows (SQLite
 * reports the error), a cache it cannot scan - sends the query back to
 * SQLite before a row is returned: the statement SQLite prepared is kept,
 * unstepped, for that.
 *
 * Bounded as a SQLite step is: the session's cancel, the query's timeout
 * and the network loop's inline budget are checked every AGG_CHECK rows.
 */
#include "sql/sql_int.h"

#include <string.h>
#include <strings.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

enum { AGG_COUNT = 1, AGG_SUM, AGG_AVG, AGG_TOTAL, AGG_MIN, AGG_MAX };
enum { AGG_CHECK = 1024 };      /* rows between clock and cancel checks */

static const char *const FN[] = { NULL, "COUNT", "SUM", "AVG", "TOTAL", "MIN", "MAX" };

/* The shape read from the client's text once, when it is prepared. */
struct sq_aggq {
    char     schema[SQ_MAX_NAME];   /* "" = the session's */
    char     table[SQ_MAX_NAME];
    uint32_t n;
    struct { uint8_t fn; char col[SQ_MAX_NAME]; } f[SQ_AGG_MAX];   /* col "" = COUNT(*) */
};

/* One result's accumulator (SQLite's SumCtx and min/max Mem, numbers only). */
typedef struct acc {
    uint8_t  fn;
    int      col;               /* index in t->cols, or -1 for COUNT(*) */
    int64_t  cnt, isum;
    double   rsum;
    int      approx, overflow;
    int      has, isint;        /* MIN/MAX: the best value so far */
    int64_t  bi;
    double   bd;
} acc;

struct sq_aggrun {
    sq_table  *t;               /* ref'd */
    st_scan   *sc;
    uint32_t   n;
    acc        a[SQ_AGG_MAX];
    bin_floc   floc[SQ_AGG_MAX];   /* per result: where its field sits */
    sq_tycache tc;
    int        sent;            /* the one row went out */
};

/* ---- the shape ---------------------------------------------------------- */

static int name_at(const sq_lexed *l, uint32_t i, char *out)
{
    if (i >= l->ntok || (l->t[i].kind != SQ_TK_WORD && l->t[i].kind != SQ_TK_QUOTED))
        return 0;
    static const char *const reserved[] = { "DISTINCT", "ALL", "FROM", "WHERE", "SELECT", "AS" };
    for (size_t k = 0; k < sizeof reserved / sizeof *reserved; k++)
        if (sq_word_is(l, i, reserved[k]))
            return 0;
    return sq_ident(l, i, out, SQ_MAX_NAME) == 0;
}

sq_aggq *sq_agg_parse(const sq_lexed *l)
{
    if (!sq_word_is(l, 0, "SELECT"))
        return NULL;
    sq_aggq q;
    memset(&q, 0, sizeof q);
    uint32_t i = 1;
    for (;;) {
        if (q.n == SQ_AGG_MAX)
            return NULL;
        uint8_t fn = 0;
        for (uint8_t k = AGG_COUNT; k <= AGG_MAX && !fn; k++)
            if (sq_word_is(l, i, FN[k]))
                fn = k;
        if (!fn || !sq_punct_is(l, i + 1, '('))
            return NULL;
        q.f[q.n].fn = fn;
        /* COUNT(*), and COUNT(1) as JDBC tools write it: a constant is
         * never NULL, so it counts every row. */
        if (fn == AGG_COUNT && (sq_punct_is(l, i + 2, '*') ||
                                (i + 2 < l->ntok && l->t[i + 2].kind == SQ_TK_NUMBER)))
            i += 3;
        else if (name_at(l, i + 2, q.f[q.n].col) && q.f[q.n].col[0])
            i += 3;
        else
            return NULL;
        if (!sq_punct_is(l, i, ')'))
            return NULL;
        q.n++;
        i++;
        char alias[SQ_MAX_NAME];        /* names are SQLite's to give */
        if (sq_word_is(l, i, "AS") && name_at(l, i + 1, alias))
            i += 2;
        else if (name_at(l, i, alias))
            i++;
        if (sq_punct_is(l, i, ','))
            i++;
        else if (sq_word_is(l, i, "FROM"))
            break;
        else
            return NULL;
    }
    i++;
    if (!name_at(l, i, q.table))
        return NULL;
    if (sq_punct_is(l, i + 1, '.')) {
        memcpy(q.schema, q.table, sizeof q.schema);
        if (!name_at(l, i + 2, q.table))
            return NULL;
        i += 2;
    }
    for (i++; sq_punct_is(l, i, ';'); i++)
        ;
    if (i != l->ntok)
        return NULL;
    sq_aggq *out = em_malloc(sizeof *out);
    if (out)
        *out = q;
    return out;
}

void sq_agg_free_q(sq_aggq *q) { em_free(q); }

/* ---- resolving it against the catalog ------------------------------------ */

static int numeric(int type)
{
    return type == SQ_T_BYTE || type == SQ_T_SHORT || type == SQ_T_INT || type == SQ_T_LONG ||
           type == SQ_T_FLOAT || type == SQ_T_DOUBLE;
}

/* find_col: the one column SQLite would take name for (its names ignore
 * case), or -1. */
static int find_col(const sq_table *t, const char *name)
{
    int at = -1;
    for (uint32_t i = 0; i < t->ncols; i++)
        if (!strcasecmp(t->cols[i].name, name)) {
            if (at >= 0)
                return -1;
            at = (int)i;
        }
    return at;
}

sq_aggrun *sq_agg_start(sq_sess *s, const sq_db *d, const sq_aggq *q)
{
    if (!q || !s->eng->direct_agg)
        return NULL;
    /* An unqualified name is the session schema's table: that schema is
     * the first one attached, so SQLite looks there first too. */
    const char *schema = q->schema[0] ? q->schema : d->schema;
    sq_table *t = sq_cat_find(s->eng, schema, q->table);
    if (!t)
        return NULL;
    sq_aggrun *r = em_calloc(1, sizeof *r);
    if (!r) {
        sq_table_unref(t);
        return NULL;
    }
    r->t = t;
    r->n = q->n;
    int kbn = sqlite3_libversion_number() >= 3043000;
    for (uint32_t i = 0; i < q->n; i++) {
        acc *a = &r->a[i];
        a->fn = q->f[i].fn;
        a->col = q->f[i].col[0] ? find_col(t, q->f[i].col) : -1;
        if (q->f[i].col[0] && (a->col < 0 || !numeric(t->cols[a->col].type)))
            goto no;
        if (kbn && (a->fn == AGG_SUM || a->fn == AGG_AVG || a->fn == AGG_TOTAL))
            goto no;
        /* With an index SQLite answers a lone MIN/MAX from its first entry:
         * of equal values it may pick another than the scan's first. */
        if (t->nix && (a->fn == AGG_MIN || a->fn == AGG_MAX))
            goto no;
        if (a->col >= 0 && t->cols[a->col].alias == SQ_ALIAS_KEY &&
            (t->key_wrapped || t->key_sqtype == SQ_T_OBJECT))
            goto no;
    }
    return r;
no:
    sq_agg_free(r);
    return NULL;
}

void sq_agg_free(sq_aggrun *r)
{
    if (!r)
        return;
    st_scan_close(r->sc);
    sq_table_unref(r->t);
    em_free(r);
}

/* ---- rows ---------------------------------------------------------------- */

/* value: column c's value in the row as SQLite would see it (the virtual
 * table's column read): 0 with *sv set (NULL, INTEGER or FLOAT), or 1 if it
 * is something else. */
static int value(sq_aggrun *r, sq_engine *e, int c, bin_floc *fl, const uint8_t *k,
                 const uint8_t *v, sq_sv *sv)
{
    const sq_table *t = r->t;
    const sq_col *col = &t->cols[c];
    const uint8_t *f;
    if (col->alias == SQ_ALIAS_KEY) {
        f = bin_rd_resolve(k);
    } else if (col->alias == SQ_ALIAS_VAL) {
        f = v;
    } else {
        int kv = col->key ? 0 : 1;
        const uint8_t *o = kv ? v : bin_rd_resolve(k);
        f = sq_field_loc(e->reg, &r->tc.ty[kv], &r->tc.tid[kv], o, col->fid, fl);
    }
    if (!f) {
        sv->type = SQLITE_NULL;
        return 0;
    }
    switch (f[0]) {
    case BIN_INT:
        sv->type = SQLITE_INTEGER;
        sv->i = (int32_t)em_ld32(f + 1);
        return 0;
    case BIN_LONG:
        sv->type = SQLITE_INTEGER;
        sv->i = (int64_t)em_ld64(f + 1);
        return 0;
    case BIN_DOUBLE:
        sv->type = SQLITE_FLOAT;
        memcpy(&sv->d, f + 1, 8);
        break;
    case BIN_NULL: case BIN_BYTE: case BIN_SHORT: case BIN_FLOAT:
        sq_val_get(f, col->type, sv);
        if (sv->type != SQLITE_NULL && sv->type != SQLITE_INTEGER && sv->type != SQLITE_FLOAT)
            return 1;
        break;
    default:
        return 1;
    }
    if (sv->type == SQLITE_FLOAT && sv->d != sv->d)
        sv->type = SQLITE_NULL;             /* SQLite: NaN is NULL */
    return 0;
}

/* cmp_num: SQLite's order of two numbers (sqlite3MemCompare). */
static int cmp_num(int ai, int64_t a, double ad, int bi, int64_t b, double bd)
{
    if (ai && bi)
        return a < b ? -1 : a > b;
    if (!ai && !bi)
        return ad < bd ? -1 : ad > bd;
    /* An integer against a double, exactly: x86-64's long double holds
     * every 64-bit integer. */
    long double x = ai ? (long double)a : (long double)ad;
    long double y = bi ? (long double)b : (long double)bd;
    return x < y ? -1 : x > y;
}

static int add_row(sq_aggrun *r, sq_engine *e, const uint8_t *k, const uint8_t *v)
{
    sq_sv sv;
    for (uint32_t i = 0; i < r->n; i++) {
        acc *a = &r->a[i];
        if (a->col < 0) {
            a->cnt++;
            continue;
        }
        if (value(r, e, a->col, &r->floc[i], k, v, &sv))
            return 1;
        if (sv.type == SQLITE_NULL)
            continue;
        int isint = sv.type == SQLITE_INTEGER;
        switch (a->fn) {
        case AGG_COUNT:
            a->cnt++;
            break;
        case AGG_MIN: case AGG_MAX: {
            if (!a->has) {
                a->has = 1;
            } else {
                int c = cmp_num(a->isint, a->bi, a->bd, isint, sv.i, sv.d);
                if (a->fn == AGG_MIN ? c <= 0 : c >= 0)
                    break;
            }
            a->isint = isint;
            a->bi = sv.i;
            a->bd = sv.d;
            break;
        }
        default:                            /* SUM, AVG, TOTAL */
            a->cnt++;
            if (isint) {
                a->rsum += (double)sv.i;
                if (!(a->approx | a->overflow) && __builtin_add_overflow(a->isum, sv.i, &a->isum))
                    a->approx = a->overflow = 1;
            } else {
                a->rsum += sv.d;
                a->approx = 1;
            }
            if (a->overflow && a->fn == AGG_SUM)
                return 1;                   /* SQLite's "integer overflow" error */
        }
    }
    return 0;
}

/* result: accumulator a's value as SQLite's finalizer gives it. */
static void result(const acc *a, sq_sv *sv)
{
    sv->type = SQLITE_NULL;
    switch (a->fn) {
    case AGG_COUNT:
        sv->type = SQLITE_INTEGER;
        sv->i = a->cnt;
        return;
    case AGG_TOTAL:
        sv->type = SQLITE_FLOAT;
        sv->d = a->rsum;
        return;
    case AGG_AVG:
        if (a->cnt) {
            sv->type = SQLITE_FLOAT;
            sv->d = a->rsum / (double)a->cnt;
        }
        return;
    case AGG_SUM:
        if (a->cnt) {
            sv->type = a->approx ? SQLITE_FLOAT : SQLITE_INTEGER;
            sv->d = a->rsum;
            sv->i = a->isum;
        }
        return;
    default:
        if (a->has) {
            sv->type = a->isint ? SQLITE_INTEGER : SQLITE_FLOAT;
            sv->i = a->bi;
            sv->d = a->bd;
        }
    }
}

int sq_agg_page(sq_sess *s, sq_cursor *c, em_buf *out, uint32_t *rows, int *more)
{
    sq_aggrun *r = c->agg;
    *rows = 0;
    *more = 0;
    if (r->sent)
        return 0;
    int64_t ms = c->timeout_ms > 0 ? c->timeout_ms : SQ_DEFAULT_STEP_MS;
    uint64_t now = em_now_ns(), deadline = now + (uint64_t)ms * 1000000u;
    uint64_t budget = c->budget_ns ? now + c->budget_ns : 0;
    const sq_table *t = r->t;
    if (!r->sc) {
        const sq_remote *rem = s->rem;
        if (rem ? rem->scan(rem->ctx, t->cache, &r->sc) : st_scan_open(t->cache, -1, &r->sc))
            return SQ_AGG_FALLBACK;         /* SQLite's path reports it */
    }
    for (uint32_t n = 1;; n++) {
        const uint8_t *k, *v;
        uint32_t kl, vl;
        int rc = st_scan_next(r->sc, &k, &kl, &v, &vl);
        if (rc == 0)
            break;
        if (rc < 0)
            return SQ_AGG_FALLBACK;
        v = bin_rd_resolve(v);
        if (sq_belongs(t->val_sqtype, t->val_tid, v) && add_row(r, s->eng, k, v))
            return SQ_AGG_FALLBACK;
        if (n % AGG_CHECK == 0) {
            if (sq_sess_cancelled(s))
                return sq_fail(s, EM_TIMEOUT, "%s", SQ_CANCELLED);
            now = em_now_ns();
            if (budget && now > budget)
                return EM_AGAIN;            /* the caller runs it again off the loop */
            if (now > deadline)
                return sq_fail(s, EM_TIMEOUT, "%s", SQ_CANCELLED);
        }
    }
    st_scan_close(r->sc);
    r->sc = NULL;
    size_t start = out->len;
    for (uint32_t i = 0; i < r->n; i++) {
        sq_sv sv;
        result(&r->a[i], &sv);
        if (sq_val_out_num(&sv, c->types[i], out)) {
            out->len = start;
            return sq_fail(s, EM_NOMEM, "Out of memory");
        }
    }
    r->sent = 1;
    *rows = 1;
    atomic_fetch_add_explicit(&s->eng->direct_aggs, 1, memory_order_relaxed);
    return 0;
}
