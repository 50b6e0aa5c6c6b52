/* The ratio check end to end on the bundled (trained) default model:
 * kernel strategies, dtypes, sampling options, reference pass. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "prompts.h"
#include "results.h"
#include "advice.h"
#include "rollout.h"
#include "sampler.h"
#include "strata_refs.h"

#include "testutil.h"
#include "bundled.h"


static rc_rollout_cfg base_cfg(rc_dtype dt)
{
    rc_rollout_cfg c;
    memset(&c, 0, sizeof c);
    c.n_prompts = g_prompts.n < 8 ? g_prompts.n : 8;
    c.prompt_max = g_prompts.max_len;
    c.prompt_tokens = g_prompts.tokens;
    c.prompt_len = g_prompts.len;
    c.samples = 2;
    c.batch = 16;
    c.n_lens = 3;
    c.lens[0] = 8;
    c.lens[1] = 16;
    c.lens[2] = 24;
    c.seed = 7;
    c.sampling.top_k = 0;
    c.sampling.top_p = 1.0;
    c.num = rc_numerics_fp32();
    c.num.dt = dt;
    return c;
}

static void run(rc_kernels k, const rc_rollout_cfg *cfg, rc_results *r)
{
    rc_backend *be, *ref = NULL;
    ck_assert(rc_backend_cpu_create(0, k, &be) == RC_OK);
    if (cfg->reference == 32)
        ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &ref) == RC_OK);
    memset(r, 0, sizeof *r);
    rc_status s = rc_run_check(g_model, be, ref, cfg, NULL, NULL, NULL, r);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    rc_backend_destroy(be);
    rc_backend_destroy(ref);
}

static const char *dt_name(rc_dtype dt) { return dt == RC_F32 ? "fp32" : dt == RC_BF16 ? "bf16" : "fp16"; }

/* --kernels invariant: ratios exactly 1 and every log-prob bitwise equal, in
 * every dtype, for every length (and the same token re-scored at different
 * lengths has the same bits). */
START_TEST(test_invariant_bitwise)
{
    const rc_dtype dts[] = {RC_BF16, RC_F16, RC_F32};
    rc_dtype dt = dts[_i];
    rc_rollout_cfg cfg = base_cfg(dt);
    rc_results r;
    run(RC_KERNELS_INVARIANT, &cfg, &r);
    for (int i = 0; i < r.n_lens; i++) {
        const rc_len_result *L = &r.lens[i];
        int64_t n = 0;
        for (int64_t s = 0; s < r.n_seq; s++)
            for (int64_t t = 0; t < L->len; t++, n++) {
                float f = L->logprob_fwd[s * L->len + t], g = r.logprob_gen[s * r.gen_len + t];
                ck_assert_msg(memcmp(&f, &g, sizeof f) == 0, "%s L=%lld seq %lld pos %lld: %a vs %a", dt_name(dt),
                              (long long)L->len, (long long)s, (long long)t, f, g);
            }
        ck_assert_int_eq(L->st.count, n);
        ck_assert(L->st.mean == 1.0 && L->st.std == 0.0 && L->st.min == 1.0 && L->st.max == 1.0);
        ck_assert(L->st.identical_frac == 1.0);
        ck_assert_int_eq(L->st.first_divergent_position, -1);
        ck_assert(L->st.frac_above[3] == 0.0 && L->st.k3 == 0.0);
    }
    for (int i = 0; i < r.n_cross; i++)
        ck_assert(r.cross[i].max_abs == 0.0);
    printf("invariant %s: %lld tokens per length, ratio exactly 1\n", dt_name(dt), (long long)r.lens[0].st.count);
    rc_results_free(&r);
}
END_TEST

/* The fp32 bound on a log-prob difference, tests/test_forward.c's: the
 * engine's cached decode against its own full forward, and each against HF's
 * fp64 forward, within 1e-5 over the fixtures' whole vocabularies. A ratio's
 * log is exactly such a difference (the sampler's cached decode against the
 * trainer's full forward), so max |log r| <= 1e-5, i.e. max |ratio - 1| <=
 * expm1(1e-5); and each path against the fp64 reference pass <= 1e-5. */
#define RC_FP32_LOGPROB_BOUND 1e-5

/* --kernels engine: fp32 max |ratio - 1| <= expm1(1e-5) (above), and the
 * drift grows as the dtype's mantissa shrinks: std(bf16) > std(fp16) >
 * std(fp32). */
START_TEST(test_engine_drift_order)
{
    double sd[3][3];
    const rc_dtype dts[] = {RC_F32, RC_F16, RC_BF16};
    for (int d = 0; d < 3; d++) {
        rc_rollout_cfg cfg = base_cfg(dts[d]);
        cfg.n_prompts = g_prompts.n; /* the whole default prompt set */
        rc_results r;
        run(RC_KERNELS_ENGINE, &cfg, &r);
        for (int i = 0; i < r.n_lens; i++) {
            const rc_len_stats *st = &r.lens[i].st;
            sd[d][i] = st->std;
            printf("engine %s L=%lld: mean %.6f std %.3e min %.5f max %.5f identical %.3f\n", dt_name(dts[d]),
                   (long long)r.lens[i].len, st->mean, st->std, st->min, st->max, st->identical_frac);
            if (dts[d] == RC_F32) {
                const double dev = fmax(fabs(st->max - 1.0), fabs(st->min - 1.0));
                const double bound = expm1(RC_FP32_LOGPROB_BOUND);
                printf("engine fp32 L=%lld: max |ratio - 1| measured max %.3g bound %.3g (test_forward's 1e-5 "
                       "on a log-prob difference)\n", (long long)r.lens[i].len, dev, bound);
                fflush(stdout);
                ck_assert_msg(dev <= bound, "fp32 max |ratio - 1| = %g > %g", dev, bound);
            }
        }
        rc_results_free(&r);
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(sd[2][i] > sd[1][i], "L index %d: bf16 std %g <= fp16 std %g", i, sd[2][i], sd[1][i]);
        ck_assert_msg(sd[1][i] > sd[0][i], "L index %d: fp16 std %g <= fp32 std %g", i, sd[1][i], sd[0][i]);
    }
}
END_TEST

/* The fp32 reference pass with invariant kernels equals an invariant fp32
 * run's own log-probs; in bf16 both paths sit far from it. */
START_TEST(test_reference)
{
    rc_rollout_cfg cfg = base_cfg(RC_F32);
    cfg.reference = 32;
    rc_results r;
    run(RC_KERNELS_INVARIANT, &cfg, &r);
    for (int i = 0; i < r.n_lens; i++) {
        ck_assert(r.lens[i].st.ref_gen_max_abs == 0.0);
        ck_assert(r.lens[i].st.ref_fwd_max_abs == 0.0);
    }
    rc_results_free(&r);
    cfg = base_cfg(RC_BF16);
    cfg.reference = 32;
    run(RC_KERNELS_ENGINE, &cfg, &r);
    for (int i = 0; i < r.n_lens; i++) {
        const rc_len_stats *st = &r.lens[i].st;
        printf("bf16 vs fp32 reference L=%lld: generation %.3e, forward %.3e (mean |diff|)\n",
               (long long)r.lens[i].len, st->ref_gen_mean_abs, st->ref_fwd_mean_abs);
        ck_assert(st->ref_gen_mean_abs > 0.0 && st->ref_fwd_mean_abs > 0.0);
        ck_assert(isfinite(st->ref_gen_max_abs) && isfinite(st->ref_fwd_max_abs));
    }
    rc_results_free(&r);
    /* float64 reference: the fp32 paths sit within fp32 noise of it, the
     * bf16 paths far outside */
    double fp32_err = 0;
    for (int pass = 0; pass < 2; pass++) {
        cfg = base_cfg(pass == 0 ? RC_F32 : RC_BF16);
        cfg.reference = 64;
        run(RC_KERNELS_ENGINE, &cfg, &r);
        for (int i = 0; i < r.n_lens; i++) {
            const rc_len_stats *st = &r.lens[i].st;
            printf("%s vs fp64 reference L=%lld: generation %.3e / max %.3e, forward %.3e / max %.3e\n",
                   pass == 0 ? "fp32" : "bf16", (long long)r.lens[i].len, st->ref_gen_mean_abs,
                   st->ref_gen_max_abs, st->ref_fwd_mean_abs, st->ref_fwd_max_abs);
            if (pass == 0) {
                printf("fp32 vs fp64 reference L=%lld: measured max %.3g bound %.3g (test_forward's fp32 vs "
                       "fp64)\n", (long long)r.lens[i].len, fmax(st->ref_gen_max_abs, st->ref_fwd_max_abs),
                       RC_FP32_LOGPROB_BOUND);
                fflush(stdout);
                ck_assert_msg(st->ref_gen_max_abs <= RC_FP32_LOGPROB_BOUND &&
                              st->ref_fwd_max_abs <= RC_FP32_LOGPROB_BOUND, "fp32 vs fp64: generation %g, forward %g",
                              st->ref_gen_max_abs, st->ref_fwd_max_abs);
                fp32_err = fmax(fp32_err, st->ref_fwd_mean_abs);
            } else {
                ck_assert(st->ref_fwd_mean_abs > 10 * fp32_err);
            }
        }
        rc_results_free(&r);
    }
}
END_TEST

/* Sampling: seeded and independent of the decode batch size; top-k / top-p
 * processed log-probs are the renormalised ones. */
START_TEST(test_sampling)
{
    rc_rollout_cfg cfg = base_cfg(RC_F32);
    rc_results a, b;
    run(RC_KERNELS_INVARIANT, &cfg, &a);
    cfg.batch = 3;
    run(RC_KERNELS_INVARIANT, &cfg, &b);
    ck_assert_mem_eq(a.gen_tokens, b.gen_tokens, sizeof(int32_t) * (size_t)(a.n_seq * a.gen_len));
    ck_assert_mem_eq(a.logprob_gen, b.logprob_gen, sizeof(float) * (size_t)(a.n_seq * a.gen_len));
    /* without filtering the processed log-prob is the raw one (to rounding) */
    for (int64_t i = 0; i < a.n_seq * a.gen_len; i++)
        ck_assert(fabs((double)a.logprob_gen_processed[i] - a.logprob_gen[i]) < 1e-5);
    rc_results_free(&a);
    rc_results_free(&b);
    cfg = base_cfg(RC_F32);
    cfg.sampling.top_k = 1; /* greedy: processed log-prob 0, token = argmax */
    run(RC_KERNELS_INVARIANT, &cfg, &a);
    for (int64_t i = 0; i < a.n_seq * a.gen_len; i++)
        ck_assert(a.logprob_gen_processed[i] == 0.0f);
    /* the two samples of a prompt are then identical */
    for (int64_t s = 0; s + 1 < a.n_seq; s += 2)
        ck_assert_mem_eq(a.gen_tokens + s * a.gen_len, a.gen_tokens + (s + 1) * a.gen_len,
                         sizeof(int32_t) * (size_t)a.gen_len);
    rc_results_free(&a);
    cfg = base_cfg(RC_F32);
    cfg.sampling.top_p = 0.5;
    cfg.sampling.top_k = 50;
    run(RC_KERNELS_INVARIANT, &cfg, &a);
    for (int64_t i = 0; i < a.n_seq * a.gen_len; i++)
        ck_assert(a.logprob_gen_processed[i] >= a.logprob_gen[i] && a.logprob_gen_processed[i] <= 0.0f);
    /* the trainer-side truncation (score, processed log-probs with top-k /
     * top-p): these rollouts' processed log-probs as the logged ones, the
     * trainer's full forward with invariant kernels (bitwise the cached
     * decode's log-probs) renormalised by the sampler's own mask: every value
     * bitwise the sampler's, no token outside the kept set */
    rc_rollout_cfg g = cfg;
    g.forced_tokens = a.gen_tokens;
    g.forced_valid = a.gen_valid;
    g.forced_len = a.gen_len;
    g.given_logprobs = a.logprob_gen_processed;
    g.num_trainer = g.num;
    g.trainer_truncates = true;
    g.n_lens = 1;
    g.lens[0] = a.gen_len;
    run(RC_KERNELS_INVARIANT, &g, &b);
    ck_assert_int_eq(b.trainer_outside_kept, 0);
    ck_assert_mem_eq(b.lens[0].logprob_fwd, a.logprob_gen_processed, sizeof(float) * (size_t)(a.n_seq * a.gen_len));
    rc_results_free(&b);
    /* a tighter top-p on the trainer's side: some logged tokens fall outside
     * its kept set, counted; their value is finite (the set widened to them) */
    g.sampling.top_p = 0.05;
    run(RC_KERNELS_INVARIANT, &g, &b);
    ck_assert(b.trainer_outside_kept > 0);
    for (int64_t i = 0; i < b.n_seq * b.gen_len; i++)
        ck_assert(isfinite(b.lens[0].logprob_fwd[i]) && b.lens[0].logprob_fwd[i] <= 0.0f);
    rc_results_free(&b);
    rc_results_free(&a);
}
END_TEST

/* --stop-at-eos masks everything after the first EOS. */
START_TEST(test_stop_at_eos)
{
    rc_rollout_cfg cfg = base_cfg(RC_F32);
    cfg.stop_at_eos = true;
    cfg.num.temperature = 3.0f; /* flat enough to hit EOS sometimes */
    cfg.samples = 8;
    rc_results r;
    run(RC_KERNELS_ENGINE, &cfg, &r);
    int64_t stopped = 0;
    for (int64_t s = 0; s < r.n_seq; s++) {
        int32_t v = r.gen_valid[s];
        ck_assert(v >= 1 && v <= r.gen_len);
        if (v < r.gen_len) {
            stopped++;
            ck_assert(g_model->cfg.n_eos > 0 && r.gen_tokens[s * r.gen_len + v - 1] == g_model->cfg.eos_ids[0]);
            for (int64_t t = v; t < r.gen_len; t++) {
                ck_assert_int_eq(r.gen_tokens[s * r.gen_len + t], -1);
                ck_assert(isnan(r.logprob_gen[s * r.gen_len + t]));
            }
            for (int i = 0; i < r.n_lens; i++)
                for (int64_t t = v; t < r.lens[i].len; t++)
                    ck_assert(isnan(r.lens[i].logprob_fwd[s * r.lens[i].len + t]));
        }
    }
    printf("stop-at-eos: %lld of %lld sequences stopped early\n", (long long)stopped, (long long)r.n_seq);
    ck_assert(stopped > 0);
    rc_results_free(&r);
}
END_TEST

/* --upcast changes what is rounded: each option changes bf16 results. */
START_TEST(test_upcast_changes_results)
{
    const unsigned ups[] = {RC_UPCAST_SOFTMAX, RC_UPCAST_ROPE, RC_UPCAST_NORM, RC_UPCAST_LM_HEAD};
    rc_rollout_cfg cfg = base_cfg(RC_BF16);
    cfg.sampling.top_k = 1; /* same tokens unless the logits change a lot */
    rc_results base;
    run(RC_KERNELS_INVARIANT, &cfg, &base);
    for (int u = 0; u < 4; u++) {
        cfg.num.upcast = ups[u];
        rc_results r;
        run(RC_KERNELS_INVARIANT, &cfg, &r);
        int64_t diff = 0;
        for (int64_t i = 0; i < r.n_seq * r.gen_len; i++)
            diff += memcmp(&r.logprob_gen[i], &base.logprob_gen[i], sizeof(float)) != 0;
        char buf[64];
        printf("--upcast %s: %lld of %lld generation log-probs change\n", rc_upcast_str(ups[u], buf, sizeof buf),
               (long long)diff, (long long)(r.n_seq * r.gen_len));
        ck_assert(diff > 0);
        ck_assert(r.lens[0].st.identical_frac == 1.0); /* still invariant */
        rc_results_free(&r);
    }
    rc_results_free(&base);
}
END_TEST

/* Logits that stop being finite abort the run, naming the prompt, sample and
 * position: a fixture model whose LM head is scaled so that every weight
 * still fits fp16 but the logits exceed 65504. fp32 runs it fine. */
START_TEST(test_nonfinite_logits_abort)
{
    char p[4096];
    rc_model *m = NULL;
    rc_test_source_path(p, sizeof p, "data/fixtures/neox_parallel");
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    const int64_t n = m->cfg.vocab * m->cfg.hidden;
    float wmax = 0.0f;
    float *head = malloc(sizeof(float) * (size_t)n); /* the model's head is the mapped file's: scale a copy */
    rc_wt_convert(m->w.lm_head, 0, n, RC_F32, RC_F32, head);
    for (int64_t i = 0; i < n; i++) {
        head[i] *= 60000.0f;
        wmax = fabsf(head[i]) > wmax ? fabsf(head[i]) : wmax;
    }
    m->w.lm_head = rc_wt_f32(head);
    ck_assert_msg(wmax < 65504.0f, "premise: the scaled weights fit fp16 (max %g)", (double)wmax);
    static const int32_t toks[2 * 4] = {1, 5, 9, 33, 2, 7, 100, -1};
    static const int32_t lens[2] = {4, 3};
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = 2;
    cfg.prompt_max = 4;
    cfg.prompt_tokens = toks;
    cfg.prompt_len = lens;
    cfg.samples = 2;
    cfg.batch = 4;
    cfg.n_lens = 2;
    cfg.lens[0] = 3;
    cfg.lens[1] = 5;
    cfg.seed = 3;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32();

    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    rc_results r;
    memset(&r, 0, sizeof r);
    rc_status s = rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r);
    ck_assert_msg(s == RC_OK, "fp32 must run: %s", rc_last_error());
    for (int i = 0; i < r.n_lens; i++)
        ck_assert(isfinite(r.lens[i].st.mean) && isfinite(r.lens[i].st.max));
    rc_results_free(&r);

    cfg.num.dt = RC_F16;
    memset(&r, 0, sizeof r);
    rc_clear_error();
    s = rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r);
    const char *msg = rc_last_error();
    ck_assert_msg(s == RC_ERR_UNSUPPORTED, "fp16: status %s (%s), expected %s", rc_status_name(s), msg,
                  rc_status_name(RC_ERR_UNSUPPORTED));
    ck_assert_msg(strstr(msg, "prompt 1, sample 1, position 1:") && strstr(msg, "non-finite logits") &&
                      strstr(msg, "fp16") && !strchr(msg, '\n'),
                  "message: %s", msg);
    printf("fp16, LM head x 60000: %s\n", msg);
    rc_results_free(&r);
    rc_backend_destroy(be);
    rc_model_free(m);
    free(head);
}
END_TEST

/* Strata, growth and the sampler's entropy on small hand-checkable inputs
 * against numpy's answers (tools/fixtures/make_strata_fixtures.py -> strata_refs.h).
 * Tolerance: 1e-12 relative (+1e-15 absolute): both sides sum the same
 * doubles, numpy pairwise and the C code in token order; the decile edges and
 * counts are values and integers, compared exactly; the growth fit 1e-9
 * relative (numpy.polyfit's SVD against closed-form sums; cap_length is an
 * extrapolation that scales the fit's error by about ln(L)/a). */
static void near(double got, double want, double rtol, const char *what, int i)
{
    if (isnan(want)) {
        ck_assert_msg(isnan(got), "%s[%d]: got %.17g, want NaN", what, i, got);
        return;
    }
    ck_assert_msg(fabs(got - want) <= rtol * fabs(want) + 1e-15, "%s[%d]: got %.17g, want %.17g", what, i, got,
                  want);
}

static void strata_results(rc_results *r, int n_lens, bool entropy)
{
    memset(r, 0, sizeof *r);
    r->n_seq = SR_S;
    r->gen_len = SR_G;
    r->gen_valid = calloc(SR_S, sizeof *r->gen_valid);
    r->logprob_gen = calloc(SR_S * SR_G, sizeof(float));
    r->entropy_gen = entropy ? calloc(SR_S * SR_G, sizeof(float)) : NULL;
    r->lens = calloc((size_t)n_lens, sizeof *r->lens);
    ck_assert(r->gen_valid && r->logprob_gen && r->lens && (!entropy || r->entropy_gen));
    memcpy(r->gen_valid, sr_valid, sizeof sr_valid);
    memcpy(r->logprob_gen, sr_gen, sizeof sr_gen);
    if (entropy)
        memcpy(r->entropy_gen, sr_ent, sizeof sr_ent);
    r->n_lens = n_lens;
    for (int i = 0; i < n_lens; i++) {
        const int64_t L = sr_lens[SR_N_LENS - n_lens + i]; /* one length: the longest */
        r->lens[i].len = L;
        r->lens[i].logprob_fwd = calloc((size_t)(SR_S * L), sizeof(float));
        ck_assert(r->lens[i].logprob_fwd);
        memcpy(r->lens[i].logprob_fwd, sr_fwd[SR_N_LENS - n_lens + i], (size_t)(SR_S * L) * sizeof(float));
    }
}

START_TEST(test_strata_numpy)
{
    rc_results r;
    strata_results(&r, SR_N_LENS, true);
    ck_assert_msg(rc_compute_stats(&r) == RC_OK, "%s", rc_last_error());
    for (int i = 0; i < SR_N_LENS; i++)
        for (int k = 0; k < RC_N_STRATA; k++) {
            const int c = i * RC_N_STRATA + k;
            const rc_strata *sa = &r.lens[i].st.strata[k];
            ck_assert(sa->present);
            ck_assert_int_eq(sa->count, sr_count[c]);
            for (int e = 0; e < RC_N_DECILES - 1; e++)
                ck_assert_msg(sa->edges[e] == sr_edges[c * 9 + e], "L=%lld %s edge %d: %.17g vs %.17g",
                              (long long)sr_lens[i], rc_strata_names[k], e + 1, sa->edges[e], sr_edges[c * 9 + e]);
            for (int d = 0; d < RC_N_DECILES; d++) {
                const double *w = sr_bins + (c * RC_N_DECILES + d) * 10;
                const rc_stratum *b = &sa->bin[d];
                ck_assert_int_eq(b->count, (int64_t)w[0]);
                for (size_t f = 0; f < rc_n_stratum_fields; f++) /* the fixture's order is the table's */
                    near(rc_stratum_value(b, &rc_stratum_fields[f]), w[1 + f], 1e-12, rc_stratum_fields[f].name,
                         c * RC_N_DECILES + d);
            }
        }
    /* growth over L = 2, 4, 6 */
    const rc_growth *g = &r.growth;
    ck_assert_int_eq(g->n_points, 3);
    near(g->exponent, sr_growth[0], 1e-9, "exponent", 0);
    near(g->log_coef, sr_growth[1], 1e-9, "log_coef", 0);
    near(g->r2, sr_growth[2], 1e-9, "r2", 0);
    near(g->cap_length, sr_growth[3], 1e-9, "cap_length", 0);
    ck_assert_str_eq(g->looks_like, sr_growth[0] < 1.5 ? "sqrt(L)" : "L");
    ck_assert_str_eq(g->reason, "");
    rc_results_free(&r);

    /* one length, no entropy (an older file): growth n/a with the reason, no entropy strata */
    strata_results(&r, 1, false);
    ck_assert_msg(rc_compute_stats(&r) == RC_OK, "%s", rc_last_error());
    ck_assert(!r.lens[0].st.strata[RC_STRATA_ENTROPY].present);
    ck_assert(r.lens[0].st.strata[RC_STRATA_PROB].present);
    ck_assert_int_eq(r.growth.n_points, 1);
    ck_assert(isnan(r.growth.exponent) && isnan(r.growth.cap_length));
    ck_assert_str_eq(r.growth.reason, "needs 2 or more lengths (e.g. --len 20,40,50 or 64:4096:x2)");
    rc_results_free(&r);

    /* rc_entropy of log_softmax rows (numpy float64 from the same f32 log-probs; -inf adds nothing) */
    const float *row = sr_ent_rows;
    for (int i = 0; i < SR_N_ENT_ROWS; i++) {
        const int64_t V = sr_ent_row_len[i];
        const double h = rc_entropy(row, V);
        near(h, sr_ent_want[i], 1e-14, "entropy", i);
        /* the sampler's own (fused into its pass when nothing is filtered): the same bits */
        float *work = malloc(2 * (size_t)V * sizeof *work), lpp; /* 2V floats, as aligned as rc_calloc's */
        ck_assert_ptr_nonnull(work);
        rc_rng rng;
        rc_rng_seed(&rng, 1, 2, 3);
        for (int k = 0; k < 2; k++) {
            const rc_sampling sp = {.top_k = k ? 1 : 0, .top_p = 1.0};
            double hs = NAN, hp = NAN;
            const int32_t tok = rc_sample(row, V, &sp, &rng, work, &lpp, &hs);
            (void)rc_processed_logprob(row, V, &sp, (int32_t)(V - 1 - tok), work, &hp);
            ck_assert_msg(memcmp(&hs, &h, sizeof h) == 0 && memcmp(&hp, &h, sizeof h) == 0,
                          "row %d top-k %d: %.17g %.17g vs %.17g", i, k, hs, hp, h);
        }
        free(work);
        row += V;
    }
}
END_TEST

/* The accumulator's bounded buffers (results.h, rc_stats_acc): the same
 * sequences fed to an accumulator that keeps every value and to one whose
 * buffers hold 97 tokens and 31 sequences per length. What streams must be
 * bitwise the same; the std of r (sums of squares past the cap) equal to the
 * two-pass value to rounding; the quantiles and strata a uniform sample's:
 * each quantile is one of the ratios, within the exact quantiles at its level
 * +-0.2 (a sample of 97 puts the median's rank within +-0.05 one standard
 * deviation out: 0.2 is four), the strata count the sample; and a second run
 * gives the same sample (seeded per length). */
#define RV_SEQ 300
#define RV_G 10
static void reservoir_feed(rc_stats_acc *a, const int32_t *valid, const float *gen, const float *ent,
                           const double *ref, const float *fwd5, const float *fwd10, double *S, double *M)
{
    for (int64_t s = 0; s < RV_SEQ; s++) {
        const float *fwd[2] = {fwd5 + s * 5, fwd10 + s * RV_G};
        ck_assert_msg(rc_stats_acc_add(a, valid[s], gen + s * RV_G, ent + s * RV_G, ref + s * RV_G, fwd, S + 2 * s,
                                       M + 2 * s) == RC_OK, "%s", rc_last_error());
    }
}

static void reservoir_run(int64_t tok_cap, int64_t seq_cap, const int32_t *valid, const float *gen, const float *ent,
                          const double *ref, const float *fwd5, const float *fwd10, rc_results *r, double *S,
                          double *M)
{
    memset(r, 0, sizeof *r);
    static const int64_t lens[2] = {5, RV_G};
    r->n_lens = 2;
    r->lens = calloc(2, sizeof *r->lens);
    ck_assert(r->lens);
    r->lens[0].len = 5;
    r->lens[1].len = RV_G;
    rc_stat_params_fill_defaults(&r->stat);
    rc_stats_acc *a = NULL;
    ck_assert(rc_stats_acc_create(&r->stat, 2, lens, true, true, tok_cap, seq_cap, &a) == RC_OK);
    reservoir_feed(a, valid, gen, ent, ref, fwd5, fwd10, S, M);
    ck_assert_msg(rc_stats_acc_finish(a, r) == RC_OK, "%s", rc_last_error());
    rc_stats_acc_free(a);
}

START_TEST(test_reservoir)
{
    static int32_t valid[RV_SEQ];
    static float gen[RV_SEQ * RV_G], ent[RV_SEQ * RV_G], fwd5[RV_SEQ * 5], fwd10[RV_SEQ * RV_G];
    static double ref[RV_SEQ * RV_G], S[3][2 * RV_SEQ], M[3][2 * RV_SEQ];
    uint64_t x = 88172645463325252ull; /* xorshift64: the inputs only */
    for (int64_t s = 0; s < RV_SEQ; s++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        valid[s] = (int32_t)(x % (RV_G + 1)); /* 0 .. 10 tokens: some sequences have none */
        for (int t = 0; t < RV_G; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const double u = (double)(x >> 11) / 9007199254740992.0;
            const float g = (float)(-6.0 * u), d = (float)((u - 0.5) * 0.3 * (1.0 + (double)t));
            gen[s * RV_G + t] = g;
            ent[s * RV_G + t] = (float)(3.0 * (1.0 - u) + 0.01 * t);
            ref[s * RV_G + t] = (double)g + 0.25 * (double)d;
            fwd10[s * RV_G + t] = g + d;
            if (t < 5)
                fwd5[s * 5 + t] = g + (t == 0 ? 0.0f : d); /* position 0 identical at L = 5 */
        }
    }
    rc_results ex, cp, cp2;
    reservoir_run(RC_STATS_EXACT_TOKENS, RC_STATS_EXACT_SEQUENCES, valid, gen, ent, ref, fwd5, fwd10, &ex, S[0], M[0]);
    reservoir_run(97, 31, valid, gen, ent, ref, fwd5, fwd10, &cp, S[1], M[1]);
    reservoir_run(97, 31, valid, gen, ent, ref, fwd5, fwd10, &cp2, S[2], M[2]);
    ck_assert(memcmp(S[0], S[1], sizeof S[0]) == 0 && memcmp(M[0], M[1], sizeof M[0]) == 0);
    for (int i = 0; i < 2; i++) {
        const rc_len_stats *e = &ex.lens[i].st, *c = &cp.lens[i].st, *c2 = &cp2.lens[i].st;
        ck_assert_int_gt(e->count, 97); /* the cap is reached at both lengths */
        ck_assert_int_gt(e->seq_count, 31);
        /* streamed: the same bits */
        const double same[] = {e->mean, e->min, e->max, e->k1, e->k3, e->mult_prob_err, e->identical_frac,
                               e->clipfrac, e->frac_above[0], e->frac_above[1], e->seq_sum_mean, e->seq_sum_min,
                               e->seq_sum_max, e->seq_mean_mean, e->seq_frac_outside_band, e->seq_frac_above_cap,
                               e->ref_gen_mean_abs, e->ref_fwd_max_abs, e->corr.chi2_token, e->corr.chi2_seq,
                               e->corr.seq_geo_rs_maskfrac, e->corr.mean_abs_log_ratio};
        const double got[] = {c->mean, c->min, c->max, c->k1, c->k3, c->mult_prob_err, c->identical_frac,
                              c->clipfrac, c->frac_above[0], c->frac_above[1], c->seq_sum_mean, c->seq_sum_min,
                              c->seq_sum_max, c->seq_mean_mean, c->seq_frac_outside_band, c->seq_frac_above_cap,
                              c->ref_gen_mean_abs, c->ref_fwd_max_abs, c->corr.chi2_token, c->corr.chi2_seq,
                              c->corr.seq_geo_rs_maskfrac, c->corr.mean_abs_log_ratio};
        for (size_t k = 0; k < sizeof same / sizeof *same; k++)
            ck_assert_msg(memcmp(&same[k], &got[k], sizeof got[k]) == 0, "L=%lld streamed value %zu: %.17g vs %.17g",
                          (long long)ex.lens[i].len, k, got[k], same[k]);
        ck_assert_int_eq(c->count, e->count);
        ck_assert_int_eq(c->seq_count, e->seq_count);
        ck_assert_int_eq(c->first_divergent_position, e->first_divergent_position);
        for (int64_t t = 0; t < ex.lens[i].len; t++)
            ck_assert(ex.lens[i].pos_count[t] == cp.lens[i].pos_count[t] &&
                      memcmp(&ex.lens[i].pos_mean_abs_log_ratio[t], &cp.lens[i].pos_mean_abs_log_ratio[t],
                             sizeof(double)) == 0);
        /* sums of squares against two passes: rounding only */
        ck_assert_msg(fabs(c->std - e->std) <= 1e-12 * e->std, "std %.17g vs %.17g", c->std, e->std);
        ck_assert_msg(fabs(c->seq_sum_std - e->seq_sum_std) <= 1e-12 * e->seq_sum_std, "std S %.17g vs %.17g",
                      c->seq_sum_std, e->seq_sum_std);
        /* quantiles of the sample: within the exact ones at +-0.2 of the level */
        rc_len_result *L = &ex.lens[i];
        double lo_q[RC_N_QUANTILES], hi_q[RC_N_QUANTILES];
        for (int k = 0; k < RC_N_QUANTILES; k++) {
            lo_q[k] = e->min;
            hi_q[k] = e->max;
        }
        for (int k = 0; k < RC_N_QUANTILES; k++) {
            const double q = rc_quantile_levels[k];
            for (int k2 = 0; k2 < RC_N_QUANTILES; k2++) {
                if (rc_quantile_levels[k2] <= q - 0.2)
                    lo_q[k] = e->quantiles[k2];
                if (rc_quantile_levels[k2] >= q + 0.2 && hi_q[k] == e->max)
                    hi_q[k] = e->quantiles[k2];
            }
            ck_assert_msg(c->quantiles[k] >= lo_q[k] && c->quantiles[k] <= hi_q[k],
                          "L=%lld quantile %g: %.17g outside [%.17g, %.17g]", (long long)L->len, q, c->quantiles[k],
                          lo_q[k], hi_q[k]);
            ck_assert(memcmp(&c->quantiles[k], &c2->quantiles[k], sizeof(double)) == 0); /* the same sample */
        }
        /* strata: over the sample */
        for (int k = 0; k < RC_N_STRATA; k++) {
            ck_assert_int_eq(c->strata[k].count, 97);
            ck_assert_int_eq(e->strata[k].count, e->count);
            int64_t sum = 0;
            for (int d = 0; d < RC_N_DECILES; d++)
                sum += c->strata[k].bin[d].count;
            ck_assert_int_eq(sum, 97);
            ck_assert(memcmp(c->strata[k].edges, c2->strata[k].edges, sizeof c->strata[k].edges) == 0);
        }
    }
    rc_results_free(&ex);
    rc_results_free(&cp);
    rc_results_free(&cp2);
}
END_TEST

/* a test case over the default model (loaded once per case) */
/* A verdict's reason shows its comparison: mean exp|log r| just above
 * NeMo-RL's 1.05 prints with the digits that make "a > b" true as printed
 * (not "1.05 > 1.05"). Four tokens of log r = 0.048795 (exp: 1.0500051). */
START_TEST(test_verdict_digits)
{
    rc_results r;
    memset(&r, 0, sizeof r);
    static const int64_t lens[1] = {4};
    r.n_lens = 1;
    r.lens = calloc(1, sizeof *r.lens);
    ck_assert(r.lens);
    r.lens[0].len = 4;
    rc_stat_params_fill_defaults(&r.stat);
    rc_stats_acc *a = NULL;
    ck_assert(rc_stats_acc_create(&r.stat, 1, lens, false, false, 64, 64, &a) == RC_OK);
    const float gen[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
    float fwd4[4];
    for (int i = 0; i < 4; i++)
        fwd4[i] = gen[i] + 0.048795f;
    const float *fwd[1] = {fwd4};
    double S, M;
    ck_assert_msg(rc_stats_acc_add(a, 4, gen, NULL, NULL, fwd, &S, &M) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_stats_acc_finish(a, &r) == RC_OK, "%s", rc_last_error());
    rc_stats_acc_free(a);
    const char *why = r.verdict.reason[RC_OBJ_TOKEN_PPO];
    ck_assert_int_eq(r.verdict.level[RC_OBJ_TOKEN_PPO], RC_VERDICT_FAIL);
    ck_assert_msg(r.lens[0].st.mult_prob_err > RC_GATE_MULT_PROB_ERR, "%.17g", r.lens[0].st.mult_prob_err);
    char x[32], y[32];
    ck_assert_msg(sscanf(why, "mean exp|log r| %31s > %31s", x, y) == 2, "'%s'", why);
    ck_assert_msg(strtod(x, NULL) > strtod(y, NULL), "'%s'", why);
    ck_assert_msg(strtod(y, NULL) == RC_GATE_MULT_PROB_ERR, "'%s'", why);
    rc_results_free(&r);
}
END_TEST


/* A results struct of n sequences of L tokens, every sampler log-prob -1 and
 * sequence q's trainer log-probs -1 + d[q] (so S = L d[q], M = d[q]), with
 * its statistics and verdict. */
static void results_of(rc_results *r, int n, int L, const double *d)
{
    memset(r, 0, sizeof *r);
    r->n_seq = n;
    r->gen_len = L;
    r->n_lens = 1;
    r->lens = calloc(1, sizeof *r->lens);
    r->gen_valid = calloc((size_t)n, sizeof *r->gen_valid);
    r->logprob_gen = calloc((size_t)(n * L), sizeof *r->logprob_gen);
    ck_assert(r->lens && r->gen_valid && r->logprob_gen);
    r->lens[0].len = L;
    r->lens[0].logprob_fwd = calloc((size_t)(n * L), sizeof(float));
    ck_assert(r->lens[0].logprob_fwd);
    for (int q = 0; q < n; q++) {
        r->gen_valid[q] = L;
        for (int t = 0; t < L; t++) {
            r->logprob_gen[q * L + t] = -1.0f;
            r->lens[0].logprob_fwd[q * L + t] = (float)(-1.0 + d[q]);
        }
    }
    snprintf(r->dtype, sizeof r->dtype, "bf16");
    ck_assert_msg(rc_compute_stats(r) == RC_OK, "%s", rc_last_error());
}

/* GSPO's line against the ~15% its paper clips in normal training: 10% of
 * the sequences outside the band OK, 25% WARN, 60% FAIL (docs/verdict.md) */
START_TEST(test_verdict_gspo_bands)
{
    static const int outside[3] = {2, 5, 12};
    static const rc_verdict_level want[3] = {RC_VERDICT_OK, RC_VERDICT_WARN, RC_VERDICT_FAIL};
    for (int c = 0; c < 3; c++) {
        double d[20];
        for (int q = 0; q < 20; q++)
            d[q] = q < outside[c] ? 1e-3 : 0.0; /* e^M = 1.001: outside 3e-4 */
        rc_results r;
        results_of(&r, 20, 4, d);
        const double f = (double)outside[c] / 20.0;
        ck_assert_double_eq_tol(r.lens[0].st.seq_frac_outside_band, f, 1e-12);
        ck_assert_msg(r.verdict.level[RC_OBJ_GSPO] == want[c], "%d outside: %s", outside[c],
                      r.verdict.reason[RC_OBJ_GSPO]);
        ck_assert_msg(strstr(r.verdict.reason[RC_OBJ_GSPO], "GSPO's paper clips in normal training"), "%s",
                      r.verdict.reason[RC_OBJ_GSPO]);
        rc_results_free(&r);
    }
}
END_TEST

/* sequence IS judges every published sequence-level correction on both of
 * its bounds: sequences with e^S = e^-1.2 (< 0.5) are masked by verl's
 * Seq-MIS (its e^-S above 2) although none exceeds TRL's cap of 3 */
START_TEST(test_verdict_seq_bounds)
{
    double d[10];
    for (int q = 0; q < 10; q++)
        d[q] = q < 3 ? -0.3 : 0.0; /* L = 4: S = -1.2 */
    rc_results r;
    results_of(&r, 10, 4, d);
    const rc_len_stats *st = &r.lens[0].st;
    ck_assert_double_eq(st->seq_frac_above_cap, 0.0);
    ck_assert_double_eq_tol(st->corr.seq_mis_maskfrac, 0.3, 1e-12);
    ck_assert_double_eq_tol(st->seq_corr_below[2] + st->seq_corr_above[2], st->corr.seq_mis_maskfrac, 1e-12);
    ck_assert_double_eq_tol(st->seq_corr_above[2], 0.3, 1e-12); /* e^-S = e^1.2 > 2 */
    ck_assert_double_eq_tol(st->seq_corr_below[3] + st->seq_corr_above[3], st->corr.seq_geo_rs_maskfrac, 1e-12);
    ck_assert_int_eq(r.verdict.level[RC_OBJ_SEQUENCE_IS], RC_VERDICT_FAIL);
    ck_assert_msg(strstr(r.verdict.reason[RC_OBJ_SEQUENCE_IS], "verl Seq-MIS e^-S [0.5, 2] 30% (0% below, 30% above)"),
                  "%s", r.verdict.reason[RC_OBJ_SEQUENCE_IS]);
    rc_results_free(&r);
}
END_TEST

/* the published bands beside the run's numbers */
START_TEST(test_reference_bands)
{
    const rc_ref_band *bf16 = NULL;
    for (size_t i = 0; i < rc_n_ref_bands; i++)
        if (rc_ref_bands[i].metric == RC_REF_K3 && !strcmp(rc_ref_bands[i].setting, "bf16"))
            bf16 = &rc_ref_bands[i];
    ck_assert_ptr_nonnull(bf16);
    char t[200];
    rc_ref_band_text(bf16, 1e-5, t, sizeof t);
    ck_assert_msg(strstr(t, "below every published bf16 stack ("), "%s", t);
    ck_assert_int_eq(rc_ref_band_position(bf16, 0.5 * (bf16->lo + bf16->hi)), 0);
    rc_ref_band_text(bf16, 0.5 * (bf16->lo + bf16->hi), t, sizeof t);
    ck_assert_msg(strstr(t, "within the published bf16 stacks' ("), "%s", t);
    ck_assert_int_eq(rc_ref_band_position(bf16, 2 * bf16->hi), 1);
    for (size_t i = 0; i < rc_n_ref_bands; i++) /* every band has a source and a range */
        ck_assert(rc_ref_bands[i].lo < rc_ref_bands[i].hi && rc_ref_bands[i].sources[0]);
}
END_TEST

/* a WARN / FAIL line names the cause whose measured setting helped its
 * objective most (rc_causes), skips one already applied, and an OK line or
 * an fp32 run gets none */
START_TEST(test_next_step)
{
    double d[20];
    for (int q = 0; q < 20; q++)
        d[q] = q < 8 ? 1e-3 : 0.0; /* 40% outside GSPO's band: WARN */
    rc_results r;
    results_of(&r, 20, 4, d);
    ck_assert_int_eq(r.verdict.level[RC_OBJ_GSPO], RC_VERDICT_WARN);
    const rc_cause *best = NULL, *second = NULL; /* the table's best and second for GSPO, by its numbers */
    for (size_t i = 0; i < rc_n_causes; i++) {
        const rc_cause *c = &rc_causes[i];
        if (c->exact || (c->dtype && strcmp(c->dtype, "bf16")))
            continue;
        if (!best || c->gspo / c->gspo_base < best->gspo / best->gspo_base) {
            second = best;
            best = c;
        } else if (!second || c->gspo / c->gspo_base < second->gspo / second->gspo_base) {
            second = c;
        }
    }
    ck_assert(best && second);
    char buf[320], want[96];
    rc_verdict_next_step(&r, RC_OBJ_GSPO, buf, sizeof buf);
    snprintf(want, sizeof want, "`ratiocheck sweep --vary %s`", best->vary);
    ck_assert_msg(strstr(buf, want) && strstr(buf, best->remedy) && strstr(buf, "likely cause: "), "%s", buf);
    snprintf(r.trainer, sizeof r.trainer, "dtype=bf16,%s6", best->applied); /* not it: another value */
    rc_verdict_next_step(&r, RC_OBJ_GSPO, buf, sizeof buf);
    snprintf(want, sizeof want, "`ratiocheck sweep --vary %s`", best->vary);
    ck_assert_msg(strstr(buf, want), "%s", buf);
    r.trainer[0] = '\0';
    snprintf(r.sampler, sizeof r.sampler, "bf16, %s", best->applied); /* already tried: the next one */
    rc_verdict_next_step(&r, RC_OBJ_GSPO, buf, sizeof buf);
    snprintf(want, sizeof want, "`ratiocheck sweep --vary %s`", second->vary);
    ck_assert_msg(strstr(buf, want), "%s", buf);
    rc_verdict_next_step(&r, RC_OBJ_TOKEN_PPO, buf, sizeof buf); /* OK: nothing */
    ck_assert_int_eq(r.verdict.level[RC_OBJ_TOKEN_PPO], RC_VERDICT_OK);
    ck_assert_str_eq(buf, "");
    snprintf(r.dtype, sizeof r.dtype, "fp32");
    rc_verdict_next_step(&r, RC_OBJ_GSPO, buf, sizeof buf);
    ck_assert_str_eq(buf, "");
    rc_results_free(&r);
}
END_TEST

/* the sweep's recommendation: the rows that lower an objective's metric by
 * more than its noise floor (2 binomial standard errors for GSPO's
 * fraction), best first; a row within the floor is not recommended */
START_TEST(test_sweep_recommend)
{
    enum { N = 100 };
    static const int outside[4] = {40, 10, 30, 38}; /* base, then three settings */
    rc_results res[4];
    for (int k = 0; k < 4; k++) {
        double d[N];
        for (int q = 0; q < N; q++)
            d[q] = q < outside[k] ? 1e-3 : 0.0;
        results_of(&res[k], N, 4, d);
    }
    rc_results *base = &res[0];
    base->n_sweep = 3;
    base->sweep = calloc(3, sizeof *base->sweep);
    ck_assert(base->sweep);
    for (int k = 0; k < 3; k++) {
        snprintf(base->sweep[k].name, sizeof base->sweep[k].name, "setting %d", k + 1);
        base->sweep[k].res = malloc(sizeof(rc_results));
        ck_assert(base->sweep[k].res);
        *base->sweep[k].res = res[k + 1];
    }
    rc_sweep_rec rec[RC_N_OBJECTIVES];
    rc_sweep_recommend(base, rec);
    const rc_sweep_rec *g = &rec[RC_OBJ_GSPO];
    const double noise = 2.0 * sqrt(0.4 * 0.6 / N); /* 0.098: 40% -> 38% is within it */
    ck_assert_double_eq_tol(g->base, 0.4, 1e-12);
    ck_assert_double_eq_tol(g->noise, noise, 1e-12);
    ck_assert_int_eq(g->n, 2);
    ck_assert_int_eq(g->row[0], 0); /* 10% */
    ck_assert_int_eq(g->row[1], 1); /* 30% */
    ck_assert_double_eq_tol(g->value[0], 0.1, 1e-12);
    rc_results_free(base);
}
END_TEST

static TCase *model_case(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, load, unload);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return tc;
}

/* One test case per meson test: tests/meson.build runs each case on its own
 * (CK_RUN_CASE=<case>) so that the long engine_drift case is the `slow`
 * suite's and the others are `quick`; without CK_RUN_CASE every case runs. */
int main(void)
{
    Suite *s = suite_create("ratio");
    TCase *tc = model_case(s, "invariant");
    tcase_add_loop_test(tc, test_invariant_bitwise, 0, 3);
    tc = model_case(s, "engine_drift");
    tcase_add_test(tc, test_engine_drift_order);
    tc = model_case(s, "reference");
    tcase_add_test(tc, test_reference);
    tc = model_case(s, "sampling");
    tcase_add_test(tc, test_sampling);
    tcase_add_test(tc, test_stop_at_eos);
    tc = model_case(s, "upcast");
    tcase_add_test(tc, test_upcast_changes_results);
    TCase *sc = tcase_create("strata");
    tcase_add_test(sc, test_strata_numpy);
    tcase_add_test(sc, test_reservoir);
    tcase_add_test(sc, test_verdict_digits);
    tcase_add_test(sc, test_verdict_gspo_bands);
    tcase_add_test(sc, test_verdict_seq_bounds);
    tcase_add_test(sc, test_reference_bands);
    tcase_add_test(sc, test_next_step);
    tcase_add_test(sc, test_sweep_recommend);
    suite_add_tcase(s, sc);
    TCase *nf = tcase_create("nonfinite");
    tcase_set_timeout(nf, 120);
    tcase_add_test(nf, test_nonfinite_logits_abort);
    suite_add_tcase(s, nf);
    const char *only = getenv("CK_RUN_CASE");
    if (only && !suite_tcase(s, only)) { /* a renamed case must not pass by running nothing */
        fprintf(stderr, "ratio: no test case \"%s\" (CK_RUN_CASE)\n", only);
        return EXIT_FAILURE;
    }
    return rc_test_run(s);
}
