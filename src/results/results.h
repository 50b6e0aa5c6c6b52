/* Everything one ratiocheck run produces: settings, prompts, rollouts, the
 * per-length forward log-probs and the statistics computed from them. This is
 * what h5out.c writes, and what report/diff read back. */
#ifndef RC_RESULTS_H
#define RC_RESULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "routing.h"
#include "status.h"

#define RC_N_QUANTILES 5
extern const double rc_quantile_levels[RC_N_QUANTILES]; /* 0.001, 0.01, 0.5, 0.99, 0.999 */
#define RC_N_THRESHOLDS 4
extern const double rc_ratio_thresholds[RC_N_THRESHOLDS]; /* |ratio - 1| > 0.001, 0.01, 0.1, 0.2 */

/* The published corrections for sampler/trainer mismatch, simulated at their
 * documented defaults (README "Corrections", docs/research/corrections.md):
 * per length, the fraction of tokens or sequences each would clip or mask at
 * step 0, and the mismatch metrics the frameworks log. r = exp(new - old) =
 * pi_trainer / pi_sampler per token (every framework below uses the same
 * direction), S = sum of log r over a sequence, M = S / its tokens, p = e^old
 * and p' = e^new the two probabilities of the token. Token fractions are over
 * the valid tokens t < L, sequence fractions over the sequences with one. A
 * non-finite r counts as clipped / masked. */
#define RC_TIS_CAP 2.0          /* token TIS: r > 2 truncated (verl rollout_is=token, threshold 2.0) */
#define RC_MIS_LOW 0.5          /* token MIS: r outside [0.5, 2] masked (slime mis.yaml, mode mask) */
#define RC_MIS_HIGH 2.0
#define RC_ICEPOP_LOW 0.5       /* IcePop: r outside [0.5, 5] masked (verl decoupled_token_icepop) */
#define RC_ICEPOP_HIGH 5.0
#define RC_TRL_CAP 3.0          /* TRL vllm_importance_sampling_clip_max (token_* on r, sequence_* on e^S) */
#define RC_DPPO_MASK 0.2        /* prime-rl DPPO: p' - p > 0.2 (A > 0) or < -0.2 (A < 0) masked */
#define RC_PRIME_TOKEN_LOW 0.125 /* prime-rl before 2026-03: r outside [1/8, 8] masked ... */
#define RC_PRIME_TOKEN_HIGH 8.0
#define RC_PRIME_GEO_LOW 0.1    /* ... and whole sequences with e^M outside [0.1, 10] */
#define RC_PRIME_GEO_HIGH 10.0
#define RC_PRIME_SEQ_HIGH 100.0 /* ... or with any token r > 100 */
#define RC_SEQ_TIS_CAP 2.0      /* sequence TIS: e^S > 2 truncated (verl's default rollout_is=sequence) */
#define RC_SEQ_MIS_LOW 0.5      /* sequence MIS: e^-S outside [0.5, 2] masked (verl seq_sum_k1 "0.5_2.0") */
#define RC_SEQ_MIS_HIGH 2.0
#define RC_GEO_RS_LOW 0.999     /* geometric RS: e^-M outside [0.999, 1.001] masked (verl seq_mean_k1) */
#define RC_GEO_RS_HIGH 1.001
#define RC_N_SEQ_CORR 4          /* sequence-level corrections judged on both bounds (advice.h) */
#define RC_VERL_SAFETY_BOUND 20.0 /* verl clamps log r (and S) to +-20 before exponentiating (chi2) */
typedef struct {
    /* fractions of tokens */
    double token_tis_clipfrac;   /* r > 2 */
    double token_mis_maskfrac;   /* r < 0.5 or r > 2 */
    double icepop_maskfrac;      /* r < 0.5 or r > 5 */
    double token_cap3_frac;      /* r > 3 (TRL token_truncate / token_mask) */
    double dppo_maskfrac_high;   /* p' - p > 0.2: masked where the advantage is positive */
    double dppo_maskfrac_low;    /* p' - p < -0.2: masked where it is negative */
    double prime_legacy_maskfrac; /* prime-rl's is_masked before 2026-03 (token, geo and sequence masks) */
    /* fractions of sequences */
    double seq_tis_clipfrac;     /* e^S > 2 */
    double seq_mis_maskfrac;     /* -S outside [log 0.5, log 2] */
    double seq_geo_rs_maskfrac;  /* -M outside [log 0.999, log 1.001] */
    double seq_cap3_frac;        /* e^S > 3 (TRL sequence_truncate / sequence_mask, its default) */
    /* metrics (verl rollout_corr/..., TRL sampling/...) */
    double chi2_token;           /* mean(e^(2 clamp(log r)) - 1) */
    double chi2_seq;             /* mean over sequences of e^(2 clamp(S)) - 1 */
    double ppl_trainer;          /* mean over sequences of exp(-mean new) */
    double ppl_sampler;          /* mean over sequences of exp(-mean old) */
    double log_ppl_diff;         /* mean over sequences of (mean old - mean new) = mean(-M) */
    double log_ppl_abs_diff;     /* mean |M| */
    double ppl_ratio;            /* mean exp(-M) */
    double mean_abs_log_ratio;   /* mean |log r| */
    double max_abs_log_ratio;    /* max |log r| */
} rc_corrections;

/* One entry of rc_corr_stats: a field of rc_corrections, its name (the
 * /len_NNNN attribute and the --json key) and how the table prints it. */
typedef enum { RC_CORR_TOKENS, RC_CORR_SEQUENCES, RC_CORR_METRIC } rc_corr_kind;
typedef struct {
    const char *name;  /* attribute and JSON key */
    size_t off;        /* offsetof(rc_corrections, field) */
    rc_corr_kind kind;
    bool table;        /* in the run's table (else only in the file and --json) */
    const char *label; /* the table's row: the correction and who uses it */
    const char *rule;  /* what it clips / masks, or what the metric is */
} rc_corr_stat;
extern const rc_corr_stat rc_corr_stats[];
extern const size_t rc_n_corr_stats;
/* the value of entry e in c */
double rc_corr_value(const rc_corrections *c, const rc_corr_stat *e);

/* Strata (README "Strata"): the statistics of log r by decile of the sampler's
 * token probability (`prob`: p = e^old, binned on the stored log-prob) and of
 * the entropy of the sampler's distribution at that step (`entropy`: the
 * /rollouts/entropy tensor), over the valid tokens t < L whose binning value
 * and log r are not NaN. Decile edges: with the n values sorted ascending,
 * edge_k = the value at 0-based index floor(k n / 10), k = 1..9; a token with
 * value v is in decile #{k : edge_k <= v} (0..9), so ties go to the highest
 * decile whose edge they equal (deciles can then be empty or larger than n/10);
 * without ties decile k holds floor((k+1) n / 10) - floor(k n / 10) tokens. */
#define RC_N_DECILES 10
enum { RC_STRATA_PROB, RC_STRATA_ENTROPY, RC_N_STRATA };
extern const char *const rc_strata_names[RC_N_STRATA]; /* "prob", "entropy" */
typedef struct {
    int64_t count;
    double lo, hi;                /* smallest / largest value in it: p (prob) or entropy in nats */
    double mean_log_ratio, std_log_ratio; /* of log r (population std) */
    double mean_abs_log_ratio, max_abs_log_ratio;
    double clipfrac;              /* r outside [1 - clip_eps_low, 1 + clip_eps_high] (the run's) */
    double k3;                    /* mean(r - 1 - log r) */
    double share_abs_log_ratio;   /* its sum of |log r| over the stratum's total */
} rc_stratum;
/* The double fields of rc_stratum by name (the HDF5 dataset and JSON key) */
typedef struct {
    const char *name;
    size_t off; /* offsetof(rc_stratum, field) */
} rc_stratum_field;
extern const rc_stratum_field rc_stratum_fields[];
extern const size_t rc_n_stratum_fields;
double rc_stratum_value(const rc_stratum *b, const rc_stratum_field *f);
typedef struct {
    bool present;                 /* false: no values (entropy in a file written before it) */
    int64_t count;                /* tokens binned */
    double edges[RC_N_DECILES - 1]; /* edge_1 .. edge_9: log-prob (prob) or entropy (entropy) */
    rc_stratum bin[RC_N_DECILES];
} rc_strata;

/* Growth (README "Growth"): var(S) of the sequence log-ratio S against the
 * length L over the run's lengths, fitted as var = e^b L^a by least squares
 * of ln var on ln L over the lengths whose var is finite and > 0; std(S) =
 * sqrt of that reaches log(seq_cap) at cap_length (extrapolated). */
typedef struct {
    int n_points;          /* lengths in the fit */
    double exponent;       /* a (NaN: no fit) */
    double log_coef;       /* b = ln of var at L = 1 */
    double r2;             /* of the log-log fit (NaN with < 3 points) */
    double cap;            /* seq_cap: the sequence IS cap on e^S */
    double cap_length;     /* L where sqrt(e^b L^a) = log(cap) (NaN: n/a) */
    char looks_like[64];   /* "sqrt(L)", "L", "slower than sqrt(L)", "faster than L", or "" */
    char reason[160];      /* why there is no fit / no cap length, or "" */
} rc_growth;
#define RC_GROWTH_SQRT_MAX 1.5 /* a < 1.5: std grows like sqrt(L) (independent errors); else like L */
#define RC_GROWTH_SLOW_MAX 0.5 /* a < 0.5: slower than sqrt(L) */
#define RC_GROWTH_FAST_MIN 2.5 /* a > 2.5: faster than L */

/* Statistics of the ratio r = exp(forward - generation) over the valid tokens
 * of one length L. NaN where undefined (e.g. no reference). Each field is a
 * row of rc_len_fields. */
struct rc_len_stats {
    int64_t count;              /* valid tokens */
    double mean, std, min, max; /* of the ratio (std: population) */
    double quantiles[RC_N_QUANTILES];
    double frac_above[RC_N_THRESHOLDS]; /* fraction with |r - 1| > threshold; [3] = PPO clip fraction at eps 0.2 */
    double k1;                  /* mean(old - new) = mean(-log r) */
    double k3;                  /* mean(r - 1 - log r) */
    double mult_prob_err;       /* mean(exp|old - new|) (NeMo-RL token_mult_prob_error) */
    double identical_frac;      /* fraction of tokens whose two log-probs are bitwise equal */
    double clipfrac;            /* PPO clip fraction: r < 1 - clip_eps_low or r > 1 + clip_eps_high */
    int64_t first_divergent_position; /* first generated position where any sequence differs, -1 if none */
    /* sequence level, over the sequences with at least one valid token t < L:
     * per sequence, S = sum_t log r and M = S / tokens */
    int64_t seq_count;
    double seq_sum_mean, seq_sum_std, seq_sum_min, seq_sum_max;     /* of S (population std) */
    double seq_mean_mean, seq_mean_std, seq_mean_min, seq_mean_max; /* of M */
    double seq_frac_outside_band; /* |exp(M) - 1| > seq_eps: GSPO's clipped sequence ratio */
    double seq_frac_above_cap;    /* exp(S) > seq_cap: sequence-level importance sampling */
    /* the first generated token on its own (t = 0: its sampler log-prob comes from the prefill, the
     * others' from decode steps), and the later tokens (t >= 1) beside it */
    int64_t first_count;        /* sequences with a valid token t = 0 */
    double first_mean_abs_log_ratio, first_max_abs_log_ratio, first_k3;
    double later_mean_abs_log_ratio; /* mean |log r| over the valid tokens 1 <= t < L */
    /* with a reference pass: mean / max |log-prob - reference| of each path */
    double ref_gen_mean_abs, ref_gen_max_abs, ref_fwd_mean_abs, ref_fwd_max_abs;
    rc_corrections corr; /* the published corrections at their defaults */
    /* the published sequence-level corrections (rc_seq_corrs, advice.h) on
     * both bounds: the fraction of sequences below its lower / above its
     * upper bound (not stored: recomputed from the tensors) */
    double seq_corr_below[RC_N_SEQ_CORR], seq_corr_above[RC_N_SEQ_CORR];
    rc_strata strata[RC_N_STRATA]; /* log r by decile of p and of the sampler's entropy */
    /* whole-distribution agreement (--distribution; rc_dist_row): over the
     * valid tokens t < L, per token KL(sampler || trainer) and the total
     * variation between the two sides' next-token distributions over the
     * full vocabulary, and whether their argmax agrees. dist false (and
     * these NaN, dist_count 0) without the distribution pass. */
    bool dist;
    int64_t dist_count;
    double kl_mean, kl_std, kl_min, kl_max; /* population std */
    double tv_mean, tv_std, tv_min, tv_max;
    double top1_agree;          /* fraction of tokens whose two argmax are the same id */
    /* a mixture-of-experts run's routing record (docs/routing.md) over the
     * valid tokens t < L, log r at L (rc_routing_len_stats; at the longest
     * length the record's own statistics). routing false (and these zero)
     * without a record. */
    bool routing;
    rc_routing_stats rt;
};

/* The statistics of one length by name, in one table (stats.c), in the
 * order --json prints them: the HDF5 writer stores every RC_LF_H5 row as an
 * attribute of /len_NNNN (the reader recomputes them from the tensors),
 * --json prints every RC_LF_JSON row under its key (RC_LF_JSON_REF: with a
 * reference pass only), the sweep's JSON every RC_LF_SWEEP row, --fail-above
 * takes every row with a gate name (its error lists them), the run's tables
 * print the rows with a column (tables RC_LF_TAB_*), and
 * tools/checks/check_results.py recomputes every attribute (it fails on one it does
 * not know). A new metric: its field in rc_len_stats, its computation in
 * stats.c, one row. The corrections (rc_corr_stats) and the strata are
 * tables of their own: their rows mark where they go. */
typedef enum {
    RC_LF_I64,         /* an int64_t field */
    RC_LF_F64,         /* a double field */
    RC_LF_DERIVED,     /* computed from the others (value) */
    RC_LF_CORRECTIONS, /* every rc_corr_stats entry */
    RC_LF_STRATA,      /* the strata (--json's "strata") */
} rc_len_field_kind;
/* RC_LF_DIST: a whole-distribution row (docs/statistics.md "Distribution"): written, printed and gated only
 * for a length with the distribution pass (rc_len_stats.dist); RC_LF_ROUTING: a routing row
 * (docs/routing.md), only for a length with a routing record (rc_len_stats.routing) */
enum { RC_LF_H5 = 1, RC_LF_JSON = 2, RC_LF_JSON_REF = 4, RC_LF_SWEEP = 8, RC_LF_DIST = 16, RC_LF_ROUTING = 32 };
enum { RC_LF_TAB_TOKENS = 1, RC_LF_TAB_SEQS = 2, RC_LF_TAB_SWEEP = 3, RC_LF_TAB_DIST = 4 }; /* the printed tables */
typedef struct rc_len_stats rc_len_stats;
typedef struct {
    int table;          /* RC_LF_TAB_*, 0: none */
    int pos;            /* its column, from 1 */
    const char *label;  /* its header ("%g": the rc_stat_params value at param_off) */
    const char *fmt;    /* its cell, e.g. "%10.3e" (the width is the header's); "%9s": "at N" / "none" */
    size_t param_off;
} rc_len_column;
typedef struct rc_len_field_s {
    const char *name;     /* the /len_NNNN attribute and the JSON key */
    const char *json_key; /* when it differs from name, else NULL */
    const char *gate;     /* the --fail-above metric (larger is worse), or NULL */
    rc_len_field_kind kind;
    size_t off;           /* offsetof(rc_len_stats, field) (I64, F64) */
    double (*value)(const rc_len_stats *st); /* RC_LF_DERIVED */
    unsigned where;       /* RC_LF_H5 | RC_LF_JSON | ... */
    rc_len_column col[2]; /* where the run's tables print it */
    int h5_pos;           /* RC_LF_H5: its attribute's place in /len_NNNN, from 1 (after "len") */
} rc_len_field;
extern const rc_len_field rc_len_fields[];
extern const size_t rc_n_len_fields;
/* the value of row f in st (I64 fields as double) */
double rc_len_value(const rc_len_stats *st, const rc_len_field *f);
/* whether row f has a value in st (a whole-distribution row needs the distribution pass, a routing row the
 * routing record) */
bool rc_len_field_present(const rc_len_stats *st, const rc_len_field *f);
/* the row of a --fail-above metric (its gate name, or the key of a number
 * --json prints for each length), or NULL */
const rc_len_field *rc_len_gate(const char *metric);
/* the correction of a --fail-above metric (its JSON key), or NULL */
const rc_corr_stat *rc_corr_gate(const char *metric);

typedef struct {
    int64_t len;          /* L: generated tokens re-scored */
    float *logprob_fwd;   /* [n_seq, L]: forward log-prob of generated token t, NaN where invalid */
    rc_len_stats st;
    /* per generated position t < L */
    int64_t *pos_count;   /* [L] valid tokens */
    double *pos_mean_abs_log_ratio; /* [L] */
    double *pos_max_abs_log_ratio;  /* [L] */
    double *pos_ratio_std;          /* [L] */
    /* per sequence (NaN for a sequence without a valid token t < L) */
    double *seq_log_ratio_sum;      /* [n_seq] S = sum_t log r */
    double *seq_log_ratio_mean;     /* [n_seq] M = S / tokens */
    /* the distribution pass (--distribution), else NULL: per token [n_seq, L]
     * (NaN / -1 where invalid), per position [L] (their means; NaN at a
     * position without a valid token) */
    double *dist_kl, *dist_tv;      /* KL(sampler || trainer), total variation */
    int32_t *dist_top1;             /* 1: the two argmax agree, 0: not, -1: invalid */
    double *pos_kl_mean, *pos_tv_mean, *pos_top1_agree;
} rc_len_result;

/* dist.c: one position's agreement of the sampler's and the trainer's
 * next-token log-probs p_lp, q_lp [V] (float values as each side computed
 * them: fp32, or rounded to its dtype with logprob-dtype=dtype), every sum in
 * fp64 over the full vocabulary, p = exp(p_lp), q = exp(q_lp) in fp64:
 * kl = sum_v p_v (r_v - 1 - log r_v), r_v = q_v / p_v, each term
 * p_v phi(q_lp_v - p_lp_v) with phi(x) = e^x - 1 - x >= 0 computed without
 * cancellation, and q_v where p_v = 0 (Neumaier-compensated sum): for two
 * rows that each sum to 1 this is sum p_v log(p_v / q_v) = KL(p || q); for
 * rows as produced, whose sums miss 1 by their log-probs' rounding, it is
 * the extended KL of the two measures, sum p log(p/q) - sum p + sum q,
 * never negative; +inf when some p_v > 0 has q_v = 0.
 * tv = sum |p_v - q_v| / 2 (each term as -max(p_v, q_v)
 * expm1(-|p_lp_v - q_lp_v|): no cancellation where p_v and q_v are close;
 * compensated), top1 = argmax p == argmax q (the
 * first index of the largest value on each side, as torch.argmax). NaN in
 * either row: kl and tv NaN, top1 false. */
typedef struct {
    double kl, tv;
    bool top1;
    int32_t p_argmax, q_argmax;
} rc_dist_token;
rc_dist_token rc_dist_row(const float *p_lp, const float *q_lp, int64_t V);
/* dist.c: the per-length and per-position summaries of lr's per-token
 * arrays (or NaN, dist false, without them) for n_seq sequences */
rc_status rc_dist_stats(rc_len_result *lr, int64_t n_seq);

/* The thresholds of the statistics (settings of the run, root attributes of
 * the file). A value <= 0 (a zeroed struct, an older file) means the default. */
typedef struct {
    double clip_eps_low, clip_eps_high; /* PPO clip range [1 - low, 1 + high] (default 0.2, 0.2) */
    double seq_eps;                     /* GSPO band |exp(M) - 1| <= eps (default 3e-4) */
    double seq_cap;                     /* sequence IS cap exp(S) <= cap (default 3) */
} rc_stat_params;
#define RC_DEFAULT_CLIP_EPS 0.2
#define RC_DEFAULT_SEQ_EPS 3e-4
#define RC_DEFAULT_SEQ_CAP 3.0

/* |forward_La - forward_Lb| over the positions both lengths share (t < min). */
typedef struct {
    int64_t len_a, len_b, count;
    double max_abs, mean_abs;
} rc_cross_len;

/* The verdict: one line per RL objective, from the statistics of every
 * length (README "Verdict"). FAIL: a published gate is exceeded (NeMo-RL's
 * mean exp|log r| < 1.05, prime-rl's mismatch_kl = k3 < 0.015) or more than
 * RC_VERDICT_FAIL_FRAC of the tokens / sequences would be clipped or masked
 * at step 0; WARN: some would be; OK: none would be. */
#define RC_GATE_MULT_PROB_ERR 1.05 /* NeMo-RL token_mult_prob_error */
#define RC_GATE_MISMATCH_KL 0.015  /* prime-rl mismatch_kl (= k3) merge bar */
#define RC_VERDICT_FAIL_FRAC 0.10
/* RC_VERDICT_NONE: the line does not apply to the run (routing without a MoE layer): not printed, written or
 * gated */
typedef enum { RC_VERDICT_NONE = -1, RC_VERDICT_OK = 0, RC_VERDICT_WARN = 1, RC_VERDICT_FAIL = 2 } rc_verdict_level;
enum { RC_OBJ_TOKEN_PPO, RC_OBJ_SEQUENCE_IS, RC_OBJ_GSPO, RC_OBJ_ROUTING, RC_N_OBJECTIVES };
const char *rc_verdict_name(rc_verdict_level v);              /* "OK", "WARN", "FAIL" ("none") */
typedef struct rc_verdict rc_verdict;
typedef struct rc_results rc_results;
/* How a sweep row's effect on an objective is told from noise (advice.c):
 * 2 standard errors of k3's mean over sequences, of a fraction of the
 * sequences, or of a fraction of the routing record's tokens */
typedef enum { RC_NOISE_K3, RC_NOISE_SEQS, RC_NOISE_ROUTING_TOKENS } rc_noise_kind;
/* The verdict's lines, one row per objective (stats.c rc_objectives; docs/verdict.md): its name (the JSON
 * key, the /verdict attribute, --fail-above verdict.NAME), its label in the table, the function that sets its
 * level and reason from the statistics, and the metric the sweep ranks its settings by (smaller is better;
 * NaN where the length has none), with its noise floor. --fail-on and --fail-above verdict see every row. */
typedef struct {
    const char *name, *label;
    void (*judge)(const rc_results *r, rc_verdict *v, int o);
    const char *metric;
    double (*value)(const rc_len_stats *st);
    rc_noise_kind noise;
    bool causes; /* a WARN / FAIL line is followed by a row of rc_causes (advice.c) */
} rc_objective;
extern const rc_objective rc_objectives[RC_N_OBJECTIVES];
struct rc_verdict {
    rc_verdict_level level[RC_N_OBJECTIVES];
    char reason[RC_N_OBJECTIVES][448]; /* what decided it, with the numbers */
    /* at the longest length: the token with the largest |log r| and the
     * sequence with the largest |S| (-1 when there is none) */
    int64_t len;
    int64_t worst_token_seq, worst_token_pos, worst_seq;
    double worst_token_ratio, worst_seq_ratio;
};

/* ratiocheck score with trainer_logprobs and --model (docs/score.md "Three
 * columns"): the three log-probs of every valid token t < the longest
 * length, compared two by two. Pair k compares side a with side b, d = b - a
 * per token: sampler vs your trainer (the logged pair), sampler vs
 * ratiocheck's trainer, your trainer vs ratiocheck's trainer. */
enum { RC_TW_SAMPLER_YOURS, RC_TW_SAMPLER_RC, RC_TW_YOURS_RC, RC_TW_N };
extern const char *const rc_threeway_names[RC_TW_N]; /* JSON keys, HDF5 attribute prefixes */
extern const char *const rc_threeway_labels[RC_TW_N]; /* the table's rows */
typedef struct {
    int64_t count;
    double mean, std;            /* of d (population std) */
    double mean_abs, max_abs;    /* of |d| */
    double k3;                   /* mean(e^d - 1 - d) */
    double mult_prob_err;        /* mean exp|d| */
    double identical_frac;       /* d == 0 bitwise-equal values */
} rc_pair_stats;
/* which side is off: the closer pair to ratiocheck's trainer decides when
 * its mean |d| is at most RC_TW_CLOSER times the other's; with a reference,
 * "within the dtype's noise" when that mean |d| is at most RC_TW_NOISE times
 * ratiocheck's own mean |d| from the reference */
#define RC_TW_CLOSER 0.5
#define RC_TW_NOISE 2.0
typedef enum { RC_TW_OFF_SAMPLER, RC_TW_OFF_YOURS, RC_TW_OFF_BOTH, RC_TW_OFF_NONE } rc_tw_off;
extern const char *const rc_tw_off_names[4]; /* "sampler", "your_trainer", "both", "none" */
enum { RC_TW_COL_SAMPLER, RC_TW_COL_YOURS, RC_TW_COL_RC, RC_TW_COLS };
extern const char *const rc_threeway_cols[RC_TW_COLS]; /* "sampler", "your_trainer", "ratiocheck" */
struct rc_threeway {
    int64_t len;                 /* the longest length compared */
    char ratiocheck[160];        /* ratiocheck's trainer (its --trainer spec) */
    rc_pair_stats pair[RC_TW_N];
    /* with --reference: each column's mean / max |column - reference| over the
     * same tokens (the reference's name in ref, "" without one); ratiocheck's
     * column's mean is the trainer dtype's own noise on these tokens */
    char ref[8];
    int64_t ref_count;
    double ref_mean_abs[RC_TW_COLS], ref_max_abs[RC_TW_COLS];
    rc_tw_off off;
    char summary[1024];          /* the line: which side is off, and why */
};
typedef struct rc_threeway rc_threeway;
/* one token's three log-probs at a time; then the summary */
typedef struct {
    int64_t n[RC_TW_N], same[RC_TW_N];
    double s1[RC_TW_N], s2[RC_TW_N], sabs[RC_TW_N], maxabs[RC_TW_N], k3[RC_TW_N], mpe[RC_TW_N];
    int64_t nref;
    double rsum[RC_TW_COLS], rmax[RC_TW_COLS];
} rc_threeway_acc;
/* one token; ref: the reference's value (NaN without one) */
void rc_threeway_add(rc_threeway_acc *a, float sampler, float yours, float ratiocheck, double ref);
void rc_threeway_finish(const rc_threeway_acc *a, rc_threeway *tw);

/* One setting of `ratiocheck sweep`: the same rollouts replayed with one
 * variable changed from the base (README "Sweep"). */
typedef struct {
    char name[96];       /* "trainer: lm-head=fp32"; "base again" for the noise floor */
    char sampler[192];   /* the sides this setting ran with */
    char trainer[192];
    char skipped[256];   /* why it did not run (e.g. the model's family is not covered), or "" */
    bool noise_floor;    /* the base configuration replayed: must equal the base bit for bit */
    bool identical;      /* every log-prob of both paths bitwise equal to the base run's */
    bool invariant;      /* it makes both sides batch-invariant (kernels=invariant) where the base is not */
    rc_results *res;     /* its replay (owned; NULL when skipped) */
} rc_sweep_row;

struct rc_results {
    /* settings, stored as root attributes */
    char version[32];
    char *command_line;  /* owned */
    char *model_path;    /* owned */
    char model_type[32];
    char layers[48];     /* decoder layers run: "all", or "N of M" under --layers N */
    char dtype[8];       /* "fp32", "fp16", "bf16" */
    char kernels[16];    /* "engine", "invariant", "blas" (dtype .. logprob_dtype: the sampler's side) */
    char upcast[64];     /* "none" or "softmax,rope,..." */
    char alibi_bias[8];  /* "model" or "rowmax" ("" in files before the option) */
    char logprob_dtype[8];
    char reference[8];   /* "none", "fp32", "fp64" */
    char sampler[160];   /* both sides' settings when they differ (--sampler / --trainer), else "" */
    char trainer[160];
    char backend[16];    /* "cpu" or "cuda" */
    char device[128];    /* the GPU ("NVIDIA H200 (sm_90, 140 GiB)"); "" on the CPU */
    char gpu_split[192]; /* the GPUs the layers ran on ("2 GPUs, layers 0-15, 16-31 (automatic: ...)"); "" on the CPU */
    char created[32];    /* ISO 8601 UTC */
    int64_t threads, seed, top_k, samples, batch, forward_batch;
    double temperature, top_p;
    bool stop_at_eos;
    rc_stat_params stat;
    /* prompts */
    int64_t n_prompts, prompt_max;
    int32_t *prompt_tokens; /* [n_prompts, prompt_max], -1 padding */
    int32_t *prompt_len;    /* [n_prompts] */
    char **prompt_text;     /* [n_prompts] UTF-8 text, or NULL (token-id prompts); owned */
    /* rollouts: sequence s = prompt seq_prompt[s], sample seq_sample[s] */
    int64_t n_seq, gen_len; /* gen_len = max L */
    int32_t *seq_prompt, *seq_sample; /* [n_seq] */
    int32_t *gen_tokens;    /* [n_seq, gen_len], -1 after the end */
    int32_t *gen_valid;     /* [n_seq] valid generated tokens (gen_len unless --stop-at-eos) */
    char **completion;      /* [n_seq] decoded generated text, or NULL (no tokenizer); owned */
    float *logprob_gen;     /* [n_seq, gen_len] log-prob of the temperature-scaled full distribution (PPO old) */
    float *logprob_gen_processed; /* [n_seq, gen_len] after top-k / top-p renormalisation */
    float *entropy_gen;     /* [n_seq, gen_len] entropy (nats) of the distribution logprob_gen is from,
                               or NULL (files written before it) */
    double *logprob_ref;    /* [n_seq, gen_len] reference pass (fp32 or fp64 values), or NULL */
    /* ratiocheck score of a file with trainer_logprobs: the user's trainer's
     * log-probs as logged ([n_seq, gen_len], NaN after the end; NULL
     * otherwise). The statistics then compare them with logprob_gen (they
     * are every length's logprob_fwd, its first L columns); with --model,
     * logprob_ratiocheck holds ratiocheck's own trainer (the longest length's
     * forward, [n_seq, gen_len]) and threeway the pairs' summary. */
    float *logprob_trainer;
    float *logprob_ratiocheck;
    struct rc_threeway *threeway;
    int64_t trainer_outside_kept; /* score with top-k / top-p processed log-probs: logged tokens the
                                     trainer's top-k / top-p removes, at the longest length (not stored) */
    /* per length */
    int n_lens;
    rc_len_result *lens;
    int n_cross;
    rc_cross_len *cross;
    rc_verdict verdict;   /* computed with the statistics */
    /* the gate (--fail-above, --fail-on): the rules as given ("": no gate),
     * whether one failed, what failed ("" when it passed); /verdict's gate
     * ("PASS" / "FAIL"), gate_rules and gate_failed attributes (with a gate) */
    bool gate_fail;
    char gate_rules[256];
    char gate_failed[512];
    rc_growth growth;     /* var(S) against L over the lengths, computed with the statistics */
    double seconds_generate, seconds_forward, seconds_total;
    double seconds_reference; /* the --reference pass (0 without one) */
    /* `ratiocheck sweep`: the settings replayed over these rollouts (0 / NULL otherwise) */
    int n_sweep;
    rc_sweep_row *sweep;
    int sweep_best;        /* the row that lowers k3 at the longest length the most, -1 when none does */
    int sweep_best_other;  /* the same among the rows that are not `invariant` (the cheaper levers) */
    const struct rc_trace_out *trace; /* `ratiocheck trace`: written as /trace (trace.h; not owned), else NULL */
    struct rc_routing *routing; /* a MoE model's routing record and its statistics (routing.h; owned), else NULL */
};

/* The statistics a sweep compares, at the results' longest length. */
const rc_len_stats *rc_results_longest(const rc_results *r);
/* Fill r->sweep_best, r->sweep_best_other and each row's `identical` (against r itself). */
void rc_sweep_summarise(rc_results *r);

void rc_results_free(rc_results *r);

/* The run's settings, described once: the HDF5 writer stores each as a root
 * attribute of that name, the reader reads them back (an optional one may be
 * missing in older files and stays ""), and --json prints each under its
 * JSON key, in this order. Adding a setting = a field in rc_results and one
 * row in rc_settings (stats.c). */
typedef enum {
    RC_SET_TEXT,      /* char field[cap], or an owned char * when cap == 0 */
    RC_SET_I64,       /* int64_t */
    RC_SET_F64,       /* double */
    RC_SET_BOOL,      /* bool, stored as an integer 0 / 1 */
} rc_setting_kind;

typedef struct {
    const char *name;     /* root attribute */
    const char *json_key; /* key in --json output, or NULL (printed elsewhere) */
    rc_setting_kind kind;
    size_t off;           /* offsetof(rc_results, field) */
    size_t cap;           /* RC_SET_TEXT: the array's size; 0 for an owned pointer */
    bool optional;        /* older files may lack it */
    /* the run's header line (ratiocheck run / report): "  <label> <value>"
     * in this order; NULL: not there. Not shown when the value is "" or
     * equals table_hide (a default that would only add noise). */
    const char *table_label;
    const char *table_hide;
} rc_setting;

extern const rc_setting rc_settings[];
extern const size_t rc_n_settings;

/* The text of a RC_SET_TEXT setting ("" when an owned one is NULL). */
const char *rc_setting_text(const rc_results *r, const rc_setting *s);

/* stats.c: fill every statistic of r->lens[*] and r->cross from the stored
 * tensors, with the thresholds of r->stat (defaults filled in first). */
rc_status rc_compute_stats(rc_results *r);
/* The statistics of a run accumulated one sequence at a time: what
 * rc_compute_stats feeds with every sequence of a results struct, and what a
 * chunked `ratiocheck score` feeds chunk by chunk, in the same order
 * (sequence-major, each sequence's tokens t < L in order), so both give the
 * same bits. Sums, means, fractions, min / max, the per-position arrays, the
 * corrections, the cross-length gaps and the verdict's worst token / sequence
 * are exact however many sequences are fed. The quantiles, the strata (decile
 * edges and the statistics of each decile) and the two-pass std of the ratio
 * need the values: up to tok_cap tokens per length are kept (16 bytes each),
 * and while a length has at most tok_cap tokens they are exact (every value,
 * in order); beyond it the kept tokens are a uniform sample (reservoir
 * sampling, Algorithm R, seeded per length: the same input gives the same
 * sample), the quantiles and the strata are computed over that sample (the
 * strata's counts are the sample's) and the std of the ratio from the sums of
 * (r - 1) and (r - 1)^2. Likewise the std of S and M is two-pass over the
 * kept sequences while there are at most seq_cap, else from the sums of
 * squares. */
#define RC_STATS_EXACT_TOKENS ((int64_t)1 << 22)    /* 64 MiB per length */
#define RC_STATS_EXACT_SEQUENCES ((int64_t)1 << 22) /* 64 MiB per length */
typedef struct rc_stats_acc rc_stats_acc;
rc_status rc_stats_acc_create(const rc_stat_params *params, int n_lens, const int64_t *lens, bool has_ref,
                              bool has_entropy, int64_t tok_cap, int64_t seq_cap, rc_stats_acc **out);
/* The next sequence: gen_valid its valid generated tokens, gen / entropy /
 * ref its rows of logprob_gen / entropy_gen / logprob_ref (entropy and ref
 * may be NULL; they are read only when the accumulator was created with
 * them), fwd[i] its row of length i's logprob_fwd; S_out[i] / M_out[i] get
 * its S and M at length i (NaN without a valid token). */
rc_status rc_stats_acc_add(rc_stats_acc *a, int64_t gen_valid, const float *gen, const float *entropy,
                           const double *ref, const float *const *fwd, double *S_out, double *M_out);
/* every statistic into r: r->lens[i].st and the per-position arrays
 * (r->lens[i].len must be the accumulated lengths), r->cross, the verdict
 * and the growth. r->lens[i].logprob_fwd and the per-sequence arrays are
 * not read. */
rc_status rc_stats_acc_finish(rc_stats_acc *a, rc_results *r);
void rc_stats_acc_free(rc_stats_acc *a);
/* replace each threshold <= 0 (or NaN) by its default */
void rc_stat_params_fill_defaults(rc_stat_params *p);

/* h5out.c: write atomically (temp file in the target folder, fsync, rename). */
rc_status rc_h5_write(const rc_results *r, const char *path, bool force);
/* h5in.c: read a results file back (statistics recomputed from its tensors). */
#define RC_MAX_LENS_READ 64
rc_status rc_h5_read(const char *path, rc_results *out);

/* h5in.c: check a results file read by rc_h5_read before --rollouts-from
 * replays it in a model with `vocab` tokens and `max_pos` positions: every
 * prompt and generated token id in [0, vocab), prompt lengths in
 * 1..min(prompt_max, max_pos - 1), sequences laid out as prompts x samples
 * (s = prompt * samples + sample). RC_ERR_FORMAT naming `path` otherwise. */
rc_status rc_results_check_replay(const rc_results *r, const char *path, int64_t vocab, int64_t max_pos);

/* h5out.c: the same file written in slices of sequences, in bounded memory
 * (ratiocheck score): rc_h5_stream_begin creates the temporary file with
 * every per-sequence dataset at its full size (n_seq rows; the widths, the
 * lengths and which optional tensors there are from `shape`, a slice's
 * results); rc_h5_stream_rows writes the next rows from a slice laid out as
 * `shape` (its sequences numbered from 0: prompt_index is offset by the rows
 * before it); rc_h5_stream_finish writes the settings and statistics of r
 * (its per-sequence arrays are not read), then syncs and renames the file
 * into place, as rc_h5_write. Any error, or rc_h5_stream_abort, removes the
 * temporary file (finish and abort free the stream). Prompt texts, sweeps
 * and traces are not written. */
typedef struct rc_h5_stream rc_h5_stream;
rc_status rc_h5_stream_begin(const rc_results *shape, int64_t n_seq, const char *path, bool force,
                             rc_h5_stream **out);
rc_status rc_h5_stream_rows(rc_h5_stream *s, const rc_results *slice);
rc_status rc_h5_stream_finish(rc_h5_stream *s, const rc_results *r);
void rc_h5_stream_abort(rc_h5_stream *s);

/* The temporary file being written right now, or NULL (for signal handlers). */
const char *rc_h5_temp_path(void);

/* h5out.c: check an output path before any work: not empty, not a folder or
 * a dangling symbolic link, absent unless `force`, and its folder writable
 * (a temporary file is created there and removed). */
rc_status rc_h5_check_output(const char *path, bool force);
/* h5out.c: remove "<dir>/.<name>.tmp.<pid>" files that earlier runs with the
 * same output path left behind (killed during the write) and whose process is
 * gone; `removed` is called with each one's path. Returns how many. */
int rc_h5_remove_stale_temps(const char *path, void (*removed)(const char *tmp_path, long pid));

#endif
