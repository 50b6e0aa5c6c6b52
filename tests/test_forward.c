/* The fp32 engine against Hugging Face transformers.
 *
 * For every fixture in data/fixtures/ (made by tools/fixtures/make_fixtures.py with
 * HF's own model classes), with invariant kernels, engine kernels and
 * OpenBLAS GEMMs (test cases vs_hf, vs_hf_engine, vs_hf_openblas), compare:
 *  - the batched full forward with HF's per-sequence forward (fp32 and fp64
 *    references): max |log-prob difference| <= 1e-5 over the whole vocabulary;
 *  - greedy KV-cached generation with HF generate(use_cache=True): the same
 *    tokens as HF's fp32 and fp64 runs, per-step log-probs over the whole
 *    vocabulary within 1e-5 of both;
 *  - cached decode vs our own full forward: <= 1e-5;
 *  - a batch of mixed lengths vs each sequence alone: <= 1e-6 with invariant
 *    kernels, <= 1e-5 with engine kernels and OpenBLAS (their summation order
 *    changes with the number of rows).
 * And, not for OpenBLAS: a forward over row chunks equals one pass bit for
 * bit (bf16, test_row_chunks); with invariant kernels only, the float64
 * reference forward against HF's fp64 (<= 1e-10) and the engine API's
 * errors. The measured maxima are printed (meson test -v) for the record. */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "forward64.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"

#include "fixtures.h"
#include "testutil.h"

#define N_FIXTURES RC_N_FIXTURE_MODELS
static const char *fx_name(int i) { return rc_fixture_models[i].name; }

/* The families added with this criterion: besides 1e-5 of HF, no further from
 * HF's true-fp64 log-probs than HF's own fp32 run is (max over the fixture;
 * of the older fixtures qwen2_bias is 6-9% beyond it on two paths and the
 * Baichuan, BLOOM and MPT fixtures 5-40% on OpenBLAS paths, olmo2_postnorm
 * 1.7% with the OpenBLAS GEMMs (1.718e-6 vs 1.689e-6), and of the MoE
 * fixtures the cached path of mixtral_fused (invariant kernels: 1.934e-6 from
 * HF fp64 where HF's fp32 is 1.885e-6, 2.6% beyond) and glm4_moe_air_fused
 * (OpenBLAS full forward: 3.884e-6 against 3.129e-6, its mean 4.845e-7
 * against 4.723e-7; every other path within), so they are not held to it).
 * qwen3_moe (weights stored in bf16) is within it on every path (the closest,
 * its OpenBLAS full forward: 1.629e-6 against 2.100e-6), and so is gptoss_sinks
 * (weights stored in bf16; its max 0.48-0.91 of HF's, build/fp64_criterion
 * data/fixtures/gptoss_sinks). gemma3_local is held
 * on its cached path only: its full forward is 1.842e-6 (invariant kernels)
 * and 2.289e-6 (engine) from HF fp64 where HF's fp32 is 1.790e-6, while the
 * OpenBLAS full forward (1.523e-6) and every cached path are within it. q35_moe and q35_dense (Qwen3.5
 * text, weights stored in bf16) are within it on every path (q35_moe's max 0.57-1.00 of HF's, its OpenBLAS
 * full forward equal to HF's 2.944e-6; q35_dense's 0.76-0.94; build/fp64_criterion data/fixtures/q35_moe,
 * q35_dense). */
static bool fp64_bound(const char *name)
{
    static const char *const k[] = {"qwen3_yarn", "qwen2_moe", "gemma2_softcap", "gemma3_local",
                                    "glm4_moe", "deepseek_v3_moe", "q35_moe", "qwen3_moe",
                                    "gptoss_sinks", "q35_dense"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(name, k[i]) == 0)
            return true;
    return false;
}

/* The families held to the fp64 criterion on the mean instead: the mean
 * |dlogp| from HF's true-fp64 log-probs over every position and vocabulary
 * entry no larger than HF's own fp32 run's (a systematic difference from HF
 * moves the mean; the max over a fixture is one element's rounding). Their
 * max is beyond HF fp32's on some path (olmo3_sliding's OpenBLAS full forward
 * 1.53x, phi3_longrope's and glm4_partial's up to 1.14x), their mean on every
 * path 0.72-0.99 of HF's (docs/numerics.md "Later families"); mixtral_fused,
 * gemma3_local (its full forward: the cached path is held to the max too) and
 * qnext_hybrid, whose max is beyond HF's on some path (up to 1.03x, 1.28x
 * and 2.00x), their mean 0.64-0.97 of HF's. That the max beyond HF's is the
 * draw of one element's rounding, not a difference from PyTorch's arithmetic,
 * is measured layer by layer, over other seeds of each fixture and against
 * HF's own fp32 in another summation order: docs/testing.md, "The fp64
 * criterion's max form". glm4_moe_air_fused is held to neither (its OpenBLAS
 * full forward's mean is 1.026x HF's, as the same section measures). */
static bool fp64_mean_bound(const char *name)
{
    static const char *const k[] = {"olmo3_sliding", "phi3_longrope", "glm4_partial", "mixtral_fused",
                                    "gemma3_local", "qnext_hybrid"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(name, k[i]) == 0)
            return true;
    return false;
}

/* the full forward's criterion: fp64_bound less the fixtures held on the cached path only */
static bool fp64_bound_full(const char *name)
{
    return fp64_bound(name) && strcmp(name, "gemma3_local") != 0;
}

typedef struct {
    rc_model *m;
    rc_safetensors *ref;
    int64_t B, T, V, P, N;
    int32_t *tokens, *lengths;        /* [B, T], [B] */
    float *fwd32;                     /* [B, T, V] */
    double *fwd64;                    /* [B, T, V] */
    int32_t *gprompt, *gplen;         /* [B, P], [B] */
    int32_t *gtok32, *gtok64;         /* [B, N] */
    float *glp32;                     /* [B, N, V] */
    double *glp64;                    /* [B, N, V] */
} fixture;

static char *fixture_dir(const char *name)
{
    char buf[4096];
    return strdup(rc_test_source_path(buf, sizeof buf, "data/fixtures/%s", name));
}

static const rc_st_tensor *need(const rc_safetensors *st, const char *name)
{
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "reference tensor %s missing", name);
    return t;
}

static void load_fixture(const char *name, fixture *f)
{
    memset(f, 0, sizeof *f);
    char *dir = fixture_dir(name);
    rc_status s = rc_model_load(dir, &f->m);
    ck_assert_msg(s == RC_OK, "load %s: %s", dir, rc_last_error());
    char *rp = rc_path_join(dir, "reference.safetensors");
    s = rc_st_open_file(rp, &f->ref);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    const rc_st_tensor *t = need(f->ref, "tokens");
    f->B = t->shape[0];
    f->T = t->shape[1];
    f->V = f->m->cfg.vocab;
    t = need(f->ref, "gen_prompts");
    f->P = t->shape[1];
    t = need(f->ref, "gen_tokens_f32");
    f->N = t->shape[1];
    const int64_t B = f->B, T = f->T, V = f->V, P = f->P, N = f->N;
    f->tokens = malloc(sizeof(int32_t) * B * T);
    f->lengths = malloc(sizeof(int32_t) * B);
    f->fwd32 = malloc(sizeof(float) * B * T * V);
    f->fwd64 = malloc(sizeof(double) * B * T * V);
    f->gprompt = malloc(sizeof(int32_t) * B * P);
    f->gplen = malloc(sizeof(int32_t) * B);
    f->gtok32 = malloc(sizeof(int32_t) * B * N);
    f->gtok64 = malloc(sizeof(int32_t) * B * N);
    f->glp32 = malloc(sizeof(float) * B * N * V);
    f->glp64 = malloc(sizeof(double) * B * N * V);
#define RD(fn, nm, nd, ...) \
    ck_assert_msg(fn(f->ref, nm, nd, (int64_t[]){__VA_ARGS__}, ptr) == RC_OK, "%s", rc_last_error())
    void *ptr;
    ptr = f->tokens;  RD(rc_st_read_i32, "tokens", 2, B, T);
    ptr = f->lengths; RD(rc_st_read_i32, "lengths", 1, B);
    rc_test_read_rows(f->ref, "forward_logprobs_f32", f->lengths, B, T, V, false, f->fwd32);
    rc_test_read_rows(f->ref, "forward_logprobs_f64", f->lengths, B, T, V, true, f->fwd64);
    ptr = f->gprompt; RD(rc_st_read_i32, "gen_prompts", 2, B, P);
    ptr = f->gplen;   RD(rc_st_read_i32, "gen_prompt_lengths", 1, B);
    ptr = f->gtok32;  RD(rc_st_read_i32, "gen_tokens_f32", 2, B, N);
    ptr = f->gtok64;  RD(rc_st_read_i32, "gen_tokens_f64", 2, B, N);
    ptr = f->glp32;   RD(rc_st_read_f32, "gen_logprobs_f32", 3, B, N, V);
    ptr = f->glp64;   RD(rc_st_read_f64, "gen_logprobs_f64", 3, B, N, V);
#undef RD
    free(rp);
    free(dir);
}

static void free_fixture(fixture *f)
{
    rc_model_free(f->m);
    rc_st_close(f->ref);
    free(f->tokens); free(f->lengths); free(f->fwd32); free(f->fwd64); free(f->gprompt);
    free(f->gplen); free(f->gtok32); free(f->gtok64); free(f->glp32); free(f->glp64);
}

static rc_backend *g_be;
static rc_kernels g_kernels = RC_KERNELS_INVARIANT;

static const char *gemm_name(void)
{
    return g_kernels == RC_KERNELS_INVARIANT ? "invariant" : g_kernels == RC_KERNELS_ENGINE ? "engine   " : "blas     ";
}

static rc_engine *make_engine(const fixture *f, int64_t slots, int64_t len, int64_t rows)
{
    rc_engine *e;
    rc_numerics num = rc_numerics_fp32();
    rc_status s = rc_engine_create(f->m, g_be, &num, slots, len, rows, &e);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    return e;
}

/* pack the fixture's forward sequences */
static int32_t *packed_tokens(const fixture *f, int64_t *lens, int64_t *total)
{
    int64_t n = 0;
    for (int64_t b = 0; b < f->B; b++) {
        lens[b] = f->lengths[b];
        n += lens[b];
    }
    int32_t *tok = malloc(sizeof(int32_t) * n);
    int64_t o = 0;
    for (int64_t b = 0; b < f->B; b++)
        for (int64_t t = 0; t < lens[b]; t++)
            tok[o++] = f->tokens[b * f->T + t];
    *total = n;
    return tok;
}

/* Full forward (all sequences in one batch) vs HF fp32 and fp64. */
START_TEST(test_full_forward_vs_hf)
{
    fixture f;
    load_fixture(fx_name(_i), &f);
    int64_t lens[64], total;
    int32_t *tok = packed_tokens(&f, lens, &total);
    rc_engine *e = make_engine(&f, f.B, f.T, total);
    float *out = malloc(sizeof(float) * total * f.V);
    ck_assert_msg(rc_full_forward(e, tok, lens, f.B, out) == RC_OK, "%s", rc_last_error());
    double d32 = 0, d64 = 0, hf = 0; /* hf: HF's own fp32 against its fp64 */
    double s64 = 0, shf = 0;         /* their sums (the means' numerators) */
    int64_t o = 0;
    for (int64_t b = 0; b < f.B; b++)
        for (int64_t t = 0; t < lens[b]; t++, o++)
            for (int64_t v = 0; v < f.V; v++) {
                double x = out[o * f.V + v];
                double a = fabs(x - f.fwd32[(b * f.T + t) * f.V + v]);
                double c = fabs(x - f.fwd64[(b * f.T + t) * f.V + v]);
                double h = fabs(f.fwd32[(b * f.T + t) * f.V + v] - f.fwd64[(b * f.T + t) * f.V + v]);
                d32 = a > d32 ? a : d32;
                d64 = c > d64 ? c : d64;
                hf = h > hf ? h : hf;
                s64 += c;
                shf += h;
            }
    printf("%-16s %s full forward   max|dlogp| vs HF fp32 %.3e  vs HF fp64 %.3e (HF fp32 vs fp64 %.3e)  (%lld "
           "positions x %lld vocab)\n",
           fx_name(_i), gemm_name(), d32, d64, hf, (long long)total, (long long)f.V);
    ck_assert_msg(d32 <= 1e-5, "%s: full forward vs HF fp32 differs by %g", fx_name(_i), d32);
    ck_assert_msg(d64 <= 1e-5, "%s: full forward vs HF fp64 differs by %g", fx_name(_i), d64);
    ck_assert_msg(!fp64_bound_full(fx_name(_i)) || d64 <= hf, "%s: full forward %g from HF fp64, HF fp32 only %g",
                  fx_name(_i), d64, hf);
    printf("%-16s %s full forward   mean|dlogp| vs HF fp64 %.3e (HF fp32 vs fp64 %.3e)\n", fx_name(_i),
           gemm_name(), s64 / (double)(total * f.V), shf / (double)(total * f.V));
    ck_assert_msg(!fp64_mean_bound(fx_name(_i)) || s64 <= shf,
                  "%s: full forward mean %g from HF fp64, HF fp32 only %g", fx_name(_i),
                  s64 / (double)(total * f.V), shf / (double)(total * f.V));
    rc_engine_free(e);
    free(out);
    free(tok);
    free_fixture(&f);
}
END_TEST

static int32_t argmax(const float *x, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

/* Greedy KV-cached generation for the whole batch vs HF generate(). */
START_TEST(test_greedy_generate_vs_hf)
{
    fixture f;
    load_fixture(fx_name(_i), &f);
    const int64_t B = f.B, N = f.N, V = f.V;
    rc_engine *e = make_engine(&f, B, f.P + N, B * f.P);
    int64_t slots[64], starts[64], n_new[64], rows[64];
    int64_t total = 0;
    int32_t *tok = malloc(sizeof(int32_t) * B * f.P);
    for (int64_t b = 0; b < B; b++) {
        /* reverse slot order, so slot != batch index */
        slots[b] = B - 1 - b;
        starts[b] = 0;
        n_new[b] = f.gplen[b];
        for (int64_t t = 0; t < n_new[b]; t++)
            tok[total + t] = f.gprompt[b * f.P + t];
        total += n_new[b];
        rows[b] = total - 1; /* last prompt row */
    }
    float *lp = malloc(sizeof(float) * B * V);
    int32_t *gen = malloc(sizeof(int32_t) * B * N);
    double d32 = 0, d64 = 0, hf = 0; /* hf: HF's own fp32 against its fp64 */
    double s64 = 0, shf = 0;         /* their sums (the means' numerators) */
    /* step 0 from the prefill, steps 1..N-1 from single-token decode */
    ck_assert_msg(rc_engine_step(e, slots, starts, n_new, B, tok, rows, B, lp, NULL, NULL) == RC_OK,
                  "%s", rc_last_error());
    for (int64_t step = 0; step < N; step++) {
        for (int64_t b = 0; b < B; b++) {
            for (int64_t v = 0; v < V; v++) {
                double a = fabs((double)lp[b * V + v] - f.glp32[(b * N + step) * V + v]);
                double c = fabs((double)lp[b * V + v] - f.glp64[(b * N + step) * V + v]);
                double h = fabs(f.glp32[(b * N + step) * V + v] - f.glp64[(b * N + step) * V + v]);
                d32 = a > d32 ? a : d32;
                d64 = c > d64 ? c : d64;
                hf = h > hf ? h : hf;
                s64 += c;
                shf += h;
            }
            gen[b * N + step] = argmax(lp + b * V, V);
            ck_assert_msg(gen[b * N + step] == f.gtok32[b * N + step],
                          "%s: seq %lld step %lld: greedy token %d, HF fp32 chose %d", fx_name(_i),
                          (long long)b, (long long)step, gen[b * N + step], f.gtok32[b * N + step]);
            ck_assert_int_eq(gen[b * N + step], f.gtok64[b * N + step]);
        }
        if (step + 1 == N)
            break;
        for (int64_t b = 0; b < B; b++) {
            starts[b] += n_new[b];
            n_new[b] = 1;
            tok[b] = gen[b * N + step];
            rows[b] = b;
        }
        ck_assert_msg(rc_engine_step(e, slots, starts, n_new, B, tok, rows, B, lp, NULL, NULL) == RC_OK,
                      "%s", rc_last_error());
    }
    printf("%-16s %s cached greedy  max|dlogp| vs HF fp32 %.3e  vs HF fp64 %.3e (HF fp32 vs fp64 %.3e)  (%lld x "
           "%lld tokens identical)\n",
           fx_name(_i), gemm_name(), d32, d64, hf, (long long)B, (long long)N);
    ck_assert_msg(d32 <= 1e-5, "%s: cached decode vs HF fp32 generate differs by %g", fx_name(_i), d32);
    ck_assert_msg(d64 <= 1e-5, "%s: cached decode vs HF fp64 generate differs by %g", fx_name(_i), d64);
    ck_assert_msg(!fp64_bound(fx_name(_i)) || d64 <= hf, "%s: cached decode %g from HF fp64, HF fp32 only %g",
                  fx_name(_i), d64, hf);
    printf("%-16s %s cached greedy  mean|dlogp| vs HF fp64 %.3e (HF fp32 vs fp64 %.3e)\n", fx_name(_i),
           gemm_name(), s64 / (double)(B * N * V), shf / (double)(B * N * V));
    ck_assert_msg(!fp64_mean_bound(fx_name(_i)) || s64 <= shf,
                  "%s: cached decode mean %g from HF fp64, HF fp32 only %g", fx_name(_i),
                  s64 / (double)(B * N * V), shf / (double)(B * N * V));
    rc_engine_free(e);
    free(lp);
    free(gen);
    free(tok);
    free_fixture(&f);
}
END_TEST

/* Token-by-token cached decode of the forward sequences (all sequences in one
 * batch, dropping out as they end) vs our full forward. */
START_TEST(test_cached_vs_full)
{
    fixture f;
    load_fixture(fx_name(_i), &f);
    int64_t lens[64], total;
    int32_t *tok = packed_tokens(&f, lens, &total);
    const int64_t B = f.B, V = f.V;
    rc_engine *e = make_engine(&f, B, f.T, total);
    float *full = malloc(sizeof(float) * total * V);
    float *dec = malloc(sizeof(float) * total * V);
    ck_assert(rc_full_forward(e, tok, lens, B, full) == RC_OK);
    int64_t off[64], o = 0;
    for (int64_t b = 0; b < B; b++) {
        off[b] = o;
        o += lens[b];
    }
    float *lp = malloc(sizeof(float) * B * V);
    for (int64_t t = 0; t < f.T; t++) {
        int64_t slots[64], starts[64], n_new[64], rows[64], ids[64], n = 0;
        int32_t step_tok[64];
        for (int64_t b = 0; b < B; b++)
            if (t < lens[b]) {
                slots[n] = b;
                starts[n] = t;
                n_new[n] = 1;
                step_tok[n] = tok[off[b] + t];
                rows[n] = n;
                ids[n] = b;
                n++;
            }
        ck_assert_msg(rc_engine_step(e, slots, starts, n_new, n, step_tok, rows, n, lp, NULL, NULL) == RC_OK,
                      "%s", rc_last_error());
        for (int64_t i = 0; i < n; i++)
            memcpy(dec + (off[ids[i]] + t) * V, lp + i * V, sizeof(float) * V);
    }
    double d = 0;
    for (int64_t i = 0; i < total * V; i++) {
        double a = fabs((double)dec[i] - full[i]);
        d = a > d ? a : d;
    }
    printf("%-16s %s cached decode vs full forward max|dlogp| %.3e\n", fx_name(_i), gemm_name(), d);
    ck_assert_msg(d <= 1e-5, "%s: cached decode vs full forward differs by %g", fx_name(_i), d);
    rc_engine_free(e);
    free(full);
    free(dec);
    free(lp);
    free(tok);
    free_fixture(&f);
}
END_TEST

/* bf16 with --upcast norm on a model whose q / k norms feed a partial RoPE (glm4_moe: use_qk_norm, rotary 0.5;
 * qnext_hybrid: per-head q / k norms, rotary 0.25): the dims RoPE passes leave it in the dtype as the rotated ones
 * do (PyTorch's torch.cat of the two parts is one tensor of one dtype), so the KV cache is the dtype's, as without
 * the upcast (the CPU attention refuses a stored value the cache would round: the norm's fp32 output there once
 * reached the bf16 cache, an internal error); every cached step runs, and on glm4_moe with invariant kernels
 * cached decode equals the full forward (qnext_hybrid's linear layers are chunked in the full forward,
 * recurrent in decode) */
static const char *const k_partial_qk_norm[] = {"glm4_moe", "qnext_hybrid"};
START_TEST(test_upcast_norm_partial_qk_norm)
{
    fixture f;
    const char *name = k_partial_qk_norm[_i];
    load_fixture(name, &f);
    ck_assert(f.m->cfg.qk_norm != RC_QK_NORM_NONE && f.m->cfg.rotary_dim < f.m->cfg.head_dim);
    int64_t lens[64], total;
    int32_t *tok = packed_tokens(&f, lens, &total);
    const int64_t B = f.B, V = f.V;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    rc_engine_mem plain, up;
    ck_assert(rc_engine_mem_estimate(f.m, &num, true, g_kernels, B, f.T, total, &plain) == RC_OK);
    num.upcast = RC_UPCAST_NORM;
    ck_assert(rc_engine_mem_estimate(f.m, &num, true, g_kernels, B, f.T, total, &up) == RC_OK);
    ck_assert_msg(up.kv_cache == plain.kv_cache, "%s: upcast=norm KV cache %lld bytes, without %lld", name,
                  (long long)up.kv_cache, (long long)plain.kv_cache);
    rc_engine *e;
    ck_assert_msg(rc_engine_create(f.m, g_be, &num, B, f.T, total, &e) == RC_OK, "%s", rc_last_error());
    float *full = malloc(sizeof(float) * total * V), *lp = malloc(sizeof(float) * V);
    ck_assert_msg(rc_full_forward(e, tok, lens, B, full) == RC_OK, "%s", rc_last_error());
    int64_t diff = 0;
    for (int64_t t = 0; t < lens[1]; t++) { /* the longest sequence, one token at a time */
        const int64_t slot = 1, start = t, one = 1, row = 0;
        ck_assert_msg(rc_engine_step(e, &slot, &start, &one, 1, &tok[lens[0] + t], &row, 1, lp, NULL, NULL) == RC_OK,
                      "%s: %s", name, rc_last_error());
        diff += memcmp(lp, full + (lens[0] + t) * V, sizeof(float) * V) != 0;
    }
    printf("%s bf16 upcast=norm: KV cache %lld bytes; %lld of %lld decode steps differ from the full forward\n", name,
           (long long)up.kv_cache, (long long)diff, (long long)lens[1]);
    if (strcmp(name, "glm4_moe") == 0)
        ck_assert_int_eq(diff, 0);
    rc_engine_free(e);
    free(full);
    free(lp);
    free(tok);
    free_fixture(&f);
}
END_TEST

/* A mixed-length batch equals each sequence run alone. */
START_TEST(test_batch_vs_alone)
{
    fixture f;
    load_fixture(fx_name(_i), &f);
    int64_t lens[64], total;
    int32_t *tok = packed_tokens(&f, lens, &total);
    const int64_t V = f.V;
    rc_engine *e = make_engine(&f, f.B, f.T, total);
    float *full = malloc(sizeof(float) * total * V);
    float *alone = malloc(sizeof(float) * total * V);
    ck_assert(rc_full_forward(e, tok, lens, f.B, full) == RC_OK);
    int64_t o = 0;
    for (int64_t b = 0; b < f.B; b++) {
        ck_assert(rc_full_forward(e, tok + o, &lens[b], 1, alone + o * V) == RC_OK);
        o += lens[b];
    }
    double d = 0;
    for (int64_t i = 0; i < total * V; i++) {
        double a = fabs((double)alone[i] - full[i]);
        d = a > d ? a : d;
    }
    printf("%-16s %s batch vs alone max|dlogp| %.3e\n", fx_name(_i), gemm_name(), d);
    /* invariant kernels: demand 1e-6 (it measures 0); engine kernels and
     * OpenBLAS change their summation order with M: the engine tolerance */
    double tol = g_kernels == RC_KERNELS_INVARIANT ? 1e-6 : 1e-5;
    ck_assert_msg(d <= tol, "%s: batched vs alone differs by %g", fx_name(_i), d);
    rc_engine_free(e);
    free(full);
    free(alone);
    free(tok);
    free_fixture(&f);
}
END_TEST

/* A forward call over row chunks (forward.c chunk_rows_for) gives what one
 * pass over all rows gives: B sequences of L tokens in one forward (more
 * than 1280 rows: chunks of 1024 and the rest) equal, bit for bit, the same
 * sequences in two forwards of half the rows (no chunks: the same GEMM M
 * class, the same attention key length). bf16, so the 2-byte weights and KV
 * cache run too; the bundled model (GPT-NeoX), and fixtures with learned
 * positions (GPT-2), an embedding LayerNorm and ALiBi (BLOOM), ALiBi from
 * the last key and clip_qkv (MPT), RMSNorm and GQA (Llama). */
static const struct {
    const char *dir;
    int64_t B, L;
} k_chunk_models[] = {{"data/models/pythia-rc-tiny", 8, 200}, {"data/fixtures/gpt2_learned", 40, 40},
                      {"data/fixtures/bloom_alibi", 40, 40},  {"data/fixtures/mpt_alibi", 40, 40},
                      {"data/fixtures/llama_gqa", 40, 40}};

START_TEST(test_row_chunks)
{
    char p[4096];
    rc_model *m = NULL;
    rc_test_source_path(p, sizeof p, "%s", k_chunk_models[_i].dir);
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    const int64_t B = k_chunk_models[_i].B, L = k_chunk_models[_i].L, V = m->cfg.vocab, R = B * L;
    ck_assert(L <= m->cfg.max_pos);
    int64_t lens[64];
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)R);
    uint64_t st = 12345;
    for (int64_t i = 0; i < R; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((st >> 33) % (uint64_t)V);
    }
    for (int64_t b = 0; b < B; b++)
        lens[b] = L;
    rc_numerics num = rc_numerics_fp32();
    num.dt = RC_BF16;
    rc_engine *e;
    ck_assert_msg(rc_engine_create(m, g_be, &num, B, L, R, &e) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(e->chunk_rows < R, "the call is not chunked (%lld rows)", (long long)e->chunk_rows);
    ck_assert(e->kv.dt == RC_BF16 && e->w.layers[0].w_up.dt == RC_BF16); /* 2-byte weights and cache */
    float *one = malloc(sizeof(float) * (size_t)(R * V)), *two = malloc(sizeof(float) * (size_t)(R * V));
    ck_assert(rc_full_forward(e, tok, lens, B, one) == RC_OK);
    ck_assert(rc_full_forward(e, tok, lens, B / 2, two) == RC_OK);
    ck_assert(rc_full_forward(e, tok + R / 2, lens, B / 2, two + (R / 2) * V) == RC_OK);
    int64_t diff = 0;
    for (int64_t i = 0; i < R * V; i++)
        diff += rc_f32_bits(one[i]) != rc_f32_bits(two[i]);
    printf("row chunks %-28s %s: %lld of %lld log-probs differ\n", k_chunk_models[_i].dir, gemm_name(),
           (long long)diff, (long long)(R * V));
    ck_assert_msg(diff == 0, "%s: %lld log-probs differ between the chunked and the whole pass", k_chunk_models[_i].dir,
                  (long long)diff);
    rc_engine_free(e);
    rc_model_free(m);
    free(one);
    free(two);
    free(tok);
}
END_TEST

/* The float64 reference forward (--reference fp64) against HF in float64:
 * every position, every vocabulary entry. */
START_TEST(test_forward64_vs_hf)
{
    fixture f;
    load_fixture(fx_name(_i), &f);
    const int64_t V = f.V;
    double mx = 0;
    for (int64_t b = 0; b < f.B; b++) {
        const int64_t n = f.lengths[b];
        int64_t *rows = malloc(sizeof(int64_t) * n * V);
        int32_t *tg = malloc(sizeof(int32_t) * n * V);
        double *out = malloc(sizeof(double) * n * V);
        for (int64_t t = 0; t < n; t++)
            for (int64_t v = 0; v < V; v++) {
                rows[t * V + v] = t;
                tg[t * V + v] = (int32_t)v;
            }
        ck_assert_msg(rc_forward64(f.m, f.tokens + b * f.T, n, 1.0, rows, tg, n * V, out) == RC_OK, "%s",
                      rc_last_error());
        for (int64_t i = 0; i < n * V; i++)
            mx = fmax(mx, fabs(out[i] - f.fwd64[(b * f.T) * V + i]));
        free(rows);
        free(tg);
        free(out);
    }
    printf("%-16s float64 forward max|dlogp| vs HF fp64 %.3e\n", fx_name(_i), mx);
    ck_assert_msg(mx <= 1e-10, "%s: float64 forward differs from HF fp64 by %g", fx_name(_i), mx);
    free_fixture(&f);
}
END_TEST

/* Engine API errors are reported, not crashes. */
START_TEST(test_engine_errors)
{
    fixture f;
    load_fixture("neox_parallel", &f);
    rc_engine *e = make_engine(&f, 2, 8, 8);
    int64_t slot = 0, start = 0, n = 1, row = 0;
    int32_t bad = (int32_t)f.V;
    ck_assert_int_eq(rc_engine_step(e, &slot, &start, &n, 1, &bad, &row, 1, NULL, NULL, NULL),
                     RC_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "outside the vocabulary"));
    int32_t ok = 1;
    start = 8;
    ck_assert_int_eq(rc_engine_step(e, &slot, &start, &n, 1, &ok, &row, 1, NULL, NULL, NULL),
                     RC_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "cache length"));
    start = 0;
    slot = 2;
    ck_assert_int_eq(rc_engine_step(e, &slot, &start, &n, 1, &ok, &row, 1, NULL, NULL, NULL),
                     RC_ERR_USAGE);
    rc_engine *big;
    rc_numerics num = rc_numerics_fp32();
    ck_assert_int_eq(rc_engine_create(f.m, g_be, &num, 1, f.m->cfg.max_pos + 1, 4, &big), RC_ERR_USAGE);
    rc_engine_free(e);
    free_fixture(&f);
    /* longrope past original_max_position_embeddings (phi3_longrope: 32): a step whose last
     * position is 32 or more is refused, in a prefill and in a decode step, and so is the fp64
     * reference of 33 tokens; position 31 runs */
    load_fixture("phi3_longrope", &f);
    const int64_t orig = f.m->cfg.rope_orig_max_pos;
    ck_assert_int_eq(orig, 32);
    e = make_engine(&f, 1, orig + 4, orig + 4);
    int32_t toks[40] = {0};
    float *lp = malloc(sizeof(float) * (size_t)f.V);
    slot = 0, start = 0, n = orig, row = orig - 1;
    ck_assert_msg(rc_engine_step(e, &slot, &start, &n, 1, toks, &row, 1, lp, NULL, NULL) == RC_OK, "%s",
                  rc_last_error());
    start = orig, n = 1, row = 0;
    ck_assert_int_eq(rc_engine_step(e, &slot, &start, &n, 1, toks, &row, 1, lp, NULL, NULL), RC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "33 positions with longrope RoPE: past "
                                                  "original_max_position_embeddings 32"));
    start = 0, n = orig + 1, row = orig;
    ck_assert_int_eq(rc_engine_step(e, &slot, &start, &n, 1, toks, &row, 1, lp, NULL, NULL), RC_ERR_UNSUPPORTED);
    int64_t rows64[1] = {orig};
    double out64[1];
    ck_assert_int_eq(rc_forward64(f.m, toks, orig + 1, 1.0, rows64, toks, 1, out64), RC_ERR_UNSUPPORTED);
    free(lp);
    rc_engine_free(e);
    free_fixture(&f);
}
END_TEST

/* The fixture table (tests/fixtures.h) against data/fixtures: every folder
 * there with a reference.safetensors is a row, and each row's model_type is
 * its config.json's. */
START_TEST(test_fixture_table)
{
    char dir[1024];
    rc_test_source_path(dir, sizeof dir, "data/fixtures");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: cannot open", dir);
    int found = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char ref[1400];
        snprintf(ref, sizeof ref, "%s/%s/reference.safetensors", dir, e->d_name);
        if (e->d_name[0] == '.' || access(ref, R_OK) != 0)
            continue;
        int row = -1;
        for (int i = 0; i < RC_N_FIXTURE_MODELS; i++)
            if (strcmp(rc_fixture_models[i].name, e->d_name) == 0)
                row = i;
        ck_assert_msg(row >= 0, "data/fixtures/%s has a reference.safetensors but no row in tests/fixtures.h", e->d_name);
        found++;
    }
    closedir(d);
    ck_assert_int_eq(found, RC_N_FIXTURE_MODELS);
    for (int i = 0; i < RC_N_FIXTURE_MODELS; i++) {
        char cfg[1400];
        snprintf(cfg, sizeof cfg, "%s/%s/config.json", dir, rc_fixture_models[i].name);
        json_error_t err;
        json_t *j = json_load_file(cfg, 0, &err);
        ck_assert_msg(j != NULL, "%s: %s", cfg, err.text);
        const char *mt = json_string_value(json_object_get(j, "model_type"));
        ck_assert_msg(mt && strcmp(mt, rc_fixture_models[i].model_type) == 0, "%s: model_type %s, tests/fixtures.h says %s",
                      cfg, mt ? mt : "(none)", rc_fixture_models[i].model_type);
        json_decref(j);
    }
}
END_TEST

static void setup(void)
{
    g_kernels = RC_KERNELS_INVARIANT;
    ck_assert(rc_backend_cpu_create(0, g_kernels, &g_be) == RC_OK);
}
static void setup_engine(void)
{
    g_kernels = RC_KERNELS_ENGINE;
    ck_assert(rc_backend_cpu_create(0, g_kernels, &g_be) == RC_OK);
}
static void setup_blas(void)
{
    g_kernels = RC_KERNELS_BLAS;
    ck_assert(rc_backend_cpu_create(0, g_kernels, &g_be) == RC_OK);
}
static void teardown(void) { rc_backend_destroy(g_be); }

int main(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("vs_hf");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_fixture_table);
    tcase_add_loop_test(tc, test_full_forward_vs_hf, 0, N_FIXTURES);
    tcase_add_loop_test(tc, test_greedy_generate_vs_hf, 0, N_FIXTURES);
    tcase_add_loop_test(tc, test_cached_vs_full, 0, N_FIXTURES);
    tcase_add_loop_test(tc, test_batch_vs_alone, 0, N_FIXTURES);
    tcase_add_loop_test(tc, test_row_chunks, 0, (int)(sizeof k_chunk_models / sizeof *k_chunk_models));
    tcase_add_test(tc, test_engine_errors);
    tcase_add_loop_test(tc, test_upcast_norm_partial_qk_norm, 0,
                        (int)(sizeof k_partial_qk_norm / sizeof *k_partial_qk_norm));
    tcase_add_loop_test(tc, test_forward64_vs_hf, 0, N_FIXTURES);
    suite_add_tcase(s, tc);
    /* the same comparisons with engine kernels */
    TCase *te = tcase_create("vs_hf_engine");
    tcase_add_checked_fixture(te, setup_engine, teardown);
    tcase_set_timeout(te, 300);
    tcase_add_loop_test(te, test_full_forward_vs_hf, 0, N_FIXTURES);
    tcase_add_loop_test(te, test_greedy_generate_vs_hf, 0, N_FIXTURES);
    tcase_add_loop_test(te, test_cached_vs_full, 0, N_FIXTURES);
    tcase_add_loop_test(te, test_batch_vs_alone, 0, N_FIXTURES);
    tcase_add_loop_test(te, test_row_chunks, 0, (int)(sizeof k_chunk_models / sizeof *k_chunk_models));
    suite_add_tcase(s, te);
    /* and with OpenBLAS GEMMs */
    if (!rc_test_no_blas("vs_hf_openblas")) {
        TCase *tb = tcase_create("vs_hf_openblas");
        tcase_add_checked_fixture(tb, setup_blas, teardown);
        tcase_set_timeout(tb, 300);
        tcase_add_loop_test(tb, test_full_forward_vs_hf, 0, N_FIXTURES);
        tcase_add_loop_test(tb, test_greedy_generate_vs_hf, 0, N_FIXTURES);
        tcase_add_loop_test(tb, test_cached_vs_full, 0, N_FIXTURES);
        tcase_add_loop_test(tb, test_batch_vs_alone, 0, N_FIXTURES);
        suite_add_tcase(s, tb);
    }
    return rc_test_run(s);
}
