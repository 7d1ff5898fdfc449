/* cl_pset.c - a durable set of partitions in a file (format in cl_pset.h). */
#include "cluster/cl_pset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#define MAGIC 0x53504d45u               /* "EMPS" */
#define HDR   12u

int cl_pset_load(const char *path, cl_pset_item **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? EM_NOTFOUND : EM_IO;
    struct stat st;
    size_t max = HDR + (size_t)CL_PSET_MAX * 8 + 4;
    if (fstat(fd, &st)) {
        close(fd);
        return EM_IO;
    }
    if (st.st_size < (off_t)(HDR + 4) || (size_t)st.st_size > max) {
        close(fd);
        return EM_CORRUPT;
    }
    size_t len = (size_t)st.st_size;
    uint8_t *b = em_malloc(len);
    if (!b) {
        close(fd);
        return EM_NOMEM;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, b + got, len - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    int rc = 0;
    uint32_t cnt = got == len ? em_ld32(b + 8) : 0;
    if (got != len || em_ld32(b) != MAGIC || em_ld32(b + 4) != 1 || cnt > CL_PSET_MAX ||
        len != HDR + (size_t)cnt * 8 + 4 || em_crc32c(0, b, len - 4) != em_ld32(b + len - 4))
        rc = EM_CORRUPT;
    cl_pset_item *v = NULL;
    if (!rc && cnt && !(v = em_malloc(sizeof *v * cnt)))
        rc = EM_NOMEM;
    for (uint32_t i = 0; !rc && i < cnt; i++)
        v[i] = (cl_pset_item){ (int32_t)em_ld32(b + HDR + i * 8), em_ld32(b + HDR + i * 8 + 4) };
    em_free(b);
    if (rc) {
        em_free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return EM_IO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* sync_dir makes a rename in path's directory durable. */
static int sync_dir(const char *path)
{
    char dir[1024];
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 0;
    if (dl >= sizeof dir)
        return EM_INVAL;
    if (dl)
        memcpy(dir, path, dl);
    else
        dir[dl++] = '.';
    dir[dl] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return EM_IO;
    int rc = fsync(fd) ? EM_IO : 0;
    close(fd);
    return rc;
}

int cl_pset_save(const char *path, const cl_pset_item *v, uint32_t n)
{
    if (n > CL_PSET_MAX)
        return EM_INVAL;
    char tmp[1100];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return EM_INVAL;
    em_buf b = EM_BUF_INIT;
    uint8_t h[HDR];
    em_st32(h, MAGIC);
    em_st32(h + 4, 1);
    em_st32(h + 8, n);
    int rc = em_buf_append(&b, h, HDR) ? EM_NOMEM : 0;
    for (uint32_t i = 0; !rc && i < n; i++) {
        uint8_t e[8];
        em_st32(e, (uint32_t)v[i].cache);
        em_st32(e + 4, v[i].part);
        rc = em_buf_append(&b, e, 8) ? EM_NOMEM : 0;
    }
    if (!rc) {
        uint8_t c[4];
        em_st32(c, em_crc32c(0, b.p, b.len));
        rc = em_buf_append(&b, c, 4) ? EM_NOMEM : 0;
    }
    int fd = rc ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!rc && fd < 0)
        rc = EM_IO;
    if (!rc)
        rc = write_all(fd, b.p, b.len);
    if (!rc && fsync(fd))
        rc = EM_IO;
    if (fd >= 0)
        close(fd);
    if (!rc && rename(tmp, path))
        rc = EM_IO;
    if (!rc)
        rc = sync_dir(path);
    em_buf_free(&b);
    return rc;
}
