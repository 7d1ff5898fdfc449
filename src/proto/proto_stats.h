/* proto_stats.h - per-worker request counters, written by proto/ itself as
 * it answers each request (no callback per request) and read by the server's
 * /metrics rendering (server/metrics.h re-exports them as srv_metrics_*).
 *
 * One pr_stats block per worker thread, which is its only writer: counting
 * is a few plain adds (relaxed load + store, no lock prefix, no shared cache
 * line).  Op codes map to fixed slots through a table and latencies to
 * power-of-two buckets, so counting neither hashes nor allocates.  Only one
 * request in sample_mask + 1 is timed: a clock read costs more than all the
 * counting.  Scrapes sum the blocks with relaxed loads.
 */
#ifndef EM_PROTO_STATS_H
#define EM_PROTO_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Every op code with its own series (reference §2.1); others count as OTHER. */
#define PR_STATS_OPS(X)                                                        \
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
    PR_STATS_SLOT_OTHER = 0,
#define PR_STATS_SLOT_(code, name) PR_STATS_SLOT_##name,
    PR_STATS_OPS(PR_STATS_SLOT_)
#undef PR_STATS_SLOT_
    PR_STATS_SLOTS
};

/* Latency buckets: bucket i counts requests taking <= 2^(10+i) ns (1.024 us
 * up to 2^30 ns = 1.07 s); the last bucket is +Inf. */
#define PR_STATS_BUCKETS 22

/* Events counted besides requests.  proto/ counts the handshake results;
 * the server layer counts the connection and TLS events. */
enum pr_stats_event {
    PR_EV_CONN_OPEN,         /* connection accepted */
    PR_EV_CONN_CLOSE,        /* connection closed (any reason) */
    PR_EV_HANDSHAKE_OK,      /* thin-client handshake accepted */
    PR_EV_HANDSHAKE_FAIL,    /* refused: version, client code, malformed */
    PR_EV_AUTH_FAIL,         /* wrong user or password (status 2000) */
    PR_EV_AUTH_LIMITED,      /* refused by the failed-login limiter */
    PR_EV_TLS_FAIL,          /* TLS handshake failed (e.g. plaintext on TLS port) */
    PR_EV_PROTO_ERROR,       /* connection closed for a protocol violation */
    PR_EV_COUNT
};

typedef _Atomic uint64_t pr_counter;

/* Default: time one request in 16 (a power of two; 1 = time every one). */
#define PR_STATS_SAMPLE_EVERY 16u

/* pr_stats_op's ns for a request that was not timed. */
#define PR_STATS_UNTIMED UINT64_MAX

/* One worker's counters.  Written only by its worker; read by scrapes. */
typedef struct pr_stats {
    uint32_t   tick;            /* worker-private: sampling position */
    uint32_t   sample_mask;     /* PR_STATS_SAMPLE_EVERY - 1 */
    pr_counter requests[PR_STATS_SLOTS];
    pr_counter lat[PR_STATS_SLOTS][PR_STATS_BUCKETS];
    pr_counter lat_sum_ns[PR_STATS_SLOTS];
    pr_counter errors[PR_STATS_SLOTS];
    pr_counter forwarded[PR_STATS_SLOTS];   /* sent to another member to run (a cluster) */
    pr_counter bytes_in, bytes_out;
    pr_counter events[PR_EV_COUNT];
} __attribute__((aligned(64))) pr_stats;

/* pr_stats_slot: the slot of an op code (PR_STATS_SLOT_OTHER if it has no
 * series of its own).  A table keyed by the op code itself: one bounds check
 * and one load, inline in the request path. */
#define PR_STATS_MAX_CODE 5001
extern const uint8_t pr_stats_slot_table[PR_STATS_MAX_CODE + 1];
static inline int pr_stats_slot(int opcode)
{
    return (unsigned)opcode <= PR_STATS_MAX_CODE ? pr_stats_slot_table[opcode]
                                                 : PR_STATS_SLOT_OTHER;
}

/* pr_stats_op_name: "CACHE_GET" etc. for a slot ("OTHER" for slot 0). */
const char *pr_stats_op_name(int slot);

/* pr_stats_bucket: latency bucket of a duration in ns. */
static inline int pr_stats_bucket(uint64_t ns)
{
    if (ns <= 1024)
        return 0;
    int b = 64 - __builtin_clzll(ns - 1) - 10;   /* smallest 2^(10+b) >= ns */
    return b < PR_STATS_BUCKETS - 1 ? b : PR_STATS_BUCKETS - 1;
}

static inline void pr_counter_add(pr_counter *c, uint64_t v)
{
    /* single writer: load + store, not an atomic read-modify-write */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* pr_stats_time_this: 1 if the worker should time its next request (read
 * the clock before and after it); advances the sampling position. */
static inline int pr_stats_time_this(pr_stats *b)
{
    return (b->tick++ & b->sample_mask) == 0;
}

/* pr_stats_req counts one request: op code, reply status (0 = success) and
 * time from decoding to reply queued (PR_STATS_UNTIMED if not sampled).
 * proto/ calls this per request; wire bytes are counted per read batch by
 * the server (pr_stats_bytes), which costs less under pipelining. */
static inline void pr_stats_req(pr_stats *b, int opcode, int status, uint64_t ns)
{
    int s = pr_stats_slot(opcode);
    pr_counter_add(&b->requests[s], 1);
    if (ns != PR_STATS_UNTIMED) {
        pr_counter_add(&b->lat[s][pr_stats_bucket(ns)], 1);
        pr_counter_add(&b->lat_sum_ns[s], ns);
    }
    if (status)
        pr_counter_add(&b->errors[s], 1);
}

/* pr_stats_op: pr_stats_req plus the request's wire bytes (frame included). */
static inline void pr_stats_op(pr_stats *b, int opcode, int status, uint64_t ns,
                               size_t bytes_in, size_t bytes_out)
{
    pr_stats_req(b, opcode, status, ns);
    pr_counter_add(&b->bytes_in, bytes_in);
    pr_counter_add(&b->bytes_out, bytes_out);
}

/* pr_stats_bytes counts thin-client wire bytes (frames consumed, replies
 * queued). */
static inline void pr_stats_bytes(pr_stats *b, size_t in, size_t out)
{
    pr_counter_add(&b->bytes_in, in);
    pr_counter_add(&b->bytes_out, out);
}

static inline void pr_stats_event(pr_stats *b, enum pr_stats_event ev)
{
    pr_counter_add(&b->events[ev], 1);
}

/* pr_stats_forwarded: a request of this op went to another member. */
static inline void pr_stats_forwarded(pr_stats *b, int opcode)
{
    pr_counter_add(&b->forwarded[pr_stats_slot(opcode)], 1);
}

#endif
