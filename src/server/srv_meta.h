/* srv_meta.h - emberd's durable binary type metadata: every type record
 * registered with PUT_BINARY_TYPE (op 3003) and every type name (op 3001)
 * is appended to binary-meta.log in the WAL directory and fsynced before the
 * reply; at start-up the log is replayed into the registry.  Record layout
 * in srv_meta.c.
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
enum { SRV_META_TYPE = 1, SRV_META_NAME = 2 };

/* srv_meta_append writes one record and fsyncs it (thread-safe).  TYPE: p is
 * a PUT_BINARY_TYPE metadata record; NAME: byte platform, int type id, then
 * the UTF-8 name.  0 or -errno; after a failure every append fails. */
int  srv_meta_append(srv_meta *m, int kind, const uint8_t *p, size_t n);

/* srv_meta_records: records replayed at open (for logs and tests). */
uint64_t srv_meta_records(const srv_meta *m);

#endif
