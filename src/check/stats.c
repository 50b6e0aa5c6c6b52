/* Statistics of one run, computed from the stored tensors only (so that
 * `report` can recompute them from the HDF5 file). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "results.h"
#include "util.h"

const double rc_quantile_levels[RC_N_QUANTILES] = {0.001, 0.01, 0.5, 0.99, 0.999};
const double rc_ratio_thresholds[RC_N_THRESHOLDS] = {0.001, 0.01, 0.1, 0.2};

#define SET(name, key, kind, field, cap, opt) {name, key, kind, offsetof(rc_results, field), cap, opt, NULL, NULL}
/* a text setting that the header line shows as "  label value" */
#define SET_SHOWN(name, field, opt, label, hide)                                                              \
    {name, name, RC_SET_TEXT, offsetof(rc_results, field), sizeof(((rc_results *)0)->field), opt, label, hide}
const rc_setting rc_settings[] = {
    SET("version", "version", RC_SET_TEXT, version, sizeof(((rc_results *)0)->version), false),
    SET("command_line", "command_line", RC_SET_TEXT, command_line, 0, false),
    SET("model_path", "model", RC_SET_TEXT, model_path, 0, false),
    SET("model_type", "model_type", RC_SET_TEXT, model_type, sizeof(((rc_results *)0)->model_type), false),
    SET_SHOWN("dtype", dtype, false, "dtype", NULL),
    SET_SHOWN("kernels", kernels, false, "kernels", NULL),
    SET_SHOWN("upcast", upcast, false, "upcast", NULL),
    /* files before --alibi-bias have none; the default is not shown */
    SET_SHOWN("alibi_bias", alibi_bias, true, "alibi-bias", "model"),
    SET_SHOWN("logprob_dtype", logprob_dtype, false, "log-probs", NULL),
    /* the two sides when they differ (files before them have neither) */
    SET_SHOWN("sampler", sampler, true, "sampler", NULL),
    SET_SHOWN("trainer", trainer, true, "trainer", NULL),
    SET("reference", "reference", RC_SET_TEXT, reference, sizeof(((rc_results *)0)->reference), false),
    SET("backend", "backend", RC_SET_TEXT, backend, sizeof(((rc_results *)0)->backend), false),
    /* files before the CUDA backend have no device */
    SET("device", "device", RC_SET_TEXT, device, sizeof(((rc_results *)0)->device), true),
    SET("created", "created", RC_SET_TEXT, created, sizeof(((rc_results *)0)->created), false),
    SET("threads", "threads", RC_SET_I64, threads, 0, false),
    SET("seed", "seed", RC_SET_I64, seed, 0, false),
    SET("top_k", "top_k", RC_SET_I64, top_k, 0, false),
    SET("samples", "samples", RC_SET_I64, samples, 0, false),
    SET("batch", "batch", RC_SET_I64, batch, 0, false),
    SET("forward_batch", "forward_batch", RC_SET_I64, forward_batch, 0, false),
    /* the run's sizes, stored among the settings (the reader range-checks
     * them); --json prints "prompts" and "sequences" with the results */
    SET("num_prompts", NULL, RC_SET_I64, n_prompts, 0, false),
    SET("num_sequences", NULL, RC_SET_I64, n_seq, 0, false),
    SET("gen_len", NULL, RC_SET_I64, gen_len, 0, false),
    SET("temperature", "temperature", RC_SET_F64, temperature, 0, false),
    SET("top_p", "top_p", RC_SET_F64, top_p, 0, false),
    SET("stop_at_eos", "stop_at_eos", RC_SET_BOOL, stop_at_eos, 0, false),
    /* the statistics' thresholds: files before them have none (the defaults) */
    SET("clip_eps_low", "clip_eps_low", RC_SET_F64, stat.clip_eps_low, 0, true),
    SET("clip_eps_high", "clip_eps_high", RC_SET_F64, stat.clip_eps_high, 0, true),
    SET("seq_eps", "seq_eps", RC_SET_F64, stat.seq_eps, 0, true),
    SET("seq_cap", "seq_cap", RC_SET_F64, stat.seq_cap, 0, true),
};
#undef SET
const size_t rc_n_settings = sizeof rc_settings / sizeof rc_settings[0];

const char *rc_setting_text(const rc_results *r, const rc_setting *s)
{
    const char *base = (const char *)r + s->off;
    if (s->cap)
        return base;
    const char *p;
    memcpy(&p, base, sizeof p);
    return p ? p : "";
}

void rc_results_free(rc_results *r)
{
    if (!r)
        return;
    free(r->command_line);
    free(r->model_path);
    free(r->prompt_tokens);
    free(r->prompt_len);
    for (int64_t i = 0; r->prompt_text && i < r->n_prompts; i++)
        free(r->prompt_text[i]);
    free(r->prompt_text);
    for (int64_t i = 0; r->completion && i < r->n_seq; i++)
        free(r->completion[i]);
    free(r->completion);
    free(r->seq_prompt);
    free(r->seq_sample);
    free(r->gen_tokens);
    free(r->gen_valid);
    free(r->logprob_gen);
    free(r->logprob_gen_processed);
    free(r->entropy_gen);
    free(r->logprob_ref);
    for (int i = 0; r->lens && i < r->n_lens; i++) {
        rc_len_result *L = &r->lens[i];
        free(L->logprob_fwd);
        free(L->pos_count);
        free(L->pos_mean_abs_log_ratio);
        free(L->pos_max_abs_log_ratio);
        free(L->pos_ratio_std);
        free(L->seq_log_ratio_sum);
        free(L->seq_log_ratio_mean);
    }
    free(r->lens);
    free(r->cross);
    for (int i = 0; r->sweep && i < r->n_sweep; i++) {
        rc_results_free(r->sweep[i].res);
        free(r->sweep[i].res);
    }
    free(r->sweep);
    memset(r, 0, sizeof *r);
}


/* bitwise equality of two float arrays (NaN patterns included) */
static bool same_bits(const float *a, const float *b, int64_t n)
{
    return n == 0 || (a && b && memcmp(a, b, (size_t)n * sizeof *a) == 0);
}

void rc_sweep_summarise(rc_results *r)
{
    r->sweep_best = r->sweep_best_other = -1;
    const rc_len_stats *base = rc_results_longest(r);
    double best_k3 = base ? base->k3 : NAN, other_k3 = best_k3;
    for (int i = 0; i < r->n_sweep; i++) {
        rc_sweep_row *row = &r->sweep[i];
        const rc_results *q = row->res;
        row->identical = false;
        if (!q)
            continue;
        bool same = q->n_seq == r->n_seq && q->gen_len == r->gen_len && q->n_lens == r->n_lens &&
                    same_bits(q->logprob_gen, r->logprob_gen, r->n_seq * r->gen_len);
        for (int l = 0; same && l < r->n_lens; l++)
            same = q->lens[l].len == r->lens[l].len &&
                   same_bits(q->lens[l].logprob_fwd, r->lens[l].logprob_fwd, r->n_seq * r->lens[l].len);
        row->identical = same;
        const rc_len_stats *st = rc_results_longest(q);
        if (!row->noise_floor && st && st->k3 < best_k3) { /* NaN never wins */
            best_k3 = st->k3;
            r->sweep_best = i;
        }
        if (!row->noise_floor && !row->invariant && st && st->k3 < other_k3) {
            other_k3 = st->k3;
            r->sweep_best_other = i;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* numpy's default ("linear") quantile of sorted v[0..n) */
static double quantile_sorted(const double *v, int64_t n, double q)
{
    if (n == 0)
        return NAN;
    double pos = q * (double)(n - 1);
    int64_t lo = (int64_t)floor(pos);
    int64_t hi = lo + 1 < n ? lo + 1 : n - 1;
    double frac = pos - (double)lo;
    return v[lo] + (v[hi] - v[lo]) * frac;
}

/* mean, population std (two passes), min and max of the values of v[0..n)
 * that are not NaN; NaN when there are none */
static void describe(const double *v, int64_t n, double *mean, double *std, double *mn, double *mx)
{
    int64_t c = 0;
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i])) {
            c++;
            sum += v[i];
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
    if (c == 0) {
        *mean = *std = *mn = *mx = NAN;
        return;
    }
    const double m = sum / (double)c;
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            ss += (v[i] - m) * (v[i] - m);
    *mean = m;
    *std = sqrt(ss / (double)c);
    *mn = lo;
    *mx = hi;
}

#define CORR(field, kind, table, label, rule) {#field, offsetof(rc_corrections, field), kind, table, label, rule}
const rc_corr_stat rc_corr_stats[] = {
    CORR(token_tis_clipfrac, RC_CORR_TOKENS, true, "token TIS (verl, slime)", "r > 2"),
    CORR(token_mis_maskfrac, RC_CORR_TOKENS, true, "token MIS (slime)", "r outside [0.5, 2]"),
    CORR(icepop_maskfrac, RC_CORR_TOKENS, true, "IcePop (verl preset)", "r outside [0.5, 5]"),
    CORR(token_cap3_frac, RC_CORR_TOKENS, true, "TRL token_truncate / _mask", "r > 3"),
    CORR(dppo_maskfrac_high, RC_CORR_TOKENS, true, "prime-rl DPPO, advantage > 0", "p' - p > 0.2"),
    CORR(dppo_maskfrac_low, RC_CORR_TOKENS, true, "prime-rl DPPO, advantage < 0", "p' - p < -0.2"),
    CORR(prime_legacy_maskfrac, RC_CORR_TOKENS, true, "prime-rl before 2026-03", "r / e^M outside [1/8,8] / [.1,10]"),
    CORR(seq_tis_clipfrac, RC_CORR_SEQUENCES, true, "sequence TIS (verl default)", "e^S > 2"),
    CORR(seq_mis_maskfrac, RC_CORR_SEQUENCES, true, "sequence MIS (verl Seq-MIS)", "e^S outside [0.5, 2]"),
    CORR(seq_geo_rs_maskfrac, RC_CORR_SEQUENCES, true, "geometric RS (verl Geo-RS)", "e^-M outside [0.999, 1.001]"),
    CORR(seq_cap3_frac, RC_CORR_SEQUENCES, true, "TRL sequence_* (its default)", "e^S > 3"),
    CORR(chi2_token, RC_CORR_METRIC, true, "verl chi2_token", "mean r^2 - 1"),
    CORR(chi2_seq, RC_CORR_METRIC, true, "verl chi2_seq", "mean e^2S - 1"),
    CORR(ppl_trainer, RC_CORR_METRIC, false, "verl training_ppl", "mean exp(-mean new)"),
    CORR(ppl_sampler, RC_CORR_METRIC, false, "verl rollout_ppl", "mean exp(-mean old)"),
    CORR(log_ppl_diff, RC_CORR_METRIC, false, "verl log_ppl_diff", "mean -M"),
    CORR(log_ppl_abs_diff, RC_CORR_METRIC, true, "verl log_ppl_abs_diff", "mean |M|"),
    CORR(ppl_ratio, RC_CORR_METRIC, false, "verl ppl_ratio", "mean e^-M"),
    CORR(mean_abs_log_ratio, RC_CORR_METRIC, true, "TRL sampling_logp_difference", "mean |log r|"),
    CORR(max_abs_log_ratio, RC_CORR_METRIC, true, "TRL sampling_logp_difference", "max |log r|"),
};
#undef CORR
const size_t rc_n_corr_stats = sizeof rc_corr_stats / sizeof rc_corr_stats[0];
_Static_assert(sizeof(rc_corr_stats) / sizeof(rc_corr_stats[0]) == sizeof(rc_corrections) / sizeof(double),
               "one rc_corr_stats entry per field of rc_corrections");

double rc_corr_value(const rc_corrections *c, const rc_corr_stat *e)
{
    double v;
    memcpy(&v, (const char *)c + e->off, sizeof v);
    return v;
}

/* "outside [lo, hi]", NaN included */
static bool outside(double v, double lo, double hi)
{
    return !(v >= lo && v <= hi);
}

/* verl's clamp of a log ratio before exponentiating */
static double verl_clamp(double lr)
{
    return lr < -RC_VERL_SAFETY_BOUND ? -RC_VERL_SAFETY_BOUND : lr > RC_VERL_SAFETY_BOUND ? RC_VERL_SAFETY_BOUND : lr;
}

/* The published corrections of L at their defaults (results.h, README
 * "Corrections"), from the tensors; needs L's per-sequence S and M. */
static void corrections(const rc_results *r, rc_len_result *L)
{
    const int64_t G = r->gen_len, Ln = L->len;
    rc_corrections *c = &L->st.corr;
    int64_t n = 0, tis = 0, mis = 0, icepop = 0, cap3 = 0, dppo_hi = 0, dppo_lo = 0, prime = 0;
    int64_t ns = 0, seq_tis = 0, seq_mis = 0, geo_rs = 0, seq_cap3 = 0;
    double chi2_tok = 0, chi2_seq = 0, ppl_tr = 0, ppl_sa = 0, lpd = 0, lpad = 0, pplr = 0, abs_sum = 0,
           abs_max = 0;
    const double seq_mis_lo = log(RC_SEQ_MIS_LOW), seq_mis_hi = log(RC_SEQ_MIS_HIGH);
    const double geo_lo = log(RC_GEO_RS_LOW), geo_hi = log(RC_GEO_RS_HIGH);
    for (int64_t sq = 0; sq < r->n_seq; sq++) {
        const int64_t valid = r->gen_valid[sq] < Ln ? r->gen_valid[sq] : Ln;
        if (valid < 1)
            continue;
        int64_t prime_tok = 0;
        bool above_seq_high = false; /* some token r > 100 */
        double sum_new = 0, sum_old = 0;
        for (int64_t t = 0; t < valid; t++) {
            const double fw = L->logprob_fwd[sq * Ln + t], gn = r->logprob_gen[sq * G + t];
            const double lr = fw - gn, ratio = exp(lr), dp = exp(fw) - exp(gn);
            n++;
            tis += !(ratio <= RC_TIS_CAP);
            mis += outside(ratio, RC_MIS_LOW, RC_MIS_HIGH);
            icepop += outside(ratio, RC_ICEPOP_LOW, RC_ICEPOP_HIGH);
            cap3 += !(ratio <= RC_TRL_CAP);
            dppo_hi += dp > RC_DPPO_MASK;
            dppo_lo += dp < -RC_DPPO_MASK;
            prime_tok += outside(ratio, RC_PRIME_TOKEN_LOW, RC_PRIME_TOKEN_HIGH);
            above_seq_high |= !(ratio <= RC_PRIME_SEQ_HIGH);
            chi2_tok += expm1(2.0 * verl_clamp(lr)); /* e^2lr - 1 without cancellation */
            abs_sum += fabs(lr);
            abs_max = fabs(lr) > abs_max ? fabs(lr) : abs_max;
            sum_new += fw;
            sum_old += gn;
        }
        /* prime-rl's legacy is_masked: the token mask, or the whole sequence
         * by its geometric ratio or its largest token ratio */
        const double S = L->seq_log_ratio_sum[sq], M = L->seq_log_ratio_mean[sq];
        const bool seq_masked = outside(exp(M), RC_PRIME_GEO_LOW, RC_PRIME_GEO_HIGH) || above_seq_high;
        prime += seq_masked ? valid : prime_tok;
        ns++;
        seq_tis += !(exp(S) <= RC_SEQ_TIS_CAP);
        seq_mis += outside(-S, seq_mis_lo, seq_mis_hi);
        geo_rs += outside(-M, geo_lo, geo_hi);
        seq_cap3 += !(exp(S) <= RC_TRL_CAP);
        chi2_seq += expm1(2.0 * verl_clamp(S));
        ppl_tr += exp(-sum_new / (double)valid);
        ppl_sa += exp(-sum_old / (double)valid);
        lpd += -M;
        lpad += fabs(M);
        pplr += exp(-M);
    }
    const double tn = n ? (double)n : NAN, sn = ns ? (double)ns : NAN;
    c->token_tis_clipfrac = (double)tis / tn;
    c->token_mis_maskfrac = (double)mis / tn;
    c->icepop_maskfrac = (double)icepop / tn;
    c->token_cap3_frac = (double)cap3 / tn;
    c->dppo_maskfrac_high = (double)dppo_hi / tn;
    c->dppo_maskfrac_low = (double)dppo_lo / tn;
    c->prime_legacy_maskfrac = (double)prime / tn;
    c->chi2_token = chi2_tok / tn;
    c->mean_abs_log_ratio = abs_sum / tn;
    c->max_abs_log_ratio = n ? abs_max : NAN;
    c->seq_tis_clipfrac = (double)seq_tis / sn;
    c->seq_mis_maskfrac = (double)seq_mis / sn;
    c->seq_geo_rs_maskfrac = (double)geo_rs / sn;
    c->seq_cap3_frac = (double)seq_cap3 / sn;
    c->chi2_seq = chi2_seq / sn;
    c->ppl_trainer = ppl_tr / sn;
    c->ppl_sampler = ppl_sa / sn;
    c->log_ppl_diff = lpd / sn;
    c->log_ppl_abs_diff = lpad / sn;
    c->ppl_ratio = pplr / sn;
}

/* the sequence-level statistics of L from its per-sequence S and M */
static void seq_stats(const rc_results *r, rc_len_result *L)
{
    rc_len_stats *st = &L->st;
    const rc_stat_params *P = &r->stat;
    int64_t c = 0, outside = 0, above = 0;
    for (int64_t sq = 0; sq < r->n_seq; sq++) {
        if (r->gen_valid[sq] < 1 || L->len < 1)
            continue; /* no valid token */
        const double S = L->seq_log_ratio_sum[sq], M = L->seq_log_ratio_mean[sq];
        c++;
        const double geo = exp(M), ratio = exp(S);
        outside += !(geo >= 1.0 - P->seq_eps && geo <= 1.0 + P->seq_eps);
        above += !(ratio <= P->seq_cap);
    }
    st->seq_count = c;
    describe(L->seq_log_ratio_sum, r->n_seq, &st->seq_sum_mean, &st->seq_sum_std, &st->seq_sum_min,
             &st->seq_sum_max);
    describe(L->seq_log_ratio_mean, r->n_seq, &st->seq_mean_mean, &st->seq_mean_std, &st->seq_mean_min,
             &st->seq_mean_max);
    st->seq_frac_outside_band = c ? (double)outside / (double)c : NAN;
    st->seq_frac_above_cap = c ? (double)above / (double)c : NAN;
}

const char *const rc_strata_names[RC_N_STRATA] = {"prob", "entropy"};
#define SF(field) {#field, offsetof(rc_stratum, field)}
const rc_stratum_field rc_stratum_fields[] = {
    SF(lo), SF(hi), SF(mean_log_ratio), SF(std_log_ratio), SF(mean_abs_log_ratio), SF(max_abs_log_ratio),
    SF(clipfrac), SF(k3), SF(share_abs_log_ratio),
};
#undef SF
const size_t rc_n_stratum_fields = sizeof rc_stratum_fields / sizeof rc_stratum_fields[0];
_Static_assert(sizeof(rc_stratum_fields) / sizeof(rc_stratum_fields[0]) ==
                   (sizeof(rc_stratum) - sizeof(int64_t)) / sizeof(double),
               "one rc_stratum_fields entry per double of rc_stratum");

double rc_stratum_value(const rc_stratum *b, const rc_stratum_field *f)
{
    double v;
    memcpy(&v, (const char *)b + f->off, sizeof v);
    return v;
}

/* the value token (sq, t) is binned by: its stored log-prob (prob) or the
 * sampler's entropy at that step (entropy) */
static double strata_value(const rc_results *r, int kind, int64_t i)
{
    return kind == RC_STRATA_PROB ? (double)r->logprob_gen[i] : (double)r->entropy_gen[i];
}

/* decile of v: how many of the 9 edges are <= v */
static int decile_of(const double *edges, double v)
{
    int k = 0;
    while (k < RC_N_DECILES - 1 && edges[k] <= v)
        k++;
    return k;
}

/* The strata of L (results.h rc_strata): decile edges from the sorted
 * values, then one pass per token. vals: scratch of S * L + 1 doubles. */
static void strata(const rc_results *r, rc_len_result *L, int kind, double *vals)
{
    rc_strata *sa = &L->st.strata[kind];
    memset(sa, 0, sizeof *sa);
    const int64_t G = r->gen_len, Ln = L->len;
    if (kind == RC_STRATA_ENTROPY && !r->entropy_gen) {
        for (int k = 0; k < RC_N_DECILES - 1; k++)
            sa->edges[k] = NAN;
        for (int k = 0; k < RC_N_DECILES; k++) {
            rc_stratum *b = &sa->bin[k];
            b->lo = b->hi = b->mean_log_ratio = b->std_log_ratio = b->mean_abs_log_ratio = b->max_abs_log_ratio =
                b->clipfrac = b->k3 = b->share_abs_log_ratio = NAN;
        }
        return; /* a file written before the entropy: not present */
    }
    sa->present = true;
    int64_t n = 0;
    for (int64_t sq = 0; sq < r->n_seq; sq++) {
        const int64_t valid = r->gen_valid[sq] < Ln ? r->gen_valid[sq] : Ln;
        for (int64_t t = 0; t < valid; t++) {
            const double v = strata_value(r, kind, sq * G + t);
            const double lr = (double)L->logprob_fwd[sq * Ln + t] - (double)r->logprob_gen[sq * G + t];
            if (!isnan(v) && !isnan(lr))
                vals[n++] = v;
        }
    }
    sa->count = n;
    qsort(vals, (size_t)n, sizeof *vals, cmp_double);
    for (int k = 1; k < RC_N_DECILES; k++)
        sa->edges[k - 1] = n > 0 ? vals[(k * n) / RC_N_DECILES] : NAN;
    /* per decile: sums of log r, |log r|, (log r)^2 about the mean (second pass) */
    double sum[RC_N_DECILES] = {0}, sum_abs[RC_N_DECILES] = {0}, mx[RC_N_DECILES] = {0}, k3[RC_N_DECILES] = {0};
    double lo[RC_N_DECILES], hi[RC_N_DECILES], ss[RC_N_DECILES] = {0};
    int64_t cnt[RC_N_DECILES] = {0}, clipped[RC_N_DECILES] = {0};
    for (int k = 0; k < RC_N_DECILES; k++) {
        lo[k] = INFINITY;
        hi[k] = -INFINITY;
    }
    const rc_stat_params *P = &r->stat;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t sq = 0; sq < r->n_seq; sq++) {
            const int64_t valid = r->gen_valid[sq] < Ln ? r->gen_valid[sq] : Ln;
            for (int64_t t = 0; t < valid; t++) {
                const double v = strata_value(r, kind, sq * G + t);
                const double lr = (double)L->logprob_fwd[sq * Ln + t] - (double)r->logprob_gen[sq * G + t];
                if (isnan(v) || isnan(lr))
                    continue;
                const int k = decile_of(sa->edges, v);
                if (pass == 1) {
                    const double d = lr - sum[k] / (double)cnt[k];
                    ss[k] += d * d;
                    continue;
                }
                const double ratio = exp(lr);
                cnt[k]++;
                sum[k] += lr;
                sum_abs[k] += fabs(lr);
                mx[k] = fabs(lr) > mx[k] ? fabs(lr) : mx[k];
                k3[k] += ratio - 1.0 - lr;
                clipped[k] += !(ratio >= 1.0 - P->clip_eps_low && ratio <= 1.0 + P->clip_eps_high);
                lo[k] = v < lo[k] ? v : lo[k];
                hi[k] = v > hi[k] ? v : hi[k];
            }
        }
    double total_abs = 0;
    for (int k = 0; k < RC_N_DECILES; k++)
        total_abs += sum_abs[k];
    for (int k = 0; k < RC_N_DECILES; k++) {
        rc_stratum *b = &sa->bin[k];
        const double c = cnt[k] ? (double)cnt[k] : NAN;
        b->count = cnt[k];
        b->lo = cnt[k] ? (kind == RC_STRATA_PROB ? exp(lo[k]) : lo[k]) : NAN;
        b->hi = cnt[k] ? (kind == RC_STRATA_PROB ? exp(hi[k]) : hi[k]) : NAN;
        b->mean_log_ratio = sum[k] / c;
        b->std_log_ratio = sqrt(ss[k] / c);
        b->mean_abs_log_ratio = sum_abs[k] / c;
        b->max_abs_log_ratio = cnt[k] ? mx[k] : NAN;
        b->clipfrac = (double)clipped[k] / c;
        b->k3 = k3[k] / c;
        b->share_abs_log_ratio = n > 0 && total_abs > 0 ? sum_abs[k] / total_abs : NAN;
    }
}


static rc_status len_stats(const rc_results *r, rc_len_result *L)
{
    const int64_t S = r->n_seq, G = r->gen_len, Ln = L->len;
    rc_len_stats *st = &L->st;
    double *ratios = NULL;
    RC_TRY(rc_calloc((void **)&ratios, S * Ln + 1, sizeof *ratios, "statistics"));
    rc_status s = RC_OK;
    if ((s = rc_calloc((void **)&L->pos_count, Ln + 1, sizeof *L->pos_count, "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_mean_abs_log_ratio, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_max_abs_log_ratio, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_ratio_std, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->seq_log_ratio_sum, S + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->seq_log_ratio_mean, S + 1, sizeof(double), "statistics")) != RC_OK) {
        free(ratios);
        return s;
    }
    const rc_stat_params *P = &r->stat;
    double *pos_sum_r = NULL, *pos_sum_r2 = NULL;
    if ((s = rc_calloc((void **)&pos_sum_r, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&pos_sum_r2, Ln + 1, sizeof(double), "statistics")) != RC_OK) {
        free(ratios);
        free(pos_sum_r);
        return s;
    }
    int64_t n = 0, identical = 0, first_div = -1, nonfinite = 0, clipped = 0;
    double sum = 0, sum_k1 = 0, sum_k3 = 0, sum_mpe = 0, mn = INFINITY, mx = -INFINITY;
    int64_t above[RC_N_THRESHOLDS] = {0};
    double rg_sum = 0, rg_max = 0, rf_sum = 0, rf_max = 0;
    for (int64_t sq = 0; sq < S; sq++) {
        int64_t valid = r->gen_valid[sq] < Ln ? r->gen_valid[sq] : Ln;
        double seq_sum = 0;
        for (int64_t t = 0; t < valid; t++) {
            float fw = L->logprob_fwd[sq * Ln + t], gn = r->logprob_gen[sq * G + t];
            double lr = (double)fw - (double)gn; /* log ratio = new - old */
            double ratio = exp(lr);
            if (!isfinite(ratio)) /* an overflowed log-prob: counted as exceeding every threshold */
                nonfinite++;
            ratios[n++] = ratio;
            sum += ratio;
            mn = ratio < mn ? ratio : mn;
            mx = ratio > mx ? ratio : mx;
            sum_k1 += -lr;
            sum_k3 += ratio - 1.0 - lr;
            sum_mpe += exp(fabs(lr));
            seq_sum += lr;
            clipped += !(ratio >= 1.0 - P->clip_eps_low && ratio <= 1.0 + P->clip_eps_high);
            for (int k = 0; k < RC_N_THRESHOLDS; k++)
                above[k] += !(fabs(ratio - 1.0) <= rc_ratio_thresholds[k]);
            if (memcmp(&fw, &gn, sizeof fw) == 0) {
                identical++;
            } else if (first_div < 0 || t < first_div) {
                first_div = t;
            }
            L->pos_count[t]++;
            L->pos_mean_abs_log_ratio[t] += fabs(lr);
            if (fabs(lr) > L->pos_max_abs_log_ratio[t])
                L->pos_max_abs_log_ratio[t] = fabs(lr);
            pos_sum_r[t] += ratio - 1.0; /* shifted sums: no cancellation near 1 */
            pos_sum_r2[t] += (ratio - 1.0) * (ratio - 1.0);
            if (r->logprob_ref) {
                double rf = r->logprob_ref[sq * G + t];
                double eg = fabs((double)gn - rf), ef = fabs((double)fw - rf);
                rg_sum += eg;
                rf_sum += ef;
                rg_max = eg > rg_max ? eg : rg_max;
                rf_max = ef > rf_max ? ef : rf_max;
            }
        }
        L->seq_log_ratio_sum[sq] = valid > 0 ? seq_sum : NAN;
        L->seq_log_ratio_mean[sq] = valid > 0 ? seq_sum / (double)valid : NAN;
    }
    st->count = n;
    if (n > 0) {
        st->mean = sum / (double)n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (ratios[i] - st->mean) * (ratios[i] - st->mean);
        st->std = sqrt(ss / (double)n);
        st->min = nonfinite ? NAN : mn;
        st->max = nonfinite ? NAN : mx;
        if (!nonfinite)
            qsort(ratios, (size_t)n, sizeof *ratios, cmp_double);
        for (int k = 0; k < RC_N_QUANTILES; k++)
            st->quantiles[k] = nonfinite ? NAN : quantile_sorted(ratios, n, rc_quantile_levels[k]);
        for (int k = 0; k < RC_N_THRESHOLDS; k++)
            st->frac_above[k] = (double)above[k] / (double)n;
        st->k1 = sum_k1 / (double)n;
        st->k3 = sum_k3 / (double)n;
        st->mult_prob_err = sum_mpe / (double)n;
        st->identical_frac = (double)identical / (double)n;
        st->clipfrac = (double)clipped / (double)n;
    } else {
        st->mean = st->std = st->min = st->max = st->k1 = st->k3 = st->mult_prob_err = st->clipfrac = NAN;
        st->identical_frac = NAN;
        for (int k = 0; k < RC_N_QUANTILES; k++)
            st->quantiles[k] = NAN;
        for (int k = 0; k < RC_N_THRESHOLDS; k++)
            st->frac_above[k] = NAN;
    }
    st->first_divergent_position = first_div;
    if (r->logprob_ref && n > 0) {
        st->ref_gen_mean_abs = rg_sum / (double)n;
        st->ref_fwd_mean_abs = rf_sum / (double)n;
        st->ref_gen_max_abs = rg_max;
        st->ref_fwd_max_abs = rf_max;
    } else {
        st->ref_gen_mean_abs = st->ref_fwd_mean_abs = st->ref_gen_max_abs = st->ref_fwd_max_abs = NAN;
    }
    for (int64_t t = 0; t < Ln; t++) {
        int64_t c = L->pos_count[t];
        if (c == 0) {
            L->pos_mean_abs_log_ratio[t] = L->pos_max_abs_log_ratio[t] = L->pos_ratio_std[t] = NAN;
            continue;
        }
        L->pos_mean_abs_log_ratio[t] /= (double)c;
        double m = pos_sum_r[t] / (double)c;
        double var = pos_sum_r2[t] / (double)c - m * m;
        L->pos_ratio_std[t] = sqrt(var > 0 ? var : 0);
    }
    free(pos_sum_r);
    free(pos_sum_r2);
    seq_stats(r, L);
    corrections(r, L);
    for (int k = 0; k < RC_N_STRATA; k++)
        strata(r, L, k, ratios); /* ratios' S * L + 1 doubles as scratch */
    free(ratios);
    return RC_OK;
}

/* Growth (results.h rc_growth) from every length's var(S). */
static void growth(rc_results *r)
{
    rc_growth *g = &r->growth;
    memset(g, 0, sizeof *g);
    g->exponent = g->log_coef = g->r2 = g->cap_length = NAN;
    g->cap = r->stat.seq_cap;
    double x[RC_MAX_LENS_READ], y[RC_MAX_LENS_READ];
    int n = 0;
    for (int i = 0; i < r->n_lens && n < RC_MAX_LENS_READ; i++) {
        const double sd = r->lens[i].st.seq_sum_std, var = sd * sd;
        if (r->lens[i].st.seq_count > 1 && isfinite(var) && var > 0) {
            x[n] = log((double)r->lens[i].len);
            y[n] = log(var);
            n++;
        }
    }
    g->n_points = n;
    if (n < 2) {
        if (r->n_lens < 2)
            snprintf(g->reason, sizeof g->reason, "needs 2 or more lengths (e.g. --len 20,40,50 or 64:4096:x2)");
        else
            snprintf(g->reason, sizeof g->reason,
                     "var(S) > 0 at %d of the %d lengths, needs 2 (0: every sequence has the same S)", n,
                     r->n_lens);
        return;
    }
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    mx /= n;
    my /= n;
    double sxx = 0, sxy = 0, syy = 0;
    for (int i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
        syy += (y[i] - my) * (y[i] - my);
    }
    const double a = sxy / sxx, b = my - a * mx;
    g->exponent = a;
    g->log_coef = b;
    if (n >= 3 && syy > 0) {
        double res = 0;
        for (int i = 0; i < n; i++)
            res += (y[i] - (b + a * x[i])) * (y[i] - (b + a * x[i]));
        g->r2 = 1.0 - res / syy;
    }
    snprintf(g->looks_like, sizeof g->looks_like, "%s",
             a < RC_GROWTH_SLOW_MAX   ? "slower than sqrt(L)"
             : a < RC_GROWTH_SQRT_MAX ? "sqrt(L)"
             : a <= RC_GROWTH_FAST_MIN ? "L"
                                       : "faster than L");
    /* std(S) = sqrt(e^b L^a) = log(cap)  <=>  L = (log(cap)^2 / e^b)^(1/a) */
    const double target = log(g->cap);
    if (!(a > 0))
        snprintf(g->reason, sizeof g->reason, "var(S) does not grow with L (exponent %.3g)", a);
    else if (!(target > 0))
        snprintf(g->reason, sizeof g->reason, "the cap %g is not above 1", g->cap);
    else
        g->cap_length = exp((2.0 * log(target) - b) / a);
}

const char *const rc_objective_names[RC_N_OBJECTIVES] = {"token_ppo", "sequence_is", "gspo"};

const char *rc_verdict_name(rc_verdict_level v)
{
    return v == RC_VERDICT_FAIL ? "FAIL" : v == RC_VERDICT_WARN ? "WARN" : "OK";
}

/* the level of a fraction of things clipped / masked at step 0 */
static rc_verdict_level frac_level(double f)
{
    return f > RC_VERDICT_FAIL_FRAC ? RC_VERDICT_FAIL : f > 0 ? RC_VERDICT_WARN : RC_VERDICT_OK;
}

/* index of the length with the largest value of field (NaN never wins) */
static int worst_len(const rc_results *r, size_t off)
{
    int w = 0;
    double best = -INFINITY;
    for (int i = 0; i < r->n_lens; i++) {
        const double v = *(const double *)(const void *)((const char *)&r->lens[i].st + off);
        if (v > best) {
            best = v;
            w = i;
        }
    }
    return w;
}

/* index of the longest length */
static int longest_len(const rc_results *r)
{
    int il = 0;
    for (int i = 1; i < r->n_lens; i++)
        il = r->lens[i].len > r->lens[il].len ? i : il;
    return il;
}

const rc_len_stats *rc_results_longest(const rc_results *r)
{
    return r->n_lens > 0 ? &r->lens[longest_len(r)].st : NULL;
}

static void verdict(rc_results *r)
{
    rc_verdict *v = &r->verdict;
    memset(v, 0, sizeof *v);
    v->len = -1;
    v->worst_token_seq = v->worst_token_pos = v->worst_seq = -1;
    v->worst_token_ratio = v->worst_seq_ratio = NAN;
    int64_t tokens = 0;
    for (int i = 0; i < r->n_lens; i++)
        tokens += r->lens[i].st.count;
    if (tokens == 0) { /* nothing scored: nothing to judge */
        for (int o = 0; o < RC_N_OBJECTIVES; o++)
            snprintf(v->reason[o], sizeof v->reason[o], "no valid tokens");
        return;
    }
    const rc_stat_params *P = &r->stat;
    /* token-level PPO: the published gates, then the clip fraction */
    const int ic = worst_len(r, offsetof(rc_len_stats, clipfrac)), ik = worst_len(r, offsetof(rc_len_stats, k3)),
              im = worst_len(r, offsetof(rc_len_stats, mult_prob_err));
    const rc_len_stats *c = &r->lens[ic].st, *k = &r->lens[ik].st, *m = &r->lens[im].st;
    char *why = v->reason[RC_OBJ_TOKEN_PPO];
    const size_t wn = sizeof v->reason[0];
    if (m->mult_prob_err > RC_GATE_MULT_PROB_ERR) {
        v->level[RC_OBJ_TOKEN_PPO] = RC_VERDICT_FAIL;
        snprintf(why, wn, "mean exp|log r| %.4g > %.4g (NeMo-RL's gate) at L=%lld", m->mult_prob_err,
                 RC_GATE_MULT_PROB_ERR, (long long)r->lens[im].len);
    } else if (k->k3 > RC_GATE_MISMATCH_KL) {
        v->level[RC_OBJ_TOKEN_PPO] = RC_VERDICT_FAIL;
        snprintf(why, wn, "k3 %.3g > %.3g (prime-rl's mismatch_kl bar) at L=%lld", k->k3, RC_GATE_MISMATCH_KL,
                 (long long)r->lens[ik].len);
    } else {
        v->level[RC_OBJ_TOKEN_PPO] = frac_level(c->clipfrac);
        char where[64];
        if (c->clipfrac > 0)
            snprintf(where, sizeof where, "%.3g%% of tokens clipped at step 0 at L=%lld", 100.0 * c->clipfrac,
                     (long long)r->lens[ic].len);
        else
            snprintf(where, sizeof where, "no token clipped at step 0");
        snprintf(why, wn, "%s; k3 %.3g < %.3g (prime-rl), mean exp|log r| %.5g < %.3g (NeMo-RL)", where, k->k3,
                 RC_GATE_MISMATCH_KL, m->mult_prob_err, RC_GATE_MULT_PROB_ERR);
    }
    const int ia = worst_len(r, offsetof(rc_len_stats, seq_frac_above_cap));
    const rc_len_stats *a = &r->lens[ia].st;
    v->level[RC_OBJ_SEQUENCE_IS] = frac_level(a->seq_frac_above_cap);
    if (a->seq_frac_above_cap > 0)
        snprintf(v->reason[RC_OBJ_SEQUENCE_IS], wn, "%.3g%% of sequences have e^S > %g at L=%lld (e^S %.4g to %.4g)",
                 100.0 * a->seq_frac_above_cap, P->seq_cap, (long long)r->lens[ia].len, exp(a->seq_sum_min),
                 exp(a->seq_sum_max));
    else {
        const int il = longest_len(r); /* the range at the longest length */
        snprintf(v->reason[RC_OBJ_SEQUENCE_IS], wn, "no sequence has e^S > %g (e^S %.4g to %.4g at L=%lld)",
                 P->seq_cap, exp(r->lens[il].st.seq_sum_min), exp(r->lens[il].st.seq_sum_max),
                 (long long)r->lens[il].len);
    }
    const int ib = worst_len(r, offsetof(rc_len_stats, seq_frac_outside_band));
    const rc_len_stats *b = &r->lens[ib].st;
    v->level[RC_OBJ_GSPO] = frac_level(b->seq_frac_outside_band);
    if (b->seq_frac_outside_band > 0)
        snprintf(v->reason[RC_OBJ_GSPO], wn, "%.3g%% of sequences have |e^M - 1| > %g at L=%lld (e^M %.6g to %.6g)",
                 100.0 * b->seq_frac_outside_band, P->seq_eps, (long long)r->lens[ib].len, exp(b->seq_mean_min),
                 exp(b->seq_mean_max));
    else
        snprintf(v->reason[RC_OBJ_GSPO], wn, "every sequence has |e^M - 1| <= %g", P->seq_eps);
    /* the worst token and sequence at the longest length */
    const rc_len_result *L = &r->lens[longest_len(r)];
    v->len = L->len;
    double wt = -1, ws = -1;
    for (int64_t sq = 0; sq < r->n_seq; sq++) {
        const int64_t valid = r->gen_valid[sq] < L->len ? r->gen_valid[sq] : L->len;
        for (int64_t t = 0; t < valid; t++) {
            const double lr = (double)L->logprob_fwd[sq * L->len + t] - (double)r->logprob_gen[sq * r->gen_len + t];
            if (fabs(lr) > wt) {
                wt = fabs(lr);
                v->worst_token_seq = sq;
                v->worst_token_pos = t;
                v->worst_token_ratio = exp(lr);
            }
        }
        const double S = L->seq_log_ratio_sum[sq];
        if (!isnan(S) && fabs(S) > ws) {
            ws = fabs(S);
            v->worst_seq = sq;
            v->worst_seq_ratio = exp(S);
        }
    }
}

void rc_stat_params_fill_defaults(rc_stat_params *p)
{
    if (!(p->clip_eps_low > 0))
        p->clip_eps_low = RC_DEFAULT_CLIP_EPS;
    if (!(p->clip_eps_high > 0))
        p->clip_eps_high = RC_DEFAULT_CLIP_EPS;
    if (!(p->seq_eps > 0))
        p->seq_eps = RC_DEFAULT_SEQ_EPS;
    if (!(p->seq_cap > 0))
        p->seq_cap = RC_DEFAULT_SEQ_CAP;
}

rc_status rc_compute_stats(rc_results *r)
{
    rc_stat_params_fill_defaults(&r->stat);
    for (int i = 0; i < r->n_lens; i++) {
        if (r->lens[i].len > r->gen_len)
            return rc_errorf(RC_ERR_INTERNAL, "length %lld exceeds the generated %lld",
                             (long long)r->lens[i].len, (long long)r->gen_len);
        RC_TRY(len_stats(r, &r->lens[i]));
    }
    free(r->cross);
    r->cross = NULL;
    r->n_cross = 0;
    int pairs = r->n_lens * (r->n_lens - 1) / 2;
    if (pairs > 0)
        RC_TRY(rc_calloc((void **)&r->cross, pairs, sizeof *r->cross, "statistics"));
    for (int i = 0; i < r->n_lens; i++)
        for (int j = i + 1; j < r->n_lens; j++) {
            const rc_len_result *A = &r->lens[i], *B = &r->lens[j];
            int64_t La = A->len, Lb = B->len, Lm = La < Lb ? La : Lb;
            rc_cross_len *c = &r->cross[r->n_cross++];
            c->len_a = La;
            c->len_b = Lb;
            double sum = 0, mx = 0;
            int64_t n = 0;
            for (int64_t sq = 0; sq < r->n_seq; sq++) {
                int64_t valid = r->gen_valid[sq] < Lm ? r->gen_valid[sq] : Lm;
                for (int64_t t = 0; t < valid; t++) {
                    double d = fabs((double)A->logprob_fwd[sq * La + t] - (double)B->logprob_fwd[sq * Lb + t]);
                    sum += d;
                    mx = d > mx ? d : mx;
                    n++;
                }
            }
            c->count = n;
            c->max_abs = n ? mx : NAN;
            c->mean_abs = n ? sum / (double)n : NAN;
        }
    verdict(r);
    growth(r);
    return RC_OK;
}
