// Device probing for the CUDA backend: every CUDA call is checked and a
// failure becomes an rc_status naming the reason. (The kernels and the cuBLAS
// GEMM wrapper join this folder as the backend is written; issue 6.)
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_cuda.h"

extern "C" rc_status rc_cuda_probe(int *n_devices, char *name, size_t name_len)
{
    *n_devices = 0;
    if (name_len)
        name[0] = '\0';
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && vis[0] == '\0')
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: CUDA_VISIBLE_DEVICES is empty, so no device is visible");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver)
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: no usable NVIDIA driver (none installed, or one older than the CUDA %d.%d runtime)",
                         CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: no CUDA device found");
    if (e != cudaSuccess)
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: cudaGetDeviceCount failed (%s: %s) at %s:%d",
                         cudaGetErrorName(e), cudaGetErrorString(e), __FILE__, __LINE__);
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess)
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: cudaGetDeviceProperties failed (%s) at %s:%d",
                         cudaGetErrorString(e), __FILE__, __LINE__);
    *n_devices = n;
    if (name_len)
        snprintf(name, name_len, "%s (sm_%d%d, %.0f GiB)", p.name, p.major, p.minor,
                 (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return RC_OK;
}
