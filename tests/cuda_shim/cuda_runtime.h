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
//  - several devices (RCK_SHIM_DEVICES): each allocation belongs to the
//    device current at its cudaMalloc, with its own memory budget and
//    counters; a kernel's pointers, both device sides of cudaMemcpy and a
//    cuBLAS call's matrices must be memory of the current device (stricter than
//    CUDA with unified addressing, which would let a kernel read another
//    device's memory through the bus): a pointer of another device is one
//    line naming both devices, counted and failed as above. Data moves between
//    devices only by cudaMemcpyPeer.
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
    cudaErrorInvalidDevice = 101,
    cudaErrorIllegalAddress = 700,
    cudaErrorPeerAccessAlreadyEnabled = 704,
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

struct rck_shim_alloc {
    size_t bytes;
    int dev;
};

struct rck_shim_state {
    cudaError_t last = cudaSuccess;
    size_t in_use = 0;                      // all devices
    size_t dev_use[RCK_SHIM_MAX_DEVICES] = {}, dev_peak[RCK_SHIM_MAX_DEVICES] = {};
    int cur = 0;                            // cudaSetDevice's device
    std::map<uintptr_t, rck_shim_alloc> live; // device allocations: start -> bytes, device
    unsigned long long launches = 0;  // every launch, for the shuffle's seeds
};
static rck_shim_state g_shim;

// the device of the live allocation holding [p, p + bytes) (a pointer one past the end with bytes 0 too), or -1
static inline int rck_shim_device_of(const void *p, size_t bytes = 0)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = g_shim.live.upper_bound(a);
    if (it == g_shim.live.begin())
        return -1;
    --it;
    const size_t off = a - it->first;
    return off <= it->second.bytes && bytes <= it->second.bytes - off ? it->second.dev : -1;
}

// [p, p + bytes) inside one live device allocation, of any device
static inline bool rck_shim_is_device(const void *p, size_t bytes = 0) { return rck_shim_device_of(p, bytes) >= 0; }

// RCK_SHIM_DEVICES, or where that is 0 the environment's RCK_SHIM_DEVICES (the CLI over the host build)
static inline int rck_shim_n_devices(void)
{
    long long n = rck_shim_get(RCK_SHIM_DEVICES);
    const char *env = getenv("RCK_SHIM_DEVICES");
    if (n == 0 && env)
        n = atoll(env);
    return n < 1 ? 1 : n > RCK_SHIM_MAX_DEVICES ? RCK_SHIM_MAX_DEVICES : (int)n;
}

static inline void rck_shim_wrong_device(const char *call, const char *what, const void *p, int dev)
{
    fprintf(stderr, "cuda shim: %s: %s %p is memory of device %d; the call runs on device %d\n", call, what, p, dev,
            g_shim.cur);
    rck_shim_count(RCK_SHIM_BAD_POINTERS);
}

// [p, p + bytes) is device memory of the current device: else one line (not device memory, or another device's)
static inline bool rck_shim_check_current(const char *call, const char *what, const void *p, size_t bytes);

static inline void rck_shim_bad(const char *call, const char *what, const void *p, size_t bytes)
{
    fprintf(stderr, "cuda shim: %s: %s %p (%zu bytes) is not inside a live device allocation\n", call, what, p,
            bytes);
    rck_shim_count(RCK_SHIM_BAD_POINTERS);
}

static const size_t k_shim_total = (size_t)1 << 34; // "16 GiB"

// device dev's memory: RCK_SHIM_MEMORY_BYTES where set (for every device, or RCK_SHIM_MEMORY_DEVICE's only), else
// the environment's RCK_SHIM_MEMORY (the CLI over the host build: bytes per device, comma-separated, the last one
// for the devices after it), else 16 GiB
static inline size_t shim_budget(int dev)
{
    long long b = rck_shim_get(RCK_SHIM_MEMORY_BYTES), only = rck_shim_get(RCK_SHIM_MEMORY_DEVICE);
    if (b > 0)
        return only == 0 || only == dev + 1 ? (size_t)b : k_shim_total;
    const char *env = getenv("RCK_SHIM_MEMORY");
    long long v = 0;
    for (int d = 0; env && *env && d <= dev; d++) {
        char *end = nullptr;
        const long long x = strtoll(env, &end, 10);
        if (end == env)
            break;
        v = x;
        env = *end == ',' ? end + 1 : end;
        if (*end != ',')
            break;
    }
    return v > 0 ? (size_t)v : k_shim_total;
}

static inline bool rck_shim_check_current(const char *call, const char *what, const void *p, size_t bytes)
{
    const int dev = rck_shim_device_of(p, bytes);
    if (dev < 0) {
        rck_shim_bad(call, what, p, bytes);
        return false;
    }
    if (dev != g_shim.cur) {
        rck_shim_wrong_device(call, what, p, dev);
        return false;
    }
    return true;
}

static inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 0;
    if (rck_shim_get(RCK_SHIM_NO_DRIVER))
        return cudaErrorInsufficientDriver;
    if (rck_shim_get(RCK_SHIM_NO_DEVICE))
        return cudaErrorNoDevice;
    *n = rck_shim_n_devices();
    return cudaSuccess;
}

static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= rck_shim_n_devices())
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "host emulation");
    p->totalGlobalMem = shim_budget(dev);
    return cudaSuccess;
}

static inline cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= rck_shim_n_devices())
        return cudaErrorInvalidDevice;
    g_shim.cur = dev;
    return cudaSuccess;
}

static inline cudaError_t cudaGetDevice(int *dev)
{
    *dev = g_shim.cur;
    return cudaSuccess;
}

// allocations carry their size in front, for the memory accounting
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    *p = nullptr;
    const int dev = g_shim.cur;
    if (g_shim.dev_use[dev] + bytes > shim_budget(dev))
        return cudaErrorMemoryAllocation;
    void *raw = nullptr;
    if (posix_memalign(&raw, 256, 256 + bytes) != 0)
        return cudaErrorMemoryAllocation;
    *(size_t *)raw = bytes;
    g_shim.in_use += bytes;
    g_shim.dev_use[dev] += bytes;
    if (g_shim.dev_use[dev] > g_shim.dev_peak[dev])
        g_shim.dev_peak[dev] = g_shim.dev_use[dev];
    rck_shim_count(RCK_SHIM_ALLOCS);
    rck_shim_set(RCK_SHIM_ALLOC_BYTES, (long long)g_shim.in_use);
    if ((long long)g_shim.in_use > rck_shim_get(RCK_SHIM_ALLOC_PEAK))
        rck_shim_set(RCK_SHIM_ALLOC_PEAK, (long long)g_shim.in_use);
    *p = (T *)((char *)raw + 256);
    memset((char *)raw + 256, 0xFF, bytes); // poison: NaN in every float type, -1 in every int
    g_shim.live[(uintptr_t)*p] = rck_shim_alloc{bytes, dev};
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
        g_shim.dev_use[it->second.dev] -= it->second.bytes;
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
    // device memory: the current device's only (between devices: cudaMemcpyPeer)
    if (ok && dst_dev && rck_shim_device_of(dst, bytes) != g_shim.cur) {
        rck_shim_wrong_device("cudaMemcpy", "destination", dst, rck_shim_device_of(dst, bytes));
        ok = false;
    }
    if (ok && src_dev && rck_shim_device_of(src, bytes) != g_shim.cur) {
        rck_shim_wrong_device("cudaMemcpy", "source", src, rck_shim_device_of(src, bytes));
        ok = false;
    }
    if (!ok)
        return cudaErrorInvalidValue;
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

// peer access: every pair of distinct fake devices can; enabling it twice is CUDA's error (it changes nothing
// here: cudaMemcpyPeer copies either way)
static bool g_shim_peer[RCK_SHIM_MAX_DEVICES][RCK_SHIM_MAX_DEVICES];

static inline cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
    const int n = rck_shim_n_devices();
    if (dev < 0 || dev >= n || peer < 0 || peer >= n)
        return cudaErrorInvalidDevice;
    *can = dev != peer;
    return cudaSuccess;
}

static inline cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
    if (peer < 0 || peer >= rck_shim_n_devices() || peer == g_shim.cur || flags != 0)
        return cudaErrorInvalidDevice;
    if (g_shim_peer[g_shim.cur][peer])
        return g_shim.last = cudaErrorPeerAccessAlreadyEnabled;
    g_shim_peer[g_shim.cur][peer] = true;
    return cudaSuccess;
}

// bytes from device src_dev's memory to device dst_dev's (each side inside a live allocation of its device)
static inline cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes)
{
    const int n = rck_shim_n_devices();
    if (dst_dev < 0 || dst_dev >= n || src_dev < 0 || src_dev >= n)
        return cudaErrorInvalidDevice;
    bool ok = true;
    const int dd = rck_shim_device_of(dst, bytes), sd = rck_shim_device_of(src, bytes);
    if (dd != dst_dev) {
        if (dd < 0)
            rck_shim_bad("cudaMemcpyPeer", "destination", dst, bytes);
        else
            fprintf(stderr, "cuda shim: cudaMemcpyPeer: destination %p is memory of device %d, not %d\n", dst, dd,
                    dst_dev), rck_shim_count(RCK_SHIM_BAD_POINTERS);
        ok = false;
    }
    if (sd != src_dev) {
        if (sd < 0)
            rck_shim_bad("cudaMemcpyPeer", "source", src, bytes);
        else
            fprintf(stderr, "cuda shim: cudaMemcpyPeer: source %p is memory of device %d, not %d\n", src, sd, src_dev),
                rck_shim_count(RCK_SHIM_BAD_POINTERS);
        ok = false;
    }
    if (!ok || rck_shim_get(RCK_SHIM_FAIL_PEER))
        return cudaErrorInvalidValue;
    if (bytes)
        memmove(dst, src, bytes);
    rck_shim_count(RCK_SHIM_PEER_COPIES);
    return cudaSuccess;
}

static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *total_b = shim_budget(g_shim.cur);
    *free_b = *total_b - g_shim.dev_use[g_shim.cur];
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
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
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
        if (p && !rck_shim_check_current(kname, field, p, 0))
            ok = false;
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
