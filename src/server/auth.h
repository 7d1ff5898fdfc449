/* auth.h - emberd's users file, password checks and failed-login limiter.
 *
 * The thin-client handshake carries a username and password (protocol >=
 * 1.1.0, ignite-thin-protocol.md §1.2 and §1.9); emberd checks them against a
 * users file of salted slow hashes.  File format (one user per line; '#'
 * comments and blank lines allowed):
 *
 *   USER:pbkdf2-sha256$ITERATIONS$SALT_HEX$HASH_HEX
 *
 *   | field      | meaning                                             |
 *   |------------|-----------------------------------------------------|
 *   | USER       | 1..255 bytes of UTF-8, no ':' and no control bytes  |
 *   | ITERATIONS | PBKDF2-HMAC-SHA256 rounds, >= 100000 (default 100000)|
 *   | SALT_HEX   | 16 random bytes as 32 lowercase hex digits          |
 *   | HASH_HEX   | 32-byte derived key as 64 lowercase hex digits      |
 *
 * The file is written 0600 through a temporary file and rename(2).
 */
#ifndef EM_SRV_AUTH_H
#define EM_SRV_AUTH_H

#include <stddef.h>
#include <stdint.h>

typedef struct srv_auth srv_auth;

#define SRV_AUTH_DEFAULT_ITERATIONS 100000u
#define SRV_AUTH_MIN_ITERATIONS     100000u

/* Failed-login limits.  Zero fields take the defaults shown. */
typedef struct srv_auth_limits {
    uint32_t ip_burst;       /* failures an address may make in a row (5) */
    uint32_t ip_refill_ms;   /* one failure is forgiven per this many ms (2000) */
    uint32_t slow_burst;     /* slow hash checks allowed in a burst, all clients (16) */
    uint32_t slow_per_sec;   /* slow hash checks per second sustained (8) */
} srv_auth_limits;

/* srv_auth_load reads the users file at path.  lim may be NULL (defaults).
 * Returns 0, -errno if the file cannot be read, or EM_CONFIG (a malformed or
 * weak line; *bad_line, if not NULL, gets its 1-based number). */
int  srv_auth_load(const char *path, const srv_auth_limits *lim, srv_auth **out,
                   int *bad_line);
void srv_auth_free(srv_auth *a);

/* srv_auth_count: number of users loaded. */
size_t srv_auth_count(const srv_auth *a);

/* srv_auth_check: 0 if user/pw match a line of the file, else EM_AUTH.
 * Thread-safe.  Constant-time comparison; every slow check costs the same
 * number of hash iterations - the largest of the file's users - whether the
 * user exists or not, so timing tells no names apart.  After a password has been verified once, later
 * checks of the same password compare a keyed HMAC held in memory (a few
 * microseconds instead of a slow hash): reconnect storms stay cheap. */
int  srv_auth_check(srv_auth *a, const uint8_t *user, size_t ulen,
                    const uint8_t *pw, size_t pwlen);

/* srv_auth_work: PBKDF2 iterations run so far by srv_auth_check and
 * srv_auth_login (the work an attacker can time; tests count it). */
uint64_t srv_auth_work(srv_auth *a);

/* srv_auth_login: srv_auth_check behind the limiter.  peer identifies the
 * client: net_conn_peer's "address:port" text (the part after the last ':'
 * is dropped, so IPv6 "::1:5678" works), "[v6]:port", or a bare IPv4
 * address.
 * Returns 0, EM_AUTH (wrong user or password), or EM_TOOMANY (refused
 * without checking: this address failed too often, or the server is doing
 * too many slow checks right now - retry later).  An attempt reserves its
 * address's failure slot before it checks (given back unless it fails), so
 * concurrent attempts from one address never exceed the limit.  now_ms: em_now_ms().
 * A handshake without credentials (user NULL or empty) fails at once, with
 * no hash computed, and counts as a failure of its address.  pw may be
 * NULL (= empty). */
int  srv_auth_login(srv_auth *a, const char *peer, const uint8_t *user, size_t ulen,
                    const uint8_t *pw, size_t pwlen, uint64_t now_ms);

/* srv_auth_hash_line formats "user:pbkdf2-sha256$..." for pw with a fresh
 * random salt into out (NUL-terminated).  0, EM_INVAL (bad user name), or
 * EM_RANGE (out too small; 256 + strlen(user) bytes always suffice). */
int  srv_auth_hash_line(const char *user, const char *pw, uint32_t iterations,
                        char *out, size_t cap);

/* srv_auth_add_user adds user to the file at path (created 0600 if missing)
 * or replaces its password.  0, EM_INVAL, EM_CONFIG (existing file is
 * malformed), or -errno. */
int  srv_auth_add_user(const char *path, const char *user, const char *pw);

/* srv_auth_remove_user deletes user's line.  0, EM_NOTFOUND, or -errno. */
int  srv_auth_remove_user(const char *path, const char *user);

/* srv_auth_cli handles the user-management command line of emberd:
 *   emberd --add-user USER [--users-file FILE]
 *   emberd --remove-user USER [--users-file FILE]
 * (--users and --users_file are accepted too; other arguments are ignored.)
 * The password comes from $EMBER_PASSWORD, else stdin (one line; prompted
 * twice without echo when stdin is a terminal).  default_path is used when
 * --users is absent (NULL: --users is required).  Returns -1 if argv holds
 * neither --add-user nor --remove-user (the caller goes on to serve),
 * otherwise the process exit code (0 ok, 1 failure, 2 usage). */
int  srv_auth_cli(int argc, char **argv, const char *default_path);

#endif
