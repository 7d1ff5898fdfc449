/* test_srv_config.c - emberd's INI config file (src/server/srv.c,
 * srv_config_load): top-level keys, [region:NAME] sections, and any other
 * section header ignored with one warning per section, its keys read as
 * top-level keys (docs/operations.md, "Settings"). */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/srv.h"
#include "util/err.h"
#include "util/log.h"

/* write_tmp: a temp file holding text; its path in path (size 64). */
static int write_tmp(char *path, const char *text)
{
    strcpy(path, "/tmp/ember-cfg-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

/* count_lines: lines of the file at path containing needle. */
static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

TEST(srv_config_unknown_section_warns_and_reads_keys)
{
    char ini[64], logf[64];
    REQUIRE_OK(write_tmp(ini, "max_cursors = 7\n"
                              "[server]\n"
                              "port = 10901\n"
                              "idle_timeout = 3s\n"
                              "[region:durable]\n"
                              "persistence = true\n"
                              "max_size = 1m\n"
                              "[server]\n"
                              "max_depth = 9\n"
                              "[metrics]\n"
                              "http_port = 9100\n"));
    REQUIRE_OK(write_tmp(logf, ""));
    REQUIRE_OK(em_log_open(logf));
    srv_config c;
    srv_config_default(&c);
    char err[512] = "";
    int rc = srv_config_load(&c, ini, err, sizeof err);
    em_log_close();
    CHECK_OK(rc);
    if (rc)
        fprintf(stderr, "    %s\n", err);
    CHECK_EQ(c.max_cursors, 7);
    CHECK_EQ(c.port, 10901);
    CHECK_EQ(c.idle_timeout_ms, 3000);
    CHECK_EQ(c.max_depth, 9);
    CHECK_EQ(c.http_port, 9100);
    REQUIRE_EQ(c.nregions, 1);          /* the known section still works */
    CHECK(!strcmp(c.regions[0].name, "durable"));
    CHECK_EQ(c.regions[0].persistence, 1);
    CHECK_EQ(c.regions[0].max_size, 1u << 20);
    /* one warning per run of an unknown section, naming it */
    CHECK_EQ(count_lines(logf, "section [server] is not one ember knows"), 2);
    CHECK_EQ(count_lines(logf, "section [metrics] is not one ember knows"), 1);
    unlink(ini);
    unlink(logf);
}

TEST(srv_config_unknown_key_still_refused)
{
    char ini[64];
    REQUIRE_OK(write_tmp(ini, "[server]\nno_such_key = 1\n"));
    srv_config c;
    srv_config_default(&c);
    char err[512] = "";
    enum em_log_level lvl = em_log_get_level();
    em_log_set_level(EM_LOG_ERROR);     /* the section warning is not the point here */
    CHECK_EQ(srv_config_load(&c, ini, err, sizeof err), EM_CONFIG);
    em_log_set_level(lvl);
    CHECK(strstr(err, "unknown setting 'no_such_key'") != NULL);
    CHECK(strstr(err, "line 2") != NULL);
    unlink(ini);
}

TEST(srv_config_bad_region_key_still_refused)
{
    char ini[64];
    REQUIRE_OK(write_tmp(ini, "[region:x]\nmax_sizes = 1m\n"));
    srv_config c;
    srv_config_default(&c);
    char err[512] = "";
    CHECK_EQ(srv_config_load(&c, ini, err, sizeof err), EM_CONFIG);
    CHECK(strstr(err, "unknown data region setting 'max_sizes'") != NULL);
    unlink(ini);
}
