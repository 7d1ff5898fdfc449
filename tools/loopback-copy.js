// loopback-copy.js BYTES - the floor for moving BYTES between two processes'
// sockets here: one TCP connection on 127.0.0.1, 64 KiB writes, the
// receiver counting.  Prints "ms" from the first write to the last byte
// received.  tools/rebal-bench.sh sets rebalancing's MB/s beside it.
'use strict';
const net = require('net');
const total = parseInt(process.argv[2]);
const chunk = Buffer.alloc(64 << 10, 0x5a);
let got = 0, t0 = 0;
const srv = net.createServer((s) => {
    s.on('data', (d) => {
        got += d.length;
        if (got >= total) {
            console.log(`${Date.now() - t0}`);
            s.destroy();
            srv.close();
        }
    });
});
srv.listen(0, '127.0.0.1', () => {
    const c = net.connect(srv.address().port, '127.0.0.1', () => {
        t0 = Date.now();
        let sent = 0;
        const pump = () => {
            while (sent < total) {
                const n = Math.min(chunk.length, total - sent);
                sent += n;
                if (!c.write(n === chunk.length ? chunk : chunk.subarray(0, n)))
                    return c.once('drain', pump);
            }
            c.end();
        };
        pump();
    });
    c.on('error', () => {});
});
