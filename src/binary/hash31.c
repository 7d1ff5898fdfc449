/* hash31.c - bin_hash31: the complex-object identity hash (reference §3.3,
 * h = 1; h = 31*h + (signed)b), bit-identical to em_hash_bytes31 but
 * vectorised, because every object write and key normalisation hashes a
 * whole data region (the M1 toBinary rows are dominated by it).
 *
 * Unrolled, the hash of n bytes is 31^n + sum_k b_k * 31^(n-1-k) (mod 2^32):
 * no dependency chain, just a dot product with a weight table.  Each 32-bit
 * weight w = H*65536 + L is split so that 16-bit multiply-adds (vpmaddwd)
 * compute it: b*w = b*L + (b*H << 16) mod 2^32, with L taken as signed 16
 * bits and the error term of a "negative" L folded into H.  bin_hash31 uses
 * AVX2 where present; the writer's bin_hash31_after, which may read the 16
 * bytes before its region, uses byte multiply-adds on 128-bit registers
 * (dot_pair_after).  The CPU features are read once at start-up; the scalar
 * loop is the fallback and handles short input.
 */
#include "binary/binary_int.h"

#include "util/hash.h"

enum { HMAX = 4096 };                /* longest region the tables cover */

uint32_t bin_pw31_tab[BIN_PW31_MAX + 1];   /* 31^d mod 2^32 */
#define pw31 bin_pw31_tab
_Static_assert(HMAX == BIN_PW31_MAX, "table sizes");

uint32_t bin_pow31_slow(size_t e)
{
    uint32_t r = 1, b = 31;
    while (e) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static int have_avx2, have_ssse3;
/* Weights by position, reversed: entry j holds the split of 31^(HMAX-1-j),
 * so the bytes of a region of length n use entries HMAX-n .. HMAX-1 in
 * ascending order. */
static int16_t wl[HMAX], wh[HMAX];
/* The same split for dot_pair_after: entry i weighs a pair 31^(2 (PMAX-1-i)). */
enum { PMAX = HMAX / 2 + 8 };
static int16_t pl[PMAX], ph[PMAX];

/* split16: w = H * 65536 + L with L a signed 16-bit value. */
static void split16(uint32_t w, int16_t *l, int16_t *h)
{
    uint32_t lo = w & 0xFFFF, hi = w >> 16;
    if (lo >= 0x8000)
        hi += 1;              /* signed L = L - 65536: add 65536*b back via H */
    *l = (int16_t)(uint16_t)lo;
    *h = (int16_t)(uint16_t)hi;
}

__attribute__((constructor)) static void hash31_init(void)
{
    pw31[0] = 1;
    for (int d = 1; d <= HMAX; d++)
        pw31[d] = pw31[d - 1] * 31u;
    for (int j = 0; j < HMAX; j++)
        split16(pw31[HMAX - 1 - j], &wl[j], &wh[j]);
    for (uint32_t i = PMAX, w = 1; i-- > 0; w *= 961u)
        split16(w, &pl[i], &ph[i]);
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
    have_ssse3 = __builtin_cpu_supports("ssse3");
}

/* sum_k b_k * 31^(n-1-k) for n <= HMAX */
__attribute__((target("avx2")))
static uint32_t dot_avx2(const uint8_t *p, size_t n)
{
    const int16_t *l = wl + (HMAX - n), *h = wh + (HMAX - n);
    size_t head = n % 16;
    uint32_t s = 0;
    for (size_t k = 0; k < head; k++)
        s += (uint32_t)(int32_t)(int8_t)p[k] * pw31[n - 1 - k];
    __m256i acc = _mm256_setzero_si256();
    for (size_t k = head; k < n; k += 16) {
        __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + k)));
        __m256i lo = _mm256_madd_epi16(b, _mm256_loadu_si256((const __m256i *)(const void *)(l + k)));
        __m256i hi = _mm256_madd_epi16(b, _mm256_loadu_si256((const __m256i *)(const void *)(h + k)));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(lo, _mm256_slli_epi32(hi, 16)));
    }
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return s + (uint32_t)_mm_cvtsi128_si32(x);
}

/* The writer's variant (bin_hash31_after) may read the 16 bytes before p:
 * the n % 16 leading bytes are then one more 16-byte block, the block
 * ending at p + n % 16 with its bytes before p masked to zero (their
 * weights are never used as anything but a zero product), so there is no
 * byte loop at all. */
static const uint8_t head_mask[32] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};

/* dot_pair_after: the same sum with fewer operations per block.  A byte
 * multiply-add (pmaddubsw, the unsigned weights 31, 1 against the signed
 * bytes) turns each 16 bytes into 8 pair values x = 31 b0 + b1, exact in
 * 16 bits; the pairs are then weighted by 31^(2j) with the split 16-bit
 * weights as above.  Per 16 bytes: one load, one byte multiply-add, two
 * word multiply-adds on 128-bit registers - about half the operations of
 * the 256-bit loop above on a CPU that splits 256-bit operations in two
 * (region of 160 bytes: 23 -> 16 ns here).  Blocks are aligned to the
 * region's end; the first, partial one is the block ending at p + n % 16,
 * its bytes before p masked to zero (all of them when n % 16 is 0, which
 * saves a branch).  Whole blocks go two a step into two pairs of sums
 * (the M1 12-entry TreeMap: -3%).  Its loads read bytes the writer has
 * just stored, and how fast that goes here depended on where the loop
 * lay: the 12-entry TreeMap row moved by 5% with a 16-byte shift of this
 * function and by 40% with every function 64-byte aligned.  Aligned to
 * 64 it measured at the best of those in every build tried.  (The same
 * code VEX-encoded, with no register copies, measured the same.)  Needs
 * 16 readable bytes before p and 16 <= n <= HMAX. */

__attribute__((target("ssse3"), aligned(64)))
static uint32_t dot_pair_after(const uint8_t *p, size_t n)
{
    const __m128i w31 = _mm_set1_epi16(0x011F);       /* bytes 31, 1 */
    const size_t head = n % 16;
    /* the block starting at p + s uses entries from PMAX - (n - s) / 2 on */
    const int16_t *l = pl + PMAX - (n - head) / 2, *h = ph + PMAX - (n - head) / 2;
    /* the partial block, all masked off when head is 0 (no branch) */
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + head - 16));
    v = _mm_and_si128(v, _mm_loadu_si128((const __m128i *)(const void *)(head_mask + head)));
    __m128i x0 = _mm_maddubs_epi16(w31, v);
    __m128i alo = _mm_madd_epi16(x0, _mm_loadu_si128((const __m128i *)(const void *)(l - 8)));
    __m128i ahi = _mm_madd_epi16(x0, _mm_loadu_si128((const __m128i *)(const void *)(h - 8)));
    __m128i blo = _mm_setzero_si128(), bhi = _mm_setzero_si128();
    size_t k = head;
    if ((n / 16) & 1) {                    /* an odd number of whole blocks */
        __m128i x = _mm_maddubs_epi16(w31, _mm_loadu_si128((const __m128i *)(const void *)(p + k)));
        blo = _mm_madd_epi16(x, _mm_loadu_si128((const __m128i *)(const void *)l));
        bhi = _mm_madd_epi16(x, _mm_loadu_si128((const __m128i *)(const void *)h));
        k += 16, l += 8, h += 8;
    }
    /* then two blocks a step into two sums: half the loop overhead, and
     * the two chains of additions overlap */
    for (; k < n; k += 32, l += 16, h += 16) {
        __m128i x = _mm_maddubs_epi16(w31, _mm_loadu_si128((const __m128i *)(const void *)(p + k)));
        __m128i y = _mm_maddubs_epi16(w31, _mm_loadu_si128((const __m128i *)(const void *)(p + k + 16)));
        alo = _mm_add_epi32(alo, _mm_madd_epi16(x, _mm_loadu_si128((const __m128i *)(const void *)l)));
        ahi = _mm_add_epi32(ahi, _mm_madd_epi16(x, _mm_loadu_si128((const __m128i *)(const void *)h)));
        blo = _mm_add_epi32(blo, _mm_madd_epi16(y, _mm_loadu_si128((const __m128i *)(const void *)(l + 8))));
        bhi = _mm_add_epi32(bhi, _mm_madd_epi16(y, _mm_loadu_si128((const __m128i *)(const void *)(h + 8))));
    }
    alo = _mm_add_epi32(alo, blo);
    ahi = _mm_add_epi32(ahi, bhi);
    __m128i x = _mm_add_epi32(alo, _mm_slli_epi32(ahi, 16));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(x);
}

/* sse2_dot: the 4 partial sums of bytes v (sign-extended to 16 bits by
 * unpack + shift) times the split weights l/h (see the top of the file). */
static inline __m128i sse2_dot(__m128i v, const int16_t *l, const int16_t *h)
{
    __m128i b0 = _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8);
    __m128i b1 = _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8);
    __m128i lo = _mm_add_epi32(
        _mm_madd_epi16(b0, _mm_loadu_si128((const __m128i *)(const void *)l)),
        _mm_madd_epi16(b1, _mm_loadu_si128((const __m128i *)(const void *)(l + 8))));
    __m128i hi = _mm_add_epi32(
        _mm_madd_epi16(b0, _mm_loadu_si128((const __m128i *)(const void *)h)),
        _mm_madd_epi16(b1, _mm_loadu_si128((const __m128i *)(const void *)(h + 8))));
    return _mm_add_epi32(lo, _mm_slli_epi32(hi, 16));
}

static inline __m128i sse2_block(const uint8_t *p, const int16_t *l, const int16_t *h)
{
    return sse2_dot(_mm_loadu_si128((const __m128i *)(const void *)p), l, h);
}

int32_t bin_hash31_after(const uint8_t *p, size_t n)
{
    /* Byte loads for short regions: the writer hashes bytes it has just
     * stored in 1-4 byte pieces, and a 16-byte load over several pending
     * stores cannot be forwarded from the store buffer (a stall of more
     * cycles than the scalar loop takes). */
    if (n < 16)
        return em_hash_bytes31_from(1, p, n);
    if (n <= 32) {
        /* most object regions: one or two blocks, SSE2 (always present),
         * no dispatch.  The last 16 bytes take weights 31^15..31^0; for
         * n > 16 the block before them (its bytes before p masked off)
         * takes 31^31..31^16. */
        __m128i x = sse2_block(p + n - 16, wl + (HMAX - 16), wh + (HMAX - 16));
        if (n > 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + n - 32));
            v = _mm_and_si128(v, _mm_loadu_si128((const __m128i *)(const void *)(head_mask + (n - 16))));
            x = _mm_add_epi32(x, sse2_dot(v, wl + (HMAX - 32), wh + (HMAX - 32)));
        }
        x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
        x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
        return (int32_t)(pw31[n] + (uint32_t)_mm_cvtsi128_si32(x));
    }
    if (n > HMAX)
        return bin_hash31(p, n);
    if (!have_ssse3)
        return bin_hash31(p, n);
    return (int32_t)(pw31[n] + dot_pair_after(p, n));
}

int32_t bin_hash31(const uint8_t *p, size_t n)
{
    if (n < 16)
        return em_hash_bytes31_from(1, p, n);    /* short: 4 bytes a step beats table loads */
    if (!have_avx2)
        return em_hash_bytes31_from(1, p, n);
    if (n <= HMAX)
        return (int32_t)(pw31[n] + dot_avx2(p, n));
    /* longer: Horner over the prefix, then the table for the last HMAX */
    uint32_t h = (uint32_t)em_hash_bytes31_from(1, p, n - HMAX);
    return (int32_t)(h * pw31[HMAX] + dot_avx2(p + n - HMAX, HMAX));
}

#else

__attribute__((constructor)) static void hash31_init(void)
{
    pw31[0] = 1;
    for (int d = 1; d <= HMAX; d++)
        pw31[d] = pw31[d - 1] * 31u;
}

int32_t bin_hash31(const uint8_t *p, size_t n)
{
    return em_hash_bytes31_from(1, p, n);
}

int32_t bin_hash31_after(const uint8_t *p, size_t n)
{
    return em_hash_bytes31_from(1, p, n);
}

#endif
