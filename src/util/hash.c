/* hash.c - Java-compatible string/byte hashes and CRC32C (see hash.h).
 *
 * CRC32C uses the SSE4.2 crc32 instruction when the CPU has it (chosen once at
 * first use) and a byte-wise table otherwise; written here rather than taken
 * from a library because zlib only has CRC-32, not the Castagnoli polynomial.
 */
#include "hash.h"

#include <pthread.h>
#include <string.h>

/* Decode one UTF-8 sequence at s[*i]; returns the code point (or the byte
 * itself for malformed input, so hashing never reads past n). */
static uint32_t utf8_next(const uint8_t *s, size_t n, size_t *i)
{
    uint8_t c = s[*i];
    if (c < 0x80) { (*i)++; return c; }
    size_t need = (c >= 0xF0) ? 3 : (c >= 0xE0) ? 2 : (c >= 0xC0) ? 1 : 0;
    if (need == 0 || *i + need >= n) { (*i)++; return c; }
    uint32_t cp = c & (0x3F >> need);
    for (size_t k = 1; k <= need; k++)
        cp = (cp << 6) | (s[*i + k] & 0x3F);
    *i += need + 1;
    return cp;
}

static inline int32_t add_unit(int32_t h, uint32_t u)
{
    return (int32_t)((uint32_t)h * 31u + u);
}

static inline int32_t add_cp(int32_t h, uint32_t cp)
{
    if (cp < 0x10000)
        return add_unit(h, cp);
    cp -= 0x10000;
    h = add_unit(h, 0xD800 + (cp >> 10));
    return add_unit(h, 0xDC00 + (cp & 0x3FF));
}

int32_t em_hash_java_str(const uint8_t *s, size_t n)
{
    int32_t h = 0;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80)
            h = add_unit(h, s[i++]);
        else
            h = add_cp(h, utf8_next(s, n, &i));
    }
    return h;
}

static uint32_t lower(uint32_t cp)
{
    if (cp >= 'A' && cp <= 'Z')
        return cp + 32;
    if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)   /* Latin-1 capitals */
        return cp + 32;
    return cp;
}

int32_t em_hash_java_str_lower(const uint8_t *s, size_t n)
{
    int32_t h = 0;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80)
            h = add_unit(h, lower(s[i++]));
        else
            h = add_cp(h, lower(utf8_next(s, n, &i)));
    }
    return h;
}

int32_t em_hash_bytes31_from(uint32_t h, const uint8_t *p, size_t n)
{
    /* Unrolled by 4: h*31^4 + b0*31^3 + b1*31^2 + b2*31 + b3, all mod 2^32. */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h = h * 923521u
          + (uint32_t)(int32_t)(int8_t)p[i] * 29791u
          + (uint32_t)(int32_t)(int8_t)p[i + 1] * 961u
          + (uint32_t)(int32_t)(int8_t)p[i + 2] * 31u
          + (uint32_t)(int32_t)(int8_t)p[i + 3];
    }
    for (; i < n; i++)
        h = h * 31u + (uint32_t)(int32_t)(int8_t)p[i];
    return (int32_t)h;
}

int32_t em_hash_bytes31(const uint8_t *p, size_t n)
{
    return em_hash_bytes31_from(1, p, n);
}

/* ---- CRC32C ---- */

static uint32_t crc_table[256];
static int crc_hw;        /* 0 table, 1 SSE4.2; set once by crc_init */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hw = 0;
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

uint32_t em_crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
#if defined(__x86_64__)
    if (crc_hw == 1)
        return ~crc_sse42(crc, p, n);
#endif
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}
