/* Prompt files. For now: token ids, one prompt per line, ids separated by
 * spaces; blank lines and lines starting with '#' are skipped. */
#ifndef RC_PROMPTS_H
#define RC_PROMPTS_H

#include <stdint.h>

#include "status.h"

typedef struct {
    int64_t n, max_len;
    int32_t *tokens; /* [n, max_len], -1 padding */
    int32_t *len;    /* [n] */
} rc_prompts;

rc_status rc_prompts_load_ids(const char *path, rc_prompts *out);
void rc_prompts_free(rc_prompts *p);

#endif
