/* test_binary_cursor.c - the writer's cursor interface (binary/wcursor.h)
 * against the complete bin_w_* calls: the same random programs of writer
 * calls (mostly valid, some not) run through both must give the same return
 * code at every call and the same bytes; every finished value validates and
 * carries Java's hash in every object header (bin_key_prepare rewrites
 * nothing).  This test found that folding a large object into an enclosing
 * object across an unfinished container (or a tree type's unwritten size)
 * gave that object a wrong hash.  Also: objects larger than the fold threshold inside tree types
 * (their size is folded in as zero and added at the end), and the M1 rows
 * through the cursor allocate nothing, and the public builder
 * (bin_public.c, which runs the cursor over the writer's frames one call at
 * a time) against bin_w_* on the same random programs.  The fixed values of
 * the large-object and M1 tests are also checked against hashes Java
 * computed (java_* below), so a hash that ember's writer and ember's key
 * code get wrong the same way fails. */
#include "test.h"

#include "ember.h"
#include "binary/binary_int.h"
#include "binary/wcursor.h"
#include "util/err.h"
#include "util/mem.h"

enum {
    OP_OBJ, OP_FIELD_IDX, OP_FIELD, OP_INT, OP_STR, OP_LONG, OP_COLL, OP_MAP, OP_OBJARR,
    OP_END, OP_OBJ_END, OP_TMAP, OP_TSET, OP_TREE_END, OP_RAW, OP_NOPS
};

typedef struct prog_op {
    uint8_t op;
    uint32_t arg;
} prog_op;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *const STRS[] = {
    "", "ab", "abcd", "value10", "an 8-byte", "sixteen bytes!!!", "seventeen bytes!!",
    "h\xc3\xa9llo w\xc3\xb6rld", "a string longer than sixteen bytes, to take memcpy"};
#define NSTRS (sizeof STRS / sizeof STRS[0])

typedef struct types {
    bin_registry *reg;
    const bin_desc *d[3];
} types;

static void types_init(types *t)
{
    static const char *const fa[] = {"a", "b", "c", "d"};
    static const int32_t ca[] = {BIN_INT, BIN_STRING, BIN_OBJ, BIN_MAP};
    static const char *const fb[] = {"x"};
    static const int32_t cb[] = {BIN_COLLECTION};
    t->reg = bin_registry_new();
    CHECK_OK(bin_registry_define(t->reg, "CursorA", fa, ca, 4, &t->d[0]));
    CHECK_OK(bin_registry_define(t->reg, "CursorB", fb, cb, 1, &t->d[1]));
    CHECK_OK(bin_registry_define(t->reg, "CursorC", NULL, NULL, 0, &t->d[2]));
}

/* A model of the open frames, so most generated calls are valid. */
typedef struct gen {
    uint8_t kind[40];         /* OP_OBJ / OP_COLL / OP_MAP / OP_OBJARR / OP_TMAP / OP_TSET */
    uint8_t desc[40], next[40], named[40], raw[40];
    int depth;
} gen;

static prog_op gen_op(gen *g, uint64_t *s, const types *t)
{
    prog_op o = {(uint8_t)(rng_next(s) % OP_NOPS), (uint32_t)rng_next(s)};
    if (rng_next(s) % 150 == 0)
        return o;                          /* anything, valid or not */
    int d = g->depth;
    uint8_t k = d ? g->kind[d - 1] : 0xFF;
    int need_name = k == OP_OBJ && !g->raw[d - 1] && !g->named[d - 1];
    uint32_t r = (uint32_t)(rng_next(s) % 16);
    if (need_name) {
        uint8_t di = g->desc[d - 1];
        uint32_t nf = t->d[di]->nfields;
        if (r < 2 || g->next[d - 1] >= nf || d > 30) {
            o.op = (r == 0 && d < 30) ? OP_RAW : OP_OBJ_END;
        } else if (r < 4) {
            o.op = OP_FIELD;               /* by id, possibly out of order */
            o.arg = (uint32_t)t->d[di]->fids[rng_next(s) % nf];
        } else {
            o.op = OP_FIELD_IDX;
            o.arg = g->next[d - 1];
        }
    } else if (d && (d > 30 || r < 3)) {
        o.op = k == OP_OBJ ? OP_OBJ_END : (k == OP_TMAP || k == OP_TSET) ? OP_TREE_END : OP_END;
        if (k == OP_MAP && (o.arg & 1))
            o.op = OP_INT;                 /* finish the pair first */
    } else {
        static const uint8_t vals[] = {OP_INT, OP_INT, OP_STR, OP_STR, OP_STR, OP_LONG, OP_OBJ,
                                       OP_OBJ, OP_COLL, OP_MAP, OP_OBJARR, OP_TMAP, OP_TSET};
        o.op = vals[rng_next(s) % sizeof vals];
        if (o.op == OP_OBJ)
            o.arg = (uint32_t)(rng_next(s) % 3);
    }
    return o;
}

/* gen_apply follows the model when op succeeded. */
static void gen_apply(gen *g, prog_op o, int rc)
{
    if (rc)
        return;
    int d = g->depth;
    if (d && g->kind[d - 1] == OP_OBJ && !g->raw[d - 1] && o.op != OP_FIELD &&
        o.op != OP_FIELD_IDX && o.op != OP_OBJ_END && o.op != OP_RAW)
        g->named[d - 1] = 0;               /* the value took the name */
    switch (o.op) {
    case OP_FIELD_IDX: g->named[d - 1] = 1; g->next[d - 1] = (uint8_t)(o.arg + 1); break;
    case OP_FIELD:     g->named[d - 1] = 1; g->next[d - 1]++; break;
    case OP_RAW:       g->raw[d - 1] = 1; break;
    case OP_OBJ: case OP_COLL: case OP_MAP: case OP_OBJARR: case OP_TMAP: case OP_TSET:
        g->kind[d] = o.op;
        g->desc[d] = (uint8_t)(o.arg % 3);
        g->next[d] = g->named[d] = 0;
        g->raw[d] = o.op == OP_TMAP || o.op == OP_TSET;
        g->depth++;
        break;
    case OP_END: case OP_OBJ_END: case OP_TREE_END:
        g->depth--;
        break;
    default:
        break;
    }
}

static int run_w(bin_writer *w, const types *t, prog_op o)
{
    const char *s = STRS[o.arg % NSTRS];
    switch (o.op) {
    case OP_OBJ:       return bin_w_obj_begin(w, t->d[o.arg % 3]);
    case OP_FIELD_IDX: return bin_w_field_idx(w, o.arg);
    case OP_FIELD:     return bin_w_field(w, (int32_t)o.arg);
    case OP_INT:       return bin_w_int(w, (int32_t)o.arg);
    case OP_STR:       return bin_w_string(w, s, strlen(s));
    case OP_LONG:      return bin_w_long(w, (int64_t)o.arg * 977);
    case OP_COLL:      return bin_w_begin(w, BIN_COLLECTION, (int32_t)(o.arg % 3));
    case OP_MAP:       return bin_w_begin(w, BIN_MAP, 1);
    case OP_OBJARR:    return bin_w_begin(w, BIN_OBJ_ARR, -1);
    case OP_END:       return bin_w_end(w);
    case OP_OBJ_END:   return bin_w_obj_end(w);
    case OP_TMAP:      return bin_w_treemap_begin(w);
    case OP_TSET:      return bin_w_treeset_begin(w);
    case OP_TREE_END:  return bin_w_tree_end(w);
    default:           return bin_w_raw(w);
    }
}

static int run_c(bin_wc *c, const types *t, prog_op o)
{
    const char *s = STRS[o.arg % NSTRS];
    switch (o.op) {
    case OP_OBJ:       return bin_wc_obj_begin(c, t->d[o.arg % 3]);
    case OP_FIELD_IDX: return bin_wc_field_idx(c, o.arg);
    case OP_FIELD:     return bin_wc_field(c, (int32_t)o.arg);
    case OP_INT:       return bin_wc_int(c, (int32_t)o.arg);
    case OP_STR:       return bin_wc_string(c, s, strlen(s));
    case OP_COLL:      return bin_wc_begin(c, BIN_COLLECTION, (int32_t)(o.arg % 3));
    case OP_MAP:       return bin_wc_begin(c, BIN_MAP, 1);
    case OP_OBJARR:    return bin_wc_begin(c, BIN_OBJ_ARR, -1);
    case OP_END:       return bin_wc_end(c);
    case OP_OBJ_END:   return bin_wc_obj_end(c);
    case OP_TMAP:      return bin_wc_treemap_begin(c);
    case OP_TSET:      return bin_wc_treeset_begin(c);
    case OP_TREE_END:  return bin_wc_tree_end(c);
    default: {
        /* calls without a cursor twin: store, call, load */
        bin_wc_store(c);
        int rc = o.op == OP_LONG ? bin_w_long(c->w, (int64_t)o.arg * 977) : bin_w_raw(c->w);
        bin_wc_load(c, c->w);
        return rc;
    }
    }
}

/* Reference values from Java, not from ember.  A throwaway Java 17 program
 * (not kept) built the values of the two tests below from the format
 * reference (ignite-thin-protocol.md §3.2, §3.3) with java.nio.ByteBuffer:
 * type and field ids String.hashCode of the lower-cased names, schema id
 * FNV-1a, compact footer with 1-byte offsets; it found its bytes identical to
 * a dump of what bin_w_* writes here, and hashed each object the way Ignite's
 * BinaryArrayIdentityResolver does, h = 1; h = 31 * h + b over the bytes from
 * 24 to the footer (or the end) as Java's signed bytes with int overflow, and
 * each string with String.hashCode. */
static const struct java_tree {
    uint32_t len;             /* bytes of the whole tree object */
    int32_t tree;             /* its header hash (hashes the objects' headers too) */
    int32_t obj[3];           /* the CursorA objects' header hashes, in order */
} java_tree[2] = {
    {2231, -630593056, {-598891666, -2065632759, 148920496}},   /* BinaryTreeMap */
    {2216, -215757295, {-598891666, -2065632759, 148920496}},   /* BinaryTreeSet */
};
/* String.hashCode of 700, 699 and 698 'x' characters */
static const int32_t java_str_x[3] = {-903790080, -1553175176, 919728896};
/* The two M1 values: CursorB{x = empty ArrayList} and CursorB{x = a
 * BinaryTreeMap of 0..11 -> "value1"/"value11"}, and that tree. */
static const uint32_t java_m1_len[2] = {31, 252};
static const int32_t java_m1_hash[2] = {1574603306, -349014565};
static const int32_t java_m1_tree = 899251660;

/* hdr_hash: the hash stored in the header of the object at p */
static int32_t hdr_hash(const uint8_t *p)
{
    return (int32_t)em_ld32(p + 8);
}

/* run_pub: the public builder's calls; the two without a public twin (a
 * field by id, raw mode) go to its writer directly. */
static int run_pub(ember_writer *pw, const types *t, prog_op o)
{
    const char *s = STRS[o.arg % NSTRS];
    switch (o.op) {
    case OP_OBJ:       return ember_begin_object(pw, (const ember_type *)t->d[o.arg % 3]);
    case OP_FIELD_IDX: return ember_write_field_idx(pw, o.arg);
    case OP_FIELD:     return bin_w_field(&pw->w, (int32_t)o.arg);
    case OP_INT:       return ember_write_int(pw, (int32_t)o.arg);
    case OP_STR:       return ember_write_string(pw, s, strlen(s));
    case OP_LONG:      return ember_write_long(pw, (int64_t)o.arg * 977);
    case OP_COLL:      return ember_begin_collection(pw, (int)(o.arg % 3));
    case OP_MAP:       return ember_begin_map(pw, 1);
    case OP_OBJARR:    return ember_begin_array(pw, -1);
    case OP_END:       return ember_end(pw);
    case OP_OBJ_END:   return ember_end_object(pw);
    case OP_TMAP:      return ember_begin_treemap(pw);
    case OP_TSET:      return ember_begin_treeset(pw);
    case OP_TREE_END:  return ember_end_tree(pw);
    default:           return bin_w_raw(&pw->w);
    }
}

/* every object in the finished value carries Java's hash */
static void check_value(const uint8_t *p, size_t n)
{
    size_t len;
    REQUIRE_OK(bin_validate(p, n, &len, 0));
    CHECK_EQ(len, n);
    em_buf scratch = EM_BUF_INIT;
    bin_key k;
    CHECK_OK(bin_key_prepare(p, n, &scratch, &k));
    CHECK(k.p == p);                       /* no header hash had to be rewritten */
    em_buf_free(&scratch);
}

TEST(binary_cursor_matches_writer_on_random_programs)
{
    types t;
    types_init(&t);
    em_buf a = EM_BUF_INIT, b = EM_BUF_INIT;
    bin_writer wa, wb;
    bin_writer_init(&wa, t.reg, &a);
    bin_writer_init(&wb, t.reg, &b);
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    int finished = 0, failed = 0, all_fast = 0;
    for (int prog = 0; prog < 3000; prog++) {
        /* A third start small (growth on the way) and sync after the
         * complete path; a third start small and never sync (the cursor
         * stays on the complete path once there); a third have room
         * enough that only an error or an uncommon case leaves the fast
         * paths. */
        const int mode = prog % 3;
        em_buf_free(&a);
        em_buf_free(&b);
        if (mode == 2)
            REQUIRE_OK(em_buf_reserve(&b, 1 << 16));
        bin_writer_reset(&wa, &a);
        BIN_WC_DECL(c);
        bin_wc_reset(&c, &wb, &b);
        gen g = {.depth = 0};
        int steps = 1 + (int)(rng_next(&seed) % 200);
        for (int i = 0; i < steps; i++) {
            prog_op o = gen_op(&g, &seed, &t);
            int ra = run_w(&wa, &t, o);
            if (mode == 0 && c.mode == BIN_WM_SLOW)
                bin_wc_sync(&c);
            int rb = run_c(&c, &t, o);
            CHECK_EQ(ra, rb);
            if (ra != rb)
                break;
            gen_apply(&g, o, ra);
            if (ra)
                break;
            if (g.depth == 0 && rng_next(&seed) % 4 == 0)
                break;
        }
        /* close what is open, as a caller would */
        while (!wa.err && wa.depth) {
            uint8_t k = wa.top->kind;
            prog_op o = {k == BIN_OBJ ? OP_OBJ_END : k >= BIN_WK_TREEMAP ? OP_TREE_END : OP_END, 0};
            if (wa.named || (k == BIN_MAP && (wa.top->count & 1)) ||
                (k == BIN_WK_TREEMAP && (wa.top->count & 1)))
                o.op = OP_INT;
            int ra = run_w(&wa, &t, o);
            CHECK_EQ(ra, run_c(&c, &t, o));
        }
        all_fast += c.mode != BIN_WM_SLOW;
        int eb = bin_wc_store(&c);
        CHECK_EQ(wa.err, eb);
        CHECK_EQ(a.len, b.len);
        if (!wa.err) {
            REQUIRE(a.len == b.len);
            CHECK_MEM(a.p, b.p, a.len);
            const uint8_t *p = a.p;
            while (p < a.p + a.len) {      /* top-level values one by one */
                size_t len;
                REQUIRE_OK(bin_validate(p, (size_t)(a.p + a.len - p), &len, 0));
                check_value(p, len);
                p += len;
            }
            finished++;
        } else {
            failed++;
        }
    }
    CHECK(finished > 1000);                /* the generator mostly writes valid values */
    CHECK(failed > 10);                    /* and exercises the errors too */
    CHECK(all_fast > 300);                 /* and ends on the fast paths often (400) */
    bin_writer_free(&wa);
    bin_writer_free(&wb);
    em_buf_free(&a);
    em_buf_free(&b);
    bin_registry_free(t.reg);
}

/* An object above the fold threshold inside a tree type is folded into the
 * tree's hash sum while the tree's size is still unwritten. */
TEST(binary_tree_with_large_objects_keeps_java_hash)
{
    types t;
    types_init(&t);
    em_buf a = EM_BUF_INIT, b = EM_BUF_INIT;
    bin_writer w, wc;
    bin_writer_init(&w, t.reg, &a);
    bin_writer_init(&wc, t.reg, &b);
    char big[700];
    memset(big, 'x', sizeof big);
    for (int set = 0; set < 2; set++) {
        em_buf_reset(&a);
        em_buf_reset(&b);
        bin_writer_reset(&w, &a);
        BIN_WC_DECL(c);
        bin_wc_reset(&c, &wc, &b);
        CHECK_OK(set ? bin_w_treeset_begin(&w) : bin_w_treemap_begin(&w));
        CHECK_OK(set ? bin_wc_treeset_begin(&c) : bin_wc_treemap_begin(&c));
        for (int i = 0; i < 3; i++) {
            if (!set) {
                CHECK_OK(bin_w_int(&w, 300 + i));
                CHECK_OK(bin_wc_int(&c, 300 + i));
            }
            CHECK_OK(bin_w_obj_begin(&w, t.d[0]));
            CHECK_OK(bin_wc_obj_begin(&c, t.d[0]));
            CHECK_OK(bin_w_field_idx(&w, 1));
            CHECK_OK(bin_wc_field_idx(&c, 1));
            CHECK_OK(bin_w_string(&w, big, sizeof big - (size_t)i));
            CHECK_OK(bin_wc_string(&c, big, sizeof big - (size_t)i));
            CHECK_OK(bin_w_obj_end(&w));
            CHECK_OK(bin_wc_obj_end(&c));
        }
        CHECK_OK(bin_w_tree_end(&w));
        CHECK_OK(bin_wc_tree_end(&c));
        CHECK_OK(bin_wc_store(&c));
        REQUIRE_EQ(a.len, b.len);
        CHECK_MEM(a.p, b.p, a.len);
        check_value(a.p, a.len);
        /* against Java: the tree's hash, then each object's after the
         * header (24), the null comparator (1) and the size (4) */
        const struct java_tree *j = &java_tree[set];
        REQUIRE_EQ(a.len, j->len);
        CHECK_EQ(hdr_hash(a.p), j->tree);
        CHECK_EQ(bin_hash(a.p), j->tree);
        size_t q = 29;
        for (int i = 0; i < 3; i++) {
            if (!set)
                q += 5;                    /* the int key */
            REQUIRE(q + 24 < a.len && a.p[q] == BIN_OBJ);
            CHECK_EQ(hdr_hash(a.p + q), j->obj[i]);
            CHECK_EQ(bin_hash(a.p + q + 24), java_str_x[i]);   /* field b */
            q += em_ld32(a.p + q + 12);
        }
        CHECK_EQ(q, a.len);
    }
    bin_writer_free(&w);
    bin_writer_free(&wc);
    em_buf_free(&a);
    em_buf_free(&b);
    bin_registry_free(t.reg);
}

/* The M1 values through the cursor: the same bytes as bin_w_*, and nothing
 * allocated once the buffer has grown. */
TEST(binary_cursor_m1_values_allocate_nothing)
{
    types t;
    types_init(&t);
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, t.reg, &b);
    static const char *const vals[2] = {"value1", "value11"};
    em_mem_stats before = {0, 0, 0};
    for (int i = 0; i < 10000; i++) {
        if (i == 1)
            before = em_mem_thread();
        BIN_WC_DECL(c);
        bin_wc_reset(&c, &w, &b);
        em_buf_reset(&b);
        bin_wc_load(&c, &w);
        bin_wc_obj_begin(&c, t.d[1]);
        bin_wc_field_idx(&c, 0);
        bin_wc_begin(&c, BIN_COLLECTION, 1);
        bin_wc_end(&c);
        bin_wc_obj_end(&c);
        bin_wc_obj_begin(&c, t.d[1]);
        bin_wc_field_idx(&c, 0);
        bin_wc_treemap_begin(&c);
        for (int k = 0; k < 12; k++) {
            bin_wc_int(&c, k);
            bin_wc_string(&c, vals[k & 1], 6 + (size_t)(k & 1));
        }
        bin_wc_tree_end(&c);
        bin_wc_obj_end(&c);
        if (bin_wc_store(&c))
            break;
    }
    em_mem_stats after = em_mem_thread();
    CHECK_OK(w.err);
    CHECK_EQ(after.allocs - before.allocs, 0);
    CHECK_EQ(after.bytes - before.bytes, 0);
    size_t len;
    REQUIRE_OK(bin_validate(b.p, b.len, &len, 0));
    check_value(b.p, len);
    check_value(b.p + len, b.len - len);
    REQUIRE_EQ(len, java_m1_len[0]);
    REQUIRE_EQ(b.len - len, java_m1_len[1]);
    CHECK_EQ(hdr_hash(b.p), java_m1_hash[0]);
    CHECK_EQ(hdr_hash(b.p + len), java_m1_hash[1]);
    CHECK_EQ(hdr_hash(b.p + len + 24), java_m1_tree);    /* field x */
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(t.reg);
}

/* The public builder against bin_w_*: same return code at every call, same
 * bytes, on the generator above (a third of the programs from an empty
 * buffer, so growth happens on the way; the rest with room). */
TEST(binary_public_builder_matches_writer_on_random_programs)
{
    types t;
    types_init(&t);
    em_buf a = EM_BUF_INIT;
    bin_writer wa;
    bin_writer_init(&wa, t.reg, &a);
    ember_writer *pw = ember_writer_new((ember_types *)t.reg);
    REQUIRE(pw);
    uint64_t seed = 0xD1B54A32D192ED03ULL;
    int finished = 0, failed = 0;
    for (int prog = 0; prog < 3000; prog++) {
        em_buf_free(&a);
        em_buf_free(&pw->out);
        if (prog % 3)
            REQUIRE_OK(em_buf_reserve(&pw->out, 1 << 16));
        bin_writer_reset(&wa, &a);
        ember_writer_start(pw);
        gen g = {.depth = 0};
        int steps = 1 + (int)(rng_next(&seed) % 200);
        for (int i = 0; i < steps; i++) {
            prog_op o = gen_op(&g, &seed, &t);
            int ra = run_w(&wa, &t, o);
            int rb = run_pub(pw, &t, o);
            CHECK_EQ(ra, rb);
            if (ra != rb)
                break;
            gen_apply(&g, o, ra);
            if (ra)
                break;
            if (g.depth == 0 && rng_next(&seed) % 4 == 0)
                break;
        }
        while (!wa.err && wa.depth) {
            uint8_t k = wa.top->kind;
            prog_op o = {k == BIN_OBJ ? OP_OBJ_END : k >= BIN_WK_TREEMAP ? OP_TREE_END : OP_END, 0};
            if (wa.named || (k == BIN_MAP && (wa.top->count & 1)) ||
                (k == BIN_WK_TREEMAP && (wa.top->count & 1)))
                o.op = OP_INT;
            int ra = run_w(&wa, &t, o);
            CHECK_EQ(ra, run_pub(pw, &t, o));
        }
        CHECK_EQ(wa.err, pw->w.err);
        CHECK_EQ(wa.depth, pw->w.depth);
        CHECK_EQ(a.len, pw->out.len);
        if (!wa.err) {
            REQUIRE(a.len == pw->out.len);
            CHECK_MEM(a.p, pw->out.p, a.len);
            const uint8_t *v;
            size_t n;
            if (a.len) {
                CHECK_OK(ember_writer_finish(pw, &v, &n));
                CHECK(v == pw->out.p && n == a.len);
            }
            finished++;
        } else {
            const uint8_t *v;
            size_t n;
            CHECK_EQ(ember_writer_finish(pw, &v, &n), wa.err);
            failed++;
        }
    }
    CHECK(finished > 1000);
    CHECK(failed > 10);
    ember_writer_free(pw);
    bin_writer_free(&wa);
    em_buf_free(&a);
    bin_registry_free(t.reg);
}

/* Fields named by index out of declared order (the random programs name
 * by index only in order): the public builder and bin_w_* give the same
 * bytes, with the schema of the order written. */
TEST(binary_public_builder_fields_out_of_order)
{
    types t;
    types_init(&t);
    em_buf a = EM_BUF_INIT;
    bin_writer wa;
    bin_writer_init(&wa, t.reg, &a);
    ember_writer *pw = ember_writer_new((ember_types *)t.reg);
    REQUIRE(pw);
    /* all four fields (the declared schema only when in order), and three */
    static const uint32_t orders[][4] = {{0, 1, 2, 3}, {1, 0, 2, 3}, {3, 2, 1, 0}, {0, 1, 3, 2},
                                         {2, 0, 1, 3}, {1, 0, 3, 9}, {0, 1, 3, 9}};
    for (size_t k = 0; k < sizeof orders / sizeof orders[0]; k++) {
        em_buf_reset(&a);
        bin_writer_reset(&wa, &a);
        ember_writer_start(pw);
        CHECK_OK(bin_w_obj_begin(&wa, t.d[0]));
        CHECK_OK(ember_begin_object(pw, (const ember_type *)t.d[0]));
        for (int i = 0; i < 4 && orders[k][i] != 9; i++) {
            uint32_t idx = orders[k][i];
            CHECK_OK(bin_w_field_idx(&wa, idx));
            CHECK_OK(ember_write_field_idx(pw, idx));
            if (idx == 3) {
                CHECK_OK(bin_w_begin(&wa, BIN_MAP, 1));
                CHECK_OK(ember_begin_map(pw, 1));
                CHECK_OK(bin_w_end(&wa));
                CHECK_OK(ember_end(pw));
            } else {
                CHECK_OK(bin_w_int(&wa, (int32_t)(idx * 7)));
                CHECK_OK(ember_write_int(pw, (int32_t)(idx * 7)));
            }
        }
        CHECK_OK(bin_w_obj_end(&wa));
        CHECK_OK(ember_end_object(pw));
        const uint8_t *v;
        size_t n;
        REQUIRE_OK(ember_writer_finish(pw, &v, &n));
        REQUIRE_EQ(n, a.len);
        CHECK_MEM(v, a.p, n);
        check_value(v, n);
    }
    ember_writer_free(pw);
    bin_writer_free(&wa);
    em_buf_free(&a);
    bin_registry_free(t.reg);
}
