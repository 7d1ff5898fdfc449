/* test_sql_index.c - secondary indexes: CREATE INDEX fills from the entries
 * already there, every later change (SQL DML, key-value put and remove,
 * clear, expiry) keeps it in step, the planner uses it for equality,
 * ranges and ORDER BY, and what it returns equals a full scan's answer
 * (a randomised history checked against the same query written so that
 * no index can serve it).
 */
#include "test.h"
#include "proto_env.h"
#include "sql_env.h"

#include <stdlib.h>

#include "proto/proto_int.h"
#include "sql/sql_int.h"
#include "store/store.h"
#include "util/hash.h"

/* ix_of: index name of table tab (PUBLIC), or NULL (its ref is the
 * catalog's, fine while the test holds the table). */
static sq_index *ix_of(pe_env *e, const char *tab, const char *name)
{
    sq_table **t;
    uint32_t n;
    uint64_t ep;
    sq_index *r = NULL;
    if (sq_cat_snapshot(e->ps->sql, &t, &n, &ep))
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(t[i]->name, tab))
            for (uint32_t j = 0; j < t[i]->nix; j++)
                if (!strcmp(t[i]->ix[j]->name, name))
                    r = t[i]->ix[j];
    sq_cat_release(t, n);
    return r;
}

static uint64_t scans(pe_env *e, const char *tab, const char *name)
{
    sq_index *ix = ix_of(e, tab, name);
    return ix ? atomic_load(&ix->scans) : UINT64_MAX;
}

/* USES_INDEX: the query answers want and read index name. */
#define USES_INDEX(e, sql, want, tab, name) do { uint64_t b_ = scans((e), (tab), (name)); \
        QUERY_IS((e), (sql), (want)); \
        if (scans((e), (tab), (name)) == b_) test_fail(__FILE__, __LINE__, "%s: index %s not used", \
                                                       (sql), (name)); } while (0)

TEST(sql_index_build_and_plan)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE p (id INT PRIMARY KEY, name VARCHAR, age INT, dept INT, pay DOUBLE)");
    for (int i = 0; i < 200; i++) {
        char q[200];
        snprintf(q, sizeof q, "INSERT INTO p VALUES (%d, 'n%03d', %d, %d, %d.5)", i, i, i, i % 7,
                 1000 - i);
        EXEC_OK(&e, q);
    }
    /* Built from the 200 rows already there. */
    EXEC_OK(&e, "CREATE INDEX p_age ON p (age)");
    REQUIRE(ix_of(&e, "P", "P_AGE") != NULL);
    CHECK_EQ(sq_ix_count(ix_of(&e, "P", "P_AGE")), 200);
    USES_INDEX(&e, "SELECT id FROM p WHERE age = 42", "ID/42", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age > 196", "ID/197|198|199", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age >= 197", "ID/197|198|199", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age < 2", "ID/0|1", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age BETWEEN 10 AND 12", "ID/10|11|12", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age > 10 AND age <= 12", "ID/11|12", "P", "P_AGE");
    /* A text bound on an INT column compares as a number (affinity). */
    USES_INDEX(&e, "SELECT id FROM p WHERE age > '197'", "ID/198|199", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age = 5.0", "ID/5", "P", "P_AGE");
    USES_INDEX(&e, "SELECT id FROM p WHERE age > 198.5", "ID/199", "P", "P_AGE");
    /* ORDER BY the indexed column needs no sort. */
    USES_INDEX(&e, "SELECT age FROM p ORDER BY age LIMIT 3", "AGE/0|1|2", "P", "P_AGE");
    /* Parameters. */
    {
        em_buf a = EM_BUF_INIT;
        em_buf_put_u8(&a, BIN_INT);
        em_buf_put_le32(&a, 150);
        char t[2048];
        uint64_t b = scans(&e, "P", "P_AGE");
        CHECK_EQ(sqlf_args(&e, NULL, 0, "SELECT count(*) FROM p WHERE age >= ?", 100, 0, a.p, a.len,
                           1, t, NULL, NULL), 0);
        CHECK(!strcmp(t, "COUNT(*)/L50"));
        CHECK(scans(&e, "P", "P_AGE") > b);
        em_buf_free(&a);
    }
    /* Text index, and a composite one. */
    EXEC_OK(&e, "CREATE INDEX p_name ON p (name)");
    USES_INDEX(&e, "SELECT id FROM p WHERE name >= 'n197'", "ID/197|198|199", "P", "P_NAME");
    USES_INDEX(&e, "SELECT id FROM p WHERE name = 'n010'", "ID/10", "P", "P_NAME");
    EXEC_OK(&e, "CREATE INDEX p_dept_age ON p (dept, age)");
    USES_INDEX(&e, "SELECT id FROM p WHERE dept = 3 AND age > 180 ORDER BY age",
               "ID/185|192|199", "P", "P_DEPT_AGE");
    /* Only what SQLite would return: NULLs never match a range. */
    EXEC_OK(&e, "INSERT INTO p (id, name) VALUES (500, 'nul')");
    USES_INDEX(&e, "SELECT count(*) FROM p WHERE age < 3", "COUNT(*)/L3", "P", "P_AGE");
    QUERY_IS(&e, "SELECT id FROM p WHERE age IS NULL", "ID/500");
    /* The index holds the column: it cannot be dropped under it. */
    FAILS_WITH(&e, "ALTER TABLE p DROP COLUMN age", "because an index exists (\"P_AGE\")");
    EXEC_OK(&e, "ALTER TABLE p DROP COLUMN pay");         /* moves nothing the index reads */
    USES_INDEX(&e, "SELECT id FROM p WHERE age = 7", "ID/7", "P", "P_AGE");
    EXEC_OK(&e, "DROP INDEX p_age");
    CHECK(ix_of(&e, "P", "P_AGE") == NULL);
    QUERY_IS(&e, "SELECT id FROM p WHERE age = 42", "ID/42");
    EXEC_OK(&e, "DROP INDEX p_dept_age");
    EXEC_OK(&e, "ALTER TABLE p DROP COLUMN age");
    FAILS_WITH(&e, "CREATE INDEX p_x ON p (name, name)", "Column already indexed: NAME");
    EXEC_OK(&e, "DROP TABLE p");
    pe_close(&e);
}

/* The index follows every way an entry changes. */
TEST(sql_index_follows_every_change)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE c (id INT PRIMARY KEY, v INT) WITH \"VALUE_TYPE=CV\"");
    EXEC_OK(&e, "CREATE INDEX c_v ON c (v)");
    EXEC_OK(&e, "INSERT INTO c VALUES (1, 10), (2, 20), (3, 30)");
    USES_INDEX(&e, "SELECT id FROM c WHERE v >= 20", "ID/2|3", "C", "C_V");
    EXEC_OK(&e, "UPDATE c SET v = 5 WHERE id = 3");
    USES_INDEX(&e, "SELECT id FROM c WHERE v >= 20", "ID/2", "C", "C_V");
    USES_INDEX(&e, "SELECT id FROM c WHERE v < 10", "ID/3", "C", "C_V");
    EXEC_OK(&e, "DELETE FROM c WHERE id = 2");
    USES_INDEX(&e, "SELECT id FROM c WHERE v >= 10", "ID/1", "C", "C_V");
    /* Key-value writes: a put of a CV object, a remove, a put of another
     * type (not a row), then a clear. */
    st_cache *ca = st_cache_find(e.st, em_hash_java_str((const uint8_t *)"SQL_PUBLIC_C", 12));
    REQUIRE(ca != NULL);
    const bin_desc *d = bin_registry_desc(e.reg, bin_type_id("CV", 2));
    REQUIRE(d != NULL);
    em_buf nv = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, e.reg, &nv);
    bin_w_obj_begin(&w, d);
    bin_w_field(&w, bin_field_id("V", 1));
    bin_w_int(&w, 77);
    REQUIRE_OK(bin_w_obj_end(&w));
    bin_writer_free(&w);
    uint8_t k9[5] = { BIN_INT, 9, 0, 0, 0 }, k1[5] = { BIN_INT, 1, 0, 0, 0 };
    REQUIRE_OK(st_put(ca, NULL, k9, 5, nv.p, nv.len));
    USES_INDEX(&e, "SELECT id, v FROM c WHERE v > 50", "ID,V/9,77", "C", "C_V");
    int removed = 0;
    REQUIRE_OK(st_remove(ca, NULL, k1, 5, &removed));
    CHECK(removed);
    uint8_t s3[6] = { BIN_STRING, 1, 0, 0, 0, 'x' };
    REQUIRE_OK(st_put(ca, NULL, k9, 5, s3, 6));         /* 9 is no row now */
    USES_INDEX(&e, "SELECT id FROM c WHERE v > 0", "ID/3", "C", "C_V");
    CHECK_EQ(sq_ix_count(ix_of(&e, "C", "C_V")), 1);
    REQUIRE_OK(st_clear(ca));
    CHECK_EQ(sq_ix_count(ix_of(&e, "C", "C_V")), 0);
    USES_INDEX(&e, "SELECT id FROM c WHERE v > 0", "ID/", "C", "C_V");
    /* A grown value (reallocated entry) and an in-place overwrite. */
    EXEC_OK(&e, "INSERT INTO c VALUES (4, 40)");
    EXEC_OK(&e, "MERGE INTO c VALUES (4, 41)");
    USES_INDEX(&e, "SELECT v FROM c WHERE v > 0", "V/41", "C", "C_V");
    CHECK_EQ(sq_ix_count(ix_of(&e, "C", "C_V")), 1);
    em_buf_free(&nv);
    pe_close(&e);
}

/* Differential: a random history of SQL and key-value changes; every range
 * query through the index equals the same query that no index can serve
 * (the column inside an expression). */
TEST(sql_index_equals_scan)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE r (id INT PRIMARY KEY, a INT, s VARCHAR)");
    EXEC_OK(&e, "CREATE INDEX r_a ON r (a)");
    EXEC_OK(&e, "CREATE INDEX r_sa ON r (s, a)");
    srand(7);
    for (int step = 0; step < 600; step++) {
        char q[200];
        int id = rand() % 60, a = rand() % 25 - 5, op = rand() % 10;
        if (op < 5)
            snprintf(q, sizeof q, "MERGE INTO r VALUES (%d, %d, 's%d')", id, a, a % 4);
        else if (op < 7)
            snprintf(q, sizeof q, "UPDATE r SET a = %d WHERE id = %d", a, id);
        else if (op < 9)
            snprintf(q, sizeof q, "DELETE FROM r WHERE id = %d", id);
        else
            snprintf(q, sizeof q, "MERGE INTO r (id, s) VALUES (%d, 'n')", id);   /* a NULL */
        EXEC_OK(&e, q);
        if (step % 20)
            continue;
        int lo = rand() % 25 - 5, hi = lo + rand() % 10;
        static const char *const shapes[][2] = {
            {"SELECT id FROM r WHERE a >= %d AND a < %d ORDER BY id",
             "SELECT id FROM r WHERE a + 0 >= %d AND a + 0 < %d ORDER BY id"},
            {"SELECT a FROM r WHERE a > %d AND a <= %d ORDER BY a",
             "SELECT a FROM r WHERE a + 0 > %d AND a + 0 <= %d ORDER BY a + 0"},
            {"SELECT count(*) FROM r WHERE a = %d OR a = %d",
             "SELECT count(*) FROM r WHERE a + 0 = %d OR a + 0 = %d"},
            {"SELECT id FROM r WHERE s = 's1' AND a > %d AND a < %d ORDER BY id",
             "SELECT id FROM r WHERE s || '' = 's1' AND a + 0 > %d AND a + 0 < %d ORDER BY id"},
        };
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            char q1[256], q2[256], t1[2048], t2[2048];
            snprintf(q1, sizeof q1, shapes[k][0], lo, hi);
            snprintf(q2, sizeof q2, shapes[k][1], lo, hi);
            CHECK_EQ(sqlf(&e, q1, t1), 0);
            CHECK_EQ(sqlf(&e, q2, t2), 0);
            if (strcmp(t1, t2))
                test_fail(__FILE__, __LINE__, "%s -> [%s], scan [%s]", q1, t1, t2);
        }
    }
    CHECK(scans(&e, "R", "R_A") > 0);
    CHECK(scans(&e, "R", "R_SA") > 0);
    pe_close(&e);
}
