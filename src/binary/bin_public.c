/* bin_public.c - section 2 of include/ember.h (binary objects): the public
 * ember_* builder and reader, thin wrappers over bin_writer, bin_registry
 * and the reader in this module.  Format: reference §3. */
#include "ember.h"

#include "binary/binary_int.h"
#include "util/err.h"
#include "util/mem.h"

#include <string.h>

/* The public handles are the internal structures under other names. */
struct ember_writer {
    bin_writer w;
    em_buf out;
};

_Static_assert(sizeof(bin_fiter) <= sizeof(ember_iter), "ember_iter too small");
_Static_assert(sizeof(bin_seq) <= sizeof(ember_iter), "ember_iter too small");
_Static_assert((int)EMBER_ENOFIELD == (int)EM_NOFIELD &&
               (int)EMBER_ETRUNCATED == (int)EM_TRUNCATED &&
               (int)EMBER_EFORBIDDEN == (int)EM_FORBIDDEN, "public error codes");

#define REG(t) ((bin_registry *)(t))
#define DESC(t) ((const bin_desc *)(t))

ember_types *ember_types_new(void) { return (ember_types *)bin_registry_new(); }
void ember_types_free(ember_types *t) { bin_registry_free(REG(t)); }

int ember_type_define(ember_types *t, const char *name, const char *const *fields,
                      const int *codes, unsigned n, const ember_type **out)
{
    int32_t c[64] = {0}, *cp = n <= 64 ? c : em_malloc((size_t)n * 4);
    if (!cp)
        return EM_NOMEM;
    for (unsigned i = 0; i < n; i++)
        cp[i] = codes[i];
    const bin_desc *d = NULL;
    int rc = bin_registry_define(REG(t), name, fields, cp, n, &d);
    if (cp != c)
        em_free(cp);
    if (!rc)
        *out = (const ember_type *)d;
    return rc;
}

int32_t ember_type_id(const ember_type *type) { return DESC(type)->type_id; }
int32_t ember_field_id(const char *name) { return bin_field_id(name, strlen(name)); }

ember_writer *ember_writer_new(ember_types *t)
{
    ember_writer *w = em_calloc(1, sizeof *w);
    if (w)
        bin_writer_init(&w->w, REG(t), &w->out);
    return w;
}

void ember_writer_free(ember_writer *w)
{
    if (!w)
        return;
    bin_writer_free(&w->w);
    em_buf_free(&w->out);
    em_free(w);
}

void ember_writer_start(ember_writer *w)
{
    em_buf_reset(&w->out);
    bin_writer_reset(&w->w, &w->out);
}

int ember_writer_finish(ember_writer *w, const uint8_t **data, size_t *len)
{
    if (w->w.err)
        return w->w.err;
    if (w->w.depth != 0 || w->out.len == 0)
        return EM_BUILDER;
    *data = w->out.p;
    *len = w->out.len;
    return 0;
}

int ember_write_byte(ember_writer *w, int8_t v) { return bin_w_byte(&w->w, v); }
int ember_write_short(ember_writer *w, int16_t v) { return bin_w_short(&w->w, v); }
int ember_write_int(ember_writer *w, int32_t v) { return bin_w_int(&w->w, v); }
int ember_write_long(ember_writer *w, int64_t v) { return bin_w_long(&w->w, v); }
int ember_write_float(ember_writer *w, float v) { return bin_w_float(&w->w, v); }
int ember_write_double(ember_writer *w, double v) { return bin_w_double(&w->w, v); }
int ember_write_char(ember_writer *w, uint16_t v) { return bin_w_char(&w->w, v); }
int ember_write_bool(ember_writer *w, int v) { return bin_w_bool(&w->w, v); }
int ember_write_string(ember_writer *w, const char *s, size_t len) { return bin_w_string(&w->w, s, len); }
int ember_write_uuid(ember_writer *w, uint64_t msb, uint64_t lsb) { return bin_w_uuid(&w->w, msb, lsb); }
int ember_write_date(ember_writer *w, int64_t ms) { return bin_w_date(&w->w, ms); }
int ember_write_timestamp(ember_writer *w, int64_t ms, int32_t nanos) { return bin_w_timestamp(&w->w, ms, nanos); }
int ember_write_time(ember_writer *w, int64_t ms) { return bin_w_time(&w->w, ms); }
int ember_write_decimal(ember_writer *w, int32_t scale, const uint8_t *mag, uint32_t len)
{
    return bin_w_decimal(&w->w, scale, mag, len);
}
int ember_write_enum(ember_writer *w, int32_t type_id, int32_t ordinal)
{
    return bin_w_binary_enum(&w->w, type_id, ordinal);
}
int ember_write_null(ember_writer *w) { return bin_w_null(&w->w); }
int ember_write_array(ember_writer *w, int code, const void *elems, uint32_t count)
{
    return bin_w_prim_array(&w->w, (uint8_t)code, elems, count);
}

int ember_begin_object(ember_writer *w, const ember_type *t) { return bin_w_obj_begin(&w->w, DESC(t)); }
int ember_write_field(ember_writer *w, const char *name)
{
    return bin_w_field(&w->w, bin_field_id(name, strlen(name)));
}
int ember_write_field_idx(ember_writer *w, unsigned idx) { return bin_w_field_idx(&w->w, idx); }
int ember_end_object(ember_writer *w) { return bin_w_obj_end(&w->w); }
int ember_begin_collection(ember_writer *w, int subtype) { return bin_w_begin(&w->w, BIN_COLLECTION, subtype); }
int ember_begin_map(ember_writer *w, int subtype) { return bin_w_begin(&w->w, BIN_MAP, subtype); }
int ember_begin_array(ember_writer *w, int32_t elem_type_id) { return bin_w_begin(&w->w, BIN_OBJ_ARR, elem_type_id); }
int ember_end(ember_writer *w) { return bin_w_end(&w->w); }
int ember_begin_treemap(ember_writer *w) { return bin_w_treemap_begin(&w->w); }
int ember_begin_treeset(ember_writer *w) { return bin_w_treeset_begin(&w->w); }
int ember_end_tree(ember_writer *w) { return bin_w_tree_end(&w->w); }

int ember_validate(const uint8_t *p, size_t n, size_t *len) { return bin_validate(p, n, len, 0); }
const uint8_t *ember_resolve(const uint8_t *v) { return bin_rd_resolve(v); }
int ember_value_type(const uint8_t *v) { return v[0]; }

int ember_read_field(ember_types *t, const uint8_t *obj, const char *name, const uint8_t **val)
{
    return ember_read_field_id(t, obj, bin_field_id(name, strlen(name)), val);
}

int ember_read_field_id(ember_types *t, const uint8_t *obj, int32_t fid, const uint8_t **val)
{
    obj = bin_rd_resolve(obj);
    if (obj[0] != BIN_OBJ)
        return EM_BADTYPE;
    const bin_type *bt = t ? bin_registry_get(REG(t), bin_rd_type_id(obj)) : NULL;
    return bin_rd_field(obj, bt, fid, val);
}

int ember_read_long(const uint8_t *v, int64_t *out) { return bin_rd_long(v, out); }
int ember_read_double(const uint8_t *v, double *out) { return bin_rd_double(v, out); }
int ember_read_bool(const uint8_t *v, int *out) { return bin_rd_bool(v, out); }
int ember_read_string(const uint8_t *v, const char **s, size_t *len) { return bin_rd_string(v, s, len); }

int ember_fields_begin(ember_iter *it, ember_types *t, const uint8_t *obj)
{
    obj = bin_rd_resolve(obj);
    if (obj[0] != BIN_OBJ)
        return EM_BADTYPE;
    const bin_type *bt = t ? bin_registry_get(REG(t), bin_rd_type_id(obj)) : NULL;
    return bin_fiter_init((bin_fiter *)(void *)it, obj, bt);
}

int ember_fields_next(ember_iter *it, int32_t *field_id, const uint8_t **val)
{
    return bin_fiter_next((bin_fiter *)(void *)it, field_id, val);
}

int ember_items_begin(ember_iter *it, const uint8_t *v, uint32_t *count)
{
    return bin_seq_init((bin_seq *)(void *)it, bin_rd_resolve(v), count);
}

int ember_items_next(ember_iter *it, const uint8_t **item)
{
    return bin_seq_next((bin_seq *)(void *)it, item);
}
