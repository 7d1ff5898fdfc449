/* load_pa.c - partition awareness for `ember-bench load --hosts ...
 * --partition-aware`: each key's request goes straight to the node that is
 * its primary, as Ignite's Java, .NET and C++ thin clients do by default
 * (ignite-thin-protocol.md §2.8), instead of to one node that forwards it.
 *
 * Before the run, not measured: one blocking connection per host reads the
 * node id from the handshake (protocol 1.4.0+), the first asks for the
 * cache's partition map (CACHE_PARTITIONS, 1101), and every key of the run
 * is filed under the host that is its partition's primary - the partition
 * from the key's hash as the server computes it (bin_partition over the
 * Java hashCode: the int itself, or the key text's String.hashCode).  The
 * run then draws each connection's keys from its host's list only, so
 * every request is served where its primary is, and the server-side work
 * per op has no forwarding hop.  The map is read once: a topology change
 * during the run sends some requests to a former primary, which forwards
 * them (the figures then show it; the run still verifies every reply). */
#include "load.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "binary/binary.h"
#include "util/buf.h"
#include "util/hash.h"
#include "util/mem.h"

#define PA_FRAME_MAX (8u << 20)     /* a partition map of 64 Ki partitions fits */

static int pa_read(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* pa_frame reads one length-prefixed frame into *buf (its body, *n bytes). */
static int pa_frame(int fd, uint8_t **buf, size_t *n)
{
    uint8_t h[4];
    if (pa_read(fd, h, 4))
        return -1;
    uint32_t len = em_ld32(h);
    if (len > PA_FRAME_MAX)
        return -1;
    uint8_t *b = em_realloc(*buf, len ? len : 1);
    if (!b)
        return -1;
    *buf = b;
    *n = len;
    return pa_read(fd, b, len);
}

/* pa_connect: a blocking connection to ai, handshaken; the node id (16
 * bytes as the server writes it) in id.  0, or -1 with err set. */
static int pa_connect(const ld_cfg *cfg, const struct addrinfo *ai, uint8_t id[16], int *fdp,
                      char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    *fdp = fd;
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        snprintf(err, errlen, "connect: %s", strerror(errno));
        return -1;
    }
    uint8_t hs[64];
    size_t hn = ld_enc_handshake(cfg, hs);
    uint8_t *b = NULL;
    size_t n = 0;
    int rc = -1;
    if (ld_write_all(fd, hs, hn) || pa_frame(fd, &b, &n)) {
        snprintf(err, errlen, "handshake: connection lost");
        goto out;
    }
    /* success | [1.7.0+: byte[] features] | UUID (type 10, 16 bytes) */
    size_t q = 1;
    if (n >= 1 && b[0] == 1 && cfg->ver_minor >= 7 && n >= q + 5 && b[q] == 12)
        q += 5 + (size_t)em_ld32(b + q + 1);
    if (n < 1 || b[0] != 1 || n < q + 17 || b[q] != 10) {
        snprintf(err, errlen, "handshake: refused, or no node id in the reply");
        goto out;
    }
    memcpy(id, b + q + 1, 16);
    rc = 0;
out:
    em_free(b);
    return rc;
}

/* pa_map: the cache's partition -> primary host index (-1: not listed),
 * from CACHE_PARTITIONS on fd; *parts the partition count. */
static int pa_map(const ld_cfg *cfg, int fd, uint8_t ids[][16], int nhosts, int8_t **prim,
                  uint32_t *parts, char *err, size_t errlen)
{
    uint8_t req[4 + 2 + 8 + 4 + 4];
    em_st32(req, sizeof req - 4);
    em_st16(req + 4, 1101);
    em_st64(req + 6, 2);
    em_st32(req + 14, 1);
    em_st32(req + 18, (uint32_t)cfg->cache_id);
    uint8_t *b = NULL;
    size_t n = 0;
    int rc = -1;
    if (ld_write_all(fd, req, sizeof req) || pa_frame(fd, &b, &n) || n < 10) {
        snprintf(err, errlen, "CACHE_PARTITIONS: no reply");
        goto out;
    }
    size_t q = 8;
    uint16_t flags = em_ld16(b + q);
    q += 2 + (flags & 2 ? 12 : 0);
    if (flags & 1) {
        snprintf(err, errlen, "CACHE_PARTITIONS refused");
        goto out;
    }
    q += 12;                                /* the map's topology version */
#define NEED(k) do { if (n - q < (size_t)(k) || q > n) goto bad; } while (0)
    NEED(4);
    uint32_t groups = em_ld32(b + q);
    q += 4;
    *parts = 0;
    for (uint32_t g = 0; g < groups; g++) {
        NEED(5);
        int applicable = b[q];
        uint32_t caches = em_ld32(b + q + 1);
        q += 5;
        int ours = 0;
        for (uint32_t c = 0; c < caches; c++) {
            NEED(4);
            ours |= (int32_t)em_ld32(b + q) == cfg->cache_id;
            q += 4;
            if (applicable) {
                NEED(4);
                uint32_t kc = em_ld32(b + q);
                NEED(4 + (uint64_t)kc * 8);
                q += 4 + (size_t)kc * 8;
            }
        }
        if (!applicable)
            continue;
        NEED(4);
        uint32_t nodes = em_ld32(b + q);
        q += 4;
        for (uint32_t i = 0; i < nodes; i++) {
            NEED(21);
            int h = -1;
            for (int k = 0; k < nhosts; k++)
                if (memcmp(ids[k], b + q + 1, 16) == 0)
                    h = k;
            uint32_t pc = em_ld32(b + q + 17);
            q += 21;
            NEED((uint64_t)pc * 4);
            for (uint32_t j = 0; ours && j < pc; j++) {
                uint32_t p = em_ld32(b + q + 4 * (size_t)j);
                if (p >= 65536)
                    goto bad;
                if (p >= *parts) {
                    int8_t *np = em_realloc(*prim, p + 1);
                    if (!np)
                        goto bad;
                    memset(np + *parts, -1, p + 1 - *parts);
                    *prim = np;
                    *parts = p + 1;
                }
                (*prim)[p] = (int8_t)h;
            }
            q += (size_t)pc * 4;
        }
    }
#undef NEED
    if (!*parts) {
        snprintf(err, errlen, "CACHE_PARTITIONS: the cache is not partition-aware");
        goto out;
    }
    rc = 0;
    goto out;
bad:
    snprintf(err, errlen, "CACHE_PARTITIONS: malformed reply");
out:
    em_free(b);
    return rc;
}

int ld_pa_split(const ld_cfg *cfg, struct addrinfo *const *ai, int nhosts,
                const uint32_t *keymap, uint32_t nkeys, uint32_t **keys, uint32_t *counts,
                char *err, size_t errlen)
{
    uint8_t ids[LD_MAX_HOSTS][16];
    int fds[LD_MAX_HOSTS];
    int8_t *prim = NULL;
    uint32_t parts = 0;
    int rc = -1, opened = 0;
    if (nhosts < 1 || nhosts > LD_MAX_HOSTS || cfg->proto != LD_IGNITE ||
        !(cfg->ver_major > 1 || cfg->ver_minor >= 4)) {
        snprintf(err, errlen, "--partition-aware needs --proto ignite and --ignite-version "
                 "1.4.0 or later");
        return -1;
    }
    for (; opened < nhosts; opened++)
        if (pa_connect(cfg, ai[opened], ids[opened], &fds[opened], err, errlen)) {
            opened++;
            goto out;
        }
    if (pa_map(cfg, fds[0], ids, nhosts, &prim, &parts, err, errlen))
        goto out;
    for (int h = 0; h < nhosts; h++) {
        counts[h] = 0;
        if (!(keys[h] = em_malloc(sizeof **keys * (nkeys ? nkeys : 1)))) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t k = keymap ? keymap[i] : i;
        int32_t hash;
        if (cfg->int_keys) {
            hash = (int32_t)k;
        } else {
            uint8_t t[LD_KEY_LEN];
            ld_key_text(k, t);
            hash = em_hash_java_str(t, LD_KEY_LEN);
        }
        int h = prim[bin_partition(hash, parts)];
        if (h < 0) {
            snprintf(err, errlen, "partition %u's primary is none of the hosts given",
                     bin_partition(hash, parts));
            goto out;
        }
        keys[h][counts[h]++] = k;
    }
    for (int h = 0; h < nhosts; h++)
        if (!counts[h]) {
            snprintf(err, errlen, "host %d is the primary of none of the run's keys", h + 1);
            goto out;
        }
    rc = 0;
out:
    for (int i = 0; i < opened; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    em_free(prim);
    return rc;
}
