#include "prompts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "tokenizer.h"
#include "util.h"

#define MAX_PROMPT_FILE (256u << 20)
#define MAX_PROMPT_TOKENS (1 << 20)

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

rc_status rc_prompts_load_ids(const char *path, rc_prompts *out)
{
    memset(out, 0, sizeof *out);
    char *buf;
    size_t n;
    RC_TRY(rc_read_file(path, &buf, &n, MAX_PROMPT_FILE));
    if (memchr(buf, '\0', n)) {
        free(buf);
        return rc_errorf(RC_ERR_FORMAT, "%s: contains a NUL byte (expected token ids as text)", path);
    }
    /* pass 1: count prompts and the longest; pass 2: fill */
    rc_status s = RC_OK;
    for (int pass = 0; pass < 2 && s == RC_OK; pass++) {
        int64_t np = 0, line = 0;
        char *p = buf;
        while (*p && s == RC_OK) {
            line++;
            char *eol = strchr(p, '\n');
            char *next = eol ? eol + 1 : p + strlen(p);
            if (eol)
                *eol = '\0';
            char *q = p;
            while (*q == ' ' || *q == '\t' || *q == '\r')
                q++;
            if (*q != '\0' && *q != '#') {
                int64_t cnt = 0;
                while (*q) {
                    while (*q == ' ' || *q == '\t' || *q == '\r')
                        q++;
                    if (!*q)
                        break;
                    errno = 0;
                    char *end;
                    long long v = strtoll(q, &end, 10);
                    if (end == q || (*end && *end != ' ' && *end != '\t' && *end != '\r')) {
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld:%lld: expected a token id, found '%.12s'", path,
                                      (long long)line, (long long)(q - p) + 1, q);
                        break;
                    }
                    if (errno || v < 0 || v > INT32_MAX) {
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld:%lld: token id %.20s is out of range", path,
                                      (long long)line, (long long)(q - p) + 1, q);
                        break;
                    }
                    if (pass == 1)
                        out->tokens[np * out->max_len + cnt] = (int32_t)v;
                    if (++cnt > MAX_PROMPT_TOKENS) {
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: prompt longer than %d tokens", path, (long long)line,
                                      MAX_PROMPT_TOKENS);
                        break;
                    }
                    q = end;
                }
                if (s == RC_OK) {
                    if (pass == 0 && cnt > out->max_len)
                        out->max_len = cnt;
                    if (pass == 1) {
                        out->len[np] = (int32_t)cnt;
                        out->line[np] = line;
                    }
                    np++;
                }
            }
            if (eol)
                *eol = '\n';
            p = next;
        }
        if (s == RC_OK && pass == 0) {
            if (np == 0) {
                s = rc_errorf(RC_ERR_FORMAT, "%s: no prompts (expected one line of token ids per prompt)", path);
                break;
            }
            out->n = np;
            s = rc_calloc((void **)&out->tokens, np * out->max_len, sizeof *out->tokens, path);
            if (s == RC_OK)
                s = rc_calloc((void **)&out->len, np, sizeof *out->len, path);
            if (s == RC_OK)
                s = rc_calloc((void **)&out->line, np, sizeof *out->line, path);
            if (s == RC_OK)
                for (int64_t i = 0; i < np * out->max_len; i++)
                    out->tokens[i] = -1;
        }
    }
    free(buf);
    if (s != RC_OK)
        rc_prompts_free(out);
    return s;
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

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

rc_status rc_prompts_load(const char *path, const rc_tokenizer *tok, rc_prompts *out)
{
    memset(out, 0, sizeof *out);
    if (ends_with(path, ".ids"))
        return rc_prompts_load_ids(path, out);
    bool jsonl = ends_with(path, ".jsonl");
    if (!tok && !jsonl)
        return rc_errorf(RC_ERR_USAGE, "%s: text prompts need the model's tokenizer.json", path);
    char *buf;
    size_t len;
    RC_TRY(rc_read_file(path, &buf, &len, MAX_PROMPT_FILE));
    plist_t l = {0};
    rc_status s = RC_OK;
    int64_t line = 0;
    size_t pos = 0;
    while (pos < len && s == RC_OK) {
        line++;
        size_t eol = pos;
        while (eol < len && buf[eol] != '\n')
            eol++;
        size_t n = eol;
        if (n > pos && buf[n - 1] == '\r')
            n--;
        const char *ln = buf + pos;
        size_t ll = n - pos, bad;
        if (!rc_utf8_valid((const unsigned char *)ln, ll, &bad)) {
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: invalid UTF-8 at byte %zu of the line", path, (long long)line,
                          bad + 1);
            break;
        }
        if (memchr(ln, '\0', ll)) {
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: contains a NUL byte", path, (long long)line);
            break;
        }
        pos = eol + 1;
        int32_t *ids = NULL;
        int64_t nid = 0;
        char *text = NULL;
        if (jsonl) {
            if (ll == 0)
                continue; /* blank lines between records */
            json_t *o = NULL;
            char what[64];
            snprintf(what, sizeof what, "line %lld", (long long)line);
            s = rc_json_parse_object(ln, ll, what, &o);
            if (s != RC_OK) {
                rc_error_prefix(s, "%s", path);
                break;
            }
            const json_t *pr = json_object_get(o, "prompt"), *tk = json_object_get(o, "tokens");
            if (json_is_string(pr) && tok) {
                if (json_string_length(pr) == 0)
                    s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: empty prompt", path, (long long)line);
                else if (memchr(json_string_value(pr), '\0', json_string_length(pr)))
                    s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: the prompt contains a NUL character", path,
                                  (long long)line);
                else if (!(text = strdup(json_string_value(pr))))
                    s = rc_errorf(RC_ERR_NOMEM, "out of memory");
                else
                    s = rc_tokenizer_encode(tok, json_string_value(pr), json_string_length(pr), true, &ids, &nid);
            } else if (json_is_string(pr)) {
                s = rc_errorf(RC_ERR_USAGE, "%s:%lld: text prompts need the model's tokenizer.json", path,
                              (long long)line);
            } else if (json_is_array(tk)) {
                nid = (int64_t)json_array_size(tk);
                ids = malloc(sizeof *ids * (size_t)(nid + 1));
                if (!ids)
                    s = rc_errorf(RC_ERR_NOMEM, "out of memory");
                for (int64_t i = 0; i < nid && s == RC_OK; i++) {
                    const json_t *v = json_array_get(tk, (size_t)i);
                    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: tokens[%lld] is not a token id", path, (long long)line,
                                      (long long)i);
                    else
                        ids[i] = (int32_t)json_integer_value(v);
                }
            } else {
                s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: expected {\"prompt\": \"...\"} or {\"tokens\": [...]}",
                              path, (long long)line);
            }
            json_decref(o);
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
            text = txt;
        }
        if (s == RC_OK && nid == 0)
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: the prompt has no tokens", path, (long long)line);
        if (s == RC_OK && nid > MAX_PROMPT_TOKENS)
            s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: prompt longer than %d tokens", path, (long long)line,
                          MAX_PROMPT_TOKENS);
        if (s == RC_OK) {
            s = pl_add(&l, ids, nid, line, text);
        } else {
            free(ids);
            free(text);
        }
    }
    free(buf);
    if (s == RC_OK && l.n == 0)
        s = rc_errorf(RC_ERR_FORMAT, "%s: no prompts", path);
    if (s == RC_OK) {
        for (int64_t i = 0; i < l.n; i++)
            if (l.lens[i] > out->max_len)
                out->max_len = l.lens[i];
        out->n = l.n;
        s = rc_calloc((void **)&out->tokens, l.n * out->max_len, sizeof *out->tokens, path);
        if (s == RC_OK)
            s = rc_calloc((void **)&out->len, l.n, sizeof *out->len, path);
        if (s == RC_OK)
            s = rc_calloc((void **)&out->line, l.n, sizeof *out->line, path);
        if (s == RC_OK)
            s = rc_calloc((void **)&out->text, l.n, sizeof *out->text, path);
        for (int64_t i = 0; s == RC_OK && i < l.n; i++) {
            for (int64_t t = 0; t < out->max_len; t++)
                out->tokens[i * out->max_len + t] = t < l.lens[i] ? l.toks[i][t] : -1;
            out->len[i] = l.lens[i];
            out->line[i] = l.lines[i];
            out->text[i] = l.texts[i];
            l.texts[i] = NULL;
        }
        if (s != RC_OK)
            rc_prompts_free(out);
    }
    pl_release(&l);
    return s;
}
