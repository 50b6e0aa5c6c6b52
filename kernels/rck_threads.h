/* What one CUDA thread of each kernel does: the index arithmetic (which row,
 * head, key, element) around the shared arithmetic of src/engine/ops_inline.h.
 *
 * The __global__ kernels in the kernels/ .cu files are "i = blockIdx.x * blockDim.x +
 * threadIdx.x; if (i < n) rck_X_thread(&args, i);". Plain C, so the CPU test
 * suite (tests/test_cuda_host.c) runs every thread body in a loop over the
 * same grid on the host and checks it against the CPU backend: the kernels'
 * indexing is exercised even where no GPU is present.
 *
 * Every pointer in an args struct is device memory on the GPU (host memory in
 * the host emulation). Shapes are int64_t; a launch covers n threads. */
#ifndef RC_RCK_THREADS_H
#define RC_RCK_THREADS_H

#include <stdint.h>

#include "backend.h"
#include "ops_inline.h"

/* y[i] = R(x[i]) */
typedef struct {
    const float *x;
    float *y;
    int64_t n;
    rc_dtype dt;
} rck_round_args;

RC_HD static inline void rck_round_thread(const rck_round_args *a, int64_t i)
{
    a->y[i] = rc_round_to(a->x[i], a->dt);
}

/* bits[i] = bf16 / fp16 bit pattern of x[i] (x already representable) */
typedef struct {
    const float *x;
    uint16_t *bits;
    int64_t n;
    rc_dtype dt;
} rck_to_half_args;

/* the bf16 / fp16 bit pattern of x (exact when x is a value of dt: the 2-byte storage of a value) */
RC_HD static inline uint16_t rck_half(float x, rc_dtype dt)
{
    return dt == RC_BF16 ? rc_f32_to_bf16(x) : rc_f32_to_f16(x);
}

RC_HD static inline void rck_to_half_thread(const rck_to_half_args *a, int64_t i)
{
    a->bits[i] = rck_half(a->x[i], a->dt);
}

/* element i of a bf16 / fp16 array as fp32 (exact), as the CPU widens its 2-byte weights */
RC_HD static inline float rck_wide(const uint16_t *p, int64_t i, rc_dtype dt)
{
    return dt == RC_BF16 ? rc_bf16_to_f32(p[i]) : rc_f16_to_f32(p[i]);
}

/* x[i] = bits[i] widened to fp32 (exact) */
typedef struct {
    const uint16_t *bits;
    float *x;
    int64_t n;
    rc_dtype dt;
} rck_widen_args;

RC_HD static inline void rck_widen_thread(const rck_widen_args *a, int64_t i)
{
    a->x[i] = rck_wide(a->bits, i, a->dt);
}

/* out[r, j] = table[tokens[r], j]; thread i = r * hidden + j; the table is
 * fp32 (table) or 2-byte (table16 of dtype tdt, widened) */
typedef struct {
    const int32_t *tokens;
    const float *table;
    float *out;
    int64_t n_rows, hidden;
    const uint16_t *table16;
    rc_dtype tdt;
    uint16_t *out16; /* set in place of out: held at 2 bytes, the bits of st (every value one of it) */
    rc_dtype st;
} rck_embed_args;

RC_HD static inline void rck_embed_thread(const rck_embed_args *a, int64_t i)
{
    int64_t r = i / a->hidden, j = i % a->hidden;
    const int64_t k = (int64_t)a->tokens[r] * a->hidden + j;
    const float v = a->table16 ? rck_wide(a->table16, k, a->tdt) : a->table[k];
    if (a->out16)
        a->out16[i] = rck_half(v, a->st);
    else
        a->out[i] = v;
}

/* dst[k, j] = src[rows[k], j]; thread i = k * row_len + j */
typedef struct {
    const float *src;
    const int64_t *rows;
    float *dst;
    int64_t n, row_len;
} rck_gather_args;

RC_HD static inline void rck_gather_thread(const rck_gather_args *a, int64_t i)
{
    int64_t k = i / a->row_len, j = i % a->row_len;
    a->dst[i] = a->src[a->rows[k] * a->row_len + j];
}

/* out = R(a + b), x = R(act(x)), gate = R_out(R_act(act(gate)) * up), y = R(y + bias[col]),
 * x = clamp(x, -c, c), x = R(x * c), x = rco_softcap1(x, c). a16, b16, out16 (RCK_EW_ADD, RCK_EW_ACT,
 * RCK_EW_ACT_MUL): set in place of a, b, out when that operand is held at 2 bytes (the bit patterns of
 * st, every value one of it), read widened and written as the bits of the rounded value: the same
 * arithmetic on the same values */
typedef struct {
    int op; /* RCK_EW_* */
    const float *a, *b;
    float *out;
    int64_t n, n_cols;
    rc_act act;
    rc_dtype act_dt, out_dt;
    float c; /* RCK_EW_CLAMP, RCK_EW_SCALE, RCK_EW_SOFTCAP; RCK_EW_SWIGLU_CLAMP: alpha */
    float c2; /* RCK_EW_SWIGLU_CLAMP: limit */
    const uint16_t *a16, *b16;
    uint16_t *out16;
    rc_dtype st;
} rck_ew_args;

enum { RCK_EW_ADD, RCK_EW_ACT, RCK_EW_ACT_MUL, RCK_EW_BIAS, RCK_EW_CLAMP, RCK_EW_SCALE, RCK_EW_SOFTCAP,
       RCK_EW_SWIGLU_CLAMP };

RC_HD static inline void rck_ew_thread(const rck_ew_args *a, int64_t i)
{
    switch (a->op) {
    case RCK_EW_ADD: {
        const float x = a->a16 ? rck_wide(a->a16, i, a->st) : a->a[i];
        const float y = a->b16 ? rck_wide(a->b16, i, a->st) : a->b[i];
        const float v = rc_round_to(x + y, a->out_dt);
        if (a->out16)
            a->out16[i] = rck_half(v, a->st);
        else
            a->out[i] = v;
        break;
    }
    case RCK_EW_ACT: {
        const float v = rco_act_dt(a->act, a->a16 ? rck_wide(a->a16, i, a->st) : a->a[i], a->out_dt);
        if (a->out16)
            a->out16[i] = rck_half(v, a->st);
        else
            a->out[i] = v;
        break;
    }
    case RCK_EW_ACT_MUL: {
        const float g = a->a16 ? rck_wide(a->a16, i, a->st) : a->a[i];
        const float u = a->b16 ? rck_wide(a->b16, i, a->st) : a->b[i];
        const float v = rc_round_to(rco_act_dt(a->act, g, a->act_dt) * u, a->out_dt);
        if (a->out16)
            a->out16[i] = rck_half(v, a->st);
        else
            a->out[i] = v;
        break;
    }
    case RCK_EW_BIAS: /* a: the GEMM's fp32 result, b: bias or NULL */
        a->out[i] = rc_round_to(a->b ? a->a[i] + a->b[i % a->n_cols] : a->a[i], a->out_dt);
        break;
    case RCK_EW_CLAMP:
        a->out[i] = rco_clamp1(a->a[i], a->c);
        break;
    case RCK_EW_SCALE:
        a->out[i] = rco_scale1(a->a[i], a->c, a->out_dt);
        break;
    case RCK_EW_SOFTCAP:
        a->out[i] = rco_softcap1(a->a[i], a->c, a->out_dt);
        break;
    case RCK_EW_SWIGLU_CLAMP: /* a: gate, b: up (gpt-oss) */
        a->out[i] = rco_swiglu_clamp1(a->a[i], a->b[i], a->c, a->c2, a->out_dt);
        break;
    }
}

/* F.normalize of one row (NormHead): thread r */
typedef struct {
    const float *W;
    float *out;
    int64_t M, H;
    float eps;
    rc_dtype out_dt;
} rck_normalize_args;

RC_HD static inline void rck_normalize_thread(const rck_normalize_args *a, int64_t r)
{
    rco_normalize_row(a->W + r * a->H, a->H, a->eps, a->out_dt, a->out + r * a->H);
}

/* one thread per row */
typedef struct {
    rc_norm_kind kind;
    const float *x, *w, *b;
    float *out;
    int64_t M, H;
    float eps;
    int rms_lanes;
    rc_dtype mid_dt, out_dt;
    uint16_t *out16; /* set in place of out: the output held at 2 bytes, the bits of st (= out_dt) */
    rc_dtype st;
    const uint16_t *x16; /* set in place of x: the input held at 2 bytes, the bits of st */
} rck_norm_args;

RC_HD static inline void rck_norm_thread(const rck_norm_args *a, int64_t r)
{
    if (a->out16 || a->x16) { /* the row's statistics, then each output's rounded value stored as it is held */
        const void *xr = a->x16 ? (const void *)(a->x16 + r * a->H) : (const void *)(a->x + r * a->H);
        const rc_dtype xs = a->x16 ? a->st : RC_F32;
        float mean, rs;
        rco_norm_stats_st(a->kind, xr, xs, a->H, a->eps, a->rms_lanes, &mean, &rs);
        for (int64_t i = 0; i < a->H; i++) {
            const float v = rco_norm_out(a->kind, rco_at(xr, i, xs), mean, rs, a->w[i], a->b ? a->b + i : NULL,
                                         a->mid_dt, a->out_dt);
            if (a->out16)
                a->out16[r * a->H + i] = rck_half(v, a->st);
            else
                a->out[r * a->H + i] = v;
        }
        return;
    }
    rco_norm_row(a->kind, a->x + r * a->H, a->H, a->w, a->b, a->eps, a->rms_lanes, a->mid_dt, a->out_dt,
                 a->out + r * a->H);
}

/* q / k norm: thread i = r * (nq + nk) + s normalises segment s of row r
 * (rco_qk_norm_seg) */
typedef struct {
    float *qkv;
    const float *wq, *wk;
    int64_t M, stride, nq, dq, nk, dk;
    float eps;
    int rms_lanes;
    rc_dtype mid_dt, out_dt;
    uint16_t *qkv16; /* set in place of qkv: held at 2 bytes, the bits of st (= out_dt) */
    rc_dtype st;
} rck_qk_norm_args;

RC_HD static inline void rck_qk_norm_thread(const rck_qk_norm_args *a, int64_t i)
{
    const int64_t segs = a->nq + a->nk;
    if (a->qkv16) { /* rco_qk_norm_seg's segment, its statistics and outputs over the widened values */
        const int64_t s = i % segs, len = s < a->nq ? a->dq : a->dk;
        uint16_t *x = a->qkv16 + (i / segs) * a->stride + (s < a->nq ? s * a->dq : a->nq * a->dq + (s - a->nq) * a->dk);
        const float *w = s < a->nq ? a->wq : a->wk;
        float mean, rs;
        rco_norm_stats_st(RC_NORM_RMS, x, a->st, len, a->eps, a->rms_lanes, &mean, &rs);
        for (int64_t t = 0; t < len; t++)
            x[t] = rck_half(rco_norm_out(RC_NORM_RMS, rck_wide(x, t, a->st), mean, rs, w[t], NULL, a->mid_dt, a->out_dt),
                            a->st);
        return;
    }
    rco_qk_norm_seg(a->qkv + (i / segs) * a->stride, i % segs, a->nq, a->dq, a->wq, a->dk, a->wk, a->eps,
                    a->rms_lanes, a->mid_dt, a->out_dt);
}

/* bits[i] = the bf16 bit pattern of float8_e4m3fn code codes[i] (exact) */
typedef struct {
    const uint8_t *codes;
    uint16_t *bits;
    int64_t n;
} rck_fp8_widen_args;

RC_HD static inline void rck_fp8_widen_thread(const rck_fp8_widen_args *a, int64_t i)
{
    a->bits[i] = rc_f32_to_bf16(rc_fp8_to_f32(a->codes[i], RC_FP8_E4M3));
}

/* W8A16: bits[i] = dt's bits of W'[n][k] = R(q * R(s)) (rco_fp8w_deq) for i = n * K + k, from the
 * float8_e4m3fn codes [N][K] and the scales rounded to dt (rs, laid out by scale_mode: rco_fp8w_scale_at):
 * the dequantized copy the CPU holds, to the bit */
typedef struct {
    const uint8_t *codes;
    const float *rs;
    uint16_t *bits;
    int64_t N, K;
    int scale_mode;
    rc_dtype dt;
} rck_fp8_deq_args;

RC_HD static inline void rck_fp8_deq_thread(const rck_fp8_deq_args *a, int64_t i)
{
    const int64_t n = i / a->K, k = i % a->K;
    const float w = rco_fp8w_deq(rc_fp8_to_f32(a->codes[i], RC_FP8_E4M3), a->rs[rco_fp8w_scale_at(n, k, a->K,
                                                                                                   a->scale_mode)],
                                 a->dt);
    a->bits[i] = a->dt == RC_F16 ? rc_f32_to_f16(w) : rc_f32_to_bf16(w);
}

/* Fixed-order GEMM (--kernels invariant): thread i = m * N + n computes
 * y[m, n] = R(rco_gemm_dot(x[m, :], W[n, :], one chunk) + bias[n]) -- the
 * CPU invariant order,
 * whatever M is. With Wt set, the weight is read from its transposed copy
 * Wt[K, N] (the same products in the same order; neighbouring threads read
 * neighbouring addresses). */
typedef struct {
    const float *x, *W, *bias;
    float *y;
    int64_t M, K, N;
    rc_dtype out_dt;
    const float *Wt; /* [K, N] or NULL */
    int64_t ldx, ldw; /* rows of x and W this far apart (a K-slice of a wider GEMM); 0: K */
    const uint16_t *W16; /* set: the weight W[N, K] as stored, bf16 / fp16 (w_dt), widened in registers */
    rc_dtype w_dt;
    /* activations held at 2 bytes (bits of out_dt / x_dt, with W16): x16 set in place of x, y16 in place of
     * y (the rounded value's bits) */
    const uint16_t *x16;
    rc_dtype x_dt;
    uint16_t *y16;
    /* set (with x, in place of W16): the weight W[N, K] as float8_e4m3fn codes (fp8w.c's device W8A8
     * weights), each widened in registers; x and y fp32 */
    const uint8_t *W8;
    /* set with W8 (W8A16, the whole K): each code dequantized in registers to R(q * rs) in w_dt (rco_fp8w_deq),
     * rs the scales rounded to w_dt, laid out by w8_mode (rco_fp8w_scale_at) */
    const float *W8s;
    int w8_mode;
} rck_gemm_args;

/* rco_gemm_dot (one chunk: the invariant order) with b a row of 2-byte
 * weights, each widened exactly as it is read: the same products in the same
 * order as rco_gemm_dot over the row widened first (the CPU portable kernel) */
RC_HD static inline float rck_gemm_dot16(const float *a, const uint16_t *b, rc_dtype dt, int64_t K)
{
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++)
        acc[k & 15] = fmaf(a[k], rck_wide(b, k, dt), acc[k & 15]);
    return rco_tree16(acc);
}

/* rck_gemm_dot16 with a a row of 2-byte activations (of adt), each widened exactly as it is read: the same
 * products in the same order */
RC_HD static inline float rck_gemm_dot16x(const uint16_t *a, rc_dtype adt, const uint16_t *b, rc_dtype dt, int64_t K)
{
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++)
        acc[k & 15] = fmaf(rck_wide(a, k, adt), rck_wide(b, k, dt), acc[k & 15]);
    return rco_tree16(acc);
}

/* rck_gemm_dot16 with b a row of float8_e4m3fn codes, each widened exactly as it is read (every e4m3 value
 * is an fp32 and a bf16 value): the products and the order of rck_gemm_dot16 over the codes held as bf16 */
RC_HD static inline float rck_gemm_dot8(const float *a, const uint8_t *b, int64_t K)
{
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++)
        acc[k & 15] = fmaf(a[k], rc_fp8_to_f32(b[k], RC_FP8_E4M3), acc[k & 15]);
    return rco_tree16(acc);
}

/* rck_gemm_dot16 over W8A16's dequantized row n: each code widened and dequantized as it is read to the
 * value the 2-byte copy would hold (rco_fp8w_deq), so the same products in the same order */
RC_HD static inline float rck_gemm_dot8d(const float *a, const uint8_t *b, const float *rs, int mode, int64_t n,
                                         rc_dtype dt, int64_t K)
{
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++)
        acc[k & 15] = fmaf(a[k], rco_fp8w_deq(rc_fp8_to_f32(b[k], RC_FP8_E4M3), rs[rco_fp8w_scale_at(n, k, K, mode)],
                                              dt),
                           acc[k & 15]);
    return rco_tree16(acc);
}

RC_HD static inline void rck_gemm_inv_thread(const rck_gemm_args *a, int64_t i)
{
    int64_t m = i / a->N, n = i % a->N;
    const int64_t ldx = a->ldx > 0 ? a->ldx : a->K, ldw = a->ldw > 0 ? a->ldw : a->K;
    const rco_gemm_order o = rco_gemm_order_for(1, a->M, a->K);
    float v = a->W8s  ? rck_gemm_dot8d(a->x + m * ldx, a->W8 + n * ldw, a->W8s, a->w8_mode, n, a->w_dt, a->K)
              : a->W8 ? rck_gemm_dot8(a->x + m * ldx, a->W8 + n * ldw, a->K)
              : a->x16 ? rck_gemm_dot16x(a->x16 + m * ldx, a->x_dt, a->W16 + n * ldw, a->w_dt, a->K)
              : a->W16 ? rck_gemm_dot16(a->x + m * ldx, a->W16 + n * ldw, a->w_dt, a->K)
              : a->Wt ? rco_gemm_dot(a->x + m * ldx, a->Wt + n, a->K, a->N, o)
                      : rco_gemm_dot(a->x + m * ldx, a->W + n * ldw, a->K, 1, o);
    v = rc_round_to(a->bias ? v + a->bias[n] : v, a->out_dt);
    if (a->y16)
        a->y16[i] = rck_half(v, a->out_dt);
    else
        a->y[i] = v;
}

/* y[i] = bits of bias[i % n_cols] (a value of dt): the C operand of a cuBLAS GEMM whose 2-byte output gets
 * its bias added by the GEMM's beta = 1 (the same fp32 sum as the bias step after an fp32-output GEMM) */
typedef struct {
    const float *bias;
    uint16_t *y;
    int64_t n, n_cols;
    rc_dtype dt;
} rck_bias16_args;

RC_HD static inline void rck_bias16_thread(const rck_bias16_args *a, int64_t i)
{
    a->y[i] = rck_half(a->bias[i % a->n_cols], a->dt);
}

/* y[c, r] = x[r, c] for x[rows, cols]; thread i = c * rows + r */
typedef struct {
    const float *x;
    float *y;
    int64_t rows, cols;
} rck_transpose_args;

RC_HD static inline void rck_transpose_thread(const rck_transpose_args *a, int64_t i)
{
    int64_t c = i / a->rows, r = i % a->rows;
    a->y[i] = a->x[r * a->cols + c];
}

/* Attention over the packed batch bd (its arrays in device memory too). */
typedef struct {
    rc_batch_desc bd;
    const float *inv_freq;
    float *qkv; /* [n_rows, (nh + 2 nkv) d] */
    float *k_cache, *v_cache; /* this layer's [n_slots][nkv][T][d] */
    float *out;              /* [n_rows, nh d] */
    float *scratch;          /* per (row, head) thread: RCK_ATTN_SCRATCH floats */
    int64_t nh, nkv, d, rotary_half, T, sliding_window, max_keys, row_begin;
    float scale;
    int invariant;
    rc_dtype cs_dt, rope_dt, score_dt, prob_dt, out_dt;
    rc_attn_params ap; /* scaling and ALiBi (slopes in device memory) for rc_attn_score_spec */
    rc_kv_quant kv_quant; /* what the stored keys and values become (rco_kv_value) */
    float k_scale, v_scale;
    rc_dtype kv_deq_dt;
    /* set: this layer's cache held at kv_dt's width (bf16 / fp16) instead of k_cache, v_cache: the store writes
     * its bit patterns, the attention widens each element where it reads it */
    uint16_t *k16, *v16;
    rc_dtype kv_dt;
    /* set in place of qkv / out when that buffer is held at the dtype's width (the bit patterns of st, every
     * value one of it; rc_attn_params.qkv_st, out_st): read widened, written as the bits of the rounded value */
    uint16_t *qkv16, *out16;
    rc_dtype st;
} rck_attn_args;

/* element k of the packed qkv rows as fp32: its float, or a 2-byte qkv's element widened (exact) */
RC_HD static inline float rck_qkv_at(const rck_attn_args *a, int64_t k)
{
    return a->qkv16 ? rck_wide(a->qkv16, k, a->st) : a->qkv[k];
}

/* floats of scratch one attention thread needs */
RC_HD static inline int64_t rck_attn_scratch(int64_t max_keys, int64_t d)
{
    return max_keys + 2 * RC_SOFTMAX_MAX_CHUNKS + 2 * d;
}

/* RoPE: thread i = (r * (nh + nkv) + h) * half + j rotates pair j of head h
 * (Q heads, then K heads) of row r, and rounds the head's dims from
 * 2 half + j on, every half-th, that RoPE passes */
RC_HD static inline void rck_rope_thread(const rck_attn_args *a, int64_t i)
{
    const int64_t half = a->rotary_half, heads = a->nh + a->nkv;
    const int64_t j = i % half, h = (i / half) % heads, r = i / (half * heads);
    const int64_t base = r * (a->nh + 2 * a->nkv) * a->d + h * a->d;
    float c, s;
    rco_rope_cs((float)a->bd.pos[r], a->inv_freq[j], a->ap.rope_attn_factor, a->cs_dt, &c, &s);
    if (a->qkv16) { /* a 2-byte qkv (rope_dt is st): the pair and the dims that pass widened, rounded, stored */
        uint16_t *v16 = a->qkv16 + base;
        float x1 = rck_wide(v16, j, a->st), x2 = rck_wide(v16, j + half, a->st);
        rco_rope_pair(&x1, &x2, c, s, a->ap.rope_mid_dt, a->rope_dt);
        v16[j] = rck_half(x1, a->st);
        v16[j + half] = rck_half(x2, a->st);
        for (int64_t t = 2 * half + j; t < a->d; t += half)
            v16[t] = rck_half(rc_round_to(rck_wide(v16, t, a->st), a->rope_dt), a->st);
        return;
    }
    float *v = a->qkv + base;
    rco_rope_pair(v + j, v + j + half, c, s, a->ap.rope_mid_dt, a->rope_dt);
    for (int64_t t = 2 * half + j; t < a->d; t += half) /* the dims that pass, rounded as the rotated ones */
        v[t] = rc_round_to(v[t], a->rope_dt);
}

/* K and V of the new rows into the cache: thread i = (r * nkv + h) * d + t */
RC_HD static inline void rck_kv_store_thread(const rck_attn_args *a, int64_t i)
{
    const int64_t d = a->d, t = i % d, h = (i / d) % a->nkv, r = i / (d * a->nkv);
    const int64_t b = a->bd.seq_of_row[r], p = a->bd.pos[r];
    const int64_t row = r * (a->nh + 2 * a->nkv) * d;
    const int64_t off = a->bd.slot[b] * a->nkv * a->T * d + h * a->T * d + p * d + t;
    const float kx = rco_kv_value(rck_qkv_at(a, row + (a->nh + h) * d + t), a->kv_quant, a->k_scale, a->kv_deq_dt);
    const float vx =
        rco_kv_value(rck_qkv_at(a, row + (a->nh + a->nkv + h) * d + t), a->kv_quant, a->v_scale, a->kv_deq_dt);
    if (a->k16) { /* values of kv_dt (forward.c engine_kv_dt): their bit patterns, exact */
        a->k16[off] = a->kv_dt == RC_BF16 ? rc_f32_to_bf16(kx) : rc_f32_to_f16(kx);
        a->v16[off] = a->kv_dt == RC_BF16 ? rc_f32_to_bf16(vx) : rc_f32_to_f16(vx);
    } else {
        a->k_cache[off] = kx;
        a->v_cache[off] = vx;
    }
}

/* attention of one (row, head): thread i = (r - row_begin) * nh + h; the
 * launch covers a chunk of rows starting at row_begin, so the scratch stays
 * bounded */
RC_HD static inline void rck_attn_thread(const rck_attn_args *a, int64_t i)
{
    const int64_t r = a->row_begin + i / a->nh, h = i % a->nh, d = a->d;
    const int64_t b = a->bd.seq_of_row[r], p = a->bd.pos[r];
    const int64_t lo = rco_attn_lo(p, a->sliding_window);
    const int64_t kvh = h / (a->nh / a->nkv);
    const int64_t base = a->bd.slot[b] * a->nkv * a->T * d + kvh * a->T * d + lo * d;
    float *sc = a->scratch + i * rck_attn_scratch(a->max_keys, d);
    float *ms = sc + a->max_keys, *ls = ms + RC_SOFTMAX_MAX_CHUNKS, *acc = ls + RC_SOFTMAX_MAX_CHUNKS;
    const rco_score_spec sp =
        rc_attn_score_spec(&a->ap, a->ap.alibi_slopes, h, p, lo, a->bd.start[b] + a->bd.n_new[b] - 1);
    const int64_t q0 = r * (a->nh + 2 * a->nkv) * d + h * d, o0 = r * a->nh * d + h * d;
    /* a 2-byte q is widened into acc, which only P.V uses, after the scores; a 2-byte out is written into
     * part (P.V's last write is out, from acc) and stored from there */
    if (a->qkv16)
        for (int64_t t = 0; t < d; t++)
            acc[t] = rck_wide(a->qkv16, q0 + t, a->st);
    const float *q = a->qkv16 ? acc : a->qkv + q0;
    float *o = a->out16 ? acc + d : a->out + o0;
    const int mode = rco_attn_mode(a->invariant, a->bd.n_new[b]);
    if (a->k16) /* a 2-byte cache: each key and value element widened where it is read */
        rco_attn_row_kv16(q, a->k16 + base, a->v16 + base, a->kv_dt, p - lo + 1, d, &sp, mode, a->max_keys,
                          a->prob_dt, a->out_dt, sc, ms, ls, acc, acc + d, o);
    else
        rco_attn_row(q, a->k_cache + base, a->v_cache + base, p - lo + 1, d, &sp, mode, a->max_keys, a->prob_dt,
                     a->out_dt, sc, ms, ls, acc, acc + d, o);
    if (a->out16)
        for (int64_t t = 0; t < d; t++)
            a->out16[o0 + t] = rck_half(acc[d + t], a->st);
}

/* log-probs of one row: thread r */
typedef struct {
    const float *logits;
    int64_t M, V;
    float temperature;
    rc_dtype lp_dt;
    float *full;           /* [M, V] or NULL */
    const int32_t *targets; /* [M] or NULL */
    float *target_out;     /* [M] or NULL */
    const uint16_t *logits16; /* set in place of logits: held at 2 bytes, the bits of st */
    rc_dtype st;
} rck_lp_args;

RC_HD static inline void rck_logprob_thread(const rck_lp_args *a, int64_t r)
{
    const void *x = a->logits16 ? (const void *)(a->logits16 + r * a->V) : (const void *)(a->logits + r * a->V);
    rco_logprob_row_st(x, a->logits16 ? a->st : RC_F32, a->V, a->temperature, a->lp_dt,
                       a->full ? a->full + r * a->V : 0, a->targets && a->target_out ? a->targets[r] : -1,
                       a->target_out ? a->target_out + r : 0);
}

/* ---- fp8 weights (fp8w.c; kernels/fp8.cu) ---------------------------------
 * A call's activations x [M, K] to fp8 values q and scales sa, as
 * rc_fp8w_quant_act: first the scales (rck_fp8_scale_thread; per tensor the
 * rows' amax, then rck_fp8_tensor_scale_thread's one scale), then every value
 * (rck_fp8_quant_thread). amax is exact in any order, so the split changes
 * nothing. */
typedef struct {
    const float *x;
    float *q, *sa;
    float *amax; /* TENSOR: [M] scratch, the rows' amax */
    int64_t M, K;
    rc_fp8_act mode;
} rck_fp8_act_args;

RC_HD static inline float rck_amax(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        m = rco_fp8w_amax_step(m, x[i]);
    return m;
}

/* GROUP: thread r * (K / 128) + g, the scale of row r's group g; TOKEN:
 * thread r, row r's scale; TENSOR: thread r, row r's amax */
RC_HD static inline void rck_fp8_scale_thread(const rck_fp8_act_args *a, int64_t i)
{
    const int64_t B = RCO_FP8W_BLOCK;
    if (a->mode == RC_FP8_ACT_GROUP) {
        const int64_t G = a->K / B, r = i / G, g = i % G;
        a->sa[i] = rco_fp8w_scale_group(rck_amax(a->x + r * a->K + g * B, B));
    } else if (a->mode == RC_FP8_ACT_TOKEN) {
        a->sa[i] = rco_fp8w_scale_row(rck_amax(a->x + i * a->K, a->K));
    } else {
        a->amax[i] = rck_amax(a->x + i * a->K, a->K);
    }
}

/* TENSOR: the call's one scale from the rows' amax (one thread) */
RC_HD static inline void rck_fp8_tensor_scale_thread(const rck_fp8_act_args *a, int64_t i)
{
    (void)i;
    float m = 0.0f;
    for (int64_t r = 0; r < a->M; r++)
        m = fmaxf(m, a->amax[r]);
    a->sa[0] = rco_fp8w_scale_tensor(m);
}

/* q[i] of x[i], i = r * K + k */
RC_HD static inline void rck_fp8_quant_thread(const rck_fp8_act_args *a, int64_t i)
{
    const int64_t B = RCO_FP8W_BLOCK, r = i / a->K, k = i % a->K;
    a->q[i] = a->mode == RC_FP8_ACT_TENSOR  ? rco_fp8w_quant_tensor(a->x[i], a->sa[0])
              : a->mode == RC_FP8_ACT_TOKEN ? rco_fp8w_quant_div(a->x[i], a->sa[r])
                                            : rco_fp8w_quant_div(a->x[i], a->sa[r * (a->K / B) + k / B]);
}

/* one output of an epilogue step (backend.h rc_fp8_epi): thread i = row * N + col */
RC_HD static inline void rck_fp8_epi_thread(const rc_fp8_epi *e, int64_t i)
{
    const int64_t r = i / e->N, n = i % e->N, B = RCO_FP8W_BLOCK;
    const float *b = e->bias ? e->bias + n : 0;
    switch (e->kind) {
    case RC_FP8_EPI_SCALED:
        e->y[i] = rco_fp8w_epilogue(e->y[i], e->sx_tensor ? e->sx[0] : e->sx[r], e->sw_tensor ? e->sw[0] : e->sw[n],
                                    b, e->out_dt);
        break;
    case RC_FP8_EPI_BLOCK_ACC:
        e->y[i] = rco_fp8w_block_acc(e->k ? e->y[i] : 0.0f, e->part[i], e->sx[r * e->kb + e->k],
                                     e->sw[(n / B) * e->kb + e->k]);
        break;
    case RC_FP8_EPI_BLOCK_OUT:
        e->y[i] = e->rw ? rco_fp8w_block_out_w(e->y[i], e->rw[r], e->out_dt) : rco_fp8w_block_out(e->y[i], b, e->out_dt);
        break;
    }
}

/* Rows of one attention launch so its scratch stays under max_floats
 * (at least one row). */
RC_HD static inline int64_t rck_attn_rows_per_launch(int64_t n_rows, int64_t nh, int64_t max_keys, int64_t d,
                                                     int64_t max_floats)
{
    int64_t per_row = nh * rck_attn_scratch(max_keys, d);
    int64_t rows = max_floats / per_row;
    if (rows < 1)
        rows = 1;
    return rows < n_rows ? rows : n_rows;
}

/* ---- mixture of experts (moe.cu; CPU twins: src/engine/moe.c) ---- */

/* x[i] = 0 */
typedef struct {
    float *x;
} rck_zero_args;

RC_HD static inline void rck_zero_thread(const rck_zero_args *a, int64_t i) { a->x[i] = 0.0f; }

/* one row of the routing per thread: rco_moe_route_row with 2 E floats of
 * scratch per row */
typedef struct {
    const float *logits;
    float *sel, *w, *scratch;
    int64_t E, top_k;
    int renorm;
    rc_dtype w_dt;
} rck_moe_route_args;

RC_HD static inline void rck_moe_route_thread(const rck_moe_route_args *a, int64_t r)
{
    rco_moe_route_row(a->logits + r * a->E, a->E, a->top_k, a->renorm, a->w_dt, a->scratch + r * 2 * a->E,
                      a->sel + r * a->top_k, a->w + r * a->top_k);
}

/* one row of the grouped sigmoid router per thread: rco_moe_route_grouped_row
 * with 2 (E + n_group) floats of scratch per row */
typedef struct {
    const float *logits, *bias;
    float *sel, *w, *scratch;
    rco_grouped_router g;
} rck_moe_route_grouped_args;

RC_HD static inline void rck_moe_route_grouped_thread(const rck_moe_route_grouped_args *a, int64_t r)
{
    rco_moe_route_grouped_row(a->logits + r * a->g.E, a->bias, &a->g, a->scratch + r * 2 * (a->g.E + a->g.n_group),
                              a->sel + r * a->g.top_k, a->w + r * a->g.top_k);
}

/* one output element per thread: out[rows[i], j] = rco_moe_acc(...) (the
 * rows of one call distinct) */
typedef struct {
    const float *y, *w;
    const int64_t *rows, *widx;
    float *out;
    int64_t H;
    int sigmoid;
    rc_dtype dt;
} rck_moe_acc_args;

RC_HD static inline void rck_moe_acc_thread(const rck_moe_acc_args *a, int64_t t)
{
    const int64_t i = t / a->H, j = t % a->H;
    const float wv = a->w[a->widx[i]];
    const float s = a->sigmoid ? rco_moe_sigmoid(wv, a->dt) : wv;
    float *o = a->out + a->rows[i] * a->H + j;
    *o = rco_moe_acc(*o, a->y[i * a->H + j], s, a->dt);
}

/* ---- Gated DeltaNet (gdn.cu; CPU twin: src/engine/gdn.c rc_cpu_gdn_step) ---- */

/* one (sequence, value head) per thread: rco_gdn_recurrent_token over its
 * state [dk][dv], with `scratch_per` floats of scratch per thread */
typedef struct {
    const float *q, *k, *v, *g, *beta;
    float *state, *out, *scratch;
    int64_t hk, hv, dk, dv, scratch_per;
    float qdiv;
    rc_dtype out_dt, state_dt;
} rck_gdn_step_args;

RC_HD static inline void rck_gdn_step_thread(const rck_gdn_step_args *a, int64_t i)
{
    const int64_t s = i / a->hv, h = i % a->hv, kh = s * a->hk + h / (a->hv / a->hk);
    rco_gdn_recurrent_token(a->state + i * a->dk * a->dv, a->q + kh * a->dk, a->k + kh * a->dk, a->v + i * a->dv,
                            a->g[i], a->beta[i], a->dk, a->dv, a->qdiv, a->out_dt, true, a->state_dt,
                            a->scratch + i * a->scratch_per, a->out + i * a->dv);
}


/* The mixer of one sequence's call (gdn.cu; CPU twin: src/engine/gdn.c
 * rc_cpu_gdn_mixer): four launches over the same arguments, each thread one
 * of ops_inline.h's rco_gdn_mix_* with `per` floats of scratch of its own --
 * conv: one channel; gate: one (token, value head); rule: value head h0 + i
 * (the chunked or recurrent form over the call's tokens, serially); norm:
 * one (token, value head) */
typedef struct {
    rco_gdn_mix m;
    float *scratch;
    int64_t per, h0;
} rck_gdn_mix_args;

RC_HD static inline void rck_gdn_mix_conv_thread(const rck_gdn_mix_args *a, int64_t i)
{
    rco_gdn_mix_conv(&a->m, i, a->scratch + i * a->per);
}
RC_HD static inline void rck_gdn_mix_gate_thread(const rck_gdn_mix_args *a, int64_t i) { rco_gdn_mix_gate(&a->m, i); }
RC_HD static inline void rck_gdn_mix_rule_thread(const rck_gdn_mix_args *a, int64_t i)
{
    rco_gdn_mix_rule(&a->m, a->h0 + i, a->scratch + i * a->per);
}
RC_HD static inline void rck_gdn_mix_norm_thread(const rck_gdn_mix_args *a, int64_t i)
{
    rco_gdn_mix_norm(&a->m, i, a->scratch + i * a->per);
}

/* x[i] = rco_gate_sigmoid_mul(x[i], gate[i], ...) (the attention output gate) */
typedef struct {
    float *x;
    const float *gate;
    rc_dtype gate_dt, out_dt;
} rck_gate_mul_args;

RC_HD static inline void rck_gate_mul_thread(const rck_gate_mul_args *a, int64_t i)
{
    a->x[i] = rco_gate_sigmoid_mul(a->x[i], a->gate[i], a->gate_dt, a->out_dt);
}

#endif
