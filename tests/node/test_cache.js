// test_cache.js - binary type registration/retrieval across connections,
// multi-page scan queries, cache configuration round trip, cache names,
// getOrCreate and the errors clients rely on.
'use strict';

const { test, connect, disconnect, cacheName, norm, assert, expectOperationError } = require('./lib/runner');
const IgniteClient = require('apache-ignite-client');
const { ObjectType, ComplexObjectType, CacheEntry, CacheConfiguration, QueryEntity, QueryField,
        QueryIndex, CacheKeyConfiguration, ScanQuery, BinaryObject } = IgniteClient;
const { Person, personType, companyType, Company, Address, binObj } = require('./lib/types');

const T = ObjectType.PRIMITIVE_TYPE;

// ---- binary types ---------------------------------------------------------

test('binary type registered by one client is read by another', async () => {
    const name = cacheName('bt');
    const w = await connect();
    const wc = (await w.getOrCreateCache(name)).setKeyType(T.INTEGER).setValueType(personType);
    await wc.put(1, new Person(1, 'ann', 10.5));
    const cw = (await w.getOrCreateCache(name)).setKeyType(T.INTEGER).setValueType(companyType);
    await cw.put(2, new Company('acme', new Address('main', 7), [new Person(2, 'b', 2)], ['t'], new Map([['k', 1]])));
    disconnect(w);

    // a fresh connection knows no types: reading the compact-footer object
    // needs GET_BINARY_TYPE (3002) to map offsets to fields
    const r = await connect();
    const rc = (await r.getOrCreateCache(name)).setKeyType(T.INTEGER);
    const bo = await rc.get(1);
    assert.ok(bo instanceof BinaryObject, 'untyped read returns a BinaryObject');
    assert.equal(bo.getTypeName(), 'Person');
    assert.deepStrictEqual(bo.getFieldNames().sort(), ['id', 'name', 'salary']);
    assert.equal(await bo.getField('name'), 'ann');
    assert.equal(await bo.getField('id'), 1);
    assert.equal(await bo.getField('salary'), 10.5);
    const p = await bo.toObject(personType);
    assert.deepStrictEqual(norm(p), norm(new Person(1, 'ann', 10.5)));
    const co = await rc.get(2);
    assert.equal(co.getTypeName(), 'Company');
    const addr = await co.getField('address');
    assert.equal(await addr.getField('street'), 'main');
    rc.setValueType(companyType);
    assert.deepStrictEqual(norm(await rc.get(2)),
        norm(new Company('acme', new Address('main', 7), [new Person(2, 'b', 2)], ['t'], new Map([['k', 1]]))));
});

test('nested array of several complex objects read via BinaryObject', async () => {
    const name = cacheName('nested');
    const w = await connect();
    const wc = (await w.getOrCreateCache(name)).setKeyType(T.INTEGER).setValueType(companyType);
    const staff = [new Person(1, 'a', 1.5), new Person(2, 'bb', 2.5), new Person(3, 'ccc', 3.5)];
    await wc.put(1, new Company('acme', new Address('main', 7), staff, ['t', 'u'], new Map([['k', 1], ['l', 2]])));
    const r = await connect();
    const rc = (await r.getOrCreateCache(name)).setKeyType(T.INTEGER);
    const co = await rc.get(1);
    assert.ok(co instanceof BinaryObject);
    assert.equal(await co.getField('name'), 'acme');
    const arr = await co.getField('staff');
    assert.equal(arr.length, 3);
    for (let i = 0; i < 3; i++) {
        const p = arr[i];
        assert.ok(p instanceof BinaryObject, 'element ' + i + ' is a BinaryObject');
        assert.equal(await p.getField('id'), staff[i].id);
        assert.equal(await p.getField('name'), staff[i].name);
        assert.equal(await p.getField('salary'), staff[i].salary);
    }
    assert.deepStrictEqual(await co.getField('tags'), ['t', 'u']);
    assert.deepStrictEqual(norm(await co.getField('ratings')), norm(new Map([['k', 1], ['l', 2]])));
    const addr = await co.getField('address');
    assert.equal(await addr.getField('zip'), 7);
});

test('binary type schemas merge (type evolves across clients)', async () => {
    const name = cacheName('bt2');
    const a = await connect();
    const ca = (await a.getOrCreateCache(name)).setKeyType(T.INTEGER);
    await ca.put(1, new BinaryObject('EvolvingType').setField('f1', 1, T.INTEGER));
    const b = await connect();
    const cb = (await b.getOrCreateCache(name)).setKeyType(T.INTEGER);
    await cb.put(2, new BinaryObject('EvolvingType').setField('f1', 2, T.INTEGER).setField('f2', 'two', T.STRING));
    await cb.put(3, new BinaryObject('EvolvingType').setField('f3', true, T.BOOLEAN));
    disconnect(a);
    disconnect(b);
    const c = await connect();
    const cc = (await c.getOrCreateCache(name)).setKeyType(T.INTEGER);
    const o1 = await cc.get(1), o2 = await cc.get(2), o3 = await cc.get(3);
    assert.deepStrictEqual(o1.getFieldNames(), ['f1']);
    assert.equal(await o1.getField('f1'), 1);
    assert.deepStrictEqual(o2.getFieldNames().sort(), ['f1', 'f2']);
    assert.equal(await o2.getField('f2'), 'two');
    assert.deepStrictEqual(o3.getFieldNames(), ['f3']);
    assert.equal(await o3.getField('f3'), true);
});

test('binary object keys: get, getAll and containsKeys find them', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('bokey'))).setKeyType(personType).setValueType(T.STRING);
    // plain JS objects are re-serialised each time with a position-dependent
    // hash (reference §5.4 quirk 1): the server must still find them
    for (let i = 0; i < 5; i++) await cache.put(new Person(i, 'p' + i, i), 'v' + i);
    for (let i = 0; i < 5; i++) assert.equal(await cache.get(new Person(i, 'p' + i, i)), 'v' + i);
    const keys = [0, 1, 2, 3, 4].map((i) => new Person(i, 'p' + i, i));
    assert.equal(await cache.containsKeys(keys), true);
    const all = await cache.getAll(keys);
    assert.equal(all.length, 5);
    assert.deepStrictEqual(all.map((e) => e.getValue()).sort(), ['v0', 'v1', 'v2', 'v3', 'v4']);
    assert.equal(await cache.getSize(), 5);
});

// ---- scan queries ------------------------------------------------------------

async function fillInts(cache, n) {
    const entries = [];
    for (let i = 0; i < n; i++) entries.push(new CacheEntry(i, 'value-' + i));
    for (let i = 0; i < n; i += 250) await cache.putAll(entries.slice(i, i + 250));
}

function checkEveryEntryOnce(entries, n) {
    const seen = new Map();
    for (const e of entries) {
        const k = e.getKey();
        assert.ok(Number.isInteger(k) && k >= 0 && k < n, 'unexpected key ' + k);
        assert.ok(!seen.has(k), 'key ' + k + ' returned twice');
        assert.equal(e.getValue(), 'value-' + k);
        seen.set(k, true);
    }
    assert.equal(seen.size, n, 'every entry exactly once');
}

test('scan query over many pages (getAll), page size 7', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('scan'))).setKeyType(T.INTEGER).setValueType(T.STRING);
    await fillInts(cache, 1000);
    const cursor = await cache.query(new ScanQuery().setPageSize(7));
    checkEveryEntryOnce(await cursor.getAll(), 1000);
});

test('scan query iterated with getValue/hasMore, page size 1 and 64', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('scan2'))).setKeyType(T.INTEGER).setValueType(T.STRING);
    await fillInts(cache, 300);
    for (const ps of [1, 64, 300, 1024]) {
        const cursor = await cache.query(new ScanQuery().setPageSize(ps));
        const got = [];
        do {
            const e = await cursor.getValue();
            if (e) got.push(e);
        } while (cursor.hasMore());
        checkEveryEntryOnce(got, 300);
    }
});

test('scan query on an empty cache and partial cursors closed', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('scan3'))).setKeyType(T.INTEGER).setValueType(T.STRING);
    const empty = await cache.query(new ScanQuery().setPageSize(5));
    assert.deepStrictEqual(await empty.getAll(), []);
    await fillInts(cache, 50);
    // open and abandon / close many cursors: the server must not run out
    for (let i = 0; i < 200; i++) {
        const cursor = await cache.query(new ScanQuery().setPageSize(3));
        const e = await cursor.getValue();
        assert.ok(e);
        if (i % 2 === 0) await cursor.close();
        else await cursor.getAll();
    }
    const cursor = await cache.query(new ScanQuery().setPageSize(10));
    checkEveryEntryOnce(await cursor.getAll(), 50);
});

test('scan query by partition covers every entry once', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('scanp'))).setKeyType(T.INTEGER).setValueType(T.STRING);
    await fillInts(cache, 200);
    const all = [];
    for (let p = 0; p < 1024; p++) {
        const cursor = await cache.query(new ScanQuery().setPartitionNumber(p).setPageSize(50));
        all.push(...await cursor.getAll());
    }
    checkEveryEntryOnce(all, 200);
});

test('scan query of complex values (27-wrapped rows)', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('scanc'))).setKeyType(T.INTEGER).setValueType(personType);
    for (let i = 0; i < 20; i++) await cache.put(i, new Person(i, 'n' + i, i * 1.5));
    const rows = await (await cache.query(new ScanQuery().setPageSize(3))).getAll();
    assert.equal(rows.length, 20);
    for (const r of rows) {
        const bo = r.getValue();
        const p = bo instanceof BinaryObject ? await bo.toObject(personType) : bo;
        assert.deepStrictEqual(norm(p), norm(new Person(r.getKey(), 'n' + r.getKey(), r.getKey() * 1.5)));
    }
});

// ---- cache configuration ------------------------------------------------------

test('cache configuration round trip (every property)', async () => {
    const client = await connect();
    const name = cacheName('cfg');
    const fields = [
        new QueryField('id', 'java.lang.Integer').setIsKeyField(true).setIsNotNull(true),
        new QueryField('name', 'java.lang.String').setDefaultValue('anon', T.STRING),
        new QueryField('salary', 'java.math.BigDecimal').setPrecision(10).setScale(2),
    ];
    const index = new QueryIndex('name_idx', QueryIndex.INDEX_TYPE.SORTED).setInlineSize(32)
        .setFields(new Map([['name', false], ['salary', true]]));
    const entity = new QueryEntity()
        .setKeyTypeName('java.lang.Integer')
        .setValueTypeName('Person')
        .setTableName('PERSON_TBL')
        .setKeyFieldName('id')
        .setValueFieldName('val')
        .setFields(fields)
        .setAliases(new Map([['name', 'FULL_NAME']]))
        .setIndexes([index]);
    const cfg = new CacheConfiguration()
        .setAtomicityMode(CacheConfiguration.CACHE_ATOMICITY_MODE.TRANSACTIONAL)
        .setBackups(2)
        .setCacheMode(CacheConfiguration.CACHE_MODE.REPLICATED)
        .setCopyOnRead(false)
        .setDataRegionName('default')
        .setEagerTtl(false)
        .setStatisticsEnabled(true)
        .setGroupName('grp1')
        .setDefaultLockTimeout(1234)
        .setMaxConcurrentAsyncOperations(77)
        .setMaxQueryIterators(55)
        .setIsOnheapCacheEnabled(true)
        .setPartitionLossPolicy(CacheConfiguration.PARTITION_LOSS_POLICY.READ_WRITE_SAFE)
        .setQueryDetailMetricsSize(9)
        .setQueryParallelism(3)
        .setReadFromBackup(false)
        .setRebalanceBatchSize(4096)
        .setRebalanceBatchesPrefetchCount(4)
        .setRebalanceDelay(100)
        .setRebalanceMode(CacheConfiguration.REABALANCE_MODE.SYNC)
        .setRebalanceOrder(2)
        .setRebalanceThrottle(5)
        .setRebalanceTimeout(20000)
        .setSqlEscapeAll(true)
        .setSqlIndexInlineMaxSize(64)
        .setSqlSchema('MYSCHEMA')
        .setWriteSynchronizationMode(CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.FULL_SYNC)
        .setKeyConfigurations(new CacheKeyConfiguration('Person', 'id'))
        .setQueryEntities(entity);
    await client.createCache(name, cfg);

    // read it back on another connection
    const other = await connect();
    const got = await other.getCacheConfiguration(name);
    const props = ['AtomicityMode', 'Backups', 'CacheMode', 'CopyOnRead', 'DataRegionName', 'EagerTtl',
        'StatisticsEnabled', 'GroupName', 'DefaultLockTimeout', 'MaxConcurrentAsyncOperations',
        'MaxQueryIterators', 'IsOnheapCacheEnabled', 'PartitionLossPolicy', 'QueryDetailMetricsSize',
        'QueryParallelism', 'ReadFromBackup', 'RebalanceBatchSize', 'RebalanceBatchesPrefetchCount',
        'RebalanceDelay', 'RebalanceMode', 'RebalanceOrder', 'RebalanceThrottle', 'RebalanceTimeout',
        'SqlEscapeAll', 'SqlIndexInlineMaxSize', 'SqlSchema', 'WriteSynchronizationMode'];
    const diffs = [];
    for (const p of props) {
        const w = cfg['get' + p](), g = got['get' + p]();
        if (JSON.stringify(norm(w)) !== JSON.stringify(norm(g))) diffs.push(p + ': sent ' + JSON.stringify(w) + ' got ' + JSON.stringify(g));
    }
    assert.deepStrictEqual(diffs, [], 'configuration properties differ');
    const kc = got.getKeyConfigurations();
    assert.equal(kc.length, 1);
    assert.equal(kc[0].getTypeName(), 'Person');
    assert.equal(kc[0].getAffinityKeyFieldName(), 'id');
    const qe = got.getQueryEntities();
    assert.equal(qe.length, 1);
    const e = qe[0];
    assert.equal(e.getKeyTypeName(), 'java.lang.Integer');
    assert.equal(e.getValueTypeName(), 'Person');
    assert.equal(e.getTableName(), 'PERSON_TBL');
    assert.equal(e.getKeyFieldName(), 'id');
    assert.equal(e.getValueFieldName(), 'val');
    const gf = e.getFields();
    assert.equal(gf.length, 3);
    assert.deepStrictEqual(gf.map((f) => [f.getName(), f.getTypeName(), f.getIsKeyField(), f.getIsNotNull(),
                                        f.getPrecision(), f.getScale()]),
        [['id', 'java.lang.Integer', true, true, -1, -1],
         ['name', 'java.lang.String', false, false, -1, -1],
         ['salary', 'java.math.BigDecimal', false, false, 10, 2]]);
    assert.equal(await gf[1].getDefaultValue(), 'anon');
    assert.equal(await gf[0].getDefaultValue(), null);
    assert.deepStrictEqual([...e.getAliases().entries()], [['name', 'FULL_NAME']]);
    const gi = e.getIndexes();
    assert.equal(gi.length, 1);
    assert.equal(gi[0].getName(), 'name_idx');
    assert.equal(gi[0].getType(), QueryIndex.INDEX_TYPE.SORTED);
    assert.equal(gi[0].getInlineSize(), 32);
    assert.deepStrictEqual([...gi[0].getFields().entries()], [['name', false], ['salary', true]]);

    // the cache works
    const cache = other.getCache(name).setKeyType(T.INTEGER);
    await cache.put(1, 'x');
    assert.equal(await cache.get(1), 'x');
    await client.destroyCache(name);
});

test('cache configuration of a cache created by name', async () => {
    const client = await connect();
    const name = cacheName('cfgname');
    await client.createCache(name);
    const got = await client.getCacheConfiguration(name);
    assert.equal(got.getBackups(), 0);
    assert.equal(got.getCacheMode(), CacheConfiguration.CACHE_MODE.PARTITIONED);
    assert.equal(got.getAtomicityMode(), CacheConfiguration.CACHE_ATOMICITY_MODE.ATOMIC);
    // Node 1.0.0 leaves the list undefined when the count is 0
    assert.equal((got.getQueryEntities() || []).length, 0);
    assert.equal((got.getKeyConfigurations() || []).length, 0);
    assert.equal(got.getWriteSynchronizationMode(), CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.PRIMARY_SYNC);
});

test('getOrCreateCache with configuration keeps the first configuration', async () => {
    const client = await connect();
    const name = cacheName('goc');
    await client.getOrCreateCache(name, new CacheConfiguration().setBackups(1).setSqlSchema('S1'));
    await client.getOrCreateCache(name, new CacheConfiguration().setBackups(3).setSqlSchema('S2'));
    const got = await client.getCacheConfiguration(name);
    assert.equal(got.getBackups(), 1);
    assert.equal(got.getSqlSchema(), 'S1');
});

// ---- names, getOrCreate, errors -------------------------------------------------

test('cache names listing, getOrCreate, destroy', async () => {
    const client = await connect();
    const a = cacheName('names_a'), b = cacheName('names_b');
    await client.createCache(a);
    await client.getOrCreateCache(b);
    await client.getOrCreateCache(b); // second call: no error, same cache
    const c1 = client.getCache(b).setKeyType(T.INTEGER);
    await c1.put(1, 'kept');
    await client.getOrCreateCache(b);
    assert.equal(await c1.get(1), 'kept', 'getOrCreate of an existing cache keeps its data');
    let names = await client.cacheNames();
    assert.ok(names.includes(a) && names.includes(b), 'both caches listed: ' + JSON.stringify(names));
    assert.equal(names.filter((n) => n === b).length, 1);
    await client.destroyCache(a);
    names = await client.cacheNames();
    assert.ok(!names.includes(a), 'destroyed cache not listed');
    assert.ok(names.includes(b));
    // re-creating a destroyed cache gives an empty cache
    await client.createCache(a);
    assert.equal(await client.getCache(a).getSize(), 0);
});

test('errors: destroy missing, create existing, ops on missing cache', async () => {
    const client = await connect();
    const missing = cacheName('missing');
    await expectOperationError(() => client.destroyCache(missing), 'destroy missing cache');
    const name = cacheName('exists');
    await client.createCache(name);
    await expectOperationError(() => client.createCache(name), 'create existing cache');
    await expectOperationError(() => client.createCache(name, new CacheConfiguration().setBackups(1)),
        'create existing cache with configuration');
    const m = client.getCache(missing).setKeyType(T.INTEGER);
    await expectOperationError(() => m.put(1, 'x'), 'put into missing cache');
    await expectOperationError(() => m.get(1), 'get from missing cache');
    await expectOperationError(() => m.getSize(), 'size of missing cache');
    await expectOperationError(() => m.query(new ScanQuery()), 'scan of missing cache');
    await expectOperationError(() => client.getCacheConfiguration(missing), 'configuration of missing cache');
    // the connection is still fine after errors
    const ok = client.getCache(name).setKeyType(T.INTEGER);
    await ok.put(1, 'fine');
    assert.equal(await ok.get(1), 'fine');
    // ops on a destroyed cache fail too
    await client.destroyCache(name);
    await expectOperationError(() => ok.get(1), 'get from destroyed cache');
});

test('many clients at once', async () => {
    const name = cacheName('multi');
    const clients = [];
    for (let i = 0; i < 20; i++) clients.push(await connect());
    await clients[0].getOrCreateCache(name);
    await Promise.all(clients.map(async (c, i) => {
        const cache = c.getCache(name).setKeyType(T.INTEGER).setValueType(T.INTEGER);
        for (let k = 0; k < 50; k++) await cache.put(i * 1000 + k, k);
    }));
    assert.equal(await clients[5].getCache(name).getSize(), 1000);
});

// SQL on a cache without tables: a query of no table works, SqlQuery of an
// unknown type is an OperationError (never a hang or a dropped connection)
// and the connection keeps working.  test_sql.js has the SQL tests.
test('SQL without tables: fields query works, unknown type is an OperationError', async () => {
    const { SqlFieldsQuery, SqlQuery } = IgniteClient;
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('sql'))).setKeyType(T.INTEGER).setValueType(T.STRING);
    await cache.put(1, 'x');
    const rows = await (await cache.query(new SqlFieldsQuery('SELECT 5 AS A'))).getAll();
    assert.deepStrictEqual(rows.map((r) => r.map(Number)), [[5]]);
    await expectOperationError(() => cache.query(new SqlQuery('Person', 'age > 3')), 'SQL query');
    assert.equal(await cache.get(1), 'x');
});

test('large values: 8 MiB byte array, 1 MiB string, 20 000 entries', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('large'))).setKeyType(T.INTEGER);
    const bytes = [];
    for (let i = 0; i < 8 << 20; i++) bytes.push((i * 7) & 0x7f);
    cache.setValueType(T.BYTE_ARRAY);
    await cache.put(1, bytes);
    const got = await cache.get(1);
    assert.equal(got.length, bytes.length);
    assert.ok(got.every((b, i) => b === bytes[i]), 'byte array content');
    cache.setValueType(T.STRING);
    const str = 'ü'.repeat(1 << 19);   // 1 MiB of UTF-8
    await cache.put(2, str);
    assert.equal(await cache.get(2), str);
    const entries = [];
    for (let i = 0; i < 20000; i++) entries.push(new CacheEntry(100 + i, 'e' + i));
    await cache.putAll(entries);
    assert.equal(await cache.getSize(), 20002);
    const some = await cache.getAll([100, 10099, 20099, 999999]);
    assert.deepStrictEqual(some.map((e) => [e.getKey(), e.getValue()]).sort(),
        [[100, 'e0'], [10099, 'e9999'], [20099, 'e19999']].sort());
});

// Authentication through the real client: a second emberd that requires a
// user name and password (handshake 1.2.0 with credentials, reference §1.9).
test('authentication with user name and password', async () => {
    const { spawn } = require('node:child_process');
    const net = require('node:net');
    const path = require('node:path');
    const port = await new Promise((res) => {
        const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
    });
    const root = path.resolve(__dirname, '../..');
    const build = process.env.EMBER_BUILD || 'build';
    const emberd = path.isAbsolute(build) ? path.join(build, 'emberd') : path.join(root, build, 'emberd');
    const proc = spawn(emberd, ['--host', '127.0.0.1', '--port', String(port),
                                '--username', 'ignite', '--password', 's3cret'], { stdio: 'ignore' });
    const exited = new Promise((res) => proc.on('exit', (code, sig) => res({ code, sig })));
    try {
        for (let i = 0; i < 200; i++) {
            const ok = await new Promise((res) => {
                const c = net.connect(port, '127.0.0.1', () => { c.end(); res(true); });
                c.on('error', () => res(false));
            });
            if (ok) break;
            await new Promise((r) => setTimeout(r, 25));
        }
        const { IgniteClientConfiguration } = IgniteClient;
        const good = new IgniteClient();
        await good.connect(new IgniteClientConfiguration('127.0.0.1:' + port).setUserName('ignite').setPassword('s3cret'));
        const cache = (await good.getOrCreateCache('authed')).setKeyType(T.INTEGER);
        await cache.put(1, 'in');
        assert.equal(await cache.get(1), 'in');
        good.disconnect();
        for (const [user, pass] of [['ignite', 'wrong'], [null, null], ['nobody', 's3cret']]) {
            const bad = new IgniteClient();
            const cfg = new IgniteClientConfiguration('127.0.0.1:' + port);
            if (user) cfg.setUserName(user).setPassword(pass);
            let err = null;
            try {
                await bad.connect(cfg);
            } catch (e) {
                err = e;
            }
            bad.disconnect();
            assert.ok(err, 'connect as ' + user + ' must fail');
        }
    } finally {
        proc.kill('SIGTERM');
        const { code } = await exited;
        assert.equal(code, 0, 'second emberd exits 0 on SIGTERM');
    }
});
