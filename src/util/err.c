/* err.c - messages and names for ember's error codes (see err.h). */
#include "err.h"

#include <string.h>

const char *em_strerror(int code)
{
    if (code == 0)
        return "success";
    switch (code) {
#define EM_ERR_MSG_(name, value, msg) case value: return msg;
        EM_ERRORS(EM_ERR_MSG_)
#undef EM_ERR_MSG_
    }
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

const char *em_errname(int code)
{
    if (code == 0)
        return "OK";
    switch (code) {
#define EM_ERR_NAME_(name, value, msg) case value: return "EM_" #name;
        EM_ERRORS(EM_ERR_NAME_)
#undef EM_ERR_NAME_
    }
    if (code < 0 && code > -4096) {
        const char *n = strerrorname_np(-code);
        return n ? n : "E?";
    }
    return "EM_UNKNOWN";
}
