// test_tx.js - TRANSACTIONAL caches from the Node.js client (issue 17).
// apache-ignite-client@1.0.0 has no transaction API (no TX_START/TX_END op
// codes, its cache header always sends flags 0: lib/internal/BinaryUtils.js,
// CacheClient._writeCacheInfo), so explicit transactions are tested from C
// (tests/integration/test_tx.c).  What a Node client can do is use a cache
// created with ATOMICITY_MODE TRANSACTIONAL: every operation runs as an
// implicit one-op transaction on the server, and must behave as on ATOMIC.
'use strict';

const { test, connect, disconnect, cacheName, assert } = require('./lib/runner');
const IgniteClient = require('apache-ignite-client');
const { ObjectType, CacheConfiguration, CacheEntry } = IgniteClient;

const T = ObjectType.PRIMITIVE_TYPE;

test('TRANSACTIONAL cache: configuration echoed, key-value ops as on ATOMIC', async () => {
    const name = cacheName('txn');
    const c = await connect();
    const cfg = new CacheConfiguration()
        .setAtomicityMode(CacheConfiguration.CACHE_ATOMICITY_MODE.TRANSACTIONAL);
    const cache = (await c.createCache(name, cfg)).setKeyType(T.INTEGER).setValueType(T.STRING);
    const got = await c.getCacheConfiguration(name);
    assert.equal(got.getAtomicityMode(), CacheConfiguration.CACHE_ATOMICITY_MODE.TRANSACTIONAL);
    await cache.put(1, 'a');
    assert.equal(await cache.get(1), 'a');
    assert.equal(await cache.putIfAbsent(1, 'b'), false);
    assert.equal(await cache.replace(1, 'c'), true);
    assert.equal(await cache.getAndPut(1, 'd'), 'c');
    assert.equal(await cache.replaceIfEquals(1, 'd', 'e'), true);
    await cache.putAll([new CacheEntry(2, 'x'), new CacheEntry(3, 'y')]);
    const all = await cache.getAll([1, 2, 3, 4]);
    assert.deepStrictEqual(all.map((e) => [e.getKey(), e.getValue()]).sort(),
        [[1, 'e'], [2, 'x'], [3, 'y']]);
    assert.equal(await cache.containsKeys([1, 2, 3]), true);
    assert.equal(await cache.getAndRemove(2), 'x');
    assert.equal(await cache.removeIfEquals(3, 'y'), true);
    assert.equal(await cache.removeKey(1), true);
    assert.equal(await cache.getSize(), 0);
    // concurrent writers of one key through two connections: none lost, no hang
    const d = await connect();
    const other = (await d.getOrCreateCache(name)).setKeyType(T.INTEGER).setValueType(T.STRING);
    const ops = [];
    for (let i = 0; i < 50; i++) {
        ops.push(cache.put(10, 'p' + i));
        ops.push(other.put(10, 'q' + i));
    }
    await Promise.all(ops);
    assert.ok(/^[pq]\d+$/.test(await cache.get(10)));
    disconnect(c);
    disconnect(d);
});
