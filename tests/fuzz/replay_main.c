/* replay_main.c - runs files through a fuzz target without libFuzzer, so the
 * stored corpus (tests/fuzz/corpus/<target>/) is checked by `make test` with
 * the ordinary compiler and by `make asan` under the sanitizers.
 * Usage: replay/<target> DIR|FILE...  Last line: "N passed, N failed". */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, got);   /* a bug shows as a crash or sanitizer report */
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i])) failed++; else passed++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (run_file(path)) failed++; else passed++;
        }
        if (d)
            closedir(d);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
