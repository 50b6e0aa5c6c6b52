/* Chat-formatted prompts: a {"messages": [{"role": ..., "content": ...}]}
 * conversation rendered with the model's chat template, as transformers'
 * tokenizer.apply_chat_template(messages, add_generation_prompt=True,
 * tokenize=True) does: the template's text, tokenized without the
 * post-processor's special tokens (the template writes BOS where it wants
 * it; special-token strings in the text become their ids).
 *
 * No Jinja is run. The template (tokenizer_config.json "chat_template" or
 * chat_template.jinja, see tokenizer.h) is lexed with Jinja's rules as
 * transformers configures them (trim_blocks, lstrip_blocks, whitespace
 * control, one trailing newline dropped), reduced to a canonical form
 * (formatting, quoting, x['k'] / x.k, literals joined with +) and compared
 * with the canonical forms of the layouts ratiocheck renders in C:
 *
 *   ChatML   <|im_start|>{role}\n{content}<|im_end|>\n per message, after a
 *            default system message when the template has one and the first
 *            message is not a system message (its text is taken from the
 *            template: SmolLM2, Qwen2, Qwen2.5, or any other text), then
 *            <|im_start|>assistant\n. The forms of SmolLM2 / Qwen2 (the
 *            default inside the loop), Qwen2.5 (before the loop; its tool
 *            branches are never taken: no tools are passed, messages have no
 *            tool_calls and no "tool" role) and plain ChatML.
 *   Llama-3  bos_token, then <|start_header_id|>{role}<|end_header_id|>\n\n
 *            {content | trim}<|eot_id|> per message, then the assistant
 *            header (Meta-Llama-3-Instruct's template, or the same written
 *            with {{ bos_token }} first). Llama-3.1+ templates (a dated
 *            system message) are refused by name.
 *
 * Anything else is refused: the canonical forms must be equal, so a template
 * that differs in any way that could change the text is not rendered. */
#ifndef RC_CHAT_H
#define RC_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct rc_tokenizer;

#define RC_CHAT_SUPPORTED "ChatML as SmolLM2/Qwen2/Qwen2.5, Llama-3 headers"
#define RC_CHAT_MAX_TEMPLATE ((size_t)1 << 20) /* bytes of template text */
#define RC_CHAT_MAX_MESSAGES ((size_t)1 << 20)

typedef enum { RC_CHAT_CHATML = 1, RC_CHAT_LLAMA3 = 2 } rc_chat_kind;
typedef struct rc_chat rc_chat;

/* Recognise a template (len bytes; `what` names its file in messages). bos is
 * the bos_token string (NULL: not set; Llama-3 templates need it). An
 * unrecognised template is RC_ERR_UNSUPPORTED "the model's chat template
 * (WHAT) is not one ratiocheck renders (supported: ...); give ... instead". */
rc_status rc_chat_parse(const char *tmpl, size_t len, const char *what, const char *bos, rc_chat **out);
/* The template of the tokenizer's folder (rc_tokenizer_chat_info), with its
 * checks: a template exists and could be read; a bos_token the template
 * writes is set, agrees with special_tokens_map.json and is an added token of
 * tokenizer.json (transformers would otherwise add it as a new token). */
rc_status rc_chat_load(const struct rc_tokenizer *tok, rc_chat **out);
void rc_chat_free(rc_chat *c);

rc_chat_kind rc_chat_kind_of(const rc_chat *c);
/* The default system message the template inserts (NULL: none). */
const char *rc_chat_default_system(const rc_chat *c);
/* e.g. "ChatML (SmolLM2/Qwen2 form)" */
const char *rc_chat_describe(const rc_chat *c);

/* A "messages" value: a non-empty array (at most RC_CHAT_MAX_MESSAGES) of
 * objects with exactly "role" (system, user or assistant) and "content" (a
 * string without NUL). RC_ERR_FORMAT naming the first bad message. */
rc_status rc_chat_check_messages(const json_t *messages);
/* The rendered text (malloc'd, NUL-terminated); checks the messages first. */
rc_status rc_chat_render(const rc_chat *c, const json_t *messages, char **text, size_t *len);
/* Render and tokenize as apply_chat_template(tokenize=True) does: the text
 * with rc_tokenizer_encode(add_special = false). The prompt loader's path. */
rc_status rc_chat_encode(const rc_chat *c, const struct rc_tokenizer *tok, const json_t *messages, char **text,
                         int32_t **ids, int64_t *n);
/* The same from a JSON array's text and the tokenizer alone (rc_chat_load
 * each call): for test suites, e.g. the real-model suite. */
rc_status rc_chat_encode_json(const struct rc_tokenizer *tok, const char *messages_json, size_t len, char **text,
                              int32_t **ids, int64_t *n);

#endif
