/* test_cuda_errors.c: test_cuda's error paths and shape logic, no GPU needed (test_cuda.c holds
 * the helpers and the suite; tests/meson.build builds both files twice). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "fp8w.h"
#include "model.h"
#include "prompts.h"
#include "rc_cuda.h"
#include "rck_threads.h"
#ifdef RC_TEST_EMULATE
#include "shim_control.h"
#endif
#include "results.h"
#include "rollout.h"
#include "safetensors.h"
#include "util.h"

#include "fixtures.h"
#include "testutil.h"

#include "test_cuda.h"

/* ---- error paths and shape logic (no GPU needed) ------------------------------ */

START_TEST(test_error_messages)
{
    if (!rc_cuda_compiled()) {
        rc_status s = rc_cuda_error_for_test(2, 0, "cudaMalloc(&p, n)", "x.cu", 7);
        ck_assert(s == RC_ERR_DEVICE);
        printf("%-10s built without CUDA: %s\n", TEST_NAME, rc_last_error());
        return;
    }
    /* cudaErrorMemoryAllocation = 2: "too little GPU memory", call, file, line */
    ck_assert(rc_cuda_error_for_test(2, 0, "cudaMalloc(&p, bytes)", "../kernels/backend_cuda.cu", 123) == RC_ERR_DEVICE);
    const char *msg = rc_last_error();
    printf("%-10s %s\n", TEST_NAME, msg);
    ck_assert_msg(strstr(msg, "too little GPU memory") && strstr(msg, "cudaMalloc failed") &&
                      strstr(msg, "backend_cuda.cu:123"), "%s", msg);
    /* cudaErrorIllegalAddress = 700: the error's name and text */
    ck_assert(rc_cuda_error_for_test(700, 0, "k_attn", "attention.cu", 19) == RC_ERR_DEVICE);
    msg = rc_last_error();
    printf("%-10s %s\n", TEST_NAME, msg);
    ck_assert_msg(strstr(msg, "cudaErrorIllegalAddress") && strstr(msg, "k_attn") && strstr(msg, "attention.cu:19"),
                  "%s", msg);
    ck_assert(strchr(msg, '\n') == NULL);
    /* CUBLAS_STATUS_NOT_SUPPORTED = 15 */
    ck_assert(rc_cuda_error_for_test(0, 15, "cublasGemmEx(...)", "gemm.cu", 30) == RC_ERR_DEVICE);
    msg = rc_last_error();
    printf("%-10s %s\n", TEST_NAME, msg);
    ck_assert_msg(strstr(msg, "cublasGemmEx failed: CUBLAS_STATUS_NOT_SUPPORTED") && strstr(msg, " gemm.cu:30"), "%s",
                  msg);
}
END_TEST

START_TEST(test_create_without_device)
{
    rc_backend *be = NULL;
    int n;
    char name[256];
    if (rc_cuda_probe(&n, name, sizeof name) == RC_OK) {
        printf("%-10s device present (%s): the no-device path is not testable here\n", TEST_NAME, name);
    } else {
        rc_status s = rc_backend_cuda_create(RC_KERNELS_ENGINE, &be);
        printf("%-10s no device: %s\n", TEST_NAME, rc_last_error());
        ck_assert(s == RC_ERR_DEVICE && be == NULL);
        ck_assert(strstr(rc_last_error(), "CUDA") != NULL);
    }
    /* an empty CUDA_VISIBLE_DEVICES is named as the reason */
    char *old = getenv("CUDA_VISIBLE_DEVICES") ? strdup(getenv("CUDA_VISIBLE_DEVICES")) : NULL;
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ck_assert(rc_backend_cuda_create(RC_KERNELS_INVARIANT, &be) == RC_ERR_DEVICE);
    if (rc_cuda_compiled())
        ck_assert_msg(strstr(rc_last_error(), "CUDA_VISIBLE_DEVICES") != NULL, "%s", rc_last_error());
    if (old) {
        setenv("CUDA_VISIBLE_DEVICES", old, 1);
        free(old);
    } else {
        unsetenv("CUDA_VISIBLE_DEVICES");
    }
}
END_TEST

#ifdef RC_TEST_EMULATE
/* Error paths of the real backend code, with faults injected into the CUDA
 * and cuBLAS stand-ins. Each failure is RC_ERR_DEVICE with one line naming
 * the failing call, file and line; nothing crashes and everything frees. */
static rc_status forward_fixture(rc_kernels k, rc_dtype dt, unsigned upcast)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/neox_parallel");
    rc_model *m;
    ck_assert(rc_model_load(dir, &m) == RC_OK);
    rc_backend *be = NULL;
    rc_status s = rc_backend_cuda_create(k, &be);
    rc_engine *e = NULL;
    rc_numerics num = rc_numerics_fp32();
    num.dt = dt;
    num.upcast = upcast;
    if (s == RC_OK)
        s = rc_engine_create(m, be, &num, 2, 16, 32, &e);
    int32_t tok[12] = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
    int64_t lens[2] = {7, 5};
    float *out = malloc(sizeof(float) * 12 * m->cfg.vocab);
    if (s == RC_OK)
        s = rc_full_forward(e, tok, lens, 2, out);
    free(out);
    rc_engine_free(e);
    rc_backend_destroy(be);
    rc_model_free(m);
    return s;
}

static void expect_device_error(rc_status s, const char *const *phrases)
{
    const char *msg = rc_last_error();
    printf("%-10s injected: %s\n", TEST_NAME, msg);
    ck_assert_int_eq(s, RC_ERR_DEVICE);
    ck_assert(strchr(msg, '\n') == NULL);
    for (; *phrases; phrases++)
        ck_assert_msg(strstr(msg, *phrases) != NULL, "'%s' lacks '%s'", msg, *phrases);
}

START_TEST(test_injected_faults)
{
    rck_shim_reset();
    ck_assert_int_eq(forward_fixture(RC_KERNELS_ENGINE, RC_BF16, 0), RC_OK);
    /* the dtype route to cuBLAS: bf16 weights and activations go as bf16 */
    long long gemms = rck_shim_get(RCK_SHIM_GEMMS), half = rck_shim_get(RCK_SHIM_HALF_GEMMS);
    printf("%-10s engine bf16 forward: %lld cuBLAS GEMMs, %lld with bf16 operands\n", TEST_NAME, gemms, half);
    ck_assert(gemms > 0 && half == gemms);
    /* --upcast lm_head: the LM head alone is an fp32 GEMM */
    rck_shim_reset();
    ck_assert_int_eq(forward_fixture(RC_KERNELS_ENGINE, RC_BF16, RC_UPCAST_LM_HEAD), RC_OK);
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_GEMMS) - rck_shim_get(RCK_SHIM_HALF_GEMMS), 1);
    /* --upcast norm: GEMMs fed by a norm get fp32 operands (o-proj and down stay bf16) */
    rck_shim_reset();
    ck_assert_int_eq(forward_fixture(RC_KERNELS_ENGINE, RC_BF16, RC_UPCAST_NORM), RC_OK);
    ck_assert(rck_shim_get(RCK_SHIM_HALF_GEMMS) > 0 && rck_shim_get(RCK_SHIM_HALF_GEMMS) < rck_shim_get(RCK_SHIM_GEMMS));
    /* fp32: fp32 GEMMs; invariant: no cuBLAS at all */
    rck_shim_reset();
    ck_assert_int_eq(forward_fixture(RC_KERNELS_ENGINE, RC_F32, 0), RC_OK);
    ck_assert(rck_shim_get(RCK_SHIM_GEMMS) > 0 && rck_shim_get(RCK_SHIM_HALF_GEMMS) == 0);
    rck_shim_reset();
    ck_assert_int_eq(forward_fixture(RC_KERNELS_INVARIANT, RC_BF16, 0), RC_OK);
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_GEMMS), 0);

    /* too little device memory for the weights */
    rck_shim_reset();
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, 64 << 10);
    expect_device_error(forward_fixture(RC_KERNELS_ENGINE, RC_BF16, 0),
                        (const char *const[]){"too little GPU memory: cudaMalloc failed at backend_cuda.cu:", "MiB free", NULL});
    /* a kernel fails (the 40th launch) */
    rck_shim_reset();
    rck_shim_set(RCK_SHIM_FAIL_LAUNCH, 40);
    expect_device_error(forward_fixture(RC_KERNELS_ENGINE, RC_F32, 0),
                        (const char *const[]){"failed: cudaErrorLaunchFailure", ".cu:", NULL});
    ck_assert(strstr(rc_last_error(), "k_") != NULL); /* the kernel's name */
    /* cuBLAS fails */
    rck_shim_reset();
    rck_shim_set(RCK_SHIM_FAIL_GEMM, 1);
    expect_device_error(forward_fixture(RC_KERNELS_ENGINE, RC_BF16, 0),
                        (const char *const[]){"cublasGemmEx failed: CUBLAS_STATUS_EXECUTION_FAILED", " gemm.cu:", NULL});
    /* RC_CUDA_SYNC=1: an asynchronous fault is charged to the kernel that ran */
    rck_shim_reset();
    setenv("RC_CUDA_SYNC", "1", 1);
    rck_shim_set(RCK_SHIM_FAIL_SYNC, 1);
    expect_device_error(forward_fixture(RC_KERNELS_INVARIANT, RC_F32, 0),
                        (const char *const[]){"k_", "cudaErrorIllegalAddress", ".cu:", NULL});
    unsetenv("RC_CUDA_SYNC");
    /* no driver, no device */
    rck_shim_reset();
    rck_shim_set(RCK_SHIM_NO_DRIVER, 1);
    expect_device_error(forward_fixture(RC_KERNELS_ENGINE, RC_F32, 0), (const char *const[]){"no usable NVIDIA driver", NULL});
    rck_shim_reset();
    rck_shim_set(RCK_SHIM_NO_DEVICE, 1);
    expect_device_error(forward_fixture(RC_KERNELS_ENGINE, RC_F32, 0), (const char *const[]){"no CUDA device found", NULL});
    rck_shim_reset();
    /* blas is CPU-only */
    rc_backend *be = NULL;
    ck_assert_int_eq(rc_backend_cuda_create(RC_KERNELS_BLAS, &be), RC_ERR_USAGE);
    ck_assert(be == NULL);
}
END_TEST
#endif

#ifdef RC_TEST_EMULATE
/* The host stand-in's own checks (tests/cuda_shim/cuda_runtime.h), which the
 * other host-build tests rely on: fresh device memory is NaN, a host pointer
 * handed to a kernel or to a copy as device memory is refused, counted and
 * reported in one line, and the same calls on device memory compute. */
START_TEST(test_shim_checks)
{
    rck_shim_reset();
    rc_backend *be = NULL;
    ck_assert_int_eq(rc_backend_cuda_create(RC_KERNELS_ENGINE, &be), RC_OK);
    float *d = NULL, host[64], back[64];
    for (int i = 0; i < 64; i++)
        host[i] = (float)i;
    ck_assert_int_eq(be->ops->alloc(be, 64, &d), RC_OK);
    ck_assert_int_eq(be->ops->download(be, d, 64, back), RC_OK);
    for (int i = 0; i < 64; i++)
        ck_assert_msg(isnan(back[i]), "device memory not poisoned at %d: %g", i, (double)back[i]);
    /* a host pointer to a kernel (the add's first operand) */
    expect_device_error(be->ops->add(be, host, d, 64, RC_F32, d),
                        (const char *const[]){"k_ew failed: cudaErrorIllegalAddress", NULL});
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 1);
    /* host memory as a copy's device destination, and a copy past an allocation's end */
    expect_device_error(be->ops->upload(be, host, 64, RC_F32, back),
                        (const char *const[]){"cudaMemcpy failed: cudaErrorInvalidValue", NULL});
    expect_device_error(be->ops->upload(be, host, 64, RC_F32, d + 1),
                        (const char *const[]){"cudaMemcpy failed: cudaErrorInvalidValue", NULL});
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 3);
    /* the same calls on device memory */
    ck_assert_int_eq(be->ops->upload(be, host, 64, RC_F32, d), RC_OK);
    ck_assert_int_eq(be->ops->add(be, d, d, 64, RC_F32, d), RC_OK);
    ck_assert_int_eq(be->ops->download(be, d, 64, back), RC_OK);
    for (int i = 0; i < 64; i++)
        ck_assert(back[i] == 2.0f * host[i]);
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 3);
    be->ops->free(be, d);
    rc_backend_destroy(be);
    rck_shim_reset();
}
END_TEST
#endif

#ifdef RC_TEST_EMULATE
/* The CLI with --backend cuda end to end (main.c's CUDA path): the table and
 * JSON name the device, the HDF5 file stores it and `report` reproduces the
 * run's output; --reference fp32 runs on the device; auto picks the device;
 * blas is refused. */
static char g_cli_out[1 << 16];

static int cli(const char *args)
{
    char tmp[] = "/tmp/rc_cuda_cliXXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    char cmd[8192], src[4096];
    rc_test_source_path(src, sizeof src, ".");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s' 2>&1 </dev/null", src, RC_CUDA_HOST_CLI, args, tmp);
    int st = system(cmd);
    FILE *f = fopen(tmp, "rb");
    size_t got = f ? fread(g_cli_out, 1, sizeof g_cli_out - 1, f) : 0;
    g_cli_out[got] = '\0';
    if (f)
        fclose(f);
    unlink(tmp);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

START_TEST(test_cli_cuda)
{
    char dir[64], args[2048];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_test_cuda_") != NULL);
    const char *common = "--num-prompts 3 --len 4,8 --samples 2 -q";
    snprintf(args, sizeof args, "%s --backend cuda --reference fp32 --json --out %s/a.h5", common, dir);
    ck_assert_msg(cli(args) == 0, "%s: %s", args, g_cli_out);
    char *run_json = strdup(g_cli_out);
    printf("%-10s %s", TEST_NAME, run_json);
    ck_assert_ptr_nonnull(strstr(run_json, "\"backend\": \"cuda\", \"device\": \"host emulation"));
    ck_assert_ptr_nonnull(strstr(run_json, "\"reference\": \"fp32\""));
    snprintf(args, sizeof args, "report %s/a.h5 --json", dir);
    ck_assert_msg(cli(args) == 0, "%s: %s", args, g_cli_out);
    ck_assert_str_eq(g_cli_out, run_json); /* the device came back from the file */
    free(run_json);
    snprintf(args, sizeof args, "%s --backend cuda --kernels invariant --out %s/b.h5", common, dir);
    ck_assert_msg(cli(args) == 0, "%s: %s", args, g_cli_out);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "backend cuda: host emulation"));
    snprintf(args, sizeof args, "report %s/b.h5", dir);
    ck_assert_msg(cli(args) == 0, "%s: %s", args, g_cli_out);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "backend cuda: host emulation"));
    snprintf(args, sizeof args, "%s --backend auto --json --out none", common);
    ck_assert_msg(cli(args) == 0, "%s: %s", args, g_cli_out);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "\"backend\": \"cuda\""));
    snprintf(args, sizeof args, "%s --backend cuda --kernels blas --out none", common);
    ck_assert_int_eq(cli(args), 2);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "--kernels blas is OpenBLAS on the CPU"));
    /* the sampler's fp8 settings run on the device (main.c refuses none of
     * them there): the statistics and the verdict the CPU gives, to the
     * digit (host build, invariant kernels) */
    static const char *const fp8_specs[] = {"weights=fp8", "weights=fp8,weight-scale=channel,act=none",
                                            "weights=fp8,act=dynamic-tensor", "weights=fp8,act=none,tp=2",
                                            "kv-cache=fp8_e4m3"};
    for (size_t i = 0; i < sizeof fp8_specs / sizeof fp8_specs[0]; i++) {
        char *got[2];
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args, "%s --kernels invariant --dtype bf16 --sampler %s --json --out none --backend %s",
                     common, fp8_specs[i], k ? "cpu" : "cuda");
            ck_assert_msg(cli(args) == 0, "%s: %s", args, g_cli_out);
            const char *a0 = strstr(g_cli_out, "\"lens\""), *a1 = strstr(g_cli_out, "\"seconds_generate\"");
            ck_assert_msg(a0 && a1 && a1 > a0, "%s: %s", args, g_cli_out);
            got[k] = strndup(a0, (size_t)(a1 - a0));
        }
        ck_assert_msg(!strcmp(got[0], got[1]), "--sampler %s: cuda\n%s\ncpu\n%s", fp8_specs[i], got[0], got[1]);
        ck_assert_ptr_null(strstr(got[0], "\"std\": 0,")); /* the setting changed the sampler */
        free(got[0]);
        free(got[1]);
    }
    rc_test_rm_rf(dir);
}
END_TEST
#endif

START_TEST(test_launch_split)
{
    /* attention launches keep their scratch under the cap, at least one row,
     * never more rows than there are */
    const int64_t cases[][4] = {{1, 1, 1, 1}, {4200, 12, 50, 64}, {7, 32, 4096, 128}, {100, 8, 100000, 256}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t R = cases[i][0], nh = cases[i][1], mk = cases[i][2], d = cases[i][3];
        const int64_t cap = (int64_t)64 << 20;
        int64_t per = rck_attn_rows_per_launch(R, nh, mk, d, cap);
        ck_assert(per >= 1 && per <= R);
        ck_assert(per == 1 || per * nh * rck_attn_scratch(mk, d) <= cap);
        ck_assert(per == R || (per + 1) * nh * rck_attn_scratch(mk, d) > cap);
    }
    ck_assert_int_eq(rck_attn_scratch(50, 64), 50 + 2 * RC_SOFTMAX_MAX_CHUNKS + 128);
}
END_TEST

void errors_tests_in_host(TCase *tc)
{
    tcase_add_test(tc, test_error_messages);
    tcase_add_test(tc, test_create_without_device);
    tcase_add_test(tc, test_launch_split);
#ifdef RC_TEST_EMULATE
    tcase_add_test(tc, test_injected_faults);
    tcase_add_test(tc, test_shim_checks);
#endif
}

#ifdef RC_TEST_EMULATE
/* Device memory of a bf16 run, by the shim's allocation count, on every fixture (its 4 sequences of 16
 * tokens as slots and rows): the reference is the weights at 2 bytes (the checkpoint's floating elements)
 * plus the KV cache at 2 bytes (K and V of every layer, slot, KV head, position and head dimension), both
 * computed from the fixture. The estimate inspect prints for a GPU (rc_engine_mem_estimate with
 * host_memory false) gives the KV cache exactly and weights + KV cache within 1.5x of the reference; the
 * engine the backend creates holds at least that estimate's weights + KV cache, and the whole run's
 * peak is printed beside the estimate. At fixture scale the activations and the backend's workspaces (the
 * full log-probs [rows, vocab], attention scratch), which do not grow with the model's width, dominate
 * the peak, so the 1.5x bound is asserted on the weights and the KV cache (docs/gpu.md). */
START_TEST(test_device_memory_bf16)
{
    const char *name = rc_fixture_models[_i].name;
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const rc_config *c = &m->cfg;
    const int64_t B = 4, T = 16, rows = B * T, V = c->vocab;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    rc_engine_mem em;
    ck_assert_msg(rc_engine_mem_estimate(m, &num, false, RC_KERNELS_ENGINE, B, T, rows, &em) == RC_OK, "%s",
                  rc_last_error());
    rc_backend *be;
    ck_assert_msg(test_backend_create(RC_KERNELS_ENGINE, &be) == RC_OK, "%s", rc_last_error());
    rck_shim_reset();
    const long long base = rck_shim_get(RCK_SHIM_ALLOC_BYTES);
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, &num, B, T, rows, &e) == RC_OK, "%s", rc_last_error());
    const long long created = rck_shim_get(RCK_SHIM_ALLOC_BYTES) - base;
    int32_t *tok = malloc(sizeof(int32_t) * rows);
    float *out = malloc(sizeof(float) * rows * V);
    int64_t lens[4];
    for (int64_t b = 0; b < B; b++)
        lens[b] = T;
    for (int64_t i = 0; i < rows; i++)
        tok[i] = (int32_t)((i * 7 + 3) % V);
    ck_assert_msg(rc_full_forward(e, tok, lens, B, out) == RC_OK, "%s", rc_last_error());
    const long long peak = rck_shim_get(RCK_SHIM_ALLOC_PEAK) - base;
    /* the reference: the checkpoint's floating elements at 2 bytes, K and V of every layer, slot, KV head,
     * position and head dimension at 2 bytes */
    const long long wbytes = 2LL * m->n_params;
    /* (a hybrid model: K and V of its attention layers; its linear-attention layers' conv and recurrent states of
     * every slot in fp32, n_slots x (conv channels x kernel + value heads x key dim x value dim) floats a layer) */
    long long n_att = 0, n_lin = 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        n_lin += rc_layer_is_linear(c, l);
        n_att += !rc_layer_is_linear(c, l);
    }
    const long long kvbytes = 2LL * 2 * n_att * B * c->n_kv_heads * T * c->head_dim;
    const long long stbytes =
        4LL * n_lin * B * (rc_dim_value(c, RC_DIM_LCONV) * c->lin_conv_k + c->lin_hv * c->lin_dk * c->lin_dv);
    printf("%-10s %-14s bf16 device memory: engine %lld bytes (estimate %lld: weights %lld, KV %lld, activations "
           "%lld), peak %lld; weights at 2 bytes %lld + KV %lld = %lld (peak / that %.3f)\n",
           TEST_NAME, name, created, (long long)em.total, (long long)em.weights_copy, (long long)em.kv_cache,
           (long long)em.activations, peak, wbytes, kvbytes, wbytes + kvbytes, (double)peak / (double)(wbytes + kvbytes));
    ck_assert_int_eq(em.kv_cache, kvbytes);
    ck_assert_msg(em.weights_copy + em.kv_cache <= 3 * (wbytes + kvbytes) / 2, "%s: weights + KV %lld > 1.5 x %lld",
                  name, (long long)(em.weights_copy + em.kv_cache), wbytes + kvbytes);
    ck_assert_msg(created >= em.weights_copy + em.kv_cache + stbytes, "%s: the engine allocated %lld < weights + KV "
                  "%lld + states %lld", name, created, (long long)(em.weights_copy + em.kv_cache), stbytes);
    if (n_lin > 0) /* the estimate's states: the engine's, and each slot's counter (host) */
        ck_assert_int_eq(em.state_cache, stbytes + 8 * B);
    ck_assert_msg(peak >= created, "%s: peak %lld < engine %lld", name, peak, created);
    free(tok);
    free(out);
    rc_engine_free(e);
    rc_backend_destroy(be);
    rc_model_free(m);
}
END_TEST

void errors_tests_in_model(TCase *tc)
{
    tcase_add_test(tc, test_cli_cuda);
    tcase_add_loop_test(tc, test_device_memory_bf16, 0, RC_N_FIXTURE_MODELS);
}
#endif
