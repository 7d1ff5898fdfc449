/* cl_tx.h - key-value transactions (Ignite's TransactionConcurrency x
 * TransactionIsolation) over the store's entry locks (store.h).
 *
 * On one node (no cluster configured, or every key owned here) this is a
 * direct call into store/: locks are st_entry_lock, a commit is one
 * st_tx_commit (one WAL frame).  On a cluster a transaction has one cl_tx
 * per primary it touches, driven by two-phase commit (proto/proto_txc.c):
 * cl_tx_prepare, then cl_tx_commit.
 *
 * Semantics (Ignite 2's):
 *  - PESSIMISTIC locks a key when the transaction first writes it, and when
 *    it reads it under REPEATABLE_READ or SERIALIZABLE; READ_COMMITTED reads
 *    take no lock.
 *  - OPTIMISTIC buffers writes and takes every lock at commit, in key order
 *    (cache id, hash, bytes), so optimistic transactions never deadlock one
 *    another.  REPEATABLE_READ and SERIALIZABLE remember the first value
 *    read; SERIALIZABLE locks the keys it read too and fails the commit
 *    (EM_TXCONFLICT) if one of them changed since, or if a lock it needs is
 *    held (Ignite's optimistic serializable transactions never wait).
 *    (Values are compared byte for byte: one changed and changed back
 *    passes, where Ignite's entry versions would fail it.)
 *  - Every transaction reads its own writes.
 *  - A committed PUT gets the cache's default expiry (its creation
 *    duration); per-operation expiry policies do not apply inside one.
 *  - At most CL_TX_MAX_KEYS keys per transaction (EM_LIMIT beyond); a
 *    commit whose WAL record would pass the WAL's frame limit fails
 *    (EM_TOOBIG) and is rolled back.
 *  - timeout_ms (0 = none) bounds the whole transaction from its start: a
 *    lock it waits for past it, or any operation or commit after it, fails
 *    with EM_TIMEOUT and the transaction is rolled back.  Its locks can be
 *    taken over by others from then on (store.h).
 *
 *  - Deadlocks are detected when they form: a transaction whose wait for a
 *    lock would close a cycle of waits fails with EM_DEADLOCK and is rolled
 *    back (the others go on).
 *
 * Nothing here waits.  An operation that needs a lock another transaction
 * holds returns EM_LOCKED having changed nothing visible (locks it already
 * took stay taken, as they would in Ignite), and the caller retries the same
 * operation later: the thin-client server parks the request (proto_tx.c).
 * A cl_tx is used by one thread at a time (its connection's).
 */
#ifndef EM_CL_TX_H
#define EM_CL_TX_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/buf.h"

enum { CL_TX_OPTIMISTIC = 0, CL_TX_PESSIMISTIC = 1 };
#define CL_TX_MAX_KEYS (1u << 20)
enum { CL_TX_READ_COMMITTED = 0, CL_TX_REPEATABLE_READ = 1, CL_TX_SERIALIZABLE = 2 };

/* The node's transaction manager: the store, and a hook told when locks
 * were released while someone waits for one (to retry parked requests). */
typedef struct cl_txm cl_txm;
int  cl_txm_new(cl_txm **out, st_store *s);
void cl_txm_free(cl_txm *m);
/* cl_txm_set_wake: fn(arg) runs (on the releasing thread) after a
 * transaction released locks while cl_txm_waiters > 0.  Set before use. */
void cl_txm_set_wake(cl_txm *m, void (*fn)(void *arg), void *arg);
/* cl_txm_wait / cl_txm_unwait count requests waiting for a lock. */
void cl_txm_wait(cl_txm *m);
void cl_txm_unwait(cl_txm *m);
uint32_t cl_txm_waiters(const cl_txm *m);
/* cl_txm_active: transactions begun and not yet freed (metrics, tests). */
uint64_t cl_txm_active(const cl_txm *m);
/* cl_txm_open: transactions open now (begun, not committed or rolled
 * back), implicit one-op ones included while they run. */
uint64_t cl_txm_open(const cl_txm *m);

typedef struct cl_tx cl_tx;

/* cl_tx_begin: a new transaction (concurrency and isolation as above,
 * checked: EM_INVAL).  cl_tx_restart reuses a finished (or rolled back) one
 * with new parameters, keeping its memory (implicit one-op transactions). */
int  cl_tx_begin(cl_txm *m, int concurrency, int isolation, int64_t timeout_ms, cl_tx **out);
int  cl_tx_restart(cl_tx *tx, int concurrency, int isolation, int64_t timeout_ms);
/* cl_tx_free rolls back what is still open and frees tx (NULL is fine). */
void cl_tx_free(cl_tx *tx);

int      cl_tx_concurrency(const cl_tx *tx);
int      cl_tx_isolation(const cl_tx *tx);
int64_t  cl_tx_timeout(const cl_tx *tx);
uint64_t cl_tx_owner(const cl_tx *tx);
/* cl_tx_blocker: the owner (cl_tx_owner) of the transaction holding the
 * lock tx waits for now, or 0 when it waits for none (any thread: a
 * deadlock probe across nodes asks while tx's own thread may run it). */
uint64_t cl_tx_blocker(const cl_tx *tx);
/* cl_tx_remaining: ms left of its timeout (at least 1), 0 = no timeout. */
int64_t  cl_tx_remaining(const cl_tx *tx);
/* cl_tx_expired: nonzero once the timeout has passed. */
int      cl_tx_expired(const cl_tx *tx);
/* cl_tx_open: nonzero until commit or rollback. */
int      cl_tx_open(const cl_tx *tx);

/* cl_tx_get reads k (a validated data object) of cache c as tx sees it,
 * appending the stored value to out (*found = 0: absent, nothing
 * appended).  for_write: the caller will write the key depending on what it
 * read (GET_AND_PUT, REPLACE, ...): PESSIMISTIC then locks it whatever the
 * isolation.  0, EM_LOCKED (retry later), EM_TIMEOUT (rolled back), or a
 * store error. */
int cl_tx_get(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen, int for_write,
              em_buf *out, int *found);
/* cl_tx_put buffers a write of v (the value in stored form) for k;
 * cl_tx_remove buffers a removal.  PESSIMISTIC locks k first. */
int cl_tx_put(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen, const uint8_t *v,
              size_t vlen);
int cl_tx_remove(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen);

/* cl_tx_commit: 0 (committed, locks released), EM_LOCKED (OPTIMISTIC: a
 * lock is held by another; call again later, the locks taken so far are
 * kept), EM_TXCONFLICT or EM_TIMEOUT (rolled back), or the store's / WAL's
 * error (rolled back, nothing applied). */
int  cl_tx_commit(cl_tx *tx);
void cl_tx_rollback(cl_tx *tx);
/* cl_tx_prepare is the first half of a commit (a participant's prepare in
 * a transaction across nodes): OPTIMISTIC takes its locks in key order
 * (EM_LOCKED: call again), every lock is pinned (a timeout no longer takes
 * it over), SERIALIZABLE reads are checked (EM_TXCONFLICT, rolled back).
 * A prepared transaction takes no new keys' locks from here on; its commit
 * only applies, and a rollback releases.  Calling it again is a no-op. */
int  cl_tx_prepare(cl_tx *tx);
int  cl_tx_prepared(const cl_tx *tx);
/* cl_tx_updates prepares tx and gives its writes as the store's updates
 * (valid until tx changes): what a prepared part sends its backups. */
int  cl_tx_updates(cl_tx *tx, const st_update **ups, uint32_t *n);
/* cl_tx_apply is a commit that keeps the locks: 0 (applied; the locks go
 * with cl_tx_rollback, which undoes nothing now), or as cl_tx_commit
 * (rolled back unless EM_LOCKED). */
int  cl_tx_apply(cl_tx *tx);

/* cl_tx_conflict: after EM_TXCONFLICT or EM_DEADLOCK, the cache and
 * normalised key whose value changed (or whose lock was held), for the
 * error message. */
void cl_tx_conflict(const cl_tx *tx, int32_t *cache_id, const uint8_t **k, size_t *klen);

/* cl_tx_entries: keys the transaction touched (tests). */
uint32_t cl_tx_entries(const cl_tx *tx);

#endif
