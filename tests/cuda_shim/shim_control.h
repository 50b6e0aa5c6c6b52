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
    /* several fake devices (a layer split over GPUs): each allocation belongs to the device current at its
     * cudaMalloc; a kernel, a cudaMemcpy and a cuBLAS call take only memory of the current device (and a cuBLAS
     * handle only on the device it was created on); cudaMemcpyPeer copies between devices */
    RCK_SHIM_DEVICES,      /* how many devices cudaGetDeviceCount reports (0: the environment's RCK_SHIM_DEVICES, else
                            * 1; at most RCK_SHIM_MAX_DEVICES; kept by rck_shim_reset) */
    RCK_SHIM_MEMORY_DEVICE, /* 0: RCK_SHIM_MEMORY_BYTES limits every device; d + 1: device d only */
    RCK_SHIM_FAIL_PEER,    /* cudaMemcpyPeer returns cudaErrorInvalidValue */
    RCK_SHIM_PEER_COPIES,  /* counter: cudaMemcpyPeer calls that copied */
    RCK_SHIM_BLAS_WS_BYTES, /* the bytes of the last workspace given to cuBLAS (cublasSetWorkspace) */
    RCK_SHIM_GEMMS_NO_WS,  /* counter: cublasGemmEx calls on a handle with no live workspace of its device (where
                            * cuBLAS would allocate one of its own) */
    RCK_SHIM_N

} rck_shim_key;

void rck_shim_set(rck_shim_key k, long long v);
long long rck_shim_get(rck_shim_key k);
void rck_shim_count(rck_shim_key k);
void rck_shim_reset(void); /* everything back to 0 (the live bytes and their peak: the bytes live now) */
#define RCK_SHIM_MAX_DEVICES 8
/* device dev's live bytes now, and their peak since the start or the last reset */
long long rck_shim_device_bytes(int dev);
long long rck_shim_device_peak(int dev);

#ifdef __cplusplus
}
#endif

#endif
