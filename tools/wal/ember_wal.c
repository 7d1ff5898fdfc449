/* ember_wal.c - `ember-wal`: reads ember's on-disk WAL formats for people.
 *   ember-wal dump DIR|FILE   every segment/checkpoint header and record
 *   ember-wal check DIR       what recovery would do: OK, torn tail (cut on
 *                             start), or corruption that refuses to start
 *   ember-wal repair DIR      rewrite the headers of segments recovery reads
 *                             by their records' LSNs (and the checkpoint
 *                             naming one), so they name those LSNs; with the
 *                             server stopped
 * Formats: src/wal/wal.c (frames, segments), wal_codec.c (update command),
 * wal_ckpt.c (checkpoints).  dump and check read only; repair writes only
 * those headers.
 */
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *op_name(int op)
{
    switch (op) {
    case ST_UPD_PUT: return "PUT";
    case ST_UPD_REMOVE: return "REMOVE";
    case ST_UPD_CLEAR: return "CLEAR";
    case ST_UPD_CACHE_CREATE: return "CACHE_CREATE";
    case ST_UPD_CACHE_DESTROY: return "CACHE_DESTROY";
    case ST_UPD_CACHE_CONFIG: return "CACHE_CONFIG";
    }
    return "?";
}

static void hex(const uint8_t *p, size_t n)
{
    size_t k = n < 16 ? n : 16;
    for (size_t i = 0; i < k; i++)
        printf("%02x", p[i]);
    if (n > k)
        printf("..");
}

static int print_frame(void *arg, size_t off, const wal_frame *f)
{
    (void)arg;
    printf("  @%-8zu lsn %-8" PRIu64 " len %-6u ", off, f->lsn, f->body_len);
    if (f->type == WAL_REC_END) {
        printf("END records=%" PRIu64 "\n", f->body_len == 8 ? em_ld64(f->body) : 0);
        return 0;
    }
    if (f->type == WAL_REC_TX) {
        /* a committed transaction: count, then (length, command) each */
        uint32_t n = f->body_len >= 4 ? em_ld32(f->body) : 0;
        printf("TX updates=%u\n", n);
        size_t at = 4;
        for (uint32_t i = 0; i < n && at + 4 <= f->body_len; i++) {
            uint32_t len = em_ld32(f->body + at);
            if (len > f->body_len - at - 4)
                break;
            wal_frame sub = *f;
            sub.type = WAL_REC_UPDATE;
            sub.body = f->body + at + 4;
            sub.body_len = len;
            print_frame(arg, off, &sub);
            at += 4 + (size_t)len;
        }
        return 0;
    }
    wal_cmd c;
    st_update u;
    st_cache_config cfg;
    int rc = wal_cmd_unmarshal(f->body, f->body_len, &c);
    if (rc) {
        printf("UNDECODABLE command (%s)\n", em_errname(rc));
        return 0;
    }
    if (c.update_all || (rc = wal_decode_update(&c, &u, &cfg)) != 0) {
        printf("%s%s table %d part %d rows %u\n", op_name(c.op), c.update_all ? " updateAll" : "",
               c.table_id, c.partition, c.nrows);
        return 0;
    }
    printf("%-13s cache %-11d part %-5u", op_name(u.kind), u.cache_id, u.partition);
    if (u.kind == ST_UPD_PUT || u.kind == ST_UPD_REMOVE) {
        printf(" key[%u] ", u.klen);
        hex(u.key, u.klen);
    }
    if (u.kind == ST_UPD_PUT) {
        printf(" val[%u] ", u.vlen);
        hex(u.val, u.vlen);
        if (u.expire_at_ms)
            printf(" expire_at %" PRId64, u.expire_at_ms);
    }
    if (u.kind == ST_UPD_CACHE_CREATE || u.kind == ST_UPD_CACHE_CONFIG)
        printf(" name \"%s\" partitions %u backups %d", cfg.name, cfg.partitions, cfg.backups);
    printf("\n");
    return 0;
}

static int dump_file(const char *path)
{
    em_buf b = EM_BUF_INIT;
    int rc = wal_read_file(wal_posix_ops(), path, &b);
    if (rc) {
        fprintf(stderr, "%s: %s\n", path, em_strerror(rc));
        em_buf_free(&b);
        return 1;
    }
    size_t start;
    wal_seg_hdr sh;
    wal_ckpt_hdr ch;
    if (wal_seg_hdr_parse(b.p, b.len, &sh) == 0) {
        printf("%s: segment %" PRIu64 ", first LSN %" PRIu64 ", %zu bytes\n", path, sh.seg_no,
               sh.first_lsn, b.len);
        start = WAL_SEG_HDR;
    } else if (wal_ckpt_hdr_parse(b.p, b.len, &ch) == 0) {
        printf("%s: checkpoint; WAL replay continues at segment %" PRIu64 " LSN %" PRIu64
               ", taken at %" PRId64 " ms, %zu bytes\n", path, ch.seg_no, ch.first_lsn, ch.wall_ms, b.len);
        start = WAL_CKPT_HDR;
    } else {
        printf("%s: no valid segment or checkpoint header (%zu bytes); scanning frames from 0\n",
               path, b.len);
        start = 0;
    }
    wal_scan_res r;
    wal_scan(b.p, b.len, start, 0, print_frame, NULL, &r);
    if (r.state == WAL_SCAN_CLEAN)
        printf("  end: %" PRIu64 " records, clean\n", r.frames);
    else if (r.state == WAL_SCAN_TORN)
        printf("  end: %" PRIu64 " records, then %zu invalid bytes at offset %zu (a torn tail)\n",
               r.frames, b.len - r.end_off, r.end_off);
    else
        printf("  end: %" PRIu64 " records, then CORRUPT bytes at offset %zu; valid frames resume at %zu\n",
               r.frames, r.end_off, r.next_off);
    em_buf_free(&b);
    return r.state == WAL_SCAN_CORRUPT;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int dump_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int is_ckpt;
        uint64_t no;
        if (wal_name_parse(e->d_name, &is_ckpt, &no))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            names = em_realloc(names, cap * sizeof *names);
            if (!names) {
                closedir(d);
                return 1;
            }
        }
        names[n++] = em_strndup(e->d_name, strlen(e->d_name));
    }
    closedir(d);
    /* "ckpt-" sorts before "wal-": the checkpoint, then its segments */
    qsort(names, n, sizeof *names, cmp_str);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        bad |= dump_file(p);
        em_free(names[i]);
    }
    em_free(names);
    if (!n)
        printf("%s: no WAL segments or checkpoints\n", dir);
    return bad;
}

typedef struct counts { uint64_t n[6]; } counts;

static int count(void *arg, const st_update *u)
{
    counts *c = arg;
    if (u->kind >= 1 && u->kind <= 5)
        c->n[u->kind]++;
    return 0;
}

static int check_dir(const char *dir)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = dir;
    o.read_only = 1;
    wal *w;
    int rc = wal_open(&w, &o);
    if (rc) {
        fprintf(stderr, "%s: %s\n", dir, em_strerror(rc));
        return 1;
    }
    counts c;
    memset(&c, 0, sizeof c);
    rc = wal_replay(w, count, &c);
    wal_stats st;
    wal_stats_get(w, &st);
    if (rc) {
        printf("CORRUPT: %s\n", wal_errmsg(w));
        printf("recovery refuses to start (%s)\n", em_errname(rc));
    } else {
        printf("OK: %" PRIu64 " records replayable (%" PRIu64 " put, %" PRIu64 " remove, %" PRIu64
               " clear, %" PRIu64 " cache create, %" PRIu64 " cache destroy); next LSN %" PRIu64 "\n",
               st.replayed, c.n[1], c.n[2], c.n[3], c.n[4], c.n[5], st.next_lsn);
        if (wal_errmsg(w)[0])
            printf("note: %s\n", wal_errmsg(w));
        if (st.mislabeled)
            printf("warning: %" PRIu64 " segment(s) read by their records' LSNs, not their "
                   "headers'; the last: %s\n", st.mislabeled, wal_warnmsg(w));
    }
    wal_close(w);
    return rc ? 1 : 0;
}

static int repair_dir(const char *dir)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = dir;
    wal *w;
    int rc = wal_open(&w, &o);
    if (rc) {
        fprintf(stderr, "%s: %s\n", dir, em_strerror(rc));
        return 1;
    }
    uint64_t fixed = 0;
    rc = wal_repair(w, &fixed);
    if (rc) {
        printf("CORRUPT: %s\n", wal_errmsg(w));
        printf("not repaired (%s): %" PRIu64 " file(s) rewritten\n", em_errname(rc), fixed);
    } else if (fixed) {
        printf("repaired: %" PRIu64 " file header(s) rewritten; the last segment: %s\n", fixed,
               wal_warnmsg(w));
    } else {
        printf("OK: nothing to repair\n");
    }
    wal_close(w);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "dump") == 0) {
        struct stat st;
        if (stat(argv[2], &st)) {
            perror(argv[2]);
            return 2;
        }
        return S_ISDIR(st.st_mode) ? dump_dir(argv[2]) : dump_file(argv[2]);
    }
    if (argc == 3 && strcmp(argv[1], "check") == 0)
        return check_dir(argv[2]);
    if (argc == 3 && strcmp(argv[1], "repair") == 0)
        return repair_dir(argv[2]);
    fprintf(stderr, "usage: ember-wal dump DIR|FILE\n"
                    "       ember-wal check DIR\n"
                    "       ember-wal repair DIR   (server stopped)\n"
                    "exit status: 0 ok (a torn tail is ok: recovery cuts it), 1 corrupt, 2 usage\n");
    return 2;
}
