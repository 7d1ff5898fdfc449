// cluster_ops.js - the Node.js client's side of cluster_ops.sh:
//   make ADDR CACHE BACKUPS K   create a PARTITIONED cache with BACKUPS
//                               backups (FULL_SYNC) and put keys 1..K
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, CacheConfiguration, ObjectType } = IgniteClient;

(async () => {
    const [mode, addr, name, backups, k] = process.argv.slice(2);
    if (mode !== 'make')
        throw new Error('usage: make ADDR CACHE BACKUPS K');
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(addr));
    const cfg = new CacheConfiguration()
        .setCacheMode(CacheConfiguration.CACHE_MODE.PARTITIONED)
        .setBackups(parseInt(backups))
        .setWriteSynchronizationMode(CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.FULL_SYNC);
    const cache = (await c.getOrCreateCache(name, cfg)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
    for (let i = 1; i <= parseInt(k); i++)
        await cache.put(i, 'v' + i);
    console.log('made ' + name);
    c.disconnect();
})().catch(e => { console.error('ERR ' + e.message); process.exit(1); });
