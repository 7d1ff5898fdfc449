/* binary.h - Ignite's binary object format: the entry points other layers use.
 *
 * Format reference: ../shared/reference/ignite-thin-protocol.md §3.  Every
 * function here treats its input as untrusted: it checks lengths, counts,
 * offsets, nesting depth, handles and UTF-8, and rejects the type codes that
 * imply executable classes (-2, 32, 35, 99) with EM_FORBIDDEN.
 *
 * Fixed interface (store/, proto/ and wal/ are written against it):
 *   bin_validate      - find the end of one data object, checking everything
 *   bin_key_prepare   - normalise a key (DESIGN §4) and compute its Java hash
 *   bin_value_prepare - normalise a value for storage (unwrap 27 where safe)
 *   bin_partition     - Ignite's rendezvous partition of a key hash
 *
 * Additions below the fixed part: bin_hash (Java hashCode of any value), the
 * type registry and metadata codec (registry.c), the writer and its type
 * descriptors (writer.c), the reader and reply form (reader.c).  Files:
 * validate.c, key.c, hash31.c, registry.c, writer.c, reader.c, and
 * bin_public.c (the ember_* section 2 of include/ember.h).
 */
#ifndef EM_BINARY_H
#define EM_BINARY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/buf.h"
#include "util/err.h"

/* Type codes (reference §3.1). */
enum bin_type_code {
    BIN_BYTE = 1, BIN_SHORT = 2, BIN_INT = 3, BIN_LONG = 4, BIN_FLOAT = 5,
    BIN_DOUBLE = 6, BIN_CHAR = 7, BIN_BOOL = 8, BIN_STRING = 9, BIN_UUID = 10,
    BIN_DATE = 11, BIN_BYTE_ARR = 12, BIN_SHORT_ARR = 13, BIN_INT_ARR = 14,
    BIN_LONG_ARR = 15, BIN_FLOAT_ARR = 16, BIN_DOUBLE_ARR = 17, BIN_CHAR_ARR = 18,
    BIN_BOOL_ARR = 19, BIN_STRING_ARR = 20, BIN_UUID_ARR = 21, BIN_DATE_ARR = 22,
    BIN_OBJ_ARR = 23, BIN_COLLECTION = 24, BIN_MAP = 25, BIN_WRAPPED = 27,
    BIN_ENUM = 28, BIN_ENUM_ARR = 29, BIN_DECIMAL = 30, BIN_DECIMAL_ARR = 31,
    BIN_CLASS = 32, BIN_TIMESTAMP = 33, BIN_TIMESTAMP_ARR = 34, BIN_PROXY = 35,
    BIN_TIME = 36, BIN_TIME_ARR = 37, BIN_BINARY_ENUM = 38, BIN_OBJ_ARR_WRAPPER = 39,
    BIN_PLATFORM_PROXY = 99, BIN_NULL = 101, BIN_HANDLE = 102, BIN_OBJ = 103,
    BIN_OPTM_MARSH = 254 /* -2 as an unsigned byte */
};

/* Complex object header (reference §3.2). */
enum {
    BIN_HDR_LEN = 24,
    BIN_FLAG_USER_TYPE = 0x0001, BIN_FLAG_HAS_SCHEMA = 0x0002,
    BIN_FLAG_HAS_RAW = 0x0004, BIN_FLAG_OFFSET_1 = 0x0008,
    BIN_FLAG_OFFSET_2 = 0x0010, BIN_FLAG_COMPACT = 0x0020,
    BIN_FLAG_DOTNET = 0x0040
};

#define BIN_MAX_DEPTH_DEFAULT 64

/* bin_validate checks that p[0..n) starts with one complete, well-formed data
 * object and stores its length in *len.  max_depth bounds nesting (0 = the
 * default, 64; values above the hard cap, 256, mean the cap).  Returns 0, EM_TRUNCATED if the object runs past n, or the
 * distinct error code of the first violation found.  Never recurses without
 * a depth bound; never reads outside p[0..n). */
int bin_validate(const uint8_t *p, size_t n, size_t *len, unsigned max_depth);

/* A key ready for the store: canonical bytes, Java hash, nothing allocated
 * unless normalisation had to rewrite the bytes (into the caller's scratch). */
typedef struct bin_key {
    const uint8_t *p;    /* canonical bytes: points into the input or into scratch */
    uint32_t len;
    int32_t  hash;       /* Java hashCode of the key (reference §4.2 step 2) */
} bin_key;

/* bin_key_prepare normalises a validated key object (DESIGN §4): a 27-wrapped
 * complex object becomes its 103 bytes; every complex object's header hash is
 * recomputed from its data region (deepest first), so keys from clients that
 * write wrong hashes compare equal.  scratch is used only when bytes change
 * (reset by the caller; reused, so steady state allocates nothing). */
int bin_key_prepare(const uint8_t *p, size_t n, em_buf *scratch, bin_key *out);

/* bin_value_prepare: normalised stored form of a validated value.  A 27 wrapper
 * whose root object is self-contained is unwrapped to the plain 103 bytes;
 * anything else is returned unchanged.  *out points into p or into scratch. */
int bin_value_prepare(const uint8_t *p, size_t n, em_buf *scratch,
                      const uint8_t **out, size_t *out_len);

/* bin_partition: RendezvousAffinityFunction's partition for a key hash
 * (reference §4.2 step 3); parts in 1..65000. */
static inline uint32_t bin_partition(int32_t hash, uint32_t parts)
{
    if ((parts & (parts - 1)) == 0) {
        uint32_t h = (uint32_t)hash;
        return (h ^ (h >> 16)) & (parts - 1);
    }
    int32_t r = hash % (int32_t)parts;
    return (uint32_t)(r < 0 ? -r : r);
}

/* ---- additions beyond the fixed interface ---------------------------- */

/* bin_hash: Java hashCode of the validated data object at p (reference §4.2
 * step 2): primitives and strings as Java, complex objects their header hash
 * (normalise with bin_key_prepare first), enums 31*typeId+ordinal, decimals
 * BigDecimal.hashCode, collections/maps List/Set/Map.hashCode of the
 * elements; arrays (identity-hashed in Java) a hash of their bytes. */
int32_t bin_hash(const uint8_t *p);

/* bin_utf8_ok: 1 if s[0..n) is well-formed UTF-8 (no overlongs, surrogates,
 * or code points past U+10FFFF).  Public because names on the cluster port
 * follow the same rule as strings in objects. */
int bin_utf8_ok(const uint8_t *s, size_t n);

/* ---- type registry (registry.c) -------------------------------------
 *
 * Type metadata as Ignite keeps it (reference §2.6, §3.3).  A bin_type is
 * immutable once published: a merge builds a new version and keeps the old
 * one alive until bin_registry_free, so a pointer returned by a lookup stays
 * valid for the registry's lifetime and readers never lock around it.
 * Versions of one type share append-only arrays (a merge only appends), so
 * an old version costs a small header, not a copy: what a type keeps is
 * linear in its fields, schemas and enum values, which the bounds below cap.
 * Lookups take a read lock and allocate nothing. */

typedef struct bin_field_meta {
    const char *name;
    int32_t id;            /* field id: hash of the lower-cased name */
    int32_t type_code;     /* type code of the field (3 int, 9 string, ...) */
} bin_field_meta;

typedef struct bin_schema {
    int32_t id;            /* FNV-1a over the field ids (bin_schema_id) */
    uint32_t nfields;
    const int32_t *fids;   /* field ids in footer order */
} bin_schema;

typedef struct bin_enum_val {
    const char *name;
    int32_t ordinal;
} bin_enum_val;

typedef struct bin_type {
    int32_t type_id;
    const char *name;
    const char *affinity_field;   /* NULL if none */
    uint32_t nfields, nschemas, nenums;
    const bin_field_meta *fields;
    const bin_schema *schemas;
    const bin_enum_val *enums;
    int is_enum;
    struct bin_type *older;       /* private: the version this one replaced */
} bin_type;

typedef struct bin_registry bin_registry;

/* bin_type_id / bin_field_id: hash of the lower-cased UTF-8 name (§3.3). */
int32_t bin_type_id(const char *name, size_t len);
int32_t bin_field_id(const char *name, size_t len);
/* bin_schema_id: FNV-1a over the field ids' little-endian bytes; 0 for none. */
int32_t bin_schema_id(const int32_t *fids, uint32_t n);

/* bin_registry_new creates a registry holding the predefined types
 * (BinaryTreeMap, BinaryTreeSet).  Returns NULL when out of memory. */
bin_registry *bin_registry_new(void);
void bin_registry_free(bin_registry *r);

/* bin_registry_get: the current version of a type, or NULL. */
const bin_type *bin_registry_get(bin_registry *r, int32_t type_id);

/* Bounds on one type (hostile input, reliability.md §5.3): a put that would
 * take a type past one of them fails with EM_LIMIT, as does a metadata
 * record that holds more on its own.  Real types stay far below: Ignite
 * types have tens of fields and a few schemas; Node 1.0.0's one "Object"
 * type gets a schema per object shape.  BIN_MAX_TYPE_BYTES bounds the names
 * and schema field ids a type keeps over all its versions. */
#define BIN_MAX_TYPE_FIELDS  8192
#define BIN_MAX_TYPE_SCHEMAS 8192
#define BIN_MAX_TYPE_ENUMS   65536
#define BIN_MAX_TYPE_BYTES   (16u << 20)

/* bin_registry_put merges t into the registry (Ignite's rules: union of
 * fields, schemas and enum values; a field whose type code changes ->
 * EM_FIELDTYPE; a different name, enum flag, affinity field or enum value ->
 * EM_TYPECONFLICT; past a bound above -> EM_LIMIT).  Linear in the sizes
 * of t and the new items; the registry's lock is held only to publish.
 * t is copied; the caller keeps it.  *out (may be NULL)
 * receives the merged version. */
int bin_registry_put(bin_registry *r, const bin_type *t, const bin_type **out);

/* bin_type_schema: the schema of t with this id, or NULL. */
const bin_schema *bin_type_schema(const bin_type *t, int32_t schema_id);
/* bin_type_field: the field of t with this id, or NULL. */
const bin_field_meta *bin_type_field(const bin_type *t, int32_t field_id);

/* bin_meta_decode parses one metadata record (the body of PUT_BINARY_TYPE,
 * §2.6) from untrusted bytes into a new bin_type (free with bin_type_free);
 * *used = bytes consumed.  Counts are bounded by the bytes present. */
int  bin_meta_decode(const uint8_t *p, size_t n, bin_type **out, size_t *used);
/* bin_meta_encode appends t as a metadata record (GET_BINARY_TYPE reply,
 * after its bool). */
int  bin_meta_encode(const bin_type *t, em_buf *out);
void bin_type_free(bin_type *t);

/* Type-name map for ops 3000/3001: (platform byte, type id) -> name.
 * bin_registry_name_put: 0, or EM_TYPECONFLICT if another name holds the id.
 * bin_registry_name_get: the name (valid for the registry's lifetime,
 * NUL-terminated) or NULL. */
int bin_registry_name_put(bin_registry *r, uint8_t platform, int32_t type_id,
                          const char *name, size_t len);
const char *bin_registry_name_get(bin_registry *r, uint8_t platform, int32_t type_id,
                                  size_t *len);

/* bin_registry_each calls type for the current version of every type,
 * then name for every type name, under the registry's read lock (they must
 * not call into it); the first nonzero return stops it and is returned. */
int bin_registry_each(bin_registry *r, int (*type)(void *arg, const bin_type *t),
                      int (*name)(void *arg, uint8_t platform, int32_t type_id,
                                  const char *s, size_t len),
                      void *arg);

/* ---- writer (writer.c) -----------------------------------------------
 *
 * A bin_desc describes how to write one type: built ONCE when the type is
 * defined (bin_registry_define) or at start-up (the predefined tree types),
 * then reused by every write (DESIGN rule 1).  The writer appends to a
 * caller-owned em_buf; its own scratch (field offsets) is reused, so a
 * steady-state write allocates nothing.  Errors are sticky: the first one is
 * returned by every later call and by bin_w_obj_end. */

typedef struct bin_desc {
    int32_t type_id;
    uint16_t flags;            /* BIN_FLAG_USER_TYPE, or 0 for system types */
    uint8_t raw;               /* raw-mode type: no named fields */
    uint32_t nfields;
    const int32_t *fids;       /* field ids in declared order */
    const int32_t *codes;      /* declared type codes */
    const char *const *names;  /* field names */
    int32_t schema_id;         /* schema of all fields in declared order */
    /* The first 8 header bytes (code, version, flags, type id) of the
     * common layouts: all fields, compact footer, 1-byte offsets; no
     * fields; raw data only (the tree types).  Built with the descriptor
     * so the writer's fast path only stores them. */
    uint64_t hdr_fields, hdr_empty, hdr_raw;
    uint32_t q_hdr_raw;        /* polynomial hash part of hdr_raw's 8 bytes */
    const char *name;
    struct bin_desc *older;    /* private */
} bin_desc;

/* bin_registry_define registers type `name` with these fields (merging its
 * metadata: EM_FIELDTYPE if a field's type code changes) and returns its
 * descriptor.  Defining the same field list again returns the same pointer. */
int bin_registry_define(bin_registry *r, const char *name, const char *const *fields,
                        const int32_t *codes, uint32_t n, const bin_desc **out);
/* bin_registry_desc: the current descriptor of a type id, or NULL.  The
 * predefined BIN_TYPE_TREEMAP_ID / BIN_TYPE_TREESET_ID always exist. */
const bin_desc *bin_registry_desc(bin_registry *r, int32_t type_id);

#define BIN_TYPE_TREEMAP_ID ((int32_t)-526400035)
#define BIN_TYPE_TREESET_ID ((int32_t)-526394141)
#define BIN_W_MAX_DEPTH 64

/* A field named in the object being written, and where its value starts
 * (from the object's first byte; recorded when the name is given, since the
 * value is the next thing appended). */
typedef struct bin_wfield { int32_t fid; uint32_t off; } bin_wfield;

typedef struct bin_wframe {
    size_t start;              /* object start, or a container's count position */
    const bin_desc *desc;      /* objects */
    uint32_t f0;               /* objects: first entry in fields[] */
    uint32_t count;            /* containers and tree types: values written */
    uint32_t raw_pos;          /* objects: raw data offset, 0 if none */
    uint32_t hpos;             /* objects: region bytes [24, hpos) are hashed ... */
    uint32_t hq;               /* ... into this polynomial sum (hash31.c) */
    uint8_t kind;              /* container type code, BIN_OBJ, or tree kind */
    uint8_t in_order;          /* fields so far follow the declared order */
    uint8_t pmode;             /* the parent's mode once this frame is popped */
} bin_wframe;

/* The writer's state.  fr[0] is a sentinel for depth 0 (kind 0), so the
 * innermost frame top = &fr[depth] always exists and a push never tests
 * for a parent. */
typedef struct bin_writer {
    em_buf *out;
    bin_registry *reg;
    unsigned depth;
    int err;
    uint8_t full_footer;       /* write full footers (field id + offset) */
    uint8_t min_width;         /* smallest footer offset width: 1 (default), 2 or 4 */
    uint8_t named;             /* a field name awaits its value */
    uint8_t vmode;             /* what starting a value does now: BIN_WM_* */
    const bin_desc *treemap, *treeset;   /* predefined, looked up once */
    bin_wfield *fields;        /* reused across objects */
    uint32_t nf, capf;
    bin_wframe *top;           /* &fr[depth] */
    bin_wframe fr[BIN_W_MAX_DEPTH + 1];
} bin_writer;

enum { BIN_WK_TREEMAP = 200, BIN_WK_TREESET = 201 };   /* frame kinds */

/* What starting a value does in the current state (w->vmode, and the
 * cursor's mode in wcursor.h): */
enum {
    BIN_WM_TOP,        /* depth 0: nothing to account */
    BIN_WM_COUNT,      /* in 23/24/25 or a tree type: count it */
    BIN_WM_FIELD,      /* in an object, a named field awaits its value */
    BIN_WM_RAW,        /* in an object's raw data: nothing to account */
    BIN_WM_NEEDNAME,   /* in an object, the next value needs a name first */
    BIN_WM_SLOW        /* error set, or a typed array: the full check decides */
};

void bin_writer_init(bin_writer *w, bin_registry *reg, em_buf *out);
void bin_writer_free(bin_writer *w);

/* bin_writer_reset: start again (after an error, or for a new top value),
 * appending to out. */
static inline void bin_writer_reset(bin_writer *w, em_buf *out)
{
    w->out = out;
    w->depth = 0;
    w->err = 0;
    w->nf = 0;
    w->named = 0;
    w->top = &w->fr[0];
    w->vmode = BIN_WM_TOP;
}

/* Every call returns 0 or the writer's first error (sticky).  Inside an
 * object, name each value first (bin_w_field / bin_w_field_idx).  wcursor.h
 * has the same calls with inline fast paths, for hot loops. */
int bin_w_byte(bin_writer *w, int8_t v);
int bin_w_short(bin_writer *w, int16_t v);
int bin_w_int(bin_writer *w, int32_t v);
int bin_w_long(bin_writer *w, int64_t v);
int bin_w_float(bin_writer *w, float v);
int bin_w_double(bin_writer *w, double v);
int bin_w_char(bin_writer *w, uint16_t v);
int bin_w_bool(bin_writer *w, int v);
/* bin_w_string: s must be UTF-8 */
int bin_w_string(bin_writer *w, const char *s, size_t len);
int bin_w_uuid(bin_writer *w, uint64_t msb, uint64_t lsb);
int bin_w_date(bin_writer *w, int64_t ms);
int bin_w_timestamp(bin_writer *w, int64_t ms, int32_t nanos);
int bin_w_time(bin_writer *w, int64_t ms);
/* decimal: scale + big-endian magnitude with the sign in the top bit */
int bin_w_decimal(bin_writer *w, int32_t scale, const uint8_t *mag, uint32_t len);
int bin_w_enum(bin_writer *w, int32_t type_id, int32_t ordinal);       /* 28 */
int bin_w_binary_enum(bin_writer *w, int32_t type_id, int32_t ordinal);/* 38 */
int bin_w_null(bin_writer *w);
/* primitive arrays 12..19: count elements of the code's size, little-endian */
int bin_w_prim_array(bin_writer *w, uint8_t code, const void *elems, uint32_t count);
/* bin_w_value copies one already-encoded, validated data object. */
int bin_w_value(bin_writer *w, const uint8_t *p, size_t len);

/* Containers: values written between begin and end are the elements (for
 * a map: key, value, key, value, ...).  code: BIN_COLLECTION, BIN_MAP,
 * BIN_OBJ_ARR or the typed arrays 20,21,22,29,31,34,37; arg is the subtype
 * for 24/25, the element type id for 23/29 (-1 = Object). */
int bin_w_begin(bin_writer *w, uint8_t code, int32_t arg);
int bin_w_end(bin_writer *w);

/* Complex objects.  bin_w_field names the next value by field id,
 * bin_w_field_idx by its index in the descriptor.  bin_w_raw switches to
 * raw data; bin_w_raw_int writes an int without its type code. */
int bin_w_obj_begin(bin_writer *w, const bin_desc *d);
int bin_w_field(bin_writer *w, int32_t field_id);
int bin_w_field_idx(bin_writer *w, uint32_t idx);
int bin_w_raw(bin_writer *w);
int bin_w_raw_int(bin_writer *w, int32_t v);
int bin_w_obj_end(bin_writer *w);

/* BinaryTreeMap / BinaryTreeSet (reference §3.5): a raw-mode object with a
 * null comparator, the size, then the entries written between begin and
 * end (key, value, ... for the map). */
int bin_w_treemap_begin(bin_writer *w);
int bin_w_treeset_begin(bin_writer *w);
int bin_w_tree_end(bin_writer *w);

/* hash31.c: Java's 31*h+b hash of p[0..n); the 16 bytes before p must be
 * readable (an object's header precedes its data region). */
int32_t bin_hash31_after(const uint8_t *p, size_t n);
/* Objects larger than this are folded into the enclosing object's hash sum
 * instead of being hashed again with it (writer.c). */
#define BIN_W_FOLD_MIN 512

/* ---- reader (reader.c) -----------------------------------------------
 *
 * A cursor over bytes bin_validate() accepted: every pointer below points
 * into the caller's buffer and is valid as long as it is.  Nothing is
 * decoded beyond what is asked for; nothing allocates. */

/* bin_rd_resolve: follows handles (102) back to their target and 27
 * wrappers to their root object. */
const uint8_t *bin_rd_resolve(const uint8_t *v);

/* bin_rd_len: length of the validated data object at v. */
size_t bin_rd_len(const uint8_t *v);

/* bin_rd_field: the value of field fid in complex object o (a 103; resolve
 * first).  A compact footer is decoded with t's schemas (t may be NULL for
 * full footers).  Returns 0, EM_NOFIELD, or EM_BADSCHEMA when the schema is
 * unknown.  *val may be a handle: bin_rd_resolve it for the target. */
int bin_rd_field(const uint8_t *o, const bin_type *t, int32_t fid, const uint8_t **val);
/* bin_floc: where field fid sits in objects of one layout (type, schema,
 * flags, footer length), so a scan reading the same field of many objects
 * finds it with a few compares and one load instead of a search of the
 * footer.  Zeroed = knows nothing.  bin_floc_get answers 0 with *val,
 * EM_NOFIELD (the layout has no such field), or EM_AGAIN (another layout:
 * call bin_floc_fill, which looks up as bin_rd_field does, returns what it
 * would, and remembers o's layout when that is 0 or EM_NOFIELD).  A full
 * footer names its ids itself, so its cached slot is checked against fid
 * and its absences are never cached. */
typedef struct bin_floc {
    int32_t  tid, sid;
    uint32_t tail;           /* object length - footer start */
    uint16_t flags;
    uint8_t  known, present, shift;
    int32_t  off;            /* the 4-byte load ending at the offset, from the footer start */
    int32_t  idoff;          /* full footer: the id's position there; -1 compact */
    int32_t  fid;
} bin_floc;

static inline int bin_floc_get(const uint8_t *o, const bin_floc *fl, const uint8_t **val)
{
    uint32_t soff = em_ld32(o + 20);
    if (!fl->known || em_ld16(o + 2) != fl->flags || (int32_t)em_ld32(o + 4) != fl->tid ||
        (int32_t)em_ld32(o + 16) != fl->sid || em_ld32(o + 12) - soff != fl->tail)
        return EM_AGAIN;
    if (!fl->present)
        return EM_NOFIELD;
    if (fl->idoff >= 0 && (int32_t)em_ld32(o + soff + (uint32_t)fl->idoff) != fl->fid)
        return EM_AGAIN;
    *val = o + (em_ld32(o + (ptrdiff_t)soff + fl->off) >> fl->shift);
    return 0;
}
int bin_floc_fill(const uint8_t *o, const bin_type *t, int32_t fid, bin_floc *fl,
                  const uint8_t **val);
/* bin_rd_field_name: the same, by name, looking the type up in r. */
int bin_rd_field_name(const uint8_t *o, bin_registry *r, const char *name, size_t len,
                      const uint8_t **val);

/* Field iteration in footer (write) order. */
typedef struct bin_fiter {
    const uint8_t *o;
    const int32_t *fids;     /* compact footer: the schema's ids */
    uint32_t i, n;
    uint16_t flags;
    uint32_t footer;
    uint8_t width, esz;
} bin_fiter;
int bin_fiter_init(bin_fiter *it, const uint8_t *o, const bin_type *t);
/* bin_fiter_next: 1 and the next (field id, value), or 0 at the end. */
int bin_fiter_next(bin_fiter *it, int32_t *fid, const uint8_t **val);

/* bin_rd_type_id / bin_rd_schema_id of complex object o. */
static inline int32_t bin_rd_type_id(const uint8_t *o)
{ int32_t v; memcpy(&v, o + 4, 4); return v; }

/* bin_rd_raw: the raw data region of complex object o (*len 0 if none). */
void bin_rd_raw(const uint8_t *o, const uint8_t **raw, size_t *len);

/* Sequences: arrays 12..23, 29, 31, 34, 37, 39, collections, maps (key,
 * value alternating), and BinaryTreeMap/Set objects.  For primitive arrays
 * each element is a pointer to its elem_size packed bytes; for all others
 * a pointer to a data object. */
typedef struct bin_seq {
    const uint8_t *p;
    uint32_t left;
    uint8_t code;            /* container type code (103 for tree types) */
    uint8_t elem_size;       /* primitive arrays only, else 0 */
    int8_t subtype;          /* 24/25 subtype, else 0 */
} bin_seq;
/* bin_seq_init: EM_BADTYPE if v is not a sequence; *count = elements (pairs
 * for maps and tree maps). */
int bin_seq_init(bin_seq *s, const uint8_t *v, uint32_t *count);
int bin_seq_next(bin_seq *s, const uint8_t **elem);

/* Scalars (resolve first).  bin_rd_long accepts byte/short/int/long/char,
 * bin_rd_double float/double; EM_BADTYPE otherwise. */
int bin_rd_long(const uint8_t *v, int64_t *out);
int bin_rd_double(const uint8_t *v, double *out);
int bin_rd_bool(const uint8_t *v, int *out);
/* bin_rd_string: pointer to the UTF-8 bytes (not NUL-terminated). */
int bin_rd_string(const uint8_t *v, const char **s, size_t *len);

/* bin_wire_out appends value v (validated, stored form) in reply form
 * (reference §3.4, §5.4 item 2): a complex object is 27-wrapped at the top
 * level and as an element of 23/24/25/39 containers, at any container
 * depth; fields inside complex objects stay plain.  A container that holds
 * handles is written unchanged, since wrapping would move their targets. */
int bin_wire_out(const uint8_t *v, size_t n, em_buf *out);

#endif
