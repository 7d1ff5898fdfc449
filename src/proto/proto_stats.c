/* proto_stats.c - the op code -> counter slot table and slot names of the
 * per-worker request counters (proto_stats.h).  Op codes: reference §2.1.
 */
#include "proto/proto_stats.h"

/* Op code -> slot, an array keyed by the op code itself: one bounds check
 * and one load, where a sparse switch compiles to a binary search.  5 KiB,
 * read-only; codes not listed read 0 = OTHER. */
#define PR_STATS_MAX_CODE 5001
static const uint8_t slot_of_code[PR_STATS_MAX_CODE + 1] = {
#define PR_STATS_ENTRY_(code, name) [code] = PR_STATS_SLOT_##name,
    PR_STATS_OPS(PR_STATS_ENTRY_)
#undef PR_STATS_ENTRY_
};

int pr_stats_slot(int opcode)
{
    return (unsigned)opcode <= PR_STATS_MAX_CODE ? slot_of_code[opcode] : PR_STATS_SLOT_OTHER;
}

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
