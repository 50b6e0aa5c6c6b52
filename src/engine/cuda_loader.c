/* The CUDA backend, loaded when it is asked for. The kernels are a shared
 * module (kernels/: libratiocheck_cuda.so, linked against the CUDA runtime
 * and cuBLAS); the executable opens it with dlopen only when a run needs the
 * GPU, so a CPU run neither maps cuBLAS (about 0.2 GiB of RSS, 0.07 s of
 * start-up) nor needs the CUDA libraries installed at all. The module finds
 * the core's functions in the executable (linked with -rdynamic) and binds
 * its own calls to itself (-Bsymbolic).
 *
 * Where the module is: $RATIOCHECK_CUDA_MODULE, else next to the executable
 * in the build tree (../kernels/), else the installed path. The module finds
 * the CUDA runtime and cuBLAS through its run path (the toolkit's library
 * folder found at build time, RC_CUDA_LIBDIR), the dynamic linker's cache or
 * LD_LIBRARY_PATH; when one is missing, the error is one line with the
 * dynamic linker's own text and where to look. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rc_build_config.h"
#include "rc_cuda.h"

#define MODULE_NAME "libratiocheck_cuda.so"
#ifndef RC_CUDA_LIBDIR
#define RC_CUDA_LIBDIR ""
#endif

typedef rc_status (*probe_fn)(int *, char *, size_t);
typedef rc_status (*create_fn)(rc_kernels, rc_backend **);
typedef rc_status (*error_fn)(int, int, const char *, const char *, int);
typedef rc_status (*mem_fn)(int, size_t *, size_t *);

static struct {
    void *handle;
    probe_fn probe;
    create_fn create;
    error_fn error;
    mem_fn mem;
} g_mod;

static rc_status load_module(void)
{
    if (g_mod.handle)
        return RC_OK;
    char paths[3][PATH_MAX + 64];
    int n = 0;
    const char *env = getenv("RATIOCHECK_CUDA_MODULE");
    if (env && env[0])
        snprintf(paths[n++], sizeof paths[0], "%s", env);
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(paths[n++], sizeof paths[0], "%s/../kernels/" MODULE_NAME, exe);
        }
    }
    snprintf(paths[n++], sizeof paths[0], "%s", RC_CUDA_MODULE_PATH);
    char why[512] = "";
    for (int i = 0; i < n; i++) {
        if (access(paths[i], R_OK) != 0)
            continue;
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            snprintf(why, sizeof why, "%.500s", e ? e : paths[i]);
            break; /* found but unusable (a CUDA library missing): say so */
        }
        (void)dlerror();
        /* POSIX's way from dlsym's object pointer to a function pointer */
        void *p = dlsym(h, "rc_cuda_probe"), *c = dlsym(h, "rc_backend_cuda_create"),
             *e = dlsym(h, "rc_cuda_error_for_test"), *mi = dlsym(h, "rc_cuda_mem_info");
        memcpy(&g_mod.probe, &p, sizeof p);
        memcpy(&g_mod.create, &c, sizeof c);
        memcpy(&g_mod.error, &e, sizeof e);
        memcpy(&g_mod.mem, &mi, sizeof mi);
        if (!g_mod.probe || !g_mod.create || !g_mod.error || !g_mod.mem) {
            dlclose(h);
            memset(&g_mod, 0, sizeof g_mod);
            return rc_errorf(RC_ERR_DEVICE, "CUDA backend: %s is not ratiocheck's CUDA module", paths[i]);
        }
        g_mod.handle = h;
        return RC_OK;
    }
    if (why[0]) {
        /* dlerror: "MODULE: libcublas.so.13: cannot open shared object file: ..." */
        if (strstr(why, "cannot open shared object file")) {
            const char *lib = why, *colon = strstr(why, ".so: ");
            if (colon)
                lib = colon + 5;
            return rc_errorf(RC_ERR_DEVICE,
                             "CUDA backend: a library of the CUDA module is missing: %s (the module looks in %s, "
                             "the dynamic linker's cache and LD_LIBRARY_PATH: add the CUDA toolkit's lib folder "
                             "to LD_LIBRARY_PATH)",
                             lib, RC_CUDA_LIBDIR[0] ? RC_CUDA_LIBDIR : "no folder of its own");
        }
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: cannot load the CUDA module: %s", why);
    }
    return rc_errorf(RC_ERR_DEVICE, "CUDA backend: the CUDA module " MODULE_NAME
                                    " is not installed (looked next to the executable and in %s; "
                                    "RATIOCHECK_CUDA_MODULE names another)",
                     RC_CUDA_MODULE_PATH);
}

bool rc_cuda_compiled(void) { return true; }

rc_status rc_cuda_probe(int *n_devices, char *name, size_t name_len)
{
    *n_devices = 0;
    if (name_len)
        name[0] = '\0';
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && vis[0] == '\0')
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: CUDA_VISIBLE_DEVICES is empty, so no device is visible");
    /* no driver, no device: answered without loading the CUDA runtime and cuBLAS */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv)
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: no usable NVIDIA driver (libcuda.so.1 cannot be loaded)");
    dlclose(drv);
    RC_TRY(load_module());
    return g_mod.probe(n_devices, name, name_len);
}

rc_status rc_backend_cuda_create(rc_kernels kernels, rc_backend **out)
{
    *out = NULL;
    int n;
    RC_TRY(rc_cuda_probe(&n, NULL, 0));
    return g_mod.create(kernels, out);
}

rc_status rc_cuda_error_for_test(int cuda_error, int cublas_status, const char *call, const char *file, int line)
{
    RC_TRY(load_module());
    return g_mod.error(cuda_error, cublas_status, call, file, line);
}

rc_status rc_cuda_mem_info(int dev, size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    int n;
    RC_TRY(rc_cuda_probe(&n, NULL, 0));
    return g_mod.mem(dev, free_b, total_b);
}
