#include "score.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "util.h"

void rc_score_steady_heap(void)
{
#ifdef __GLIBC__
    /* glibc raises its mmap threshold to the largest block freed (up to 32
     * MiB): after the first chunk's engine buffers go, the next chunk's land
     * in the heap and fragment it. Measured on 1,024 rollouts in chunks of
     * 128: 103 MB peak RSS with the default, 73 MB with these. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
}

void rc_score_inputs_free(rc_score_inputs *in)
{
    free(in->prompt_tokens);
    free(in->prompt_len);
    free(in->tokens);
    free(in->valid);
    free(in->logprobs);
    free(in->trainer_logprobs);
    memset(in, 0, sizeof *in);
}

rc_status rc_score_inputs_build(const rc_rollout_set *s, const char *path, rc_score_inputs *in)
{
    return rc_score_inputs_build_padded(s, path, s->prompt_max, s->resp_max > 0 ? s->resp_max : 1, in);
}

rc_status rc_score_inputs_build_padded(const rc_rollout_set *s, const char *path, int64_t P, int64_t G,
                                       rc_score_inputs *in)
{
    memset(in, 0, sizeof *in);
    const int64_t n = s->n;
    if (s->prompt_max > P || s->resp_max > G || G < 1)
        return rc_errorf(RC_ERR_INTERNAL, "%s: rollouts of up to %lld + %lld tokens padded to %lld + %lld", path,
                         (long long)s->prompt_max, (long long)s->resp_max, (long long)P, (long long)G);
    int64_t cp, cg;
    if (!rc_mul_i64(n, P, &cp) || !rc_mul_i64(n, G, &cg) || cp > RC_SCORE_MAX_PADDED || cg > RC_SCORE_MAX_PADDED)
        return rc_errorf(RC_ERR_NOMEM, "%s: %lld rollouts x (longest prompt %lld, longest response %lld) is more than "
                         "the %lld padded cells score holds: split the file", path, (long long)n, (long long)P,
                         (long long)G, (long long)RC_SCORE_MAX_PADDED);
    rc_status st = RC_OK;
    if ((st = rc_calloc((void **)&in->prompt_tokens, cp, sizeof *in->prompt_tokens, "score")) != RC_OK ||
        (st = rc_calloc((void **)&in->prompt_len, n, sizeof *in->prompt_len, "score")) != RC_OK ||
        (st = rc_calloc((void **)&in->tokens, cg, sizeof *in->tokens, "score")) != RC_OK ||
        (st = rc_calloc((void **)&in->valid, n, sizeof *in->valid, "score")) != RC_OK ||
        (st = rc_calloc((void **)&in->logprobs, cg, sizeof *in->logprobs, "score")) != RC_OK ||
        (s->tlp && (st = rc_calloc((void **)&in->trainer_logprobs, cg, sizeof *in->logprobs, "score")) != RC_OK)) {
        rc_score_inputs_free(in);
        return st;
    }
    in->n = n;
    in->prompt_max = P;
    in->resp_max = G;
    for (int64_t i = 0; i < cp; i++)
        in->prompt_tokens[i] = -1;
    for (int64_t i = 0; i < cg; i++) {
        in->tokens[i] = -1;
        in->logprobs[i] = NAN;
        if (in->trainer_logprobs)
            in->trainer_logprobs[i] = NAN;
    }
    for (int64_t i = 0; i < n; i++) {
        const int32_t *t = s->tok + s->tok_off[i];
        in->prompt_len[i] = s->plen[i];
        in->valid[i] = s->rlen[i];
        memcpy(in->prompt_tokens + i * P, t, (size_t)s->plen[i] * sizeof *t);
        memcpy(in->tokens + i * G, t + s->plen[i], (size_t)s->rlen[i] * sizeof *t);
        memcpy(in->logprobs + i * G, s->lp + s->lp_off[i], (size_t)s->rlen[i] * sizeof *s->lp);
        if (in->trainer_logprobs)
            memcpy(in->trainer_logprobs + i * G, s->tlp + s->lp_off[i], (size_t)s->rlen[i] * sizeof *s->tlp);
    }
    return RC_OK;
}

rc_status rc_score_logged_results(const rc_score_inputs *in, int n_lens, const int64_t *lens,
                                  const rc_stat_params *stat, rc_results *out)
{
    memset(out, 0, sizeof *out);
    if (!in->trainer_logprobs || n_lens < 1 || n_lens > RC_MAX_LENS_READ)
        return rc_errorf(RC_ERR_INTERNAL, "rc_score_logged_results: no trainer log-probs or %d lengths", n_lens);
    const int64_t S = in->n, P = in->prompt_max, G = lens[n_lens - 1];
    int64_t cells;
    if (G < 1 || !rc_mul_i64(S, G, &cells) || cells > RC_SCORE_MAX_PADDED)
        return rc_errorf(RC_ERR_NOMEM, "%lld rollouts x %lld tokens is more than score holds at once",
                         (long long)S, (long long)G);
    out->stat = *stat;
    out->n_prompts = out->n_seq = S;
    out->prompt_max = P;
    out->gen_len = G;
    rc_status st = RC_OK;
#define ALLOC(p, n) \
    if (st == RC_OK) \
    st = rc_calloc((void **)&(p), (n) + 1, sizeof *(p), "results")
    ALLOC(out->prompt_tokens, S * P);
    ALLOC(out->prompt_len, S);
    ALLOC(out->seq_prompt, S);
    ALLOC(out->seq_sample, S);
    ALLOC(out->gen_tokens, cells);
    ALLOC(out->gen_valid, S);
    ALLOC(out->logprob_gen, cells);
    ALLOC(out->logprob_gen_processed, cells);
    ALLOC(out->logprob_trainer, cells);
    ALLOC(out->lens, n_lens);
    if (st != RC_OK)
        return st;
    out->n_lens = n_lens;
    for (int i = 0; i < n_lens; i++) {
        if (lens[i] < 1 || lens[i] > G || (i > 0 && lens[i] <= lens[i - 1]))
            return rc_errorf(RC_ERR_INTERNAL, "rc_score_logged_results: lengths not ascending");
        out->lens[i].len = lens[i];
        ALLOC(out->lens[i].logprob_fwd, S * lens[i]);
    }
#undef ALLOC
    if (st != RC_OK)
        return st;
    memcpy(out->prompt_tokens, in->prompt_tokens, (size_t)(S * P) * sizeof *out->prompt_tokens);
    memcpy(out->prompt_len, in->prompt_len, (size_t)S * sizeof *out->prompt_len);
    for (int64_t q = 0; q < S; q++) {
        const int64_t v = in->valid[q] < G ? in->valid[q] : G;
        out->seq_prompt[q] = (int32_t)q;
        out->gen_valid[q] = (int32_t)v;
        for (int64_t t = 0; t < G; t++) {
            const bool ok = t < v;
            const int64_t k = q * in->resp_max + t;
            out->gen_tokens[q * G + t] = ok ? in->tokens[k] : -1;
            out->logprob_gen[q * G + t] = out->logprob_gen_processed[q * G + t] = ok ? in->logprobs[k] : NAN;
            out->logprob_trainer[q * G + t] = ok ? in->trainer_logprobs[k] : NAN;
        }
        for (int i = 0; i < n_lens; i++) {
            const int64_t L = lens[i];
            for (int64_t t = 0; t < L; t++)
                out->lens[i].logprob_fwd[q * L + t] = out->logprob_trainer[q * G + t];
        }
    }
    return RC_OK;
}

rc_status rc_score_adopt_trainer(const rc_score_inputs *in, rc_results *r, rc_threeway_acc *tw)
{
    const int64_t S = r->n_seq, G = r->gen_len;
    if (!in->trainer_logprobs || in->n != S || r->n_lens < 1 || r->lens[r->n_lens - 1].len != G)
        return rc_errorf(RC_ERR_INTERNAL, "rc_score_adopt_trainer: a chunk unlike its inputs");
    free(r->logprob_trainer);
    free(r->logprob_ratiocheck);
    r->logprob_trainer = r->logprob_ratiocheck = NULL;
    RC_TRY(rc_calloc((void **)&r->logprob_trainer, S * G + 1, sizeof *r->logprob_trainer, "results"));
    RC_TRY(rc_calloc((void **)&r->logprob_ratiocheck, S * G + 1, sizeof *r->logprob_ratiocheck, "results"));
    const float *rc = r->lens[r->n_lens - 1].logprob_fwd;
    for (int64_t q = 0; q < S; q++) {
        const int64_t v = r->gen_valid[q];
        for (int64_t t = 0; t < G; t++) {
            const bool ok = t < v && t < in->resp_max;
            const float y = ok ? in->trainer_logprobs[q * in->resp_max + t] : NAN;
            r->logprob_trainer[q * G + t] = y;
            r->logprob_ratiocheck[q * G + t] = ok ? rc[q * G + t] : NAN;
            if (ok && tw)
                rc_threeway_add(tw, r->logprob_gen[q * G + t], y, rc[q * G + t],
                                r->logprob_ref ? r->logprob_ref[q * G + t] : NAN);
        }
        for (int i = 0; i < r->n_lens; i++) {
            const int64_t L = r->lens[i].len;
            for (int64_t t = 0; t < L; t++)
                r->lens[i].logprob_fwd[q * L + t] = r->logprob_trainer[q * G + t];
        }
    }
    return RC_OK;
}

static void warn(rc_score_align *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(rc_score_align *a, const char *fmt, ...)
{
    if (a->n_warnings >= 4)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->warnings[a->n_warnings++], sizeof a->warnings[0], fmt, ap);
    va_end(ap);
}

rc_status rc_score_check_alignment(const rc_rollout_set *s, const char *path, const rc_results *r, rc_score_align *a)
{
    memset(a, 0, sizeof *a);
    if (r->n_lens < 1)
        return RC_OK;
    const rc_len_result *Lr = &r->lens[r->n_lens - 1];
    const int64_t L = Lr->len, G = r->gen_len;
    /* 1. a one-token shift, over the first rollouts */
    double sum[3] = {0, 0, 0};
    for (int64_t q = 0; q < r->n_seq && q < RC_SCORE_SHIFT_ROLLOUTS; q++) {
        const int64_t v = r->gen_valid[q] < L ? r->gen_valid[q] : L;
        for (int k = -1; k <= 1; k++)
            for (int64_t t = 0; t < v; t++) {
                const int64_t u = t + k; /* the logged value of token t against the trainer's of token t + k */
                if (u < 0 || u >= v)
                    continue;
                const double d = fabs((double)r->logprob_gen[q * G + t] - (double)Lr->logprob_fwd[q * L + u]);
                sum[k + 1] += d;
                a->shift_count[k + 1]++;
            }
    }
    for (int k = 0; k < 3; k++)
        a->shift_mad[k] = a->shift_count[k] ? sum[k] / (double)a->shift_count[k] : NAN;
    if (a->shift_count[0] >= 8) {
        int best = 1; /* the smallest mean |diff|, in place when tied */
        for (int k = 0; k < 3; k++)
            if (a->shift_count[k] > 0 && a->shift_mad[k] < a->shift_mad[best])
                best = k;
        if (best != 1 && a->shift_mad[best] < 0.5 * a->shift_mad[1])
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: the logged log-probs fit the trainer's shifted by %+d token (mean |diff| %.3g) "
                             "better than in place (%.3g), over the first %d rollouts: the ids and log-probs are "
                             "misaligned by one (a missing return_token_ids, or the prompt's last log-prob kept)",
                             path, best - 1, a->shift_mad[best], a->shift_mad[1], RC_SCORE_SHIFT_ROLLOUTS);
    } else {
        warn(a, "too few tokens (%lld pairs) to check for a one-token shift", (long long)a->shift_count[0]);
    }
    /* 2. processed or raw: the scale and the sign of logged - trainer */
    double sx = 0, sy = 0, sxx = 0, sxy = 0, sd = 0;
    int64_t n = 0, ndiff = 0, nhigher = 0;
    for (int64_t q = 0; q < r->n_seq; q++) {
        const int64_t v = r->gen_valid[q] < L ? r->gen_valid[q] : L;
        for (int64_t t = 0; t < v; t++) {
            const double y = r->logprob_gen[q * G + t], x = Lr->logprob_fwd[q * L + t];
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
            sd += y - x;
            n++;
            if (fabs(y - x) > 1e-6) {
                ndiff++;
                nhigher += y > x;
            }
        }
    }
    a->tokens = n;
    a->mean_diff = n ? sd / (double)n : NAN;
    a->frac_higher = ndiff ? (double)nhigher / (double)ndiff : NAN;
    const double var = n ? sxx / (double)n - (sx / (double)n) * (sx / (double)n) : 0;
    a->slope = n && var > 1e-12 ? (sxy / (double)n - (sx / (double)n) * (sy / (double)n)) / var : NAN;
    const bool truncating = s->kind == RC_LP_PROCESSED && (s->top_k > 0 || s->top_p < 1.0);
    const char *declared = s->kind == RC_LP_RAW ? "raw (temperature 1)" : "processed";
    /* with top-k / top-p declared the trainer renormalises over the kept set
     * (rc_truncated_logprob): a token outside it could not have been sampled */
    const int64_t out = r->trainer_outside_kept;
    if (truncating && out >= 2 && out * 100 > n)
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: %lld of the %lld logged tokens are outside the set top_k %lld / top_p %g keeps from "
                         "the trainer's distribution: the sampler could not have sampled them with these settings "
                         "(declare the engine's \"top_k\" / \"top_p\" / \"temperature\", or log raw log-probs)",
                         path, (long long)out, (long long)n, (long long)s->top_k, s->top_p);
    if (truncating && out > 0)
        warn(a, "%lld of the %lld logged tokens are outside the set top_k %lld / top_p %g keeps from the trainer's "
             "distribution (rounding near the cut?); their trainer log-prob is renormalised over the kept set widened "
             "to them", (long long)out, (long long)n, (long long)s->top_k, s->top_p);
    if (n < 32) {
        warn(a, "too few tokens (%lld) to check raw against processed log-probs", (long long)n);
        return RC_OK;
    }
    /* the temperature is decided on the data before the forward (align.h),
     * except with top-k / top-p declared: then the slope of logged against
     * the trainer's renormalised log-probs */
    if (truncating && isfinite(a->slope) && fabs(a->slope - 1.0) > 0.1)
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: the logged log-probs scale as %.3f x the trainer's (1 expected for %s log-probs at "
                         "temperature %g): they look computed at another temperature (declare \"temperature\" and "
                         "\"logprobs_kind\" as the engine logged them)",
                         path, a->slope, declared, s->kind == RC_LP_RAW ? 1.0 : s->temperature);
    const bool renormalised = a->mean_diff > 0.02 && a->frac_higher > 0.9;
    if (renormalised && !truncating)
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: the logged log-probs are above the trainer's on %.0f%% of the tokens (by %.3g on "
                         "average): they look top-k / top-p renormalised (processed), not %s log-probs; log raw "
                         "ones (vLLM --logprobs-mode raw_logprobs) or declare \"logprobs_kind\": \"processed\" with "
                         "\"top_k\" / \"top_p\"",
                         path, 100.0 * a->frac_higher, a->mean_diff, declared);
    /* the mirror of `renormalised`: processed (truncated) declared, the logged
     * values below the trainer's renormalised ones by about log(kept mass) */
    if (truncating && a->mean_diff < -0.02 && a->frac_higher < 0.1)
        warn(a, "processed log-probs with top_k %lld / top_p %g were declared, but they are below the trainer's "
             "renormalised ones on %.0f%% of the tokens (by %.3g on average): they look not renormalised (raw, or "
             "temperature-scaled only), so the ratios include log(kept mass)", (long long)s->top_k, s->top_p,
             100.0 * (1.0 - a->frac_higher), -a->mean_diff);
    return RC_OK;
}

rc_status rc_score_check_text(const rc_rollout_set *s, const char *path, const struct rc_tokenizer *tok,
                              rc_score_align *a, int64_t *compared, int64_t *differ)
{
    *compared = *differ = 0;
    int64_t first = -1;
    char first_text[96] = "", first_dec[96] = "";
    for (int64_t i = 0; tok && i < s->n && i < RC_ROLLOUT_TEXT_KEPT; i++) {
        if (!s->text[i] || !s->text[i][0] || !s->tok)
            continue;
        char *dec = NULL;
        RC_TRY(rc_tokenizer_decode(tok, s->tok + s->tok_off[i] + s->plen[i], s->rlen[i], true, &dec, NULL));
        (*compared)++;
        if (strcmp(dec, s->text[i]) != 0) {
            if (first < 0) {
                first = i;
                snprintf(first_text, sizeof first_text, "%.60s", s->text[i]);
                snprintf(first_dec, sizeof first_dec, "%.60s", dec);
                for (char *c = first_text; *c; c++) /* one line */
                    *c = (unsigned char)*c < 0x20 ? ' ' : *c;
                for (char *c = first_dec; *c; c++)
                    *c = (unsigned char)*c < 0x20 ? ' ' : *c;
            }
            (*differ)++;
        }
        free(dec);
    }
    if (*differ == 0)
        return RC_OK;
    char where[1200];
    rc_rollout_where(s, path, first, where, sizeof where);
    if (*differ == *compared && *compared >= 2)
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: the response text differs from its ids decoded with the model's tokenizer (\"%s\" "
                         "against \"%s\"), in all %lld rollouts with text: the ids come from another tokenizer",
                         where, first_text, first_dec, (long long)*compared);
    warn(a, "%s: the response text of %lld of %lld rollouts differs from its ids decoded with the model's tokenizer "
         "(\"%s\" against \"%s\"; stop strings or detokenizer settings?)", where, (long long)*differ,
         (long long)*compared, first_text, first_dec);
    return RC_OK;
}
