/* rc_cuda_probe when ratiocheck is built without the CUDA feature. */
#include "rc_cuda.h"

rc_status rc_cuda_probe(int *n_devices, char *name, size_t name_len)
{
    *n_devices = 0;
    if (name_len)
        name[0] = '\0';
    return rc_errorf(RC_ERR_DEVICE, "CUDA backend: this ratiocheck was built without CUDA (meson -Dcuda=enabled needs nvcc and cuBLAS)");
}

bool rc_cuda_compiled(void) { return false; }

rc_status rc_backend_cuda_create(rc_kernels kernels, rc_backend **out)
{
    (void)kernels;
    *out = NULL;
    int n;
    return rc_cuda_probe(&n, NULL, 0);
}

rc_status rc_cuda_error_for_test(int cuda_error, int cublas_status, const char *call, const char *file, int line)
{
    (void)cuda_error;
    (void)cublas_status;
    return rc_errorf(RC_ERR_DEVICE, "CUDA backend: %s failed at %s:%d (built without CUDA)", call, file, line);
}

rc_status rc_cuda_mem_info(int dev, size_t *free_b, size_t *total_b)
{
    (void)dev;
    *free_b = *total_b = 0;
    int n;
    return rc_cuda_probe(&n, NULL, 0);
}
