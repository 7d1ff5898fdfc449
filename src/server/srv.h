/* srv.h - emberd's wiring: configuration (INI file + flags, one key space),
 * and the server object that joins store, binary registry, protocol and
 * network layers.  The INI keys are listed in srv.c (srv_config_help) and in
 * `emberd --help`.
 */
#ifndef EM_SRV_H
#define EM_SRV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct srv_config {
    char     host[256];
    int      port;
    int      threads;               /* 0 = one per online CPU */
    int      sql_threads;           /* SQL off the loops (1); 0 = on the loops */
    uint64_t sql_query_memory;      /* SQLite heap per query (256m); 0 = no quota */
    uint32_t max_message_size;      /* bytes, after the handshake */
    uint32_t max_handshake_size;    /* bytes, before it succeeds */
    uint32_t handshake_timeout_ms;
    uint32_t idle_timeout_ms;       /* 0 = off */
    uint32_t max_connections;
    uint32_t max_cursors;           /* per connection */
    uint32_t max_depth;             /* nesting of data objects */
    uint64_t max_output_queue;      /* per connection: stop reading above */
    uint64_t output_hard_cap;       /* per connection: close above */
    uint32_t write_stall_timeout_ms;
    uint64_t memory_limit;          /* default data region, bytes; 0 = none */
    int      eviction;              /* evict when the region is full */
    int      log_level;             /* enum em_log_level */
    char     log_file[512];         /* empty = stderr */
    int      debug_ops;             /* answer the private debug-stats op */
    char     username[128];         /* empty = no authentication */
    char     password[128];
    char     users_file[512];       /* users file (auth.h); replaces username/password */
    uint32_t auth_max_failures;     /* 0 = auth.h defaults */
    uint32_t auth_failure_forgive_ms;
    uint32_t auth_slow_burst;
    uint32_t auth_slow_rate;
    int      tls;
    char     tls_cert[512], tls_key[512], tls_ca[512];
    char     tls_client_auth[16];   /* none, optional, require */
    char     tls_ciphers[512], tls_ciphersuites[256];
    int      http;
    char     http_host[256];
    int      http_port;
    uint32_t http_timeout_ms;
    int      metrics;               /* per-request counters (connection counts always) */
    /* Persistence (Ignite's names), switched per data region as in Ignite:
     * `persistence` is the default region's switch; named regions come
     * from [region:NAME] sections of the config file.  The WAL is opened
     * when any region is persistent. */
    int      persistence;           /* default region; off by default */
    char     wal_path[512];         /* WAL segments, checkpoints, binary metadata */
    int      wal_mode;              /* enum wal_mode: FSYNC, LOG_ONLY (default), ... */
    uint64_t wal_segment_size;      /* bytes (64m) */
    uint32_t wal_flush_frequency_ms;/* BACKGROUND flush period (2000) */
    uint32_t checkpoint_frequency_ms;/* 180000; 0 = no periodic checkpoints */
    uint64_t rebalance_history_size;/* bytes of recent updates kept for historical
                                     * rebalancing (64m; 0 = off; cluster only) */
    /* Cluster (srv_cluster.h): on when seeds or bootstrap is set. */
    char     cluster_name[256];     /* "ember" */
    char     cluster_host[256];     /* transport and metadata address; "" = host */
    int      cluster_port;          /* node-to-node transport (47100) */
    int      raft_port;             /* the metadata group (47500) */
    char     seeds[1024];           /* "ip:port,..." of other nodes' cluster ports */
    int      bootstrap;             /* create the cluster if none exists */
    char     consistent_id[256];    /* "" = cluster_host:cluster_port */
    char     cluster_secret[256];   /* "" = none */
    int      cluster_tls;           /* transport links in TLS (tls_cert, tls_key, tls_ca) */
    char     cluster_dir[512];      /* metadata group directory; "" = temporary */
    char     host_id[256];          /* neighbourhood for exclude_neighbors; "" = this machine */
    int      exclude_neighbors;     /* backups on other machines than the primary */
    uint32_t failure_detection_timeout_ms; /* 10000 */
    int      baseline_auto_adjust;  /* the coordinator re-sets a set baseline to the members */
    uint32_t baseline_auto_adjust_timeout_ms; /* ... once they stayed the same this long (0) */
    char     cluster_fault[128];    /* tests: "drop=P,dup=P,delay=P"; "" = none */
    uint32_t cluster_exit_after_writes; /* tests: exit after the Nth forwarded write */
    char     cluster_tx_crash[32];  /* tests: "POINT:N", proto.h's tx_crash */
    char     cluster_write_hold[256]; /* tests: proto.h's write_hold */
    char     cluster_rebal_hold[256]; /* tests: cl_rebal.h's hold */
    char     cluster_repl_hold[256]; /* tests: cl_repl.h's hold */
    char     cluster_tx_hold[256];  /* tests: proto.h's tx_hold */
    /* Named data regions ([region:NAME]: persistence, max_size, eviction). */
    struct srv_region {
        char     name[64];
        uint64_t max_size;          /* bytes; 0 = unlimited */
        int      eviction;
        int      persistence;       /* off by default */
    } regions[16];
    int      nregions;
} srv_config;

void srv_config_default(srv_config *c);
/* srv_config_set applies one `key = value` (INI keys; dashes are read as
 * underscores).  Returns 0 or EM_CONFIG with a message in err. */
int  srv_config_set(srv_config *c, const char *key, const char *value, char *err, size_t errlen);
/* srv_config_load parses an INI file (libinih): top-level keys and
 * [region:NAME] sections; any other section header is ignored with a logged
 * warning, its keys read as top-level keys. */
int  srv_config_load(srv_config *c, const char *path, char *err, size_t errlen);
/* srv_config_help prints the keys with their defaults. */
void srv_config_help(FILE *f);

typedef struct srv srv;

/* srv_start opens the store, with persistence recovers it from the WAL
 * directory (EM_CORRUPT: refuses, the message names file and offset and is
 * logged), and starts listening; returns 0 or a negative code (EM_NOMEM,
 * -EADDRINUSE, ...). */
int  srv_start(srv **out, const srv_config *c);
int  srv_port(const srv *s);
/* srv_maintain runs periodic housekeeping (expiry); call every ~100 ms. */
void srv_maintain(srv *s);
/* srv_stop closes the listener and all connections, then the WAL (final
 * flush), then the store. */
void srv_stop(srv *s);

#endif
