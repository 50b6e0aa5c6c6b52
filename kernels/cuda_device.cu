// Device probing and error reporting for the CUDA backend: every CUDA and
// cuBLAS call is checked and a failure becomes an rc_status naming the call,
// the error, the file and the line.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_cuda.h"
#include "rck.h"

// "cudaMalloc(&p, n)" -> "cudaMalloc", "../kernels/gemm.cu" -> "gemm.cu": one short line
static void short_names(const char **call, int *call_len, const char **file)
{
    const char *paren = strchr(*call, '(');
    *call_len = paren ? (int)(paren - *call) : (int)strlen(*call);
    const char *slash = strrchr(*file, '/');
    if (slash)
        *file = slash + 1;
}

rc_status rck_cuda_fail(cudaError_t e, const char *call, const char *file, int line)
{
    int n;
    short_names(&call, &n, &file);
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        int dev = 0, count = 0; /* several GPUs: which one is full */
        char which[32] = "";
        if (cudaGetDeviceCount(&count) == cudaSuccess && count > 1 && cudaGetDevice(&dev) == cudaSuccess)
            snprintf(which, sizeof which, "GPU %d: ", dev);
        cudaGetLastError();
        cudaError_t e2 = cudaMemGetInfo(&free_b, &total_b);
        if (e2 == cudaSuccess)
            return rc_errorf(RC_ERR_DEVICE, "CUDA backend: too little GPU memory: %.*s failed at %s:%d "
                             "(%s%.1f MiB free of %.1f MiB)", n, call, file, line, which,
                             (double)free_b / 1048576.0, (double)total_b / 1048576.0);
        cudaGetLastError(); /* do not leave the second error behind */
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: too little GPU memory: %.*s failed at %s:%d", n, call, file,
                         line);
    }
    return rc_errorf(RC_ERR_DEVICE, "CUDA backend: %.*s failed: %s (%s) at %s:%d", n, call, cudaGetErrorName(e),
                     cudaGetErrorString(e), file, line);
}

rc_status rck_blas_fail(cublasStatus_t e, const char *call, const char *file, int line)
{
    int n;
    short_names(&call, &n, &file);
    return rc_errorf(RC_ERR_DEVICE, "CUDA backend: %.*s failed: %s (%s) at %s:%d", n, call, cublasGetStatusName(e),
                     cublasGetStatusString(e), file, line);
}

rc_status rck_after_launch(const char *kernel, const char *file, int line)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        const char *v = getenv("RC_CUDA_SYNC");
        if (v && v[0] == '1')
            e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess)
        return rck_cuda_fail(e, kernel, file, line);
    return RC_OK;
}

extern "C" rc_status rc_cuda_error_for_test(int cuda_error, int cublas_status, const char *call, const char *file,
                                            int line)
{
    if (cublas_status)
        return rck_blas_fail((cublasStatus_t)cublas_status, call, file, line);
    return rck_cuda_fail((cudaError_t)cuda_error, call, file, line);
}

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

extern "C" rc_status rc_cuda_mem_info(int dev, size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    int prev = 0;
    RCK_CUDA(cudaGetDevice(&prev));
    RCK_CUDA(cudaSetDevice(dev));
    cudaError_t e = cudaMemGetInfo(free_b, total_b);
    cudaError_t e2 = cudaSetDevice(prev); // the current device as it was
    if (e != cudaSuccess)
        return rck_cuda_fail(e, "cudaMemGetInfo(free_b, total_b)", __FILE__, __LINE__);
    if (e2 != cudaSuccess)
        return rck_cuda_fail(e2, "cudaSetDevice(prev)", __FILE__, __LINE__);
    return RC_OK;
}
