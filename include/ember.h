/* ember.h - the public C API of libember: an embedded ember node.
 *
 * Names: ember_* (public), with the opaque handles below.  Errors: int, 0 = OK,
 * negative = failure; ember_strerror() explains any code.  Returned pointers
 * state their lifetime in their doc comment.
 *
 * Sections: 1. basics  2. binary objects (build and read)  3. node and caches.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. basics -------------------------------------------------------- */

/* ember_strerror: a static message for any code ember returns. */
const char *ember_strerror(int code);

/* ---- 2. binary objects ------------------------------------------------ */
/* (owned by src/binary/; implemented in src/binary/bin_public.c)
 *
 * Values are data objects in Ignite's binary format (type code byte, then
 * the payload; reference/ignite-thin-protocol.md §3).  Build them with an
 * ember_writer into its reused buffer; read them in place with the
 * ember_read_* functions after ember_validate accepted them.  Pointers
 * returned by readers point into the caller's bytes.
 *
 * Complex objects (103) belong to types defined once in an ember_types
 * registry: ember_type_define builds the type's descriptor, which every
 * write then reuses (nothing is rebuilt per object). */

enum {
    EMBER_T_BYTE = 1, EMBER_T_SHORT = 2, EMBER_T_INT = 3, EMBER_T_LONG = 4,
    EMBER_T_FLOAT = 5, EMBER_T_DOUBLE = 6, EMBER_T_CHAR = 7, EMBER_T_BOOL = 8,
    EMBER_T_STRING = 9, EMBER_T_UUID = 10, EMBER_T_DATE = 11,
    EMBER_T_BYTE_ARR = 12, EMBER_T_SHORT_ARR = 13, EMBER_T_INT_ARR = 14,
    EMBER_T_LONG_ARR = 15, EMBER_T_FLOAT_ARR = 16, EMBER_T_DOUBLE_ARR = 17,
    EMBER_T_CHAR_ARR = 18, EMBER_T_BOOL_ARR = 19, EMBER_T_STRING_ARR = 20,
    EMBER_T_UUID_ARR = 21, EMBER_T_DATE_ARR = 22, EMBER_T_OBJ_ARR = 23,
    EMBER_T_COLLECTION = 24, EMBER_T_MAP = 25, EMBER_T_WRAPPED = 27, EMBER_T_ENUM = 28,
    EMBER_T_ENUM_ARR = 29, EMBER_T_DECIMAL = 30, EMBER_T_DECIMAL_ARR = 31,
    EMBER_T_TIMESTAMP = 33, EMBER_T_TIMESTAMP_ARR = 34, EMBER_T_TIME = 36,
    EMBER_T_TIME_ARR = 37, EMBER_T_BINARY_ENUM = 38, EMBER_T_NULL = 101,
    EMBER_T_HANDLE = 102, EMBER_T_OBJ = 103
};
/* Collection and map subtypes (hints for Java readers). */
enum { EMBER_ARRAY_LIST = 1, EMBER_LINKED_LIST = 2, EMBER_HASH_SET = 3,
       EMBER_LINKED_HASH_SET = 4, EMBER_HASH_MAP = 1, EMBER_LINKED_HASH_MAP = 2 };

typedef struct ember_types ember_types;     /* type registry, thread-safe */
typedef struct ember_type ember_type;       /* one defined type */
typedef struct ember_writer ember_writer;   /* object builder, one thread */

/* ember_types_new: a registry with the predefined BinaryTreeMap/TreeSet. */
ember_types *ember_types_new(void);
void ember_types_free(ember_types *t);

/* ember_type_define defines (or extends, with Ignite's merge rules) type
 * `name` whose fields have the given names and type codes.  *out is valid
 * until ember_types_free; defining the same fields again returns the same
 * pointer.  A field whose type code changes is rejected. */
int ember_type_define(ember_types *t, const char *name, const char *const *fields,
                      const int *codes, unsigned n, const ember_type **out);
/* ember_type_id: Ignite's type id (hash of the lower-cased name). */
int32_t ember_type_id(const ember_type *type);
/* ember_field_id: Ignite's field id of a field name. */
int32_t ember_field_id(const char *name);

/* ember_writer_new: a builder over registry t (which must outlive it). */
ember_writer *ember_writer_new(ember_types *t);
void ember_writer_free(ember_writer *w);
/* ember_writer_start begins a new top-level value (the buffer is reused). */
void ember_writer_start(ember_writer *w);
/* ember_writer_finish: the first error of the value, or 0 with its bytes,
 * valid until the next ember_writer_start or ember_writer_free. */
int ember_writer_finish(ember_writer *w, const uint8_t **data, size_t *len);

/* Scalars.  Inside an object, name each value first (ember_write_field). */
int ember_write_byte(ember_writer *w, int8_t v);
int ember_write_short(ember_writer *w, int16_t v);
int ember_write_int(ember_writer *w, int32_t v);
int ember_write_long(ember_writer *w, int64_t v);
int ember_write_float(ember_writer *w, float v);
int ember_write_double(ember_writer *w, double v);
int ember_write_char(ember_writer *w, uint16_t v);
int ember_write_bool(ember_writer *w, int v);
int ember_write_string(ember_writer *w, const char *utf8, size_t len);
int ember_write_uuid(ember_writer *w, uint64_t msb, uint64_t lsb);
int ember_write_date(ember_writer *w, int64_t ms);
int ember_write_timestamp(ember_writer *w, int64_t ms, int32_t nanos);
int ember_write_time(ember_writer *w, int64_t ms);
int ember_write_decimal(ember_writer *w, int32_t scale, const uint8_t *magnitude, uint32_t len);
int ember_write_enum(ember_writer *w, int32_t type_id, int32_t ordinal);
int ember_write_null(ember_writer *w);
/* primitive arrays: code EMBER_T_BYTE_ARR..EMBER_T_BOOL_ARR, packed LE elements */
int ember_write_array(ember_writer *w, int code, const void *elems, uint32_t count);

/* Objects: begin, then (field name, value) pairs, then end. */
int ember_begin_object(ember_writer *w, const ember_type *type);
int ember_write_field(ember_writer *w, const char *name);
int ember_write_field_idx(ember_writer *w, unsigned idx);   /* index in the definition */
int ember_end_object(ember_writer *w);
/* Containers: the values written until ember_end are the elements (a map
 * takes key, value, key, value ...).  ember_begin_array: object array of
 * element type id (-1 = java.lang.Object). */
int ember_begin_collection(ember_writer *w, int subtype);
int ember_begin_map(ember_writer *w, int subtype);
int ember_begin_array(ember_writer *w, int32_t elem_type_id);
int ember_end(ember_writer *w);
/* java.util.TreeMap / TreeSet as Ignite writes them (BinaryTreeMap/Set). */
int ember_begin_treemap(ember_writer *w);
int ember_begin_treeset(ember_writer *w);
int ember_end_tree(ember_writer *w);

/* Reading.  ember_validate checks untrusted bytes (lengths, offsets, depth,
 * handles, UTF-8, forbidden types); every other reader assumes it passed. */
int ember_validate(const uint8_t *p, size_t n, size_t *len);
/* ember_resolve follows handles and 27 wrappers to the value they denote. */
const uint8_t *ember_resolve(const uint8_t *v);
/* ember_value_type: the type code of v (after ember_resolve). */
int ember_value_type(const uint8_t *v);
/* ember_read_field: the value of a named field of object obj (needs the
 * type's schemas from t for compact footers).  EMBER_ENOFIELD if absent. */
int ember_read_field(ember_types *t, const uint8_t *obj, const char *name, const uint8_t **val);
int ember_read_field_id(ember_types *t, const uint8_t *obj, int32_t field_id,
                        const uint8_t **val);
int ember_read_long(const uint8_t *v, int64_t *out);     /* byte/short/int/long/char */
int ember_read_double(const uint8_t *v, double *out);    /* float/double */
int ember_read_bool(const uint8_t *v, int *out);
int ember_read_string(const uint8_t *v, const char **utf8, size_t *len);

/* ember_iter walks an object's fields or a container's items without
 * allocating; its contents are private. */
typedef struct ember_iter { uint64_t priv[8]; } ember_iter;
int ember_fields_begin(ember_iter *it, ember_types *t, const uint8_t *obj);
/* ember_fields_next: 1 and the next field, or 0 at the end. */
int ember_fields_next(ember_iter *it, int32_t *field_id, const uint8_t **val);
/* ember_items_begin: arrays, collections, maps (key, value alternating) and
 * tree maps/sets; *count = elements (pairs for maps).  For primitive arrays
 * each item points at the packed element bytes. */
int ember_items_begin(ember_iter *it, const uint8_t *v, uint32_t *count);
int ember_items_next(ember_iter *it, const uint8_t **item);

enum { EMBER_ENOFIELD = -30020, EMBER_ETRUNCATED = -30010, EMBER_EFORBIDDEN = -30012 };

/* ---- 3. node and caches ----------------------------------------------- */
/* (owned by src/store/; implemented in src/store/store_api.c over store.h)
 *
 * Keys and values are data objects in Ignite's binary format (e.g. an int key
 * is the 5 bytes 03 + little-endian int32).  Keys are compared by their
 * normalised bytes, so an int 1 and a long 1 are different keys.  Every
 * function is thread-safe.  Error codes of interest: EMBER_ENOCACHE (cache
 * missing or destroyed), EMBER_ECACHEEXISTS, EMBER_EMEMLIMIT (memory limit
 * reached and the cache may not evict). */

enum {
    EMBER_ENOMEM = -30001, EMBER_EINVAL = -30002,
    EMBER_ENOCACHE = -30100, EMBER_ECACHEEXISTS = -30101, EMBER_EMEMLIMIT = -30103
};

typedef struct ember_node ember_node;
typedef struct ember_cache ember_cache;

/* ember_buf: a growable byte buffer that reads append into.  Reuse it (set
 * len = 0 between reads) and a steady-state read allocates nothing.  Start
 * it zeroed; release with ember_buf_free. */
typedef struct ember_buf {
    uint8_t *data;
    size_t   len;
    size_t   cap;
} ember_buf;
void ember_buf_free(ember_buf *b);

typedef struct ember_node_config {
    uint64_t max_memory;   /* bytes of entries (the default data region); 0 = unlimited */
    int      eviction;     /* 1: evict (random-2-LRU) when full; 0: writes fail */
} ember_node_config;

/* ember_node_open starts an embedded node (cfg NULL = no limit).
 * ember_node_close frees it and every cache; no call may be in flight. */
int  ember_node_open(ember_node **out, const ember_node_config *cfg);
void ember_node_close(ember_node *n);

/* Expiry durations in ms: -1 eternal, -2 unchanged, 0 expire at once. */
typedef struct ember_expiry {
    int64_t create_ms, update_ms, access_ms;
} ember_expiry;

typedef struct ember_cache_options {
    uint32_t partitions;          /* 0 = 1024 */
    int      no_eviction;         /* 1: never evict this cache's entries */
    const ember_expiry *expiry;   /* cache-wide expiry policy; NULL = eternal */
} ember_cache_options;

/* Caches are named; the returned handle stays valid until ember_node_close
 * (after a destroy, calls on it return EMBER_ENOCACHE).  opt may be NULL. */
int ember_cache_create(ember_node *n, const char *name, const ember_cache_options *opt,
                       ember_cache **out);
int ember_cache_get_or_create(ember_node *n, const char *name, const ember_cache_options *opt,
                              ember_cache **out);
ember_cache *ember_cache_get(ember_node *n, const char *name);   /* NULL if none */
int ember_cache_destroy(ember_node *n, const char *name);

/* Key-value operations.  Reads append the value to *out and set *found
 * (0 and nothing appended when the key is absent). */
int ember_put(ember_cache *c, const void *key, size_t klen, const void *val, size_t vlen);
int ember_get(ember_cache *c, const void *key, size_t klen, ember_buf *out, int *found);
int ember_contains(ember_cache *c, const void *key, size_t klen, int *found);
int ember_remove(ember_cache *c, const void *key, size_t klen, int *removed);
int ember_get_and_put(ember_cache *c, const void *key, size_t klen, const void *val,
                      size_t vlen, ember_buf *out, int *found);
int ember_get_and_remove(ember_cache *c, const void *key, size_t klen, ember_buf *out,
                         int *found);
int ember_put_if_absent(ember_cache *c, const void *key, size_t klen, const void *val,
                        size_t vlen, int *stored);
int ember_replace(ember_cache *c, const void *key, size_t klen, const void *val,
                  size_t vlen, int *replaced);
int ember_replace_if_equals(ember_cache *c, const void *key, size_t klen, const void *expect,
                            size_t elen, const void *val, size_t vlen, int *replaced);
int ember_remove_if_equals(ember_cache *c, const void *key, size_t klen, const void *expect,
                           size_t elen, int *removed);
/* ember_put_expiring: a put with its own expiry policy (overrides the cache's). */
int ember_put_expiring(ember_cache *c, const void *key, size_t klen, const void *val,
                       size_t vlen, const ember_expiry *expiry);
int ember_clear(ember_cache *c);
int ember_size(ember_cache *c, int64_t *size);

/* ember_scan calls fn for every entry (part < 0: all partitions, else that
 * one); bytes are valid during the call only.  A nonzero return from fn
 * stops the scan and is returned. */
typedef int (*ember_entry_fn)(void *arg, const uint8_t *key, size_t klen,
                              const uint8_t *val, size_t vlen);
int ember_scan(ember_cache *c, int32_t part, ember_entry_fn fn, void *arg);

typedef struct ember_cache_stats {
    uint64_t entries, mem_bytes, evictions, expirations, puts, gets, hits, removals;
} ember_cache_stats;
void ember_cache_stats_get(ember_cache *c, ember_cache_stats *out);

/* ember_expire_tick reclaims up to budget expired entries (expired entries
 * are invisible at once; this only returns their memory early). */
int ember_expire_tick(ember_node *n, uint32_t budget);

#ifdef __cplusplus
}
#endif
#endif
