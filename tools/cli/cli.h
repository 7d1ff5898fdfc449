/* cli.h - ember-cli's private interfaces: one blocking thin-client connection
 * (plain TCP or TLS), the handshake, framed requests and replies, and typed
 * values in the Ignite binary format.  Wire layouts:
 * shared/reference/ignite-thin-protocol.md §1 (framing, handshake, headers,
 * status codes), §2.3-2.4 (ops), §3.1 (type codes).
 */
#ifndef CLI_H
#define CLI_H

#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

#define CLI_VER(a, b, c) ((a) * 10000 + (b) * 100 + (c))

/* Replies longer than this are refused: the CLI never asks for bulk data. */
#define CLI_MAX_FRAME (64u * 1024u * 1024u)

typedef struct cli_opts {
    const char *host;
    const char *port;
    const char *user;
    const char *password;
    int         tls;
    const char *ca;         /* CA file to verify the server with */
    const char *cert;       /* client certificate (mutual TLS) */
    const char *key;
    int         insecure;   /* skip server certificate verification */
    int         json;
    int         timeout_ms;
    int         ver;        /* requested protocol version (CLI_VER) */
    int         ver_pinned; /* --protocol given: never fall back */
    uint8_t     features;   /* feature bits 0-7 asked for at 1.7.0 */
} cli_opts;

/* Outcome of one call: a server status and its message, or a local failure. */
typedef struct cli_err {
    int  status;            /* server status code (reference §1.6), 0 if none */
    int  local;             /* 1 = connection/protocol error on our side */
    char msg[512];
} cli_err;

typedef struct cli_conn {
    int      fd;
    void    *ssl_ctx;       /* SSL_CTX*, NULL for plain TCP */
    void    *ssl;           /* SSL* */
    int      ver;           /* negotiated version (CLI_VER) */
    int64_t  rid;
    uint8_t  node_id[16];
    int      has_node_id;
    int      has_topo;      /* a reply carried AFFINITY_TOPOLOGY_CHANGED */
    int64_t  topo_major;    /* the last version a reply carried */
    int32_t  topo_minor;
    em_buf   out;
    em_buf   in;            /* body of the last frame read */
} cli_conn;

/* Return codes of the connection functions (besides 0). */
#define CLI_ESERVER 1       /* the server answered with an error status */
#define CLI_ELOCAL  2       /* usage, connection or malformed reply */

/* cli_open connects (TCP, then TLS if asked) and performs the handshake,
 * falling back once to the server's version if it names one we speak.
 * 0, CLI_ESERVER (handshake refused, e.g. AUTH_FAILED) or CLI_ELOCAL. */
int  cli_open(cli_conn *c, const cli_opts *o, cli_err *e);
void cli_close(cli_conn *c);

/* cli_call sends op + payload and reads the reply.  On 0, *p and *n hold the
 * payload (valid until the next call).  CLI_ESERVER fills e->status/msg. */
int  cli_call(cli_conn *c, int op, const em_buf *payload, const uint8_t **p,
              size_t *n, cli_err *e);

/* cli_report prints a failure (stderr, or JSON on stdout with --json) and
 * returns the exit code (1 server error, 2 local). */
int  cli_report(const cli_opts *o, int rc, const cli_err *e);

/* cli_cmd_cluster: `ember-cli cluster [CACHE]` (cli_cluster.c): the nodes
 * (CLUSTER_GROUP_GET_NODE_IDS / _INFO), topology version and state, and
 * with a cache the partitions each node owns (CACHE_PARTITIONS).  c must
 * be a 1.7.0 connection with features CLI_CLUSTER_FEATURES. */
#define CLI_CLUSTER_FEATURES 0x1c   /* CLUSTER_STATES, _GROUP_GET_NODES_ENDPOINTS, _GROUPS */
int  cli_cmd_cluster(cli_conn *c, const cli_opts *o, const char *cache);
/* cli_cmd_baseline: `cluster baseline [ACTION [IDS]]` (ember's BASELINE op). */
int  cli_cmd_baseline(cli_conn *c, const cli_opts *o, char **args, int nargs);

/* cli_cluster_nodes: every node's id, consistent id and first thin address
 * (CLUSTER_GROUP_GET_NODE_IDS / _INFO), for commands that ask each node.
 * 0 or an exit code (reported).  *out is em_free'd by the caller. */
typedef struct cli_node {
    uint8_t id[16];
    char    cid[256];
    char    host[256];
    int     port;
    int     local;
} cli_node;
int  cli_cluster_nodes(cli_conn *c, const cli_opts *o, cli_node **out, uint32_t *n);

/* cli_cmd_idle_verify: `ember-cli idle-verify [--save FILE] [--against FILE]
 * [CACHE...]` (cli_verify.c).  Exit 0 when every partition's owners agree,
 * 3 when some disagree (listed), 1/2 as the other commands. */
int  cli_cmd_idle_verify(cli_conn *c, const cli_opts *o, char **args, int nargs);
/* cli_cmd_corrupt: `ember-cli debug-corrupt CACHE PARTITION` (test hook;
 * the node must run with debug_ops). */
int  cli_cmd_corrupt(cli_conn *c, const cli_opts *o, const char *cache, const char *part);

/* cli_uuid_str formats 16 wire bytes (two LE longs, msb first) as text. */
void cli_uuid_str(const uint8_t u[16], char out[37]);

/* ---- values (cli_value.c) ---- */

/* cli_value_parse appends the data object for "int:5", "string:x", "x", ...
 * 0 or -1 with a message in err. */
int  cli_value_parse(const char *text, em_buf *out, char *err, size_t errlen);

/* cli_value_format renders one complete data object p[0..n) as text:
 * human ("int:5") or JSON ({"type":"int","value":5}).  Appends a NUL-
 * terminated string to out.  0, or -1 if the bytes are not one well-formed
 * object of exactly n bytes (message in err). */
int  cli_value_format(const uint8_t *p, size_t n, int json, em_buf *out,
                      char *err, size_t errlen);

/* cli_typed_string reads a typed string (9 or null 101) at p[*pos..n) and
 * checks bounds and UTF-8.  Sets *s and *len (*s NULL for null).  0 or -1. */
int  cli_typed_string(const uint8_t *p, size_t n, size_t *pos,
                      const uint8_t **s, uint32_t *len);

/* cli_utf8_valid: 1 if s[0..n) is well-formed UTF-8. */
int  cli_utf8_valid(const uint8_t *s, size_t n);

/* cli_json_str appends s[0..n) as a quoted JSON string. */
void cli_json_str(em_buf *out, const char *s, size_t n);

/* cli_put_str appends a typed string (code 9). */
void cli_put_str(em_buf *b, const char *s, size_t n);

#endif
