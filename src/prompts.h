/* Prompt files:
 *   .ids    token ids, one prompt per line, separated by spaces; blank lines
 *           and lines starting with '#' are skipped;
 *   .jsonl  one JSON object per line: {"prompt": "text"} or {"tokens": [ids]};
 *   other   (.txt) one text prompt per line, with \n and \\ escapes.
 * Text is tokenized with the model's tokenizer.json as HF's tokenizer(text)
 * does by default: with the post-processor's special tokens (e.g. BOS). */
#ifndef RC_PROMPTS_H
#define RC_PROMPTS_H

#include <stdint.h>

#include "status.h"

typedef struct {
    int64_t n, max_len;
    int32_t *tokens; /* [n, max_len], -1 padding */
    int32_t *len;    /* [n] */
    int64_t *line;   /* [n] line of the file each prompt came from */
    char **text;     /* [n] the prompt text (NULL for token-id prompts) */
} rc_prompts;

rc_status rc_prompts_load_ids(const char *path, rc_prompts *out);
struct rc_tokenizer;
/* Any of the formats above; tok may be NULL for .ids files. */
rc_status rc_prompts_load(const char *path, const struct rc_tokenizer *tok, rc_prompts *out);
void rc_prompts_free(rc_prompts *p);

#endif
