/* The arithmetic of every op, one output (row, score, element) at a time,
 * written once and compiled twice: into the CPU backend (backend_cpu.c, the
 * reference) and into the CUDA kernels (the kernels/ .cu files, built with nvcc
 * -fmad=false). A CUDA kernel is "one thread per output, calling the function
 * here"; so a kernel and its CPU twin run the same sequence of fp32
 * operations, and differ only where the two math libraries do (expf, erff,
 * tanhf, cosf, sinf, logf on the GPU are not correctly rounded; + - * / and
 * sqrtf are IEEE on both). The reduction orders are those of backend_cpu.c's
 * table; "L lanes" = lane j sums elements j, j+L, ... then the lanes are
 * added in a fixed pairwise tree.
 *
 * Scratch arrays are passed in by the caller (stack on the CPU, a device
 * workspace on the GPU). Plain C11 that nvcc also accepts. */
#ifndef RC_OPS_INLINE_H
#define RC_OPS_INLINE_H

#include <math.h>
#include <stdint.h>

#include "dtype.h"
#include "model.h"

#define RC_ENGINE_SMALL_M 16 /* GEMMs with M <= this split K in 4 */
#define RC_ENGINE_SPLIT_K 4  /* slices (GEMM split-K, prefill P.V) */
#define RC_ENGINE_LARGE_M 256 /* GEMMs with M <= this split K in 2, larger ones use K tiles */
#define RC_ENGINE_K_TILE 128
#define RC_ENGINE_PREFILL_TILE 64
#define RC_ENGINE_DECODE_CHUNK 32
#define RC_MAX_LANES 64
#define RC_SOFTMAX_MAX_CHUNKS 512 /* decode: at most this many chunks (ms, ls scratch) */

/* ---- fp8 (the KV cache's storage under kv-cache=fp8_*) -------------------- */

/* fp8 formats: E4M3FN (bias 7, 3 mantissa bits, no inf, NaN S.1111.111, max
 * 448) and E5M2 (bias 15, 2 mantissa bits, IEEE-like: inf S.11111.00, max
 * 57344). */
typedef enum { RC_FP8_E4M3 = 0, RC_FP8_E5M2 = 1 } rc_fp8_fmt;

/* What a value too large for the format becomes, and NaN:
 *  SATFINITE  CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...), what
 *             vLLM's reshape_and_cache_flash stores (csrc/quantization/
 *             w8a8/fp8/nvidia/quant_utils.cuh): |x| past the largest finite
 *             value after rounding, and +-inf, give +-max; NaN gives the
 *             canonical 0x7F whatever its sign;
 *  TORCH      torch's x.to(float8_e4m3fn / float8_e5m2) (c10 headeronly
 *             Float8_*.h, torch 2.15): E4M3FN saturates like SATFINITE,
 *             E5M2 overflows to +-inf; NaN keeps its sign (0x7F | sign).
 * Both round to nearest, ties to even, with subnormals, and keep -0. */
typedef enum { RC_FP8_SATFINITE = 0, RC_FP8_TORCH = 1 } rc_fp8_sat;

RC_HD static inline uint8_t rc_f32_to_fp8(float x, rc_fp8_fmt fmt, rc_fp8_sat sat)
{
    const uint32_t u = rc_f32_bits(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    const int m = fmt == RC_FP8_E5M2 ? 2 : 3;          /* mantissa bits */
    const uint32_t bias = fmt == RC_FP8_E5M2 ? 15u : 7u;
    const uint32_t maxcode = fmt == RC_FP8_E5M2 ? 0x7bu : 0x7eu;
    if (a > 0x7f800000u) /* NaN */
        return (uint8_t)(sat == RC_FP8_TORCH ? sign | 0x7fu : 0x7fu);
    uint32_t code;
    const uint32_t e = a >> 23; /* fp32 biased exponent */
    if (e >= 127u + 1u - bias) { /* the format's normal range (or past it): round 23 - m mantissa bits away */
        const int sh = 23 - m;
        const uint32_t r = a + ((1u << (sh - 1)) - 1u) + ((a >> sh) & 1u);
        code = (r >> sh) - ((127u - bias) << m); /* a carry may step into the next binade (or past the max) */
    } else { /* subnormal: units of 2^(1 - bias - m); the quotient rounded to nearest even */
        const uint32_t mant = e ? (a & 0x7fffffu) | 0x800000u : a & 0x7fffffu;
        const uint32_t ee = e ? e : 1u; /* fp32 subnormals: exponent 1 - 127, no implicit bit */
        const uint32_t sh = (uint32_t)(150 + 1) - bias - (uint32_t)m - ee; /* value = mant * 2^(ee - 150) */
        if (sh >= 32u) {
            code = 0;
        } else {
            const uint32_t q = mant >> sh, rem = mant & ((1u << sh) - 1u), half = 1u << (sh - 1);
            code = q + (rem > half || (rem == half && (q & 1u)));
        }
    }
    if (code > maxcode) /* finite overflow after rounding, or inf */
        code = sat == RC_FP8_TORCH && fmt == RC_FP8_E5M2 ? 0x7cu : maxcode;
    return (uint8_t)(sign | code);
}

/* The fp8 code's value (exact in fp32; NaN for the NaN codes, +-inf for E5M2's). */
RC_HD static inline float rc_fp8_to_f32(uint8_t c, rc_fp8_fmt fmt)
{
    if (fmt == RC_FP8_E5M2) /* the top byte of an IEEE half */
        return rc_f16_to_f32((uint16_t)((uint16_t)c << 8));
    const uint32_t sign = (uint32_t)(c & 0x80u) << 24, ex = (c >> 3) & 0xfu, man = c & 7u;
    if (ex == 0xfu && man == 7u)
        return rc_bits_f32(sign | 0x7fc00000u);
    if (ex == 0) /* subnormal: man * 2^-9 */
        return rc_bits_f32(sign | rc_f32_bits((float)man * 0.001953125f));
    return rc_bits_f32(sign | ((ex - 7u + 127u) << 23) | (man << 20));
}

/* The KV cache's storage rule (README "Numerics", kv-cache=): the values a
 * cached key or value takes. AUTO: the value as computed. FP8_*: vLLM's fp8
 * KV cache with a per-tensor scale s: stored as fp8(x / s) (fp32 division,
 * SATFINITE), read back as R_deq(fp8 * s) (the Triton and paged-attention
 * kernels' dequantisation `(k.to(float32) * k_scale).to(q.dtype)`; exact
 * when s = 1). The cache holds the dequantised value, which is exact in the
 * run's dtype. */
typedef enum { RC_KV_AUTO = 0, RC_KV_FP8_E4M3, RC_KV_FP8_E5M2 } rc_kv_quant;

RC_HD static inline float rco_kv_value(float x, rc_kv_quant q, float scale, rc_dtype deq_dt)
{
    if (q == RC_KV_AUTO)
        return x;
    const rc_fp8_fmt f = q == RC_KV_FP8_E5M2 ? RC_FP8_E5M2 : RC_FP8_E4M3;
    return rc_round_to(rc_fp8_to_f32(rc_f32_to_fp8(x / scale, f, RC_FP8_SATFINITE), f) * scale, deq_dt);
}

/* ---- fp8 e4m3 weights (src/engine/fp8w.c) ---------------------------------- */

#define RCO_FP8_E4M3_MAX 448.0f

/* x rounded to the nearest float8_e4m3fn value (ties to even), saturating to
 * +-448, as a float (every e4m3 value is exact in bf16, fp16 and fp32): the
 * KV cache's conversion above with SATFINITE, which is CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) that vLLM's
 * scaled_fp8_conversion calls after clamping to +-448 (and torch's
 * .to(float8_e4m3fn) of a clamped value). NaN stays NaN (the callers clamp
 * with fminf / fmaxf first, which maps NaN to 448 as the kernels do). */
RC_HD static inline float rco_fp8_e4m3_round(float x)
{
    if (x != x)
        return x;
    return rc_fp8_to_f32(rc_f32_to_fp8(x, RC_FP8_E4M3, RC_FP8_SATFINITE), RC_FP8_E4M3);
}

/* The scalar steps of fp8w.c's rules (its header lists them with their
 * sources), shared by the CPU (fp8w.c) and the CUDA kernels (kernels/fp8.cu):
 * each scale from an amax, each fp8 value from its scale, each GEMM output
 * from its fp32 sum and scales. An amax is fmaxf over |x|, exact in any order
 * (NaN skipped, as fmaxf does on both). */
#define RCO_FP8W_MIN_SCALE (1.0f / (RCO_FP8_E4M3_MAX * 512.0f)) /* vLLM's min_scaling_factor */
#define RCO_FP8W_GROUP_EPS 1e-10f                                 /* per_token_group_quant_fp8's eps */
#define RCO_FP8W_BLOCK 128 /* block weights' 128 x 128 blocks, activations' 1 x 128 groups (RC_FP8_BLOCK) */

/* clamp to +-448 (NaN gives +448, as fminf / fmaxf on the GPU) */
RC_HD static inline float rco_fp8w_clamp(float v)
{
    return fmaxf(-RCO_FP8_E4M3_MAX, fminf(v, RCO_FP8_E4M3_MAX));
}

RC_HD static inline float rco_fp8w_amax_step(float m, float x) { return fmaxf(m, fabsf(x)); }

/* per tensor: s = amax / 448 (dynamic_scaled_fp8_quant) */
RC_HD static inline float rco_fp8w_scale_tensor(float amax) { return amax / RCO_FP8_E4M3_MAX; }
/* per row (token or channel): s = max(amax / 448, 1 / (448 * 512)) */
RC_HD static inline float rco_fp8w_scale_row(float amax)
{
    return fmaxf(amax / RCO_FP8_E4M3_MAX, RCO_FP8W_MIN_SCALE);
}
/* per 1 x 128 group: s = max(amax, 1e-10) / 448 */
RC_HD static inline float rco_fp8w_scale_group(float amax)
{
    return fmaxf(amax, RCO_FP8W_GROUP_EPS) / RCO_FP8_E4M3_MAX;
}

/* per tensor: q = e4m3(clamp(x * f32(1 / s))) (the kernel multiplies by the inverse scale) */
RC_HD static inline float rco_fp8w_quant_tensor(float x, float s)
{
    return rco_fp8_e4m3_round(rco_fp8w_clamp(x * (1.0f / s)));
}
/* per row / group: q = e4m3(clamp(x / s)) */
RC_HD static inline float rco_fp8w_quant_div(float x, float s)
{
    return rco_fp8_e4m3_round(rco_fp8w_clamp(x / s));
}

/* W8A16 (weights=fp8, act=none): the dequantized weight's value W'[n][k] = R(q * R(s)) in dt, vLLM's
 * weight_fp8.to(dt) * scale.to(dt) (q: the fp8 value, exact in dt; rs: the scale rounded to dt). The CPU's copy
 * (fp8w.c deq_value) and a device's per-call dequantization (kernels: in registers, or into a 2-byte workspace)
 * from the same function. */
RC_HD static inline float rco_fp8w_deq(float q, float rs, rc_dtype dt)
{
    return rc_round_to(q * rs, dt);
}

/* the index of W[n][k]'s scale (K columns): scale_mode 0 per tensor [1], 1 per channel [N], 2 in 128 x 128
 * blocks [ceil(N / 128)][ceil(K / 128)] (rc_wscale's order; rc_fp8w_quant_weight's layout) */
RC_HD static inline int64_t rco_fp8w_scale_at(int64_t n, int64_t k, int64_t K, int scale_mode)
{
    const int64_t B = RCO_FP8W_BLOCK;
    return scale_mode == 0 ? 0 : scale_mode == 1 ? n : (n / B) * ((K + B - 1) / B) + k / B;
}

/* tensor / channel GEMM epilogue (cutlass_scaled_mm, ScaledEpilogueBias):
 * R(fma(s_x, s_w * acc, b)), or R(s_x * (s_w * acc)) without bias */
RC_HD static inline float rco_fp8w_epilogue(float acc, float sx, float sw, const float *bias, rc_dtype dt)
{
    const float t = sw * acc;
    return rc_round_to(bias ? fmaf(sx, t, *bias) : sx * t, dt);
}
/* block GEMM: one 128-deep slice's partial p into the sum y (y from 0) */
RC_HD static inline float rco_fp8w_block_acc(float y, float p, float sx, float sw) { return y + (p * sx) * sw; }
/* block GEMM output: R(y), then the bias added to the rounded output */
RC_HD static inline float rco_fp8w_block_out(float y, const float *bias, rc_dtype dt)
{
    const float v = rc_round_to(y, dt);
    return bias ? rc_round_to(v + *bias, dt) : v;
}
/* block GEMM output with a row weight (vLLM's fused_moe_kernel, MUL_ROUTED_WEIGHT):
 * the fp32 sum times the fp32 weight, rounded once */
RC_HD static inline float rco_fp8w_block_out_w(float y, float w, rc_dtype dt) { return rc_round_to(y * w, dt); }

/* ---- fixed-shape reductions ------------------------------------------- */

RC_HD static inline float rco_tree16(float *acc)
{
    for (int j = 0; j < 8; j++)
        acc[j] += acc[j + 8];
    for (int j = 0; j < 4; j++)
        acc[j] += acc[j + 4];
    for (int j = 0; j < 2; j++)
        acc[j] += acc[j + 2];
    return acc[0] + acc[1];
}

RC_HD static inline float rco_tree8(float *acc)
{
    for (int j = 0; j < 4; j++)
        acc[j] += acc[j + 4];
    for (int j = 0; j < 2; j++)
        acc[j] += acc[j + 2];
    return acc[0] + acc[1];
}

/* sum of a[i] (or a[i]*b[i] when b) with L <= RC_MAX_LANES partial sums */
RC_HD static inline float rco_lanes_reduce(const float *a, const float *b, int64_t n, int L)
{
    float acc[RC_MAX_LANES] = {0.0f}; /* all lanes: GCC cannot see that L <= RC_MAX_LANES */
    int64_t k = 0;
    if (b) {
        for (; k + L <= n; k += L)
            for (int j = 0; j < L; j++)
                acc[j] += a[k + j] * b[k + j];
        for (int j = 0; k + j < n; j++)
            acc[j] += a[k + j] * b[k + j];
    } else {
        for (; k + L <= n; k += L)
            for (int j = 0; j < L; j++)
                acc[j] += a[k + j];
        for (int j = 0; k + j < n; j++)
            acc[j] += a[k + j];
    }
    for (int w = L / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

RC_HD static inline float rco_dot16(const float *a, const float *b, int64_t n)
{
    float acc[16] = {0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++)
            acc[j] += a[k + j] * b[k + j];
    for (int j = 0; k + j < n; j++)
        acc[j] += a[k + j] * b[k + j];
    return rco_tree16(acc);
}

RC_HD static inline float rco_dot8(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[k + j] * b[k + j];
    for (int j = 0; k + j < n; j++)
        acc[j] += a[k + j] * b[k + j];
    return rco_tree8(acc);
}

/* ---- GEMM dots ------------------------------------------------------------ */

/* The K order of every GEMM (README "Kernel strategies"), given by a chunk
 * length C (a multiple of 16) and how chunks are merged. K is cut into chunks
 * of C elements (the last may be shorter). Within a chunk 16 lanes start at
 * zero and lane j accumulates a[k] * b[k] for the chunk's k = j, j + 16, ...
 * in order with a fused multiply-add (one rounding per step, as BLAS and
 * cuBLAS kernels do; for bf16 / fp16 operands the product is exact in fp32,
 * so this equals a multiply then an add). Then either
 *   lanes merge (tiles):  the first chunk's lanes become the running lanes,
 *                         later chunks' lanes are added lane by lane, and the
 *                         16 running lanes are summed in the fixed pairwise
 *                         tree (rco_tree16) at the end; or
 *   sums merge (split-K): every chunk is summed by the tree into one partial
 *                         sum, and the partial sums are added in chunk order.
 * C >= K: one chunk (the invariant order; both merges are the same).
 * b is read at stride sb (b[k * sb]; 1 for a row of W[N, K], N for a GPU
 * kernel reading the transposed copy Wt[K, N]). */
typedef struct {
    int64_t chunk;   /* C */
    int sums;        /* 1: sums merge (split-K), 0: lanes merge */
    int pairs;       /* 1: the bf16 pair order within a chunk (rco_gemm_dot_pairs) */
} rco_gemm_order;

/* ---- the bf16 pair order ----------------------------------------------------
 * Engine GEMMs with bf16 operands accumulate each chunk in pairs, the
 * arithmetic of the AVX512-BF16 dot-product instruction (vdpbf16ps, one
 * register of 16 fp32 lanes): the chunk is padded with zeros to a multiple of
 * 32, and lane j takes, from every block of 32 elements starting at b, the
 * pair (b + 2j, b + 2j + 1) in two steps, the odd element first:
 *   lane = F(fma(D(a[b+2j+1]), D(w[b+2j+1]), D(lane)))
 *   lane = F(fma(D(a[b+2j]),   D(w[b+2j]),   D(lane)))
 * where the operands are rounded to bf16 first (exact for bf16 values), D
 * flushes a denormal input to a zero of its sign and F a denormal result
 * (after rounding) to a zero of its sign; the fma rounds once (the product of
 * two bf16 values has 16 significant bits, so only a product outside fp32's
 * normal range is affected by it). The lanes then merge as rco_gemm_dot's
 * (one tree per chunk and the chunk sums added in order, or running lanes
 * and one tree at the end). A NaN result is returned as the quiet NaN
 * 0x7fc00000, whatever its payload (the instruction and fmaf pick payloads
 * differently; the GEMM's value is NaN either way). */
#define RCO_FLT_MIN 1.17549435082228750797e-38f

/* a denormal to a zero of its sign; every other value (NaN too) unchanged */
RC_HD static inline float rco_flush(float x)
{
    return fabsf(x) < RCO_FLT_MIN ? copysignf(0.0f, x) : x;
}

/* one step of a lane: the instruction's half for one element (a lane the
 * order holds is never denormal; one given from outside is flushed too, as
 * the instruction flushes its accumulator input) */
RC_HD static inline float rco_dpbf16_step(float acc, float a, float b)
{
    return rco_flush(fmaf(rco_flush(a), rco_flush(b), rco_flush(acc)));
}

/* one lane over one pair: odd element first, then even (operands as given:
 * the caller rounds them to bf16) */
RC_HD static inline float rco_dpbf16_pair(float acc, float a_even, float b_even, float a_odd, float b_odd)
{
    return rco_dpbf16_step(rco_dpbf16_step(acc, a_odd, b_odd), a_even, b_even);
}

/* the 16 lanes of one chunk [k0, k1) in the pair order */
RC_HD static inline void rco_pairs_chunk(const float *a, const float *b, int64_t sb, int64_t k0, int64_t k1,
                                         float acc[16])
{
    for (int j = 0; j < 16; j++)
        acc[j] = 0.0f;
    for (int64_t t = k0; t < k1; t += 32)
        for (int j = 0; j < 16; j++) {
            const int64_t e = t + 2 * j, o = e + 1;
            const float ae = e < k1 ? rc_round_bf16(a[e]) : 0.0f, be = e < k1 ? rc_round_bf16(b[e * sb]) : 0.0f;
            const float ao = o < k1 ? rc_round_bf16(a[o]) : 0.0f, bo = o < k1 ? rc_round_bf16(b[o * sb]) : 0.0f;
            acc[j] = rco_dpbf16_pair(acc[j], ae, be, ao, bo);
        }
}

/* rco_gemm_dot in the pair order (o.pairs; o.chunk a multiple of 32) */
RC_HD static inline float rco_gemm_dot_pairs(const float *a, const float *b, int64_t K, int64_t sb,
                                             rco_gemm_order o)
{
    const int64_t C = o.chunk;
    float tot[16] = {0}, sum = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += C) {
        const int64_t k1 = K - k0 < C ? K : k0 + C;
        float acc[16];
        rco_pairs_chunk(a, b, sb, k0, k1, acc);
        if (o.sums) {
            float part = rco_tree16(acc);
            sum = k0 == 0 ? part : sum + part;
        } else {
            for (int j = 0; j < 16; j++)
                tot[j] = k0 == 0 ? acc[j] : tot[j] + acc[j];
        }
    }
    const float v = o.sums ? sum : rco_tree16(tot);
    return v != v ? rc_bits_f32(0x7fc00000u) : v;
}

RC_HD static inline float rco_gemm_dot(const float *a, const float *b, int64_t K, int64_t sb, rco_gemm_order o)
{
    if (o.pairs)
        return rco_gemm_dot_pairs(a, b, K, sb, o);
    const int64_t C = o.chunk;
    float tot[16] = {0}, sum = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += C) {
        const int64_t k1 = K - k0 < C ? K : k0 + C;
        float acc[16] = {0};
        for (int64_t k = k0; k < k1; k++)
            acc[(k - k0) & 15] = fmaf(a[k], b[k * sb], acc[(k - k0) & 15]);
        if (o.sums) {
            float part = rco_tree16(acc);
            sum = k0 == 0 ? part : sum + part;
        } else {
            for (int j = 0; j < 16; j++)
                tot[j] = k0 == 0 ? acc[j] : tot[j] + acc[j];
        }
    }
    return o.sums ? sum : rco_tree16(tot);
}

/* The order of a GEMM of M rows and depth K under a kernel strategy
 * (invariant: one chunk whatever M; engine: by M like an inference engine's
 * GEMM heuristics, so the same row gets a different order in a batch of
 * another size):
 *   invariant            one chunk, C = K (16 lanes over the whole dot)
 *   engine, M <= 16      split-K in RC_ENGINE_SPLIT_K slices: C = ceil(K / 4)
 *                        rounded up to 16, sums merge
 *   engine, M <= 256     split-K in 2 slices: C = ceil(K / 2) rounded up to 16,
 *                        sums merge
 *   engine, M > 256      K tiles of RC_ENGINE_K_TILE, lanes merge
 * (engine GEMMs with bf16 operands: rco_gemm_order_dt, the pair order) */
RC_HD static inline rco_gemm_order rco_gemm_order_for(int invariant, int64_t M, int64_t K)
{
    rco_gemm_order o;
    int64_t slices = invariant ? 1 : M <= RC_ENGINE_SMALL_M ? RC_ENGINE_SPLIT_K : M <= RC_ENGINE_LARGE_M ? 2 : 0;
    o.sums = slices > 1;
    o.pairs = 0;
    if (slices == 0) {
        o.chunk = RC_ENGINE_K_TILE;
        return o;
    }
    int64_t c = (K + slices - 1) / slices;
    c = (c + 15) / 16 * 16;
    o.chunk = c > 0 ? c : 16;
    return o;
}

/* The order of a GEMM whose operands are both in_dt: engine GEMMs with bf16
 * operands take the pair order (rco_gemm_dot_pairs) with the same M classes,
 * their split-K slice length rounded up to 32 instead of 16 (K tiles of 128
 * as they are); everything else is rco_gemm_order_for's. */
RC_HD static inline rco_gemm_order rco_gemm_order_dt(int invariant, int64_t M, int64_t K, rc_dtype in_dt)
{
    rco_gemm_order o = rco_gemm_order_for(invariant, M, K);
    if (invariant || in_dt != RC_BF16)
        return o;
    o.pairs = 1;
    if (o.sums)
        o.chunk = (o.chunk + 31) / 32 * 32;
    return o;
}

/* ---- norms ----------------------------------------------------------------- */

/* RMSNorm's lanes: a fixed 16 for invariant kernels, else by M like torch */
RC_HD static inline int rco_rms_lanes(int invariant, int64_t M)
{
    return invariant ? 16 : M < 16 ? 64 : 32;
}

/* element i of a row held as st: floats, or 2-byte bit patterns of bf16 / fp16 widened (exact) */
RC_HD static inline float rco_at(const void *x, int64_t i, rc_dtype st)
{
    if (st == RC_BF16)
        return rc_bf16_to_f32(((const uint16_t *)x)[i]);
    if (st == RC_F16)
        return rc_f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

/* The statistics of one row of LayerNorm (16 lanes for mean and variance: mean, rs = 1 / std) or RMSNorm
 * (rms_lanes: mean 0, rs = rsqrt(mean(x^2) + eps)), of a row held as st (rco_at; the lane sums those of
 * rco_lanes_reduce). */
RC_HD static inline void rco_norm_stats_st(rc_norm_kind kind, const void *xr, rc_dtype st, int64_t H, float feps,
                                           int rms_lanes, float *mean_out, float *rs_out)
{
    float acc[RC_MAX_LANES] = {0.0f};
    const int L = kind == RC_NORM_LAYER ? 16 : rms_lanes;
    int64_t k = 0;
    for (; k + L <= H; k += L)
        for (int j = 0; j < L; j++) {
            const float v = rco_at(xr, k + j, st);
            acc[j] += kind == RC_NORM_LAYER ? v : v * v;
        }
    for (int j = 0; k + j < H; j++) {
        const float v = rco_at(xr, k + j, st);
        acc[j] += kind == RC_NORM_LAYER ? v : v * v;
    }
    for (int w = L / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    if (kind == RC_NORM_LAYER) {
        const float mean = acc[0] / (float)H;
        float acc2[16] = {0};
        k = 0;
        for (; k + 16 <= H; k += 16)
            for (int j = 0; j < 16; j++) {
                float d = rco_at(xr, k + j, st) - mean;
                acc2[j] += d * d;
            }
        for (int j = 0; k + j < H; j++) {
            float d = rco_at(xr, k + j, st) - mean;
            acc2[j] += d * d;
        }
        for (int wd = 8; wd >= 1; wd /= 2)
            for (int j = 0; j < wd; j++)
                acc2[j] += acc2[j + wd];
        float var = acc2[0] / (float)H;
        *mean_out = mean;
        *rs_out = 1.0f / sqrtf(var + feps);
    } else {
        float var = acc[0] / (float)H;
        *mean_out = 0.0f;
        *rs_out = 1.0f / sqrtf(var + feps);
    }
}

RC_HD static inline void rco_norm_stats(rc_norm_kind kind, const float *xr, int64_t H, float feps, int rms_lanes,
                                        float *mean_out, float *rs_out)
{
    rco_norm_stats_st(kind, xr, RC_F32, H, feps, rms_lanes, mean_out, rs_out);
}

/* One output of a norm row from the row's statistics (rco_norm_stats), its input x, weight w and bias bp
 * (a pointer to it, or NULL): LayerNorm R_out((x - mean) * rs * w + b); RMSNorm (HF Llama order)
 * R_out(w * R_mid(x * rs)). */
RC_HD static inline float rco_norm_out(rc_norm_kind kind, float x, float mean, float rs, float w, const float *bp,
                                       rc_dtype mid_dt, rc_dtype out_dt)
{
    if (kind == RC_NORM_LAYER) {
        float v = (x - mean) * rs * w;
        return rc_round_to(bp ? v + *bp : v, out_dt);
    }
    return rc_round_to(w * rc_round_to(x * rs, mid_dt), out_dt);
}

/* One row of LayerNorm or RMSNorm: rco_norm_stats, then rco_norm_out for each output (in place is safe: each
 * output reads only its own input after the row's reduction). */
RC_HD static inline void rco_norm_row(rc_norm_kind kind, const float *xr, int64_t H, const float *w,
                                      const float *b, float feps, int rms_lanes, rc_dtype mid_dt,
                                      rc_dtype out_dt, float *yr)
{
    float mean, rs;
    rco_norm_stats(kind, xr, H, feps, rms_lanes, &mean, &rs);
    for (int64_t i = 0; i < H; i++)
        yr[i] = rco_norm_out(kind, xr[i], mean, rs, w[i], b ? b + i : NULL, mid_dt, out_dt);
}

/* q / k norm (Qwen3's per-head q_norm / k_norm, OLMo2's over the whole
 * projection): RMSNorm in place on segment s of one packed qkv row, whose
 * Q part holds nq segments of dq values (weight wq [dq]) and whose K part,
 * right after it, nk segments of dk values (weight wk [dk]); rco_norm_row's
 * RMS arithmetic (in place is safe: each output reads only its own input
 * after the row's reduction). */
RC_HD static inline void rco_qk_norm_seg(float *row, int64_t s, int64_t nq, int64_t dq, const float *wq, int64_t dk,
                                         const float *wk, float feps, int rms_lanes, rc_dtype mid_dt, rc_dtype out_dt)
{
    float *x = s < nq ? row + s * dq : row + nq * dq + (s - nq) * dk;
    rco_norm_row(RC_NORM_RMS, x, s < nq ? dq : dk, s < nq ? wq : wk, NULL, feps, rms_lanes, mid_dt, out_dt, x);
}

/* ---- RoPE ------------------------------------------------------------------- */

/* cos and sin of the fp32 angle pos * inv_freq (HF: inv_freq @ position_ids
 * in fp32), times the fp32 attention factor att (HF: emb.cos() *
 * attention_scaling; 1 except for YaRN, and x * 1 is exact), rounded to cs_dt */
RC_HD static inline void rco_rope_cs(float pos, float inv_freq, float att, rc_dtype cs_dt, float *c, float *s)
{
    float f = pos * inv_freq;
    *c = rc_round_to(cosf(f) * att, cs_dt);
    *s = rc_round_to(sinf(f) * att, cs_dt);
}

/* one rotary pair (x1 = v[j], x2 = v[j + half]):
 * q*cos + rotate_half(q)*sin, rotate_half = cat(-x2, x1); the two products
 * rounded to mid_dt, their sum to out_dt */
RC_HD static inline void rco_rope_pair(float *x1p, float *x2p, float c, float s, rc_dtype mid_dt, rc_dtype out_dt)
{
    float x1 = *x1p, x2 = *x2p;
    float a1 = rc_round_to(x1 * c, mid_dt), b1 = rc_round_to((-x2) * s, mid_dt);
    float a2 = rc_round_to(x2 * c, mid_dt), b2 = rc_round_to(x1 * s, mid_dt);
    *x1p = rc_round_to(a1 + b1, out_dt);
    *x2p = rc_round_to(a2 + b2, out_dt);
}

/* ---- attention -------------------------------------------------------------- */

/* attention modes: 0 invariant, 1 engine prefill, 2 engine decode */
RC_HD static inline int rco_attn_mode(int invariant, int64_t n_new)
{
    return invariant ? 0 : n_new > 1 ? 1 : 2;
}

/* How one (query row, head)'s scores are formed from q.k: the scaling, and
 * the ALiBi bias (README "Numerics"). bias(j) = R_bias(slope * (float)(key0
 * + j - ref)), computed in fp32 (slope * position, as every family's HF code
 * does with fp32 slopes). */
typedef enum {
    RCO_ALIBI_NONE,
    RCO_ALIBI_ADD,   /* s = R_add(R_score(scaled) + bias): Baichuan (bf16 mask added in bf16), MPT (fp32 bias, fp32 sum) */
    RCO_ALIBI_FUSED, /* s = R_score(dot * scale + bias), one rounding: BLOOM's alibi.baddbmm(q, k^T, alpha=scale) */
} rco_alibi_mode;

typedef struct {
    float scale;       /* multiplier, or the divisor when div */
    int div;           /* 1: R(R(dot) / scale) (Baichuan: "/ math.sqrt(head_dim)"); 0: R(R(dot) * scale) */
    rc_dtype score_dt;
    rco_alibi_mode alibi;
    float slope;       /* this head's ALiBi slope (fp32) */
    int64_t key0;      /* absolute position of key 0 of the row's key range */
    int64_t ref;       /* the position subtracted from each key's position */
    rc_dtype bias_dt;  /* rounding of slope * distance */
    rc_dtype add_dt;   /* RCO_ALIBI_ADD: rounding of score + bias */
    float softcap;     /* > 0: the scaled score soft-capped (rco_softcap1 in score_dt); 0: none */
    int has_sink;      /* 1: sink (a value of score_dt) is one more softmax column (rco_softmax_sink) */
    float sink;
} rco_score_spec;

/* Soft-capping as Gemma 2 writes it, x / cap; tanh; * cap, one tensor op
 * each, so each rounded to dt (fp32 arithmetic inside: the true quotient,
 * not a product with 1 / cap, as torch's CPU division) */
RC_HD static inline float rco_softcap1(float x, float cap, rc_dtype dt)
{
    const float t = rc_round_to(tanhf(rc_round_to(x / cap, dt)), dt);
    return rc_round_to(t * cap, dt);
}

/* x * s rounded to dt (fp32 product) */
RC_HD static inline float rco_scale1(float x, float s, rc_dtype dt) { return rc_round_to(x * s, dt); }

/* The ALiBi bias of key j (absolute position key0 + j). */
RC_HD static inline float rco_alibi_bias(const rco_score_spec *sp, int64_t j)
{
    return rc_round_to(sp->slope * (float)(sp->key0 + j - sp->ref), sp->bias_dt);
}

/* One score (rco_score: q.k over d with 8 or 16 lanes; rco_score_dot: from
 * that dot), then the scaling: with an MD
 * score_dt R(R(q.k) * scale) (matmul, then * scaling) or R(R(q.k) / scale);
 * then the ALiBi bias of key j, if any (see rco_score_spec). */
RC_HD static inline float rco_score_dot(float dot, const rco_score_spec *sp, int64_t j)
{
    if (sp->alibi == RCO_ALIBI_FUSED)
        return rc_round_to(dot * sp->scale + rco_alibi_bias(sp, j), sp->score_dt);
    float r = rc_round_to(dot, sp->score_dt);
    float s = rc_round_to(sp->div ? r / sp->scale : r * sp->scale, sp->score_dt);
    if (sp->softcap > 0.0f)
        s = rco_softcap1(s, sp->softcap, sp->score_dt);
    if (sp->alibi == RCO_ALIBI_ADD)
        s = rc_round_to(s + rco_alibi_bias(sp, j), sp->add_dt);
    return s;
}

RC_HD static inline float rco_score(const float *q, const float *k, int64_t d, int lanes, const rco_score_spec *sp,
                                    int64_t j)
{
    return rco_score_dot(lanes == 8 ? rco_dot8(q, k, d) : rco_dot16(q, k, d), sp, j);
}

/* softmax statistics (max m, sum l of exp(s - m)) over sc[0..n). ms, ls:
 * RC_SOFTMAX_MAX_CHUNKS floats each (used by mode 2) */
RC_HD static inline void rco_softmax_stats(const float *sc, int64_t n, int mode, float *ms, float *ls,
                                           float *m_out, float *l_out)
{
    if (mode == 0) { /* one pass in order */
        float m = -INFINITY, l = 0.0f;
        for (int64_t j = 0; j < n; j++)
            m = sc[j] > m ? sc[j] : m;
        for (int64_t j = 0; j < n; j++)
            l += expf(sc[j] - m);
        *m_out = m;
        *l_out = l;
    } else if (mode == 1) { /* prefill: online over tiles */
        float m = -INFINITY, l = 0.0f;
        for (int64_t t0 = 0; t0 < n; t0 += RC_ENGINE_PREFILL_TILE) {
            int64_t t1 = t0 + RC_ENGINE_PREFILL_TILE < n ? t0 + RC_ENGINE_PREFILL_TILE : n;
            float mt = -INFINITY;
            for (int64_t j = t0; j < t1; j++)
                mt = sc[j] > mt ? sc[j] : mt;
            float mn = mt > m ? mt : m;
            float lt = 0.0f;
            for (int64_t j = t0; j < t1; j++)
                lt += expf(sc[j] - mn);
            l = (m == -INFINITY ? 0.0f : l * expf(m - mn)) + lt;
            m = mn;
        }
        *m_out = m;
        *l_out = l;
    } else { /* decode: split over chunks, merged */
        int64_t chunk = RC_ENGINE_DECODE_CHUNK;
        while ((n + chunk - 1) / chunk > RC_SOFTMAX_MAX_CHUNKS)
            chunk *= 2;
        int64_t nc = 0;
        float m = -INFINITY;
        for (int64_t t0 = 0; t0 < n; t0 += chunk, nc++) {
            int64_t t1 = t0 + chunk < n ? t0 + chunk : n;
            float mc = -INFINITY, lc = 0.0f;
            for (int64_t j = t0; j < t1; j++)
                mc = sc[j] > mc ? sc[j] : mc;
            for (int64_t j = t0; j < t1; j++)
                lc += expf(sc[j] - mc);
            ms[nc] = mc;
            ls[nc] = lc;
            m = mc > m ? mc : m;
        }
        float l = 0.0f;
        for (int64_t c = 0; c < nc; c++)
            l += ls[c] * expf(ms[c] - m);
        *m_out = m;
        *l_out = l;
    }
}

/* In place: scores -> R(softmax) computed in fp32 (ms, ls as above). */
RC_HD static inline void rco_softmax(float *sc, int64_t n, int mode, rc_dtype prob_dt, float *ms, float *ls)
{
    float m, l;
    rco_softmax_stats(sc, n, mode, ms, ls, &m, &l);
    for (int64_t j = 0; j < n; j++)
        sc[j] = rc_round_to(expf(sc[j] - m) / l, prob_dt);
}

/* In place: scores -> probabilities with an attention sink (gpt-oss's
 * learned per-head logit, one more column of the softmax that is dropped
 * after it). Mode 0 (invariant) as GptOss's eager_attention_forward: m =
 * max(scores, sink); each column (the sink last) y = R_score(s - m) (the
 * subtraction is a tensor op in the dtype); sum of exp(y) in order, the sink
 * last; p = R_prob(exp(y) / sum) computed in fp32 (the softmax in the dtype
 * computes in fp32, rounds once). Modes 1 and 2 (engine prefill / decode: a
 * flash kernel's online softmax) the keys' statistics as rco_softmax_stats,
 * then the sink merged last: m' = max(m, sink), l' = l exp(m - m') +
 * exp(sink - m'), p = R_prob(exp(s - m') / l'). */
RC_HD static inline void rco_softmax_sink(float *sc, int64_t n, int mode, float sink, rc_dtype score_dt,
                                          rc_dtype prob_dt, float *ms, float *ls)
{
    if (mode == 0) {
        float m = sink;
        for (int64_t j = 0; j < n; j++)
            m = sc[j] > m ? sc[j] : m;
        float l = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            sc[j] = rc_round_to(sc[j] - m, score_dt);
            l += expf(sc[j]);
        }
        l += expf(rc_round_to(sink - m, score_dt));
        for (int64_t j = 0; j < n; j++)
            sc[j] = rc_round_to(expf(sc[j]) / l, prob_dt);
        return;
    }
    float m, l;
    rco_softmax_stats(sc, n, mode, ms, ls, &m, &l);
    const float m2 = sink > m ? sink : m;
    l = (m == -INFINITY ? 0.0f : l * expf(m - m2)) + expf(sink - m2);
    for (int64_t j = 0; j < n; j++)
        sc[j] = rc_round_to(expf(sc[j] - m2) / l, prob_dt);
}

/* the softmax of one attention row: rco_softmax, or with the spec's sink rco_softmax_sink */
RC_HD static inline void rco_attn_softmax(float *sc, int64_t n, int mode, const rco_score_spec *sp, rc_dtype prob_dt,
                                          float *ms, float *ls)
{
    if (sp->has_sink)
        rco_softmax_sink(sc, n, mode, sp->sink, sp->score_dt, prob_dt, ms, ls);
    else
        rco_softmax(sc, n, mode, prob_dt, ms, ls);
}

/* out[d] = R(sum_j p[j] * V[j, :]) with fp32 accumulation; tile <= 0: in key
 * order, else per tile of keys then added in order. acc, part: d floats. */
RC_HD static inline void rco_pv(const float *p, const float *V, int64_t nk, int64_t d, int64_t tile,
                                rc_dtype out_dt, float *acc, float *part, float *out)
{
    for (int64_t t = 0; t < d; t++)
        acc[t] = 0.0f;
    if (tile <= 0) { /* one pass in key order */
        for (int64_t j = 0; j < nk; j++)
            for (int64_t t = 0; t < d; t++)
                acc[t] += p[j] * V[j * d + t];
    } else { /* partial sums per tile of keys, added in order */
        for (int64_t t0 = 0; t0 < nk; t0 += tile) {
            int64_t t1 = t0 + tile < nk ? t0 + tile : nk;
            for (int64_t t = 0; t < d; t++)
                part[t] = 0.0f;
            for (int64_t j = t0; j < t1; j++)
                for (int64_t t = 0; t < d; t++)
                    part[t] += p[j] * V[j * d + t];
            for (int64_t t = 0; t < d; t++)
                acc[t] += part[t];
        }
    }
    for (int64_t t = 0; t < d; t++)
        out[t] = rc_round_to(acc[t], out_dt);
}

/* P.V's key tile in an attention mode (rco_pv): invariant in key order,
 * engine prefill split-K slices of the padded key length, decode chunks */
RC_HD static inline int64_t rco_pv_tile(int mode, int64_t max_keys)
{
    if (mode == 1)
        return (max_keys + RC_ENGINE_SPLIT_K - 1) / RC_ENGINE_SPLIT_K;
    return mode == 0 ? 0 : RC_ENGINE_DECODE_CHUNK;
}

/* Attention of one query row (one head) over nk keys Kh[nk, d], Vh[nk, d]
 * already in the cache. max_keys: the call's longest key length (engine
 * prefill splits P.V like a padded batched GEMM); sp: how scores are formed
 * (key 0 of Kh is at position sp->key0). Scratch: sc[nk], ms, ls
 * [RC_SOFTMAX_MAX_CHUNKS], acc, part [d]. */
RC_HD static inline void rco_attn_row(const float *q, const float *Kh, const float *Vh, int64_t nk, int64_t d,
                                      const rco_score_spec *sp, int mode, int64_t max_keys,
                                      rc_dtype prob_dt, rc_dtype out_dt, float *sc, float *ms, float *ls,
                                      float *acc, float *part, float *out)
{
    for (int64_t j = 0; j < nk; j++)
        sc[j] = rco_score(q, Kh + j * d, d, mode == 1 ? 8 : 16, sp, j);
    rco_attn_softmax(sc, nk, mode, sp, prob_dt, ms, ls);
    rco_pv(sc, Vh, nk, d, rco_pv_tile(mode, max_keys), out_dt, acc, part, out);
}

/* rco_attn_row over keys and values held at 2 bytes (Kh, Vh: the bit patterns of kv_dt, bf16 / fp16), each
 * element widened (exactly) where it is read: the same values as rco_attn_row over their fp32 copy, in the
 * same order, so the same result bits (the CUDA backend reads its 2-byte KV cache so; the CPU twin widens a
 * work item's rows and calls rco_attn_row) */
RC_HD static inline float rco_kv16_at(const uint16_t *p, int64_t i, rc_dtype kv_dt)
{
    return kv_dt == RC_BF16 ? rc_bf16_to_f32(p[i]) : rc_f16_to_f32(p[i]);
}

/* rco_dot16 / rco_dot8 with b widened from 2 bytes */
RC_HD static inline float rco_dot16_kv16(const float *a, const uint16_t *b, rc_dtype kv_dt, int64_t n)
{
    float acc[16] = {0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++)
            acc[j] += a[k + j] * rco_kv16_at(b, k + j, kv_dt);
    for (int j = 0; k + j < n; j++)
        acc[j] += a[k + j] * rco_kv16_at(b, k + j, kv_dt);
    return rco_tree16(acc);
}

RC_HD static inline float rco_dot8_kv16(const float *a, const uint16_t *b, rc_dtype kv_dt, int64_t n)
{
    float acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[k + j] * rco_kv16_at(b, k + j, kv_dt);
    for (int j = 0; k + j < n; j++)
        acc[j] += a[k + j] * rco_kv16_at(b, k + j, kv_dt);
    return rco_tree8(acc);
}

/* rco_pv with V widened from 2 bytes */
RC_HD static inline void rco_pv_kv16(const float *p, const uint16_t *V, rc_dtype kv_dt, int64_t nk, int64_t d,
                                     int64_t tile, rc_dtype out_dt, float *acc, float *part, float *out)
{
    for (int64_t t = 0; t < d; t++)
        acc[t] = 0.0f;
    if (tile <= 0) {
        for (int64_t j = 0; j < nk; j++)
            for (int64_t t = 0; t < d; t++)
                acc[t] += p[j] * rco_kv16_at(V, j * d + t, kv_dt);
    } else {
        for (int64_t t0 = 0; t0 < nk; t0 += tile) {
            int64_t t1 = t0 + tile < nk ? t0 + tile : nk;
            for (int64_t t = 0; t < d; t++)
                part[t] = 0.0f;
            for (int64_t j = t0; j < t1; j++)
                for (int64_t t = 0; t < d; t++)
                    part[t] += p[j] * rco_kv16_at(V, j * d + t, kv_dt);
            for (int64_t t = 0; t < d; t++)
                acc[t] += part[t];
        }
    }
    for (int64_t t = 0; t < d; t++)
        out[t] = rc_round_to(acc[t], out_dt);
}

RC_HD static inline void rco_attn_row_kv16(const float *q, const uint16_t *Kh, const uint16_t *Vh, rc_dtype kv_dt,
                                           int64_t nk, int64_t d, const rco_score_spec *sp, int mode,
                                           int64_t max_keys, rc_dtype prob_dt, rc_dtype out_dt, float *sc,
                                           float *ms, float *ls, float *acc, float *part, float *out)
{
    for (int64_t j = 0; j < nk; j++)
        sc[j] = rco_score_dot(mode == 1 ? rco_dot8_kv16(q, Kh + j * d, kv_dt, d)
                                        : rco_dot16_kv16(q, Kh + j * d, kv_dt, d),
                              sp, j);
    rco_attn_softmax(sc, nk, mode, sp, prob_dt, ms, ls);
    rco_pv_kv16(sc, Vh, kv_dt, nk, d, rco_pv_tile(mode, max_keys), out_dt, acc, part, out);
}

/* first key a query at position p sees (sliding window, else 0) */
RC_HD static inline int64_t rco_attn_lo(int64_t p, int64_t sliding_window)
{
    return sliding_window > 0 && p - sliding_window + 1 > 0 ? p - sliding_window + 1 : 0;
}

/* MPT's clip_qkv: clamp(min=-c, max=c), exact (NaN stays NaN, as torch.clamp) */
RC_HD static inline float rco_clamp1(float x, float c)
{
    return x < -c ? -c : x > c ? c : x;
}

/* ---- NormHead ------------------------------------------------------------- */

/* One row of F.normalize(w, dim=1) as Baichuan2's NormHead applies it to its
 * weight (in the weight's dtype): n = R(sqrt(sum w^2)) with the sum in fp32
 * over 16 lanes, clamp_min(eps) with eps cast to out_dt as torch casts the
 * scalar to the tensor's dtype (bf16 1e-12 -> 1.0019e-12; fp16 -> 0, so an
 * all-zero row is 0/0 = NaN in fp16, as in torch), then every w / n rounded
 * to out_dt (tests/test_ops.c: test_normhead). */
RC_HD static inline void rco_normalize_row(const float *w, int64_t H, float eps, rc_dtype out_dt, float *out)
{
    float n = rc_round_to(sqrtf(rco_lanes_reduce(w, w, H, 16)), out_dt);
    const float e = rc_round_to(eps, out_dt);
    n = n < e ? e : n; /* NaN stays NaN, as torch.clamp_min */
    for (int64_t i = 0; i < H; i++)
        out[i] = rc_round_to(w[i] / n, out_dt);
}

/* ---- activations --------------------------------------------------------- */

/* The activations computed in fp32 (the caller rounds the result once):
 * F.gelu (erf), F.gelu(approximate="tanh") (gelu_pytorch_tanh), F.silu.
 * GELU_NEW and GELU_BLOOM are chains of tensor ops in transformers: see
 * rco_act_dt. */
RC_HD static inline float rco_act1(rc_act act, float x)
{
    switch (act) {
    case RC_ACT_GELU_ERF:
        return x * 0.5f * (1.0f + erff(x * (float)0.70710678118654752440));
    case RC_ACT_GELU_TANH: {
        /* sqrt(2) * (2 / sqrt(pi)) * 0.5 = sqrt(2 / pi) */
        const float kBeta = (float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
        float inner = kBeta * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    case RC_ACT_SILU:
        return x / (1.0f + expf(-x));
    case RC_ACT_GELU_NEW:
    case RC_ACT_GELU_BLOOM:
        break; /* rco_act_dt */
    }
    return x;
}

/* act(x) rounded to dt as PyTorch eager computes it on a dt tensor: one
 * rounding after an fp32 evaluation for the fused kernels (F.gelu, F.silu),
 * one rounding per tensor op for the activations transformers writes as a
 * chain of ops (each Python float enters as fp32):
 *  GELU_NEW (NewGELUActivation, "gelu_new"): 0.5 * x * (1.0 + tanh(sqrt(2/pi)
 *    * (x + 0.044715 * pow(x, 3.0)))), left to right;
 *  GELU_BLOOM (bloom_gelu_forward): x * 0.5 * (1.0 + tanh(0.79788456 * x *
 *    (1 + 0.044715 * x * x))). */
RC_HD static inline float rco_act_dt(rc_act act, float x, rc_dtype dt)
{
    switch (act) {
    case RC_ACT_GELU_NEW: {
        const float c = (float)0.79788456080286535588; /* math.sqrt(2.0 / math.pi) */
        /* torch.pow(input, 3.0): on a bf16 tensor PyTorch computes base * base
         * * base with BFloat16 operands, rounding each product: R(R(x*x)*x)
         * (CPU pow_tensor_scalar_optimized_kernel, measured with torch 2.15:
         * all of 1e5 values, while R(x*x*x) differs in 22%; CUDA's
         * pow_tensor_scalar_kernel_impl multiplies the same way by its source).
         * fp16 on the CPU goes through Vectorized<Half>::pow in fp32: one
         * rounding, kept here (CUDA's source multiplies Half values, two
         * roundings: not measured). Found by data/fixtures/dtype's
         * gpt2_learned_bf16 (tests/test_versions.c). */
        float x3 = dt == RC_BF16 ? rc_round_to(rc_round_to(x * x, dt) * x, dt) : rc_round_to(x * x * x, dt);
        float u = rc_round_to(x + rc_round_to(0.044715f * x3, dt), dt);
        float t = rc_round_to(tanhf(rc_round_to(c * u, dt)), dt);
        return rc_round_to(rc_round_to(0.5f * x, dt) * rc_round_to(1.0f + t, dt), dt);
    }
    case RC_ACT_GELU_BLOOM: {
        float a = rc_round_to(x * 0.5f, dt);
        float b = rc_round_to(0.79788456f * x, dt);
        float e = rc_round_to(1.0f + rc_round_to(rc_round_to(0.044715f * x, dt) * x, dt), dt);
        float t = rc_round_to(tanhf(rc_round_to(b * e, dt)), dt);
        return rc_round_to(a * rc_round_to(1.0f + t, dt), dt);
    }
    case RC_ACT_GELU_ERF:
    case RC_ACT_GELU_TANH:
    case RC_ACT_SILU:
        break;
    }
    return rc_round_to(rco_act1(act, x), dt);
}

/* ---- log-softmax --------------------------------------------------------- */

/* exp(x) in fp64 from IEEE operations only (fma, ldexp and + -), so that the
 * CPU backend (this function, and its AVX-512 twin exp64_avx512 in
 * backend_cpu.c, 8 lanes of the same operations), the sampler and the CUDA
 * kernels get the same bits where libm's exp and CUDA's differ: x = n ln2 + r
 * (n rounded to nearest with the 1.5 * 2^52 shift, r by Cody-Waite with fma,
 * |r| <= ln2 / 2), exp(r) by its Taylor series to r^13 (Horner, fma; the
 * truncation is below 1e-17 of the result), times 2^n (ldexp: exact, or
 * rounded once into the subnormals). tests/test_ops.c test_exp64 measures it
 * against libm's exp. x <= -750 (and -inf) gives 0, x > 710 +inf, NaN NaN. */
#define RCO_EXP64_SHIFT 6755399441055744.0 /* 1.5 * 2^52 */
#define RCO_EXP64_LOG2E 1.4426950408889634074
#define RCO_EXP64_LN2_HI 0.69314718055994528623 /* ln 2 rounded to fp64 */
#define RCO_EXP64_LN2_LO 2.3190468138462996154e-17 /* ln 2 - RCO_EXP64_LN2_HI */
/* the Taylor series of exp(r) to r^13 by Horner: p = FMA(p, r, K(c)) from
 * 1/13! down to 1 (K wraps a constant: itself for doubles, a broadcast for
 * exp64_avx512's registers), so both paths run one list of coefficients */
#define RCO_EXP64_POLY(p, r, FMA, K)                                                                   \
    do {                                                                                               \
        p = K(1.0 / 6227020800.0);                                                                     \
        p = FMA(p, r, K(1.0 / 479001600.0));                                                           \
        p = FMA(p, r, K(1.0 / 39916800.0));                                                            \
        p = FMA(p, r, K(1.0 / 3628800.0));                                                             \
        p = FMA(p, r, K(1.0 / 362880.0));                                                              \
        p = FMA(p, r, K(1.0 / 40320.0));                                                               \
        p = FMA(p, r, K(1.0 / 5040.0));                                                                \
        p = FMA(p, r, K(1.0 / 720.0));                                                                 \
        p = FMA(p, r, K(1.0 / 120.0));                                                                 \
        p = FMA(p, r, K(1.0 / 24.0));                                                                  \
        p = FMA(p, r, K(1.0 / 6.0));                                                                   \
        p = FMA(p, r, K(0.5));                                                                         \
        p = FMA(p, r, K(1.0));                                                                         \
        p = FMA(p, r, K(1.0));                                                                         \
    } while (0)
#define RCO_EXP64_K(c) (c)
RC_HD static inline double rco_exp64(double x)
{
    if (!(x > -750.0))
        return x != x ? x : 0.0;
    if (x > 710.0)
        return INFINITY;
    const double n = fma(x, RCO_EXP64_LOG2E, RCO_EXP64_SHIFT) - RCO_EXP64_SHIFT;
    double r = fma(-n, RCO_EXP64_LN2_HI, x), p;
    r = fma(-n, RCO_EXP64_LN2_LO, r);
    RCO_EXP64_POLY(p, r, fma, RCO_EXP64_K);
    return ldexp(p, (int)n);
}

/* Next-token log-probs of one row of logits x[V]: z = R_lp(x / T) (no
 * division when T == 1); lp_dt fp32: z - lse with the log-sum-exp in fp64;
 * else F.log_softmax in the dtype: fp32 inside, (z - max) - log(sum exp(z -
 * max)) with 16 lanes, rounded once. full (may be NULL) gets lp[V]; *tgt_out
 * gets lp[target] when target >= 0. The fp64 exp is rco_exp64. The _st forms
 * read a row held as st (rco_at: RC_F32 floats, or RC_BF16 / RC_F16 2-byte
 * bit patterns widened exactly, a device's logits at the dtype's width,
 * forward.c engine_act_st); the others are those over floats. */
RC_HD static inline float rco_lp_z_st(const void *x, rc_dtype st, int64_t i, float T, rc_dtype lp_dt)
{
    const float v = rco_at(x, i, st);
    return T == 1.0f ? v : rc_round_to(v / T, lp_dt);
}

RC_HD static inline float rco_lp_z(const float *x, int64_t i, float T, rc_dtype lp_dt)
{
    return rco_lp_z_st(x, RC_F32, i, T, lp_dt);
}

/* the largest z of the row */
RC_HD static inline float rco_lp_max_st(const void *x, rc_dtype st, int64_t V, float T, rc_dtype lp_dt)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        float z = rco_lp_z_st(x, st, i, T, lp_dt);
        mx = z > mx ? z : mx;
    }
    return mx;
}

RC_HD static inline float rco_lp_max(const float *x, int64_t V, float T, rc_dtype lp_dt)
{
    return rco_lp_max_st(x, RC_F32, V, T, lp_dt);
}

/* fp32 log-probs from the row's max and sum of exp(z - max) (fp64, in order) */
RC_HD static inline void rco_logprob_finish_f32_st(const void *x, rc_dtype st, int64_t V, float T, float mx,
                                                   double sum, float *full, int64_t target, float *tgt_out)
{
    double lse = (double)mx + log(sum);
    if (full)
        for (int64_t i = 0; i < V; i++)
            full[i] = (float)((double)rco_lp_z_st(x, st, i, T, RC_F32) - lse);
    if (target >= 0)
        *tgt_out = (float)((double)rco_lp_z_st(x, st, target, T, RC_F32) - lse);
}

RC_HD static inline void rco_logprob_finish_f32(const float *x, int64_t V, float T, float mx, double sum, float *full,
                                                int64_t target, float *tgt_out)
{
    rco_logprob_finish_f32_st(x, RC_F32, V, T, mx, sum, full, target, tgt_out);
}

RC_HD static inline void rco_logprob_row_st(const void *x, rc_dtype st, int64_t V, float T, rc_dtype lp_dt,
                                            float *full, int64_t target, float *tgt_out)
{
    const float mx = rco_lp_max_st(x, st, V, T, lp_dt);
    if (lp_dt == RC_F32) {
        double sum = 0.0;
        for (int64_t i = 0; i < V; i++)
            sum += rco_exp64((double)rco_lp_z_st(x, st, i, T, lp_dt) - (double)mx);
        rco_logprob_finish_f32_st(x, st, V, T, mx, sum, full, target, tgt_out);
    } else {
        float acc[16] = {0};
        int64_t k = 0;
        for (; k + 16 <= V; k += 16)
            for (int j = 0; j < 16; j++)
                acc[j] += expf(rco_lp_z_st(x, st, k + j, T, lp_dt) - mx);
        for (int j = 0; k + j < V; j++)
            acc[j] += expf(rco_lp_z_st(x, st, k + j, T, lp_dt) - mx);
        float ls = logf(rco_tree16(acc));
        if (full)
            for (int64_t i = 0; i < V; i++)
                full[i] = rc_round_to((rco_lp_z_st(x, st, i, T, lp_dt) - mx) - ls, lp_dt);
        if (target >= 0)
            *tgt_out = rc_round_to((rco_lp_z_st(x, st, target, T, lp_dt) - mx) - ls, lp_dt);
    }
}

RC_HD static inline void rco_logprob_row(const float *x, int64_t V, float T, rc_dtype lp_dt, float *full,
                                         int64_t target, float *tgt_out)
{
    rco_logprob_row_st(x, RC_F32, V, T, lp_dt, full, target, tgt_out);
}

/* ---- mixture of experts ------------------------------------------------------ */

/* One row's routing (transformers' Qwen2MoeTopKRouter / MixtralTopKRouter
 * after the router GEMM): p = softmax(logits) in fp32 (the row max, exp(x -
 * max) in expert order, their sum in that order, each divided by it); the
 * top_k largest p, largest first (torch.topk; among equal values the lower
 * expert index); with renorm each divided by their sum (added in top-k
 * order); the weights rounded to w_dt (the dtype: .to(router_logits.dtype);
 * fp32: Mixtral keeps them). renorm RCO_MOE_TOPK_SOFTMAX (gpt-oss): torch.topk
 * of the logits themselves (rco_topk_cpu, its order among equal logits),
 * then rco_moe_softmax_k over the k. p: 2 E floats of scratch. sel: the
 * expert indices as floats. */
#define RCO_MOE_TOPK_SOFTMAX 2 /* renorm's third value: gpt-oss's router (rco_moe_route_row) */

/* ---- torch.topk on the CPU, ties included -------------------------------------
 * PyTorch's CPU topk (aten/src/ATen/native/cpu/SortingKernel.cpp,
 * topk_impl_loop, largest=True, sorted=True) fills (value, index) pairs in
 * index order and runs the C++ standard library on them with the comparator
 * c(x, y) = (isnan(x) && !isnan(y)) || x > y (values only): std::partial_sort
 * of the first k when k * 64 <= n, else std::nth_element at k - 1 followed by
 * std::sort of the first k - 1. Among equal values the order is whatever
 * those algorithms leave, so the chosen set at a tie on the k-th value depends
 * on them: this is libstdc++'s code path for them (introselect with a
 * median-of-three pivot and an unguarded partition, insertion sort below 4
 * elements; heap select and sort_heap; std::sort below 17 elements is an
 * insertion sort), which the published Linux wheels are built with.
 * tests/test_gptoss.c checks it on bf16 logits with ties. */
typedef struct {
    float v;
    float i; /* the index, exact as a float below 2^24 */
} rco_vi;

RC_HD static inline int rco_topk_cmp(rco_vi x, rco_vi y)
{
    return (x.v != x.v && !(y.v != y.v)) || x.v > y.v;
}

RC_HD static inline void rco_vi_swap(rco_vi *a, rco_vi *b)
{
    const rco_vi t = *a;
    *a = *b;
    *b = t;
}

RC_HD static inline void rco_insertion_sort(rco_vi *f, int64_t n)
{
    for (int64_t i = 1; i < n; i++) {
        const rco_vi val = f[i];
        if (rco_topk_cmp(val, f[0])) {
            for (int64_t j = i; j > 0; j--)
                f[j] = f[j - 1];
            f[0] = val;
        } else { /* unguarded linear insert */
            int64_t last = i;
            while (rco_topk_cmp(val, f[last - 1])) {
                f[last] = f[last - 1];
                last--;
            }
            f[last] = val;
        }
    }
}

/* __unguarded_partition_pivot on [f, f + n): the median of f[1], f[n / 2],
 * f[n - 1] moved to f[0], then the unguarded partition of [1, n) around it;
 * returns the cut */
RC_HD static inline int64_t rco_partition_pivot(rco_vi *f, int64_t n)
{
    rco_vi *a = f + 1, *b = f + n / 2, *c = f + n - 1;
    if (rco_topk_cmp(*a, *b)) {
        if (rco_topk_cmp(*b, *c))
            rco_vi_swap(f, b);
        else if (rco_topk_cmp(*a, *c))
            rco_vi_swap(f, c);
        else
            rco_vi_swap(f, a);
    } else if (rco_topk_cmp(*a, *c)) {
        rco_vi_swap(f, a);
    } else if (rco_topk_cmp(*b, *c)) {
        rco_vi_swap(f, c);
    } else {
        rco_vi_swap(f, b);
    }
    int64_t lo = 1, hi = n;
    for (;;) {
        while (rco_topk_cmp(f[lo], f[0]))
            lo++;
        hi--;
        while (rco_topk_cmp(f[0], f[hi]))
            hi--;
        if (!(lo < hi))
            return lo;
        rco_vi_swap(f + lo, f + hi);
        lo++;
    }
}

RC_HD static inline void rco_push_heap(rco_vi *f, int64_t hole, int64_t top, rco_vi val)
{
    int64_t parent = (hole - 1) / 2;
    while (hole > top && rco_topk_cmp(f[parent], val)) {
        f[hole] = f[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    f[hole] = val;
}

RC_HD static inline void rco_adjust_heap(rco_vi *f, int64_t hole, int64_t len, rco_vi val)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (rco_topk_cmp(f[child], f[child - 1]))
            child--;
        f[hole] = f[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        f[hole] = f[child - 1];
        hole = child - 1;
    }
    rco_push_heap(f, hole, top, val);
}

RC_HD static inline void rco_pop_heap(rco_vi *f, int64_t len, rco_vi *result)
{
    const rco_vi val = *result;
    *result = f[0];
    rco_adjust_heap(f, 0, len, val);
}

/* std::partial_sort(f, f + k, f + n): heap select, then sort_heap */
RC_HD static inline void rco_partial_sort(rco_vi *f, int64_t k, int64_t n)
{
    if (k >= 2)
        for (int64_t parent = (k - 2) / 2;; parent--) {
            rco_adjust_heap(f, parent, k, f[parent]);
            if (parent == 0)
                break;
        }
    for (int64_t i = k; i < n; i++)
        if (rco_topk_cmp(f[i], f[0]))
            rco_pop_heap(f, k, f + i);
    for (int64_t last = k; last > 1;) {
        last--;
        rco_pop_heap(f, last, f + last);
    }
}

/* std::nth_element(f, f + nth, f + n): introselect */
RC_HD static inline void rco_nth_element(rco_vi *f, int64_t nth, int64_t n)
{
    int64_t lg = 0;
    for (int64_t m = n; m > 1; m >>= 1)
        lg++;
    int64_t depth = 2 * lg, first = 0, last = n;
    while (last - first > 3) {
        if (depth == 0) { /* __heap_select(first, nth + 1, last), then iter_swap(first, nth) */
            rco_vi *g = f + first;
            const int64_t m = nth + 1 - first, len = last - first;
            if (m >= 2)
                for (int64_t parent = (m - 2) / 2;; parent--) {
                    rco_adjust_heap(g, parent, m, g[parent]);
                    if (parent == 0)
                        break;
                }
            for (int64_t i = m; i < len; i++)
                if (rco_topk_cmp(g[i], g[0]))
                    rco_pop_heap(g, m, g + i);
            rco_vi_swap(f + first, f + nth);
            return;
        }
        depth--;
        const int64_t cut = first + rco_partition_pivot(f + first, last - first);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    rco_insertion_sort(f + first, last - first);
}

/* torch.topk(x, k) of n values on the CPU (largest, sorted): sel / val get
 * the indices (as floats) and values; pairs: n of scratch */
RC_HD static inline void rco_topk_cpu(const float *x, int64_t n, int64_t k, rco_vi *pairs, float *sel, float *val)
{
    for (int64_t j = 0; j < n; j++) {
        pairs[j].v = x[j];
        pairs[j].i = (float)j;
    }
    if (k * 64 <= n) {
        rco_partial_sort(pairs, k, n);
    } else {
        rco_nth_element(pairs, k - 1, n);
        rco_insertion_sort(pairs, k - 1); /* std::sort of k - 1 <= 16 elements */
    }
    for (int64_t j = 0; j < k; j++) {
        sel[j] = pairs[j].i;
        val[j] = pairs[j].v;
    }
}

/* the softmax of the k values w (largest first) in place, as a softmax in
 * fp32 over them (w[0] is their max): exp(w - w[0]) in order, their sum in
 * order, each divided by it, rounded to w_dt */
RC_HD static inline void rco_moe_softmax_k(float *w, int64_t top_k, rc_dtype w_dt)
{
    float mx = w[0], sum = 0.0f;
    for (int64_t j = 1; j < top_k; j++)
        mx = w[j] > mx ? w[j] : mx;
    for (int64_t j = 0; j < top_k; j++) {
        w[j] = expf(w[j] - mx);
        sum += w[j];
    }
    for (int64_t j = 0; j < top_k; j++)
        w[j] = rc_round_to(w[j] / sum, w_dt);
}

RC_HD static inline void rco_moe_route_row(const float *logits, int64_t E, int64_t top_k, int renorm, rc_dtype w_dt,
                                           float *p, float *sel, float *w)
{
    if (renorm == RCO_MOE_TOPK_SOFTMAX) { /* GptOssTopKRouter: torch.topk(logits), then softmax over the k */
        rco_topk_cpu(logits, E, top_k, (rco_vi *)p, sel, w);
        rco_moe_softmax_k(w, top_k, w_dt);
        return;
    }
    float mx = logits[0];
    for (int64_t e = 1; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) {
        p[e] = expf(logits[e] - mx);
        sum += p[e];
    }
    for (int64_t e = 0; e < E; e++)
        p[e] = p[e] / sum;
    for (int64_t j = 0; j < top_k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++)
                taken |= (int64_t)sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = (float)best;
        w[j] = p[best];
    }
    if (renorm) {
        float s = 0.0f;
        for (int64_t j = 0; j < top_k; j++)
            s += w[j];
        for (int64_t j = 0; j < top_k; j++)
            w[j] = w[j] / s;
    }
    for (int64_t j = 0; j < top_k; j++)
        w[j] = rc_round_to(w[j], w_dt);
}

/* One row's weights under routing replay (R3; a trainer that replays the
 * sampler's experts): the experts are given (sel, top_k of them, in the
 * recorded order) and the weights recomputed from this side's logits as
 * miles' replayed router does (scores.gather of the fp32 softmax, then the
 * renormalisation and the cast of rco_moe_route_row): p as there, w[j] =
 * p[sel[j]], with renorm each divided by their sum (added in sel's order),
 * rounded to w_dt. p: E floats of scratch. */
RC_HD static inline void rco_moe_route_forced_row(const float *logits, int64_t E, int64_t top_k, int renorm,
                                                  rc_dtype w_dt, float *p, const float *sel, float *w)
{
    if (renorm == RCO_MOE_TOPK_SOFTMAX) { /* gpt-oss: the softmax over the recorded experts' logits */
        for (int64_t j = 0; j < top_k; j++)
            w[j] = logits[(int64_t)sel[j]];
        rco_moe_softmax_k(w, top_k, w_dt);
        return;
    }
    float mx = logits[0];
    for (int64_t e = 1; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) {
        p[e] = expf(logits[e] - mx);
        sum += p[e];
    }
    for (int64_t e = 0; e < E; e++)
        p[e] = p[e] / sum;
    for (int64_t j = 0; j < top_k; j++)
        w[j] = p[(int64_t)sel[j]];
    if (renorm) {
        float s = 0.0f;
        for (int64_t j = 0; j < top_k; j++)
            s += w[j];
        for (int64_t j = 0; j < top_k; j++)
            w[j] = w[j] / s;
    }
    for (int64_t j = 0; j < top_k; j++)
        w[j] = rc_round_to(w[j], w_dt);
}

/* DeepSeek-V3's / GLM-4.5's router (rc_router_kind RC_ROUTER_SIGMOID_GROUPED):
 * its sizes and constants, as the kernels and the CPU twin read them. */
typedef struct {
    int64_t E, top_k;          /* experts, experts chosen per row */
    int64_t n_group, topk_group; /* E / n_group experts per group; the best topk_group groups stay */
    int renorm;                /* norm_topk_prob */
    float scale;               /* routed_scaling_factor as fp32 */
    rc_dtype w_dt;             /* the weights' rounding (fp32: transformers keeps them) */
} rco_grouped_router;

/* the sizes a grouped router needs: equal groups of at least two experts
 * (torch's topk(2) per group), topk_group of the n_group groups, and top_k no
 * more than the experts those groups hold */
static inline int rco_grouped_router_ok(const rco_grouped_router *g)
{
    return g->E >= 2 && g->n_group >= 1 && g->E % g->n_group == 0 && g->E / g->n_group >= 2 && g->topk_group >= 1 &&
           g->topk_group <= g->n_group && g->top_k >= 1 && g->top_k <= g->topk_group * (g->E / g->n_group);
}

/* the larger of two candidates: a higher value, or the same value at a lower index */
RC_HD static inline int rco_route_better(float a, int64_t ia, float b, int64_t ib)
{
    return a > b || (a == b && ia < ib);
}

/* One row of the grouped sigmoid router (transformers' DeepseekV3TopkRouter /
 * Glm4MoeTopkRouter after the fp32 router GEMM), in fp32:
 *   s[e] = 1 / (1 + exp(-logit[e]))             (sigmoid)
 *   c[e] = s[e] + bias[e]                          (bias NULL: 0; the choice only)
 *   group g's score = the sum of its two largest c (larger + smaller)
 *   the topk_group best groups stay, the others' c become -inf
 *   sel = the top_k largest c, largest first (equal values: the lower index
 *         first; torch.topk(sorted=False) leaves its own order, which only the
 *         renormalising sum below sees)
 *   w[j] = s[sel[j]]; with renorm w[j] / (sum of w in sel's order + 1e-20f);
 *   then w[j] * scale, rounded to w_dt.
 * Groups are ranked the same way (a higher score, or the lower group index).
 * scratch: 2 * (E + n_group) floats. */
RC_HD static inline void rco_moe_route_grouped_row(const float *logits, const float *bias,
                                                   const rco_grouped_router *g, float *scratch, float *sel, float *w)
{
    const int64_t E = g->E, G = g->n_group, per = E / G;
    float *s = scratch, *c = scratch + E, *gs = scratch + 2 * E, *kept = scratch + 2 * E + G;
    for (int64_t e = 0; e < E; e++) {
        s[e] = 1.0f / (1.0f + expf(-logits[e]));
        c[e] = bias ? s[e] + bias[e] : s[e];
    }
    for (int64_t q = 0; q < G; q++) { /* the two largest of the group */
        int64_t i1 = -1, i2 = -1;
        for (int64_t e = q * per; e < (q + 1) * per; e++) {
            if (i1 < 0 || rco_route_better(c[e], e, c[i1], i1)) {
                i2 = i1;
                i1 = e;
            } else if (i2 < 0 || rco_route_better(c[e], e, c[i2], i2)) {
                i2 = e;
            }
        }
        gs[q] = i2 >= 0 ? c[i1] + c[i2] : c[i1];
        kept[q] = 0.0f;
    }
    for (int64_t j = 0; j < g->topk_group; j++) { /* the best groups (one is left while j < n_group) */
        int64_t best = -1;
        for (int64_t q = 0; q < G; q++)
            if (kept[q] == 0.0f && (best < 0 || rco_route_better(gs[q], q, gs[best], best)))
                best = q;
        kept[best] = 1.0f;
    }
    for (int64_t q = 0; q < G; q++)
        if (kept[q] == 0.0f)
            for (int64_t e = q * per; e < (q + 1) * per; e++)
                c[e] = -INFINITY;
    for (int64_t j = 0; j < g->top_k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++)
                taken |= (int64_t)sel[i] == e;
            if (!taken && (best < 0 || rco_route_better(c[e], e, c[best], best)))
                best = e;
        }
        sel[j] = (float)best;
        w[j] = s[best];
    }
    if (g->renorm) {
        float sum = 0.0f;
        for (int64_t j = 0; j < g->top_k; j++)
            sum += w[j];
        sum = sum + 1e-20f;
        for (int64_t j = 0; j < g->top_k; j++)
            w[j] = w[j] / sum;
    }
    for (int64_t j = 0; j < g->top_k; j++)
        w[j] = rc_round_to(w[j] * g->scale, g->w_dt);
}

/* The grouped router's weights under routing replay: the experts given (sel,
 * top_k of them, in the recorded order), w[j] = sigmoid(logit[sel[j]]) (the
 * unbiased score), renormalised and scaled as rco_moe_route_grouped_row does. */
RC_HD static inline void rco_moe_route_grouped_forced_row(const float *logits, const rco_grouped_router *g,
                                                          const float *sel, float *w)
{
    for (int64_t j = 0; j < g->top_k; j++)
        w[j] = 1.0f / (1.0f + expf(-logits[(int64_t)sel[j]]));
    if (g->renorm) {
        float sum = 0.0f;
        for (int64_t j = 0; j < g->top_k; j++)
            sum += w[j];
        sum = sum + 1e-20f;
        for (int64_t j = 0; j < g->top_k; j++)
            w[j] = w[j] / sum;
    }
    for (int64_t j = 0; j < g->top_k; j++)
        w[j] = rc_round_to(w[j] * g->scale, g->w_dt);
}

/* One element of an expert's (or the shared expert's) contribution added to
 * the output: R(acc + R(y * s)), y the expert's output (a value of dt), s its
 * weight (a value of dt, or fp32 for Mixtral: the product then rounds to fp32
 * first, as the promoted fp32 tensor does, then to dt: .to(dtype)). */
RC_HD static inline float rco_moe_acc(float acc, float y, float s, rc_dtype dt)
{
    const float prod = y * s;
    return rc_round_to(acc + rc_round_to(prod, dt), dt);
}

/* gpt-oss's clamped SwiGLU (GptOssExperts._apply_gate) of one gate / up
 * pair (values of dt), one rounding to dt per tensor op (a Python float enters
 * as fp32): g = min(gate, limit), u = clamp(up, -limit, limit) (limit: the
 * bound cast to dt, as torch casts a clamp's scalar); glu = R(g * R(sigmoid(R(g
 * * alpha)))), sigmoid in fp32 as 1 / (1 + exp(-x)); out = R(R(u + 1) * glu). */
RC_HD static inline float rco_swiglu_clamp1(float gate, float up, float alpha, float limit, rc_dtype dt)
{
    const float g = gate > limit ? limit : gate; /* NaN stays NaN, as torch.clamp */
    const float u = up < -limit ? -limit : up > limit ? limit : up;
    const float ga = rc_round_to(g * alpha, dt);
    const float sg = rc_round_to(1.0f / (1.0f + expf(-ga)), dt);
    const float glu = rc_round_to(g * sg, dt);
    return rc_round_to(rc_round_to(u + 1.0f, dt) * glu, dt);
}

/* Qwen2-MoE's shared-expert gate: R(sigmoid(g)) of the gate logit g (a value
 * of dt), sigmoid in fp32 as 1 / (1 + exp(-g)) */
RC_HD static inline float rco_moe_sigmoid(float g, rc_dtype dt)
{
    return rc_round_to(1.0f / (1.0f + expf(-g)), dt);
}

/* ---- Gated DeltaNet (src/engine/gdn.c; docs/numerics.md "Gated DeltaNet") ---- */

/* PyTorch's CPU sum (aten/src/ATen/native/cpu/SumKernel.cpp, cascade_sum) in
 * fp32, one output at a time. Three building blocks:
 *  levels  multi_row_sum's order for one output: n values x[i*s] added in
 *          order into a first accumulator, which is folded into the next
 *          level every 2^p values (p = max(4, ceil(log2 n) / 4): 16 below
 *          2^16 values), the levels added at the end;
 *  row     row_sum: the values as rows of 4 (ilp 4), column r summed by
 *          levels, the n % 4 tail added to column 0, then
 *          ((c0 + c1) + c2) + c3;
 *  inner   a contiguous reduction of n >= 8 values (the vectorised inner
 *          sum, 8 fp32 lanes: the AVX2 kernel, which the AVX-512 dispatch
 *          also runs, and the default one): lane l = row over x[l + 8v];
 *          then 0 + the n % 8 tail in order + lane 0 + ... + lane 7; below 8
 *          values, row.
 * A reduction over a non-contiguous dimension whose output is contiguous
 * ("outer": the sums over dk of [dk, dv] products) sums output column j by
 * levels when j lies in the first floor(ncols / 32) * 32 columns (ncols >= 8;
 * 4-column groups, floor(ncols / 4) * 4, below 8 columns) and by row
 * otherwise. */
RC_HD static inline int rco_ceil_log2(int64_t x)
{
    if (x <= 2)
        return 1;
    int b = 0;
    for (uint64_t v = (uint64_t)(x - 1); v; v >>= 1)
        b++;
    return b;
}

RC_HD static inline float rco_tsum_levels(const float *x, int64_t n, int64_t s)
{
    int lp = rco_ceil_log2(n) / 4;
    lp = lp < 4 ? 4 : lp;
    const int64_t step = (int64_t)1 << lp, mask = step - 1;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t i = 0;
    while (i + step <= n) {
        for (int64_t j = 0; j < step; j++, i++)
            acc[0] += x[i * s];
        for (int j = 1; j < 4; j++) {
            acc[j] += acc[j - 1];
            acc[j - 1] = 0.0f;
            if ((i & (mask << (j * lp))) != 0)
                break;
        }
    }
    for (; i < n; i++)
        acc[0] += x[i * s];
    acc[0] += acc[1];
    acc[0] += acc[2];
    acc[0] += acc[3];
    return acc[0];
}

RC_HD static inline float rco_tsum_row(const float *x, int64_t n, int64_t s)
{
    const int64_t m = n / 4;
    float c[4];
    for (int r = 0; r < 4; r++)
        c[r] = rco_tsum_levels(x + r * s, m, 4 * s);
    for (int64_t i = m * 4; i < n; i++)
        c[0] += x[i * s];
    c[0] += c[1];
    c[0] += c[2];
    c[0] += c[3];
    return c[0];
}

RC_HD static inline float rco_tsum_inner(const float *x, int64_t n)
{
    if (n < 8)
        return rco_tsum_row(x, n, 1);
    const int64_t nv = n / 8;
    float f = 0.0f;
    for (int64_t k = nv * 8; k < n; k++)
        f += x[k];
    for (int l = 0; l < 8; l++)
        f += rco_tsum_row(x + l, nv, 8);
    return f;
}

/* column j of an outer reduction over n rows (row stride rs) of ncols columns */
RC_HD static inline float rco_tsum_outer(const float *x, int64_t n, int64_t rs, int64_t j, int64_t ncols)
{
    const int64_t grouped = ncols >= 8 ? ncols / 32 * 32 : ncols / 4 * 4;
    return j < grouped ? rco_tsum_levels(x + j, n, rs) : rco_tsum_row(x + j, n, rs);
}

/* l2norm (transformers' `l2norm`, FLA's): x * rsqrt(sum(x * x) + 1e-6) in
 * fp32 over one row of d values (products rounded, the inner sum's order,
 * rsqrt = 1 / sqrt, eps the Python float rounded to fp32); out may be x. */
RC_HD static inline void rco_gdn_l2norm_row(const float *x, int64_t d, float *sq, float *out)
{
    for (int64_t i = 0; i < d; i++)
        sq[i] = x[i] * x[i];
    const float inv = 1.0f / sqrtf(rco_tsum_inner(sq, d) + 1e-6f);
    for (int64_t i = 0; i < d; i++)
        out[i] = x[i] * inv;
}

/* The layer's gates for one (token, value head): beta = R(sigmoid(b)) with
 * sigmoid 1 / (1 + exp(-b)) in fp32 of the dtype value b; g =
 * -exp(A_log) * softplus(a + dt_bias) in fp32 (a, dt_bias, A_log values of
 * the dtype widened: `A_log.float()`, `a.float() + dt_bias`), softplus
 * x > 20 ? x : log1p(exp(x)) (torch's threshold 20, beta 1). */
RC_HD static inline void rco_gdn_gate(float a, float b, float A_log, float dt_bias, rc_dtype dt, float *g, float *beta)
{
    *beta = rc_round_to(1.0f / (1.0f + expf(-b)), dt);
    const float x = a + dt_bias;
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    *g = -expf(A_log) * sp;
}

/* SiLU of a value of dt, in fp32, rounded to dt: x / (1 + exp(-x)) */
RC_HD static inline float rco_gdn_silu(float x, rc_dtype dt)
{
    return rc_round_to(x / (1.0f + expf(-x)), dt);
}

/* One output of the causal depthwise conv + SiLU: taps[0..K) the channel's
 * inputs at t-K+1 .. t (zeros before the sequence), w[0..K) its weights;
 * F.conv1d's sum w[0]*taps[0] + ... in tap order, each step a fused
 * multiply-add from 0 (oneDNN's depthwise kernel; bf16 products are exact in
 * fp32), rounded to dt (the conv's output tensor), then SiLU. */
RC_HD static inline float rco_gdn_conv_out(const float *taps, const float *w, int64_t K, rc_dtype dt)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++)
        acc = fmaf(w[k], taps[k], acc);
    return rco_gdn_silu(rc_round_to(acc, dt), dt);
}

/* Qwen3NextRMSNormGated over one row of d values of dt: h = R(x * rsqrt(mean
 * x^2 + eps)) (fp32 inside; mean = the inner sum / d), h = R(w * h) (the
 * weight in dt), out = R(h * silu(z)) with silu(z) in fp32 of the fp32
 * widened gate (the fp32 product of the promoted tensors, then .to(dt)). */
RC_HD static inline void rco_gdn_gated_rmsnorm_row(const float *x, const float *z, int64_t d, const float *w, float eps,
                                                   rc_dtype dt, float *sq, float *out)
{
    for (int64_t i = 0; i < d; i++)
        sq[i] = x[i] * x[i];
    const float var = rco_tsum_inner(sq, d) / (float)d;
    const float rs = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < d; i++) {
        const float h = rc_round_to(w[i] * rc_round_to(x[i] * rs, dt), dt);
        out[i] = rc_round_to(h * (z[i] / (1.0f + expf(-z[i]))), dt);
    }
}

/* One token of the gated delta rule's recurrent form for one value head
 * (transformers' torch_recurrent_gated_delta_rule, all in fp32): S [dk][dv]
 * the state, k, q the token's l2-normalised key and scaled query, v its
 * value, g, beta its gates; prod [dk * dv] scratch, kv [dv] scratch, o [dv]
 * the fp32 output. S = S * exp(g); kv = sum_i S[i] * k[i] (the products
 * rounded, the outer sum's order); delta = (v - kv) * beta;
 * S[i] = S[i] + k[i] * delta; o = sum_i S[i] * q[i]. */
RC_HD static inline void rco_gdn_recurrent_step(float *S, const float *k, const float *q, const float *v, float g,
                                                float beta, int64_t dk, int64_t dv, float *prod, float *kv, float *o)
{
    const float dec = expf(g);
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] = S[i] * dec;
    for (int64_t i = 0; i < dk; i++)
        for (int64_t j = 0; j < dv; j++)
            prod[i * dv + j] = S[i * dv + j] * k[i];
    for (int64_t j = 0; j < dv; j++)
        kv[j] = rco_tsum_outer(prod, dk, dv, j, dv);
    for (int64_t j = 0; j < dv; j++)
        kv[j] = (v[j] - kv[j]) * beta; /* delta */
    for (int64_t i = 0; i < dk; i++)
        for (int64_t j = 0; j < dv; j++)
            S[i * dv + j] = S[i * dv + j] + k[i] * kv[j];
    for (int64_t i = 0; i < dk; i++)
        for (int64_t j = 0; j < dv; j++)
            prod[i * dv + j] = S[i * dv + j] * q[i];
    for (int64_t j = 0; j < dv; j++)
        o[j] = rco_tsum_outer(prod, dk, dv, j, dv);
}

/* One token of the recurrent form for one value head, from the raw q, k of
 * its key head (l2norm, q divided by qdiv = f32(sqrt(dk)), the step), the
 * output rounded to out_dt; round_state: the state rounded to state_dt
 * afterwards (the end of a call). scratch: dk * dv + 3 * dk + 2 * dv
 * floats. The CPU's rc_gdn_recurrent and the CUDA kernel's thread
 * (kernels/gdn.cu) both run this. */
RC_HD static inline void rco_gdn_recurrent_token(float *S, const float *q, const float *k, const float *v, float g,
                                                 float beta, int64_t dk, int64_t dv, float qdiv, rc_dtype out_dt,
                                                 bool round_state, rc_dtype state_dt, float *scratch, float *out)
{
    float *prod = scratch, *qn = prod + dk * dv, *kn = qn + dk, *sq = kn + dk, *kv = sq + dk, *o = kv + dv;
    rco_gdn_l2norm_row(q, dk, sq, qn);
    for (int64_t i = 0; i < dk; i++)
        qn[i] = qn[i] / qdiv;
    rco_gdn_l2norm_row(k, dk, sq, kn);
    rco_gdn_recurrent_step(S, kn, qn, v, g, beta, dk, dv, prod, kv, o);
    for (int64_t j = 0; j < dv; j++)
        out[j] = rc_round_to(o[j], out_dt);
    if (round_state)
        for (int64_t i = 0; i < dk * dv; i++)
            S[i] = rc_round_to(S[i], state_dt);
}


/* ---- the Gated DeltaNet mixer, one thread's work each (gdn.c's loops; the
 * CUDA kernels of kernels/gdn.cu run the same functions, one thread per
 * channel, (token, head) or value head) ---- */

/* MKL's order for the small triangular solves (measured, docs/numerics.md):
 * rows in blocks of this many */
#define RC_GDN_TRSM_BLOCK 48

/* The offset, in a token's row of in_proj_qkvz's output [hk][2 dk + 2 rep dv],
 * of channel c of the conv's input (every q head, every k head, every v head:
 * Qwen3NextGatedDeltaNet.fix_query_key_value_ordering), rep = hv / hk */
RC_HD static inline int64_t rco_gdn_mixed_src(int64_t hk, int64_t hv, int64_t dk, int64_t dv, int64_t c)
{
    const int64_t rep = hv / hk, w = 2 * dk + 2 * rep * dv;
    if (c < hk * dk)
        return (c / dk) * w + c % dk;
    if (c < 2 * hk * dk)
        return ((c - hk * dk) / dk) * w + dk + (c - hk * dk) % dk;
    c -= 2 * hk * dk;
    return (c / (rep * dv)) * w + 2 * dk + c % (rep * dv);
}

/* the offset of value head h's z (the gated norm's gate) in a token's row of
 * in_proj_qkvz's output, and of its b in a token's row of in_proj_ba's
 * [hk][2 rep] (b, then a: rep further) */
RC_HD static inline int64_t rco_gdn_z_src(int64_t hk, int64_t hv, int64_t dk, int64_t dv, int64_t h)
{
    const int64_t rep = hv / hk, w = 2 * dk + 2 * rep * dv;
    return (h / rep) * w + 2 * dk + rep * dv + (h % rep) * dv;
}
RC_HD static inline int64_t rco_gdn_b_src(int64_t hk, int64_t hv, int64_t h)
{
    const int64_t rep = hv / hk;
    return (h / rep) * 2 * rep + h % rep;
}

/* One channel of the causal depthwise conv + SiLU (rco_gdn_conv_out per
 * token) over T tokens: x[t * xs] the channel's inputs, w [K] its weights,
 * out[t * os]; st NULL (the full forward: zeros before the sequence) or the
 * channel's conv state [K] (the last K inputs before the call; zeroed first
 * when fresh; updated to the last K inputs after it). step: one cached token
 * (causal_conv1d_update: the state shifted by one, x last, the output from
 * the state). taps: K floats of scratch. */
RC_HD static inline void rco_gdn_conv_channel(const float *x, int64_t xs, int64_t T, const float *w, int64_t K,
                                              rc_dtype dt, float *out, int64_t os, float *st, bool fresh, bool step,
                                              float *taps)
{
    if (st && fresh)
        for (int64_t k = 0; k < K; k++)
            st[k] = 0.0f;
    if (step) {
        for (int64_t k = 0; k + 1 < K; k++)
            st[k] = st[k + 1];
        st[K - 1] = x[0];
        out[0] = rco_gdn_conv_out(st, w, K, dt);
        return;
    }
    for (int64_t t = 0; t < T; t++) {
        for (int64_t k = 0; k < K; k++) {
            const int64_t s = t - (K - 1) + k; /* before the call: the state's columns, or zeros */
            taps[k] = s >= 0 ? x[s * xs] : st ? st[K + s] : 0.0f;
        }
        out[t * os] = rco_gdn_conv_out(taps, w, K, dt);
    }
    if (st) { /* the last K inputs: the state's tail, then the call's */
        for (int64_t k = 0; k < K; k++) {
            const int64_t s = T - K + k;
            taps[k] = s >= 0 ? x[s * xs] : st[K + s];
        }
        for (int64_t k = 0; k < K; k++)
            st[k] = taps[k];
    }
}

/* C[M][N] = A B with A[i][kk] at A[i * ar + kk * ak], B[kk][j] at
 * B[kk * bk + j]: each output a chain of fused multiply-adds from 0 in kk
 * order (MKL's sgemm at these sizes, measured) */
RC_HD static inline void rco_gdn_mm_chain(const float *A, int64_t ar, int64_t ak, const float *B, int64_t bk,
                                          int64_t M, int64_t K, int64_t N, float *Cm)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < K; kk++)
                acc = fmaf(A[i * ar + kk * ak], B[kk * bk + j], acc);
            Cm[i * N + j] = acc;
        }
}

/* X [M][N] = L^-1 X for L [M][M] unit lower triangular (its diagonal and
 * upper part not read): torch.linalg.solve_triangular(upper=False,
 * unitriangular=True) as MKL's strsm computes it here: rows in blocks of 48;
 * a block first subtracts the product of its rows of L with all earlier
 * solved rows (one fused multiply-add chain from 0 per output, then one
 * subtraction), then substitutes forward inside the block, column by column
 * (x_i = fma(-L[i][c], x_c, x_i) for c ascending). */
RC_HD static inline void rco_gdn_trsm_unit_lower(const float *L, int64_t M, float *X, int64_t N)
{
    for (int64_t s = 0; s < M; s += RC_GDN_TRSM_BLOCK) {
        const int64_t e = s + RC_GDN_TRSM_BLOCK < M ? s + RC_GDN_TRSM_BLOCK : M;
        if (s > 0)
            for (int64_t i = s; i < e; i++)
                for (int64_t j = 0; j < N; j++) {
                    float acc = 0.0f;
                    for (int64_t c = 0; c < s; c++)
                        acc = fmaf(L[i * M + c], X[c * N + j], acc);
                    X[i * N + j] = X[i * N + j] - acc;
                }
        for (int64_t c = s; c < e; c++)
            for (int64_t i = c + 1; i < e; i++)
                for (int64_t j = 0; j < N; j++)
                    X[i * N + j] = fmaf(-L[i * M + c], X[c * N + j], X[i * N + j]);
    }
}

/* the floats of scratch one value head of the chunked form needs (chunks of C) */
RC_HD static inline int64_t rco_gdn_chunk_scratch(int64_t C, int64_t dk, int64_t dv)
{
    const int64_t tr = C > dk ? C : dk;
    return C * (3 * dk + dv + 1) + 3 * C * C + 2 * C * dv + tr * dv + 4 * C * dk + C + dk * dv + dk;
}

/* The chunked form (torch_chunk_gated_delta_rule, use_qk_l2norm_in_kernel)
 * for one value head over T tokens in chunks of C, the length padded to a
 * multiple of C with zeros as transformers pads it: q[t * qs], k[t * ks] the
 * raw query and key of its key head (dk), v[t * vs] its value (dv), g[t *
 * gs], beta[t * gs] its gates; init NULL (zeros) or its initial state
 * [dk][dv]; final_state NULL or the state after the last (padded) chunk,
 * rounded to state_dt (may be init); out[t * os] the output (dv values of
 * out_dt). buf: rco_gdn_chunk_scratch floats. */
RC_HD static inline void rco_gdn_chunked_head(const float *q, int64_t qs, const float *k, int64_t ks, const float *v,
                                              int64_t vs, const float *g, const float *beta, int64_t gs, int64_t T,
                                              int64_t C, int64_t dk, int64_t dv, float scale, rc_dtype out_dt,
                                              const float *init, float *final_state, rc_dtype state_dt, float *out,
                                              int64_t os, float *buf)
{
    const int64_t nc = (T + C - 1) / C, tr = C > dk ? C : dk;
    /* per chunk token qn, kn, kb [C][dk], vb [C][dv], cum [C]; P, ut, attn [C][C], nv, vnew [C][dv],
     * tmp [max(C, dk)][dv] (the state's update key^T @ v_new is [dk][dv]), kcd, dkb, qd, kd [C][dk], e1 [C];
     * S [dk][dv], sq [dk] */
    float *qn = buf, *kn = qn + C * dk, *kb = kn + C * dk, *vb = kb + C * dk, *cum = vb + C * dv;
    float *P = cum + C, *ut = P + C * C, *attn = ut + C * C, *nv = attn + C * C, *vnew = nv + C * dv;
    float *tmp = vnew + C * dv, *kcd = tmp + tr * dv, *dkb = kcd + C * dk, *qd = dkb + C * dk, *kd = qd + C * dk;
    float *e1 = kd + C * dk, *S = e1 + C, *sq = S + dk * dv;
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] = init ? init[i] : 0.0f;
    for (int64_t c = 0; c < nc; c++) {
        /* fp32, l2norm, scaling, padding, beta applied */
        for (int64_t i = 0; i < C * (3 * dk + dv); i++)
            buf[i] = 0.0f;
        double acc = 0.0; /* the decay's cumulative sum in the chunk: torch's CPU cumsum accumulates in double */
        for (int64_t i = 0; i < C; i++) {
            const int64_t t = c * C + i;
            if (t < T) {
                rco_gdn_l2norm_row(q + t * qs, dk, sq, qn + i * dk);
                for (int64_t j = 0; j < dk; j++)
                    qn[i * dk + j] = qn[i * dk + j] * scale;
                rco_gdn_l2norm_row(k + t * ks, dk, sq, kn + i * dk);
                const float bt = beta[t * gs];
                for (int64_t j = 0; j < dv; j++)
                    vb[i * dv + j] = v[t * vs + j] * bt;
                for (int64_t j = 0; j < dk; j++)
                    kb[i * dk + j] = kn[i * dk + j] * bt;
            }
            acc += t < T ? (double)g[t * gs] : 0.0;
            cum[i] = (float)acc;
        }
        const float *cc = cum, *qc = qn, *kc = kn, *kbc = kb, *vbc = vb;
        for (int64_t i = 0; i < C; i++) {
            e1[i] = expf(cc[i]);
            for (int64_t j = 0; j < C; j++)
                P[i * C + j] = j <= i ? expf(cc[i] - cc[j]) : 0.0f; /* -inf masked, then exp */
        }
        /* ut = (k_beta @ key^T) * P; attn = (q @ key^T) * P: B[kk][j] = key[j][kk] */
        for (int64_t i = 0; i < C; i++)
            for (int64_t j = 0; j < C; j++) {
                float a1 = 0.0f, a2 = 0.0f;
                for (int64_t kk = 0; kk < dk; kk++) {
                    a1 = fmaf(kbc[i * dk + kk], kc[j * dk + kk], a1);
                    a2 = fmaf(qc[i * dk + kk], kc[j * dk + kk], a2);
                }
                ut[i * C + j] = a1 * P[i * C + j];
                attn[i * C + j] = a2 * P[i * C + j];
            }
        for (int64_t i = 0; i < C; i++)
            for (int64_t kk = 0; kk < dk; kk++)
                dkb[i * dk + kk] = kbc[i * dk + kk] * e1[i];
        for (int64_t i = 0; i < C * dv; i++)
            nv[i] = vbc[i];
        rco_gdn_trsm_unit_lower(ut, C, nv, dv);
        for (int64_t i = 0; i < C * dk; i++)
            kcd[i] = dkb[i];
        rco_gdn_trsm_unit_lower(ut, C, kcd, dk);
        for (int64_t i = 0; i < C; i++)
            for (int64_t kk = 0; kk < dk; kk++) {
                qd[i * dk + kk] = qc[i * dk + kk] * e1[i];
                kd[i * dk + kk] = kc[i * dk + kk] * expf(cc[C - 1] - cc[i]);
            }
        const float cd = expf(cc[C - 1]);
        /* the scan: v_new = new_values - k_cumdecay @ S; out = q @ S + attn @ v_new;
         * S = S * decay + key^T @ v_new */
        rco_gdn_mm_chain(kcd, dk, 1, S, dv, C, dk, dv, tmp);
        for (int64_t i = 0; i < C * dv; i++)
            vnew[i] = nv[i] - tmp[i];
        rco_gdn_mm_chain(qd, dk, 1, S, dv, C, dk, dv, tmp);
        rco_gdn_mm_chain(attn, C, 1, vnew, dv, C, C, dv, nv); /* nv is free now */
        for (int64_t i = 0; i < C; i++) {
            const int64_t t = c * C + i;
            if (t < T)
                for (int64_t j = 0; j < dv; j++)
                    out[t * os + j] = rc_round_to(tmp[i * dv + j] + nv[i * dv + j], out_dt);
        }
        rco_gdn_mm_chain(kd, 1, dk, vnew, dv, dk, C, dv, tmp);
        for (int64_t i = 0; i < dk * dv; i++)
            S[i] = S[i] * cd + tmp[i];
    }
    if (final_state)
        for (int64_t i = 0; i < dk * dv; i++)
            final_state[i] = rc_round_to(S[i], state_dt);
}

/* The recurrent form for one value head over T tokens (strides as
 * rco_gdn_chunked_head), from its state S [dk][dv] (zeroed first when
 * fresh), which ends rounded to state_dt; scratch: dk * dv + 3 * dk + 2 * dv
 * floats (rco_gdn_recurrent_token) */
RC_HD static inline void rco_gdn_recurrent_head(float *S, bool fresh, const float *q, int64_t qs, const float *k,
                                                int64_t ks, const float *v, int64_t vs, const float *g,
                                                const float *beta, int64_t gs, int64_t T, int64_t dk, int64_t dv,
                                                float qdiv, rc_dtype out_dt, rc_dtype state_dt, float *scratch,
                                                float *out, int64_t os)
{
    if (fresh)
        for (int64_t i = 0; i < dk * dv; i++)
            S[i] = 0.0f;
    for (int64_t t = 0; t < T; t++)
        rco_gdn_recurrent_token(S, q + t * qs, k + t * ks, v + t * vs, g[t * gs], beta[t * gs], dk, dv, qdiv, out_dt,
                                t == T - 1, state_dt, scratch, out + t * os);
}

/* attn_output * sigmoid(gate) (Qwen3-Next's attention output gate): the
 * sigmoid of the gate rounded to gate_dt, the product to out_dt */
RC_HD static inline float rco_gate_sigmoid_mul(float x, float gate, rc_dtype gate_dt, rc_dtype out_dt)
{
    return rc_round_to(x * rco_moe_sigmoid(gate, gate_dt), out_dt);
}


/* One call of a Gated DeltaNet layer's mixer for one sequence (gdn.c
 * rc_gdn_mixer_form; kernels/gdn.cu), as the stages' threads see it:
 * in_proj_qkvz's and in_proj_ba's outputs qkvz [T][hk][2 dk + 2 rep dv], ba
 * [T][hk][2 rep]; the layer's conv_w [C][K], A_log, dt_bias [hv], norm_w
 * [dv]; the slot's conv state [C][K] and recurrent state [hv][dk][dv]; out
 * [T][hv][dv]; scratch conv [T][C] (the conv's outputs: q, k, v), g, beta
 * [T][hv]. C = 2 hk dk + hv dv. step: one cached token (the conv step and
 * the recurrent step); recurrent: the recurrent form, else the chunked one
 * in chunks of `chunk` (from the state unless fresh). */
typedef struct rco_gdn_mix {
    const float *qkvz, *ba, *conv_w, *A_log, *dt_bias, *norm_w;
    float *conv_state, *state, *out, *conv, *g, *beta;
    int64_t hk, hv, dk, dv, T, K, chunk;
    float eps, qdiv, scale;
    rc_dtype dt, state_dt;
    bool fresh, step, recurrent;
} rco_gdn_mix;

/* stage 1, channel c (scratch: K floats): the causal conv + SiLU of its
 * inputs, its conv state zeroed (fresh), updated */
RC_HD static inline void rco_gdn_mix_conv(const rco_gdn_mix *a, int64_t c, float *taps)
{
    const int64_t C = 2 * a->hk * a->dk + a->hv * a->dv, W = 2 * a->hk * a->dk + 2 * a->hv * a->dv;
    rco_gdn_conv_channel(a->qkvz + rco_gdn_mixed_src(a->hk, a->hv, a->dk, a->dv, c), W, a->T, a->conv_w + c * a->K,
                         a->K, a->dt, a->conv + c, C, a->conv_state + c * a->K, a->fresh, a->step, taps);
}

/* stage 2, i = token * hv + value head: its gates g, beta */
RC_HD static inline void rco_gdn_mix_gate(const rco_gdn_mix *a, int64_t i)
{
    const int64_t t = i / a->hv, h = i % a->hv, rep = a->hv / a->hk;
    const float *b = a->ba + t * 2 * a->hv + rco_gdn_b_src(a->hk, a->hv, h);
    rco_gdn_gate(b[rep], b[0], a->A_log[h], a->dt_bias[h], a->dt, &a->g[i], &a->beta[i]);
}

/* the scratch floats of stage 3's thread */
RC_HD static inline int64_t rco_gdn_mix_rule_scratch(const rco_gdn_mix *a)
{
    return a->recurrent ? a->dk * a->dv + 3 * a->dk + 2 * a->dv : rco_gdn_chunk_scratch(a->chunk, a->dk, a->dv);
}

/* stage 3, value head h: the delta rule over the call's tokens into out */
RC_HD static inline void rco_gdn_mix_rule(const rco_gdn_mix *a, int64_t h, float *scratch)
{
    const int64_t C = 2 * a->hk * a->dk + a->hv * a->dv, kh = h / (a->hv / a->hk), SN = a->dk * a->dv;
    const float *q = a->conv + kh * a->dk, *k = a->conv + a->hk * a->dk + kh * a->dk;
    const float *v = a->conv + 2 * a->hk * a->dk + h * a->dv;
    float *S = a->state + h * SN, *o = a->out + h * a->dv;
    if (a->recurrent)
        rco_gdn_recurrent_head(S, a->fresh, q, C, k, C, v, C, a->g + h, a->beta + h, a->hv, a->T, a->dk, a->dv,
                               a->qdiv, a->dt, a->state_dt, scratch, o, a->hv * a->dv);
    else
        rco_gdn_chunked_head(q, C, k, C, v, C, a->g + h, a->beta + h, a->hv, a->T, a->chunk, a->dk, a->dv, a->scale,
                             a->dt, a->fresh ? (const float *)0 : S, S, a->state_dt, o, a->hv * a->dv, scratch);
}

/* stage 4, i = token * hv + value head (scratch: dv floats): the gated
 * RMSNorm of its output, in place, gated by its z */
RC_HD static inline void rco_gdn_mix_norm(const rco_gdn_mix *a, int64_t i, float *sq)
{
    const int64_t t = i / a->hv, h = i % a->hv, W = 2 * a->hk * a->dk + 2 * a->hv * a->dv;
    float *x = a->out + i * a->dv;
    rco_gdn_gated_rmsnorm_row(x, a->qkvz + t * W + rco_gdn_z_src(a->hk, a->hv, a->dk, a->dv, h), a->dv, a->norm_w,
                              a->eps, a->dt, sq, x);
}

#endif
