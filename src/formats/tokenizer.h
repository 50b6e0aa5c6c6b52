/* HF tokenizer.json in C: BPE models (byte-level GPT-2 / GPT-NeoX / Llama-3 /
 * Qwen2 style and SentencePiece-style with byte fallback), added tokens,
 * normalizers, pre-tokenizers, post-processors and decoders. Anything the
 * file uses that is not implemented is rejected by name. */
#ifndef RC_TOKENIZER_H
#define RC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct rc_tokenizer rc_tokenizer;

/* Load tokenizer.json (path). Every id must be below vocab_limit (the
 * model's embedding rows; <= 0: no limit). */
rc_status rc_tokenizer_load(const char *path, int64_t vocab_limit, rc_tokenizer **out);
void rc_tokenizer_free(rc_tokenizer *t);

/* Encode UTF-8 text; add_special applies the post-processor (BOS/EOS). *ids
 * is malloc'd. Invalid UTF-8 is an error giving the byte offset. */
rc_status rc_tokenizer_encode(const rc_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, int64_t *n);
/* Decode ids to UTF-8 (malloc'd, NUL-terminated). Ids that are not tokens
 * (a model's padded vocabulary rows) are skipped, as HF's decode does. */
rc_status rc_tokenizer_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                              char **out, size_t *len);
/* The vocabulary string of an id (NULL when unknown). */
const char *rc_tokenizer_piece(const rc_tokenizer *t, int32_t id);
int64_t rc_tokenizer_vocab_size(const rc_tokenizer *t);
/* The id of the added token whose content is exactly s[0..n) (-1: none);
 * *special (may be NULL) tells whether it is a special one. */
int32_t rc_tokenizer_added_id(const rc_tokenizer *t, const char *s, size_t n, bool *special);

/* What the tokenizer's folder says about chat formatting, read by
 * rc_tokenizer_load from the files next to tokenizer.json as transformers 5
 * reads them: tokenizer_config.json's "chat_template" (a string, or the entry
 * named "default" of a list of {"name", "template"}), replaced by
 * chat_template.jinja when that file exists, and "bos_token" / "eos_token"
 * (a string or {"content": ...}). Nothing here fails the load (plain prompts
 * never need it): a file that cannot be read or is malformed is recorded in
 * status / error and reported when a chat prompt needs the template
 * (src/formats/chat.c). */
typedef struct {
    const char *template_text;    /* NULL: the folder has no chat template */
    size_t template_len;
    const char *template_path;    /* the file it came from */
    const char *config_path;      /* <folder>/tokenizer_config.json */
    const char *bos_token, *eos_token; /* NULL: not set */
    bool bos_uncertain;           /* special_tokens_map.json names another (or unreadable) bos_token */
    rc_status status;             /* RC_OK, or why the files above could not be used */
    const char *error;            /* its one-line message */
} rc_tokenizer_chat;
const rc_tokenizer_chat *rc_tokenizer_chat_info(const rc_tokenizer *t);

#endif
