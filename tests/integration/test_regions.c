/* test_regions.c - emberd with data regions from the config file: a
 * persistent [region:NAME] section next to an in-memory default region.
 * After SIGKILL and restart only the persistent region's cache is back; a
 * cache naming an unconfigured region is refused.  Settings: src/server/srv.c
 * (srv_config_load), regions: src/store/store.h (st_open_regions).
 */
#include "client.h"
#include "test.h"

#include "util/buf.h"
#include "util/err.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct rdir { char path[256]; char conf[300]; } rdir;

static int rdir_make(rdir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/ember-regions-XXXXXX");
    if (!mkdtemp(d->path))
        return -1;
    snprintf(d->conf, sizeof d->conf, "%s.ini", d->path);
    FILE *f = fopen(d->conf, "w");
    if (!f)
        return -1;
    fprintf(f, "persistence = false\n"
               "wal_path = %s\n"
               "wal_mode = FSYNC\n"
               "log_level = error\n"
               "\n[region:durable]\n"
               "persistence = true\n"
               "max_size = 64m\n"
               "\n[region:scratch]\n"
               "persistence = false\n"
               "eviction = true\n"
               "max_size = 1m\n", d->path);
    return fclose(f) ? -1 : 0;
}

static void rdir_rm(rdir *d)
{
    tc_rm_dir(d->path);
    unlink(d->conf);
}

static int start(tc_server *s, const rdir *d)
{
    const char *args[] = { "--config", d->conf, NULL };
    return tc_server_start(s, args);
}

/* create_in_region: CREATE_CACHE_WITH_CONFIGURATION with name and, unless
 * NULL, DATA_REGION_NAME (property 100).  Returns the reply status. */
static int create_in_region(tc_conn *c, const char *name, const char *region)
{
    em_buf v = EM_BUF_INIT;
    tc_put_i32(&v, 0);
    tc_put_i16(&v, region ? 2 : 1);
    if (region) {
        tc_put_i16(&v, 100);
        tc_v_str(&v, region);
    }
    tc_put_i16(&v, 0);
    tc_v_str(&v, name);
    em_st32(v.p, (uint32_t)(v.len - 4));
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 1053);
    tc_put_bytes(&b, v.p, v.len);
    tc_req_end(&b);
    tc_reply r;
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    em_buf_free(&v);
    return rc ? rc : r.status;
}

TEST(regions_only_persistent_region_survives_sigkill)
{
    rdir d;
    REQUIRE_OK(rdir_make(&d));
    tc_server s;
    REQUIRE_OK(start(&s, &d));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_activate(&c));        /* a persistent region: starts INACTIVE */
    CHECK_EQ(create_in_region(&c, "dur", "durable"), 0);
    CHECK_EQ(create_in_region(&c, "scr", "scratch"), 0);
    CHECK_EQ(create_in_region(&c, "mem", NULL), 0);
    CHECK(create_in_region(&c, "bad", "nosuchregion") != 0);   /* Ignite refuses it */
    for (int k = 0; k < 50; k++) {
        CHECK_EQ(tc_put_int_str(&c, "dur", k, "d"), 0);
        CHECK_EQ(tc_put_int_str(&c, "scr", k, "s"), 0);
        CHECK_EQ(tc_put_int_str(&c, "mem", k, "m"), 0);
    }
    char out[16];
    CHECK_EQ(tc_get_int_str(&c, "mem", 7, out, sizeof out), 1);
    tc_close(&c);
    tc_server_kill9(&s);

    REQUIRE_OK(start(&s, &d));
    REQUIRE_OK(tc_open(&c, s.port));
    for (int k = 0; k < 50; k++) {
        CHECK_EQ(tc_get_int_str(&c, "dur", k, out, sizeof out), 1);
        CHECK(!strcmp(out, "d"));
    }
    /* The memory-only caches were neither logged nor checkpointed. */
    em_buf b = EM_BUF_INIT;
    tc_cache_hdr(&b, tc_cache_id("mem"), 0);
    tc_v_int(&b, 7);
    em_buf q = EM_BUF_INIT;
    tc_req_begin(&c, &q, 1000);
    tc_put_bytes(&q, b.p, b.len);
    tc_req_end(&q);
    tc_reply r;
    REQUIRE_OK(tc_call(&c, &q, &r));
    CHECK(r.status != 0);                       /* cache does not exist */
    em_buf_free(&q);
    em_buf_free(&b);
    CHECK_EQ(create_in_region(&c, "scr", "scratch"), 0);   /* gone: creatable again */
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
    rdir_rm(&d);
}

TEST(regions_bad_section_refused)
{
    char conf[] = "/tmp/ember-regions-bad-XXXXXX";
    int fd = mkstemp(conf);
    REQUIRE(fd >= 0);
    const char txt[] = "[region:x]\nmax_sizes = 1m\n";
    CHECK_EQ(write(fd, txt, sizeof txt - 1), (ssize_t)(sizeof txt - 1));
    close(fd);
    tc_server s;
    const char *args[] = { "--config", conf, "--log-level", "error", NULL };
    int rc = tc_server_start(&s, args);
    CHECK(rc != 0);
    if (rc == 0)
        tc_server_stop(&s);
    unlink(conf);
}

TEST(regions_flag_form)
{
    tc_server s;
    const char *args[] = { "--region:r1:max-size", "1m", "--region:r1:eviction", "true",
                           "--log-level", "error", NULL };
    REQUIRE_OK(tc_server_start(&s, args));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    CHECK_EQ(create_in_region(&c, "a", "r1"), 0);
    CHECK(create_in_region(&c, "b", "r2") != 0);
    CHECK_EQ(tc_put_int_str(&c, "a", 1, "v"), 0);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
