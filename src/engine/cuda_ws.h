/* The CUDA backend's workspaces (kernels/backend_cuda.cu ws_*): the bytes each one is asked for by one call, as
 * a function of the call's rows, sequences, keys and widths. One definition for the backend, which sizes each
 * workspace with it, and for the device-memory estimate (forward.c rc_cuda_ws_bytes), which calls it with the
 * largest arguments an engine's calls can have: every function here grows with each argument, so the estimate's
 * figure is the most a call can ask for. A workspace keeps the most it was asked for, plus a quarter
 * (rc_cuws_held: backend_cuda.cu ws_get). Sizes saturate at INT64_MAX (an allocation that then fails).
 * Plain C11 that nvcc also accepts (docs/gpu.md "Choosing the number of GPUs"). */
#ifndef RC_CUDA_WS_H
#define RC_CUDA_WS_H

#include <stdint.h>
#include <stdlib.h>

/* the workspaces, in the order of backend_cuda.cu's fields; then cuBLAS's own workspace and the backend's
 * copies of fp32 weights (transposed for the invariant GEMM, or 2-byte copies for cuBLAS), which an engine holds
 * for its lifetime */
typedef enum {
    RC_CUWS_IDX,    /* host index arrays: the batch descriptor, tokens, row lists */
    RC_CUWS_ATT,    /* the attention kernel's scratch */
    RC_CUWS_HALF,   /* bf16 / fp16 copies of a GEMM's fp32 activations for cuBLAS */
    RC_CUWS_LP,     /* a call's full log-probs and its targets' */
    RC_CUWS_TGT,    /* the target token ids */
    RC_CUWS_FP8,    /* fp8 per-tensor activation amax */
    RC_CUWS_MOE,    /* the router's scratch */
    RC_CUWS_GDN,    /* Gated DeltaNet's step scratch */
    RC_CUWS_WIDE,   /* a 2-byte weight widened to fp32 */
    RC_CUWS_BLAS,   /* cuBLAS's workspace (cublasSetWorkspace, fixed) */
    RC_CUWS_SHADOW, /* the engine's weight copies made by the backend */
    RC_CUWS_N
} rc_cuws_id;

static inline int64_t rc_cuws_mul(int64_t a, int64_t b)
{
    if (a <= 0 || b <= 0)
        return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

static inline int64_t rc_cuws_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* at least one element of `size` bytes (a workspace is never empty) */
static inline int64_t rc_cuws_elems(int64_t n, int64_t size)
{
    return rc_cuws_mul(n > 0 ? n : 1, size);
}

/* what a workspace holds after a request of `bytes` (ws_get allocates a quarter more, to grow less often) */
static inline int64_t rc_cuws_held(int64_t bytes)
{
    return rc_cuws_add(bytes, bytes / 4);
}

/* the attention scratch's cap in floats: 256 MiB, or RC_CUDA_ATTN_SCRATCH_MB */
static inline int64_t rc_cuws_attn_cap_floats(void)
{
    const char *v = getenv("RC_CUDA_ATTN_SCRATCH_MB");
    double mb = v ? strtod(v, NULL) : 0.0;
    if (!(mb > 0.0 && mb < 1e6))
        mb = 256.0;
    return (int64_t)(mb * 1048576.0 / 4.0);
}

/* cuBLAS's workspace on each device (engine kernels): 32 MiB (cuBLAS's own default on Hopper), or
 * RC_CUDA_CUBLAS_WORKSPACE_MB; given to cuBLAS with cublasSetWorkspace, so cuBLAS allocates none of its own */
static inline int64_t rc_cuws_blas_bytes(void)
{
    const char *v = getenv("RC_CUDA_CUBLAS_WORKSPACE_MB");
    double mb = v ? strtod(v, NULL) : 0.0;
    if (!(mb > 0.0 && mb < 1e6))
        mb = 32.0;
    return (int64_t)(mb * 1048576.0);
}

/* the attention scratch of a call of `rows` rows over nh query heads, up to `keys` keys, head width d: each
 * launch's rows (rck_attn_rows_per_launch) times nh threads' scratch (rck_attn_scratch: keys + 2
 * softmax_chunks + 2 d floats) stay under the cap, at least one row: min(rows x one row's, max(one row's, cap)) */
static inline int64_t rc_cuws_attn_bytes(int64_t rows, int64_t nh, int64_t keys, int64_t d, int64_t cap_floats,
                                         int64_t softmax_chunks)
{
    const int64_t row = rc_cuws_mul(nh, rc_cuws_add(keys, 2 * softmax_chunks + 2 * d));
    const int64_t all = rc_cuws_mul(rows, row), one = row > cap_floats ? row : cap_floats;
    return rc_cuws_elems(all < one ? all : one, 4);
}

/* the batch descriptor's int64 arrays: 4 per sequence, 2 per row */
static inline int64_t rc_cuws_batch_bytes(int64_t seqs, int64_t rows)
{
    return rc_cuws_elems(rc_cuws_add(rc_cuws_mul(4, seqs), rc_cuws_mul(2, rows)), 8);
}

/* an M x K GEMM input as bf16 / fp16 bits */
static inline int64_t rc_cuws_half_bytes(int64_t M, int64_t K) { return rc_cuws_elems(rc_cuws_mul(M, K), 2); }

/* n weight elements widened to fp32 */
static inline int64_t rc_cuws_wide_bytes(int64_t n) { return rc_cuws_elems(n, 4); }

/* the log-probs of M rows: [M, V] when the full ones are asked for, then the M targets' */
static inline int64_t rc_cuws_lp_bytes(int64_t M, int64_t V, int full)
{
    return rc_cuws_elems(rc_cuws_add(full ? rc_cuws_mul(M, V) : 0, M), 4);
}

/* M int32 values (tokens, targets) */
static inline int64_t rc_cuws_i32_bytes(int64_t M) { return rc_cuws_elems(M, 4); }

/* M int64 values (a row list); two lists of n (the MoE accumulation's rows and weights' indices) */
static inline int64_t rc_cuws_i64_bytes(int64_t M) { return rc_cuws_elems(M, 8); }

/* fp8 per-tensor activations: one amax per row */
static inline int64_t rc_cuws_fp8_bytes(int64_t M) { return rc_cuws_elems(M, 4); }

/* the router's scratch: 2 E floats a row (softmax top-k), or 2 (E + groups) (DeepSeek's grouped router) */
static inline int64_t rc_cuws_moe_bytes(int64_t M, int64_t E, int64_t groups)
{
    return rc_cuws_elems(rc_cuws_mul(M, rc_cuws_mul(2, rc_cuws_add(E, groups))), 4);
}

/* Gated DeltaNet's step: per sequence and value head, `per` floats (rc_gdn_step_scratch) */
static inline int64_t rc_cuws_gdn_bytes(int64_t seqs, int64_t hv, int64_t per)
{
    return rc_cuws_elems(rc_cuws_mul(rc_cuws_mul(seqs, hv), per), 4);
}

/* Gated DeltaNet's mixer for one sequence's call of T tokens (backend_cuda.cu cuda_gdn_mixer): the conv's outputs
 * [T][C] (C = 2 hk dk + hv dv), g and beta [T][hv], then the larger of the conv state's taps (C x K) and the delta
 * rule's launches, nh value heads at a time of rs floats each (rs: rco_gdn_mix_rule_scratch), nh the cap's worth
 * (rc_cuws_attn_cap_floats) within 1 to hv */
static inline int64_t rc_cuws_gdn_mixer_bytes(int64_t T, int64_t hk, int64_t hv, int64_t dk, int64_t dv, int64_t K,
                                              int64_t rs, int64_t cap_floats)
{
    const int64_t C = rc_cuws_add(rc_cuws_mul(2 * hk, dk), rc_cuws_mul(hv, dv));
    int64_t nh = rs > 0 ? cap_floats / rs : 1;
    nh = nh < 1 ? 1 : nh > hv ? hv : nh;
    const int64_t rule = rc_cuws_mul(nh, rs), taps = rc_cuws_mul(C, K);
    const int64_t fixed = rc_cuws_add(rc_cuws_mul(T, C), rc_cuws_mul(2 * T, hv));
    return rc_cuws_elems(rc_cuws_add(fixed, rule > taps ? rule : taps), 4);
}

#endif
