// main.js - loads every test_*.js in this folder and runs them against the
// emberd whose port is in EMBER_PORT (run.sh starts it).  Optional argument:
// a substring filter on test names.  Last line: "N passed, N failed".
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { run } = require('./lib/runner');

for (const f of fs.readdirSync(__dirname).filter((n) => /^test_.*\.js$/.test(n)).sort()) {
    require(path.join(__dirname, f));
}

process.on('unhandledRejection', (e) => {
    console.log('unhandled rejection: ' + (e && e.stack || e));
});

run(process.argv[2]).then(({ passed, failed }) => {
    console.log(passed + ' passed, ' + failed + ' failed');
    process.exit(failed ? 1 : 0);
}, (e) => {
    console.log('runner crashed: ' + (e && e.stack || e));
    console.log('0 passed, 1 failed');
    process.exit(1);
});
