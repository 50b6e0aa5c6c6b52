/* ratiocheck trace on the bundled model: the capture hook changes nothing,
 * equal sides part nowhere, and where two sides part the first divergent op
 * is confirmed by recomputing that op alone (the backend's own op, the
 * captured input of each side) -- README "Trace". */
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
#include "rollout.h"
#include "trace.h"

#include "testutil.h"
#include "bundled.h"


#define L_TRACE 12

/* 6 prompts x 2 samples, L = 12, decoded 8 at a time; trainer micro-batch 6 */
static rc_rollout_cfg base_cfg(void)
{
    rc_rollout_cfg c;
    memset(&c, 0, sizeof c);
    c.n_prompts = 6;
    c.prompt_max = g_prompts.max_len;
    c.prompt_tokens = g_prompts.tokens;
    c.prompt_len = g_prompts.len;
    c.samples = 2;
    c.batch = 8;
    c.forward_batch = 6;
    c.n_lens = 1;
    c.lens[0] = L_TRACE;
    c.seed = 3;
    c.sampling.top_p = 1.0;
    c.num = rc_numerics_fp32();
    c.num.dt = RC_BF16;
    c.num_trainer = c.num;
    c.num_trainer.tp_trainer = true;
    c.trainer = true;
    return c;
}

/* the backends of the two sides */
typedef struct {
    rc_backend *be, *tbe;
} sides;

static sides make_sides(rc_kernels ks, rc_kernels kt)
{
    sides s;
    ck_assert(rc_backend_cpu_create(0, ks, &s.be) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, kt, &s.tbe) == RC_OK);
    return s;
}

static void free_sides(sides *s)
{
    rc_backend_destroy(s->be);
    rc_backend_destroy(s->tbe);
}

static void run(const sides *sd, rc_rollout_cfg *cfg, rc_results *r)
{
    cfg->trainer_be = sd->tbe;
    memset(r, 0, sizeof *r);
    rc_status s = rc_run_check(g_model, sd->be, NULL, cfg, NULL, NULL, NULL, r);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
}

static bool bits_equal(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            return false;
    return true;
}

/* Sample once, then replay the tokens twice: without the hook and with it
 * (tracing seqs, or with seqs NULL the n <= 3 whose log r are largest). The two replays' log-probs must be bitwise equal (the hook
 * changes nothing), and equal to the sampling run's (a replay is the run). */
static rc_trace *trace_sides(const sides *sd, rc_rollout_cfg cfg, const int64_t *seqs, int64_t n,
                             const rc_trace_table **tt)
{
    rc_results r0, r_off, r_on;
    run(sd, &cfg, &r0);
    rc_rollout_cfg rep = cfg;
    rep.forced_tokens = r0.gen_tokens;
    rep.forced_valid = r0.gen_valid;
    rep.forced_len = r0.gen_len;
    run(sd, &rep, &r_off);
    int64_t worst[3] = {0, 0, 0};
    if (!seqs) { /* the n <= 3 sequences with the largest sum |log r| */
        double w[3] = {-1, -1, -1};
        for (int64_t q = 0; q < r0.n_seq; q++) {
            double a = 0;
            for (int64_t i = 0; i < L_TRACE; i++)
                a += fabs((double)r0.lens[0].logprob_fwd[q * L_TRACE + i] - (double)r0.logprob_gen[q * r0.gen_len + i]);
            for (int j = 0; j < (int)n; j++)
                if (a > w[j]) {
                    for (int m = (int)n - 1; m > j; m--) {
                        w[m] = w[m - 1];
                        worst[m] = worst[m - 1];
                    }
                    w[j] = a;
                    worst[j] = q;
                    break;
                }
        }
        seqs = worst;
    }
    rc_trace *t = NULL;
    ck_assert_msg(rc_trace_create(&g_model->cfg, r0.n_seq, seqs, n, cfg.prompt_max + L_TRACE, &t) == RC_OK, "%s",
                  rc_last_error());
    rep.capture = rc_trace_capture;
    rep.capture_ctx = t;
    run(sd, &rep, &r_on);
    const int64_t SG = r0.n_seq * r0.gen_len;
    ck_assert_msg(bits_equal(r_off.logprob_gen, r_on.logprob_gen, SG), "the hook changed the generation log-probs");
    ck_assert_msg(bits_equal(r_off.lens[0].logprob_fwd, r_on.lens[0].logprob_fwd, r0.n_seq * L_TRACE),
                  "the hook changed the forward log-probs");
    ck_assert(bits_equal(r0.logprob_gen, r_on.logprob_gen, SG));
    ck_assert(bits_equal(r0.lens[0].logprob_fwd, r_on.lens[0].logprob_fwd, r0.n_seq * L_TRACE));
    ck_assert_msg(rc_trace_compare(t, tt) == RC_OK, "%s", rc_last_error());
    rc_results_free(&r0);
    rc_results_free(&r_off);
    rc_results_free(&r_on);
    return t;
}

/* The op's input: the op before it in the forward pass */
static rc_trace_op gemm_input(rc_trace_op op)
{
    switch (op) {
    case RC_TOP_QKV: return RC_TOP_NORM1;
    case RC_TOP_O: return RC_TOP_ATTN;
    case RC_TOP_UP:
    case RC_TOP_GATE: return RC_TOP_NORM2;
    case RC_TOP_DOWN: return RC_TOP_ACT;
    case RC_TOP_LOGITS: return RC_TOP_NORM_F;
    default: return RC_TOP_COUNT;
    }
}

/* The weight and bias of a GEMM op as engine e holds them */
static void gemm_weights(const rc_engine *e, int64_t layer, rc_trace_op op, rc_wt *W, const float **bias)
{
    const rc_layer_weights *L = layer < e->model->cfg.n_layers ? &e->w.layers[layer] : NULL;
    switch (op) {
    case RC_TOP_QKV: *W = L->w_qkv; *bias = rc_wt_vec(L->b_qkv); break;
    case RC_TOP_O: *W = L->w_o; *bias = rc_wt_vec(L->b_o); break;
    case RC_TOP_UP: *W = L->w_up; *bias = rc_wt_vec(L->b_up); break;
    case RC_TOP_GATE: *W = L->w_gate; *bias = rc_wt_vec(L->b_gate); break;
    case RC_TOP_DOWN: *W = L->w_down; *bias = rc_wt_vec(L->b_down); break;
    default: *W = e->w.lm_head; *bias = NULL; break;
    }
}

/* Recompute the first divergent op (a GEMM) alone on each side: the side's
 * backend matmul over its captured input row, in a call of as many rows as
 * the side's call had (the kernels' order depends on M), with the weights
 * as the side's engine holds them. Each must reproduce its side's captured
 * output row bit for bit; the inputs are equal (nothing parted before), the
 * outputs differ where the trace says. */
static void confirm_first_gemm(const sides *sd, const rc_rollout_cfg *cfg, const rc_trace *t, const rc_trace_table *tt,
                               rc_dtype out_dt[2])
{
    const rc_trace_first *f = &tt->first;
    ck_assert(f->found);
    const rc_trace_op in_op = gemm_input(f->op);
    ck_assert_msg(in_op != RC_TOP_COUNT, "the first divergent op is %s, not a GEMM", rc_trace_op_name(f->op));
    int64_t k = 0;
    while (tt->seq[k] != f->sequence)
        k++;
    const rc_numerics nums[2] = {cfg->num, cfg->num_trainer};
    rc_backend *bes[2] = {sd->be, sd->tbe};
    const float *in[2], *outc[2];
    int64_t K = 0, N = 0;
    for (int side = 0; side < 2; side++) {
        int64_t w_in, w_out, m_in, m_out;
        in[side] = rc_trace_row(t, side, k, f->layer, in_op, f->position, &w_in, &m_in);
        outc[side] = rc_trace_row(t, side, k, f->layer, f->op, f->position, &w_out, &m_out);
        ck_assert(in[side] && outc[side]);
        ck_assert_int_eq(m_in, m_out);
        K = w_in;
        N = w_out;
    }
    ck_assert_msg(bits_equal(in[0], in[1], K), "the input of %s already differs", rc_trace_op_name(f->op));
    const int64_t rows[2] = {f->sampler_rows, f->trainer_rows};
    float *y[2];
    for (int side = 0; side < 2; side++) {
        rc_engine *e = NULL;
        ck_assert_msg(rc_engine_create(g_model, bes[side], &nums[side], 1, 8, 8, &e) == RC_OK, "%s", rc_last_error());
        rc_wt W;
        const float *bias;
        gemm_weights(e, f->layer, f->op, &W, &bias);
        const int64_t M = rows[side];
        float *x = malloc((size_t)(M * K) * sizeof *x);
        y[side] = malloc((size_t)(M * N) * sizeof *y[side]);
        ck_assert(x && y[side]);
        for (int64_t r = 0; r < M; r++)
            memcpy(x + r * K, in[side], (size_t)K * sizeof *x);
        ck_assert_msg(bes[side]->ops->matmul(bes[side], x, M, K, W, N, bias, RC_F32, out_dt[side], y[side]) == RC_OK,
                      "%s", rc_last_error());
        for (int64_t r = 0; r < M; r += M - 1 > 0 ? M - 1 : 1) /* the first and the last row */
            ck_assert_msg(bits_equal(y[side] + r * N, outc[side], N), "side %d: %s recomputed alone (M = %lld) is not "
                          "the captured output", side, rc_trace_op_name(f->op), (long long)M);
        free(x);
        rc_engine_free(e);
    }
    ck_assert(memcmp(&y[0][f->element], &f->sampler, sizeof f->sampler) == 0);
    ck_assert(memcmp(&y[1][f->element], &f->trainer, sizeof f->trainer) == 0);
    ck_assert(memcmp(&y[0][f->element], &y[1][f->element], sizeof(float)) != 0);
    for (int64_t i = 0; i < f->element; i++) /* the elements before it agree */
        ck_assert(memcmp(&y[0][i], &y[1][i], sizeof(float)) == 0);
    free(y[0]);
    free(y[1]);
}

/* every cell before (layer, op) in forward order is bitwise equal */
static void check_equal_before(const rc_trace_table *tt, int64_t layer, rc_trace_op op)
{
    for (int64_t sl = 0; sl < RC_TRACE_SLOT(layer) + 1; sl++)
        for (int o = 0; o < RC_TOP_COUNT && (sl < RC_TRACE_SLOT(layer) || o < (int)op); o++) {
            const rc_trace_cell *c = &tt->cells[sl * RC_TOP_COUNT + o];
            ck_assert_msg(c->equal == c->count, "layer %lld, %s: %lld of %lld equal", (long long)sl - 1,
                          rc_trace_op_name((rc_trace_op)o), (long long)c->equal, (long long)c->count);
        }
}

/* (a) engine bf16 against its invariant-kernels twin */
START_TEST(test_engine_vs_invariant)
{
    sides sd = make_sides(RC_KERNELS_ENGINE, RC_KERNELS_INVARIANT);
    rc_rollout_cfg cfg = base_cfg();
    const rc_trace_table *tt;
    rc_trace *t = trace_sides(&sd, cfg, NULL, 3, &tt);
    const rc_trace_first *f = &tt->first;
    ck_assert(f->found);
    printf("engine vs invariant: first divergence layer %lld, %s, sequence %lld, position %lld, element %lld "
           "(rows %lld / %lld)\n", (long long)f->layer, rc_trace_op_name(f->op), (long long)f->sequence,
           (long long)f->position, (long long)f->element, (long long)f->sampler_rows, (long long)f->trainer_rows);
    check_equal_before(tt, f->layer, f->op);
    rc_dtype dts[2] = {RC_BF16, RC_BF16};
    confirm_first_gemm(&sd, &cfg, t, tt, dts);
    /* the residual stream's difference grows through the layers: never
     * smaller after a layer than after the one before, and larger after the
     * last than after the first */
    const rc_trace_cell *first_resid = &tt->cells[RC_TRACE_SLOT(0) * RC_TOP_COUNT + RC_TOP_RESID];
    const rc_trace_cell *last_resid =
        &tt->cells[RC_TRACE_SLOT(g_model->cfg.n_layers - 1) * RC_TOP_COUNT + RC_TOP_RESID];
    for (int64_t l = 0; l < g_model->cfg.n_layers; l++)
        printf("  layer %lld resid rel L2 %.3g\n", (long long)l,
               tt->cells[RC_TRACE_SLOT(l) * RC_TOP_COUNT + RC_TOP_RESID].rel_l2);
    fflush(stdout);
    for (int64_t l = 1; l < g_model->cfg.n_layers; l++)
        ck_assert_msg(tt->cells[RC_TRACE_SLOT(l) * RC_TOP_COUNT + RC_TOP_RESID].rel_l2 >=
                          tt->cells[RC_TRACE_SLOT(l - 1) * RC_TOP_COUNT + RC_TOP_RESID].rel_l2,
                      "the residual difference shrinks at layer %lld", (long long)l);
    ck_assert(last_resid->rel_l2 > first_resid->rel_l2);
    rc_trace_free(t);
    free_sides(&sd);
}
END_TEST

/* (b) sampler bf16 against trainer bf16 with an fp32 LM head. With
 * invariant kernels on both sides (_i = 0) the head is the only difference:
 * the sides part first at the logits. With engine kernels (_i = 1) they part
 * earlier, where the decode and full-forward GEMMs sum in different orders;
 * either way the op is recomputed alone. */
START_TEST(test_lm_head_fp32)
{
    const rc_kernels k = _i == 0 ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
    sides sd = make_sides(k, k);
    rc_rollout_cfg cfg = base_cfg();
    cfg.num_trainer.upcast = RC_UPCAST_LM_HEAD;
    const rc_trace_table *tt;
    rc_trace *t = trace_sides(&sd, cfg, NULL, 2, &tt);
    const rc_trace_first *f = &tt->first;
    ck_assert(f->found);
    printf("lm-head=fp32, %s kernels: first divergence layer %lld, %s, sequence %lld, position %lld\n",
           rc_kernels_name(k), (long long)f->layer, rc_trace_op_name(f->op), (long long)f->sequence,
           (long long)f->position);
    fflush(stdout);
    if (_i == 0) {
        ck_assert_int_eq(f->op, RC_TOP_LOGITS);
        ck_assert_int_eq(f->layer, g_model->cfg.n_layers);
        ck_assert_int_eq(f->position, g_prompts.len[f->sequence / 2] - 1); /* the first logits row: the prompt's last */
    } else { /* engine kernels: before the head */
        ck_assert_msg(f->layer < g_model->cfg.n_layers, "engine kernels: first divergence at layer %lld, %s",
                      (long long)f->layer, rc_trace_op_name(f->op));
    }
    check_equal_before(tt, f->layer, f->op);
    rc_dtype dts[2] = {RC_BF16, f->op == RC_TOP_LOGITS ? RC_F32 : RC_BF16};
    confirm_first_gemm(&sd, &cfg, t, tt, dts);
    /* the logits differ: with invariant kernels (only the head differs)
     * every logit of every position, the head's rounding; with engine
     * kernels (parted earlier) all but a few (< 1%) that land equal */
    const rc_trace_cell *lg = &tt->cells[RC_TRACE_SLOT(g_model->cfg.n_layers) * RC_TOP_COUNT + RC_TOP_LOGITS];
    printf("  logits: %lld of %lld equal\n", (long long)lg->equal, (long long)lg->count);
    fflush(stdout);
    ck_assert(lg->count > 0 && (double)lg->equal < 0.01 * (double)lg->count);
    if (_i == 0)
        ck_assert_int_eq(lg->equal, 0);
    rc_trace_free(t);
    free_sides(&sd);
}
END_TEST

/* equal sides (invariant kernels, the same settings): no divergence */
START_TEST(test_equal_sides)
{
    sides sd = make_sides(RC_KERNELS_INVARIANT, RC_KERNELS_INVARIANT);
    rc_rollout_cfg cfg = base_cfg();
    const int64_t seqs[] = {2, 11};
    const rc_trace_table *tt;
    rc_trace *t = trace_sides(&sd, cfg, seqs, 2, &tt);
    ck_assert(!tt->first.found);
    int64_t cells = 0;
    for (int64_t i = 0; i < tt->n_slots * RC_TOP_COUNT; i++) {
        ck_assert_int_eq(tt->cells[i].equal, tt->cells[i].count);
        cells += tt->cells[i].count > 0;
    }
    /* every op of the bundled model was compared: embed, 13 per layer (parallel residual: no resid_attn; no gate), 2 final */
    ck_assert_int_eq(cells, 1 + 12 * g_model->cfg.n_layers + 2);
    for (int64_t k = 0; k < tt->n_seq; k++)
        ck_assert(!tt->seq_first[k].found);
    rc_trace_free(t);
    free_sides(&sd);
}
END_TEST

/* the ulp distance in a dtype */
START_TEST(test_ulp_distance)
{
    ck_assert(rc_trace_ulp_distance(1.0f, 1.0f, RC_BF16) == 0.0);
    ck_assert(rc_trace_ulp_distance(1.0f, 1.0078125f, RC_BF16) == 1.0);      /* 1 + 2^-7 */
    ck_assert(rc_trace_ulp_distance(-1.0f, -1.0078125f, RC_BF16) == 1.0);
    ck_assert(rc_trace_ulp_distance(1.0f, 1.0f + 0x1p-23f, RC_F32) == 1.0);
    ck_assert(rc_trace_ulp_distance(1.0f, 1.0f + 0x1p-10f, RC_F16) == 1.0);
    ck_assert(rc_trace_ulp_distance(2.0f, 2.03125f, RC_BF16) == 2.0);        /* ulp 2^-6 at 2 */
    ck_assert(rc_trace_ulp_distance(0.0f, 0x1p-133f, RC_BF16) == 1.0);       /* bf16's smallest subnormal */
    ck_assert(isinf(rc_trace_ulp_distance(1.0f, INFINITY, RC_BF16)));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_add_unchecked_fixture(tc, load, unload);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_ulp_distance);
    tcase_add_test(tc, test_equal_sides);
    tcase_add_test(tc, test_engine_vs_invariant);
    tcase_add_loop_test(tc, test_lm_head_fp32, 0, 2);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
