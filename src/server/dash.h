/* dash.h - the dashboard page (src/server/dash.html), embedded in the binary
 * at build time (the Makefile turns it into a byte array: build/gen/dash_html.c)
 * so emberd serves it with nothing fetched from anywhere else.
 */
#ifndef EM_SRV_DASH_H
#define EM_SRV_DASH_H

#include <stddef.h>

extern const unsigned char srv_dash_html[];
extern const size_t srv_dash_html_len;

#endif
