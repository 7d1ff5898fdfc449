/* metrics.h - emberd's counters and their Prometheus text rendering.
 *
 * Counting is per worker thread: each worker owns one srv_metrics_block and
 * is its only writer, so the hot path is a few plain adds (relaxed atomic
 * load + store, which compile to ordinary moves: no lock prefix, no shared
 * cache line).  A scrape sums the blocks.  Op codes map to fixed slots with a
 * switch and latencies to power-of-two buckets, so counting neither hashes
 * nor allocates (DESIGN rule 5).  Every request is counted, but only one in
 * SRV_METRICS_SAMPLE_EVERY per worker is timed: a clock read costs 40-120 ns
 * on the development VM, several percent of a pipelined request's ~1.3 us of
 * server CPU, while counting alone costs ~6 ns.  Per-cache entries, memory, evictions and
 * expirations are read from the store at scrape time.  Output format:
 * Prometheus text exposition format 0.0.4.
 */
#ifndef EM_SRV_METRICS_H
#define EM_SRV_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/buf.h"

/* Every op code with its own series (reference §2.1); others count as OTHER. */
#define SRV_METRICS_OPS(X)                                                     \
    X(0, RESOURCE_CLOSE) X(1, HEARTBEAT) X(2, GET_IDLE_TIMEOUT)                \
    X(1000, CACHE_GET) X(1001, CACHE_PUT) X(1002, CACHE_PUT_IF_ABSENT)         \
    X(1003, CACHE_GET_ALL) X(1004, CACHE_PUT_ALL) X(1005, CACHE_GET_AND_PUT)   \
    X(1006, CACHE_GET_AND_REPLACE) X(1007, CACHE_GET_AND_REMOVE)               \
    X(1008, CACHE_GET_AND_PUT_IF_ABSENT) X(1009, CACHE_REPLACE)                \
    X(1010, CACHE_REPLACE_IF_EQUALS) X(1011, CACHE_CONTAINS_KEY)               \
    X(1012, CACHE_CONTAINS_KEYS) X(1013, CACHE_CLEAR) X(1014, CACHE_CLEAR_KEY) \
    X(1015, CACHE_CLEAR_KEYS) X(1016, CACHE_REMOVE_KEY)                        \
    X(1017, CACHE_REMOVE_IF_EQUALS) X(1018, CACHE_REMOVE_KEYS)                 \
    X(1019, CACHE_REMOVE_ALL) X(1020, CACHE_GET_SIZE) X(1021, CACHE_LOCAL_PEEK)\
    X(1050, CACHE_GET_NAMES) X(1051, CACHE_CREATE_WITH_NAME)                   \
    X(1052, CACHE_GET_OR_CREATE_WITH_NAME)                                     \
    X(1053, CACHE_CREATE_WITH_CONFIGURATION)                                   \
    X(1054, CACHE_GET_OR_CREATE_WITH_CONFIGURATION)                            \
    X(1055, CACHE_GET_CONFIGURATION) X(1056, CACHE_DESTROY)                    \
    X(1100, CACHE_NODE_PARTITIONS) X(1101, CACHE_PARTITIONS)                   \
    X(2000, QUERY_SCAN) X(2001, QUERY_SCAN_CURSOR_GET_PAGE)                    \
    X(2002, QUERY_SQL) X(2003, QUERY_SQL_CURSOR_GET_PAGE)                      \
    X(2004, QUERY_SQL_FIELDS) X(2005, QUERY_SQL_FIELDS_CURSOR_GET_PAGE)        \
    X(3000, GET_BINARY_TYPE_NAME) X(3001, REGISTER_BINARY_TYPE_NAME)           \
    X(3002, GET_BINARY_TYPE) X(3003, PUT_BINARY_TYPE)                          \
    X(4000, TX_START) X(4001, TX_END)                                          \
    X(5000, CLUSTER_GET_STATE) X(5001, CLUSTER_CHANGE_STATE)

enum {
    SRV_METRICS_SLOT_OTHER = 0,
#define SRV_METRICS_SLOT_(code, name) SRV_METRICS_SLOT_##name,
    SRV_METRICS_OPS(SRV_METRICS_SLOT_)
#undef SRV_METRICS_SLOT_
    SRV_METRICS_SLOTS
};

/* Latency buckets: bucket i counts requests taking <= 2^(10+i) ns (1.024 us
 * up to 2^30 ns = 1.07 s); the last bucket is +Inf. */
#define SRV_METRICS_BUCKETS 22

/* Events counted besides requests. */
enum srv_metrics_event {
    SRV_EV_CONN_OPEN,        /* connection accepted */
    SRV_EV_CONN_CLOSE,       /* connection closed (any reason) */
    SRV_EV_HANDSHAKE_OK,     /* thin-client handshake accepted */
    SRV_EV_HANDSHAKE_FAIL,   /* refused: version, client code, malformed */
    SRV_EV_AUTH_FAIL,        /* wrong user or password (status 2000) */
    SRV_EV_AUTH_LIMITED,     /* refused by the failed-login limiter */
    SRV_EV_TLS_FAIL,         /* TLS handshake failed (e.g. plaintext on TLS port) */
    SRV_EV_PROTO_ERROR,      /* connection closed for a protocol violation */
    SRV_EV_COUNT
};

typedef _Atomic uint64_t srv_counter;

/* Default: time one request in 16 (a power of two; 1 = time every one). */
#define SRV_METRICS_SAMPLE_EVERY 16u

/* srv_metrics_op's ns for a request that was not timed. */
#define SRV_METRICS_UNTIMED UINT64_MAX

/* One worker's counters.  Written only by its worker; read by scrapes. */
typedef struct srv_metrics_block {
    uint32_t    tick;           /* worker-private: sampling position */
    uint32_t    sample_mask;    /* SRV_METRICS_SAMPLE_EVERY - 1 */
    srv_counter requests[SRV_METRICS_SLOTS];
    srv_counter lat[SRV_METRICS_SLOTS][SRV_METRICS_BUCKETS];
    srv_counter lat_sum_ns[SRV_METRICS_SLOTS];
    srv_counter errors[SRV_METRICS_SLOTS];
    srv_counter bytes_in, bytes_out;
    srv_counter events[SRV_EV_COUNT];
} __attribute__((aligned(64))) srv_metrics_block;

typedef struct srv_metrics srv_metrics;

/* srv_metrics_new makes counters for nworkers worker threads (>= 1).
 * Extra blocks can serve other threads (e.g. one for the accept path). */
int  srv_metrics_new(int nworkers, srv_metrics **out);
void srv_metrics_free(srv_metrics *m);

/* srv_metrics_set_sampling: time one request in `every` (rounded down to a
 * power of two; 1 = all).  Call before the workers start. */
void srv_metrics_set_sampling(srv_metrics *m, uint32_t every);

/* srv_metrics_worker: worker i's block (0 <= i < nworkers), valid until
 * srv_metrics_free.  NULL if i is out of range. */
srv_metrics_block *srv_metrics_worker(srv_metrics *m, int i);

/* srv_metrics_slot: the slot of an op code (SRV_METRICS_SLOT_OTHER if it has
 * no series of its own).  A switch: no lookup table, no hashing. */
int srv_metrics_slot(int opcode);

/* srv_metrics_bucket: latency bucket of a duration in ns. */
static inline int srv_metrics_bucket(uint64_t ns)
{
    if (ns <= 1024)
        return 0;
    int b = 64 - __builtin_clzll(ns - 1) - 10;   /* smallest 2^(10+b) >= ns */
    return b < SRV_METRICS_BUCKETS - 1 ? b : SRV_METRICS_BUCKETS - 1;
}

static inline void srv_counter_add(srv_counter *c, uint64_t v)
{
    /* single writer: load + store, not an atomic read-modify-write */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* srv_metrics_time_this: 1 if the worker should time its next request
 * (read the clock before and after it); advances the sampling position. */
static inline int srv_metrics_time_this(srv_metrics_block *b)
{
    return (b->tick++ & b->sample_mask) == 0;
}

/* srv_metrics_op counts one request: op code, reply status (0 = success),
 * time from decoding to reply queued (SRV_METRICS_UNTIMED if not sampled),
 * and its wire bytes (frame included). */
static inline void srv_metrics_op(srv_metrics_block *b, int opcode, int status,
                                  uint64_t ns, size_t bytes_in, size_t bytes_out)
{
    int s = srv_metrics_slot(opcode);
    srv_counter_add(&b->requests[s], 1);
    if (ns != SRV_METRICS_UNTIMED) {
        srv_counter_add(&b->lat[s][srv_metrics_bucket(ns)], 1);
        srv_counter_add(&b->lat_sum_ns[s], ns);
    }
    if (status)
        srv_counter_add(&b->errors[s], 1);
    srv_counter_add(&b->bytes_in, bytes_in);
    srv_counter_add(&b->bytes_out, bytes_out);
}

/* srv_metrics_bytes counts wire bytes outside requests (handshakes). */
static inline void srv_metrics_bytes(srv_metrics_block *b, size_t in, size_t out)
{
    srv_counter_add(&b->bytes_in, in);
    srv_counter_add(&b->bytes_out, out);
}

static inline void srv_metrics_event(srv_metrics_block *b, enum srv_metrics_event ev)
{
    srv_counter_add(&b->events[ev], 1);
}

/* srv_metrics_render appends the Prometheus text of every counter summed over
 * the blocks, the process's memory, and - if store is not NULL - the data
 * region and every cache, to out.  Thread-safe against concurrent counting.
 * 0 or EM_NOMEM. */
int srv_metrics_render(srv_metrics *m, st_store *store, em_buf *out);

/* srv_metrics_op_name: "CACHE_GET" etc. for a slot ("OTHER" for slot 0). */
const char *srv_metrics_op_name(int slot);

#endif
