// cluster_retry.js - the Node.js client's side of cluster_retry.sh.
//
//   node cluster_retry.js ADDR CACHE N
//     Creates CACHE (PARTITIONED, 2 backups, FULL_SYNC) through ADDR, then
//     put-if-absent of int keys 0..N-1, one after the other: every one must
//     answer true (each key is new), including the one whose primary ran
//     it, replicated it and died before answering - its retry on the new
//     primary must return the first run's outcome, not decide again on a
//     key the first run stored.  Then every key must read back as stored.
'use strict';
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType, CacheConfiguration } = IgniteClient;
const INT = ObjectType.PRIMITIVE_TYPE.INTEGER;

(async () => {
    const [addr, name, n] = process.argv.slice(2);
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(addr));
    const cfg = new CacheConfiguration()
        .setCacheMode(CacheConfiguration.CACHE_MODE.PARTITIONED)
        .setBackups(2)
        .setWriteSynchronizationMode(CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.FULL_SYNC);
    const cache = (await c.getOrCreateCache(name, cfg)).setKeyType(INT).setValueType(INT);
    let slow = 0;
    for (let k = 0; k < parseInt(n); k++) {
        const t0 = Date.now();
        const r = await cache.putIfAbsent(k, k);
        if (r !== true)
            throw new Error(`putIfAbsent(${k}) answered ${r}: the write ran twice`);
        if (Date.now() - t0 > 500)
            slow++;
    }
    console.log(`ok ${n} put-if-absent through ${addr}, every one true (${slow} waited for a failover)`);
    for (let k = 0; k < parseInt(n); k++) {
        const v = await cache.get(k);
        if (v !== k)
            throw new Error(`key ${k} reads ${v}`);
    }
    console.log(`ok every key reads back as stored`);
    c.disconnect();
})().catch(e => { console.log('FAIL ' + e.message); process.exit(1); });
