/* cl_meta_fsm.h - the metadata group's state machine: pure, no Raft, no I/O.
 *
 * Every node applies the same committed entries in the same order to this
 * state and so holds the same members, topology version, cache
 * configurations, binary types, cluster state, baseline and voters
 * (reference/cluster.md §3.2).  cl_meta.c runs it under libraft; the tests
 * run it alone and under libraft's fixture.  Payloads that belong to other
 * layers (cache configurations, binary type metadata) are opaque bytes here.
 *
 * Entry encoding (all integers little-endian; decoding checks every length
 * against the bytes present and every count against its limit, and returns
 * an error code for any malformed input - it never reads out of bounds):
 *
 *   header        offset size  field
 *                 0      1     type (CL_META_E_*, below)
 *                 1      1     version, 1
 *                 2      2     reserved, 0
 *                 4      4     body length n (<= CL_META_MAX_BODY)
 *                 8      n     body; the entry is exactly 8 + n bytes
 *
 *   body by type  (str = u16 len | len bytes; uuid = u64 msb | u64 lsb)
 *   NODE_JOIN     uuid id | u64 raft_id (!= 0) | u64 host | str consistent_id
 *                 (1..CL_META_MAX_CID) | str raft_addr (<= CL_META_MAX_ADDR) |
 *                 u8 n_addrs (<= CL_META_MAX_ADDRS) | n_addrs x str addr
 *   NODE_LEAVE    uuid id
 *   NODE_FAIL     uuid id
 *   CACHE_START   i32 cache_id | u32 len | len bytes config (1..CL_META_MAX_BLOB)
 *   CACHE_STOP    i32 cache_id
 *   CACHE_CONFIG  i32 cache_id | u32 len | len bytes config (1..CL_META_MAX_BLOB) |
 *                 u32 prev: a started cache's configuration as it is now (SQL
 *                 DDL changed its query entities); prev is the CRC-32C of the
 *                 configuration it replaces
 *   TYPE_PUT      i32 type_id | u32 len | len bytes metadata (1..CL_META_MAX_BLOB)
 *   BASELINE_SET  u32 n (<= CL_META_MAX_MEMBERS) | n x str consistent_id (1..MAX_CID)
 *   STATE_SET     u8 state (CL_META_INACTIVE 0, ACTIVE 1, ACTIVE_READ_ONLY 2:
 *                 Ignite's ClusterState ordinals)
 *   VOTERS_SET    u8 n (<= CL_META_MAX_VOTERS) | n x uuid
 *   EXCH_DONE     u64 exchange_id | u64 major | u32 minor
 *   OWNERS_SET    u64 exchange_id | u32 g (<= CL_META_MAX_CACHES; bit 31 set: an
 *                 affinity switch) | g x group:
 *                 i32 group | u32 parts (1..CL_META_MAX_PARTS) | u32 k (<= parts) |
 *                 k x { u32 partition (ascending, < parts) | u8 flags
 *                 (CL_META_OWN_LOST, CL_META_OWN_EXPECT) | u8 n (<= CL_META_MAX_OWNERS)
 *                 | u8 m (<= n) | n x u64 member order (its join's log index): the
 *                 n - m owners, primary first, then the m MOVING ones |
 *                 with CL_META_OWN_EXPECT: u32 the CRC-32C of the row it replaces
 *                 (cl_meta_owners_row_crc; an absent table's rows are 3 zero bytes) }
 *
 * Effects (cluster.md §3.2; every entry is idempotent: applying it again
 * changes nothing and bumps nothing):
 *   NODE_JOIN                 new member, state JOINING, order = its log index;
 *                             major + 1, minor = 0
 *   NODE_LEAVE / NODE_FAIL    member -> LEFT (kept as a tombstone so a late
 *                             duplicate join cannot resurrect it); major + 1, minor = 0
 *   CACHE_START / CACHE_STOP  minor + 1 (a start with another config for a
 *                             started cache id is refused: EM_CACHEEXISTS)
 *   CACHE_CONFIG              the cache's config is replaced (a cache not
 *                             started: EM_NOCACHE; one whose config is not
 *                             the one prev names - another change came first -
 *                             EM_STALE); no version change
 *   BASELINE_SET, STATE_SET   minor + 1 when the value changes (Ignite runs an
 *                             exchange for activation, deactivation, read-only
 *                             and baseline changes)
 *   TYPE_PUT, VOTERS_SET      no version change (not topology)
 *   EXCH_DONE                 records the exchange id (must grow); JOINING members
 *                             that joined at or before its major become ALIVE
 *   OWNERS_SET                the exchange's decision (cl_meta_owners.c): each
 *                             named partition of each group gets those owners and
 *                             flags (a partition whose expected row is not the
 *                             row there now is left as it is: a decision taken on
 *                             a row another one replaced since); a group's table
 *                             starts with no owners (or
 *                             starts over when parts differs); groups of caches
 *                             not started are skipped; minor + 1 when it is an
 *                             affinity switch that changed something (clients
 *                             refetch the partitions), else no version change.
 *                             CACHE_STOP drops the group's table.
 *
 * An entry that is malformed or refused is still "applied" (the log index
 * advances and every node refuses it alike); the refusal is reported in
 * cl_meta_effect.status.  Only EM_NOMEM is returned as a failure, with the
 * state unchanged, so the caller can retry the same entry.
 */
#ifndef EM_CL_META_FSM_H
#define EM_CL_META_FSM_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define CL_META_MAX_BODY       (1u << 20 | 64)  /* 1 MiB blob + its fields */
#define CL_META_MAX_BLOB       (1u << 20)
#define CL_META_MAX_CID        512u
#define CL_META_MAX_ADDR       256u
#define CL_META_MAX_ADDRS      8u
#define CL_META_MAX_MEMBERS    4096u            /* members not LEFT */
#define CL_META_MAX_TOMBSTONES 256u             /* LEFT members kept */
#define CL_META_MAX_VOTERS     5u
#define CL_META_MAX_CACHES     65536u
#define CL_META_MAX_TYPES      65536u
#define CL_META_MAX_SNAPSHOT   (1ull << 32)
#define CL_META_MAX_PARTS      65536u
#define CL_META_MAX_OWNERS     255u
#define CL_META_OWN_LOST       1u               /* OWNERS_SET flag: every owner is gone */
#define CL_META_OWN_EXPECT     2u               /* OWNERS_SET flag: only over the row named */

/* Entry types, named once (X(name, code)). */
#define CL_META_ENTRIES(X) \
    X(NODE_JOIN,    1)     \
    X(NODE_LEAVE,   2)     \
    X(NODE_FAIL,    3)     \
    X(CACHE_START,  4)     \
    X(CACHE_STOP,   5)     \
    X(TYPE_PUT,     6)     \
    X(BASELINE_SET, 7)     \
    X(STATE_SET,    8)     \
    X(VOTERS_SET,   9)     \
    X(EXCH_DONE,    10)    \
    X(OWNERS_SET,   11)    \
    X(CACHE_CONFIG, 12)

enum {
#define CL_META_E_ENUM_(name, code) CL_META_E_##name = (code),
    CL_META_ENTRIES(CL_META_E_ENUM_)
#undef CL_META_E_ENUM_
};

/* cl_meta_entry_name: "NODE_JOIN", ..., or "?" for an unknown type. */
const char *cl_meta_entry_name(int type);

enum { CL_META_INACTIVE = 0, CL_META_ACTIVE = 1, CL_META_ACTIVE_READ_ONLY = 2 };
enum { CL_META_JOINING = 1, CL_META_ALIVE = 2, CL_META_LEFT = 3 };

typedef struct cl_meta_uuid { uint64_t msb, lsb; } cl_meta_uuid;

/* cl_meta_bytes: a view of bytes owned by someone else. */
typedef struct cl_meta_bytes { const uint8_t *p; uint32_t len; } cl_meta_bytes;

/* cl_meta_node_info: what a node says about itself when it joins. */
typedef struct cl_meta_node_info {
    cl_meta_uuid  id;
    uint64_t      raft_id;
    uint64_t      host;
    cl_meta_bytes cid;
    cl_meta_bytes raft_addr;
    uint32_t      n_addrs;
    cl_meta_bytes addrs[CL_META_MAX_ADDRS];
} cl_meta_node_info;

/* cl_meta_entry: a decoded entry.  Views point into the encoded bytes, so it
 * is valid as long as they are. */
typedef struct cl_meta_entry {
    int type;
    union {
        cl_meta_node_info join;                                 /* NODE_JOIN */
        cl_meta_uuid node;                                      /* NODE_LEAVE, NODE_FAIL */
        struct { int32_t id; cl_meta_bytes blob; uint32_t prev; } cache;  /* CACHE_START,
                                                    * _CONFIG (blob, prev), CACHE_STOP */
        struct { int32_t id; cl_meta_bytes blob; } type_put;    /* TYPE_PUT */
        struct { uint32_t n; cl_meta_bytes raw; } baseline;     /* raw: the n encoded strs */
        uint8_t state;                                          /* STATE_SET */
        struct { uint32_t n; cl_meta_uuid id[CL_META_MAX_VOTERS]; } voters;
        struct { uint64_t id, major; uint32_t minor; } exch;    /* EXCH_DONE */
        struct { uint64_t exch; uint32_t ngroups; int sw; cl_meta_bytes raw; } owners; /* OWNERS_SET */
    } u;
} cl_meta_entry;

/* Encoders: each appends one complete entry to out; 0, EM_NOMEM, or EM_BADLEN
 * / EM_RANGE / EM_INVAL when an argument breaks the limits above (then out
 * is unchanged). */
int cl_meta_enc_join(em_buf *out, const cl_meta_node_info *n);
int cl_meta_enc_leave(em_buf *out, cl_meta_uuid id);
int cl_meta_enc_fail(em_buf *out, cl_meta_uuid id);
int cl_meta_enc_cache_start(em_buf *out, int32_t cache_id, const void *cfg, size_t len);
int cl_meta_enc_cache_config(em_buf *out, int32_t cache_id, const void *cfg, size_t len,
                             uint32_t prev_crc);
int cl_meta_enc_cache_stop(em_buf *out, int32_t cache_id);
int cl_meta_enc_type_put(em_buf *out, int32_t type_id, const void *meta, size_t len);
int cl_meta_enc_baseline(em_buf *out, const cl_meta_bytes *cids, uint32_t n);
int cl_meta_enc_state(em_buf *out, int state);
int cl_meta_enc_voters(em_buf *out, const cl_meta_uuid *ids, uint32_t n);
int cl_meta_enc_exch(em_buf *out, uint64_t exch_id, uint64_t major, uint32_t minor);

/* cl_meta_entry_decode checks and decodes p[0..n) into e: 0, or EM_TRUNCATED,
 * EM_TRAILING, EM_BADTYPE, EM_BADLEN, EM_RANGE, EM_INVAL.  Allocates nothing. */
int cl_meta_entry_decode(const uint8_t *p, size_t n, cl_meta_entry *e);

/* cl_meta_baseline_next walks a baseline list (BASELINE_SET's raw, or the
 * state's): *off starts at 0; returns 1 with *cid set, or 0 at the end. */
int cl_meta_baseline_next(cl_meta_bytes raw, uint32_t *off, cl_meta_bytes *cid);

/* A member.  Strings live in str: consistent id, raft address, then addrs. */
typedef struct cl_meta_member {
    cl_meta_uuid id;
    uint64_t     raft_id;
    uint64_t     host;
    uint64_t     order;        /* log index of its NODE_JOIN */
    uint64_t     join_major;   /* major version its join produced */
    uint8_t      state;        /* CL_META_JOINING / ALIVE / LEFT */
    uint8_t      n_addrs;
    uint16_t     cid_len, raft_addr_len;
    uint16_t     addr_len[CL_META_MAX_ADDRS];
    uint8_t     *str;
} cl_meta_member;

/* A cache configuration or binary type: opaque bytes under an id. */
typedef struct cl_meta_blob {
    int32_t  id;
    uint32_t len;
    uint8_t *p;
} cl_meta_blob;

/* cl_meta_fsm: the replicated state.  Read it only through a const pointer
 * (cl_meta_read hands one out under its lock); the arrays are sorted:
 * members by order, caches and types by id. */
typedef struct cl_meta_fsm {
    uint64_t        last_index;    /* last log index applied */
    uint64_t        major;
    uint32_t        minor;
    uint8_t         state;         /* CL_META_ACTIVE at start (in-memory default) */
    uint64_t        last_exch;
    cl_meta_member *members;
    uint32_t        n_members, cap_members, n_left;
    uint32_t        n_voters;
    cl_meta_uuid    voters[CL_META_MAX_VOTERS];
    uint32_t        n_baseline;
    cl_meta_bytes   baseline;      /* the encoded list (owned), see cl_meta_baseline_next */
    cl_meta_blob   *caches;
    uint32_t        n_caches, cap_caches;
    cl_meta_blob   *types;
    uint32_t        n_types, cap_types;
    cl_meta_blob   *owners;        /* per group (id = group id): its owner table */
    uint32_t        n_owners, cap_owners;
} cl_meta_fsm;

/* cl_meta_effect: what applying one entry did. */
typedef struct cl_meta_effect {
    uint64_t index;
    int      type;       /* entry type, 0 if it did not decode */
    int      status;     /* 0 applied; else why every node refused it */
    int      changed;    /* 1 if the state changed (0: refused or a repeat) */
    uint64_t major;      /* topology version after the entry */
    uint32_t minor;
} cl_meta_effect;

void cl_meta_fsm_init(cl_meta_fsm *f);
void cl_meta_fsm_free(cl_meta_fsm *f);

/* cl_meta_fsm_apply applies the entry p[0..n) committed at log index.  An
 * index <= f->last_index was applied already (a replay over a snapshot) and
 * is a no-op.  Returns 0 (eff filled, see the header comment for status) or
 * EM_NOMEM with the state unchanged.  eff may be NULL.  If e is not NULL it
 * receives the decoded entry (views into p). */
int cl_meta_fsm_apply(cl_meta_fsm *f, uint64_t index, const uint8_t *p, size_t n,
                      cl_meta_entry *e, cl_meta_effect *eff);

/* cl_meta_fsm_snapshot appends the whole state, as one buffer, to out
 * (layout in cl_meta_fsm.c): 0 or EM_NOMEM. */
int cl_meta_fsm_snapshot(const cl_meta_fsm *f, em_buf *out);

/* cl_meta_fsm_restore replaces f with the state in p[0..n): 0, or EM_NOMEM,
 * EM_CORRUPT (magic, version or checksum), EM_TRUNCATED, EM_TRAILING,
 * EM_BADLEN, EM_RANGE, EM_INVAL, and then f is unchanged. */
int cl_meta_fsm_restore(cl_meta_fsm *f, const uint8_t *p, size_t n);

/* Lookups (NULL when absent).  Pointers are valid until the next apply. */
const cl_meta_member *cl_meta_fsm_member(const cl_meta_fsm *f, cl_meta_uuid id);
const cl_meta_blob   *cl_meta_fsm_cache(const cl_meta_fsm *f, int32_t cache_id);
const cl_meta_blob   *cl_meta_fsm_type(const cl_meta_fsm *f, int32_t type_id);

/* ---- owner tables (cl_meta_owners.c) ----
 *
 * A table: u32 parts | parts x { u8 flags | u8 n | u8 moving | n x u64
 * member order } (the last `moving` of the n are MOVING: they get the
 * partition's writes while they load it, and own it once they report it
 * loaded).
 * cl_meta_fsm_owners: the group's table (NULL before its first decision). */
const cl_meta_blob *cl_meta_fsm_owners(const cl_meta_fsm *f, int32_t grp);
uint32_t cl_meta_owners_parts(const cl_meta_blob *t);
typedef struct cl_meta_part_owners { uint8_t flags, n, moving; const uint8_t *order; } cl_meta_part_owners;
/* cl_meta_owners_next walks a table a partition at a time: *off starts at 0;
 * 1 with *o filled, 0 after the last. */
int cl_meta_owners_next(const cl_meta_blob *t, uint32_t *off, cl_meta_part_owners *o);
static inline uint64_t cl_meta_owner_at(const cl_meta_part_owners *o, uint32_t i)
{
    return em_ld64(o->order + 8u * i);
}
/* cl_meta_owners_row_crc: the CRC-32C of a partition's row, as
 * CL_META_OWN_EXPECT names it. */
uint32_t cl_meta_owners_row_crc(const cl_meta_part_owners *o);

/* Building an OWNERS_SET entry: begin, then per group a group call followed
 * by its partitions in ascending order, then end.  _size is the entry's size
 * so far (a caller splits a large decision into several entries). */
typedef struct cl_meta_owners_enc {
    em_buf  *out;
    size_t   at, grp_at;
    uint32_t ngroups, parts, nparts;
    int64_t  last_part;
    int      sw;
} cl_meta_owners_enc;
int    cl_meta_enc_owners_begin(cl_meta_owners_enc *e, em_buf *out, uint64_t exch_id);
int    cl_meta_enc_owners_group(cl_meta_owners_enc *e, int32_t grp, uint32_t parts);
int    cl_meta_enc_owners_part(cl_meta_owners_enc *e, uint32_t part, uint8_t flags,
                               const uint64_t *order, uint32_t n, uint32_t moving);
/* _part_if: the partition's row only if it is still the row whose CRC is
 * expect (cl_topo_row_crc) when the entry applies. */
int    cl_meta_enc_owners_part_if(cl_meta_owners_enc *e, uint32_t part, uint32_t expect,
                                  const uint64_t *order, uint32_t n, uint32_t moving);
size_t cl_meta_enc_owners_size(const cl_meta_owners_enc *e);
/* cl_meta_enc_owners_switch marks the entry an affinity switch. */
void   cl_meta_enc_owners_switch(cl_meta_owners_enc *e);
int    cl_meta_enc_owners_end(cl_meta_owners_enc *e);

/* Used by cl_meta_fsm.c. */
int  cl_meta_owners_check(const uint8_t *body, size_t n, uint64_t *exch_id, uint32_t *ngroups,
                          int *sw, cl_meta_bytes *raw);
int  cl_meta_owners_table_check(const uint8_t *p, size_t n);
int  cl_meta_owners_apply(cl_meta_fsm *f, uint32_t ngroups, cl_meta_bytes raw, int *changed);
void cl_meta_owners_drop(cl_meta_fsm *f, int32_t grp);

/* Member strings. */
static inline cl_meta_bytes cl_meta_member_cid(const cl_meta_member *m)
{
    return (cl_meta_bytes){ m->str, m->cid_len };
}
static inline cl_meta_bytes cl_meta_member_raft_addr(const cl_meta_member *m)
{
    return (cl_meta_bytes){ m->str + m->cid_len, m->raft_addr_len };
}
cl_meta_bytes cl_meta_member_addr(const cl_meta_member *m, uint32_t i);

static inline int cl_meta_uuid_eq(cl_meta_uuid a, cl_meta_uuid b)
{
    return a.msb == b.msb && a.lsb == b.lsb;
}
/* cl_meta_uuid_str: u as Java prints a UUID (36 characters and a NUL). */
void cl_meta_uuid_str(cl_meta_uuid u, char out[37]);

#endif
