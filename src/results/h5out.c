/* h5out.c: write one ratiocheck run (an rc_results) to an HDF5 file.
 * (What goes in the file, group by group: h5contents.c.)
 *
 * RESULTS FILE LAYOUT  (format "ratiocheck-results", format_version 1)
 * =====================================================================
 *
 * The file is plain HDF5 (written with HDF5 1.10, default library-version
 * bounds), readable by h5py, h5dump and HDFView with no glue code. Creation
 * order is recorded, so groups list their members, and objects their
 * attributes, in the order below. (h5py before 3.11 lists the members of the
 * root group alphabetically when iterating the File object, h5py#1577;
 * list(f["/"]) gives creation order.) Notation: S = num_sequences, P = num_prompts,
 * T = gen_len, Pmax = the longest prompt, L = one re-scored length.
 * Types: i32/i64 = little-endian signed integers, f32/f64 = IEEE floats,
 * str = variable-length UTF-8 string (h5py returns a Python `str`).
 *
 * Root attributes (the run's settings)
 *   format            str   "ratiocheck-results"
 *   format_version    i64   1 (bumped on incompatible layout changes)
 *   version           str   ratiocheck version that wrote the file
 *   command_line      str   the command line, shell-quoted
 *   model_path        str   model folder as given
 *   model_type        str   config.json model_type, e.g. "llama"
 *   layers            str   decoder layers run: "all", or "N of M" (--layers N);
 *                           absent in older files
 *   dtype             str   "fp32", "fp16" or "bf16"
 *   kernels           str   "engine", "invariant" or "blas"
 *   upcast            str   "none" or a comma list, e.g. "softmax,rope"
 *   logprob_dtype     str   dtype the log-softmax was computed in
 *                           (dtype .. logprob_dtype: the sampler's side)
 *   sampler, trainer  str   each side's settings when --sampler / --trainer
 *                           made them differ ("dtype=bf16,kernels=engine,
 *                           upcast=lm_head,logprob-dtype=fp32[,batch=N |
 *                           ,micro-batch=N]"), else ""; absent in older files
 *   reference         str   "none", "fp32" or "fp64" (the --reference pass:
 *                           /reference/logprob holds its values)
 *   backend           str   "cpu" or "cuda"
 *   device            str   the GPU's name, compute capability and memory ("" on the CPU)
 *   gpu_split         str   the GPUs the layers ran on and why ("2 GPUs, layers 0-15,
 *                           16-31 (automatic: ...)"; "" on the CPU); absent in older files
 *   created           str   ISO 8601 UTC time stamp
 *   threads, seed, top_k, samples, batch, forward_batch       i64
 *   num_prompts (P), num_sequences (S), gen_len (T)            i64
 *   temperature, top_p                                         f64
 *   stop_at_eos       i64   0 or 1
 *   clip_eps_low, clip_eps_high  f64  PPO clip range of clipfrac (--clip-eps*)
 *   seq_eps, seq_cap  f64   GSPO band and sequence-IS cap (--seq-eps, --seq-cap)
 *                           (files written before these have none: the
 *                           defaults 0.2, 0.2, 3e-4, 3 apply)
 *   lengths           i64[n]  every re-scored length L, in run order
 *   seconds_generate, seconds_forward, seconds_total           f64
 *   seconds_reference f64   the reference pass's share of seconds_total (0
 *                           without one; absent in older files)
 *   Strings that are not valid UTF-8 (e.g. a path with Latin-1 bytes) are
 *   stored with each bad byte replaced by U+FFFD; a NULL string is "".
 *
 * /prompts
 *   tokens            i32[P, Pmax]  prompt token ids, -1 after the end
 *   lengths           i32[P]        tokens in each prompt
 *   text              str[P]        the prompt text (only for text prompts)
 *
 * /rollouts   (sequence s = sample sample_index[s] of prompt prompt_index[s])
 *   prompt_index      i32[S]
 *   sample_index      i32[S]
 *   tokens            i32[S, T]     generated token ids, -1 after the end
 *   lengths           i32[S]        valid generated tokens (T unless
 *                                   --stop-at-eos stopped the sequence early)
 *   logprob_gen       f32[S, T]     log-prob of each generated token under the
 *                                   temperature-scaled full distribution during
 *                                   KV-cached generation (PPO "old"); NaN after
 *                                   the end
 *   logprob_gen_processed f32[S, T] the same after top-k / top-p
 *                                   renormalisation (what the sampler drew from)
 *   logprob_trainer   f32[S, T]     `score` of a file with trainer_logprobs: the
 *                                   user's trainer's log-probs as logged (every
 *                                   /len_NNNN/logprob_forward is then these);
 *                                   NaN after the end (absent otherwise)
 *   logprob_ratiocheck f32[S, T]    the same with --model: ratiocheck's own
 *                                   trainer's forward, the third column
 *                                   (docs/score.md "Three columns")
 *   entropy           f32[S, T]     entropy (nats) of the distribution logprob_gen
 *                                   is from: -sum_i p_i log p_i over the whole
 *                                   vocabulary, p_i = exp of the step's fp32
 *                                   log-probs (temperature-scaled, before top-k /
 *                                   top-p), summed in double, rounded once; NaN
 *                                   after the end (absent in older files)
 *
 *   completion        str[S]        the generated tokens decoded with the
 *                                   model's tokenizer.json (only when the
 *                                   model folder has one)
 *
 * /reference   (only when the run had a reference pass)
 *   logprob           f64[S, T]     the token's log-prob from the reference pass
 *
 * /len_%04d   one group per re-scored length L, e.g. /len_0020, in run order
 *   attributes:
 *     len                                   i64   L
 *     count                                 i64   valid tokens scored
 *     mean, std, min, max                   f64   of the ratio r (population std)
 *     quantile_0.1pct, quantile_1pct, quantile_50pct,
 *     quantile_99pct, quantile_99.9pct      f64   quantiles of r
 *     frac_abs_ratio_minus_1_gt_0.001, ..._gt_0.01, ..._gt_0.1, ..._gt_0.2
 *                                           f64   fraction of tokens with |r-1| > x
 *     clipfrac                              f64   fraction of tokens with r outside
 *                                                 [1 - clip_eps_low, 1 + clip_eps_high]
 *                                                 (PPO clip fraction; root attributes,
 *                                                 default 0.2 / 0.2)
 *     k1                                    f64   mean(-log r)
 *     k3                                    f64   mean(r - 1 - log r)
 *     mult_prob_err                         f64   mean(exp|log r|)
 *     identical_frac                        f64   fraction of bitwise-equal pairs
 *     first_divergent_position              i64   first position where any
 *                                                 sequence differs, -1 if none
 *     ref_gen_mean_abs, ref_gen_max_abs,
 *     ref_fwd_mean_abs, ref_fwd_max_abs     f64   |log-prob - reference| of the
 *                                                 generation / forward path
 *     seq_count                             i64   sequences with >= 1 valid token
 *     seq_log_ratio_sum_mean, _std, _min, _max      f64   of S = sum_t log r per
 *                                                 sequence (e^S: the sequence ratio)
 *     seq_log_ratio_mean_mean, _std, _min, _max     f64   of M = S / its tokens
 *                                                 (e^M: GSPO's sequence ratio)
 *     seq_frac_outside_band                 f64   fraction of sequences with
 *                                                 |e^M - 1| > seq_eps
 *     seq_frac_above_cap                    f64   fraction with e^S > seq_cap
 *   the published corrections at their defaults (README "Corrections"; r =
 *   e^(new - old), S / M a sequence's sum / mean of log r, p / p' the token's
 *   sampler / trainer probability; thresholds fixed, see results.h):
 *     token_tis_clipfrac                    f64   fraction of tokens with r > 2 (token TIS)
 *     token_mis_maskfrac                    f64   ... r outside [0.5, 2] (token MIS)
 *     icepop_maskfrac                       f64   ... r outside [0.5, 5] (IcePop)
 *     token_cap3_frac                       f64   ... r > 3 (TRL token_truncate / token_mask)
 *     dppo_maskfrac_high, dppo_maskfrac_low f64   ... p' - p > 0.2 / < -0.2 (prime-rl DPPO,
 *                                                 masked for a positive / negative advantage)
 *     prime_legacy_maskfrac                 f64   ... prime-rl's is_masked before 2026-03: r outside
 *                                                 [0.125, 8], or in a sequence with e^M outside
 *                                                 [0.1, 10] or any r > 100
 *     seq_tis_clipfrac                      f64   fraction of sequences with e^S > 2 (sequence TIS)
 *     seq_mis_maskfrac                      f64   ... -S outside [log 0.5, log 2] (sequence MIS)
 *     seq_geo_rs_maskfrac                   f64   ... -M outside [log 0.999, log 1.001] (geometric RS)
 *     seq_cap3_frac                         f64   ... e^S > 3 (TRL sequence_truncate / sequence_mask)
 *     chi2_token                            f64   mean(e^(2 log r) - 1), log r clamped to +-20
 *     chi2_seq                              f64   mean over sequences of e^(2 S) - 1, S clamped to +-20
 *     ppl_trainer, ppl_sampler              f64   mean over sequences of exp(-mean new / old log-prob)
 *     log_ppl_diff, log_ppl_abs_diff        f64   mean over sequences of -M, |M|
 *     ppl_ratio                             f64   mean over sequences of e^-M
 *     mean_abs_log_ratio, max_abs_log_ratio f64   mean / max |log r| over the tokens
 *     (files written before the corrections have none of these)
 *     (NaN where a statistic is undefined, e.g. the ref_* ones without a
 *     reference pass.)
 *   datasets:
 *     logprob_forward   f32[S, L]  log-prob of generated token t recomputed by
 *                                  one batched forward pass over prompt + the
 *                                  first L generated tokens (PPO "new"); NaN
 *                                  where invalid
 *     ratio             f32[S, L]  exp(logprob_forward - logprob_gen[:, :L]),
 *                                  computed in double, rounded once to f32
 *     log_ratio         f32[S, L]  logprob_forward - logprob_gen[:, :L] computed
 *                                  in f32, i.e. exactly the difference of the
 *                                  two stored arrays
 *                                  (ratio and log_ratio are NaN wherever either
 *                                  log-prob is NaN)
 *     pos_count               i64[L]  valid tokens at generated position t
 *     pos_mean_abs_log_ratio  f64[L]  mean |log r| at position t
 *     pos_max_abs_log_ratio   f64[L]  max |log r| at position t
 *     pos_ratio_std           f64[L]  std of r at position t
 *     seq_log_ratio_sum       f64[S]  S of each sequence (NaN: no valid token)
 *     seq_log_ratio_mean      f64[S]  M of each sequence
 *   with --distribution only (docs/statistics.md "Distribution"; results.h
 *   rc_dist_row: the two sides' whole next-token rows at each valid token):
 *     kl                      f64[S, L]  KL(sampler || trainer) (NaN where invalid)
 *     tv                      f64[S, L]  total variation
 *     top1_agree              i32[S, L]  1: the two argmax agree, 0: not, -1: invalid
 *     pos_kl_mean, pos_tv_mean, pos_top1_agree  f64[L]  their means per position
 *     attributes dist_count (i64), kl_mean, kl_std, kl_min, kl_max, tv_mean,
 *     tv_std, tv_min, tv_max, top1_agree (f64) over the valid tokens
 *   /len_%04d/strata/prob, /len_%04d/strata/entropy   (README "Strata": log r
 *   by decile of the token's sampler log-prob / of /rollouts/entropy over the
 *   valid tokens t < L; entropy is left out when the run has no entropy)
 *     attributes: count     i64     tokens binned
 *                 edges     f64[9]  edge_k = the sorted values' element
 *                                   floor(k n / 10), k = 1..9 (log-probs for
 *                                   prob, nats for entropy); a token is in
 *                                   decile #{k : edge_k <= its value}
 *     datasets, [10] each, decile 0 first (lowest p / entropy):
 *       count                   i64  tokens
 *       lo, hi                  f64  smallest / largest p (prob) or entropy in it
 *       mean_log_ratio, std_log_ratio   f64  of log r (population std)
 *       mean_abs_log_ratio, max_abs_log_ratio  f64
 *       clipfrac                f64  r outside [1 - clip_eps_low, 1 + clip_eps_high]
 *       k3                      f64  mean(r - 1 - log r)
 *       share_abs_log_ratio     f64  its sum of |log r| over all deciles' sum
 *       (NaN in an empty decile; count 0)
 *
 * /cross_length   (always present; the datasets have length 0 when fewer than
 *                  two lengths were scored)
 *   len_a, len_b, count   i64[n]  pair of lengths and the shared valid tokens
 *   max_abs, mean_abs     f64[n]  |logprob_forward(len_a) - logprob_forward(len_b)|
 *                                 over the positions t < min(len_a, len_b)
 *
 * /growth   (README "Growth"; recomputed by `report`; absent in older files)
 *   attributes: fit        str   "least squares of ln var(S) on ln L over the lengths"
 *               points     i64   lengths in the fit (var(S) finite and > 0)
 *               exponent   f64   a in var(S) = e^b L^a (NaN: no fit)
 *               log_coef   f64   b
 *               r2         f64   of the log-log fit (NaN with fewer than 3 points)
 *               looks_like str   "sqrt(L)" (a < 1.5: std(S) ~ L^0.5, independent
 *                                token errors), "L" (1.5 <= a <= 2.5: correlated),
 *                                "slower than sqrt(L)" (a < 0.5), "faster than L"
 *               cap        f64   seq_cap (the sequence IS cap on e^S)
 *               cap_length f64   L where sqrt(e^b L^a) = log(cap), extrapolated (NaN: n/a)
 *               reason     str   why a value is n/a, else ""
 *   datasets:   len                    i64[n]  every length, as /len_NNNN
 *               seq_log_ratio_sum_var  f64[n]  var(S) (population) at each
 *
 * /threeway  (`score` with trainer_logprobs and --model; attributes only,
 *            recomputed from the three /rollouts columns by `report`)
 *   len, ratiocheck (its trainer's spec), off ("sampler", "your_trainer",
 *   "both", "none"), summary (the line); per pair P in sampler_vs_your_trainer,
 *   sampler_vs_ratiocheck, your_trainer_vs_ratiocheck, d = b - a per token:
 *   P_count i64, P_mean, P_std, P_mean_abs, P_max_abs, P_k3 (mean e^d - 1 - d),
 *   P_mult_prob_err (mean e^|d|), P_identical_frac f64; with --reference:
 *   reference (its name), reference_count, and per column C in sampler,
 *   your_trainer, ratiocheck: C_ref_mean_abs, C_ref_max_abs f64 (|C - reference|)
 *
 * /verdict   (attributes only; recomputed from the tensors by `report`)
 *   token_ppo, sequence_is, gspo            str   "OK", "WARN" or "FAIL" (README
 *                                                 "Verdict": the rules)
 *   token_ppo_reason, sequence_is_reason,
 *   gspo_reason                             str   what decided it, with the numbers
 *   len                                     i64   the longest length (the worst
 *                                                 token and sequence are from it)
 *   worst_token_sequence, worst_token_position    i64   0-based; the token with the
 *                                                 largest |log r| (-1: none)
 *   worst_token_ratio                       f64   its ratio
 *   worst_sequence                          i64   the sequence with the largest |S|
 *   worst_sequence_ratio                    f64   its e^S
 *   gate                                    str   "PASS" or "FAIL" (only with
 *                                                 --fail-above or --fail-on)
 *   gate_rules                              str   the gate as given
 *   gate_failed                             str   what failed ("; "-separated), or ""
 *
 * /routing   (mixture-of-experts models: both sides' experts per generated
 *             token and MoE layer and the flip statistics; src/results/h5routing.c,
 *             docs/routing.md; the reader checks the experts and recomputes the
 *             statistics)
 *
 * /trace   (only in the output of `ratiocheck trace`: a copy of the run's file
 *           with this group added; README "Trace")
 *   attributes:
 *     sampler, trainer                      str   each side's settings as replayed
 *     len                                   i64   the traced length (the run's longest)
 *     layers                                i64   the model's layers N
 *     first_found                           i64   1 when the sides part anywhere, else 0
 *     first_layer                           i64   where they first part, in forward order:
 *                                                 -1 the embedding, 0..N-1 a layer, N the
 *                                                 final norm and logits (-2: none)
 *     first_op                              str   its op (a name of `ops`), "none"
 *     first_sequence, first_position,
 *     first_element                         i64   0-based: the run's sequence, the token
 *                                                 position (prompt included), the element of
 *                                                 the op's row (-1: none)
 *     first_sampler, first_trainer          f64   the two values there (NaN: none)
 *     first_ulp                             f64   their distance in ulps of the coarser dtype
 *     first_sampler_rows, first_trainer_rows i64  the rows of each side's call (the GEMM's M)
 *     replay_tokens                         i64   valid tokens of the traced sequences
 *     replay_equal_gen, replay_equal_fwd    i64   of them, how many replayed generation /
 *                                                 forward log-probs equal the file's bitwise
 *     flip_layer, flip_sequence, flip_position, flip_expert
 *                                           i64   MoE models: the first routing flip (layer,
 *                                                 then position, then expert; -1: none)
 *     flip_chosen_by                        str   "sampler" / "trainer": who chose that expert
 *   datasets (C = N + 2 layer slots, O = the ops; a cell of an op a slot does
 *   not have: count 0, NaN elsewhere):
 *     ops                   str[O]     op names in forward order: embed, norm1, qkv, rope,
 *                                      scores, probs, attn, o_proj, resid_attn, norm2, route
 *                                      (MoE layers: [0, E) 1 for a chosen expert, [E, 2E) its
 *                                      weight), up, gate, act, down, resid, norm_f, logits
 *     layer                 i64[C]     -1, 0, ..., N-1, N
 *     count                 i64[C, O]  elements compared (every position both sides computed)
 *     equal_frac            f64[C, O]  bitwise-equal fraction
 *     max_abs               f64[C, O]  max |sampler - trainer|
 *     rel_l2                f64[C, O]  ||sampler - trainer||_2 / ||trainer||_2
 *     max_ulp               f64[C, O]  max |s - t| / ulp(max(|s|, |t|)), in the coarser
 *                                      side's dtype of the op
 *     sequences             i64[K]     the traced sequences (run indices)
 *     seq_first_layer, seq_first_op, seq_first_position, seq_first_element
 *                           i64[K]     each one's first divergence (-2 / -1: none; op: an
 *                                      index into ops)
 *     logprob_gen, logprob_forward  f32[K, len]  the replayed log-probs (NaN after the end)
 *
 * Storage: 2-D datasets are chunked (about 64 Ki elements per chunk, whole
 * rows) with shuffle + deflate level 4 when the library has zlib, and carry a
 * fill value (-1 for token ids, NaN for floats). 1-D datasets are contiguous.
 * No object time stamps are stored, so writing the same results twice gives
 * byte-identical files.
 *
 * Writing is atomic: everything goes to "<dir>/.<name>.tmp.<pid>" in the
 * output's folder, which is closed, fsync'ed and renamed over the output path,
 * and the folder is then fsync'ed. Readers never see a half-written file; on
 * any failure the temporary file is removed and nothing is left at the output
 * path. rc_h5_temp_path() names the temporary file while it exists, so that a
 * SIGINT/SIGTERM handler can unlink() it.
 *
 * Reading it in Python:
 *     import h5py, numpy as np
 *     f = h5py.File("out.h5", "r")
 *     f.attrs["model_type"], f.attrs["lengths"]
 *     g = f["len_0020"]; r = g["ratio"][...]          # NaN-padded
 *     np.nanmax(np.abs(g["log_ratio"][...])), g.attrs["clipfrac"]
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5w.h"
#include "results.h"
#include "status.h"
#include "trace_out.h"
#include "util.h"


#define CHUNK_TARGET_ELEMS ((hsize_t)65536)   /* ~256 KiB of f32 / i32 */
#define CHUNK_MAX_COLS ((hsize_t)262144)      /* 1 MiB of f32 per row chunk */
#define DEFLATE_LEVEL 4u

static pthread_once_t g_h5_once = PTHREAD_ONCE_INIT;
pthread_mutex_t g_write_lock = PTHREAD_MUTEX_INITIALIZER; /* one writer at a time (h5stream.c too) */
static char g_tmp_buf[TMP_PATH_MAX];
static _Atomic(const char *) g_tmp_active; /* NULL or g_tmp_buf */

const char *rc_h5_temp_path(void) { return atomic_load(&g_tmp_active); }

static void h5_init_once(void)
{
    /* Must come before any other HDF5 call; it fails harmlessly if someone
     * else already called it, so its result is ignored. */
    (void)H5dont_atexit();
}

/* ------------------------------------------------------------------------ */
/* error reporting                                                          */


typedef struct {
    char text[200];
    bool got;
    int sys_errno; /* the operating system's error behind a failed read/write, or 0 */
} h5_reason;

/* HDF5's file drivers put the system error in the description:
 * "... errno = 28, error message = 'No space left on device', ..." */
static int errno_in(const char *desc)
{
    const char *e = strstr(desc, "errno = ");
    if (!e)
        return 0;
    char *end;
    long v = strtol(e + 8, &end, 10);
    return end != e + 8 && v > 0 && v < 4096 ? (int)v : 0;
}

static herr_t reason_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    (void)n;
    h5_reason *r = data;
    if (e && e->desc && !r->sys_errno)
        r->sys_errno = errno_in(e->desc);
    if (!r->got && e && e->desc && e->desc[0]) {
        /* one line; cut at a word boundary, never mid-word */
        const char *d = e->desc;
        size_t len = strlen(d), cap = sizeof r->text - 4;
        if (len > cap) {
            len = cap;
            while (len > 0 && d[len] != ' ')
                len--;
            if (len == 0)
                len = cap;
        }
        memcpy(r->text, d, len);
        r->text[len] = '\0';
        if (len < strlen(d))
            strcat(r->text, "...");
        for (char *p = r->text; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = ' ';
        r->got = true;
    }
    return 0;
}

/* "PATH: cannot VERB WHAT: <system error>" when the system said why (disk
 * full, file too large, I/O error), else "PATH: cannot VERB WHAT (HDF5:
 * innermost error description)". */
rc_status h5_fail(const h5w *w, const char *verb, const char *what)
{
    h5_reason r = {.got = false, .sys_errno = 0};
    r.text[0] = '\0';
    (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, reason_cb, &r);
    if (r.sys_errno)
        return rc_errorf(RC_ERR_IO, "%s: cannot %s %s: %s", w->path, verb, what, strerror(r.sys_errno));
    if (r.got)
        return rc_errorf(RC_ERR_IO, "%s: cannot %s %s (HDF5: %s)", w->path, verb, what, r.text);
    return rc_errorf(RC_ERR_IO, "%s: cannot %s %s", w->path, verb, what);
}

/* Name of attribute `name` on object `obj` for messages. */
static const char *attr_what(char *buf, size_t n, const char *obj, const char *name)
{
    snprintf(buf, n, "attribute '%s' of %s", name, obj);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */

static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = rc_utf8_seq_len(p);
        if (n == 0)
            return false;
        p += n;
    }
    return true;
}

/* Copy of s with every byte that does not start a well-formed sequence
 * replaced by U+FFFD. NULL on OOM. */
static char *utf8_sanitize(const char *s)
{
    size_t len = strlen(s);
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(3 * len + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p) {
        int n = rc_utf8_seq_len(p);
        if (n == 0) {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            p++;
        } else {
            memcpy(out + o, p, (size_t)n);
            o += (size_t)n;
            p += n;
        }
    }
    out[o] = '\0';
    return out;
}

/* ------------------------------------------------------------------------ */
/* attributes                                                               */

rc_status attr_str(const h5w *w, hid_t loc, const char *obj, const char *name,
                          const char *value)
{
    char wbuf[256];
    char *fixed = NULL;
    const char *v = value ? value : "";
    if (!utf8_valid(v)) {
        fixed = utf8_sanitize(v);
        if (!fixed)
            return rc_errorf(RC_ERR_NOMEM, "%s: cannot allocate %s", w->path,
                             attr_what(wbuf, sizeof wbuf, obj, name));
        v = fixed;
    }
    rc_status st = RC_OK;
    hid_t type = -1, space = -1, attr = -1;
    if ((type = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(type, H5T_VARIABLE) < 0 ||
        H5Tset_cset(type, H5T_CSET_UTF8) < 0 || (space = H5Screate(H5S_SCALAR)) < 0 ||
        (attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        H5Awrite(attr, type, &v) < 0)
        st = h5_fail(w, "write", attr_what(wbuf, sizeof wbuf, obj, name));
    if (attr >= 0 && H5Aclose(attr) < 0 && st == RC_OK)
        st = h5_fail(w, "close", attr_what(wbuf, sizeof wbuf, obj, name));
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    free(fixed);
    return st;
}

/* the HDF5 type of variable-length UTF-8 strings, or -1 */
hid_t utf8_vlen_type(void)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type >= 0 && (H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0)) {
        H5Tclose(type);
        type = -1;
    }
    return type;
}

/* The n strings to write (NULL entries as "", invalid UTF-8 replaced by a
 * sanitized copy in *fixed_out); strs NULL: n NULL pointers. what names the
 * data in an allocation error. Free with utf8_rows_free, also on error. */
rc_status utf8_rows(const h5w *w, const char *what, char *const *strs, int64_t n, const char ***v_out,
                           char ***fixed_out)
{
    const char **v = *v_out = calloc((size_t)n + 1, sizeof *v);
    char **fixed = *fixed_out = calloc((size_t)n + 1, sizeof *fixed);
    if (!v || !fixed)
        return rc_errorf(RC_ERR_NOMEM, "%s: cannot allocate %s", w->path, what);
    for (int64_t i = 0; strs && i < n; i++) {
        v[i] = strs[i] ? strs[i] : "";
        if (!utf8_valid(v[i])) {
            if (!(fixed[i] = utf8_sanitize(v[i])))
                return rc_errorf(RC_ERR_NOMEM, "%s: cannot allocate %s", w->path, what);
            v[i] = fixed[i];
        }
    }
    return RC_OK;
}

void utf8_rows_free(const char **v, char **fixed, int64_t n)
{
    for (int64_t i = 0; fixed && i < n; i++)
        free(fixed[i]);
    free(fixed);
    free(v);
}

/* 1-D dataset of variable-length UTF-8 strings (NULL entries become "") */
rc_status ds_str_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n,
                           char *const *strs)
{
    char wbuf[320];
    snprintf(wbuf, sizeof wbuf, "dataset %s/%s", obj, name);
    const char **v = NULL;
    char **fixed = NULL;
    rc_status st = utf8_rows(w, wbuf, strs, n, &v, &fixed);
    hid_t type = -1, space = -1, ds = -1, dcpl = -1;
    hsize_t dims[1] = {(hsize_t)n};
    if (st == RC_OK &&
        ((type = utf8_vlen_type()) < 0 || (space = H5Screate_simple(1, dims, NULL)) < 0 ||
         (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 || H5Pset_obj_track_times(dcpl, 0) < 0 ||
         (ds = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0 ||
         (n > 0 && strs && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)))
        st = h5_fail(w, "write", wbuf);
    if (ds >= 0 && H5Dclose(ds) < 0 && st == RC_OK)
        st = h5_fail(w, "close", wbuf);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    utf8_rows_free(v, fixed, n);
    return st;
}

/* Numeric attribute: scalar when n < 0, else a 1-D array of n elements. */
rc_status attr_num(const h5w *w, hid_t loc, const char *obj, const char *name,
                          hid_t ftype, hid_t mtype, int64_t n, const void *data)
{
    char wbuf[256];
    rc_status st = RC_OK;
    hid_t space = -1, attr = -1;
    hsize_t dim = n < 0 ? 0 : (hsize_t)n;
    space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    if (space < 0 || (attr = H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        (n != 0 && H5Awrite(attr, mtype, data) < 0))
        st = h5_fail(w, "write", attr_what(wbuf, sizeof wbuf, obj, name));
    if (attr >= 0 && H5Aclose(attr) < 0 && st == RC_OK)
        st = h5_fail(w, "close", attr_what(wbuf, sizeof wbuf, obj, name));
    if (space >= 0)
        H5Sclose(space);
    return st;
}

rc_status attr_i64(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t v)
{
    return attr_num(w, loc, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, -1, &v);
}

rc_status attr_f64(const h5w *w, hid_t loc, const char *obj, const char *name, double v)
{
    return attr_num(w, loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, -1, &v);
}

/* ------------------------------------------------------------------------ */
/* groups and datasets                                                      */

/* Create group `name` (an absolute path) with creation order tracked. */
rc_status group_create(const h5w *w, const char *name, hid_t *out)
{
    char wbuf[256];
    *out = -1;
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    hid_t g = -1;
    if (gcpl < 0 ||
        H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
        H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
        H5Pset_obj_track_times(gcpl, 0) < 0 ||
        (g = H5Gcreate2(w->file, name, H5P_DEFAULT, gcpl, H5P_DEFAULT)) < 0) {
        snprintf(wbuf, sizeof wbuf, "group %s", name);
        rc_status st = h5_fail(w, "create", wbuf);
        if (gcpl >= 0)
            H5Pclose(gcpl);
        return st;
    }
    H5Pclose(gcpl);
    *out = g;
    return RC_OK;
}

/* Close group g; keeps the first error. */
rc_status group_close(const h5w *w, hid_t g, const char *name, rc_status st)
{
    char wbuf[256];
    if (g >= 0 && H5Gclose(g) < 0 && st == RC_OK) {
        snprintf(wbuf, sizeof wbuf, "group %s", name);
        st = h5_fail(w, "close", wbuf);
    }
    return st;
}

/* Create dataset `name` in group `loc` (whose path is `obj`) and write all of
 * `data` (in memory type mtype). 2-D datasets with elements are chunked and
 * compressed; `fill` (in mtype, or NULL) becomes the fill value. */
rc_status ds_write(const h5w *w, hid_t loc, const char *obj, const char *name,
                          hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                          const void *data, const void *fill)
{
    char wbuf[320];
    snprintf(wbuf, sizeof wbuf, "dataset %s%s%s", obj, strcmp(obj, "/") == 0 ? "" : "/", name);
    hsize_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];

    rc_status st = RC_OK;
    hid_t dcpl = -1, space = -1, ds = -1;
    const char *verb = "create";
    if ((dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 || H5Pset_obj_track_times(dcpl, 0) < 0)
        goto h5err;
    if (rank == 2 && n > 0) {
        hsize_t chunk[2];
        chunk[1] = dims[1] < CHUNK_MAX_COLS ? dims[1] : CHUNK_MAX_COLS;
        chunk[0] = CHUNK_TARGET_ELEMS / chunk[1];
        if (chunk[0] < 1)
            chunk[0] = 1;
        if (chunk[0] > dims[0])
            chunk[0] = dims[0];
        if (H5Pset_chunk(dcpl, 2, chunk) < 0)
            goto h5err;
        if (w->deflate && (H5Pset_shuffle(dcpl) < 0 || H5Pset_deflate(dcpl, DEFLATE_LEVEL) < 0))
            goto h5err;
    }
    if (fill && H5Pset_fill_value(dcpl, mtype, fill) < 0)
        goto h5err;
    if ((space = H5Screate_simple(rank, dims, NULL)) < 0 ||
        (ds = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
        goto h5err;
    verb = "write";
    if (n > 0 && data && H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        goto h5err;
    verb = "close";
    if (H5Dclose(ds) < 0) {
        ds = -1;
        goto h5err;
    }
    ds = -1;
    goto done;
h5err:
    st = h5_fail(w, verb, wbuf);
done:
    if (ds >= 0)
        H5Dclose(ds);
    if (space >= 0)
        H5Sclose(space);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return st;
}

static const int32_t k_fill_i32 = -1;

rc_status ds_i32_2d(const h5w *w, hid_t loc, const char *obj, const char *name,
                           int64_t rows, int64_t cols, const int32_t *data)
{
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    return ds_write(w, loc, obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, 2, dims, data, &k_fill_i32);
}

rc_status ds_f32_2d(const h5w *w, hid_t loc, const char *obj, const char *name,
                           int64_t rows, int64_t cols, const float *data)
{
    const float nan_fill = NAN;
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    return ds_write(w, loc, obj, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims, data, &nan_fill);
}

rc_status ds_f64_2d(const h5w *w, hid_t loc, const char *obj, const char *name,
                           int64_t rows, int64_t cols, const double *data)
{
    const double nan_fill = NAN;
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    return ds_write(w, loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, dims, data, &nan_fill);
}

rc_status ds_i32_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n,
                           const int32_t *data)
{
    hsize_t dims[1] = {(hsize_t)n};
    return ds_write(w, loc, obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, 1, dims, data, NULL);
}

rc_status ds_i64_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n,
                           const int64_t *data)
{
    hsize_t dims[1] = {(hsize_t)n};
    return ds_write(w, loc, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 1, dims, data, NULL);
}

rc_status ds_f64_1d(const h5w *w, hid_t loc, const char *obj, const char *name, int64_t n,
                           const double *data)
{
    hsize_t dims[1] = {(hsize_t)n};
    return ds_write(w, loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, dims, data, NULL);
}

/* ------------------------------------------------------------------------ */
/* validation (before anything is created)                                  */

#define BAD(...) rc_errorf(RC_ERR_INTERNAL, __VA_ARGS__)

static bool terminated(const char *s, size_t n) { return memchr(s, '\0', n) != NULL; }

static rc_status validate(const rc_results *r, const char *path)
{
    const char *p = path;
#define FIXED_STR(f)                                                                     \
    if (!terminated(r->f, sizeof r->f))                                                  \
        return BAD("%s: invalid results: string field " #f " is not NUL-terminated", p);
    FIXED_STR(version)
    FIXED_STR(model_type)
    FIXED_STR(dtype)
    FIXED_STR(kernels)
    FIXED_STR(upcast)
    FIXED_STR(logprob_dtype)
    FIXED_STR(reference)
    FIXED_STR(backend)
    FIXED_STR(device)
    FIXED_STR(created)
#undef FIXED_STR

    if (r->n_prompts < 0 || r->prompt_max < 0 || r->n_seq < 0 || r->gen_len < 0 ||
        r->n_lens < 0 || r->n_cross < 0)
        return BAD("%s: invalid results: negative size (n_prompts %lld, prompt_max %lld, "
                   "n_seq %lld, gen_len %lld, n_lens %d, n_cross %d)",
                   p, (long long)r->n_prompts, (long long)r->prompt_max, (long long)r->n_seq,
                   (long long)r->gen_len, r->n_lens, r->n_cross);
    int64_t n_pt, n_gen;
    if (!rc_mul_i64(r->n_prompts, r->prompt_max, &n_pt) || n_pt > RC_MAX_ALLOC / 4 ||
        !rc_mul_i64(r->n_seq, r->gen_len, &n_gen) || n_gen > RC_MAX_ALLOC / 4)
        return BAD("%s: invalid results: array sizes overflow", p);
    if (r->n_prompts > INT32_MAX || r->n_seq > INT32_MAX)
        return BAD("%s: invalid results: too many prompts or sequences", p);

#define NEED(ptr, cond)                                                                  \
    if ((cond) && !(ptr))                                                                \
        return BAD("%s: invalid results: " #ptr " is NULL", p);
    NEED(r->prompt_tokens, n_pt > 0)
    NEED(r->prompt_len, r->n_prompts > 0)
    NEED(r->seq_prompt, r->n_seq > 0)
    NEED(r->seq_sample, r->n_seq > 0)
    NEED(r->gen_valid, r->n_seq > 0)
    NEED(r->gen_tokens, n_gen > 0)
    NEED(r->logprob_gen, n_gen > 0)
    NEED(r->logprob_gen_processed, n_gen > 0)
    NEED(r->lens, r->n_lens > 0)
    NEED(r->cross, r->n_cross > 0)

    for (int64_t i = 0; i < r->n_prompts; i++)
        if (r->prompt_len[i] < 0 || r->prompt_len[i] > r->prompt_max)
            return BAD("%s: invalid results: prompt_len[%lld] = %d is outside 0..%lld", p,
                       (long long)i, (int)r->prompt_len[i], (long long)r->prompt_max);
    for (int64_t s = 0; s < r->n_seq; s++) {
        if (r->seq_prompt[s] < 0 || r->seq_prompt[s] >= r->n_prompts)
            return BAD("%s: invalid results: seq_prompt[%lld] = %d is not a prompt index (%lld "
                       "prompts)",
                       p, (long long)s, (int)r->seq_prompt[s], (long long)r->n_prompts);
        if (r->seq_sample[s] < 0)
            return BAD("%s: invalid results: seq_sample[%lld] = %d is negative", p, (long long)s,
                       (int)r->seq_sample[s]);
        if (r->gen_valid[s] < 0 || r->gen_valid[s] > r->gen_len)
            return BAD("%s: invalid results: gen_valid[%lld] = %d is outside 0..gen_len (%lld)",
                       p, (long long)s, (int)r->gen_valid[s], (long long)r->gen_len);
    }
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_result *lr = &r->lens[i];
        if (lr->len < 1 || lr->len > r->gen_len)
            return BAD("%s: invalid results: lens[%d].len = %lld is outside 1..gen_len (%lld)", p,
                       i, (long long)lr->len, (long long)r->gen_len);
        for (int j = 0; j < i; j++)
            if (r->lens[j].len == lr->len)
                return BAD("%s: invalid results: length %lld appears twice (lens[%d], lens[%d])",
                           p, (long long)lr->len, j, i);
        if ((r->n_seq > 0 && !lr->logprob_fwd) || !lr->pos_count ||
            !lr->pos_mean_abs_log_ratio || !lr->pos_max_abs_log_ratio || !lr->pos_ratio_std ||
            (r->n_seq > 0 && (!lr->seq_log_ratio_sum || !lr->seq_log_ratio_mean)))
            return BAD("%s: invalid results: lens[%d] (L = %lld) has a NULL array", p, i,
                       (long long)lr->len);
    }
#undef NEED
    return RC_OK;
}

/* ------------------------------------------------------------------------ */
/* atomic write                                                             */

static rc_status fsync_path(const char *what_path, const char *path, bool dir)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
    if (fd < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot open %s to sync it: %s", what_path, path,
                         strerror(errno));
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        /* Some file systems cannot sync a directory; that is not a failure. */
        if (dir && (e == EINVAL || e == ENOTSUP || e == EOPNOTSUPP))
            return RC_OK;
        return rc_errorf(RC_ERR_IO, "%s: cannot sync %s: %s", what_path, path, strerror(e));
    }
    if (close(fd) != 0 && !dir)
        return rc_errorf(RC_ERR_IO, "%s: cannot close %s: %s", what_path, path, strerror(errno));
    return RC_OK;
}

/* The temporary file next to path, created (O_EXCL) and opened as w->file;
 * dir gets path's folder. */
rc_status temp_open(h5w *w, const char *path, bool force, char *dir, size_t dn)
{
    RC_TRY(check_target(path, force, dir, dn));
    RC_TRY(temp_name(path, (long)getpid(), g_tmp_buf, sizeof g_tmp_buf));
    const char *tmp = g_tmp_buf;

    /* Create the temporary file ourselves: O_EXCL (never follow or clobber
     * anything), and a plain errno message when the folder is missing. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot create temporary file %s: %s", path, tmp,
                         strerror(errno));
    atomic_store(&g_tmp_active, g_tmp_buf);
    close(fd);

    *w = (h5w){.path = path, .file = -1, .deflate = false};
    rc_status st = RC_OK;
    hid_t fcpl = -1, fapl = -1;
    pthread_once(&g_h5_once, h5_init_once);
    /* The error printer setting is per thread in a thread-safe HDF5. */
    if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) {
        st = rc_errorf(RC_ERR_IO, "%s: cannot initialise the HDF5 library", path);
        goto fail;
    }
    htri_t avail = H5Zfilter_avail(H5Z_FILTER_DEFLATE);
    w->deflate = avail > 0;

    if ((fcpl = H5Pcreate(H5P_FILE_CREATE)) < 0 ||
        H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
        H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
        H5Pset_obj_track_times(fcpl, 0) < 0 || /* root group: no time stamps */
        (fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        /* a private temporary file needs no lock (and NFS may not have one) */
        H5Pset_file_locking(fapl, 0, 1) < 0) {
        st = h5_fail(w, "set up", "the file properties");
        goto fail;
    }
    char what[TMP_PATH_MAX + 32];
    snprintf(what, sizeof what, "temporary file %s", tmp);
    if ((w->file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl)) < 0) {
        st = h5_fail(w, "create", what);
        goto fail;
    }
    H5Pclose(fcpl);
    H5Pclose(fapl);
    return RC_OK;

fail:
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (fapl >= 0)
        H5Pclose(fapl);
    unlink(tmp);
    atomic_store(&g_tmp_active, NULL);
    return st;
}

/* an error after temp_open: the temporary file goes */
void temp_discard(h5w *w)
{
    if (w->file >= 0)
        H5Fclose(w->file); /* H5F_CLOSE_STRONG: also closes anything left open */
    w->file = -1;
    unlink(g_tmp_buf);
    atomic_store(&g_tmp_active, NULL);
}

/* close the temporary file, sync it and rename it to path (discarded on error) */
rc_status temp_commit(h5w *w, const char *path, const char *dir)
{
    const char *tmp = g_tmp_buf;
    char what[TMP_PATH_MAX + 32];
    snprintf(what, sizeof what, "temporary file %s", tmp);
    hid_t file = w->file;
    w->file = -1;
    rc_status st = RC_OK;
    if (H5Fclose(file) < 0)
        st = h5_fail(w, "close", what);
    if (st == RC_OK)
        st = fsync_path(path, tmp, false);
    if (st == RC_OK && rename(tmp, path) != 0)
        st = rc_errorf(RC_ERR_IO, "%s: cannot rename %s to the output path: %s", path, tmp, strerror(errno));
    if (st != RC_OK) {
        temp_discard(w);
        return st;
    }
    atomic_store(&g_tmp_active, NULL);
    st = fsync_path(path, dir, true);
    if (st != RC_OK) {
        /* The contract is "error => no output"; honour it. */
        unlink(path);
        return st;
    }
    return RC_OK;
}

static rc_status write_locked(const rc_results *r, const char *path, bool force)
{
    RC_TRY(validate(r, path));
    char dir[TMP_PATH_MAX];
    h5w w;
    RC_TRY(temp_open(&w, path, force, dir, sizeof dir));
    rc_status st = write_all(&w, r);
    if (st != RC_OK) {
        temp_discard(&w);
        return st;
    }
    return temp_commit(&w, path, dir);
}

rc_status rc_h5_write(const rc_results *r, const char *path, bool force)
{
    if (!r || !path)
        return rc_errorf(RC_ERR_INTERNAL, "rc_h5_write: %s is NULL", r ? "path" : "results");
    if (!path[0])
        return rc_errorf(RC_ERR_USAGE, "the output path is empty");
    pthread_mutex_lock(&g_write_lock);
    rc_status st = write_locked(r, path, force);
    pthread_mutex_unlock(&g_write_lock);
    return st;
}
