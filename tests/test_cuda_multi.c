/* test_cuda_multi.c: one model split over several devices (forward.c's layer split, the backend's
 * use_devices / set_device / copy_peer; docs/gpu.md "Several GPUs"). In the host build the stand-ins give
 * RCK_SHIM_DEVICES fake devices, each allocation belonging to one and every kernel, copy and cuBLAS call
 * checked to use only the current device's memory; on a GPU machine the same tests run over the real
 * devices when there are enough of them (otherwise each says it is skipped and why). A split changes where
 * the layers run, not their arithmetic: every log-prob is bitwise the one-device run's. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "rc_cuda.h"
#ifdef RC_TEST_EMULATE
#include "shim_control.h"
#endif
#include "safetensors.h"
#include "util.h"

#include "fixtures.h"
#include "testutil.h"

#include "test_cuda.h"

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

static void multi_run(const rc_model *m, const rc_numerics *num, rc_kernels k, int n, const int64_t *split,
                      multi_result *r)
{
    const int64_t V = m->cfg.vocab, R = k_lens[0] + k_lens[1] + k_lens[2];
    rc_backend *be = backend_n(k, n, split);
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, be, num, MB, MT, MB * MT, &e) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(e->n_stages, n);
    memcpy(r->split, e->stage_l0, sizeof e->stage_l0);
    int32_t tok[MB * MT];
    for (int64_t i = 0; i < MB * MT; i++)
        tok[i] = (int32_t)((i * 7 + 3) % V);
    r->full = malloc(sizeof(float) * R * V);
    r->dec = malloc(sizeof(float) * 4 * MB * V);
    ck_assert(r->full && r->dec);
    ck_assert_msg(rc_full_forward(e, tok, k_lens, MB, r->full) == RC_OK, "%s", rc_last_error());
    const int64_t slots[MB] = {0, 1, 2};
    int64_t starts[MB] = {0, 0, 0}, n_new[MB] = {4, 4, 4};
    const int64_t last[MB] = {3, 7, 11}, one[MB] = {0, 1, 2};
    ck_assert_msg(rc_engine_step(e, slots, starts, n_new, MB, tok, last, MB, r->dec, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    for (int step = 1; step < 4; step++) {
        int32_t t1[MB];
        for (int b = 0; b < MB; b++) {
            starts[b] = 3 + step;
            n_new[b] = 1;
            t1[b] = (int32_t)((b * 5 + step * 3 + 1) % V);
        }
        ck_assert_msg(rc_engine_step(e, slots, starts, n_new, MB, t1, one, MB, r->dec + step * MB * V, NULL, NULL) ==
                          RC_OK,
                      "%s", rc_last_error());
    }
    ck_assert_int_eq(e->cur_stage, 0);
    rc_engine_free(e);
    rc_backend_destroy(be);
}

static void multi_free(multi_result *r)
{
    free(r->full);
    free(r->dec);
}

/* the fixtures split: a dense model, MoE models (top-k routing, the grouped sigmoid router with a shared
 * expert), latent attention, ALiBi (slopes on every device), the sliding layers' own RoPE table, a parallel
 * residual, sink logits */
static const char *const k_multi_fixtures[] = {"llama_gqa",       "qwen3_moe",   "deepseek_v3_moe", "deepseek_v3_mla",
                                               "bloom_alibi",     "gemma3_local", "neox_parallel",  "gptoss_sinks"};
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
    const int64_t L = m->cfg.n_layers, V = m->cfg.vocab, R = k_lens[0] + k_lens[1] + k_lens[2];
    rc_numerics num = rc_numerics_fp32();
    num.dt = inv ? RC_F32 : RC_BF16;
    const rc_kernels k = inv ? RC_KERNELS_INVARIANT : RC_KERNELS_ENGINE;
    multi_result one;
    multi_run(m, &num, k, 1, NULL, &one);
    int count = 3;
#ifndef RC_TEST_EMULATE
    char devname[256];
    ck_assert(rc_cuda_probe(&count, devname, sizeof devname) == RC_OK);
#endif
    struct {
        int n;
        int64_t split[3];
    } cases[] = {{2, {0}}, {2, {L - 1, 1}}, {3, {1, 1, L - 2}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].n > count || (cases[c].n == 3 && L < 3))
            continue;
        multi_result r;
#ifdef RC_TEST_EMULATE
        rck_shim_reset();
#endif
        multi_run(m, &num, k, cases[c].n, cases[c].split[0] ? cases[c].split : NULL, &r);
        char split[64] = "";
        for (int d = 0; d < cases[c].n; d++)
            snprintf(split + strlen(split), sizeof split - strlen(split), "%s%lld", d ? "," : "",
                     (long long)(r.split[d + 1] - r.split[d]));
#ifdef RC_TEST_EMULATE
        /* every device held memory, the residual stream crossed between them, no pointer strayed */
        for (int d = 0; d < cases[c].n; d++)
            ck_assert_msg(rck_shim_device_peak(d) > 0, "%s: device %d never used", name, d);
        ck_assert_int_gt(rck_shim_get(RCK_SHIM_PEER_COPIES), 0);
        ck_assert_int_eq(rck_shim_get(RCK_SHIM_BAD_POINTERS), 0);
        printf("%-10s %-16s %s %d devices, layers %-6s peak bytes per device:", TEST_NAME, name,
               inv ? "fp32 invariant" : "bf16 engine", cases[c].n, split);
        for (int d = 0; d < cases[c].n; d++)
            printf(" %lld", rck_shim_device_peak(d));
        printf(", %lld peer copies: bitwise\n", rck_shim_get(RCK_SHIM_PEER_COPIES));
#else
        printf("%-10s %-16s %s %d GPUs, layers %s: bitwise\n", TEST_NAME, name, inv ? "fp32 invariant" : "bf16 engine",
               cases[c].n, split);
#endif
        for (int d = 0; d < cases[c].n; d++)
            ck_assert_int_ge(r.split[d + 1] - r.split[d], 1);
        if (cases[c].split[0])
            for (int d = 0; d < cases[c].n; d++)
                ck_assert_int_eq(r.split[d + 1] - r.split[d], cases[c].split[d]);
        ck_assert_msg(memcmp(one.full, r.full, sizeof(float) * R * V) == 0, "%s: %d devices (%s): full forward differs",
                      name, cases[c].n, split);
        ck_assert_msg(memcmp(one.dec, r.dec, sizeof(float) * 4 * MB * V) == 0, "%s: %d devices (%s): decode differs",
                      name, cases[c].n, split);
        multi_free(&r);
    }
    multi_free(&one);
    rc_model_free(m);
}
END_TEST

/* What a split refuses, by name: a split that does not add up to the model's layers, a GPU without a layer,
 * more GPUs than layers, a hybrid model, fp8 weights */
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
    num.wq.kind = RC_WQ_FP8;
    ck_assert_int_eq(rc_engine_create(m, be, &num, 2, 8, 16, &e), RC_ERR_UNSUPPORTED);
    printf("%-10s refused: %s\n", TEST_NAME, rc_last_error());
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "fp8 weights"));
    num.wq.kind = RC_WQ_NONE;
    int64_t l0[RC_MAX_DEVICES + 1];
    ck_assert_int_eq(rc_layer_split(m, &num, RC_KERNELS_ENGINE, 4, NULL, 2, 8, 16, l0, NULL, NULL, NULL),
                     RC_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "--gpus 4: the model runs 3 layers"));
    rc_model_free(m);
    rc_test_source_path(dir, sizeof dir, "data/fixtures/%s", "qnext_hybrid");
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(rc_engine_create(m, be, &num, 2, 8, 16, &e), RC_ERR_UNSUPPORTED);
    printf("%-10s refused: %s\n", TEST_NAME, rc_last_error());
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "CPU backend"));
    rc_model_free(m);
    rc_backend_destroy(be);
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
 * heads, intermediate 1536, vocab 1024, 4 layers, an untied head): random fp32 weights written into dir. Its
 * tensors' element counts: per layer wide[], the model's own (embedding, head, final norm) own_n. */
enum { WH = 512, WI = 1536, WV = 1024, WL = 4, WNH = 8, WNKV = 2, WD = 64 };
static const char *const k_wide_kinds[] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                                           "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
static const int64_t k_wide_shapes[9][2] = {{WH, 0},       {WH, 0},  {WNH * WD, WH}, {WNKV * WD, WH}, {WNKV * WD, WH},
                                            {WH, WNH * WD}, {WI, WH}, {WI, WH},       {WH, WI}};

static int64_t wide_layer_n(void)
{
    int64_t n = 0;
    for (int k = 0; k < 9; k++)
        n += k_wide_shapes[k][0] * (k_wide_shapes[k][1] ? k_wide_shapes[k][1] : 1);
    return n;
}

static void write_wide_model(const char *dir)
{
    char path[4200], name[96], *hdr = malloc(1 << 15);
    ck_assert(hdr != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
            "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, "
            "\"rope_theta\": 10000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
            "\"attention_bias\": false, \"mlp_bias\": false, \"bos_token_id\": 1, \"eos_token_id\": 2}\n",
            WH, WI, WNH, WNKV, WD, WL, WV);
    ck_assert(fclose(f) == 0);
    /* the tensors in header order: embedding, the layers', the final norm, the head */
    int64_t n_t = 0, off = 0, sizes[64];
    size_t h = (size_t)snprintf(hdr, 1 << 15, "{");
    for (int t = -1; t <= 9 * WL + 1; t++) {
        int64_t r, c;
        if (t < 0)
            snprintf(name, sizeof name, "model.embed_tokens.weight"), r = WV, c = WH;
        else if (t == 9 * WL)
            snprintf(name, sizeof name, "model.norm.weight"), r = WH, c = 0;
        else if (t == 9 * WL + 1)
            snprintf(name, sizeof name, "lm_head.weight"), r = WV, c = WH;
        else
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", t / 9, k_wide_kinds[t % 9]),
                r = k_wide_shapes[t % 9][0], c = k_wide_shapes[t % 9][1];
        sizes[n_t++] = r * (c ? c : 1);
        if (c)
            h += (size_t)snprintf(hdr + h, (1 << 15) - h, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], "
                                  "\"data_offsets\": [%lld, %lld]}", t < 0 ? "" : ", ", name, (long long)r,
                                  (long long)c, (long long)off, (long long)(off + 4 * r * c));
        else
            h += (size_t)snprintf(hdr + h, (1 << 15) - h, ", \"%s\": {\"dtype\": \"F32\", \"shape\": [%lld], "
                                  "\"data_offsets\": [%lld, %lld]}", name, (long long)r, (long long)off,
                                  (long long)(off + 4 * r));
        off += 4 * sizes[n_t - 1];
    }
    h += (size_t)snprintf(hdr + h, (1 << 15) - h, "}");
    while (h % 8)
        hdr[h++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert(f != NULL);
    const uint64_t hl = h;
    ck_assert(fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, h, f) == h);
    int64_t most = 0; /* the largest tensor's floats */
    for (int64_t t = 0; t < n_t; t++)
        most = sizes[t] > most ? sizes[t] : most;
    float *buf = malloc(sizeof(float) * (size_t)most);
    ck_assert(buf != NULL);
    for (int64_t t = 0; t < n_t; t++) {
        const bool norm = t == n_t - 2 || (t > 0 && t < n_t - 2 && (t - 1) % 9 < 2);
        for (int64_t i = 0; i < sizes[t]; i++)
            buf[i] = norm ? 1.0f + frand(0.1f) : frand(t == 0 ? 1.0f : 0.05f);
        ck_assert(fwrite(buf, sizeof(float), (size_t)sizes[t], f) == (size_t)sizes[t]);
    }
    ck_assert(fclose(f) == 0);
    free(buf);
    free(hdr);
}

/* The whole device memory of a bf16 run -- weights, KV cache, activations and every workspace of the backend
 * (cuBLAS operands, attention scratch, the full log-probs), the shim's allocation peak -- at most 1.5 x the
 * reference (the checkpoint's elements at 2 bytes + the KV cache at 2 bytes: K and V of every layer, slot, KV
 * head, position and dimension), on a model whose weights outweigh the activations as at real sizes, one full
 * forward of 4 sequences of 16 tokens and their cached decode; inspect's estimate (its GPU memory line) within
 * the same bound. Split over 2 fake devices: each device's peak at most 1.5 x its own reference (its layers'
 * elements, device 0 also the embedding, final norm and head, and its layers' KV cache). */
START_TEST(test_device_memory_whole)
{
    char dir[64];
    ck_assert(rc_test_mkdtemp(dir, sizeof dir, "/tmp/rc_test_wide_") != NULL);
    write_wide_model(dir);
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    const int64_t B = 4, T = 16, rows = B * T;
    const long long layer_n = wide_layer_n(), own_n = 2LL * WV * WH + WH;
    ck_assert_int_eq(m->n_params, WL * layer_n + own_n); /* every tensor counted */
    const long long kv_layer = 2LL * 2 * B * WNKV * T * WD; /* K and V of one layer at 2 bytes */
    /* mlp_a and mlp_b ([rows, WI] each) at 2 bytes: half their fp32 bytes; and the bf16 copy of a GEMM's fp32
     * input for cuBLAS (ws_get keeps bytes + bytes / 4) then serves the K = hidden GEMMs only, no longer the
     * down projection's K = intermediate: each device's peak falls by both */
    const long long mlp_save = 2LL * rows * WI * 2, ws_half = 2LL * rows * WI, ws_half16 = 2LL * rows * WH;
    const long long peak_save = mlp_save + (ws_half + ws_half / 4) - (ws_half16 + ws_half16 / 4);
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
    ck_assert_int_eq(dm32.total - dm.total, mlp_save); /* the estimate: the buffers */
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
            for (int d = 0; d < n; d++) {
                const int64_t l0 = e->stage_l0[d], l1 = e->stage_l0[d + 1];
                const long long ref = 2LL * ((l1 - l0) * layer_n + (d == 0 ? own_n : 0)) + (l1 - l0) * kv_layer;
                const long long peak = rck_shim_device_peak(d);
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
                ck_assert_msg(peak32[d] - peak == peak_save, "GPU %d of %d: peak %lld with fp32 activations, %lld: "
                              "%lld less, expected %lld", d, n, peak32[d], peak, peak32[d] - peak, peak_save);
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
}
END_TEST

/* The CLI over the host build with 2 and 3 fake devices (RCK_SHIM_DEVICES in its environment): --gpus and
 * --layer-split give the statistics of one device to the digit, the device is named "N x ..."; --gpus on the
 * CPU, more GPUs than visible and a split that does not add up are refused by name */
static char g_out[1 << 16];

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
        snprintf(pf, sizeof pf, "%s/p.ids", pdir);
        FILE *f = fopen(pf, "w");
        ck_assert(f != NULL);
        for (int i = 0; i < 4; i++) /* token ids within the fixture's vocabulary of 128 */
            fprintf(f, "%d %d %d %d %d\n", 3 + i, 17 + 5 * i, 40 + i, 90 + 3 * i, 7 + 2 * i);
        fclose(f);
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
#endif

void multi_tests(TCase *tc)
{
    tcase_add_loop_test(tc, test_multi_gpu_bitwise, 0, 2 * N_MULTI);
    tcase_add_test(tc, test_multi_gpu_refused);
#ifdef RC_TEST_EMULATE
    tcase_add_test(tc, test_multi_gpu_faults);
    tcase_add_test(tc, test_multi_gpu_cli);
    tcase_add_test(tc, test_device_memory_whole);
#endif
}
