/* srv_meta.c - the binary metadata log (srv_meta.h).  A file of records,
 * appended and fsynced one at a time through the WAL's file-ops table:
 *
 *   offset size  field
 *   0      4     magic "EMBM" (0x4d424d45, little-endian)
 *   4      2     kind: 1 type record (op 3003 body), 2 type name
 *   6      2     0 (reserved)
 *   8      4     payload length n
 *   12     4     CRC32C of bytes 0..11 followed by the payload
 *   16     n     payload; NAME = byte platform, int type id, name bytes;
 *                STATE = byte cluster state (0..2); BASELINE = a BASELINE_SET
 *                entry of the metadata group (the last one is the baseline)
 *
 * Replay applies records in order (a type record merges exactly as the live
 * op did; the last STATE record is the state).  A torn tail (invalid bytes with no valid record after them) is
 * cut; a bad record followed by a valid one refuses to start.
 */
#include "server/srv_meta.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cl_meta_fsm.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#define META_MAGIC 0x4d424d45u
#define META_HDR   16
#define META_MAX   (64u << 20)
#define META_FILE  "binary-meta.log"

struct srv_meta {
    const wal_fileops *ops;
    int      fd;
    uint64_t size;
    uint64_t records;
    int      state;                 /* last STATE record, -1 = none */
    em_buf   baseline;              /* last BASELINE record */
    int      err;
    pthread_mutex_t mu;
    em_buf   scratch;
};

/* rec_parse: 0 and the record at p (kind, payload, total), EM_AGAIN when
 * the bytes end inside it, EM_CORRUPT when it is invalid. */
static int rec_parse(const uint8_t *p, size_t n, int *kind, const uint8_t **pay,
                     uint32_t *len, size_t *total)
{
    if (n < META_HDR) {
        uint8_t m[4];
        em_st32(m, META_MAGIC);
        return memcmp(p, m, n < 4 ? n : 4) == 0 ? EM_AGAIN : EM_CORRUPT;
    }
    uint32_t l = em_ld32(p + 8);
    uint16_t k = em_ld16(p + 4);
    if (em_ld32(p) != META_MAGIC || k < SRV_META_TYPE || k > SRV_META_BASELINE ||
        em_ld16(p + 6) != 0 || l > META_MAX)
        return EM_CORRUPT;
    if (n - META_HDR < l)
        return EM_AGAIN;
    uint32_t crc = em_crc32c(em_crc32c(0, p, 12), p + META_HDR, l);
    if (crc != em_ld32(p + 12))
        return EM_CORRUPT;
    *kind = k;
    *pay = p + META_HDR;
    *len = l;
    *total = META_HDR + (size_t)l;
    return 0;
}

static int apply(srv_meta *m, bin_registry *reg, int kind, const uint8_t *p, uint32_t n)
{
    if (kind == SRV_META_BASELINE) {
        cl_meta_entry e;
        if (cl_meta_entry_decode(p, n, &e) || e.type != CL_META_E_BASELINE_SET)
            return EM_CORRUPT;
        em_buf_reset(&m->baseline);
        return em_buf_append(&m->baseline, p, n);
    }
    if (kind == SRV_META_STATE) {
        if (n != 1 || p[0] > 2)
            return EM_CORRUPT;
        m->state = p[0];
        return 0;
    }
    if (kind == SRV_META_TYPE) {
        bin_type *t = NULL;
        size_t used = 0;
        int rc = bin_meta_decode(p, n, &t, &used);
        if (rc)
            return rc;
        rc = bin_registry_put(reg, t, NULL);
        bin_type_free(t);
        return rc;
    }
    if (n < 5)
        return EM_TRUNCATED;
    return bin_registry_name_put(reg, p[0], (int32_t)em_ld32(p + 1), (const char *)p + 5, n - 5);
}

/* valid_after: 1 if a valid record starts anywhere after off. */
static int valid_after(const uint8_t *p, size_t n, size_t off)
{
    for (size_t i = off + 1; i + META_HDR <= n; i++) {
        int k;
        const uint8_t *pay;
        uint32_t l;
        size_t tot;
        if (em_ld32(p + i) == META_MAGIC && rec_parse(p + i, n - i, &k, &pay, &l, &tot) == 0)
            return 1;
    }
    return 0;
}

int srv_meta_open(srv_meta **out, const wal_fileops *ops, const char *dir,
                  bin_registry *reg, char *err, size_t errlen)
{
    *out = NULL;
    char path[1024];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, META_FILE) >= sizeof path)
        return EM_INVAL;
    srv_meta *m = em_calloc(1, sizeof *m);
    if (!m)
        return EM_NOMEM;
    m->ops = ops;
    m->fd = -1;
    m->state = -1;
    pthread_mutex_init(&m->mu, NULL);
    em_buf b = {0};
    int rc = ops->mkdir(ops->ctx, dir);
    if (!rc) {
        rc = wal_read_file(ops, path, &b);
        if (rc == -ENOENT) {
            em_buf_reset(&b);
            rc = 0;
        }
    }
    size_t off = 0;
    while (!rc && off < b.len) {
        int kind;
        const uint8_t *pay;
        uint32_t len;
        size_t tot;
        int pr = rec_parse(b.p + off, b.len - off, &kind, &pay, &len, &tot);
        if (pr) {
            if (valid_after(b.p, b.len, off)) {
                snprintf(err, errlen, "%s: corrupt record at offset %zu", path, off);
                rc = EM_CORRUPT;
            }
            break;                  /* torn tail: cut below */
        }
        if ((rc = apply(m, reg, kind, pay, len)) != 0) {
            snprintf(err, errlen, "%s: record at offset %zu cannot be applied: %s", path,
                     off, em_strerror(rc));
            break;
        }
        m->records++;
        off += tot;
    }
    em_buf_free(&b);
    if (!rc)
        rc = ops->open(ops->ctx, path, WAL_O_WRITE | WAL_O_CREATE, &m->fd);
    if (!rc && (rc = ops->ftruncate(ops->ctx, m->fd, off)) == 0 &&
        (rc = ops->fsync(ops->ctx, m->fd)) == 0)
        rc = ops->syncdir(ops->ctx, dir);
    if (rc) {
        if (!err[0])
            snprintf(err, errlen, "%s: %s", path, em_strerror(rc));
        srv_meta_close(m);
        return rc;
    }
    m->size = off;
    *out = m;
    return 0;
}

void srv_meta_close(srv_meta *m)
{
    if (!m)
        return;
    if (m->fd >= 0)
        m->ops->close(m->ops->ctx, m->fd);
    em_buf_free(&m->scratch);
    em_buf_free(&m->baseline);
    pthread_mutex_destroy(&m->mu);
    em_free(m);
}

int srv_meta_append(srv_meta *m, int kind, const uint8_t *p, size_t n)
{
    if (n > META_MAX)
        return EM_TOOBIG;
    pthread_mutex_lock(&m->mu);
    int rc = m->err;
    em_buf *b = &m->scratch;
    em_buf_reset(b);
    if (!rc && (em_buf_reserve(b, META_HDR + n) != 0))
        rc = EM_NOMEM;
    if (!rc) {
        em_st32(b->p, META_MAGIC);
        b->p[4] = (uint8_t)kind;
        b->p[5] = 0;
        b->p[6] = b->p[7] = 0;
        em_st32(b->p + 8, (uint32_t)n);
        memcpy(b->p + META_HDR, p, n);
        em_st32(b->p + 12, em_crc32c(em_crc32c(0, b->p, 12), p, n));
        b->len = META_HDR + n;
        size_t done = 0;
        while (!rc && done < b->len) {
            int64_t w = m->ops->pwrite(m->ops->ctx, m->fd, b->p + done, b->len - done,
                                       m->size + done);
            if (w < 0)
                rc = (int)w;
            else if (w == 0)
                rc = EM_IO;
            else
                done += (size_t)w;
        }
        if (!rc)
            rc = m->ops->fsync(m->ops->ctx, m->fd);
        if (rc) {
            m->err = rc;            /* the tail may be torn: append no more */
        } else {
            m->size += b->len;
        }
    }
    if (b->cap > 65536)
        em_buf_free(b);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

uint64_t srv_meta_records(const srv_meta *m) { return m->records; }
int srv_meta_state(const srv_meta *m) { return m->state; }

void srv_meta_baseline(const srv_meta *m, const uint8_t **p, size_t *n)
{
    *p = m->baseline.p;
    *n = m->baseline.len;
}
