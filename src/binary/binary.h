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
 * default, 64).  Returns 0, EM_TRUNCATED if the object runs past n, or the
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

/* ---- type registry (registry.c) -------------------------------------
 *
 * Type metadata as Ignite keeps it (reference §2.6, §3.3).  A bin_type is
 * immutable once published: a merge builds a new version and keeps the old
 * one alive until bin_registry_free, so a pointer returned by a lookup stays
 * valid for the registry's lifetime and readers never lock around it.
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

/* bin_registry_put merges t into the registry (Ignite's rules: union of
 * fields, schemas and enum values; a field whose type code changes ->
 * EM_FIELDTYPE; a different name, enum flag, affinity field or enum value ->
 * EM_TYPECONFLICT).  t is copied; the caller keeps it.  *out (may be NULL)
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

typedef struct bin_wfield { int32_t fid; uint32_t off; } bin_wfield;

typedef struct bin_wframe {
    size_t start;              /* object/container start in out */
    const bin_desc *desc;
    uint32_t f0;               /* first entry of this object in fields[] */
    uint32_t count;            /* containers: values written */
    uint32_t raw_pos;          /* objects: raw data offset, 0 if none */
    uint32_t hpos;             /* objects: region bytes [24, hpos) are hashed ... */
    uint32_t hq;               /* ... into this polynomial sum (hash31.c) */
    uint8_t kind;              /* container type code, BIN_OBJ, or tree kind */
    uint8_t in_order;          /* fields so far follow the declared order */
    uint8_t pmode;             /* the parent's vmode once this frame is popped */
} bin_wframe;

typedef struct bin_writer {
    em_buf *out;
    bin_registry *reg;
    unsigned depth;
    int err;
    uint8_t full_footer;       /* write full footers (field id + offset) */
    uint8_t min_width;         /* smallest footer offset width: 1 (default), 2 or 4 */
    const bin_desc *treemap, *treeset;   /* predefined, looked up once */
    bin_wfield *fields;        /* reused across objects */
    uint32_t nf, capf;
    uint8_t vmode;             /* what starting a value does now: BIN_WM_* */
    bin_wframe *top;           /* &fr[depth - 1]; unused at depth 0 */
    bin_wframe fr[BIN_W_MAX_DEPTH];
} bin_writer;

void bin_writer_init(bin_writer *w, bin_registry *reg, em_buf *out);
void bin_writer_free(bin_writer *w);

int bin_w_byte(bin_writer *w, int8_t v);
int bin_w_short(bin_writer *w, int16_t v);
int bin_w_long(bin_writer *w, int64_t v);
int bin_w_float(bin_writer *w, float v);
int bin_w_double(bin_writer *w, double v);
int bin_w_char(bin_writer *w, uint16_t v);
int bin_w_bool(bin_writer *w, int v);
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

/* Containers (bin_w_begin / bin_w_end, inline below): values written
 * between begin and end are the elements (for a map: key, value, key,
 * value, ...).  code: BIN_COLLECTION, BIN_MAP, BIN_OBJ_ARR or the typed
 * arrays 20,21,22,29,31,34,37; arg is the subtype for 24/25, the element
 * type id for 23/29 (-1 = Object). */

/* Complex objects (bin_w_obj_begin ... bin_w_obj_end, inline below).  Name
 * each field value with bin_w_field (field id) or bin_w_field_idx (index in
 * the descriptor, both inline below) before writing it.
 * bin_w_raw switches to raw data; bin_w_raw_int writes an int without code. */
int bin_w_raw(bin_writer *w);
int bin_w_raw_int(bin_writer *w, int32_t v);

/* BinaryTreeMap / BinaryTreeSet (reference §3.5, bin_w_treemap_begin,
 * bin_w_treeset_begin, bin_w_tree_end inline below): a raw-mode object with
 * a null comparator, the size, then the entries written between begin and
 * end (key, value, ... for the map). */

/* ---- writer fast paths ------------------------------------------------
 *
 * The calls a typical object write makes (obj_begin, field, int, string,
 * begin/end of 24/25, the tree types) are inline here, so a caller's
 * sequence of them compiles into straight-line stores with no call per
 * value.  Each inline function handles only the common case (no error,
 * room in the buffer, a frame kind that needs no element check) and does
 * nothing else; anything else goes to its bin_w_*_slow twin in writer.c,
 * which is the complete function and makes every check again, so the bytes
 * and errors are the same whichever path ran.  (bin_w_obj_end's fast path
 * covers the declared fields in order with 1-byte offsets and a compact
 * footer.)  Prototypes above list the rest of the writer.
 *
 *   bin_writer_reset: start again (after an error, or for a new top value)
 *   bin_w_string: s must be UTF-8
 */
enum { BIN_WK_TREEMAP = 200, BIN_WK_TREESET = 201 };   /* frame kinds */

/* w->vmode caches what the state (err, top frame, pending field name) means
 * for the next value, so the fast paths test one byte: */
enum {
    BIN_WM_TOP,        /* depth 0: nothing to account */
    BIN_WM_COUNT,      /* in 23/24/25 or a tree type: count it */
    BIN_WM_FIELD,      /* in an object, a named field awaits its value */
    BIN_WM_RAW,        /* in an object's raw data: nothing to account */
    BIN_WM_NEEDNAME,   /* in an object, the next value needs a name first */
    BIN_WM_SLOW        /* error set, or a typed array: the slow path decides */
};

/* bin_w__sync recomputes vmode and top from the state; every slow path
 * that changes the state calls it. */
static inline void bin_w__sync(bin_writer *w)
{
    if (w->err) {
        w->vmode = BIN_WM_SLOW;
        return;
    }
    if (!w->depth) {
        w->top = NULL;
        w->vmode = BIN_WM_TOP;
        return;
    }
    bin_wframe *f = w->top = &w->fr[w->depth - 1];
    uint8_t k = f->kind;
    if (k >= BIN_WK_TREEMAP || (uint8_t)(k - BIN_OBJ_ARR) <= BIN_MAP - BIN_OBJ_ARR)
        w->vmode = BIN_WM_COUNT;
    else if (k != BIN_OBJ)
        w->vmode = BIN_WM_SLOW;
    else if (f->raw_pos)
        w->vmode = BIN_WM_RAW;
    else if (w->nf > f->f0 && w->fields[w->nf - 1].off == UINT32_MAX)
        w->vmode = BIN_WM_FIELD;
    else
        w->vmode = BIN_WM_NEEDNAME;
}

/* bin_w__pop: the fast end of a frame (no error is set on fast paths). */
static inline void bin_w__pop(bin_writer *w)
{
    bin_wframe *f = w->top;
    w->vmode = f->pmode;
    w->depth--;
    w->top = f - (w->depth != 0);          /* stays &fr[0] at depth 0 */
}

int bin_w_int_slow(bin_writer *w, int32_t v);
int bin_w_string_slow(bin_writer *w, const char *s, size_t len);
int bin_w_begin_slow(bin_writer *w, uint8_t code, int32_t arg);
int bin_w_end_slow(bin_writer *w);
int bin_w_obj_begin_slow(bin_writer *w, const bin_desc *d);
int bin_w_field_slow(bin_writer *w, int32_t field_id);
int bin_w_field_idx_slow(bin_writer *w, uint32_t idx);
int bin_w_treemap_begin_slow(bin_writer *w);
int bin_w_treeset_begin_slow(bin_writer *w);
int bin_w_tree_end_slow(bin_writer *w);
int bin_w_obj_end_slow(bin_writer *w);
/* hash31.c: Java's 31*h+b hash of p[0..n); the 16 bytes before p must be
 * readable (an object's header precedes its data region). */
int32_t bin_hash31_after(const uint8_t *p, size_t n);
/* Objects larger than this are folded into the enclosing object's hash sum
 * instead of being hashed again with it (writer.c). */
#define BIN_W_FOLD_MIN 512

/* bin_w__st8/32/64: the fast paths' stores into the output buffer, made
 * through packed one-member structs that nothing in the writer's state
 * (or an em_buf) contains.  A uint8_t or memcpy store may alias anything,
 * so after each one the compiler reloads every writer field it uses; these
 * it can tell apart from the state (type-based and access-path alias
 * analysis).  The gain is small (the slow-path calls joining each fast path
 * still force reloads: ~2 instructions per M1 object), but nothing is lost.
 * Readers of the bytes use char or memcpy loads, which alias these stores
 * as they must. */
typedef struct bin_w__b8 { uint8_t v; } __attribute__((packed)) bin_w__b8;
typedef struct bin_w__b32 { uint32_t v; } __attribute__((packed)) bin_w__b32;
typedef struct bin_w__b64 { uint64_t v; } __attribute__((packed)) bin_w__b64;
static inline void bin_w__st8(uint8_t *p, uint8_t v) { ((bin_w__b8 *)(void *)p)->v = v; }
static inline void bin_w__st32(uint8_t *p, uint32_t v) { ((bin_w__b32 *)(void *)p)->v = v; }
static inline void bin_w__st64(uint8_t *p, uint64_t v) { ((bin_w__b64 *)(void *)p)->v = v; }

static inline void bin_writer_reset(bin_writer *w, em_buf *out)
{
    w->out = out;
    w->depth = 0;
    w->err = 0;
    w->nf = 0;
    w->top = NULL;
    w->vmode = BIN_WM_TOP;
}

/* bin_w__account: a value starts at offset len in mode m (< NEEDNAME):
 * count it, or give the pending field its offset.  Returns the mode the
 * writer is in after the value. */
static inline __attribute__((always_inline)) uint8_t bin_w__account(bin_writer *w, uint8_t m,
                                                                    size_t len)
{
    if (m == BIN_WM_COUNT) {
        w->top->count++;
    } else if (m == BIN_WM_FIELD) {
        w->fields[w->nf - 1].off = (uint32_t)(len - w->top->start);
        w->vmode = m = BIN_WM_NEEDNAME;
    }
    return m;
}

/* bin_w__put: the fast half of accounting for one value of code c and
 * reserving its 1 + n bytes; NULL (and nothing changed) when the slow path
 * must decide. */
static inline __attribute__((always_inline)) uint8_t *bin_w__put(bin_writer *w, uint8_t c,
                                                                 size_t n)
{
    em_buf *o = w->out;
    uint8_t m = w->vmode;
    size_t len = o->len;
    if (__builtin_expect(m >= BIN_WM_NEEDNAME || o->cap - len < 1 + n, 0))
        return NULL;
    bin_w__account(w, m, len);
    uint8_t *p = o->p + len;
    o->len = len + 1 + n;
    bin_w__st8(p, c);
    return p + 1;
}

static inline int bin_w_int(bin_writer *w, int32_t v)
{
    uint8_t *p = bin_w__put(w, BIN_INT, 4);
    if (__builtin_expect(!p, 0))
        return bin_w_int_slow(w, v);
    bin_w__st32(p, (uint32_t)v);
    return 0;
}

static inline int bin_w_string(bin_writer *w, const char *s, size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    if (len >= 4 && len <= 16) {
        /* two overlapping words: they prove ASCII and copy the string */
        uint64_t a = len >= 8 ? em_ld64(u) : em_ld32(u);
        uint64_t b = len >= 8 ? em_ld64(u + len - 8) : em_ld32(u + len - 4);
        if (!((a | b) & 0x8080808080808080ULL)) {
            uint8_t *p = bin_w__put(w, BIN_STRING, 4 + len);
            if (p) {
                bin_w__st32(p, (uint32_t)len);
                if (len >= 8) {
                    bin_w__st64(p + 4, a);
                    bin_w__st64(p + 4 + len - 8, b);
                } else {
                    bin_w__st32(p + 4, (uint32_t)a);
                    bin_w__st32(p + len, (uint32_t)b);
                }
                return 0;
            }
        }
    }
    return bin_w_string_slow(w, s, len);
}

static inline int bin_w_begin(bin_writer *w, uint8_t code, int32_t arg)
{
    em_buf *o = w->out;
    uint8_t m = w->vmode;
    size_t len = o->len;
    if ((code == BIN_COLLECTION || code == BIN_MAP) && m < BIN_WM_NEEDNAME &&
        w->depth < BIN_W_MAX_DEPTH && o->cap - len >= 6) {
        m = bin_w__account(w, m, len);
        uint8_t *p = o->p + len;
        o->len = len + 6;
        bin_w__st8(p, code);
        bin_w__st8(p + 5, (uint8_t)arg);
        bin_wframe *f = w->top = &w->fr[w->depth++];
        f->kind = code;
        f->start = len + 1;
        f->count = 0;
        f->pmode = m;
        w->vmode = BIN_WM_COUNT;
        return 0;
    }
    return bin_w_begin_slow(w, code, arg);
}

static inline int bin_w_end(bin_writer *w)
{
    if (w->vmode == BIN_WM_COUNT) {
        bin_wframe *f = w->top;
        if (f->kind == BIN_COLLECTION || (f->kind == BIN_MAP && !(f->count & 1))) {
            bin_w__st32(w->out->p + f->start, f->kind == BIN_MAP ? f->count / 2 : f->count);
            bin_w__pop(w);
            return 0;
        }
    }
    return bin_w_end_slow(w);
}

/* bin_w__obj_push: the fast half of starting a complex object of d with
 * `extra` more bytes of room; NULL when the slow path must decide. */
static inline __attribute__((always_inline)) bin_wframe *bin_w__obj_push(bin_writer *w,
                                                                        const bin_desc *d,
                                                                        size_t extra)
{
    em_buf *o = w->out;
    uint8_t m = w->vmode;
    size_t len = o->len;
    if (!d || m >= BIN_WM_NEEDNAME || w->depth >= BIN_W_MAX_DEPTH ||
        o->cap - len < BIN_HDR_LEN + extra)
        return NULL;
    m = bin_w__account(w, m, len);
    bin_w__st8(o->p + len, BIN_OBJ);
    o->len = len + BIN_HDR_LEN;
    bin_wframe *f = w->top = &w->fr[w->depth++];
    f->pmode = m;
    w->vmode = BIN_WM_NEEDNAME;
    f->kind = BIN_OBJ;
    f->start = len;
    f->count = 0;
    f->raw_pos = 0;
    f->desc = d;
    f->f0 = w->nf;
    f->in_order = 1;
    f->hpos = BIN_HDR_LEN;
    f->hq = 0;
    return f;
}

static inline int bin_w_obj_begin(bin_writer *w, const bin_desc *d)
{
    if (bin_w__obj_push(w, d, 0))
        return 0;
    return bin_w_obj_begin_slow(w, d);
}

/* bin_w__field: names the next value fid (pos-th in the declared order
 * when it equals fids[pos]); 0 when the slow path must decide. */
static inline __attribute__((always_inline)) int bin_w__field(bin_writer *w, int32_t fid)
{
    if (w->vmode != BIN_WM_NEEDNAME || w->nf == w->capf)
        return 0;
    bin_wframe *f = w->top;
    w->vmode = BIN_WM_FIELD;
    uint32_t pos = w->nf - f->f0;
    if (f->in_order && (pos >= f->desc->nfields || f->desc->fids[pos] != fid))
        f->in_order = 0;
    w->fields[w->nf].fid = fid;
    w->fields[w->nf].off = UINT32_MAX;     /* set by the value's start */
    w->nf++;
    return 1;
}

static inline int bin_w_field(bin_writer *w, int32_t field_id)
{
    if (bin_w__field(w, field_id))
        return 0;
    return bin_w_field_slow(w, field_id);
}

static inline int bin_w_field_idx(bin_writer *w, uint32_t idx)
{
    uint32_t nf = w->nf;
    if (w->vmode == BIN_WM_NEEDNAME && nf != w->capf) {
        bin_wframe *f = w->top;
        const bin_desc *d = f->desc;
        if (idx < d->nfields) {
            /* in declared order when idx is the position; otherwise as
             * bin_w__field decides (equal ids keep the order) */
            const int32_t fid = d->fids[idx];
            const uint32_t pos = nf - f->f0;
            if (pos != idx && f->in_order && (pos >= d->nfields || d->fids[pos] != fid))
                f->in_order = 0;
            w->vmode = BIN_WM_FIELD;
            w->fields[nf] = (bin_wfield){fid, UINT32_MAX};   /* off: set by the value */
            w->nf = nf + 1;
            return 0;
        }
    }
    return bin_w_field_idx_slow(w, idx);
}

/* bin_w__hash_short: Java's 31*h+b hash of n < 16 bytes, 4 at a step;
 * byte loads, as the bytes were just stored in pieces (a wide load over
 * several pending stores cannot be forwarded and stalls). */
static inline uint32_t bin_w__hash_short(const uint8_t *p, uint32_t n)
{
    uint32_t h = 1;
    for (; n >= 4; n -= 4, p += 4)
        h = h * 923521u + (uint32_t)(int32_t)(int8_t)p[0] * 29791u +
            (uint32_t)(int32_t)(int8_t)p[1] * 961u + (uint32_t)(int32_t)(int8_t)p[2] * 31u +
            (uint32_t)(int32_t)(int8_t)p[3];
    switch (n) {
    case 3:
        return h * 29791u + (uint32_t)(int32_t)(int8_t)p[0] * 961u +
               (uint32_t)(int32_t)(int8_t)p[1] * 31u + (uint32_t)(int32_t)(int8_t)p[2];
    case 2:
        return h * 961u + (uint32_t)(int32_t)(int8_t)p[0] * 31u + (uint32_t)(int32_t)(int8_t)p[1];
    case 1:
        return h * 31u + (uint32_t)(int32_t)(int8_t)p[0];
    default:
        return h;
    }
}

/* bin_w__obj_end: the common end of an object - every declared field in
 * declared order (or none), compact footer, 1-byte offsets, no nested
 * object folded into its hash sum and none to fold into a parent.  The
 * bytes are exactly what bin_w_obj_end_slow writes in that case.  Returns
 * 0 when the general path must run (nothing changed then). */
static inline __attribute__((always_inline)) int bin_w__obj_end(bin_writer *w)
{
    bin_wframe *f = w->top;
    if (f->kind != BIN_OBJ || f->hpos != BIN_HDR_LEN || w->full_footer)
        return 0;
    em_buf *out = w->out;
    const bin_desc *d = f->desc;
    const uint32_t f0 = f->f0, nfl = w->nf - f0, raw = f->raw_pos;
    const size_t start = f->start, len = out->len;
    const uint32_t end = (uint32_t)(len - start);
    uint32_t flags = d->flags | BIN_FLAG_COMPACT | (raw ? BIN_FLAG_HAS_RAW : 0);
    uint32_t total = end, sid = 0, soff = raw;
    if (nfl) {
        const bin_wfield *fl = w->fields + f0;
        if (!f->in_order || nfl != d->nfields || !w->reg || w->min_width > 1 ||
            fl[nfl - 1].off >= 0x100 || out->cap - len < (size_t)nfl + 4)
            return 0;
        total += nfl + (raw ? 4 : 0);
        if (total > BIN_W_FOLD_MIN && w->depth > 1)
            return 0;                      /* the general path folds it */
        uint8_t *q = out->p + len;
        for (uint32_t i = 0; i < nfl; i++)
            bin_w__st8(q + i, (uint8_t)fl[i].off);
        if (raw)
            bin_w__st32(q + nfl, raw);
        flags |= BIN_FLAG_HAS_SCHEMA | BIN_FLAG_OFFSET_1;
        sid = (uint32_t)d->schema_id;
        soff = end;
    } else if (total > BIN_W_FOLD_MIN && w->depth > 1) {
        return 0;
    }
    out->len = start + total;
    w->nf = f0;
    bin_w__pop(w);
    uint8_t *o = out->p + start;
    /* code, version, flags, type id in one store; o[0] is already 103 */
    bin_w__st64(o, BIN_OBJ | 1u << 8 | flags << 16 | (uint64_t)(uint32_t)d->type_id << 32);
    bin_w__st32(o + 12, total);
    bin_w__st32(o + 16, sid);
    bin_w__st32(o + 20, soff);
    const uint32_t n = end - BIN_HDR_LEN;
    bin_w__st32(o + 8, n < 16 ? bin_w__hash_short(o + BIN_HDR_LEN, n)
                          : (uint32_t)bin_hash31_after(o + BIN_HDR_LEN, n));
    return 1;
}

static inline __attribute__((always_inline)) int bin_w_obj_end(bin_writer *w)
{
    if (w->vmode != BIN_WM_TOP && w->vmode != BIN_WM_SLOW && bin_w__obj_end(w))
        return 0;
    return bin_w_obj_end_slow(w);
}

/* The tree types: a raw object with the null comparator and the size. */
static inline __attribute__((always_inline)) int bin_w__tree_begin(bin_writer *w,
                                                                  const bin_desc *d,
                                                                  uint8_t kind)
{
    bin_wframe *f = bin_w__obj_push(w, d, 5);
    if (!f)
        return 0;
    f->raw_pos = BIN_HDR_LEN;
    f->kind = kind;
    w->vmode = BIN_WM_COUNT;
    bin_w__st8(w->out->p + w->out->len, BIN_NULL);
    w->out->len += 5;
    return 1;
}

static inline __attribute__((always_inline)) int bin_w_treemap_begin(bin_writer *w)
{
    if (bin_w__tree_begin(w, w->treemap, BIN_WK_TREEMAP))
        return 0;
    return bin_w_treemap_begin_slow(w);
}

static inline __attribute__((always_inline)) int bin_w_treeset_begin(bin_writer *w)
{
    if (bin_w__tree_begin(w, w->treeset, BIN_WK_TREESET))
        return 0;
    return bin_w_treeset_begin_slow(w);
}

static inline __attribute__((always_inline)) int bin_w_tree_end(bin_writer *w)
{
    if (w->vmode == BIN_WM_COUNT) {
        bin_wframe *f = w->top;
        if (f->kind == BIN_WK_TREESET || (f->kind == BIN_WK_TREEMAP && !(f->count & 1))) {
            bin_w__st32(w->out->p + f->start + BIN_HDR_LEN + 1,
                    f->kind == BIN_WK_TREEMAP ? f->count / 2 : f->count);
            f->kind = BIN_OBJ;
            return bin_w_obj_end(w);
        }
    }
    return bin_w_tree_end_slow(w);
}

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
