/* chaos.c - ember-chaos: the workload and checker of the fault-injection
 * suite (tests/chaos/).  `run` drives clients against one or more emberd
 * nodes while the suite's nemeses kill, pause and partition them, and writes
 * the history of every operation; `check` reads the data back and judges
 * the history.  Workloads:
 *
 *   set       each client puts keys nobody else writes; check: every
 *             acknowledged put is present with its value (no acknowledged
 *             write lost), nothing present that nobody wrote.
 *   register  clients read and write a few shared keys with values unique
 *             per write; check: each key's history is linearizable.
 *
 * Outcomes: ok (the server answered success), fail (it answered an error:
 * the op did not happen), info (no answer: timeout or lost connection, the
 * op may or may not have happened).  History line, one per op:
 *
 *   <kind> <client> <key> <value> <invoke_us> <return_us> <outcome> <node>
 *
 * kind w (put) or r (get; value = what was read, -1 for null); times are
 * CLOCK_MONOTONIC microseconds; return_us is 0 for info; node is the index
 * in --nodes of the node the op went to (absent in hand-made histories).
 *
 * Minority side: `check --windows FILE` also counts writes acknowledged by
 * a node while it was cut off from the majority - FILE has one line
 * "<node index> <from_us> <to_us>" per cut (`ember-chaos now` prints the
 * clock the history uses), and an acknowledged write invoked and answered
 * inside such a window, through that node, is a violation: its copies on
 * the other side could not have been reached.
 */
#include "stress.h"
#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES   16
#define MAX_CLIENTS 64

typedef struct node_addr { char ip[64]; int port; } node_addr;

typedef struct opts {
    node_addr nodes[MAX_NODES];
    int       nnodes;
    const char *workload;
    const char *cache;
    const char *history;
    const char *windows;       /* check: minority-side windows, or NULL */
    int       clients;
    double    duration_s;
    int       keys;
    int       timeout_ms;
    int       max_ops;
} opts;

typedef struct hop {
    char    kind;
    int     client;
    int32_t key;
    int64_t value;
    int64_t inv_us, ret_us;
    char    outcome;           /* 'o' ok, 'f' fail, 'i' info */
    int     node;              /* index in --nodes; -1 unknown */
} hop;

typedef struct client {
    const opts *o;
    int      id;
    uint64_t rng;
    sx_conn  c;
    int      open;
    int      node;
    hop     *ops;
    size_t   nops, cap;
    long     connects_failed;
} client;

static atomic_int g_stop;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int parse_nodes(opts *o, const char *s)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(t, ':');
        if (!colon || o->nnodes == MAX_NODES)
            return -1;
        *colon = 0;
        snprintf(o->nodes[o->nnodes].ip, sizeof o->nodes[0].ip, "%s", t);
        o->nodes[o->nnodes].port = atoi(colon + 1);
        if (o->nodes[o->nnodes].port <= 0)
            return -1;
        o->nnodes++;
    }
    return o->nnodes ? 0 : -1;
}

/* ---- one connection per client, moved to another node on failure -------- */

static int ensure_open(client *cl)
{
    if (cl->open)
        return 0;
    const opts *o = cl->o;
    for (int tries = 0; tries < o->nnodes && !atomic_load(&g_stop); tries++) {
        const node_addr *n = &o->nodes[cl->node % o->nnodes];
        if (sx_open_addr(&cl->c, n->ip, n->port, o->timeout_ms, 1, 2, 0) == 0) {
            cl->open = 1;
            return 0;
        }
        cl->connects_failed++;
        cl->node++;
    }
    return -1;
}

static void drop_conn(client *cl)
{
    if (cl->open)
        sx_close(&cl->c);
    cl->open = 0;
    cl->node++;
}

static int record(client *cl, hop h)
{
    if (cl->nops == cl->cap) {
        size_t cap = cl->cap ? cl->cap * 2 : 1024;
        hop *p = em_realloc(cl->ops, cap * sizeof *p);
        if (!p)
            return -1;
        cl->ops = p;
        cl->cap = cap;
    }
    cl->ops[cl->nops++] = h;
    return 0;
}

/* do_op runs one put (value >= 0) or get (value < 0) and returns the
 * outcome; *read gets what a get read (-1 for null). */
static char do_op(client *cl, int32_t key, int64_t value, int64_t *read)
{
    sx_conn *c = &cl->c;
    em_buf_reset(&c->out);
    int32_t cid = sx_cache_id(cl->o->cache);
    size_t s = sx_req_begin(&c->out, value >= 0 ? SX_OP_PUT : SX_OP_GET, c->rid++);
    sx_cache_hdr(&c->out, cid);
    sx_v_int(&c->out, key);
    if (value >= 0)
        sx_v_int(&c->out, (int32_t)value);
    sx_req_end(&c->out, s);
    sx_reply r;
    int rc = sx_call(c, &r, cl->o->timeout_ms);
    if (rc) {
        drop_conn(cl);
        return 'i';
    }
    if (r.status != 0) {
        /* A write the server says may or may not have happened (applied
         * on the primary, not acknowledged by every owner; an owner that
         * did not answer) is indeterminate, not failed. */
        if (value >= 0 && r.n >= 14 && memmem(r.p, r.n, "may or may not", 14))
            return 'i';
        return 'f';
    }
    if (value < 0) {
        sx_rd d = { r.p, r.n, 0, 0 };
        uint8_t t = sx_rd_u8(&d);
        if (t == 101)
            *read = -1;
        else if (t == 3)
            *read = sx_rd_i32(&d);
        else
            d.err = 1;
        if (d.err) {
            drop_conn(cl);          /* a reply we cannot read: treat as lost */
            return 'i';
        }
    }
    return 'o';
}

static void *client_main(void *arg)
{
    client *cl = arg;
    const opts *o = cl->o;
    int64_t end = now_us() + (int64_t)(o->duration_s * 1e6);
    int reg = strcmp(o->workload, "register") == 0;
    int32_t seq = 0;
    while (!atomic_load(&g_stop) && now_us() < end && (int)cl->nops < o->max_ops) {
        if (ensure_open(cl) != 0) {
            usleep(20000);          /* every node refused: back off, then retry */
            continue;
        }
        hop h = { .client = cl->id };
        if (reg) {
            h.key = (int32_t)(sx_rand(&cl->rng) % (uint64_t)o->keys);
            int write = sx_rand(&cl->rng) & 1;
            h.kind = write ? 'w' : 'r';
            h.value = write ? (int64_t)(cl->id + 1) * 1000000 + seq++ : -1;
        } else {
            h.kind = 'w';
            h.key = (cl->id + 1) * 1000000 + seq++;
            h.value = h.key ^ 0x5a5a;
        }
        h.node = cl->node % o->nnodes;
        h.inv_us = now_us();
        int64_t got = -1;
        h.outcome = do_op(cl, h.key, h.kind == 'w' ? h.value : -1, &got);
        h.ret_us = h.outcome == 'i' ? 0 : now_us();
        if (h.kind == 'r')
            h.value = got;
        if (record(cl, h) != 0)
            break;
    }
    return NULL;
}

static int write_history(const char *path, client *cls, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < cls[i].nops; j++) {
            const hop *h = &cls[i].ops[j];
            fprintf(f, "%c %d %d %lld %lld %lld %c %d\n", h->kind, h->client, h->key,
                    (long long)h->value, (long long)h->inv_us, (long long)h->ret_us,
                    h->outcome, h->node);
        }
    return fclose(f);
}

static int cmd_run(opts *o)
{
    /* The cache, through whichever node answers first. */
    client boot = { .o = o, .id = 0 };
    int created = 0;
    int64_t end = now_us() + (int64_t)o->timeout_ms * 1000 * 10;
    while (!created && now_us() < end) {
        if (ensure_open(&boot) == 0 && sx_create_cache(&boot.c, o->cache) == 0)
            created = 1;
        else
            drop_conn(&boot);
    }
    drop_conn(&boot);
    if (!created) {
        fprintf(stderr, "ember-chaos: could not create cache %s on any node\n", o->cache);
        return 2;
    }
    client *cls = em_calloc((size_t)o->clients, sizeof *cls);
    pthread_t *th = em_calloc((size_t)o->clients, sizeof *th);
    if (!cls || !th)
        return 2;
    for (int i = 0; i < o->clients; i++) {
        cls[i] = (client){ .o = o, .id = i, .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1),
                           .node = i };
        pthread_create(&th[i], NULL, client_main, &cls[i]);
    }
    long ok = 0, fail = 0, info = 0, cfail = 0;
    for (int i = 0; i < o->clients; i++) {
        pthread_join(th[i], NULL);
        for (size_t j = 0; j < cls[i].nops; j++) {
            char oc = cls[i].ops[j].outcome;
            ok += oc == 'o';
            fail += oc == 'f';
            info += oc == 'i';
        }
        cfail += cls[i].connects_failed;
    }
    int rc = write_history(o->history, cls, o->clients);
    printf("run: %s, %d clients, %ld ok, %ld fail, %ld info, %ld failed connects\n",
           o->workload, o->clients, ok, fail, info, cfail);
    for (int i = 0; i < o->clients; i++) {
        drop_conn(&cls[i]);
        em_free(cls[i].ops);
    }
    em_free(cls);
    em_free(th);
    return rc ? 2 : 0;
}

/* ---- check ----------------------------------------------------------------- */

static hop *load_history(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1024;
    hop *v = em_malloc(cap * sizeof *v);
    *n = 0;
    char line[256];
    while (v && fgets(line, sizeof line, f)) {
        hop h = { .node = -1 };
        long long val, inv, ret;
        char kind, oc;
        if (sscanf(line, "%c %d %d %lld %lld %lld %c %d", &kind, &h.client, &h.key, &val, &inv,
                   &ret, &oc, &h.node) < 7)
            continue;
        h.kind = kind; h.value = val; h.inv_us = inv; h.ret_us = ret; h.outcome = oc;
        if (*n == cap) {
            cap *= 2;
            hop *p = em_realloc(v, cap * sizeof *v);
            if (!p) { em_free(v); v = NULL; break; }
            v = p;
        }
        v[(*n)++] = h;
    }
    fclose(f);
    return v;
}

/* read_key: a GET of key from any node, retried until one answers. */
static int read_key(client *cl, int32_t key, int64_t *out)
{
    for (int tries = 0; tries < 50; tries++) {
        if (ensure_open(cl) != 0) {
            usleep(100000);
            continue;
        }
        if (do_op(cl, key, -1, out) == 'o')
            return 0;
    }
    return -1;
}

static int check_set(const opts *o, const hop *h, size_t n)
{
    client cl = { .o = o };
    long acked = 0, lost = 0, info_present = 0, info_absent = 0, wrong = 0;
    for (size_t i = 0; i < n; i++) {
        if (h[i].kind != 'w' || h[i].outcome == 'f')
            continue;
        int64_t got;
        if (read_key(&cl, h[i].key, &got) != 0) {
            fprintf(stderr, "check: no node answers\n");
            drop_conn(&cl);
            return 2;
        }
        if (h[i].outcome == 'o') {
            acked++;
            if (got != h[i].value) {
                if (got == -1)
                    lost++;
                else
                    wrong++;
                if (lost + wrong <= 10)
                    fprintf(stderr, "LOST acknowledged put key %d value %lld: read %lld\n",
                            h[i].key, (long long)h[i].value, (long long)got);
            }
        } else if (got == h[i].value) {
            info_present++;
        } else if (got == -1) {
            info_absent++;
        } else {
            wrong++;
        }
    }
    drop_conn(&cl);
    printf("check set: %ld acknowledged, %ld lost, %ld wrong; indeterminate %ld present, "
           "%ld absent\n", acked, lost, wrong, info_present, info_absent);
    return lost || wrong ? 1 : 0;
}

/* ---- linearizability of a register with unique written values ------------
 *
 * Gibbons and Korach's zones: group each write with the reads that returned
 * its value (a cluster); its zone runs between the earliest return and the
 * latest invocation in the cluster, "forward" when the earliest return comes
 * first.  With every read's write known, the history is linearizable iff no
 * read returns before its write was invoked, no two forward zones overlap,
 * and no backward zone lies inside a forward zone.  O(n log n) per key,
 * exact, where a search over interleavings would be exponential.  The
 * initial null is a write that finished before anything began.  An info
 * write may have taken effect at any time after its invocation: it returns
 * at +inf, and is dropped when nobody read it (then it may never have
 * happened).  Failed ops and info reads say nothing and are dropped. */
typedef struct zone { int64_t lo, hi; int fwd; int64_t value; } zone;

static int zone_cmp(const void *a, const void *b)
{
    const zone *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int check_key(int32_t key, const hop *h, size_t n, long *nops)
{
    size_t nw = 0;
    for (size_t i = 0; i < n; i++)
        nw += h[i].key == key && h[i].kind == 'w';
    zone *z = em_calloc(nw + 1, sizeof *z);
    int64_t *inv_max = em_calloc(nw + 1, sizeof *inv_max);
    int64_t *ret_min = em_calloc(nw + 1, sizeof *ret_min);
    int64_t *wval = em_calloc(nw + 1, sizeof *wval);
    int64_t *winv = em_calloc(nw + 1, sizeof *winv);
    int *used = em_calloc(nw + 1, sizeof *used);
    int bad = 0;
    if (!z || !inv_max || !ret_min || !wval || !winv || !used) {
        bad = 2;
        goto out;
    }
    /* Cluster 0: the initial null. */
    size_t nc = 1;
    wval[0] = -1;
    winv[0] = INT64_MIN;
    inv_max[0] = INT64_MIN;
    ret_min[0] = INT64_MIN;
    used[0] = 1;
    for (size_t i = 0; i < n; i++) {
        if (h[i].key != key || h[i].kind != 'w' || h[i].outcome == 'f')
            continue;
        wval[nc] = h[i].value;
        winv[nc] = h[i].inv_us;
        inv_max[nc] = h[i].inv_us;
        ret_min[nc] = h[i].outcome == 'o' ? h[i].ret_us : INT64_MAX;
        used[nc] = h[i].outcome == 'o';
        nc++;
        (*nops)++;
    }
    for (size_t i = 0; i < n && !bad; i++) {
        if (h[i].key != key || h[i].kind != 'r' || h[i].outcome != 'o')
            continue;
        (*nops)++;
        size_t w = nc;
        for (size_t j = 0; j < nc; j++)
            if (wval[j] == h[i].value) {
                w = j;
                break;
            }
        if (w == nc) {
            fprintf(stderr, "key %d: read %lld, a value nobody wrote\n", key,
                    (long long)h[i].value);
            bad = 1;
            break;
        }
        if (h[i].ret_us < winv[w]) {
            fprintf(stderr, "key %d: read of %lld returned before its write began\n", key,
                    (long long)h[i].value);
            bad = 1;
            break;
        }
        used[w] = 1;
        if (h[i].inv_us > inv_max[w])
            inv_max[w] = h[i].inv_us;
        if (h[i].ret_us < ret_min[w])
            ret_min[w] = h[i].ret_us;
    }
    if (bad)
        goto out;
    size_t nz = 0;
    for (size_t j = 0; j < nc; j++) {
        if (!used[j])
            continue;
        int64_t f = ret_min[j], s = inv_max[j];
        z[nz++] = f < s ? (zone){ f, s, 1, wval[j] } : (zone){ s, f, 0, wval[j] };
    }
    qsort(z, nz, sizeof *z, zone_cmp);
    /* Forward zones in start order must not overlap; a backward zone must not
     * sit inside any forward zone (checked against every forward zone that
     * starts before it, kept as the furthest-reaching one). */
    int64_t fwd_end = INT64_MIN;
    int64_t last_fwd_val = 0;
    for (size_t j = 0; j < nz && !bad; j++) {
        if (z[j].fwd) {
            if (z[j].lo < fwd_end) {
                fprintf(stderr, "key %d: writes of %lld and %lld both appear to be last\n",
                        key, (long long)last_fwd_val, (long long)z[j].value);
                bad = 1;
            }
            if (z[j].hi > fwd_end) {
                fwd_end = z[j].hi;
                last_fwd_val = z[j].value;
            }
        } else if (z[j].hi < fwd_end) {
            fprintf(stderr, "key %d: value %lld read entirely inside the zone of %lld\n", key,
                    (long long)z[j].value, (long long)last_fwd_val);
            bad = 1;
        }
    }
out:
    em_free(z); em_free(inv_max); em_free(ret_min); em_free(wval); em_free(winv);
    em_free(used);
    return bad;
}

static int check_register(const opts *o, hop *h, size_t n)
{
    /* A final read of every key, after everything, joins the history. */
    client cl = { .o = o };
    size_t extra = (size_t)o->keys;
    hop *all = em_realloc(h, (n + extra) * sizeof *h);
    if (!all)
        return 2;
    for (int k = 0; k < o->keys; k++) {
        int64_t got;
        int64_t inv = now_us();
        if (read_key(&cl, k, &got) != 0) {
            fprintf(stderr, "check: no node answers\n");
            drop_conn(&cl);
            em_free(all);
            return 2;
        }
        all[n++] = (hop){ 'r', -1, k, got, inv, now_us(), 'o', -1 };
    }
    drop_conn(&cl);
    int bad = 0;
    long nops = 0;
    for (int k = 0; k < o->keys; k++)
        bad |= check_key(k, all, n, &nops);
    printf("check register: %d keys, %ld ops judged: %s\n", o->keys, nops,
           bad ? "NOT linearizable" : "linearizable");
    em_free(all);
    return bad;
}

/* cmd_partitions prints "partition owner" for every partition of the cache
 * as CACHE_PARTITIONS (1101) answers on the first node, sorted by partition,
 * owner as 32 hex digits, so the answers of several nodes can be compared. */
static int cmd_partitions(const opts *o)
{
    client cl = { .o = o };
    if (ensure_open(&cl) != 0) {
        fprintf(stderr, "ember-chaos: cannot connect\n");
        return 2;
    }
    static uint64_t own[65536][2];
    static uint8_t have[65536];
    int32_t maxp;
    int rc = sx_part_owners(&cl.c, sx_cache_id(o->cache), o->timeout_ms, own, have, 65536, &maxp);
    drop_conn(&cl);
    if (rc == 1) {
        fprintf(stderr, "ember-chaos: malformed CACHE_PARTITIONS reply (or a partition twice)\n");
        return 1;
    }
    if (rc) {
        fprintf(stderr, "ember-chaos: CACHE_PARTITIONS failed (%d)\n", rc);
        return 2;
    }
    for (int32_t p = 0; p <= maxp; p++) {
        if (!have[p]) {
            fprintf(stderr, "ember-chaos: partition %d has no owner\n", p);
            return 1;
        }
        printf("%d %016llx%016llx\n", p, (unsigned long long)own[p][0],
               (unsigned long long)own[p][1]);
    }
    return 0;
}

/* cmd_topology: what a partition-aware client sees - a 1.7.0 connection to
 * the first node, CACHE_GET_NAMES every 50 ms for --duration seconds;
 * prints "topology MAJOR.MINOR" for each reply whose header says the
 * affinity topology changed (the first reply does: the client has seen
 * none yet). */
static int cmd_topology(const opts *o)
{
    sx_conn c;
    if (sx_open_addr(&c, o->nodes[0].ip, o->nodes[0].port, o->timeout_ms, 1, 7, 0)) {
        fprintf(stderr, "ember-chaos: cannot connect\n");
        return 2;
    }
    int64_t end = now_us() + (int64_t)(o->duration_s * 1e6);
    int rc = 0;
    while (now_us() < end && !rc) {
        em_buf_reset(&c.out);
        size_t s = sx_req_begin(&c.out, 1050, c.rid++);
        sx_req_end(&c.out, s);
        sx_reply r;
        if ((rc = sx_call(&c, &r, o->timeout_ms)) != 0 || r.status) {
            fprintf(stderr, "ember-chaos: request failed (%d, status %d)\n", rc, r.status);
            rc = 2;
            break;
        }
        if (r.topo_changed) {
            printf("topology %lld.%d\n", (long long)r.topo_major, r.topo_minor);
            fflush(stdout);
        }
        struct timespec ts = { 0, 50 * 1000000L };
        nanosleep(&ts, NULL);
    }
    sx_close(&c);
    return rc;
}

/* cmd_judge: the register check on a history alone (no final reads), for
 * testing the checker itself on histories made by hand. */
static int cmd_judge(const opts *o)
{
    size_t n = 0;
    hop *h = load_history(o->history, &n);
    if (!h) {
        fprintf(stderr, "ember-chaos: cannot read %s\n", o->history);
        return 2;
    }
    int bad = 0;
    long nops = 0;
    for (int k = 0; k < o->keys; k++)
        bad |= check_key(k, h, n, &nops);
    printf("judge: %ld ops: %s\n", nops, bad ? "NOT linearizable" : "linearizable");
    em_free(h);
    return bad;
}

/* check_minority counts the writes acknowledged through a node inside one
 * of its minority-side windows (see the top of this file). */
static int check_minority(const char *path, const hop *h, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ember-chaos: cannot read %s\n", path);
        return 2;
    }
    long bad = 0, windows = 0;
    int node;
    long long from, to;
    while (fscanf(f, "%d %lld %lld", &node, &from, &to) == 3) {
        windows++;
        for (size_t i = 0; i < n; i++)
            if (h[i].kind == 'w' && h[i].outcome == 'o' && h[i].node == node &&
                h[i].inv_us >= from && h[i].ret_us <= to) {
                if (bad++ < 10)
                    fprintf(stderr, "MINORITY ack: key %d value %lld through node %d at "
                            "%lld..%lld us, cut %lld..%lld\n", h[i].key, (long long)h[i].value,
                            node, (long long)h[i].inv_us, (long long)h[i].ret_us, from, to);
            }
    }
    fclose(f);
    printf("minority: %ld writes acknowledged on a minority side (%ld windows)\n", bad, windows);
    return bad ? 1 : 0;
}

static int cmd_check(const opts *o)
{
    size_t n = 0;
    hop *h = load_history(o->history, &n);
    if (!h) {
        fprintf(stderr, "ember-chaos: cannot read %s\n", o->history);
        return 2;
    }
    int rc, mrc = o->windows ? check_minority(o->windows, h, n) : 0;
    if (strcmp(o->workload, "register") == 0) {
        rc = check_register(o, h, n);
    } else {
        rc = check_set(o, h, n);
        em_free(h);
    }
    return rc ? rc : mrc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: ember-chaos run|check --nodes IP:PORT[,IP:PORT...] --history FILE\n"
            "         [--windows FILE]  (check: minority-side windows, see chaos.c)\n"
            "       ember-chaos judge --history FILE [--keys N]   (register check only)\n"
            "       ember-chaos now   (the history's clock, microseconds)\n"
            "       ember-chaos partitions --nodes IP:PORT --cache NAME  (owner per partition)\n"
            "       ember-chaos topology --nodes IP:PORT --duration S  (topology changes a\n"
            "         1.7.0 client is told of)\n"
            "         [--workload set|register] [--cache NAME] [--clients N]\n"
            "         [--duration SECONDS] [--keys N] [--timeout-ms MS] [--max-ops N]\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    if (!strcmp(argv[1], "now")) {
        printf("%lld\n", (long long)now_us());
        return 0;
    }
    opts o = { .workload = "set", .cache = "chaos", .clients = 4, .duration_s = 5,
               .keys = 5, .timeout_ms = 2000, .max_ops = 1000000 };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(); return 2; }
        if (!strcmp(a, "--nodes")) { if (parse_nodes(&o, v)) { usage(); return 2; } }
        else if (!strcmp(a, "--workload")) o.workload = v;
        else if (!strcmp(a, "--cache")) o.cache = v;
        else if (!strcmp(a, "--history")) o.history = v;
        else if (!strcmp(a, "--windows")) o.windows = v;
        else if (!strcmp(a, "--clients")) o.clients = atoi(v);
        else if (!strcmp(a, "--duration")) o.duration_s = atof(v);
        else if (!strcmp(a, "--keys")) o.keys = atoi(v);
        else if (!strcmp(a, "--timeout-ms")) o.timeout_ms = atoi(v);
        else if (!strcmp(a, "--max-ops")) o.max_ops = atoi(v);
        else { usage(); return 2; }
        i++;
    }
    if (!strcmp(argv[1], "judge") && o.history && o.keys >= 1)
        return cmd_judge(&o);
    if (!strcmp(argv[1], "partitions") && o.nnodes)
        return cmd_partitions(&o);
    if (!strcmp(argv[1], "topology") && o.nnodes)
        return cmd_topology(&o);
    if (!o.nnodes || !o.history || o.clients < 1 || o.clients > MAX_CLIENTS || o.keys < 1 ||
        (strcmp(o.workload, "set") && strcmp(o.workload, "register"))) {
        usage();
        return 2;
    }
    if (!strcmp(argv[1], "run"))
        return cmd_run(&o);
    if (!strcmp(argv[1], "check"))
        return cmd_check(&o);
    if (!strcmp(argv[1], "partitions"))
        return cmd_partitions(&o);
    usage();
    return 2;
}
