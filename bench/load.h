/* load.h - `ember-bench load`, the network load generator: shared types.
 *
 * load.c runs the threads, phases and report; load_proto.c encodes requests
 * and parses responses for the Ignite thin protocol
 * (../shared/reference/ignite-thin-protocol.md §1, §2.2-2.3), RESP and
 * memcached's binary protocol; load_hist.c is the latency histogram.
 */
#ifndef EM_BENCH_LOAD_H
#define EM_BENCH_LOAD_H

#include <stddef.h>
#include <stdint.h>

enum ld_proto { LD_IGNITE, LD_RESP, LD_MEMCACHE };
enum ld_op { LD_GET = 0, LD_PUT = 1 };

/* Everything the encoders and parsers need to know about a run. */
typedef struct ld_cfg {
    int proto;
    int int_keys;            /* Ignite only: keys as int (type 3), else string (9) */
    int ver_major, ver_minor, ver_patch;  /* Ignite handshake version */
    int32_t cache_id;        /* Ignite: String.hashCode of the cache name */
    const char *cache_name;
    uint32_t value_size;
    uint8_t *filler;         /* value_size bytes; a value = key (8 B LE) + filler */
    int resp_wait;           /* RESP: each SET followed by WAIT resp_wait 0 (0 = none) */
} ld_cfg;

/* Largest request and response for one op, for sizing the reused buffers. */
size_t ld_max_request(const ld_cfg *cfg);
size_t ld_max_response(const ld_cfg *cfg);

/* ld_enc_get / ld_enc_put write one request at dst (which has
 * ld_max_request() bytes of room) and return its length.  rid is echoed by
 * the server (Ignite request id, memcached opaque). */
size_t ld_enc_get(const ld_cfg *cfg, uint8_t *dst, uint64_t rid, uint32_t key);
size_t ld_enc_put(const ld_cfg *cfg, uint8_t *dst, uint64_t rid, uint32_t key);

/* One parsed response.  Pointers point into the parser's input and are valid
 * until the caller moves or overwrites those bytes. */
typedef struct ld_resp {
    uint64_t rid;            /* Ignite request id; memcached opaque */
    int status;              /* 0 = success; else the server's status/error */
    int is_nil;              /* GET: key not found (null 101, $-1, status 1) */
    int is_value;            /* GET: a value follows in val/vlen */
    int is_ok;               /* PUT/SET acknowledged (+OK, empty payload) */
    uint8_t mc_opcode;       /* memcached: opcode echoed */
    const uint8_t *val;
    size_t vlen;
    const char *what;        /* on error: a static description */
    const uint8_t *msg;      /* server's error text, when it sent one */
    size_t msglen;
} ld_resp;

/* ld_parse parses one response at p[0..n).  Returns the bytes it consumed
 * (> 0), 0 when more bytes are needed, or -1 on a protocol violation (r->what
 * says which).  A server error is a parsed response with status != 0. */
long ld_parse(const ld_cfg *cfg, const uint8_t *p, size_t n, ld_resp *r);

/* Ignite connection setup (blocking, not measured). */
size_t ld_enc_handshake(const ld_cfg *cfg, uint8_t *dst);
/* ld_parse_handshake: 1 = accepted, 0 = need more bytes, -1 = rejected or
 * malformed (err, errlen gets a message). */
long ld_parse_handshake(const ld_cfg *cfg, const uint8_t *p, size_t n,
                        char *err, size_t errlen);
size_t ld_enc_get_or_create(const ld_cfg *cfg, uint8_t *dst, uint64_t rid);

/* ld_value_ok: do value bytes p[0..n) equal what any writer puts under key? */
int ld_value_ok(const ld_cfg *cfg, uint32_t key, const uint8_t *p, size_t n);

/* ld_rnd: the load generator's xorshift64* step (keys, mixes, filler). */
static inline uint64_t ld_rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

/* ld_filler writes the run's filler for value size n (n bytes at dst): a
 * fixed seed per size, so separate runs, and `ember-bench floor`, agree on
 * every key's value without talking to each other. */
void ld_filler(uint8_t *dst, uint32_t n);

/* Key text used by string keys: "key:" and 10 decimal digits. */
#define LD_KEY_LEN 14
void ld_key_text(uint32_t key, uint8_t out[LD_KEY_LEN]);

/* ld_write_all: a blocking send of all of p[0..n) (setup, not the run);
 * 0 or -1. */
int ld_write_all(int fd, const uint8_t *p, size_t n);

/* ---- partition awareness (load_pa.c) ---- */
#define LD_MAX_HOSTS 16
struct addrinfo;
/* ld_pa_split files the run's keys (keymap[0..nkeys), or 0..nkeys-1 when
 * keymap is NULL) under the host (ai[0..nhosts)) that is the primary of
 * each key's partition: keys[h] (allocated; the caller frees) with
 * counts[h] keys.  Blocking, before the run; the cache must exist.  0, or
 * -1 with err set. */
int ld_pa_split(const ld_cfg *cfg, struct addrinfo *const *ai, int nhosts,
                const uint32_t *keymap, uint32_t nkeys, uint32_t **keys, uint32_t *counts,
                char *err, size_t errlen);

/* ---- latency histogram (load_hist.c) ----
 * Log-linear like HdrHistogram: values below 2^LD_SUB_BITS nanoseconds get
 * one bucket each, each later power-of-two range is split into
 * 2^LD_SUB_BITS linear sub-buckets, so any value is known to ~3 %. */
#define LD_SUB_BITS 5
#define LD_SUB (1u << LD_SUB_BITS)
#define LD_BUCKETS ((64 - LD_SUB_BITS + 1) * LD_SUB)

typedef struct ld_hist {
    uint64_t count[LD_BUCKETS];
    uint64_t n, sum, max;
} ld_hist;

void ld_hist_add(ld_hist *h, uint64_t ns);
void ld_hist_merge(ld_hist *into, const ld_hist *from);
/* ld_hist_quantile: value (ns) at quantile q in [0,1]: the upper edge of the
 * bucket holding that rank, 0 if empty. */
uint64_t ld_hist_quantile(const ld_hist *h, double q);

/* ld_proc_cpu_us: utime+stime of process pid in microseconds (-1 if it
 * cannot be read, or the process exited). */
double ld_proc_cpu_us(long pid);

#endif
