/* fp8 e4m3 weights of the linear layers (fp8w.h). The rules, each from the
 * code that computes it (docs/research/fp8-weights.md has the sources):
 *
 *   weights, per tensor   s = amax / 448, q = e4m3(clamp(w * (1 / s)))   vLLM scaled_fp8_quant(W) at load
 *                         (one amax over a fused layer: QKV, gate + up)  (dynamic_scaled_fp8_quant)
 *   weights, per channel  s_n = max(amax_n / 448, 1 / (448 * 512)),     the per-token kernel over W's rows
 *                         q = e4m3(clamp(w / s_n))                       (dynamic_per_token_scaled_fp8_quant)
 *   weights, 128 x 128    t = R(1 / amax) * 448 (1 when amax is 0 or     the rollout sync's block cast
 *                         inf: torch's 448 / amax is reciprocal * 448),
 *                         q = e4m3(clamp(w * t)), s = 1 / t; an edge     (cast_tensor_to_fp8_blockwise: the
 *                         block's padding is w[N-1][K-1]                 weight padded with its last element)
 *   activations, token    as the channel rule over x's rows              dynamic_per_token_scaled_fp8_quant
 *   activations, tensor   as the tensor rule over the call's rows        dynamic_scaled_fp8_quant
 *   activations, 1 x 128  s = max(amax, 1e-10) / 448, q = e4m3(clamp(x / s))   per_token_group_quant_fp8
 *   GEMM, tensor/channel  acc = fp32 sum of q_x * q_w (exact products);  cutlass_scaled_mm's epilogue
 *                         y = R(fma(s_x, s_w * acc, bias)), or           (ScaledEpilogueBias: multiplies,
 *                         R(s_x * (s_w * acc)) without bias              then multiply_add)
 *   GEMM, block           acc = sum over K blocks of (P_k * s_x) * s_w   w8a8_triton_block_scaled_mm;
 *                         (P_k: the block's fp32 partial, acc from 0),   the bias added to the rounded
 *                         y = R(R(acc) + bias)                           output (W8A8BlockFp8LinearOp)
 *   W8A16 (act none)      W' = R(q * R(s)) in the dtype, then the plain  vLLM's bf16 dequant path
 *                         linear rule                                    (weight_fp8.to(bf16) * scale.to(bf16))
 *
 * The GEMMs are the backend's matmul (the kernel strategy's K order) over the
 * fp8 values, which bf16 holds exactly; a block GEMM is one matmul per
 * 128-deep K slice (fp8w_block_gemm). */
#include "fp8w.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "safetensors.h"
#include "util.h"

_Static_assert(RC_FP8_BLOCK == RCO_FP8W_BLOCK, "the block size of forward.h and ops_inline.h");

static float amax_of(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        m = rco_fp8w_amax_step(m, x[i]);
    return m;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void rc_fp8w_quant_weight(const float *w, int64_t N, int64_t K, rc_wscale mode, const float *amax, float *q,
                          float *s)
{
    if (mode == RC_WSCALE_TENSOR) {
        const float a = amax ? *amax : amax_of(w, N * K);
        const float sc = rco_fp8w_scale_tensor(a);
        for (int64_t i = 0; i < N * K; i++)
            q[i] = rco_fp8w_quant_tensor(w[i], sc);
        s[0] = sc;
    } else if (mode == RC_WSCALE_CHANNEL) {
        for (int64_t n = 0; n < N; n++) {
            const float sc = rco_fp8w_scale_row(amax_of(w + n * K, K));
            for (int64_t k = 0; k < K; k++)
                q[n * K + k] = rco_fp8w_quant_div(w[n * K + k], sc);
            s[n] = sc;
        }
    } else {
        const int64_t B = RC_FP8_BLOCK, nb = ceil_div(N, B), kb = ceil_div(K, B);
        const float pad = fabsf(w[N * K - 1]); /* the sync pads the weight with its last element */
        for (int64_t bn = 0; bn < nb; bn++)
            for (int64_t bk = 0; bk < kb; bk++) {
                const int64_t n0 = bn * B, n1 = n0 + B < N ? n0 + B : N, k0 = bk * B, k1 = k0 + B < K ? k0 + B : K;
                float a = n1 - n0 < B || k1 - k0 < B ? pad : 0.0f;
                for (int64_t n = n0; n < n1; n++)
                    a = fmaxf(a, amax_of(w + n * K + k0, k1 - k0));
                float t = (1.0f / a) * RCO_FP8_E4M3_MAX; /* torch's 448 / amax: reciprocal(amax) * 448 */
                if (a == 0.0f || isinf(a))
                    t = 1.0f;
                for (int64_t n = n0; n < n1; n++)
                    for (int64_t k = k0; k < k1; k++)
                        q[n * K + k] = rco_fp8_e4m3_round(rco_fp8w_clamp(w[n * K + k] * t));
                s[bn * kb + bk] = 1.0f / t;
            }
    }
}

/* x [M, K] in 1 x B groups (K a multiple of B): per_token_group_quant_fp8 */
static void quant_act_groups(const float *x, int64_t M, int64_t K, int64_t B, float *q, float *sa)
{
    const int64_t G = K / B;
    for (int64_t m = 0; m < M; m++)
        for (int64_t g = 0; g < G; g++) {
            const float *xg = x + m * K + g * B;
            const float sc = rco_fp8w_scale_group(amax_of(xg, B));
            for (int64_t k = 0; k < B; k++)
                q[m * K + g * B + k] = rco_fp8w_quant_div(xg[k], sc);
            sa[m * G + g] = sc;
        }
}

void rc_fp8w_quant_act(const float *x, int64_t M, int64_t K, rc_actquant mode, bool groups, float *q, float *sa)
{
    if (groups) { /* 1 x 128: K is a multiple of 128 (checked by rc_fp8w_supported) */
        quant_act_groups(x, M, K, RC_FP8_BLOCK, q, sa);
    } else if (mode == RC_ACTQ_TENSOR) {
        rc_fp8w_quant_weight(x, M, K, RC_WSCALE_TENSOR, NULL, q, sa);
    } else {
        rc_fp8w_quant_weight(x, M, K, RC_WSCALE_CHANNEL, NULL, q, sa);
    }
}

/* One quantized weight matrix. On the CPU (a host-memory backend) the fp8
 * values as bf16 bits and the dequantized copy at the dtype's width; on a
 * device backend the fp8 values as float8_e4m3fn codes, 1 byte each, and the
 * scales as fp32: W8A8's (the backend's fp8_matmul widens the codes exactly:
 * in registers, or into a 2-byte workspace for cuBLAS's bf16 operands), and
 * W8A16's rounded to the dtype, R(s) (the backend's fp8_deq_matmul
 * dequantizes each code to R(q * R(s)) per call: in registers, or into the
 * 2-byte workspace, the values of the CPU's dequantized copy). */
typedef struct {
    int64_t N, K;
    int64_t bn, bk; /* block scales: the block's rows and depth (128 x 128 unless stored otherwise) */
    uint16_t *q;   /* host W8A8: the fp8 values as bf16 bits, [N][K]; block: K slices [K/128][N][128] */
    float *s;      /* host: the weight scales (rc_fp8w_quant_weight's layout) */
    uint16_t *deq; /* host W8A16: R(q * R(s)) as the dtype's bits, [N][K] */
    float *dq;     /* device: the fp8 values as float8_e4m3fn codes (1 byte each), [N][K] in every mode */
    float *ds;     /* device: the weight scales (fp32; W8A16: rounded to the dtype, R(s)) */
} fp8w_mat;

/* W8A8 scratch for `rows` rows: x's fp8 values [rows][kmax], its scales, a
 * block GEMM's x slice (host only) and partial sums [rows][nmax]; on a device
 * under engine kernels the 2-byte workspace one weight's codes are widened
 * into for a call (wmax values: the largest weight's N * K); backend memory */
typedef struct {
    float *xq, *sa, *xs, *part, *wb;
} fp8w_scratch;

struct rc_fp8w {
    rc_backend *be;
    rc_wq_numerics wq;
    rc_dtype dt;
    int64_t n_layers;
    fp8w_mat *m; /* [n_layers][RC_FP8W_N] */
    /* weights=as-stored on mixture-of-experts layers: [n_layers][n_ex][RC_FP8W_EX_N] (expert n_experts:
     * the shared experts); n_ex 0 when the model has none */
    fp8w_mat *ex;
    int64_t n_ex;
    int64_t rows, kmax, nmax, wmax;
    /* a layer split (forward.c): device d holds layers [l0[d], l0[d + 1]) -- their quantized copies -- and its
     * own scratch sc[d]; n_dev 1: one device, sc[0] */
    int n_dev;
    int64_t l0[RC_MAX_DEVICES + 1];
    fp8w_scratch sc[RC_MAX_DEVICES];
};

/* the device holding layer l */
static int dev_of(const rc_fp8w *f, int64_t l)
{
    int d = 0;
    while (d + 1 < f->n_dev && l >= f->l0[d + 1])
        d++;
    return d;
}

/* f's layer split from n_dev and l0 (NULL, or n_dev 1: one device); RC_ERR_INTERNAL for a split that does not
 * cover the model's layers in order */
static rc_status split_set(rc_fp8w *f, rc_backend *be, int n_dev, const int64_t *l0)
{
    f->n_dev = 1;
    f->l0[0] = 0;
    f->l0[1] = f->n_layers;
    if (!l0 || n_dev <= 1)
        return RC_OK;
    if (n_dev > RC_MAX_DEVICES || l0[0] != 0 || l0[n_dev] != f->n_layers || !be->ops->set_device)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 weights: a split over %d devices of %lld layers", n_dev,
                         (long long)f->n_layers);
    for (int d = 0; d < n_dev; d++)
        if (l0[d + 1] <= l0[d])
            return rc_errorf(RC_ERR_INTERNAL, "fp8 weights: device %d holds no layer", d);
    f->n_dev = n_dev;
    memcpy(f->l0, l0, sizeof *l0 * (size_t)(n_dev + 1));
    return RC_OK;
}

/* layer l's device made current (a split; one device: nothing to do) */
static rc_status to_layer_device(rc_fp8w *f, rc_backend *be, int64_t l)
{
    return f->n_dev > 1 ? be->ops->set_device(be, dev_of(f, l)) : RC_OK;
}

static rc_status scratch_alloc(rc_backend *be, int64_t rows, int64_t kmax, int64_t nmax, int64_t wmax, int64_t bk,
                               fp8w_scratch *sc);

/* each device's W8A8 scratch, on it; device 0 current after */
static rc_status scratch_alloc_all(rc_fp8w *f, rc_backend *be, int64_t bk)
{
    for (int d = 0; d < f->n_dev; d++) {
        if (f->n_dev > 1)
            RC_TRY(be->ops->set_device(be, d));
        RC_TRY(scratch_alloc(be, f->rows, f->kmax, f->nmax, f->wmax, bk, &f->sc[d]));
    }
    return f->n_dev > 1 ? be->ops->set_device(be, 0) : RC_OK;
}

/* W8A16 on a device: each device's 2-byte workspace of the largest matrix (engine kernels dequantize a weight
 * there per call; TP's K-sliced partials read it there under either kernels), on it; device 0 current after */
static rc_status deq_workspace_all(rc_fp8w *f, rc_backend *be)
{
    for (int d = 0; d < f->n_dev; d++) {
        if (f->n_dev > 1)
            RC_TRY(be->ops->set_device(be, d));
        f->sc[d] = (fp8w_scratch){0};
        RC_TRY(be->ops->alloc(be, f->wmax / 2 + f->wmax % 2, &f->sc[d].wb));
    }
    return f->n_dev > 1 ? be->ops->set_device(be, 0) : RC_OK;
}

static int64_t n_scales(int64_t N, int64_t K, rc_wscale mode)
{
    return mode == RC_WSCALE_TENSOR ? 1 : mode == RC_WSCALE_CHANNEL ? N : ceil_div(N, RC_FP8_BLOCK) * ceil_div(K, RC_FP8_BLOCK);
}

static uint16_t to_bits(float v, rc_dtype dt) { return dt == RC_F16 ? rc_f32_to_f16(v) : rc_f32_to_bf16(v); }

_Static_assert(RC_WSCALE_TENSOR == 0 && RC_WSCALE_CHANNEL == 1 && RC_WSCALE_BLOCK == 2, "rco_fp8w_scale_at's modes");

/* W8A16's dequantized weight W'[n][k] = R(q * R(s)) (rco_fp8w_deq, as a device's per-call dequantization) */
static float deq_value(const float *q, const float *s, int64_t n, int64_t k, int64_t K, rc_wscale mode, rc_dtype dt)
{
    return rco_fp8w_deq(q[n * K + k], rc_round_to(s[rco_fp8w_scale_at(n, k, K, (int)mode)], dt), dt);
}

/* a device buffer of n floats holding host[0, n), its values rounded to dt
 * (exact: dt holds them) */
static rc_status dev_put(rc_backend *be, const float *host, int64_t n, rc_dtype dt, float **out)
{
    RC_TRY(be->ops->alloc(be, n, out));
    return be->ops->upload(be, host, n, dt, *out);
}

/* floats of a device buffer of n 2-byte values (bytes_parts counts the same) */
static int64_t bits_floats(int64_t n) { return n / 2 + n % 2; }
/* floats of a device buffer of n 1-byte codes (bytes_parts counts the same) */
static int64_t code_floats(int64_t n) { return n / 4 + (n % 4 != 0); }

/* m on a device backend from the fp8 values q and scales s: the values as
 * float8_e4m3fn codes (exact: q holds e4m3 values), staged on the host and
 * copied as bytes; the scales as fp32 (W8A16: rounded to dt, the R(s) of
 * R(q * R(s))) */
static rc_status mat_fill_device(rc_backend *be, fp8w_mat *m, const float *q, const float *s,
                                 const rc_wq_numerics *wq, rc_dtype dt)
{
    const int64_t N = m->N, K = m->K, ns = n_scales(N, K, wq->scale); /* blocks: 128 x 128 here */
    const int64_t nf = code_floats(N * K);
    float *buf, *rs;
    RC_TRY(rc_alloc_aligned((void **)&buf, nf > ns ? nf : ns, sizeof *buf, "fp8 weights"));
    buf[nf - 1] = 0.0f; /* the last float's unused bytes */
    uint8_t *codes = (uint8_t *)buf;
    for (int64_t i = 0; i < N * K; i++)
        codes[i] = rc_f32_to_fp8(q[i], RC_FP8_E4M3, RC_FP8_SATFINITE); /* exact */
    rc_status st = dev_put(be, buf, nf, RC_F32, &m->dq);
    rs = buf;
    for (int64_t i = 0; i < ns; i++)
        rs[i] = wq->act == RC_ACTQ_NONE ? rc_round_to(s[i], dt) : s[i];
    if (st == RC_OK)
        st = dev_put(be, rs, ns, RC_F32, &m->ds);
    free(buf);
    return st;
}

/* m from the fp8 values q and scales (the W8A8 layout, or W8A16's dequantized copy) */
static rc_status mat_fill(rc_backend *be, fp8w_mat *m, const float *q, const float *s, int64_t N, int64_t K,
                          const rc_wq_numerics *wq, rc_dtype dt)
{
    if (!m->bn)
        m->bn = m->bk = RC_FP8_BLOCK;
    const int64_t B = m->bk;
    const int64_t ns = wq->scale == RC_WSCALE_BLOCK ? ceil_div(N, m->bn) * ceil_div(K, m->bk) : n_scales(N, K, wq->scale);
    m->N = N;
    m->K = K;
    if (!be->ops->host_memory)
        return mat_fill_device(be, m, q, s, wq, dt);
    RC_TRY(rc_alloc_aligned((void **)&m->s, ns, sizeof *m->s, "fp8 scales"));
    memcpy(m->s, s, (size_t)ns * sizeof *s);
    if (wq->act == RC_ACTQ_NONE) { /* W8A16: W' = R(q * R(s)) */
        RC_TRY(rc_alloc_aligned((void **)&m->deq, N * K, sizeof *m->deq, "fp8 dequantized weights"));
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                m->deq[n * K + k] = to_bits(deq_value(q, s, n, k, K, wq->scale, dt), dt);
        return RC_OK;
    }
    RC_TRY(rc_alloc_aligned((void **)&m->q, N * K, sizeof *m->q, "fp8 weights"));
    if (wq->scale != RC_WSCALE_BLOCK) {
        for (int64_t i = 0; i < N * K; i++)
            m->q[i] = rc_f32_to_bf16(q[i]); /* exact */
    } else { /* each 128-deep K slice contiguous, [N][128], for fp8w_block_gemm */
        for (int64_t k0 = 0; k0 < K; k0 += B)
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < B; k++)
                    m->q[k0 * N + n * B + k] = rc_f32_to_bf16(q[n * K + k0 + k]);
    }
    return RC_OK;
}

static void mat_free(rc_backend *be, fp8w_mat *m)
{
    free(m->q);
    free(m->s);
    free(m->deq);
    float *dev[] = {m->dq, m->ds};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i])
            be->ops->free(be, dev[i]);
}

/* the W8A8 scratch of `rows` rows for GEMMs up to kmax deep and nmax wide, in
 * the backend's memory (the x slice only on the host) */
static rc_status scratch_alloc(rc_backend *be, int64_t rows, int64_t kmax, int64_t nmax, int64_t wmax, int64_t bk,
                               fp8w_scratch *sc)
{
    *sc = (fp8w_scratch){0};
    RC_TRY(be->ops->alloc(be, rows * kmax, &sc->xq));
    RC_TRY(be->ops->alloc(be, rows * (kmax / bk + 1), &sc->sa));
    if (be->ops->host_memory)
        RC_TRY(be->ops->alloc(be, rows * bk, &sc->xs));
    if (!be->ops->host_memory && be->kernels != RC_KERNELS_INVARIANT) /* the codes widened for cuBLAS */
        RC_TRY(be->ops->alloc(be, bits_floats(wmax), &sc->wb));
    return be->ops->alloc(be, rows * nmax, &sc->part);
}

static void scratch_free(rc_backend *be, fp8w_scratch *sc)
{
    float *p[] = {sc->xq, sc->sa, sc->xs, sc->part, sc->wb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i])
            be->ops->free(be, p[i]);
    *sc = (fp8w_scratch){0};
}

/* y [M, N] = R(acc) with the epilogue of cutlass_scaled_mm: the fp32 GEMM of
 * the fp8 values, then s_x * (s_w * acc) (+ bias, fused), rounded once */
static rc_status fp8w_scaled_gemm(rc_backend *be, const fp8w_mat *m, rc_wscale ws, rc_actquant aq, const float *xq,
                                  const float *sa, int64_t M, const float *bias, rc_dtype out_dt, float *y)
{
    const int64_t N = m->N;
    RC_TRY(be->ops->matmul(be, xq, M, m->K, (rc_wt){m->q, RC_BF16, false}, N, NULL, RC_BF16, RC_F32, y));
    for (int64_t r = 0; r < M; r++) {
        const float a = aq == RC_ACTQ_TENSOR ? sa[0] : sa[r];
        for (int64_t n = 0; n < N; n++)
            y[r * N + n] = rco_fp8w_epilogue(y[r * N + n], a, ws == RC_WSCALE_TENSOR ? m->s[0] : m->s[n],
                                             bias ? bias + n : NULL, out_dt);
    }
    return RC_OK;
}

/* Block scales: for each 128-deep K slice the backend's matmul of the slice
 * (x's slice copied to xs [M][128], the weight's slice contiguous) gives the
 * partial P; acc += (P * s_x[m][k]) * s_w[n / 128][k] in fp32 from 0, as
 * w8a8_triton_block_scaled_mm; y = R(acc), then the bias added to the
 * rounded output (R(y + b)). */
static rc_status fp8w_block_gemm(rc_backend *be, const fp8w_mat *m, const float *xq, const float *sa, int64_t M,
                                 const float *bias, const float *rw, rc_dtype out_dt, float *xs, float *part, float *y)
{
    const int64_t N = m->N, K = m->K, B = m->bk, kb = K / B;
    for (int64_t k = 0; k < kb; k++) {
        for (int64_t r = 0; r < M; r++)
            memcpy(xs + r * B, xq + r * K + k * B, (size_t)B * sizeof *xs);
        RC_TRY(be->ops->matmul(be, xs, M, B, (rc_wt){m->q + k * B * N, RC_BF16, false}, N, NULL, RC_BF16, RC_F32,
                               part));
        for (int64_t r = 0; r < M; r++)
            for (int64_t n = 0; n < N; n++)
                y[r * N + n] = rco_fp8w_block_acc(k ? y[r * N + n] : 0.0f, part[r * N + n], sa[r * kb + k],
                                                  m->s[(n / m->bn) * kb + k]);
    }
    for (int64_t r = 0; r < M; r++)
        for (int64_t n = 0; n < N; n++)
            y[r * N + n] = rw ? rco_fp8w_block_out_w(y[r * N + n], rw[r], out_dt)
                              : rco_fp8w_block_out(y[r * N + n], bias ? bias + n : NULL, out_dt);
    return RC_OK;
}

/* The same on a device backend (the CUDA backend: kernels/fp8.cu), every
 * array in its memory: x quantized by its kernel; tensor / channel: the
 * backend's fp8_matmul of the codes (engine kernels: widened into the
 * scratch's 2-byte workspace, cuBLAS's bf16 operands; invariant: the
 * fixed-order kernel widening each code in registers), then the epilogue;
 * block: per 128-deep K slice the backend's fp8_matmul of the slice (the
 * codes widened once, with the first slice) and the accumulation step, then
 * the output step. */
static rc_status fp8w_run_device(rc_backend *be, const fp8w_mat *m, const rc_wq_numerics *wq, const float *x,
                                 int64_t M, const float *bias, const float *rw, rc_dtype out_dt,
                                 const fp8w_scratch *sc, float *y)
{
    const int64_t N = m->N, K = m->K, B = RC_FP8_BLOCK;
    const bool block = wq->scale == RC_WSCALE_BLOCK;
    if (!be->ops->fp8_quant_act || !be->ops->fp8_epilogue || !be->ops->fp8_matmul)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 linear: the %s backend has no fp8 kernels", be->ops->name);
    const rc_fp8_act mode = block ? RC_FP8_ACT_GROUP : wq->act == RC_ACTQ_TENSOR ? RC_FP8_ACT_TENSOR : RC_FP8_ACT_TOKEN;
    RC_TRY(be->ops->fp8_quant_act(be, x, M, K, mode, sc->xq, sc->sa));
    if (!block) {
        RC_TRY(be->ops->fp8_matmul(be, sc->xq, M, K, 0, K, m->dq, N, sc->wb, true, y));
        const rc_fp8_epi e = {.kind = RC_FP8_EPI_SCALED, .y = y, .sx = sc->sa, .sw = m->ds,
                              .sx_tensor = wq->act == RC_ACTQ_TENSOR, .sw_tensor = wq->scale == RC_WSCALE_TENSOR,
                              .bias = bias, .M = M, .N = N, .out_dt = out_dt};
        return be->ops->fp8_epilogue(be, &e);
    }
    const int64_t kb = K / B;
    for (int64_t k = 0; k < kb; k++) {
        RC_TRY(be->ops->fp8_matmul(be, sc->xq, M, K, k * B, B, m->dq, N, sc->wb, k == 0, sc->part));
        const rc_fp8_epi e = {.kind = RC_FP8_EPI_BLOCK_ACC, .y = y, .part = sc->part, .sx = sc->sa, .sw = m->ds,
                              .M = M, .N = N, .kb = kb, .k = k};
        RC_TRY(be->ops->fp8_epilogue(be, &e));
    }
    const rc_fp8_epi e = {.kind = RC_FP8_EPI_BLOCK_OUT, .y = y, .bias = bias, .rw = rw, .M = M, .N = N,
                          .out_dt = out_dt};
    return be->ops->fp8_epilogue(be, &e);
}

/* x quantized into the scratch, then the GEMM of m; rw (block GEMMs only):
 * NULL, or a weight per row multiplied into the fp32 sum before its one
 * rounding (the fused MoE kernel's MUL_ROUTED_WEIGHT) */
static rc_status fp8w_run(rc_backend *be, const fp8w_mat *m, const rc_wq_numerics *wq, const float *x, int64_t M,
                          const float *bias, const float *rw, rc_dtype out_dt, const fp8w_scratch *sc, float *y)
{
    if (!be->ops->host_memory)
        return fp8w_run_device(be, m, wq, x, M, bias, rw, out_dt, sc, y);
    const bool block = wq->scale == RC_WSCALE_BLOCK;
    if (block)
        quant_act_groups(x, M, m->K, m->bk, sc->xq, sc->sa);
    else
        rc_fp8w_quant_act(x, M, m->K, wq->act, false, sc->xq, sc->sa);
    if (block)
        return fp8w_block_gemm(be, m, sc->xq, sc->sa, M, bias, rw, out_dt, sc->xs, sc->part, y);
    return fp8w_scaled_gemm(be, m, wq->scale, wq->act, sc->xq, sc->sa, M, bias, out_dt, y);
}

rc_status rc_fp8w_supported(const rc_config *c, const rc_numerics *num)
{
    const rc_wq_numerics *wq = &num->wq;
    if (wq->kind == RC_WQ_STORED) {
        if (num->dt != RC_BF16 && num->dt != RC_F16)
            return rc_errorf(RC_ERR_USAGE, "weights=as-stored needs dtype=bf16 or fp16 (vLLM's fp8 linear layers "
                             "take bf16 / fp16 activations)");
        if (num->mode == RC_PREC_AUTOCAST)
            return rc_errorf(RC_ERR_USAGE, "weights=as-stored and mode=autocast cannot be combined");
        return RC_OK; /* the block and the shapes: with the checkpoint (rc_fp8w_create_stored) */
    }
    if (wq->kind != RC_WQ_FP8)
        return RC_OK;
    if (num->dt != RC_BF16 && num->dt != RC_F16)
        return rc_errorf(RC_ERR_USAGE, "weights=fp8 needs dtype=bf16 or fp16 (vLLM's fp8 linear layers take bf16 / "
                         "fp16 activations)");
    if (num->mode == RC_PREC_AUTOCAST)
        return rc_errorf(RC_ERR_USAGE, "weights=fp8 and mode=autocast cannot be combined (an fp8 engine holds the "
                         "quantized weights, not fp32 masters)");
    if (wq->scale == RC_WSCALE_BLOCK && wq->act == RC_ACTQ_TENSOR)
        return rc_errorf(RC_ERR_USAGE, "weight-scale=block quantizes activations per token in groups of 128 "
                         "(act=dynamic-token or act=none, not dynamic-tensor)");
    if (c && wq->scale == RC_WSCALE_BLOCK) {
        const int64_t B = RC_FP8_BLOCK, d = c->head_dim;
        const int64_t dims[] = {c->hidden, c->n_heads * d, c->n_kv_heads * d, c->intermediate};
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
            if (dims[i] % B != 0)
                return rc_errorf(RC_ERR_UNSUPPORTED, "weight-scale=block needs the hidden size, the q / k / v rows "
                                 "and the intermediate size to be multiples of 128 (this model: %lld, %lld, %lld, "
                                 "%lld)", (long long)c->hidden, (long long)(c->n_heads * d),
                                 (long long)(c->n_kv_heads * d), (long long)c->intermediate);
    }
    return RC_OK;
}

/* the experts' matrices of one MoE layer for weights=as-stored: the routed
 * experts 0 .. E-1, then the shared experts (index E) */
static int64_t n_expert_slots(const rc_config *c)
{
    return c->n_experts > 0 ? c->n_experts + (c->shared_intermediate > 0 ? 1 : 0) : 0;
}

/* the shape of expert part `part` (gate / up [I, H], down [H, I]) of expert
 * slot e, and its name after "model.layers.<l>." into name */
static void expert_part(const rc_config *c, int64_t e, rc_fp8w_expart part, int64_t *N, int64_t *K, char *name,
                        size_t cap)
{
    static const char *const pn[] = {"gate_proj", "up_proj", "down_proj"};
    const bool shared = e == c->n_experts;
    const int64_t I = shared ? c->shared_intermediate : c->moe_intermediate, H = c->hidden;
    *N = part == RC_FP8W_EX_DOWN ? H : I;
    *K = part == RC_FP8W_EX_DOWN ? I : H;
    if (shared)
        snprintf(name, cap, "mlp.shared_experts.%s", pn[part]);
    else
        snprintf(name, cap, "mlp.experts.%lld.%s", (long long)e, pn[part]);
}

/* the shape [N, K] of layer weight `which`, false when the model has none */
static bool which_shape(const rc_config *c, rc_fp8w_which wh, int64_t *N, int64_t *K)
{
    const int64_t d = c->head_dim, qkv = (c->n_heads + 2 * c->n_kv_heads) * d, att = c->n_heads * d;
    const int64_t H = c->hidden, I = c->intermediate;
    switch (wh) {
    case RC_FP8W_QKV: *N = qkv; *K = H; return true;
    case RC_FP8W_O: *N = H; *K = att; return true;
    case RC_FP8W_UP: *N = I; *K = H; return true;
    case RC_FP8W_GATE: *N = I; *K = H; return c->gated_mlp;
    case RC_FP8W_DOWN: *N = H; *K = I; return true;
    case RC_FP8W_N: break;
    }
    return false;
}

static rc_wt *which_wt(rc_layer_weights *L, rc_fp8w_which wh)
{
    return wh == RC_FP8W_QKV ? &L->w_qkv : wh == RC_FP8W_O ? &L->w_o : wh == RC_FP8W_UP ? &L->w_up
                                                         : wh == RC_FP8W_GATE ? &L->w_gate : &L->w_down;
}

/* The quantized copies of one layer: dense, what every layer holds (weights=as-stored: as the 128 x 128 block
 * rule with the stored values; the scales of smaller blocks are not counted), and experts, what a MoE layer
 * holds besides under weights=as-stored (its experts' values and 128 x 128 block scales); scratch, the W8A8
 * scratch of `rows` rows. Each matrix's values take 2 bytes on the host (the fp8 values as bf16, W8A16's
 * dequantized copy as the dtype's) and 1 on a device (float8_e4m3fn codes, a device buffer rounded up to whole
 * floats, as mat_fill_device allocates it); its scales 4. A device's scratch
 * (W8A8's, and W8A16's, which is this alone) adds the 2-byte workspace of the largest matrix (engine kernels
 * widen or dequantize its codes there; counted for invariant kernels too, which allocate it only for W8A16
 * under TP). false on overflow. */
static bool bytes_parts(const rc_config *c, const rc_numerics *num, bool host, int64_t rows, int64_t *dense,
                        int64_t *experts, int64_t *scratch)
{
    *dense = *experts = *scratch = 0;
    rc_wq_numerics wq = num->wq;
    if (wq.kind == RC_WQ_STORED)
        wq = (rc_wq_numerics){RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN};
    else if (wq.kind != RC_WQ_FP8)
        return true;
    int64_t kmax = 0, nmax = 0, wmax = 0, t;
    const bool w8a8 = wq.act != RC_ACTQ_NONE;
    bool ok = true;
    for (int wh = 0; wh < RC_FP8W_N; wh++) {
        int64_t N, K;
        if (!which_shape(c, (rc_fp8w_which)wh, &N, &K))
            continue;
        kmax = K > kmax ? K : kmax;
        nmax = N > nmax ? N : nmax;
        ok = ok && rc_mul_i64(N, K, &t);
        wmax = ok && t > wmax ? t : wmax;
        ok = ok && rc_mul_i64(host ? t : code_floats(t), host ? 2 : 4, &t) && rc_add_i64(*dense, t, dense) &&
             rc_add_i64(*dense, 4 * n_scales(N, K, wq.scale), dense);
    }
    for (int64_t e = 0; num->wq.kind == RC_WQ_STORED && e < n_expert_slots(c); e += c->n_experts)
        for (int p = 0; p < RC_FP8W_EX_N; p++) { /* the experts' matrices: the workspace's size */
            int64_t N, K;
            char nm[96];
            expert_part(c, e, (rc_fp8w_expart)p, &N, &K, nm, sizeof nm);
            ok = ok && rc_mul_i64(N, K, &t);
            wmax = ok && t > wmax ? t : wmax;
        }
    if (w8a8) { /* xq, sa, xs (host), part; a device's per-tensor amax of each row; a device's workspace */
        int64_t f = 0;
        ok = ok && rc_add_i64(kmax, kmax / RC_FP8_BLOCK + 1 + RC_FP8_BLOCK + nmax + 1, &f) &&
             rc_mul_i64(f, rows, &f) && rc_mul_i64(f, 4, scratch) &&
             rc_add_i64(*scratch, host ? 0 : 4 * bits_floats(wmax), scratch);
    } else if (!host) { /* W8A16 on a device: the workspace a weight is dequantized into */
        *scratch = 4 * bits_floats(wmax);
    }
    if (num->wq.kind != RC_WQ_STORED)
        return ok;
    for (int64_t e = 0; e < n_expert_slots(c); e += c->n_experts)
        for (int p = 0; p < RC_FP8W_EX_N; p++) {
            int64_t N, K;
            char nm[96];
            expert_part(c, e, (rc_fp8w_expart)p, &N, &K, nm, sizeof nm);
            const int64_t copies = e < c->n_experts ? c->n_experts : 1;
            ok = ok && rc_mul_i64(N, K, &t) && rc_mul_i64(host ? t : code_floats(t), host ? 2 : 4, &t) &&
                 rc_add_i64(t, 4 * ceil_div(N, RC_FP8_BLOCK) * ceil_div(K, RC_FP8_BLOCK), &t) &&
                 rc_mul_i64(t, copies, &t) && rc_add_i64(*experts, t, experts);
        }
    return ok;
}

bool rc_fp8w_bytes(const rc_config *c, const rc_numerics *num, bool host, int64_t rows, int64_t *weights,
                   int64_t *scratch)
{
    int64_t dense, experts, t, moe_layers = 0;
    *weights = 0;
    if (!bytes_parts(c, num, host, rows, &dense, &experts, scratch))
        return false;
    for (int64_t l = 0; l < c->n_layers; l++)
        moe_layers += rc_layer_is_moe(c, l);
    return rc_mul_i64(dense, c->n_layers, weights) && rc_mul_i64(experts, moe_layers, &t) &&
           rc_add_i64(*weights, t, weights);
}

bool rc_fp8w_layer_bytes(const rc_config *c, const rc_numerics *num, bool host, int64_t l, int64_t *bytes)
{
    int64_t experts, scratch;
    return bytes_parts(c, num, host, 1, bytes, &experts, &scratch) &&
           rc_add_i64(*bytes, rc_layer_is_moe(c, l) ? experts : 0, bytes);
}

/* n values of an engine weight (values of the dtype) into the host array
 * out: read in place on the CPU, copied back from a device (an fp32 or 2-byte array) */
static rc_status read_weight(rc_backend *be, const rc_wt *W, int64_t n, float *out)
{
    if (be->ops->host_memory) {
        rc_wt_convert(*W, 0, n, RC_F32, RC_F32, out);
        return RC_OK;
    }
    if (W->dt == RC_F32)
        return be->ops->download(be, (const float *)W->p, n, out);
    if (W->dt != RC_BF16 && W->dt != RC_F16)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 weights: a device weight of %s", rc_dtype_name(W->dt));
    /* a 2-byte weight (forward.c plan_weight): its bits into the front of out, widened in place from the
     * back (element i's 4 bytes cover bits 2i and 2i + 1, read already) */
    RC_TRY(be->ops->download(be, (const float *)W->p, (n + 1) / 2, out));
    unsigned char *b = (unsigned char *)out;
    for (int64_t i = n - 1; i >= 0; i--) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        out[i] = W->dt == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h);
    }
    return RC_OK;
}

rc_status rc_fp8w_create(rc_backend *be, const rc_config *c, const rc_numerics *num, int64_t rows, rc_weights *w,
                         rc_fp8w **out)
{
    return rc_fp8w_create_split(be, c, num, rows, w, 1, NULL, out);
}

rc_status rc_fp8w_create_split(rc_backend *be, const rc_config *c, const rc_numerics *num, int64_t rows,
                               rc_weights *w, int n_dev, const int64_t *l0, rc_fp8w **out)
{
    *out = NULL;
    rc_fp8w *f = calloc(1, sizeof *f);
    if (!f)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    f->be = be;
    f->wq = num->wq;
    f->dt = num->dt;
    f->n_layers = c->n_layers;
    f->rows = rows;
    rc_status s = split_set(f, be, n_dev, l0);
    if (s == RC_OK)
        s = rc_calloc((void **)&f->m, c->n_layers * RC_FP8W_N, sizeof *f->m, "fp8 layers");
    float *wf = NULL, *q = NULL, *sc = NULL;
    int64_t big = 0;
    for (int wh = 0; wh < RC_FP8W_N; wh++) {
        int64_t N, K;
        if (which_shape(c, (rc_fp8w_which)wh, &N, &K)) {
            f->kmax = K > f->kmax ? K : f->kmax;
            f->nmax = N > f->nmax ? N : f->nmax;
            big = N * K > big ? N * K : big;
        }
    }
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&wf, big, sizeof *wf, "fp8 quantization");
    f->wmax = big;
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&q, big, sizeof *q, "fp8 quantization");
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&sc, big, sizeof *sc, "fp8 quantization");
    for (int64_t l = 0; s == RC_OK && l < c->n_layers; l++) {
        rc_layer_weights *L = &w->layers[l];
        s = to_layer_device(f, be, l); /* the copies on the device of the layer (its weights are read there) */
        /* per tensor, vLLM quantizes a fused layer as one: its merged gate_up_proj shares one amax */
        float gu_amax = 0.0f;
        const bool shared = c->gated_mlp && num->wq.scale == RC_WSCALE_TENSOR;
        for (int wh = RC_FP8W_UP; shared && s == RC_OK && wh <= RC_FP8W_GATE; wh++) {
            s = read_weight(be, which_wt(L, (rc_fp8w_which)wh), c->intermediate * c->hidden, wf);
            gu_amax = fmaxf(gu_amax, amax_of(wf, c->intermediate * c->hidden));
        }
        for (int wh = 0; s == RC_OK && wh < RC_FP8W_N; wh++) {
            int64_t N, K;
            if (!which_shape(c, (rc_fp8w_which)wh, &N, &K))
                continue;
            rc_wt *W = which_wt(L, (rc_fp8w_which)wh);
            fp8w_mat *m = &f->m[l * RC_FP8W_N + wh];
            s = read_weight(be, W, N * K, wf);
            if (s != RC_OK)
                break;
            rc_fp8w_quant_weight(wf, N, K, num->wq.scale,
                                 shared && (wh == RC_FP8W_UP || wh == RC_FP8W_GATE) ? &gu_amax : NULL, q, sc);
            s = mat_fill(be, m, q, sc, N, K, &num->wq, num->dt);
            if (s == RC_OK && m->deq) /* W8A16: the plain linear over the dequantized weights */
                *W = (rc_wt){m->deq, num->dt, false};
            else if (s == RC_OK && num->wq.act == RC_ACTQ_NONE) /* W8A16 on a device: rc_fp8w_deq_linear */
                *W = (rc_wt){NULL, num->dt, false};
        }
    }
    free(wf);
    free(q);
    free(sc);
    if (s == RC_OK && num->wq.act != RC_ACTQ_NONE)
        s = scratch_alloc_all(f, be, RC_FP8_BLOCK);
    else if (s == RC_OK && !be->ops->host_memory && (be->kernels != RC_KERNELS_INVARIANT || num->tp > 1))
        s = deq_workspace_all(f, be); /* W8A16 on a device: the 2-byte workspace it is dequantized into */
    else if (s == RC_OK && f->n_dev > 1)
        s = be->ops->set_device(be, 0);
    if (s != RC_OK) {
        rc_fp8w_free(f);
        return s;
    }
    *out = f;
    return RC_OK;
}

/* the stored FP8 pieces of layer weight `which` (HF names after
 * "model.layers.<l>."): q / k / v for the fused QKV, else one */
static int stored_parts(rc_fp8w_which wh, const char *const **names)
{
    static const char *const qkv[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
    static const char *const o[] = {"self_attn.o_proj"}, *const up[] = {"mlp.up_proj"},
                             *const gate[] = {"mlp.gate_proj"}, *const down[] = {"mlp.down_proj"};
    *names = wh == RC_FP8W_QKV ? qkv : wh == RC_FP8W_O ? o : wh == RC_FP8W_UP ? up : wh == RC_FP8W_GATE ? gate : down;
    return wh == RC_FP8W_QKV ? 3 : 1;
}

/* The fp8 codes and block scales of one stored weight of layer l (np
 * pieces, names after "model.layers.<l>.", rows one after another, and
 * their scale rows) as values into q [N][K] and s [ceil(N / bn)][K / bk];
 * bn, bk: the block (every piece's the same). merged: the pieces are parts
 * of a merged layer (QKV; gate + up; an expert's w13), each whole blocks of
 * rows. */
static rc_status stored_mat(const rc_safetensors *st, int64_t l, const char *const *names, int np, bool merged,
                            int64_t N, int64_t K, float *q, float *s, int64_t *bn, int64_t *bk)
{
    int64_t row = 0, srow = 0;
    for (int p = 0; p < np; p++) {
        char name[256];
        snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, names[p]);
        const rc_st_tensor *t = rc_st_find(st, name);
        if (!t || t->quant != RC_ST_Q_FP8_BLOCK || t->qdim[0] != 1)
            return rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored: the checkpoint has no FP8 block weight \"%s\" "
                             "(the stored linear layers are read as published: separate q / k / v and gate / up "
                             "projections, one tensor per expert)", name);
        const char *tp = rc_st_path_of(st, t);
        const int64_t rows = t->qdim[1], cols = t->qdim[2], b0 = t->qblock[0], b1 = t->qblock[1];
        if (p == 0) {
            *bn = b0;
            *bk = b1;
        }
        if (cols != K || row + rows > N || b0 != *bn || b1 != *bk)
            return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" has shape [%lld, %lld], expected %lld columns", tp, name,
                             (long long)rows, (long long)cols, (long long)K);
        /* vLLM / SGLang: per_token_group_quant_fp8 takes K in whole groups of the block's depth, and a merged
         * layer's parts (QKV; gate + up; an expert's w13) each fill whole blocks of rows
         * (validate_fp8_block_shape; Fp8MoEMethod's intermediate_size_per_partition % block_n) */
        if (K % b1 != 0)
            return rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored: \"%s\" is %lld deep, not a multiple of the "
                             "block's %lld (the activations are quantized in 1 x %lld groups)", name, (long long)K,
                             (long long)b1, (long long)b1);
        if (merged && rows % b0 != 0)
            return rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored: \"%s\" has %lld rows, not a multiple of the "
                             "block's %lld (a merged layer's parts fill whole blocks, as vLLM requires)", name,
                             (long long)rows, (long long)b0);
        for (int64_t i = 0; i < rows * cols; i++) {
            const uint8_t c = t->data[i];
            if ((c & 0x7F) == 0x7F)
                return rc_errorf(RC_ERR_FORMAT, "%s: F8_E4M3 tensor \"%s\" element %lld is NaN", tp, name,
                                 (long long)i);
            q[row * K + i] = rc_e4m3fn_to_f32(c);
        }
        const int64_t sr = (rows + b0 - 1) / b0, sc = K / b1;
        for (int64_t i = 0; i < sr * sc; i++) {
            if (t->qscale_dtype == RC_F32) {
                memcpy(&s[srow * sc + i], t->qscale + 4 * i, 4);
            } else {
                uint16_t h;
                memcpy(&h, t->qscale + 2 * i, 2);
                s[srow * sc + i] = rc_bf16_to_f32(h);
            }
        }
        row += rows;
        srow += sr;
    }
    if (row != N)
        return rc_errorf(RC_ERR_FORMAT, "weights=as-stored: layer %lld's stored \"%s\" has %lld rows, expected %lld",
                         (long long)l, names[0], (long long)row, (long long)N);
    return RC_OK;
}

/* the experts weights=as-stored computes as a fused MoE kernel does: SwiGLU
 * experts without biases, ungated shared experts (DeepSeek-V3, GLM-4.5,
 * Qwen3-MoE); RC_ERR_UNSUPPORTED naming what is not emulated */
static rc_status stored_experts_supported(const rc_config *c, rc_dtype dt)
{
    if (c->n_experts <= 0)
        return RC_OK;
    if (c->swiglu_limit > 0 || c->moe_topk_softmax)
        return rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored: %s's experts (clamped SwiGLU with biases) are not "
                         "emulated as stored", c->model_type);
    if (c->shared_intermediate > 0 && !c->shared_ungated)
        return rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored: %s's gated shared expert is not emulated as stored",
                         c->model_type);
    if (dt == RC_F16 && c->router == RC_ROUTER_SIGMOID_GROUPED && c->routed_scale != 1.0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored with dtype=fp16: vLLM scales the shared experts "
                         "by 1 / routed_scaling_factor there (not emulated); use dtype=bf16");
    return RC_OK;
}

rc_status rc_fp8w_create_stored(rc_backend *be, const rc_model *mdl, const rc_numerics *num, int64_t rows,
                                rc_fp8w **out)
{
    return rc_fp8w_create_stored_split(be, mdl, num, rows, 1, NULL, out);
}

rc_status rc_fp8w_create_stored_split(rc_backend *be, const rc_model *mdl, const rc_numerics *num, int64_t rows,
                                      int n_dev, const int64_t *l0, rc_fp8w **out)
{
    *out = NULL;
    const rc_config *c = &mdl->cfg;
    if (strcmp(mdl->quant_method, "fp8") != 0 || !mdl->st)
        return rc_errorf(RC_ERR_USAGE, "weights=as-stored: %s is not an FP8 checkpoint (its config.json has no "
                         "quantization_config with quant_method fp8)", mdl->dir);
    RC_TRY(stored_experts_supported(c, num->dt));
    rc_fp8w *f = calloc(1, sizeof *f);
    if (!f)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    f->be = be;
    f->wq = (rc_wq_numerics){RC_WQ_STORED, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN};
    f->dt = num->dt;
    f->n_layers = c->n_layers;
    f->rows = rows;
    f->n_ex = n_expert_slots(c);
    rc_status s = split_set(f, be, n_dev, l0);
    if (s == RC_OK)
        s = rc_calloc((void **)&f->m, c->n_layers * RC_FP8W_N, sizeof *f->m, "fp8 layers");
    if (s == RC_OK && f->n_ex > 0)
        s = rc_calloc((void **)&f->ex, c->n_layers * f->n_ex * RC_FP8W_EX_N, sizeof *f->ex, "fp8 experts");
    float *q = NULL, *sc = NULL;
    int64_t big = 0, bk_min = 0;
    for (int wh = 0; wh < RC_FP8W_N + RC_FP8W_EX_N; wh++) {
        int64_t N, K;
        char nm[96];
        if (wh >= RC_FP8W_N) { /* the experts' shapes (routed and shared) */
            if (f->n_ex == 0)
                continue;
            for (int64_t e = 0; e < f->n_ex; e += c->n_experts) { /* a routed expert, the shared ones */
                expert_part(c, e, (rc_fp8w_expart)(wh - RC_FP8W_N), &N, &K, nm, sizeof nm);
                f->kmax = K > f->kmax ? K : f->kmax;
                f->nmax = N > f->nmax ? N : f->nmax;
                big = N * K > big ? N * K : big;
            }
        } else if (which_shape(c, (rc_fp8w_which)wh, &N, &K)) {
            f->kmax = K > f->kmax ? K : f->kmax;
            f->nmax = N > f->nmax ? N : f->nmax;
            big = N * K > big ? N * K : big;
        }
    }
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&q, big, sizeof *q, "fp8 stored weights");
    f->wmax = big;
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&sc, big, sizeof *sc, "fp8 stored weights");
    for (int64_t l = 0; s == RC_OK && l < c->n_layers; l++) {
        const bool moe = rc_layer_is_moe(c, l);
        s = to_layer_device(f, be, l); /* the layer's codes and scales on its device */
        /* the slots of this layer: the dense weights, then (MoE layers) every expert's three */
        const int64_t n_slot = RC_FP8W_N + (moe ? f->n_ex * RC_FP8W_EX_N : 0);
        for (int64_t i = 0; s == RC_OK && i < n_slot; i++) {
            int64_t N, K, bn = 0, bk = 0;
            fp8w_mat *m;
            if (i < RC_FP8W_N) {
                const rc_fp8w_which wh = (rc_fp8w_which)i;
                /* latent attention's projections are read dequantized (not emulated as stored); a MoE layer
                 * has no dense MLP */
                if ((c->mla && (wh == RC_FP8W_QKV || wh == RC_FP8W_O)) || (moe && wh >= RC_FP8W_UP) ||
                    !which_shape(c, wh, &N, &K))
                    continue;
                const char *const *names;
                const int np = stored_parts(wh, &names);
                s = stored_mat(mdl->st, l, names, np, wh == RC_FP8W_QKV || wh == RC_FP8W_UP || wh == RC_FP8W_GATE,
                               N, K, q, sc, &bn, &bk);
                m = &f->m[l * RC_FP8W_N + wh];
            } else {
                const int64_t j = i - RC_FP8W_N, e = j / RC_FP8W_EX_N;
                const rc_fp8w_expart part = (rc_fp8w_expart)(j % RC_FP8W_EX_N);
                char nm[96];
                expert_part(c, e, part, &N, &K, nm, sizeof nm);
                const char *names[] = {nm};
                s = stored_mat(mdl->st, l, names, 1, part != RC_FP8W_EX_DOWN, N, K, q, sc, &bn, &bk);
                m = &f->ex[(l * f->n_ex + e) * RC_FP8W_EX_N + part];
            }
            if (s == RC_OK && !be->ops->host_memory && (bn != RC_FP8_BLOCK || bk != RC_FP8_BLOCK))
                s = rc_errorf(RC_ERR_UNSUPPORTED, "weights=as-stored on the %s backend: blocks of [%lld, %lld] "
                              "(its fp8 kernels take 128 x 128)", be->ops->name, (long long)bn, (long long)bk);
            m->bn = bn;
            m->bk = bk;
            if (s == RC_OK)
                s = mat_fill(be, m, q, sc, N, K, &f->wq, num->dt);
            bk_min = bk_min == 0 || bk < bk_min ? bk : bk_min;
        }
    }
    free(q);
    free(sc);
    if (s == RC_OK)
        s = scratch_alloc_all(f, be, bk_min > 0 ? bk_min : RC_FP8_BLOCK);
    if (s != RC_OK) {
        rc_fp8w_free(f);
        return s;
    }
    *out = f;
    return RC_OK;
}

void rc_fp8w_free(rc_fp8w *f)
{
    if (!f)
        return;
    for (int64_t i = 0; f->m && i < f->n_layers * RC_FP8W_N; i++)
        mat_free(f->be, &f->m[i]);
    for (int64_t i = 0; f->ex && i < f->n_layers * f->n_ex * RC_FP8W_EX_N; i++)
        mat_free(f->be, &f->ex[i]);
    free(f->m);
    free(f->ex);
    for (int d = 0; d < RC_MAX_DEVICES; d++)
        scratch_free(f->be, &f->sc[d]);
    free(f);
}

bool rc_fp8w_w8a8(const rc_fp8w *f) { return f && f->wq.act != RC_ACTQ_NONE; }

rc_status rc_fp8w_linear(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, const float *x, int64_t M,
                         const float *bias, rc_dtype out_dt, float *y)
{
    if (l < 0 || l >= f->n_layers || which < 0 || which >= RC_FP8W_N || M > f->rows || !rc_fp8w_w8a8(f) ||
        be != f->be)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 linear: layer %lld, weight %d, %lld rows", (long long)l, (int)which,
                         (long long)M);
    const fp8w_mat *m = &f->m[l * RC_FP8W_N + which];
    if (!m->N)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 linear: layer %lld has no stored weight %d", (long long)l, (int)which);
    return fp8w_run(be, m, &f->wq, x, M, bias, NULL, out_dt, &f->sc[dev_of(f, l)], y);
}

bool rc_fp8w_deq_device(const rc_fp8w *f)
{
    return f && f->wq.kind == RC_WQ_FP8 && f->wq.act == RC_ACTQ_NONE && !f->be->ops->host_memory;
}

/* layer l's W8A16 matrix `which` held as codes on a device, or an error */
static rc_status deq_mat(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, const fp8w_mat **m)
{
    if (!rc_fp8w_deq_device(f) || l < 0 || l >= f->n_layers || which < 0 || which >= RC_FP8W_N || be != f->be ||
        !be->ops->fp8_deq_matmul || !be->ops->fp8_dequant || f->m[l * RC_FP8W_N + which].N == 0)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 dequantized linear: layer %lld, weight %d", (long long)l, (int)which);
    *m = &f->m[l * RC_FP8W_N + which];
    return RC_OK;
}

rc_status rc_fp8w_deq_linear(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, const float *x, int64_t M,
                             const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    const fp8w_mat *m = NULL;
    RC_TRY(deq_mat(be, f, l, which, &m));
    return be->ops->fp8_deq_matmul(be, x, M, m->K, m->dq, m->ds, (int)f->wq.scale, f->dt, m->N, bias, in_dt, out_dt,
                                   f->sc[dev_of(f, l)].wb, y);
}

rc_status rc_fp8w_deq_weight(rc_backend *be, rc_fp8w *f, int64_t l, rc_fp8w_which which, rc_wt *W)
{
    const fp8w_mat *m = NULL;
    RC_TRY(deq_mat(be, f, l, which, &m));
    float *wb = f->sc[dev_of(f, l)].wb;
    RC_TRY(be->ops->fp8_dequant(be, m->dq, m->ds, (int)f->wq.scale, f->dt, m->N, m->K, wb));
    *W = (rc_wt){wb, f->dt, false};
    return RC_OK;
}

bool rc_fp8w_has(const rc_fp8w *f, int64_t l, rc_fp8w_which which)
{
    return f && l >= 0 && l < f->n_layers && which >= 0 && which < RC_FP8W_N && f->m[l * RC_FP8W_N + which].N > 0;
}

bool rc_fp8w_has_experts(const rc_fp8w *f) { return f && f->n_ex > 0; }

rc_status rc_fp8w_expert_cb(void *f, rc_backend *be, int64_t l, int64_t e, int part, const float *x, int64_t M,
                            const float *rw, rc_dtype out_dt, float *y)
{
    return rc_fp8w_expert_linear(be, (rc_fp8w *)f, l, e, (rc_fp8w_expart)part, x, M, rw, out_dt, y);
}

rc_status rc_fp8w_expert_linear(rc_backend *be, rc_fp8w *f, int64_t l, int64_t e, rc_fp8w_expart part,
                                const float *x, int64_t M, const float *rw, rc_dtype out_dt, float *y)
{
    if (!f || l < 0 || l >= f->n_layers || e < 0 || e >= f->n_ex || part < 0 || part >= RC_FP8W_EX_N ||
        M > f->rows || be != f->be || f->ex[(l * f->n_ex + e) * RC_FP8W_EX_N + part].N == 0)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 expert linear: layer %lld, expert %lld, part %d, %lld rows",
                         (long long)l, (long long)e, (int)part, (long long)M);
    const fp8w_mat *m = &f->ex[(l * f->n_ex + e) * RC_FP8W_EX_N + part];
    return fp8w_run(be, m, &f->wq, x, M, NULL, rw, out_dt, &f->sc[dev_of(f, l)], y);
}

rc_status rc_fp8w_linear_once(rc_backend *be, const float *x, int64_t M, int64_t K, const float *w, int64_t N,
                              const float *bias, const rc_wq_numerics *wq, rc_dtype dt, float *y)
{
    const bool block = wq->scale == RC_WSCALE_BLOCK, host = be->ops->host_memory;
    if (block && K % RC_FP8_BLOCK != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "fp8 block GEMM: K %lld is not a multiple of 128", (long long)K);
    fp8w_mat m = {0};
    fp8w_scratch scr = {0};
    float *q = NULL, *sc = NULL, *dx = NULL, *db = NULL, *dy = NULL;
    rc_status s = rc_alloc_aligned((void **)&q, N * K, sizeof *q, "fp8 test");
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&sc, n_scales(N, K, wq->scale), sizeof *sc, "fp8 test");
    if (s == RC_OK) {
        rc_fp8w_quant_weight(w, N, K, wq->scale, NULL, q, sc);
        s = mat_fill(be, &m, q, sc, N, K, wq, dt);
    }
    /* a device backend: x and the bias in its memory, y copied back */
    if (s == RC_OK && !host)
        s = dev_put(be, x, M * K, RC_F32, &dx);
    if (s == RC_OK && !host && bias)
        s = dev_put(be, bias, N, RC_F32, &db);
    if (s == RC_OK && !host)
        s = be->ops->alloc(be, M * N, &dy);
    const float *xa = host ? x : dx, *ba = host ? bias : db;
    float *ya = host ? y : dy;
    if (s == RC_OK && wq->act == RC_ACTQ_NONE && host) {
        s = be->ops->matmul(be, xa, M, K, (rc_wt){m.deq, dt, false}, N, ba, dt, dt, ya);
    } else if (s == RC_OK && wq->act == RC_ACTQ_NONE) { /* the codes dequantized per call */
        s = be->ops->alloc(be, N * K / 2 + N * K % 2, &scr.wb);
        if (s == RC_OK)
            s = be->ops->fp8_deq_matmul(be, xa, M, K, m.dq, m.ds, (int)wq->scale, dt, N, ba, dt, dt, scr.wb, ya);
    } else if (s == RC_OK) {
        s = scratch_alloc(be, M, K, N, N * K, RC_FP8_BLOCK, &scr);
        if (s == RC_OK)
            s = fp8w_run(be, &m, wq, xa, M, ba, NULL, dt, &scr, ya);
    }
    if (s == RC_OK && !host)
        s = be->ops->download(be, dy, M * N, y);
    scratch_free(be, &scr);
    mat_free(be, &m);
    float *dev[] = {dx, db, dy};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i])
            be->ops->free(be, dev[i]);
    free(q);
    free(sc);
    return s;
}

rc_status rc_fp8w_stored_linear_once(rc_backend *be, const float *x, int64_t M, int64_t K, const float *q,
                                     const float *s, int64_t N, int64_t b0, int64_t b1, const float *rw, rc_dtype dt,
                                     float *y, float *xq, float *sx)
{
    if (!be->ops->host_memory || b0 < 1 || b1 < 1 || K % b1 != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "fp8 stored block GEMM: a host backend and K a multiple of %lld",
                         (long long)b1);
    const rc_wq_numerics wq = {RC_WQ_STORED, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN};
    fp8w_mat m = {.bn = b0, .bk = b1};
    fp8w_scratch scr = {0};
    rc_status st = mat_fill(be, &m, q, s, N, K, &wq, dt);
    if (st == RC_OK)
        st = scratch_alloc(be, M, K, N, N * K, b1, &scr);
    if (st == RC_OK)
        st = fp8w_run(be, &m, &wq, x, M, NULL, rw, dt, &scr, y);
    if (st == RC_OK && xq) {
        memcpy(xq, scr.xq, (size_t)(M * K) * sizeof *xq);
        memcpy(sx, scr.sa, (size_t)(M * (K / b1)) * sizeof *sx);
    }
    scratch_free(be, &scr);
    mat_free(be, &m);
    return st;
}
