/* test_tx.c - transactions below the protocol: the store's entry locks
 * (store_lock.c), cl_tx's semantics (cluster/cl_tx.h) and one-unit commits
 * in the WAL (WAL_REC_TX): recovery after a torn tail applies a transaction
 * whole or not at all. */
#include "test.h"
#include "wal_env.h"

#include "cluster/cl_tx.h"
#include "store/store.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }

static st_cache *tx_cache(st_store *s, const char *name)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.atomicity_mode = 0;         /* TRANSACTIONAL */
    cfg.partitions = 16;
    st_cache *c = NULL;
    return st_cache_create(s, &cfg, &c) == 0 ? c : NULL;
}

/* value k -> int v; -1 absent */
static int32_t val_of(st_cache *c, int32_t k)
{
    uint8_t kb[5];
    em_buf b = EM_BUF_INIT;
    int found = 0;
    int32_t v = -2;
    if (st_get(c, NULL, kb, ikey(kb, k), &b, &found) == 0)
        v = found ? (b.len == 5 && b.p[0] == 3 ? (int32_t)em_ld32(b.p + 1) : -3) : -1;
    em_buf_free(&b);
    return v;
}

static int tput(cl_tx *tx, st_cache *c, int32_t k, int32_t v)
{
    uint8_t kb[5], vb[5];
    return cl_tx_put(tx, c, kb, ikey(kb, k), vb, ikey(vb, v));
}

static int tget(cl_tx *tx, st_cache *c, int32_t k, int for_write, int32_t *v)
{
    uint8_t kb[5];
    em_buf b = EM_BUF_INIT;
    int found = 0;
    int rc = cl_tx_get(tx, c, kb, ikey(kb, k), for_write, &b, &found);
    *v = found ? (int32_t)em_ld32(b.p + 1) : -1;
    em_buf_free(&b);
    return rc;
}

TEST(tx_store_entry_locks)
{
    st_store *s = we_new_store();
    REQUIRE(s);
    const uint8_t k[] = {3, 1, 0, 0, 0};
    uint64_t holder = 0;
    CHECK_OK(st_entry_lock(s, 7, 1, k, 5, 11, 0, &holder));
    CHECK_OK(st_entry_lock(s, 7, 1, k, 5, 11, 0, &holder));        /* re-entrant */
    CHECK_EQ(st_entry_lock(s, 7, 1, k, 5, 12, 0, &holder), EM_LOCKED);
    CHECK_EQ(holder, 11);
    CHECK_OK(st_entry_lock(s, 8, 1, k, 5, 12, 0, &holder));        /* another cache */
    CHECK_EQ(st_entry_locks_held(s), 2);
    st_entry_unlock(s, 7, 1, k, 5, 12);                             /* not the owner */
    CHECK_EQ(st_entry_lock(s, 7, 1, k, 5, 12, 0, &holder), EM_LOCKED);
    st_entry_unlock(s, 7, 1, k, 5, 11);
    CHECK_OK(st_entry_lock(s, 7, 1, k, 5, 12, 0, &holder));
    /* a holder past its deadline loses the lock; pinned ones do not */
    const uint8_t k2[] = {3, 2, 0, 0, 0};
    CHECK_OK(st_entry_lock(s, 7, 2, k2, 5, 20, em_now_ms() + 1, &holder));
    uint64_t until = em_now_ms() + 5;
    while (em_now_ms() < until)
        ;
    CHECK_OK(st_entry_lock(s, 7, 2, k2, 5, 21, 0, &holder));
    CHECK_EQ(st_entry_pin(s, 7, 2, k2, 5, 20), EM_TIMEOUT);
    CHECK_OK(st_entry_pin(s, 7, 2, k2, 5, 21));
    st_entry_unlock(s, 7, 2, k2, 5, 21);
    st_entry_unlock(s, 7, 1, k, 5, 12);
    st_entry_unlock(s, 8, 1, k, 5, 12);
    CHECK_EQ(st_entry_locks_held(s), 0);
    st_close(s);
}

TEST(tx_cl_tx_semantics)
{
    st_store *s = we_new_store();
    REQUIRE(s);
    st_cache *c = tx_cache(s, "t");
    REQUIRE(c);
    cl_txm *m;
    REQUIRE_OK(cl_txm_new(&m, s));
    cl_tx *a, *b;
    int32_t v;
    /* PESSIMISTIC: a write locks; the other waits (EM_LOCKED) until commit */
    REQUIRE_OK(cl_tx_begin(m, CL_TX_PESSIMISTIC, CL_TX_REPEATABLE_READ, 0, &a));
    REQUIRE_OK(cl_tx_begin(m, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0, &b));
    CHECK_EQ(cl_txm_open(m), 2);
    CHECK_OK(tput(a, c, 1, 10));
    CHECK_EQ(cl_tx_blocker(b), 0);
    CHECK_EQ(tput(b, c, 1, 20), EM_LOCKED);
    /* what a deadlock probe across nodes asks: b waits for a */
    CHECK_EQ(cl_tx_blocker(b), cl_tx_owner(a));
    CHECK_EQ(cl_tx_blocker(a), 0);
    CHECK_OK(tget(b, c, 1, 0, &v));     /* READ_COMMITTED read: no lock, old value */
    CHECK_EQ(v, -1);
    CHECK_OK(tget(a, c, 1, 0, &v));
    CHECK_EQ(v, 10);
    CHECK_OK(cl_tx_commit(a));
    CHECK_EQ(val_of(c, 1), 10);
    CHECK_OK(tput(b, c, 1, 20));
    CHECK_EQ(cl_tx_blocker(b), 0);      /* got it: waits for nothing */
    CHECK_OK(cl_tx_commit(b));
    CHECK_EQ(val_of(c, 1), 20);
    CHECK_EQ(st_entry_locks_held(s), 0);
    /* REPEATABLE_READ reads lock */
    REQUIRE_OK(cl_tx_restart(a, CL_TX_PESSIMISTIC, CL_TX_REPEATABLE_READ, 0));
    REQUIRE_OK(cl_tx_restart(b, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0));
    CHECK_OK(tget(a, c, 1, 0, &v));
    CHECK_EQ(tput(b, c, 1, 30), EM_LOCKED);
    cl_tx_rollback(a);
    CHECK_OK(tput(b, c, 1, 30));
    cl_tx_rollback(b);
    CHECK_EQ(val_of(c, 1), 20);
    /* OPTIMISTIC SERIALIZABLE: a changed read fails the commit */
    REQUIRE_OK(cl_tx_restart(a, CL_TX_OPTIMISTIC, CL_TX_SERIALIZABLE, 0));
    CHECK_OK(tget(a, c, 1, 0, &v));
    CHECK_EQ(v, 20);
    CHECK_OK(tput(a, c, 2, 1));
    REQUIRE_OK(cl_tx_restart(b, CL_TX_OPTIMISTIC, CL_TX_READ_COMMITTED, 0));
    CHECK_OK(tput(b, c, 1, 21));
    CHECK_OK(cl_tx_commit(b));
    CHECK_OK(tget(a, c, 1, 0, &v));
    CHECK_EQ(v, 20);                    /* repeatable */
    CHECK_EQ(cl_tx_commit(a), EM_TXCONFLICT);
    int32_t cid;
    const uint8_t *ck;
    size_t ckl;
    cl_tx_conflict(a, &cid, &ck, &ckl);
    CHECK_EQ(cid, st_cache_id(c));
    CHECK(ckl == 5 && em_ld32(ck + 1) == 1);
    CHECK_EQ(val_of(c, 2), -1);         /* nothing of a applied */
    /* OPTIMISTIC REPEATABLE_READ: a held lock makes the commit wait */
    REQUIRE_OK(cl_tx_restart(a, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0));
    CHECK_OK(tput(a, c, 5, 1));
    REQUIRE_OK(cl_tx_restart(b, CL_TX_OPTIMISTIC, CL_TX_REPEATABLE_READ, 0));
    CHECK_OK(tput(b, c, 4, 2));
    CHECK_OK(tput(b, c, 5, 2));
    CHECK_EQ(cl_tx_commit(b), EM_LOCKED);
    CHECK_EQ(cl_tx_commit(b), EM_LOCKED);  /* still; keeps the lock on 4 */
    CHECK_OK(cl_tx_commit(a));
    CHECK_OK(cl_tx_commit(b));
    CHECK_EQ(val_of(c, 4), 2);
    CHECK_EQ(val_of(c, 5), 2);
    /* timeout: an expired transaction fails and rolls back */
    REQUIRE_OK(cl_tx_restart(a, CL_TX_PESSIMISTIC, CL_TX_SERIALIZABLE, 1));
    CHECK_OK(tput(a, c, 6, 1));
    uint64_t until = em_now_ms() + 5;
    while (em_now_ms() < until)
        ;
    CHECK_EQ(tput(a, c, 7, 1), EM_TIMEOUT);
    CHECK(!cl_tx_open(a));
    CHECK_EQ(cl_tx_commit(a), EM_INVAL);
    CHECK_EQ(val_of(c, 6), -1);
    CHECK_EQ(st_entry_locks_held(s), 0);
    /* a remove, read back inside, applied at commit */
    REQUIRE_OK(cl_tx_restart(a, CL_TX_OPTIMISTIC, CL_TX_READ_COMMITTED, 0));
    uint8_t kb[5];
    CHECK_OK(cl_tx_remove(a, c, kb, ikey(kb, 4)));
    CHECK_OK(tget(a, c, 4, 0, &v));
    CHECK_EQ(v, -1);
    CHECK_EQ(val_of(c, 4), 2);
    CHECK_OK(cl_tx_commit(a));
    CHECK_EQ(val_of(c, 4), -1);
    CHECK_EQ(cl_txm_open(m), 0);
    cl_tx_free(a);
    cl_tx_free(b);
    CHECK_EQ(cl_txm_active(m), 0);
    cl_txm_free(m);
    st_close(s);
}

/* The halves of a commit a transaction's part on a cluster uses: prepare
 * (locks taken in key order and pinned, SERIALIZABLE checked), the writes
 * as updates (what the backups keep), apply keeping the locks until the
 * rollback that releases them; and an observer told of the transaction
 * once (the log) and of each update with its partition counter (in_tx,
 * what replication streams). */
typedef struct obs_log { int tx, in_tx, end, plain, refuse_tx; uint64_t last_cntr; } obs_log;

static int obs_count(void *arg, const st_update *u)
{
    obs_log *o = arg;
    if (u->kind == ST_UPD_TX) {
        o->tx++;
        if (o->refuse_tx)
            return EM_STALE;            /* as cl_repl refuses a moved commit */
    } else if (u->kind == ST_UPD_TX_END)
        o->end++;
    else if (u->in_tx) {
        o->in_tx++;
        o->last_cntr = u->cntr;
    } else {
        o->plain++;
    }
    return 0;
}

TEST(tx_prepare_apply_halves)
{
    st_store *s = we_new_store();
    REQUIRE(s);
    st_cache *c = tx_cache(s, "halves");
    REQUIRE(c);
    cl_txm *m;
    REQUIRE_OK(cl_txm_new(&m, s));
    obs_log o = { 0 };
    st_set_observer(s, obs_count, &o);
    cl_tx *a, *b;
    REQUIRE_OK(cl_tx_begin(m, CL_TX_OPTIMISTIC, CL_TX_REPEATABLE_READ, 0, &a));
    REQUIRE_OK(cl_tx_begin(m, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0, &b));
    CHECK_OK(tput(a, c, 1, 11));
    CHECK_OK(tput(a, c, 2, 12));
    CHECK_OK(tput(b, c, 2, 22));        /* b holds key 2 */
    CHECK_EQ(cl_tx_prepare(a), EM_LOCKED);
    CHECK(!cl_tx_prepared(a));
    CHECK_OK(cl_tx_commit(b));
    CHECK_OK(cl_tx_prepare(a));
    CHECK(cl_tx_prepared(a));
    CHECK_OK(cl_tx_prepare(a));         /* again: a no-op */
    const st_update *ups;
    uint32_t n;
    CHECK_OK(cl_tx_updates(a, &ups, &n));
    CHECK_EQ(n, 2);
    CHECK(ups[0].kind == ST_UPD_PUT && ups[0].klen == 5);
    /* prepared: others wait for its locks; applied, they still do */
    REQUIRE_OK(cl_tx_restart(b, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0));
    CHECK_EQ(tput(b, c, 1, 31), EM_LOCKED);
    memset(&o, 0, sizeof o);
    CHECK_OK(cl_tx_apply(a));
    CHECK_EQ(val_of(c, 1), 11);
    CHECK_EQ(val_of(c, 2), 12);
    CHECK_EQ(o.tx, 1);                  /* logged once, as one unit */
    CHECK_EQ(o.in_tx, 2);               /* each update streamed on its own */
    CHECK_EQ(o.end, 1);                 /* then the commit's end */
    CHECK_EQ(o.plain, 0);
    CHECK(o.last_cntr > 0);
    CHECK_EQ(tput(b, c, 1, 31), EM_LOCKED);
    cl_tx_rollback(a);                  /* releases; undoes nothing */
    CHECK_EQ(val_of(c, 1), 11);
    CHECK_OK(tput(b, c, 1, 31));
    CHECK_OK(cl_tx_commit(b));
    CHECK_EQ(val_of(c, 1), 31);
    /* a prepared SERIALIZABLE transaction whose read changed is rolled back */
    int32_t v;
    REQUIRE_OK(cl_tx_restart(a, CL_TX_OPTIMISTIC, CL_TX_SERIALIZABLE, 0));
    CHECK_OK(tget(a, c, 1, 0, &v));
    CHECK_OK(tput(a, c, 3, 1));
    REQUIRE_OK(cl_tx_restart(b, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0));
    CHECK_OK(tput(b, c, 1, 41));
    CHECK_OK(cl_tx_commit(b));
    CHECK_EQ(cl_tx_prepare(a), EM_TXCONFLICT);
    CHECK(!cl_tx_open(a));
    CHECK_EQ(val_of(c, 3), -1);
    CHECK_EQ(st_entry_locks_held(s), 0);
    /* a commit the observer refuses applies nothing, and still ends: the
     * observer hears ST_UPD_TX_END (cl_repl lets go of its topology) */
    REQUIRE_OK(cl_tx_restart(b, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0));
    CHECK_OK(tput(b, c, 4, 44));
    memset(&o, 0, sizeof o);
    o.refuse_tx = 1;
    CHECK_EQ(cl_tx_commit(b), EM_STALE);
    CHECK_EQ(val_of(c, 4), -1);
    CHECK_EQ(o.tx, 1);
    CHECK_EQ(o.in_tx, 0);
    CHECK_EQ(o.end, 1);
    CHECK_EQ(st_entry_locks_held(s), 0);
    st_set_observer(s, NULL, NULL);
    cl_tx_free(a);
    cl_tx_free(b);
    cl_txm_free(m);
    st_close(s);
}

/* A transaction's updates share one WAL frame: however much of an unsynced
 * tail survives a crash, each transaction comes back whole or not at all. */
TEST(tx_wal_all_or_nothing)
{
    int middle = 0;                     /* trials whose tail was cut mid-way */
    for (int trial = 0; trial < 12; trial++) {
        wal_memfs *fs;
        REQUIRE_OK(wal_memfs_new(&fs));
        st_store *a = we_new_store();
        REQUIRE(a);
        wal_options o;
        memset(&o, 0, sizeof o);
        o.mode = WAL_LOG_ONLY;
        wal *w;
        REQUIRE_OK(we_open(fs, &o, a, &w));
        st_cache *c = tx_cache(a, "t");
        REQUIRE(c);
        cl_txm *m;
        REQUIRE_OK(cl_txm_new(&m, a));
        cl_tx *tx;
        REQUIRE_OK(cl_tx_begin(m, CL_TX_PESSIMISTIC, CL_TX_REPEATABLE_READ, 0, &tx));
        /* transaction 0 is durable; 1..5 are not (LOG_ONLY: written, not
         * fsynced) */
        for (int t = 0; t < 6; t++) {
            if (t)
                REQUIRE_OK(cl_tx_restart(tx, t % 2, CL_TX_REPEATABLE_READ, 0));
            for (int32_t k = 0; k < 20; k++)
                CHECK_OK(tput(tx, c, k, t * 100 + k));
            CHECK_OK(cl_tx_commit(tx));
            if (t == 0)
                REQUIRE_OK(wal_flush(w));
        }
        int32_t cid = st_cache_id(c);
        wal_memfs *after;
        REQUIRE_OK(wal_memfs_crash(fs, (trial + 0.5) / 12.0, (uint64_t)trial, &after));
        cl_tx_free(tx);
        cl_txm_free(m);
        wal_close(w);
        st_close(a);
        wal_memfs_free(fs);

        st_store *b = we_new_store();
        REQUIRE(b);
        REQUIRE_OK(we_open(after, &o, b, &w));
        st_cache *r = st_cache_find(b, cid);
        REQUIRE(r);
        int32_t first = val_of(r, 0);
        int t = first / 100;
        CHECK(first >= 0 && first % 100 == 0);  /* transaction 0 at least */
        for (int32_t k = 0; k < 20; k++)
            CHECK_EQ(val_of(r, k), t * 100 + k);
        middle += t > 0 && t < 5;
        wal_close(w);
        st_close(b);
        wal_memfs_free(after);
        if (test_failed())
            return;
    }
    CHECK(middle > 0);
}

/* Commits racing checkpoints: a checkpoint deletes the segments before its
 * position, so a commit whose record went there must be in the snapshot.
 * The commit gate (st_commit_gate_*) guarantees it; with FSYNC every
 * acknowledged commit survives losing all unsynced bytes. */
typedef struct ck_arg { st_cache *c; cl_txm *m; _Atomic int32_t done; _Atomic int rc; } ck_arg;

/* slow_observer logs as the WAL's own observer does, then lingers after a
 * transaction's record: the time between a commit's record and its updates
 * reaching memory, widened so that checkpoints land inside it. */
static int slow_observer(void *arg, const st_update *u)
{
    int rc = wal_append(arg, u);
    if (u->kind == ST_UPD_TX) {
        struct timespec ts = {0, 2000 * 1000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

static void *committer(void *p)
{
    ck_arg *a = p;
    cl_tx *tx = NULL;
    int rc = cl_tx_begin(a->m, CL_TX_PESSIMISTIC, CL_TX_REPEATABLE_READ, 0, &tx);
    for (int32_t n = 1; n <= 400 && !rc; n++) {
        if (n > 1)
            rc = cl_tx_restart(tx, n % 2, CL_TX_SERIALIZABLE, 0);
        for (int32_t k = 0; k < 8 && !rc; k++)
            rc = tput(tx, a->c, n * 8 + k, n);      /* new keys: a lost commit shows */
        if (!rc && (rc = cl_tx_commit(tx)) == 0)
            atomic_store(&a->done, n);
    }
    atomic_store(&a->rc, rc);
    cl_tx_free(tx);
    return NULL;
}

TEST(tx_wal_commits_race_checkpoints)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store();
    REQUIRE(a);
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = WAL_FSYNC;
    o.segment_bytes = 64 << 10;
    wal *w;
    REQUIRE_OK(we_open(fs, &o, a, &w));
    st_cache *c = tx_cache(a, "t");
    REQUIRE(c);
    int32_t id = st_cache_id(c);
    st_set_observer(a, slow_observer, w);
    cl_txm *m;
    REQUIRE_OK(cl_txm_new(&m, a));
    ck_arg arg;
    arg.c = c;
    arg.m = m;
    atomic_init(&arg.done, 0);
    atomic_init(&arg.rc, 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, committer, &arg) == 0);
    int ckpts = 0;
    /* checkpoints all through the run (a wait between them: the committer
     * needs the cores too) */
    while (atomic_load(&arg.done) < 400 && !atomic_load(&arg.rc) && ckpts < 2000) {
        ckpts += wal_checkpoint(w, a) == 0;
        struct timespec ts = {0, 500 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_join(th, NULL);
    CHECK_OK(atomic_load(&arg.rc));
    CHECK(ckpts > 0);
    wal_memfs *after;
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 1, &after));
    cl_txm_free(m);
    wal_close(w);
    st_close(a);
    wal_memfs_free(fs);
    st_store *b = we_new_store();
    REQUIRE(b);
    REQUIRE_OK(we_open(after, &o, b, &w));
    st_cache *r = st_cache_find(b, id);
    REQUIRE(r);
    int lost = 0;
    int32_t done = atomic_load(&arg.done);
    for (int32_t n = 1; n <= done; n++)
        for (int32_t k = 0; k < 8; k++)
            lost += val_of(r, n * 8 + k) != n;  /* every acknowledged commit, whole */
    CHECK_EQ(lost, 0);
    wal_close(w);
    st_close(b);
    wal_memfs_free(after);
}
