/* test_persist.c - emberd with persistence on: caches created with a
 * configuration, binary type metadata (3003) and type names (3001), complex
 * values and destroyed caches survive restarts (clean stop and SIGKILL);
 * WAL state ops answer true; a WAL corrupted in the middle refuses to start.
 * Settings: src/server/srv.c; WAL layout: src/wal/wal.c.
 */
#include "client.h"
#include "test.h"

#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PERSON_ID ((int32_t)0xC4E39B55)   /* hash("person") */

/* PUT_BINARY_TYPE body for Person{id:int, name:string}, as Node 1.0.0 sends it. */
static const uint8_t person_meta[] = {
    0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0, 0, 0, 'P', 'e', 'r', 's', 'o', 'n', 0x65,
    0x02, 0, 0, 0,
    0x09, 0x02, 0, 0, 0, 'i', 'd', 0x03, 0, 0, 0, 0x1b, 0x0d, 0, 0,
    0x09, 0x04, 0, 0, 0, 'n', 'a', 'm', 'e', 0x09, 0, 0, 0, 0x8b, 0x7a, 0x33, 0,
    0x00, 0x01, 0, 0, 0, 0xf3, 0xf1, 0xdc, 0x39, 0x02, 0, 0, 0, 0x1b, 0x0d, 0, 0,
    0x8b, 0x7a, 0x33, 0,
};

/* person appends Person{id, name "abc"} with a full footer. */
static void person(em_buf *b, int32_t id)
{
    tc_put_u8(b, 103); tc_put_u8(b, 1);
    tc_put_i16(b, 0x0001 | 0x0002 | 0x0008);
    tc_put_i32(b, PERSON_ID);
    tc_put_i32(b, 0);
    tc_put_i32(b, 24 + 5 + 8 + 10);
    tc_put_i32(b, 0x39DCF1F3);
    tc_put_i32(b, 24 + 5 + 8);
    tc_v_int(b, id);
    tc_v_strn(b, "abc", 3);
    tc_put_i32(b, 3355); tc_put_u8(b, 24);
    tc_put_i32(b, 3373707); tc_put_u8(b, 29);
}

typedef struct pdir { char path[256]; } pdir;

static void pdir_make(pdir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/ember-persist-XXXXXX");
    if (!mkdtemp(d->path))
        d->path[0] = 0;
}

static int start(tc_server *s, const pdir *d, const char *mode)
{
    const char *args[] = { "--persistence", "true", "--wal-path", d->path, "--wal-mode", mode,
                           "--log-level", "error", NULL };
    return tc_server_start(s, args);
}

/* call builds op with a cache header for name, body appended by fn. */
static int simple(tc_conn *c, int op, const uint8_t *body, size_t n, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, op);
    tc_put_bytes(&b, body, n);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc ? rc : r->status;
}

static int create_with_config(tc_conn *c, const char *name)
{
    em_buf v = EM_BUF_INIT;
    tc_put_i32(&v, 0);
    tc_put_i16(&v, 3);
    tc_put_i16(&v, 3);                 /* backups */
    tc_put_i32(&v, 2);
    tc_put_i16(&v, 203);               /* SQL schema */
    tc_v_str(&v, "PS");
    tc_put_i16(&v, 0);                 /* name */
    tc_v_str(&v, name);
    em_st32(v.p, (uint32_t)(v.len - 4));
    tc_reply r;
    int rc = simple(c, 1053, v.p, v.len, &r);
    em_buf_free(&v);
    return rc;
}

/* get_config copies GET_CONFIGURATION's payload into out. */
static int get_config(tc_conn *c, const char *name, em_buf *out)
{
    em_buf b = EM_BUF_INIT;
    tc_cache_hdr(&b, tc_cache_id(name), 0);
    tc_reply r;
    int rc = simple(c, 1055, b.p, b.len, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    em_buf_reset(out);
    return em_buf_append(out, r.p, r.n);
}

static int put_person(tc_conn *c, const char *cache, int32_t key)
{
    em_buf b = EM_BUF_INIT;
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_v_int(&b, key);
    person(&b, key);
    tc_reply r;
    int rc = simple(c, 1001, b.p, b.len, &r);
    em_buf_free(&b);
    return rc;
}

/* get_raw copies the GET reply payload (the typed value) into out. */
static int get_raw(tc_conn *c, const char *cache, int32_t key, em_buf *out)
{
    em_buf b = EM_BUF_INIT;
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_v_int(&b, key);
    tc_reply r;
    int rc = simple(c, 1000, b.p, b.len, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    em_buf_reset(out);
    return em_buf_append(out, r.p, r.n);
}

static int wal_state(tc_conn *c, const char *cache, int op, int en, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_v_str(&b, cache);
    if (op == 5002)
        tc_put_u8(&b, (uint8_t)en);
    int rc = simple(c, op, b.p, b.len, r);
    em_buf_free(&b);
    return rc;
}

static int cache_names(tc_conn *c, char *out, size_t cap)
{
    tc_reply r;
    int rc = simple(c, 1050, NULL, 0, &r);
    if (rc)
        return rc;
    tc_rd d = tc_rd_of(&r);
    int32_t n = tc_rd_i32(&d);
    out[0] = 0;
    for (int32_t i = 0; i < n && !d.err; i++) {
        char s[64];
        tc_rd_str(&d, s, sizeof s);
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s,", s);
    }
    return d.err;
}

static void restart_keeps_everything(const char *mode, int crash)
{
    pdir d;
    pdir_make(&d);
    REQUIRE(d.path[0]);
    tc_server s;
    REQUIRE_OK(start(&s, &d, mode));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_activate(&c));        /* first start with persistence: INACTIVE */
    tc_reply r;
    em_buf cfg = EM_BUF_INIT, v1 = EM_BUF_INIT, tmp = EM_BUF_INIT;

    REQUIRE_EQ(create_with_config(&c, "pc"), 0);
    REQUIRE_OK(get_config(&c, "pc", &cfg));
    REQUIRE_EQ(simple(&c, 3003, person_meta, sizeof person_meta, &r), 0);
    em_buf nb = EM_BUF_INIT;
    tc_put_u8(&nb, 0);
    tc_put_i32(&nb, PERSON_ID);
    tc_v_str(&nb, "org.example.Person");
    REQUIRE_EQ(simple(&c, 3001, nb.p, nb.len, &r), 0);
    REQUIRE_EQ(put_person(&c, "pc", 7), 0);
    REQUIRE_OK(get_raw(&c, "pc", 7, &v1));
    CHECK(v1.len > 40);
    REQUIRE_OK(tc_create_cache(&c, "plain"));
    REQUIRE_OK(tc_create_cache(&c, "doomed"));
    for (int i = 0; i < 100; i++) {
        char val[32];
        snprintf(val, sizeof val, "v%d", i);
        REQUIRE_OK(tc_put_int_str(&c, "plain", i, val));
    }
    em_buf db = EM_BUF_INIT;
    tc_put_i32(&db, tc_cache_id("doomed"));
    REQUIRE_EQ(simple(&c, 1056, db.p, db.len, &r), 0);     /* DESTROY */
    /* persistent caches report their WAL on */
    REQUIRE_EQ(wal_state(&c, "pc", 5003, 0, &r), 0);
    CHECK(r.n == 1 && r.p[0] == 1);
    REQUIRE_EQ(wal_state(&c, "pc", 5002, 1, &r), 0);
    CHECK(r.n == 1 && r.p[0] == 0);                        /* already on: unchanged */
    tc_close(&c);
    if (crash)
        tc_server_kill9(&s);
    else
        CHECK_EQ(tc_server_stop(&s), 0);

    REQUIRE_OK(start(&s, &d, mode));
    REQUIRE_OK(tc_open(&c, s.port));
    char names[256];
    REQUIRE_OK(cache_names(&c, names, sizeof names));
    CHECK(strstr(names, "pc,") != NULL);
    CHECK(strstr(names, "plain,") != NULL);
    CHECK(strstr(names, "doomed") == NULL);
    REQUIRE_OK(get_config(&c, "pc", &tmp));
    CHECK_EQ(tmp.len, cfg.len);
    CHECK(tmp.len == cfg.len && memcmp(tmp.p, cfg.p, cfg.len) == 0);
    /* the type and its name came back */
    em_buf gb = EM_BUF_INIT;
    tc_put_i32(&gb, PERSON_ID);
    REQUIRE_EQ(simple(&c, 3002, gb.p, gb.len, &r), 0);
    tc_rd rd = tc_rd_of(&r);
    CHECK_EQ(tc_rd_u8(&rd), 1);
    CHECK_EQ(tc_rd_i32(&rd), PERSON_ID);
    char str[64];
    tc_rd_str(&rd, str, sizeof str);
    CHECK(strcmp(str, "Person") == 0);
    em_buf_reset(&gb);
    tc_put_u8(&gb, 0);
    tc_put_i32(&gb, PERSON_ID);
    REQUIRE_EQ(simple(&c, 3000, gb.p, gb.len, &r), 0);
    rd = tc_rd_of(&r);
    tc_rd_str(&rd, str, sizeof str);
    CHECK(strcmp(str, "org.example.Person") == 0);
    /* the complex value reads back byte for byte */
    REQUIRE_OK(get_raw(&c, "pc", 7, &tmp));
    CHECK(tmp.len == v1.len && memcmp(tmp.p, v1.p, v1.len) == 0);
    for (int i = 0; i < 100; i++) {
        char val[32], want[32];
        snprintf(want, sizeof want, "v%d", i);
        CHECK_EQ(tc_get_int_str(&c, "plain", i, val, sizeof val), 1);
        CHECK(strcmp(val, want) == 0);
    }
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
    em_buf_free(&cfg);
    em_buf_free(&v1);
    em_buf_free(&tmp);
    em_buf_free(&nb);
    em_buf_free(&db);
    em_buf_free(&gb);
    tc_rm_dir(d.path);
}

TEST(persist_restart_fsync_clean_stop) { restart_keeps_everything("FSYNC", 0); }
TEST(persist_restart_log_only_sigkill) { restart_keeps_everything("LOG_ONLY", 1); }
TEST(persist_restart_fsync_sigkill) { restart_keeps_everything("fsync", 1); }

TEST(persist_in_memory_wal_state_off)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "m"));
    tc_reply r;
    REQUIRE_EQ(wal_state(&c, "m", 5003, 0, &r), 0);
    CHECK(r.n == 1 && r.p[0] == 0);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* first_segment: path of the WAL segment in d (the only one here). */
static int first_segment(const pdir *d, char *out, size_t cap)
{
    DIR *dir = opendir(d->path);
    if (!dir)
        return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(dir)) != NULL)
        if (!strncmp(e->d_name, "wal-", 4) && strstr(e->d_name, ".seg")) {
            snprintf(out, cap, "%s/%s", d->path, e->d_name);
            found = 0;
        }
    closedir(dir);
    return found;
}

TEST(persist_corrupt_middle_refuses_start)
{
    pdir d;
    pdir_make(&d);
    REQUIRE(d.path[0]);
    tc_server s;
    REQUIRE_OK(start(&s, &d, "FSYNC"));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_activate(&c));
    REQUIRE_OK(tc_create_cache(&c, "x"));
    for (int i = 0; i < 20; i++)
        REQUIRE_OK(tc_put_int_str(&c, "x", i, "value"));
    tc_close(&c);
    tc_server_kill9(&s);
    char seg[600];
    REQUIRE_OK(first_segment(&d, seg, sizeof seg));
    /* flip a byte inside the first record's body (segment header 32, frame
     * header 24): valid records follow, so this is not a torn tail */
    int fd = open(seg, O_RDWR);
    REQUIRE(fd >= 0);
    uint8_t byte;
    REQUIRE(pread(fd, &byte, 1, 32 + 24 + 4) == 1);
    byte ^= 0x40;
    REQUIRE(pwrite(fd, &byte, 1, 32 + 24 + 4) == 1);
    close(fd);
    /* emberd must exit non-zero, naming the file in its message */
    char logf[600];
    snprintf(logf, sizeof logf, "%s/emberd.log", d.path);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int lf = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(lf, 2);
        execl(tc_emberd_path(), "emberd", "--port", "0", "--persistence", "on", "--wal-path",
              d.path, NULL);
        _exit(127);
    }
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char buf[4096] = "";
    fd = open(logf, O_RDONLY);
    REQUIRE(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    const char *base = strrchr(seg, '/') + 1;
    CHECK(strstr(buf, base) != NULL);
    CHECK(strstr(buf, "offset") != NULL);
    if (!strstr(buf, base))
        fprintf(stderr, "emberd said: %s\n", buf);
    tc_rm_dir(d.path);
}

/* A segment whose header names a first LSN above its records' (what
 * BACKGROUND/NONE logs written before the roll kept LSN order across
 * checkpoints carry): emberd starts, reads it by its records' LSNs, and
 * says so in a warning in its own log. */
TEST(persist_mislabeled_segment_starts_with_warning)
{
    pdir d;
    pdir_make(&d);
    REQUIRE(d.path[0]);
    tc_server s;
    REQUIRE_OK(start(&s, &d, "LOG_ONLY"));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_activate(&c));            /* first start with persistence: INACTIVE */
    REQUIRE_OK(tc_create_cache(&c, "x"));
    for (int i = 0; i < 20; i++)
        REQUIRE_OK(tc_put_int_str(&c, "x", i, "value"));
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
    char seg[600];
    REQUIRE_OK(first_segment(&d, seg, sizeof seg));
    /* header: first LSN at offset 16, CRC32C of [0, 24) at 24 (src/wal/wal.c) */
    uint8_t h[32];
    int fd = open(seg, O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
    em_st64(h + 16, 6);
    em_st32(h + 24, em_crc32c(0, h, 24));
    REQUIRE(pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
    close(fd);
    char logf[600];
    snprintf(logf, sizeof logf, "%s/emberd-warn.log", d.path);
    const char *args[] = { "--persistence", "true", "--wal-path", d.path, "--wal-mode", "LOG_ONLY",
                           "--log-level", "warn", "--log-file", logf, NULL };
    REQUIRE_OK(tc_server_start(&s, args));
    REQUIRE_OK(tc_open(&c, s.port));
    for (int i = 0; i < 20; i++) {
        char val[32];
        CHECK_EQ(tc_get_int_str(&c, "x", i, val, sizeof val), 1);
    }
    CHECK_OK(tc_put_int_str(&c, "x", 100, "after"));
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
    char buf[4096] = "";
    fd = open(logf, O_RDONLY);
    REQUIRE(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    const char *base = strrchr(seg, '/') + 1;
    CHECK(strstr(buf, " W WAL recovery read 1 segment(s) by their records' LSNs") != NULL);
    CHECK(strstr(buf, base) != NULL);
    CHECK(strstr(buf, "header says first LSN 6 but its records start at LSN 1") != NULL);
    if (!strstr(buf, "records start at LSN 1"))
        fprintf(stderr, "emberd said: %s\n", buf);
    tc_rm_dir(d.path);
}
