/* proto_env.h - the protocol layer in-process for unit tests: a store, a
 * binary registry, a pr_server and one connection, no sockets (shared by
 * test_proto.c and test_proto_stats.c). */
#ifndef EM_TEST_PROTO_ENV_H
#define EM_TEST_PROTO_ENV_H

#include <string.h>

#include "binary/binary.h"
#include "proto/proto.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"

typedef struct pe_env {
    st_store     *st;
    bin_registry *reg;
    pr_server    *ps;
    pr_conn      *c;
    em_buf        out;
    em_buf        req;
    int64_t       rid;
} pe_env;

/* pe_open: o NULL means the default options. */
static inline int pe_open(pe_env *e, const pr_options *o)
{
    memset(e, 0, sizeof *e);
    pr_options def;
    if (!o) {
        pr_options_default(&def);
        o = &def;
    }
    int rc = st_open(&e->st, NULL);
    if (rc)
        return rc;
    e->reg = bin_registry_new();
    if (!e->reg)
        return EM_NOMEM;
    if ((rc = pr_server_new(&e->ps, e->st, e->reg, o)) != 0)
        return rc;
    e->c = pr_conn_new(e->ps);
    return e->c ? 0 : EM_NOMEM;
}

static inline void pe_close(pe_env *e)
{
    pr_conn_free(e->c);
    pr_server_free(e->ps);
    if (e->reg)
        bin_registry_free(e->reg);
    if (e->st)
        st_close(e->st);
    em_buf_free(&e->out);
    em_buf_free(&e->req);
}

#endif
