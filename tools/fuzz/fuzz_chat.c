/* libFuzzer harness: a chat template's text (src/formats/chat.c, jinja_*.c).
 *
 * rc_chat_parse on the input (bos_token "<|begin_of_text|>", eos_token
 * "<|eot_id|>"); when it parses, rc_chat_render of a fixed conversation
 * (system, user with surrounding whitespace and a special-token string,
 * assistant with <think> in its content, user) and rc_chat_encode with the
 * tokenizer of data/fixtures/chat/llama3. Checked: a failed parse leaves no
 * object; a rendering is NUL-free UTF-8 of the length returned, or fails with
 * RC_ERR_FORMAT (raise_exception) or RC_ERR_UNSUPPORTED (a limit, an
 * undefined value, a type error), never RC_ERR_INTERNAL; the encoding of a
 * rendering succeeds or fails with a message. With FUZZ_CHECK_MSG=1 every
 * error is one line naming the template ("t.jinja"). Run with
 * -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10; needs RC_SOURCE_DIR
 * (the repository root). Seeds: tools/fuzz/corpus/chat/ (the templates of
 * data/fixtures/chat/chat_refs.json and data/fixtures/chat/templates/).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "fuzz_common.h"
#include "json_util.h"
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
                       "user", "content", "  hello <|eot_id|>\n", "role", "assistant", "content",
                       "<think>\nhm\n</think>\n\nhi", "role", "user", "content", "\xe3\x80\x80" "again");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rc_chat *c = NULL;
    rc_status s = rc_chat_parse((const char *)data, size, "t.jinja", "<|begin_of_text|>", "<|eot_id|>", &c);
    fz_check_msg(s, "t.jinja");
    if (s != RC_OK) {
        if (c || s == RC_ERR_INTERNAL)
            abort();
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    s = rc_chat_render(c, g_msgs, &text, &len);
    if (s != RC_OK) {
        fz_check_msg(s, "t.jinja");
        if (text || (s != RC_ERR_FORMAT && s != RC_ERR_UNSUPPORTED && s != RC_ERR_NOMEM))
            abort();
        rc_chat_free(c);
        return 0;
    }
    if (!text || strlen(text) != len || !rc_utf8_valid((const unsigned char *)text, len, NULL))
        abort();
    free(text);
    int32_t *ids = NULL;
    int64_t n = 0;
    s = rc_chat_encode(c, g_tok, g_msgs, &text, &ids, &n);
    if (s == RC_OK) {
        free(text);
        free(ids);
    } else if (s == RC_ERR_INTERNAL || !rc_last_error()[0]) {
        abort();
    }
    rc_chat_free(c);
    return 0;
}
