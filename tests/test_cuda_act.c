/* test_cuda_act.c: activations held at the dtype's width on the device (forward.c engine_act_st: the MLP's
 * intermediate buffers, qkv, the attention output, the norms' output h, the projections' outputs tmp and mlp_c,
 * the logits, the residual stream x;
 * the backend's matmul_st, act_st, act_mul_st, norm_st, qk_norm_st, add_st, logprobs_st, embed_st, rope and
 * attention with
 * rc_attn_params.qkv_st / out_st; docs/gpu.md "Activations at the dtype's width"). Storage changes no
 * result: a run whose buffers are 2-byte gives every full-forward and cached-decode log-prob bitwise the
 * same run's with them fp32 (rc_numerics.act_f32), and takes less device memory by exactly those buffers'
 * halves. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dtype.h"
#include "forward.h"
#include "model.h"
#ifdef RC_TEST_EMULATE
#include "shim_control.h"
#endif
#include "util.h"

#include "testutil.h"

#include "test_cuda.h"

enum { AB = 3, AT = 12 };
static const int64_t k_alens[AB] = {7, 5, 9}; /* the full forward's sequences */

typedef struct {
    float *full; /* [sum(k_alens), V]: the full forward */
    float *dec;  /* [4][AB][V]: a prefill of 4 tokens per slot, then 3 decode steps, each slot's last row */
    rc_dtype mlp_st, qkv_st, att_st, h_st, tmp_st, mlpc_st, logits_st, x_st;
    long long peak; /* the device's peak bytes over the run (host build), else 0 */
    int64_t est;    /* rc_engine_mem_estimate's activations for the engine's sizes */
} act_result;

static void act_run(const rc_model *m, const rc_numerics *num, rc_kernels k, act_result *r)
{
    const int64_t V = m->cfg.vocab;
    rc_backend *be;
    ck_assert_msg(test_backend_create(k, &be) == RC_OK, "%s", rc_last_error());
    rc_engine_mem mem;
    ck_assert_msg(rc_engine_mem_estimate(m, num, false, k, AB, AT, AB * AT, &mem) == RC_OK, "%s", rc_last_error());
    r->est = mem.activations;
#ifdef RC_TEST_EMULATE
    rck_shim_reset();
#endif
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, num, AB, AT, AB * AT, &e) == RC_OK, "%s", rc_last_error());
    r->mlp_st = e->mlp_st;
    r->qkv_st = e->qkv_st;
    r->att_st = e->att_st;
    r->h_st = e->h_st;
    r->tmp_st = e->tmp_st;
    r->mlpc_st = e->mlpc_st;
    r->logits_st = e->logits_st;
    r->x_st = e->x_st;
    cuda_test_forward_decode(e, V, &r->full, &r->dec);
#ifdef RC_TEST_EMULATE
    r->peak = rck_shim_device_peak(0);
#else
    r->peak = 0;
#endif
    rc_engine_free(e);
    rc_backend_destroy(be);
}

static void act_free(act_result *r)
{
    free(r->full);
    free(r->dec);
}

/* the buffers held at 2 bytes (act_compare's want) */
enum { ST_MLP = 1, ST_QKV = 2, ST_ATT = 4, ST_H = 8, ST_TMP = 16, ST_MLPC = 32, ST_LOGITS = 64, ST_X = 128,
       ST_ALL = 255 };

/* the bytes n elements save at 2 bytes (a 2-byte buffer is allocated in whole floats) */
static int64_t half_saving(int64_t n)
{
    return 4 * n - 4 * (n / 2 + n % 2);
}

/* the bytes the buffers of want save at 2 bytes for an engine of AB * AT rows, computed from the config:
 * mlp_a and mlp_b rows x intermediate each (the gate's buffer only in a gated MLP), qkv rows x (heads + 2 KV
 * heads) x head_dim, att rows x heads x head_dim, h, tmp and mlp_c rows x hidden, logits logit rows x vocab,
 * x rows x hidden with lt logit rows x hidden */
static int64_t act_saving(const rc_config *c, unsigned want)
{
    const int64_t rows = AB * AT, I = c->intermediate, d = c->head_dim;
    int64_t save = 0;
    for (int b = 0; b < 2 && (want & ST_MLP); b++)
        save += half_saving(b == 0 || c->gated_mlp ? rows * I : rows); /* mlp_b: 1 float a row without a gate */
    if (want & ST_QKV)
        save += half_saving(rows * (c->n_heads + 2 * c->n_kv_heads) * d);
    if (want & ST_ATT)
        save += half_saving(rows * c->n_heads * d);
    for (unsigned b = ST_H; b <= ST_MLPC; b <<= 1) /* h, tmp, mlp_c: rows x hidden each */
        if (want & b)
            save += half_saving(rows * c->hidden);
    int64_t lr = ((int64_t)16 << 20) / c->vocab; /* the engine's logit rows: 16 Mi floats' worth, at most all */
    lr = lr < rows ? lr : rows;
    if (want & ST_LOGITS)
        save += half_saving(lr * c->vocab);
    if (want & ST_X) /* x, and lt: its rows for the LM head */
        save += half_saving(rows * c->hidden) + half_saving(lr * c->hidden);
    return save;
}

/* the buffers a plain bf16 / fp16 run of the fixture holds at 2 bytes (docs/gpu.md "Activations at the dtype's
 * width"): the MLP's always; qkv unless MPT's clamp (in place, no 2-byte form), latent attention or linear
 * layers; att unless latent attention, linear layers or an output gate; h unless those
 * or MoE layers (the experts read it) or an embedding norm; tmp and mlp_c unless a norm works on them in
 * place (sandwich norms, a post-norm), tmp unless learned positions, latent attention or linear layers,
 * mlp_c unless MoE or linear layers; the logits unless the head is fp32 (NormHead) or a final soft-cap; x unless
 * Gemma's embedding scale, learned positions, an embedding norm, the output gate, MoE with a post-norm, latent
 * attention or linear layers */
static unsigned fixture_want(const rc_config *c)
{
    unsigned want = ST_MLP;
    const bool plain = !c->mla && c->n_linear == 0;
    if (plain && c->clip_qkv <= 0)
        want |= ST_QKV;
    if (plain && !c->attn_out_gate)
        want |= ST_ATT;
    if (plain && !c->attn_out_gate && c->n_experts == 0 && !c->embed_norm)
        want |= ST_H;
    const bool norm_after = c->sandwich_norm || c->post_norm;
    if (plain && !norm_after && c->pos != RC_POS_LEARNED)
        want |= ST_TMP;
    if (c->n_linear == 0 && c->n_experts == 0 && !norm_after)
        want |= ST_MLPC;
    if (!c->norm_head && !(c->final_softcap > 0))
        want |= ST_LOGITS;
    if (plain && c->hidden % 2 == 0 && !(c->embed_scale > 0) && c->pos != RC_POS_LEARNED && !c->embed_norm &&
        !c->attn_out_gate && !(c->n_experts > 0 && c->post_norm))
        want |= ST_X;
    return want;
}

/* a fixture under numerics num and kernels k, once with fp32 activation storage and once as the engine
 * chooses: bitwise equal log-probs; the buffers of want (ST_*; ST_AUTO: fixture_want) are at the dtype's
 * width, the others fp32 (and the estimate falls by exactly act_saving, the shim's peak by at least that) */
enum { ST_AUTO = 256 };
static void act_compare(const char *name, const rc_numerics *num, rc_kernels k, unsigned want)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t V = m->cfg.vocab, R = k_alens[0] + k_alens[1] + k_alens[2];
    if (want == ST_AUTO)
        want = fixture_want(&m->cfg);
    rc_numerics n32 = *num, n16 = *num;
    n32.act_f32 = true;
    n16.act_f32 = false;
    act_result a, b;
    act_run(m, &n32, k, &a);
    act_run(m, &n16, k, &b);
    ck_assert(a.mlp_st == RC_F32 && a.qkv_st == RC_F32 && a.att_st == RC_F32 && a.h_st == RC_F32 &&
              a.tmp_st == RC_F32 && a.mlpc_st == RC_F32 && a.logits_st == RC_F32 && a.x_st == RC_F32);
    ck_assert_msg(b.mlp_st == (want & ST_MLP ? num->dt : RC_F32), "%s %s: mlp storage %s", name, dt_name(num->dt),
                  dt_name(b.mlp_st));
    ck_assert_msg(b.qkv_st == (want & ST_QKV ? num->dt : RC_F32), "%s %s: qkv storage %s", name, dt_name(num->dt),
                  dt_name(b.qkv_st));
    ck_assert_msg(b.att_st == (want & ST_ATT ? num->dt : RC_F32), "%s %s: att storage %s", name, dt_name(num->dt),
                  dt_name(b.att_st));
    ck_assert_msg(b.h_st == (want & ST_H ? num->dt : RC_F32), "%s %s: h storage %s", name, dt_name(num->dt),
                  dt_name(b.h_st));
    ck_assert_msg(b.tmp_st == (want & ST_TMP ? num->dt : RC_F32), "%s %s: tmp storage %s", name, dt_name(num->dt),
                  dt_name(b.tmp_st));
    ck_assert_msg(b.mlpc_st == (want & ST_MLPC ? num->dt : RC_F32), "%s %s: mlp_c storage %s", name,
                  dt_name(num->dt), dt_name(b.mlpc_st));
    ck_assert_msg(b.logits_st == (want & ST_LOGITS ? num->dt : RC_F32), "%s %s: logits storage %s", name,
                  dt_name(num->dt), dt_name(b.logits_st));
    ck_assert_msg(b.x_st == (want & ST_X ? num->dt : RC_F32), "%s %s: x storage %s", name, dt_name(num->dt),
                  dt_name(b.x_st));
    ck_assert_msg(memcmp(a.full, b.full, sizeof(float) * R * V) == 0, "%s %s %s: full forward differs", name,
                  dt_name(num->dt), rc_kernels_name(k));
    ck_assert_msg(memcmp(a.dec, b.dec, sizeof(float) * 4 * AB * V) == 0, "%s %s %s: cached decode differs", name,
                  dt_name(num->dt), rc_kernels_name(k));
    const int64_t save = act_saving(&m->cfg, want);
    ck_assert_msg(a.est - b.est == save, "%s: estimate %lld - %lld, expected %lld less", name, (long long)a.est,
                  (long long)b.est, (long long)save);
#ifdef RC_TEST_EMULATE
    /* the device's peak: the buffers' saving, and at least that (the 2-byte down GEMM's input needs no
     * converted copy) */
    if (want)
        ck_assert_msg(a.peak - b.peak >= save, "%s: peak %lld - %lld < %lld", name, a.peak, b.peak, (long long)save);
    else
        ck_assert_int_eq(a.peak, b.peak);
#endif
    act_free(&a);
    act_free(&b);
    rc_model_free(m);
}

/* dense (GQA), MoE (top-k; the grouped router with a dense first layer), ALiBi with biases and a non-gated
 * GELU MLP, learned positions with biases, a parallel residual, OLMo2's post-norm (the MLP reads the
 * residual stream), Gemma 3 (gated GELU, sandwich norms), Qwen2's biases */
static const char *const k_act_fixtures[] = {"llama_gqa",    "qwen3_moe",      "deepseek_v3_moe", "bloom_alibi",
                                             "gpt2_learned", "neox_parallel",  "olmo2_postnorm",  "gemma3_local",
                                             "qwen2_bias"};
#define N_ACT ((int)(sizeof k_act_fixtures / sizeof k_act_fixtures[0]))

/* _i: fixture, then bf16 engine / fp16 engine / bf16 invariant */
START_TEST(test_act16_bitwise)
{
    const int v = _i / N_ACT;
    rc_numerics num = rc_numerics_fp32();
    num.dt = v == 1 ? RC_F16 : RC_BF16;
    act_compare(k_act_fixtures[_i % N_ACT], &num, v == 2 ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE, ST_AUTO);
}
END_TEST

/* the rule (engine_act_st): residual=fp32 and autocast keep the values in the dtype (2 bytes, the same
 * results) but the residual stream (fp32 x; autocast's head tied to the embedding, as llama_gqa's, is an fp32
 * array: fp32 logits); --upcast
 * rope keeps RoPE's output fp32 (qkv fp32, the others 2-byte); --upcast lm_head the logits; --upcast softmax
 * changes only the scores; --upcast norm (an fp32 GEMM input: cuBLAS writes no 2-byte output from fp32
 * operands), an fp32 run, TP partials and fp8 weights keep them all fp32. Fixtures for the exclusions of a
 * plain run (fixture_want): Gemma 2's final soft-cap and sandwich norms, Baichuan2's NormHead (and its fp32
 * RoPE and attention), MPT's clamped qkv. */
START_TEST(test_act16_rule)
{
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    rc_numerics r = num;
    r.residual_f32 = true;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, ST_ALL & ~ST_X);
    r = num;
    r.mode = RC_PREC_AUTOCAST;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, ST_ALL & ~ST_LOGITS & ~ST_X);
    r = num;
    r.upcast = RC_UPCAST_ROPE;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, ST_ALL & ~ST_QKV);
    r = num;
    r.upcast = RC_UPCAST_LM_HEAD;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, ST_ALL & ~ST_LOGITS);
    r = num;
    r.upcast = RC_UPCAST_SOFTMAX;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, ST_ALL);
    r = num;
    r.upcast = RC_UPCAST_NORM;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, 0);
    r = rc_numerics_fp32();
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, 0);
    r = num;
    r.tp = 2;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, 0);
    r = num;
    r.wq.kind = RC_WQ_FP8;
    act_compare("llama_gqa", &r, RC_KERNELS_ENGINE, 0);
    const char *const excl[] = {"gemma2_softcap", "baichuan2_7b", "mpt_alibi"};
    for (int i = 0; i < 3; i++)
        act_compare(excl[i], &num, RC_KERNELS_ENGINE, ST_AUTO);
}
END_TEST

/* n values of dt (rounded from frand) as fp32 on the host, and their 2-byte bits */
static float *rand_dt(int64_t n, float scale, rc_dtype dt, uint16_t **bits)
{
    float *v = malloc((size_t)n * sizeof *v);
    *bits = malloc((size_t)n * sizeof **bits);
    ck_assert(v && *bits);
    for (int64_t i = 0; i < n; i++) {
        v[i] = rc_round_to(frand(scale), dt);
        (*bits)[i] = dt == RC_BF16 ? rc_f32_to_bf16(v[i]) : rc_f32_to_f16(v[i]);
    }
    return v;
}

/* device buffers: n floats, or n 2-byte elements (whole floats), uploaded as bytes */
static float *dev_f32(rc_backend *be, const float *host, int64_t n)
{
    float *d;
    ck_assert(be->ops->alloc(be, n, &d) == RC_OK);
    if (host)
        ck_assert(be->ops->upload(be, host, n, RC_F32, d) == RC_OK);
    return d;
}

static float *dev_16(rc_backend *be, const uint16_t *bits, int64_t n)
{
    float *d;
    const int64_t nf = n / 2 + n % 2;
    ck_assert(be->ops->alloc(be, nf, &d) == RC_OK);
    if (bits) {
        uint16_t *pad = calloc((size_t)(2 * nf), sizeof *pad);
        ck_assert(pad != NULL);
        memcpy(pad, bits, (size_t)n * sizeof *bits);
        ck_assert(be->ops->upload(be, (const float *)pad, nf, RC_F32, d) == RC_OK);
        free(pad);
    }
    return d;
}

/* a 2-byte device buffer's n elements widened on the host */
static float *host_16(rc_backend *be, const float *d, int64_t n, rc_dtype dt)
{
    const int64_t nf = n / 2 + n % 2;
    uint16_t *bits = malloc((size_t)(2 * nf) * sizeof *bits);
    float *v = malloc((size_t)n * sizeof *v);
    ck_assert(bits && v);
    ck_assert(be->ops->download(be, d, nf, (float *)bits) == RC_OK);
    for (int64_t i = 0; i < n; i++)
        v[i] = dt == RC_BF16 ? rc_bf16_to_f32(bits[i]) : rc_f16_to_f32(bits[i]);
    free(bits);
    return v;
}

static float *host_f32(rc_backend *be, const float *d, int64_t n)
{
    float *v = malloc((size_t)n * sizeof *v);
    ck_assert(v && be->ops->download(be, d, n, v) == RC_OK);
    return v;
}

/* The 2-byte ops against the fp32 ops on the same backend, bitwise: matmul_st writing a 2-byte y (with and
 * without a bias) and reading a 2-byte x; act_st and act_mul_st over 2-byte operands; over odd shapes,
 * bf16 and fp16, engine (cuBLAS) and invariant kernels. A 2-byte x or y with weights not at the dtype's
 * width is refused. */
START_TEST(test_act16_ops)
{
    const int64_t shapes[][3] = {{1, 64, 48}, {3, 100, 37}, {17, 256, 129}, {70, 96, 33}, {5, 1, 7}};
    const rc_act acts[] = {RC_ACT_SILU, RC_ACT_GELU_ERF, RC_ACT_GELU_TANH};
    for (int k = 0; k < 2; k++) {
        rc_backend *be;
        ck_assert_msg(test_backend_create(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE, &be) == RC_OK, "%s",
                      rc_last_error());
        ck_assert(be->ops->matmul_st && be->ops->act_st && be->ops->act_mul_st);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int di = 0; di < 2; di++) {
                const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
                const rc_dtype dt = di ? RC_F16 : RC_BF16;
                uint16_t *xb, *wb, *bb, *ub;
                float *x = rand_dt(M * K, 1.0f, dt, &xb), *W = rand_dt(N * K, 0.2f, dt, &wb);
                float *b = rand_dt(N, 1.0f, dt, &bb), *u = rand_dt(M * N, 2.0f, dt, &ub);
                float *dW = dev_16(be, wb, N * K), *dx = dev_f32(be, x, M * K), *dx16 = dev_16(be, xb, M * K);
                float *db = dev_f32(be, b, N), *dy = dev_f32(be, NULL, M * N), *dy16 = dev_16(be, NULL, M * N);
                const rc_wt wt = {dW, dt, false};
                for (int bias = 0; bias < 2; bias++) {
                    const float *bp = bias ? db : NULL;
                    ck_assert_msg(be->ops->matmul(be, dx, M, K, wt, N, bp, dt, dt, dy) == RC_OK, "%s",
                                  rc_last_error());
                    float *ref = host_f32(be, dy, M * N);
                    /* a 2-byte y from fp32 rows, and from 2-byte rows */
                    for (int xin = 0; xin < 2; xin++) {
                        ck_assert_msg(be->ops->matmul_st(be, xin ? (const void *)dx16 : dx, xin ? dt : RC_F32, M, K,
                                                         wt, N, bp, dt, dt, dy16, dt) == RC_OK,
                                      "%s", rc_last_error());
                        float *got = host_16(be, dy16, M * N, dt);
                        ck_assert_msg(memcmp(got, ref, sizeof(float) * M * N) == 0,
                                      "matmul_st %s %s M=%lld K=%lld N=%lld bias %d x16 %d: y differs", dt_name(dt),
                                      k ? "invariant" : "engine", (long long)M, (long long)K, (long long)N, bias, xin);
                        free(got);
                    }
                    /* a 2-byte x, an fp32 y */
                    ck_assert_msg(be->ops->matmul_st(be, dx16, dt, M, K, wt, N, bp, dt, dt, dy, RC_F32) == RC_OK,
                                  "%s", rc_last_error());
                    float *got = host_f32(be, dy, M * N);
                    ck_assert_msg(memcmp(got, ref, sizeof(float) * M * N) == 0, "matmul_st %s x16: y differs",
                                  dt_name(dt));
                    free(got);
                    free(ref);
                }
                /* act(gate) * up and act(x), each over the GEMM's output as gate / x */
                float *du = dev_f32(be, u, M * N), *du16 = dev_16(be, ub, M * N);
                for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
                    ck_assert(be->ops->matmul(be, dx, M, K, wt, N, NULL, dt, dt, dy) == RC_OK);
                    ck_assert(be->ops->matmul_st(be, dx, RC_F32, M, K, wt, N, NULL, dt, dt, dy16, dt) == RC_OK);
                    ck_assert(be->ops->act_mul(be, acts[ai], dy, du, M * N, dt, dt) == RC_OK);
                    ck_assert_msg(be->ops->act_mul_st(be, acts[ai], dy16, du16, M * N, dt, dt, dt) == RC_OK, "%s",
                                  rc_last_error());
                    float *r1 = host_f32(be, dy, M * N), *g1 = host_16(be, dy16, M * N, dt);
                    ck_assert_msg(memcmp(r1, g1, sizeof(float) * M * N) == 0, "act_mul_st %s act %d differs",
                                  dt_name(dt), (int)acts[ai]);
                    ck_assert(be->ops->act(be, acts[ai], dy, M * N, dt) == RC_OK);
                    ck_assert(be->ops->act_st(be, acts[ai], dy16, M * N, dt, dt) == RC_OK);
                    float *r2 = host_f32(be, dy, M * N), *g2 = host_16(be, dy16, M * N, dt);
                    ck_assert_msg(memcmp(r2, g2, sizeof(float) * M * N) == 0, "act_st %s act %d differs",
                                  dt_name(dt), (int)acts[ai]);
                    free(r1), free(g1), free(r2), free(g2);
                }
                /* refused: a 2-byte y from fp32 weights, a 2-byte x of the other dtype */
                ck_assert(be->ops->matmul_st(be, dx, RC_F32, M, K, rc_wt_f32(dx), K, NULL, dt, dt, dy16, dt) ==
                          RC_ERR_INTERNAL);
                ck_assert(be->ops->matmul_st(be, dx16, di ? RC_BF16 : RC_F16, M, K, wt, N, NULL, dt, dt, dy, RC_F32) ==
                          RC_ERR_INTERNAL);
                float *bufs[] = {dW, dx, dx16, db, dy, dy16, du, du16};
                for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
                    be->ops->free(be, bufs[i]);
                free(x), free(W), free(b), free(u), free(xb), free(wb), free(bb), free(ub);
            }
        rc_backend_destroy(be);
    }
}
END_TEST

/* norm_st, qk_norm_st, add_st and logprobs_st against norm, qk_norm, add and logprobs on the same backend,
 * bitwise: RMSNorm and LayerNorm (with and without a bias) into a 2-byte output; a q / k norm in place; a sum of a 2-byte and an fp32 operand into either,
 * of two 2-byte ones in place; the log-probs (full rows and targets; temperature 1 and 0.7; fp32 and the
 * dtype's log-softmax) of 2-byte logits; odd shapes, bf16 and fp16, engine and invariant kernels. A 2-byte
 * output of values of another dtype is refused. */
START_TEST(test_act16_ops_rows)
{
    const int64_t shapes[][2] = {{1, 64}, {3, 100}, {17, 257}, {40, 33}, {5, 1}};
    for (int k = 0; k < 2; k++) {
        rc_backend *be;
        ck_assert_msg(test_backend_create(k ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE, &be) == RC_OK, "%s",
                      rc_last_error());
        ck_assert(be->ops->norm_st && be->ops->qk_norm_st && be->ops->add_st && be->ops->logprobs_st);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int di = 0; di < 2; di++) {
                const int64_t M = shapes[si][0], H = shapes[si][1], n = M * H;
                const rc_dtype dt = di ? RC_F16 : RC_BF16;
                uint16_t *xb, *yb, *wb, *bb;
                float *x = rand_dt(n, 3.0f, dt, &xb), *y = rand_dt(n, 3.0f, dt, &yb);
                float *w = rand_dt(H, 1.0f, dt, &wb), *b = rand_dt(H, 0.5f, dt, &bb);
                float *dx = dev_f32(be, x, n), *dx16 = dev_16(be, xb, n), *dy = dev_f32(be, y, n);
                float *dy16 = dev_16(be, yb, n), *dw = dev_f32(be, w, H), *db = dev_f32(be, b, H);
                float *o32 = dev_f32(be, NULL, n), *o16 = dev_16(be, NULL, n);
                for (int kind = 0; kind < 3; kind++) { /* RMSNorm, LayerNorm with a bias, without */
                    const rc_norm_kind nk = kind ? RC_NORM_LAYER : RC_NORM_RMS;
                    const float *bp = kind == 1 ? db : NULL;
                    ck_assert(be->ops->norm(be, nk, dx, M, H, dw, bp, 1e-5, dt, dt, o32) == RC_OK);
                    float *r = host_f32(be, o32, n);
                    for (int io = 0; io < 3; io++) { /* fp32 in, 2-byte out; 2-byte in and out; 2-byte in, fp32 out */
                        const bool x16 = io > 0, o2 = io < 2;
                        ck_assert_msg(be->ops->norm_st(be, nk, x16 ? (const void *)dx16 : dx, x16 ? dt : RC_F32, M, H,
                                                       dw, bp, 1e-5, dt, dt, o2 ? o16 : o32, o2 ? dt : RC_F32) == RC_OK,
                                      "%s", rc_last_error());
                        float *g = o2 ? host_16(be, o16, n, dt) : host_f32(be, o32, n);
                        ck_assert_msg(memcmp(r, g, sizeof(float) * n) == 0,
                                      "norm_st %s kind %d in/out %d M=%lld H=%lld differs", dt_name(dt), kind, io,
                                      (long long)M, (long long)H);
                        free(g);
                    }
                    free(r);
                }
                ck_assert(be->ops->norm_st(be, RC_NORM_RMS, dx, RC_F32, M, H, dw, NULL, 1e-5, dt, RC_F32, o16, dt) ==
                          RC_ERR_INTERNAL);
                if (H >= 4) { /* q / k norm in place: 2 Q segments of H / 4, 1 K segment of H / 4, rows of H */
                    const int64_t sg = H / 4;
                    ck_assert(be->ops->qk_norm(be, dy, M, H, 2, sg, dw, 1, sg, dw + 1, 1e-6, dt, dt) == RC_OK);
                    ck_assert(be->ops->qk_norm_st(be, dy16, dt, M, H, 2, sg, dw, 1, sg, dw + 1, 1e-6, dt, dt) ==
                              RC_OK);
                    float *r = host_f32(be, dy, n), *g = host_16(be, dy16, n, dt);
                    ck_assert_msg(memcmp(r, g, sizeof(float) * n) == 0, "qk_norm_st %s M=%lld H=%lld differs",
                                  dt_name(dt), (long long)M, (long long)H);
                    free(r), free(g);
                    ck_assert(be->ops->upload(be, y, n, RC_F32, dy) == RC_OK); /* y again for the adds */
                    be->ops->free(be, dy16);
                    dy16 = dev_16(be, yb, n);
                }
                /* x + y: 2-byte x, fp32 y, into fp32 and into 2 bytes; both 2-byte, in place */
                ck_assert(be->ops->add(be, dx, dy, n, dt, o32) == RC_OK);
                float *r = host_f32(be, o32, n);
                ck_assert(be->ops->add_st(be, dx16, dt, dy, RC_F32, n, dt, o16, dt) == RC_OK);
                float *g1 = host_16(be, o16, n, dt);
                ck_assert(be->ops->add_st(be, dx16, dt, dy, RC_F32, n, dt, o32, RC_F32) == RC_OK);
                float *g2 = host_f32(be, o32, n);
                ck_assert(be->ops->add_st(be, dx16, dt, dy16, dt, n, dt, dy16, dt) == RC_OK);
                float *g3 = host_16(be, dy16, n, dt);
                ck_assert_msg(memcmp(r, g1, sizeof(float) * n) == 0 && memcmp(r, g2, sizeof(float) * n) == 0 &&
                                  memcmp(r, g3, sizeof(float) * n) == 0,
                              "add_st %s M=%lld H=%lld differs", dt_name(dt), (long long)M, (long long)H);
                free(r), free(g1), free(g2), free(g3);
                ck_assert(be->ops->add_st(be, dx16, dt, dy, RC_F32, n, RC_F32, o16, dt) == RC_ERR_INTERNAL);
                /* log-probs of M rows of V = H logits */
                int32_t *tg = malloc((size_t)M * sizeof *tg);
                float *f32 = malloc(sizeof(float) * n), *f16 = malloc(sizeof(float) * n);
                float t32[64], t16[64];
                ck_assert(tg && f32 && f16 && M <= 64);
                for (int64_t i = 0; i < M; i++)
                    tg[i] = (int32_t)((i * 7 + 1) % H);
                for (int v = 0; v < 4; v++) {
                    const float T = v & 1 ? 0.7f : 1.0f;
                    const rc_dtype lp = v & 2 ? dt : RC_F32;
                    ck_assert(be->ops->logprobs(be, dx, M, H, T, lp, f32, tg, t32) == RC_OK);
                    ck_assert_msg(be->ops->logprobs_st(be, dx16, dt, M, H, T, lp, f16, tg, t16) == RC_OK, "%s",
                                  rc_last_error());
                    ck_assert_msg(memcmp(f32, f16, sizeof(float) * n) == 0 && memcmp(t32, t16, sizeof(float) * M) == 0,
                                  "logprobs_st %s T %g lp %s M=%lld V=%lld differs", dt_name(dt), (double)T,
                                  dt_name(lp), (long long)M, (long long)H);
                }
                free(tg), free(f32), free(f16);
                float *bufs[] = {dx, dx16, dy, dy16, dw, db, o32, o16};
                for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
                    be->ops->free(be, bufs[i]);
                free(x), free(y), free(w), free(b), free(xb), free(yb), free(wb), free(bb);
            }
        rc_backend_destroy(be);
    }
}
END_TEST

void act_tests(TCase *tc)
{
    tcase_add_test(tc, test_act16_ops);
    tcase_add_test(tc, test_act16_ops_rows);
    tcase_add_loop_test(tc, test_act16_bitwise, 0, 3 * N_ACT);
    tcase_add_test(tc, test_act16_rule);
}
