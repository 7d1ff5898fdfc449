/* auth.c - users file (PBKDF2-HMAC-SHA256 via OpenSSL), constant-time
 * password checks, a keyed in-memory cache of verified passwords, and the
 * failed-login limiter (per-address token buckets plus one global bucket on
 * slow hash checks).  File format: auth.h.  Protocol side: the handshake's
 * username/password, ignite-thin-protocol.md §1.2 and §1.9.
 */
#include "server/auth.h"

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#define SALT_LEN   16
#define KEY_LEN    32
#define USER_MAX   255
#define LINE_MAX_  1024
#define SCHEME     "pbkdf2-sha256"
#define PEERS      1024          /* limiter slots (power of two) */
#define PEER_PROBE 8

typedef struct auth_user {
    char    *name;
    size_t   nlen;
    uint32_t iterations;
    uint8_t  salt[SALT_LEN];
    uint8_t  key[KEY_LEN];
    uint8_t  fast[KEY_LEN];      /* HMAC(cache_key, password) once verified */
    uint8_t  has_fast;
} auth_user;

typedef struct peer_slot {
    uint64_t id;                 /* hash of the address; 0 = empty */
    double   tokens;
    uint64_t last_ms;
} peer_slot;

struct srv_auth {
    auth_user      *users;
    size_t          n, cap;
    uint8_t         cache_key[KEY_LEN];  /* random per process, never stored */
    srv_auth_limits lim;
    pthread_mutex_t mu;          /* guards fast[], peers[] and the slow bucket */
    peer_slot       peers[PEERS];
    double          slow_tokens;
    uint64_t        slow_last_ms;
    _Atomic uint64_t work;       /* PBKDF2 iterations run by checks (srv_auth_work) */
    uint32_t        max_iter;    /* the most any user's hash takes: what every check pays */
};

/* ---- parsing ------------------------------------------------------------- */

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int unhex(const char *s, size_t slen, uint8_t *out, size_t n)
{
    if (slen != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int h = hexval((unsigned char)s[2 * i]), l = hexval((unsigned char)s[2 * i + 1]);
        if (h < 0 || l < 0)
            return -1;
        out[i] = (uint8_t)(h * 16 + l);
    }
    return 0;
}

static void tohex(const uint8_t *p, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = 0;
}

/* valid_user: 1..255 bytes, no ':' and no control bytes (UTF-8 passes). */
static int valid_user(const char *u, size_t n)
{
    if (n == 0 || n > USER_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c == ':' || c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* is_blank: a comment or empty line. */
static int is_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return *s == 0 || *s == '#' || *s == '\n' || *s == '\r';
}

/* parse_line fills u (name not copied: u->name points into line). */
static int parse_line(char *line, auth_user *u)
{
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
        line[--len] = 0;
    char *colon = strchr(line, ':');
    if (!colon)
        return -1;
    u->name = line;
    u->nlen = (size_t)(colon - line);
    if (!valid_user(line, u->nlen))
        return -1;
    const char *p = colon + 1;
    size_t sl = strlen(SCHEME);
    if (strncmp(p, SCHEME, sl) != 0 || p[sl] != '$')
        return -1;
    p += sl + 1;
    char *end;
    errno = 0;
    unsigned long it = strtoul(p, &end, 10);
    if (errno || end == p || *end != '$' || it < SRV_AUTH_MIN_ITERATIONS || it > 100000000ul)
        return -1;
    u->iterations = (uint32_t)it;
    p = end + 1;
    const char *d = strchr(p, '$');
    if (!d || unhex(p, (size_t)(d - p), u->salt, SALT_LEN))
        return -1;
    p = d + 1;
    if (unhex(p, strlen(p), u->key, KEY_LEN))
        return -1;
    u->has_fast = 0;
    return 0;
}

/* ---- loading -------------------------------------------------------------- */

static void limits_defaults(srv_auth_limits *l, const srv_auth_limits *in)
{
    srv_auth_limits z = {0, 0, 0, 0};
    if (!in)
        in = &z;
    l->ip_burst = in->ip_burst ? in->ip_burst : 5;
    l->ip_refill_ms = in->ip_refill_ms ? in->ip_refill_ms : 2000;
    l->slow_burst = in->slow_burst ? in->slow_burst : 16;
    l->slow_per_sec = in->slow_per_sec ? in->slow_per_sec : 8;
}

int srv_auth_load(const char *path, const srv_auth_limits *lim, srv_auth **out, int *bad_line)
{
    *out = NULL;
    if (bad_line)
        *bad_line = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    srv_auth *a = em_calloc(1, sizeof *a);
    if (!a) {
        fclose(f);
        return EM_NOMEM;
    }
    pthread_mutex_init(&a->mu, NULL);
    limits_defaults(&a->lim, lim);
    a->slow_tokens = a->lim.slow_burst;
    int rc = 0, lineno = 0;
    char line[LINE_MAX_];
    if (RAND_bytes(a->cache_key, KEY_LEN) != 1)
        rc = EM_IO;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = EM_CONFIG;     /* a line longer than any valid entry */
            break;
        }
        if (is_blank(line))
            continue;
        auth_user u;
        if (parse_line(line, &u)) {
            rc = EM_CONFIG;
            break;
        }
        for (size_t i = 0; i < a->n; i++)
            if (a->users[i].nlen == u.nlen && !memcmp(a->users[i].name, u.name, u.nlen))
                rc = EM_CONFIG;     /* duplicate user: which line wins is unclear */
        if (rc)
            break;
        if (a->n == a->cap) {
            size_t nc = a->cap ? a->cap * 2 : 8;
            auth_user *nu = em_realloc(a->users, nc * sizeof *nu);
            if (!nu) {
                rc = EM_NOMEM;
                break;
            }
            a->users = nu;
            a->cap = nc;
        }
        u.name = em_strndup(u.name, u.nlen);
        if (!u.name) {
            rc = EM_NOMEM;
            break;
        }
        a->users[a->n++] = u;
    }
    if (!rc && ferror(f))
        rc = EM_IO;
    fclose(f);
    a->max_iter = SRV_AUTH_DEFAULT_ITERATIONS;
    for (size_t i = 0; i < a->n; i++)
        if (a->users[i].iterations > a->max_iter)
            a->max_iter = a->users[i].iterations;
    if (rc) {
        if (bad_line && rc == EM_CONFIG)
            *bad_line = lineno;
        srv_auth_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void srv_auth_free(srv_auth *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n; i++) {
        em_free(a->users[i].name);
        OPENSSL_cleanse(&a->users[i], sizeof a->users[i]);
    }
    em_free(a->users);
    OPENSSL_cleanse(a->cache_key, KEY_LEN);
    pthread_mutex_destroy(&a->mu);
    em_free(a);
}

size_t srv_auth_count(const srv_auth *a) { return a ? a->n : 0; }

/* ---- checking ------------------------------------------------------------- */

static int derive(const uint8_t *pw, size_t pwlen, const uint8_t *salt, uint32_t iter,
                  uint8_t out[KEY_LEN])
{
    /* PKCS5_PBKDF2_HMAC takes an int length; passwords past 1 MiB are absurd. */
    if (pwlen > (1u << 20))
        return -1;
    return PKCS5_PBKDF2_HMAC((const char *)pw, (int)pwlen, salt, SALT_LEN, (int)iter,
                             EVP_sha256(), KEY_LEN, out) == 1 ? 0 : -1;
}

/* derive_counted: derive, with the iterations added to a->work. */
static int derive_counted(srv_auth *a, const uint8_t *pw, size_t pwlen, const uint8_t *salt,
                          uint32_t iter, uint8_t out[KEY_LEN])
{
    atomic_fetch_add_explicit(&a->work, iter, memory_order_relaxed);
    return derive(pw, pwlen, salt, iter, out);
}

uint64_t srv_auth_work(srv_auth *a)
{
    return a ? atomic_load_explicit(&a->work, memory_order_relaxed) : 0;
}

static int fast_mac(const srv_auth *a, const uint8_t *pw, size_t pwlen, uint8_t out[KEY_LEN])
{
    unsigned int ol = KEY_LEN;
    return HMAC(EVP_sha256(), a->cache_key, KEY_LEN, pw, pwlen, out, &ol) && ol == KEY_LEN
               ? 0 : -1;
}

static auth_user *find_user(srv_auth *a, const uint8_t *user, size_t ulen)
{
    auth_user *hit = NULL;
    for (size_t i = 0; i < a->n; i++)
        if (a->users[i].nlen == ulen && !memcmp(a->users[i].name, user, ulen))
            hit = &a->users[i];
    return hit;
}

/* check_fast: 1 if pw matches the cached HMAC of an earlier verified login.
 * u may be NULL (an unknown user): the HMAC is computed all the same. */
static int check_fast(srv_auth *a, auth_user *u, const uint8_t *pw, size_t pwlen)
{
    uint8_t mac[KEY_LEN];
    if (fast_mac(a, pw, pwlen, mac))
        return 0;
    pthread_mutex_lock(&a->mu);
    int ok = u && u->has_fast && CRYPTO_memcmp(mac, u->fast, KEY_LEN) == 0;
    pthread_mutex_unlock(&a->mu);
    OPENSSL_cleanse(mac, sizeof mac);
    return ok;
}

/* check_slow runs the slow hash; on success remembers the fast HMAC.
 *
 * What an attacker sees of a failed login is how long it took, and that is
 * the number of PBKDF2 iterations.  Users' hashes may differ in count (an
 * older line, a stronger one), so "an unknown user pays the default count"
 * would set apart every user whose count is not the default, and "pays the
 * count of some user" would still let the per-user counts be told from each
 * other.  So every slow check pays the same: the largest count in the file
 * (a->max_iter).  An unknown user pays it on a dummy salt; a known user pays
 * its own count, then the rest on the dummy salt. */
static int check_slow(srv_auth *a, auth_user *u, const uint8_t *pw, size_t pwlen)
{
    static const uint8_t dummy_salt[SALT_LEN] = {0};
    uint8_t key[KEY_LEN], pad[KEY_LEN];
    int ok;
    uint32_t own = u ? u->iterations : 0;
    if (!u) {
        ok = 0;
    } else {
        ok = derive_counted(a, pw, pwlen, u->salt, own, key) == 0 &&
             CRYPTO_memcmp(key, u->key, KEY_LEN) == 0;
    }
    if (own < a->max_iter)
        derive_counted(a, pw, pwlen, dummy_salt, a->max_iter - own, pad);
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(pad, sizeof pad);
    if (ok) {
        uint8_t mac[KEY_LEN];
        if (fast_mac(a, pw, pwlen, mac) == 0) {
            pthread_mutex_lock(&a->mu);
            memcpy(u->fast, mac, KEY_LEN);
            u->has_fast = 1;
            pthread_mutex_unlock(&a->mu);
        }
        OPENSSL_cleanse(mac, sizeof mac);
    }
    return ok;
}

int srv_auth_check(srv_auth *a, const uint8_t *user, size_t ulen, const uint8_t *pw,
                   size_t pwlen)
{
    if (!a || !user || (!pw && pwlen))
        return EM_AUTH;
    static const uint8_t empty[1] = {0};
    if (!pw)
        pw = empty;
    auth_user *u = find_user(a, user, ulen);
    if (check_fast(a, u, pw, pwlen))
        return 0;
    return check_slow(a, u, pw, pwlen) ? 0 : EM_AUTH;
}

/* ---- limiter -------------------------------------------------------------- */

/* peer_id hashes the address part of "host:port" (net_conn_peer's text,
 * IPv6 included: "::1:5678"), "[v6]:port" or a bare IPv4 address. */
static uint64_t peer_id(const char *peer)
{
    if (!peer)
        peer = "";
    size_t n = strlen(peer);
    const char *s = peer;
    if (s[0] == '[') {
        const char *e = strchr(s, ']');
        s++;
        n = e ? (size_t)(e - s) : strlen(s);
    } else {
        const char *c = strrchr(s, ':');
        if (c)
            n = (size_t)(c - s);
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    h = em_mix64(h);
    return h ? h : 1;
}

/* refill brings a bucket up to date; both buckets share this rule. */
static void refill(double *tokens, uint64_t *last, uint64_t now, double per_ms, double cap)
{
    if (now > *last) {
        *tokens += (double)(now - *last) * per_ms;
        if (*tokens > cap)
            *tokens = cap;
    }
    *last = now;
}

/* peer_slot_get finds or claims the slot of id (caller holds mu).  When the
 * probe window is full, the slot with the most tokens - the least suspicious
 * address - is recycled, so an attacker cannot flush its own record by
 * cycling through many addresses without also refilling it. */
static peer_slot *peer_slot_get(srv_auth *a, uint64_t id, uint64_t now)
{
    double cap = a->lim.ip_burst, per_ms = 1.0 / a->lim.ip_refill_ms;
    size_t base = (size_t)id & (PEERS - 1), best = base;
    double best_tokens = -1;
    for (size_t i = 0; i < PEER_PROBE; i++) {
        peer_slot *s = &a->peers[(base + i) & (PEERS - 1)];
        if (s->id == id) {
            refill(&s->tokens, &s->last_ms, now, per_ms, cap);
            return s;
        }
        double t = !s->id ? cap + 1
                   : s->tokens + (now > s->last_ms ? (double)(now - s->last_ms) * per_ms : 0);
        if (t > best_tokens) {
            best_tokens = t;
            best = (base + i) & (PEERS - 1);
        }
    }
    peer_slot *s = &a->peers[best];
    s->id = id;
    s->tokens = cap;
    s->last_ms = now;
    return s;
}

/* give_back returns the failure slot srv_auth_login reserved for an
 * attempt that did not fail (never above the burst). */
static void give_back(srv_auth *a, uint64_t id, uint64_t now)
{
    pthread_mutex_lock(&a->mu);
    peer_slot *s = peer_slot_get(a, id, now);
    s->tokens += 1.0;
    if (s->tokens > a->lim.ip_burst)
        s->tokens = a->lim.ip_burst;
    pthread_mutex_unlock(&a->mu);
}

int srv_auth_login(srv_auth *a, const char *peer, const uint8_t *user, size_t ulen,
                   const uint8_t *pw, size_t pwlen, uint64_t now_ms)
{
    if (!a)
        return EM_AUTH;
    /* Check and record in one step: each attempt takes its failure's token
     * before it hashes, and gives it back if it did not fail.  Reading the
     * tokens first and taking them after the (milliseconds-long) hash let
     * any number of concurrent attempts from one address pass the limit. */
    uint64_t id = peer_id(peer);
    pthread_mutex_lock(&a->mu);
    peer_slot *s = peer_slot_get(a, id, now_ms);
    int refused = s->tokens < 1.0;
    if (!refused)
        s->tokens -= 1.0;
    pthread_mutex_unlock(&a->mu);
    if (refused)
        return EM_TOOMANY;

    static const uint8_t empty[1] = {0};
    if (!pw)
        pw = empty, pwlen = 0;
    if (!user || ulen == 0)
        return EM_AUTH;     /* no credentials: nothing to hash, but a failure */
    auth_user *u = find_user(a, user, ulen);
    if (check_fast(a, u, pw, pwlen)) {
        give_back(a, id, now_ms);
        return 0;
    }

    /* The slow hash costs milliseconds of a worker thread: bound how many
     * run per second across all clients. */
    pthread_mutex_lock(&a->mu);
    refill(&a->slow_tokens, &a->slow_last_ms, now_ms, a->lim.slow_per_sec / 1000.0,
           a->lim.slow_burst);
    int busy = a->slow_tokens < 1.0;
    if (!busy)
        a->slow_tokens -= 1.0;
    pthread_mutex_unlock(&a->mu);
    if (busy) {
        give_back(a, id, now_ms);   /* not checked, so not a failure */
        return EM_TOOMANY;
    }

    int ok = check_slow(a, u, pw, pwlen);
    if (ok)
        give_back(a, id, now_ms);
    return ok ? 0 : EM_AUTH;
}

/* ---- writing the file ---------------------------------------------------- */

int srv_auth_hash_line(const char *user, const char *pw, uint32_t iterations, char *out,
                       size_t cap)
{
    size_t ulen = user ? strlen(user) : 0;
    if (!valid_user(user, ulen) || !pw)
        return EM_INVAL;
    if (iterations < SRV_AUTH_MIN_ITERATIONS)
        iterations = SRV_AUTH_MIN_ITERATIONS;
    uint8_t salt[SALT_LEN], key[KEY_LEN];
    if (RAND_bytes(salt, SALT_LEN) != 1)
        return EM_IO;
    if (derive((const uint8_t *)pw, strlen(pw), salt, iterations, key))
        return EM_INVAL;
    char sh[2 * SALT_LEN + 1], kh[2 * KEY_LEN + 1];
    tohex(salt, SALT_LEN, sh);
    tohex(key, KEY_LEN, kh);
    OPENSSL_cleanse(key, sizeof key);
    int k = snprintf(out, cap, "%s:%s$%u$%s$%s", user, SCHEME, iterations, sh, kh);
    return k > 0 && (size_t)k < cap ? 0 : EM_RANGE;
}

/* rewrite copies path to path.tmp without user's line, appends extra (may be
 * NULL), then renames over path.  *found says whether user had a line. */
static int rewrite(const char *path, const char *user, const char *extra, int *found)
{
    *found = 0;
    size_t ulen = strlen(user);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    FILE *in = fopen(path, "re");
    if (!in && errno != ENOENT)
        return -errno;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = -errno;
        if (in)
            fclose(in);
        return e;
    }
    fchmod(fd, 0600);
    FILE *out = fdopen(fd, "w");
    if (!out) {
        int e = -errno;
        close(fd);
        if (in)
            fclose(in);
        unlink(tmp);
        return e;
    }
    int rc = 0;
    char line[LINE_MAX_];
    while (in && fgets(line, sizeof line, in)) {
        if (!strchr(line, '\n') && !feof(in)) {
            rc = EM_CONFIG;
            break;
        }
        if (!is_blank(line)) {
            char copy[LINE_MAX_];
            memcpy(copy, line, sizeof copy);
            auth_user u;
            if (parse_line(copy, &u)) {
                rc = EM_CONFIG;     /* never silently drop a line we cannot read */
                break;
            }
            if (u.nlen == ulen && !memcmp(u.name, user, ulen)) {
                *found = 1;
                continue;
            }
        }
        fputs(line, out);
        if (!strchr(line, '\n'))
            fputc('\n', out);
    }
    if (!rc && in && ferror(in))
        rc = EM_IO;
    if (!rc && extra)
        fprintf(out, "%s\n", extra);
    if (!rc && (fflush(out) || fsync(fileno(out))))
        rc = -errno;
    if (fclose(out) && !rc)
        rc = -errno;
    if (in)
        fclose(in);
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}

int srv_auth_add_user(const char *path, const char *user, const char *pw)
{
    char line[LINE_MAX_];
    if (!path || !pw || !*pw)
        return EM_INVAL;
    int rc = srv_auth_hash_line(user, pw, SRV_AUTH_DEFAULT_ITERATIONS, line, sizeof line);
    if (rc)
        return rc;
    int found;
    rc = rewrite(path, user, line, &found);
    OPENSSL_cleanse(line, sizeof line);
    return rc;
}

int srv_auth_remove_user(const char *path, const char *user)
{
    if (!path || !user || !valid_user(user, strlen(user)))
        return EM_INVAL;
    int found;
    int rc = rewrite(path, user, NULL, &found);
    if (!rc && !found)
        return EM_NOTFOUND;
    return rc;
}

/* ---- command line ---------------------------------------------------------- */

/* read_password reads one line from fd 0, without echo on a terminal. */
static int read_password(const char *prompt, char *out, size_t cap)
{
    struct termios old, quiet;
    int tty = isatty(0) && tcgetattr(0, &old) == 0;
    if (tty) {
        fprintf(stderr, "%s", prompt);
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(0, TCSAFLUSH, &quiet);
    }
    size_t n = 0;
    int rc = -1;
    for (;;) {
        char ch;
        ssize_t r = read(0, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || ch == '\n') {
            rc = (r > 0 || n > 0) ? 0 : -1;
            break;
        }
        if (n + 1 >= cap)
            break;
        out[n++] = ch;
    }
    if (n && out[n - 1] == '\r')
        n--;
    out[n] = 0;
    if (tty) {
        tcsetattr(0, TCSAFLUSH, &old);
        fprintf(stderr, "\n");
    }
    return rc;
}

int srv_auth_cli(int argc, char **argv, const char *default_path)
{
    const char *add = NULL, *del = NULL, *path = default_path;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char **slot = !strcmp(arg, "--add-user") ? &add
                            : !strcmp(arg, "--remove-user") ? &del
                            : (!strcmp(arg, "--users") || !strcmp(arg, "--users-file") ||
                               !strcmp(arg, "--users_file")) ? &path : NULL;
        if (!slot)
            continue;
        if (i + 1 >= argc) {
            fprintf(stderr, "emberd: %s needs a value\n", arg);
            return 2;
        }
        *slot = argv[++i];
    }
    if (!add && !del)
        return -1;
    if (add && del) {
        fprintf(stderr, "emberd: use one of --add-user and --remove-user\n");
        return 2;
    }
    if (!path) {
        fprintf(stderr, "emberd: --users-file FILE (or users_file in the config) is required to manage users\n");
        return 2;
    }
    int rc;
    if (del) {
        rc = srv_auth_remove_user(path, del);
        if (rc) {
            fprintf(stderr, "emberd: cannot remove user '%s' from %s: %s\n", del, path,
                    em_strerror(rc));
            return rc == EM_INVAL ? 2 : 1;
        }
        fprintf(stderr, "emberd: removed user '%s' from %s\n", del, path);
        return 0;
    }
    if (!valid_user(add, strlen(add))) {
        fprintf(stderr, "emberd: bad user name '%s' (1-255 bytes, no ':' or control characters)\n",
                add);
        return 2;
    }
    char pw[LINE_MAX_], again[LINE_MAX_];
    const char *env = getenv("EMBER_PASSWORD");
    if (env) {
        snprintf(pw, sizeof pw, "%s", env);
    } else {
        if (read_password("password: ", pw, sizeof pw)) {
            fprintf(stderr, "emberd: no password given (stdin or $EMBER_PASSWORD)\n");
            return 2;
        }
        if (isatty(0)) {
            if (read_password("again: ", again, sizeof again) || strcmp(pw, again)) {
                OPENSSL_cleanse(pw, sizeof pw);
                OPENSSL_cleanse(again, sizeof again);
                fprintf(stderr, "emberd: passwords differ\n");
                return 2;
            }
            OPENSSL_cleanse(again, sizeof again);
        }
    }
    if (!pw[0]) {
        fprintf(stderr, "emberd: empty password refused\n");
        return 2;
    }
    rc = srv_auth_add_user(path, add, pw);
    OPENSSL_cleanse(pw, sizeof pw);
    if (rc) {
        fprintf(stderr, "emberd: cannot add user '%s' to %s: %s\n", add, path, em_strerror(rc));
        return 1;
    }
    fprintf(stderr, "emberd: user '%s' saved in %s\n", add, path);
    return 0;
}
