// A host stand-in for the parts of the CUDA runtime the CUDA backend uses,
// so that kernels/*.cu -- the real backend_cuda.cu host code and the real
// kernels -- compile with g++ and run on the CPU in the `cuda_host` test
// suite (tests/test_cuda.c). Not a CUDA emulator: memory is host memory,
// a kernel launch runs every (block, thread) of the grid, and copies are
// memcpy. Faults can be injected (shim_control.h) to exercise the backend's
// error paths. Only compiled into tests.
//
// What only a GPU would otherwise show, it makes visible on the host:
//  - device memory is poisoned at allocation (every byte 0xFF: fp32, bf16 and
//    fp16 NaN, int -1), so a kernel that reads what nobody wrote spreads NaN;
//  - blocks, and the threads of each block, run in a shuffled order (a fixed
//    pseudo-random permutation per launch; RCK_SHIM_ORDER=forward|reverse|
//    shuffle in the environment), so a kernel that depends on the order of
//    its threads gives other results than its CPU twin;
//  - every pointer handed to a kernel (shim_ptrs.h lists each argument
//    struct's pointers: a new kernel's struct must be listed there, or the
//    host build does not compile), to cudaMemcpy (with its byte range) and to
//    cublasGemmEx (with the matrices' extents) must lie in a live device
//    allocation, and cudaFree takes only what cudaMalloc returned: anything
//    else (a host pointer) is one line on stderr naming the call, counted in
//    RCK_SHIM_BAD_POINTERS, and the call fails (the kernel does not run; its
//    launch reports cudaErrorIllegalAddress).
#ifndef RC_CUDA_SHIM_RUNTIME_H
#define RC_CUDA_SHIM_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>

#include "shim_control.h"

#define CUDART_VERSION 13000
#define __global__
#define __host__
#define __device__

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
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
    std::map<uintptr_t, size_t> live; // device allocations: start -> bytes
    unsigned long long launches = 0;  // every launch, for the shuffle's seeds
};
static rck_shim_state g_shim;

// [p, p + bytes) inside one live device allocation (a pointer one past the end with bytes 0 too)
static inline bool rck_shim_is_device(const void *p, size_t bytes = 0)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = g_shim.live.upper_bound(a);
    if (it == g_shim.live.begin())
        return false;
    --it;
    const size_t off = a - it->first;
    return off <= it->second && bytes <= it->second - off;
}

static inline void rck_shim_bad(const char *call, const char *what, const void *p, size_t bytes)
{
    fprintf(stderr, "cuda shim: %s: %s %p (%zu bytes) is not inside a live device allocation\n", call, what, p,
            bytes);
    rck_shim_count(RCK_SHIM_BAD_POINTERS);
}

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
    rck_shim_count(RCK_SHIM_ALLOCS);
    rck_shim_set(RCK_SHIM_ALLOC_BYTES, (long long)g_shim.in_use);
    if ((long long)g_shim.in_use > rck_shim_get(RCK_SHIM_ALLOC_PEAK))
        rck_shim_set(RCK_SHIM_ALLOC_PEAK, (long long)g_shim.in_use);
    *p = (T *)((char *)raw + 256);
    memset((char *)raw + 256, 0xFF, bytes); // poison: NaN in every float type, -1 in every int
    g_shim.live[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void *p)
{
    if (p) {
        auto it = g_shim.live.find((uintptr_t)p);
        if (it == g_shim.live.end()) {
            rck_shim_bad("cudaFree", "pointer", p, 0);
            return cudaErrorInvalidValue;
        }
        g_shim.live.erase(it);
        char *raw = (char *)p - 256;
        g_shim.in_use -= *(size_t *)raw;
        rck_shim_set(RCK_SHIM_ALLOC_BYTES, (long long)g_shim.in_use);
        free(raw);
    }
    return cudaSuccess;
}

static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    // each side must be what the kind says: device memory over the whole range, or not device memory
    const bool dst_dev = rck_shim_is_device(dst, bytes), src_dev = rck_shim_is_device(src, bytes);
    const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    bool ok = true;
    if (kind != cudaMemcpyDefault) {
        if (dst_dev != want_dst && (want_dst || rck_shim_is_device(dst))) {
            rck_shim_bad("cudaMemcpy", want_dst ? "destination" : "host destination (device memory)", dst, bytes);
            ok = false;
        }
        if (src_dev != want_src && (want_src || rck_shim_is_device(src))) {
            rck_shim_bad("cudaMemcpy", want_src ? "source" : "host source (device memory)", src, bytes);
            ok = false;
        }
    }
    if (!ok)
        return cudaErrorInvalidValue;
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
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
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
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return cudaGetErrorName(e);
    }
}

// The order of a launch's blocks (and of each block's threads): 0 forward,
// 1 reverse, 2 shuffled (default), from RCK_SHIM_ORDER
static inline int rck_shim_order(void)
{
    static int order = -1;
    if (order < 0) {
        const char *v = getenv("RCK_SHIM_ORDER");
        order = v && !strcmp(v, "forward") ? 0 : v && !strcmp(v, "reverse") ? 1 : 2;
    }
    return order;
}

static inline uint64_t rck_shim_mix(uint64_t x) // splitmix64's finaliser
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline uint64_t rck_shim_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// a permutation of 0..n-1: i -> (mul i + add) mod n with mul coprime to n
struct rck_shim_perm {
    uint64_t n, mul, add;
    rck_shim_perm(uint64_t n_, uint64_t seed, int order) : n(n_), mul(1), add(0)
    {
        if (order == 1) {
            mul = n - 1; // with add n - 1: i -> n - 1 - i
            add = n - 1;
        } else if (order == 2 && n > 1) {
            mul = rck_shim_mix(seed) % n | 1;
            while (rck_shim_gcd(mul, n) != 1)
                mul += 2;
            add = rck_shim_mix(seed + 1) % n;
        }
    }
    unsigned operator()(uint64_t i) const { return (unsigned)((mul % n * i + add) % n); }
};

// kernel<<<grid, block>>>(args, n) on the host: every thread of the grid, in the order above,
// after checking every pointer in the arguments (shim_ptrs.h) against the live allocations
template <typename A>
static inline void rck_shim_launch(void (*k)(A, int64_t), const char *kname, unsigned grid, unsigned block,
                                   const A &a, int64_t n)
{
    bool ok = true;
    rck_shim_ptrs(a, [&](const void *p, const char *field) {
        if (p && !rck_shim_is_device(p)) {
            rck_shim_bad(kname, field, p, 0);
            ok = false;
        }
    });
    rck_shim_count(RCK_SHIM_LAUNCHES);
    const uint64_t launch = g_shim.launches++;
    if (!ok) {
        g_shim.last = cudaErrorIllegalAddress;
        return;
    }
    gridDim = rck_shim_uint3{grid, 1, 1};
    blockDim = rck_shim_uint3{block, 1, 1};
    const int order = rck_shim_order();
    const rck_shim_perm blocks(grid, launch * 2, order);
    for (unsigned bi = 0; bi < grid; bi++) {
        const unsigned b = blocks(bi);
        blockIdx = rck_shim_uint3{b, 0, 0};
        const rck_shim_perm threads(block, launch * 2 + 1 + ((uint64_t)b << 32), order);
        for (unsigned ti = 0; ti < block; ti++) {
            threadIdx = rck_shim_uint3{threads(ti), 0, 0};
            k(a, n);
        }
    }
    if (rck_shim_get(RCK_SHIM_FAIL_LAUNCH) && rck_shim_get(RCK_SHIM_LAUNCHES) >= rck_shim_get(RCK_SHIM_FAIL_LAUNCH))
        g_shim.last = cudaErrorLaunchFailure;
}

#endif
