/* Prompt files:
 *   .ids    token ids, one prompt per line, separated by spaces; blank lines
 *           and lines starting with '#' are skipped;
 *   .jsonl  one JSON object per line: {"prompt": "text"}, {"tokens": [ids]}
 *           or {"messages": [{"role": ..., "content": ...}, ...]}, which may
 *           carry "chat_template_kwargs": {...}, extra template arguments
 *           (apply_chat_template(..., **kwargs), e.g. enable_thinking);
 *   other   (.txt) one text prompt per line, with \n and \\ escapes.
 * Text is tokenized with the model's tokenizer.json as HF's tokenizer(text)
 * does by default: with the post-processor's special tokens (e.g. BOS).
 * Messages are rendered with the model's chat template and tokenized as
 * apply_chat_template(messages, add_generation_prompt=True) does (chat.h);
 * the rendered text is the prompt's text.
 *
 * Every prompt is checked as it is read (at most RC_PROMPT_MAX_TOKENS tokens,
 * and the context limit when one is given), before the prompts are padded to
 * the longest; a .txt / .jsonl line is at most RC_PROMPT_MAX_LINE bytes. */
#ifndef RC_PROMPTS_H
#define RC_PROMPTS_H

#include <stdint.h>

#include "status.h"

#define RC_PROMPT_MAX_TOKENS ((int64_t)1 << 20)
#define RC_PROMPT_MAX_LINE ((int64_t)8 << 20)
/* prompts x longest prompt, the padded table: at most 1 GiB of ids */
#define RC_PROMPT_MAX_PADDED ((int64_t)1 << 28)

typedef struct {
    int64_t n, max_len;
    int32_t *tokens; /* [n, max_len], -1 padding */
    int32_t *len;    /* [n] */
    int64_t *line;   /* [n] line of the file each prompt came from */
    char **text;     /* [n] the prompt text (NULL for token-id prompts) */
} rc_prompts;

/* Limits and settings applied to each prompt while the file is read. */
typedef struct {
    int64_t max_prompts; /* read only the first N prompts (<= 0: all) */
    int64_t max_pos;     /* the model's positions: a prompt of n tokens needs
                            n + gen_len <= max_pos (<= 0: no context check) */
    int64_t gen_len;     /* tokens generated after each prompt */
    /* a JSON object's text: chat-template arguments for every {"messages"}
     * record (--chat-template-kwargs), a record's own "chat_template_kwargs"
     * updating them key by key; NULL: none */
    const char *chat_kwargs;
} rc_prompt_limits;

rc_status rc_prompts_load_ids(const char *path, rc_prompts *out);
struct rc_tokenizer;
/* Any of the formats above; tok may be NULL for .ids files; lim may be NULL
 * (no context check, all prompts). A prompt that does not fit the context is
 * RC_ERR_USAGE "FILE:LINE: prompt of N tokens plus G generated tokens exceeds
 * the model's P positions". */
rc_status rc_prompts_load(const char *path, const struct rc_tokenizer *tok, const rc_prompt_limits *lim,
                          rc_prompts *out);
void rc_prompts_free(rc_prompts *p);

#endif
