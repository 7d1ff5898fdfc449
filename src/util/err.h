/* err.h - ember's single error type.
 *
 * Every function that can fail returns int: 0 = OK, negative = failure.
 * System-call failures return -errno.  ember's own codes live in the reserved
 * band [-30999, -30000] and are generated from the one X-macro list below, so
 * em_strerror()/em_errname() can never fall out of step with the codes.
 * EM_AGAIN ("need more bytes") is a status, not an error.
 */
#ifndef EM_ERR_H
#define EM_ERR_H

/* X(NAME, value, message).  Keep values stable: they appear in logs and tests. */
#define EM_ERRORS(X)                                                              \
    X(AGAIN,        -30000, "need more bytes")                                    \
    X(NOMEM,        -30001, "out of memory")                                      \
    X(INVAL,        -30002, "invalid argument")                                   \
    X(RANGE,        -30003, "value out of range")                                 \
    X(TRUNCATED,    -30010, "data ends inside a value")                           \
    X(BADTYPE,      -30011, "unknown or unsupported type code")                   \
    X(FORBIDDEN,    -30012, "type code implies executable classes (-2, 32, 35, 99)") \
    X(BADLEN,       -30013, "length or count out of bounds")                      \
    X(BADOFFSET,    -30014, "field, schema or raw offset out of bounds")          \
    X(DEPTH,        -30015, "nesting deeper than the limit")                      \
    X(BADHANDLE,    -30016, "handle points forward, outside the value or into a cycle") \
    X(BADUTF8,      -30017, "invalid UTF-8")                                      \
    X(BADHEADER,    -30018, "malformed complex object header")                    \
    X(BADSCHEMA,    -30019, "schema unknown or inconsistent with the object")     \
    X(NOFIELD,      -30020, "no such field")                                      \
    X(FIELDTYPE,    -30021, "field type conflicts with registered metadata")      \
    X(NOTYPE,       -30022, "binary type not registered")                         \
    X(TRAILING,     -30023, "bytes left after the value")                         \
    X(BUILDER,      -30024, "object builder used out of order")                   \
    X(TYPECONFLICT, -30025, "binary type conflicts with the registered one (name, enum, affinity)") \
    X(LIMIT,        -30026, "more items than ember's limit (cache ids per request, fields or schemas per type)") \
    X(NOCACHE,      -30100, "cache does not exist")                               \
    X(CACHEEXISTS,  -30101, "cache already exists")                               \
    X(NOTFOUND,     -30102, "not found")                                          \
    X(MEMLIMIT,     -30103, "data region memory limit reached")                   \
    X(TOOBIG,       -30104, "value too large")                                    \
    X(NOCURSOR,     -30105, "cursor does not exist")                              \
    X(TOOMANY,      -30106, "too many open resources")                            \
    X(READONLY,     -30107, "region stopped taking writes after an I/O error")    \
    X(LOCKED,       -30108, "entry locked by another transaction")                \
    X(TXCONFLICT,   -30109, "optimistic transaction conflict (a value read changed)") \
    X(DEADLOCK,     -30110, "transaction deadlock (waits for a lock held by a transaction waiting for it)") \
    X(PROTO,        -30200, "protocol violation")                                 \
    X(BADOP,        -30201, "invalid request op code")                            \
    X(UNSUPPORTED,  -30202, "operation not supported")                            \
    X(AUTH,         -30203, "authentication failed")                              \
    X(CLOSED,       -30204, "connection closed")                                  \
    X(TIMEOUT,      -30205, "timed out")                                          \
    X(CORRUPT,      -30300, "on-disk data is corrupt")                            \
    X(IO,           -30301, "I/O error")                                          \
    X(CONFIG,       -30400, "bad configuration")                                  \
    X(NOTLEADER,    -30500, "not the metadata group's leader")                   \
    X(LOSTLEADER,   -30501, "leadership lost before the entry committed; it may still commit") \
    X(BUSY,         -30502, "a membership change is already in progress")        \
    X(NOLINK,       -30503, "no link to that member (the request was not sent)") \
    X(REMOTE,       -30510, "another member refused the request (its message says why)") \
    X(STALE,        -30520, "an owner refused the update (older epoch, or an update lost before it)") \
    X(FENCED,       -30521, "an owner refused the update: its sender is no longer the partition's primary")

enum {
#define EM_ERR_ENUM_(name, value, msg) EM_##name = (value),
    EM_ERRORS(EM_ERR_ENUM_)
#undef EM_ERR_ENUM_
};

/* em_strerror returns a static message for any code: ember's band, -errno, or 0. */
const char *em_strerror(int code);

/* em_errname returns the symbolic name ("EM_TRUNCATED", "ENOENT", "OK"). */
const char *em_errname(int code);

#endif
