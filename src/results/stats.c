/* Statistics of one run, computed from the stored tensors only (so that
 * `report` can recompute them from the HDF5 file). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "results.h"
#include "routing.h"
#include "advice.h"
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
    /* --layers N: "N of M" (files before it have none; "all" is not shown) */
    SET_SHOWN("layers", layers, true, "layers", "all"),
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
    /* the GPUs the layers ran on and why (files before it have none) */
    SET("gpu_split", "gpu_split", RC_SET_TEXT, gpu_split, sizeof(((rc_results *)0)->gpu_split), true),
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
    free(r->logprob_trainer);
    free(r->logprob_ratiocheck);
    free(r->threeway);
    for (int i = 0; r->lens && i < r->n_lens; i++) {
        rc_len_result *L = &r->lens[i];
        free(L->logprob_fwd);
        free(L->pos_count);
        free(L->pos_mean_abs_log_ratio);
        free(L->pos_max_abs_log_ratio);
        free(L->pos_ratio_std);
        free(L->seq_log_ratio_sum);
        free(L->seq_log_ratio_mean);
        free(L->dist_kl);
        free(L->dist_tv);
        free(L->dist_top1);
        free(L->pos_kl_mean);
        free(L->pos_tv_mean);
        free(L->pos_top1_agree);
    }
    free(r->lens);
    free(r->cross);
    for (int i = 0; r->sweep && i < r->n_sweep; i++) {
        rc_results_free(r->sweep[i].res);
        free(r->sweep[i].res);
    }
    free(r->sweep);
    rc_routing_free(r->routing);
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

static double seq_ratio_min(const rc_len_stats *s) { return exp(s->seq_sum_min); }
static double seq_ratio_max(const rc_len_stats *s) { return exp(s->seq_sum_max); }
static double abs_k1(const rc_len_stats *s) { return fabs(s->k1); }
static double max_abs_dev(const rc_len_stats *s) { return fmax(fabs(s->max - 1.0), fabs(s->min - 1.0)); }
static double nonidentical(const rc_len_stats *s) { return 1.0 - s->identical_frac; }
static double top1_disagree(const rc_len_stats *s) { return 1.0 - s->top1_agree; }

#define F64(field, where) RC_LF_F64, offsetof(rc_len_stats, field), NULL, where
#define I64(field, where) RC_LF_I64, offsetof(rc_len_stats, field), NULL, where
#define TOK(pos, label, fmt) {RC_LF_TAB_TOKENS, pos, label, fmt, 0}
#define SEQ(pos, label, fmt) {RC_LF_TAB_SEQS, pos, label, fmt, 0}
#define SWP(pos, label, fmt) {RC_LF_TAB_SWEEP, pos, label, fmt, 0}
#define DST(pos, label, fmt) {RC_LF_TAB_DIST, pos, label, fmt, 0}
#define H5J (RC_LF_H5 | RC_LF_JSON)
#define H5JS (RC_LF_H5 | RC_LF_JSON | RC_LF_SWEEP)
#define RTF(field, where) RC_LF_F64, offsetof(rc_len_stats, rt.field), NULL, (where) | RC_LF_ROUTING
#define RTI(field, where) RC_LF_I64, offsetof(rc_len_stats, rt.field), NULL, (where) | RC_LF_ROUTING
const rc_len_field rc_len_fields[] = {
    {"count", NULL, NULL, I64(count, H5J), {TOK(1, "tokens", "%8lld")}, 1},
    {"mean", NULL, NULL, F64(mean, H5J), {TOK(2, "mean", "%10.6f")}, 2},
    {"std", NULL, "std", F64(std, H5JS), {TOK(3, "std", "%10.3e"), SWP(1, "std", "%10.3e")}, 3},
    {"min", NULL, NULL, F64(min, H5J), {TOK(4, "min", "%9.5f")}, 4},
    {"max", NULL, NULL, F64(max, H5J), {TOK(5, "max", "%9.5f")}, 5},
    {"quantile_0.1pct", NULL, NULL, F64(quantiles[0], RC_LF_H5), {{0}}, 6},
    {"quantile_1pct", NULL, NULL, F64(quantiles[1], RC_LF_H5), {{0}}, 7},
    {"quantile_50pct", NULL, NULL, F64(quantiles[2], RC_LF_H5), {{0}}, 8},
    {"quantile_99pct", NULL, NULL, F64(quantiles[3], RC_LF_H5), {{0}}, 9},
    {"quantile_99.9pct", NULL, NULL, F64(quantiles[4], RC_LF_H5), {{0}}, 10},
    {"k1", NULL, NULL, F64(k1, H5J), {{0}}, 16},
    {"k3", NULL, "k3", F64(k3, H5JS), {TOK(7, "k3", "%10.3e"), SWP(2, "k3", "%10.3e")}, 17},
    {"clipfrac", NULL, "clipfrac", F64(clipfrac, H5JS), {TOK(6, "clipfrac", "%9.5f"), SWP(3, "clipfrac", "%9.5f")}, 15},
    {"frac_abs_ratio_minus_1_gt_0.001", "frac_gt_0.001", "frac_gt_0.001", F64(frac_above[0], H5J), {{0}}, 11},
    {"frac_abs_ratio_minus_1_gt_0.01", "frac_gt_0.01", "frac_gt_0.01", F64(frac_above[1], H5J), {{0}}, 12},
    {"frac_abs_ratio_minus_1_gt_0.1", "frac_gt_0.1", "frac_gt_0.1", F64(frac_above[2], H5J), {{0}}, 13},
    {"frac_abs_ratio_minus_1_gt_0.2", NULL, NULL, F64(frac_above[3], RC_LF_H5), {{0}}, 14},
    {"mult_prob_err", NULL, "mult_prob_err", F64(mult_prob_err, H5JS), {SWP(4, "exp|d|", "%9.5f")}, 18},
    {"identical_frac", NULL, NULL, F64(identical_frac, H5J), {TOK(8, "identical", "%9.4f")}, 19},
    {"seq_count", NULL, NULL, I64(seq_count, H5J), {SEQ(1, "seqs", "%6lld")}, 25},
    {"seq_log_ratio_sum_mean", NULL, NULL, F64(seq_sum_mean, H5J), {SEQ(2, "mean S", "%10.3e")}, 26},
    {"seq_log_ratio_sum_std", NULL, NULL, F64(seq_sum_std, H5JS), {SEQ(3, "std S", "%10.3e")}, 27},
    {"seq_log_ratio_sum_min", NULL, NULL, F64(seq_sum_min, H5J), {{0}}, 28},
    {"seq_log_ratio_sum_max", NULL, NULL, F64(seq_sum_max, H5J), {{0}}, 29},
    {"seq_log_ratio_mean_mean", NULL, NULL, F64(seq_mean_mean, H5J), {{0}}, 30},
    {"seq_log_ratio_mean_std", NULL, NULL, F64(seq_mean_std, H5J), {{0}}, 31},
    {"seq_log_ratio_mean_min", NULL, NULL, F64(seq_mean_min, H5J), {{0}}, 32},
    {"seq_log_ratio_mean_max", NULL, NULL, F64(seq_mean_max, H5J), {{0}}, 33},
    {"seq_ratio_min", NULL, NULL, RC_LF_DERIVED, 0, seq_ratio_min, RC_LF_JSON, {SEQ(4, "min e^S", "%10.5f")}, 0},
    {"seq_ratio_max", NULL, NULL, RC_LF_DERIVED, 0, seq_ratio_max, RC_LF_JSON, {SEQ(5, "max e^S", "%10.5f")}, 0},
    {"seq_frac_outside_band", NULL, NULL, F64(seq_frac_outside_band, H5JS),
     {{RC_LF_TAB_SEQS, 6, "|e^M-1|>%g", "%12.4f", offsetof(rc_stat_params, seq_eps)}, SWP(5, "GSPO out", "%9.4f")}, 34},
    {"seq_frac_above_cap", NULL, NULL, F64(seq_frac_above_cap, H5JS),
     {{RC_LF_TAB_SEQS, 7, "e^S>%g", "%10.4f", offsetof(rc_stat_params, seq_cap)}, SWP(6, "e^S>cap", "%8.4f")}, 35},
    {"(corrections)", NULL, NULL, RC_LF_CORRECTIONS, 0, NULL, H5JS, {{0}}, 36},
    {"ref_gen_mean_abs", NULL, NULL, F64(ref_gen_mean_abs, RC_LF_H5 | RC_LF_JSON_REF), {{0}}, 21},
    {"ref_gen_max_abs", NULL, NULL, F64(ref_gen_max_abs, RC_LF_H5), {{0}}, 22},
    {"ref_fwd_mean_abs", NULL, NULL, F64(ref_fwd_mean_abs, RC_LF_H5 | RC_LF_JSON_REF), {{0}}, 23},
    {"ref_fwd_max_abs", NULL, NULL, F64(ref_fwd_max_abs, RC_LF_H5), {{0}}, 24},
    {"(strata)", NULL, NULL, RC_LF_STRATA, 0, NULL, RC_LF_JSON, {{0}}, 0},
    {"first_divergent_position", NULL, NULL, I64(first_divergent_position, H5J), {TOK(9, "first div", "%9s")}, 20},
    /* the first generated token on its own line (print.c prints it below the tokens table) */
    {"first_token_count", NULL, NULL, I64(first_count, H5J), {{0}}, 37},
    {"first_token_mean_abs_log_ratio", NULL, NULL, F64(first_mean_abs_log_ratio, H5J), {{0}}, 38},
    {"first_token_max_abs_log_ratio", NULL, NULL, F64(first_max_abs_log_ratio, H5J), {{0}}, 39},
    {"first_token_k3", NULL, NULL, F64(first_k3, H5J), {{0}}, 40},
    {"later_tokens_mean_abs_log_ratio", NULL, NULL, F64(later_mean_abs_log_ratio, H5J), {{0}}, 41},
    /* --fail-above's metrics that are not a field */
    {"abs_k1", NULL, "abs_k1", RC_LF_DERIVED, 0, abs_k1, 0, {{0}}, 0},
    {"max_abs_dev", NULL, "max_abs_dev", RC_LF_DERIVED, 0, max_abs_dev, 0, {{0}}, 0},
    {"nonidentical_frac", NULL, "nonidentical_frac", RC_LF_DERIVED, 0, nonidentical, 0, {{0}}, 0},
    /* whole-distribution agreement (--distribution): only for a length with the distribution pass */
    {"dist_count", NULL, NULL, I64(dist_count, H5JS | RC_LF_DIST), {DST(1, "tokens", "%8lld")}, 42},
    {"kl_mean", NULL, "kl_mean", F64(kl_mean, H5JS | RC_LF_DIST), {DST(2, "KL mean", "%10.3e"), SWP(7, "KL mean", "%10.3e")},
     43},
    {"kl_std", NULL, NULL, F64(kl_std, H5JS | RC_LF_DIST), {DST(3, "KL std", "%10.3e")}, 44},
    {"kl_min", NULL, NULL, F64(kl_min, H5JS | RC_LF_DIST), {{0}}, 45},
    {"kl_max", NULL, "kl_max", F64(kl_max, H5JS | RC_LF_DIST), {DST(4, "KL max", "%10.3e")}, 46},
    {"tv_mean", NULL, "tv_mean", F64(tv_mean, H5JS | RC_LF_DIST), {DST(5, "TV mean", "%10.3e")}, 47},
    {"tv_std", NULL, NULL, F64(tv_std, H5JS | RC_LF_DIST), {DST(6, "TV std", "%10.3e")}, 48},
    {"tv_min", NULL, NULL, F64(tv_min, H5JS | RC_LF_DIST), {{0}}, 49},
    {"tv_max", NULL, "tv_max", F64(tv_max, H5JS | RC_LF_DIST), {DST(7, "TV max", "%10.3e")}, 50},
    {"top1_agree", NULL, NULL, F64(top1_agree, H5JS | RC_LF_DIST), {DST(8, "top-1 agree", "%11.5f")}, 51},
    {"top1_disagree", NULL, "top1_disagree", RC_LF_DERIVED, 0, top1_disagree, RC_LF_DIST, {{0}}, 0},
    /* a mixture-of-experts run's routing record (docs/routing.md): only for a length with one */
    {"routing_tokens", NULL, NULL, RTI(tokens, H5JS), {{0}}, 52},
    {"routing_tokens_flip", NULL, NULL, RTI(tokens_flip, H5JS), {{0}}, 53},
    {"routing_share_flip", NULL, "routing_share_flip", RTF(share_flip, H5JS), {SWP(8, "flips", "%9.5f")}, 54},
    {"routing_decision_share", NULL, "routing_decision_share", RTF(decision_share, H5JS), {{0}}, 55},
    {"routing_mean_overlap", NULL, NULL, RTF(mean_overlap, H5JS), {{0}}, 56},
    {"routing_miles_mismatch", NULL, "routing_miles_mismatch", RTF(miles_mismatch, H5JS),
     {SWP(9, "no common", "%10.5f")}, 57},
    {"routing_miles_layer", NULL, NULL, RTI(miles_layer, H5JS), {{0}}, 58},
    {"routing_first_layer", NULL, NULL, RTI(first_layer, H5JS), {{0}}, 59},
    {"routing_abs_log_ratio_flip", NULL, NULL, RTF(abs_lr_flip, H5JS), {{0}}, 60},
    {"routing_abs_log_ratio_same", NULL, NULL, RTF(abs_lr_same, H5JS), {{0}}, 61},
    {"routing_share_abs_log_ratio_flip", NULL, NULL, RTF(share_abs_lr_flip, H5JS), {{0}}, 62},
};
#undef F64
#undef I64
#undef TOK
#undef SEQ
#undef SWP
#undef DST
#undef H5J
#undef H5JS
#undef RTF
#undef RTI
const size_t rc_n_len_fields = sizeof rc_len_fields / sizeof rc_len_fields[0];
_Static_assert(RC_N_QUANTILES == 5 && RC_N_THRESHOLDS == 4, "one rc_len_fields row per quantile and threshold");

double rc_len_value(const rc_len_stats *st, const rc_len_field *f)
{
    switch (f->kind) {
    case RC_LF_I64: {
        int64_t v;
        memcpy(&v, (const char *)st + f->off, sizeof v);
        return (double)v;
    }
    case RC_LF_F64: {
        double v;
        memcpy(&v, (const char *)st + f->off, sizeof v);
        return v;
    }
    case RC_LF_DERIVED: return f->value(st);
    case RC_LF_CORRECTIONS:
    case RC_LF_STRATA: break;
    }
    return NAN;
}

bool rc_len_field_present(const rc_len_stats *st, const rc_len_field *f)
{
    return !((f->where & RC_LF_DIST) && !st->dist) && !((f->where & RC_LF_ROUTING) && !st->routing);
}

const rc_len_field *rc_len_gate(const char *metric)
{
    for (size_t i = 0; i < rc_n_len_fields; i++)
        if (rc_len_fields[i].gate && !strcmp(rc_len_fields[i].gate, metric))
            return &rc_len_fields[i];
    for (size_t i = 0; i < rc_n_len_fields; i++) { /* a number --json prints under this key */
        const rc_len_field *f = &rc_len_fields[i];
        const bool num = f->kind == RC_LF_I64 || f->kind == RC_LF_F64 || f->kind == RC_LF_DERIVED;
        if (num && (f->where & (RC_LF_JSON | RC_LF_JSON_REF)) && !strcmp(f->json_key ? f->json_key : f->name, metric))
            return f;
    }
    return NULL;
}

const rc_corr_stat *rc_corr_gate(const char *metric)
{
    for (size_t k = 0; k < rc_n_corr_stats; k++)
        if (!strcmp(rc_corr_stats[k].name, metric))
            return &rc_corr_stats[k];
    return NULL;
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

/* decile of v: how many of the 9 edges are <= v */
static int decile_of(const double *edges, double v)
{
    int k = 0;
    while (k < RC_N_DECILES - 1 && edges[k] <= v)
        k++;
    return k;
}

/* ------------------------------------------------------------------------ */
/* The accumulator (results.h rc_stats_acc): every statistic of every length,
 * fed one sequence at a time. Sums run in the order the sequences and their
 * tokens arrive; the values the quantiles, the decile edges and the two-pass
 * std need are kept (all of them up to the caps, then a uniform sample). */

typedef struct {
    double lr;     /* log r = new - old */
    float prob;    /* the stored log-prob: the prob strata's value */
    float entropy; /* the sampler's entropy (NaN: unknown) */
} acc_tok;

typedef struct {
    double S, M; /* one sequence's sum and mean of log r (NaN: no valid token) */
} acc_seq;

typedef struct {
    int64_t L;
    uint64_t rng;
    /* tokens t < L */
    int64_t n, identical, first_div, nonfinite, clipped, above[RC_N_THRESHOLDS];
    double sum, sum_k1, sum_k3, sum_mpe, mn, mx, sum_r1, sum_r1sq;
    double first_k3; /* sum of r - 1 - log r over the tokens t = 0 */
    double rg_sum, rg_max, rf_sum, rf_max;
    int64_t *pos_count;  /* [L] */
    double *pos_abs, *pos_max, *pos_sum_r, *pos_sum_r2; /* [L] */
    acc_tok *tok;        /* [min(n, cap)]: every token in order while n <= cap, then a uniform sample */
    int64_t tok_alloc;
    /* sequences with a valid token t < L */
    int64_t seq_c, seq_outside, seq_above;
    int64_t nS, nM, seq_seen; /* non-NaN S and M; sequences offered to the buffer */
    double s_sum, s_lo, s_hi, s_sq, m_sum, m_lo, m_hi, m_sq;
    acc_seq *seq;        /* [min(seq_seen, cap)] */
    int64_t seq_alloc;
    /* corrections */
    int64_t tis, mis, icepop, cap3, dppo_hi, dppo_lo, prime, seq_tis, seq_mis, geo_rs, seq_cap3;
    int64_t sc_below[RC_N_SEQ_CORR], sc_above[RC_N_SEQ_CORR]; /* rc_seq_corrs on each bound */
    double chi2_tok, chi2_seq, ppl_tr, ppl_sa, lpd, lpad, pplr, abs_sum, abs_max;
    /* the verdict's worst token and sequence */
    double wt, ws, wt_ratio, ws_ratio;
    int64_t wt_seq, wt_pos, ws_seq;
} acc_len;

typedef struct {
    int a, b;
    int64_t count;
    double sum, mx;
} acc_cross;

struct rc_stats_acc {
    rc_stat_params P;
    int n_lens, n_cross;
    bool has_ref, has_entropy;
    int64_t tok_cap, seq_cap;
    int64_t n_seq; /* sequences added */
    acc_len *len;  /* [n_lens] */
    acc_cross *cross;
};

/* splitmix64: the reservoir's generator (seeded per length, so a run's
 * sample depends on its values only) */
static uint64_t acc_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The slot of the seen-th value (0-based) in a buffer of cap: the next one
 * while fewer than cap were seen, then reservoir sampling (Algorithm R):
 * a uniform slot with probability cap / (seen + 1), else -1 (dropped). */
static int64_t acc_slot(uint64_t *rng, int64_t seen, int64_t cap)
{
    if (seen < cap)
        return seen;
    const uint64_t j = acc_rand(rng) % (uint64_t)(seen + 1);
    return j < (uint64_t)cap ? (int64_t)j : -1;
}

/* grow *buf (elem bytes each, *alloc of them) to hold index i (< cap) */
static rc_status acc_grow(void **buf, int64_t *alloc, int64_t i, int64_t cap, size_t elem)
{
    if (i < *alloc)
        return RC_OK;
    int64_t n = *alloc < 1024 ? 1024 : 2 * *alloc;
    n = n > cap ? cap : n;
    if (n <= i)
        n = i + 1;
    void *p = realloc(*buf, (size_t)n * elem);
    if (!p)
        return rc_errorf(RC_ERR_NOMEM, "statistics: cannot allocate %lld values", (long long)n);
    *buf = p;
    *alloc = n;
    return RC_OK;
}

void rc_stats_acc_free(rc_stats_acc *a)
{
    if (!a)
        return;
    for (int i = 0; a->len && i < a->n_lens; i++) {
        acc_len *A = &a->len[i];
        free(A->pos_count);
        free(A->pos_abs);
        free(A->pos_max);
        free(A->pos_sum_r);
        free(A->pos_sum_r2);
        free(A->tok);
        free(A->seq);
    }
    free(a->len);
    free(a->cross);
    free(a);
}

rc_status rc_stats_acc_create(const rc_stat_params *params, int n_lens, const int64_t *lens, bool has_ref,
                              bool has_entropy, int64_t tok_cap, int64_t seq_cap, rc_stats_acc **out)
{
    *out = NULL;
    if (n_lens < 0 || n_lens > RC_MAX_LENS_READ || tok_cap < 1 || seq_cap < 1)
        return rc_errorf(RC_ERR_INTERNAL, "statistics: %d lengths, caps %lld / %lld", n_lens, (long long)tok_cap,
                         (long long)seq_cap);
    rc_stats_acc *a = NULL;
    RC_TRY(rc_calloc((void **)&a, 1, sizeof *a, "statistics"));
    a->P = *params;
    rc_stat_params_fill_defaults(&a->P);
    a->n_lens = n_lens;
    a->has_ref = has_ref;
    a->has_entropy = has_entropy;
    a->tok_cap = tok_cap;
    a->seq_cap = seq_cap;
    rc_status s = rc_calloc((void **)&a->len, n_lens + 1, sizeof *a->len, "statistics");
    const int pairs = n_lens * (n_lens - 1) / 2;
    if (s == RC_OK)
        s = rc_calloc((void **)&a->cross, pairs + 1, sizeof *a->cross, "statistics");
    for (int i = 0; i < n_lens && s == RC_OK; i++) {
        acc_len *A = &a->len[i];
        const int64_t Ln = lens[i];
        A->L = Ln;
        A->rng = 0x5eed0000ull + (uint64_t)i;
        A->first_div = -1;
        A->mn = INFINITY;
        A->mx = -INFINITY;
        A->s_lo = A->m_lo = INFINITY;
        A->s_hi = A->m_hi = -INFINITY;
        A->wt = A->ws = -1;
        A->wt_seq = A->wt_pos = A->ws_seq = -1;
        A->wt_ratio = A->ws_ratio = NAN;
        if (Ln < 0) {
            s = rc_errorf(RC_ERR_INTERNAL, "statistics: length %lld", (long long)Ln);
            break;
        }
        if ((s = rc_calloc((void **)&A->pos_count, Ln + 1, sizeof *A->pos_count, "statistics")) != RC_OK ||
            (s = rc_calloc((void **)&A->pos_abs, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
            (s = rc_calloc((void **)&A->pos_max, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
            (s = rc_calloc((void **)&A->pos_sum_r, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
            (s = rc_calloc((void **)&A->pos_sum_r2, Ln + 1, sizeof(double), "statistics")) != RC_OK)
            break;
    }
    for (int i = 0; i < n_lens; i++)
        for (int j = i + 1; j < n_lens; j++) {
            a->cross[a->n_cross].a = i;
            a->cross[a->n_cross++].b = j;
        }
    if (s != RC_OK) {
        rc_stats_acc_free(a);
        return s;
    }
    *out = a;
    return RC_OK;
}

/* one sequence into length A: its tokens t < min(gen_valid, L) */
static rc_status acc_len_add(rc_stats_acc *a, acc_len *A, int64_t sq, int64_t gen_valid, const float *gen,
                             const float *entropy, const double *ref, const float *fwd, double *S_out,
                             double *M_out)
{
    const rc_stat_params *P = &a->P;
    const int64_t Ln = A->L, valid = gen_valid < Ln ? gen_valid : Ln;
    double seq_sum = 0, sum_new = 0, sum_old = 0;
    int64_t prime_tok = 0;
    bool above_seq_high = false; /* some token r > 100 */
    for (int64_t t = 0; t < valid; t++) {
        const float fw = fwd[t], gn = gen[t];
        const double lr = (double)fw - (double)gn; /* log ratio = new - old */
        const double ratio = exp(lr);
        const int64_t slot = acc_slot(&A->rng, A->n, a->tok_cap);
        if (slot >= 0) {
            RC_TRY(acc_grow((void **)&A->tok, &A->tok_alloc, slot, a->tok_cap, sizeof *A->tok));
            A->tok[slot] = (acc_tok){lr, gn, entropy ? entropy[t] : NAN};
        }
        if (!isfinite(ratio)) /* an overflowed log-prob: counted as exceeding every threshold */
            A->nonfinite++;
        A->n++;
        A->sum += ratio;
        A->mn = ratio < A->mn ? ratio : A->mn;
        A->mx = ratio > A->mx ? ratio : A->mx;
        A->sum_k1 += -lr;
        A->sum_k3 += ratio - 1.0 - lr;
        A->sum_mpe += exp(fabs(lr));
        A->sum_r1 += ratio - 1.0;
        A->sum_r1sq += (ratio - 1.0) * (ratio - 1.0);
        seq_sum += lr;
        A->clipped += !(ratio >= 1.0 - P->clip_eps_low && ratio <= 1.0 + P->clip_eps_high);
        for (int k = 0; k < RC_N_THRESHOLDS; k++)
            A->above[k] += !(fabs(ratio - 1.0) <= rc_ratio_thresholds[k]);
        if (memcmp(&fw, &gn, sizeof fw) == 0)
            A->identical++;
        else if (A->first_div < 0 || t < A->first_div)
            A->first_div = t;
        A->pos_count[t]++;
        if (t == 0)
            A->first_k3 += ratio - 1.0 - lr;
        A->pos_abs[t] += fabs(lr);
        if (fabs(lr) > A->pos_max[t])
            A->pos_max[t] = fabs(lr);
        A->pos_sum_r[t] += ratio - 1.0; /* shifted sums: no cancellation near 1 */
        A->pos_sum_r2[t] += (ratio - 1.0) * (ratio - 1.0);
        if (ref) {
            const double rf = ref[t];
            const double eg = fabs((double)gn - rf), ef = fabs((double)fw - rf);
            A->rg_sum += eg;
            A->rf_sum += ef;
            A->rg_max = eg > A->rg_max ? eg : A->rg_max;
            A->rf_max = ef > A->rf_max ? ef : A->rf_max;
        }
        /* the corrections */
        const double dp = exp((double)fw) - exp((double)gn);
        A->tis += !(ratio <= RC_TIS_CAP);
        A->mis += outside(ratio, RC_MIS_LOW, RC_MIS_HIGH);
        A->icepop += outside(ratio, RC_ICEPOP_LOW, RC_ICEPOP_HIGH);
        A->cap3 += !(ratio <= RC_TRL_CAP);
        A->dppo_hi += dp > RC_DPPO_MASK;
        A->dppo_lo += dp < -RC_DPPO_MASK;
        prime_tok += outside(ratio, RC_PRIME_TOKEN_LOW, RC_PRIME_TOKEN_HIGH);
        above_seq_high |= !(ratio <= RC_PRIME_SEQ_HIGH);
        A->chi2_tok += expm1(2.0 * verl_clamp(lr)); /* e^2lr - 1 without cancellation */
        A->abs_sum += fabs(lr);
        A->abs_max = fabs(lr) > A->abs_max ? fabs(lr) : A->abs_max;
        sum_new += fw;
        sum_old += gn;
        if (fabs(lr) > A->wt) { /* the verdict's worst token (the first of equals) */
            A->wt = fabs(lr);
            A->wt_seq = sq;
            A->wt_pos = t;
            A->wt_ratio = ratio;
        }
    }
    const double S = valid > 0 ? seq_sum : NAN, M = valid > 0 ? seq_sum / (double)valid : NAN;
    *S_out = S;
    *M_out = M;
    /* the sequence's values, for the std of S and M */
    const int64_t slot = acc_slot(&A->rng, A->seq_seen++, a->seq_cap);
    if (slot >= 0) {
        RC_TRY(acc_grow((void **)&A->seq, &A->seq_alloc, slot, a->seq_cap, sizeof *A->seq));
        A->seq[slot] = (acc_seq){S, M};
    }
    if (!isnan(S)) {
        A->nS++;
        A->s_sum += S;
        A->s_sq += S * S;
        A->s_lo = S < A->s_lo ? S : A->s_lo;
        A->s_hi = S > A->s_hi ? S : A->s_hi;
        if (fabs(S) > A->ws) {
            A->ws = fabs(S);
            A->ws_seq = sq;
            A->ws_ratio = exp(S);
        }
    }
    if (!isnan(M)) {
        A->nM++;
        A->m_sum += M;
        A->m_sq += M * M;
        A->m_lo = M < A->m_lo ? M : A->m_lo;
        A->m_hi = M > A->m_hi ? M : A->m_hi;
    }
    if (valid < 1)
        return RC_OK;
    A->seq_c++;
    const double geo = exp(M), eS = exp(S);
    A->seq_outside += !(geo >= 1.0 - P->seq_eps && geo <= 1.0 + P->seq_eps);
    A->seq_above += !(eS <= P->seq_cap);
    /* prime-rl's legacy is_masked: the token mask, or the whole sequence
     * by its geometric ratio or its largest token ratio */
    const bool seq_masked = outside(exp(M), RC_PRIME_GEO_LOW, RC_PRIME_GEO_HIGH) || above_seq_high;
    A->prime += seq_masked ? valid : prime_tok;
    A->seq_tis += !(exp(S) <= RC_SEQ_TIS_CAP);
    A->seq_mis += outside(-S, log(RC_SEQ_MIS_LOW), log(RC_SEQ_MIS_HIGH));
    A->geo_rs += outside(-M, log(RC_GEO_RS_LOW), log(RC_GEO_RS_HIGH));
    A->seq_cap3 += !(exp(S) <= RC_TRL_CAP);
    for (int k = 0; k < RC_N_SEQ_CORR; k++) { /* both bounds of each (NaN counts above, as masked) */
        const rc_seq_corr *sc = &rc_seq_corrs[k];
        const double x = (sc->negated ? -1.0 : 1.0) * (sc->geometric ? M : S);
        const double hi = sc->hi > 0 ? sc->hi : P->seq_cap;
        if (sc->lo > 0 && x < log(sc->lo)) /* as the counts above: verl's bounds in logs, e^S's caps as e^S */
            A->sc_below[k]++;
        else if (sc->negated ? !(x <= log(hi)) : !(exp(x) <= hi))
            A->sc_above[k]++;
    }
    A->chi2_seq += expm1(2.0 * verl_clamp(S));
    A->ppl_tr += exp(-sum_new / (double)valid);
    A->ppl_sa += exp(-sum_old / (double)valid);
    A->lpd += -M;
    A->lpad += fabs(M);
    A->pplr += exp(-M);
    return RC_OK;
}

rc_status rc_stats_acc_add(rc_stats_acc *a, int64_t gen_valid, const float *gen, const float *entropy,
                           const double *ref, const float *const *fwd, double *S_out, double *M_out)
{
    const int64_t sq = a->n_seq++;
    for (int i = 0; i < a->n_lens; i++)
        RC_TRY(acc_len_add(a, &a->len[i], sq, gen_valid, gen, a->has_entropy ? entropy : NULL,
                           a->has_ref ? ref : NULL, fwd[i], &S_out[i], &M_out[i]));
    for (int c = 0; c < a->n_cross; c++) { /* |forward_La - forward_Lb| where both have the token */
        acc_cross *x = &a->cross[c];
        const int64_t La = a->len[x->a].L, Lb = a->len[x->b].L, Lm = La < Lb ? La : Lb;
        const int64_t valid = gen_valid < Lm ? gen_valid : Lm;
        const float *fa = fwd[x->a], *fb = fwd[x->b];
        for (int64_t t = 0; t < valid; t++) {
            const double d = fabs((double)fa[t] - (double)fb[t]);
            x->sum += d;
            x->mx = d > x->mx ? d : x->mx;
            x->count++;
        }
    }
    return RC_OK;
}

/* mean, population std, min and max of the non-NaN S (which 0) or M (1) of
 * A: the std two-pass over the kept values while every one is kept, else
 * from the sums of squares */
static void acc_describe(const rc_stats_acc *a, const acc_len *A, int which, double *mean, double *std, double *mn,
                         double *mx)
{
    const int64_t c = which ? A->nM : A->nS;
    if (c == 0) {
        *mean = *std = *mn = *mx = NAN;
        return;
    }
    const double m = (which ? A->m_sum : A->s_sum) / (double)c;
    double var;
    if (A->seq_seen <= a->seq_cap) {
        double ss = 0;
        for (int64_t i = 0; i < A->seq_seen; i++) {
            const double v = which ? A->seq[i].M : A->seq[i].S;
            if (!isnan(v))
                ss += (v - m) * (v - m);
        }
        var = ss / (double)c;
    } else {
        var = (which ? A->m_sq : A->s_sq) / (double)c - m * m;
        var = var > 0 ? var : 0;
    }
    *mean = m;
    *std = sqrt(var);
    *mn = which ? A->m_lo : A->s_lo;
    *mx = which ? A->m_hi : A->s_hi;
}

/* The strata of one length (results.h rc_strata) from the kept tokens, in
 * their order: decile edges from the sorted values, then one pass per
 * token. vals: scratch of the kept tokens' count + 1 doubles. */
static void acc_strata(const rc_stats_acc *a, const acc_len *A, int kind, rc_strata *sa, double *vals)
{
    memset(sa, 0, sizeof *sa);
    if (kind == RC_STRATA_ENTROPY && !a->has_entropy) {
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
    const int64_t kept = A->n < a->tok_cap ? A->n : a->tok_cap;
    int64_t n = 0;
    for (int64_t i = 0; i < kept; i++) {
        const double v = kind == RC_STRATA_PROB ? (double)A->tok[i].prob : (double)A->tok[i].entropy;
        if (!isnan(v) && !isnan(A->tok[i].lr))
            vals[n++] = v;
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
    const rc_stat_params *P = &a->P;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < kept; i++) {
            const double v = kind == RC_STRATA_PROB ? (double)A->tok[i].prob : (double)A->tok[i].entropy;
            const double lr = A->tok[i].lr;
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

/* length A's statistics and per-position arrays into L */
static rc_status acc_len_finish(const rc_stats_acc *a, const acc_len *A, rc_len_result *L)
{
    const int64_t n = A->n, Ln = A->L, kept = n < a->tok_cap ? n : a->tok_cap;
    rc_len_stats *st = &L->st;
    free(L->pos_count);
    free(L->pos_mean_abs_log_ratio);
    free(L->pos_max_abs_log_ratio);
    free(L->pos_ratio_std);
    L->pos_count = NULL;
    L->pos_mean_abs_log_ratio = L->pos_max_abs_log_ratio = L->pos_ratio_std = NULL;
    double *vals = NULL;
    rc_status s = RC_OK;
    if ((s = rc_calloc((void **)&vals, kept + 1, sizeof *vals, "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_count, Ln + 1, sizeof *L->pos_count, "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_mean_abs_log_ratio, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_max_abs_log_ratio, Ln + 1, sizeof(double), "statistics")) != RC_OK ||
        (s = rc_calloc((void **)&L->pos_ratio_std, Ln + 1, sizeof(double), "statistics")) != RC_OK) {
        free(vals);
        return s;
    }
    st->count = n;
    if (n > 0) {
        st->mean = A->sum / (double)n;
        if (n <= a->tok_cap) { /* every ratio kept: two passes, in order */
            double ss = 0;
            for (int64_t i = 0; i < n; i++) {
                const double ratio = exp(A->tok[i].lr);
                ss += (ratio - st->mean) * (ratio - st->mean);
            }
            st->std = sqrt(ss / (double)n);
        } else { /* from the sums of (r - 1) and (r - 1)^2 */
            const double m1 = A->sum_r1 / (double)n, var = A->sum_r1sq / (double)n - m1 * m1;
            st->std = sqrt(var > 0 ? var : 0);
        }
        st->min = A->nonfinite ? NAN : A->mn;
        st->max = A->nonfinite ? NAN : A->mx;
        for (int64_t i = 0; i < kept; i++)
            vals[i] = exp(A->tok[i].lr);
        if (!A->nonfinite)
            qsort(vals, (size_t)kept, sizeof *vals, cmp_double);
        for (int k = 0; k < RC_N_QUANTILES; k++)
            st->quantiles[k] = A->nonfinite ? NAN : quantile_sorted(vals, kept, rc_quantile_levels[k]);
        for (int k = 0; k < RC_N_THRESHOLDS; k++)
            st->frac_above[k] = (double)A->above[k] / (double)n;
        st->k1 = A->sum_k1 / (double)n;
        st->k3 = A->sum_k3 / (double)n;
        st->mult_prob_err = A->sum_mpe / (double)n;
        st->identical_frac = (double)A->identical / (double)n;
        st->clipfrac = (double)A->clipped / (double)n;
    } else {
        st->mean = st->std = st->min = st->max = st->k1 = st->k3 = st->mult_prob_err = st->clipfrac = NAN;
        st->identical_frac = NAN;
        for (int k = 0; k < RC_N_QUANTILES; k++)
            st->quantiles[k] = NAN;
        for (int k = 0; k < RC_N_THRESHOLDS; k++)
            st->frac_above[k] = NAN;
    }
    st->first_divergent_position = A->first_div;
    { /* the first generated token on its own, the later ones beside it */
        const int64_t c0 = Ln > 0 ? A->pos_count[0] : 0;
        st->first_count = c0;
        st->first_mean_abs_log_ratio = c0 ? A->pos_abs[0] / (double)c0 : NAN;
        st->first_max_abs_log_ratio = c0 ? A->pos_max[0] : NAN;
        st->first_k3 = c0 ? A->first_k3 / (double)c0 : NAN;
        double later = 0;
        for (int64_t t = 1; t < Ln; t++)
            later += A->pos_abs[t];
        st->later_mean_abs_log_ratio = n > c0 ? later / (double)(n - c0) : NAN;
    }
    if (a->has_ref && n > 0) {
        st->ref_gen_mean_abs = A->rg_sum / (double)n;
        st->ref_fwd_mean_abs = A->rf_sum / (double)n;
        st->ref_gen_max_abs = A->rg_max;
        st->ref_fwd_max_abs = A->rf_max;
    } else {
        st->ref_gen_mean_abs = st->ref_fwd_mean_abs = st->ref_gen_max_abs = st->ref_fwd_max_abs = NAN;
    }
    for (int64_t t = 0; t < Ln; t++) {
        const int64_t c = A->pos_count[t];
        L->pos_count[t] = c;
        if (c == 0) {
            L->pos_mean_abs_log_ratio[t] = L->pos_max_abs_log_ratio[t] = L->pos_ratio_std[t] = NAN;
            continue;
        }
        L->pos_mean_abs_log_ratio[t] = A->pos_abs[t] / (double)c;
        L->pos_max_abs_log_ratio[t] = A->pos_max[t];
        const double m = A->pos_sum_r[t] / (double)c;
        const double var = A->pos_sum_r2[t] / (double)c - m * m;
        L->pos_ratio_std[t] = sqrt(var > 0 ? var : 0);
    }
    /* sequence level */
    const rc_stat_params *P = &a->P;
    const int64_t c = A->seq_c;
    st->seq_count = c;
    acc_describe(a, A, 0, &st->seq_sum_mean, &st->seq_sum_std, &st->seq_sum_min, &st->seq_sum_max);
    acc_describe(a, A, 1, &st->seq_mean_mean, &st->seq_mean_std, &st->seq_mean_min, &st->seq_mean_max);
    st->seq_frac_outside_band = c ? (double)A->seq_outside / (double)c : NAN;
    st->seq_frac_above_cap = c ? (double)A->seq_above / (double)c : NAN;
    (void)P;
    /* the corrections */
    rc_corrections *cr = &st->corr;
    const double tn = n ? (double)n : NAN, sn = c ? (double)c : NAN;
    cr->token_tis_clipfrac = (double)A->tis / tn;
    cr->token_mis_maskfrac = (double)A->mis / tn;
    cr->icepop_maskfrac = (double)A->icepop / tn;
    cr->token_cap3_frac = (double)A->cap3 / tn;
    cr->dppo_maskfrac_high = (double)A->dppo_hi / tn;
    cr->dppo_maskfrac_low = (double)A->dppo_lo / tn;
    cr->prime_legacy_maskfrac = (double)A->prime / tn;
    cr->chi2_token = A->chi2_tok / tn;
    cr->mean_abs_log_ratio = A->abs_sum / tn;
    cr->max_abs_log_ratio = n ? A->abs_max : NAN;
    cr->seq_tis_clipfrac = (double)A->seq_tis / sn;
    cr->seq_mis_maskfrac = (double)A->seq_mis / sn;
    cr->seq_geo_rs_maskfrac = (double)A->geo_rs / sn;
    cr->seq_cap3_frac = (double)A->seq_cap3 / sn;
    for (int k = 0; k < RC_N_SEQ_CORR; k++) {
        st->seq_corr_below[k] = (double)A->sc_below[k] / sn;
        st->seq_corr_above[k] = (double)A->sc_above[k] / sn;
    }
    cr->chi2_seq = A->chi2_seq / sn;
    cr->ppl_trainer = A->ppl_tr / sn;
    cr->ppl_sampler = A->ppl_sa / sn;
    cr->log_ppl_diff = A->lpd / sn;
    cr->log_ppl_abs_diff = A->lpad / sn;
    cr->ppl_ratio = A->pplr / sn;
    for (int k = 0; k < RC_N_STRATA; k++)
        acc_strata(a, A, k, &st->strata[k], vals);
    free(vals);
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

const char *rc_verdict_name(rc_verdict_level v)
{
    return v == RC_VERDICT_FAIL ? "FAIL" : v == RC_VERDICT_WARN ? "WARN" : v == RC_VERDICT_OK ? "OK" : "none";
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

/* x and y with `prec` significant digits, or as many more as it takes for
 * two different values to print differently ("1.05 > 1.05" would not show
 * why a gate failed); "%s" and "%s" of a reason */
static void fmt_pair(double x, double y, int prec, char *a, char *b, size_t n)
{
    for (int p = prec; p <= 17; p++) {
        snprintf(a, n, "%.*g", p, x);
        snprintf(b, n, "%.*g", p, y);
        if (x == y || strcmp(a, b) != 0)
            return;
    }
}

/* token-level PPO: the published gates, then the clip fraction */
static void judge_token_ppo(const rc_results *r, rc_verdict *v, int o)
{
    const int ic = worst_len(r, offsetof(rc_len_stats, clipfrac)), ik = worst_len(r, offsetof(rc_len_stats, k3)),
              im = worst_len(r, offsetof(rc_len_stats, mult_prob_err));
    const rc_len_stats *c = &r->lens[ic].st, *k = &r->lens[ik].st, *m = &r->lens[im].st;
    char *why = v->reason[o];
    const size_t wn = sizeof v->reason[0];
    if (m->mult_prob_err > RC_GATE_MULT_PROB_ERR) {
        v->level[o] = RC_VERDICT_FAIL;
        char a[32], b[32];
        fmt_pair(m->mult_prob_err, RC_GATE_MULT_PROB_ERR, 4, a, b, sizeof a);
        snprintf(why, wn, "mean exp|log r| %s > %s (NeMo-RL's gate) at L=%lld", a, b, (long long)r->lens[im].len);
    } else if (k->k3 > RC_GATE_MISMATCH_KL) {
        v->level[o] = RC_VERDICT_FAIL;
        char a[32], b[32];
        fmt_pair(k->k3, RC_GATE_MISMATCH_KL, 3, a, b, sizeof a);
        snprintf(why, wn, "k3 %s > %s (prime-rl's mismatch_kl bar) at L=%lld", a, b, (long long)r->lens[ik].len);
    } else {
        v->level[o] = frac_level(c->clipfrac);
        char where[64];
        if (c->clipfrac > 0)
            snprintf(where, sizeof where, "%.3g%% of tokens clipped at step 0 at L=%lld", 100.0 * c->clipfrac,
                     (long long)r->lens[ic].len);
        else
            snprintf(where, sizeof where, "no token clipped at step 0");
        char a[32], b[32], c3[32], d[32];
        fmt_pair(k->k3, RC_GATE_MISMATCH_KL, 3, a, b, sizeof a);
        fmt_pair(m->mult_prob_err, RC_GATE_MULT_PROB_ERR, 5, c3, d, sizeof c3);
        snprintf(why, wn, "%s; k3 %s %s %s (prime-rl), mean exp|log r| %s %s %s (NeMo-RL)", where, a,
                 k->k3 < RC_GATE_MISMATCH_KL ? "<" : "<=", b, c3, m->mult_prob_err < RC_GATE_MULT_PROB_ERR ? "<" : "<=",
                 d);
    }
}

/* sequence IS: every published sequence-level correction on both of its
 * bounds (rc_seq_corrs), the worst at its worst length */
static void judge_sequence_is(const rc_results *r, rc_verdict *v, int ob)
{
    const rc_stat_params *P = &r->stat;
    char *o = v->reason[ob];
    const size_t wn = sizeof v->reason[0];
    size_t used = 0;
    double worst = 0;
    for (int j = 0; j < RC_N_SEQ_CORR; j++) {
        const rc_seq_corr *sc = &rc_seq_corrs[j];
        int il = 0;
        double f = -1;
        for (int i = 0; i < r->n_lens; i++) {
            const double x = r->lens[i].st.seq_corr_below[j] + r->lens[i].st.seq_corr_above[j];
            if (x > f) {
                f = x;
                il = i;
            }
        }
        const rc_len_stats *q = &r->lens[il].st;
        worst = fmax(worst, f);
        const double hi = sc->hi > 0 ? sc->hi : P->seq_cap;
        int w;
        if (sc->lo > 0 && f > 0)
            w = snprintf(o + used, wn - used, "%s%s %s [%g, %g] %.3g%% (%.3g%% below, %.3g%% above)",
                         used ? "; " : "", sc->name, sc->of, sc->lo, hi, 100.0 * f, 100.0 * q->seq_corr_below[j],
                         100.0 * q->seq_corr_above[j]);
        else if (sc->lo > 0)
            w = snprintf(o + used, wn - used, "%s%s %s [%g, %g] 0%%", used ? "; " : "", sc->name, sc->of, sc->lo,
                         hi);
        else
            w = snprintf(o + used, wn - used, "%s%s %s > %g %.3g%%", used ? "; " : "", sc->name, sc->of, hi,
                         100.0 * f);
        used = w > 0 && (size_t)w < wn - used ? used + (size_t)w : wn - 1;
    }
    const int il = longest_len(r); /* the range at the longest length */
    snprintf(o + used, wn - used, " of sequences (worst L; e^S %.3g to %.3g at L=%lld)",
             exp(r->lens[il].st.seq_sum_min), exp(r->lens[il].st.seq_sum_max), (long long)r->lens[il].len);
    v->level[ob] = frac_level(worst);
}

/* GSPO: against the clip fraction its own paper reports in normal training */
static void judge_gspo(const rc_results *r, rc_verdict *v, int o)
{
    const rc_stat_params *P = &r->stat;
    const size_t wn = sizeof v->reason[0];
    const int ib = worst_len(r, offsetof(rc_len_stats, seq_frac_outside_band));
    const rc_len_stats *b = &r->lens[ib].st;
    const double fb = b->seq_frac_outside_band;
    v->level[o] = fb > RC_GSPO_FAIL_FRAC         ? RC_VERDICT_FAIL
                  : fb > RC_GSPO_PAPER_CLIPFRAC ? RC_VERDICT_WARN
                                                : RC_VERDICT_OK;
    if (fb > 0)
        snprintf(v->reason[o], wn,
                 "%.3g%% of sequences have |e^M - 1| > %g at L=%lld (e^M %.6g to %.6g): %s the ~%.0f%% GSPO's paper "
                 "clips in normal training; %s",
                 100.0 * fb, P->seq_eps, (long long)r->lens[ib].len, exp(b->seq_mean_min), exp(b->seq_mean_max),
                 fb > RC_GSPO_PAPER_CLIPFRAC ? "above" : "within", 100.0 * RC_GSPO_PAPER_CLIPFRAC,
                 fb > RC_GSPO_FAIL_FRAC ? "most sequences lose their clip side's gradient before any learning"
                                        : "its gradient is mostly intact");
    else
        snprintf(v->reason[o], wn, "every sequence has |e^M - 1| <= %g", P->seq_eps);
}

/* routing (a MoE run): miles' R3 check on the routing record at the longest
 * length (every generated token: the record's own statistics), WARN past
 * RC_ROUTING_MILES_MAX; no line without a record */
static void judge_routing(const rc_results *r, rc_verdict *v, int o)
{
    const rc_len_result *lr = &r->lens[longest_len(r)];
    const rc_routing_stats *rt = &lr->st.rt;
    if (!lr->st.routing) {
        v->level[o] = RC_VERDICT_NONE;
        snprintf(v->reason[o], sizeof v->reason[o], "no routing record (no mixture-of-experts layer)");
        return;
    }
    v->level[o] = rt->miles_mismatch > RC_ROUTING_MILES_MAX ? RC_VERDICT_WARN : RC_VERDICT_OK;
    char a[32], b[32];
    fmt_pair(100.0 * rt->miles_mismatch, 100.0 * RC_ROUTING_MILES_MAX, 4, a, b, sizeof a);
    int w = snprintf(v->reason[o], sizeof v->reason[o],
                     "%s%% of layer %lld's tokens share no expert between the sides %s %s%% (miles' R3 check) at "
                     "L=%lld; %.4g%% of the tokens flip in some layer",
                     a, (long long)rt->miles_layer, rt->miles_mismatch > RC_ROUTING_MILES_MAX ? ">" : "<=", b,
                     (long long)lr->len, 100.0 * rt->share_flip);
    if (w > 0 && (size_t)w < sizeof v->reason[o] && rt->first_layer >= 0)
        snprintf(v->reason[o] + w, sizeof v->reason[o] - (size_t)w, ", first in layer %lld",
                 (long long)rt->first_layer);
}

static double metric_k3(const rc_len_stats *st) { return st->k3; }
static double metric_gspo(const rc_len_stats *st) { return st->seq_frac_outside_band; }
static double metric_seq_corr(const rc_len_stats *st)
{
    double w = 0;
    for (int k = 0; k < RC_N_SEQ_CORR; k++)
        w = fmax(w, st->seq_corr_below[k] + st->seq_corr_above[k]);
    return w;
}
static double metric_routing(const rc_len_stats *st) { return st->routing ? st->rt.miles_mismatch : NAN; }

const rc_objective rc_objectives[RC_N_OBJECTIVES] = {
    {"token_ppo", "token PPO", judge_token_ppo, "k3", metric_k3, RC_NOISE_K3, true},
    {"sequence_is", "sequence IS", judge_sequence_is, "largest sequence-correction mask", metric_seq_corr,
     RC_NOISE_SEQS, true},
    {"gspo", "GSPO", judge_gspo, "seq_frac_outside_band", metric_gspo, RC_NOISE_SEQS, true},
    {"routing", "routing", judge_routing, "routing_miles_mismatch", metric_routing, RC_NOISE_ROUTING_TOKENS, false},
};

static void verdict(rc_results *r, const acc_len *W)
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
        v->level[RC_OBJ_ROUTING] = RC_VERDICT_NONE;
        return;
    }
    for (int o = 0; o < RC_N_OBJECTIVES; o++)
        rc_objectives[o].judge(r, v, o);
    /* the worst token and sequence at the longest length (accumulated) */
    v->len = W->L;
    v->worst_token_seq = W->wt_seq;
    v->worst_token_pos = W->wt_pos;
    v->worst_token_ratio = W->wt_ratio;
    v->worst_seq = W->ws_seq;
    v->worst_seq_ratio = W->ws_ratio;
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

rc_status rc_stats_acc_finish(rc_stats_acc *a, rc_results *r)
{
    rc_stat_params_fill_defaults(&r->stat);
    if (r->n_lens != a->n_lens)
        return rc_errorf(RC_ERR_INTERNAL, "statistics: %d lengths, accumulated %d", r->n_lens, a->n_lens);
    for (int i = 0; i < r->n_lens; i++) {
        if (r->lens[i].len != a->len[i].L)
            return rc_errorf(RC_ERR_INTERNAL, "statistics: length %lld, accumulated %lld",
                             (long long)r->lens[i].len, (long long)a->len[i].L);
        RC_TRY(acc_len_finish(a, &a->len[i], &r->lens[i]));
        RC_TRY(rc_dist_stats(&r->lens[i], r->n_seq));
        rc_len_stats *st = &r->lens[i].st;
        memset(&st->rt, 0, sizeof st->rt);
        st->routing = r->routing && r->logprob_gen && r->lens[i].logprob_fwd;
        if (st->routing) /* the routing record over this length's tokens */
            RC_TRY(rc_routing_len_stats(r->routing, r->logprob_gen, r->lens[i].logprob_fwd, r->lens[i].len, &st->rt));
    }
    free(r->cross);
    r->cross = NULL;
    r->n_cross = 0;
    if (a->n_cross > 0)
        RC_TRY(rc_calloc((void **)&r->cross, a->n_cross, sizeof *r->cross, "statistics"));
    for (int i = 0; i < a->n_cross; i++) {
        const acc_cross *x = &a->cross[i];
        rc_cross_len *c = &r->cross[r->n_cross++];
        c->len_a = a->len[x->a].L;
        c->len_b = a->len[x->b].L;
        c->count = x->count;
        c->max_abs = x->count ? x->mx : NAN;
        c->mean_abs = x->count ? x->sum / (double)x->count : NAN;
    }
    verdict(r, r->n_lens > 0 ? &a->len[longest_len(r)] : NULL);
    growth(r);
    return RC_OK;
}

rc_status rc_compute_stats(rc_results *r)
{
    rc_stat_params_fill_defaults(&r->stat);
    int64_t lens[RC_MAX_LENS_READ];
    if (r->n_lens > RC_MAX_LENS_READ)
        return rc_errorf(RC_ERR_INTERNAL, "%d lengths (at most %d)", r->n_lens, RC_MAX_LENS_READ);
    const float *fwd[RC_MAX_LENS_READ];
    double S[RC_MAX_LENS_READ], M[RC_MAX_LENS_READ];
    for (int i = 0; i < r->n_lens; i++) {
        rc_len_result *L = &r->lens[i];
        if (L->len > r->gen_len)
            return rc_errorf(RC_ERR_INTERNAL, "length %lld exceeds the generated %lld", (long long)L->len,
                             (long long)r->gen_len);
        lens[i] = L->len;
        free(L->seq_log_ratio_sum);
        free(L->seq_log_ratio_mean);
        L->seq_log_ratio_sum = L->seq_log_ratio_mean = NULL;
        RC_TRY(rc_calloc((void **)&L->seq_log_ratio_sum, r->n_seq + 1, sizeof(double), "statistics"));
        RC_TRY(rc_calloc((void **)&L->seq_log_ratio_mean, r->n_seq + 1, sizeof(double), "statistics"));
    }
    rc_stats_acc *a = NULL;
    RC_TRY(rc_stats_acc_create(&r->stat, r->n_lens, lens, r->logprob_ref != NULL, r->entropy_gen != NULL,
                               RC_STATS_EXACT_TOKENS, RC_STATS_EXACT_SEQUENCES, &a));
    const int64_t G = r->gen_len;
    rc_status s = RC_OK;
    for (int64_t sq = 0; sq < r->n_seq && s == RC_OK; sq++) { /* sequence-major, as a chunked score feeds it */
        for (int i = 0; i < r->n_lens; i++)
            fwd[i] = r->lens[i].logprob_fwd + sq * r->lens[i].len;
        s = rc_stats_acc_add(a, r->gen_valid[sq], r->logprob_gen + sq * G, r->entropy_gen ? r->entropy_gen + sq * G : NULL,
                             r->logprob_ref ? r->logprob_ref + sq * G : NULL, fwd, S, M);
        for (int i = 0; i < r->n_lens && s == RC_OK; i++) {
            r->lens[i].seq_log_ratio_sum[sq] = S[i];
            r->lens[i].seq_log_ratio_mean[sq] = M[i];
        }
    }
    if (s == RC_OK)
        s = rc_stats_acc_finish(a, r);
    rc_stats_acc_free(a);
    return s;
}
