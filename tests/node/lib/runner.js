// runner.js - a tiny sequential test runner for ember's Node.js client tests.
//
// test(name, fn) registers an async test; run() executes them in order, each
// with a 30 s timeout, prints "ok  name" or "FAIL name" plus the error, and
// returns {passed, failed}.  Helpers open clients of apache-ignite-client@1.0.0
// against the emberd started by run.sh (port in EMBER_PORT).
'use strict';

const assert = require('node:assert/strict');
const IgniteClient = require('apache-ignite-client');
const { IgniteClientConfiguration, Decimal, Timestamp, EnumItem, BinaryObject } = IgniteClient;

const tests = [];

function test(name, fn) {
    tests.push({ name, fn });
}

const opened = new Set();

// connect returns a connected IgniteClient; run() disconnects leftovers.
async function connect() {
    const client = new IgniteClient();
    await client.connect(new IgniteClientConfiguration('127.0.0.1:' + process.env.EMBER_PORT));
    opened.add(client);
    return client;
}

function disconnect(client) {
    opened.delete(client);
    client.disconnect();
}

let uniq = 0;
// cacheName gives each test its own cache so tests stay independent.
function cacheName(prefix) {
    uniq++;
    return prefix + '_' + process.pid + '_' + uniq;
}

// norm turns client values into plain data that deepStrictEqual can compare:
// Decimal, Date, Timestamp, EnumItem, Set and Map have no useful own fields.
function norm(v) {
    if (v === null || v === undefined) return null;
    if (Decimal.isDecimal && Decimal.isDecimal(v)) return { decimal: v.toFixed() };
    if (v instanceof Decimal) return { decimal: v.toFixed() };
    if (v instanceof Timestamp) return { ts: v.getTime(), nanos: v.getNanos() };
    if (v instanceof Date) return { date: v.getTime() };
    if (v instanceof EnumItem) return { enumType: v.getTypeId(), ordinal: v.getOrdinal() };
    if (v instanceof BinaryObject) throw new Error('norm: BinaryObject must be compared field by field');
    if (v instanceof Set) return { set: [...v].map(norm).sort(cmpJson) };
    if (v instanceof Map) return { map: [...v.entries()].map(([k, x]) => [norm(k), norm(x)]).sort(cmpJson) };
    if (Array.isArray(v)) return v.map(norm);
    if (Buffer.isBuffer(v)) return [...v];
    if (typeof v === 'object') {
        const o = {};
        for (const k of Object.keys(v).sort()) o[k] = norm(v[k]);
        return o;
    }
    return v;
}

function cmpJson(a, b) {
    const x = JSON.stringify(a), y = JSON.stringify(b);
    return x < y ? -1 : x > y ? 1 : 0;
}

function assertSame(got, want, what) {
    assert.deepStrictEqual(norm(got), norm(want), what);
}

// expectOperationError: fn must reject with Errors.OperationError.
async function expectOperationError(fn, what) {
    let err = null;
    try {
        await fn();
    } catch (e) {
        err = e;
    }
    assert.ok(err, (what || 'operation') + ': expected an OperationError, got success');
    assert.ok(err instanceof IgniteClient.Errors.OperationError,
        (what || 'operation') + ': expected OperationError, got ' + (err && err.constructor.name) + ': ' + err.message);
    return err;
}

async function run(filter) {
    let passed = 0, failed = 0;
    for (const t of tests) {
        if (filter && !t.name.includes(filter)) continue;
        let timer;
        const timeout = new Promise((_, rej) => {
            timer = setTimeout(() => rej(new Error('timeout after 30 s')), 30000);
        });
        try {
            await Promise.race([t.fn(), timeout]);
            console.log('ok   ' + t.name);
            passed++;
        } catch (e) {
            console.log('FAIL ' + t.name);
            console.log('    ' + String(e && e.stack || e).split('\n').slice(0, 8).join('\n    '));
            failed++;
        } finally {
            clearTimeout(timer);
            for (const c of opened) c.disconnect();
            opened.clear();
        }
    }
    return { passed, failed };
}

module.exports = { test, run, connect, disconnect, cacheName, norm, assertSame, expectOperationError, assert };
