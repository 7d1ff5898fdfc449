/* bench_tx.c - single-node transaction cost against a plain put (issue 17),
 * in process, through cl_tx (cluster/cl_tx.h) over the store with no WAL:
 * what a transaction adds to the store's own work, before any protocol.
 *
 * Key: int cycling over 1 000 keys, all present before timing (every put
 * overwrites in place).  Value: a 5-byte int.  One op = one transaction:
 *   st_put            - plain put on an ATOMIC cache (the baseline)
 *   implicit put      - put on a TRANSACTIONAL cache outside a transaction:
 *                       a one-op PESSIMISTIC READ_COMMITTED transaction, as
 *                       proto_tx.c runs it (lock, buffer, commit, unlock)
 *   <mode> get+put    - start, get the key, put it, commit (the transaction
 *                       object is reused, as a connection reuses its slot)
 *   PESSIMISTIC RR 4 puts - start, 4 puts, commit
 * Run: build/ember-bench micro tx
 */
#include "bench.h"

#include "cluster/cl_tx.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <string.h>

enum { NKEYS = 1000 };

typedef struct tx_ctx {
    st_store *st;
    st_cache *atomic, *txc;
    cl_txm   *m;
    cl_tx    *tx;
    uint8_t   keys[NKEYS][5];
    uint8_t   val[5];
    em_buf    out;
    uint32_t  next;
} tx_ctx;

static void tx_teardown(void *p)
{
    tx_ctx *x = p;
    cl_tx_free(x->tx);
    cl_txm_free(x->m);
    st_close(x->st);
    em_buf_free(&x->out);
    em_free(x);
}

static st_cache *make(st_store *s, const char *name, int atomicity)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.atomicity_mode = atomicity;
    st_cache *c = NULL;
    return st_cache_create(s, &cfg, &c) == 0 ? c : NULL;
}

static void *tx_setup(void)
{
    tx_ctx *x = em_calloc(1, sizeof *x);
    if (!x)
        return NULL;
    st_options o = {{"default", 0, 0}};
    if (st_open(&x->st, &o) || !(x->atomic = make(x->st, "a", 1)) ||
        !(x->txc = make(x->st, "t", 0)) || cl_txm_new(&x->m, x->st) ||
        cl_tx_begin(x->m, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0, &x->tx)) {
        tx_teardown(x);
        return NULL;
    }
    x->val[0] = 3;
    em_st32(x->val + 1, 42);
    for (int i = 0; i < NKEYS; i++) {
        x->keys[i][0] = 3;
        em_st32(x->keys[i] + 1, (uint32_t)i);
        if (st_put(x->atomic, NULL, x->keys[i], 5, x->val, 5) ||
            st_put(x->txc, NULL, x->keys[i], 5, x->val, 5)) {
            tx_teardown(x);
            return NULL;
        }
    }
    cl_tx_rollback(x->tx);
    return x;
}

static inline const uint8_t *next_key(tx_ctx *x)
{
    const uint8_t *k = x->keys[x->next];
    x->next = x->next + 1 == NKEYS ? 0 : x->next + 1;
    return k;
}

static int b_plain_put(void *p, uint64_t n)
{
    tx_ctx *x = p;
    for (uint64_t i = 0; i < n; i++)
        if (st_put(x->atomic, NULL, next_key(x), 5, x->val, 5))
            return -1;
    return 0;
}

static int b_implicit_put(void *p, uint64_t n)
{
    tx_ctx *x = p;
    for (uint64_t i = 0; i < n; i++) {
        if (cl_tx_restart(x->tx, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0) ||
            cl_tx_put(x->tx, x->txc, next_key(x), 5, x->val, 5) || cl_tx_commit(x->tx))
            return -1;
    }
    return 0;
}

static int get_put(tx_ctx *x, uint64_t n, int conc, int iso)
{
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *k = next_key(x);
        int found = 0;
        em_buf_reset(&x->out);
        if (cl_tx_restart(x->tx, conc, iso, 0) ||
            cl_tx_get(x->tx, x->txc, k, 5, 1, &x->out, &found) || !found ||
            cl_tx_put(x->tx, x->txc, k, 5, x->val, 5) || cl_tx_commit(x->tx))
            return -1;
    }
    return 0;
}

static int b_pes_rr(void *p, uint64_t n) { return get_put(p, n, CL_TX_PESSIMISTIC, CL_TX_REPEATABLE_READ); }
static int b_opt_ser(void *p, uint64_t n) { return get_put(p, n, CL_TX_OPTIMISTIC, CL_TX_SERIALIZABLE); }
static int b_opt_rc(void *p, uint64_t n) { return get_put(p, n, CL_TX_OPTIMISTIC, CL_TX_READ_COMMITTED); }

static int b_pes_4(void *p, uint64_t n)
{
    tx_ctx *x = p;
    for (uint64_t i = 0; i < n; i++) {
        if (cl_tx_restart(x->tx, CL_TX_PESSIMISTIC, CL_TX_REPEATABLE_READ, 0))
            return -1;
        for (int j = 0; j < 4; j++)
            if (cl_tx_put(x->tx, x->txc, next_key(x), 5, x->val, 5))
                return -1;
        if (cl_tx_commit(x->tx))
            return -1;
    }
    return 0;
}

BENCH_REGISTER(tx_plain, {"tx", "ATOMIC cache", "st_put", NULL, b_plain_put, tx_setup,
               tx_teardown, 0})
BENCH_REGISTER(tx_implicit, {"tx", "TRANSACTIONAL, no tx", "implicit put", NULL,
               b_implicit_put, tx_setup, tx_teardown, 0})
BENCH_REGISTER(tx_pes_rr, {"tx", "PESSIMISTIC REPEATABLE_READ", "get+put+commit", NULL,
               b_pes_rr, tx_setup, tx_teardown, 0})
BENCH_REGISTER(tx_opt_ser, {"tx", "OPTIMISTIC SERIALIZABLE", "get+put+commit", NULL,
               b_opt_ser, tx_setup, tx_teardown, 0})
BENCH_REGISTER(tx_opt_rc, {"tx", "OPTIMISTIC READ_COMMITTED", "get+put+commit", NULL,
               b_opt_rc, tx_setup, tx_teardown, 0})
BENCH_REGISTER(tx_pes_4, {"tx", "PESSIMISTIC REPEATABLE_READ", "4 puts+commit", NULL,
               b_pes_4, tx_setup, tx_teardown, 0})
