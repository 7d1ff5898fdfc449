// cluster_kv.js - the real Node.js client (apache-ignite-client) against a
// cluster: create a cache through the first endpoint, put N keys through
// the second, read every one back through the third, and compare sizes;
// a binary type registered through the first is read through the others.
// Usage: node cluster_kv.js N host:port host:port host:port
// Prints "ok ..." lines and exits non-zero on the first mismatch.
'use strict';
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType, ComplexObjectType } = IgniteClient;

async function open(ep) {
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(ep));
    return c;
}

async function main() {
    const [n, a, b, c] = [parseInt(process.argv[2], 10), ...process.argv.slice(3)];
    const ca = await open(a), cb = await open(b), cc = await open(c);
    const name = 'cluster-kv-' + process.pid;
    await ca.createCache(name);
    const put = (await cb.getCache(name)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
    const get = (await cc.getCache(name)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
    for (let i = 0; i < n; i++) await put.put(i, 'value-' + i);
    console.log(`ok put ${n} keys through ${b}`);
    let bad = 0;
    for (let i = 0; i < n; i++) {
        const v = await get.get(i);
        if (v !== 'value-' + i && bad++ < 5) console.log(`FAIL key ${i}: got ${v}`);
    }
    if (bad) throw new Error(`${bad} of ${n} keys read wrong through ${c}`);
    console.log(`ok read ${n} keys back through ${c}`);
    for (const [ep, cl] of [[a, ca], [b, cb], [c, cc]]) {
        const s = await (await cl.getCache(name)).getSize();
        if (s !== n) throw new Error(`size through ${ep} is ${s}, want ${n}`);
    }
    console.log(`ok every node reports size ${n}`);
    const rm = (await ca.getCache(name)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
    for (let i = 0; i < 10; i++) await rm.removeKey(i);
    if (await get.get(3) !== null) throw new Error('a removed key is still read through ' + c);
    console.log('ok removes through one node are seen through another');
    // A binary type registered through one node (PUT_BINARY_TYPE with the
    // first put of a complex object) is known through the others: fresh
    // clients on nodes 2 and 3 read the object by its fields.
    const acct = new ComplexObjectType({ id: 0, owner: '', balance: 0.0 }, 'ClusterKvAccount' + process.pid)
        .setFieldType('id', ObjectType.PRIMITIVE_TYPE.INTEGER)
        .setFieldType('balance', ObjectType.PRIMITIVE_TYPE.DOUBLE);
    const w = (await ca.getCache(name)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER).setValueType(acct);
    await w.put(900001, { id: 7, owner: 'ada', balance: 12.5 });
    for (const ep of [b, c]) {
        const fresh = await open(ep);
        const o = await (await fresh.getCache(name)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER)
            .get(900001);
        const got = [await o.getField('id'), await o.getField('owner'), await o.getField('balance')];
        if (got[0] !== 7 || got[1] !== 'ada' || got[2] !== 12.5)
            throw new Error(`binary object through ${ep}: ${JSON.stringify(got)}`);
        fresh.disconnect();
    }
    console.log(`ok a binary type registered through ${a} is read by its fields through ${b} and ${c}`);
    await ca.destroyCache(name);
    for (const cl of [ca, cb, cc]) cl.disconnect();
}

main().catch((e) => { console.log('FAIL ' + (e && e.message)); process.exit(1); });
