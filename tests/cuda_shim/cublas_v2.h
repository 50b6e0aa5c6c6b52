// A host stand-in for the cuBLAS calls the CUDA backend makes (see
// cuda_runtime.h here). cublasGemmEx computes the column-major GEMM with
// operands of the given type (fp32, or bf16 / fp16 bit patterns), an fp32
// sum in k order: a stand-in for cuBLAS's own order, not a copy of it; the
// output fp32, or of the 2-byte operands' type (alpha * sum + beta * C in
// fp32, rounded to nearest-even); its three matrices must be device memory
// over their whole extents.
#ifndef RC_CUDA_SHIM_CUBLAS_H
#define RC_CUDA_SHIM_CUBLAS_H

#include "cuda_runtime.h"
#include "dtype.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

struct rck_shim_blas {
    int math;
    int dev; // the device current at cublasCreate: the handle's calls run there
    const void *ws = nullptr; // cublasSetWorkspace's workspace (memory of dev), ws_bytes of it
    size_t ws_bytes = 0;
};
typedef rck_shim_blas *cublasHandle_t;

static inline cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new rck_shim_blas{0, g_shim.cur};
    return CUBLAS_STATUS_SUCCESS;
}

// the workspace cuBLAS may use (instead of allocating its own): memory of the handle's device over all its bytes
static inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *p, size_t bytes)
{
    if (bytes > 0 && rck_shim_device_of(p, bytes) != h->dev) {
        fprintf(stderr, "cuda shim: cublasSetWorkspace: %p (%zu bytes) is not memory of device %d\n", p, bytes, h->dev);
        rck_shim_count(RCK_SHIM_BAD_POINTERS);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->ws = p;
    h->ws_bytes = bytes;
    rck_shim_set(RCK_SHIM_BLAS_WS_BYTES, (long long)bytes);
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    h->math = (int)m;
    return CUBLAS_STATUS_SUCCESS;
}

static inline const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

static inline const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    default: return cublasGetStatusName(s);
    }
}

static inline float rck_shim_elem(const void *p, cudaDataType t, int64_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    uint16_t b = ((const uint16_t *)p)[i];
    return t == CUDA_R_16BF ? rc_bf16_to_f32(b) : rc_f16_to_f32(b);
}

// C[m, n] (column-major, ldc) = alpha op(A) op(B) + beta C
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo)
{
    (void)algo;
    rck_shim_count(RCK_SHIM_GEMMS);
    if (h->dev != g_shim.cur) {
        fprintf(stderr, "cuda shim: cublasGemmEx: a handle of device %d used on device %d\n", h->dev, g_shim.cur);
        rck_shim_count(RCK_SHIM_BAD_POINTERS);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (at != CUDA_R_32F)
        rck_shim_count(RCK_SHIM_HALF_GEMMS);
    if (h->ws_bytes == 0 || rck_shim_device_of(h->ws, h->ws_bytes) != h->dev) // cuBLAS would allocate its own
        rck_shim_count(RCK_SHIM_GEMMS_NO_WS);
    if (rck_shim_get(RCK_SHIM_FAIL_GEMM))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    // cuBLAS's combinations for CUBLAS_COMPUTE_32F that the backend uses: fp32 or 2-byte operands with an
    // fp32 output, or 2-byte operands with an output of their type
    if ((ct != CUDA_R_32F && ct != at) || compute != CUBLAS_COMPUTE_32F || at != bt || m < 0 || n < 0 || k < 0)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // every matrix in device memory over its whole extent (column-major, ld apart)
    if (m > 0 && n > 0 && k > 0) {
        const size_t es = at == CUDA_R_32F ? 4 : 2;
        const int64_t a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
        const int64_t b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
        const size_t a_bytes = (size_t)((a_cols - 1) * (int64_t)lda + a_rows) * es;
        const size_t b_bytes = (size_t)((b_cols - 1) * (int64_t)ldb + b_rows) * es;
        const size_t c_bytes = (size_t)((int64_t)(n - 1) * ldc + m) * (ct == CUDA_R_32F ? 4 : 2);
        bool ok = true;
        if (!rck_shim_check_current("cublasGemmEx", "A", A, a_bytes)) {
            ok = false;
        }
        if (!rck_shim_check_current("cublasGemmEx", "B", B, b_bytes)) {
            ok = false;
        }
        if (!rck_shim_check_current("cublasGemmEx", "C", C, c_bytes)) {
            ok = false;
        }
        if (!ok)
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k; p++) {
                float a = rck_shim_elem(A, at, ta == CUBLAS_OP_N ? (int64_t)p * lda + i : (int64_t)i * lda + p);
                float b = rck_shim_elem(B, bt, tb == CUBLAS_OP_N ? (int64_t)j * ldb + p : (int64_t)p * ldb + j);
                s += a * b;
            }
            const int64_t ij = (int64_t)j * ldc + i;
            const float v = al * s + (be != 0.0f ? be * rck_shim_elem(C, ct, ij) : 0.0f);
            if (ct == CUDA_R_32F) // a 2-byte output: the fp32 value rounded to nearest-even, as cuBLAS stores it
                ((float *)C)[ij] = v;
            else
                ((uint16_t *)C)[ij] = ct == CUDA_R_16BF ? rc_f32_to_bf16(v) : rc_f32_to_f16(v);
        }
    return CUBLAS_STATUS_SUCCESS;
}

#endif
