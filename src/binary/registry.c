/* registry.c - the binary type registry, Ignite's metadata merge rules, the
 * metadata record codec (reference §2.6) and the type-name map (ops
 * 3000/3001).  Identifier algorithms: reference §3.3.
 *
 * Metadata record (PUT_BINARY_TYPE body, GET_BINARY_TYPE reply after bool):
 *   int type id | typed string name | typed string or null affinity field |
 *   int nfields | nfields x (typed string name, int type code, int field id) |
 *   bool is_enum | [int n, n x (typed string name, int ordinal)] |
 *   int nschemas | nschemas x (int schema id, int n, n x int field id)
 *
 * Each bin_type version is one allocation (struct, arrays, then strings),
 * immutable once published; merges publish a new version and chain the old
 * one so pointers handed out earlier stay valid until bin_registry_free.
 */
#include "binary/binary_int.h"

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <pthread.h>
#include <string.h>

/* ---- identifiers ---- */

int32_t bin_type_id(const char *name, size_t len)
{
    return em_hash_java_str_lower((const uint8_t *)name, len);
}

int32_t bin_field_id(const char *name, size_t len)
{
    return em_hash_java_str_lower((const uint8_t *)name, len);
}

int32_t bin_schema_id(const int32_t *fids, uint32_t n)
{
    if (n == 0)
        return 0;
    uint32_t s = 0x811C9DC5u;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t f = (uint32_t)fids[i];
        s = (s ^ (f & 0xFF)) * 0x01000193u;
        s = (s ^ ((f >> 8) & 0xFF)) * 0x01000193u;
        s = (s ^ ((f >> 16) & 0xFF)) * 0x01000193u;
        s = (s ^ (f >> 24)) * 0x01000193u;
    }
    return (int32_t)s;
}

/* ---- drafts: a type under construction, pointing into its sources ---- */

typedef struct dstr { const char *p; size_t len; } dstr;
typedef struct dfield { dstr name; int32_t id, code; } dfield;
typedef struct dschema { int32_t id; uint32_t n; const uint8_t *fids; } dschema;  /* LE ints */
typedef struct denum { dstr name; int32_t ordinal; } denum;

typedef struct draft {
    int32_t type_id;
    dstr name, aff;          /* aff.p NULL = no affinity field */
    int is_enum;
    dfield *f;  uint32_t nf, capf;
    dschema *s; uint32_t ns, caps;
    denum *e;   uint32_t ne, cape;
} draft;

static void draft_free(draft *d)
{
    em_free(d->f);
    em_free(d->s);
    em_free(d->e);
}

static int grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint32_t nc = *cap ? *cap * 2 : 8;
    while (nc < need)
        nc *= 2;
    void *n = em_realloc(*arr, (size_t)nc * elem);
    if (!n)
        return EM_NOMEM;
    *arr = n;
    *cap = nc;
    return 0;
}

static int d_add_field(draft *d, dstr name, int32_t id, int32_t code)
{
    if (grow((void **)&d->f, &d->capf, d->nf + 1, sizeof *d->f))
        return EM_NOMEM;
    d->f[d->nf++] = (dfield){name, id, code};
    return 0;
}

static int d_add_schema(draft *d, int32_t id, uint32_t n, const uint8_t *fids)
{
    if (grow((void **)&d->s, &d->caps, d->ns + 1, sizeof *d->s))
        return EM_NOMEM;
    d->s[d->ns++] = (dschema){id, n, fids};
    return 0;
}

static int d_add_enum(draft *d, dstr name, int32_t ordinal)
{
    if (grow((void **)&d->e, &d->cape, d->ne + 1, sizeof *d->e))
        return EM_NOMEM;
    d->e[d->ne++] = (denum){name, ordinal};
    return 0;
}

static dstr cstr(const char *s) { return (dstr){s, s ? strlen(s) : 0}; }
static int dstr_eq(dstr a, dstr b) { return a.len == b.len && memcmp(a.p, b.p, a.len) == 0; }

static int draft_from_type(draft *d, const bin_type *t)
{
    memset(d, 0, sizeof *d);
    d->type_id = t->type_id;
    d->name = cstr(t->name);
    d->aff = cstr(t->affinity_field);
    d->is_enum = t->is_enum;
    int rc = 0;
    for (uint32_t i = 0; i < t->nfields && !rc; i++)
        rc = d_add_field(d, cstr(t->fields[i].name), t->fields[i].id, t->fields[i].type_code);
    for (uint32_t i = 0; i < t->nschemas && !rc; i++)
        rc = d_add_schema(d, t->schemas[i].id, t->schemas[i].nfields,
                          (const uint8_t *)t->schemas[i].fids);
    for (uint32_t i = 0; i < t->nenums && !rc; i++)
        rc = d_add_enum(d, cstr(t->enums[i].name), t->enums[i].ordinal);
    return rc;
}

/* pack copies a draft into one block laid out as: bin_type, fields,
 * schemas, enums, field-id arrays, then NUL-terminated strings. */
static bin_type *pack(const draft *d)
{
    size_t sz = sizeof(bin_type) + d->nf * sizeof(bin_field_meta) +
                d->ns * sizeof(bin_schema) + d->ne * sizeof(bin_enum_val);
    for (uint32_t i = 0; i < d->ns; i++)
        sz += (size_t)d->s[i].n * 4;
    sz += d->name.len + 1 + (d->aff.p ? d->aff.len + 1 : 0);
    for (uint32_t i = 0; i < d->nf; i++)
        sz += d->f[i].name.len + 1;
    for (uint32_t i = 0; i < d->ne; i++)
        sz += d->e[i].name.len + 1;
    uint8_t *m = em_malloc(sz);
    if (!m)
        return NULL;
    bin_type *t = (bin_type *)m;
    bin_field_meta *f = (bin_field_meta *)(t + 1);
    bin_schema *s = (bin_schema *)(f + d->nf);
    bin_enum_val *e = (bin_enum_val *)(s + d->ns);
    int32_t *ids = (int32_t *)(e + d->ne);
    for (uint32_t i = 0; i < d->ns; i++)
        ids += d->s[i].n;
    char *str = (char *)ids;
#define PUT_STR(dst, ds) do { memcpy(str, (ds).p, (ds).len); str[(ds).len] = 0; \
                              (dst) = str; str += (ds).len + 1; } while (0)
    memset(t, 0, sizeof *t);
    t->type_id = d->type_id;
    PUT_STR(t->name, d->name);
    if (d->aff.p)
        PUT_STR(t->affinity_field, d->aff);
    t->is_enum = d->is_enum;
    t->nfields = d->nf;
    t->nschemas = d->ns;
    t->nenums = d->ne;
    t->fields = f;
    t->schemas = s;
    t->enums = e;
    for (uint32_t i = 0; i < d->nf; i++) {
        PUT_STR(f[i].name, d->f[i].name);
        f[i].id = d->f[i].id;
        f[i].type_code = d->f[i].code;
    }
    ids = (int32_t *)(e + d->ne);
    for (uint32_t i = 0; i < d->ns; i++) {
        s[i].id = d->s[i].id;
        s[i].nfields = d->s[i].n;
        s[i].fids = ids;
        for (uint32_t k = 0; k < d->s[i].n; k++)
            ids[k] = (int32_t)em_ld32(d->s[i].fids + 4 * k);
        ids += d->s[i].n;
    }
    for (uint32_t i = 0; i < d->ne; i++) {
        PUT_STR(e[i].name, d->e[i].name);
        e[i].ordinal = d->e[i].ordinal;
    }
#undef PUT_STR
    return t;
}

void bin_type_free(bin_type *t)
{
    while (t) {
        bin_type *o = t->older;
        em_free(t);
        t = o;
    }
}

/* merge adds src's fields, schemas and enum values to d (Ignite's rules).
 * *changed is set when d grew. */
static int merge(draft *d, const bin_type *src, int *changed)
{
    dstr sname = cstr(src->name), saff = cstr(src->affinity_field);
    if (!dstr_eq(d->name, sname) || d->is_enum != src->is_enum)
        return EM_TYPECONFLICT;
    if (saff.p) {
        if (!d->aff.p) {
            d->aff = saff;
            *changed = 1;
        } else if (!dstr_eq(d->aff, saff)) {
            return EM_TYPECONFLICT;
        }
    }
    int rc;
    for (uint32_t i = 0; i < src->nfields; i++) {
        const bin_field_meta *sf = &src->fields[i];
        dstr n = cstr(sf->name);
        uint32_t k;
        for (k = 0; k < d->nf; k++)
            if (dstr_eq(d->f[k].name, n))
                break;
        if (k < d->nf) {
            if (d->f[k].code != sf->type_code)
                return EM_FIELDTYPE;
            continue;
        }
        if ((rc = d_add_field(d, n, sf->id, sf->type_code)))
            return rc;
        *changed = 1;
    }
    for (uint32_t i = 0; i < src->nschemas; i++) {
        uint32_t k;
        for (k = 0; k < d->ns; k++)
            if (d->s[k].id == src->schemas[i].id)
                break;
        if (k < d->ns)
            continue;
        if ((rc = d_add_schema(d, src->schemas[i].id, src->schemas[i].nfields,
                               (const uint8_t *)src->schemas[i].fids)))
            return rc;
        *changed = 1;
    }
    for (uint32_t i = 0; i < src->nenums; i++) {
        dstr n = cstr(src->enums[i].name);
        int32_t o = src->enums[i].ordinal;
        uint32_t k;
        for (k = 0; k < d->ne; k++)
            if (dstr_eq(d->e[k].name, n) || d->e[k].ordinal == o)
                break;
        if (k < d->ne) {
            if (!dstr_eq(d->e[k].name, n) || d->e[k].ordinal != o)
                return EM_TYPECONFLICT;
            continue;
        }
        if ((rc = d_add_enum(d, n, o)))
            return rc;
        *changed = 1;
    }
    return 0;
}

/* ---- the registry ---- */

typedef struct name_ent {
    uint64_t key;          /* platform << 32 | (uint32_t)type id; 0 slot = empty if name NULL */
    char *name;
    size_t len;
} name_ent;

struct bin_registry {
    pthread_rwlock_t lock;
    bin_type **types;      /* open addressing by type id, linear probing */
    uint32_t tcap, tcount;
    name_ent *names;
    uint32_t ncap, ncount;
    struct bin_desc_tab *descs;   /* writer descriptors (writer.c) */
};

static inline uint32_t slot_of(uint64_t key, uint32_t cap)
{
    return (uint32_t)em_mix64(key) & (cap - 1);
}

static bin_type **type_slot(bin_type **tab, uint32_t cap, int32_t id)
{
    uint32_t i = slot_of((uint32_t)id, cap);
    while (tab[i] && tab[i]->type_id != id)
        i = (i + 1) & (cap - 1);
    return &tab[i];
}

static int types_grow(bin_registry *r)
{
    if ((r->tcount + 1) * 2 <= r->tcap)
        return 0;
    uint32_t nc = r->tcap ? r->tcap * 2 : 64;
    bin_type **n = em_calloc(nc, sizeof *n);
    if (!n)
        return EM_NOMEM;
    for (uint32_t i = 0; i < r->tcap; i++)
        if (r->types[i])
            *type_slot(n, nc, r->types[i]->type_id) = r->types[i];
    em_free(r->types);
    r->types = n;
    r->tcap = nc;
    return 0;
}

void bin_desc_tab_free(struct bin_desc_tab *t);
int  bin_predefined_init(bin_registry *r);

bin_registry *bin_registry_new(void)
{
    bin_registry *r = em_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_rwlock_init(&r->lock, NULL);
    if (bin_predefined_init(r)) {
        bin_registry_free(r);
        return NULL;
    }
    return r;
}

void bin_registry_free(bin_registry *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->tcap; i++)
        bin_type_free(r->types[i]);
    em_free(r->types);
    for (uint32_t i = 0; i < r->ncap; i++)
        em_free(r->names[i].name);
    em_free(r->names);
    bin_desc_tab_free(r->descs);
    pthread_rwlock_destroy(&r->lock);
    em_free(r);
}

struct bin_desc_tab **bin_registry_desc_tab(bin_registry *r);
struct bin_desc_tab **bin_registry_desc_tab(bin_registry *r)
{
    return &r->descs;
}

void bin_registry_wrlock(bin_registry *r, int lock);
void bin_registry_wrlock(bin_registry *r, int lock)
{
    if (lock)
        pthread_rwlock_wrlock(&r->lock);
    else
        pthread_rwlock_unlock(&r->lock);
}
void bin_registry_rdlock(bin_registry *r);
void bin_registry_rdlock(bin_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
}

const bin_type *bin_registry_get(bin_registry *r, int32_t type_id)
{
    const bin_type *t = NULL;
    pthread_rwlock_rdlock(&r->lock);
    if (r->tcap)
        t = *type_slot(r->types, r->tcap, type_id);
    pthread_rwlock_unlock(&r->lock);
    return t;
}

int bin_registry_put(bin_registry *r, const bin_type *t, const bin_type **out)
{
    draft d;
    int changed = 0, rc;
    pthread_rwlock_wrlock(&r->lock);
    if ((rc = types_grow(r)))
        goto done;
    bin_type **slot = type_slot(r->types, r->tcap, t->type_id);
    bin_type *cur = *slot;
    if (cur) {
        rc = draft_from_type(&d, cur);
        if (!rc)
            rc = merge(&d, t, &changed);
    } else {
        memset(&d, 0, sizeof d);
        d.type_id = t->type_id;
        d.name = cstr(t->name);
        d.is_enum = t->is_enum;
        rc = merge(&d, t, &changed);
        changed = 1;
    }
    if (!rc && changed) {
        bin_type *nt = pack(&d);
        if (!nt) {
            rc = EM_NOMEM;
        } else {
            nt->older = cur;
            *slot = nt;
            if (!cur)
                r->tcount++;
            cur = nt;
        }
    }
    draft_free(&d);
    if (!rc && out)
        *out = cur;
done:
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

const bin_schema *bin_type_schema(const bin_type *t, int32_t schema_id)
{
    /* Newest schemas are the likeliest; types rarely have more than a few. */
    for (uint32_t i = t->nschemas; i-- > 0;)
        if (t->schemas[i].id == schema_id)
            return &t->schemas[i];
    return NULL;
}

const bin_field_meta *bin_type_field(const bin_type *t, int32_t field_id)
{
    for (uint32_t i = 0; i < t->nfields; i++)
        if (t->fields[i].id == field_id)
            return &t->fields[i];
    return NULL;
}

/* ---- type-name map ---- */

static name_ent *name_slot(name_ent *tab, uint32_t cap, uint64_t key)
{
    uint32_t i = slot_of(key, cap);
    while (tab[i].name && tab[i].key != key)
        i = (i + 1) & (cap - 1);
    return &tab[i];
}

int bin_registry_name_put(bin_registry *r, uint8_t platform, int32_t type_id,
                          const char *name, size_t len)
{
    uint64_t key = (uint64_t)platform << 32 | (uint32_t)type_id;
    int rc = 0;
    pthread_rwlock_wrlock(&r->lock);
    if ((r->ncount + 1) * 2 > r->ncap) {
        uint32_t nc = r->ncap ? r->ncap * 2 : 64;
        name_ent *n = em_calloc(nc, sizeof *n);
        if (!n) {
            rc = EM_NOMEM;
            goto done;
        }
        for (uint32_t i = 0; i < r->ncap; i++)
            if (r->names[i].name)
                *name_slot(n, nc, r->names[i].key) = r->names[i];
        em_free(r->names);
        r->names = n;
        r->ncap = nc;
    }
    name_ent *e = name_slot(r->names, r->ncap, key);
    if (e->name) {
        if (e->len != len || memcmp(e->name, name, len) != 0)
            rc = EM_TYPECONFLICT;
        goto done;
    }
    if (!(e->name = em_strndup(name, len))) {
        rc = EM_NOMEM;
        goto done;
    }
    e->key = key;
    e->len = len;
    r->ncount++;
done:
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

const char *bin_registry_name_get(bin_registry *r, uint8_t platform, int32_t type_id,
                                  size_t *len)
{
    uint64_t key = (uint64_t)platform << 32 | (uint32_t)type_id;
    const char *s = NULL;
    pthread_rwlock_rdlock(&r->lock);
    if (r->ncap) {
        name_ent *e = name_slot(r->names, r->ncap, key);
        if (e->name) {
            s = e->name;
            if (len)
                *len = e->len;
        }
    }
    pthread_rwlock_unlock(&r->lock);
    return s;
}

/* ---- metadata record codec ---- */

typedef struct rd { const uint8_t *p; size_t n, i; } rd;

static int rd_int(rd *r, int32_t *v)
{
    if (r->n - r->i < 4)
        return EM_TRUNCATED;
    *v = (int32_t)em_ld32(r->p + r->i);
    r->i += 4;
    return 0;
}

/* typed string: 9 + len + UTF-8, or 101 if nullable */
static int rd_str(rd *r, dstr *s, int nullable)
{
    if (r->i >= r->n)
        return EM_TRUNCATED;
    uint8_t c = r->p[r->i++];
    if (c == BIN_NULL && nullable) {
        s->p = NULL;
        s->len = 0;
        return 0;
    }
    if (c != BIN_STRING)
        return EM_BADTYPE;
    int32_t len;
    int rc = rd_int(r, &len);
    if (rc)
        return rc;
    if (len < 0)
        return EM_BADLEN;
    if ((size_t)len > r->n - r->i)
        return EM_TRUNCATED;
    if (!bin_utf8_ok(r->p + r->i, (size_t)len) || memchr(r->p + r->i, 0, (size_t)len))
        return EM_BADUTF8;
    s->p = (const char *)r->p + r->i;
    s->len = (size_t)len;
    r->i += (size_t)len;
    return 0;
}

static int rd_count(rd *r, uint32_t *out, size_t min_each)
{
    int32_t v;
    int rc = rd_int(r, &v);
    if (rc)
        return rc;
    if (v < 0 || (size_t)v > (r->n - r->i) / min_each)
        return v < 0 ? EM_BADLEN : EM_TRUNCATED;
    *out = (uint32_t)v;
    return 0;
}

int bin_meta_decode(const uint8_t *p, size_t n, bin_type **out, size_t *used)
{
    rd r = {p, n, 0};
    draft d;
    memset(&d, 0, sizeof d);
    uint32_t cnt;
    int rc;
    if ((rc = rd_int(&r, &d.type_id)) || (rc = rd_str(&r, &d.name, 0)) ||
        (rc = rd_str(&r, &d.aff, 1)) || (rc = rd_count(&r, &cnt, 13)))
        goto fail;
    for (uint32_t i = 0; i < cnt; i++) {
        dstr fname;
        int32_t code, id;
        if ((rc = rd_str(&r, &fname, 0)) || (rc = rd_int(&r, &code)) || (rc = rd_int(&r, &id)))
            goto fail;
        for (uint32_t k = 0; k < d.nf; k++)
            if (dstr_eq(d.f[k].name, fname)) {
                rc = EM_BADSCHEMA;          /* one name twice in one record */
                goto fail;
            }
        if ((rc = d_add_field(&d, fname, id, code)))
            goto fail;
    }
    if (r.i >= r.n) {
        rc = EM_TRUNCATED;
        goto fail;
    }
    d.is_enum = r.p[r.i++] != 0;
    if (d.is_enum) {
        if ((rc = rd_count(&r, &cnt, 9)))
            goto fail;
        for (uint32_t i = 0; i < cnt; i++) {
            dstr en;
            int32_t ord;
            if ((rc = rd_str(&r, &en, 0)) || (rc = rd_int(&r, &ord)))
                goto fail;
            if ((rc = d_add_enum(&d, en, ord)))
                goto fail;
        }
    }
    if ((rc = rd_count(&r, &cnt, 8)))
        goto fail;
    for (uint32_t i = 0; i < cnt; i++) {
        int32_t sid;
        uint32_t nf;
        if ((rc = rd_int(&r, &sid)) || (rc = rd_count(&r, &nf, 4)))
            goto fail;
        if ((rc = d_add_schema(&d, sid, nf, r.p + r.i)))
            goto fail;
        r.i += (size_t)nf * 4;
    }
    bin_type *t = pack(&d);
    draft_free(&d);
    if (!t)
        return EM_NOMEM;
    *out = t;
    if (used)
        *used = r.i;
    return 0;
fail:
    draft_free(&d);
    return rc;
}

static int put_str(em_buf *b, const char *s)
{
    if (!s)
        return em_buf_put_u8(b, BIN_NULL);
    size_t l = strlen(s);
    int rc = em_buf_put_u8(b, BIN_STRING);
    if (!rc) rc = em_buf_put_le32(b, (uint32_t)l);
    if (!rc) rc = em_buf_append(b, s, l);
    return rc;
}

int bin_meta_encode(const bin_type *t, em_buf *b)
{
    int rc = em_buf_put_le32(b, (uint32_t)t->type_id);
    if (!rc) rc = put_str(b, t->name);
    if (!rc) rc = put_str(b, t->affinity_field);
    if (!rc) rc = em_buf_put_le32(b, t->nfields);
    for (uint32_t i = 0; i < t->nfields && !rc; i++) {
        rc = put_str(b, t->fields[i].name);
        if (!rc) rc = em_buf_put_le32(b, (uint32_t)t->fields[i].type_code);
        if (!rc) rc = em_buf_put_le32(b, (uint32_t)t->fields[i].id);
    }
    if (!rc) rc = em_buf_put_u8(b, t->is_enum ? 1 : 0);
    if (!rc && t->is_enum) {
        rc = em_buf_put_le32(b, t->nenums);
        for (uint32_t i = 0; i < t->nenums && !rc; i++) {
            rc = put_str(b, t->enums[i].name);
            if (!rc) rc = em_buf_put_le32(b, (uint32_t)t->enums[i].ordinal);
        }
    }
    if (!rc) rc = em_buf_put_le32(b, t->nschemas);
    for (uint32_t i = 0; i < t->nschemas && !rc; i++) {
        rc = em_buf_put_le32(b, (uint32_t)t->schemas[i].id);
        if (!rc) rc = em_buf_put_le32(b, t->schemas[i].nfields);
        if (!rc) rc = em_buf_append(b, t->schemas[i].fids, (size_t)t->schemas[i].nfields * 4);
    }
    return rc;
}
