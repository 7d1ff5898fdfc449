/* bench_m1.h - the M1 value (../shared/BENCHMARKS.md M1, seed IGNITE-29109)
 * for every M1 row, built with the binary writer; shared by the toBinary
 * column (bench_m1.c) and the store's cache.put / cache.get columns.
 *
 * Value per row: a user-type complex object with one field holding an
 * empty HashMap (25/1), empty ArrayList (24/1), empty TreeMap
 * (BinaryTreeMap, raw mode), empty TreeSet (BinaryTreeSet), or a TreeMap of
 * 12 entries (int 0..11 -> "value0".."value11").
 */
#ifndef EM_BENCH_M1_H
#define EM_BENCH_M1_H

#include "binary/binary.h"
#include "util/buf.h"

enum { M1_HASHMAP, M1_ARRAYLIST, M1_TREEMAP, M1_TREESET, M1_TREEMAP12, M1_ROWS };

/* Row labels as in the seed ("empty HashMap", ...). */
extern const char *const m1_row_names[M1_ROWS];

/* A reusable builder: types defined once, writer scratch reused, so
 * m1_write allocates nothing once out has grown. */
typedef struct m1_builder {
    bin_registry *reg;
    const bin_desc *desc[M1_ROWS];   /* one holder type per row */
    bin_writer w;
} m1_builder;

int  m1_builder_init(m1_builder *b);
void m1_builder_free(m1_builder *b);
/* m1_write appends row's value to out (reset it first for a fresh value). */
int  m1_write(m1_builder *b, int row, em_buf *out);

/* m1_build_value: one-shot (own registry), appends row's value to out. */
int  m1_build_value(int row, em_buf *out);

#endif
