/* A Jinja subset interpreter for chat templates, as transformers runs them
 * (utils/chat_template_utils.py: jinja2's ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks, the loopcontrols extension and its
 * {% generation %} tag; tojson, raise_exception, strftime_now, namespace and
 * dict as it defines them).
 *
 * Templates come from a model folder (tokenizer_config.json or
 * chat_template.jinja) and are untrusted: parsing and rendering are bounded
 * (template size, nesting, steps, memory, output) and every failure is one
 * line naming the file. A construct outside the subset is refused by name at
 * parse time ("chat template: unsupported Jinja construct 'call' in FILE
 * (line N)"), whether or not a conversation would reach it.
 *
 * The subset (docs/chat-templates.md lists it in full):
 *   statements  if / elif / else, for (tuple targets, an `if` filter, else,
 *               loop.index / index0 / revindex / revindex0 / first / last /
 *               length / previtem / nextitem / depth / depth0), set (names,
 *               namespace attributes, tuples, {% set x %}...{% endset %}),
 *               break, continue, generation, macro (parameters with
 *               defaults; called by its name, positionally or by keyword,
 *               itself included; its body sees its parameters and the
 *               template's variables, not its caller's loop variables),
 *               comments, whitespace control;
 *   expressions literals (strings with Python's escapes, integers, floats,
 *               true / false / none, lists, tuples, dicts), arithmetic,
 *               ~, comparisons (chained), in / not in, and / or / not,
 *               x if c else y, attributes, subscripts and slices, filters,
 *               tests, calls of the functions, methods and macros;
 *   filters     abs capitalize count d default first float indent int items
 *               join last length list lower map reject rejectattr replace
 *               reverse round safe select selectattr string title tojson trim
 *               unique upper e escape;
 *   tests       boolean callable defined divisibleby eq equalto even false
 *               float ge greaterthan gt in integer iterable le lessthan lower
 *               lt mapping ne none number odd sameas sequence string true
 *               undefined upper, and == != < <= > >=;
 *   functions   range namespace raise_exception strftime_now dict;
 *   methods     str: strip lstrip rstrip split startswith endswith upper
 *               lower title capitalize replace find join; dict: items keys
 *               values get.
 * Refused: call blocks (and caller / varargs / kwargs in a macro), a macro
 * defined inside a for loop or a macro, filter
 * blocks, include, import, extends, block, with, raw, autoescape, do,
 * recursive loops, loop.cycle / loop.changed, other filters, tests, functions
 * and methods. */
#ifndef RC_JINJA_H
#define RC_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "status.h"

#define RC_JINJA_MAX_SOURCE ((size_t)1 << 20)  /* bytes of template text */
#define RC_JINJA_MAX_DEPTH 64                  /* nested blocks; nested expressions */
#define RC_JINJA_MAX_OUTPUT ((size_t)16 << 20) /* bytes of rendered text */
#define RC_JINJA_MAX_MEMORY ((size_t)256 << 20) /* bytes of values made while rendering */
#define RC_JINJA_MAX_STEPS 20000000            /* evaluation steps of one rendering */
#define RC_JINJA_MAX_RANGE 100000              /* items of range(), as jinja2's sandbox */
#define RC_JINJA_MAX_MACROS 64                 /* macros one template defines (names) */

typedef struct rc_jinja rc_jinja;

/* Parse a template (len bytes, valid UTF-8 without control characters but
 * tab and newline; `what` names its file in messages). RC_ERR_UNSUPPORTED for
 * a syntax error or a construct outside the subset, RC_ERR_NOMEM. */
rc_status rc_jinja_parse(const char *src, size_t len, const char *what, rc_jinja **out);
void rc_jinja_free(rc_jinja *t);

/* Whether the template reads the variable `name` anywhere (a Name node). */
bool rc_jinja_uses(const rc_jinja *t, const char *name);

/* The time strftime_now() formats (default: the local time at the call). */
void rc_jinja_set_time(rc_jinja *t, const struct tm *tm);

/* Render with the variables of `vars` (a JSON object: strings, numbers,
 * booleans, null, arrays and objects; key order kept). Errors, one line:
 * RC_ERR_FORMAT when the template calls raise_exception (the message is the
 * template's), RC_ERR_UNSUPPORTED when rendering fails (an undefined value
 * used, a type error, a limit), RC_ERR_NOMEM. */
rc_status rc_jinja_render(const rc_jinja *t, const json_t *vars, char **text, size_t *len);

#endif
