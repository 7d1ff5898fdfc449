/* fuzz_binary.c - libFuzzer target for the binary layer: bin_validate and,
 * on whatever it accepts, every reader (fields, iteration, sequences, raw),
 * bin_key_prepare, bin_value_prepare, bin_hash and bin_wire_out; plus the
 * metadata record codec (bin_meta_decode/encode, registry merge).
 *
 * Input: byte 0 selects the mode (mod 3): 0 = the rest is one data object;
 * 1 = a metadata record, registered, then a data object read with its
 * schemas; 2 = a metadata record only.  Corpus: corpus/fuzz_binary/.
 */
#include "binary/binary.h"
#include "util/mem.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static uint64_t walk(bin_registry *r, const uint8_t *p, unsigned depth)
{
    uint64_t sum = 0;
    if (depth > 100)
        return 0;
    const uint8_t *v = bin_rd_resolve(p);
    sum += v[0];
    if (v[0] == BIN_OBJ) {
        const bin_type *t = bin_registry_get(r, bin_rd_type_id(v));
        bin_fiter it;
        if (bin_fiter_init(&it, v, t) == 0) {
            int32_t fid;
            const uint8_t *fv, *again;
            while (bin_fiter_next(&it, &fid, &fv)) {
                if (bin_rd_field(v, t, fid, &again) == 0)
                    sum += (uint64_t)(again - v);
                sum += walk(r, fv, depth + 1);
            }
        }
        const uint8_t *raw;
        size_t rl;
        bin_rd_raw(v, &raw, &rl);
        sum += rl;
        const uint8_t *fv;
        if (bin_rd_field_name(v, r, "name", 4, &fv) == 0)
            sum += fv[0];
    }
    bin_seq s;
    if (bin_seq_init(&s, v, NULL) == 0) {
        const uint8_t *e;
        while (bin_seq_next(&s, &e))
            sum += s.elem_size ? e[0] : walk(r, e, depth + 1);
    }
    int64_t l;
    double d;
    const char *str;
    size_t sl;
    if (bin_rd_long(v, &l) == 0) sum += (uint64_t)l;
    if (bin_rd_double(v, &d) == 0) sum += d > 0;
    if (bin_rd_string(v, &str, &sl) == 0) sum += sl;
    return sum;
}

static void object(bin_registry *r, const uint8_t *p, size_t n)
{
    size_t len;
    if (bin_validate(p, n, &len, 0) != 0)
        return;
    if (len > n)
        abort();
    /* work on an exact-size copy so any overread is a sanitizer report */
    uint8_t *b = em_malloc(len ? len : 1);
    if (!b)
        return;
    memcpy(b, p, len);
    sink += walk(r, b, 0);
    sink += (uint32_t)bin_hash(b);
    em_buf sc = EM_BUF_INIT, out = EM_BUF_INIT;
    bin_key k;
    if (bin_key_prepare(b, len, &sc, &k) == 0) {
        size_t kl;
        if (bin_validate(k.p, k.len, &kl, 0) != 0 || kl != k.len)
            abort();                      /* a normalised key must stay valid */
        bin_key k2;
        em_buf sc2 = EM_BUF_INIT;
        if (bin_key_prepare(k.p, k.len, &sc2, &k2) != 0 || k2.hash != k.hash ||
            k2.len != k.len || memcmp(k2.p, k.p, k.len) != 0)
            abort();                      /* and normalising is idempotent */
        em_buf_free(&sc2);
    }
    const uint8_t *vp;
    size_t vl;
    if (bin_value_prepare(b, len, &sc, &vp, &vl) == 0) {
        size_t x;
        if (bin_validate(vp, vl, &x, 0) != 0)
            abort();
    }
    if (bin_wire_out(b, len, &out) == 0) {
        size_t x;
        if (bin_validate(out.p, out.len, &x, 0) != 0 || x != out.len)
            abort();
    }
    em_buf_free(&sc);
    em_buf_free(&out);
    em_free(b);
}

static size_t meta(bin_registry *r, const uint8_t *p, size_t n)
{
    bin_type *t;
    size_t used = 0;
    if (bin_meta_decode(p, n, &t, &used) != 0)
        return n;
    em_buf e = EM_BUF_INIT;
    if (bin_meta_encode(t, &e) == 0) {
        bin_type *t2;
        size_t u2;
        if (bin_meta_decode(e.p, e.len, &t2, &u2) != 0 || u2 != e.len)
            abort();                      /* what we encode we can decode */
        bin_type_free(t2);
    }
    const bin_type *m;
    if (bin_registry_put(r, t, &m) == 0) {
        em_buf_reset(&e);
        bin_meta_encode(m, &e);
    }
    em_buf_free(&e);
    bin_type_free(t);
    return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bin_registry *r = bin_registry_new();
    if (!r)
        return 0;
    static const char *const f[] = {"id", "name"};
    static const int32_t c[] = {BIN_INT, BIN_STRING};
    const bin_desc *d;
    bin_registry_define(r, "Person", f, c, 2, &d);
    int mode = data[0] % 3;
    data++;
    size--;
    if (mode == 0) {
        object(r, data, size);
    } else {
        size_t used = meta(r, data, size);
        if (mode == 1 && used < size)
            object(r, data + used, size - used);
    }
    bin_registry_free(r);
    return 0;
}
