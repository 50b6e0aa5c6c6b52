/* Each dtype rule against PyTorch on the same inputs.
 *
 * data/fixtures/ops/ops_{bf16,f16}.safetensors hold inputs and PyTorch's
 * outputs for every op (tools/make_op_fixtures.py; versions in its README).
 * Elementwise ops must be bitwise equal; GEMM, norm and softmax within 1 ulp
 * of the dtype. The max ulp measured is printed for the record. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_ops.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static const char *const k_files[] = {"ops_bf16.safetensors", "ops_f16.safetensors"};
static const rc_dtype k_dts[] = {RC_BF16, RC_F16};

static rc_safetensors *g_st;
static rc_dtype g_dt;
static const char *g_dtname;
static rc_backend *g_be[3]; /* invariant, engine, blas */

static void open_file(int i)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/ops/%s", k_files[i]);
    ck_assert_msg(rc_st_open_file(p, &g_st) == RC_OK, "%s", rc_last_error());
    g_dt = k_dts[i];
    g_dtname = i == 0 ? "bf16" : "fp16";
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &g_be[0]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &g_be[1]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_BLAS, &g_be[2]) == RC_OK);
}

static void close_file(void)
{
    rc_st_close(g_st);
    for (int i = 0; i < 3; i++)
        rc_backend_destroy(g_be[i]);
}

static float *get(const char *name, int64_t *n) { return rc_test_st_f32(g_st, name, n); }

static double get_scalar(const char *name)
{
    double v;
    ck_assert(rc_st_read_f64(g_st, name, 1, (int64_t[]){1}, &v) == RC_OK);
    return v;
}

/* distance in representable values of dt (both values representable in dt) */
static int64_t ulp_dist(float a, float b, rc_dtype dt)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT32_MAX;
    if (a == b)
        return 0;
    int32_t ia, ib;
    if (dt == RC_F32) {
        ia = (int32_t)rc_f32_bits(a);
        ib = (int32_t)rc_f32_bits(b);
    } else {
        uint16_t ha = dt == RC_BF16 ? rc_f32_to_bf16(a) : rc_f32_to_f16(a);
        uint16_t hb = dt == RC_BF16 ? rc_f32_to_bf16(b) : rc_f32_to_f16(b);
        ia = ha;
        ib = hb;
        if (ia & 0x8000)
            ia = -(ia & 0x7fff);
        if (ib & 0x8000)
            ib = -(ib & 0x7fff);
        return llabs((long long)ia - ib);
    }
    if (ia < 0)
        ia = INT32_MIN - ia;
    if (ib < 0)
        ib = INT32_MIN - ib;
    return llabs((long long)ia - (long long)ib);
}

/* max ulp distance over n values, and how many differ bitwise */
static int64_t max_ulp(const float *got, const float *want, int64_t n, rc_dtype dt, int64_t *n_diff)
{
    int64_t m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = ulp_dist(got[i], want[i], dt);
        bool same_bits = rc_f32_bits(got[i]) == rc_f32_bits(want[i]) || (isnan(got[i]) && isnan(want[i]));
        d += !same_bits;
        m = u > m ? u : m;
    }
    if (n_diff)
        *n_diff = d;
    return m;
}

static void report(const char *op, int64_t ulp, int64_t ndiff, int64_t n)
{
    printf("%-5s %-28s max %lld ulp, %lld of %lld differ bitwise\n", g_dtname, op, (long long)ulp,
           (long long)ndiff, (long long)n);
}

#define BITWISE(op, got, want, n)                                                               \
    do {                                                                                        \
        int64_t nd_;                                                                            \
        int64_t u_ = max_ulp(got, want, n, g_dt, &nd_);                                         \
        report(op, u_, nd_, n);                                                                 \
        ck_assert_msg(nd_ == 0, "%s %s: %lld of %lld differ (max %lld ulp)", g_dtname, op,      \
                      (long long)nd_, (long long)(n), (long long)u_);                           \
    } while (0)

/* BITWISE for values of another dtype than the file's (fp32 slopes, fp32 sums) */
#define BITWISE_T(op, got, want, n, dt)                                                         \
    do {                                                                                        \
        int64_t nd_;                                                                            \
        int64_t u_ = max_ulp(got, want, n, dt, &nd_);                                           \
        report(op, u_, nd_, n);                                                                 \
        ck_assert_msg(nd_ == 0, "%s %s: %lld of %lld differ (max %lld ulp)", g_dtname, op,      \
                      (long long)nd_, (long long)(n), (long long)u_);                           \
    } while (0)

#define WITHIN_1ULP(op, got, want, n, dt)                                                       \
    do {                                                                                        \
        int64_t nd_;                                                                            \
        int64_t u_ = max_ulp(got, want, n, dt, &nd_);                                           \
        report(op, u_, nd_, n);                                                                 \
        ck_assert_msg(u_ <= 1, "%s %s: max %lld ulp", g_dtname, op, (long long)u_);             \
    } while (0)

START_TEST(test_round)
{
    open_file(_i);
    int64_t n;
    float *x = get("round.x", &n), *want = get("round.out", &n);
    float *got = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        got[i] = rc_round_to(x[i], g_dt);
    BITWISE("round (.to(dt))", got, want, n);
    free(x); free(want); free(got);
    close_file();
}
END_TEST

START_TEST(test_elementwise)
{
    open_file(_i);
    const char *ops[] = {"add", "sub", "mul"};
    for (int o = 0; o < 3; o++) {
        char na[64], nb[64], no[64];
        snprintf(na, sizeof na, "%s.a", ops[o]);
        snprintf(nb, sizeof nb, "%s.b", ops[o]);
        snprintf(no, sizeof no, "%s.out", ops[o]);
        int64_t n;
        float *a = get(na, &n), *b = get(nb, &n), *want = get(no, &n);
        float *got = malloc(sizeof(float) * n);
        if (o == 0) { /* the residual add is a backend op */
            ck_assert(g_be[0]->ops->add(g_be[0], a, b, n, g_dt, got) == RC_OK);
        } else {
            for (int64_t i = 0; i < n; i++)
                got[i] = rc_round_to(o == 1 ? a[i] - b[i] : a[i] * b[i], g_dt);
        }
        BITWISE(ops[o], got, want, n);
        free(a); free(b); free(want); free(got);
    }
    close_file();
}
END_TEST

/* tensor * Python float and tensor / Python float: the scalar becomes a
 * float32, the op runs in fp32, one rounding (the temperature rule). */
START_TEST(test_scalar_ops)
{
    open_file(_i);
    const char *ops[] = {"mul_scalar", "mul_scalar2", "mul_scalar3", "div_scalar", "div_scalar2"};
    for (int o = 0; o < 5; o++) {
        char na[64], ns[64], no[64];
        snprintf(na, sizeof na, "%s.a", ops[o]);
        snprintf(ns, sizeof ns, "%s.s", ops[o]);
        snprintf(no, sizeof no, "%s.out", ops[o]);
        int64_t n;
        float *a = get(na, &n), *want = get(no, &n);
        float s = (float)get_scalar(ns);
        float *got = malloc(sizeof(float) * n);
        bool div = strncmp(ops[o], "div", 3) == 0;
        for (int64_t i = 0; i < n; i++)
            got[i] = rc_round_to(div ? a[i] / s : a[i] * s, g_dt);
        BITWISE(ops[o], got, want, n);
        free(a); free(want); free(got);
    }
    close_file();
}
END_TEST

START_TEST(test_linear)
{
    open_file(_i);
    int64_t nx, nw, nb, no;
    float *x = get("linear.x", &nx), *w = get("linear.w", &nw), *b = get("linear.b", &nb);
    float *want = get("linear.out", &no), *want_nb = get("linear_nobias.out", &no);
    const int64_t K = 256, N = nb, M = nx / K;
    float *got = malloc(sizeof(float) * no);
    const char *names[] = {"linear (invariant)", "linear (engine)", "linear (blas)"};
    for (int k = 0; k < 3; k++) {
        ck_assert(g_be[k]->ops->matmul(g_be[k], x, M, K, rc_wt_f32(w), N, b, RC_F32, g_dt, got) == RC_OK);
        WITHIN_1ULP(names[k], got, want, no, g_dt);
        ck_assert(g_be[k]->ops->matmul(g_be[k], x, M, K, rc_wt_f32(w), N, NULL, RC_F32, g_dt, got) == RC_OK);
        WITHIN_1ULP("linear without bias", got, want_nb, no, g_dt);
    }
    free(x); free(w); free(b); free(want); free(want_nb); free(got);
    close_file();
}
END_TEST

START_TEST(test_norms)
{
    open_file(_i);
    int64_t n, nh;
    float *x = get("layernorm.x", &n), *w = get("layernorm.w", &nh), *b = get("layernorm.b", &nh);
    float *want = get("layernorm.out", &n);
    float *got = malloc(sizeof(float) * n);
    const int64_t H = nh, M = n / H;
    for (int k = 0; k < 2; k++) {
        ck_assert(g_be[k]->ops->norm(g_be[k], RC_NORM_LAYER, x, M, H, w, b, get_scalar("layernorm.eps"), g_dt,
                                     g_dt, got) == RC_OK);
        WITHIN_1ULP("layernorm", got, want, n, g_dt);
    }
    free(x); free(w); free(b); free(want);
    x = get("rmsnorm.x", &n);
    w = get("rmsnorm.w", &nh);
    want = get("rmsnorm.out", &n);
    float *normed = get("rmsnorm.normed", &n);
    float *ones = malloc(sizeof(float) * H);
    for (int64_t i = 0; i < H; i++)
        ones[i] = 1.0f;
    for (int k = 0; k < 2; k++) {
        double eps = get_scalar("rmsnorm.eps");
        /* the normalised value (first cast), then the weight multiply (second) */
        ck_assert(g_be[k]->ops->norm(g_be[k], RC_NORM_RMS, x, M, H, ones, NULL, eps, g_dt, g_dt, got) == RC_OK);
        WITHIN_1ULP("rmsnorm (normalised, cast)", got, normed, n, g_dt);
        ck_assert(g_be[k]->ops->norm(g_be[k], RC_NORM_RMS, x, M, H, w, NULL, eps, g_dt, g_dt, got) == RC_OK);
        WITHIN_1ULP("rmsnorm (LlamaRMSNorm)", got, want, n, g_dt);
    }
    /* the weight multiply alone, from torch's own intermediate: bitwise */
    for (int64_t i = 0; i < n; i++)
        got[i] = rc_round_to(w[i % H] * normed[i], g_dt);
    BITWISE("rmsnorm weight * cast(normed)", got, want, n);
    free(x); free(w); free(want); free(normed); free(ones); free(got);
    close_file();
}
END_TEST

START_TEST(test_softmax)
{
    open_file(_i);
    int64_t n;
    float *x = get("softmax.x", &n), *want = get("softmax.out", &n), *want32 = get("softmax.out_f32", &n);
    const int64_t T = 100, M = n / T;
    float *got = malloc(sizeof(float) * n);
    const char *names[] = {"softmax (one pass)", "softmax (online tiles)", "softmax (split chunks)"};
    for (int mode = 0; mode < 3; mode++) {
        memcpy(got, x, sizeof(float) * n);
        for (int64_t r = 0; r < M; r++)
            rc_cpu_softmax(got + r * T, T, mode, g_dt);
        WITHIN_1ULP(names[mode], got, want, n, g_dt);
    }
    memcpy(got, x, sizeof(float) * n);
    for (int64_t r = 0; r < M; r++)
        rc_cpu_softmax(got + r * T, T, 0, RC_F32);
    int64_t nd, u = max_ulp(got, want32, n, RC_F32, &nd);
    report("softmax fp32 output (info)", u, nd, n);
    free(x); free(want); free(want32); free(got);
    close_file();
}
END_TEST

START_TEST(test_activations)
{
    open_file(_i);
    int64_t n;
    float *x = get("gelu.x", &n);
    float *got = malloc(sizeof(float) * n);
    const char *outs[] = {"gelu.out", "gelu_tanh.out", "silu.out"};
    const rc_act acts[] = {RC_ACT_GELU_ERF, RC_ACT_GELU_TANH, RC_ACT_SILU};
    for (int a = 0; a < 3; a++) {
        float *want = get(outs[a], &n);
        memcpy(got, x, sizeof(float) * n);
        ck_assert(g_be[0]->ops->act(g_be[0], acts[a], got, n, g_dt) == RC_OK);
        if (acts[a] != RC_ACT_SILU) {
            /* The erf GELU is x * 0.5 * (1 + erf(x / sqrt 2)) in fp32, as
             * PyTorch's CUDA kernel computes it. For x < -2 the 1 + erf(..)
             * cancels, and torch's CPU kernels (oneDNN for bf16, which also
             * flushes subnormal results; ATen's vectorised erf for fp16) give
             * other last bits than CUDA's formula (data/fixtures/ops/README.md:
             * up to 13215 ulp from the exact value for bf16). Compare where the
             * formula is well conditioned. */
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++)
                if (x[i] >= -2.0f && x[i] <= 1e30f && (x[i] == 0.0f || fabsf(want[i]) >= 0x1p-126f)) {
                    got[m] = got[i];
                    want[m] = want[i];
                    m++;
                }
            printf("%-5s %s: compared %lld of %lld inputs (-2 <= x <= 1e30, normal results)\n", g_dtname,
                   outs[a], (long long)m, (long long)n);
            /* erff differs between libms in the last fp32 bit (glibc vs
             * torch's vectorised erf), which can flip the dtype rounding */
            WITHIN_1ULP(outs[a], got, want, m, g_dt);
        } else {
            WITHIN_1ULP(outs[a], got, want, n, g_dt);
        }
        free(want);
    }
    float *g = get("silu_mul.g", &n), *u = get("silu_mul.u", &n), *want = get("silu_mul.out", &n);
    memcpy(got, g, sizeof(float) * n);
    ck_assert(g_be[0]->ops->act_mul(g_be[0], RC_ACT_SILU, got, u, n, g_dt, g_dt) == RC_OK);
    BITWISE("silu(g) * u", got, want, n);
    free(g); free(u); free(want); free(x); free(got);
    close_file();
}
END_TEST

/* Llama RoPE (cos/sin cast to dt, three roundings) and GPT-NeoX 4.40 RoPE
 * (fp32 cos/sin, fp32 result), through the backend op on a one-head layout. */
START_TEST(test_rope)
{
    open_file(_i);
    int64_t n, nf;
    float *q = get("rope.q", &n), *inv = get("rope.inv_freq", &nf), *want = get("rope.out", &n);
    float *wcos = get("rope.cos", &n), *wsin = get("rope.sin", &n);
    const int64_t T = 40, d = 64;
    int32_t pos32[40];
    ck_assert(rc_st_read_i32(g_st, "rope.pos", 1, (int64_t[]){T}, pos32) == RC_OK);
    /* our inv_freq from a config equals transformers' */
    rc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_heads = 1;
    cfg.n_kv_heads = 1;
    cfg.head_dim = d;
    cfg.rotary_dim = d;
    cfg.rope_theta = 10000.0;
    cfg.rope_type = RC_ROPE_DEFAULT;
    float ours[32];
    rc_rope_inv_freq(&cfg, ours);
    BITWISE("rope inv_freq", ours, inv, nf);
    /* cos / sin tables */
    float *gc = malloc(sizeof(float) * T * d), *gs = malloc(sizeof(float) * T * d);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < d; j++) {
            float f = (float)pos32[t] * inv[j % (d / 2)];
            gc[t * d + j] = rc_round_to(cosf(f), g_dt);
            gs[t * d + j] = rc_round_to(sinf(f), g_dt);
        }
    BITWISE("rope cos", gc, wcos, T * d);
    BITWISE("rope sin", gs, wsin, T * d);
    /* packed rows [q | k | v] with q in the Q slot */
    int64_t posl[40], seq[40], z = 0, slot = 0, start = 0, nn = T;
    for (int64_t t = 0; t < T; t++) {
        posl[t] = pos32[t];
        seq[t] = 0;
    }
    rc_batch_desc bd = {.n_seq = 1, .slot = &slot, .start = &start, .n_new = &nn, .row0 = &z, .n_rows = T,
                        .pos = posl, .seq_of_row = seq};
    float *rows = malloc(sizeof(float) * T * 3 * d), *got = malloc(sizeof(float) * T * d);
    for (int64_t t = 0; t < T; t++) {
        memcpy(rows + t * 3 * d, q + t * d, sizeof(float) * d);
        memcpy(rows + t * 3 * d + d, q + t * d, sizeof(float) * d);
    }
    const rc_attn_params ap = rc_attn_params_from_config(&cfg, inv, g_dt, g_dt, &(rc_attn_numerics){g_dt, g_dt, g_dt});
    ck_assert(g_be[0]->ops->rope(g_be[0], rows, &bd, &ap) == RC_OK);
    for (int64_t t = 0; t < T; t++)
        memcpy(got + t * d, rows + t * 3 * d, sizeof(float) * d);
    BITWISE("rope (Llama, dt)", got, want, T * d);
    /* GPT-NeoX 4.40: rotary 16 of 64 in fp32. torch's vectorised cos/sin and
     * glibc's cosf/sinf differ in the last bit for some angles: the tables
     * within 1 fp32 ulp, and the multiply/add rule bitwise on torch's tables. */
    float *inv16 = get("rope_f32.inv_freq", &nf), *want32 = get("rope_f32.out", &n);
    float *c32 = get("rope_f32.cos", &n), *s32 = get("rope_f32.sin", &n);
    cfg.rotary_dim = 16;
    rc_rope_inv_freq(&cfg, ours);
    BITWISE("rope inv_freq (rotary 16)", ours, inv16, nf);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < 16; j++) {
            float f = (float)pos32[t] * inv16[j % 8];
            gc[t * 16 + j] = cosf(f);
            gs[t * 16 + j] = sinf(f);
        }
    WITHIN_1ULP("rope cos (fp32)", gc, c32, T * 16, RC_F32);
    WITHIN_1ULP("rope sin (fp32)", gs, s32, T * 16, RC_F32);
    for (int64_t t = 0; t < T; t++) {
        memcpy(got + t * d, q + t * d, sizeof(float) * d);
        rc_cpu_rope_apply(got + t * d, c32 + t * 16, s32 + t * 16, 8, RC_F32);
    }
    int64_t nd;
    int64_t u = max_ulp(got, want32, T * d, RC_F32, &nd);
    report("rope (NeoX 4.40, fp32)", u, nd, T * d);
    ck_assert_msg(nd == 0, "fp32 RoPE: %lld differ (max %lld fp32 ulp)", (long long)nd, (long long)u);
    free(c32); free(s32);
    free(q); free(inv); free(want); free(wcos); free(wsin); free(gc); free(gs); free(rows); free(got);
    free(inv16); free(want32);
    close_file();
}
END_TEST

/* rc_attn_params that contradict themselves (ALiBi without slopes, slopes
 * without ALiBi, an unknown ALiBi mode, rotary dims under ALiBi) and the
 * finfo.min mask the kernels do not implement are refused with one line by
 * rope and attention, before anything is written, rather than ignored. */
START_TEST(test_attn_params_refused)
{
    rc_backend *be[3];
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_INVARIANT, &be[0]) == RC_OK);
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be[1]) == RC_OK);
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_BLAS, &be[2]) == RC_OK);
    rc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_heads = 2, cfg.n_kv_heads = 1, cfg.head_dim = 4, cfg.rotary_dim = 4, cfg.rope_theta = 10000.0;
    float inv[2] = {1.0f, 0.01f}, slopes[2] = {0.5f, 0.25f};
    const rc_attn_numerics an = {RC_BF16, RC_BF16, RC_BF16};
    const rc_attn_params ok = rc_attn_params_from_config(&cfg, inv, RC_BF16, RC_BF16, &an);
    ck_assert_int_eq(ok.pos, RC_ATTN_POS_ROTARY);
    ck_assert(ok.alibi_slopes == NULL && ok.mask == RC_MASK_SKIP && !ok.score_div);
    ck_assert(ok.scale == 0.5f);
    rc_attn_params alibi = ok;
    alibi.pos = RC_ATTN_POS_ALIBI, alibi.rotary_dim = 0, alibi.inv_freq = NULL;
    rc_attn_params_set_alibi(&alibi, slopes, false);
    rc_attn_params bad[5] = {alibi, ok, alibi, ok, alibi};
    const rc_status want[5] = {RC_ERR_INTERNAL, RC_ERR_INTERNAL, RC_ERR_INTERNAL, RC_ERR_UNSUPPORTED,
                               RC_ERR_INTERNAL};
    bad[0].alibi_slopes = NULL;                 /* ALiBi without slopes */
    bad[1].alibi_slopes = slopes;               /* slopes under rotary positions */
    bad[2].alibi_mode = RCO_ALIBI_NONE;         /* ALiBi positions without a way to add the bias */
    bad[3].mask = RC_MASK_FINFO_MIN;            /* not implemented */
    bad[4].rotary_dim = 4, bad[4].inv_freq = inv; /* rotary dims under ALiBi */
    /* one new token at position 3 after 3 cached ones: a cache of 4 positions */
    int64_t slot = 0, start = 3, nn = 1, row0 = 0, pos = 3, seq = 0;
    const rc_batch_desc bd = {.n_seq = 1, .slot = &slot, .start = &start, .n_new = &nn, .row0 = &row0,
                              .n_rows = 1, .pos = &pos, .seq_of_row = &seq};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 5; i++) {
            float qkv[16], before[16], out[8] = {0}, kc[16] = {0}, vc[16] = {0};
            for (int j = 0; j < 16; j++)
                qkv[j] = before[j] = 0.25f * (float)(j + 1);
            rc_kv_cache kv = {.n_layers = 1, .n_slots = 1, .n_kv_heads = 1, .max_len = 4, .head_dim = 4,
                              .k = kc, .v = vc};
            ck_assert_int_eq(be[k]->ops->rope(be[k], qkv, &bd, &bad[i]), want[i]);
            ck_assert_msg(strchr(rc_last_error(), '\n') == NULL, "%s", rc_last_error());
            ck_assert_int_eq(be[k]->ops->attention(be[k], qkv, &bd, &bad[i], &kv, 0, out), want[i]);
            ck_assert_msg(strstr(rc_last_error(), "attention") && strchr(rc_last_error(), '\n') == NULL, "%s",
                          rc_last_error());
            ck_assert(memcmp(qkv, before, sizeof qkv) == 0);
            for (int j = 0; j < 16; j++)
                ck_assert(kc[j] == 0.0f && vc[j] == 0.0f && (j >= 8 || out[j] == 0.0f));
            /* valid parameters (rotary, and ALiBi with its slopes) run */
            ck_assert_int_eq(be[k]->ops->rope(be[k], qkv, &bd, &ok), RC_OK);
            ck_assert_int_eq(be[k]->ops->attention(be[k], qkv, &bd, &ok, &kv, 0, out), RC_OK);
            ck_assert_int_eq(be[k]->ops->rope(be[k], qkv, &bd, &alibi), RC_OK);
            ck_assert_int_eq(be[k]->ops->attention(be[k], qkv, &bd, &alibi, &kv, 0, out), RC_OK);
        }
    for (int k = 0; k < 3; k++)
        rc_backend_destroy(be[k]);
}
END_TEST

START_TEST(test_logsoftmax)
{
    open_file(_i);
    int64_t n;
    float *x = get("logsoftmax.x", &n), *want = get("logsoftmax.out", &n), *want32 = get("logsoftmax.out_f32", &n);
    const int64_t V = 1000, M = n / V;
    float *got = malloc(sizeof(float) * n);
    /* --logprob-dtype same follows the CUDA kernel: fp32 inside, one rounding
     * of (x - max) - log(sum). torch's CPU kernel instead keeps the sum and its
     * log in the dtype: R((x - m) - R(log(R(sum)))), which the fixture's
     * logsoftmax.out shows (checked below), so our rule is compared with
     * torch's fp32 log_softmax rounded once. */
    ck_assert(g_be[0]->ops->logprobs(g_be[0], x, M, V, 1.0f, g_dt, got, NULL, NULL) == RC_OK);
    float *want_once = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        want_once[i] = rc_round_to(want32[i], g_dt);
    WITHIN_1ULP("log_softmax (dt, CUDA form)", got, want_once, n, g_dt);
    for (int64_t r = 0; r < M; r++) { /* the CPU form, to document it */
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t i = 0; i < V; i++)
            mx = fmaxf(mx, x[r * V + i]);
        for (int64_t i = 0; i < V; i++)
            sum += expf(x[r * V + i] - mx);
        float ls = rc_round_to(logf(rc_round_to(sum, g_dt)), g_dt);
        for (int64_t i = 0; i < V; i++)
            want_once[r * V + i] = rc_round_to((x[r * V + i] - mx) - ls, g_dt);
    }
    int64_t ndc, uc = max_ulp(want_once, want, n, g_dt, &ndc);
    report("torch CPU log_softmax form", uc, ndc, n);
    ck_assert_int_eq(ndc, 0);
    free(want_once);
    ck_assert(g_be[0]->ops->logprobs(g_be[0], x, M, V, 1.0f, RC_F32, got, NULL, NULL) == RC_OK);
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)got[i] - want32[i]));
    printf("%-5s log_softmax fp32 (fp64 log-sum-exp) max |diff| %.3e vs torch fp32\n", g_dtname, mx);
    ck_assert_msg(mx <= 4e-6, "fp32 log-softmax differs from torch by %g", mx);
    free(x); free(want); free(want32); free(got);
    close_file();
}
END_TEST

START_TEST(test_attention_matmuls)
{
    open_file(_i);
    int64_t n;
    float *q = get("matmul_scale.q", &n), *k = get("matmul_scale.k", &n), *want = get("matmul_scale.out", &n);
    const int64_t T = 40, d = 64;
    float *got = malloc(sizeof(float) * T * T);
    const float scale = (float)(1.0 / sqrt((double)d));
    for (int lanes = 8; lanes <= 16; lanes += 8) {
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++)
                got[i * T + j] = rc_cpu_score(q + i * d, k + j * d, d, lanes, scale, g_dt);
        WITHIN_1ULP(lanes == 8 ? "scores (q.k)*scale, 8 lanes" : "scores (q.k)*scale, 16 lanes", got, want,
                    T * T, g_dt);
    }
    float *p = get("pv.p", &n), *v = get("pv.v", &n), *wpv = get("pv.out", &n);
    float *out = malloc(sizeof(float) * T * d), acc[64];
    const int64_t tiles[] = {0, 32, 10};
    for (int ti = 0; ti < 3; ti++) {
        for (int64_t i = 0; i < T; i++) /* row i of P is causal: keys 0..i */
            rc_cpu_pv(p + i * T, v, i + 1, d, tiles[ti], g_dt, acc, out + i * d);
        WITHIN_1ULP("P.V", out, wpv, T * d, g_dt);
    }
    free(q); free(k); free(want); free(got); free(p); free(v); free(wpv); free(out);
    close_file();
}
END_TEST

/* ALiBi slopes: each family's fp32 slopes (rc_alibi_slopes_compute) against
 * the family's own code (BLOOM's _get_alibi_slopes, Baichuan-13B's
 * torch.Tensor(_get_interleave(n)), MPT's build_mpt_alibi_tensor with
 * alibi_bias_max 8 and 12), bitwise but for 1-ulp differences in three
 * tables: torch.pow runs each block of 32 powers through ATen's vectorised
 * pow (SLEEF's powf_u10 with AVX512, within 1 ulp but not correctly rounded)
 * and only the rest through std::pow (glibc powf, as ours). BLOOM: (2^-0.25)^15,
 * head 14 of 32 to 63 heads (bloom-3b, bloom-7b1: 32); MPT with 112 heads and
 * alibi_bias_max 12: 3 values. The counts are exact, so any other difference
 * fails. */
static const int64_t k_alibi_heads[] = {4, 6, 12, 32, 40, 64, 112};

/* bitwise, except exactly n_vec values 1 ulp apart (torch's vectorised pow) */
static void slopes_check(const char *op, const float *ours, const float *want, int64_t n, int64_t n_vec)
{
    int64_t nd, u = max_ulp(ours, want, n, RC_F32, &nd);
    report(op, u, nd, n);
    ck_assert_msg(u <= 1 && nd == n_vec, "%s %s: %lld differ (expected %lld), max %lld ulp", g_dtname, op,
                  (long long)nd, (long long)n_vec, (long long)u);
}

START_TEST(test_alibi_slopes)
{
    open_file(_i);
    float ours[112];
    char name[96], op[96];
    for (size_t i = 0; i < sizeof k_alibi_heads / sizeof k_alibi_heads[0]; i++) {
        const int64_t n = k_alibi_heads[i];
        rc_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_heads = n;
        int64_t m;
        cfg.alibi_slopes = RC_SLOPES_BAICHUAN;
        rc_alibi_slopes_compute(&cfg, ours, NULL);
        snprintf(name, sizeof name, "alibi_slopes.baichuan.h%lld", (long long)n);
        float *want = get(name, &m);
        ck_assert_int_eq(m, n);
        snprintf(op, sizeof op, "slopes baichuan, %lld heads", (long long)n);
        BITWISE_T(op, ours, want, n, RC_F32);
        free(want);
        for (int bmax = 8; bmax <= 12; bmax += 4) {
            cfg.alibi_slopes = RC_SLOPES_MPT;
            cfg.alibi_bias_max = bmax;
            rc_alibi_slopes_compute(&cfg, ours, NULL);
            snprintf(name, sizeof name, "alibi_slopes.mpt.h%lld.max%d", (long long)n, bmax);
            want = get(name, &m);
            snprintf(op, sizeof op, "slopes mpt, %lld heads, max %d", (long long)n, bmax);
            /* 112 heads, max 12: torch's 2^(k * 12/128) from the vector
             * kernel differs from powf in 3 values */
            slopes_check(op, ours, want, n, n == 112 && bmax == 12 ? 3 : 0);
            free(want);
        }
        cfg.alibi_slopes = RC_SLOPES_BLOOM;
        rc_alibi_slopes_compute(&cfg, ours, NULL);
        snprintf(name, sizeof name, "alibi_slopes.bloom.h%lld", (long long)n);
        want = get(name, &m);
        snprintf(op, sizeof op, "slopes bloom, %lld heads", (long long)n);
        /* 32 and 40 heads: torch's (2^-0.25)^15 from the vector kernel */
        slopes_check(op, ours, want, n, n == 32 || n == 40 ? 1 : 0);
        free(want);
    }
    close_file();
}
END_TEST

/* ALiBi scores as each family's code forms them (data/fixtures/ops/README.md):
 *   BLOOM     alibi.baddbmm(q, k^T, beta=1, alpha=1/sqrt(d)), alibi = R(fp32
 *             slope * position): R(R32(R32(q.k * alpha) + bias)) (FUSED);
 *   Baichuan  matmul(q, k^T) / math.sqrt(d) + mask (the fp32 mask cast to
 *             dt), added in dt: R(R(R(q.k) / sqrt d) + R(slope * pos)) (ADD);
 *   MPT       matmul(q, k^T) * softmax_scale + an fp32 table: fp32 sum of
 *             R(R(q.k) * scale) and R32(slope * (pos - last key)) (ADD, F32).
 * The spec is filled by hand from that rule and checked against the one the
 * engine builds from the family's config (rc_attn_params_from_config).
 * "exact" inputs make every fp32 q.k exact (no GEMM order), so the whole
 * rule must be bitwise. "split" (BLOOM only) are exact inputs whose q rows
 * were picked so that ~90 of the 3840 scores round differently when
 * baddbmm's alpha * q.k + bias is one fp32 FMA (or exact) instead of two
 * fp32 roundings: torch rounds twice, as ours. With N(0,1) inputs ("randn") torch's GEMM rounds
 * R(q.k) differently from our 16-lane dot in a few elements (as for
 * test_attention_matmuls): there the rule after the GEMM is checked bitwise
 * from torch's own R(q.k) (alibi_scores.randn.d128.qk, a one-element dot),
 * and every element of the full score that differs must have a differing
 * R(q.k) (Baichuan, MPT) or be within 1 ulp (BLOOM, whose fp32 q.k is not
 * observable). */
enum { SC_H = 12, SC_TQ = 8, SC_TK = 40 };

/* Two fp32 dot products of the same d terms in different orders differ by at
 * most 2 (d - 1) 2^-24 sum |q_i k_i|; where q.k cancels that is more than an
 * ulp of the dtype. a and b (then scaled by |scale|, and rounded to the
 * dtype) are as close as two GEMM orders can make them. */
static bool gemm_close(float a, float b, const float *q, const float *k, int64_t d, float scale)
{
    double s = 0;
    for (int64_t i = 0; i < d; i++)
        s += fabs((double)q[i] * k[i]);
    const double ulp = fmax(fabs(a), fabs(b)) * (g_dt == RC_BF16 ? 0x1p-7 : 0x1p-10);
    return fabs((double)a - b) <= 2.0 * (double)(d - 1) * 0x1p-24 * s * fabs(scale) + ulp;
}
static const char *const k_fams[] = {"bloom", "baichuan", "mpt"};

/* the spec of head h for family f: by hand (the rule above) */
static rco_score_spec alibi_spec(int f, int64_t d, const int32_t *dist, float slope)
{
    rco_score_spec sp;
    memset(&sp, 0, sizeof sp);
    char name[64];
    sp.score_dt = g_dt;
    sp.slope = slope;
    if (f == 0) {
        snprintf(name, sizeof name, "alibi_scores.bloom.d%lld.alpha", (long long)d);
        sp.scale = (float)get_scalar(name); /* BloomAttention.inv_norm_factor */
        sp.alibi = RCO_ALIBI_FUSED;
        sp.bias_dt = sp.add_dt = g_dt;
        sp.key0 = dist[0]; /* keys at positions dist[0].. */
        sp.ref = 0;
    } else if (f == 1) {
        snprintf(name, sizeof name, "alibi_scores.baichuan.d%lld.div", (long long)d);
        sp.scale = (float)get_scalar(name); /* math.sqrt(head_dim) */
        sp.div = 1;
        sp.alibi = RCO_ALIBI_ADD;
        sp.bias_dt = sp.add_dt = g_dt;
        sp.key0 = dist[0];
        sp.ref = 0;
    } else {
        snprintf(name, sizeof name, "alibi_scores.mpt.d%lld.scale", (long long)d);
        sp.scale = (float)get_scalar(name); /* MptAttention.softmax_scale */
        sp.alibi = RCO_ALIBI_ADD;
        sp.bias_dt = sp.add_dt = RC_F32;
        sp.key0 = 0;        /* keys 0..39 of the cache */
        sp.ref = -dist[0]; /* the call's last key */
    }
    return sp;
}

/* the engine's spec for the same head, from a config as models/{bloom,
 * baichuan,mpt}.c set it */
static rco_score_spec engine_spec(int f, int64_t d, const float *slopes, int64_t h, const int32_t *dist)
{
    rc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_heads = SC_H, cfg.n_kv_heads = SC_H, cfg.head_dim = d;
    cfg.pos = RC_POS_ALIBI;
    cfg.alibi_add = f == 0 ? RC_ALIBI_ADD_FUSED : f == 1 ? RC_ALIBI_ADD_MODEL_DT : RC_ALIBI_ADD_F32;
    cfg.score_div = f == 1;
    cfg.alibi_from_last_key = f == 2;
    const rc_attn_numerics an = {g_dt, g_dt, g_dt};
    rc_attn_params ap = rc_attn_params_from_config(&cfg, NULL, g_dt, g_dt, &an);
    rc_attn_params_set_alibi(&ap, slopes, false);
    const int64_t key0 = f == 2 ? 0 : dist[0], last = f == 2 ? -dist[0] : dist[SC_TK - 1];
    return rc_attn_score_spec(&ap, slopes, h, last, key0, last);
}

START_TEST(test_alibi_scores)
{
    open_file(_i);
    static const struct {
        const char *kind;
        int64_t d;
    } cases[] = {{"exact", 16}, {"exact", 128}, {"randn", 128}, {"split", 128}};
    const rc_alibi_slopes fam_slopes[] = {RC_SLOPES_BLOOM, RC_SLOPES_BAICHUAN, RC_SLOPES_MPT};
    char name[96], op[96];
    for (int c = 0; c < 4; c++) {
        const int64_t d = cases[c].d;
        const bool split = strcmp(cases[c].kind, "split") == 0; /* BLOOM, keys 0..39 only */
        const bool randn = strcmp(cases[c].kind, "randn") == 0;
        int64_t n;
        snprintf(name, sizeof name, "alibi_scores.%s.d%lld.q", cases[c].kind, (long long)d);
        float *q = get(name, &n);
        snprintf(name, sizeof name, "alibi_scores.%s.d%lld.k", cases[c].kind, (long long)d);
        float *k = get(name, &n);
        float *qk = NULL, *ourqk = malloc(sizeof(float) * SC_H * SC_TQ * SC_TK);
        const rco_score_spec plain = {.scale = 1.0f, .score_dt = g_dt, .alibi = RCO_ALIBI_NONE};
        for (int64_t h = 0; h < SC_H; h++) /* our R(q.k) */
            for (int64_t i = 0; i < SC_TQ; i++)
                for (int64_t j = 0; j < SC_TK; j++)
                    ourqk[(h * SC_TQ + i) * SC_TK + j] =
                        rc_cpu_score_spec(q + (h * SC_TQ + i) * d, k + j * d, d, 16, &plain, j);
        if (randn) {
            snprintf(name, sizeof name, "alibi_scores.randn.d%lld.qk", (long long)d);
            qk = get(name, &n);
            int64_t nd, u = max_ulp(ourqk, qk, n, g_dt, &nd);
            report("q.k (randn, GEMM)", u, nd, n);
            for (int64_t e = 0; e < n; e++)
                ck_assert_msg(ulp_dist(ourqk[e], qk[e], g_dt) <= 1 ||
                                  gemm_close(ourqk[e], qk[e], q + (e / SC_TK) * d, k + (e % SC_TK) * d, d, 1.0f),
                              "%s q.k %lld: %g vs torch %g", g_dtname, (long long)e, ourqk[e], qk[e]);
        }
        for (int f = 0; f < (split ? 1 : 3); f++) {
            rc_config cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.n_heads = SC_H;
            cfg.alibi_slopes = fam_slopes[f];
            cfg.alibi_bias_max = 8.0; /* MptModel passes no alibi_bias_max: the default 8 */
            float slopes[SC_H];
            rc_alibi_slopes_compute(&cfg, slopes, NULL);
            const rc_dtype out_dt = f == 2 ? RC_F32 : g_dt;
            for (int off = 0; off <= (split ? 0 : 3000); off += 3000) {
                int32_t dist[SC_TK];
                snprintf(name, sizeof name, "alibi_scores.%s.off%d.dist", k_fams[f], off);
                ck_assert(rc_st_read_i32(g_st, name, 1, (int64_t[]){SC_TK}, dist) == RC_OK);
                for (int j = 1; j < SC_TK; j++)
                    ck_assert_int_eq(dist[j], dist[j - 1] + 1);
                snprintf(name, sizeof name, "alibi_scores.%s.%s.d%lld.off%d", k_fams[f], cases[c].kind,
                         (long long)d, off);
                float *want = get(name, &n);
                ck_assert_int_eq(n, SC_H * SC_TQ * SC_TK);
                float *got = malloc(sizeof(float) * n), *rule = malloc(sizeof(float) * n);
                int64_t m = 0, n_masked = 0;
                const float one = 1.0f;
                /* Baichuan: keys after the query are masked (finfo.min); the
                 * kernels skip them, so only the others are compared */
                const int64_t kv = f == 2 ? -dist[0] + 1 : dist[SC_TK - 1] + 1;
                bool explained = true;
                for (int64_t h = 0; h < SC_H; h++) {
                    const rco_score_spec sp = alibi_spec(f, d, dist, slopes[h]);
                    const rco_score_spec es = engine_spec(f, d, slopes, h, dist);
                    ck_assert(es.scale == sp.scale && es.div == sp.div && es.score_dt == sp.score_dt &&
                              es.alibi == sp.alibi && rc_f32_bits(es.slope) == rc_f32_bits(sp.slope) &&
                              es.key0 - es.ref == sp.key0 - sp.ref && es.bias_dt == sp.bias_dt &&
                              es.add_dt == sp.add_dt);
                    for (int64_t i = 0; i < SC_TQ; i++)
                        for (int64_t j = 0; j < SC_TK; j++) {
                            const int64_t e = (h * SC_TQ + i) * SC_TK + j;
                            if (f == 1 && dist[j] > kv - SC_TQ + i) {
                                ck_assert_msg(want[e] == -(g_dt == RC_BF16 ? 0x1.fep127f : 65504.0f),
                                              "masked score %lld is not finfo.min", (long long)e);
                                n_masked++;
                                continue;
                            }
                            got[m] = rc_cpu_score_spec(q + (h * SC_TQ + i) * d, k + j * d, d, 16, &sp, j);
                            if (qk) /* the rule from torch's R(q.k): a one-element dot */
                                rule[m] = rc_cpu_score_spec(qk + e, &one, 1, 16, &sp, j);
                            if (qk && f != 0 && rc_f32_bits(got[m]) != rc_f32_bits(want[e]) &&
                                rc_f32_bits(ourqk[e]) == rc_f32_bits(qk[e]))
                                explained = false;
                            want[m] = want[e];
                            m++;
                        }
                }
                ck_assert_int_eq(n_masked, f == 1 ? SC_H * SC_TQ * (SC_TQ - 1) / 2 : 0);
                snprintf(op, sizeof op, "alibi %s %s d=%lld off %d", k_fams[f], cases[c].kind, (long long)d, off);
                int64_t nd, u = max_ulp(got, want, m, out_dt, &nd);
                report(op, u, nd, m);
                if (!randn) {
                    ck_assert_msg(nd == 0, "%s %s: %lld of %lld differ (max %lld ulp)", g_dtname, op, (long long)nd,
                                  (long long)m, (long long)u);
                } else {
                    if (f == 0) {
                        for (int64_t e = 0, h = 0; h < SC_H; h++)
                            for (int64_t i = 0; i < SC_TQ; i++)
                                for (int64_t j = 0; j < SC_TK; j++, e++)
                                    ck_assert_msg(ulp_dist(got[e], want[e], g_dt) <= 1 ||
                                                      gemm_close(got[e], want[e], q + (h * SC_TQ + i) * d, k + j * d,
                                                                 d, alibi_spec(f, d, dist, 0.0f).scale),
                                                  "%s %s: score %lld: %g vs torch %g", g_dtname, op, (long long)e,
                                                  got[e], want[e]);
                    } else {
                        ck_assert_msg(explained, "%s %s: a score differs where R(q.k) does not", g_dtname, op);
                        snprintf(op, sizeof op, "alibi %s randn d=%lld off %d, torch's R(q.k)", k_fams[f],
                                 (long long)d, off);
                        BITWISE_T(op, rule, want, m, out_dt);
                    }
                }
                free(want); free(got); free(rule);
            }
        }
        free(q); free(k); free(qk); free(ourqk);
    }
    close_file();
}
END_TEST

/* Baichuan2's NormHead: F.normalize(w) in the weight dtype, n = R(||w||)
 * (fp32 sum of squares, 16 lanes) clamped to R(1e-12) (the eps is cast to
 * the tensor's dtype: bf16 1.0019e-12, fp16 0, so a zero row is 0/0 = NaN
 * in fp16), then R(w / n). */
START_TEST(test_normhead)
{
    open_file(_i);
    const char *names[] = {"normhead", "normhead_big"};
    char name[64], op[64];
    for (int t = 0; t < 2; t++) {
        snprintf(name, sizeof name, "%s.w", names[t]);
        const rc_st_tensor *ti = rc_st_find(g_st, name);
        ck_assert(ti && ti->ndim == 2);
        const int64_t M = ti->shape[0], H = ti->shape[1];
        int64_t n;
        float *w = get(name, &n);
        snprintf(name, sizeof name, "%s.out", names[t]);
        float *want = get(name, &n);
        float *got = malloc(sizeof(float) * n);
        for (int k = 0; k < 2; k++) {
            ck_assert(g_be[k]->ops->normalize_rows(g_be[k], rc_wt_f32(w), M, H, 1e-12f, g_dt, got) == RC_OK);
            snprintf(op, sizeof op, "%s (F.normalize) [%lld,%lld]", names[t], (long long)M, (long long)H);
            WITHIN_1ULP(op, got, want, n, g_dt);
        }
        free(w); free(want); free(got);
    }
    close_file();
}
END_TEST

/* MPT's clip_qkv: mixed_qkv.clamp(min=-c, max=c) on the dt projection.
 * torch converts the Python float c to the tensor's dtype first, so the bound
 * is R(c): 0.3 clamps bf16 values to 0.30078125, and 0.30078125 itself stays.
 * The clamp is bitwise with that bound; with c as a plain float the results
 * are not even dt values (printed). */
START_TEST(test_clip_qkv)
{
    open_file(_i);
    int64_t n;
    float *x = get("clip_qkv.x", &n);
    float *got = malloc(sizeof(float) * n);
    const char *tags[] = {"a", "b"};
    char name[64], op[64];
    for (int t = 0; t < 2; t++) {
        snprintf(name, sizeof name, "clip_qkv.c_%s", tags[t]);
        const double c = get_scalar(name);
        snprintf(name, sizeof name, "clip_qkv.out_%s", tags[t]);
        float *want = get(name, &n);
        for (int k = 0; k < 2; k++) {
            memcpy(got, x, sizeof(float) * n);
            ck_assert(g_be[k]->ops->clamp(g_be[k], got, n, rc_round_to((float)c, g_dt)) == RC_OK);
            snprintf(op, sizeof op, "clamp(+-R(%g))", c);
            BITWISE(op, got, want, n);
        }
        memcpy(got, x, sizeof(float) * n);
        ck_assert(g_be[0]->ops->clamp(g_be[0], got, n, (float)c) == RC_OK);
        int64_t nd, u = max_ulp(got, want, n, RC_F32, &nd);
        snprintf(op, sizeof op, "clamp(+-%g), bound not cast (info)", c);
        report(op, u, nd, n);
        free(want);
    }
    free(x); free(got);
    close_file();
}
END_TEST

/* ---- GEMM order: the documented K order, independently written ---------- */

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float tree(float *v)
{
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            v[j] += v[j + w];
    return v[0];
}

/* README's GEMM order written from its words, not from ops_inline.h: chunks
 * of C, 16 lanes (k mod 16) from zero with fused multiply-adds; sums: each
 * chunk summed by the pairwise tree (j + 8, j + 4, j + 2, j + 1) and the
 * partial sums added in order; else each chunk added lane by lane into the
 * running lanes (the first chunk is them) and one tree at the end. fma_off:
 * multiply and add as two roundings instead. */
static float doc_dot(const float *a, const float *b, int64_t K, int64_t C, bool sums, bool fma_off)
{
    float run[16], lane[16], total = 0.0f;
    for (int64_t c0 = 0; c0 < K; c0 += C) {
        for (int j = 0; j < 16; j++)
            lane[j] = 0.0f;
        for (int64_t k = c0; k < K && k < c0 + C; k++) {
            volatile float p = a[k] * b[k];
            lane[(k - c0) % 16] = fma_off ? lane[(k - c0) % 16] + p : fmaf(a[k], b[k], lane[(k - c0) % 16]);
        }
        if (sums) {
            float t = tree(lane);
            total = c0 == 0 ? t : total + t;
        } else {
            for (int j = 0; j < 16; j++)
                run[j] = c0 == 0 ? lane[j] : run[j] + lane[j];
        }
    }
    if (K == 0)
        return 0.0f;
    return sums ? total : tree(run);
}

/* chunk length; *sums: split-K (partial sums) or K tiles (lanes) */
static int64_t doc_chunk(bool invariant, int64_t M, int64_t K, bool *sums)
{
    *sums = !invariant && M <= 256;
    if (invariant)
        return K > 0 ? K : 16;
    int64_t slices = M <= 16 ? 4 : 2;
    if (M > 256)
        return 128;
    int64_t c = (K + slices - 1) / slices;
    c = (c + 15) / 16 * 16;
    return c > 0 ? c : 16;
}

/* Every M class of each strategy and K with and without a 16-tail: the CPU
 * matmul (AVX-512 micro-kernels where the CPU has them, threads over blocks)
 * and rco_gemm_dot (the plain-C path and the CUDA twin) are bitwise the
 * documented order, with and without bias, fp32 and rounded outputs. */
START_TEST(test_gemm_order)
{
    static const int64_t Ms[] = {1, 3, 16, 17, 50, 256, 257, 301};
    static const int64_t Ks[] = {1, 15, 16, 33, 130, 257, 576};
    const int64_t N = 70;
    rc_backend *be[2];
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be[0]) == RC_OK);
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be[1]) == RC_OK);
    int64_t checked = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const int64_t M = Ms[mi], K = Ks[ki];
            float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
            float *bias = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * M * N);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = rnd();
            for (int64_t i = 0; i < N * K; i++)
                W[i] = rnd();
            for (int64_t i = 0; i < N; i++)
                bias[i] = rnd();
            for (int k = 0; k < 2; k++) {
                bool sums;
                const int64_t C = doc_chunk(k == 0, M, K, &sums);
                const rc_dtype out = (mi + ki + (size_t)k) % 2 ? RC_BF16 : RC_F32;
                const float *b = (mi + ki) % 3 ? bias : NULL;
                ck_assert(be[k]->ops->matmul(be[k], x, M, K, rc_wt_f32(W), N, b, RC_F32, out, y) == RC_OK);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        float v = doc_dot(x + m * K, W + n * K, K, C, sums, false);
                        float want = rc_round_to(b ? v + b[n] : v, out);
                        /* the written-once order (the portable CPU path, the CUDA invariant GEMM) */
                        if (n % 7 == 0) {
                            float r = rco_gemm_dot(x + m * K, W + n * K, K, 1,
                                                   rco_gemm_order_for(k == 0, M, K));
                            ck_assert_msg(rc_f32_bits(r) == rc_f32_bits(v),
                                          "rco_gemm_dot M=%lld K=%lld: %a, documented order %a", (long long)M,
                                          (long long)K, r, v);
                        }
                        ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                      "%s M=%lld K=%lld: y[%lld,%lld] = %a, documented order %a",
                                      k ? "engine" : "invariant", (long long)M, (long long)K, (long long)m,
                                      (long long)n, y[m * N + n], want);
                        checked++;
                    }
            }
            free(x); free(W); free(bias); free(y);
        }
    printf("gemm order: %lld outputs bitwise the documented order\n", (long long)checked);
    rc_backend_destroy(be[0]);
    rc_backend_destroy(be[1]);
}
END_TEST

/* ---- the bf16 pair order (engine GEMMs with bf16 operands) ---------------- */

/* docs/numerics.md's words: a denormal becomes a zero of its sign */
static float doc_flush(float v)
{
    return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

/* one lane over the pair (e, o = e + 1): odd element first, each step an fma
 * of the flushed operands into the flushed lane, the result flushed */
static float doc_pair(float lane, float ae, float be, float ao, float bo)
{
    lane = doc_flush(fmaf(doc_flush(ao), doc_flush(bo), doc_flush(lane)));
    return doc_flush(fmaf(doc_flush(ae), doc_flush(be), lane));
}

/* The pair order from docs/numerics.md (operands already bf16 values): chunks
 * of C (a multiple of 32), each padded with zeros to a multiple of 32; lane
 * j takes elements 2j + 1 then 2j of every block of 32; the chunks merge as
 * doc_dot's; a NaN is returned as 0x7fc00000. */
static float doc_pairs_dot(const float *a, const float *b, int64_t K, int64_t C, bool sums)
{
    float run[16], lane[16], total = 0.0f;
    for (int64_t c0 = 0; c0 < K; c0 += C) {
        const int64_t c1 = c0 + C < K ? c0 + C : K;
        for (int j = 0; j < 16; j++)
            lane[j] = 0.0f;
        for (int64_t blk = c0; blk < c1; blk += 32)
            for (int j = 0; j < 16; j++) {
                const int64_t e = blk + 2 * j, o = e + 1;
                lane[j] = doc_pair(lane[j], e < c1 ? a[e] : 0.0f, e < c1 ? b[e] : 0.0f, o < c1 ? a[o] : 0.0f,
                                   o < c1 ? b[o] : 0.0f);
            }
        if (sums) {
            float t = tree(lane);
            total = c0 == 0 ? t : total + t;
        } else {
            for (int j = 0; j < 16; j++)
                run[j] = c0 == 0 ? lane[j] : run[j] + lane[j];
        }
    }
    const float v = K == 0 ? 0.0f : sums ? total : tree(run);
    return v != v ? rc_bits_f32(0x7fc00000u) : v;
}

/* the engine's pair-order chunk: M <= 16 ceil(K / 4), M <= 256 ceil(K / 2),
 * each rounded up to 32 (partial sums); larger M tiles of 128 (lanes) */
static int64_t doc_pairs_chunk(int64_t M, int64_t K, bool *sums)
{
    *sums = M <= 256;
    if (M > 256)
        return 128;
    const int64_t slices = M <= 16 ? 4 : 2;
    const int64_t c = ((K + slices - 1) / slices + 31) / 32 * 32;
    return c > 0 ? c : 32;
}

/* a bf16 value: mostly rnd() (times 4 in x), and where `specials` a share of
 * denormals, values whose products fall near fp32's smallest normal,
 * infinities and NaNs */
static float pairs_val(bool specials, float scale)
{
    const float v = rnd();
    if (specials) {
        const uint64_t r = g_rng >> 40;
        switch (r % 29) {
        case 0: return rc_bf16_to_f32((uint16_t)(((r >> 8) & 0x7fu) | ((r >> 16) & 1u) << 15)); /* denormal */
        case 1:
        case 2: return rc_round_bf16(ldexpf(v, -63)); /* products near 2^-126 */
        case 3: return (r >> 8) & 1u ? INFINITY : -INFINITY;
        case 4: return ((r >> 8) % 7u) ? rc_round_bf16(ldexpf(v, -60)) : NAN;
        default: break;
        }
    }
    return rc_round_bf16(v * scale);
}

/* Engine GEMMs with bf16 operands are bitwise docs/numerics.md's pair order,
 * written out above, on the path this process takes (vdpbf16ps, its FMA
 * emulation, or the plain-C twin: the meson tests ops_pair_order_* force
 * each), for every M class, K = 1, odd, with and without a 32-tail, bf16 and
 * fp32 storage of the weights, K-slices, bias, fp32 and bf16 outputs, with
 * denormals, infinities and NaNs; and rco_gemm_dot (the plain-C twin, the
 * CUDA host build's) agrees. */
START_TEST(test_gemm_pair_order)
{
    static const int64_t Ms[] = {1, 5, 16, 17, 256, 257, 301};
    static const int64_t Ks[] = {1, 2, 15, 31, 32, 33, 77, 130, 257, 576};
    const int64_t N = 70;
    const char *path = rc_cpu_gemm_pairs_path();
    const char *no_bf16 = getenv("RC_NO_AVX512BF16"), *portable = getenv("RC_GEMM_PORTABLE");
    uint16_t probe_a[32] = {0}, probe_b[32] = {0};
    float probe_acc[16] = {0};
    const bool have = rc_cpu_dpbf16_raw(probe_a, probe_b, probe_acc);
    printf("gemm pair order: path %s (CPU %s vdpbf16ps)\n", path, have ? "has" : "lacks");
    if (portable)
        ck_assert_str_eq(path, "plain C");
    else if (no_bf16 || !have)
        ck_assert_str_ne(path, "vdpbf16ps");
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    int64_t checked = 0, nonfinite = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const int64_t M = Ms[mi], K = Ks[ki];
            const bool specials = (mi + ki) % 3 == 1;
            float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
            uint16_t *Wb = malloc(sizeof(uint16_t) * N * K);
            float *bias = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * M * N);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = pairs_val(specials, 4.0f);
            for (int64_t i = 0; i < N * K; i++) {
                W[i] = pairs_val(specials, 1.0f);
                Wb[i] = rc_f32_to_bf16(W[i]);
            }
            for (int64_t i = 0; i < N; i++)
                bias[i] = rc_round_bf16(rnd());
            bool sums;
            const int64_t C = doc_pairs_chunk(M, K, &sums);
            for (int st = 0; st < 2; st++) {
                const rc_wt wt = st ? (rc_wt){Wb, RC_BF16, false} : rc_wt_f32(W);
                const rc_dtype out = (mi + ki + (size_t)st) % 2 ? RC_BF16 : RC_F32;
                const float *b = (mi + ki + (size_t)st) % 3 ? bias : NULL;
                ck_assert(be->ops->matmul(be, x, M, K, wt, N, b, RC_BF16, out, y) == RC_OK);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        const float v = doc_pairs_dot(x + m * K, W + n * K, K, C, sums);
                        const float want = rc_round_to(b ? v + b[n] : v, out);
                        if (n % 7 == 0 && st == 0) {
                            const float r = rco_gemm_dot(x + m * K, W + n * K, K, 1,
                                                         rco_gemm_order_dt(0, M, K, RC_BF16));
                            ck_assert_msg(rc_f32_bits(r) == rc_f32_bits(v),
                                          "rco_gemm_dot pairs M=%lld K=%lld: %a, documented order %a",
                                          (long long)M, (long long)K, r, v);
                        }
                        ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                      "pairs (%s) M=%lld K=%lld W %s: y[%lld,%lld] = %a, documented order %a", path,
                                      (long long)M, (long long)K, st ? "bf16" : "fp32", (long long)m, (long long)n,
                                      y[m * N + n], want);
                        nonfinite += !isfinite(want);
                        checked++;
                    }
            }
            /* a K-slice, read in place: the order of a GEMM of depth Ks */
            if (K >= 3) {
                const int64_t k0 = K / 3, Kq = K - k0 - K / 5;
                bool ssum;
                const int64_t Cs = doc_pairs_chunk(M, Kq, &ssum);
                ck_assert(be->ops->matmul_kslice(be, x, M, K, k0, Kq, (rc_wt){Wb, RC_BF16, false}, N, NULL, RC_BF16,
                                                 RC_F32, y) == RC_OK);
                float *xs = malloc(sizeof(float) * Kq), *ws = malloc(sizeof(float) * Kq);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        memcpy(xs, x + m * K + k0, sizeof(float) * Kq);
                        memcpy(ws, W + n * K + k0, sizeof(float) * Kq);
                        const float want = doc_pairs_dot(xs, ws, Kq, Cs, ssum);
                        ck_assert_msg(rc_f32_bits(y[m * N + n]) == rc_f32_bits(want),
                                      "pairs (%s) M=%lld K=%lld slice [%lld, +%lld): y[%lld,%lld] = %a, documented %a",
                                      path, (long long)M, (long long)K, (long long)k0, (long long)Kq, (long long)m,
                                      (long long)n, y[m * N + n], want);
                        checked++;
                    }
                free(xs);
                free(ws);
            }
            free(x); free(W); free(Wb); free(bias); free(y);
        }
    printf("gemm pair order (%s): %lld outputs bitwise the documented order (%lld not finite)\n", path,
           (long long)checked, (long long)nonfinite);
    ck_assert(nonfinite > 0 && nonfinite < checked / 2);
    rc_backend_destroy(be);
}
END_TEST

/* The instruction itself against the twin's arithmetic (rco_dpbf16_pair),
 * one lane at a time, on 4,000,000 lanes: bf16 operands with exponents over
 * the whole range (half the draws) or near 1, 3% zeros and denormals, 1%
 * infinities and NaNs; accumulators over fp32's whole range (denormals,
 * infinities and NaNs included), a quarter of them minus the first product
 * (cancellation). Bitwise, except that two NaNs compare equal (payloads are
 * not part of the order: the GEMM returns one quiet NaN). Without the
 * instruction there is nothing to compare, and it says so. */
static uint64_t g_dp = 0x9e3779b97f4a7c15ull;
static uint64_t dp_next(void)
{
    g_dp ^= g_dp << 13;
    g_dp ^= g_dp >> 7;
    g_dp ^= g_dp << 17;
    return g_dp;
}

static uint16_t dp_bf16(bool wide)
{
    const uint64_t r = dp_next();
    const unsigned c = (unsigned)(r % 100);
    const uint32_t e = c < 3 ? 0u : c < 4 ? 255u : wide ? (uint32_t)((r >> 8) % 256) : 110u + (uint32_t)((r >> 8) % 40);
    return (uint16_t)((((r >> 20) & 1u) << 15) | (e << 7) | ((r >> 24) & 127u));
}

static float dp_acc(void)
{
    const uint64_t r = dp_next();
    const unsigned c = (unsigned)(r % 100);
    if (c < 2)
        return 0.0f;
    const uint32_t e = c < 10 ? 0u : c < 11 ? 255u : (uint32_t)((r >> 8) % 256);
    return rc_bits_f32((uint32_t)(((r >> 20) & 1u) << 31 | e << 23 | ((r >> 30) & 0x7fffffu)));
}

START_TEST(test_dpbf16_twin)
{
    uint16_t a[32] = {0}, b[32] = {0};
    float acc[16], hw[16] = {0};
    if (!rc_cpu_dpbf16_raw(a, b, hw)) {
        printf("dpbf16 twin: this CPU has no vdpbf16ps; the GEMM takes path %s\n", rc_cpu_gemm_pairs_path());
        ck_assert_str_ne(rc_cpu_gemm_pairs_path(), "vdpbf16ps");
        return;
    }
    int64_t lanes = 0, nan = 0, differ = 0, flushed = 0, even_first = 0;
    for (int64_t it = 0; it < 250000; it++) {
        const bool wide = it & 1;
        for (int i = 0; i < 32; i++) {
            a[i] = dp_bf16(wide);
            b[i] = dp_bf16(wide);
        }
        for (int j = 0; j < 16; j++) {
            acc[j] = dp_acc();
            if ((it & 3) == 2 && (dp_next() & 1))
                acc[j] = -(rc_bf16_to_f32(a[2 * j + 1]) * rc_bf16_to_f32(b[2 * j + 1]));
            hw[j] = acc[j];
        }
        ck_assert(rc_cpu_dpbf16_raw(a, b, hw));
        for (int j = 0; j < 16; j++) {
            const float t = rco_dpbf16_pair(acc[j], rc_bf16_to_f32(a[2 * j]), rc_bf16_to_f32(b[2 * j]),
                                            rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]));
            const float plain = fmaf(rc_bf16_to_f32(a[2 * j]), rc_bf16_to_f32(b[2 * j]),
                                     fmaf(rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]), acc[j]));
            const float swapped = rco_dpbf16_pair(acc[j], rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]),
                                                  rc_bf16_to_f32(a[2 * j]), rc_bf16_to_f32(b[2 * j]));
            lanes++;
            if (t == t && hw[j] == hw[j])
                even_first += rc_f32_bits(swapped) != rc_f32_bits(hw[j]);
            if (t != t || hw[j] != hw[j]) {
                nan++;
                differ += !(t != t && hw[j] != hw[j]);
            } else {
                differ += rc_f32_bits(t) != rc_f32_bits(hw[j]);
                flushed += rc_f32_bits(plain) != rc_f32_bits(t);
            }
            if (differ == 1 && rc_f32_bits(t) != rc_f32_bits(hw[j]))
                ck_abort_msg("vdpbf16ps %a vs twin %a (acc %a, odd %a * %a, even %a * %a)", hw[j], t, acc[j],
                             rc_bf16_to_f32(a[2 * j + 1]), rc_bf16_to_f32(b[2 * j + 1]), rc_bf16_to_f32(a[2 * j]),
                             rc_bf16_to_f32(b[2 * j]));
        }
    }
    printf("dpbf16 twin: %lld lanes, %lld differ (%lld NaN, %lld where flushing changed the plain fma result; "
           "the even element first would differ on %lld)\n",
           (long long)lanes, (long long)differ, (long long)nan, (long long)flushed, (long long)even_first);
    ck_assert_int_eq(differ, 0);
    ck_assert(flushed > 1000 && nan > 1000 && even_first > 1000); /* the draws tell these apart */
}
END_TEST

/* The fused multiply-add changes nothing for bf16 and fp16 operands: their
 * products are exact in fp32 (8 x 8 and 11 x 11 significant bits), so the
 * documented order gives the same bits with the product rounded first. */
START_TEST(test_gemm_fma_neutral)
{
    const int64_t K = 3072, n = 400;
    float *a = malloc(sizeof(float) * K), *b = malloc(sizeof(float) * K);
    for (int dt = 0; dt < 2; dt++) {
        int64_t same = 0;
        for (int64_t t = 0; t < n; t++) {
            for (int64_t i = 0; i < K; i++) {
                a[i] = rc_round_to(rnd() * 4.0f, dt ? RC_F16 : RC_BF16);
                b[i] = rc_round_to(rnd() * 0.05f, dt ? RC_F16 : RC_BF16);
            }
            for (int c = 0; c < 2; c++) {
                int64_t C = c ? 128 : 784;
                same += rc_f32_bits(doc_dot(a, b, K, C, c, false)) == rc_f32_bits(doc_dot(a, b, K, C, c, true));
            }
        }
        ck_assert_msg(same == 2 * n, "%s: %lld of %lld dots differ with and without FMA", dt ? "fp16" : "bf16",
                      (long long)(2 * n - same), (long long)(2 * n));
        /* and for fp32 operands it does change results (the test can tell) */
        int64_t diff = 0;
        for (int64_t t = 0; t < 50; t++) {
            for (int64_t i = 0; i < K; i++) {
                a[i] = rnd();
                b[i] = rnd();
            }
            diff += rc_f32_bits(doc_dot(a, b, K, K, false, false)) != rc_f32_bits(doc_dot(a, b, K, K, false, true));
        }
        ck_assert_msg(diff > 0, "fp32 operands: FMA never changed a dot");
    }
    free(a);
    free(b);
}
END_TEST

/* Weights stored at 2 bytes (bf16 / fp16, as an engine of that dtype holds
 * them) give bitwise the results of the same values stored as fp32: every
 * strategy's GEMM (each M class, K with and without a 16-tail, the masked
 * tail loads), embed and normalize_rows widen them exactly. */
START_TEST(test_weights_2byte)
{
    static const int64_t Ms[] = {1, 5, 16, 17, 300};
    static const int64_t Ks[] = {15, 64, 257};
    const int64_t N = 37;
    static const rc_kernels kk[] = {RC_KERNELS_INVARIANT, RC_KERNELS_ENGINE, RC_KERNELS_BLAS};
    int64_t checked = 0;
    for (int dti = 0; dti < 2; dti++) {
        const rc_dtype dt = dti ? RC_F16 : RC_BF16;
        for (size_t ki = 0; ki < sizeof kk / sizeof *kk; ki++) {
            rc_backend *be;
            ck_assert(rc_backend_cpu_create(0, kk[ki], &be) == RC_OK);
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
                for (size_t ji = 0; ji < sizeof Ks / sizeof *Ks; ji++) {
                    const int64_t M = Ms[mi], K = Ks[ji];
                    float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
                    float *b = malloc(sizeof(float) * N), *y32 = malloc(sizeof(float) * M * N);
                    float *y16 = malloc(sizeof(float) * M * N);
                    uint16_t *W16 = malloc(sizeof(uint16_t) * N * K);
                    for (int64_t i = 0; i < M * K; i++)
                        x[i] = rc_round_to(rnd(), dt);
                    for (int64_t i = 0; i < N * K; i++) {
                        W[i] = rc_round_to(rnd() * 0.1f, dt);
                        W16[i] = dt == RC_BF16 ? rc_f32_to_bf16(W[i]) : rc_f32_to_f16(W[i]);
                    }
                    for (int64_t i = 0; i < N; i++)
                        b[i] = rnd();
                    ck_assert(be->ops->matmul(be, x, M, K, rc_wt_f32(W), N, b, dt, dt, y32) == RC_OK);
                    ck_assert(be->ops->matmul(be, x, M, K, (rc_wt){W16, dt, false}, N, b, dt, dt, y16) == RC_OK);
                    ck_assert_msg(memcmp(y32, y16, sizeof(float) * M * N) == 0,
                                  "%s %s weights M=%lld K=%lld: 2-byte storage changes the GEMM",
                                  rc_kernels_name(kk[ki]), rc_dtype_name(dt), (long long)M, (long long)K);
                    checked += M * N;
                    if (mi == 0 && ji == 2) { /* embed and normalize_rows: rows of [N, K] */
                        const int32_t tok[3] = {5, 0, (int32_t)N - 1};
                        float *n32 = malloc(sizeof(float) * N * K), *n16 = malloc(sizeof(float) * N * K);
                        ck_assert(be->ops->embed(be, tok, 3, rc_wt_f32(W), K, n32) == RC_OK);
                        ck_assert(be->ops->embed(be, tok, 3, (rc_wt){W16, dt, false}, K, n16) == RC_OK);
                        ck_assert(memcmp(n32, n16, sizeof(float) * 3 * K) == 0);
                        ck_assert(be->ops->normalize_rows(be, rc_wt_f32(W), N, K, 1e-12f, dt, n32) == RC_OK);
                        ck_assert(be->ops->normalize_rows(be, (rc_wt){W16, dt, false}, N, K, 1e-12f, dt, n16) ==
                                  RC_OK);
                        ck_assert(memcmp(n32, n16, sizeof(float) * N * K) == 0);
                        free(n32);
                        free(n16);
                    }
                    free(x); free(W); free(b); free(y32); free(y16); free(W16);
                }
            rc_backend_destroy(be);
        }
    }
    printf("2-byte weights: %lld GEMM outputs bitwise those of fp32 storage\n", (long long)checked);
}
END_TEST

/* bf16 activations come from a table of rco_act_dt over all 65536 bf16 inputs
 * (backend_cpu.c act_table): through the CPU backend's act and act_mul, every
 * bf16 value (NaNs, infinities, subnormals included) and values that are not
 * bf16 (computed directly) give rco_act_dt's bits, for every activation. */
START_TEST(test_act_table)
{
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    const int64_t n = 65536 + 1000;
    float *x = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *up = malloc(sizeof(float) * n);
    ck_assert(x && g && up);
    static const rc_act acts[] = {RC_ACT_GELU_ERF, RC_ACT_GELU_TANH, RC_ACT_SILU, RC_ACT_GELU_BLOOM, RC_ACT_GELU_NEW};
    int64_t checked = 0;
    for (size_t a = 0; a < sizeof acts / sizeof *acts; a++) {
        for (int64_t i = 0; i < n; i++) {
            x[i] = i < 65536 ? rc_bits_f32((uint32_t)i << 16) : 6.0f * rnd(); /* the tail: not bf16 values */
            up[i] = rc_round_to(rnd(), RC_BF16);
        }
        memcpy(g, x, sizeof(float) * n);
        ck_assert(be->ops->act(be, acts[a], g, n, RC_BF16) == RC_OK);
        for (int64_t i = 0; i < n; i++) {
            const float want = rco_act_dt(acts[a], x[i], RC_BF16);
            ck_assert_msg(rc_f32_bits(g[i]) == rc_f32_bits(want), "act %d x %a: %a, rco_act_dt %a", (int)acts[a],
                          (double)x[i], (double)g[i], (double)want);
        }
        memcpy(g, x, sizeof(float) * n);
        ck_assert(be->ops->act_mul(be, acts[a], g, up, n, RC_BF16, RC_BF16) == RC_OK);
        for (int64_t i = 0; i < n; i++) {
            const float want = rc_round_to(rco_act_dt(acts[a], x[i], RC_BF16) * up[i], RC_BF16);
            ck_assert_msg(rc_f32_bits(g[i]) == rc_f32_bits(want), "act_mul %d x %a: %a, want %a", (int)acts[a],
                          (double)x[i], (double)g[i], (double)want);
        }
        checked += 2 * n;
    }
    printf("bf16 activation table: %lld outputs bitwise rco_act_dt\n", (long long)checked);
    free(x);
    free(g);
    free(up);
    rc_backend_destroy(be);
}
END_TEST

static int64_t ulps64(double a, double b)
{
    int64_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x > y ? x - y : y - x;
}

/* rco_exp64 (the fp64 exp of the log-softmax's sum and of the sampler, the
 * same bits on the CPU and the GPU) against libm's exp (glibc: within 0.502
 * ulp of the true value) on 4M inputs over its whole range and where the
 * log-softmax uses it (z - max in [-40, 0]): within 1 ulp, the share of
 * exact results printed; the special values; the AVX-512 path
 * (rc_exp64_floats, and the CPU backend's fp32 log-probs) bitwise the
 * scalar function. */
START_TEST(test_exp64)
{
    uint64_t st = 12345;
    int64_t worst = 0, exact = 0;
    const int64_t n = 4000000;
    for (int64_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(st >> 11) * 0x1p-53;
        const double x = i % 2 ? -746.0 + u * (709.7 + 746.0) : -40.0 * u;
        const int64_t d = ulps64(rco_exp64(x), exp(x));
        worst = d > worst ? d : worst;
        exact += d == 0;
    }
    printf("rco_exp64: max %lld ulp from libm's exp over %lld inputs, %.2f%% bitwise equal\n", (long long)worst,
           (long long)n, 100.0 * (double)exact / (double)n);
    ck_assert_int_le(worst, 1);
    ck_assert(rco_exp64(0.0) == 1.0 && rco_exp64(-0.0) == 1.0);
    ck_assert(rco_exp64(-INFINITY) == 0.0 && rco_exp64(-750.0) == 0.0 && rco_exp64(-1e300) == 0.0);
    ck_assert(isinf(rco_exp64(710.5)) && isinf(rco_exp64(INFINITY)) && isnan(rco_exp64(NAN)));
    ck_assert_int_le(ulps64(rco_exp64(-740.0), exp(-740.0)), 1); /* a subnormal result */
    ck_assert_int_le(ulps64(rco_exp64(709.0), exp(709.0)), 1);

    /* the vector path: 8 lanes and the scalar tail, specials in every lane position */
    enum { NF = 100003 };
    float *xf = malloc(NF * sizeof *xf);
    double *ef = malloc(NF * sizeof *ef);
    ck_assert(xf && ef);
    static const float sp[] = {-INFINITY, NAN, -750.0f, -745.1f, -744.0f, -708.5f, 1e-40f, -0.0f, 0.0f, 711.0f,
                               709.7f, INFINITY, -1e-30f, -103.97f, 88.7f};
    for (int64_t i = 0; i < NF; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        xf[i] = i % 17 == 3 ? sp[(i / 17) % (sizeof sp / sizeof *sp)]
                            : (float)(-60.0 + 70.0 * (double)(st >> 11) * 0x1p-53);
    }
    rc_exp64_floats(xf, NF, ef);
    for (int64_t i = 0; i < NF; i++) {
        const double want = rco_exp64((double)xf[i]);
        ck_assert_msg(memcmp(&want, &ef[i], sizeof want) == 0, "rc_exp64_floats x[%lld] = %a: %a, scalar %a",
                      (long long)i, (double)xf[i], ef[i], want);
    }

    /* the CPU backend's fp32 log-probs (its AVX-512 sum) bitwise rco_logprob_row */
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    static const int64_t Vs[] = {1, 7, 8, 9, 1000, 50257};
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++)
        for (int t = 0; t < 2; t++) {
            const int64_t V = Vs[vi], M = 3;
            const float T = t ? 0.7f : 1.0f;
            float *x = malloc(sizeof(float) * M * V), *full = malloc(sizeof(float) * M * V);
            float tgt[3], want_full, want_tgt = NAN;
            int32_t targets[3];
            ck_assert(x && full);
            for (int64_t i = 0; i < M * V; i++)
                x[i] = i % 11 == 5 ? -INFINITY : 8.0f * rnd();
            x[0] = 3.0f; /* one finite logit per row at least */
            x[V] = 2.0f;
            x[2 * V] = 1.0f;
            for (int r = 0; r < M; r++)
                targets[r] = (int32_t)((r * 7919) % V);
            ck_assert(be->ops->logprobs(be, x, M, V, T, RC_F32, full, targets, tgt) == RC_OK);
            for (int64_t r = 0; r < M; r++) {
                float *row = malloc(sizeof(float) * V);
                ck_assert(row);
                rco_logprob_row(x + r * V, V, T, RC_F32, row, targets[r], &want_tgt);
                ck_assert_msg(rc_f32_bits(tgt[r]) == rc_f32_bits(want_tgt), "V=%lld T=%g row %lld: %a vs %a",
                              (long long)V, (double)T, (long long)r, tgt[r], want_tgt);
                for (int64_t i = 0; i < V; i++) {
                    want_full = row[i];
                    ck_assert_msg(rc_f32_bits(full[r * V + i]) == rc_f32_bits(want_full),
                                  "V=%lld T=%g lp[%lld,%lld] %a vs %a", (long long)V, (double)T, (long long)r,
                                  (long long)i, full[r * V + i], want_full);
                }
                free(row);
            }
            free(x);
            free(full);
        }
    rc_backend_destroy(be);
    free(xf);
    free(ef);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("vs_pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_round, 0, 2);
    tcase_add_loop_test(tc, test_elementwise, 0, 2);
    tcase_add_loop_test(tc, test_scalar_ops, 0, 2);
    tcase_add_loop_test(tc, test_linear, 0, 2);
    tcase_add_loop_test(tc, test_norms, 0, 2);
    tcase_add_loop_test(tc, test_softmax, 0, 2);
    tcase_add_loop_test(tc, test_activations, 0, 2);
    tcase_add_loop_test(tc, test_rope, 0, 2);
    tcase_add_test(tc, test_attn_params_refused);
    tcase_add_loop_test(tc, test_logsoftmax, 0, 2);
    tcase_add_loop_test(tc, test_attention_matmuls, 0, 2);
    tcase_add_loop_test(tc, test_alibi_slopes, 0, 2);
    tcase_add_loop_test(tc, test_alibi_scores, 0, 2);
    tcase_add_loop_test(tc, test_normhead, 0, 2);
    tcase_add_loop_test(tc, test_clip_qkv, 0, 2);
    suite_add_tcase(s, tc);
    TCase *to = tcase_create("kernel_orders");
    tcase_set_timeout(to, 120);
    tcase_add_test(to, test_gemm_order);
    tcase_add_test(to, test_gemm_fma_neutral);
    tcase_add_test(to, test_weights_2byte);
    tcase_add_test(to, test_exp64);
    tcase_add_test(to, test_act_table);
    suite_add_tcase(s, to);
    TCase *tp = tcase_create("pair_order");
    tcase_set_timeout(tp, 120);
    tcase_add_test(tp, test_gemm_pair_order);
    tcase_add_test(tp, test_dpbf16_twin);
    suite_add_tcase(s, tp);
    return rc_test_run(s);
}
