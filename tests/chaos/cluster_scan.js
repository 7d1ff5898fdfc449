// cluster_scan.js - scan queries over a cluster through the real Node.js
// client (apache-ignite-client): each partition is read once, from its
// primary, wherever the client connected.
//
//   node cluster_scan.js host:port host:port host:port
//     PARTITIONED (1 backup) and REPLICATED caches of 1 000 int keys: a
//     scan through every node, page sizes 1, 7 and the default, returns
//     every entry exactly once with its value; scans of single partitions
//     through one node cover every entry once; an empty cache scans empty.
// Prints "ok ..." lines and exits non-zero on the first failure.
'use strict';
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType, CacheConfiguration, CacheEntry, ScanQuery } = IgniteClient;
const INT = ObjectType.PRIMITIVE_TYPE.INTEGER;
const MODE = CacheConfiguration.CACHE_MODE;
const SYNC = CacheConfiguration.WRITE_SYNCHRONIZATION_MODE;
const N = 1000;

async function open(ep) {
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(ep));
    return c;
}

function everyOnce(entries, n, what) {
    const seen = new Set();
    for (const e of entries) {
        const k = e.getKey();
        if (!Number.isInteger(k) || k < 0 || k >= n) throw new Error(`${what}: unexpected key ${k}`);
        if (seen.has(k)) throw new Error(`${what}: key ${k} returned twice`);
        if (e.getValue() !== 'v' + k) throw new Error(`${what}: key ${k} has ${e.getValue()}`);
        seen.add(k);
    }
    if (seen.size !== n) throw new Error(`${what}: ${seen.size} of ${n} entries`);
}

async function scanAll(cache, page) {
    const q = new ScanQuery();
    if (page) q.setPageSize(page);
    const cursor = await cache.query(q);
    if (page !== 1) return cursor.getAll();
    const got = [];             // one entry per page: hasMore must be exact
    do {
        const e = await cursor.getValue();
        if (e) got.push(e);
    } while (cursor.hasMore());
    return got;
}

async function main(eps) {
    const cl = [];
    for (const ep of eps) cl.push(await open(ep));
    const kinds = [['PARTITIONED backups 1', MODE.PARTITIONED, 1], ['REPLICATED', MODE.REPLICATED, 0]];
    for (const [kname, mode, backups] of kinds) {
        const name = `scan-${mode}-${process.pid}`;
        const cfg = new CacheConfiguration().setCacheMode(mode).setBackups(backups)
            .setWriteSynchronizationMode(SYNC.FULL_SYNC);
        await cl[0].createCache(name, cfg);
        const c = [];
        for (const x of cl) c.push((await x.getCache(name)).setKeyType(INT));
        const empty = await (await c[1].query(new ScanQuery().setPageSize(5))).getAll();
        if (empty.length !== 0) throw new Error(`${kname}: an empty cache scanned ${empty.length} entries`);
        const entries = [];
        for (let i = 0; i < N; i++) entries.push(new CacheEntry(i, 'v' + i));
        for (let i = 0; i < N; i += 250) await c[0].putAll(entries.slice(i, i + 250));
        for (let j = 0; j < c.length; j++)
            for (const page of [1, 7, 0])
                everyOnce(await scanAll(c[j], page), N, `${kname} through ${eps[j]}, page ${page || 'default'}`);
        const parts = [];
        for (let p = 0; p < 1024; p++)
            parts.push(...await (await c[2].query(new ScanQuery().setPartitionNumber(p).setPageSize(64))).getAll());
        everyOnce(parts, N, `${kname} by partition`);
        await cl[0].destroyCache(name);
        console.log(`ok ${kname}: scans through each of ${c.length} nodes (pages 1, 7, default) and by partition return each of ${N} entries once`);
    }
    for (const x of cl) x.disconnect();
}

main(process.argv.slice(2)).catch((e) => { console.log('FAIL ' + (e && e.message)); process.exit(1); });
