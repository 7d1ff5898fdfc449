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

#include <pthread.h>
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

/* Comparisons that depend on affinity, and writes through the index. */
TEST(sql_index_affinity_and_updates)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE s (id INT PRIMARY KEY, t VARCHAR, n INT)");
    EXEC_OK(&e, "CREATE INDEX s_t ON s (t)");
    EXEC_OK(&e, "CREATE INDEX s_n ON s (n)");
    EXEC_OK(&e, "INSERT INTO s VALUES (1, '5', 1), (2, '05', 2), (3, 'abc', 3), (4, '6', 4)");
    /* A literal compares with the text column as text; an operand of
     * numeric affinity (CAST) as numbers, so '05' = 5 too. */
    QUERY_IS(&e, "SELECT id FROM s WHERE t = 5", "ID/1");
    QUERY_IS(&e, "SELECT id FROM s WHERE t = CAST('5' AS INT) ORDER BY id", "ID/1|2");
    QUERY_IS(&e, "SELECT id FROM s WHERE t > CAST('5' AS INT) ORDER BY id", "ID/3|4");
    USES_INDEX(&e, "SELECT id FROM s WHERE t = '05'", "ID/2", "S", "S_T");
    /* Text and blob bounds on an INT column compare as SQLite compares. */
    USES_INDEX(&e, "SELECT id FROM s WHERE n < 'x' ORDER BY id", "ID/1|2|3|4", "S", "S_N");
    USES_INDEX(&e, "SELECT id FROM s WHERE n > 'x'", "ID/", "S", "S_N");
    USES_INDEX(&e, "SELECT id FROM s WHERE n = NULL", "ID/", "S", "S_N");
    /* An UPDATE that moves the rows it reads through the index changes
     * each once. */
    QUERY_IS(&e, "UPDATE s SET n = n + 10 WHERE n > 1", "UPDATED/L3");
    USES_INDEX(&e, "SELECT n FROM s WHERE n >= 0 ORDER BY n", "N/1|12|13|14", "S", "S_N");
    QUERY_IS(&e, "DELETE FROM s WHERE n > 12", "UPDATED/L2");
    USES_INDEX(&e, "SELECT id FROM s WHERE n > 0 ORDER BY n", "ID/1|2", "S", "S_N");
    pe_close(&e);
}

/* Tables with indexes made and dropped in a loop leave no index state
 * behind: the engine keeps a set only for a cache that has an index. */
TEST(sql_index_create_drop_loop_is_bounded)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    for (int i = 0; i < 40; i++) {
        EXEC_OK(&e, "CREATE TABLE l (id INT PRIMARY KEY, v INT)");
        EXEC_OK(&e, "INSERT INTO l VALUES (1, 1), (2, 2)");
        EXEC_OK(&e, "CREATE INDEX l_v ON l (v)");
        QUERY_IS(&e, "SELECT id FROM l WHERE v > 1", "ID/2");
        CHECK(e.ps->sql->ixsets != NULL);
        EXEC_OK(&e, "DROP TABLE l");
        CHECK(e.ps->sql->ixsets == NULL);
    }
    EXEC_OK(&e, "CREATE TABLE l (id INT PRIMARY KEY, v INT)");
    EXEC_OK(&e, "CREATE INDEX l_v ON l (v)");
    EXEC_OK(&e, "DROP INDEX l_v");
    CHECK(e.ps->sql->ixsets == NULL);
    pe_close(&e);
}

/* Writes on another thread while indexes are built, read and dropped: the
 * lock order (partition, then index) holds and every answer is whole. */
typedef struct wr_arg { st_cache *c; em_buf v[4]; _Atomic int stop; int rc; } wr_arg;

static void *writer(void *p)
{
    wr_arg *a = p;
    for (uint32_t i = 0; !atomic_load(&a->stop); i++) {
        uint8_t k[5] = { BIN_INT, 0, 0, 0, 0 };
        em_st32(k + 1, i % 64);
        const em_buf *v = &a->v[i % 4];
        if ((a->rc = st_put(a->c, NULL, k, 5, v->p, v->len)) != 0)
            break;
    }
    return NULL;
}

TEST(sql_index_concurrent_writes)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE w (id INT PRIMARY KEY, v INT)");
    EXEC_OK(&e, "INSERT INTO w VALUES (0, 10), (1, 20), (2, 30), (3, 40)");
    wr_arg a;
    memset(&a, 0, sizeof a);
    a.c = st_cache_find(e.st, em_hash_java_str((const uint8_t *)"SQL_PUBLIC_W", 12));
    REQUIRE(a.c != NULL);
    for (int i = 0; i < 4; i++) {
        uint8_t k[5] = { BIN_INT, (uint8_t)i, 0, 0, 0 };
        int found = 0;
        REQUIRE_OK(st_get(a.c, NULL, k, 5, &a.v[i], &found));
        REQUIRE(found);
    }
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, writer, &a) == 0);
    for (int round = 0; round < 30; round++) {
        EXEC_OK(&e, "CREATE INDEX w_v ON w (v)");
        for (int q = 0; q < 5; q++) {
            char t[2048];
            /* Every row holds one of the four values: the counts by range
             * always add up to the rows the table has. */
            CHECK_EQ(sqlf(&e, "SELECT count(*) FROM w WHERE v >= 10 AND v <= 40", t), 0);
            CHECK(strncmp(t, "COUNT(*)/L", 10) == 0 && atoi(t + 10) >= 4 && atoi(t + 10) <= 64);
        }
        EXEC_OK(&e, "DROP INDEX w_v");
    }
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ(a.rc, 0);
    /* Quiet now: the index built last agrees with a scan. */
    EXEC_OK(&e, "CREATE INDEX w_v ON w (v)");
    char t1[2048], t2[2048];
    CHECK_EQ(sqlf(&e, "SELECT id, v FROM w WHERE v > 15 ORDER BY id", t1), 0);
    CHECK_EQ(sqlf(&e, "SELECT id, v FROM w WHERE v + 0 > 15 ORDER BY id", t2), 0);
    CHECK(!strcmp(t1, t2));
    CHECK_EQ(sq_ix_count(ix_of(&e, "W", "W_V")), 64);
    for (int i = 0; i < 4; i++)
        em_buf_free(&a.v[i]);
    pe_close(&e);
}

/* ---- indexes in the cache configuration ---------------------------------- */

static void qe_ix(em_buf *b, const char *name, int kind, const char *field)
{
    put_str(b, name);
    em_buf_put_u8(b, (uint8_t)kind);
    em_buf_put_le32(b, (uint32_t)-1);
    em_buf_put_le32(b, 1);
    put_str(b, field);
    em_buf_put_u8(b, 0);
}

static int cfg_has_index(st_cache *c, const char *name)
{
    sq_table **t;
    uint32_t n;
    int has = 0;
    if (sq_qe_tables(c, &t, &n))
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < t[i]->nqeix; j++)
            has |= !strcmp(t[i]->qeix[j].name, name);
        sq_table_unref(t[i]);
    }
    em_free(t);
    return has;
}

/* A QueryEntity's SORTED indexes are built (the one without a name gets
 * Ignite's default name); FULLTEXT is left out.  CREATE INDEX, DROP INDEX
 * and ALTER TABLE write the cache's entity list anew, so its configuration
 * (GET_CONFIGURATION, the WAL) says what the catalog holds, and a catalog
 * built from it alone (a restart) has the same tables and indexes. */
TEST(sql_index_in_the_cache_configuration)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    em_buf qe = EM_BUF_INIT;
    qe_begin(&qe, "java.lang.Integer", "org.acme.Person", NULL, NULL, NULL);   /* table PERSON */
    em_buf_put_le32(&qe, 2);
    qe_field(&qe, "name", "java.lang.String", 0);
    qe_field(&qe, "age", "java.lang.Integer", 0);
    em_buf_put_le32(&qe, 0);
    em_buf_put_le32(&qe, 3);
    qe_ix(&qe, NULL, 0, "age");
    qe_ix(&qe, "PERSON_NAME_IX", 0, "name");
    qe_ix(&qe, "PERSON_FT", 1, "name");
    st_cache *ca;
    REQUIRE_OK(qe_cache(&e, "people", "PUBLIC", &qe, &ca));
    /* the client's type, as its PUT_BINARY_TYPE would register it */
    const char *fn[] = {"name", "age"};
    const int32_t fc[] = {BIN_STRING, BIN_INT};
    const bin_desc *d;
    REQUIRE_OK(bin_registry_define(e.reg, "org.acme.Person", fn, fc, 2, &d));
    em_buf v = EM_BUF_INIT;
    for (int i = 0; i < 50; i++) {     /* written as a client would */
        char nm[8];
        snprintf(nm, sizeof nm, "n%02d", i);
        bin_writer w;
        em_buf_reset(&v);
        bin_writer_init(&w, e.reg, &v);
        int rc = bin_w_obj_begin(&w, d) || bin_w_field_idx(&w, 0) || bin_w_string(&w, nm, 3) ||
                 bin_w_field_idx(&w, 1) || bin_w_int(&w, i) || bin_w_obj_end(&w);
        bin_writer_free(&w);
        REQUIRE(rc == 0);
        uint8_t k[5] = { BIN_INT, 0, 0, 0, 0 };
        em_st32(k + 1, (uint32_t)i);
        REQUIRE_OK(st_put(ca, NULL, k, 5, v.p, v.len));
    }
    em_buf_free(&v);
    USES_INDEX(&e, "SELECT _key FROM person WHERE age > 47", "_KEY/48|49", "PERSON",
               "person_age_asc_idx");
    USES_INDEX(&e, "SELECT age FROM person WHERE name = 'n07'", "AGE/7", "PERSON", "PERSON_NAME_IX");
    CHECK(ix_of(&e, "PERSON", "PERSON_FT") == NULL);
    /* DDL on it reaches the configuration. */
    EXEC_OK(&e, "CREATE INDEX person_age_name ON person (age, name)");
    CHECK_EQ(cfg_has_index(ca, "PERSON_AGE_NAME"), 1);
    CHECK_EQ(cfg_has_index(ca, "person_age_asc_idx"), 1);
    EXEC_OK(&e, "DROP INDEX \"person_age_asc_idx\"");
    CHECK_EQ(cfg_has_index(ca, "person_age_asc_idx"), 0);
    EXEC_OK(&e, "ALTER TABLE person ADD COLUMN city VARCHAR");
    sq_table **t;
    uint32_t n;
    REQUIRE_OK(sq_qe_tables(ca, &t, &n));
    REQUIRE(n == 1);
    CHECK_EQ(t[0]->ncols, 3);
    CHECK(!strcmp(t[0]->cols[0].field, "name") && !strcmp(t[0]->cols[0].name, "NAME"));
    CHECK(!strcmp(t[0]->cols[2].name, "CITY"));
    CHECK(!strcmp(t[0]->val_type, "org.acme.Person") && !strcmp(t[0]->name, "PERSON"));
    CHECK_EQ(t[0]->key_sqtype, SQ_T_INT);
    CHECK_EQ(t[0]->nqeix, 2);
    sq_table_unref(t[0]);
    em_free(t);
    pe_close(&e);
}

/* A fresh engine over the same store (what a restart builds from the
 * recovered configuration) has the indexes DDL made, and uses them. */
TEST(sql_index_rebuilt_from_the_configuration)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE r (id INT PRIMARY KEY, v INT, w VARCHAR)");
    for (int i = 0; i < 30; i++) {
        char q[96];
        snprintf(q, sizeof q, "INSERT INTO r VALUES (%d, %d, 'w%d')", i, 100 + i, i);
        EXEC_OK(&e, q);
    }
    EXEC_OK(&e, "CREATE INDEX r_v ON r (v)");
    EXEC_OK(&e, "ALTER TABLE r ADD COLUMN z INT");
    EXEC_OK(&e, "INSERT INTO r VALUES (30, 130, 'w30', 7)");
    /* Swap the SQL engine for a new one over the same store and types. */
    pr_conn_free(e.c);
    sq_engine_free(e.ps->sql);
    REQUIRE((e.ps->sql = sq_engine_new(e.st, e.reg)) != NULL);
    e.c = pr_conn_new(e.ps);
    uint8_t hs[12] = { 8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2 };
    REQUIRE_OK(feed(&e, hs, sizeof hs));
    USES_INDEX(&e, "SELECT id, z FROM r WHERE v >= 129 ORDER BY v", "ID,Z/29,null|30,7", "R", "R_V");
    FAILS_WITH(&e, "CREATE INDEX r_v ON r (w)", "Index already exists: R_V");
    pe_close(&e);
}
