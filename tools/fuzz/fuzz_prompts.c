/* libFuzzer harness: a prompt file, read as .txt (tokenized with the bundled
 * model's tokenizer, data/models/pythia-rc-tiny/tokenizer.json), as .jsonl
 * and as .ids, each through rc_prompts_load with the bundled model's context
 * (256 positions, 50 generated tokens) and, for .ids and .jsonl, without
 * limits; the .jsonl also with the tokenizer and chat template of
 * data/fixtures/chat/qwen2_5 (ChatML, Qwen2.5's template), so that
 * {"messages": [...]} lines are rendered and tokenized (the bundled model has
 * no chat template: there they stop at the template check).
 *
 * Checked on success: at least one prompt; every length in 1..max_len; ids
 * non-negative, -1 padding after each prompt; lines increasing; with the
 * context limit, len + 50 <= 256. With FUZZ_CHECK_MSG=1 every error is one
 * line naming the file. Run with -rss_limit_mb=2048 -malloc_limit_mb=2048
 * -timeout=10; needs RC_SOURCE_DIR (the repository root).
 * Seeds: tools/fuzz/corpus/prompts/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "prompts.h"
#include "tokenizer.h"

static rc_tokenizer *g_tok, *g_chat_tok;
static char g_txt[600], g_jsonl[600], g_ids[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *src = getenv("RC_SOURCE_DIR");
    if (!src) {
        fprintf(stderr, "fuzz_prompts: set RC_SOURCE_DIR to the repository root\n");
        exit(2);
    }
    char tp[1200];
    snprintf(tp, sizeof tp, "%s/data/models/pythia-rc-tiny/tokenizer.json", src);
    if (rc_tokenizer_load(tp, 0, &g_tok) != RC_OK) {
        fprintf(stderr, "fuzz_prompts: %s\n", rc_last_error());
        exit(2);
    }
    snprintf(tp, sizeof tp, "%s/data/fixtures/chat/qwen2_5/tokenizer.json", src);
    if (rc_tokenizer_load(tp, 0, &g_chat_tok) != RC_OK) {
        fprintf(stderr, "fuzz_prompts: %s\n", rc_last_error());
        exit(2);
    }
    const char *dir = fz_scratch_dir("prompts");
    snprintf(g_txt, sizeof g_txt, "%s/p.txt", dir);
    snprintf(g_jsonl, sizeof g_jsonl, "%s/p.jsonl", dir);
    snprintf(g_ids, sizeof g_ids, "%s/p.ids", dir);
    return 0;
}

static void check_with(const char *path, const rc_tokenizer *tok, const rc_prompt_limits *lim)
{
    rc_prompts p;
    rc_status s = rc_prompts_load(path, tok, lim, &p);
    fz_check_msg(s, path);
    if (s != RC_OK) {
        if (p.tokens || p.len || p.n)
            abort();
        return;
    }
    if (p.n < 1 || p.max_len < 1 || (lim && lim->max_pos > 0 && p.max_len + lim->gen_len > lim->max_pos))
        abort();
    for (int64_t i = 0; i < p.n; i++) {
        if (p.len[i] < 1 || p.len[i] > p.max_len || (i > 0 && p.line[i] <= p.line[i - 1]))
            abort();
        for (int64_t k = 0; k < p.max_len; k++) {
            int32_t v = p.tokens[i * p.max_len + k];
            if (k < p.len[i] ? v < 0 : v != -1)
                abort();
        }
    }
    rc_prompts_free(&p);
}

static void check(const char *path, const rc_prompt_limits *lim) { check_with(path, g_tok, lim); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const rc_prompt_limits ctx = {0, 256, 50, NULL};
    fz_write(g_txt, data, size);
    check(g_txt, &ctx);
    fz_write(g_jsonl, data, size);
    check(g_jsonl, &ctx);
    check(g_jsonl, NULL);
    check_with(g_jsonl, g_chat_tok, &ctx);
    fz_write(g_ids, data, size);
    check(g_ids, &ctx);
    check(g_ids, NULL);
    return 0;
}
