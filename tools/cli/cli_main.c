/* cli_main.c - ember-cli: a small thin client for operators and scripts.
 *
 *   ember-cli [options] ping | caches | create NAME | destroy NAME |
 *             put CACHE KEY VALUE | get CACHE KEY | remove CACHE KEY |
 *             size CACHE | stats | state [ACTIVE|ACTIVE_READ_ONLY|INACTIVE] |
 *             cluster [CACHE] | idle-verify [CACHE...]
 *
 * Exit codes: 0 success, 1 the server answered with an error, 2 usage,
 * connection or protocol errors, 3 idle-verify found owners that disagree.  Op layouts: ignite-thin-protocol.md §2.3-2.4.
 */
#include "cli.h"

#include "util/clock.h"
#include "util/hash.h"
#include "util/mem.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    OP_CACHE_GET = 1000, OP_CACHE_PUT = 1001, OP_CACHE_REMOVE_KEY = 1016,
    OP_CACHE_GET_SIZE = 1020, OP_CACHE_GET_NAMES = 1050, OP_CACHE_CREATE_WITH_NAME = 1051,
    OP_CACHE_DESTROY = 1056, OP_CLUSTER_GET_STATE = 5000, OP_CLUSTER_CHANGE_STATE = 5001,
};

/* Feature bit CLUSTER_STATES (reference §1.8): GET_STATE answers the
 * state's ordinal instead of a bool. */
#define FEAT_CLUSTER_STATES 0x04

static const char usage_text[] =
    "usage: ember-cli [options] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  ping                      handshake and one round trip, with timings\n"
    "  caches                    list cache names\n"
    "  create NAME               create a cache (fails if it exists)\n"
    "  destroy NAME              destroy a cache and its entries\n"
    "  put CACHE KEY VALUE       store a value\n"
    "  get CACHE KEY             read a value\n"
    "  remove CACHE KEY          remove a key\n"
    "  size CACHE                number of entries\n"
    "  stats                     server version, node id, caches and their sizes\n"
    "  state [STATE]             cluster state, or set it: ACTIVE, ACTIVE_READ_ONLY,\n"
    "                            INACTIVE (a persistent emberd starts INACTIVE once)\n"
    "  cluster [CACHE]           nodes (id, consistent id, addresses), topology version\n"
    "                            and state; with CACHE the partitions each node owns\n"
    "                            (--json adds the thin endpoints clients connect to)\n"
    "  cluster state [STATE]     the same as state\n"
    "  cluster baseline [set|add|remove ID[,ID...] | set-current | clear]\n"
    "                            the baseline: the nodes partitions are placed on (none\n"
    "                            set: every member); add needs running nodes, remove\n"
    "                            stopped ones; clear: follow the members again\n"
    "  cluster reset-lost CACHE  bring the cache's lost partitions back (empty) on the\n"
    "                            current members (Ignite's resetLostPartitions)\n"
    "  idle-verify [--save FILE] [--against FILE] [CACHE...]\n"
    "                            compare every partition's update counter, size and\n"
    "                            content checksum across its owners (all caches by\n"
    "                            default); exit 3 and list them when some disagree.\n"
    "                            --save keeps the figures, --against compares with\n"
    "                            kept ones (content changed, counter did not)\n"
    "  debug-corrupt CACHE PART  test hook (emberd --debug-ops): change one entry of\n"
    "                            the partition on this node without an update\n"
    "\n"
    "keys and values are typed: int:5 long:5 short:5 byte:5 double:1.5 float:1.5\n"
    "bool:true char:x date:MS uuid:8-4-4-4-12 string:abc (untyped = string)\n"
    "\n"
    "options:\n"
    "  -h, --host HOST           server host (default 127.0.0.1)\n"
    "  -p, --port PORT           thin-client port (default 10800)\n"
    "  -u, --user USER           user name (needs --password or $EMBER_PASSWORD)\n"
    "  -P, --password PW         password (prefer $EMBER_PASSWORD: argv is visible)\n"
    "      --tls                 connect with TLS (1.2 or 1.3)\n"
    "      --ca FILE             CA certificates to verify the server (PEM)\n"
    "      --cert FILE           client certificate for mutual TLS (PEM)\n"
    "      --key FILE            client private key (PEM; default: --cert)\n"
    "      --insecure            do not verify the server certificate (tests only)\n"
    "      --protocol X.Y.Z      protocol version (default 1.2.0; no fallback when set)\n"
    "      --timeout MS          connect and reply timeout (default 10000)\n"
    "      --json                machine-readable output\n"
    "      --help                this text\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ember-cli: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(ember-cli --help for usage)\n");
    return 2;
}

static const char *status_name(int s)
{
    switch (s) {
    case 1: return "FAILED";
    case 2: return "INVALID_OP_CODE";
    case 100: return "FUNCTIONALITY_DISABLED";
    case 1000: return "CACHE_DOES_NOT_EXIST";
    case 1001: return "CACHE_EXISTS";
    case 1010: return "TOO_MANY_CURSORS";
    case 1011: return "RESOURCE_DOES_NOT_EXIST";
    case 1012: return "SECURITY_VIOLATION";
    case 1020: return "TX_LIMIT_EXCEEDED";
    case 1021: return "TX_NOT_FOUND";
    case 1030: return "TOO_MANY_COMPUTE_TASKS";
    case 2000: return "AUTH_FAILED";
    default: return "UNKNOWN";
    }
}

/* report prints a failure (stderr for people, a JSON object on stdout for
 * scripts) and returns the exit code. */
static int report(const cli_opts *o, int rc, const cli_err *e)
{
    if (o->json) {
        em_buf b = EM_BUF_INIT;
        em_buf_append(&b, "{\"ok\":false,", 12);
        if (rc == CLI_ESERVER) {
            char tmp[80];
            int k = snprintf(tmp, sizeof tmp, "\"status\":%d,\"status_name\":\"%s\",", e->status,
                             status_name(e->status));
            em_buf_append(&b, tmp, (size_t)k);
        }
        em_buf_append(&b, "\"error\":", 8);
        cli_json_str(&b, e->msg, strlen(e->msg));
        em_buf_append(&b, "}\n", 2);
        fwrite(b.p, 1, b.len, stdout);
        em_buf_free(&b);
    } else if (rc == CLI_ESERVER) {
        fprintf(stderr, "ember-cli: server error %d (%s): %s\n", e->status,
                status_name(e->status), e->msg);
    } else {
        fprintf(stderr, "ember-cli: %s\n", e->msg);
    }
    return rc == CLI_ESERVER ? 1 : 2;
}

int cli_report(const cli_opts *o, int rc, const cli_err *e)
{
    return report(o, rc, e);
}

void cli_uuid_str(const uint8_t u[16], char out[37])
{
    uint64_t hi = em_ld64(u), lo = em_ld64(u + 8);
    snprintf(out, 37, "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
             hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48, lo & UINT64_C(0xffffffffffff));
}

static int bad_reply(const cli_opts *o, const char *what)
{
    cli_err e;
    memset(&e, 0, sizeof e);
    snprintf(e.msg, sizeof e.msg, "malformed reply: %s", what);
    return report(o, CLI_ELOCAL, &e);
}

/* cache_header appends cache id (Java hashCode of the name) + flags 0. */
static int cache_header(em_buf *b, const char *name)
{
    size_t n = strlen(name);
    if (!cli_utf8_valid((const uint8_t *)name, n))
        return -1;
    em_buf_put_le32(b, (uint32_t)em_hash_java_str((const uint8_t *)name, n));
    em_buf_put_u8(b, 0);
    return 0;
}

static void print_ok(const cli_opts *o, const char *human)
{
    if (o->json)
        printf("{\"ok\":true}\n");
    else
        printf("%s\n", human);
}

/* names_fn receives each cache name of a GET_NAMES reply. */
typedef void (*names_fn)(void *arg, const uint8_t *s, uint32_t n);

static int parse_names(const uint8_t *p, size_t n, names_fn fn, void *arg)
{
    if (n < 4)
        return -1;
    int32_t cnt = (int32_t)em_ld32(p);
    size_t pos = 4;
    /* every name takes at least one byte: a larger count is a lie */
    if (cnt < 0 || (size_t)cnt > n - 4)
        return -1;
    for (int32_t i = 0; i < cnt; i++) {
        const uint8_t *s;
        uint32_t sl;
        if (cli_typed_string(p, n, &pos, &s, &sl) || !s)
            return -1;
        fn(arg, s, sl);
    }
    return pos == n ? 0 : -1;
}

struct names_acc {
    em_buf *out;
    int json, count;
};

static void names_print(void *arg, const uint8_t *s, uint32_t n)
{
    struct names_acc *a = arg;
    if (a->json) {
        if (a->count)
            em_buf_put_u8(a->out, ',');
        cli_json_str(a->out, (const char *)s, n);
    } else {
        em_buf_append(a->out, s, n);
        em_buf_put_u8(a->out, '\n');
    }
    a->count++;
}

static const char *const state_names[] = { "INACTIVE", "ACTIVE", "ACTIVE_READ_ONLY" };

/* cmd_state prints the cluster state, or sets it to want (a name, any case). */
static int cmd_state(cli_conn *c, const cli_opts *o, const char *want)
{
    em_buf b = EM_BUF_INIT;
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc;
    if (want) {
        int st = -1;
        for (int i = 0; i < 3; i++)
            if (!strcasecmp(want, state_names[i]))
                st = i;
        if (st < 0)
            return usage_error("unknown cluster state '%s' (ACTIVE, ACTIVE_READ_ONLY, "
                               "INACTIVE)", want);
        em_buf_put_u8(&b, (uint8_t)st);
        rc = cli_call(c, OP_CLUSTER_CHANGE_STATE, &b, &p, &n, &e);
        em_buf_free(&b);
        if (rc)
            return report(o, rc, &e);
        if (n != 0)
            return bad_reply(o, "unexpected payload after CHANGE_STATE");
    }
    rc = cli_call(c, OP_CLUSTER_GET_STATE, NULL, &p, &n, &e);
    if (rc)
        return report(o, rc, &e);
    /* Without the feature (protocol < 1.7.0 or an older server) the answer
     * is a bool "active", which cannot tell ACTIVE_READ_ONLY from ACTIVE. */
    if (n != 1 || p[0] > 2)
        return bad_reply(o, "GET_STATE result is not a state");
    /* A bool "active" from an older handshake: ACTIVE or ACTIVE_READ_ONLY. */
    int as_bool = c->ver < CLI_VER(1, 7, 0) && p[0] == 1;
    if (o->json)
        printf("{\"ok\":true,\"state\":\"%s\"}\n", state_names[p[0]]);
    else
        printf("%s%s\n", state_names[p[0]],
               as_bool ? " (or ACTIVE_READ_ONLY: protocol < 1.7.0 cannot tell)" : "");
    return 0;
}

static int cmd_caches(cli_conn *c, const cli_opts *o)
{
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, OP_CACHE_GET_NAMES, NULL, &p, &n, &e);
    if (rc)
        return report(o, rc, &e);
    em_buf out = EM_BUF_INIT;
    struct names_acc a = {&out, o->json, 0};
    if (o->json)
        em_buf_append(&out, "{\"caches\":[", 11);
    if (parse_names(p, n, names_print, &a)) {
        em_buf_free(&out);
        return bad_reply(o, "cache name list");
    }
    if (o->json)
        em_buf_append(&out, "]}\n", 3);
    if (out.len)   /* an empty list leaves out.p NULL: fwrite must not see it */
        fwrite(out.p, 1, out.len, stdout);
    em_buf_free(&out);
    return 0;
}

/* size_of: GET_SIZE (all peek modes) of one cache. */
static int size_of(cli_conn *c, const cli_opts *o, const char *name, int64_t *size)
{
    em_buf b = EM_BUF_INIT;
    if (cache_header(&b, name)) {
        em_buf_free(&b);
        return usage_error("cache name '%s' is not valid UTF-8", name);
    }
    em_buf_put_le32(&b, 0);     /* no peek modes = ALL */
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, OP_CACHE_GET_SIZE, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return report(o, rc, &e);
    if (n != 8)
        return bad_reply(o, "size is not a long");
    *size = (int64_t)em_ld64(p);
    return 0;
}

struct stats_acc {
    char  **names;
    int     count, cap;
};

static void names_collect(void *arg, const uint8_t *s, uint32_t n)
{
    struct stats_acc *a = arg;
    if (a->count == a->cap) {
        int nc = a->cap ? a->cap * 2 : 16;
        char **nn = em_realloc(a->names, (size_t)nc * sizeof *nn);
        if (!nn)
            return;
        a->names = nn;
        a->cap = nc;
    }
    a->names[a->count++] = em_strndup((const char *)s, n);
}

static int cmd_stats(cli_conn *c, const cli_opts *o)
{
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, OP_CACHE_GET_NAMES, NULL, &p, &n, &e);
    if (rc)
        return report(o, rc, &e);
    struct stats_acc a = {NULL, 0, 0};
    int ret = 0;
    if (parse_names(p, n, names_collect, &a)) {
        ret = bad_reply(o, "cache name list");
        goto out;
    }
    char node[40] = "";
    if (c->has_node_id)
        cli_uuid_str(c->node_id, node);
    em_buf out = EM_BUF_INIT;
    char tmp[160];
    int k;
    if (o->json) {
        k = snprintf(tmp, sizeof tmp, "{\"server\":\"%s:%s\",\"protocol\":\"%d.%d.%d\",", o->host,
                     o->port, c->ver / 10000, c->ver / 100 % 100, c->ver % 100);
        em_buf_append(&out, tmp, (size_t)k);
        if (node[0]) {
            k = snprintf(tmp, sizeof tmp, "\"node_id\":\"%s\",", node);
            em_buf_append(&out, tmp, (size_t)k);
        }
        em_buf_append(&out, "\"caches\":[", 10);
    } else {
        printf("server    %s:%s\nprotocol  %d.%d.%d\n", o->host, o->port, c->ver / 10000,
               c->ver / 100 % 100, c->ver % 100);
        if (node[0])
            printf("node id   %s\n", node);
        printf("caches    %d\n", a.count);
    }
    int64_t total = 0;
    for (int i = 0; i < a.count; i++) {
        if (!a.names[i])
            continue;
        int64_t sz = 0;
        ret = size_of(c, o, a.names[i], &sz);
        if (ret)
            break;
        total += sz;
        if (o->json) {
            if (i)
                em_buf_put_u8(&out, ',');
            em_buf_append(&out, "{\"name\":", 8);
            cli_json_str(&out, a.names[i], strlen(a.names[i]));
            k = snprintf(tmp, sizeof tmp, ",\"size\":%" PRId64 "}", sz);
            em_buf_append(&out, tmp, (size_t)k);
        } else {
            printf("  %-30s %" PRId64 " entries\n", a.names[i], sz);
        }
    }
    if (!ret) {
        if (o->json) {
            k = snprintf(tmp, sizeof tmp, "],\"entries\":%" PRId64 "}\n", total);
            em_buf_append(&out, tmp, (size_t)k);
            fwrite(out.p, 1, out.len, stdout);
        } else {
            printf("entries   %" PRId64 "\n", total);
        }
    }
    em_buf_free(&out);
out:
    for (int i = 0; i < a.count; i++)
        em_free(a.names[i]);
    em_free(a.names);
    return ret;
}

static int cmd_ping(cli_conn *c, const cli_opts *o, uint64_t t_open_ns)
{
    const uint8_t *p;
    size_t n;
    cli_err e;
    uint64_t t0 = em_now_ns();
    int rc = cli_call(c, OP_CACHE_GET_NAMES, NULL, &p, &n, &e);
    uint64_t rtt = em_now_ns() - t0;
    if (rc)
        return report(o, rc, &e);
    if (o->json)
        printf("{\"ok\":true,\"server\":\"%s:%s\",\"protocol\":\"%d.%d.%d\",\"tls\":%s,"
               "\"connect_ms\":%.3f,\"rtt_ms\":%.3f}\n",
               o->host, o->port, c->ver / 10000, c->ver / 100 % 100, c->ver % 100,
               o->tls ? "true" : "false", t_open_ns / 1e6, rtt / 1e6);
    else
        printf("PONG from %s:%s (protocol %d.%d.%d%s): connect+handshake %.3f ms, "
               "round trip %.3f ms\n",
               o->host, o->port, c->ver / 10000, c->ver / 100 % 100, c->ver % 100,
               o->tls ? ", TLS" : "", t_open_ns / 1e6, rtt / 1e6);
    return 0;
}

static int cmd_cache_name_op(cli_conn *c, const cli_opts *o, int op, const char *name)
{
    em_buf b = EM_BUF_INIT;
    size_t n = strlen(name);
    if (!cli_utf8_valid((const uint8_t *)name, n) || n == 0) {
        em_buf_free(&b);
        return usage_error("bad cache name '%s'", name);
    }
    if (op == OP_CACHE_CREATE_WITH_NAME)
        cli_put_str(&b, name, n);
    else
        em_buf_put_le32(&b, (uint32_t)em_hash_java_str((const uint8_t *)name, n));
    const uint8_t *p;
    size_t pn;
    cli_err e;
    int rc = cli_call(c, op, &b, &p, &pn, &e);
    em_buf_free(&b);
    if (rc)
        return report(o, rc, &e);
    if (pn != 0)
        return bad_reply(o, "unexpected payload");
    print_ok(o, op == OP_CACHE_CREATE_WITH_NAME ? "created" : "destroyed");
    return 0;
}

/* cmd_reset_lost: ember's RESET_LOST op (32100): name -> partitions reset. */
static int cmd_reset_lost(cli_conn *c, const cli_opts *o, const char *name)
{
    size_t n = strlen(name);
    if (!cli_utf8_valid((const uint8_t *)name, n) || n == 0)
        return usage_error("bad cache name '%s'", name);
    em_buf b = EM_BUF_INIT;
    cli_put_str(&b, name, n);
    const uint8_t *p;
    size_t pn;
    cli_err e;
    int rc = cli_call(c, 32100, &b, &p, &pn, &e);
    em_buf_free(&b);
    if (rc)
        return report(o, rc, &e);
    if (pn != 4)
        return bad_reply(o, "unexpected payload");
    uint32_t k = em_ld32(p);
    if (o->json)
        printf("{\"ok\":true,\"reset\":%u}\n", k);
    else
        printf("%u lost partition%s reset\n", k, k == 1 ? "" : "s");
    return 0;
}

/* cmd_kv runs put / get / remove. */
static int cmd_kv(cli_conn *c, const cli_opts *o, int op, char **args)
{
    em_buf b = EM_BUF_INIT;
    char err[200];
    if (cache_header(&b, args[0])) {
        em_buf_free(&b);
        return usage_error("cache name '%s' is not valid UTF-8", args[0]);
    }
    if (cli_value_parse(args[1], &b, err, sizeof err) ||
        (op == OP_CACHE_PUT && cli_value_parse(args[2], &b, err, sizeof err))) {
        em_buf_free(&b);
        return usage_error("%s", err);
    }
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, op, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return report(o, rc, &e);
    if (op == OP_CACHE_PUT) {
        if (n != 0)
            return bad_reply(o, "unexpected payload after PUT");
        print_ok(o, "ok");
        return 0;
    }
    if (op == OP_CACHE_REMOVE_KEY) {
        if (n != 1)
            return bad_reply(o, "REMOVE_KEY result is not a bool");
        if (o->json)
            printf("{\"ok\":true,\"removed\":%s}\n", p[0] ? "true" : "false");
        else
            printf("%s\n", p[0] ? "removed" : "not found");
        return 0;
    }
    /* GET: a value or null */
    if (n == 1 && p[0] == 101) {
        if (o->json)
            printf("{\"ok\":true,\"found\":false,\"value\":null}\n");
        else
            printf("(not found)\n");
        return 0;
    }
    em_buf out = EM_BUF_INIT;
    if (cli_value_format(p, n, o->json, &out, err, sizeof err)) {
        em_buf_free(&out);
        return bad_reply(o, err);
    }
    if (o->json)
        printf("{\"ok\":true,\"found\":true,\"value\":%s}\n", (const char *)out.p);
    else
        printf("%s\n", (const char *)out.p);
    em_buf_free(&out);
    return 0;
}

static int parse_version(const char *s, int *ver)
{
    int a, b, c;
    char tail;
    if (sscanf(s, "%d.%d.%d%c", &a, &b, &c, &tail) != 3 || a != 1 || b < 0 || b > 7 || c != 0)
        return -1;
    *ver = CLI_VER(a, b, c);
    return 0;
}

int main(int argc, char **argv)
{
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = "10800";
    o.timeout_ms = 10000;
    o.ver = CLI_VER(1, 2, 0);
    o.password = getenv("EMBER_PASSWORD");
    enum { O_TLS = 256, O_CA, O_CERT, O_KEY, O_INSECURE, O_JSON, O_TIMEOUT, O_PROTO, O_HELP };
    static const struct option longopts[] = {
        {"host", required_argument, NULL, 'h'},  {"port", required_argument, NULL, 'p'},
        {"user", required_argument, NULL, 'u'},  {"password", required_argument, NULL, 'P'},
        {"tls", no_argument, NULL, O_TLS},       {"ca", required_argument, NULL, O_CA},
        {"cert", required_argument, NULL, O_CERT}, {"key", required_argument, NULL, O_KEY},
        {"insecure", no_argument, NULL, O_INSECURE}, {"json", no_argument, NULL, O_JSON},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"protocol", required_argument, NULL, O_PROTO}, {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "+h:p:u:P:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': o.host = optarg; break;
        case 'p': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 65535)
                return usage_error("bad port '%s'", optarg);
            o.port = optarg;
            break;
        }
        case 'u': o.user = optarg; break;
        case 'P': o.password = optarg; break;
        case O_TLS: o.tls = 1; break;
        case O_CA: o.ca = optarg; o.tls = 1; break;
        case O_CERT: o.cert = optarg; o.tls = 1; break;
        case O_KEY: o.key = optarg; o.tls = 1; break;
        case O_INSECURE: o.insecure = 1; break;
        case O_JSON: o.json = 1; break;
        case O_TIMEOUT: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 3600000)
                return usage_error("bad timeout '%s'", optarg);
            o.timeout_ms = (int)v;
            break;
        }
        case O_PROTO:
            if (parse_version(optarg, &o.ver))
                return usage_error("unsupported protocol version '%s' (1.0.0 .. 1.7.0)", optarg);
            o.ver_pinned = 1;
            break;
        case O_HELP: fputs(usage_text, stdout); return 0;
        default: return usage_error("%s", "bad option");
        }
    }
    if (o.key && !o.cert)
        return usage_error("%s", "--key needs --cert");
    if (o.user && !o.password)
        return usage_error("%s", "--user needs --password or $EMBER_PASSWORD");
    if (o.user && o.ver_pinned && o.ver < CLI_VER(1, 1, 0))
        return usage_error("%s", "credentials need protocol 1.1.0 or later");
    if (optind >= argc)
        return usage_error("%s", "missing command");
    const char *cmd = argv[optind];
    char **args = argv + optind + 1;
    int nargs = argc - optind - 1;
    if (!strcmp(cmd, "cluster") && nargs == 2 && !strcmp(args[0], "reset-lost")) {
        cmd = "reset-lost";
        args++;
        nargs--;
    }
    if (!strcmp(cmd, "cluster") && nargs >= 1 && !strcmp(args[0], "baseline")) {
        cmd = "baseline";
        args++;
        nargs--;
    }
    if (!strcmp(cmd, "cluster") && nargs >= 1 && !strcmp(args[0], "state")) {
        /* `cluster state [STATE]` is `state [STATE]`. */
        cmd = "state";
        args++;
        nargs--;
    }
    static const struct { const char *name; int nargs; } cmds[] = {
        {"ping", 0}, {"caches", 0}, {"create", 1}, {"destroy", 1}, {"put", 3},
        {"get", 2},  {"remove", 2}, {"size", 1},   {"stats", 0},  {"state", -1},
        {"cluster", -1}, {"reset-lost", 1}, {"idle-verify", -2}, {"debug-corrupt", 2},
        {"baseline", -2},
    };
    int known = -1;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmd, cmds[i].name))
            known = (int)i;
    if (known < 0)
        return usage_error("unknown command '%s'", cmd);
    if (cmds[known].nargs == -2)
        ;                           /* any number */
    else if (cmds[known].nargs < 0 ? nargs > 1 : nargs != cmds[known].nargs) {
        char m[80];
        if (cmds[known].nargs < 0)
            snprintf(m, sizeof m, "'%s' takes at most 1 argument", cmd);
        else
            snprintf(m, sizeof m, "'%s' takes %d argument%s", cmd, cmds[known].nargs,
                     cmds[known].nargs == 1 ? "" : "s");
        return usage_error("%s", m);
    }

    if (!strcmp(cmd, "cluster") || !strcmp(cmd, "idle-verify")) {
        o.features = CLI_CLUSTER_FEATURES;
        if (!o.ver_pinned)
            o.ver = CLI_VER(1, 7, 0);
        else if (o.ver < CLI_VER(1, 7, 0))
            return usage_error("%s", "'cluster' needs protocol 1.7.0 (cluster-group features)");
    }
    if (!strcmp(cmd, "state")) {
        /* The state's name needs CLUSTER_STATES, a 1.7.0 feature. */
        o.features = FEAT_CLUSTER_STATES;
        if (!o.ver_pinned)
            o.ver = CLI_VER(1, 7, 0);
    }

    cli_conn c;
    cli_err e;
    uint64_t t0 = em_now_ns();
    int rc = cli_open(&c, &o, &e);
    uint64_t t_open = em_now_ns() - t0;
    if (rc) {
        cli_close(&c);
        return report(&o, rc, &e);
    }
    int ret;
    if (!strcmp(cmd, "ping"))
        ret = cmd_ping(&c, &o, t_open);
    else if (!strcmp(cmd, "caches"))
        ret = cmd_caches(&c, &o);
    else if (!strcmp(cmd, "create"))
        ret = cmd_cache_name_op(&c, &o, OP_CACHE_CREATE_WITH_NAME, args[0]);
    else if (!strcmp(cmd, "destroy"))
        ret = cmd_cache_name_op(&c, &o, OP_CACHE_DESTROY, args[0]);
    else if (!strcmp(cmd, "put"))
        ret = cmd_kv(&c, &o, OP_CACHE_PUT, args);
    else if (!strcmp(cmd, "get"))
        ret = cmd_kv(&c, &o, OP_CACHE_GET, args);
    else if (!strcmp(cmd, "remove"))
        ret = cmd_kv(&c, &o, OP_CACHE_REMOVE_KEY, args);
    else if (!strcmp(cmd, "size")) {
        int64_t sz = 0;
        ret = size_of(&c, &o, args[0], &sz);
        if (!ret) {
            if (o.json) {
                em_buf j = EM_BUF_INIT;
                cli_json_str(&j, args[0], strlen(args[0]));
                printf("{\"ok\":true,\"cache\":%.*s,\"size\":%" PRId64 "}\n", (int)j.len,
                       (const char *)j.p, sz);
                em_buf_free(&j);
            } else
                printf("%" PRId64 "\n", sz);
        }
    } else if (!strcmp(cmd, "state"))
        ret = cmd_state(&c, &o, nargs ? args[0] : NULL);
    else if (!strcmp(cmd, "cluster"))
        ret = cli_cmd_cluster(&c, &o, nargs ? args[0] : NULL);
    else if (!strcmp(cmd, "reset-lost"))
        ret = cmd_reset_lost(&c, &o, args[0]);
    else if (!strcmp(cmd, "baseline"))
        ret = cli_cmd_baseline(&c, &o, args, nargs);
    else if (!strcmp(cmd, "idle-verify"))
        ret = cli_cmd_idle_verify(&c, &o, args, nargs);
    else if (!strcmp(cmd, "debug-corrupt"))
        ret = cli_cmd_corrupt(&c, &o, args[0], args[1]);
    else
        ret = cmd_stats(&c, &o);
    cli_close(&c);
    return ret;
}
