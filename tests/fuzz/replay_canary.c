/* replay_canary.c - a fuzz target with planted bugs, for checking the replay
 * itself (tools/run-tests.sh, suite replay-canary): linked with replay_main.c
 * in the same ASan + UBSan build as the real replays, it must make the replay
 * fail, naming the input, for each bug.  A replay built without the sanitizers
 * passes the first three quietly, which is what the check catches.
 * Input "heap": reads one byte past the input; "ubsan": signed overflow;
 * "leak": loses a malloc'd block; "abort": abort(); anything else: no bug.
 * Not a libFuzzer target (the name does not match fuzz_*.c). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile int sink;
static void *volatile lost;

static int is(const uint8_t *data, size_t size, const char *word)
{
    return size == strlen(word) && memcmp(data, word, size) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (is(data, size, "heap"))
        sink = data[size];
    if (is(data, size, "ubsan")) {
        volatile int big = INT_MAX - 2;
        sink = big + (int)size;
    }
    if (is(data, size, "leak")) {
        lost = malloc(64);
        lost = NULL;
    }
    if (is(data, size, "abort"))
        abort();
    return 0;
}
