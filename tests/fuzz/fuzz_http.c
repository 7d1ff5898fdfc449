/* fuzz_http.c - libFuzzer target for the /metrics endpoint's request parser
 * (src/server/http.c): the bytes arrive in chunks as conn_read would get them,
 * the head terminator is searched incrementally the same way, then the
 * request line is parsed.  Checks: the incremental search agrees with a
 * search of the whole prefix, and the parse result is one of the documented
 * outcomes.  Seeds: tests/fuzz/corpus/fuzz_http/ (curl, Prometheus, malformed).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char in[SRV_HTTP_MAX_REQUEST];
    size_t inlen = 0, pos = 0;
    size_t chunk = 1 + size % 61;   /* varied split points, deterministic */
    int done = 0;
    while (pos < size && !done) {
        size_t room = sizeof in - inlen;
        if (room == 0)
            return 0;               /* the server answers 431 here */
        size_t n = size - pos < chunk ? size - pos : chunk;
        if (n > room)
            n = room;
        size_t scanned_from = inlen > 3 ? inlen - 3 : 0;
        memcpy(in + inlen, data + pos, n);
        inlen += n;
        pos += n;
        size_t inc = srv_http_head_end(in + scanned_from, inlen - scanned_from);
        size_t whole = srv_http_head_end(in, inlen);
        if ((inc != 0) != (whole != 0) || whole > inlen)
            abort();                /* incremental search missed or invented an end */
        if (whole && (in[whole - 1] != '\n' || whole < 2))
            abort();
        done = whole != 0;
    }
    if (!done)
        return 0;
    srv_http_req r;
    srv_http_parse(in, inlen, &r);
    if (r.status != 0 && r.status != 400 && r.status != 405)
        abort();
    if (r.status == 0 && r.route != SRV_HTTP_OTHER && r.route != SRV_HTTP_HEALTH &&
        r.route != SRV_HTTP_METRICS && r.route != SRV_HTTP_ROOT &&
        r.route != SRV_HTTP_API_CLUSTER && r.route != SRV_HTTP_API_NODE)
        abort();
    if (r.status == 0 && !r.head && memcmp(in, "GET ", 4) != 0)
        abort();                    /* only GET and HEAD are routed */
    return 0;
}
