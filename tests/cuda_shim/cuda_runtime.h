// A host stand-in for the parts of the CUDA runtime the CUDA backend uses,
// so that kernels/*.cu -- the real backend_cuda.cu host code and the real
// kernels -- compile with g++ and run on the CPU in the `cuda_host` test
// suite (tests/test_cuda.c). Not a CUDA emulator: memory is host memory,
// a kernel launch runs every (block, thread) of the grid in turn, and copies
// are memcpy. Faults can be injected (shim_control.h) to exercise the
// backend's error paths. Only compiled into tests.
#ifndef RC_CUDA_SHIM_RUNTIME_H
#define RC_CUDA_SHIM_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_control.h"

#define CUDART_VERSION 13000
#define __global__
#define __host__
#define __device__

typedef enum {
    cudaSuccess = 0,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum { CUDA_R_16F = 2, CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;

typedef struct {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
} cudaDeviceProp;

struct rck_shim_uint3 {
    unsigned x, y, z;
};
static rck_shim_uint3 blockIdx, threadIdx, blockDim, gridDim;

struct rck_shim_state {
    cudaError_t last = cudaSuccess;
    size_t in_use = 0;
};
static rck_shim_state g_shim;

static const size_t k_shim_total = (size_t)1 << 34; // "16 GiB"

static inline size_t shim_budget()
{
    long long b = rck_shim_get(RCK_SHIM_MEMORY_BYTES);
    return b > 0 ? (size_t)b : k_shim_total;
}

static inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 0;
    if (rck_shim_get(RCK_SHIM_NO_DRIVER))
        return cudaErrorInsufficientDriver;
    if (rck_shim_get(RCK_SHIM_NO_DEVICE))
        return cudaErrorNoDevice;
    *n = 1;
    return cudaSuccess;
}

static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    (void)dev;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "host emulation");
    p->totalGlobalMem = shim_budget();
    return cudaSuccess;
}

static inline cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorNoDevice; }

// allocations carry their size in front, for the memory accounting
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    *p = nullptr;
    if (g_shim.in_use + bytes > shim_budget())
        return cudaErrorMemoryAllocation;
    void *raw = nullptr;
    if (posix_memalign(&raw, 256, 256 + bytes) != 0)
        return cudaErrorMemoryAllocation;
    *(size_t *)raw = bytes;
    g_shim.in_use += bytes;
    *p = (T *)((char *)raw + 256);
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void *p)
{
    if (p) {
        char *raw = (char *)p - 256;
        g_shim.in_use -= *(size_t *)raw;
        free(raw);
    }
    return cudaSuccess;
}

static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    (void)kind;
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *total_b = shim_budget();
    *free_b = *total_b - g_shim.in_use;
    return cudaSuccess;
}

static inline cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_shim.last;
    g_shim.last = cudaSuccess;
    return e;
}

static inline cudaError_t cudaDeviceSynchronize(void)
{
    return rck_shim_get(RCK_SHIM_FAIL_SYNC) ? cudaErrorIllegalAddress : cudaSuccess;
}

static inline const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return cudaGetErrorName(e);
    }
}

// kernel<<<grid, block>>>(args, n) on the host: every thread of the grid in turn
template <typename A> static inline void rck_shim_launch(void (*k)(A, int64_t), unsigned grid, unsigned block,
                                                         const A &a, int64_t n)
{
    gridDim = rck_shim_uint3{grid, 1, 1};
    blockDim = rck_shim_uint3{block, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        blockIdx = rck_shim_uint3{b, 0, 0};
        for (unsigned t = 0; t < block; t++) {
            threadIdx = rck_shim_uint3{t, 0, 0};
            k(a, n);
        }
    }
    rck_shim_count(RCK_SHIM_LAUNCHES);
    if (rck_shim_get(RCK_SHIM_FAIL_LAUNCH) && rck_shim_get(RCK_SHIM_LAUNCHES) >= rck_shim_get(RCK_SHIM_FAIL_LAUNCH))
        g_shim.last = cudaErrorLaunchFailure;
}

#endif
