// cluster_dirty.js - the Node.js client's side of cluster_dirty.sh.
//   getall ADDR CACHE KEY...   getAll of the int keys: prints "got K=V ..."
//                              (sorted by key), or "error MESSAGE"
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType } = IgniteClient;

(async () => {
    const [mode, addr, name, ...keys] = process.argv.slice(2);
    const cl = new IgniteClient();
    await cl.connect(new IgniteClientConfiguration(addr));
    try {
        if (mode !== 'getall')
            throw new Error('usage: getall ADDR CACHE KEY...');
        const cache = cl.getCache(name).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER)
            .setValueType(ObjectType.PRIMITIVE_TYPE.INTEGER);
        const got = await cache.getAll(keys.map((k) => parseInt(k)));
        got.sort((x, y) => x.getKey() - y.getKey());
        console.log('got ' + got.map((e) => e.getKey() + '=' + e.getValue()).join(' '));
    } catch (e) {
        console.log('error ' + e.message);
    } finally {
        cl.disconnect();
    }
})();
