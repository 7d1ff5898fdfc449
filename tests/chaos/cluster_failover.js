// cluster_failover.js - the Node.js client's side of tools/failover-bench.sh.
//
//   node cluster_failover.js create ADDR CACHE BACKUPS
//     Creates CACHE: PARTITIONED, BACKUPS backups, FULL_SYNC.
//   node cluster_failover.js write ADDR CACHE NKEYS STOPFILE
//     NKEYS writers at once through ADDR, writer k putting int key k (its
//     own partition k) one put after the other, until STOPFILE exists;
//     prints a line per put: "key start_ms end_ms ok|err MESSAGE" (wall clock, so
//     the shell that kills a node compares its own date +%s%3N).  With 16
//     keys some partition's primary is on the killed node but for a
//     (2/3)^16 chance on 3 nodes; the shell checks that one stalled.
'use strict';
const fs = require('fs');
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType, CacheConfiguration } = IgniteClient;
const INT = ObjectType.PRIMITIVE_TYPE.INTEGER;

(async () => {
    const [mode, addr, name, a, b] = process.argv.slice(2);
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(addr));
    if (mode === 'create') {
        const cfg = new CacheConfiguration()
            .setCacheMode(CacheConfiguration.CACHE_MODE.PARTITIONED)
            .setBackups(parseInt(a))
            .setWriteSynchronizationMode(CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.FULL_SYNC);
        await c.getOrCreateCache(name, cfg);
        console.log('created ' + name);
    } else if (mode === 'write') {
        // A connection per writer: one stalled put must not hold up the
        // others behind it on a shared socket.
        const writer = async (key) => {
            const wc = new IgniteClient();
            await wc.connect(new IgniteClientConfiguration(addr));
            const cache = wc.getCache(name).setKeyType(INT).setValueType(INT);
            for (let i = 0; !fs.existsSync(b); i++) {
                const t0 = Date.now();
                let ok = 'ok';
                try {
                    await cache.put(key, i);
                } catch (e) {
                    ok = 'err ' + e.message;
                }
                console.log(`${key} ${t0} ${Date.now()} ${ok}`);
            }
            wc.disconnect();
        };
        const w = [];
        for (let k = 0; k < parseInt(a); k++)
            w.push(writer(k));
        await Promise.all(w);
    }
    c.disconnect();
})().catch(e => { console.error('ERR ' + e.message); process.exit(1); });
