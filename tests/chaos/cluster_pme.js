// cluster_pme.js - the Node.js client's side of cluster_pme.sh.
//   make ADDR N        create caches pme0..pmeN-1 (no backups), 20 keys each
//   probe ADDR CACHE K read keys 0..K-1 of CACHE: prints "ok A lost B other C"
//   write ADDR CACHE K put keys 0..K-1: the same summary
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, CacheConfiguration, ObjectType } = IgniteClient;

(async () => {
    const [mode, addr, a, b] = process.argv.slice(2);
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(addr));
    if (mode === 'make') {
        for (let i = 0; i < parseInt(a); i++) {
            const cfg = new CacheConfiguration()
                .setCacheMode(CacheConfiguration.CACHE_MODE.PARTITIONED).setBackups(0);
            const cache = (await c.getOrCreateCache('pme' + i, cfg))
                .setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
            for (let k = 0; k < 20; k++)
                await cache.put(k, 'v' + k);
        }
        console.log('made ' + a);
    } else {
        const cache = c.getCache(a).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
        let ok = 0, lost = 0, other = 0, msg = '';
        for (let k = 0; k < parseInt(b); k++) {
            try {
                if (mode === 'probe')
                    await cache.get(k);
                else
                    await cache.put(k, 'w' + k);
                ok++;
            } catch (e) {
                if (/all partition owners have left the grid/.test(e.message))
                    lost++;
                else {
                    other++;
                    msg = e.message;
                }
            }
        }
        console.log(`ok ${ok} lost ${lost} other ${other}${msg ? ' (' + msg + ')' : ''}`);
    }
    c.disconnect();
})().catch(e => { console.error('ERR ' + e.message); process.exit(1); });
