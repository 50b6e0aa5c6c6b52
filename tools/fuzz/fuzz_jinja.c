/* libFuzzer harness: the Jinja subset interpreter alone (src/formats/jinja_*.c).
 *
 * rc_jinja_parse on the input; when it parses, rc_jinja_render with two sets
 * of variables (the variables transformers passes with a three-message
 * conversation, and a set with nested lists, dicts, numbers, booleans, null
 * and non-ASCII strings) at a fixed time. Checked: a failed parse leaves no
 * object and is never RC_ERR_INTERNAL; a rendering is NUL-free UTF-8 of the
 * length returned (string literals cannot make NUL or surrogates), or fails
 * with RC_ERR_FORMAT, RC_ERR_UNSUPPORTED or RC_ERR_NOMEM; rendering the same
 * template twice gives the same text. The limits (steps, memory, output,
 * nesting) keep every input within -timeout=10 and -rss_limit_mb=2048. With
 * FUZZ_CHECK_MSG=1 every error is one line naming the template ("t.jinja").
 * Seeds: tools/fuzz/corpus/jinja/ (the cases of data/fixtures/chat/jinja_refs.json; macro_*.jinja: macro
 * definitions, calls by position and by name, recursion, scope, the refused forms and the argument errors).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz_common.h"
#include "jinja.h"
#include "json_util.h"

static json_t *g_vars[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_error_t e;
    g_vars[0] = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                           "\"content\": \" hi <|im_end|>\\n\"}, {\"role\": \"assistant\", \"content\": "
                           "\"<think>\\nx\\n</think>\\n\\nok\", \"reasoning_content\": \"x\"}], \"tools\": null, "
                           "\"documents\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\", "
                           "\"eos_token\": \"</s>\", \"enable_thinking\": false}",
                           0, &e);
    g_vars[1] = json_loads("{\"x\": [1, 2.5, -3, true, null, \"\\u00e9\\u4e16\", [[[]]], {\"a\": {\"b\": [1]}}], "
                           "\"y\": {\"k\": \"v\", \"items\": 1, \"_p\": 2}, \"s\": \"  Gr\\u00fc\\u00dfe \\u3000\", "
                           "\"n\": 9223372036854775807, \"f\": 1e300, \"messages\": []}",
                           0, &e);
    if (!g_vars[0] || !g_vars[1]) {
        fprintf(stderr, "fuzz_jinja: %s\n", e.text);
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rc_jinja *t = NULL;
    rc_status s = rc_jinja_parse((const char *)data, size, "t.jinja", &t);
    fz_check_msg(s, "t.jinja");
    if (s != RC_OK) {
        if (t || s == RC_ERR_INTERNAL)
            abort();
        return 0;
    }
    struct tm tm = {.tm_year = 124, .tm_mon = 6, .tm_mday = 26, .tm_hour = 9, .tm_min = 30, .tm_wday = 5};
    rc_jinja_set_time(t, &tm);
    for (int v = 0; v < 2; v++) {
        char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        s = rc_jinja_render(t, g_vars[v], &a, &an);
        if (s != RC_OK) {
            fz_check_msg(s, "t.jinja");
            if (a || (s != RC_ERR_FORMAT && s != RC_ERR_UNSUPPORTED && s != RC_ERR_NOMEM))
                abort();
            continue;
        }
        if (!a || strlen(a) != an || !rc_utf8_valid((const unsigned char *)a, an, NULL))
            abort();
        if (rc_jinja_render(t, g_vars[v], &b, &bn) != RC_OK || bn != an || memcmp(a, b, an) != 0)
            abort();
        free(a);
        free(b);
    }
    rc_jinja_free(t);
    return 0;
}
