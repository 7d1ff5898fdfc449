/* fuzz_cli.c - libFuzzer target for ember-cli's reply value decoder
 * (tools/cli/cli_value.c with cli_conn.c, compiled into this file as ember-cli is not
 * part of libember): cli_value_format renders bytes a server sent, in human
 * and JSON form.  Checks: the output is one NUL-terminated string, and for
 * the types the CLI can also write (integers, date, bool, uuid, strings
 * without NUL) the human text parses back to the same bytes.
 * Seeds: tests/fuzz/corpus/fuzz_cli/ (one data object per file).
 */
/* cli_conn.c brings cli_put_str, which cli_value_parse writes strings with. */
#include "../../tools/cli/cli_conn.c"
#include "../../tools/cli/cli_value.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int round_trips(const uint8_t *p, size_t n)
{
    switch (p[0]) {
    case 1: case 2: case 3: case 4: case 10: case 11:
        return 1;
    case 8:
        return p[1] <= 1;
    case 9:
        return memchr(p + 1, 0, n - 1) == NULL || n < 5 ||
               memchr(p + 5, 0, n - 5) == NULL;
    default:
        return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    for (int json = 0; json <= 1; json++) {
        em_buf out = EM_BUF_INIT;
        int rc = cli_value_format(data, size, json, &out, err, sizeof err);
        if (rc == 0 && (out.len == 0 || out.p[out.len - 1] != 0))
            abort();                /* must be one NUL-terminated string */
        if (rc == 0 && !json && round_trips(data, size)) {
            em_buf back = EM_BUF_INIT;
            if (cli_value_parse((const char *)out.p, &back, err, sizeof err) != 0 ||
                back.len != size || memcmp(back.p, data, size) != 0)
                abort();            /* printed a value it cannot read back */
            em_buf_free(&back);
        }
        em_buf_free(&out);
    }
    return 0;
}
