// test_kv.js - every key-value op of apache-ignite-client@1.0.0 (1000-1020)
// for every value type it can write, and the key-capable types as keys.
'use strict';

const { test, connect, cacheName, norm, assert, expectOperationError } = require('./lib/runner');
const IgniteClient = require('apache-ignite-client');
const { ObjectType, CacheEntry, CacheClient } = IgniteClient;
const { TYPES, registerEnum } = require('./lib/types');

const T = ObjectType.PRIMITIVE_TYPE;
const PEEK = CacheClient.PEEK_MODE;

async function plainOf(entry, v) {
    if (v === null || v === undefined) return null;
    if (entry.plain) return norm(await entry.plain(v));
    return norm(v);
}

async function expected(entry, v) {
    if (entry.plain) return norm(await entry.plain(v));
    return norm(entry.expect ? entry.expect(v) : v);
}

async function eq(entry, got, want, what) {
    assert.deepStrictEqual(await plainOf(entry, got), await expected(entry, want), what);
}

async function isNull(v, what) {
    assert.ok(v === null || v === undefined, what + ': expected null, got ' + JSON.stringify(norm(v)));
}

async function size(cache, ...modes) {
    return await cache.getSize(...modes);
}

// allOps runs the whole op sequence with int keys and values of one type.
async function allOps(entry) {
    const client = await connect();
    if (entry.needsEnum) await registerEnum(client);
    const name = cacheName('kv');
    const cache = (await client.getOrCreateCache(name)).setKeyType(T.INTEGER);
    if (entry.type !== null) cache.setValueType(entry.type);
    const [a, b, c] = entry.values;

    await cache.put(1, a);
    await eq(entry, await cache.get(1), a, 'get after put');
    await isNull(await cache.get(99), 'get missing');
    assert.equal(await cache.containsKey(1), true, 'containsKey present');
    assert.equal(await cache.containsKey(2), false, 'containsKey absent');

    await cache.putAll([new CacheEntry(2, b), new CacheEntry(3, c)]);
    const all = await cache.getAll([1, 2, 3, 4]);
    assert.equal(all.length, 3, 'getAll returns only present keys');
    const byKey = new Map(all.map((e) => [e.getKey(), e.getValue()]));
    assert.deepStrictEqual([...byKey.keys()].sort(), [1, 2, 3]);
    await eq(entry, byKey.get(1), a, 'getAll 1');
    await eq(entry, byKey.get(2), b, 'getAll 2');
    await eq(entry, byKey.get(3), c, 'getAll 3');
    assert.equal(await cache.containsKeys([1, 2, 3]), true, 'containsKeys all');
    assert.equal(await cache.containsKeys([1, 4]), false, 'containsKeys some');

    await eq(entry, await cache.getAndPut(1, b), a, 'getAndPut returns old');
    await eq(entry, await cache.get(1), b, 'getAndPut stored new');
    await isNull(await cache.getAndPut(10, a), 'getAndPut on absent key');
    await eq(entry, await cache.get(10), a, 'getAndPut stored on absent key');
    assert.equal(await cache.removeKey(10), true);

    await eq(entry, await cache.getAndReplace(1, c), b, 'getAndReplace returns old');
    await eq(entry, await cache.get(1), c, 'getAndReplace stored');
    await isNull(await cache.getAndReplace(5, a), 'getAndReplace absent');
    assert.equal(await cache.containsKey(5), false, 'getAndReplace must not insert');

    await eq(entry, await cache.getAndRemove(3), c, 'getAndRemove returns old');
    assert.equal(await cache.containsKey(3), false, 'getAndRemove removed');
    await isNull(await cache.getAndRemove(3), 'getAndRemove absent');

    assert.equal(await cache.putIfAbsent(2, a), false, 'putIfAbsent present');
    await eq(entry, await cache.get(2), b, 'putIfAbsent kept old');
    assert.equal(await cache.putIfAbsent(3, a), true, 'putIfAbsent absent');
    await eq(entry, await cache.get(3), a, 'putIfAbsent stored');

    await eq(entry, await cache.getAndPutIfAbsent(3, b), a, 'getAndPutIfAbsent present');
    await eq(entry, await cache.get(3), a, 'getAndPutIfAbsent kept old');
    await isNull(await cache.getAndPutIfAbsent(4, b), 'getAndPutIfAbsent absent');
    await eq(entry, await cache.get(4), b, 'getAndPutIfAbsent stored');

    assert.equal(await cache.replace(4, c), true, 'replace present');
    await eq(entry, await cache.get(4), c, 'replace stored');
    assert.equal(await cache.replace(6, c), false, 'replace absent');
    assert.equal(await cache.containsKey(6), false, 'replace must not insert');

    assert.equal(await cache.replaceIfEquals(4, c, a), true, 'replaceIfEquals equal');
    await eq(entry, await cache.get(4), a, 'replaceIfEquals stored');
    // (boolean has only two values: there c equals a)
    if (JSON.stringify(await expected(entry, a)) !== JSON.stringify(await expected(entry, c))) {
        assert.equal(await cache.replaceIfEquals(4, c, b), false, 'replaceIfEquals not equal');
        await eq(entry, await cache.get(4), a, 'replaceIfEquals kept');
    }
    assert.equal(await cache.replaceIfEquals(7, a, b), false, 'replaceIfEquals absent');

    assert.equal(await cache.removeKey(4), true, 'removeKey present');
    assert.equal(await cache.removeKey(4), false, 'removeKey absent');

    assert.equal(await cache.removeIfEquals(3, b), false, 'removeIfEquals not equal');
    assert.equal(await cache.containsKey(3), true);
    assert.equal(await cache.removeIfEquals(3, a), true, 'removeIfEquals equal');
    assert.equal(await cache.containsKey(3), false);

    // left: 1 = c, 2 = b
    assert.equal(await size(cache), 2, 'getSize()');
    assert.equal(await size(cache, PEEK.ALL), 2, 'getSize(ALL)');
    assert.equal(await size(cache, PEEK.PRIMARY), 2, 'getSize(PRIMARY)');
    assert.equal(await size(cache, PEEK.BACKUP), 0, 'getSize(BACKUP) on one node');
    // Node 1.0.0 knows only ALL/NEAR/PRIMARY/BACKUP (no ONHEAP/OFFHEAP)
    assert.equal(await size(cache, PEEK.NEAR), 0, 'getSize(NEAR): no near cache on a server');
    assert.equal(await size(cache, PEEK.PRIMARY, PEEK.BACKUP), 2, 'getSize(PRIMARY, BACKUP)');

    await cache.clearKey(1);
    assert.equal(await cache.containsKey(1), false, 'clearKey');
    assert.equal(await size(cache), 1);
    await cache.putAll([new CacheEntry(5, a), new CacheEntry(6, b), new CacheEntry(7, c)]);
    assert.equal(await size(cache), 4);
    await cache.clearKeys([5, 6, 99]);
    assert.equal(await size(cache), 2, 'clearKeys');
    assert.equal(await cache.containsKeys([2, 7]), true);
    await cache.removeKeys([2, 98]);
    assert.equal(await size(cache), 1, 'removeKeys');
    await eq(entry, await cache.get(7), c, 'other key untouched by removeKeys');
    await cache.removeAll();
    assert.equal(await size(cache), 0, 'removeAll');
    await cache.put(8, a);
    await cache.put(9, b);
    await cache.clear();
    assert.equal(await size(cache), 0, 'clear');
    await isNull(await cache.get(8), 'get after clear');
    await client.destroyCache(name);
}

for (const entry of TYPES) {
    test('kv ops, value type ' + entry.name, () => allOps(entry));
}

// Keys of each key-capable type: stored, found by get / getAll /
// containsKeys, removed by removeKeys.
async function keyOps(entry) {
    const client = await connect();
    if (entry.needsEnum) await registerEnum(client);
    const name = cacheName('keys');
    const cache = (await client.getOrCreateCache(name)).setValueType(T.STRING);
    if (entry.type !== null) cache.setKeyType(entry.type);
    // distinct keys only (boolean has two)
    const keys = [];
    const seen = new Set();
    for (const k of entry.values) {
        const id = JSON.stringify(await expected(entry, k));
        if (!seen.has(id)) {
            seen.add(id);
            keys.push(k);
        }
    }
    for (let i = 0; i < keys.length; i++) await cache.put(keys[i], 'v' + i);
    for (let i = 0; i < keys.length; i++) assert.equal(await cache.get(keys[i]), 'v' + i, 'get key ' + i);
    assert.equal(await size(cache), keys.length);
    assert.equal(await cache.containsKeys(keys), true, 'containsKeys');
    const all = await cache.getAll(keys);
    assert.equal(all.length, keys.length, 'getAll finds every key');
    const wantPairs = [];
    for (let i = 0; i < keys.length; i++) wantPairs.push([await expected(entry, keys[i]), 'v' + i]);
    const gotPairs = [];
    for (const e of all) gotPairs.push([await plainOf(entry, e.getKey()), e.getValue()]);
    const sortJ = (x) => x.map((p) => JSON.stringify(p)).sort();
    assert.deepStrictEqual(sortJ(gotPairs), sortJ(wantPairs), 'getAll keys and values');
    // overwrite does not create a second entry
    await cache.put(keys[0], 'again');
    assert.equal(await size(cache), keys.length, 'overwrite keeps size');
    assert.equal(await cache.get(keys[0]), 'again');
    await cache.removeKeys(keys.slice(1));
    assert.equal(await size(cache), 1, 'removeKeys');
    assert.equal(await cache.removeKey(keys[0]), true);
    assert.equal(await size(cache), 0);
    await client.destroyCache(name);
}

for (const entry of TYPES.filter((e) => e.key)) {
    test('kv keys of type ' + entry.name, () => keyOps(entry));
}

// A value written by one type and read without a declared type keeps its
// wire type (int stays int, not double).
test('kv untyped read of typed values', async () => {
    const client = await connect();
    const cache = (await client.getOrCreateCache(cacheName('untyped'))).setKeyType(T.INTEGER);
    await cache.put(1, 5);
    assert.equal(await cache.get(1), 5);
    cache.setValueType(T.INTEGER);
    await cache.put(2, 6);
    cache.setValueType(null);
    assert.equal(await cache.get(2), 6);
    assert.equal(await cache.get(1), 5);
    assert.equal(await cache.containsKey(2), true);
    // int key 2 and double key 2 are different keys
    cache.setKeyType(null);
    assert.equal(await cache.containsKey(2), false, 'double 2.0 is not int 2');
});

// Node 1.0.0 writes enum arrays (29) without the element type id the format
// requires (BinaryCommunicator._writeArray writes it only for 23), so a
// conforming server must refuse them - with an error, on a connection that
// stays usable.
test('kv enum array from Node 1.0.0 is refused cleanly', async () => {
    const client = await connect();
    await registerEnum(client);
    const cache = (await client.getOrCreateCache(cacheName('enumarr'))).setKeyType(T.INTEGER);
    const { color } = require('./lib/types');
    cache.setValueType(T.ENUM_ARRAY);
    await expectOperationError(() => cache.put(1, [color(0), color(1)]), 'put of a malformed enum array');
    cache.setValueType(T.STRING);
    await cache.put(2, 'after');
    assert.equal(await cache.get(2), 'after');
    assert.equal(await cache.getSize(), 1);
});
