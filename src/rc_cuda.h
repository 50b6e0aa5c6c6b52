/* The CUDA side as seen from C (kernels/). Built only with the meson `cuda`
 * feature; otherwise src/cuda_stub.c answers that CUDA is not compiled in. */
#ifndef RC_CUDA_H
#define RC_CUDA_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Is a usable CUDA device there? RC_OK with the device count and the first
 * device's name, or RC_ERR_DEVICE with the reason (not compiled in, no
 * driver, driver too old, no device, CUDA_VISIBLE_DEVICES empty). */
rc_status rc_cuda_probe(int *n_devices, char *name, size_t name_len);

#ifdef __cplusplus
}
#endif

#endif
