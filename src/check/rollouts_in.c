#include "rollouts_in.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json_util.h"
#include "results.h"
#include "util.h"

void rc_rollouts_free(rc_rollout_set *s)
{
    for (int i = 0; i < RC_ROLLOUT_TEXT_KEPT; i++)
        free(s->text[i]);
    free(s->tok);
    free(s->lp);
    free(s->tlp);
    free(s->tok_off);
    free(s->lp_off);
    free(s->plen);
    free(s->rlen);
    free(s->line);
    memset(s, 0, sizeof *s);
}

static const char *const k_fmt_names[] = {"auto", "jsonl", "vllm", "sglang", "h5"};

rc_status rc_rollout_format_parse(const char *name, rc_rollout_format *out)
{
    for (int i = 0; i < (int)(sizeof k_fmt_names / sizeof k_fmt_names[0]); i++)
        if (!strcmp(name, k_fmt_names[i])) {
            *out = (rc_rollout_format)i;
            return RC_OK;
        }
    if (!strcmp(name, "trl") || !strcmp(name, "verl"))
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "--format %s: %s's rollout dumps hold text, not token ids and log-probs (README \"Check "
                         "your own engine\" shows how to log them from its vLLM / SGLang rollout engine)",
                         name, !strcmp(name, "trl") ? "TRL" : "verl");
    return rc_errorf(RC_ERR_USAGE, "--format: '%s' is not one of auto, jsonl, vllm, sglang, h5", name);
}

const char *rc_rollout_format_name(rc_rollout_format f)
{
    return (unsigned)f < sizeof k_fmt_names / sizeof k_fmt_names[0] ? k_fmt_names[f] : "?";
}

const char *rc_rollout_where(const rc_rollout_set *s, const char *path, int64_t i, char *buf, size_t n)
{
    const long long l = i >= 0 && i < s->n ? (long long)s->line[i] : 0;
    if (s->format == RC_RFMT_H5)
        snprintf(buf, n, "%s: sequence %lld", path, (long long)i);
    else if (s->whole_file)
        snprintf(buf, n, "%s: record %lld", path, l);
    else
        snprintf(buf, n, "%s:%lld", path, l);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* growable scratch vectors for one record                                   */

typedef struct {
    int32_t *v;
    int64_t n, cap;
} i32vec;
typedef struct {
    float *v;
    int64_t n, cap;
} f32vec;

static rc_status grow(void **p, int64_t *cap, int64_t need, size_t sz)
{
    if (need <= *cap)
        return RC_OK;
    int64_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    int64_t bytes;
    if (!rc_mul_i64(c, (int64_t)sz, &bytes) || bytes > RC_MAX_ALLOC)
        return rc_errorf(RC_ERR_NOMEM, "rollouts: %lld elements are too many to allocate", (long long)c);
    void *q = realloc(*p, (size_t)bytes);
    if (!q)
        return rc_errorf(RC_ERR_NOMEM, "rollouts: out of memory (%lld bytes)", (long long)bytes);
    *p = q;
    *cap = c;
    return RC_OK;
}

static rc_status i32_push(i32vec *a, int32_t x)
{
    RC_TRY(grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v));
    a->v[a->n++] = x;
    return RC_OK;
}

static rc_status f32_push(f32vec *a, float x)
{
    RC_TRY(grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v));
    a->v[a->n++] = x;
    return RC_OK;
}

/* ------------------------------------------------------------------------ */
/* the loader's state                                                        */

typedef struct {
    const char *path;
    int64_t vocab, max_pos;
    rc_rollout_set *s;
    int64_t line;        /* the current record's line (or record number) */
    char where[1200];    /* "FILE:LINE" of the current record */
    i32vec pids, rids;
    f32vec lps;
    f32vec tlps;         /* the record's trainer_logprobs */
    bool rec_trainer;    /* the current record carries them */
    int trainer_seen;    /* 0: no record yet, 1: records carry them, -1: records do not */
    int64_t line_trainer; /* the first record's line */
    const char *text; /* the current rollout's response text, or NULL */
    rc_rollouts_progress_fn progress;
    void *pctx;
    /* the settings seen so far, and where */
    bool have_t, have_p, have_k, have_kind;
    int64_t line_t, line_p, line_k, line_kind;
    int64_t total_n, total_tok; /* rollouts and tokens committed so far, all chunks */
} loader;

static void set_where(loader *L, int64_t line)
{
    L->line = line;
    if (L->s->whole_file)
        snprintf(L->where, sizeof L->where, "%s: record %lld", L->path, (long long)line);
    else
        snprintf(L->where, sizeof L->where, "%s:%lld", L->path, (long long)line);
}

/* a token id at field[idx] */
static rc_status take_id(loader *L, const json_t *v, const char *field, int64_t idx, i32vec *dst)
{
    if (!json_is_integer(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] is not an integer token id", L->where, field, (long long)idx);
    const json_int_t x = json_integer_value(v);
    if (x < 0 || x >= L->vocab || x > INT32_MAX)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] = %lld is outside the model's vocabulary [0, %lld)", L->where,
                         field, (long long)idx, (long long)x, (long long)L->vocab);
    if (dst->n >= RC_ROLLOUT_MAX_TOKENS)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s has more than %lld tokens", L->where, field,
                         (long long)RC_ROLLOUT_MAX_TOKENS);
    return i32_push(dst, (int32_t)x);
}

static rc_status take_ids(loader *L, const json_t *arr, const char *field, i32vec *dst)
{
    if (!json_is_array(arr))
        return rc_errorf(RC_ERR_FORMAT, "%s: %s is not an array of token ids", L->where, field);
    for (size_t i = 0; i < json_array_size(arr); i++)
        RC_TRY(take_id(L, json_array_get(arr, i), field, (int64_t)i, dst));
    return RC_OK;
}

/* a logged log-prob at field[idx]: a finite number <= RC_LOGPROB_POS_TOL */
static rc_status take_lp_to(loader *L, const json_t *v, const char *field, int64_t idx, f32vec *dst)
{
    if (json_is_null(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] is null, not a log-probability", L->where, field,
                         (long long)idx);
    if (!json_is_number(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] is not a number", L->where, field, (long long)idx);
    const double d = json_number_value(v);
    if (!isfinite(d) || d < -1e30)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] = %g is not a finite log-probability", L->where, field,
                         (long long)idx, d);
    if (d > RC_LOGPROB_POS_TOL)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] = %g is positive: not a log-probability (logged "
                         "probabilities or logits?)", L->where, field, (long long)idx, d);
    if (dst->n >= RC_ROLLOUT_MAX_TOKENS)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s has more than %lld values", L->where, field,
                         (long long)RC_ROLLOUT_MAX_TOKENS);
    return f32_push(dst, (float)d);
}

static rc_status take_lp(loader *L, const json_t *v, const char *field, int64_t idx)
{
    return take_lp_to(L, v, field, idx, &L->lps);
}

/* The optional sampling settings of a record: one value per file. */
static rc_status take_settings(loader *L, const json_t *o)
{
    rc_rollout_set *s = L->s;
    bool pr;
    double t, p;
    int64_t k;
    const char *kind;
    RC_TRY(rc_json_get_num(o, "temperature", L->where, 1e-6, 1e6, 1.0, &t, &pr));
    if (pr) {
        if (L->have_t && t != s->temperature)
            return rc_errorf(RC_ERR_FORMAT, "%s: temperature %g differs from the %g of line %lld (one setting per "
                             "file: split it)", L->where, t, s->temperature, (long long)L->line_t);
        if (!L->have_t)
            L->line_t = L->line;
        L->have_t = true;
        s->temperature = t;
    }
    RC_TRY(rc_json_get_num(o, "top_p", L->where, 1e-9, 1.0, 1.0, &p, &pr));
    if (pr) {
        if (L->have_p && p != s->top_p)
            return rc_errorf(RC_ERR_FORMAT, "%s: top_p %g differs from the %g of line %lld (one setting per file)",
                             L->where, p, s->top_p, (long long)L->line_p);
        if (!L->have_p)
            L->line_p = L->line;
        L->have_p = true;
        s->top_p = p;
    }
    RC_TRY(rc_json_get_int(o, "top_k", L->where, -1, INT32_MAX, 0, &k, &pr));
    if (pr) {
        if (k < 0)
            k = 0; /* vLLM's -1: off */
        if (L->have_k && k != s->top_k)
            return rc_errorf(RC_ERR_FORMAT, "%s: top_k %lld differs from the %lld of line %lld (one setting per file)",
                             L->where, (long long)k, (long long)s->top_k, (long long)L->line_k);
        if (!L->have_k)
            L->line_k = L->line;
        L->have_k = true;
        s->top_k = k;
    }
    RC_TRY(rc_json_get_str(o, "logprobs_kind", L->where, NULL, &kind, &pr));
    if (pr) {
        rc_logprob_kind kd;
        if (!strcmp(kind, "raw") || !strcmp(kind, "raw_logprobs"))
            kd = RC_LP_RAW;
        else if (!strcmp(kind, "processed") || !strcmp(kind, "processed_logprobs"))
            kd = RC_LP_PROCESSED;
        else
            return rc_errorf(RC_ERR_FORMAT, "%s: logprobs_kind \"%.40s\" is not \"raw\" or \"processed\"", L->where,
                             kind);
        if (L->have_kind && kd != s->kind)
            return rc_errorf(RC_ERR_FORMAT, "%s: logprobs_kind differs from line %lld's (one kind per file)", L->where,
                             (long long)L->line_kind);
        if (!L->have_kind)
            L->line_kind = L->line;
        L->have_kind = true;
        s->kind = kd;
        s->kind_given = true;
    }
    return RC_OK;
}

/* Append the record's pids / rids / lps as one rollout. */
static rc_status commit(loader *L)
{
    rc_rollout_set *s = L->s;
    const int64_t np = L->pids.n, nr = L->rids.n;
    if (nr != L->lps.n)
        return rc_errorf(RC_ERR_FORMAT, "%s: %lld response token ids but %lld log-probs (they must pair one to one)",
                         L->where, (long long)nr, (long long)L->lps.n);
    if (L->rec_trainer && nr != L->tlps.n)
        return rc_errorf(RC_ERR_FORMAT, "%s: %lld response token ids but %lld trainer_logprobs (they must pair one "
                         "to one)", L->where, (long long)nr, (long long)L->tlps.n);
    if (L->trainer_seen != 0 && (L->trainer_seen > 0) != L->rec_trainer)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s trainer_logprobs but %s %lld %s (every record or none)", L->where,
                         L->rec_trainer ? "has" : "has no", s->whole_file ? "record" : "line",
                         (long long)L->line_trainer, L->rec_trainer ? "has none" : "has them");
    if (L->trainer_seen == 0) {
        L->trainer_seen = L->rec_trainer ? 1 : -1;
        L->line_trainer = L->line;
    }
    s->has_trainer = L->trainer_seen > 0;
    if (np < 1)
        return rc_errorf(RC_ERR_FORMAT, "%s: the prompt has no token ids (the first response token needs one)",
                         L->where);
    if (L->max_pos > 0 && np + nr > L->max_pos)
        return rc_errorf(RC_ERR_FORMAT, "%s: prompt of %lld tokens plus %lld response tokens exceeds the model's "
                         "%lld positions", L->where, (long long)np, (long long)nr, (long long)L->max_pos);
    if (L->total_n >= RC_ROLLOUT_MAX_COUNT)
        return rc_errorf(RC_ERR_FORMAT, "%s: more than %lld rollouts in one file", L->where,
                         (long long)RC_ROLLOUT_MAX_COUNT);
    const int64_t t0 = s->n ? s->tok_off[s->n] : 0, l0 = s->n ? s->lp_off[s->n] : 0;
    if (L->total_tok + np + nr > RC_ROLLOUT_MAX_TOTAL)
        return rc_errorf(RC_ERR_FORMAT, "%s: more than %lld tokens in one file", L->where,
                         (long long)RC_ROLLOUT_MAX_TOTAL);
    if (s->n + 2 > s->cap) {
        int64_t c = s->cap ? s->cap : 1024;
        while (c < s->n + 2)
            c *= 2;
        int64_t c1 = s->cap, c2 = s->cap, c3 = s->cap, c4 = s->cap, c5 = s->cap;
        RC_TRY(grow((void **)&s->tok_off, &c1, c, sizeof *s->tok_off));
        RC_TRY(grow((void **)&s->lp_off, &c2, c, sizeof *s->lp_off));
        RC_TRY(grow((void **)&s->plen, &c3, c, sizeof *s->plen));
        RC_TRY(grow((void **)&s->rlen, &c4, c, sizeof *s->rlen));
        RC_TRY(grow((void **)&s->line, &c5, c, sizeof *s->line));
        s->cap = c1;
    }
    RC_TRY(grow((void **)&s->tok, &s->tok_cap, t0 + np + nr, sizeof *s->tok));
    const int64_t lp_cap = s->lp_cap;
    RC_TRY(grow((void **)&s->lp, &s->lp_cap, l0 + nr + 1, sizeof *s->lp));
    if (L->rec_trainer && (!s->tlp || s->lp_cap != lp_cap)) { /* laid out as lp, at lp's capacity */
        float *q = realloc(s->tlp, (size_t)s->lp_cap * sizeof *s->tlp);
        if (!q)
            return rc_errorf(RC_ERR_NOMEM, "rollouts: out of memory");
        s->tlp = q;
    }
    memcpy(s->tok + t0, L->pids.v, (size_t)np * sizeof *s->tok);
    if (nr)
        memcpy(s->tok + t0 + np, L->rids.v, (size_t)nr * sizeof *s->tok);
    if (nr)
        memcpy(s->lp + l0, L->lps.v, (size_t)nr * sizeof *s->lp);
    if (nr && L->rec_trainer)
        memcpy(s->tlp + l0, L->tlps.v, (size_t)nr * sizeof *s->tlp);
    if (s->n == 0)
        s->tok_off[0] = s->lp_off[0] = 0;
    s->tok_off[s->n + 1] = t0 + np + nr;
    s->lp_off[s->n + 1] = l0 + nr;
    s->plen[s->n] = (int32_t)np;
    s->rlen[s->n] = (int32_t)nr;
    s->line[s->n] = L->line;
    if (L->total_n < RC_ROLLOUT_TEXT_KEPT && L->text && !(s->text[s->n] = strdup(L->text)))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    L->text = NULL;
    s->prompt_max = np > s->prompt_max ? np : s->prompt_max;
    s->resp_max = nr > s->resp_max ? nr : s->resp_max;
    s->n++;
    L->total_n++;
    L->total_tok += np + nr;
    L->pids.n = L->rids.n = L->lps.n = L->tlps.n = 0;
    L->rec_trainer = false;
    return RC_OK;
}

/* the response text at key of o, when it is a string */
static void take_text(loader *L, const json_t *o, const char *key)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    L->text = json_is_string(v) ? json_string_value(v) : NULL;
}

static const json_t *need(loader *L, const json_t *o, const char *key, rc_status *st)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        *st = rc_errorf(RC_ERR_FORMAT, "%s: no \"%s\"", L->where, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* ------------------------------------------------------------------------ */
/* the formats                                                               */

/* jsonl: {"prompt_ids": [..], "response_ids": [..], "logprobs": [..], ...} */
static rc_status rec_jsonl(loader *L, const json_t *o)
{
    rc_status st = RC_OK;
    const json_t *p = need(L, o, "prompt_ids", &st), *r = p ? need(L, o, "response_ids", &st) : NULL,
                 *l = r ? need(L, o, "logprobs", &st) : NULL;
    if (!l)
        return st;
    RC_TRY(take_settings(L, o));
    RC_TRY(take_ids(L, p, "prompt_ids", &L->pids));
    RC_TRY(take_ids(L, r, "response_ids", &L->rids));
    take_text(L, o, "response_text");
    if (!json_is_array(l))
        return rc_errorf(RC_ERR_FORMAT, "%s: logprobs is not an array", L->where);
    for (size_t i = 0; i < json_array_size(l); i++)
        RC_TRY(take_lp(L, json_array_get(l, i), "logprobs", (int64_t)i));
    const json_t *tl = json_object_get(o, "trainer_logprobs");
    if (tl && !json_is_null(tl)) { /* the user's trainer's log-probs of the same tokens */
        if (!json_is_array(tl))
            return rc_errorf(RC_ERR_FORMAT, "%s: trainer_logprobs is not an array", L->where);
        for (size_t i = 0; i < json_array_size(tl); i++)
            RC_TRY(take_lp_to(L, json_array_get(tl, i), "trainer_logprobs", (int64_t)i, &L->tlps));
        L->rec_trainer = true;
    }
    return commit(L);
}

/* "token_id:N" (vLLM's return_tokens_as_token_ids) */
static rc_status token_id_str(loader *L, const json_t *v, const char *field, int64_t idx)
{
    const char *t = json_is_string(v) ? json_string_value(v) : NULL;
    if (!t || strncmp(t, "token_id:", 9) != 0 || t[9] < '0' || t[9] > '9')
        return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] is not \"token_id:N\": request with "
                         "return_tokens_as_token_ids=true or return_token_ids=true", L->where, field, (long long)idx);
    long long x = 0;
    for (const char *c = t + 9; *c; c++) {
        if (*c < '0' || *c > '9' || x > (long long)INT32_MAX)
            return rc_errorf(RC_ERR_FORMAT, "%s: %s[%lld] = \"%.40s\" is not \"token_id:N\"", L->where, field,
                             (long long)idx, t);
        x = x * 10 + (*c - '0');
    }
    json_t *n = json_integer(x);
    if (!n)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_status st = take_id(L, n, field, idx, &L->rids);
    json_decref(n);
    return st;
}

/* vLLM server: a completions or chat completions response */
static rc_status rec_vllm_server(loader *L, const json_t *o)
{
    const json_t *ch = json_object_get(o, "choices");
    if (!json_is_array(ch) || json_array_size(ch) == 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: \"choices\" is not a non-empty array", L->where);
    RC_TRY(take_settings(L, o));
    for (size_t c = 0; c < json_array_size(ch); c++) {
        const json_t *cj = json_array_get(ch, c);
        if (!json_is_object(cj))
            return rc_errorf(RC_ERR_FORMAT, "%s: choices[%zu] is not an object", L->where, c);
        const json_t *pids = json_object_get(cj, "prompt_token_ids");
        if (!pids || json_is_null(pids))
            pids = json_object_get(o, "prompt_token_ids");
        if (!pids || json_is_null(pids))
            return rc_errorf(RC_ERR_FORMAT, "%s: choices[%zu] has no prompt_token_ids (request with "
                             "return_token_ids=true, vLLM >= 0.10.2, or add them to the record)", L->where, c);
        RC_TRY(take_ids(L, pids, "prompt_token_ids", &L->pids));
        const json_t *lpo = json_object_get(cj, "logprobs");
        if (!json_is_object(lpo))
            return rc_errorf(RC_ERR_FORMAT, "%s: choices[%zu] has no logprobs (request with logprobs=0 or more)",
                             L->where, c);
        const json_t *tids = json_object_get(cj, "token_ids");
        const json_t *content = json_object_get(lpo, "content");
        if (json_is_array(content)) { /* chat: logprobs.content[] = {token, logprob, ...} */
            for (size_t i = 0; i < json_array_size(content); i++) {
                const json_t *e = json_array_get(content, i);
                if (!json_is_object(e))
                    return rc_errorf(RC_ERR_FORMAT, "%s: logprobs.content[%zu] is not an object", L->where, i);
                RC_TRY(take_lp(L, json_object_get(e, "logprob"), "logprobs.content[].logprob", (int64_t)i));
                if (!tids || json_is_null(tids))
                    RC_TRY(token_id_str(L, json_object_get(e, "token"), "logprobs.content[].token", (int64_t)i));
            }
        } else { /* completions: logprobs.{tokens, token_logprobs} */
            const json_t *tl = json_object_get(lpo, "token_logprobs"), *tk = json_object_get(lpo, "tokens");
            if (!json_is_array(tl))
                return rc_errorf(RC_ERR_FORMAT, "%s: choices[%zu].logprobs has neither content (chat) nor "
                                 "token_logprobs (completions)", L->where, c);
            for (size_t i = 0; i < json_array_size(tl); i++)
                RC_TRY(take_lp(L, json_array_get(tl, i), "token_logprobs", (int64_t)i));
            if (!tids || json_is_null(tids)) {
                if (!json_is_array(tk))
                    return rc_errorf(RC_ERR_FORMAT, "%s: choices[%zu] has neither token_ids nor logprobs.tokens",
                                     L->where, c);
                for (size_t i = 0; i < json_array_size(tk); i++)
                    RC_TRY(token_id_str(L, json_array_get(tk, i), "logprobs.tokens", (int64_t)i));
            }
        }
        if (tids && !json_is_null(tids))
            RC_TRY(take_ids(L, tids, "token_ids", &L->rids));
        if (json_is_array(content))
            take_text(L, json_object_get(cj, "message"), "content");
        else
            take_text(L, cj, "text");
        RC_TRY(commit(L));
    }
    return RC_OK;
}

/* vLLM offline: a RequestOutput as JSON: prompt_token_ids, outputs[].token_ids,
 * outputs[].logprobs = [{"ID": {"logprob": x, ...} or x, ...}, ...] */
static rc_status rec_vllm_offline(loader *L, const json_t *o)
{
    rc_status st = RC_OK;
    const json_t *pids = need(L, o, "prompt_token_ids", &st), *outs = pids ? need(L, o, "outputs", &st) : NULL;
    if (!outs)
        return st;
    if (!json_is_array(outs) || json_array_size(outs) == 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: \"outputs\" is not a non-empty array", L->where);
    RC_TRY(take_settings(L, o));
    for (size_t c = 0; c < json_array_size(outs); c++) {
        const json_t *oj = json_array_get(outs, c);
        if (!json_is_object(oj))
            return rc_errorf(RC_ERR_FORMAT, "%s: outputs[%zu] is not an object", L->where, c);
        RC_TRY(take_ids(L, pids, "prompt_token_ids", &L->pids));
        const json_t *tids = need(L, oj, "token_ids", &st), *lps = tids ? json_object_get(oj, "logprobs") : NULL;
        if (!tids)
            return st;
        if (!json_is_array(lps))
            return rc_errorf(RC_ERR_FORMAT, "%s: outputs[%zu].logprobs is missing (SamplingParams(logprobs=0))",
                             L->where, c);
        RC_TRY(take_ids(L, tids, "outputs[].token_ids", &L->rids));
        const size_t n = json_array_size(lps);
        for (size_t i = 0; i < n; i++) {
            const json_t *d = json_array_get(lps, i);
            if (!json_is_object(d))
                return rc_errorf(RC_ERR_FORMAT, "%s: outputs[%zu].logprobs[%zu] is not an object {token_id: Logprob}",
                                 L->where, c, i);
            if (i >= (size_t)L->rids.n) /* more log-probs than tokens: commit() names the counts */
                return rc_errorf(RC_ERR_FORMAT, "%s: %lld response token ids but %zu log-probs (they must pair one "
                                 "to one)", L->where, (long long)L->rids.n, n);
            char key[16];
            snprintf(key, sizeof key, "%d", (int)L->rids.v[i]);
            const json_t *e = json_object_get(d, key);
            if (!e)
                return rc_errorf(RC_ERR_FORMAT, "%s: outputs[%zu].logprobs[%zu] has no entry for the sampled token "
                                 "%s", L->where, c, i, key);
            if (json_is_object(e))
                e = json_object_get(e, "logprob");
            RC_TRY(take_lp(L, e ? e : json_null(), "outputs[].logprobs", (int64_t)i));
        }
        take_text(L, oj, "text");
        RC_TRY(commit(L));
    }
    return RC_OK;
}

/* SGLang /generate: meta_info.output_token_logprobs = [[logprob, id, text], ...];
 * the prompt from "input_ids" / "prompt_ids" or meta_info.input_token_logprobs */
static rc_status rec_sglang(loader *L, const json_t *o)
{
    rc_status st = RC_OK;
    const json_t *mi = need(L, o, "meta_info", &st);
    if (!mi)
        return st;
    if (!json_is_object(mi))
        return rc_errorf(RC_ERR_FORMAT, "%s: meta_info is not an object", L->where);
    RC_TRY(take_settings(L, o));
    const json_t *pids = json_object_get(o, "input_ids");
    if (!pids || json_is_null(pids))
        pids = json_object_get(o, "prompt_ids");
    if (pids && !json_is_null(pids)) {
        RC_TRY(take_ids(L, pids, "input_ids", &L->pids));
    } else {
        const json_t *in = json_object_get(mi, "input_token_logprobs");
        if (!json_is_array(in))
            return rc_errorf(RC_ERR_FORMAT, "%s: no prompt ids: add \"input_ids\" to the record, or request with "
                             "return_logprob=true, logprob_start_len=0 (meta_info.input_token_logprobs)", L->where);
        for (size_t i = 0; i < json_array_size(in); i++) {
            const json_t *e = json_array_get(in, i);
            if (!json_is_array(e) || json_array_size(e) < 2)
                return rc_errorf(RC_ERR_FORMAT, "%s: meta_info.input_token_logprobs[%zu] is not [logprob, id, ...]",
                                 L->where, i);
            RC_TRY(take_id(L, json_array_get(e, 1), "meta_info.input_token_logprobs[][1]", (int64_t)i, &L->pids));
        }
        int64_t npt;
        bool pr;
        RC_TRY(rc_json_get_int(mi, "prompt_tokens", L->where, 0, INT32_MAX, 0, &npt, &pr));
        if (pr && npt != L->pids.n)
            return rc_errorf(RC_ERR_FORMAT, "%s: meta_info.input_token_logprobs has %lld ids but prompt_tokens is "
                             "%lld: request with logprob_start_len=0", L->where, (long long)L->pids.n, (long long)npt);
    }
    const json_t *out = json_object_get(mi, "output_token_logprobs");
    if (!json_is_array(out))
        return rc_errorf(RC_ERR_FORMAT, "%s: no meta_info.output_token_logprobs (request with return_logprob=true)",
                         L->where);
    for (size_t i = 0; i < json_array_size(out); i++) {
        const json_t *e = json_array_get(out, i);
        if (!json_is_array(e) || json_array_size(e) < 2)
            return rc_errorf(RC_ERR_FORMAT, "%s: meta_info.output_token_logprobs[%zu] is not [logprob, id, text]",
                             L->where, i);
        RC_TRY(take_lp(L, json_array_get(e, 0), "meta_info.output_token_logprobs", (int64_t)i));
        RC_TRY(take_id(L, json_array_get(e, 1), "meta_info.output_token_logprobs[][1]", (int64_t)i, &L->rids));
    }
    const json_t *oids = json_object_get(o, "output_ids");
    if (json_is_array(oids)) { /* when present it must be the same tokens */
        if ((int64_t)json_array_size(oids) != L->rids.n)
            return rc_errorf(RC_ERR_FORMAT, "%s: output_ids has %zu tokens but output_token_logprobs %lld", L->where,
                             json_array_size(oids), (long long)L->rids.n);
        for (size_t i = 0; i < json_array_size(oids); i++) {
            const json_t *v = json_array_get(oids, i);
            if (!json_is_integer(v) || json_integer_value(v) != L->rids.v[i])
                return rc_errorf(RC_ERR_FORMAT, "%s: output_ids[%zu] differs from output_token_logprobs[%zu]'s id",
                                 L->where, i, i);
        }
    }
    take_text(L, o, "text");
    return commit(L);
}

/* which format a record is, by its keys (RC_RFMT_AUTO: none fits; *why says
 * what it looks like when it is a known format without ids) */
static rc_rollout_format sniff_record(const json_t *o, const char **why)
{
    *why = NULL;
    if (json_object_get(o, "response_ids"))
        return RC_RFMT_JSONL;
    if (json_object_get(o, "choices") || json_object_get(o, "outputs"))
        return RC_RFMT_VLLM;
    if (json_object_get(o, "meta_info"))
        return RC_RFMT_SGLANG;
    if (json_object_get(o, "input") && json_object_get(o, "output"))
        *why = "a verl rollout_data_dir dump (\"input\", \"output\": text, no token ids or log-probs)";
    else if (json_object_get(o, "completion") || json_object_get(o, "prompt"))
        *why = "a TRL completions log (\"prompt\", \"completion\": text, no token ids or log-probs)";
    return RC_RFMT_AUTO;
}

static rc_status do_record(loader *L, const json_t *o)
{
    if (!json_is_object(o))
        return rc_errorf(RC_ERR_FORMAT, "%s: the record is not a JSON object", L->where);
    L->pids.n = L->rids.n = L->lps.n = L->tlps.n = 0;
    L->rec_trainer = false;
    L->text = NULL;
    switch (L->s->format) {
    case RC_RFMT_JSONL:
        return rec_jsonl(L, o);
    case RC_RFMT_VLLM:
        if (json_object_get(o, "choices"))
            return rec_vllm_server(L, o);
        if (json_object_get(o, "outputs"))
            return rec_vllm_offline(L, o);
        return rc_errorf(RC_ERR_FORMAT, "%s: neither \"choices\" (a server response) nor \"outputs\" (an offline "
                         "RequestOutput)", L->where);
    case RC_RFMT_SGLANG:
        return rec_sglang(L, o);
    default:
        return rc_errorf(RC_ERR_INTERNAL, "rollouts: format not decided");
    }
}

/* Decide the format from the first record (auto) */
static rc_status decide(loader *L, const json_t *o)
{
    if (L->s->format != RC_RFMT_AUTO)
        return RC_OK;
    const char *why = NULL;
    rc_rollout_format f = json_is_object(o) ? sniff_record(o, &why) : RC_RFMT_AUTO;
    if (f == RC_RFMT_AUTO) {
        if (why)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: this looks like %s; README \"Check your own engine\" shows "
                             "how to log ids and log-probs", L->where, why);
        return rc_errorf(RC_ERR_FORMAT, "%s: not a rollout record of a known format (jsonl: \"response_ids\", vllm: "
                         "\"choices\" / \"outputs\", sglang: \"meta_info\")", L->where);
    }
    L->s->format = f;
    return RC_OK;
}

/* a parse error; Python's json.dumps writes NaN / Infinity for non-finite floats */
static rc_status parse_error(loader *L, const char *txt, size_t n, const json_error_t *e)
{
    static const char *const bad[] = {"NaN", "Infinity"};
    for (int i = 0; i < 2; i++) {
        const size_t bl = strlen(bad[i]);
        for (size_t k = 0; k + bl <= n; k++)
            if (!memcmp(txt + k, bad[i], bl))
                return rc_errorf(RC_ERR_FORMAT, "%s: %s in the record (Python's json.dumps of a non-finite "
                                 "float): a logged log-prob that is not a log-probability", L->where, bad[i]);
    }
    return rc_errorf(RC_ERR_FORMAT, "%s: invalid JSON at column %d: %s", L->where, e->column, e->text);
}

static rc_status do_text(loader *L, const char *txt, size_t n)
{
    size_t bad;
    if (!rc_utf8_valid((const unsigned char *)txt, n, &bad))
        return rc_errorf(RC_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", L->where, bad + 1);
    json_error_t e;
    json_t *o = json_loadb(txt, n, JSON_REJECT_DUPLICATES, &e);
    if (!o)
        return parse_error(L, txt, n, &e);
    rc_status st = decide(L, o);
    if (st == RC_OK)
        st = do_record(L, o);
    json_decref(o);
    return st;
}

/* ------------------------------------------------------------------------ */
/* reading                                                                   */

typedef struct {
    int fd;
    char *buf;
    size_t cap, len, pos; /* bytes [pos, len) not yet returned */
    bool eof;
} lreader;

/* The next line (without '\n' / '\r\n') in *ln, *n; false at the end.
 * A line longer than max is an error. */
static rc_status next_line(lreader *r, const char *path, int64_t line, size_t max, const char **ln, size_t *n,
                           bool *got)
{
    *got = false;
    for (;;) {
        char *nl = r->len > r->pos ? memchr(r->buf + r->pos, '\n', r->len - r->pos) : NULL;
        if (nl || (r->eof && r->len > r->pos)) {
            size_t e = nl ? (size_t)(nl - r->buf) : r->len;
            *ln = r->buf + r->pos;
            *n = e - r->pos;
            r->pos = nl ? e + 1 : e;
            if (*n > 0 && (*ln)[*n - 1] == '\r')
                (*n)--;
            *got = true;
            return RC_OK;
        }
        if (r->eof)
            return RC_OK;
        if (r->len - r->pos > max)
            return rc_errorf(RC_ERR_FORMAT, "%s:%lld: line longer than the %lld MiB a record may have", path,
                             (long long)line, (long long)(max >> 20));
        /* move the partial line to the front, then read more */
        if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->len - r->pos);
            r->len -= r->pos;
            r->pos = 0;
        }
        if (r->cap - r->len < (1u << 20)) {
            size_t c = r->cap ? r->cap * 2 : (4u << 20);
            if (c > max + (2u << 20))
                c = max + (2u << 20);
            if (c <= r->cap)
                return rc_errorf(RC_ERR_FORMAT, "%s:%lld: line longer than the %lld MiB a record may have", path,
                                 (long long)line, (long long)(max >> 20));
            char *b = realloc(r->buf, c);
            if (!b)
                return rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
            r->buf = b;
            r->cap = c;
        }
        ssize_t k = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return rc_errorf(RC_ERR_IO, "%s: read error: %s", path, strerror(errno));
        if (k == 0)
            r->eof = true;
        r->len += (size_t)k;
    }
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* The reader: one record at a time from a line file, or from the whole-file
 * JSON value or the results file held since the start, into the chunk. */
enum { READ_LINES, READ_WHOLE, READ_H5 };
struct rc_rollout_reader {
    loader L;
    rc_rollout_set set; /* the current chunk (L.s) */
    int mode;
    bool done, failed;
    /* READ_LINES */
    int fd;
    int64_t size, line, consumed, reported;
    lreader r;
    bool first;
    /* READ_WHOLE: the parsed file, the next element (an array) or 0 / 1 (one object) */
    json_t *whole;
    size_t whole_i;
    /* READ_H5 */
    rc_results h5;
    int64_t h5_q;
};

/* the whole file as one JSON value: an array of records, or one record */
static rc_status open_whole(rc_rollout_reader *R)
{
    loader *L = &R->L;
    char *buf;
    size_t len;
    RC_TRY(rc_read_file(L->path, &buf, &len, (size_t)RC_ROLLOUT_MAX_WHOLE));
    L->s->whole_file = true;
    set_where(L, 1);
    size_t bad;
    rc_status st = RC_OK;
    if (!rc_utf8_valid((const unsigned char *)buf, len, &bad)) {
        st = rc_errorf(RC_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", L->path, bad + 1);
        free(buf);
        return st;
    }
    json_error_t e;
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        snprintf(L->where, sizeof L->where, "%s:%d", L->path, e.line);
        st = parse_error(L, buf, len, &e);
        free(buf);
        return st;
    }
    free(buf);
    R->whole = j;
    R->whole_i = 0;
    R->mode = READ_WHOLE;
    return RC_OK;
}

static rc_status read_whole(rc_rollout_reader *R)
{
    loader *L = &R->L;
    json_t *j = R->whole;
    if (!json_is_array(j)) { /* one record */
        if (R->whole_i > 0) {
            R->done = true;
            return RC_OK;
        }
        R->whole_i = 1;
        RC_TRY(decide(L, j));
        return do_record(L, j);
    }
    if (R->whole_i >= json_array_size(j)) {
        R->done = true;
        return RC_OK;
    }
    const size_t i = R->whole_i++;
    set_where(L, (int64_t)i + 1);
    RC_TRY(decide(L, json_array_get(j, i)));
    return do_record(L, json_array_get(j, i));
}

static rc_status read_line(rc_rollout_reader *R)
{
    loader *L = &R->L;
    const char *ln;
    size_t n;
    bool got;
    RC_TRY(next_line(&R->r, L->path, R->line + 1, (size_t)RC_ROLLOUT_MAX_LINE, &ln, &n, &got));
    if (!got) {
        R->done = true;
        return RC_OK;
    }
    R->line++;
    R->consumed += (int64_t)n + 1;
    if (L->progress && R->consumed - R->reported >= ((int64_t)4 << 20)) {
        L->progress(L->pctx, R->consumed, R->size, L->total_n);
        R->reported = R->consumed;
    }
    if (blank(ln, n))
        return RC_OK;
    set_where(L, R->line);
    if (R->first) {
        R->first = false;
        size_t i = 0;
        while (i < n && (ln[i] == ' ' || ln[i] == '\t'))
            i++;
        json_error_t e;
        json_t *probe = ln[i] == '[' ? NULL : json_loadb(ln, n, JSON_REJECT_DUPLICATES, &e);
        if (!probe && (ln[i] == '[' || ln[i] == '{')) { /* a JSON array, or one pretty-printed object: one value */
            close(R->fd);
            R->fd = -1;
            free(R->r.buf);
            R->r.buf = NULL;
            return open_whole(R);
        }
        json_decref(probe);
    }
    return do_text(L, ln, n);
}

/* ratiocheck's own results file, read whole at open */
static rc_status open_h5(rc_rollout_reader *R)
{
    loader *L = &R->L;
    rc_rollout_set *s = L->s;
    s->format = RC_RFMT_H5;
    RC_TRY(rc_h5_read(L->path, &R->h5));
    /* the temperature-scaled full distribution: processed by the temperature only */
    s->kind = RC_LP_PROCESSED;
    s->kind_given = true;
    s->temperature = R->h5.temperature > 0 ? R->h5.temperature : 1.0;
    s->top_p = 1.0;
    s->top_k = 0;
    L->have_t = L->have_p = L->have_k = L->have_kind = true;
    R->mode = READ_H5;
    return RC_OK;
}

static rc_status read_h5(rc_rollout_reader *R)
{
    loader *L = &R->L;
    const rc_results *r = &R->h5;
    if (R->h5_q >= r->n_seq) {
        R->done = true;
        return RC_OK;
    }
    const int64_t q = R->h5_q++;
    set_where(L, q);
    snprintf(L->where, sizeof L->where, "%s: sequence %lld", L->path, (long long)q);
    const int64_t p = r->seq_prompt[q];
    if (p < 0 || p >= r->n_prompts || r->prompt_len[p] < 0 || r->prompt_len[p] > r->prompt_max || r->gen_valid[q] < 0 ||
        r->gen_valid[q] > r->gen_len)
        return rc_errorf(RC_ERR_FORMAT, "%s: prompt index or lengths out of range", L->where);
    L->pids.n = L->rids.n = L->lps.n = L->tlps.n = 0;
    L->rec_trainer = r->logprob_trainer != NULL;
    rc_status st = RC_OK;
    json_t *tmp = NULL;
    for (int64_t t = 0; t < r->prompt_len[p] && st == RC_OK; t++) {
        tmp = json_integer(r->prompt_tokens[p * r->prompt_max + t]);
        st = tmp ? take_id(L, tmp, "prompt_tokens", t, &L->pids) : rc_errorf(RC_ERR_NOMEM, "out of memory");
        json_decref(tmp);
    }
    for (int64_t t = 0; t < r->gen_valid[q] && st == RC_OK; t++) {
        tmp = json_integer(r->gen_tokens[q * r->gen_len + t]);
        st = tmp ? take_id(L, tmp, "gen_tokens", t, &L->rids) : rc_errorf(RC_ERR_NOMEM, "out of memory");
        json_decref(tmp);
        if (st == RC_OK) {
            tmp = json_real((double)r->logprob_gen[q * r->gen_len + t]);
            st = tmp ? take_lp(L, tmp, "logprob_gen", t) : rc_errorf(RC_ERR_NOMEM, "out of memory");
            json_decref(tmp);
        }
        if (st == RC_OK && r->logprob_trainer) {
            tmp = json_real((double)r->logprob_trainer[q * r->gen_len + t]);
            st = tmp ? take_lp_to(L, tmp, "logprob_trainer", t, &L->tlps) : rc_errorf(RC_ERR_NOMEM, "out of memory");
            json_decref(tmp);
        }
    }
    return st == RC_OK ? commit(L) : st;
}

static bool is_hdf5(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    unsigned char sig[8] = {0};
    const size_t k = fread(sig, 1, 8, f);
    fclose(f);
    return k == 8 && !memcmp(sig, "\x89HDF\r\n\x1a\n", 8);
}

void rc_rollouts_close(rc_rollout_reader *R)
{
    if (!R)
        return;
    if (R->fd >= 0)
        close(R->fd);
    free(R->r.buf);
    json_decref(R->whole);
    rc_results_free(&R->h5);
    free(R->L.pids.v);
    free(R->L.rids.v);
    free(R->L.lps.v);
    free(R->L.tlps.v);
    rc_rollouts_free(&R->set);
    free(R);
}

rc_status rc_rollouts_open(const char *path, rc_rollout_format fmt, int64_t vocab, int64_t max_pos,
                           rc_rollouts_progress_fn progress, void *progress_ctx, rc_rollout_reader **out)
{
    *out = NULL;
    rc_rollout_reader *R = NULL;
    RC_TRY(rc_calloc((void **)&R, 1, sizeof *R, "rollout reader"));
    R->fd = -1;
    R->first = true;
    rc_rollout_set *s = &R->set;
    s->temperature = 1.0;
    s->top_p = 1.0;
    s->format = fmt;
    R->L = (loader){.path = path, .vocab = vocab, .max_pos = max_pos, .s = s, .progress = progress,
                    .pctx = progress_ctx};
    rc_status st;
    if (fmt == RC_RFMT_H5 || (fmt == RC_RFMT_AUTO && is_hdf5(path)))
        st = open_h5(R);
    else
        st = rc_open_regular(path, &R->fd, &R->size);
    if (st == RC_OK)
        R->r.fd = R->fd;
    if (st != RC_OK) {
        rc_rollouts_close(R);
        return st;
    }
    *out = R;
    return RC_OK;
}

rc_status rc_rollouts_next(rc_rollout_reader *R, int64_t max_rollouts, int64_t max_tokens,
                           const rc_rollout_set **chunk)
{
    *chunk = NULL;
    if (R->failed)
        return rc_errorf(RC_ERR_INTERNAL, "%s: the rollout reader failed before", R->L.path);
    rc_rollout_set *s = &R->set;
    for (int i = 0; i < RC_ROLLOUT_TEXT_KEPT; i++) { /* a new chunk: the arrays are reused */
        free(s->text[i]);
        s->text[i] = NULL;
    }
    s->first = R->L.total_n;
    s->n = s->prompt_max = s->resp_max = 0;
    rc_status st = RC_OK;
    while (st == RC_OK && !R->done && s->n < max_rollouts &&
           !(max_tokens > 0 && s->n > 0 && s->tok_off[s->n] >= max_tokens))
        st = R->mode == READ_H5 ? read_h5(R) : R->mode == READ_WHOLE ? read_whole(R) : read_line(R);
    s->lines_read = R->line;
    s->temperature_given = R->L.have_t;
    s->top_p_given = R->L.have_p;
    s->top_k_given = R->L.have_k;
    if (st == RC_OK && R->done && R->L.total_n == 0)
        st = rc_errorf(RC_ERR_FORMAT, "%s: no rollouts", R->L.path);
    if (st != RC_OK) {
        R->failed = true;
        return st;
    }
    *chunk = s;
    return RC_OK;
}

rc_status rc_rollouts_load(const char *path, rc_rollout_format fmt, int64_t vocab, int64_t max_pos,
                           rc_rollouts_progress_fn progress, void *progress_ctx, rc_rollout_set *out)
{
    memset(out, 0, sizeof *out);
    rc_rollout_reader *R = NULL;
    RC_TRY(rc_rollouts_open(path, fmt, vocab, max_pos, progress, progress_ctx, &R));
    const rc_rollout_set *c;
    rc_status st = rc_rollouts_next(R, INT64_MAX, 0, &c); /* everything: one chunk */
    if (st == RC_OK) { /* the chunk's arrays move to out */
        *out = R->set;
        memset(&R->set, 0, sizeof R->set);
    }
    rc_rollouts_close(R);
    return st;
}
