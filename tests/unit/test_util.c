/* test_util.c - counting allocator, error codes, buffers, hashes, CRC32C. */
#include "test.h"

#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <errno.h>

TEST(mem_counts_bytes_and_calls)
{
    em_mem_stats a = em_mem_thread();
    void *p = em_malloc(100);
    void *q = em_calloc(3, 10);
    q = em_realloc(q, 50);
    em_mem_stats b = em_mem_thread();
    CHECK_EQ(b.allocs - a.allocs, 3);
    CHECK_EQ(b.bytes - a.bytes, 180);
    em_free(p);
    em_free(q);
    CHECK_EQ(em_mem_thread().frees - b.frees, 2);
}

TEST(mem_fail_nth)
{
    em_mem_fail_after(3, 0);
    void *a = em_malloc(8), *b = em_malloc(8), *c = em_malloc(8), *d = em_malloc(8);
    CHECK(a && b && !c && d);
    em_free(a); em_free(b); em_free(d);
    em_mem_fail_after(1, 1);
    CHECK(em_malloc(1) == NULL);
    CHECK(em_malloc(1) == NULL);
    em_mem_fail_after(0, 0);
    void *e = em_malloc(1);
    CHECK(e != NULL);
    em_free(e);
}

TEST(err_names_and_messages)
{
    CHECK(strcmp(em_errname(EM_TRUNCATED), "EM_TRUNCATED") == 0);
    CHECK(strcmp(em_strerror(EM_NOCACHE), "cache does not exist") == 0);
    CHECK(strcmp(em_errname(-ENOENT), "ENOENT") == 0);
    CHECK(strcmp(em_errname(0), "OK") == 0);
}

TEST(buf_grows_and_resets)
{
    em_buf b = EM_BUF_INIT;
    for (int i = 0; i < 1000; i++)
        REQUIRE_OK(em_buf_put_le32(&b, (uint32_t)i));
    CHECK_EQ(b.len, 4000);
    CHECK_EQ(em_ld32(b.p + 4 * 999), 999);
    size_t cap = b.cap;
    em_buf_reset(&b);
    em_mem_stats a = em_mem_thread();
    for (int i = 0; i < 1000; i++)
        REQUIRE_OK(em_buf_put_le32(&b, (uint32_t)i));
    CHECK_EQ(em_mem_thread().allocs - a.allocs, 0);
    CHECK_EQ(b.cap, cap);
    em_buf_free(&b);
}

TEST(java_string_hash)
{
    CHECK_EQ(em_hash_java_str((const uint8_t *)"myCache", 7), 0x585F5D36);
    CHECK_EQ(em_hash_java_str((const uint8_t *)"abc", 3), 96354);
    CHECK_EQ(em_hash_java_str_lower((const uint8_t *)"Person", 6), -991716523);
    CHECK_EQ(em_hash_java_str_lower((const uint8_t *)"id", 2), 3355);
    CHECK_EQ(em_hash_java_str_lower((const uint8_t *)"name", 4), 3373707);
    CHECK_EQ(em_hash_java_str_lower((const uint8_t *)"BinaryTreeMap", 13), -526400035);
    /* "é" (U+00E9) is one UTF-16 unit; U+1F600 is the pair D83D DE00. */
    CHECK_EQ(em_hash_java_str((const uint8_t *)"\xc3\xa9", 2), 0xE9);
    CHECK_EQ(em_hash_java_str((const uint8_t *)"\xf0\x9f\x98\x80", 4), 0xD83D * 31 + 0xDE00);
}

TEST(bytes31_hash_matches_reference_loop)
{
    uint8_t data[67];
    for (int i = 0; i < 67; i++)
        data[i] = (uint8_t)(i * 37 + 200);
    for (size_t n = 0; n <= sizeof data; n++) {
        uint32_t h = 1;
        for (size_t i = 0; i < n; i++)
            h = h * 31u + (uint32_t)(int32_t)(int8_t)data[i];
        CHECK_EQ(em_hash_bytes31(data, n), (int32_t)h);
    }
}

TEST(crc32c_known_vector)
{
    /* RFC 3720 test vector: 32 bytes of zeros -> 0x8A9136AA; "123456789" -> 0xE3069283. */
    uint8_t z[32] = {0};
    CHECK_EQ(em_crc32c(0, z, 32), 0x8A9136AA);
    CHECK_EQ(em_crc32c(0, "123456789", 9), 0xE3069283);
    CHECK_EQ(em_crc32c(em_crc32c(0, "1234", 4), "56789", 5), 0xE3069283);
}
