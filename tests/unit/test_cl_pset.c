/* test_cl_pset.c - the partial set's file (cl_pset.h): what is saved loads
 * back; a missing file is EM_NOTFOUND; a truncated, bit-flipped or
 * oversized one is EM_CORRUPT, never a set read wrong. */
#include "test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cl_pset.h"
#include "util/err.h"
#include "util/mem.h"

TEST(cl_pset_save_load_and_damage)
{
    char dir[] = "/tmp/ember-pset-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/rebal-partial", dir);
    cl_pset_item *v = NULL;
    uint32_t n = 7;
    CHECK_EQ(cl_pset_load(path, &v, &n), EM_NOTFOUND);
    CHECK_EQ(n, 0);
    cl_pset_item in[300];
    for (uint32_t i = 0; i < 300; i++)
        in[i] = (cl_pset_item){ (int32_t)(i * 7919) - 1000, i * 3 };
    REQUIRE_OK(cl_pset_save(path, in, 300));
    REQUIRE_OK(cl_pset_load(path, &v, &n));
    CHECK_EQ(n, 300);
    CHECK(v && !memcmp(v, in, sizeof in));
    em_free(v);
    REQUIRE_OK(cl_pset_save(path, in, 0));          /* replaced whole */
    REQUIRE_OK(cl_pset_load(path, &v, &n));
    CHECK_EQ(n, 0);
    em_free(v);
    REQUIRE_OK(cl_pset_save(path, in, 5));
    /* Damage: a flipped bit, a cut, bytes added. */
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    uint8_t b;
    REQUIRE(pread(fd, &b, 1, 20) == 1);
    b ^= 4;
    REQUIRE(pwrite(fd, &b, 1, 20) == 1);
    CHECK_EQ(cl_pset_load(path, &v, &n), EM_CORRUPT);
    b ^= 4;
    REQUIRE(pwrite(fd, &b, 1, 20) == 1);
    REQUIRE_OK(cl_pset_load(path, &v, &n));
    em_free(v);
    REQUIRE(ftruncate(fd, 30) == 0);
    CHECK_EQ(cl_pset_load(path, &v, &n), EM_CORRUPT);
    REQUIRE(ftruncate(fd, 3) == 0);
    CHECK_EQ(cl_pset_load(path, &v, &n), EM_CORRUPT);
    close(fd);
    CHECK_EQ(cl_pset_save(path, in, CL_PSET_MAX + 1), EM_INVAL);
    unlink(path);
    rmdir(dir);
}
