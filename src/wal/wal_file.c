/* wal_file.c - the WAL's file-operations table: POSIX, and an in-memory file
 * system for tests that models power loss (SQLite test6.c's idea): per file
 * it keeps the bytes written and the bytes made durable by fsync, per
 * directory the names made durable by syncdir, and can fail or tear the nth
 * write or fsync with any errno.  Interface in wal.h.
 */
#include "wal/wal.h"

#include "util/err.h"
#include "util/mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- POSIX ------------------------------------------------------------- */

static int px_open(void *ctx, const char *path, int flags, int *fd)
{
    (void)ctx;
    int f = O_CLOEXEC | ((flags & WAL_O_WRITE) ? O_RDWR : O_RDONLY);
    if (flags & WAL_O_CREATE) f |= O_CREAT;
    if (flags & WAL_O_TRUNC) f |= O_TRUNC;
    int r = open(path, f, 0644);
    if (r < 0)
        return -errno;
    *fd = r;
    return 0;
}

static int px_close(void *ctx, int fd) { (void)ctx; return close(fd) ? -errno : 0; }

static int64_t px_pread(void *ctx, int fd, void *p, size_t n, uint64_t off)
{
    (void)ctx;
    ssize_t r;
    do r = pread(fd, p, n, (off_t)off); while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : r;
}

static int64_t px_pwrite(void *ctx, int fd, const void *p, size_t n, uint64_t off)
{
    (void)ctx;
    ssize_t r;
    do r = pwrite(fd, p, n, (off_t)off); while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : r;
}

static int px_fsync(void *ctx, int fd)
{
    (void)ctx;
    /* fdatasync is enough: the WAL never depends on mtime, and the file
     * size change of an append is data-relevant metadata it does flush. */
    return fdatasync(fd) ? -errno : 0;
}

static int px_ftruncate(void *ctx, int fd, uint64_t size)
{
    (void)ctx;
    return ftruncate(fd, (off_t)size) ? -errno : 0;
}

static int px_size(void *ctx, int fd, uint64_t *size)
{
    (void)ctx;
    struct stat st;
    if (fstat(fd, &st))
        return -errno;
    *size = (uint64_t)st.st_size;
    return 0;
}

static int px_rename(void *ctx, const char *a, const char *b) { (void)ctx; return rename(a, b) ? -errno : 0; }
static int px_unlink(void *ctx, const char *p) { (void)ctx; return unlink(p) ? -errno : 0; }

static int px_mkdir(void *ctx, const char *p)
{
    (void)ctx;
    if (mkdir(p, 0755) == 0 || errno == EEXIST)
        return 0;
    return -errno;
}

static int px_syncdir(void *ctx, const char *p)
{
    (void)ctx;
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

static int px_list(void *ctx, const char *dir, void (*fn)(void *arg, const char *name), void *arg)
{
    (void)ctx;
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            fn(arg, e->d_name);
    closedir(d);
    return 0;
}

static const wal_fileops posix_ops = {
    NULL, px_open, px_close, px_pread, px_pwrite, px_fsync, px_ftruncate, px_size,
    px_rename, px_unlink, px_mkdir, px_syncdir, px_list,
};

const wal_fileops *wal_posix_ops(void) { return &posix_ops; }

/* ---- in-memory, crashable ---------------------------------------------- */

typedef struct mnode { em_buf data, synced; } mnode;
typedef struct mentry { char *path; size_t node; } mentry;
typedef struct mlist { mentry *e; size_t n, cap; } mlist;

typedef struct mfault { uint64_t left; int err, torn, sticky, armed; } mfault;

struct wal_memfs {
    pthread_mutex_t mu;
    mnode **nodes;
    size_t nnodes, capnodes;
    mlist cur, dur;               /* names now / names a crash keeps */
    long *fds;                    /* fd -> node index, -1 free */
    size_t nfds;
    mfault wf, sf;                /* pwrite / fsync faults */
    uint64_t fsyncs;
    uint32_t fsync_us;            /* simulated device latency */
    wal_fileops ops;
};

static int list_find(const mlist *l, const char *path)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->e[i].path, path) == 0)
            return (int)i;
    return -1;
}

static int list_add(mlist *l, const char *path, size_t node)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        mentry *ne = em_realloc(l->e, nc * sizeof *ne);
        if (!ne)
            return EM_NOMEM;
        l->e = ne;
        l->cap = nc;
    }
    char *p = em_strndup(path, strlen(path));
    if (!p)
        return EM_NOMEM;
    l->e[l->n++] = (mentry){p, node};
    return 0;
}

static void list_del(mlist *l, size_t i)
{
    em_free(l->e[i].path);
    l->e[i] = l->e[--l->n];
}

static void list_free(mlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        em_free(l->e[i].path);
    em_free(l->e);
    memset(l, 0, sizeof *l);
}

static int node_new(wal_memfs *fs, size_t *out)
{
    if (fs->nnodes == fs->capnodes) {
        size_t nc = fs->capnodes ? fs->capnodes * 2 : 16;
        mnode **nn = em_realloc(fs->nodes, nc * sizeof *nn);
        if (!nn)
            return EM_NOMEM;
        fs->nodes = nn;
        fs->capnodes = nc;
    }
    mnode *n = em_calloc(1, sizeof *n);
    if (!n)
        return EM_NOMEM;
    fs->nodes[fs->nnodes] = n;
    *out = fs->nnodes++;
    return 0;
}

/* fault_hit: counts one operation against f; returns the errno to fail with. */
static int fault_hit(mfault *f)
{
    if (!f->armed)
        return 0;
    if (f->left > 1) {
        f->left--;
        return 0;
    }
    if (!f->sticky)
        f->armed = 0;
    return f->err;
}

static mnode *fd_node(wal_memfs *fs, int fd)
{
    if (fd < 0 || (size_t)fd >= fs->nfds || fs->fds[fd] < 0)
        return NULL;
    return fs->nodes[fs->fds[fd]];
}

static int mf_open(void *ctx, const char *path, int flags, int *fd)
{
    wal_memfs *fs = ctx;
    int rc = 0;
    pthread_mutex_lock(&fs->mu);
    int i = list_find(&fs->cur, path);
    size_t node;
    if (i < 0) {
        if (!(flags & WAL_O_CREATE)) {
            rc = -ENOENT;
            goto out;
        }
        if ((rc = node_new(fs, &node)) || (rc = list_add(&fs->cur, path, node)))
            goto out;
    } else {
        node = fs->cur.e[i].node;
        if (flags & WAL_O_TRUNC)
            fs->nodes[node]->data.len = 0;
    }
    size_t f;
    for (f = 0; f < fs->nfds && fs->fds[f] >= 0; f++)
        ;
    if (f == fs->nfds) {
        long *nf = em_realloc(fs->fds, (fs->nfds + 8) * sizeof *nf);
        if (!nf) {
            rc = EM_NOMEM;
            goto out;
        }
        for (size_t k = fs->nfds; k < fs->nfds + 8; k++)
            nf[k] = -1;
        fs->fds = nf;
        fs->nfds += 8;
    }
    fs->fds[f] = (long)node;
    *fd = (int)f;
out:
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int mf_close(void *ctx, int fd)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    int rc = fd_node(fs, fd) ? 0 : -EBADF;
    if (!rc)
        fs->fds[fd] = -1;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int64_t mf_pread(void *ctx, int fd, void *p, size_t n, uint64_t off)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    mnode *nd = fd_node(fs, fd);
    int64_t r = -EBADF;
    if (nd) {
        r = 0;
        if (off < nd->data.len) {
            size_t k = nd->data.len - off < n ? nd->data.len - (size_t)off : n;
            memcpy(p, nd->data.p + off, k);
            r = (int64_t)k;
        }
    }
    pthread_mutex_unlock(&fs->mu);
    return r;
}

static int write_at(mnode *nd, const void *p, size_t n, uint64_t off)
{
    if (off + n > nd->data.len) {
        size_t old = nd->data.len;
        if (em_buf_reserve(&nd->data, (size_t)off + n - old))
            return EM_NOMEM;
        if (off > old)
            memset(nd->data.p + old, 0, (size_t)off - old);
        nd->data.len = (size_t)off + n;
    }
    memcpy(nd->data.p + off, p, n);
    return 0;
}

static int64_t mf_pwrite(void *ctx, int fd, const void *p, size_t n, uint64_t off)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    mnode *nd = fd_node(fs, fd);
    int64_t r = -EBADF;
    if (nd) {
        int err = fault_hit(&fs->wf);
        if (err && fs->wf.torn && n > 1) {
            /* a torn write: half the bytes land, then the error */
            write_at(nd, p, n / 2, off);
            r = -err;
        } else if (err) {
            r = -err;
        } else {
            r = write_at(nd, p, n, off) ? -ENOMEM : (int64_t)n;
        }
    }
    pthread_mutex_unlock(&fs->mu);
    return r;
}

static int mf_fsync(void *ctx, int fd)
{
    wal_memfs *fs = ctx;
    if (fs->fsync_us)
        usleep(fs->fsync_us);
    pthread_mutex_lock(&fs->mu);
    mnode *nd = fd_node(fs, fd);
    int rc = -EBADF;
    if (nd) {
        int err = fault_hit(&fs->sf);
        if (err) {
            rc = -err;
        } else {
            nd->synced.len = 0;
            rc = em_buf_append(&nd->synced, nd->data.p, nd->data.len);
            fs->fsyncs++;
        }
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int mf_ftruncate(void *ctx, int fd, uint64_t size)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    mnode *nd = fd_node(fs, fd);
    int rc = -EBADF;
    if (nd) {
        rc = 0;
        if (size <= nd->data.len)
            nd->data.len = (size_t)size;
        else if (em_buf_reserve(&nd->data, (size_t)size - nd->data.len) == 0) {
            memset(nd->data.p + nd->data.len, 0, (size_t)size - nd->data.len);
            nd->data.len = (size_t)size;
        } else
            rc = -ENOMEM;
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int mf_size(void *ctx, int fd, uint64_t *size)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    mnode *nd = fd_node(fs, fd);
    if (nd)
        *size = nd->data.len;
    pthread_mutex_unlock(&fs->mu);
    return nd ? 0 : -EBADF;
}

static int mf_rename(void *ctx, const char *a, const char *b)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    int rc = -ENOENT;
    int i = list_find(&fs->cur, a);
    if (i >= 0) {
        size_t node = fs->cur.e[i].node;
        int j = list_find(&fs->cur, b);
        if (j >= 0)
            list_del(&fs->cur, (size_t)j);
        i = list_find(&fs->cur, a);
        list_del(&fs->cur, (size_t)i);
        rc = list_add(&fs->cur, b, node);
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int mf_unlink(void *ctx, const char *p)
{
    wal_memfs *fs = ctx;
    pthread_mutex_lock(&fs->mu);
    int i = list_find(&fs->cur, p);
    if (i >= 0)
        list_del(&fs->cur, (size_t)i);
    pthread_mutex_unlock(&fs->mu);
    return i >= 0 ? 0 : -ENOENT;
}

static int mf_mkdir(void *ctx, const char *p) { (void)ctx; (void)p; return 0; }

static int in_dir(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && path[n] == '/' && !strchr(path + n + 1, '/');
}

static int mf_syncdir(void *ctx, const char *dir)
{
    wal_memfs *fs = ctx;
    int rc = 0;
    pthread_mutex_lock(&fs->mu);
    for (size_t i = 0; i < fs->dur.n;)
        if (in_dir(fs->dur.e[i].path, dir))
            list_del(&fs->dur, i);
        else
            i++;
    for (size_t i = 0; i < fs->cur.n && !rc; i++)
        if (in_dir(fs->cur.e[i].path, dir))
            rc = list_add(&fs->dur, fs->cur.e[i].path, fs->cur.e[i].node);
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int mf_list(void *ctx, const char *dir, void (*fn)(void *arg, const char *name), void *arg)
{
    wal_memfs *fs = ctx;
    size_t n = strlen(dir), k = 0;
    /* Names are copied first so fn may create, rename or unlink files. */
    pthread_mutex_lock(&fs->mu);
    char **names = em_malloc((fs->cur.n ? fs->cur.n : 1) * sizeof *names);
    int rc = names ? 0 : EM_NOMEM;
    for (size_t i = 0; !rc && i < fs->cur.n; i++)
        if (in_dir(fs->cur.e[i].path, dir)) {
            const char *nm = fs->cur.e[i].path + n + 1;
            if (!(names[k] = em_strndup(nm, strlen(nm))))
                rc = EM_NOMEM;
            else
                k++;
        }
    pthread_mutex_unlock(&fs->mu);
    for (size_t i = 0; i < k; i++) {
        if (!rc)
            fn(arg, names[i]);
        em_free(names[i]);
    }
    em_free(names);
    return rc;
}

int wal_memfs_new(wal_memfs **out)
{
    wal_memfs *fs = em_calloc(1, sizeof *fs);
    if (!fs)
        return EM_NOMEM;
    pthread_mutex_init(&fs->mu, NULL);
    fs->ops = (wal_fileops){fs, mf_open, mf_close, mf_pread, mf_pwrite, mf_fsync, mf_ftruncate,
                            mf_size, mf_rename, mf_unlink, mf_mkdir, mf_syncdir, mf_list};
    *out = fs;
    return 0;
}

void wal_memfs_free(wal_memfs *fs)
{
    if (!fs)
        return;
    for (size_t i = 0; i < fs->nnodes; i++) {
        em_buf_free(&fs->nodes[i]->data);
        em_buf_free(&fs->nodes[i]->synced);
        em_free(fs->nodes[i]);
    }
    em_free(fs->nodes);
    list_free(&fs->cur);
    list_free(&fs->dur);
    em_free(fs->fds);
    pthread_mutex_destroy(&fs->mu);
    em_free(fs);
}

const wal_fileops *wal_memfs_ops(wal_memfs *fs) { return &fs->ops; }

void wal_memfs_fault(wal_memfs *fs, int what, uint64_t nth, int err, int torn, int sticky)
{
    pthread_mutex_lock(&fs->mu);
    mfault *f = what == WAL_FAULT_WRITE ? &fs->wf : &fs->sf;
    *f = (mfault){nth, err, torn, sticky, nth > 0};
    pthread_mutex_unlock(&fs->mu);
}

void wal_memfs_slow_fsync(wal_memfs *fs, uint32_t us)
{
    fs->fsync_us = us;
}

uint64_t wal_memfs_fsyncs(wal_memfs *fs)
{
    pthread_mutex_lock(&fs->mu);
    uint64_t n = fs->fsyncs;
    pthread_mutex_unlock(&fs->mu);
    return n;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

int wal_memfs_crash(wal_memfs *fs, double keep, uint64_t seed, wal_memfs **out)
{
    wal_memfs *nf;
    int rc = wal_memfs_new(&nf);
    if (rc)
        return rc;
    uint64_t rs = seed | 1;
    pthread_mutex_lock(&fs->mu);
    size_t *map = em_malloc((fs->nnodes ? fs->nnodes : 1) * sizeof *map);
    if (!map)
        rc = EM_NOMEM;
    for (size_t i = 0; !rc && i < fs->nnodes; i++)
        map[i] = SIZE_MAX;
    for (size_t i = 0; !rc && i < fs->dur.n; i++) {
        size_t old = fs->dur.e[i].node;
        if (map[old] == SIZE_MAX) {
            size_t nn;
            if ((rc = node_new(nf, &nn)))
                break;
            mnode *s = fs->nodes[old], *d = nf->nodes[nn];
            /* Durable bytes, plus a prefix of the unsynced suffix when the
             * file only grew since its last fsync (appends reach the disk
             * in order in this model; anything else reverts to the sync). */
            size_t len = s->synced.len;
            if (s->data.len > len && memcmp(s->data.p, s->synced.p, len) == 0) {
                double k = keep >= 0 ? keep : (double)(xorshift(&rs) % 1001) / 1000.0;
                len += (size_t)((double)(s->data.len - len) * k);
                rc = em_buf_append(&d->data, s->data.p, len);
            } else {
                rc = em_buf_append(&d->data, s->synced.p, s->synced.len);
            }
            if (!rc)
                rc = em_buf_append(&d->synced, d->data.p, d->data.len);
            map[old] = nn;
        }
        if (!rc)
            rc = list_add(&nf->cur, fs->dur.e[i].path, map[old]);
        if (!rc)
            rc = list_add(&nf->dur, fs->dur.e[i].path, map[old]);
    }
    pthread_mutex_unlock(&fs->mu);
    em_free(map);
    if (rc) {
        wal_memfs_free(nf);
        return rc;
    }
    *out = nf;
    return 0;
}

int wal_memfs_file(wal_memfs *fs, const char *path, uint8_t **p, size_t *len)
{
    pthread_mutex_lock(&fs->mu);
    int i = list_find(&fs->cur, path);
    if (i >= 0) {
        mnode *nd = fs->nodes[fs->cur.e[i].node];
        *p = nd->data.p;
        *len = nd->data.len;
    }
    pthread_mutex_unlock(&fs->mu);
    return i >= 0 ? 0 : -ENOENT;
}

int wal_memfs_set_len(wal_memfs *fs, const char *path, size_t len)
{
    pthread_mutex_lock(&fs->mu);
    int i = list_find(&fs->cur, path), rc = -ENOENT;
    if (i >= 0) {
        mnode *nd = fs->nodes[fs->cur.e[i].node];
        rc = 0;
        if (len > nd->data.len) {
            rc = em_buf_reserve(&nd->data, len - nd->data.len);
            if (!rc)
                memset(nd->data.p + nd->data.len, 0, len - nd->data.len);
        }
        if (!rc)
            nd->data.len = len;
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}
