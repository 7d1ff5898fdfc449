/* metrics.h - emberd's counters and their Prometheus text rendering.
 *
 * Counting is per worker thread in pr_stats blocks (proto/proto_stats.h):
 * proto/ counts each request as it answers it, with plain single-writer adds
 * and one clock read pair per SRV_METRICS_SAMPLE_EVERY requests; the server
 * counts connection and TLS events.  A scrape sums the blocks.  Per-cache
 * entries, memory, evictions and expirations are read from the store at
 * scrape time.  Output format: Prometheus text exposition format 0.0.4.
 */
#ifndef EM_SRV_METRICS_H
#define EM_SRV_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto_stats.h"
#include "store/store.h"
#include "util/buf.h"
#include "wal/wal.h"

/* The counter block itself lives in proto/ (proto_stats.h), which counts
 * requests and handshakes as it answers them; the server layer counts
 * connection and TLS events on the same block.  Server-side names: */
typedef pr_stats srv_metrics_block;
typedef pr_counter srv_counter;
#define SRV_METRICS_SLOTS        PR_STATS_SLOTS
#define SRV_METRICS_BUCKETS      PR_STATS_BUCKETS
#define SRV_METRICS_SAMPLE_EVERY PR_STATS_SAMPLE_EVERY
#define SRV_METRICS_UNTIMED      PR_STATS_UNTIMED
#define SRV_METRICS_SLOT_OTHER   PR_STATS_SLOT_OTHER
#define SRV_METRICS_SLOT_(code, name) SRV_METRICS_SLOT_##name = PR_STATS_SLOT_##name,
enum { PR_STATS_OPS(SRV_METRICS_SLOT_) };
#undef SRV_METRICS_SLOT_
#define SRV_EV_CONN_OPEN      PR_EV_CONN_OPEN
#define SRV_EV_CONN_CLOSE     PR_EV_CONN_CLOSE
#define SRV_EV_HANDSHAKE_OK   PR_EV_HANDSHAKE_OK
#define SRV_EV_HANDSHAKE_FAIL PR_EV_HANDSHAKE_FAIL
#define SRV_EV_AUTH_FAIL      PR_EV_AUTH_FAIL
#define SRV_EV_AUTH_LIMITED   PR_EV_AUTH_LIMITED
#define SRV_EV_TLS_FAIL       PR_EV_TLS_FAIL
#define SRV_EV_PROTO_ERROR    PR_EV_PROTO_ERROR
#define SRV_EV_COUNT          PR_EV_COUNT
#define srv_metrics_slot      pr_stats_slot
#define srv_metrics_op_name   pr_stats_op_name
#define srv_metrics_bucket    pr_stats_bucket
#define srv_counter_add       pr_counter_add
#define srv_metrics_time_this pr_stats_time_this
#define srv_metrics_op        pr_stats_op
#define srv_metrics_bytes     pr_stats_bytes
#define srv_metrics_event     pr_stats_event

typedef struct srv_metrics srv_metrics;

/* srv_metrics_new makes counters for nworkers worker threads (>= 1).
 * Extra blocks can serve other threads (e.g. one for the accept path). */
int  srv_metrics_new(int nworkers, srv_metrics **out);
void srv_metrics_free(srv_metrics *m);

/* srv_metrics_set_sampling: time one request in `every` (rounded down to a
 * power of two; 1 = all).  Call before the workers start. */
void srv_metrics_set_sampling(srv_metrics *m, uint32_t every);

/* srv_metrics_worker: worker i's block (0 <= i < nworkers), valid until
 * srv_metrics_free.  NULL if i is out of range. */
srv_metrics_block *srv_metrics_worker(srv_metrics *m, int i);


/* srv_metrics_sum: every worker's counters summed into sum (zeroed by the
 * caller), and the time since the counters were created. */
void srv_metrics_sum(srv_metrics *m, pr_stats *sum, uint64_t *uptime_ms);

/* srv_metrics_label_value appends v to b as a Prometheus label value
 * (backslash, double quote and newline escaped).  0 or EM_NOMEM. */
int srv_metrics_label_value(em_buf *b, const char *v);

/* ---- health ----------------------------------------------------------------
 * Components whose failure GET /health reports and the gauge
 * ember_health_component_failed{component="..."} exports (0 or 1).  With
 * persistence each persistent data region is one component,
 * "wal_region_NAME": it fails when the WAL it logs to has failed (a write or
 * fsync error; wal_error), because from then on the region refuses writes
 * (EM_READONLY) while reads and memory-only regions keep working. */
#define SRV_HEALTH_MAX 17      /* the default region + srv_config's 16 */

/* srv_metrics_watch_wal: the regions (names copied, at most SRV_HEALTH_MAX
 * in all) are logged to w, which must outlive every render and health call.
 * 0 or EM_RANGE (too many, or a name longer than 63 bytes). */
int srv_metrics_watch_wal(srv_metrics *m, wal *w, const char *const *regions, size_t n);

/* srv_metrics_health appends "ok\n" to out when every component is
 * healthy, else one line per failed component, "COMPONENT failed: REASON\n".
 * Returns the number of failed components, or EM_NOMEM.  Thread-safe. */
int srv_metrics_health(srv_metrics *m, em_buf *out);

/* srv_metrics_render appends the Prometheus text of every counter summed over
 * the blocks, the process's memory, the health of each watched component,
 * and - if store is not NULL - the data region and every cache, to out.  Thread-safe against concurrent counting.
 * 0 or EM_NOMEM. */
int srv_metrics_render(srv_metrics *m, st_store *store, em_buf *out);

#endif
