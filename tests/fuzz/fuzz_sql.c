/* fuzz_sql.c - libFuzzer target for ember's SQL front end (src/sql/): the
 * input is SQL text for the tokenizer, then the classifier and either the
 * H2->SQLite pre-pass (queries, DML) or the DDL parser (CREATE/DROP), and
 * for queries the whole-table aggregate matcher (sq_agg.c).
 * Checks: nothing reads outside the input, the rewrite is NUL-terminated
 * and no longer than a bounded multiple of the input, a parsed CREATE
 * TABLE has a primary key and a non-key column, and nothing leaks.
 * Seeds: tests/fuzz/corpus/fuzz_sql/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sql/sql_int.h"
#include "util/buf.h"
#include "util/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[256];
    sq_lexed l;
    if (sq_lex((const char *)data, size, &l, msg, sizeof msg))
        return 0;
    int cls = sq_classify(&l);
    if (cls == SQ_CLS_DDL) {
        sq_ddl d;
        if (sq_ddl_parse(&l, &d, msg, sizeof msg) == 0) {
            if (d.kind == SQ_DDL_CREATE_TABLE) {
                uint32_t pk = 0;
                for (uint32_t i = 0; i < d.ncols; i++)
                    pk += d.cols[i].pk;
                if (!pk || pk == d.ncols || d.ncols > SQ_MAX_COLS)
                    abort();
            }
            sq_ddl_free(&d);
        }
    } else {
        em_buf out = EM_BUF_INIT;
        if (sq_rewrite(&l, &out, msg, sizeof msg) == 0) {
            if (!out.len || out.p[out.len - 1] != 0 || out.len > 2 * size + 32)
                abort();
        }
        em_buf_free(&out);
        if (cls == SQ_CLS_QUERY)
            sq_agg_free_q(sq_agg_parse(&l));
    }
    sq_lexed_free(&l);
    return 0;
}
