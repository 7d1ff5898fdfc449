/* proto_stats.c - the op code -> counter slot table and slot names of the
 * per-worker request counters (proto_stats.h).  Op codes: reference §2.1.
 */
#include "proto/proto_stats.h"

/* Op code -> slot, an array keyed by the op code itself, where a sparse
 * switch compiles to a binary search.  5 KiB, read-only; codes not listed
 * read 0 = OTHER. */
const uint8_t pr_stats_slot_table[PR_STATS_MAX_CODE + 1] = {
#define PR_STATS_ENTRY_(code, name) [code] = PR_STATS_SLOT_##name,
    PR_STATS_OPS(PR_STATS_ENTRY_)
#undef PR_STATS_ENTRY_
};

const char *pr_stats_op_name(int slot)
{
    static const char *const names[PR_STATS_SLOTS] = {
        "OTHER",
#define PR_STATS_NAME_(code, name) #name,
        PR_STATS_OPS(PR_STATS_NAME_)
#undef PR_STATS_NAME_
    };
    return slot >= 0 && slot < PR_STATS_SLOTS ? names[slot] : "OTHER";
}
