// Internal to the CUDA backend: error checking with the failing call, file
// and line, and the host-side launchers of the kernels in this folder (one
// .cu per op family; each thread's work is in rck_threads.h).
#ifndef RC_RCK_H
#define RC_RCK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "rck_threads.h"
#include "status.h"

// A failed CUDA runtime call as an rc_status: RC_ERR_DEVICE with the call,
// the error's name and text, file and line ("too little GPU memory" for
// cudaErrorMemoryAllocation).
rc_status rck_cuda_fail(cudaError_t e, const char *call, const char *file, int line);
rc_status rck_blas_fail(cublasStatus_t e, const char *call, const char *file, int line);

#define RCK_CUDA(call)                                                  \
    do {                                                                \
        cudaError_t rck_e_ = (call);                                    \
        if (rck_e_ != cudaSuccess)                                      \
            return rck_cuda_fail(rck_e_, #call, __FILE__, __LINE__);    \
    } while (0)

#define RCK_BLAS(call)                                                  \
    do {                                                                \
        cublasStatus_t rck_b_ = (call);                                 \
        if (rck_b_ != CUBLAS_STATUS_SUCCESS)                            \
            return rck_blas_fail(rck_b_, #call, __FILE__, __LINE__);    \
    } while (0)

#define RCK_BLOCK 128

// Grid for n threads of RCK_BLOCK (kernels loop with a grid stride past it).
static inline unsigned rck_grid(int64_t n)
{
    int64_t b = (n + RCK_BLOCK - 1) / RCK_BLOCK;
    const int64_t cap = (int64_t)1 << 20;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

// After a launch: the launch error, and with RC_CUDA_SYNC=1 in the
// environment the kernel's own (synchronising after every kernel).
rc_status rck_after_launch(const char *kernel, const char *file, int line);

// A __global__ kernel running rck_<name>_thread over n threads.
#define RCK_DEFINE_KERNEL(kname, Args, thread_fn)                                          \
    __global__ void kname(Args a, int64_t n)                                               \
    {                                                                                      \
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;            \
             i += (int64_t)gridDim.x * blockDim.x)                                         \
            thread_fn(&a, i);                                                              \
    }

// nvcc: a real launch; the tests' host build (tests/cuda_shim/) runs the
// grid's threads one after another on the CPU
#ifdef __CUDACC__
#define RCK_KERNEL_CALL(kname, grid, block, args, n) kname<<<(grid), (block)>>>((args), (n))
#else
#define RCK_KERNEL_CALL(kname, grid, block, args, n) rck_shim_launch(kname, #kname, (grid), (block), (args), (n))
#endif

#define RCK_LAUNCH(kname, args, n)                                                         \
    do {                                                                                   \
        if ((n) > 0) {                                                                     \
            RCK_KERNEL_CALL(kname, rck_grid(n), RCK_BLOCK, (args), (n));                   \
            RC_TRY(rck_after_launch(#kname, __FILE__, __LINE__));                          \
        }                                                                                  \
    } while (0)

// launchers (elementwise.cu, norm.cu, rope.cu, attention.cu, logprobs.cu, gemm.cu, fp8.cu)
rc_status rck_round(const rck_round_args &a);
rc_status rck_to_half(const rck_to_half_args &a);
rc_status rck_widen(const rck_widen_args &a);
rc_status rck_fp8_widen(const rck_fp8_widen_args &a);
rc_status rck_fp8_deq(const rck_fp8_deq_args &a);
rc_status rck_embed(const rck_embed_args &a);
rc_status rck_gather(const rck_gather_args &a);
rc_status rck_ew(const rck_ew_args &a);
rc_status rck_norm(const rck_norm_args &a);
rc_status rck_normalize(const rck_normalize_args &a);
rc_status rck_qk_norm(const rck_qk_norm_args &a);
// the RoPE and attention kernels' arguments from the attention parameters
// (shapes, RoPE table, scale, sliding window, rounding points), after
// rc_attn_params_check: what the kernels do not implement yet is refused
// (attention.cu; op names the op in the message)
rc_status rck_attn_args_from_params(const rc_attn_params &ap, const char *op, rck_attn_args *a);
rc_status rck_rope(const rck_attn_args &a, int64_t n_rows);
rc_status rck_kv_store(const rck_attn_args &a, int64_t n_rows);
rc_status rck_attn(const rck_attn_args &a, int64_t n_rows_in_launch);
// a 2-byte cache's rows [0, Tw) of the call's n_seq sequences widened to fp32 for rck_attn
rc_status rck_logprobs(const rck_lp_args &a);
// fp8 weights (fp8.cu): a call's activations to fp8 values and scales; one epilogue step
rc_status rck_fp8_quant_act(const rck_fp8_act_args &a);
rc_status rck_fp8_epilogue(const rc_fp8_epi &e);
rc_status rck_gemm_invariant(const rck_gemm_args &a);
// mixture of experts (moe.cu)
rc_status rck_zero(const rck_zero_args &a, int64_t n);
rc_status rck_moe_route(const rck_moe_route_args &a, int64_t M);
rc_status rck_moe_acc(const rck_moe_acc_args &a, int64_t n);
rc_status rck_moe_route_grouped(const rck_moe_route_grouped_args &a, int64_t M);
// Gated DeltaNet (gdn.cu): one recurrent step, n = sequences x value heads threads
rc_status rck_gdn_step(const rck_gdn_step_args &a, int64_t n);
// a mixer's stage (0 conv, 1 gates, 2 the delta rule, 3 the gated norm) over n threads; the output gate
rc_status rck_gdn_mix(int stage, const rck_gdn_mix_args &a, int64_t n);
rc_status rck_gate_mul(const rck_gate_mul_args &a, int64_t n);
rc_status rck_transpose(const rck_transpose_args &a);
// y[M, N] = x[M, K] . W[N, K]^T + beta y through cublasGemmEx, fp32 compute;
// x and W of type in_dt (RC_F32, RC_BF16 or RC_F16 bit patterns), their rows
// ld elements apart (K; more for a K-slice of a wider GEMM); y of type y_dt
// (RC_F32, or in_dt's 2-byte type: the fp32 result rounded to nearest-even)
rc_status rck_gemm_cublas(cublasHandle_t h, const void *x, const void *W, rc_dtype in_dt, int64_t M, int64_t K,
                          int64_t N, int64_t ld, void *y, rc_dtype y_dt, float beta);
// y[i] = bias[i % n_cols] as 2-byte bits (a cuBLAS GEMM's C operand, beta = 1)
rc_status rck_bias16(const rck_bias16_args &a);

#endif
