#include "prompts.h"

#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "json_util.h"
#include "tokenizer.h"
#include "util.h"

#define MAX_PROMPT_FILE (256u << 20)

void rc_prompts_free(rc_prompts *p)
{
    for (int64_t i = 0; p->text && i < p->n; i++)
        free(p->text[i]);
    free(p->text);
    free(p->line);
    free(p->tokens);
    free(p->len);
    memset(p, 0, sizeof *p);
}

/* growable list of prompts as token arrays */
typedef struct {
    int32_t **toks;
    int32_t *lens;
    int64_t *lines;
    char **texts;
    int64_t n, cap;
} plist_t;

/* takes ownership of ids and text */
static rc_status pl_add(plist_t *l, int32_t *ids, int64_t n, int64_t line, char *text)
{
    if (l->n == l->cap) {
        int64_t c = l->cap ? 2 * l->cap : 64;
        int32_t **t = realloc(l->toks, (size_t)c * sizeof *t);
        if (t)
            l->toks = t;
        int32_t *ln = t ? realloc(l->lens, (size_t)c * sizeof *ln) : NULL;
        if (ln)
            l->lens = ln;
        int64_t *li = ln ? realloc(l->lines, (size_t)c * sizeof *li) : NULL;
        if (li)
            l->lines = li;
        char **tx = li ? realloc(l->texts, (size_t)c * sizeof *tx) : NULL;
        if (tx)
            l->texts = tx;
        if (!tx) {
            free(ids);
            free(text);
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        }
        l->cap = c;
    }
    l->toks[l->n] = ids;
    l->lens[l->n] = (int32_t)n;
    l->lines[l->n] = line;
    l->texts[l->n] = text;
    l->n++;
    return RC_OK;
}

static void pl_release(plist_t *l)
{
    for (int64_t i = 0; i < l->n; i++) {
        free(l->toks[i]);
        free(l->texts[i]);
    }
    free(l->toks);
    free(l->lens);
    free(l->lines);
    free(l->texts);
}

/* A prompt of n tokens read from path:line: non-empty, at most
 * RC_PROMPT_MAX_TOKENS, and fitting the context. Called before the prompt is
 * stored (and, for token ids, before they are copied). */
static rc_status check_len(const char *path, int64_t line, int64_t n, const rc_prompt_limits *lim)
{
    if (n == 0)
        return rc_errorf(RC_ERR_FORMAT, "%s:%lld: the prompt has no tokens", path, (long long)line);
    if (lim && lim->max_pos > 0 && (n > lim->max_pos || lim->gen_len > lim->max_pos - n))
        return rc_errorf(RC_ERR_USAGE,
                         "%s:%lld: prompt of %lld tokens plus %lld generated tokens exceeds the model's %lld positions",
                         path, (long long)line, (long long)n, (long long)lim->gen_len, (long long)lim->max_pos);
    if (n > RC_PROMPT_MAX_TOKENS)
        return rc_errorf(RC_ERR_FORMAT, "%s:%lld: prompt longer than %lld tokens", path, (long long)line,
                         (long long)RC_PROMPT_MAX_TOKENS);
    return RC_OK;
}

static bool ids_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* one line of a .ids file: [p, e) without its newline. *ids NULL for a blank
 * or comment line. Counted and checked first, then parsed. */
static rc_status ids_line(const char *path, int64_t line, const char *p, const char *e, const rc_prompt_limits *lim,
                          int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    const char *q = p;
    while (q < e && ids_space(*q))
        q++;
    if (q == e || *q == '#')
        return RC_OK;
    /* pass 1: validate every id, count them */
    int64_t cnt = 0;
    for (q = p; q < e;) {
        while (q < e && ids_space(*q))
            q++;
        if (q == e)
            break;
        const char *s = q;
        int64_t v = 0;
        while (q < e && *q >= '0' && *q <= '9') {
            v = v * 10 + (*q - '0');
            q++;
            if (v > INT32_MAX) {
                while (q < e && *q >= '0' && *q <= '9')
                    q++;
                return rc_errorf(RC_ERR_FORMAT, "%s:%lld:%lld: token id %.*s is out of range (0..%d)", path,
                                 (long long)line, (long long)(s - p) + 1, (int)(q - s > 24 ? 24 : q - s), s, INT32_MAX);
            }
        }
        if (q == s || (q < e && !ids_space(*q))) {
            const char *w = s;
            while (w < e && !ids_space(*w) && w - s < 12)
                w++;
            return rc_errorf(RC_ERR_FORMAT, "%s:%lld:%lld: expected a token id, found '%.*s'", path, (long long)line,
                             (long long)(s - p) + 1, (int)(w - s), s);
        }
        cnt++;
        if (cnt > RC_PROMPT_MAX_TOKENS || (lim && lim->max_pos > 0 && cnt > lim->max_pos)) {
            /* count the rest only for the message (no parse, no allocation) */
            for (;;) {
                while (q < e && ids_space(*q))
                    q++;
                if (q == e)
                    break;
                while (q < e && !ids_space(*q))
                    q++;
                cnt++;
            }
            break;
        }
    }
    RC_TRY(check_len(path, line, cnt, lim));
    /* pass 2: the ids (all valid) */
    int32_t *v = malloc((size_t)cnt * sizeof *v);
    if (!v)
        return rc_errorf(RC_ERR_NOMEM, "%s:%lld: out of memory", path, (long long)line);
    int64_t k = 0;
    for (q = p; q < e && k < cnt;) {
        while (q < e && ids_space(*q))
            q++;
        int32_t x = 0;
        while (q < e && *q >= '0' && *q <= '9')
            x = x * 10 + (*q++ - '0');
        v[k++] = x;
    }
    *ids = v;
    *n = cnt;
    return RC_OK;
}

/* pad the list into out (prompts x longest, -1 padding); takes the texts */
static rc_status pad(const char *path, plist_t *l, rc_prompts *out)
{
    int64_t cells;
    for (int64_t i = 0; i < l->n; i++)
        if (l->lens[i] > out->max_len)
            out->max_len = l->lens[i];
    if (!rc_mul_i64(l->n, out->max_len, &cells) || cells > RC_PROMPT_MAX_PADDED)
        return rc_errorf(RC_ERR_NOMEM, "%s: %lld prompts padded to the longest (%lld tokens) are too many tokens (at most %lld)",
                         path, (long long)l->n, (long long)out->max_len, (long long)RC_PROMPT_MAX_PADDED);
    out->n = l->n;
    rc_status s = rc_calloc((void **)&out->tokens, cells, sizeof *out->tokens, path);
    if (s == RC_OK)
        s = rc_calloc((void **)&out->len, l->n, sizeof *out->len, path);
    if (s == RC_OK)
        s = rc_calloc((void **)&out->line, l->n, sizeof *out->line, path);
    if (s == RC_OK)
        s = rc_calloc((void **)&out->text, l->n, sizeof *out->text, path);
    for (int64_t i = 0; s == RC_OK && i < l->n; i++) {
        int32_t *row = out->tokens + i * out->max_len;
        memcpy(row, l->toks[i], (size_t)l->lens[i] * sizeof *row);
        for (int64_t t = l->lens[i]; t < out->max_len; t++)
            row[t] = -1;
        out->len[i] = l->lens[i];
        out->line[i] = l->lines[i];
        out->text[i] = l->texts[i];
        l->texts[i] = NULL;
    }
    if (s != RC_OK)
        rc_prompts_free(out);
    return s;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* chat-template arguments that name a variable ratiocheck sets itself (the
 * conversation, add_generation_prompt true, no tools or documents): refused */
static const char *reserved_kwarg(const json_t *kw)
{
    static const char *const k[] = {"messages", "add_generation_prompt", "tools", "documents", NULL};
    for (int i = 0; k[i]; i++)
        if (json_object_get(kw, k[i]))
            return k[i];
    return NULL;
}

/* --chat-template-kwargs (lim->chat_kwargs) as a JSON object into *out (NULL
 * when not given) */
static rc_status parse_base_kwargs(const rc_prompt_limits *lim, json_t **out)
{
    *out = NULL;
    if (!lim || !lim->chat_kwargs)
        return RC_OK;
    json_error_t err;
    json_t *o = json_loads(lim->chat_kwargs, JSON_REJECT_DUPLICATES, &err);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return rc_errorf(RC_ERR_USAGE, "--chat-template-kwargs: expected a JSON object, e.g. "
                         "'{\"enable_thinking\": false}'%s%s", o ? "" : ": ", o ? "" : err.text);
    }
    const char *r = reserved_kwarg(o);
    if (r) {
        json_decref(o);
        return rc_errorf(RC_ERR_USAGE, "--chat-template-kwargs: \"%s\" is set by ratiocheck, not by an argument", r);
    }
    *out = o;
    return RC_OK;
}

/* a {"messages": [...]} record: checked, the template recognised (once, at
 * the first such line), rendered with the arguments (base, then the
 * record's "chat_template_kwargs" key by key) and tokenized (chat.h) */
static rc_status chat_record(const char *path, int64_t line, const json_t *msgs, const json_t *rec_kw,
                             const json_t *base_kw, const rc_tokenizer *tok, rc_chat **chat, int32_t **ids,
                             int64_t *nid, char **text)
{
    rc_status s = rc_chat_check_messages(msgs);
    json_t *kw = NULL;
    if (s == RC_OK && rec_kw && !json_is_object(rec_kw))
        s = rc_errorf(RC_ERR_FORMAT, "\"chat_template_kwargs\" must be an object");
    else if (s == RC_OK && rec_kw && reserved_kwarg(rec_kw))
        s = rc_errorf(RC_ERR_FORMAT, "\"chat_template_kwargs\": \"%s\" is set by ratiocheck, not by an argument",
                      reserved_kwarg(rec_kw));
    if (s == RC_OK && (rec_kw || base_kw)) {
        kw = base_kw ? json_copy((json_t *)base_kw) : json_object();
        if (!kw || (rec_kw && json_object_update(kw, (json_t *)rec_kw)))
            s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    if (s == RC_OK && !tok)
        s = rc_errorf(RC_ERR_USAGE, "chat prompts need the model's tokenizer.json and chat template");
    if (s == RC_OK && !*chat)
        s = rc_chat_load(tok, chat);
    if (s == RC_OK)
        s = rc_chat_encode_with(*chat, tok, msgs, kw, text, ids, nid);
    json_decref(kw);
    if (s != RC_OK)
        rc_error_prefix(s, "%s:%lld", path, (long long)line);
    return s;
}

/* a {"prompt": ...} / {"tokens": [...]} / {"messages": [...]} record */
static rc_status jsonl_record(const char *path, int64_t line, const char *ln, size_t ll, const rc_tokenizer *tok,
                              const rc_prompt_limits *lim, const json_t *base_kw, rc_chat **chat, int32_t **ids,
                              int64_t *nid, char **text)
{
    json_t *o = NULL;
    char what[64];
    snprintf(what, sizeof what, "line %lld", (long long)line);
    rc_status s = rc_json_parse_object(ln, ll, what, &o);
    if (s != RC_OK)
        return rc_error_prefix(s, "%s", path);
    const json_t *pr = json_object_get(o, "prompt"), *tk = json_object_get(o, "tokens"),
                 *ms = json_object_get(o, "messages"), *kw = json_object_get(o, "chat_template_kwargs");
    if (ms && (pr || tk)) {
        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: give one of \"messages\", \"prompt\" or \"tokens\"", path,
                      (long long)line);
    } else if (kw && !ms) {
        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: \"chat_template_kwargs\" applies to a {\"messages\": [...]} record only",
                      path, (long long)line);
    } else if (ms) {
        s = chat_record(path, line, ms, kw, base_kw, tok, chat, ids, nid, text);
    } else if (json_is_string(pr) && tok) {
        if (json_string_length(pr) == 0)
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: empty prompt", path, (long long)line);
        else if (memchr(json_string_value(pr), '\0', json_string_length(pr)))
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: the prompt contains a NUL character", path, (long long)line);
        else if (!(*text = strdup(json_string_value(pr))))
            s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        else if ((s = rc_tokenizer_encode(tok, json_string_value(pr), json_string_length(pr), true, ids, nid)) != RC_OK)
            rc_error_prefix(s, "%s:%lld", path, (long long)line);
    } else if (json_is_string(pr)) {
        s = rc_errorf(RC_ERR_USAGE, "%s:%lld: text prompts need the model's tokenizer.json", path, (long long)line);
    } else if (json_is_array(tk)) {
        int64_t n = (int64_t)json_array_size(tk);
        s = check_len(path, line, n, lim); /* before anything is copied */
        if (s == RC_OK && !(*ids = malloc(sizeof **ids * (size_t)n)))
            s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < n && s == RC_OK; i++) {
            const json_t *v = json_array_get(tk, (size_t)i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: tokens[%lld] is not a token id", path, (long long)line,
                              (long long)i);
            else
                (*ids)[i] = (int32_t)json_integer_value(v);
        }
        *nid = n;
    } else {
        s = rc_errorf(RC_ERR_FORMAT,
                      "%s:%lld: expected {\"prompt\": \"...\"}, {\"tokens\": [...]} or {\"messages\": [...]}", path,
                      (long long)line);
    }
    json_decref(o);
    return s;
}

static rc_status load(const char *path, const rc_tokenizer *tok, const rc_prompt_limits *lim, bool ids_format,
                      rc_prompts *out)
{
    memset(out, 0, sizeof *out);
    bool jsonl = !ids_format && ends_with(path, ".jsonl");
    if (!tok && !jsonl && !ids_format)
        return rc_errorf(RC_ERR_USAGE, "%s: text prompts need the model's tokenizer.json", path);
    char *buf;
    size_t len;
    json_t *base_kw;
    RC_TRY(parse_base_kwargs(lim, &base_kw));
    rc_status rs = rc_read_file(path, &buf, &len, MAX_PROMPT_FILE);
    if (rs != RC_OK) {
        json_decref(base_kw);
        return rs;
    }
    if (ids_format && memchr(buf, '\0', len)) {
        free(buf);
        json_decref(base_kw);
        return rc_errorf(RC_ERR_FORMAT, "%s: contains a NUL byte (expected token ids as text)", path);
    }
    const int64_t max_prompts = lim && lim->max_prompts > 0 ? lim->max_prompts : INT64_MAX;
    plist_t l = {0};
    rc_chat *chat = NULL; /* the chat template, read at the first {"messages": ...} line */
    rc_status s = RC_OK;
    int64_t line = 0;
    size_t pos = 0;
    while (pos < len && s == RC_OK && l.n < max_prompts) {
        line++;
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t eol = nl ? (size_t)(nl - buf) : len;
        size_t n = eol;
        if (n > pos && buf[n - 1] == '\r')
            n--;
        const char *ln = buf + pos;
        size_t ll = n - pos, bad;
        pos = eol + 1;
        int32_t *ids = NULL;
        int64_t nid = 0;
        char *text = NULL;
        if (ids_format) {
            s = ids_line(path, line, ln, ln + ll, lim, &ids, &nid);
            if (s == RC_OK && ids)
                s = pl_add(&l, ids, nid, line, NULL);
            continue;
        }
        if ((int64_t)ll > RC_PROMPT_MAX_LINE) {
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: line of %zu bytes is longer than the %lld MiB a prompt line may have",
                          path, (long long)line, ll, (long long)(RC_PROMPT_MAX_LINE >> 20));
            break;
        }
        if (!rc_utf8_valid((const unsigned char *)ln, ll, &bad)) {
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: invalid UTF-8 at byte %zu of the line", path, (long long)line,
                          bad + 1);
            break;
        }
        if (memchr(ln, '\0', ll)) {
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: contains a NUL byte", path, (long long)line);
            break;
        }
        if (jsonl) {
            if (ll == 0)
                continue; /* blank lines between records */
            s = jsonl_record(path, line, ln, ll, tok, lim, base_kw, &chat, &ids, &nid, &text);
        } else {
            /* text: \n and \\ escapes */
            char *txt = malloc(ll + 1);
            size_t tl = 0;
            if (!txt) {
                s = rc_errorf(RC_ERR_NOMEM, "out of memory");
                break;
            }
            for (size_t i = 0; i < ll; i++) {
                if (ln[i] == '\\' && i + 1 < ll && (ln[i + 1] == 'n' || ln[i + 1] == '\\')) {
                    txt[tl++] = ln[i + 1] == 'n' ? '\n' : '\\';
                    i++;
                } else {
                    txt[tl++] = ln[i];
                }
            }
            if (tl == 0) {
                free(txt);
                if (pos >= len && ll == 0)
                    break; /* the final newline */
                s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: empty prompt", path, (long long)line);
                break;
            }
            txt[tl] = '\0';
            s = rc_tokenizer_encode(tok, txt, tl, true, &ids, &nid);
            if (s != RC_OK)
                rc_error_prefix(s, "%s:%lld", path, (long long)line);
            text = txt;
        }
        if (s == RC_OK)
            s = check_len(path, line, nid, lim);
        if (s == RC_OK) {
            s = pl_add(&l, ids, nid, line, text);
        } else {
            free(ids);
            free(text);
        }
    }
    free(buf);
    rc_chat_free(chat);
    json_decref(base_kw);
    if (s == RC_OK && l.n == 0)
        s = rc_errorf(RC_ERR_FORMAT, ids_format ? "%s: no prompts (expected one line of token ids per prompt)"
                                                : "%s: no prompts",
                      path);
    if (s == RC_OK)
        s = pad(path, &l, out);
    pl_release(&l);
    return s;
}

rc_status rc_prompts_load_ids(const char *path, rc_prompts *out) { return load(path, NULL, NULL, true, out); }

rc_status rc_prompts_load(const char *path, const rc_tokenizer *tok, const rc_prompt_limits *lim, rc_prompts *out)
{
    return load(path, tok, lim, ends_with(path, ".ids"), out);
}
