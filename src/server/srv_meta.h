/* srv_meta.h - emberd's durable cluster-wide metadata: every type record
 * registered with PUT_BINARY_TYPE (op 3003), every type name (op 3001) and
 * every cluster state change (op 5001) is appended to binary-meta.log in the
 * WAL directory and fsynced before the reply; at start-up the log is
 * replayed into the registry and the last state is kept.  Record layout in
 * srv_meta.c.
 */
#ifndef EM_SRV_META_H
#define EM_SRV_META_H

#include <stddef.h>
#include <stdint.h>

#include "binary/binary.h"
#include "wal/wal.h"

typedef struct srv_meta srv_meta;

/* srv_meta_open reads dir/binary-meta.log (if any) into reg, cuts a torn
 * tail, and opens the log for appending.  EM_CORRUPT (with a message naming
 * file and offset in err) if a bad record is followed by a valid one. */
int  srv_meta_open(srv_meta **out, const wal_fileops *ops, const char *dir,
                   bin_registry *reg, char *err, size_t errlen);
void srv_meta_close(srv_meta *m);

/* Record kinds. */
enum { SRV_META_TYPE = 1, SRV_META_NAME = 2, SRV_META_STATE = 3, SRV_META_BASELINE = 4 };

/* srv_meta_append writes one record and fsyncs it (thread-safe).  TYPE: p is
 * a PUT_BINARY_TYPE metadata record; NAME: byte platform, int type id, then
 * the UTF-8 name; STATE: one byte, the cluster state's ordinal (0 INACTIVE,
 * 1 ACTIVE, 2 ACTIVE_READ_ONLY); BASELINE: the cluster's baseline as a
 * BASELINE_SET entry of the metadata group (cl_meta_enc_baseline), so a
 * whole cluster restarting can put it back.  0 or -errno; after a failure
 * every append fails. */
int  srv_meta_append(srv_meta *m, int kind, const uint8_t *p, size_t n);

/* srv_meta_records: records replayed at open (for logs and tests). */
uint64_t srv_meta_records(const srv_meta *m);

/* srv_meta_state: the cluster state of the last STATE record replayed at
 * open, or -1 if the log has none (a node never activated). */
int srv_meta_state(const srv_meta *m);
/* srv_meta_baseline: the last BASELINE record replayed at open (an entry;
 * n 0 if none).  Valid until srv_meta_close. */
void srv_meta_baseline(const srv_meta *m, const uint8_t **p, size_t *n);

#endif
