/* cli_verify.c - `ember-cli idle-verify [--save FILE] [--against FILE]
 * [CACHE...]`, ember's counterpart of Ignite's `control.sh --cache
 * idle_verify`: for every partition of each cache, the update counter, size
 * and content checksum of every copy its owners hold, compared.
 *
 * The CLI asks each node itself (its thin address from CLUSTER_GROUP_GET_
 * NODE_INFO) with ember's PART_VERIFY (32101), rather than letting one node
 * fan out: reading whole partitions must run on the node's worker threads,
 * and the cluster transport's thread, which a fan-out would use, also carries
 * the heartbeats that keep leases.  Each node reports its role per partition
 * (primary, backup, none) from the committed owners, so the comparison covers
 * every owner, backups included once caches have them.
 *
 * --save FILE writes every copy's (counter, size, checksum); --against FILE
 * compares with such a file: a copy whose counter did not move but whose
 * size or checksum did changed without an update - the only check possible
 * while a partition has a single owner.
 */
#include "cli.h"

#include "util/hash.h"
#include "util/mem.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CACHES 1024
#define MAX_PARTS  65536u

typedef struct copy {
    uint8_t  role, stable;
    uint64_t cntr, size, sum;
} copy;

typedef struct verify {
    uint32_t   nn, nc;
    cli_node  *nodes;
    char     **names;
    uint32_t  *parts;       /* per cache (the first node's count) */
    copy     **cp;          /* [cache * nn + node] -> parts copies, NULL: no answer */
    char     **why;         /* [cache * nn + node] why a node gave no answer */
} verify;

static const char *role_name(int r)
{
    return r == 1 ? "primary" : r == 2 ? "backup" : "none";
}

/* ---- asking ---- */

static int cache_names(cli_conn *c, const cli_opts *o, verify *v)
{
    const uint8_t *p;
    size_t n, pos = 4;
    cli_err e;
    int rc = cli_call(c, 1050, NULL, &p, &n, &e);
    if (rc)
        return cli_report(o, rc, &e);
    int32_t k = n >= 4 ? (int32_t)em_ld32(p) : -1;
    if (k < 0 || k > MAX_CACHES) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CACHE_GET_NAMES");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    v->names = em_calloc((size_t)k + 1, sizeof *v->names);
    for (int32_t i = 0; v->names && i < k; i++) {
        const uint8_t *s;
        uint32_t sl;
        if (cli_typed_string(p, n, &pos, &s, &sl) || !s) {
            snprintf(e.msg, sizeof e.msg, "malformed reply: CACHE_GET_NAMES");
            return cli_report(o, CLI_ELOCAL, &e);
        }
        if (!(v->names[i] = em_malloc(sl + 1)))
            break;
        memcpy(v->names[i], s, sl);
        v->names[i][sl] = 0;
        v->nc++;
    }
    return 0;
}

/* ask: PART_VERIFY for cache ci on node ni over conn c. */
static void ask(cli_conn *c, verify *v, uint32_t ci, uint32_t ni)
{
    size_t slot = (size_t)ci * v->nn + ni;
    em_buf b = EM_BUF_INIT;
    cli_put_str(&b, v->names[ci], strlen(v->names[ci]));
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 32101, &b, &p, &n, &e);
    em_buf_free(&b);
    char msg[600];
    if (rc) {
        snprintf(msg, sizeof msg, "PART_VERIFY failed: %s", e.msg);
    } else {
        uint32_t k = n >= 4 ? em_ld32(p) : 0;
        if (n < 4 || k > MAX_PARTS || n != 4 + (size_t)k * 26) {
            snprintf(msg, sizeof msg, "malformed PART_VERIFY reply");
        } else if (!(v->cp[slot] = em_calloc(k ? k : 1, sizeof(copy)))) {
            snprintf(msg, sizeof msg, "out of memory");
        } else {
            for (uint32_t i = 0; i < k; i++) {
                const uint8_t *q = p + 4 + (size_t)i * 26;
                v->cp[slot][i] = (copy){ q[0], q[1], em_ld64(q + 2), em_ld64(q + 10),
                                         em_ld64(q + 18) };
            }
            if (!v->parts[ci])
                v->parts[ci] = k;
            if (k == v->parts[ci])
                return;
            em_free(v->cp[slot]);
            v->cp[slot] = NULL;
            snprintf(msg, sizeof msg, "reports %u partitions, another node %u", k, v->parts[ci]);
        }
    }
    v->why[slot] = em_malloc(strlen(msg) + 1);
    if (v->why[slot])
        strcpy(v->why[slot], msg);
}

/* ---- comparing ---- */

typedef struct saved {
    char     cache[256];
    uint32_t part;
    char     node[37];
    uint64_t cntr, size, sum;
} saved;

typedef struct report {
    em_buf   out;
    uint32_t conflicts;
    const cli_opts *o;
} report;

static void put(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(report *r, const char *fmt, ...)
{
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (k > 0)
        em_buf_append(&r->out, b, (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}

/* conflict: one partition's entry in the report, with every copy shown. */
static void conflict(report *r, verify *v, uint32_t ci, uint32_t p, const char *reason,
                     const saved *was)
{
    if (r->o->json) {
        put(r, "%s{\"cache\":", r->conflicts ? "," : "");
        cli_json_str(&r->out, v->names[ci], strlen(v->names[ci]));
        put(r, ",\"partition\":%u,\"reason\":\"%s\",\"copies\":[", p, reason);
    } else
        put(r, "  cache %s partition %u: %s\n", v->names[ci], p, reason);
    int first = 1;
    for (uint32_t i = 0; i < v->nn; i++) {
        const copy *c = v->cp[(size_t)ci * v->nn + i];
        if (!c || !c[p].role)
            continue;
        char id[37];
        cli_uuid_str(v->nodes[i].id, id);
        if (r->o->json)
            put(r, "%s{\"node\":\"%s\",\"role\":\"%s\",\"counter\":%" PRIu64 ",\"size\":%" PRIu64
                ",\"checksum\":\"%016" PRIx64 "\",\"stable\":%s}", first ? "" : ",", id,
                role_name(c[p].role), c[p].cntr, c[p].size, c[p].sum,
                c[p].stable ? "true" : "false");
        else
            put(r, "    node %s (%s): counter %" PRIu64 ", size %" PRIu64 ", checksum %016" PRIx64
                "%s\n", id, role_name(c[p].role), c[p].cntr, c[p].size, c[p].sum,
                c[p].stable ? "" : " (updated while read)");
        first = 0;
    }
    if (was) {
        if (r->o->json)
            put(r, "],\"saved\":{\"node\":\"%s\",\"counter\":%" PRIu64 ",\"size\":%" PRIu64
                ",\"checksum\":\"%016" PRIx64 "\"}}", was->node, was->cntr, was->size, was->sum);
        else
            put(r, "    saved for node %s: counter %" PRIu64 ", size %" PRIu64
                ", checksum %016" PRIx64 "\n", was->node, was->cntr, was->size, was->sum);
    } else if (r->o->json)
        put(r, "]}");
    r->conflicts++;
}

static void compare(report *r, verify *v, uint32_t ci, uint32_t p)
{
    const copy *ref = NULL;
    int unstable = 0, differ = 0;
    for (uint32_t i = 0; i < v->nn; i++) {
        const copy *c = v->cp[(size_t)ci * v->nn + i];
        if (!c || !c[p].role)
            continue;
        unstable |= !c[p].stable;
        if (!ref)
            ref = &c[p];
        else if (ref->cntr != c[p].cntr || ref->size != c[p].size || ref->sum != c[p].sum)
            differ = 1;
    }
    if (!ref)
        conflict(r, v, ci, p, "no owner answered", NULL);
    else if (unstable)
        conflict(r, v, ci, p, "updated while verified (the cluster is not idle)", NULL);
    else if (differ)
        conflict(r, v, ci, p, "owners disagree", NULL);
}

static saved *load(const char *file, uint32_t *n)
{
    FILE *f = fopen(file, "r");
    *n = 0;
    if (!f)
        return NULL;
    uint32_t cap = 1024;
    saved *s = em_malloc(cap * sizeof *s);
    char line[512];
    while (s && fgets(line, sizeof line, f)) {
        if (*n == cap) {
            saved *g = em_malloc((size_t)cap * 2 * sizeof *s);
            if (!g)
                break;
            memcpy(g, s, cap * sizeof *s);
            em_free(s);
            s = g;
            cap *= 2;
        }
        saved *x = &s[*n];
        if (sscanf(line, "%255[^\t]\t%u\t%36s\t%" SCNu64 "\t%" SCNu64 "\t%" SCNx64, x->cache,
                   &x->part, x->node, &x->cntr, &x->size, &x->sum) == 6)
            (*n)++;
    }
    fclose(f);
    return s;
}

static int save(const char *file, verify *v)
{
    FILE *f = fopen(file, "w");
    if (!f)
        return -1;
    for (uint32_t ci = 0; ci < v->nc; ci++)
        for (uint32_t i = 0; i < v->nn; i++) {
            const copy *c = v->cp[(size_t)ci * v->nn + i];
            char id[37];
            cli_uuid_str(v->nodes[i].id, id);
            for (uint32_t p = 0; c && p < v->parts[ci]; p++)
                if (c[p].role)
                    fprintf(f, "%s\t%u\t%s\t%" PRIu64 "\t%" PRIu64 "\t%016" PRIx64 "\n",
                            v->names[ci], p, id, c[p].cntr, c[p].size, c[p].sum);
        }
    return fclose(f);
}

/* against: every copy whose counter equals the saved one but whose content
 * does not. */
static void against(report *r, verify *v, const saved *s, uint32_t ns)
{
    for (uint32_t k = 0; k < ns; k++) {
        for (uint32_t ci = 0; ci < v->nc; ci++) {
            if (strcmp(v->names[ci], s[k].cache) || s[k].part >= v->parts[ci])
                continue;
            for (uint32_t i = 0; i < v->nn; i++) {
                char id[37];
                cli_uuid_str(v->nodes[i].id, id);
                const copy *c = v->cp[(size_t)ci * v->nn + i];
                if (!c || strcmp(id, s[k].node) || !c[s[k].part].role)
                    continue;
                const copy *x = &c[s[k].part];
                if (x->cntr == s[k].cntr && (x->size != s[k].size || x->sum != s[k].sum))
                    conflict(r, v, ci, s[k].part, "content changed without an update "
                             "(same update counter as saved)", &s[k]);
            }
        }
    }
}

int cli_cmd_idle_verify(cli_conn *c, const cli_opts *o, char **args, int nargs)
{
    const char *save_to = NULL, *against_file = NULL;
    verify v;
    memset(&v, 0, sizeof v);
    char **names = em_calloc((size_t)nargs + 1, sizeof *names);
    int nnames = 0;
    for (int i = 0; names && i < nargs; i++) {
        if ((!strcmp(args[i], "--save") || !strcmp(args[i], "--against")) && i + 1 < nargs) {
            if (args[i][2] == 's')
                save_to = args[++i];
            else
                against_file = args[++i];
        } else if (args[i][0] == '-' && args[i][1] == '-') {
            fprintf(stderr, "ember-cli: idle-verify: unknown option '%s'\n", args[i]);
            em_free(names);
            return 2;
        } else
            names[nnames++] = args[i];
    }
    int ret = cli_cluster_nodes(c, o, &v.nodes, &v.nn);
    if (ret)
        goto out;
    if (nnames) {
        v.names = em_calloc((size_t)nnames, sizeof *v.names);
        for (int i = 0; v.names && i < nnames; i++) {
            v.names[i] = em_malloc(strlen(names[i]) + 1);
            if (!v.names[i])
                break;
            strcpy(v.names[i], names[i]);
            v.nc++;
        }
    } else if ((ret = cache_names(c, o, &v)) != 0)
        goto out;
    size_t slots = (size_t)v.nc * v.nn + 1;
    v.parts = em_calloc(v.nc + 1, sizeof *v.parts);
    v.cp = em_calloc(slots, sizeof *v.cp);
    v.why = em_calloc(slots, sizeof *v.why);
    if (!v.parts || !v.cp || !v.why) {
        fprintf(stderr, "ember-cli: out of memory\n");
        ret = 2;
        goto out;
    }
    for (uint32_t i = 0; i < v.nn; i++) {
        cli_conn nc;
        cli_err e;
        cli_opts no = *o;
        char port[16];
        snprintf(port, sizeof port, "%d", v.nodes[i].port);
        if (v.nodes[i].host[0] && v.nodes[i].port) {
            no.host = v.nodes[i].host;
            no.port = port;
        }
        int rc = v.nodes[i].local ? 0 : cli_open(&nc, &no, &e);
        for (uint32_t ci = 0; ci < v.nc; ci++) {
            if (rc) {
                char msg[700];
                snprintf(msg, sizeof msg, "cannot connect to %s:%s: %s", no.host, no.port, e.msg);
                size_t slot = (size_t)ci * v.nn + i;
                if ((v.why[slot] = em_malloc(strlen(msg) + 1)))
                    strcpy(v.why[slot], msg);
            } else
                ask(v.nodes[i].local ? c : &nc, &v, ci, i);
        }
        if (!v.nodes[i].local)
            cli_close(&nc);
    }
    uint32_t ns = 0;
    saved *sv = NULL;
    if (against_file && !(sv = load(against_file, &ns))) {
        fprintf(stderr, "ember-cli: idle-verify: cannot read %s\n", against_file);
        ret = 2;
        goto out;
    }
    report r = { EM_BUF_INIT, 0, o };
    uint64_t total = 0, unanswered = 0;
    for (uint32_t ci = 0; ci < v.nc; ci++) {
        total += v.parts[ci];
        for (uint32_t p = 0; p < v.parts[ci]; p++)
            compare(&r, &v, ci, p);
    }
    if (sv)
        against(&r, &v, sv, ns);
    em_free(sv);
    em_buf errs = EM_BUF_INIT;
    for (uint32_t ci = 0; ci < v.nc; ci++)
        for (uint32_t i = 0; i < v.nn; i++) {
            const char *w = v.why[(size_t)ci * v.nn + i];
            if (!w)
                continue;
            char id[37], line[1024];
            cli_uuid_str(v.nodes[i].id, id);
            int k;
            if (o->json) {
                k = snprintf(line, sizeof line, "%s{\"cache\":", unanswered ? "," : "");
                em_buf_append(&errs, line, (size_t)k);
                cli_json_str(&errs, v.names[ci], strlen(v.names[ci]));
                k = snprintf(line, sizeof line, ",\"node\":\"%s\",\"error\":", id);
                em_buf_append(&errs, line, (size_t)k);
                cli_json_str(&errs, w, strlen(w));
                em_buf_append(&errs, "}", 1);
            } else {
                k = snprintf(line, sizeof line, "  cache %s, node %s: %s\n", v.names[ci], id, w);
                em_buf_append(&errs, line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1);
            }
            unanswered++;
        }
    if (save_to && save(save_to, &v)) {
        fprintf(stderr, "ember-cli: idle-verify: cannot write %s\n", save_to);
        ret = 2;
    }
    int agree = r.conflicts == 0 && unanswered == 0;
    if (o->json) {
        printf("{\"ok\":true,\"agree\":%s,\"caches\":%u,\"partitions\":%" PRIu64 ",\"nodes\":%u,"
               "\"conflict_count\":%u,\"conflicts\":[%.*s],\"errors\":[%.*s]}\n",
               agree ? "true" : "false", v.nc, total, v.nn, r.conflicts, (int)r.out.len,
               r.out.p ? (const char *)r.out.p : "", (int)errs.len,
               errs.p ? (const char *)errs.p : "");
    } else {
        printf("idle-verify: %u cache%s, %" PRIu64 " partitions, %u node%s: ", v.nc,
               v.nc == 1 ? "" : "s", total, v.nn, v.nn == 1 ? "" : "s");
        if (agree)
            printf("no conflicts\n");
        else
            printf("%u conflict%s%s\n%.*s%.*s", r.conflicts, r.conflicts == 1 ? "" : "s",
                   unanswered ? ", some nodes did not answer" : "", (int)r.out.len,
                   r.out.p ? (const char *)r.out.p : "", (int)errs.len,
                   errs.p ? (const char *)errs.p : "");
    }
    em_buf_free(&r.out);
    em_buf_free(&errs);
    if (!ret && !agree)
        ret = 3;
out:
    for (size_t i = 0; v.cp && i < (size_t)v.nc * v.nn; i++) {
        em_free(v.cp[i]);
        em_free(v.why[i]);
    }
    for (uint32_t i = 0; v.names && i < v.nc; i++)
        em_free(v.names[i]);
    em_free(v.names);
    em_free(v.cp);
    em_free(v.why);
    em_free(v.parts);
    em_free(v.nodes);
    em_free(names);
    return ret;
}

int cli_cmd_corrupt(cli_conn *c, const cli_opts *o, const char *cache, const char *part)
{
    char *end;
    long pn = strtol(part, &end, 10);
    if (*end || pn < 0 || pn > 65535) {
        fprintf(stderr, "ember-cli: bad partition '%s'\n", part);
        return 2;
    }
    em_buf b = EM_BUF_INIT;
    cli_put_str(&b, cache, strlen(cache));
    em_buf_put_le32(&b, (uint32_t)pn);
    const uint8_t *p;
    size_t n;
    cli_err e;
    int rc = cli_call(c, 32102, &b, &p, &n, &e);
    em_buf_free(&b);
    if (rc)
        return cli_report(o, rc, &e);
    if (n != 1) {
        snprintf(e.msg, sizeof e.msg, "malformed reply: CORRUPT");
        return cli_report(o, CLI_ELOCAL, &e);
    }
    if (o->json)
        printf("{\"ok\":true,\"corrupted\":%s}\n", p[0] ? "true" : "false");
    else
        printf("%s\n", p[0] ? "corrupted" : "partition empty: nothing changed");
    return p[0] ? 0 : 1;
}
