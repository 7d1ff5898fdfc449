// cluster_rebal.js - the Node.js client's side of cluster_rebal.sh.
//   put ADDR CACHE BACKUPS FROM TO [primary]  create CACHE (PARTITIONED, BACKUPS,
//                                    FULL_SYNC; 'primary': reads from the primary only)
//                                    if needed, put keys FROM..TO-1 = "v<k>";
//                                    prints "acked N failed F"
//   check ADDR CACHE FROM TO         read them: prints "ok N missing M wrong W"
// REBAL_BATCH, REBAL_PREFETCH, REBAL_THROTTLE set the created cache's
// rebalanceBatchSize, rebalanceBatchesPrefetchCount and rebalanceThrottle;
// REBAL_TX=1 makes it TRANSACTIONAL.
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, CacheConfiguration, ObjectType } = IgniteClient;

(async () => {
    const [mode, addr, name, a, b, c, d] = process.argv.slice(2);
    const cl = new IgniteClient();
    await cl.connect(new IgniteClientConfiguration(addr));
    if (mode === 'put') {
        const cfg = new CacheConfiguration()
            .setCacheMode(CacheConfiguration.CACHE_MODE.PARTITIONED)
            .setBackups(parseInt(a))
            .setWriteSynchronizationMode(CacheConfiguration.WRITE_SYNCHRONIZATION_MODE.FULL_SYNC)
            .setReadFromBackup(d !== 'primary');
        const env = process.env;
        if (env.REBAL_BATCH) cfg.setRebalanceBatchSize(parseInt(env.REBAL_BATCH));
        if (env.REBAL_PREFETCH) cfg.setRebalanceBatchesPrefetchCount(parseInt(env.REBAL_PREFETCH));
        if (env.REBAL_THROTTLE) cfg.setRebalanceThrottle(parseInt(env.REBAL_THROTTLE));
        if (env.REBAL_TX) cfg.setAtomicityMode(CacheConfiguration.CACHE_ATOMICITY_MODE.TRANSACTIONAL);
        const cache = (await cl.getOrCreateCache(name, cfg)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
        // A put that fails (not acknowledged) is retried, as an application
        // would: a FULL_SYNC write can time out while a topology changes.
        let acked = 0, failed = 0, retried = 0;
        for (let k = parseInt(b); k < parseInt(c); k++) {
            for (let tries = 0; ; tries++) {
                try { await cache.put(k, 'v' + k); acked++; break; } catch (e) {
                    if (tries === 3) { failed++; console.error('put ' + k + ': ' + e.message); break; }
                    retried++;
                }
            }
        }
        console.log(`acked ${acked} failed ${failed}` + (retried ? ` retried ${retried}` : ''));
    } else {
        const cache = cl.getCache(name).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
        let ok = 0, missing = 0, wrong = 0, err = '';
        for (let k = parseInt(a); k < parseInt(b); k++) {
            try {
                const v = await cache.get(k);
                if (v === null) missing++; else if (v !== 'v' + k) wrong++; else ok++;
            } catch (e) { missing++; err = e.message; }
        }
        console.log(`ok ${ok} missing ${missing} wrong ${wrong}${err ? ' (' + err + ')' : ''}`);
    }
    cl.disconnect();
})().catch(e => { console.error('ERR ' + e.message); process.exit(1); });
