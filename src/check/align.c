#include "align.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "util.h"

void rc_align_probe_free(rc_align_probe *p)
{
    free(p->tok);
    free(p->lp);
    free(p->tok_off);
    free(p->lp_off);
    free(p->plen);
    free(p->rlen);
    memset(p, 0, sizeof *p);
}

rc_status rc_align_probe_take(const rc_rollout_set *c, rc_align_probe *p)
{
    memset(p, 0, sizeof *p);
    int64_t n = 0, toks = 0, lps = 0;
    while (n < c->n && lps < RC_ALIGN_MAX_TOKENS && (n == 0 || toks + c->plen[n] <= RC_ALIGN_MAX_FORWARD)) {
        const int64_t r = c->rlen[n] < RC_ALIGN_MAX_TOKENS - lps ? c->rlen[n] : RC_ALIGN_MAX_TOKENS - lps;
        toks += c->plen[n] + r;
        lps += r;
        n++;
    }
    rc_status st = RC_OK;
    if ((st = rc_calloc((void **)&p->tok, toks > 0 ? toks : 1, sizeof *p->tok, "alignment")) != RC_OK ||
        (st = rc_calloc((void **)&p->lp, lps > 0 ? lps : 1, sizeof *p->lp, "alignment")) != RC_OK ||
        (st = rc_calloc((void **)&p->tok_off, n + 1, sizeof *p->tok_off, "alignment")) != RC_OK ||
        (st = rc_calloc((void **)&p->lp_off, n + 1, sizeof *p->lp_off, "alignment")) != RC_OK ||
        (st = rc_calloc((void **)&p->plen, n > 0 ? n : 1, sizeof *p->plen, "alignment")) != RC_OK ||
        (st = rc_calloc((void **)&p->rlen, n > 0 ? n : 1, sizeof *p->rlen, "alignment")) != RC_OK) {
        rc_align_probe_free(p);
        return st;
    }
    p->n = n;
    for (int64_t i = 0, left = RC_ALIGN_MAX_TOKENS; i < n; i++) {
        const int32_t r = (int32_t)(c->rlen[i] < left ? c->rlen[i] : left);
        left -= r;
        p->plen[i] = c->plen[i];
        p->rlen[i] = r;
        memcpy(p->tok + p->tok_off[i], c->tok + c->tok_off[i], (size_t)(c->plen[i] + r) * sizeof *p->tok);
        memcpy(p->lp + p->lp_off[i], c->lp + c->lp_off[i], (size_t)r * sizeof *p->lp);
        p->tok_off[i + 1] = p->tok_off[i] + c->plen[i] + r;
        p->lp_off[i + 1] = p->lp_off[i] + r;
    }
    p->first_line = c->line && n > 0 ? c->line[0] : 0;
    return RC_OK;
}

static void note(rc_score_align *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(rc_score_align *a, const char *fmt, ...)
{
    if (!a || a->n_warnings >= 4)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->warnings[a->n_warnings++], sizeof a->warnings[0], fmt, ap);
    va_end(ap);
}

/* rows [n, V]: the model's log-probs at temperature 1 where each logged token
 * was predicted; x [n] the tokens, y [n] the logged values. The mean of
 * (y - log_softmax(row / T)[x])^2. */
static double mse_diff_at(const float *rows, const int32_t *x, const float *y, int64_t n, int64_t V, double T,
                          double *mean_diff, double *frac_higher)
{
    double sse = 0, sd = 0;
    int64_t higher = 0, differ = 0;
#pragma omp parallel for reduction(+ : sse, sd, higher, differ) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *z = rows + i * V;
        double mx = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            mx = z[v] > mx ? z[v] : mx;
        double s = 0;
        for (int64_t v = 0; v < V; v++)
            s += exp(((double)z[v] - mx) / T);
        const double pred = ((double)z[x[i]] - mx) / T - log(s);
        const double d = (double)y[i] - pred;
        sse += d * d;
        sd += d;
        differ += fabs(d) > 1e-6;
        higher += d > 1e-6;
    }
    if (mean_diff)
        *mean_diff = n ? sd / (double)n : NAN;
    if (frac_higher)
        *frac_higher = differ ? (double)higher / (double)differ : NAN;
    return n ? sse / (double)n : NAN;
}

static double mse_at(const float *rows, const int32_t *x, const float *y, int64_t n, int64_t V, double T)
{
    return mse_diff_at(rows, x, y, n, V, T, NULL, NULL);
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the least-squares T over [1/8, 8]: a grid in log T, then golden-section
 * search around its best point */
static void fit_t(const float *rows, const int32_t *x, const float *y, int64_t n, int64_t V, double *t_out,
                  double *mse_out)
{
    enum { NG = 25 }; /* 2^(k/4), k = -12..12 */
    double best = INFINITY;
    int kb = 0;
    for (int k = 0; k < NG; k++) {
        const double e = mse_at(rows, x, y, n, V, exp2((k - 12) / 4.0));
        if (e < best) {
            best = e;
            kb = k;
        }
    }
    double a = (kb - 13) / 4.0, b = (kb - 11) / 4.0; /* log2 T in the bracket around the best grid point */
    const double g = (sqrt(5.0) - 1) / 2;
    double c = b - g * (b - a), d = a + g * (b - a);
    double fc = mse_at(rows, x, y, n, V, exp2(c)), fd = mse_at(rows, x, y, n, V, exp2(d));
    for (int it = 0; it < 24; it++) {
        if (fc < fd) {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = mse_at(rows, x, y, n, V, exp2(c));
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = mse_at(rows, x, y, n, V, exp2(d));
        }
    }
    const double tb = exp2((kb - 12) / 4.0), tm = exp2(fc < fd ? c : d), em = fc < fd ? fc : fd;
    *t_out = em < best ? tm : tb;
    *mse_out = em < best ? em : best;
}

rc_status rc_align_hypotheses(const rc_model *m, rc_backend *be, const rc_numerics *num, const rc_align_probe *p,
                              const char *path, bool raw, double t, bool t_given, bool truncating, rc_align_result *out,
                              rc_score_align *notes)
{
    memset(out, 0, sizeof *out);
    out->t_declared = raw ? 1.0 : t;
    out->mse_declared = out->t_fit = out->mse_fit = out->median_rank = out->frac_top = NAN;
    out->decision = "skipped";
    const int64_t V = m->cfg.vocab, n = p->lp_off[p->n];
    out->tokens = n;
    if (n < RC_ALIGN_MIN_TOKENS) {
        note(notes, "%s: too few logged tokens (%lld) to compare the temperature and tokenizer hypotheses", path,
             (long long)n);
        return RC_OK;
    }
    int64_t maxlen = 1, rows_bytes; /* rows_bytes: floats of the rows kept */
    for (int64_t i = 0; i < p->n; i++)
        maxlen = p->plen[i] + p->rlen[i] > maxlen ? p->plen[i] + p->rlen[i] : maxlen;
    if (!rc_mul_i64(n, V, &rows_bytes))
        return rc_errorf(RC_ERR_NOMEM, "%s: %lld tokens x %lld vocabulary overflows", path, (long long)n, (long long)V);
    float *rows = NULL;
    int32_t *x = NULL;
    double *rank = NULL;
    int64_t *out_rows = NULL;
    rc_engine *e = NULL;
    rc_status st = rc_calloc((void **)&rows, rows_bytes, sizeof *rows, "alignment");
    if (st == RC_OK)
        st = rc_calloc((void **)&x, n, sizeof *x, "alignment");
    if (st == RC_OK)
        st = rc_calloc((void **)&rank, n, sizeof *rank, "alignment");
    if (st == RC_OK)
        st = rc_calloc((void **)&out_rows, maxlen, sizeof *out_rows, "alignment");
    if (st == RC_OK)
        st = rc_engine_create(m, be, num, 1, maxlen, maxlen, &e);
    for (int64_t i = 0; i < p->n && st == RC_OK; i++) {
        /* one forward over prompt + response; only the rows that predict a
         * response token come back: token plen + k at row plen + k - 1 */
        const int64_t len = p->plen[i] + p->rlen[i], slot = 0, start = 0;
        if (p->rlen[i] == 0)
            continue;
        for (int64_t k = 0; k < p->rlen[i]; k++) {
            out_rows[k] = p->plen[i] + k - 1;
            x[p->lp_off[i] + k] = p->tok[p->tok_off[i] + p->plen[i] + k];
        }
        st = rc_engine_step(e, &slot, &start, &len, 1, p->tok + p->tok_off[i], out_rows, p->rlen[i],
                            rows + p->lp_off[i] * V, NULL, NULL);
    }
    rc_engine_free(e);
    free(out_rows);
    if (st != RC_OK) {
        free(rows);
        free(x);
        free(rank);
        return st;
    }
    /* the tokenizer: where the logged tokens rank in the model's distribution */
    int64_t top = 0;
    for (int64_t j = 0; j < n; j++) {
        const float *z = rows + j * V, zx = z[x[j]];
        int64_t above = 0;
        for (int64_t v = 0; v < V; v++)
            above += z[v] > zx;
        rank[j] = (double)above;
        top += above < RC_ALIGN_TOP;
    }
    qsort(rank, (size_t)n, sizeof *rank, cmp_dbl);
    out->median_rank = n % 2 ? rank[n / 2] : 0.5 * (rank[n / 2 - 1] + rank[n / 2]);
    out->frac_top = (double)top / (double)n;
    free(rank);
    if (out->frac_top < RC_ALIGN_TOP_OTHER && out->median_rank > RC_ALIGN_RANK_OTHER) {
        free(rows);
        free(x);
        out->decision = "tokenizer";
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: the logged ids look like another tokenizer's: over the first %lld tokens their median "
                         "rank in the model's next-token distribution is %.0f of %lld and only %.1f%% are in its top "
                         "%d (tokens this model sampled rank near the top): give --model the model the rollouts came "
                         "from, or log its ids",
                         path, (long long)n, out->median_rank, (long long)V, 100.0 * out->frac_top, RC_ALIGN_TOP);
    }
    if (out->frac_top < RC_ALIGN_TOP_SAME)
        note(notes, "%s: inconclusive tokenizer check: %.1f%% of the first %lld logged tokens are in the model's top "
             "%d (median rank %.0f of %lld): another tokenizer's ids, or a sampler far from this model", path,
             100.0 * out->frac_top, (long long)n, RC_ALIGN_TOP, out->median_rank, (long long)V);
    /* the temperature: declared against the least-squares fit */
    if (truncating) {
        free(rows);
        free(x);
        out->decision = "declared";
        return RC_OK;
    }
    out->mse_declared = mse_at(rows, x, p->lp, n, V, out->t_declared);
    out->decision = "declared";
    if (!(out->mse_declared > RC_ALIGN_MSE_FLOOR)) { /* the declared temperature fits: nothing to fit */
        free(rows);
        free(x);
        return RC_OK;
    }
    fit_t(rows, x, p->lp, n, V, &out->t_fit, &out->mse_fit);
    /* renormalised over a kept set: above the model's at any temperature */
    double md, fh;
    (void)mse_diff_at(rows, x, p->lp, n, V, out->t_fit, &md, &fh);
    free(rows);
    free(x);
    if (out->mse_fit > RC_ALIGN_MSE_FLOOR && md > 0.02 && fh > 0.9) {
        out->decision = "renormalised";
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: the logged log-probs look top-k / top-p renormalised: over the first %lld tokens no "
                         "temperature explains them (the best, %.3g, still misses by a mean squared error of %.2g) "
                         "and they sit above the model's on %.0f%% of the tokens (by %.3g on average), as a "
                         "renormalisation over the kept tokens lifts them; declare \"logprobs_kind\": \"processed\" "
                         "with the engine's \"temperature\", \"top_k\" / \"top_p\" (or log raw log-probs)",
                         path, (long long)n, out->t_fit, out->mse_fit, 100.0 * fh, md);
    }
    const double gain = out->mse_declared / fmax(out->mse_fit, 1e-300);
    const bool moved = fabs(log(out->t_fit / out->t_declared)) > log(1.02);
    if (!moved || gain < RC_ALIGN_INCONCLUSIVE)
        return RC_OK;
    char what[160];
    if (raw && t_given && fabs(t - out->t_fit) < 0.05 * t)
        snprintf(what, sizeof what, "the file states temperature %g with raw log-probs: add \"logprobs_kind\": "
                 "\"processed\"", t);
    else
        snprintf(what, sizeof what, "declare \"temperature\": %.2g and \"logprobs_kind\": \"processed\" as the "
                 "engine logged them", out->t_fit);
    if (gain >= RC_ALIGN_DECISIVE) {
        out->decision = "temperature";
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: the logged log-probs look computed at another temperature: over the first %lld tokens "
                         "they fit log_softmax(logits / %.3g) (mean squared error %.2g) %.3g times better than the "
                         "declared %s log-probs at temperature %g (%.2g); %s",
                         path, (long long)n, out->t_fit, out->mse_fit, gain, raw ? "raw" : "processed",
                         out->t_declared, out->mse_declared, what);
    }
    out->decision = "inconclusive";
    note(notes, "%s: inconclusive temperature check: log_softmax(logits / %.3g) fits the first %lld logged tokens "
         "%.3g times better (mean squared error %.2g against %.2g at the declared temperature %g), short of the %gx "
         "that decides", path, out->t_fit, (long long)n, gain, out->mse_fit, out->mse_declared, out->t_declared,
         RC_ALIGN_DECISIVE);
    return RC_OK;
}
