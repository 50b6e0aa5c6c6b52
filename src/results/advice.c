#include "advice.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* docs/verdict.md "Published bands" cites each row: the stacks' own reports
 * of the sampler/trainer mismatch at step 0 or at lr = 0 (k3 is the stacks'
 * mismatch KL: verl's rollout_corr/kl and k3, prime-rl's mismatch_kl, xtuner's
 * k3; mean |log r| is slime/vime's mean |dlogp|). */
const rc_ref_band rc_ref_bands[] = {
    {RC_REF_K3, "bf16", 2.5e-4, 8.9e-3, "prime-rl #3543, verl #7519"},
    {RC_REF_K3, "fp8 rollout", 3.73e-4, 3.13e-2, "xtuner #2044, verl #7519"},
    {RC_REF_MEAN_ABS, "bf16 TP 1-8", 0.011, 0.036, "vime #64"},
    {RC_REF_MEAN_ABS, "bf16 TP 16 across nodes", 0.05, 0.21, "vime #64"},
};
const size_t rc_n_ref_bands = sizeof rc_ref_bands / sizeof rc_ref_bands[0];
const char *const rc_ref_metric_names[2] = {"k3", "mean_abs_log_ratio"};

int rc_ref_band_position(const rc_ref_band *b, double v)
{
    return isnan(v) ? 2 : v < b->lo ? -1 : v > b->hi ? 1 : 0;
}

void rc_ref_band_text(const rc_ref_band *b, double v, char *buf, size_t n)
{
    const int p = rc_ref_band_position(b, v);
    snprintf(buf, n, "%s published %s stack%s (%.2g to %.2g: %s)",
             p < 0 ? "below every" : p > 0 && p < 2 ? "above every" : p == 0 ? "within the" : "n/a against the",
             b->setting, p == 0 ? "s'" : "", b->lo, b->hi, b->sources);
}

/* verl's rollout_rs (seq_sum_k1 "0.5_2.0", seq_mean_k1 "0.999_1.001") bounds
 * exp of its k1 = -log r; TRL's sequence_truncate / sequence_mask and verl's
 * sequence TIS bound e^S from above only. */
const rc_seq_corr rc_seq_corrs[RC_N_SEQ_CORR] = {
    {"TRL sequence cap", "e^S", false, false, 0, 0},
    {"verl sequence TIS", "e^S", false, false, 0, RC_SEQ_TIS_CAP},
    {"verl Seq-MIS", "e^-S", false, true, RC_SEQ_MIS_LOW, RC_SEQ_MIS_HIGH},
    {"verl Geo-RS", "e^-M", true, true, RC_GEO_RS_LOW, RC_GEO_RS_HIGH},
};

/* Measured on the bundled model, bf16 base, default prompts, L = 50:
 * `ratiocheck sweep` (docs/verdict.md "Causes" has the command and the whole
 * table). One row per cause; the order does not matter (ranked per
 * objective by the measured effect). */
const rc_cause rc_causes[] = {
    {"both:dtype=fp16", "fp16", "bf16", "bf16's 8-bit mantissa on both sides", "fp16 on both sides", 0.220,
     5.063e-7 / 1.047e-5, 0.5, 0.0357, false},
    {"both:lm-head=fp32", "lm-head=fp32", NULL, "the LM head in the model's dtype", "an fp32 LM head on both sides",
     0.403, 1.699e-6 / 1.047e-5, 0.5, 0.1548, false},
    {"trainer:micro-batch=1", "micro-batch=1", NULL, "the trainer's batch shape (shape-dependent GEMM reductions)",
     "a trainer micro-batch of 1", 0.583, 3.566e-6 / 1.047e-5, 0.5, 0.1429, false},
    {"both:upcast=norm", "norm", NULL, "the norms' output rounding", "fp32 norms on both sides", 0.895,
     8.371e-6 / 1.047e-5, 0.5, 0.2857, false},
    {"both:kernels=invariant", "invariant", NULL, "batch-dependent kernels on either side",
     "batch-invariant kernels on both sides", 0.0, 0.0, 0.5, 0.0, true},
};
const size_t rc_n_causes = sizeof rc_causes / sizeof rc_causes[0];

/* s names setting w as a whole word ("micro-batch=1" is not in "micro-batch=16") */
static bool names(const char *s, const char *w)
{
    const size_t n = strlen(w);
    for (const char *p = strstr(s, w); p; p = strstr(p + 1, w)) {
        const bool start = p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '-' || p[-1] == '_');
        const bool end = !(isalnum((unsigned char)p[n]) || p[n] == '.' || p[n] == '_');
        if (start && end)
            return true;
    }
    return false;
}

static bool cause_applies(const rc_results *r, const rc_cause *c)
{
    if (c->dtype ? strcmp(r->dtype, c->dtype) != 0 : !strcmp(r->dtype, "fp32"))
        return false;
    return !(names(r->sampler, c->applied) || names(r->trainer, c->applied));
}

/* the measured effect of c on objective o's metric (smaller is better) */
static double cause_effect(const rc_cause *c, int o)
{
    return o == RC_OBJ_TOKEN_PPO ? c->k3_factor : o == RC_OBJ_GSPO ? c->gspo / c->gspo_base : c->std_factor;
}

void rc_verdict_next_step(const rc_results *r, int o, char *buf, size_t n)
{
    buf[0] = '\0';
    if (r->verdict.level[o] <= RC_VERDICT_OK || !rc_objectives[o].causes)
        return;
    const rc_cause *best = NULL, *exact = NULL;
    for (size_t i = 0; i < rc_n_causes; i++) {
        const rc_cause *c = &rc_causes[i];
        if (!cause_applies(r, c))
            continue;
        if (c->exact) {
            exact = exact ? exact : c;
            continue;
        }
        if (!best || cause_effect(c, o) < cause_effect(best, o))
            best = c;
    }
    if (!best)
        best = exact;
    if (!best)
        return;
    char eff[96];
    if (o == RC_OBJ_GSPO)
        snprintf(eff, sizeof eff, "cut the sequences outside GSPO's band from %.0f%% to %.0f%%",
                 100.0 * best->gspo_base, 100.0 * best->gspo);
    else if (o == RC_OBJ_TOKEN_PPO)
        snprintf(eff, sizeof eff, "cut k3 to %.2gx", best->k3_factor);
    else
        snprintf(eff, sizeof eff, "cut the ratio std to %.2gx", best->std_factor);
    snprintf(buf, n, "likely cause: %s; %s %s on the bundled model: `ratiocheck sweep --vary %s`", best->cause,
             best->remedy, eff, best->vary);
}

double rc_objective_metric(const rc_len_stats *st, int o)
{
    return rc_objectives[o].value(st);
}

/* k3's noise floor: 2 standard errors of the mean over sequences of each
 * sequence's mean (r - 1 - log r) at the longest length */
static double k3_noise(const rc_results *r)
{
    if (r->n_lens < 1 || !r->lens[r->n_lens - 1].logprob_fwd || !r->logprob_gen)
        return NAN;
    const rc_len_result *Lr = &r->lens[r->n_lens - 1];
    const int64_t L = Lr->len, G = r->gen_len;
    double s = 0, s2 = 0;
    int64_t n = 0;
    for (int64_t q = 0; q < r->n_seq; q++) {
        const int64_t v = r->gen_valid[q] < L ? r->gen_valid[q] : L;
        double k = 0;
        int64_t c = 0;
        for (int64_t t = 0; t < v; t++) {
            const double lr = (double)Lr->logprob_fwd[q * L + t] - (double)r->logprob_gen[q * G + t];
            if (isfinite(lr)) {
                k += expm1(lr) - lr;
                c++;
            }
        }
        if (c > 0) {
            k /= (double)c;
            s += k;
            s2 += k * k;
            n++;
        }
    }
    if (n < 2)
        return NAN;
    const double m = s / (double)n, var = (s2 / (double)n - m * m) * (double)n / (double)(n - 1);
    return 2.0 * sqrt(var > 0 ? var : 0) / sqrt((double)n);
}

void rc_sweep_recommend(const rc_results *r, rc_sweep_rec rec[RC_N_OBJECTIVES])
{
    const rc_len_stats *b = rc_results_longest(r);
    for (int o = 0; o < RC_N_OBJECTIVES; o++) {
        rc_sweep_rec *e = &rec[o];
        memset(e, 0, sizeof *e);
        e->metric = rc_objectives[o].metric;
        e->base = b ? rc_objective_metric(b, o) : NAN;
        /* a fraction's noise floor: binomial over what it is a fraction of */
        const double ns = !b                                            ? 0
                          : rc_objectives[o].noise == RC_NOISE_ROUTING_TOKENS ? (double)b->rt.tokens
                                                                            : (double)b->seq_count;
        e->noise = rc_objectives[o].noise == RC_NOISE_K3 ? k3_noise(r)
                   : ns > 0                              ? 2.0 * sqrt(e->base * (1.0 - e->base) / ns)
                                                         : NAN;
        if (!(e->base > 0))
            continue;
        for (int i = 0; i < r->n_sweep; i++) {
            const rc_sweep_row *row = &r->sweep[i];
            if (!row->res || row->noise_floor)
                continue;
            const double v = rc_objective_metric(rc_results_longest(row->res), o);
            if (!(e->base - v > (isnan(e->noise) ? 0 : e->noise)))
                continue;
            int k = e->n < RC_SWEEP_RECS ? e->n++ : RC_SWEEP_RECS; /* insert in order, best first */
            while (k > 0 && v < e->value[k - 1]) {
                if (k < RC_SWEEP_RECS) {
                    e->row[k] = e->row[k - 1];
                    e->value[k] = e->value[k - 1];
                }
                k--;
            }
            if (k < RC_SWEEP_RECS) {
                e->row[k] = i;
                e->value[k] = v;
            }
        }
    }
}
