/* ember.h - the public C API of libember: an embedded ember node.
 *
 * Names: ember_* (public), with the opaque handles below.  Errors: int, 0 = OK,
 * negative = failure; ember_strerror() explains any code.  Returned pointers
 * state their lifetime in their doc comment.
 *
 * Sections: 1. basics  2. binary objects (build and read)  3. node and caches.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. basics -------------------------------------------------------- */

/* ember_strerror: a static message for any code ember returns. */
const char *ember_strerror(int code);

/* ---- 2. binary objects ------------------------------------------------ */
/* (owned by src/binary/; see the section body below) */

/* ---- 3. node and caches ----------------------------------------------- */
/* (owned by src/store/; see the section body below) */

#ifdef __cplusplus
}
#endif
#endif
