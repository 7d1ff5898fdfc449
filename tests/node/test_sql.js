// test_sql.js - SQL through apache-ignite-client@1.0.0: the client's own
// SqlExample flow (DDL with WITH parameters, composite keys, INSERT with
// parameters, JOIN/GROUP BY, DROP TABLE), SqlFieldsQuery pages of 1, 2 and
// the default with field names, DML counts, Ignite's error texts, SqlQuery
// (2002/2003) entries, and key-value/SQL interop both ways.
'use strict';

const { test, connect, cacheName, assert, expectOperationError } = require('./lib/runner');
const IgniteClient = require('apache-ignite-client');
const { ObjectType, ComplexObjectType, CacheConfiguration, SqlFieldsQuery, SqlQuery } = IgniteClient;

const T = ObjectType.PRIMITIVE_TYPE;

async function all(cache, sql, ...args) {
    const q = new SqlFieldsQuery(sql);
    if (args.length) q.setArgs(...args);
    return (await cache.query(q)).getAll();
}

async function dummy(client) {
    return client.getOrCreateCache(cacheName('sqldummy'), new CacheConfiguration().setSqlSchema('PUBLIC'));
}

test('SQL: the client SqlExample flow (DDL, INSERT, JOIN, GROUP BY, DROP)', async () => {
    const client = await connect();
    const cache = await dummy(client);
    const cc = cacheName('Country'), ci = cacheName('City');
    const sfx = cc.replace('Country', '');
    await all(cache, `CREATE TABLE Country${sfx} (Code CHAR(3) PRIMARY KEY, Name CHAR(52),
        SurfaceArea DECIMAL(10,2), IndepYear SMALLINT(6), Population INT(11),)
        WITH "template=partitioned, backups=1, CACHE_NAME=${cc}"`);
    await all(cache, `CREATE TABLE City${sfx} (ID INT(11), Name CHAR(35), CountryCode CHAR(3),
        Population INT(11), PRIMARY KEY (ID, CountryCode))
        WITH "template=partitioned, backups=1, affinityKey=CountryCode, CACHE_NAME=${ci}"`);
    await all(cache, `CREATE INDEX idx_cc${sfx} ON City${sfx} (CountryCode)`);
    const cities = [['New York', 'USA', 8008278], ['Chicago', 'USA', 2896016],
        ['Moscow', 'RUS', 8389200], ['Shanghai', 'CHN', 9696300], ['Peking', 'CHN', 7472000]];
    const ins = new SqlFieldsQuery(`INSERT INTO City${sfx}(ID, Name, CountryCode, Population) VALUES (?, ?, ?, ?)`);
    for (let i = 0; i < cities.length; i++) {
        const r = await (await cache.query(ins.setArgs(i, ...cities[i]))).getAll();
        assert.equal(Number(r[0][0]), 1);
    }
    const cq = new SqlFieldsQuery(`INSERT INTO Country${sfx}(Code, Name, SurfaceArea, IndepYear, Population)
        VALUES (?, ?, ?, ?, ?)`);
    for (const c of [['USA', 'United States', 9363520.00, 1776, 278357000],
        ['RUS', 'Russian Federation', 17075400.00, 1991, 146934000],
        ['CHN', 'China', 9572900.00, -1523, 1277558000]])
        await (await cache.query(cq.setArgs(...c))).getAll();
    const countryCache = client.getCache(cc);
    const top = await (await countryCache.query(new SqlFieldsQuery(
        `SELECT name, population FROM City${sfx} ORDER BY population DESC LIMIT 3`))).getAll();
    assert.deepStrictEqual(top, [['Shanghai', 9696300], ['Moscow', 8389200], ['New York', 8008278]]);
    const q = new SqlFieldsQuery(`SELECT country${sfx}.name, city${sfx}.name, MAX(city${sfx}.population) as max_pop
        FROM country${sfx} JOIN city${sfx} ON city${sfx}.countrycode = country${sfx}.code
        WHERE country${sfx}.code IN ('USA','RUS','CHN')
        GROUP BY country${sfx}.name, city${sfx}.name ORDER BY max_pop DESC LIMIT 3`).setIncludeFieldNames(true);
    const cur = await client.getCache(ci).query(q);
    const rows = await cur.getAll();
    assert.deepStrictEqual(cur.getFieldNames(), ['NAME', 'NAME', 'MAX_POP']);
    assert.deepStrictEqual(rows.map((r) => [r[0], r[1], Number(r[2])]),
        [['China', 'Shanghai', 9696300], ['Russian Federation', 'Moscow', 8389200],
            ['United States', 'New York', 8008278]]);
    await all(cache, `DROP TABLE IF EXISTS Country${sfx}`);
    await all(cache, `DROP TABLE City${sfx} IF EXISTS`);
    assert.ok(!(await client.cacheNames()).includes(cc));
});

test('SQL: SqlFieldsQuery pages of 1, 2 and the default; DML counts', async () => {
    const client = await connect();
    const cache = await dummy(client);
    const t = cacheName('pg').toUpperCase();
    await all(cache, `CREATE TABLE ${t} (id INT PRIMARY KEY, v VARCHAR)`);
    for (let i = 1; i <= 7; i++) await all(cache, `INSERT INTO ${t} VALUES (?, ?)`, i, 'v' + i);
    for (const page of [1, 2, undefined]) {
        const q = new SqlFieldsQuery(`SELECT id, v FROM ${t} ORDER BY id`).setIncludeFieldNames(true);
        if (page) q.setPageSize(page);
        const cur = await cache.query(q);
        const got = [];
        do {
            const row = await cur.getValue();
            if (row) got.push(row);
        } while (cur.hasMore());
        assert.deepStrictEqual(got.map((r) => r[0]), [1, 2, 3, 4, 5, 6, 7], 'page ' + page);
        assert.deepStrictEqual(cur.getFieldNames(), ['ID', 'V']);
    }
    assert.deepStrictEqual((await all(cache, `UPDATE ${t} SET v = 'x' WHERE id > 5`)).map((r) => r.map(Number)), [[2]]);
    assert.deepStrictEqual((await all(cache, `DELETE FROM ${t} WHERE id <= 2`)).map((r) => r.map(Number)), [[2]]);
    assert.deepStrictEqual((await all(cache, `MERGE INTO ${t} (id, v) VALUES (1, 'm'), (3, 'n')`)).map((r) => r.map(Number)), [[2]]);
    assert.deepStrictEqual(await all(cache, `SELECT v FROM ${t} WHERE id IN (1, 3, 6) ORDER BY id`), [['m'], ['n'], ['x']]);
    await all(cache, `DROP TABLE ${t}`);
});

test('SQL: errors carry Ignite texts and the connection keeps working', async () => {
    const client = await connect();
    const cache = await dummy(client);
    const t = cacheName('err').toUpperCase();
    await all(cache, `CREATE TABLE ${t} (id INT PRIMARY KEY, v VARCHAR)`);
    await all(cache, `INSERT INTO ${t} VALUES (1, 'a')`);
    const msg = async (sql) => {
        try {
            await all(cache, sql);
        } catch (e) {
            return e.message;
        }
        return 'no error';
    };
    assert.match(await msg(`INSERT INTO ${t} VALUES (1, 'b')`), /Duplicate key during INSERT \[key=1\]/);
    assert.match(await msg(`CREATE TABLE ${t} (id INT PRIMARY KEY, v VARCHAR)`), /Table already exists/);
    assert.match(await msg('SELECT * FROM no_such_table'), /Failed to parse query/);
    const other = client.getCache(cacheName('none'));
    await expectOperationError(() => other.query(new SqlFieldsQuery('SELECT 1')).then((c) => c.getAll()), 'missing cache');
    await expectOperationError(() => cache.query(new SqlFieldsQuery('SELECT 1').setSchema('NOPE')).then((c) => c.getAll()),
        'unknown schema');
    assert.deepStrictEqual(await all(cache, `SELECT v FROM ${t}`), [['a']]);
    await all(cache, `DROP TABLE ${t}`);
});

test('SQL: SqlQuery entries and key-value interop both ways', async () => {
    const client = await connect();
    const cache = await dummy(client);
    const t = cacheName('kv').toUpperCase();
    const vt = 'KvType' + t;
    await all(cache, `CREATE TABLE ${t} (id INT PRIMARY KEY, name VARCHAR, age INT) WITH "VALUE_TYPE=${vt}"`);
    await all(cache, `INSERT INTO ${t} VALUES (1, 'Ann', 30)`);
    // The cache describes the table as Ignite's does (what pyignite reads).
    const cfg = await client.getCacheConfiguration('SQL_PUBLIC_' + t);
    assert.equal(cfg.getSqlSchema(), 'PUBLIC');
    const qe = cfg.getQueryEntities()[0];
    assert.equal(qe.getValueTypeName(), vt);
    assert.equal(qe.getTableName(), t);
    assert.equal(qe.getKeyTypeName(), 'java.lang.Integer');
    assert.equal(qe.getKeyFieldName(), 'ID');
    assert.deepStrictEqual(qe.getFields().map((f) => [f.getName(), f.getTypeName()]),
        [['ID', 'java.lang.Integer'], ['NAME', 'java.lang.String'], ['AGE', 'java.lang.Integer']]);
    // SQL -> KV: the entry is under the raw int key in SQL_PUBLIC_<T>.
    const kv = client.getCache('SQL_PUBLIC_' + t).setKeyType(T.INTEGER);
    const v = await kv.get(1);
    assert.equal(await v.getField('NAME'), 'Ann');
    assert.equal(await v.getField('AGE'), 30);
    // KV -> SQL: a complex object of the value type becomes a row.
    class Row { constructor() { this.NAME = null; this.AGE = null; } }
    const type = new ComplexObjectType(new Row(), vt).setFieldType('AGE', T.INTEGER);
    const r = new Row();
    r.NAME = 'Bob';
    r.AGE = 41;
    await kv.setValueType(type).put(2, r);
    assert.deepStrictEqual(await all(cache, `SELECT id, name, age FROM ${t} ORDER BY id`), [[1, 'Ann', 30], [2, 'Bob', 41]]);
    // SqlQuery (2002/2003) returns the entries, one page at a time.
    const sq = new SqlQuery(vt, 'age > ? ORDER BY id').setArgs(20).setPageSize(1);
    const entries = await (await kv.query(sq)).getAll();
    assert.deepStrictEqual(entries.map((e) => e.getKey()), [1, 2]);
    assert.deepStrictEqual(entries.map((e) => e.getValue().NAME), ['Ann', 'Bob']);
    await all(cache, `DROP TABLE ${t}`);
});

// The client's SqlQueryEntriesExample: a table from the cache's QueryEntity
// (no key type, value type Person), filled with key-value puts.
test('SQL: tables from QueryEntity (SqlQueryEntriesExample)', async () => {
    const { QueryEntity, QueryField } = IgniteClient;
    const client = await connect();
    const name = cacheName('qe');
    class Person {
        constructor(id, firstName, lastName, salary) {
            this.id = id; this.firstName = firstName; this.lastName = lastName; this.salary = salary;
        }
    }
    const cfg = new CacheConfiguration().setQueryEntities(new QueryEntity().setValueTypeName('Person').setFields([
        new QueryField('id', 'java.lang.Integer'), new QueryField('firstName', 'java.lang.String'),
        new QueryField('lastName', 'java.lang.String'), new QueryField('salary', 'java.lang.Double')]));
    const cache = (await client.getOrCreateCache(name, cfg)).setKeyType(T.INTEGER)
        .setValueType(new ComplexObjectType(new Person(0, '', '', 0)).setFieldType('id', T.INTEGER));
    const people = [['John', 'Doe', 1000], ['Jane', 'Roe', 2000], ['Mary', 'Major', 1500], ['Richard', 'Miles', 800]];
    for (let i = 0; i < people.length; i++) await cache.put(i, new Person(i, ...people[i]));
    const cur = await cache.query(new SqlQuery('Person', 'salary > ? and salary <= ?').setArgs(900, 1600));
    const got = [];
    do {
        const e = await cur.getValue();
        if (e) got.push(e.getValue().firstName);
    } while (cur.hasMore());
    assert.deepStrictEqual(got.sort(), ['John', 'Mary']);
    const rows = await (await cache.query(new SqlFieldsQuery(
        'SELECT firstName, salary FROM Person WHERE salary > 1000 ORDER BY salary').setIncludeFieldNames(true))).getAll();
    assert.deepStrictEqual(rows, [['Mary', 1500], ['Jane', 2000]]);
    await client.destroyCache(name);
});

// Typed parameters in, Ignite's result types out: the client reads each
// column back as the class it would get from Java.
test('SQL: typed parameters and result types (decimal, UUID, timestamp, date, bytes, bool)', async () => {
    const { Decimal, Timestamp } = IgniteClient;
    const client = await connect();
    const cache = await dummy(client);
    const t = cacheName('ty').toUpperCase();
    await all(cache, `CREATE TABLE ${t} (id INT PRIMARY KEY, b BOOLEAN, s SMALLINT, l BIGINT, d DECIMAL(10,2),
        u UUID, ts TIMESTAMP, dt DATE, bin VARBINARY, f REAL, str VARCHAR)`);
    const uuid = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
    const ts = new Timestamp(Date.UTC(2024, 0, 2, 3, 4, 5, 6), 7000);
    const dt = new Date(Date.UTC(2024, 5, 30));
    const q = new SqlFieldsQuery(`INSERT INTO ${t} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
        .setArgs(1, true, 7, 1234567890123, new Decimal('12.34'), uuid, ts, dt, [1, 2, -3], 1.5, 'héllo')
        .setArgTypes(T.INTEGER, T.BOOLEAN, T.SHORT, T.LONG, T.DECIMAL, T.UUID, T.TIMESTAMP, T.DATE,
            T.BYTE_ARRAY, T.FLOAT, T.STRING);
    await (await cache.query(q)).getAll();
    const [row] = await all(cache, `SELECT id, b, s, l, d, u, ts, dt, bin, f, str FROM ${t}`);
    assert.equal(row[0], 1);
    assert.equal(row[1], true);
    assert.equal(row[2], 7);
    assert.equal(Number(row[3]), 1234567890123);
    assert.equal(row[4].toFixed(2), '12.34');
    assert.deepStrictEqual([...row[5]], uuid);
    assert.ok(row[6] instanceof Timestamp);
    assert.equal(row[6].getTime(), ts.getTime());
    assert.equal(row[6].getNanos(), 7000);
    assert.ok(row[7] instanceof Date);
    assert.equal(row[7].getTime(), dt.getTime());
    assert.deepStrictEqual([...row[8]], [1, 2, -3]);
    assert.equal(row[9], 1.5);
    assert.equal(row[10], 'héllo');
    // Filters on those columns take parameters of the same types.
    const f = await (await cache.query(new SqlFieldsQuery(`SELECT id FROM ${t} WHERE u = ? AND ts = ? AND d = ?`)
        .setArgs(uuid, ts, new Decimal('12.34')).setArgTypes(T.UUID, T.TIMESTAMP, T.DECIMAL))).getAll();
    assert.deepStrictEqual(f, [[1]]);
    const agg = await all(cache, `SELECT COUNT(*), SUM(s), MAX(str) FROM ${t}`);
    assert.deepStrictEqual(agg.map((r) => [Number(r[0]), Number(r[1]), r[2]]), [[1, 7, 'héllo']]);
    await all(cache, `DROP TABLE ${t}`);
});
