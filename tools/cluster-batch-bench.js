// cluster-batch-bench.js ADDR N B - the client side of cluster-batch-bench.sh:
// N getAll and then N putAll calls of B int keys each (spread over 3 000
// prefilled keys, so every batch spans every owner) through one node, one
// call at a time; prints p50/p99/mean latency per op.
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../tests/node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, CacheConfiguration, ObjectType, CacheEntry } = IgniteClient;
(async () => {
    const [addr, nb, bs] = [process.argv[2], parseInt(process.argv[3]), parseInt(process.argv[4])];
    const cl = new IgniteClient();
    await cl.connect(new IgniteClientConfiguration(addr));
    const cfg = new CacheConfiguration().setBackups(1)
        .setWriteSynchronizationMode(CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.FULL_SYNC);
    const c = (await cl.getOrCreateCache('ga', cfg)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
    const keys = []; for (let i = 0; i < 3000; i++) keys.push(i);
    for (let i = 0; i < 3000; i += 100) await c.putAll(keys.slice(i, i + 100).map((k) => new CacheEntry(k, 'v' + k)));
    for (const mode of ['getAll', 'putAll']) {
        const lat = [];
        for (let r = 0; r < nb; r++) {
            const b = []; for (let j = 0; j < bs; j++) b.push((r * 7919 + j * 104729) % 3000);
            const t0 = process.hrtime.bigint();
            if (mode === 'getAll') { const g = await c.getAll(b); if (g.length !== new Set(b).size) throw new Error('short ' + g.length); }
            else await c.putAll(b.map((k) => new CacheEntry(k, 'w' + k)));
            lat.push(Number(process.hrtime.bigint() - t0) / 1000);
        }
        lat.sort((a, b) => a - b);
        console.log(`${mode} ${bs} keys: p50 ${lat[lat.length >> 1].toFixed(0)} us, p99 ${lat[Math.floor(lat.length * 0.99)].toFixed(0)} us, mean ${(lat.reduce((a, b) => a + b) / lat.length).toFixed(0)} us`);
    }
    cl.disconnect();
})().catch((e) => { console.error('ERR', e.message); process.exit(1); });
