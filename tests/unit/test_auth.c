/* test_auth.c - users file, password checks and the failed-login limiter
 * (src/server/auth.c). */
#include "test.h"

#include "server/auth.h"
#include "util/err.h"
#include "util/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define U(s) (const uint8_t *)(s), strlen(s)

/* tmpfile_path makes a fresh directory and returns dir/users in out. */
static void tmp_path(char *out, size_t cap)
{
    char dir[] = "/tmp/ember-auth-XXXXXX";
    if (!mkdtemp(dir))
        dir[0] = 0;
    snprintf(out, cap, "%s/users", dir);
}

static void rm_path(const char *path)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    unlink(path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        rmdir(dir);
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(auth_hash_line_format)
{
    char line[512];
    REQUIRE_OK(srv_auth_hash_line("alice", "pw", SRV_AUTH_MIN_ITERATIONS, line, sizeof line));
    CHECK(strncmp(line, "alice:pbkdf2-sha256$100000$", 27) == 0);
    CHECK_EQ(strlen(line), 27 + 32 + 1 + 64);
    char line2[512];
    REQUIRE_OK(srv_auth_hash_line("alice", "pw", SRV_AUTH_MIN_ITERATIONS, line2, sizeof line2));
    CHECK(strcmp(line, line2) != 0);     /* fresh salt each time */
    CHECK_EQ(srv_auth_hash_line("a:b", "pw", 0, line, sizeof line), EM_INVAL);
    CHECK_EQ(srv_auth_hash_line("", "pw", 0, line, sizeof line), EM_INVAL);
    CHECK_EQ(srv_auth_hash_line("bob", "pw", 0, line, 40), EM_RANGE);
}

TEST(auth_add_load_check)
{
    char path[512];
    tmp_path(path, sizeof path);
    REQUIRE_OK(srv_auth_add_user(path, "ignite", "ignite"));
    REQUIRE_OK(srv_auth_add_user(path, "bob", "s3cret pass"));
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ(st.st_mode & 0777, 0600);

    srv_auth *a;
    REQUIRE_OK(srv_auth_load(path, NULL, &a, NULL));
    CHECK_EQ(srv_auth_count(a), 2);
    CHECK_OK(srv_auth_check(a, U("ignite"), U("ignite")));
    CHECK_OK(srv_auth_check(a, U("bob"), U("s3cret pass")));
    CHECK_EQ(srv_auth_check(a, U("bob"), U("s3cret pas")), EM_AUTH);
    CHECK_EQ(srv_auth_check(a, U("bob"), U("ignite")), EM_AUTH);
    CHECK_EQ(srv_auth_check(a, U("carol"), U("ignite")), EM_AUTH);
    CHECK_EQ(srv_auth_check(a, U(""), U("")), EM_AUTH);
    /* the second check of a verified password takes the cached path and must
     * still tell passwords apart */
    CHECK_OK(srv_auth_check(a, U("ignite"), U("ignite")));
    CHECK_EQ(srv_auth_check(a, U("ignite"), U("ignitf")), EM_AUTH);
    CHECK_EQ(srv_auth_check(a, U("Ignite"), U("ignite")), EM_AUTH);
    srv_auth_free(a);

    /* replacing a password keeps one line for the user */
    REQUIRE_OK(srv_auth_add_user(path, "bob", "new"));
    REQUIRE_OK(srv_auth_load(path, NULL, &a, NULL));
    CHECK_EQ(srv_auth_count(a), 2);
    CHECK_OK(srv_auth_check(a, U("bob"), U("new")));
    CHECK_EQ(srv_auth_check(a, U("bob"), U("s3cret pass")), EM_AUTH);
    srv_auth_free(a);

    REQUIRE_OK(srv_auth_remove_user(path, "bob"));
    CHECK_EQ(srv_auth_remove_user(path, "bob"), EM_NOTFOUND);
    REQUIRE_OK(srv_auth_load(path, NULL, &a, NULL));
    CHECK_EQ(srv_auth_count(a), 1);
    CHECK_EQ(srv_auth_check(a, U("bob"), U("new")), EM_AUTH);
    srv_auth_free(a);
    rm_path(path);
}

TEST(auth_comments_kept_and_bad_lines_rejected)
{
    char path[512], line[512], text[2048];
    tmp_path(path, sizeof path);
    REQUIRE_OK(srv_auth_hash_line("ann", "x", SRV_AUTH_MIN_ITERATIONS, line, sizeof line));
    snprintf(text, sizeof text, "# operators\n\n%s\n", line);
    write_file(path, text);
    REQUIRE_OK(srv_auth_add_user(path, "ben", "y"));
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    char first[64];
    CHECK(fgets(first, sizeof first, f) && strcmp(first, "# operators\n") == 0);
    fclose(f);

    srv_auth *a = NULL;
    int bad = 0;
    /* weak iteration count */
    write_file(path, "# c\nann:pbkdf2-sha256$1000$00000000000000000000000000000000$"
                     "0000000000000000000000000000000000000000000000000000000000000000\n");
    CHECK_EQ(srv_auth_load(path, NULL, &a, &bad), EM_CONFIG);
    CHECK_EQ(bad, 2);
    CHECK(a == NULL);
    /* unknown scheme, short hash, missing colon, duplicate user */
    write_file(path, "ann:md5$100000$00$00\n");
    CHECK_EQ(srv_auth_load(path, NULL, &a, &bad), EM_CONFIG);
    write_file(path, "ann:pbkdf2-sha256$100000$00000000000000000000000000000000$00\n");
    CHECK_EQ(srv_auth_load(path, NULL, &a, &bad), EM_CONFIG);
    write_file(path, "no colon here\n");
    CHECK_EQ(srv_auth_load(path, NULL, &a, &bad), EM_CONFIG);
    snprintf(text, sizeof text, "%s\n%s\n", line, line);
    write_file(path, text);
    CHECK_EQ(srv_auth_load(path, NULL, &a, &bad), EM_CONFIG);
    CHECK_EQ(bad, 2);
    /* a malformed file is not rewritten by add_user */
    write_file(path, "garbage\n");
    CHECK_EQ(srv_auth_add_user(path, "ann", "z"), EM_CONFIG);
    unlink(path);
    CHECK(srv_auth_load(path, NULL, &a, &bad) == -2 /* -ENOENT */);
    rm_path(path);
}

TEST(auth_limiter_per_address)
{
    char path[512];
    tmp_path(path, sizeof path);
    REQUIRE_OK(srv_auth_add_user(path, "ignite", "ignite"));
    srv_auth_limits lim = {3, 1000, 100, 100};
    srv_auth *a;
    REQUIRE_OK(srv_auth_load(path, &lim, &a, NULL));
    uint64_t t = 1000000;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(srv_auth_login(a, "10.0.0.1:5000", U("ignite"), U("bad"), t), EM_AUTH);
    /* the address is now refused even with the right password and another port */
    CHECK_EQ(srv_auth_login(a, "10.0.0.1:6000", U("ignite"), U("ignite"), t), EM_TOOMANY);
    /* other addresses are unaffected */
    CHECK_OK(srv_auth_login(a, "10.0.0.2:5000", U("ignite"), U("ignite"), t));
    CHECK_OK(srv_auth_login(a, "[::1]:7000", U("ignite"), U("ignite"), t));
    /* IPv6 as net_conn_peer writes it: ports differ, the address is one */
    for (int i = 0; i < 3; i++)
        CHECK_EQ(srv_auth_login(a, i & 1 ? "fe80::2:4000" : "fe80::2:4001", U("ignite"), U("x"), t),
                 EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "fe80::2:4002", U("ignite"), U("ignite"), t), EM_TOOMANY);
    CHECK_OK(srv_auth_login(a, "fe80::3:4002", U("ignite"), U("ignite"), t));
    /* no credentials: refused without a slow check, counted as a failure */
    CHECK_EQ(srv_auth_login(a, "10.0.0.9:1", NULL, 0, NULL, 0, t), EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "10.0.0.9:1", U(""), NULL, 0, t), EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "10.0.0.9:1", U("ignite"), NULL, 0, t), EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "10.0.0.9:1", U("ignite"), U("ignite"), t), EM_TOOMANY);
    CHECK_EQ(srv_auth_check(a, NULL, 0, NULL, 0), EM_AUTH);
    /* one failure is forgiven per second */
    CHECK_EQ(srv_auth_login(a, "10.0.0.1", U("ignite"), U("ignite"), t + 999), EM_TOOMANY);
    CHECK_OK(srv_auth_login(a, "10.0.0.1", U("ignite"), U("ignite"), t + 1000));
    srv_auth_free(a);
    rm_path(path);
}

TEST(auth_limiter_slow_checks_bounded)
{
    char path[512];
    tmp_path(path, sizeof path);
    REQUIRE_OK(srv_auth_add_user(path, "ignite", "ignite"));
    srv_auth_limits lim = {100, 1000, 2, 1};
    srv_auth *a;
    REQUIRE_OK(srv_auth_load(path, &lim, &a, NULL));
    uint64_t t = 5000000;
    CHECK_EQ(srv_auth_login(a, "1.1.1.1", U("x"), U("y"), t), EM_AUTH);
    CHECK_OK(srv_auth_login(a, "1.1.1.2", U("ignite"), U("ignite"), t));
    /* bucket empty: slow checks are refused from any address... */
    CHECK_EQ(srv_auth_login(a, "1.1.1.3", U("x"), U("y"), t), EM_TOOMANY);
    /* ...but a password verified before passes without a slow check */
    CHECK_OK(srv_auth_login(a, "1.1.1.4", U("ignite"), U("ignite"), t));
    CHECK_EQ(srv_auth_login(a, "1.1.1.4", U("ignite"), U("wrong"), t), EM_TOOMANY);
    /* one slow check per second comes back */
    CHECK_EQ(srv_auth_login(a, "1.1.1.3", U("x"), U("y"), t + 1000), EM_AUTH);
    srv_auth_free(a);
    rm_path(path);
}

TEST(auth_cli_add_remove)
{
    char path[512];
    tmp_path(path, sizeof path);
    char *argv_none[] = {"emberd", "--port", "1", NULL};
    CHECK_EQ(srv_auth_cli(3, argv_none, path), -1);
    setenv("EMBER_PASSWORD", "pw1", 1);
    char *argv_add[] = {"emberd", "--add-user", "ops", "--users", path, NULL};
    CHECK_EQ(srv_auth_cli(5, argv_add, NULL), 0);
    char *argv_nousers[] = {"emberd", "--add-user", "ops", NULL};
    CHECK_EQ(srv_auth_cli(3, argv_nousers, NULL), 2);
    char *argv_baduser[] = {"emberd", "--add-user", "a:b", NULL};
    CHECK_EQ(srv_auth_cli(3, argv_baduser, path), 2);
    unsetenv("EMBER_PASSWORD");
    srv_auth *a;
    REQUIRE_OK(srv_auth_load(path, NULL, &a, NULL));
    CHECK_OK(srv_auth_check(a, U("ops"), U("pw1")));
    srv_auth_free(a);
    char *argv_rm[] = {"emberd", "--remove-user", "ops", NULL};
    CHECK_EQ(srv_auth_cli(3, argv_rm, path), 0);
    CHECK_EQ(srv_auth_cli(3, argv_rm, path), 1);
    rm_path(path);
}

/* users_file_mixed: alice at the minimum iteration count, bob at 1.5 times
 * it (an older or stronger hash): what the timing tests below use. */
static void users_file_mixed(const char *path)
{
    char l1[512], l2[512], text[1100];
    srv_auth_hash_line("alice", "pa", SRV_AUTH_MIN_ITERATIONS, l1, sizeof l1);
    srv_auth_hash_line("bob", "pb", SRV_AUTH_MIN_ITERATIONS * 3 / 2, l2, sizeof l2);
    snprintf(text, sizeof text, "%s\n%s\n", l1, l2);
    write_file(path, text);
}

/* work_of: the PBKDF2 iterations one check of user/pw costs. */
static uint64_t work_of(srv_auth *a, const char *user, const char *pw, int want)
{
    uint64_t w0 = srv_auth_work(a);
    CHECK_EQ(srv_auth_check(a, U(user), U(pw)), want);
    return srv_auth_work(a) - w0;
}

TEST(auth_unknown_and_known_users_cost_the_same)
{
    /* An attacker times failed logins: a name that costs other than what an
     * unknown name costs is a user.  Count the hash work, not the clock. */
    char path[512];
    tmp_path(path, sizeof path);
    users_file_mixed(path);
    srv_auth *a;
    REQUIRE_OK(srv_auth_load(path, NULL, &a, NULL));
    uint64_t unknown = work_of(a, "mallory", "x", EM_AUTH);
    uint64_t unknown2 = work_of(a, "a-much-longer-unknown-name", "", EM_AUTH);
    uint64_t alice_bad = work_of(a, "alice", "x", EM_AUTH);
    uint64_t bob_bad = work_of(a, "bob", "x", EM_AUTH);
    uint64_t alice_ok = work_of(a, "alice", "pa", 0);
    CHECK(unknown > 0);
    CHECK_EQ(unknown2, unknown);
    CHECK_EQ(alice_bad, unknown);
    CHECK_EQ(bob_bad, unknown);
    CHECK_EQ(alice_ok, unknown);        /* a first right password: the same work */
    CHECK_EQ(work_of(a, "alice", "pa", 0), 0);   /* verified before: the cached path */
    /* through the limiter the same holds */
    uint64_t w0 = srv_auth_work(a);
    CHECK_EQ(srv_auth_login(a, "10.1.0.1", U("nobody"), U("x"), 1000), EM_AUTH);
    uint64_t w1 = srv_auth_work(a);
    CHECK_EQ(srv_auth_login(a, "10.1.0.2", U("bob"), U("x"), 1000), EM_AUTH);
    CHECK_EQ(w1 - w0, unknown);
    CHECK_EQ(srv_auth_work(a) - w1, unknown);
    srv_auth_free(a);
    rm_path(path);
}

typedef struct login_race {
    srv_auth          *a;
    pthread_barrier_t *go;
    int                rc;
} login_race;

static void *wrong_login(void *arg)
{
    login_race *r = arg;
    pthread_barrier_wait(r->go);
    r->rc = srv_auth_login(r->a, "10.2.0.1:4000", U("alice"), U("wrong"), 7000000);
    return NULL;
}

TEST(auth_concurrent_failures_never_exceed_limit)
{
    /* 12 wrong logins from one address at the same instant, limit 3: at most
     * 3 may be checked (EM_AUTH); the others are refused unchecked.  The
     * limit was read before any failure was recorded, so all 12 passed it. */
    char path[512];
    tmp_path(path, sizeof path);
    users_file_mixed(path);
    srv_auth_limits lim = {3, 60000, 100, 100};
    srv_auth *a;
    REQUIRE_OK(srv_auth_load(path, &lim, &a, NULL));
    enum { N = 12 };
    pthread_t th[N];
    login_race r[N];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    for (int i = 0; i < N; i++) {
        r[i].a = a;
        r[i].go = &go;
        r[i].rc = 1;
        REQUIRE(pthread_create(&th[i], NULL, wrong_login, &r[i]) == 0);
    }
    int checked = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        checked += r[i].rc == EM_AUTH;
        refused += r[i].rc == EM_TOOMANY;
    }
    pthread_barrier_destroy(&go);
    CHECK_EQ(checked + refused, N);
    CHECK(checked <= 3);
    CHECK(checked >= 1);
    /* and the address stays refused: even the right password waits */
    CHECK_EQ(srv_auth_login(a, "10.2.0.1:4001", U("alice"), U("pa"), 7000000), EM_TOOMANY);
    /* a success gives its reserved slot back: 2 right logins, then 2 wrong
     * ones still fit under a limit of 3 at another address */
    CHECK_OK(srv_auth_login(a, "10.2.0.2", U("alice"), U("pa"), 7000000));
    CHECK_OK(srv_auth_login(a, "10.2.0.2", U("bob"), U("pb"), 7000000));
    CHECK_EQ(srv_auth_login(a, "10.2.0.2", U("bob"), U("x"), 7000000), EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "10.2.0.2", U("bob"), U("y"), 7000000), EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "10.2.0.2", U("bob"), U("z"), 7000000), EM_AUTH);
    CHECK_EQ(srv_auth_login(a, "10.2.0.2", U("bob"), U("pb"), 7000000), EM_TOOMANY);
    srv_auth_free(a);
    rm_path(path);
}
