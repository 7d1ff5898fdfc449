// cluster_sql.js - SQL on a 3-node cluster through the real Node.js client
// (apache-ignite-client): CREATE TABLE through node 1 reaches every node;
// rows INSERTed through node 2 are read whole through node 3 (COUNT, SUM,
// ORDER BY ... LIMIT, a point SELECT by key, a GROUP BY), and through the
// key-value API of every node (so each row went to its owners, not to the
// node that ran the INSERT); UPDATE and DELETE through node 3 are seen
// through node 1; CREATE INDEX, ALTER TABLE and DROP INDEX made through one
// node are known to the others; DROP TABLE through node 2 removes the table
// everywhere.
// Usage: node cluster_sql.js ROWS host:port host:port host:port
//        node cluster_sql.js --fill TABLE ROWS host:port   (a table, backups=1)
//        node cluster_sql.js --count TABLE ROWS host:port  (all its rows read back)
//        node cluster_sql.js --counts TABLE ROWS SECONDS host:port  (the same, again
//             and again for SECONDS, while a test faults the cluster: every answer
//             exact, an error allowed, a wrong count never)
// Prints "ok ..." lines and exits non-zero on the first mismatch.
'use strict';
const path = require('path');
const assert = require('assert');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType, SqlFieldsQuery, CacheConfiguration } = IgniteClient;

async function open(ep) {
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(ep));
    return c;
}

async function rows(cache, sql, ...args) {
    const q = new SqlFieldsQuery(sql).setPageSize(100);
    if (args.length) q.setArgs(...args);
    return (await cache.query(q)).getAll();
}

/* fill / count: a table outliving this process, for a kill in between. */
async function fillOrCount(mode, t, n, ep) {
    const cl = await open(ep);
    const cache = await cl.getOrCreateCache('sqlq', new CacheConfiguration().setSqlSchema('PUBLIC'));
    if (mode === '--fill') {
        await rows(cache, `CREATE TABLE ${t} (id INT PRIMARY KEY, v INT) WITH "backups=1"`);
        const ins = new SqlFieldsQuery(`INSERT INTO ${t} (id, v) VALUES (?, ?)`);
        for (let i = 0; i < n; i++) await (await cache.query(ins.setArgs(i, i))).getAll();
        console.log(`ok ${n} rows in ${t} through ${ep}`);
    } else {
        const r = await rows(cache, `SELECT COUNT(*), SUM(v) FROM ${t}`);
        assert.deepStrictEqual([Number(r[0][0]), Number(r[0][1])], [n, (n - 1) * n / 2]);
        console.log(`ok all ${n} rows of ${t} read through ${ep}`);
    }
    cl.disconnect();
}

async function counts(t, n, secs, ep) {
    const cl = await open(ep);
    const cache = await cl.getOrCreateCache('sqlq', new CacheConfiguration().setSqlSchema('PUBLIC'));
    const end = Date.now() + secs * 1000;
    let exact = 0, refused = 0, first = '';
    while (Date.now() < end) {
        let r;
        try {
            r = await rows(cache, `SELECT COUNT(*), SUM(v) FROM ${t}`);
        } catch (e) {
            refused++;
            if (!first) first = String(e.message || e).split('\n')[0];
            continue;
        }
        assert.deepStrictEqual([Number(r[0][0]), Number(r[0][1])], [n, (n - 1) * n / 2],
                               `a wrong answer after ${exact} exact ones`);
        exact++;
    }
    cl.disconnect();
    console.log(`ok ${exact} answers exact, none wrong, ${refused} refused` +
                (first ? ` (first: ${first})` : ''));
}

async function main() {
    if (process.argv[2] === '--counts')
        return counts(process.argv[3], parseInt(process.argv[4], 10), parseInt(process.argv[5], 10),
                      process.argv[6]);
    if (process.argv[2].startsWith('--'))
        return fillOrCount(process.argv[2], process.argv[3], parseInt(process.argv[4], 10), process.argv[5]);
    const [n, a, b, c] = [parseInt(process.argv[2], 10), ...process.argv.slice(3)];
    const ca = await open(a), cb = await open(b), cc = await open(c);
    const cfg = new CacheConfiguration().setSqlSchema('PUBLIC');
    const [sa, sb, sc] = await Promise.all([ca, cb, cc].map((cl) => cl.getOrCreateCache('sqlq', cfg)));
    const t = 'city' + process.pid;
    const T = t.toUpperCase();
    await rows(sa, `CREATE TABLE ${t} (id INT PRIMARY KEY, name VARCHAR, pop INT, cc VARCHAR)
                    WITH "backups=1"`);
    console.log(`ok CREATE TABLE ${t} through ${a}`);
    const ins = new SqlFieldsQuery(`INSERT INTO ${t} (id, name, pop, cc) VALUES (?, ?, ?, ?)`);
    for (let i = 0; i < n; i++) {
        const r = await (await sb.query(ins.setArgs(i, 'c' + i, i * 10, ['US', 'RU', 'CN'][i % 3]))).getAll();
        assert.strictEqual(Number(r[0][0]), 1);
    }
    console.log(`ok INSERT ${n} rows through ${b}`);
    let dup = null;
    try { await (await sb.query(ins.setArgs(7, 'again', 1, 'US'))).getAll(); } catch (e) { dup = e.message; }
    assert.ok(dup && dup.includes('Duplicate key'), 'duplicate INSERT: ' + dup);
    console.log('ok a duplicate key fails the INSERT on a cluster too');
    const sum = (n - 1) * n / 2 * 10;
    let r = await rows(sc, `SELECT COUNT(*), SUM(pop) FROM ${t}`);
    assert.deepStrictEqual([Number(r[0][0]), Number(r[0][1])], [n, sum]);
    r = await rows(sc, `SELECT id FROM ${t} ORDER BY pop DESC LIMIT 3`);
    assert.deepStrictEqual(r.map((x) => x[0]), [n - 1, n - 2, n - 3]);
    r = await rows(sc, `SELECT name, pop FROM ${t} WHERE id = ?`, 42);
    assert.deepStrictEqual(r, [['c42', 420]]);
    r = await rows(sc, `SELECT cc, COUNT(*) FROM ${t} GROUP BY cc ORDER BY cc`);
    assert.strictEqual(r.reduce((s, x) => s + Number(x[1]), 0), n);
    console.log(`ok COUNT, SUM, ORDER BY LIMIT, a point SELECT and GROUP BY through ${c} see every row`);
    for (const [ep, cl] of [[a, ca], [b, cb], [c, cc]]) {
        const kv = (await cl.getCache('SQL_PUBLIC_' + T)).setKeyType(ObjectType.PRIMITIVE_TYPE.INTEGER);
        for (const id of [0, 1, 2, 42, n - 1]) {
            const v = await kv.get(id);
            const name = v && await v.getField('NAME');
            assert.strictEqual(name, 'c' + id, `key ${id} through ${ep}`);
        }
        assert.strictEqual(await kv.getSize(), n, 'size through ' + ep);
    }
    console.log('ok every node reads the rows through the key-value API (each on its owners)');
    r = await rows(sc, `UPDATE ${t} SET pop = pop + 1 WHERE id < 10`);
    assert.strictEqual(Number(r[0][0]), 10);
    r = await rows(sc, `DELETE FROM ${t} WHERE id >= ?`, n - 5);
    assert.strictEqual(Number(r[0][0]), 5);
    r = await rows(sa, `SELECT COUNT(*), SUM(pop) FROM ${t}`);
    let want = sum + 10;
    for (let i = n - 5; i < n; i++) want -= i * 10;
    assert.deepStrictEqual([Number(r[0][0]), Number(r[0][1])], [n - 5, want]);
    console.log(`ok UPDATE and DELETE through ${c} are seen through ${a}`);
    await rows(sb, `CREATE INDEX ${t}_pop ON ${t} (pop)`);
    let again = null;
    try { await rows(sc, `CREATE INDEX ${t}_pop ON ${t} (cc)`); } catch (e) { again = e.message; }
    assert.ok(again && again.includes('Index already exists'), 'CREATE INDEX again: ' + again);
    r = await rows(sc, `SELECT COUNT(*) FROM ${t} WHERE pop >= 100`);
    assert.strictEqual(Number(r[0][0]), n - 5 - 10);
    console.log(`ok CREATE INDEX through ${b} is known to ${c}, and queries stay whole`);
    await rows(sa, `ALTER TABLE ${t} ADD COLUMN area INT`);
    await rows(sb, `INSERT INTO ${t} (id, name, pop, cc, area) VALUES (?, ?, ?, ?, ?)`, n + 1, 'new', 5, 'US', 77);
    r = await rows(sc, `SELECT name, area FROM ${t} WHERE id IN (?, ?) ORDER BY id`, 1, n + 1);
    assert.deepStrictEqual(r, [['c1', null], ['new', 77]]);
    console.log(`ok ALTER TABLE through ${a}: ${b} writes the new column, ${c} reads it`);
    await rows(sc, `DROP INDEX ${t}_pop`);
    await rows(sa, `CREATE INDEX ${t}_pop ON ${t} (area)`);
    console.log('ok DROP INDEX through one node frees the name on another');
    // A cache configured with a QueryEntity through node 1 (its entity reaches
    // every node), filled by SQL INSERT through node 2, read through node 3.
    const { QueryEntity, QueryField } = IgniteClient;
    const qname = 'qe' + process.pid, vt = 'Pet' + process.pid;
    const qcfg = new CacheConfiguration().setSqlSchema('PUBLIC').setQueryEntities(
        new QueryEntity().setKeyTypeName('java.lang.Integer').setValueTypeName(vt).setFields([
            new QueryField('nick', 'java.lang.String'), new QueryField('age', 'java.lang.Integer')]));
    await ca.getOrCreateCache(qname, qcfg);
    const qb = await cb.getOrCreateCache(qname, qcfg), qc = await cc.getOrCreateCache(qname, qcfg);
    for (let i = 0; i < 20; i++)
        await rows(qb, `INSERT INTO ${vt} (_key, nick, age) VALUES (?, ?, ?)`, i, 'p' + i, i % 7);
    r = await rows(qc, `SELECT COUNT(*), SUM(age) FROM ${vt}`);
    let ages = 0;
    for (let i = 0; i < 20; i++) ages += i % 7;
    assert.deepStrictEqual([Number(r[0][0]), Number(r[0][1])], [20, ages]);
    console.log(`ok a QueryEntity table made through ${a}, filled by INSERT through ${b}, read through ${c}`);
    await rows(sb, `DROP TABLE ${t}`);
    let gone = null;
    try { await rows(sa, `SELECT COUNT(*) FROM ${t}`); } catch (e) { gone = e.message; }
    assert.ok(gone, 'the table is still there through ' + a);
    assert.ok(!(await ca.cacheNames()).includes('SQL_PUBLIC_' + T), 'the cache is still listed');
    console.log(`ok DROP TABLE through ${b} removes it on ${a}`);
    for (const cl of [ca, cb, cc]) cl.disconnect();
}

main().catch((e) => { console.log('FAIL ' + (e && e.stack || e)); process.exit(1); });
