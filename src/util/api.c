/* api.c - the basics section of include/ember.h. */
#include "ember.h"
#include "util/err.h"

const char *ember_strerror(int code) { return em_strerror(code); }
