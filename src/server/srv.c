/* srv.c - emberd's configuration keys and the glue between net/ (sockets)
 * and proto/ (the thin-client protocol): net calls back on open, data and
 * close; proto consumes frames and appends replies.
 */
#include "server/srv.h"

#include <errno.h>
#include <ini.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "binary/binary.h"
#include "cluster/cl_hist.h"
#include "net/net.h"
#include "net/tls.h"
#include "proto/proto.h"
#include "server/auth.h"
#include "server/dash.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/srv_cluster.h"
#include "server/srv_meta.h"
#include "store/store.h"
#include "util/clock.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

struct srv {
    st_store     *st;
    bin_registry *reg;
    pr_server    *ps;
    net_server   *net;
    srv_auth     *auth;             /* NULL = no users file */
    net_tls_ctx  *tls;              /* NULL = plaintext port */
    srv_metrics  *metrics;
    srv_http     *http;             /* NULL = no HTTP endpoint */
    int           count_requests;   /* metrics = true: per-request counters */
    wal          *wal;              /* NULL without persistence */
    srv_meta     *meta;
    srv_cluster  *cluster;          /* NULL when not in a cluster */
    cl_hist      *hist;             /* a persistent member's update log (historical rebalancing) */
    int           deferred;         /* FSYNC: replies wait for wal_commit_wait */
    int           wal_fail_logged;  /* srv_maintain reported wal_error */
    int           wal_leave;        /* ... and this member still has to leave */
    uint64_t      wal_leave_ms;     /* when to ask again */
    /* The same pointer for worker threads: they start (and may answer the
     * debug op) before net_server_start returns. */
    _Atomic(net_server *) net_pub;
    /* tx_wake calls using net_pub now: srv_stop unpublishes it, then waits
     * for these to end before the server goes (the transport's threads wake
     * the loops until the cluster stops, after the net server). */
    _Atomic int   net_users;
};

/* Per-connection state: the protocol state and the worker's counters. */
typedef struct srv_conn {
    pr_conn           *pc;
    srv_metrics_block *mb;
    int                count;       /* metrics = true: count wire bytes too */
} srv_conn;

/* ---- configuration ------------------------------------------------------ */

void srv_config_default(srv_config *c)
{
    memset(c, 0, sizeof *c);
    strcpy(c->host, "127.0.0.1");
    c->port = 10800;
    strcpy(c->cluster_name, "ember");
    c->cluster_port = 47100;
    c->raft_port = 47500;
    c->failure_detection_timeout_ms = 10000;
    c->max_message_size = 64u << 20;
    c->max_handshake_size = 1u << 20;
    c->handshake_timeout_ms = 10000;
    c->max_connections = 10000;
    c->max_cursors = 128;
    c->sql_threads = 1;
    c->sql_query_memory = 256u << 20;
    c->max_depth = 64;
    c->max_output_queue = 4u << 20;
    c->output_hard_cap = 256u << 20;
    c->write_stall_timeout_ms = 60000;
    c->eviction = 0;
    c->log_level = EM_LOG_INFO;
    strcpy(c->tls_client_auth, "none");
    c->http = 1;
    strcpy(c->http_host, "127.0.0.1");
    c->http_port = 8080;
    c->http_timeout_ms = 5000;
    c->metrics = 1;
    strcpy(c->wal_path, "./ember-data");
    c->wal_mode = WAL_LOG_ONLY;
    c->wal_segment_size = 64u << 20;
    c->wal_flush_frequency_ms = 2000;
    c->checkpoint_frequency_ms = 180000;
    c->rebalance_history_size = 64u << 20;
}

/* parse_u64 reads a decimal number with an optional unit: sizes take
 * k/m/g (powers of 1024), times take ms (default) or s. */
static int parse_u64(const char *v, int time, uint64_t max, uint64_t *out)
{
    if (!v || !*v)
        return -1;
    errno = 0;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || v[0] == '-')
        return -1;
    uint64_t mul = 1;
    while (*end == ' ')
        end++;
    if (time) {
        if (!strcasecmp(end, "s"))
            mul = 1000;
        else if (*end && strcasecmp(end, "ms"))
            return -1;
    } else if (*end) {
        char u = (char)(*end | 0x20);
        mul = u == 'k' ? 1024u : u == 'm' ? 1024u * 1024 : u == 'g' ? 1024u * 1024 * 1024 : 0;
        if (!mul || (end[1] && strcasecmp(end + 1, "b") && strcasecmp(end + 1, "ib")))
            return -1;
    }
    if (n > max / mul)
        return -1;
    *out = n * mul;
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = 1;
    else if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
        *out = 0;
    else
        return -1;
    return 0;
}

typedef struct key_desc {
    const char *key;
    char kind;          /* s string, i int, u32 size, t time ms, b bool, l log level, z u64 size,
                           w WAL mode */
    size_t off;
    size_t size;        /* strings: buffer size */
    const char *help;
} key_desc;

#define K(name, kind, field, help) { name, kind, offsetof(srv_config, field), sizeof(((srv_config *)0)->field), help }
static const key_desc keys[] = {
    K("host", 's', host, "address to listen on (127.0.0.1)"),
    K("port", 'i', port, "thin-client port (10800; 0 = any free port)"),
    K("threads", 'i', threads, "worker event loops (0 = one per CPU, 1 on 1-2 CPUs)"),
    K("sql_threads", 'i', sql_threads, "threads running SQL queries, off the event loops (1; 0 = on the loops)"),
    K("sql_query_memory", 'z', sql_query_memory, "memory one SQL query may hold for sorts, DISTINCT, GROUP BY (256m; 0 = no limit)"),
    K("max_message_size", 'u', max_message_size, "largest request after the handshake (64m)"),
    K("max_handshake_size", 'u', max_handshake_size, "largest message before the handshake succeeds (1m)"),
    K("handshake_timeout", 't', handshake_timeout_ms, "close connections without a handshake after (10000 ms; 0 = off)"),
    K("idle_timeout", 't', idle_timeout_ms, "close connections idle for (0 = off)"),
    K("max_connections", 'u', max_connections, "connections beyond this are closed at accept (10000)"),
    K("max_cursors", 'u', max_cursors, "open scan cursors per connection (128)"),
    K("max_depth", 'u', max_depth, "nesting limit of binary values (64)"),
    K("max_output_queue", 'z', max_output_queue, "queued reply bytes per connection before reading pauses (4m)"),
    K("output_hard_cap", 'z', output_hard_cap, "queued reply bytes per connection that close it (256m)"),
    K("write_stall_timeout", 't', write_stall_timeout_ms, "close a connection whose replies make no progress for (60000 ms)"),
    K("memory_limit", 'z', memory_limit, "default data region size (0 = unlimited)"),
    K("eviction", 'b', eviction, "evict entries when the region is full (false: writes fail)"),
    K("log_level", 'l', log_level, "debug, info, warn, error or off (info)"),
    K("log_file", 's', log_file, "append log lines here (stderr)"),
    K("debug_ops", 'b', debug_ops, "answer the private op 32000 with allocation counters (false)"),
    K("username", 's', username, "require this user name in handshakes (none)"),
    K("password", 's', password, "and this password"),
    K("users_file", 's', users_file, "users file with salted password hashes; enables authentication (none)"),
    K("auth_max_failures", 'u', auth_max_failures, "failed logins per client address before refusing it (5)"),
    K("auth_failure_forgive", 't', auth_failure_forgive_ms, "one failure of an address forgiven per (2000 ms)"),
    K("auth_slow_burst", 'u', auth_slow_burst, "password hash checks in a burst, all clients (16)"),
    K("auth_slow_rate", 'u', auth_slow_rate, "password hash checks per second, all clients (8)"),
    K("tls", 'b', tls, "serve the thin-client port over TLS 1.2/1.3 only (false)"),
    K("tls_cert", 's', tls_cert, "server certificate chain, PEM (none)"),
    K("tls_key", 's', tls_key, "server private key, PEM (tls_cert)"),
    K("tls_ca", 's', tls_ca, "CA certificates for client certificates, PEM (none)"),
    K("tls_client_auth", 's', tls_client_auth, "none, optional or require (none)"),
    K("tls_ciphers", 's', tls_ciphers, "TLS 1.2 cipher list (ECDHE/DHE AEAD)"),
    K("tls_ciphersuites", 's', tls_ciphersuites, "TLS 1.3 cipher suites (OpenSSL default)"),
    K("http", 'b', http, "serve /metrics and /health over HTTP (true)"),
    K("http_host", 's', http_host, "HTTP address (127.0.0.1)"),
    K("http_port", 'i', http_port, "HTTP port (8080; 0 = any free port)"),
    K("http_timeout", 't', http_timeout_ms, "HTTP request/response time limit (5000 ms)"),
    K("metrics", 'b', metrics, "count requests per op, bytes and latencies for /metrics (true)"),
    K("persistence", 'b', persistence, "persist the default data region (caches naming no region) (false)"),
    K("wal_path", 's', wal_path, "directory of WAL, checkpoints, binary metadata (./ember-data)"),
    K("wal_mode", 'w', wal_mode, "FSYNC, LOG_ONLY, BACKGROUND or NONE (LOG_ONLY)"),
    K("wal_segment_size", 'z', wal_segment_size, "WAL segment file size (64m)"),
    K("wal_flush_frequency", 't', wal_flush_frequency_ms, "BACKGROUND mode flush period (2000 ms)"),
    K("checkpoint_frequency", 't', checkpoint_frequency_ms, "checkpoint period (180000 ms; 0 = off)"),
    K("rebalance_history_size", 'z', rebalance_history_size,
      "recent updates kept for historical rebalancing of persistent caches (64m; 0 = off)"),
    K("cluster_name", 's', cluster_name, "nodes join only a cluster of the same name (ember)"),
    K("cluster_host", 's', cluster_host, "address of the cluster transport and metadata group (host)"),
    K("cluster_port", 'i', cluster_port, "node-to-node transport port (47100)"),
    K("raft_port", 'i', raft_port, "metadata group (consensus) port (47500)"),
    K("seeds", 's', seeds, "other nodes' cluster ports, ip:port,... (none: no cluster)"),
    K("bootstrap", 'b', bootstrap, "create the cluster when none exists; one node only (false)"),
    K("consistent_id", 's', consistent_id, "this node's identity for affinity (cluster_host:cluster_port)"),
    K("cluster_secret", 's', cluster_secret, "shared secret peers must prove (none)"),
    K("cluster_tls", 'b', cluster_tls, "node-to-node links in TLS with tls_cert/tls_key, peers checked against tls_ca (false)"),
    K("cluster_dir", 's', cluster_dir, "metadata group directory (a temporary one)"),
    K("exclude_neighbors", 'b', exclude_neighbors, "a partition's copies on different machines while there are enough, in every cache (Ignite's excludeNeighbors; in effect when any member sets it) (false)"),
    K("host_id", 's', host_id, "the machine this node counts as for exclude_neighbors: nodes with the same host_id are neighbours (this machine's /etc/machine-id)"),
    K("failure_detection_timeout", 't', failure_detection_timeout_ms, "a member unreachable this long is failed (10000 ms)"),
    K("baseline_auto_adjust", 'b', baseline_auto_adjust, "once a baseline is set (ember-cli cluster baseline), the coordinator sets it to the members whenever they change and then stay the same for baseline_auto_adjust_timeout (false: it changes only when an operator changes it)"),
    K("baseline_auto_adjust_timeout", 't', baseline_auto_adjust_timeout_ms, "see baseline_auto_adjust (0 ms)"),
    K("cluster_fault", 's', cluster_fault, "tests only: drop=P,dup=P,delay=P (percent of replication frames) (none)"),
    K("cluster_exit_after_writes", 'u', cluster_exit_after_writes, "tests only: exit after the Nth forwarded write ran here, before its reply (0 = never)"),
    K("cluster_tx_crash", 's', cluster_tx_crash, "tests only: prepared|committing|applied|decided|shadowed:N - exit at that point of the Nth transaction part or decision here (none)"),
    K("cluster_write_hold", 's', cluster_write_hold, "tests only: a file; while it exists, a write mapped to this node as its key's primary waits before it runs (60 s at most)"),
    K("cluster_repl_hold", 's', cluster_repl_hold, "tests only: a file; while it exists, the updates this node streams as a primary stay queued here, unsent (none)"),
    K("cluster_rebal_hold", 's', cluster_rebal_hold, "tests only: a file; while it exists, a partition this node loads asks its supplier for nothing (none)"),
    K("cluster_tx_hold", 's', cluster_tx_hold, "tests only: a file; while it exists, a transaction this node coordinates waits after deciding COMMIT, before its parts hear it (60 s at most)"),
};
#undef K

void srv_config_help(FILE *f)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        fprintf(f, "  %-22s %s\n", keys[i].key, keys[i].help);
    fprintf(f, "\nData regions: a [region:NAME] section per region (flag form:\n"
               "--region:NAME:KEY VALUE); caches name them in DATA_REGION_NAME:\n"
               "  %-22s %s\n  %-22s %s\n  %-22s %s\n",
            "persistence", "log the region's caches in the WAL (false)",
            "max_size", "memory limit of the region (0 = none)",
            "eviction", "evict entries when the region is full (false)");
}

static int region_set(srv_config *c, const char *rname, const char *key, const char *value,
                      char *err, size_t errlen);

int srv_config_set(srv_config *c, const char *key, const char *value, char *err, size_t errlen)
{
    /* Flag form of a [region:NAME] key: region:NAME:KEY (--region:NAME:KEY). */
    const char *colon;
    if (!strncmp(key, "region:", 7) && (colon = strrchr(key, ':')) != key + 6) {
        char rname[128], rkey[32];
        size_t rl = (size_t)(colon - (key + 7)), kl = strlen(colon + 1);
        if (rl >= sizeof rname || kl >= sizeof rkey) {
            snprintf(err, errlen, "unknown setting '%s'", key);
            return EM_CONFIG;
        }
        memcpy(rname, key + 7, rl);
        rname[rl] = 0;
        for (size_t i = 0; i <= kl; i++)
            rkey[i] = colon[1 + i] == '-' ? '_' : colon[1 + i];
        return region_set(c, rname, rkey, value, err, errlen);
    }
    char k[64];
    size_t kl = strlen(key);
    if (kl >= sizeof k)
        kl = sizeof k - 1;
    for (size_t i = 0; i < kl; i++)
        k[i] = key[i] == '-' ? '_' : key[i];
    k[kl] = 0;
    /* Accept the *_ms spelling of the time keys too. */
    if (kl > 3 && !strcmp(k + kl - 3, "_ms"))
        k[kl - 3] = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const key_desc *d = &keys[i];
        if (strcmp(d->key, k))
            continue;
        char *field = (char *)c + d->off;
        uint64_t u = 0;
        int b, rc = 0;
        switch (d->kind) {
        case 's':
            if (strlen(value) >= d->size)
                rc = -1;
            else
                strcpy(field, value);
            break;
        case 'i':
            rc = parse_u64(value, 0, 65535u * 1024, &u);
            if (!rc)
                *(int *)field = (int)u;
            break;
        case 'u':
        case 't':
            rc = parse_u64(value, d->kind == 't', UINT32_MAX, &u);
            if (!rc)
                *(uint32_t *)field = (uint32_t)u;
            break;
        case 'z':
            rc = parse_u64(value, 0, UINT64_MAX, &u);
            if (!rc)
                *(uint64_t *)field = u;
            break;
        case 'b':
            rc = parse_bool(value, &b);
            if (!rc)
                *(int *)field = b;
            break;
        case 'w': {
            wal_mode m;
            rc = wal_mode_parse(value, &m) ? -1 : 0;
            if (!rc)
                *(int *)field = (int)m;
            break;
        }
        case 'l':
            b = em_log_parse_level(value);
            rc = b < 0 ? -1 : 0;
            if (!rc)
                *(int *)field = b;
            break;
        }
        if (rc) {
            snprintf(err, errlen, "bad value for %s: '%s'", d->key, value);
            return EM_CONFIG;
        }
        if (!strcmp(d->key, "port") && c->port > 65535) {
            snprintf(err, errlen, "bad value for port: '%s'", value);
            return EM_CONFIG;
        }
        return 0;
    }
    snprintf(err, errlen, "unknown setting '%s'", key);
    return EM_CONFIG;
}

typedef struct ini_ctx {
    srv_config *c;
    char *err;
    size_t errlen;
    int rc;
    const char *path;
    char last[128];             /* section of the previous key */
} ini_ctx;

/* region_set: one key of a [region:NAME] section (the region is created by
 * its first key). */
static int region_set(srv_config *c, const char *rname, const char *key, const char *value,
                      char *err, size_t errlen)
{
    struct srv_region *r = NULL;
    for (int i = 0; i < c->nregions; i++)
        if (!strcmp(c->regions[i].name, rname))
            r = &c->regions[i];
    if (!r) {
        size_t n = strlen(rname);
        if (!n || n >= sizeof r->name || !strcmp(rname, "default")) {
            snprintf(err, errlen, "bad data region name '%s'", rname);
            return EM_CONFIG;
        }
        if (c->nregions == (int)(sizeof c->regions / sizeof c->regions[0])) {
            snprintf(err, errlen, "too many data regions (at most %d)", c->nregions);
            return EM_CONFIG;
        }
        r = &c->regions[c->nregions++];
        memset(r, 0, sizeof *r);
        memcpy(r->name, rname, n + 1);
    }
    int b, rc = 0;
    uint64_t u;
    if (!strcmp(key, "persistence")) {
        if (!(rc = parse_bool(value, &b)))
            r->persistence = b;
    } else if (!strcmp(key, "eviction")) {
        if (!(rc = parse_bool(value, &b)))
            r->eviction = b;
    } else if (!strcmp(key, "max_size")) {
        if (!(rc = parse_u64(value, 0, UINT64_MAX, &u)))
            r->max_size = u;
    } else {
        snprintf(err, errlen, "unknown data region setting '%s'", key);
        return EM_CONFIG;
    }
    if (rc) {
        snprintf(err, errlen, "bad value for %s of region %s: '%s'", key, rname, value);
        return EM_CONFIG;
    }
    return 0;
}

static int ini_cb(void *arg, const char *section, const char *name, const char *value)
{
    ini_ctx *x = arg;
    if (x->rc)
        return 0;
    if (section && !strncmp(section, "region:", 7))
        x->rc = region_set(x->c, section + 7, name, value, x->err, x->errlen);
    else {
        /* Any other section header (say [server]) is ignored, as the docs
         * have always said: its keys are top-level settings, checked like
         * any other.  One warning per section header (its first key), so a
         * header that was meant to be [region:NAME] does not go unnoticed. */
        if (section && section[0] && strncmp(x->last, section, sizeof x->last - 1))
            EM_WARN("config %s: section [%s] is not one ember knows: header ignored, its keys "
                    "are read as top-level settings", x->path, section);
        x->rc = srv_config_set(x->c, name, value, x->err, x->errlen);
    }
    snprintf(x->last, sizeof x->last, "%s", section ? section : "");
    return x->rc == 0;
}

int srv_config_load(srv_config *c, const char *path, char *err, size_t errlen)
{
    ini_ctx x = { c, err, errlen, 0, path, "" };
    int line = ini_parse(path, ini_cb, &x);
    if (line < 0) {
        snprintf(err, errlen, "cannot read config file %s", path);
        return EM_CONFIG;
    }
    if (x.rc) {
        size_t l = strlen(err);
        snprintf(err + l, errlen - l, " (%s line %d)", path, line);
        return EM_CONFIG;
    }
    if (line > 0) {
        snprintf(err, errlen, "%s line %d: syntax error", path, line);
        return EM_CONFIG;
    }
    return 0;
}

/* ---- net <-> proto glue ------------------------------------------------- */

static void *on_open(void *arg, net_conn *nc)
{
    srv *s = arg;
    srv_conn *sc = em_calloc(1, sizeof *sc);
    if (!sc)
        return NULL;
    sc->pc = pr_conn_new(s->ps);
    if (!sc->pc) {
        em_free(sc);
        return NULL;
    }
    sc->mb = srv_metrics_worker(s->metrics, net_conn_worker(nc));
    if (sc->mb) {
        srv_metrics_event(sc->mb, SRV_EV_CONN_OPEN);
        sc->count = s->count_requests;
        if (sc->count)
            pr_conn_set_stats(sc->pc, sc->mb);  /* proto counts into it directly */
    }
    if (s->auth) {
        char peer[80];
        net_conn_peer(nc, peer, sizeof peer);
        pr_conn_set_peer(sc->pc, peer);
    }
    /* In a cluster, a FULL_SYNC reply may leave from the thread that got
     * its last ack (proto_ackw.c); plaintext connections only. */
    if (s->cluster && !s->tls && net_conn_share(nc) == 0)
        pr_conn_set_io(sc->pc, nc);
    return sc;
}

static int direct_send(void *arg, void *io, const void *a, size_t an, const void *b, size_t bn)
{
    (void)arg;
    return net_conn_send_any(io, a, an, b, bn);
}

static int out_idle(void *arg, void *io)
{
    (void)arg;
    return net_conn_out_idle(io);
}

static void on_tls_fail(void *arg, net_conn *nc, const char *why)
{
    srv *s = arg;
    srv_metrics_block *b = srv_metrics_worker(s->metrics, net_conn_worker(nc));
    if (b)
        srv_metrics_event(b, SRV_EV_TLS_FAIL);
    if (em_log_get_level() <= EM_LOG_DEBUG) {
        char peer[80];
        net_conn_peer(nc, peer, sizeof peer);
        EM_DEBUG("TLS handshake with %s failed: %s", peer, why);
    }
}

static int auth_hook(void *arg, const char *peer, const uint8_t *user, size_t ul,
                     const uint8_t *pw, size_t pl)
{
    return srv_auth_login(arg, peer, user, ul, pw, pl, em_now_ms());
}

/* tx_metrics: the transaction gauges (proto_tx.c) and the SQL threads'
 * counters (proto_sqlrun.c). */
static int tx_metrics(srv *s, em_buf *out)
{
    uint64_t open, waiting, locks, ran, cancelled, queued;
    pr_server_tx_stats(s->ps, &open, &waiting, &locks);
    pr_server_sql_stats(s->ps, &ran, &cancelled, &queued);
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "# TYPE ember_tx_open gauge\nember_tx_open %llu\n"
                     "# TYPE ember_tx_waiting_connections gauge\nember_tx_waiting_connections %llu\n"
                     "# TYPE ember_tx_entry_locks gauge\nember_tx_entry_locks %llu\n"
                     "# TYPE ember_sql_requests_total counter\nember_sql_requests_total %llu\n"
                     "# TYPE ember_sql_cancelled_total counter\nember_sql_cancelled_total %llu\n"
                     "# TYPE ember_sql_queued gauge\nember_sql_queued %llu\n"
                     "# TYPE ember_sql_direct_aggregates_total counter\n"
                     "ember_sql_direct_aggregates_total %llu\n",
                     (unsigned long long)open, (unsigned long long)waiting,
                     (unsigned long long)locks, (unsigned long long)ran,
                     (unsigned long long)cancelled, (unsigned long long)queued,
                     (unsigned long long)pr_server_sql_direct_aggs(s->ps));
    return em_buf_append(out, line, (size_t)n);
}

static int render_metrics(void *arg, em_buf *out)
{
    srv *s = arg;
    int rc = srv_metrics_render(s->metrics, s->st, out);
    if (!rc)
        rc = tx_metrics(s, out);
    return rc ? rc : srv_cluster_metrics(s->cluster, out);
}

/* The dashboard (dash.html, embedded at build time) and its JSON: the
 * cluster as this node sees it, every member asked over the cluster
 * transport (500 ms each at most: the HTTP thread is the only one waiting). */
static int render_api(void *arg, int route, em_buf *out, const char **ctype)
{
    srv *s = arg;
    if (route == SRV_HTTP_ROOT) {
        *ctype = "text/html; charset=utf-8";
        return em_buf_append(out, srv_dash_html, srv_dash_html_len);
    }
    *ctype = "application/json";
    return pr_cluster_info(s->ps, 0, route == SRV_HTTP_API_NODE, 500, out);
}

static void node_stats(void *arg, pr_stats *sum, uint64_t *uptime_ms)
{
    srv *s = arg;
    *uptime_ms = 0;
    if (s->metrics)
        srv_metrics_sum(s->metrics, sum, uptime_ms);
}

static int render_health(void *arg, em_buf *out)
{
    srv *s = arg;
    int lease = srv_cluster_health(s->cluster, out);
    return lease ? lease : srv_metrics_health(s->metrics, out);
}

static int on_data(void *arg, net_conn *nc, void *state, const uint8_t *p, size_t n,
                   em_buf *out, size_t out_cap, size_t *consumed)
{
    (void)arg;
    srv_conn *sc = state;
    pr_conn *pc = sc->pc;
    int was = pr_conn_ready(pc);
    size_t before = out->len;
    int rc = pr_feed(pc, p, n, out, out_cap, consumed);
    if (sc->count)                  /* once per read batch, not per request */
        srv_metrics_bytes(sc->mb, *consumed, out->len - before);
    if (rc < 0 && sc->mb && rc != EM_UNSUPPORTED)
        srv_metrics_event(sc->mb, SRV_EV_PROTO_ERROR);
    if (pr_conn_parked(pc))
        net_conn_park(nc);          /* a request waits for a lock (proto_tx.c) */
    if (!was && pr_conn_ready(pc))
        net_conn_established(nc);
    if (rc < 0 && em_log_get_level() <= EM_LOG_DEBUG) {
        char peer[80];
        net_conn_peer(nc, peer, sizeof peer);
        EM_DEBUG("closing %s: %s", peer, em_strerror(rc));
    }
    return rc;
}

/* on_resume: requests of a parked connection may go on (proto_tx.c). */
static int on_resume(void *arg, net_conn *nc, void *state, em_buf *out, size_t out_cap)
{
    (void)arg;
    srv_conn *sc = state;
    size_t before = out->len;
    int rc = pr_conn_resume(sc->pc, out, out_cap);
    if (sc->count)                  /* the replies of the frames that waited */
        srv_metrics_bytes(sc->mb, 0, out->len - before);
    if (pr_conn_parked(sc->pc))
        net_conn_park(nc);
    return rc;
}

/* tx_wake: locks were released while requests wait for one: every loop
 * retries its parked connections (any thread; before the net server is
 * published nothing can be parked). */
static void tx_wake(void *arg)
{
    srv *s = arg;
    atomic_fetch_add(&s->net_users, 1);
    net_server *n = atomic_load(&s->net_pub);
    if (n)
        (void)net_wake_parked(n);
    atomic_fetch_sub(&s->net_users, 1);
}

/* on_peek / on_peek_done: a pass's unpipelined requests prefetched
 * together (net.h, proto.h pr_pf_add). */
static void on_peek(void *arg, void *state, const uint8_t *p, size_t n)
{
    (void)arg;
    pr_pf_add(((srv_conn *)state)->pc, p, n);
}

static void on_peek_done(void *arg)
{
    (void)arg;
    pr_pf_run();
}

static void on_close(void *arg, void *state)
{
    (void)arg;
    srv_conn *sc = state;
    if (sc->mb)
        srv_metrics_event(sc->mb, SRV_EV_CONN_CLOSE);
    pr_conn_free(sc->pc);
    em_free(sc);
}

/* before_send: FSYNC group commit, once per event-loop pass (net.h). */
static int before_send(void *arg)
{
    srv *s = arg;
    return wal_commit_wait(s->wal);
}

static int meta_persist(void *arg, int kind, const uint8_t *p, size_t n)
{
    srv *s = arg;
    int rc = srv_meta_append(s->meta, kind, p, n);
    if (rc)
        EM_ERROR("binary metadata log: append failed: %s", em_strerror(rc));
    return rc;
}

static const char *state_name(int st)
{
    return st == PR_STATE_INACTIVE ? "INACTIVE"
           : st == PR_STATE_ACTIVE_READ_ONLY ? "ACTIVE_READ_ONLY" : "ACTIVE";
}

/* state_persist: a cluster state change (op 5001), logged durably first
 * when persistence is on, so a restart comes back in it. */
static int state_persist(void *arg, int state)
{
    srv *s = arg;
    if (s->meta) {
        uint8_t b = (uint8_t)state;
        int rc = srv_meta_append(s->meta, SRV_META_STATE, &b, 1);
        if (rc) {
            EM_ERROR("cluster state %s not changed: metadata log append failed: %s",
                     state_name(state), em_strerror(rc));
            return rc;
        }
    }
    EM_INFO("cluster state changed to %s", state_name(state));
    return 0;
}

/* recover_note: a replayed update into the store (as wal_recover does)
 * and the history log. */
static int recover_note(void *arg, const st_update *u)
{
    srv *s = arg;
    int rc = wal_recover_apply(s->st, u);
    if (!rc)
        cl_hist_note_replayed(s->hist, u);
    return rc;
}

/* open_persistence: metadata log, then WAL recovery into the store, then
 * the WAL becomes the store's write observer. */

static int open_persistence(srv *s, const srv_config *c)
{
    const wal_fileops *ops = wal_posix_ops();
    char err[1200] = "";
    uint64_t t0 = em_now_ms();
    int rc = srv_meta_open(&s->meta, ops, c->wal_path, s->reg, err, sizeof err);
    if (rc) {
        EM_ERROR("cannot open binary metadata in %s: %s", c->wal_path, err);
        return rc;
    }
    wal_options wo;
    memset(&wo, 0, sizeof wo);
    wo.dir = c->wal_path;
    wo.mode = (wal_mode)c->wal_mode;
    wo.segment_bytes = c->wal_segment_size;
    wo.flush_ms = c->wal_flush_frequency_ms;
    wo.checkpoint_ms = c->checkpoint_frequency_ms;
    wo.deferred_sync = wo.mode == WAL_FSYNC;
    if ((rc = wal_open(&s->wal, &wo)) != 0) {
        EM_ERROR("cannot open the WAL in %s: %s", c->wal_path, em_strerror(rc));
        return rc;
    }
    /* A persistent member's history log takes what the replay applies:
     * what this copy holds, claimed when it rejoins (cl_hist.h). */
    if (srv_cluster_enabled(c) && c->rebalance_history_size &&
        (rc = cl_hist_new(&s->hist, c->rebalance_history_size)) != 0) {
        EM_ERROR("rebalance_history_size %llu: %s", (unsigned long long)c->rebalance_history_size,
                 rc == EM_INVAL ? "0 (off) or at least 64k" : em_strerror(rc));
        return rc;
    }
    if ((rc = wal_replay(s->wal, recover_note, s)) != 0) {
        const char *m = wal_errmsg(s->wal);
        EM_ERROR("WAL recovery failed, refusing to start: %s%s%s", em_strerror(rc),
                 m[0] ? ": " : "", m);
        return rc;
    }
    wal_stats ws;
    wal_stats_get(s->wal, &ws);
    if (ws.mislabeled)
        EM_WARN("WAL recovery read %llu segment(s) by their records' LSNs, not their headers' "
                "(written before BACKGROUND/NONE kept LSN order across checkpoints): %s",
                (unsigned long long)ws.mislabeled, wal_warnmsg(s->wal));
    if ((rc = wal_attach(s->wal, s->st)) != 0) {
        EM_ERROR("cannot attach the WAL: %s", em_strerror(rc));
        return rc;
    }
    s->deferred = wo.deferred_sync;
    EM_INFO("persistence on: %s, wal_mode %s, recovered %llu records (%llu bytes of torn tail cut) "
            "and %llu binary metadata records in %llu ms",
            c->wal_path, wal_mode_name(wo.mode), (unsigned long long)ws.replayed,
            (unsigned long long)ws.cut_bytes, (unsigned long long)srv_meta_records(s->meta),
            (unsigned long long)(em_now_ms() - t0));
    return 0;
}

static void close_persistence(srv *s)
{
    if (s->wal) {
        int rc = wal_close(s->wal);
        if (rc)
            EM_ERROR("WAL close: %s", em_strerror(rc));
        s->wal = NULL;
    }
    srv_meta_close(s->meta);
    s->meta = NULL;
    cl_hist_free(s->hist);          /* the cluster, its user, stopped before */
    s->hist = NULL;
}

static void debug_stats(void *arg, em_mem_stats *sum)
{
    srv *s = arg;
    net_server *n = atomic_load(&s->net_pub);
    if (n)
        net_mem_stats(n, sum);
    else
        *sum = em_mem_thread();
    /* On a cluster, its threads too: owners apply replicated writes on the
     * transport's loop, forwarded requests run on its workers. */
    em_mem_stats cm, sm;
    srv_cluster_mem_stats(s->cluster, &cm);
    pr_server_sql_mem_stats(s->ps, &sm);        /* and the SQL threads' */
    sum->allocs += cm.allocs + sm.allocs;
    sum->bytes += cm.bytes + sm.bytes;
    sum->frees += cm.frees + sm.frees;
}

int srv_start(srv **out, const srv_config *c)
{
    *out = NULL;
    srv *s = em_calloc(1, sizeof *s);
    if (!s)
        return EM_NOMEM;
    st_region_spec def, named[sizeof c->regions / sizeof c->regions[0]];
    memset(&def, 0, sizeof def);
    def.cfg.name = "default";
    def.cfg.max_bytes = c->memory_limit;
    def.cfg.eviction = (uint8_t)c->eviction;
    def.in_memory = !c->persistence;
    int any_persistent = c->persistence;
    for (int i = 0; i < c->nregions; i++) {
        memset(&named[i], 0, sizeof named[i]);
        named[i].cfg.name = c->regions[i].name;
        named[i].cfg.max_bytes = c->regions[i].max_size;
        named[i].cfg.eviction = (uint8_t)c->regions[i].eviction;
        named[i].in_memory = !c->regions[i].persistence;
        any_persistent |= c->regions[i].persistence;
    }
    int rc = st_open_regions(&s->st, &def, named, (size_t)c->nregions);
    if (rc)
        goto fail;
    s->reg = bin_registry_new();
    if (!s->reg) {
        rc = EM_NOMEM;
        goto fail;
    }
    if (any_persistent && (rc = open_persistence(s, c)) != 0)
        goto fail;
    pr_options po;
    pr_options_default(&po);
    po.max_msg = c->max_message_size;
    po.max_handshake_msg = c->max_handshake_size;
    po.max_cursors = c->max_cursors;
    po.max_depth = c->max_depth;
    po.idle_timeout_ms = c->idle_timeout_ms;
    snprintf(po.thin_host, sizeof po.thin_host, "%s", c->host);
    po.thin_port = c->port;
    po.debug_ops = c->debug_ops;
    po.exit_after_writes = c->cluster_exit_after_writes;
    snprintf(po.tx_crash, sizeof po.tx_crash, "%s", c->cluster_tx_crash);
    snprintf(po.write_hold, sizeof po.write_hold, "%s", c->cluster_write_hold);
    snprintf(po.tx_hold, sizeof po.tx_hold, "%s", c->cluster_tx_hold);
    po.debug_stats = debug_stats;
    po.sql_query_memory = c->sql_query_memory ? (int64_t)c->sql_query_memory : -1;
    po.node_stats = node_stats;
    po.debug_arg = s;
    if (any_persistent) {
        po.persistent = 1;
        po.meta_persist = meta_persist;
        po.meta_arg = s;
    }
    /* Cluster state at start, as Ignite's for one node: in memory, ACTIVE.
     * With a persistent region, a node that was never activated starts
     * INACTIVE (Ignite's first start of a persistent cluster: no baseline
     * yet, activation is manual); after that it starts in the state it was
     * last set to (Ignite auto-activates once the whole baseline, here this
     * node, is back; ember keeps a read-only or deactivated node so rather
     * than reactivating it). */
    po.state = PR_STATE_ACTIVE;
    if (any_persistent) {
        int st = srv_meta_state(s->meta);
        po.state = st >= 0 ? st : PR_STATE_INACTIVE;
        if (st < 0)
            EM_WARN("persistence on and never activated: cluster state INACTIVE; cache "
                    "operations are refused until a client sets it ACTIVE (CHANGE_STATE)");
        else
            EM_INFO("cluster state %s (restored)", state_name(st));
    }
    po.state_persist = state_persist;
    po.state_arg = s;
    if (c->username[0]) {
        po.username = c->username;
        po.password = c->password;
    }
    if (c->users_file[0]) {
        srv_auth_limits lim = {c->auth_max_failures, c->auth_failure_forgive_ms,
                               c->auth_slow_burst, c->auth_slow_rate};
        int bad = 0;
        rc = srv_auth_load(c->users_file, &lim, &s->auth, &bad);
        if (rc) {
            if (bad)
                EM_ERROR("users file %s line %d is malformed or too weak", c->users_file, bad);
            else
                EM_ERROR("cannot read users file %s: %s", c->users_file, em_strerror(rc));
            goto fail;
        }
        if (srv_auth_count(s->auth) == 0)
            EM_WARN("users file %s has no users: every login will fail", c->users_file);
        po.auth = auth_hook;
        po.auth_arg = s->auth;
    }
    if (c->tls) {
        net_tls_options to = {c->tls_cert[0] ? c->tls_cert : NULL,
                              c->tls_key[0] ? c->tls_key : NULL,
                              c->tls_ca[0] ? c->tls_ca : NULL, NET_TLS_VERIFY_NONE,
                              c->tls_ciphers[0] ? c->tls_ciphers : NULL,
                              c->tls_ciphersuites[0] ? c->tls_ciphersuites : NULL, 0};
        if (!strcmp(c->tls_client_auth, "optional"))
            to.verify_client = NET_TLS_VERIFY_OPTIONAL;
        else if (!strcmp(c->tls_client_auth, "require"))
            to.verify_client = NET_TLS_VERIFY_REQUIRE;
        else if (strcmp(c->tls_client_auth, "none")) {
            EM_ERROR("tls_client_auth must be none, optional or require");
            rc = EM_CONFIG;
            goto fail;
        }
        char err[512];
        if ((rc = net_tls_ctx_new(&to, &s->tls, err, sizeof err)) != 0) {
            EM_ERROR("%s", err);
            goto fail;
        }
    }
    {
        /* One counter block per worker loop (net/ makes the same count). */
        int nw = c->threads > 0 ? c->threads : net_default_threads();
        if ((rc = srv_metrics_new(nw > 256 ? 256 : nw, &s->metrics)) != 0)
            goto fail;
        s->count_requests = c->metrics;
        /* /health and ember_health_component_failed: the persistent regions */
        const char *pr[SRV_HEALTH_MAX];
        size_t npr = 0;
        if (c->persistence)
            pr[npr++] = "default";
        for (int i = 0; i < c->nregions && npr < SRV_HEALTH_MAX; i++)
            if (c->regions[i].persistence)
                pr[npr++] = c->regions[i].name;
        if (s->wal && (rc = srv_metrics_watch_wal(s->metrics, s->wal, pr, npr)) != 0)
            goto fail;
    }
    if ((rc = pr_server_new(&s->ps, s->st, s->reg, &po)) == 0)
        pr_server_set_tx_wake(s->ps, tx_wake, s);
    /* SQL runs off the loops: its replies wait for the WAL as the loops'
     * do (before_send, on the SQL thread), and a finished query wakes its parked connection. */
    if (rc == 0 && c->sql_threads > 0)
        rc = pr_server_sql_start(s->ps, c->sql_threads, s->deferred ? before_send : NULL,
                                 tx_wake, s);
    if (rc != 0)
        goto fail;
    /* A member joins before it serves: the first request already sees the
     * cluster's caches, types and state. */
    if (srv_cluster_enabled(c)) {
        char thin[300] = "";
        if (c->port)
            snprintf(thin, sizeof thin, "%s:%d", c->host, c->port);
        /* The decoding connections first: entries may apply as soon as the
         * node starts. */
        if ((rc = pr_server_set_cluster(s->ps, NULL)) != 0 ||
            (rc = srv_cluster_start(&s->cluster, c, po.node_id, thin, s->ps,
                                    s->deferred ? before_send : NULL, s,
                                    &(srv_cluster_persist){ s->hist, s->wal })) != 0 ||
            (rc = pr_server_set_cluster(s->ps, srv_cluster_node(s->cluster))) != 0)
            goto fail;
        srv_cluster_set_meta(s->cluster, s->meta);
        pr_server_set_direct(s->ps, direct_send, out_idle, s);
    }
    net_options no;
    memset(&no, 0, sizeof no);
    no.host = c->host;
    no.port = c->port;
    no.threads = c->threads;
    no.limits.max_conns = c->max_connections;
    no.limits.handshake_timeout_ms = c->handshake_timeout_ms;
    no.limits.idle_timeout_ms = c->idle_timeout_ms;
    no.limits.write_stall_ms = c->write_stall_timeout_ms;
    no.limits.out_soft_cap = (size_t)c->max_output_queue;
    no.limits.out_hard_cap = (size_t)c->output_hard_cap;
    no.cb.arg = s;
    no.cb.on_open = on_open;
    no.cb.on_data = on_data;
    no.cb.on_peek = on_peek;
    no.cb.on_peek_done = on_peek_done;
    no.cb.on_close = on_close;
    no.cb.on_resume = on_resume;
    no.cb.on_tls_fail = on_tls_fail;
    if (srv_cluster_enabled(c))
        no.cb.on_pass_end = srv_cluster_pass_end;
    no.tls = s->tls;
    if (s->deferred)
        no.cb.before_send = before_send;
    if ((rc = net_server_start(&s->net, &no)) != 0)
        goto fail;
    pr_server_set_thin_port(s->ps, net_server_port(s->net));
    atomic_store(&s->net_pub, s->net);
    if (c->http) {
        srv_http_options ho = {c->http_host, c->http_port, render_metrics, s,
                               (int)c->http_timeout_ms, render_health, render_api};
        /* Not fatal: a second emberd on one host (tests, a blue/green
         * switch) must still serve clients; the warning says what is off. */
        int hrc = srv_http_start_opts(&ho, &s->http);
        if (hrc)
            EM_WARN("HTTP endpoint off: cannot listen on %s:%d: %s", c->http_host,
                    c->http_port, em_strerror(hrc));
        else
            EM_INFO("metrics on http://%s:%d/metrics", c->http_host, srv_http_port(s->http));
    }
    *out = s;
    return 0;
fail:
    srv_cluster_stop(s->cluster);
    close_persistence(s);
    srv_metrics_free(s->metrics);
    net_tls_ctx_free(s->tls);
    srv_auth_free(s->auth);
    pr_server_free(s->ps);
    if (s->reg)
        bin_registry_free(s->reg);
    if (s->st)
        st_close(s->st);
    em_free(s);
    return rc;
}

int srv_port(const srv *s) { return net_server_port(s->net); }

void srv_maintain(srv *s)
{
    st_expire_tick(s->st, 4096);
    srv_cluster_maintain(s->cluster);
    /* A failed WAL write/fsync: persistent regions now refuse writes
     * (EM_READONLY); said once, here, as the store and WAL do not log. */
    int werr;
    if (s->wal && !s->wal_fail_logged && (werr = wal_error(s->wal)) != 0) {
        s->wal_fail_logged = 1;
        EM_ERROR("persistence failed (%s): persistent data regions no longer accept writes; "
                 "reads and memory-only regions keep working: %s", em_strerror(werr),
                 wal_errmsg(s->wal));
        s->wal_leave = s->cluster != NULL;
    }
    /* A cluster member whose log failed leaves: as a member it would
     * refuse the writes of its partitions and hold up every FULL_SYNC write
     * it backs up; without it the other owners take them (Ignite's failure
     * handler stops such a node).  Asked again each second until the leave
     * commits (no leader reachable now). */
    uint64_t now = em_now_ms();
    if (s->wal_leave && now >= s->wal_leave_ms) {
        s->wal_leave_ms = now + 1000;
        int rc = srv_cluster_leave(s->cluster);
        if (!rc) {
            s->wal_leave = 0;
            EM_ERROR("persistence failed: this node left the cluster (its partitions go to "
                     "the other owners); fix the disk and restart it to rejoin");
        }
    }
}

void srv_stop(srv *s)
{
    if (!s)
        return;
    srv_http_stop(s->http);         /* before the store its scrapes read */
    atomic_store(&s->net_pub, NULL);  /* transactions closing now wake nobody */
    while (atomic_load(&s->net_users))
        sched_yield();              /* a wake that read it before: a few instructions */
    net_server_stop(s->net);        /* joins workers: nothing uses the rest now */
    pr_server_sql_stop(s->ps);      /* cancelled with their connections; joined */
    srv_cluster_stop(s->cluster);   /* a clean leave; applies nothing after it */
    srv_metrics_free(s->metrics);
    net_tls_ctx_free(s->tls);
    srv_auth_free(s->auth);
    close_persistence(s);           /* final flush, before the store goes */
    pr_server_free(s->ps);
    bin_registry_free(s->reg);
    st_close(s->st);
    em_free(s);
}
