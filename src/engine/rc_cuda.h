/* The CUDA side as seen from C (kernels/). Built only with the meson `cuda`
 * feature; otherwise src/engine/cuda_stub.c answers that CUDA is not compiled
 * in. The executable reaches the kernels through src/engine/cuda_loader.c,
 * which opens them as a module (kernels/libratiocheck_cuda.so) on first use;
 * tests and tools link them directly. */
#ifndef RC_CUDA_H
#define RC_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Is a usable CUDA device there? RC_OK with the device count and the first
 * device's name, or RC_ERR_DEVICE with the reason (not compiled in, no
 * driver, driver too old, no device, CUDA_VISIBLE_DEVICES empty). */
rc_status rc_cuda_probe(int *n_devices, char *name, size_t name_len);

/* Was this ratiocheck built with the CUDA backend? */
bool rc_cuda_compiled(void);

/* The CUDA backend on device 0 with the given kernel strategy (engine:
 * cuBLAS GEMMs; invariant: fixed-order kernels; blas is CPU-only and
 * refused). RC_ERR_DEVICE with the reason when no device is usable. */
rc_status rc_backend_cuda_create(rc_kernels kernels, rc_backend **out);

/* Device dev's free and total memory in bytes (cudaMemGetInfo on it; the current device is left as it
 * was): what the run's automatic GPU count compares the estimate with. */
rc_status rc_cuda_mem_info(int dev, size_t *free_b, size_t *total_b);

/* The message the backend gives for a failed CUDA call (cuda_error, when
 * cublas_status is 0) or cuBLAS call (cublas_status): lets the CPU test suite
 * check the error path without a device. */
rc_status rc_cuda_error_for_test(int cuda_error, int cublas_status, const char *call, const char *file, int line);

#ifdef __cplusplus
}
#endif

#endif
