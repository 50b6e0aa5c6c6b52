/* Chat templates: the model's template run by the Jinja subset interpreter
 * (jinja.h) with the variables transformers' apply_chat_template passes
 * (chat.h). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "json_util.h"
#include "tokenizer.h"

struct rc_chat {
    rc_jinja *t;
    char *what;
    char *bos, *eos; /* NULL: not set */
};

/* the special-token variables transformers passes besides bos_token and
 * eos_token (tokenizer.special_tokens_map); ratiocheck does not read them */
static const char *const k_other_tokens[] = {"unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                                             "additional_special_tokens"};

static const char k_hint[] = "; give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead";

/* the current error with the hint appended */
static rc_status with_hint(rc_status st)
{
    char m[1024];
    snprintf(m, sizeof m, "%s", rc_last_error());
    return rc_errorf(st, "%s%s", m, k_hint);
}

void rc_chat_free(rc_chat *c)
{
    if (!c)
        return;
    rc_jinja_free(c->t);
    free(c->what);
    free(c->bos);
    free(c->eos);
    free(c);
}

rc_status rc_chat_parse(const char *tmpl, size_t len, const char *what, const char *bos, const char *eos,
                        rc_chat **out)
{
    *out = NULL;
    rc_jinja *t = NULL;
    rc_status st = rc_jinja_parse(tmpl, len, what, &t);
    if (st == RC_ERR_UNSUPPORTED)
        return with_hint(st);
    if (st != RC_OK)
        return st;
    for (size_t i = 0; i < sizeof k_other_tokens / sizeof k_other_tokens[0]; i++)
        if (rc_jinja_uses(t, k_other_tokens[i])) {
            rc_jinja_free(t);
            return rc_errorf(RC_ERR_UNSUPPORTED, "chat template: %s reads %s, which ratiocheck does not pass%s", what,
                             k_other_tokens[i], k_hint);
        }
    static const char *const toks[] = {"bos_token", "eos_token"};
    const char *vals[] = {bos, eos};
    for (int i = 0; i < 2; i++)
        if (rc_jinja_uses(t, toks[i]) && !vals[i]) {
            rc_jinja_free(t);
            return rc_errorf(RC_ERR_UNSUPPORTED,
                             "the model's chat template (%s) writes %s, which tokenizer_config.json does not set%s", what,
                             toks[i], k_hint);
        }
    rc_chat *c = calloc(1, sizeof *c);
    if (c) {
        c->t = t;
        c->what = strdup(what);
        c->bos = bos ? strdup(bos) : NULL;
        c->eos = eos ? strdup(eos) : NULL;
    }
    if (!c || !c->what || (bos && !c->bos) || (eos && !c->eos)) {
        if (c)
            rc_chat_free(c);
        else
            rc_jinja_free(t);
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    *out = c;
    return RC_OK;
}

rc_status rc_chat_load(const rc_tokenizer *tok, rc_chat **out)
{
    *out = NULL;
    const rc_tokenizer_chat *ci = rc_tokenizer_chat_info(tok);
    if (ci->status != RC_OK)
        return rc_errorf(ci->status, "%s", ci->error);
    if (!ci->template_text) {
        const char *cp = ci->config_path ? ci->config_path : "tokenizer_config.json";
        const char *sl = strrchr(cp, '/');
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "{\"messages\": [...]} needs the model's chat template, and %.*s has none (\"chat_template\" in "
                         "tokenizer_config.json, or chat_template.jinja)%s",
                         sl ? (int)(sl - cp) : 1, sl ? cp : ".", k_hint);
    }
    RC_TRY(rc_chat_parse(ci->template_text, ci->template_len, ci->template_path, ci->bos_token, ci->eos_token, out));
    rc_chat *c = *out;
    rc_status st = RC_OK;
    /* a special token the template writes must be one tokenizer.json knows as such (transformers would otherwise add
     * it to the vocabulary at load) */
    const char *names[] = {"bos_token", "eos_token"}, *vals[] = {c->bos, c->eos};
    for (int i = 0; i < 2 && st == RC_OK; i++) {
        if (!rc_jinja_uses(c->t, names[i]))
            continue;
        bool special;
        if (i == 0 && ci->bos_uncertain)
            st = rc_errorf(RC_ERR_UNSUPPORTED,
                           "the model's chat template (%s) writes bos_token, and special_tokens_map.json names another "
                           "one than %s (or cannot be read)%s",
                           ci->template_path, ci->config_path, k_hint);
        else if (rc_tokenizer_added_id(tok, vals[i], strlen(vals[i]), &special) < 0 || !special)
            st = rc_errorf(RC_ERR_UNSUPPORTED,
                           "the model's chat template (%s) writes %s \"%s\", which is not a special token of "
                           "tokenizer.json%s",
                           ci->template_path, names[i], vals[i], k_hint);
    }
    if (st != RC_OK) {
        rc_chat_free(c);
        *out = NULL;
    }
    return st;
}

void rc_chat_set_time(rc_chat *c, const struct tm *tm) { rc_jinja_set_time(c->t, tm); }

/* ---- messages and rendering ------------------------------------------------- */

static const char *const k_roles[] = {"system", "user", "assistant"};
static const char *const k_reasoning[] = {"reasoning_content", "thinking", "reasoning"};

static bool is_reasoning_key(const char *k)
{
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(k, k_reasoning[i]))
            return true;
    return false;
}

rc_status rc_chat_check_messages(const json_t *messages)
{
    if (!json_is_array(messages))
        return rc_errorf(RC_ERR_FORMAT, "\"messages\" is not an array");
    size_t n = json_array_size(messages);
    if (n == 0)
        return rc_errorf(RC_ERR_FORMAT, "\"messages\" is empty");
    if (n > RC_CHAT_MAX_MESSAGES)
        return rc_errorf(RC_ERR_FORMAT, "\"messages\" has %zu messages, more than %zu", n, RC_CHAT_MAX_MESSAGES);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(messages, i);
        if (!json_is_object(m))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu] is not an object", i);
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)m, key, v)
        {
            if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0 && !is_reasoning_key(key))
                return rc_errorf(RC_ERR_FORMAT,
                                 "messages[%zu] has \"%.40s\": a message has only \"role\" and \"content\" (and an "
                                 "assistant's \"reasoning_content\")",
                                 i, key);
            if (is_reasoning_key(key) && !json_is_string(v) && !json_is_null(v))
                return rc_errorf(RC_ERR_FORMAT, "messages[%zu].%s is not a string", i, key);
            if (json_is_string(v) && memchr(json_string_value(v), '\0', json_string_length(v)) && strcmp(key, "role"))
                return rc_errorf(RC_ERR_FORMAT, "messages[%zu].%s contains a NUL character", i, key);
        }
        const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!role)
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu] has no \"role\"", i);
        if (!json_is_string(role))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].role is not a string", i);
        bool known = false;
        for (size_t r = 0; r < 3 && !known; r++)
            known = json_string_length(role) == strlen(k_roles[r]) && !strcmp(json_string_value(role), k_roles[r]);
        if (!known) {
            const char *rv = json_string_value(role);
            size_t rl = json_string_length(role), k = 0;
            while (k < rl && k < 40 && (unsigned char)rv[k] >= 0x20 && rv[k] != '"' && rv[k] != '\\' &&
                   (unsigned char)rv[k] < 0x80)
                k++;
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].role \"%.*s%s\" is not system, user or assistant", i, (int)k,
                             rv, k < rl ? "..." : "");
        }
        if (!content)
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu] has no \"content\"", i);
        if (!json_is_string(content))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].content is not a string", i);
    }
    return RC_OK;
}

/* the messages as transformers hands them to the template: keys whose value
 * is null dropped, and a message with reasoning (reasoning_content, thinking
 * or reasoning, the first set) gets it as "thinking" first and
 * "reasoning_content" last (_alias_reasoning_fields) */
static json_t *template_messages(const json_t *messages)
{
    json_t *out = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m)
    {
        const json_t *reasoning = NULL;
        for (size_t k = 0; k < 3 && !reasoning; k++) {
            const json_t *r = json_object_get(m, k_reasoning[k]);
            if (r && !json_is_null(r))
                reasoning = r;
        }
        json_t *o = json_object();
        if (!o || !out)
            goto fail;
        if (reasoning && json_object_set(o, "thinking", (json_t *)reasoning))
            goto fail_o;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)m, key, v)
        {
            if (!json_is_null(v) && json_object_set(o, key, v))
                goto fail_o;
        }
        if (reasoning && (json_object_del(o, "reasoning_content"), json_object_set(o, "reasoning_content", (json_t *)reasoning)))
            goto fail_o;
        if (json_array_append_new(out, o))
            goto fail;
        continue;
    fail_o:
        json_decref(o);
        goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

rc_status rc_chat_render_with(const rc_chat *c, const json_t *messages, const json_t *kwargs, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    RC_TRY(rc_chat_check_messages(messages));
    if (kwargs && !json_is_object(kwargs))
        return rc_errorf(RC_ERR_USAGE, "chat template arguments are not a JSON object");
    json_t *vars = json_object(), *msgs = template_messages(messages);
    bool ok = vars && msgs;
    /* {**special_tokens_map, **kwargs}, then messages, tools, documents, add_generation_prompt */
    if (ok && c->bos)
        ok = !json_object_set_new(vars, "bos_token", json_string(c->bos));
    if (ok && c->eos)
        ok = !json_object_set_new(vars, "eos_token", json_string(c->eos));
    if (ok && kwargs)
        ok = !json_object_update(vars, (json_t *)kwargs);
    ok = ok && !json_object_set(vars, "messages", msgs) && !json_object_set_new(vars, "tools", json_null()) &&
         !json_object_set_new(vars, "documents", json_null()) &&
         !json_object_set_new(vars, "add_generation_prompt", json_true());
    json_decref(msgs);
    if (!ok) {
        json_decref(vars);
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    rc_status st = rc_jinja_render(c->t, vars, text, len);
    json_decref(vars);
    return st;
}

rc_status rc_chat_render(const rc_chat *c, const json_t *messages, char **text, size_t *len)
{
    return rc_chat_render_with(c, messages, NULL, text, len);
}

rc_status rc_chat_encode(const rc_chat *c, const rc_tokenizer *tok, const json_t *messages, char **text,
                         int32_t **ids, int64_t *n)
{
    return rc_chat_encode_with(c, tok, messages, NULL, text, ids, n);
}

rc_status rc_chat_encode_with(const rc_chat *c, const rc_tokenizer *tok, const json_t *messages, const json_t *kwargs,
                              char **text, int32_t **ids, int64_t *n)
{
    size_t len;
    *ids = NULL;
    *n = 0;
    RC_TRY(rc_chat_render_with(c, messages, kwargs, text, &len));
    rc_status s = rc_tokenizer_encode(tok, *text, len, false, ids, n);
    if (s != RC_OK) {
        free(*text);
        *text = NULL;
    }
    return s;
}

rc_status rc_chat_encode_json(const rc_tokenizer *tok, const char *messages_json, size_t len, char **text,
                              int32_t **ids, int64_t *n)
{
    *text = NULL;
    *ids = NULL;
    *n = 0;
    json_error_t err;
    json_t *m = json_loadb(messages_json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!m)
        return rc_errorf(RC_ERR_FORMAT, "messages: %s at line %d", err.text, err.line);
    rc_chat *c = NULL;
    rc_status s = rc_chat_check_messages(m);
    if (s == RC_OK)
        s = rc_chat_load(tok, &c);
    if (s == RC_OK)
        s = rc_chat_encode(c, tok, m, text, ids, n);
    rc_chat_free(c);
    json_decref(m);
    return s;
}
