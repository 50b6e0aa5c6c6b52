/* test_cuda_multi.c: one model split over several devices (forward.c's layer split, the backend's
 * use_devices / set_device / copy_peer; docs/gpu.md "Several GPUs"). In the host build the stand-ins give
 * RCK_SHIM_DEVICES fake devices, each allocation belonging to one and every kernel, copy and cuBLAS call
 * checked to use only the current device's memory; on a GPU machine the same tests run over the real
 * devices when there are enough of them (otherwise each says it is skipped and why). A split changes where
 * the layers run, not their arithmetic: every log-prob is bitwise the one-device run's. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "fp8w.h"
#include "model.h"
#include "place.h"
#include "rc_cuda.h"
#include "rollout.h"
#ifdef RC_TEST_EMULATE
#include "shim_control.h"
#endif
#include "safetensors.h"
#include "util.h"

#include "fixtures.h"
#include "testutil.h"

#include "test_cuda.h"
#include "testutil_llama.h"

/* enough devices for n: the host build makes them, a GPU machine has them or the test is skipped */
static bool have_devices(int n)
{
#ifdef RC_TEST_EMULATE
    rck_shim_set(RCK_SHIM_DEVICES, n);
    return true;
#else
    int count = 0;
    char name[256];
    if (rc_cuda_probe(&count, name, sizeof name) != RC_OK || count < n) {
        printf("%-10s multi-GPU test skipped: it needs %d GPUs, %d visible\n", TEST_NAME, n, count);
        return false;
    }
    return true;
#endif
}

/* A backend over n devices (n 1: one) with the given layers per device (NULL: the even split) */
static rc_backend *backend_n(rc_kernels k, int n, const int64_t *split)
{
    rc_backend *be;
    ck_assert_msg(test_backend_create(k, &be) == RC_OK, "%s", rc_last_error());
    if (n > 1) {
        ck_assert_msg(be->ops->use_devices(be, n) == RC_OK, "%s", rc_last_error());
        ck_assert_int_eq(be->n_devices, n);
        for (int d = 0; split && d < n; d++)
            be->layer_split[d] = split[d];
    }
    return be;
}

enum { MB = 3, MT = 12 };
static const int64_t k_lens[MB] = {7, 5, 9}; /* the full forward's sequences */

typedef struct {
    float *full; /* [sum(k_lens), V]: the full forward */
    float *dec;  /* [4][MB][V]: a prefill of 4 tokens per slot, then 3 decode steps, each slot's last row */
    int64_t split[RC_MAX_DEVICES + 1];
} multi_result;

/* The engine's full forward of k_lens' 3 sequences (full: [sum(k_lens), V]) and a cached prefill of 4 tokens
 * each plus 3 one-token decode steps (dec: [4][3][V]), the token ids a fixed function of the position: the run
 * test_cuda_multi.c and test_cuda_act.c compare bitwise between placements and storages */
void cuda_test_forward_decode(rc_engine *e, int64_t V, float **full_out, float **dec_out)
{
    const int64_t R = k_lens[0] + k_lens[1] + k_lens[2];
    int32_t tok[MB * MT];
    for (int64_t i = 0; i < MB * MT; i++)
        tok[i] = (int32_t)((i * 7 + 3) % V);
    *full_out = malloc(sizeof(float) * R * V);
    *dec_out = malloc(sizeof(float) * 4 * MB * V);
    ck_assert(*full_out && *dec_out);
    ck_assert_msg(rc_full_forward(e, tok, k_lens, MB, *full_out) == RC_OK, "%s", rc_last_error());
    const int64_t slots[MB] = {0, 1, 2};
    int64_t starts[MB] = {0, 0, 0}, n_new[MB] = {4, 4, 4};
    const int64_t last[MB] = {3, 7, 11}, one[MB] = {0, 1, 2};
    ck_assert_msg(rc_engine_step(e, slots, starts, n_new, MB, tok, last, MB, *dec_out, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    for (int step = 1; step < 4; step++) {
        int32_t t1[MB];
        for (int b = 0; b < MB; b++) {
            starts[b] = 3 + step;
            n_new[b] = 1;
            t1[b] = (int32_t)((b * 5 + step * 3 + 1) % V);
        }
        ck_assert_msg(rc_engine_step(e, slots, starts, n_new, MB, t1, one, MB, *dec_out + step * MB * V, NULL, NULL) ==
                          RC_OK,
                      "%s", rc_last_error());
    }
}

/* created (host build, NULL: not asked): the bytes the engine allocated on each device */
static void multi_run(const rc_model *m, const rc_numerics *num, rc_kernels k, int n, const int64_t *split,
                      multi_result *r, long long *created)
{
    const int64_t V = m->cfg.vocab;
    rc_backend *be = backend_n(k, n, split);
    rc_engine *e;
#ifdef RC_TEST_EMULATE
    long long before[RC_MAX_DEVICES];
    for (int d = 0; d < n; d++)
        before[d] = rck_shim_device_bytes(d);
#endif
    ck_assert_msg(rc_engine_create(m, be, num, MB, MT, MB * MT, &e) == RC_OK, "%s", rc_last_error());
#ifdef RC_TEST_EMULATE
    for (int d = 0; created && d < n; d++)
        created[d] = rck_shim_device_bytes(d) - before[d];
#else
    ck_assert_ptr_null(created);
#endif
    ck_assert_int_eq(e->n_stages, n);
    memcpy(r->split, e->stage_l0, sizeof e->stage_l0);
    cuda_test_forward_decode(e, V, &r->full, &r->dec);
    ck_assert_int_eq(e->cur_stage, 0);
    rc_engine_free(e);
    rc_backend_destroy(be);
}

static void multi_free(multi_result *r)
{
    free(r->full);
    free(r->dec);
}

/* One split of a case loop (test_multi_gpu_bitwise, test_multi_gpu_fp8): the engine over n devices (split: the
 * layers per device, or NULL: the default split) runs the full forward and the cached decode, and every log-prob
 * is bitwise (memcmp) the one-device run's `one`; each device holds at least one layer, the given split's when
 * given; in the host build (the shim's counters reset first) every device held memory and peaked at most at its
 * estimate (rc_layer_split's, inspect --gpus N's, with the backend's workspaces), the residual stream was copied
 * between devices, no pointer strayed (a layer's weights, copies or scratch on another device would be a counted
 * line there). label names the case in the messages and the printed line; the split run's layers per device go
 * to l0 (n + 1 values) */
static void run_split_case(const rc_model *m, const rc_numerics *num, rc_kernels k, int n, const int64_t *split,
                           const multi_result *one, const char *label, int64_t *l0)
{
    const int64_t V = m->cfg.vocab, R = k_lens[0] + k_lens[1] + k_lens[2];
    multi_result r;
#ifdef RC_TEST_EMULATE
    rck_shim_reset();
#endif
    multi_run(m, num, k, n, split, &r, NULL);
    char sp[64] = "";
    for (int d = 0; d < n; d++)
        snprintf(sp + strlen(sp), sizeof sp - strlen(sp), "%s%lld", d ? "," : "", (long long)(r.split[d + 1] - r.split[d]));
#ifdef RC_TEST_EMULATE
    int64_t el0[RC_MAX_DEVICES + 1], est[RC_MAX_DEVICES];
    ck_assert_msg(rc_layer_split(m, num, k, n, split, MB, MT, MB * MT, el0, est, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    for (int d = 0; d < n; d++) {
        ck_assert_msg(rck_shim_device_peak(d) > 0, "%s: device %d never used", label, d);
        ck_assert_msg(rck_shim_device_peak(d) <= est[d], "%s: device %d of %d: peak %lld > estimate %lld", label, d,
                      n, rck_shim_device_peak(d), (long long)est[d]);
    }
    ck_assert_int_gt(rck_shim_get(RCK_SHIM_PEER_COPIES), 0);
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 0);
    printf("%-10s %s %d devices, layers %-6s peak bytes per device:", TEST_NAME, label, n, sp);
    for (int d = 0; d < n; d++)
        printf(" %lld (%.3f of the estimate)", rck_shim_device_peak(d), (double)rck_shim_device_peak(d) / est[d]);
    printf(", %lld peer copies: bitwise\n", rck_shim_get(RCK_SHIM_PEER_COPIES));
#else
    printf("%-10s %s %d GPUs, layers %s: bitwise\n", TEST_NAME, label, n, sp);
#endif
    for (int d = 0; d < n; d++)
        ck_assert_int_ge(r.split[d + 1] - r.split[d], 1);
    if (split)
        for (int d = 0; d < n; d++)
            ck_assert_int_eq(r.split[d + 1] - r.split[d], split[d]);
    ck_assert_msg(memcmp(one->full, r.full, sizeof(float) * R * V) == 0, "%s: %d devices (%s): full forward differs",
                  label, n, sp);
    ck_assert_msg(memcmp(one->dec, r.dec, sizeof(float) * 4 * MB * V) == 0, "%s: %d devices (%s): decode differs",
                  label, n, sp);
    memcpy(l0, r.split, sizeof(int64_t) * (size_t)(n + 1));
    multi_free(&r);
}

/* the fixtures split: a dense model, MoE models (top-k routing, the grouped sigmoid router with a shared
 * expert), latent attention, ALiBi (slopes on every device), the sliding layers' own RoPE table, a parallel
 * residual, sink logits, the hybrid models (Gated DeltaNet layers whose conv and recurrent states live on their
 * device, gated attention) */
static const char *const k_multi_fixtures[] = {"llama_gqa",    "qwen3_moe",    "deepseek_v3_moe", "deepseek_v3_mla",
                                               "bloom_alibi",  "gemma3_local", "neox_parallel",   "gptoss_sinks",
                                               "qnext_hybrid", "q35_moe",      "q35_dense"};
#define N_MULTI ((int)(sizeof k_multi_fixtures / sizeof k_multi_fixtures[0]))

/* _i: fixture (N_MULTI), then bf16 engine / fp32 invariant. Each split -- 2 devices evenly by weight bytes,
 * 2 devices with the odd split (L - 1, 1), 3 devices (1, 1, L - 2) where the model has 3 layers or more -- gives
 * every full-forward and decode log-prob bitwise the one-device run's. */
START_TEST(test_multi_gpu_bitwise)
{
    const char *name = k_multi_fixtures[_i % N_MULTI];
    const bool inv = _i >= N_MULTI;
    if (!have_devices(3) && !have_devices(2))
        return;
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", name);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t L = m->cfg.n_layers;
    rc_numerics num = rc_numerics_fp32();
    num.dt = inv ? RC_F32 : RC_BF16;
    const rc_kernels k = inv ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
    multi_result one;
    multi_run(m, &num, k, 1, NULL, &one, NULL);
    int count = 3;
#ifndef RC_TEST_EMULATE
    char devname[256];
    ck_assert(rc_cuda_probe(&count, devname, sizeof devname) == RC_OK);
#endif
    struct {
        int n;
        int64_t split[3];
    } cases[] = {{2, {0}}, {2, {L - 1, 1}}, {3, {1, 1, L - 2}}};
    char label[64];
    snprintf(label, sizeof label, "%-16s %s", name, inv ? "fp32 invariant" : "bf16 engine");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].n > count || (cases[c].n == 3 && L < 3))
            continue;
        int64_t l0[RC_MAX_DEVICES + 1];
        run_split_case(m, &num, k, cases[c].n, cases[c].split[0] ? cases[c].split : NULL, &one, label, l0);
    }
    multi_free(&one);
    rc_model_free(m);
}
END_TEST

/* What a split refuses, by name: a split that does not add up to the model's layers, a GPU without a layer,
 * more GPUs than layers; a hybrid model under what it is not emulated with (tp here), on several GPUs as on one */
START_TEST(test_multi_gpu_refused)
{
    if (!have_devices(2))
        return;
    char dir[4096];
    rc_model *m;
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", "llama_gqa");
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    rc_engine *e = NULL;
    rc_backend *be = backend_n(RC_KERNELS_ENGINE, 2, (const int64_t[]){1, 1});
    ck_assert_int_eq(rc_engine_create(m, be, &num, 2, 8, 16, &e), RC_ERR_USAGE);
    printf("%-10s refused: %s\n", TEST_NAME, rc_last_error());
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "--layer-split: 2 layers in all, but the model runs 3"));
    be->layer_split[0] = 3;
    be->layer_split[1] = 0; /* layer_split[0] set: every count is checked */
    ck_assert_int_eq(rc_engine_create(m, be, &num, 2, 8, 16, &e), RC_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "GPU 1 gets 0 layers"));
    be->layer_split[0] = 0;
    int64_t l0[RC_MAX_DEVICES + 1];
    ck_assert_int_eq(rc_layer_split(m, &num, RC_KERNELS_ENGINE, 4, NULL, 2, 8, 16, l0, NULL, NULL, NULL),
                     RC_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "--gpus 4: the model runs 3 layers"));
    rc_model_free(m);
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", "q35_dense");
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    num.tp = 2;
    ck_assert_int_eq(rc_engine_create(m, be, &num, 2, 8, 16, &e), RC_ERR_UNSUPPORTED);
    printf("%-10s refused: %s\n", TEST_NAME, rc_last_error());
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "hybrid linear-attention models run without tp"));
    rc_model_free(m);
    rc_backend_destroy(be);
}
END_TEST

/* fp8 weights over a split: weights=as-stored on DeepSeek-V3's FP8 block checkpoint (latent attention, a dense
 * first layer, two MoE layers whose experts run the fused FP8 path) and weights=fp8 on dense Llamas -- per
 * tensor with per-token activations and per channel weight-only (W8A16: the layers' codes dequantized per
 * call) on llama_gqa, 128 x 128 blocks on a 3-layer Llama whose GEMM sizes are multiples
 * of 128 (write_block_model_n) -- in bf16 with engine and with invariant kernels (_i: case, then kernels) */
typedef struct {
    const char *fixture; /* NULL: the block Llama */
    rc_wq_numerics wq;
    const char *label;
} fp8_case;
static const fp8_case k_fp8_cases[] = {
    {"moe_fp8/deepseek_v3_fp8", {RC_WQ_STORED, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN}, "as-stored"},
    {"llama_gqa", {RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_TOKEN}, "fp8 tensor/token"},
    {"llama_gqa", {RC_WQ_FP8, RC_WSCALE_CHANNEL, RC_ACTQ_NONE}, "fp8 channel/none"},
    {NULL, {RC_WQ_FP8, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN}, "fp8 block/group"},
};
#define N_FP8 ((int)(sizeof k_fp8_cases / sizeof k_fp8_cases[0]))

static rc_model *fp8_case_model(const fp8_case *fc)
{
    char dir[4096], tmp[64] = "";
    if (fc->fixture) {
        rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", fc->fixture);
    } else {
        ck_assert(rc_test_mkdtemp(tmp, sizeof tmp, "/tmp/rc_test_multi_fp8_") != NULL);
        write_block_model_n(tmp, 3);
        snprintf(dir, sizeof dir, "%s", tmp);
    }
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    if (tmp[0])
        rc_test_rm_rf(tmp);
    return m;
}

#ifdef RC_TEST_EMULATE
/* weights=fp8 on a dense model: the device bytes of layer l's quantized copies, from the shapes -- each linear
 * layer's N x K values as float8_e4m3fn codes at 1 byte (W8A8 and W8A16), in a buffer of whole floats, and
 * the fp32 weight scales (1 per tensor, N per channel, one per 128 x 128 block; W8A16's rounded to the dtype)
 * -- and the scratch one device holds for `rows` rows: W8A8's x's fp8 values [rows][kmax], its scales
 * [rows][kmax / 128 + 1] and the partial sums [rows][nmax], fp32, and under engine kernels (W8A16: that
 * alone) the 2-byte workspace of the largest layer's N x K values (its codes widened, or dequantized, for
 * cuBLAS), in whole floats */
static void fp8_dense_device_bytes(const rc_config *c, const rc_wq_numerics *wq, bool engine, int64_t rows,
                                   long long *layer, long long *scratch)
{
    const long long H = c->hidden, I = c->intermediate, d = c->head_dim;
    const long long shapes[5][2] = {{(c->n_heads + 2 * c->n_kv_heads) * d, H}, {H, c->n_heads * d}, {I, H},
                                    {c->gated_mlp ? I : 0, H}, {H, I}};
    const bool w8a8 = wq->act != RC_ACTQ_NONE;
    long long kmax = 0, nmax = 0, wmax = 0;
    *layer = 0;
    for (int i = 0; i < 5; i++) {
        const long long N = shapes[i][0], K = shapes[i][1];
        if (N == 0)
            continue;
        kmax = K > kmax ? K : kmax;
        nmax = N > nmax ? N : nmax;
        wmax = N * K > wmax ? N * K : wmax;
        const long long scales = wq->scale == RC_WSCALE_TENSOR ? 1 : wq->scale == RC_WSCALE_CHANNEL ? N
                                 : ((N + 127) / 128) * ((K + 127) / 128);
        *layer += (N * K + 3) / 4 * 4 + 4 * scales;
    }
    *scratch = (w8a8 ? (long long)rows * (kmax + kmax / 128 + 1 + nmax) * 4 : 0) + (engine ? (wmax + 1) / 2 * 4 : 0);
}

/* the bytes an engine allocates on each of n devices at its creation (the device memory it holds before any
 * call: weights, fp8 copies, KV cache, buffers) */
static void created_bytes(const rc_model *m, const rc_numerics *num, rc_kernels k, int n, const int64_t *split,
                          long long *out)
{
    rck_shim_reset();
    rc_backend *be = backend_n(k, n, split);
    long long before[RC_MAX_DEVICES];
    for (int d = 0; d < n; d++)
        before[d] = rck_shim_device_bytes(d);
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, num, MB, MT, MB * MT, &e) == RC_OK, "%s", rc_last_error());
    for (int d = 0; d < n; d++)
        out[d] = rck_shim_device_bytes(d) - before[d];
    rc_engine_free(e);
    rc_backend_destroy(be);
}
#endif

/* every full-forward and decode log-prob over 2 devices (the default split, and L - 1, 1 and 1, L - 1 where
 * they differ from it) and 3 (1, 1, L - 2)
 * bitwise the one device's; in the host build every device held memory and no pointer strayed (each layer's
 * fp8 copies and scratch are its device's: a kernel or cuBLAS call reading another device's memory is one
 * counted line there), and with the split L - 1, 1 what the fp8 weights add on each device -- the engine's
 * bytes with them less without -- is positive and at most what rc_layer_split's estimate adds there */
START_TEST(test_multi_gpu_fp8)
{
    const fp8_case *fc = &k_fp8_cases[_i % N_FP8];
    const bool inv = _i >= N_FP8;
    if (!have_devices(3) && !have_devices(2))
        return;
    rc_model *m = fp8_case_model(fc);
    const int64_t L = m->cfg.n_layers;
    ck_assert_int_ge(L, 3);
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.wq = fc->wq;
    const rc_kernels k = inv ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
    multi_result one;
    multi_run(m, &num, k, 1, NULL, &one, NULL);
    int count = 3;
#ifndef RC_TEST_EMULATE
    char devname[256];
    ck_assert(rc_cuda_probe(&count, devname, sizeof devname) == RC_OK);
#endif
    struct {
        int n;
        int64_t split[3];
    } cases[] = {{2, {0}}, {2, {L - 1, 1}}, {2, {1, L - 1}}, {3, {1, 1, L - 2}}};
    int64_t even1 = 0; /* the default split's layers on device 0: the given 2-device split equal to it is skipped */
    char label[96];
    snprintf(label, sizeof label, "%-24s %-16s %s", fc->fixture ? fc->fixture : "block llama (3 layers)", fc->label,
             inv ? "bf16 invariant" : "bf16 engine");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].n > count || (c > 0 && cases[c].n == 2 && cases[c].split[0] == even1))
            continue;
        int64_t l0[RC_MAX_DEVICES + 1];
        run_split_case(m, &num, k, cases[c].n, cases[c].split[0] ? cases[c].split : NULL, &one, label, l0);
        if (c == 0)
            even1 = l0[1];
    }
    multi_free(&one);
#ifdef RC_TEST_EMULATE
    /* where the copies are, against the estimate: the same split (L - 1, 1) with and without fp8 weights */
    const int64_t sp[2] = {L - 1, 1};
    rc_numerics plain = num;
    plain.wq = (rc_wq_numerics){0};
    long long got8[2], got0[2];
    created_bytes(m, &num, k, 2, sp, got8);
    created_bytes(m, &plain, k, 2, sp, got0);
    int64_t l0[RC_MAX_DEVICES + 1], b8[2], b0[2];
    ck_assert_msg(rc_layer_split(m, &num, k, 2, sp, MB, MT, MB * MT, l0, b8, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    ck_assert_msg(rc_layer_split(m, &plain, k, 2, sp, MB, MT, MB * MT, l0, b0, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    for (int d = 0; d < 2; d++) {
        const long long meas = got8[d] - got0[d], est = (long long)(b8[d] - b0[d]);
        printf("%-10s %-16s layers %lld,%lld: device %d holds %lld bytes more with fp8 weights, estimate %lld\n",
               TEST_NAME, fc->label, (long long)sp[0], (long long)sp[1], d, meas, est);
        ck_assert_msg(meas > 0 && meas <= est, "%s: device %d: %lld bytes measured, %lld estimated", fc->label, d, meas,
                      est);
    }
    /* weights=fp8 on a dense Llama: the copies at 1 byte a value (the codes, W8A16's too), to the byte -- the shim's bytes with them
     * less without, on each device of the split and on one device, are the shapes' count (the quantized copies
     * of the device's layers and its W8A8 scratch), and rc_fp8w_layer_bytes / rc_fp8w_bytes (host false)
     * give that count's weights */
    if (fc->wq.kind == RC_WQ_FP8) {
        long long per_layer, scr;
        fp8_dense_device_bytes(&m->cfg, &fc->wq, !inv, MB * MT, &per_layer, &scr);
        int64_t est_w, est_s, est_l;
        ck_assert(rc_fp8w_bytes(&m->cfg, &num, false, MB * MT, &est_w, &est_s));
        ck_assert_int_eq(est_w, per_layer * L);
        ck_assert_int_ge(est_s, scr);
        for (int64_t l = 0; l < L; l++) {
            ck_assert(rc_fp8w_layer_bytes(&m->cfg, &num, false, l, &est_l));
            ck_assert_int_eq(est_l, per_layer);
        }
        /* the run without them with fp32 activation buffers, as an fp8 run's (forward.c engine_act_st) */
        rc_numerics plain32 = plain;
        plain32.act_f32 = true;
        long long one8[1], one0[1], sp0[2];
        created_bytes(m, &num, k, 1, NULL, one8);
        created_bytes(m, &plain32, k, 1, NULL, one0);
        created_bytes(m, &plain32, k, 2, sp, sp0);
        ck_assert_int_eq(one8[0] - one0[0], per_layer * L + scr);
        for (int d = 0; d < 2; d++)
            ck_assert_int_eq(got8[d] - sp0[d], per_layer * sp[d] + scr);
        printf("%-10s %-16s fp8 copies on the device: %lld bytes a layer (the estimate's), "
               "scratch %lld bytes a device (estimate %lld)\n", TEST_NAME, fc->label, per_layer, scr,
               (long long)est_s);
    }
#endif
    rc_model_free(m);
}
END_TEST

/* inspect --gpus N on the hybrid models (qnext_hybrid, q35_moe; _i): each device's share of the estimate holds
 * the KV cache of its attention layers and the conv and recurrent states of its linear-attention layers. The
 * attention layers' KV caches add up to the one-device estimate's, each a layer's share; moving the boundary
 * of a 2-device split by one layer moves that layer's bytes from device 1 to device 0, and when it is a
 * linear-attention layer, its states: n_slots x (conv channels x kernel + value heads x key dim x value dim)
 * floats, computed from the config (each device's share less the backend's workspaces there, rc_cuda_ws_bytes,
 * which depend on the kinds of layers a device holds: test_multi_gpu_auto). (test_device_memory_hybrid: what the
 * engine allocates against it.) */
START_TEST(test_multi_gpu_hybrid_estimate)
{
    static const char *const names[] = {"qnext_hybrid", "q35_moe"};
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", names[_i]);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const rc_config *c = &m->cfg;
    const int64_t L = c->n_layers, slots = 3, len = 16, rows = 48;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    int64_t n_att = 0, n_lin = 0;
    for (int64_t l = 0; l < L; l++) {
        n_lin += rc_layer_is_linear(c, l);
        n_att += !rc_layer_is_linear(c, l);
    }
    ck_assert(n_lin > 0 && n_att > 0 && L >= 3);
    const int64_t per_state = slots *
                              (rc_dim_value(c, RC_DIM_LCONV) * c->lin_conv_k + c->lin_hv * c->lin_dk * c->lin_dv) * 4;
    int64_t l0[RC_MAX_DEVICES + 1], b1[1], w1[1], k1[1];
    ck_assert_msg(rc_layer_split(m, &num, RC_KERNELS_ENGINE, 1, NULL, slots, len, rows, l0, b1, w1, k1) == RC_OK,
                  "%s", rc_last_error());
    int64_t prev_b[2] = {0, 0}, prev_w[2] = {0, 0};
    for (int64_t a = 1; a < L; a++) {
        const int64_t sp[2] = {a, L - a};
        int64_t b[2], w[2], kv[2];
        ck_assert_msg(rc_layer_split(m, &num, RC_KERNELS_ENGINE, 2, sp, slots, len, rows, l0, b, w, kv) == RC_OK,
                      "%s", rc_last_error());
        for (int d = 0; d < 2; d++) {
            int64_t ws[RC_CUWS_N];
            ck_assert(rc_cuda_ws_bytes(m, &num, RC_KERNELS_ENGINE, slots, len, rows, l0[d], l0[d + 1], d == 0, ws) ==
                      RC_OK);
            b[d] -= rc_cuda_ws_total(ws);
        }
        ck_assert_int_eq(w[0] + w[1], w1[0]);
        ck_assert_int_eq(kv[0] + kv[1], k1[0]);
        int64_t att0 = 0;
        for (int64_t l = 0; l < a; l++)
            att0 += !rc_layer_is_linear(c, l);
        ck_assert_int_eq(kv[0], k1[0] / n_att * att0);
        if (a > 1) { /* layer a - 1 moved from device 1 to device 0 */
            const int64_t lin = rc_layer_is_linear(c, a - 1) ? per_state : 0;
            const int64_t kvl = rc_layer_is_linear(c, a - 1) ? 0 : k1[0] / n_att, wl = w[0] - prev_w[0];
            ck_assert_int_eq(prev_w[1] - w[1], wl);
            ck_assert_int_eq(b[0] - prev_b[0], wl + kvl + lin);
            ck_assert_int_eq(prev_b[1] - b[1], wl + kvl + lin);
        }
        printf("%-10s %s --gpus 2 layers %lld,%lld: %lld + %lld bytes (KV %lld + %lld), one GPU %lld\n", TEST_NAME,
               names[_i], (long long)sp[0], (long long)sp[1], (long long)b[0], (long long)b[1], (long long)kv[0],
               (long long)kv[1], (long long)b1[0]);
        prev_b[0] = b[0];
        prev_b[1] = b[1];
        prev_w[0] = w[0];
        prev_w[1] = w[1];
    }
    rc_model_free(m);
}
END_TEST

#ifdef RC_TEST_EMULATE
static void expect_multi_error(rc_status s, const char *const *phrases)
{
    const char *msg = rc_last_error();
    printf("%-10s injected: %s\n", TEST_NAME, msg);
    ck_assert_int_eq(s, RC_ERR_DEVICE);
    ck_assert(strchr(msg, '\n') == NULL);
    for (; *phrases; phrases++)
        ck_assert_msg(strstr(msg, *phrases) != NULL, "'%s' lacks '%s'", msg, *phrases);
}

/* The error paths of a split, on the fake devices: too few devices, device 1 out of memory (the engine
 * refused, nothing left allocated on any device), a failed copy between devices (the call fails with the
 * copy's line, the engine is freed cleanly, device 0 current again), and a pointer of one device handed to
 * a kernel, a copy or cuBLAS on another (one line each, counted, the call failed). */
START_TEST(test_multi_gpu_faults)
{
    char dir[4096];
    rc_model *m;
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", "llama_gqa");
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    rc_engine *e = NULL;
    rck_shim_set(RCK_SHIM_DEVICES, 2);
    rc_backend *be;
    ck_assert_int_eq(test_backend_create(RC_KERNELS_ENGINE, &be), RC_OK);
    expect_multi_error(be->ops->use_devices(be, 3),
                       (const char *const[]){"--gpus 3 needs 3 GPUs; 2 are visible", NULL});
    ck_assert_int_eq(be->ops->use_devices(be, 2), RC_OK);
    const long long base = rck_shim_get(RCK_SHIM_ALLOC_BYTES);
    /* device 1 has 4 KiB */
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, 4096);
    rck_shim_set(RCK_SHIM_MEMORY_DEVICE, 2);
    expect_multi_error(rc_engine_create(m, be, &num, 2, 8, 16, &e),
                       (const char *const[]){"too little GPU memory", "(GPU 1: ", NULL});
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_ALLOC_BYTES), base);
    ck_assert_int_eq(rck_shim_device_bytes(1), 0);
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, 0);
    rck_shim_set(RCK_SHIM_MEMORY_DEVICE, 0);
    /* a failed peer copy */
    ck_assert_msg(rc_engine_create(m, be, &num, 2, 8, 16, &e) == RC_OK, "%s", rc_last_error());
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t lens[2] = {4, 4};
    float *out = malloc(sizeof(float) * 8 * m->cfg.vocab);
    rck_shim_set(RCK_SHIM_FAIL_PEER, 1);
    expect_multi_error(rc_full_forward(e, tok, lens, 2, out),
                       (const char *const[]){"cudaMemcpyPeer failed: cudaErrorInvalidValue", "backend_cuda.cu:", NULL});
    ck_assert_int_eq(e->cur_stage, 0);
    rck_shim_set(RCK_SHIM_FAIL_PEER, 0);
    ck_assert_msg(rc_full_forward(e, tok, lens, 2, out) == RC_OK, "%s", rc_last_error()); /* it runs again */
    rc_engine_free(e); /* (the backend's workspaces stay until it is destroyed) */
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 0);
    /* a buffer of device 1 in a kernel on device 0, in a copy from device 0, in cuBLAS on device 0 */
    float *d1 = NULL, *d0 = NULL, host[64];
    for (int i = 0; i < 64; i++)
        host[i] = (float)i;
    ck_assert_int_eq(be->ops->set_device(be, 1), RC_OK);
    ck_assert_int_eq(be->ops->alloc(be, 64, &d1), RC_OK);
    ck_assert_int_eq(be->ops->set_device(be, 0), RC_OK);
    ck_assert_int_eq(be->ops->alloc(be, 64, &d0), RC_OK);
    ck_assert_int_eq(be->ops->upload(be, host, 64, RC_F32, d1), RC_OK); /* upload follows its buffer's device */
    ck_assert_int_eq(be->ops->upload(be, host, 64, RC_F32, d0), RC_OK);
    expect_multi_error(be->ops->add(be, d0, d1, 64, RC_F32, d0),
                       (const char *const[]){"k_ew failed: cudaErrorIllegalAddress", NULL});
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 1);
    expect_multi_error(be->ops->gather_rows(be, d1, 8, (const int64_t[]){0, 1}, 2, d0),
                       (const char *const[]){"cudaErrorIllegalAddress", NULL});
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 2);
    expect_multi_error(be->ops->matmul(be, d1, 2, 4, rc_wt_f32(d0), 4, NULL, RC_F32, RC_F32, d0),
                       (const char *const[]){"cublasGemmEx failed", NULL});
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 3);
    /* the copy made right: device 1's values to device 0 */
    ck_assert_int_eq(be->ops->copy_peer(be, d0, 0, d1, 1, 64), RC_OK);
    expect_multi_error(be->ops->copy_peer(be, d0, 1, d1, 1, 64),
                       (const char *const[]){"cudaMemcpyPeer failed", NULL});
    float back[64];
    ck_assert_int_eq(be->ops->download(be, d0, 64, back), RC_OK);
    ck_assert(memcmp(back, host, sizeof host) == 0);
    be->ops->free(be, d1);
    be->ops->free(be, d0);
    free(out);
    rc_backend_destroy(be);
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_ALLOC_BYTES), 0);
    rc_model_free(m);
}
END_TEST
#endif

#ifdef RC_TEST_EMULATE
/* A Llama whose weights outweigh a small batch's activations, as at real sizes (hidden 512, 8 heads of 64, 2 KV
 * heads, intermediate 1536, vocab 1024, 4 layers, an untied head): random fp32 weights written into dir. */
enum { WH = 512, WI = 1536, WV = 1024, WL = 4, WNH = 8, WNKV = 2, WD = 64 };
static const rc_test_llama k_wide = {.hidden = WH, .intermediate = WI, .heads = WNH, .kv_heads = WNKV, .head_dim = WD,
                                     .layers = WL, .vocab = WV, .tied = false, .scale = 0.05f};

static void write_wide_model(const char *dir) { rc_test_write_llama(dir, &k_wide); }

/* The whole device memory of a bf16 run -- weights, KV cache, activations and every workspace of the backend
 * (cuBLAS operands, attention scratch, the full log-probs), the shim's allocation peak -- at most 1.5 x the
 * reference (the checkpoint's elements at 2 bytes + the KV cache at 2 bytes: K and V of every layer, slot, KV
 * head, position and dimension), on a model whose weights outweigh the activations as at real sizes, one full
 * forward of 4 sequences of 16 tokens and their cached decode; inspect's estimate (its GPU memory line) within
 * the same bound. Split over 2 fake devices: each device's peak at most 1.5 x its own reference (its layers'
 * elements, device 0 also the embedding, final norm and head, and its layers' KV cache), and at most the
 * device's estimate (inspect --gpus N's, the backend's workspaces in it). cuBLAS's workspace, a fixed 32 MiB a
 * device that does not grow with the model, is set to 1 MiB here (RC_CUDA_CUBLAS_WORKSPACE_MB): at this model's
 * 26 MB it would be the largest item, at a 7B model's 24 GiB it is 0.13%. */
START_TEST(test_device_memory_whole)
{
    ck_assert_int_eq(setenv("RC_CUDA_CUBLAS_WORKSPACE_MB", "1", 1), 0);
    char dir[64];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_test_wide_") != NULL);
    write_wide_model(dir);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t B = 4, T = 16, rows = B * T;
    const long long layer_n = rc_test_llama_layer_n(&k_wide), own_n = 2LL * WV * WH + WH;
    ck_assert_int_eq(m->n_params, WL * layer_n + own_n); /* every tensor counted */
    const long long kv_layer = 2LL * 2 * B * WNKV * T * WD; /* K and V of one layer at 2 bytes */
    /* mlp_a and mlp_b ([rows, WI] each), qkv ([rows, (WNH + 2 WNKV) WD]), att ([rows, WNH WD]), h, tmp, mlp_c
     * and x ([rows, WH] each) on every device and the logits ([rows, WV]: logit rows = rows) and the LM head's
     * rows of x (lt, [rows, WH]) on device 0, which holds the head, at 2 bytes: half their fp32 bytes. And the bf16 copy of a GEMM's fp32 input for cuBLAS (ws_get
     * keeps bytes + bytes / 4): with every layer's GEMM input at 2 bytes only the LM head's (logit rows = rows,
     * K = hidden) is made, on device 0; another device makes none. Each device's peak falls by both. */
    const long long mlp_save = 2LL * rows * WI * 2, ws_half = 2LL * rows * WI, ws_half16 = 2LL * rows * WH;
    const long long layer_save = mlp_save + 2LL * rows * (WNH + 2 * WNKV) * WD + 2LL * rows * WNH * WD +
                                 4 * 2LL * rows * WH, act_save = layer_save + 2LL * rows * WV + 2LL * rows * WH;
    const long long peak_save = act_save + (ws_half + ws_half / 4) - (ws_half16 + ws_half16 / 4);
    const long long peak_save_nohead = layer_save + ws_half + ws_half / 4;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    int32_t tok[64];
    int64_t lens[4];
    for (int64_t i = 0; i < rows; i++)
        tok[i] = (int32_t)((i * 7 + 3) % WV);
    for (int64_t b = 0; b < B; b++)
        lens[b] = T;
    float *out = malloc(sizeof(float) * rows * WV), *ref_out = malloc(sizeof(float) * rows * WV);
    ck_assert(out && ref_out);
    rc_engine_mem dm, dm32;
    rc_numerics num32 = num;
    num32.act_f32 = true;
    ck_assert(rc_engine_mem_estimate(m, &num, false, RC_KERNELS_ENGINE, B, T, rows, &dm) == RC_OK);
    ck_assert(rc_engine_mem_estimate(m, &num32, false, RC_KERNELS_ENGINE, B, T, rows, &dm32) == RC_OK);
    ck_assert_int_eq(dm32.total - dm.total, act_save); /* the estimate: the buffers */
    for (int n = 1; n <= 2; n++) {
        long long peak32[2] = {0, 0};
        for (int f32 = 1; f32 >= 0; f32--) { /* fp32 activation storage, then the MLP's at 2 bytes */
            rck_shim_set(RCK_SHIM_DEVICES, n);
            rc_backend *be = backend_n(RC_KERNELS_ENGINE, n, NULL);
            rck_shim_reset();
            rc_engine *e;
            ck_assert_msg(rc_engine_create(m, be, f32 ? &num32 : &num, B, T, rows, &e) == RC_OK, "%s",
                          rc_last_error());
            ck_assert_int_eq(e->mlp_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->qkv_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->att_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->h_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->tmp_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->mlpc_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->logits_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_int_eq(e->x_st, f32 ? RC_F32 : RC_BF16);
            ck_assert_msg(rc_full_forward(e, tok, lens, B, out) == RC_OK, "%s", rc_last_error());
            const int64_t slots[4] = {0, 1, 2, 3}, starts[4] = {0, 0, 0, 0}, n_new[4] = {T - 1, T - 1, T - 1, T - 1};
            const int64_t last[4] = {T - 2, 2 * T - 3, 3 * T - 4, 4 * T - 5};
            ck_assert_msg(rc_engine_step(e, slots, starts, n_new, B, tok, last, B, out + rows * WV - B * WV, NULL,
                                         NULL) == RC_OK,
                          "%s", rc_last_error());
            if (n == 1 && f32) /* every other run's log-probs: bitwise these */
                memcpy(ref_out, out, sizeof(float) * rows * WV);
            else
                ck_assert_msg(memcmp(ref_out, out, sizeof(float) * rows * WV) == 0,
                              "%d device(s), %s activations: log-probs differ", n, f32 ? "fp32" : "2-byte");
            int64_t el0[RC_MAX_DEVICES + 1], est[RC_MAX_DEVICES];
            ck_assert(rc_layer_split(m, f32 ? &num32 : &num, RC_KERNELS_ENGINE, n, NULL, B, T, rows, el0, est, NULL,
                                     NULL) == RC_OK);
            ck_assert_int_eq(rck_shim_get(RCK_SHIM_GEMMS_NO_WS), 0); /* cuBLAS always had its workspace */
            ck_assert_int_eq(rck_shim_get(RCK_SHIM_BLAS_WS_BYTES), 1 << 20);
            for (int d = 0; d < n; d++) {
                const int64_t l0 = e->stage_l0[d], l1 = e->stage_l0[d + 1];
                const long long ref = 2LL * ((l1 - l0) * layer_n + (d == 0 ? own_n : 0)) + (l1 - l0) * kv_layer;
                const long long peak = rck_shim_device_peak(d);
                ck_assert_msg(peak <= est[d], "GPU %d of %d: peak %lld > the estimate %lld", d, n, peak,
                              (long long)est[d]);
                if (f32) {
                    peak32[d] = peak;
                    continue;
                }
                printf("%-10s bf16 device memory, %d GPU%s, GPU %d (layers %lld-%lld): peak %lld bytes (%lld with "
                       "fp32 activations), weights at 2 bytes + KV %lld (peak / that %.3f)%s",
                       TEST_NAME, n, n > 1 ? "s" : "", d, (long long)l0, (long long)l1 - 1, peak, peak32[d], ref,
                       (double)peak / ref, n == 1 ? "" : "\n");
                if (n == 1)
                    printf("; inspect's estimate %lld (%.3f; %lld with fp32 activations)\n", (long long)dm.total,
                           (double)dm.total / ref, (long long)dm32.total);
                const long long want_save = d == 0 ? peak_save : peak_save_nohead; /* device 0 holds the head */
                ck_assert_msg(peak32[d] - peak == want_save, "GPU %d of %d: peak %lld with fp32 activations, %lld: "
                              "%lld less, expected %lld", d, n, peak32[d], peak, peak32[d] - peak, want_save);
                ck_assert_msg(peak <= 3 * ref / 2, "GPU %d of %d: peak %lld > 1.5 x %lld", d, n, peak, ref);
                ck_assert(n > 1 || dm.total <= 3 * ref / 2);
                ck_assert(peak >= ref); /* the reference is all there */
            }
            rc_engine_free(e);
            rc_backend_destroy(be);
        }
    }
    free(out);
    free(ref_out);
    rc_model_free(m);
    rc_test_rm_rf(dir);
    ck_assert_int_eq(unsetenv("RC_CUDA_CUBLAS_WORKSPACE_MB"), 0);
}
END_TEST

/* Latent attention in the sampler's default form, mla=engine (the prefill expanded, decode absorbed): each GPU
 * holds the expanded prefill's scratch, row mix and K / V cache of its own layers (forward.c mla_x_create), and
 * the per-GPU estimate (rc_layer_split, inspect --gpus N) counts them there. deepseek_v3_mla in bf16 on 1 and 2
 * fake devices: on each device the estimate covers every byte the engine allocated, and the peak of a full
 * forward and a cached prefill with 3 decode steps, which adds the backend's workspaces; the split run's
 * log-probs are the one-device run's bitwise. */
START_TEST(test_device_memory_mla_engine)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", "deepseek_v3_mla");
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert(m->cfg.mla);
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    num.mla_absorbed = num.mla_prefill_expanded = true;
    const int64_t V = m->cfg.vocab, R = k_lens[0] + k_lens[1] + k_lens[2];
    multi_result r[2];
    for (int n = 1; n <= 2; n++) {
        rck_shim_set(RCK_SHIM_DEVICES, n);
        int64_t l0[RC_MAX_DEVICES + 1], est[RC_MAX_DEVICES];
        ck_assert_msg(rc_layer_split(m, &num, RC_KERNELS_ENGINE, n, NULL, MB, MT, MB * MT, l0, est, NULL, NULL) ==
                          RC_OK, "%s", rc_last_error());
        rck_shim_reset();
        long long created[RC_MAX_DEVICES];
        multi_run(m, &num, RC_KERNELS_ENGINE, n, NULL, &r[n - 1], created);
        for (int d = 0; d < n; d++) {
            ck_assert_int_eq(r[n - 1].split[d + 1], l0[d + 1]); /* the engine's split is the estimate's */
            const long long peak = rck_shim_device_peak(d);
            printf("%-10s deepseek_v3_mla bf16 mla=engine, %d GPU%s, GPU %d (layers %lld-%lld): estimate %lld bytes, "
                   "the engine allocated %lld (estimate - that %lld), peak %lld (workspaces %lld)\n",
                   TEST_NAME, n, n > 1 ? "s" : "", d, (long long)l0[d], (long long)l0[d + 1] - 1, (long long)est[d],
                   created[d], (long long)est[d] - created[d], peak, peak - created[d]);
            ck_assert_msg(created[d] <= est[d], "GPU %d of %d: the engine allocated %lld > the estimate %lld", d, n,
                          created[d], (long long)est[d]);
            ck_assert(peak >= created[d]);
            ck_assert_msg(peak <= est[d], "GPU %d of %d: peak %lld > the estimate %lld", d, n, peak, (long long)est[d]);
        }
    }
    ck_assert(memcmp(r[0].full, r[1].full, sizeof(float) * R * V) == 0);
    ck_assert(memcmp(r[0].dec, r[1].dec, sizeof(float) * 4 * MB * V) == 0);
    multi_free(&r[0]);
    multi_free(&r[1]);
    /* the absorbed form alone (mla=absorbed) in fp32 with invariant kernels: the invariant GEMM's transposed copy
     * of each layer's fp32 W_UK (a GEMM weight per head) is the backend's, in the estimate: on 1 and 2 devices
     * each device's peak at most its estimate, the split bitwise one device */
    rc_numerics inv = rc_numerics_fp32();
    inv.mla_absorbed = true;
    for (int n = 1; n <= 2; n++) {
        rck_shim_set(RCK_SHIM_DEVICES, n);
        int64_t l0[RC_MAX_DEVICES + 1], est[RC_MAX_DEVICES];
        ck_assert(rc_layer_split(m, &inv, RC_KERNELS_INVARIANT, n, NULL, MB, MT, MB * MT, l0, est, NULL, NULL) == RC_OK);
        rck_shim_reset();
        multi_run(m, &inv, RC_KERNELS_INVARIANT, n, NULL, &r[n - 1], NULL);
        for (int d = 0; d < n; d++) {
            const long long peak = rck_shim_device_peak(d);
            printf("%-10s deepseek_v3_mla fp32 invariant mla=absorbed, %d GPU%s, GPU %d: estimate %lld bytes, peak %lld "
                   "(%.3f)\n", TEST_NAME, n, n > 1 ? "s" : "", d, (long long)est[d], peak, (double)peak / est[d]);
            ck_assert_msg(peak <= est[d], "GPU %d of %d: peak %lld > the estimate %lld", d, n, peak, (long long)est[d]);
        }
    }
    ck_assert(memcmp(r[0].full, r[1].full, sizeof(float) * R * V) == 0);
    ck_assert(memcmp(r[0].dec, r[1].dec, sizeof(float) * 4 * MB * V) == 0);
    multi_free(&r[0]);
    multi_free(&r[1]);
    rc_model_free(m);
}
END_TEST

/* The hybrid models split (qnext_hybrid, q35_moe, q35_dense; _i) in bf16 on 1, 2 and 3 fake devices (the
 * estimate's split): on each device the estimate (rc_layer_split, inspect --gpus N) covers every byte the engine
 * allocated -- its layers' weights, the KV cache of its attention layers, the conv and recurrent states of its
 * linear-attention layers, its buffers and scratch (device 0's estimate also counts the host's index arrays and
 * the slots' counters) --, and the peak of a full forward and a cached decode, which adds the backend's
 * workspaces (the mixer's among them), is at most the estimate, which counts them. test_multi_gpu_bitwise runs
 * the same splits for the log-probs. */
START_TEST(test_device_memory_hybrid)
{
    static const char *const names[] = {"qnext_hybrid", "q35_moe", "q35_dense"};
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", names[_i]);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert(m->cfg.n_linear > 0);
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    for (int n = 1; n <= 3; n++) {
        rck_shim_set(RCK_SHIM_DEVICES, n);
        int64_t l0[RC_MAX_DEVICES + 1], est[RC_MAX_DEVICES];
        ck_assert_msg(rc_layer_split(m, &num, RC_KERNELS_ENGINE, n, NULL, MB, MT, MB * MT, l0, est, NULL, NULL) ==
                          RC_OK, "%s", rc_last_error());
        rck_shim_reset();
        long long created[RC_MAX_DEVICES];
        multi_result r;
        multi_run(m, &num, RC_KERNELS_ENGINE, n, NULL, &r, created);
        for (int d = 0; d < n; d++) {
            ck_assert_int_eq(r.split[d + 1], l0[d + 1]); /* the engine's split is the estimate's */
            const long long peak = rck_shim_device_peak(d);
            printf("%-10s %-12s bf16, %d GPU%s, GPU %d (layers %lld-%lld): estimate %lld bytes, the engine allocated "
                   "%lld (estimate - that %lld), peak %lld (workspaces %lld)\n",
                   TEST_NAME, names[_i], n, n > 1 ? "s" : "", d, (long long)l0[d], (long long)l0[d + 1] - 1,
                   (long long)est[d], created[d], (long long)est[d] - created[d], peak, peak - created[d]);
            ck_assert_msg(created[d] <= est[d], "GPU %d of %d: the engine allocated %lld > the estimate %lld", d, n,
                          created[d], (long long)est[d]);
            ck_assert(peak >= created[d]);
            ck_assert_msg(peak <= est[d], "GPU %d of %d: peak %lld > the estimate %lld", d, n, peak, (long long)est[d]);
        }
        multi_free(&r);
    }
    rc_model_free(m);
}
END_TEST

/* The backend's workspaces in the estimate under the numerics that change which ones a run takes, on 1 and 2 fake
 * devices (the default split): each device's peak of a full forward and a cached decode at most its estimate
 * (rc_layer_split's, inspect --gpus N's). bf16 engine kernels with --upcast norm (a 2-byte weight widened for
 * an fp32-input GEMM), --upcast rope (an fp32 KV cache), --upcast lm_head (the
 * fp32 head), autocast on a tied head (its bf16 copy for cuBLAS), fp16, tp=2 (K-sliced partials), fp32 engine
 * kernels, and bf16 invariant kernels (no cuBLAS, no workspace for it) on llama_gqa; Baichuan2's NormHead (the
 * head widened once) on baichuan2_7b. cuBLAS's fixed workspace set to 1 MiB (RC_CUDA_CUBLAS_WORKSPACE_MB), so
 * that the rest of the estimate is what the peak is compared with. */
START_TEST(test_device_memory_numerics)
{
    ck_assert_int_eq(setenv("RC_CUDA_CUBLAS_WORKSPACE_MB", "1", 1), 0);
    static const struct {
        const char *fixture, *label;
        rc_dtype dt;
        unsigned upcast;
        rc_precision mode;
        int tp;
        rc_kernels k;
    } cases[] = {
        {"llama_gqa", "bf16 --upcast norm", RC_BF16, RC_UPCAST_NORM, RC_PREC_PURE, 1, RC_KERNELS_ENGINE},
        {"llama_gqa", "bf16 --upcast rope", RC_BF16, RC_UPCAST_ROPE, RC_PREC_PURE, 1, RC_KERNELS_ENGINE},
        {"llama_gqa", "bf16 --upcast lm_head", RC_BF16, RC_UPCAST_LM_HEAD, RC_PREC_PURE, 1, RC_KERNELS_ENGINE},
        {"llama_gqa", "bf16 autocast", RC_BF16, 0, RC_PREC_AUTOCAST, 1, RC_KERNELS_ENGINE},
        {"llama_gqa", "fp16", RC_F16, 0, RC_PREC_PURE, 1, RC_KERNELS_ENGINE},
        {"llama_gqa", "bf16 tp=2", RC_BF16, 0, RC_PREC_PURE, 2, RC_KERNELS_ENGINE},
        {"llama_gqa", "fp32 engine", RC_F32, 0, RC_PREC_PURE, 1, RC_KERNELS_ENGINE},
        {"llama_gqa", "bf16 invariant", RC_BF16, 0, RC_PREC_PURE, 1, RC_KERNELS_INVARIANT},
        {"baichuan2_7b", "bf16 NormHead", RC_BF16, 0, RC_PREC_PURE, 1, RC_KERNELS_ENGINE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[4096];
        rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", cases[i].fixture);
        rc_model *m;
        ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
        rc_numerics num = rc_numerics_fp32();
        num.dt = cases[i].dt;
        num.upcast = cases[i].upcast;
        num.mode = cases[i].mode;
        num.tp = cases[i].tp;
        for (int n = 1; n <= 2; n++) {
            rck_shim_set(RCK_SHIM_DEVICES, n);
            int64_t l0[RC_MAX_DEVICES + 1], est[RC_MAX_DEVICES];
            ck_assert(rc_layer_split(m, &num, cases[i].k, n, NULL, MB, MT, MB * MT, l0, est, NULL, NULL) == RC_OK);
            rck_shim_reset();
            multi_result r;
            multi_run(m, &num, cases[i].k, n, NULL, &r, NULL);
            for (int d = 0; d < n; d++) {
                const long long peak = rck_shim_device_peak(d);
                printf("%-10s %-12s %-22s %d GPU%s, GPU %d: peak %lld bytes, estimate %lld (%.3f)\n", TEST_NAME,
                       cases[i].fixture, cases[i].label, n, n > 1 ? "s" : " ", d, peak, (long long)est[d],
                       (double)peak / est[d]);
                ck_assert_msg(peak <= est[d], "%s, GPU %d of %d: peak %lld > the estimate %lld", cases[i].label, d, n,
                              peak, (long long)est[d]);
            }
            ck_assert_int_eq(rck_shim_get(RCK_SHIM_GEMMS_NO_WS), 0);
            ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 0);
            multi_free(&r);
        }
        rc_model_free(m);
    }
    ck_assert_int_eq(unsetenv("RC_CUDA_CUBLAS_WORKSPACE_MB"), 0);
}
END_TEST

/* The number of GPUs chosen by the estimate (place.h rc_gpu_plan_make, what run does without --gpus): the wide
 * Llama with the fake devices' budgets set from its estimate. One byte less than its one-GPU estimate on each of
 * 2 devices: 2 GPUs, the default split, and the log-probs of the full forward and the cached decode bitwise those
 * of one device with the default 16 GiB, each device's peak at most its share of the estimate; exactly its
 * estimate, or the default budget: one GPU, and with exactly the estimate the run completes there (the backend's
 * workspaces are in the estimate), bitwise, its peak at most the estimate; cuBLAS ran with its fixed workspace
 * (cublasSetWorkspace) on every call; less than the fuller GPU's share of the 2-GPU split: no fit (RC_ERR_NOMEM,
 * one line, nothing allocated); --gpus 1 on a device one byte short: refused by name. */
START_TEST(test_multi_gpu_auto)
{
    char dir[64];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_test_auto_") != NULL);
    write_wide_model(dir);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    rc_test_rm_rf(dir);
    const int64_t V = m->cfg.vocab, R = k_lens[0] + k_lens[1] + k_lens[2];
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    const rc_engine_shape eng = {num, RC_KERNELS_ENGINE, MB, MT, MB * MT, RC_PHASE_GENERATE | RC_PHASE_FORWARD};
    rck_shim_set(RCK_SHIM_DEVICES, 2);
    int64_t l0_1[2], need1[1], l0_2[3], need2[2];
    ck_assert(rc_gpu_need(m, &eng, 1, 1, NULL, l0_1, need1) == RC_OK);
    ck_assert(rc_gpu_need(m, &eng, 1, 2, NULL, l0_2, need2) == RC_OK);
    const int64_t fuller = need2[0] > need2[1] ? need2[0] : need2[1];
    ck_assert(fuller < need1[0]);
    { /* the backend's workspaces are one set per GPU and backend, shared by its engines: two engines of the
       * same kernels in one phase need twice the engine less one set of workspaces; the fp32 reference's own
       * backend (RC_PHASE_REFERENCE) brings its own set */
        int64_t ws[RC_CUWS_N], one_l0[2], both[1], ref[1];
        ck_assert(rc_cuda_ws_bytes(m, &num, RC_KERNELS_ENGINE, MB, MT, MB * MT, 0, m->cfg.n_layers, true, ws) == RC_OK);
        const int64_t shared = rc_cuda_ws_total(ws) - ws[RC_CUWS_SHADOW];
        ck_assert_int_gt(shared, rc_cuws_blas_bytes()); /* cuBLAS's and more */
        const rc_engine_shape two_eng[2] = {eng, eng};
        ck_assert(rc_gpu_need(m, two_eng, 2, 1, NULL, one_l0, both) == RC_OK);
        ck_assert_int_eq(both[0], 2 * need1[0] - shared);
        rc_engine_shape with_ref[2] = {eng, eng};
        with_ref[1].phases = RC_PHASE_REFERENCE;
        ck_assert(rc_gpu_need(m, with_ref, 2, 1, NULL, one_l0, ref) == RC_OK);
        ck_assert_int_eq(ref[0], need1[0] + shared); /* another phase: its engine not at the same time, its
                                                      * backend's workspaces held all along */
    }
    multi_result one, two;
    rc_gpu_plan plan;
    /* the default budget: one GPU */
    ck_assert_msg(rc_gpu_plan_make(m, &eng, 1, 2, 0, NULL, rc_cuda_mem_info, &plan) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(plan.n_dev, 1);
    ck_assert(plan.automatic && plan.need_one == need1[0]);
    multi_run(m, &num, RC_KERNELS_ENGINE, 1, NULL, &one, NULL);
    /* one byte short of the one-GPU estimate on every device: 2 GPUs */
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, need1[0] - 1);
    ck_assert_msg(rc_gpu_plan_make(m, &eng, 1, 2, 0, NULL, rc_cuda_mem_info, &plan) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(plan.n_dev, 2);
    ck_assert(plan.automatic);
    ck_assert_int_eq(plan.l0[1], l0_2[1]);
    ck_assert_int_eq(plan.free_b[1], need1[0] - 1);
    char text[192];
    rc_gpu_plan_str(&plan, text, sizeof text);
    printf("%-10s wide Llama, budget %lld bytes a device (one-GPU estimate %lld, 2-GPU %lld / %lld): %s\n", TEST_NAME,
           (long long)need1[0] - 1, (long long)need1[0], (long long)need2[0], (long long)need2[1], text);
    rck_shim_reset();
    multi_run(m, &num, RC_KERNELS_ENGINE, plan.n_dev, NULL, &two, NULL); /* within the budget */
    ck_assert_int_eq(two.split[1], plan.l0[1]);
    for (int d = 0; d < 2; d++) {
        const long long peak = rck_shim_device_peak(d);
        printf("%-10s wide Llama, 2 GPUs chosen: GPU %d peak %lld bytes, estimate %lld (peak / estimate %.4f)\n",
               TEST_NAME, d, peak, (long long)need2[d], (double)peak / need2[d]);
        ck_assert(peak > 0 && peak <= need1[0] - 1);
        ck_assert_msg(peak <= need2[d], "GPU %d: peak %lld > its estimate %lld", d, peak, (long long)need2[d]);
    }
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_GEMMS_NO_WS), 0);
    ck_assert_int_gt(rck_shim_get(RCK_SHIM_GEMMS), 0);
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_BLAS_WS_BYTES), rc_cuws_blas_bytes());
    ck_assert_msg(memcmp(one.full, two.full, sizeof(float) * R * V) == 0, "2 GPUs chosen: full forward differs");
    ck_assert_msg(memcmp(one.dec, two.dec, sizeof(float) * 4 * MB * V) == 0, "2 GPUs chosen: decode differs");
    multi_free(&two);
    /* exactly the estimate: one GPU, and the run completes there */
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, need1[0]);
    ck_assert(rc_gpu_plan_make(m, &eng, 1, 2, 0, NULL, rc_cuda_mem_info, &plan) == RC_OK);
    ck_assert_int_eq(plan.n_dev, 1);
    rck_shim_reset();
    multi_result exact;
    multi_run(m, &num, RC_KERNELS_ENGINE, 1, NULL, &exact, NULL);
    {
        const long long peak = rck_shim_device_peak(0);
        printf("%-10s wide Llama, budget = the one-GPU estimate %lld bytes: ran on one GPU, peak %lld (peak / "
               "estimate %.4f)\n", TEST_NAME, (long long)need1[0], peak, (double)peak / need1[0]);
        ck_assert(peak <= need1[0]);
    }
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_GEMMS_NO_WS), 0);
    ck_assert(memcmp(one.full, exact.full, sizeof(float) * R * V) == 0);
    ck_assert(memcmp(one.dec, exact.dec, sizeof(float) * 4 * MB * V) == 0);
    multi_free(&exact);
    multi_free(&one);
    /* one device, one byte short: no fit */
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, need1[0] - 1);
    rck_shim_set(RCK_SHIM_DEVICES, 1);
    ck_assert_int_eq(rc_gpu_plan_make(m, &eng, 1, 1, 0, NULL, rc_cuda_mem_info, &plan), RC_ERR_NOMEM);
    printf("%-10s no fit: %s\n", TEST_NAME, rc_last_error());
    ck_assert(strchr(rc_last_error(), '\n') == NULL);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "too little GPU memory: the run needs"));
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "1 GPU is visible"));
    /* 2 devices, each one byte short of the fuller GPU's share: no fit */
    rck_shim_set(RCK_SHIM_DEVICES, 2);
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, fuller - 1);
    ck_assert_int_eq(rc_gpu_plan_make(m, &eng, 1, 2, 0, NULL, rc_cuda_mem_info, &plan), RC_ERR_NOMEM);
    printf("%-10s no fit: %s\n", TEST_NAME, rc_last_error());
    ck_assert(strchr(rc_last_error(), '\n') == NULL);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "split over 2 GPUs"));
    ck_assert_int_eq(rck_shim_get(RCK_SHIM_ALLOC_BYTES), 0);
    /* --gpus 1 on a device one byte short; --gpus 2 where both fit */
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, need1[0] - 1);
    ck_assert_int_eq(rc_gpu_plan_make(m, &eng, 1, 2, 1, NULL, rc_cuda_mem_info, &plan), RC_ERR_NOMEM);
    printf("%-10s --gpus 1: %s\n", TEST_NAME, rc_last_error());
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "too little GPU memory for --gpus 1"));
    ck_assert(rc_gpu_plan_make(m, &eng, 1, 2, 2, NULL, rc_cuda_mem_info, &plan) == RC_OK);
    ck_assert(plan.n_dev == 2 && !plan.automatic && plan.checked);
    rck_shim_set(RCK_SHIM_MEMORY_BYTES, 0);
    rc_model_free(m);
}
END_TEST

/* The CLI over the host build with 2 and 3 fake devices (RCK_SHIM_DEVICES in its environment): --gpus and
 * --layer-split give the statistics of one device to the digit, the device is named "N x ..."; --gpus on the
 * CPU, more GPUs than visible and a split that does not add up are refused by name */
static char g_out[1 << 16];

/* dir/p.ids: n prompts of 5 token ids, within the fixtures' vocabulary of 128 and the tiny model's; its path to
 * pf */
static void write_prompt_ids(const char *dir, int n, char *pf, size_t pfn)
{
    snprintf(pf, pfn, "%s/p.ids", dir);
    FILE *f = fopen(pf, "w");
    ck_assert(f != NULL);
    for (int i = 0; i < n; i++)
        fprintf(f, "%d %d %d %d %d\n", 3 + i, 17 + 5 * i, 40 + i, 90 + 3 * i, 7 + 2 * i);
    ck_assert(fclose(f) == 0);
}

static int cli_env(const char *env, const char *args)
{
    char tmp[] = "/tmp/rc_cuda_multiXXXXXX";
    int fd = mkstemp(tmp);
    ck_assert(fd >= 0);
    close(fd);
    char cmd[8192], src[4096];
    rc_test_source_path(src, sizeof src, ".");
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' %s >'%s' 2>&1 </dev/null", src, env, RC_CUDA_HOST_CLI, args, tmp);
    int st = system(cmd);
    FILE *f = fopen(tmp, "rb");
    size_t got = f ? fread(g_out, 1, sizeof g_out - 1, f) : 0;
    g_out[got] = '\0';
    if (f)
        fclose(f);
    unlink(tmp);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* the statistics of a run's JSON ("lens" up to the timings) */
static char *stats_of(const char *json)
{
    const char *a0 = strstr(json, "\"lens\""), *a1 = strstr(json, "\"seconds_generate\"");
    ck_assert_msg(a0 && a1 && a1 > a0, "%s", json);
    return strndup(a0, (size_t)(a1 - a0));
}

START_TEST(test_multi_gpu_cli)
{
    const char *common = "--num-prompts 3 --len 4,8 --samples 2 -q --backend cuda --json --out none --dtype bf16 "
                         "--trainer dtype=fp32";
    char args[1024];
    snprintf(args, sizeof args, "%s", common);
    ck_assert_msg(cli_env("RCK_SHIM_DEVICES=3", args) == 0, "%s", g_out);
    char *one = stats_of(g_out);
    ck_assert_ptr_null(strstr(one, "\"std\": 0,")); /* a bf16 sampler, an fp32 trainer: ratios that are not all 1 */
    const char *splits[] = {"--gpus 2", "--gpus 2 --layer-split 5,1", "--gpus 3", "--layer-split 1,2,3"};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        snprintf(args, sizeof args, "%s %s", common, splits[i]);
        ck_assert_msg(cli_env("RCK_SHIM_DEVICES=3", args) == 0, "%s: %s", args, g_out);
        char *got = stats_of(g_out);
        ck_assert_msg(!strcmp(got, one), "%s:\n%s\none GPU:\n%s", splits[i], got, one);
        ck_assert_ptr_nonnull(strstr(g_out, i < 2 ? "\"device\": \"2 x host emulation" : "\"device\": \"3 x host emulation"));
        printf("%-10s CLI %s: the statistics of one GPU to the digit\n", TEST_NAME, splits[i]);
        free(got);
    }
    free(one);
    /* latent attention with the sampler's default mla=engine (the prompt's prefill expanded, decode absorbed):
     * each GPU keeps the expanded prefill's scratch and cache of its own layers; two GPUs give one GPU's
     * statistics to the digit */
    {
        char pdir[64], pf[128];
        ck_assert(rc_test_mkdtemp(pdir, sizeof pdir, "/tmp/rc_test_multi_mla_") != NULL);
        write_prompt_ids(pdir, 4, pf, sizeof pf);
        char *st[2];
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args,
                     "--model data/fixtures/deepseek_v3_mla --prompts %s --len 4,8 --samples 2 -q --backend cuda "
                     "--json --out none --dtype bf16%s", pf, k ? " --gpus 2" : "");
            ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s: %s", args, g_out);
            st[k] = stats_of(g_out);
        }
        ck_assert_ptr_null(strstr(st[0], "\"std\": 0,"));
        ck_assert_msg(!strcmp(st[0], st[1]), "deepseek_v3_mla --gpus 2:\n%s\none GPU:\n%s", st[1], st[0]);
        printf("%-10s CLI deepseek_v3_mla (sampler mla=engine) --gpus 2: the statistics of one GPU to the digit\n",
               TEST_NAME);
        free(st[0]);
        free(st[1]);
        rc_test_rm_rf(pdir);
    }
    /* a hybrid model (Gated DeltaNet layers, their states on their GPU), the sampler's state in the dtype with
     * its prefix cache, chunks of 16: 2 and 3 GPUs give one GPU's statistics to the digit; and its trace over 2
     * GPUs (the linear layers' states captured, the state before a prompt's last token computed on the device
     * from zeros) the one-GPU trace */
    {
        char hdir[64], pf[128];
        ck_assert(rc_test_mkdtemp(hdir, sizeof hdir, "/tmp/rc_test_multi_hyb_") != NULL);
        write_prompt_ids(hdir, 4, pf, sizeof pf);
        char *st[3];
        for (int k = 0; k < 3; k++) {
            snprintf(args, sizeof args,
                     "--model data/fixtures/qnext_hybrid --prompts %s --len 4,8 --samples 2 -q --backend cuda "
                     "--json --out none --dtype bf16 --sampler state=dtype,prefix-cache=on,chunk=16%s", pf,
                     k == 1 ? " --gpus 2" : k == 2 ? " --gpus 3" : "");
            ck_assert_msg(cli_env("RCK_SHIM_DEVICES=3", args) == 0, "%s: %s", args, g_out);
            st[k] = stats_of(g_out);
        }
        ck_assert_ptr_null(strstr(st[0], "\"std\": 0,"));
        for (int k = 1; k < 3; k++)
            ck_assert_msg(!strcmp(st[0], st[k]), "qnext_hybrid --gpus %d:\n%s\none GPU:\n%s", k + 1, st[k], st[0]);
        printf("%-10s CLI qnext_hybrid (state=dtype, prefix-cache=on, chunk=16) --gpus 2, --gpus 3: the statistics "
               "of one GPU to the digit\n", TEST_NAME);
        for (int k = 0; k < 3; k++)
            free(st[k]);
        snprintf(args, sizeof args, "--model data/fixtures/qnext_hybrid --prompts %s --len 4 --samples 1 -q "
                 "--backend cuda --dtype bf16 --out %s/a.h5", pf, hdir);
        ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s", g_out);
        char *ht[2];
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args, "trace %s/a.h5 --backend cuda --json --out none%s", hdir, k ? " --gpus 2" : "");
            ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s: %s", args, g_out);
            char *sec = strstr(g_out, "\"seconds\": "), *first = strstr(g_out, "\"first\"");
            ck_assert_msg(sec && first && first > sec, "%s", g_out);
            memmove(sec, first, strlen(first) + 1); /* the timing cut out */
            ht[k] = strdup(g_out);
        }
        ck_assert_msg(!strcmp(ht[0], ht[1]), "qnext_hybrid trace --gpus 2:\n%s\none GPU:\n%s", ht[1], ht[0]);
        printf("%-10s CLI qnext_hybrid trace --gpus 2: the one-GPU trace (%zu bytes of JSON)\n", TEST_NAME,
               strlen(ht[0]));
        free(ht[0]);
        free(ht[1]);
        rc_test_rm_rf(hdir);
    }
    /* trace --gpus 2: every op's capture of the split run, downloaded from the GPU that computed it, is the one
     * GPU trace's (the JSON but its timing) */
    char dir[64];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_test_multi_") != NULL);
    snprintf(args, sizeof args, "--num-prompts 2 --len 4 --samples 1 -q --backend cuda --dtype bf16 --out %s/a.h5", dir);
    ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s", g_out);
    char *tr[2];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "trace %s/a.h5 --backend cuda --json --out none%s", dir, k ? " --gpus 2" : "");
        ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s: %s", args, g_out);
        char *sec = strstr(g_out, "\"seconds\": "), *first = strstr(g_out, "\"first\"");
        ck_assert_msg(sec && first && first > sec && strstr(g_out, "\"layers\": 6"), "%s", g_out);
        memmove(sec, first, strlen(first) + 1); /* the timing cut out */
        tr[k] = strdup(g_out);
    }
    ck_assert_msg(!strcmp(tr[0], tr[1]), "trace --gpus 2:\n%s\none GPU:\n%s", tr[1], tr[0]);
    printf("%-10s CLI trace --gpus 2: the one-GPU trace (%zu bytes of JSON)\n", TEST_NAME, strlen(tr[0]));
    free(tr[0]);
    free(tr[1]);
    rc_test_rm_rf(dir);
    snprintf(args, sizeof args, "%s --gpus 3", common);
    ck_assert_int_eq(cli_env("RCK_SHIM_DEVICES=2", args), 8);
    ck_assert_ptr_nonnull(strstr(g_out, "--gpus 3 needs 3 GPUs; 2 are visible"));
    snprintf(args, sizeof args, "%s --gpus 2 --layer-split 1,1", common);
    ck_assert_int_eq(cli_env("RCK_SHIM_DEVICES=2", args), 2);
    ck_assert_ptr_nonnull(strstr(g_out, "--layer-split: 2 layers in all, but the model runs 6"));
    snprintf(args, sizeof args, "--num-prompts 3 --len 4 --samples 2 -q --out none --backend cpu --gpus 2");
    ck_assert_int_eq(cli_env("", args), 2);
    ck_assert_ptr_nonnull(strstr(g_out, "--gpus 2 splits the model over CUDA GPUs"));
    snprintf(args, sizeof args, "%s --gpus 3 --layer-split 1,3", common);
    ck_assert_int_eq(cli_env("", args), 2);
    ck_assert_ptr_nonnull(strstr(g_out, "--layer-split gives 2 GPUs' layers, --gpus 3"));
}
END_TEST

/* What run's automatic choice weighs for the CLI cases (3 prompts of 5 ids, --len 4,8, --samples 2, bf16, engine
 * kernels) on the model at `rel`: its engines sized as run sizes them (rc_run_engine_shapes) and their estimate
 * on 1 GPU (need1) and split over 2 (l0, need2, rc_gpu_need); the number of engines */
static int cli_auto_need(const char *rel, int64_t l0[3], int64_t need1[1], int64_t need2[2])
{
    char model[4096];
    rc_test_source_path(model, sizeof model, "%s", rel);
    rc_model *m;
    ck_assert_msg(rc_model_load(model, &m) == RC_OK, "%s", rc_last_error());
    rc_rollout_cfg cfg = {.n_prompts = 3, .prompt_max = 5, .samples = 2, .batch = 32, .n_lens = 2, .lens = {4, 8}};
    cfg.num = rc_numerics_fp32();
    cfg.num.dt = RC_BF16;
    cfg.num_trainer = cfg.num;
    rc_engine_shape eng[RC_RUN_MAX_ENGINES];
    const int n_eng = rc_run_engine_shapes(m, &cfg, RC_KERNELS_ENGINE, RC_KERNELS_ENGINE, eng);
    ck_assert(rc_gpu_need(m, eng, n_eng, 1, NULL, l0, need1) == RC_OK);
    ck_assert(rc_gpu_need(m, eng, n_eng, 2, NULL, l0, need2) == RC_OK);
    rc_model_free(m);
    return n_eng;
}

/* The CLI chooses the GPUs (run without --gpus on the fake devices, RCK_SHIM_MEMORY their budgets): the bundled
 * model with 3 prompts of 5 token ids, 2 samples, --len 4,8 in bf16, whose engine the test sizes as run does
 * (rc_run_engine_shapes) and estimates (rc_gpu_need). The default budget: one GPU, said in gpu_split; one byte
 * less than the one-GPU estimate on each of 2 devices: the stderr line, 2 GPUs named in device and gpu_split,
 * the statistics of one GPU to the digit; exactly the one-GPU estimate, or 3 devices of exactly the fuller GPU's
 * share of the 2-GPU split: 1 and 2 GPUs chosen and the run completes (the backend's workspaces are in the
 * estimate), one GPU's statistics; less than the fuller GPU's share: exit 7 with one line and no output
 * file; --gpus 1 one byte short: exit 7 naming it. */
START_TEST(test_multi_gpu_auto_cli)
{
    char pdir[64], pf[128], h5[128], args[1024], env[128];
    ck_assert(rc_test_mkdtemp(pdir, sizeof pdir, "/tmp/rc_test_auto_cli_") != NULL);
    write_prompt_ids(pdir, 3, pf, sizeof pf);
    snprintf(h5, sizeof h5, "%s/out.h5", pdir);
    int64_t l0[3], need1[1], need2[2];
    ck_assert_int_eq(cli_auto_need("data/models/pythia-rc-tiny", l0, need1, need2), 1);
    const int64_t fuller = need2[0] > need2[1] ? need2[0] : need2[1];
    char need_s[32], free_s[32], split_s[64];
    rc_bytes_pair_str(need1[0], need1[0] - 1, need_s, free_s, sizeof need_s);
    snprintf(split_s, sizeof split_s, "(0-%lld, %lld-%lld)", (long long)l0[1] - 1, (long long)l0[1], (long long)l0[2] - 1);
    const char *common = "--len 4,8 --samples 2 -q --backend cuda --json --dtype bf16";
    /* the default budget: one GPU */
    snprintf(args, sizeof args, "--prompts %s %s --out none", pf, common);
    ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s", g_out);
    char *one = stats_of(g_out);
    ck_assert_ptr_null(strstr(g_out, "layers split over"));
    ck_assert_ptr_nonnull(strstr(g_out, "\"device\": \"host emulation"));
    ck_assert_ptr_nonnull(strstr(g_out, "\"gpu_split\": \"1 GPU (automatic: "));
    /* one byte short of the one-GPU estimate: 2 GPUs */
    snprintf(env, sizeof env, "RCK_SHIM_DEVICES=2 RCK_SHIM_MEMORY=%lld", (long long)need1[0] - 1);
    ck_assert_msg(cli_env(env, args) == 0, "%s", g_out);
    char line[256];
    snprintf(line, sizeof line, "ratiocheck: the model needs %s on one GPU, GPU 0 has %s free: layers split over 2 "
             "GPUs %s\n", need_s, free_s, split_s);
    ck_assert_msg(strstr(g_out, line) != NULL, "'%s' lacks '%s'", g_out, line);
    ck_assert_ptr_nonnull(strstr(g_out, "\"device\": \"2 x host emulation"));
    ck_assert_ptr_nonnull(strstr(g_out, "\"gpu_split\": \"2 GPUs, layers "));
    char *two = stats_of(g_out);
    ck_assert_msg(!strcmp(one, two), "chosen 2 GPUs:\n%s\none GPU:\n%s", two, one);
    printf("%-10s CLI without --gpus, %s: %.*s: the statistics of one GPU to the digit\n", TEST_NAME, env,
           (int)(strchr(g_out, '\n') - g_out), g_out);
    free(two);
    /* exactly the one-GPU estimate: one GPU, the run completes (the backend's workspaces are in the estimate) */
    snprintf(env, sizeof env, "RCK_SHIM_DEVICES=2 RCK_SHIM_MEMORY=%lld", (long long)need1[0]);
    ck_assert_msg(cli_env(env, args) == 0, "%s: %s", env, g_out);
    ck_assert_ptr_nonnull(strstr(g_out, "\"gpu_split\": \"1 GPU (automatic: "));
    char *exact = stats_of(g_out);
    ck_assert_msg(!strcmp(one, exact), "one GPU of exactly the estimate:\n%s\none GPU:\n%s", exact, one);
    free(exact);
    /* 3 devices of exactly the fuller GPU's share of the 2-GPU split: 2 chosen, and the run completes there */
    snprintf(env, sizeof env, "RCK_SHIM_DEVICES=3 RCK_SHIM_MEMORY=%lld", (long long)fuller);
    ck_assert_msg(cli_env(env, args) == 0, "%s: %s", env, g_out);
    printf("%-10s CLI exactly the 2-GPU estimate (%s): %.*s\n", TEST_NAME, env, (int)(strchr(g_out, '\n') - g_out),
           g_out);
    ck_assert_ptr_nonnull(strstr(g_out, "layers split over 2 GPUs"));
    ck_assert_ptr_nonnull(strstr(g_out, "\"device\": \"2 x host emulation"));
    char *fit2 = stats_of(g_out);
    ck_assert_msg(!strcmp(one, fit2), "2 GPUs of exactly their estimate:\n%s\none GPU:\n%s", fit2, one);
    free(fit2);
    /* no fit: exit 7, one line, no output file */
    free(one);
    snprintf(env, sizeof env, "RCK_SHIM_DEVICES=2 RCK_SHIM_MEMORY=%lld", (long long)fuller - 1);
    snprintf(args, sizeof args, "--prompts %s %s --out %s", pf, common, h5);
    ck_assert_int_eq(cli_env(env, args), 7);
    printf("%-10s CLI no fit (%s): %s", TEST_NAME, env, g_out);
    ck_assert_ptr_nonnull(strstr(g_out, "ratiocheck: CUDA backend: too little GPU memory: the run needs"));
    ck_assert_ptr_eq(strchr(g_out, '\n'), g_out + strlen(g_out) - 1); /* one line */
    ck_assert_int_ne(access(h5, F_OK), 0);
    /* --gpus 1 one byte short */
    snprintf(env, sizeof env, "RCK_SHIM_DEVICES=2 RCK_SHIM_MEMORY=%lld", (long long)need1[0] - 1);
    snprintf(args, sizeof args, "--prompts %s %s --out %s --gpus 1", pf, common, h5);
    ck_assert_int_eq(cli_env(env, args), 7);
    printf("%-10s CLI --gpus 1 (%s): %s", TEST_NAME, env, g_out);
    ck_assert_ptr_nonnull(strstr(g_out, "too little GPU memory for --gpus 1: the run needs"));
    ck_assert_ptr_eq(strchr(g_out, '\n'), g_out + strlen(g_out) - 1);
    ck_assert_int_ne(access(h5, F_OK), 0);
    DIR *dd = opendir(pdir); /* nothing but the prompts there */
    ck_assert(dd != NULL);
    int n_files = 0;
    for (struct dirent *de; (de = readdir(dd)) != NULL;)
        n_files += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(dd);
    ck_assert_int_eq(n_files, 1);
    rc_test_rm_rf(pdir);
}
END_TEST

/* The automatic choice on a hybrid model (qnext_hybrid; place.c rc_gpu_plan_make through rc_layer_split, which
 * places the linear layers' states on their GPU): with the default budget one GPU; one byte less than the one-GPU
 * estimate on each of 3 fake devices splits the layers over 2 GPUs, said on stderr with the estimate's split, and
 * the run completes (the estimate counts the backend's workspaces, the mixer's among them) with one GPU's
 * statistics to the digit. */
START_TEST(test_multi_gpu_auto_hybrid_cli)
{
    char pdir[64], pf[128], args[1024], env[128];
    ck_assert(rc_test_mkdtemp(pdir, sizeof pdir, "/tmp/rc_test_auto_hyb_") != NULL);
    write_prompt_ids(pdir, 3, pf, sizeof pf);
    int64_t l0[3], need1[1], need2[2];
    ck_assert_int_gt(cli_auto_need("data/fixtures/qnext_hybrid", l0, need1, need2), 0);
    const char *common = "--model data/fixtures/qnext_hybrid --len 4,8 --samples 2 -q --backend cuda --json "
                         "--dtype bf16 --out none";
    snprintf(args, sizeof args, "--prompts %s %s", pf, common);
    ck_assert_msg(cli_env("RCK_SHIM_DEVICES=3", args) == 0, "%s", g_out);
    char *one = stats_of(g_out);
    ck_assert_ptr_nonnull(strstr(g_out, "\"gpu_split\": \"1 GPU (automatic: "));
    snprintf(env, sizeof env, "RCK_SHIM_DEVICES=3 RCK_SHIM_MEMORY=%lld", (long long)need1[0] - 1);
    const int rc = cli_env(env, args);
    printf("%-10s CLI qnext_hybrid without --gpus, %s (2-GPU estimate %lld / %lld): exit %d: %.*s\n", TEST_NAME, env,
           (long long)need2[0], (long long)need2[1], rc, (int)(strchr(g_out, '\n') ? strchr(g_out, '\n') - g_out : 0),
           g_out);
    char line[160];
    snprintf(line, sizeof line, "GPU 0 has %lld bytes free: layers split over 2 GPUs (0-%lld, %lld-%lld)\n",
             (long long)need1[0] - 1, (long long)l0[1] - 1, (long long)l0[1], (long long)l0[2] - 1);
    ck_assert_msg(strstr(g_out, line) != NULL, "'%s' lacks '%s'", g_out, line);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, g_out);
    ck_assert_ptr_nonnull(strstr(g_out, "\"gpu_split\": \"2 GPUs, layers "));
    char *two = stats_of(g_out);
    ck_assert_msg(!strcmp(one, two), "chosen 2 GPUs:\n%s\none GPU:\n%s", two, one);
    free(two);
    free(one);
    rc_test_rm_rf(pdir);
}
END_TEST

/* fp8 weights through the CLI over 2 fake devices: weights=as-stored on the DeepSeek-V3 FP8 checkpoint and
 * weights=fp8 (per tensor) on the bundled model, --gpus 2 (and an odd --layer-split) give one GPU's statistics
 * to the digit */
START_TEST(test_multi_gpu_fp8_cli)
{
    static const struct {
        const char *args, *splits[2];
    } runs[] = {
        {"--model data/fixtures/moe_fp8/deepseek_v3_fp8 --prompts data/fixtures/moe_fp8/prompts.ids --len 4,8 "
         "--samples 2 --sampler weights=as-stored",
         {"--gpus 2", "--gpus 2 --layer-split 1,2"}},
        {"--num-prompts 3 --len 4,8 --samples 2 --sampler weights=fp8", {"--gpus 2", "--gpus 2 --layer-split 5,1"}},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char args[1024];
        snprintf(args, sizeof args, "%s -q --backend cuda --json --out none --dtype bf16", runs[i].args);
        ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s: %s", args, g_out);
        char *one = stats_of(g_out);
        ck_assert_ptr_null(strstr(one, "\"std\": 0,"));
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args, "%s -q --backend cuda --json --out none --dtype bf16 %s", runs[i].args,
                     runs[i].splits[k]);
            ck_assert_msg(cli_env("RCK_SHIM_DEVICES=2", args) == 0, "%s: %s", args, g_out);
            ck_assert_ptr_nonnull(strstr(g_out, "\"device\": \"2 x host emulation"));
            char *got = stats_of(g_out);
            ck_assert_msg(!strcmp(got, one), "%s:\n%s\none GPU:\n%s", args, got, one);
            printf("%-10s CLI %s %s: the statistics of one GPU to the digit\n", TEST_NAME,
                   strstr(runs[i].args, "--sampler"), runs[i].splits[k]);
            free(got);
        }
        free(one);
    }
}
END_TEST
#endif

void multi_tests(TCase *tc)
{
    tcase_add_loop_test(tc, test_multi_gpu_bitwise, 0, 2 * N_MULTI);
    tcase_add_test(tc, test_multi_gpu_refused);
    tcase_add_loop_test(tc, test_multi_gpu_fp8, 0, 2 * N_FP8);
    tcase_add_loop_test(tc, test_multi_gpu_hybrid_estimate, 0, 2);
#ifdef RC_TEST_EMULATE
    tcase_add_test(tc, test_multi_gpu_faults);
    tcase_add_test(tc, test_multi_gpu_cli);
    tcase_add_test(tc, test_multi_gpu_fp8_cli);
    tcase_add_test(tc, test_device_memory_whole);
    tcase_add_test(tc, test_device_memory_mla_engine);
    tcase_add_loop_test(tc, test_device_memory_hybrid, 0, 3);
    tcase_add_test(tc, test_device_memory_numerics);
    tcase_add_test(tc, test_multi_gpu_auto);
    tcase_add_test(tc, test_multi_gpu_auto_cli);
    tcase_add_test(tc, test_multi_gpu_auto_hybrid_cli);
#endif
}
