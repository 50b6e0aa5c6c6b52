/* Controls of the host stand-in for CUDA and cuBLAS (tests/cuda_shim/),
 * from C tests: fault injection and counters. */
#ifndef RC_CUDA_SHIM_CONTROL_H
#define RC_CUDA_SHIM_CONTROL_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RCK_SHIM_NO_DRIVER,    /* cudaGetDeviceCount: cudaErrorInsufficientDriver */
    RCK_SHIM_NO_DEVICE,    /* cudaGetDeviceCount: cudaErrorNoDevice */
    RCK_SHIM_MEMORY_BYTES, /* device memory size (0: 16 GiB); cudaMalloc fails beyond it */
    RCK_SHIM_FAIL_LAUNCH,  /* the Nth kernel launch (counting from 1) and later ones fail (0: none) */
    RCK_SHIM_FAIL_SYNC,    /* cudaDeviceSynchronize returns cudaErrorIllegalAddress */
    RCK_SHIM_FAIL_GEMM,    /* cublasGemmEx returns CUBLAS_STATUS_EXECUTION_FAILED */
    RCK_SHIM_LAUNCHES,     /* counter: kernel launches so far */
    RCK_SHIM_GEMMS,        /* counter: cublasGemmEx calls so far */
    RCK_SHIM_HALF_GEMMS,   /* counter: of those, with bf16 / fp16 operands */
    RCK_SHIM_BAD_POINTERS, /* counter: pointers given to a kernel, a copy, cuBLAS or cudaFree that are
                            * not in a live device allocation (each also one line on stderr) */
    RCK_SHIM_ALLOCS,       /* counter: cudaMalloc calls that succeeded */
    RCK_SHIM_ALLOC_BYTES,  /* bytes in live device allocations now (what cudaMalloc was asked for) */
    RCK_SHIM_ALLOC_PEAK,   /* the most bytes live at once since the start or the last reset (reset: the
                            * bytes live then) */
    RCK_SHIM_N
} rck_shim_key;

void rck_shim_set(rck_shim_key k, long long v);
long long rck_shim_get(rck_shim_key k);
void rck_shim_count(rck_shim_key k);
void rck_shim_reset(void); /* everything back to 0 (the live bytes and their peak: the bytes live now) */

#ifdef __cplusplus
}
#endif

#endif
