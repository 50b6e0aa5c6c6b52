/* rc_cuda_probe when ratiocheck is built without the CUDA feature. */
#include "rc_cuda.h"

rc_status rc_cuda_probe(int *n_devices, char *name, size_t name_len)
{
    *n_devices = 0;
    if (name_len)
        name[0] = '\0';
    return rc_errorf(RC_ERR_DEVICE, "CUDA backend: this ratiocheck was built without CUDA (meson -Dcuda=enabled needs nvcc and cuBLAS)");
}
