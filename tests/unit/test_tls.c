/* test_tls.c - net/tls.c: certificates are made at test time with the
 * OpenSSL API (a CA, a server and a client certificate), the server side
 * runs through ember's non-blocking wrappers on one end of a socketpair and
 * a blocking OpenSSL client runs on the other end in a thread. */
#include "test.h"

#include "net/tls.h"
#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- certificates ---------------------------------------------------------- */

typedef struct pki {
    char dir[64];
    char ca[128], srv_cert[128], srv_key[128], cli_cert[128], cli_key[128];
    char rogue_cert[128], rogue_key[128];
} pki;

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v;
    X509V3_set_ctx_nodb(&v);
    X509V3_set_ctx(&v, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v, nid, value);
    if (e) {
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
}

static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, int ca)
{
    static long serial = 1;
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, key);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n);
    X509 *iss = issuer ? issuer : x;
    if (ca) {
        add_ext(x, iss, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(x, iss, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(x, iss, NID_basic_constraints, "CA:FALSE");
        add_ext(x, iss, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    }
    X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256());
    return x;
}

static int write_pem(const char *path, X509 *x, EVP_PKEY *k)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = x ? PEM_write_X509(f, x) : PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    return ok == 1 ? 0 : -1;
}

static int make_pki(pki *p)
{
    snprintf(p->dir, sizeof p->dir, "/tmp/ember-tls-XXXXXX");
    if (!mkdtemp(p->dir))
        return -1;
#define P(field, name) snprintf(p->field, sizeof p->field, "%s/" name, p->dir)
    P(ca, "ca.pem"); P(srv_cert, "server.pem"); P(srv_key, "server.key");
    P(cli_cert, "client.pem"); P(cli_key, "client.key");
    P(rogue_cert, "rogue.pem"); P(rogue_key, "rogue.key");
#undef P
    EVP_PKEY *cak = EVP_EC_gen("P-256"), *sk = EVP_EC_gen("P-256"), *ck = EVP_EC_gen("P-256"),
             *rk = EVP_EC_gen("P-256");
    if (!cak || !sk || !ck || !rk)
        return -1;
    X509 *ca = make_cert(cak, "ember test CA", NULL, NULL, 1);
    X509 *srv = make_cert(sk, "localhost", ca, cak, 0);
    X509 *cli = make_cert(ck, "client1", ca, cak, 0);
    X509 *rogue = make_cert(rk, "rogue", NULL, NULL, 0);
    int rc = write_pem(p->ca, ca, NULL) | write_pem(p->srv_cert, srv, NULL) |
             write_pem(p->srv_key, NULL, sk) | write_pem(p->cli_cert, cli, NULL) |
             write_pem(p->cli_key, NULL, ck) | write_pem(p->rogue_cert, rogue, NULL) |
             write_pem(p->rogue_key, NULL, rk);
    X509_free(ca); X509_free(srv); X509_free(cli); X509_free(rogue);
    EVP_PKEY_free(cak); EVP_PKEY_free(sk); EVP_PKEY_free(ck); EVP_PKEY_free(rk);
    return rc;
}

static void drop_pki(pki *p)
{
    unlink(p->ca); unlink(p->srv_cert); unlink(p->srv_key); unlink(p->cli_cert);
    unlink(p->cli_key); unlink(p->rogue_cert); unlink(p->rogue_key);
    rmdir(p->dir);
}

/* ---- the client thread ------------------------------------------------------ */

#define BIG (1u << 20)

typedef struct client {
    int         fd;
    const char *ca;          /* verify the server with this CA */
    const char *cert, *key;  /* client certificate, optional */
    int         max_version; /* 0 = any */
    int         plaintext;   /* send a thin-client handshake without TLS */
    int         echo;        /* exchange data after the handshake */
    /* results */
    int         connected;
    int         got_big;     /* received BIG bytes of the right pattern */
    int         eof;         /* plaintext: saw the connection close */
    char        version[16];
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    if (c->plaintext) {
        static const unsigned char hs[] = {8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2};
        ssize_t w = send(c->fd, hs, sizeof hs, MSG_NOSIGNAL);
        (void)w;
        char buf[256];
        struct pollfd pf = {c->fd, POLLIN, 0};
        for (int i = 0; i < 20; i++) {
            if (poll(&pf, 1, 100) <= 0)
                continue;
            ssize_t r = recv(c->fd, buf, sizeof buf, 0);
            if (r <= 0) {
                c->eof = 1;
                break;
            }
        }
        return NULL;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (c->max_version) {
        SSL_CTX_set_security_level(ctx, 0);     /* let it even offer TLS 1.1 */
        SSL_CTX_set_min_proto_version(ctx, TLS1_VERSION);
        SSL_CTX_set_max_proto_version(ctx, c->max_version);
    }
    SSL_CTX_load_verify_locations(ctx, c->ca, NULL);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (c->cert) {
        SSL_CTX_use_certificate_file(ctx, c->cert, SSL_FILETYPE_PEM);
        SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM);
    }
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, c->fd);
    SSL_set1_host(ssl, "localhost");
    if (SSL_connect(ssl) == 1) {
        c->connected = 1;
        snprintf(c->version, sizeof c->version, "%s", SSL_get_version(ssl));
        if (c->echo) {
            SSL_write(ssl, "hello", 5);
            /* Read late, so the server fills the socket and must wait on
             * WANT_WRITE at least once. */
            usleep(200000);
            unsigned char *buf = malloc(BIG);
            size_t got = 0;
            while (got < BIG) {
                int r = SSL_read(ssl, buf + got, (int)(BIG - got));
                if (r <= 0)
                    break;
                got += (size_t)r;
            }
            int ok = got == BIG;
            for (size_t i = 0; ok && i < BIG; i++)
                ok = buf[i] == (unsigned char)(i * 7);
            c->got_big = ok;
            free(buf);
            SSL_shutdown(ssl);
        }
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    shutdown(c->fd, SHUT_RDWR);
    return NULL;
}

/* ---- the server side through net/tls ----------------------------------------- */

static int wait_for(int fd, int want)
{
    struct pollfd pf = {fd, (short)(want == NET_TLS_WANT_WRITE ? POLLOUT : POLLIN), 0};
    return poll(&pf, 1, 5000) == 1 ? 0 : EM_TIMEOUT;
}

static int server_handshake(net_tls *t, int fd)
{
    for (;;) {
        int want;
        int rc = net_tls_handshake_step(t, &want);
        if (rc != EM_AGAIN)
            return rc;
        if (wait_for(fd, want))
            return EM_TIMEOUT;
    }
}

static int server_read_n(net_tls *t, int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        int want;
        ssize_t r = net_tls_read(t, buf + got, n - got, &want);
        if (r > 0) {
            got += (size_t)r;
        } else if (r == EM_AGAIN) {
            if (wait_for(fd, want))
                return EM_TIMEOUT;
        } else {
            return r == 0 ? EM_CLOSED : (int)r;
        }
    }
    return 0;
}

static int server_write_all(net_tls *t, int fd, const uint8_t *p, size_t n, int *agains)
{
    size_t off = 0;
    while (off < n) {
        int want;
        ssize_t w = net_tls_write(t, p + off, n - off, &want);
        if (w > 0) {
            off += (size_t)w;
        } else if (w == EM_AGAIN) {
            (*agains)++;
            if (wait_for(fd, want))
                return EM_TIMEOUT;
        } else {
            return (int)w;
        }
    }
    return 0;
}

/* run_server: one connection through the wrappers; returns the handshake
 * result (and runs the echo exchange when c->echo). */
static int run_case(net_tls_ctx *ctx, client *c, char *subject, size_t sublen, int *peer_ok)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return -errno;
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    c->fd = sv[1];
    pthread_t th;
    pthread_create(&th, NULL, client_main, c);
    net_tls *t;
    int rc = net_tls_new(ctx, sv[0], 0, &t);
    if (rc == 0) {
        rc = server_handshake(t, sv[0]);
        if (rc == 0 && subject)
            *peer_ok = net_tls_peer_subject(t, subject, sublen);
        if (rc == 0 && c->echo) {
            char in[5];
            rc = server_read_n(t, sv[0], in, 5);
            if (rc == 0 && memcmp(in, "hello", 5) != 0)
                rc = EM_PROTO;
            uint8_t *big = em_malloc(BIG);
            for (size_t i = 0; big && i < BIG; i++)
                big[i] = (uint8_t)(i * 7);
            int agains = 0;
            if (rc == 0)
                rc = big ? server_write_all(t, sv[0], big, BIG, &agains) : EM_NOMEM;
            em_free(big);
            /* the socketpair holds far less than 1 MiB: writes must have waited */
            if (rc == 0 && agains == 0)
                rc = EM_RANGE;
            /* then the client's close_notify reads as a clean close */
            char x;
            if (rc == 0)
                rc = server_read_n(t, sv[0], &x, 1) == EM_CLOSED ? 0 : EM_PROTO;
        }
        if (rc == 0)
            net_tls_close_notify(t);
        net_tls_free(t);
    }
    close(sv[0]);       /* a failed handshake: the loop just closes */
    pthread_join(th, NULL);
    close(sv[1]);
    return rc;
}

static int make_ctx(const pki *p, int verify, net_tls_ctx **ctx)
{
    net_tls_options o = {p->srv_cert, p->srv_key, verify ? p->ca : NULL, verify, NULL, NULL, 0};
    char err[256];
    int rc = net_tls_ctx_new(&o, ctx, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    return rc;
}

TEST(tls_handshake_and_data_13_and_12)
{
    pki p;
    REQUIRE_OK(make_pki(&p));
    net_tls_ctx *ctx;
    REQUIRE_OK(make_ctx(&p, 0, &ctx));
    client c = {.ca = p.ca, .echo = 1};
    CHECK_OK(run_case(ctx, &c, NULL, 0, NULL));
    CHECK(c.connected);
    CHECK(c.got_big);
    CHECK(strcmp(c.version, "TLSv1.3") == 0);

    client c12 = {.ca = p.ca, .echo = 1, .max_version = TLS1_2_VERSION};
    CHECK_OK(run_case(ctx, &c12, NULL, 0, NULL));
    CHECK(c12.connected);
    CHECK(c12.got_big);
    CHECK(strcmp(c12.version, "TLSv1.2") == 0);
    net_tls_ctx_free(ctx);
    drop_pki(&p);
}

TEST(tls_old_versions_refused)
{
    pki p;
    REQUIRE_OK(make_pki(&p));
    net_tls_ctx *ctx;
    REQUIRE_OK(make_ctx(&p, 0, &ctx));
    client c = {.ca = p.ca, .max_version = TLS1_1_VERSION};
    int rc = run_case(ctx, &c, NULL, 0, NULL);
    CHECK(rc == EM_PROTO || rc == EM_CLOSED);
    CHECK(!c.connected);
    client c10 = {.ca = p.ca, .max_version = TLS1_VERSION};
    rc = run_case(ctx, &c10, NULL, 0, NULL);
    CHECK(rc == EM_PROTO || rc == EM_CLOSED);
    CHECK(!c10.connected);
    net_tls_ctx_free(ctx);
    drop_pki(&p);
}

TEST(tls_plaintext_client_closed_cleanly)
{
    pki p;
    REQUIRE_OK(make_pki(&p));
    net_tls_ctx *ctx;
    REQUIRE_OK(make_ctx(&p, 0, &ctx));
    client c = {.plaintext = 1};
    CHECK_EQ(run_case(ctx, &c, NULL, 0, NULL), EM_PROTO);
    CHECK(net_tls_errstr()[0] != 0);
    CHECK(c.eof);
    /* the context still serves a proper client afterwards */
    client ok = {.ca = p.ca, .echo = 1};
    CHECK_OK(run_case(ctx, &ok, NULL, 0, NULL));
    CHECK(ok.got_big);
    net_tls_ctx_free(ctx);
    drop_pki(&p);
}

TEST(tls_client_certificates)
{
    pki p;
    REQUIRE_OK(make_pki(&p));
    net_tls_ctx *ctx;
    REQUIRE_OK(make_ctx(&p, NET_TLS_VERIFY_REQUIRE, &ctx));
    char subject[256];
    int peer_ok = 0;
    client good = {.ca = p.ca, .cert = p.cli_cert, .key = p.cli_key, .echo = 1};
    CHECK_OK(run_case(ctx, &good, subject, sizeof subject, &peer_ok));
    CHECK(good.got_big);
    CHECK(peer_ok == 1);
    CHECK(strstr(subject, "CN=client1") != NULL);
    /* TLS 1.3 clients learn of a refused certificate only when they read, so
     * the server's verdict is what counts here */
    client none = {.ca = p.ca, .echo = 1};
    CHECK(run_case(ctx, &none, NULL, 0, NULL) < 0);
    CHECK(!none.got_big);
    client rogue = {.ca = p.ca, .cert = p.rogue_cert, .key = p.rogue_key, .echo = 1};
    CHECK(run_case(ctx, &rogue, NULL, 0, NULL) < 0);
    CHECK(!rogue.got_big);
    net_tls_ctx_free(ctx);

    /* optional: no certificate is fine, a bad one is not */
    REQUIRE_OK(make_ctx(&p, NET_TLS_VERIFY_OPTIONAL, &ctx));
    client none2 = {.ca = p.ca, .echo = 1};
    peer_ok = 1;
    CHECK_OK(run_case(ctx, &none2, subject, sizeof subject, &peer_ok));
    CHECK(peer_ok == 0);
    CHECK(none2.got_big);
    client rogue2 = {.ca = p.ca, .cert = p.rogue_cert, .key = p.rogue_key, .echo = 1};
    CHECK(run_case(ctx, &rogue2, NULL, 0, NULL) < 0);
    net_tls_ctx_free(ctx);
    drop_pki(&p);
}

TEST(tls_context_errors)
{
    pki p;
    REQUIRE_OK(make_pki(&p));
    net_tls_ctx *ctx = NULL;
    char err[256];
    net_tls_options o = {"/nonexistent/cert.pem", NULL, NULL, 0, NULL, NULL, 0};
    CHECK_EQ(net_tls_ctx_new(&o, &ctx, err, sizeof err), EM_CONFIG);
    CHECK(strstr(err, "/nonexistent/cert.pem") != NULL);
    net_tls_options mism = {p.srv_cert, p.cli_key, NULL, 0, NULL, NULL, 0};
    CHECK_EQ(net_tls_ctx_new(&mism, &ctx, err, sizeof err), EM_CONFIG);
    CHECK(strstr(err, "mismatch") != NULL || strstr(err, "does not match") != NULL);
    net_tls_options noca = {p.srv_cert, p.srv_key, NULL, NET_TLS_VERIFY_REQUIRE, NULL, NULL, 0};
    CHECK_EQ(net_tls_ctx_new(&noca, &ctx, err, sizeof err), EM_CONFIG);
    net_tls_options nocert = {NULL, NULL, NULL, 0, NULL, NULL, 0};
    CHECK_EQ(net_tls_ctx_new(&nocert, &ctx, err, sizeof err), EM_CONFIG);
    net_tls_options badciph = {p.srv_cert, p.srv_key, NULL, 0, "NOT-A-CIPHER", NULL, 0};
    CHECK_EQ(net_tls_ctx_new(&badciph, &ctx, err, sizeof err), EM_CONFIG);
    CHECK(ctx == NULL);
    drop_pki(&p);
}

/* ---- node-to-node links (peer contexts) ------------------------------------- */

/* peer_pair: a handshake between a connecting end (ctx a) and an accepting
 * end (ctx b) over a socketpair, both stepped from this thread; then a few
 * bytes from a to b.  0 when both ends finished and the bytes arrived. */
static int peer_pair(net_tls_ctx *a, net_tls_ctx *b)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        return EM_IO;
    net_tls *ta = NULL, *tb = NULL;
    int rc = net_tls_new(a, sv[0], 1, &ta);
    if (!rc)
        rc = net_tls_new(b, sv[1], 0, &tb);
    int done_a = 0, done_b = 0;
    for (int i = 0; !rc && (!done_a || !done_b) && i < 1000; i++) {
        int want;
        if (!done_a) {
            int r = net_tls_handshake_step(ta, &want);
            if (r == 0)
                done_a = 1;
            else if (r != EM_AGAIN)
                rc = r;
        }
        if (!rc && !done_b) {
            int r = net_tls_handshake_step(tb, &want);
            if (r == 0)
                done_b = 1;
            else if (r != EM_AGAIN)
                rc = r;
        }
        if (!rc && (!done_a || !done_b)) {
            struct pollfd pf[2] = {{sv[0], POLLIN, 0}, {sv[1], POLLIN, 0}};
            (void)poll(pf, 2, 100);
        }
    }
    if (!rc && (!done_a || !done_b))
        rc = EM_TIMEOUT;
    if (!rc) {
        int want;
        char buf[8];
        ssize_t r = net_tls_write(ta, "ping", 4, &want);
        rc = r == 4 ? 0 : EM_IO;
        for (int i = 0; !rc && i < 100; i++) {
            r = net_tls_read(tb, buf, sizeof buf, &want);
            if (r == 4 && memcmp(buf, "ping", 4) == 0)
                break;
            if (r != EM_AGAIN)
                rc = EM_IO;
            else
                (void)wait_for(sv[1], want);
        }
        /* Either side of a peer link sees a verified certificate. */
        char sub[128];
        if (!rc && (!net_tls_peer_subject(ta, sub, sizeof sub) ||
                    !net_tls_peer_subject(tb, sub, sizeof sub)))
            rc = EM_AUTH;
    }
    net_tls_free(ta);
    net_tls_free(tb);
    close(sv[0]);
    close(sv[1]);
    return rc;
}

TEST(tls_peer_links_check_both_ends)
{
    pki p;
    REQUIRE_OK(make_pki(&p));
    char err[256];
    net_tls_ctx *n1 = NULL, *n2 = NULL, *rogue = NULL, *server_only = NULL;
    net_tls_options o1 = {.cert_file = p.srv_cert, .key_file = p.srv_key, .ca_file = p.ca, .peer = 1};
    net_tls_options o2 = {.cert_file = p.cli_cert, .key_file = p.cli_key, .ca_file = p.ca, .peer = 1};
    net_tls_options orogue = {.cert_file = p.rogue_cert, .key_file = p.rogue_key, .ca_file = p.ca,
                              .peer = 1};
    REQUIRE_OK(net_tls_ctx_new(&o1, &n1, err, sizeof err));
    REQUIRE_OK(net_tls_ctx_new(&o2, &n2, err, sizeof err));
    REQUIRE_OK(net_tls_ctx_new(&orogue, &rogue, err, sizeof err));
    /* Two members of the same CA, either one connecting. */
    CHECK_EQ(peer_pair(n1, n2), 0);
    CHECK_EQ(peer_pair(n2, n1), 0);
    /* A certificate of another CA is refused whichever end it is on. */
    CHECK(peer_pair(rogue, n1) != 0);
    CHECK(peer_pair(n1, rogue) != 0);
    /* A peer context without a CA cannot check anyone: refused at start. */
    net_tls_options noca = {.cert_file = p.srv_cert, .key_file = p.srv_key, .peer = 1};
    CHECK_EQ(net_tls_ctx_new(&noca, &server_only, err, sizeof err), EM_CONFIG);
    CHECK(strstr(err, "tls_ca") != NULL);
    net_tls_ctx_free(n1);
    net_tls_ctx_free(n2);
    net_tls_ctx_free(rogue);
    drop_pki(&p);
}
