/* test_sql.c - SQL through the protocol layer in-process: QUERY_SQL_FIELDS
 * (2004/2005) and QUERY_SQL (2002/2003) with cursors and field names, DDL
 * (CREATE/DROP TABLE, WITH parameters, composite keys), DML (INSERT with the
 * duplicate-key error, MERGE, UPDATE, DELETE), parameters, result types,
 * Ignite's error texts, key-value/SQL interop both ways, and the pre-pass.
 */
#include "test.h"
#include "proto_env.h"
#include "sql_env.h"
#include "proto/proto_int.h"

#include <stdio.h>
#include <string.h>

#include "binary/binary.h"
#include "proto/proto.h"
#include "sql/sql_int.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

TEST(sql_select_constant)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    QUERY_IS(&e, "SELECT 5 AS A", "A/L5");
    QUERY_IS(&e, "select 1+1 as two, 'x' s, null n", "TWO,S,N/L2,'x',null");
    QUERY_IS(&e, "SELECT CONCAT('a', NULL, 'b', 1) c, NVL(NULL, 2) n, UCASE('x') u, LCASE('Y') l, "
             "LOCATE('c', 'abcd') p, CASEWHEN(1 > 2, 'y', 'n') w, LENGTH(RANDOM_UUID()) r",
             "C,N,U,L,P,W,R/'ab1',L2,'X','y',L3,'n',L36");
    QUERY_IS(&e, "SELECT 'a' LIKE 'A' AS ci", "CI/L0");
    pe_close(&e);
}

TEST(sql_create_insert_select)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE Person (id INT PRIMARY KEY, name VARCHAR, age INT, salary DOUBLE)");
    QUERY_IS(&e, "INSERT INTO Person (id, name, age, salary) VALUES (1, 'John', 30, 1000.5), "
             "(2, 'Jane', 25, 2000)", "UPDATED/L2");
    QUERY_IS(&e, "SELECT id, name, age, salary FROM Person ORDER BY id",
             "ID,NAME,AGE,SALARY/1,'John',30,D1000.5|2,'Jane',25,D2000");
    QUERY_IS(&e, "SELECT * FROM PUBLIC.person WHERE id = 2", "ID,NAME,AGE,SALARY/2,'Jane',25,D2000");
    QUERY_IS(&e, "SELECT count(*), sum(age), max(name) FROM Person", "COUNT(*),SUM(AGE),MAX(NAME)/L2,L55,'John'");
    /* MIN/MAX keep the column's type (INT, not long), as H2 does. */
    QUERY_IS(&e, "SELECT min(age), MAX(p.age), max(age) + 1 FROM Person p", "MIN(AGE),MAX(P.AGE),MAX(AGE) + 1/25,30,L31");
    FAILS_WITH(&e, "INSERT INTO Person (id, name) VALUES (1, 'Dup')", "Duplicate key during INSERT [key=1]");
    FAILS_WITH(&e, "CREATE TABLE Person (id INT PRIMARY KEY, x INT)", "Table already exists: PERSON");
    EXEC_OK(&e, "CREATE TABLE IF NOT EXISTS Person (id INT PRIMARY KEY, x INT)");
    /* The cache and its schema, as Ignite names them. */
    st_cache *ca = st_cache_find(e.st, em_hash_java_str((const uint8_t *)"SQL_PUBLIC_PERSON", 17));
    REQUIRE(ca != NULL);
    CHECK(!strcmp(st_cache_cfg(ca)->sql_schema, "PUBLIC"));
    EXEC_OK(&e, "DROP TABLE Person");
    CHECK(st_cache_destroyed(ca));
    FAILS_WITH(&e, "SELECT * FROM Person", "Failed to parse query.");
    FAILS_WITH(&e, "DROP TABLE Person", "Table doesn't exist: PERSON");
    EXEC_OK(&e, "DROP TABLE Person IF EXISTS");
    EXEC_OK(&e, "DROP TABLE IF EXISTS Person");
    pe_close(&e);
}

TEST(sql_dml_update_delete_merge)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE t (k BIGINT, c VARCHAR, v INT, w VARCHAR, PRIMARY KEY (k, c)) "
            "WITH \"template=replicated,backups=1,CACHE_NAME=tcache,VALUE_TYPE=TV\"");
    QUERY_IS(&e, "INSERT INTO t VALUES (1, 'a', 10, 'x'), (2, 'b', 20, 'y')", "UPDATED/L2");
    QUERY_IS(&e, "UPDATE t SET v = v + 1 WHERE k = 1", "UPDATED/L1");
    QUERY_IS(&e, "SELECT k, c, v, w FROM t ORDER BY k", "K,C,V,W/L1,'a',11,'x'|L2,'b',20,'y'");
    FAILS_WITH(&e, "UPDATE t SET k = 5", "SQL UPDATE can't modify key or its fields");
    QUERY_IS(&e, "INSERT INTO t SET k = 9, c = 'z', v = 1, w = 'set'", "UPDATED/L1");
    QUERY_IS(&e, "DELETE FROM t WHERE k = 9", "UPDATED/L1");
    QUERY_IS(&e, "MERGE INTO t (k, c, v, w) VALUES (2, 'b', 99, 'z'), (3, 'c', 30, 'q')", "UPDATED/L2");
    QUERY_IS(&e, "SELECT v FROM t ORDER BY k", "V/11|99|30");
    QUERY_IS(&e, "DELETE FROM t WHERE v > 20", "UPDATED/L2");
    QUERY_IS(&e, "SELECT k, v FROM t", "K,V/L1,11");
    st_cache *ca = st_cache_find(e.st, em_hash_java_str((const uint8_t *)"tcache", 6));
    REQUIRE(ca != NULL);
    CHECK_EQ(st_cache_cfg(ca)->cache_mode, 1);
    CHECK_EQ(st_cache_cfg(ca)->backups, 1);
    pe_close(&e);
}

TEST(sql_pages_and_cursors)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE p (id INT PRIMARY KEY, v INT)");
    EXEC_OK(&e, "INSERT INTO p VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)");
    char txt[2048];
    int64_t cur;
    int more;
    REQUIRE_EQ(sqlf_args(&e, "PUBLIC", 0, "SELECT id FROM p ORDER BY id", 2, 1, NULL, 0, 0, txt, &cur,
                         &more), 0);
    CHECK(!strcmp(txt, "ID/1|2"));
    CHECK_EQ(more, 1);
    char all[2048];
    snprintf(all, sizeof all, "%s", txt + 3);
    while (more) {
        req_begin(&e, 2005);
        em_buf_put_le64(&e.req, (uint64_t)cur);
        const uint8_t *b;
        size_t n;
        REQUIRE_EQ(send(&e, &b, &n, txt), 0);
        rows(b, 1, all, sizeof all, &more);
    }
    CHECK(!strcmp(all, "1|2|3|4|5"));
    /* Closed after the last page. */
    req_begin(&e, 2005);
    em_buf_put_le64(&e.req, (uint64_t)cur);
    const uint8_t *b;
    size_t n;
    CHECK_EQ(send(&e, &b, &n, txt), 1011);
    /* RESOURCE_CLOSE frees an open one. */
    REQUIRE_EQ(sqlf_args(&e, NULL, 0, "SELECT id FROM p", 1, 0, NULL, 0, 0, txt, &cur, &more), 0);
    CHECK_EQ(more, 1);
    req_begin(&e, 0);
    em_buf_put_le64(&e.req, (uint64_t)cur);
    CHECK_EQ(send(&e, &b, &n, txt), 0);
    req_begin(&e, 0);
    em_buf_put_le64(&e.req, (uint64_t)cur);
    CHECK_EQ(send(&e, &b, &n, txt), 1011);
    /* Big values: the scan's refills shrink, the rows still all arrive. */
    EXEC_OK(&e, "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR)");
    EXEC_OK(&e, "INSERT INTO big SELECT x, replace(hex(zeroblob(1000000)), '00', 'x') FROM "
            "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 6) SELECT x FROM c)");
    QUERY_IS(&e, "SELECT count(*), sum(length(v)) FROM big", "COUNT(*),SUM(LENGTH(V))/L6,L6000000");
    /* The per-connection limit (128) counts SQL cursors. */
    int st = 0, i;
    for (i = 0; i < 200 && !st; i++)
        st = sqlf_args(&e, NULL, 0, "SELECT id FROM p", 1, 0, NULL, 0, 0, txt, &cur, &more);
    CHECK_EQ(st, 1010);
    CHECK_EQ(i, 129);
    pe_close(&e);                   /* frees the open cursors */
}

TEST(sql_errors)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    char txt[2048];
    CHECK_EQ(sqlf_args(&e, NULL, 12345, "SELECT 1", 10, 0, NULL, 0, 0, txt, NULL, NULL), 1000);
    CHECK(strstr(txt, "Cache does not exist [cacheId= 12345]") != NULL);
    CHECK_EQ(sqlf_args(&e, "NOSUCH", 0, "SELECT 1", 10, 0, NULL, 0, 0, txt, NULL, NULL), 1);
    CHECK(strstr(txt, "Failed to set schema for DB connection for thread [schema=NOSUCH]") != NULL);
    CHECK_EQ(sqlf_args(&e, NULL, 0, "SELECT 1", 10, 2, NULL, 0, 0, txt, NULL, NULL), 1);
    CHECK(strstr(txt, "Given statement type does not match that declared by JDBC driver") != NULL);
    FAILS_WITH(&e, "SELEC 1", "Failed to parse query.");
    FAILS_WITH(&e, "SELECT 'abc", "Unterminated string");
    FAILS_WITH(&e, "SELECT 1; SELECT 2", "Multiple statements");
    FAILS_WITH(&e, "CREATE TABLE x (a INT, b INT)", "No PRIMARY KEY defined for CREATE TABLE");
    FAILS_WITH(&e, "CREATE TABLE x (a INT PRIMARY KEY)", "at least one non PRIMARY KEY column");
    FAILS_WITH(&e, "CREATE TABLE x (_key INT PRIMARY KEY, b INT)", "_KEY and _VAL");
    FAILS_WITH(&e, "CREATE TABLE x (a INT PRIMARY KEY, b FOO)", "Unknown data type");
    FAILS_WITH(&e, "CREATE TABLE x (a INT PRIMARY KEY, b INT) WITH \"nope=1\"", "Unsupported parameter");
    FAILS_WITH(&e, "PRAGMA table_info(x)", "Unsupported statement");
    FAILS_WITH(&e, "SELECT * FROM sqlite_master; ATTACH 'x' AS y", "Multiple statements");
    EXEC_OK(&e, "CREATE TABLE x (a INT PRIMARY KEY, b INT NOT NULL)");
    FAILS_WITH(&e, "INSERT INTO x (a) VALUES (1)", "Null value is not allowed for column 'B'");
    EXEC_OK(&e, "CREATE TABLE df (a INT PRIMARY KEY, b INT DEFAULT -5, c VARCHAR DEFAULT 'it''s', d INT)");
    EXEC_OK(&e, "INSERT INTO df (a) VALUES (1)");
    QUERY_IS(&e, "SELECT * FROM df", "A,B,C,D/1,-5,'it's',null");
    FAILS_WITH(&e, "CREATE TABLE dg (a INT PRIMARY KEY, b INT DEFAULT 12abc)", "Non-constant DEFAULT");
    FAILS_WITH(&e, "CREATE TABLE dg (a INT PRIMARY KEY, b INT DEFAULT (1 + 2))", "Non-constant DEFAULT");
    FAILS_WITH(&e, "INSERT INTO x VALUES (1, 'abc')", "Data conversion error");
    EXEC_OK(&e, "CREATE TABLE xs (a INT PRIMARY KEY, s VARCHAR)");
    FAILS_WITH(&e, "INSERT INTO xs VALUES (1, CAST(x'ff' AS VARCHAR))", "not valid UTF-8");
    QUERY_IS(&e, "SELECT CAST(x'ff' AS VARCHAR) AS b", "B/#12");
    /* A runaway query is cut off by its timeout, and the session works on. */
    g_timeout = 50;
    FAILS_WITH(&e, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) FROM c", "The query was cancelled while executing.");
    g_timeout = 0;
    QUERY_IS(&e, "SELECT 1 AS ONE", "ONE/L1");
    pe_close(&e);
}

TEST(sql_params_and_types)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE ty (id INT PRIMARY KEY, b BOOLEAN, s SMALLINT, l BIGINT, d DECIMAL(10,2), "
            "u UUID, ts TIMESTAMP, dt DATE, bin VARBINARY, str VARCHAR(20))");
    em_buf a = EM_BUF_INIT;
    /* id as a double (Node's default number type) is converted like H2. */
    em_buf_put_u8(&a, BIN_DOUBLE); double one = 1.0; uint8_t db[8]; memcpy(db, &one, 8); em_buf_append(&a, db, 8);
    em_buf_put_u8(&a, BIN_BOOL); em_buf_put_u8(&a, 1);
    em_buf_put_u8(&a, BIN_INT); em_buf_put_le32(&a, 7);
    em_buf_put_u8(&a, BIN_LONG); em_buf_put_le64(&a, 1ull << 40);
    em_buf_put_u8(&a, BIN_DECIMAL); em_buf_put_le32(&a, 2); em_buf_put_le32(&a, 2);
    em_buf_put_u8(&a, 0x04); em_buf_put_u8(&a, 0xD2);                   /* 12.34 */
    em_buf_put_u8(&a, BIN_UUID); em_buf_put_le64(&a, 0x0123456789abcdefull); em_buf_put_le64(&a, 42);
    em_buf_put_u8(&a, BIN_TIMESTAMP); em_buf_put_le64(&a, 86400000ull + 1); em_buf_put_le32(&a, 5);
    em_buf_put_u8(&a, BIN_DATE); em_buf_put_le64(&a, 86400000ull * 2);
    em_buf_put_u8(&a, BIN_BYTE_ARR); em_buf_put_le32(&a, 2); em_buf_put_u8(&a, 1); em_buf_put_u8(&a, 2);
    put_str(&a, "hello");
    char txt[2048];
    CHECK_EQ(sqlf_args(&e, NULL, 0, "INSERT INTO ty VALUES (?,?,?,?,?,?,?,?,?,?)", 10, 2, a.p, a.len, 10,
                       txt, NULL, NULL), 0);
    CHECK(!strcmp(txt, "UPDATED/L1"));
    QUERY_IS(&e, "SELECT id, b, s, l, str FROM ty", "ID,B,S,L,STR/1,true,S7,L1099511627776,'hello'");
    QUERY_IS(&e, "SELECT d, u, ts, dt, bin FROM ty", "D,U,TS,DT,BIN/#30,#10,#33,#11,#12");
    QUERY_IS(&e, "SELECT CAST(d AS VARCHAR), CAST(u AS VARCHAR), CAST(ts AS VARCHAR), CAST(dt AS VARCHAR) FROM ty",
             "CAST(D AS VARCHAR),CAST(U AS VARCHAR),CAST(TS AS VARCHAR),CAST(DT AS VARCHAR)/"
             "'12.34','01234567-89ab-cdef-0000-00000000002a','1970-01-02 00:00:00.001000005','1970-01-03'");
    QUERY_IS(&e, "SELECT id FROM ty WHERE u = '01234567-89ab-cdef-0000-00000000002a' AND d > 12", "ID/1");
    /* A parameter selects by key. */
    em_buf_reset(&a);
    em_buf_put_u8(&a, BIN_INT); em_buf_put_le32(&a, 1);
    CHECK_EQ(sqlf_args(&e, NULL, 0, "SELECT str FROM ty WHERE id = ?", 10, 1, a.p, a.len, 1, txt,
                       NULL, NULL), 0);
    CHECK(!strcmp(txt, "STR/'hello'"));
    /* The cached statement again, another argument. */
    em_buf_reset(&a);
    em_buf_put_u8(&a, BIN_INT); em_buf_put_le32(&a, 2);
    CHECK_EQ(sqlf_args(&e, NULL, 0, "SELECT str FROM ty WHERE id = ?", 10, 1, a.p, a.len, 1, txt,
                       NULL, NULL), 0);
    CHECK(!strcmp(txt, "STR/"));
    em_buf_free(&a);
    /* A cached SELECT * sees a re-created table's new columns. */
    QUERY_IS(&e, "SELECT * FROM ty WHERE id = 1", "ID,B,S,L,D,U,TS,DT,BIN,STR/1,true,S7,L1099511627776,#30,#10,#33,#11,#12,'hello'");
    EXEC_OK(&e, "DROP TABLE ty");
    EXEC_OK(&e, "CREATE TABLE ty (id INT PRIMARY KEY, z VARCHAR)");
    EXEC_OK(&e, "INSERT INTO ty VALUES (1, 'zz')");
    QUERY_IS(&e, "SELECT * FROM ty WHERE id = 1", "ID,Z/1,'zz'");
    pe_close(&e);
}

TEST(sql_schemas)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE s2.t2 (id INT PRIMARY KEY, v VARCHAR)");
    EXEC_OK(&e, "CREATE TABLE t1 (id INT PRIMARY KEY, v VARCHAR)");
    EXEC_OK(&e, "INSERT INTO S2.T2 VALUES (1, 'other')");
    EXEC_OK(&e, "INSERT INTO t1 VALUES (1, 'public')");
    QUERY_IS(&e, "SELECT a.v, b.v FROM t1 a JOIN s2.t2 b ON a.id = b.id", "V,V/'public','other'");
    char txt[2048];
    CHECK_EQ(sqlf_args(&e, "S2", 0, "SELECT v FROM t2", 10, 0, NULL, 0, 0, txt, NULL, NULL), 0);
    CHECK(!strcmp(txt, "V/'other'"));
    /* Same name in two schemas: an unqualified name is the current
     * schema's.  (Unlike H2, a name only in another schema resolves too:
     * SQLite searches every attached schema.) */
    EXEC_OK(&e, "CREATE TABLE t2 (id INT PRIMARY KEY, v VARCHAR)");
    EXEC_OK(&e, "INSERT INTO t2 VALUES (1, 'mine')");
    QUERY_IS(&e, "SELECT v FROM t2", "V/'mine'");
    CHECK_EQ(sqlf_args(&e, "S2", 0, "SELECT v FROM t2", 10, 0, NULL, 0, 0, txt, NULL, NULL), 0);
    CHECK(!strcmp(txt, "V/'other'"));
    CHECK(st_cache_find(e.st, em_hash_java_str((const uint8_t *)"SQL_S2_T2", 9)) != NULL);
    pe_close(&e);
}

TEST(sql_alter_table)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE al (id INT PRIMARY KEY, a VARCHAR)");
    EXEC_OK(&e, "INSERT INTO al VALUES (1, 'x')");
    EXEC_OK(&e, "ALTER TABLE al ADD COLUMN b INT");
    QUERY_IS(&e, "SELECT * FROM al", "ID,A,B/1,'x',null");
    EXEC_OK(&e, "INSERT INTO al VALUES (2, 'y', 5)");
    EXEC_OK(&e, "ALTER TABLE al ADD COLUMN IF NOT EXISTS b INT");
    FAILS_WITH(&e, "ALTER TABLE al ADD b INT", "Column already exists: B");
    EXEC_OK(&e, "ALTER TABLE al ADD (c DOUBLE, d VARCHAR)");
    EXEC_OK(&e, "ALTER TABLE al DROP COLUMN a");
    QUERY_IS(&e, "SELECT * FROM al ORDER BY id", "ID,B,C,D/1,null,null,null|2,5,null,null");
    FAILS_WITH(&e, "ALTER TABLE al DROP COLUMN id", "part of the cache key");
    FAILS_WITH(&e, "ALTER TABLE al DROP COLUMN zz", "Column doesn't exist: ZZ");
    EXEC_OK(&e, "ALTER TABLE al DROP COLUMN IF EXISTS zz");
    FAILS_WITH(&e, "ALTER TABLE nope ADD x INT", "Table doesn't exist: NOPE");
    EXEC_OK(&e, "ALTER TABLE IF EXISTS nope ADD x INT");
    /* Indexes are metadata: names per schema, columns checked. */
    EXEC_OK(&e, "CREATE INDEX al_b ON al (b DESC, c)");
    FAILS_WITH(&e, "CREATE INDEX al_b ON al (b)", "Index already exists: AL_B");
    EXEC_OK(&e, "CREATE INDEX IF NOT EXISTS al_b ON al (b)");
    FAILS_WITH(&e, "CREATE INDEX al_z ON al (zz)", "Column doesn't exist: ZZ");
    FAILS_WITH(&e, "CREATE INDEX al_z ON nope (b)", "Table doesn't exist: NOPE");
    EXEC_OK(&e, "DROP INDEX al_b");
    FAILS_WITH(&e, "DROP INDEX al_b", "Index doesn't exist: AL_B");
    EXEC_OK(&e, "DROP INDEX IF EXISTS al_b");
    EXEC_OK(&e, "CREATE INDEX al_b ON al (b)");
    EXEC_OK(&e, "DROP TABLE al");
    EXEC_OK(&e, "CREATE TABLE al (id INT PRIMARY KEY, b INT)");
    EXEC_OK(&e, "CREATE INDEX al_b ON al (b)");     /* went with the table */
    pe_close(&e);
}

/* ---- key-value and SQL see the same entries -------------------------------- */

TEST(sql_kv_interop)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE city (id INT PRIMARY KEY, name VARCHAR, pop BIGINT) WITH \"VALUE_TYPE=City\"");
    EXEC_OK(&e, "INSERT INTO city VALUES (1, 'Oslo', 700000)");
    st_cache *ca = st_cache_find(e.st, em_hash_java_str((const uint8_t *)"SQL_PUBLIC_CITY", 15));
    REQUIRE(ca != NULL);
    /* SQL -> KV: the key is the raw int, the value a City object. */
    uint8_t k[5] = { BIN_INT, 1, 0, 0, 0 };
    em_buf v = EM_BUF_INIT;
    int found = 0;
    REQUIRE_OK(st_get(ca, NULL, k, 5, &v, &found));
    REQUIRE(found);
    REQUIRE_EQ(v.p[0], BIN_OBJ);
    CHECK_EQ(bin_rd_type_id(v.p), bin_type_id("City", 4));
    const uint8_t *f;
    REQUIRE_OK(bin_rd_field_name(v.p, e.reg, "NAME", 4, &f));
    const char *s;
    size_t sl;
    REQUIRE_OK(bin_rd_string(f, &s, &sl));
    CHECK(sl == 4 && !memcmp(s, "Oslo", 4));
    /* KV -> SQL: an object written with the registered type is a row. */
    const bin_desc *d = bin_registry_desc(e.reg, bin_type_id("City", 4));
    REQUIRE(d != NULL);
    em_buf nv = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, e.reg, &nv);
    bin_w_obj_begin(&w, d);
    bin_w_field(&w, bin_field_id("NAME", 4));
    bin_w_string(&w, "Rome", 4);
    bin_w_field(&w, bin_field_id("POP", 3));
    bin_w_long(&w, 2800000);
    REQUIRE_OK(bin_w_obj_end(&w));
    bin_writer_free(&w);
    uint8_t k2[5] = { BIN_INT, 2, 0, 0, 0 };
    REQUIRE_OK(st_put(ca, NULL, k2, 5, nv.p, nv.len));
    /* Other value types in the cache are not rows of the table. */
    uint8_t k3[5] = { BIN_INT, 3, 0, 0, 0 }, s3[6] = { BIN_STRING, 1, 0, 0, 0, 'x' };
    REQUIRE_OK(st_put(ca, NULL, k3, 5, s3, 6));
    QUERY_IS(&e, "SELECT id, name, pop FROM city ORDER BY id", "ID,NAME,POP/1,'Oslo',L700000|2,'Rome',L2800000");
    QUERY_IS(&e, "SELECT name FROM city WHERE id = 2", "NAME/'Rome'");
    em_buf_free(&v);
    em_buf_free(&nv);
    pe_close(&e);
}

TEST(sql_query_sql_2002)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE emp (id INT PRIMARY KEY, name VARCHAR, sal INT) WITH \"VALUE_TYPE=Emp\"");
    EXEC_OK(&e, "INSERT INTO emp VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)");
    req_begin(&e, 2002);
    em_buf_put_le32(&e.req, (uint32_t)em_hash_java_str((const uint8_t *)"SQL_PUBLIC_EMP", 14));
    em_buf_put_u8(&e.req, 0);
    put_str(&e.req, "Emp");
    put_str(&e.req, "sal > ? ORDER BY id");
    em_buf_put_le32(&e.req, 1);
    em_buf_put_u8(&e.req, BIN_INT);
    em_buf_put_le32(&e.req, 15);
    em_buf_put_u8(&e.req, 0);
    em_buf_put_u8(&e.req, 0);
    em_buf_put_u8(&e.req, 0);
    em_buf_put_le32(&e.req, 1);
    em_buf_put_le64(&e.req, 0);
    const uint8_t *b;
    size_t n;
    char txt[2048] = "";
    REQUIRE_EQ(send(&e, &b, &n, txt), 0);
    int64_t cur = (int64_t)em_ld64(b);
    int more;
    rows(b + 8, 2, txt, sizeof txt, &more);
    CHECK(!strcmp(txt, "2,obj"));
    CHECK_EQ(more, 1);
    req_begin(&e, 2003);
    em_buf_put_le64(&e.req, (uint64_t)cur);
    REQUIRE_EQ(send(&e, &b, &n, txt), 0);
    rows(b, 2, txt, sizeof txt, &more);
    CHECK(!strcmp(txt, "2,obj|3,obj"));
    CHECK_EQ(more, 0);
    pe_close(&e);
}

/* ---- pre-pass --------------------------------------------------------------- */

static void rewrite_is(const char *in, const char *want)
{
    sq_lexed l;
    char msg[200];
    em_buf out = EM_BUF_INIT;
    if (sq_lex(in, strlen(in), &l, msg, sizeof msg) || sq_rewrite(&l, &out, msg, sizeof msg)) {
        test_fail(__FILE__, __LINE__, "%s: %s", in, msg);
    } else if (strcmp((const char *)out.p, want)) {
        test_fail(__FILE__, __LINE__, "[%s] -> [%s], want [%s]", in, (const char *)out.p, want);
    }
    sq_lexed_free(&l);
    em_buf_free(&out);
}

TEST(sql_prepass)
{
    rewrite_is("select a, \"b\" from t where c = 'x''y' -- note", "SELECT A, \"b\" FROM T WHERE C = 'x''y'");
    rewrite_is("insert into t(a, b,) values (1, 2,)", "INSERT INTO T(A, B) VALUES (1, 2)");
    rewrite_is("select a from t minus select a from u", "SELECT A FROM T EXCEPT SELECT A FROM U");
    rewrite_is("merge into t (a) values (?)", "INSERT OR REPLACE INTO T (A) VALUES (?)");
    rewrite_is("select count(*) from t /* c */", "SELECT COUNT(*) FROM T");
    rewrite_is("select /* c */ a from t", "SELECT /* c */ A FROM T");
    rewrite_is("select top 3 a from t order by a;", "SELECT A FROM T ORDER BY A LIMIT 3");
    rewrite_is("insert into s.t set a = ?, \"b\" = f(?, 2), c = 'x'",
               "INSERT INTO S.T (A, \"b\", C) VALUES (?, F(?, 2), 'x')");
}

/* ---- tables from QueryEntity ------------------------------------------------ */

/* pyignite's layout: SQL-typed key and value aliased by KEY / VALUE. */
TEST(sql_query_entity_sql_typed_kv)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    em_buf qe = EM_BUF_INIT;
    qe_begin(&qe, "java.lang.Integer", "java.lang.String", "kvt", "KEY", "VALUE");
    em_buf_put_le32(&qe, 2);
    qe_field(&qe, "KEY", "java.lang.Integer", 1);
    qe_field(&qe, "VALUE", "java.lang.String", 0);
    em_buf_put_le32(&qe, 0);
    em_buf_put_le32(&qe, 0);
    st_cache *ca;
    REQUIRE_OK(qe_cache(&e, "kvcache", "pub2", &qe, &ca));
    uint8_t k[5] = { BIN_INT, 1, 0, 0, 0 }, v[6] = { BIN_STRING, 1, 0, 0, 0, 'a' };
    REQUIRE_OK(st_put(ca, NULL, k, 5, v, 6));
    char txt[2048];
    CHECK_EQ(sqlf_args(&e, "PUB2", 0, "SELECT key, value FROM kvt", 10, 0, NULL, 0, 0, txt, NULL, NULL), 0);
    CHECK(!strcmp(txt, "KEY,VALUE/1,'a'"));
    CHECK_EQ(sqlf_args(&e, "PUB2", 0, "INSERT INTO kvt (key, value) VALUES (2, 'b')", 10, 0, NULL, 0, 0,
                       txt, NULL, NULL), 0);
    CHECK_EQ(sqlf_args(&e, "PUB2", 0, "UPDATE kvt SET value = 'c' WHERE key = 1", 10, 0, NULL, 0, 0,
                       txt, NULL, NULL), 0);
    CHECK(!strcmp(txt, "UPDATED/L1"));
    em_buf got = EM_BUF_INIT;
    int found = 0;
    REQUIRE_OK(st_get(ca, NULL, k, 5, &got, &found));
    CHECK(found && got.len == 6 && got.p[0] == BIN_STRING && got.p[5] == 'c');
    /* The cache's schema is also found from its id, schema null. */
    CHECK_EQ(sqlf_args(&e, NULL, st_cache_id(ca), "SELECT value FROM kvt ORDER BY key", 10, 0, NULL, 0, 0,
                       txt, NULL, NULL), 0);
    CHECK(!strcmp(txt, "VALUE/'c'|'b'"));
    /* Not created by CREATE TABLE: DROP TABLE refuses. */
    CHECK_EQ(sqlf_args(&e, "PUB2", 0, "DROP TABLE kvt", 10, 0, NULL, 0, 0, txt, NULL, NULL), 1);
    CHECK(strstr(txt, "Only cache created with CREATE TABLE") != NULL);
    em_buf_free(&got);
    pe_close(&e);
}

/* A CREATE TABLE's cache recovered on a fresh node (its configuration and
 * entries, as WAL recovery brings them back, but no binary metadata): the
 * table comes back from the QueryEntity, with its types, and can be dropped. */
TEST(sql_ddl_table_after_restart)
{
    pe_env a, b;
    REQUIRE_OK(open_env(&a));
    EXEC_OK(&a, "CREATE TABLE r (id INT PRIMARY KEY, name VARCHAR, n BIGINT)");
    EXEC_OK(&a, "INSERT INTO r VALUES (1, 'a', 7)");
    st_cache *ca = st_cache_find(a.st, em_hash_java_str((const uint8_t *)"SQL_PUBLIC_R", 12));
    REQUIRE(ca != NULL);
    uint8_t k[5] = { BIN_INT, 1, 0, 0, 0 };
    em_buf v = EM_BUF_INIT;
    int found = 0;
    REQUIRE_OK(st_get(ca, NULL, k, 5, &v, &found));
    REQUIRE(found);
    REQUIRE_OK(open_env(&b));
    st_cache *cb;
    REQUIRE_OK(st_cache_create(b.st, st_cache_cfg(ca), &cb));
    REQUIRE_OK(st_put(cb, NULL, k, 5, v.p, v.len));
    QUERY_IS(&b, "SELECT * FROM r", "ID,NAME,N/1,'a',L7");
    EXEC_OK(&b, "INSERT INTO r VALUES (2, 'b', 8)");
    QUERY_IS(&b, "SELECT count(*) FROM r", "COUNT(*)/L2");
    EXEC_OK(&b, "DROP TABLE r");
    CHECK(st_cache_destroyed(cb));
    em_buf_free(&v);
    pe_close(&b);
    pe_close(&a);
}

/* ---- allocation failures ----------------------------------------------------- */

/* The 1st, 2nd, ... Nth em_malloc fails during a DDL + DML + query run
 * (SQLite's own allocations use the system allocator and are not hit):
 * every run ends with error replies or success, never a crash, and frees
 * what it allocated. */
TEST(sql_oom_sweep)
{
    static const char *const stmts[] = {
        "CREATE TABLE o (id INT PRIMARY KEY, v VARCHAR, k BIGINT)",
        "INSERT INTO o VALUES (1, 'a', 2), (2, 'b', 3)",
        "UPDATE o SET v = 'c' WHERE id = 1",
        "SELECT id, v, k FROM o ORDER BY id",
        "SELECT id, v, k FROM o ORDER BY id",
        "CREATE INDEX o_k ON o (k, v)",
        "UPDATE o SET k = 9 WHERE id = 2",
        "SELECT id FROM o WHERE k > 1 ORDER BY k",
        "ALTER TABLE o ADD COLUMN z INT",
        "DELETE FROM o WHERE id = 2",
        "DROP INDEX o_k",
        "CREATE INDEX o_v ON o (v)",
        "DROP TABLE o",
    };
    int64_t base = em_mem_live_bytes();
    int done = 0;
    uint64_t n;
    for (n = 1; n < 3000 && !done; n++) {
        pe_env e;
        if (open_env(&e)) {
            pe_close(&e);
            continue;
        }
        uint64_t f0 = em_mem_failures();
        em_mem_fail_after(n, 0);
        char txt[2048];
        for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++)
            (void)sqlf_args(&e, NULL, 0, stmts[i], 1, 0, NULL, 0, 0, txt, NULL, NULL);
        done = em_mem_failures() == f0;     /* the hook never fired: all covered */
        em_mem_fail_after(0, 0);
        pe_close(&e);
        if (em_mem_live_bytes() != base) {
            test_fail(__FILE__, __LINE__, "run %llu leaked %lld bytes", (unsigned long long)n,
                      (long long)(em_mem_live_bytes() - base));
            return;
        }
    }
    CHECK(done);
    CHECK(n > 50);                  /* the runs did reach SQL's allocations */
}

/* A query whose SQLite heap grows past the per-query quota fails with
 * Ignite's quota error; the next query on the session, and a query the
 * quota allows, run as usual. */
TEST(sql_query_memory_quota)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    sq_engine_set_query_memory(e.ps->sql, 4 << 20);
    char txt[2048];
    const char *big = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
                      "SELECT count(*) FROM (SELECT DISTINCT x, randomblob(200) FROM c)";
    CHECK_EQ(sqlf(&e, big, txt), 1);
    CHECK(strstr(txt, "Query quota was exceeded") != NULL);
    QUERY_IS(&e, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) "
                 "SELECT count(*) FROM (SELECT DISTINCT x, randomblob(200) FROM c)", "COUNT(*)/L1000");
    sq_engine_set_query_memory(e.ps->sql, 0);       /* no quota: the big one runs */
    QUERY_IS(&e, big, "COUNT(*)/L100000");
    pe_close(&e);
}

/* INSERT into a table of a cache's QueryEntity whose value type no client
 * registered yet: the first write defines it from the entity's fields (as
 * Ignite's SQL builds the object), and SQL and key-value reads see it. */
TEST(sql_query_entity_insert_defines_the_type)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    em_buf qe = EM_BUF_INIT;
    qe_begin(&qe, "java.lang.Integer", "org.acme.Car", NULL, NULL, NULL);
    em_buf_put_le32(&qe, 2);
    qe_field(&qe, "make", "java.lang.String", 0);
    qe_field(&qe, "year", "java.lang.Integer", 0);
    em_buf_put_le32(&qe, 0);
    em_buf_put_le32(&qe, 0);
    st_cache *ca;
    REQUIRE_OK(qe_cache(&e, "cars", "PUBLIC", &qe, &ca));
    CHECK(bin_registry_get(e.reg, bin_type_id("org.acme.Car", 12)) == NULL);
    EXEC_OK(&e, "INSERT INTO car (_key, make, year) VALUES (1, 'vw', 1999), (2, 'fiat', 2004)");
    QUERY_IS(&e, "SELECT make, year FROM car ORDER BY year", "MAKE,YEAR/'vw',1999|'fiat',2004");
    CHECK(bin_registry_get(e.reg, bin_type_id("org.acme.Car", 12)) != NULL);
    uint8_t k[5] = { BIN_INT, 2, 0, 0, 0 };
    em_buf got = EM_BUF_INIT;
    int found = 0;
    REQUIRE_OK(st_get(ca, NULL, k, 5, &got, &found));
    CHECK(found && bin_rd_resolve(got.p)[0] == BIN_OBJ);
    em_buf_free(&got);
    pe_close(&e);
}

/* agg_reply runs sql with whole-table aggregates computed directly (on) or
 * through SQLite; rep gets the status and the reply after the cursor id,
 * byte for byte, so doubles are compared to the bit. */
static int agg_reply(pe_env *e, const char *sql, int on, em_buf *rep)
{
    char txt[2048];
    sq_engine_set_direct_agg(e->ps->sql, on);
    int st = sqlf(e, sql, txt);
    em_buf_reset(rep);
    em_buf_put_le32(rep, (uint32_t)st);
    if (e->out.len > 24)
        em_buf_append(rep, e->out.p + (st ? 16 : 24), e->out.len - (st ? 16 : 24));
    sq_engine_set_direct_agg(e->ps->sql, 1);
    return st;
}

/* same_agg: q answers the same both ways, byte for byte; direct says
 * whether the direct path must have answered it (the engine's counter), and
 * the run with it off must not have gone that way. */
static void same_agg(pe_env *e, const char *q, int direct, int line)
{
    sq_engine *eng = e->ps->sql;
    em_buf a = EM_BUF_INIT, b = EM_BUF_INIT;
    uint64_t n0 = sq_engine_direct_aggs(eng);
    int sa = agg_reply(e, q, 1, &a);
    uint64_t n1 = sq_engine_direct_aggs(eng);
    int sb = agg_reply(e, q, 0, &b);
    uint64_t n2 = sq_engine_direct_aggs(eng);
    if (sa != sb || a.len != b.len || memcmp(a.p, b.p, a.len))
        test_fail(__FILE__, line, "%s: direct %d (%zu bytes) vs SQLite %d (%zu bytes)", q, sa,
                  a.len, sb, b.len);
    if ((n1 != n0) != direct)
        test_fail(__FILE__, line, "%s: direct path %s", q, direct ? "not taken" : "taken");
    if (n2 != n1)
        test_fail(__FILE__, line, "%s: taken with direct aggregates off", q);
    em_buf_free(&a);
    em_buf_free(&b);
}
#define SAME_AGG(e, q_, direct) same_agg((e), (q_), (direct), __LINE__)

TEST(sql_direct_aggregates_match_sqlite)
{
    pe_env e;
    REQUIRE_OK(open_env(&e));
    EXEC_OK(&e, "CREATE TABLE A (id INT PRIMARY KEY, i INT, b BIGINT, d DOUBLE, s SMALLINT, "
            "y TINYINT, f REAL, name VARCHAR)");
    EXEC_OK(&e, "CREATE TABLE E (id INT PRIMARY KEY, i INT, d DOUBLE)");
    EXEC_OK(&e, "CREATE TABLE O (id INT PRIMARY KEY, b BIGINT)");
    /* Empty: COUNT 0, SUM/AVG/MIN NULL, TOTAL 0.0. */
    SAME_AGG(&e, "SELECT count(*), count(i), sum(i), avg(d), total(d), min(i), max(d) FROM E", 1);
    for (int r = 0; r < 3000; r++) {
        /* Doubles that round differently in another order; NULLs here and
         * there; longs that leave exact double range. */
        char i[32] = "NULL", d[64] = "NULL", f[64] = "NULL", sql[512];
        if (r % 7)
            snprintf(i, sizeof i, "%d", r * 7919 % 100003 - 50000);
        if (r % 5)
            snprintf(d, sizeof d, "%.17g", (r * 0.1) / 3.0 + 1e10 * (r % 3));
        if (r % 11)
            snprintf(f, sizeof f, "%.9g", r * 1.7f);
        snprintf(sql, sizeof sql, "INSERT INTO A VALUES (%d, %s, %lld, %s, %d, %d, %s, 'n%d')", r, i,
                 (long long)r * 3037000493LL - 4000000000000LL, d, r % 30000 - 15000, r % 250 - 125,
                 f, r);
        EXEC_OK(&e, sql);
    }
    static const struct { const char *q; int direct; } cases[] = {
        { "SELECT count(*), sum(i), avg(i), total(i), min(i), max(i), count(i) FROM A", 1 },
        { "SELECT SUM(b), AVG(b), MIN(b), MAX(b) FROM A", 1 },
        { "SELECT sum(d), avg(d), total(d), min(d), max(d), count(d) FROM A", 1 },
        { "select sum(s), min(s), max(y), avg(y), sum(f), min(f), max(f) from PUBLIC.a;", 1 },
        { "SELECT count(\"D\"), sum(ID) AS k, max(id) m FROM a", 1 },
        { "SELECT COUNT(1), count(0) FROM A", 1 },
        /* Not that shape, or not numbers: SQLite answers. */
        { "SELECT count(-1) FROM A", 0 },               /* an expression */
        { "SELECT count(DISTINCT y) FROM A", 0 },
        { "SELECT sum(i) FROM A WHERE i > 0", 0 },
        { "SELECT max(name), count(*) FROM A", 0 },
        { "SELECT sum(i) + 1 FROM A", 0 },
        { "SELECT sum(x.i) FROM A x", 0 },
        { "SELECT count(*) FROM A, E", 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        SAME_AGG(&e, cases[k].q, cases[k].direct);
    /* An integer SUM that overflows: SQLite's error, both ways. */
    EXEC_OK(&e, "INSERT INTO O VALUES (1, 9000000000000000000), (2, 9000000000000000000)");
    SAME_AGG(&e, "SELECT sum(b) FROM O", 0);
    FAILS_WITH(&e, "SELECT sum(b) FROM O", "integer overflow");
    SAME_AGG(&e, "SELECT avg(b), total(b) FROM O", 1);
    /* A page of one row says no more; the names are SQLite's. */
    QUERY_IS(&e, "SELECT count(*), min(y) FROM A", "COUNT(*),MIN(Y)/L3000,B-125");
    /* A table changed after the statement was cached: the new column. */
    EXEC_OK(&e, "ALTER TABLE E ADD COLUMN z BIGINT");
    EXEC_OK(&e, "INSERT INTO E VALUES (1, 2, 2.5, 7)");
    SAME_AGG(&e, "SELECT count(*), sum(i), max(z) FROM E", 1);
    QUERY_IS(&e, "SELECT count(*), sum(i), max(z) FROM E", "COUNT(*),SUM(I),MAX(Z)/L1,L2,L7");
    EXEC_OK(&e, "DROP TABLE E");
    FAILS_WITH(&e, "SELECT count(*), sum(i), max(z) FROM E", "Failed to parse query.");
    /* A session cancelled (its connection closing) stops one too. */
    sq_sess_cancel(e.c->sql);
    uint64_t n0 = sq_engine_direct_aggs(e.ps->sql);
    FAILS_WITH(&e, "SELECT count(*), sum(i) FROM A", "The query was cancelled while executing.");
    CHECK(sq_engine_direct_aggs(e.ps->sql) == n0);
    pe_close(&e);
}
