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
 * A decoded record is one allocation (struct, arrays, then strings).  The
 * registry's versions of a type are headers over arrays they share (see
 * "the registry" below), immutable once published; merges publish a new
 * version and chain the old one so pointers handed out earlier stay valid
 * until bin_registry_free.  Decoding and merging are linear in the record
 * (hash indexes, no rescans) and bounded by BIN_MAX_TYPE_* (binary.h).
 */
#include "binary/binary_int.h"

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
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

/* ---- position indexes -------------------------------------------------
 *
 * Open addressing over positions in an array of entries (slot = pos + 1,
 * 0 = empty, load <= 1/2).  The key is a NUL-terminated name or an int at
 * `off` bytes into entries of `stride` bytes, so one helper serves fields,
 * schemas and enum values, registered or in the request being merged.
 * These make decoding and merging linear: every "seen before?" is one probe,
 * never a rescan of what came earlier.
 */

#define IX_NONE UINT32_MAX

typedef struct ix { uint32_t *v; uint32_t cap; } ix;

static uint32_t h_name(const char *s, size_t len)
{
    uint32_t h = 0x811C9DC5u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 0x01000193u;
    return (uint32_t)em_mix64(h);
}

static uint32_t h_int(int32_t v) { return (uint32_t)em_mix64((uint32_t)v); }

static const char *ent_name(const void *base, size_t stride, size_t off, uint32_t pos)
{
    const char *s;
    memcpy(&s, (const uint8_t *)base + (size_t)pos * stride + off, sizeof s);
    return s;
}

static int32_t ent_int(const void *base, size_t stride, size_t off, uint32_t pos)
{
    int32_t v;
    memcpy(&v, (const uint8_t *)base + (size_t)pos * stride + off, sizeof v);
    return v;
}

/* ix_name: the position of the entry named s (len bytes, no NUL inside), or
 * IX_NONE with *slot (if not NULL) set to where it would go. */
static uint32_t ix_name(const ix *x, const void *base, size_t stride, size_t off,
                        const char *s, size_t len, uint32_t **slot)
{
    if (slot)
        *slot = NULL;
    if (!x->cap)
        return IX_NONE;
    for (uint32_t i = h_name(s, len) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        uint32_t v = x->v[i];
        if (!v) {
            if (slot)
                *slot = &x->v[i];
            return IX_NONE;
        }
        const char *e = ent_name(base, stride, off, v - 1);
        if (strncmp(e, s, len) == 0 && e[len] == 0)
            return v - 1;
    }
}

static uint32_t ix_int(const ix *x, const void *base, size_t stride, size_t off, int32_t key,
                       uint32_t **slot)
{
    if (slot)
        *slot = NULL;
    if (!x->cap)
        return IX_NONE;
    for (uint32_t i = h_int(key) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        uint32_t v = x->v[i];
        if (!v) {
            if (slot)
                *slot = &x->v[i];
            return IX_NONE;
        }
        if (ent_int(base, stride, off, v - 1) == key)
            return v - 1;
    }
}

/* ix_reserve makes room for `need` entries in all, rehashing the present
 * ones (whose keys are read from base).  Failing leaves x as it was. */
static int ix_reserve(ix *x, uint32_t need, const void *base, size_t stride, size_t off,
                      int is_name)
{
    if ((uint64_t)need * 2 <= x->cap)
        return 0;
    uint32_t nc = x->cap ? x->cap : 16;
    while ((uint64_t)nc < (uint64_t)need * 2)
        nc *= 2;
    uint32_t *nv = em_calloc(nc, sizeof *nv);
    if (!nv)
        return EM_NOMEM;
    for (uint32_t i = 0; i < x->cap; i++) {
        uint32_t v = x->v[i];
        if (!v)
            continue;
        uint32_t h;
        if (is_name) {
            const char *e = ent_name(base, stride, off, v - 1);
            h = h_name(e, strlen(e));
        } else {
            h = h_int(ent_int(base, stride, off, v - 1));
        }
        uint32_t j = h & (nc - 1);
        while (nv[j])
            j = (j + 1) & (nc - 1);
        nv[j] = v;
    }
    em_free(x->v);
    x->v = nv;
    x->cap = nc;
    return 0;
}

static void ix_free(ix *x)
{
    em_free(x->v);
    x->v = NULL;
    x->cap = 0;
}

#define FSTR sizeof(bin_field_meta), offsetof(bin_field_meta, name)
#define SINT sizeof(bin_schema), offsetof(bin_schema, id)
#define ESTR sizeof(bin_enum_val), offsetof(bin_enum_val, name)
#define EINT sizeof(bin_enum_val), offsetof(bin_enum_val, ordinal)

/* ---- the registry ----
 *
 * Per type id a tstore holds what all versions of the type share:
 * append-only arrays of fields, schemas and enum values (a version reads
 * the first n of each, which never change once written), indexes over them
 * for merging, and the bytes of names and schema field ids.  An array that
 * fills up is copied into a larger one; the old one stays (older versions
 * point into it) until bin_registry_free.  Versions themselves are headers.
 *
 * Why not free old versions: bin_registry_get hands out pointers that
 * readers keep without a reference or lock (the writer, the reader, the
 * public API, GET_BINARY_TYPE), so no point is known where a version is
 * unreferenced.  Sharing makes keeping them cheap instead: a type's memory
 * is linear in its fields, schemas and enum values, however many puts
 * built it (BIN_MAX_TYPE_* bound those), plus one header per version (at
 * most one version per added item).
 *
 * Merges into one type take its mutex; the registry's write lock is held
 * only to add a tstore or to publish a version (one pointer), so a big put
 * never stalls lookups of other types, or of this one.
 */

typedef struct tchunk { struct tchunk *next; } tchunk;   /* data follows */

typedef struct tstore {
    int32_t type_id;
    pthread_mutex_t mu;            /* serialises merges into this type */
    bin_type *cur;                 /* newest version; set under the registry lock */
    bin_field_meta *f; uint32_t nf, capf;
    bin_schema *s;     uint32_t ns, caps;
    bin_enum_val *e;   uint32_t ne, cape;
    ix fx, sx, enx, eox;           /* field name, schema id, enum name, enum ordinal */
    void **old; uint32_t nold, capold;   /* outgrown arrays older versions read */
    tchunk *mem;                   /* names and field ids, one chunk per version */
    size_t bytes;                  /* what mem holds (BIN_MAX_TYPE_BYTES) */
} tstore;

typedef struct name_ent {
    uint64_t key;          /* platform << 32 | (uint32_t)type id; 0 slot = empty if name NULL */
    char *name;
    size_t len;
} name_ent;

struct bin_registry {
    pthread_rwlock_t lock;
    tstore **types;        /* open addressing by type id, linear probing */
    uint32_t tcap, tcount;
    name_ent *names;
    uint32_t ncap, ncount;
    struct bin_desc_tab *descs;   /* writer descriptors (writer.c) */
};

static inline uint32_t slot_of(uint64_t key, uint32_t cap)
{
    return (uint32_t)em_mix64(key) & (cap - 1);
}

static tstore **type_slot(tstore **tab, uint32_t cap, int32_t id)
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
    tstore **n = em_calloc(nc, sizeof *n);
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

static void tstore_free(tstore *ts)
{
    bin_type *v = ts->cur;
    while (v) {
        bin_type *o = v->older;
        em_free(v);
        v = o;
    }
    em_free(ts->f);
    em_free(ts->s);
    em_free(ts->e);
    for (uint32_t i = 0; i < ts->nold; i++)
        em_free(ts->old[i]);
    em_free(ts->old);
    ix_free(&ts->fx);
    ix_free(&ts->sx);
    ix_free(&ts->enx);
    ix_free(&ts->eox);
    while (ts->mem) {
        tchunk *n = ts->mem->next;
        em_free(ts->mem);
        ts->mem = n;
    }
    pthread_mutex_destroy(&ts->mu);
    em_free(ts);
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
        if (r->types[i])
            tstore_free(r->types[i]);
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
    if (r->tcap) {
        tstore *ts = *type_slot(r->types, r->tcap, type_id);
        if (ts)
            t = ts->cur;
    }
    pthread_rwlock_unlock(&r->lock);
    return t;
}

/* store_of finds or adds the tstore of a type id (an empty one has no
 * version yet, so lookups still miss it). */
static int store_of(bin_registry *r, int32_t id, tstore **out)
{
    tstore *ts = NULL;
    pthread_rwlock_rdlock(&r->lock);
    if (r->tcap)
        ts = *type_slot(r->types, r->tcap, id);
    pthread_rwlock_unlock(&r->lock);
    if (ts) {
        *out = ts;
        return 0;
    }
    int rc = 0;
    pthread_rwlock_wrlock(&r->lock);
    if ((rc = types_grow(r)))
        goto done;
    tstore **slot = type_slot(r->types, r->tcap, id);
    if (!*slot) {
        if (!(ts = em_calloc(1, sizeof *ts))) {
            rc = EM_NOMEM;
            goto done;
        }
        ts->type_id = id;
        pthread_mutex_init(&ts->mu, NULL);
        *slot = ts;
        r->tcount++;
    }
    *out = *slot;
done:
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

/* grow_arr: a larger copy of *arr when n more entries do not fit; the old
 * array goes to *fresh_old for the caller to retire once it commits. */
static int grow_arr(void *arr, uint32_t len, uint32_t cap, uint32_t more, size_t esz,
                    void **fresh, uint32_t *fresh_cap)
{
    *fresh = NULL;
    if ((uint64_t)len + more <= cap)
        return 0;
    uint64_t nc = cap ? cap : 8;
    while (nc < (uint64_t)len + more)
        nc *= 2;
    void *n = em_malloc((size_t)nc * esz);
    if (!n)
        return EM_NOMEM;
    if (len)
        memcpy(n, arr, (size_t)len * esz);
    *fresh = n;
    *fresh_cap = (uint32_t)nc;
    return 0;
}

/* The new items of one put, as positions in its bin_type. */
typedef struct delta {
    uint32_t *fl, nfl, *sl, nsl, *el, nel;
    int new_aff;
    size_t bytes;            /* names and field ids to store */
} delta;

/* diff finds what t adds to ts under Ignite's merge rules, checking every
 * conflict first so nothing is written unless the whole put is accepted.
 * Items t repeats are kept once (request-local indexes). */
static int diff(const tstore *ts, const bin_type *t, delta *d)
{
    const bin_type *cur = ts->cur;
    const char *name = t->name ? t->name : "";
    memset(d, 0, sizeof *d);
    if (cur && (strcmp(cur->name, name) != 0 || !cur->is_enum != !t->is_enum))
        return EM_TYPECONFLICT;
    if (t->affinity_field) {
        if (!cur || !cur->affinity_field)
            d->new_aff = 1;
        else if (strcmp(cur->affinity_field, t->affinity_field) != 0)
            return EM_TYPECONFLICT;
    }
    if (t->nfields > BIN_MAX_TYPE_FIELDS || t->nschemas > BIN_MAX_TYPE_SCHEMAS ||
        t->nenums > BIN_MAX_TYPE_ENUMS)
        return EM_LIMIT;
    size_t total = (size_t)t->nfields + t->nschemas + t->nenums;
    ix tf = {0}, tsx = {0}, ten = {0}, teo = {0};
    uint32_t *slot, *slot2;
    int rc = 0;
    if (total) {
        if (!(d->fl = em_malloc(total * sizeof *d->fl)))
            return EM_NOMEM;
        d->sl = d->fl + t->nfields;
        d->el = d->sl + t->nschemas;
    }
    if ((rc = ix_reserve(&tf, t->nfields, NULL, FSTR, 1)) ||
        (rc = ix_reserve(&tsx, t->nschemas, NULL, SINT, 0)) ||
        (rc = ix_reserve(&ten, t->nenums, NULL, ESTR, 1)) ||
        (rc = ix_reserve(&teo, t->nenums, NULL, EINT, 0)))
        goto out;
    for (uint32_t i = 0; i < t->nfields; i++) {
        const bin_field_meta *sf = &t->fields[i];
        size_t len = strlen(sf->name);
        const bin_field_meta *have;
        uint32_t p = ix_name(&ts->fx, ts->f, FSTR, sf->name, len, NULL);
        if (p != IX_NONE) {
            have = &ts->f[p];
        } else if ((p = ix_name(&tf, t->fields, FSTR, sf->name, len, &slot)) != IX_NONE) {
            have = &t->fields[p];
        } else {
            *slot = i + 1;
            d->fl[d->nfl++] = i;
            d->bytes += len + 1;
            continue;
        }
        if (have->type_code != sf->type_code) {
            rc = EM_FIELDTYPE;
            goto out;
        }
    }
    for (uint32_t i = 0; i < t->nschemas; i++) {
        int32_t id = t->schemas[i].id;
        if (ix_int(&ts->sx, ts->s, SINT, id, NULL) != IX_NONE ||
            ix_int(&tsx, t->schemas, SINT, id, &slot) != IX_NONE)
            continue;
        *slot = i + 1;
        d->sl[d->nsl++] = i;
        d->bytes += (size_t)t->schemas[i].nfields * 4;
    }
    /* An enum value must match the registered one of its name and of its
     * ordinal, or be new in both. */
    for (uint32_t i = 0; i < t->nenums; i++) {
        const bin_enum_val *ev = &t->enums[i];
        size_t len = strlen(ev->name);
        uint32_t pn = ix_name(&ts->enx, ts->e, ESTR, ev->name, len, NULL);
        uint32_t po = ix_int(&ts->eox, ts->e, EINT, ev->ordinal, NULL);
        if (pn == IX_NONE && po == IX_NONE) {
            pn = ix_name(&ten, t->enums, ESTR, ev->name, len, &slot);
            po = ix_int(&teo, t->enums, EINT, ev->ordinal, &slot2);
            if (pn == IX_NONE && po == IX_NONE) {
                *slot = i + 1;
                *slot2 = i + 1;
                d->el[d->nel++] = i;
                d->bytes += len + 1;
                continue;
            }
        }
        if (pn != po) {
            rc = EM_TYPECONFLICT;
            goto out;
        }
    }
    if (!cur)
        d->bytes += strlen(name) + 1;
    if (d->new_aff)
        d->bytes += strlen(t->affinity_field) + 1;
    if (ts->nf + d->nfl > BIN_MAX_TYPE_FIELDS || ts->ns + d->nsl > BIN_MAX_TYPE_SCHEMAS ||
        ts->ne + d->nel > BIN_MAX_TYPE_ENUMS || ts->bytes + d->bytes > BIN_MAX_TYPE_BYTES)
        rc = EM_LIMIT;
out:
    ix_free(&tf);
    ix_free(&tsx);
    ix_free(&ten);
    ix_free(&teo);
    if (rc) {
        em_free(d->fl);
        d->fl = NULL;
    }
    return rc;
}

/* retire keeps an outgrown array (room was reserved in commit). */
static void retire(tstore *ts, void *arr)
{
    if (arr)
        ts->old[ts->nold++] = arr;
}

/* commit appends d's items to ts and builds the version that shows them.
 * Every allocation comes first, so a failure changes nothing. */
static int commit(tstore *ts, const bin_type *t, const delta *d, bin_type **out)
{
    void *nf = NULL, *ns = NULL, *ne = NULL;
    uint32_t cf = 0, cs = 0, ce = 0;
    tchunk *ch = NULL;
    bin_type *v = NULL;
    int rc;
    if ((rc = grow_arr(ts->f, ts->nf, ts->capf, d->nfl, sizeof *ts->f, &nf, &cf)) ||
        (rc = grow_arr(ts->s, ts->ns, ts->caps, d->nsl, sizeof *ts->s, &ns, &cs)) ||
        (rc = grow_arr(ts->e, ts->ne, ts->cape, d->nel, sizeof *ts->e, &ne, &ce)))
        goto fail;
    uint32_t nold = (nf != NULL) + (ns != NULL) + (ne != NULL);
    if (ts->nold + nold > ts->capold) {
        uint32_t c = ts->capold ? ts->capold * 2 : 16;
        void **o = em_realloc(ts->old, (size_t)c * sizeof *o);
        if (!o) {
            rc = EM_NOMEM;
            goto fail;
        }
        ts->old = o;
        ts->capold = c;
    }
    /* Index capacity: rehashing reads keys from the arrays as they are. */
    if ((rc = ix_reserve(&ts->fx, ts->nf + d->nfl, ts->f, FSTR, 1)) ||
        (rc = ix_reserve(&ts->sx, ts->ns + d->nsl, ts->s, SINT, 0)) ||
        (rc = ix_reserve(&ts->enx, ts->ne + d->nel, ts->e, ESTR, 1)) ||
        (rc = ix_reserve(&ts->eox, ts->ne + d->nel, ts->e, EINT, 0)))
        goto fail;
    if (d->bytes && !(ch = em_malloc(sizeof *ch + d->bytes))) {
        rc = EM_NOMEM;
        goto fail;
    }
    if (!(v = em_malloc(sizeof *v))) {
        rc = EM_NOMEM;
        goto fail;
    }

    /* From here nothing fails. */
    if (nf) { retire(ts, ts->f); ts->f = nf; ts->capf = cf; }
    if (ns) { retire(ts, ts->s); ts->s = ns; ts->caps = cs; }
    if (ne) { retire(ts, ts->e); ts->e = ne; ts->cape = ce; }
    uint8_t *m = NULL;
    if (ch) {
        ch->next = ts->mem;
        ts->mem = ch;
        ts->bytes += d->bytes;
        m = (uint8_t *)(ch + 1);
    }
    uint32_t *slot;
    /* Field ids first: the chunk's start is aligned for them. */
    for (uint32_t k = 0; k < d->nsl; k++) {
        const bin_schema *ss = &t->schemas[d->sl[k]];
        int32_t *ids = (int32_t *)(void *)m;
        if (ss->nfields) {          /* m is NULL when nothing needs bytes */
            memcpy(ids, ss->fids, (size_t)ss->nfields * 4);
            m += (size_t)ss->nfields * 4;
        }
        ix_int(&ts->sx, ts->s, SINT, ss->id, &slot);
        ts->s[ts->ns] = (bin_schema){ss->id, ss->nfields, ids};
        *slot = ++ts->ns;
    }
#define KEEP_STR(dst, src) do { size_t l_ = strlen(src) + 1; memcpy(m, (src), l_); \
                                (dst) = (const char *)m; m += l_; } while (0)
    for (uint32_t k = 0; k < d->nfl; k++) {
        const bin_field_meta *sf = &t->fields[d->fl[k]];
        bin_field_meta *df = &ts->f[ts->nf];
        KEEP_STR(df->name, sf->name);
        df->id = sf->id;
        df->type_code = sf->type_code;
        ix_name(&ts->fx, ts->f, FSTR, df->name, strlen(df->name), &slot);
        *slot = ++ts->nf;
    }
    for (uint32_t k = 0; k < d->nel; k++) {
        const bin_enum_val *se = &t->enums[d->el[k]];
        bin_enum_val *de = &ts->e[ts->ne];
        KEEP_STR(de->name, se->name);
        de->ordinal = se->ordinal;
        ix_name(&ts->enx, ts->e, ESTR, de->name, strlen(de->name), &slot);
        *slot = ts->ne + 1;
        ix_int(&ts->eox, ts->e, EINT, de->ordinal, &slot);
        *slot = ++ts->ne;
    }
    const bin_type *cur = ts->cur;
    memset(v, 0, sizeof *v);
    v->type_id = ts->type_id;
    if (cur)
        v->name = cur->name;
    else
        KEEP_STR(v->name, t->name ? t->name : "");
    v->affinity_field = cur ? cur->affinity_field : NULL;
    if (d->new_aff)
        KEEP_STR(v->affinity_field, t->affinity_field);
#undef KEEP_STR
    v->is_enum = cur ? cur->is_enum : t->is_enum != 0;
    v->nfields = ts->nf;
    v->nschemas = ts->ns;
    v->nenums = ts->ne;
    v->fields = ts->f;
    v->schemas = ts->s;
    v->enums = ts->e;
    v->older = ts->cur;
    *out = v;
    return 0;
fail:
    em_free(nf);
    em_free(ns);
    em_free(ne);
    em_free(ch);
    return rc;
}

int bin_registry_put(bin_registry *r, const bin_type *t, const bin_type **out)
{
    tstore *ts;
    int rc = store_of(r, t->type_id, &ts);
    if (rc)
        return rc;
    pthread_mutex_lock(&ts->mu);
    delta d;
    const bin_type *res = ts->cur;
    rc = diff(ts, t, &d);
    if (!rc && (!ts->cur || d.new_aff || d.nfl || d.nsl || d.nel)) {
        bin_type *v = NULL;     /* set by commit when it returns 0 */
        rc = commit(ts, t, &d, &v);
        if (!rc) {
            pthread_rwlock_wrlock(&r->lock);
            ts->cur = v;
            pthread_rwlock_unlock(&r->lock);
            res = v;
        }
    }
    em_free(d.fl);              /* NULL after a failed diff */
    pthread_mutex_unlock(&ts->mu);
    if (!rc && out)
        *out = res;
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

int bin_registry_each(bin_registry *r, int (*type)(void *arg, const bin_type *t),
                      int (*name)(void *arg, uint8_t platform, int32_t type_id,
                                  const char *s, size_t len),
                      void *arg)
{
    int rc = 0;
    pthread_rwlock_rdlock(&r->lock);
    for (uint32_t i = 0; i < r->tcap && !rc; i++)
        if (r->types[i] && r->types[i]->cur)
            rc = type(arg, r->types[i]->cur);
    for (uint32_t i = 0; i < r->ncap && !rc; i++)
        if (r->names[i].name)
            rc = name(arg, (uint8_t)(r->names[i].key >> 32), (int32_t)(uint32_t)r->names[i].key,
                      r->names[i].name, r->names[i].len);
    pthread_rwlock_unlock(&r->lock);
    return rc;
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

/* rd_count: a count of items of at least min_each bytes, at most max (a
 * BIN_MAX_TYPE_* bound, checked before anything is allocated for them). */
static int rd_count(rd *r, uint32_t *out, size_t min_each, uint32_t max)
{
    int32_t v;
    int rc = rd_int(r, &v);
    if (rc)
        return rc;
    if (v < 0 || (size_t)v > (r->n - r->i) / min_each)
        return v < 0 ? EM_BADLEN : EM_TRUNCATED;
    if ((uint32_t)v > max)
        return EM_LIMIT;
    *out = (uint32_t)v;
    return 0;
}

/* no_dup_fields: EM_BADSCHEMA if two fields of t share a name; one index
 * probe per field. */
static int no_dup_fields(const bin_type *t)
{
    ix x = {0};
    int rc = ix_reserve(&x, t->nfields, NULL, FSTR, 1);
    for (uint32_t i = 0; !rc && i < t->nfields; i++) {
        uint32_t *slot;
        const char *n = t->fields[i].name;
        if (ix_name(&x, t->fields, FSTR, n, strlen(n), &slot) != IX_NONE)
            rc = EM_BADSCHEMA;
        else
            *slot = i + 1;
    }
    ix_free(&x);
    return rc;
}

int bin_meta_decode(const uint8_t *p, size_t n, bin_type **out, size_t *used)
{
    rd r = {p, n, 0};
    draft d;
    memset(&d, 0, sizeof d);
    uint32_t cnt;
    int rc;
    if ((rc = rd_int(&r, &d.type_id)) || (rc = rd_str(&r, &d.name, 0)) ||
        (rc = rd_str(&r, &d.aff, 1)) || (rc = rd_count(&r, &cnt, 13, BIN_MAX_TYPE_FIELDS)))
        goto fail;
    for (uint32_t i = 0; i < cnt; i++) {
        dstr fname;
        int32_t code, id;
        if ((rc = rd_str(&r, &fname, 0)) || (rc = rd_int(&r, &code)) || (rc = rd_int(&r, &id)))
            goto fail;
        if ((rc = d_add_field(&d, fname, id, code)))
            goto fail;
    }
    if (r.i >= r.n) {
        rc = EM_TRUNCATED;
        goto fail;
    }
    d.is_enum = r.p[r.i++] != 0;
    if (d.is_enum) {
        if ((rc = rd_count(&r, &cnt, 9, BIN_MAX_TYPE_ENUMS)))
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
    if ((rc = rd_count(&r, &cnt, 8, BIN_MAX_TYPE_SCHEMAS)))
        goto fail;
    for (uint32_t i = 0; i < cnt; i++) {
        int32_t sid;
        uint32_t nf;
        if ((rc = rd_int(&r, &sid)) || (rc = rd_count(&r, &nf, 4, BIN_MAX_TYPE_FIELDS)))
            goto fail;
        if ((rc = d_add_schema(&d, sid, nf, r.p + r.i)))
            goto fail;
        r.i += (size_t)nf * 4;
    }
    bin_type *t = pack(&d);
    draft_free(&d);
    if (!t)
        return EM_NOMEM;
    if ((rc = no_dup_fields(t))) {
        bin_type_free(t);           /* one name twice in one record */
        return rc;
    }
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
