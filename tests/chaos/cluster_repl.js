// cluster_repl.js - replication through the real Node.js client
// (apache-ignite-client) on a 3-node cluster.
//
//   node cluster_repl.js ops N host:port host:port host:port
//     For PARTITIONED caches with 1 and 2 backups and a REPLICATED cache,
//     each in FULL_SYNC, PRIMARY_SYNC and FULL_ASYNC: every key-value op
//     through a node that is not the key's primary, then N puts; every
//     owner holds each key (CACHE_LOCAL_PEEK on each node: at once after
//     FULL_SYNC, eventually for the others) and GET_SIZE counts the copies
//     per peek mode.
//   node cluster_repl.js write FILE SECONDS host:port...
//     Puts keys 0, 1, ... through the first endpoint for SECONDS, retrying a
//     key until a put of it is acknowledged; appends each acknowledged key
//     to FILE (the cache "repl-kill": PARTITIONED, 2 backups, FULL_SYNC),
//     and every call to FILE.history: "key ok|fail|unknown start_ms end_ms
//     message" (unknown: the connection was lost or the server said the
//     write may or may not have run).  With WRITE_STOP set, it also stops
//     (after the key in hand) once that file exists.  WRITE_CACHE and
//     WRITE_BACKUPS name another cache and its backups (write and check).
//   node cluster_repl.js check FILE host:port...
//     Reads every key FILE lists through each endpoint; then sums up
//     FILE.history and reads the keys whose calls were unknown (present or
//     absent: either is allowed).
// Prints "ok ..." lines and exits non-zero on the first failure.
'use strict';
const fs = require('fs');
const path = require('path');
const IgniteClient = require(path.join(__dirname, '../node/node_modules/apache-ignite-client'));
const { IgniteClientConfiguration, ObjectType, CacheConfiguration, CacheClient, CacheEntry } = IgniteClient;
const INT = ObjectType.PRIMITIVE_TYPE.INTEGER;
const SYNC = CacheConfiguration.WRITE_SYNCHRONIZATION_MODE;
const MODE = CacheConfiguration.CACHE_MODE;
const KILL_CACHE = process.env.WRITE_CACHE || 'repl-kill';
const KILL_BACKUPS = Number(process.env.WRITE_BACKUPS || 2);
const PEEK = CacheClient.PEEK_MODE;

async function open(ep) {
    const c = new IgniteClient();
    await c.connect(new IgniteClientConfiguration(ep));
    return c;
}

// localPeek: CACHE_LOCAL_PEEK (op 1021), which the Node client does not
// wrap; built on its own request writer so the bytes are a client's.
async function localPeek(cache, key, modes) {
    let v = null;
    await cache._communicator.send(1021,
        async (p) => {
            cache._writeCacheInfo(p);
            await cache._communicator.writeObject(p, key, cache._getKeyType());
            p.writeInteger(modes.length);
            for (const m of modes) p.writeByte(m);
        },
        async (p) => { v = await cache._communicator.readObject(p, cache._getValueType()); });
    return v;
}

function eq(got, want, what) {
    if (got !== want) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

async function until(fn, what, ms = 20000) {
    const end = Date.now() + ms;
    for (;;) {
        const r = await fn();
        if (r === true) return;
        if (Date.now() > end) throw new Error(`${what}: ${r}`);
        await new Promise((res) => setTimeout(res, 50));
    }
}

async function ops(n, eps) {
    const cl = [];
    for (const ep of eps) cl.push(await open(ep));
    const kinds = [['PARTITIONED backups 1', MODE.PARTITIONED, 1, 2],
                   ['PARTITIONED backups 2', MODE.PARTITIONED, 2, 3],
                   ['REPLICATED', MODE.REPLICATED, 0, 3]];
    const syncs = [['FULL_SYNC', SYNC.FULL_SYNC], ['PRIMARY_SYNC', SYNC.PRIMARY_SYNC],
                   ['FULL_ASYNC', SYNC.FULL_ASYNC]];
    for (const [kname, mode, backups, copies] of kinds) {
        for (const [sname, sync] of syncs) {
            const name = `repl-${mode}-${backups}-${sync}-${process.pid}`;
            const cfg = new CacheConfiguration().setCacheMode(mode).setBackups(backups)
                .setWriteSynchronizationMode(sync);
            await cl[0].createCache(name, cfg);
            const c = [];
            for (const x of cl) c.push((await x.getCache(name)).setKeyType(INT));
            // Every op, each through a different node than the one before.
            const at = (i) => c[i % c.length];
            const k = 1000001;
            await at(0).put(k, 'a');
            // Only FULL_SYNC promises that every copy has a write before the
            // reply; a cache that reads from backups (REPLICATED does) may
            // answer from a copy that has not applied it yet (as Ignite's).
            if (sync === SYNC.FULL_SYNC)
                eq(await at(1).get(k), 'a', `${kname} ${sname} get`);
            else
                await until(async () => (await at(1).get(k)) === 'a' || 'not yet',
                              `${kname} ${sname} get`);
            eq(await at(2).putIfAbsent(k, 'x'), false, 'putIfAbsent on a present key');
            eq(await at(0).getAndPut(k, 'b'), 'a', 'getAndPut');
            eq(await at(1).getAndReplace(k, 'c'), 'b', 'getAndReplace');
            eq(await at(2).replace(k, 'd'), true, 'replace');
            eq(await at(0).replaceIfEquals(k, 'd', 'e'), true, 'replaceIfEquals');
            eq(await at(1).replaceIfEquals(k, 'zz', 'f'), false, 'replaceIfEquals (no match)');
            eq(await at(2).containsKey(k), true, 'containsKey');
            eq(await at(0).removeIfEquals(k, 'zz'), false, 'removeIfEquals (no match)');
            eq(await at(1).removeIfEquals(k, 'e'), true, 'removeIfEquals');
            eq(await at(2).getAndPutIfAbsent(k, 'g'), null, 'getAndPutIfAbsent');
            eq(await at(0).getAndRemove(k), 'g', 'getAndRemove');
            eq(await at(1).removeKey(k), false, 'removeKey (absent)');
            await at(2).put(k, 'h');
            await at(0).clearKey(k);
            if (sync === SYNC.FULL_SYNC)
                eq(await at(1).get(k), null, 'clearKey');
            else
                await until(async () => (await at(1).get(k)) === null || 'not yet', 'clearKey');
            // The conditional ops' outcomes reached every owner.
            if (sync === SYNC.FULL_SYNC) {
                let held = 0;
                for (const x of c) if (await localPeek(x, k, [PEEK.ALL]) !== null) held++;
                eq(held, 0, 'copies of a cleared key');
            }
            // Batches across owners: split per primary, replies merged.
            const bk = [2000001, 2000002, 2000003, 2000004, 2000005, 2000006, 2000007, 2000008];
            await at(0).putAll(bk.map((x) => new CacheEntry(x, 'b' + x)));
            // (Read from copies: only FULL_SYNC has them all before the reply.)
            let got = await at(1).getAll(bk.concat([2999999]));
            if (sync !== SYNC.FULL_SYNC)
                await until(async () => (got = await at(1).getAll(bk.concat([2999999]))).length ===
                                        bk.length || 'not yet', 'getAll across owners');
            eq(got.length, bk.length, 'getAll across owners: entries');
            for (const e of got) eq(e.getValue(), 'b' + e.getKey(), 'getAll value');
            // at(2) may read its own copies (readFromBackup), a step behind
            // at(1)'s unless FULL_SYNC.
            if (sync === SYNC.FULL_SYNC)
                eq(await at(2).containsKeys(bk), true, 'containsKeys across owners');
            else
                await until(async () => (await at(2).containsKeys(bk)) || 'not yet',
                            `${kname} ${sname} containsKeys across owners`);
            eq(await at(0).containsKeys(bk.concat([2999999])), false, 'containsKeys with a missing key');
            await at(1).removeKeys(bk.slice(0, 4));
            await at(2).clearKeys(bk.slice(4));
            // A read may be served by a backup (readFromBackup): after
            // PRIMARY_SYNC / FULL_ASYNC writes it sees them once they land.
            const gone = async () => (await at(0).getAll(bk)).length === 0 || 'keys still read';
            if (sync === SYNC.FULL_SYNC) eq(await gone(), true, 'removeKeys/clearKeys across owners');
            else await until(gone, 'removeKeys/clearKeys across owners');
            // N puts, then the copies.
            for (let i = 0; i < n; i++) await at(i).put(i, 'v' + i);
            const count = async () => {
                for (let i = 0; i < n; i++) {
                    let held = 0;
                    for (const x of c) if (await localPeek(x, i, [PEEK.ALL]) === 'v' + i) held++;
                    if (held !== copies) return `key ${i} held by ${held} nodes, want ${copies}`;
                }
                return true;
            };
            if (sync === SYNC.FULL_SYNC) {
                const r = await count();
                if (r !== true) throw new Error(`${kname} ${sname}: ${r}`);
            } else {
                await until(count, `${kname} ${sname}`);
            }
            eq(await c[0].getSize(), n, `${kname} ${sname} size`);
            eq(await c[1].getSize(PEEK.PRIMARY), n, 'size PRIMARY');
            eq(await c[2].getSize(PEEK.BACKUP), n * (copies - 1), 'size BACKUP');
            eq(await c[0].getSize(PEEK.ALL), n * copies, 'size ALL');
            for (let i = 0; i < n; i += 7) eq(await at(i + 1).get(i), 'v' + i, 'get after puts');
            // A remove reaches every copy as well.
            await at(1).removeKey(0);
            await until(async () => {
                for (const x of c) if (await localPeek(x, 0, [PEEK.ALL]) !== null) return 'still held';
                return true;
            }, 'remove on every copy');
            // Whole-cache removeAll and clear through one node reach every
            // member's copies (each asked at once), seen through the others.
            const empty = async () => {
                for (const x of c) if (await x.getSize(PEEK.ALL) !== 0) return 'copies left';
                return true;
            };
            await c[1].removeAll();
            if (sync === SYNC.FULL_SYNC) eq(await empty(), true, 'removeAll on every member');
            else await until(empty, `${kname} ${sname} removeAll on every member`);
            for (let i = 0; i < 40; i++) await at(i).put(i, 'c' + i);
            await until(async () => (await c[0].getSize()) === 40 || 'not yet', 'puts before clear');
            await c[2].clear();
            await until(empty, `${kname} ${sname} clear on every member`);
            await cl[0].destroyCache(name);
            console.log(`ok ${kname} ${sname}: every op, ${n} keys on ${copies} owners each, sizes by peek mode, removeAll and clear everywhere`);
        }
    }
    for (const x of cl) x.disconnect();
}

async function write(file, seconds, eps) {
    const c = await open(eps[0]);
    const cfg = new CacheConfiguration().setCacheMode(MODE.PARTITIONED).setBackups(KILL_BACKUPS)
        .setWriteSynchronizationMode(SYNC.FULL_SYNC);
    const cache = (await c.getOrCreateCache(KILL_CACHE, cfg)).setKeyType(INT);
    const fd = fs.openSync(file, 'a');
    const hist = fs.openSync(file + '.history', 'a');
    const end = Date.now() + seconds * 1000;
    const stop = process.env.WRITE_STOP;
    let acked = 0, failed = 0;
    for (let k = 0; Date.now() < end && !(stop && fs.existsSync(stop)); k++) {
        for (;;) {
            const t0 = Date.now();
            try {
                await cache.put(k, 'w' + k);
                fs.writeSync(hist, `${k} ok ${t0} ${Date.now()}\n`);
                fs.writeSync(fd, k + '\n');
                acked++;
                break;
            } catch (e) {
                const msg = String(e.message).replace(/\s+/g, ' ');
                fs.writeSync(hist, `${k} ${unknown(e) ? 'unknown' : 'fail'} ${t0} ${Date.now()} ${msg}\n`);
                if (failed++ < 5) console.log(`retry key ${k}: ${e.message}`);
                if (Date.now() > end + 30000) throw new Error('no write acknowledged for 30 s: ' + e.message);
                await new Promise((res) => setTimeout(res, 20));
            }
        }
    }
    fs.closeSync(fd);
    fs.closeSync(hist);
    console.log(`ok ${acked} writes acknowledged (${failed} attempts failed and were retried)`);
    c.disconnect();
}

// unknown: an error after which the write may or may not have run - the
// connection lost, or the server saying so - rather than one it refused.
function unknown(e) {
    const m = String(e && e.message);
    return e instanceof IgniteClient.Errors.LostConnectionError ||
        /may or may not|did not answer|connection|closed|timed? ?out/i.test(m);
}

// getRetried: a read that a node refuses for now - cut off from the
// metadata group's majority for a moment ("no lease", a loaded machine's
// late heartbeats), an owner changing - is asked again, for 30 s at most:
// an application would retry it, and the check is about what is stored.
async function getRetried(cache, k) {
    for (let i = 0; ; i++) {
        try {
            return await cache.get(k);
        } catch (e) {
            if (i >= 300 || !/no lease|is changing|No node owns/.test(String(e && e.message)))
                throw e;
            await new Promise((r) => setTimeout(r, 100));
        }
    }
}

async function check(file, eps) {
    const keys = fs.readFileSync(file, 'utf8').split('\n').filter((s) => s).map(Number);
    for (const ep of eps) {
        const c = await open(ep);
        const cache = (await c.getCache(KILL_CACHE)).setKeyType(INT);
        let bad = 0;
        for (const k of keys) {
            const v = await getRetried(cache, k);
            if (v !== 'w' + k && bad++ < 5) {
                const peeks = [];
                for (const e2 of eps) {
                    const c2 = await open(e2);
                    const x = (await c2.getCache(KILL_CACHE)).setKeyType(INT);
                    peeks.push(`${e2}: ${await localPeek(x, k, [PEEK.ALL])}`);
                    c2.disconnect();
                }
                console.log(`FAIL key ${k} through ${ep}: ${v} (local copies: ${peeks.join(', ')})`);
            }
        }
        if (bad) throw new Error(`${bad} of ${keys.length} acknowledged keys lost through ${ep}`);
        console.log(`ok all ${keys.length} acknowledged keys read through ${ep}`);
        c.disconnect();
    }
    // The history: every call's outcome; an unknown one may have written.
    const rows = fs.readFileSync(file + '.history', 'utf8').split('\n').filter((l) => l)
        .map((l) => l.split(' '));
    const n = { ok: 0, fail: 0, unknown: 0 };
    const unk = new Set();
    for (const r of rows) {
        n[r[1]]++;
        if (r[1] === 'unknown') unk.add(Number(r[0]));
    }
    if (n.ok !== keys.length)
        throw new Error(`history has ${n.ok} acknowledged calls, the acknowledged list ${keys.length}`);
    const c = await open(eps[0]);
    const cache = (await c.getCache(KILL_CACHE)).setKeyType(INT);
    let present = 0;
    for (const k of unk)
        if ((await getRetried(cache, k)) === 'w' + k) present++;
    c.disconnect();
    console.log(`ok history: ${rows.length} calls: ${n.ok} acknowledged, ${n.fail} failed, ` +
                `${n.unknown} unknown (of their keys ${present} present, ${unk.size - present} absent)`);
}

// memStats: emberd's counting-allocator totals (private op 32000, emberd
// --debug-ops): allocations and bytes summed over its threads.
async function memStats(cache) {
    const m = {};
    await cache._communicator.send(32000, async () => {}, async (p) => {
        m.allocs = p.readLong().toNumber();
        m.bytes = p.readLong().toNumber();
    });
    return m;
}

// metric(ep, name): a counter from the node's /metrics (HTTP on port 8080 of
// its address), for saying what else happened when a check fails.
function metric(ep, name) {
    return new Promise((res) => {
        require('http').get(`http://${ep.split(':')[0]}:8080/metrics`, (r) => {
            let body = '';
            r.on('data', (d) => { body += d; });
            r.on('end', () => {
                const line = body.split('\n').find((l) => l.startsWith(name + ' '));
                res(line ? Number(line.split(' ')[1]) : NaN);
            });
        }).on('error', () => res(NaN));
    });
}

// alloc N SIZE eps: N overwrites of SIZE-byte values on a FULL_SYNC cache
// with 2 backups, spread over every endpoint (so each node is near, primary
// and backup), after a warm-up: allocations and bytes per node.
async function alloc(n, size, eps) {
    const cl = [];
    for (const ep of eps) cl.push(await open(ep));
    const cfg = new CacheConfiguration().setCacheMode(MODE.PARTITIONED).setBackups(2)
        .setWriteSynchronizationMode(SYNC.FULL_SYNC);
    await cl[0].getOrCreateCache('repl-alloc', cfg);
    const c = [];
    for (const x of cl) c.push((await x.getCache('repl-alloc')).setKeyType(INT));
    const keys = 256;
    const val = (i) => String.fromCharCode(97 + (i % 26)).repeat(size);
    for (let r = 0; r < 6; r++)
        for (let i = 0; i < keys; i++) await c[(i + r) % c.length].put(i, val(i + r));
    const before = [], resent = [], opened = [];
    for (const x of c) before.push(await memStats(x));
    for (const ep of eps) resent.push(await metric(ep, 'ember_repl_resent'));
    for (const ep of eps) opened.push(await metric(ep, 'ember_cluster_links_opened'));
    for (let i = 0; i < n; i++) await c[i % c.length].put(i % keys, val(i));
    await new Promise((res) => setTimeout(res, 300));   /* loops publish their counters per pass */
    let bad = 0;
    const rows = [];
    for (let j = 0; j < c.length; j++) {
        const m = await memStats(c[j]);
        const da = m.allocs - before[j].allocs, db = m.bytes - before[j].bytes;
        const rs = (await metric(eps[j], 'ember_repl_resent')) - resent[j];
        const lo = (await metric(eps[j], 'ember_cluster_links_opened')) - opened[j];
        rows.push(`${eps[j]} ${da} allocs ${db} B` +
                  (da || db ? ` (${rs} windows resent, ${lo} links opened)` : ''));
        if (da || db) bad++;
    }
    console.log(`${bad ? 'FAIL' : 'ok'} ${n} replicated ${size} B overwrites (FULL_SYNC, 2 backups): ${rows.join('; ')}`);
    for (const x of cl) x.disconnect();
    if (bad) process.exit(1);
}

// create NAME ep: a PARTITIONED cache with 2 backups in FULL_SYNC (the M5
// benchmark's).  mem ep...: "allocs bytes" summed over the endpoints' nodes.
async function create(name, ep) {
    const c = await open(ep);
    await c.getOrCreateCache(name, new CacheConfiguration().setCacheMode(MODE.PARTITIONED)
        .setBackups(2).setWriteSynchronizationMode(SYNC.FULL_SYNC));
    c.disconnect();
}

async function mem(eps) {
    let allocs = 0, bytes = 0;
    for (const ep of eps) {
        const c = await open(ep);
        const m = await memStats(await c.getOrCreateCache('repl-mem'));
        allocs += m.allocs;
        bytes += m.bytes;
        c.disconnect();
    }
    console.log(`${allocs} ${bytes}`);
}

// expiry eps: a FULL_SYNC cache with 2 backups and a cache-wide expiry
// policy (created for 1500 ms; property 407, which the Node client does not
// set, so CACHE_CREATE_WITH_CONFIGURATION is built here): every copy holds a
// fresh key, and every copy - backups included - lets it expire, because
// the replicated record carries the deadline.
async function expiry(eps) {
    const cl = [];
    for (const ep of eps) cl.push(await open(ep));
    const name = 'repl-expiry-' + process.pid;
    const nameBuf = Buffer.from(name, 'utf8');
    const props = [];
    const i16 = (v) => { const b = Buffer.alloc(2); b.writeInt16LE(v); return b; };
    const i32 = (v) => { const b = Buffer.alloc(4); b.writeInt32LE(v); return b; };
    const i64 = (v) => { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(v)); return b; };
    props.push(Buffer.concat([i16(0), Buffer.from([9]), i32(nameBuf.length), nameBuf]));
    props.push(Buffer.concat([i16(1), i32(MODE.PARTITIONED)]));
    props.push(Buffer.concat([i16(3), i32(2)]));
    props.push(Buffer.concat([i16(4), i32(SYNC.FULL_SYNC)]));
    props.push(Buffer.concat([i16(407), Buffer.from([1]), i64(1500), i64(1500), i64(-2)]));
    const body = Buffer.concat([i16(props.length), ...props]);
    const cfgBytes = Buffer.concat([i32(body.length), body]);
    const any = (await cl[0].getOrCreateCache('repl-mem'));
    await any._communicator.send(1053, async (p) => { p.writeBuffer(cfgBytes); }, null);
    const c = [];
    for (const x of cl) c.push((await x.getCache(name)).setKeyType(INT));
    for (let i = 0; i < 30; i++) await c[i % c.length].put(i, 'e' + i);
    for (let i = 0; i < 30; i++) {
        let held = 0;
        for (const x of c) if (await localPeek(x, i, [PEEK.ALL]) === 'e' + i) held++;
        eq(held, 3, `copies of fresh key ${i}`);
    }
    await until(async () => {
        for (let i = 0; i < 30; i++)
            for (const x of c) if (await localPeek(x, i, [PEEK.ALL]) !== null) return `key ${i} still held`;
        return true;
    }, 'expiry on every copy', 15000);
    await cl[0].destroyCache(name);
    console.log('ok expiry replicates: 30 keys on 3 owners each, then expired on every copy');
    for (const x of cl) x.disconnect();
}

// object put|get EP: a complex object of a binary type registered through
// EP (put), read by its fields through EP by a fresh client (get) - which
// needs EP to know the cache and the type.
async function object(what, ep) {
    const { ComplexObjectType } = IgniteClient;
    const c = await open(ep);
    const cache = (await c.getOrCreateCache('repl-objects', new CacheConfiguration()
        .setCacheMode(MODE.PARTITIONED).setBackups(2)
        .setWriteSynchronizationMode(SYNC.FULL_SYNC))).setKeyType(INT);
    if (what === 'put') {
        const t = new ComplexObjectType({ id: 0, owner: '', balance: 0.0 }, 'ReplRestartAccount')
            .setFieldType('id', INT).setFieldType('balance', ObjectType.PRIMITIVE_TYPE.DOUBLE);
        await cache.setValueType(t).put(1, { id: 7, owner: 'ada', balance: 12.5 });
    } else {
        const o = await cache.get(1);
        const got = o && [await o.getField('id'), await o.getField('owner'), await o.getField('balance')];
        if (!got || got[0] !== 7 || got[1] !== 'ada' || got[2] !== 12.5)
            throw new Error(`object through ${ep}: ${JSON.stringify(got)}`);
        console.log(`ok the object and its binary type are read by their fields through ${ep}`);
    }
    c.disconnect();
}

const [cmd, ...a] = process.argv.slice(2);
const run = cmd === 'expiry' ? expiry(a)
    : cmd === 'object' ? object(a[0], a[1])
    : cmd === 'create' ? create(a[0], a[1])
    : cmd === 'mem' ? mem(a)
    : cmd === 'alloc' ? alloc(parseInt(a[0], 10), parseInt(a[1], 10), a.slice(2))
    : cmd === 'ops' ? ops(parseInt(a[0], 10), a.slice(1))
    : cmd === 'write' ? write(a[0], parseFloat(a[1]), a.slice(2))
    : check(a[0], a.slice(1));
run.catch((e) => { console.log('FAIL ' + (e && e.message)); process.exit(1); });
