/* Chat-formatted prompts: a {"messages": [{"role": ..., "content": ...}]}
 * conversation rendered with the model's chat template, as transformers'
 * tokenizer.apply_chat_template(messages, add_generation_prompt=True,
 * tokenize=True) does: the template's text, tokenized without the
 * post-processor's special tokens (the template writes BOS where it wants
 * it; special-token strings in the text become their ids).
 *
 * The template (tokenizer_config.json "chat_template" or chat_template.jinja,
 * see tokenizer.h) is run by the Jinja subset interpreter of jinja.h with the
 * variables transformers passes: messages, tools = None, documents = None,
 * add_generation_prompt = True, bos_token and eos_token when
 * tokenizer_config.json sets them, and the caller's extra arguments
 * (enable_thinking, ...). strftime_now() formats the local time, as
 * transformers' does. A template that reads another special-token variable
 * (pad_token, unk_token, ...) is refused by name; so is a construct outside
 * the subset. docs/chat-templates.md lists the subset and the templates it
 * was compared on. */
#ifndef RC_CHAT_H
#define RC_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct rc_tokenizer;

#define RC_CHAT_MAX_MESSAGES ((size_t)1 << 20)

typedef struct rc_chat rc_chat;
struct tm;

/* Parse a template (len bytes; `what` names its file in messages). bos / eos
 * are the bos_token / eos_token strings (NULL: not set). RC_ERR_UNSUPPORTED
 * for a construct outside the subset ("chat template: unsupported Jinja
 * construct 'call' in WHAT (line N); give ... instead"), a syntax error, or a
 * special-token variable the template reads and ratiocheck does not pass;
 * RC_ERR_FORMAT for text that is not UTF-8. */
rc_status rc_chat_parse(const char *tmpl, size_t len, const char *what, const char *bos, const char *eos,
                        rc_chat **out);
/* The template of the tokenizer's folder (rc_tokenizer_chat_info), with its
 * checks: a template exists and could be read; a bos_token / eos_token the
 * template reads is set and is a special added token of tokenizer.json
 * (transformers would otherwise add it as a new token), and bos_token agrees
 * with special_tokens_map.json. */
rc_status rc_chat_load(const struct rc_tokenizer *tok, rc_chat **out);
void rc_chat_free(rc_chat *c);
/* Fix the time strftime_now() formats (tests; default: the local time). */
void rc_chat_set_time(rc_chat *c, const struct tm *tm);

/* A "messages" value: a non-empty array (at most RC_CHAT_MAX_MESSAGES) of
 * objects with "role" (system, user or assistant), "content" (a string) and
 * optionally "reasoning_content" (or "thinking" / "reasoning", transformers'
 * aliases: a string or null); no string with NUL. RC_ERR_FORMAT naming the
 * first bad message. */
rc_status rc_chat_check_messages(const json_t *messages);
/* The rendered text (malloc'd, NUL-terminated); checks the messages first.
 * Rendering errors (jinja.h): RC_ERR_FORMAT when the template refuses the
 * conversation with raise_exception, RC_ERR_UNSUPPORTED otherwise. */
rc_status rc_chat_render(const rc_chat *c, const json_t *messages, char **text, size_t *len);
/* The same with extra template arguments (a JSON object, NULL: none), as
 * apply_chat_template(..., **kwargs): e.g. {"enable_thinking": false}. */
rc_status rc_chat_render_with(const rc_chat *c, const json_t *messages, const json_t *kwargs, char **text,
                              size_t *len);
/* Render and tokenize as apply_chat_template(tokenize=True) does: the text
 * with rc_tokenizer_encode(add_special = false). The prompt loader's path. */
rc_status rc_chat_encode(const rc_chat *c, const struct rc_tokenizer *tok, const json_t *messages, char **text,
                         int32_t **ids, int64_t *n);
/* The same with extra template arguments (rc_chat_render_with's kwargs). */
rc_status rc_chat_encode_with(const rc_chat *c, const struct rc_tokenizer *tok, const json_t *messages,
                              const json_t *kwargs, char **text, int32_t **ids, int64_t *n);
/* The same from a JSON array's text and the tokenizer alone (rc_chat_load
 * each call): for test suites, e.g. the real-model suite. */
rc_status rc_chat_encode_json(const struct rc_tokenizer *tok, const char *messages_json, size_t len, char **text,
                              int32_t **ids, int64_t *n);

#endif
