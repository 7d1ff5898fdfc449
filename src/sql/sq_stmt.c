/* sq_stmt.c - the per-connection prepared-statement cache, keyed by the
 * client's SQL text (before the pre-pass, so a hit skips it too).  A busy
 * statement (a cursor holds it) is never handed out twice: a second user of
 * the same text prepares its own copy.  Statements survive catalog changes:
 * SQLite re-prepares them when the schema changed.
 */
#include "sql/sql_int.h"

#include <string.h>

#include "util/mem.h"

sq_stmt_ent *sq_stmt_find(sq_db *d, const char *sql, size_t len)
{
    for (int i = 0; i < SQ_STMT_CACHE; i++) {
        sq_stmt_ent *e = &d->cache[i];
        if (e->sql && !e->busy && !e->dead && e->len == len && !memcmp(e->sql, sql, len)) {
            e->busy = 1;
            e->used = ++d->tick;
            return e;
        }
    }
    return NULL;
}

sq_stmt_ent *sq_stmt_add(sq_db *d, const char *sql, size_t len, sqlite3_stmt *st, int cls)
{
    sq_stmt_ent *v = NULL;
    for (int i = 0; i < SQ_STMT_CACHE; i++) {
        sq_stmt_ent *e = &d->cache[i];
        if (!e->sql) {
            v = e;
            break;
        }
        if (!e->busy && !e->dead && (!v || e->used < v->used))
            v = e;
    }
    if (!v)
        return NULL;
    char *copy = em_malloc(len ? len : 1);
    if (!copy)
        return NULL;
    memcpy(copy, sql, len);
    if (v->sql) {
        sqlite3_finalize(v->st);
        em_free(v->sql);
        em_free(v->types);
        sq_agg_free_q(v->agg);
    }
    *v = (sq_stmt_ent){ copy, len, st, cls, 1, 0, NULL, ++d->tick, NULL };
    return v;
}

void sq_stmt_release(sq_db *d, sq_stmt_ent *e, sqlite3_stmt *st)
{
    (void)d;
    if (!e) {
        sqlite3_finalize(st);
        return;
    }
    e->busy = 0;
    if (e->dead) {
        sqlite3_finalize(e->st);
        em_free(e->sql);
        em_free(e->types);
        sq_agg_free_q(e->agg);
        memset(e, 0, sizeof *e);
        return;
    }
    sqlite3_reset(e->st);
    sqlite3_clear_bindings(e->st);
}

void sq_stmt_flush(sq_db *d)
{
    for (int i = 0; i < SQ_STMT_CACHE; i++) {
        sq_stmt_ent *e = &d->cache[i];
        if (!e->sql)
            continue;
        if (e->busy) {
            e->dead = 1;
            continue;
        }
        sqlite3_finalize(e->st);
        em_free(e->sql);
        em_free(e->types);
        sq_agg_free_q(e->agg);
        memset(e, 0, sizeof *e);
    }
}

void sq_stmt_clear(sq_db *d)
{
    for (int i = 0; i < SQ_STMT_CACHE; i++)
        if (d->cache[i].sql) {
            sqlite3_finalize(d->cache[i].st);
            em_free(d->cache[i].sql);
            em_free(d->cache[i].types);
            sq_agg_free_q(d->cache[i].agg);
            memset(&d->cache[i], 0, sizeof d->cache[i]);
        }
}
