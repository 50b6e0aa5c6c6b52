// GEMMs. engine: cuBLAS (cublasGemmEx with fp32 / bf16 / fp16 operands, fp32
// compute, fp32 output, or the operands' 2-byte type for an activation held at
// 2 bytes, default heuristics: what frameworks get). invariant:
// our own kernel, one thread per output with the CPU's fixed 16-lane FMA order
// (rco_gemm_dot, one chunk), so the result does not depend on M (CPU twin:
// backend_cpu.c's GEMM with invariant kernels); it reads a transposed copy of
// the weight, made once, so that a warp's loads are contiguous.
#include <limits.h>

#include "rck.h"

RCK_DEFINE_KERNEL(k_gemm_inv, rck_gemm_args, rck_gemm_inv_thread)
RCK_DEFINE_KERNEL(k_transpose, rck_transpose_args, rck_transpose_thread)
RCK_DEFINE_KERNEL(k_bias16, rck_bias16_args, rck_bias16_thread)

rc_status rck_gemm_invariant(const rck_gemm_args &a)
{
    RCK_LAUNCH(k_gemm_inv, a, a.M * a.N);
    return RC_OK;
}

rc_status rck_transpose(const rck_transpose_args &a)
{
    RCK_LAUNCH(k_transpose, a, a.rows * a.cols);
    return RC_OK;
}

rc_status rck_bias16(const rck_bias16_args &a)
{
    RCK_LAUNCH(k_bias16, a, a.n);
    return RC_OK;
}

rc_status rck_gemm_cublas(cublasHandle_t h, const void *x, const void *W, rc_dtype in_dt, int64_t M, int64_t K,
                          int64_t N, int64_t ld, void *y, rc_dtype y_dt, float beta)
{
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || ld > INT_MAX)
        return rc_errorf(RC_ERR_UNSUPPORTED, "CUDA backend: GEMM of %lld x %lld x %lld exceeds cuBLAS's int range",
                         (long long)M, (long long)N, (long long)K);
    const cudaDataType t = in_dt == RC_BF16 ? CUDA_R_16BF : in_dt == RC_F16 ? CUDA_R_16F : CUDA_R_32F;
    const cudaDataType ty = y_dt == RC_BF16 ? CUDA_R_16BF : y_dt == RC_F16 ? CUDA_R_16F : CUDA_R_32F;
    const float alpha = 1.0f;
    // row-major y[M, N] = x[M, K] W[N, K]^T is column-major y^T = W^T' x^T:
    // A = W seen as [K, N] column-major (transposed), B = x seen as [K, M];
    // their columns ld apart (K, or the whole GEMM's K for a K-slice).
    RCK_BLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, W, t, (int)ld, x, t, (int)ld,
                          &beta, y, ty, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return RC_OK;
}
