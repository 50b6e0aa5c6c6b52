/* libFuzzer harness: a chat template's text (src/formats/chat.c).
 *
 * rc_chat_parse on the input (bos_token "<|begin_of_text|>"); when it is
 * recognised, rc_chat_render of a fixed conversation (system, user with
 * surrounding whitespace, assistant, user) and rc_chat_encode with the
 * tokenizer of data/fixtures/chat/llama3. Checked on success: the text ends
 * with the layout's generation prompt and the encoding has tokens. With
 * FUZZ_CHECK_MSG=1 every error is one line naming the template ("t.jinja").
 * Run with -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10; needs
 * RC_SOURCE_DIR (the repository root). Seeds: tools/fuzz/corpus/chat/ (the
 * templates of data/fixtures/chat/chat_refs.json).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "fuzz_common.h"
#include "tokenizer.h"

static rc_tokenizer *g_tok;
static json_t *g_msgs;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *src = getenv("RC_SOURCE_DIR");
    if (!src) {
        fprintf(stderr, "fuzz_chat: set RC_SOURCE_DIR to the repository root\n");
        exit(2);
    }
    char tp[1200];
    snprintf(tp, sizeof tp, "%s/data/fixtures/chat/llama3/tokenizer.json", src);
    if (rc_tokenizer_load(tp, 0, &g_tok) != RC_OK) {
        fprintf(stderr, "fuzz_chat: %s\n", rc_last_error());
        exit(2);
    }
    g_msgs = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role", "system", "content", "Be brief.", "role",
                       "user", "content", "  hello <|eot_id|>\n", "role", "assistant", "content", "hi", "role", "user",
                       "content", "\xe3\x80\x80" "again");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rc_chat *c = NULL;
    rc_status s = rc_chat_parse((const char *)data, size, "t.jinja", "<|begin_of_text|>", &c);
    fz_check_msg(s, "t.jinja");
    if (s != RC_OK) {
        if (c)
            abort();
        return 0;
    }
    char *text;
    size_t len;
    if (rc_chat_render(c, g_msgs, &text, &len) != RC_OK)
        abort();
    static const char *const gen[] = {"", "<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n"};
    const char *g = gen[rc_chat_kind_of(c)];
    if (strlen(text) != len || len < strlen(g) || strcmp(text + len - strlen(g), g) != 0)
        abort();
    free(text);
    int32_t *ids;
    int64_t n;
    if (rc_chat_encode(c, g_tok, g_msgs, &text, &ids, &n) != RC_OK || n < 1)
        abort();
    free(text);
    free(ids);
    rc_chat_free(c);
    return 0;
}
