// The CUDA backend's sources (kernels/) compiled for the host against the
// stand-ins in this folder: the `cuda_host` test suite runs the real
// backend_cuda.cu host code and the real kernels on the CPU.
#include "cuda_runtime.h"
#include "cublas_v2.h"
#include "shim_control.h"
#include "shim_ptrs.h"

static long long g_shim_values[RCK_SHIM_N];

extern "C" void rck_shim_set(rck_shim_key k, long long v) { g_shim_values[k] = v; }
extern "C" long long rck_shim_get(rck_shim_key k) { return g_shim_values[k]; }
extern "C" void rck_shim_count(rck_shim_key k) { g_shim_values[k]++; }
extern "C" void rck_shim_reset(void)
{
    for (int i = 0; i < RCK_SHIM_N; i++)
        g_shim_values[i] = 0;
    g_shim_values[RCK_SHIM_ALLOC_BYTES] = g_shim_values[RCK_SHIM_ALLOC_PEAK] = (long long)g_shim.in_use;
    g_shim.last = cudaSuccess;
}

#include "../../kernels/cuda_device.cu"
#include "../../kernels/elementwise.cu"
#include "../../kernels/norm.cu"
#include "../../kernels/rope.cu"
#include "../../kernels/attention.cu"
#include "../../kernels/logprobs.cu"
#include "../../kernels/gemm.cu"
#include "../../kernels/fp8.cu"
#include "../../kernels/moe.cu"
#include "../../kernels/gdn.cu"
#include "../../kernels/backend_cuda.cu"
